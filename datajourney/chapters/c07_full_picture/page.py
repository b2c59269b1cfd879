"""Chapter 7's page: the key results, computed notes and display tables built from what
:mod:`datajourney.chapters.c07_full_picture.experiment` measured (the profiled training loop, its ceiling, the
per-sample reader costs and the load sweep)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from datajourney.chapters.c07_full_picture import analysis
from datajourney.chapters.c07_full_picture.analysis import CHAPTER
from datajourney.chapters.c07_full_picture.analysis import analyse as _analyse
from datajourney.chapters.c07_full_picture.reading import (
    KEEP_UP,
    LABELS,
    WORKER_NICE,
    scenario_label,
    scenario_stats,
)
from datajourney.chapters.common import facts_reader, on_paper
from datajourney.chapters.wording import recipe_sentence  # chapter 12 words the recipe with it too
from datajourney.core import phrasing as say
from datajourney.core.facts import Fact, Facts
from datajourney.core.phrasing import Action, Finding, Opening, choose, spread_words
from datajourney.core.units import num, pct, span, times
from datajourney.core.units import num as fx_num
from datajourney.toolkit.imagenet import MEAN, STD

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)


def _range(low: float, high: float, runs: int, unit: str = "") -> str:
    """The runs' range of a measure, in words ("one run" for a single run)."""
    if runs < 2:
        return "one run"
    return f"min–max {span(low, high, unit)} over {runs} runs"


#: How the chapter names each ceiling, and what it is.
CEILING_NAMES = {"eager": ("the eager ceiling", ""),
                 "graphed": ("the graphed ceiling", " (the same CUDA graphs fed from GPU memory)")}


def mds_w0_note(facts) -> str:
    """The details of MDS against one file per image at W=0: their data waits (level within the runs' spread, or
    the difference per step), the stage the loop's timers put most of it in, the per-sample cold reads, what
    streaming's iterator costs and whether, timed cold, it explains the gap."""
    facts = facts_of(facts)
    g = facts.data.get("w0_gap")
    if not g:
        return ""
    wm, wf, c = facts["wait.mds.w0"], facts["wait.imagefolder.w0"], facts["wait.mds_vs_imagefolder.w0"]
    if c.level or c.number is None:
        return (f"Their data waits were level ({say.value(wm, runs=False)} for shards, {say.value(wf, runs=False)} "
                "for files): at W=0 the format made no difference beyond the runs' spread.")
    gap = g["gap"]
    text = (f"Each step waited {num(abs(gap), 'ms')} {'longer' if c.number > 1 else 'less'} for shards "
            f"({say.value(wm, runs=False)} vs {say.value(wf, runs=False)})")
    if g["stage"]:
        text += f"; of that, the loop's stage timers put {_signed(g['stage']['ms'])} in the **{g['stage']['name']}**"
    text += "."
    cold = g["cold"]
    if cold:   # each read's median, p90 and bytes from the disk are the reader table's, said there once
        faster = cold["shard_faster"]
        text += (f" A cold read was {'faster' if faster else 'slower'} from a shard than from a file (the table above)"
                 + (": the per-sample reads point away from the disk." if faster and gap > 0 else "."))
    it = g["iterator"]
    if it:
        bsz = it["batch"]
        text += (f" Streaming's iterator costs {_signed(it['ms'])} per batch of {bsz} (its read minus a direct read, "
                 f"plus its bookkeeping, × {bsz}): **{pct(it['share'])} of the gap**. "
                 + (f"The remaining {num(it['rest'], 'ms')} per batch is not explained by these warm measurements."
                    if it["rest"] > 0 else "Together they account for the whole gap."))
    if gap > 0:
        text += " " + _cold_iterator_sentence(g["cold_iterator"])
    return text


def _cold_iterator_sentence(ci: dict | None) -> str:
    """Streaming's iterator timed cold, as the loop's W=0 runs read, against the loop's MDS read stage, and which
    explanation of the W=0 gap the analysis found the data to support (its ``verdict``)."""
    if ci is None:
        return ""
    if ci["verdict"] == "missing":
        where = "not in the reference run" if ci["reference"] else "not measured in this run"
        return f"Streaming's iterator timed cold, as the loop's W=0 runs read, is {where}."
    bsz, gap, read_gap = ci["batch"], ci["gap"], ci["read_gap"]
    text = (f"Timed cold, as the loop's W=0 runs read, streaming's iterator read a sample in {num(ci['ms'], 'ms')} "
            f"(× {bsz} = {num(ci['per_batch'], 'ms')} per batch) against the loop's MDS read stage of "
            f"{num(ci['loop_read'], 'ms')}")
    verdict = ci["verdict"]
    if verdict == "not the read":
        return text + (": they match, but the loop's read differs between the formats by "
                       + (f"only {num(read_gap, 'ms')} of the {num(gap, 'ms')} gap per batch" if read_gap is not None
                          else "an unknown amount") + ", so the gap does not lie in the read; this run does not "
                       "explain it.")
    if verdict == "cause":
        text += (f": they match. **The data support the cold read through streaming's iterator as the cause**: "
                 f"the read is {num(read_gap, 'ms')} of the {num(gap, 'ms')} gap per batch")
        if ci["direct"]:
            text += (f", and a direct cold `get_item` took {num(ci['direct']['ms'], 'ms')} per sample, so the "
                     f"iterator's read path cold costs {times(ci['direct']['ratio'])} a direct read of the same shards")
        if ci["other"]:
            text += (f"; of the rest, the largest stage difference is the {ci['other']['name']} "
                     f"({_signed(ci['other']['ms'])})")
        return text + "."
    if verdict == "below":
        return text + (": well below it, so even cold, streaming's read does not account for the loop's; "
                       "the data support neither explanation, and the remainder stays unexplained.")
    return text + (": above it, so the cold read covers the loop's read but does not match it; this run does not "
                   "pin the remainder on it.")


def _signed(ms: float) -> str:
    return ("+" if ms >= 0 else "−") + num(abs(ms), "ms")


def _stage_text(ms: dict, *, pin: bool) -> str:
    parts = [f"{k} {num(ms[k], 'ms')}" for k in ("read", "decode", "normalise", "collate")]
    return ", ".join(parts) + (f", pin {num(ms['pin'], 'ms')}" if pin else "")


def one_worker_note(facts) -> str:
    """The details of one worker against none, per batch: the worker's stages, pinning and the hand-over against
    the main process's at W=0, the stage that differs most, and W=0 with one intra-op thread."""
    facts = facts_of(facts)
    o = facts.data.get("one_worker")
    if not o:
        return ""
    bsz, threads, w1, w0, big = o["batch"], o["threads"], o["w1"], o["w0"], o["largest"]
    text = (f"Per batch of {bsz}, the worker spent {num(o['w1_busy'], 'ms')} ({_stage_text(w1, pin=False)}), then "
            f"pinning {num(w1['pin'], 'ms')} and the hand-over {num(w1['handover'], 'ms')} of the loop's wait; the "
            f"main process at W=0 ({threads} intra-op thread{'s' if threads != 1 else ''}) spent "
            f"{num(o['w0_busy'], 'ms')} ({_stage_text(w0, pin=True)}). The largest difference is "
            f"**{big['name']}** ({_signed(big['ms'])} per batch).")
    c = facts.get("one_thread_vs_w0")
    if o["one_thread"] and c is not None:
        text += (f" With one intra-op thread, W=0 normalised a batch in {num(o['one_thread']['normalise_ms'], 'ms')} "
                 f"and ran {say.comparison(c, facts, baseline=f'the runs with {threads}')} "
                 f"({say.value(facts[c.of], runs=False)}).")
    return text


def phase_chart(res):
    """Each scenario's step taken apart into its phases (means over runs), titled with the batch size and the
    model that ran, by its readable name (ResNet-50, never the torchvision id)."""
    from datajourney.chapters.c07_full_picture import charts
    from datajourney.chapters.c07_full_picture.params import Params
    from datajourney.chapters.c07_full_picture.reading import PHASES

    model = analysis.model_of(res)
    return charts.phase_bars(scenario_stats(res), phases=PHASES,
                             title=f"Per-step phase breakdown, batch {Params.value_of(res, 'batch_size')}, "
                                   f"{analysis.MODEL_NAMES.get(model, model)}")


def load_table(res) -> pd.DataFrame:
    """Compute per step under load: one row per (mode, busy) with mean, min, max over repeats."""
    if "load" not in res.tables or res.table("load").empty:
        return pd.DataFrame()
    t = res.table("load")
    g = t.groupby(["mode", "busy"], sort=False)
    return g.agg(compute_ms=("compute_ms", "mean"), compute_min=("compute_ms", "min"),
                compute_max=("compute_ms", "max"), compute_p90_ms=("compute_p90_ms", "mean"),
                main_cores=("main_cores", "mean"), cpu_busy_cores=("cpu_busy_cores", "mean"),
                n=("compute_ms", "count")).reset_index()


def load_remedies_note(facts) -> str:
    """The details of the step under load: each other mode of the load sweep at the same load against the same
    step unloaded (a CUDA graph computes faster even alone), level (within the runs' spread) or the compute the
    load added."""
    facts = facts_of(facts)
    f, alone = facts.get("compute_under_load"), facts.get("compute_unloaded")
    if f is None or alone is None or not f.setting.get("sweep"):
        return ""
    others = []
    for c in [c for k, c in facts.facts.items() if k.startswith("remedy.")]:
        m, own, added = facts[c.of], facts[c.basis], f"remedy_added.{c.key.removeprefix('remedy.')}"
        label = MODE_LABELS.get(m.setting["mode"], m.setting["mode"])
        if "reserve" in m.setting["mode"] and m.setting.get("reserved_cpus"):
            label += f" ({m.setting['reserved_cpus']} left to the training process)"
        unloaded = f"unloaded {say.value(own, runs=False)}"
        if c.level or added not in facts:
            others.append(f"{label}: {say.value(m)}, level ({unloaded})")
        else:
            others.append(f"{label}: {say.value(m, runs=False)}, {_signed(facts.number(added))} ({unloaded})")
    busy, cores = f.setting.get("busy"), f.setting.get("cores")
    load = f" ({busy} busy processes{f' on {cores} cores' if cores else ''})" if busy else ""
    return (f"At the same load{load}, each against the same step unloaded: " + "; ".join(others) + "."
            if others else "")


#: What each load-sweep mode does, as the chapter names it.
MODE_LABELS = {"plain": "busy processes at normal priority", "nice": f"busy processes at nice {WORKER_NICE}",
               "reserve": "busy processes kept off the reserved cores",
               "nice+reserve": f"busy processes at nice {WORKER_NICE} and off the reserved cores",
               "cuda_graphs": "the training step as CUDA graphs"}


def _graph_missing(facts: Facts) -> str | None:
    """Why this result has no scenario replayed from a CUDA graph, in words (None when it has one)."""
    g = facts.data.get("graph_missing")
    if not g:
        return None
    if g["reason"] == "reference":
        return "is not in the reference run"
    if g["reason"] == "note":
        return f"was not measured here ({say.text(g['note'])})"
    return "was not part of this run (graphed_workers = [])"


def _graph_effect(p: dict) -> str:
    """What replaying the step from a CUDA graph changed under the same workers (a pair of the analysis's
    ``graph_pairs``): compute per step against the eager tuned step, and how much of the eager step's compute
    excess over its own ceiling the graph removed (each one's share of its own ceiling is the scenario table's)."""
    fmt = str(p["format"])
    word = choose(p["direction"], "grew", "fell", "did not change beyond the runs' spread")
    text = (f"Graphed under the same workers ({LABELS.get(fmt, say.text(fmt))}, W={int(p['workers'])}), "
            f"compute per step {word}: **{num(p['graphed_ms'], 'ms')}** against the eager tuned step's "
            f"{num(p['tuned_ms'], 'ms')} ({_signed(p['diff_ms'])}).")
    if p["excess_eager"] is None:
        return text
    if p["removed"] is None:
        return text + (f" The eager step's compute was not above its own ceiling's ({_signed(p['excess_eager'])}), "
                       "so there was no compute gap for the graph to remove.")
    removed = p["removed"]
    share = ("all of that excess" if removed >= 1 else "none of that excess" if removed <= 0
             else f"**{pct(removed)}** of that excess")
    return text + (f" Above its own ceiling's compute, the eager step took {_signed(p['excess_eager'])} and the "
                   f"graphed step {_signed(p['excess_graphed'])}: the graph removed {share}.")


def _gap_words(g: dict) -> str:
    """What a scenario's step lost to its own ceiling and in which part (the analysis's ``_gap``)."""
    big = g["largest"]
    return (f" Of the {num(g['gap'], 'ms')} per step it lost to its ceiling, "
            + ", ".join(f"{k} {_signed(v)}" for k, v in g["parts"].items()) + f"; the largest part is **{big}** "
            + ("(more than the whole gap: the parts below zero offset the rest)." if g["whole"] else
               f"({pct(g['share'])} of the gap)."))


def _best_note(facts) -> str:
    """The details of the best configuration: the recipe's parts, what its step lost to its own ceiling and in which
    part (what replaying the step from a CUDA graph changed is :func:`graph_note`'s, shown once in its own section),
    and the best of the default recipe."""
    facts = facts_of(facts)
    d = facts.data
    text = _recipe_parts(facts)
    g = d.get("best_gap")
    if g and g["gap"] > 0:
        text += _gap_words(g)
    # what the graph changed under the same workers is shown once, in the section on the graphed step (graph_note)
    why = None if d.get("graph_pairs") else _graph_missing(facts)
    if why:
        text += f" The step replayed from a CUDA graph {why}: the best configuration is the best eager one."
    b, db = facts.get("best_vs_ceiling"), d.get("default_best")
    if b is not None and b.setting.get("variant") != "default" and db:
        gd = db["gap"]
        text += (f" The best of the default recipe, {say.text(db['label'])}, reached {num(db['pct'], '%')}; the "
                 f"largest part of its {num(gd['gap'], 'ms')} gap was {gd['largest']} ({_signed(gd['largest_ms'])}).")
    return text.strip()


def finding_note(res, key: str) -> str:
    """The details of the key result ``key`` (what a section shows beside its chart), "" when none."""
    notes = {"mds_vs_imagefolder_w0": mds_w0_note, "one_worker": one_worker_note,
             "compute_under_load": load_remedies_note, "best_vs_ceiling": _best_note}
    return notes[key](res) if key in notes else ""


# --------------------------------------------------------------------------- computed prose
#: How the spread note names each ceiling.
SPREAD_CEILINGS = {"eager": "The ceiling", "graphed": "The graphed ceiling"}


def spread_notes(facts) -> str:
    """A sentence for every scenario (and ceiling) whose images/s spread over its runs by more than the threshold
    (the analysis's ``spreads``); else one sentence giving the largest spread."""
    sp = facts_of(facts).data.get("spreads")
    if not sp:
        return ""
    notes = [spread_words(say.text(r["label"]) if r["label"] is not None else SPREAD_CEILINGS[r["ceiling"]],
                          r["low"], r["high"], r["runs"], r["cv"], "images/s") for r in sp["high"]]
    if notes:
        return "\n".join(f"* {x}" for x in notes)
    worst = sp["worst"]
    if worst:
        return (f"No scenario's images/s varied by more than {pct(sp['threshold'])} (coefficient of variation) "
                f"across its runs; the largest spread was {pct(worst['cv'])}, for {say.text(worst['label'])}.")
    return "Each scenario ran once: no spread to report."


def sizing(facts) -> str:
    """How many workers the measured per-image cost predicts, against the sweep: the first worker count at which the
    loader kept up and whether any reached the ceiling's bar (the compute per step behind it is the scenario table's,
    said there once)."""
    facts = facts_of(facts)
    s = facts.data.get("sizing")
    if not s:
        return "The per-image costs were not recorded in this run."
    keep, bar = s["keep"], s["wait_bar"]
    text = []
    d = facts.get("cpu_ms_per_image")
    if d is not None:
        text.append(f"The loader's work cost **D = {say.value(d)}** of CPU per image {_cpu_setting(d)} (its stage "
                    "timers' medians ÷ the batch size; chapter 12 reads the CPU counters, which count the training "
                    "process too).")
    m, w = s["main"], s["worker"]
    if m:
        text.append(f"Read warm, decoded and normalised in the main process ({m['threads']} intra-op threads), one "
                    f"image costs {num(m['ms'], 'ms')}: {num(m['cores'], '')} cores for the ceiling.")
    if w:
        more = (f", {_pct_more(w['ms'], w['w0_ms'])} than the same stages at W=0 ({num(w['w0_ms'], 'ms')})"
                if w["w0_ms"] is not None else "")
        text.append(f"Inside the one worker of W=1 (cold cache, one thread, collation into shared memory) it cost "
                    f"{num(w['ms'], 'ms')}{more}, which predicts **{num(w['workers'], '')} workers**.")
    said, never = {}, []   # formats whose sweep reads alike are said once, together; so are those never at the bar
    for r in s["formats"]:
        first = r["first"]
        if first is None:
            body = f"with no worker count tried did the data wait fall below {pct(bar)} of the step."
        else:
            body = f"the data wait fell below {pct(bar)} of the step from **W={first}**"
            if r["need"] is not None:
                body += ", " + _against_prediction(first, r["need"], r["tried"])
            body += ("." if r["reached"] is None else
                     f"; it first reached {num(keep, '%')} of the ceiling at W={r['reached']}.")
            never += [LABELS.get(r["format"], r["format"])] if r["reached"] is None else []
        said.setdefault(body, []).append(LABELS.get(r["format"], r["format"]))
    text += [f"{say.and_list(names)}: {body}" for body, names in said.items()]
    if never:
        text.append(f"Yet with {say.and_list(never)} no worker count reached {num(keep, '%')} of the ceiling.")
    t = s["tuned"]
    if t:
        text.append("The tuned recipe " + (f"reached {num(keep, '%')} of the ceiling ({say.text(t['label'])})."
                                           if t["label"] is not None else
                                           f"reached {num(keep, '%')} of the ceiling in none of its configurations."))
    return " ".join(text) if text else "The per-image costs were not recorded in this run."


def _cpu_setting(d: Fact) -> str:
    """The setting the loader's CPU per image (``cpu_ms_per_image``) was measured in, in words: the default recipe's
    fastest setting, named by its format and worker count (never "the best setting", which is the highest share
    of its own ceiling, over every recipe)."""
    s = d.setting
    if s.get("workers") is None:
        return "in the default recipe's fastest setting"
    name = LABELS.get(str(s.get("format")), say.text(s.get("format")))
    where = "in a worker of" if s["workers"] else "in the main process of"
    return f"{where} the default recipe's fastest setting ({name}, {say.setting('num_workers', s['workers'])})"


def _against_prediction(first: int, need: float, tried: list[int]) -> str:
    """Where the first worker count whose data wait fell below the bar stands against the predicted count, on the
    grid of counts actually tried (a count never run cannot be the first)."""
    below = [w for w in tried if need <= w < first]  # tried, at or above the prediction, the wait still above
    if first < need:
        return f"below the prediction ({num(need, '')})"
    if not below:
        return f"the first count tried at or above the prediction ({num(need, '')})"
    return (f"although W={', '.join(str(w) for w in below)}, at or above the prediction ({num(need, '')}), "
            "did not bring the wait below it")


def _pct_more(a: float, b: float) -> str:

    return f"{pct(a / b - 1)} more" if a >= b else f"{pct(1 - a / b)} less"


def cpu_note(facts) -> str:
    """What the CPU columns show in this run, in numbers."""
    c = facts_of(facts).data.get("cpu_use")
    if not c:
        return ""
    if c["old"]:
        return ("This older result records CPU use only as psutil's system-wide percentage, averaged over the whole "
                "scenario.")
    a, b, cores = c["fewest"], c["most"], c["cores"]
    return (f"At W={int(a['workers'])} the training process kept {num(a['main_cores'], '')} cores busy "
            f"({int(a['main_threads'])} intra-op threads) and the machine {num(a['cpu_busy_cores'], '')}"
            + (f" of its {cores}" if cores else "") +
            f"; at W={int(b['workers'])} the workers used {num(b['worker_cores'], '')} cores, the training process "
            f"{num(b['main_cores'], '')} and the machine {num(b['cpu_busy_cores'], '')}.")


def nvml_note(facts) -> str:
    """NVML against the compute share for the best configuration, over the steady-state steps, with the share of
    the traced step in which the profiler saw kernels run (the measured check of both)."""
    n = facts_of(facts).data.get("nvml")
    if not n:
        return "NVML is not available here (no NVIDIA GPU or no nvidia-ml-py): no GPU utilisation was sampled."
    text = (f"Over the steady-state steps of the best configuration ({say.text(n['label'])}), NVML read "
            f"**{num(n['gpu_util'], '%')}** on average"
            + (f" ({int(round(n['samples']))} samples per run)" if n["samples"] is not None else
               " (an older result: averaged over the whole scenario)")
            + f" while the compute share was {pct(n['au'])}.")
    if n["kernel_share"] is not None:
        near = ("closer to the compute share than to NVML's reading" if n["closer"] == "compute share"
                else "closer to NVML's reading")
        text += (f" The profiler's traced step of the same configuration shows kernels running for "
                 f"{pct(n['kernel_share'])} of the step, {near}.")
    return text


def compute_growth_note(facts) -> str:
    """Which scenarios' compute per step grew against the ceiling (beyond the runs' spread; their compute and busy
    cores are the scenario table's), whether the load sweep measured their load, and what the tuned recipe changes
    at once, with the runs that would separate its changes."""
    facts = facts_of(facts)
    g = facts.data.get("compute_growth") or {}
    ceiling = say.value(facts.get("compute.ceiling"), runs=False)
    of = f" of {g['cores']}" if g.get("cores") else ""
    if not g.get("grown"):
        return f"No scenario of the default recipe computed a step measurably slower than the ceiling ({ceiling})."
    busy = [r["busy_cores"] for r in g["grown"] if r["busy_cores"] is not None]
    at = (f", at {span(min(busy), max(busy), '')} busy cores{of}" if len(busy) > 1 and min(busy) != max(busy) else
          f", at {num(busy[0], '')} busy cores{of}" if busy else "")
    where = {}   # each format's worker counts, in the order they ran
    for r in g["grown"]:
        st = facts[r["key"]].setting
        where.setdefault(LABELS.get(str(st["format"]), say.text(st["format"])), []).append(str(st["workers"]))
    text = [f"Compute per step grew beyond the ceiling's {ceiling} in "
            + say.and_list([f"{name} at W={say.and_list(ws)}" for name, ws in where.items()])
            + f"{at} (values in the scenario table)."]
    s = g.get("sweep")
    if s:
        level = f"{s['busy']} busy processes, {num(s['busy_cores'], '')} busy cores{of}"
        if not s["matched"]:
            text.append(f"The load sweep's lightest load ({level}; compute {num(s['compute'], 'ms')}) kept more cores "
                        f"busy than any of them (at most {num(s['top'], '')}): the sweep did not measure their load, "
                        "so their growth has no isolated cause in this run.")
        else:
            text.append(f"They kept as many cores busy as the load sweep's lightest load ({level}), at which compute "
                        f"per step was {num(s['compute'], 'ms')}.")
    t = g.get("tuned")
    if t:
        changes = ["uint8 batches", f"normalisation {say.where('normalise', facts.data.get('device') or 'cpu')}"]
        if t["nice"]:
            changes.append(f"workers at nice {WORKER_NICE}")
        if t["reserve"]:
            changes.append("workers kept off the reserved cores")
        line = f"The tuned recipe computed a step in {num(t['compute'], 'ms')} ({say.text(t['label'])}"
        line += f"; the default recipe {num(t['default_compute'], 'ms')})" if t["default_compute"] is not None else ")"
        if len(changes) > 2:
            line += (f", but it changes {len(changes)} things at once ({', '.join(changes)}): the runs that would tell "
                     "which kept compute down (the default recipe with its workers treated the same way, the tuned "
                     "recipe with untreated workers) were not part of this run.")
        else:
            line += "; its workers were not treated, so only the batch format and where it is normalised differ."
        text.append(line)
    return " ".join(text)


def reference_runs_table(host: str | None = None) -> pd.DataFrame:
    """The best configuration's share of its own ceiling in every committed run of this chapter on the reference
    host (the reference run and the runs under ``repeats/``), as each run's facts hold it (``best_vs_ceiling``,
    ``best_keeps_up``): one row per run."""
    from datajourney.core import results

    host = host or results.DEFAULT_REFERENCE_HOST
    paths = [results.REFERENCE_DIR / host / f"{CHAPTER}.json"]
    rep = results.REFERENCE_DIR / host / "repeats"
    if rep.is_dir():
        paths += sorted(rep.glob(f"{CHAPTER}*.json"))
    rows = []
    for path in paths:
        if not path.is_file():
            continue
        r = results.Result.load(path)
        facts = facts_of(r)
        b, keeps = facts["best_vs_ceiling"], facts.get("best_keeps_up")
        s = b.setting
        lo, hi = b.spread or (b.number, b.number)
        rows.append({"run": r.run_id or path.stem, "kind": "repeat" if path.parent == rep else
                     "reference run", "best configuration": scenario_label(s["format"], s["workers"], s["variant"]),
                     "ceiling": s["ceiling"], "% of ceiling (mean)": b.number,
                     "min–max over its runs (%)": span(lo, hi), "runs": b.n,
                     f"every run ≥ {num(100 * KEEP_UP, '%')}": "yes" if keeps is not None and keeps.value == "every run"
                     else "no"})
    return pd.DataFrame(rows)


def ratio_note(facts) -> str:
    """What the two format ratios of the chapter divide, so that they are never read as one: the key metric's
    data-wait ratio and the images/s ratio of the shards against the files at W=0, each as the analysis computed
    it."""
    facts = facts_of(facts)
    w = (facts.data.get("key_metrics") or {}).get(analysis.WAIT_RATIO)
    c = facts.get("mds_vs_imagefolder_w0")
    if w is None or w[0] is None or c is None or c.number is None:
        return ""
    return (f"The row *{analysis.WAIT_RATIO}* is the source's **data-wait** ratio, ImageFolder's wait ÷ MDS's "
            f"({times(w[0])} here); the comparison of the shards with the files without workers divides "
            f"**images/s**, MDS ÷ ImageFolder ({times(c.number)} here).")


def load_note(facts) -> str:
    """Notes on modes of the load sweep that could not run here."""
    notes = facts_of(facts).data.get("load_notes") or {}
    return " ".join(f"{say.text(MODE_LABELS.get(k, k).capitalize())}: {say.text(v)}." for k, v in notes.items())


def trace_files_note(facts, *dirs) -> str:
    """Where this run's profiler traces are: each trace file found under one of ``dirs`` (the run's directory, and
    for a rendered page the run directory its result came from), as a path to open; else that they are not on this
    machine (a committed reference keeps its result file only); nothing where no trace was recorded."""
    files = facts_of(facts).data.get("trace_files") or {}
    if not files:
        return ""   # no trace recorded: the timeline note says so
    found = list(dict.fromkeys(_shown_path(Path(d) / f) for f in files.values() for d in dirs
                               if d and (Path(d) / f).is_file()))
    if not found:
        return ("This result's trace files are not on this machine (a committed reference keeps its result file "
                "only): a run of yours writes them to its run directory, in traces/.")
    return "Trace files of this run: " + ", ".join(say.code(f) for f in found) + "."


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it (a run's folder in the checkout)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def timeline_note(facts) -> str:
    """What the traced steps show: GPU busy time within the step, the wait, and for the forward pass how long the
    main thread took to issue it against how long the GPU took to run it."""
    traces = facts_of(facts).data.get("traces")
    if not traces:
        return "No profiler trace was recorded in this run (profile = False)."
    out = []
    for t in traces:
        step, busy = t["step"], t["busy"]
        s = f"**{say.text(t['label'])}**: {num(step, 'ms')}"
        if busy > 0:
            s += f", GPU kernels {num(busy, 'ms')} ({pct(busy / step)} of the step)"
        if t["wait"] is not None:
            s += f", {num(t['wait'], 'ms')} waiting for the batch"
        fw = t["forward"]
        if fw:
            s += (f", the forward pass issued in {num(fw['cpu'], 'ms')} while the GPU was busy {num(fw['busy'], 'ms')} "
                  f"of the {num(fw['span'], 'ms')} it spanned")
        out.append(s)
    return "Each traced step, under the profiler: " + "; ".join(out) + "."


def key_metrics(res) -> dict:
    """Metric name (as published) -> (mean, std) of this result (std only from three runs or more), as the analysis
    computed them (``key_metrics``)."""
    return {k: tuple(v) for k, v in (facts_of(res).data.get("key_metrics") or {}).items()}


# --------------------------------------------------------------------------- tables for the notebook


def scenario_table(res, part: str = "main") -> pd.DataFrame:
    """The scenarios as the chapter shows them, means over runs. ``part="main"``: the columns the
    prose uses (data wait, compute, step, AU, images/s, share of the ceiling with its min–max, the
    machine's busy cores); ``part="details"``: the rest (runs, copy, data-wait share, min–max of
    images/s, NVML, CPU of the training process and of the workers, page cache at the start)."""
    st = scenario_stats(res)

    def rng(c):
        if f"{c}_min" not in st:
            return ["—"] * len(st)
        return [span(a, b) for a, b in zip(st[f"{c}_min"], st[f"{c}_max"], strict=True)]

    if part == "main":
        out = pd.DataFrame({
            "scenario": st["label"], "data wait (ms)": st["DATALOADER_WAIT"], "compute (ms)": st["compute_ms"],
            "step (ms)": st["step_ms"], "compute share (%)": 100 * st["au"], "images/s": st["images_per_s"],
            "% of ceiling": st["pct_of_ceiling"], "min–max (%)": rng("pct_of_ceiling"),
            "ceiling": st["ceiling"].map({"eager": "eager", "graphed": "CUDA graph"})})
        if "cpu_busy_cores" in st:
            out["busy cores"] = st["cpu_busy_cores"]
        return out
    out = pd.DataFrame({
        "scenario": st["label"], "runs": st["runs"], "copy to GPU (ms)": st["H2D_TRANSFER"],
        "data-wait share (%)": 100 * st["wait_share"], "images/s min–max": rng("images_per_s"),
        "NVML GPU util (%)": st["gpu_util"]})
    if "main_cores" in st:
        out["training process (cores)"] = st["main_cores"]
        out["workers (cores)"] = st["worker_cores"]
    else:
        out["CPU util (%)"] = st["cpu_util"]
    out["cached at start (%)"] = 100 * st["resident_at_start"]
    return out


#: How the scenario table's caption names each ceiling.
CAPTION_CEILINGS = {"eager": "eager ceiling", "graphed": "graphed ceiling"}


def ceiling_caption(facts) -> str:
    """The scenario table's caption: which ceiling each share is taken of, with each ceiling's numbers."""
    ceilings = facts_of(facts).data.get("ceilings") or {}
    parts = [f"{name} {num(c['images_per_s'], 'images/s')}, compute {num(c['compute_ms'], 'ms')}, {c['runs']} runs"
             for kind, name in CAPTION_CEILINGS.items() if (c := ceilings.get(kind))]
    return ("Scenarios, means over runs; each share is of the ceiling of its own step (the eager step, or the CUDA "
            "graph fed from GPU memory), min–max over the runs; busy cores of the machine (" + "; ".join(parts) + ")")


def graph_note(facts) -> str:
    """The graphed step against the eager one: the two ceilings (what launching kernels one by one
    costs with the CPU idle), and for each loader run both ways what the graph changed."""
    facts = facts_of(facts)
    why = _graph_missing(facts)
    if why:
        return f"The training step replayed from a CUDA graph {why}."
    ceilings, pairs = facts.data.get("ceilings") or {}, facts.data.get("graph_pairs") or []
    g, e = ceilings.get("graphed"), ceilings.get("eager")
    out = []
    if g and e:
        word = choose(g["vs_eager"], "slower than", "faster than", "level with")
        runs = _range(g["compute_low"], g["compute_high"], g["compute_runs"], "ms")
        out.append(f"Fed from GPU memory with the CPU otherwise idle, the graphed step computed in "
                   f"{num(g['compute_ms'], 'ms')} ({runs}), {word} the eager step's {num(e['compute_ms'], 'ms')}.")
    out += [_graph_effect(p) for p in pairs]
    if not pairs:
        out.append("No loader ran both with the eager tuned step and with the graphed step, so the graph's effect "
                   "under the same workers is not measured here.")
    return " ".join(out)


def reader_table(res) -> pd.DataFrame:
    """Per-sample costs of each reader (one process), one row per stage: for each format the
    median and p90 per sample (an older result without medians: the mean), and the KiB the disk
    delivered per sample on the cold read."""
    if "readers" not in res.tables or res.table("readers").empty:
        return pd.DataFrame()
    t = res.table("readers")
    centre = "median_ms" if "median_ms" in t and t["median_ms"].notna().any() else "ms"
    word = "median" if centre == "median_ms" else "mean"
    out = pd.DataFrame({"stage": list(dict.fromkeys(t["stage"]))})
    for fmt in dict.fromkeys(t["format"]):
        part = t[t["format"] == fmt].set_index("stage")
        name = LABELS.get(fmt, fmt)
        # a stage with no per-sample distribution (the iterator's overhead) shows its mean
        c = part[centre].where(part[centre].notna(), part["ms"]) if centre != "ms" else part["ms"]
        out[f"{name}: {word} (ms)"] = out["stage"].map(c)
        out[f"{name}: p90 (ms)"] = out["stage"].map(part["p90_ms"])
        if "disk_kb" in part:
            out[f"{name}: disk KiB per sample"] = out["stage"].map(part["disk_kb"])
    return out


def reader_note(facts) -> str:
    """How to read the per-sample table: which statistic it shows, and where a few slow samples
    pull a mean above the p90 (an older result without medians)."""
    r = facts_of(facts).data.get("readers")
    if not r:
        return ""
    if r["medians"]:
        return ("Medians and p90 over the samples; the iterator's overhead is a mean (the iterator's wall time per "
                "sample minus its stages).")
    text = ("This result records the mean and the p90 of each stage, not the median; the iterator's overhead is "
            "a mean (wall time per sample minus the stages).")
    if r["skewed"]:
        parts = [f"{say.text(LABELS.get(x['format'], x['format']))} {say.text(x['stage'])} (mean {num(x['ms'], 'ms')}, "
                 f"p90 {num(x['p90_ms'], 'ms')})" for x in r["skewed"]]
        text += (" Where the mean lies above the p90, a few samples slower than nine in ten pulled it up: "
                 + "; ".join(parts) + ". Compare those rows by their p90.")
    return text


def ipc_note(run_dir=None, reference_host: str | None = None) -> str:
    """Where one worker meets none: a pointer to chapter 8's measurement of moving a batch between
    processes, with the cost it measured (this run's chapter 8 if present, else the reference's)."""
    from datajourney.chapters.common import ipc_crossref

    return ipc_crossref(run_dir, reference_host)


def stage_rows(res) -> pd.DataFrame:
    """Scenario means of the runs whose loader stages say most about W=0 against W=1."""
    st = scenario_stats(res)
    if "read_ms" not in st:
        return pd.DataFrame()
    keep = st["workers"].isin([0, 1]) | (st["variant"] == "tuned")
    return st[keep].reset_index(drop=True)


def paper_exercise(facts) -> str:
    """AU and the compute share worked out by hand for the default recipe's best scenario (the plain DataLoader):
    AU from its images/s and the ceiling's, the compute share from its compute phases and its step, and which of
    the two the bar applies to, with the direction against the bar as the analysis found it (``default_best``); the
    answers folded."""
    d = facts_of(facts).data
    row, ceil = d.get("default_best"), (d.get("ceilings") or {}).get("eager")
    if not row or not ceil:
        return "The exercise on paper needs a measured ceiling and a default-recipe scenario; this run has none."
    c_ips, ips, step, comp = ceil["images_per_s"], row["images_per_s"], row["step_ms"], row["compute_ms"]
    au, share = row["au"], row["share"]
    intro = (f"**Work it out.** The ceiling fed **{num(c_ips)} images/s**. {say.text(row['label'])}, the best of the "
             f"default recipe, fed **{num(ips)} images/s**; its steps took **{num(step, 'ms')}** on average, of which "
             f"the compute phases took **{num(comp, 'ms')}**. AU (steps × G ÷ wall time) is here the images/s ÷ the "
             "ceiling's: every step carries the same batch.")
    questions = ["What is this configuration's AU?",
                 "What is its compute share (compute ÷ the step's wall time)?",
                 f"MLPerf Storage's bar is an AU of {pct(KEEP_UP)}. Which of the two numbers is held to it, and does "
                 "this configuration reach it?"]
    answers = [f"{num(ips)} ÷ {num(c_ips)} = **{pct(au)}**.",
               f"{num(comp, 'ms')} ÷ {num(step, 'ms')} = **{pct(share)}**.",
               f"AU: {pct(au)} {'reaches' if row['au_reaches'] else 'falls short of'} the {pct(KEEP_UP)} bar. The "
               f"compute share ({pct(share)}, {'above' if row['share_reaches'] else 'below'} the bar) counts the fed "
               "loop's own compute, which can grow when loader processes share the CPU; AU counts the ceiling's G, "
               "so only AU is held to the bar."]
    return on_paper(intro, questions, answers)


def takeaways(facts) -> str:
    """The chapter's conclusions for a training job, each computed from this run."""
    facts = facts_of(facts)
    t = facts.data.get("takeaways") or {}
    keep = t.get("keep", 100 * KEEP_UP)
    out = []
    for r in t.get("formats", []):
        out.append(f"{LABELS.get(r['format'], r['format'])}, default recipe: " + (
            f"the fewest workers that reached {num(keep, '%')} of the ceiling here: **W={r['reached']}**."
            if r["reached"] is not None else f"no worker count tried reached {num(keep, '%')} of the ceiling (best "
                                             f"{num(r['best'], '%')}, at W={r['best_workers']})."))
    fmt = facts.advice_for("image.storage_format")
    if fmt is not None:   # the format question is decided once, by the storage-format comparison: repeated here
        out.append(say.advice(fmt, facts))
    else:
        out.append("Which format to store the images in is not decided in this run: the storage-format comparison, "
                   "which answers it, " + ("has no verdict here (see *Storage formats, measured*)."
                                           if _formats_data(facts) else "did not run."))
    tuned = t.get("tuned")
    if tuned:
        out.append(f"The tuned recipe (uint8 batches normalised {_on(facts)}{_treated(facts).rstrip(',')})"
                   f" reached {num(tuned['pct'], '%')} of the ceiling at best ({say.text(tuned['label'])}).")
    g = t.get("graphed")
    if g:
        out.append(
            f"With its step replayed from a CUDA graph, the same loader reached {num(g['pct'], '%')} "
            f"of the graphed ceiling at best ({say.text(g['label'])}): "
            + (f"at least {num(keep, '%')} in every run." if g["every"] else f"below {num(keep, '%')} in at least one "
                                                                               "run."))
    elif tuned and _graph_missing(facts):
        out.append(f"The step replayed from a CUDA graph {_graph_missing(facts)}.")
    return "\n".join(f"* {x}" for x in out)


# --------------------------------------------------------------------------- the opening


loader_snippet = analysis.loader_snippet


# --------------------------------------------------------------------------- facts, worded


def _setting_label(f: Fact) -> str:
    """The scenario a fact belongs to, in words, its format escaped (it comes from the result)."""
    s = f.setting
    fmt = str(s.get("format"))
    name = LABELS[fmt] if fmt in LABELS else say.text(fmt)
    variant = str(s.get("variant", "default"))
    return f"{name}, W={int(s['workers'])}" + ("" if variant == "default" else f", {say.text(variant)}")


def _rates(a: Fact, b: Fact) -> str:
    return f"{say.value(a, runs=False)} against {say.value(b, runs=False)}"


def finding_wait_w0(facts: Facts) -> Finding | None:
    f = facts.get("wait_w0")
    if f is None:
        return None
    w0 = int(f.setting["workers"])
    who = "Without workers" if w0 == 0 else f"With the fewest workers tried (W={w0})"
    text = (f"{who} (ImageFolder, one file per image), each step waited **{say.value(f)}** for data, "
            f"{say.comparison(facts['wait_vs_compute_w0'], facts)} ({say.value(facts['compute_w0'], runs=False)}).")
    return Finding("wait_w0", text, f.number, "ms", published=f.published, interval=f.spread)


def finding_mds_vs_imagefolder_w0(facts: Facts) -> Finding | None:
    c = facts.get("mds_vs_imagefolder_w0")
    if c is None:
        return None
    resident = c.setting.get("resident")
    cache = ("" if resident is None else ", read cold," if resident <= analysis.COLD_RESIDENT
             else f", with up to {pct(resident)} of the files cached as the runs started,")
    text = (f"At W=0{cache} MDS shards ran **{say.comparison(c, facts)}** "
            f"({_rates(facts[c.of], facts[c.basis])}).")
    return Finding("mds_vs_imagefolder_w0", text, c.number, "×")


def finding_one_worker(facts: Facts) -> Finding | None:
    c = facts.get("one_worker")
    if c is None:
        return None
    text = f"One ImageFolder worker ran **{say.comparison(c, facts)}** ({_rates(facts[c.of], facts[c.basis])})."
    return Finding("one_worker", text, c.number, "×")


def finding_workers4(facts: Facts) -> Finding | None:
    f = facts.get("workers4")
    if f is None:
        return None
    c = facts.get("workers4_vs_w0")
    text = (f"With 4 workers and the default recipe, ImageFolder fed **{say.value(f)}**"
            + (f", {say.comparison(c, facts)}" if c is not None else "") + ".")
    return Finding("workers4", text, f.number, "images/s", published=f.published, interval=f.spread)


def finding_compute_under_load(facts: Facts) -> Finding | None:
    f = facts.get("compute_under_load")
    if f is None:
        return None
    s = f.setting
    if not s.get("sweep"):
        text = (f"Compute per step at W={s['workers']} took {say.value(f)}, "
                f"{say.comparison(facts['compute_growth'], facts)} (ImageFolder).")
        return Finding("compute_under_load", text, f.number, "ms", interval=f.spread)
    step = ("the GPU step" if facts.data.get("device") == "cuda"
            else "the step (on a CPU, the model competes for the cores)")
    text = (f"With {s['busy']} busy processes doing the loader's work on {s['cores']} cores, {step} took "
            f"**{say.value(f)}**, {say.comparison(facts['contention'], facts)}.")
    return Finding("compute_under_load", text, f.number, "ms", interval=f.spread)


def finding_best_vs_ceiling(facts: Facts) -> Finding:
    f = facts["best_vs_ceiling"]
    kind = str(f.setting.get("ceiling", "eager"))
    name = CEILING_NAMES.get(kind, CEILING_NAMES["eager"])[0]
    v = facts.get("best_keeps_up")
    keep = fx_num(v.setting["keep_up"], "%") if v is not None else ""
    verdict = {"every run": f"it keeps up, at least {keep} of its ceiling in "
                            + ("every run" if v is not None and v.setting.get("runs", 1) > 1 else "its one run"),
               "on average": f"on average it keeps up ({keep} of its ceiling), but not in every run",
               "short": f"it stays below {keep} of its ceiling"}.get(str(v.value) if v is not None else "", "")
    if "best_vs_ceiling.flagged" in facts:
        return Finding("best_vs_ceiling", over_ceiling(facts), f.number, "%", interval=f.spread)
    text = (f"The best setting (the highest share of its own ceiling), **{_setting_label(f)}**, fed "
            f"**{say.value(f)}** of {name}'s images/s" + (f": {verdict}." if verdict else "."))
    return Finding("best_vs_ceiling", text, f.number, "%", interval=f.spread)


def over_ceiling(facts: Facts) -> str:
    """The words for a best setting that fed more than its own ceiling: a measurement problem, not an outcome."""
    f = facts["best_vs_ceiling"]
    return (f"**Flagged: a measurement problem.** The best setting, {_setting_label(f)}, fed {say.value(f)} of its "
            f"own ceiling's images/s. A ceiling that is exceeded is not a ceiling: the ceiling step (data already in "
            f"memory) measured slower than the whole pipeline, so this run's share of the ceiling, and whether the "
            f"loader keeps up, are not findings. Run the chapter again (more `runs`) before reading them.")


def findings(facts) -> list[Finding]:
    """The chapter's key results (3-6), worded from its facts (a result is analysed first)."""
    facts = facts_of(facts)
    out = [fn(facts) for fn in (finding_wait_w0, finding_mds_vs_imagefolder_w0, finding_one_worker,
                                finding_workers4, finding_compute_under_load, finding_best_vs_ceiling)]
    return [f for f in out if f is not None][:6]


# --------------------------------------------------------------------------- the opening
def _uint8_snippet(nice: bool, device: str, workers: int, batch_size: int | None) -> str:
    """Batches as uint8, normalised on ``device`` with the loader's mean and std (and nice workers), with the
    workers and batch size the run measured the recipe at."""
    lines = ["import os", "import torch", "from torch.utils.data import DataLoader", "",
             "# the Dataset returns each decoded image as uint8 (C, H, W):", "# a quarter of float32's bytes"]
    # as the run loaded: pinned batches where the step ran on the GPU (the copy then overlaps, chapter 6)
    args = ", ".join([f"batch_size={batch_size}"] * (batch_size is not None) + [f"num_workers={workers}"]
                     + ["pin_memory=True"] * (device == "cuda"))
    if nice:
        lines += ["loader = DataLoader(", f"    dataset, {args},",
                  f"    worker_init_fn=lambda _: os.nice({WORKER_NICE}),  # workers yield the CPU", ")"]
    else:
        lines += [f"loader = DataLoader(dataset, {args})"]
    to = f'x.to("{device}", non_blocking=True)' if device == "cuda" else "x"
    mean = ", ".join(f"{v:g}" for v in MEAN)
    std = ", ".join(f"{v:g}" for v in STD)
    lines += [f'mean = torch.tensor([{mean}], device="{device}")', "mean = mean.view(1, 3, 1, 1) * 255",
              f'std = torch.tensor([{std}], device="{device}")', "std = std.view(1, 3, 1, 1) * 255",
              "for x, y in loader:", f"    x = ({to}.float() - mean) / std"]
    return "\n".join(lines)


GRAPH_SNIPPET = '''import torch

# the whole step captured once as a CUDA graph (PyTorch's recipe)
static_x = torch.empty(64, 3, 224, 224, device="cuda")
static_y = torch.empty(64, dtype=torch.long, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm up before the capture
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(static_x), static_y).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    loss = loss_fn(model(static_x), static_y)
    loss.backward()
    opt.step()
for x, y in loader:  # each step: copy the batch in, replay
    static_x.copy_(x, non_blocking=True)
    static_y.copy_(y, non_blocking=True)
    graph.replay()'''


def _opening_findings(facts: Facts) -> list[Finding]:
    """The data wait without workers and what 4 workers fed with the default recipe (the published settings), and,
    where no end-to-end recipe action states it, how close the best setting came to its own ceiling (one number)."""
    out = []
    f = facts.get("wait_w0")
    if f is not None:
        w0 = int(f.setting["workers"])
        who = "Without workers" if w0 == 0 else f"With {w0} worker{'s' if w0 != 1 else ''}"
        out.append(Finding("wait_w0", f"{who}, each step waited **{say.value(f, runs=False)}** for data, "
                                      f"{say.comparison(facts['wait_vs_compute_w0'], facts)}.",
                           f.number, "ms", published=f.published, interval=f.spread))
    f4 = facts.get("workers4")
    if f4 is not None and "workers4_vs_w0" in facts:
        out.append(Finding("workers4", f"With 4 workers and the default recipe, ImageFolder fed "
                                       f"**{say.value(f4, runs=False)}**, "
                                       f"{say.comparison(facts['workers4_vs_w0'], facts)}.", f4.number, "images/s",
                           published=f4.published, interval=f4.spread))
    b = facts["best_vs_ceiling"]
    if "best_vs_ceiling.flagged" in facts:
        out.append(Finding("best_vs_ceiling", over_ceiling(facts), b.number, "%"))
    elif _action_recipe(facts) is None:   # the recipe's action states its share of the ceiling itself
        name = CEILING_NAMES.get(str(b.setting.get("ceiling", "eager")), CEILING_NAMES["eager"])[0]
        out.append(Finding("best_vs_ceiling", f"The best setting, {_setting_label(b)}, fed "
                                              f"**{say.value(b, runs=False)}** of {name}'s images/s.", b.number, "%"))
    return out[:3]


def _action_workers(facts: Facts) -> Action | None:
    a = facts.advice_for("image.num_workers")
    if a is None:
        return None
    d = facts.get("cpu_ms_per_image")
    tail = (f" The loader's work cost {say.value(d)} of CPU per image {_cpu_setting(d)}: D in chapter 4's model."
            if d is not None else "")
    return Action(say.advice(a, facts) + tail, a.snippet)


def _recipe_parts(facts: Facts) -> str:
    """What each part of the combined recipe (the ``recipe`` fact) gained, each against the same loader without it;
    "" where the recipe is the default recipe or was not decided."""
    r = facts.get("recipe")
    if recipe_sentence(facts) is None or r.setting["variant"] == "default":
        return ""
    loader = _loader_words(r.setting)
    what = {"uint8": f"uint8 batches normalised {_on(facts)}{_treated(facts)}",
            "graphs": "the step replayed from CUDA graphs"}
    parts = [f"{what[part]} ran {_against(facts, c, part, loader)}"
             for part, c in (("uint8", facts.get("recipe.uint8")), ("graphs", facts.get("recipe.graphs")))
             if c is not None and c.number is not None]
    return (" The recipe's parts, each against the same loader without it: " + "; ".join(parts) + ".") if parts else ""


def _on(facts: Facts) -> str:
    """Where the uint8 recipe normalised its batches, in words."""
    return say.where("normalise", facts.data.get("device") or "cpu")


def _against(facts: Facts, c: Fact, part: str, loader: str, same: str = "") -> str:
    """A change to the default recipe (``uint8`` batches, CUDA ``graphs``) against the same loader without it."""
    base = f"the default recipe{same} ({loader})" if part == "uint8" else \
        f"the eager step{same} ({loader}, the tuned recipe)"
    return say.comparison(c, facts, baseline=base)


def _action_recipe(facts: Facts) -> Action | None:
    """The combined setting, where it is more than the default recipe with more workers (the workers' action says
    that), and the code of the whole: the one recipe the first screen gives to paste (the default recipe's worker
    count, a different question, is :func:`default_recipe_note`'s, below it)."""
    text = recipe_sentence(facts)
    r = facts.get("recipe")
    if text is None or r.setting["variant"] == "default":
        return None
    # each part's own gain (against the same loader without it) is worded in its section: an action is one sentence
    s = r.setting
    w = int(s["workers"])
    batch = (facts.data.get("image_workload") or {}).get("batch_size")
    remedy = str(facts.data.get("tuned_remedy") or "")
    snippet = _uint8_snippet("nice" in remedy, facts.data.get("device") or "cpu", w, batch)
    if s["variant"] == "graphed":   # the graph's loop normalises each uint8 batch into its static input
        loader_lines = snippet.splitlines()[:-2]
        graph = GRAPH_SNIPPET.splitlines()[1:]
        normalised = 'static_x.copy_((x.to("cuda", non_blocking=True).float() - mean) / std)'
        snippet = "\n".join(loader_lines + graph).replace("static_x.copy_(x, non_blocking=True)", normalised)
    return Action(text, snippet)


def default_recipe_note(facts) -> str:
    """Under the opening: the default recipe's worker count where the end-to-end recipe is its one action (a
    different question, its workload naming the recipe, worded as everywhere else); where the run has no such
    recipe, the parts (uint8 batches, CUDA graphs) whose defaults it keeps, which the first screen leaves out."""
    facts = facts_of(facts)
    if _action_recipe(facts) is None:   # the opening gives the worker count: here, the parts it keeps as they are
        kept = [a.text for key, a in (("uint8_gain", _action_uint8(facts)), ("graph_gain", _action_graphs(facts)))
                if a is not None and not _changes(facts, key)]
        return " ".join(kept)
    a = facts.advice_for("image.num_workers")
    return "" if a is None else f"**Keeping the default recipe?** {say.advice(a, facts)}"


def _treated(facts: Facts) -> str:
    """How the tuned recipe treated its workers, in words ("" where it did not)."""
    remedy = str(facts.data.get("tuned_remedy") or "")
    out = ([f"workers at nice {WORKER_NICE}"] if "nice" in remedy else []) + (
        ["workers kept off the reserved cores"] if "reserve" in remedy else [])
    return f", {' and '.join(out)}," if out else ""


def _action_uint8(facts: Facts) -> Action | None:
    c = facts.get("uint8_gain")
    if c is None or c.number is None:
        return None
    nice = "nice" in str(facts.data.get("tuned_remedy") or "")
    how = f", workers at nice {WORKER_NICE}" if nice else ""
    loader = _loader_words(facts[c.of].setting)
    vs = _against(facts, c, "uint8", loader, " with the same loader")
    if _changes(facts, "uint8_gain"):
        batch = (facts.data.get("image_workload") or {}).get("batch_size")
        return Action(f"For {loader}, send uint8 batches and normalise them {_on(facts)}{how}: {vs}.",
                      _uint8_snippet(nice, facts.data.get("device") or "cpu", int(facts[c.of].setting["workers"]),
                                     batch))
    return Action(f"For {loader}, keep normalising in the workers: uint8 batches normalised {_on(facts)}{how} "
                  f"ran {vs}.")


def _loader_words(s: dict) -> str:
    """The loader a scenario ran, in words: "ImageFolder with `num_workers=8`"."""
    return f"{LABELS.get(str(s['format']), say.text(s['format']))} with {say.setting('num_workers', int(s['workers']))}"


def _action_graphs(facts: Facts) -> Action | None:
    c = facts.get("graph_gain")
    if c is None or c.number is None:
        return None
    vs = _against(facts, c, "graphs", _loader_words(facts[c.of].setting), " with the same loader")
    if _changes(facts, "graph_gain"):
        return Action(f"Replay the training step from CUDA graphs: it ran {vs}.", GRAPH_SNIPPET)
    return Action(f"Keep the eager step: replayed from CUDA graphs it ran {vs}.")


def opening(facts) -> Opening:
    """What the chapter opens with: the data wait without workers and what 4 workers fed with the default recipe,
    one sentence each; then one recipe to paste, the combined end-to-end setting that fed the most of its ceiling
    (``recipe``: format, workers, uint8 batches, worker treatment, CUDA graphs; its share of the ceiling said once,
    in it), the default recipe's worker count below the opening as the different question it is; or, where the
    run has no such setting, the default recipe's worker count, the uint8 recipe and CUDA graphs on their own (and
    the best setting's share of its ceiling among the findings), each worded from the comparison this run measured
    and naming its loader and its baseline."""
    facts = facts_of(facts)
    recipe = _action_recipe(facts)
    # the combined setting holds the workers, the uint8 recipe and the graphed step, each part's gain with it: one
    # recipe to paste, the default recipe's worker count folded under it; without it, each part on its own
    # a part whose measured gain keeps the default asks nothing of the reader: its section says it, the first
    # screen keeps what to change
    parts = [a for key, a in (("uint8_gain", _action_uint8(facts)), ("graph_gain", _action_graphs(facts)))
             if a is not None and _changes(facts, key)]
    actions = [recipe] if recipe is not None else [_action_workers(facts), *parts]
    return Opening(_opening_findings(facts), [a for a in actions if a is not None][:3])


def _changes(facts: Facts, key: str) -> bool:
    """Whether the comparison ``key`` advises a change: its option ran faster, beyond level."""
    c = facts.get(key)
    return c is not None and c.number is not None and c.number > 1 and not c.level


def device_note(facts) -> str:
    """Where this run ran and with which model, and what did not run here."""
    facts = facts_of(facts)
    d = facts.data
    text = f"What ran: {say.text(d['workload'])}, {int(d.get('cores') or 0)} logical cores."
    if d.get("device") != "cuda":
        text += (" Without a GPU these are CPU timings of the model that ran: they exercise the same code; the GPU "
                 "numbers are the reference run's, in the comparison table below.")
    if d.get("mds_note"):
        text += f"\n\n{say.skipped('The MDS half', d['mds_note'])}"
    return text


# --------------------------------------------------------------------------- storage formats
#: How each shuffle scope reads in the table.
SHUFFLE_WORDS = {"global": "the whole set", "buffer": "shards in random order, samples within a buffer",
                 "shard": "shards in random order, samples within their shard"}


def _formats_data(facts: Facts) -> dict | None:
    return facts.data.get("formats") if "formats" in facts.data else None


def _format_workers(facts: Facts) -> set[int]:
    """The worker counts at which the formats' best images/s were measured (one when one count ran)."""
    data = _formats_data(facts) or {"rows": []}
    return {int(f.setting["workers"]) for r in data["rows"] for cache in ("cold", "warm")
            if (f := facts.get(analysis.format_key(r["format"], cache))) is not None and f.number is not None}


def format_caption(res) -> str:
    """The format table's caption: the best worker count once where it is the same for every format, else each
    cell's in brackets."""
    w = _format_workers(facts_of(res))
    at = (f"images/s at each format's best worker count, {next(iter(w))} for every format" if len(w) == 1 else
          "images/s at the best worker count, in brackets")
    return f"The same images in each storage format ({at}; means over runs)"


def format_table(res) -> pd.DataFrame:
    """One row per format measured: its conversion, its size on disk, its best images/s cold and warm (and the
    share of the ceiling), the first batch, the CPU per image, its shuffle and its access by index; the worker
    count of each rate in brackets where the formats ran at several (:func:`format_caption` says it once)."""
    facts = facts_of(res)
    data = _formats_data(facts)
    if not data:
        return pd.DataFrame()
    several = len(_format_workers(facts)) > 1
    rows = []
    for r in data["rows"]:
        fmt = r["format"]
        row = {"format": LABELS.get(fmt, fmt), "library": r["library"],
               "conversion (s)": r["convert_s"] if fmt != "imagefolder" else "none",
               "on disk (MiB)": r["bytes"] / 2**20, "× the images": r["bytes"] / r["source_bytes"]}
        for cache in ("cold", "warm"):
            f = facts.get(analysis.format_key(fmt, cache))
            c = facts.get(f"{analysis.format_key(fmt, cache)}.vs_ceiling")
            have = f is not None and f.number is not None
            if several:
                row[f"images/s, {cache} (W)"] = (f"{fx_num(f.number, 'images/s', with_unit=False)} "
                                                 f"({f.setting['workers']})" if have else "–")
            else:
                row[f"images/s, {cache}"] = f.number if have else np.nan
            if cache == "cold":
                row["% of ceiling, cold"] = 100 * c.number if c is not None and c.number is not None else np.nan
                row["first batch, cold (ms)"] = r.get("cold_first_batch_ms", np.nan)
        row["CPU per image (ms)"] = r["cpu_ms_per_image"]
        scope = SHUFFLE_WORDS.get(r["shuffle"], r["shuffle"])
        if r["buffer"]:
            scope += f" of {r['buffer']:,}"
        elif r["shuffle"] == "shard":
            scope += f" ({r['per_shard']:,} each)"
        row["shuffle"] = scope
        row["neighbours together (× global)"] = r["cobatch"]
        row["by index, cold / warm (ms)"] = (f"{fx_num(r['access_cold_ms'], 'ms', with_unit=False)} / "
                                             f"{fx_num(r['access_warm_ms'], 'ms', with_unit=False)}"
                                             if r["random_access"] else "not supported")
        rows.append(row)
    return pd.DataFrame(rows)


def format_rates(res) -> pd.DataFrame:
    """The chart's data: each format's best images/s cold and warm, with its runs' range."""
    facts = facts_of(res)
    data = _formats_data(facts)
    rows = []
    for r in data["rows"] if data else []:
        for cache in ("cold", "warm"):
            f = facts.get(analysis.format_key(r["format"], cache))
            if f is None or f.number is None:
                continue
            lo, hi = f.spread or (f.number, f.number)
            rows.append(dict(format=LABELS.get(r["format"], r["format"]), cache=cache, workers=f.setting["workers"],
                             images_per_s=f.number, low=lo, high=hi))
    return pd.DataFrame(rows)


def format_note(res) -> str:
    """The format comparison in words: "not measured in this run" where the result has none; else what was not
    measured and why, the flagged measurements with their cause, and the advice of the declared question."""
    facts = facts_of(res)
    data = _formats_data(facts)
    if not data:
        return ("The storage formats were not measured in this run (its result has no format comparison: "
                "`storage_formats` was empty, or the run predates it).")
    out = []
    for fmt, why in data["notes"].items():
        out.append(f"* **{say.text(LABELS.get(fmt, fmt))}**: {say.text(why)}.")
    for r in data["rows"]:
        fmt = r["format"]
        name = say.text(LABELS.get(fmt, fmt))
        flag = facts.get(f"format.{fmt}.cold_vs_warm.flagged")
        if flag is not None:
            cold, warm = facts[analysis.format_key(fmt, "cold")], facts[analysis.format_key(fmt, "warm")]
            # the flag's own measure (the means apart by more than the runs' spread), worded with both sides' runs:
            # never with "level", which reads the runs' ranges and can hold for the same numbers
            cause = (f"its cold runs started with {pct(flag.setting['resident'])} of its files in the page cache"
                     if flag.value == "not cold" else
                     f"read cold it fed {say.value(cold)} on average, {times(cold.number / warm.number)} the "
                     f"{say.value(warm)} it fed warm, with {pct(flag.setting['resident'])} of its files cached as the "
                     "cold runs started; a cold read cannot outrun a warm one, so the difference is noise or a "
                     "machine that drifted, not the cache")
            out.append(f"* **Flagged: a measurement problem.** {name} read cold is not a finding: {cause}. "
                       "Run the chapter again (more `format_repeats`, `format_steps`) before reading it.")
        for cache in ("cold", "warm"):
            if f"{analysis.format_key(fmt, cache)}.flagged" in facts:
                f = facts[analysis.format_key(fmt, cache)]
                out.append(f"* **Flagged: a measurement problem.** {name} ({cache}) fed {say.value(f, runs=False)}, "
                           f"more than the ceiling ({say.value(facts['format.ceiling'], runs=False)}): a ceiling "
                           "that is exceeded is not one, so this rate is not a finding.")
    a = facts.advice_for("image.storage_format")
    if a is not None:
        out.append(say.advice(a, facts))
        if a.verdict == "change" and a.snippet:
            out.append(f"\n```python\n{a.snippet}\n```")
    else:
        out.append("The format question has no answer in this run: the baseline (one file per image, read cold) "
                   "or every other format was not measured, or was flagged above.")
    return "\n".join(out)

