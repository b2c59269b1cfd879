"""Chapter 9: Reading smarter.

reading smarter - request size, queue depth, readahead, parallel reads, mmap,
and the path from a file to GPU memory.
"""

TITLE = 'Reading smarter'
