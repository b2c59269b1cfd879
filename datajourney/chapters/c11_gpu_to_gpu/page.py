"""What chapter 11's page says about a result of :mod:`datajourney.chapters.c11_gpu_to_gpu.experiment`: key
findings, the published metrics, computed notes and display tables."""
from __future__ import annotations

import json

import pandas as pd

from datajourney.chapters.c11_gpu_to_gpu.experiment import (
    CHAPTER,
    PATH_LABELS,
    TOPO_LEGEND,
    bench_summary,
    link_kind,
    parse_topology,
    rung_label,
)
from datajourney.core import findings as fx
from datajourney.core.findings import Action, Finding, Opening, size_label
from datajourney.core.stats import mean

#: "Within" this share of the one-GPU throughput counts as scaling without loss (the issue's target).
SCALING_TARGET = 0.05
#: A compression scheme "recovers" the host path when it is at least this much faster than the baseline.
RECOVERY_TARGET = 1.5
#: The largest all-reduce the chapter's headline bandwidth is read at.
HEADLINE_SIZE = 1 << 30


# --------------------------------------------------------------------------- reading the result
def _rungs(res) -> pd.DataFrame:
    r = res.table("rungs")
    return r[r["status"] == "ok"] if len(r) else r


def _windows(res, job: str, rung: str) -> list[float]:
    w = res.table("windows")
    if w.empty:
        return []
    return list(w[(w["job"] == job) & (w["rung"] == rung)]["steps_per_s"])


def _row(res, job: str, rung: str):
    r = _rungs(res)
    r = r[(r["job"] == job) & (r["rung"] == rung)]
    return None if r.empty else r.iloc[0]


def _n(res) -> int:
    return int(res.metadata.get("world", 1))


def _device(res) -> str:
    return "GPU" if res.metadata.get("cuda") else "process"


def _devs(res, n: int) -> str:
    """'2 GPUs', '1 GPU', '2 processes'."""
    d = _device(res)
    return f"{n} {d}" + ("" if n == 1 else "es" if d == "process" else "s")


def _best(res, job: str, *, compressed: bool | None = None) -> tuple[str, list[float]] | None:
    """The fastest rung of a job (by mean steps/s), optionally only (un)compressed ones."""
    r = _rungs(res)
    r = r[(r["job"] == job) & r["ddp"]]
    if compressed is not None:
        r = r[(r["hook"] != "none") == compressed]
    if r.empty:
        return None
    top = r.sort_values("steps_per_s").iloc[-1]
    return str(top["rung"]), _windows(res, job, str(top["rung"]))


def _rate(v) -> str:
    m, rng = fx.num(mean(v), "steps/s"), fx.span(min(v), max(v))
    return m + (f" (windows {rng})" if len(v) > 1 and rng != fx.num(mean(v), with_unit=False) else "")


# --------------------------------------------------------------------------- published metrics
def key_metrics(res) -> dict:
    out = {}
    one, ddp1 = _windows(res, "one", "no_ddp"), _windows(res, "one", "ddp")
    if one:
        out["one GPU without DDP"] = (mean(one), None)
    if ddp1:
        out["DDP on one GPU"] = (mean(ddp1), None)
    base = _windows(res, "n", "ddp")
    if one and base:
        out["DDP on N GPUs, direct path: slowdown vs one GPU"] = (100 * (1 - mean(base) / mean(one)), None)
    host = _host_job(res)
    if host and one:
        hb = _windows(res, host, "ddp")
        if hb:
            out["DDP on N GPUs, host path: one GPU ÷ N GPUs"] = (mean(one) / mean(hb), None)
        r = _row(res, host, "ddp")
        share = _nccl_share(r)
        if share is not None:
            out["NCCL all-reduce share of the step, host path"] = (100 * share, None)
        bf = _windows(res, host, "bf16")
        if hb and bf:
            out["bf16 compression gain, host path"] = (100 * (mean(bf) / mean(hb) - 1), None)
        ps = _windows(res, host, "powersgd")
        if ps:
            out["PowerSGD, host path"] = (mean(ps), None)
    sg, bv = _windows(res, "n", "static_graph"), _windows(res, "n", "bucket_view")
    if sg and bv:
        out["gradient_as_bucket_view gain"] = (100 * (mean(bv) / mean(sg) - 1), None)
    return out


def _host_job(res) -> str | None:
    """The forced host path the published comparison uses: the slowest one-bucket run (the collapse)."""
    runs = {h: _windows(res, h, "ddp") for h in ("p2p_off", "p2p_shm_off")}
    runs = {h: w for h, w in runs.items() if w}
    return min(runs, key=lambda h: mean(runs[h])) if runs else None


#: A step whose GPU ran no kernel for more than this share of it was held up by the host.
IDLE_SHARE = 0.10
#: A profiled step whose GPU was busy this much longer than a timed step is flagged (the profiler slowed it).
PROFILE_SLOWER = 1.2


def _busy_ms(r) -> float:
    """GPU-busy time per profiled step: compute and NCCL kernels (their overlap counted once) and copies."""
    g = lambda k: float(r.get(k, 0.0) or 0.0)  # noqa: E731
    return g("prof_compute_ms") + g("prof_nccl_ms") - g("prof_overlap_ms") + g("prof_copy_ms")


def _nccl_share(r) -> float | None:
    """NCCL kernel time per profiled step ÷ the step (the timed step, or the profiled GPU-busy time
    where the profiled steps ran longer)."""
    if r is None or "prof_nccl_ms" not in r or pd.isna(r.get("prof_nccl_ms")):
        return None
    step = max(1e3 / r["steps_per_s"], _busy_ms(r))
    return float(r["prof_nccl_ms"]) / step


# --------------------------------------------------------------------------- findings
def finding_ddp_one(res) -> Finding:
    one, ddp1 = _windows(res, "one", "no_ddp"), _windows(res, "one", "ddp")
    dev = _device(res)
    mid, lo, hi = fx.ratio_interval(ddp1, one)
    d = fx.direction(ddp1, one, tol=0.02)
    word = fx.choose(d, f"faster ({fx.times(mid)})",
                     f"slower: {fx.pct(1 - mid)} of the throughput lost",
                     f"level ({fx.times(mid)}, within the spread of the windows)")
    return Finding("ddp_one_device",
                   f"**DDP on one {dev}** ran {_rate(ddp1)} against {_rate(one)} for the same model without DDP: "
                   f"{word}. With one {dev} there is nothing to exchange: what DDP adds is its bookkeeping and "
                   f"the copies of gradients into and out of its buckets.",
                   value=mid, unit="×", interval=(lo, hi), published="DDP on one GPU")


def finding_scaling(res) -> Finding:
    n, dev = _n(res), _device(res)
    one = _windows(res, "one", "no_ddp")
    base = _windows(res, "n", "ddp")
    best = _best(res, "n")
    name, bw = best
    mid, lo, hi = fx.ratio_interval(bw, one)
    loss = 1 - mid
    meets = loss <= SCALING_TARGET
    transports = _transport_text(res, "n")
    text = (f"**DDP on {_devs(res, n)}** ({transports}): the naive start (one bucket) ran {_rate(base)} per "
            f"{dev}, the best option ({rung_label(name)}) {_rate(bw)}, against {_rate(one)} on one {dev} without "
            f"DDP: each {dev} kept {fx.pct(mid)} of its single-{dev} throughput "
            + (f"(within the {fx.pct(SCALING_TARGET)} target)." if meets
               else f"(more than the {fx.pct(SCALING_TARGET)} target below it)."))
    return Finding("scaling_direct", text, value=100 * (1 - mid), unit="%", interval=(100 * (1 - hi), 100 * (1 - lo)),
                   published="DDP on N GPUs, direct path: slowdown vs one GPU")


def _transport_text(res, job: str) -> str:
    t = res.table("transports")
    if res.metadata.get("backend") != "nccl":
        return "gloo over the host's TCP loopback"
    t = t[t["job"] == job] if len(t) else t
    if t.empty:
        return "NCCL; its channel lines were not found in the log"
    kinds = t["via"].value_counts()
    return "NCCL via " + ", ".join(f"{v} ({c} channel connections)" for v, c in kinds.items())


def _host_jobs(res) -> list[str]:
    return [h for h in ("p2p_off", "p2p_shm_off") if _windows(res, h, "ddp")]


def finding_host_path(res) -> Finding | None:
    hosts = _host_jobs(res)
    if not hosts:
        return None
    one = _windows(res, "one", "no_ddp")
    direct = _windows(res, "n", "ddp")
    parts, worst = [], None
    for h in hosts:
        hb = _windows(res, h, "ddp")
        mid, lo, hi = fx.ratio_interval(one, hb)
        share = _nccl_share(_row(res, h, "ddp"))
        d = fx.direction(one, hb)
        verb = fx.choose(d, f"{fx.times(mid)} slower than one GPU", f"{fx.times(1 / mid)} faster than one GPU",
                         "level with one GPU")
        parts.append(f"{PATH_LABELS[h]} ({_transport_text(res, h)}): {_rate(hb)}, {verb}"
                     + (f", NCCL kernels {fx.pct(share)} of the step" if share is not None else ""))
        if worst is None or mid > worst[0]:
            worst = (mid, lo, hi)
    return Finding("host_path_collapse",
                   "**Forced off the direct path** (an emulation of a host whose GPUs talk through host memory or "
                   "the network stack, not such a host), DDP with one bucket ran: " + "; ".join(parts)
                   + f". The direct path ran {_rate(direct)}.",
                   value=worst[0], unit="×", interval=worst[1:], published="DDP on N GPUs, host path: one GPU ÷ N GPUs")


def _best_recovery(res) -> tuple[float, float, float, str, str] | None:
    """The compressed rung of a forced host path that ran fastest against that path's one-bucket baseline:
    (ratio, low, high, path job, rung); None without host paths."""
    best = None
    for job in _host_jobs(res):
        base = _windows(res, job, "ddp")
        r = _rungs(res)
        for rung in r[(r["job"] == job) & (r["hook"] != "none")]["rung"]:
            w = _windows(res, job, rung)
            if w and base:
                mid, lo, hi = fx.ratio_interval(w, base)
                if best is None or mid > best[0]:
                    best = (mid, lo, hi, job, str(rung))
    return best


def finding_compression(res) -> Finding:
    """Compression and more buckets on each forced host path, against the direct path."""
    parts = []
    best = _best_recovery(res)  # (ratio, lo, hi, path, rung)
    for job in [*_host_jobs(res), "n"]:
        base = _windows(res, job, "ddp")
        r = _rungs(res)
        r = r[(r["job"] == job) & (r["hook"] != "none")]
        bits = []
        for _, row in r.iterrows():
            w = _windows(res, job, row["rung"])
            if not w or not base:
                continue
            bits.append(f"{rung_label(row['rung']).removeprefix('+ ')} {fx.compare(w, base, tol=0.03)} the baseline")
        if bits:
            where = PATH_LABELS[job] if job != "n" else ("the direct path" if res.metadata.get("backend") == "nccl"
                                                         else PATH_LABELS["gloo"])
            parts.append(f"{where}: "
                         + "; ".join(bits))
    skipped = _rungs_all(res)
    skipped = skipped[skipped["status"] == "skipped"] if len(skipped) else skipped
    skip_text = "".join(
        f" {rung_label(s['rung']).removeprefix('+ ')} was skipped: {s['reason']}."
        for _, s in skipped.iterrows()
        if "budget" not in str(s["reason"])
    )[:400]
    value = interval = None
    verdict = ""
    if best is not None:
        value, interval = best[0], best[1:3]
        verdict = (f" The best recovery on a forced host path was {rung_label(best[4]).removeprefix('+ ')} on "
                   f"{PATH_LABELS[best[3]]}, {fx.times(best[0])} the baseline, "
                   + ("meeting" if best[0] >= RECOVERY_TARGET else "short of")
                   + f" the {fx.times(RECOVERY_TARGET)} target.")
    else:
        b = _best(res, "n", compressed=True)
        base = _windows(res, "n", "ddp")
        if b and base:
            value, lo, hi = fx.ratio_interval(b[1], base)
            interval = (lo, hi)
    return Finding("compression" if best is not None else "compression_one_path",
                   "**Gradient compression and more buckets** against each path's one-bucket "
                   "baseline — " + " — ".join(parts) + "." + verdict + skip_text,
                   value=value, unit="×", interval=interval)


def _rungs_all(res) -> pd.DataFrame:
    return res.table("rungs")


def finding_bandwidth(res) -> Finding | None:
    if "bench" not in res.tables:
        return None
    s = bench_summary(res.table("bench"))
    s = s[s["op"] == "all_reduce"]
    if s.empty:
        return None
    top = int(s["size"].max())
    at = s[s["size"] == top]
    direct_path = "direct" if res.metadata.get("backend") == "nccl" else "gloo"
    d = at[at["path"] == direct_path]
    if d.empty:
        return None
    d = d.iloc[0]
    others = "; ".join(f"{PATH_LABELS[r['path']]} {fx.num(r['busbw_GBps'], 'GB/s')}" for _, r in at.iterrows()
                       if r["path"] != direct_path)
    pred = _prediction(res)
    ptxt = ""
    if pred is not None and len(pred) and pred["profiled_nccl_ms"].notna().any():
        p = pred[pred["profiled_nccl_ms"].notna()]
        ratio = p["profiled_nccl_ms"] / p["predicted_ms"]
        one = ratio[p["buckets"] <= 2]
        many = ratio[p["buckets"] > 2]
        ptxt = (" Gradient bytes ÷ the measured all-reduce bandwidth predict each uncompressed rung's all-reduce "
                "time per step; the profiled NCCL kernel time was "
                + (f"{fx.span(one.min(), one.max(), '×')} the prediction with one bucket ({len(one)} runs)"
                   if len(one) else "")
                + (" and " if len(one) and len(many) else "")
                + (f"{fx.span(many.min(), many.max(), '×')} with several buckets ({len(many)} runs), where NCCL "
                   "kernel time also counts kernels waiting for their peer" if len(many) else "") + ".")
    return Finding("allreduce_busbw",
                   f"**All-reduce bus bandwidth** at {size_label(top)} on {_devs(res, _n(res))}: "
                   f"{fx.num(d['busbw_GBps'], 'GB/s')} ({fx.span(d['busbw_min'], d['busbw_max'])} over "
                   f"{int(d['repeats'])} repeats) on {PATH_LABELS[direct_path]}"
                   + (f"; {others}" if others else "") + "." + ptxt,
                   value=float(d["busbw_GBps"]), unit="GB/s", interval=(float(d["busbw_min"]), float(d["busbw_max"])))


def findings(res) -> list[Finding]:
    out = [finding_ddp_one(res)]
    if _windows(res, "n", "ddp"):
        out.append(finding_scaling(res))
    h = finding_host_path(res)
    if h is not None:
        out.append(h)
    if _windows(res, "n", "ddp"):
        out.append(finding_compression(res))
    b = finding_bandwidth(res)
    if b is not None:
        out.append(b)
    c = finding_scaling_curve(res)
    if c is not None:
        out.append(c)
    if len(out) < 3:
        out.append(Finding("single_device", f"Only one {_device(res)} was available: the N-{_device(res)} jobs "
                           "did not run."))
    return out[:6]


def finding_scaling_curve(res) -> Finding | None:
    """Per-GPU throughput and bus bandwidth over the process counts this run measured (three or more)."""
    t = scaling_table(res)
    best = t[t["series"] == "best option"] if len(t) else t
    if best.empty or best["processes"].nunique() < 2:
        return None
    worst = best.sort_values("of_one").iloc[0]
    return Finding("scaling_curve", "**Scaling with the number of GPUs:** "
                   + _scale_sentence(t, scaling_bench(res)) + ".",
                   value=100 * float(worst["of_one"]), unit="%",
                   interval=(100 * float(worst["of_one_min"]), 100 * float(worst["of_one_max"])))


# --------------------------------------------------------------------------- notes and tables
def no_gpu_text(res, ref) -> str:
    if res.metadata.get("cuda"):
        return ""
    t = ("This machine has no CUDA device: the jobs ran on the CPU with the gloo backend and a small ViT, so "
         "the DDP code paths, hooks and collectives ran, but there are no NCCL transports, no GPU kernels and no "
         "forced host paths here. The processes share this machine's cores, so their steps/s say how the code "
         "path behaves, not how GPUs would.")
    if ref is not None:
        t += (f" Below, next to this run's tables, the reference run ({ref.metadata.get('world')} × "
              f"{ref.metadata.get('start', {}).get('device', 'GPU')}) is shown, labelled.")
    return t


def ladder_table(res) -> pd.DataFrame:
    r = _rungs_all(res)
    rows = []
    for _, x in r.iterrows():
        rows.append({"path": PATH_LABELS.get(x["path"], x["path"]), "processes": int(x["world"]),
                     "rung": rung_label(x["rung"]), "steps/s (mean)": x.get("steps_per_s"),
                     "min": x.get("sps_min"), "max": x.get("sps_max"),
                     "forward ms": x.get("forward_ms"), "backward ms (incl. waiting for the reduction)":
                     x.get("backward_ms"), "optimizer ms": x.get("optimizer_ms"),
                     "status": x["status"] if x["status"] == "ok" else f"{x['status']}: {x.get('reason')}"})
    return pd.DataFrame(rows)


def profile_table(res) -> pd.DataFrame:
    r = _rungs(res)
    if "prof_nccl_ms" not in r:
        return pd.DataFrame()
    r = r[r["prof_nccl_ms"].notna()]
    return pd.DataFrame({"path": [PATH_LABELS.get(p, p) for p in r["path"]], "rung": [rung_label(x) for x in r["rung"]],
                         "processes": r["world"], "timed step ms": 1e3 / r["steps_per_s"],
                         "GPU busy per profiled step ms": [_busy_ms(x) for _, x in r.iterrows()],
                         "NCCL kernels ms": r["prof_nccl_ms"], "of which beside compute ms": r["prof_overlap_ms"],
                         "exposed NCCL ms": r["prof_exposed_nccl_ms"],
                         "NCCL share of step %": [100 * (_nccl_share(x) or 0) for _, x in r.iterrows()],
                         "NCCL kernels/step": r["prof_nccl_kernels"]})


def profile_note(res) -> str:
    r = _rungs(res)
    if "prof_nccl_ms" not in r or not r["prof_nccl_ms"].notna().any():
        errs = r["profile_error"].dropna().unique() if "profile_error" in r else []
        return "No per-kernel profile in this run" + (f" ({errs[0]})." if len(errs) else ".")
    p = r[r["prof_nccl_ms"].notna() & (r["world"] > 1)]
    if p.empty:
        return ""
    one = p[p["bucket_cap_mb"] == p["bucket_cap_mb"].max()]
    many = p[p["bucket_cap_mb"] == p["bucket_cap_mb"].min()]
    a = (one["prof_overlap_ms"] / one["prof_nccl_ms"]).median()
    b = (many["prof_overlap_ms"] / many["prof_nccl_ms"]).median()
    slow = [x for _, x in p.iterrows() if _busy_ms(x) > PROFILE_SLOWER * 1e3 / x["steps_per_s"]]
    slow_text = "".join(
        f" The profiled steps of {rung_label(x['rung']).removeprefix('+ ')} "
        f"({PATH_LABELS.get(x['path'], x['path'])}) kept the GPU busy "
        f"{fx.num(_busy_ms(x), 'ms')} per step against a timed step of {fx.num(1e3 / x['steps_per_s'], 'ms')}, "
        f"with compute kernels at {fx.num(x['prof_compute_ms'], 'ms')}: those profiled steps ran slower than the timed "
        "ones, so that row describes them, not the timed steps; its share is taken of the profiled busy time."
        for x in slow
    )
    idle = [x for _, x in p.iterrows() if _busy_ms(x) < (1 - IDLE_SHARE) * 1e3 / x["steps_per_s"]]
    idle_text = "".join(
        f" With {rung_label(x['rung']).removeprefix('+ ')} ({PATH_LABELS.get(x['path'], x['path'])}) the GPU ran "
        f"kernels and copies for {fx.num(_busy_ms(x), 'ms')} of a {fx.num(1e3 / x['steps_per_s'], 'ms')} step: for "
        f"{fx.num(1e3 / x['steps_per_s'] - _busy_ms(x), 'ms')} per step it ran nothing and waited for the host to "
        "issue work."
        for x in idle)
    copies = ""
    sg, bv = _row(res, "n", "static_graph"), _row(res, "n", "bucket_view")
    if sg is not None and bv is not None and "prof_copy_ms" in sg and not pd.isna(sg["prof_copy_ms"]):
        copies = (f" Device-to-device copies took {fx.num(sg['prof_copy_ms'], 'ms')} per step with static_graph "
                  f"alone and {fx.num(bv['prof_copy_ms'], 'ms')} with gradient_as_bucket_view: "
                  + fx.choose(fx.direction(sg["prof_copy_ms"], bv["prof_copy_ms"], tol=0.2),
                              "the copies of gradients into and out of the buckets are what the option removes.",
                              "the option did not remove copies here.", "about the same."))
    return copies.lstrip() + " " + (f"With the largest bucket (bucket_cap_mb={int(one['bucket_cap_mb'].iloc[0])}) "
            f"{fx.pct(a)} of the NCCL kernel time ran beside a compute kernel (median over its rungs); with the "
            f"smallest (bucket_cap_mb={int(many['bucket_cap_mb'].iloc[0])}) {fx.pct(b)}. NCCL kernel time includes "
            "the time a kernel waits for its peer, so it is an upper bound on transfer time." + slow_text + idle_text)


def bucket_sweep(res) -> pd.DataFrame:
    r = _rungs(res)
    r = r[(r["job"] == "n") & (r["hook"] == "none") & r["static_graph"] & r["bucket_view"]]
    return r.sort_values("bucket_cap_mb")[["bucket_cap_mb", "steps_per_s", "sps_min", "sps_max", "rung"]]


def sweep_text(res) -> str:
    s = bucket_sweep(res)
    if len(s) < 2:
        return ""
    best = s.sort_values("steps_per_s").iloc[-1]
    worst = s.sort_values("steps_per_s").iloc[0]
    bw, ww = _windows(res, "n", best["rung"]), _windows(res, "n", worst["rung"])
    return (f"Over the sweep, bucket_cap_mb={int(best['bucket_cap_mb'])} was fastest at {_rate(bw)} and "
            f"bucket_cap_mb={int(worst['bucket_cap_mb'])} slowest at {_rate(ww)}; the fastest ran "
            f"{fx.compare(bw, ww, tol=0.02)} the slowest.")


def transports_table(res) -> pd.DataFrame:
    t = res.table("transports")
    if t.empty:
        return t
    g = t.groupby(["path", "via"]).size().reset_index(name="channel connections")
    g["path"] = [PATH_LABELS.get(p, p) for p in g["path"]]
    return g


def topology(res) -> pd.DataFrame:
    """The topology parsed (again, with this code) from the recorded ``nvidia-smi topo -m`` text."""
    text = res.metadata.get("topology_text")
    return parse_topology(text) if text else res.table("topology")


def topology_text(res) -> str:
    t = topology(res)
    if t.empty:
        return "No `nvidia-smi` here: no GPU topology to read."
    pairs = t[(t["a"] != t["b"]) & t["a"].str.startswith("GPU") & t["b"].str.startswith("GPU")]
    kinds = sorted({link_kind(x) for x in pairs["link"]})
    return ("GPU pairs are linked by " + ", ".join(f"`{k}` ({TOPO_LEGEND.get(k, 'see nvidia-smi legend')})"
                                                    for k in kinds) + ".") if kinds else "Only one GPU."


def bench_long(res) -> pd.DataFrame:
    if "bench" not in res.tables:
        return pd.DataFrame()
    s = bench_summary(res.table("bench"))
    s["series"] = [f"{o} · {PATH_LABELS.get(p, p)}" for o, p in zip(s["op"], s["path"])]
    return s


def _prediction(res) -> pd.DataFrame | None:
    """The prediction, computed again with this code from the result's rungs and benchmark."""
    if "bench" not in res.tables:
        return None
    from datajourney.chapters.c11_gpu_to_gpu.experiment import predict_comm

    return predict_comm(res.table("rungs"), res.table("bench"), _n(res))


def prediction_table(res) -> pd.DataFrame:
    p = _prediction(res)
    if p is None or p.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "path": [PATH_LABELS.get(x, x) for x in p["path"]],
            "rung": [rung_label(x) for x in p["rung"]],
            "all-reduces per step": p["buckets"],
            "counted from": p["buckets_from"],
            "gradient MB": p["grad_bytes"] / 1e6,
            "predicted all-reduce ms": p["predicted_ms"],
            "profiled NCCL ms": p["profiled_nccl_ms"],
            "exposed NCCL ms": p["exposed_nccl_ms"],
        }
    )


def powersgd_state(res) -> str:
    r = _rungs_all(res)
    r = r[(r["hook"] == "powersgd") & r["hook_state"].notna()] if len(r) else r
    if r.empty:
        return ""
    st = json.loads(r.iloc[0]["hook_state"])
    return ("PowerSGD ran with " + ", ".join(f"`{k}={v}`" for k, v in st.items() if k != "hook") + ".")


def jobs_table(res) -> pd.DataFrame:
    rows = [{"job": j["job"], "path": PATH_LABELS.get(j["path"], j["path"]), "processes": j["nproc"],
             "extra environment": " ".join(f"{k}={v}" for k, v in (j.get("env") or {}).items()) or "—",
             "status": j["status"], "seconds": j.get("wall_s"), "NCCL": j.get("nccl_version") or "—"}
            for j in res.metadata.get("jobs", [])]
    return pd.DataFrame(rows)


def failed_jobs_text(res) -> str:
    bad = [j for j in res.metadata.get("jobs", []) if j["status"] != "ok"]
    return "\n\n".join(f"Job `{j['job']}` {j['status']}." + (f" Its log ends:\n\n```\n{j['error_tail']}\n```"
                                                            if j.get("error_tail") else "") for j in bad)


def ladder_summary(res) -> pd.DataFrame:
    """mean/std/min/max/n of steps/s per rung and path (for :func:`plotting.bars_facets`)."""
    w = res.table("windows")
    if w.empty:
        return pd.DataFrame()
    g = w.groupby(["job", "path", "world", "rung"], sort=False)["steps_per_s"]
    s = g.agg(["mean", "std", "min", "max", "size"]).reset_index().rename(columns={"size": "n"})
    s["label"] = [f"{_devs(res, wd)} · {PATH_LABELS.get(p, p)}" for wd, p in zip(s["world"], s["path"])]
    s["step"] = [rung_label(x) for x in s["rung"]]
    return s


def spread_notes(res) -> str:
    """A computed comment for every rung whose windows spread by more than findings.HIGH_SPREAD."""
    w = res.table("windows")
    if w.empty:
        return ""
    notes = []
    for (_job, path, world, rung), g in w.groupby(["job", "path", "world", "rung"], sort=False):
        n = fx.spread_note(f"{rung_label(rung)} ({_devs(res, world)}, {PATH_LABELS.get(path, path)})",
                           list(g["steps_per_s"]), "steps/s")
        if n:
            notes.append(n)
    if not notes:
        return ""
    cause = ("" if res.metadata.get("cuda") else " Here the processes share few CPU cores with whatever else runs, "
             "which is the likely cause; a GPU host's windows are far tighter (see the reference run).")
    return "\n".join(f"* {n}" for n in notes) + cause


def phases(res) -> pd.DataFrame:
    """Per-step phases of every timed rung (ms): forward, backward split into compute and the NCCL
    time that overlapped nothing (from the profile, at most the backward phase), optimizer."""
    r = _rungs(res)
    if r.empty or "forward_ms" not in r:
        return pd.DataFrame()
    exposed = r["prof_exposed_nccl_ms"].fillna(0.0) if "prof_exposed_nccl_ms" in r else 0.0
    exposed = pd.concat([pd.Series(exposed, index=r.index), r["backward_ms"]], axis=1).min(axis=1)
    return pd.DataFrame({"path": [f"{_devs(res, w)} · {PATH_LABELS.get(p, p)}" for w, p in zip(r["world"], r["path"])],
                         "rung": [rung_label(x) for x in r["rung"]], "forward": r["forward_ms"],
                         "backward": r["backward_ms"] - exposed, "exposed": exposed, "optimizer": r["optimizer_ms"],
                         "step": 1e3 / r["steps_per_s"]})


def scope_text(res, ref) -> str:
    """Which scale this run (and the reference run) measured."""
    def one(r, who):
        st = r.metadata.get("start", {}) or {}
        return (
            f"{who} ran the N-{_device(r)} jobs on {_devs(r, _n(r))} ({st.get('device', 'unknown device')}, "
            f"{r.metadata.get('backend')}), model {r.metadata.get('model')}, batch {r.parameters.get('batch_size')} "
            f"per {_device(r)}."
        )
    t = one(res, "This run")
    if ref is not None and ref is not res:
        t += " " + one(ref, "The reference run")
    counts = sorted({_n(r) for _, r in scaling_sources(res, ref)})
    t += (" The code takes any number of GPUs (parameter `gpus`); the runs shown here measured "
          + ", ".join(map(str, counts)) + " GPUs of one host"
          + (", so the published figures from eight GPUs have no counterpart at the same scale here."
             if max(counts) < 8 else "."))
    return t


# --------------------------------------------------------------------------- scaling with N
#: The process counts the scaling curve is drawn for (the published results are from eight GPUs).
SCALE_POINTS = (1, 2, 4, 8)


def _opt(res, name: str) -> pd.DataFrame:
    """A table the result may lack (runs without scaling jobs, results older than them)."""
    return res.table(name) if name in res.tables else pd.DataFrame()


def _scale_windows(res, world: int, path: str, rung: str) -> list[float]:
    """Steps/s windows of ``rung`` on ``world`` processes and ``path``, from whichever job ran it."""
    n = _n(res)
    if world == 1:
        return _windows(res, "one", rung) if path in ("direct", "gloo") else []
    if world == n:
        job = "n" if path in ("direct", "gloo") else path
        return _windows(res, job, rung)
    w = _opt(res, "scale_windows")
    if w.empty:
        return []
    w = w[(w["world"] == world) & (w["path"] == path) & (w["rung"] == rung)]
    return list(w["steps_per_s"])


def _scale_rows(res) -> pd.DataFrame:
    """Every ok rung of every job with its process count: one, N, the host paths at N and the scaling jobs."""
    parts = [t for t in (_rungs(res), _opt(res, "scale_rungs")) if len(t)]
    if not parts:
        return pd.DataFrame()
    r = pd.concat(parts, ignore_index=True)
    return r[r["status"] == "ok"]


def scaling_table(res) -> pd.DataFrame:
    """Per process count and path: the one-bucket DDP baseline and the best option of the rungs run
    at every count, as steps/s per GPU and as a share of one GPU without DDP; NCCL's share of the step."""
    one = _windows(res, "one", "no_ddp")
    r = _scale_rows(res)
    if not one or r.empty:
        return pd.DataFrame()
    direct = "direct" if res.metadata.get("backend") == "nccl" else "gloo"
    rows = [{"processes": 1, "path": direct, "series": "one GPU, no DDP", "rung": "no_ddp", "w": one}]
    worlds = sorted(int(k) for k in r.loc[r["world"] >= 2, "world"].unique())
    # "best option" only among the rungs that ran at every process count of that path, like for like
    for path in (direct, *HOST_PATHS_ORDER):
        have = {k: set(r[(r["world"] == k) & (r["path"] == path) & r["ddp"]]["rung"]) for k in worlds}
        have = {k: v for k, v in have.items() if v}
        if not have:
            continue
        common = set.intersection(*have.values())
        for k in have:
            base = _scale_windows(res, k, path, "ddp")
            if base:
                rows.append({"processes": k, "path": path, "series": "DDP, one bucket", "rung": "ddp", "w": base})
            if path != direct or not common:
                continue
            best = max(common, key=lambda g: mean(_scale_windows(res, k, path, g) or [0.0]))
            rows.append({"processes": k, "path": path, "series": "best option", "rung": best,
                         "w": _scale_windows(res, k, path, best)})
    out = []
    for x in rows:
        w = x.pop("w")
        mid, lo, hi = fx.ratio_interval(w, one)
        src = r[(r["world"] == x["processes"]) & (r["path"] == x["path"]) & (r["rung"] == x["rung"])]
        share = _nccl_share(src.iloc[0]) if len(src) else None
        out.append({**x, "mean": mean(w), "min": min(w), "max": max(w), "n": len(w), "of_one": mid,
                    "of_one_min": lo, "of_one_max": hi, "nccl_share": share})
    return pd.DataFrame(out)


HOST_PATHS_ORDER = ("p2p_off", "p2p_shm_off")


def scaling_bench(res, size: int = HEADLINE_SIZE) -> pd.DataFrame:
    """All-reduce bus bandwidth at ``size`` (or the largest size measured) per process count and path."""
    parts = [t for t in (_opt(res, "bench"), _opt(res, "scale_bench")) if len(t)]
    if not parts:
        return pd.DataFrame()
    b = pd.concat(parts, ignore_index=True)
    b = b[(b["status"] == "ok") & (b["op"] == "all_reduce")]
    if b.empty:
        return pd.DataFrame()
    at = size if (b["size"] == size).any() else int(b["size"].max())
    b = b[b["size"] == at]
    g = b.groupby(["world", "path"])["busbw_GBps"]
    s = g.agg(["median", "min", "max", "size"]).reset_index()
    return s.rename(columns={"world": "processes", "median": "mean", "size": "n"}).assign(bytes=at)


def scaling_sources(res, ref) -> list[tuple[str, object]]:
    """The runs the scaling curve is drawn from: this run, the reference run and the committed
    reference runs of the same host kind with more GPUs (each labelled by its GPU count)."""
    from datajourney.core import results

    out, seen = [], set()
    for who, r in [("reference run" if ref is res else "this run", res), ("reference run", ref),
                   *[("further reference", x) for x in results.extra_references(CHAPTER)]]:
        if r is None or r.run_id in seen or not r.metadata.get("cuda") and who != "this run":
            continue
        seen.add(r.run_id)
        out.append((f"{who}, {_devs(r, _n(r))}", r))
    return out


def scaling_long(sources) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The steps/s and bandwidth tables of every source, with a ``run`` column."""
    steps = [scaling_table(r).assign(run=label) for label, r in sources]
    bw = [scaling_bench(r).assign(run=label) for label, r in sources]
    steps = [t for t in steps if len(t) > 1]
    bw = [t for t in bw if len(t)]
    steps = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
    bw = pd.concat(bw, ignore_index=True) if bw else pd.DataFrame()
    if len(steps):  # chart columns: the share of one GPU in percent, one line per series and path
        steps = steps.assign(line=[s if p in ("direct", "gloo") else f"{s} · {PATH_LABELS[p]}"
                                   for s, p in zip(steps["series"], steps["path"])],
                             pct=100 * steps["of_one"], pct_min=100 * steps["of_one_min"],
                             pct_max=100 * steps["of_one_max"])
    if len(bw):
        bw = bw.assign(line=bw["path"].map(PATH_LABELS))
    return steps, bw


def _scale_sentence(t: pd.DataFrame, b: pd.DataFrame) -> str:
    """One run's curve: the share of one device each kept at every count, and the bus bandwidth."""
    dev = "process" if (t["path"] == "gloo").any() else "GPU"
    best = t[t["series"] == "best option"].sort_values("processes")
    text = (f"each {dev} kept " + ", ".join(f"{fx.pct(x['of_one'])} at {int(x['processes'])} "
                                          f"({rung_label(x['rung']).removeprefix('+ ')})" for _, x in best.iterrows())
            + f" of one {dev}'s throughput without DDP")
    if len(b):
        d = b[b["path"].isin(["direct", "gloo"])].sort_values("processes")
        h = b[b["path"] == "p2p_off"].sort_values("processes")
        at = lambda df: ", ".join(f"{fx.num(x['mean'], 'GB/s')} at {int(x['processes'])}"  # noqa: E731
                                  for _, x in df.iterrows())
        text += (f"; all-reduce bus bandwidth at {size_label(int(b['bytes'].iloc[0]))}: {at(d)}"
                 + (f" ({PATH_LABELS['p2p_off']}: {at(h)})" if len(h) else ""))
    return text


def scaling_text(sources) -> str:
    """Which process counts were measured, per-GPU throughput kept at each, and the missing counts."""
    steps, bw = scaling_long(sources)
    if steps.empty:
        return "No run shown here measured more than one process count."
    parts = [f"{run}: " + _scale_sentence(t, bw[bw["run"] == run] if len(bw) else bw)
             for run, t in steps.groupby("run", sort=False)]
    missing = [k for k in SCALE_POINTS if k not in set(steps["processes"].astype(int))]
    return ("**Scaling with the number of GPUs.** " + "; ".join(parts) + "."
            + (f" Not measured by any run shown here: {', '.join(map(str, missing))} GPUs." if missing else ""))


def scaling_display(steps: pd.DataFrame) -> pd.DataFrame:
    """The scaling table as shown: one row per run, process count, path and series."""
    return pd.DataFrame({"run": steps["run"], "GPUs": steps["processes"].astype(int),
                         "path": steps["path"].map(PATH_LABELS), "series": steps["series"],
                         "rung": steps["rung"].map(rung_label), "steps/s per GPU": steps["mean"],
                         "% of one GPU": steps["pct"],
                         "NCCL share of the step": [None if v is None or pd.isna(v) else fx.pct(v)
                                                    for v in steps["nccl_share"]]})


# --------------------------------------------------------------------------- the opening
#: Two rungs whose windows' means differ by less than this (relative) are level: windows of one host are tight.
RUNG_TOL = 0.02
#: The environment that forces each host path, as a reader would set it.
PATH_ENV = {"p2p_off": "`NCCL_P2P_DISABLE=1`", "p2p_shm_off": "`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1`"}


def ddp_snippet(res, job: str, rung: str) -> str:
    """The DDP call (and communication hook) of ``rung`` as this run made it, read from its row."""
    r = _row(res, job, rung)
    args = [f"bucket_cap_mb={int(r['bucket_cap_mb'])}"]
    args += [f"{k}=True" for k, on in (("static_graph", r["static_graph"]),
                                       ("gradient_as_bucket_view", r["bucket_view"])) if on]
    lines = ["from torch.nn.parallel import DistributedDataParallel as DDP", "",
             "model = DDP(model, device_ids=[local_rank], " + ", ".join(args) + ")"
             if res.metadata.get("cuda") else "model = DDP(model, " + ", ".join(args) + ")"]
    if r["hook"] in ("bf16", "fp16"):
        lines[0:0] = ["from torch.distributed.algorithms.ddp_comm_hooks import default_hooks"]
        lines.append(f"model.register_comm_hook(None, default_hooks.{r['hook']}_compress_hook)")
    elif r["hook"] == "powersgd":
        st = json.loads(r["hook_state"]) if isinstance(r.get("hook_state"), str) else {}
        lines[0:0] = ["from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook"]
        lines += ["state = powerSGD_hook.PowerSGDState(",
                  f"    process_group=None, matrix_approximation_rank={st.get('matrix_approximation_rank', 1)},",
                  f"    start_powerSGD_iter={st.get('start_powerSGD_iter', 2)}, use_error_feedback=True, "
                  "warm_start=True)",
                  "model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)"]
    return "\n".join(lines)


def _short(rung: str) -> str:
    """'gradient_as_bucket_view with bucket_cap_mb=25': a rung's name without the ladder's '+'."""
    return rung_label(rung).removeprefix("+ ").replace(", bucket_cap_mb=", " with bucket_cap_mb=")


def _open_scaling(res) -> Finding:
    """The N-device job's best option against one device without DDP (the long finding's key and value)."""
    n, one = _n(res), _windows(res, "one", "no_ddp")
    name, bw = _best(res, "n")
    mid, lo, hi = fx.ratio_interval(bw, one)
    verdict = fx.choose(fx.direction(bw, one, tol=RUNG_TOL), f"**{fx.pct(mid - 1)} faster than**",
                        f"**{fx.pct(1 - mid)} slower than**", "**level with**")
    if res.metadata.get("cuda"):
        text = (f"On {_devs(res, n)} over NCCL, each GPU ran {verdict} one GPU without DDP, with DDP's best option "
                f"({_short(name)}).")
    else:
        text = (f"No GPU here: on the CPU, {n} gloo processes training `{res.metadata.get('model')}` each ran "
                f"{verdict} one process without DDP; GPU numbers on this page are the reference host's.")
    return Finding("scaling_direct", text, value=100 * (1 - mid), unit="%", interval=(100 * (1 - hi), 100 * (1 - lo)),
                   published="DDP on N GPUs, direct path: slowdown vs one GPU")


def _open_host_path(res) -> Finding | None:
    """The slowest forced host path against one GPU (the long finding's key and value)."""
    hosts = _host_jobs(res)
    one = _windows(res, "one", "no_ddp")
    if not hosts or not one:
        return None
    job = max(hosts, key=lambda h: fx.ratio(mean(one), mean(_windows(res, h, "ddp"))))
    hb = _windows(res, job, "ddp")
    mid, lo, hi = fx.ratio_interval(one, hb)
    verdict = fx.choose(fx.direction(one, hb, tol=RUNG_TOL), f"**{fx.times(mid)} slower than**",
                        f"**{fx.times(1 / mid)} faster than**", "**level with**")
    return Finding("host_path_collapse", f"Forced off the direct path with {PATH_ENV.get(job, job)}, DDP with one "
                   f"bucket ran {verdict} one GPU without DDP ({fx.num(mean(hb), 'steps/s')} per GPU).",
                   value=mid, unit="×", interval=(lo, hi), published="DDP on N GPUs, host path: one GPU ÷ N GPUs")


def _open_recovery(res) -> Finding | None:
    """The best compressed rung on a forced host path against its one-bucket baseline (the long finding's key
    and value)."""
    best = _best_recovery(res)
    if best is None:
        return None
    mid, lo, hi, job, rung = best
    w, base = _windows(res, job, rung), _windows(res, job, "ddp")
    verdict = fx.choose(fx.direction(w, base, tol=RUNG_TOL), f"**{fx.times(mid)} faster than**",
                        f"**{fx.times(1 / mid)} slower than**", "**level with**")
    return Finding("compression", f"With {PATH_ENV.get(job, job)}, {_short(rung)} ran {verdict} one bucket "
                   f"({fx.num(mean(w), 'steps/s')} against {fx.num(mean(base), 'steps/s')}).",
                   value=mid, unit="×", interval=(lo, hi))


def _open_ddp_one(res) -> Finding | None:
    one, ddp1 = _windows(res, "one", "no_ddp"), _windows(res, "one", "ddp")
    if not one or not ddp1:
        return None
    dev = _device(res)
    mid, lo, hi = fx.ratio_interval(ddp1, one)
    verdict = fx.choose(fx.direction(ddp1, one, tol=RUNG_TOL), f"**{fx.times(mid)} faster than**",
                        f"**{fx.times(1 / mid)} slower than**", f"**level with** ({fx.times(mid)})")
    # no published figure beside it: the published "DDP on one GPU" is a rate (steps/s), this is a ratio
    return Finding("ddp_one_device", f"DDP on one {dev} ran {verdict} the same model without DDP.",
                   value=mid, unit="×", interval=(lo, hi))


def best_option(res) -> dict | None:
    """The fastest DDP rung of the N-device job against DDP with one bucket: its name, windows, direction
    (+1 faster beyond :data:`RUNG_TOL` and the windows' spread) and ratio with range; None without the job."""
    base = _windows(res, "n", "ddp")
    r = _rungs(res)
    r = r[(r["job"] == "n") & r["ddp"] & (r["rung"] != "ddp")]
    if not base or r.empty:
        return None
    rung = str(r.sort_values("steps_per_s").iloc[-1]["rung"])
    w = _windows(res, "n", rung)
    return dict(rung=rung, windows=w, base=base, d=fx.direction(w, base, tol=RUNG_TOL),
                ratio=fx.ratio_interval(w, base), others=[str(x) for x in r["rung"]])


def _open_best_option(res) -> Finding | None:
    b = best_option(res)
    if b is None:
        return None
    mid, lo, hi = b["ratio"]
    verdict = fx.choose(b["d"], f"**{fx.times(mid)} faster than**", f"**{fx.times(1 / mid)} slower than**",
                        "**level with**")
    where = "over NCCL" if res.metadata.get("backend") == "nccl" else "on gloo"
    return Finding("best_option", f"The fastest DDP option {where}, {_short(b['rung'])}, ran {verdict} DDP with one "
                   f"bucket ({fx.num(mean(b['windows']), 'steps/s')} against {fx.num(mean(b['base']), 'steps/s')}).",
                   value=mid, unit="×", interval=(lo, hi))


RUN_ON_GPUS = ("To rank the DDP options and NCCL's paths between GPUs, run this chapter on a host with two or more "
               "GPUs: `python -m datajourney run 11`.")


def _option_action(res) -> Action | None:
    b = best_option(res)
    if b is None:
        return None
    cuda = res.metadata.get("cuda")
    where = f"on {_devs(res, _n(res))} over NCCL" if cuda else "on gloo here"
    if b["d"] > 0:
        return Action(f"Use {_short(b['rung'])} in DDP: {where} it ran {fx.times(b['ratio'][0])} the throughput "
                      f"of one bucket ({fx.num(mean(b['windows']), 'steps/s')} against "
                      f"{fx.num(mean(b['base']), 'steps/s')}).", ddp_snippet(res, "n", b["rung"]))
    job = "GPU" if cuda else "CPU (gloo)"
    return Action(f"Keep plain DDP for a {job} job like this one: no option measured "
                  f"({', '.join(_short(x) for x in b['others'])}) beat one bucket beyond the windows' spread {where}.")


def _recovery_action(res) -> Action | None:
    best = _best_recovery(res)
    if best is None:
        return None
    mid, _, _, job, rung = best
    d = fx.direction(_windows(res, job, rung), _windows(res, job, "ddp"), tol=RUNG_TOL)
    if d <= 0:
        return Action(f"Where GPUs talk through host memory or the network ({PATH_ENV.get(job, job)} here), no "
                      "compression measured beat one bucket: move the job to GPUs that share a direct link.")
    return Action(f"Where GPUs talk through host memory or the network (`nvidia-smi topo -m` shows no NV# or PIX "
                  f"link between them), register {_short(rung)}: with {PATH_ENV.get(job, job)} it ran "
                  f"{fx.times(mid)} the throughput of one bucket here.", ddp_snippet(res, job, rung))


def opening(res) -> Opening:
    """What chapter 11 opens with. On GPUs: how much per-GPU throughput DDP kept, the collapse forced off the
    direct path and what compression recovered there; then the DDP options to start with, chosen from this
    run. Without a GPU: what gloo on the CPU measured, said as such, the option that won there (if any),
    and where to run for GPU numbers."""
    if not _windows(res, "n", "ddp"):
        out = [f for f in (_open_ddp_one(res),) if f is not None]
        return Opening(out, [Action(RUN_ON_GPUS)])
    if res.metadata.get("cuda"):
        out = [_open_scaling(res), _open_host_path(res), _open_recovery(res)]
        actions = [_option_action(res), _recovery_action(res)]
    else:
        out = [_open_scaling(res), _open_ddp_one(res), _open_best_option(res)]
        actions = [_option_action(res), Action(RUN_ON_GPUS)]
    return Opening([f for f in out if f is not None][:3], [a for a in actions if a is not None][:3])
