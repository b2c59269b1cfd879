"""Chapter 6: crossing the PCIe bus - host-to-device and device-to-host copies.

What is measured:

* bandwidth of ``tensor.copy_`` between host and GPU for pinned and pageable host memory,
  both directions, over a size sweep; each copy timed with CUDA events around it *and*
  with a host clock around a synchronised call (for pageable memory the driver first
  copies through a pinned staging buffer on the CPU, which the host clock sees and the
  events only partly do); median and spread of many repetitions after a warm-up;
* the link itself (generation and width from the driver) and its theoretical peak;
* an independent ceiling: the same pinned copy issued through a second path (CuPy's
  ``cudaMemcpyAsync`` with its own pinned allocation, timed with events, median of several
  large copies, as nvbandwidth measures);
* whether a copy overlaps CPU work (pageable/pinned × blocking/non_blocking), whether the
  two directions run at once on separate copy engines, whether a copy on a side stream
  overlaps a kernel, what pinning on the fly costs, and the stale value a non_blocking
  device-to-host copy leaves when the host reads it before synchronising.

GB/s means 10^9 bytes per second.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from .book.params import ParameterError, int_list, positive_int
from .timing import cuda_ms, synced_ms

CHAPTER = "06_pcie"
GB = 1e9
#: Usable bandwidth per lane and direction, GB/s: transfer rate × line-code efficiency / 8 bits.
#: Gen 1-2 use 8b/10b, Gen 3-5 128b/130b; Gen 6 (PAM4, FLIT mode) 242/256.
PER_LANE_GBPS = {1: 2.5 * 8 / 10 / 8, 2: 5.0 * 8 / 10 / 8, 3: 8.0 * 128 / 130 / 8, 4: 16.0 * 128 / 130 / 8,
                 5: 32.0 * 128 / 130 / 8, 6: 64.0 * 242 / 256 / 8}


def link_peak_gbps(gen: int | None, width: int | None) -> float | None:
    """Theoretical one-direction peak of a PCIe link, GB/s (None when unknown)."""
    if not gen or not width or gen not in PER_LANE_GBPS:
        return None
    return PER_LANE_GBPS[gen] * width


def overlap_ratio(t_a: float, t_b: float, t_both: float) -> float:
    """1 when two activities ran fully in parallel (both take as long as the longer), 0 when
    serially (both take the sum); clipped to [0, 1]."""
    saved = t_a + t_b - t_both
    return float(min(1.0, max(0.0, saved / min(t_a, t_b)))) if min(t_a, t_b) > 0 else float("nan")


def verdict(ratio: float) -> str:
    return "overlaps" if ratio >= 0.8 else ("serial" if ratio <= 0.2 else "partly overlaps")


# --------------------------------------------------------------------------- CPU work
def spin(iterations: int) -> int:
    """Pure-Python busy work holding the GIL (what a training loop's Python code does)."""
    x = 0
    for i in range(iterations):
        x = (x + i * i) % 1_000_003
    return x


def calibrate_spin(target_ms: float) -> tuple[int, float]:
    """Iterations of :func:`spin` that take about ``target_ms``; and the measured ms."""
    n = 10_000
    while True:
        t0 = time.perf_counter()
        spin(n)
        ms = (time.perf_counter() - t0) * 1e3
        if ms > 2:
            break
        n *= 2
    n = max(1, int(n * target_ms / ms))
    t0 = time.perf_counter()
    spin(n)
    return n, (time.perf_counter() - t0) * 1e3


# --------------------------------------------------------------------------- limits
def host_limits() -> dict:
    """Memory that can be allocated and pinned here: available RAM, cgroup limit, ``ulimit -l``."""
    import psutil

    from .book.fingerprint import container_info

    c = container_info()
    return dict(available_bytes=psutil.virtual_memory().available, cgroup_limit_bytes=c["memory_limit_bytes"],
                memlock_bytes=c["memlock_soft_bytes"], cpu_quota_cores=c["cpu_quota_cores"])


def check_sizes(sizes: Sequence[int], *, buffers: int = 3) -> list[str]:
    """Fail (naming ``sizes``) when the largest size cannot be allocated on host or device; return
    warnings where pinning it may exceed a container's limits."""
    biggest = max(sizes)
    lim = host_limits()
    host_cap = min(x for x in (lim["available_bytes"], lim["cgroup_limit_bytes"]) if x)
    if biggest * buffers > host_cap:
        raise ParameterError("sizes", biggest, f"at most {host_cap / buffers / 2**30:.2f} GiB: {buffers} host buffers "
                             f"of the largest size must fit in {host_cap / 2**30:.1f} GiB of free host memory")
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


def time_copy(dst: torch.Tensor, src: torch.Tensor, *, repeats: int, warmup: int) -> tuple[list, list]:
    """Per repetition: (ms by CUDA events around the copy, ms by host clock around the synchronised copy)."""
    ev, host = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for k in range(warmup + repeats):
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


def bandwidth_sweep(sizes: Sequence[int], *, repeats: int, warmup: int, progress=None) -> pd.DataFrame:
    """Every (size, direction, host memory, clock): one row per repetition."""
    rows = []
    for n in sizes:
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        for pinned in (True, False):
            h = _host(n, pinned)
            for direction, (dst, src) in (("H2D", (dev, h)), ("D2H", (h, dev))):
                reps = repeats if n <= (256 << 20) else max(3, repeats * (256 << 20) // n)
                ev, host = time_copy(dst, src, repeats=reps, warmup=warmup)
                for clock, ms in (("CUDA events", ev), ("host clock", host)):
                    rows += [dict(size=n, direction=direction, memory="pinned" if pinned else "pageable",
                                  clock=clock, rep=i, ms=m, GBps=n / (m / 1e3) / GB) for i, m in enumerate(ms)]
                if progress:
                    progress.update(1)
            del h
        del dev
    return pd.DataFrame(rows)


def summarise_bandwidth(df: pd.DataFrame, peak: float | None) -> pd.DataFrame:
    g = df.groupby(["size", "direction", "memory", "clock"], sort=False)["GBps"]
    out = g.agg(median="median", p10=lambda s: s.quantile(0.1), p90=lambda s: s.quantile(0.9), mean="mean",
                std="std", n="count").reset_index()
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


def overlap_experiment(sizes: Sequence[int], *, spin_iters: int, repeats: int, progress=None) -> pd.DataFrame:
    """Copy alone, CPU work alone, both: for pageable/pinned × blocking/non_blocking H2D copies."""
    rows = []
    for n in sizes:
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        for pinned in (False, True):
            h = _host(n, pinned)
            for nb in (False, True):
                copy_ms, cpu_ms, both_ms = [], [], []
                for k in range(repeats + 1):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    dev.copy_(h, non_blocking=nb)
                    torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    spin(spin_iters)
                    t2 = time.perf_counter()
                    torch.cuda.synchronize()
                    t3 = time.perf_counter()
                    dev.copy_(h, non_blocking=nb)
                    spin(spin_iters)
                    torch.cuda.synchronize()
                    t4 = time.perf_counter()
                    if k:  # the first round is a warm-up
                        copy_ms.append((t1 - t0) * 1e3)
                        cpu_ms.append((t2 - t1) * 1e3)
                        both_ms.append((t4 - t3) * 1e3)
                c, w, b = np.median(copy_ms), np.median(cpu_ms), np.median(both_ms)
                r = overlap_ratio(c, w, b)
                rows.append(dict(size=n, memory="pinned" if pinned else "pageable",
                                 mode="non_blocking" if nb else "blocking", copy_ms=c, cpu_ms=w, both_ms=b,
                                 serial_ms=c + w, overlap=r, verdict=verdict(r)))
                if progress:
                    progress.update(1)
            del h
        del dev
    return pd.DataFrame(rows)


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

    def timed(h2d: bool, d2h: bool) -> float:
        return float(np.median(synced_ms(lambda: copies(h2d, d2h), repeats)))

    a, b, both = timed(True, False), timed(False, True), timed(True, True)
    r = overlap_ratio(a, b, both)
    return dict(size=size, h2d_ms=a, d2h_ms=b, both_ms=both, h2d_GBps=size / a / 1e6, d2h_GBps=size / b / 1e6,
                aggregate_GBps=2 * size / both / 1e6, overlap=r, verdict=verdict(r))


def copy_kernel_overlap(size: int, *, kernel_ms: float, repeats: int) -> dict:
    """A pinned H2D copy on a side stream while the compute stream runs matrix products.
    The compute stream waits for the copy's event before it may use the data, and the
    copied tensor is recorded on the compute stream so its memory is not reused early."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.mm(a, a)  # warm-up
    one = cuda_ms(lambda: torch.mm(a, a), 3) / 3
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

    def timed(fn) -> float:
        return float(np.median(synced_ms(fn, repeats)))

    c, kt = timed(copy), timed(kernels)
    both = timed(lambda: (kernels(), copy()))
    r = overlap_ratio(c, kt, both)
    return dict(size=size, copy_ms=c, kernel_ms=kt, both_ms=both, overlap=r, verdict=verdict(r))


def pin_on_the_fly(size: int, *, repeats: int) -> pd.DataFrame:
    """Per batch: ``pin_memory()`` then copy, vs copy into a reused pinned buffer then copy, vs
    the pageable copy; host clock around synchronised calls, median over repetitions."""
    src = _host(size, False)
    staging = _host(size, True)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    ways = {
        "pageable copy": lambda: dev.copy_(src),
        "pin_memory() per batch, then copy": lambda: dev.copy_(src.pin_memory(), non_blocking=True),
        "copy into a reused pinned buffer, then copy": lambda: (staging.copy_(src),
                                                                dev.copy_(staging, non_blocking=True)),
    }
    rows = []
    for name, fn in ways.items():
        out = synced_ms(fn, repeats)
        rows.append(dict(way=name, size=size, median_ms=float(np.median(out)), min_ms=min(out), max_ms=max(out),
                         GBps=size / (np.median(out) / 1e3) / GB))
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
def check_parameters(p: dict) -> dict:
    q = dict(p)
    q["sizes"] = int_list("sizes", p["sizes"], minimum=4096, maximum=1 << 36)
    q["overlap_sizes"] = int_list("overlap_sizes", p["overlap_sizes"], minimum=4096, maximum=1 << 36)
    q["repeats"] = positive_int("repeats", p["repeats"], maximum=10_000)
    q["warmup"] = positive_int("warmup", p["warmup"], maximum=1000)
    q["ceiling_size"] = positive_int("ceiling_size", p["ceiling_size"], maximum=1 << 36)
    v = p["cpu_work_ms"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 10_000:
        raise ParameterError("cpu_work_ms", v, "a number of milliseconds above 0 and at most 10,000")
    return q


def preflight(params: dict) -> dict:
    p = check_parameters(params)
    check_sizes([*p["sizes"], *p["overlap_sizes"], p["ceiling_size"]])
    return p


def run(*, sizes, repeats: int, warmup: int, ceiling_size: int, overlap_sizes, cpu_work_ms: float, run_dir=None,
        progress: bool = True):
    """Run chapter 6 (everything that needs a GPU is skipped, and said so, without CUDA)."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from tqdm import tqdm

    from .book import results

    p = check_parameters(params)
    warnings = check_sizes([*p["sizes"], *p["overlap_sizes"], p["ceiling_size"]])
    res = results.start(CHAPTER, params, run_dir)
    g = res.fingerprint["gpu"]
    peak = link_peak_gbps(g.get("pcie_gen_max"), g.get("pcie_width_max"))
    spin_iters, spin_ms = calibrate_spin(cpu_work_ms)
    res.metadata.update(link=dict(gen_current=g.get("pcie_gen_current"), gen_max=g.get("pcie_gen_max"),
                                  width_current=g.get("pcie_width_current"), width_max=g.get("pcie_width_max"),
                                  peak_GBps=peak),
                        limits=host_limits(), warnings=warnings, cuda=torch.cuda.is_available(),
                        cpu_work=dict(iterations=spin_iters, calibrated_ms=spin_ms))
    if torch.cuda.is_available():
        steps = len(p["sizes"]) * 4 + len(p["overlap_sizes"]) * 4
        with tqdm(total=steps, desc="chapter 6 copies", disable=not progress) as bar:
            raw = bandwidth_sweep(p["sizes"], repeats=repeats, warmup=warmup, progress=bar)
            res.add("bandwidth_raw", raw)
            res.add("bandwidth", summarise_bandwidth(raw, peak))
            res.add("overlap", overlap_experiment(p["overlap_sizes"], spin_iters=spin_iters,
                                                  repeats=max(3, repeats // 4), progress=bar))
        res.metadata["ceiling"] = independent_ceiling(ceiling_size, repeats=max(5, repeats // 2), warmup=warmup)
        mid = min(p["overlap_sizes"], key=lambda s: abs(s - (256 << 20)))
        res.add("bidirectional", [bidirectional(mid, repeats=max(3, repeats // 4))])
        res.add("copy_kernel", [copy_kernel_overlap(mid, kernel_ms=20, repeats=max(3, repeats // 4))])
        res.add("pin_cost", pin_on_the_fly(min(p["overlap_sizes"], key=lambda s: abs(s - (64 << 20))),
                                           repeats=max(3, repeats // 4)))
        res.add("stale_read", [stale_read()])
    else:
        res.metadata["note"] = "no CUDA device: nothing crossed a PCIe bus on this machine"
    res.save(results.resolve_run_dir(run_dir))
    return res


def pinned_h2d_1gib(res) -> float | None:
    """Median pinned H2D GB/s by CUDA events at the largest measured size."""
    if "bandwidth" not in res.tables:
        return None
    b = res.table("bandwidth")
    b = b[(b["direction"] == "H2D") & (b["memory"] == "pinned") & (b["clock"] == "CUDA events")]
    return float(b.sort_values("size")["median"].iloc[-1]) if len(b) else None


def key_metrics(res) -> dict:
    out = {}
    if "bandwidth" not in res.tables:
        return out
    b = res.table("bandwidth")
    b = b[b["clock"] == "CUDA events"].set_index(["size", "direction", "memory"])["median"]
    gib, q = 1 << 30, 256 << 20
    for key, (size, d, m) in {"H2D pinned, 1 GiB": (gib, "H2D", "pinned"),
                              "D2H pageable, 256 MiB": (q, "D2H", "pageable"),
                              "D2H pageable, 1 GiB": (gib, "D2H", "pageable"),
                              "D2H pinned, 1 GiB": (gib, "D2H", "pinned")}.items():
        if (size, d, m) in b.index:
            out[key] = (b.loc[(size, d, m)], None)
    if "D2H pinned, 1 GiB" in out and "D2H pageable, 1 GiB" in out:
        out["D2H pinned ÷ pageable, 1 GiB"] = (out["D2H pinned, 1 GiB"][0] / out["D2H pageable, 1 GiB"][0], None)
    o = res.table("overlap")
    o = o[(o["memory"] == "pinned") & (o["mode"] == "non_blocking")].set_index("size")["overlap"]
    for size, label in ((q, "256 MiB"), (16 << 20, "16 MiB")):
        if size in o.index:
            out[f"overlap, pinned + non_blocking, {label}"] = (100 * o.loc[size], None)
    peak = res.metadata.get("link", {}).get("peak_GBps")
    if peak:
        out["link peak (theoretical)"] = (peak, None)
    return out
