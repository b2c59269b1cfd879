"""Chapter 3's analysis: what a result of :mod:`.experiment` found, as facts (no prose).

The workload is the DataLoader over synthetic samples read one file each or from one shard (per-file
reads only: no decoding, no model), so its advice is labelled as that, never as a training recipe.
Keys other pages may read are listed in :data:`EXPORTS`.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from datajourney.chapters.c03_dataloader.params import KINDS, MAIN_BOUND_SHARE
from datajourney.chapters.common import FILES, MIN_RUNS_FOR_RANGE, SHARD, cold_verdict, guest_cold, table_of, values_of
from datajourney.core import findings as fnd
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Fact, Facts, compare, measured
from datajourney.core.findings import size_label

CHAPTER = "03_dataloader"
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
    """Every number chapter 3's opening and key results state, from ``res``'s tables."""
    out = Facts(CHAPTER, exports=EXPORTS)
    v = cold_verdict(res)
    cold = v.label
    out.add(Fact("cold_state", cold if v.state is not None else None, label="what a cold read reached",
                 quantity="choice", better=None, n=len(v.medians),
                 setting=dict(state=v.state, hypervisor=v.hypervisor, source=v.source, floor_us=v.floor_us,
                              medians=list(v.medians), share_below=v.share_below, label=cold)))
    out.data.update(cold_label=cold, guest_cold=guest_cold(res))
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
    _residency(out, e)
    _advice(out, res, e, ws, cache, word, n, size)
    _notes(out, res, e, ws, cold)
    return out


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


def _main_process(out: Facts, e: pd.DataFrame, ws: list[int]) -> None:
    w = ws[-1]
    if w == 0:
        return
    part = e[(e["workers"] == w) & (e["cache"] == "cold")]
    if part.empty:
        part = e[e["workers"] == w]
    busy = {k: values_of(part, "main_busy", kind=k) for k in KINDS}
    waiting = {k: values_of(part, "main_waiting_for_cpu", kind=k) for k in KINDS}
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


def _residency(out: Facts, e: pd.DataFrame) -> None:
    if "resident_at_start" not in e:
        return
    c, w = e[e["cache"] == "cold"], e[e["cache"] == "warm"]
    if len(c):
        out.add(Fact("residency.cold", 100 * float(c["resident_at_start"].max()), "%", quantity="share",
                     better="lower", n=len(c), label="the most of the data resident when a cold epoch started"))
    if len(w):
        out.add(Fact("residency.warm", 100 * float(w["resident_at_start"].min()), "%", quantity="share",
                     better="higher", n=len(w), label="the least of the data resident when a warm epoch started"))


def _best(e: pd.DataFrame, kind: str, cache: str, ws: list[int]):
    """The fewest workers whose steady MB/s for ``kind`` is level with the fastest count's (within the runs'
    spread, so a CPU is not spent on noise), with its runs; None when not measured."""
    runs = {w: values_of(e, "steady_MBps", cache=cache, workers=w, kind=kind) for w in ws}
    runs = {w: v for w, v in runs.items() if v}
    if 0 not in runs:
        return None
    top = max(runs, key=lambda w: sum(runs[w]) / len(runs[w]))
    best = min(w for w, v in runs.items() if fnd.direction(v, runs[top]) >= 0)
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
                 "num_workers=0", "PyTorch's DataLoader default", workload)
    cands = [Candidate(k, {0: none, w: best}.get(k) or _runs(f"small_files.w{k}", runs[k], unit="MB/s",
                       label=f"{LABELS['small_files']}, num_workers={k}, {word}", setting=dict(workers=k)),
                       snippet=snip.format(bs=bs, k=k)) for k in sorted(runs)]
    a = decide(q, cands, out)
    out.advise(replace(a, scope="edge" if a.verdict == "change" and a.value == max(ws) else "best") if a else None)
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
                near = (fnd.direction(values_of(e, "steady_MBps", cache="warm", workers=ws[0], kind="shard_in_order"),
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
        if fnd.direction(values_of(e, "steady_MBps", cache="cold", workers=w, kind="shard_in_order"), runs0) < 0:
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
        d = fnd.direction(values_of(e, "steady_MBps", cache="cold", workers=w, kind="shard_in_order"),
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
        cv = fnd.cv(v)
        if cv > fnd.HIGH_SPREAD and round(100 * cv) > round(100 * fnd.HIGH_SPREAD):
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
