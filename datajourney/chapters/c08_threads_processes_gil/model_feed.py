"""Chapter 8, experiment 9: the bf16 ResNet-50 fed by the loaders."""

import time
from contextlib import nullcontext

import pandas as pd
import torch

from datajourney.chapters.c08_threads_processes_gil.common import (  # noqa: F401
    HYBRID_HEADROOM,
    HYBRID_STEP,
)
from datajourney.chapters.c08_threads_processes_gil.loaders import (  # noqa: F401
    cpu_times,
    hybrid_share_auto,
)
from datajourney.toolkit import models


# --------------------------------------------------------------------------- experiment 9: the model
def model_step_factory(net, opt, device: str, graph=None):
    """Chapter 7's model in bf16 autocast and channels_last, stepped by chapter 7's loop
    (:func:`datajourney.models.train_steps`: uint8 batches normalised on the device); with
    ``graph`` (:func:`bf16_graphed_step`) each step replays its CUDA graphs instead."""

    def run_steps(batches, steps: int, first_step: int = 0):
        if graph is not None:
            return models.train_steps(batches, net, opt, steps=steps, device=device, first_step=first_step,
                                        graph=graph)
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else nullcontext()
        with ctx:
            return models.train_steps(batches, net, opt, steps=steps, device=device, first_step=first_step)

    return run_steps


def bf16_graphed_step(net, *, batch_size: int, out_size: int, classes: int, device: str):
    """Chapter 7's :class:`~datajourney.toolkit.models.GraphedStep` of a copy of ``net``, captured under
    bf16 autocast (its weight cache off, as a graph replays the casts each step): a step is a few
    graph launches, so busy cores and other Python threads in this process no longer pace it.
    Returns (graph or None, the reason it is None)."""

    if device != "cuda":
        return None, "no_gpu"
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        return models.graphed_step(net, 0.01, batch_size=batch_size, out_size=out_size, classes=classes,
                                     device=device)


def feed_model(make_iter, run_steps, *, steps: int, warmup: int, classes: int) -> dict:
    """Images/s of the model fed by a loader (steady state after ``warmup`` steps), the data
    wait share, time to first batch and CPU of all processes. The loaders yield image indices;
    the model is given class ``index % classes``, as the ImageFolder layout assigns them."""
    t0 = time.perf_counter()
    it = make_iter()
    labelled = ((x, y % classes) for x, y in it)
    try:
        w = run_steps(labelled, warmup)
        a = cpu_times()
        df = run_steps(labelled, steps, warmup)
        b = cpu_times()
    finally:
        close = getattr(it, "close", None)
        if close:
            close()
        del it
    wall = df["wall_ms"].sum() / 1e3
    return dict(first_batch_s=float(w["DATALOADER_WAIT"].iloc[0]) / 1e3, images_per_s=df["images"].sum() / wall,
                wait_share=df["DATALOADER_WAIT"].sum() / df["wall_ms"].sum(),
                compute_ms=float(df["compute_ms"].mean()),
                cpu_cores=(b["user"] - a["user"] + b["system"] - a["system"]) / (b["t"] - a["t"]),
                seconds_total=time.perf_counter() - t0)


def moonshot_feeds(lo: pd.DataFrame, ceiling: dict | None, *, tv: tuple[bool, str], nice: int, read_threads: int,
                   share="auto", hybrid: dict) -> list[tuple[str, int, int, float | None, str | None]]:
    """The model-fed runs, (kind, concurrency, workers' nice, CPU share, decoder): the best of each
    loader of the sweep ``lo`` (means over repeats) with its decoder (of the thread loaders only the SPDL
    sweep's best setting, "spdl_batch", where ``lo`` has it: the end-to-end comparison's thread side), the best
    DataLoader again with
    its workers at ``nice``, GPU decoding, and the hybrid at the best DataLoader's workers and
    decoder, at nice 0 and at ``nice`` (the run tells which priority feeds the model better), with
    the share (``"auto"``: :func:`hybrid_share_auto` of that DataLoader's rate and the ceiling).
    ``hybrid`` is filled with the share, how it was chosen and its inputs, or why the hybrid is
    skipped (a code: the page words it)."""
    feeds, best = [], pd.DataFrame(columns=["loader", "concurrency", "decoder", "images_per_s"])
    if not lo.empty:
        dec = lo["decoder"] if "decoder" in lo else pd.Series("pillow", index=lo.index)
        best = (lo.assign(decoder=dec.fillna("")).groupby(["loader", "concurrency", "decoder"])["images_per_s"]
                .mean().reset_index().sort_values("images_per_s").groupby("loader").tail(1))
        drop = {"nvjpeg"} | ({"spdl", "spdl_prealloc", "threadpool"} if (best["loader"] == "spdl_batch").any()
                             else set())
        feeds = [(r.loader, int(r.concurrency), 0, None, r.decoder or None) for r in best.itertuples()
                 if r.loader not in drop]
    if nice:
        feeds += [("dataloader", c, nice, None, d) for k, c, _, _, d in list(feeds) if k == "dataloader"]
    if tv[0]:
        feeds.append(("nvjpeg", read_threads, 0, None, None))
    dl_best = best[best["loader"] == "dataloader"]
    if not tv[0]:
        hybrid.update(skipped="torchvision", why=tv[1])
    elif dl_best.empty:
        hybrid.update(skipped="no_dataloader")
    elif not ceiling:
        hybrid.update(skipped="no_ceiling")
    else:
        r_cpu, c_rate = float(dl_best["images_per_s"].iloc[0]), float(ceiling["images_per_s"])
        auto = share == "auto"
        hybrid.update(share=hybrid_share_auto(r_cpu, c_rate) if auto else float(share),
                      how="auto" if auto else "parameter", headroom=HYBRID_HEADROOM, step=HYBRID_STEP,
                      cpu_rate=r_cpu, ceiling=c_rate, workers=int(dl_best["concurrency"].iloc[0]))
        dec = dl_best["decoder"].iloc[0] or None
        feeds += [("hybrid", hybrid["workers"], n, hybrid["share"], dec) for n in sorted({0, nice})]
    return feeds


def model_ceiling(net, opt, run_steps, *, batch_size: int, out_size: int, classes: int, device: str, steps: int,
                  warmup: int) -> dict:
    """The model fed by one uint8 batch kept in device memory (no loading, no copy)."""
    from itertools import cycle

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 255, (batch_size, 3, out_size, out_size), dtype=torch.uint8, generator=g).to(device)
    y = torch.randint(0, classes, (batch_size,), generator=g).to(device)
    it = cycle([(x, y)])
    run_steps(it, warmup)
    df = run_steps(it, steps, warmup)
    return dict(images_per_s=df["images"].sum() / (df["wall_ms"].sum() / 1e3), compute_ms=float(df["compute_ms"]
                                                                                               .mean()))
