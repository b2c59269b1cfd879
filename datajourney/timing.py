"""Timing helpers shared by the GPU chapters: device time between CUDA events, and host time
between two device synchronisations."""
from __future__ import annotations

import time

import torch


def cuda_ms(fn, calls: int = 1) -> float:
    """Device time in ms of ``calls`` back-to-back calls of ``fn``, between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def synced_ms(fn, repeats: int) -> list[float]:
    """Host-clock ms of ``fn`` between two device synchronisations, ``repeats`` times after one
    untimed warm-up call."""
    out = []
    for k in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if k:
            out.append((time.perf_counter() - t0) * 1e3)
    return out
