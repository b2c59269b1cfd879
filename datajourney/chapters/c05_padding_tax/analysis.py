"""Chapter 5's analysis: what a padding-tax result finds, as facts (no prose).

Two populations are kept apart: the **first batch** (the published figures' population) and **all samples**
(what an epoch costs). Efficiencies are exact counts (one "run", no spread); times are the mean over the
timing passes with their min–max. Every comparison names its baseline: packing against padding each batch to
its longest sample (the usual practice) comes first, against padding to the context (the published setting)
second.
"""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pandas as pd

from datajourney.chapters.c05_padding_tax.packing import ROWS
from datajourney.chapters.c05_padding_tax.params import (
    CHAPTER,
    EOS_ID,
    EOS_MODES,
    LABELS,
    PUBLISHED_SETTING,
    STEP_PARTS,
    STRATEGIES,
    uses_eos,
)
from datajourney.chapters.published import printed_as
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Advice, Fact, Facts, compare, measured
from datajourney.core.results import Result
from datajourney.core.stats import HIGH_SPREAD, cv

#: The packer the published figures used (the source's greedy, in-order packing).
SOURCE_PACKER = "greedy_pack"
#: Each layout as a noun phrase (the labels of facts, and so the baselines of comparisons).
NOUNS = {"pad_to_context": "padding every sample to the context",
         "pad_to_longest": "padding each batch to its longest sample",
         "bucketed": "length-bucketed batches padded to their longest sample",
         "greedy_pack": "greedy packing in sample order",
         "best_fit_decreasing": "best-fit-decreasing packing"}
#: The published figures' metrics whose meaning a fact shares.
PUBLISHED = {"first_batch_pad_to_context": "efficiency, pad to context", "first_batch_packed": "efficiency, packed",
             "first_batch_ratio": "packed ÷ pad to context"}
#: Which published figures the first batch is checked against, as (metric, fact key).
REPRODUCED = (("efficiency, pad to context", "first_batch_pad_to_context"),
              ("efficiency, packed", "first_batch_packed"),
              ("packed ÷ pad to context", "first_batch_ratio"))
#: Facts and data other pages may read: chapter 12's checklist and padding shares, the front page.
EXPORTS = ("all_samples", "all_samples_vs_context", "packing_vs_longest", "packing_vs_context", "first_batch_ratio",
           "best_layout", "padding_shares")


def _rows(res: Result, name: str) -> dict:
    if name not in res.tables:
        return {}
    t = res.table(name)
    return {r["strategy"]: r for r in t.to_dict(orient="records") if r.get("strategy") in STRATEGIES}


def _share(key: str, row: dict, population: str) -> Fact:
    s = row["strategy"]
    return Fact(key, 100 * float(row["efficiency"]), "%", f"the efficiency of {NOUNS[s]} ({population})",
                "share", "higher", setting={"strategy": s, "population": population}, published=PUBLISHED.get(key))


def _time(key: str, row: dict) -> Fact:
    """The time for all samples of one layout: the mean over the timing passes, min–max over them."""
    s = row["strategy"]
    passes = int(row["passes"]) if row.get("mode") == "all_batches" else 1
    lo, hi = float(row["seconds_low"]), float(row["seconds_high"])
    spread = (lo, hi) if passes > 1 else None
    return Fact(key, float(row["seconds"]), "s", NOUNS[s], "time",
                "lower", n=passes, spread=spread, setting={"strategy": s, "timing": str(row.get("mode"))})


def _setting_differs(res: Result) -> list[str]:
    p = res.parameters
    return [k for k, v in PUBLISHED_SETTING.items() if (p[k] if k in p else None) != v]


def padding_shares(res: Result) -> list[dict]:
    """Real tokens per computed position by layout, all samples: records of strategy, label, efficiency
    (a fraction), as chapter 12 reads them."""
    if "strategies" not in res.tables:
        return []
    s = res.table("strategies")
    s = s[s["population"] == "all samples"] if "population" in s else s
    return [dict(strategy=str(r["strategy"]), label=str(r["label"]), efficiency=float(r["efficiency"]))
            for r in s.to_dict(orient="records")]


def model_label(res: Result) -> str:
    """The timed model as the chapter names it: 'GPT-2 architecture (4 layers, 512 wide)' (not GPT-2 itself)."""
    m = res.metadata.get("model") or {}
    n, d = m.get("n_layers"), m.get("d_model")
    if n is None or d is None:
        return "GPT-2 architecture"
    return f"GPT-2 architecture ({int(n)} layer{'s' if int(n) != 1 else ''}, {int(d)} wide)"


def device_name(res: Result) -> str:
    """Where the steps were timed: the GPU's or the CPU's name from the fingerprint."""
    if res.metadata.get("timed_on") == "cuda":
        return str((res.fingerprint.get("gpu") or {}).get("name") or "the GPU")
    return str((res.fingerprint.get("cpu") or {}).get("model") or "the CPU")


def workload(res: Result) -> str:
    """The timed workload in plain words, from the result."""
    p = res.parameters
    what = "of your documents (token_path)" if res.metadata.get("your_data") else "Alpaca samples"
    return (f"{model_label(res)} training on the first {int(p['n_samples']):,} {what}, "
            f"{int(p['batch_size'])} rows a step, context {int(p['context_length']):,}")


#: How the padded layouts order samples into batches and size their rows.
_PADDED = {"pad_to_context": ("order = list(range(len(docs)))", "CONTEXT"),
           "pad_to_longest": ("order = list(range(len(docs)))", "max(len(docs[i]) for i in batch)"),
           "bucketed": ("window = ROWS * {w}  # sorted by length within each window of {w} batches\n"
                        "order = [i for s in range(0, len(docs), window)\n"
                        "         for i in sorted(range(s, min(s + window, len(docs))), key=lambda i: len(docs[i]))]",
                        "max(len(docs[i]) for i in batch)")}


def snippet(res: Result, strategy: str) -> str | None:
    """Code a reader can paste into a Hugging Face training loop (``tokens``: each sample's token ids; ``model``:
    a causal LM) that builds the batches this run timed for ``strategy``, with this run's values (None where a value
    is not one the chapter knows: nothing from a result file reaches code unchecked). Packed rows come from
    transformers' ``DataCollatorWithFlattening`` (no attention mask: samples are told apart by position ids that
    restart at 0), padded rows carry an attention mask; labels are -100 on padding and on each sample's first
    token, as in the timed step."""
    p = res.parameters
    eos = p["eos"] if "eos" in p else None
    if strategy not in STRATEGIES or eos not in EOS_MODES:
        return None
    window = 1
    if strategy == "bucketed":   # the window a bucketed run sorted in, checked like eos: no code from a bad value
        window = p["bucket_batches"] if "bucket_batches" in p else None
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        return None
    bs, ctx = int(p["batch_size"]), int(p["context_length"])
    keep = "CONTEXT - 1" if eos != "never" else "CONTEXT"   # as the chapter cuts a longer document (your data)
    docs = (f"[list(t)[:{keep}] + [EOS] for t in tokens]" if uses_eos(strategy, eos)
            else f"[list(t)[:{keep}] for t in tokens]")
    head = (f"ROWS, CONTEXT, EOS = {bs}, {ctx}, {EOS_ID}  # as timed: {LABELS.get(strategy, strategy)}\n"
            f"docs = {docs}  # tokens: each sample's token ids\n")
    if strategy in ROWS:   # the packer the experiment timed, its own source
        pack = ROWS[strategy]
        imports = ("import bisect\n" if "bisect." in inspect.getsource(pack) else "") + \
            "import torch\nfrom transformers import DataCollatorWithFlattening\n\n\n"
        return (imports + inspect.getsource(pack) + "\n\n" + head +
                "flatten = DataCollatorWithFlattening()  # position ids restart at 0 for each sample\n\n\n"
                "def packed(row):\n"
                "    flat = flatten([{\"input_ids\": docs[i]} for i in row], return_tensors=\"pt\")\n"
                "    n = flat[\"input_ids\"].shape[1]\n"
                "    out = {\"input_ids\": torch.full((CONTEXT,), EOS), \"labels\": torch.full((CONTEXT,), -100),\n"
                "           \"position_ids\": torch.arange(CONTEXT) - n}  # padding: positions 0, 1, ... of its own\n"
                "    for k in out:\n"
                "        out[k][:n] = flat[k][0]\n"
                "    return out\n\n\n"
                f"rows = {pack.__name__}([len(d) for d in docs], CONTEXT)\n"
                "for s in range(0, len(rows), ROWS):\n"
                "    parts = [packed(row) for row in rows[s:s + ROWS]]\n"
                "    batch = {k: torch.stack([b[k] for b in parts]) for k in parts[0]}\n"
                "    model(**batch, use_cache=False).loss.backward()\n")
    order, row_len = _PADDED[strategy]
    if strategy == "bucketed":
        order = order.format(w=window)
    return ("import torch\n\n" + head + order + "\n"
            "for s in range(0, len(order), ROWS):\n"
            "    batch = order[s:s + ROWS]\n"
            f"    row_len = {row_len}\n"
            "    ids = torch.full((len(batch), row_len), EOS)\n"
            "    mask = torch.zeros_like(ids)\n"
            "    for r, i in enumerate(batch):\n"
            "        ids[r, :len(docs[i])] = torch.tensor(docs[i])\n"
            "        mask[r, :len(docs[i])] = 1\n"
            "    labels = ids.masked_fill(mask == 0, -100)\n"
            "    labels[:, 0] = -100\n"
            "    model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss.backward()\n")


def analyse(res: Result) -> Facts:
    """Chapter 5's facts (see the module docstring)."""
    out = Facts(CHAPTER, exports=EXPORTS)
    fb, al, cost = _rows(res, "first_batch"), _rows(res, "strategies"), _rows(res, "cost")
    # ---- first batch: the published figures' population
    for s, r in fb.items():
        key = {"pad_to_context": "first_batch_pad_to_context", SOURCE_PACKER: "first_batch_packed"}.get(
            s, f"first_batch.{s}")
        out.add(_share(key, r, "first batch"))
    if "pad_to_context" in fb:   # the page's exercise on paper: η of the first batch from its tokens
        r = fb["pad_to_context"]
        longest = fb.get("pad_to_longest", {}).get("row_len")
        out.data["exercise"] = dict(samples=int(r["samples"]), real_tokens=int(r["real_tokens"]),
                                    context=int(r["row_len"]), longest=None if longest is None else int(longest))
    if SOURCE_PACKER in fb:
        r = fb[SOURCE_PACKER]
        out.add(Fact("first_batch_packed_samples", int(r["samples"]), "", "samples in the first packed batch",
                     "count", None),
                Fact("first_batch_rows", int(r["rows"]), "", "rows of the first batch", "count", None),
                Fact("first_batch_row_len", int(r["row_len"]), "tokens", "positions per row", "count", None))
    if {"first_batch_packed", "first_batch_pad_to_context"} <= set(out.facts):
        out.add(compare("first_batch_ratio", out["first_batch_packed"], out["first_batch_pad_to_context"],
                        published=PUBLISHED["first_batch_ratio"]))
        matched = [m for m, k in REPRODUCED if out.number(k) is not None and _figure(m) is not None
                   and printed_as(out.number(k), _figure(m))]
        out.add(Fact("published_reproduced", len(matched), "", "published first-batch figures reproduced as printed",
                     "count", "higher", setting={"of": len(REPRODUCED)}))
    out.data["setting_differs"] = {k: res.parameters[k] if k in res.parameters else None
                                   for k in _setting_differs(res)}
    # ---- all samples: what an epoch costs
    for s, r in al.items():
        out.add(_share(f"all.{s}", r, "all samples"),
                Fact(f"steps.{s}", int(r["steps"]), "", f"steps for all samples, {NOUNS[s]}", "count", "lower",
                     setting={"strategy": s}))
    if al:
        out.add(Fact("samples", int(next(iter(al.values()))["samples"]), "", "samples", "count", None))
    if f"all.{SOURCE_PACKER}" in out:
        basis = "pad_to_longest" if "all.pad_to_longest" in out else "pad_to_context"
        if f"all.{basis}" in out:
            out.add(compare("all_samples", out[f"all.{SOURCE_PACKER}"], out[f"all.{basis}"]))
        if "all.pad_to_context" in out:
            out.add(compare("all_samples_vs_context", out[f"all.{SOURCE_PACKER}"], out["all.pad_to_context"]))
    # ---- measured time
    for s, r in cost.items():
        out.add(_time(f"time.{s}", r))
    if f"time.{SOURCE_PACKER}" in out:
        for key, base in (("packing_vs_longest", "pad_to_longest"), ("packing_vs_context", "pad_to_context")):
            if f"time.{base}" in out:
                out.add(compare(key, out[f"time.{SOURCE_PACKER}"], out[f"time.{base}"]))
    if cost:
        out.data["device_name"] = device_name(res)
        out.data["model"] = model_label(res)
        out.add(Fact("timed_on", str(res.metadata.get("timed_on")), "", "where the steps were timed", "choice", None))
    # ---- packed documents kept apart (transformers' collator, with and without the cache)
    iso = res.tables.get("isolation")
    if iso is not None and "code" in iso:
        hf = iso[iso["code"] == "transformers"].reset_index(drop=True)
        for i, name in ((0, "no_cache"), (1, "default")):
            if len(hf) > i:
                r = hf.iloc[i]
                out.add(Fact(f"isolation.{name}", float(r["max_abs_diff"]), "", "largest logit difference, packed "
                             "against alone", "amount", "lower", setting={"isolated": bool(r["isolated"]),
                                                                          "inputs": str(r["inputs"])}))
        if len(hf):
            out.data["transformers"] = str(hf.iloc[0].get("transformers", ""))
    out.advise(_advice(res, out))
    out.data["padding_shares"] = padding_shares(res)
    _templates(res, out)
    _population(res, out, fb, al)
    if cost:
        _cost_notes(res, out)
    _collator(res, out)
    _lengths(res, out)
    _run_notes(res, out)
    return out


def _count(key: str, value, label: str, unit: str = "", **kw) -> Fact:
    return Fact(key, int(value), unit, label, "count", None, **kw)


def _templates(res: Result, out: Facts) -> None:
    """The first batch under every template and end-of-text handling: how many combinations were tried, which
    reproduce every published first-batch figure, and each template's first batch with end-of-text after packed
    samples only (``template.<i>.*``, the template's name in the setting)."""
    if "templates" not in res.tables or not len(res.table("templates")):
        return
    t = res.table("templates").reset_index(drop=True)
    out.add(_count("templates.tried", len(t), "combinations of template and end-of-text handling tried"),
            _count("templates.published_of", int(t["published_of"].iloc[0]), "published first-batch figures"))
    best = t[t["published_matched"] == t["published_of"]]
    out.data["templates_matching"] = [{"template": str(r.template), "eos": str(r.eos)} for r in best.itertuples()]
    out.add(_count("templates.matching", len(best), "combinations that reproduce every published figure"))
    top = t.sort_values("published_matched", ascending=False).iloc[0]
    out.add(_count("templates.closest_matched", int(top["published_matched"]),
                   "published figures the closest combination reproduces",
                   setting={"template": str(top["template"]), "eos": str(top["eos"])}))
    for i, r in t[t["eos"] == "packed_only"].iterrows():
        s, k = {"template": str(r["template"]), "eos": "packed_only"}, f"template.{i}"
        pad = Fact(f"{k}.pad_to_context", 100 * float(r["first_batch_pad_to_context"]), "%",
                   "padding every sample to the context", "share", "higher", setting=s)
        pack = Fact(f"{k}.greedy_pack", 100 * float(r["first_batch_greedy_pack"]), "%",
                    "greedy packing in sample order", "share", "higher", setting=s)
        out.add(*(Fact(f"{k}.{c}", float(r[f"first_batch_{c}"]), "", f"the {c} sample length in tokens, first batch",
                       "amount", None, setting=s) for c in ("min", "max", "mean", "median")),
                pad, pack, compare(f"{k}.ratio", pack, pad))


def _population(res: Result, out: Facts, fb: dict, al: dict) -> None:
    """How much the population alone moves the packing gain, and the gain in positions computed."""
    if not ({"pad_to_context", SOURCE_PACKER} <= set(fb) and {"pad_to_context", SOURCE_PACKER} <= set(al)):
        return
    if {"first_batch_ratio", "all_samples_vs_context"} <= set(out.facts):
        gain_all = dataclasses.replace(out["all_samples_vs_context"], key="gain.all_samples", of=None, basis=None,
                                       label="the packing gain over all samples", quantity="ratio")
        gain_fb = dataclasses.replace(out["first_batch_ratio"], key="gain.first_batch", of=None, basis=None,
                                      label="the packing gain in the first batch", quantity="ratio",
                                      published=None)
        out.add(gain_all, gain_fb, compare("population_gain", gain_all, gain_fb))
    pos = {s: _count(f"positions.{s}", al[s]["positions"], f"positions computed, {NOUNS[s]}", unit="positions")
           for s in ("pad_to_context", SOURCE_PACKER)}
    eos = res.parameters["eos"] if "eos" in res.parameters else None
    counted = bool(eos in EOS_MODES and uses_eos(SOURCE_PACKER, eos) and not uses_eos("pad_to_context", eos))
    gain = compare("positions_gain", pos["pad_to_context"], pos[SOURCE_PACKER])
    out.add(*pos.values(), dataclasses.replace(gain, setting={"eos_counted_as_real": counted}))


def step_breakdown(res: Result) -> pd.DataFrame:
    """The parts of a full step (the most frequent shape with the most rows) of each layout: layers
    forward, output layer + loss, layers backward, with the real targets and positions of that shape."""
    if "cost_shapes" not in res.tables:
        return pd.DataFrame()
    shp = res.table("cost_shapes")
    if not set(STEP_PARTS) <= set(shp.columns) or "cost_steps" not in res.tables:
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


def _shape(s: str, rows: int, row_len: int) -> dict:
    return {"strategy": s, "rows": int(rows), "row_len": int(row_len)}


def _cost_notes(res: Result, out: Facts) -> None:
    """The timing's details: partial batches (``partial.<s>.*``), shapes whose step times spread widely
    (``spread.<s>.*``), time against positions (``time_of_positions``), the parts of a full step
    (``breakdown.<s>.*``, ``breakdown.layers_per_position``, ``breakdown.head``) and the time per pass
    (``passes.<s>``)."""
    out.add(Fact("high_spread", 100 * HIGH_SPREAD, "%", "the coefficient of variation that counts as wide", "share",
                 None))
    if "cost_shapes" in res.tables:
        for s, g in res.table("cost_shapes").groupby("strategy", sort=False):
            if s not in STRATEGIES:
                continue
            full, part = g[g["rows"] == g["rows"].max()], g[g["rows"] < g["rows"].max()]
            if len(part):
                out.add(_count(f"partial.{s}.batches", part["batches"].sum(), f"partial batches, {NOUNS[s]}"),
                        _count(f"partial.{s}.of", g["batches"].sum(), f"batches, {NOUNS[s]}"))
                for i, r in enumerate(part.itertuples()):
                    out.add(_count(f"partial.{s}.rows.{i}", r.rows, "rows of a partial batch", ))
                same_len = part[part["row_len"].isin(full["row_len"])]
                if len(same_len) and len(full):
                    r = same_len.iloc[0]
                    f = full[full["row_len"] == r["row_len"]].iloc[0]
                    a = Fact(f"partial.{s}.step", float(r["mean"]), "ms",
                             f"a partial {int(r['rows'])} × {int(r['row_len']):,} step", "time", "lower",
                             setting=_shape(s, r["rows"], r["row_len"]))
                    b = Fact(f"partial.{s}.full_step", float(f["mean"]), "ms",
                             f"a full {int(f['rows'])} × {int(f['row_len']):,} step", "time", "lower",
                             setting=_shape(s, f["rows"], f["row_len"]))
                    out.add(a, b, compare(f"partial.{s}.vs_full", a, b))
            wide = g[(g["timed"] > 1) & (g["mean"] > 0) & (g["std"] > HIGH_SPREAD * g["mean"])]
            if len(wide):
                w = wide.assign(cv=wide["std"] / wide["mean"]).sort_values("cv").iloc[-1]
                out.add(_count(f"spread.{s}.wide", len(wide), f"batch shapes spread widely, {NOUNS[s]}"),
                        _count(f"spread.{s}.shapes", len(g), f"batch shapes, {NOUNS[s]}"),
                        Fact(f"spread.{s}.widest", float(w["mean"]), "ms",
                             f"the widest-spread shape, {int(w['rows'])} × {int(w['row_len']):,}", "time", "lower",
                             n=int(w["timed"]), spread=(float(w["min"]), float(w["max"])),
                             setting=_shape(s, w["rows"], w["row_len"])))
    if "packing_vs_context" in out and "positions_gain" in out:
        t, p = out.number("packing_vs_context"), out.number("positions_gain")
        if t and p:
            out.add(Fact("time_of_positions", 100 * (1 / t) / p, "%",
                         "the measured time's gain as a share of the positions' prediction", "share", "higher"))
    b = step_breakdown(res)
    if not b.empty and {"pad_to_context", SOURCE_PACKER} <= set(b["strategy"]):
        b = b.set_index("strategy")
        parts = {}
        for s in ("pad_to_context", SOURCE_PACKER):
            r, k, sh = b.loc[s], f"breakdown.{s}", _shape(s, b.loc[s, "rows"], b.loc[s, "row_len"])
            layers = float(r["layers_forward_ms"] + r["layers_backward_ms"])
            step = "a full packed step" if s == SOURCE_PACKER else "a full padded step"
            parts[s] = dict(
                layers=Fact(f"{k}.layers_per_position", layers / float(r["positions"]), "ms",
                            f"the layers per position of {step}", "time", "lower", setting=sh),
                head=Fact(f"{k}.head", float(r["head_ms"]), "ms", f"the output layer and loss of {step}", "time",
                          "lower", setting=sh))
            out.add(_count(f"{k}.rows", r["rows"], "rows of a full step"),
                    _count(f"{k}.row_len", r["row_len"], "positions per row of a full step", unit="positions"),
                    Fact(f"{k}.step", float(r["ms"]), "ms", f"a full step, {NOUNS[s]}", "time", "lower", setting=sh),
                    Fact(f"{k}.layers", layers, "ms", f"the layers of a full step, {NOUNS[s]}", "time", "lower",
                         setting=sh),
                    *parts[s].values())
            if not np.isnan(r["real_targets"]):
                out.add(Fact(f"{k}.real_targets", float(r["real_targets"]), "", "real targets of a full step",
                             "count", None, setting=sh))
        for part in ("layers", "head"):
            out.add(compare(f"breakdown.{part}", parts[SOURCE_PACKER][part], parts["pad_to_context"][part]))
    if "cost_steps" in res.tables:
        st = res.table("cost_steps")
        if st["pass"].nunique() > 1:
            for s, g in st.groupby("strategy", sort=False):
                xs = (g.groupby("pass")["ms"].sum() / 1e3).tolist()
                f = measured(f"passes.{s}", xs, unit="s", label=f"{NOUNS.get(s, s)}, time per pass", quantity="time",
                             better="lower", setting={"strategy": s})
                out.add(f, Fact(f"passes.{s}.cv", 100 * cv(xs), "%", "coefficient of variation over the passes",
                                "share", "lower", setting={"strategy": s}))


#: The first batch's sample lengths: (column of ``length_stats``, the published metric of the same meaning).
LENGTHS = (("min", "first batch: shortest sample"), ("max", "first batch: longest sample"),
           ("mean", "first batch: mean length"), ("median", "first batch: median length"))


def _lengths(res: Result, out: Facts) -> None:
    """The sample lengths of the first batch (``first_batch_length.<min|max|mean|median>``), each marked as the
    published metric it shares."""
    if "length_stats" not in res.tables:
        return
    st = res.table("length_stats").set_index("population")
    if "first batch" not in st.index:
        return
    for col, metric in LENGTHS:
        out.add(Fact(f"first_batch_length.{col}", float(st.loc["first batch", col]), "tokens",
                     f"the {col} sample length of the first batch", "amount", None, published=metric))


def _run_notes(res: Result, out: Facts) -> None:
    """What the page says of how this run was made, as the result holds it: ``data["template"]`` (the source,
    the joining of the fields, the end-of-text handling, the first record as it became), ``data["untimed_because"]``
    (why no time was measured, an id) and ``data["has_cost"]`` (whether the layouts were timed)."""
    t, m, p = res.metadata.get("template") or {}, res.metadata, res.parameters
    name = t["name"] if "name" in t else (p["template"] if "template" in p else None)
    eos = m.get("eos") or {}
    out.data["template"] = {"name": name, "with_input": t.get("with_input", name), "example": str(t.get("example", "")),
                            "eos": eos["mode"] if "mode" in eos else (p["eos"] if "eos" in p else None),
                            "source": dict(m.get("text_source") or {}), "transformers": m.get("transformers"),
                            "your_data": bool(m.get("your_data"))}
    out.data["untimed_because"] = m.get("untimed_because")
    out.data["has_cost"] = "cost" in res.tables


#: The three parts of a packed row the collator check compares.
COLLATOR_PARTS = (("input ids", "input_ids_equal"), ("position ids", "position_ids_equal"), ("labels", "labels_equal"))


def _collator(res: Result, out: Facts) -> None:
    """The collator check's first batch of each packer (``collator.<s>.*``; which parts equal in the setting)."""
    if "collator" not in res.tables:
        return
    for r in res.table("collator").to_dict(orient="records"):
        s = r["strategy"]
        if s not in STRATEGIES:
            continue
        same = {n: bool(r[c]) for n, c in COLLATOR_PARTS}
        out.add(_count(f"collator.{s}.rows", r["rows"], "rows of the first batch", setting=same),
                _count(f"collator.{s}.documents", r["documents"], "documents of the first batch"),
                _count(f"collator.{s}.real_tokens", r["real_tokens"], "real tokens of the first batch"))


def _figure(metric: str):
    from datajourney.chapters import published

    return published.figure(CHAPTER, metric)


def isolated(facts: Facts, name: str) -> bool | None:
    """Whether the isolation check ``name`` (``no_cache``, ``default``) kept packed documents apart."""
    f = facts.get(f"isolation.{name}")
    return None if f is None else bool(f.setting.get("isolated"))


def _advice(res: Result, out: Facts) -> Advice | None:
    """The layout this run's numbers choose, decided against padding each batch to its longest sample (what a
    padding collator does by default): by time where the run timed the layouts, else by real tokens per computed
    position. Layouts are listed simplest first, so of layouts level with the fastest the simplest is advised."""
    order = ("pad_to_longest", "pad_to_context", "bucketed", SOURCE_PACKER,
             *(x for x in NOUNS if x not in ("pad_to_longest", "pad_to_context", "bucketed", SOURCE_PACKER)))
    timed = any(k.startswith("time.") and out[k].number is not None for k in out.facts)
    per = ", in real tokens per computed position"   # the metric after the layout: "3.1× that of padding …, in …"
    cands = []
    for name in order:
        f = out.get(f"time.{name}") if timed else out.get(f"all.{name}")
        if f is None or f.number is None:
            continue
        if not timed:
            f = dataclasses.replace(f, key=f"per_position.{name}", label=NOUNS[name] + per)
        cands.append(Candidate(name, f, call=NOUNS[name], snippet=snippet(res, name)))
    q = Question("tokens.batching", "Pad or pack the token batches?", "batching", "pad_to_longest",
                 NOUNS["pad_to_longest"], "a padding collator's default", workload(res))
    a = decide(q, cands, out)
    if a is None:
        return None
    out.add(Fact("best_layout", a.value, "", "the layout that cost least", "choice", None,
                 setting={"by": "time" if timed else "efficiency"}))
    return dataclasses.replace(a, scope="only" if len(cands) == 1 else "best",
                               needs="gpu" if timed and res.metadata.get("timed_on") == "cuda" else None)
