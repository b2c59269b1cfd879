"""Chapter 12: Your pipeline, diagnosed.

the reader's pipeline diagnosed from the other chapters' results.
"""

TITLE = 'Your pipeline, diagnosed'
