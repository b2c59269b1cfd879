"""Chapter 3: The DataLoader hides the problem.

the PyTorch DataLoader over small files vs over one shard.
"""

TITLE = 'The DataLoader hides the problem'
