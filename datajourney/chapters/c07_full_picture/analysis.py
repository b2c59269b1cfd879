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

from datajourney.chapters.c07_full_picture.params import Params
from datajourney.chapters.c07_full_picture.reading import (
    KEEP_UP,
    LABELS,
    STORAGE_FORMATS,
    WORKER_NICE,
    ceiling_runs,
    scenario_stats,
    scenarios,
)
from datajourney.core.answers import Candidate, Question, decide, exceeds
from datajourney.core.facts import Fact, Facts, compare, measured

CHAPTER = "07_full_picture"
EXPORTS = ("wait_w0", "workers4", "best_vs_ceiling", "best_vs_ceiling.flagged", "contention", "compute_under_load",
           "compute_unloaded", "cpu_ms_per_image", "workers_gain", "image_workload")
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
    step_ms, step_kind = float(c["step_ms"].mean()), "eager"
    g = res.table("graphed_ceiling") if "graphed_ceiling" in res.tables else pd.DataFrame()
    if not g.empty and float(g["step_ms"].mean()) < step_ms:
        step_ms, step_kind = float(g["step_ms"].mean()), "graphed"
    out = dict(model=str(c["model"].iloc[0]) if "model" in c else model_of(res),
               batch_size=b, step_ms=step_ms, step_kind=step_kind, device=res.metadata.get("device"),
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
        f.add(compare("mds_vs_imagefolder_w0", f[ips_key("mds", 0)], f[ips_key("imagefolder", 0)]))
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
    for mode in modes:
        if mode == base_mode or not runs(mode, top):
            continue
        reserved = int(t[t["mode"] == mode]["reserved_cpus"].max()) if "reserved_cpus" in t else 0
        m = measured(f"compute_under_load.{mode}", runs(mode, top), unit="ms",
                     label=f"the step beside {top} busy processes ({mode})", quantity="time", better="lower",
                     setting={"mode": mode, "busy": top, "reserved_cpus": reserved})
        f.add(m, compare(f"remedy.{mode}", m, alone))


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
    q = Question("image.num_workers", "How many DataLoader workers for this model from these files?", "num_workers",
                 0, "num_workers=0", "PyTorch's DataLoader default", workload_name(res, fmt))
    a = decide(q, [Candidate(k, f[ips_key(fmt, k)], snippet=loader_snippet(res, k)) for k in ws], f)
    if a is not None:
        f.advise(replace(a, scope="edge" if a.verdict == "change" and a.value == ws[-1] else "best"))


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
    workload = f"{workload_name(res)}, read cold"

    def question(cost: str | None) -> Question:
        return Question("image.storage_format", "Which storage format should these images be kept in?", "format",
                        "imagefolder", "one JPEG file per image (ImageFolder)", "the layout images come in",
                        workload, cost=cost)

    trial = decide(question(None), cands, Facts(CHAPTER))
    if trial is None:
        return
    f.advise(decide(question(FORMAT_COSTS.get(str(trial.value))), cands, f))


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
    _formats(res, f)
    return f
