"""Chapter 7: The full picture.

the full picture - a profiled training loop fed from files or from shards.
"""

TITLE = 'The full picture'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('best_vs_ceiling', "the best image pipeline against its step's own ceiling")
