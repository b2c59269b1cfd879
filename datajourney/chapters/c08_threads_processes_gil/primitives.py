"""Chapter 8, experiments 1 and 2: decode + resize + batch in a thread pool against a process pool,
operation by operation."""

import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context

import numpy as np
import pandas as pd
import torch

from datajourney.chapters.c08_threads_processes_gil.common import (  # noqa: F401
    OPS,
    _read,
    decode_one,
)
from datajourney.toolkit import images


def load_batch(decoder: str, paths, out_size: int) -> tuple[np.ndarray, dict]:
    """Read, decode, resize and stack a batch; returns it with the ms each operation took (summed
    over the batch) and the thread/process that did it."""
    times = dict.fromkeys(OPS, 0.0)
    arrs = []
    for p in paths:
        t0 = time.perf_counter()
        data = _read(p)
        times["read"] += (time.perf_counter() - t0) * 1e3
        arrs.append(decode_one(decoder, data, out_size, times))
    t0 = time.perf_counter()
    batch = np.stack(arrs)
    times["batch"] = (time.perf_counter() - t0) * 1e3
    return batch, times


def _pool_init(parent: int) -> None:
    images.die_with_parent(parent)
    torch.set_num_threads(1)


def _warm(decoder: str, path: str, out_size: int) -> int:
    decode_one(decoder, _read(path), out_size)
    return os.getpid()


# --------------------------------------------------------------------------- experiments 1 + 2
def primitive_point(decoder: str, executor: str, concurrency: int, paths: list, *, batch_size: int,
                    out_size: int) -> tuple[dict, list[dict]]:
    """One point of experiment 1: ``paths`` in batches through a pool of ``concurrency``.
    Start-up (create the pool, start every worker, import and warm the decoder) is timed apart."""
    batches = [paths[i:i + batch_size] for i in range(0, len(paths), batch_size)]
    t0 = time.perf_counter()
    if executor == "thread":
        pool = ThreadPoolExecutor(concurrency)
    else:
        pool = ProcessPoolExecutor(concurrency, mp_context=get_context("fork"), initializer=_pool_init,
                                   initargs=(os.getpid(),))
    with pool:
        # one warm task per worker, held long enough that each lands on a different worker
        list(pool.map(_warm, [decoder] * concurrency, [paths[0]] * concurrency, [out_size] * concurrency))
        t1 = time.perf_counter()
        futures = [pool.submit(load_batch, decoder, b, out_size) for b in batches]
        ops = [f.result()[1] for f in futures]
        t2 = time.perf_counter()
    n = len(paths)
    row = dict(decoder=decoder, executor=executor, concurrency=concurrency, images=n, startup_s=t1 - t0,
               seconds=t2 - t1, images_per_s=n / (t2 - t1))
    per_op = [dict(decoder=decoder, executor=executor, concurrency=concurrency, op=k,
                   ms_per_image=sum(o[k] for o in ops) / n) for k in OPS]
    return row, per_op


def primitive_images_at(concurrency: int, n_images: int, batch_size: int, available: int) -> int:
    """Images of one primitive point: at least ``n_images`` and at least two batches per worker
    (fewer batches than workers would leave some idle and measure fewer than ``concurrency``),
    at most the ``available`` images of the data set."""
    return min(max(n_images, 2 * concurrency * batch_size), available)


def primitives(src, *, decoders, executors, concurrency, n_images: int, batch_size: int, out_size: int,
               repeats: int, progress=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Experiments 1 and 2 (page cache warm: this is about the CPU, not the disk). Each point
    decodes :func:`primitive_images_at` images: ``n_images`` at low concurrency, two batches per
    worker at high."""
    total = max(primitive_images_at(c, n_images, batch_size, src.n_images) for c in concurrency)
    paths = [str(src.path(i)) for i in range(total)]
    for p in paths:
        _read(p)
    rows, ops = [], []
    with torch_threads(1):
        for r in range(repeats):
            for d in decoders:
                for ex in executors:
                    for c in concurrency:
                        n = primitive_images_at(c, n_images, batch_size, len(paths))
                        row, per_op = primitive_point(d, ex, c, paths[:n], batch_size=batch_size, out_size=out_size)
                        rows.append(dict(row, repeat=r))
                        ops += [dict(o, repeat=r) for o in per_op]
                        if progress is not None:
                            progress.update(1)
    return pd.DataFrame(rows), pd.DataFrame(ops)


@contextmanager
def torch_threads(n: int | None):
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
