"""Chapter 11: GPU to GPU.

GPU to GPU — DDP gradient traffic, NCCL transports, and what helps.
"""

TITLE = 'GPU to GPU'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('scaling_direct', "the share of one GPU's throughput each GPU loses under DDP, direct path")
#: It needs a host with at least this many GPUs, so a reference run runs it apart from the others.
MIN_GPUS = 2
