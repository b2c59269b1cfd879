"""Chapter 4: CPU starvation.

CPU starvation - when preprocessing cannot keep the accelerator busy.
"""

TITLE = 'CPU starvation'
