"""Chapter 3's page: it words the facts of :mod:`.analysis` (opening, key results, the notes beside the
evidence) through :mod:`datajourney.core.phrasing`, and shapes the result's tables for display (the
``*_table`` functions). Every number and every decision a note states (directions, which layout the main
process bounds, the plateau and its cause) comes from the facts; the page only words them.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from datajourney.chapters.c03_dataloader.analysis import CHAPTER, PLATEAU_TOL, speedups, transfer_cost
from datajourney.chapters.c03_dataloader.analysis import analyse as _analyse
from datajourney.chapters.c03_dataloader.params import KINDS, MAIN_BOUND_SHARE
from datajourney.chapters.common import (
    IPC_CHAPTER,  # noqa: F401
    STORAGE_CHAPTER,
    ColdVerdict,
    cold_label,
    facts_reader,
    ipc_crossref,  # noqa: F401
    on_paper,
    over_runs,
    runs_interval,
)
from datajourney.chapters.wording import cap, fact_finding, pair_words, ran, residency_words
from datajourney.core import phrasing as fnd
from datajourney.core import phrasing as say
from datajourney.core import stats
from datajourney.core.facts import Facts
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.units import equals, num, pct, shown

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)

LABELS = {"small_files": "small files, shuffled", "shard": "shard, shuffled",
          "shard_in_order": "shard, in order (published design)"}
#: The page's series in one order, which gives each its colour in every chart (``series_colours``): the three
#: layouts, then the payloads of the hand-over cost.
SERIES = (*LABELS, "bytes", "length")
#: The published comparison's worker counts.
PUBLISHED_WORKERS = (0, 4)


# --------------------------------------------------------------------------- reading a result
def _epochs_frame(res) -> pd.DataFrame:
    """The epochs table the display tables show (a result from before the steady state was recorded has none)."""
    e = res.table("epochs")
    if "steady_MBps" not in e:
        raise KeyError("the epochs table has no steady-state columns (result from an older version)")
    return e


def key_metrics(facts) -> dict:
    """The published comparison, like for like: cold, steady state (first batch excluded),
    the shard read in order vs the small files shuffled, at workers 0 and 4; metric -> (mean, std)."""
    return {k: tuple(v) for k, v in (facts_of(facts).data.get("key_metrics") or {}).items()}


# --------------------------------------------------------------------------- findings


def findings(facts: Facts) -> list[Finding]:
    """The chapter's key results, worded from ``facts`` (3 to 6 findings), shown under the opening, which defines
    the cold state's word at its first use."""
    facts = facts_of(facts)
    out = [fact_finding(facts, k, pair_words(facts, k) + " (steady state, first batch excluded).")
           for k in (f"published_w{w}" for w in PUBLISHED_WORKERS) if k in facts]
    if "shuffled_gap_max_workers" in facts:
        out.append(fact_finding(facts, "shuffled_gap_max_workers", pair_words(facts, "shuffled_gap_max_workers")
                            + " (both layouts shuffled, at the largest worker count measured)."))
    for f in (_one_worker_finding(facts), _main_process_finding(facts), _first_batch_finding(facts)):
        if f is not None and len(out) < 6:
            out.append(f)
    if len(out) < 3:
        out.append(Finding("residency", residency(facts)))
    return out   # what "cold" means here is said once, by the opening above them (:func:`opening`)


def _one_worker_finding(facts: Facts) -> Finding | None:
    f = facts.get("one_worker")
    if f is None:
        return None
    d = f.setting.get("direction", 0)
    text = (f"**One worker vs none** (warm, shard in order, batch {f.setting.get('batch_size')}): "
            f"{say.value(facts['one_worker.w1'])} per batch with one worker against "
            f"{say.value(facts['one_worker.w0'])} with none. {cap(say.text(f.label))}: **{say.value(f)}**")
    text += {1: ": handing each batch from the worker to the main process costs that much.",
             -1: ": one worker saved time, the hand-over cost less than the work it took off the main process.",
             0: ": within the runs' spread, one worker neither costs nor saves measurably."}[d]
    return fact_finding(facts, "one_worker", text)


def _main_process_finding(facts: Facts) -> Finding | None:
    f = facts.get("main_process")
    if f is None:
        return None
    w, bound = f.setting["workers"], f.setting.get("bound") or []
    parts = [facts[k] for k in (f"main_process.{kind}" for kind in KINDS) if k in facts]
    text = (f"**The main process at `num_workers={w}`** wanted a CPU (on one, or waiting for one) for a share of "
            "the steady state: " + "; ".join(f"{say.text(p.label.split(', ', 1)[-1])} {say.value(p)}" for p in parts)
            + ". ")
    text += ("It is the bottleneck for " + ", ".join(say.text(LABELS[k]) for k in bound)
             + f": at least {pct(MAIN_BOUND_SHARE)}, it cannot take batches faster, however many workers prepare them."
             if bound else f"Less than {pct(MAIN_BOUND_SHARE)} for every layout: it had time to spare.")
    return fact_finding(facts, "main_process", text)


def _first_batch_finding(facts: Facts) -> Finding | None:
    f = facts.get("first_batch")
    if f is None:
        return None
    text = (f"**{cap(say.text(f.label))}**: **{say.value(f)}**, {say.value(facts['first_batch.share'])} of an "
            "epoch on average")
    if "first_batch.vs_fewest" in facts:
        text += f", {say.comparison(facts['first_batch.vs_fewest'], facts)}"
    text += ". The steady-state figures leave it out; whole-epoch figures include it."
    return fact_finding(facts, "first_batch", text)


def _vs(v: dict, more: str = "faster than", less: str = "slower than", same: str = "level with") -> str:
    """A comparison the analysis decided (:func:`analysis._versus`) as a phrase: '3.1× faster than'."""
    d = v["direction"]
    return f"{fnd.times(v['ratio'])} {more if d > 0 else less}" if d else same


def _overlap(o: dict, hm: dict) -> str:
    """Why a mode whose mean differs from the default's reads level: its runs' range overlaps the default's."""
    return (f" by the runs' overlap ({fnd.span(o['low'], o['high'])} against "
            f"{fnd.span(hm['default_low'], hm['default_high'], 'batches/s')})")


def _ho(facts: Facts) -> dict | None:
    return facts.data.get("hand_over")


def _one_worker_text(ho: dict) -> str:
    """One worker against none (the hand-over check): the extra time per batch, worded by its direction."""
    extra, lo, hi, n = ho["extra_ms"], ho["extra_min"], ho["extra_max"], ho["runs"]
    text = (f"**One worker vs none** (warm, shard in order, batch {ho['batch_size']}): "
            f"{num(ho['w1_ms'], 'ms')} per batch with one worker against {num(ho['w0_ms'], 'ms')} with none. ")
    text += fnd.choose(ho["direction"],
                       f"Handing each batch from the worker to the main process added **{num(extra, 'ms')}** "
                       f"({over_runs(lo, hi, n, 'ms', 'paired runs')}).",
                       f"One worker saved {num(-extra, 'ms')} per batch "
                       f"({over_runs(-hi, -lo, n, 'ms', 'paired runs')}): the hand-over cost less than the work it "
                       "took off the main process.",
                       f"The difference ({num(extra, 'ms')}, {over_runs(lo, hi, n, 'ms', 'paired runs')}) is within "
                       "the runs' spread: one worker neither costs nor saves measurably.")
    return text


def _per_sample(fit: dict) -> str:
    """A fitted per-sample cost; a slope at or below zero is no cost the fit can tell from nothing."""
    if fit["per_sample"]:
        return f"{num(fit['sample_us'], 'µs')} per sample"
    return f"nothing measurable per sample (the line's slope, {num(fit['sample_us'], 'µs')}, is not above zero)"


def _one_worker_detail(ho: dict) -> str:
    """What the hand-over check adds where one worker costs: the main process's CPU per received batch,
    how the extra scales with the batch size, and bytes against lengths."""
    if not ho["costs"]:
        return ""
    text = f"The main process spent {num(ho['receive_ms'], 'ms')} of CPU receiving each batch."
    ps = ho.get("per_sample")
    if ps is not None:
        a, b = ps["first_us"], ps["last_us"]
        text += (f" Per sample the extra fell from {num(a, 'µs')} at batch {ps['first_batch']} to {num(b, 'µs')} at "
                 f"batch {ps['last_batch']}" if ps["direction"] > 0 else
                 f" Per sample the extra went from {num(a, 'µs')} at batch {ps['first_batch']} to {num(b, 'µs')} at "
                 f"batch {ps['last_batch']}")
        text += fnd.choose(ps["direction"], ": a cost paid per batch, which larger batches amortise.",
                           ": larger batches cost more than in proportion to their size.",
                           ": about the same, a cost paid per sample (and, samples being of one size, per byte), "
                           "which larger batches do not amortise.")
        fit = ho.get("fit")
        if fit is not None:
            text += (f" A straight line through the {fit['sizes']} batch sizes splits it into about "
                     f"{num(fit['batch_ms'], 'ms')} per batch plus {_per_sample(fit)}")
            fl = fit["length"]
            text += (f"; with samples returned as their length (as the source's Datasets did), "
                     f"{num(fl['batch_ms'], 'ms')} per batch plus {_per_sample(fl)}." if fl is not None else ".")
    return text + _payload_sentence(ho)


def _payload_sentence(ho: dict) -> str:
    """Bytes vs lengths: whether the hand-over's extra time follows the bytes or the batch, and the
    worker's CPU per batch against the main process doing the same reads alone."""
    bs, text = ho["batch_size"], ""
    cpu = ho.get("cpu")
    if cpu is not None:
        text += (f" The worker spent {num(cpu['worker_ms'], 'ms')} of CPU per batch of {bs}, against "
                 f"{num(cpu['main_alone_ms'], 'ms')} for the main process doing the same reads alone")
        if "length_worker_ms" in cpu:
            text += (f" ({num(cpu['length_worker_ms'], 'ms')} against {num(cpu['length_main_alone_ms'], 'ms')} "
                     "with lengths)")
        text += (": the worker does more work per batch than the reads alone." if cpu["more"] else
                 ": the worker did no more work, so the extra time is spent waiting on the hand-over, not computing.")
    ln = ho.get("length")
    if ln is None:
        return text
    text += (f" At batch {bs}, with lengths (no bytes to share), the hand-over added {num(ln['extra_ms'], 'ms')} per "
             f"batch ({over_runs(ln['extra_min'], ln['extra_max'], ln['runs'], 'ms', 'paired runs')}), against "
             f"{num(ho['extra_ms'], 'ms')} with bytes: ")
    text += fnd.choose(
        ln["direction"], "moving the bytes accounts for the difference, and the rest is paid per batch whatever it "
        "holds.",
        "more than with bytes, so the cost does not come from the bytes.",
        "about the same, so the cost is paid per batch whatever the batch holds, not for copying bytes into shared "
        "memory.")
    return text


def _cache_word(facts: Facts, cache: str) -> str:
    return (facts.data.get("cold_label") or "cold") if cache == "cold" else cache


def _ceiling_sentence(facts: Facts, ceiling: dict | None) -> str:
    """The hand-over check's receive cost as a rate, called a ceiling only when every rate measured
    with workers lies below it."""
    if ceiling is None:
        return ""
    text = (f" Receiving one batch from a worker cost the main process {num(ceiling['cost_ms'], 'ms')} of CPU in the "
            f"hand-over check (warm, one worker), which alone would allow about {num(ceiling['rate'])} batches/s")
    top = ceiling["top"]
    if top is None:
        return text + "."
    where = (f"{LABELS[top['kind']].split(' (')[0]}, {_cache_word(facts, top['cache'])}, "
             f"`num_workers={top['workers']}`")
    if top["below"]:
        return text + (f": a ceiling, above every rate the sweep measured with workers (at most {num(top['rate'])} "
                       f"batches/s, {where}).")
    return text + (f". It is not a ceiling here: the sweep measured up to {num(top['rate'])} batches/s with workers "
                   f"({where}), where the main thread used {num(top['cpu_ms'], 'ms')} of CPU per batch.")


def paper_exercise(facts) -> str:
    """The plateau as arithmetic a reader does by hand: the batches/s the hand-over check's main-process CPU per
    received batch allows, that bound in MB/s, and the share of it the sweep's best rate with workers reached
    (warm where measured); the answers folded, from this run's means (the analysis's ``exercise`` data)."""
    facts = facts_of(facts)
    ex = facts.data.get("exercise") or {}
    if not ex.get("receive"):
        return ("The exercise on paper needs the hand-over check's cost of receiving a batch, which this run did not "
                "measure (`transfer_batch_sizes` is empty, or holds no batch of the sweep's size).")
    if not ex.get("workers"):
        return ("The exercise on paper needs the sweep with workers, which this run did not measure (`workers` has "
                "no count above 0).")
    b, size, bound, rate = ex["batch_size"], ex["file_size"], ex["bound"], ex["rate"]
    where = (f"{LABELS[ex['kind']].split(' (')[0]}, {_cache_word(facts, ex['cache'])}, "
             f"`num_workers={ex['workers_at']}`")
    cost = f"{ex['cost_ms']:.3g} ms"   # three significant digits: the bound worked from it by hand comes out as below
    intro = (f"**Work it out.** In the hand-over check (warm, one worker) the main process spent **{cost}** "
             f"of CPU receiving each batch of {b} samples of {size:,} bytes. The sweep's best rate with workers "
             f"and {_cache_word(facts, ex['cache'])} files was **{num(rate)} batches/s** ({where}).")
    questions = ["If receiving batches were all the main process did, one after another, how many batches per second "
                 "could it take at most?",
                 "How many MB/s is that (MB = 10⁶ bytes)?",
                 "What share of that bound did the sweep's best rate reach?"]
    answers = [f"1,000 ms ÷ {cost} = **{num(bound)} batches/s**.",
               f"{num(bound)} batches/s × {b} × {size:,} B "
               f"{equals(bound, '', lambda x: num(x * b * size / 1e6, 'MB/s') == num(ex['mbps'], 'MB/s'))} "
               f"**{num(ex['mbps'], 'MB/s')}**.",
               f"{num(rate)} ÷ {num(bound)} {equals(bound, '', lambda x: pct(shown(rate) / x) == pct(ex['share']))} "
               f"**{pct(ex['share'])}**."]
    return on_paper(intro, questions, answers)


def plateau_note(facts) -> str:
    """Where more workers stopped raising the rate (warm if measured, else cold), compared with the
    rate the main process's cost of receiving a batch would allow; no claim of what sets the pace
    beyond what the numbers show."""
    facts = facts_of(facts)
    pl = facts.data.get("plateau")
    if pl is None:
        return plateau_cause(facts) if facts.data.get("handover_modes") is not None else ""
    label = _cache_word(facts, pl["cache"])
    if not pl["found"]:
        return (f"{label.capitalize()}, the rate of every layout still rose up to the largest worker count measured: "
                "no plateau to explain.")
    lo, hi, ws, kinds = pl["low"], pl["high"], pl["workers"], pl["kinds"]
    who = "the layouts" if len(kinds) > 1 else LABELS[kinds[0]]
    if len(ws) > 1:
        text = (f"{label.capitalize()}, more workers stopped raising the rate: from `num_workers={ws[0]}` to "
                f"`num_workers={ws[-1]}` {who} ran at {fnd.span(lo, hi)} batches/s")
    else:
        text = (f"{label.capitalize()}, {who} peaked at `num_workers={ws[0]}` ({fnd.span(lo, hi)} batches/s; "
                "more workers were slower)")
    text += (f", with the main thread on a CPU {fnd.span(100 * pl['busy_low'], 100 * pl['busy_high'], '%')} of the "
             f"time ({fnd.span(pl['cpu_low'], pl['cpu_high'], 'ms')} of CPU per batch)")
    if pl["rising"]:
        text += f" ({', '.join(LABELS[k] for k in pl['rising'])} still rose up to the largest count)"
    text += ". "
    rr = pl["receive"]
    if rr is not None:
        rate = rr["rate"]
        text += (f"That plateau is {fnd.span(100 * lo / rate, 100 * hi / rate, '%')} of the {num(rate)} batches/s "
                 f"that the hand-over check's {num(rr['cost_ms'], 'ms')} of main-process CPU per received batch would "
                 "allow")
        text += {"above": ": above it, so the check's receive cost does not bound the sweep. ",
                 "within": (f": within {pct(PLATEAU_TOL)} of it, "
                            "so the plateau matches the main process's cost of receiving batches. "),
                 "below": ": below it. "}[rr["relation"]]
    if pl["main"] == "spare":
        text += ("The main thread was not on a CPU all the time, so its CPU time alone does not set the plateau, and "
                 "more workers did not raise it either.")
    elif pl["main"] == "bound":
        text += (f"The main thread was on a CPU at least {pct(MAIN_BOUND_SHARE)} of the time throughout: receiving "
                 "batches sets the pace there.")
    return text + " " + plateau_cause(facts)


def plateau_cause(facts) -> str:
    """What sets the plateau, decided by the hand-over modes check: if asking the worker for each batch's
    file descriptor sets it, the modes without one run faster; if all modes run level, the way a batch's
    memory is shared does not matter and what remains is the per-batch path through the one queue."""
    facts = facts_of(facts)
    text = ""
    share = (facts.data.get("plateau") or {}).get("worker_share")
    if share is not None:
        text += (f"Each worker was on a CPU {fnd.span(100 * share['low'], 100 * share['high'], '%')} of those epochs: "
                 + ("the workers were busy, so their work can set it. " if share["busy"] else
                    "the workers had time to spare, so their own work does not set the plateau either. "))
    hm = facts.data.get("handover_modes")
    if hm is None or not hm["ran"]:
        where = ("is not in the reference run" if facts.data.get("is_reference") else
                 "did not run (`handover_workers` is 0)")
        return text + f"The check that decides it, the same epoch with three ways of handing a batch over, {where}."
    if hm["default"] is None:
        return text + "The hand-over check has no run with PyTorch's default hand-over to compare against."
    text += (f"Warm, shard in order, `num_workers={hm['workers']}`: PyTorch's default hand-over (the batch in shared "
             f"memory, its file descriptor fetched from the worker) ran at {num(hm['default'])} batches/s; "
             + "; ".join(f"{say.code(o['mode'])}: {num(o['rate'])} batches/s, {_vs(o['vs'])} the default"
                         + (_overlap(o, hm) if o["mode"] in hm.get("wide", ()) else "")
                         for o in hm["others"]) + ". ")
    if hm["verdict"] == "unclear":
        return text + ("**These runs cannot tell the explanations apart**: a mode whose mean differs from the "
                       "default's by more than the check's tolerance still overlapped it run for run; more epochs "
                       "(`runs`) would decide.")
    if hm["verdict"] == "file descriptor":
        return text + ("**The data support the file-descriptor explanation**: handing batches over without asking "
                       "the worker for a descriptor (" + ", ".join(say.code(m) for m in hm["faster"])
                       + ") raised the rate, so that per-batch request sets the plateau.")
    if hm["verdict"] == "shared memory":
        return text + ("**The data support the shared-memory explanation**: only leaving shared memory out altogether "
                       "(bytes through the pipe) raised the rate; naming the memory by a file instead of a descriptor "
                       "did not, so setting up shared memory for every batch, not the request for its descriptor, "
                       "sets the plateau.")
    if hm["verdict"] == "neither":
        return text + ("Both alternatives were slower, so the descriptor is not what limits the default; this "
                       "run does not show what does.")
    return text + ("**The way a batch's memory is shared does not set the plateau**: without a descriptor, or "
                   "without shared memory at all, the rate stayed level. What remains is the per-batch path every "
                   "mode shares: the worker pickles the batch into the one queue, the main thread wakes up, "
                   "unpickles it and takes the batches in order.")


def _main_bound_text(facts: Facts, mb: dict) -> str:
    """The main process at the most workers: whether it bounds the layouts, then the shares behind it."""
    w, bound, free = mb["workers"], mb["bound"], mb["free"]
    text = (f"**The main process at `num_workers={w}`** ({_cache_word(facts, mb['cache'])}) wanted a CPU (on one, or "
            f"waiting for one) {fnd.span(mb['low'], mb['high'], '%')} of the steady state, depending on the layout: ")
    if not free:
        text += (f"at least {pct(MAIN_BOUND_SHARE)} for every layout, so it is the bottleneck: it cannot take "
                 "batches faster, however many workers prepare them")
        v = mb["shuffled"]
        if v is not None:
            text += fnd.choose(v["direction"], f"; the shuffled shard still ran {_vs(v)} the small files.",
                               f"; the small files even ran {fnd.times(v['ratio'])} faster than the shuffled shard.",
                               ", which is why the shuffled shard and the small files converge.")
        else:
            text += "."
    elif not bound:
        text += f"less than {pct(MAIN_BOUND_SHARE)} for every layout: it had time to spare."
    else:
        text += (f"at least {pct(MAIN_BOUND_SHARE)} for " + ", ".join(LABELS[k] for k in bound)
                 + ", where it is the bottleneck; for " + ", ".join(LABELS[k] for k in free)
                 + " it had time to spare.")

    def part_text(x):
        t = f"{LABELS[x['kind']]}: on a CPU {pct(x['busy'])}"
        if x["waiting"] is not None:
            t += f", waiting for one {pct(x['waiting'])}"
        return t + f" ({num(x['batches_per_s'])} batches/s)"

    detail = ("Share of the steady state its receiving thread spent: " + "; ".join(part_text(x) for x in mb["kinds"])
              + ".")
    if mb["waited"]:
        detail += " Waiting for a CPU means this machine had fewer free cores than runnable processes."
    return f"{text} {detail + _ceiling_sentence(facts, mb['ceiling'])}"


# --------------------------------------------------------------------------- computed notes
def hand_over_note(facts) -> str:
    """The hand-over check's result (one worker vs none, warm), or why it is missing."""
    ho = _ho(facts_of(facts))
    if ho is None:
        return "The hand-over check was switched off (`transfer_batch_sizes = []`)."
    return " ".join(t for t in (_one_worker_text(ho), _one_worker_detail(ho)) if t)


def main_process_table(res) -> pd.DataFrame:
    """Per (cache, workers, kind): the main thread's share of the steady state on a CPU, waiting for
    one, and both together (wanting the CPU), with batches per second; means over the epochs."""
    e = _epochs_frame(res).copy()
    if "main_waiting_for_cpu" not in e:
        e["main_waiting_for_cpu"] = float("nan")
    e["wanting"] = e["main_busy"] + e["main_waiting_for_cpu"].fillna(0.0)
    g = e.groupby(["cache", "workers", "kind"], sort=False)
    out = g.agg(on_cpu=("main_busy", "mean"), waiting_for_cpu=("main_waiting_for_cpu", "mean"),
                wanting=("wanting", "mean"), wanting_min=("wanting", "min"), wanting_max=("wanting", "max"),
                batches_per_s=("batches_per_s", "mean"), n=("run", "size")).reset_index()
    return out


def main_process_note(facts) -> str:
    """How busy the main process was at the most workers, and whether that makes it the bottleneck."""
    facts = facts_of(facts)
    mb = facts.data.get("main_bound")
    return _main_bound_text(facts, mb) if mb is not None else "The sweep had no run with workers."


def first_batch_note(facts) -> str:
    """Time to the first batch at the most workers, and its share of an epoch."""
    facts = facts_of(facts)
    f = facts.get("first_batch")
    if f is None:
        return startup_note(facts)
    c = f.setting.get("cache")
    label = say.text(facts.data.get("cold_label") or "cold") if c == "cold" else say.text(c)
    text = (f"**Time to the first batch** with `num_workers={f.setting['workers']}` ({label}): **{say.value(f)}**, "
            f"{say.value(facts['first_batch.share'], runs=False)} of the whole epoch on average")
    if f"startup.{c}.max" in facts:
        text += f" (up to {say.value(facts[f'startup.{c}.max'], runs=False)})"
    if "first_batch.vs_fewest" in facts:
        fewest = facts["first_batch.fewest"]
        text += (f", against {say.value(fewest, runs=False)} with `num_workers={fewest.setting['workers']}`: "
                 f"{say.comparison(facts['first_batch.vs_fewest'], facts, baseline='that')}")
    text += ". The steady-state figures above leave it out; whole-epoch figures include it."
    return " ".join(t for t in (text, startup_note(facts, c)) if t)


def chapter2_recap(run_dir, reference_host: str | None = None) -> str:
    """What chapter 2 measured, from the facts it exported: this run's result when the run holds one, else the
    reference run's."""
    from datajourney.core import results

    path = Path(results.resolve_run_dir(run_dir)) / f"{STORAGE_CHAPTER}.json"
    r, whose = None, ""
    if path.exists():
        r, whose = results.Result.load(path), "in this run"
    else:
        r = results.load_reference(STORAGE_CHAPTER, reference_host)
        whose = f"on the reference host ({r.run_id})" if r is not None else ""
    if r is None:
        return "Chapter 2 has not been run here, and no reference result of it is committed."
    facts = r.facts  # what chapter 2 exported, as stored: its tables and code are not read here
    if facts is None:
        return ("Chapter 2's result holds no facts (it was written before they were stored; "
                "`python -m datajourney.book.analyse` stores them).")
    c = facts.get("cold_gap") if "cold_gap" in facts.exports else None
    if c is None or c.number is None:
        return ""
    return ran(facts, "cold_gap", f"Chapter 2 measured, {whose}, in plain Python: ") + "."


def one_worker_note(facts) -> str:
    """Where one worker was slower than none in the sweep, per kind and cache state."""
    facts = facts_of(facts)
    rows = facts.data.get("one_vs_none")
    if rows is None:   # the hand-over check measures one worker against none on its own; the sweep's epochs did not
        return ("The workers sweep itself ran no `num_workers=1` beside `num_workers=0`"
                + (", so its epochs add nothing to the hand-over check above." if _ho(facts) else "."))
    lines = [f"{LABELS[x['kind']]}, {x['cache']}: one worker {_vs(x['vs'])} none "
             f"({num(x['one'], 'MB/s')} vs {num(x['none'], 'MB/s')})" for x in rows]
    return ("In the sweep (steady state): " + "; ".join(lines) + ".") if lines else ""


def cold_vs_warm_note(facts) -> str:
    """How much faster warm epochs ran than cold ones, per kind, at the fewest and the most workers."""
    facts = facts_of(facts)
    keys = [k for k in facts.data.get("cold_vs_warm") or [] if k in facts]
    if not keys:
        return ""
    label = say.text(facts.data.get("cold_label") or "cold")
    parts = [f"{say.text(LABELS[facts[facts[k].of].setting['kind']])}, "
             f"`num_workers={facts[facts[k].of].setting['workers']}`: {say.ratio_words(facts[k])}" for k in keys]
    text = "Steady-state throughput, warm against " + label + ": " + "; ".join(parts) + ". "
    g = facts.get("warm_layout_gap")
    if g is not None:
        w0 = facts[g.of].setting["workers"]
        text += (f"Warm, with `num_workers={w0}`, the in-order shard ran "
                 f"{say.comparison(g, facts, baseline='the small files')}; the source reports that warm the "
                 "difference \u201ccollapses to near 1x\u201d: "
                 + ("here it does. " if facts["warm_layout_gap.verdict"].value == "collapses"
                    else "here it does not. "))
    lo, hi = facts["cold_vs_warm.least"], facts["cold_vs_warm.most"]
    text += (f"The cache state changes throughput by between {say.ratio_words(lo)} and {say.ratio_words(hi)} here"
             + {"order": ", an order of magnitude or more in the largest case.",
                "less": ", less than an order of magnitude.",
                "little": ": little, in every configuration."}[facts["cold_vs_warm.scale"].value])
    return text


def workers_gain_note(facts) -> str:
    """How much each layout gained from workers: steady MB/s at 4 workers (or the most) over none, cold."""
    facts = facts_of(facts)
    g = facts.data.get("workers_gain")
    if not g or not g["keys"]:
        return ""
    w = g["workers"]
    parts = [f"{say.text(LABELS[facts[facts[k].of].setting['kind']])}: "
             f"{say.comparison(facts[k], facts, baseline='none')}" for k in g["keys"]]
    label = say.text(facts.data.get("cold_label") or "cold") if g["cache"] == "cold" else say.text(g["cache"])
    return f"What {w} workers bought over none ({label}, steady state MB/s): " + "; ".join(parts) + "."


def published_note(facts: Facts) -> str:
    """This run's like-for-like ratios beside the published ones, and what still differs."""
    from datajourney.chapters import published

    facts = facts_of(facts)
    out = []
    for w in PUBLISHED_WORKERS:
        fig = published.figure(CHAPTER, f"shard ÷ small files, workers={w}")
        c = facts.get(f"published_w{w}")
        if fig is None or c is None or c.published is None:
            continue
        out.append(f"`num_workers={w}`: published {fig.text}, this run {say.headline(c)}")
    if not out:
        return ""
    text = "Shard ÷ small files, like for like: " + "; ".join(out) + "."
    if facts.data.get("guest_cold"):
        text += f" This run's cold reads were {say.GUEST_COLD}, the published ones came from a physical drive."
    return text


def startup_note(facts, skip: str | None = None) -> str:
    """Start-up and the first batch as a share of an epoch at the most workers, per cache state
    (leaving out ``skip``, the state the first-batch finding already states)."""
    facts = facts_of(facts)
    st = facts.data.get("startup") or {}
    parts = [f"{say.text(facts[f'startup.{c}'].label.split(', ')[0])}, {say.value(facts[f'startup.{c}'], runs=False)} "
             f"of an epoch on average (up to {say.value(facts[f'startup.{c}.max'], runs=False)})"
             for c in st.get("caches", []) if c != skip and f"startup.{c}" in facts]
    if not parts:
        return ""
    return (f"With `num_workers={st['workers']}`, start-up and the first batch took: " + "; ".join(parts)
            + ". This is why the steady state is reported apart from it.")


def spread_notes(facts) -> str:
    """One sentence naming every configuration whose steady-state MB/s spread by more than
    :data:`findings.HIGH_SPREAD` (coefficient of variation), from the facts' data."""
    facts = facts_of(facts)
    wide = [f"{say.text(x['label'])}, `num_workers={x['workers']}` ({fnd.span(x['low'], x['high'], 'MB/s')}, "
            f"coefficient of variation {say.share(x['cv'])})" for x in facts.data.get("spread") or []]
    if not wide:
        return (f"No configuration varied by more than {say.share(stats.HIGH_SPREAD)} (coefficient of variation) over "
                "its runs.")
    return (f"Runs varied by more than {say.share(stats.HIGH_SPREAD)} (coefficient of variation) for "
            + "; ".join(wide) + ": read those as ranges, not points.")


def residency(facts: Facts) -> str:
    """Whether cold epochs started cold and warm ones warm: the residency measured when each epoch began."""
    return residency_words(facts_of(facts), "epochs")


def in_order_note(facts) -> str:
    """Where the in-order shard read slower with workers than without (cold): the measured numbers,
    stated with the explanation the data support (:func:`in_order_cause`)."""
    facts = facts_of(facts)
    f = facts.get("in_order.slower")
    if f is None:
        return ""
    none = facts[f.setting["none"]]
    slower = f.setting["workers"]
    text = (f"Read {say.text(facts.data.get('cold_label') or 'cold')}, the in-order shard ran at "
            f"**{say.value(none, runs=False)}** with no workers and at "
            + ", ".join(f"{say.value(facts[k], runs=False)} (`num_workers={facts[k].setting['workers']}`)"
                        for k in f.setting["rates"])
            + " with workers: "
            + ("slower with every worker count measured" if f.setting["every"] else
               "slower with `num_workers=" + "`, `".join(str(w) for w in slower) + "`")
            + ", although workers read several batches at once"
            + "".join(f"; with `num_workers={w}` "
                      f"{say.comparison(facts[f'in_order.slowdown.w{w}'], facts, baseline='no workers')}"
                      for w in slower if f"in_order.slowdown.w{w}" in facts)
            + ". " + in_order_cause(facts))
    return text


def in_order_cause(facts) -> str:
    """Which explanation of the in-order shard's cold slowdown with workers the data support.

    Two readings: (a) the device: each worker opens the shard and reads every W-th batch, so the
    kernel's readahead serves W interleaved streams and the device gets smaller requests; then the
    device's average request shrinks with workers and cold runs slower than warm at the same count.
    (b) the hand-over: the rate with workers is set by moving batches to the main process, cold or
    warm alike; then cold runs as fast as warm at the same worker count, whatever the requests."""
    facts = facts_of(facts)
    cw = facts.get("in_order.cold_vs_warm")
    warm_level = None if cw is None else cw.setting["direction"] >= 0
    warm_text = ""
    if cw is not None:
        warm_text = (f"With `num_workers={cw.setting['workers']}` the "
                     f"{say.text(facts.data.get('cold_label') or 'cold')} read ran "
                     f"{say.comparison(cw, facts, baseline='the warm one')} ({say.value(facts[cw.of], runs=False)} vs "
                     f"{say.value(facts[cw.basis], runs=False)}, warm: no device at all)")
    rq = facts.get("in_order.request")
    if rq is None:
        where = ("not in the reference run" if facts.data.get("is_reference") else
                 "not recorded in this run (the data directory is not on a block device)")
        text = f"The device's own counters (`/proc/diskstats`) for these epochs are {where}. "
        if warm_level is None:
            return text + "This run cannot say which explanation holds."
        return text + warm_text + (": the device is not what slows it down; the hand-over of batches to the main "
                                   "process (below) sets the rate with workers." if warm_level else
                                   ": reading from the device cost throughput here, but without the device's "
                                   "counters this run cannot say whether interleaved readahead is why.")
    k0, kw = facts[rq.basis], facts[rq.of]
    m0, mw = facts.get("in_order.merges.w0"), facts.get(f"in_order.merges.w{kw.setting['workers']}")
    shrank = facts["in_order.request.shrank"].value == "yes"
    text = (f"The device saw requests of {say.value(k0, runs=False)} on average with no workers and "
            f"{say.value(kw, runs=False)} with `num_workers={kw.setting['workers']}`"
            + (f" ({say.value(m0, runs=False)} and {say.value(mw, runs=False)} merges per request)"
               if m0 is not None and mw is not None else "")
            + ": " + ("smaller with workers. " if shrank else "not smaller with workers. "))
    if warm_level is None:
        return text + ("Interleaved readahead streams break the reads into smaller requests, but this run has no "
                       "warm epochs to tell whether that costs throughput." if shrank else
                       "The reads reached the device as before, so interleaved readahead is not the cause; "
                       "this run has no warm epochs to test the hand-over.")
    text += warm_text + ". "
    if shrank and not warm_level:
        return text + ("**The data support the device explanation**: with workers each reading every n-th batch, "
                       "readahead serves interleaved streams, the requests shrink and the cold read falls behind "
                       "the warm one.")
    if warm_level:
        return text + ("**The data support the hand-over explanation**: the cold read kept up with the warm one, "
                       "so the device did not set the rate" + (" even though its requests shrank" if shrank else "")
                       + "; moving batches to the main process did (see the plateau below).")
    return text + ("Neither explanation fits: the requests kept their size, yet the cold read fell behind the warm "
                   "one; this run does not show why.")


def device_table(res) -> pd.DataFrame:
    """What the device saw during the cold epochs, per layout and worker count: requests, KiB per
    request and merges per request (means over epochs); empty when the result has no counters."""
    e = _epochs_frame(res)
    if "dev_request_bytes" not in e:
        return pd.DataFrame()
    c = e[(e["cache"] == "cold") & e["dev_request_bytes"].notna()]
    if c.empty:
        return pd.DataFrame()
    c = c.assign(kib=c["dev_request_bytes"] / 1024)
    for col in ("dev_reads", "dev_merge_ratio"):
        if col not in c:
            c[col] = float("nan")
    g = c.groupby(["kind", "workers"], sort=False)
    out = g.agg(requests=("dev_reads", "mean"), kib=("kib", "mean"), merges=("dev_merge_ratio", "mean")).reset_index()
    out["kind"] = out["kind"].map(LABELS)
    return out.rename(columns={"kind": "layout", "workers": "num_workers", "requests": "requests per epoch",
                               "kib": "KiB per request", "merges": "merges per request"})


def throughput_table(res) -> pd.DataFrame:
    """Mean steady-state MB/s of each layout per (cache, workers), and each shard's ratio to the
    small files; readable headers and the cold label."""
    sp = speedups(_epochs_frame(res))
    sp["cache"] = sp["cache"].map(lambda c: cold_label(res) if c == "cold" else c)
    names = {k: f"{v} (MB/s)" for k, v in LABELS.items()}
    names.update({"shard ÷ small files": "shard, shuffled ÷ small files (×)",
                  "shard_in_order ÷ small files": "shard, in order ÷ small files (×)",
                  "workers": "num_workers"})
    cols = ["cache", "workers", *[k for k in KINDS if k in sp], *[c for c in sp.columns if "÷" in c]]
    return sp[cols].rename(columns=names)


def hand_over_table(res) -> pd.DataFrame:
    """The hand-over check as the prose reads it: ms per batch with no worker and with one, the
    extra (mean and min–max over paired runs), and CPU per batch of the main process alone, the
    worker, and the main process receiving."""
    tc = transfer_cost(res.table("transfer"))
    spans = [fnd.span(*iv) if (iv := runs_interval(a, b, n)) else "—"
             for a, b, n in zip(tc["extra_min"], tc["extra_max"], tc["n"], strict=True)]
    runs = sorted({int(n) for n in tc["n"]})
    # no range from fewer runs (runs_interval): where no row has one, the column goes and the header says
    # how many runs each mean is of
    extra = "extra (ms)" if any(x != "—" for x in spans) else \
        f"extra (ms, mean of {'–'.join(map(str, runs))} paired runs)"
    ranges = {"extra, min–max over the runs (ms)": spans} if extra == "extra (ms)" else {}
    return pd.DataFrame({
        "payload": tc["payload"].map({"bytes": "bytes", "length": "length only"}),
        "batch": tc["batch_size"],
        "no worker (ms)": tc["w0_ms_per_batch"],
        "one worker (ms)": tc["w1_ms_per_batch"],
        extra: tc["extra_ms_per_batch"],
        **ranges,
        "CPU, main alone (ms)": tc["main_cpu_ms_per_batch_w0"],
        "CPU, worker (ms)": tc["worker_cpu_ms_per_batch_w1"],
        "CPU, main receiving (ms)": tc["main_cpu_ms_per_batch_w1"],
    })


def main_process_display(res) -> pd.DataFrame:
    """:func:`main_process_table` as the chapter shows it: percent, readable names, no empty columns."""
    mp = main_process_table(res)
    out = pd.DataFrame({
        "cache": mp["cache"].map(lambda c: cold_label(res) if c == "cold" else c),
        "num_workers": mp["workers"],
        "layout": mp["kind"].map(LABELS),
        "on a CPU (%)": 100 * mp["on_cpu"],
        "waiting for one (%)": 100 * mp["waiting_for_cpu"],
        "batches/s": mp["batches_per_s"],
    })
    return out.dropna(axis=1, how="all")


def latency_note(facts) -> str:
    """What "cold" meant in this run: the one classification of :func:`common.cold_verdict` (chapter 2's
    latency check of the same run when there is one, else this chapter's own), saying which it used."""
    facts = facts_of(facts)
    g = facts["cold_state"].setting
    v = ColdVerdict(g["state"], tuple(g.get("medians") or ()), g.get("share_below"), bool(g.get("hypervisor")),
                    g.get("source") or "this chapter's latency check", float(g.get("floor_us")))
    text = v.sentence()
    own = facts.get("own_latency")
    if v.source.startswith("chapter 2") and own is not None:
        text += (f" This chapter's own check, on its own data set, measured a median of {num(own.number, 'µs')}"
                 f" ({own.setting['reads']:,} reads); the label follows chapter 2's, measured once for the whole run.")
    return text


# --------------------------------------------------------------------------- the opening
def opening(facts: Facts) -> Opening:
    """What the chapter opens with: the layout gap without workers, what the most workers left of it, and
    the cost of starting them, one sentence each; then the worker count and the layout the analysis
    advises, with their measured gain."""
    facts = facts_of(facts)
    out = []
    if "published_w0" in facts:
        c = facts["published_w0"]
        out.append(Finding(c.key, ran(facts, c.key) + ".",
                           c.number, "×", c.published))
    if "shuffled_gap_max_workers" in facts:
        c = facts["shuffled_gap_max_workers"]
        out.append(Finding(c.key, ran(facts, c.key) + ".",
                           c.number, "×"))
    if "first_batch" in facts:
        f = facts["first_batch"]
        out.append(Finding("first_batch", f"{cap(say.text(f.label))} was **{say.value(f, runs=False)}**, "
                           f"{say.value(facts['first_batch.share'])} of an epoch.", f.number, "ms"))
    return Opening(say.define_first(out[:3], facts.get("cold_state")), actions(facts)[:3])


def actions(facts: Facts) -> list[Action]:
    """The two answers in the order a reader acts on them: where this run says to change the layout, that first,
    and the worker count after it as what to set for files kept one per sample (the two are alternatives, not
    steps)."""
    layout, workers = facts.advice_for("small_files.layout"), facts.advice_for("small_files.num_workers")
    rest = [a for a in facts.advice if a not in (layout, workers)]
    if layout is None or layout.verdict == "keep" or workers is None:
        return [Action(say.advice(a, facts), a.snippet) for a in facts.advice]
    lead = "If you keep one file per sample instead," + (   # the workload said once, in the first answer
        "" if workers.workload == layout.workload else f" for {say.text(workers.workload)},")
    return [Action(say.advice(layout, facts), layout.snippet),
            Action(say.advice(workers, facts, lead=lead), workers.snippet),
            *[Action(say.advice(a, facts), a.snippet) for a in rest]]
