"""Chapter 7's storage-format comparison: the images the chapter trains from, converted once into each format
by that format's own library (:mod:`datajourney.toolkit.formats`), then read cold and warm by a ``DataLoader``
at each worker count, feeding the chapter's own model step.

Per format it records the conversion (wall time, bytes on disk, files), index access (fetching random images
by index, cold and warm, where the format can), the CPU time the loader spends per image (one process, one
torch thread, as in a worker), how the format's shuffle mixes the images (:func:`formats.cobatch`) and, per
run, the images/s, the first batch and the data wait. The converted copies live in a scratch folder under
the data directory for the run only; the source images are only read."""
from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from datajourney.chapters.c07_full_picture.experiment import (
    cpu_cores,
    cpu_snapshot,
    forever,
    step_summary,
    torch_threads,
)
from datajourney.chapters.c07_full_picture.params import worker_counts
from datajourney.toolkit import formats, images, pagecache
from datajourney.toolkit.models import train_steps


def _loader(stored, p: dict, w: int, repeat: int, device: str):
    from torch.utils.data import DataLoader

    ds, order = formats.loader_dataset(stored, p["out_size"], seed=1000 * p["seed"] + repeat,
                                       batch_size=p["batch_size"], buffer=p["shuffle_buffer"])
    dl = DataLoader(ds, batch_size=p["batch_size"], sampler=order, num_workers=w, collate_fn=images.collate,
                    pin_memory=device == "cuda", drop_last=True, multiprocessing_context="fork" if w else None)
    return dl, ds


def _prepare(stored, cache: str, purge_method: str) -> dict:
    """The page cache as a run starts: the copy's files purged (cold) or read once (warm)."""
    if cache == "cold":
        formats.release()
        rep = pagecache.purge(stored.files, purge_method)
        return dict(purge_method=rep.method, resident_at_start=rep.after["fraction"])
    res = pagecache.warm(stored.files)
    return dict(purge_method=None, resident_at_start=res.fraction)


def run_one(stored, p: dict, *, w: int, cache: str, repeat: int, net, opt, device: str) -> dict:
    """One run: ``warmup_steps`` + ``format_steps`` steps of the chapter's training step fed from ``stored``."""
    dl, ds = _loader(stored, p, w, repeat, device)
    state = _prepare(stored, cache, p["purge_method"])
    it = forever(dl)
    try:
        warm = train_steps(it, net, opt, steps=p["warmup_steps"], device=device)
        a = cpu_snapshot()
        main = train_steps(it, net, opt, steps=p["format_steps"], device=device, first_step=p["warmup_steps"])
        b = cpu_snapshot()
    finally:
        it.close()
        formats.close(ds)
    df = pd.concat([warm, main], ignore_index=True)
    s = step_summary(df, p["warmup_steps"])
    keep = ("images_per_s", "first_batch_ms", "step_ms", "compute_ms", "wait_share", "DATALOADER_WAIT", "steps")
    return dict(format=stored.fmt, workers=w, cache=cache, repeat=repeat, **{k: s[k] for k in keep},
                **cpu_cores(a, b), **state)


def cpu_per_image(stored, p: dict) -> float:
    """CPU ms per image of the loader alone (no model): a warm pass of ``format_steps`` batches in this
    process with one torch thread, as a worker runs; every thread of the process counts (a library's
    background threads too)."""
    dl, ds = _loader(stored, p, 0, 0, "cpu")
    pagecache.warm(stored.files)
    n = 0
    with torch_threads(1):
        it = forever(dl)
        try:
            next(it)  # the first batch opens the files and starts the library's threads: not counted
            c0 = time.process_time()
            for _ in range(p["format_steps"]):
                n += len(next(it).y)
            c1 = time.process_time()
        finally:
            it.close()
            formats.close(ds)
    return 1e3 * (c1 - c0) / max(1, n)


def index_access(stored, p: dict) -> dict:
    """Random images fetched by index through the format's reader, cold (page cache purged first) and warm
    (the same images again): mean ms per access; ``supported=False`` where the format has no index access."""
    get = formats.accessor(stored)
    if get is None:
        return dict(random_access=False, access_cold_ms=np.nan, access_warm_ms=np.nan, accesses=0)
    try:
        rng = np.random.default_rng(p["seed"])
        idx = rng.choice(stored.n, size=min(p["access_reads"], stored.n), replace=False).tolist()
        get(idx[0])  # opens the reader (its index, its files' metadata): not an access
        out = {}
        for cache in ("cold", "warm"):
            if cache == "cold":
                formats.release()
                pagecache.purge(stored.files, p["purge_method"])
            t0 = time.perf_counter()
            for i in idx:
                get(int(i))
            out[f"access_{cache}_ms"] = 1e3 * (time.perf_counter() - t0) / len(idx)
        return dict(random_access=True, accesses=len(idx), **out)
    finally:
        formats.close(get)


def measure(source: formats.Source, p: dict, *, data_dir: Path, net, opt, device: str, progress=None):
    """The whole comparison: (the per-format table, the per-run table, metadata)."""
    cores = len(os.sched_getaffinity(0))
    ws = worker_counts(p["format_workers"], cores)
    total = sum(os.stat(f).st_size for f in source.files)
    per_shard = (formats.auto_per_shard(len(source), total, max(ws)) if p["shard_images"] == "auto"
                 else int(p["shard_images"]))
    notes, stored, rows = {}, {}, []
    scratch = Path(data_dir) / f".tmp-formats-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # cleaned if the run dies
    scratch.mkdir(parents=True)
    try:
        for fmt in p["storage_formats"]:
            ok, why = formats.status(fmt)
            if not ok:
                notes[fmt] = why
                continue
            st = formats.convert(fmt, source, scratch / fmt, per_shard=per_shard)
            stored[fmt] = st
            order = formats.epoch_order(st, seed=p["seed"], batch_size=p["batch_size"], buffer=p["shuffle_buffer"])
            if sorted(order) != list(range(st.n)):
                raise RuntimeError(f"{fmt}: one epoch did not yield every image once ({len(order)} of {st.n})")
            rows.append(dict(format=fmt, library=why, images=st.n, per_shard=st.per_shard, shards=st.shards,
                             files=len(st.files), convert_s=st.seconds, bytes=st.bytes,
                             source_bytes=total, shuffle=formats.SHUFFLE[fmt],
                             buffer=p["shuffle_buffer"] if formats.SHUFFLE[fmt] == "buffer" else None,
                             cobatch=formats.cobatch(order, p["batch_size"]), **index_access(st, p),
                             cpu_ms_per_image=cpu_per_image(st, p),
                             **formats.calls(st, batch_size=p["batch_size"], buffer=p["shuffle_buffer"])))
            if progress is not None:
                progress.update(1)
        runs = []
        for r in range(p["format_repeats"]):  # repeats interleaved, so that a drift spreads over all
            for st in stored.values():
                for w in ws:
                    for cache in ("cold", "warm"):
                        runs.append(run_one(st, p, w=w, cache=cache, repeat=r, net=net, opt=opt, device=device))
                        if progress is not None:
                            progress.update(1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta = dict(workers=ws, per_shard=per_shard, notes=notes, images=len(source), cores=cores,
                torch_threads=torch.get_num_threads())
    return pd.DataFrame(rows), pd.DataFrame(runs), meta


def planned_steps(p: dict, cores: int) -> int:
    """How many progress steps :func:`measure` reports (conversions, then runs), for the chapter's bar."""
    ws = worker_counts(p["format_workers"], cores)
    n = len(p["storage_formats"])
    return n + p["format_repeats"] * n * len(ws) * 2
