"""Byte units, one definition each: decimal (MB, GB: as the published figures and ``dd`` count)
and binary (KiB, MiB, GiB: as buffers and block sizes are sized)."""

KB = 1e3
MB = 1e6
GB = 1e9
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
