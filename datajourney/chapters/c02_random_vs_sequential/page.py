"""Chapter 2's page: it words the facts of :mod:`.analysis` (opening, key results, notes) through
:mod:`datajourney.core.phrasing`, and shapes the result's tables for display (evidence).

Every sentence that states a measured outcome takes its numbers and its direction from a fact; every
string that comes from a result file reaches Markdown through ``phrasing.code`` or ``phrasing.text``.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from datajourney.chapters.c02_random_vs_sequential.analysis import DIP_TOL
from datajourney.chapters.c02_random_vs_sequential.analysis import analyse as _analyse
from datajourney.chapters.c02_random_vs_sequential.params import Params
from datajourney.chapters.common import (
    UNDECIDED_WORDS,
    ColdVerdict,
    facts_reader,
    on_paper,
    short_time,
    table_of,
)
from datajourney.chapters.wording import cap, fact_finding, pair_words, ran, residency_words
from datajourney.core import phrasing as fnd
from datajourney.core import phrasing as say
from datajourney.core import stats
from datajourney.core.facts import Facts
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.units import equals, num, pct, shown, size_label

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)


# --------------------------------------------------------------------------- wording helpers


def _label(facts: Facts, key: str) -> str:
    f = facts.get(key)
    return say.text(f.label) if f is not None else ""


def cold_name(facts) -> str:
    """The run's name for its cold state ('guest-cold' or 'cold'), as the analysis stored it (``cold_label``): the
    word the charts and tables label their cold rows with."""
    return facts_of(facts).data.get("cold_label") or "cold"


def _cold(facts: Facts) -> str:
    return say.text(cold_name(facts))


def _served(facts: Facts) -> str:
    """A short clause: what served a cold read, from the cold-state fact."""
    st = facts.get("cold_state")
    state = st.setting.get("state") if st is not None else None
    hyper = bool(st.setting.get("hypervisor")) if st is not None else False
    return {"cache": ("faster than a NAND flash read, so a cache below this machine served it"
                      + (": guest-cold" if hyper else "")),
            "device": "as slow as a device read, so a cold read reached the device",
            "undecided": UNDECIDED_WORDS,
            }.get(state, "not measured")


def _verdict(facts: Facts) -> ColdVerdict | None:
    """The cold-state fact as the shared classification, for its one explanation of the rule."""
    st = facts.get("cold_state")
    if st is None or st.setting.get("state") is None:
        return None
    g = st.setting
    return ColdVerdict(g["state"], tuple(g.get("medians") or ()), g.get("share_below"), bool(g.get("hypervisor")),
                       g.get("source") or "this chapter's latency check", float(g.get("floor_us")))


def key_metrics(facts) -> dict:
    """The chapter's headline numbers as metric -> (mean, std), for the three-column table."""
    return {k: tuple(v) for k, v in (facts_of(facts).data.get("key_metrics") or {}).items()}


#: The latency table's columns and their headers.
#: The page's series in one order, which gives each its colour in every chart (``series_colours``): the cache
#: states and access patterns of the headline and the size sweep first, then the latency passes, the read modes
#: and the purge chart's run. More series than colours: the colours come round again in the read modes, whose
#: chart's neighbours (the size sweep, the purges) use none of the colours they take again.
SERIES = ("cold", "warm", "random", "sequential", "page cache (warm)", "O_DIRECT, first pass", "O_DIRECT, second pass",
          "buffered", "O_DIRECT", "this run", "reference run")


def chart_series(facts) -> list[str]:
    """:data:`SERIES` as this run's charts name them: the cold state by :func:`cold_name`."""
    cold = cold_name(facts)
    return [cold if s == "cold" else s for s in SERIES]


LATENCY_COLUMNS = {"series": "pass", "run": "run", "reads": "reads", "p10_us": "p10 (µs)", "p50_us": "median (µs)",
                   "p90_us": "p90 (µs)", "p99_us": "p99 (µs)", "max_us": "max (µs)", "error": "error"}


def latency_table(res) -> pd.DataFrame:
    """The latency check per pass and run, readable headers; columns empty in every row are left out."""
    lat = table_of(res, "latency")
    cols = [c for c in LATENCY_COLUMNS if c in lat and lat[c].notna().any()]
    return lat[cols].rename(columns=LATENCY_COLUMNS)


# --------------------------------------------------------------------------- key results
def findings(facts: Facts) -> list[Finding]:
    """The chapter's key results, worded from ``facts`` (3 to 6 findings), shown under the opening, which defines
    the cold state's word at its first use."""
    facts = facts_of(facts)
    out = [f for f in (_cold_gap(facts), _warm_gap(facts), _latency_finding(facts), _size_finding(facts),
                       _odirect_finding(facts)) if f is not None]
    if len(out) < 3:   # a run with most experiments switched off: say what the rest showed
        extra = [Finding("shard_length", shard_length_note(facts)), Finding("residency", residency_note(facts))]
        out += [f for f in extra if f.text][: 3 - len(out)]
    return out   # what "cold" means here is said once, by the opening above them (:func:`opening`)


def _cold_gap(facts: Facts) -> Finding:
    if "cold_gap" not in facts:
        return Finding("cold_gap", f"No {_cold(facts)} runs in this result (`cache_states` left out `cold`).")
    return fact_finding(facts, "cold_gap", pair_words(facts, "cold_gap") + ".")


def _warm_gap(facts: Facts) -> Finding:
    if "warm_gap" not in facts:
        return Finding("warm_gap", "No warm runs in this result (`cache_states` left out `warm`).")
    verdict = facts["warm_gap.verdict"].value
    text = (pair_words(facts, "warm_gap") + ". Every page was in RAM. The source reports that warm the gap "
            "\u201ccollapses to near 1x\u201d; ")
    text += {"collapses": "here it does (within 1.1× either way counts as near 1×).",
             "reverses": "here it reverses: the small files read faster than the shard.",
             "stays open": ("here it does not. With the device out of the picture, what still differs between the "
                            "layouts is the per-file `open` and `close` (and the lookup of each path), which the "
                            "shard does not pay; this run does not time those calls on their own.")}[verdict]
    return fact_finding(facts, "warm_gap", text)


def _latency_finding(facts: Facts) -> Finding | None:
    if "cold_latency" not in facts:
        err = facts.data.get("latency_error")
        if err:
            return Finding("cold_latency", "The latency check could not use `O_DIRECT` on this file system "
                           f"({say.code(err)}): whether cold reads reach the device is unknown.")
        return None
    lat = facts["cold_latency"]
    text = (f"{cap(say.text(lat.label))}, after a purge, took a median **{say.value(lat)}** (p10 "
            f"{say.value(facts.get('cold_latency.p10'), runs=False)}, p90 "
            f"{say.value(facts.get('cold_latency.p90'), runs=False)}, p99 "
            f"{say.value(facts.get('cold_latency.p99'), runs=False)}; {num(lat.setting.get('reads'))} reads)")
    if "cold_latency.warm" in facts:
        text += f"; a page-cache hit took {say.value(facts['cold_latency.warm'])}"
    text += ". "
    v = _verdict(facts)
    if v is not None:
        text += v.sentence(head=False)
    c = facts.get("second_pass")
    if c is not None:
        text += f" A second pass over the same blocks ran {say.comparison(c, facts)}"
        text += (": the first pass filled a cache below the guest's page cache." if not c.level and c.number < 1
                 else "; both passes were served from the same place." if c.level else ".")
    return fact_finding(facts, "cold_latency", text)


def _size_finding(facts: Facts) -> Finding | None:
    if "size_sweep" not in facts:
        return None
    small, large = facts.data["size_sweep_sizes"]
    # the setting both sides share (the cold state) is said once, where the sentence starts
    subject, at_small, _ = say.contrast(facts[f"size.{small}"], facts)
    at_large = say.contrast(facts["size_sweep"], facts)[1]
    text = (f"{cap(_cold(facts))}, by file size: at {size_label(small)} per file {subject} ran {at_small}; at "
            f"{size_label(large)}, {at_large}. ")
    text += {"narrows": "The gap narrows as files grow", "widens": "The gap widens as files grow",
             "stays": "The gap stays about the same across file sizes"}[facts["size_sweep.trend"].value]
    text += {"no": f", but at {size_label(large)} the two layouts have not converged: sequential is still faster.",
             "reversed": f", and at {size_label(large)} the files read faster than the shard.",
             "yes": f", and at {size_label(large)} the two layouts are level within the runs' spread: they converge."
             }[facts["size_sweep.converged"].value]
    return fact_finding(facts, "size_sweep", text)


def _caught_up(facts: Facts) -> str:
    f = facts.get("odirect.caught_up_at")
    if f is None:
        return ""
    if f.number is not None:
        return (f"From {size_label(int(f.number))} per request on, `O_DIRECT` was level with or faster than "
                "buffered reads.")
    return f"Up to {size_label(int(f.setting['largest']))} per request `O_DIRECT` stayed below buffered reads."


def _odirect_finding(facts: Facts) -> Finding | None:
    if "odirect" not in facts:
        return None
    text = (f"{pair_words(facts, 'odirect')} (`O_DIRECT`: no readahead, one request at a time). " + _caught_up(facts))
    return fact_finding(facts, "odirect", text)


# --------------------------------------------------------------------------- notes beside the evidence
def latency_note(facts: Facts) -> str:
    """The latency check as a sentence (empty when it did not run)."""
    f = _latency_finding(facts)
    return f.text if f is not None else ""


def size_note(facts) -> str:
    """The file-size sweep's result, then a comment on every configuration with a wide spread."""
    facts = facts_of(facts)
    f = _size_finding(facts)
    return "\n\n".join(t for t in ((f.text if f else ""), size_sweep_notes(facts)) if t)


def odirect_note(facts) -> str:
    """The read-size sweep's result, the dips and wide spreads, and any O_DIRECT error (as code: it comes
    from the result file)."""
    facts = facts_of(facts)
    f = _odirect_finding(facts)
    parts = [f.text if f else "", chunk_sweep_notes(facts)]
    errors = facts.data.get("odirect_errors") or []
    if errors:
        parts.append("`O_DIRECT` could not be used on this file system: " + "; ".join(say.code(e) for e in errors))
    return "\n\n".join(t for t in parts if t)


def published_note(facts: Facts) -> str:
    """The published cold ratio beside this run's, and whether the two 'cold's are comparable."""
    from datajourney.chapters import published

    fig = published.figure("02_random_vs_sequential", "sequential ÷ random, cold")
    c = facts.get("cold_gap")
    if fig is None or c is None or c.number is None:
        return ""
    text = f"Published cold ratio: {fig.text}; this run's: {say.headline(c)}. "
    g = facts.data.get("guest_cold")
    if g:
        text += ("This run's cold reads were guest-cold (latency check below): a cache under the virtual machine "
                 "served them, while the published figures come from a physical drive, so the two 'cold's differ.")
    elif g is False:
        text += "The latency check below found this run's cold reads no faster than flash."
    return text


def shard_length_note(facts: Facts) -> str:
    """Why the headline's sequential read and the sweep's differ: same settings, two shard lengths."""
    if "shard_length.by_length" not in facts:
        return ""
    short, part, whole = (facts[f"shard_length.{k}"] for k in ("short", "part", "whole"))
    chunk = int(short.setting["chunk"])
    text = (f"Read cold with the same {size_label(chunk)} requests, in shuffled order within each run: "
            f"{say.text(short.label)} ran at **{say.value(short)}**, {say.text(part.label)} at "
            f"**{say.value(part)}** and {say.text(whole.label)} at **{say.value(whole)}**. ")
    ln, fl = facts["shard_length.by_length"], facts["shard_length.by_file"]
    text += f"Same file, longer read: {say.text(whole.label)} ran {say.comparison(ln, facts)}. "
    text += f"Same length, other file: {say.text(part.label)} ran {say.comparison(fl, facts)}. "
    if not ln.level and ln.number > 1 and fl.level:
        text += ("So the difference between the headline and the sweep comes from the length of the read: what is "
                 "paid once per read (opening the file, the first requests while the readahead window grows) weighs "
                 "more over fewer bytes.")
    elif ln.level and not fl.level:
        text += ("So the difference comes from the file (where its blocks lie, or whether a cache below the guest "
                 "holds them), not from the length of the read.")
    elif not ln.level and not fl.level:
        text += "Both the length of the read and the file make a difference in this run."
    else:
        text += ("Neither makes a difference beyond the runs' spread: a gap between the headline and the sweep in "
                 "this run is run-to-run variation.")
    firsts = [facts[k] for k in ("first_read.short", "first_read.part") if k in facts]
    if firsts:
        text += " " + cap(" and ".join(f"{say.text(f.label)} took {say.value(f)}" for f in firsts)) + "."
    if "shard_length.headline" in facts:
        hd, sw = facts["shard_length.headline"], facts["shard_length.sweep"]
        text += (f" For comparison, {say.text(hd.label)} averaged {say.value(hd)} and {say.text(sw.label)} "
                 f"{say.value(sw)}.")
    return text


def dd_note(facts: Facts) -> str:
    """The harness against ``dd``: the measured ratio, nothing more."""
    if "dd_ratio" not in facts:
        return "The `dd` check was switched off (`dd_check = False`)."
    py, d = facts["dd.python"], facts["dd.dd"]
    return (f"{cap(say.text(py.label))} ran at **{say.value(py)}** and {say.text(d.label)} at {say.value(d)}: "
            f"{say.comparison(facts['dd_ratio'], facts)}.")


def residency_note(facts: Facts) -> str:
    """Whether cold runs started cold and warm runs warm: the residency measured when each timed read began."""
    return residency_words(facts, "runs")


def purge_note(facts: Facts) -> str:
    """drop_caches vs fadvise: the residency each purge left, and fadvise ÷ drop_caches run by run
    (the two purges of a run read the same files back to back, so machine-wide swings cancel)."""
    if "purge.fadvise" not in facts:
        return ""
    fa, dc = facts["purge.fadvise"], facts["purge.drop_caches"]
    text = (f"After `fadvise` the 'cold' small files read at **{say.value(fa)}**, after `drop_caches` at "
            f"**{say.value(dc)}**. ")
    left = {m: facts[f"purge.resident.{m}"] for m in ("drop_caches", "fadvise") if f"purge.resident.{m}" in facts}
    if left and all(f.number == 0 for f in left.values()):
        text += "Both purges left none of the data pages resident when the timed read started. "
    else:
        text += "; ".join(f"`{m}` left up to {say.value(f)} of the data pages resident" for m, f in left.items()) + ". "
    p = facts.get("purge_paired")
    if p is not None:
        d = facts["purge_paired.direction"]
        every = f"in all {p.n} runs" if p.n > 1 else "in the one run"
        text += ("Run by run (each run reads the same files after both purges), `fadvise` ÷ `drop_caches` was "
                 f"**{say.value(p)}**. ")
        text += {
            "faster": (f"`fadvise` was faster {every}: the difference is the directory entries and inodes that only "
                       "`drop_caches` evicts, so a rootless cold run of many small files overstates what a truly cold "
                       "start delivers."),
            "slower": (f"`fadvise` was slower {every}, the opposite of what the cached metadata would predict: read it "
                       "as run-to-run variation."),
            "level": ("The run-by-run ratio " + ("fell on both sides of 1×" if d.setting.get("straddles") else
                                                 "stayed within 5% of 1×")
                      + ": in this run re-reading directory entries and inodes cost little next to the data reads. A "
                      "rootless cold run is still an upper bound; on another file system or device the gap can be "
                      "large."),
        }[d.value]
    return text


# --------------------------------------------------------------------------- the opening
def opening(facts: Facts) -> Opening:
    """What the chapter opens with: the cold and warm gaps and what "cold" was, one sentence each, and
    what to set, as the analysis advises it."""
    facts = facts_of(facts)
    out = []
    if "cold_gap" in facts:
        c = facts["cold_gap"]
        out.append(Finding("cold_gap", ran(facts, "cold_gap") + ".", c.number, "×", c.published))
    if "warm_gap" in facts:
        c = facts["warm_gap"]
        out.append(Finding("warm_gap", ran(facts, "warm_gap", "With every page in RAM, ") + ".", c.number, "×"))
    if "cold_latency" in facts:
        lat = facts["cold_latency"]
        text = f"A cold 4 KiB read took **{say.value(lat, runs=False)}**, {_served(facts)}."
        out.append(Finding("cold_latency", text, lat.number, "µs"))
    actions = [Action(say.advice(a, facts), a.snippet) for a in facts.advice]
    return Opening(say.define_first(out[:3], facts.get("cold_state")), actions[:3])


# --------------------------------------------------------------------------- an exercise on paper
def paper_exercise(facts: Facts, res) -> str:
    """The headline turned into arithmetic a reader does by hand: the time of one file and of the same bytes
    in the shard (bytes ÷ bandwidth), their difference (the per-file cost), that cost over an epoch, and the
    share of it one cold read of the latency check accounts for; the answers folded, from this run's means."""
    facts = facts_of(facts)
    cache = next((c for c in ("cold", "warm") if f"{c}.random" in facts and f"{c}.sequential" in facts), None)
    rand = facts.number(f"{cache}.random") if cache else None
    seq = facts.number(f"{cache}.sequential") if cache else None
    if not rand or not seq:
        return "The exercise on paper needs the headline's two layouts: this run has no random or no sequential read."
    n, size = int(Params.value_of(res, "n_files")), int(Params.value_of(res, "file_size"))
    word = _cold(facts) if cache == "cold" else "warm"
    t_file, t_shard = size / (rand * 1e6), size / (seq * 1e6)
    eq_file, eq_shard = (equals(r, "MB/s", lambda x, t=t: short_time(size / (x * 1e6)) == short_time(t))
                         for r, t in ((rand, t_file), (seq, t_shard)))
    extra = t_file - t_shard
    intro = (f"**Work it out.** In the headline ({word}), {n:,} shuffled files of {size_label(size)} ({size:,} "
             f"bytes) each were read at **{num(rand, 'MB/s')}** on average, and the same bytes as one shard read in "
             f"order at **{num(seq, 'MB/s')}** (MB = 10⁶ bytes).")
    questions = ["How long did one file take on average (its bytes ÷ the bandwidth)?",
                 f"How long did the shard take for the same {size_label(size)}?",
                 "The difference is what each file costs beyond its bytes: the lookup, the `open`, the `close` and "
                 f"a request of its own. What does it add up to over one pass of {n:,} files, and what share of "
                 "the whole read of the files is that?"]
    answers = [f"{size:,} B ÷ {num(rand, 'MB/s')} {eq_file} **{short_time(t_file)}** per file.",
               f"{size:,} B ÷ {num(seq, 'MB/s')} {eq_shard} **{short_time(t_shard)}**.",
               f"{short_time(t_file)} − {short_time(t_shard)} = **{short_time(extra)}** per file; × {n:,} files = "
               f"**{short_time(extra * n)}**, {pct(extra / t_file)} of the {short_time(t_file * n)} the files took."]
    lat = facts.get("cold_latency")
    if cache == "cold" and lat is not None and lat.number:
        request = size_label(int(lat.setting.get("request_bytes") or 4096))
        questions.append(f"The latency check timed one cold {request} `O_DIRECT` read at **{num(lat.number, 'µs')}** "
                         "(median). What share of the per-file cost from 3 is one such read?")
        share = lat.number * 1e-6 / extra
        eq = equals(lat.number, "µs", lambda x: pct(x / shown(extra * 1e6, "µs")) == pct(share))
        answers.append(f"{num(lat.number, 'µs')} ÷ {short_time(extra)} {eq} **{pct(share)}**.")
    return on_paper(intro, questions, answers)


# --------------------------------------------------------------------------- evidence: tables and spreads
def headline_table(res) -> pd.DataFrame:
    """The headline's MB/s per cache state and access pattern: mean, spread and runs (for the chart and table)."""
    from datajourney.core.stats import summarise

    return summarise(res.table("headline"), ["cache", "pattern"], "MBps")


def _wide_note(x: dict) -> str:
    return (f"{cap(say.text(x['label']))} varied over {fnd.span(x['low'], x['high'], 'MB/s')} in {x['n']} runs "
            f"(coefficient of variation {say.share(x['cv'])}): read it as a range, not a point."
            + (" The first run was the slowest." if x.get("first_slowest") else ""))


def _wide_summary(wide: list[dict]) -> str:
    if not wide:
        return (f"No configuration varied by more than {say.share(stats.HIGH_SPREAD)} (coefficient of variation) "
                "over its runs.")
    return (f"Runs varied by more than {say.share(stats.HIGH_SPREAD)} (coefficient of variation) for "
            + "; ".join(f"{say.text(x['label'])} ({fnd.span(x['low'], x['high'], 'MB/s')}, coefficient of variation "
                        f"{say.share(x['cv'])})" for x in wide) + ": read those as ranges, not points.")


def headline_notes(facts) -> str:
    """Spread comments on the headline (coefficient of variation above :data:`findings.HIGH_SPREAD`)."""
    wide = (facts_of(facts).data.get("spread") or {}).get("headline") or []
    return "\n".join(f"* {_wide_note(x)}" for x in wide) if wide else "Every headline configuration varied by " \
        f"less than {say.share(stats.HIGH_SPREAD)} (coefficient of variation) over its runs."


#: Readable headers of the residency table's grouping columns.
RESIDENCY_HEADERS = {"cache": "cache", "pattern": "access pattern", "kind": "layout", "purge_method": "purge"}


def residency_table(df: pd.DataFrame, by: Sequence[str], *, cold: str = "cold", names: dict | None = None,
                    count: str = "runs") -> pd.DataFrame:
    """Per group of ``by``: how many timed reads, and the most and least of the data resident in the
    page cache when they started (percent). Cache states read ``cold`` (e.g. 'guest-cold') and
    'warm'; ``names`` maps raw values of the other columns (e.g. ``kind``) to readable ones.
    Used by chapters 2 and 3."""
    g = df.groupby(list(by), as_index=False, sort=False).agg(
        n=("resident_at_start", "size"), most=("resident_at_start", "max"), least=("resident_at_start", "min"))
    if "cache" in g:
        g["cache"] = g["cache"].map(lambda c: cold if c == "cold" else c)
    for c in by:
        if c != "cache" and names:
            g[c] = g[c].map(lambda v: names.get(v, v))
    g["most"], g["least"] = 100 * g["most"], 100 * g["least"]
    if (g["most"] == g["least"]).all():   # every read of each group started alike: one column says it
        g = g.drop(columns="least").rename(columns={"most": f"resident at start, all {count} (%)"})
    return g.rename(columns={**{c: RESIDENCY_HEADERS.get(c, c) for c in by}, "n": count,
                             "most": "resident at start, most (%)", "least": "resident at start, least (%)"})


def size_sweep_notes(facts) -> str:
    """The size sweep's wide spreads (empty when the sweep did not run)."""
    facts = facts_of(facts)
    if not (facts.data.get("ran") or {}).get("size_sweep"):
        return ""
    return _wide_summary((facts.data.get("spread") or {}).get("size_sweep") or [])


def _dip_line(x: dict) -> str:
    small, large = size_label(x["small"]), size_label(x["large"])
    if not x["real"]:
        return (f"* {x['mode']}: {large} requests averaged {num(x['large_mean'], 'MB/s')}, below {small} "
                f"({num(x['small_mean'], 'MB/s')}), but the runs overlap "
                f"({fnd.span(x['large_low'], x['large_high'], 'MB/s')} vs "
                f"{fnd.span(x['small_low'], x['small_high'], 'MB/s')}, {x['runs']} runs each): the dip is inside the "
                "run-to-run spread, not a property of the read size.")
    return (f"* {x['mode']}: {large} requests were slower than {small} in every run "
            f"({num(x['large_mean'], 'MB/s')} vs {num(x['small_mean'], 'MB/s')}; ranges "
            f"{fnd.span(x['large_low'], x['large_high'], 'MB/s')} and "
            f"{fnd.span(x['small_low'], x['small_high'], 'MB/s')}): a real dip in this run.")


def chunk_sweep_notes(facts) -> str:
    """Where bandwidth drops from one read size to the next larger one: inside the spread or not."""
    facts = facts_of(facts)
    if not (facts.data.get("ran") or {}).get("chunk_sweep"):
        return ""
    lines = [_dip_line(x) for x in facts.data.get("chunk_dips") or []]
    if not lines:
        lines.append(f"* Bandwidth never fell by more than {pct(DIP_TOL)} from one read size to the next larger one.")
    lines.append("* " + _wide_summary((facts.data.get("spread") or {}).get("chunk_sweep") or []))
    return "\n".join(lines)
