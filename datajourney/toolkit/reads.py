"""Cold and warm reads of files: plain, sequential, ``O_DIRECT``, single-block latency, ``dd``.

The readers every storage chapter times, and the cache-state helper that makes a read cold
(purge, then a ``mincore`` residency check) or warm (one untimed read first).

Example::

    import pathlib
    import tempfile

    from datajourney.toolkit import reads

    path = pathlib.Path(tempfile.mkdtemp()) / "shard.bin"
    path.write_bytes(bytes(16 << 20))
    summary, quantiles = reads.measure_latency(path, reads=200, runs=1, method="fadvise")
    print(summary[["series", "p50_us", "p99_us"]])      # single 4 KiB reads: O_DIRECT after a purge, then cached
    n, seconds = reads.dd_read(path)                   # dd's view of the same file, 1 MiB blocks
    print(f"dd: {n / seconds / 1e6:,.0f} MB/s")
"""
from __future__ import annotations

import mmap
import os
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from datajourney.toolkit import pagecache

__all__ = ["CACHE_STATES", "LATENCY_BLOCK", "NAND_READ_FLOOR_US", "read_files", "read_sequential", "read_direct",
           "read_latencies", "dd_read", "timed", "set_cache_state", "measure_latency"]

CACHE_STATES = ("cold", "warm")


#: The size of one request in the latency check (the smallest read a file system serves).
LATENCY_BLOCK = 4096


#: A single 4 KiB random read from NAND flash (the memory of ordinary NVMe SSDs) takes at
#: least about this long at queue depth 1: the flash array read alone is tens of
#: microseconds, before the controller, the bus and the kernel add theirs. A median well
#: below it means something faster than flash served the request (a cache below the page
#: cache: a hypervisor's, a RAID controller's, a storage array's), or a device built on
#: another memory (storage-class memory).
NAND_READ_FLOOR_US = 40.0


# --------------------------------------------------------------------------- readers
def read_files(paths: Sequence[Path], size: int) -> int:
    """Open, read and close each file in the given order; return the bytes read."""
    buf = bytearray(size)
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            total += f.readinto(buf)
    return total


def read_sequential(path: Path, chunk: int, max_bytes: int | None = None) -> int:
    """Read one file front to back in ``chunk``-byte ``read`` calls into a reused buffer
    (at most ``max_bytes`` when given); return the bytes read."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while (max_bytes is None or total < max_bytes) and (n := f.readinto(view)):
            total += n
    return total


def read_direct(path: Path, chunk: int, max_bytes: int | None = None) -> int:
    """Like :func:`read_sequential` but with ``O_DIRECT`` (no page cache), page-aligned buffer.

    Raises ``OSError`` where the file system refuses ``O_DIRECT`` (older tmpfs, some overlay and
    network file systems).
    """
    if not hasattr(os, "O_DIRECT"):
        raise OSError("O_DIRECT is not available on this platform")
    buf = mmap.mmap(-1, chunk)  # anonymous mappings are page aligned
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    total = 0
    try:
        limit = max_bytes or os.fstat(fd).st_size
        while total < limit:
            n = os.readv(fd, [buf])
            if n == 0:
                break
            total += n
    finally:
        os.close(fd)
        buf.close()
    return total


def read_latencies(path: Path, offsets: Sequence[int], *, size: int = LATENCY_BLOCK, direct: bool = True) -> np.ndarray:
    """Time each ``size``-byte ``pread`` at ``offsets``, one request at a time; microseconds.

    With ``direct`` the file is opened with ``O_DIRECT``: every request goes to the block
    device (no page cache, no readahead), so its time is the latency of whatever serves
    the block below the guest's page cache.
    """
    if direct and not hasattr(os, "O_DIRECT"):
        raise OSError("O_DIRECT is not available on this platform")
    buf = mmap.mmap(-1, size)
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    out = np.empty(len(offsets), dtype=np.float64)
    clock = time.perf_counter_ns
    try:
        for i, off in enumerate(offsets):
            t0 = clock()
            n = os.preadv(fd, [buf], int(off))
            out[i] = (clock() - t0) / 1e3
            if n != size:
                raise OSError(f"short read at offset {off}: {n} of {size} bytes")
    finally:
        os.close(fd)
        buf.close()
    return out


def dd_read(path: Path, block: int = 1 << 20) -> tuple[int, float]:
    """Read a file with ``dd of=/dev/null``; (bytes, seconds) as dd itself reports them."""
    out = subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", f"bs={block}"],
        capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, check=True,
    )
    m = re.search(r"^(\d+) bytes .* copied, ([0-9.eE+-]+) s", out.stderr, re.M)
    if not m:
        raise RuntimeError(f"could not parse dd output: {out.stderr!r}")
    return int(m.group(1)), float(m.group(2))


def timed(fn, *args) -> tuple[int, float]:
    """``fn(*args)`` (a reader returning the bytes it read) and the host seconds it took."""
    t0 = time.perf_counter()
    n = fn(*args)
    return n, time.perf_counter() - t0


# --------------------------------------------------------------------------- cache state
def set_cache_state(paths: Sequence[Path], state: str, method: str) -> dict:
    """Purge (cold) or pre-read (warm) ``paths``; return what was done and the residency."""
    if state == "cold":
        rep = pagecache.purge(paths, method)
        return {
            "purge_method": rep.method,
            "resident_before_purge": rep.before["fraction"],
            "resident_at_start": rep.after["fraction"],
        }
    res = pagecache.warm(paths)
    return {"purge_method": "none (warm)", "resident_before_purge": None, "resident_at_start": res.fraction}


#: The quantiles of the latency distribution kept in the result (percent).
LATENCY_QUANTILES = [0, 1, 5] + list(range(10, 91, 10)) + [95, 99, 99.9, 100]


def measure_latency(
    path: Path, *, reads: int, runs: int, method: str, seed: int = 0, size: int = LATENCY_BLOCK, progress=None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Latency of single ``size``-byte reads at random aligned offsets of ``path``, one at a time.

    In every run, after a purge: a first ``O_DIRECT`` pass over ``reads`` random offsets, a
    second ``O_DIRECT`` pass over the same offsets (in another order), then a buffered pass
    over them after an untimed one (page-cache hits: the floor of Python plus a system
    call). A second pass much faster than the first means the first filled a cache below
    the guest; two equal passes mean both were served from the same place.

    Returns (per-run summary with percentiles, pooled quantiles for a distribution chart).
    Where ``O_DIRECT`` is refused the summary holds one row with the error.
    """
    blocks = os.path.getsize(path) // size
    rows, pooled = [], {}
    for run in range(runs):
        rng = np.random.default_rng(seed + 3000 + run)
        offsets = rng.choice(blocks, size=reads, replace=reads > blocks) * size
        info = set_cache_state([path], "cold", method)
        passes = [("O_DIRECT, first pass", offsets, True), ("O_DIRECT, second pass", rng.permutation(offsets), True)]
        try:
            results = [(name, read_latencies(path, offs, size=size, direct=d)) for name, offs, d in passes]
        except OSError as e:
            rows.append(dict(series="O_DIRECT, first pass", run=run, reads=0, error=f"{type(e).__name__}: {e}", **info))
            results = []
        read_latencies(path, offsets, size=size, direct=False)           # untimed: make them resident
        results.append(("page cache (warm)", read_latencies(path, rng.permutation(offsets), size=size, direct=False)))
        for name, us in results:
            q = np.percentile(us, [1, 10, 50, 90, 99])
            rows.append(dict(series=name, run=run, reads=len(us), request_bytes=size, mean_us=float(us.mean()),
                             p1_us=q[0], p10_us=q[1], p50_us=q[2], p90_us=q[3], p99_us=q[4],
                             max_us=float(us.max()), error=None, **info))
            pooled.setdefault(name, []).append(us)
        if progress:
            progress.update(1)
    cdf = [dict(series=name, quantile=qq / 100, us=float(v))
           for name, parts in pooled.items()
           for qq, v in zip(LATENCY_QUANTILES, np.percentile(np.concatenate(parts), LATENCY_QUANTILES))]
    return pd.DataFrame(rows), pd.DataFrame(cdf)
