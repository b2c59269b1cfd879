"""Host-to-device copy ceilings: a second measurement path that owes nothing to PyTorch (CuPy's own
pinned buffer), and the rule that turns a set of pinned host-to-device measurements into a ceiling."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from datajourney.core.units import GB


def independent_ceiling(size: int, *, repeats: int, warmup: int) -> dict:
    """Pinned H2D through CuPy (its own pinned allocation and ``cudaMemcpyAsync``), CUDA events,
    median of ``repeats`` copies: a second path that owes nothing to PyTorch's copy. ``ms`` holds
    every timed copy, so that a caller can keep them."""
    try:
        import cupy as cp
    except ImportError:
        return dict(available=False, note="CuPy is not installed: no second measurement path")
    mem = cp.cuda.alloc_pinned_memory(size)
    host = np.frombuffer(mem, dtype=np.uint8, count=size)
    host[:] = 1
    dev = cp.empty(size, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    times = []
    with stream:
        for k in range(warmup + repeats):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            cp.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, size, cp.cuda.runtime.memcpyHostToDevice,
                                        stream.ptr)
            end.record(stream)
            end.synchronize()
            if k >= warmup:
                times.append(cp.cuda.get_elapsed_time(start, end))
    med = float(np.median(times))
    return dict(available=True, path="CuPy cudaMemcpyAsync, pinned, CUDA events", size=size, repeats=repeats,
                median_ms=med, GBps=size / (med / 1e3) / GB, min_ms=float(min(times)), max_ms=float(max(times)),
                ms=[float(t) for t in times])


def highest(measurements: Iterable[dict]) -> dict | None:
    """The ceiling of a set of pinned host-to-device measurements: the one with the highest ``GBps``
    (each a dict with at least ``GBps`` and ``source``), with ``of``, how many there were. Taking the
    highest of every measurement, whichever path made it, is what makes it a ceiling: no measurement
    of the set can exceed it, however the bus drifted between them. None for an empty set."""
    rows = [m for m in measurements if m.get("GBps") is not None and np.isfinite(m["GBps"])]
    if not rows:
        return None
    top = max(rows, key=lambda m: float(m["GBps"]))
    return dict(top, of=len(rows))
