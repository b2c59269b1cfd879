"""Chapter 2: Random vs sequential reads.

random small-file reads vs one sequential shard, in plain Python.
"""

TITLE = 'Random vs sequential reads'
