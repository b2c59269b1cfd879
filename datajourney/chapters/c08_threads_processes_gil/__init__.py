"""Chapter 8: Threads, processes and the GIL.

threads, processes and the GIL - the multiprocess DataLoader against thread pipelines.
"""

TITLE = 'Threads, processes and the GIL'
