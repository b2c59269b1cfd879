"""Chapter 3's analysis: what a result of :mod:`.experiment` found, as facts (no prose).

The workload is the DataLoader over synthetic samples read one file each or from one shard (per-file
reads only: no decoding, no model), so its advice is labelled as that, never as a training recipe.
Keys other pages may read are listed in :data:`EXPORTS`.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from datajourney.chapters.c03_dataloader.params import CHAPTER, KINDS, MAIN_BOUND_SHARE
from datajourney.chapters.common import (
    FILES,
    MIN_RUNS_FOR_RANGE,
    SHARD,
    cold_verdict,
    guest_cold,
    latency_stats,
    residency_facts,
    table_of,
    values_of,
)
from datajourney.core import stats
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Fact, Facts, compare, measured
from datajourney.core.stats import mean
from datajourney.core.units import size_label

EXPORTS = ("published_w0", "published_w4", "first_batch", "shuffled_gap_max_workers", "cold_state",
           "small_files.num_workers", "small_files.layout")
#: The published comparison's worker counts.
PUBLISHED_WORKERS = (0, 4)
LABELS = {"small_files": "shuffled small files", "shard": "one shard read shuffled",
          "shard_in_order": "one shard read in order"}


def _runs(key: str, values, **kw) -> Fact:
    """:func:`measured`, with no range from fewer than :data:`MIN_RUNS_FOR_RANGE` runs."""
    f = measured(key, values, **kw)
    return f if f.n >= MIN_RUNS_FOR_RANGE else replace(f, spread=None)


def analyse(res) -> Facts:
    """Every number and decision chapter 3's page states (opening, key results, notes), from ``res``'s tables."""
    out = Facts(CHAPTER, exports=EXPORTS)
    v = cold_verdict(res)
    cold = v.label
    out.add(Fact("cold_state", cold if v.state is not None else None, label="what a cold read reached",
                 quantity="choice", better=None, n=len(v.medians),
                 setting=dict(state=v.state, hypervisor=v.hypervisor, source=v.source, floor_us=v.floor_us,
                              medians=list(v.medians), share_below=v.share_below, label=cold)))
    out.data.update(cold_label=cold, guest_cold=guest_cold(res))
    own = latency_stats(res)
    if own is not None:
        meds = [float(m) for m in own["medians"]]
        out.add(Fact("own_latency", float(own["median_us"]), "µs", "this chapter's own cold 4 KiB O_DIRECT read",
                     "time", "lower", len(meds), setting=dict(reads=int(own["reads"]))))
    _hand_over(out, res)
    e = table_of(res, "epochs")
    if e.empty or "steady_MBps" not in e:
        return out
    caches = set(e["cache"])
    cache = "cold" if "cold" in caches else "warm"
    word = cold if cache == "cold" else "warm"
    ws = sorted(int(w) for w in set(e["workers"]))
    n = (int(res.parameters["n_files"]) if "n_files" in res.parameters
         else int(e["samples"].max()) if "samples" in e else 0)
    size = int(e["sample_size"].iloc[0]) if "sample_size" in e else 0
    out.data.update(cache=cache, workers=ws, n_files=n, sample_size=size)

    def rate(kind, w, c=cache, key=None):
        vals = values_of(e, "steady_MBps", cache=c, workers=w, kind=kind)
        label = f"{LABELS[kind]}, num_workers={w}, {cold if c == 'cold' else c}"
        return _runs(key or f"{c}.w{w}.{kind}", vals, unit="MB/s", label=label,
                     setting=dict(cache=c, workers=w, kind=kind)) if vals else None

    for w in PUBLISHED_WORKERS:
        sh, sf = rate("shard_in_order", w), rate("small_files", w)
        if sh is not None and sf is not None:
            out.add(sh, sf, compare(f"published_w{w}", sh, sf,
                                    published=f"shard ÷ small files, workers={w}" if cache == "cold" else None))
    if "cold" in caches:
        w = ws[-1]
        sh, sf = rate("shard", w, "cold"), rate("small_files", w, "cold")
        if sh is not None and sf is not None:
            out.add(sh, sf, replace(compare("shuffled_gap_max_workers", sh, sf), setting=dict(workers=w)))
    _first_batch(out, e, ws)
    _main_process(out, e, ws)
    _one_worker(out, res)
    residency_facts(out, e, "epoch")
    _advice(out, res, e, ws, cache, word, n, size)
    _notes(out, res, e, ws, cold)
    _key_metrics(out, e)
    _one_vs_none(out, e)
    _main_bound(out, e)
    _plateau(out, res, e)
    _exercise(out, res, e)
    return out


def _key_metrics(out: Facts, e: pd.DataFrame) -> None:
    """The published comparison, like for like: cold, steady state (first batch excluded), the shard read
    in order vs the small files shuffled, at workers 0 and 4; metric -> [mean, sample std]."""
    km = {}
    for w in PUBLISHED_WORKERS:
        sf = values_of(e, "steady_MBps", cache="cold", workers=w, kind="small_files")
        sh = values_of(e, "steady_MBps", cache="cold", workers=w, kind="shard_in_order")
        if not sf or not sh:
            continue
        km[f"small files, workers={w}"] = [mean(sf), _std(sf)]
        km[f"shard, workers={w}"] = [mean(sh), _std(sh)]
        km[f"shard ÷ small files, workers={w}"] = [mean(sh) / mean(sf), None]
    out.data["key_metrics"] = km


def _std(values) -> float | None:
    """The sample standard deviation (None from one value)."""
    v = float(pd.Series(values).std())
    return v if v == v else None


def _plain(x) -> float | None:
    """A table's number as a plain float, None where it is missing."""
    return None if x is None or pd.isna(x) else float(x)


def _versus(a, b, tol: float = 0.05) -> dict:
    """``a`` against ``b`` as :func:`phrasing.compare` decides it: the direction, and the larger mean over the
    smaller (the ratio a comparison states)."""
    d = stats.direction(a, b, tol=tol)
    ma, mb = mean(a), mean(b)
    return dict(direction=d, ratio=stats.ratio(ma, mb) if d > 0 else stats.ratio(mb, ma) if d < 0 else None)


def _first_batch(out: Facts, e: pd.DataFrame, ws: list[int]) -> None:
    w = ws[-1]
    part = e[(e["workers"] == w) & (e["cache"] == "cold")]
    if part.empty:
        part = e[e["workers"] == w]
    if part.empty:
        return
    c = part["cache"].iloc[0]
    fb = (part["first_batch_s"] * 1e3).tolist()
    out.add(replace(measured("first_batch", fb, unit="ms", quantity="time", better="lower",
                             label=f"the time to the first batch with num_workers={w}"),
                    setting=dict(workers=w, cache=c)))
    out.add(Fact("first_batch.share", 100 * float(part["first_batch_share"].mean()), "%",
                 "the share of an epoch before the first batch", "share", "lower", len(part),
                 setting=dict(workers=w, cache=c)))
    w0 = e[(e["workers"] == ws[0]) & (e["cache"] == c)]["first_batch_s"] * 1e3
    if ws[0] != w and len(w0):
        out.add(measured("first_batch.fewest", w0.tolist(), unit="ms", quantity="time", better="lower",
                         label=f"the time to the first batch with num_workers={ws[0]}", setting=dict(workers=ws[0])))
        out.add(compare("first_batch.vs_fewest", out["first_batch"], out["first_batch.fewest"]))


def _main_at(e: pd.DataFrame, w: int) -> tuple[pd.DataFrame, dict, dict]:
    """The epochs at ``w`` workers (cold ones where there are any), with the main process's busy and waiting-for-CPU
    shares per layout."""
    part = e[(e["workers"] == w) & (e["cache"] == "cold")]
    if part.empty:
        part = e[e["workers"] == w]
    return (part, {k: values_of(part, "main_busy", kind=k) for k in KINDS},
            {k: values_of(part, "main_waiting_for_cpu", kind=k) for k in KINDS})


def _main_process(out: Facts, e: pd.DataFrame, ws: list[int]) -> None:
    w = ws[-1]
    if w == 0:
        return
    part, busy, waiting = _main_at(e, w)
    busy = {k: v for k, v in busy.items() if v}
    if not busy:
        return
    demand = {k: sum(v) / len(v) + (sum(waiting[k]) / len(waiting[k]) if waiting.get(k) else 0.0)
              for k, v in busy.items()}
    for k, d in demand.items():
        out.add(Fact(f"main_process.{k}", 100 * d, "%", f"the main process wanting a CPU, {LABELS[k]}", "share",
                     None, len(busy[k]), setting=dict(workers=w, kind=k)))
    key = "shard" if "shard" in demand else min(demand, key=demand.get)
    out.add(replace(out[f"main_process.{key}"], key="main_process",
                    setting=dict(workers=w, bound=[k for k in demand if demand[k] >= MAIN_BOUND_SHARE],
                                 cache=str(part["cache"].iloc[0]))))


def _one_worker(out: Facts, res) -> None:
    tr = res.tables["transfer"] if "transfer" in res.tables else pd.DataFrame()
    if tr.empty:
        return
    tc = transfer_cost(tr)
    tc = tc[tc["payload"] == "bytes"]
    if tc.empty:
        return
    bs = int(res.parameters["batch_size"]) if "batch_size" in res.parameters else int(tc["batch_size"].iloc[0])
    row = tc.iloc[(tc["batch_size"] - bs).abs().argsort().iloc[0]]
    n = int(row["n"])
    out.add(Fact("one_worker", float(row["extra_ms_per_batch"]), "ms",
                 f"the extra time per batch of {int(row['batch_size'])} with one worker against none", "time",
                 "lower", n, (float(row["extra_min"]), float(row["extra_max"])) if n >= MIN_RUNS_FOR_RANGE else None,
                 dict(batch_size=int(row["batch_size"]),
                      direction=1 if row["extra_min"] > 0 else -1 if row["extra_max"] < 0 else 0)))
    out.add(Fact("one_worker.w1", float(row["w1_ms_per_batch"]), "ms", "one worker, per batch", "time", "lower", n),
            Fact("one_worker.w0", float(row["w0_ms_per_batch"]), "ms", "no worker, per batch", "time", "lower", n))


def _best(e: pd.DataFrame, kind: str, cache: str, ws: list[int]):
    """The fewest workers whose steady MB/s for ``kind`` is level with the fastest count's (within the runs'
    spread, so a CPU is not spent on noise), with its runs; None when not measured."""
    runs = {w: values_of(e, "steady_MBps", cache=cache, workers=w, kind=kind) for w in ws}
    runs = {w: v for w, v in runs.items() if v}
    if 0 not in runs:
        return None
    top = max(runs, key=lambda w: sum(runs[w]) / len(runs[w]))
    best = min(w for w, v in runs.items() if stats.direction(v, runs[top]) >= 0)
    return best, runs


def _advice(out: Facts, res, e, ws, cache, word, n, size) -> None:
    workload = (f"a DataLoader over {n:,} synthetic {size_label(size)} samples, one file each "
                "(per-file reads only: no decoding, no model)")
    small = _best(e, "small_files", cache, ws)
    if small is None:
        return
    w, runs = small
    none = _runs("small_files.none", runs[0], unit="MB/s", label=f"{LABELS['small_files']}, num_workers=0, {word}")
    best = _runs("small_files.best", runs[w], unit="MB/s", label=f"{LABELS['small_files']}, num_workers={w}, {word}",
                 setting=dict(workers=w))
    out.add(none, best)
    bs = int(res.parameters["batch_size"]) if "batch_size" in res.parameters else int(e["batch_size"].iloc[0])
    if w > 0:
        out.add(compare("workers_gain", best, none))
    snip = "loader = DataLoader(dataset, batch_size={bs}, shuffle=True, num_workers={k})"
    q = Question("small_files.num_workers", "How many DataLoader workers for small files here?", "num_workers", 0,
                 "num_workers=0", "PyTorch's DataLoader default", workload, swept=True)
    cands = [Candidate(k, {0: none, w: best}.get(k) or _runs(f"small_files.w{k}", runs[k], unit="MB/s",
                       label=f"{LABELS['small_files']}, num_workers={k}, {word}", setting=dict(workers=k)),
                       snippet=snip.format(bs=bs, k=k)) for k in sorted(runs)]
    out.advise(decide(q, cands, out))
    shard = _best(e, "shard_in_order", cache, ws)
    if shard is None:
        return
    sw, sruns = shard
    sbest = _runs("shard_in_order.best", sruns[sw], unit="MB/s",
                  label=f"{LABELS['shard_in_order']}, num_workers={sw}, {word}", setting=dict(workers=sw))
    out.add(sbest)
    q = Question("small_files.layout", "One file per sample, or shards read in order?", "layout", FILES,
                 "one file per sample", "an ImageFolder-style layout", workload)
    out.advise(decide(q, [Candidate(FILES, best, call=FILES, at=f"num_workers={w}"),
                          Candidate(SHARD, sbest, call=SHARD,
                                    at=f"num_workers={sw}")], out))


# --------------------------------------------------------------------------- the notes beside the evidence
#: Cold within this (relative) of warm at the same worker count counts as "as fast as warm".
COLD_WARM_TOL = 0.10
#: An average request this much smaller (relative) than with no workers counts as "smaller".
REQUEST_SHRINK = 0.25


def _rate(out: Facts, e: pd.DataFrame, kind: str, w: int, c: str, cold: str) -> Fact | None:
    """The steady MB/s of ``kind`` at ``w`` workers in cache state ``c`` under its usual key
    (``<cache>.w<w>.<kind>``), added to ``out`` (the same fact :func:`analyse` adds where it does)."""
    key = f"{c}.w{w}.{kind}"
    if key in out:
        return out[key]
    vals = values_of(e, "steady_MBps", cache=c, workers=w, kind=kind)
    if not vals:
        return None
    f = _runs(key, vals, unit="MB/s", label=f"{LABELS[kind]}, num_workers={w}, {cold if c == 'cold' else c}",
              setting=dict(cache=c, workers=w, kind=kind))
    out.add(f)
    return f


def _notes(out: Facts, res, e: pd.DataFrame, ws: list[int], cold: str) -> None:
    """The facts the page's notes word: what workers bought, cold against warm, the in-order shard's
    slowdown and its cause, the first batch per cache state, and the wide spreads."""
    caches = list(dict.fromkeys(e["cache"]))
    out.data["is_reference"] = bool(("is_reference_run" in res.parameters and res.parameters["is_reference_run"])
                                    or str(res.run_id).startswith("reference"))
    # what the most workers (4 where measured) bought over none
    if 0 in ws and len(ws) >= 2:
        w = 4 if 4 in ws else ws[-1]
        c = "cold" if "cold" in caches else caches[0]
        keys = []
        for k in KINDS:
            a, b = _rate(out, e, k, w, c, cold), _rate(out, e, k, 0, c, cold)
            if a is not None and b is not None:
                out.add(compare(f"gain.w{w}.{k}", a, b))
                keys.append(f"gain.w{w}.{k}")
        out.data["workers_gain"] = dict(workers=w, cache=c, keys=keys)
    # warm against cold, at the fewest and the most workers
    if set(caches) == {"cold", "warm"}:
        keys = []
        for w in sorted({ws[0], ws[-1]}):
            for k in KINDS:
                h, c = _rate(out, e, k, w, "warm", cold), _rate(out, e, k, w, "cold", cold)
                if h is not None and c is not None:
                    out.add(compare(f"cold_vs_warm.w{w}.{k}", h, c))
                    keys.append(f"cold_vs_warm.w{w}.{k}")
        if keys:
            ratios = [out.number(k) for k in keys if out.number(k) is not None]
            hi = max(ratios) if ratios else None
            out.add(Fact("cold_vs_warm.scale", None if hi is None else
                         "order" if hi >= 10 else "less" if hi >= 2 else "little",
                         label="how much the cache state changed throughput at most", quantity="choice",
                         better=None, n=len(ratios)))
            lo_key = min(keys, key=lambda k: out.number(k) or float("inf"))
            hi_key = max(keys, key=lambda k: out.number(k) or 0.0)
            out.add(replace(out[lo_key], key="cold_vs_warm.least"), replace(out[hi_key], key="cold_vs_warm.most"))
            sh, sf = _rate(out, e, "shard_in_order", ws[0], "warm", cold), _rate(out, e, "small_files", ws[0], "warm",
                                                                              cold)
            if sh is not None and sf is not None:
                from datajourney.chapters.common import NEAR_ONE

                g = compare("warm_layout_gap", sh, sf)
                near = (stats.direction(values_of(e, "steady_MBps", cache="warm", workers=ws[0], kind="shard_in_order"),
                                      values_of(e, "steady_MBps", cache="warm", workers=ws[0], kind="small_files"))
                        == 0 or 1 / NEAR_ONE <= g.number <= NEAR_ONE)
                out.add(g, Fact("warm_layout_gap.verdict", "collapses" if near else "stays",
                                label="the warm gap against the near 1x of the source", quantity="choice",
                                better=None))
        out.data["cold_vs_warm"] = keys
    _in_order(out, e, ws, cold)
    _startup(out, e, ws, cold)
    out.data["spread"] = _spread(e, cold)


def _in_order(out: Facts, e: pd.DataFrame, ws: list[int], cold: str) -> None:
    """The in-order shard read cold with workers against without, and the evidence on why it slowed:
    cold against warm at the most workers, and the device's request size."""
    if "cold" not in set(e["cache"]) or 0 not in ws or len(ws) < 2:
        return
    none = _rate(out, e, "shard_in_order", 0, "cold", cold)
    if none is None:
        return
    runs0 = values_of(e, "steady_MBps", cache="cold", workers=0, kind="shard_in_order")
    per, slower = [], []
    for w in ws[1:]:
        f = _rate(out, e, "shard_in_order", w, "cold", cold)
        if f is None:
            continue
        per.append(f.key)
        if stats.direction(values_of(e, "steady_MBps", cache="cold", workers=w, kind="shard_in_order"), runs0) < 0:
            slower.append(w)
            out.add(compare(f"in_order.slowdown.w{w}", f, none))
    if not slower:
        return
    out.add(Fact("in_order.slower", len(slower), "", "worker counts at which the in-order shard ran slower cold",
                 "count", None, setting=dict(workers=slower, every=len(slower) == len(per), rates=per,
                                             none=none.key)))
    w = ws[-1]
    c, h = _rate(out, e, "shard_in_order", w, "cold", cold), _rate(out, e, "shard_in_order", w, "warm", cold)
    if c is not None and h is not None:
        d = stats.direction(values_of(e, "steady_MBps", cache="cold", workers=w, kind="shard_in_order"),
                          values_of(e, "steady_MBps", cache="warm", workers=w, kind="shard_in_order"),
                          tol=COLD_WARM_TOL)
        cw = compare("in_order.cold_vs_warm", c, h)
        out.add(replace(cw, level=d == 0, setting=dict(workers=w, direction=d)))
    for wk in (0, w):
        part = e[(e["cache"] == "cold") & (e["kind"] == "shard_in_order") & (e["workers"] == wk)]
        if "dev_request_bytes" not in e or part["dev_request_bytes"].dropna().empty:
            continue
        kib = (part["dev_request_bytes"].dropna() / 1024).tolist()
        out.add(measured(f"in_order.request.w{wk}", kib, unit="KiB", quantity="amount", better=None,
                         label=f"the device's average request, num_workers={wk}", setting=dict(workers=wk)))
        mr = part["dev_merge_ratio"].dropna().tolist() if "dev_merge_ratio" in part else []
        if mr:
            out.add(measured(f"in_order.merges.w{wk}", mr, unit="", quantity="amount", better=None,
                             label=f"merges per request, num_workers={wk}", setting=dict(workers=wk)))
    if "in_order.request.w0" in out and f"in_order.request.w{w}" in out:
        k0, kw = out.number("in_order.request.w0"), out.number(f"in_order.request.w{w}")
        out.add(compare("in_order.request", out[f"in_order.request.w{w}"], out["in_order.request.w0"]),
                Fact("in_order.request.shrank", "yes" if kw < (1 - REQUEST_SHRINK) * k0 else "no",
                     label="whether the device's requests shrank with workers", quantity="choice", better=None))


def _startup(out: Facts, e: pd.DataFrame, ws: list[int], cold: str) -> None:
    """The first batch's share of an epoch at the most workers, per cache state: mean and largest."""
    w = ws[-1]
    keys = []
    for c in dict.fromkeys(e["cache"]):
        part = e[(e["workers"] == w) & (e["cache"] == c)]
        if part.empty:
            continue
        word = cold if c == "cold" else c
        sh = part["first_batch_share"].tolist()
        out.add(Fact(f"startup.{c}", 100 * sum(sh) / len(sh), "%", f"{word}, num_workers={w}", "share", "lower",
                     len(sh), setting=dict(workers=w, cache=c)),
                Fact(f"startup.{c}.max", 100 * max(sh), "%", f"{word}, num_workers={w}, the largest", "share",
                     "lower", len(sh), setting=dict(workers=w, cache=c)))
        keys.append(c)
    out.data["startup"] = dict(workers=w, caches=keys)


def _spread(e: pd.DataFrame, cold: str) -> list[dict]:
    """Every (cache, workers, layout) whose steady MB/s spread by more than findings.HIGH_SPREAD over its
    epochs (as printed, above the rule): its label, lowest, highest, runs and coefficient of variation."""
    out = []
    for (c, w, k), g in e.groupby(["cache", "workers", "kind"], sort=False):
        v = g["steady_MBps"].dropna().tolist()
        cv = stats.cv(v)
        if cv > stats.HIGH_SPREAD and round(100 * cv) > round(100 * stats.HIGH_SPREAD):
            out.append(dict(label=f"{LABELS[k]}, {cold if c == 'cold' else c}", workers=int(w), low=min(v),
                            high=max(v), n=len(v), cv=cv))
    return out


# --------------------------------------------------------------------------- reading a result
def transfer_cost(tr: pd.DataFrame) -> pd.DataFrame:
    """Per (payload, batch size): ms per batch with 0 and 1 worker and the difference, paired by
    run (mean, min, max), per batch and per sample; and the main process's CPU per batch at W=1."""
    rows = []
    for (payload, bs), g in tr.groupby(["payload", "batch_size"], sort=True):
        w0 = g[g["workers"] == 0].set_index("run")["ms_per_batch"]
        w1 = g[g["workers"] == 1].set_index("run")["ms_per_batch"]
        diff = (w1 - w0).dropna()
        if diff.empty:
            continue
        main1 = g[g["workers"] == 1]["main_cpu_ms_per_batch"].mean()
        main0 = g[g["workers"] == 0]["main_cpu_ms_per_batch"].mean()
        worker1 = g[g["workers"] == 1]["workers_cpu_ms_per_batch"].mean() if "workers_cpu_ms_per_batch" in g else None
        rows.append(dict(payload=payload, batch_size=int(bs), w0_ms_per_batch=w0.mean(), w1_ms_per_batch=w1.mean(),
                         extra_ms_per_batch=diff.mean(), extra_min=diff.min(), extra_max=diff.max(),
                         extra_us_per_sample=diff.mean() / bs * 1e3, extra_us_per_sample_min=diff.min() / bs * 1e3,
                         extra_us_per_sample_max=diff.max() / bs * 1e3, main_cpu_ms_per_batch_w1=main1,
                         main_cpu_ms_per_batch_w0=main0, worker_cpu_ms_per_batch_w1=worker1, n=len(diff)))
    return pd.DataFrame(rows)


def hand_over_fit(tc: pd.DataFrame, payload: str = "bytes") -> tuple[float, float] | None:
    """Least-squares line through the extra ms per batch over batch sizes: (ms per batch, µs per
    sample). None with fewer than two batch sizes."""
    import numpy as np

    part = tc[tc["payload"] == payload]
    if len(part) < 2:
        return None
    slope, intercept = np.polyfit(part["batch_size"].astype(float), part["extra_ms_per_batch"].astype(float), 1)
    return float(intercept), float(slope * 1e3)


def speedups(epochs: pd.DataFrame, value: str = "steady_MBps") -> pd.DataFrame:
    """Mean ``value`` (default: steady-state MB/s) of each kind per (cache, workers), and each
    shard's advantage over the small files."""
    if value not in epochs:
        value = "MBps"
    m = epochs.groupby(["cache", "workers", "kind"])[value].mean().unstack("kind").reset_index()
    m.columns.name = None
    for kind in ("shard", "shard_in_order"):
        if kind in m and "small_files" in m:
            m[f"{kind} ÷ small files"] = m[kind] / m["small_files"]
    return m


# --------------------------------------------------------------------------- the notes' numbers
#: Rates within this (relative) of a layout's best rate with workers belong to its plateau.
PLATEAU_TOL = 0.10


def _nearest(tc: pd.DataFrame, batch_size: int, payload: str = "bytes") -> pd.Series | None:
    """The hand-over check's row of ``payload`` at the batch size nearest ``batch_size`` (None when none)."""
    tc = tc[tc["payload"] == payload] if not tc.empty else tc
    if tc.empty:
        return None
    return tc.iloc[(tc["batch_size"] - batch_size).abs().argsort().iloc[0]]


def _transfer(res) -> pd.DataFrame:
    tr = res.tables.get("transfer")
    return pd.DataFrame() if tr is None or tr.empty else transfer_cost(tr)


def _fit(tc: pd.DataFrame, payload: str) -> dict | None:
    fit = hand_over_fit(tc, payload)
    return None if fit is None else dict(batch_ms=fit[0], sample_us=fit[1], per_sample=fit[1] > 0)


def _hand_over(out: Facts, res) -> None:
    """One worker against none (the hand-over check, warm, shard in order) at the run's batch size: the
    extra time per batch over the paired runs and its direction; where it costs, how the extra scales with
    the batch size (a straight-line fit), the CPU of the worker against the main process alone, and bytes
    against lengths. ``facts.data["hand_over"]``: None when the check did not run."""
    tc = _transfer(res)
    bs = int(res.parameters["batch_size"]) if "batch_size" in (res.parameters or {}) else 0
    row = _nearest(tc, bs)
    out.data["hand_over"] = None
    if row is None:
        return
    lo, hi = float(row["extra_min"]), float(row["extra_max"])
    ho = dict(batch_size=int(row["batch_size"]), w0_ms=float(row["w0_ms_per_batch"]),
              w1_ms=float(row["w1_ms_per_batch"]), extra_ms=float(row["extra_ms_per_batch"]), extra_min=lo,
              extra_max=hi, runs=int(row["n"]), direction=1 if lo > 0 else -1 if hi < 0 else 0,
              receive_ms=_plain(row["main_cpu_ms_per_batch_w1"]), costs=bool(lo > 0))
    out.data["hand_over"] = ho
    if not ho["costs"]:
        return
    by = tc[tc["payload"] == "bytes"].sort_values("batch_size")
    if len(by) >= 2:
        a, b = by.iloc[0], by.iloc[-1]
        ho["per_sample"] = dict(first_batch=int(a["batch_size"]), first_us=float(a["extra_us_per_sample"]),
                                last_batch=int(b["batch_size"]), last_us=float(b["extra_us_per_sample"]),
                                direction=stats.direction(a["extra_us_per_sample"], b["extra_us_per_sample"], tol=0.25))
        if len(by) >= 3 and (fit := _fit(tc, "bytes")) is not None:
            ho["fit"] = dict(fit, sizes=len(by), length=_fit(tc, "length"))
    wk, m0 = _plain(row.get("worker_cpu_ms_per_batch_w1")), _plain(row.get("main_cpu_ms_per_batch_w0"))
    length = _nearest(tc, ho["batch_size"], "length")
    if wk is not None and m0 is not None:
        cpu = dict(worker_ms=wk, main_alone_ms=m0, more=stats.direction(wk, m0, tol=0.10) > 0)
        if length is not None and pd.notna(length.get("worker_cpu_ms_per_batch_w1")):
            cpu.update(length_worker_ms=float(length["worker_cpu_ms_per_batch_w1"]),
                       length_main_alone_ms=_plain(length["main_cpu_ms_per_batch_w0"]))
        ho["cpu"] = cpu
    if length is not None and int(length["batch_size"]) == ho["batch_size"]:
        # the two payloads' extra per batch, as ranges over the paired runs: overlapping ranges are level
        d = stats.direction([lo, hi], [length["extra_min"], length["extra_max"]], tol=0.10)
        ho["length"] = dict(extra_ms=float(length["extra_ms_per_batch"]), extra_min=float(length["extra_min"]),
                            extra_max=float(length["extra_max"]), runs=int(length["n"]), direction=d)


def _one_vs_none(out: Facts, e: pd.DataFrame) -> None:
    """One worker against none in the sweep, per cache state and layout (steady MB/s)."""
    if not {0, 1} <= set(e["workers"]):
        out.data["one_vs_none"] = None
        return
    rows = []
    for cache in dict.fromkeys(e["cache"]):
        for k in KINDS:
            a = values_of(e, "steady_MBps", cache=cache, workers=1, kind=k)
            b = values_of(e, "steady_MBps", cache=cache, workers=0, kind=k)
            if a and b:
                rows.append(dict(kind=k, cache=str(cache), one=mean(a), none=mean(b), vs=_versus(a, b)))
    out.data["one_vs_none"] = rows


def _worker_rates(e: pd.DataFrame) -> pd.DataFrame:
    """Mean batches/s and main-thread CPU per batch (ms) per (cache, workers, kind), workers only."""
    w = e[e["workers"] > 0].assign(cpu_ms=lambda x: x["main_busy"] / x["batches_per_s"] * 1e3)
    return w.groupby(["cache", "workers", "kind"], as_index=False).agg(
        rate=("batches_per_s", "mean"), busy=("main_busy", "mean"), cpu_ms=("cpu_ms", "mean"))


def _receive(ho: dict | None) -> dict | None:
    """The hand-over check's main-process CPU per received batch and the batches/s that alone allows."""
    cost = (ho or {}).get("receive_ms")
    return dict(cost_ms=cost, rate=1e3 / cost) if cost and cost > 0 else None


def _main_bound(out: Facts, e: pd.DataFrame) -> None:
    """The main process at the most workers (cold where measured): its share of the steady state on a CPU
    and waiting for one, per layout, which layouts it bounds, and the hand-over check's receive rate against
    the fastest rate the sweep measured with workers. ``facts.data["main_bound"]``: None without workers."""
    out.data["main_bound"] = None
    w = int(max(e["workers"]))
    if w == 0:
        return
    part, busy, waiting = _main_at(e, w)
    bps = {k: values_of(part, "batches_per_s", kind=k) for k in KINDS}
    busy = {k: v for k, v in busy.items() if v}
    if not busy:
        return
    # wanting the CPU = on it, or runnable and waiting for it (a machine with too few cores)
    demand = {k: mean(v) + (mean(waiting[k]) if waiting.get(k) else 0.0) for k, v in busy.items()}
    bound = [k for k in busy if demand[k] >= MAIN_BOUND_SHARE]
    mb = dict(workers=w, cache=str(part["cache"].iloc[0]), low=100 * min(demand.values()),
              high=100 * max(demand.values()), bound=bound, free=[k for k in busy if k not in bound],
              kinds=[dict(kind=k, busy=mean(busy[k]), waiting=mean(waiting[k]) if waiting.get(k) else None,
                          batches_per_s=mean(bps[k])) for k in busy],
              waited=any(bool(waiting.get(k)) and mean(waiting[k]) >= 0.1 for k in busy), shuffled=None)
    if not mb["free"]:
        sh, sf = values_of(part, "steady_MBps", kind="shard"), values_of(part, "steady_MBps", kind="small_files")
        if sh and sf:
            mb["shuffled"] = _versus(sh, sf)
    rr = _receive(out.data.get("hand_over"))
    mb["ceiling"] = None
    if rr is not None:
        wr = _worker_rates(e)
        top = None
        if not wr.empty:
            t = wr.loc[wr["rate"].idxmax()]
            top = dict(kind=str(t["kind"]), cache=str(t["cache"]), workers=int(t["workers"]), rate=float(t["rate"]),
                       cpu_ms=float(t["cpu_ms"]), below=bool(t["rate"] < rr["rate"]))
        mb["ceiling"] = dict(rr, top=top)
    out.data["main_bound"] = mb


def _plateau(out: Facts, res, e: pd.DataFrame) -> None:
    """Where more workers stopped raising the rate (warm if measured, else cold): the plateau's rates, the
    main thread's and the workers' CPU there, how it stands against the hand-over check's receive rate; and
    the hand-over modes check, which decides what sets it. ``facts.data["plateau"]`` (None when the sweep has
    fewer than three worker counts) and ``facts.data["handover_modes"]``."""
    _handover_modes(out, res)
    out.data["plateau"] = None
    wr = _worker_rates(e)
    if wr.empty or wr["workers"].nunique() < 3:
        return
    cache = "warm" if "warm" in set(wr["cache"]) else "cold"
    plateau, rising = [], []
    for k, g in wr[wr["cache"] == cache].groupby("kind", sort=False):
        g = g.sort_values("workers")
        top = g.loc[g["rate"].idxmax()]
        if top["workers"] == g["workers"].max():
            rising.append(str(k))
            continue
        plateau.append(g[(g["workers"] >= top["workers"]) & (g["rate"] >= (1 - PLATEAU_TOL) * top["rate"])])
    pl = dict(cache=cache, rising=rising, found=bool(plateau))
    out.data["plateau"] = pl
    if not plateau:
        return
    p = pd.concat(plateau)
    lo, hi = float(p["rate"].min()), float(p["rate"].max())
    pl.update(low=lo, high=hi, workers=sorted(int(w) for w in set(p["workers"])),
              kinds=[str(k) for k in dict.fromkeys(p["kind"])], busy_low=float(p["busy"].min()),
              busy_high=float(p["busy"].max()), cpu_low=float(p["cpu_ms"].min()), cpu_high=float(p["cpu_ms"].max()),
              main="spare" if p["busy"].max() < MAIN_BOUND_SHARE else
              "bound" if p["busy"].min() >= MAIN_BOUND_SHARE else None, receive=None, worker_share=None)
    rr = _receive(out.data.get("hand_over"))
    if rr is not None:
        pl["receive"] = dict(rr, relation="above" if hi > (1 + PLATEAU_TOL) * rr["rate"] else
                             "within" if lo >= (1 - PLATEAU_TOL) * rr["rate"] else "below")
    if "workers_cpu_s" in e:
        rows = e[(e["cache"] == cache) & e["workers"].isin(set(p["workers"]))]
        # each worker's share of the epoch on a CPU: its CPU seconds after start-up ÷ (workers × epoch)
        share = (rows["workers_cpu_s"] - rows["workers_startup_cpu_s"]) / (rows["workers"] * rows["seconds"])
        if not share.empty:
            pl["worker_share"] = dict(low=float(share.min()), high=float(share.max()),
                                      busy=bool(share.max() >= MAIN_BOUND_SHARE))


def _exercise(out: Facts, res, e: pd.DataFrame) -> None:
    """The numbers of the page's exercise on paper: the batches/s the hand-over check's receive cost allows
    (``bound``), that bound in MB/s, and the sweep's best rate with workers (warm where measured) as a share of it."""
    rr = _receive(out.data.get("hand_over"))
    wr = _worker_rates(e)
    ex = dict(receive=rr is not None, workers=not wr.empty)
    out.data["exercise"] = ex
    if rr is None or wr.empty:
        return
    cache = "warm" if "warm" in set(wr["cache"]) else "cold"
    top = wr[wr["cache"] == cache].sort_values("rate").iloc[-1]
    params = res.parameters or {}
    b = int(params["batch_size"]) if "batch_size" in params else int(e["batch_size"].iloc[0])
    size = int(params["file_size"]) if "file_size" in params else out.data["sample_size"]
    ex.update(cost_ms=rr["cost_ms"], bound=rr["rate"], batch_size=b, file_size=size, kind=str(top["kind"]),
              cache=cache, workers_at=int(top["workers"]), rate=float(top["rate"]), mbps=rr["rate"] * b * size / 1e6,
              share=float(top["rate"]) / rr["rate"])


def _handover_modes(out: Facts, res) -> None:
    """The plateau check: warm, shard in order, one epoch per way of handing a batch over; each mode's
    batches/s against PyTorch's default (the file descriptor), and which explanation the data support:
    "file descriptor", "shared memory", "neither" (both alternatives slower), "unclear" (a mode level only by its
    runs' overlap with a mean further off than the tolerance) or "level"."""
    hm = res.tables.get("handover_modes")
    if hm is None:
        out.data["handover_modes"] = None
        return
    info = dict(ran=not hm.empty)
    out.data["handover_modes"] = info
    if hm.empty:
        return
    runs = {m: hm[hm["mode"] == m]["batches_per_s"].dropna().tolist() for m in dict.fromkeys(hm["mode"])}
    base = runs.get("file descriptor") or []
    info.update(workers=int(hm["workers"].iloc[0]), default=mean(base) if base else None)
    if not base:
        return
    others = {m: v for m, v in runs.items() if m != "file descriptor" and v}
    info["others"] = [dict(mode=str(m), rate=mean(v), low=min(v), high=max(v), vs=_versus(v, base, tol=PLATEAU_TOL))
                      for m, v in others.items()]
    info.update(default_low=min(base), default_high=max(base))
    faster = [m for m, v in others.items() if stats.direction(v, base, tol=PLATEAU_TOL) > 0]
    slower = [m for m, v in others.items() if stats.direction(v, base, tol=PLATEAU_TOL) < 0]
    # level only by the runs' overlap, with means further apart than the tolerance: the runs cannot tell
    wide = [m for m, v in others.items() if m not in faster + slower
            and abs(mean(v) / mean(base) - 1) > PLATEAU_TOL]
    info["faster"], info["wide"] = [str(m) for m in faster], [str(m) for m in wide]
    info["verdict"] = ("file descriptor" if "file name" in faster else "unclear" if "file name" in wide else
                       "shared memory" if faster else "neither" if slower and len(slower) == len(others) else
                       "unclear" if wide else "level")
