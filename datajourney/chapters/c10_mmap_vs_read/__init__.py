"""Chapter 10: Tracing the I/O: mmap vs read().

tracing the I/O of a Megatron-style token data set, mmap vs read().
"""

TITLE = 'Tracing the I/O: mmap vs read()'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('posix_events', 'events a POSIX tracer sees, read() ÷ mmap')
