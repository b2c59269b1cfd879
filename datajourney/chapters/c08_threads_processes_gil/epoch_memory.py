"""Chapter 8, experiments 3b-4: the DataLoader's time to first batch, the memory of every process over
an epoch, and the cost of moving a batch between processes."""

import functools
import os
import pickle
import threading
import time
from functools import partial

import numpy as np
import torch
from torch.utils.data import Dataset

from datajourney.chapters.c08_threads_processes_gil.loaders import (  # noqa: F401
    _dl_worker_init,
    memory,
    release_memory,
)


# --------------------------------------------------------------------------- experiment 4: start-up
def imagenet_paths(n: int) -> list[str]:
    """``n`` file names laid out like ImageNet's training set (1,300 per class folder)."""
    return [f"/data/imagenet/train/n{k // 1300:08d}/n{k // 1300:08d}_{k:06d}.JPEG" for k in range(n)]


#: How a Dataset can hold its file list: Python ``str`` objects in a list, or one NumPy array of
#: fixed-width bytes (a single buffer, no object per path).
PATH_STORAGE = ("list", "numpy")


class PathsDataset(Dataset):
    """A Dataset whose only weight is a list of ``n_paths`` file names (``storage``: a Python list
    or a NumPy bytes array); item ``i`` is the length of path ``i % n_paths`` (0 without paths), so
    reading an item touches its path the way a real Dataset opening the file would. ``items``: the
    length (default one per path)."""

    def __init__(self, n_paths: int, items: int | None = None, storage: str = "list"):
        paths = imagenet_paths(n_paths)
        self.paths = np.array(paths, dtype=np.bytes_) if storage == "numpy" else paths
        self.items = n_paths if items is None else items

    def __len__(self):
        return self.items

    def __getitem__(self, i):
        n = len(self.paths)
        return len(self.paths[i % n]) if n else 0


@functools.lru_cache(maxsize=2)
def _paths_dataset(n_paths: int) -> tuple[PathsDataset, int]:
    """The Dataset of ``n_paths`` paths and its pickled size, built once per size for the sweep
    (:func:`startup_point`); ``_paths_dataset.cache_clear()`` frees them."""
    ds = PathsDataset(n_paths, items=64)
    return ds, len(pickle.dumps(ds, protocol=pickle.HIGHEST_PROTOCOL))


def startup_point(workers: int, method: str, n_paths: int) -> dict:
    from torch.utils.data import DataLoader

    ds, size = _paths_dataset(n_paths)
    dl = DataLoader(ds, batch_size=1, num_workers=workers, multiprocessing_context=method,
                    worker_init_fn=_dl_worker_init)
    t0 = time.perf_counter()
    it = iter(dl)
    next(it)
    t1 = time.perf_counter()
    del it
    return dict(workers=workers, start_method=method, n_paths=n_paths, pickled_bytes=size, first_batch_s=t1 - t0)


# --------------------------------------------------------------------------- experiment 5: memory over an epoch
class MemorySampler:
    """PSS and USS of this process and of each child process started after it (a loader's workers,
    not helpers that were already running), every ``interval`` seconds in a background thread and
    whenever :meth:`sample` is called: rows of (seconds since start, process: "main" or "worker k"
    in order of appearance, pss_bytes, uss_bytes). A process that is exiting (no memory left) is
    not sampled."""

    def __init__(self, interval: float):
        self.interval, self.rows = interval, []
        self._names: dict[int, str] = {}
        self._before: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        import psutil

        me = psutil.Process()
        t = time.perf_counter() - self._t0
        with self._lock:
            kids = sorted((c for c in me.children(recursive=True) if c.pid not in self._before), key=lambda c: c.pid)
            for p in [me] + kids:
                try:
                    m = p.memory_full_info()
                except psutil.Error:
                    continue
                if not m.uss:
                    continue
                name = self._names.setdefault(p.pid, "main" if p.pid == me.pid else f"worker {len(self._names)}")
                self.rows.append(dict(t=t, process=name, pss_bytes=getattr(m, "pss", m.uss), uss_bytes=m.uss))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self):
        import psutil

        self._t0 = time.perf_counter()
        self._before = {c.pid for c in psutil.Process().children(recursive=True)}
        self._names[os.getpid()] = "main"
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _epoch_fetch(ds, idx) -> torch.Tensor:
    return torch.tensor([ds[int(i)] for i in idx])


def epoch_iter(loader: str, ds, batches, workers: int):
    """One pass over ``batches`` (index arrays) of ``ds``: DataLoader worker processes (fork) or an
    SPDL pipeline whose ``workers`` threads fetch the batches in this process."""
    if loader == "dataloader":
        from torch.utils.data import DataLoader

        yield from DataLoader(ds, batch_sampler=batches, num_workers=workers, multiprocessing_context="fork",
                              worker_init_fn=_dl_worker_init)
        return
    from spdl.pipeline import PipelineBuilder

    pipe = (PipelineBuilder().add_source(batches).pipe(partial(_epoch_fetch, ds), concurrency=workers)
            .add_sink(4).build(num_threads=workers + 1))
    with pipe.auto_stop():
        yield from pipe.get_iterator(timeout=600)


def epoch_point(loader: str, storage: str, n_paths: int, *, workers: int, batch_size: int, interval: float,
                seed: int = 0) -> tuple[dict, list[dict]]:
    """A whole epoch over a Dataset of ``n_paths`` paths held as ``storage`` (shuffled, batches of
    ``batch_size``), with the memory of every process sampled: the summary and the samples. The
    last sample is taken just before the last batch is taken, while the DataLoader's workers live."""
    release_memory()
    base = memory()["pss"]
    ds = PathsDataset(n_paths, storage=storage)
    built = memory()["pss"]  # the main process alone: helpers started earlier are in both
    order = np.random.default_rng(seed).permutation(n_paths)
    batches = [order[i:i + batch_size] for i in range(0, n_paths, batch_size)]
    seen = 0
    with MemorySampler(interval) as ms:
        t0 = time.perf_counter()
        it = epoch_iter(loader, ds, batches, workers)
        for k in range(len(batches)):
            if k == len(batches) - 1:
                ms.sample()
            seen += len(next(it))
        seconds = time.perf_counter() - t0
        it.close()
    del ds
    rows = [dict(loader=loader, storage=storage, **r) for r in ms.rows]
    return dict(loader=loader, storage=storage, n_paths=n_paths, workers=workers, items=seen, seconds=seconds,
                dataset_pss_mb=(built - base) / 1e6, samples=len(rows)), rows


# --------------------------------------------------------------------------- experiment 6: IPC
class BatchSource(Dataset):
    """Items already decoded (one fixed image): moving them is all the loader does."""

    def __init__(self, out_size: int, n: int):
        self.x = torch.randint(0, 255, (3, out_size, out_size), dtype=torch.uint8, generator=torch.Generator()
                               .manual_seed(0))
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.x


def ipc_point(batch_size: int, workers: int, out_size: int, batches: int) -> dict:
    """ms per batch of a loader that only collates ready images: with workers, the batch is
    collated into shared memory in a worker and rebuilt in the main process."""
    from torch.utils.data import DataLoader

    ds = BatchSource(out_size, batch_size * (batches + 4 + 2 * max(workers, 1)))
    kw = dict(multiprocessing_context="fork", worker_init_fn=_dl_worker_init) if workers else {}
    it = iter(DataLoader(ds, batch_size=batch_size, num_workers=workers, **kw))
    for _ in range(2 + 2 * workers):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - t0
    del it
    return dict(batch_size=batch_size, workers=workers, batch_bytes=batch_size * 3 * out_size ** 2,
                ms_per_batch=dt / batches * 1e3)
