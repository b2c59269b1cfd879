"""Chapter 10's page: findings, notes and tables computed from a run's result."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from datajourney.chapters.c10_mmap_vs_read.experiment import CONSTANT_TOLERANCE
from datajourney.core.findings import (
    Action,
    Finding,
    Opening,
    choose,
    compare,
    direction,
    num,
    pct,
    ratio_interval,
    span,
    spread_note,
    times,
)
from datajourney.core.results import Result

MODE_NAMES = {"mmap": "mmap", "read": "read()"}


def _grid(res: Result) -> pd.DataFrame:
    s = res.table("sweep")
    return s[s["part"] == "grid"].copy()


def _largest(df: pd.DataFrame) -> tuple[int, int]:
    seq = int(df["seq"].max())
    return seq, int(df[df["seq"] == seq]["batch"].max())


def _cache_for_headline(df: pd.DataFrame) -> str:
    return "cold" if "cold" in set(df["cache"]) else "warm"


def has_posix(res: Result) -> bool:
    return "posix" in res.tables and len(res.table("posix")) > 0


def posix_counts(res: Result) -> pd.DataFrame:
    """POSIX events of each grid point's data phase (W=0), by mode."""
    p = res.table("posix")
    p = p[p["part"] == "posix"]
    return p[["mode", "seq", "batch", "samples", "posix_events", "posix_reads", "posix_opens", "posix_bin_reads",
              "posix_read_bytes", "posix_mean_read_bytes", "posix_read_s", "pieces"]].copy()


# ---------------------------------------------------------------------------- key results
def finding_posix(res: Result) -> Finding:
    if not has_posix(res):
        why = res.metadata.get("posix_why_not") or "the tracer did not run"
        return Finding("posix_events", f"The POSIX view did not run on this machine ({why}); the kernel and "
                       "application views below stand in for it.")
    c = posix_counts(res)
    mm, rd = c[c["mode"] == "mmap"], c[c["mode"] == "read"]
    seq, batch = _largest(c)
    m_big = float(mm[(mm["seq"] == seq) & (mm["batch"] == batch)]["posix_events"].iloc[0])
    r_big = float(rd[(rd["seq"] == seq) & (rd["batch"] == batch)]["posix_events"].iloc[0])
    r_small = rd.sort_values(["seq", "batch"]).iloc[0]
    lo, hi, mean = mm["posix_events"].min(), mm["posix_events"].max(), mm["posix_events"].mean()
    constant = mean > 0 and (hi - lo) <= CONSTANT_TOLERANCE * mean
    grows = np.corrcoef(rd["samples"] * rd["seq"], rd["posix_events"])[0, 1] > 0.9 if len(rd) > 2 else \
        r_big > float(r_small["posix_events"])
    m_text = ((f"exactly {num(lo)}" if lo == hi else f"between {num(lo)} and {num(hi)}")
              + " POSIX events per sweep point under mmap — "
              + ("constant within ±" + pct(CONSTANT_TOLERANCE) if constant else
                 ("none at all" if hi == 0 else "not constant")))
    trend = choose(1 if grows else -1, "grows with the tokens read", "does not follow the tokens read", "")
    r_text = (
        f"under read() the count {trend}, "
        f"from {num(float(r_small['posix_events']))} (sequence {int(r_small['seq'])}, batch "
        f"{int(r_small['batch'])}) to {num(r_big)} (sequence {seq}, batch {batch})"
    )
    ratio = r_big / m_big if m_big else None
    tail = (f"; at the largest point read() shows {times(ratio)} the events of mmap" if ratio else
            "; at the largest point mmap shows none, so the ratio is unbounded")
    tail += "; the ratio counts calls (read() makes them for every document piece, mmap does not), not time."
    return Finding("posix_events", f"The tracer saw {m_text}; {r_text}{tail}", value=ratio, unit="×",
                   published="POSIX events read() ÷ mmap, largest point",
                   values=dict(mmap_min=lo, mmap_max=hi, read_big=r_big, read_small=float(r_small["posix_events"])))


def _kernel_row(res: Result, mode: str) -> pd.Series:
    g = _grid(res)
    cache = _cache_for_headline(g)
    seq, batch = _largest(g)
    part = g[(g["mode"] == mode) & (g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == cache)]
    return part.mean(numeric_only=True)


def finding_kernel(res: Result) -> Finding:
    g = _grid(res)
    cache = _cache_for_headline(g)
    seq, batch = _largest(g)
    m, r = _kernel_row(res, "mmap"), _kernel_row(res, "read")
    mf = m["minflt"] + m["majflt"]
    extra = mf - (r["minflt"] + r["majflt"])
    text = (f"The kernel sees what the POSIX view misses: at sequence {seq}, batch {batch} ({cache}), mmap took "
            f"{num(m['syscr'])} read calls but {num(m['minflt'])} minor and {num(m['majflt'])} major page faults "
            f"({num(extra)} {choose(direction(mf, r['minflt'] + r['majflt']), 'more', 'fewer', 'about as many')} "
            f"faults than read()), while read() made {num(r['syscr'])} read calls for {num(r['pieces'])} document "
            f"pieces.")
    if cache == "cold" and pd.notna(m.get("read_bytes")) and m["app_bytes"]:
        text += (f" From storage, mmap brought in {num(m['read_bytes'] / m['app_bytes'], '×')} and read() "
                 f"{num(r['read_bytes'] / r['app_bytes'], '×')} the bytes the samples hold.")
    return Finding("kernel_view", text, value=float(m["majflt"] + m["minflt"]), unit="faults",
                   values=dict(mmap_syscr=m["syscr"], read_syscr=r["syscr"]))


def loader_ratio(res: Result, cache: str, seq: int | None = None, batch: int | None = None):
    g = _grid(res)
    if seq is None:
        seq, batch = _largest(g)
    part = g[(g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == cache)]
    m = part[part["mode"] == "mmap"]["loader_s"].tolist()
    r = part[part["mode"] == "read"]["loader_s"].tolist()
    return m, r


def finding_loader(res: Result) -> Finding:
    g = _grid(res)
    seq, batch = _largest(g)
    parts = []
    head = None
    for cache in [c for c in ("cold", "warm") if c in set(g["cache"])]:
        m, r = loader_ratio(res, cache)
        mid, lo, hi = ratio_interval(r, m)
        word = compare(m, r, more="slower than", less="faster than", same="level with")
        parts.append(f"{cache}, mmap took {num(np.mean(m) * 1e3, 'ms')} and read() {num(np.mean(r) * 1e3, 'ms')} "
                     f"for {int(g['steps'].iloc[0])} steps: mmap {word} read() (read() ÷ mmap "
                     f"{span(lo, hi, '×')} over {len(m)} runs)")
        if head is None or cache == "warm":
            head = (mid, lo, hi)
    text = f"Loader time at sequence {seq}, batch {batch}: " + "; ".join(parts) + "."
    return Finding("loader_time", text, value=head[0], unit="×", interval=(head[1], head[2]))


def grid_wins(res: Result, cache: str) -> pd.DataFrame:
    """Per sweep point: which mode had the shorter loader time over the runs (+1 mmap, -1 read(),
    0 within the spread), and the MB each read from storage."""
    g = _grid(res)
    g = g[g["cache"] == cache]
    rows = []
    for (seq, batch), part in g.groupby(["seq", "batch"]):
        m, r = part[part["mode"] == "mmap"], part[part["mode"] == "read"]
        rows.append(dict(seq=seq, batch=batch, winner=direction(r["loader_s"].tolist(), m["loader_s"].tolist()),
                         mmap_storage_MB=m["read_bytes"].mean() / 1e6, read_storage_MB=r["read_bytes"].mean() / 1e6))
    return pd.DataFrame(rows)


def grid_wins_text(res: Result) -> str:
    out = []
    for cache in [c for c in ("cold", "warm") if c in set(_grid(res)["cache"])]:
        w = grid_wins(res, cache)
        n_m, n_r, n = int((w["winner"] > 0).sum()), int((w["winner"] < 0).sum()), len(w)
        t = f"{cache}, mmap was faster at {n_m} of {n} sweep points and read() at {n_r}"
        if cache == "cold" and n_r and w["mmap_storage_MB"].notna().all():
            rw = w[w["winner"] < 0]
            t += (f" (at those, mmap read {num(rw['mmap_storage_MB'].mean(), 'MB')} from storage per configuration "
                  f"and read() {num(rw['read_storage_MB'].mean(), 'MB')})")
        out.append(t)
    return ("Over the whole sweep: " + "; ".join(out) + ".") if out else ""


def loader_note(res: Result) -> str:
    """Beside the loader-time heatmaps: at how many sweep points each mode was faster, per cache state."""
    return grid_wins_text(res)


def per_sample_bandwidth(res: Result) -> pd.DataFrame:
    """Bytes of a sample ÷ time inside ``__getitem__`` (lookup + read + construct), per mode,
    sequence length, batch and cache state (mean, min, max over runs) in MB/s."""
    g = _grid(res).copy()
    g["getitem_s"] = g["lookup_s"] + g["read_s"] + g["construct_s"]
    g["MBps"] = g["app_bytes"] / g["getitem_s"] / 1e6
    out = g.groupby(["cache", "mode", "seq", "batch"])["MBps"].agg(["mean", "min", "max", "count"]).reset_index()
    return out.rename(columns={"count": "n"})


def _bandwidth(res: Result) -> dict:
    """Per-sample bandwidth at the largest sequence length (warm where measured): the runs of every
    batch size per mode, mmap ÷ read() with its range, and mmap's mean at the smallest sequence length."""
    b = per_sample_bandwidth(res)
    cache = "warm" if "warm" in set(b["cache"]) else "cold"
    b = b[b["cache"] == cache]
    seq, small = int(b["seq"].max()), int(b["seq"].min())
    g = _grid(res)
    g = g[(g["cache"] == cache) & (g["seq"] == seq)].copy()
    g["MBps"] = g["app_bytes"] / (g["lookup_s"] + g["read_s"] + g["construct_s"]) / 1e6
    m, r = g[g["mode"] == "mmap"]["MBps"].tolist(), g[g["mode"] == "read"]["MBps"].tolist()
    mid, lo, hi = ratio_interval(m, r)
    return dict(cache=cache, seq=seq, small=small, mmap=m, read=r, ratio=(mid, lo, hi),
                mmap_small=b[(b["mode"] == "mmap") & (b["seq"] == small)]["mean"].mean())


def finding_bandwidth(res: Result) -> Finding:
    bw = _bandwidth(res)
    m, r, (mid, lo, hi) = bw["mmap"], bw["read"], bw["ratio"]
    text = (f"Per-sample bandwidth inside `__getitem__` ({bw['cache']}): mmap {num(bw['mmap_small'], 'MB/s')} at "
            f"sequence {bw['small']} and {num(np.mean(m), 'MB/s')} at {bw['seq']}; read() {num(np.mean(r), 'MB/s')} "
            f"at {bw['seq']} — mmap {compare(m, r)} read() ({span(lo, hi, '×')} over runs and batch sizes).")
    return Finding("per_sample_bandwidth", text, value=mid, unit="×", interval=(lo, hi),
                   published="mmap ÷ read() per-sample bandwidth, largest sequence")


def overhead_table(res: Result) -> pd.DataFrame:
    """Loader time of each view relative to tracing off, paired by round: % (mean, min, max)."""
    o = res.table("overhead")
    rows = []
    for mode in ("mmap", "read"):
        part = o[o["mode"] == mode]
        off = part[part["view"] == "off"].set_index("round")["loader_s"]
        for view in [v for v in ("posix", "app", "both") if v in set(part["view"])]:
            v = part[part["view"] == view].set_index("round")["loader_s"]
            pct_ = ((v / off - 1) * 100).dropna()
            rows.append(dict(mode=mode, view=view, mean=pct_.mean(), min=pct_.min(), max=pct_.max(), n=len(pct_),
                             off_ms=off.mean() * 1e3, view_ms=v.mean() * 1e3))
    return pd.DataFrame(rows)


def finding_overhead(res: Result) -> Finding:
    if "overhead" not in res.tables:
        return Finding("overhead", "The tracer overhead was not measured in this run (overhead_rounds = 0).")
    t = overhead_table(res)
    parts = []
    for _, r in t.iterrows():
        parts.append(f"{r['view']} on {MODE_NAMES[r['mode']]} {num(r['mean'], '%')} ({span(r['min'], r['max'], '%')})")
    head = t[(t["mode"] == "read") & (t["view"] == ("posix" if "posix" in set(t["view"]) else "app"))].iloc[0]
    n = int(t["n"].max())
    text = (f"Tracer overhead on loader time, each view against tracing off in {n} paired round{'s' if n != 1 else ''} "
            "(mean, min–max): "
            + "; ".join(parts) + ".")
    return Finding("overhead", text, value=float(head["mean"]), unit="%", interval=(float(head["min"]),
                   float(head["max"])))


def checkpoint_summary(res: Result) -> pd.DataFrame:
    c = res.table("checkpoint")
    return (c.groupby(["state_bytes", "method"]).agg(GBps=("GBps", "mean"), GBps_min=("GBps", "min"),
                                                     GBps_max=("GBps", "max"), blocked_s=("blocked_s", "mean"),
                                                     total_s=("total_s", "mean"), n=("GBps", "size"))
            .reset_index())


def finding_checkpoint(res: Result) -> Finding:
    if "checkpoint" not in res.tables:
        return Finding("checkpoint", "No checkpoint was written in this run (checkpoint_sizes is empty).")
    s = checkpoint_summary(res)
    size = int(s["state_bytes"].max())
    part = s[s["state_bytes"] == size].set_index("method")
    ts_, ds_, da = part.loc["torch_save"], part.loc["dcp_save"], part.loc["dcp_async_save"]
    share = da["blocked_s"] / da["total_s"] if da["total_s"] else float("nan")
    c = res.table("checkpoint")
    c = c[c["state_bytes"] == size]
    sync_blocked = c[c["method"] == "dcp_save"]["blocked_s"].tolist()
    async_blocked = c[c["method"] == "dcp_async_save"]["blocked_s"].tolist()
    text = (
        f"Saving a {num(size / 1e9, 'GB')} state ({c['device'].iloc[0]} tensors, files synced): torch.save "
        f"{num(ts_['GBps'], 'GB/s')}, DCP save {num(ds_['GBps'], 'GB/s')}; DCP async_save blocked the caller "
        f"{num(da['blocked_s'], 's')} of its {num(da['total_s'], 's')} ({pct(share)}), against "
        f"{num(ds_['blocked_s'], 's')} for the synchronous save — "
        f"{compare(sync_blocked, async_blocked, more='shorter', less='longer', same='no shorter')}"
        "."
    )
    return Finding("checkpoint", text, value=float(share * 100), unit="%")


def checkpoint_note(res: Result) -> str:
    """Beside the checkpoint table: how long async_save went on writing after it returned, and its time
    from call to synced files against the synchronous save (largest state)."""
    if "checkpoint" not in res.tables:
        return ""
    s = checkpoint_summary(res)
    size = int(s["state_bytes"].max())
    da = s[s["state_bytes"] == size].set_index("method").loc["dcp_async_save"]
    c = res.table("checkpoint")
    c = c[c["state_bytes"] == size]
    async_total = c[c["method"] == "dcp_async_save"]["total_s"].tolist()
    sync_total = c[c["method"] == "dcp_save"]["total_s"].tolist()
    return (f"After async_save returned, writing went on for {num(da['total_s'] - da['blocked_s'], 's')} in the "
            "background; from call to synced files it took "
            f"{compare(async_total, sync_total, more='longer than', less='less time than', same='as long as')}"
            " the synchronous save.")


def findings(res: Result) -> list[Finding]:
    """The chapter's key results: what the choice costs (loader time, per-sample bandwidth, the tracer's
    overhead) first, then what the kernel and the POSIX tracer saw, then the checkpoint writes."""
    return [finding_loader(res), finding_bandwidth(res), finding_overhead(res), finding_kernel(res),
            finding_posix(res), finding_checkpoint(res)]


def key_metrics(res: Result) -> dict:
    out = {}
    f = finding_posix(res)
    if f.value is not None:
        out["POSIX events read() ÷ mmap, largest point"] = (f.value, None)
    if has_posix(res):
        c = posix_counts(res)
        m = c[c["mode"] == "mmap"]["posix_events"]
        out["POSIX events per run, mmap"] = (m.mean(), m.std())
        seq, batch = _largest(c)
        r = c[(c["mode"] == "read")]
        out["POSIX events, read(), largest point"] = (
            float(r[(r["seq"] == seq) & (r["batch"] == batch)]["posix_events"].iloc[0]),
            None,
        )
    f = finding_bandwidth(res)
    out["mmap ÷ read() per-sample bandwidth, largest sequence"] = (f.value, None)
    b = per_sample_bandwidth(res)
    b = b[b["cache"] == ("warm" if "warm" in set(b["cache"]) else "cold")]
    seq, small = int(b["seq"].max()), int(b["seq"].min())
    out["per-sample bandwidth, mmap, smallest sequence"] = (
        b[(b["mode"] == "mmap") & (b["seq"] == small)]["mean"].mean(),
        None,
    )
    out["per-sample bandwidth, mmap, largest sequence"] = (
        b[(b["mode"] == "mmap") & (b["seq"] == seq)]["mean"].mean(),
        None,
    )
    out["per-sample bandwidth, read(), largest sequence"] = (
        b[(b["mode"] == "read") & (b["seq"] == seq)]["mean"].mean(),
        None,
    )
    return out


# ---------------------------------------------------------------------------- notes and tables
def data_note(res: Result) -> str:
    c = res.metadata.get("composition", {})
    tot = (c.get("real_tokens") or 0) + (c.get("synthetic_tokens") or 0)
    if not tot:
        return "The data set's composition was not recorded."
    src = c.get("real_source") or "none could be loaded here"
    return (
        f"Data set: {num(tot)} tokens in {num((c.get('real_documents') or 0) + (c.get('synthetic_documents') or 0))} "
        f"documents; {num(c.get('real_tokens') or 0)} tokens ({num(c.get('real_documents') or 0)} documents) are "
        f"real text ({src}), the other {num(c.get('synthetic_tokens') or 0)} are synthetic ids whose document "
        f"lengths are {c.get('synthetic_lengths')}. Token values do not change the I/O; sizes and layout do."
    )


def heatmap_table(res: Result, value: str = "loader_s", cache: str | None = None) -> pd.DataFrame:
    g = _grid(res)
    cache = cache or _cache_for_headline(g)
    g = g[g["cache"] == cache]
    return g.groupby(["mode", "seq", "batch"])[value].mean().reset_index()


def posix_table(res: Result) -> pd.DataFrame:
    c = posix_counts(res)
    c = c.assign(mode=c["mode"].map(MODE_NAMES))
    c["posix_read_MB"] = c["posix_read_bytes"] / 1e6
    c["mean_read_KB"] = c["posix_mean_read_bytes"] / 1e3
    return c[["mode", "seq", "batch", "samples", "pieces", "posix_events", "posix_opens", "posix_reads",
              "posix_read_MB", "mean_read_KB", "posix_read_s"]]


def calls_note(res: Result) -> str:
    """Which calls the tracer recorded per document piece under read(), and which it did not."""
    if not has_posix(res):
        return ""
    p = res.table("posix")
    r = p[(p["part"] == "posix") & (p["mode"] == "read")].iloc[-1]
    calls = json.loads(r["posix_calls"])
    per = {k: v / r["pieces"] for k, v in calls.items() if v}
    listed = ", ".join(f"{k} {num(v)}" for k, v in sorted(per.items()))
    miss = "" if any("stat" in k for k in calls) else (
        " The reader also calls fstat on every piece; the tracer recorded no stat call, so it is blind to it here.")
    w = p[(p["part"] == "posix_workers") & (p["mode"] == "read")]
    wtext = ""
    if len(w):
        w = w.iloc[0]
        wtext = (
            f" With {int(w['workers'])} DataLoader worker{'s' if int(w['workers']) != 1 else ''} "
            f"it recorded {num(w['posix_bin_reads'])} reads of "
            f"`.bin` for {num(w['pieces'])} pieces: the workers' calls are traced too."
        )
    return f"Calls the tracer recorded per document piece under read(): {listed}.{miss}{wtext}"


def views_table(res: Result) -> pd.DataFrame:
    """The three views of the largest grid point, side by side per mode."""
    g = _grid(res)
    seq, batch = _largest(g)
    rows = []
    for cache in sorted(set(g["cache"])):
        for mode in ("mmap", "read"):
            part = g[(g["mode"] == mode) & (g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == cache)]
            m = part.mean(numeric_only=True)
            row = {"cache": cache, "mode": MODE_NAMES[mode],
                   "application: index lookup (ms)": m["lookup_s"] * 1e3, "application: read (ms)": m["read_s"] * 1e3,
                   "application: construction (ms)": m["construct_s"] * 1e3,
                   "application: collate (ms)": m["collate_s"] * 1e3, "application: sample data (MB)":
                   m["app_bytes"] / 1e6, "kernel: read calls": m["syscr"], "kernel: minor page faults": m["minflt"],
                   "kernel: major page faults": m["majflt"],
                   "kernel: from storage (MB)": m["read_bytes"] / 1e6 if pd.notna(m.get("read_bytes")) else None,
                   "disk: read (MB)": m["disk_read_bytes"] / 1e6 if pd.notna(m.get("disk_read_bytes")) else None}
            if has_posix(res) and cache == "warm":
                c = posix_counts(res)
                pc = c[(c["mode"] == mode) & (c["seq"] == seq) & (c["batch"] == batch)]
                row["POSIX view: events"] = float(pc["posix_events"].iloc[0]) if len(pc) else None
                row["POSIX view: read calls"] = float(pc["posix_reads"].iloc[0]) if len(pc) else None
            rows.append(row)
    return pd.DataFrame(rows)


def spans_note(res: Result) -> str:
    """Which application span dominates each mode (warm, largest point)."""
    g = _grid(res)
    cache = "warm" if "warm" in set(g["cache"]) else "cold"
    seq, batch = _largest(g)
    out = []
    for mode in ("mmap", "read"):
        m = g[(g["mode"] == mode) & (g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == cache)].mean(
            numeric_only=True)
        sp = {"index lookup": m["lookup_s"], "reading": m["read_s"], "sample construction": m["construct_s"],
              "collate": m["collate_s"]}
        top = max(sp, key=sp.get)
        out.append(f"under {MODE_NAMES[mode]} {top} takes the largest share ({pct(sp[top] / sum(sp.values()))} "
                   f"of the spans)")
    return f"Application spans ({cache}, sequence {seq}, batch {batch}): " + "; ".join(out) + "."


def theory_table(res: Result) -> pd.DataFrame:
    """Bytes per sample × samples/s against what the kernel and the disk moved (cold rows)."""
    g = _grid(res)
    g = g[g["cache"] == "cold"] if "cold" in set(g["cache"]) else g
    g = g.assign(bytes_per_sample=(g["seq"] + 1) * res.metadata.get("itemsize", 2),
                 samples_per_s=g["samples"] / g["loader_s"])
    g["needed_MBps"] = g["bytes_per_sample"] * g["samples_per_s"] / 1e6
    g["storage_MBps"] = g["read_bytes"] / g["loader_s"] / 1e6
    g["amplification"] = g["read_bytes"] / g["app_bytes"]
    out = g.groupby(["mode", "seq", "batch"])[["bytes_per_sample", "samples_per_s", "needed_MBps", "storage_MBps",
                                                "amplification"]].mean().reset_index()
    return out.assign(mode=out["mode"].map(MODE_NAMES))


def theory_note(res: Result) -> str:
    if "cold" not in set(_grid(res)["cache"]):
        return "The theoretical check compares with bytes read from storage, so it needs cold runs; this run had none."
    t = theory_table(res)
    if t["storage_MBps"].isna().all():
        return "The kernel's byte counters were not available here, so the theoretical check is left out."
    big = t.sort_values(["seq", "batch"]).groupby("mode").tail(1)
    parts = [f"{r['mode']} needed {num(r['needed_MBps'], 'MB/s')} of sample data but moved "
             f"{num(r['storage_MBps'], 'MB/s')} from storage ({num(r['amplification'], '×')} the sample bytes)"
             for _, r in big.iterrows()]
    text = "Theoretical check at the largest point, cold: " + "; ".join(parts) + "."
    g = _grid(res)
    g = g[g["cache"] == "cold"]
    seq, batch = _largest(g)
    g = g[(g["seq"] == seq) & (g["batch"] == batch)]
    m, r = g[g["mode"] == "mmap"].mean(numeric_only=True), g[g["mode"] == "read"].mean(numeric_only=True)
    why = []
    if m.get("majflt") and pd.notna(m.get("read_bytes")):
        why.append(f"under mmap each major page fault brought in {num(m['read_bytes'] / m['majflt'] / 1024, 'KiB')} on "
                   "average (the kernel reads around a faulting page)")
    if r.get("syscr") and pd.notna(r.get("read_bytes")):
        why.append(f"under read() each read call of {num(r['app_bytes'] / r['syscr'])} bytes on average brought in "
                   f"{num(r['read_bytes'] / r['syscr'] / 1024, 'KiB')} (a page is the smallest unit the page cache "
                   "reads)")
    size = res.metadata.get("dataset", {}).get("params", {}).get("bytes")
    if size and pd.notna(m.get("read_bytes")) and m["read_bytes"] >= 0.95 * size:
        why.append(f"under mmap the storage delivered {pct(m['read_bytes'] / size)} of the whole `.bin` for one "
                   "configuration: reading around the faults cached the file, so the later faults were minor")
    ra = res.metadata.get("read_ahead_kb")
    if why:
        text += " The gap, measured: " + "; ".join(why) + "."
    if ra is not None:
        text += f" The device's readahead setting is {num(ra)} KiB."
    return text + (" Each document piece is a random read somewhere in the file, so the loader pays the latency "
                   "of these reads rather than the device's bandwidth.")


def per_call_cost(res: Result) -> dict | None:
    """What one call recorded by the POSIX view costs under read() at the overhead point: calls per document
    piece, calls recorded, the extra loader time (ms) and that time per call (µs); None where not measured."""
    if "overhead" not in res.tables or not has_posix(res):
        return None
    t = overhead_table(res)
    row = t[(t["mode"] == "read") & (t["view"] == "posix")]
    o = res.table("overhead")
    if row.empty or "pieces" not in o:
        return None
    pieces = o[(o["mode"] == "read") & (o["view"] == "posix")]["pieces"].mean()
    p = posix_counts(res)
    p = p[p["mode"] == "read"]
    per_piece = (p["posix_events"] / p["pieces"]).mean()
    calls = pieces * per_piece
    extra_ms = float(row["view_ms"].iloc[0] - row["off_ms"].iloc[0])
    return dict(per_piece=per_piece, calls=calls, extra_ms=extra_ms,
                us_per_call=extra_ms * 1e3 / calls if calls else float("nan"))


def overhead_note(res: Result) -> str:
    """What one traced call costs: the POSIX view's extra loader time ÷ the calls it recorded."""
    c = per_call_cost(res)
    if c is None:
        return ""
    allp = posix_counts(res)
    return (
        f"Under read() the POSIX tracer recorded about {num(c['per_piece'])} calls per document piece, "
        f"{num(c['calls'])} calls at this point; its extra {num(c['extra_ms'], 'ms')} of loader time is "
        f"{num(c['us_per_call'], 'µs')} per recorded call."
        + _mmap_overhead_tail(overhead_table(res), allp[allp["mode"] == "mmap"])
    )


def _mmap_overhead_tail(t: pd.DataFrame, p: pd.DataFrame) -> str:
    m = t[(t["mode"] == "mmap") & (t["view"] == "posix")]
    if m.empty:
        return ""
    m = m.iloc[0]
    posix_counts_mmap_max = float(p["posix_events"].max()) if len(p) else None
    inside = m["min"] <= 0 <= m["max"]
    return (f" Under mmap, where it recorded at most {num(posix_counts_mmap_max)} calls per point, its overhead was "
            + (f"within the spread of the rounds ({span(m['min'], m['max'], '%')})." if inside else
               f"{num(m['mean'], '%')} ({span(m['min'], m['max'], '%')})."))


def workers_table(res: Result) -> pd.DataFrame:
    s = res.table("sweep")
    w = s[s["part"] == "workers"]
    return (w.groupby(["cache", "mode", "workers"])["loader_s"].agg(["mean", "min", "max", "count"]).reset_index()
            .rename(columns={"count": "n"}).assign(mean=lambda d: d["mean"] * 1e3, min=lambda d: d["min"] * 1e3,
                                                   max=lambda d: d["max"] * 1e3))


def workers_note(res: Result) -> str:
    w = workers_table(res)
    out = []
    for (cache, mode), g in w.groupby(["cache", "mode"]):
        g = g.sort_values("workers")
        best = g.loc[g["mean"].idxmin()]
        base = g.iloc[0]
        if int(best["workers"]) == int(base["workers"]):
            out.append(f"{cache} {MODE_NAMES[mode]}: no worker count beat {int(base['workers'])} workers "
                       f"({num(base['mean'], 'ms')})")
        else:
            out.append(
                f"{cache} {MODE_NAMES[mode]}: fastest with {int(best['workers'])} workers "
                f"({num(best['mean'], 'ms')}, "
                f"{compare(best['mean'], base['mean'], more='slower than', less='faster than')}"
                f" the {num(base['mean'], 'ms')} of {int(base['workers'])} workers)"
            )
    notes = [spread_note(f"{c} {MODE_NAMES[m]} with {int(k)} workers", g["loader_s"].tolist(), "s")
             for (c, m, k), g in res.table("sweep")[res.table("sweep")["part"] == "workers"].groupby(
                 ["cache", "mode", "workers"])]
    return "Workers sweep (loader time, worker start-up included): " + "; ".join(out) + "." + \
        "".join(" " + n for n in notes if n)


def checkpoint_invariance_note(res: Result) -> str:
    if not has_posix(res) or "ckpt_posix_writes" not in res.table("posix"):
        return ""
    p = res.table("posix")
    w, b = p["ckpt_posix_writes"], p["ckpt_posix_write_bytes"]
    same = w.nunique() == 1 and b.nunique() == 1
    return (f"The same checkpoint, written after every sweep point under the POSIX view: {num(w.min())}–"
            f"{num(w.max())} write calls and {num(b.min() / 1e6, 'MB')}–{num(b.max() / 1e6, 'MB')} "
            + ("— identical at every sequence length and batch size." if same else
               "— not identical across the sweep."))


def checkpoint_posix_note(res: Result) -> str:
    if "posix_checkpoint" not in res.tables:
        return ""
    c = res.table("posix_checkpoint")
    parts = []
    for _, r in c.iterrows():
        parts.append(
            f"{r['method']}: {num(r['posix_writes'])} write calls ({num(r['posix_write_bytes'] / 1e6, 'MB')}), "
            f"{num(r['posix_fsyncs'])} fsync; the kernel counted {num(r['kernel_write_bytes'] / 1e6, 'MB')} "
            "written"
        )
    blind = [r for _, r in c.iterrows() if r["posix_write_bytes"] < 0.5 * r["kernel_write_bytes"]]
    tail = ""
    for r in blind:
        calls = ", ".join(f"{k} {v}" for k, v in json.loads(r["posix_calls"]).items())
        tail += (f" For {r['method']} the tracer recorded {num(r['posix_write_bytes'] / 1e6, 'MB')} of the "
                 f"{num(r['kernel_write_bytes'] / 1e6, 'MB')} the kernel counted; the only calls it recorded ({calls})"
                 + (" are this chapter's own stat and fsync after the save: the library's file calls bypass the "
                    "preloaded wrappers." if r["method"] == "torch_save" else "."))
    return "Checkpoint writes under the POSIX view: " + "; ".join(parts) + "." + tail


# ---------------------------------------------------------------------------- why more workers can be slower
#: A candidate explains a slowdown when it accounts for at least this share of the extra time.
EXPLAINS = 0.5
_CAUSE_COLS = ("workers_last_start_s", "main_cpu_s", "workers_cpu_s", "workers_minflt", "main_minflt")


def workers_cause(res: Result, cache: str = "warm", mode: str = "read") -> dict | None:
    """The largest worker count against the fastest smaller one (``cache``, ``mode``): the extra
    loader time and the measured candidates for it (seconds), or None when the result lacks the
    counters (runs made before they were recorded) or the sweep has fewer than two counts."""
    s = res.table("sweep")
    w = s[(s["part"] == "workers") & (s["cache"] == cache) & (s["mode"] == mode)]
    if w.empty or any(c not in w for c in _CAUSE_COLS) or w["workers"].nunique() < 2:
        return None
    m = w.groupby("workers")[["loader_s", "steps", *_CAUSE_COLS]].mean()
    k = int(m.index.max())
    smaller = m[m.index < k]
    b = int(smaller["loader_s"].idxmin())
    hi, lo = m.loc[k], m.loc[b]
    if hi[list(_CAUSE_COLS[1:])].isna().any() or lo[["main_cpu_s"]].isna().any():
        return None
    steps = float(hi["steps"])

    def per_worker(r, n):
        return float(r["workers_cpu_s"]) / n if n else 0.0

    cand = {
        "start": float(hi["workers_last_start_s"] if pd.notna(hi["workers_last_start_s"]) else 0.0)
        - float(lo["workers_last_start_s"] if b and pd.notna(lo["workers_last_start_s"]) else 0.0),
        "main": float(hi["main_cpu_s"] - lo["main_cpu_s"]),
        "work": per_worker(hi, k) - per_worker(lo, b),
    }
    return dict(
        cache=cache,
        mode=mode,
        k=k,
        b=b,
        loader_k=float(hi["loader_s"]),
        loader_b=float(lo["loader_s"]),
        extra=float(hi["loader_s"] - lo["loader_s"]),
        cand=cand,
        steps=steps,
        start_k=float(hi["workers_last_start_s"]),
        start_b=float(lo["workers_last_start_s"]) if b else 0.0,
        main_k=float(hi["main_cpu_s"]),
        main_b=float(lo["main_cpu_s"]),
        work_k=per_worker(hi, k),
        work_b=per_worker(lo, b),
        faults_k=float(hi["workers_minflt"]) / steps,
        faults_b=float(lo["workers_minflt"]) / steps if b else 0.0,
        runs_k=w[w["workers"] == k]["loader_s"].tolist(),
        runs_b=w[w["workers"] == b]["loader_s"].tolist(),
    )


def workers_cause_note(res: Result, cache: str = "warm") -> str:
    """For each mode: is the largest worker count slower than a smaller one, and which measured
    candidate (the later start of more workers, the main process's work per batch, each
    worker's own work) accounts for the extra time."""
    out = []
    for mode in ("mmap", "read"):
        c = workers_cause(res, cache, mode)
        if c is None:
            s = res.table("sweep")
            if (s["part"] == "workers").any() and not all(col in s for col in _CAUSE_COLS):
                return ("What decides why more workers can be slower (when each worker started, the CPU time of "
                        "the main process and of every worker) is not in the reference run, which predates these "
                        "counters; a new run of the chapter records them.")
            continue
        head = (f"{cache.capitalize()} cache, {MODE_NAMES[mode]}: {c['k']} worker{'s' if c['k'] != 1 else ''} took "
                f"{num(c['loader_k'] * 1e3, 'ms')} "
                f"for {int(c['steps'])} batches against {num(c['loader_b'] * 1e3, 'ms')} with {c['b']}, "
                f"{compare(c['runs_k'], c['runs_b'], more='slower than', less='faster than')} it")
        d = direction(c["loader_k"], c["loader_b"], tol=0.05)
        if d <= 0:
            out.append(head + ", so there is no slowdown to explain.")
            continue
        ex = c["extra"]
        cand = c["cand"]
        detail = (
            f". The last of the {c['k']} worker{'s' if c['k'] != 1 else ''} "
            f"started {num(c['start_k'] * 1e3, 'ms')} after the loader "
            f"(with {c['b']}: {num(c['start_b'] * 1e3, 'ms')}); the main process used "
            f"{num(c['main_k'] * 1e3 / c['steps'], 'ms')} of CPU per batch, receiving batches from the "
            f"workers (with {c['b']}: {num(c['main_b'] * 1e3 / c['steps'], 'ms')}); each worker used "
            f"{num(c['work_k'] * 1e3, 'ms')} of CPU and took {num(c['faults_k'])} page faults per batch of "
            f"the run (with {c['b']}: {num(c['work_b'] * 1e3, 'ms')} and {num(c['faults_b'])})"
        )
        best = max(cand, key=cand.get)
        share = cand[best] / ex if ex > 0 else 0.0
        why = {"start": (f"starting the extra workers accounts for {pct(min(share, 1.0))} of the "
                         f"{num(ex * 1e3, 'ms')} extra: a run of {int(c['steps'])} batches is over before more "
                         "workers can pay for their start"),
               "main": (f"the main process's extra work accounts for {pct(min(share, 1.0))} of the "
                        f"{num(ex * 1e3, 'ms')} extra: with more workers it spends longer receiving and rebuilding "
                        "batches (IPC), and it is one process"),
               "work": (f"each worker's own extra work accounts for {pct(min(share, 1.0))} of the "
                        f"{num(ex * 1e3, 'ms')} extra: the workers did more per batch (page faults, contention "
                        "for cores)")}[best]
        names = {"start": "the later start", "main": "the main process", "work": "the workers"}
        out.append(head + detail + ". " + (why[0].upper() + why[1:] if share >= EXPLAINS else
                   f"None of these accounts for half of the {num(ex * 1e3, 'ms')} extra (the largest, "
                   f"{names[best]}, {pct(max(share, 0.0))}), so these counters do not explain it") + ".")
    return " ".join(out)


# ---------------------------------------------------------------------------- DFTracer's application spans
def dft_app_note(res: Result) -> str:
    """What DFTracer's Python API recorded in the same trace as the POSIX calls, at the largest
    grid point, against what the POSIX view saw there."""
    if not has_posix(res):
        return ""
    p = res.table("posix")
    if "app_sample_n" not in p:
        return ("DFTracer's application spans (sample fetch, index lookup, read, construction, recorded through "
                "its Python API in the same trace as the POSIX calls) are not in the reference run, which "
                "predates them; a new run of the chapter records them.")
    g = p[p["part"] == "posix"] if "part" in p else p
    seq, batch = int(g["seq"].max()), int(g["batch"].max())
    at = g[(g["seq"] == seq) & (g["batch"] == batch)].set_index("mode")
    if not {"mmap", "read"} <= set(at.index) or float(at["app_sample_n"].sum()) == 0:
        return ("DFTracer's Python API recorded no application spans in this run (the preloaded tracer was "
                "active, but its Python side did not write to the trace).")
    mm, rd = at.loc["mmap"], at.loc["read"]
    text = (f"In the same trace as the POSIX calls, DFTracer's Python API (`dft_fn` around each sample fetch and "
            f"its index lookup, read and construction) recorded, at sequence length {seq} and batch {batch}: "
            f"{num(mm['app_sample_n'])} sample fetches under mmap, spending {num(mm['app_read_s'] * 1e3, 'ms')} "
            f"in reads, while the POSIX view saw {num(mm['posix_bin_reads'])} read calls on `.bin`; and "
            f"{num(rd['app_sample_n'])} fetches under read(), {num(rd['app_read_s'] * 1e3, 'ms')} in reads, with "
            f"{num(rd['posix_bin_reads'])} read calls on `.bin`. Index lookups took "
            f"{num(mm['app_index_lookup_s'] * 1e3, 'ms')} (mmap) and {num(rd['app_index_lookup_s'] * 1e3, 'ms')} "
            "(read()). ")
    seen = float(mm["app_read_s"]) > 0 and float(mm["posix_bin_reads"]) < 0.01 * float(mm["app_sample_n"])
    text += choose(1 if seen else -1,
                   "So the application view shows the time mmap spends reading that the POSIX view cannot see.",
                   "Here the POSIX view also saw the mmap reads, so the application spans add timing, not "
                   "visibility.", "")
    n_workers = p[p["part"] == "posix_workers"] if "part" in p else p.iloc[0:0]
    if len(n_workers):
        text += (" With DataLoader workers the spans are not recorded: a forked worker's copy of the Python "
                 "tracer does not write to the trace, while the preloaded library follows the workers' calls.")
    return text


# ---------------------------------------------------------------------------- tables as shown
def _shown(df: pd.DataFrame, headers: dict) -> pd.DataFrame:
    """The columns of ``headers`` that ``df`` has, renamed to what a reader reads (units included)."""
    return df[[c for c in headers if c in df]].rename(columns=headers)


#: Headers of the POSIX view's table.
POSIX_HEADERS = {"mode": "mode", "seq": "sequence length", "batch": "batch size", "samples": "samples",
                 "pieces": "document pieces", "posix_events": "POSIX events", "posix_opens": "opens",
                 "posix_reads": "reads", "posix_read_MB": "read (MB)", "mean_read_KB": "mean read (KB)",
                 "posix_read_s": "time in reads (s)"}
#: Headers of the theoretical check.
THEORY_HEADERS = {"mode": "mode", "seq": "sequence length", "batch": "batch size",
                  "bytes_per_sample": "bytes per sample", "samples_per_s": "samples/s",
                  "needed_MBps": "sample data needed (MB/s)", "storage_MBps": "moved from storage (MB/s)",
                  "amplification": "storage ÷ sample bytes (×)"}
#: The tracer's views as a reader names them.
VIEW_NAMES = {"off": "tracing off", "posix": "POSIX view (preloaded)", "app": "application spans",
              "both": "POSIX view and application spans"}
#: The views as the subject of a sentence.
VIEW_SUBJECTS = {"posix": "DFTracer's POSIX view", "app": "The application spans"}
#: Headers of the overhead table.
OVERHEAD_HEADERS = {"mode": "mode", "view": "view", "mean": "overhead, mean (%)", "min": "lowest round (%)",
                    "max": "highest round (%)", "n": "paired rounds", "off_ms": "loader, tracing off (ms)",
                    "view_ms": "loader, traced (ms)"}
#: Headers of the checkpoint table.
CHECKPOINT_HEADERS = {"state_MB": "state (MB)", "method": "method", "GBps": "to synced files, mean (GB/s)",
                      "GBps_min": "lowest run (GB/s)", "GBps_max": "highest run (GB/s)",
                      "blocked_s": "caller blocked (s)", "total_s": "until synced (s)", "n": "runs"}


def posix_display(res: Result) -> pd.DataFrame:
    """The POSIX view per sweep point, readable headers."""
    return _shown(posix_table(res), POSIX_HEADERS)


def theory_display(res: Result) -> pd.DataFrame:
    """The theoretical check, readable headers."""
    return _shown(theory_table(res), THEORY_HEADERS)


def overhead_display(res: Result) -> pd.DataFrame:
    """The tracer overhead per mode and view, readable names and headers."""
    t = overhead_table(res)
    t = t.assign(mode=t["mode"].map(MODE_NAMES), view=t["view"].map(VIEW_NAMES))
    return _shown(t, OVERHEAD_HEADERS)


def checkpoint_display(res: Result) -> pd.DataFrame:
    """The checkpoint writes per state size and method, readable headers."""
    c = checkpoint_summary(res)
    return _shown(c.assign(state_MB=c["state_bytes"] / 1e6), CHECKPOINT_HEADERS)


def views_display(res: Result) -> pd.DataFrame:
    """:func:`views_table` turned on its side: one row per measure, one column per cache state and mode, so
    that the table fits the text column."""
    v = views_table(res)
    cols = [f"{c}, {m}" for c, m in zip(v["cache"], v["mode"])]
    out = v.drop(columns=["cache", "mode"]).T
    out.columns = cols
    return out.reset_index(names="measure (means over runs)")


# ---------------------------------------------------------------------------- the opening
def sweep_loader(res: Result, cache: str) -> dict | None:
    """Loader time summed over every sweep point of ``cache``, per run and mode: mmap's speed against
    read()'s (read() time ÷ mmap time, and its range over the runs), its direction, at how many points
    each mode was faster, and (where the kernel counted them) the bytes each brought in from storage."""
    g = _grid(res)
    g = g[g["cache"] == cache]
    if g.empty or not {"mmap", "read"} <= set(g["mode"]):
        return None
    per = g.groupby(["mode", "run"])["loader_s"].sum()
    m, r = per["mmap"].tolist(), per["read"].tolist()
    w = grid_wins(res, cache)
    out = dict(cache=cache, mmap=m, read=r, ratio=ratio_interval(r, m), d=direction(r, m), points=len(w),
               mmap_wins=int((w["winner"] > 0).sum()), read_wins=int((w["winner"] < 0).sum()))
    by = g.groupby("mode")[["read_bytes", "app_bytes"]].sum(min_count=1)
    if by["read_bytes"].notna().all() and float(by.loc["read", "read_bytes"]) > 0:
        out["storage"] = float(by.loc["mmap", "read_bytes"] / by.loc["read", "read_bytes"])
        out["amplification"] = {mode: float(by.loc[mode, "read_bytes"] / by.loc[mode, "app_bytes"])
                                for mode in ("mmap", "read")}
    return out


def _versus(sl: dict, *, bold: bool = False) -> str:
    """'1.9× slower than' / '1.3× faster than' / 'level with': mmap against read() over a sweep."""
    mid = sl["ratio"][0]
    b = "**" if bold else ""
    return choose(sl["d"], f"{b}{times(mid)} faster than{b}", f"{b}{times(1 / mid)} slower than{b}",
                  f"{b}level with{b}")


def _storage_clause(sl: dict) -> str:
    """What mmap's page faults brought in from storage against read()'s calls (cold sweeps only)."""
    s = sl.get("storage")
    if sl["cache"] != "cold" or s is None:
        return ""
    return choose(direction(s, 1.0), f": its page faults pulled {times(s)} read()'s bytes from storage",
                  f": read() pulled {times(1 / s)} the bytes mmap's page faults did from storage",
                  ": both pulled about the same bytes from storage")


def _finding_sweep(res: Result) -> Finding | None:
    sl = sweep_loader(res, _cache_for_headline(_grid(res)))
    if sl is None:
        return None
    mid, lo, hi = sl["ratio"]
    text = (f"{sl['cache'].capitalize()}, over all {sl['points']} sweep points, mmap was {_versus(sl, bold=True)} "
            f"read() at loading batches (read() ahead at {sl['read_wins']} points, mmap at {sl['mmap_wins']})"
            f"{_storage_clause(sl)}.")
    return Finding("sweep_loader", text, value=mid, unit="×", interval=(lo, hi),
                   values=dict(cache=sl["cache"], read_wins=sl["read_wins"], mmap_wins=sl["mmap_wins"]))


def _finding_bandwidth_short(res: Result) -> Finding:
    bw = _bandwidth(res)
    m, r, (mid, lo, hi) = bw["mmap"], bw["read"], bw["ratio"]
    verdict = choose(direction(m, r), f"{times(mid)} faster than", f"{times(1 / mid)} slower than", "level with")
    return Finding("per_sample_bandwidth",
                   f"{bw['cache'].capitalize()}, inside `__getitem__` at sequence {bw['seq']}, mmap delivered "
                   f"**{num(np.mean(m), 'MB/s')}** per sample, {verdict} read()'s {num(np.mean(r), 'MB/s')}.",
                   value=mid, unit="×", interval=(lo, hi),
                   published="mmap ÷ read() per-sample bandwidth, largest sequence")


#: An overhead whose mean lies within this (relative) of zero is no overhead, whatever the rounds say.
OVERHEAD_TOL = 0.05


def _overhead_direction(row) -> int:
    """+1 when every paired round of a view was slower than tracing off (and the mean beyond
    :data:`OVERHEAD_TOL`), -1 when every one was faster, else 0."""
    if row["min"] > 0 and row["mean"] > 100 * OVERHEAD_TOL:
        return 1
    if row["max"] < 0 and row["mean"] < -100 * OVERHEAD_TOL:
        return -1
    return 0


def _overhead_rows(res: Result) -> tuple[str, pd.Series, pd.Series | None] | None:
    """The heaviest view measured (POSIX where it ran, else the application spans) and its rows under
    read() and under mmap."""
    if "overhead" not in res.tables:
        return None
    t = overhead_table(res)
    view = "posix" if "posix" in set(t["view"]) else "app"
    rd, mm = t[(t["mode"] == "read") & (t["view"] == view)], t[(t["mode"] == "mmap") & (t["view"] == view)]
    if rd.empty:
        return None
    return view, rd.iloc[0], (mm.iloc[0] if len(mm) else None)


def _overhead_phrase(row, whose: str) -> str:
    return choose(_overhead_direction(row), f"added **{num(row['mean'], '%')}** to {whose} loader time",
                  f"took {num(-row['mean'], '%')} off {whose} loader time",
                  f"added nothing beyond the rounds' spread to {whose} loader time ({num(row['mean'], '%')})")


def _finding_overhead_short(res: Result) -> Finding | None:
    rows = _overhead_rows(res)
    if rows is None:
        return None
    view, rd, mm = rows
    text = VIEW_SUBJECTS[view] + " " + _overhead_phrase(rd, "read()'s")
    if mm is not None:
        text += " and " + choose(_overhead_direction(mm), f"{num(mm['mean'], '%')} to mmap's",
                                 f"took {num(-mm['mean'], '%')} off mmap's", "nothing measurable to mmap's")
    return Finding("overhead", text + f", over {int(rd['n'])} paired rounds.", value=float(rd["mean"]), unit="%",
                   interval=(float(rd["min"]), float(rd["max"])))


READ_SNIPPET = '''import os
import numpy as np

def read_piece(bin_path, byte_offset, n_tokens, dtype=np.uint16):
    """One document piece by a read call, instead of a slice of np.memmap."""
    buf = np.empty(n_tokens, dtype=dtype)
    fd = os.open(bin_path, os.O_RDONLY)
    try:
        os.preadv(fd, [memoryview(buf).cast("B")], byte_offset)
    finally:
        os.close(fd)
    return buf'''

MMAP_SNIPPET = '''import numpy as np

tokens = np.memmap("train.bin", dtype=np.uint16, mode="r")   # mapped once per process
piece = np.array(tokens[start:start + n_tokens])              # page faults, no read call'''


def _mode_action(res: Result) -> Action | None:
    cache = _cache_for_headline(_grid(res))
    sl = sweep_loader(res, cache)
    if sl is None:
        return None
    mid = sl["ratio"][0]
    warm = sweep_loader(res, "warm") if cache == "cold" else None
    tail = ("" if warm is None else "; warm, " + choose(warm["d"], f"mmap was {times(warm['ratio'][0])} faster",
                                                        f"read() was {times(1 / warm['ratio'][0])} faster",
                                                        "the two were level"))
    if sl["d"] < 0:
        when = ", for a data set that does not stay in the page cache" if cache == "cold" else ""
        return Action(f"Read token pieces with read calls, not a memory map{when}: {cache}, read() loaded batches "
                      f"{times(1 / mid)} faster than mmap over this sweep{tail}.", READ_SNIPPET)
    if sl["d"] > 0:
        return Action(f"Keep the memory map (Megatron's reader maps `.bin`): {cache}, mmap loaded batches "
                      f"{times(mid)} faster than read() over this sweep{tail}.", MMAP_SNIPPET)
    return Action(f"Keep the reader you have: {cache}, mmap and read() loaded batches level over this sweep "
                  f"(read() ÷ mmap loader time {span(sl['ratio'][1], sl['ratio'][2], '×')}){tail}.")


def _workers_action(res: Result) -> Action | None:
    s = res.table("sweep")
    w = s[s["part"] == "workers"]
    if w.empty or w["workers"].nunique() < 2:
        return None
    cache = _cache_for_headline(w)
    sl = sweep_loader(res, cache)
    mode = "read" if sl is not None and sl["d"] < 0 else "mmap"
    w = w[(w["cache"] == cache) & (w["mode"] == mode)]
    runs = {int(k): g["loader_s"].tolist() for k, g in w.groupby("workers")}
    base = min(runs)
    best = min(runs, key=lambda k: np.mean(runs[k]))
    d = direction(runs[base], runs[best]) if best != base else 0
    batch, steps = int(w["batch"].iloc[0]), int(w["steps"].iloc[0])
    if d > 0:
        return Action(f"Set `num_workers={best}`: {cache}, {MODE_NAMES[mode]} loaded {steps} batches of {batch} in "
                      f"{num(np.mean(runs[best]) * 1e3, 'ms')} against {num(np.mean(runs[base]) * 1e3, 'ms')} with "
                      f"{base}, worker start included ({times(np.mean(runs[base]) / np.mean(runs[best]))} faster).",
                      f"loader = DataLoader(dataset, batch_size={batch}, num_workers={best})")
    return Action(f"Keep `num_workers={base}` for this loader: {cache}, no other worker count measured "
                  f"({', '.join(str(k) for k in sorted(runs) if k != base)}) loaded {MODE_NAMES[mode]}'s "
                  "batches faster beyond the runs' spread, worker start included.")


def _tracer_action(res: Result) -> Action | None:
    if not has_posix(res):
        why = res.metadata.get("posix_why_not") or "the tracer did not run"
        return Action(f"To see the POSIX view, install DFTracer (`pip install dftracer pydftracer`) and run the "
                      f"chapter again: it did not run here ({why}).")
    rows = _overhead_rows(res)
    if rows is None:
        return Action("Run the chapter with `overhead_rounds` of 1 or more to measure what the tracer costs here.")
    view, rd, _ = rows
    if _overhead_direction(rd) <= 0:
        return Action(f"Tracing can stay on here: the {VIEW_NAMES[view]} added nothing to read()'s loader time beyond "
                      f"the rounds' spread ({span(rd['min'], rd['max'], '%')}).")
    c = per_call_cost(res)
    t = overhead_table(res)
    app = t[(t["mode"] == "read") & (t["view"] == "app")]
    return Action(f"Trace with DFTracer's POSIX view over a short window of a job, not all of it: it added "
                  f"{num(rd['mean'], '%')} to read()'s loader time here"
                  + (f", {num(c['us_per_call'], 'µs')} per recorded call" if c else "")
                  + ("; the application spans (`dft_fn`) " + _overhead_phrase(app.iloc[0], "read()'s").replace("**", "")
                     if len(app) else "")
                  + ".")


def opening(res: Result) -> Opening:
    """What chapter 10 opens with: what the choice of reader costs (loader time over the sweep, the
    per-sample bandwidth) and what the tracer costs, one sentence each; then which reader, how many
    workers and how to trace, each chosen from this run's numbers."""
    out = [f for f in (_finding_sweep(res), _finding_bandwidth_short(res), _finding_overhead_short(res))
           if f is not None]
    actions = [a for a in (_mode_action(res), _workers_action(res), _tracer_action(res)) if a is not None]
    return Opening(out[:3], actions[:3])


def meaning(res: Result) -> str:
    """What this means for a training job, computed from the run: the POSIX event ratio is set by how each
    reader works, the cost of the choice shows in loader time and in the bytes pulled from storage, and a
    POSIX tracer has a price of its own where calls are many."""
    parts = []
    f = finding_posix(res)
    if f.value is not None:
        parts.append(f"The POSIX event ratio ({times(f.value)} at the largest point) is large by construction: "
                     "read() makes system calls for every document piece and mmap makes none, so it tells which "
                     "reader a POSIX tracer can see, not which one is faster.")
    sweeps = [x for x in (sweep_loader(res, c) for c in ("cold", "warm")) if x is not None]
    if sweeps:
        parts.append("What the choice costs shows in loader time: "
                     + "; ".join(f"{x['cache']}, mmap was {_versus(x)} read() over the sweep" for x in sweeps) + ".")
    cold = next((x for x in sweeps if x["cache"] == "cold" and "amplification" in x), None)
    if cold is not None:
        a = cold["amplification"]
        text = (f"Cold, mmap's page faults brought in {times(a['mmap'])} the bytes the samples hold and read()'s "
                f"calls {times(a['read'])}")
        pulled_more = direction(a["mmap"], a["read"])
        if pulled_more != 0 and pulled_more == -cold["d"]:
            text += (": the reader that pulled fewer bytes from storage loaded faster, so for a data set that does "
                     "not fit in memory the bytes each access pulls in decide, not the number of calls")
        parts.append(text + ".")
    rows = _overhead_rows(res)
    if rows is not None and rows[0] == "posix":
        _, rd, mm = rows
        d = _overhead_direction(rd)
        parts.append(choose(
            d, f"Tracing has a price of its own: the POSIX view added {num(rd['mean'], '%')} to read()'s loader time "
               "here, so trace a short window of a job, and read mmap's I/O from the kernel's page-fault counts or "
               "from application spans, which a POSIX tracer cannot show.",
            f"The POSIX view made read()'s loader {num(-rd['mean'], '%')} faster here, which no tracer does by "
            "itself: read it as run-to-run variation.",
            "The POSIX view cost nothing measurable here, so it can stay on; mmap's I/O still shows only in the "
            "kernel's page-fault counts and in application spans."))
    return " ".join(parts)
