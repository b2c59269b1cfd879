"""Chapter 9: Reading smarter.

reading smarter - request size, queue depth, readahead, parallel reads, mmap,
and the path from a file to GPU memory.
"""

TITLE = 'Reading smarter'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('to_gpu', 'a cold file into GPU memory through pinned buffers')
