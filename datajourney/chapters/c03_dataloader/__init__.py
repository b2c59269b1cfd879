"""Chapter 3: The DataLoader hides the problem.

the PyTorch DataLoader over small files vs over one shard.
"""

TITLE = 'The DataLoader hides the problem'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('published_w4', 'the same layouts behind a DataLoader with 4 workers')
