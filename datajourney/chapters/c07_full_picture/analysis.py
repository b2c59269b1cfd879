"""What chapter 7 found in one result, as facts: no prose, no page (see :mod:`datajourney.core.facts`).

The chapter is the source of the image workload's advice (``image.num_workers``) and of the numbers chapter
12 prices that workload with (``facts.data["image_workload"]``: the model, its batch, its step with the data
already on the GPU, the bytes of an image on disk, the loader's CPU time per image and the best pipeline
measured; ``step_recipe``: the fastest pipeline run with that same step and the CPU time per image its CPU counters
recorded), with the GPU step's slowdown under loader load (``contention``)."""
from __future__ import annotations

import dataclasses
from dataclasses import replace

import pandas as pd

from datajourney.chapters.c07_full_picture.params import CHAPTER, Params
from datajourney.chapters.c07_full_picture.reading import (
    KEEP_UP,
    LABELS,
    LOADER_KEEPS_UP,
    STAGES,
    STORAGE_FORMATS,
    WORKER_NICE,
    ceiling_runs,
    scenario_stats,
    scenarios,
)
from datajourney.core.answers import Candidate, Question, decide, exceeds
from datajourney.core.facts import Fact, Facts, compare, measured
from datajourney.core.stats import HIGH_SPREAD, cv, direction

EXPORTS = ("wait_w0", "workers4", "best_vs_ceiling", "best_vs_ceiling.flagged", "contention", "compute_under_load",
           "compute_unloaded", "cpu_ms_per_image", "workers_gain", "image_workload", "recipe")
#: chapter 7's per-batch CPU stages a loader worker runs for each batch
CPU_STAGES = ("read_ms", "decode_ms", "normalise_ms", "collate_ms")
#: How a result names its model, and what the reader is told ran.
MODEL_NAMES = {"resnet50": "ResNet-50", "small_cnn": "a small CNN (small_cnn)"}
FORMAT_WORDS = {"imagefolder": "one JPEG file per image (ImageFolder)", "mds": "MDS shards"}


def _plain(v):
    """numpy scalars as Python numbers (plain JSON)."""
    return v.item() if hasattr(v, "item") else v


def image_workload(res) -> dict | None:
    """The image workload as chapter 7 ran it: batch, step time with data already on the GPU (the faster of its
    eager and CUDA-graph ceilings, where both were measured), bytes per image on disk, the loader's CPU time per
    image (read, decode + resize, normalise, collate: the medians of its per-batch stage timings in the best
    scenario ÷ the batch size) and the best end-to-end pipeline measured."""
    if "ceiling" not in res.tables:
        return None
    c = res.table("ceiling")
    sc = res.table("scenarios") if "scenarios" in res.tables else pd.DataFrame()
    rd = res.table("readers") if "readers" in res.tables else pd.DataFrame()
    steps = res.table("steps") if "steps" in res.tables else pd.DataFrame()
    b = int(Params.value_of(res, "batch_size"))
    ceiling, step_kind = c, "eager"
    g = res.table("graphed_ceiling") if "graphed_ceiling" in res.tables else pd.DataFrame()
    if not g.empty and float(g["step_ms"].mean()) < float(c["step_ms"].mean()):
        ceiling, step_kind = g, "graphed"
    compute = float(ceiling["compute_ms"].mean()) if "compute_ms" in ceiling else None
    out = dict(model=str(c["model"].iloc[0]) if "model" in c else model_of(res),
               batch_size=b, step_ms=float(ceiling["step_ms"].mean()), compute_ms=compute, step_kind=step_kind,
               device=res.metadata.get("device"),
               cores=int(res.metadata.get("cores") or 1), file_bytes=None, cpu_ms=None, best=None, cpu_recipe=None,
               main_cores=None, recipe_runs=None, step_recipe=None)
    if not rd.empty and "stored_kb" in rd:
        cold = rd[rd["stage"] == "read (cold)"]
        if not cold.empty:
            out["file_bytes"] = float(cold["stored_kb"].mean()) * 1024
    if not sc.empty:
        best = sc.groupby(["format", "workers", "variant"])["images_per_s"].mean()
        (fmt, w, var), v = best.idxmax(), float(best.max())
        out["best"] = dict(format=str(fmt), format_name=LABELS.get(str(fmt), str(fmt)), workers=int(w),
                           variant=str(var), images_per_s=v)
        # the CPU cost of the recipe the chapter advises (the default transforms, its fastest setting), in a worker,
        # and the training process's own cores there (each GPU's training process needs its own)
        d = sc[sc["variant"] == "default"]
        if not d.empty:
            rates = d.groupby(["format", "workers"])["images_per_s"]
            fmt, w = rates.mean().idxmax()
            var = "default"
            out["recipe_runs"] = [float(x) for x in rates.get_group((fmt, w))]
            if "main_cores" in d:
                main = d[(d["format"] == fmt) & (d["workers"] == w)]["main_cores"].astype(float).mean()
                out["main_cores"] = float(main) if main == main else None
        out["cpu_recipe"] = dict(format=str(fmt), format_name=LABELS.get(str(fmt), str(fmt)), workers=int(w),
                                 variant=str(var))
        out["step_recipe"] = step_recipe(sc, step_kind)
        if not steps.empty and all(s in steps for s in CPU_STAGES):
            rows = steps[(steps["format"] == fmt) & (steps["workers"] == w) & (steps["variant"] == var)]
            if not rows.empty:
                out["cpu_ms"] = float(rows[list(CPU_STAGES)].median().sum()) / b
    return {k: (_plain(v) if not isinstance(v, dict) else {i: _plain(x) for i, x in v.items()})
            for k, v in out.items()}


#: The CPU counters of a scenario run (cores busy on average while it ran): the whole machine, the training
#: process and its loader workers.
CPU_COUNTERS = {"busy": "cpu_busy_cores", "main": "main_cores", "workers": "worker_cores"}


def step_recipe(sc: pd.DataFrame, step_kind: str) -> dict | None:
    """The fastest pipeline measured end to end with the step chapter 12 prices (``step_kind``: the scenarios whose
    ceiling is that step, all of them when the table does not say), its images/s per run and, from its CPU
    counters, the CPU time each image cost: cores busy on average × 1000 ÷ images/s (ms per image), for the whole
    machine, the training process and the loader's workers (None where a counter was not recorded)."""
    if sc.empty or "images_per_s" not in sc:
        return None
    mine = sc[sc["ceiling"] == step_kind] if "ceiling" in sc and (sc["ceiling"] == step_kind).any() else sc
    rates = mine.groupby(["format", "workers", "variant"])["images_per_s"].mean()
    fmt, w, var = rates.idxmax()
    rows = mine[(mine["format"] == fmt) & (mine["workers"] == w) & (mine["variant"] == var)]
    ips = float(rows["images_per_s"].mean())
    cpu = {}
    for name, col in CPU_COUNTERS.items():
        v = float(rows[col].astype(float).mean()) if col in rows else float("nan")
        cpu[f"{name}_ms"] = v * 1000.0 / ips if v == v and ips > 0 else None
        cpu[f"{name}_cores"] = v if v == v else None
    return dict(format=str(fmt), format_name=LABELS.get(str(fmt), str(fmt)), workers=int(w), variant=str(var),
                step=step_kind,
                runs=[float(x) for x in rows["images_per_s"]], images_per_s=ips, **cpu)


def model_of(res) -> str:
    """The model that ran: the result's record of it (metadata, else the ceiling's rows, else its parameters)."""
    if res.metadata.get("model"):
        return str(res.metadata["model"])
    if "ceiling" in res.tables and "model" in res.table("ceiling"):
        return str(res.table("ceiling")["model"].iloc[0])
    return str(res.parameters["model"]) if "model" in (res.parameters or {}) else "an unnamed model"


def workload_name(res, fmt: str | None = None) -> str:
    """The workload this result ran, honestly: the model that ran, where it ran, and what it read."""
    model = model_of(res)
    where = "a GPU" if res.metadata.get("device") == "cuda" else "a CPU"
    name = MODEL_NAMES.get(str(model), str(model))
    head = f"{name} training on {where}"
    return head + (f", fed from {FORMAT_WORDS.get(fmt, fmt)}" if fmt else "")


def _label(fmt: str, w: int, variant: str = "default") -> str:
    return f"{LABELS.get(fmt, fmt)} with {w} worker{'s' if w != 1 else ''}" + (
        "" if variant == "default" else f" ({variant})")


def _runs(res, fmt: str, w: int, col: str, variant: str = "default") -> list[float]:
    sc = scenarios(res)
    m = sc[(sc["format"] == fmt) & (sc["workers"] == w) & (sc["variant"] == variant)]
    return [float(v) for v in m[col].dropna()]


def ips_key(fmt: str, w: int, variant: str = "default") -> str:
    return f"ips.{fmt}.w{w}" + ("" if variant == "default" else "." + variant.replace(" ", "_"))


def _ips(res, fmt: str, w: int, variant: str = "default", *, key: str | None = None,
         published: str | None = None) -> Fact | None:
    runs = _runs(res, fmt, w, "images_per_s", variant)
    if not runs:
        return None
    return measured(key or ips_key(fmt, w, variant), runs, unit="images/s", label=_label(fmt, w, variant),
                    setting={"format": fmt, "workers": int(w), "variant": variant}, published=published)


def _amount(f: Fact) -> Fact:
    """A time read as an amount (a wait "more than" its compute, not "slower than")."""
    return dataclasses.replace(f, quantity="amount")


# --------------------------------------------------------------------------- parts
def _throughput(res, f: Facts, st: pd.DataFrame) -> None:
    for _, r in st.iterrows():
        f.add(_ips(res, r["format"], int(r["workers"]), r["variant"]))
    w0s = st[(st["format"] == "imagefolder") & (st["variant"] == "default")]["workers"]
    if w0s.empty:
        return
    w0 = int(w0s.min())
    setting = {"format": "imagefolder", "workers": w0}
    wait = measured("wait_w0", _runs(res, "imagefolder", w0, "DATALOADER_WAIT"), unit="ms",
                    label=f"the data wait per step at W={w0}", quantity="time", better="lower", setting=setting,
                    published="ImageFolder, workers=0: data wait" if w0 == 0 else None)
    comp = measured("compute_w0", _runs(res, "imagefolder", w0, "compute_ms"), unit="ms",
                    label=f"the compute per step at W={w0}", quantity="time", better="lower", setting=setting)
    f.add(wait, comp, compare("wait_vs_compute_w0", _amount(wait), _amount(comp)))
    f4 = _ips(res, "imagefolder", 4, key="workers4", published="ImageFolder, workers=4: images/s")
    if f4 is not None and w0 != 4:
        f.add(f4, compare("workers4_vs_w0", f4, f[ips_key("imagefolder", w0)]))
    if ips_key("mds", 0) in f and ips_key("imagefolder", 0) in f:
        w0 = st[(st["workers"] == 0) & (st["variant"] == "default") & st["format"].isin(["mds", "imagefolder"])]
        resident = float(w0["resident_at_start"].max()) if "resident_at_start" in w0 else None
        # the cache state both sides started from (the share of their files cached), said with the comparison
        f.add(replace(compare("mds_vs_imagefolder_w0", f[ips_key("mds", 0)], f[ips_key("imagefolder", 0)]),
                      setting={"workers": 0, "resident": resident}))
    if ips_key("imagefolder", 1) in f and ips_key("imagefolder", 0) in f:
        f.add(compare("one_worker", f[ips_key("imagefolder", 1)], f[ips_key("imagefolder", 0)]))


def _load(res, f: Facts, st: pd.DataFrame) -> None:
    """The GPU step alone against the step while busy processes do the loader's work (the load sweep); without
    a sweep, compute at the most workers against the fewest."""
    t = res.table("load") if "load" in res.tables else pd.DataFrame()
    if t.empty:
        d = st[(st["format"] == "imagefolder") & (st["variant"] == "default")].sort_values("workers")
        if len(d) < 2:
            return
        lo, hi = int(d["workers"].iloc[0]), int(d["workers"].iloc[-1])
        a = measured("compute_under_load", _runs(res, "imagefolder", hi, "compute_ms"), unit="ms",
                     label=f"compute per step at W={hi}", quantity="time", better="lower",
                     setting={"workers": hi, "sweep": False})
        b = measured("compute_unloaded", _runs(res, "imagefolder", lo, "compute_ms"), unit="ms",
                     label=f"compute per step at W={lo}", quantity="time", better="lower",
                     setting={"workers": lo, "sweep": False})
        f.add(a, b, compare("compute_growth", a, b))
        return
    cores = int(t["cores"].iloc[0])
    modes = list(dict.fromkeys(t["mode"]))
    base_mode = "plain" if "plain" in modes else modes[0]
    base = t[t["mode"] == base_mode].groupby("busy")["compute_ms"].mean()
    top = int(base.idxmax())

    def runs(mode, busy):
        return [float(v) for v in t[(t["mode"] == mode) & (t["busy"] == busy)]["compute_ms"]]

    c0 = runs(base_mode, 0) or [float(v) for v in res.table("ceiling")["compute_ms"]]
    alone = measured("compute_unloaded", c0, unit="ms", label="the GPU step alone" if res.metadata.get("device")
                     == "cuda" else "the step alone", quantity="time", better="lower",
                     setting={"mode": base_mode, "busy": 0, "cores": cores, "sweep": True})
    loaded = measured("compute_under_load", runs(base_mode, top), unit="ms",
                      label=f"the step beside {top} busy processes", quantity="time", better="lower",
                      setting={"mode": base_mode, "busy": top, "cores": cores, "sweep": True})
    f.add(alone, loaded, compare("contention", loaded, alone))
    for mode in modes:   # each remedy against the same step unloaded: a CUDA graph computes faster even alone
        if mode == base_mode or not runs(mode, top):
            continue
        reserved = int(t[t["mode"] == mode]["reserved_cpus"].max()) if "reserved_cpus" in t else 0
        m = measured(f"compute_under_load.{mode}", runs(mode, top), unit="ms",
                     label=f"the step beside {top} busy processes ({mode})", quantity="time", better="lower",
                     setting={"mode": mode, "busy": top, "reserved_cpus": reserved})
        idle = runs(mode, 0)
        own = measured(f"compute_unloaded.{mode}", idle, unit="ms", label=f"the same step unloaded ({mode})",
                       quantity="time", better="lower", setting={"mode": mode, "busy": 0}) if idle else alone
        f.add(m, own, compare(f"remedy.{mode}", m, own))
        if m.number is not None and own.number is not None:
            f.add(Fact(f"remedy_added.{mode}", m.number - own.number, "ms", "compute added by the load", "amount",
                       "lower", setting={"mode": mode, "busy": top}))


def _best(res, f: Facts) -> None:
    st = scenario_stats(res)
    b = st.loc[st["pct_of_ceiling"].idxmax()]
    fmt, w, var, kind = str(b["format"]), int(b["workers"]), str(b["variant"]), str(b["ceiling"])
    runs = _runs(res, fmt, w, "pct_of_ceiling", var)
    setting = {"format": fmt, "workers": w, "variant": var, "ceiling": kind}
    share = measured("best_vs_ceiling", runs, unit="%", label="the share of its own ceiling that the best setting fed",
                     quantity="share", setting=setting)
    ceil = [float(v) for v in ceiling_runs(res, kind)["images_per_s"]] or [
        float(v) for v in ceiling_runs(res)["images_per_s"]]
    best_ips = measured("best_ips", _runs(res, fmt, w, "images_per_s", var), unit="images/s",
                        label=_label(fmt, w, var), setting=setting)
    held = "GPU memory" if res.metadata.get("device") == "cuda" else "memory"
    ceiling = measured("ceiling_ips", ceil, unit="images/s", label=f"its own ceiling ({kind} step, data in {held})",
                       setting={"ceiling": kind})
    keep = 100 * KEEP_UP
    verdict = ("every run" if min(runs) >= keep else "on average" if share.number >= keep else "short")
    f.add(share, best_ips, ceiling, compare("best_vs_ceiling_rate", best_ips, ceiling),
          Fact("best_keeps_up", verdict, "", f"whether the best setting reached {keep:g}% of its ceiling",
               "choice", None, setting={"keep_up": keep, "runs": len(runs)}))
    if exceeds(best_ips, ceiling):  # a ceiling cannot be exceeded: the run's ceiling is flagged, not a finding
        f.add(Fact("best_vs_ceiling.flagged", "flagged", "", "the best setting fed more than its own ceiling", "choice",
                   None, setting=dict(setting)))


def _workers_advice(res, f: Facts, st: pd.DataFrame) -> None:
    d = st[st["variant"] == "default"]
    if d.empty:
        return
    top = d.loc[d["images_per_s"].idxmax()]
    fmt = str(top["format"])
    mine = d[d["format"] == fmt].sort_values("images_per_s", ascending=False)
    ws = sorted(int(w) for w in mine["workers"])
    w = int(top["workers"])
    if len(ws) < 2:
        return
    base = ws[0] if w != ws[0] else int(mine["workers"].iloc[1])  # W=0 (the fewest), else the next best
    f.add(compare("workers_gain", f[ips_key(fmt, w)], f[ips_key(fmt, base)]))
    # the question names its recipe: the end-to-end recipe (``recipe``) answers a different one, with other workers
    q = Question("image.num_workers", "How many DataLoader workers for this model from these files?", "num_workers",
                 0, "num_workers=0", "PyTorch's DataLoader default",
                 f"{workload_name(res, fmt)}, with {DEFAULT_RECIPE}", swept=True)
    f.advise(decide(q, [Candidate(k, f[ips_key(fmt, k)], snippet=loader_snippet(res, k)) for k in ws], f))


def _recipes(res, f: Facts, st: pd.DataFrame) -> None:
    """The uint8 recipe against the float32 one at the same workers; the graphed step against the eager one."""
    t = st[st["variant"] == "tuned"]
    if not t.empty:
        r = t.loc[t["images_per_s"].idxmax()]
        fmt, w = str(r["format"]), int(r["workers"])
        if ips_key(fmt, w) in f and ips_key(fmt, w, "tuned") in f:
            f.add(compare("uint8_gain", f[ips_key(fmt, w, "tuned")], f[ips_key(fmt, w)]))
    g = st[st["variant"] == "graphed"]
    pairs = [r for _, r in g.iterrows() if ips_key(str(r["format"]), int(r["workers"]), "tuned") in f]
    if pairs:
        r = max(pairs, key=lambda r: float(r["images_per_s"]))
        fmt, w = str(r["format"]), int(r["workers"])
        f.add(compare("graph_gain", f[ips_key(fmt, w, "graphed")], f[ips_key(fmt, w, "tuned")]))
    f.data["tuned_remedy"] = res.parameters["tuned_remedy"] if "tuned_remedy" in (res.parameters or {}) else None


# --------------------------------------------------------------------------- the recipe, end to end
#: What the default recipe is, where a question or a finding names it apart from the end-to-end recipe.
DEFAULT_RECIPE = "the default recipe (float32 batches normalised in the workers, an eager step)"
#: Each recipe (a scenario's variant) in a reader's words.
VARIANT_WORDS = {"default": "the default recipe", "tuned": "the tuned recipe",
                 "graphed": "the tuned recipe with the step replayed from CUDA graphs",
                 "1 thread": "the default recipe with one intra-op thread"}


def recipe_parts(res, fmt: str, workers: int, variant: str, remedy: str, *, call: str | None = None) -> list[dict]:
    """The knobs of one end-to-end setting as a reader sets them, each ``what`` (words), ``knob`` (the short code
    that names it in a sentence, None where words say it) and ``code`` (what a reader pastes): the dataset, the
    DataLoader's arguments, then for the tuned recipe uint8 batches normalised where the model runs and its workers'
    treatment (``worker_init_fn``), and for the graphed step ``torch.cuda.graph``."""
    cuda = res.metadata.get("device") == "cuda"
    parts = [dict(what=FORMAT_WORDS.get(fmt, LABELS.get(fmt, fmt)), knob=None, code=call)]
    args = [f"batch_size={int(Params.value_of(res, 'batch_size'))}", "shuffle=True", f"num_workers={workers}"]
    args += ["pin_memory=True"] if cuda else []
    parts.append(dict(what="the DataLoader", knob=f"num_workers={workers}",
                      code=f"DataLoader(dataset, {', '.join(args)})"))
    if variant in ("tuned", "graphed"):
        to = 'x.to("cuda", non_blocking=True)' if cuda else "x"
        parts.append(dict(what="uint8 batches normalised " + ("on the GPU" if cuda else "in the training process"),
                          knob=None, code=f"x = ({to}.float() - mean) / std"))
        if "nice" in remedy:
            init = f"worker_init_fn=lambda _: os.nice({WORKER_NICE})"
            parts.append(dict(what=f"workers at nice {WORKER_NICE}", knob=init, code=init))
        if "reserve" in remedy:
            init = "worker_init_fn=lambda _: os.sched_setaffinity(0, loader_cpus)"
            parts.append(dict(what="workers kept off the cores left to the training process", knob=init, code=init))
    if variant == "graphed":
        parts.append(dict(what="the step replayed from CUDA graphs", knob="torch.cuda.graph",
                          code="with torch.cuda.graph(graph): ...  # captured once, then graph.replay() each step"))
    return parts


def _recipe(res, f: Facts) -> None:
    """``recipe``: the end-to-end setting that fed the highest share of its own ceiling (the chapter's best setting,
    ``best_vs_ceiling``) against what a reader runs without the book (ImageFolder, ``num_workers=0``, the default
    recipe), in images/s, the same work (this model trained on the same images, read cold). Its setting holds the
    knobs as a reader pastes them (``parts``), its share of its ceiling and whether the gain clears the declared
    threshold (``verdict``: "change" or "keep", :func:`~datajourney.core.answers.decide`); with it ``recipe.uint8``
    and ``recipe.graphs``, each part against the same loader without it. Nothing where the best is flagged or is
    the default itself."""
    best, share, base = f.get("best_ips"), f.get("best_vs_ceiling"), f.get(ips_key("imagefolder", 0))
    if best is None or share is None or base is None or "best_vs_ceiling.flagged" in f:
        return
    s = share.setting
    fmt, w, var = str(s["format"]), int(s["workers"]), str(s["variant"])
    if (fmt, w, var) == ("imagefolder", 0, "default"):
        return
    remedy = str(Params.value_of(res, "tuned_remedy"))
    table = res.table("formats") if "formats" in res.tables else pd.DataFrame()
    call = next((str(c) for c in table[table["format"] == fmt]["call"]), None) if "call" in table else None
    parts = recipe_parts(res, fmt, w, var, remedy, call=call)
    words = f"{LABELS.get(fmt, fmt)} with num_workers={w} and {VARIANT_WORDS.get(var, var)}"
    mine = replace(best, key="recipe.ips", label=words)
    default = replace(base, key="recipe.baseline", label="ImageFolder with num_workers=0 and the default recipe")
    q = Question("image.recipe", "Which end-to-end setting feeds the GPU best?", "recipe", "baseline",
                 "ImageFolder, num_workers=0, the default recipe", "the DataLoader's defaults on one file per image",
                 workload_name(res))
    verdict = decide(q, [Candidate("baseline", default), Candidate("recipe", mine)], Facts(CHAPTER))
    keeps = f.get("best_keeps_up")
    f.add(mine, default, replace(compare("recipe", mine, default), setting=dict(
        format=fmt, format_name=LABELS.get(fmt, fmt), workers=w, variant=var, ceiling=s.get("ceiling"),
        share=share.number, share_runs=list(share.spread) if share.spread else None, share_key=share.key,
        keeps_up=keeps.value if keeps is not None else None, parts=parts,
        verdict=verdict.verdict if verdict is not None else None,
        threshold=verdict.threshold if verdict is not None else None)))
    for key, a, b in (("recipe.uint8", ips_key(fmt, w, "tuned"), ips_key(fmt, w)),
                      ("recipe.graphs", ips_key(fmt, w, "graphed"), ips_key(fmt, w, "tuned"))):
        if var in ("tuned", "graphed") and a in f and b in f and (key == "recipe.uint8" or var == "graphed"):
            f.add(compare(key, f[a], f[b]))


def loader_snippet(res, workers: int) -> str:
    """The ``DataLoader(...)`` of this chapter's loop with ``workers`` filled in, as this run built it."""
    args = [f"batch_size={int(Params.value_of(res, 'batch_size'))}", "shuffle=True", f"num_workers={workers}"]
    if res.metadata.get("device") == "cuda":
        args.append("pin_memory=True")
    if workers:
        args.append('multiprocessing_context="fork"')
    args.append("drop_last=True")
    lines = ["from torch.utils.data import DataLoader", "", "loader = DataLoader("]
    lines += [f"    dataset, {args[0]}, {args[1]},"] + [f"    {a}," for a in args[2:]]
    return "\n".join(lines) + "\n)"


# --------------------------------------------------------------------------- storage formats
#: What each format other than one file per image costs, said with the advice that picks it.
FORMAT_COSTS = {
    "mds": "a conversion step and a second copy of the images on disk, read through streaming's index and its "
           "shared-memory bookkeeping",
    "webdataset": "a conversion step and a second copy on disk; shards are read in a random order but samples "
                  "shuffle only within each worker's buffer (.shuffle(n)), and there is no access by index",
    "hf_datasets": "a conversion step and a second copy on disk (Arrow files, memory-mapped)",
    "litdata": "a conversion step and a second copy on disk; samples shuffle only within the chunks a worker holds",
    "parquet": "a conversion step and a second copy on disk; rows shuffle only within a row group, and fetching one "
               "image by index reads its whole row group",
}
#: A cold run that started with more than this share of its files in the page cache was not cold.
COLD_RESIDENT = 0.5


def format_key(fmt: str, cache: str) -> str:
    return f"format.{fmt}.{cache}"


def _format_runs(res) -> pd.DataFrame:
    return res.table("format_runs") if "format_runs" in res.tables else pd.DataFrame()


def format_best(runs: pd.DataFrame, fmt: str, cache: str) -> tuple[int, list[float]] | None:
    """The worker count at which ``fmt`` fed the most images/s (mean over its runs) from a ``cache`` cache, and
    those runs' images/s."""
    d = runs[(runs["format"] == fmt) & (runs["cache"] == cache)]
    if d.empty:
        return None
    w = int(d.groupby("workers")["images_per_s"].mean().idxmax())
    return w, [float(v) for v in d[d["workers"] == w]["images_per_s"]]


def _formats(res, f: Facts) -> None:
    """The storage-format comparison: each format's best images/s cold and warm, against the chapter's ceiling,
    its conversion and size, and the declared question (ImageFolder the baseline, read cold)."""
    if "formats" not in res.tables or _format_runs(res).empty:
        return
    table, runs = res.table("formats"), _format_runs(res)
    ceil = [float(v) for v in ceiling_runs(res)["images_per_s"]]
    ceiling = measured("format.ceiling", ceil, unit="images/s", label="the chapter's ceiling (data in memory)",
                       setting={"ceiling": "eager"})
    f.add(ceiling)
    rows = []
    for fmt in [x for x in STORAGE_FORMATS if x in set(table["format"])]:
        t = table[table["format"] == fmt].iloc[0]
        row = dict(format=fmt, library=str(t["library"]), convert_s=float(t["convert_s"]), bytes=int(t["bytes"]),
                   source_bytes=int(t["source_bytes"]), shards=int(t["shards"]), per_shard=int(t["per_shard"]),
                   shuffle=str(t["shuffle"]), buffer=None if pd.isna(t["buffer"]) else int(t["buffer"]),
                   cobatch=_plain(t["cobatch"]), random_access=bool(t["random_access"]),
                   access_cold_ms=None if pd.isna(t["access_cold_ms"]) else float(t["access_cold_ms"]),
                   access_warm_ms=None if pd.isna(t["access_warm_ms"]) else float(t["access_warm_ms"]),
                   cpu_ms_per_image=float(t["cpu_ms_per_image"]), call=str(t["call"]))
        for cache in ("cold", "warm"):
            b = format_best(runs, fmt, cache)
            if b is None:
                continue
            w, vals = b
            d = runs[(runs["format"] == fmt) & (runs["cache"] == cache) & (runs["workers"] == w)]
            key = format_key(fmt, cache)
            fact = measured(key, vals, unit="images/s", label=f"{LABELS.get(fmt, fmt)}, num_workers={w}, {cache}",
                            setting={"format": fmt, "workers": w, "cache": cache})
            f.add(fact, compare(f"{key}.vs_ceiling", fact, ceiling))
            row[f"{cache}_workers"] = w
            row[f"{cache}_first_batch_ms"] = float(d["first_batch_ms"].mean())
            row[f"{cache}_resident"] = float(d["resident_at_start"].mean())
            if exceeds(fact, ceiling):
                f.add(Fact(f"{key}.flagged", "over the ceiling", "", f"{fact.label} fed more than the ceiling",
                           "choice", None, setting=dict(fact.setting)))
        cold, warm = f.get(format_key(fmt, "cold")), f.get(format_key(fmt, "warm"))
        if cold is not None and warm is not None:
            f.add(compare(f"format.{fmt}.cold_vs_warm", cold, warm))
            if exceeds(cold, warm) or row["cold_resident"] > COLD_RESIDENT:
                # a cold read faster than a warm one, or one that started with its files cached, is not a finding
                f.add(Fact(f"format.{fmt}.cold_vs_warm.flagged", "not cold" if row["cold_resident"] > COLD_RESIDENT else
                           "cold faster than warm", "", f"{cold.label} against warm", "choice", None,
                           setting=dict(cold.setting, resident=row["cold_resident"])))
        rows.append(row)
    f.data["formats"] = dict(rows=rows, notes=dict((res.metadata.get("formats") or {}).get("notes") or {}),
                             workers=list((res.metadata.get("formats") or {}).get("workers") or []),
                             batch_size=int(res.parameters["batch_size"]) if "batch_size" in (res.parameters or {})
                             else None)
    _format_advice(res, f, table)


def _format_advice(res, f: Facts, table: pd.DataFrame) -> None:
    """The declared question: which format to store these images in, decided on the cold reads (the first epoch,
    and every epoch of a set larger than memory) at each format's best worker count."""
    cands = []
    for fmt in [x for x in STORAGE_FORMATS if x in set(table["format"])]:
        fact = f.get(format_key(fmt, "cold"))
        if fact is None or f"format.{fmt}.cold_vs_warm.flagged" in f or f"{format_key(fmt, 'cold')}.flagged" in f:
            continue
        t = table[table["format"] == fmt].iloc[0]
        cands.append(Candidate(fmt, fact, call=str(t["call"]), snippet=str(t["snippet"]), costly=fmt != "imagefolder",
                               at=f"num_workers={int(fact.setting['workers'])}, cold cache"))
    n = (res.metadata.get("formats") or {}).get("images")
    # the work this question measured, named apart from the chapter's own scenarios (more images, their own runs)
    workload = f"{workload_name(res)} from the same {f'{int(n):,} ' if n else ''}images in each format, read cold"

    def question(cost: str | None) -> Question:
        return Question("image.storage_format", "Which storage format should these images be kept in?", "format",
                        "imagefolder", "one JPEG file per image", "the layout images come in",
                        workload, cost=cost)

    trial = decide(question(None), cands, Facts(CHAPTER))
    if trial is None:
        return
    f.advise(decide(question(FORMAT_COSTS.get(str(trial.value))), cands, f))


# --------------------------------------------------------------------------- what the notes word
#: The columns of a reader row the notes word (per-sample ms: mean, median, p90; KiB from the disk).
READER_COLUMNS = ("ms", "median_ms", "p90_ms", "disk_kb")
#: A per-sample timing × batch size within this (relative) of the loop's stage time matches it.
MATCH_TOL = 0.25
#: A scenario's busy cores below this share of the load sweep's lightest load: the sweep did not measure its load.
SWEEP_MATCH = 0.9


def _num(v) -> float | None:
    """A table cell as a float, None where it is missing or not finite."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x and abs(x) != float("inf") else None


def _readers(res) -> dict | None:
    """The per-sample reader costs, row by row, whether they carry medians, and the rows whose mean lies above
    their p90 (a few slow samples pulled the mean up)."""
    t = res.table("readers") if "readers" in res.tables else pd.DataFrame()
    if t.empty:
        return None
    rows = [dict(format=str(r["format"]), stage=str(r["stage"]), **{c: _num(r.get(c)) for c in READER_COLUMNS})
            for _, r in t.iterrows()]
    return dict(rows=rows, medians=bool("median_ms" in t and t["median_ms"].notna().any()),
                skewed=[r for r in rows if r["p90_ms"] is not None and r["ms"] is not None and r["ms"] > r["p90_ms"]])


def reader(data: dict, fmt: str, stage: str, col: str = "ms") -> float | None:
    """One reader cost of ``data["readers"]`` (None where it was not measured)."""
    rows = (data.get("readers") or {}).get("rows") or []
    return next((r.get(col) for r in rows if r["format"] == fmt and r["stage"] == stage), None)


def typical(data: dict, fmt: str, stage: str) -> tuple[float, float | None, str] | None:
    """A reader stage's typical per-sample ms: (median, p90, "median"); an older result without medians gives
    (mean, p90, "mean")."""
    med = reader(data, fmt, stage, "median_ms")
    if med is not None:
        return med, reader(data, fmt, stage, "p90_ms"), "median"
    mean = reader(data, fmt, stage)
    return None if mean is None else (mean, reader(data, fmt, stage, "p90_ms"), "mean")


def _scenario_row(st: pd.DataFrame, fmt: str, w: int, variant: str = "default"):
    m = st[(st["format"] == fmt) & (st["workers"] == w) & (st["variant"] == variant)]
    return None if m.empty else m.iloc[0]


def _stage_ms(r) -> dict:
    return {k: _num(r.get(f"{k}_ms")) for k in STAGES}


def _w0_gap(res, f: Facts, st: pd.DataFrame) -> None:
    """MDS against one file per image at W=0, taken apart: their data waits (level within the runs' spread, or the
    gap per step), the loop's stage timers' largest difference, the per-sample cold reads, what streaming's
    iterator costs warm and whether, timed cold, it matches the loop's MDS read."""
    m, fi = _scenario_row(st, "mds", 0), _scenario_row(st, "imagefolder", 0)
    if m is None or fi is None:
        f.data["w0_gap"] = None
        return
    waits = {fmt: measured(f"wait.{fmt}.w0", _runs(res, fmt, 0, "DATALOADER_WAIT"), unit="ms",
                           label=f"{LABELS.get(fmt, fmt)}'s data wait at W=0", quantity="time", better="lower",
                           setting={"format": fmt, "workers": 0}) for fmt in ("mds", "imagefolder")}
    f.add(*waits.values(), compare("wait.mds_vs_imagefolder.w0", waits["mds"], waits["imagefolder"]))
    gap = float(m["DATALOADER_WAIT"] - fi["DATALOADER_WAIT"])
    out = dict(gap=gap, stage=None, cold=None, iterator=None, cold_iterator=None)
    if pd.notna(m.get("read_ms")) and pd.notna(fi.get("read_ms")):
        diffs = {k: float(m[f"{k}_ms"] - fi[f"{k}_ms"]) for k in STAGES}
        big = max(diffs, key=lambda k: abs(diffs[k]))
        out["stage"] = dict(name=big, ms=diffs[big])
    data = dict(readers=_readers(res))
    cold_m, cold_f = typical(data, "mds", "read (cold)"), typical(data, "imagefolder", "read (cold)")
    if cold_m is not None and cold_f is not None:
        out["cold"] = dict(mds=list(cold_m), imagefolder=list(cold_f), shard_faster=cold_m[0] < cold_f[0],
                           mds_kb=reader(data, "mds", "read (cold)", "disk_kb"),
                           imagefolder_kb=reader(data, "imagefolder", "read (cold)", "disk_kb"))
    warm, inside = reader(data, "mds", "read (warm)"), reader(data, "mds", "read inside the iterator")
    over = reader(data, "mds", "iterator overhead")
    bsz = int(Params.value_of(res, "batch_size"))
    if gap > 0 and warm is not None and inside is not None and over is not None:
        extra = bsz * (inside - warm + over)
        out["iterator"] = dict(batch=bsz, ms=extra, rest=gap - extra, share=extra / gap)
    if gap > 0:
        out["cold_iterator"] = _cold_iterator(res, data, m, fi, gap, bsz)
    f.data["w0_gap"] = out


def _cold_iterator(res, data: dict, m, fi, gap: float, bsz: int) -> dict | None:
    """Whether streaming's iterator, timed cold as the loop's W=0 runs read, accounts for the loop's MDS read: its
    cold read per sample × batch size against the loop's read stage per batch, and which explanation of the W=0 gap
    that supports (``verdict``: "missing", "not the read", "cause", "below", "above")."""
    inside = reader(data, "mds", "read inside the iterator (cold)")
    if inside is None:
        return dict(verdict="missing", reference=str(res.run_id).startswith("reference"))
    if pd.isna(m.get("read_ms")) or not m["read_ms"] > 0:
        return None
    per_batch, read = bsz * inside, float(m["read_ms"])
    r = per_batch / read
    read_gap = float(m["read_ms"] - fi["read_ms"]) if pd.notna(fi.get("read_ms")) else None
    out = dict(batch=bsz, ms=inside, per_batch=per_batch, loop_read=read, read_gap=read_gap, gap=gap,
               kb=reader(data, "mds", "read inside the iterator (cold)", "disk_kb"), direct=None, other=None)
    match = 1 - MATCH_TOL <= r <= 1 + MATCH_TOL
    if match and (read_gap is None or read_gap < MATCH_TOL * gap):
        return dict(out, verdict="not the read")
    if not match:
        return dict(out, verdict="below" if r < 1 - MATCH_TOL else "above")
    direct = reader(data, "mds", "read (cold)")
    if direct is not None and direct > 0:
        out["direct"] = dict(ms=direct, ratio=inside / direct)
    others = {k: float(m[f"{k}_ms"] - fi[f"{k}_ms"]) for k in STAGES if k != "read"
              and pd.notna(m.get(f"{k}_ms")) and pd.notna(fi.get(f"{k}_ms"))}
    big = max(others, key=lambda k: abs(others[k])) if others else None
    if big is not None and abs(others[big]) >= 0.05 * gap:
        out["other"] = dict(name=big, ms=others[big])
    return dict(out, verdict="cause")


def _one_worker_stages(res, f: Facts, st: pd.DataFrame) -> None:
    """One worker against none, per batch: the worker's stages, pinning and the hand-over against the main
    process's at W=0, the largest difference, and W=0 with one intra-op thread against its default threads."""
    r0, r1 = _scenario_row(st, "imagefolder", 0), _scenario_row(st, "imagefolder", 1)
    if r0 is None or r1 is None or "read_ms" not in r0 or pd.isna(r1.get("read_ms")):
        f.data["one_worker"] = None
        return
    threads = int(r0.get("main_threads", res.metadata.get("main_threads", 1)) or 1)
    diffs = {k: float(r1[f"{k}_ms"] - r0[f"{k}_ms"]) for k in STAGES}
    big = max(diffs, key=lambda k: abs(diffs[k]))
    out = dict(batch=int(Params.value_of(res, "batch_size")), threads=threads, w1=_stage_ms(r1), w0=_stage_ms(r0),
               w1_busy=float(r1["worker_busy_ms"]), w0_busy=float(r0["worker_busy_ms"] + r0["pin_ms"]),
               largest=dict(name=big, ms=diffs[big]), one_thread=None)
    t1 = _scenario_row(st, "imagefolder", 0, "1 thread")
    if t1 is not None and ips_key("imagefolder", 0, "1 thread") in f and ips_key("imagefolder", 0) in f:
        f.add(compare("one_thread_vs_w0", f[ips_key("imagefolder", 0, "1 thread")], f[ips_key("imagefolder", 0)]))
        out["one_thread"] = dict(normalise_ms=float(t1["normalise_ms"]))
    f.data["one_worker"] = out


def _sizing(res, f: Facts, st: pd.DataFrame) -> None:
    """How many workers the measured per-image costs predict, against the first worker count at which the data
    wait fell below its bar and the first that reached the keep-up share, per format and for the tuned recipe."""
    ceil = float(ceiling_runs(res)["images_per_s"].mean())
    bsz = int(Params.value_of(res, "batch_size"))
    keep = 100 * KEEP_UP
    data = dict(readers=_readers(res))
    out = dict(ceiling_ips=ceil, ceiling_compute=float(res.table("ceiling")["compute_ms"].mean()), keep=keep,
               wait_bar=LOADER_KEEPS_UP, main=None, worker=None, formats=[], tuned=None)
    warm = [reader(data, "imagefolder", s) for s in ("read (warm)", "decode", "normalise")]
    if all(v is not None for v in warm):
        ms = sum(warm)
        out["main"] = dict(ms=ms, threads=int(res.metadata.get("main_threads", 1)), cores=ceil * ms / 1e3)
    r1, r0 = _scenario_row(st, "imagefolder", 1), _scenario_row(st, "imagefolder", 0)
    need = None
    if r1 is not None and pd.notna(r1.get("worker_busy_ms")):
        w = float(r1["worker_busy_ms"]) / bsz
        need = ceil * w / 1e3
        w0 = float(r0["worker_busy_ms"]) / bsz if r0 is not None and pd.notna(r0.get("worker_busy_ms")) else None
        out["worker"] = dict(ms=w, workers=need, w0_ms=w0)
    for fmt in ("imagefolder", "mds"):
        d = st[(st["format"] == fmt) & (st["variant"] == "default")].sort_values("workers")
        if d.empty:
            continue
        fed, ok = d[d["wait_share"] < LOADER_KEEPS_UP], d[d["pct_of_ceiling"] >= keep]
        row = dict(format=fmt, first=None, tried=sorted(int(w) for w in d["workers"]), need=need, reached=None)
        if not fed.empty:
            k = fed.iloc[0]
            row["first"] = int(k["workers"])
            if ok.empty:
                worst = d.loc[d["compute_ms"].idxmax()]
                row["short"] = dict(compute=float(k["compute_ms"]), worst=float(worst["compute_ms"]),
                                    worst_workers=int(worst["workers"]))
            else:
                row["reached"] = int(ok.iloc[0]["workers"])
        out["formats"].append(row)
    t = st[st["variant"] == "tuned"].sort_values("workers")
    if not t.empty:
        tok = t[t["pct_of_ceiling"] >= keep]
        out["tuned"] = (dict(label=str(tok.iloc[0]["label"]), compute=float(tok.iloc[0]["compute_ms"]))
                        if not tok.empty else dict(label=None, best=float(t["pct_of_ceiling"].max())))
    f.data["sizing"] = out


def _cpu_use(res, st: pd.DataFrame) -> dict | None:
    """The CPU counters at the fewest and the most workers (ImageFolder, default recipe); ``old``: a result that
    records only psutil's system-wide percentage."""
    if "main_cores" not in st:
        return dict(old=True)
    d = st[(st["format"] == "imagefolder") & (st["variant"] == "default")].sort_values("workers")
    if d.empty:
        return None
    cols = ("workers", "main_cores", "main_threads", "cpu_busy_cores", "worker_cores")
    return dict(old=False, cores=int(res.metadata.get("cores", 0)) or None,
                fewest={c: _num(d.iloc[0][c]) for c in cols}, most={c: _num(d.iloc[-1][c]) for c in cols})


def _compute_growth(res, f: Facts, st: pd.DataFrame) -> None:
    """Which default-recipe scenarios computed a step slower than the ceiling's (beyond the runs' spread), how busy
    the CPU was in them against the load sweep's lightest load, and what the tuned recipe changed at once."""
    ceil = measured("compute.ceiling", [float(v) for v in res.table("ceiling")["compute_ms"]], unit="ms",
                    label="the ceiling's compute per step", quantity="time", better="lower")
    f.add(ceil)
    grown = []
    for _, r in st[st["variant"] == "default"].iterrows():
        fmt, w = str(r["format"]), int(r["workers"])
        runs = _runs(res, fmt, w, "compute_ms")
        if not runs:
            continue
        a = measured(f"compute.{fmt}.w{w}", runs, unit="ms", label=f"compute per step, {_label(fmt, w)}",
                     quantity="time", better="lower", setting={"format": fmt, "workers": w})
        c = compare(f"compute.{fmt}.w{w}.vs_ceiling", a, ceil)
        f.add(a, c)
        if c.number is not None and c.number > 1 and not c.level:
            grown.append(dict(label=str(r["label"]), key=a.key, busy_cores=_num(r.get("cpu_busy_cores"))))
    out = dict(cores=int(res.metadata.get("cores", 0)) or None, grown=grown, sweep=None, tuned=None)
    t = res.table("load") if "load" in res.tables else pd.DataFrame()
    if grown and not t.empty and all(g["busy_cores"] is not None for g in grown):
        base_mode = "plain" if "plain" in set(t["mode"]) else str(t["mode"].iloc[0])
        light = t[(t["mode"] == base_mode) & (t["busy"] > 0)]
        if not light.empty:
            lo = light[light["busy"] == light["busy"].min()]
            busy = float(lo["cpu_busy_cores"].mean())
            top = max(g["busy_cores"] for g in grown)
            out["sweep"] = dict(busy=int(lo["busy"].iloc[0]), busy_cores=busy, compute=float(lo["compute_ms"].mean()),
                                top=top, matched=not top < SWEEP_MATCH * busy)
    tuned = st[st["variant"] == "tuned"]
    if not tuned.empty:
        r = tuned.loc[tuned["images_per_s"].idxmax()]
        d = _scenario_row(st, r["format"], int(r["workers"]))
        remedy = str(Params.value_of(res, "tuned_remedy"))
        out["tuned"] = dict(label=str(r["label"]), compute=float(r["compute_ms"]),
                            default_compute=float(d["compute_ms"]) if d is not None else None,
                            nice="nice" in remedy, reserve="reserve" in remedy)
    f.data["compute_growth"] = out


def _takeaways(res, f: Facts, st: pd.DataFrame) -> None:
    """The chapter's conclusions: per format the fewest workers that kept up (or the best share), and the best tuned
    and graphed scenarios. Which format to store the images in is not decided here: the storage-format comparison
    answers that question once (``image.storage_format``), and the page repeats its verdict."""
    keep = 100 * KEEP_UP
    out = dict(keep=keep, formats=[], tuned=None, graphed=None)
    for fmt in ("imagefolder", "mds"):
        d = st[(st["format"] == fmt) & (st["variant"] == "default")].sort_values("workers")
        if d.empty:
            continue
        ok, top = d[d["pct_of_ceiling"] >= keep], d.loc[d["pct_of_ceiling"].idxmax()]
        out["formats"].append(dict(format=fmt, reached=int(ok.iloc[0]["workers"]) if not ok.empty else None,
                                   best=float(top["pct_of_ceiling"]), best_workers=int(top["workers"])))
    tuned = st[st["variant"] == "tuned"]
    if not tuned.empty:
        t = tuned.loc[tuned["images_per_s"].idxmax()]
        out["tuned"] = dict(label=str(t["label"]), pct=float(t["pct_of_ceiling"]), h2d=float(t["H2D_TRANSFER"]))
    g = st[st["variant"] == "graphed"]
    if not g.empty:
        gb = g.loc[g["pct_of_ceiling"].idxmax()]
        out["graphed"] = dict(label=str(gb["label"]), pct=float(gb["pct_of_ceiling"]),
                              every=float(gb.get("pct_of_ceiling_min", gb["pct_of_ceiling"])) >= keep)
    f.data["takeaways"] = out


def graph_missing(res) -> dict | None:
    """Why this result has no scenario replayed from a CUDA graph (None when it has one): ``reason`` "reference"
    (the reference run left it out), "note" (the run recorded why, in ``note``) or "off" (``graphed_workers``
    was empty)."""
    if (scenarios(res)["variant"] == "graphed").any():
        return None
    if str(res.run_id).startswith("reference"):
        return dict(reason="reference", note=None)
    note = res.metadata.get("graph_note")
    return dict(reason="note", note=str(note)) if note else dict(reason="off", note=None)


def _traces(res) -> list[dict] | None:
    """Each traced step: its label, its length under the profiler, the GPU's kernel time in it, the main thread's
    wait for the batch, and for the forward pass the time to issue it against the GPU's span and busy time."""
    tl = res.table("timeline") if "timeline" in res.tables else pd.DataFrame()
    if tl.empty:
        return None
    out = []
    for _, g in tl.groupby("trace" if "trace" in tl else "label", sort=False):
        step = float(g["step_ms"].iloc[0])
        busy = float(g[g["lane"] == "GPU: kernels"]["dur_ms"].sum())
        cpu = g[g["lane"] == "CPU: phases"].set_index("name")
        gpu = g[g["lane"] == "GPU: phases"].set_index("name")
        row = dict(label=str(g["label"].iloc[0]), step=step, busy=busy, wait=None, forward=None,
                   kernel_share=busy / step if step > 0 and busy > 0 else None)
        if "DATALOADER_WAIT" in cpu.index:
            row["wait"] = float(cpu.loc["DATALOADER_WAIT", "dur_ms"])
        if "FORWARD" in cpu.index and "FORWARD" in gpu.index and "busy_ms" in gpu:
            row["forward"] = dict(cpu=float(cpu.loc["FORWARD", "dur_ms"]), span=float(gpu.loc["FORWARD", "dur_ms"]),
                                  busy=float(gpu.loc["FORWARD", "busy_ms"]))
        out.append(row)
    return out


def _nvml(res, traces: list[dict] | None) -> dict | None:
    """NVML's reading against the compute share for the best configuration, with the share of its traced step in
    which kernels ran and which of the two that share lies closer to."""
    b = scenario_stats(res)
    b = b.loc[b["pct_of_ceiling"].idxmax()]
    if pd.isna(b.get("gpu_util")):
        return None
    nv, au = float(b["gpu_util"]) / 100, float(b["au"])
    k = next((t["kernel_share"] for t in traces or [] if t["label"] == str(b["label"])), None)
    return dict(label=str(b["label"]), gpu_util=float(b["gpu_util"]), au=au, samples=_num(b.get("util_samples")),
                kernel_share=k, closer=None if k is None else "compute share" if abs(k - au) < abs(k - nv) else "nvml")

# --------------------------------------------------------------------------- the ceilings, the gaps, the graph
#: The ceilings: the eager step, and the same step replayed from CUDA graphs, each fed from memory.
CEILINGS = ("eager", "graphed")
#: The key metric that divides the data waits at W=0 (the source's ratio: ImageFolder's wait ÷ MDS's).
WAIT_RATIO = "streaming ÷ ImageFolder, workers=0"


def _ceilings(res) -> dict:
    """Each ceiling (``eager``, ``graphed``; None where the result has no runs of it): its images/s and compute per
    step (means over its runs), its runs, the compute's lowest and highest run, and for the graphed one its compute
    against the eager ceiling's (``vs_eager``: +1 slower, -1 faster, 0 level, :func:`direction` within 1%)."""
    out = {}
    for kind in CEILINGS:
        c = ceiling_runs(res, kind)
        if c.empty or "images_per_s" not in c:
            out[kind] = None
            continue
        comp = [float(v) for v in c["compute_ms"]]
        out[kind] = dict(images_per_s=float(c["images_per_s"].mean()), compute_ms=float(c["compute_ms"].mean()),
                         runs=len(c), compute_low=min(comp), compute_high=max(comp), compute_runs=len(comp))
    if out["graphed"] is not None and out["eager"] is not None:
        out["graphed"]["vs_eager"] = direction([float(v) for v in ceiling_runs(res, "graphed")["compute_ms"]],
                                               [float(v) for v in ceiling_runs(res, "eager")["compute_ms"]], tol=0.01)
    return out


def _spreads(res) -> dict:
    """The runs' spread of images/s: every scenario (by its label) and ceiling (by its kind) whose coefficient of
    variation is above :data:`~datajourney.core.stats.HIGH_SPREAD` (``high``: lowest, highest, runs, cv), and the
    largest spread of a scenario run more than once (``worst``, None where every scenario ran once)."""
    high, worst = [], None
    for label, g in scenarios(res).groupby("label", sort=False):
        v = [float(x) for x in g["images_per_s"]]
        c = cv(v)
        if c > HIGH_SPREAD:
            high.append(dict(label=str(label), ceiling=None, low=min(v), high=max(v), runs=len(v), cv=c))
        if len(v) > 1 and c > (worst["cv"] if worst else 0.0):
            worst = dict(label=str(label), cv=c)
    for kind in CEILINGS:
        c = ceiling_runs(res, kind)
        v = [float(x) for x in c["images_per_s"]] if "images_per_s" in c else []
        if v and cv(v) > HIGH_SPREAD:
            high.append(dict(label=None, ceiling=kind, low=min(v), high=max(v), runs=len(v), cv=cv(v)))
    return dict(high=high, worst=worst, threshold=HIGH_SPREAD)


def _gap(res, row) -> dict:
    """What a scenario's step lost against the ceiling of its own step (eager or graphed; eager where the result
    has no graphed ceiling), ms per step (``gap``), split into the data wait, the copy, compute and the rest
    (``parts``, in that order), the largest part (``largest``), its share of the gap (``share``) and whether it is
    more than the whole gap (``whole``: the parts below zero offset the rest)."""
    ceil = ceiling_runs(res, str(row["ceiling"]))
    if ceil.empty:
        ceil = ceiling_runs(res, "eager")
    gap = float(row["step_ms"] - ceil["step_ms"].mean())
    parts = {"data wait": float(row["DATALOADER_WAIT"] - ceil["DATALOADER_WAIT"].mean()),
             "the copy to the GPU": float(row["H2D_TRANSFER"] - ceil["H2D_TRANSFER"].mean()),
             "compute": float(row["compute_ms"] - ceil["compute_ms"].mean())}
    parts["the rest of the step"] = gap - sum(parts.values())
    big = max(parts, key=parts.get)
    return dict(gap=gap, parts=parts, largest=big, largest_ms=parts[big],
                share=parts[big] / gap if gap else None, whole=parts[big] > gap)


def _default_best(res, st: pd.DataFrame, ceilings: dict) -> dict | None:
    """The default recipe's best scenario (the highest share of the ceiling): its label, share of the eager ceiling
    (``pct``, the scenario table's; AU ``au``, its images/s ÷ the ceiling's), images/s, step and compute per step,
    its compute share (compute ÷ the step), whether each of the two reaches the book's bar, and what its step lost
    to its ceiling (:func:`_gap`). None without a default-recipe scenario or an eager ceiling."""
    d = st[st["variant"] == "default"]
    if d.empty or ceilings["eager"] is None:
        return None
    r = d.loc[d["pct_of_ceiling"].idxmax()]
    # AU as the exercise on paper works it: the scenario's images/s ÷ the ceiling's (means over runs), so the
    # division it prints holds whatever the table's per-run shares average to
    au = float(r["images_per_s"]) / ceilings["eager"]["images_per_s"]
    share = float(r["compute_ms"]) / float(r["step_ms"])
    return dict(label=str(r["label"]), format=str(r["format"]), workers=int(r["workers"]),
                pct=float(r["pct_of_ceiling"]), au=au, images_per_s=float(r["images_per_s"]),
                step_ms=float(r["step_ms"]), compute_ms=float(r["compute_ms"]), share=share,
                au_reaches=au >= KEEP_UP, share_reaches=share >= KEEP_UP, gap=_gap(res, r))


def _graph_pairs(res, st: pd.DataFrame) -> list[dict]:
    """Each loader run both with the eager tuned step and with the graphed step (the same format and workers, the
    step the only difference): compute per step of each (means over runs) and their difference, the direction of
    the graphed step's compute against the eager one's (:func:`direction`, within 2%), and where the result has a
    graphed ceiling each one's compute above its own ceiling's (``excess_eager``, ``excess_graphed``) and the share
    of the eager excess the graph removed (``removed``, None where the eager step was not above its ceiling)."""
    eager, graphed = ceiling_runs(res, "eager"), ceiling_runs(res, "graphed")
    out = []
    for _, g in st[st["variant"] == "graphed"].iterrows():
        fmt, w = str(g["format"]), int(g["workers"])
        t = _scenario_row(st, fmt, w, "tuned")
        if t is None:
            continue
        gm, tm = float(g["compute_ms"]), float(t["compute_ms"])
        row = dict(format=fmt, workers=w, graphed_ms=gm, tuned_ms=tm, diff_ms=gm - tm,
                   direction=direction(_runs(res, fmt, w, "compute_ms", "graphed"),
                                       _runs(res, fmt, w, "compute_ms", "tuned"), tol=0.02),
                   excess_eager=None, excess_graphed=None, removed=None)
        if not graphed.empty:
            e, x = tm - float(eager["compute_ms"].mean()), gm - float(graphed["compute_ms"].mean())
            row.update(excess_eager=e, excess_graphed=x, removed=1 - x / e if e > 0 else None)
        out.append(row)
    return out


def key_metrics(res, st: pd.DataFrame) -> dict:
    """Metric name (as published) -> [mean, std] of this result (std only from three runs or more, else None)."""
    def std(r, col: str):
        return _num(r.get(f"{col}_std")) if int(r.get("runs", 0) or 0) >= 3 else None

    out = {}
    for fmt, label in (("imagefolder", "ImageFolder"), ("mds", "streaming (MDS)")):
        for w in (0, 4):
            r = _scenario_row(st, fmt, w)
            if r is not None:
                out[f"{label}, workers={w}: data wait"] = [_num(r["DATALOADER_WAIT"]), std(r, "DATALOADER_WAIT")]
                out[f"{label}, workers={w}: images/s"] = [_num(r["images_per_s"]), std(r, "images_per_s")]
    a, b = _scenario_row(st, "imagefolder", 0), _scenario_row(st, "mds", 0)
    if a is not None and b is not None:  # the source's ratio: MDS's data-wait speed-up over ImageFolder
        out[WAIT_RATIO] = [_num(a["DATALOADER_WAIT"] / b["DATALOADER_WAIT"]) if b["DATALOADER_WAIT"] else None, None]
    if a is not None:
        out["compute per step (forward+backward+optimizer)"] = [_num(a["compute_ms"]), std(a, "compute_ms")]
        out["H2D per step"] = [_num(a["H2D_TRANSFER"]), std(a, "H2D_TRANSFER")]
    return out


def _notes(res, f: Facts, st: pd.DataFrame) -> None:
    """The structured values the page's notes word, computed once here."""
    traces = _traces(res)
    md = res.metadata
    f.data.update(readers=_readers(res), graph_missing=graph_missing(res), load_notes=dict(md.get("load_notes") or {}),
                  cores=int(md.get("cores") or 0), mds_note=md.get("mds_note"), cpu_use=_cpu_use(res, st),
                  traces=traces, trace_files={str(k): str(v) for k, v in (md.get("traces") or {}).items()},
                  nvml=_nvml(res, traces))
    ceilings = _ceilings(res)
    b = f["best_vs_ceiling"].setting   # the best setting, as the key result names it
    best = _scenario_row(st, b["format"], b["workers"], b["variant"])
    f.data.update(ceilings=ceilings, spreads=_spreads(res), best_gap=_gap(res, best),
                  default_best=_default_best(res, st, ceilings), graph_pairs=_graph_pairs(res, st),
                  key_metrics=key_metrics(res, st))
    _w0_gap(res, f, st)
    _one_worker_stages(res, f, st)
    _sizing(res, f, st)
    _compute_growth(res, f, st)
    _takeaways(res, f, st)


def analyse(res) -> Facts:
    """Chapter 7's facts of ``res`` (pure: reads the result's tables, parameters and metadata only)."""
    f = Facts(CHAPTER, exports=EXPORTS)
    wl = image_workload(res)
    f.data.update(image_workload=wl, model=model_of(res),
                  device=res.metadata.get("device"), workload=workload_name(res), worker_nice=WORKER_NICE)
    if wl is not None and wl.get("cpu_ms") is not None:
        f.add(Fact("cpu_ms_per_image", wl["cpu_ms"], "ms", "the CPU time of the loader per image (read, decode, "
                   "normalise, collate)", "amount", "lower", setting=dict(wl["cpu_recipe"] or {})))
    st = scenario_stats(res)
    _throughput(res, f, st)
    _load(res, f, st)
    _best(res, f)
    _workers_advice(res, f, st)
    _recipes(res, f, st)
    _recipe(res, f)
    _formats(res, f)
    _notes(res, f, st)
    return f
