"""What chapter 8 exports to chapter 12 (the hops it measured): the decode cost of one image on one
core and the best steady loader of each kind, picked by the same rules as chapter 8's page."""
from __future__ import annotations

import math

from datajourney.chapters.c08_threads_processes_gil.page import THREADED, best_loader, unit_cost_ms


def photo_decode(r8) -> dict | None:
    """Chapter 8's photo-like JPEGs: decode + resize of one image on one core (its calibration, for
    the decoder of its best DataLoader), the cores, and the best steady loader of each kind (worker
    processes: the DataLoader; threads: SPDL or a plain pool, with any decoder)."""
    if r8 is None or "calibration" not in r8.tables or "loaders" not in r8.tables:
        return None
    dl = best_loader(r8, ["dataloader"])
    decoder = dl["decoder"] if dl is not None else "pillow"
    ms = unit_cost_ms(r8, decoder)
    if not math.isfinite(ms) or ms <= 0:
        return None
    out = dict(decoder=decoder, ms=ms, cores=int(r8.metadata.get("cores") or 1),
               image_size=r8.metadata.get("image_size"), process=None, thread=None)
    for kind, loaders in (("process", ["dataloader"]), ("thread", list(THREADED))):
        b = best_loader(r8, loaders)
        if b is not None:
            out[kind] = dict(loader=b["kind"], label=b["label"], concurrency=b["c"], images_per_s=b["mean"])
    return out
