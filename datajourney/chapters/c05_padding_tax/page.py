"""The page of chapter 5, the padding tax: findings, computed notes and display tables built from a result of
:mod:`datajourney.chapters.c05_padding_tax.experiment` (which measures and holds the reusable packers, masks,
collator comparison and timing)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from datajourney.chapters import published
from datajourney.chapters.c05_padding_tax.experiment import (
    CHAPTER,
    ISOLATION_MODEL,
    LABELS,
    PUBLISHED_SETTING,
    STEP_PARTS,
    printed_as,
    uses_eos,
)
from datajourney.chapters.common import MIN_RUNS_FOR_RANGE
from datajourney.core import findings as fnd
from datajourney.core.findings import (
    HIGH_SPREAD,
    Action,
    Finding,
    Opening,
    choose,
    compare,
    direction,
    num,
    pct,
    spread_note,
    times,
)

#: The packer the published figures used (the source's greedy, in-order packing).
SOURCE_PACKER = "greedy_pack"


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


def model_label(res) -> str:
    """The timed model as the chapter names it: 'GPT-2 architecture (4 layers, 512 wide)' (not GPT-2 itself)."""
    m = res.metadata.get("model", {}) if hasattr(res, "metadata") else {}
    n, d = m.get("n_layers"), m.get("d_model")
    if n is None or d is None:
        return "GPT-2 architecture"
    return f"GPT-2 architecture ({n} layer{'s' if n != 1 else ''}, {d} wide)"


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


def _device_name(res) -> str:
    dev = res.metadata.get("timed_on")
    if dev == "cuda":
        return (res.fingerprint.get("gpu") or {}).get("name") or "the GPU"
    return (res.fingerprint.get("cpu") or {}).get("model") or "the CPU"


def key_metrics(res) -> dict:
    """First-batch metrics under the published metric names (the population the published figures describe)."""
    fb = res.table("first_batch").set_index("strategy")
    out = {}
    if "pad_to_context" in fb.index:
        out["efficiency, pad to context"] = (100 * fb.loc["pad_to_context", "efficiency"], None)
    if SOURCE_PACKER in fb.index:
        out["efficiency, packed"] = (100 * fb.loc[SOURCE_PACKER, "efficiency"], None)
        if "pad_to_context" in fb.index:
            out["packed ÷ pad to context"] = (fb.loc[SOURCE_PACKER, "efficiency"]
                                              / fb.loc["pad_to_context", "efficiency"], None)
    st = res.table("length_stats").set_index("population")
    if "first batch" in st.index:
        s = st.loc["first batch"]
        out.update({"first batch: shortest sample": (float(s["min"]), None),
                    "first batch: longest sample": (float(s["max"]), None),
                    "first batch: mean length": (float(s["mean"]), None),
                    "first batch: median length": (float(s["median"]), None)})
    return out


def reproduction(res) -> dict:
    """Which published figures this run reproduces as printed (first batch), and which it does not."""
    got = key_metrics(res)
    out = {"matched": [], "missed": []}
    for metric, (value, _) in got.items():
        f = _published(metric)
        if f is not None:
            out["matched" if printed_as(value, f) else "missed"].append(metric)
    return out


def _setting_differs(res) -> list[str]:
    p = res.parameters
    return [f"`{k}` = `{p.get(k)}` (published: `{v}`)" for k, v in PUBLISHED_SETTING.items() if p.get(k) != v]


def findings(res) -> list:
    """The chapter's key results, computed from a result: first batch (the published figures'
    population), all samples, measured cost, and whether packed documents stay apart."""
    fb = res.table("first_batch").set_index("strategy")
    al = res.table("strategies").set_index("strategy")
    L = int(res.parameters["context_length"])
    eos = res.parameters.get("eos")
    out = []
    pad = fb.loc["pad_to_context"] if "pad_to_context" in fb.index else None
    pk = fb.loc[SOURCE_PACKER] if SOURCE_PACKER in fb.index else None
    if pad is not None:
        mean = pad["real_tokens"] / pad["samples"]
        out.append(Finding(
            "first_batch_pad_to_context",
            f"**First batch** ({int(pad['samples'])} samples, the population of the published figures), padded "
            f"to the context of {L:,}: **{_like(100 * pad['efficiency'], '%', 'efficiency, pad to context')}** "
            f"of the positions are real tokens (a sample fills {mean:,.0f} of {L:,} positions on average).",
            value=100 * pad["efficiency"], unit="%", published="efficiency, pad to context"))
    if pk is not None:
        sep = ", each followed by an end-of-text token" if uses_eos(SOURCE_PACKER, eos) else ""
        out.append(Finding(
            "first_batch_packed",
            f"**First batch** packed greedily in sample order: its {int(pk['rows'])} rows of {int(pk['row_len']):,} "
            f"positions carry samples {int(pk['first_sample'])}–{int(pk['last_sample']):,} "
            f"({int(pk['samples']):,} samples{sep}), **{_like(100 * pk['efficiency'], '%', 'efficiency, packed')}** "
            "real tokens.",
            value=100 * pk["efficiency"], unit="%", published="efficiency, packed"))
    if pad is not None and pk is not None:
        r = pk["efficiency"] / pad["efficiency"]
        cmp = choose(direction(pk["efficiency"], pad["efficiency"], tol=0.01),
                     "more real tokens per computed position than", "fewer real tokens per computed position than",
                     "as many real tokens per computed position as")
        rep = reproduction(res)
        three = ("efficiency, pad to context", "efficiency, packed", "packed ÷ pad to context")
        if all(m in rep["matched"] for m in three):
            verdict = ("the three published figures are reproduced as printed, from the first batch, with the "
                       f"`{res.parameters.get('template')}` template and end-of-text `{eos}`")
        else:
            missed = [m for m in three if m not in rep["matched"]]
            differs = _setting_differs(res)
            verdict = (f"not as published for {', '.join(missed)}"
                       + (f"; this run's setting differs from the published one: {', '.join(differs)}" if differs
                          else ""))
        out.append(Finding(
            "first_batch_ratio",
            f"In the first batch, packing carries {cmp} padding to the context: "
            f"**{_like(r, '×', 'packed ÷ pad to context')}** ({verdict}).",
            value=r, unit="×", published="packed ÷ pad to context"))
    if "pad_to_context" in al.index and SOURCE_PACKER in al.index:
        a, b = al.loc["pad_to_context"], al.loc[SOURCE_PACKER]
        r = b["efficiency"] / a["efficiency"]
        word = compare(b["efficiency"], a["efficiency"], more="more", less="fewer", same="as many", tol=0.01,
                       as_ratio=False)
        moved = compare(a["efficiency"], pad["efficiency"], more="higher than", less="lower than",
                        same="the same as", tol=0.01, as_ratio=False) if pad is not None else None
        out.append(Finding(
            "all_samples",
            f"**All {int(a['samples']):,} samples** (a second population: what an epoch costs): padded to the "
            f"context {pct(a['efficiency'])} real tokens"
            + (f" ({moved} the first batch)" if moved else "")
            + f", packed {pct(b['efficiency'])}: **{times(r)}** {word} real tokens per position, "
            f"{int(b['steps']):,} step{'s' if b['steps'] != 1 else ''} of {int(a['rows_per_step'])} rows instead "
            f"of {int(a['steps']):,}.",
            value=r, unit="×"))
    out.append(_cost_finding(res))
    iso = _isolation_finding(res)
    if iso is not None:
        out.append(iso)
    return out


def _eos_note(a, b, eos) -> str:
    """Why the efficiency ratio and the positions ratio differ (end-of-text tokens count as real tokens
    in packed rows), said once, with both numbers; empty when they print alike."""
    pos = a["positions"] / b["positions"]
    eff = b["efficiency"] / a["efficiency"]
    if times(pos) == times(eff):
        return ""
    return (f" In positions computed the gain is {times(pos)}: the efficiency counts each packed sample's "
            "end-of-text token as a real token, as the source's grid does, and padded rows carry none"
            if uses_eos(SOURCE_PACKER, eos) and not uses_eos("pad_to_context", eos) else
            f" In positions computed the gain is {times(pos)}") + " (the cost section compares time with positions)."


def _cost_finding(res):
    if "cost" not in res.tables:
        note = res.metadata.get("timing_note") or "cost not measured"
        return Finding("measured_cost", f"Cost in GPU time: not measured in this run ({note}); the cost section "
                       "shows the reference run's timings where it has them, labelled as such.")
    c = res.table("cost").set_index("strategy")
    if not {"pad_to_context", SOURCE_PACKER} <= set(c.index):
        return Finding("measured_cost", "Cost: this run timed neither both padding to the context and greedy "
                       "packing, so the two are not compared.")
    a, b = c.loc["pad_to_context"], c.loc[SOURCE_PACKER]
    mid = a["seconds"] / b["seconds"]
    lo, hi = a["seconds_low"] / b["seconds_high"], a["seconds_high"] / b["seconds_low"]
    phrase = compare([a["seconds_low"], a["seconds_high"]], [b["seconds_low"], b["seconds_high"]],
                     more="faster", less="slower", same="level with padding", as_ratio=False)
    how = (f"every batch timed, {int(a['passes'])} pass{'es' if a['passes'] != 1 else ''}"
           if a["mode"] == "all_batches" else "each batch shape timed and weighted by how many batches have it")
    passes = int(a["passes"]) if a["mode"] == "all_batches" else 0

    def rng(x, y):   # the ratio's range (from 3 passes on), or 'in all N passes' when both ends print alike
        if 0 < passes < MIN_RUNS_FOR_RANGE and fnd.span(x, y, "×") != num(x, "×"):
            return f" ({passes} pass{'es' if passes != 1 else ''})"
        if fnd.span(x, y, "×") == num(x, "×"):
            return (
                f", in all {passes} passes"
                if passes > 1
                else ", in its one pass"
                if passes == 1
                else ", from the fastest and the slowest step of each shape alike"
            )
        how_range = "min–max over passes" if passes else "from the fastest and slowest step of each shape"
        return f" (range {fnd.span(x, y, '×')}, {how_range})"

    if phrase == "faster":
        ratio_text, tail = f"**{num(mid, '×')} faster**", rng(lo, hi)
    elif phrase == "slower":
        ratio_text, tail = f"**{num(1 / mid, '×')} slower**", rng(1 / hi, 1 / lo)
    else:
        ratio_text, tail = f"**{phrase}** (padded ÷ packed time {num(mid, '×')})", rng(lo, hi)
    unit = "GPU" if res.metadata.get("timed_on") == "cuda" else "CPU"
    return Finding(
        "measured_cost",
        f"Measured forward + backward of a {model_label(res)}, random weights, on {_device_name(res)}: "
        "all samples took "
        f"**{num(b['seconds'], 's')}** packed against **{num(a['seconds'], 's')}** padded to the context ({how}): "
        f"packing is {ratio_text} in measured {unit} time{tail}.",
        value=mid,
        unit="×",
        interval=None if fnd.span(lo, hi, "×") == num(lo, "×") or 0 < passes < MIN_RUNS_FOR_RANGE else (lo, hi),
        values=dict(packed_s=float(b["seconds"]), padded_s=float(a["seconds"]), phrase=phrase),
    )


def _isolation_finding(res):
    if "isolation" not in res.tables:
        return None
    iso = res.table("isolation")
    hf = iso[iso["code"] == "transformers"].reset_index(drop=True)
    if len(hf) < 2:
        return None
    right, default = hf.iloc[0], hf.iloc[1]
    v = right.get("transformers", "?")

    def state(row):
        return (f"reproduces each document alone (largest logit difference {row['max_abs_diff']:.0e})"
                if row["isolated"] else
                f"does not: documents see each other (largest logit difference {num(row['max_abs_diff'])})")

    text = (f"Packed rows from `DataCollatorWithFlattening` (position ids restarting per document, no attention "
            f"mask): a small model of GPT-2's architecture in transformers {v} called with `use_cache=False` "
            f"{state(right)}; called with its "
            f"default `use_cache=True` it {state(default)}.")
    return Finding("packing_isolation", text)


# --------------------------------------------------------------------------- more computed text and tables
def template_note(res) -> str:
    """Which joining of the fields and which end-of-text handling reproduce the published figures."""
    t = res.table("templates")
    best = t[t["published_matched"] == t["published_of"]]
    lines = []
    if len(best):
        combos = ", ".join(f"`{r.template}` with end-of-text `{r.eos}`" for r in best.itertuples())
        lines.append(f"Of the {len(t)} combinations of template and end-of-text handling tried, "
                     f"{'only ' if len(best) == 1 else ''}{combos} reproduce{'s' if len(best) == 1 else ''} all "
                     f"{int(t['published_of'].iloc[0])} published first-batch figures as printed.")
    else:
        top = t.sort_values("published_matched", ascending=False).iloc[0]
        lines.append(f"None of the {len(t)} combinations tried reproduces all published first-batch figures; the "
                     f"closest, `{top.template}` with `{top.eos}`, matches {int(top.published_matched)} of "
                     f"{int(top.published_of)}.")
    for r in t[t["eos"] == "packed_only"].itertuples():
        lines.append(f"`{r.template}`: first batch {r.first_batch_min:.0f} / {r.first_batch_max:.0f} / "
                     f"{r.first_batch_mean:.1f} / {r.first_batch_median:.0f} tokens (min / max / mean / median), "
                     f"{100 * r.first_batch_pad_to_context:.2f}% padded, {100 * r.first_batch_greedy_pack:.2f}% "
                     f"packed, {r.first_batch_ratio:.2f}×.")
    differs = _setting_differs(res)
    if differs:
        lines.append("This run's setting is not the published one: " + ", ".join(differs) + ".")
    return "\n\n".join(lines[:1]) + "\n\n" + "\n".join(f"* {x}" for x in lines[1:])


def templates_table(res) -> pd.DataFrame:
    """The first batch under every template and end-of-text handling, with short headers (the
    caption explains them): lengths in tokens, efficiencies in percent, the packing gain, and how
    many published first-batch figures each reproduces as printed."""
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


def population_note(res) -> str:
    """How much the population alone moves the numbers."""
    fb = res.table("first_batch").set_index("strategy")
    al = res.table("strategies").set_index("strategy")
    if not {"pad_to_context", SOURCE_PACKER} <= set(fb.index):
        return ""
    rf = fb.loc[SOURCE_PACKER, "efficiency"] / fb.loc["pad_to_context", "efficiency"]
    ra = al.loc[SOURCE_PACKER, "efficiency"] / al.loc["pad_to_context", "efficiency"]
    return (
        f"Same template, same tokenizer, same code: the population alone takes padding to the context from "
        f"{pct(fb.loc['pad_to_context', 'efficiency'])} (first batch) to {pct(al.loc['pad_to_context', 'efficiency'])} "
        f"(all samples), and the packing gain from {times(rf)} to {times(ra)} "
        f"({compare(ra, rf, more='larger', less='smaller', same='about the same', as_ratio=False, tol=0.02)} "
        "over all samples). A figure is only comparable with one of the same population."
        + _eos_note(al.loc["pad_to_context"], al.loc[SOURCE_PACKER], res.parameters.get("eos"))
    )


def cost_result(res, ref=None):
    """The result whose timings the cost section shows (this run's, else the reference run's) and a label."""
    if "cost" in res.tables:
        return res, "this run"
    if ref is not None and "cost" in getattr(ref, "tables", {}):
        return ref, f"reference run {ref.run_id}"
    return None, None


def cost_note(res) -> str:
    """Per-shape facts of the timing: partial batches, spreads, and measured time against positions."""
    c = res.table("cost").set_index("strategy")
    shp = res.table("cost_shapes")
    lines = []
    for s, g in shp.groupby("strategy", sort=False):
        full = g[g["rows"] == g["rows"].max()]
        part = g[g["rows"] < g["rows"].max()]
        if len(part):
            n, total = int(part["batches"].sum()), int(g["batches"].sum())
            text = (f"{LABELS[s]}: {n} of {total} batches {'is' if n == 1 else 'are'} partial "
                    f"({', '.join(str(int(r)) for r in part['rows'])} row{'s' if part['rows'].max() > 1 else ''})")
            same_len = part[part["row_len"].isin(full["row_len"])]
            if len(same_len) and len(full):
                r = same_len.iloc[0]
                f = full[full["row_len"] == r["row_len"]].iloc[0]
                text += (f"; {int(r['rows'])} × {int(r['row_len']):,} took {num(r['mean'], 'ms')} per step against "
                         f"{num(f['mean'], 'ms')} for {int(f['rows'])} × {int(f['row_len']):,}")
            lines.append(text + "; each batch counts once, at its own cost.")
        wide = g[(g["timed"] > 1) & (g["mean"] > 0) & (g["std"] > HIGH_SPREAD * g["mean"])]
        if len(wide):
            w = wide.assign(cv=wide["std"] / wide["mean"]).sort_values("cv").iloc[-1]
            lines.append(f"{LABELS[s]}: step times of {len(wide)} of {len(g)} batch shape"
                         f"{'s' if len(g) != 1 else ''} spread by more than {pct(HIGH_SPREAD)} (coefficient of "
                         f"variation); the widest, {int(w['rows'])} × {int(w['row_len']):,}, ran "
                         f"{fnd.span(w['min'], w['max'], 'ms')} over {int(w['timed'])} steps: read "
                         "these as ranges.")
    if {"pad_to_context", SOURCE_PACKER} <= set(c.index):
        al = res.table("strategies").set_index("strategy")
        pos = al.loc["pad_to_context", "positions"] / al.loc[SOURCE_PACKER, "positions"]
        t = c.loc["pad_to_context", "seconds"] / c.loc[SOURCE_PACKER, "seconds"]
        lines.append(f"Positions predict a {num(pos, '×')} gain; the measured time gives {num(t, '×')} "
                     f"({num(100 * t / pos, '%')} of the positions' prediction).")
        split = breakdown_note(res)
        if split:
            lines.append(split)
    if "isolation" in res.tables:
        hf = res.table("isolation")
        hf = hf[hf["code"] == "transformers"]
        if len(hf) and not bool(hf.iloc[0]["isolated"]):
            lines.append(f"In transformers {hf.iloc[0]['transformers']} the packed rows were timed as the library ran "
                         "them: without a block-diagonal mask (documents saw each other in the check above), so "
                         "their cost is that of plain causal attention.")
    if "cost_steps" in res.tables:
        st = res.table("cost_steps")
        if st["pass"].nunique() > 1:
            for s, g in st.groupby("strategy", sort=False):
                note = spread_note(f"{LABELS[s]}, time per pass", (g.groupby('pass')['ms'].sum() / 1e3).tolist(), "s")
                if note:
                    lines.append(note)
    return "\n".join(f"* {x}" for x in lines)


def step_breakdown(res) -> pd.DataFrame:
    """The parts of a full step (the most frequent shape with the most rows) of each layout: layers
    forward, output layer + loss, layers backward, with the real targets and positions of that shape."""
    shp = res.table("cost_shapes")
    if not set(STEP_PARTS) <= set(shp.columns):
        return pd.DataFrame()
    st = res.table("cost_steps")
    rows = []
    for s, g in shp.groupby("strategy", sort=False):
        full = g[g["rows"] == g["rows"].max()].sort_values("batches").iloc[-1]
        mine = st[(st["strategy"] == s) & (st["rows"] == full["rows"]) & (st["row_len"] == full["row_len"])]
        rows.append(dict(strategy=s, label=LABELS[s], rows=int(full["rows"]), row_len=int(full["row_len"]),
                         positions=int(full["rows"] * full["row_len"]), ms=float(full["mean"]),
                         **{k: float(full[k]) for k in STEP_PARTS},
                         real_targets=float(mine["real_targets"].mean()) if "real_targets" in mine else float("nan")))
    return pd.DataFrame(rows)


def breakdown_note(res) -> str:
    """Why time does not follow positions: the parts of a full padded and a full packed step."""
    b = step_breakdown(res)
    if b.empty or not {"pad_to_context", SOURCE_PACKER} <= set(b["strategy"]):
        return ""
    b = b.set_index("strategy")
    a, k = b.loc["pad_to_context"], b.loc[SOURCE_PACKER]
    layers_a = a["layers_forward_ms"] + a["layers_backward_ms"]
    layers_k = k["layers_forward_ms"] + k["layers_backward_ms"]
    per_pos = compare(layers_k / k["positions"], layers_a / a["positions"], more="more", less="less",
                      same="about the same", as_ratio=False, tol=0.1)
    head = compare(k["head_ms"], a["head_ms"], more="more", less="less", same="about the same", as_ratio=False)
    targets = (f" for {num(k['real_targets'], '')} real targets against {num(a['real_targets'], '')}"
               if not (np.isnan(k["real_targets"]) or np.isnan(a["real_targets"])) else "")
    return (f"A full padded step ({int(a['rows'])} × {int(a['row_len']):,}) took {num(a['ms'], 'ms')}: layers "
            f"{num(layers_a, 'ms')}, output layer and loss {num(a['head_ms'], 'ms')}. A full packed step "
            f"({int(k['rows'])} × {int(k['row_len']):,}) took {num(k['ms'], 'ms')}: layers {num(layers_k, 'ms')} "
            f"({per_pos} per position), output layer and loss {num(k['head_ms'], 'ms')} ({head}{targets}). "
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
    return pd.DataFrame({"code": iso["code"], "model": model, "packed row fed as": iso["inputs"],
                         "largest |logit difference| vs alone": [f"{v:.1e}" for v in iso["max_abs_diff"]],
                         "documents kept apart": iso["isolated"].map({True: "yes", False: "no"})})


def collator_note(res) -> str:
    if "collator" not in res.tables or not len(res.table("collator")):
        return "No packing layout in this run: nothing to compare with the collator."
    lines = []
    for r in res.table("collator").itertuples():
        same = [n for n, ok in (("input ids", r.input_ids_equal), ("position ids", r.position_ids_equal),
                                ("labels", r.labels_equal)) if ok]
        diff = [n for n in ("input ids", "position ids", "labels") if n not in same]
        lines.append(f"{LABELS[r.strategy]}, first batch ({r.rows} rows, {r.documents:,} documents, "
                     f"{r.real_tokens:,} real tokens): "
                     + ("identical " + ", ".join(same) if not diff else "different " + ", ".join(diff))
                     + " from `packed_inputs` and from `DataCollatorWithFlattening`.")
    return "\n".join(f"* {x}" for x in lines)


def takeaways(res) -> str:
    """The chapter's closing bullets, each following this run's data."""
    al = res.table("strategies").set_index("strategy")
    lines = []
    if "pad_to_context" in al.index:
        order = al["efficiency"].sort_values(ascending=False)
        lines.append("Efficiency over all samples, best first: " + ", ".join(
            f"{LABELS[s]} {pct(e)}" for s, e in order.items()) + ".")
    if {"pad_to_longest", SOURCE_PACKER} <= set(al.index):
        d = direction(al.loc[SOURCE_PACKER, "efficiency"], al.loc["pad_to_longest", "efficiency"], tol=0.01)
        lines.append(choose(d, "Padding to the longest sample of each batch recovers part of the waste; packing "
                               "recovers more.",
                            "Here padding to the longest sample of each batch is more efficient than greedy packing.",
                            "Here padding to the longest sample of each batch is as efficient as greedy packing."))
    iso = res.table("isolation") if "isolation" in res.tables else None
    if iso is not None:
        hf = iso[iso["code"] == "transformers"]
        if len(hf) >= 2 and bool(hf.iloc[0]["isolated"]) and not bool(hf.iloc[1]["isolated"]):
            lines.append("With transformers, packed rows stay correct only when nothing else overrides the "
                         "position ids: no attention mask and no cache (`use_cache=False`), or a "
                         "variable-length attention kernel.")
        elif len(hf) >= 1 and not bool(hf.iloc[0]["isolated"]):
            lines.append("This transformers version does not keep packed documents apart from position ids alone: "
                         "pass an explicit block-diagonal mask or use a variable-length attention kernel.")
    return "\n".join(f"* {x}" for x in lines)


# --------------------------------------------------------------------------- the opening
PACK_SNIPPET = """from transformers import DataCollatorWithFlattening

# several samples per row, position ids restarting at each one
loader = DataLoader(dataset, batch_size={bs}, collate_fn=DataCollatorWithFlattening())"""

#: Added to the packing snippet when this run found the model's default cache mixing packed documents.
NO_CACHE_LINE = "\nloss = model(**batch, use_cache=False).loss  # with the cache on, packed samples mixed here"

PAD_SNIPPET = """from transformers import DataCollatorWithPadding

# pad each batch to its own longest sample, not to the context
loader = DataLoader(dataset, batch_size={bs}, collate_fn=DataCollatorWithPadding(tokenizer, padding="longest"))"""


def opening(res) -> Opening:
    """What the chapter opens with: the first batch's and all samples' gain of packing over padding to the
    context, and the measured time, one sentence each; then the layout that cost least in this run (by
    measured time where timed, else by the share of real tokens), with its snippet."""
    f = {x.key: x for x in findings(res)}
    out = []
    if "first_batch_ratio" in f:
        x = f["first_batch_ratio"]
        fb = res.table("first_batch").set_index("strategy")
        word = choose(direction(x.value, 1.0, tol=0.01), "more", "fewer", "as many")
        out.append(Finding(x.key, f"In the first batch, packing put **{times(x.value)}** {word} real tokens in each "
                           f"computed position than padding to the context ({pct(fb.loc[SOURCE_PACKER, 'efficiency'])}"
                           f" against {pct(fb.loc['pad_to_context', 'efficiency'])}).", x.value, "×",
                           published=x.published))
    if "all_samples" in f:
        x = f["all_samples"]
        al = res.table("strategies").set_index("strategy")
        word = choose(direction(x.value, 1.0, tol=0.01), "more", "fewer", "as many")
        out.append(Finding(x.key, f"Over all {int(al.loc['pad_to_context', 'samples']):,} samples, packing needed "
                           f"{int(al.loc[SOURCE_PACKER, 'steps']):,} steps instead of "
                           f"{int(al.loc['pad_to_context', 'steps']):,}: **{times(x.value)}** {word} real tokens "
                           "per position.", x.value, "×"))
    cost = f.get("measured_cost")
    if cost is not None and cost.value is not None:
        phrase = cost.values["phrase"]
        verdict = choose(1 if phrase == "faster" else -1 if phrase == "slower" else 0,
                         f"**{times(cost.value)} less**", f"**{times(1 / cost.value)} more**", "**as much**")
        out.append(Finding(cost.key, f"Forward and backward over all samples took {verdict} time packed than padded "
                           f"to the context ({num(cost.values['packed_s'], 's')} against "
                           f"{num(cost.values['padded_s'], 's')}, {_device_name(res)}).", cost.value, "×",
                           interval=cost.interval))
    return Opening(out[:3], _actions(res))


def _actions(res) -> list[Action]:
    """The layout this run's numbers choose: the fastest measured one, else the one with most real tokens."""
    bs = int(res.parameters.get("batch_size", 32))
    if "cost" in res.tables and len(res.table("cost")):
        c = res.table("cost").set_index("strategy")
        best, worst = c["seconds"].idxmin(), c["seconds"].idxmax()
        if SOURCE_PACKER in c.index and direction(c.loc[SOURCE_PACKER, "seconds"], c.loc[best, "seconds"]) == 0:
            best = SOURCE_PACKER   # level with the fastest: the simpler packer
        gain = (f"here it took {num(c.loc[best, 'seconds'], 's')} for all samples against "
                f"{num(c.loc[worst, 'seconds'], 's')} with {LABELS.get(worst, worst)} "
                f"({times(c.loc[worst, 'seconds'] / c.loc[best, 'seconds'])})")
    else:
        c = res.table("strategies").set_index("strategy")
        best, worst = c["efficiency"].idxmax(), c["efficiency"].idxmin()
        gain = (f"here it filled {pct(c.loc[best, 'efficiency'])} of the computed positions with real tokens "
                f"against {pct(c.loc[worst, 'efficiency'])} with {LABELS.get(worst, worst)}; no time was measured")
    name = LABELS.get(best, best)
    if best in ("greedy_pack", "best_fit_decreasing"):
        return [Action(f"Pack samples into full rows ({name}): {gain}. Pass per-document position ids, as the "
                       "collator below does.",
                       PACK_SNIPPET.format(bs=bs) + (NO_CACHE_LINE if _cache_mixes(res) else ""))]
    if best == "pad_to_context":
        return [Action(f"Keep padding to the context: {gain}, so packing gained nothing measurable here.")]
    return [Action(f"Use {name}: {gain}.", PAD_SNIPPET.format(bs=bs))]


def _cache_mixes(res) -> bool:
    """True when this run found packed documents kept apart with ``use_cache=False`` but not with the default."""
    iso = res.tables.get("isolation")
    hf = iso[iso["code"] == "transformers"].reset_index(drop=True) if iso is not None and "code" in iso else []
    return len(hf) >= 2 and bool(hf.iloc[0]["isolated"]) and not bool(hf.iloc[1]["isolated"])
