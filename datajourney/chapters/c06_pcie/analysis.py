"""What chapter 6 found in one result, as facts: no prose, no page (see :mod:`datajourney.core.facts`).

Every number the chapter's opening, key results and advice state is computed here once: the copy rates
of the four paths at the sweep's largest size and at the size of a typical training batch, pinned against
pageable at both, the run's ceiling, the copy beside CPU work and beside matrix products, what pinning on
the fly costs; on a host without CUDA, the host side only. ``facts.data["pcie_curve"]`` is the pinned
host-to-device rate by copy size that chapter 12 reads; the rest of ``facts.data`` holds, as plain numbers and
decisions, what the page's notes word (the staging story, the dip check, the two clocks, the overlap verdicts,
the side-stream and pinning details, the published metrics, the limits' warnings)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from datajourney.chapters.c06_pcie.params import CHAPTER
from datajourney.chapters.c06_pcie.rules import (
    CLOCKS_AGREE,
    DIP_COST_TOL,
    DIP_TOL,
    HUGE_SPREAD,
    MIN_COPY_OVER_JITTER,
    OVERLAPS,
    SAME_PATH_TOL,
    SERIAL,
    STAGING_TOL,
    TOO_SHORT,
)
from datajourney.core import stats
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Fact, Facts, compare, measured
from datajourney.core.units import MiB, size_label
from datajourney.toolkit import transfer

#: The facts and data other pages may read (chapter 12's checklist and PCIe hop, the front page).
EXPORTS = ("h2d_pinned", "h2d_pageable", "pinned_vs_pageable", "h2d_pinned_batch", "pinned_vs_pageable_batch",
           "ceiling", "cpu_overlap", "copy_kernel", "pin_cost", "link_peak", "host_memcpy", "pcie_curve")
#: One training batch as it crosses the bus: 64 images of 224×224 RGB as uint8, the batch chapter 7's tuned
#: recipe sends to the GPU and chapter 12 prices. The sweep's size nearest to it (on a log scale) is "a batch".
TYPICAL_BATCH_BYTES = 64 * 3 * 224 * 224
#: The verdicts a copy's overlap can get (the result's words, checked against this set).
VERDICTS = ("overlaps", "partly overlaps", "serial", "unclear", "too short")

PIN_SNIPPET = '''import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=64,
                    num_workers=4, pin_memory=True)
for x, y in loader:
    # returns at once: the copy engine reads the pinned batch
    x = x.to("cuda", non_blocking=True)
    y = y.to("cuda", non_blocking=True)'''


def _events(res) -> pd.DataFrame:
    b = res.table("bandwidth")
    return b[b["clock"] == "CUDA events"]


def _raw(res, size: int, direction: str, memory: str) -> list[float]:
    if "bandwidth_raw" not in res.tables:
        return []
    r = res.table("bandwidth_raw")
    r = r[(r["size"] == size) & (r["direction"] == direction) & (r["memory"] == memory) & (r["clock"] == "CUDA events")]
    return [float(v) for v in r["GBps"]]


def _copy(res, key: str, size: int, direction: str, memory: str, *, published: str | None = None) -> Fact | None:
    """The sweep's median GB/s of one path at one size (CUDA events), its runs and their lowest and highest."""
    b = _events(res)
    row = b[(b["size"] == size) & (b["direction"] == direction) & (b["memory"] == memory)]
    if row.empty:
        return None
    runs = _raw(res, size, direction, memory)
    n = len(runs) or (int(row["n"].iloc[0]) if "n" in row else 1)
    spread = (min(runs), max(runs)) if len(runs) > 1 else None
    back = "" if direction == "H2D" else " back"
    return Fact(key, float(row["median"].iloc[0]), "GB/s", f"a {memory} copy of {size_label(size)}{back}",
                "rate", "higher", n, spread, {"size": int(size), "direction": direction, "memory": memory},
                published=published)


def batch_size_of(sizes) -> int:
    """The size of the sweep nearest (on a log scale) to :data:`TYPICAL_BATCH_BYTES`."""
    return int(min(sizes, key=lambda s: abs(math.log(s / TYPICAL_BATCH_BYTES))))


def pinned_h2d_measurements(res) -> list[dict]:
    """Every pinned host-to-device measurement of a run (median GB/s each), with where it comes from as
    data: ``kind`` ("sweep", "ceiling round", "second path", "both directions"), ``path``, ``size`` and for a
    ceiling round its ``round`` and ``phase``."""
    out = []
    if "bandwidth" in res.tables:
        b = _events(res)
        for _, r in b[(b["direction"] == "H2D") & (b["memory"] == "pinned")].iterrows():
            out.append(dict(kind="sweep", path="PyTorch", size=int(r["size"]), GBps=float(r["median"])))
    if "ceiling" in res.tables:
        for _, r in res.table("ceiling").iterrows():
            out.append(dict(kind="ceiling round", path=str(r["path"]), size=int(r["size"]), round=int(r["round"]),
                            phase=str(r["phase"]), GBps=float(r["median"])))
    else:
        c = res.metadata.get("ceiling", {})
        if c.get("available") and c.get("GBps"):
            out.append(dict(kind="second path", path="CuPy", size=int(c["size"]), GBps=float(c["GBps"])))
    if "bidirectional" in res.tables:
        bi = res.table("bidirectional").iloc[0]
        out.append(dict(kind="both directions", path="PyTorch", size=int(bi["size"]), GBps=float(bi["h2d_GBps"])))
    return out


def pcie_curve(res) -> list[dict] | None:
    """Pinned host-to-device GB/s by copy size (CUDA events), as records ``{"size", "GBps"}`` (None without CUDA)."""
    if not res.metadata.get("cuda") or "bandwidth" not in res.tables:
        return None
    b = _events(res)
    b = b[(b["direction"] == "H2D") & (b["memory"] == "pinned")]
    return None if b.empty else [{"size": int(s), "GBps": float(v)} for s, v in zip(b["size"], b["median"])]


def _verdict(word) -> str | None:
    """A verdict of the result as one of :data:`VERDICTS` (None for anything else)."""
    w = str(word)
    if w == TOO_SHORT:
        return "too short"
    if w.startswith("unclear"):
        return "unclear"
    return w if w in VERDICTS else None


def _share(key: str, fraction: float, label: str, *, n: int = 1, spread=None, setting=None,
           published: str | None = None) -> Fact:
    """A share as a fact: its value in percent (unit "%"), so that it reads as a percentage everywhere."""
    sp = (100 * float(spread[0]), 100 * float(spread[1])) if spread is not None else None
    return Fact(key, 100 * float(fraction), "%", label, "share", "higher", n, sp, dict(setting or {}),
                published=published)


def _time(key: str, ms, label: str, *, runs=None, setting=None) -> Fact | None:
    if ms is None or (isinstance(ms, float) and not math.isfinite(ms)):
        return None
    runs = [float(v) for v in (runs or [])]
    return Fact(key, float(ms), "ms", label, "time", "lower", max(1, len(runs)),
                (min(runs), max(runs)) if len(runs) > 1 else None, dict(setting or {}))


# --------------------------------------------------------------------------- parts
def _link(res, f: Facts) -> None:
    link = res.metadata.get("link") or {}
    f.data["link"] = {k: (int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
                      for k, v in link.items() if k in ("gen_current", "gen_max", "width_current", "width_max")}
    peak = link.get("peak_GBps")
    if peak:
        f.add(Fact("link_peak", float(peak), "GB/s", "the theoretical peak of the link per direction", "rate", "higher",
                   setting={"gen": link.get("gen_max"), "width": link.get("width_max")},
                   published="link peak (theoretical)"))


def _bandwidth(res, f: Facts) -> None:
    b = _events(res)
    sizes = sorted(int(s) for s in b["size"].unique())
    n = sizes[-1]
    gib = 1 << 30
    f.add(_copy(res, "h2d_pinned", n, "H2D", "pinned", published="H2D pinned, 1 GiB" if n == gib else None),
          _copy(res, "h2d_pageable", n, "H2D", "pageable"),
          _copy(res, "d2h_pinned", n, "D2H", "pinned", published="D2H pinned, 1 GiB" if n == gib else None),
          _copy(res, "d2h_pageable", n, "D2H", "pageable", published="D2H pageable, 1 GiB" if n == gib else None))
    if "h2d_pinned" in f and "h2d_pageable" in f:
        f.add(compare("pinned_vs_pageable", f["h2d_pinned"], f["h2d_pageable"]))
    if "d2h_pinned" in f and "d2h_pageable" in f:
        f.add(compare("d2h_pinned_vs_pageable", f["d2h_pinned"], f["d2h_pageable"],
                      published="D2H pinned ÷ pageable, 1 GiB" if n == gib else None))
    batch = batch_size_of(sizes)
    f.add(_copy(res, "h2d_pinned_batch", batch, "H2D", "pinned"),
          _copy(res, "h2d_pageable_batch", batch, "H2D", "pageable"))
    if "h2d_pinned_batch" in f and "h2d_pageable_batch" in f:
        f.add(compare("pinned_vs_pageable_batch", f["h2d_pinned_batch"], f["h2d_pageable_batch"]))
    at = b[b["size"] == n].set_index(["direction", "memory"])["median"]
    slow, fast = at.idxmin(), at.idxmax()
    f.add(Fact("slowest_path", ", ".join(slow), "", f"the slowest of the four paths at {size_label(n)}", "choice", None,
               setting={"size": n, "GBps": float(at[slow])}),
          Fact("fastest_path", ", ".join(fast), "", f"the fastest of the four paths at {size_label(n)}", "choice", None,
               setting={"size": n, "GBps": float(at[fast])}))
    # pageable host-to-device: its peak from 16 MiB on against the largest size
    h = b[(b["direction"] == "H2D") & (b["memory"] == "pageable")].set_index("size")["median"].sort_index()
    big = h[h.index >= 16 << 20] if (h.index >= 16 << 20).any() else h
    peak_size = int(big.idxmax())
    pk = _copy(res, "h2d_pageable_peak", peak_size, "H2D", "pageable")
    if pk is not None and "h2d_pageable" in f:
        f.add(pk, compare("pageable_drop", f["h2d_pageable"], pk))


def _ceiling(res, f: Facts) -> None:
    """The run's ceiling: the highest of every pinned host-to-device measurement of the chapter
    (:func:`pinned_h2d_measurements`, by :func:`datajourney.toolkit.transfer.highest`), so that no measurement of
    the chapter exceeds it; where it comes from (its kind, path, size, round, phase) is its setting."""
    top = transfer.highest(pinned_h2d_measurements(res))
    if top is None:
        return
    f.add(Fact("ceiling", float(top["GBps"]), "GB/s", "the ceiling of the run, its fastest pinned copy", "rate",
               "higher", setting={k: v for k, v in top.items() if k not in ("GBps", "of")}
               | {"measurements": int(top["of"])}))
    _ceiling_rounds(res, f)
    if "h2d_pinned" in f:
        f.add(_share("h2d_pinned_share_of_ceiling", f.number("h2d_pinned") / f.number("ceiling"),
                     "the share of the ceiling that the largest pinned copy reached", setting=f["h2d_pinned"].setting))
    if "h2d_pinned" in f and "link_peak" in f:
        f.add(_share("h2d_pinned_share_of_peak", f.number("h2d_pinned") / f.number("link_peak"),
                     "the share of the link peak that the largest pinned copy reached",
                     setting=f["h2d_pinned"].setting))


def _ceiling_rounds(res, f: Facts) -> None:
    """The ceiling's rounds spread over the run: each path's round medians, PyTorch's against the second path's,
    and how far the rounds moved (highest over lowest round median); an older result's one second-path copy."""
    about = res.metadata.get("ceiling") or {}
    if "ceiling" in res.tables:
        c = res.table("ceiling")
        n = int(about["size"]) if about.get("size") else int(c["size"].iloc[0])
        for key, path in (("ceiling_rounds_pytorch", "PyTorch"), ("ceiling_rounds_cupy", "CuPy")):
            runs = [float(v) for v in c[c["path"] == path]["median"]]
            if runs:
                f.add(measured(key, runs, unit="GB/s", label=f"{path}'s pinned copies of {size_label(n)} over the "
                               "ceiling's rounds", setting={"size": n, "path": path}))
        if "ceiling_rounds_pytorch" in f and "ceiling_rounds_cupy" in f:
            f.add(compare("ceiling_pytorch_vs_cupy", f["ceiling_rounds_pytorch"], f["ceiling_rounds_cupy"]))
        both = [float(v) for v in c[c["path"].isin(["PyTorch", "CuPy"])]["median"]]
        if len(both) > 1 and min(both) > 0:
            f.add(_share("ceiling_drift", max(both) / min(both) - 1, "how far the ceiling's round medians moved "
                         "(highest over lowest)", n=len(both), setting={"size": n}))
    elif about.get("available") and about.get("GBps") and about.get("size"):
        f.add(Fact("ceiling_second_path", float(about["GBps"]), "GB/s", "the one copy through the second path",
                   "rate", "higher", setting={"size": int(about["size"])}))
    if "repeats" in (res.parameters or {}):
        f.add(Fact("sweep_repeats", int(res.parameters["repeats"]), "", "the timed copies per point the sweep "
                   "asked for", "count", None))


def _cpu_overlap(res, f: Facts) -> None:
    if "overlap" not in res.tables:
        return
    o = res.table("overlap")
    n = int(min(o["size"].unique(), key=lambda s: abs(s - (256 << 20))))
    at = o[o["size"] == n].set_index(["memory", "mode"])
    if ("pinned", "non_blocking") not in at.index:
        return
    pn = at.loc[("pinned", "non_blocking")]
    spread = (float(pn["overlap_p10"]), float(pn["overlap_p90"])) if "overlap_p10" in o else None
    verdict = _verdict(pn["verdict"]) if "verdict" in o else None
    if verdict is None:
        r = float(pn["overlap"])
        verdict = "overlaps" if r >= OVERLAPS else "serial" if r <= SERIAL else "partly overlaps"
    setting = {"size": n, "memory": "pinned", "mode": "non_blocking"}
    f.add(_share("cpu_overlap", float(pn["overlap"]), f"the hidden share of a pinned non_blocking copy of "
                 f"{size_label(n)} beside CPU work", n=int(pn.get("n", 1) or 1), spread=spread, setting=setting,
                 published="overlap, pinned + non_blocking, 256 MiB" if n == 256 << 20 else None),
          Fact("cpu_overlap_verdict", verdict, "", "whether the copy overlapped the CPU work", "choice", None,
               setting=setting),
          _time("cpu_overlap_copy_ms", float(pn["copy_ms"]), f"the copy of {size_label(n)} alone", setting=setting),
          _time("cpu_overlap_work_ms", float(pn["cpu_ms"]), "the Python work alone", setting=setting))
    if "jitter_ms" in o:
        jitter = float(pn["jitter_ms"])
        f.add(_time("cpu_overlap_jitter_ms", jitter, "the jitter of the CPU work in that row",
                    setting={"too_short_below_ms": MIN_COPY_OVER_JITTER * jitter}))
        if spread is not None and spread[1] > 1:   # a round that hid more than the whole of the shorter
            excess = (spread[1] - 1) * min(float(pn["copy_ms"]), float(pn["cpu_ms"]))
            f.add(_time("cpu_overlap_excess_ms", excess, "how much sooner than its parts the pair ended at the "
                        "share's p90", setting={"jitters": excess / jitter if jitter > 0 else None,
                                                "noise": jitter > 0 and excess <= MIN_COPY_OVER_JITTER * jitter}))


def _copy_kernel(res, f: Facts) -> None:
    if "copy_kernel" not in res.tables:
        return
    ck = res.table("copy_kernel").iloc[0]
    n = int(ck["size"])
    setting = {"size": n}
    if "hidden" not in ck:  # an older result: one unpaired estimate
        f.add(_share("copy_kernel", float(ck["overlap"]), f"the hidden share of a side-stream copy of {size_label(n)}",
                     setting=setting))
        return
    lo, hi = float(ck["hidden_lo"]), float(ck["hidden_hi"])
    h = float(ck["hidden"])
    v = "overlaps" if h >= OVERLAPS else "serial" if h <= SERIAL else "partly overlaps"
    if lo <= SERIAL and hi >= OVERLAPS:
        v = "unclear"
    f.add(_share("copy_kernel", h, f"the hidden share of a side-stream copy of {size_label(n)} beside matrix "
                 "products", n=int(ck["rounds"]), spread=(lo, hi), setting=setting),
          Fact("copy_kernel_verdict", v, "", "whether the side-stream copy hid behind the matrix products", "choice",
               None, setting=setting),
          _time("copy_kernel_added_ms", float(ck["added_ms"]), "what the copy added to the matrix products",
                runs=[float(ck["added_lo_ms"]), float(ck["added_hi_ms"])], setting=setting),
          _time("copy_kernel_copy_ms", float(ck["copy_ms"]), f"the copy of {size_label(n)} alone", setting=setting),
          _time("copy_kernel_kernel_ms", float(ck["kernel_ms"]), "the matrix products alone", setting=setting))
    if "copy_kernel_calls" in res.tables:
        c = res.table("copy_kernel_calls")
        alone = c[(c["design"] == "interleaved") & (c["name"] == "kernel")]["ms"]
        if len(alone) > 1:  # how much the matrix products alone moved from round to round (std)
            f.add(_time("copy_kernel_kernel_jitter_ms", float(alone.std()), "the round-to-round jitter (std) of the "
                        "matrix products alone", setting=setting | {"rounds": int(len(alone))}))


def _pin_cost(res, f: Facts) -> None:
    if "pin_cost" not in res.tables:
        return
    pc = res.table("pin_cost").set_index("way")
    pin, reuse = "pin_memory() per batch, then copy", "copy into a reused pinned buffer, then copy"
    if pin not in pc.index or reuse not in pc.index:
        return
    n = int(pc["size"].iloc[0])
    setting = {"size": n}

    def later(way):
        if "pin_cost_raw" not in res.tables:
            return []
        r = res.table("pin_cost_raw")
        return [float(v) for v in r[(r["way"] == way) & (r["call"] > 1)]["ms"]]

    f.add(_time("pin_cost", float(pc.loc[pin, "median_ms"]), f"pin_memory() then a copy of {size_label(n)}, "
                "later calls", runs=later(pin), setting=setting),
          _time("pin_reused", float(pc.loc[reuse, "median_ms"]), "a reused pinned buffer",
                runs=later(reuse), setting=setting))
    if "first_ms" in pc:
        f.add(_time("pin_first", float(pc.loc[pin, "first_ms"]), "the first pin_memory() call", setting=setting))
    f.add(compare("pin_vs_reused", f["pin_cost"], f["pin_reused"]))
    allocs = (res.metadata.get("pin_cost") or {}).get("host_allocations_during_pin_calls")
    if allocs is not None:
        f.add(Fact("pin_allocations", int(allocs), "", "page-locked allocations over the pin_memory() calls", "count",
                   "lower", setting={"calls": (res.metadata.get("pin_cost") or {}).get("pin_calls")}))


def _host_side(res, f: Facts) -> None:
    """What runs on any machine: one core's memcpy (cached and from DRAM) and the CPU work's jitter."""
    if "staging" in res.tables:
        st = res.table("staging")
        for key, measure, where in (("host_memcpy", "memcpy one core, cache flushed", "from DRAM"),
                                    ("host_memcpy_cached", "memcpy one core, source cached", "from cache")):
            s = st[st["measure"] == measure].set_index("size")["median"].sort_index()
            if len(s):
                n = int(s.index.max())
                f.add(Fact(key, float(s[n]), "GB/s", f"one core copying {size_label(n)} {where}", "rate", "higher",
                           setting={"size": n, "llc": (res.metadata.get("llc") or {}).get("bytes")}))
    cw = res.metadata.get("cpu_work") or {}
    if cw.get("std_ms") is not None:
        f.add(Fact("cpu_jitter", float(cw["std_ms"]), "ms", "the jitter (std) of the calibrated CPU work", "time",
                   "lower", int(cw.get("n") or 1), setting={"calibrated_ms": cw.get("calibrated_ms")}))


# --------------------------------------------------------------------------- what the page's notes word
# Plain JSON in ``facts.data``: the numbers and decisions behind the page's notes and tables' captions, so that
# the page words them and reads no table.
def _py(x):
    """A table's scalar as a plain Python value (JSON-safe, printed as the table printed it)."""
    return x.item() if hasattr(x, "item") else x


def _range_of(series) -> list[float]:
    return [float(series.min()), float(series.max())]


def key_metrics(res) -> dict:
    """The published metrics of this chapter: name -> value (None where the run has no verdict for it)."""
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
            out[key] = float(b.loc[(size, d, m)])
    if "D2H pinned, 1 GiB" in out and "D2H pageable, 1 GiB" in out:
        out["D2H pinned ÷ pageable, 1 GiB"] = out["D2H pinned, 1 GiB"] / out["D2H pageable, 1 GiB"]
    if "overlap" in res.tables:
        o = res.table("overlap")
        o = o[(o["memory"] == "pinned") & (o["mode"] == "non_blocking")].set_index("size")
        for size, label in ((q, "256 MiB"), (16 << 20, "16 MiB")):
            if size in o.index:
                row = o.loc[size]
                judged = "verdict" not in row or row["verdict"] != TOO_SHORT
                out[f"overlap, pinned + non_blocking, {label}"] = 100 * float(row["overlap"]) if judged else None
    peak = (res.metadata.get("link") or {}).get("peak_GBps")
    if peak:
        out["link peak (theoretical)"] = _py(peak)
    return out


def _staging_median(st: pd.DataFrame, measure: str) -> pd.Series:
    return st[st["measure"] == measure].set_index("size")["median"].sort_index()


def _staging_runs(res, measure: str, size: int) -> list[float]:
    """GB/s of every copy of ``measure`` at ``size`` (the medians' table alone: its median)."""
    if "staging_raw" in res.tables:
        r = res.table("staging_raw")
        v = r[(r["measure"] == measure) & (r["size"] == size)]["GBps"].tolist()
        if v:
            return [float(x) for x in v]
    st = res.table("staging")
    return [float(x) for x in st[(st["measure"] == measure) & (st["size"] == size)]["median"]]


def _change(after: list[float], before: list[float]) -> dict:
    """How ``after`` differs from ``before``: the direction (within :data:`STAGING_TOL`: 0) and the relative change."""
    return {"direction": stats.direction(after, before, tol=STAGING_TOL),
            "change": float(np.mean(after) / np.mean(before)) - 1}


def staging_story(res) -> dict:
    """What the bandwidth sweep and the staging experiment show about pageable host-to-device copies, as plain
    numbers: the sweep's pageable peak from 16 MiB on and its last size; with a staging table, the cached and
    flushed copy and one core's memcpy at its smallest and largest size, the cached copy's knee (where it falls
    below the midpoint of the two) and the huge-page copies beyond it."""
    out = dict(llc=(res.metadata.get("llc") or {}).get("bytes"))
    b = _events(res)
    h = b[(b["direction"] == "H2D") & (b["memory"] == "pageable")].set_index("size")["median"].sort_index()
    d = b[(b["direction"] == "D2H") & (b["memory"] == "pageable")].set_index("size")["median"].sort_index()
    big = h[h.index >= 16 * MiB] if (h.index >= 16 * MiB).any() else h
    out.update(h2d_peak=float(big.max()), h2d_peak_size=int(big.idxmax()), h2d_last=float(h.iloc[-1]),
               h2d_last_size=int(h.index[-1]), d2h_min=float(d[d.index >= big.index.min()].min()),
               d2h_max=float(d[d.index >= big.index.min()].max()))
    out["drop"] = out["h2d_last"] / out["h2d_peak"]
    out["has_staging"] = bool("staging" in res.tables
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
    mid = (out["cached_small"] + out["cached_large"]) / 2
    below = cached[cached < mid]
    out["knee"] = int(below.index.min()) if len(below) else None
    out["cached_at_knee"] = float(cached[out["knee"]]) if out["knee"] else None
    out["memcpy_flushed_large"] = float(mem_f[large])
    if len(huge):
        beyond = [int(x) for x in cached.index if x >= (out["knee"] or small) and x in huge.index]
        out["huge_sizes"] = beyond
        out["huge_runs"] = [float(huge[x]) for x in beyond]
        out["cached_runs"] = [float(cached[x]) for x in beyond]
        out["huge_ratios"] = [h / c for h, c in zip(out["huge_runs"], out["cached_runs"])]
        hb = st[(st["measure"] == "H2D pageable, huge pages")]
        out["huge_bytes"] = (float(hb["huge_bytes"].dropna().min())
                             if "huge_bytes" in hb and hb["huge_bytes"].notna().any() else None)
    both = pd.concat([cached.rename("copy"), mem_c.rename("memcpy")], axis=1).dropna()
    corr = float(both["copy"].corr(both["memcpy"])) if len(both) > 2 else float("nan")
    out["corr"] = corr if math.isfinite(corr) else None  # does one core's memcpy follow the copy over sizes?
    return out


def _cause_kind(s: dict) -> str:
    """Which reading of the staging experiment the data support: 'cache', 'other', 'cached', 'none'."""
    flush_hurts = s["flushed_small"] < 0.8 * s["cached_small"]
    cached_falls = s["cached_large"] < 0.8 * s["cached_small"]
    return ("cache" if flush_hurts and cached_falls else "other" if cached_falls else
            "cached" if flush_hurts else "none")


def dip_summary(res) -> pd.DataFrame:
    """Per size of the interleaved dip check: median GB/s (p10, p90), median CPU ms of the calling
    thread per GB, mean page faults per MiB, and the number of copies (empty without the check)."""
    if "staging_dip" not in res.tables or res.table("staging_dip").empty:
        return pd.DataFrame()
    d = res.table("staging_dip").copy()
    d["cpu_ms_per_GB"] = d["cpu_ms"] / (d["size"] / 1e9)
    d["faults_per_MiB"] = (d["minor_faults"] + d["major_faults"]) / (d["size"] / MiB)
    g = d.groupby("size")
    return pd.DataFrame({"median": g["GBps"].median(), "p10": g["GBps"].quantile(0.1),
                         "p90": g["GBps"].quantile(0.9), "cpu_ms_per_GB": g["cpu_ms_per_GB"].median(),
                         "faults_per_MiB": g["faults_per_MiB"].mean(), "n": g["GBps"].count()}).sort_index()


def dip_check(res, block: list[int] | None = None) -> dict:
    """What the interleaved check decides about a dip of the pageable copy at the sizes ``block`` (those of the
    block experiment): which sizes it covered, the sizes that stay more than :data:`DIP_TOL` below the largest
    (the dip belongs to the size) or none (the order made it), and whether CPU time or page faults per byte grow
    there (by more than :data:`DIP_COST_TOL`)."""
    ds = dip_summary(res)
    if ds.empty:
        return {"ran": False, "cuda": bool(res.metadata.get("cuda")),
                "reference": str(res.run_id).startswith("reference")}
    large = int(ds.index.max())
    top = float(ds.loc[large, "median"])
    mid = ds[ds.index < large]
    dips = mid[mid["median"] * (1 + DIP_TOL) < top]
    block = sorted(int(x) for x in (block or []))
    covered = [x for x in block if x in ds.index]
    out = {"ran": True, "rounds": int(ds["n"].min()), "large": large,
           "medians": [[int(n), float(r["median"])] for n, r in ds.iterrows()], "block": block,
           "covered": covered, "missed": [x for x in block if x not in covered], "dips": [int(x) for x in dips.index]}
    if not len(dips):
        return out
    base_f = float(ds.loc[large, "faults_per_MiB"])
    out.update(cpu_per_GB=_range_of(dips["cpu_ms_per_GB"]), cpu_per_GB_large=float(ds.loc[large, "cpu_ms_per_GB"]),
               faults_per_MiB=_range_of(dips["faults_per_MiB"]), faults_per_MiB_large=base_f,
               cpu_up=bool((dips["cpu_ms_per_GB"] > (1 + DIP_COST_TOL) * ds.loc[large, "cpu_ms_per_GB"]).all()),
               faults_up=bool((dips["faults_per_MiB"] > (1 + DIP_COST_TOL) * max(base_f, 1e-9)).all()
                              and dips["faults_per_MiB"].max() > 0))
    return out


def _staging_details(res, s: dict) -> None:
    """Adds to the staging story ``s`` what its details decide: the cause's kind, how the cached copy moved with
    size and with a flushed cache, the knee against the last-level cache, the copy's share of one core's DRAM
    rate, the sizes where it beats one core from cache, a dip and the interleaved check's reading of it, the same
    path measured in the bandwidth sweep, and the huge pages' effect."""
    cm = "H2D pageable, source cached"
    s["kind"] = _cause_kind(s)
    s["by_size"] = _change(_staging_runs(res, cm, s["large"]), _staging_runs(res, cm, s["small"]))
    s["by_flush"] = _change(_staging_runs(res, "H2D pageable, cache flushed", s["small"]),
                            _staging_runs(res, cm, s["small"]))
    st = res.table("staging")
    cached = _staging_median(st, cm)
    mem_c = _staging_median(st, "memcpy one core, source cached")
    mem_f = _staging_median(st, "memcpy one core, cache flushed")
    knee, llc = s.get("knee"), s["llc"]
    if s["kind"] == "cache" and knee:
        s["flushed_like_knee"] = bool(0.8 <= s["flushed_small"] / float(s["cached_at_knee"]) <= 1.25)
        if llc:
            s["knee_at_llc"] = bool(knee >= llc / 2)
            s["in_vm"] = bool((res.fingerprint.get("cpu") or {}).get("hypervisor"))
    beyond = [int(x) for x in cached.index if x >= (knee or s["small"]) and x in mem_f.index and mem_f[x] > 0]
    if beyond:
        share = {x: float(cached[x] / mem_f[x]) for x in beyond}
        s["dram_share"] = {"from": beyond[0], "low": min(share.values()), "high": max(share.values()),
                           "last_size": beyond[-1], "last": share[beyond[-1]]}
    faster = [int(x) for x in cached.index if x in mem_c.index and cached[x] > (1 + SAME_PATH_TOL) * mem_c[x]]
    if faster:
        s["faster_than_core"] = {"sizes": faster, "copy": _range_of(cached[faster]),
                                 "memcpy": _range_of(mem_c[faster])}
    if knee:
        mid = cached[(cached.index >= knee) & (cached.index < s["large"])]
        dip = mid[mid * (1 + 0.15) < s["cached_large"]]
        if len(dip):
            s["dip"] = {"sizes": [int(x) for x in dip.index], "range": _range_of(dip),
                        "check": dip_check(res, list(dip.index))}
    b = _events(res)
    sweep = b[(b["direction"] == "H2D") & (b["memory"] == "pageable")].set_index("size")["median"]
    both = [int(x) for x in cached.index if x in sweep.index]
    differ = [x for x in both if abs(sweep[x] / cached[x] - 1) > SAME_PATH_TOL]
    same = {"sizes": both, "differ": [{"size": x, "sweep": float(sweep[x]), "staging": float(cached[x]),
                                       "apart": float(abs(sweep[x] / cached[x] - 1))} for x in differ]}
    if differ:  # which of the two the interleaved check agrees with
        ds = dip_summary(res)
        same["check"] = [{"size": x, "GBps": float(ds.loc[x, "median"]),
                          "nearer": ("sweep" if abs(float(ds.loc[x, "median"]) - sweep[x])
                                     < abs(float(ds.loc[x, "median"]) - cached[x]) else "staging")}
                         for x in differ if x in ds.index]
    s["same_path"] = same
    if s.get("huge_runs"):
        r = s["huge_ratios"]
        s["huge"] = {"direction": stats.direction(s["huge_runs"], s["cached_runs"], tol=0.1), "sizes": len(r),
                     "median_change": float(np.median(r)) - 1, "changes": [min(r) - 1, max(r) - 1],
                     "wide": bool(max(r) - min(r) > HUGE_SPREAD)}


def clock_ratios(res) -> pd.DataFrame:
    """Host clock ÷ CUDA events (median ms ratio) per size and path, and the host clock's extra µs per copy."""
    r = res.table("bandwidth_raw")
    med = r.groupby(["size", "direction", "memory", "clock"])["ms"].median().unstack("clock")
    med["ratio"] = med["host clock"] / med["CUDA events"]
    med["extra_us"] = 1e3 * (med["host clock"] - med["CUDA events"])
    return med.reset_index()


def _clocks(res) -> dict | None:
    """The two clocks compared: the smallest size from which every path agrees within :data:`CLOCKS_AGREE` at
    it and all larger sizes, the host clock's extra µs at the smallest size, the largest gap, and the pageable
    paths' ratio at the largest size."""
    if "bandwidth_raw" not in res.tables:
        return None
    t = clock_ratios(res)
    sizes = sorted(t["size"].unique())
    agree_from = next((int(s) for s in sizes if all((t[t["size"] >= s]["ratio"] - 1).abs() < CLOCKS_AGREE)), None)
    worst = t.loc[t["ratio"].idxmax()]
    big = t[t["size"] == sizes[-1]]
    pag = big[big["memory"] == "pageable"]["ratio"]
    pr = float(pag.max()) if len(pag) else None
    return {"agree_from": agree_from, "smallest": int(sizes[0]), "largest": int(sizes[-1]),
            "extra_us": float(t[t["size"] == sizes[0]]["extra_us"].median()),
            "worst": {"direction": str(worst["direction"]), "memory": str(worst["memory"]),
                      "size": int(worst["size"]), "ratio": float(worst["ratio"])},
            "pageable_ratio": pr, "pageable_agree": None if pr is None else bool(abs(pr - 1) < CLOCKS_AGREE)}


def _size_groups(rows: pd.DataFrame) -> list[list]:
    """Overlap rows by size: [size, the sorted (memory, mode) pairs it covers]."""
    return [[int(n), sorted([str(r["memory"]), str(r["mode"])] for _, r in g.iterrows())]
            for n, g in rows.groupby("size", sort=True)]


def _overlap(res) -> dict | None:
    """The overlap table's verdicts as the page's notes word them: the other three combinations beside the
    pinned non_blocking row, the CPU work's jitter, which rows could be judged and which were too short, the
    CPU work's swing between rows, blocking rows that did not read as serial, the non_blocking verdicts."""
    if "overlap" not in res.tables:
        return None
    o = res.table("overlap")
    out: dict = {"spread": "overlap_p10" in o}
    if "jitter_ms" in o:
        out["jitter"] = _range_of(o["jitter_ms"])
    n = int(min(o["size"].unique(), key=lambda s: abs(s - (256 << 20))))
    at = o[o["size"] == n].set_index(["memory", "mode"])
    if ("pinned", "non_blocking") in at.index and "verdict" in o:
        others = [[m, md, str(r["verdict"]), float(r["overlap"])] for (m, md), r in at.iterrows()
                  if (m, md) != ("pinned", "non_blocking")]
        out["beside"] = {"size": n, "others": others,
                         "too_short": sorted(int(s) for s in o[o["verdict"] == TOO_SHORT]["size"].unique())}
    if "jitter_ms" not in o:
        return out
    short, judged = o[o["verdict"] == TOO_SHORT], o[o["verdict"] != TOO_SHORT]
    bl = judged[judged["mode"] == "blocking"]
    cav: dict = {"rows": len(o), "judged": _size_groups(judged), "judged_rows": len(judged),
                 "short": _size_groups(short), "copy_ms": _range_of(o["copy_ms"]), "cpu_ms": _range_of(o["cpu_ms"]),
                 "cpu_swing": bool(o["cpu_ms"].max() > 1.2 * o["cpu_ms"].min()),
                 "cpu_swing_share": float(o["cpu_ms"].max() / o["cpu_ms"].min() - 1), "blocking_judged": len(bl),
                 "blocking_not_serial": [[int(r["size"]), str(r["memory"]), str(r["verdict"]), float(r["overlap"])]
                                         for _, r in bl[bl["verdict"] != "serial"].iterrows()]}
    if len(short):
        cav.update(short_copy_ms=_range_of(short["copy_ms"]), short_min_copy_ms=_range_of(short["min_copy_ms"]))
    for key, memory in (("pinned_non_blocking", "pinned"), ("pageable_non_blocking", "pageable")):
        rows = judged[(judged["memory"] == memory) & (judged["mode"] == "non_blocking")]
        cav[key] = [[int(r["size"]), str(r["verdict"])] for _, r in rows.iterrows()]
    out["caveat"] = cav
    return out


def _copy_kernel_details(res) -> dict | None:
    """Beside the paired rounds: the profiler timeline's covered share and the kernels' slowdown under the copy,
    the naive (blocks) estimate, and how far the matrix products alone drifted within their block (with the SM
    clock and power read meanwhile) against the copy's length."""
    if "copy_kernel" not in res.tables:
        return None
    ck = res.table("copy_kernel").iloc[0]
    if "hidden" not in ck:
        return {}
    out: dict = {}
    cov = ck.get("timeline_covered_share")
    if (ck.get("timeline") is True or ck.get("timeline") == 1.0) and cov is not None and math.isfinite(cov):
        sl = ck.get("timeline_kernel_slowdown")
        out["timeline"] = {"covered": float(cov),
                           "slowdown": float(sl) if sl is not None and math.isfinite(sl) else None}
    bo = ck.get("blocks_overlap")
    out["blocks_overlap"] = float(bo) if bo is not None and math.isfinite(bo) else None
    if "copy_kernel_calls" in res.tables:
        c = res.table("copy_kernel_calls")
        kb = c[(c["design"] == "blocks") & (c["name"] == "kernel")]
        if len(kb):
            lo, hi, copy = float(kb["ms"].min()), float(kb["ms"].max()), float(ck["copy_ms"])
            clock = ("sm_clock_mhz" in kb and kb["sm_clock_mhz"].notna().any())
            out["kernel_block"] = {
                "ms": [lo, hi], "drift_ms": hi - lo, "drift_over_copy": bool(hi - lo > copy),
                "drift_share": (hi - lo) / copy, "points_per_percent": float(ck["kernel_ms"]) / copy,
                "sm_clock_mhz": _range_of(kb["sm_clock_mhz"]) if clock else None,
                "power_w": (_range_of(kb["power_w"]) if clock and "power_w" in kb and kb["power_w"].notna().any()
                            else None)}
    return out


def _pin_cost_details(res) -> dict | None:
    """Beside the pinning finding: the caching host allocator's page-locked allocations over the calls (whether
    the cached block was reused) and the cost of pinning with the cache emptied before each call against
    later calls (direction within 20%)."""
    if "pin_cost" not in res.tables:
        return None
    pc = res.table("pin_cost").set_index("way")
    if "first_ms" not in pc:
        return {}
    meta = res.metadata.get("pin_cost") or {}
    allocs = meta.get("host_allocations_during_pin_calls")
    out: dict = {"allocations": _py(allocs), "calls": _py(meta.get("pin_calls")),
                 "reused": None if allocs is None else bool(allocs <= 1)}
    fresh_way = "pin_memory() with the pinned cache emptied before each call"
    if fresh_way in pc.index:
        fresh = float(pc.loc[fresh_way, "median_ms"])
        later = float(pc.loc["pin_memory() per batch, then copy", "median_ms"])
        out["emptied"] = {"ms": fresh, "allocations": _py(meta.get("host_allocations_emptied_way")),
                          "direction": stats.direction(fresh, later, tol=0.2)}
    return out


def _bidirectional(res) -> dict | None:
    if "bidirectional" not in res.tables:
        return None
    bi = res.table("bidirectional").iloc[0]
    out = {"size": int(bi["size"]), "h2d_GBps": float(bi["h2d_GBps"]), "d2h_GBps": float(bi["d2h_GBps"]),
           "aggregate_GBps": float(bi["aggregate_GBps"]), "overlap": float(bi["overlap"]),
           "verdict": str(bi["verdict"])}
    if "overlap_p10" in bi:
        out["spread"] = [float(bi["overlap_p10"]), float(bi["overlap_p90"])]
    return out


def _stale_read(res) -> dict | None:
    if "stale_read" not in res.tables:
        return None
    st = res.table("stale_read").iloc[0]
    return {"before_sync": _py(st["read_before_sync"]), "after_sync": _py(st["read_after_sync"]),
            "expected": _py(st["expected"]), "stale": bool(st["stale"])}


def _page_data(res, f: Facts) -> None:
    """What the page's notes word beyond the facts: see the functions above (no CUDA: the host side only)."""
    f.data["key_metrics"] = key_metrics(res)
    f.data["has_staging_table"] = bool("staging" in res.tables and len(res.table("staging")))
    f.data["warnings"] = list(res.metadata.get("warnings") or [])
    f.data["dip_check"] = dip_check(res)
    if not f.data["cuda"] or "bandwidth" not in res.tables:
        return
    s = staging_story(res)
    if s["has_staging"]:
        _staging_details(res, s)
    f.data.update(staging=s, clocks=_clocks(res), overlap=_overlap(res), copy_kernel_details=_copy_kernel_details(res),
                  pin_cost_details=_pin_cost_details(res), bidirectional=_bidirectional(res),
                  stale_read=_stale_read(res))


def _advice(f: Facts) -> None:
    pinned, pageable = f.get("h2d_pinned_batch"), f.get("h2d_pageable_batch")
    if pinned is None or pageable is None:
        return
    n = pinned.setting["size"]
    q = Question("pcie.pin_memory", "Pinned or pageable memory for host-to-device batches?", "pin_memory", False,
                 "pin_memory=False", "PyTorch's DataLoader default",
                 f"host-to-device copies of {size_label(n)} batches")
    a = decide(q, [Candidate(False, pageable), Candidate(True, pinned, snippet=PIN_SNIPPET)], f)
    f.advise(replace(a, needs="gpu", evidence=a.evidence + ("pinned_vs_pageable",)) if a is not None else None)


def analyse(res) -> Facts:
    """Chapter 6's facts of ``res`` (pure: reads the result's tables and metadata only)."""
    f = Facts(CHAPTER, exports=EXPORTS)
    f.data["pcie_curve"] = pcie_curve(res)
    f.data["cuda"] = bool(res.metadata.get("cuda"))
    _page_data(res, f)
    if not f.data["cuda"] or "bandwidth" not in res.tables:
        f.add(Fact("no_cuda", 0, "", "CUDA devices this run could copy to", "count", None))
        _host_side(res, f)
        return f
    _link(res, f)
    _bandwidth(res, f)
    _ceiling(res, f)
    _cpu_overlap(res, f)
    _copy_kernel(res, f)
    _pin_cost(res, f)
    _host_side(res, f)
    _advice(f)
    return f

