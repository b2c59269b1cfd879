"""Chapter 2: Random vs sequential reads.

random small-file reads vs one sequential shard, in plain Python.
"""

TITLE = 'Random vs sequential reads'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('cold_gap', 'one shard read in order ÷ shuffled small files, cold')
