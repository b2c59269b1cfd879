"""Chapter 6: crossing the PCIe bus - host-to-device and device-to-host copies.

What is measured:

* bandwidth of ``tensor.copy_`` between host and GPU for pinned and pageable host memory,
  both directions, over a size sweep; each copy timed with CUDA events around it *and*
  with a host clock around a synchronised call; median and 10th/90th percentiles of many
  repetitions after a warm-up;
* the link itself (generation and width from the driver) and its theoretical peak;
* an independent ceiling: the same pinned copy issued through a second path (CuPy's
  ``cudaMemcpyAsync`` with its own pinned allocation, timed with events, median of several
  large copies, as nvbandwidth measures);
* why pageable copies slow down at some size (:func:`staging_experiment`): for pageable
  memory the driver first copies the data through a pinned staging buffer with the CPU, so
  the copy can go no faster than one core reads the source. The experiment times the
  pageable copy with the source cache-resident and with the cache flushed, the same
  single-core memcpy of the source, the source in huge pages, and reads the size of the
  last-level cache;
* whether a copy overlaps CPU work (pageable/pinned × blocking/non_blocking), with the
  ratio unclipped, its spread over repetitions, and no verdict when the copy is shorter
  than a few times the jitter of the CPU work (:func:`overlap_experiment`);
* whether the two directions run at once on separate copy engines;
* how much of a copy on a side stream hides behind matrix products: kernel-only, copy-only
  and kernel+copy interleaved in random order, paired differences with a bootstrap
  interval, SM clock and power logged through NVML, and the overlap read a second way, off
  a ``torch.profiler`` timeline of the GPU (:func:`copy_kernel_overlap`);
* what pinning on the fly costs (first call vs later calls, with PyTorch's caching host
  allocator's own counters), and the stale value a non_blocking device-to-host copy leaves
  when the host reads it before synchronising.

GB/s means 10^9 bytes per second.
"""
from __future__ import annotations

import json
import math
import mmap
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from .book import findings as fx
from .book.findings import Finding, size_label
from .book.fingerprint import cgroup_limits
from .params import (ParameterError, boolean, creatable_dir, int_list, number, positive_int)
from .timing import cuda_ms, interleaved_ms, nvml_reader

CHAPTER = "06_pcie"
GB = 1e9
MiB = 1 << 20
#: Usable bandwidth per lane and direction, GB/s: transfer rate × line-code efficiency / 8 bits.
#: Gen 1-2 use 8b/10b, Gen 3-5 128b/130b; Gen 6 (PAM4, FLIT mode) 242/256.
PER_LANE_GBPS = {1: 2.5 * 8 / 10 / 8, 2: 5.0 * 8 / 10 / 8, 3: 8.0 * 128 / 130 / 8, 4: 16.0 * 128 / 130 / 8,
                 5: 32.0 * 128 / 130 / 8, 6: 64.0 * 242 / 256 / 8}
#: A copy must last at least this many times the CPU work's jitter (std) before its overlap is judged.
MIN_COPY_OVER_JITTER = 3.0
#: Overlap ratio at or above which a copy "overlaps", at or below which it is "serial".
OVERLAPS, SERIAL = 0.8, 0.2
#: Verdict when the copy is too short to be told apart from the CPU work's jitter.
TOO_SHORT = "too short to tell"
#: PyTorch's pinned copy should reach this share of the independent ceiling.
CEILING_TARGET = 0.95
#: Two clocks "agree" when their medians differ by less than this share.
CLOCKS_AGREE = 0.05
#: Chunk of the single-core memcpy that imitates the driver's staging of a pageable copy.
STAGING_CHUNK = 2 * MiB
#: Bootstrap resamples for intervals of paired differences.
BOOTSTRAP = 2000


def link_peak_gbps(gen: int | None, width: int | None) -> float | None:
    """Theoretical one-direction peak of a PCIe link, GB/s (None when unknown)."""
    if not gen or not width or gen not in PER_LANE_GBPS:
        return None
    return PER_LANE_GBPS[gen] * width


def overlap_ratio(t_a: float, t_b: float, t_both: float) -> float:
    """Share of the shorter activity that was hidden: 1 when two activities ran fully in
    parallel (both together take as long as the longer), 0 when serially (they take the
    sum). *Not clipped*: below 0 means "together" took longer than one after the other,
    above 1 that it took less than the longer alone - both are measurement noise, and
    showing them is how a reader sees how noisy the measurement is."""
    shorter = min(t_a, t_b)
    return float((t_a + t_b - t_both) / shorter) if shorter > 0 else float("nan")


def verdict(ratio: float, *, copy_ms: float | None = None, jitter_ms: float | None = None,
            low: float | None = None, high: float | None = None) -> str:
    """Words for an overlap ratio. No verdict (:data:`TOO_SHORT`) when the copy lasted less than
    :data:`MIN_COPY_OVER_JITTER` × the jitter of the work it is compared with, or when the
    spread of the ratio (``low``-``high``) reaches from serial to overlapping."""
    if copy_ms is not None and jitter_ms is not None and copy_ms < MIN_COPY_OVER_JITTER * jitter_ms:
        return TOO_SHORT
    if not math.isfinite(ratio):
        return TOO_SHORT
    if low is not None and high is not None and low <= SERIAL and high >= OVERLAPS:
        return "unclear (the spread spans serial to overlapping)"
    return "overlaps" if ratio >= OVERLAPS else ("serial" if ratio <= SERIAL else "partly overlaps")


def bootstrap_interval(values: Sequence[float], stat: Callable = np.median, *, level: float = 0.95,
                       resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over ``values`` (rows resampled with replacement).
    ``values`` may be 2-D (one row per paired round); ``stat`` then takes the resampled rows."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        x = float(stat(v)) if len(v) else float("nan")
        return x, x
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(v), size=(resamples, len(v)))
    stats = np.array([stat(v[i]) for i in idx])
    a = (1 - level) / 2
    return float(np.quantile(stats, a)), float(np.quantile(stats, 1 - a))


# --------------------------------------------------------------------------- CPU work
def spin(iterations: int) -> int:
    """Pure-Python busy work holding the GIL (what a training loop's Python code does)."""
    x = 0
    for i in range(iterations):
        x = (x + i * i) % 1_000_003
    return x


def _spin_ms(n: int) -> float:
    t0 = time.perf_counter()
    spin(n)
    return (time.perf_counter() - t0) * 1e3


def calibrate_spin(target_ms: float, *, checks: int = 7) -> tuple[int, float]:
    """Iterations of :func:`spin` that take about ``target_ms``, and the median ms of ``checks``
    runs of that many iterations. The iterations are scaled on the *fastest* of several runs, so
    that a run slowed by another process (a busy, shared machine) does not shrink the work; one
    refinement step follows if the first guess is off by more than 5%."""
    n = 10_000
    while _spin_ms(n) <= 2:
        n *= 2
    fastest = min(_spin_ms(n) for _ in range(checks))
    n = max(1, int(n * target_ms / fastest))
    fastest = min(_spin_ms(n) for _ in range(checks))
    if abs(fastest / target_ms - 1) > 0.05:
        n = max(1, int(n * target_ms / fastest))
    return n, float(np.median([_spin_ms(n) for _ in range(checks)]))


def spin_jitter(iterations: int, repeats: int) -> dict:
    """Median and spread of ``repeats`` runs of the calibrated CPU work (runs on any machine)."""
    t = [_spin_ms(iterations) for _ in range(repeats)]
    return dict(median_ms=float(np.median(t)), std_ms=float(np.std(t, ddof=1)) if len(t) > 1 else 0.0,
                p10_ms=float(np.quantile(t, 0.1)), p90_ms=float(np.quantile(t, 0.9)), n=len(t))


# --------------------------------------------------------------------------- limits
def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def host_limits(cgroup_root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup") -> dict:
    """Memory that can be allocated and pinned here: available RAM, the cgroup limit (and the
    headroom under it), ``ulimit -l``, and a CPU quota."""
    import psutil

    cg = cgroup_limits(cgroup_root, proc_cgroup)
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    available = psutil.virtual_memory().available
    headroom = bound = None
    if cg["limit_bytes"] is not None:
        under = max(0, cg["limit_bytes"] - (cg["used_bytes"] or 0))
        # the room under the limit cannot exceed what the host has free: report the smaller, and which it is
        headroom, bound = (under, "the cgroup limit") if under <= available else (available, "available host memory")
    return dict(available_bytes=available, cgroup_limit_bytes=cg["limit_bytes"], cgroup_used_bytes=cg["used_bytes"],
                cgroup_headroom_bytes=headroom, cgroup_headroom_bound=bound, cgroup_path=cg["cgroup_path"],
                cgroup_version=cg["cgroup_version"],
                memlock_bytes=None if soft == resource.RLIM_INFINITY else soft,
                cpu_quota_cores=cg["cpu_quota_cores"],
                usable_bytes=min(x for x in (available, headroom) if x is not None))


def last_level_cache(sysfs="/sys/devices/system/cpu/cpu0/cache") -> dict:
    """Size of the largest (last-level) CPU cache that cpu0 sees, from sysfs (None when unknown)."""
    best = dict(level=None, bytes=None, shared_cpus=None)
    for d in sorted(Path(sysfs).glob("index*")):
        if _read(d / "type") not in ("Unified", "Data"):
            continue
        level = _int_or_none(_read(d / "level"))
        size = _read(d / "size") or ""
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        b = int(size[:-1]) * units[size[-1]] if size[-1:] in units and size[:-1].isdigit() else _int_or_none(size)
        if level is not None and b and (best["level"] is None or level > best["level"]):
            best = dict(level=level, bytes=b, shared_cpus=_read(d / "shared_cpu_list"))
    return best


def transparent_hugepages() -> str | None:
    """The kernel's transparent huge page mode (the bracketed word of ``enabled``)."""
    t = _read(Path("/sys/kernel/mm/transparent_hugepage/enabled"))
    if not t:
        return None
    return next((w.strip("[]") for w in t.split() if w.startswith("[")), t)


def check_sizes(sizes: Sequence[int], *, buffers: int = 3, extra_host_bytes: int = 0,
                limits: dict | None = None) -> list[str]:
    """Fail (naming ``sizes``) when the largest size cannot be allocated on host or device; return
    warnings where pinning it may exceed a container's limits."""
    biggest = max(sizes)
    lim = limits or host_limits()
    host_cap = lim["usable_bytes"]
    if biggest * buffers + extra_host_bytes > host_cap:
        raise ParameterError("sizes", biggest, f"at most {(host_cap - extra_host_bytes) / buffers / 2**30:.2f} GiB: "
                             f"{buffers} host buffers of the largest size (and {extra_host_bytes / 2**30:.2f} GiB "
                             f"to flush the CPU cache) must fit in {host_cap / 2**30:.1f} GiB of free host memory")
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        if biggest * 2 > free:
            raise ParameterError("sizes", biggest, f"at most {free / 2 / 2**30:.2f} GiB: two device buffers must "
                                 f"fit in {free / 2**30:.1f} GiB of free GPU memory")
    warnings = []
    if lim["memlock_bytes"] is not None and biggest > lim["memlock_bytes"]:
        warnings.append(f"ulimit -l is {lim['memlock_bytes'] / 2**20:.0f} MiB, below the largest pinned buffer "
                        f"({biggest / 2**20:.0f} MiB): pinning may fail or fall back where the limit is enforced")
    if lim["cgroup_limit_bytes"] and biggest * buffers > 0.5 * lim["cgroup_limit_bytes"]:
        warnings.append("the pinned buffers take over half of the container's memory limit; pinned pages "
                        "cannot be swapped and count against that limit")
    return warnings


# --------------------------------------------------------------------------- timing
def _host(n: int, pinned: bool) -> torch.Tensor:
    t = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
    t.fill_(1)  # touch every page, so that first-touch faults stay out of the timing
    return t


def time_copy(dst: torch.Tensor, src: torch.Tensor, *, repeats: int, warmup: int,
              before: Callable | None = None) -> tuple[list, list]:
    """Per repetition: (ms by CUDA events around the copy, ms by host clock around the synchronised
    copy). ``before`` runs untimed before each copy (e.g. to flush the CPU cache)."""
    ev, host = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for k in range(warmup + repeats):
        if before is not None:
            before()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        t1 = time.perf_counter()
        if k >= warmup:
            ev.append(start.elapsed_time(end))
            host.append((t1 - t0) * 1e3)
    return ev, host


def _reps(n: int, repeats: int) -> int:
    return repeats if n <= (256 << 20) else max(3, repeats * (256 << 20) // n)


def bandwidth_sweep(sizes: Sequence[int], *, repeats: int, warmup: int, progress=None) -> pd.DataFrame:
    """Every (size, direction, host memory, clock): one row per repetition."""
    rows = []
    for n in sizes:
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        for pinned in (True, False):
            h = _host(n, pinned)
            for direction, (dst, src) in (("H2D", (dev, h)), ("D2H", (h, dev))):
                ev, host = time_copy(dst, src, repeats=_reps(n, repeats), warmup=warmup)
                for clock, ms in (("CUDA events", ev), ("host clock", host)):
                    rows += [dict(size=n, direction=direction, memory="pinned" if pinned else "pageable",
                                  clock=clock, rep=i, ms=m, GBps=n / (m / 1e3) / GB) for i, m in enumerate(ms)]
                if progress:
                    progress.update(1)
            del h
        del dev
    return pd.DataFrame(rows)


def _q(p: float):
    f = lambda s: s.quantile(p)  # noqa: E731
    f.__name__ = f"p{int(100 * p)}"
    return f


def summarise_bandwidth(df: pd.DataFrame, peak: float | None) -> pd.DataFrame:
    """Median, 10th and 90th percentile, mean, std and n of GB/s per (size, direction, memory, clock)."""
    g = df.groupby(["size", "direction", "memory", "clock"], sort=False)["GBps"]
    out = g.agg(median="median", p10=_q(0.1), p90=_q(0.9), mean="mean", std="std", n="count").reset_index()
    out["pct_of_peak"] = 100 * out["median"] / peak if peak else float("nan")
    return out


def independent_ceiling(size: int, *, repeats: int, warmup: int) -> dict:
    """Pinned H2D through CuPy (its own pinned allocation and ``cudaMemcpyAsync``), CUDA events,
    median of ``repeats`` copies: a second path that owes nothing to PyTorch's copy."""
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
                median_ms=med, GBps=size / (med / 1e3) / GB, min_ms=float(min(times)), max_ms=float(max(times)))


# --------------------------------------------------------------------------- pageable staging
def _huge_page_bytes() -> int | None:
    """AnonHugePages of this process (bytes), from /proc/self/smaps_rollup."""
    for line in (_read(Path("/proc/self/smaps_rollup")) or "").splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return None


class HugePageBuffer:
    """A pageable host buffer in an anonymous mapping advised ``MADV_HUGEPAGE`` (transparent
    huge pages: 2 MiB pages instead of 4 KiB ones, where the kernel allows). ``tensor`` views it;
    ``huge_bytes`` is how much of it the kernel really backed with huge pages."""

    def __init__(self, n: int):
        before = _huge_page_bytes()
        self.map = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.advised = False
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self.map.madvise(mmap.MADV_HUGEPAGE)
                self.advised = True
            except OSError:
                pass
        self.tensor = torch.frombuffer(self.map, dtype=torch.uint8)
        self.tensor.fill_(1)
        after = _huge_page_bytes()
        self.huge_bytes = None if before is None or after is None else max(0, after - before)

    def close(self) -> None:
        del self.tensor
        try:
            self.map.close()
        except BufferError:  # a view still exists somewhere; the mapping goes with it
            pass


def memcpy_one_core(src: np.ndarray, chunk: np.ndarray) -> float:
    """ms to copy ``src`` chunk by chunk into the small buffer ``chunk`` on this one thread: what
    the driver does to stage a pageable host-to-device copy (it reads the whole source once)."""
    c = len(chunk)
    t0 = time.perf_counter()
    for i in range(0, len(src), c):
        part = src[i:i + c]
        np.copyto(chunk[:len(part)], part)
    return (time.perf_counter() - t0) * 1e3


class CacheFlusher:
    """Evicts the CPU caches by reading and writing a buffer ``factor`` × the last-level cache on
    every core (torch's threads), so that the next read of another buffer comes from DRAM."""

    def __init__(self, llc_bytes: int | None, factor: int = 3):
        self.bytes = max(64 * MiB, factor * (llc_bytes or 128 * MiB))
        self.buf = torch.zeros(self.bytes, dtype=torch.uint8)

    def __call__(self) -> None:
        self.buf.add_(1)


def flush_bytes(llc_bytes: int | None) -> int:
    return max(64 * MiB, 3 * (llc_bytes or 128 * MiB))


def staging_experiment(sizes: Sequence[int], *, repeats: int, warmup: int, llc_bytes: int | None,
                       cuda: bool | None = None, huge_pages: bool = True, progress=None) -> pd.DataFrame:
    """Why pageable copies slow down at large sizes. Per size, one row per repetition of:

    * ``H2D pageable, source cached``: the same source copied again and again (as in the sweep);
    * ``H2D pageable, cache flushed``: the CPU caches flushed before each copy;
    * ``H2D pageable, huge pages``: the source in a ``MADV_HUGEPAGE`` mapping, cached;
    * ``D2H pageable``: the reverse direction into the same pageable buffer;
    * ``memcpy one core, source cached`` / ``..., cache flushed``: the source copied by one CPU
      thread, 2 MiB at a time, into a small buffer (the driver's staging work without the bus).

    Copies are timed with CUDA events, the memcpy with the host clock; without CUDA only the
    memcpy rows are measured."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    flush = CacheFlusher(llc_bytes)
    chunk = np.empty(STAGING_CHUNK, dtype=np.uint8)
    rows = []

    def add(n, measure, ms_list, **extra):
        rows.extend(dict(size=n, measure=measure, rep=i, ms=m, GBps=n / (m / 1e3) / GB, **extra)
                    for i, m in enumerate(ms_list))

    for n in sizes:
        src = _host(n, False)
        src_np = src.numpy()
        for label, before in (("source cached", None), ("cache flushed", flush)):
            out = []
            for k in range(warmup + repeats):
                if before:
                    before()
                ms = memcpy_one_core(src_np, chunk)
                if k >= warmup:
                    out.append(ms)
            add(n, f"memcpy one core, {label}", out)
        if cuda:
            dev = torch.empty(n, dtype=torch.uint8, device="cuda")
            for label, before in (("source cached", None), ("cache flushed", flush)):
                ev, _ = time_copy(dev, src, repeats=repeats, warmup=warmup, before=before)
                add(n, f"H2D pageable, {label}", ev)
            if huge_pages:
                hp = HugePageBuffer(n)
                ev, _ = time_copy(dev, hp.tensor, repeats=repeats, warmup=warmup)
                add(n, "H2D pageable, huge pages", ev, huge_bytes=hp.huge_bytes, advised=hp.advised)
                hp.close()
            ev, _ = time_copy(src, dev, repeats=repeats, warmup=warmup)
            add(n, "D2H pageable", ev)
            del dev
        del src, src_np
        if progress:
            progress.update(1)
    return pd.DataFrame(rows)


def summarise_staging(df: pd.DataFrame) -> pd.DataFrame:
    """Median, p10, p90 and n of GB/s per (size, measure)."""
    g = df.groupby(["size", "measure"], sort=False)["GBps"]
    return g.agg(median="median", p10=_q(0.1), p90=_q(0.9), n="count").reset_index()


# --------------------------------------------------------------------------- copy vs CPU work
def overlap_trials(copy: Callable, wait: Callable, work: Callable, repeats: int) -> pd.DataFrame:
    """``repeats`` rounds (after one warm-up round) of: the copy alone (``copy`` then ``wait``), the
    CPU work alone, and both (``copy``, ``work``, then ``wait``), each timed with the host clock.
    The rounds interleave the three, so slow drift affects all three alike."""
    rows = []
    for k in range(repeats + 1):
        wait()
        t0 = time.perf_counter()
        copy()
        wait()
        t1 = time.perf_counter()
        work()
        t2 = time.perf_counter()
        wait()
        t3 = time.perf_counter()
        copy()
        work()
        wait()
        t4 = time.perf_counter()
        if k:  # the first round is a warm-up
            c, w, b = (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t4 - t3) * 1e3
            rows.append(dict(rep=k - 1, copy_ms=c, cpu_ms=w, both_ms=b, ratio=overlap_ratio(c, w, b)))
    return pd.DataFrame(rows)


def summarise_overlap(raw: pd.DataFrame, jitter_ms: float | None = None) -> pd.DataFrame:
    """One row per (size, memory, mode): medians of the three times, the overlap ratio (median of
    the per-round ratios, unclipped) with its 10th-90th percentile over the rounds, the CPU work's
    jitter in that row (its standard deviation over the row's rounds, unless ``jitter_ms`` gives
    one value for all rows) and the verdict (none when the copy is shorter than
    :data:`MIN_COPY_OVER_JITTER` × the jitter)."""
    keys = ["size", "memory", "mode"]
    rows = []
    for key, g in raw.groupby(keys, sort=False):
        c, w, b = g["copy_ms"].median(), g["cpu_ms"].median(), g["both_ms"].median()
        r, lo, hi = g["ratio"].median(), g["ratio"].quantile(0.1), g["ratio"].quantile(0.9)
        jitter = float(g["cpu_ms"].std(ddof=1)) if jitter_ms is None else float(jitter_ms)
        rows.append(dict(zip(keys, key), copy_ms=c, cpu_ms=w, both_ms=b, serial_ms=c + w, overlap=r,
                         overlap_p10=lo, overlap_p90=hi, jitter_ms=jitter,
                         min_copy_ms=MIN_COPY_OVER_JITTER * jitter, n=len(g),
                         verdict=verdict(r, copy_ms=c, jitter_ms=jitter, low=lo, high=hi)))
    return pd.DataFrame(rows)


def overlap_experiment(sizes: Sequence[int], *, spin_iters: int, repeats: int, progress=None) -> pd.DataFrame:
    """Raw rounds of :func:`overlap_trials` for pageable/pinned × blocking/non_blocking H2D copies."""
    parts = []
    work = lambda: spin(spin_iters)  # noqa: E731
    for n in sizes:
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        for pinned in (False, True):
            h = _host(n, pinned)
            for nb in (False, True):
                t = overlap_trials(lambda: dev.copy_(h, non_blocking=nb), torch.cuda.synchronize, work, repeats)
                parts.append(t.assign(size=n, memory="pinned" if pinned else "pageable",
                                      mode="non_blocking" if nb else "blocking"))
                if progress:
                    progress.update(1)
            del h
        del dev
    return pd.concat(parts, ignore_index=True)


# --------------------------------------------------------------------------- both directions
def bidirectional(size: int, *, repeats: int) -> dict:
    """H2D and D2H alone and at the same time on two streams (pinned memory): do the copy engines overlap?"""
    h_in, h_out = _host(size, True), _host(size, True)
    d_in, d_out = torch.empty(size, dtype=torch.uint8, device="cuda"), torch.ones(size, dtype=torch.uint8,
                                                                                  device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def copies(h2d: bool, d2h: bool) -> None:
        if h2d:
            with torch.cuda.stream(s1):
                d_in.copy_(h_in, non_blocking=True)
        if d2h:
            with torch.cuda.stream(s2):
                h_out.copy_(d_out, non_blocking=True)

    t = interleaved_ms({"h2d": lambda: copies(True, False), "d2h": lambda: copies(False, True),
                        "both": lambda: copies(True, True)}, repeats)
    med = t.groupby("name")["ms"].median()
    a, b, both = float(med["h2d"]), float(med["d2h"]), float(med["both"])
    w = t.pivot(index="round", columns="name", values="ms")
    ratios = [overlap_ratio(x, y, z) for x, y, z in zip(w["h2d"], w["d2h"], w["both"])]
    r = overlap_ratio(a, b, both)
    return dict(size=size, h2d_ms=a, d2h_ms=b, both_ms=both, h2d_GBps=size / a / 1e6, d2h_GBps=size / b / 1e6,
                aggregate_GBps=2 * size / both / 1e6, overlap=r, overlap_p10=float(np.quantile(ratios, 0.1)),
                overlap_p90=float(np.quantile(ratios, 0.9)), n=len(ratios), verdict=verdict(r))


# --------------------------------------------------------------------------- copy vs kernel
def _intervals_overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two sets of intervals (each set may overlap itself)."""

    def merged(iv):
        out = []
        for s, e in sorted(iv):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    total = 0.0
    ma, mb = merged(a), merged(b)
    for s, e in ma:
        for s2, e2 in mb:
            lo, hi = max(s, s2), min(e, e2)
            if hi > lo:
                total += hi - lo
    return total


def timeline_overlap(events: Sequence[dict]) -> dict:
    """Copy/kernel overlap read off a GPU timeline (chrome-trace events with ``cat``, ``name``,
    ``ts`` and ``dur`` in µs, as ``torch.profiler`` exports them).

    Returns the host-to-device copies' GPU time, how much of it ran while a kernel was running
    (``covered_share``), and the mean kernel duration while a copy ran vs otherwise (a kernel
    slowed by the copy shows as ``kernel_slowdown`` > 1)."""
    copies = [(e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "gpu_memcpy" and "HtoD" in e.get("name", "")]
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel"]
    copy_us = sum(e - s for s, e in copies)
    covered = _intervals_overlap(copies, kernels)
    during, outside = [], []
    for s, e in kernels:
        (during if _intervals_overlap([(s, e)], copies) > 0.5 * (e - s) else outside).append(e - s)
    names = sorted({e.get("name", "") for e in events if e.get("cat") == "gpu_memcpy"})
    m_in = float(np.mean(during)) if during else float("nan")
    m_out = float(np.mean(outside)) if outside else float("nan")
    return dict(copies=len(copies), kernels=len(kernels), copy_ms=copy_us / 1e3, covered_ms=covered / 1e3,
                covered_share=covered / copy_us if copy_us else float("nan"),
                kernel_us_during_copy=m_in, kernel_us_otherwise=m_out, kernels_during_copy=len(during),
                kernel_slowdown=m_in / m_out if during and outside else float("nan"), memcpy_names="; ".join(names))


def gpu_timeline(fn: Callable, iterations: int) -> list[dict]:
    """Chrome-trace events of the GPU activity of ``iterations`` calls of ``fn`` (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    import warnings

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        with warnings.catch_warnings():  # the profiler's notes about its own cycles are not the reader's business
            warnings.simplefilter("ignore", UserWarning)
            with profile(activities=acts) as prof:
                for _ in range(iterations):
                    fn()
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
            prof.export_chrome_trace(path)
        trace = json.loads(Path(path).read_text())
    finally:
        os.unlink(path)
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    return [dict(cat=e.get("cat"), name=e.get("name", ""), ts=float(e["ts"]), dur=float(e["dur"]))
            for e in events if e.get("ph") == "X" and "dur" in e and e.get("cat") in ("kernel", "gpu_memcpy")]


def paired_overlap(rounds: pd.DataFrame, *, seed: int = 0) -> dict:
    """Hidden share of a copy from interleaved rounds of ``kernel``, ``copy`` and ``both`` (column
    ``name``, ``ms``, ``round``): per round, what the copy added to the kernels (both - kernel),
    and 1 - median(added) / median(copy) with a bootstrap interval over rounds."""
    w = rounds.pivot(index="round", columns="name", values="ms").dropna()
    added = (w["both"] - w["kernel"]).to_numpy()
    copy = w["copy"].to_numpy()
    pairs = np.column_stack([added, copy])
    share = lambda p: 1 - np.median(p[:, 0]) / np.median(p[:, 1])  # noqa: E731
    lo, hi = bootstrap_interval(pairs, share, seed=seed)
    alo, ahi = bootstrap_interval(added, np.median, seed=seed)
    return dict(rounds=len(w), kernel_ms=float(w["kernel"].median()), copy_ms=float(np.median(copy)),
                both_ms=float(w["both"].median()), added_ms=float(np.median(added)), added_lo_ms=alo,
                added_hi_ms=ahi, hidden=float(share(pairs)), hidden_lo=lo, hidden_hi=hi)


def copy_kernel_overlap(size: int, *, kernel_ms: float, rounds: int, timeline: bool = True,
                        seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """A pinned H2D copy on a side stream while the compute stream runs matrix products.

    The compute stream waits for the copy's event before it may use the data, and the copied
    tensor is recorded on the compute stream so its memory is not reused early. Measured three
    ways, so that a drift of the GPU's clock between separately timed phases cannot pass for an
    overlap effect:

    1. *blocks* (the naive design): ``rounds`` × kernel-only, then copy-only, then both;
    2. *interleaved*: ``rounds`` rounds, each running the three in random order; the paired
       difference both - kernel of one round is what the copy added to that round;
    3. *timeline*: a few iterations of both under ``torch.profiler``: the copy's GPU interval
       against the kernels' intervals.

    SM clock, power and temperature (NVML, when importable) are sampled during every call.
    Returns the per-call table and a summary dict."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, a)  # warm-up (cuBLAS picks its kernel)
    one = cuda_ms(lambda: torch.mm(a, a), 10) / 10
    iters = max(1, round(kernel_ms / one))
    h = _host(size, True)
    side = torch.cuda.Stream()
    compute = torch.cuda.current_stream()

    def copy():
        with torch.cuda.stream(side):
            d = h.to("cuda", non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(side)
        compute.wait_event(ready)  # the consumer waits for the copy, on the GPU, not the host
        d.record_stream(compute)
        return d

    def kernels():
        for _ in range(iters):
            torch.mm(a, a)

    def both():
        kernels()
        copy()

    fns = {"kernel": kernels, "copy": copy, "both": both}
    sample = nvml_reader()[0] if torch.cuda.is_available() else None
    blocks = []
    for name, fn in fns.items():
        t = interleaved_ms({name: fn}, rounds, sample=sample)
        blocks.append(t.assign(design="blocks"))
    inter = interleaved_ms(fns, rounds, sample=sample, seed=seed).assign(design="interleaved")
    table = pd.concat([*blocks, inter], ignore_index=True)
    b = table[table["design"] == "blocks"].groupby("name")["ms"].median()
    summary = dict(size=size, matmuls=iters, matmul_ms=one, nvml=sample is not None,
                   blocks_overlap=overlap_ratio(float(b["copy"]), float(b["kernel"]), float(b["both"])),
                   blocks_kernel_ms=float(b["kernel"]), blocks_both_ms=float(b["both"]),
                   **paired_overlap(inter, seed=seed))
    if sample is not None and "sm_clock_mhz" in table:
        clocks = table.groupby(["design", "name"])["sm_clock_mhz"].median()
        summary.update({f"sm_clock_{d}_{n}": float(v) for (d, n), v in clocks.items()})
        power = table.groupby(["design", "name"])["power_w"].median()
        summary.update({f"power_{d}_{n}": float(v) for (d, n), v in power.items()})
    if timeline:
        try:
            tl = timeline_overlap(gpu_timeline(both, 3))
            summary.update({f"timeline_{k}": v for k, v in tl.items()})
            summary["timeline"] = True
        except Exception as e:  # the profiler is a second opinion; its absence is reported, not fatal
            summary.update(timeline=False, timeline_error=f"{type(e).__name__}: {e}")
    return table, summary


# --------------------------------------------------------------------------- pinning on the fly
def pin_on_the_fly(size: int, *, repeats: int) -> tuple[pd.DataFrame, dict]:
    """Per batch: ``pin_memory()`` then copy, vs copy into a reused pinned buffer then copy, vs the
    pageable copy; host clock around synchronised calls. The ``pin_memory()`` way is timed call by
    call from its very first call, with PyTorch's caching host allocator's counters read before
    and after, so the first call (which allocates page-locked memory) and later calls (which may
    reuse the cached block) are told apart. Where the allocator can be emptied, a fourth way
    empties it before every call: a fresh page-locked allocation each time.

    Run it before anything else pins memory of this size in the process."""
    src = _host(size, False)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    stats = getattr(torch.cuda, "host_memory_stats", lambda: {})
    empty = getattr(torch._C, "_host_emptyCache", None)
    rows = []

    def timed(way, fn, n, *, before=None):
        for k in range(n):
            if before:
                before()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            rows.append(dict(way=way, call=k + 1, ms=(time.perf_counter() - t0) * 1e3))

    dev[:4096].copy_(src[:4096])                     # first copies of the process stay out of the timing
    dev[:4096].copy_(torch.ones(4096, dtype=torch.uint8).pin_memory())  # (a small block, another size class)
    torch.cuda.synchronize()
    s0 = dict(stats())
    timed("pin_memory() per batch, then copy", lambda: dev.copy_(src.pin_memory(), non_blocking=True), repeats + 1)
    s1 = dict(stats())
    staging = _host(size, True)
    timed("copy into a reused pinned buffer, then copy",
          lambda: (staging.copy_(src), dev.copy_(staging, non_blocking=True)), repeats + 1)
    timed("pageable copy", lambda: dev.copy_(src), repeats + 1)
    s2 = dict(stats())
    if empty is not None:
        timed("pin_memory() with the pinned cache emptied before each call",
              lambda: dev.copy_(src.pin_memory(), non_blocking=True), repeats + 1,
              before=lambda: (torch.cuda.synchronize(), empty()))
    s3 = dict(stats())
    raw = pd.DataFrame(rows).assign(size=size)
    def allocs(a, b):
        for key in ("num_host_alloc", "allocations.allocated"):
            if key in a or key in b:
                return int(b.get(key, 0) - a.get(key, 0))
        return None

    alloc_us = s1.get("host_alloc_time.total", 0) - s0.get("host_alloc_time.total", 0) if s1 else None
    meta = dict(size=size, host_allocations_during_pin_calls=allocs(s0, s1), host_alloc_time_us=alloc_us,
                host_allocations_emptied_way=allocs(s2, s3) if empty is not None else None,
                pin_calls=repeats + 1, stats_available=bool(s1), cache_emptying=empty is not None,
                stats_keys=sorted(k for k in s1 if "alloc" in k)[:20])
    return raw, meta


def summarise_pin_cost(raw: pd.DataFrame) -> pd.DataFrame:
    """Per way: first call, and the median / p10 / p90 of later calls (ms), effective GB/s."""
    rows = []
    for way, g in raw.groupby("way", sort=False):
        later = g[g["call"] > 1]["ms"]
        n = int(g["size"].iloc[0])
        rows.append(dict(way=way, size=n, first_ms=float(g[g["call"] == 1]["ms"].iloc[0]),
                         median_ms=float(later.median()), p10_ms=float(later.quantile(0.1)),
                         p90_ms=float(later.quantile(0.9)), n=len(later),
                         GBps=n / (later.median() / 1e3) / GB))
    return pd.DataFrame(rows)


def stale_read(size: int = 64 << 20) -> dict:
    """A non_blocking D2H copy read by the host before synchronising, made visible: a long kernel
    is queued first, so the copy cannot have run yet when the host looks. Reading pinned memory
    early is not a crash, just a wrong value."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    dev = torch.full((size,), 7, dtype=torch.uint8, device="cuda")
    host = torch.zeros(size, dtype=torch.uint8, pin_memory=True)
    torch.cuda.synchronize()
    for _ in range(50):  # keeps the stream busy for a while
        torch.mm(a, a)
    host.copy_(dev, non_blocking=True)
    before = int(host[-1])  # no synchronisation: the copy is still queued
    torch.cuda.current_stream().synchronize()
    after = int(host[-1])
    return dict(expected=7, read_before_sync=before, read_after_sync=after, stale=before != 7)


# --------------------------------------------------------------------------- chapter
_SIZE_MAX = 1 << 36


def _at_least(name: str, value: int, minimum: int, maximum: int) -> int:
    positive_int(name, value, maximum=maximum)
    if value < minimum:
        raise ParameterError(name, value, f"an integer from {minimum:,} to {maximum:,}")
    return value


def check_parameters(p: dict) -> dict:
    """Every parameter of the chapter, checked; a one-line error names the first bad one."""
    from .book import results

    q = dict(p)
    for name in ("sizes", "overlap_sizes", "staging_sizes"):
        q[name] = int_list(name, p[name], minimum=4096, maximum=_SIZE_MAX)
    q["repeats"] = _at_least("repeats", p["repeats"], 3, 10_000)
    q["warmup"] = positive_int("warmup", p["warmup"], maximum=1000)
    q["ceiling_size"] = _at_least("ceiling_size", p["ceiling_size"], 4096, _SIZE_MAX)
    q["cpu_work_ms"] = number("cpu_work_ms", p["cpu_work_ms"], minimum=0, maximum=10_000, exclusive_minimum=True)
    q["kernel_ms"] = number("kernel_ms", p["kernel_ms"], minimum=0, maximum=10_000, exclusive_minimum=True)
    q["kernel_rounds"] = _at_least("kernel_rounds", p["kernel_rounds"], 3, 10_000)
    q["profile_timeline"] = boolean("profile_timeline", p["profile_timeline"])
    if "is_reference_run" in p:
        q["is_reference_run"] = boolean("is_reference_run", p["is_reference_run"])
    if p.get("reference_host") is not None:
        hosts = results.reference_hosts()
        if p["reference_host"] not in hosts:
            raise ParameterError("reference_host", p["reference_host"],
                                 "None or a host under data/reference/: " + (", ".join(hosts) or "none committed"))
    if p.get("run_dir") not in (None, ""):
        q["run_dir"] = creatable_dir("run_dir", p["run_dir"])
    return q


def _all_sizes(p: dict) -> list[int]:
    return [*p["sizes"], *p["overlap_sizes"], *p["staging_sizes"], p["ceiling_size"]]


def preflight(params: dict) -> dict:
    """Check every parameter and that the largest buffers fit, before any work."""
    p = check_parameters(params)
    check_sizes(_all_sizes(p), extra_host_bytes=flush_bytes(last_level_cache()["bytes"]))
    return p


def run(*, sizes, repeats: int, warmup: int, ceiling_size: int, overlap_sizes, cpu_work_ms: float,
        staging_sizes=(64 << 20,), kernel_ms: float = 20.0, kernel_rounds: int = 20, profile_timeline: bool = True,
        run_dir=None, progress: bool = True):
    """Run chapter 6 (everything that needs a GPU is skipped, and said so, without CUDA; the host
    side of the staging experiment and the CPU work's jitter are measured anyway)."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from tqdm import tqdm

    from .book import results

    p = check_parameters(params)
    llc = last_level_cache()
    warnings = check_sizes(_all_sizes(p), extra_host_bytes=flush_bytes(llc["bytes"]))
    res = results.start(CHAPTER, params, run_dir)
    g = res.fingerprint["gpu"]
    peak = link_peak_gbps(g.get("pcie_gen_max"), g.get("pcie_width_max"))
    spin_iters, spin_ms = calibrate_spin(cpu_work_ms)
    cuda = torch.cuda.is_available()
    res.metadata.update(link=dict(gen_current=g.get("pcie_gen_current"), gen_max=g.get("pcie_gen_max"),
                                  width_current=g.get("pcie_width_current"), width_max=g.get("pcie_width_max"),
                                  peak_GBps=peak),
                        limits=host_limits(), warnings=warnings, cuda=cuda, llc=llc,
                        transparent_hugepages=transparent_hugepages(),
                        cpu_work=dict(iterations=spin_iters, calibrated_ms=spin_ms,
                                      **spin_jitter(spin_iters, max(10, repeats))))
    steps = len(p["staging_sizes"]) + (len(p["sizes"]) * 4 + len(p["overlap_sizes"]) * 4 if cuda else 0)
    with tqdm(total=steps, desc="chapter 6", disable=not progress) as bar:
        if cuda:
            torch.zeros(1, device="cuda")  # context creation stays out of every timing
            pin_size = min(p["overlap_sizes"], key=lambda s: abs(s - (64 << 20)))
            raw, meta = pin_on_the_fly(pin_size, repeats=max(5, repeats // 2))  # first: nothing pinned yet
            res.add("pin_cost_raw", raw)
            res.add("pin_cost", summarise_pin_cost(raw))
            res.metadata["pin_cost"] = meta
            raw = bandwidth_sweep(p["sizes"], repeats=repeats, warmup=warmup, progress=bar)
            res.add("bandwidth_raw", raw)
            res.add("bandwidth", summarise_bandwidth(raw, peak))
        st = staging_experiment(p["staging_sizes"], repeats=max(5, repeats // 2), warmup=warmup,
                                llc_bytes=llc["bytes"], cuda=cuda, progress=bar)
        res.add("staging_raw", st)
        res.add("staging", summarise_staging(st))
        if cuda:
            ov = overlap_experiment(p["overlap_sizes"], spin_iters=spin_iters, repeats=repeats, progress=bar)
            res.add("overlap_raw", ov)
            res.add("overlap", summarise_overlap(ov))
    if cuda:
        res.metadata["ceiling"] = independent_ceiling(ceiling_size, repeats=max(5, repeats // 2), warmup=warmup)
        mid = min(p["overlap_sizes"], key=lambda s: abs(s - (256 << 20)))
        res.add("bidirectional", [bidirectional(mid, repeats=max(5, repeats // 2))])
        calls, summary = copy_kernel_overlap(mid, kernel_ms=kernel_ms, rounds=kernel_rounds,
                                             timeline=profile_timeline)
        res.add("copy_kernel_calls", calls)
        res.add("copy_kernel", [summary])
        res.add("stale_read", [stale_read()])
    else:
        res.metadata["note"] = "no CUDA device: nothing crossed a PCIe bus on this machine"
    res.save(results.resolve_run_dir(run_dir))
    return res


# --------------------------------------------------------------------------- reading results
def _events(res) -> pd.DataFrame:
    b = res.table("bandwidth")
    return b[b["clock"] == "CUDA events"]


def pinned_h2d_1gib(res) -> float | None:
    """Median pinned H2D GB/s by CUDA events at the largest measured size."""
    if "bandwidth" not in res.tables:
        return None
    b = _events(res)
    b = b[(b["direction"] == "H2D") & (b["memory"] == "pinned")]
    return float(b.sort_values("size")["median"].iloc[-1]) if len(b) else None


def key_metrics(res) -> dict:
    """The published metrics of this chapter, from a result: name -> (value, None)."""
    out = {}
    if "bandwidth" not in res.tables:
        return out
    b = _events(res).set_index(["size", "direction", "memory"])["median"]
    gib, q = 1 << 30, 256 << 20
    for key, (size, d, m) in {"H2D pinned, 1 GiB": (gib, "H2D", "pinned"),
                              "D2H pageable, 256 MiB": (q, "D2H", "pageable"),
                              "D2H pageable, 1 GiB": (gib, "D2H", "pageable"),
                              "D2H pinned, 1 GiB": (gib, "D2H", "pinned")}.items():
        if (size, d, m) in b.index:
            out[key] = (float(b.loc[(size, d, m)]), None)
    if "D2H pinned, 1 GiB" in out and "D2H pageable, 1 GiB" in out:
        out["D2H pinned ÷ pageable, 1 GiB"] = (out["D2H pinned, 1 GiB"][0] / out["D2H pageable, 1 GiB"][0], None)
    if "overlap" in res.tables:
        o = res.table("overlap")
        o = o[(o["memory"] == "pinned") & (o["mode"] == "non_blocking")].set_index("size")
        for size, label in ((q, "256 MiB"), (16 << 20, "16 MiB")):
            if size in o.index:
                row = o.loc[size]
                judged = "verdict" not in row or row["verdict"] != TOO_SHORT
                out[f"overlap, pinned + non_blocking, {label}"] = (100 * float(row["overlap"]) if judged else None,
                                                                   None)
    peak = res.metadata.get("link", {}).get("peak_GBps")
    if peak:
        out["link peak (theoretical)"] = (peak, None)
    return out


_PATHS = {("H2D", "pinned"): "host-to-device from pinned memory",
          ("H2D", "pageable"): "host-to-device from pageable memory",
          ("D2H", "pinned"): "device-to-host into pinned memory",
          ("D2H", "pageable"): "device-to-host into pageable memory"}


def _raw_runs(res, size: int, direction: str, memory: str, clock: str = "CUDA events") -> list[float]:
    if "bandwidth_raw" not in res.tables:
        return []
    r = res.table("bandwidth_raw")
    r = r[(r["size"] == size) & (r["direction"] == direction) & (r["memory"] == memory) & (r["clock"] == clock)]
    return r["GBps"].tolist()


def _published_if(size: int, wanted: int, metric: str) -> str | None:
    return metric if size == wanted else None


def _pct(fraction: float) -> str:
    """A share as a percentage, without a minus sign on a value that prints as zero ('0.0%', not '-0.0%')."""
    text = fx.pct(fraction)
    if text.startswith("-"):
        return text[1:] if not text.strip("-0.,%") else "−" + text[1:]
    return text


def _repeats_note(res, size: int, n: int) -> str:
    """'median of 5' with the reason when the sweep timed fewer copies than ``repeats`` at a large size."""
    rep_ = (res.parameters or {}).get("repeats")
    if rep_ is None or n >= int(rep_):
        return f"median of {n}"
    return (f"median of {n}: above {size_label(256 << 20)} the sweep times fewer copies than the {int(rep_)} "
            f"repeats, to bound its run time")


# --------------------------------------------------------------------------- findings
def finding_pinned_h2d(res) -> Finding:
    """Pinned H2D at the largest size, against the link's peak and the independent ceiling."""
    b = _events(res)
    n = int(b["size"].max())
    row = b[(b["size"] == n) & (b["direction"] == "H2D") & (b["memory"] == "pinned")].iloc[0]
    peak = res.metadata.get("link", {}).get("peak_GBps")
    c = res.metadata.get("ceiling", {})
    text = (f"A pinned host-to-device copy of {size_label(n)} moved **{fx.num(row['median'], 'GB/s')}** "
            f"({_repeats_note(res, n, int(row['n']))}; p10–p90 {fx.span(row['p10'], row['p90'], 'GB/s')})")
    if peak:
        text += f", {fx.pct(row['median'] / peak)} of the link's theoretical peak of {fx.num(peak, 'GB/s')}"
    if c.get("available"):
        share = row["median"] / c["GBps"]
        text += (f", and {fx.pct(share)} of the ceiling measured through a second path "
                 f"({fx.num(c['GBps'], 'GB/s')}): PyTorch's copy "
                 + ("adds no measurable cost." if share >= CEILING_TARGET else
                    f"falls short of it by more than {fx.pct(1 - CEILING_TARGET)}."))
    else:
        text += "."
    return Finding("h2d_pinned", text, float(row["median"]), "GB/s",
                   published=_published_if(n, 1 << 30, "H2D pinned, 1 GiB"),
                   interval=(float(row["p10"]), float(row["p90"])), values=dict(size=n, peak=peak))


def finding_slowest_path(res) -> Finding:
    """Which of the four paths is slowest at the largest size, and pinned vs pageable D2H."""
    b = _events(res)
    n = int(b["size"].max())
    at = b[b["size"] == n].set_index(["direction", "memory"])["median"]
    slow = at.idxmin()
    fast = at.idxmax()
    d2h_pin = _raw_runs(res, n, "D2H", "pinned") or [float(at[("D2H", "pinned")])]
    d2h_pag = _raw_runs(res, n, "D2H", "pageable") or [float(at[("D2H", "pageable")])]
    h2d_pin = _raw_runs(res, n, "H2D", "pinned") or [float(at[("H2D", "pinned")])]
    h2d_pag = _raw_runs(res, n, "H2D", "pageable") or [float(at[("H2D", "pageable")])]
    r, lo, hi = fx.ratio_interval(d2h_pin, d2h_pag)
    rh, _, _ = fx.ratio_interval(h2d_pin, h2d_pag)
    text = (f"At {size_label(n)} the slowest path is **{_PATHS[slow]}** at {fx.num(at[slow], 'GB/s')}, the fastest "
            f"{_PATHS[fast]} at {fx.num(at[fast], 'GB/s')}. Device-to-host into pinned memory is "
            f"{fx.compare(d2h_pin, d2h_pag, more='faster than', less='slower than', same='level with')} "
            f"into pageable memory (range over repetitions {fx.span(lo, hi, '×')}); host-to-device, "
            f"pinned is {fx.compare(h2d_pin, h2d_pag)} pageable.")
    return Finding("slowest_path", text, r, "×", published=_published_if(n, 1 << 30, "D2H pinned ÷ pageable, 1 GiB"),
                   interval=(lo, hi), values=dict(size=n, slowest=" ".join(slow), h2d_ratio=rh))


def _staging_median(st: pd.DataFrame, measure: str) -> pd.Series:
    s = st[st["measure"] == measure].set_index("size")["median"]
    return s.sort_index()


def staging_story(res) -> dict:
    """What the staging experiment shows about pageable H2D copies, as numbers (see
    :func:`finding_pageable_drop`). Works on the bandwidth sweep alone when no staging table exists."""
    out = dict(llc=res.metadata.get("llc", {}).get("bytes"))
    b = _events(res)
    h = b[(b["direction"] == "H2D") & (b["memory"] == "pageable")].set_index("size")["median"].sort_index()
    d = b[(b["direction"] == "D2H") & (b["memory"] == "pageable")].set_index("size")["median"].sort_index()
    big = h[h.index >= 16 * MiB] if (h.index >= 16 * MiB).any() else h
    out.update(h2d_peak=float(big.max()), h2d_peak_size=int(big.idxmax()), h2d_last=float(h.iloc[-1]),
               h2d_last_size=int(h.index[-1]), d2h_min=float(d[d.index >= big.index.min()].min()),
               d2h_max=float(d[d.index >= big.index.min()].max()))
    out["drop"] = out["h2d_last"] / out["h2d_peak"]
    out["has_staging"] = ("staging" in res.tables
                          and (res.table("staging")["measure"] == "H2D pageable, source cached").any())
    if not out["has_staging"]:
        return out
    st = res.table("staging")
    cached = _staging_median(st, "H2D pageable, source cached")
    flushed = _staging_median(st, "H2D pageable, cache flushed")
    mem_c = _staging_median(st, "memcpy one core, source cached")
    mem_f = _staging_median(st, "memcpy one core, cache flushed")
    d2h = _staging_median(st, "D2H pageable")
    huge = _staging_median(st, "H2D pageable, huge pages")
    small, large = int(cached.index.min()), int(cached.index.max())
    out.update(small=small, large=large, cached_small=float(cached[small]), cached_large=float(cached[large]),
               flushed_small=float(flushed[small]), flushed_large=float(flushed[large]),
               memcpy_cached_small=float(mem_c[small]), memcpy_cached_large=float(mem_c[large]),
               memcpy_flushed_small=float(mem_f[small]), d2h_small=float(d2h[small]), d2h_large=float(d2h[large]))
    # where the cached copy falls below the midpoint between its small- and large-size rates
    mid = (out["cached_small"] + out["cached_large"]) / 2
    below = cached[cached < mid]
    out["knee"] = int(below.index.min()) if len(below) else None
    out["cached_at_knee"] = float(cached[out["knee"]]) if out["knee"] else None
    out["memcpy_flushed_large"] = float(mem_f[large])
    if len(huge):
        beyond = [x for x in cached.index if x >= (out["knee"] or small) and x in huge.index]
        out["huge_sizes"] = beyond
        out["huge_runs"] = [float(huge[x]) for x in beyond]
        out["cached_runs"] = [float(cached[x]) for x in beyond]
        out["huge_ratios"] = [h / c for h, c in zip(out["huge_runs"], out["cached_runs"])]
        hb = st[(st["measure"] == "H2D pageable, huge pages")]
        out["huge_bytes"] = (float(hb["huge_bytes"].dropna().min())
                             if "huge_bytes" in hb and hb["huge_bytes"].notna().any() else None)
    # does the single-core memcpy follow the copy? correlation of the two curves over sizes
    both = pd.concat([cached.rename("copy"), mem_c.rename("memcpy")], axis=1).dropna()
    out["corr"] = float(both["copy"].corr(both["memcpy"])) if len(both) > 2 else float("nan")
    return out


#: a spread of the huge-page effect over sizes wider than this (max - min of the ratios) leaves it unresolved
HUGE_SPREAD = 0.2
#: two measurements of the same path that differ by more than this are reported as differing
SAME_PATH_TOL = 0.10


def _cause_kind(s: dict) -> str:
    """Which reading of the staging experiment the data support: 'cache', 'other', 'cached', 'none'."""
    flush_hurts = s["flushed_small"] < 0.8 * s["cached_small"]
    cached_falls = s["cached_large"] < 0.8 * s["cached_small"]
    return ("cache" if flush_hurts and cached_falls else "other" if cached_falls else
            "cached" if flush_hurts else "none")


def finding_pageable_drop(res) -> Finding:
    """The pageable H2D drop at large sizes (one sentence) and the cause the staging experiment
    supports (one sentence); the details are in :func:`staging_details`."""
    s = staging_story(res)
    drop = s["drop"] < 1 - 0.15
    text = (f"Host-to-device from pageable memory peaks at {fx.num(s['h2d_peak'], 'GB/s')} "
            f"({size_label(s['h2d_peak_size'])}) and "
            + (f"**falls to {fx.num(s['h2d_last'], 'GB/s')}** at {size_label(s['h2d_last_size'])}"
               if drop else f"stays at {fx.num(s['h2d_last'], 'GB/s')} up to {size_label(s['h2d_last_size'])}")
            + f", while device-to-host into pageable memory stays at {fx.span(s['d2h_min'], s['d2h_max'], 'GB/s')}.")
    if not s["has_staging"]:
        text += " This result has no staging experiment, so the cause is not measured in it."
        return Finding("pageable_drop", text, s["h2d_last"], "GB/s", values=s)
    kind = _cause_kind(s)
    small = size_label(s["small"])
    if kind == "cache":
        knee = s.get("knee")
        text += (" **Cause (staging experiment): the driver's CPU staging copy is fast only while the source is "
                 f"still in the CPU's cache** — flushing the cache slows a {small} copy from "
                 f"{fx.num(s['cached_small'])} to {fx.num(s['flushed_small'], 'GB/s')}, and from "
                 + (f"about {size_label(knee)}" if knee else "the larger sizes")
                 + " on the source no longer stays cached between copies.")
    elif kind == "other":
        text += (f" The staging experiment does not point to the cache: flushing it does not slow a {small} copy "
                 f"({fx.num(s['cached_small'])} cached, {fx.num(s['flushed_small'], 'GB/s')} flushed), so the drop "
                 "has another cause on this machine.")
    elif kind == "cached":
        text += (f" Flushing the cache slows a {small} copy ({fx.num(s['cached_small'])} to "
                 f"{fx.num(s['flushed_small'], 'GB/s')}), but the large cached copy does not slow down: the source "
                 "stays cached at every size of the staging experiment.")
    else:
        text += " In the staging experiment neither a flushed cache nor the size changes the pageable rate."
    return Finding("pageable_drop", text, s["cached_large"], "GB/s", values=s)


def _sizes_text(sizes) -> str:
    sizes = sorted(int(x) for x in sizes)
    if len(sizes) == 1:
        return size_label(sizes[0])
    if len(sizes) == 2:
        return f"{size_label(sizes[0])} and {size_label(sizes[1])}"
    return f"{size_label(sizes[0])} to {size_label(sizes[-1])}"


def staging_details(res) -> str:
    """What the staging experiment shows beyond the key result, computed: the rates behind the cause,
    the share of one core's copy rate, where one core does not model the staging stage, a dip and
    recovery the run does not explain, the same path measured in two experiments, huge pages."""
    s = staging_story(res)
    if not s["has_staging"]:
        return ""
    st = res.table("staging")
    cached = _staging_median(st, "H2D pageable, source cached")
    mem_c = _staging_median(st, "memcpy one core, source cached")
    mem_f = _staging_median(st, "memcpy one core, cache flushed")
    small, large = size_label(s["small"]), size_label(s["large"])
    out = [f"A {small} pageable copy ran at {fx.num(s['cached_small'], 'GB/s')} with its source cached and "
           f"{fx.num(s['flushed_small'], 'GB/s')} with the CPU caches flushed first; at {large}, "
           f"{fx.num(s['cached_large'], 'GB/s')} (flushed: {fx.num(s['flushed_large'], 'GB/s')}). One core copying "
           f"the same {small} source managed {fx.num(s['memcpy_cached_small'], 'GB/s')} from cache and "
           f"{fx.num(s['memcpy_flushed_small'], 'GB/s')} from DRAM."]
    knee, llc = s.get("knee"), s["llc"]
    if _cause_kind(s) == "cache" and knee:
        at_knee = float(s["cached_at_knee"])
        if 0.8 <= s["flushed_small"] / at_knee <= 1.25:
            out.append(f"The flushed {small} copy runs about as fast as a cached {size_label(knee)} copy "
                       f"({fx.num(at_knee, 'GB/s')}): from there on the source is read from DRAM.")
        if llc:
            out.append(f"That is where source and staging buffers outgrow the {size_label(llc)} last-level cache."
                       if knee >= llc / 2 else
                       f"That is well below the {size_label(llc)} last-level cache this CPU reports: the copy gets a "
                       "smaller share of it" + (" (in a virtual machine the cache is shared with the rest of the host)"
                                                if (res.fingerprint.get("cpu") or {}).get("hypervisor") else "") + ".")
    # share of one core's DRAM copy rate beyond the knee
    beyond = [x for x in cached.index if x >= (knee or s["small"]) and x in mem_f.index and mem_f[x] > 0]
    if beyond:
        share = {x: cached[x] / mem_f[x] for x in beyond}
        lo, hi = min(share.values()), max(share.values())
        out.append(f"From {size_label(beyond[0])} on, the cached copy runs at "
                   f"{fx.span(100 * lo, 100 * hi, '%')} of one core's DRAM copy rate at the same size"
                   + ("" if fx.pct(lo) == fx.pct(hi) else
                      f" ({fx.pct(share[beyond[-1]])} at {size_label(beyond[-1])})") + ".")
    # where the copy beats one core even from cache: one core does not model the staging stage there
    faster = [x for x in cached.index if x in mem_c.index and cached[x] > (1 + SAME_PATH_TOL) * mem_c[x]]
    if faster:
        rate = fx.span(cached[faster].min(), cached[faster].max(), "GB/s")
        out.append(f"At {_sizes_text(faster)} the pageable copy ({rate}) "
                   f"is faster than one core copying the same source even from cache "
                   f"({fx.span(mem_c[faster].min(), mem_c[faster].max(), 'GB/s')}), so one core's memcpy does not "
                   "model the staging stage at those sizes.")
    # a dip beyond the knee and a recovery at the largest size
    if knee:
        mid = cached[(cached.index >= knee) & (cached.index < s["large"])]
        dip = mid[mid * (1 + 0.15) < s["cached_large"]]
        if len(dip):
            out.append(f"The cached copy dips to {fx.span(dip.min(), dip.max(), 'GB/s')} at {_sizes_text(dip.index)} "
                       f"and recovers to {fx.num(s['cached_large'], 'GB/s')} at {large}; this run does not explain "
                       "the recovery.")
    # the same path in the bandwidth sweep
    b = _events(res)
    sweep = b[(b["direction"] == "H2D") & (b["memory"] == "pageable")].set_index("size")["median"]
    both = [x for x in cached.index if x in sweep.index]
    differ = [x for x in both if abs(sweep[x] / cached[x] - 1) > SAME_PATH_TOL]
    if differ:
        out.append("The same path, pageable host-to-device, measured in two experiments: "
                   + "; ".join(f"at {size_label(x)} {fx.num(sweep[x], 'GB/s')} in the bandwidth sweep and "
                               f"{fx.num(cached[x], 'GB/s')} here (source cached), "
                               f"{fx.pct(abs(sweep[x] / cached[x] - 1))} apart" for x in differ)
                   + f". They differ by more than the {fx.pct(SAME_PATH_TOL)} this chapter treats as agreement. "
                     "Both time the same copy with CUDA events but in different experiments (what ran before "
                     "each copy differs); this run does not say which difference matters.")
    elif both:
        out.append(f"At {_sizes_text(both)} the bandwidth sweep measured the same path within "
                   f"{fx.pct(SAME_PATH_TOL)} of this experiment.")
    if s.get("huge_runs"):
        d = fx.direction(s["huge_runs"], s["cached_runs"], tol=0.1)
        hb = s.get("huge_bytes")
        backed = " (the kernel backed none of it with huge pages)" if hb == 0 else ""
        r = s["huge_ratios"]
        wide = max(r) - min(r) > HUGE_SPREAD
        head = (f"Huge pages for the source{backed} changed the rate by a median of {_pct(float(np.median(r)) - 1)} "
                f"over {len(r)} sizes from {size_label(s['huge_sizes'][0])}, "
                f"{fx.span(100 * (min(r) - 1), 100 * (max(r) - 1), '%')} size by size: ")
        if d == 0 and wide:
            out.append(head + "an effect, if any, is within that wide spread and not resolved by this run.")
        else:
            out.append(head + fx.choose(d, "page size matters too.", "they hurt here.", "page size is not the cause."))
    return " ".join(out)


def finding_cpu_overlap(res) -> Finding:
    """Overlap of a copy with CPU work at the size nearest 256 MiB, with its spread and the verdicts."""
    o = res.table("overlap")
    n = int(min(o["size"].unique(), key=lambda s: abs(s - (256 << 20))))
    at = o[o["size"] == n].set_index(["memory", "mode"])
    pn = at.loc[("pinned", "non_blocking")]
    has_spread = "overlap_p10" in o
    jitter = float(pn["jitter_ms"]) if "jitter_ms" in o else None
    v = pn["verdict"] if has_spread else verdict(float(pn["overlap"]))
    shorter = "copy" if pn["copy_ms"] <= pn["cpu_ms"] else "Python work"
    text = (f"At {size_label(n)}, a pinned non_blocking copy ({fx.num(pn['copy_ms'], 'ms')}) and "
            f"{fx.num(pn['cpu_ms'], 'ms')} of Python work overlapped by **{_pct(pn['overlap'])}** (the share of the "
            f"shorter one, the {shorter}, hidden behind the other")
    if has_spread:
        text += (f"; p10–p90 over {int(pn['n'])} rounds: "
                 f"{fx.span(100 * pn['overlap_p10'], 100 * pn['overlap_p90'], '%')}")
    text += f"): {v}."
    others = [f"{m} {md}: {r['verdict']} ({_pct(r['overlap'])})" for (m, md), r in at.iterrows()
              if (m, md) != ("pinned", "non_blocking")]
    if others and has_spread:
        text += " The other three at that size: " + "; ".join(others) + "."
    if has_spread and jitter is not None:
        short = sorted(int(s) for s in o[o["verdict"] == TOO_SHORT]["size"].unique())
        text += (f" The CPU work's jitter (its std within a row) was {fx.num(jitter, 'ms')} in that row and "
                 f"{fx.span(o['jitter_ms'].min(), o['jitter_ms'].max(), 'ms')} over all rows; a copy shorter "
                 f"than {MIN_COPY_OVER_JITTER:g}× its row's jitter gets no verdict")
        text += (": some or all of the " + ", ".join(size_label(s) for s in short) + " copies were too short "
                 "to tell." if short else "; every copy here was long enough to judge.")
    return Finding("cpu_overlap", text, 100 * float(pn["overlap"]), "%",
                   published=_published_if(n, 256 << 20, "overlap, pinned + non_blocking, 256 MiB"),
                   interval=(100 * float(pn["overlap_p10"]), 100 * float(pn["overlap_p90"])) if has_spread else None,
                   values=dict(size=n, verdict=v))


def finding_copy_kernel(res) -> Finding:
    """How much of a side-stream copy hides behind matrix products (paired rounds, timeline, clocks)."""
    ck = res.table("copy_kernel").iloc[0]
    n = int(ck["size"])
    if "hidden" not in ck:  # an older result: one estimate from separately measured medians
        text = (f"A {size_label(n)} copy on a side stream during {fx.num(ck['kernel_ms'], 'ms')} of matrix "
                f"products: {_pct(ck['overlap'])} hidden by one unpaired estimate (no interval in this run).")
        return Finding("copy_kernel", text, 100 * float(ck["overlap"]), "%", values=dict(size=n))
    lo, hi = float(ck["hidden_lo"]), float(ck["hidden_hi"])
    v = verdict(float(ck["hidden"]), low=lo, high=hi)
    text = (f"A {size_label(n)} pinned copy on a side stream ({fx.num(ck['copy_ms'], 'ms')} alone) during "
            f"{fx.num(ck['kernel_ms'], 'ms')} of matrix products added {fx.num(ck['added_ms'], 'ms')} to them "
            f"(median of {int(ck['rounds'])} interleaved pairs, 95% interval "
            f"{fx.span(ck['added_lo_ms'], ck['added_hi_ms'], 'ms')}): **{_pct(ck['hidden'])} of the copy hidden** "
            f"(95% interval {fx.span(100 * lo, 100 * hi, '%')}; {v}).")
    cov = ck.get("timeline_covered_share")
    if (ck.get("timeline") is True or ck.get("timeline") == 1.0) and cov is not None and math.isfinite(cov):
        text += (f" The profiler's GPU timeline shows {fx.pct(ck['timeline_covered_share'])} of the copy's time "
                 "running under a kernel")
        sl = ck.get("timeline_kernel_slowdown")
        if sl is not None and math.isfinite(sl):
            text += (f", and the kernels that ran beside the copy took {fx.times(sl)} as long as the others")
        text += "."
    bo = ck.get("blocks_overlap")
    if bo is not None and math.isfinite(bo):
        text += (f" Timed the naive way (all kernel-only runs, then all copy-only, then all together) the same "
                 f"copy looked {_pct(bo)} hidden.")
    if "copy_kernel_calls" in res.tables:
        c = res.table("copy_kernel_calls")
        kb = c[(c["design"] == "blocks") & (c["name"] == "kernel")]
        if len(kb):
            lo_k, hi_k = float(kb["ms"].min()), float(kb["ms"].max())
            drift = hi_k - lo_k
            text += (f" Within the kernel-only block alone the matrix products took "
                     f"{fx.span(lo_k, hi_k, 'ms')}")
            if "sm_clock_mhz" in kb and kb["sm_clock_mhz"].notna().any():
                text += f" while the SM clock read {fx.span(kb['sm_clock_mhz'].min(), kb['sm_clock_mhz'].max(), 'MHz')}"
                if "power_w" in kb and kb["power_w"].notna().any():
                    text += f" and the power {fx.span(kb['power_w'].min(), kb['power_w'].max(), 'W')}"
            per_pct = float(ck["kernel_ms"]) / float(ck["copy_ms"])
            text += (f": a drift of {fx.num(drift, 'ms')}, "
                     + ("more than the whole copy" if drift > float(ck["copy_ms"]) else
                        f"{fx.pct(drift / float(ck['copy_ms']))} of the copy")
                     + f". Every 1% the matrix products speed up or slow down between separately timed phases moves "
                       f"an unpaired estimate by {fx.num(per_pct)} percentage points; the paired rounds cancel it.")
    return Finding("copy_kernel", text, 100 * float(ck["hidden"]), "%", interval=(100 * lo, 100 * hi),
                   values=dict(size=n, verdict=v))


def finding_pin_cost(res) -> Finding:
    """What ``pin_memory()`` per batch costs: first call, later calls, a reused pinned buffer."""
    pc = res.table("pin_cost").set_index("way")
    pin, reuse = "pin_memory() per batch, then copy", "copy into a reused pinned buffer, then copy"
    n = int(pc["size"].iloc[0])
    if "first_ms" not in pc:  # an older result: medians only
        d = fx.compare(pc.loc[pin, "median_ms"], pc.loc[reuse, "median_ms"], more="slower than",
                       less="faster than", same="level with")
        text = (f"For one {size_label(n)} batch, `pin_memory()` then copy took "
                f"{fx.num(pc.loc[pin, 'median_ms'], 'ms')} "
                f"(median), {d} copying into a reused pinned buffer ({fx.num(pc.loc[reuse, 'median_ms'], 'ms')}).")
        return Finding("pin_cost", text, float(pc.loc[pin, "median_ms"]), "ms", values=dict(size=n))
    first, later, reused = (float(pc.loc[pin, "first_ms"]), float(pc.loc[pin, "median_ms"]),
                            float(pc.loc[reuse, "median_ms"]))
    meta = res.metadata.get("pin_cost", {})
    allocs = meta.get("host_allocations_during_pin_calls")
    text = (f"For one {size_label(n)} batch, the first `pin_memory()` call took **{fx.num(first, 'ms')}**, later "
            f"calls {fx.num(later, 'ms')} (median), "
            f"{fx.compare(later, reused, more='slower than', less='faster than', same='level with')} a reused "
            f"pinned buffer ({fx.num(reused, 'ms')}).")
    if allocs is not None:
        calls = meta.get("pin_calls")
        text += (f" PyTorch's caching host allocator made {allocs} page-locked allocation"
                 f"{'' if allocs == 1 else 's'} over {calls} calls: "
                 + ("later calls reuse the cached block, so pinning per batch costs about a host copy."
                    if allocs <= 1 else "the cached block was not reused every time."))
    if "pin_memory() with the pinned cache emptied before each call" in pc.index:
        fresh = float(pc.loc["pin_memory() with the pinned cache emptied before each call", "median_ms"])
        fa = meta.get("host_allocations_emptied_way")
        made = ("" if fa is None else
                f" ({fa} page-locked allocation{'' if fa == 1 else 's'} in {meta.get('pin_calls')} calls)")
        text += (f" With the cache emptied before every call{made}, `pin_memory()` then copy took "
                 f"{fx.num(fresh, 'ms')} per batch: "
                 + fx.choose(fx.direction(fresh, later, tol=0.2),
                             "that is what pinning afresh on every call would cost.",
                             "no slower, so the allocation itself is cheap here.",
                             "about the same, so the allocation itself is cheap here."))
    return Finding("pin_cost", text, later, "ms", values=dict(size=n, first=first, reused=reused, allocs=allocs))


def finding_no_cuda(res) -> Finding:
    return Finding("no_cuda", "This machine has **no CUDA device**: nothing crossed a PCIe bus here; what ran is "
                              "the host side of the chapter.")


def finding_host_memcpy(res) -> Finding:
    """Host side of the staging experiment (runs on any machine): one core's memcpy from cache vs DRAM."""
    st = res.table("staging")
    c = _staging_median(st, "memcpy one core, source cached")
    f = _staging_median(st, "memcpy one core, cache flushed")
    llc = res.metadata.get("llc", {}).get("bytes")
    parts = [f"{size_label(int(n))}: {fx.num(c[n])} GB/s cached, {fx.num(f[n])} GB/s flushed" for n in c.index]
    text = ("One core of this machine copying a buffer (the work a pageable copy puts on the CPU) ran at "
            + "; ".join(parts) + (f" (last-level cache: {size_label(llc)})." if llc else "."))
    n = int(c.index.max())
    return Finding("host_memcpy", text, float(f[n]), "GB/s", values=dict(size=n))


def finding_cpu_jitter(res) -> Finding:
    cw = res.metadata["cpu_work"]
    j = cw.get("std_ms")
    text = (f"The CPU work calibrated to {fx.num(cw['calibrated_ms'], 'ms')} varied by {fx.num(j, 'ms')} (std over "
            f"{cw.get('n')} runs) on this machine, so a copy shorter than {fx.num(MIN_COPY_OVER_JITTER * j, 'ms')} "
            "could not be judged against it.")
    return Finding("cpu_jitter", text, j, "ms")


def findings(res) -> list[Finding]:
    """The chapter's key results (3-6), computed from a result; older results give what they can."""
    if "bandwidth" not in res.tables:
        out = [finding_no_cuda(res)]
        if "staging" in res.tables:
            out.append(finding_host_memcpy(res))
        if "cpu_work" in res.metadata and res.metadata["cpu_work"].get("std_ms") is not None:
            out.append(finding_cpu_jitter(res))
        return out
    out = [finding_pinned_h2d(res), finding_slowest_path(res), finding_pageable_drop(res)]
    if "overlap" in res.tables:
        out.append(finding_cpu_overlap(res))
    if "copy_kernel" in res.tables:
        out.append(finding_copy_kernel(res))
    if "pin_cost" in res.tables:
        out.append(finding_pin_cost(res))
    return out[:6]


# --------------------------------------------------------------------------- other computed text
def link_text(res, *, this_machine: bool) -> str:
    link = res.metadata["link"]
    who = "this machine" if this_machine else "the reference host"
    if not link.get("peak_GBps"):
        return f"The link's generation and width could not be read on {who}."
    return (f"On {who} the GPU sits on a **PCIe {link['gen_max']}.0 x{link['width_max']}** link (running at "
            f"gen {link['gen_current']} x{link['width_current']} when read; idle links may train down), whose "
            f"theoretical peak per direction is **{fx.num(link['peak_GBps'], 'GB/s')}**: "
            f"{PER_LANE_GBPS[link['gen_max']]:.3f} GB/s per lane after line coding, × {link['width_max']} lanes.")


def clocks_table(res) -> pd.DataFrame:
    """Host clock ÷ CUDA events (median ms ratio) per size, one column per path."""
    r = res.table("bandwidth_raw")
    med = r.groupby(["size", "direction", "memory", "clock"])["ms"].median().unstack("clock")
    med["ratio"] = med["host clock"] / med["CUDA events"]
    med["extra_us"] = 1e3 * (med["host clock"] - med["CUDA events"])
    return med.reset_index()


def two_clocks(res) -> str:
    """The conclusion of the two-clocks comparison, computed."""
    t = clocks_table(res)
    # smallest size from which every path agrees at that size and all larger ones
    sizes = sorted(t["size"].unique())
    from_size = None
    for s in sizes:
        if all(((t[t["size"] >= s]["ratio"] - 1).abs() < CLOCKS_AGREE)):
            from_size = s
            break
    extra = float(t[t["size"] == sizes[0]]["extra_us"].median())
    worst = t.loc[t["ratio"].idxmax()]
    big = t[t["size"] == sizes[-1]]
    pag = big[big["memory"] == "pageable"]["ratio"]
    out = []
    if from_size is not None:
        out.append(f"From {size_label(from_size)} up the two clocks agree within {fx.pct(CLOCKS_AGREE)} on every path")
    else:
        out.append(f"The two clocks differ by more than {fx.pct(CLOCKS_AGREE)} on some path at every size")
    out[-1] += (f"; at {size_label(sizes[0])} the host clock adds about {fx.num(extra, 'µs')} per copy (median over "
                f"the four paths), the cost of launching and synchronising, which weighs most on the shortest copies "
                f"(largest gap: {_PATHS[(worst['direction'], worst['memory'])]} at {size_label(int(worst['size']))}, "
                f"host ÷ events {fx.times(worst['ratio'])}).")
    if len(pag):
        pr = float(pag.max())
        out.append(f"For pageable memory at {size_label(sizes[-1])} host ÷ events is {fx.times(pr)}: "
                   + ("the CUDA events bracket the whole pageable copy, the CPU's staging included, because a "
                      "pageable copy returns to the host only when the staging is done."
                      if abs(pr - 1) < CLOCKS_AGREE else
                      "part of the pageable copy's staging happens outside the CUDA events."))
    return " ".join(out)


def ceiling_text(res) -> str:
    c = res.metadata.get("ceiling", {})
    mine = pinned_h2d_1gib(res)
    if not c.get("available"):
        return f"No second measurement path here: {c.get('note', 'not measured')}."
    share = mine / c["GBps"]
    return (f"Second path ({c['path']}, {size_label(c['size'])}): **{fx.num(c['GBps'], 'GB/s')}**. This chapter's "
            f"pinned host-to-device copy at its largest size: **{fx.num(mine, 'GB/s')}**, {fx.pct(share)} of that "
            f"ceiling (target {fx.pct(CEILING_TARGET)}: {'met' if share >= CEILING_TARGET else 'not met'}).")


def bidirectional_text(res) -> str:
    bi = res.table("bidirectional").iloc[0]
    v = bi["verdict"]
    spread = (f", p10–p90 {fx.span(100 * bi['overlap_p10'], 100 * bi['overlap_p90'], '%')}"
              if "overlap_p10" in bi else "")
    return (f"**Both directions at once** ({size_label(int(bi['size']))} each way, pinned, two streams): "
            f"host-to-device "
            f"alone {fx.num(bi['h2d_GBps'], 'GB/s')}, device-to-host alone {fx.num(bi['d2h_GBps'], 'GB/s')}, together "
            f"**{fx.num(bi['aggregate_GBps'], 'GB/s')}** in aggregate: overlap {_pct(bi['overlap'])}{spread} ({v}).")


def stale_text(res) -> str:
    st = res.table("stale_read").iloc[0]
    stale = bool(st["stale"])
    return (f"**Reading a non_blocking device-to-host result too early**: the host read **{st['read_before_sync']}** "
            f"before synchronising and **{st['read_after_sync']}** after (expected {st['expected']}). "
            + ("Nothing crashed; the value was simply not there yet." if stale else
               "This time the copy had already landed - by luck of timing, not by guarantee."))


def _combos_text(rows: pd.DataFrame) -> str:
    """Which (memory, mode) combinations a set of overlap rows of one size covers, in words."""
    pairs = {(r["memory"], r["mode"]) for _, r in rows.iterrows()}
    if len(pairs) == 4:
        return "all four"
    mems = {m for m, _ in pairs}
    modes = {md for _, md in pairs}
    if len(pairs) == 2 and len(mems) == 1:
        return f"{next(iter(mems))}, both modes"
    if len(pairs) == 2 and len(modes) == 1:
        return f"{next(iter(modes))}, both memories"
    return ", ".join(f"{m} {md}" for m, md in sorted(pairs))


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _by_size_text(rows: pd.DataFrame) -> str:
    """'1 MiB, 4 MiB and 16 MiB (all four) and 64 MiB (pinned, both modes)': sizes grouped by what they cover."""
    groups: dict[str, list[str]] = {}
    for n, g in rows.groupby("size", sort=True):
        groups.setdefault(_combos_text(g), []).append(size_label(int(n)))
    return _and([f"{_and(sizes)} ({combo})" for combo, sizes in groups.items()])


def overlap_caveat(res) -> str:
    """What the overlap table can and cannot say, computed from its verdicts: which sizes could be
    judged, why the others could not, how steady the CPU work was, and the verdicts."""
    o = res.table("overlap")
    if "jitter_ms" not in o:
        return ""
    short = o[o["verdict"] == TOO_SHORT]
    judged = o[o["verdict"] != TOO_SHORT]
    bl = judged[judged["mode"] == "blocking"]
    if not len(judged):
        copy = fx.span(o["copy_ms"].min(), o["copy_ms"].max(), "ms")
        parts = [f"No row could be judged: in every one the copy ({copy}) "
                 f"lasted less than {MIN_COPY_OVER_JITTER:g}× its row's CPU-work jitter."]
    else:
        parts = [f"{len(judged)} of {len(o)} rows could be judged: {_by_size_text(judged)}."]
        if len(short):
            parts.append(f"No verdict for {_by_size_text(short)}: in each of those rows the copy "
                         f"({fx.span(short['copy_ms'].min(), short['copy_ms'].max(), 'ms')}) lasted less than "
                         f"{MIN_COPY_OVER_JITTER:g}× that row's CPU-work jitter (it would have needed "
                         f"{fx.span(short['min_copy_ms'].min(), short['min_copy_ms'].max(), 'ms')}).")
    med = o["cpu_ms"]
    if med.max() > 1.2 * med.min():
        parts.append(f"The same calibrated CPU work took {fx.span(med.min(), med.max(), 'ms')} (row medians) in "
                     f"different rows, the slowest {fx.pct(med.max() / med.min() - 1)} above the fastest; this run "
                     "does not explain the swing (candidates: time taken by other tenants of the host, CPU clock "
                     "changes).")
    if len(bl):
        bad = bl[bl["verdict"] != "serial"]
        parts.append("Every blocking copy long enough to judge ran serially with the CPU work."
                     if not len(bad) else
                     f"{len(bad)} blocking row(s) did not read as serial: " +
                     "; ".join(f"{size_label(int(r['size']))} {r['memory']}: {r['verdict']} ({_pct(r['overlap'])})"
                               for _, r in bad.iterrows()) + ".")
    pn = judged[(judged["memory"] == "pinned") & (judged["mode"] == "non_blocking")]
    pg = judged[(judged["memory"] == "pageable") & (judged["mode"] == "non_blocking")]
    if len(pn):
        parts.append("Pinned non_blocking: " + ", ".join(f"{size_label(int(r['size']))} {r['verdict']}"
                                                           for _, r in pn.iterrows()) + ".")
    if len(pg):
        parts.append("Pageable non_blocking: " + ", ".join(f"{size_label(int(r['size']))} {r['verdict']}"
                                                             for _, r in pg.iterrows()) + ".")
    return " ".join(parts)


def takeaways(res) -> str:
    """The chapter's closing advice, with the parts that depend on the data computed."""
    b = _events(res)
    n = int(b["size"].max())
    at = b[b["size"] == n].set_index(["direction", "memory"])["median"]
    slow = at.idxmin()
    lines = [f"* Use pinned host memory for anything that crosses the bus every step (`DataLoader(pin_memory=True)`) "
             f"and copy with `non_blocking=True`. Here at {size_label(n)} the slowest path was {_PATHS[slow]} "
             f"({fx.num(at[slow], 'GB/s')}), pinned copies ran at {fx.num(at[('H2D', 'pinned')], 'GB/s')} "
             f"(to the device) and {fx.num(at[('D2H', 'pinned')], 'GB/s')} (back)."]
    if "copy_kernel" in res.tables and "hidden" in res.table("copy_kernel"):
        ck = res.table("copy_kernel").iloc[0]
        lines.append(f"* Overlap the next batch's copy with this step's compute on a side stream, with the stream "
                     f"synchronisation done on the GPU (`wait_event`, `record_stream`); here that hid "
                     f"{_pct(ck['hidden'])} of the copy (95% interval "
                     f"{fx.span(100 * ck['hidden_lo'], 100 * ck['hidden_hi'], '%')}).")
    return "\n".join(lines)


# --------------------------------------------------------------------------- tables for the notebook
def no_cuda_text(ref) -> str:
    return ("**This machine has no CUDA device, so nothing here crossed a PCIe bus. The GPU sections below show "
            + (f"the reference run ({ref.run_id}), labelled as such.**" if ref is not None else
               "nothing: no reference result is committed.**"))


def bandwidth_by_path(res) -> pd.DataFrame:
    """CUDA-event rows of the bandwidth summary with a ``path`` label (direction, memory)."""
    return _events(res).assign(path=lambda d: d["direction"] + ", " + d["memory"])


def bandwidth_table(res) -> pd.DataFrame:
    ev = bandwidth_by_path(res)
    piv = ev.pivot_table(index="size", columns="path", values="median")
    pct = ev.pivot_table(index="size", columns="path", values="pct_of_peak").add_suffix(" (% of peak)")
    out = piv.join(pct).reset_index()
    out.insert(0, "copy size", out.pop("size").map(size_label))
    return out


def has_staging(res) -> bool:
    return "staging" in res.tables and len(res.table("staging"))


def staging_table(res) -> pd.DataFrame:
    st = res.table("staging")
    piv = st.pivot_table(index="size", columns="measure", values="median", sort=False).reset_index()
    piv.insert(0, "buffer size", piv.pop("size").map(size_label))
    return piv


def clocks_pivot(res) -> pd.DataFrame:
    t = clocks_table(res).assign(path=lambda d: d["direction"] + ", " + d["memory"])
    piv = t.pivot_table(index="size", columns="path", values="ratio").reset_index()
    piv.insert(0, "copy size", piv.pop("size").map(size_label))
    return piv


def has_overlap_spread(res) -> bool:
    return "overlap" in res.tables and "overlap_p10" in res.table("overlap")


def overlap_rule(res) -> str:
    o = res.table("overlap")
    return (f"Rule: no verdict when the copy lasts less than {MIN_COPY_OVER_JITTER:g}× the CPU work's jitter in "
            f"its row (the standard deviation of the CPU work over the row's rounds: "
            f"{fx.span(o['jitter_ms'].min(), o['jitter_ms'].max(), 'ms')} here); otherwise \"overlaps\" from "
            f"a median ratio of {fx.pct(OVERLAPS)}, \"serial\" up to {fx.pct(SERIAL)}, and \"unclear\" when the "
            "p10–p90 spread reaches from one to the other.")


def overlap_display(res) -> pd.DataFrame:
    """The overlap table in seven columns: size, memory + mode, the three median times, the
    overlap (median, and its p10 to p90 over rounds) and the verdict ('too short' for no verdict)."""
    o = res.table("overlap").copy()
    out = pd.DataFrame({"size": o["size"].map(size_label), "copy": o["memory"] + ", " + o["mode"],
                        "copy (ms)": o["copy_ms"], "CPU work (ms)": o["cpu_ms"], "together (ms)": o["both_ms"]})
    if "overlap_p10" in o:
        out["overlap: median (p10 to p90)"] = [
            f"{_pct(m)} ({fx.span(100 * a, 100 * b, '%')})"
            for m, a, b in zip(o["overlap"], o["overlap_p10"], o["overlap_p90"])]
        out["verdict"] = o["verdict"].replace({TOO_SHORT: "too short"})
    else:
        out["overlap (%)"] = 100 * o["overlap"]
    return out


def copy_kernel_table(res) -> pd.DataFrame:
    c = res.table("copy_kernel_calls")
    agg = {"ms": "median"}
    for col in ("sm_clock_mhz", "power_w", "temperature_c"):
        if col in c and c[col].notna().any():
            agg[col] = "median"
    t = c.groupby(["design", "name"], sort=False).agg(agg).reset_index()
    return t.rename(columns={"ms": "median (ms)", "sm_clock_mhz": "SM clock (MHz)", "power_w": "power (W)",
                             "temperature_c": "temperature (°C)", "name": "call"})


def pin_cost_display(res) -> pd.DataFrame:
    pc = res.table("pin_cost")
    if "first_ms" in pc:
        return pc[["way", "first_ms", "median_ms", "p10_ms", "p90_ms", "n", "GBps"]].rename(columns={
            "first_ms": "first call (ms)", "median_ms": "later calls: median (ms)", "p10_ms": "p10 (ms)",
            "p90_ms": "p90 (ms)", "n": "later calls", "GBps": "effective GB/s (median)"})
    return pc[["way", "median_ms", "min_ms", "max_ms", "GBps"]].rename(columns={
        "median_ms": "median (ms)", "min_ms": "min (ms)", "max_ms": "max (ms)", "GBps": "effective GB/s"})


def limits_table(res) -> pd.DataFrame:
    lim = res.metadata["limits"]
    gib = lambda b: "unlimited" if b is None else f"{b / 2**30:.1f} GiB"  # noqa: E731
    rows = [{"limit": "available host memory", "value": gib(lim["available_bytes"])},
            {"limit": "cgroup memory limit (tightest of this cgroup and its parents)",
             "value": gib(lim["cgroup_limit_bytes"])}]
    if lim.get("cgroup_headroom_bytes") is not None:
        room = min(lim["cgroup_headroom_bytes"], lim["available_bytes"])
        bound = ("available host memory" if room < lim["cgroup_headroom_bytes"]
                 else lim.get("cgroup_headroom_bound") or "the cgroup limit")
        rows.append({"limit": "room left under the cgroup limit" + (" (capped by available host memory, which is "
                                                                     "smaller)" if bound == "available host memory"
                                                                     else ""),
                     "value": gib(room)})
    rows += [{"limit": "locked-memory limit (ulimit -l)", "value": gib(lim["memlock_bytes"])},
             {"limit": "CPU quota", "value": "none" if not lim["cpu_quota_cores"] else
              f"{lim['cpu_quota_cores']:.1f} cores"}]
    if lim.get("cgroup_path"):
        rows.append({"limit": f"cgroup (v{lim.get('cgroup_version')})", "value": lim["cgroup_path"]})
    return pd.DataFrame(rows)


def versus_published(res, *, where: str = "here") -> str:
    """This run's slowest path and its pageable device-to-host rate beside the published host's
    (``where``: how the text names the machine of ``res``, e.g. "on the reference host")."""
    from .book import published

    fig = published.figure(CHAPTER, "D2H pageable, 1 GiB")
    b = _events(res)
    n = int(b["size"].max())
    at = b[b["size"] == n].set_index(["direction", "memory"])["median"]
    if fig is None or ("D2H", "pageable") not in at.index:
        return ""
    slow = at.idxmin()
    d2h = float(at[("D2H", "pageable")])
    text = (f"On the published host (S1) device-to-host into pageable memory collapsed to {fig.text} ({fig.setting}); "
            f"{where} it reached {fx.num(d2h, 'GB/s')} at {size_label(n)}, "
            f"{fx.compare(d2h, fig.mean, more='faster than', less='slower than', same='level with')} that figure")
    if slow != ("D2H", "pageable"):
        text += (f", and it is not this machine's slowest path: the slowest is {_PATHS[slow]} "
                 f"({fx.num(at[slow], 'GB/s')}). The staging experiment below measures what limits it here.")
    else:
        text += ", and it is this machine's slowest path too."
    return text
