"""Chapter 5: The padding tax.

the padding tax - how many of the positions a GPU computes are real tokens.
"""

TITLE = 'The padding tax'
