"""Chapter 11: GPU to GPU.

GPU to GPU — DDP gradient traffic, NCCL transports, and what helps.
"""

TITLE = 'GPU to GPU'
