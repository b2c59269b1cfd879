"""Chapter 7: the full picture - a profiled training loop fed from files or from shards.

Each step is split into the phases a profiler shows (``record_function`` ranges):
DATALOADER_WAIT (host clock: how long ``next(loader)`` blocked), H2D_TRANSFER, FORWARD,
BACKWARD and OPTIMIZER (CUDA events between the phases on a GPU, a host clock on a CPU).
Every step ends with a synchronisation so that its phases can be attributed. From the
phases: compute = forward + backward + optimizer, data-wait share, images/s and the
accelerator utilisation AU = compute / wall. GPU utilisation (NVML) and CPU utilisation
(psutil) are sampled in a background thread while the steps run.

The ceiling is the same loop fed by one batch kept in GPU memory: no loading, no copy.
"""
from __future__ import annotations

import os
import threading
import time
from itertools import cycle
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.profiler import record_function

PHASES = ("DATALOADER_WAIT", "H2D_TRANSFER", "FORWARD", "BACKWARD", "OPTIMIZER")


def make_model(name: str, classes: int) -> nn.Module:
    """``resnet50`` (torchvision, random weights, no download) or ``small_cnn`` (for CPU runs)."""
    if name == "resnet50":
        try:
            from torchvision.models import resnet50
        except ImportError:
            from .book.params import ParameterError

            raise ParameterError("model", name, "'small_cnn' here: resnet50 needs torchvision") from None
        return resnet50(weights=None, num_classes=classes)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


class _Marks:
    """Phase boundaries: CUDA events on a GPU, host clock on a CPU."""

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


class UtilSampler:
    """GPU utilisation (NVML) and CPU utilisation (psutil) sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.05):
        import psutil

        self.interval, self.rows, self._stop = interval, [], threading.Event()
        self.psutil = psutil
        self.nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
        except Exception:  # noqa: BLE001 - no NVML (no GPU, or the package is missing): CPU only
            self.nvml = None

    def _run(self):
        self.psutil.cpu_percent(interval=None)
        t0 = time.perf_counter()
        while not self._stop.wait(self.interval):
            gpu = None
            if self.nvml:
                gpu = self.nvml[0].nvmlDeviceGetUtilizationRates(self.nvml[1]).gpu
            self.rows.append(dict(t=time.perf_counter() - t0, gpu_util=gpu, cpu_util=self.psutil.cpu_percent(None)))

    def __enter__(self):
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        return False


def train_steps(batches, model: nn.Module, opt, *, steps: int, device: str, on_gpu_batch: bool = False,
                profiler=None) -> pd.DataFrame:
    """Run ``steps`` training steps from the iterator ``batches``; one row per step with each phase's ms."""
    cuda = device == "cuda"
    loss_fn = nn.CrossEntropyLoss()
    rows = []
    for step in range(steps):
        marks = _Marks(cuda)
        t0 = time.perf_counter()
        with record_function("DATALOADER_WAIT"):
            x, y = next(batches)
        t1 = time.perf_counter()
        marks.mark()
        with record_function("H2D_TRANSFER"):
            if not on_gpu_batch:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
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
        rows.append(dict(step=step, DATALOADER_WAIT=(t1 - t0) * 1e3, H2D_TRANSFER=h2d, FORWARD=fwd, BACKWARD=bwd,
                         OPTIMIZER=optim, wall_ms=(t2 - t0) * 1e3, images=int(x.shape[0])))
        if profiler is not None:
            profiler.step()
    df = pd.DataFrame(rows)
    df["compute_ms"] = df["FORWARD"] + df["BACKWARD"] + df["OPTIMIZER"]
    return df


def summarise(df: pd.DataFrame, warmup: int) -> dict:
    s = df[df["step"] >= warmup]
    wall = s["wall_ms"].sum()
    out = {p: s[p].mean() for p in PHASES}
    out.update(first_batch_ms=df["DATALOADER_WAIT"].iloc[0], step_ms=s["wall_ms"].mean(),
               compute_ms=s["compute_ms"].mean(), images_per_s=s["images"].sum() / (wall / 1e3),
               wait_share=s["DATALOADER_WAIT"].sum() / wall, au=s["compute_ms"].sum() / wall, steps=len(s))
    return out


def ceiling(model, opt, *, batch_size: int, out_size: int, classes: int, steps: int, warmup: int,
            device: str) -> pd.DataFrame:
    """The loop fed by one batch that stays in device memory: the most images/s this model can take."""
    x = torch.randn(batch_size, 3, out_size, out_size, device=device)
    y = torch.randint(0, classes, (batch_size,), device=device)
    return train_steps(cycle([(x, y)]), model, opt, steps=steps + warmup, device=device, on_gpu_batch=True)


def profile_trace(batches, model, opt, *, device: str, out_dir, steps: int = 6) -> str:
    """A few steps under ``torch.profiler``; the trace (Chrome trace JSON, which TensorBoard's
    profiler plugin and Perfetto both open) is written into ``out_dir``. Returns its file name."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=max(1, steps - 2), repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(out_dir), worker_name="trace")) as prof:
        train_steps(batches, model, opt, steps=steps, device=device, profiler=prof)
    files = sorted(p.name for p in Path(out_dir).glob("*.json*"))
    return files[-1] if files else ""


def util_summary(rows: list[dict]) -> dict:
    if not rows:
        return dict(gpu_util=np.nan, cpu_util=np.nan)
    df = pd.DataFrame(rows)
    g = df["gpu_util"].dropna()
    return dict(gpu_util=float(g.mean()) if len(g) else np.nan, cpu_util=float(df["cpu_util"].mean()))

# --------------------------------------------------------------------------- chapter
CHAPTER = "07_full_picture"
FORMATS = ("imagefolder", "mds")


def forever(loader):
    """Batches from ``loader``, starting a new epoch when one ends."""
    while True:
        yield from loader


def check_parameters(p: dict) -> dict:
    from .book.params import ParameterError, choices, int_list, positive_int

    q = dict(p)
    q["batch_size"] = positive_int("batch_size", p["batch_size"], maximum=65536)
    q["n_images"] = positive_int("n_images", p["n_images"], maximum=10_000_000)
    if q["n_images"] < q["batch_size"]:
        raise ParameterError("n_images", q["n_images"], f"at least one batch (batch_size = {q['batch_size']})")
    q["out_size"] = positive_int("out_size", p["out_size"], maximum=4096)
    q["formats"] = choices("formats", p["formats"], FORMATS)
    cores = len(os.sched_getaffinity(0))
    q["workers"] = int_list("workers", p["workers"], minimum=0, maximum=max(64, 4 * cores))
    q["steps"] = positive_int("steps", p["steps"], maximum=100_000)
    q["warmup_steps"] = positive_int("warmup_steps", p["warmup_steps"], maximum=10_000)
    if p["model"] not in ("resnet50", "small_cnn"):
        raise ParameterError("model", p["model"], "'resnet50' or 'small_cnn'")
    return q


def preflight(params: dict):
    """Parameters, output directory and free disk, before any work. A missing mosaicml-streaming
    is not an error: the MDS half is skipped with the reason, the ImageFolder half runs."""
    from . import datasets, images
    from .book import results
    from .book.params import creatable_dir

    p = check_parameters(params)
    creatable_dir("run_dir", results.resolve_run_dir(p.get("run_dir")))
    plan = images.image_folder_plan(p["n_images"], p["image_size"], p["jpeg_quality"], p["classes"], p["seed"])
    need = [plan] + ([images.mds_plan(plan)] if "mds" in p["formats"] else [])
    parent = datasets.check_space(p.get("data_dir"), need)
    return p, parent


def _files_of(fmt: str, src, shards) -> list:
    return src.files if fmt == "imagefolder" else sorted(p for p in shards.rglob("*") if p.is_file())


def run(*, n_images: int, image_size: int, jpeg_quality: int, classes: int, out_size: int, batch_size: int,
        model: str, lr: float, formats, workers, steps: int, warmup_steps: int, purge_method: str,
        profile: bool, seed: int = 0, data_dir=None, run_dir=None, progress: bool = True):
    """Run chapter 7 and save the result (tables + fingerprint) to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    from . import images, pagecache
    from .book import results
    from .starvation import measure_cost_ms

    p, parent = preflight(params)
    rd = results.resolve_run_dir(run_dir)
    res = results.start(CHAPTER, params, run_dir, parent)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    src = images.image_folder(parent, n_images=n_images, size=image_size, quality=jpeg_quality, classes=classes,
                              seed=seed, progress=progress)
    mds_ok, mds_why = images.streaming_status()
    shards = images.mds_shards(src, parent, progress=progress) if ("mds" in p["formats"] and mds_ok) else None
    fmts = [f for f in p["formats"] if f == "imagefolder" or shards is not None]

    torch.manual_seed(seed)
    net = make_model(model, classes).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    ceil = ceiling(net, opt, batch_size=batch_size, out_size=out_size, classes=classes, steps=steps,
                   warmup=warmup_steps, device=device)  # also the CUDA warm-up before any cold read
    ceil_s = summarise(ceil, warmup_steps)

    def loader(fmt: str, w: int):
        if fmt == "imagefolder":
            ds, shuffle = images.ImageFolderDataset(src, out_size), True
        else:
            ds, shuffle = images.mds_dataset(shards, out_size, batch_size=batch_size, seed=seed), False
        return DataLoader(ds, batch_size=batch_size, shuffle=shuffle, num_workers=w, pin_memory=device == "cuda",
                          drop_last=True)

    step_tables, summary, util = [], [], []
    with tqdm(total=len(fmts) * len(p["workers"]), desc="chapter 7 scenarios", disable=not progress) as bar:
        for fmt in fmts:
            for w in p["workers"]:
                purge = pagecache.purge(_files_of(fmt, src, shards), purge_method)
                with UtilSampler() as us:
                    df = train_steps(forever(loader(fmt, w)), net, opt, steps=steps + warmup_steps, device=device)
                s = summarise(df, warmup_steps)
                u = util_summary(us.rows)
                summary.append(dict(format=fmt, workers=w, **s, **u, pct_of_ceiling=100 * s["images_per_s"]
                                    / ceil_s["images_per_s"], purge_method=purge.method,
                                    resident_before_purge=purge.before["fraction"],
                                    resident_at_start=purge.after["fraction"]))
                step_tables.append(df.assign(format=fmt, workers=w))
                util += [dict(r, format=fmt, workers=w) for r in us.rows]
                bar.update(1)
    traces = {}
    if profile:
        for fmt in fmts:
            out = rd / "traces" / fmt
            out.mkdir(parents=True, exist_ok=True)
            traces[fmt] = str(out.relative_to(rd) / profile_trace(forever(loader(fmt, max(p["workers"]))), net, opt,
                                                                  device=device, out_dir=out))
    # one core's cost per image for the light transforms (steady state, files already cached)
    decode_ms = measure_cost_ms(images.ImageFolderDataset(src, out_size), samples=200)
    res.add("scenarios", summary)
    res.add("steps", pd.concat(step_tables, ignore_index=True))
    res.add("ceiling", [dict(ceil_s, model=model, device=device)])
    res.add("utilisation", util)
    res.metadata.update(device=device, model=model, mds_available=mds_ok, mds_note=None if shards else mds_why,
                        traces=traces, decode_ms_per_image=decode_ms,
                        workers_needed_for_ceiling=ceil_s["images_per_s"] * decode_ms / 1e3,
                        datasets={"imagefolder": src.manifest})
    res.save(rd)
    return res


def key_metrics(res) -> dict:
    s = res.table("scenarios").set_index(["format", "workers"])
    out = {}
    for fmt, label in (("imagefolder", "ImageFolder"), ("mds", "streaming (MDS)")):
        for w in (0, 4):
            if (fmt, w) in s.index:
                r = s.loc[(fmt, w)]
                out[f"{label}, workers={w}: data wait"] = (r["DATALOADER_WAIT"], None)
                out[f"{label}, workers={w}: images/s"] = (r["images_per_s"], None)
    if len(s):
        out["compute per step (forward+backward+optimizer)"] = (s["compute_ms"].mean(), None)
        out["H2D per step"] = (s["H2D_TRANSFER"].mean(), None)
    return out
