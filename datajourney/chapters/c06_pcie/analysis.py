"""What chapter 6 found in one result, as facts: no prose, no page (see :mod:`datajourney.core.facts`).

Every number the chapter's opening, key results and advice state is computed here once: the copy rates
of the four paths at the sweep's largest size and at the size of a typical training batch, pinned against
pageable at both, the run's ceiling, the copy beside CPU work and beside matrix products, what pinning on
the fly costs; on a host without CUDA, the host side only. ``facts.data["pcie_curve"]`` is the pinned
host-to-device rate by copy size that chapter 12 reads."""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from datajourney.chapters.c06_pcie.rules import MIN_COPY_OVER_JITTER, OVERLAPS, SERIAL, TOO_SHORT
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Fact, Facts, compare, measured
from datajourney.core.findings import size_label

CHAPTER = "06_pcie"
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
    ms = pinned_h2d_measurements(res)
    if not ms:
        return
    top = max(ms, key=lambda m: m["GBps"])
    f.add(Fact("ceiling", float(top["GBps"]), "GB/s", "the ceiling of the run, its fastest pinned copy", "rate",
               "higher", setting={k: v for k, v in top.items() if k != "GBps"} | {"measurements": len(ms)}))
    _ceiling_rounds(res, f)
    if "h2d_pinned" in f:
        f.add(_share("h2d_pinned_share_of_ceiling", f.number("h2d_pinned") / top["GBps"],
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
        f.add(_time("cpu_overlap_jitter_ms", float(pn["jitter_ms"]), "the jitter of the CPU work in that row",
                    setting={"too_short_below_ms": MIN_COPY_OVER_JITTER * float(pn["jitter_ms"])}))


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

