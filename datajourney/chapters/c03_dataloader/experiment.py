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

Side experiments explain the chapter's oddities: :func:`measure_transfer` (what moving
a batch from a worker to the main process costs, over batch sizes), :func:`measure_handover_modes`
(the plateau with workers: the same warm epoch with three ways of handing a batch over), the
device's own counters during every cold epoch (``/proc/diskstats``: requests, merges, average
request size, so a cold epoch shows how its reads reached the device), and the cold-read
latency check of chapter 2 (:func:`datajourney.toolkit.reads.measure_latency`) on this
chapter's shard.
"""
from __future__ import annotations

import os
import resource
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from datajourney.chapters.c03_dataloader.params import KINDS, MAIN_BOUND_SHARE, Params
from datajourney.core import timing
from datajourney.core.params import ParameterError, choice, memory, run_options
from datajourney.core.units import MB
from datajourney.toolkit import datasets, pagecache
from datajourney.toolkit.diskstats import DiskStats, block_device
from datajourney.toolkit.reads import LATENCY_BLOCK, measure_latency, set_cache_state

#: What ``__getitem__`` returns: the sample's bytes as a uint8 tensor, or (as the source's
#: Datasets did) only its length as a one-element int64 tensor.
PAYLOADS = ("bytes", "length")
#: The hand-over check reads at most this many samples per epoch (enough batches at every size).
TRANSFER_MAX_SAMPLES = 16384
#: Ways of handing a batch from a worker to the main process (:func:`measure_handover_modes`):
#: PyTorch's default (the batch tensor in shared memory, its file descriptor passed through a
#: socket: the main process asks the worker for it), shared memory named by a file in /dev/shm
#: (``sharing_strategy="file_system"``: no descriptor to ask for), and no shared memory at all
#: (the samples as ``bytes``, pickled through the queue's pipe).
HANDOVER_MODES = ("file descriptor", "file name", "bytes through the pipe")


def _sample(data: bytes, payload: str) -> torch.Tensor | bytes:
    if payload == "raw":
        return data
    if payload == "length":
        return torch.tensor(len(data), dtype=torch.long)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


class SmallFilesDataset(Dataset):
    """One file per sample, opened, read and closed on every access."""

    def __init__(self, files: Sequence[Path], sample_size: int, payload: str = "bytes"):
        self.files = [str(f) for f in files]
        self.sample_size = sample_size
        self.payload = choice("payload", payload, (*PAYLOADS, "raw"))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb", buffering=0) as f:
            data = f.read()
        return _sample(data, self.payload)


class ShardDataset(Dataset):
    """Fixed-size samples in one shard (or, with ``offsets``, sample ``i`` at ``offsets[i]:offsets[i + 1]``);
    one file descriptor per process, ``os.pread`` per sample."""

    def __init__(self, shard: Path, sample_size: int, n_samples: int, payload: str = "bytes", offsets=None):
        self.shard = str(shard)
        self.sample_size = sample_size
        self.n = n_samples
        self.payload = choice("payload", payload, (*PAYLOADS, "raw"))
        self.offsets = offsets
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
        if self.offsets is not None:
            a, b = int(self.offsets[i]), int(self.offsets[i + 1])
            return _sample(os.pread(self._handle(), b - a, a), self.payload)
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
    return ShardDataset(ds.shard, ds.file_size, ds.n_files, payload, getattr(ds, "offsets", None))


def collate_concat(samples: list) -> tuple:
    """Byte samples of different sizes (a reader's own files) as one flat uint8 tensor and their count: one
    shared-memory block per batch, as the stacked batch of equal samples."""
    return torch.cat(samples), torch.tensor(len(samples))


def collate_for(ds, payload: str = "bytes"):
    """The collate function of a batch of ``ds``'s samples: the default, or :func:`collate_concat` for samples
    of different sizes as bytes."""
    return collate_concat if getattr(ds, "varying", False) and payload == "bytes" else None


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


def collate_raw(samples: list) -> list:
    """A batch of ``bytes`` samples left as a list: pickled through the queue's pipe, no shared memory."""
    return list(samples)


def _batch_len(batch) -> int:
    if isinstance(batch, tuple):   # collate_concat: (bytes, count)
        return int(batch[1])
    return len(batch) if isinstance(batch, list) else batch.shape[0]


def _batch_bytes(batch) -> int:
    if isinstance(batch, tuple):
        return batch[0].numel()
    if isinstance(batch, list):
        return sum(len(x) for x in batch)
    if batch.dtype == torch.uint8:
        return batch.numel()
    return int(batch.sum())   # a batch of lengths (payload "length")


def time_epoch(dataset: Dataset, *, batch_size: int, num_workers: int, seed: int, shuffle: bool = True,
               collate_fn=None) -> dict:
    """One epoch through a DataLoader, timed.

    Returns the seconds to the first batch (from creating the iterator: worker start-up
    included), the steady state (first batch to last, first batch excluded: its seconds,
    batches, samples and bytes) and the total; and CPU seconds: of the main process's main
    thread (the one that receives batches) and of the whole main process from the first batch
    to the end of the loop (``main_window_s``), and of the workers (collected when they exit at the end of the epoch);
    and the time
    the main thread spent waiting for a CPU in that window (Linux schedstat: on a
    busy machine a thread that wants to run is not always running).
    """
    import functools
    import multiprocessing

    g = torch.Generator().manual_seed(seed)
    startup = multiprocessing.Array("d", max(num_workers, 1), lock=False)
    with warnings.catch_warnings():   # more workers than cores is a setting this chapter measures on purpose
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        dl = DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=num_workers,
            generator=g,
            collate_fn=collate_fn,
            worker_init_fn=functools.partial(_note_startup_cpu, startup) if num_workers else None,
        )
        children0 = _cpu(resource.RUSAGE_CHILDREN)
        proc0 = time.process_time()
        t0 = time.perf_counter()
        it = iter(dl)                  # starts the workers: inside the time to the first batch
    first = t_last = wait_first = None
    thread_first = proc_first = 0.0
    n_bytes = n_samples = batches = first_bytes = first_samples = 0
    for batch in it:
        t_last = time.perf_counter()
        b, n = _batch_bytes(batch), _batch_len(batch)
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


def device_view(dev: dict) -> dict:
    """The device counters of one epoch (:meth:`datajourney.toolkit.diskstats.DiskStats.delta`) as the sweep
    keeps them: requests, merges, the average request size and the requests merged per request
    completed (``dev_merge_ratio``: the block layer joined that many adjacent requests into each)."""
    keep = ("dev_reads", "dev_merged", "dev_bytes", "dev_request_bytes", "dev_queue_depth", "dev_util", "own_bytes")
    out = {k: dev.get(k) for k in keep}
    out["dev_merge_ratio"] = dev["dev_merged"] / dev["dev_reads"] if dev.get("dev_reads") else None
    return out


def sweep(ds: datasets.SmallFiles, *, workers: Sequence[int], cache_states: Sequence[str], runs: int,
          batch_size: int, method: str, seed: int, kinds: Sequence[str] = KINDS, progress=None,
          device: str | None = None) -> pd.DataFrame:
    """Every (kind, workers, cache state, run) combination; one row per timed epoch. With a block
    ``device`` (its ``/proc/diskstats`` name) each row also holds what the device did during the
    epoch (:func:`device_view`; device-wide: other processes' I/O on it counts too)."""
    stats = DiskStats(device)
    rows = []
    for state in cache_states:
        for run in range(runs):
            for w in workers:
                for kind in kinds:
                    info = set_cache_state(read_set(ds, kind), state, method)
                    a = stats.snapshot()
                    r = time_epoch(make_dataset(ds, kind), batch_size=batch_size, num_workers=w, seed=seed + run,
                                   shuffle=shuffled(kind), collate_fn=collate_for(ds))
                    dev = device_view(DiskStats.delta(a, stats.snapshot()))
                    rows.append(dict(kind=kind, shuffled=shuffled(kind), workers=w, cache=state, run=run,
                                     batch_size=batch_size, sample_size=ds.file_size, **r, **_derived(r), **info,
                                     **dev))
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
                    r = time_epoch(data, batch_size=bs, num_workers=w, seed=seed + run, shuffle=False,
                                   collate_fn=collate_for(ds, payload))
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


def measure_handover_modes(ds: datasets.SmallFiles, *, workers: int, runs: int, batch_size: int, seed: int,
                           modes: Sequence[str] = HANDOVER_MODES, progress=None) -> pd.DataFrame:
    """The plateau's deciding check: warm epochs (at most :data:`TRANSFER_MAX_SAMPLES` samples) of
    the shard read in order with ``workers`` workers, once per hand-over mode (:data:`HANDOVER_MODES`), the modes
    interleaved within each
    run. If passing the batch's file descriptor (a request from the main process to the worker
    for every batch) sets the rate, the other two modes run faster; if the per-batch queue
    machinery does (pickling, the pipe, waking the main thread, taking batches in order), all three
    run at about the same rate. The sharing strategy is restored afterwards."""
    import torch.multiprocessing as tmp

    residency = pagecache.warm([ds.shard]).fraction
    before = tmp.get_sharing_strategy()
    rows = []
    try:
        for run in range(runs):
            for mode in modes:
                choice("mode", mode, HANDOVER_MODES)
                if mode == "file name" and "file_system" not in tmp.get_all_sharing_strategies():
                    continue
                tmp.set_sharing_strategy("file_system" if mode == "file name" else before)
                raw = mode == "bytes through the pipe"
                data = make_dataset(ds, "shard_in_order", "raw" if raw else "bytes")
                if len(data) > TRANSFER_MAX_SAMPLES:   # enough batches for a steady state, no more
                    data = torch.utils.data.Subset(data, range(TRANSFER_MAX_SAMPLES))
                r = time_epoch(data, batch_size=batch_size, num_workers=workers, seed=seed + run, shuffle=False,
                               collate_fn=collate_raw if raw else collate_for(ds))
                rows.append(dict(mode=mode, workers=workers, run=run, batch_size=batch_size, **r, **_derived(r),
                                 resident_at_start=residency))
                if progress:
                    progress.update(1)
    finally:
        tmp.set_sharing_strategy(before)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Plan:
    """What :func:`preflight` found: the checked parameters, the directory the data set goes to and, with
    ``image_dir``, the reader's files to read instead of generated ones."""

    params: Params
    data_dir: Path
    images: object = None


def preflight(params) -> Plan:
    """All checks that must pass before any work: every declared range (:meth:`Params.checked`), then
    what spans fields or depends on this machine (worker counts against its cores, the batches in flight
    against its memory, root for ``drop_caches``, the data directory and its free space)."""
    if not isinstance(params, Params):
        run_options(dict(params))
    p = Params.coerce(params).checked()
    imgs = None
    if p.image_dir is not None:   # the reader's files, checked before any work (sizes from them, not file_size)
        from datajourney.toolkit import yourdata

        imgs = yourdata.images(p.image_dir, p.n_files, seed=p.seed, data_dir=datasets.parent_dir(p.data_dir),
                               what="n_files")
    sizes = imgs.sizes if imgs else (p.file_size,)
    if p.batch_size > p.n_files:
        raise ParameterError("batch_size", p.batch_size, f"at most n_files ({p.n_files:,})")
    if not p.cache_states:
        raise ParameterError("cache_states", p.cache_states, "a non-empty list drawn from 'cold', 'warm'")
    if any(b < 1 or b > p.n_files for b in p.transfer_batch_sizes):
        raise ParameterError("transfer_batch_sizes", p.transfer_batch_sizes,
                             f"a list of integers from 1 to {p.n_files:,} (n_files), or [] to skip")
    if p.latency_reads and (sum(sizes) if imgs else p.n_files * p.file_size) < LATENCY_BLOCK:
        raise ParameterError("latency_reads", p.latency_reads,
                             f"0 when the data set is smaller than {LATENCY_BLOCK:,} bytes (nothing to read)")
    if p.handover_workers and p.n_files < 2 * p.batch_size:
        raise ParameterError("handover_workers", p.handover_workers,
                             "0 when n_files holds fewer than two batches (no steady state to time)")
    biggest = max([p.batch_size, *p.transfer_batch_sizes])
    # a batch lives in every worker's prefetch queue (2 per worker) and in the main process
    memory("batch_size", biggest, biggest * max(sizes) * (2 * max(p.workers) + 4), what="the batches in flight")
    if p.purge_method == "drop_caches" and not pagecache.can_drop_caches():
        raise ParameterError("purge_method", "drop_caches", "'auto' or 'fadvise' (drop_caches needs root)")
    if imgs:
        from datajourney.toolkit import yourdata

        return Plan(p, datasets.check_space(p.data_dir, [yourdata.shard_plan(imgs)]), imgs)
    plan = datasets.small_files_plan(p.n_files, p.file_size, p.seed)
    return Plan(p, datasets.check_space(p.data_dir, [plan]))


def measure(plan: Plan, context) -> None:
    """Run chapter 3's sweep and side experiments into the started result (its tables and metadata)."""
    from tqdm import tqdm

    p, parent = plan.params, plan.data_dir
    res, progress = context.result, context.progress
    lap = timing.Laps()  # how long each part of the run took (metadata)
    runs, seed, purge_method = p.runs, p.seed, p.purge_method
    if plan.images is not None:   # the reader's files as they are, and a shard of their bytes (generated)
        from datajourney.toolkit import yourdata

        plan.images.recheck()
        ds = yourdata.files_and_shard(plan.images, parent, progress=progress)
        res.metadata["your_data"] = plan.images.describe()
    else:
        ds = datasets.small_files(parent, n_files=p.n_files, file_size=p.file_size, seed=seed, progress=progress)
    lap("data set")
    tbs = p.transfer_batch_sizes
    steps = (len(p.cache_states) * runs * len(p.workers) * len(KINDS) + runs * len(tbs) * len(PAYLOADS) * 2
             + (runs if p.latency_reads else 0) + (runs * len(HANDOVER_MODES) if p.handover_workers else 0))
    dev = block_device(ds.shard)
    with tqdm(total=steps, desc="chapter 3 epochs", disable=not progress, mininterval=10) as bar:
        if p.latency_reads:
            lat, cdf = measure_latency(ds.shard, reads=p.latency_reads, runs=runs, method=purge_method,
                                       seed=seed, progress=bar)
            res.add("latency", lat)
            res.add("latency_cdf", cdf)
            lap("latency")
        res.add("epochs", sweep(ds, workers=p.workers, cache_states=p.cache_states, runs=runs,
                                batch_size=p.batch_size, method=purge_method, seed=seed, progress=bar,
                                device=dev["partition"]))
        lap("worker sweep")
        if p.handover_workers:
            res.add("handover_modes", measure_handover_modes(ds, workers=p.handover_workers, runs=runs,
                                                             batch_size=p.batch_size, seed=seed, progress=bar))
            lap("handover modes")
        if tbs:
            res.add("transfer", measure_transfer(ds, batch_sizes=tbs, runs=runs, seed=seed, progress=bar))
            lap("transfer")
    res.metadata.update(
        dataset=ds.manifest,
        diskstats_device=dev["partition"],
        read_ahead_kb=(dev["info"] or {}).get("read_ahead_kb"),
        start_method=torch.multiprocessing.get_start_method(),
        main_bound_share=MAIN_BOUND_SHARE,
        usable_cores=_usable_cores(),
        workers_above_cores=[w for w in p.workers if w + 1 > _usable_cores()],
        seconds=lap.seconds,
    )
