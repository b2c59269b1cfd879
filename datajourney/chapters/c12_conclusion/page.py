"""Chapter 12's page: the answer first (each workload's weakest link, what to change, the expected gain
and how many GPUs of this kind the host feeds), then the hops behind it, the checklist and the budget
chart, all computed from the diagnosis result (:mod:`datajourney.chapters.c12_conclusion.experiment`)."""
from __future__ import annotations

import json
import math

import pandas as pd

from datajourney.chapters import published
from datajourney.chapters.c12_conclusion import experiment as diagnosis
from datajourney.chapters.c12_conclusion.experiment import CHAPTER  # noqa: F401 - the page's chapter
from datajourney.chapters.registry import lookup
from datajourney.core import findings as fx
from datajourney.core.findings import Action, Finding, Opening

#: What each checklist row checks (mechanism only: the numbers come from the run).
PRACTICE = {
    ("02_random_vs_sequential", "cold_gap"): "Store many small samples as shards read in order, not one file each",
    ("02_random_vs_sequential", "cold_latency"): "Know the device's latency for one small read at queue depth 1",
    ("03_dataloader", "published_w4"): "Workers hide per-file latency, but do not remove the layout's cost",
    ("03_dataloader", "first_batch"): "Start-up: workers are processes, and the first batch waits for them",
    ("04_cpu_starvation", "workers_to_keep_up"): "Give the loader enough workers: D·B/W must stay under the step G",
    ("05_padding_tax", "all_samples"): "Pack variable-length sequences instead of padding them",
    ("06_pcie", "h2d_pinned"): "Copy from pinned memory",
    ("06_pcie", "cpu_overlap"): "Copy with non_blocking=True from pinned memory so the CPU keeps working",
    ("07_full_picture", "workers4"): "End to end: a few workers feed the GPU",
    ("07_full_picture", "best_vs_ceiling"): "End to end: the best loader against the GPU's own ceiling",
    ("08_threads_processes_gil", "primitives"): "Decode in processes or threads: where the interpreter lock binds",
    ("08_threads_processes_gil", "end_to_end"): "A thread pipeline instead of DataLoader worker processes",
    ("08_threads_processes_gil", "cost"): "Count the loader's CPU and memory over all its processes",
    ("08_threads_processes_gil", "first_batch"): "Start workers with fork, or keep the Dataset small to pickle",
    ("09_reading_smarter", "to_gpu"): "Overlap reading and copying to reach the slower of disk and PCIe",
    ("09_reading_smarter", "gds"): "GPUDirect Storage only where cuFile really runs without compatibility mode",
    ("09_reading_smarter", "parallel_random"): "Keep many small reads in flight (threads issuing pread)",
    ("10_mmap_vs_read", "loader_time"): "mmap or read() for an indexed token set: measure cold and warm",
    ("10_mmap_vs_read", "posix_events"): "A POSIX tracer does not see mmap's I/O",
    ("10_mmap_vs_read", "kernel_view"): "Check page faults and /proc/<pid>/io beside the tracer",
    ("10_mmap_vs_read", "overhead"): "Measure the tracer's own cost, traced against untraced",
    ("11_gpu_to_gpu", "scaling_direct"): "DDP over a direct GPU-to-GPU path, with tuned buckets",
    ("11_gpu_to_gpu", "host_path_collapse"): "Know whether the GPUs talk directly or through the host",
    ("11_gpu_to_gpu", "allreduce_busbw"): "Compare gradient bytes per step with the all-reduce bandwidth",
}

UNITS = diagnosis.UNITS
WORKLOADS = {"image": "ResNet-50 training", "tokens": "A token-based step",
             "gradients": "A data-parallel step"}


def _hops(res, workload: str) -> pd.DataFrame:
    h = res.table("hops")
    return h[h["workload"] == workload].reset_index(drop=True)


def _title(ch: str) -> str:
    c = lookup(ch)
    return f"chapter {c.number} ({c.title})"


def weakest_finding(res, workload: str) -> fx.Finding:
    """The hop that limits ``workload`` on this run, its rate and the margin to the next hop."""
    w = diagnosis.weakest_of(res).get(workload)
    unit = UNITS[workload]
    h = _hops(res, workload)
    gone = [f"{r.label} ({r.basis})" for r in h[h["capacity"].isna()].itertuples()]
    if not w:
        return fx.Finding(f"weakest_{workload}", f"**{WORKLOADS[workload]}**: no hop could be compared with the "
                          f"GPU's need (not computed: {'; '.join(gone) or 'nothing'}).")
    text = f"**{WORKLOADS[workload]}**: the weakest link is **{w['label']}** at **{fx.num(w['capacity'], unit)}**"
    if w["next_label"]:
        text += (f"; the next, {w['next_label']}, sustains {fx.num(w['next_capacity'], unit)}, "
                 f"{fx.times(w['margin'])} as much")
    if gone:
        text += f" (not computed: {'; '.join(gone)})"
    return fx.Finding(f"weakest_{workload}", text + ".", w["capacity"], unit,
                      values=dict(hop=w["key"], margin=w["margin"]))


def predicted_vs_measured(res) -> fx.Finding | None:
    """The diagnosis's rate (its weakest hop) against chapter 7's best measured pipeline."""
    wl, w = res.metadata.get("image_workload"), diagnosis.weakest_of(res).get("image")
    if not wl or not w or not wl.get("best"):
        return None
    best = wl["best"]
    share = best["images_per_s"] / w["capacity"]
    tag = f"{best['format']}, W={best['workers']}, {best['variant']}"
    verdict = fx.choose(fx.direction(best["images_per_s"], w["capacity"], tol=0.05),
                        "above the model's limit: the model underrates a hop",
                        "below it: something the hops do not model (handing batches between processes, "
                        "the GPU step slowing under CPU load, start-up) costs the rest",
                        "level with it")
    return fx.Finding("predicted_vs_measured",
                      f"**The model against the measurement**: the weakest hop allows "
                      f"{fx.num(w['capacity'], 'images/s')}; chapter 7's best pipeline ({tag}) measured "
                      f"{fx.num(best['images_per_s'], 'images/s')}, **{fx.pct(share)}** of it, {verdict}.",
                      100 * share, "%")


def workers_needed(res) -> fx.Finding | None:
    """Chapter 4's model with chapter 7's measured CPU time per image: workers = ⌈D·B / G⌉."""
    wl = res.metadata.get("image_workload")
    if not wl or not wl.get("cpu_ms"):
        return None
    n = math.ceil(wl["cpu_ms"] * wl["batch_size"] / wl["step_ms"])
    fits = fx.choose(fx.direction(wl["cores"], n, tol=0.0), f"fewer than the {wl['cores']} usable cores",
                     f"more than the {wl['cores']} usable cores: the CPU cannot keep up at this step time",
                     f"all {wl['cores']} usable cores")
    best = wl.get("best")
    seen = (f" Chapter 7's best pipeline used {best['workers']} worker{'s' if best['workers'] != 1 else ''}."
            if best else "")
    return fx.Finding("workers_needed",
                      f"**Workers needed** (chapter 4's model `D·B/W ≤ G` with D = "
                      f"{fx.num(wl['cpu_ms'], 'ms')} of loader work per image measured in chapter 7, B = "
                      f"{wl['batch_size']}, G = {fx.num(wl['step_ms'], 'ms')}): **{n}**, {fits}.{seen}",
                      n, "workers")


def _demand(res, workload: str) -> float | None:
    h = _hops(res, workload)
    d = h.loc[h["hop"] == "gpu", "capacity"]
    return float(d.iloc[0]) if len(d) and pd.notna(d.iloc[0]) else None


def photo_workers(res) -> fx.Finding | None:
    """Chapter 8's decode cost per photo on one core against the GPU's demand (chapter 7): the
    workers needed, and whether the best loader it measured (threads or processes) keeps up."""
    p, need = res.metadata.get("photo"), _demand(res, "image")
    if not p or need is None:
        return None
    n = math.ceil(p["ms"] * need / 1e3)
    cores_worth = "core's" if n == 1 else "cores'"
    size = "×".join(str(v) for v in p["image_size"]) if p.get("image_size") else "photo-like"
    fits = fx.choose(fx.direction(p["cores"], n, tol=0.0), f"within the {p['cores']} cores of chapter 8's host",
                     f"more than the {p['cores']} cores of chapter 8's host: decoding photos on the CPU cannot "
                     "feed this GPU there", f"every one of the {p['cores']} cores of chapter 8's host")
    text = (f"**Photos instead of small JPEGs** (chapter 8's {size} images): decode + resize take "
            f"{fx.num(p['ms'], 'ms')} per image on one core ({p['decoder']}), so feeding the GPU's "
            f"{fx.num(need, 'images/s')} takes **{n}** {cores_worth} worth of decoding, {fits}.")
    kinds = [(k, p[k]) for k in ("process", "thread") if p.get(k)]
    if kinds:
        best_kind, best = max(kinds, key=lambda kb: kb[1]["images_per_s"])
        text += (f" The best loader it measured from cold files, {best['label']} "
                 f"({'worker processes' if best_kind == 'process' else 'threads'}), delivered "
                 f"{fx.num(best['images_per_s'], 'images/s')}, "
                 + fx.choose(fx.direction(best["images_per_s"], need, tol=0.0),
                             f"{fx.times(best['images_per_s'] / need)} the GPU's need: it keeps up",
                             f"{fx.pct(best['images_per_s'] / need)} of the GPU's need: it falls short",
                             "exactly the GPU's need") + ".")
        if len(kinds) == 2:
            (_, a), (_, b) = kinds
            text += (f" Processes ({a['label']}) were {fx.compare(a['images_per_s'], b['images_per_s'])} "
                     f"threads ({b['label']}).")
    return fx.Finding("photo_workers", text, n, "workers")


def to_gpu_finding(res) -> fx.Finding | None:
    """Chapter 9's fastest cold path from a file to GPU memory against the device's and the link's ceilings."""
    g = res.metadata.get("to_gpu")
    if not g:
        return None
    text = (f"**From a file to GPU memory** (chapter 9): the fastest cold path, {g['path']}, moved "
            f"**{fx.num(g['GBps'], 'GB/s')}**")
    ceilings = [(name, v) for name, v in (("the device's cold sequential read (dd)", g.get("device")),
                                          ("the pinned PCIe copy", g.get("pcie"))) if v]
    if ceilings:
        text += ", " + " and ".join(f"{fx.pct(g['GBps'] / v)} of {name} ({fx.num(v, 'GB/s')})"
                                    for name, v in ceilings)
        low_name, low = min(ceilings, key=lambda c: c[1])
        if len(ceilings) == 2:
            text += f": the lower ceiling is {low_name}, " + fx.choose(
                fx.direction(max(c[1] for c in ceilings), low, tol=0.05),
                f"{fx.times(max(c[1] for c in ceilings) / low)} below the other",
                "", "level with the other")
    gds = g.get("gds")
    if gds and gds != "GDS":
        text += f". kvikio ran in {gds}, not GPUDirect Storage: its data still passed through host memory"
    return fx.Finding("to_gpu_path", text + ".", g["GBps"], "GB/s")


def token_loader_finding(res) -> fx.Finding | None:
    """Chapter 10's cold token loader, mmap against read(), against the token step's need."""
    t = res.metadata.get("token_loader")
    need = _demand(res, "tokens")
    if not t or need is None:
        return None
    name = {"mmap": "mmap", "read": "read()"}
    b = t["modes"][t["best"]]
    text = (
        f"**Reading tokens** (chapter 10, cold): the fastest configuration used **{name.get(t['best'], t['best'])}**, "
        f"{fx.num(b['tokens_per_s'], 'tokens/s')} (sequence {b['seq']}, batch {b['batch']}, "
        f"{b['workers']} workers)"
    )
    others = [(k, v) for k, v in t["modes"].items() if k != t["best"]]
    for k, v in others:
        text += f", {fx.compare(b['tokens_per_s'], v['tokens_per_s'])} {name.get(k, k)}'s best"
    demand = "the stated demand" if _stated(res) else "the token step's need"
    text += (", " + fx.choose(fx.direction(b["tokens_per_s"], need, tol=0.0),
                              f"{fx.times(b['tokens_per_s'] / need)} {demand}: it keeps up",
                              f"{fx.pct(b['tokens_per_s'] / need)} of {demand}: it falls short",
                              f"exactly {demand}") + ".")
    return fx.Finding("token_loader", text, b["tokens_per_s"], "tokens/s")


PATHS = {"direct": "NCCL's own choice", "p2p_off": "P2P off", "p2p_shm_off": "P2P and SHM off", "gloo": "gloo (CPU)"}


def allreduce_finding(res) -> fx.Finding | None:
    """Chapter 11: one all-reduce of a step's gradients at the measured bandwidth against the step."""
    g = res.metadata.get("gradient_exchange")
    if not g:
        return None
    d = g["paths"][g["default"]]
    share = d["allreduce_ms"] / g["step_ms"]
    dev, devs = ("GPU", "GPUs") if g.get("cuda", True) else ("CPU process", "CPU processes")
    text = (f"**Gradients against the step** (chapter 11, {g['model']} on {g['world']} {devs}): one all-reduce of its "
            f"{fx.num(g['grad_bytes'] / 1e6, 'MB')} of gradients at the bus bandwidth measured at that size on "
            f"{PATHS.get(g['default'], g['default'])} ({fx.num(d['busbw_GBps'], 'GB/s')}) takes "
            f"**{fx.num(d['allreduce_ms'], 'ms')}**, {fx.pct(share)} of the step on one {dev} "
            f"({fx.num(g['step_ms'], 'ms')}): "
            + fx.choose(fx.direction(d["allreduce_ms"], g["step_ms"], tol=0.0),
                        "longer than the step, so no overlap can hide it",
                        "shorter than the step, so DDP can hide it behind the backward pass",
                        "as long as the step"))
    forced = [(k, v) for k, v in g["paths"].items() if k != g["default"]]
    if forced:
        text += "; forced through the host: " + ", ".join(
            f"{PATHS.get(k, k)} {fx.num(v['allreduce_ms'], 'ms')} ({fx.pct(v['allreduce_ms'] / g['step_ms'])} "
            "of the step)" for k, v in forced)
    if d.get("ddp_steps_per_s"):
        kept = d["ddp_steps_per_s"] * g["step_ms"] / 1e3
        text += (f". Measured, DDP with one bucket ran {fx.num(d['ddp_steps_per_s'], 'steps/s')} per {dev}, "
                 f"{fx.pct(kept)} of one {dev}'s rate without DDP")
    return fx.Finding("allreduce_vs_step", text + ".", 100 * share, "%")


def coverage(res) -> fx.Finding:
    found, missing = res.metadata["found"], res.metadata["missing"]
    text = f"**Coverage**: this diagnosis reads {len(found)} of the {len(diagnosis.SOURCES)} chapters it uses"
    text += (f"; missing: {', '.join(_title(c) for c in missing)}." if missing else ", all of them.")
    return fx.Finding("coverage", text, len(found), "chapters")


def findings(res) -> list[fx.Finding]:
    out = [weakest_finding(res, "image"), predicted_vs_measured(res), workers_needed(res),
           weakest_finding(res, "tokens"), weakest_finding(res, "gradients"), coverage(res)]
    return [f for f in out if f is not None]


def hop_notes(res, workload: str) -> list[fx.Finding]:
    """The computed sentences under each workload's chart: what chapters 8-11 add to its hops."""
    fns = {"image": [photo_workers], "tokens": [token_step_finding, to_gpu_finding, token_loader_finding],
           "gradients": [allreduce_finding]}[workload]
    return [f for f in (fn(res) for fn in fns) if f is not None]


# ----------------------------------------------------------------------------- tables
def hops_display(res, workload: str) -> pd.DataFrame:
    """Each hop of ``workload``: the chapter it comes from, its rate, that rate against the step's need
    and how it was computed (readable headers with units)."""
    h = _hops(res, workload)
    unit = UNITS[workload]
    d = _demand(res, workload)
    return pd.DataFrame({
        "hop": h["label"], "chapter": [lookup(c).number for c in h["chapter"]],
        f"rate ({unit})": [fx.num(v, unit, with_unit=False) if pd.notna(v) else "not run" for v in h["capacity"]],
        "× the step's need": ["—" if (d is None or pd.isna(v) or k == "gpu") else fx.times(v / d)
                              for k, v in zip(h["hop"], h["capacity"])],
        "how it is computed": h["basis"]})


def reference_checklist(host: str | None = None) -> pd.DataFrame:
    """The checklist as each chapter's page computes it from that chapter's committed reference
    result (so the column follows the reference files, not an older diagnosis of them)."""
    from datajourney.core.results import load_reference

    found = {ch: r for ch in dict.fromkeys(c for c, _ in diagnosis.CHECKLIST)
             if (r := load_reference(ch, host)) is not None}
    return diagnosis.checklist_table(found)


def checklist(res, ref, host: str | None = None) -> pd.DataFrame:
    """Practice · this run · reference run · published figure, one row per checklist entry."""
    mine = res.table("checklist")
    theirs = ({(r.chapter, r.key): r for r in reference_checklist(host).itertuples()}
              if ref is not None and ref is not res else {})
    rows = []
    for r in mine.itertuples():
        fig = published.figure(r.chapter, r.published) if isinstance(r.published, str) else None
        other = theirs.get((r.chapter, r.key))
        rows.append({"chapter": lookup(r.chapter).number, "practice": PRACTICE.get((r.chapter, r.key), r.key),
                     "this run": r.headline if isinstance(r.headline, str) else "not run",
                     "reference run": (other.headline if other is not None and isinstance(other.headline, str)
                                       else ("—" if other is None else "not run")),
                     "published": f"{fig.text} ({fig.metric})" if fig is not None else "—"})
    df = pd.DataFrame(rows)
    if ref is res or ref is None:
        df = df.drop(columns=["reference run"])
    return df


def summary_text(res) -> str:
    return "\n".join(f"* {line}" for line in res.metadata["summary"])


# ----------------------------------------------------------------------------- charts
def hops_chart(res, workload: str):
    """Each hop's rate (dots on a log axis) against what the GPU asks for (the dashed line)."""
    import plotly.graph_objects as go

    from datajourney.core.charts import PALETTE

    h = _hops(res, workload).dropna(subset=["capacity"])
    unit = UNITS[workload]
    demand = h.loc[h["hop"] == "gpu", "capacity"]
    d = float(demand.iloc[0]) if len(demand) else None
    data = h[h["hop"] != "gpu"]
    colours = [PALETTE[2] if d is None or v >= d else PALETTE[5] for v in data["capacity"]]
    fig = go.Figure(go.Scatter(x=data["capacity"], y=data["label"], mode="markers", name="hop",
                               marker=dict(size=14, color=colours), customdata=data[["basis"]],
                               hovertemplate="%{y}: %{x:,.3~s} " + unit + "<br>%{customdata[0]}<extra></extra>"))
    if d is not None:
        fig.add_vline(x=d, line=dict(dash="dash", color=PALETTE[7]))
        fig.add_annotation(x=math.log10(d), yref="paper", y=1.02, showarrow=False, yanchor="bottom",
                           text=f"the GPU's need: {fx.num(d, unit)}")
    fig.update_layout(title=f"{WORKLOADS[workload]}: each hop's rate (green keeps up)",
                      height=160 + 55 * len(data), margin=dict(l=20, t=90))
    fig.update_xaxes(type="log", title_text=f"{unit} the hop sustains (log scale; a model of its measurement)")
    fig.update_yaxes(title_text="")
    return fig


_BUDGET_JS = """
var gd = document.getElementById('{plot_id}');
var s = %s;
function loglog(x, xs, ys) {
  var lx = Math.log(x), n = xs.length;
  if (n == 0) return null;
  if (lx <= Math.log(xs[0])) return ys[0];
  if (lx >= Math.log(xs[n - 1])) return ys[n - 1];
  for (var i = 1; i < n; i++) {
    if (lx <= Math.log(xs[i])) {
      var a = Math.log(xs[i - 1]), b = Math.log(xs[i]);
      var t = (lx - a) / (b - a);
      return Math.exp(Math.log(ys[i - 1]) + t * (Math.log(ys[i]) - Math.log(ys[i - 1])));
    }
  }
}
function model() {
  var bytes = s.kib * 1024, out = {};
  out.files = s.random.x.length ? loglog(bytes, s.random.x, s.random.y) * 1e6 / bytes : null;
  out.shard = s.sequential.x.length ? loglog(bytes, s.sequential.x, s.sequential.y) * 1e6 / bytes : null;
  out.cpu = s.cores * 1000 / s.cpu;
  out.pcie = s.pcie.x.length ? loglog(s.B * s.tensor, s.pcie.x, s.pcie.y) * 1e9 / s.tensor : null;
  var demand = s.B * 1000 / s.step;
  var xs = s.keys.map(function (k) { return out[k]; });
  var colours = xs.map(function (v) { return v >= demand ? s.ok : s.short; });
  Plotly.restyle(gd, {x: [xs, [demand, demand]], 'marker.color': [colours, null]}, [0, 1]);
}
gd.on('plotly_sliderchange', function (e) { s[e.slider.name] = +e.step.value; model(); });
"""

BUDGET_STEP_MS = [5, 10, 20, 30, 50, 75, 100, 150, 200, 300]
BUDGET_BATCH = [8, 16, 32, 64, 128, 256, 512]
BUDGET_KIB = [4, 8, 16, 32, 64, 110, 256, 512, 1024]
BUDGET_CPU_MS = [0.25, 0.5, 1, 2, 4, 8, 16]


def _with(values, current: float) -> list:
    """A slider's values with this run's own value among them (so the chart starts exactly there)."""
    return sorted(set(values) | {round(current, 3)})


def budget_inputs(res) -> dict | None:
    """The measured curves and this run's workload that the budget chart starts from."""
    wl = res.metadata.get("image_workload")
    if not wl:
        return None

    def curve(name, pattern=None, y="MBps", x="file_size"):
        if name not in res.tables:
            return {"x": [], "y": []}
        t = res.table(name)
        if pattern is not None:
            t = t[t["pattern"] == pattern]
        t = t.sort_values(x)
        return {"x": [float(v) for v in t[x]], "y": [float(v) for v in t[y]]}

    return dict(step=wl["step_ms"], B=wl["batch_size"], kib=(wl["file_bytes"] or 16 * 1024) / 1024,
                cpu=wl["cpu_ms"] or 1.0, cores=wl["cores"], tensor=diagnosis.IMAGE_TENSOR_BYTES,
                random=curve("storage_curve", "random"), sequential=curve("storage_curve", "sequential"),
                pcie=curve("pcie_curve", None, "GBps", "size"), keys=["files", "shard", "cpu", "pcie"])


def budget_model(state: dict) -> dict:
    """Python twin of the chart's JavaScript: the hop rates and the demand for slider ``state``."""
    st = pd.DataFrame([*({"pattern": "random", "file_size": x, "MBps": y}
                         for x, y in zip(state["random"]["x"], state["random"]["y"])),
                       *({"pattern": "sequential", "file_size": x, "MBps": y}
                         for x, y in zip(state["sequential"]["x"], state["sequential"]["y"]))])
    pc = pd.DataFrame({"size": state["pcie"]["x"], "GBps": state["pcie"]["y"]})
    return diagnosis.budget(step_ms=state["step"], batch_size=state["B"], file_bytes=state["kib"] * 1024,
                            cpu_ms=state["cpu"], cores=state["cores"], storage=st if len(st) else None,
                            pcie=pc if len(pc) else None, tensor_bytes=state["tensor"])


def budget_figure(res):
    """The budget calculator: sliders for the GPU step, batch size, bytes per sample on disk and
    CPU time per sample; every hop's rate is recomputed in the browser by the same model as
    :func:`datajourney.chapters.c12_conclusion.experiment.budget` (no kernel needed)."""
    import plotly.graph_objects as go

    from datajourney.core.charts import PALETTE, value_slider

    state = budget_inputs(res)
    if state is None:
        return None
    labels = {"files": "storage: one file per sample", "shard": "storage: one shard, in order",
              "cpu": "CPU: the loader's work, all cores", "pcie": "PCIe: pinned copy (uint8 224² images)"}
    m = budget_model(state)
    xs = [m[k] for k in state["keys"]]
    fig = go.Figure(go.Scatter(x=xs, y=[labels[k] for k in state["keys"]], mode="markers", name="hop",
                               marker=dict(size=14, color=[PALETTE[2] if (v or 0) >= m["demand"] else PALETTE[5]
                                                           for v in xs]),
                               hovertemplate="%{y}: %{x:,.3~s} samples/s<extra></extra>"))
    fig.add_scatter(x=[m["demand"]] * 2, y=[labels[state["keys"][0]], labels[state["keys"][-1]]], mode="lines",
                    name="the GPU's need", line=dict(dash="dash", color=PALETTE[7]),
                    hovertemplate="the GPU's need: %{x:,.3~s} samples/s<extra></extra>")

    state_js = dict(state, ok=PALETTE[2], short=PALETTE[5])
    fig.update_layout(
        title="Budget: which hops keep up? (move the sliders; starts at this run's workload)",
        height=820,
        margin=dict(t=90, b=430, l=20),
        legend=dict(orientation="h", y=1.02, yanchor="bottom"),
        sliders=[
            value_slider("step", "GPU step (ms)", _with(BUDGET_STEP_MS, state["step"]), state["step"], -0.35),
            value_slider("B", "batch size", _with(BUDGET_BATCH, state["B"]), state["B"], -0.35 - 0.32),
            value_slider("kib", "sample on disk (KiB)", _with(BUDGET_KIB, state["kib"]), state["kib"], -0.35 - 0.64),
            value_slider(
                "cpu", "CPU time per sample (ms)", _with(BUDGET_CPU_MS, state["cpu"]), state["cpu"], -0.35 - 0.96
            ),
        ],
        meta={"post_script": _BUDGET_JS % json.dumps(state_js)},
    )
    fig.update_xaxes(type="log", title_text="samples/s (log scale)")
    return fig


def padding_text(res) -> str:
    """Chapter 5's share of real tokens per strategy: the part of the token step's tokens/s that is data."""
    p = res.table("padding").sort_values("efficiency")
    worst, best = p.iloc[0], p.iloc[-1]
    parts = ", ".join(f"{r.label} {fx.pct(r.efficiency)}" for r in p.itertuples())
    need = _demand(res, "tokens")
    text = (f"Of every position the step computes, the share that holds a real token (chapter 5, all samples): "
            f"{parts}.")
    if need is not None:
        text += (f" At the step's {fx.num(need, 'tokens/s')}, {best['label']} turns "
                 f"{fx.num(best['efficiency'] * need, 'tokens/s')} into training signal and "
                 f"{worst['label']} {fx.num(worst['efficiency'] * need, 'tokens/s')}.")
    return text


# ----------------------------------------------------------------------------- the answer
def _stated(res) -> bool:
    """Whether the token workload's demand is a stated figure (``llm_tokens_per_s``), not a measured step."""
    h = _hops(res, "tokens")
    row = h[h["hop"] == "gpu"]
    return not row.empty and "stated demand" in str(row["label"].iloc[0])


def chapter_link(ch: str) -> str:
    """A Markdown link to chapter ``ch`` (a sibling notebook of this page: MyST resolves it to its page)."""
    return f"[chapter {lookup(ch).number}]({lookup(ch).name}.ipynb)"


def _limit(res, workload: str, w: dict) -> str:
    """The weakest hop in a few words: the step itself, or the hop that cannot keep up with it."""
    if w["key"] == "gpu":
        if workload == "tokens" and _stated(res):
            return "the stated token demand (not a measurement: set `llm_tokens_per_s=None` to time a step)"
        return "the GPU's own step" if diagnosis._step_on_gpu(res, workload) else "the model's step on the CPU"
    return diagnosis.HOP_NAMES.get(w["key"], (w["label"],))[0]


def _margin_value(res, workload: str, w: dict) -> float:
    """The number behind the margin: the next hop's rate ÷ the step's need when the step limits, else
    the step's need ÷ the weakest hop's rate."""
    if w["key"] == "gpu":
        return w["margin"]
    return _demand(res, workload) / w["capacity"]


def opening(res) -> Opening:
    """The answer in one screen: per workload, which hop limits it and by how much (one sentence each),
    and what to do: the remedy's chapter and setting, its expected gain and the GPUs this host feeds."""
    ans = diagnosis.answer(res)
    out, actions = [], []
    for wl, a in ans.items():
        title = WORKLOADS[wl]
        if a is None:
            out.append(Finding(f"weakest_{wl}", f"**{title}**: no diagnosis, its chapters are not in this run."))
            continue
        w = a["weakest"]
        margin = a["margin"]
        if margin:
            m = fx.times(_margin_value(res, wl, w))
            margin = margin.replace(m, f"**{m}**", 1)
        out.append(Finding(f"weakest_{wl}", f"**{title}**: the weakest link is {_limit(res, wl, w)}"
                           + (f"; {margin}." if margin else "."), _margin_value(res, wl, w) if margin else None,
                           "×"))
        actions.append(Action(_action_text(res, wl, a), _snippet(res, wl, a)))
    return Opening(out, actions)


def _action_text(res, workload: str, a: dict) -> str:
    """What to do for one workload: the remedy (chapter and setting), its expected gain, and the GPUs of
    this kind the host's storage and CPU can feed at MLPerf Storage's utilisation bar."""
    r, w = a["remedy"], a["weakest"]
    setting = f"`{r['setting']}`" if "=" in r["setting"] else r["setting"]
    text = f"**{WORKLOADS[workload]}**: {chapter_link(r['chapter'])}, {setting}"
    if r.get("gain_of"):
        text += f", {fx.times(r['gain'])} more {r['gain_of']}"
    elif r["gain"] is not None:
        nxt = diagnosis.HOP_NAMES.get(w["next_key"], (w["next_label"],))[0] if w["next_key"] else None
        text += f": up to {fx.times(r['gain'])} faster" + (f" before {nxt} limits" if nxt else "")
    else:
        text += f" ({r['why']})"
    fed = a["fed"]
    if fed is not None:
        bar = fx.pct(diagnosis.AU_MIN)
        text += (f"; this host's storage and CPU feed **{fed['gpus']}** such GPUs at ≥ {bar} utilisation "
                 f"({fed['binding']} binds first)" if fed["gpus"] else
                 f"; this host's {fed['binding']} cannot feed even one such GPU at ≥ {bar} utilisation")
    elif workload != "gradients" and not a["on_gpu"]:
        text += "; no GPU here, so how many GPUs this host feeds needs a run on one"
    return text + "."


def _snippet(res, workload: str, a: dict) -> str | None:
    """The DataLoader arguments when the remedy is a worker count (values from this run)."""
    r = a["remedy"]
    if workload != "image" or not r["setting"].startswith("num_workers="):
        return None
    wl = res.metadata["image_workload"]
    return f"DataLoader(dataset, batch_size={wl['batch_size']}, shuffle=True, {r['setting']})"


def caveats_markdown(res) -> str:
    """The caveats that change a margin above (computed: guest-cold storage, photos instead of small
    synthetic JPEGs), one line per workload that has any; empty when none applies."""
    lines = [f"* {WORKLOADS[wl]}: " + "; ".join(a["caveats"]) + "."
             for wl, a in diagnosis.answer(res).items() if a and a["caveats"]]
    return ("**What could change these margins**\n\n" + "\n".join(lines)) if lines else ""


def token_step_finding(res) -> Finding | None:
    """The token step timed in this chapter: model, precision, device and the rate it consumes."""
    t = res.metadata.get("token_step")
    if not t:
        return None
    where = t["device_name"] if t["device"].startswith("cuda") else "the CPU (no GPU here)"
    model = diagnosis.TOKEN_MODELS.get(t["model"], t["model"])
    return Finding("token_step", f"**The token step** (timed here): {model} "
                   f"({fx.num(t['parameters'] / 1e6, 'M')} parameters, {t['precision']}) on {where} trained on "
                   f"{t['tokens_per_batch']:,} tokens in {fx.num(t['median_ms'], 'ms')} per step: "
                   f"**{fx.num(t['tokens_per_s'], 'tokens/s')}**.", t["tokens_per_s"], "tokens/s")
