"""Chapter 10: Tracing the I/O: mmap vs read().

tracing the I/O of a Megatron-style token data set, mmap vs read().
"""

TITLE = 'Tracing the I/O: mmap vs read()'
