"""Chapter 7: the full picture - a profiled training loop fed from files or from shards.

Each step is split into the phases a profiler shows (``record_function`` ranges):
DATALOADER_WAIT (host clock: how long ``next(loader)`` blocked), H2D_TRANSFER, FORWARD,
BACKWARD and OPTIMIZER (CUDA events between the phases on a GPU, a host clock on a CPU).
Every step ends with a synchronisation so that its phases can be attributed. From the
phases: compute = forward + backward + optimizer, data-wait share, images/s and the
accelerator utilisation AU = compute / wall.

Besides the phases, each batch carries the time of its stages (:class:`images.Batch`):
read, decode, normalise per sample, collate and pin per batch, and the hand-over from the
worker process to the loop, so the data wait can be split where it is spent. CPU use is
read from the kernel's counters at the start and end of the steady state (system-wide busy
cores, the main process, the loader's worker processes); GPU utilisation (NVML) is sampled
in a background thread and averaged over the steady-state steps only.

The ceiling is the same loop fed by one batch kept in GPU memory: no loading, no copy.
The load sweep runs that ceiling loop while N processes do the loader's CPU work, to
measure how the launch of GPU work by the main process suffers on a busy CPU, and what
keeps it flat (workers at a lower priority, cores left free, CUDA graphs).
"""
from __future__ import annotations

import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import cycle
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from datajourney.chapters.c07_full_picture.params import CHAPTER, FORMATS, LOAD_MODES, REMEDIES, Params, worker_counts  # noqa: F401
from datajourney.chapters.c07_full_picture.reading import (
    AU_RULE,
    KEEP_UP,
    PHASES,
    STAGES,
    WORKER_NICE,
    scenario_label,
    share_of_ceiling,
    step_kind,
)
from datajourney.core import timing
from datajourney.toolkit import images
from datajourney.toolkit.models import (  # noqa: F401
    GraphedStep,
    _device_batch,
    _Marks,
    graphed_step,
    handover_ms,
    make_model,
    train_steps,
)


class UtilSampler(timing.NvmlSampler):
    """GPU utilisation (NVML, through :func:`timing.nvml_reader`: the CUDA device's own GPU, by
    its PCI address) and system-wide CPU utilisation (psutil, % of all logical cores), sampled
    every ``interval`` seconds by :class:`timing.NvmlSampler`'s thread. :attr:`rows` gives each
    sample's host clock (``t_abs``, ``time.perf_counter``) so that the samples can be matched
    with the steps they fall in; without NVML the GPU column is None and the CPU column is kept."""

    def __init__(self, interval: float = 0.05):
        import psutil

        gpu, info = timing.nvml_reader()

        def read() -> dict:
            g = None
            if gpu is not None:
                try:
                    g = gpu()["gpu_util_pct"]
                except Exception:  # noqa: BLE001 - a failed NVML read is a missing GPU value
                    g = None
            return dict(gpu_util=g, cpu_util=psutil.cpu_percent(None))

        psutil.cpu_percent(None)  # the first call only starts psutil's interval
        super().__init__(interval_ms=1e3 * interval, reader=read, info=info if gpu is not None else {})
        self.why = None if gpu is not None else info

    @property
    def rows(self) -> list[dict]:
        """One dict per sample: ``t`` (s since the first sample), ``t_abs``, ``gpu_util``, ``cpu_util``."""
        s = list(self.samples)
        t0 = s[0]["t"] if s else 0.0
        return [dict(t=x["t"] - t0, t_abs=x["t"], gpu_util=x["gpu_util"], cpu_util=x["cpu_util"]) for x in s]


def cpu_snapshot() -> dict:
    """CPU seconds used so far: by the whole machine (busy = not idle/iowait), by this process
    (all its threads) and by its live child processes (the loader's workers), with the time."""
    import psutil

    t = psutil.cpu_times()
    busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
    kids = 0.0
    for c in psutil.Process().children(recursive=True):
        try:
            ct = c.cpu_times()
            kids += ct.user + ct.system
        except psutil.Error:
            pass
    return dict(t=time.perf_counter(), machine=busy, main=time.process_time(), workers=kids)


def cpu_cores(a: dict, b: dict) -> dict:
    """Average busy cores between two :func:`cpu_snapshot` s: whole machine, main process, workers."""
    dt = max(b["t"] - a["t"], 1e-9)
    return dict(cpu_busy_cores=(b["machine"] - a["machine"]) / dt, main_cores=(b["main"] - a["main"]) / dt,
                worker_cores=max(0.0, b["workers"] - a["workers"]) / dt)


def step_summary(df: pd.DataFrame, warmup: int) -> dict:
    """Steady-state means (steps >= ``warmup``) of one run: phases, step, images/s, AU, and the
    loader stages per batch. At W=0, where the data wait is the stages one after the other,
    ``loader_other_ms`` is the part no stage timer covers (the DataLoader's own bookkeeping and,
    for MDS, streaming's iterator): wait = read + decode + normalise + collate + pin + hand-over
    + other."""
    s = df[df["step"] >= warmup]
    wall = s["wall_ms"].sum()
    out = {p: s[p].mean() for p in PHASES}
    out.update(first_batch_ms=df["DATALOADER_WAIT"].iloc[0], step_ms=s["wall_ms"].mean(),
               compute_ms=s["compute_ms"].mean(), images_per_s=s["images"].sum() / (wall / 1e3),
               wait_share=s["DATALOADER_WAIT"].sum() / wall, au=s["compute_ms"].sum() / wall, steps=len(s))
    if "read_ms" in s:
        for k in STAGES:
            out[f"{k}_ms"] = s[f"{k}_ms"].mean()
        out["worker_busy_ms"] = sum(out[f"{k}_ms"] for k in ("read", "decode", "normalise", "collate"))
        # only at W=0 does the data wait contain the stages one after the other
        in_main = (s["worker"] < 0).all()
        out["loader_other_ms"] = (out["DATALOADER_WAIT"] - out["worker_busy_ms"] - out["pin_ms"]
                                  - out["handover_ms"]) if in_main else np.nan
    return out


def util_summary(rows: list[dict], t0: float | None = None, t1: float | None = None) -> dict:
    """Mean NVML GPU utilisation and psutil CPU utilisation (%) of the samples taken between the
    host-clock times ``t0`` and ``t1`` (the steady-state steps), or of all samples."""
    if not rows:
        return dict(gpu_util=np.nan, cpu_util=np.nan, util_samples=0)
    df = pd.DataFrame(rows)
    if t0 is not None and t1 is not None and "t_abs" in df:
        df = df[(df["t_abs"] >= t0) & (df["t_abs"] <= t1)]
    g = df["gpu_util"].dropna()
    return dict(gpu_util=float(g.mean()) if len(g) else np.nan,
                cpu_util=float(df["cpu_util"].mean()) if len(df) else np.nan, util_samples=int(len(df)))


def ceiling(model, opt, *, batch_size: int, out_size: int, classes: int, steps: int, warmup: int,
            device: str, graph: GraphedStep | None = None) -> pd.DataFrame:
    """The loop fed by one batch that stays in device memory: the most images/s this model can take.
    With ``graph``: the same for the step replayed from that CUDA graph (the graphed ceiling)."""
    x, y = _device_batch(batch_size, out_size, classes, device)
    if graph is not None:
        graph.fill(x, y)
    return train_steps(cycle([(x, y)]), model, opt, steps=steps + warmup, device=device, on_gpu_batch=True,
                       graph=graph)


# --------------------------------------------------------------------------- CPU remedies
def reserved_cpus(k: int) -> set[int]:
    """``k`` logical CPUs of this process's affinity set to leave to the main process: the last
    ones, each with its SMT sibling(s) where the kernel reports them, so that a reserved core
    is a whole physical core when it can be."""
    cpus = sorted(os.sched_getaffinity(0))
    out: set[int] = set()
    for c in reversed(cpus):
        if len(out) >= k:
            break
        out.add(c)
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read_text()
            out |= {s for s in _cpu_list(text) if s in cpus}
        except OSError:
            pass
    if len(out) >= len(cpus):  # leave at least one CPU to the others
        out = set(cpus[-k:]) if k < len(cpus) else set(cpus[1:])
    return out


def _cpu_list(text: str) -> set[int]:
    out = set()
    for part in text.strip().split(","):
        if "-" in part:
            a, b = part.split("-")
            out |= set(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out


def apply_remedy(remedy: str, reserve: set[int] | frozenset = frozenset()) -> None:
    """In a loader worker or busy process: lower its priority (``nice``), keep it off the
    CPUs reserved for the main process (``reserve``), or both."""
    if "nice" in remedy:
        os.nice(WORKER_NICE - os.nice(0))
    if "reserve" in remedy and reserve:
        others = set(os.sched_getaffinity(0)) - set(reserve)
        if others:
            os.sched_setaffinity(0, others)


def _worker_init(remedy: str, reserve: frozenset, worker_id: int) -> None:
    apply_remedy(remedy, reserve)


def _busy(stop, go, started, stopped, work: list[bytes], out_size: int, remedy: str, reserve: frozenset,
          parent: int) -> None:
    """A busy process: the loader's per-image CPU work (decode, resize, normalise) in a loop while
    its ``go`` event is set, idle (blocked, no CPU) while it is not; it says when it starts and
    stops working (``started`` / ``stopped``), and ends when ``stop`` is set."""
    images.die_with_parent(parent)
    torch.set_num_threads(1)  # as in a DataLoader worker
    apply_remedy(remedy, reserve)
    k = 0
    images.to_tensor(images.decode_rgb(work[0], out_size))  # the decoder warmed up before any timing
    while not stop.is_set():
        if not go.wait(0.2):
            continue
        started.release()
        while go.is_set() and not stop.is_set():
            images.to_tensor(images.decode_rgb(work[k % len(work)], out_size))
            k += 1
        stopped.release()


class BusyPool:
    """``n`` processes that do the loader's CPU work when switched on (:meth:`running`) and sit idle
    otherwise, all started once with the same treatment (``remedy``): a load sweep switches on as
    many as a level needs instead of starting them anew for every point, which costs tens of ms
    per process when the parent holds a GPU context. They die with this process if it is killed."""

    def __init__(self, n: int, work: list[bytes], out_size: int, remedy: str = "none", reserve=frozenset()):
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        self.stop, self.started, self.stopped = ctx.Event(), ctx.Semaphore(0), ctx.Semaphore(0)
        self.go = [ctx.Event() for _ in range(n)]
        self.procs = [ctx.Process(target=_busy, args=(self.stop, g, self.started, self.stopped, work, out_size,
                                                      remedy, frozenset(reserve), os.getpid()), daemon=True)
                      for g in self.go]
        try:
            for p in self.procs:
                p.start()
        except BaseException:
            self.close()
            raise

    def _await(self, sem, n: int, what: str) -> None:
        got, deadline = 0, time.monotonic() + 120
        while got < n:
            if sem.acquire(timeout=0.1):
                got += 1
            elif any(not p.is_alive() for p in self.procs) or time.monotonic() > deadline:
                raise RuntimeError(f"a busy process of the load sweep did not {what} ({got} of {n})")

    @contextmanager
    def running(self, n: int):
        """The first ``n`` processes at work for the block (each has started when it begins, and
        each has stopped when it ends)."""
        if n > len(self.procs):
            raise ValueError(f"{n} busy processes asked of a pool of {len(self.procs)}")
        for g in self.go[:n]:
            g.set()
        try:
            self._await(self.started, n, "start")
            yield self.procs[:n]
        finally:
            for g in self.go[:n]:
                g.clear()
            self._await(self.stopped, n, "stop")

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            if p.pid is None:
                continue
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextmanager
def busy_processes(n: int, work: list[bytes], out_size: int, remedy: str = "none", reserve=frozenset()):
    """``n`` processes doing the loader's CPU work until the block ends (each has started work
    when the block begins); they die with this process if it is killed."""
    with BusyPool(n, work, out_size, remedy, reserve) as pool, pool.running(n) as procs:
        yield procs


def load_sweep(model, opt, *, work: list[bytes], out_size: int, batch_size: int, classes: int,
               levels, modes, steps: int, warmup: int, repeats: int, device: str, reserve: int,
               graph: GraphedStep | None = None, graph_note: str | None = None,
               progress=None) -> tuple[pd.DataFrame, dict]:
    """Compute per step of the ceiling loop (batch in device memory) while ``level`` processes
    do the loader's CPU work, for each mode: ``plain``; the busy processes at nice 19
    (``nice``); kept off ``reserve`` CPUs left to the main process (``reserve``); both; or the
    step replayed from the CUDA graphs of ``graph`` (``cuda_graphs``; without a graph the mode is
    skipped with ``graph_note``). One row per (mode, level, repeat)."""
    x, y = _device_batch(batch_size, out_size, classes, device)
    cores = len(os.sched_getaffinity(0))
    res_cpus = frozenset(reserved_cpus(reserve)) if reserve else frozenset()
    notes = {}
    runners = {}
    for mode in modes:
        if mode == "cuda_graphs":
            if graph is None:
                notes[mode] = graph_note or "no graph captured"
                continue
            graph.fill(x, y)
        runners[mode] = graph if mode == "cuda_graphs" else None
    rows = []
    pools: dict[str, BusyPool] = {}  # one pool per treatment of the busy processes, started once
    try:
        for r in range(repeats):
            for mode, g in runners.items():
                remedy = mode if mode in REMEDIES else "none"
                if remedy not in pools:
                    pools[remedy] = BusyPool(max(levels, default=0), work, out_size, remedy, res_cpus)
                for level in levels:
                    with pools[remedy].running(level):
                        a = cpu_snapshot()
                        df = train_steps(cycle([(x, y)]), model, opt, steps=steps + warmup, device=device,
                                         on_gpu_batch=True, graph=g)
                        b = cpu_snapshot()
                    s = step_summary(df, warmup)
                    st = df[df["step"] >= warmup]
                    rows.append(dict(mode=mode, busy=level, repeat=r, cores=cores, compute_ms=s["compute_ms"],
                                     compute_p90_ms=float(st["compute_ms"].quantile(0.9)),
                                     FORWARD=s["FORWARD"], BACKWARD=s["BACKWARD"], OPTIMIZER=s["OPTIMIZER"],
                                     step_ms=s["step_ms"], images_per_s=s["images_per_s"],
                                     reserved_cpus=len(res_cpus) if "reserve" in mode else 0, **cpu_cores(a, b)))
                    if progress is not None:
                        progress.update(1)
    finally:
        for pool in pools.values():
            pool.close()
    if device == "cuda":
        torch.cuda.synchronize()
    return pd.DataFrame(rows), notes


# --------------------------------------------------------------------------- per-sample costs

@contextmanager
def torch_threads(n: int | None):
    """Run a block with ``n`` torch intra-op threads (None: unchanged)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def reader_costs(src, shards, *, out_size: int, samples: int, seed: int, purge_method: str) -> pd.DataFrame:
    """Per-sample cost of each reader's stages in this one process, sample by sample, for the
    same ``samples`` random images: the read cold (page cache purged first; with the bytes the
    disk delivered per sample, readahead included) and warm, then decode and normalise (with
    this process's intra-op threads and with one), and for MDS the cost of streaming's own
    iterator per sample over a direct ``get_item``, warm and cold. One row per (format, stage)."""
    from datajourney.toolkit import pagecache

    rng = np.random.default_rng(seed)
    idx = rng.choice(src.n_images, size=min(samples, src.n_images), replace=False).tolist()
    readers = {"imagefolder": (images.ImageFolderDataset(src, out_size).read, [src.path(i) for i in idx])}
    mds = None
    if shards is not None:
        mds = images.mds_dataset(shards, out_size, shuffle=True, seed=seed, decoded=False)
        readers["mds"] = (lambda i: mds.get_item(i)["jpeg"], _shard_files(shards))
    rows = []
    threads = torch.get_num_threads()
    for fmt, (read, files) in readers.items():
        purge = pagecache.purge(files, purge_method)
        data, cold = [], []
        b0 = pagecache.io_read_bytes()
        for i in idx:
            t0 = time.perf_counter()
            data.append(read(i))
            cold.append((time.perf_counter() - t0) * 1e3)
        b1 = pagecache.io_read_bytes()
        disk_kb = (b1 - b0) / len(idx) / 1024 if b0 is not None and b1 is not None else None
        warm = _per_item(read, idx)
        rgb = [images.decode_rgb(d, out_size) for d in data]
        decode = _per_item(lambda d: images.decode_rgb(d, out_size), data)
        norm = _per_item(images.to_tensor, rgb)
        with torch_threads(1):
            norm1 = _per_item(images.to_tensor, rgb)
        stored_kb = float(np.mean([len(d) for d in data])) / 1024
        base = dict(format=fmt, samples=len(idx), threads=threads)
        rows += [dict(base, stage="read (cold)", **_dist(cold), disk_kb=disk_kb, stored_kb=stored_kb,
                      purge_method=purge.method, resident_at_start=purge.after["fraction"]),
                 dict(base, stage="read (warm)", **_dist(warm)),
                 dict(base, stage="decode", **_dist(decode)),
                 dict(base, stage="normalise", **_dist(norm)),
                 dict(base, stage="normalise (1 thread)", **_dist(norm1), threads=1)]
    if mds is not None:
        rows += _streaming_iteration(shards, out_size=out_size, samples=len(idx), seed=seed, threads=threads,
                                     purge_method=purge_method)
        images.stop_streaming(mds)
    return pd.DataFrame(rows)


def _streaming_iteration(shards, *, out_size: int, samples: int, seed: int, threads: int,
                         purge_method: str | None = None) -> list[dict]:
    """Iterate the decoding MDS dataset in this process as the loop does at W=0: the mean wall time
    per sample, the read stage as timed inside the iteration (beside streaming's background
    threads), and the time between samples that no stage covers (the iterator's own bookkeeping).
    Warm, and (with ``purge_method``) once more cold, page cache purged first as before the loop's
    runs, with the bytes the storage delivered per sample: the loop's W=0 runs read cold."""
    from datajourney.toolkit import pagecache

    files = _shard_files(shards)
    rows = []
    for state in ("warm", "cold") if purge_method else ("warm",):
        extra = {}
        if state == "warm":
            pagecache.warm(files)
        ds = images.mds_dataset(shards, out_size, shuffle=True, seed=seed + (1 if state == "warm" else 2))
        it = iter(ds)
        try:
            next(it)                      # starts streaming's threads; not timed
            if state == "cold":
                rep = pagecache.purge(files, purge_method)
                extra = dict(purge_method=rep.method, resident_at_start=rep.after["fraction"])
            b0 = pagecache.io_read_bytes()
            stages, t0 = [], time.perf_counter()
            for _ in range(samples):
                stages.append(next(it)[2])
            per = (time.perf_counter() - t0) * 1e3 / samples
            b1 = pagecache.io_read_bytes()
        finally:
            it.close()
            images.stop_streaming(ds)
        busy = float(np.mean([sum(s) for s in stages]))
        base = dict(format="mds", samples=samples, threads=threads, iter_ms=per)
        if state == "warm":
            rows += [dict(base, stage="read inside the iterator", **_dist([s[0] for s in stages])),
                     dict(base, stage="iterator overhead", ms=per - busy, p90_ms=None)]
        else:
            disk_kb = (b1 - b0) / samples / 1024 if b0 is not None and b1 is not None else None
            rows += [dict(base, stage="read inside the iterator (cold)", **_dist([s[0] for s in stages]),
                          disk_kb=disk_kb, **extra),
                     dict(base, stage="decode inside the iterator (cold)", **_dist([s[1] for s in stages])),
                     dict(base, stage="iterator overhead (cold)", ms=per - busy, p90_ms=None)]
    return rows


def _dist(ms: list[float]) -> dict:
    """Mean, median and p90 of per-sample times (ms): the mean adds up to a batch's time, the
    median and p90 describe a typical sample without being pulled by a few slow ones."""
    return dict(ms=float(np.mean(ms)), median_ms=float(np.median(ms)), p90_ms=float(np.quantile(ms, 0.9)))


def _per_item(fn, items) -> list[float]:
    out = []
    for it in items:
        t0 = time.perf_counter()
        fn(it)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _shard_files(shards) -> list[Path]:
    return sorted(p for p in Path(shards).rglob("*") if p.is_file())


# --------------------------------------------------------------------------- traces
def profile_trace(batches, model, opt, *, device: str, out_dir, steps: int = 6, graph=None) -> str:
    """A few steps under ``torch.profiler``; the trace (Chrome trace JSON, which TensorBoard's
    profiler plugin and Perfetto both open) is written into ``out_dir``. Returns its file name."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    plan = schedule(wait=1, warmup=1, active=max(1, steps - 2), repeat=1)
    handler = tensorboard_trace_handler(str(out_dir), worker_name="trace")
    with _quiet_stderr(), warnings.catch_warnings(), profile(activities=acts, schedule=plan,
                                                              on_trace_ready=handler) as prof:
        warnings.simplefilter("ignore", UserWarning)  # the profiler's notes on its own event buffers
        train_steps(batches, model, opt, steps=steps, device=device, profiler=prof, graph=graph)
    files = sorted(p.name for p in Path(out_dir).glob("*.json*"))
    return files[-1] if files else ""


@contextmanager
def _quiet_stderr():
    """Send file descriptor 2 to /dev/null for the block: the profiler's C++ side prints
    start/stop lines there, which would land on the runner's console."""
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


#: GPU activity kinds in a Chrome trace written by torch.profiler (kineto).
_GPU_CATS = {"kernel": "kernels", "gpu_memcpy": "copies", "gpu_memset": "copies"}


def step_timeline(trace_path, *, merge_gap_us: float = 5.0) -> pd.DataFrame:
    """One steady-state step read from a profiler trace: the phase ranges on the main thread
    (``CPU: phases``); the same phases as the GPU ran them (``GPU: phases``: from the first to
    the last GPU activity launched inside the CPU range, whichever thread launched it, matched
    by the trace's correlation ids; ``busy_ms`` is the GPU time inside that span); and the GPU's
    busy intervals (``GPU: kernels``, ``GPU: copies``; activities closer than ``merge_gap_us``
    merged). Times in ms from the start of the step; the last complete profiled step is used."""
    import gzip
    import json

    p = Path(trace_path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        events = [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    cols = ["lane", "name", "start_ms", "dur_ms", "busy_ms", "count"]
    if not steps:
        return pd.DataFrame(columns=cols)
    st = steps[-1]
    t0, t1 = float(st["ts"]), float(st["ts"]) + float(st["dur"])
    inside = [e for e in events if t0 <= float(e["ts"]) <= t1]
    rows = [dict(lane="CPU: phases", name=e["name"], start_ms=(e["ts"] - t0) / 1e3, dur_ms=e["dur"] / 1e3,
                 busy_ms=e["dur"] / 1e3, count=1)
            for e in inside if e.get("name") in PHASES and e.get("cat") == "user_annotation"]
    cpu = [(r["name"], t0 + 1e3 * r["start_ms"], t0 + 1e3 * (r["start_ms"] + r["dur_ms"])) for r in rows]
    launched = {e["args"]["correlation"]: float(e["ts"]) for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu = [e for e in inside if e.get("cat") in _GPU_CATS]
    spans: dict[str, list] = {}
    for e in gpu:
        lt = launched.get(e.get("args", {}).get("correlation"))
        phase = next((name for name, a, b in cpu if lt is not None and a <= lt <= b), None)
        if phase is None:
            continue
        a, b = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        sp = spans.setdefault(phase, [a, b, 0.0, 0])
        sp[0], sp[1], sp[2], sp[3] = min(sp[0], a), max(sp[1], b), sp[2] + (b - a), sp[3] + 1
    rows += [dict(lane="GPU: phases", name=name, start_ms=(a - t0) / 1e3, dur_ms=(b - a) / 1e3, busy_ms=busy / 1e3,
                  count=n) for name, (a, b, busy, n) in spans.items()]
    for cat, lane in _GPU_CATS.items():
        for a, b, n in _merged(sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu
                                      if e.get("cat") == cat), merge_gap_us):
            rows.append(dict(lane=f"GPU: {lane}", name=lane, start_ms=(a - t0) / 1e3, dur_ms=(b - a) / 1e3,
                             busy_ms=(b - a) / 1e3, count=n))
    df = pd.DataFrame(rows, columns=cols)
    # kernels and copies share a lane name when both kinds map to it: merge once more per lane
    df = df.sort_values(["lane", "start_ms"]).reset_index(drop=True)
    df.attrs["step_ms"] = (t1 - t0) / 1e3
    return df


def _merged(spans, gap_us: float) -> list:
    out = []
    for a, b in spans:
        if out and a - out[-1][1] <= gap_us:
            out[-1][1] = max(out[-1][1], b)
            out[-1][2] += 1
        else:
            out.append([a, b, 1])
    return out


# --------------------------------------------------------------------------- chapter
def forever(loader):
    """Batches from ``loader``, starting a new epoch when one ends. A JPEG that cannot be
    decoded in a worker process surfaces as one line naming its file."""
    while True:
        try:
            yield from loader
        except images.CorruptImageError as e:
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else str(e)
            raise images.CorruptImageError(last.split("CorruptImageError: ", 1)[-1]) from None


@dataclass(frozen=True)
class Plan:
    """What ``preflight`` hands to the run: the checked parameters, the directory the images go under and, with
    ``image_dir``, the reader's images to read instead of generated ones."""

    params: Params
    data_dir: Path
    images: object = None


def preflight(params) -> Plan:
    """Every declared range (:meth:`Params.checked`), then what spans fields or depends on this machine: worker
    counts for its cores, at least one batch of images, the libraries a model or format needs, the batches in
    flight in memory, the output directory and the data directory's free space. A missing mosaicml-streaming
    is an error when MDS is the only format asked for; with both formats the MDS half is skipped (the result
    records why) and the ImageFolder half runs."""
    from datajourney.core import results
    from datajourney.core.params import ParameterError, creatable_dir, free_space, memory, requires, run_options
    from datajourney.toolkit import datasets

    opts = run_options(dict(params)) if not isinstance(params, Params) else {}
    p = Params.coerce(params).checked()
    cores = len(os.sched_getaffinity(0))
    w_cap = max(64, 4 * cores)
    for name in ("workers", "tuned_workers", "graphed_workers"):
        if any(w < 0 or w > w_cap for w in getattr(p, name)):
            raise ParameterError(name, getattr(p, name), f"a list of integers from 0 to {w_cap}")
    if p.load_levels != "auto" and any(w > w_cap for w in p.load_levels):
        raise ParameterError("load_levels", p.load_levels, f"'auto' or a list of integers from 0 to {w_cap}")
    if p.reserve_cores != "auto" and p.reserve_cores > max(0, cores - 1):
        raise ParameterError("reserve_cores", p.reserve_cores, f"'auto' or an integer from 0 to {max(0, cores - 1)}")
    if not p.formats:
        raise ParameterError("formats", p.formats, "a non-empty list drawn from " + ", ".join(map(repr, FORMATS)))
    if p.n_images < p.batch_size:
        raise ParameterError("n_images", p.n_images, f"at least one batch (batch_size = {p.batch_size})")
    if p.reader_samples > p.n_images:
        raise ParameterError("reader_samples", p.reader_samples, f"an integer from 1 to {p.n_images:,} (n_images)")
    if p.model == "resnet50":
        requires("model", "resnet50", "torchvision", "torchvision (pip install torchvision)")
    if p.formats == ["mds"]:
        requires("formats", p.formats, "streaming", "mosaicml-streaming (pip install mosaicml-streaming)")
        ok, why = images.streaming_status()
        if not ok:
            raise ParameterError("formats", p.formats, f"an option this machine can run ({why.split(';')[0]})")
    # batches in flight: each worker prefetches two, the pin thread and the loop hold one each
    w_max = max(p.workers + p.tuned_workers + p.graphed_workers)
    batch_bytes = p.batch_size * 3 * p.out_size ** 2 * 4
    memory("batch_size", p.batch_size, (2 * w_max + 3) * batch_bytes,
           what=f"{2 * w_max + 3} batches of {p.batch_size} images of {p.out_size}² pixels (float32)")
    creatable_dir("run_dir", results.resolve_run_dir(opts["run_dir"] if "run_dir" in opts else None))
    yours = None
    if p.image_dir is not None:   # the reader's images, checked before any work
        from datajourney.toolkit import yourdata

        yours = yourdata.images(p.image_dir, p.n_images, seed=p.seed, data_dir=datasets.parent_dir(p.data_dir))
    plan = images.image_folder_plan(p.n_images, p.image_size, p.jpeg_quality, p.classes, p.seed)
    need = [plan] + ([images.mds_plan(plan)] if "mds" in p.formats else [])
    if p.storage_formats:
        if p.format_images > p.n_images:
            raise ParameterError("format_images", p.format_images, f"an integer from 1 to {p.n_images:,} (n_images)")
        w_top = max(max(worker_counts(p.format_workers, cores)), 1)
        if p.format_images < p.batch_size * w_top:
            raise ParameterError("format_images", p.format_images, f"at least one batch per worker ({p.batch_size} x "
                                 f"{w_top} workers = {p.batch_size * w_top:,})")
        if p.shard_images != "auto" and p.shard_images > p.format_images:
            raise ParameterError("shard_images", p.shard_images, f"'auto' or an integer from 1 to {p.format_images:,}"
                                 " (format_images)")
        if p.format_workers not in ("auto", "cores") and any(w > w_cap for w in p.format_workers):
            raise ParameterError("format_workers", p.format_workers, f"'auto', 'cores' or a list of integers from 0 "
                                 f"to {w_cap}")
    if yours is not None:
        need = [images.mds_plan(yours.source_plan())] if "mds" in p.formats else []
    parent = datasets.check_space(p.data_dir, need)
    if p.storage_formats:
        # the converted copies (each about the images' size; Hugging Face's writer holds a second one while it
        # writes) exist together in a scratch folder of the run, removed at its end
        copies = len(p.storage_formats) - ("imagefolder" in p.storage_formats) + 1
        source = yours.source_plan() if yours is not None else plan
        per_image = source[2] / p.n_images
        pending = sum(b for n, q, b in need if not datasets.is_ready(parent, n, q))
        free_space("storage_formats", parent, pending + int(copies * p.format_images * per_image))
    return Plan(p, parent, yours)


def auto_reserve(cores: int) -> int:
    """CPUs left to the main process by the "reserve" remedy: two (its main thread and its
    pin-memory thread), fewer on a machine with fewer than three."""
    return max(0, min(2, cores - 1))


def auto_levels(cores: int) -> list[int]:
    """Busy processes for the load sweep: none, as many as cores, one and a half times as many."""
    return sorted({0, cores, cores + max(1, cores // 2)})


class _Chapter:
    """What one run needs to build loaders and run scenarios."""

    def __init__(self, p: dict, src, shards, net, opt, device: str, progress, graph: GraphedStep | None = None):
        self.p, self.src, self.shards, self.net, self.opt, self.device = p, src, shards, net, opt, device
        self.progress, self.graph = progress, graph
        self.reserve = frozenset(reserved_cpus(p["reserve_cores"])) if p["reserve_cores"] else frozenset()

    def loader(self, fmt: str, w: int, variant: str, repeat: int):
        """A DataLoader for one run and the files it will read (to purge before it)."""
        from torch.utils.data import DataLoader

        p = self.p
        uint8 = variant in ("tuned", "graphed")
        remedy = p["tuned_remedy"] if uint8 else "none"
        in_flight = (p["warmup_steps"] + p["steps"] + 2 * w + 2) * p["batch_size"]
        if fmt == "imagefolder":
            ds = images.ImageFolderDataset(self.src, p["out_size"], uint8=uint8)
            order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(1000 * p["seed"] + repeat))
            sampler = order.tolist()
            files = [self.src.names[i] for i in sampler[:in_flight]]
        else:
            ds = images.mds_dataset(self.shards, p["out_size"], batch_size=p["batch_size"], seed=p["seed"] + repeat,
                                    uint8=uint8)
            sampler, files = None, _shard_files(self.shards)
        init = partial(_worker_init, remedy, self.reserve) if (w and remedy != "none") else None
        dl = DataLoader(ds, batch_size=p["batch_size"], sampler=sampler, num_workers=w, collate_fn=images.collate,
                        pin_memory=self.device == "cuda", drop_last=True, worker_init_fn=init,
                        multiprocessing_context="fork" if w else None)
        return dl, files

    def scenario(self, fmt: str, w: int, variant: str, repeat: int):
        from datajourney.toolkit import pagecache

        p = self.p
        t0 = time.perf_counter()
        dl, files = self.loader(fmt, w, variant, repeat)
        purge = pagecache.purge(files, p["purge_method"])
        threads = 1 if variant == "1 thread" else None
        graph = self.graph if variant == "graphed" else None
        t1 = t2 = time.perf_counter()
        with torch_threads(threads), UtilSampler() as us:
            nthreads = torch.get_num_threads()
            it = forever(dl)
            try:
                warm = train_steps(it, self.net, self.opt, steps=p["warmup_steps"], device=self.device, graph=graph)
                a = cpu_snapshot()
                main = train_steps(it, self.net, self.opt, steps=p["steps"], device=self.device,
                                   first_step=p["warmup_steps"], graph=graph)
                b = cpu_snapshot()
            finally:
                t2 = time.perf_counter()
                it.close()
                images.stop_streaming(dl.dataset)
        df = pd.concat([warm, main], ignore_index=True)
        s = step_summary(df, p["warmup_steps"])
        u = util_summary(us.rows, float(main["t_start"].min()), float(main["t_end"].max()))
        # where the run's wall time went: loader and purge, the steps, the loader's shutdown
        seconds = dict(setup_s=t1 - t0, purge_s=purge.seconds, loop_s=t2 - t1, close_s=time.perf_counter() - t2)
        row = dict(format=fmt, workers=w, variant=variant, repeat=repeat, label=scenario_label(fmt, w, variant),
                   **s, **u,
                   **cpu_cores(a, b), main_threads=nthreads, purge_method=purge.method,
                   resident_before_purge=purge.before["fraction"], resident_at_start=purge.after["fraction"],
                   ceiling=step_kind(variant), **seconds)
        keys = dict(format=fmt, workers=w, variant=variant, repeat=repeat)
        steps = df.drop(columns=["t_start", "t_end", "images"]).assign(**keys)
        t_first = float(df["t_start"].min())
        util = [dict(r, **keys, steady=bool(main["t_start"].min() <= r["t_abs"] <= main["t_end"].max()),
                     t=r["t_abs"] - t_first) for r in us.rows]
        for r in util:
            r.pop("t_abs")
        return row, steps, util


def _images(plan: Plan, p: dict, res, progress):
    """The images: the reader's (read where they lie, described in the metadata) or the generated ImageFolder."""
    if plan.images is not None:
        plan.images.recheck()
        src = plan.images.labelled(p["classes"])
        res.metadata["your_data"] = src.describe()
        return src
    return images.image_folder(plan.data_dir, n_images=p["n_images"], size=p["image_size"],
                               quality=p["jpeg_quality"], classes=p["classes"], seed=p["seed"], progress=progress)


def _model(p: dict, device: str):
    """The model and its optimiser, with CUDA / cuDNN warmed up by a ceiling step before any cold read."""
    torch.manual_seed(p["seed"])
    net = make_model(p["model"], p["classes"]).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=p["lr"], momentum=0.9)
    ceiling(net, opt, batch_size=p["batch_size"], out_size=p["out_size"], classes=p["classes"], steps=1,
            warmup=p["warmup_steps"], device=device)
    return net, opt


def scenario_plan(p: dict, fmts: list[str], graphed: bool) -> list[tuple[str, int, str]]:
    """(format, workers, variant) of every scenario a repeat runs: the default loader per format and worker count
    (W=1 for ``one_worker_formats``), W=0 on one thread, the tuned loader, and the graphed step where captured."""
    plan = [(f, w, "default") for f in fmts for w in p["workers"] if w != 1 or f in p["one_worker_formats"]]
    if p["single_thread_w0"] and 0 in p["workers"]:  # the question it answers is W=0 against W=1: one format
        plan += [(fmts[0], 0, "1 thread")]
    plan += [(f, w, "tuned") for f in fmts for w in p["tuned_workers"]]
    if graphed:
        plan += [(f, w, "graphed") for f in fmts for w in p["graphed_workers"]]
    return plan


def _scenarios(ch: _Chapter, plan: list, n_ceil: int, bar) -> dict[str, list]:
    """The ceilings (eager, and graphed where the graphed scenarios need one) and every scenario, repeats
    interleaved so that a drift of the machine spreads over all: their rows, steps and utilisation samples."""
    p, net, opt = ch.p, ch.net, ch.opt
    out = dict(summary=[], steps=[], util=[], ceiling=[], graphed_ceiling=[])
    cargs = dict(batch_size=p["batch_size"], out_size=p["out_size"], classes=p["classes"], steps=p["steps"],
                 warmup=p["warmup_steps"], device=ch.device)
    for r in range(p["repeats"]):
        c = ceiling(net, opt, **cargs)
        out["ceiling"].append(dict(step_summary(c, p["warmup_steps"]), repeat=r, model=p["model"], device=ch.device))
        bar.update(1)
        if n_ceil > 1:  # the same graph on a batch in device memory: the graphed scenarios' ceiling
            c = ceiling(net, opt, **cargs, graph=ch.graph)
            out["graphed_ceiling"].append(dict(step_summary(c, p["warmup_steps"]), repeat=r, model=p["model"],
                                               device=ch.device))
            bar.update(1)
        for fmt, w, variant in plan:
            row, st, u = ch.scenario(fmt, w, variant, r)
            out["summary"].append(row)
            out["steps"].append(st)
            out["util"] += u
            bar.update(1)
    return out


def _storage_formats(ch: _Chapter, data_dir, bar):
    """The storage-format comparison (:mod:`.storage`) on the first ``format_images`` images, when asked for:
    its table, its runs and its metadata."""
    p = ch.p
    if not p["storage_formats"]:
        return pd.DataFrame(), pd.DataFrame(), {}
    from datajourney.chapters.c07_full_picture import storage

    source = storage.formats.Source(tuple(ch.src.names[:p["format_images"]]),
                                    tuple(i % p["classes"] for i in range(p["format_images"])))
    return storage.measure(source, p, data_dir=data_dir, net=ch.net, opt=ch.opt, device=ch.device, progress=bar)


def _under_load(ch: _Chapter, levels: list[int], graph_note, bar):
    """The load sweep: the ceiling loop while busy processes do the loader's CPU work, per remedy."""
    p = ch.p
    if not p["load_modes"]:
        return pd.DataFrame(), {}
    work = [ch.src.path(i).read_bytes() for i in range(min(64, p["n_images"]))]
    return load_sweep(ch.net, ch.opt, work=work, out_size=p["out_size"], batch_size=p["batch_size"],
                      classes=p["classes"], levels=levels, modes=p["load_modes"], steps=p["load_steps"],
                      warmup=min(3, p["warmup_steps"]), repeats=p["repeats"], device=ch.device,
                      reserve=p["reserve_cores"], graph=ch.graph, graph_note=graph_note, progress=bar)


def _traces(ch: _Chapter, sc: pd.DataFrame, rd: Path) -> tuple[dict, list]:
    """Profiler traces of W=0 and of the best scenario (share of the ceiling), each from cold files, and the
    step timeline read from each: the trace paths (relative to the run directory) and the timelines."""
    from datajourney.toolkit import pagecache

    traces, timelines = {}, []
    means = sc.groupby(["format", "workers", "variant"], sort=False)["pct_of_ceiling"].mean()
    best = means.idxmax()
    targets = {"imagefolder-w0": ("imagefolder", 0, "default")} if 0 in ch.p["workers"] else {}
    if best not in targets.values():
        targets["best"] = best
    for name, (fmt, w, variant) in targets.items():
        out = rd / "traces" / name
        out.mkdir(parents=True, exist_ok=True)
        dl, files = ch.loader(fmt, int(w), variant, 0)
        pagecache.purge(files, ch.p["purge_method"])
        with torch_threads(1 if variant == "1 thread" else None):
            it = forever(dl)
            try:
                f = profile_trace(it, ch.net, ch.opt, device=ch.device, out_dir=out,
                                  graph=ch.graph if variant == "graphed" else None)
            finally:
                it.close()
                images.stop_streaming(dl.dataset)
        traces[name] = str(out.relative_to(rd) / f) if f else ""
        if f:
            tl = step_timeline(out / f)
            timelines.append(tl.assign(trace=name, label=scenario_label(fmt, int(w), variant),
                                       step_ms=tl.attrs.get("step_ms")))
    return traces, timelines


def measure(plan: Plan, context) -> None:
    """Run chapter 7 into the started result (its tables, traces and metadata)."""
    from tqdm import tqdm

    params = plan.params.as_dict()
    cores = len(os.sched_getaffinity(0))
    reserve = params["reserve_cores"]
    p = dict(params, reserve_cores=auto_reserve(cores) if reserve == "auto" else reserve)
    res, rd, progress = context.result, context.run_dir, context.progress
    lap = timing.Laps()  # how long each part of the run took (metadata)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    src = _images(plan, p, res, progress)
    lap("data sets: images")
    mds_ok, mds_why = images.streaming_status()
    shards = images.mds_shards(src, plan.data_dir, progress=progress) if ("mds" in p["formats"] and mds_ok) else None
    fmts = [f for f in p["formats"] if f == "imagefolder" or shards is not None]
    lap("data sets: MDS shards")
    levels = auto_levels(cores) if p["load_levels"] == "auto" else p["load_levels"]
    net, opt = _model(p, device)
    lap("model and warm-up")
    # the graphed step, captured before any loader runs (no other thread may use the GPU during a capture)
    graph, graph_note = None, None
    if p["graphed_workers"] or "cuda_graphs" in p["load_modes"]:
        graph, graph_note = graphed_step(net, p["lr"], batch_size=p["batch_size"], out_size=p["out_size"],
                                         classes=p["classes"], device=device)
        lap("CUDA graph capture")

    runs = scenario_plan(p, fmts, graph is not None)
    n_load = p["repeats"] * len(levels) * len(p["load_modes"])
    ch = _Chapter(p, src, shards, net, opt, device, progress, graph)
    n_ceil = 1 + (graph is not None and bool(p["graphed_workers"]))
    n_formats = 0
    if p["storage_formats"]:
        from datajourney.chapters.c07_full_picture.storage import planned_steps

        n_formats = planned_steps(p, cores)
    with tqdm(total=p["repeats"] * (len(runs) + n_ceil) + n_load + 1 + n_formats, desc="chapter 7",
              disable=not progress) as bar:
        readers = reader_costs(src, shards, out_size=p["out_size"], samples=p["reader_samples"], seed=p["seed"],
                               purge_method=p["purge_method"])
        bar.update(1)
        lap("reader costs")
        got = _scenarios(ch, runs, n_ceil, bar)
        lap("scenarios and ceilings")
        fmt_table, fmt_runs, fmt_meta = _storage_formats(ch, plan.data_dir, bar)
        lap("storage formats")
        load, load_notes = _under_load(ch, levels, graph_note, bar)
        lap("load sweep")

    ceil, gceil = pd.DataFrame(got["ceiling"]), pd.DataFrame(got["graphed_ceiling"])
    sc = pd.DataFrame(got["summary"])
    sc["pct_of_ceiling"] = share_of_ceiling(sc, ceil, gceil)
    traces, timelines = _traces(ch, sc, rd) if p["profile"] else ({}, [])
    lap("traces")
    res.add("scenarios", sc)
    res.add("steps", _rounded(pd.concat(got["steps"], ignore_index=True)))
    res.add("ceiling", ceil)
    res.add("graphed_ceiling", gceil)
    res.add("utilisation", _rounded(pd.DataFrame(got["util"])))
    res.add("load", load)
    res.add("readers", readers)
    res.add("timeline", _rounded(pd.concat(timelines, ignore_index=True)) if timelines else pd.DataFrame())
    if p["storage_formats"]:
        res.add("formats", fmt_table)
        res.add("format_runs", fmt_runs)
        res.metadata["formats"] = fmt_meta
    res.metadata.update(device=device, model=p["model"], mds_available=mds_ok, mds_note=None if shards else mds_why,
                        traces=traces, cores=cores, main_threads=torch.get_num_threads(), load_levels=levels,
                        load_notes=load_notes, reserved_cpus=sorted(ch.reserve), worker_nice=WORKER_NICE,
                        keep_up=KEEP_UP, au_rule=AU_RULE, seconds=lap.seconds, datasets={"imagefolder": src.manifest},
                        graph_note=graph_note if p["graphed_workers"] else None)


def _rounded(df: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Floats rounded (to 0.1 µs for ms columns) so that the result file stays small."""
    if df.empty:
        return df
    floats = df.select_dtypes("float").columns
    return df.assign(**{c: df[c].round(digits) for c in floats})


# --------------------------------------------------------------------------- reading the result
