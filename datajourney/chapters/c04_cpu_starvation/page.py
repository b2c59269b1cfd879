"""Chapter 4's page: what the book says about a CPU-starvation result (findings and notes worded from the facts
of :mod:`~datajourney.chapters.c04_cpu_starvation.analysis`; display tables and charts, the only functions that read
the result's tables) and the what-if chart of the model, with its sliders' JavaScript. The measuring code and the
model itself (:func:`~datajourney.chapters.c04_cpu_starvation.model.predicted_wait_ms`,
:func:`~datajourney.chapters.c04_cpu_starvation.model.predicted_au`) live in
:mod:`datajourney.chapters.c04_cpu_starvation.experiment` and :mod:`~datajourney.chapters.c04_cpu_starvation.model`."""
from __future__ import annotations

import math

import pandas as pd

from datajourney.chapters.c04_cpu_starvation.analysis import (
    CHAPTER,  # noqa: F401  (the page names its chapter)
    COST_TOL,
    MODEL_GAP_FLOOR_MS,
    MODEL_GAP_REL,
    WORK,
    calibrated_step,
)
from datajourney.chapters.c04_cpu_starvation.analysis import analyse as _analyse
from datajourney.chapters.c04_cpu_starvation.model import (
    AU_THRESHOLD,
    predicted_au,
    predicted_wait_ms,
    workers_needed,
)
from datajourney.chapters.common import MIN_RUNS_FOR_RANGE, facts_reader, on_paper
from datajourney.core import charts, phrasing
from datajourney.core import phrasing as fx
from datajourney.core.facts import Facts
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.units import alike, num, pct

facts_of = facts_reader(_analyse)


# --------------------------------------------------------------------------- published figures
def key_metrics(facts) -> dict:
    """The published case as metric -> (mean, std), from a result or its facts."""
    return {k: tuple(v) for k, v in (facts_of(facts).data.get("key_metrics") or {}).items()}


# --------------------------------------------------------------------------- the step's own time
def _limit_words(facts: Facts) -> str:
    """The mean powers against the board's limit, as the highest single step decides it: "below" only where no
    step drew the limit."""
    state = facts.get("power_vs_limit")
    if state is None:
        return ""
    limit, peak = num(state.setting["limit_w"], "W"), _v(facts, "power_peak")
    if state.value == "below":
        return f"; every step below the board's {limit} limit (at most {peak})"
    gap = facts["power_peak"].setting["gap_ms"]
    where = "back-to-back" if gap == 0 else f"after a {gap:g} ms gap"
    return f"; single steps {phrasing.text(state.value)} the board's {limit} limit, up to {peak} {where}"


def drift_clocks(facts) -> str:
    """The clocks and power behind the step's drift (the key result states the drift itself): whether the
    clocks line up with the step times, and what the board's power and NVML's power-cap flag say of why."""
    facts = facts_of(facts)
    if "step_drift" not in facts or facts["step_device"].value != "gpu":
        return ""
    if "clocks_explain" not in facts:
        why = facts.get("nvml_why")
        return f"GPU clocks were not logged ({phrasing.text((why and why.value) or 'NVML not available')})."
    e = facts["clocks_explain"]
    text = (f"NVML's SM clock averaged {_v(facts, 'clock_after_gap')} in the steps after the gap and "
            f"{_v(facts, 'clock_back_to_back')} back-to-back")
    if e.value == "level":
        return text + ": level as well."
    if e.value != "higher clocks":
        return text + (" (" + fx.choose(e.setting["clock"], "higher", "lower", "level") + " after the gap): the "
                       "clocks do not line up with the step times, so they are not the explanation here.")
    text += ", so the steps after an idle gap ran at higher clocks"
    at_limit = facts["power_at_limit"].value == "yes"
    flag = facts["cap_flag_tells"].value if "cap_flag_tells" in facts else None
    if at_limit or flag == "tells":
        text += (f". Back-to-back the board drew {_v(facts, 'power_back_to_back')}"
                 + (f" against its {_v(facts, 'power_limit')} limit" if facts.number("power_limit") else "")
                 + f"; after the gap it drew {_v(facts, 'power_after_gap')}, and "
                 f"{phrasing.text(facts['clock_drift'].label)} was {phrasing.comparison(facts['clock_drift'], facts)}")
        if flag == "tells":
            text += (f", and NVML reported the software power cap in {_v(facts, 'capped_back_to_back')} of the "
                     f"back-to-back {facts['capped_back_to_back'].setting['counted']} against "
                     f"{_v(facts, 'capped_after_gap')} after the gap")
        return text + (": under sustained load the GPU runs at its power limit, its clock comes down to fit, and "
                       "`G` is calibrated there." if at_limit else
                       ": under sustained load the GPU runs power-capped, and `G` is calibrated there.")
    return text + (f" (power {_v(facts, 'power_back_to_back')} back-to-back, {_v(facts, 'power_after_gap')} after the "
                   "gap" + _limit_words(facts)
                   + ("; NVML's power-cap flag was set after the gap as often as back-to-back, so it does not tell the "
                      "two apart)." if flag == "set alike" else
                      "; NVML did not report a power cap in most back-to-back steps)." if flag == "mostly unset" else
                      ")."))


def drift_details(facts) -> str | None:
    """The step's own time in detail (the key result states the conclusion): the clocks behind it, how fast
    the drift trace reached `G`, the step and the clock after every idle gap, and whether NVML's power-cap
    flag tells the states apart on this board. None where the step is a simulated sleep."""
    facts = facts_of(facts)
    if "step_drift" not in facts or facts["step_device"].value != "gpu":
        return None
    clocks = drift_clocks(facts)
    text = ((clocks + " " if clocks else "")
            + f"**In detail.** In the drift trace the first step after the rest took {_v(facts, 'step_first')}")
    if "drift_first_clock" in facts:
        text += f" at {_v(facts, 'drift_first_clock')}, drawing {_v(facts, 'drift_first_power')}"
    reach = facts["drift_reach"]
    near = fx.pct(reach.setting["near"])
    text += (f"; step {int(reach.number)} of the trace was within {near} of `G` ({_v(facts, 'drift_reach_step')}, "
             f"{_v(facts, 'drift_reach_at')} into the trace)" if reach.number is not None else
             f"; no step of the trace came within {near} of `G`")
    if "drift_tail_clock" in facts:
        text += f", and its second half ran at {_v(facts, 'drift_tail_clock')} on average"
    steps = [f for k, f in facts.facts.items() if k.startswith("idle_step.")]
    items = []
    for f in steps:
        gap = f"{f.setting['gap_ms']:g}"
        item = f"{gap} ms gap: {fx.value_in_range(f)}"
        if f"idle_clock.g{gap}" in facts:
            item += f" at {_v(facts, f'idle_clock.g{gap}')}, {_v(facts, f'idle_power.g{gap}')}"
        items.append(item)
    ns = {f.n for f in steps}
    text += (f". The step after each idle gap (mean of {min(ns)}" + ("" if len(ns) == 1 else "+")
             + " repeats, min–max): " + "; ".join(items) + ".")
    trend = facts.get("idle_trend")
    if trend is not None:
        text += {"shorter": " The mean step shortened, or stayed level within the repeats' spread, with every "
                            "longer gap.",
                 "longer": " The mean step lengthened, or stayed level within the repeats' spread, with every "
                           "longer gap."}.get(trend.value, " The step did not change steadily with the gap.")
    if "cap_flag_everywhere" in facts and facts["cap_flag_everywhere"].value == "yes":
        lo, hi = (num(x, "%") for x in facts["cap_flag_share"].spread)
        text += (f" NVML's software power-cap flag was set in {lo if lo == hi else f'{lo} to {hi}'} of the samples "
                 "after every gap, at low power as at the limit: on this board it does not tell a capped step from "
                 "one with headroom, so the evidence is the power draw against the board's limit and the clock.")
    return text


# --------------------------------------------------------------------------- computed sentences further down
def threshold_sentence() -> str:
    return (f"This chapter uses MLPerf Storage's rule: a configuration **keeps up** when AU ≥ "
            f"**{fx.pct(AU_THRESHOLD)}**.")


def step_sentence(facts) -> str:
    """What the training step is, how it was calibrated, and what NVML sampled."""
    facts = facts_of(facts)
    kind = phrasing.text(facts["step_kind"].value)
    if facts["step_device"].value != "gpu":
        return (f"Training step on this machine: **{kind}** of about {_v(facts, 'step_g')} (calibrated "
                "back-to-back). The GPU-side numbers below are therefore a simulation; the reference run's are real.")
    text = (f"Training step on this machine: **{kind}**, {_v(facts, 'step_units')} matrix products, calibrated "
            f"back-to-back to `G` = **{_v(facts, 'step_g')}** in steady state (asked for {_v(facts, 'step_g_target')})")
    if facts.number("step_first_rested"):
        text += f"; the first of those steps after a rested GPU took {_v(facts, 'step_first_rested')}"
    if facts["nvml"].value != "available":
        why = facts["nvml_why"].value
        return text + f". NVML was not available ({phrasing.text(why or 'no reason recorded')}): no clocks were logged."
    gpu = facts["nvml_gpu"].value
    return text + (". GPU clocks, power and clock-limit reasons were sampled through NVML every "
                   f"{_v(facts, 'nvml_interval')} ({phrasing.text(gpu or 'GPU')}, power limit "
                   f"{num(facts.number('power_limit') or 0, 'W')}, max SM clock "
                   f"{num(facts.number('max_sm_clock') or 0, 'MHz')}).")


def published_case_sentences(facts) -> str:
    """The published case, one line per worker count: the wait (and the model's), compute, idle share, AU."""
    facts = facts_of(facts)
    ws = [f.setting["workers"] for k, f in facts.facts.items() if k.startswith("case.") and k.endswith(".wait")]
    return "\n".join(f"* `W={w}`: data wait **{_v(facts, f'case.w{w}.wait')}** per step (model "
                     f"{_v(facts, f'case.w{w}.model')}), compute {_v(facts, f'case.w{w}.compute')}, GPU idle "
                     f"**{_v(facts, f'case.w{w}.idle')}**, AU against `G` {_v(facts, f'case.w{w}.au')}"
                     + _shares_past_whole(facts, w) for w in ws)


def _shares_past_whole(facts: Facts, w: int) -> str:
    """Why the idle share and AU can add to more than 100%: AU counts each step as ``G`` of work, the idle share
    only what the step computed, so they pass 100% exactly when a step computed less than ``G``."""
    key = f"case.w{w}.idle_plus_au"
    if key not in facts:
        return ""
    return (f" (together {_v(facts, key)}: AU counts each step as `G` = {_v(facts, 'step_g')} of work, the idle "
            f"share what it computed, {_v(facts, f'case.w{w}.compute')})")


def model_walkthrough(facts: Facts) -> str:
    """The published case explained with this run's parameters (no numbers typed in prose)."""
    if "model_w0_idle" not in facts:
        return ""
    text = (f"With no workers the training process spends `D·B` = {_v(facts, 'published_w0_model')} preparing every "
            f"batch, so the model puts the GPU idle for {_v(facts, 'model_w0_idle')} of each step.")
    if "model_w_vs_g" in facts:
        w = facts["published_w_per_batch"].setting["workers"]
        text += (f" {w} workers each still need {_v(facts, 'published_w0_model')} per batch, but together deliver one "
                 f"every {_v(facts, 'published_w_per_batch')}, "
                 f"{phrasing.comparison(facts['model_w_vs_g'], facts)}: the model predicts a wait of "
                 f"{_v(facts, 'model_w_wait')}.")
    return text


def sizing_sentence(facts: Facts) -> str | None:
    """How close each real kind of work came to the sleep's D (they are sized to match, not equal)."""
    keys = [k for k in facts.facts if k.startswith("sizing.")]
    if not keys:
        return None
    parts = [f"{phrasing.text(facts[k].setting['work'])} {_v(facts, facts[k].of)} "
             f"({phrasing.comparison(facts[k], facts)})" for k in keys]
    return (f"Sized to cost `D` = {_v(facts, 'd_target')} per sample, one sample of real work cost, measured in the "
            f"main process: " + ", ".join(parts) + ". The model lines use these measured costs; the kinds differ "
            "in cost as well as in whether the work occupies a core.")


def model_gap_notes(facts) -> str | None:
    """Where the measured wait leaves the model's line by more than MODEL_GAP_REL (and MODEL_GAP_FLOOR_MS)."""
    facts = facts_of(facts)
    out = []
    for k in facts.data.get("sweep_work") or []:
        gaps = []
        for c in [f for key, f in facts.facts.items() if key.startswith(f"model_gap.{k}.") and f.is_comparison]:
            s, w = c.setting, c.setting["workers"]
            how = (f"{fx.times(c.number)} the model" if s["factor"] and c.number is not None else
                   "above the model" if s["factor"] else f"{fx.pct(abs(c.number - 1))} {s['side']} the model")
            if s["compute_off"]:
                how += f"; compute {_v(facts, f'{c.key}.compute')} that step vs `G` = {_v(facts, 'step_g')}"
            gaps.append(f"W={w}: {_v(facts, c.of)} vs {_v(facts, c.basis)} ({how})")
        out.append(f"* **{phrasing.text(k)}** leaves the model's line at " + "; ".join(gaps) + "." if gaps else
                   f"* **{phrasing.text(k)}** stays within {fx.pct(MODEL_GAP_REL)} (or "
                   f"{fx.num(MODEL_GAP_FLOOR_MS, 'ms')}) of the model at every W.")
    return "\n".join(out) if out else None


def _at(facts: Facts, prefix: str, ws) -> str:
    """The facts ``<prefix>.w<W>`` for the worker counts ``ws``: "5 ms at W=0, 7 ms at W=1"."""
    return ", ".join(f"{_v(facts, f'{prefix}.w{w}')} at W={w}" for w in ws)


def _ws(ws) -> str:
    return ", ".join(f"W={w}" for w in ws)


def gap_cause_note(facts) -> str | None:
    """For real work whose wait sits above the model where the model predicts one: the per-sample cost those
    waits imply, and which explanation the data support (the analysis's ``gap_cause.<work>``)."""
    facts = facts_of(facts)
    out = []
    for key in [k for k in facts.facts if k.startswith("gap_cause.")]:
        c = facts[key]
        k, s = c.setting["work"], c.setting
        above = s["above"]
        how = ([] if all(w > 0 for w in above) else ["`D·B` = the wait at W = 0"]) \
            + ([] if all(w == 0 for w in above) else ["`D·B/W` = wait + compute at W ≥ 1"])
        text = (f"**Why {phrasing.text(k)} sits above the model.** Read through the model, its waits imply a "
                f"per-sample cost of {_at(facts, f'implied_d.{k}', above)} ({'; '.join(how)}), against `D` = "
                f"{_v(facts, f'd.{k}')} timed back to back in the main process just before the sweep")
        if f"gap_first.{k}.w0" in facts:
            text += (f"; its first batch took {_v(facts, f'gap_first.{k}.w1')} with one worker against "
                     f"{_v(facts, f'gap_first.{k}.w0')} in the main process")
        out.append(text + ". " + _loop_cost_text(facts, c))
    out += [_shortfall_text(facts, key.split(".", 1)[1]) for key in facts.facts if key.startswith("model_shortfall.")]
    return "\n\n".join(out) if out else None


#: Where the data place the workers' shortfall against the model, and what would settle it.
_SHORTFALL_CAUSE = {
    "outside the work": ("so the shortfall lies outside the per-item work: collating each batch and handing it to the "
                         "training process, which this run does not time. Timing each batch's collate and hand-over, "
                         "in the workers and in the training process, would settle it."),
    "slower work": "so the work itself ran slower inside the workers than back to back in the main process.",
}


def _shortfall_text(facts: Facts, k: str) -> str:
    """Why the sweep needs more workers than the model asks for, from ``model_shortfall.<work>``: each worker's
    measured time per sample against ``D``, and where the data place the difference."""
    c, pace, cause = facts[f"model_shortfall.{k}"], facts[f"worker_pace.{k}"], facts[f"shortfall_cause.{k}"]
    w, first = pace.setting["workers"], facts.get(f"keep_up.{k}")
    text = (f"**Why {phrasing.text(k)} needs more workers than the model asks for.** The model asks for "
            f"{_v(facts, f'model_workers.{k}')}, assuming each worker delivers a sample every `D` = "
            f"{_v(facts, f'd.{k}')}. "
            f"At W = {w} the sweep's workers delivered one every {_v(facts, pace.key)} each (W × step ÷ B = {w} × "
            f"{fx.num(pace.setting['step_ms'], 'ms')} ÷ {pace.setting['batch_size']}), "
            f"{phrasing.comparison(c, baseline='`D`')}: the model's assumption fails by that factor"
            + (f", and the sweep first kept up at W = {int(first.number)}. " if first is not None and first.number
               is not None else ". "))
    if cause.value == "not timed":
        return text + ("This run did not time the work inside the workers, so it does not settle why; timing each "
                       "item's work inside a worker, and each batch's hand-over, would.")
    work = f"{_v(facts, f'worker_work.{k}')} (CPU time {_v(facts, f'worker_cpu.{k}')})"
    return (text + f"Timed inside a worker at W = {w}, one item's work took {work}, "
            + ("more than" if cause.value == "slower work" else "no more than") + f" `D` plus {fx.pct(COST_TOL)}, "
            + _SHORTFALL_CAUSE[str(cause.value)])


def _loop_cost_text(facts: Facts, c) -> str:
    """The verdict of the per-item work timed inside the loop, in words."""
    k, s = c.setting["work"], c.setting
    if c.value == "not timed":
        where = "not in the reference run" if s["where"] == "the reference run" else "not recorded in this run"
        return f"The deciding measurement, each item's work timed inside the loop where it ran, is {where}."
    if c.value == "timed elsewhere":
        return ""
    ws = s["timed"]
    cpu = [w for w in ws if f"loop_cpu.{k}.w{w}" in facts]
    text = ("Timed inside the loop where it ran, one item's work took " + _at(facts, f"loop_wall.{k}", ws)
            + (" (CPU time " + ", ".join(_v(facts, f"loop_cpu.{k}.w{w}") for w in cpu) + ")" if cpu else "")
            + f", against `D` = {_v(facts, f'd.{k}')}")
    if f"d_after.{k}" in facts:
        text += f"; timed back to back again right after the sweep, `D` = {_v(facts, f'd_after.{k}')}"
    text += ". "
    if c.value == "slower machine":
        return text + ("**The data support a slower machine**: `D` itself grew between the two back-to-back "
                       "timings, so the sweep ran on a machine slower than the one `D` was timed on.")
    if c.value == "outside the work":
        return text + ("The work cost what `D` says inside the loop too, so the per-sample work is not what exceeds "
                       "the model; the excess lies outside it (the loader's own per-batch work and the hand-over), "
                       "which this run does not time.")
    slow, fits = s["slow"], s["fits"]
    text += ("**The data support the work itself running slower inside the loop than back to back** (at "
             + _ws(slow) + ")")
    text += (": its wall time exceeds its CPU time there, so part of it was waiting for a core. " if s["waiting"] else
             ": its CPU time grew as well, so it is slower work, not waiting for a core. ")
    if fits:
        text += (f"Fed the loop's own per-item cost, the model lands within {fx.pct(MODEL_GAP_REL)} (or "
                 f"{fx.num(MODEL_GAP_FLOOR_MS, 'ms')}) of the measured wait at " + _ws(fits)
                 + (": the model holds; it was given too small a `D`." if len(fits) == len(slow) else "."))
    if len(fits) < len(slow):
        text += (" At " + _ws(w for w in slow if w not in fits)
                 + " even the loop's own cost leaves the wait above the model; this run does not explain the rest.")
    if s["workers_pay_more"]:
        text += (f" Workers paid more per item than the main process did inside the loop "
                 f"({_v(facts, f'loop_wall.{k}.w0')} at W=0).")
    return text


def cores_sentence(facts: Facts) -> str:
    """The sweep against the machine's cores: what the wait did beyond them, where the sweep went there."""
    wmax = int(facts.number("sweep_max_workers"))
    if not facts.number("cores"):
        return f"The sweep ends at W = {wmax}."
    text = f"This machine has {_v(facts, 'cores')} (usable) and the sweep ends at W = {wmax}"
    if facts.number("sweep_max_workers") <= facts.number("cores"):
        return text + ": it never asks for more workers than cores, so it cannot show what happens beyond them."
    keys = [k for k in facts.facts if k.startswith("cores_wait.") and facts[k].is_comparison]
    parts = [f"{phrasing.text(facts[k].setting['work'])}: {phrasing.text(facts[facts[k].of].label)} was "
             f"{_v(facts, facts[k].of)}, {phrasing.comparison(facts[k], facts)} ({_v(facts, facts[k].basis)})"
             for k in keys]
    return text + "; from the last W within the cores to the largest W: " + "; ".join(parts) + "."


def first_batch_note(facts) -> str | None:
    """Time to the first batch per kind: single measurements, from the fewest workers to the most, each dip on
    the way (unless the trend itself falls), set against the spread of start-up seen in the epoch-boundary runs."""
    facts = facts_of(facts)
    notes, dips = [], []
    for key in [k for k in facts.facts if k.startswith("first_batch_trend.")]:
        t = facts[key]
        kind = key.split(".", 1)[1]
        a, b = facts[t.basis], facts[t.of]
        head = (f"**{phrasing.text(kind)}** took {_v(facts, b.key)} at W = {b.setting['workers']}, "
                f"{phrasing.comparison(t, facts)} ({_v(facts, a.key)})")
        mine = [f for k, f in facts.facts.items() if k.startswith(f"first_batch_dip.{kind}.")]
        if mine:
            head += (", except " + "; ".join(f"W={facts[d.setting['from']].setting['workers']} → W="
                                              f"{d.setting['workers']}: {_v(facts, d.setting['from'])} → "
                                              f"{_v(facts, d.setting['to'])}" for d in mine))
        notes.append(head)
        dips += mine
    if not notes:
        return None
    text = ("Time to the first batch is one measurement per configuration, not a mean: " + "; ".join(notes) + "."
            + " Each worker is a process to start and to hand the dataset to.")
    fresh = facts.get("first_batch_fresh")
    if fresh is not None and "first_batch_noise" in facts:
        text += (f" For scale: {fresh.n} fresh loaders of one configuration (the epoch-boundary runs, W = "
                 f"{fresh.setting['workers']}, sleep work) took {fx.span(*fresh.spread, 'ms')} to their first batch, "
                 f"a spread of {_v(facts, 'first_batch_noise')}.")
        big = [d for d in dips if d.setting.get("beyond_noise")]
        if big:
            text += (" The " + ("dip" if len(big) == 1 else "dips") + " ("
                     + ", ".join(f"{phrasing.text(d.setting['work'])}, {_v(facts, d.key)}" for d in big) + ") "
                     + ("exceeds" if len(big) == 1 else "exceed")
                     + " that spread; this run does not measure the cause.")
        elif dips:
            text += " The dips are within that spread: start-up noise."
    return text


def au_drift_sentence(facts: Facts) -> str | None:
    """Did back-to-back steps during the sweep keep to the calibrated G? (the drift, in numbers)"""
    if "sweep_step_quick" not in facts:
        return None
    text = (f"During the sweep, {phrasing.text(facts['sweep_step_quick'].label)} took {_v(facts, 'sweep_step_quick')}, "
            f"{phrasing.comparison(facts['sweep_step_quick_vs_g'], facts)} = {_v(facts, 'step_g')}")
    if "sweep_step_rested" in facts:
        text += (f"; {phrasing.text(facts['sweep_step_rested'].label)} took {_v(facts, 'sweep_step_rested')}, "
                 f"{phrasing.comparison(facts['sweep_step_rested_vs_quick'], facts, baseline='the back-to-back ones')}")
    text += "."
    if "au_vs_share" not in facts:
        return text
    c = facts["au_vs_share"]
    d = c.setting.get("direction", 0)
    where = f"{phrasing.text(c.setting['work'])} W={c.setting['workers']}"
    text += (" AU counts every step as `G` of work, whatever it took: "
             + ("a step shorter than `G` still counts as `G`, so AU comes out above the share of the wall time the "
                "GPU measurably computed" if d > 0 else
                "a step longer than `G` counts only as `G`, so AU comes out below the share of the wall time the "
                "GPU measurably computed" if d < 0 else
                "here AU and the share of the wall time the GPU measurably computed agree")
             + f". The largest difference was at {where}: AU {_v(facts, 'au_vs_share.au')}, "
             + (f"{_v(facts, 'au_vs_share.points')} {'above' if c.number >= 1 else 'below'}" if d else "level with")
             + " the measured compute share "
             f"({_v(facts, 'au_vs_share.share')}; compute {_v(facts, 'au_vs_share.compute')} per step against `G` = "
             f"{_v(facts, 'step_g')})")
    if "au_vs_share.quick_points" in facts:
        text += (f"; where the steps ran back-to-back (mean wait under 2 ms) the two differed by at most "
                 f"{_v(facts, 'au_vs_share.quick_points')}")
    return text + "."


def prefetch_sentence(facts) -> str | None:
    """The prefetch experiment in detail (the key result states the comparison): every
    prefetch_factor's mean wait over the runs, and a comment on each widely spread one."""
    facts = facts_of(facts)
    if "prefetch_balanced" not in facts:
        return None
    runs = [f for k, f in facts.facts.items()
            if k == f"prefetch.{f.setting.get('cost')}.pf{f.setting.get('prefetch_factor')}"]
    parts = {}
    for f in runs:
        parts.setdefault(f.setting["cost"], []).append(
            f"{f.setting['prefetch_factor']}: {fx.value_in_range(f)}")
    n = max(f.n for f in runs)
    text = (f"The balanced case sizes the work so that `D·B/W` is just under `G` ({_v(facts, 'prefetch_per_batch')} "
            f"against {_v(facts, 'step_g')}; D = {_v(facts, 'prefetch_d')}, W = "
            f"{facts['prefetch_d'].setting['workers']}). Mean wait per step by `prefetch_factor` ("
            + (f"mean of {n} runs, min–max over {n} runs" if n > 1 else "one run") + "): "
            + "; ".join(f"{phrasing.text(c)} cost, " + ", ".join(items) for c, items in parts.items()) + ".")
    wide = [f for k, f in facts.facts.items() if k.startswith("prefetch_cv.")]   # widest first
    if wide:   # the widest spread gets the full comment, the others are named
        first = f"{phrasing.text(wide[0].setting['cost'])} cost at prefetch_factor {wide[0].setting['prefetch_factor']}"
        f = facts[wide[0].key.replace("prefetch_cv.", "prefetch.", 1)]
        text += (f" With {first} the mean wait varied over {fx.span(*f.spread, 'ms')} in {f.n} runs (coefficient "
                 f"of variation {_v(facts, wide[0].key)}): read it as a range, not a point.")
        if len(wide) > 1:   # the others by cost: "prefetch_factor 2 and 1 of variable cost, and 4 of constant cost"
            by_cost = {}
            for w in wide[1:]:
                by_cost.setdefault(phrasing.text(w.setting["cost"]), []).append(str(w.setting["prefetch_factor"]))
            groups = [f"prefetch_factor {phrasing.and_list(fs)} of {c} cost" for c, fs in by_cost.items()]
            text += " The runs at " + (", and at ".join(groups) + "," if len(groups) > 1 else groups[0]) \
                + " spread widely too."
    return text


def nvml_util_sentence(facts) -> str | None:
    """NVML's utilisation against AU over the sweep: how far apart on average, and where most."""
    facts = facts_of(facts)
    if "nvml_util_vs_au" not in facts:
        return None
    w = facts["nvml_util_worst"].setting
    return (f"NVML's utilisation (the share of time in which a kernel was running, sampled every "
            f"{_v(facts, 'nvml_interval')} and averaged over the steady-state steps only) differed from AU by "
            f"{_v(facts, 'nvml_util_vs_au')} on average over the sweep; the largest difference was at "
            f"{phrasing.text(w['work'])} W={w['workers']}: {_v(facts, 'nvml_util_worst')} vs AU "
            f"{_v(facts, 'nvml_util_worst_au')}.")


# --------------------------------------------------------------------------- what-if chart
_WHATIF_JS = charts.script_template("""
var gd = document.getElementById('{plot_id}');
var state = %s;
function model() {
  var xs = gd.data[0].x, D = state.D, B = state.B, G = state.G;
  var wait = xs.map(function (w) { return w == 0 ? D * B : Math.max(0, D * B / w - G); });
  var au = wait.map(function (x) { return 100 * G / (G + x); });
  Plotly.restyle(gd, {y: [wait, xs.map(function () { return G; }), au]}, [0, 1, 2]);
}
gd.on('plotly_sliderchange', function (e) { state[e.slider.name] = +e.step.value; model(); });
""")

WHATIF_D = [0.5, 1, 2, 3, 5, 8, 10, 15, 20, 30, 50]
WHATIF_B = [1, 4, 8, 16, 32, 64, 128, 256]
WHATIF_G = [5, 10, 20, 30, 50, 75, 100, 150, 200, 300]


def whatif_figure(d_ms: float, batch_size: int, g_ms: float, max_workers: int = 32, *, sliders: bool = True):
    """Predicted data wait and AU against W. With ``sliders``, plotly sliders for D, B and G
    recompute the model in the browser (a few lines of JavaScript: no kernel needed); without,
    the figure for one (D, B, G), as drawn by the live widgets of :func:`whatif`."""

    from plotly.subplots import make_subplots

    from datajourney.core.charts import PALETTE, value_slider

    ws = list(range(0, max_workers + 1))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=ws, y=[predicted_wait_ms(d_ms, batch_size, w, g_ms) for w in ws], name="predicted data wait",
                    line=dict(color=PALETTE[5], width=3), hovertemplate="W=%{x}: wait %{y:.1f} ms<extra></extra>")
    fig.add_scatter(x=ws, y=[g_ms] * len(ws), name="step compute G", line=dict(color=PALETTE[0], dash="dash"),
                    hovertemplate="G = %{y:.0f} ms<extra></extra>")
    fig.add_scatter(x=ws, y=[100 * predicted_au(d_ms, batch_size, w, g_ms) for w in ws], name="predicted AU (%)",
                    line=dict(color=PALETTE[2]), hovertemplate="W=%{x}: AU %{y:.0f}%<extra></extra>",
                    secondary_y=True)
    # the threshold line and its label both live on the AU axis (y2), so a slider cannot move one without the other
    t = 100 * AU_THRESHOLD
    fig.add_shape(type="line", xref="x domain", x0=0, x1=1, yref="y2", y0=t, y1=t,
                  line=dict(color=PALETTE[2], dash="dot", width=1))
    fig.add_annotation(xref="x domain", x=1, xanchor="right", yref="y2", y=t, yanchor="bottom", showarrow=False,
                       text=f"AU {fx.pct(AU_THRESHOLD)}: keeping up", font=dict(color=PALETTE[2], size=12))
    layout = dict(legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0), margin=dict(t=150))
    if sliders:
        # each slider takes ~95 px (title, rail, tick labels); the plot area is 320 px high
        height, bottom, plot = 760, 330, 320
        step_y = 105 / plot
        layout.update(height=height, margin=dict(t=150, b=bottom),
                      sliders=[value_slider("D", "CPU cost per sample D (ms)", WHATIF_D, d_ms, -0.2),
                               value_slider("B", "batch size B", WHATIF_B, batch_size, -0.2 - step_y),
                               value_slider("G", "GPU step G (ms)", WHATIF_G, g_ms, -0.2 - 2 * step_y)],
                      meta={"post_script": charts.script(_WHATIF_JS, {"D": d_ms, "B": batch_size, "G": g_ms})})
        title = "What if? The model of chapter 4 (move the sliders)"
    else:
        layout.update(height=460)
        title = f"What if? D = {d_ms:g} ms, B = {batch_size}, G = {g_ms:g} ms"
    # the title at the top of the figure, the legend's row under it, above the plot: they never meet
    fig.update_layout(title=dict(text=title, y=0.99, yref="container", yanchor="top"), **layout)
    fig.update_xaxes(title_text="DataLoader workers W")
    fig.update_yaxes(title_text="time per step (ms)", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="accelerator utilisation AU (%)", range=[0, 105], tickmode="array",
                     tickvals=[0, 20, 40, 60, 80, 100], showgrid=False, secondary_y=True)
    return fig


def _frontend_is_interactive() -> bool:
    """True in a kernel driven by a person's frontend (JupyterLab, Notebook, VS Code), which
    allows ``input()``; False under papermill/nbclient (the book's executor never allows stdin)
    and outside IPython."""
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))
    except Exception:  # noqa: BLE001
        return False


def whatif(d_ms: float, batch_size: int, g_ms: float, max_workers: int = 32, *, live: bool | None = None):
    """The what-if chart. In a live JupyterLab session (``live`` None: detected) and with
    ipywidgets installed, sliders recompute the model in the kernel; otherwise (the executed,
    static book) the figure carries plotly sliders that recompute in the browser."""
    import importlib.util

    if live is None:
        live = _frontend_is_interactive() and importlib.util.find_spec("ipywidgets") is not None
    if not live:
        return whatif_figure(d_ms, batch_size, g_ms, max_workers)
    import ipywidgets as widgets
    from IPython.display import display

    style = dict(description_width="initial")
    d = widgets.SelectionSlider(options=sorted(set(WHATIF_D + [d_ms])), value=d_ms,
                                description="CPU cost per sample D (ms)", style=style)
    b = widgets.SelectionSlider(options=sorted(set(WHATIF_B + [batch_size])), value=batch_size,
                                description="batch size B", style=style)
    g = widgets.SelectionSlider(options=sorted(set(WHATIF_G + [g_ms])), value=g_ms,
                                description="GPU step G (ms)", style=style)
    out = widgets.Output()

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            display(whatif_figure(d.value, b.value, g.value, max_workers, sliders=False))

    for s in (d, b, g):
        s.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([d, b, g], layout=widgets.Layout(flex_flow="row wrap")), out])


# --------------------------------------------------------------------------- tables and charts
def _sweep_frame(res) -> pd.DataFrame:
    """The worker sweep's rows of the summary table."""
    s = res.table("summary")
    return s[s["experiment"] == "worker sweep"]


def sweep_table(res) -> pd.DataFrame:
    """The worker sweep's steady-state means, with words in place of Python values."""
    sw = _sweep_frame(res)
    return pd.DataFrame({
        "work": sw["work"], "workers": sw["workers"], "D (ms)": sw["d_ms"], "wait (ms)": sw["wait_ms"],
        "model wait (ms)": sw["predicted_wait_ms"], "compute (ms)": sw["compute_ms"], "AU (%)": 100 * sw["au"],
        "first batch (ms)": sw["first_batch_ms"],
        "keeps up": ["yes" if bool(k) else "no" for k in sw["keeps_up"]] if "keeps_up" in sw else "—"})


def boundary_table(res) -> pd.DataFrame:
    """The first step of epoch 2, with and without persistent workers, over the runs."""
    eb = res.table("epoch_boundary")
    first2 = eb[(eb["epoch"] == 1) & (eb["step_in_epoch"] == 0)]
    t = first2.groupby(first2["persistent_workers"].astype(bool)).agg(
        runs=("wait_ms", "count"), mean=("wait_ms", "mean"), lo=("wait_ms", "min"), hi=("wait_ms", "max"),
        startup=("startup_ms", "mean")).reset_index()
    return pd.DataFrame({"persistent_workers": ["on" if v else "off" for v in t["persistent_workers"]],
                         "runs": t["runs"], "first step of epoch 2 (ms, mean)": t["mean"], "min (ms)": t["lo"],
                         "max (ms)": t["hi"], "worker start-up alone (ms)": t["startup"]})


def sweep_chart(res):
    """Measured against the model, one panel per kind of work: the title's second line sits above the panel
    titles, the legend below the axis."""
    from datajourney.chapters.c04_cpu_starvation import charts

    fig = charts.measured_vs_model(_sweep_frame(res), title="Data wait per step: measured vs the model")
    fig.update_layout(margin=dict(t=150, b=120), title=dict(yref="container", y=0.97, yanchor="top"))
    return fig


def _legend_below(fig):
    """A chart with a right-hand axis: its legend goes below the plot, clear of that axis's title."""
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.25, yanchor="top"), margin=dict(b=120))
    return fig


def drift_chart(res):
    from datajourney.chapters.c04_cpu_starvation import charts

    return _legend_below(charts.step_drift(res.table("calibration"), g_ms=calibrated_step(res),
                                           title="The calibrated step, back-to-back after a rest"))


def idle_chart(res):
    from datajourney.chapters.c04_cpu_starvation import charts

    return _legend_below(charts.idle_gap_chart(res.table("idle_gaps"), g_ms=calibrated_step(res),
                                               title="The same step after a controlled idle gap (no DataLoader)"))


# --------------------------------------------------------------------------- findings: words for facts
def _v(facts: Facts, key: str) -> str:
    return phrasing.value(facts.get(key), runs=False)


def _finding(facts: Facts, key: str, text: str, *, fact: str | None = None) -> Finding:
    f = facts[fact or key]
    return Finding(key, text, f.number, f.unit, published=f.published,
                   interval=f.spread if f.spread is not None and f.n >= MIN_RUNS_FOR_RANGE else None)


#: The model's names, said where the page first uses them.
DBW = "`D·B/W`, the CPU cost of a batch spread over the workers,"
AU = "accelerator utilisation (AU: steps × `G` ÷ wall time)"


def _dbw_and_g(facts: Facts) -> list[str]:
    """The model's `D·B/W` at the published worker count and the calibrated step `G`, side by side at one
    precision."""
    return alike([facts.number("published_w_per_batch"), facts.number("step_g")], "ms")


def finding_published_w0(facts: Facts) -> Finding | None:
    if "published_w0" not in facts:
        return None
    return _finding(facts, "published_w0",
                    f"**Without workers** (`W = 0`) the training process prepares every batch itself: each step "
                    f"waited **{_v(facts, 'published_w0')}** for data, "
                    f"{phrasing.comparison(facts['published_w0_vs_model'], facts)}, and the accelerator sat idle "
                    f"for **{_v(facts, 'published_w0_idle')}** of the step.")


def finding_published_w(facts: Facts) -> Finding | None:
    if "published_w" not in facts:
        return None
    w = facts["published_w"].setting["workers"]
    keeps = facts["published_w_keeps_up"].value == "keeps up"
    dbw, g = _dbw_and_g(facts)
    return Finding(f"published_w{w}",
                   f"**With {w} workers** the model's {DBW} is {dbw} against the calibrated step `G` = {g}; the "
                   f"measured wait was "
                   f"**{_v(facts, 'published_w')}** per step and the {AU} **{_v(facts, 'published_w_au')}**: the "
                   f"loader **{'keeps up' if keeps else 'falls short'}** (threshold {_v(facts, 'au_threshold')}).",
                   facts.number("published_w"), "ms", published=facts["published_w"].published)


def finding_drift_facts(facts: Facts) -> Finding | None:
    if "step_drift" not in facts:
        return None
    c = facts["step_drift"]
    if facts["step_device"].value != "gpu":
        return _finding(facts, "step_drift", f"**The step's own time.** The step is a simulated sleep here (no GPU): "
                                             f"calibrated back-to-back it took `G` = **{_v(facts, 'step_g')}**, and "
                                             "the idle-gap experiment measures only the sleep's jitter.",
                        fact="step_g")
    return _finding(facts, "step_drift", f"**The step's own time.** Calibrated back-to-back, the step settled at "
                                         f"`G` = **{_v(facts, 'step_g')}**; {phrasing.text(c.label)} took "
                                         f"{phrasing.value(facts[c.of])}: "
                                         f"**{phrasing.comparison(c, facts)}**.")


def finding_workers(facts: Facts) -> Finding | None:
    if "workers_to_keep_up" not in facts:
        return None
    f = facts["workers_to_keep_up"]
    kinds = [k.split(".", 1)[1] for k in facts.facts if k.startswith("keep_up.")]
    parts = []
    ds = dict(zip(kinds, alike([facts.number(f"d.{k}") for k in kinds], "ms"), strict=True))   # one precision
    for k in kinds:
        first = facts[f"keep_up.{k}"]
        model = f"the model asks for {_v(facts, f'model_workers.{k}')}"
        if f"model_shortfall.{k}" in facts:   # the model's assumption, measured: why the sweep needed more
            pace = facts[f"worker_pace.{k}"]
            model += (f"; at W = {pace.setting['workers']} each worker took {phrasing.value(pace, runs=False)} a "
                      f"sample, {phrasing.comparison(facts[f'model_shortfall.{k}'], baseline='`D`')}")
        parts.append(f"{phrasing.text(k)} (D = {ds[k]}) "
                     + (f"from **W = {int(first.number)}** ({model})" if first.number is not None else
                        f"never, up to W = {_v(facts, 'sweep_max_workers')} (best AU {_v(facts, f'best_au.{k}')})"))
    return Finding("workers_to_keep_up",
                   f"**Workers needed** to keep the accelerator busy (AU ≥ {_v(facts, 'au_threshold')} against `G` = "
                   f"{_v(facts, 'step_g')}) for synthetic per-sample work: " + "; ".join(parts) + ".",
                   f.number, "workers")


def finding_prefetch(facts: Facts) -> Finding | None:
    keys = [k for k in facts.facts if k.startswith("prefetch_balanced.")]
    if not keys:
        return None
    parts = []
    for k in keys:
        c = facts[k]
        every = c.setting.get("every_run")   # absent where the comparison is level: no run-by-run claim
        # not level: the ranges do not overlap, so every run of one was shorter than every run of the other
        way = "shorter" if (c.number or 1.0) < 1 else "longer"
        runs = ("" if every is None else f" ({way} in every run)" if every else
                f" ({way} in every run, not every run by more than a tenth)")
        parts.append(f"with {phrasing.text(c.setting.get('cost'))} per-sample cost, {phrasing.text(c.label)} was "
                     f"{phrasing.comparison(c, facts)}{runs}")
    return _finding(facts, "prefetch_balanced",
                    f"**`prefetch_factor` where it can matter** ({DBW} at {_v(facts, 'prefetch_load')} of `G`), the "
                    "mean wait per step: " + "; ".join(parts) + ".")


def finding_boundary(facts: Facts) -> Finding | None:
    if "epoch_boundary" not in facts:
        return None
    c = facts["epoch_boundary"]
    start = (f"; worker start-up alone, measured with free items: {_v(facts, 'boundary_startup')}"
             if "boundary_startup" in facts else "")
    return _finding(facts, "epoch_boundary",
                    f"**At the epoch boundary** the first step of epoch 2 waited {_v(facts, 'boundary_persistent')} "
                    f"with `persistent_workers` and {_v(facts, 'boundary_non_persistent')} without (one worker "
                    f"building a batch: `D·B` = {_v(facts, 'boundary_db')}{start}): "
                    f"**{phrasing.comparison(c, facts)}**.")


def findings(facts: Facts) -> list[Finding]:
    """The chapter's key results (3-6 findings), worded from its facts."""
    out = [finding_published_w0(facts), finding_published_w(facts), finding_drift_facts(facts),
           finding_workers(facts), finding_prefetch(facts), finding_boundary(facts)]
    return [f for f in out if f is not None]


def takeaways(facts: Facts) -> str:
    """The chapter's closing advice: the model's rules, and what this run measured for each knob."""
    out = [f"* Estimate {DBW} against the step `G` before buying hardware: if the CPU side cannot produce a batch "
           "per step, a faster GPU only waits longer (try it in the what-if chart)."]
    for key in ("synthetic.num_workers", "synthetic.persistent_workers", "synthetic.prefetch_factor"):
        a = facts.advice_for(key)
        if a is not None:
            tail = " " + workers_against_model(facts) if key == "synthetic.num_workers" else ""
            out.append(f"* {phrasing.advice(a, facts)}{tail}")
    out.append("* Workers are processes, and real preprocessing needs a core per busy worker: these counts are "
               "for this synthetic workload; a real model's loader (chapter 7) needs its own measurement.")
    if "step_drift" in facts and facts["step_device"].value == "gpu":
        out.append("* Time the step the way training runs it, back-to-back: here "
                   f"{phrasing.text(facts['step_drift'].label)} was "
                   f"{phrasing.comparison(facts['step_drift'], facts)}.")
    out.append("* Move work off the critical path: pre-tokenise or pre-decode once, offline, when the same samples "
               "are seen many times.")
    return "\n".join(out)


# --------------------------------------------------------------------------- an exercise on paper
def paper_exercise(facts) -> str:
    """The model ``W ≥ D·B/G`` worked by hand for the sweep's real work (tokenising where it ran): the CPU cost of
    a batch, the fewest workers that hide it, the count the 90% AU bar asks for, and the AU the sweep measured at
    that count against the workers it needed; the answers folded, from this run's facts."""
    facts = facts_of(facts)
    ex = facts.data.get("exercise") or {}
    kind = ex.get("work")
    if not kind or facts.number(f"d.{kind}") is None or not facts.number("step_g"):
        return ("The exercise on paper needs the worker sweep's measured cost of one sample, which this run does not "
                "hold (no worker sweep in its summary).")
    d, b, g = facts.number(f"d.{kind}"), int(ex["batch_size"]), facts.number("step_g")
    ratio = d * b / g
    need = workers_needed(d, b, g)
    work = WORK_WORDS.get(kind, f"{kind} work")
    intro = (f"**Work it out.** In the worker sweep one sample of {work} cost **D = {num(d, 'ms')}** of CPU "
             f"(measured in the training process), a batch held **B = {b}** samples, and the calibrated step took "
             f"**G = {num(g, 'ms')}**. Each worker builds whole batches, so W workers deliver one batch every "
             "D·B/W.")
    questions = ["How much CPU time does one batch cost (D·B)?",
                 "How many workers does it take for a batch to be ready every step (D·B/W ≤ G, so W ≥ D·B/G)?",
                 f"The book counts a loader as keeping up at an AU of {pct(AU_THRESHOLD)}. With "
                 "AU = G ÷ (G + wait) and a wait of D·B/W − G, how many workers does that bar ask for "
                 f"(W ≥ {pct(AU_THRESHOLD)} · D·B/G, rounded up)?"]
    answers = [f"{num(d, 'ms')} × {b} = **{num(d * b, 'ms')}** per batch.",
               f"{num(d * b, 'ms')} ÷ {num(g, 'ms')} = {num(ratio)}, so **{math.ceil(ratio - 1e-9)} workers** "
               "(a worker count is whole).",
               f"{pct(AU_THRESHOLD)} × {num(ratio)} = {num(AU_THRESHOLD * ratio)}, so **{need} workers**."]
    step = facts.get(f"step.{kind}.w{need}")
    kept = facts.number(f"keep_up.{kind}")
    if step is not None and step.number:
        au = g / step.number
        reached = "reaches" if au >= AU_THRESHOLD else "falls short of"
        questions.append(f"At W = {need} the sweep measured a step of **{num(step.number, 'ms')}** with this work. "
                         "What AU is that (G ÷ the step), and does it reach the bar?")
        after = (f" The sweep first reached the bar at **W = {int(kept)}**." if kept is not None else
                 f" No worker count of the sweep (up to {_v(facts, 'sweep_max_workers')}) reached the bar.")
        answers.append(f"{num(g, 'ms')} ÷ {num(step.number, 'ms')} = **{pct(au)}**: it {reached} the "
                       f"{pct(AU_THRESHOLD)} bar.{after if au < AU_THRESHOLD and (kept or need + 1) > need else ''}")
    return on_paper(intro, questions, answers)


#: A kind of per-sample work in a reader's words, in the exercise on paper.
WORK_WORDS = {"sleep": "sleeping work", "tokenize": "tokenising", "decode": "JPEG decoding"}


# --------------------------------------------------------------------------- the opening
def _published_work(facts: Facts) -> str:
    """The published case's work in a reader's words: "CPU-free sleeping work of 5 ms a sample"."""
    d = facts.get("published_d")
    if d is None:   # facts stored before the analysis named the published case's work
        return "the published case's work"
    return f"{WORK.get(d.setting['work'], 'per-sample')} work of {_v(facts, 'published_d')} a sample"


def workers_against_model(facts: Facts) -> str:
    """The worker question's answer beside the model ``W ≥ D·B/G``: the count the model asks for this work, and
    where the sweep parted from it (each worker's measured time per sample against ``D``), the count that first
    kept the accelerator busy, or that none did; "" without the sweep."""
    a = facts.advice_for("synthetic.num_workers")
    need = facts.get("workers_to_keep_up")
    if a is None or need is None:
        return ""
    k = need.setting["work"]
    text = f"The model asks for {_v(facts, f'model_workers.{k}')}"
    if f"model_shortfall.{k}" in facts:   # where the sweep parted from the model, and by what measured factor
        pace = facts[f"worker_pace.{k}"]
        text += (f"; at W = {pace.setting['workers']} each took {phrasing.value(pace, runs=False)} a sample, "
                 f"{phrasing.comparison(facts[f'model_shortfall.{k}'], baseline='`D`')}")
    if need.number is None:
        wmax = int(facts.number("sweep_max_workers"))
        return text + (f"; no worker count up to W = {wmax} kept the accelerator busy (best AU "
                       f"{_v(facts, f'best_au.{k}')}): pre-process offline, or use more cores.")
    return text + ("." if f"model_shortfall.{k}" in facts else f"; W = {int(need.number)} first kept the accelerator "
                   "busy.")


def opening(facts: Facts) -> Opening:
    """What the chapter opens with: the published case (CPU-free sleeping work, named as such) with no workers and
    with its worker count, against the model, and the epoch boundary, one sentence each; then the worker count,
    ``persistent_workers`` and ``prefetch_factor`` this run chose, each naming the work it was measured on (the worker
    count on CPU-bound work, a different workload from the published case's sleep), the worker count with the
    model's count beside it, as one ``DataLoader`` call."""
    out = []
    if "published_w0" in facts:
        out.append(_finding(facts, "published_w0", f"With no workers, {_published_work(facts)} made each step wait "
                                                   f"**{_v(facts, 'published_w0')}** for data; the accelerator sat "
                                                   f"idle {_v(facts, 'published_w0_idle')} of the time."))
    if "published_w" in facts:
        w = facts["published_w"].setting["workers"]
        keeps = facts["published_w_keeps_up"].value == "keeps up"
        model = facts.get("published_w_model")   # absent from facts stored before the analysis compared the two
        agree = "" if model is None else (", as" if model.value == facts["published_w_keeps_up"].value
                                          else ", against what") + " the model predicts"
        dbw, g = _dbw_and_g(facts)
        text = (f"With {w} workers on the same work (`D·B/W` = {dbw}, `G` = {g}) the wait was "
                f"**{_v(facts, 'published_w')}**{agree}: the loader {'keeps up' if keeps else 'falls short'} "
                f"(AU {_v(facts, 'published_w_au')}).")
        out.append(Finding(f"published_w{w}", text, facts.number("published_w"), "ms",
                           published=facts["published_w"].published))
    if "epoch_boundary" in facts and facts.advice_for("synthetic.persistent_workers") is None:
        # where the persistent_workers advice stands below, it states this comparison: said once
        c = facts["epoch_boundary"]
        out.append(_finding(facts, "epoch_boundary", f"At each new epoch, {phrasing.text(c.label)}: "
                                                     f"**{phrasing.comparison(c, facts)}**."))
    actions = []
    a = facts.advice_for("synthetic.num_workers")
    if a is not None:
        actions.append(Action(phrasing.advice(a, facts) + " " + workers_against_model(facts), a.snippet))
    for key in ("synthetic.persistent_workers", "synthetic.prefetch_factor"):
        a = facts.advice_for(key)
        # a kept prefetch_factor asks nothing of the reader: said in the closing advice, off the first screen
        if a is not None and (key != "synthetic.prefetch_factor" or a.verdict != "keep"):
            actions.append(Action(phrasing.advice(a, facts)))
    return Opening(out[:3], actions[:3] or [Action("No DataLoader setting was measured in this run.")])
