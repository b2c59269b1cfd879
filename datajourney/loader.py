"""Chapter 3: the PyTorch DataLoader over small files vs over one shard.

What is measured: the wall time of one full, shuffled epoch through
``torch.utils.data.DataLoader`` (iterator creation to last batch, so worker start-up is
included, as a training job pays it), for two Datasets holding the same bytes:

``SmallFilesDataset``  one file per sample; ``open``/``read``/``close`` in ``__getitem__``.
``ShardDataset``       one shard; each worker opens it once and ``pread``s the sample.

for several ``num_workers``, cold (page cache purged and verified) and warm.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from . import datasets, pagecache
from .book.params import ParameterError, choice, choices, int_list, positive_int
from .storage import CACHE_STATES, MB, set_cache_state

CHAPTER = "03_dataloader"
KINDS = ("small_files", "shard")


class SmallFilesDataset(Dataset):
    """One file per sample, opened, read and closed on every access."""

    def __init__(self, files: Sequence[Path], sample_size: int):
        self.files = [str(f) for f in files]
        self.sample_size = sample_size

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb", buffering=0) as f:
            data = f.read()
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)


class ShardDataset(Dataset):
    """Fixed-size samples in one shard; one file descriptor per process, ``os.pread`` per sample."""

    def __init__(self, shard: Path, sample_size: int, n_samples: int):
        self.shard = str(shard)
        self.sample_size = sample_size
        self.n = n_samples
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
        data = os.pread(self._handle(), self.sample_size, i * self.sample_size)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fd"] = state["_pid"] = None
        return state

    def __del__(self):
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass


def make_dataset(ds: datasets.SmallFiles, kind: str) -> Dataset:
    choice("kind", kind, KINDS)
    if kind == "small_files":
        return SmallFilesDataset(ds.files, ds.file_size)
    return ShardDataset(ds.shard, ds.file_size, ds.n_files)


def time_epoch(dataset: Dataset, *, batch_size: int, num_workers: int, seed: int) -> dict:
    """One shuffled epoch: seconds to first batch, total seconds, samples and bytes seen."""
    g = torch.Generator().manual_seed(seed)
    dl = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers, generator=g)
    t0 = time.perf_counter()
    first = None
    n_bytes = n_samples = 0
    for batch in dl:
        if first is None:
            first = time.perf_counter() - t0
        n_bytes += batch.numel() * batch.element_size()
        n_samples += batch.shape[0]
    total = time.perf_counter() - t0
    return dict(seconds=total, first_batch_s=first, samples=n_samples, bytes=n_bytes)


def sweep(ds: datasets.SmallFiles, *, workers: Sequence[int], cache_states: Sequence[str], runs: int,
          batch_size: int, method: str, seed: int, progress=None) -> pd.DataFrame:
    """Every (kind, workers, cache state, run) combination; one row per timed epoch."""
    everything = ds.files + [ds.shard]
    rows = []
    for state in cache_states:
        for run in range(runs):
            for w in workers:
                for kind in KINDS:
                    info = set_cache_state(everything, state, method)
                    r = time_epoch(make_dataset(ds, kind), batch_size=batch_size, num_workers=w, seed=seed + run)
                    rows.append(dict(kind=kind, workers=w, cache=state, run=run, batch_size=batch_size,
                                     sample_size=ds.file_size, **r, MBps=r["bytes"] / r["seconds"] / MB,
                                     samples_per_s=r["samples"] / r["seconds"], **info))
                    if progress:
                        progress.update(1)
    return pd.DataFrame(rows)


def check_parameters(p: dict) -> dict:
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
    if q["purge_method"] == "drop_caches" and not pagecache.can_drop_caches():
        raise ParameterError("purge_method", "drop_caches", "'auto' or 'fadvise' (drop_caches needs root)")
    return q


def preflight(params: dict) -> tuple[dict, Path]:
    """All checks that must pass before any work: parameters, data directory, free disk."""
    p = check_parameters(params)
    plan = datasets.small_files_plan(p["n_files"], p["file_size"], p.get("seed", 0))
    return p, datasets.check_space(p.get("data_dir"), [plan])


def run(*, n_files: int, file_size: int, batch_size: int, workers, cache_states, runs: int,
        purge_method: str, seed: int = 0, data_dir=None, run_dir=None, progress: bool = True):
    """Run chapter 3's sweep and save the result (tables + fingerprint) to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from tqdm import tqdm

    from .book import results

    p, parent = preflight(params)
    res = results.start(CHAPTER, params, run_dir, parent)
    ds = datasets.small_files(parent, n_files=n_files, file_size=file_size, seed=seed, progress=progress)
    steps = len(p["cache_states"]) * runs * len(p["workers"]) * len(KINDS)
    with tqdm(total=steps, desc="chapter 3 epochs", disable=not progress) as bar:
        res.add("epochs", sweep(ds, workers=p["workers"], cache_states=p["cache_states"], runs=runs,
                                batch_size=batch_size, method=purge_method, seed=seed, progress=bar))
    res.metadata.update(dataset=ds.manifest, start_method=torch.multiprocessing.get_start_method())
    res.save(results.resolve_run_dir(run_dir))
    return res


def speedups(epochs: pd.DataFrame) -> pd.DataFrame:
    """Mean MB/s of each kind per (cache, workers), and the shard's advantage over small files."""
    m = epochs.groupby(["cache", "workers", "kind"])["MBps"].mean().unstack("kind").reset_index()
    m["shard_speedup"] = m["shard"] / m["small_files"]
    return m


def key_metrics(res) -> dict:
    """Cold-cache headline numbers at workers 0 and 4 as metric -> (mean, std)."""
    e = res.table("epochs")
    out = {}
    for w in (0, 4):
        part = e[(e["cache"] == "cold") & (e["workers"] == w)]
        sf, sh = part[part["kind"] == "small_files"]["MBps"], part[part["kind"] == "shard"]["MBps"]
        if sf.empty or sh.empty:
            continue
        out[f"small files, workers={w}"] = (sf.mean(), sf.std())
        out[f"shard, workers={w}"] = (sh.mean(), sh.std())
        out[f"shard ÷ small files, workers={w}"] = (sh.mean() / sf.mean(), None)
    return out
