"""Chapter 8: Threads, processes and the GIL.

threads, processes and the GIL - the multiprocess DataLoader against thread pipelines.
"""

TITLE = 'Threads, processes and the GIL'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('?image_decode.loader', 'worker processes or threads for decoding photos')
