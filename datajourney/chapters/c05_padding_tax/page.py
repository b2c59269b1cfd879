"""The page of chapter 5, the padding tax: findings, computed notes and display tables built from a result of
:mod:`datajourney.chapters.c05_padding_tax.experiment` (which measures and holds the reusable packers, masks,
collator comparison and timing)."""
from __future__ import annotations

import pandas as pd

from datajourney.chapters import published
from datajourney.chapters.c05_padding_tax import analysis
from datajourney.chapters.c05_padding_tax.analysis import CHAPTER, SOURCE_PACKER, device_name, isolated, model_label
from datajourney.chapters.c05_padding_tax.params import ISOLATED, ISOLATION_MODEL, LABELS, PUBLISHED_SETTING
from datajourney.chapters.common import MIN_RUNS_FOR_RANGE, facts_reader, on_paper
from datajourney.chapters.wording import fact_value as _count
from datajourney.core import phrasing
from datajourney.core.facts import Facts
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.units import num, pct

__all__ = ["device_name", "model_label", "opening", "findings"]

#: Each end-of-text mode (:data:`~datajourney.chapters.c05_padding_tax.experiment.EOS_MODES`) in words.
EOS_WORDS = {
    "packed_only": "an end-of-text token after each sample in packed rows only; padded rows end at the padding",
    "always": "an end-of-text token after every sample, in every layout",
    "never": "no end-of-text token anywhere",
}
#: Each timing mode in words.
TIMING_WORDS = {
    "all_batches": "every batch of every layout is timed, once per pass; the time for all samples is the "
                   "sum of the step times (mean over passes, range min–max over passes)",
    "per_shape": "each distinct batch shape (rows × row length) is timed a few times; the time "
                 "for all samples is the sum over shapes of mean step time × batches of that shape",
}
#: How the isolation check fed each packed row, in words (older results stored the words themselves).
INPUT_WORDS = {
    "explicit_mask": "block-diagonal mask + per-document position ids",
    "plain_causal": "plain causal attention, positions run on",
    "collator_no_cache": "collator's position ids, no attention mask, use_cache=False",
    "collator_default": "collator's position ids, model called with its default use_cache=True",
    "no_position_ids": "packed row without position ids",
}


#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(analysis.analyse)



def _against(facts: Facts, key: str) -> str:
    """Comparison ``key`` worded for a sentence that already names its population ("over all samples"): the
    baseline by its layout alone, not "padding each batch to its longest sample (all samples)"."""
    c = facts[key]
    basis = facts.get(c.basis) if c.basis else None
    strategy = basis.setting.get("strategy") if basis is not None else None
    return phrasing.comparison(c, facts, baseline=analysis.NOUNS.get(strategy))

def _published(metric: str):
    return published.figure(CHAPTER, metric)


def _like(value: float, unit: str, metric: str | None = None) -> str:
    """A value with the digits of the published figure it is compared with (else three significant)."""
    f = _published(metric) if metric else None
    if f is None:
        return num(value, unit)
    text = f.value.replace(",", "")
    digits = len(text.split(".")[1]) if "." in text else 0
    return f"{value:,.{digits}f}" + (unit if unit in ("%", "×") else f" {unit}")


def share_text(fraction: float) -> str:
    """A share in percent with enough digits that a share below 100% never prints as 100%
    (131,053 of 131,072 -> '99.99'), nor a share above 0 as 0; no % sign."""
    v = 100 * float(fraction)
    if v >= 100:
        return f"{v:.0f}"
    digits = 2 if v < 10 else 1   # three significant digits, as the other tables print
    while digits < 6 and (round(v, digits) >= 100 or (v > 0 and round(v, digits) == 0)):
        digits += 1
    return f"{v:.{digits}f}"


def key_metrics(res) -> dict:
    """First-batch metrics under the published metric names (the population the published figures describe):
    the facts the analysis marked as sharing a published metric, from a result or its facts."""
    facts = facts_of(res)
    return {f.published: (f.number, None) for f in facts.facts.values() if f.published and f.number is not None}


# --------------------------------------------------------------------------- findings: words for facts
def _differs(facts: Facts) -> str:
    """This run's setting where it is not the published one, each value as code."""
    d = facts.data.get("setting_differs") or {}
    return ", ".join(f"{phrasing.code(k)} = {phrasing.code(v)} (published: {phrasing.code(PUBLISHED_SETTING[k])})"
                     for k, v in d.items() if k in PUBLISHED_SETTING)


def _finding(facts: Facts, key: str, text: str) -> Finding:
    f = facts[key]
    return Finding(key, text, f.number, f.unit, published=f.published,
                   interval=f.spread if f.spread is not None and f.n >= MIN_RUNS_FOR_RANGE else None)


def finding_first_batch_pad(facts: Facts) -> Finding | None:
    if "first_batch_pad_to_context" not in facts:
        return None
    f = facts["first_batch_pad_to_context"]
    return _finding(facts, f.key, f"**First batch** (the published figures' population), padded to the context of "
                                  f"{_count(facts, 'first_batch_row_len')}: **{phrasing.value(f)}** of the computed "
                                  "positions are real tokens.")


def finding_first_batch_packed(facts: Facts) -> Finding | None:
    if "first_batch_packed" not in facts:
        return None
    f = facts["first_batch_packed"]
    return _finding(facts, f.key, f"**First batch**, packed greedily in sample order: its "
                                  f"{_count(facts, 'first_batch_rows')} rows of {_count(facts, 'first_batch_row_len')} "
                                  f"carry {_count(facts, 'first_batch_packed_samples')} samples, "
                                  f"**{phrasing.value(f)}** real tokens.")


def finding_first_batch_ratio(facts: Facts) -> Finding | None:
    if "first_batch_ratio" not in facts:
        return None
    c = facts["first_batch_ratio"]
    rep = facts.get("published_reproduced")
    of = rep.setting.get("of") if rep is not None else None
    if rep is not None and rep.number == of:
        verdict = "the three published figures are reproduced as printed, from the first batch"
    else:
        differs = _differs(facts)
        verdict = (f"{_count(facts, 'published_reproduced')} of {of} published figures reproduced as printed, "
                   "not as published" + (f"; this run's setting differs from the published one: {differs}"
                                         if differs else ""))
    return _finding(facts, c.key, f"In the first batch, the efficiency of greedy packing (real tokens per "
                                  f"computed position) is **{_against(facts, c.key)}** ({verdict}).")


def finding_all_samples(facts: Facts) -> Finding | None:
    if "all_samples" not in facts:
        return None
    c = facts["all_samples"]
    also = facts.get("all_samples_vs_context")
    extra = f", and {_against(facts, also.key)}" if also is not None and also.basis != c.basis else ""
    return _finding(facts, c.key, f"**All {_count(facts, 'samples')} samples** (what an epoch costs): greedy packing "
                                  f"filled {phrasing.value(facts[c.of])} of the computed positions with real tokens, "
                                  f"**{_against(facts, c.key)}**{extra}; it needed "
                                  f"{_count(facts, 'steps.greedy_pack')} steps instead of "
                                  f"{_count(facts, 'steps.pad_to_context')} padded to the context.")


def finding_cost(facts: Facts) -> Finding:
    """The measured time: packing against padding each batch to its longest sample (the timed comparison a
    reader would make), then against padding to the context."""
    first = facts.get("packing_vs_longest") or facts.get("packing_vs_context")
    if first is None:
        return Finding("packing_vs_longest", "Cost in time: not measured in this run (no timed device, or greedy "
                                             "packing was not among the layouts); the cost section shows the "
                                             "reference run's timings where it has them, labelled as such.")
    second = facts.get("packing_vs_context") if first.key == "packing_vs_longest" else None
    where = phrasing.text(facts.data.get("device_name") or "the device")
    text = (f"Forward and backward of {phrasing.text(facts.data.get('model') or 'the model')} over all samples on "
            f"{where}: greedy packing took **{phrasing.value(facts[first.of], runs=False)}**, "
            f"**{phrasing.comparison(first, facts)}**")
    if second is not None:
        text += f" and {phrasing.comparison(second, facts)}"
    return _finding(facts, first.key, text + ".")


def finding_isolation(facts: Facts) -> Finding | None:
    """Whether packed documents stayed apart in transformers (with and without the cache)."""
    if "isolation.no_cache" not in facts or "isolation.default" not in facts:
        return None

    def state(name):
        f = facts[f"isolation.{name}"]
        return (f"reproduces each document alone (largest logit difference below {num(ISOLATED)})"
                if isolated(facts, name) else
                f"does not: documents see each other (largest logit difference {phrasing.value(f)})")

    version = phrasing.code(facts.data.get("transformers") or "?")
    return Finding("packing_isolation",
                   f"Packed rows from `DataCollatorWithFlattening` (position ids restarting per document, no "
                   f"attention mask): a small model of GPT-2's architecture in transformers {version} called with "
                   f"`use_cache=False` {state('no_cache')}; called with its default `use_cache=True` it "
                   f"{state('default')}.")


def _eos_note(facts: Facts) -> str:
    """Why the efficiency ratio and the positions ratio differ (end-of-text tokens count as real tokens
    in packed rows), said once, with both numbers; empty when they print alike."""
    pos, eff = facts.get("positions_gain"), facts.get("gain.all_samples")
    if pos is None or eff is None or phrasing.value(pos) == phrasing.value(eff):
        return ""
    gain = f" In positions computed the gain is {phrasing.value(pos)}"
    return (gain + ": the efficiency counts each packed sample's end-of-text token as a real token, as the source's "
            "grid does, and padded rows carry none" if pos.setting.get("eos_counted_as_real") else
            gain) + " (the cost section compares time with positions)."


def findings(facts: Facts) -> list[Finding]:
    """The chapter's key results: first batch (the published figures' population), all samples, measured
    time against both baselines, and whether packed documents stay apart."""
    out = [finding_first_batch_pad(facts), finding_first_batch_packed(facts), finding_first_batch_ratio(facts),
           finding_all_samples(facts), finding_cost(facts), finding_isolation(facts)]
    return [f for f in out if f is not None]


# --------------------------------------------------------------------------- more computed text and tables
def template_sentence(facts) -> str:
    """How this run joined the fields and handled end-of-text, and what the first record became (the facts'
    ``data["template"]``; ``facts`` may be a result, analysed now): every string from the result as code (a
    template can be any format string)."""
    from datajourney.toolkit import textdata

    t = facts_of(facts).data["template"]
    name, mode, src = t["name"], t["eos"], t["source"]
    known = textdata.TEMPLATES.get(name) if isinstance(name, str) else None
    what = f" ({known.description})" if known is not None else " (a format string given as a parameter)"
    how = f" ({EOS_WORDS[mode]})" if isinstance(mode, str) and mode in EOS_WORDS else ""
    example = t["example"].replace("```", "` ` `")
    version = phrasing.code(t["transformers"])
    if t["your_data"]:   # token_path: documents as they are, no fields to join
        return (f"Samples from {phrasing.code(src.get('dataset', '?'))}, tokenizer from "
                f"{phrasing.code(src.get('tokenizer', '?'))}, transformers {version}: your documents as they are "
                f"(no template joins fields; end-of-text: {phrasing.code(mode)}{how}). The first one begins:"
                f"\n\n````text\n{example}\n````")
    return (f"Samples from {phrasing.code(src.get('dataset', '?'))}, tokenizer from "
            f"{phrasing.code(src.get('tokenizer', '?'))}, transformers {version}."
            f"\n\nThis run joins the fields with the {phrasing.code(name)} template{what}: "
            f"{phrasing.code(t['with_input'])}; end-of-text: {phrasing.code(mode)}{how}. "
            f"The first record becomes:\n\n````text\n{example}\n````")


def timing_how(mode) -> str:
    """A timing mode in words (the first clause of :data:`TIMING_WORDS`), or the mode as text."""
    return TIMING_WORDS[mode].split(";")[0] if mode in TIMING_WORDS else str(mode)


def untimed_note(facts) -> str:
    """Why this run measured no time, in words (``facts`` may be a result, analysed now)."""
    why = facts_of(facts).data.get("untimed_because")
    return {"no_cuda": "no CUDA device on this machine", "device_none": "the parameter device is 'none'"}.get(
        why, "no timings in this run")


def template_note(facts: Facts) -> str:
    """Which joining of the fields and which end-of-text handling reproduce the published figures."""
    if "templates.tried" not in facts:
        return ""
    v = lambda k: _count(facts, k)  # noqa: E731
    best = facts.data.get("templates_matching") or []
    lines = []
    if best:
        combos = ", ".join(f"{phrasing.code(r['template'])} with end-of-text {phrasing.code(r['eos'])}" for r in best)
        one = len(best) == 1
        lines.append(f"Of the {v('templates.tried')} combinations of template and end-of-text handling tried, "
                     f"{'only ' if one else ''}{combos} reproduce{'s' if one else ''} all "
                     f"{v('templates.published_of')} published first-batch figures as printed.")
    else:
        top = facts["templates.closest_matched"].setting
        lines.append(f"None of the {v('templates.tried')} combinations tried reproduces all published first-batch "
                     f"figures; the closest, {phrasing.code(top['template'])} with {phrasing.code(top['eos'])}, "
                     f"matches {v('templates.closest_matched')} of {v('templates.published_of')}.")
    for k in sorted({k.rsplit(".", 1)[0] for k in facts.facts if k.startswith("template.")},
                    key=lambda k: int(k.split(".")[1])):
        name = facts[f"{k}.ratio"].setting["template"]
        lines.append(f"{phrasing.code(name)}: first batch {v(k + '.min')} / {v(k + '.max')} / {v(k + '.mean')} / "
                     f"{v(k + '.median')} tokens (min / max / mean / median); padded to the context "
                     f"{v(k + '.pad_to_context')} real tokens, packed {v(k + '.greedy_pack')} real tokens, "
                     f"{phrasing.comparison(facts[k + '.ratio'], facts)}.")
    differs = _differs(facts)
    if differs:
        lines.append("This run's setting is not the published one: " + differs + ".")
    return "\n\n".join(lines[:1]) + "\n\n" + "\n".join(f"* {x}" for x in lines[1:])


def templates_table(res) -> pd.DataFrame:
    """The first batch under every template and end-of-text handling, with short headers (the
    caption explains them): lengths in tokens, efficiencies in percent, the packing gain, and how
    many published first-batch figures each reproduces as printed."""
    if "templates" not in res.tables:   # the reader's documents (token_path) come joined: no template ran
        return pd.DataFrame(columns=["template", "eos", "min", "max", "mean", "median", "padded (%)", "packed (%)",
                                     "gain (×)", "matched"])
    tt = res.table("templates")
    return pd.DataFrame({
        "template": tt["template"], "eos": tt["eos"], "min": tt["first_batch_min"], "max": tt["first_batch_max"],
        "mean": tt["first_batch_mean"], "median": tt["first_batch_median"],
        "padded (%)": [share_text(v) for v in tt["first_batch_pad_to_context"]],
        "packed (%)": [share_text(v) for v in tt["first_batch_greedy_pack"]],
        "gain (×)": tt["first_batch_ratio"],
        "matched": [f"{a}/{b}" for a, b in zip(tt["published_matched"], tt["published_of"])]})


def length_table(res) -> pd.DataFrame:
    """The source's length table beside this run's first batch and all samples."""
    st = res.table("length_stats").set_index("population")
    rows = []
    for label, key, metric in (("shortest", "min", "first batch: shortest sample"),
                               ("longest", "max", "first batch: longest sample"),
                               ("mean", "mean", "first batch: mean length"),
                               ("median", "median", "first batch: median length")):
        f = _published(metric)
        rows.append({"tokens per sample": label, "published (S1): first batch": f.text if f else "—",
                     f"this run: first batch ({int(st.loc['first batch', 'samples'])})":
                         _like(float(st.loc["first batch", key]), "", metric).strip(),
                     f"this run: all samples ({int(st.loc['all samples', 'samples']):,})":
                         _like(float(st.loc["all samples", key]), "", metric).strip()})
    return pd.DataFrame(rows)


def populations_table(res) -> pd.DataFrame:
    """Efficiency of every layout in both populations, side by side."""
    fb = res.table("first_batch").set_index("strategy")
    al = res.table("strategies").set_index("strategy")
    return pd.DataFrame(
        [
            {
                "layout": LABELS[s],
                "first batch: rows × positions": f"{int(fb.loc[s, 'rows'])} × {int(fb.loc[s, 'row_len']):,}",
                "first batch: samples": int(fb.loc[s, "samples"]),
                "first batch: efficiency (%)": share_text(fb.loc[s, "efficiency"]),
                "all samples: steps": int(al.loc[s, "steps"]),
                "all samples: efficiency (%)": share_text(al.loc[s, "efficiency"]),
                "positions vs pad to context (×)": (
                    al.loc["pad_to_context", "positions"] / al.loc[s, "positions"]
                    if "pad_to_context" in al.index
                    else float("nan")
                ),
            }
            for s in al.index
        ]
    )


def population_note(facts: Facts) -> str:
    """How much the population alone moves the numbers."""
    if not {"population_gain", "all.pad_to_context", "first_batch_pad_to_context"} <= set(facts.facts):
        return ""
    return (
        f"Same template, same tokenizer, same code: the population alone takes padding to the context from "
        f"{phrasing.value(facts['first_batch_pad_to_context'])} real tokens (first batch) to "
        f"{phrasing.value(facts['all.pad_to_context'])} (all samples), and the packing gain from "
        f"{phrasing.value(facts['gain.first_batch'])} to {phrasing.value(facts['gain.all_samples'])}: over all "
        f"samples the gain is {phrasing.comparison(facts['population_gain'], baseline='the gain in the first batch')}. "
        "A figure is only comparable with one of the same population." + _eos_note(facts)
    )


def cost_result(res, ref=None):
    """The result whose timings the cost section shows (this run's, else the reference run's, as their facts
    say) and a label."""
    if facts_of(res).data.get("has_cost"):
        return res, "this run"
    if ref is not None and facts_of(ref).data.get("has_cost"):
        return ref, f"reference run {ref.run_id}"
    return None, None


def cost_note(facts: Facts) -> str:
    """Per-shape facts of the timing (the facts of the result whose timings are shown): partial batches,
    spreads, and measured time against positions."""
    v = lambda k: _count(facts, k)  # noqa: E731
    lines = []
    for s in LABELS:
        if f"partial.{s}.batches" in facts:
            n = facts.number(f"partial.{s}.batches")
            rows = [k for k in facts.facts if k.startswith(f"partial.{s}.rows.")]
            many = any(facts.number(k) > 1 for k in rows)
            text = (f"{LABELS[s]}: {v(f'partial.{s}.batches')} of {v(f'partial.{s}.of')} batches "
                    f"{'is' if n == 1 else 'are'} partial ({', '.join(v(k) for k in rows)} row{'s' if many else ''})")
            if f"partial.{s}.vs_full" in facts:
                text += (f"; one partial step took {v(f'partial.{s}.step')}, "
                         f"{phrasing.comparison(facts[f'partial.{s}.vs_full'], facts)}")
            lines.append(text + "; each batch counts once, at its own cost.")
        if f"spread.{s}.widest" in facts:
            w = facts[f"spread.{s}.widest"]
            lines.append(f"{LABELS[s]}: step times of {v(f'spread.{s}.wide')} of {v(f'spread.{s}.shapes')} batch "
                         f"shape{'s' if facts.number(f'spread.{s}.shapes') != 1 else ''} spread by more than "
                         f"{v('high_spread')} (coefficient of variation); the widest, "
                         f"{w.setting['rows']} × {w.setting['row_len']:,}, ran {phrasing.value(w)}: read these as "
                         "ranges.")
    if "time_of_positions" in facts:
        lines.append(f"Positions predict a gain of {v('positions_gain')}; the measured time gives packing "
                     f"{phrasing.comparison(facts['packing_vs_context'], facts)} "
                     f"({v('time_of_positions')} of the positions' prediction).")
        split = breakdown_note(facts)
        if split:
            lines.append(split)
    if isolated(facts, "no_cache") is False:
        lines.append(f"In transformers {phrasing.code(facts.data.get('transformers') or '?')} the packed rows were "
                     "timed as the library ran them: without a block-diagonal mask (documents saw each other in the "
                     "check above), so their cost is that of plain causal attention.")
    for s in LABELS:
        f = facts.get(f"passes.{s}")
        if f is not None and f.n > 1 and facts.number(f"passes.{s}.cv") > facts.number("high_spread"):
            lines.append(f"{LABELS[s]}, time per pass, varied: {phrasing.value(f)} (coefficient of variation "
                         f"{v(f'passes.{s}.cv')}): read it as a range, not a point.")
    return "\n".join(f"* {x}" for x in lines)


#: The parts of a full step of each layout (the page's name for the analysis's table).
step_breakdown = analysis.step_breakdown


def breakdown_note(facts: Facts) -> str:
    """Why time does not follow positions: the parts of a full padded and a full packed step."""
    a, k = "breakdown.pad_to_context", f"breakdown.{SOURCE_PACKER}"
    if f"{a}.step" not in facts or f"{k}.step" not in facts:
        return ""
    v = lambda x: _count(facts, x)  # noqa: E731
    targets = (f", for {v(k + '.real_targets')} real targets against {v(a + '.real_targets')}"
               if f"{k}.real_targets" in facts and f"{a}.real_targets" in facts else "")
    return (f"A full padded step ({v(a + '.rows')} × {v(a + '.row_len')}) took {v(a + '.step')}: layers "
            f"{v(a + '.layers')}, output layer and loss {v(a + '.head')}. A full packed step "
            f"({v(k + '.rows')} × {v(k + '.row_len')}) took {v(k + '.step')}: layers {v(k + '.layers')} "
            f"(per position, {phrasing.comparison(facts['breakdown.layers'], facts)}), output layer and loss "
            f"{v(k + '.head')} ({phrasing.comparison(facts['breakdown.head'], facts)}{targets}). "
            "Positions set the layers' cost; real tokens set the output layer's.")


def cost_table(res) -> pd.DataFrame:
    c = res.table("cost")
    return pd.DataFrame({
        "layout": c["label"], "batches": c["batches"], "batch shapes": c["shapes"], "steps timed": c["timed_steps"],
        "time for all samples (s)": c["seconds"], "min (s)": c["seconds_low"], "max (s)": c["seconds_high"],
        "real tokens/s": c["real_tokens_per_s"]})


#: Layouts with more batch shapes than this get one summary row in :func:`shapes_table`.
SHAPES_SHOWN = 6


def shapes_table(res) -> pd.DataFrame:
    """Step time of each batch shape; a layout with many shapes (padding to the longest) is summarised
    in one row: the range of its shapes and of their mean step times."""
    rows = []
    for s, g in res.table("cost_shapes").groupby("strategy", sort=False):
        if len(g) <= SHAPES_SHOWN:
            for r in g.itertuples():
                rows.append({"layout": LABELS[s], "shape (rows × positions)": f"{int(r.rows)} × {int(r.row_len):,}",
                             "batches": int(r.batches), "steps timed": int(r.timed), "ms per step": r.mean,
                             "std (ms)": r.std, "min (ms)": r.min, "max (ms)": r.max, "time (s)": r.seconds})
        else:
            rows.append({"layout": LABELS[s],
                         "shape (rows × positions)": f"{len(g)} shapes: {int(g['rows'].min())}–{int(g['rows'].max())}"
                                                     f" × {int(g['row_len'].min()):,}–{int(g['row_len'].max()):,}",
                         "batches": int(g["batches"].sum()), "steps timed": int(g["timed"].sum()),
                         "ms per step": float((g["batches"] * g["mean"]).sum() / g["batches"].sum()),
                         "std (ms)": float("nan"), "min (ms)": float(g["min"].min()), "max (ms)": float(g["max"].max()),
                         "time (s)": float(g["seconds"].sum())})
    return pd.DataFrame(rows)


def isolation_table(res) -> pd.DataFrame:
    iso = res.table("isolation")
    size = f"{ISOLATION_MODEL['n_layers']} layers, {ISOLATION_MODEL['d_model']} wide"
    model = iso["model"].str.replace(r"^GPT-2 \((.*)\)$", rf"GPT-2 architecture ({size}; \1)", regex=True)
    return pd.DataFrame({"code": iso["code"], "model": model,
                         "packed row fed as": [INPUT_WORDS.get(v, v) for v in iso["inputs"]],
                         "largest |logit difference| vs alone": [phrasing.magnitude(v) for v in iso["max_abs_diff"]],
                         "documents kept apart": iso["isolated"].map({True: "yes", False: "no"})})


def collator_note(facts: Facts) -> str:
    keys = [k.rsplit(".", 1)[0] for k in facts.facts if k.startswith("collator.") and k.endswith(".rows")]
    if not keys:
        return "No packing layout in this run: nothing to compare with the collator."
    v = lambda x: _count(facts, x)  # noqa: E731
    lines = []
    for k in keys:
        equal = facts[f"{k}.rows"].setting
        same = [n for n, _ in analysis.COLLATOR_PARTS if equal.get(n)]
        diff = [n for n, _ in analysis.COLLATOR_PARTS if not equal.get(n)]
        lines.append(f"{LABELS[k.split('.')[1]]}, first batch ({v(k + '.rows')} rows, {v(k + '.documents')} documents, "
                     f"{v(k + '.real_tokens')} real tokens): "
                     + ("identical " + ", ".join(same) if not diff else "different " + ", ".join(diff))
                     + " from `packed_inputs` and from `DataCollatorWithFlattening`.")
    return "\n".join(f"* {x}" for x in lines)


def takeaways(facts: Facts) -> str:
    """The chapter's closing bullets, each following this run's data."""
    lines = []
    shares = [facts[f"all.{s}"] for s in LABELS if f"all.{s}" in facts and facts.number(f"all.{s}") is not None]
    if "all.pad_to_context" in facts:
        order = sorted(shares, key=lambda f: -f.number)
        lines.append("Real tokens per computed position over all samples, best first: " + ", ".join(
            f"{LABELS[f.setting['strategy']]} {phrasing.value(f)}" for f in order) + ".")
    c = facts.get("all_samples")
    if c is not None and c.basis == "all.pad_to_longest" and c.number is not None:
        lines.append("Padding to the longest sample of each batch recovers part of the waste; greedy packing's real "
                     f"tokens per computed position over all samples are {_against(facts, c.key)}.")
    if isolated(facts, "no_cache") and isolated(facts, "default") is False:
        lines.append("With transformers, packed rows stay correct only when nothing else overrides the "
                     "position ids: no attention mask and no cache (`use_cache=False`), or a "
                     "variable-length attention kernel.")
    elif isolated(facts, "no_cache") is False:
        lines.append("This transformers version does not keep packed documents apart from position ids alone: "
                     "pass an explicit block-diagonal mask or use a variable-length attention kernel.")
    return "\n".join(f"* {x}" for x in lines)


# --------------------------------------------------------------------------- the opening
def paper_exercise(facts) -> str:
    """The padding efficiency η (real tokens ÷ positions computed) of the first batch worked by hand from its
    tokens: padded to the context, padded to its longest sample, and packing's measured η against the first;
    the answers folded, from this run's facts."""
    facts = facts_of(facts)
    ex = facts.data.get("exercise") or {}
    if not ex.get("samples") or not ex.get("context"):
        return ("The exercise on paper needs the first batch padded to the context, which this run does not hold "
                "(`strategies` has no `pad_to_context`).")
    b, real, c, longest = ex["samples"], ex["real_tokens"], ex["context"], ex.get("longest")
    eta = real / (b * c)
    shown = f"{100 * eta:.3g}%"   # three significant digits, so the ratio in answer 3 works out from it by hand
    intro = (f"**Work it out.** The first batch held **{b}** samples with **{real:,}** real tokens in all"
             + (f", the longest **{longest:,}** tokens" if longest else "")
             + f"; the context is **{c:,}** positions. A layout's padding efficiency η is the real tokens ÷ the "
             "positions the model computes.")
    questions = ["What is η when every sample is padded to the context (one row of the context per sample)?"]
    answers = [f"{real:,} ÷ ({b} × {c:,} = {b * c:,}) = **{shown}**."]
    if longest:
        questions.append("What is η when the batch is padded only to its longest sample?")
        answers.append(f"{real:,} ÷ ({b} × {longest:,} = {b * longest:,}) = **{pct(real / (b * longest))}**.")
    packed = facts.number("first_batch_packed")
    if packed:
        questions.append(f"Greedy packing filled its rows of {c:,} positions to η = **{num(packed, '%')}** "
                         "(measured). How many times more real tokens does it put through each computed position "
                         "than padding to the context?")
        answers.append(f"{num(packed, '%')} ÷ {shown} = **{num(packed / 100 / eta, '×')}**.")
    return on_paper(intro, questions, answers)


def opening(facts: Facts) -> Opening:
    """What the chapter opens with: the measured time of packing against padding each batch to its longest
    sample and against padding to the context (one sentence), then the real tokens per position over all
    samples against the same two (one sentence), and over the first batch; then the layout that cost least, with
    the code that was timed."""
    out = []
    timed = [k for k in ("packing_vs_longest", "packing_vs_context") if k in facts and facts[k].number is not None]
    if timed:  # one sentence: the same packed time against each padded baseline
        out.append(_finding(facts, timed[0], f"Over all samples, greedy packing's forward and backward took "
                                           f"{phrasing.value(facts[facts[timed[0]].of], runs=False)}: "
                          + ", and ".join(f"**{phrasing.comparison(facts[k], facts)}**" for k in timed) + "."))
    # one metric, one sentence: the real tokens per computed position against each padded baseline
    for pop, keys in (("all samples", ("all_samples", "all_samples_vs_context")), ("the first batch",
                                                                                  ("first_batch_ratio",))):
        have = [k for k in keys if k in facts and facts[k].number is not None]
        if have and len(out) < 3:
            out.append(_finding(facts, have[0], f"Over {pop}, greedy packing's real tokens per computed position: "
                                + ", and ".join(f"**{_against(facts, k)}**" for k in have) + "."))
    return Opening(out[:3], actions(facts))


def actions(facts: Facts) -> list[Action]:
    """What to do: the layout this run's numbers chose (the advice ``tokens.batching``, with the code that was
    timed), and, where this run's check found the cache mixing packed documents, to turn it off."""
    out = []
    a = facts.advice_for("tokens.batching")
    if a is not None:
        out.append(Action(phrasing.advice(a, facts), a.snippet))
    if isolated(facts, "no_cache") and isolated(facts, "default") is False:
        out.append(Action("Call the model with `use_cache=False` on packed rows: with the cache on, packed samples "
                          f"saw each other in this run's check (largest logit difference "
                          f"{phrasing.value(facts['isolation.default'])})."))
    return out or [Action("No layout was measured in this run.")]
