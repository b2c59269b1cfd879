"""Chapter 7: The full picture.

the full picture - a profiled training loop fed from files or from shards.
"""

TITLE = 'The full picture'
