"""Chapter 9: reading smarter - request size, queue depth, readahead, parallel reads, mmap,
and the path from a file to GPU memory.

What is measured, each on one large file of random bytes (a verified data set from
:mod:`datajourney.toolkit.datasets`), cold (page cache purged and the purge verified with
:mod:`datajourney.toolkit.pagecache`) unless said otherwise:

1. **Request size and queue depth** (:func:`request_grid`): ``pread`` at random aligned
   offsets, request sizes × threads (each thread keeps one request in flight, so the
   thread count is the queue depth the program asks for), buffered and ``O_DIRECT``. Beside
   the program's own view (bandwidth, latency percentiles) the device's view from
   ``/proc/diskstats`` over the same interval (:class:`DiskStats`): requests completed and
   merged, sectors, time busy → the average request size and queue depth the device
   actually saw ("asked vs seen"), and its utilisation.
2. **Readahead** (:func:`readahead_experiment`): the same sequential and random buffered
   reads with the device's ``read_ahead_kb`` set to several values (root only; the
   original value is restored in a ``finally`` and recorded), and per file with
   ``posix_fadvise`` hints (no root needed).
3. **Random small reads** (:func:`random_small_reads`): one thread vs a thread pool issuing
   ``pread`` vs ``mmap`` + touch; IOPS and latency, with the device's view. Beside them
   (:func:`uring_random_reads`), one thread with one io_uring ring at several queue depths,
   buffered and ``O_DIRECT`` (optional: the ``liburing`` binding of the ``ch9`` extra; where it
   does not import or the kernel refuses a ring, the run records a labelled skip).
4. **To GPU memory** (:func:`to_gpu`): pageable read + copy, pinned double-buffered
   asynchronous copy, mmap + pinned copy, kvikio (cuFile; its compatibility mode is
   detected and labelled, never called GDS), and the data already in RAM or in GPU memory;
   GB/s, CPU time per GB, against the PCIe ceiling (chapter 6's measurement) and the
   device's cold sequential read (chapter 2's ``dd`` read, on the same file). First
   (:func:`pipeline_sweep`) path (b) runs at several chunk sizes and buffer counts, buffered and
   ``O_DIRECT`` (aligned pinned buffers, no page cache), each run paired with a ``dd`` read
   measured in the same shuffled run; path (b) is then measured at the sweep's best setting
   (:func:`choose_path_b`; a parameter given as a value wins over the sweep).
5. **GDS or not** (:func:`gds_status`).
6. **Scheduler, file system and a virtual disk's "cold"**: the fingerprint's storage facts,
   and chapter 2's QD1 ``O_DIRECT`` latency check (:func:`datajourney.reads.measure_latency`).

GB/s and MB/s use 10^9 and 10^6 bytes. The chapter's text is built by
:mod:`datajourney.book.pages.reading`.
"""
from __future__ import annotations

import functools
import mmap
import os
import resource
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from datajourney.chapters.c09_reading_smarter.params import (  # noqa: F401 - re-exported
    AUTO,
    CHAPTER,
    FADVISE,
    GPU_PATHS,
    MODES,
    READAHEAD_SYSFS,
    Params,
)
from datajourney.chapters.c09_reading_smarter.sweep import sweep_summary
from datajourney.core.params import ParameterError, memory, positive_int
from datajourney.core.units import GB, MB
from datajourney.toolkit import datasets, pagecache, reads, transfer
from datajourney.toolkit import sysfs as sysfs_settings
from datajourney.toolkit.diskstats import SECTOR, DiskStats, _diskstats_line, block_device  # noqa: F401  # noqa: F401

ALIGN = 4096
#: Latency percentiles kept per cell.
PCTS = (50, 90, 99)
#: A physical NVMe SSD's QD1 4 KiB random read, as commonly quoted (µs): below the low end, a cache
#: under the guest answered. Rendered by code, never typed into prose.
PHYSICAL_NVME_QD1_US = (60.0, 100.0)


def seen_over_asked(dev: dict, asked: int) -> float | None:
    """What the storage read for this process ÷ what it asked for (device-wide bytes where the
    per-process count is missing)."""
    got = dev["own_bytes"] if dev.get("own_bytes") is not None else dev.get("dev_bytes")
    return got / asked if got is not None and asked else None


# --------------------------------------------------------------------------- readers
def aligned_buffer(n: int) -> mmap.mmap:
    """A page-aligned buffer of ``n`` bytes (anonymous mappings are page aligned; O_DIRECT needs it)."""
    return mmap.mmap(-1, max(n, 1))


def open_file(path, direct: bool) -> int:
    if direct and not hasattr(os, "O_DIRECT"):
        raise OSError("O_DIRECT is not available on this platform")
    return os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))


def random_offsets(file_size: int, size: int, n: int, seed: int) -> np.ndarray:
    """``n`` offsets, aligned to ``size`` (and to :data:`ALIGN`), of whole requests inside the file."""
    step = max(size, ALIGN)
    slots = max(1, (file_size - size) // step + 1)
    return np.random.default_rng(seed).integers(0, slots, n) * step


def pread_load(path, *, size: int, threads: int, direct: bool, seconds: float, max_bytes: int,
               seed: int = 0, offsets: np.ndarray | None = None) -> dict:
    """``threads`` threads each issue one ``size``-byte ``pread`` at a time at random aligned offsets
    (or at ``offsets``, shared out in order) until ``seconds`` pass or ``max_bytes`` are read.

    Returns bytes, seconds, requests and each request's latency (µs). ``os.preadv`` releases the
    GIL, so the threads' requests are in flight together: the queue depth the program asks for is
    ``threads``."""
    positive_int("threads", threads)
    positive_int("size", size)
    if direct and size % ALIGN:
        raise ParameterError("request_sizes", size, f"multiples of {ALIGN:,} bytes with O_DIRECT")
    file_size = os.path.getsize(path)
    if size > file_size:
        raise ParameterError("request_sizes", size, f"sizes up to the file size ({file_size:,} bytes)")
    fd = open_file(path, direct)
    per_thread_cap = max(1, max_bytes // size // threads) if offsets is None else None
    lat: list[list[float]] = [[] for _ in range(threads)]
    done = [0] * threads
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)
    if offsets is not None:
        shares = np.array_split(np.asarray(offsets), threads)
    else:
        shares = [random_offsets(file_size, size, per_thread_cap, seed * 1000 + k) for k in range(threads)]
    deadline = [0.0]
    clock = time.perf_counter_ns

    def work(k: int) -> None:
        buf = aligned_buffer(size)
        out = lat[k]
        try:
            barrier.wait()
            end = deadline[0]
            for off in shares[k]:
                t0 = clock()
                n = os.preadv(fd, [buf], int(off))
                t1 = clock()
                if n <= 0:
                    raise OSError(f"read returned {n} at offset {off}")
                out.append((t1 - t0) / 1e3)
                done[k] += n
                if t1 > end:
                    break
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            errors.append(e)
        finally:
            buf.close()

    pool = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    for t in pool:
        t.start()
    try:
        t0 = time.perf_counter()
        deadline[0] = time.perf_counter_ns() + int(seconds * 1e9)
        barrier.wait()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    if errors:
        raise errors[0]
    us = np.concatenate([np.asarray(x, dtype=np.float64) for x in lat]) if any(lat) else np.zeros(0)
    return dict(bytes=int(sum(done)), seconds=elapsed, requests=int(us.size), latencies_us=us)


def mmap_touch(path, offsets: np.ndarray, *, size: int = ALIGN, advice: str | None = None,
               seconds: float = float("inf")) -> dict:
    """Map the file and read ``size`` bytes at each offset (a copy out of the mapping, so every page
    is touched and a missing page faults in); ``advice``: ``"RANDOM"``/``"SEQUENTIAL"`` (madvise)."""
    file_size = os.path.getsize(path)
    clock = time.perf_counter_ns
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), file_size, access=mmap.ACCESS_READ)
    try:
        if advice:
            m.madvise(getattr(mmap, f"MADV_{advice}"))
        view = memoryview(m)
        out = bytearray(size)
        lat = []
        total = 0
        end = clock() + (seconds * 1e9 if np.isfinite(seconds) else 1e30)
        t_start = time.perf_counter()
        for off in offsets:
            t0 = clock()
            out[:] = view[int(off):int(off) + size]
            t1 = clock()
            lat.append((t1 - t0) / 1e3)
            total += size
            if t1 > end:
                break
        elapsed = time.perf_counter() - t_start
        view.release()
    finally:
        m.close()
    return dict(bytes=total, seconds=elapsed, requests=len(lat), latencies_us=np.asarray(lat))


def read_chunks(path, chunk: int, fadvise: str = "none", max_bytes: int | None = None) -> int:
    """Buffered sequential ``read`` in ``chunk`` bytes after an optional ``posix_fadvise`` hint."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        if fadvise != "none":
            os.posix_fadvise(f.fileno(), 0, 0, getattr(os, f"POSIX_FADV_{fadvise}"))
        while (max_bytes is None or total < max_bytes) and (n := f.readinto(view)):
            total += n
    return total


def read_random(path, offsets: np.ndarray, size: int, fadvise: str = "none", seconds: float = float("inf")) -> dict:
    """Buffered ``pread`` of ``size`` bytes at each offset, one at a time, after an optional fadvise hint."""
    with open(path, "rb", buffering=0) as f:
        if fadvise != "none":
            os.posix_fadvise(f.fileno(), 0, 0, getattr(os, f"POSIX_FADV_{fadvise}"))
        fd = f.fileno()
        buf = bytearray(size)
        t0 = time.perf_counter()
        end = t0 + seconds
        n = total = 0
        for off in offsets:
            total += os.preadv(fd, [buf], int(off))
            n += 1
            if time.perf_counter() > end:
                break
        return dict(bytes=total, requests=n, seconds=time.perf_counter() - t0)


# --------------------------------------------------------------------------- cache state
def make_cold(path, method: str) -> dict:
    rep = pagecache.purge([path], method)
    return {"purge_method": rep.method, "resident_at_start": rep.after["fraction"]}


def _lat_summary(us: np.ndarray) -> dict:
    if us.size == 0:
        return {f"p{p}_us": None for p in PCTS} | {"mean_us": None}
    q = np.percentile(us, PCTS)
    return {f"p{p}_us": float(v) for p, v in zip(PCTS, q)} | {"mean_us": float(us.mean())}


# --------------------------------------------------------------------------- experiment 1
def request_grid(path, *, sizes: Sequence[int], threads: Sequence[int], modes: Sequence[str], runs: int,
                 seconds: float, max_bytes: int, method: str, disk: DiskStats, seed: int = 0,
                 progress=None) -> pd.DataFrame:
    """Every (size, threads, mode) cell, cold, in a shuffled order per run; program's and device's view."""
    cells = [(s, t, m) for s in sizes for t in threads for m in modes]
    rows = []
    for run in range(runs):
        for k in np.random.default_rng(seed + 100 + run).permutation(len(cells)):
            size, th, mode = cells[k]
            info = make_cold(path, method)
            a = disk.snapshot()
            try:
                r = pread_load(path, size=size, threads=th, direct=mode == "O_DIRECT", seconds=seconds,
                               max_bytes=max_bytes, seed=seed + run * 7919 + int(k))
                err = None
            except OSError as e:
                r, err = dict(bytes=0, seconds=float("nan"), requests=0, latencies_us=np.zeros(0)), \
                    f"{type(e).__name__}: {e}"
            b = disk.snapshot()
            dev = DiskStats.delta(a, b)
            rows.append(dict(size=size, threads=th, mode=mode, run=run, bytes=r["bytes"], seconds=r["seconds"],
                             requests=r["requests"], MBps=r["bytes"] / r["seconds"] / MB if r["bytes"] else None,
                             IOPS=r["requests"] / r["seconds"] if r["requests"] else None,
                             **_lat_summary(r["latencies_us"]), **dev,
                             seen_over_asked=seen_over_asked(dev, r["bytes"]), error=err, **info))
            if progress:
                progress.update(1)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- experiment 2
#: The readahead setting cannot be changed here (no root, read-only sysfs, no block device).
SysfsError = sysfs_settings.SysfsError


def readahead_file(disk: str | None) -> Path:
    if not disk:
        raise SysfsError("the data directory is not on a block device: no read_ahead_kb to set")
    return Path(f"/sys/block/{disk}/queue/read_ahead_kb")


def can_set_readahead(disk: str | None) -> tuple[bool, str]:
    """(True, "") when this process may write the device's read_ahead_kb, else (False, why)."""
    try:
        f = readahead_file(disk)
    except SysfsError as e:
        return False, str(e)
    if not f.exists():
        return False, f"{f} does not exist"
    if not os.access(f, os.W_OK):
        return False, f"no permission to write {f} (needs root)"
    return True, ""


@contextmanager
def readahead_kb(disk: str | None, value: int, log: list | None = None, _file: Path | None = None,
                 _state: Path | None = None):
    """Set the device's ``read_ahead_kb`` to ``value`` for the ``with`` block and restore the original
    value afterwards, always: journaled and under a lock shared by every run
    (:func:`datajourney.toolkit.sysfs.changed`), so a killed run's change is undone by the next one and two
    runs never measure under each other's value. Every change and restore is appended to ``log`` with the
    value read back."""
    f = _file or readahead_file(disk)
    original = None
    try:
        with sysfs_settings.changed(f, int(value), state=_state) as original:
            now = int(f.read_text())
            if log is not None:
                log.append(dict(file=str(f), original=int(original), set=int(value), read_back=now))
            yield now
    finally:
        if log is not None and original is not None:
            log.append(dict(file=str(f), restored=int(original), read_back=int(f.read_text())))


def readahead_experiment(path, *, values_kb: Sequence[int], fadvise: Sequence[str], runs: int, seq_chunk: int,
                         seq_bytes: int, rand_reads: int, rand_seconds: float, method: str, disk_name: str | None,
                         sysfs: bool, disk: DiskStats, seed: int = 0, log: list | None = None,
                         progress=None) -> pd.DataFrame:
    """Cold sequential (``seq_chunk`` reads of ``seq_bytes``) and random (4 KiB) buffered reads, under each
    readahead value (``sysfs``) and each fadvise hint (at the device's own readahead)."""
    file_size = os.path.getsize(path)
    offsets = random_offsets(file_size, ALIGN, rand_reads, seed + 55)
    settings = ([("read_ahead_kb", v, "none") for v in values_kb] if sysfs else []) + \
        [("fadvise", None, h) for h in fadvise]
    rows = []
    for run in range(runs):
        for k in np.random.default_rng(seed + 200 + run).permutation(len(settings)):
            kind, value, hint = settings[k]
            for pattern in ("sequential", "random"):
                ctx = readahead_kb(disk_name, value, log) if kind == "read_ahead_kb" else _nothing()
                with ctx as ra:
                    info = make_cold(path, method)
                    a = disk.snapshot()
                    t0 = time.perf_counter()
                    if pattern == "sequential":
                        n = read_chunks(path, seq_chunk, hint, seq_bytes)
                        req, s = n // seq_chunk, time.perf_counter() - t0
                    else:
                        r = read_random(path, offsets, ALIGN, hint, rand_seconds)
                        n, req, s = r["bytes"], r["requests"], r["seconds"]
                    dev = DiskStats.delta(a, disk.snapshot())
                rows.append(dict(setting=kind, read_ahead_kb=ra if kind == "read_ahead_kb" else None,
                                 fadvise=hint, pattern=pattern, run=run, bytes=n, requests=req, seconds=s,
                                 MBps=n / s / MB, IOPS=req / s, request_bytes=seq_chunk if pattern == "sequential"
                                 else ALIGN, **dev,
                                 seen_over_asked=seen_over_asked(dev, n), **info))
                if progress:
                    progress.update(1)
    return pd.DataFrame(rows)


@contextmanager
def _nothing():
    yield None


# --------------------------------------------------------------------------- experiment 3
def random_small_reads(path, *, reads: int, pool_threads: Sequence[int], runs: int, seconds: float, method: str,
                 disk: DiskStats, seed: int = 0, progress=None) -> pd.DataFrame:
    """Cold 4 KiB reads at the same random offsets: one thread, thread pools, mmap (+ MADV_RANDOM)."""
    file_size = os.path.getsize(path)
    variants = [("pread, 1 thread", 1)] + [("pread, thread pool", t) for t in pool_threads] + \
        [("mmap + touch", 1), ("mmap + MADV_RANDOM", 1)]
    rows = []
    for run in range(runs):
        offsets = random_offsets(file_size, ALIGN, reads, seed + 300 + run)
        for k in np.random.default_rng(seed + 400 + run).permutation(len(variants)):
            mode, th = variants[k]
            info = make_cold(path, method)
            a = disk.snapshot()
            if mode.startswith("pread"):
                r = pread_load(path, size=ALIGN, threads=th, direct=False, seconds=seconds, max_bytes=reads * ALIGN,
                               offsets=offsets)
            else:
                r = mmap_touch(path, offsets, advice="RANDOM" if "RANDOM" in mode else None, seconds=seconds)
            dev = DiskStats.delta(a, disk.snapshot())
            rows.append(
                dict(
                    mode=mode,
                    threads=th,
                    run=run,
                    requests=r["requests"],
                    bytes=r["bytes"],
                    seconds=r["seconds"],
                    IOPS=r["requests"] / r["seconds"],
                    MBps=r["bytes"] / r["seconds"] / MB,
                    **_lat_summary(r["latencies_us"]),
                    **dev,
                    seen_over_asked=seen_over_asked(dev, r["bytes"]),
                    **info,
                )
            )
            if progress:
                progress.update(1)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- experiment 3b: io_uring
#: Queue depths of the io_uring reader when the run does not name them.
URING_DEPTHS = (1, 16, 64)


#: The probe :func:`uring_status` runs in a child interpreter: a binding built for other CPUs dies there of an
#: illegal instruction instead of taking the chapter (or a test session) with it.
_URING_PROBE = ("import liburing as L\n"
                "v = getattr(L, '__version__', None) or getattr(getattr(L, 'version', None), '__version__', None)\n"
                "print(v)\n"
                "r = L.Ring()\n"
                "try:\n"
                "    L.io_uring_queue_init(2, r)\n"
                "except OSError as e:\n"
                "    print('refused', e)\n"
                "    raise SystemExit(3)\n"
                "L.io_uring_queue_exit(r)\n")


def uring_probe():
    """Run :data:`_URING_PROBE` in a child interpreter (a ``subprocess.CompletedProcess``)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", _URING_PROBE], capture_output=True, text=True, timeout=60)


@functools.lru_cache(maxsize=1)
def uring_status() -> dict:
    """Whether io_uring can be measured here: the optional ``liburing`` binding (the ``ch9`` extra)
    must import and run on this CPU, and the kernel must grant a ring (seccomp profiles of containers and the
    sysctl ``kernel.io_uring_disabled`` often refuse it). ``note`` says plainly which of these stopped it.
    Probed once per process, in a child interpreter."""
    import signal

    try:
        import liburing  # noqa: F401 - only whether it imports; it runs in the child
    except Exception as e:  # noqa: BLE001 - any import failure means: not measurable here
        return dict(available=False, version=None,
                    note=f"skipped: liburing does not import ({type(e).__name__}: {e})")
    p = uring_probe()
    out = p.stdout.splitlines()
    version = out[0] if out and out[0] != "None" else None
    if p.returncode < 0:
        name = signal.Signals(-p.returncode).name
        return dict(available=False, version=version,
                    note=f"skipped: the liburing binding cannot run on this CPU (it died of {name})")
    if p.returncode == 3:
        return dict(available=False, version=version,
                    note=f"skipped: the kernel refused an io_uring ring ({out[-1].removeprefix('refused ')})")
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no message"])[-1]
        return dict(available=False, version=version, note=f"skipped: liburing failed here ({last})")
    return dict(available=True, version=version, note="measured (liburing)")


def uring_load(path, offsets: np.ndarray, *, size: int, depth: int, direct: bool, seconds: float = float("inf"),
               keep: bool = False) -> dict:
    """One thread keeps up to ``depth`` ``size``-byte reads in flight through one io_uring ring:
    it submits a batch of reads at ``offsets`` (in order), reaps whatever completed, refills the
    freed slots, until every offset is read or ``seconds`` pass (then it drains what is in flight).

    Each request's latency is from just before the submit that carried it to the reap that saw it
    complete (µs). ``keep=True`` also returns each request's bytes, in the order of ``offsets``."""
    import liburing as L

    positive_int("uring_depths", depth)
    positive_int("size", size)
    if direct and size % ALIGN:
        raise ParameterError("size", size, f"a multiple of {ALIGN:,} bytes with O_DIRECT")
    offsets = np.asarray(offsets, dtype=np.int64)
    if direct and np.any(offsets % ALIGN):
        raise ParameterError("offsets", "unaligned", f"multiples of {ALIGN:,} bytes with O_DIRECT")
    fd = open_file(path, direct)
    ring, cqe = L.Ring(), L.Cqe()
    mem = aligned_buffer(size * depth)
    view = memoryview(mem)
    # readv into page-aligned slices of one anonymous mapping: O_DIRECT needs the alignment.
    slots = [view[i * size:(i + 1) * size] for i in range(depth)]
    iovs = [L.Iovec([s]) for s in slots]
    which = [0] * depth
    started = [0] * depth
    free = list(range(depth))
    lat: list[float] = []
    got: list[bytes | None] = [None] * len(offsets) if keep else []
    done = nxt = inflight = 0
    clock = time.perf_counter_ns
    try:
        L.io_uring_queue_init(max(2, depth), ring)
        try:
            t0 = time.perf_counter()
            end = clock() + (int(seconds * 1e9) if np.isfinite(seconds) else 1 << 62)
            while True:
                now = clock()
                while free and nxt < len(offsets) and now < end:
                    slot = free.pop()
                    sqe = L.io_uring_get_sqe(ring)
                    L.io_uring_prep_readv(sqe, fd, iovs[slot], int(offsets[nxt]))
                    L.io_uring_sqe_set_data64(sqe, slot)
                    which[slot], started[slot] = nxt, now
                    nxt += 1
                    inflight += 1
                if not inflight:
                    break
                L.io_uring_submit_and_wait(ring, 1)
                t1 = clock()
                ready = 0
                it = L.io_uring_cqe_iter_init(ring)
                while L.io_uring_cqe_iter_next(it, cqe):  # only cqe[0] is filled, once per completion
                    ready += 1
                    c = cqe[0]
                    slot, res = c.user_data, c.res
                    if res is None or res <= 0:
                        raise OSError(-(res or 0), f"io_uring read returned {res} at offset {offsets[which[slot]]}")
                    lat.append((t1 - started[slot]) / 1e3)
                    done += res
                    if keep:
                        got[which[slot]] = bytes(slots[slot][:res])
                    free.append(slot)
                L.io_uring_cq_advance(ring, ready)
                inflight -= ready
            elapsed = time.perf_counter() - t0
        finally:
            L.io_uring_queue_exit(ring)
    finally:
        os.close(fd)
        del iovs, slots, view  # the Iovec objects hold exports of the mapping; it is unmapped when they go
    out = dict(bytes=done, seconds=elapsed, requests=len(lat), latencies_us=np.asarray(lat, dtype=np.float64))
    if keep:
        out["data"] = got
    return out


def uring_random_reads(path, *, reads: int, depths: Sequence[int], runs: int, seconds: float, method: str,
                       disk: DiskStats, seed: int = 0, progress=None) -> pd.DataFrame:
    """Cold 4 KiB reads through io_uring at each queue depth, buffered and O_DIRECT, at the same random
    offsets as :func:`random_small_reads` (same seeds), so its rows sit beside the pread thread pool's."""
    file_size = os.path.getsize(path)
    variants = [(m, d) for m in MODES for d in depths]
    rows = []
    for run in range(runs):
        offsets = random_offsets(file_size, ALIGN, reads, seed + 300 + run)
        for k in np.random.default_rng(seed + 500 + run).permutation(len(variants)):
            mode, depth = variants[k]
            info = make_cold(path, method)
            a = disk.snapshot()
            r = uring_load(path, offsets, size=ALIGN, depth=depth, direct=mode == "O_DIRECT", seconds=seconds)
            dev = DiskStats.delta(a, disk.snapshot())
            rows.append(dict(mode=f"io_uring, {mode}", io_mode=mode, depth=depth, run=run, requests=r["requests"],
                             bytes=r["bytes"], seconds=r["seconds"], IOPS=r["requests"] / r["seconds"],
                             MBps=r["bytes"] / r["seconds"] / MB, **_lat_summary(r["latencies_us"]), **dev,
                             seen_over_asked=seen_over_asked(dev, r["bytes"]), **info))
            if progress:
                progress.update(1)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- experiment 4: to GPU memory
class Target:
    """Where bytes go: host staging buffers, asynchronous copies into a destination, events.

    :class:`CudaTarget` does it with PyTorch and CUDA; :class:`HostTarget` copies on the CPU at once
    (the same reader logic, testable without a GPU)."""

    def alloc(self, n: int): ...
    def host_buffer(self, n: int, pinned: bool) -> np.ndarray: ...
    def copy_async(self, dst, offset: int, src: np.ndarray, n: int): ...
    def copy_blocking(self, dst, offset: int, src: np.ndarray, n: int): ...
    def wait(self, event) -> None: ...
    def sync(self) -> None: ...


class HostTarget(Target):
    def alloc(self, n):
        return np.zeros(n, dtype=np.uint8)

    def host_buffer(self, n, pinned):
        return np.frombuffer(aligned_buffer(n), dtype=np.uint8)

    def copy_async(self, dst, offset, src, n):
        dst[offset:offset + n] = src[:n]
        return None

    copy_blocking = copy_async

    def wait(self, event):
        pass

    def sync(self):
        pass


class CudaTarget(Target):
    def __init__(self):
        import torch

        self.torch = torch
        self.stream = torch.cuda.Stream()

    def alloc(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, device="cuda")

    def host_buffer(self, n, pinned):
        t = self.torch.empty(n, dtype=self.torch.uint8, pin_memory=pinned)
        self._keep = getattr(self, "_keep", []) + [t]   # the numpy view must not outlive the tensor
        return t.numpy()

    def copy_async(self, dst, offset, src, n):
        torch = self.torch
        with torch.cuda.stream(self.stream):
            dst[offset:offset + n].copy_(torch.from_numpy(src[:n]), non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(self.stream)
        return ev

    def copy_blocking(self, dst, offset, src, n):
        dst[offset:offset + n].copy_(self.torch.from_numpy(src[:n]))

    def wait(self, event):
        if event is not None:
            event.synchronize()

    def sync(self):
        self.torch.cuda.synchronize()


def path_pageable(path, tgt: Target, dst, chunk: int) -> int:
    """(a) ``read`` into a pageable buffer, then a blocking copy (``.cuda()``) of each chunk, one after the other."""
    buf = np.empty(chunk, dtype=np.uint8)
    off = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(memoryview(buf)):
            tgt.copy_blocking(dst, off, buf, n)
            off += n
    tgt.sync()
    return off


def path_double_buffered(path, tgt: Target, dst, chunk: int, buffers: int = 2, *, bufs=None) -> int:
    """(b) ``read`` into one of ``buffers`` pinned buffers while the previous one is copied asynchronously:
    a buffer is refilled only after its copy's event completed, so the disk and the bus work at once."""
    bufs = bufs or [tgt.host_buffer(chunk, pinned=True) for _ in range(buffers)]
    events = [None] * len(bufs)
    off = i = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            k = i % len(bufs)
            tgt.wait(events[k])
            n = f.readinto(memoryview(bufs[k]))
            if not n:
                break
            events[k] = tgt.copy_async(dst, off, bufs[k], n)
            off += n
            i += 1
    tgt.sync()
    return off


def path_mmap_pinned(path, tgt: Target, dst, chunk: int, buffers: int = 2, *, bufs=None) -> int:
    """(c) map the file; copy each chunk out of the mapping (page faults read it) into a pinned buffer,
    then an asynchronous copy, double-buffered as in (b)."""
    size = os.path.getsize(path)
    bufs = bufs or [tgt.host_buffer(chunk, pinned=True) for _ in range(buffers)]
    events = [None] * len(bufs)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    try:
        m.madvise(mmap.MADV_SEQUENTIAL)
        src = np.frombuffer(m, dtype=np.uint8)
        off = i = 0
        while off < size:
            k = i % len(bufs)
            tgt.wait(events[k])
            n = min(chunk, size - off)
            np.copyto(bufs[k][:n], src[off:off + n])
            events[k] = tgt.copy_async(dst, off, bufs[k], n)
            off += n
            i += 1
        tgt.sync()
        del src
    finally:
        m.close()
    return off


def gds_status() -> dict:
    """Which path kvikio/cuFile takes here: 'GDS', 'cuFile compatibility mode' or 'KvikIO POSIX
    (compatibility) mode'; with the raw settings it was decided from. Never says GDS unless cuFile
    reports GDS available and KvikIO does not prefer its POSIX path."""
    out = dict(kvikio=False, version=None, compat_mode=None, compat_preferred=None, gds_available=None,
               nvidia_fs=os.path.exists("/proc/driver/nvidia-fs"), run_udev=os.path.isdir("/run/udev"),
               path="kvikio not installed", error=None)
    try:
        import kvikio
        import kvikio.cufile_driver as cd
        import kvikio.defaults as kd
    except Exception as e:  # noqa: BLE001 - not installed, or its libraries missing
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    out.update(kvikio=True, version=getattr(kvikio, "__version__", None))
    try:
        out["compat_mode"] = str(kd.get("compat_mode"))
        out["compat_preferred"] = bool(kd.is_compat_mode_preferred())
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}"
    try:
        out["gds_available"] = bool(cd.get("is_gds_available"))
    except Exception as e:  # noqa: BLE001 - libcufile not loadable
        out["gds_available"] = False
        out["error"] = out["error"] or f"{type(e).__name__}: {e}"
    out["path"] = classify_gds(out["compat_preferred"], out["gds_available"])
    return out


def classify_gds(compat_preferred: bool | None, gds_available: bool | None) -> str:
    """The label of kvikio's path: GDS only when both checks say so."""
    if compat_preferred is None:
        return "unknown (kvikio could not tell)"
    if compat_preferred:
        return "KvikIO POSIX (compatibility) mode"
    return "GDS" if gds_available else "cuFile compatibility mode"


def path_kvikio(path, tgt: Target, dst, threads: int, task_size: int) -> int:
    """(d) kvikio's ``CuFile.read`` straight into the GPU buffer, with its own thread pool."""
    import kvikio
    import kvikio.defaults as kd

    with kd.set({"num_threads": threads, "task_size": task_size}):
        with kvikio.CuFile(str(path), "r") as f:
            n = f.read(dst)
    tgt.sync()
    return int(n)


def read_fully(path, buf, *, max_call: int = 1 << 30) -> int:
    """Fill ``buf`` (a writable buffer as large as the file) from the file, looping: one ``read`` returns at
    most about 2 GiB on Linux (and may return less at any size), so a single call is not enough."""
    view = memoryview(buf).cast("B")
    total = 0
    with open(path, "rb", buffering=0) as f:
        while total < len(view):
            n = f.readinto(view[total:total + max_call])
            if not n:
                break
            total += n
    if total != os.path.getsize(path):
        raise OSError(f"read {total:,} of {os.path.getsize(path):,} bytes of {path}")
    return total


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure_path(fn: Callable[[], int], *, expected: int) -> dict:
    """Wall time, CPU time (user + system, all threads of this process) and bytes of one transfer."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    n = fn()
    t1, c1 = time.perf_counter(), cpu_seconds()
    if n != expected:
        raise RuntimeError(f"moved {n:,} bytes, expected {expected:,}")
    return dict(bytes=n, seconds=t1 - t0, cpu_s=c1 - c0, GBps=n / (t1 - t0) / GB, cpu_s_per_GB=(c1 - c0) / (n / GB))


def device_ceiling(path, *, runs: int, method: str) -> pd.DataFrame:
    """The device's cold sequential ceiling on this file: chapter 2's ``dd bs=1M`` after a purge."""
    rows = []
    for run in range(runs):
        info = make_cold(path, method)
        n, s = reads.dd_read(Path(path), 1 << 20)
        rows.append(dict(run=run, tool="dd bs=1M", bytes=n, seconds=s, GBps=n / s / GB, **info))
    return pd.DataFrame(rows)


def direct_allowed(path, size: int) -> tuple[bool, str | None]:
    """Whether path (b) can read ``path`` with ``O_DIRECT``: the file system must accept the flag and
    the file's size be a multiple of :data:`ALIGN`; otherwise why not (path (b) then reads through the
    page cache)."""
    if size % ALIGN:
        return False, f"file size not {ALIGN:,}-aligned"
    try:
        os.close(open_file(path, True))
    except OSError as e:
        return False, f"file system refused O_DIRECT ({e.strerror or e})"
    return True, None


def to_gpu(path, *, chunk: int, runs: int, kvikio_threads: Sequence[int], kvikio_task: int, method: str,
           tgt: Target | None = None, verify: bool = True, progress=None,
           path_b: dict | None = None) -> tuple[pd.DataFrame, dict]:
    """Every path from the file to (GPU) memory, cold, in a shuffled order per run; then the warm ones.
    Paths (a) and (c) stage through buffers of ``chunk`` bytes. Path (b), pinned and double-buffered, reads
    at ``path_b`` (``mode``, ``chunk``, ``buffers``, as :func:`choose_path_b` returns it; default: ``O_DIRECT``
    into two buffers of ``chunk``); ``O_DIRECT`` only where the file system allows it, else through the page
    cache. The setting used, and why, is returned in the second value's ``path_b``.

    Each transfer's destination is checked byte for byte against the file's contents (``verify``)."""
    tgt = tgt or CudaTarget()
    size = os.path.getsize(path)
    gds = gds_status()
    kv_label = "kvikio, " + ("GDS" if gds["path"] == "GDS" else gds["path"])
    dst = tgt.alloc(size)
    bufs = aligned_host_buffers(tgt, chunk, 2)
    pb = dict(path_b or dict(mode="O_DIRECT", chunk=chunk, buffers=2, by=None, best=None, settings=0))
    b_direct, b_note = direct_allowed(path, size) if pb["mode"] == "O_DIRECT" else (False, None)
    b_chunk = int(pb["chunk"])
    b_bufs = aligned_host_buffers(tgt, b_chunk, int(pb["buffers"]))
    gds["path_b"] = dict(pb, direct=b_direct, note=b_note)
    path_b = ((lambda: path_double_buffered_direct(path, tgt, dst, b_chunk, bufs=b_bufs)) if b_direct else
              (lambda: path_double_buffered(path, tgt, dst, b_chunk, bufs=b_bufs)))
    cold = [("pageable + copy", lambda: path_pageable(path, tgt, dst, chunk)),
            ("pinned, double-buffered", path_b),
            ("mmap + pinned", lambda: path_mmap_pinned(path, tgt, dst, chunk, bufs=bufs))]
    if gds["kvikio"] and isinstance(tgt, CudaTarget):
        cold += [(f"{kv_label}, {t} thread{'s' if t > 1 else ''}",
                  (lambda t=t: path_kvikio(path, tgt, dst, t, kvikio_task)))
                 for t in kvikio_threads]
    expected = _expected(path, tgt) if verify else None
    rows = []
    for run in range(runs):
        for k in np.random.default_rng(900 + run).permutation(len(cold)):
            name, fn = cold[k]
            info = make_cold(path, method)
            _clear(tgt, dst)
            try:
                r = measure_path(fn, expected=size)
                err = None
            except Exception as e:  # noqa: BLE001 - one failing path (e.g. a library) is reported, not fatal
                r = dict(bytes=0, seconds=None, cpu_s=None, GBps=None, cpu_s_per_GB=None)
                err = f"{type(e).__name__}: {e}"
            ok = _same(tgt, dst, expected) if verify and err is None else None
            rows.append(dict(path=name, cache="cold", run=run, verified=ok, error=err, **r, **info))
            if progress:
                progress.update(1)
    # warm: the file in the page cache, in (pinned) RAM, in GPU memory
    pagecache.warm([path])
    host = tgt.host_buffer(size, pinned=True)
    read_fully(path, host)
    held = tgt.alloc(size)
    tgt.copy_blocking(held, 0, host, size)
    tgt.sync()
    warm = [("page cache + pinned, double-buffered", lambda: path_double_buffered(path, tgt, dst, chunk, bufs=bufs)),
            ("in pinned RAM: copy only", lambda: _copy_all(tgt, dst, host, size)),
            ("in GPU memory: device copy", lambda: _device_copy(tgt, dst, held, size))]
    for run in range(runs):
        for name, fn in warm:
            resident = pagecache.residency([path]).fraction
            _clear(tgt, dst)
            r = measure_path(fn, expected=size)
            ok = _same(tgt, dst, expected) if verify else None
            rows.append(dict(path=name, cache="warm", run=run, verified=ok, error=None, purge_method="none (warm)",
                             resident_at_start=resident, **r))
            if progress:
                progress.update(1)
    held = host = dst = b_bufs = None  # free the buffers (the closures above hold the names)
    return pd.DataFrame(rows), gds


def aligned_host_buffers(tgt: Target, chunk: int, buffers: int) -> list:
    """``buffers`` (pinned) host buffers of ``chunk`` bytes, each starting on an :data:`ALIGN` boundary
    (O_DIRECT reads need it): each is cut out of an allocation one alignment unit larger."""
    if chunk % ALIGN:
        raise ParameterError("gpu_sweep_chunks", chunk, f"multiples of {ALIGN:,} bytes (O_DIRECT)")
    out = []
    for _ in range(buffers):
        raw = tgt.host_buffer(chunk + ALIGN, pinned=True)
        skip = (-raw.ctypes.data) % ALIGN
        out.append(raw[skip:skip + chunk])
    return out


def path_double_buffered_direct(path, tgt: Target, dst, chunk: int, buffers: int = 2, *, bufs=None) -> int:
    """(b) with the file opened ``O_DIRECT``: the reads go from the device straight into the aligned pinned
    buffers, past the page cache (no copy out of it, no readahead, nothing left cached), while the previous
    buffer is copied asynchronously. The file's size must be a multiple of :data:`ALIGN` (the chapter's is)."""
    bufs = bufs or aligned_host_buffers(tgt, chunk, buffers)
    bad = [b.ctypes.data % ALIGN for b in bufs if b.ctypes.data % ALIGN or len(b) % ALIGN]
    if bad:
        raise ParameterError("gpu_chunk", chunk, f"buffers aligned to {ALIGN:,} bytes for O_DIRECT")
    events = [None] * len(bufs)
    off = i = 0
    fd = open_file(path, True)
    try:
        while True:
            k = i % len(bufs)
            tgt.wait(events[k])
            n = os.preadv(fd, [memoryview(bufs[k])], off)
            if not n:
                break
            events[k] = tgt.copy_async(dst, off, bufs[k], n)
            off += n
            i += 1
    finally:
        os.close(fd)
    tgt.sync()
    return off


def pipeline_sweep(path, *, chunks: Sequence[int], buffers: Sequence[int], modes: Sequence[str], runs: int,
                   method: str, tgt: Target | None = None, verify: bool = True, progress=None) -> pd.DataFrame:
    """Path (b) cold at each (chunk, buffers, buffered/O_DIRECT), and the device's ``dd`` ceiling measured
    in the same run, all in a shuffled order per run: each run's share of the disk is paired with that
    run's own ceiling, so the disk's drift between runs does not pass for the pipeline's variation.

    O_DIRECT cells need no purge (the page cache is bypassed); buffered cells and ``dd`` start cold."""
    tgt = tgt or CudaTarget()
    size = os.path.getsize(path)
    dst = tgt.alloc(size)
    expected = _expected(path, tgt) if verify else None
    pools = {(c, b): aligned_host_buffers(tgt, c, b) for c in chunks for b in buffers}
    cells = [(m, c, b) for m in modes for c in chunks for b in buffers] + [("dd", None, None)]
    rows = []
    for run in range(runs):
        for k in np.random.default_rng(1300 + run).permutation(len(cells)):
            mode, c, b = cells[k]
            info = make_cold(path, method) if mode != "O_DIRECT" else \
                {"purge_method": "none (O_DIRECT)", "resident_at_start": None}
            if mode == "dd":
                n, s = reads.dd_read(Path(path), 1 << 20)
                rows.append(dict(mode="dd bs=1M", chunk=None, buffers=None, run=run, bytes=n, seconds=s,
                                 GBps=n / s / GB, cpu_s_per_GB=None, verified=None, error=None, **info))
            else:
                fn = path_double_buffered_direct if mode == "O_DIRECT" else path_double_buffered
                _clear(tgt, dst)
                try:
                    r = measure_path(lambda fn=fn, c=c, b=b: fn(path, tgt, dst, c, bufs=pools[(c, b)]), expected=size)
                    err = None
                except Exception as e:  # noqa: BLE001 - reported in its row
                    r = dict(bytes=0, seconds=None, cpu_s=None, GBps=None, cpu_s_per_GB=None)
                    err = f"{type(e).__name__}: {e}"
                ok = _same(tgt, dst, expected) if verify and err is None else None
                r.pop("cpu_s", None)
                rows.append(dict(mode=mode, chunk=c, buffers=b, run=run, **r, verified=ok, error=err, **info))
            if progress:
                progress.update(1)
    pools = dst = None
    return pd.DataFrame(rows)


def choose_path_b(summary: pd.DataFrame, *, chunk, buffers, mode, fallback_chunk: int) -> dict:
    """Path (b)'s setting for this run, and why. A parameter given as a value is kept; each ``"auto"`` one is
    taken from the sweep's best setting (:func:`sweep_summary`'s first row) among the settings that match the
    given values (among all, where none matches). Without a sweep to choose from, ``"auto"`` falls back to
    ``O_DIRECT`` into two buffers of ``fallback_chunk`` bytes.

    Returns ``mode``, ``chunk``, ``buffers``, ``by`` (per field: ``"parameter"``, ``"sweep"`` or
    ``"fallback"``), ``best`` (the sweep's row the auto values came from, as a dict, or None) and
    ``settings`` (how many settings the sweep compared)."""
    asked = dict(mode=mode, chunk=chunk, buffers=buffers)
    fixed = {k: v for k, v in asked.items() if v != AUTO}
    out = dict(fixed, by={k: "parameter" for k in fixed}, best=None, settings=int(len(summary)))
    auto = [k for k in asked if k not in fixed]
    if not auto:
        return out
    if summary.empty:
        fallback = dict(mode="O_DIRECT", chunk=int(fallback_chunk), buffers=2)
        out.update({k: fallback[k] for k in auto})
        out["by"].update({k: "fallback" for k in auto})
        return out
    match = summary
    for k, v in fixed.items():
        match = match[match[k] == v]
    row = (match if len(match) else summary).iloc[0]
    out.update({k: (str(row[k]) if k == "mode" else int(row[k])) for k in auto})
    out["by"].update({k: "sweep" for k in auto})
    out["best"] = {k: (str(v) if k == "mode" else float(v)) for k, v in row.items()}
    return out


def _copy_all(tgt: Target, dst, host, size: int) -> int:
    tgt.copy_async(dst, 0, host, size)
    tgt.sync()
    return size


def _device_copy(tgt: Target, dst, held, size: int) -> int:
    dst.copy_(held) if hasattr(dst, "copy_") else np.copyto(dst, held)
    tgt.sync()
    return size


def _clear(tgt: Target, dst) -> None:
    if hasattr(dst, "zero_"):
        dst.zero_()
    else:
        dst[:] = 0
    tgt.sync()


def _expected(path, tgt: Target):
    """The file's bytes where the destination lives (read once, warm; the digest of a data set guards them)."""
    size = os.path.getsize(path)
    host = tgt.host_buffer(size, pinned=False)
    read_fully(path, host)
    ref = tgt.alloc(size)
    tgt.copy_blocking(ref, 0, host, size)
    tgt.sync()
    return ref


def _same(tgt: Target, dst, ref) -> bool:
    if hasattr(dst, "equal"):
        return bool(dst.equal(ref))
    return bool(np.array_equal(dst, ref))


# --------------------------------------------------------------------------- chapter
@dataclass(frozen=True)
class Plan:
    """What :func:`preflight` found: the checked parameters and the directory the data set lives in."""

    params: Params
    data_dir: Path


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _aligned(name: str, values, value) -> None:
    bad = [v for v in values if isinstance(v, int) and v % ALIGN]
    if bad:
        raise ParameterError(name, value, f"multiples of {ALIGN:,} bytes (O_DIRECT reads whole aligned blocks; "
                             f"{bad} are not)")


def preflight(params) -> Plan:
    """Every parameter checked (:meth:`Params.checked`), then what the declarations cannot say: alignment for
    ``O_DIRECT``, request sizes up to the file, time caps above zero, the data directory's free space, host
    memory (and GPU memory) for experiment 4. The sweep's empty lists become their fallbacks."""
    p = Params.coerce(params).checked()
    _aligned("file_size", [p.file_size], p.file_size)
    if "O_DIRECT" in p.modes:
        _aligned("request_sizes", p.request_sizes, p.request_sizes)
    if max(p.request_sizes) > p.file_size:
        raise ParameterError("request_sizes", p.request_sizes, f"sizes up to file_size ({p.file_size:,})")
    for name in ("cell_seconds", "random_seconds"):
        if getattr(p, name) <= 0:
            raise ParameterError(name, getattr(p, name), "a number > 0 and <= 600")
    if any(d < 1 for d in p.uring_depths):
        raise ParameterError("uring_depths", p.uring_depths, "a list of integers from 1 to 4,096 (or [])")
    _aligned("gpu_chunk", [p.gpu_chunk], p.gpu_chunk)
    chunks = p.gpu_sweep_chunks or [p.gpu_chunk]
    if any(c < ALIGN for c in chunks):
        raise ParameterError("gpu_sweep_chunks", p.gpu_sweep_chunks, f"sizes of at least {ALIGN:,} bytes")
    _aligned("gpu_sweep_chunks", chunks, p.gpu_sweep_chunks)
    bufs = p.gpu_sweep_buffers or [2]
    if any(b < 2 for b in bufs):
        raise ParameterError("gpu_sweep_buffers", p.gpu_sweep_buffers, "a list of integers from 2 to 64")
    if p.path_b_chunk != AUTO:
        _aligned("path_b_chunk", [p.path_b_chunk], p.path_b_chunk)
    if p.purge_method == "drop_caches" and not pagecache.can_drop_caches():
        raise ParameterError("purge_method", "drop_caches", "'auto' or 'fadvise' (drop_caches needs root)")
    p = p.replace(gpu_sweep_chunks=chunks, gpu_sweep_buffers=bufs)
    parent = datasets.check_space(p.data_dir, [datasets.shard_plan(p.file_size, p.seed)])
    if p.gpu == "auto" and cuda_available():
        import torch

        sweep = sum(c * b for c in chunks for b in bufs) if p.gpu_sweep_modes else 0
        b_chunk = p.path_b_chunk if p.path_b_chunk != AUTO else max(chunks + [p.gpu_chunk])
        b_bufs = p.path_b_buffers if p.path_b_buffers != AUTO else max(bufs + [2])
        memory("file_size", p.file_size, 2 * p.file_size + 2 * p.gpu_chunk + max(sweep, b_chunk * b_bufs),
               what="the file (twice) and buffers")
        free, _ = torch.cuda.mem_get_info()
        need = 3 * p.file_size
        if need > free:
            raise ParameterError("file_size", p.file_size,
                                 f"a size whose three GPU buffers fit the GPU's free memory ({need / 2**30:.1f} GiB "
                                 f"needed, {free / 2**30:.1f} GiB free)")
    return Plan(p, parent)


def measure(plan: Plan, context) -> None:
    """Run every chapter-9 experiment into the started result (its tables and metadata)."""
    from tqdm import tqdm

    from datajourney.core.timing import Laps  # loads torch: only when the chapter measures

    lap = Laps()  # how long each part of the run took (metadata)
    q, parent = plan.params, plan.data_dir
    p = q.as_dict()
    res, progress = context.result, context.progress
    # a killed run's read_ahead_kb is put back first, so that the device's setting read below is its own
    res.metadata["sysfs_restored"] = sysfs_settings.restore_pending()
    sh = datasets.shard(parent, size=q.file_size, seed=q.seed, progress=progress)
    lap("data set")
    dev = block_device(sh.path)
    disk = DiskStats(dev["partition"])
    can_ra, ra_note = can_set_readahead(dev["disk"])
    sysfs = p["readahead_sysfs"] == "on" or (p["readahead_sysfs"] == "auto" and can_ra)
    if p["readahead_sysfs"] == "on" and not can_ra:
        raise ParameterError("readahead_sysfs", "on", f"'auto' or 'off' here ({ra_note})")
    cuda = p["gpu"] == "auto" and cuda_available()
    ra_now = dev["info"].get("read_ahead_kb")
    ra_values = list(dict.fromkeys(p["readahead_kb"] + ([ra_now] if ra_now is not None else [])))
    n_cells = len(p["request_sizes"]) * len(p["threads"]) * len(p["modes"]) * q.runs
    n_ra = (len(ra_values) * sysfs + len(p["fadvise"])) * 2 * q.runs
    uring = uring_status() if p["uring_depths"] else dict(available=False, version=None,
                                                          note="skipped: the run asked for no io_uring depths")
    n_rand = (3 + len(p["pool_threads"]) + (len(MODES) * len(p["uring_depths"]) if uring["available"] else 0)) * q.runs
    n_sweep = ((len(p["gpu_sweep_modes"]) * len(p["gpu_sweep_chunks"]) * len(p["gpu_sweep_buffers"]) + 1)
               * p["gpu_sweep_runs"] if p["gpu_sweep_modes"] else 0)
    n_gpu = ((3 + len(p["kvikio_threads"])) + 3) * q.runs + n_sweep if cuda else 0
    ra_log: list = []
    with tqdm(total=n_cells + n_ra + n_rand + n_gpu, desc="chapter 9", disable=not progress, mininterval=10) as bar:
        kw = dict(method=q.purge_method, disk=disk, seed=q.seed, progress=bar)
        if p["latency_reads"]:
            lat, cdf = reads.measure_latency(sh.path, reads=p["latency_reads"], runs=min(q.runs, 3),
                                               method=q.purge_method, seed=q.seed)
            res.add("latency", lat)
            res.add("latency_cdf", cdf)
            lap("latency")
        res.add("grid", request_grid(sh.path, sizes=p["request_sizes"], threads=p["threads"], modes=p["modes"],
                                     runs=q.runs, seconds=q.cell_seconds, max_bytes=q.cell_max_bytes, **kw))
        lap("request grid")
        try:
            res.add("readahead", readahead_experiment(
                sh.path, values_kb=ra_values, fadvise=p["fadvise"], runs=q.runs, seq_chunk=q.seq_chunk,
                seq_bytes=min(q.seq_bytes, q.file_size), rand_reads=q.random_reads, rand_seconds=q.random_seconds,
                disk_name=dev["disk"], sysfs=sysfs, log=ra_log, **kw))
        finally:
            res.metadata["readahead_changes"] = ra_log
        lap("readahead")
        res.add("random", random_small_reads(sh.path, reads=q.random_reads, pool_threads=p["pool_threads"],
                                             runs=q.runs, seconds=q.random_seconds, **kw))
        lap("random reads")
        if uring["available"]:
            try:
                res.add("uring", uring_random_reads(sh.path, reads=q.random_reads, depths=p["uring_depths"],
                                                    runs=q.runs, seconds=q.random_seconds, **kw))
            except OSError as e:  # a ring was granted but its reads were refused (e.g. restricted opcodes)
                uring = dict(uring, available=False,
                             note=f"skipped: io_uring reads failed here ({type(e).__name__}: {e})")
            lap("io_uring")
        res.add("ceiling", device_ceiling(sh.path, runs=q.runs, method=q.purge_method))
        lap("device ceiling")
        if cuda:
            import torch

            torch.zeros(1, device="cuda")
            try:
                res.metadata["pcie_ceiling"] = transfer.independent_ceiling(
                    min(q.file_size, 1 << 30), repeats=5, warmup=2
                )
            except Exception as e:  # noqa: BLE001 - reported; the chapter goes on without this ceiling
                res.metadata["pcie_ceiling"] = dict(available=False, note=f"{type(e).__name__}: {e}")
            lap("PCIe ceiling")
            # the sweep first: path (b) is then measured at its best setting (or at the values asked for)
            sweep = pd.DataFrame()
            if n_sweep:
                sweep = pipeline_sweep(sh.path, chunks=p["gpu_sweep_chunks"], buffers=p["gpu_sweep_buffers"],
                                       modes=p["gpu_sweep_modes"], runs=p["gpu_sweep_runs"], method=q.purge_method,
                                       progress=bar)
                res.add("pipeline", sweep)
                lap("pipeline sweep")
            pc = res.metadata["pcie_ceiling"]
            setting = choose_path_b(sweep_summary(sweep, pc.get("GBps") if pc.get("available") else None),
                                    chunk=p["path_b_chunk"], buffers=p["path_b_buffers"], mode=p["path_b_mode"],
                                    fallback_chunk=q.gpu_chunk)
            g, gds = to_gpu(sh.path, chunk=q.gpu_chunk, runs=q.runs, kvikio_threads=p["kvikio_threads"],
                            kvikio_task=q.kvikio_task, method=q.purge_method, progress=bar, path_b=setting)
            res.add("gpu", g)
            lap("to GPU")
        else:
            gds = gds_status()
    res.metadata.update(
        cuda=cuda, gds=gds, device=dev["info"], diskstats_device=dev["partition"],
        readahead_sysfs=dict(used=sysfs, possible=can_ra, note=ra_note if not can_ra else
                             ("the run asked for readahead_sysfs='off'" if not sysfs else ""),
                             original_kb=ra_now, values_kb=ra_values if sysfs else []),
        can_drop_caches=pagecache.can_drop_caches(), dataset=sh.manifest,
        nand_read_floor_us=reads.NAND_READ_FLOOR_US, physical_nvme_qd1_us=list(PHYSICAL_NVME_QD1_US),
        io_uring=uring["note"], io_uring_status=uring,
        gpu_note=None if cuda else ("gpu='off' asked for" if p["gpu"] == "off" else
                                    "no CUDA device"),
        seconds=lap.seconds,
    )
