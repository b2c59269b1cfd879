"""Chapter 8's page: it words the facts :mod:`.analysis` computed (opening, key results, advice), and shows the
result's tables, charts and notes as evidence. Every string from a result file that reaches Markdown goes
through :func:`~datajourney.core.phrasing.text` or :func:`~datajourney.core.phrasing.code`."""
from __future__ import annotations

import pandas as pd

from datajourney.chapters import published
from datajourney.chapters.c08_threads_processes_gil import analysis
from datajourney.chapters.c08_threads_processes_gil import params as gil
from datajourney.chapters.c08_threads_processes_gil.analysis import count as _count
from datajourney.chapters.c08_threads_processes_gil.analysis import loader_label as _label
from datajourney.chapters.common import facts_reader, on_paper
from datajourney.core import phrasing as say
from datajourney.core import stats
from datajourney.core.charts import subtitle
from datajourney.core.facts import Fact, Facts
from datajourney.core.phrasing import Action, Finding, Opening, and_list
from datajourney.core.units import equals, num, pct, shown, span, times

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(analysis.analyse)
#: Lines the opening's findings and first sentences of actions fill: the introduction above them runs six lines.
OPENING_LINES = 10
THREADED = gil.THREADED
DECODER_NAMES, epoch_summary, model_summary = analysis.DECODER_NAMES, analysis.epoch_summary, analysis.model_summary


def _dec(d) -> str:
    """A decoder's name from a result, escaped."""
    return say.text(DECODER_NAMES.get(d, d))


def decoder_note(facts) -> str | None:
    """The DataLoader's decoder and how it was chosen, and each thread loader with each decoder
    against the DataLoader: like with like, and what spdl.io changes."""
    f = facts_of(facts)
    d = f.get("decoders.dataloader")
    if d is None:
        return None
    dl = f.data.get("dataloader_decoder") or {}
    peaks = [g for k, g in f.facts.items() if k.startswith("decoders.peak.")]
    how = {"auto": "the decoder whose process pool peaked highest in section 1" if peaks else "the decoder chosen",
           "parameter": "set by `dataloader_decoder`"}.get(dl.get("how"), "the decoder every loader used")
    e2e = f.get("end_to_end")
    cs = [c for k, c in f.facts.items() if k.startswith("decoders.threads_vs_dataloader.")
          and not (e2e is not None and c.number == e2e.number)]   # the same comparison as the key result's
    parts = [f"the best thread loader with {_dec(c.setting['decoder'])} "
             f"({say.text(_label(c.setting['loader'], c.setting['concurrency']))})"
             f" ran {say.ratio_words(c)}" for c in cs]
    text = f"The DataLoader decoded with {_dec(d.setting['decoder'])}, {how}."
    if parts:
        text += " Against its best, " + "; ".join(parts) + "."
    if "spdl" not in f.data.get("loader_decoders", ["spdl"]):
        text += (" No loader of this result decoded with spdl.io, the paper's setting; a run where spdl.io loads "
                 "(FFmpeg's libraries) adds it.")
    return text


def finding_cpu_split(facts) -> Finding:
    """User against system CPU per image for the two loaders compared, set against the paper's
    observation that most of the DataLoader's CPU time was system time (inter-process communication)."""
    f = facts_of(facts)
    sh = f.get("cpu_split.dataloader")
    if sh is None or sh.number is None:
        return Finding("cpu_split", "The CPU split needs a DataLoader run.")
    text = ("The paper found most of the DataLoader's CPU time in system space; here the DataLoader "
            f"({say.text(_label(sh.setting['loader'], sh.setting['concurrency'], decoder=sh.setting['decoder']))}) "
            f"spent {say.share(sh.number)} in the kernel ({say.value(f['cpu_split.dataloader.user_ms'])} user, "
            f"{say.value(f['cpu_split.dataloader.system_ms'])} system per image)")
    t = f.get("cpu_split.threads")
    if t is not None and t.number is not None:
        text += f" and the thread pipeline {say.share(t.number)}"
    text += ": " + {"system": "system time dominated, as in the paper",
                    "user": "user time dominated, unlike the paper"}[
        str(f["cpu_split.dominant"].value)] + "."
    return Finding("cpu_split", text, 100 * sh.number, "%")


def epoch_lines(res) -> pd.DataFrame:
    """PSS over the epoch, per loader and path storage: the main process, the mean worker, and all
    processes together (one sample time, one value each)."""
    mem = res.table("epoch_memory") if "epoch_memory" in res.tables else pd.DataFrame()
    if mem.empty:
        return mem
    rows = []
    for (loader, storage, t), g in mem.groupby(["loader", "storage", "t"], sort=False):
        w = g[g["process"] != "main"]
        held = "Python list" if storage == "list" else "NumPy array"
        base = dict(loader=gil.LABELS.get(loader, loader), paths=held, t=t)
        rows.append(dict(base, series="main process", mb=float(g[g["process"] == "main"]["pss_bytes"].sum()) / 1e6))
        if len(w):
            rows.append(dict(base, series="each worker (mean)", mb=float(w["pss_bytes"].mean()) / 1e6))
        rows.append(dict(base, series="all processes", mb=float(g["pss_bytes"].sum()) / 1e6))
    return pd.DataFrame(rows)


def epoch_chart(res):
    """PSS over the epoch: one panel per loader, a line per path storage and process group."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from datajourney.chapters.c08_threads_processes_gil.charts import EPOCH_COLOURS

    d = epoch_lines(res)
    panels = list(dict.fromkeys(d["loader"]))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=panels, shared_yaxes=True,
                        horizontal_spacing=0.05)
    series = sorted({(p, s) for p, s in zip(d["paths"], d["series"], strict=True)})
    for ci, panel in enumerate(panels, start=1):
        for paths, name in series:
            g = d[(d["loader"] == panel) & (d["paths"] == paths) & (d["series"] == name)].sort_values("t")
            if g.empty:
                continue
            label = f"{paths} · {name}"
            fig.add_trace(go.Scatter(x=g["t"], y=g["mb"], mode="lines+markers", name=label, legendgroup=label,
                                     showlegend=ci == 1, line=dict(color=EPOCH_COLOURS.get(name),
                                                                   dash="solid" if "list" in paths else "dot"),
                                     hovertemplate=f"<b>{label}</b><br>%{{x:.1f}} s: %{{y:,.0f}} MB<extra></extra>"),
                          row=1, col=ci)
    fig.update_layout(title=subtitle("Memory (PSS) over one epoch of the paths Dataset", "one run"),
                      legend_title_text="paths held as · process",
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    # an epoch may last 2 s: plotly's own tick labels keep the halves ("0.5", "1.5"), a fixed format rounds them
    fig.update_xaxes(title_text="seconds into the epoch")
    fig.update_yaxes(title_text="PSS (MB)", row=1, col=1, rangemode="tozero", tickformat=",d")
    return fig


def epoch_table(res) -> pd.DataFrame:
    e = epoch_summary(res)
    if e.empty:
        return e
    return pd.DataFrame({"loader": e["loader"].map(gil.LABELS), "paths held as": e["storage"].map(
        {"list": "Python list", "numpy": "NumPy array"}), "workers or threads": e["workers"],
        "epoch (s)": e["seconds"], "Dataset in the main process (MB)": e["dataset_mb"],
        "each worker's PSS at the end (MB)": e["worker_pss_mb"],
        "each worker's private memory at the end (MB)": e["worker_uss_mb"],
        "all processes' PSS growth over the epoch (MB)": e["tree_growth_mb"]})


def epoch_note(facts) -> str | None:
    """Which of list and array grew the DataLoader's processes more over the epoch (the growth of every loader is
    the table's last column)."""
    v = facts_of(facts).get("epoch_growth.dataloader.larger")
    if v is None:
        return None
    f = facts_of(facts)
    grew = (f"{say.value(f['epoch_growth.dataloader.list'], runs=False)} with the list, "
            f"{say.value(f['epoch_growth.dataloader.numpy'], runs=False)} with the array")
    return "The DataLoader's processes together grew by " + grew + ": " + {
        "list": "the list more, as copy-on-read predicts.",
        "numpy": "the array more, so copy-on-read of the path objects was not what grew.",
        "level": "about as much, so copy-on-read of the path objects did not show."}[str(v.value)]


#: Why the graphed step was not used, and why the hybrid was skipped, by the code the experiment recorded.
GRAPH_SKIPS = {"no_gpu": "CUDA graphs need a GPU; this machine has none", "failed": "the graphed step failed"}
HYBRID_SKIPS = {"torchvision": "torchvision's JPEG decoder is not usable here",
                "no_dataloader": "it takes its workers from the DataLoader's sweep, which has no result here",
                "no_ceiling": "the model's ceiling was not measured",
                "no_moonshot": "the model-fed runs did not run"}


def nice_hybrid_note(facts) -> str | None:
    """What lowering the workers' priority and the hybrid did to the model, each sentence in the direction the
    facts give (None when neither ran)."""
    f = facts_of(facts)
    h = f.data.get("hybrid") or {}
    plain, hy = f.get("feeds.dataloader"), f.get("feeds.hybrid")
    parts = []
    v = f.get("feeds.nice")
    if v is not None:
        niced = f["feeds.dataloader.niced"]
        parts.append(f"With its workers at nice {int(niced.setting['nice'])} the DataLoader fed the model at "
                     f"{say.value(niced, runs=False)} of the ceiling against {say.value(plain, runs=False)} at nice 0: "
                     + {"helped": "the lower priority helped, as it would if busy workers delayed the training "
                                  "thread's kernel launches",
                        "cost": "the lower priority cost more than it gave: the workers lost CPU time the training "
                                "thread did not need",
                        "level": "the priority made no difference here"}[str(v.value)] + ".")
    if h.get("share") is not None and hy is not None:
        how = ("`hybrid_share`" if h.get("how") == "parameter" else
               f"{h['headroom']:g} × the best DataLoader's {num(h['cpu_rate'], 'img/s')} ÷ the ceiling's "
               f"{num(h['ceiling'], 'img/s')}, rounded to {h['step']:g}")
        text = (f"The hybrid decoded {pct(h['share'])} of each batch in {h['workers']} workers ({how}) and reached "
                f"{say.value(hy, runs=False)} of the ceiling at nice {int(hy.setting['nice'])}")
        vs = f.get("feeds.hybrid.vs_dataloader")
        if vs is not None:
            text += ", " + {"ahead": "ahead of the plain DataLoader: the GPU's share cost the step less than the CPU "
                                     "work it saved",
                            "behind": "behind the plain DataLoader: the GPU's share cost the step more than the CPU "
                                      "work it saved",
                            "level": "level with the plain DataLoader"}[str(vs.value)] + \
                f" ({say.value(plain, runs=False)})"
        hn = f.get("feeds.hybrid.niced")
        if hn is not None:
            text += f"; at nice {int(hn.setting['nice'])} against nice 0 it was {say.text(hn.value)}"
        parts.append(text + ".")
    elif h.get("skipped") or h.get("note"):
        parts.append("The hybrid feed did not run ("
                     + (HYBRID_SKIPS.get(h["skipped"]) or say.text(h["skipped"]) if h.get("skipped")
                        else say.text(h["note"]))
                     + (f": {say.text(h['why'])}" if h.get("why") else "") + ").")
    return " ".join(parts) or None


#: The published figures measured on other work than any run of this chapter: (metric, what differs), shown apart.
PUBLISHED_APART = ((analysis.PUB_MEM, "ImageNet's path list in every worker; the loaders here read {images:,} images "
                      "(section 5 takes the mechanism apart)"),)


def key_metrics(res) -> dict:
    """This run's value for each published figure, only where it measured the same work in the same setting: the
    paper's comparison is section 8's (SPDL's batch-decode pipeline against the DataLoader with Pillow and
    transforms, warm files), never section 3's loaders, which do other work; the start-up figures are the spawned
    DataLoader's first batch with the largest Dataset. A figure with no such measurement here stays empty and
    :func:`published_apart_note` names the difference."""
    out, f = {}, facts_of(res)
    for key, metric, value, spread in (
            ("paper.gain.warm", analysis.PUB_GAIN, lambda x: 100 * (x - 1), False),
            ("paper.cpu_ratio.warm", analysis.PUB_CPU, lambda x: 100 * (1 - x), False),
            ("paper.spdl_batch.warm", analysis.PUB_SPDL, None, True),
            ("paper.dl_pillow.warm", analysis.PUB_DL, None, True),
            ("first_batch.spawn.w4", analysis.PUB_TTFB4, None, False),
            ("first_batch.spawn.w32", analysis.PUB_TTFB32, None, False)):
        v = f.get(key)
        if v is not None and v.number is not None:
            sd = (v.spread[1] - v.spread[0]) / 2 if spread and v.spread is not None and v.n > 1 else None
            out[metric] = (value(v.number) if value else v.number, sd)
    return out


def published_apart_note(res) -> str | None:
    """The published figures this run has no measurement of the same work for, each with what differs; and, where
    the SPDL question did not run, that the paper's comparison is not set beside section 3's loaders."""
    f = facts_of(res)
    images = int(f.data.get("n_images") or 0)
    parts = []
    for metric, why in PUBLISHED_APART:
        fig = published.figure(analysis.CHAPTER, metric)
        if fig is not None:
            parts.append(f"{say.text(metric)} ({say.text(fig.text)}): {say.text(why.format(images=images))}")
    if f.get("paper.gain.warm") is None:
        for metric in (analysis.PUB_GAIN, analysis.PUB_CPU, analysis.PUB_SPDL, analysis.PUB_DL):
            fig = published.figure(analysis.CHAPTER, metric)
            if fig is not None:
                parts.append(f"{say.text(metric)} ({say.text(fig.text)}): the paper's comparison (its SPDL "
                             "pipeline against a DataLoader decoding with Pillow and applying transforms) did not "
                             "run here, and section 3's loaders do other work")
    return ("Shown apart, measured on other work: " + "; ".join(parts) + ".") if parts else None


def calibration_text(facts) -> str:
    """The images of this run and what decoding and resizing one cost on one core, per decoder."""
    cal = facts_of(facts).data.get("calibration")
    if not cal:
        return ""
    ib, (w, h) = cal["bytes"], cal["size"]
    parts = [f"{_dec(d['decoder'])} {num(d['decode_ms'] + d['resize_ms'], 'ms')} " + (
             "(one FFmpeg filter graph)" if d["decoder"] == "spdl" else
             f"(decode {num(d['decode_ms'], 'ms')}, resize {num(d['resize_ms'], 'ms')})") for d in cal["decoders"]]
    return (f"The {w}×{h} JPEGs of this run average {num(ib['mean'] / 1e3, 'kB')} "
            f"({num(ib['min'] / 1e3, 'kB')}–{num(ib['max'] / 1e3, 'kB')}). Decoding and resizing one image on one "
            f"core (median, page cache warm): " + "; ".join(parts) + ".")


def decoder_notes(facts) -> str:
    """The decoders on this machine, by their names, with the version (or the reason) each one's check recorded:
    those measured, then those not."""
    decs = facts_of(facts).data.get("decoders", {})

    def named(k, v) -> str:
        return f"{_dec(k)} ({say.text(v['note'])})" if v.get("note") else _dec(k)

    ran = [named(k, v) for k, v in decs.items() if v["run"]]
    other = [named(k, v) for k, v in decs.items() if not v["run"]]
    return " ".join(([f"Decoders measured on this machine: {and_list(ran)}."] if ran else [])
                    + ([f"Not measured here: {and_list(other)}."] if other else []))


def _spread(s: pd.DataFrame) -> dict:
    """A summary's mean and min–max columns of images/s, the range headed by its most runs."""
    return {"images/s (mean)": s["mean"], f"images/s, min–max over {int(s['n'].max())} runs": [
        span(a, b) for a, b in zip(s["min"], s["max"], strict=True)]}


def primitive_table(res) -> pd.DataFrame:
    s = analysis.primitive_summary(res)
    return pd.DataFrame({"decoder": s["decoder"].map(DECODER_NAMES), "pool": s["executor"].map(
        {"thread": "threads", "process": "processes"}), "threads or processes": s["concurrency"], **_spread(s),
        "pool start-up (s)": s["startup_s"]})


def primitive_lines(res) -> pd.DataFrame:
    s = analysis.primitive_summary(res)
    return s.assign(executor=s["executor"].map({"thread": "ThreadPoolExecutor", "process": "ProcessPoolExecutor"}),
                    decoder=s["decoder"].map(DECODER_NAMES)).sort_values(["decoder", "executor", "concurrency"])


def op_lines(res, decoder: str) -> pd.DataFrame:
    o = res.table("ops")
    o = o[o["decoder"] == decoder]
    s = stats.summarise(o, ["op", "executor", "concurrency"], "ms_per_image")
    return s[s["op"].isin(["read", "decode", "resize", "batch"] if decoder != "spdl" else ["read", "decode", "batch"])]


def startup_note(facts) -> str:
    """The start-up with an empty Dataset: fork against the other start methods at the most workers,
    and why a fresh interpreter costs more, said only where the numbers show it."""
    f = facts_of(facts)
    v = f.get("startup.empty.slower")
    fork = f.get("startup.empty.fork")
    if v is None or fork is None:
        return ""
    others = [g for k, g in f.facts.items() if k.startswith("startup.empty.") and not g.quantity == "choice"
              and k != "startup.empty.fork"]
    w = int(fork.setting["workers"])
    txt = and_list([f"{say.value(g)} with {say.text(g.setting['start_method'])}" for g in others])
    return (f"With an empty Dataset and {w} worker{'s' if w != 1 else ''}, the first batch took {say.value(fork)} "
            f"with fork, {txt}: " + {
                "fresh": "a spawned worker pays for a fresh interpreter and its imports",
                "fork": "forking this process cost more than starting fresh interpreters here",
                "level": "the start methods cost about the same here"}[str(v.value)] + ".")


def startup_lines(res) -> pd.DataFrame:
    """The start-up sweep as bars: seconds to the first batch by start method, Dataset size and workers (one run)."""
    st = res.table("startup")
    return pd.DataFrame({"start method": st["start_method"].astype(str), "paths": st["n_paths"].astype(int),
                         "Dataset": ["empty Dataset" if n == 0 else f"{n:,} paths" for n in st["n_paths"]],
                         "DataLoader workers": st["workers"].astype(int),
                         "mean": st["first_batch_s"], "min": st["first_batch_s"], "max": st["first_batch_s"], "n": 1})


def loader_lines(res) -> pd.DataFrame:
    """Every configuration; of a result with the old windows, only those whose CPU time shows they produced what
    they counted (the others overstate throughput; they stay in the table). A series per loader and decoder, named
    "decoder · kind" (the SPDL pipeline without its collate copy is the SPDL pipeline's kind)."""
    s = analysis.loader_summary(res)
    s = s[s["steady"]]
    kinds = [gil.LABELS["spdl" if k == "spdl_prealloc" else k] if k in gil.LABELS else k for k in s["loader"]]
    # the decoder as the chart sets it apart (dash and marker); the pipeline without its collate copy is its own
    settings = [analysis.decoder_name(d) + (", no collate copy" if k == "spdl_prealloc" else "")
                for k, d in zip(s["loader"], s["decoder"], strict=True)]
    s = s.assign(kind=kinds, setting=settings, concurrency=_workers_or_threads(s),   # the axis: workers or threads
                 loader=[k if lo == "nvjpeg" else f"{st} · {k}"
                         for lo, k, st in zip(s["loader"], kinds, settings, strict=True)])
    return s.sort_values(["kind", "setting", "concurrency"])


def window_note(res) -> str:
    """How the timed windows of this result were sized (and, for old ones, what that means)."""
    w = facts_of(res).data["windows"]
    if not w["old"]:
        f, t = w["factor"], w["batches"]
        span_txt = f" ({t[0]} to {t[1]} batches)" if t else ""
        return f"Each timed window held at least {f} times the batches in flight, in whole waves{span_txt}."
    n = w["loader_batches"]
    return (f"These loader rows come from the old timed windows: a fixed {n} batches after the batches in flight, "
            "with the thread pool making one batch per task. A DataLoader's workers (and those tasks) finish "
            "their batches in waves, and a window of a fraction of a wave more or less than whole waves counts "
            "a wave's batches in the time of fewer, so its rate depends on where it fell: the deeper "
            "configurations may be overstated even where they are kept. Rerun the chapter for windows sized "
            "by waves.")


def _not_steady(old: bool) -> str:
    """Why a row whose window did not make its images is left out, in a table cell (``old``: a result timed with
    the old fixed windows)."""
    return ("no: old timed window, not steady" if old
            else f"no: CPU per image under {pct(analysis.DRAINED_SHARE)} of one image's decode")


def steady_note(facts) -> str | None:
    """Which windows did not make the images they counted (the analysis's ``unsteady``), each with its CPU time per
    image and its share of one image's decode + resize on one core."""
    u = facts_of(facts).data.get("unsteady") or {}
    rows = [f"{say.text(r['label'])} ({num(r['cpu_ms'], 'ms')}, {pct(r['share'])})" for r in u.get("loaders") or []]
    rows += [f"the model fed by {say.text(r['label'])} ({num(r['cpu_ms'], 'ms')})" for r in u.get("model") or []
             if not r["above"]]
    if not rows:
        return None
    head = (f"CPU per image under {pct(u['floor'])} of one image's decode and resize on one core "
            f"({num(u['unit_ms'], 'ms')}, calibration above): " + "; ".join(rows) + ". ")
    if u["old"]:
        return head + ("These old timed windows spanned too few waves of batches, so their images/s overstate "
                       "production: left out of the chart, the best configurations and the findings.")
    return head + ("Their windows counted images decoded before they opened (what the loader's queues held), so their "
                   "images/s overstate production: left out of the chart, the best configurations and the findings.")


def moonshot_notes(gpu, res) -> list[str]:
    """The notes under the model-fed runs (the priority and the hybrid, GPU decoding), of the run that has a GPU
    (``gpu``: this run or the reference run), labelled when they are the reference run's."""
    if gpu is None:
        return []
    tail = "" if gpu is res else " (reference run)"
    return [n + tail for n in (feed_unmeasured_note(gpu), nice_hybrid_note(gpu), gpu_share_note(gpu)) if n]


def feed_unmeasured_note(facts) -> str | None:
    """Why the model-fed runs give no advice on decoding: their DataLoader was not the library's default."""
    u = facts_of(facts).get("image_decode.model_feed.unmeasured")
    return None if u is None else (
        "No advice on decoding for the model from these runs: their DataLoader decoded with "
        f"{say.text(u.value)}, not with Pillow, PyTorch's default, and a gain needs its baseline.")


def gpu_share_note(facts) -> str | None:
    """Why GPU decoding feeds the model below its ceiling, from the decode-only rate."""
    f = facts_of(facts)
    v = f.get("gpu_share.verdict")
    if v is None:
        return None
    bs = int(f["gpu_share.decode"].setting["batch"])
    return (f"GPU decoding alone delivered {say.value(f['gpu_share.decode'])}, at most "
            f"{say.value(f['gpu_share.decode_ms'])} of GPU time per batch of {bs} against a "
            f"{say.value(f['gpu_share.step_ms'])} step: taking turns leaves "
            f"{say.share(f.number('gpu_share.predicted'))} of the ceiling; fed so, the model reached "
            f"{say.share(f.number('gpu_share.reached'))}: " + {
                "above": "more, so part of the decoding ran beside the training kernels",
                "below": "less, so something besides the GPU's time also held the steps back",
                "level": "as predicted, so the shortfall is the GPU's own time spent decoding"}[str(v.value)] + ".")


def _workers_or_threads(s: pd.DataFrame) -> list[int]:
    """Each row of :func:`~.analysis.loader_summary` by its workers or threads, as its label counts them: the
    batch-decode pipeline by its own thread pool, not by the tasks it keeps at once (its ``concurrency``)."""
    return [int(c if pd.isna(t) else t) for c, t in zip(s["concurrency"], s["threads"], strict=True)]


def loader_table(res) -> pd.DataFrame:
    """The loaders' table: each configuration's workers or threads (the batch-decode pipeline's own thread pool, as
    its label names it, not the tasks it keeps at once), images/s over the runs, first batch, CPU and memory."""
    s = analysis.loader_summary(res)
    out = pd.DataFrame({"loader": s["loader"].map(gil.LABELS), "decoder": [
        "—" if k == "nvjpeg" else DECODER_NAMES.get(d, d) for k, d in zip(s["loader"], s["decoder"], strict=True)],
        "workers or threads": _workers_or_threads(s), **_spread(s)})
    if not s["steady"].all():
        out["in the findings"] = ["yes" if v else _not_steady(analysis.old_windows(res)) for v in s["steady"]]
    out["first batch (s)"] = s["first_batch_s"]
    out["user CPU per image (ms)"] = s["user_ms_per_image"]
    out["system CPU per image (ms)"] = s["system_ms_per_image"]
    out["busy cores"] = s["cpu_cores"]
    out["PSS, all processes (MB)"] = s["pss_mb"]
    if s["added_pss_mb"].notna().any():
        out["PSS added (MB)"] = s["added_pss_mb"]
    out["processes"] = s["processes"].round().astype(int)
    return out.sort_values(["loader", "decoder", "workers or threads"]).reset_index(drop=True)


def loader_spread(facts) -> list[str]:
    """A note on each steady loader configuration whose runs spread widely (the analysis's ``spread``)."""
    return [f"{say.text(x['label'])} varied over {span(x['low'], x['high'], 'img/s')} in {x['n']} runs (coefficient of "
            f"variation {pct(x['cv'])}): read it as a range, not a point." for x in facts_of(facts).data.get("spread")
            or []]


#: Why the end-to-end runs have no thread pipeline at the SPDL sweep's best setting, by the code the run recorded.
CHOICE_SKIPS = {"no_fit": "its windows need {need:,} images, more than the data set holds (raise `n_images`)",
                "no_rows": "the sweep measured no configuration", "off": "the SPDL question was switched off",
                "spdl": "spdl.io cannot decode here", "error": "the SPDL question failed"}


def end_to_end_choice_note(res) -> str:
    """Which thread setting the end-to-end comparison ran and why: the SPDL sweep's best (its warm rate among the
    configurations it was chosen from), or why not; older results ran thread loaders of one image per task only."""
    f = facts_of(res)
    ch = f.data.get("end_to_end_threads")
    if ch is None:
        return ("In this result the thread loaders decode one image per task, at the thread counts of "
                "`thread_concurrency`: it predates the run of the SPDL sweep's best setting from cold files, so the "
                "loader question is answered from the SPDL question's warm runs (section 8); a new run of the "
                "chapter sets that setting here too.")
    if ch.get("how") != "sweep_best":
        why = str(ch.get("why") or ch.get("how"))
        return ("The thread loaders here decode one image per task: the SPDL sweep's best setting did not run end to "
                "end (" + CHOICE_SKIPS.get(why, say.text(why)).format(need=int(ch.get("images_needed") or 0)) + ").")
    bt = f.get("paper.best_threads")   # the fresh runs of the sweep's best, which its verdict rests on
    fresh = ("" if bt is None or bt.number is None or analysis.UNCONFIRMED in f
             else f"; fresh runs of it read {say.value(bt)}")
    return (f"The batch-decode pipeline runs section 8's fastest warm setting, chosen before this step: "
            f"{say.text(ch['config'])} (best of {len(ch.get('candidates') or {})} in the sweep's table){fresh}.")


def cold_note(facts) -> str | None:
    """How the loaders' files were evicted from the page cache, and whether any was still resident."""
    c = facts_of(facts).data.get("cold")
    if not c:
        return None
    meth = ", ".join(say.code(m) for m in c["methods"]) or "an unrecorded method"
    left = ("none was still resident" if c["left"] == "none" else
            f"at most {pct(c['resident'])} of them was still resident")
    return f"Each loader's files were evicted from the page cache first ({meth}); {left}."


def loader_notes(facts) -> list[str]:
    """The notes under the loaders' table: the CPU split against the paper, the thread side's setting, the decoders,
    the SPDL pipeline's scaling and how the runs were timed."""
    return [n for n in (finding_cpu_split(facts).text, end_to_end_choice_note(facts), decoder_note(facts),
                        spdl_note(facts), timing_note(facts)) if n]


def timing_note(facts) -> str | None:
    """How the loader runs were timed, folded: the eviction, the windows, the windows left out and the wide
    spreads."""
    how = [n for n in [cold_note(facts), window_note(facts), steady_note(facts), *loader_spread(facts)] if n]
    return ("<details><summary>How these runs were timed</summary>\n\n" + "\n\n".join(how) + "\n\n</details>"
            if how else None)


def ipc_text(facts) -> str:
    """The batches that cost extra time through worker processes, in one sentence (each batch is in
    :func:`ipc_table`)."""
    rows = facts_of(facts).data.get("ipc") or []
    if not rows:
        return "The IPC experiment did not run (`ipc_batch_sizes` is empty)."
    extra = [r for r in rows if r["verdict"] == "extra"]
    if not extra:
        return "No batch measured any extra time through a worker process against the main process (table)."
    lo, hi = min(extra, key=lambda r: r["extra_ms"]), max(extra, key=lambda r: r["extra_ms"])
    which = "Every batch size" if len(extra) == len(rows) else f"{len(extra)} of {len(rows)} batch sizes"
    return (f"{which} took longer through a worker process than in the main process: "
            f"{span(lo['extra_ms'], hi['extra_ms'], 'ms')} more, "
            f"{span(100 * min(r['share'] for r in extra), 100 * max(r['share'] for r in extra), '%')} of the CPU time "
            "of decoding that batch (table).")


def ipc_table(facts) -> pd.DataFrame:
    """Each batch size: its bytes, its time in the main process and through worker processes, and the extra."""
    rows = facts_of(facts).data.get("ipc") or []
    return pd.DataFrame([{"batch (images)": r["batch_size"], "MB": r["mb"], "main process (ms)": r["base_ms"],
                          f"through {_count(r['workers'], 'worker')} (ms)": r["ms"],
                          "extra (ms)": r["extra_ms"] if r["verdict"] == "extra" else "none measured",
                          "extra, % of decoding the batch": pct(r["share"]) if r["verdict"] == "extra" else "—"}
                         for r in rows])


def free_threading_text(res) -> str:
    """The interpreter this run used: with or without the GIL."""
    ft = facts_of(res).data["free_threading"]
    if not ft["gil_enabled"]:
        return f"This run's Python {say.text(ft['python'])} had the GIL disabled: sections 1 and 2 ran without it."
    return (f"This run's Python {say.text(ft['python'])} had the GIL enabled"
            + (" (a free-threaded build)." if ft["free_threaded_build"] else "."))


def _left_out(old: bool, steady, pcts) -> list[str]:
    """Why a model-fed row is left out of the findings: above the ceiling (timing noise cannot explain it), or a
    window that did not make the images it counted."""
    return ["yes" if ok else "no: above the ceiling" if p > 100 * analysis.CEILING_SLACK else _not_steady(old)
            for ok, p in zip(steady, pcts, strict=True)]


def model_table(res) -> pd.DataFrame:
    """The model-fed runs, fastest first; a column says which rows the findings leave out, only where some are."""
    s = model_summary(res)
    if s.empty:
        return s
    out = pd.DataFrame({"feed": s["label"], **_spread(s),
                        "% of the ceiling": s["pct_of_ceiling"], "share of the step spent waiting for data (%)":
                        100 * s["wait_share"], "busy cores": s["cpu_cores"]})
    if not s["steady"].all():
        out.insert(1, "in the findings", _left_out(analysis.old_windows(res), s["steady"], s["pct_of_ceiling"]))
    return out.sort_values("images/s (mean)", ascending=False).reset_index(drop=True)


def model_chart(res):
    """The model-fed runs as horizontal bars (the feeds' names are long), the runs' range as whiskers
    labelled as such, and the ceiling as a line."""
    import plotly.graph_objects as go

    s = model_summary(res).sort_values("mean")
    n = int(s["n"].max())
    fig = go.Figure(go.Bar(
        y=s["label"], x=s["mean"], orientation="h", marker_color="#0072B2",
        error_x=dict(type="data", symmetric=False, array=s["max"] - s["mean"], arrayminus=s["mean"] - s["min"]),
        hovertemplate="<b>%{y}</b><br>%{x:,.0f} img/s (mean)<extra></extra>"))
    fig.add_vline(x=res.metadata["ceiling"]["images_per_s"], line=dict(dash="dot"), annotation_text="ceiling")
    fig.update_layout(title=subtitle("ResNet-50 (bf16, channels_last) fed from cold files",
                                     f"bar: mean; whiskers: min–max over {n} runs"),
                      height=120 + 40 * len(s), margin=dict(l=20))
    fig.update_xaxes(title_text="images/s", tickformat=",d",
                     rangemode="tozero")
    fig.update_yaxes(automargin=True)
    return fig


def errors_text(res) -> str | None:
    """The measurements that failed in this run, each with its error (none: None)."""
    errs = facts_of(res).data.get("errors") or []
    if not errs:
        return None
    return ("These measurements failed in this run and are missing from its tables:\n\n"
            + "\n".join(f"* {say.text(e.get('what', ''))}: {say.code(e.get('error', ''))}" for e in errs))


def spdl_note(facts) -> str | None:
    """How the SPDL pipeline scaled with threads for each decoder, beside the thread pool with the same
    decode function (``data["spdl_scaling"]``)."""
    parts = []
    for r in facts_of(facts).data.get("spdl_scaling") or []:
        text = (f"with {_dec(r['decoder'])} the SPDL pipeline delivered {span(*r['rate'], 'img/s')} from "
                f"{r['threads'][0]} to {r['threads'][1]} threads, keeping {span(*r['cores'])} cores busy")
        tp = r.get("pool")
        if tp is not None:
            text += (f", and the plain thread pool {num(tp['rate'], 'img/s')} ({say.text(tp['label'])}), "
                     + {"more": "more than", "less": "less than", "level": "about as much as"}[tp["vs"]]
                     + " the pipeline's best")
        parts.append(text)
    return ("With the same decode function in every thread loader: " + "; ".join(parts) + ".") if parts else None


# --------------------------------------------------------------------------- SPDL per-stage statistics


def busy_cell(v) -> str:
    """A measured occupancy as a table cell: its share, or, above 100%, a flag (:func:`busy_flag_note` says why)."""
    if v is None or pd.isna(v):
        return "—"
    return pct(float(v)) if float(v) <= analysis.OVER_FULL_AT else "flagged: over 100%"


def busy_flag_note(flags: list[dict], what: str) -> str | None:
    """The measured cause of each occupancy above 100% (:func:`~.analysis.busy_flags`): how much more than full it
    was, per slot, against one task's time (a task begun before the window counts whole in it)."""
    if not flags:
        return None
    parts = [f"{say.text(x['name'])}: {pct(x['busy'])} of a {num(x['window_s'], 's')} window, "
             f"{num(x['over_ms'], 'ms')} per slot beyond full against {num(x['task_ms'], 'ms')} per task, "
             + ("within one task: tasks begun before the window count whole in it" if x["edge"] else
                "more than one task: its counters overlap beyond the window") for x in flags]
    return f"Flagged, a measurement problem: {what} measured busy above 100%. " + "; ".join(parts) + "."


#: The pipelines of :data:`~.analysis.PIPELINES` as the stage table's cells name them.
STAGE_PIPELINES = {"Pillow, with a collate stage": "Pillow + collate", "Pillow, each image decoded into its batch's "
                   "row": "Pillow, no collate copy", "spdl.io, batch converted by spdl.io": "spdl.io"}


def spdl_stage_table(res) -> pd.DataFrame:
    """Each pipeline's stages at its highest thread count: task time, how busy, queue occupancy."""
    frames = [pd.DataFrame({"pipeline": STAGE_PIPELINES.get(what, what), "decode threads": g["concurrency"],
                            "stage": g["stage"],
                            "tasks in the window": g["tasks"], "ms per task": g["task_ms"],
                            "share of its threads busy": [busy_cell(v) for v in g["busy_measured"]],
                            "share of time its output queue held an item": [
                                pct(v) if pd.notna(v) else "—" for v in g["out_occupancy"]]})
              for what, g in analysis.top_stages(res)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def spdl_limit(facts, loader: str = "spdl", decoder: str = "pillow") -> dict | None:
    """What limits an SPDL pipeline at its highest thread count and the numbers that decide it (the analysis's
    :func:`~.analysis.spdl_limit`, stored with the facts); None when the result has no per-stage statistics."""
    return ((facts_of(facts).data.get("spdl") or {}).get("limits") or {}).get(f"{loader}/{decoder}")


#: What limits an SPDL pipeline, by the cause the analysis found (:func:`~.analysis.spdl_limit`).
CAUSE_WORDS = {"stage": "The busiest stage was {stage} ({threads}), busy {busy} of the window at {task} per task; at "
                        "full time it would pass about {cap}. So the {stage} stage, after decoding, limits the "
                        "pipeline: more decode threads cannot help, and the GIL is not what stops it.",
               "gil": "Decode was the busiest stage, and decoding and resizing an image took {slowdown} its time on "
                      "one core alone: the threads spend the difference waiting for the interpreter lock (the "
                      "per-operation contention of section 2), so the GIL limits the pipeline, not the number of "
                      "threads or the batching stages.",
               "none": "No stage was busy {limit} of the window (the busiest, {stage}, {busy}), and the training "
                       "loop's queue held a batch {sink} of the time: {waits}.",
               "handoff": "Decode was the busiest stage, and most of each task went to the hand-off between the "
                          "event loop and the threads, Python code that runs one thread at a time under the "
                          "interpreter lock: the GIL limits the pipeline, through its scheduling rather than the "
                          "decode itself.",
               "read": "Decode was the busiest stage, and its threads spent more of each image reading the cold "
                       "file than decoding it: storage latency limits the pipeline; more reads in flight (more "
                       "threads, or a separate read stage with its own concurrency) would raise throughput, and the "
                       "GIL is not what stops it.",
               "threads": "Decode was the busiest stage, and decoding an image took about its time on one core "
                          "alone, so the decode threads were simply too few: more decode concurrency would raise "
                          "throughput."}
#: Where no stage was saturated, who waited for whom, by the sink queue's occupancy.
WAITS_WORDS = {"consumer": "batches waited for the consumer, so the loop that takes them (the copy to the device) "
                           "set the pace",
               "stages": "the stages waited on each other"}
#: After :data:`WAITS_WORDS`' "stages": what tests it, by whether this run holds the collate check (a check named
#: "below" must be on the page).
COLLATE_TEST_WORDS = {True: ", which the collate check below tests",
                      False: "; this run did not include the collate check (`collate_check`) that tests it"}


def spdl_limit_note(facts) -> str:
    """The measured cause of the Pillow SPDL pipeline's plateau, in the words of the cause the analysis found."""
    f = facts_of(facts)
    lim = spdl_limit(f)
    if lim is None:
        if (f.data.get("spdl") or {}).get("ran"):
            return ("The SPDL pipeline's per-stage statistics (task time per stage, queue occupancy) are not in "
                    "this result: they are not in the reference run, which predates them; a new run of the "
                    "chapter records them.")
        return "The SPDL pipeline did not run here, so it has no per-stage statistics."
    c, b = lim["c"], lim["busy"]
    head = (f"With {c} decode threads ({num(lim['rate'], 'img/s')}) the Pillow pipeline's decode stage was "
            + (f"busy {pct(lim['decode_busy'])} of the window" if not lim["over_full"]
               else "measured busy above the whole window (flagged below the table)")
            + f" at {num(lim['decode_ms'], 'ms')} per image")
    if lim["read_ms"] is not None:
        head += (f": {num(lim['read_ms'], 'ms')} reading, {num(lim['work_ms'], 'ms')} decoding and resizing "
                 f"({num(lim['unit'], 'ms')} on one core alone), {num(lim['handoff_ms'], 'ms')} handing off to and "
                 "from the event loop")
    else:
        head += f" (decoding and resizing alone take {num(lim['unit'], 'ms')} on one core)"
    if lim["growth"] is not None:
        head += (f"; from {lim['c_lo']} to {c} threads the time per image grew "
                 f"{times(lim['growth'])} while the threads grew {times(c / lim['c_lo'])}")
    return head + ". " + CAUSE_WORDS.get(lim["cause"], CAUSE_WORDS["none"]).format(
        stage=say.text(lim["stage"]), threads=_count(lim["stage_threads"], "thread"), busy=pct(b),
        task=num(lim["task_ms"], "ms"), cap=num(lim["cap"], "img/s"), slowdown=times(lim["slowdown"]),
        limit=pct(analysis.BUSY_LIMIT), waits=WAITS_WORDS.get(lim["waits"], "") + (
            COLLATE_TEST_WORDS[finding_collate(f) is not None] if lim["waits"] == "stages" else ""),
        sink="—" if lim["sink_occupancy"] is None else pct(lim["sink_occupancy"]))


def finding_collate(facts, res=None) -> Finding | None:
    """The deciding experiment for the Pillow pipeline's plateau: collate off the critical path, and the busiest
    stage then (``res``: older callers' result, read through its facts)."""
    f = facts_of(facts if facts is not None else res)
    c = f.get("collate")
    if c is None or c.number is None:
        return None
    pre, base = f[c.of], f[c.basis]
    verdict = ("the collate stage was holding it back" if c.number > 1 and not c.level
               else "the collate stage was not what held it")
    text = (f"With each image decoded straight into its batch's row (no collate copy), the Pillow SPDL pipeline at "
            f"{int(pre.setting['concurrency'])} threads delivered {say.value(pre)}, "
            f"{say.comparison(c, f)} ({say.value(base)}), so {verdict}")
    lim = spdl_limit(f, "spdl_prealloc", "pillow")
    if lim is not None:
        text += (f"; the busiest stage then was {say.text(lim['stage'])}, busy {pct(lim['busy'])} of the window"
                 + ("" if lim["stage"] != "decode" else f" at {num(lim['decode_ms'], 'ms')} per image"))
    return Finding("collate", text + ".", c.number, "×")


def collate_note(facts) -> str | None:
    """What the collate check leaves as the limit, in the words of :func:`spdl_limit_note`'s causes."""
    f = facts_of(facts)
    lim = spdl_limit(f, "spdl_prealloc", "pillow")
    if f.get("collate") is None or lim is None:
        return None
    cause = {"stage": f"the {say.text(lim['stage'])} stage, after decoding",
             "handoff": "the hand-off between the event loop and the decode threads",
             "read": "reading the cold files", "gil": "the decode threads waiting for the interpreter lock",
             "threads": "too few decode threads",
             "none": "no single stage (none was busy most of the window)"}[lim["cause"]]
    return (f"Without the collate copy, the pipeline's decode threads spent {num(lim['work_ms'], 'ms')} decoding "
            f"and resizing each image (one core alone: {num(lim['unit'], 'ms')}), and what limits it is {cause}.")


def dali_note(res) -> str:
    """NVIDIA DALI: named by the paper, not measured here, said plainly."""
    installed = facts_of(res).data.get("dali_installed")
    here = ("installed here, but the chapter has no DALI loader yet" if installed else
            "not installed here, and the book does not install it (`nvidia-dali-cuda120`)")
    return "**NVIDIA DALI** (in the SPDL paper) is not measured: " + here + "."
# --------------------------------------------------------------------------- the opening


# --------------------------------------------------------------------------- 7. the SPDL question
#: The SPDL paper's ImageNet figures (96 cores), read from the one table of published figures: its thread
#: pipeline's rate over the DataLoader's, and its CPU per image over the DataLoader's (as ratios).
PAPER_GAIN = 1 + float(published.figure(analysis.CHAPTER, analysis.PUB_GAIN).value) / 100
PAPER_CPU = 1 - float(published.figure(analysis.CHAPTER, analysis.PUB_CPU).value) / 100
PAPER_KIND_NAMES = {"dl_pillow": "DataLoader, Pillow + transforms (baseline)",
                    "dl_spdl": "DataLoader, spdl.io + transforms",
                    "spdl_batch": "SPDL pipeline, spdl.io batch decode"}


def paper_table(res) -> pd.DataFrame:
    """The comparison: each loader, cold and warm (means of the runs)."""
    df = analysis._table(res, "paper")
    if df.empty:
        return df
    g = df.groupby(["loader", "state"], sort=False)
    out = g.agg(runs=("images_per_s", "size"), rate=("images_per_s", "mean"), cpu=("cpu_ms_per_image", "mean"),
                busy=("gil_busy_share", "mean"), wait=("gil_wait_ms", "mean"), config=("config", "first")).reset_index()
    return pd.DataFrame({"loader": [PAPER_KIND_NAMES.get(k, k) for k in out["loader"]],
                         "setting": out["config"], "files": out["state"], "runs": out["runs"],
                         "images/s": out["rate"], "CPU ms per image": out["cpu"],
                         "GIL busy (probe), %": 100 * out["busy"], "probe's wait per wake, ms": out["wait"]})


def sweep_busy_note(facts) -> str | None:
    """Why a decode-stage occupancy of the sweep table is flagged (:func:`busy_flag_note`)."""
    flags = (facts_of(facts).data.get("busy_flags") or {}).get("sweep") or []
    return busy_flag_note(flags, "the decode stage of these thread pipeline shapes")


def stage_busy_note(facts) -> str | None:
    """Why a stage's occupancy of the per-stage table is flagged (:func:`busy_flag_note`)."""
    return busy_flag_note((facts_of(facts).data.get("busy_flags") or {}).get("stages") or [], "these pipeline stages")


def sweep_table(res) -> pd.DataFrame:
    """The thread sweep (warm files), with the comparison's pipeline (warm) and the fresh runs of the sweep's best
    (the runs its verdict rests on) beside it."""
    fresh = analysis._table(res, "paper_confirm")
    if not fresh.empty:
        fresh = fresh.assign(config=fresh["config"] + ", fresh runs")
    df = pd.concat([analysis._table(res, "paper_sweep"),
                    analysis._table(res, "paper").query("loader == 'spdl_batch' and state == 'warm'")
                    if not analysis._table(res, "paper").empty else pd.DataFrame(), fresh], ignore_index=True)
    if df.empty:
        return df
    busy = analysis.sweep_busy_rows(res).set_index("name")["busy"]
    g = df.groupby("config", sort=False).agg(runs=("images_per_s", "size"), rate=("images_per_s", "mean"),
                                             cpu=("cpu_ms_per_image", "mean"), gil=("gil_busy_share", "mean"),
                                             lag=("loop_lag_ms", "mean"), cores=("cpu_cores", "mean"))
    g = g.sort_values("rate", ascending=False)
    return pd.DataFrame({"decode tasks": g.index, "runs": g["runs"].values, "images/s": g["rate"].values,
                         "CPU ms per image": g["cpu"].values, "cores busy": g["cores"].values,
                         "GIL busy (probe), %": (100 * g["gil"]).values,
                         "decode stage busy": [busy_cell(busy.get(c)) for c in g.index],
                         "event loop delay per wake, ms": g["lag"].values})


GIL_OP_NAMES = {"read": "read the file (Python)", "decode_pillow": "decode + resize, Pillow",
                "decode_spdl": "decode + resize, spdl.io (one image per call)",
                "decode_spdl_batch": "decode + resize, spdl.io (a batch per call)",
                "transforms": "to float + normalise, per image (the transforms)",
                "collate": "stack a batch (default collate)", "normalise_batch": "to float + normalise, per batch"}


def gil_table(res) -> pd.DataFrame:
    df = analysis._table(res, "gil_held")
    if df.empty:
        return df
    df = df[df["op"] != "idle"]
    return pd.DataFrame({"operation": [GIL_OP_NAMES.get(o, o) for o in df["op"]],
                         "ms per image, one thread": df["ms_per_image"].astype(float),
                         "GIL held, % of its time": 100 * df["held_share"].astype(float),
                         "GIL-held ms per image": df["held_ms_per_image"].astype(float)})


def paper_note(facts) -> str | None:
    """The SPDL question answered in the facts' phrasing: the paper's gain against this host's, its
    decomposition, the best thread configuration and what limits it."""
    f = facts_of(facts)
    run = f.data.get("paper") or {}
    if not run.get("ran"):
        why = run.get("skipped")
        return {"off": "The SPDL question was switched off (`paper = False`).",
                "spdl": "The SPDL question needs spdl.io, which cannot decode here: "
                        + say.text((f.data.get("decoders") or {}).get("spdl", {}).get("note", "")),
                "error": "The SPDL question failed; the error is listed with the others."}.get(
                    why, "This result has no SPDL question (an older run).")
    parts = []
    for state in ("warm", "cold"):
        g = f.get(f"paper.gain.{state}")
        if g is None or g.number is None:
            continue
        if f.get(f"paper.one_run.{state}") is not None:   # no spread: no side named faster (the values: the table)
            parts.append(f"With {state} files, {say.text(f[f'paper.one_run.{state}'].label)} (the table).")
            continue
        s = f"With {state} files the SPDL pipeline ran {say.comparison(g, baseline=BASELINE_WORDS)}"
        if g.published:
            s += f" ({say.beside_published(g, PAPER_GAIN, 'published')})"
        dec, par = f.get(f"paper.decoder.{state}"), f.get(f"paper.parallelism.{state}")
        if dec is not None and par is not None and dec.number and par.number:
            s += decomposition(f, state)
        parts.append(s + ".")
    cpu = f.get("paper.cpu_ratio.warm")
    if cpu is not None and cpu.number:
        parts.append(f"CPU per image with warm files, on the paper's work (its pipeline against its baseline, which "
                     f"transforms each sample; not the end-to-end comparison's best loaders): the SPDL pipeline used "
                     f"{say.value(f[cpu.of], runs=False)}, {say.comparison(cpu, baseline=BASELINE_WORDS)}"
                     f" ({say.beside_published(cpu, PAPER_CPU, 'published')}).")
    bt, lim = f.get("paper.best_threads"), f.get("paper.limit")
    if bt is not None and bt.number is not None and lim is not None:
        # the best setting and what limits it are the key results' (finding_limit); here, the shares that decide it
        busy = ("" if f.flagged("paper.best.decode_busy")    # the flagged note under the sweep's table says why
                else f", its decode stage busy {say.share(f.number('paper.best.decode_busy'))} of the window")
        parts.append(f"The sweep's best setting used {say.value(f.get('paper.best.cpu_ms_per_image'), runs=False)} "
                     f"of CPU per image{busy}.")
    parts += [f"Flagged, a measurement problem: {say.text(f[k + '.flagged'].label)}, which a cold read cannot "
              "do; its cold numbers are not findings (run the chapter again)."
              for k in ("paper.dl_pillow.cold", "paper.dl_spdl.cold", "paper.spdl_batch.cold") if f.flagged(k)]
    if run.get("clamped"):
        parts.append("Some levels were lowered to fit the data set's images (raise `n_images` on a host with "
                     "many cores): " + ", ".join(f"{say.text(c['what'])} {c['wanted']} → {c['got']}"
                                                 for c in run["clamped"]) + ".")
    if run.get("transforms") == "numpy":
        parts.append("torchvision is not installed here: the transforms ran as the same arithmetic in NumPy.")
    return "\n\n".join(parts) if parts else None


def shares_hold(f: Facts, state: str) -> bool:
    """Whether the gain of ``state`` splits into the decoder's and the threads' shares: a gain (not level) that
    both factors pushed the same way (in logarithms a share is meaningless when the whole is level or a factor
    goes the other way)."""
    g, dec, par = f.get(f"paper.gain.{state}"), f.get(f"paper.decoder.{state}"), f.get(f"paper.parallelism.{state}")
    ds = f.get(f"paper.decoder_share.{state}")
    return (g is not None and dec is not None and par is not None and ds is not None and ds.number is not None
            and g.number is not None and dec.number is not None and par.number is not None
            and not (g.level or dec.level or par.level) and g.number > 1 and dec.number >= 1 and par.number >= 1)


def decomposition(f: Facts, state: str) -> str:
    """The tail of the decomposition sentence: the decoder's and the threads' shares of the gain where they hold,
    else what each factor did (and why no shares are given)."""
    g, dec, par = f.get(f"paper.gain.{state}"), f.get(f"paper.decoder.{state}"), f.get(f"paper.parallelism.{state}")
    if g is None or dec is None or par is None or g.number is None:
        return ""
    if shares_hold(f, state):
        return (f"; the decoder ({say.ratio_words(dec)}) accounts for "
                f"{say.share(f.number(f'paper.decoder_share.{state}'))} of the gain, the threads "
                f"({say.ratio_words(par)}) {say.share(f.number(f'paper.parallelism_share.{state}'))}")
    did = (f"the decoder alone (the same DataLoader with spdl.io) ran {_against(dec, 'the baseline')}, the threads "
           f"alone {_against(par, 'that DataLoader with spdl.io')}")
    if g.level:
        return f"; {did}: the whole comparison is level, so there is no gain to share"
    if dec.level != par.level:   # one factor level: the other carries the gain alone
        whose = "the threads'" if dec.level else "the decoder's"
        return f"; {did}, so the gain is {whose} alone"
    return f"; {did}: the two went different ways, so the gain has no shares"


def _against(c: Fact, baseline: str) -> str:
    """One factor of the decomposition against its ``baseline``: "1.19× faster than …", or "level with …" (without
    the words on the runs' spread, which would break the sentence it sits in)."""
    return f"level with {baseline}" if c.level else say.comparison(c, baseline=baseline)


def free_threaded_check_text(res) -> str | None:
    c = facts_of(res).data.get("free_threaded_check")
    if not c:
        return None
    found = c.get("found") or {}
    if not found:
        return ("No free-threaded interpreter (" + ", ".join(say.code(x) for x in c.get("looked_for", []))
                + ") was on the PATH.")
    return "Free-threaded interpreters found: " + ", ".join(
        f"{say.code(k)} (GIL {'on' if v.get('gil_enabled') else 'off'})" for k, v in found.items()) + "."

# --------------------------------------------------------------------------- facts, worded


#: Where the published comparison was measured, in the reader's words (the SPDL paper, see published.py).
PAPER_SETTING = "ImageNet, 96 cores"
#: The SPDL question's baseline in a comparison of section 8 (the table names it in full).
BASELINE_WORDS = "the paper's baseline"


def _paper_said() -> str | None:
    """The SPDL paper's thread pipeline against the PyTorch DataLoader (74% faster: 1.74×) in the book's one
    phrasing; None where the published table lacks it."""
    fig = published.figure(analysis.CHAPTER, analysis.PUB_GAIN)
    return None if fig is None else say.comparison(
        Fact("published.gain", 1 + fig.mean / 100, "×", "the SPDL pipeline", "rate", "higher", of="published.spdl",
             basis="published.dataloader"), baseline="the PyTorch DataLoader")


def _b(s: str) -> str:
    return f"**{s}**"


def finding_primitives(facts, decoder: str | None = None, *, advice: bool = True) -> Finding:
    """Threads against processes at their peaks (and where each reached 95% of it); ``advice``: with the pool
    advice (section 1 shows it, the key results leave it to the section)."""
    facts = facts_of(facts)
    key = "primitives" if decoder is None else f"primitives.{decoder}"
    c = facts.get(key)
    if c is None:
        return Finding(key, "The primitive scaling needs a thread pool and a process pool of the same decoder; "
                            "this run lacks one of them.")
    t, p = facts[c.of], facts[c.basis]
    text = (f"Decoding, resizing and batching, {say.text(t.label)} peaked at {say.value(t, runs=False)} and "
            f"{say.text(p.label)} at {say.value(p, runs=False)}: threads were "
            f"{_b(say.comparison(c, baseline='processes'))} (95% of the peak from "
            f"{'—' if t.setting.get('knee') is None else _count(int(t.setting['knee']), 'thread')} and "
            f"{'—' if p.setting.get('knee') is None else _count(int(p.setting['knee']), 'process')}).")
    a = facts.advice_for(f"image_decode.pool.{decoder or p.setting['decoder']}")
    if a is not None and advice:
        text += " " + say.advice(a, facts)
    return Finding(key, text, c.number, "×")


def _pool_advice(facts: Facts, decoder: str) -> Finding:
    """Section 1's line for ``decoder``: its pool advice, which names the comparison (the table holds the rates);
    the finding itself where the analysis gave no advice."""
    a = facts.advice_for(f"image_decode.pool.{decoder}")
    f = finding_primitives(facts, decoder, advice=False)
    return f if a is None else Finding(f.key, say.advice(a, facts), f.value, f.unit)


def finding_contention(facts, decoder: str | None = None) -> Finding:
    facts = facts_of(facts)
    key = "contention" if decoder is None else f"contention.{decoder}"
    c = facts.get(key)
    if c is None:
        return Finding(key, "The per-operation times need a thread sweep; this run has none.")
    tn, t1 = facts[c.of], facts[c.basis]
    d = str(tn.setting.get("decoder"))
    n = int(tn.setting.get("concurrency", 0))
    text = (f"Per image, {_dec(d)}'s {say.text(tn.setting.get('op', 'decode'))} took {say.value(t1)} in "
            f"{_count(int(t1.setting.get('concurrency', 1)), 'thread')}, {say.value(tn)} each in "
            f"{_count(n, 'thread')} ({_b(say.comparison(c, baseline='one thread'))})")
    vp = facts.get(f"contention.{d}.vs_processes")
    if vp is not None and vp.number is not None:
        text += (f" and {say.value(facts[vp.basis])} in {_count(n, 'process')}: threads "
                 f"{say.comparison(vp, baseline='processes')}")
        if vp.number > 1.1:   # what only threads share: the lock, and caches used more closely
            text += ", time on the interpreter lock or on shared caches"
    return Finding(key, text + ".", c.number, "×")


def _beside_paper(f: Fact) -> str:
    """The published comparison beside a finding, in the same phrasing, when the fact names it."""
    p = _paper_said()
    return "" if f.published != analysis.PUB_GAIN or p is None else f" The SPDL paper: {p} ({PAPER_SETTING})."


def finding_end_to_end(facts) -> Finding:
    facts = facts_of(facts)
    c = facts.get("end_to_end")
    if c is None:
        return Finding("end_to_end", "The end-to-end comparison needs a DataLoader and a thread pipeline in "
                                     "`loaders`; this run lacks one of them.")
    t, d = facts[c.of], facts[c.basis]
    dest = "the GPU" if facts.data.get("device") == "cuda" else "batches in memory"
    text = (f"From cold files to {dest}, {say.text(t.label)} delivered {say.value(t, runs=False)} and "
            f"{say.text(d.label)} {say.value(d, runs=False)}: the threads were "
            f"{_b(say.comparison(c, baseline='the DataLoader'))}." + _beside_paper(c))
    return Finding("end_to_end", text, c.number, "×")


#: The best DataLoader's quantity, the baseline of a saving that names it ("the threads' CPU time per image was
#: 1.42× less than the best DataLoader's"): a bare "used 1.42× less" leaves the reader to guess what.
BEST_DL_S = "the best DataLoader's"


def finding_cost(facts) -> Finding:
    facts = facts_of(facts)
    c = facts.get("cost")
    if c is None:
        return Finding("cost", "The CPU and memory comparison needs a DataLoader and a thread pipeline.")
    text = (f"Per image, the best thread loader used {say.value(facts[c.of], runs=False)} of CPU time and the best "
            f"DataLoader {say.value(facts[c.basis], runs=False)} (the two loaders of the end-to-end comparison, all "
            f"their processes): the threads' CPU time per image was "
            f"{_b(say.comparison(c, baseline=BEST_DL_S))}.")
    m = facts.get("cost.memory")
    if m is not None:
        text += (f" Memory added (PSS): {say.value(facts[m.of], runs=False)} against "
                 f"{say.value(facts[m.basis], runs=False)}, {say.comparison(m, baseline=BEST_DL_S)}.")
    elif "cost.pss.threads" in facts:
        text += (f" All their processes together held {say.value(facts['cost.pss.threads'])} (PSS) with the "
                 f"threads and {say.value(facts['cost.pss.dataloader'])} with the best DataLoader; the memory each "
                 "added is not in this result (its baseline was taken before an earlier run's memory was freed).")
    return Finding("cost", text, c.number, "×")


def finding_first_batch(facts) -> Finding:
    facts = facts_of(facts)
    f = facts.get("first_batch")
    if f is None:
        return Finding("first_batch", "The DataLoader start-up sweep did not run (`startup_workers` is empty).")
    s = f.setting
    by = [g for k, g in facts.facts.items() if k.startswith("first_batch.") and k.count(".") == 1
          and g.setting.get("start_method") and not g.is_comparison and k != "first_batch.pickled_mb"]
    pk = facts.get("first_batch.pickled_mb")
    text = (f"With {_count(int(s['workers']), 'worker')} and {int(s['paths']):,} paths in the Dataset"
            + (f" ({say.value(pk)} pickled)" if pk is not None else "") + ", the first batch took "
            + ", ".join(f"{say.value(g)} with {say.text(g.setting['start_method'])}" for g in by))
    pc = facts.get("first_batch.paths")
    if pc is not None:
        e = facts[pc.basis]
        few = "an empty Dataset" if int(e.setting["paths"]) == 0 else f"{int(e.setting['paths']):,} paths"
        text += (f" ({say.value(e)} with {few}: the paths made it {say.ratio_words(pc)})")
    sf = facts.get("first_batch.spawn_vs_fork")
    if sf is not None:
        text += f": spawned workers were {_b(say.comparison(sf, baseline='forked ones'))}"
    return Finding("first_batch", text + ".", f.number, "s")


STEP_WORDS = {"graphed": "replayed from CUDA graphs", "eager": "launched op by op"}
#: Why the model-fed runs did not run, by the code the experiment recorded (older results: its sentence).
MOONSHOT_SKIPS = {"off": "the moonshot was switched off (`moonshot = false`)",
                  "no_gpu": "no CUDA GPU on this machine: the model-fed runs need one",
                  "torchvision": "ResNet-50 needs torchvision",
                  "no_ceiling": "the model's ceiling could not be measured"}


def _coded(value, words: dict) -> str:
    """A reason recorded as ``code`` or ``code: detail`` in the chapter's words, its detail as code; an older
    result's sentence escaped."""
    s = str(value)
    code, _, detail = s.partition(": ")
    if code in words:
        return words[code] + (f" ({say.code(detail)})" if detail else "")
    return say.text(s)


def finding_moonshot(facts) -> Finding:
    facts = facts_of(facts)
    f = facts.get("moonshot")
    if f is None:
        why = facts.data.get("moonshot_skipped")
        return Finding("moonshot", "The model-fed runs did not run here ("
                       + (_coded(why, MOONSHOT_SKIPS) if why else "no model-fed run measured a steady state") + ").")
    kind = str(f.setting.get("step", "eager"))
    ceil = facts["moonshot.ceiling"]
    text = (f"ResNet-50 (bf16, channels_last, its step {STEP_WORDS.get(kind, say.text(kind))}) runs at "
            f"{say.value(ceil)} on a batch kept in GPU memory")
    g = facts.get("moonshot.step_gain")
    if g is not None:
        text += f" ({say.comparison(g, facts)})"
    skipped = facts.get("moonshot.graph_skipped")
    if skipped is not None:
        text += f"; the graphed step was not used ({_coded(skipped.value, GRAPH_SKIPS)})"
    text += (f". From cold files, the fastest feed was {say.text(f.setting.get('feed'))} at "
             f"{say.value(facts['moonshot.best'], runs=False)}, {_b(say.value(f))} of that ceiling")
    if f.setting.get("left_out"):
        text += f"; {int(f.setting['left_out'])} feeds not steady were left out"
    return Finding("moonshot", text + ".", f.number, "%", interval=f.spread)


def finding_epoch_memory(facts) -> Finding | None:
    facts = facts_of(facts)
    c = facts.get("epoch_memory")
    if c is None:
        return None
    lst, arr = facts[c.of], facts[c.basis]
    s = lst.setting
    text = (f"Over one epoch of {int(s['paths']):,} paths, each of {int(s['workers'])} DataLoader workers ended with "
            f"{say.value(lst)} of private memory with a Python list, {say.value(arr)} with a NumPy array: "
            f"{_b(say.comparison(c, baseline='with the array'))}")
    return Finding("epoch_memory", text + ".", c.number, "×")


#: What limits the best thread pipeline of the SPDL question, by ``paper.limit``.
LIMIT_WORDS = {"gil": "the interpreter lock (the probe found it busy most of the window)",
               "cpu": "the cores (they were busy most of the window)",
               "decode_stage": "the decode stage's concurrency (its tasks kept every slot busy)",
               "consumer": "the consumer's side (neither the lock, the cores nor the decode stage was saturated)"}


LIMIT_SHORT = {"gil": "the interpreter lock", "cpu": "the cores", "decode_stage": "the decode stage's concurrency",
               "consumer": "the consumer's side, not a saturated stage"}


def finding_paper(facts) -> Finding | None:
    """The SPDL question with warm files: the paper's pipeline against the paper's baseline, beside the paper."""
    facts = facts_of(facts)
    g = facts.get("paper.gain.warm")
    if g is None or g.number is None:
        return None
    label = say.text(facts[g.of].label)
    text = f"{label[:1].upper()}{label[1:]} ran {say.value(facts[g.of])}: {_b(say.comparison(g, facts))}."
    return Finding("paper.gain.warm", text, g.number, "×")


def finding_limit(facts) -> Finding | None:
    """What limits the best thread pipeline of the SPDL question, with the shares that decide it."""
    facts = facts_of(facts)
    lim = facts.get("paper.limit")
    if lim is None:
        return None
    best = say.value(facts.get("paper.best_threads"), runs=False)
    text = (f"What limits the SPDL sweep's best thread setting ({best}): "
            f"{LIMIT_SHORT.get(str(lim.value), say.text(lim.value))}; GIL busy "
            f"{say.share(facts.number('paper.best.gil_busy_share'))}, cores busy "
            f"{say.share(facts.number('paper.best.cpu_load'))}.")
    return Finding("paper.limit", text)


def findings(facts) -> list[Finding]:
    """The chapter's key results, in the order of its sections (the SPDL question's when the result has it)."""
    facts = facts_of(facts)
    out = [finding_primitives(facts, advice=False), finding_contention(facts), finding_end_to_end(facts),
           finding_cost(facts),
           finding_first_batch(facts), finding_moonshot(facts), finding_paper(facts), finding_limit(facts)]
    return [f for f in out if f is not None]


def section_findings(res, section: str) -> list[Finding]:
    """The findings a section of the notebook shows, worded from the result's facts: each decoder's pool advice
    (section 1), the contention of every decoder, the epoch's memory with its growth, the collate check, the
    model-fed runs."""
    facts = facts_of(res)
    decs = [k.split(".")[1] for k in facts.facts if k.startswith(f"{section}.") and k.count(".") == 1
            and facts[k].is_comparison]
    if section == "primitives":
        return [_pool_advice(facts, d) for d in decs] or [finding_primitives(facts)]
    if section == "contention":
        return [finding_contention(facts, d) for d in decs] or [finding_contention(facts)]
    one = {"epoch_memory": finding_epoch_memory, "moonshot": finding_moonshot, "paper": finding_paper,
           "collate": finding_collate}[section](facts)
    if section == "epoch_memory" and one is not None:   # its growth over the epoch in the same sentence
        note = epoch_note(facts)
        one = Finding(one.key, one.text + (f" {note}" if note else ""), one.value, one.unit)
    return [f for f in [one] if f is not None]


# --------------------------------------------------------------------------- the opening
def _opening_question(facts: Facts) -> Finding | None:
    """How the paper's comparison reads on this host: the SPDL question's warm runs where the result has them,
    else the best thread pipeline against the best DataLoader from cold files."""
    p, g = _paper_said(), facts.get("paper.gain.warm")
    if g is not None and g.number is not None:
        here = say.comparison(g, baseline="the paper's baseline")
        paper = "" if p is None else f" (the paper: {p}, {PAPER_SETTING})"
        # named as the paper's comparison: the loader advice beside it may answer the end-to-end one (section 3)
        setting = f"{say.text(g.setting.get('state', 'warm'))} files, per-sample transforms"
        return Finding("paper.gain.warm", f"On the SPDL paper's comparison ({setting}), SPDL ran {_b(here)}"
                                          f"{paper}.", g.number, "×")
    c = facts.get("end_to_end")
    if c is None or c.number is None:
        return None
    here = say.comparison(c, baseline="the best DataLoader")
    apart = (f"; the paper's {p} is other work (a DataLoader with Pillow and transforms)" if p is not None else "")
    return Finding("end_to_end", f"From cold files, the best thread loader ran {_b(here)}{apart}.", c.number, "×")


def _opening_why(facts: Facts) -> Finding | None:
    """Why, in the quantity this run measured: what limits the SPDL question's best thread pipeline (the lock,
    the cores, the decode stage) and how the gain splits between the decoder and the parallelism; else the
    thread pipeline's decode slowed by contention that processes do not see, and its CPU per image."""
    lim = facts.get("paper.limit")
    if lim is not None:
        text = (f"What limits SPDL's best setting: "
                f"{LIMIT_SHORT.get(str(lim.value), say.text(lim.value))}"
                f" (GIL {say.share(facts.number('paper.best.gil_busy_share'))}, cores "
                f"{say.share(facts.number('paper.best.cpu_load'))} busy)")
        g, ds, ps = facts.get("paper.gain.warm"), facts.get("paper.decoder_share.warm"), facts.get(
            "paper.parallelism_share.warm")
        dec, par = facts.get("paper.decoder.warm"), facts.get("paper.parallelism.warm")
        if shares_hold(facts, "warm"):
            text += f"; the decoder gave {say.share(ds.number)} of the gain, the threads {say.share(ps.number)}"
        elif dec is not None and par is not None and dec.level and par.level and g is not None:
            text += "; spdl.io against Pillow and threads against processes both ran level, within the runs' spread"
        elif dec is not None and par is not None and dec.number and par.number and g is not None:
            text += (f"; spdl.io decoded {say.comparison(dec, baseline='Pillow')}, threads ran "
                     f"{say.comparison(par, baseline='processes')}")
        busy = facts.number("paper.best.gil_busy_share")
        return Finding("paper.limit", text + ".", None if busy is None else 100 * busy, "%")
    cost = facts.get("cost")
    t = facts.get("end_to_end.threads")
    if cost is None or t is None:
        return None
    d = str(t.setting.get("decoder"))
    cn = facts.get(f"contention.{d}")
    text = f"Why: the threads' CPU per image was {_b(say.comparison(cost, baseline='the DataLoader' + chr(39) + 's'))}"
    if cn is not None and cn.number is not None and cn.number > 1 and not cn.level:
        n = int(facts[cn.of].setting.get("concurrency", 0))
        text += (f", and in {_count(n, 'thread')} {_dec(d)} decoded each image "
                 f"{say.comparison(cn, baseline='in one thread')}")
        vp = facts.get(f"contention.{d}.vs_processes")
        if vp is not None and vp.number is not None and vp.number > 1.1:
            text += f" ({say.comparison(vp, baseline='in processes')})"
    return Finding("cost", text + ".", cost.number, "×")


def _opening_third(facts: Facts) -> Finding | None:
    c = facts.get("epoch_memory")
    if c is not None and c.number is not None:
        lst = facts[c.of]
        return Finding("epoch_memory", f"Over one epoch of {int(lst.setting['paths']):,} paths, each DataLoader "
                                       f"worker held {say.value(lst, runs=False)} of private memory with a Python list "
                                       f"of the paths, {_b(say.comparison(c, baseline='with a NumPy array'))}.",
                       c.number, "×")
    f = facts.get("first_batch")
    if f is None:
        return None
    s = f.setting
    sf = facts.get("first_batch.spawn_vs_fork")
    tail = f", {say.comparison(sf, baseline='fork')}" if sf is not None and s["start_method"] == "spawn" else ""
    return Finding("first_batch", f"With {int(s['paths']):,} paths in the Dataset and {int(s['workers'])} workers, "
                                  f"the first batch took {_b(say.value(f, runs=False))} with "
                                  f"{say.text(s['start_method'])}{tail}.", f.number, "s")


#: The two settings the opening may advise, by the comparison that decides each (the change against what a reader
#: has): (the change, its snippet, keep what you have), each worded with ``{n}`` paths and the comparison ``{cmp}``.
CHANGES = {
    "epoch_memory.numpy_gain": (
        ("Hold the Dataset's paths in a NumPy array, not a list of strings: each worker's private memory over an "
         "epoch was {cmp}.", "with the list"),
        "self.paths = np.array(paths, dtype=np.bytes_)   # one buffer, no object per path",
        ("Keep the paths as they are: with a NumPy array each worker's private memory over an epoch was {cmp}.",
         "with a Python list")),
    "first_batch.fork_vs_spawn": (
        ("Start workers with fork where the platform allows (Linux's default up to Python 3.13; from 3.14 it is "
         "forkserver, so name it): with {n:,} paths in the Dataset the first batch came {cmp}.", "with spawn"),
        'loader = DataLoader(dataset, num_workers=4, multiprocessing_context="fork")',
        ("Keep the start method you have: with fork the first batch came {cmp}.", "with spawn"))}


def _action_loader(facts: Facts) -> Action | None:
    a = facts.advice_for("image_decode.loader")
    if a is None:
        u = facts.get("image_decode.loader.unmeasured")
        return None if u is None else Action(
            "No advice on the loader from this run: it measured no DataLoader decoding with Pillow, PyTorch's "
            f"default (its DataLoader decoded with {say.text(u.value)}), and a gain needs its baseline.")
    # decided end to end ("from cold files to the GPU", its workload says), not by the paper's comparison (warm files)
    # that the first finding names: the two lines of the first screen answer two questions, each named
    return Action(say.advice(a, facts), a.snippet)


def _action_change(facts: Facts, key: str) -> Action | None:
    """The change :data:`CHANGES` names for ``key`` where its comparison gains, else keeping what a reader has."""
    g = facts.get(key)
    if g is None or g.number is None:
        return None
    (change, base), snippet, (keep, keep_base) = CHANGES[key]
    n = int(facts[g.of].setting.get("paths", 0))
    if g.number < 1 and not g.level:
        return Action(change.format(n=n, cmp=say.comparison(g, baseline=base)), snippet)
    return Action(keep.format(n=n, cmp=say.comparison(g, baseline=keep_base)))


def opening(facts) -> Opening:
    """What the chapter opens with: how the SPDL paper's comparison reads on this host and why (the quantity that
    limits the threads here), then the epoch's memory or the first batch; the loader to use, where the model-fed runs
    answer it the decoder that fed the model best, the paths' storage and the start method, each from this run's
    comparison (the first three)."""
    facts = facts_of(facts)
    out = [_opening_question(facts), _opening_why(facts), _opening_third(facts)]
    feed = facts.advice_for("image_decode.model_feed")   # what fed the model best: the question the GPU adds
    acts = [_action_loader(facts), Action(say.advice(feed, facts)) if feed is not None else None,
            *(_action_change(facts, k) for k in CHANGES)]
    return Opening([f for f in out if f is not None][:3], [a for a in acts if a is not None][:3])


# --------------------------------------------------------------------------- an exercise on paper
#: The operations of a primitive task as the exercise names them (``gil_held``'s names).
PAPER_OPS = {"read": "read", "decode_pillow": "decode and resize with Pillow", "decode_spdl": "decode and resize with "
             "spdl.io", "collate": "stack"}
#: A measured rate within this share of the prediction reads as the prediction's (the runs' spread, the probe's).
PREDICTION_TOL = 0.05


def paper_exercise(facts) -> str:
    """Amdahl's law with the interpreter lock as the serial part, worked by hand: from the time per image of each
    operation of section 1's task alone on one thread (T) and the part of it that held the GIL (H), the most images/s
    threads in one process can reach (1,000 ÷ H), the rate Amdahl's law predicts for the thread pool's N threads
    (1,000 ÷ (H + (T − H) ÷ N)), and the measured thread pool against it; the answers folded, from this run's facts
    (the analysis's ``on_paper``)."""
    d = facts_of(facts).data.get("on_paper")
    held = sum(o["held_ms"] for o in d["ops"]) if d else 0.0
    if not d or held <= 0:
        return ("The exercise on paper needs the GIL-held time of each operation of the primitive task (section 8), "
                "above zero, and the thread pool of section 1 at two threads or more, which this run does not hold.")
    ops, n, got = d["ops"], int(d["threads"]), float(d["measured"])
    t = sum(o["ms"] for o in ops)
    per = held + (t - held) / n
    pred = 1e3 / per
    intro = ("**Work it out.** Alone on one thread, an image of section 1's task ("
             + ", ".join(PAPER_OPS.get(o["op"], say.text(o["op"])) for o in ops)
             + f") took **T = {num(t, 'ms')}** and held the GIL **H = {num(held, 'ms')}** (section 8's table); the "
             f"thread pool ran it in **N = {n} threads**.")
    questions = ["The GIL-held part runs one thread at a time: what is the most images/s threads can reach "
                 "(1,000 ÷ H)?",
                 "By Amdahl's law an image costs H + (T − H) ÷ N with N threads: how many images/s is that?",
                 f"The thread pool measured **{num(got, 'img/s')}**: what share of your prediction is that?"]
    share = got / pred
    why = (": short of it, so the threads lose more than the held time (section 2)" if share < 1 - PREDICTION_TOL else
           ": above it, so the one-thread times overstate the pool's work"
           if share > 1 + PREDICTION_TOL
           else ": about the prediction: the held time explains the threads' rate")
    # the book's one rule for a worked answer: "=" where the printed inputs give the printed result by hand, else "≈"
    h, tt, pp = (num(v, "ms") for v in (held, t, per))
    eq1 = equals(held, "ms", lambda x: num(1e3 / x, "img/s") == num(1e3 / held, "img/s"))
    eq2 = equals(per, "ms", lambda x: num(1e3 / x, "img/s") == num(pred, "img/s"))
    eq_per = "=" if num(shown(held) + (shown(t) - shown(held)) / n, "ms") == pp else "≈"
    eq3 = equals(pred, "img/s", lambda x: pct(shown(got, "img/s") / x) == pct(share))
    answers = [f"1,000 ÷ {h} {eq1} **{num(1e3 / held, 'img/s')}**.",
               f"{h} + ({tt} − {h}) ÷ {n} {eq_per} {pp}; 1,000 ÷ {pp} {eq2} **{num(pred, 'img/s')}**.",
               f"{num(got, 'img/s')} ÷ {num(pred, 'img/s')} {eq3} **{pct(share)}**{why}."]
    return on_paper(intro, questions, answers)


