"""Chapter 3: the PyTorch DataLoader over small files vs over one shard.

What is measured: full epochs through ``torch.utils.data.DataLoader`` for three ways of
reading the same bytes:

``small_files``     one file per sample (``SmallFilesDataset``: ``open``/``read``/``close``
                    in ``__getitem__``), in shuffled order;
``shard``           one shard (``ShardDataset``: each process opens it once and ``pread``\\ s
                    the sample at its offset), in shuffled order;
``shard_in_order``  the same shard read in order (``shuffle=False``): the published
                    experiment's design.

for several ``num_workers``, cold (page cache purged and verified) and warm. Each epoch
records the time to the first batch (which includes starting the workers) and, apart from
it, the steady state: from the first batch to the last, first batch excluded. It also
records the main process's CPU time, so the chapter can tell when the main process, not
the workers, sets the pace.

Two side experiments explain the chapter's oddities: :func:`measure_transfer` (what moving
a batch from a worker to the main process costs, over batch sizes) and the cold-read
latency check of chapter 2 (:func:`datajourney.storage.measure_latency`) on this
chapter's shard.
"""
from __future__ import annotations

import os
import resource
import time
import warnings
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from . import datasets, pagecache
from .book import findings as fnd
from .book.findings import Finding, num, pct, times
from .params import ParameterError, boolean, choice, choices, int_list, memory, nonnegative_int, positive_int
from .storage import (CACHE_STATES, LATENCY_BLOCK, MB, _mean, _values, cold_label, measure_latency, residency_note,
                      set_cache_state)

CHAPTER = "03_dataloader"
KINDS = ("small_files", "shard", "shard_in_order")
LABELS = {"small_files": "small files, shuffled", "shard": "shard, shuffled",
          "shard_in_order": "shard, in order (published design)"}
#: What ``__getitem__`` returns: the sample's bytes as a uint8 tensor, or (as the source's
#: Datasets did) only its length as a one-element int64 tensor.
PAYLOADS = ("bytes", "length")
#: A main process busy at least this share of the steady state is the bottleneck: it
#: cannot take batches any faster, however many workers prepare them.
MAIN_BOUND_SHARE = 0.85
#: The hand-over check reads at most this many samples per epoch (enough batches at every size).
TRANSFER_MAX_SAMPLES = 16384
#: The published comparison's worker counts.
PUBLISHED_WORKERS = (0, 4)


def _sample(data: bytes, payload: str) -> torch.Tensor:
    if payload == "length":
        return torch.tensor(len(data), dtype=torch.long)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


class SmallFilesDataset(Dataset):
    """One file per sample, opened, read and closed on every access."""

    def __init__(self, files: Sequence[Path], sample_size: int, payload: str = "bytes"):
        self.files = [str(f) for f in files]
        self.sample_size = sample_size
        self.payload = choice("payload", payload, PAYLOADS)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb", buffering=0) as f:
            data = f.read()
        return _sample(data, self.payload)


class ShardDataset(Dataset):
    """Fixed-size samples in one shard; one file descriptor per process, ``os.pread`` per sample."""

    def __init__(self, shard: Path, sample_size: int, n_samples: int, payload: str = "bytes"):
        self.shard = str(shard)
        self.sample_size = sample_size
        self.n = n_samples
        self.payload = choice("payload", payload, PAYLOADS)
        self._fd = None
        self._pid = None

    def __len__(self):
        return self.n

    def _handle(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # a forked worker opens its own handle
            self._fd = os.open(self.shard, os.O_RDONLY)
            self._pid = os.getpid()
        return self._fd

    def __getitem__(self, i):
        return _sample(os.pread(self._handle(), self.sample_size, i * self.sample_size), self.payload)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fd"] = state["_pid"] = None
        return state

    def __del__(self):
        if getattr(self, "_fd", None) is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass


def make_dataset(ds: datasets.SmallFiles, kind: str, payload: str = "bytes") -> Dataset:
    choice("kind", kind, KINDS)
    if kind == "small_files":
        return SmallFilesDataset(ds.files, ds.file_size, payload)
    return ShardDataset(ds.shard, ds.file_size, ds.n_files, payload)


def shuffled(kind: str) -> bool:
    """Whether ``kind`` is read in shuffled order (all but the published in-order shard)."""
    return kind != "shard_in_order"


def read_set(ds: datasets.SmallFiles, kind: str) -> list[Path]:
    """The files an epoch of ``kind`` reads (what its cache state is set on)."""
    return ds.files if kind == "small_files" else [ds.shard]


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _runqueue_wait() -> float | None:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux schedstat), or None."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _note_startup_cpu(cpu, worker_id: int) -> None:
    """worker_init_fn: record the CPU seconds this worker used to start (before its first sample)."""
    cpu[worker_id] = time.process_time()


def _batch_bytes(batch: torch.Tensor) -> int:
    if batch.dtype == torch.uint8:
        return batch.numel()
    return int(batch.sum())   # a batch of lengths (payload "length")


def time_epoch(dataset: Dataset, *, batch_size: int, num_workers: int, seed: int, shuffle: bool = True) -> dict:
    """One epoch through a DataLoader, timed.

    Returns the seconds to the first batch (from creating the iterator: worker start-up
    included), the steady state (first batch to last, first batch excluded: its seconds,
    batches, samples and bytes) and the total; and CPU seconds: of the main process's main
    thread (the one that receives batches) and of the whole main process from the first batch
    to the end of the loop (``main_window_s``), and of the workers (collected when they exit at the end of the epoch); and the time
    the main thread spent waiting for a CPU in that window (Linux schedstat: on a
    busy machine a thread that wants to run is not always running).
    """
    import functools
    import multiprocessing

    g = torch.Generator().manual_seed(seed)
    startup = multiprocessing.Array("d", max(num_workers, 1), lock=False)
    with warnings.catch_warnings():   # more workers than cores is a setting this chapter measures on purpose
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        dl = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers, generator=g,
                        worker_init_fn=functools.partial(_note_startup_cpu, startup) if num_workers else None)
        children0 = _cpu(resource.RUSAGE_CHILDREN)
        proc0 = time.process_time()
        t0 = time.perf_counter()
        it = iter(dl)                  # starts the workers: inside the time to the first batch
    first = t_last = wait_first = None
    thread_first = proc_first = 0.0
    n_bytes = n_samples = batches = first_bytes = first_samples = 0
    for batch in it:
        t_last = time.perf_counter()
        b, n = _batch_bytes(batch), batch.shape[0]
        if first is None:
            first, thread_first, proc_first, wait_first = t_last - t0, time.thread_time(), time.process_time(), \
                _runqueue_wait()
            first_bytes, first_samples = b, n
        n_bytes += b
        n_samples += n
        batches += 1
    # the main thread's CPU window: from the first batch to the end of the loop
    t_end, thread_end, proc_end, wait_end = time.perf_counter(), time.thread_time(), time.process_time(), \
        _runqueue_wait()
    total = t_end - t0
    del it                                 # shuts the workers down and reaps them
    workers_cpu = _cpu(resource.RUSAGE_CHILDREN) - children0
    many = batches > 1
    return dict(seconds=total, first_batch_s=first, samples=n_samples, bytes=n_bytes, batches=batches,
                steady_s=(t_last - t0 - first) if many else None, steady_batches=batches - 1,
                steady_samples=n_samples - first_samples, steady_bytes=n_bytes - first_bytes,
                main_cpu_s=proc_end - proc0, main_window_s=(t_end - t0 - first) if many else None,
                main_thread_cpu_steady_s=(thread_end - thread_first) if many else None,
                main_cpu_steady_s=(proc_end - proc_first) if many else None,
                main_cpu_wait_steady_s=(wait_end - wait_first) if many and wait_end is not None else None,
                workers_cpu_s=workers_cpu if num_workers else 0.0,
                workers_startup_cpu_s=float(sum(startup[:num_workers])) if num_workers else 0.0)


def _derived(r: dict) -> dict:
    s = r["steady_s"]
    return dict(
        MBps=r["bytes"] / r["seconds"] / MB,
        samples_per_s=r["samples"] / r["seconds"],
        steady_MBps=(r["steady_bytes"] / s / MB) if s else None,
        batches_per_s=(r["steady_batches"] / s) if s else None,
        ms_per_batch=(s / r["steady_batches"] * 1e3) if s else None,
        main_busy=(r["main_thread_cpu_steady_s"] / r["main_window_s"]) if s else None,
        main_waiting_for_cpu=(r["main_cpu_wait_steady_s"] / r["main_window_s"])
        if s and r.get("main_cpu_wait_steady_s") is not None else None,
        first_batch_share=r["first_batch_s"] / r["seconds"],
    )


def sweep(ds: datasets.SmallFiles, *, workers: Sequence[int], cache_states: Sequence[str], runs: int,
          batch_size: int, method: str, seed: int, kinds: Sequence[str] = KINDS, progress=None) -> pd.DataFrame:
    """Every (kind, workers, cache state, run) combination; one row per timed epoch."""
    rows = []
    for state in cache_states:
        for run in range(runs):
            for w in workers:
                for kind in kinds:
                    info = set_cache_state(read_set(ds, kind), state, method)
                    r = time_epoch(make_dataset(ds, kind), batch_size=batch_size, num_workers=w, seed=seed + run,
                                   shuffle=shuffled(kind))
                    rows.append(dict(kind=kind, shuffled=shuffled(kind), workers=w, cache=state, run=run,
                                     batch_size=batch_size, sample_size=ds.file_size, **r, **_derived(r), **info))
                    if progress:
                        progress.update(1)
    return pd.DataFrame(rows)


def measure_transfer(ds: datasets.SmallFiles, *, batch_sizes: Sequence[int], runs: int, seed: int,
                     payloads: Sequence[str] = PAYLOADS, progress=None) -> pd.DataFrame:
    """What handing a batch from a worker to the main process costs.

    Warm, the shard read in order (the cheapest reads there are; at most
    :data:`TRANSFER_MAX_SAMPLES` samples per epoch), each batch size and
    payload with ``num_workers`` 0 and 1 back to back. With no worker the main process
    reads and collates every batch; with one worker the worker does exactly that and then
    hands the batch over (shared memory, a file descriptor through a socket, unpickling),
    while the main process only receives. The steady-state time per batch of the two,
    paired by run, gives the cost of the hand-over; dividing by the batch size shows
    whether it is paid per batch (it shrinks per sample as batches grow) or per byte.
    """
    residency = pagecache.warm([ds.shard]).fraction
    rows = []
    for run in range(runs):
        for bs in batch_sizes:
            for payload in payloads:
                for w in (0, 1):
                    data = make_dataset(ds, "shard_in_order", payload)
                    if len(data) > TRANSFER_MAX_SAMPLES:
                        data = torch.utils.data.Subset(data, range(TRANSFER_MAX_SAMPLES))
                    r = time_epoch(data, batch_size=bs, num_workers=w, seed=seed + run, shuffle=False)
                    d = _derived(r)
                    n = r["steady_batches"]
                    rows.append(dict(payload=payload, batch_size=bs, workers=w, run=run, **r, **d,
                                     main_cpu_ms_per_batch=(r["main_thread_cpu_steady_s"] / n * 1e3) if n else None,
                                     workers_cpu_ms_per_batch=((r["workers_cpu_s"] - r["workers_startup_cpu_s"])
                                                               / r["batches"] * 1e3) if w else None,
                                     resident_at_start=residency))
                    if progress:
                        progress.update(1)
    return pd.DataFrame(rows)


def transfer_cost(tr: pd.DataFrame) -> pd.DataFrame:
    """Per (payload, batch size): ms per batch with 0 and 1 worker and the difference, paired by
    run (mean, min, max), per batch and per sample; and the main process's CPU per batch at W=1."""
    rows = []
    for (payload, bs), g in tr.groupby(["payload", "batch_size"], sort=True):
        w0 = g[g["workers"] == 0].set_index("run")["ms_per_batch"]
        w1 = g[g["workers"] == 1].set_index("run")["ms_per_batch"]
        diff = (w1 - w0).dropna()
        if diff.empty:
            continue
        main1 = g[g["workers"] == 1]["main_cpu_ms_per_batch"].mean()
        main0 = g[g["workers"] == 0]["main_cpu_ms_per_batch"].mean()
        worker1 = g[g["workers"] == 1]["workers_cpu_ms_per_batch"].mean() if "workers_cpu_ms_per_batch" in g else None
        rows.append(dict(payload=payload, batch_size=int(bs), w0_ms_per_batch=w0.mean(), w1_ms_per_batch=w1.mean(),
                         extra_ms_per_batch=diff.mean(), extra_min=diff.min(), extra_max=diff.max(),
                         extra_us_per_sample=diff.mean() / bs * 1e3, extra_us_per_sample_min=diff.min() / bs * 1e3,
                         extra_us_per_sample_max=diff.max() / bs * 1e3, main_cpu_ms_per_batch_w1=main1,
                         main_cpu_ms_per_batch_w0=main0, worker_cpu_ms_per_batch_w1=worker1, n=len(diff)))
    return pd.DataFrame(rows)


def hand_over_fit(tc: pd.DataFrame, payload: str = "bytes") -> tuple[float, float] | None:
    """Least-squares line through the extra ms per batch over batch sizes: (ms per batch, µs per
    sample). None with fewer than two batch sizes."""
    import numpy as np

    part = tc[tc["payload"] == payload]
    if len(part) < 2:
        return None
    slope, intercept = np.polyfit(part["batch_size"].astype(float), part["extra_ms_per_batch"].astype(float), 1)
    return float(intercept), float(slope * 1e3)


def check_parameters(p: dict) -> dict:
    """Validate chapter 3's parameters before any work; return them normalised."""
    q = dict(p)
    q["n_files"] = positive_int("n_files", p["n_files"], maximum=datasets.MAX_FILES)
    q["file_size"] = positive_int("file_size", p["file_size"], maximum=1 << 30)
    q["batch_size"] = positive_int("batch_size", p["batch_size"], maximum=1 << 20)
    if q["batch_size"] > q["n_files"]:
        raise ParameterError("batch_size", q["batch_size"], f"at most n_files ({q['n_files']:,})")
    limit = max(64, 4 * (os.cpu_count() or 1))
    q["workers"] = int_list("workers", p["workers"], minimum=0, maximum=limit)
    q["runs"] = positive_int("runs", p["runs"], maximum=1000)
    q["cache_states"] = choices("cache_states", p["cache_states"], CACHE_STATES)
    q["purge_method"] = choice("purge_method", p["purge_method"], pagecache.METHODS)
    q["seed"] = nonnegative_int("seed", p.get("seed", 0), maximum=2**32 - 1)
    tb = p.get("transfer_batch_sizes", [])
    q["transfer_batch_sizes"] = int_list("transfer_batch_sizes", tb, minimum=1, maximum=q["n_files"]) if tb else []
    q["latency_reads"] = nonnegative_int("latency_reads", p.get("latency_reads", 0), maximum=1_000_000)
    if q["latency_reads"] and q["n_files"] * q["file_size"] < LATENCY_BLOCK:
        raise ParameterError("latency_reads", q["latency_reads"],
                             f"0 when the data set is smaller than {LATENCY_BLOCK:,} bytes (nothing to read)")
    if "is_reference_run" in p:
        q["is_reference_run"] = boolean("is_reference_run", p["is_reference_run"])

    biggest = max([q["batch_size"], *q["transfer_batch_sizes"]])
    # a batch lives in every worker's prefetch queue (2 per worker) and in the main process
    memory("batch_size", biggest, biggest * q["file_size"] * (2 * max(q["workers"]) + 4), what="the batches in flight")
    if q["purge_method"] == "drop_caches" and not pagecache.can_drop_caches():
        raise ParameterError("purge_method", "drop_caches", "'auto' or 'fadvise' (drop_caches needs root)")
    return q


def preflight(params: dict) -> tuple[dict, Path]:
    """All checks that must pass before any work: parameters, data directory, free disk."""
    p = check_parameters(params)
    plan = datasets.small_files_plan(p["n_files"], p["file_size"], p["seed"])
    return p, datasets.check_space(p.get("data_dir"), [plan])


def run(*, n_files: int, file_size: int, batch_size: int, workers, cache_states, runs: int,
        purge_method: str, seed: int = 0, transfer_batch_sizes=(), latency_reads: int = 0,
        data_dir=None, run_dir=None, progress: bool = True):
    """Run chapter 3's sweep and side experiments; save the result (tables + fingerprint) to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    params["transfer_batch_sizes"] = list(transfer_batch_sizes or [])
    from tqdm import tqdm

    from .book import results

    p, parent = preflight(params)
    res = results.start(CHAPTER, params, run_dir, parent)
    ds = datasets.small_files(parent, n_files=n_files, file_size=file_size, seed=seed, progress=progress)
    tbs = p["transfer_batch_sizes"]
    steps = (len(p["cache_states"]) * runs * len(p["workers"]) * len(KINDS) + runs * len(tbs) * len(PAYLOADS) * 2
             + (runs if p["latency_reads"] else 0))
    with tqdm(total=steps, desc="chapter 3 epochs", disable=not progress, mininterval=10) as bar:
        if p["latency_reads"]:
            lat, cdf = measure_latency(ds.shard, reads=p["latency_reads"], runs=runs, method=purge_method,
                                       seed=seed, progress=bar)
            res.add("latency", lat)
            res.add("latency_cdf", cdf)
        res.add("epochs", sweep(ds, workers=p["workers"], cache_states=p["cache_states"], runs=runs,
                                batch_size=batch_size, method=purge_method, seed=seed, progress=bar))
        if tbs:
            res.add("transfer", measure_transfer(ds, batch_sizes=tbs, runs=runs, seed=seed, progress=bar))
    res.metadata.update(dataset=ds.manifest, start_method=torch.multiprocessing.get_start_method(),
                        main_bound_share=MAIN_BOUND_SHARE, usable_cores=_usable_cores(),
                        workers_above_cores=[w for w in p["workers"] if w + 1 > _usable_cores()])
    res.save(results.resolve_run_dir(run_dir))
    return res


# --------------------------------------------------------------------------- reading a result
def _epochs(res) -> pd.DataFrame:
    e = res.table("epochs")
    if "steady_MBps" not in e:   # a result from before the steady state was recorded
        raise KeyError("the epochs table has no steady-state columns (result from an older version)")
    return e


def speedups(epochs: pd.DataFrame, value: str = "steady_MBps") -> pd.DataFrame:
    """Mean ``value`` (default: steady-state MB/s) of each kind per (cache, workers), and each
    shard's advantage over the small files."""
    if value not in epochs:
        value = "MBps"
    m = epochs.groupby(["cache", "workers", "kind"])[value].mean().unstack("kind").reset_index()
    m.columns.name = None
    for kind in ("shard", "shard_in_order"):
        if kind in m and "small_files" in m:
            m[f"{kind} ÷ small files"] = m[kind] / m["small_files"]
    return m


def key_metrics(res) -> dict:
    """The published comparison, like for like: cold, steady state (first batch excluded),
    the shard read in order vs the small files shuffled, at workers 0 and 4; metric -> (mean, std)."""
    e = _epochs(res)
    out = {}
    for w in PUBLISHED_WORKERS:
        sf = _values(e, "steady_MBps", cache="cold", workers=w, kind="small_files")
        sh = _values(e, "steady_MBps", cache="cold", workers=w, kind="shard_in_order")
        if not sf or not sh:
            continue
        out[f"small files, workers={w}"] = (_mean(sf), pd.Series(sf).std())
        out[f"shard, workers={w}"] = (_mean(sh), pd.Series(sh).std())
        out[f"shard ÷ small files, workers={w}"] = (_mean(sh) / _mean(sf), None)
    return out


# --------------------------------------------------------------------------- findings
def findings(res) -> list[Finding]:
    """The chapter's key results, computed from ``res`` (3 to 6 findings)."""
    try:
        e = _epochs(res)
    except KeyError:
        return _old_result_findings(res)
    out = [_published_finding(res, e, w) for w in PUBLISHED_WORKERS]
    if not any(out) and "cold" not in set(e["cache"]):   # warm only: the same comparison, warm, unpublished
        out = [_published_finding(res, e, w, cache="warm") for w in PUBLISHED_WORKERS]
    out = [f for f in out if f is not None]
    for f in (_shuffled_gap(res, e), _one_worker(res, e), _main_bound(res, e), _first_batch(res, e)):
        if f is not None and len(out) < 6:
            out.append(f)
    if len(out) < 3:
        out.append(_cold_vs_warm_finding(res, e))
    if len(out) < 3:
        out.append(Finding("residency", residency(res)))
    return out


def _old_result_findings(res) -> list[Finding]:
    """A result written before the steady state and the in-order shard were measured."""
    e = res.table("epochs")
    w = sorted(set(e["workers"]))
    sp = speedups(e, "MBps")
    cold = sp[sp["cache"] == "cold"].set_index("workers")
    out = [Finding("old_result", "This result predates the like-for-like design (no in-order shard, no steady "
                                 "state): its numbers are whole epochs of a shuffled shard, start-up included.")]
    for wk in (w[0], w[-1]):
        if wk in cold.index and "shard ÷ small files" in cold:
            r = cold.loc[wk, "shard ÷ small files"]
            out.append(Finding(f"epoch_ratio_w{wk}", f"Cold, `num_workers={wk}`, whole epochs: the shuffled shard "
                               f"ran at {times(r)} the throughput of the small files.", r, "×"))
    while len(out) < 3:
        out.append(Finding(f"not_measured_{len(out)}", "Not measured in this result."))
    return out


def _published_finding(res, e, w, cache: str = "cold") -> Finding | None:
    sf = _values(e, "steady_MBps", cache=cache, workers=w, kind="small_files")
    sh = _values(e, "steady_MBps", cache=cache, workers=w, kind="shard_in_order")
    if not sf or not sh:
        return None
    mid, lo, hi = fnd.ratio_interval(sh, sf)
    d = fnd.direction(sh, sf)
    label = cold_label(res) if cache == "cold" else cache
    text = (f"**`num_workers={w}`, {label}, steady state** (first batch excluded): the shard read in order, as the "
            f"source did, ran at **{num(_mean(sh), 'MB/s')}** and the shuffled small files at "
            f"**{num(_mean(sf), 'MB/s')}**: the shard was ")
    text += fnd.choose(d, f"**{times(mid)} faster**", f"**{times(1 / mid)} slower**", f"level with them: {times(mid)}")
    text += f" ({fnd.span(lo, hi, '×')} over the runs' extremes)."
    return Finding(f"published_w{w}", text, mid, "×",
                   published=f"shard ÷ small files, workers={w}" if cache == "cold" else None, interval=(lo, hi),
                   values=dict(shard=_mean(sh), small_files=_mean(sf), cache=cache))


def _shuffled_gap(res, e) -> Finding | None:
    ws = sorted(set(e["workers"]))
    w = ws[-1]
    sh = _values(e, "steady_MBps", cache="cold", workers=w, kind="shard")
    sf = _values(e, "steady_MBps", cache="cold", workers=w, kind="small_files")
    if not sh or not sf:
        return None
    mid, lo, hi = fnd.ratio_interval(sh, sf)
    d = fnd.direction(sh, sf)
    label = cold_label(res)
    text = (f"**Shuffled, both layouts, `num_workers={w}`** (the largest worker count measured), {label}: the shuffled "
            f"shard ran at {num(_mean(sh), 'MB/s')} and the small files at {num(_mean(sf), 'MB/s')} (shard ÷ small "
            f"files {times(mid)}, {fnd.span(lo, hi, '×')}). ")
    text += fnd.choose(d, "The gap narrows but stays open.", "The gap reverses: the small files were faster.",
                       "The two were level within the runs' spread.")
    sh0 = _values(e, "steady_MBps", cache="cold", workers=ws[0], kind="shard")
    sf0 = _values(e, "steady_MBps", cache="cold", workers=ws[0], kind="small_files")
    if sh0 and sf0 and ws[0] != w:
        text += f" With `num_workers={ws[0]}` the ratio was {times(_mean(sh0) / _mean(sf0))}."
    return Finding("shuffled_gap_max_workers", text, mid, "×", interval=(lo, hi), values=dict(workers=w, direction=d))


def _transfer_row(res, batch_size: int, payload: str = "bytes") -> pd.Series | None:
    tr = res.tables.get("transfer")
    if tr is None or tr.empty:
        return None
    tc = transfer_cost(tr)
    tc = tc[tc["payload"] == payload]
    if tc.empty:
        return None
    row = tc.iloc[(tc["batch_size"] - batch_size).abs().argsort().iloc[0]]
    return row


def _one_worker(res, e) -> Finding | None:
    bs = int(res.parameters.get("batch_size", 64))
    row = _transfer_row(res, bs)
    if row is None:
        return None
    tc = transfer_cost(res.table("transfer"))
    by = tc[tc["payload"] == "bytes"].sort_values("batch_size")
    extra, lo, hi = row["extra_ms_per_batch"], row["extra_min"], row["extra_max"]
    d = 1 if lo > 0 else -1 if hi < 0 else 0
    text = (f"**One worker vs none** (warm, shard in order, batch {int(row['batch_size'])}): "
            f"{num(row['w1_ms_per_batch'], 'ms')} per batch with one worker against {num(row['w0_ms_per_batch'], 'ms')} "
            f"with none. ")
    text += fnd.choose(d, f"Handing each batch from the worker to the main process added **{num(extra, 'ms')}** "
                          f"({fnd.span(lo, hi, 'ms')} over {int(row['n'])} paired runs); the main process "
                          f"spent {num(row['main_cpu_ms_per_batch_w1'], 'ms')} of CPU receiving each batch.",
                       f"One worker saved {num(-extra, 'ms')} per batch ({fnd.span(-hi, -lo, 'ms')}): the "
                       "hand-over cost less than the work it took off the main process.",
                       f"The difference ({num(extra, 'ms')}, {fnd.span(lo, hi, 'ms')}) is within the runs' "
                       "spread: one worker neither costs nor saves measurably.")
    if len(by) >= 2 and d > 0:
        a, b = by.iloc[0], by.iloc[-1]
        amort = fnd.direction(a["extra_us_per_sample"], b["extra_us_per_sample"], tol=0.25)
        text += (f" Per sample the extra fell from {num(a['extra_us_per_sample'], 'µs')} at batch "
                 f"{int(a['batch_size'])} to {num(b['extra_us_per_sample'], 'µs')} at batch {int(b['batch_size'])}"
                 if amort > 0 else
                 f" Per sample the extra went from {num(a['extra_us_per_sample'], 'µs')} at batch {int(a['batch_size'])} "
                 f"to {num(b['extra_us_per_sample'], 'µs')} at batch {int(b['batch_size'])}")
        text += fnd.choose(amort, ": a cost paid per batch, which larger batches amortise.",
                           ": larger batches cost more than in proportion to their size.",
                           ": about the same, a cost paid per sample (and, samples being of one size, per byte), "
                           "which larger batches do not amortise.")
        fit = hand_over_fit(tc)
        if fit is not None and len(by) >= 3:
            text += (f" A straight line through the {len(by)} batch sizes splits it into about {num(fit[0], 'ms')} per "
                     f"batch plus {num(fit[1], 'µs')} per sample")
            fit_len = hand_over_fit(tc, "length")
            text += (f"; with samples returned as their length (as the source's Datasets did), "
                     f"{num(fit_len[0], 'ms')} per batch plus {num(fit_len[1], 'µs')} per sample."
                     if fit_len is not None else ".")
    if d > 0:
        text += _payload_sentence(res, row)
    return Finding("one_worker", text, extra, "ms", interval=(lo, hi), values=dict(direction=d))


def _payload_sentence(res, row) -> str:
    """Bytes vs lengths: whether the hand-over's extra time follows the bytes or the batch, and the
    worker's CPU per batch against the main process doing the same reads alone."""
    bs = int(row["batch_size"])
    length = _transfer_row(res, bs, "length")
    text = ""
    wk, m0 = row.get("worker_cpu_ms_per_batch_w1"), row.get("main_cpu_ms_per_batch_w0")
    if wk is not None and pd.notna(wk) and m0 is not None and pd.notna(m0):
        text += (f" The worker spent {num(wk, 'ms')} of CPU per batch of {bs}, against {num(m0, 'ms')} for the main "
                 "process doing the same reads alone")
        if length is not None and pd.notna(length.get("worker_cpu_ms_per_batch_w1")):
            text += (f" ({num(length['worker_cpu_ms_per_batch_w1'], 'ms')} against "
                     f"{num(length['main_cpu_ms_per_batch_w0'], 'ms')} with lengths)")
        text += (": the worker does more work per batch than the reads alone."
                 if fnd.direction(wk, m0, tol=0.10) > 0 else
                 ": the worker did no more work, so the extra time is spent waiting on the hand-over, not computing.")
    if length is None or int(length["batch_size"]) != bs:
        return text
    # the two payloads' extra per batch, as ranges over the paired runs: overlapping ranges are level
    d = fnd.direction([row["extra_min"], row["extra_max"]], [length["extra_min"], length["extra_max"]], tol=0.10)
    text += (f" At batch {bs}, with lengths (no bytes to share), the hand-over added "
             f"{num(length['extra_ms_per_batch'], 'ms')} per batch ({fnd.span(length['extra_min'], length['extra_max'], 'ms')}), "
             f"against {num(row['extra_ms_per_batch'], 'ms')} with bytes: ")
    text += fnd.choose(
        d, "moving the bytes accounts for the difference, and the rest is paid per batch whatever it holds.",
        "more than with bytes, so the cost does not come from the bytes.",
        "about the same, so the cost is paid per batch whatever the batch holds, not for copying bytes into shared "
        "memory.")
    return text


def _worker_rates(e: pd.DataFrame) -> pd.DataFrame:
    """Mean batches/s and main-thread CPU per batch (ms) per (cache, workers, kind), workers only."""
    w = e[e["workers"] > 0].assign(cpu_ms=lambda x: x["main_busy"] / x["batches_per_s"] * 1e3)
    return w.groupby(["cache", "workers", "kind"], as_index=False).agg(
        rate=("batches_per_s", "mean"), busy=("main_busy", "mean"), cpu_ms=("cpu_ms", "mean"))


def _receive_rate(res) -> tuple[float, float] | None:
    """(main-process CPU ms per received batch in the hand-over check, the batches/s that alone allows)."""
    row = _transfer_row(res, int(res.parameters.get("batch_size", 64)))
    if row is None or not row["main_cpu_ms_per_batch_w1"] or not row["main_cpu_ms_per_batch_w1"] > 0:
        return None
    return float(row["main_cpu_ms_per_batch_w1"]), 1e3 / float(row["main_cpu_ms_per_batch_w1"])


def _ceiling_sentence(res, e) -> str:
    """The hand-over check's receive cost as a rate, called a ceiling only when every rate measured
    with workers lies below it."""
    rr = _receive_rate(res)
    if rr is None:
        return ""
    cost, rate = rr
    text = (f" Receiving one batch from a worker cost the main process {num(cost, 'ms')} of CPU in the hand-over "
            f"check (warm, one worker), which alone would allow about {num(rate)} batches/s")
    wr = _worker_rates(e)
    if wr.empty:
        return text + "."
    top = wr.loc[wr["rate"].idxmax()]
    where = f"{LABELS[top['kind']].split(' (')[0]}, {cold_label(res) if top['cache'] == 'cold' else top['cache']}, " \
            f"`num_workers={int(top['workers'])}`"
    if top["rate"] < rate:
        return text + (f": a ceiling, above every rate the sweep measured with workers (at most {num(top['rate'])} "
                       f"batches/s, {where}).")
    return text + (f". It is not a ceiling here: the sweep measured up to {num(top['rate'])} batches/s with workers "
                   f"({where}), where the main thread used {num(top['cpu_ms'], 'ms')} of CPU per batch.")


#: Rates within this (relative) of a layout's best rate with workers belong to its plateau.
PLATEAU_TOL = 0.10


def plateau_note(res) -> str:
    """Where more workers stopped raising the rate (warm if measured, else cold), compared with the
    rate the main process's cost of receiving a batch would allow; no claim of what sets the pace
    beyond what the numbers show."""
    e = _epochs(res)
    wr = _worker_rates(e)
    if wr.empty or wr["workers"].nunique() < 3:
        return ""
    cache = "warm" if "warm" in set(wr["cache"]) else "cold"
    part = wr[wr["cache"] == cache]
    label = cold_label(res) if cache == "cold" else cache
    plateau, rising = [], []
    for k, g in part.groupby("kind", sort=False):
        g = g.sort_values("workers")
        best = g.loc[g["rate"].idxmax()]
        if best["workers"] == g["workers"].max():
            rising.append(LABELS[k])
            continue
        plateau.append(g[(g["workers"] >= best["workers"]) & (g["rate"] >= (1 - PLATEAU_TOL) * best["rate"])])
    if not plateau:
        return (f"{label.capitalize()}, the rate of every layout still rose up to the largest worker count measured: "
                "no plateau to explain.")
    p = pd.concat(plateau)
    lo, hi = p["rate"].min(), p["rate"].max()
    ws = sorted(set(p["workers"]))
    text = (f"{label.capitalize()}, more workers stopped raising the rate: from `num_workers={ws[0]}` to "
            f"`num_workers={ws[-1]}` the layouts ran at {fnd.span(lo, hi)} batches/s, with the main thread on a CPU "
            f"{fnd.span(100 * p['busy'].min(), 100 * p['busy'].max(), '%')} of the time "
            f"({fnd.span(p['cpu_ms'].min(), p['cpu_ms'].max(), 'ms')} of CPU per batch)")
    if rising:
        text += f" ({', '.join(rising)} still rose up to the largest count)"
    text += ". "
    rr = _receive_rate(res)
    if rr is not None:
        cost, rate = rr
        text += (f"That plateau is {fnd.span(100 * lo / rate, 100 * hi / rate, '%')} of the {num(rate)} batches/s "
                 f"that the hand-over check's {num(cost, 'ms')} of main-process CPU per received batch would allow")
        if hi > (1 + PLATEAU_TOL) * rate:
            text += ": above it, so the check's receive cost does not bound the sweep. "
        elif lo >= (1 - PLATEAU_TOL) * rate:
            text += f": within {pct(PLATEAU_TOL)} of it, so the plateau matches the main process's cost of receiving batches. "
        else:
            text += ": below it. "
    if p["busy"].max() < MAIN_BOUND_SHARE:
        text += ("The main thread was not on a CPU all the time, so its CPU time alone does not set the plateau, and "
                 "more workers did not raise it either; this run does not show what does.")
    elif p["busy"].min() >= MAIN_BOUND_SHARE:
        text += (f"The main thread was on a CPU at least {pct(MAIN_BOUND_SHARE)} of the time throughout: receiving "
                 "batches sets the pace there.")
    return text


def _main_bound(res, e) -> Finding | None:
    w = max(e["workers"])
    if w == 0:
        return None
    part = e[(e["workers"] == w) & (e["cache"] == "cold")]
    if part.empty:
        part = e[e["workers"] == w]
    cache = part["cache"].iloc[0]
    busy = {k: _values(part, "main_busy", kind=k) for k in KINDS}
    waiting = {k: _values(part, "main_waiting_for_cpu", kind=k) for k in KINDS}
    bps = {k: _values(part, "batches_per_s", kind=k) for k in KINDS}
    busy = {k: v for k, v in busy.items() if v}
    if not busy:
        return None
    # wanting the CPU = on it, or runnable and waiting for it (a machine with too few cores)
    demand = {k: _mean(v) + (_mean(waiting[k]) if waiting.get(k) else 0.0) for k, v in busy.items()}
    bound = [k for k in busy if demand[k] >= MAIN_BOUND_SHARE]
    free = [k for k in busy if k not in bound]
    label = cold_label(res) if cache == "cold" else cache

    def part_text(k):
        t = f"{LABELS[k]}: on a CPU {pct(_mean(busy[k]))}"
        if waiting.get(k):
            t += f", waiting for one {pct(_mean(waiting[k]))}"
        return t + f" ({num(_mean(bps[k]))} batches/s)"

    text = (f"**The main process at `num_workers={w}`** ({label}), share of the steady state its receiving thread "
            "spent: " + "; ".join(part_text(k) for k in busy) + ". ")
    if any(waiting.get(k) and _mean(waiting[k]) >= 0.1 for k in busy):
        text += "Waiting for a CPU means this machine had fewer free cores than runnable processes. "
    if not free:
        text += (f"Wanting the CPU at least {pct(MAIN_BOUND_SHARE)} of the time for every layout, it is the "
                 "bottleneck: it cannot take batches faster, however many workers prepare them, so each layout runs "
                 "at the rate the main process receives batches")
        sh = _values(part, "steady_MBps", kind="shard")
        sf = _values(part, "steady_MBps", kind="small_files")
        if sh and sf:
            d = fnd.direction(sh, sf)
            text += fnd.choose(d, f"; the shuffled shard still ran {fnd.compare(sh, sf)} the small files.",
                               f"; the small files even ran {fnd.compare(sf, sh)} the shuffled shard.",
                               ", which is why the shuffled shard and the small files converge.")
        else:
            text += "."
    elif not bound:
        text += (f"Wanting the CPU less than {pct(MAIN_BOUND_SHARE)} of the time for every layout, it had time to "
                 "spare: its CPU time was not the limit.")
    else:
        text += (f"It is the bottleneck (wanting the CPU at least {pct(MAIN_BOUND_SHARE)} of the time) for "
                 + ", ".join(LABELS[k] for k in bound) + "; for " + ", ".join(LABELS[k] for k in free)
                 + " it had time to spare.")
    text += _ceiling_sentence(res, e)
    share = demand["shard"] if "shard" in demand else min(demand.values())
    return Finding("main_process", text, 100 * share, "%", values=dict(bound=bound, workers=w))


def _first_batch(res, e) -> Finding | None:
    w = max(e["workers"])
    part = e[(e["workers"] == w) & (e["cache"] == "cold")]
    if part.empty:
        part = e[e["workers"] == w]
    if part.empty:
        return None
    fb = part["first_batch_s"] * 1e3
    share = part["first_batch_share"]
    w0 = e[(e["workers"] == min(e["workers"])) & (e["cache"] == part["cache"].iloc[0])]["first_batch_s"] * 1e3
    cache = part["cache"].iloc[0]
    text = (f"**Time to the first batch** with `num_workers={w}` ({cold_label(res) if cache == 'cold' else cache}): "
            f"**{num(fb.mean(), 'ms')}** ({fnd.span(fb.min(), fb.max(), 'ms')}), "
            f"{pct(share.mean())} of the whole epoch on average (up to {pct(share.max())})")
    if w != min(e["workers"]) and len(w0):
        text += f", against {num(w0.mean(), 'ms')} with `num_workers={min(e['workers'])}`"
    text += ". The steady-state figures above leave it out; whole-epoch figures include it."
    return Finding("first_batch", text, fb.mean(), "ms", interval=(fb.min(), fb.max()), values=dict(cache=cache))


def _cold_vs_warm_finding(res, e) -> Finding:
    text = cold_vs_warm_note(res)
    return Finding("cold_vs_warm", text or "Only one cache state was measured.")


# --------------------------------------------------------------------------- computed notes
def _text(f: Finding | None, default: str = "") -> str:
    return f.text if f is not None else default


def hand_over_note(res) -> str:
    """The hand-over check's result (one worker vs none, warm), or why it is missing."""
    return _text(_one_worker(res, _epochs(res)), "The hand-over check was switched off (`transfer_batch_sizes = []`).")


def main_process_table(res) -> pd.DataFrame:
    """Per (cache, workers, kind): the main thread's share of the steady state on a CPU, waiting for
    one, and both together (wanting the CPU), with batches per second; means over the epochs."""
    e = _epochs(res).copy()
    if "main_waiting_for_cpu" not in e:
        e["main_waiting_for_cpu"] = float("nan")
    e["wanting"] = e["main_busy"] + e["main_waiting_for_cpu"].fillna(0.0)
    g = e.groupby(["cache", "workers", "kind"], sort=False)
    out = g.agg(on_cpu=("main_busy", "mean"), waiting_for_cpu=("main_waiting_for_cpu", "mean"),
                wanting=("wanting", "mean"), wanting_min=("wanting", "min"), wanting_max=("wanting", "max"),
                batches_per_s=("batches_per_s", "mean"), n=("run", "size")).reset_index()
    return out


def main_process_note(res) -> str:
    """How busy the main process was at the most workers, and whether that makes it the bottleneck."""
    return _text(_main_bound(res, _epochs(res)), "The sweep had no run with workers.")


def first_batch_note(res) -> str:
    """Time to the first batch at the most workers, and its share of an epoch."""
    f = _first_batch(res, _epochs(res))
    skip = f.values.get("cache") if f is not None else None
    return " ".join(t for t in (_text(f), startup_note(res, skip)) if t)


def chapter2_recap(run_dir, reference_host: str | None = None) -> str:
    """What chapter 2 measured: this run's result when the run holds one, else the reference run's."""
    from . import storage
    from .book import results

    path = Path(results.resolve_run_dir(run_dir)) / f"{storage.CHAPTER}.json"
    r, whose = None, ""
    if path.exists():
        r, whose = results.Result.load(path), "on this machine, in this run"
    else:
        r = results.load_reference(storage.CHAPTER, reference_host)
        whose = f"on the reference host ({r.run_id})" if r is not None else ""
    if r is None:
        return "Chapter 2 has not been run here, and no reference result of it is committed."
    try:
        f = storage._cold_gap(r)
    except (KeyError, ValueError, IndexError):
        return ""
    if f.value is None:
        return ""
    return (f"Chapter 2 measured, {whose}: shuffled small files vs one shard read sequentially, "
            f"{storage.cold_label(r)}, plain Python: sequential ÷ random = **{f.headline}**.")


def one_worker_note(res) -> str:
    """Where one worker was slower than none in the sweep, per kind and cache state."""
    e = _epochs(res)
    if not {0, 1} <= set(e["workers"]):
        return "The sweep did not include both `num_workers=0` and `num_workers=1`."
    lines = []
    for cache in dict.fromkeys(e["cache"]):
        for k in KINDS:
            a, b = _values(e, "steady_MBps", cache=cache, workers=1, kind=k), _values(e, "steady_MBps", cache=cache,
                                                                                  workers=0, kind=k)
            if a and b:
                lines.append(f"{LABELS[k]}, {cache}: one worker {fnd.compare(a, b)} none "
                             f"({num(_mean(a), 'MB/s')} vs {num(_mean(b), 'MB/s')})")
    return ("In the sweep (steady state): " + "; ".join(lines) + ".") if lines else ""


def cold_vs_warm_note(res) -> str:
    """How much faster warm epochs ran than cold ones, per kind, at the fewest and the most workers."""
    e = _epochs(res)
    if set(e["cache"]) != {"cold", "warm"}:
        return ""
    parts, ratios = [], []
    for w in sorted({min(e["workers"]), max(e["workers"])}):
        for k in KINDS:
            c, h = _values(e, "steady_MBps", cache="cold", workers=w, kind=k), _values(e, "steady_MBps", cache="warm",
                                                                                   workers=w, kind=k)
            if c and h:
                r = _mean(h) / _mean(c)
                ratios.append(r)
                parts.append(f"{LABELS[k]}, `num_workers={w}`: {times(r)}")
    if not ratios:
        return ""
    label = cold_label(res)
    text = f"Warm ÷ {label} steady-state throughput: " + "; ".join(parts) + ". "
    w0 = min(e["workers"])
    sh = _values(e, "steady_MBps", cache="warm", workers=w0, kind="shard_in_order")
    sf = _values(e, "steady_MBps", cache="warm", workers=w0, kind="small_files")
    if sh and sf:
        from .storage import NEAR_ONE

        mid, lo, hi = fnd.ratio_interval(sh, sf)
        near = fnd.direction(sh, sf) == 0 or 1 / NEAR_ONE <= mid <= NEAR_ONE
        text += (f"Warm, with `num_workers={w0}`, the in-order shard ran at {times(mid)} ({fnd.span(lo, hi, '×')}) the "
                 "small files' throughput; the source reports that warm the difference \u201ccollapses to near 1x\u201d: "
                 + ("here it does. " if near else "here it does not. "))
    hi, lo = max(ratios), min(ratios)
    text += (f"The cache state changes throughput by between {times(lo)} and {times(hi)} here"
             + (", an order of magnitude or more in the largest case." if hi >= 10 else
                ", less than an order of magnitude." if hi >= 2 else ": little, in every configuration."))
    return text


def workers_gain_note(res) -> str:
    """How much each layout gained from workers: steady MB/s at 4 workers (or the most) over none, cold."""
    e = _epochs(res)
    ws = sorted(set(e["workers"]))
    if 0 not in ws or len(ws) < 2:
        return ""
    w = 4 if 4 in ws else ws[-1]
    cache = "cold" if "cold" in set(e["cache"]) else e["cache"].iloc[0]
    parts = []
    for k in KINDS:
        a, b = _values(e, "steady_MBps", cache=cache, workers=w, kind=k), _values(e, "steady_MBps", cache=cache, workers=0,
                                                                              kind=k)
        if a and b:
            mid, lo, hi = fnd.ratio_interval(a, b)
            parts.append(f"{LABELS[k]} {times(mid)} ({fnd.span(lo, hi, '×')})")
    if not parts:
        return ""
    label = cold_label(res) if cache == "cold" else cache
    return (f"What {w} workers bought over none ({label}, steady state, MB/s with {w} ÷ MB/s with none): "
            + "; ".join(parts) + ".")


def published_note(res) -> str:
    """This run's like-for-like ratios against the published ones, and what still differs."""
    from . import storage
    from .book import published

    out = []
    for w in PUBLISHED_WORKERS:
        fig = published.figure(CHAPTER, f"shard ÷ small files, workers={w}")
        try:
            f = _published_finding(res, _epochs(res), w)
        except KeyError:
            f = None
        if fig is None or f is None:
            continue
        lo, hi = f.interval
        inside = lo <= fig.mean <= hi
        out.append(f"`num_workers={w}`: published {fig.text}, this run {f.headline}"
                   + (" (the published figure lies within this run's range)" if inside else
                      f" ({times(f.value / fig.mean)} the published figure)"))
    if not out:
        return ""
    text = "Shard ÷ small files, like for like: " + "; ".join(out) + "."
    if storage.guest_cold(res):
        text += (" This run's cold reads were **guest-cold** (latency check below), the published ones came from a "
                 "physical drive.")
    return text


def startup_note(res, skip: str | None = None) -> str:
    """Start-up and the first batch as a share of an epoch at the most workers, per cache state
    (leaving out ``skip``, the state the first-batch finding already states)."""
    e = _epochs(res)
    w = max(e["workers"])
    parts = []
    for cache in dict.fromkeys(e["cache"]):
        part = e[(e["workers"] == w) & (e["cache"] == cache)]
        if part.empty or cache == skip:
            continue
        label = cold_label(res) if cache == "cold" else cache
        parts.append(f"{label}, {pct(part['first_batch_share'].mean())} of an epoch on average (up to "
                     f"{pct(part['first_batch_share'].max())})")
    if not parts:
        return ""
    return (f"With `num_workers={w}`, start-up and the first batch took: " + "; ".join(parts)
            + ". This is why the steady state is reported apart from it.")


def spread_notes(res) -> str:
    """One sentence naming every configuration whose steady-state MB/s spread by more than
    :data:`findings.HIGH_SPREAD` (coefficient of variation)."""
    from .storage import spread_summary

    return spread_summary(_epochs(res), ["cache", "workers", "kind"],
                          lambda c, w, k: f"{LABELS[k]}, {cold_label(res) if c == 'cold' else c}, `num_workers={w}`",
                          col="steady_MBps")


def residency(res) -> str:
    """Whether cold epochs started cold and warm ones warm (the cold state named as the latency check says)."""
    return residency_note(res.table("epochs"), "epochs", cold=cold_label(res))



def in_order_note(res) -> str:
    """Where the in-order shard read slower with workers than without (cold): the measured numbers,
    stated as an observation this run does not explain, with the hypothesis it does not test."""
    e = _epochs(res)
    cache = "cold" if "cold" in set(e["cache"]) else None
    ws = sorted(set(e["workers"]))
    if cache is None or 0 not in ws or len(ws) < 2:
        return ""
    none = _values(e, "steady_MBps", cache=cache, workers=0, kind="shard_in_order")
    if not none:
        return ""
    per = {w: _values(e, "steady_MBps", cache=cache, workers=w, kind="shard_in_order") for w in ws if w}
    per = {w: v for w, v in per.items() if v}
    slower = [w for w, v in per.items() if fnd.direction(v, none) < 0]
    if not slower:
        return ""
    label = cold_label(res)
    every = len(slower) == len(per)
    text = (f"Read {label}, the in-order shard ran at **{num(_mean(none), 'MB/s')}** with no workers and at "
            + ", ".join(f"{num(_mean(v), 'MB/s', with_unit=False)} (`num_workers={w}`)" for w, v in per.items())
            + " MB/s with workers: "
            + ("slower with every worker count measured" if every else
               "slower with `num_workers=" + "`, `".join(str(w) for w in slower) + "`")
            + ", although workers read several batches at once. This run does not explain it. A hypothesis it does "
            "not test: each worker opens the shard on its own and reads every n-th batch, so the kernel's readahead "
            "sees several interleaved streams instead of one sequential one.")
    return text


def throughput_table(res) -> pd.DataFrame:
    """Mean steady-state MB/s of each layout per (cache, workers), and each shard's ratio to the
    small files; readable headers and the cold label."""
    sp = speedups(_epochs(res))
    sp["cache"] = sp["cache"].map(lambda c: cold_label(res) if c == "cold" else c)
    names = {k: f"{v} (MB/s)" for k, v in LABELS.items()}
    names.update({"shard ÷ small files": "shard, shuffled ÷ small files (×)",
                  "shard_in_order ÷ small files": "shard, in order ÷ small files (×)",
                  "workers": "num_workers"})
    cols = ["cache", "workers", *[k for k in KINDS if k in sp], *[c for c in sp.columns if "÷" in c]]
    return sp[cols].rename(columns=names)


def hand_over_table(res) -> pd.DataFrame:
    """The hand-over check as the prose reads it: ms per batch with no worker and with one, the
    extra (mean and min–max over paired runs), and CPU per batch of the main process alone, the
    worker, and the main process receiving."""
    tc = transfer_cost(res.table("transfer"))
    return pd.DataFrame({
        "payload": tc["payload"].map({"bytes": "bytes", "length": "length only"}),
        "batch": tc["batch_size"],
        "no worker (ms)": tc["w0_ms_per_batch"],
        "one worker (ms)": tc["w1_ms_per_batch"],
        "extra (ms)": tc["extra_ms_per_batch"],
        "extra, min–max (ms)": [fnd.span(a, b) for a, b in zip(tc["extra_min"], tc["extra_max"])],
        "CPU, main alone (ms)": tc["main_cpu_ms_per_batch_w0"],
        "CPU, worker (ms)": tc["worker_cpu_ms_per_batch_w1"],
        "CPU, main receiving (ms)": tc["main_cpu_ms_per_batch_w1"],
    })


def main_process_display(res) -> pd.DataFrame:
    """:func:`main_process_table` as the chapter shows it: percent, readable names, no empty columns."""
    mp = main_process_table(res)
    out = pd.DataFrame({
        "cache": mp["cache"].map(lambda c: cold_label(res) if c == "cold" else c),
        "num_workers": mp["workers"],
        "layout": mp["kind"].map(LABELS),
        "on a CPU (%)": 100 * mp["on_cpu"],
        "waiting for one (%)": 100 * mp["waiting_for_cpu"],
        "batches/s": mp["batches_per_s"],
    })
    return out.dropna(axis=1, how="all")
