"""What chapter 6's page says about a result of :mod:`datajourney.chapters.c06_pcie.experiment`: the key findings, the
published metrics, the computed notes and the display tables of the notebook."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from datajourney.chapters.c06_pcie import analysis
from datajourney.chapters.c06_pcie.analysis import CHAPTER, _events
from datajourney.chapters.c06_pcie.analysis import analyse as _analyse
from datajourney.chapters.c06_pcie.rules import (
    MIN_COPY_OVER_JITTER,
    OVERLAPS,
    PER_LANE_GBPS,
    SERIAL,
    TOO_SHORT,
    verdict,
)
from datajourney.chapters.common import facts_reader
from datajourney.core import findings as fx
from datajourney.core import phrasing as say
from datajourney.core.facts import Fact, Facts, host_label
from datajourney.core.findings import Action, Finding, Opening, size_label
from datajourney.core.units import MiB
from datajourney.toolkit import transfer

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)

#: Two clocks "agree" when their medians differ by less than this share.
#: Lines the opening's findings and first sentences of actions fill: the introduction above them runs six lines.
OPENING_LINES = 10
CLOCKS_AGREE = 0.05


def key_metrics(res) -> dict:
    """The published metrics of this chapter, from a result: name -> (value, None)."""
    out = {}
    if "bandwidth" not in res.tables:
        return out
    b = _events(res).set_index(["size", "direction", "memory"])["median"]
    gib, q = 1 << 30, 256 << 20
    for key, (size, d, m) in {"H2D pinned, 1 GiB": (gib, "H2D", "pinned"),
                              "D2H pageable, 256 MiB": (q, "D2H", "pageable"),
                              "D2H pageable, 1 GiB": (gib, "D2H", "pageable"),
                              "D2H pinned, 1 GiB": (gib, "D2H", "pinned")}.items():
        if (size, d, m) in b.index:
            out[key] = (float(b.loc[(size, d, m)]), None)
    if "D2H pinned, 1 GiB" in out and "D2H pageable, 1 GiB" in out:
        out["D2H pinned ÷ pageable, 1 GiB"] = (out["D2H pinned, 1 GiB"][0] / out["D2H pageable, 1 GiB"][0], None)
    if "overlap" in res.tables:
        o = res.table("overlap")
        o = o[(o["memory"] == "pinned") & (o["mode"] == "non_blocking")].set_index("size")
        for size, label in ((q, "256 MiB"), (16 << 20, "16 MiB")):
            if size in o.index:
                row = o.loc[size]
                judged = "verdict" not in row or row["verdict"] != TOO_SHORT
                out[f"overlap, pinned + non_blocking, {label}"] = (100 * float(row["overlap"]) if judged else None,
                                                                   None)
    peak = res.metadata.get("link", {}).get("peak_GBps")
    if peak:
        out["link peak (theoretical)"] = (peak, None)
    return out


_PATHS = {("H2D", "pinned"): "host-to-device from pinned memory",
          ("H2D", "pageable"): "host-to-device from pageable memory",
          ("D2H", "pinned"): "device-to-host into pinned memory",
          ("D2H", "pageable"): "device-to-host into pageable memory"}


def _published_if(size: int, wanted: int, metric: str) -> str | None:
    return metric if size == wanted else None


def _pct(fraction: float) -> str:
    """A share as a percentage, without a minus sign on a value that prints as zero ('0.0%', not '-0.0%')."""
    text = fx.pct(fraction)
    if text.startswith("-"):
        return text[1:] if not text.strip("-0.,%") else "−" + text[1:]
    return text


def pinned_h2d_measurements(res) -> list[dict]:
    """Every pinned host-to-device measurement of a run (:func:`analysis.pinned_h2d_measurements`), each with
    ``source``, where it comes from in words."""
    out = []
    for m in analysis.pinned_h2d_measurements(res):
        n, path = size_label(m["size"]), say.text(m["path"])
        source = {"sweep": f"PyTorch's {n} copy in the bandwidth sweep",
                  "ceiling round": f"{path}'s {n} copy in the ceiling's round {m.get('round', 0) + 1} "
                                   f"({say.text(m.get('phase', ''))})",
                  "second path": f"{path}'s {n} copy",
                  "both directions": f"PyTorch's {n} copy alone in the both-directions test"}[m["kind"]]
        out.append(dict(m, source=source))
    return out


def ceiling(res) -> dict | None:
    """The run's ceiling: the highest of every pinned host-to-device measurement of the chapter
    (:func:`pinned_h2d_measurements`, :func:`datajourney.toolkit.transfer.highest`), so that no
    measurement of the chapter exceeds it; None when nothing was measured."""
    return transfer.highest(pinned_h2d_measurements(res))


def ceiling_text(facts) -> str:
    """How the ceiling was measured and which measurement set it; the two paths compared round by
    round; the drift of the rounds over the run; the largest pinned copy's share of the ceiling
    (worded from the chapter's facts)."""
    facts = facts_of(facts)
    c = facts.get("ceiling")
    if c is None:
        return "No pinned host-to-device copy was measured here."
    s = c.setting
    n, path = size_label(int(s["size"])), say.text(s.get("path", ""))
    source = {"sweep": f"PyTorch's {n} copy in the bandwidth sweep",
              "ceiling round": f"{path}'s {n} copy in the ceiling's round {int(s.get('round', 0)) + 1} "
                               f"({say.text(s.get('phase', ''))})",
              "second path": f"{path}'s {n} copy",
              "both directions": f"PyTorch's {n} copy alone in the both-directions test"}.get(str(s.get("kind")),
                                                                                             f"a {n} copy")
    out = [f"The ceiling is **{say.value(c)}**, the highest of the {int(s['measurements'])} pinned host-to-device "
           f"measurements of this run (each the median of its copies), set by {source}: no measurement of "
           "this chapter exceeds it."]
    torch_, cupy = facts.get("ceiling_rounds_pytorch"), facts.get("ceiling_rounds_cupy")
    if torch_ is not None:
        size = _size(torch_)
        if cupy is not None:
            out.append(f"In {torch_.n} rounds spread over the run, {size} copies through CuPy's own pinned buffer "
                       f"and `cudaMemcpyAsync` measured {_range(cupy)} and PyTorch's copy of the same size "
                       f"{_range(torch_)}: PyTorch's copy was "
                       f"{say.comparison(facts['ceiling_pytorch_vs_cupy'], baseline='the second path')}.")
        else:
            out.append(f"No second path here: in {torch_.n} rounds spread over the run, PyTorch's {size} copy "
                       f"measured {_range(torch_)}.")
        if "ceiling_drift" in facts:
            out.append(f"From round to round the rate moved by {say.value(facts['ceiling_drift'], runs=False)} "
                       "(highest over lowest round median); the ceiling is their highest, not one round's.")
    elif "ceiling_second_path" in facts:
        sp = facts["ceiling_second_path"]
        out.append(f"This result has one measurement through the second path ({_size(sp)}): {say.value(sp)}.")
    h, share = facts.get("h2d_pinned"), facts.get("h2d_pinned_share_of_ceiling")
    if h is not None and share is not None:
        rep = facts.get("sweep_repeats")
        why = (f": above {size_label(256 << 20)} the sweep times fewer copies than the {say.value(rep)} repeats, "
               "to bound its run time" if rep is not None and rep.number is not None and h.n < rep.number else "")
        spread = f"; lowest to highest {_range(h)}" if h.spread is not None and "–" in _range(h) else ""
        out.append(f"This chapter's pinned host-to-device copy at its largest size, {_size(h)}, moved "
                   f"**{say.value(h, runs=False)}** (median of {h.n}{why}{spread}), {say.value(share, runs=False)} "
                   "of the ceiling.")
    return " ".join(out)


def _staging_median(st: pd.DataFrame, measure: str) -> pd.Series:
    s = st[st["measure"] == measure].set_index("size")["median"]
    return s.sort_index()


def staging_story(res) -> dict:
    """What the staging experiment shows about pageable H2D copies, as numbers (see
    :func:`finding_pageable_drop`). Works on the bandwidth sweep alone when no staging table exists."""
    out = dict(llc=res.metadata.get("llc", {}).get("bytes"))
    b = _events(res)
    h = b[(b["direction"] == "H2D") & (b["memory"] == "pageable")].set_index("size")["median"].sort_index()
    d = b[(b["direction"] == "D2H") & (b["memory"] == "pageable")].set_index("size")["median"].sort_index()
    big = h[h.index >= 16 * MiB] if (h.index >= 16 * MiB).any() else h
    out.update(h2d_peak=float(big.max()), h2d_peak_size=int(big.idxmax()), h2d_last=float(h.iloc[-1]),
               h2d_last_size=int(h.index[-1]), d2h_min=float(d[d.index >= big.index.min()].min()),
               d2h_max=float(d[d.index >= big.index.min()].max()))
    out["drop"] = out["h2d_last"] / out["h2d_peak"]
    out["has_staging"] = ("staging" in res.tables
                          and (res.table("staging")["measure"] == "H2D pageable, source cached").any())
    if not out["has_staging"]:
        return out
    st = res.table("staging")
    cached = _staging_median(st, "H2D pageable, source cached")
    flushed = _staging_median(st, "H2D pageable, cache flushed")
    mem_c = _staging_median(st, "memcpy one core, source cached")
    mem_f = _staging_median(st, "memcpy one core, cache flushed")
    d2h = _staging_median(st, "D2H pageable")
    huge = _staging_median(st, "H2D pageable, huge pages")
    small, large = int(cached.index.min()), int(cached.index.max())
    out.update(small=small, large=large, cached_small=float(cached[small]), cached_large=float(cached[large]),
               flushed_small=float(flushed[small]), flushed_large=float(flushed[large]),
               memcpy_cached_small=float(mem_c[small]), memcpy_cached_large=float(mem_c[large]),
               memcpy_flushed_small=float(mem_f[small]), d2h_small=float(d2h[small]), d2h_large=float(d2h[large]))
    # where the cached copy falls below the midpoint between its small- and large-size rates
    mid = (out["cached_small"] + out["cached_large"]) / 2
    below = cached[cached < mid]
    out["knee"] = int(below.index.min()) if len(below) else None
    out["cached_at_knee"] = float(cached[out["knee"]]) if out["knee"] else None
    out["memcpy_flushed_large"] = float(mem_f[large])
    if len(huge):
        beyond = [x for x in cached.index if x >= (out["knee"] or small) and x in huge.index]
        out["huge_sizes"] = beyond
        out["huge_runs"] = [float(huge[x]) for x in beyond]
        out["cached_runs"] = [float(cached[x]) for x in beyond]
        out["huge_ratios"] = [h / c for h, c in zip(out["huge_runs"], out["cached_runs"])]
        hb = st[(st["measure"] == "H2D pageable, huge pages")]
        out["huge_bytes"] = (float(hb["huge_bytes"].dropna().min())
                             if "huge_bytes" in hb and hb["huge_bytes"].notna().any() else None)
    # does the single-core memcpy follow the copy? correlation of the two curves over sizes
    both = pd.concat([cached.rename("copy"), mem_c.rename("memcpy")], axis=1).dropna()
    out["corr"] = float(both["copy"].corr(both["memcpy"])) if len(both) > 2 else float("nan")
    return out


#: a spread of the huge-page effect over sizes wider than this (max - min of the ratios) leaves it unresolved
HUGE_SPREAD = 0.2
#: two measurements of the same path that differ by more than this are reported as differing
SAME_PATH_TOL = 0.10


def _cause_kind(s: dict) -> str:
    """Which reading of the staging experiment the data support: 'cache', 'other', 'cached', 'none'."""
    flush_hurts = s["flushed_small"] < 0.8 * s["cached_small"]
    cached_falls = s["cached_large"] < 0.8 * s["cached_small"]
    return ("cache" if flush_hurts and cached_falls else "other" if cached_falls else
            "cached" if flush_hurts else "none")


#: A change of the staging experiment's rate (size to size, cached to flushed) smaller than this is "level".
STAGING_TOL = 0.10


def _staging_runs(res, measure: str, size: int) -> list[float]:
    """GB/s of every copy of ``measure`` at ``size`` (the medians' table alone: its median)."""
    if "staging_raw" in res.tables:
        r = res.table("staging_raw")
        v = r[(r["measure"] == measure) & (r["size"] == size)]["GBps"].tolist()
        if v:
            return [float(x) for x in v]
    st = res.table("staging")
    return [float(x) for x in st[(st["measure"] == measure) & (st["size"] == size)]["median"]]


def _change(after: list[float], before: list[float], *, up: str, down: str, same: str) -> str:
    """How ``after`` differs from ``before``, in words decided by the data: 'rose by 24%' (``up``),
    'fell by 12%', or 'stayed within 10%'."""
    d = fx.direction(after, before, tol=STAGING_TOL)
    r = float(np.mean(after) / np.mean(before)) - 1
    return fx.choose(d, f"{up} by {fx.pct(r)}", f"{down} by {fx.pct(-r)}", f"{same} within {fx.pct(STAGING_TOL)}")


def pageable_drop_note(res) -> str:
    """What the staging experiment says about the cause of the pageable host-to-device rate, in one
    or two sentences computed from its table: the cause only when this run's data support it, and
    otherwise how the rate moved with size and with a flushed cache, and that the CPU-cache cause
    does not reproduce here."""
    s = staging_story(res)
    if not s["has_staging"]:
        return "This result has no staging experiment, so the cause is not measured in it."
    kind = _cause_kind(s)
    small, large = size_label(s["small"]), size_label(s["large"])
    if kind == "cache":
        knee = s.get("knee")
        return ("**Cause (staging experiment): the driver's CPU staging copy is fast only while the source is "
                f"still in the CPU's cache**: flushing the cache slows a {small} copy from "
                f"{fx.num(s['cached_small'])} to {fx.num(s['flushed_small'], 'GB/s')}, and from "
                + (f"about {size_label(knee)}" if knee else "the larger sizes")
                + " on the source no longer stays cached between copies.")
    cached = "H2D pageable, source cached"
    by_size = _change(_staging_runs(res, cached, s["large"]), _staging_runs(res, cached, s["small"]),
                      up="rose", down="fell", same="stayed")
    by_flush = _change(_staging_runs(res, "H2D pageable, cache flushed", s["small"]),
                       _staging_runs(res, cached, s["small"]), up="sped up", down="slowed", same="stayed")
    text = (f"In the staging experiment the cached pageable copy {by_size} from {small} to {large} "
            f"({fx.num(s['cached_small'])} to {fx.num(s['cached_large'], 'GB/s')}), and a {small} copy "
            f"{by_flush} with the CPU caches flushed first ({fx.num(s['flushed_small'], 'GB/s')}): ")
    return text + {"other": "the rate falls with size, but not because the source leaves the CPU's cache; this run "
                            "does not measure what else it is.",
                   "cached": "the cache matters at that size, but the rate does not fall as the source outgrows "
                             "it, so the CPU-cache cause does not reproduce in this run.",
                   "none": "the CPU-cache cause does not reproduce in this run, and the run measures no other."}[kind]


def _sizes_text(sizes) -> str:
    sizes = sorted(int(x) for x in sizes)
    if len(sizes) == 1:
        return size_label(sizes[0])
    if len(sizes) == 2:
        return f"{size_label(sizes[0])} and {size_label(sizes[1])}"
    return f"{size_label(sizes[0])} to {size_label(sizes[-1])}"


#: A size whose interleaved median lies this much (relative) below the largest size's dips.
DIP_TOL = 0.15
#: Page faults or CPU time per byte this much (relative) above the largest size's count as "more".
DIP_COST_TOL = 0.25


def dip_summary(res) -> pd.DataFrame:
    """Per size of the interleaved dip check: median GB/s (p10, p90), median CPU ms of the calling
    thread per GB, mean page faults per MiB, and the number of copies."""
    if "staging_dip" not in res.tables or res.table("staging_dip").empty:
        return pd.DataFrame()
    d = res.table("staging_dip").copy()
    d["cpu_ms_per_GB"] = d["cpu_ms"] / (d["size"] / 1e9)
    d["faults_per_MiB"] = (d["minor_faults"] + d["major_faults"]) / (d["size"] / MiB)
    g = d.groupby("size")
    return pd.DataFrame({"median": g["GBps"].median(), "p10": g["GBps"].quantile(0.1),
                         "p90": g["GBps"].quantile(0.9), "cpu_ms_per_GB": g["cpu_ms_per_GB"].median(),
                         "faults_per_MiB": g["faults_per_MiB"].mean(), "n": g["GBps"].count()}).sort_index()


def dip_cause(res, block_dip: list[int] | None = None) -> str:
    """Which explanation of the pageable dip the interleaved check supports: the order of the block
    experiment (each size measured in one block, after different work: the dip vanishes when sizes
    are interleaved), or something about those sizes (it stays); then whether the driver's staging
    work per byte (the calling thread's CPU time) or page faults grow at the dip's sizes."""
    ds = dip_summary(res)
    if ds.empty:
        if not res.metadata.get("cuda"):
            return ("The interleaved check that decides the dip copies to a GPU: not measured in this run "
                    "(skipped).")
        where = ("not in the reference run" if str(res.run_id).startswith("reference") else
                 "not run here (`dip_sizes` is empty)")
        return f"The interleaved check that decides it is {where}."
    large = int(ds.index.max())
    top = float(ds.loc[large, "median"])
    mid = ds[ds.index < large]
    dips = mid[mid["median"] * (1 + DIP_TOL) < top]
    rounds = int(ds["n"].min())
    text = (f"Interleaved ({rounds} rounds, every size once per round in a shuffled order), the pageable copy ran at "
            + "; ".join(f"{fx.num(r['median'], 'GB/s')} at {size_label(int(n))}" for n, r in ds.iterrows()) + ". ")
    block = sorted(block_dip or [])
    covered = [x for x in block if x in ds.index]
    if block and not covered:
        return text + (f"The dip of the block experiment lies at {_sizes_text(block)}, which the interleaved check "
                       "did not copy: this run does not say whether the order or the size made it.")
    if not len(dips):
        missed = [x for x in block if x not in covered]
        return text + ("**The data support an artefact of the order**: interleaved, no size below "
                       f"{size_label(large)} fell more than {fx.pct(DIP_TOL)} under it"
                       + (f", although measured one size at a time {_sizes_text(covered)} did" if covered else "")
                       + "; what ran before each block, not the size, made the dip"
                       + (f" (the check did not copy {_sizes_text(missed)})." if missed else "."))
    text += (f"At {_sizes_text(list(dips.index))} it stays more than {fx.pct(DIP_TOL)} below {size_label(large)}: "
             "the dip belongs to the size, not the order. ")
    cpu_up = (dips["cpu_ms_per_GB"] > (1 + DIP_COST_TOL) * ds.loc[large, "cpu_ms_per_GB"]).all()
    base_f = float(ds.loc[large, "faults_per_MiB"])
    faults_up = (dips["faults_per_MiB"] > (1 + DIP_COST_TOL) * max(base_f, 1e-9)).all() and dips[
        "faults_per_MiB"
    ].max() > 0
    text += (f"The calling thread spent {fx.span(dips['cpu_ms_per_GB'].min(), dips['cpu_ms_per_GB'].max(), 'ms')} of "
             f"CPU per GB there against {fx.num(float(ds.loc[large, 'cpu_ms_per_GB']), 'ms')} at {size_label(large)}, "
             f"and the process took {fx.span(dips['faults_per_MiB'].min(), dips['faults_per_MiB'].max())} page faults "
             f"per MiB against {fx.num(base_f)}. ")
    if faults_up:
        return text + ("**The data support page faults during the copy**: the dip's sizes fault more per byte, and "
                       "each fault stalls the staging.")
    if cpu_up:
        return text + ("**The data support slower staging on the CPU**: the driver's copy into its staging buffers "
                       "costs more CPU per byte at those sizes, without more page faults.")
    return text + ("Neither page faults nor the CPU's staging work per byte grow at those sizes, so the data support "
                   "neither explanation: this run does not explain the dip.")


def _same_path_verdict(res, sizes, sweep: pd.Series, cached: pd.Series) -> str:
    """Which of two differing measurements of the same path the interleaved check agrees with."""
    ds = dip_summary(res)
    both = [x for x in sizes if x in ds.index]
    if not both:
        return "; this run does not say which difference matters."
    parts = []
    for x in both:
        v = float(ds.loc[x, "median"])
        near = "the bandwidth sweep" if abs(v - sweep[x]) < abs(v - cached[x]) else "the staging experiment"
        parts.append(f"at {size_label(x)} the interleaved check measured {fx.num(v, 'GB/s')}, nearer {near}")
    return "; " + "; ".join(parts) + "."


def staging_details(res) -> str:
    """What the staging experiment shows beyond the key result, computed: the rates behind the cause,
    the share of one core's copy rate, where one core does not model the staging stage, a dip and
    recovery decided by the interleaved check, the same path measured in two experiments, huge pages."""
    s = staging_story(res)
    if not s["has_staging"]:
        return ""
    st = res.table("staging")
    cached = _staging_median(st, "H2D pageable, source cached")
    mem_c = _staging_median(st, "memcpy one core, source cached")
    mem_f = _staging_median(st, "memcpy one core, cache flushed")
    small, large = size_label(s["small"]), size_label(s["large"])
    out = [f"A {small} pageable copy ran at {fx.num(s['cached_small'], 'GB/s')} with its source cached and "
           f"{fx.num(s['flushed_small'], 'GB/s')} with the CPU caches flushed first; at {large}, "
           f"{fx.num(s['cached_large'], 'GB/s')} (flushed: {fx.num(s['flushed_large'], 'GB/s')}). One core copying "
           f"the same {small} source managed {fx.num(s['memcpy_cached_small'], 'GB/s')} from cache and "
           f"{fx.num(s['memcpy_flushed_small'], 'GB/s')} from DRAM."]
    knee, llc = s.get("knee"), s["llc"]
    if _cause_kind(s) == "cache" and knee:
        at_knee = float(s["cached_at_knee"])
        if 0.8 <= s["flushed_small"] / at_knee <= 1.25:
            out.append(f"The flushed {small} copy runs about as fast as a cached {size_label(knee)} copy "
                       f"({fx.num(at_knee, 'GB/s')}): from there on the source is read from DRAM.")
        if llc:
            vm = ((res.fingerprint.get("cpu") or {}).get("hypervisor")
                  and " (in a virtual machine other guests may share that cache; this run does not measure how much)")
            out.append(f"The cached copy's knee, {size_label(knee)}, is where source and staging buffers outgrow "
                       f"the {size_label(llc)} last-level cache."
                       if knee >= llc / 2 else
                       f"The cached copy's knee, {size_label(knee)}, lies well below the {size_label(llc)} last-level "
                       f"cache this CPU reports, so the cache's size alone does not place it{vm or ''}.")
    # share of one core's DRAM copy rate beyond the knee
    beyond = [x for x in cached.index if x >= (knee or s["small"]) and x in mem_f.index and mem_f[x] > 0]
    if beyond:
        share = {x: cached[x] / mem_f[x] for x in beyond}
        lo, hi = min(share.values()), max(share.values())
        out.append(f"From {size_label(beyond[0])} on, the cached copy runs at "
                   f"{fx.span(100 * lo, 100 * hi, '%')} of one core's DRAM copy rate at the same size"
                   + ("" if fx.pct(lo) == fx.pct(hi) else
                      f" ({fx.pct(share[beyond[-1]])} at {size_label(beyond[-1])})") + ".")
    # where the copy beats one core even from cache: one core does not model the staging stage there
    faster = [x for x in cached.index if x in mem_c.index and cached[x] > (1 + SAME_PATH_TOL) * mem_c[x]]
    if faster:
        rate = fx.span(cached[faster].min(), cached[faster].max(), "GB/s")
        out.append(f"At {_sizes_text(faster)} the pageable copy ({rate}) "
                   f"is faster than one core copying the same source even from cache "
                   f"({fx.span(mem_c[faster].min(), mem_c[faster].max(), 'GB/s')}), so one core's memcpy does not "
                   "model the staging stage at those sizes.")
    # a dip beyond the knee and a recovery at the largest size
    if knee:
        mid = cached[(cached.index >= knee) & (cached.index < s["large"])]
        dip = mid[mid * (1 + 0.15) < s["cached_large"]]
        if len(dip):
            out.append(
                f"The cached copy dips to {fx.span(dip.min(), dip.max(), 'GB/s')} at {_sizes_text(dip.index)} "
                f"and recovers to {fx.num(s['cached_large'], 'GB/s')} at {large}. " + dip_cause(res, list(dip.index))
            )
    # the same path in the bandwidth sweep
    b = _events(res)
    sweep = b[(b["direction"] == "H2D") & (b["memory"] == "pageable")].set_index("size")["median"]
    both = [x for x in cached.index if x in sweep.index]
    differ = [x for x in both if abs(sweep[x] / cached[x] - 1) > SAME_PATH_TOL]
    if differ:
        out.append("The same path, pageable host-to-device, measured in two experiments: "
                   + "; ".join(f"at {size_label(x)} {fx.num(sweep[x], 'GB/s')} in the bandwidth sweep and "
                               f"{fx.num(cached[x], 'GB/s')} here (source cached), "
                               f"{fx.pct(abs(sweep[x] / cached[x] - 1))} apart" for x in differ)
                   + f". They differ by more than the {fx.pct(SAME_PATH_TOL)} this chapter treats as agreement. "
                     "Both time the same copy with CUDA events but in different experiments (what ran before "
                     "each copy differs)" + _same_path_verdict(res, differ, sweep, cached))
    elif both:
        out.append(f"At {_sizes_text(both)} the bandwidth sweep measured the same path within "
                   f"{fx.pct(SAME_PATH_TOL)} of this experiment.")
    if s.get("huge_runs"):
        d = fx.direction(s["huge_runs"], s["cached_runs"], tol=0.1)
        hb = s.get("huge_bytes")
        backed = " (the kernel backed none of it with huge pages)" if hb == 0 else ""
        r = s["huge_ratios"]
        wide = max(r) - min(r) > HUGE_SPREAD
        head = (f"Huge pages for the source{backed} changed the rate by a median of {_pct(float(np.median(r)) - 1)} "
                f"over {len(r)} sizes from {size_label(s['huge_sizes'][0])}, "
                f"{fx.span(100 * (min(r) - 1), 100 * (max(r) - 1), '%')} size by size: ")
        if d == 0 and wide:
            out.append(head + "an effect, if any, is within that wide spread and not resolved by this run.")
        else:
            out.append(head + fx.choose(d, "page size matters too.", "they hurt here.", "page size is not the cause."))
    return " ".join(out)


def _cpu_overlap(res) -> tuple[Finding, str]:
    """The overlap finding and the note that carries its details."""
    o = res.table("overlap")
    n = int(min(o["size"].unique(), key=lambda s: abs(s - (256 << 20))))
    at = o[o["size"] == n].set_index(["memory", "mode"])
    pn = at.loc[("pinned", "non_blocking")]
    has_spread = "overlap_p10" in o
    jitter = float(pn["jitter_ms"]) if "jitter_ms" in o else None
    v = pn["verdict"] if has_spread else verdict(float(pn["overlap"]))
    shorter = "copy" if pn["copy_ms"] <= pn["cpu_ms"] else "Python work"
    text = (f"At {size_label(n)}, a pinned non_blocking copy ({fx.num(pn['copy_ms'], 'ms')}) and "
            f"{fx.num(pn['cpu_ms'], 'ms')} of Python work overlapped by **{_pct(pn['overlap'])}** (the share of the "
            f"shorter one, the {shorter}, hidden behind the other")
    if has_spread:
        text += (f"; p10–p90 over {int(pn['n'])} rounds: "
                 f"{fx.span(100 * pn['overlap_p10'], 100 * pn['overlap_p90'], '%')}")
    text += f"): {v}."
    others = [f"{m} {md}: {r['verdict']} ({_pct(r['overlap'])})" for (m, md), r in at.iterrows()
              if (m, md) != ("pinned", "non_blocking")]
    note = []
    if others and has_spread:
        note.append(f"The other three at {size_label(n)}: " + "; ".join(others) + ".")
    if has_spread and jitter is not None:
        short = sorted(int(s) for s in o[o["verdict"] == TOO_SHORT]["size"].unique())
        note.append(f"The CPU work's jitter (its std within a row) was {fx.num(jitter, 'ms')} in that row and "
                    f"{fx.span(o['jitter_ms'].min(), o['jitter_ms'].max(), 'ms')} over all rows; a copy shorter "
                    f"than {MIN_COPY_OVER_JITTER:g}× its row's jitter gets no verdict"
                    + (": some or all of the " + ", ".join(size_label(s) for s in short) + " copies were too short "
                       "to tell." if short else "; every copy here was long enough to judge."))
    f = Finding("cpu_overlap", text, 100 * float(pn["overlap"]), "%",
                published=_published_if(n, 256 << 20, "overlap, pinned + non_blocking, 256 MiB"),
                interval=(100 * float(pn["overlap_p10"]), 100 * float(pn["overlap_p90"])) if has_spread else None,
                values=dict(size=n, verdict=v))
    return f, " ".join(note)


def cpu_overlap_note(res) -> str:
    """The other three combinations at that size and the CPU work's jitter, beside the overlap chart."""
    return _cpu_overlap(res)[1]


def _copy_kernel(res) -> tuple[Finding, str]:
    """The copy-beside-kernels finding and the note that carries its details."""
    ck = res.table("copy_kernel").iloc[0]
    n = int(ck["size"])
    if "hidden" not in ck:  # an older result: one estimate from separately measured medians
        text = (f"A {size_label(n)} copy on a side stream during {fx.num(ck['kernel_ms'], 'ms')} of matrix "
                f"products: {_pct(ck['overlap'])} hidden by one unpaired estimate (no interval in this run).")
        return Finding("copy_kernel", text, 100 * float(ck["overlap"]), "%", values=dict(size=n)), ""
    lo, hi = float(ck["hidden_lo"]), float(ck["hidden_hi"])
    v = verdict(float(ck["hidden"]), low=lo, high=hi)
    text = (f"A {size_label(n)} pinned copy on a side stream ({fx.num(ck['copy_ms'], 'ms')} alone) during "
            f"{fx.num(ck['kernel_ms'], 'ms')} of matrix products added {fx.num(ck['added_ms'], 'ms')} to them "
            f"(median of {int(ck['rounds'])} interleaved pairs, 95% interval "
            f"{fx.span(ck['added_lo_ms'], ck['added_hi_ms'], 'ms')}): **{_pct(ck['hidden'])} of the copy hidden** "
            f"(95% interval {fx.span(100 * lo, 100 * hi, '%')}; {v}).")
    head, text = text, ""
    cov = ck.get("timeline_covered_share")
    if (ck.get("timeline") is True or ck.get("timeline") == 1.0) and cov is not None and math.isfinite(cov):
        text += (f" The profiler's GPU timeline shows {fx.pct(ck['timeline_covered_share'])} of the copy's time "
                 "running under a kernel")
        sl = ck.get("timeline_kernel_slowdown")
        if sl is not None and math.isfinite(sl):
            text += (f", and the kernels that ran beside the copy took {fx.times(sl)} as long as the others")
        text += "."
    bo = ck.get("blocks_overlap")
    if bo is not None and math.isfinite(bo):
        text += (f" Timed the naive way (all kernel-only runs, then all copy-only, then all together) the same "
                 f"copy looked {_pct(bo)} hidden.")
    if "copy_kernel_calls" in res.tables:
        c = res.table("copy_kernel_calls")
        kb = c[(c["design"] == "blocks") & (c["name"] == "kernel")]
        if len(kb):
            lo_k, hi_k = float(kb["ms"].min()), float(kb["ms"].max())
            drift = hi_k - lo_k
            text += (f" Within the kernel-only block alone the matrix products took "
                     f"{fx.span(lo_k, hi_k, 'ms')}")
            if "sm_clock_mhz" in kb and kb["sm_clock_mhz"].notna().any():
                text += f" while the SM clock read {fx.span(kb['sm_clock_mhz'].min(), kb['sm_clock_mhz'].max(), 'MHz')}"
                if "power_w" in kb and kb["power_w"].notna().any():
                    text += f" and the power {fx.span(kb['power_w'].min(), kb['power_w'].max(), 'W')}"
            per_pct = float(ck["kernel_ms"]) / float(ck["copy_ms"])
            text += (f": a drift of {fx.num(drift, 'ms')}, "
                     + ("more than the whole copy" if drift > float(ck["copy_ms"]) else
                        f"{fx.pct(drift / float(ck['copy_ms']))} of the copy")
                     + f". Every 1% the matrix products speed up or slow down between separately timed phases moves "
                       f"an unpaired estimate by {fx.num(per_pct)} percentage points; the paired rounds cancel it.")
    return (Finding("copy_kernel", head, 100 * float(ck["hidden"]), "%", interval=(100 * lo, 100 * hi),
                    values=dict(size=n, verdict=v)), text.strip())


def copy_kernel_note(res) -> str:
    """The profiler's timeline, the naive estimate and the kernels' drift, beside the paired-rounds chart."""
    return _copy_kernel(res)[1]


def _pin_cost(res) -> tuple[Finding, str]:
    """The pinning finding and the note that carries its details."""
    pc = res.table("pin_cost").set_index("way")
    pin, reuse = "pin_memory() per batch, then copy", "copy into a reused pinned buffer, then copy"
    n = int(pc["size"].iloc[0])
    if "first_ms" not in pc:  # an older result: medians only
        d = fx.compare(pc.loc[pin, "median_ms"], pc.loc[reuse, "median_ms"], more="slower than",
                       less="faster than", same="level with")
        text = (f"For one {size_label(n)} batch, `pin_memory()` then copy took "
                f"{fx.num(pc.loc[pin, 'median_ms'], 'ms')} "
                f"(median), {d} copying into a reused pinned buffer ({fx.num(pc.loc[reuse, 'median_ms'], 'ms')}).")
        return Finding("pin_cost", text, float(pc.loc[pin, "median_ms"]), "ms", values=dict(size=n)), ""
    first, later, reused = (float(pc.loc[pin, "first_ms"]), float(pc.loc[pin, "median_ms"]),
                            float(pc.loc[reuse, "median_ms"]))
    meta = res.metadata.get("pin_cost", {})
    allocs = meta.get("host_allocations_during_pin_calls")
    text = (f"For one {size_label(n)} batch, the first `pin_memory()` call took **{fx.num(first, 'ms')}**, later "
            f"calls {fx.num(later, 'ms')} (median), "
            f"{fx.compare(later, reused, more='slower than', less='faster than', same='level with')} a reused "
            f"pinned buffer ({fx.num(reused, 'ms')}).")
    head, text = text, ""
    if allocs is not None:
        calls = meta.get("pin_calls")
        text += (f" PyTorch's caching host allocator made {allocs} page-locked allocation"
                 f"{'' if allocs == 1 else 's'} over {calls} calls: "
                 + ("later calls reuse the cached block, so pinning per batch costs about a host copy."
                    if allocs <= 1 else "the cached block was not reused every time."))
    if "pin_memory() with the pinned cache emptied before each call" in pc.index:
        fresh = float(pc.loc["pin_memory() with the pinned cache emptied before each call", "median_ms"])
        fa = meta.get("host_allocations_emptied_way")
        made = ("" if fa is None else
                f" ({fa} page-locked allocation{'' if fa == 1 else 's'} in {meta.get('pin_calls')} calls)")
        text += (f" With the cache emptied before every call{made}, `pin_memory()` then copy took "
                 f"{fx.num(fresh, 'ms')} per batch: "
                 + fx.choose(fx.direction(fresh, later, tol=0.2),
                             "that is what pinning afresh on every call would cost.",
                             "no slower, so the allocation itself is cheap here.",
                             "about the same, so the allocation itself is cheap here."))
    return (Finding("pin_cost", head, later, "ms", values=dict(size=n, first=first, reused=reused, allocs=allocs)),
            text.strip())


def pin_cost_note(res) -> str:
    """The caching host allocator's allocations and a fresh allocation per call, beside the pinning table."""
    return _pin_cost(res)[1]


# --------------------------------------------------------------------------- other computed text


def clocks_table(res) -> pd.DataFrame:
    """Host clock ÷ CUDA events (median ms ratio) per size, one column per path."""
    r = res.table("bandwidth_raw")
    med = r.groupby(["size", "direction", "memory", "clock"])["ms"].median().unstack("clock")
    med["ratio"] = med["host clock"] / med["CUDA events"]
    med["extra_us"] = 1e3 * (med["host clock"] - med["CUDA events"])
    return med.reset_index()


def two_clocks(res) -> str:
    """The conclusion of the two-clocks comparison, computed."""
    t = clocks_table(res)
    # smallest size from which every path agrees at that size and all larger ones
    sizes = sorted(t["size"].unique())
    from_size = None
    for s in sizes:
        if all((t[t["size"] >= s]["ratio"] - 1).abs() < CLOCKS_AGREE):
            from_size = s
            break
    extra = float(t[t["size"] == sizes[0]]["extra_us"].median())
    worst = t.loc[t["ratio"].idxmax()]
    big = t[t["size"] == sizes[-1]]
    pag = big[big["memory"] == "pageable"]["ratio"]
    out = []
    if from_size is not None:
        out.append(f"From {size_label(from_size)} up the two clocks agree within {fx.pct(CLOCKS_AGREE)} on every path")
    else:
        out.append(f"The two clocks differ by more than {fx.pct(CLOCKS_AGREE)} on some path at every size")
    out[-1] += (f"; at {size_label(sizes[0])} the host clock adds about {fx.num(extra, 'µs')} per copy (median over "
                f"the four paths), the cost of launching and synchronising, which weighs most on the shortest copies "
                f"(largest gap: {_PATHS[(worst['direction'], worst['memory'])]} at {size_label(int(worst['size']))}, "
                f"host ÷ events {fx.times(worst['ratio'])}).")
    if len(pag):
        pr = float(pag.max())
        out.append(f"For pageable memory at {size_label(sizes[-1])} host ÷ events is {fx.times(pr)}: "
                   + ("the CUDA events bracket the whole pageable copy, the CPU's staging included, because a "
                      "pageable copy returns to the host only when the staging is done."
                      if abs(pr - 1) < CLOCKS_AGREE else
                      "part of the pageable copy's staging happens outside the CUDA events."))
    return " ".join(out)


def bidirectional_text(res) -> str:
    bi = res.table("bidirectional").iloc[0]
    v = bi["verdict"]
    spread = (f", p10–p90 {fx.span(100 * bi['overlap_p10'], 100 * bi['overlap_p90'], '%')}"
              if "overlap_p10" in bi else "")
    return (f"**Both directions at once** ({size_label(int(bi['size']))} each way, pinned, two streams): "
            f"host-to-device "
            f"alone {fx.num(bi['h2d_GBps'], 'GB/s')}, device-to-host alone {fx.num(bi['d2h_GBps'], 'GB/s')}, together "
            f"**{fx.num(bi['aggregate_GBps'], 'GB/s')}** in aggregate: overlap {_pct(bi['overlap'])}{spread} ({v}).")


def stale_text(res) -> str:
    st = res.table("stale_read").iloc[0]
    stale = bool(st["stale"])
    return (f"**Reading a non_blocking device-to-host result too early**: the host read **{st['read_before_sync']}** "
            f"before synchronising and **{st['read_after_sync']}** after (expected {st['expected']}). "
            + ("Nothing crashed; the value was simply not there yet." if stale else
               "This time the copy had already landed - by luck of timing, not by guarantee."))


def _combos_text(rows: pd.DataFrame) -> str:
    """Which (memory, mode) combinations a set of overlap rows of one size covers, in words."""
    pairs = {(r["memory"], r["mode"]) for _, r in rows.iterrows()}
    if len(pairs) == 4:
        return "all four"
    mems = {m for m, _ in pairs}
    modes = {md for _, md in pairs}
    if len(pairs) == 2 and len(mems) == 1:
        return f"{next(iter(mems))}, both modes"
    if len(pairs) == 2 and len(modes) == 1:
        return f"{next(iter(modes))}, both memories"
    return ", ".join(f"{m} {md}" for m, md in sorted(pairs))


def _by_size_text(rows: pd.DataFrame) -> str:
    """'1 MiB, 4 MiB and 16 MiB (all four) and 64 MiB (pinned, both modes)': sizes grouped by what they cover."""
    groups: dict[str, list[str]] = {}
    for n, g in rows.groupby("size", sort=True):
        groups.setdefault(_combos_text(g), []).append(size_label(int(n)))
    return fx.and_list([f"{fx.and_list(sizes)} ({combo})" for combo, sizes in groups.items()])


def overlap_caveat(res) -> str:
    """What the overlap table can and cannot say, computed from its verdicts: which sizes could be
    judged, why the others could not, how steady the CPU work was, and the verdicts."""
    o = res.table("overlap")
    if "jitter_ms" not in o:
        return ""
    short = o[o["verdict"] == TOO_SHORT]
    judged = o[o["verdict"] != TOO_SHORT]
    bl = judged[judged["mode"] == "blocking"]
    if not len(judged):
        copy = fx.span(o["copy_ms"].min(), o["copy_ms"].max(), "ms")
        parts = [f"No row could be judged: in every one the copy ({copy}) "
                 f"lasted less than {MIN_COPY_OVER_JITTER:g}× its row's CPU-work jitter."]
    else:
        parts = [f"{len(judged)} of {len(o)} rows could be judged: {_by_size_text(judged)}."]
        if len(short):
            parts.append(f"No verdict for {_by_size_text(short)}: in each of those rows the copy "
                         f"({fx.span(short['copy_ms'].min(), short['copy_ms'].max(), 'ms')}) lasted less than "
                         f"{MIN_COPY_OVER_JITTER:g}× that row's CPU-work jitter (it would have needed "
                         f"{fx.span(short['min_copy_ms'].min(), short['min_copy_ms'].max(), 'ms')}).")
    med = o["cpu_ms"]
    if med.max() > 1.2 * med.min():
        parts.append(f"The same calibrated CPU work took {fx.span(med.min(), med.max(), 'ms')} (row medians) in "
                     f"different rows, the slowest {fx.pct(med.max() / med.min() - 1)} above the fastest; this run "
                     "does not explain the swing (candidates: time taken by other tenants of the host, CPU clock "
                     "changes).")
    if len(bl):
        bad = bl[bl["verdict"] != "serial"]
        parts.append("Every blocking copy long enough to judge ran serially with the CPU work."
                     if not len(bad) else
                     f"{len(bad)} blocking row(s) did not read as serial: " +
                     "; ".join(f"{size_label(int(r['size']))} {r['memory']}: {r['verdict']} ({_pct(r['overlap'])})"
                               for _, r in bad.iterrows()) + ".")
    pn = judged[(judged["memory"] == "pinned") & (judged["mode"] == "non_blocking")]
    pg = judged[(judged["memory"] == "pageable") & (judged["mode"] == "non_blocking")]
    if len(pn):
        parts.append("Pinned non_blocking: " + ", ".join(f"{size_label(int(r['size']))} {r['verdict']}"
                                                           for _, r in pn.iterrows()) + ".")
    if len(pg):
        parts.append("Pageable non_blocking: " + ", ".join(f"{size_label(int(r['size']))} {r['verdict']}"
                                                             for _, r in pg.iterrows()) + ".")
    return " ".join(parts)


# --------------------------------------------------------------------------- tables for the notebook


def bandwidth_by_path(res) -> pd.DataFrame:
    """CUDA-event rows of the bandwidth summary with a ``path`` label (direction, memory)."""
    return _events(res).assign(path=lambda d: d["direction"] + ", " + d["memory"])


#: How the tables name the four paths.
_PATH_HEADERS = {"H2D, pinned": "to GPU, pinned", "H2D, pageable": "to GPU, pageable",
                 "D2H, pinned": "from GPU, pinned", "D2H, pageable": "from GPU, pageable"}


def bandwidth_table(res) -> pd.DataFrame:
    """Median GB/s per size and path, then each as a share of the link's peak, with readable headers."""
    ev = bandwidth_by_path(res)
    piv = ev.pivot_table(index="size", columns="path", values="median")
    pct = ev.pivot_table(index="size", columns="path", values="pct_of_peak")
    out = piv.rename(columns=lambda c: f"{_PATH_HEADERS.get(c, c)} (GB/s)").join(
        pct.rename(columns=lambda c: f"{_PATH_HEADERS.get(c, c)} (% of peak)")).reset_index()
    out.insert(0, "copy size", out.pop("size").map(size_label))
    return out


def has_staging(res) -> bool:
    return "staging" in res.tables and len(res.table("staging"))


def staging_table(res) -> pd.DataFrame:
    st = res.table("staging")
    piv = st.pivot_table(index="size", columns="measure", values="median", sort=False)
    piv = piv.rename(columns=lambda c: f"{c} (GB/s)").reset_index()
    piv.insert(0, "buffer size", piv.pop("size").map(size_label))
    return piv


def dip_table(res) -> pd.DataFrame:
    """The interleaved dip check per size, with readable headers (empty without the check)."""
    ds = dip_summary(res)
    if ds.empty:
        return ds
    out = ds.reset_index()
    out.insert(0, "copy size", out.pop("size").map(size_label))
    return out.rename(columns={"median": "median (GB/s)", "p10": "p10 (GB/s)", "p90": "p90 (GB/s)",
                               "cpu_ms_per_GB": "calling thread's CPU (ms per GB)",
                               "faults_per_MiB": "page faults per MiB", "n": "copies"})


def clocks_pivot(res) -> pd.DataFrame:
    t = clocks_table(res).assign(path=lambda d: d["direction"] + ", " + d["memory"])
    piv = t.pivot_table(index="size", columns="path", values="ratio").reset_index()
    piv.insert(0, "copy size", piv.pop("size").map(size_label))
    return piv


def has_overlap_spread(res) -> bool:
    return "overlap" in res.tables and "overlap_p10" in res.table("overlap")


def overlap_rule(res) -> str:
    o = res.table("overlap")
    return (f"Rule: no verdict when the copy lasts less than {MIN_COPY_OVER_JITTER:g}× the CPU work's jitter in "
            f"its row (the standard deviation of the CPU work over the row's rounds: "
            f"{fx.span(o['jitter_ms'].min(), o['jitter_ms'].max(), 'ms')} here); otherwise \"overlaps\" from "
            f"a median ratio of {fx.pct(OVERLAPS)}, \"serial\" up to {fx.pct(SERIAL)}, and \"unclear\" when the "
            "p10–p90 spread reaches from one to the other.")


def overlap_display(res) -> pd.DataFrame:
    """The overlap table in seven columns: size, memory + mode, the three median times, the
    overlap (median, and its p10 to p90 over rounds) and the verdict ('too short' for no verdict)."""
    o = res.table("overlap").copy()
    out = pd.DataFrame({"size": o["size"].map(size_label), "copy": o["memory"] + ", " + o["mode"],
                        "copy (ms)": o["copy_ms"], "CPU work (ms)": o["cpu_ms"], "together (ms)": o["both_ms"]})
    if "overlap_p10" in o:
        out["overlap: median (p10 to p90)"] = [
            f"{_pct(m)} ({fx.span(100 * a, 100 * b, '%')})"
            for m, a, b in zip(o["overlap"], o["overlap_p10"], o["overlap_p90"])]
        out["verdict"] = o["verdict"].replace({TOO_SHORT: "too short"})
    else:
        out["overlap (%)"] = 100 * o["overlap"]
    return out


def copy_kernel_table(res) -> pd.DataFrame:
    c = res.table("copy_kernel_calls")
    agg = {"ms": "median"}
    for col in ("sm_clock_mhz", "power_w", "temperature_c"):
        if col in c and c[col].notna().any():
            agg[col] = "median"
    t = c.groupby(["design", "name"], sort=False).agg(agg).reset_index()
    return t.rename(columns={"ms": "median (ms)", "sm_clock_mhz": "SM clock (MHz)", "power_w": "power (W)",
                             "temperature_c": "temperature (°C)", "name": "call"})


def pin_cost_display(res) -> pd.DataFrame:
    pc = res.table("pin_cost")
    if "first_ms" in pc:
        return pc[["way", "first_ms", "median_ms", "p10_ms", "p90_ms", "n", "GBps"]].rename(columns={
            "first_ms": "first call (ms)", "median_ms": "later calls: median (ms)", "p10_ms": "p10 (ms)",
            "p90_ms": "p90 (ms)", "n": "later calls", "GBps": "effective GB/s (median)"})
    return pc[["way", "median_ms", "min_ms", "max_ms", "GBps"]].rename(columns={
        "median_ms": "median (ms)", "min_ms": "min (ms)", "max_ms": "max (ms)", "GBps": "effective GB/s"})


def limits_table(res) -> pd.DataFrame:
    lim = res.metadata["limits"]
    gib = lambda b: "unlimited" if b is None else f"{b / 2**30:.1f} GiB"  # noqa: E731
    rows = [{"limit": "available host memory", "value": gib(lim["available_bytes"])},
            {"limit": "cgroup memory limit (tightest of this cgroup and its parents)",
             "value": gib(lim["cgroup_limit_bytes"])}]
    if lim.get("cgroup_headroom_bytes") is not None:
        room = min(lim["cgroup_headroom_bytes"], lim["available_bytes"])
        bound = ("available host memory" if room < lim["cgroup_headroom_bytes"]
                 else lim.get("cgroup_headroom_bound") or "the cgroup limit")
        rows.append({"limit": "room left under the cgroup limit" + (" (capped by available host memory, which is "
                                                                     "smaller)" if bound == "available host memory"
                                                                     else ""),
                     "value": gib(room)})
    rows += [{"limit": "locked-memory limit (ulimit -l)", "value": gib(lim["memlock_bytes"])},
             {"limit": "CPU quota", "value": "none" if not lim["cpu_quota_cores"] else
              f"{lim['cpu_quota_cores']:.1f} cores"}]
    if lim.get("cgroup_version"):  # the version only: the group's path names the host's own layout, not a limit
        rows.append({"limit": "cgroup version", "value": f"v{lim['cgroup_version']}"})
    return pd.DataFrame(rows)


def versus_published(res, *, where: str = "here") -> str:
    """This run's slowest path and its pageable device-to-host rate beside the published host's
    (``where``: how the text names the machine of ``res``, e.g. "on the reference host")."""
    from datajourney.chapters import published

    fig = published.figure(CHAPTER, "D2H pageable, 1 GiB")
    b = _events(res)
    n = int(b["size"].max())
    at = b[b["size"] == n].set_index(["direction", "memory"])["median"]
    if fig is None or ("D2H", "pageable") not in at.index:
        return ""
    slow = at.idxmin()
    d2h = float(at[("D2H", "pageable")])
    text = (f"On the published host (S1) device-to-host into pageable memory collapsed to {fig.text} ({fig.setting}); "
            f"{where} it reached {fx.num(d2h, 'GB/s')} at {size_label(n)}, "
            f"{fx.compare(d2h, fig.mean, more='faster than', less='slower than', same='level with')} that figure")
    if slow != ("D2H", "pageable"):
        text += (f", and it is not the run's slowest path: the slowest is {_PATHS[slow]} "
                 f"({fx.num(at[slow], 'GB/s')}). The staging experiment below measures what limits it here.")
    else:
        text += ", and it is the run's slowest path too."
    return text


# --------------------------------------------------------------------------- the opening


# --------------------------------------------------------------------------- facts, worded


_VERDICT_WORDS = {"overlaps": "it overlaps", "partly overlaps": "it partly overlaps", "serial": "it ran serially",
                  "unclear": "unclear: the spread reaches from serial to overlapping",
                  "too short": "too short to tell against the CPU work's jitter"}


def _size(f: Fact) -> str:
    return size_label(int(f.setting["size"]))


def _range(f: Fact) -> str:
    """A fact's lowest to highest over its runs, with its unit ("46.3–51.8 GB/s"); its value without a spread."""
    return fx.span(*f.spread, f.unit) if f.spread is not None else say.value(f)


def _none_added(facts: Facts) -> bool:
    """Whether the side-stream copy's paired rounds measured it adding less than nothing (a hidden share above
    100%): then the share is no share, and the page words the time it added instead."""
    a = facts.get("copy_kernel_added_ms")
    return a is not None and a.number is not None and a.number < 0


def _added_words(facts: Facts, *, jitter: bool = True) -> str:
    """What the side-stream copy added to the matrix products, from the paired rounds: its median, the 95%
    interval, and the matrix products' own round-to-round jitter that a negative median lies within."""
    a, f = facts["copy_kernel_added_ms"], facts["copy_kernel"]
    out = f"a median of {say.value(a, runs=False)} over {f.n} paired rounds"
    if a.spread is not None:
        out += f", 95% interval {fx.span(*a.spread, 'ms')}"
    j = facts.get("copy_kernel_kernel_jitter_ms")
    if j is not None and jitter:
        out += f"; the matrix products alone moved by {say.value(j, runs=False)} (std) from round to round"
    return out


def _hidden_words(facts: Facts) -> str:
    """How much of the side-stream copy hid: its share, or, where the rounds measured it adding less than
    nothing, that it added no measurable time (a share above 100% is no share)."""
    f = facts["copy_kernel"]
    if _none_added(facts):
        return f"the copy added no measurable time to the matrix products ({_added_words(facts)})"
    return f"{say.value(f, runs=False)} of the copy hid behind compute"


def _path_words(value) -> str:
    """A path fact's value ("H2D, pageable") in words; anything else as code."""
    d, _, m = str(value).partition(", ")
    return _PATHS.get((d, m)) or say.code(value)


def finding_pinned_h2d(facts) -> Finding:
    """Pinned H2D at the largest size, against the link's peak and the run's ceiling."""
    facts = facts_of(facts)
    f = facts["h2d_pinned"]
    parts = []
    if "h2d_pinned_share_of_peak" in facts:
        parts.append(f"{say.value(facts['h2d_pinned_share_of_peak'])} of the link's theoretical peak of "
                     f"{say.value(facts['link_peak'])}")
    if "h2d_pinned_share_of_ceiling" in facts:
        parts.append(f"{say.value(facts['h2d_pinned_share_of_ceiling'])} of the run's ceiling "
                     f"({say.value(facts['ceiling'])})")
    text = (f"A pinned host-to-device copy of {_size(f)} moved **{say.value(f)}**"
            + (", " + fx.and_list(parts) if parts else "") + ".")
    return Finding("h2d_pinned", text, f.number, "GB/s", published=f.published, interval=f.spread,
                   values=dict(size=f.setting["size"]))


def finding_slowest_path(facts) -> Finding:
    """Which of the four paths is slowest at the largest size, and pinned against pageable device-to-host."""
    facts = facts_of(facts)
    slow, fast, c = facts["slowest_path"], facts["fastest_path"], facts["d2h_pinned_vs_pageable"]
    text = (f"At {_size(slow)} the slowest path is **{_path_words(slow.value)}** at "
            f"{fx.num(slow.setting['GBps'], 'GB/s')}, the fastest {_path_words(fast.value)} at "
            f"{fx.num(fast.setting['GBps'], 'GB/s')}; device-to-host into pinned memory ran "
            f"{say.comparison(c, facts)}.")
    return Finding("slowest_path", text, c.number, "×", published=c.published,
                   values=dict(size=slow.setting["size"], slowest=str(slow.value)))


def finding_pageable_drop(facts) -> Finding:
    """The pageable H2D rate at the largest size against its peak from 16 MiB on; its cause, where the
    staging experiment supports one, is :func:`pageable_drop_note`."""
    facts = facts_of(facts)
    last, c = facts["h2d_pageable"], facts["pageable_drop"]
    text = (f"Host-to-device from pageable memory moved {say.value(last)} at {_size(last)}, "
            f"{say.comparison(c, facts)}; device-to-host into pageable memory moved "
            f"{say.value(facts['d2h_pageable'])}.")
    return Finding("pageable_drop", text, c.number, "×")


def finding_cpu_overlap(facts) -> Finding:
    """Overlap of a pinned non_blocking copy with CPU work at the size nearest 256 MiB, and its verdict."""
    facts = facts_of(facts)
    f, v = facts["cpu_overlap"], facts["cpu_overlap_verdict"]
    copy, work = facts.get("cpu_overlap_copy_ms"), facts.get("cpu_overlap_work_ms")
    text = (f"At {_size(f)}, a pinned non_blocking copy ({say.value(copy, runs=False)}) and "
            f"{say.value(work, runs=False)} of Python work: **{say.value(f)}** of the shorter hidden behind the "
            f"other: {_VERDICT_WORDS.get(str(v.value), say.code(v.value))}.")
    return Finding("cpu_overlap", text, f.number, "%", published=f.published, interval=f.spread,
                   values=dict(size=f.setting["size"], verdict=str(v.value)))


def finding_copy_kernel(facts) -> Finding:
    """How much of a side-stream copy hides behind matrix products (paired rounds)."""
    facts = facts_of(facts)
    f = facts["copy_kernel"]
    v = facts.get("copy_kernel_verdict")
    if v is None:  # an older result: one unpaired estimate
        text = f"A {_size(f)} copy on a side stream: {say.value(f)} hidden, by one unpaired estimate."
        return Finding("copy_kernel", text, f.number, "%", values=dict(size=f.setting["size"]))
    head = (f"A {_size(f)} pinned copy on a side stream ({say.value(facts['copy_kernel_copy_ms'], runs=False)} "
            f"alone) beside {say.value(facts['copy_kernel_kernel_ms'], runs=False)} of matrix products")
    if _none_added(facts):
        text = (f"{head} added **no measurable time** to them: {_added_words(facts)} "
                f"({_VERDICT_WORDS.get(str(v.value), '')}).")
    else:
        text = (f"{head} added {say.value(facts['copy_kernel_added_ms'], runs=False)} to them: "
                f"**{say.value(f, runs=False)} of the copy hidden** (95% interval {fx.span(*f.spread, '%')}; "
                f"{_VERDICT_WORDS.get(str(v.value), '')}).")
    return Finding("copy_kernel", text, f.number, "%", interval=f.spread,
                   values=dict(size=f.setting["size"], verdict=str(v.value)))


def finding_pin_cost(facts) -> Finding:
    """What ``pin_memory()`` per batch costs: first call, later calls, against a reused pinned buffer."""
    facts = facts_of(facts)
    f, c = facts["pin_cost"], facts["pin_vs_reused"]
    first = facts.get("pin_first")
    text = (f"For one {_size(f)} batch, "
            + (f"the first `pin_memory()` call took **{say.value(first)}**, later calls " if first is not None
               else "`pin_memory()` then copy took ")
            + f"{say.value(f)}, {say.comparison(c, facts)}.")
    return Finding("pin_cost", text, f.number, "ms", interval=f.spread, values=dict(size=f.setting["size"]))


def finding_no_cuda(facts=None) -> Finding:
    return Finding("no_cuda", "This run measured **no PCIe**: the host has no CUDA device, so nothing crossed a bus; "
                              "what ran is the host side of the chapter.")


def finding_host_memcpy(facts) -> Finding:
    """Host side of the staging experiment (runs on any machine): one core's memcpy from cache and from DRAM."""
    facts = facts_of(facts)
    f, c = facts["host_memcpy"], facts.get("host_memcpy_cached")
    llc = f.setting.get("llc")
    text = (f"One core copying a {_size(f)} buffer (the work a pageable copy puts on the CPU) ran at "
            f"**{say.value(f)}** from DRAM" + (f" and {say.value(c)} from cache" if c is not None else "")
            + (f" (last-level cache: {size_label(int(llc))})." if llc else "."))
    return Finding("host_memcpy", text, f.number, "GB/s", values=dict(size=f.setting["size"]))


def finding_cpu_jitter(facts) -> Finding:
    facts = facts_of(facts)
    f = facts["cpu_jitter"]
    cal = f.setting.get("calibrated_ms")
    text = (f"The CPU work calibrated to {fx.num(cal, 'ms')} varied by {say.value(f)} (std over {f.n} runs), so a "
            f"copy shorter than {fx.num(MIN_COPY_OVER_JITTER * f.number, 'ms')} could not be judged against it.")
    return Finding("cpu_jitter", text, f.number, "ms")


def findings(facts) -> list[Finding]:
    """The chapter's key results (3-6), worded from its facts (a result is analysed first)."""
    facts = facts_of(facts)
    if "no_cuda" in facts:
        out = [finding_no_cuda()]
        out += [fn(facts) for key, fn in (("host_memcpy", finding_host_memcpy), ("cpu_jitter", finding_cpu_jitter))
                if key in facts]
        return out
    out = [finding_pinned_h2d(facts), finding_slowest_path(facts), finding_pageable_drop(facts)]
    for key, fn in (("cpu_overlap", finding_cpu_overlap), ("copy_kernel", finding_copy_kernel),
                    ("pin_cost", finding_pin_cost)):
        if key in facts:
            out.append(fn(facts))
    return out[:6]


# --------------------------------------------------------------------------- the opening
SIDE_STREAM_SNIPPET = '''import torch

copy_stream = torch.cuda.Stream()
with torch.cuda.stream(copy_stream):
    # the next batch crosses the bus ...
    x_next = x_pinned.to("cuda", non_blocking=True)
ready = torch.cuda.Event()
ready.record(copy_stream)
loss = step(x)  # ... while this step computes
# the GPU waits for the copy, not the host
torch.cuda.current_stream().wait_event(ready)
x_next.record_stream(torch.cuda.current_stream())'''


def _opening_no_cuda(facts: Facts) -> Opening:
    out = [Finding("no_cuda", "This run measured **no PCIe**: the host has no CUDA device, so nothing crossed a bus.")]
    if "host_memcpy" in facts:
        f = facts["host_memcpy"]
        out.append(Finding("host_memcpy", f"Only the host side ran: one core copied a {_size(f)} buffer from DRAM at "
                                          f"**{say.value(f)}**.", f.number, "GB/s"))
    if "cpu_jitter" in facts:
        f = facts["cpu_jitter"]
        out.append(Finding("cpu_jitter", f"The calibrated CPU work varied by **{say.value(f, runs=False)}** (std).",
                           f.number, "ms"))
    return Opening(out[:3], [Action("Run this chapter on a host with an NVIDIA GPU (`./journey lab`) to measure "
                                    "what pinning and overlapping copies gain there; the reference host's findings "
                                    "follow.")])


def opening(facts) -> Opening:
    """What the chapter opens with: pinned against pageable copies to the GPU at the sweep's largest size and
    at a training batch's size, PyTorch's pinned copy against the run's ceiling, and how much of a copy hides
    behind compute, one sentence each; then whether to pin and whether to copy on a side stream."""
    facts = facts_of(facts)
    if "no_cuda" in facts:
        return _opening_no_cuda(facts)
    out = []
    c, cb = facts.get("pinned_vs_pageable"), facts.get("pinned_vs_pageable_batch")
    if c is not None:
        text = f"At {_size(facts['h2d_pinned'])}, a pinned copy to the GPU ran **{say.comparison(c, facts)}**"
        if cb is not None and cb.setting["size"] != c.setting["size"]:
            text += f"; at a batch's {_size(facts['h2d_pinned_batch'])}, {say.comparison(cb, facts)}"
        out.append(Finding("pinned_vs_pageable", text + ".", c.number, "×"))
    if "ceiling" in facts:
        h = facts["h2d_pinned"]
        share = facts.get("h2d_pinned_share_of_ceiling")
        out.append(Finding("h2d_pinned", f"PyTorch's pinned {_size(h)} copy moved **{say.value(h, runs=False)}**, "
                                         f"{say.value(share)} of the run's ceiling of {say.value(facts['ceiling'])}, "
                                         "the fastest pinned copy measured.", h.number, "GB/s", published=h.published,
                           interval=h.spread))
    if "copy_kernel" in facts:
        f = facts["copy_kernel"]
        v = facts.get("copy_kernel_verdict")
        text = (f"On a side stream, a {_size(f)} copy ({say.value(facts['copy_kernel_copy_ms'], runs=False)} alone) "
                f"added **no measurable time** to matrix products: {_added_words(facts, jitter=False)}"
                if _none_added(facts) else
                f"On a side stream, **{say.value(f, runs=False)}** of a {_size(f)} copy hid behind matrix products")
        out.append(Finding("copy_kernel", text + (f" ({_VERDICT_WORDS.get(str(v.value), '')})." if v is not None
                                                  else "."), f.number, "%", interval=f.spread))
    return Opening(out[:3], _actions(facts)[:3])


def _actions(facts: Facts) -> list[Action]:
    out = []
    a = facts.advice_for("pcie.pin_memory")
    cb = facts.get("pinned_vs_pageable_batch")
    if a is not None:
        out.append(Action(say.advice(a, facts) + (" Copy with `non_blocking=True`." if a.value is True else ""),
                          a.snippet))
    elif cb is not None:
        out.append(Action(f"Pinning changed nothing measurable at {_size(facts['h2d_pinned_batch'])}: "
                          f"{say.comparison(cb, facts)}; leave `pin_memory` as it is."))
    v = facts.get("copy_kernel_verdict")
    if v is not None:
        hidden = _hidden_words(facts)
        out.append(
            Action(f"Copy the next batch on a side stream while the current step computes: here {hidden}.",
                   SIDE_STREAM_SNIPPET) if v.value == "overlaps" else
            Action(f"A side-stream copy bought nothing here ({hidden}): keep the copy on the compute stream.")
            if v.value == "serial" else
            Action(f"The side-stream overlap is not settled here ({hidden}, {_VERDICT_WORDS.get(str(v.value), '')}): "
                   "run the chapter again with more `kernel_rounds` before restructuring the loop."))
    return out


def takeaways(facts) -> str:
    """The chapter's closing advice, worded from its facts."""
    facts = facts_of(facts)
    if "no_cuda" in facts:
        return "* This run measured no PCIe; the reference host's results above show what the copies gain there."
    slow = facts["slowest_path"]
    lines = [f"* Use pinned host memory for anything that crosses the bus every step (`DataLoader(pin_memory=True)`) "
             f"and copy with `non_blocking=True`. In this result the slowest path at {_size(slow)} was "
             f"{_path_words(slow.value)} ({fx.num(slow.setting['GBps'], 'GB/s')}); pinned copies moved "
             f"{say.value(facts['h2d_pinned'], runs=False)} to the device and "
             f"{say.value(facts['d2h_pinned'], runs=False)} back."]
    if "copy_kernel_verdict" in facts:
        f = facts["copy_kernel"]
        did = (f"the copy added no measurable time to the compute ({_added_words(facts)})" if _none_added(facts)
               else f"that hid {say.value(f, runs=False)} of the copy (95% interval {fx.span(*f.spread, '%')})")
        lines.append(f"* Overlap the next batch's copy with this step's compute on a side stream, with the stream "
                     f"synchronisation done on the GPU (`wait_event`, `record_stream`); in this result {did}.")
    return "\n".join(lines)


def host_words(res, *, reference: bool) -> str:
    """The host of ``res`` by name: "the reference host, an H200 host (16 cores)" or "a CPU-only host (2 cores)"."""
    label = say.text(host_label(res.fingerprint))
    return f"the reference host, {label}" if reference else label


def link_text(facts, *, host: str) -> str:
    """The PCIe link of the result whose facts these are, on ``host`` (:func:`host_words`)."""
    facts = facts_of(facts)
    link, peak = facts.data.get("link") or {}, facts.get("link_peak")
    if "no_cuda" in facts:
        return f"This run measured no PCIe link: {host} has no CUDA device."
    if peak is None:
        return f"The link's generation and width could not be read on {host}."
    gen, width = link.get("gen_max"), link.get("width_max")
    return (f"On {host}, the GPU sits on a **PCIe {gen}.0 x{width}** link (running at gen {link.get('gen_current')} "
            f"x{link.get('width_current')} when read; idle links may train down), whose theoretical peak per "
            f"direction is **{say.value(peak)}**: {PER_LANE_GBPS[gen]:.3f} GB/s per lane after line coding, "
            f"× {width} lanes.")


def no_cuda_text(ref) -> str:
    return ("**This run measured no PCIe: the host has no CUDA device. The GPU sections below show "
            + (f"the reference run ({say.code(ref.run_id)}), labelled as such.**" if ref is not None else
               "nothing: no reference result is committed.**"))


def warnings_text(res) -> list[str]:
    """What may exceed this host's limits when the buffers are pinned, one sentence each (from the result's data;
    an older result's sentences are shown as its text, escaped)."""
    out = []
    for w in res.metadata.get("warnings") or []:
        if not isinstance(w, dict):
            out.append(f"⚠ {say.text(w)}")
        elif w.get("kind") == "memlock":
            out.append(f"⚠ `ulimit -l` is {size_label(int(w['limit_bytes']))}, below the largest pinned buffer "
                       f"({size_label(int(w['largest_bytes']))}): pinning may fail or fall back where the limit is "
                       "enforced.")
        elif w.get("kind") == "cgroup":
            out.append(f"⚠ The pinned buffers ({size_label(int(w['pinned_bytes']))}) take over half of the "
                       f"container's memory limit ({size_label(int(w['limit_bytes']))}); pinned pages cannot be "
                       "swapped and count against that limit.")
    return out
