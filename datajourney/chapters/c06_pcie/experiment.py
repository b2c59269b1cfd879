"""Chapter 6: crossing the PCIe bus - host-to-device and device-to-host copies.

What is measured:

* bandwidth of ``tensor.copy_`` between host and GPU for pinned and pageable host memory,
  both directions, over a size sweep; each copy timed with CUDA events around it *and*
  with a host clock around a synchronised call; median and 10th/90th percentiles of many
  repetitions after a warm-up;
* the link itself (generation and width from the driver) and its theoretical peak;
* a ceiling (:func:`ceiling_round`): the same pinned copy issued through a second path (CuPy's
  ``cudaMemcpyAsync`` with its own pinned allocation, timed with events, as nvbandwidth
  measures) and through PyTorch, in rounds spread over the whole run (before, between and after
  the other experiments), so that the bus's drift over the run reaches the ceiling as it reaches
  the copies; the page takes the highest of every pinned host-to-device measurement as the
  ceiling, so that nothing measured can exceed it;
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
import mmap
import os
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from datajourney.chapters.c06_pcie.params import SIZE_MAX, SIZE_MIN, Params
from datajourney.chapters.c06_pcie.rules import MIN_COPY_OVER_JITTER, link_peak_gbps, overlap_ratio, verdict
from datajourney.core.fingerprint import cgroup_limits
from datajourney.core.params import ParameterError, run_options
from datajourney.core.timing import Laps, cuda_ms, interleaved_ms, nvml_reader
from datajourney.core.units import GB, MiB
from datajourney.toolkit.transfer import independent_ceiling

#: Chunk of the single-core memcpy that imitates the driver's staging of a pageable copy.
STAGING_CHUNK = 2 * MiB
#: Bootstrap resamples for intervals of paired differences.
BOOTSTRAP = 2000


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
                limits: dict | None = None) -> list[dict]:
    """Fail (naming ``sizes``) when the largest size cannot be allocated on host or device; return
    what may exceed a container's limits when it is pinned, as data (``kind``: ``"memlock"`` when
    ``ulimit -l`` is below the largest buffer, ``"cgroup"`` when the pinned buffers take over half of
    the cgroup's memory limit), for the page to word."""
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
        warnings.append(dict(kind="memlock", limit_bytes=int(lim["memlock_bytes"]), largest_bytes=int(biggest)))
    if lim["cgroup_limit_bytes"] and biggest * buffers > 0.5 * lim["cgroup_limit_bytes"]:
        warnings.append(dict(kind="cgroup", limit_bytes=int(lim["cgroup_limit_bytes"]),
                             pinned_bytes=int(biggest * buffers)))
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


#: Where the ceiling's rounds run: before, between and after the experiments (a bus that drifts over
#: the run is then caught by the ceiling as much as by the copies it bounds).
CEILING_PHASES = ("start", "after the bandwidth sweep", "after the staging experiment",
                  "after the overlap experiment", "end")


def ceiling_round(size: int, *, repeats: int, warmup: int, round_no: int, phase: str) -> tuple[list[dict], dict]:
    """One round of the ceiling: ``repeats`` pinned host-to-device copies of ``size`` through CuPy
    (:func:`independent_ceiling`) and as many through PyTorch's ``copy_``, both timed with CUDA
    events; which path goes first alternates from round to round. Returns one row per copy and
    CuPy's description (``available=False`` with a note when CuPy is missing)."""
    rows = []

    def cupy():
        c = independent_ceiling(size, repeats=repeats, warmup=warmup)
        return c.pop("ms", []), c

    def pytorch():
        dev, h = torch.empty(size, dtype=torch.uint8, device="cuda"), _host(size, True)
        ev, _ = time_copy(dev, h, repeats=repeats, warmup=warmup)
        return ev, None

    about = {}
    order = [("CuPy", cupy), ("PyTorch", pytorch)]
    for path, fn in order[::-1] if round_no % 2 else order:
        ms, info = fn()
        about = info or about
        rows += [dict(round=round_no, phase=phase, path=path, rep=i, size=size, ms=m, GBps=size / (m / 1e3) / GB)
                 for i, m in enumerate(ms)]
    return rows, about


def summarise_ceiling(raw: pd.DataFrame) -> pd.DataFrame:
    """Median GB/s, p10, p90 and n per (round, phase, path) of the ceiling's copies."""
    g = raw.groupby(["round", "phase", "path", "size"], sort=False)["GBps"]
    return g.agg(median="median", p10=_q(0.1), p90=_q(0.9), n="count").reset_index()


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


def staging_dip_check(sizes: Sequence[int], *, rounds: int, warmup: int = 1, seed: int = 0,
                      progress=None) -> pd.DataFrame:
    """The dip's deciding check: pageable host-to-device copies of ``sizes`` (each its own source,
    cached, and its own device buffer), interleaved: every round copies each size once, in a new
    shuffled order, so that drift and what ran before fall on every size alike. Per copy: ms by
    CUDA events, the calling thread's CPU ms (the driver stages a pageable copy on it) and the
    page faults the process took during the copy (minor and major). Needs CUDA."""
    import random

    rng = random.Random(seed)
    bufs = {n: (_host(n, False), torch.empty(n, dtype=torch.uint8, device="cuda")) for n in sizes}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows = []
    for k in range(warmup + rounds):
        order = list(sizes)
        rng.shuffle(order)
        for pos, n in enumerate(order):
            src, dev = bufs[n]
            torch.cuda.synchronize()
            r0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
            start.record()
            dev.copy_(src)
            end.record()
            end.synchronize()
            c1, r1 = time.thread_time(), resource.getrusage(resource.RUSAGE_SELF)
            if k >= warmup:
                ms = start.elapsed_time(end)
                rows.append(dict(size=n, round=k - warmup, position=pos, ms=ms, GBps=n / (ms / 1e3) / GB,
                                 cpu_ms=(c1 - c0) * 1e3, minor_faults=r1.ru_minflt - r0.ru_minflt,
                                 major_faults=r1.ru_majflt - r0.ru_majflt))
        if progress and k >= warmup:
            progress.update(1)
    del bufs
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
                def copy(dev=dev, h=h, nb=nb):  # bound now: the buffers are freed below
                    dev.copy_(h, non_blocking=nb)

                t = overlap_trials(copy, torch.cuda.synchronize, work, repeats)
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
    import warnings

    from torch.profiler import ProfilerActivity, profile

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
def _all_sizes(p: Params) -> list[int]:
    return [*p.sizes, *p.overlap_sizes, *p.staging_sizes, p.ceiling_size]


def preflight(params) -> Params:
    """Every parameter checked (:meth:`Params.checked`, then what spans fields: the interleaved check's
    sizes and rounds), and that the largest buffers fit in host and GPU memory, before any work."""
    if not isinstance(params, Params):
        run_options(dict(params))
    p = Params.coerce(params).checked()
    if any(s < SIZE_MIN for s in p.dip_sizes):
        raise ParameterError("dip_sizes", p.dip_sizes, f"a list of integers from {SIZE_MIN:,} to {SIZE_MAX:,} (or [])")
    if p.dip_sizes and p.dip_rounds < 3:
        raise ParameterError("dip_rounds", p.dip_rounds, "at least 3 when dip_sizes is set (a median of rounds)")
    check_sizes(_all_sizes(p), extra_host_bytes=flush_bytes(last_level_cache()["bytes"]) + sum(p.dip_sizes))
    return p


def measure(p: Params, context) -> None:
    """Run chapter 6 (everything that needs a GPU is skipped without CUDA, which the result records; the host
    side of the staging experiment and the CPU work's jitter are measured anyway)."""
    from tqdm import tqdm

    lap = Laps()  # how long each part of the run took (metadata)
    repeats, warmup, ceiling_size = p.repeats, p.warmup, p.ceiling_size
    llc = last_level_cache()
    warnings = check_sizes(_all_sizes(p), extra_host_bytes=flush_bytes(llc["bytes"]) + sum(p.dip_sizes))
    res, progress = context.result, context.progress
    g = res.fingerprint["gpu"]
    peak = link_peak_gbps(g.get("pcie_gen_max"), g.get("pcie_width_max"))
    spin_iters, spin_ms = calibrate_spin(p.cpu_work_ms)
    cuda = torch.cuda.is_available()
    res.metadata.update(link=dict(gen_current=g.get("pcie_gen_current"), gen_max=g.get("pcie_gen_max"),
                                  width_current=g.get("pcie_width_current"), width_max=g.get("pcie_width_max"),
                                  peak_GBps=peak),
                        limits=host_limits(), warnings=warnings, cuda=cuda, llc=llc,
                        transparent_hugepages=transparent_hugepages(),
                        cpu_work=dict(iterations=spin_iters, calibrated_ms=spin_ms,
                                      **spin_jitter(spin_iters, max(10, repeats))))
    lap("calibration")
    dip = bool(p.dip_sizes) and p.dip_rounds > 0
    steps = len(p.staging_sizes) + (len(p.sizes) * 4 + len(p.overlap_sizes) * 4
                                       + (p.dip_rounds if dip else 0) + len(CEILING_PHASES) if cuda else 0)
    ceil_rows, ceil_about = [], {}

    def ceiling_now(phase: str, bar) -> None:
        """One round of the ceiling, here in the run (GPU only)."""
        nonlocal ceil_about
        if cuda:
            rows, about = ceiling_round(ceiling_size, repeats=max(5, repeats // 2), warmup=warmup,
                                        round_no=len({r["round"] for r in ceil_rows}), phase=phase)
            ceil_rows.extend(rows)
            ceil_about = about or ceil_about
            bar.update(1)
            lap(f"ceiling, {phase}")

    with tqdm(total=steps, desc="chapter 6", disable=not progress) as bar:
        if cuda:
            torch.zeros(1, device="cuda")  # context creation stays out of every timing
            pin_size = min(p.overlap_sizes, key=lambda s: abs(s - (64 << 20)))
            raw, meta = pin_on_the_fly(pin_size, repeats=max(5, repeats // 2))  # first: nothing pinned yet
            res.add("pin_cost_raw", raw)
            res.add("pin_cost", summarise_pin_cost(raw))
            res.metadata["pin_cost"] = meta
            lap("pin cost")
            ceiling_now(CEILING_PHASES[0], bar)
            raw = bandwidth_sweep(p.sizes, repeats=repeats, warmup=warmup, progress=bar)
            res.add("bandwidth_raw", raw)
            res.add("bandwidth", summarise_bandwidth(raw, peak))
            lap("bandwidth sweep")
            ceiling_now(CEILING_PHASES[1], bar)
        st = staging_experiment(p.staging_sizes, repeats=max(5, repeats // 2), warmup=warmup,
                                llc_bytes=llc["bytes"], cuda=cuda, progress=bar)
        res.add("staging_raw", st)
        res.add("staging", summarise_staging(st))
        lap("staging")
        if dip and cuda:
            res.add("staging_dip", staging_dip_check(p.dip_sizes, rounds=p.dip_rounds, warmup=warmup,
                                                     progress=bar))
            lap("staging dip")
        elif dip:
            res.metadata["staging_dip_skipped"] = True  # it copies to a GPU
        ceiling_now(CEILING_PHASES[2], bar)
        if cuda:
            ov = overlap_experiment(p.overlap_sizes, spin_iters=spin_iters, repeats=repeats, progress=bar)
            res.add("overlap_raw", ov)
            res.add("overlap", summarise_overlap(ov))
            lap("overlap")
        ceiling_now(CEILING_PHASES[3], bar)
        if cuda:
            mid = min(p.overlap_sizes, key=lambda s: abs(s - (256 << 20)))
            res.add("bidirectional", [bidirectional(mid, repeats=max(5, repeats // 2))])
            calls, summary = copy_kernel_overlap(mid, kernel_ms=p.kernel_ms, rounds=p.kernel_rounds,
                                                 timeline=p.profile_timeline)
            res.add("copy_kernel_calls", calls)
            res.add("copy_kernel", [summary])
            res.add("stale_read", [stale_read()])
            lap("bidirectional, copy and kernel")
        ceiling_now(CEILING_PHASES[4], bar)
    if cuda:
        raw = pd.DataFrame(ceil_rows)
        res.add("ceiling_raw", raw)
        res.add("ceiling", summarise_ceiling(raw))
        # what the CuPy path is (or why it is missing); its figures are in the "ceiling" table
        about = {k: v for k, v in ceil_about.items() if k in ("available", "path", "note")}
        res.metadata["ceiling"] = dict(about, rounds=len(CEILING_PHASES), phases=list(CEILING_PHASES),
                                       size=ceiling_size, repeats=max(5, repeats // 2))
    res.metadata["seconds"] = lap.seconds
