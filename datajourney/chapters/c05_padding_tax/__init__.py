"""Chapter 5: The padding tax.

the padding tax - how many of the positions a GPU computes are real tokens.
"""

TITLE = 'The padding tax'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('all_samples', 'real tokens per position, packed ÷ padded')
