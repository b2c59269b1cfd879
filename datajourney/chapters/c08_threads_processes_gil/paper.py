"""Chapter 8, experiment 7: the SPDL question (issue 37).

The SPDL paper reports its thread pipeline faster than the PyTorch DataLoader on ImageNet with
less CPU. This experiment runs the paper's comparison on the chapter's images and splits it:

* **The comparison**: the paper's baseline (a DataLoader whose workers decode with Pillow and
  apply torchvision-style transforms: resize, to float, normalise; without torchvision the same
  steps in PIL and NumPy, labelled) against the paper's SPDL (an ``spdl.pipeline`` pipeline that
  decodes whole batches with ``spdl.io.load_image_batch`` and normalises after the copy, as SPDL's
  own ImageNet example does); the same images, the same batch, cold and warm.
* **The decomposition**: the DataLoader again with ``spdl.io`` decoding (the decoder's share:
  Pillow -> spdl.io, both in processes) between them (the parallelism's share: processes -> threads,
  both spdl.io).
* **Why threads trail**: every run keeps a probe thread that sleeps 1 ms at a time and records how
  late it wakes (the wait of a Python thread for the interpreter lock or a core); the SPDL
  pipelines carry a heartbeat on their event loop (how late a ready callback runs: the loop's
  scheduling delay per task) and the per-stage counters of ``spdl.pipeline`` (occupancy). Apart,
  each operation runs alone on one thread with the probe beside it: the share of probe wakes it
  delays is the share of its time it holds the lock, so it gives the GIL-held ms per image of each
  operation (``gil_held``).
* **The best thread configuration**: a small sweep, scaled by the cores, of images per decode task
  (1: one task per image; a part of a batch; a whole batch), decode-stage concurrency and the
  pipeline's thread-pool size, warm files. The best setting then runs again, as often as the comparison's
  loaders (``confirm``): the runs that picked a maximum overstate it, so its verdict rests on fresh runs.

Every run here fits its windows into the data set: an "auto" level above what ``n_images`` holds
is lowered and the lowering recorded (``metadata.paper.clamped``).
"""
from __future__ import annotations

import asyncio
import math
import os
import shutil
import subprocess
import threading
import time
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from datajourney.chapters.c08_threads_processes_gil import choice
from datajourney.chapters.c08_threads_processes_gil.common import _read, decode_one
from datajourney.chapters.c08_threads_processes_gil.loaders import (  # noqa: F401 (the batch-decode pipeline)
    SINK,
    SpdlStages,
    _merge,
    _nchw,
    in_flight,
    load_chunk,
    measure_loader,
    scale_filter,
    spdl_batch_iter,
    wave,
    worker_init,
)
from datajourney.toolkit.imagenet import MEAN, STD

#: The three loaders of the comparison: the paper's baseline, the decoder swapped, the paper's SPDL.
PAPER_KINDS = ("dl_pillow", "dl_spdl", "spdl_batch")
#: Seconds between wakes of the probe thread, and the lateness above which a wake counts as delayed.
PROBE_PERIOD_S = 0.001
DELAYED_S = 0.0002
#: Operations of the GIL-held calibration.
GIL_OPS = ("idle", "read", "decode_pillow", "decode_spdl", "decode_spdl_batch", "transforms", "collate",
           "normalise_batch")


# --------------------------------------------------------------------------- transforms
def transforms_status() -> tuple[str, str]:
    """("torchvision", version) when torchvision's v2 transforms import, else ("numpy", why)."""
    try:
        import torchvision
        from torchvision.transforms.v2 import functional  # noqa: F401
    except Exception as e:
        return "numpy", f"torchvision is not importable ({type(e).__name__})"
    return "torchvision", "torchvision " + torchvision.__version__


def normalise_image(arr: np.ndarray, how: str) -> torch.Tensor:
    """An (S, S, 3) uint8 image -> (3, S, S) float32 in [0, 1], normalised by ImageNet's mean and
    deviation: torchvision's ``to_dtype(scale=True)`` + ``normalize`` (``how`` = "torchvision"), or
    the same arithmetic in NumPy."""
    if how == "torchvision":
        from torchvision.transforms.v2 import functional as F

        x = F.to_dtype(torch.from_numpy(arr).permute(2, 0, 1), torch.float32, scale=True)
        return F.normalize(x, list(MEAN), list(STD))
    m, s = np.asarray(MEAN, np.float32), np.asarray(STD, np.float32)
    return torch.from_numpy(np.ascontiguousarray(((arr.astype(np.float32) / 255.0 - m) / s).transpose(2, 0, 1)))


def normalise_batch(x: torch.Tensor) -> torch.Tensor:
    """A uint8 (B, 3, S, S) batch -> float32 normalised, on the batch's device (SPDL's example
    normalises on the GPU after the copy)."""
    m = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1)
    s = torch.tensor(STD, device=x.device).view(1, 3, 1, 1)
    return (x.float().div_(255.0) - m) / s


# --------------------------------------------------------------------------- the loaders
class PaperDataset(Dataset):
    """Item ``i``: image ``i`` read, decoded and resized by ``decoder``, then transformed to a
    normalised float32 (3, S, S) tensor in the worker, as the paper's baseline does."""

    def __init__(self, files, out_size: int, decoder: str, how: str):
        self.files, self.out_size, self.decoder, self.how = [str(f) for f in files], out_size, decoder, how

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return normalise_image(decode_one(self.decoder, _read(self.files[i]), self.out_size), self.how), i


def paper_dataloader_iter(files, order, *, batch_size: int, out_size: int, workers: int, decoder: str, how: str,
                          prefetch_factor: int = 2, pin: bool = False):
    from torch.utils.data import DataLoader

    kw = dict(prefetch_factor=prefetch_factor, multiprocessing_context="fork",
              worker_init_fn=worker_init(0)) if workers else {}
    return iter(DataLoader(PaperDataset(files, out_size, decoder, how), batch_size=batch_size,
                           sampler=list(order), num_workers=workers, pin_memory=pin, **kw))


class LoopProbe:
    """A heartbeat on a pipeline's event loop: started by the first item through :meth:`tick` (an
    async pass-through stage), it sleeps ``period`` and records how late the loop wakes it."""

    def __init__(self, period: float = PROBE_PERIOD_S):
        self.period, self.stop = period, False
        self._lags: list[float] = []
        self._task = None

    async def tick(self, item):
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._beat())
        return item

    async def _beat(self):
        while not self.stop:
            t = time.perf_counter()
            await asyncio.sleep(self.period)
            self._lags.append(time.perf_counter() - t - self.period)

    def lap(self) -> dict:
        lags, self._lags = self._lags, []
        return dict(loop_wakes=len(lags), loop_lag_ms=1e3 * float(np.mean(lags)) if lags else None)


class GilProbe:
    """A thread that sleeps ``period`` at a time and records how late it wakes: a wake delayed
    beyond ``delayed`` waited for the interpreter lock (or, on a busy host, a core). The share of
    delayed wakes estimates the share of time the lock was held by other threads."""

    def __init__(self, period: float = PROBE_PERIOD_S, delayed: float = DELAYED_S):
        self.period, self.delayed = period, delayed
        self._late: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="gil-probe")

    def _loop(self):
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(self.period)
            self._late.append(time.perf_counter() - t - self.period)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def lap(self) -> dict:
        """The wakes since the previous lap; the first lap starts the thread (so that a DataLoader
        forks its workers before it runs: forking a process with threads is not safe)."""
        self.start()
        late, self._late = self._late, []
        a = np.asarray(late)
        if not len(a):
            return dict(probe_wakes=0, gil_busy_share=None, gil_wait_ms=None)
        return dict(probe_wakes=int(len(a)), gil_busy_share=float((a > self.delayed).mean()),
                    gil_wait_ms=1e3 * float(a.mean()))


class Recorder:
    """What :func:`measure_loader` laps at the start and the end of its timed window: the GIL probe,
    the event-loop heartbeat and the pipeline's stage counters (each optional)."""

    def __init__(self, gil: GilProbe | None = None, loop: LoopProbe | None = None, stages: SpdlStages | None = None):
        self.gil, self.loop, self.stages = gil, loop, stages

    def lap(self) -> list[dict]:
        rows = self.stages.lap() if self.stages is not None else []
        probe = dict(stage="_probe")
        if self.gil is not None:
            probe.update(self.gil.lap())
        if self.loop is not None:
            probe.update(self.loop.lap())
        return rows + [probe]


# --------------------------------------------------------------------------- windows
def paper_in_flight(kind: str, concurrency: int, *, batch_size: int, images_per_task: int = 0,
                    prefetch_factor: int = 2) -> int:
    """Batches a paper loader works on ahead of the consumer once full (:func:`.loaders.in_flight`)."""
    return in_flight("dataloader" if kind.startswith("dl_") else "spdl_batch", concurrency, batch_size=batch_size,
                     prefetch_factor=prefetch_factor, images_per_task=images_per_task)


def paper_wave(kind: str, concurrency: int, *, batch_size: int, images_per_task: int = 0) -> int:
    return wave("dataloader" if kind.startswith("dl_") else "spdl_batch", concurrency, batch_size=batch_size,
                images_per_task=images_per_task)


def paper_window(kind: str, concurrency: int, *, batch_size: int, batches: int, factor: int,
                 images_per_task: int = 0, prefetch_factor: int = 2, warm_batches: int = 2) -> tuple[int, int]:
    """(batches skipped, batches timed): the skipped are those in flight; the timed at least
    ``batches`` and ``factor`` × those in flight, in whole waves."""
    f = paper_in_flight(kind, concurrency, batch_size=batch_size, images_per_task=images_per_task,
                        prefetch_factor=prefetch_factor)
    w = paper_wave(kind, concurrency, batch_size=batch_size, images_per_task=images_per_task)
    n = max(batches, factor * f)
    return max(warm_batches, f), -(-n // w) * w


def fits(kind, c, *, k=0, n_images, **w) -> bool:
    skip, timed = paper_window(kind, c, images_per_task=k, **w)
    return (skip + timed + 1) * w["batch_size"] <= n_images


def fit_level(kind: str, c: int, *, k: int = 0, n_images: int, **w) -> int:
    """The largest level <= ``c`` whose windows fit ``n_images`` (0: none does)."""
    while c >= 1 and not fits(kind, c, k=k, n_images=n_images, **w):
        c = c // 2 if c > 1 else 0
    return max(c, 0)


def task_sizes(batch_size: int) -> list[int]:
    """Images per decode task of the sweep: 1, an eighth of a batch (when it divides it), a batch."""
    part = batch_size // 8 if batch_size % 8 == 0 and batch_size >= 16 else (batch_size // 2 if batch_size % 2 == 0
                                                                               else 1)
    return sorted({1, max(1, part), batch_size})


def auto_configs(cores: int, batch_size: int) -> list[tuple[int, int, int]]:
    """(images per task, concurrency, threads) of the sweep, from the cores: one task per image at
    the cores; part-batch tasks at the cores (the pool sized to the stages, and twice as large) and
    at twice the cores; whole-batch tasks at half the cores. (Whole-batch tasks at the cores, SPDL's
    example, are the comparison's pipeline: its warm runs join the sweep.)"""
    sizes = task_sizes(batch_size)
    one, part = sizes[0], sizes[len(sizes) // 2]
    half = max(1, cores // 2)
    out = [(one, cores, cores + 4), (part, cores, cores + 4), (part, cores, 2 * cores + 4),
           (part, 2 * cores, 2 * cores + 4), (batch_size, half, half + 4)]
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------- GIL-held time of each operation
def gil_held(files, *, out_size: int, batch_size: int, images: int, how: str, decoders) -> list[dict]:
    """Each operation alone on this thread over ``images`` images (page cache warm) while the probe
    thread runs: ms per image (wall), the share of probe wakes it delayed above the probe's floor
    (op "idle": this thread asleep) — the share of its time it held the lock — and their product,
    the GIL-held ms per image."""
    paths = [str(f) for f in files[:max(1, images)]]
    datas = [_read(p) for p in paths]
    arrs = [decode_one("pillow", d, out_size) for d in datas]
    k = min(batch_size, len(paths))
    normed = [normalise_image(a, how) for a in arrs[:k]]
    u8 = torch.from_numpy(np.stack(arrs[:k])).permute(0, 3, 1, 2)
    ops = {"idle": (lambda: time.sleep(0.01), 1),   # the probe's own floor: no other thread wants the lock
           "read": (lambda: [_read(p) for p in paths], len(paths)),
           "decode_pillow": (lambda: [decode_one("pillow", d, out_size) for d in datas], len(paths)),
           "transforms": (lambda: [normalise_image(a, how) for a in arrs], len(paths)),
           "collate": (lambda: torch.stack(normed), k),
           "normalise_batch": (lambda: normalise_batch(u8), k)}
    if "spdl" in decoders:
        ops["decode_spdl"] = (lambda: [decode_one("spdl", d, out_size) for d in datas], len(paths))
        ops["decode_spdl_batch"] = (lambda: load_chunk(out_size, [(p, 0) for p in paths[:k]]), k)
    rows, floor = [], 0.0
    with GilProbe() as probe:
        for op in GIL_OPS:
            if op not in ops:
                continue
            fn, n = ops[op]
            fn()                         # warm
            reps, t0 = 0, time.perf_counter()
            probe.lap()
            while True:                  # at least 0.2 s of probe samples
                fn()
                reps += 1
                if time.perf_counter() - t0 >= 0.2:
                    break
            dt = time.perf_counter() - t0
            p = probe.lap()
            ms = 1e3 * dt / (reps * n)
            raw = p["gil_busy_share"] if p["gil_busy_share"] is not None else float("nan")
            if op == "idle":
                floor = raw if math.isfinite(raw) else 0.0
                rows.append(dict(op=op, images=0, ms_per_image=None, raw_share=raw, held_share=0.0,
                                 held_ms_per_image=0.0, probe_wakes=p["probe_wakes"]))
                continue
            share = max(0.0, (raw - floor) / (1 - floor)) if floor < 1 else raw
            rows.append(dict(op=op, images=reps * n, ms_per_image=ms, raw_share=raw, held_share=share,
                             held_ms_per_image=ms * share, probe_wakes=p["probe_wakes"]))
    return rows


# --------------------------------------------------------------------------- free-threaded Python
FT_INTERPRETERS = ("python3.14t", "python3.13t")


def free_threaded_check() -> dict:
    """Look for a free-threaded interpreter on this host (PATH) and whether it runs without the GIL:
    what the chapter tried, recorded for its skip note (no package index serves CPython builds)."""
    found = {}
    for exe in FT_INTERPRETERS:
        path = shutil.which(exe)
        if not path:
            continue
        try:
            out = subprocess.run([path, "-c", "import sys; print(sys._is_gil_enabled())"], capture_output=True,
                                 text=True, timeout=20)
            found[exe] = dict(path=path, gil_enabled=out.stdout.strip() == "True", ok=out.returncode == 0)
        except Exception as e:  # pragma: no cover - depends on the host
            found[exe] = dict(path=path, error=type(e).__name__)
    return dict(looked_for=list(FT_INTERPRETERS), found=found)


# --------------------------------------------------------------------------- the experiment
def _cpu_ms(row: dict) -> float:
    n = row.get("images") or 0
    return 1e3 * (row["cpu_user_s"] + row["cpu_system_s"]) / n if n else float("nan")


def run_paper(files, *, params: dict, device: str, rng, purge, decoders, cores: int, progress=None) -> dict:
    """Experiment 7: the calibration, the comparison (cold once, warm every repeat), the sweep (warm), and
    fresh warm runs of the sweep's best setting (``confirm``: a maximum is biased upward in the runs that picked
    it, so its value is measured again). Returns tables (lists of rows) and metadata. ``purge(paths)`` evicts files
    from the page cache and returns the resident fraction after; a failed run is recorded, not raised. ``best``: the
    sweep's chosen setting (:func:`.choice.best_setting`), the one its fresh runs and the end-to-end step take."""
    p = params
    how, how_note = transforms_status()
    B, S = p["batch_size"], p["out_size"]
    win = dict(batch_size=B, batches=p["loader_batches"], factor=p["paper_window_factor"],
               prefetch_factor=p["prefetch_factor"], warm_batches=p["warm_batches"])
    n = len(files)
    clamped, errors, seconds = [], [], {}
    t0 = time.perf_counter()
    held = gil_held(files, out_size=S, batch_size=B, images=p["gil_images"], how=how, decoders=decoders)
    seconds["gil_held"] = time.perf_counter() - t0

    want = cores if p["paper_workers"] == "auto" else int(p["paper_workers"])
    workers = fit_level("dl_pillow", want, n_images=n, **win)
    configs = auto_configs(cores, B) if p["paper_configs"] == "auto" else [tuple(c) for c in p["paper_configs"]]
    sweep = []
    for k, c, t in configs:
        cc = fit_level("spdl_batch", c, k=k, n_images=n, **win)
        if cc != c:
            clamped.append(dict(what="sweep", images_per_task=k, wanted=c, got=cc))
        if cc:
            sweep.append((k, cc, max(t - c + cc, cc + 1)))
    paper_cfg = (B, fit_level("spdl_batch", want, k=B, n_images=n, **win), 0)
    paper_cfg = (B, paper_cfg[1], paper_cfg[1] + 4)
    if workers != want:
        clamped.append(dict(what="dataloader", wanted=want, got=workers))
    if paper_cfg[1] != want:
        clamped.append(dict(what="spdl_batch", wanted=want, got=paper_cfg[1]))

    plan = []
    for r in range(p["repeats"]):
        for state in ("cold", "warm") if r == 0 else ("warm",):
            plan += [("dl_pillow", workers, 0, 0, state, r), ("dl_spdl", workers, 0, 0, state, r),
                     ("spdl_batch", paper_cfg[1], paper_cfg[0], paper_cfg[2], state, r)]
    plan += [("sweep", c, k, t, "warm", 0) for k, c, t in sweep]
    comp, sw, confirm, stage_rows = [], [], [], []
    tables = dict(comparison=comp, sweep=sw, confirm=confirm)

    def one(kind, c, k, threads, state, r):
        lk = "spdl_batch" if kind in ("sweep", "confirm") else kind
        skip, timed = paper_window(lk, c, images_per_task=k, **win)
        order = rng.permutation(n)[:(skip + timed + 1) * B].tolist()
        paths = [files[i] for i in order]
        if state == "cold":
            resident = purge(paths)
        else:
            for f in paths:
                _read(f)
            resident = 1.0
        stages = SpdlStages() if lk == "spdl_batch" else None
        loop = LoopProbe() if lk == "spdl_batch" else None
        step = None
        if lk == "spdl_batch":
            mk = partial(spdl_batch_iter, files, order, batch_size=B, out_size=S, images_per_task=k, concurrency=c,
                         threads=threads, transfer=device == "cuda", stages=stages, loop=loop)
            step = _normalise_step
        else:
            mk = partial(paper_dataloader_iter, files, order, batch_size=B, out_size=S, workers=c,
                         decoder="pillow" if lk == "dl_pillow" else "spdl", how=how,
                         prefetch_factor=p["prefetch_factor"], pin=device == "cuda")
        gp = GilProbe()
        try:
            row = measure_loader(mk, batches=timed, warm=skip, device=device, stages=Recorder(gp, loop, stages),
                                 step=step)
        except Exception as e:
            errors.append(dict(what=f"paper {kind}, {c}, {k} per task, {state}",
                               error=f"{type(e).__name__}: {str(e).strip()[:200]}"))
        else:
            gp.close()
            st = row.pop("stages", [])
            probe = {k: v for x in st if x.get("stage") == "_probe" for k, v in x.items() if k != "stage"}
            out = dict(loader=lk, concurrency=c, images_per_task=k or None, threads=threads or None, state=state,
                       repeat=r, warm=skip, resident_at_start=resident, **row, **probe)
            out["cpu_ms_per_image"] = _cpu_ms(out)
            if probe.get("gil_busy_share") is not None and out["images"]:
                out["gil_held_ms_per_image"] = 1e3 * probe["gil_busy_share"] * out["seconds"] / out["images"]
            cfg = f"{k} per task, {c} at once, {threads} threads" if lk == "spdl_batch" else f"{c} workers"
            run = kind if kind in ("sweep", "confirm") else "comparison"
            stage_rows.extend(dict(run=run, loader=lk, config=cfg, state=state, repeat=r, **x)
                              for x in st if x.get("stage") != "_probe")
            tables[run].append(dict(out, config=cfg))
        finally:
            gp.close()
        if progress is not None:
            progress.update(1)

    t0 = time.perf_counter()
    for kind, c, k, threads, state, r in plan:
        if c >= 1:
            one(kind, c, k, threads, state, r)
    # the best of a sweep is its maximum, picked from the runs that chose it (biased upward): the verdict's value
    # comes from fresh runs of the chosen setting, as many as the comparison's
    best = choice.best_setting(choice.warm_pipeline_rows(pd.DataFrame(comp), pd.DataFrame(sw)))
    if best is not None:
        for r in range(p["repeats"]):
            one("confirm", best["concurrency"], best["images_per_task"], best["threads"], "warm", r)
    seconds["runs"] = time.perf_counter() - t0
    meta = dict(transforms=how, transforms_note=how_note, workers=workers, spdl_config=dict(
        images_per_task=paper_cfg[0], concurrency=paper_cfg[1], threads=paper_cfg[2]),
        configs=[dict(images_per_task=k, concurrency=c, threads=t) for k, c, t in sweep], clamped=clamped,
        normalise=dict(dataloader="worker", spdl="device"), window_factor=p["paper_window_factor"],
        probe=dict(period_ms=1e3 * PROBE_PERIOD_S, delayed_ms=1e3 * DELAYED_S), cores=cores, errors=errors,
        seconds=seconds)
    return dict(comparison=comp, sweep=sw, confirm=confirm, stages=stage_rows, gil_held=held, meta=meta, best=best)


def _normalise_step(x, y):
    normalise_batch(x)


def paper_plan_size(params: dict) -> int:
    """How many runs the experiment makes (for a progress bar): three loaders cold once and warm
    every repeat, the sweep, and the fresh runs of its best setting."""
    cores = len(os.sched_getaffinity(0))
    n_cfg = len(auto_configs(cores, params["batch_size"])) if params["paper_configs"] == "auto" else len(
        params["paper_configs"])
    return 3 * (params["repeats"] + 1) + n_cfg + params["repeats"]


def decomposition(dl_pillow: float, dl_spdl: float, spdl: float) -> dict:
    """The paper's gain (SPDL pipeline over the Pillow DataLoader, a ratio of rates) split into the
    decoder's factor (DataLoader with spdl.io over DataLoader with Pillow) and the parallelism's
    factor (SPDL pipeline over DataLoader with spdl.io); their product is the whole. Shares are of
    the whole in logarithms (a factor below 1 gets a negative share)."""
    if not all(v and v > 0 and math.isfinite(v) for v in (dl_pillow, dl_spdl, spdl)):
        return dict(total=None, decoder=None, parallelism=None, decoder_share=None, parallelism_share=None)
    tot, dec, par = spdl / dl_pillow, dl_spdl / dl_pillow, spdl / dl_spdl
    lt = math.log(tot)
    return dict(total=tot, decoder=dec, parallelism=par,
                decoder_share=math.log(dec) / lt if abs(lt) > 1e-9 else None,
                parallelism_share=math.log(par) / lt if abs(lt) > 1e-9 else None)
