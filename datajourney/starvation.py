"""Chapter 4: CPU starvation - when preprocessing cannot keep the accelerator busy.

Model: each sample costs ``D`` ms of CPU work, a batch holds ``B`` samples, ``W`` worker
processes prepare batches in parallel and the training step takes ``G`` ms. A worker needs
``D·B`` ms per batch, so ``W`` workers deliver one every ``D·B/W`` ms; the step waits for
data whenever that exceeds ``G``:

* ``W = 0`` (loading in the training process, no overlap): wait = ``D·B``;
* ``W ≥ 1`` (steady state): wait = ``max(0, D·B/W − G)``.

What is measured per step: the data wait (host clock from the end of one step to the
arrival of the next batch), the compute time (CUDA events around real GPU work calibrated
to ``G`` ms, synchronised; on a CPU-only host a ``sleep`` of ``G`` ms, labelled simulated),
and from them the GPU-idle share and the accelerator utilisation AU = compute / wall time
(MLPerf Storage counts a run as keeping up at AU ≥ 90%).
"""
from __future__ import annotations

import io
import os
import time

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from .book.params import ParameterError, choices, int_list, nonnegative_int, positive_int
from .timing import cuda_ms

CHAPTER = "04_cpu_starvation"
WORK_KINDS = ("sleep", "tokenize", "decode")
AU_THRESHOLD = 0.90


# --------------------------------------------------------------------------- the model
def predicted_wait_ms(d_ms: float, b: int, w: int, g_ms: float) -> float:
    """Data wait per step that the simple model predicts (see the module docstring)."""
    if w == 0:
        return d_ms * b
    return max(0.0, d_ms * b / w - g_ms)


def predicted_au(d_ms: float, b: int, w: int, g_ms: float) -> float:
    return g_ms / (g_ms + predicted_wait_ms(d_ms, b, w, g_ms))


# --------------------------------------------------------------------------- per-sample work
class WorkDataset(Dataset):
    """Each item costs CPU work of one kind and returns a small tensor.

    ``sleep``: ``time.sleep(cost_ms)`` (the published, simulated cost; it releases the CPU);
    ``tokenize``: GPT-2 byte-level BPE of a real text (``texts[i]`` repeated ``scale`` times);
    ``decode``: JPEG decode + conversion of an in-memory image of ``scale`` × 64 pixels square.
    """

    def __init__(self, n: int, kind: str, *, cost_ms: float = 5.0, scale: int = 1, texts=None, tokenizer=None,
                 seed: int = 0):
        self.n, self.kind, self.cost_ms, self.scale = n, kind, cost_ms, scale
        if kind == "tokenize":
            if not texts or tokenizer is None:
                raise ValueError("tokenize work needs texts and a tokenizer")
            self.texts = [" ".join([t] * scale) for t in texts]
            self.tokenizer = tokenizer
        elif kind == "decode":
            from .images import jpeg

            self.jpegs = [jpeg(seed, k, 64 * scale, 80) for k in range(8)]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.kind == "sleep":
            time.sleep(self.cost_ms / 1e3)
            return torch.zeros(64, dtype=torch.int64)
        if self.kind == "tokenize":
            ids = self.tokenizer.encode(self.texts[i % len(self.texts)]).ids[:64]
            return torch.tensor(ids + [0] * (64 - len(ids)), dtype=torch.int64)
        from PIL import Image

        img = Image.open(io.BytesIO(self.jpegs[i % len(self.jpegs)])).convert("RGB")
        return torch.from_numpy(np.asarray(img)[:8, :8, 0].reshape(-1).astype(np.int64))


def calibrate_scale(make, kind: str, target_ms: float, samples: int = 32) -> int:
    """The ``scale`` at which one item of real work costs about ``target_ms`` in this process.

    Tokenising cost grows with the text length (linear in scale), decoding with the image
    area (quadratic in scale)."""
    power = 0.5 if kind == "decode" else 1.0
    scale = 1
    for _ in range(4):  # fixed per-item overhead makes one step of the power law overshoot; iterate
        d = measure_cost_ms(make(scale), samples)
        new = int(min(max(round(scale * (target_ms / max(d, 1e-3)) ** power), 1), 1000))
        if new == scale:
            break
        scale = new
    return scale


def measure_cost_ms(ds: WorkDataset, samples: int = 128) -> float:
    """Mean CPU cost of one item in this process (D for the real kinds of work), in steady state:
    the items are produced once untimed first (imports, allocations, the tokenizer's word cache,
    which forked workers inherit), then timed."""
    samples = min(samples, len(ds))
    for i in range(samples):
        ds[i]
    t0 = time.perf_counter()
    for i in range(samples):
        ds[i]
    return (time.perf_counter() - t0) * 1e3 / samples


# --------------------------------------------------------------------------- the training step
class Step:
    """A training step of ``g_ms`` milliseconds: real GPU work when CUDA is there, else a sleep.

    On CUDA, a chain of bf16 matrix products is calibrated (timed with CUDA events) so that
    one step takes about ``g_ms``; each call is timed with events and synchronised.
    """

    def __init__(self, g_ms: float, device: str | None = None):
        self.g_ms = g_ms
        self.cuda = torch.cuda.is_available() if device is None else device == "cuda"
        self.kind = "GPU matmul (CUDA events)" if self.cuda else "simulated: sleep (no CUDA)"
        if self.cuda:
            self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            self.b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            for _ in range(3):
                cuda_ms(self._matmul, 4)  # warm-up
            one = min(cuda_ms(self._matmul, 8) for _ in range(3)) / 8
            self.iters = max(1, round(g_ms / one))
            self.calibrated_ms = cuda_ms(self._matmul, self.iters)

    def _matmul(self):
        torch.mm(self.a, self.b)

    def __call__(self, batch: torch.Tensor) -> float:
        """Run one step on ``batch``; return its compute time in ms."""
        if self.cuda:
            batch.to("cuda", non_blocking=True)
            return cuda_ms(self._matmul, self.iters)
        t0 = time.perf_counter()
        time.sleep(self.g_ms / 1e3)
        return (time.perf_counter() - t0) * 1e3


def train_steps(loader: DataLoader, step: Step, steps: int) -> pd.DataFrame:
    """Iterate ``loader`` for ``steps`` steps (restarting epochs as needed); one row per step."""
    rows = []
    epoch = 0
    t_prev = time.perf_counter()
    t_start = t_prev
    while len(rows) < steps:
        for i, batch in enumerate(loader):
            t_got = time.perf_counter()
            compute = step(batch)
            t_done = time.perf_counter()
            rows.append(dict(step=len(rows), epoch=epoch, step_in_epoch=i, wait_ms=(t_got - t_prev) * 1e3,
                             compute_ms=compute, wall_ms=(t_done - t_prev) * 1e3,
                             since_start_ms=(t_got - t_start) * 1e3))
            t_prev = t_done
            if len(rows) >= steps:
                break
        epoch += 1
    return pd.DataFrame(rows)


def make_loader(ds: Dataset, *, batch_size: int, workers: int, prefetch_factor: int | None = None,
                persistent_workers: bool = False) -> DataLoader:
    kw = {}
    if workers > 0:
        kw = dict(prefetch_factor=prefetch_factor or 2, persistent_workers=persistent_workers)
    return DataLoader(ds, batch_size=batch_size, shuffle=False, num_workers=workers, **kw)


def summarise_steps(df: pd.DataFrame, warmup: int) -> dict:
    """Steady-state means (after ``warmup`` steps) and the time to the first batch."""
    s = df[df["step"] >= warmup]
    wall = s["wall_ms"].sum()
    return dict(first_batch_ms=df["wait_ms"].iloc[0], wait_ms=s["wait_ms"].mean(), wait_std_ms=s["wait_ms"].std(),
                compute_ms=s["compute_ms"].mean(), step_ms=s["wall_ms"].mean(),
                au=s["compute_ms"].sum() / wall if wall else float("nan"),
                idle_share=1 - s["compute_ms"].sum() / wall if wall else float("nan"), steps=len(s))


# --------------------------------------------------------------------------- experiments
def worker_sweep(ds: WorkDataset, d_ms: float, *, batch_size: int, workers, step: Step, steps: int, warmup: int,
                 progress=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-step rows and one summary row per worker count, with the model's prediction."""
    per_step, summary = [], []
    for w in workers:
        df = train_steps(make_loader(ds, batch_size=batch_size, workers=w), step, steps + warmup)
        df.insert(0, "workers", w)
        df.insert(0, "work", ds.kind)
        per_step.append(df)
        s = summarise_steps(df, warmup)
        summary.append(dict(work=ds.kind, workers=w, d_ms=d_ms, batch_size=batch_size, g_ms=step.g_ms, **s,
                            predicted_wait_ms=predicted_wait_ms(d_ms, batch_size, w, step.g_ms),
                            predicted_au=predicted_au(d_ms, batch_size, w, step.g_ms),
                            keeps_up=s["au"] >= AU_THRESHOLD))
        if progress:
            progress.update(1)
    return pd.concat(per_step, ignore_index=True), pd.DataFrame(summary)


def epoch_boundary(ds_factory, *, batch_size: int, workers: int, steps_per_epoch: int, prefetch_factors,
                   step: Step, progress=None) -> pd.DataFrame:
    """Two epochs per (persistent_workers, prefetch_factor): the wait of every step, so the cost
    of restarting workers at the epoch boundary and of a shallow prefetch queue show up."""
    rows = []
    for persistent in (False, True):
        for pf in prefetch_factors:
            ds = ds_factory(batch_size * steps_per_epoch)
            loader = make_loader(ds, batch_size=batch_size, workers=workers, prefetch_factor=pf,
                                 persistent_workers=persistent)
            df = train_steps(loader, step, 2 * steps_per_epoch)
            df.insert(0, "prefetch_factor", pf)
            df.insert(0, "persistent_workers", persistent)
            rows.append(df)
            del loader
            if progress:
                progress.update(1)
    return pd.concat(rows, ignore_index=True)


# --------------------------------------------------------------------------- chapter
def default_workers(cores: int | None = None) -> list[int]:
    """0, 1, 2, 4, 8, ... up to the number of usable cores."""
    cores = cores or len(os.sched_getaffinity(0))
    out, w = [0, 1], 2
    while w <= cores:
        out.append(w)
        w *= 2
    return out


def check_parameters(p: dict) -> dict:
    q = dict(p)
    cores = len(os.sched_getaffinity(0))
    for name in ("d_ms", "g_ms"):
        v = p[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 10_000):
            raise ParameterError(name, v, "a number of milliseconds from 0 to 10,000")
    if p["g_ms"] <= 0:
        raise ParameterError("g_ms", p["g_ms"], "a number of milliseconds above 0")
    q["batch_size"] = positive_int("batch_size", p["batch_size"], maximum=65536)
    bound = max(64, 4 * cores)
    q["workers"] = int_list("workers", p["workers"], minimum=0, maximum=bound) if p["workers"] else default_workers()
    q["published_workers"] = int_list("published_workers", p["published_workers"], minimum=0, maximum=bound)
    q["steps"] = positive_int("steps", p["steps"], maximum=100_000)
    q["warmup_steps"] = positive_int("warmup_steps", p["warmup_steps"], maximum=10_000)
    q["work_kinds"] = choices("work_kinds", p["work_kinds"], WORK_KINDS)
    q["real_work_scale"] = nonnegative_int("real_work_scale", p["real_work_scale"], maximum=1000)
    q["boundary_workers"] = int_list("boundary_workers", [p["boundary_workers"]], minimum=1, maximum=bound)[0]
    q["steps_per_epoch"] = positive_int("steps_per_epoch", p["steps_per_epoch"], maximum=10_000)
    q["prefetch_factors"] = int_list("prefetch_factors", p["prefetch_factors"], minimum=1, maximum=64)
    return q


def preflight(params: dict) -> dict:
    p = check_parameters(params)
    if "tokenize" in p["work_kinds"]:
        from . import textdata

        textdata.texts_and_source(min(256, 2000), dataset_path=p.get("dataset_path"),
                                  tokenizer_dir=p.get("tokenizer_dir"))
    return p


def run(*, d_ms: float, batch_size: int, g_ms: float, workers, published_workers, steps: int, warmup_steps: int,
        work_kinds, real_work_scale: int, boundary_workers: int, steps_per_epoch: int, prefetch_factors,
        dataset_path=None, tokenizer_dir=None, seed: int = 0, run_dir=None, progress: bool = True):
    """Run chapter 4's experiments and save the result to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from tqdm import tqdm

    from . import textdata
    from .book import results

    p = check_parameters(params)
    texts = tok = source = None
    if "tokenize" in p["work_kinds"]:
        texts, tok, source = textdata.texts_and_source(256, dataset_path=dataset_path, tokenizer_dir=tokenizer_dir)
    res = results.start(CHAPTER, params, run_dir)
    step = Step(g_ms)
    n = batch_size * (steps + warmup_steps) * 2

    def dataset(kind, n_items=n, scale=1):
        return WorkDataset(n_items, kind, cost_ms=d_ms, scale=scale, texts=texts, tokenizer=tok, seed=seed)

    scales = {}
    for kind in p["work_kinds"]:
        if kind != "sleep":  # 0: calibrate the real work to cost about d_ms per sample
            scales[kind] = real_work_scale or calibrate_scale(lambda s, k=kind: dataset(k, 64, s), kind, d_ms)

    total = (len(p["published_workers"]) + len(p["work_kinds"]) * len(p["workers"])
             + 2 * len(p["prefetch_factors"]))
    steps_tables, summaries = [], []
    with tqdm(total=total, desc="chapter 4 configurations", disable=not progress) as bar:
        st, sm = worker_sweep(dataset("sleep"), d_ms, batch_size=batch_size, workers=p["published_workers"],
                              step=step, steps=steps, warmup=warmup_steps, progress=bar)
        sm.insert(0, "experiment", "published case")
        summaries.append(sm)
        for kind in p["work_kinds"]:
            ds = dataset(kind, scale=scales.get(kind, 1))
            d = d_ms if kind == "sleep" else measure_cost_ms(ds)
            st, sm = worker_sweep(ds, d, batch_size=batch_size, workers=p["workers"], step=step, steps=steps,
                                  warmup=warmup_steps, progress=bar)
            sm.insert(0, "experiment", "worker sweep")
            st.insert(0, "experiment", "worker sweep")
            steps_tables.append(st)
            summaries.append(sm)
        boundary = epoch_boundary(lambda k: dataset("sleep", k), batch_size=batch_size, workers=boundary_workers,
                                  steps_per_epoch=steps_per_epoch, prefetch_factors=p["prefetch_factors"],
                                  step=step, progress=bar)
    res.add("summary", pd.concat(summaries, ignore_index=True))
    res.add("steps", pd.concat(steps_tables, ignore_index=True))
    res.add("epoch_boundary", boundary)
    res.metadata.update(step_kind=step.kind, step_calibrated_ms=getattr(step, "calibrated_ms", None),
                        step_matmuls=getattr(step, "iters", None), cuda=step.cuda,
                        text_source=vars(source) if source else None, real_work_scales=scales,
                        start_method=torch.multiprocessing.get_start_method())
    res.save(results.resolve_run_dir(run_dir))
    return res


def key_metrics(res) -> dict:
    """The published case as metric -> (mean, std)."""
    s = res.table("summary")
    s = s[s["experiment"] == "published case"].set_index("workers")
    out = {}
    for w in (0, 4):
        if w in s.index:
            out[f"data wait per step, W={w}"] = (s.loc[w, "wait_ms"], s.loc[w, "wait_std_ms"])
            out[f"compute per step, W={w}"] = (s.loc[w, "compute_ms"], None)
            out[f"GPU idle share, W={w}"] = (100 * s.loc[w, "idle_share"], None)
    return out


# --------------------------------------------------------------------------- what-if chart
_WHATIF_JS = """
var gd = document.getElementById('{plot_id}');
var state = %s;
function model() {
  var xs = gd.data[0].x, D = state.D, B = state.B, G = state.G;
  var wait = xs.map(function (w) { return w == 0 ? D * B : Math.max(0, D * B / w - G); });
  var au = wait.map(function (x) { return 100 * G / (G + x); });
  Plotly.restyle(gd, {y: [wait, xs.map(function () { return G; }), au]}, [0, 1, 2]);
}
gd.on('plotly_sliderchange', function (e) { state[e.slider.name] = +e.step.value; model(); });
"""


def whatif_figure(d_ms: float, batch_size: int, g_ms: float, max_workers: int = 32):
    """Predicted data wait and AU against W, with sliders for D, B and G that recompute the
    model in the browser (plotly sliders + a few lines of JavaScript: no kernel needed)."""
    import json

    from plotly.subplots import make_subplots

    from .book.plotting import PALETTE

    ws = list(range(0, max_workers + 1))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=ws, y=[predicted_wait_ms(d_ms, batch_size, w, g_ms) for w in ws], name="predicted data wait",
                    line=dict(color=PALETTE[5], width=3), hovertemplate="W=%{x}: wait %{y:.1f} ms<extra></extra>")
    fig.add_scatter(x=ws, y=[g_ms] * len(ws), name="step compute G", line=dict(color=PALETTE[0], dash="dash"),
                    hovertemplate="G = %{y:.0f} ms<extra></extra>")
    fig.add_scatter(x=ws, y=[100 * predicted_au(d_ms, batch_size, w, g_ms) for w in ws], name="predicted AU (%)",
                    line=dict(color=PALETTE[2]), hovertemplate="W=%{x}: AU %{y:.0f}%<extra></extra>",
                    secondary_y=True)
    fig.add_hline(y=100 * AU_THRESHOLD, line=dict(color=PALETTE[2], dash="dot", width=1), secondary_y=True,
                  annotation_text="AU 90%: keeping up", annotation_position="bottom right")

    def slider(name, label, values, current, y):
        active = min(range(len(values)), key=lambda i: abs(values[i] - current))
        return dict(name=name, active=active, y=y, len=0.9, x=0.05, pad=dict(t=0, b=0),
                    currentvalue=dict(prefix=f"{label}: "),
                    steps=[dict(method="skip", label=f"{v:g}", value=str(v), args=[]) for v in values])

    ds = [0.5, 1, 2, 3, 5, 8, 10, 15, 20, 30, 50]
    bs = [1, 4, 8, 16, 32, 64, 128, 256]
    gs = [5, 10, 20, 30, 50, 75, 100, 150, 200, 300]
    fig.update_layout(
        title="What if? The model of chapter 4 (move the sliders)", height=620, margin=dict(b=260),
        sliders=[slider("D", "CPU cost per sample D (ms)", ds, d_ms, -0.25),
                 slider("B", "batch size B", bs, batch_size, -0.5),
                 slider("G", "GPU step G (ms)", gs, g_ms, -0.75)],
        meta={"post_script": _WHATIF_JS % json.dumps({"D": d_ms, "B": batch_size, "G": g_ms})},
        legend=dict(orientation="h", y=1.08),
    )
    fig.update_xaxes(title_text="DataLoader workers W")
    fig.update_yaxes(title_text="time per step (ms)", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="accelerator utilisation AU (%)", range=[0, 105], secondary_y=True)
    return fig
