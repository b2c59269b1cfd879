"""Chapter 4: CPU starvation.

CPU starvation - when preprocessing cannot keep the accelerator busy.
"""

TITLE = 'CPU starvation'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('workers_to_keep_up', 'workers needed to keep up with the step, with real (not sleeping) per-sample work')
