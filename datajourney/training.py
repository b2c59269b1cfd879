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

import copy
import os
import time
import warnings
from contextlib import contextmanager
from functools import partial
from itertools import cycle
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.profiler import record_function

from . import images, timing
from .book.findings import Finding, choose, compare, direction, num, pct, ratio_interval, span, times

CHAPTER = "07_full_picture"
FORMATS = ("imagefolder", "mds")
PHASES = ("DATALOADER_WAIT", "H2D_TRANSFER", "FORWARD", "BACKWARD", "OPTIMIZER")
#: Stages of the data path timed inside the loader (per batch, ms).
STAGES = ("read", "decode", "normalise", "collate", "pin", "handover")
#: Loader recipes. "default": float32 normalised on the CPU, workers at normal priority (the
#: published recipe). "1 thread": W=0 with one torch intra-op thread in the main process.
#: "tuned": uint8 batches normalised on the GPU, workers treated with ``tuned_remedy``.
VARIANTS = ("default", "1 thread", "tuned")
#: How the load sweep's busy processes (or the tuned scenario's workers) are treated.
REMEDIES = ("none", "nice", "reserve", "nice+reserve")
LOAD_MODES = ("plain", "nice", "reserve", "nice+reserve", "cuda_graphs")
#: Niceness of worker processes under the "nice" remedy (lowest priority).
WORKER_NICE = 19
#: A configuration keeps up when it reaches this share of the ceiling's images/s.
KEEP_UP = 0.95
#: MLPerf Storage's rule: the accelerator is kept busy when AU reaches this share.
AU_RULE = 0.90
#: The loader keeps up when the data wait is below this share of the step.
LOADER_KEEPS_UP = 0.01
LABELS = {"imagefolder": "ImageFolder", "mds": "MDS"}


def make_model(name: str, classes: int) -> nn.Module:
    """``resnet50`` (torchvision, random weights, no download) or ``small_cnn`` (for CPU runs)."""
    if name == "resnet50":
        from torchvision.models import resnet50

        return resnet50(weights=None, num_classes=classes)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


class _Marks:
    """Phase boundaries: CUDA events on a GPU, host clock on a CPU. Unlike :func:`timing.cuda_ms`
    (one function between two events), consecutive phases share their boundary events and the
    step synchronises once, at the end, so that timing adds no synchronisation between phases."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.points = []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.points.append(e)
        else:
            self.points.append(time.perf_counter())

    def durations_ms(self) -> list[float]:
        if self.cuda:
            self.points[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.points, self.points[1:], strict=False)]
        return [(b - a) * 1e3 for a, b in zip(self.points, self.points[1:], strict=False)]


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


def train_steps(batches, model: nn.Module, opt, *, steps: int, device: str, on_gpu_batch: bool = False,
                profiler=None, first_step: int = 0) -> pd.DataFrame:
    """Run ``steps`` training steps from the iterator ``batches``; one row per step with each
    phase's ms, the host-clock start and end of the step (``t_start``/``t_end``, seconds) and,
    when the batches are :class:`images.Batch` es, the ms of each loader stage for the batch.
    A uint8 batch is normalised on the device inside H2D_TRANSFER."""
    cuda = device == "cuda"
    loss_fn = nn.CrossEntropyLoss()
    rows = []
    for step in range(first_step, first_step + steps):
        marks = _Marks(cuda)
        t0 = time.perf_counter()
        with record_function("DATALOADER_WAIT"):
            batch = next(batches)
        t1 = time.perf_counter()
        x, y = batch
        marks.mark()
        with record_function("H2D_TRANSFER"):
            if not on_gpu_batch:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                if x.dtype == torch.uint8:
                    x = images.normalise_on_device(x)
        marks.mark()
        with record_function("FORWARD"):
            loss = loss_fn(model(x), y)
        marks.mark()
        with record_function("BACKWARD"):
            loss.backward()
        marks.mark()
        with record_function("OPTIMIZER"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        marks.mark()
        h2d, fwd, bwd, optim = marks.durations_ms()
        t2 = time.perf_counter()
        row = dict(step=step, DATALOADER_WAIT=(t1 - t0) * 1e3, H2D_TRANSFER=h2d, FORWARD=fwd, BACKWARD=bwd,
                   OPTIMIZER=optim, wall_ms=(t2 - t0) * 1e3, images=int(x.shape[0]), t_start=t0, t_end=t2)
        st = getattr(batch, "stages", None)
        if st is not None:
            row.update({f"{k}_ms": st[k] for k in images.SAMPLE_STAGES + images.BATCH_STAGES},
                       handover_ms=handover_ms(st, t0, t1), worker=st["worker"])
        rows.append(row)
        if profiler is not None:
            profiler.step()
    df = pd.DataFrame(rows)
    df["compute_ms"] = df["FORWARD"] + df["BACKWARD"] + df["OPTIMIZER"]
    return df


def handover_ms(stages: dict, t_asked: float, t_got: float) -> float:
    """The part of a data wait spent handing a finished batch to the loop: from the later of
    "collated" and "asked for" to "received", minus the pinning that fell inside that span.
    In a worker: the queue, the passing of shared memory and the rebuild of the tensors. A batch
    that sat ready in the queue before the loop asked for it costs only the time to take it."""
    start = max(stages["t_collated"], t_asked)
    span = max(0.0, t_got - start)
    if stages.get("t_pinned") is not None and stages["pin"] > 0:
        p1 = stages["t_pinned"]
        p0 = p1 - stages["pin"] / 1e3
        span -= max(0.0, min(p1, t_got) - max(p0, start))
    return max(0.0, span) * 1e3


def summarise(df: pd.DataFrame, warmup: int) -> dict:
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
            device: str) -> pd.DataFrame:
    """The loop fed by one batch that stays in device memory: the most images/s this model can take."""
    x, y = _device_batch(batch_size, out_size, classes, device)
    return train_steps(cycle([(x, y)]), model, opt, steps=steps + warmup, device=device, on_gpu_batch=True)


def _device_batch(batch_size: int, out_size: int, classes: int, device: str):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, 3, out_size, out_size, generator=g).to(device)
    y = torch.randint(0, classes, (batch_size,), generator=g).to(device)
    return x, y


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


def _busy(stop, ready, work: list[bytes], out_size: int, remedy: str, reserve: frozenset, parent: int) -> None:
    """A busy process: the loader's per-image CPU work (decode, resize, normalise) in a loop."""
    images.die_with_parent(parent)
    torch.set_num_threads(1)  # as in a DataLoader worker
    apply_remedy(remedy, reserve)
    k = 0
    images.to_tensor(images.decode_rgb(work[0], out_size))
    ready.release()
    while not stop.is_set():
        images.to_tensor(images.decode_rgb(work[k % len(work)], out_size))
        k += 1


@contextmanager
def busy_processes(n: int, work: list[bytes], out_size: int, remedy: str = "none", reserve=frozenset()):
    """``n`` processes doing the loader's CPU work until the block ends (each has started work
    when the block begins); they die with this process if it is killed."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    stop, ready = ctx.Event(), ctx.Semaphore(0)
    procs = [ctx.Process(target=_busy, args=(stop, ready, work, out_size, remedy, frozenset(reserve), os.getpid()),
                         daemon=True) for _ in range(n)]
    try:
        for p in procs:
            p.start()
        started, deadline = 0, time.monotonic() + 120
        while started < n:
            if ready.acquire(timeout=0.1):
                started += 1
            elif any(not p.is_alive() for p in procs) or time.monotonic() > deadline:
                raise RuntimeError(f"a busy process of the load sweep did not start ({started} of {n} running)")
        yield procs
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()


def graphed_copy(model: nn.Module, lr: float, x: torch.Tensor):
    """A copy of ``model`` whose forward and backward run as CUDA graphs (one launch each instead
    of one per kernel), with its own SGD optimizer."""
    m = copy.deepcopy(model)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    with warnings.catch_warnings():  # the capture's notes on gradient streams: expected here
        warnings.simplefilter("ignore", UserWarning)
        g = torch.cuda.make_graphed_callables(m, (x,))
    return g, opt


def load_sweep(model, opt, *, lr: float, work: list[bytes], out_size: int, batch_size: int, classes: int,
               levels, modes, steps: int, warmup: int, repeats: int, device: str, reserve: int,
               progress=None) -> tuple[pd.DataFrame, dict]:
    """Compute per step of the ceiling loop (batch in device memory) while ``level`` processes
    do the loader's CPU work, for each mode: ``plain``; the busy processes at nice 19
    (``nice``); kept off ``reserve`` CPUs left to the main process (``reserve``); both; or the
    model run as CUDA graphs (``cuda_graphs``, GPU only). One row per (mode, level, repeat)."""
    x, y = _device_batch(batch_size, out_size, classes, device)
    cores = len(os.sched_getaffinity(0))
    res_cpus = frozenset(reserved_cpus(reserve)) if reserve else frozenset()
    notes = {}
    runners = {}
    for mode in modes:
        if mode == "cuda_graphs":
            if device != "cuda":
                notes[mode] = "CUDA graphs need a GPU: not measured on this machine"
                continue
            try:
                runners[mode] = graphed_copy(model, lr, x)
            except Exception as e:  # noqa: BLE001 - a failed capture is reported, the other modes run
                notes[mode] = f"CUDA graph capture failed here ({type(e).__name__}: {e})"
                continue
        else:
            runners[mode] = (model, opt)
    rows = []
    for r in range(repeats):
        for mode, (m, o) in runners.items():
            remedy = mode if mode in REMEDIES else "none"
            for level in levels:
                with busy_processes(level, work, out_size, remedy, res_cpus), warnings.catch_warnings():
                    if mode == "cuda_graphs":  # autograd's note on the graph's gradient streams: expected
                        warnings.simplefilter("ignore", UserWarning)
                    a = cpu_snapshot()
                    df = train_steps(cycle([(x, y)]), m, o, steps=steps + warmup, device=device, on_gpu_batch=True)
                    b = cpu_snapshot()
                s = summarise(df, warmup)
                st = df[df["step"] >= warmup]
                rows.append(dict(mode=mode, busy=level, repeat=r, cores=cores, compute_ms=s["compute_ms"],
                                 compute_p90_ms=float(st["compute_ms"].quantile(0.9)),
                                 FORWARD=s["FORWARD"], BACKWARD=s["BACKWARD"], OPTIMIZER=s["OPTIMIZER"],
                                 step_ms=s["step_ms"], images_per_s=s["images_per_s"],
                                 reserved_cpus=len(res_cpus) if "reserve" in mode else 0, **cpu_cores(a, b)))
                if progress is not None:
                    progress.update(1)
    if device == "cuda":
        torch.cuda.synchronize()
    return pd.DataFrame(rows), notes


# --------------------------------------------------------------------------- per-sample costs
def _io_read_bytes() -> int | None:
    """Bytes this process has caused to be read from storage (``/proc/self/io``), readahead included."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


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
    iterator per sample over a direct ``get_item``. One row per (format, stage)."""
    from . import pagecache

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
        b0 = _io_read_bytes()
        for i in idx:
            t0 = time.perf_counter()
            data.append(read(i))
            cold.append((time.perf_counter() - t0) * 1e3)
        b1 = _io_read_bytes()
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
        rows += _streaming_iteration(shards, out_size=out_size, samples=len(idx), seed=seed, threads=threads)
        images.stop_streaming(mds)
    return pd.DataFrame(rows)


def _streaming_iteration(shards, *, out_size: int, samples: int, seed: int, threads: int) -> list[dict]:
    """Iterate the decoding MDS dataset in this process, warm, as the loop does at W=0: the mean
    wall time per sample, the read stage as timed inside the iteration (beside streaming's
    background threads), and the time between samples that no stage covers (the iterator's
    own bookkeeping)."""
    from . import pagecache

    pagecache.warm(_shard_files(shards))
    ds = images.mds_dataset(shards, out_size, shuffle=True, seed=seed + 1)
    it = iter(ds)
    try:
        next(it)
        stages, t0 = [], time.perf_counter()
        for _ in range(samples):
            stages.append(next(it)[2])
        per = (time.perf_counter() - t0) * 1e3 / samples
    finally:
        it.close()
        images.stop_streaming(ds)
    busy = float(np.mean([sum(s) for s in stages]))
    base = dict(format="mds", samples=samples, threads=threads, iter_ms=per)
    return [dict(base, stage="read inside the iterator", **_dist([s[0] for s in stages])),
            dict(base, stage="iterator overhead", ms=per - busy, p90_ms=None)]


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
def profile_trace(batches, model, opt, *, device: str, out_dir, steps: int = 6) -> str:
    """A few steps under ``torch.profiler``; the trace (Chrome trace JSON, which TensorBoard's
    profiler plugin and Perfetto both open) is written into ``out_dir``. Returns its file name."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    plan = schedule(wait=1, warmup=1, active=max(1, steps - 2), repeat=1)
    handler = tensorboard_trace_handler(str(out_dir), worker_name="trace")
    with _quiet_stderr(), warnings.catch_warnings(), profile(activities=acts, schedule=plan,
                                                              on_trace_ready=handler) as prof:
        warnings.simplefilter("ignore", UserWarning)  # the profiler's notes on its own event buffers
        train_steps(batches, model, opt, steps=steps, device=device, profiler=prof)
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


def check_parameters(p: dict) -> dict:
    """Every parameter of the chapter, checked before any work (ParameterError names the bad one)."""
    from . import pagecache
    from .params import (ParameterError, boolean, choice, choices, int_list, memory, nonnegative_int,
                              number, positive_int, requires)

    q = dict(p)
    cores = len(os.sched_getaffinity(0))
    q["batch_size"] = positive_int("batch_size", p["batch_size"], maximum=65536)
    q["n_images"] = positive_int("n_images", p["n_images"], maximum=images.MAX_IMAGES)
    if q["n_images"] < q["batch_size"]:
        raise ParameterError("n_images", q["n_images"], f"at least one batch (batch_size = {q['batch_size']})")
    q["image_size"] = positive_int("image_size", p["image_size"], maximum=4096)
    q["jpeg_quality"] = positive_int("jpeg_quality", p["jpeg_quality"], maximum=95)
    q["classes"] = positive_int("classes", p["classes"], maximum=100_000)
    q["out_size"] = positive_int("out_size", p["out_size"], maximum=4096)
    q["model"] = choice("model", p["model"], ("resnet50", "small_cnn"))
    if q["model"] == "resnet50":
        requires("model", "resnet50", "torchvision", "torchvision (pip install torchvision)")
    q["lr"] = number("lr", p["lr"], minimum=0, maximum=10, exclusive_minimum=True)
    q["formats"] = choices("formats", p["formats"], FORMATS)
    if q["formats"] == ["mds"]:
        requires("formats", p["formats"], "streaming", "mosaicml-streaming (pip install mosaicml-streaming)")
        ok, why = images.streaming_status()
        if not ok:
            raise ParameterError("formats", p["formats"], f"an option this machine can run ({why.split(';')[0]})")
    q["workers"] = int_list("workers", p["workers"], minimum=0, maximum=max(64, 4 * cores))
    q["steps"] = positive_int("steps", p["steps"], maximum=100_000)
    q["warmup_steps"] = positive_int("warmup_steps", p["warmup_steps"], maximum=10_000)
    q["repeats"] = positive_int("repeats", p.get("repeats", 3), maximum=100)
    tw = p.get("tuned_workers", [])
    q["tuned_workers"] = [] if tw == [] else int_list("tuned_workers", tw, minimum=0, maximum=max(64, 4 * cores))
    q["tuned_remedy"] = choice("tuned_remedy", p.get("tuned_remedy", "nice"), REMEDIES)
    rc = p.get("reserve_cores", "auto")
    q["reserve_cores"] = auto_reserve(cores) if rc == "auto" else nonnegative_int("reserve_cores", rc,
                                                                                   maximum=max(0, cores - 1))
    q["single_thread_w0"] = boolean("single_thread_w0", p.get("single_thread_w0", True))
    levels = p.get("load_levels", "auto")
    q["load_levels"] = levels if levels == "auto" else int_list("load_levels", levels, minimum=0,
                                                                 maximum=max(64, 4 * cores))
    modes = p.get("load_modes", [])
    q["load_modes"] = [] if modes == [] else choices("load_modes", modes, LOAD_MODES)
    q["load_steps"] = positive_int("load_steps", p.get("load_steps", 12), maximum=100_000)
    q["reader_samples"] = positive_int("reader_samples", p.get("reader_samples", 256), maximum=q["n_images"])
    q["purge_method"] = choice("purge_method", p["purge_method"], pagecache.METHODS)
    q["profile"] = boolean("profile", p["profile"])
    q["seed"] = nonnegative_int("seed", p.get("seed", 0), maximum=2**31 - 1)
    # batches in flight: each worker prefetches two, the pin thread and the loop hold one each
    w_max = max(q["workers"] + q["tuned_workers"])
    batch_bytes = q["batch_size"] * 3 * q["out_size"] ** 2 * 4
    memory("batch_size", q["batch_size"], (2 * w_max + 3) * batch_bytes,
           what=f"{2 * w_max + 3} batches of {q['batch_size']} images of {q['out_size']}² pixels (float32)")
    return q


def preflight(params: dict):
    """Parameters, output directory and free disk, before any work. A missing mosaicml-streaming
    is an error when MDS is the only format asked for; with both formats the MDS half is skipped
    with the reason, and the ImageFolder half runs."""
    from . import datasets
    from .book import results
    from .params import creatable_dir

    p = check_parameters(params)
    creatable_dir("run_dir", results.resolve_run_dir(p.get("run_dir")))
    plan = images.image_folder_plan(p["n_images"], p["image_size"], p["jpeg_quality"], p["classes"], p["seed"])
    need = [plan] + ([images.mds_plan(plan)] if "mds" in p["formats"] else [])
    parent = datasets.check_space(p.get("data_dir"), need)
    return p, parent


def auto_reserve(cores: int) -> int:
    """CPUs left to the main process by the "reserve" remedy: two (its main thread and its
    pin-memory thread), fewer on a machine with fewer than three."""
    return max(0, min(2, cores - 1))


def auto_levels(cores: int) -> list[int]:
    """Busy processes for the load sweep: none, as many as cores, one and a half times as many."""
    return sorted({0, cores, cores + max(1, cores // 2)})


def _label(fmt: str, w: int, variant: str) -> str:
    return f"{LABELS.get(fmt, fmt)}, W={int(w)}" + ("" if variant == "default" else f", {variant}")


class _Chapter:
    """What one run needs to build loaders and run scenarios."""

    def __init__(self, p: dict, src, shards, net, opt, device: str, progress):
        self.p, self.src, self.shards, self.net, self.opt, self.device = p, src, shards, net, opt, device
        self.progress = progress
        self.reserve = frozenset(reserved_cpus(p["reserve_cores"])) if p["reserve_cores"] else frozenset()

    def loader(self, fmt: str, w: int, variant: str, repeat: int):
        """A DataLoader for one run and the files it will read (to purge before it)."""
        from torch.utils.data import DataLoader

        p = self.p
        uint8 = variant == "tuned"
        remedy = p["tuned_remedy"] if variant == "tuned" else "none"
        in_flight = (p["warmup_steps"] + p["steps"] + 2 * w + 2) * p["batch_size"]
        if fmt == "imagefolder":
            ds = images.ImageFolderDataset(self.src, p["out_size"], uint8=uint8)
            order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(1000 * p["seed"] + repeat))
            sampler = order.tolist()
            files = [self.src.path(i) for i in sampler[:in_flight]]
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
        from . import pagecache

        p = self.p
        dl, files = self.loader(fmt, w, variant, repeat)
        purge = pagecache.purge(files, p["purge_method"])
        threads = 1 if variant == "1 thread" else None
        with torch_threads(threads), UtilSampler() as us:
            nthreads = torch.get_num_threads()
            it = forever(dl)
            try:
                warm = train_steps(it, self.net, self.opt, steps=p["warmup_steps"], device=self.device)
                a = cpu_snapshot()
                main = train_steps(it, self.net, self.opt, steps=p["steps"], device=self.device,
                                   first_step=p["warmup_steps"])
                b = cpu_snapshot()
            finally:
                it.close()
                images.stop_streaming(dl.dataset)
        df = pd.concat([warm, main], ignore_index=True)
        s = summarise(df, p["warmup_steps"])
        u = util_summary(us.rows, float(main["t_start"].min()), float(main["t_end"].max()))
        row = dict(format=fmt, workers=w, variant=variant, repeat=repeat, label=_label(fmt, w, variant), **s, **u,
                   **cpu_cores(a, b), main_threads=nthreads, purge_method=purge.method,
                   resident_before_purge=purge.before["fraction"], resident_at_start=purge.after["fraction"])
        keys = dict(format=fmt, workers=w, variant=variant, repeat=repeat)
        steps = df.drop(columns=["t_start", "t_end", "images"]).assign(**keys)
        t_first = float(df["t_start"].min())
        util = [dict(r, **keys, steady=bool(main["t_start"].min() <= r["t_abs"] <= main["t_end"].max()),
                     t=r["t_abs"] - t_first) for r in us.rows]
        for r in util:
            r.pop("t_abs")
        return row, steps, util


def run(*, n_images: int, image_size: int, jpeg_quality: int, classes: int, out_size: int, batch_size: int,
        model: str, lr: float, formats, workers, steps: int, warmup_steps: int, purge_method: str,
        profile: bool, repeats: int = 3, tuned_workers=(8,), tuned_remedy: str = "nice", reserve_cores="auto",
        single_thread_w0: bool = True, load_levels="auto", load_modes=("plain", "nice", "reserve", "cuda_graphs"),
        load_steps: int = 12, reader_samples: int = 256, seed: int = 0, data_dir=None, run_dir=None,
        progress: bool = True):
    """Run chapter 7 and save the result (tables + fingerprint) to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    params["tuned_workers"], params["load_modes"] = list(tuned_workers), list(load_modes)
    from tqdm import tqdm

    from . import pagecache
    from .book import results

    p, parent = preflight(params)
    rd = results.resolve_run_dir(run_dir)
    res = results.start(CHAPTER, params, run_dir, parent)
    clock = {"start": time.perf_counter()}
    seconds = {}

    def lap(name: str) -> None:  # how long each part of the run took (metadata)
        now = time.perf_counter()
        seconds[name] = round(now - clock["start"], 2)
        clock["start"] = now

    device = "cuda" if torch.cuda.is_available() else "cpu"
    src = images.image_folder(parent, n_images=n_images, size=image_size, quality=jpeg_quality, classes=classes,
                              seed=seed, progress=progress)
    mds_ok, mds_why = images.streaming_status()
    shards = images.mds_shards(src, parent, progress=progress) if ("mds" in p["formats"] and mds_ok) else None
    fmts = [f for f in p["formats"] if f == "imagefolder" or shards is not None]
    lap("data sets")
    cores = len(os.sched_getaffinity(0))
    levels = auto_levels(cores) if p["load_levels"] == "auto" else p["load_levels"]

    torch.manual_seed(seed)
    net = make_model(model, classes).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    # CUDA / cuDNN warm-up, before any cold read
    ceiling(net, opt, batch_size=batch_size, out_size=out_size, classes=classes, steps=1, warmup=warmup_steps,
            device=device)
    lap("model and warm-up")

    plan = [(f, w, "default") for f in fmts for w in p["workers"]]
    if p["single_thread_w0"] and 0 in p["workers"]:  # the question it answers is W=0 against W=1: one format
        plan += [(fmts[0], 0, "1 thread")]
    plan += [(f, w, "tuned") for f in fmts for w in p["tuned_workers"]]
    n_load = repeats * len(levels) * len(p["load_modes"])
    ch = _Chapter(p, src, shards, net, opt, device, progress)
    summary, step_tables, util, ceil_rows = [], [], [], []
    with tqdm(total=repeats * (len(plan) + 1) + n_load + 1, desc="chapter 7", disable=not progress) as bar:
        readers = reader_costs(src, shards, out_size=out_size, samples=p["reader_samples"], seed=seed,
                               purge_method=purge_method)
        bar.update(1)
        lap("reader costs")
        for r in range(repeats):  # repeats interleaved, so that a drift of the machine spreads over all
            c = ceiling(net, opt, batch_size=batch_size, out_size=out_size, classes=classes, steps=steps,
                        warmup=warmup_steps, device=device)
            ceil_rows.append(dict(summarise(c, warmup_steps), repeat=r, model=model, device=device))
            bar.update(1)
            for fmt, w, variant in plan:
                row, st, u = ch.scenario(fmt, w, variant, r)
                summary.append(row)
                step_tables.append(st)
                util += u
                bar.update(1)
        lap("scenarios and ceiling")
        load, load_notes = pd.DataFrame(), {}
        if p["load_modes"]:
            work = [src.path(i).read_bytes() for i in range(min(64, n_images))]
            load, load_notes = load_sweep(net, opt, lr=lr, work=work, out_size=out_size, batch_size=batch_size,
                                          classes=classes, levels=levels, modes=p["load_modes"], steps=load_steps,
                                          warmup=min(3, warmup_steps), repeats=repeats, device=device,
                                          reserve=p["reserve_cores"], progress=bar)
        lap("load sweep")

    ceil = pd.DataFrame(ceil_rows)
    sc = pd.DataFrame(summary)
    sc["pct_of_ceiling"] = 100 * sc["images_per_s"] / ceil["images_per_s"].mean()
    traces, timelines = {}, []
    if profile:
        means = sc.groupby(["format", "workers", "variant"], sort=False)["images_per_s"].mean()
        best = means.idxmax()
        targets = {"imagefolder-w0": ("imagefolder", 0, "default")} if 0 in p["workers"] else {}
        if best not in targets.values():
            targets["best"] = best
        for name, (fmt, w, variant) in targets.items():
            out = rd / "traces" / name
            out.mkdir(parents=True, exist_ok=True)
            dl, files = ch.loader(fmt, int(w), variant, 0)
            pagecache.purge(files, purge_method)
            with torch_threads(1 if variant == "1 thread" else None):
                it = forever(dl)
                try:
                    f = profile_trace(it, net, opt, device=device, out_dir=out)
                finally:
                    it.close()
                    images.stop_streaming(dl.dataset)
            traces[name] = str(out.relative_to(rd) / f) if f else ""
            if f:
                tl = step_timeline(out / f)
                timelines.append(tl.assign(trace=name, label=_label(fmt, int(w), variant),
                                           step_ms=tl.attrs.get("step_ms")))

    lap("traces")
    res.add("scenarios", sc)
    res.add("steps", _rounded(pd.concat(step_tables, ignore_index=True)))
    res.add("ceiling", ceil)
    res.add("utilisation", _rounded(pd.DataFrame(util)))
    res.add("load", load)
    res.add("readers", readers)
    res.add("timeline", _rounded(pd.concat(timelines, ignore_index=True)) if timelines else pd.DataFrame())
    res.metadata.update(device=device, model=model, mds_available=mds_ok, mds_note=None if shards else mds_why,
                        traces=traces, cores=cores, main_threads=torch.get_num_threads(), load_levels=levels,
                        load_notes=load_notes, reserved_cpus=sorted(ch.reserve), worker_nice=WORKER_NICE,
                        keep_up=KEEP_UP, au_rule=AU_RULE, seconds=seconds, datasets={"imagefolder": src.manifest})
    res.save(rd)
    return res


def _rounded(df: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Floats rounded (to 0.1 µs for ms columns) so that the result file stays small."""
    if df.empty:
        return df
    floats = df.select_dtypes("float").columns
    return df.assign(**{c: df[c].round(digits) for c in floats})


# --------------------------------------------------------------------------- reading the result
def scenarios(res) -> pd.DataFrame:
    """The per-run scenario table, with the columns an older result lacks filled in."""
    sc = res.table("scenarios").copy()
    if "variant" not in sc:
        sc["variant"] = "default"
    if "repeat" not in sc:
        sc["repeat"] = 0
    sc["label"] = [_label(f, w, v) for f, w, v in zip(sc["format"], sc["workers"], sc["variant"], strict=True)]
    return sc


def scenario_stats(res) -> pd.DataFrame:
    """One row per scenario (format, workers, variant): the mean over its runs of every measure,
    with ``<measure>_min`` / ``_max`` / ``_std`` for the main ones and ``runs``."""
    sc = scenarios(res)
    keys = ["format", "workers", "variant", "label"]
    measures = [c for c in sc.select_dtypes("number").columns if c not in ("workers", "repeat")]
    g = sc.groupby(keys, sort=False)
    out = g[measures].mean().reset_index()
    for c in ("images_per_s", "pct_of_ceiling", "DATALOADER_WAIT", "compute_ms", "au", "step_ms", "H2D_TRANSFER"):
        if c in sc:
            out[f"{c}_min"] = g[c].min().values
            out[f"{c}_max"] = g[c].max().values
            out[f"{c}_std"] = g[c].std().values  # NaN for a single run: no spread to show
    out["runs"] = g.size().values
    return out


def _row(stats: pd.DataFrame, fmt: str, w: int, variant: str = "default"):
    m = stats[(stats["format"] == fmt) & (stats["workers"] == w) & (stats["variant"] == variant)]
    return None if m.empty else m.iloc[0]


def _runs(res, fmt: str, w: int, col: str, variant: str = "default") -> list[float]:
    sc = scenarios(res)
    m = sc[(sc["format"] == fmt) & (sc["workers"] == w) & (sc["variant"] == variant)]
    return [float(v) for v in m[col].dropna()]


def _range(values, unit: str = "", scale: float = 1.0) -> str:
    v = [scale * x for x in values]
    if len(v) < 2:
        return "one run"
    return f"min–max {span(min(v), max(v), unit)} over {len(v)} runs"


def _ceiling_ips(res) -> float:
    return float(res.table("ceiling")["images_per_s"].mean())


def _finding_w0(res):

    st = scenario_stats(res)
    w0 = min(st[st["format"] == "imagefolder"]["workers"], default=None)
    if w0 is None:
        return None
    r = _row(st, "imagefolder", w0)
    waits = _runs(res, "imagefolder", w0, "DATALOADER_WAIT")
    share = float(r["wait_share"])
    who = "Without workers" if w0 == 0 else f"With the fewest workers tried (W={w0})"
    if share >= 0.1:
        tail = f"the data wait was **{pct(share)}** of the step and AU **{pct(r['au'])}**."
    else:
        tail = (f"the loader kept up even so: the data wait was only {pct(share)} of the step "
                f"(AU {pct(r['au'])}).")
    text = (f"{who} (ImageFolder, one file per image) each step waited **{num(r['DATALOADER_WAIT'], 'ms')}** for "
            f"data ({_range(waits, 'ms')}) against **{num(r['compute_ms'], 'ms')}** of compute: {tail}")
    return Finding("wait_w0", text, value=float(r["DATALOADER_WAIT"]), unit="ms",
                   interval=(min(waits), max(waits)) if len(waits) > 1 else None,
                   published="ImageFolder, workers=0: data wait" if w0 == 0 else None)


def _reader(res, fmt: str, stage: str, col: str = "ms"):
    if "readers" not in res.tables or res.table("readers").empty:
        return None
    t = res.table("readers")
    m = t[(t["format"] == fmt) & (t["stage"] == stage)]
    if m.empty or col not in m or pd.isna(m.iloc[0][col]):
        return None
    return float(m.iloc[0][col])


def _typical(res, fmt: str, stage: str) -> tuple[float, float | None, str] | None:
    """A reader stage's typical per-sample ms: (median, p90, "median"); an older result without
    medians gives (mean, p90, "mean")."""
    med = _reader(res, fmt, stage, "median_ms")
    if med is not None:
        return med, _reader(res, fmt, stage, "p90_ms"), "median"
    mean = _reader(res, fmt, stage)
    return None if mean is None else (mean, _reader(res, fmt, stage, "p90_ms"), "mean")


def _typ_text(t) -> str:
    value, p90, stat = t
    return f"{stat} {num(value, 'ms')}" + (f", p90 {num(p90, 'ms')}" if p90 is not None else "")


def _finding_formats_w0(res):
    a, b = _runs(res, "mds", 0, "images_per_s"), _runs(res, "imagefolder", 0, "images_per_s")
    if not a or not b:
        why = res.metadata.get("mds_note") or "MDS or W=0 was not part of this run"
        return Finding("mds_vs_imagefolder_w0", f"MDS against one file per image at W=0 was not measured here: {why}")
    st = scenario_stats(res)
    mid, lo, hi = ratio_interval(a, b)
    m, f = _row(st, "mds", 0), _row(st, "imagefolder", 0)
    d = direction(a, b)
    text = (f"At W=0, MDS shards ran **{compare(a, b)}** one file per image ({num(m['images_per_s'], 'images/s')} "
            f"vs {num(f['images_per_s'], 'images/s')}; images/s, MDS ÷ ImageFolder: {times(mid)}"
            + (f", {span(lo, hi, '×')} over the runs' extremes)." if len(a) > 1 else ")."))
    wm, wf = _runs(res, "mds", 0, "DATALOADER_WAIT"), _runs(res, "imagefolder", 0, "DATALOADER_WAIT")
    gap = float(m["DATALOADER_WAIT"] - f["DATALOADER_WAIT"])
    dw = direction(wm, wf)
    if dw == 0:
        text += (f" Their data waits were level ({num(m['DATALOADER_WAIT'], 'ms')} for shards, "
                 f"{num(f['DATALOADER_WAIT'], 'ms')} for files): at W=0 the format made no difference beyond the "
                 "runs' spread.")
        return Finding("mds_vs_imagefolder_w0", text, value=mid, unit="×", interval=(lo, hi) if len(a) > 1 else None)
    text += (f" Each step waited {num(abs(gap), 'ms')} {'longer' if gap > 0 else 'less'} for shards "
             f"({num(m['DATALOADER_WAIT'], 'ms')} vs {num(f['DATALOADER_WAIT'], 'ms')})")
    if pd.notna(m.get("read_ms")) and pd.notna(f.get("read_ms")):
        diffs = {k: float(m[f"{k}_ms"] - f[f"{k}_ms"]) for k in STAGES}
        big = max(diffs, key=lambda k: abs(diffs[k]))
        text += f"; of that, the loop's stage timers put {_signed(diffs[big])} in the **{big}**"
    text += "."
    cold_m, cold_f = _typical(res, "mds", "read (cold)"), _typical(res, "imagefolder", "read (cold)")
    if cold_m is not None and cold_f is not None:
        faster = cold_m[0] < cold_f[0]
        kb_m = _reader(res, "mds", "read (cold)", "disk_kb")
        kb_f = _reader(res, "imagefolder", "read (cold)", "disk_kb")
        disk = (f"; the disk delivered {num(kb_m, 'KiB')} per MDS sample and {num(kb_f, 'KiB')} per file"
                if kb_m is not None and kb_f is not None else "")
        text += (f" Sample by sample, a cold read was {'faster' if faster else 'slower'} from a shard "
                 f"({_typ_text(cold_m)}) than from a file ({_typ_text(cold_f)}{disk})"
                 + (": the per-sample reads point away from the disk." if faster and gap > 0 else "."))
    warm_m, inside = _reader(res, "mds", "read (warm)"), _reader(res, "mds", "read inside the iterator")
    over = _reader(res, "mds", "iterator overhead")
    if gap > 0 and warm_m is not None and inside is not None and over is not None:
        bsz = int(res.parameters.get("batch_size", 64))
        extra = bsz * (inside - warm_m + over)
        rest = gap - extra
        share = extra / gap
        text += (f" Streaming's iterator costs {_signed(extra)} per batch of {bsz} (its read inside the iterator "
                 f"minus a direct read, plus its bookkeeping between samples; means × {bsz}): **{pct(share)} of the "
                 f"gap**. " + (f"The remaining {num(rest, 'ms')} per batch is not explained by these measurements."
                               if rest > 0 else "Together they account for the whole gap."))
    return Finding("mds_vs_imagefolder_w0", text, value=mid, unit="×", interval=(lo, hi) if len(a) > 1 else None,
                   values=dict(direction=d))


def _signed(ms: float) -> str:
    return ("+" if ms >= 0 else "−") + num(abs(ms), "ms")


def _stage_text(r, *, pin: bool) -> str:
    parts = [f"{k} {num(r[f'{k}_ms'], 'ms')}" for k in ("read", "decode", "normalise", "collate")]
    return ", ".join(parts) + (f", pin {num(r['pin_ms'], 'ms')}" if pin else "")


def _finding_one_worker(res):

    st = scenario_stats(res)
    r0, r1 = _row(st, "imagefolder", 0), _row(st, "imagefolder", 1)
    if r0 is None or r1 is None:
        return None
    a, b = _runs(res, "imagefolder", 1, "images_per_s"), _runs(res, "imagefolder", 0, "images_per_s")
    mid, lo, hi = ratio_interval(a, b)
    text = (f"One worker was **{compare(a, b)}** none (ImageFolder: {num(r1['images_per_s'], 'images/s')} vs "
            f"{num(r0['images_per_s'], 'images/s')}; images/s, W=1 ÷ W=0: {times(mid)}, {span(lo, hi, '×')} over the runs' "
            "extremes).")
    if "read_ms" in r0 and pd.notna(r1.get("read_ms")):
        bsz = int(res.parameters.get("batch_size", 64))
        threads = int(r0.get("main_threads", res.metadata.get("main_threads", 1)) or 1)
        diffs = {k: float(r1[f"{k}_ms"] - r0[f"{k}_ms"]) for k in STAGES}
        big = max(diffs, key=lambda k: abs(diffs[k]))
        text += (f" Per batch of {bsz}, the worker spent {num(r1['worker_busy_ms'], 'ms')} "
                 f"({_stage_text(r1, pin=False)}), then pinning took {num(r1['pin_ms'], 'ms')} and the hand-over "
                 f"to the loop {num(r1['handover_ms'], 'ms')} of the loop's wait; at W=0 the main process, with "
                 f"{threads} intra-op thread{'s' if threads != 1 else ''}, spent "
                 f"{num(r0['worker_busy_ms'] + r0['pin_ms'], 'ms')} ({_stage_text(r0, pin=True)}). The largest "
                 f"difference is **{big}** ({_signed(diffs[big])} per batch).")
        t1 = _row(st, "imagefolder", 0, "1 thread")
        if t1 is not None:
            c = _runs(res, "imagefolder", 0, "images_per_s", "1 thread")
            text += (f" With one intra-op thread, W=0 normalised a batch in {num(t1['normalise_ms'], 'ms')} and ran "
                     f"{compare(c, b)} the runs with {threads} ({num(t1['images_per_s'], 'images/s')}).")
    return Finding("one_worker", text, value=mid, unit="×", interval=(lo, hi) if len(a) > 1 else None)


def _finding_w4(res):

    st = scenario_stats(res)
    f4, m4 = _row(st, "imagefolder", 4), _row(st, "mds", 4)
    if f4 is None:
        return None
    runs_f = _runs(res, "imagefolder", 4, "images_per_s")
    text = (f"With 4 workers, ImageFolder ran at **{num(f4['images_per_s'], 'images/s')}** "
            f"({_range(runs_f, 'images/s')}, data wait {num(f4['DATALOADER_WAIT'], 'ms')})")
    if m4 is not None:
        runs_m = _runs(res, "mds", 4, "images_per_s")
        text += (f" and MDS at {num(m4['images_per_s'], 'images/s')} (data wait {num(m4['DATALOADER_WAIT'], 'ms')}):"
                 f" MDS was {compare(runs_m, runs_f)} ImageFolder")
    text += f"; that is {num(f4['pct_of_ceiling'], '%')} of the ceiling for ImageFolder."
    return Finding("workers4", text, value=float(f4["images_per_s"]), unit="images/s",
                   interval=(min(runs_f), max(runs_f)) if len(runs_f) > 1 else None,
                   published="ImageFolder, workers=4: images/s")


def load_stats(res) -> pd.DataFrame:
    """Compute per step under load: one row per (mode, busy) with mean, min, max over repeats."""
    if "load" not in res.tables or res.table("load").empty:
        return pd.DataFrame()
    t = res.table("load")
    g = t.groupby(["mode", "busy"], sort=False)
    out = g.agg(compute_ms=("compute_ms", "mean"), compute_min=("compute_ms", "min"),
                compute_max=("compute_ms", "max"), compute_p90_ms=("compute_p90_ms", "mean"),
                main_cores=("main_cores", "mean"), cpu_busy_cores=("cpu_busy_cores", "mean"),
                n=("compute_ms", "count")).reset_index()
    return out


def _finding_load(res):

    ls = load_stats(res)
    if ls.empty:  # no load sweep: read compute against workers from the scenarios
        st = scenario_stats(res)
        d = st[(st["format"] == "imagefolder") & (st["variant"] == "default")].sort_values("workers")
        if len(d) < 2:
            return None
        lo_w, hi_w = d.iloc[0], d.iloc[-1]
        a = _runs(res, "imagefolder", int(hi_w["workers"]), "compute_ms")
        b = _runs(res, "imagefolder", int(lo_w["workers"]), "compute_ms")
        word = choose(direction(a, b, tol=0.03), "grew", "fell", "did not change beyond the runs' spread")
        text = (f"Compute per step {word} as workers were added: {num(lo_w['compute_ms'], 'ms')} at "
                f"W={int(lo_w['workers'])}, {num(hi_w['compute_ms'], 'ms')} at W={int(hi_w['workers'])} (ImageFolder).")
        return Finding("compute_under_load", text, value=float(hi_w["compute_ms"]), unit="ms")
    t = res.table("load")
    cores = int(t["cores"].iloc[0])
    def runs(mode, busy):
        return [float(v) for v in t[(t["mode"] == mode) & (t["busy"] == busy)]["compute_ms"]]

    base_mode = "plain" if "plain" in set(ls["mode"]) else ls["mode"].iloc[0]
    base = ls[ls["mode"] == base_mode]
    top = int(base.loc[base["compute_ms"].idxmax(), "busy"])  # the load at which it suffered most
    # unloaded: the mode's own runs with no busy process, else the interleaved runs of the ceiling
    c0 = runs(base_mode, 0) or [float(v) for v in res.table("ceiling")["compute_ms"]]
    c1 = runs(base_mode, top)
    m0, m1 = float(np.mean(c0)), float(np.mean(c1))
    tol = 0.05
    d = direction(m1, m0, tol=tol)
    every = min(c1) > max(c0)
    verb = choose(d, f"rose from {num(m0, 'ms')} to **{num(m1, 'ms')}** (+{pct(m1 / m0 - 1)}"
                     + (", in every run)" if every else ", on average: not every run was hit)"),
                  f"fell from {num(m0, 'ms')} to {num(m1, 'ms')}",
                  f"stayed within {pct(tol)} ({num(m0, 'ms')} → {num(m1, 'ms')})")
    who = "busy process" if top == 1 else "busy processes"
    where = ("On a batch kept in GPU memory" if res.metadata.get("device") == "cuda" else
             "On this CPU-only run (the model's own compute competes for the cores)")
    text = (f"{where}, compute per step {verb} with {top} {who} doing the loader's "
            f"work on {cores} cores ({base_mode}, {_range(c1, 'ms')}).")
    others = []
    for mode in [m for m in dict.fromkeys(ls["mode"]) if m != base_mode]:
        r = runs(mode, top)
        if r:
            label = _mode_label(mode)
            if "reserve" in mode and "reserved_cpus" in t:
                k = int(t[t["mode"] == mode]["reserved_cpus"].max())
                label += f" ({k} left to the training process)"
            if direction(r, c0, tol=tol) == 0:  # within the runs' spread or the tolerance: no signed difference
                others.append(f"{label}: level with the unloaded {base_mode} loop ({num(np.mean(r), 'ms')})")
            else:
                others.append(f"{label}: {num(np.mean(r), 'ms')} ({_signed(np.mean(r) - m0)} against the "
                              f"unloaded {base_mode} loop)")
    if others:
        text += " At the same load: " + "; ".join(others) + "."
    return Finding("compute_under_load", text, value=m1, unit="ms",
                   interval=(min(c1), max(c1)) if len(c1) > 1 else None)


#: What each load-sweep mode does, as the chapter names it.
MODE_LABELS = {"plain": "busy processes at normal priority", "nice": f"busy processes at nice {WORKER_NICE}",
               "reserve": "busy processes kept off the reserved cores",
               "nice+reserve": f"busy processes at nice {WORKER_NICE} and off the reserved cores",
               "cuda_graphs": "the model as CUDA graphs"}


def _mode_label(mode: str) -> str:
    return MODE_LABELS.get(mode, mode)


def best_scenario(res):
    st = scenario_stats(res)
    return st.loc[st["images_per_s"].idxmax()]


def _gap(res, row) -> tuple[float, dict]:
    """ms per step a scenario lost against the ceiling, split into data wait, copy, compute, rest."""
    ceil = res.table("ceiling")
    gap = float(row["step_ms"] - ceil["step_ms"].mean())
    parts = {"data wait": float(row["DATALOADER_WAIT"] - ceil["DATALOADER_WAIT"].mean()),
             "the copy to the GPU": float(row["H2D_TRANSFER"] - ceil["H2D_TRANSFER"].mean()),
             "slower compute": float(row["compute_ms"] - ceil["compute_ms"].mean())}
    parts["the rest of the step"] = gap - sum(parts.values())
    return gap, parts


def _finding_best(res):

    sc = scenarios(res)
    b = best_scenario(res)
    runs = [float(v) for v in sc[sc["label"] == b["label"]]["pct_of_ceiling"]]
    keep = 100 * KEEP_UP
    if min(runs) >= keep:
        verdict = f"it keeps up: at least {num(keep, '%')} of the ceiling in " + (
            "every run" if len(runs) > 1 else "its one run")
    elif b["pct_of_ceiling"] >= keep:
        verdict = f"on average it keeps up ({num(keep, '%')} of the ceiling), but not in every run"
    else:
        verdict = f"it falls short of {num(keep, '%')} of the ceiling"
    text = (f"The best configuration, **{b['label']}**, reached **{num(b['pct_of_ceiling'], '%')} of the ceiling** "
            f"({_range(runs, '%')}; {num(b['images_per_s'], 'images/s')} against "
            f"{num(_ceiling_ips(res), 'images/s')}, AU {pct(b['au'])}): {verdict}.")
    gap, parts = _gap(res, b)
    if gap > 0:
        big = max(parts, key=parts.get)
        text += (f" Of the {num(gap, 'ms')} per step it lost to the ceiling, "
                 + ", ".join(f"{k} {_signed(v)}" for k, v in parts.items()) + f"; the largest part is {big}.")
    st = scenario_stats(res)
    default = st[st["variant"] == "default"]
    if b["variant"] != "default" and not default.empty:
        d = default.loc[default["images_per_s"].idxmax()]
        gap_d, parts_d = _gap(res, d)
        big_d = max(parts_d, key=parts_d.get)
        text += (f" The best of the default recipe, {d['label']}, reached {num(d['pct_of_ceiling'], '%')}; the largest "
                 f"part of its {num(gap_d, 'ms')} gap was {big_d} ({_signed(parts_d[big_d])}).")
    return Finding("best_vs_ceiling", text, value=float(b["pct_of_ceiling"]), unit="%",
                   interval=(min(runs), max(runs)) if len(runs) > 1 else None)


def findings(res) -> list:
    """The chapter's key results (3-6), computed from a result."""
    out = [_finding_w0(res), _finding_formats_w0(res), _finding_one_worker(res), _finding_w4(res),
           _finding_load(res), _finding_best(res)]
    return [f for f in out if f is not None][:6]


# --------------------------------------------------------------------------- computed prose
def spread_notes(res) -> str:
    """A sentence for every scenario (and the ceiling) whose images/s spread by more than the
    threshold over its runs; else one sentence giving the largest spread."""
    from .book.findings import HIGH_SPREAD, cv, spread_note

    sc = scenarios(res)
    notes, worst = [], (0.0, "")
    for label, g in sc.groupby("label", sort=False):
        v = [float(x) for x in g["images_per_s"]]
        n = spread_note(label, v, "images/s")
        if n:
            notes.append(n)
        if len(v) > 1 and cv(v) > worst[0]:
            worst = (cv(v), label)
    c = [float(x) for x in res.table("ceiling")["images_per_s"]]
    n = spread_note("The ceiling", c, "images/s")
    if n:
        notes.append(n)
    if notes:
        return "\n".join(f"* {x}" for x in notes)
    if worst[1]:
        return (f"No scenario's images/s varied by more than {pct(HIGH_SPREAD)} (coefficient of variation) across "
                f"its runs; the largest spread was {pct(worst[0])}, for {worst[1]}.")
    return "Each scenario ran once: no spread to report."


def sizing(res) -> str:
    """How many workers the measured per-image cost predicts, against what the sweep shows: the
    first worker count at which the loader kept up, and what then kept the loop off the ceiling."""

    st = scenario_stats(res)
    r1 = _row(st, "imagefolder", 1)
    ceil = _ceiling_ips(res)
    ceil_compute = float(res.table("ceiling")["compute_ms"].mean())
    bsz = int(res.parameters.get("batch_size", 64))
    keep = 100 * KEEP_UP
    text = []
    warm = [_reader(res, "imagefolder", s) for s in ("read (warm)", "decode", "normalise")]
    if all(v is not None for v in warm):
        m = sum(warm)
        threads = int(res.metadata.get("main_threads", 1))
        text.append(f"Read warm, decoded and normalised in the main process ({threads} intra-op threads), one image "
                    f"costs {num(m, 'ms')}, which predicts {num(ceil * m / 1e3, '')} cores of such work for the "
                    f"ceiling's {num(ceil, 'images/s')}.")
    need = None
    if r1 is not None and pd.notna(r1.get("worker_busy_ms")):
        w = float(r1["worker_busy_ms"]) / bsz
        need = ceil * w / 1e3
        text.append(f"Inside the one worker of W=1 (cold cache, one thread, collation into shared memory) an image "
                    f"cost {num(w, 'ms')}, which predicts **{num(need, '')} workers**.")
        busy0 = _row(st, "imagefolder", 0)
        if busy0 is not None and pd.notna(busy0.get("worker_busy_ms")):
            w0 = float(busy0["worker_busy_ms"]) / bsz
            text.append(f"At W=0 the same stages cost {num(w0, 'ms')} per image in the main process: the worker pays "
                        f"{_pct_more(w, w0)}.")
    for fmt in ("imagefolder", "mds"):
        d = st[(st["format"] == fmt) & (st["variant"] == "default")].sort_values("workers")
        if d.empty:
            continue
        fed = d[d["wait_share"] < LOADER_KEEPS_UP]
        ok = d[d["pct_of_ceiling"] >= keep]
        if fed.empty:
            text.append(f"{LABELS[fmt]}: with none of the worker counts tried did the data wait fall below "
                        f"{pct(LOADER_KEEPS_UP)} of the step.")
            continue
        k = fed.iloc[0]
        first = int(k["workers"])
        s = f"{LABELS[fmt]}: the loader kept up (data wait below {pct(LOADER_KEEPS_UP)} of the step) from **W={first}**"
        if need is not None:
            s += ", " + _against_prediction(first, need, sorted(int(w) for w in d["workers"]))
        if ok.empty:
            worst = d.loc[d["compute_ms"].idxmax()]
            more = (f" and up to {num(worst['compute_ms'], 'ms')} (W={int(worst['workers'])})"
                    if int(worst["workers"]) != first else "")
            s += (f"; yet no worker count reached {num(keep, '%')} of the ceiling: compute per step was "
                  f"{num(k['compute_ms'], 'ms')} at W={first}{more}, against the ceiling's {num(ceil_compute, 'ms')}.")
        else:
            s += f"; it first reached {num(keep, '%')} of the ceiling at W={int(ok.iloc[0]['workers'])}."
        text.append(s)
    t = st[st["variant"] == "tuned"].sort_values("workers")
    tok = t[t["pct_of_ceiling"] >= keep]
    if not t.empty:
        text.append("The tuned recipe " + (
            f"reached {num(keep, '%')} of the ceiling with {tok.iloc[0]['label']}, its compute per step "
            f"{num(tok.iloc[0]['compute_ms'], 'ms')}." if not tok.empty else
            f"reached {num(keep, '%')} of the ceiling in none of its configurations (best "
            f"{num(t['pct_of_ceiling'].max(), '%')})."))
    return " ".join(text) if text else "The per-image costs were not recorded in this run."


def _against_prediction(first: int, need: float, tried: list[int]) -> str:
    """Where the first worker count that kept up stands against the predicted count, on the grid
    of counts actually tried (a count never run cannot be the first to keep up)."""
    below = [w for w in tried if need <= w < first]  # tried, at or above the prediction, and not keeping up
    if first < need:
        return f"below the prediction ({num(need, '')})"
    if not below:
        return f"the first count tried at or above the prediction ({num(need, '')})"
    return (f"although W={', '.join(str(w) for w in below)}, at or above the prediction ({num(need, '')}), "
            "did not keep up")


def _pct_more(a: float, b: float) -> str:

    return f"{pct(a / b - 1)} more" if a >= b else f"{pct(1 - a / b)} less"


def cpu_note(res) -> str:
    """What the CPU columns show in this run, in numbers."""
    st = scenario_stats(res)
    if "main_cores" not in st:
        return ("This older result records CPU use only as psutil's system-wide percentage, averaged over the whole "
                "scenario.")
    cores = int(res.metadata.get("cores", 0)) or None
    f = st[(st["format"] == "imagefolder") & (st["variant"] == "default")].sort_values("workers")
    if f.empty:
        return ""
    a, b = f.iloc[0], f.iloc[-1]
    return (f"At W={int(a['workers'])} the training process kept {num(a['main_cores'], '')} cores busy "
            f"({int(a['main_threads'])} intra-op threads) and the machine {num(a['cpu_busy_cores'], '')}"
            + (f" of its {cores}" if cores else "") +
            f"; at W={int(b['workers'])} the workers used {num(b['worker_cores'], '')} cores, the training process "
            f"{num(b['main_cores'], '')} and the machine {num(b['cpu_busy_cores'], '')}.")


def _kernel_share(res, label: str) -> float | None:
    """Share of the traced step in which the GPU ran kernels, for the trace of ``label``."""
    if "timeline" not in res.tables or res.table("timeline").empty:
        return None
    tl = res.table("timeline")
    g = tl[tl["label"] == label]
    if g.empty:
        return None
    step = float(g["step_ms"].iloc[0])
    busy = float(g[g["lane"] == "GPU: kernels"]["dur_ms"].sum())
    return busy / step if step > 0 and busy > 0 else None


def nvml_note(res) -> str:
    """NVML against AU for the best configuration, over the steady-state steps, with the share of
    the traced step in which the profiler saw kernels run (the measured check of AU)."""
    b = best_scenario(res)
    if pd.isna(b.get("gpu_util")):
        return "NVML is not available here (no NVIDIA GPU or no nvidia-ml-py): no GPU utilisation was sampled."
    n = b.get("util_samples")
    nv, au = float(b["gpu_util"]) / 100, float(b["au"])
    text = (f"Over the steady-state steps of the best configuration ({b['label']}), NVML read "
            f"**{num(b['gpu_util'], '%')}** on average" + (f" ({int(round(n))} samples per run)" if pd.notna(n) else
                                                           " (an older result: averaged over the whole scenario)")
            + f" while AU was {pct(au)}.")
    k = _kernel_share(res, b["label"])
    if k is not None:
        near = "closer to AU than to NVML's reading" if abs(k - au) < abs(k - nv) else "closer to NVML's reading"
        text += (f" The profiler's traced step of the same configuration shows kernels running for {pct(k)} of the "
                 f"step, {near}.")
    return text


def compute_growth_note(res) -> str:
    """Which scenarios' compute per step grew against the ceiling, how busy the CPU was in them,
    and whether the load sweep measured that load; what the tuned recipe changes at once, and
    which runs would separate its changes."""
    st = scenario_stats(res)
    sc = scenarios(res)
    c0 = [float(v) for v in res.table("ceiling")["compute_ms"]]
    m0 = float(np.mean(c0))
    cores = int(res.metadata.get("cores", 0)) or None
    of = f" of {cores}" if cores else ""
    grown = []
    for _, r in st[st["variant"] == "default"].iterrows():
        runs = [float(v) for v in sc[sc["label"] == r["label"]]["compute_ms"]]
        if runs and direction(runs, c0) > 0:
            grown.append(r)
    if not grown:
        return (f"No scenario of the default recipe computed a step measurably slower than the ceiling "
                f"({num(m0, 'ms')}).")
    has_cpu = "cpu_busy_cores" in st
    items = [f"{r['label']} {num(r['compute_ms'], 'ms')}"
             + (f" at {num(r['cpu_busy_cores'], '')} busy cores{of}" if has_cpu else "") for r in grown]
    text = [f"Compute per step grew beyond the ceiling's {num(m0, 'ms')} in: " + "; ".join(items) + "."]
    ls = load_stats(res)
    if not ls.empty and has_cpu:
        base_mode = "plain" if "plain" in set(ls["mode"]) else ls["mode"].iloc[0]
        base = ls[(ls["mode"] == base_mode) & (ls["busy"] > 0)].sort_values("busy")
        if not base.empty:
            light = base.iloc[0]
            top = max(float(r["cpu_busy_cores"]) for r in grown)
            level = f"{int(light['busy'])} busy processes, {num(light['cpu_busy_cores'], '')} busy cores{of}"
            if top < 0.9 * float(light["cpu_busy_cores"]):
                text.append(f"The load sweep's lightest load ({level}; compute {num(light['compute_ms'], 'ms')}) "
                            f"kept more cores busy than any of these scenarios (at most {num(top, '')}): the "
                            "sweep did not measure their load, so it does not show that a busy CPU made their "
                            "compute grow. In this run their growth has no isolated cause.")
            else:
                text.append(f"These scenarios kept as many cores busy as the load sweep's lightest load ({level}), "
                            f"at which compute per step was {num(light['compute_ms'], 'ms')}.")
    tuned = st[st["variant"] == "tuned"]
    if not tuned.empty:
        t = tuned.loc[tuned["images_per_s"].idxmax()]
        d = _row(st, t["format"], int(t["workers"]))
        remedy = str(res.parameters.get("tuned_remedy", "nice"))
        changes = ["uint8 batches", "normalisation on the GPU"]
        if "nice" in remedy:
            changes.append(f"workers at nice {WORKER_NICE}")
        if "reserve" in remedy:
            changes.append("workers kept off the reserved cores")
        s = f"The tuned recipe computed a step in {num(t['compute_ms'], 'ms')} ({t['label']}"
        s += f"; the default recipe {num(d['compute_ms'], 'ms')})" if d is not None else ")"
        if len(changes) > 2:
            missing = ["the default recipe with its workers treated the same way"]
            missing.append("the tuned recipe with untreated workers")
            s += (f", but it changes {len(changes)} things at once ({', '.join(changes)}), so which of them kept "
                  f"compute down is not isolated: the runs that would tell ({' and '.join(missing)}) were not part "
                  "of this run.")
        else:
            s += "; its workers were not treated, so only the batch format and where it is normalised differ."
        text.append(s)
    return " ".join(text)


def reference_runs(host: str | None = None) -> pd.DataFrame:
    """The best configuration's share of the ceiling in every committed run of this chapter on the
    reference host (the reference run and the runs under ``repeats/``): one row per run."""
    from .book import results

    host = host or results.DEFAULT_REFERENCE_HOST
    paths = [results.REFERENCE_DIR / host / f"{CHAPTER}.json"]
    rep = results.REFERENCE_DIR / host / "repeats"
    if rep.is_dir():
        paths += sorted(rep.glob(f"{CHAPTER}*.json"))
    rows = []
    for path in paths:
        if not path.is_file():
            continue
        r = results.Result.load(path)
        b = best_scenario(r)
        runs = [float(v) for v in scenarios(r).query("label == @b.label")["pct_of_ceiling"]]
        rows.append({"run": r.run_id or path.stem, "kind": "repeat" if path.parent == rep else
                     "reference run", "best configuration": b["label"], "% of ceiling (mean)": b["pct_of_ceiling"],
                     "min–max over its runs (%)": span(min(runs), max(runs)), "runs": len(runs),
                     f"every run ≥ {num(100 * KEEP_UP, '%')}": "yes" if min(runs) >= 100 * KEEP_UP else "no"})
    return pd.DataFrame(rows)


def ratio_note(res) -> str:
    """What the two format ratios of the chapter divide, so that they are never read as one."""
    st = scenario_stats(res)
    m, f = _row(st, "mds", 0), _row(st, "imagefolder", 0)
    if m is None or f is None:
        return ""
    w = float(f["DATALOADER_WAIT"] / m["DATALOADER_WAIT"])
    i = float(m["images_per_s"] / f["images_per_s"])
    return (f"The row *streaming ÷ ImageFolder, workers=0* is the source's **data-wait** ratio: ImageFolder's wait "
            f"divided by MDS's ({times(w)} here; above 1 when shards waited less). Key result 2 divides "
            f"**images/s**, MDS ÷ ImageFolder ({times(i)} here; above 1 when shards ran faster).")


def load_note(res) -> str:
    """Notes on modes of the load sweep that could not run here."""
    notes = res.metadata.get("load_notes") or {}
    return " ".join(f"{_mode_label(k).capitalize()}: {v}." for k, v in notes.items())


def timeline_note(res) -> str:
    """What the traced steps show: GPU busy time within the step, the wait, and for the forward
    pass how long the main thread took to issue it against how long the GPU took to run it."""

    if "timeline" not in res.tables or res.table("timeline").empty:
        return "No profiler trace was recorded in this run (profile = False)."
    tl = res.table("timeline")
    out = []
    key = "trace" if "trace" in tl else "label"
    for _, g in tl.groupby(key, sort=False):
        name = g["label"].iloc[0]
        step = float(g["step_ms"].iloc[0])
        busy = float(g[g["lane"] == "GPU: kernels"]["dur_ms"].sum())
        s = f"In the traced step of **{name}** ({num(step, 'ms')} under the profiler)"
        if busy > 0:
            s += f", the GPU ran kernels for {num(busy, 'ms')} ({pct(busy / step)} of the step)"
        cpu = g[(g["lane"] == "CPU: phases")].set_index("name")
        gpu = g[(g["lane"] == "GPU: phases")].set_index("name")
        if "DATALOADER_WAIT" in cpu.index:
            s += f"; the main thread waited {num(cpu.loc['DATALOADER_WAIT', 'dur_ms'], 'ms')} for the batch"
        if "FORWARD" in cpu.index and "FORWARD" in gpu.index and "busy_ms" in gpu:
            f_cpu, f_span, f_busy = (float(cpu.loc["FORWARD", "dur_ms"]), float(gpu.loc["FORWARD", "dur_ms"]),
                                     float(gpu.loc["FORWARD", "busy_ms"]))
            s += (f"; it took {num(f_cpu, 'ms')} to issue the forward pass, which kept the GPU busy for "
                  f"{num(f_busy, 'ms')} of the {num(f_span, 'ms')} it spanned there")
        out.append(s + ".")
    return " ".join(out)


def key_metrics(res) -> dict:
    """Metric name (as published) -> (mean, std) of this result."""
    st = scenario_stats(res)
    out = {}
    for fmt, label in (("imagefolder", "ImageFolder"), ("mds", "streaming (MDS)")):
        for w in (0, 4):
            r = _row(st, fmt, w)
            if r is not None:
                out[f"{label}, workers={w}: data wait"] = (r["DATALOADER_WAIT"], r.get("DATALOADER_WAIT_std"))
                out[f"{label}, workers={w}: images/s"] = (r["images_per_s"], r.get("images_per_s_std"))
    a, b = _row(st, "imagefolder", 0), _row(st, "mds", 0)
    if a is not None and b is not None:  # the source's ratio: MDS's data-wait speed-up over ImageFolder
        out["streaming ÷ ImageFolder, workers=0"] = (a["DATALOADER_WAIT"] / b["DATALOADER_WAIT"], None)
    r = _row(st, "imagefolder", 0)
    if r is not None:
        out["compute per step (forward+backward+optimizer)"] = (r["compute_ms"], r.get("compute_ms_std"))
        out["H2D per step"] = (r["H2D_TRANSFER"], r.get("H2D_TRANSFER_std"))
    return out


# --------------------------------------------------------------------------- tables for the notebook
def device_note(res) -> str:
    """Where this run ran, and what did not run here."""
    m = res.metadata
    text = f"Ran on **{m['device']}** with **{m['model']}**, {m.get('cores', '?')} logical cores."
    if m["device"] != "cuda":
        text += (" Without a GPU these are CPU timings of a small network: they exercise the same code; the GPU "
                 "numbers are the reference run's, in the comparison table below.")
    if m.get("mds_note"):
        text += f"\n\n**The MDS half did not run here:** {m['mds_note']}"
    return text


def scenario_table(res, part: str = "main") -> pd.DataFrame:
    """The scenarios as the chapter shows them, means over runs. ``part="main"``: the columns the
    prose uses (data wait, compute, step, AU, images/s, share of the ceiling with its min–max, the
    machine's busy cores); ``part="details"``: the rest (runs, copy, data-wait share, min–max of
    images/s, NVML, CPU of the training process and of the workers, page cache at the start)."""
    st = scenario_stats(res)

    def rng(c):
        if f"{c}_min" not in st:
            return ["—"] * len(st)
        return [span(a, b) for a, b in zip(st[f"{c}_min"], st[f"{c}_max"], strict=True)]

    if part == "main":
        out = pd.DataFrame({
            "scenario": st["label"], "data wait (ms)": st["DATALOADER_WAIT"], "compute (ms)": st["compute_ms"],
            "step (ms)": st["step_ms"], "AU (%)": 100 * st["au"], "images/s": st["images_per_s"],
            "% of ceiling": st["pct_of_ceiling"], "min–max (%)": rng("pct_of_ceiling")})
        if "cpu_busy_cores" in st:
            out["busy cores"] = st["cpu_busy_cores"]
        return out
    out = pd.DataFrame({
        "scenario": st["label"], "runs": st["runs"], "copy to GPU (ms)": st["H2D_TRANSFER"],
        "data-wait share (%)": 100 * st["wait_share"], "images/s min–max": rng("images_per_s"),
        "NVML GPU util (%)": st["gpu_util"]})
    if "main_cores" in st:
        out["training process (cores)"] = st["main_cores"]
        out["workers (cores)"] = st["worker_cores"]
    else:
        out["CPU util (%)"] = st["cpu_util"]
    out["cached at start (%)"] = 100 * st["resident_at_start"]
    return out


def reader_table(res) -> pd.DataFrame:
    """Per-sample costs of each reader (one process), one row per stage: for each format the
    median and p90 per sample (an older result without medians: the mean), and the KiB the disk
    delivered per sample on the cold read."""
    if "readers" not in res.tables or res.table("readers").empty:
        return pd.DataFrame()
    t = res.table("readers")
    centre = "median_ms" if "median_ms" in t and t["median_ms"].notna().any() else "ms"
    word = "median" if centre == "median_ms" else "mean"
    out = pd.DataFrame({"stage": list(dict.fromkeys(t["stage"]))})
    for fmt in dict.fromkeys(t["format"]):
        part = t[t["format"] == fmt].set_index("stage")
        name = LABELS.get(fmt, fmt)
        # a stage with no per-sample distribution (the iterator's overhead) shows its mean
        c = part[centre].where(part[centre].notna(), part["ms"]) if centre != "ms" else part["ms"]
        out[f"{name}: {word} (ms)"] = out["stage"].map(c)
        out[f"{name}: p90 (ms)"] = out["stage"].map(part["p90_ms"])
        if "disk_kb" in part:
            out[f"{name}: disk KiB per sample"] = out["stage"].map(part["disk_kb"])
    return out


def reader_note(res) -> str:
    """How to read the per-sample table: which statistic it shows, and where a few slow samples
    pull a mean above the p90 (an older result without medians)."""
    if "readers" not in res.tables or res.table("readers").empty:
        return ""
    t = res.table("readers")
    if "median_ms" in t and t["median_ms"].notna().any():
        return ("Medians and p90 over the samples; the iterator's overhead is a mean (the iterator's wall time per "
                "sample minus its stages).")
    skew = t[t["p90_ms"].notna() & (t["ms"] > t["p90_ms"])]
    text = ("This result records the mean and the p90 of each stage, not the median; the iterator's overhead is "
            "a mean (wall time per sample minus the stages).")
    if not skew.empty:
        parts = [f"{LABELS.get(r['format'], r['format'])} {r['stage']} (mean {num(r['ms'], 'ms')}, p90 "
                 f"{num(r['p90_ms'], 'ms')})" for _, r in skew.iterrows()]
        text += (" Where the mean lies above the p90, a few samples slower than nine in ten pulled it up: "
                 + "; ".join(parts) + ". Compare those rows by their p90.")
    return text


def stage_rows(res) -> pd.DataFrame:
    """Scenario means of the runs whose loader stages say most about W=0 against W=1."""
    st = scenario_stats(res)
    if "read_ms" not in st:
        return pd.DataFrame()
    keep = st["workers"].isin([0, 1]) | (st["variant"] == "tuned")
    return st[keep].reset_index(drop=True)


def takeaways(res) -> str:
    """The chapter's conclusions for a training job, each computed from this run."""
    st = scenario_stats(res)
    keep = 100 * KEEP_UP
    out = []
    for fmt in ("imagefolder", "mds"):
        d = st[(st["format"] == fmt) & (st["variant"] == "default")].sort_values("workers")
        if d.empty:
            continue
        ok = d[d["pct_of_ceiling"] >= keep]
        top = d.loc[d["pct_of_ceiling"].idxmax()]
        out.append(f"{LABELS[fmt]}, default recipe: " + (
            f"the fewest workers that reached {num(keep, '%')} of the ceiling here: **W={int(ok.iloc[0]['workers'])}**."
            if not ok.empty else f"no worker count tried reached {num(keep, '%')} of the ceiling (best "
                                 f"{num(top['pct_of_ceiling'], '%')}, at W={int(top['workers'])})."))
    wmax = int(st["workers"].max())
    a, b = _runs(res, "mds", wmax, "images_per_s"), _runs(res, "imagefolder", wmax, "images_per_s")
    if a and b:
        out.append(f"With {wmax} workers MDS was {compare(a, b)} ImageFolder.")
    tuned = st[st["variant"] == "tuned"]
    if not tuned.empty:
        t = tuned.loc[tuned["images_per_s"].idxmax()]
        remedy = res.parameters.get("tuned_remedy", "as recorded in the parameters")
        out.append(f"The tuned recipe (uint8 batches normalised on the GPU, workers: {remedy})"
                   f" reached {num(t['pct_of_ceiling'], '%')} of the ceiling at best ({t['label']}), with a copy of "
                   f"{num(t['H2D_TRANSFER'], 'ms')} per step.")
    return "\n".join(f"* {x}" for x in out)
