"""Chapter 4: CPU starvation - when preprocessing cannot keep the accelerator busy.

Model: each sample costs ``D`` ms of CPU work, a batch holds ``B`` samples, ``W`` worker
processes prepare batches in parallel and the training step takes ``G`` ms. A worker needs
``D·B`` ms per batch, so ``W`` workers deliver one every ``D·B/W`` ms; the step waits for
data whenever that exceeds ``G``:

* ``W = 0`` (loading in the training process, no overlap): wait = ``D·B``;
* ``W ≥ 1`` (steady state): wait = ``max(0, D·B/W − G)``.

What is measured per step: the data wait (host clock from the end of one step to the
arrival of the next batch), the compute time (CUDA events around real GPU work, synchronised;
on a CPU-only host a ``sleep``, labelled simulated), and from them the GPU-idle share and
the accelerator utilisation AU. ``G`` is calibrated in steady state (a sustained run of
back-to-back steps, not one burst after an idle GPU), and AU is counted against it:
AU = steps × G / wall time, the way MLPerf Storage counts an emulated accelerator's fixed
compute time (a run keeps up at AU ≥ :data:`AU_THRESHOLD`). Where NVML is available
(``pynvml`` from nvidia-ml-py), the SM clock, power and clock-limit reasons are sampled in
the background and attached to every step.

Experiments: the published case; a worker sweep for three kinds of per-sample work; the
step after controlled idle gaps (no DataLoader) to find why a step's time depends on what
came before it; ``prefetch_factor`` in a balanced case (``D·B/W = G``) with constant and
with variable per-sample cost; and the epoch boundary with and without persistent workers.
"""
from __future__ import annotations

import dataclasses
import io
import math
import os
import time
import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from datajourney.chapters.c04_cpu_starvation.model import AU_THRESHOLD, predicted_au, predicted_wait_ms
from datajourney.chapters.c04_cpu_starvation.params import COST_PROFILES, DEFAULT_PREFETCH, Params
from datajourney.core.params import ParameterError, memory, requires, run_options
from datajourney.core.timing import Laps, NvmlSampler, cuda_ms, run_sustained, steady_state

WORK_KINDS = ("sleep", "tokenize", "decode")
#: Pixels per unit of ``real_work_scale`` for the decode work (image side), and the largest side.
DECODE_PX, DECODE_MAX_PX = 16, 4096
#: At least this many items are timed to measure the cost of one item of real work.
COST_SAMPLES = 32
#: Distinct texts the tokenize work cycles through (its per-sample cost is their mean).
TOKENIZE_TEXTS = 64
#: The balanced case of the prefetch experiment: D·B/W = PREFETCH_LOAD × G, just under the step.
PREFETCH_LOAD = 0.95
#: Seconds the GPU idles before the drift trace, so that the trace starts from a rested GPU.
IDLE_BEFORE_TRACE_S = 1.0


# --------------------------------------------------------------------------- per-sample work
class WorkDataset(Dataset):
    """Each item costs CPU work of one kind and returns a small tensor.

    ``sleep``: ``time.sleep`` of the item's cost (the published, simulated cost; it releases the
    CPU); with ``variable=True`` item ``i`` costs ``cost_ms`` times an exponential draw of mean 1
    (seeded), so batches vary in cost as real samples do;
    ``tokenize``: GPT-2 byte-level BPE of a real text (``texts[i]`` repeated ``scale`` times);
    ``decode``: JPEG decode + conversion of an in-memory image of ``scale`` × 16 pixels square.
    """

    def __init__(self, n: int, kind: str, *, cost_ms: float = 5.0, scale: int = 1, texts=None, tokenizer=None,
                 seed: int = 0, variable: bool = False, n_images: int = 8, timed: bool = False):
        self.n, self.kind, self.cost_ms, self.scale = n, kind, cost_ms, scale
        #: With ``timed``, every item carries two more values: the wall and the CPU nanoseconds its work
        #: took where it ran (main process or worker), so the loop can read D as the loader paid it.
        self.timed = timed
        self.costs = None
        if kind == "sleep" and variable:  # exponential draws, scaled so that their mean is exactly cost_ms
            draws = np.random.default_rng([seed, 4]).exponential(1.0, n)
            self.costs = cost_ms * draws / draws.mean()
        if kind == "tokenize":
            if not texts or tokenizer is None:
                raise ValueError("tokenize work needs texts and a tokenizer")
            self.texts = [" ".join([t] * scale) for t in texts]
            self.tokenizer = tokenizer
        elif kind == "decode":
            from datajourney.toolkit.images import jpeg

            self.jpegs = [jpeg(seed, k, DECODE_PX * scale, 80) for k in range(n_images)]

    def __len__(self):
        return self.n

    @property
    def period(self) -> int:
        """How many distinct items the dataset cycles through (its cost repeats with this period)."""
        if self.kind == "tokenize":
            return len(self.texts)
        if self.kind == "decode":
            return len(self.jpegs)
        return self.n if self.costs is not None else 1

    def __getitem__(self, i):
        if not self.timed:
            return self._item(i)
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        x = self._item(i)
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        return torch.cat([x, torch.tensor([t1 - t0, c1 - c0], dtype=torch.int64)])

    def _item(self, i):
        if self.kind == "sleep":
            cost = self.cost_ms if self.costs is None else self.costs[i]
            if cost > 0:
                time.sleep(cost / 1e3)
            return torch.zeros(64, dtype=torch.int64)
        if self.kind == "tokenize":
            ids = self.tokenizer.encode(self.texts[i % len(self.texts)]).ids[:64]
            return torch.tensor(ids + [0] * (64 - len(ids)), dtype=torch.int64)
        from PIL import Image

        img = Image.open(io.BytesIO(self.jpegs[i % len(self.jpegs)])).convert("RGB")
        return torch.from_numpy(np.asarray(img)[:8, :8, 0].reshape(-1).astype(np.int64))


def calibrate_scale(make, kind: str, target_ms: float, samples: int = COST_SAMPLES, *, max_scale: int = 1000,
                    tol: float = 0.05) -> int:
    """The ``scale`` at which one item of real work costs about ``target_ms`` in this process,
    measured on the same items as :func:`measure_cost_ms` will be.

    Tokenising cost grows with the text length (linear in scale), decoding with the image
    area (quadratic in scale); a fixed per-item overhead makes one step of the power law
    miss, so it iterates until within ``tol`` (or the scale stops changing)."""
    power = 0.5 if kind == "decode" else 1.0
    scale, seen = (32 if kind == "decode" else 8), {}
    for _ in range(8):
        d = measure_cost_ms(make(scale), samples)
        seen[scale] = d
        if abs(d - target_ms) <= tol * target_ms:
            break
        new = int(min(max(round(scale * (target_ms / max(d, 1e-3)) ** power), 1), max_scale))
        if new in seen:
            break
        scale = new
    return min(seen, key=lambda s: abs(seen[s] - target_ms))


def measure_cost_ms(ds: WorkDataset, samples: int = COST_SAMPLES, repeats: int = 3) -> float:
    """Mean CPU cost of one item in this process (D for the real kinds of work), in steady state.

    The items cycle through a fixed set (``ds.period`` distinct texts or images), so the stream's
    mean cost is the mean over one full period: that is what is timed (repeated until at least
    ``samples`` items), after one untimed pass (imports, allocations, the tokenizer's word cache,
    which forked workers inherit); ``repeats`` timed passes, the median counts."""
    period = ds.period
    items = list(range(period)) * max(1, math.ceil(samples / period))
    for i in range(period):
        ds[i]
    passes = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in items:
            ds[i]
        passes.append((time.perf_counter() - t0) * 1e3 / len(items))
    return float(np.median(passes))


# --------------------------------------------------------------------------- the training step
def calibrate_step(units, target_ms: float, *, sustain_ms: float, idle_s: float, sleep=time.sleep,
                   burst_units: int = 8) -> dict:
    """How many units of work make a step of ``target_ms`` *in steady state*.

    ``units(n)`` runs ``n`` units of work back-to-back and returns their time in ms. A burst
    after warm-up gives a first size; steps of that size are then run back-to-back for
    ``sustain_ms`` (the "sizing" trace) and the size is rescaled to the steady state (median of
    the trace's second half). After ``idle_s`` of rest a second trace of the final size shows
    the drift from a rested device to steady state ("drift" trace); its steady state is the
    calibrated step G."""
    for _ in range(3):
        units(max(1, burst_units // 2))  # warm-up (library initialisation, caches)
    one = min(units(burst_units) for _ in range(3)) / burst_units
    n0 = max(1, round(target_ms / one))
    sizing = run_sustained(lambda: units(n0), sustain_ms)
    s0 = steady_state([r["ms"] for r in sizing])
    n = max(1, round(n0 * target_ms / s0["steady_ms"]))
    if idle_s:
        sleep(idle_s)
    drift = run_sustained(lambda: units(n), sustain_ms)
    st = steady_state([r["ms"] for r in drift])
    return dict(units=n, burst_unit_ms=one, burst_units=n0, burst_step_ms=one * n, sizing_steady_ms=s0["steady_ms"],
                sizing_trace=sizing, drift_trace=drift, **st)


class Step:
    """A training step of ``g_ms`` milliseconds *in steady state*: real GPU work when CUDA is
    there, else a sleep (simulated).

    On CUDA the work is a chain of bf16 4096² matrix products, each step timed with CUDA events
    and synchronised. Its length is calibrated by :func:`calibrate_step`: back-to-back, for
    ``calibration_s`` seconds, so that G is the time a step takes when the GPU is kept busy
    (``steady_ms``), not the faster time of a step that follows an idle GPU. ``units`` replaces
    the work (a function ``n -> ms``), for tests.
    """

    def __init__(self, g_ms: float, device: str | None = None, *, calibration_s: float = 3.0,
                 idle_s: float | None = None, units=None, sleep=time.sleep):
        self.g_ms = g_ms
        self.cuda = torch.cuda.is_available() if device is None else device == "cuda"
        if units is not None:
            self._units, self.kind = units, "custom work"
        elif self.cuda:
            self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            self.b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            self._units, self.kind = (lambda n: cuda_ms(self._matmul, n)), "GPU matmul (CUDA events)"
        else:
            self._units, self.kind = self._sleep_units, "simulated: sleep (no CUDA)"
        if idle_s is None:
            idle_s = IDLE_BEFORE_TRACE_S if self.cuda else 0.0
        self.calibration = calibrate_step(self._units, g_ms, sustain_ms=1e3 * calibration_s, idle_s=idle_s,
                                          sleep=sleep)
        self.iters = self.calibration["units"]
        self.steady_ms = self.calibration["steady_ms"]      # G, calibrated in steady state
        self.calibrated_ms = self.steady_ms

    def _matmul(self):
        torch.mm(self.a, self.b)

    @staticmethod
    def _sleep_units(n: int) -> float:
        t0 = time.perf_counter()
        time.sleep(n / 1e3)  # one unit = 1 ms
        return (time.perf_counter() - t0) * 1e3

    def run(self) -> float:
        """One step of work without a batch; its compute time in ms."""
        return self._units(self.iters)

    def __call__(self, batch: torch.Tensor) -> float:
        """Run one step on ``batch``; return its compute time in ms."""
        if self.cuda and isinstance(batch, torch.Tensor):
            batch.to("cuda", non_blocking=True)
        return self.run()

    def calibration_table(self, origin: float = 0.0) -> pd.DataFrame:
        rows = [dict(phase=ph, **r) for ph in ("sizing", "drift") for r in self.calibration[ph + "_trace"]]
        df = pd.DataFrame(rows).rename(columns={"ms": "step_ms"})
        df["units"] = np.where(df["phase"] == "drift", self.iters, self.calibration["burst_units"])
        return df


def train_steps(loader: DataLoader, step: Step, steps: int) -> pd.DataFrame:
    """Iterate ``loader`` for ``steps`` steps (restarting epochs as needed); one row per step.
    ``t0``/``t1`` are the host clock (perf_counter seconds) at the batch's arrival and the step's end."""
    rows = []
    epoch = 0
    t_prev = time.perf_counter()
    t_start = t_prev
    timed = getattr(loader.dataset, "timed", False)
    while len(rows) < steps:
        for i, batch in enumerate(loader):
            t_got = time.perf_counter()
            compute = step(batch)
            t_done = time.perf_counter()
            rows.append(dict(step=len(rows), epoch=epoch, step_in_epoch=i, wait_ms=(t_got - t_prev) * 1e3,
                             compute_ms=compute, wall_ms=(t_done - t_prev) * 1e3,
                             since_start_ms=(t_got - t_start) * 1e3, t0=t_got, t1=t_done,
                             **(_work_times(batch) if timed else {})))
            t_prev = t_done
            if len(rows) >= steps:
                break
        epoch += 1
    return pd.DataFrame(rows)


def _work_times(batch: torch.Tensor) -> dict:
    """The per-sample work of a batch of a timed :class:`WorkDataset`, as paid where it ran (ms):
    mean wall time per sample and mean CPU time per sample (wall above CPU: it waited for a core)."""
    n = batch.shape[0]
    return dict(work_wall_ms=float(batch[:, -2].sum()) / 1e6 / n, work_cpu_ms=float(batch[:, -1].sum()) / 1e6 / n)


def make_loader(ds: Dataset, *, batch_size: int, workers: int, prefetch_factor: int | None = None,
                persistent_workers: bool = False) -> DataLoader:
    kw = {}
    if workers > 0:
        kw = dict(prefetch_factor=prefetch_factor or DEFAULT_PREFETCH, persistent_workers=persistent_workers)
    return DataLoader(ds, batch_size=batch_size, shuffle=False, num_workers=workers, **kw)


def summarise_steps(df: pd.DataFrame, warmup: int, g_cal_ms: float | None = None) -> dict:
    """Steady-state statistics (after ``warmup`` steps) and the time to the first batch.

    ``au`` counts each step as ``g_cal_ms`` of useful work (the calibrated steady-state step):
    steps × G / wall. ``compute_share`` is the measured compute over the wall time. NVML
    counters, when the steps carry them, are averaged over the steady-state steps only."""
    s = df[df["step"] >= warmup]
    wall = s["wall_ms"].sum()
    g = g_cal_ms if g_cal_ms is not None else s["compute_ms"].mean()
    out = dict(first_batch_ms=df["wait_ms"].iloc[0], wait_ms=s["wait_ms"].mean(), wait_std_ms=s["wait_ms"].std(),
               wait_p10_ms=s["wait_ms"].quantile(0.1), wait_p90_ms=s["wait_ms"].quantile(0.9),
               compute_ms=s["compute_ms"].mean(), compute_std_ms=s["compute_ms"].std(),
               compute_p10_ms=s["compute_ms"].quantile(0.1), compute_p90_ms=s["compute_ms"].quantile(0.9),
               step_ms=s["wall_ms"].mean(),
               au=len(s) * g / wall if wall else float("nan"),
               compute_share=s["compute_ms"].sum() / wall if wall else float("nan"),
               idle_share=1 - s["compute_ms"].sum() / wall if wall else float("nan"), steps=len(s))
    for col in ("sm_clock_mhz", "power_w", "gpu_util_pct", "work_wall_ms", "work_cpu_ms"):
        if col in s and s[col].notna().any():
            out[col] = s[col].mean()
    if "power_capped" in s and s["power_capped"].notna().any():
        out["power_capped_share"] = s["power_capped"].astype(float).mean()
    return out


def _relative(df: pd.DataFrame, sampler: NvmlSampler | None, origin: float) -> pd.DataFrame:
    """NVML counters attached to each row's window, and its host times made relative to ``origin``."""
    if sampler is not None:
        df = sampler.annotate(df)
    df = df.copy()
    df["t_start_s"] = df.pop("t0") - origin
    df["t_end_s"] = df.pop("t1") - origin
    return df


# --------------------------------------------------------------------------- experiments
def worker_sweep(ds: WorkDataset, d_ms: float, *, batch_size: int, workers, step: Step, steps: int, warmup: int,
                 progress=None, sampler: NvmlSampler | None = None, origin: float | None = None,
                 prefetch_factor: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-step rows and one summary row per worker count, with the model's prediction
    (``G`` = the step's calibrated steady-state time)."""
    per_step, summary = [], []
    origin = time.perf_counter() if origin is None else origin
    g = getattr(step, "steady_ms", step.g_ms)
    for w in workers:
        df = train_steps(make_loader(ds, batch_size=batch_size, workers=w, prefetch_factor=prefetch_factor),
                         step, steps + warmup)
        df = _relative(df, sampler, origin)
        df.insert(0, "workers", w)
        df.insert(0, "work", ds.kind)
        per_step.append(df)
        s = summarise_steps(df, warmup, g)
        summary.append(dict(work=ds.kind, workers=w, d_ms=d_ms, batch_size=batch_size, g_ms=step.g_ms, g_cal_ms=g,
                            **s, predicted_wait_ms=predicted_wait_ms(d_ms, batch_size, w, g),
                            predicted_au=predicted_au(d_ms, batch_size, w, g),
                            keeps_up=s["au"] >= AU_THRESHOLD))
        if progress:
            progress.update(1)
    return pd.concat(per_step, ignore_index=True), pd.DataFrame(summary)


def idle_gap_experiment(step: Step, gaps_ms, *, repeats: int, conditioning: int, seed: int = 0,
                        sampler: NvmlSampler | None = None, origin: float | None = None, sleep=time.sleep,
                        progress=None) -> pd.DataFrame:
    """The same step, with no DataLoader, after controlled idle gaps.

    Each trial runs ``conditioning`` steps back-to-back (the sustained state), sleeps
    ``gap`` ms, then times one step. Trials of all gaps are interleaved in a seeded random
    order, so a slow drift of the device (temperature) cannot masquerade as an effect of the gap.
    One row per trial: the step after the gap (``step_ms``) and the mean of the conditioning
    steps before it (``before_ms``), with NVML counters of the measured step."""
    rng = np.random.default_rng([seed, 7])
    trials = [(g, r) for r in range(repeats) for g in gaps_ms]
    order = rng.permutation(len(trials))
    origin = time.perf_counter() if origin is None else origin
    rows = []
    for k, idx in enumerate(order):
        gap, rep = trials[idx]
        before = [step.run() for _ in range(conditioning)]
        if gap:
            sleep(gap / 1e3)
        t0 = time.perf_counter()
        ms = step.run()
        rows.append(dict(trial=k, gap_ms=gap, repeat=rep, step_ms=ms, before_ms=float(np.mean(before)),
                         t0=t0, t1=time.perf_counter()))
        if progress:
            progress.update(1)
    return _relative(pd.DataFrame(rows), sampler, origin)


def prefetch_experiment(*, batch_size: int, workers: int, prefetch_factors, runs: int, steps: int, warmup: int,
                        step: Step, seed: int = 0, sampler: NvmlSampler | None = None, origin: float | None = None,
                        progress=None, load: float = PREFETCH_LOAD) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``prefetch_factor`` where it can matter: the sleep work sized so that ``D·B/W`` is just under
    ``G`` (``load`` × G: the workers deliver a batch per step with little to spare), with a constant
    cost per sample and with a variable one (exponential, the same mean over the run).
    Configurations are interleaved run by run."""
    g = getattr(step, "steady_ms", step.g_ms)
    d = load * g * workers / batch_size
    origin = time.perf_counter() if origin is None else origin
    per_step, summary = [], []
    n = batch_size * (steps + warmup)
    for run in range(runs):
        for profile in COST_PROFILES:
            ds = WorkDataset(n, "sleep", cost_ms=d, variable=profile == "variable", seed=seed + run)
            for pf in prefetch_factors:
                df = train_steps(make_loader(ds, batch_size=batch_size, workers=workers, prefetch_factor=pf),
                                 step, steps + warmup)
                df = _relative(df, sampler, origin)
                for col, v in (("prefetch_factor", pf), ("cost", profile), ("run", run)):
                    df.insert(0, col, v)
                per_step.append(df)
                s = summarise_steps(df, warmup, g)
                summary.append(dict(run=run, cost=profile, prefetch_factor=pf, workers=workers, d_ms=d,
                                    batch_size=batch_size, g_cal_ms=g, load=load, **s,
                                    predicted_wait_ms=predicted_wait_ms(d, batch_size, workers, g)))
                if progress:
                    progress.update(1)
    return pd.concat(per_step, ignore_index=True), pd.DataFrame(summary)


def startup_ms(*, workers: int, batch_size: int) -> float:
    """Time to the first batch of a fresh DataLoader whose items cost nothing: worker start-up."""
    ds = WorkDataset(2 * batch_size, "sleep", cost_ms=0.0)
    loader = make_loader(ds, batch_size=batch_size, workers=workers)
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    ms = (time.perf_counter() - t0) * 1e3
    del it, loader
    return ms


def epoch_boundary(ds_factory, *, batch_size: int, workers: int, steps_per_epoch: int, step: Step, runs: int = 1,
                   prefetch_factors=None, sampler: NvmlSampler | None = None, origin: float | None = None,
                   progress=None) -> pd.DataFrame:
    """Two epochs per run with and without ``persistent_workers`` (default prefetch): the wait of
    every step, so the cost of restarting workers at the epoch boundary shows. Each run also
    measures the workers' start-up alone (:func:`startup_ms`) into the ``startup_ms`` column."""
    rows = []
    origin = time.perf_counter() if origin is None else origin
    for run in range(runs):
        start = startup_ms(workers=workers, batch_size=batch_size)
        for persistent in (False, True):
            for pf in prefetch_factors or [DEFAULT_PREFETCH]:
                ds = ds_factory(batch_size * steps_per_epoch)
                loader = make_loader(ds, batch_size=batch_size, workers=workers, prefetch_factor=pf,
                                     persistent_workers=persistent)
                df = _relative(train_steps(loader, step, 2 * steps_per_epoch), sampler, origin)
                for col, v in (("prefetch_factor", pf), ("persistent_workers", persistent), ("run", run)):
                    df.insert(0, col, v)
                df["startup_ms"] = start
                rows.append(df)
                del loader
                if progress:
                    progress.update(1)
    return pd.concat(rows, ignore_index=True)


# --------------------------------------------------------------------------- parameters
def default_workers(cores: int | None = None) -> list[int]:
    """0, 1, 2, 4, 8, ... up to the number of usable cores."""
    cores = cores or len(os.sched_getaffinity(0))
    out, w = [0, 1], 2
    while w <= cores:
        out.append(w)
        w *= 2
    return out


def check_parameters(params) -> Params:
    """Every parameter of the chapter checked before any work: the declarations (:meth:`Params.checked`), then
    what they cannot say: worker counts against this machine's cores, at least one kind of work, the decode
    image's size and memory, real work that has a cost to be sized to, data paths that exist. ``workers``
    "auto" comes back as the list it stands for."""
    if isinstance(params, Mapping):
        run_options(params)
    p = Params.coerce(params).checked()
    cores = len(os.sched_getaffinity(0))
    bound = max(64, 4 * cores)
    workers = default_workers() if p.workers == "auto" else p.workers
    for name, values in (("workers", workers), ("published_workers", p.published_workers),
                         ("boundary_workers", [p.boundary_workers]), ("prefetch_workers", [p.prefetch_workers])):
        if any(v > bound for v in values):
            raise ParameterError(name, getattr(p, name), f"worker counts from 0 to {bound:,} on this machine "
                                                         f"({cores} usable cores)")
    if not p.work_kinds:
        raise ParameterError("work_kinds", p.work_kinds,
                             "a non-empty list drawn from " + ", ".join(map(repr, WORK_KINDS)))
    real = [k for k in p.work_kinds if k != "sleep"]
    if "decode" in real and p.real_work_scale > DECODE_MAX_PX // DECODE_PX:
        raise ParameterError("real_work_scale", p.real_work_scale,
                             f"an integer from 0 to {DECODE_MAX_PX // DECODE_PX} when decode work runs")
    if real and p.real_work_scale == 0 and p.d_ms == 0:
        raise ParameterError("d_ms", p.d_ms, "a cost above 0 ms when real work (" + ", ".join(real)
                             + ") is calibrated to it (real_work_scale = 0)")
    for name in ("dataset_path", "tokenizer_dir"):
        v = getattr(p, name)
        if v is not None and not os.path.exists(v):
            raise ParameterError(name, v, "None (the offline copy or the hub) or an existing path")
    if "decode" in real and p.real_work_scale:
        side = DECODE_PX * p.real_work_scale
        memory("real_work_scale", p.real_work_scale, 80 * side * side, what=f"generating {side} px test images")
    return dataclasses.replace(p, workers=workers)


def preflight(params) -> Params:
    """The checked parameters (:func:`check_parameters`), and the tokenizer and texts the tokenize work needs
    (with ``token_path``, the reader's texts, or their tokens decoded)."""
    p = check_parameters(params)
    if p.token_path is not None and "tokenize" not in p.work_kinds:
        raise ParameterError("token_path", p.token_path, "null unless work_kinds includes 'tokenize' (the work "
                             "that reads your text)")
    if "tokenize" in p.work_kinds:
        requires("work_kinds", "tokenize", "tokenizers", "tokenizers (pip install tokenizers)")
        if p.token_path is not None:
            your_texts(p)
        else:
            textdata_texts(p, min(256, 2000))
    return p


def textdata_texts(p: Params, n: int):
    """(texts, tokenizer, source) of the book's text (the Alpaca records)."""
    from datajourney.toolkit import textdata

    return textdata.texts_and_source(n, dataset_path=p.dataset_path, tokenizer_dir=p.tokenizer_dir)


def your_texts(p: Params, n: int = TOKENIZE_TEXTS):
    """(texts, tokenizer, source) of the reader's ``token_path``: its texts, or its tokens decoded with GPT-2's
    tokenizer; the source names no path."""
    from datajourney.toolkit import textdata, yourdata

    src = yourdata.token_source(p.token_path)
    tok, origin = textdata.load_tokenizer(tokenizer_dir=p.tokenizer_dir)
    texts = src.texts_for(n, p.seed, tok)
    return texts, tok, textdata.Source(f"your token_path ({src.kind})", origin), src


# --------------------------------------------------------------------------- chapter
def measure(q: Params, context) -> None:
    """Run chapter 4's experiments into the started result (its tables and metadata)."""
    from tqdm import tqdm

    lap = Laps()  # how long each part of the run took (metadata)
    p = q.as_dict()
    d_ms, batch_size, g_ms, steps, warmup_steps = q.d_ms, q.batch_size, q.g_ms, q.steps, q.warmup_steps
    seed, boundary_workers = q.seed, q.boundary_workers
    steps_per_epoch = q.steps_per_epoch
    texts = tok = source = None
    if "tokenize" in p["work_kinds"] and q.token_path is not None:   # the reader's text, only read
        texts, tok, source, yours = your_texts(q)
        context.result.metadata["your_data"] = yours.describe(tok, seed=seed)
    elif "tokenize" in p["work_kinds"]:
        texts, tok, source = textdata_texts(q, TOKENIZE_TEXTS)
    if texts is not None:
        lap("data set")
    res, progress = context.result, context.progress
    sampler = NvmlSampler() if torch.cuda.is_available() else None
    origin = time.perf_counter()
    if sampler is not None:
        sampler.start()
    try:
        step = Step(g_ms, calibration_s=p["calibration_s"])
        g = step.steady_ms
        n = batch_size * (steps + warmup_steps) * 2

        def dataset(kind, n_items=n, scale=1, timed=False):
            return WorkDataset(n_items, kind, cost_ms=d_ms, scale=scale, texts=texts, tokenizer=tok, seed=seed,
                               timed=timed)

        scales = {}
        for kind in p["work_kinds"]:
            if kind != "sleep":  # 0: calibrate the real work to cost about d_ms per sample
                mx = DECODE_MAX_PX // DECODE_PX if kind == "decode" else 1000
                scales[kind] = p["real_work_scale"] or calibrate_scale(
                    lambda s, k=kind: WorkDataset(COST_SAMPLES, k, scale=s, texts=texts, tokenizer=tok, seed=seed,
                                                  n_images=2), kind, d_ms, max_scale=mx)
        lap("calibration")

        total = (1 + len(p["published_workers"])
                 + len(p["work_kinds"]) * len(p["workers"])
                 + p["prefetch_runs"] * len(COST_PROFILES) * len(p["prefetch_factors"]) + 2 * p["boundary_runs"])
        steps_tables, summaries = [], []
        with tqdm(total=total, desc="chapter 4 configurations", disable=not progress, mininterval=2.0) as bar, \
                warnings.catch_warnings():
            # the sweep asks for more workers than cores on purpose (that is one of its questions)
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            idle = idle_gap_experiment(step, p["idle_gaps_ms"], repeats=p["idle_repeats"],
                                       conditioning=p["idle_conditioning_steps"], seed=seed, sampler=sampler,
                                       origin=origin)
            bar.update(1)
            lap("idle gaps")
            st, sm = worker_sweep(dataset("sleep"), d_ms, batch_size=batch_size, workers=p["published_workers"],
                                  step=step, steps=steps, warmup=warmup_steps, progress=bar, sampler=sampler,
                                  origin=origin)
            sm.insert(0, "experiment", "published case")
            st.insert(0, "experiment", "published case")
            summaries.append(sm)
            steps_tables.append(st)
            lap("published case")
            costs = {}
            for kind in p["work_kinds"]:
                ds = dataset(kind, scale=scales.get(kind, 1))
                d = d_ms if kind == "sleep" else measure_cost_ms(ds)
                costs[kind] = d
                # the same work, each item timed where it runs: D as the loader pays it, inside the loop
                st, sm = worker_sweep(dataset(kind, scale=scales.get(kind, 1), timed=True), d, batch_size=batch_size,
                                      workers=p["workers"], step=step, steps=steps, warmup=warmup_steps,
                                      progress=bar, sampler=sampler, origin=origin)
                # D again, back to back, right after the sweep: did the machine itself change meanwhile?
                sm["d_after_ms"] = d_ms if kind == "sleep" else measure_cost_ms(ds)
                sm.insert(0, "experiment", "worker sweep")
                st.insert(0, "experiment", "worker sweep")
                steps_tables.append(st)
                summaries.append(sm)
            lap("worker sweep")
            pf_steps, pf_summary = prefetch_experiment(
                batch_size=batch_size, workers=p["prefetch_workers"], prefetch_factors=p["prefetch_factors"],
                runs=p["prefetch_runs"], steps=steps, warmup=warmup_steps, step=step, seed=seed, sampler=sampler,
                origin=origin, progress=bar)
            lap("prefetch")
            boundary = epoch_boundary(lambda k: dataset("sleep", k), batch_size=batch_size, workers=boundary_workers,
                                      steps_per_epoch=steps_per_epoch, step=step, runs=p["boundary_runs"],
                                      sampler=sampler, origin=origin, progress=bar)
            lap("epoch boundary")
    finally:
        if sampler is not None:
            sampler.stop()
    res.add("calibration", _relative(step.calibration_table(), sampler, origin))
    res.add("idle_gaps", idle)
    res.add("summary", pd.concat(summaries, ignore_index=True))
    res.add("steps", pd.concat(steps_tables, ignore_index=True))
    res.add("prefetch", pf_summary)
    res.add("prefetch_steps", pf_steps[["run", "cost", "prefetch_factor", "step", "wait_ms", "compute_ms"]])
    res.add("epoch_boundary", boundary)
    cal = step.calibration
    res.metadata.update(
        step_kind=step.kind, cuda=step.cuda, step_units=step.iters, step_g_target_ms=g_ms,
        step_steady_ms=g, step_calibrated_ms=g, step_first_ms=cal["first_ms"], step_burst_ms=cal["burst_step_ms"],
        step_drift=cal["drift"], step_settled=cal["settled"], calibration_s=p["calibration_s"],
        step_matmuls=step.iters if step.cuda else None,
        nvml=(dict(available=True, interval_ms=sampler.interval_ms, samples=len(sampler.samples), **sampler.info)
              if sampler is not None and sampler.available else
              dict(available=False, why=sampler.why if sampler is not None else "no CUDA device")),
        text_source=vars(source) if source else None, real_work_scales=scales, real_work_costs_ms=costs,
        cores=len(os.sched_getaffinity(0)), au_threshold=AU_THRESHOLD,
        start_method=torch.multiprocessing.get_start_method(), seconds=lap.seconds)
