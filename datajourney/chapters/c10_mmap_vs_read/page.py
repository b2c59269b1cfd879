"""Chapter 10's page: the opening and the key results word the facts of
:mod:`~datajourney.chapters.c10_mmap_vs_read.analysis` (through :mod:`~datajourney.core.phrasing`); the notes,
tables and charts of the notebook show the result's tables as evidence. Every string from a result that reaches
Markdown goes through :func:`~datajourney.core.phrasing.text` or :func:`~datajourney.core.phrasing.code`."""
from __future__ import annotations

import json

import pandas as pd

from datajourney.chapters.c10_mmap_vs_read import analysis
from datajourney.chapters.c10_mmap_vs_read.analysis import (  # noqa: F401 - used by the notebook
    CHAPTER,
    MODE_NAMES,
    _grid,
    grid_wins,
    has_posix,
    overhead_table,
    per_call_cost,
    posix_counts,
)
from datajourney.chapters.c10_mmap_vs_read.analysis import headline_cache as _cache_for_headline
from datajourney.chapters.c10_mmap_vs_read.analysis import largest as _largest
from datajourney.core import phrasing
from datajourney.core.facts import Facts
from datajourney.core.findings import (
    Action,
    Finding,
    Opening,
    choose,
    compare,
    direction,
    num,
    pct,
    size_label,
    span,
    spread_note,
)
from datajourney.core.results import Result

# ---------------------------------------------------------------------------- key results


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


def checkpoint_summary(res: Result) -> pd.DataFrame:
    c = res.table("checkpoint")
    return (c.groupby(["state_bytes", "method"]).agg(GBps=("GBps", "mean"), GBps_min=("GBps", "min"),
                                                     GBps_max=("GBps", "max"), blocked_s=("blocked_s", "mean"),
                                                     total_s=("total_s", "mean"), n=("GBps", "size"))
            .reset_index())


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


# ---------------------------------------------------------------------------- notes and tables
def data_note(res: Result) -> str:
    c = res.metadata.get("composition", {})
    tot = (c.get("real_tokens") or 0) + (c.get("synthetic_tokens") or 0)
    if not tot:
        return "The data set's composition was not recorded."
    src = phrasing.text(c.get("real_source") or "none could be loaded here")
    return (
        f"Data set: {num(tot)} tokens in {num((c.get('real_documents') or 0) + (c.get('synthetic_documents') or 0))} "
        f"documents; {num(c.get('real_tokens') or 0)} tokens ({num(c.get('real_documents') or 0)} documents) are "
        f"real text ({src}), the other {num(c.get('synthetic_tokens') or 0)} are synthetic ids whose document "
        f"lengths are {phrasing.text(c.get('synthetic_lengths'))}. Token values do not change the I/O; sizes and "
        "layout do."
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
    listed = ", ".join(f"{phrasing.code(k)} {num(v)}" for k, v in sorted(per.items()))
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
            f"{phrasing.code(r['method'])}: {num(r['posix_writes'])} write calls "
            f"({num(r['posix_write_bytes'] / 1e6, 'MB')}), "
            f"{num(r['posix_fsyncs'])} fsync; the kernel counted {num(r['kernel_write_bytes'] / 1e6, 'MB')} "
            "written"
        )
    blind = [r for _, r in c.iterrows() if r["posix_write_bytes"] < 0.5 * r["kernel_write_bytes"]]
    tail = ""
    for r in blind:
        calls = ", ".join(f"{phrasing.code(k)} {phrasing.text(v)}" for k, v in json.loads(r["posix_calls"]).items())
        tail += (f" For {phrasing.code(r['method'])} the tracer recorded "
                 f"{num(r['posix_write_bytes'] / 1e6, 'MB')} of the "
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




# ---------------------------------------------------------------------------- findings: words for facts
def _facts(res) -> Facts:
    return res.facts if getattr(res, "facts", None) is not None else analysis.analyse(res)


def _cmp(facts: Facts, key: str) -> str:
    c = facts.get(key)
    return phrasing.comparison(c, facts) if c is not None else ""


def _loader(facts: Facts) -> Finding:
    at = facts.data["largest"]
    parts = []
    for cache in ("cold", "warm"):
        c = facts.get(f"loader_time.{cache}")
        if c is None:
            continue
        m, r = facts[f"loader.{cache}.mmap"], facts[f"loader.{cache}.read"]
        parts.append(f"{cache}, mmap took {phrasing.value(m)} and read() {phrasing.value(r)} for {at['steps']} "
                     f"steps: mmap was {_cmp(facts, f'loader_time.{cache}')}")
    c = facts["loader_time"]
    return Finding("loader_time", f"Loader time at sequence {at['seq']}, batch {at['batch']}: " + "; ".join(parts)
                   + ".", c.number, "×")


def _bandwidth(facts: Facts, short: bool) -> Finding:
    c, m, r = facts["per_sample_bandwidth"], facts["bandwidth.mmap"], facts["bandwidth.read"]
    cache, seq = m.setting["cache"], m.setting["seq"]
    if short:
        text = (f"{cache.capitalize()}, inside `__getitem__` at sequence {seq}, mmap delivered "
                f"**{phrasing.value(m, runs=False)}** per sample, {_cmp(facts, 'per_sample_bandwidth')}.")
    else:
        small = facts["bandwidth.mmap_small"]
        text = (f"Per-sample bandwidth inside `__getitem__` ({cache}): mmap {phrasing.value(small)} at sequence "
                f"{small.setting['seq']} and {phrasing.value(m)} at {seq}; read() {phrasing.value(r)} at {seq}: mmap "
                f"was {_cmp(facts, 'per_sample_bandwidth')} over runs and batch sizes.")
    return Finding("per_sample_bandwidth", text, c.number, "×", published=c.published)


def _overhead(facts: Facts, short: bool) -> Finding | None:
    c = facts.get("overhead")
    if c is None:
        return None if short else Finding("overhead", "The tracer overhead was not measured in this run "
                                          "(overhead_rounds = 0).")
    view = "DFTracer's POSIX view" if facts.data.get("overhead_view") == "posix" else "the application spans"
    traced = facts["overhead.read." + facts.data["overhead_view"]]
    text = (f"Traced by {view}, read() loaded batches {_cmp(facts, 'overhead')} "
            f"({phrasing.value(traced, runs=not short)})")
    if "overhead.mmap" in facts:
        text += f"; mmap was {phrasing.ratio_words(facts['overhead.mmap']) or 'not comparable'} with tracing on"
    n = facts["overhead.read.off"].n
    return Finding("overhead", text + f", over {n} paired round{'s' if n != 1 else ''}.", c.number, "×")


def _kernel(facts: Facts) -> Finding:
    f = facts["kernel_view"]
    s = f.setting
    text = (f"The kernel sees what the POSIX view misses: at sequence {s['seq']}, batch {s['batch']} ({s['cache']}), "
            f"mmap took {phrasing.value(facts['kernel.mmap.syscr'])} read calls but "
            f"{phrasing.value(facts['kernel.mmap.minflt'])} minor and {phrasing.value(facts['kernel.mmap.majflt'])} "
            f"major page faults ({_cmp(facts, 'kernel.faults_vs_read')}), while read() made "
            f"{phrasing.value(facts['kernel.read.syscr'])} read calls for "
            f"{phrasing.value(facts['kernel.read.pieces'])} document pieces.")
    if "kernel.mmap.amplification" in facts:
        text += (f" From storage, mmap brought in {phrasing.value(facts['kernel.mmap.amplification'])} and read() "
                 f"{phrasing.value(facts['kernel.read.amplification'])} the bytes the samples hold.")
    return Finding("kernel_view", text, f.number, "faults")


def _posix(facts: Facts) -> Finding:
    c = facts.get("posix_events")
    if c is None:
        why = phrasing.text(facts.data.get("posix_why_not") or "the tracer did not run")
        return Finding("posix_events", f"The POSIX view did not run in this run ({why}); the kernel and "
                       "application views below stand in for it.")
    lo, hi = facts["posix.mmap_min"], facts["posix.mmap_max"]
    const = facts["posix.mmap_constant"].value
    m_text = ((f"exactly {phrasing.value(lo)}" if lo.number == hi.number else
               f"between {phrasing.value(lo)} and {phrasing.value(hi)}") + " per sweep point under mmap: "
              + {"yes": f"constant within ±{phrasing.share(facts['posix.mmap_constant'].setting['tolerance'])}",
                 "none": "none at all"}.get(const, "not constant"))
    small, big = facts["posix.read_small"], facts["posix.read_big"]
    trend = "grows with the tokens read" if facts["posix.read_grows"].value == "yes" else \
        "does not follow the tokens read"
    text = (f"The tracer saw {m_text}; under read() the count {trend}, from {phrasing.value(small)} "
            f"({phrasing.text(small.label)}) to {phrasing.value(big)} ({phrasing.text(big.label)})")
    text += (f"; at the largest point read() shows {_cmp(facts, 'posix_events')}" if c.number is not None else
             "; at the largest point mmap shows none, so the ratio is unbounded")
    text += "; the ratio counts calls (read() makes them for every document piece, mmap does not), not time."
    return Finding("posix_events", text, c.number, "×", published=c.published)


def _checkpoint(facts: Facts) -> Finding:
    f = facts.get("checkpoint")
    if f is None:
        return Finding("checkpoint", "No checkpoint was written in this run (checkpoint_sizes is empty).")
    d = facts.data["checkpoint"]
    a = facts["checkpoint.dcp_async_save.blocked"]
    text = (f"Saving a {size_label(d['bytes'])} state ({phrasing.code(d['device'])} tensors, files synced): "
            f"torch.save {phrasing.value(facts['checkpoint.torch_save'])}, DCP save "
            f"{phrasing.value(facts['checkpoint.dcp_save'])};"
            f" DCP async_save blocked the caller {phrasing.value(a)} of its "
            f"{phrasing.value(facts['checkpoint.dcp_async_save.total'])} ({phrasing.share(f.number)}): "
            f"{_cmp(facts, 'checkpoint.blocked_vs_sync')}.")
    return Finding("checkpoint", text, f.number, "")


def finding(facts: Facts, key: str) -> list[Finding]:
    """The key result ``key`` (as a one-item list for :func:`~datajourney.book.report.findings`)."""
    return [f for f in findings(facts) if f.key == key]


def findings(facts: Facts) -> list[Finding]:
    """The chapter's key results: what the choice costs (loader time, per-sample bandwidth, the tracer's
    overhead) first, then what the kernel and the POSIX tracer saw, then the checkpoint writes."""
    if not isinstance(facts, Facts):        # a Result, from a caller that has not moved to facts yet
        facts = _facts(facts)
    out = [_loader(facts), _bandwidth(facts, False), _overhead(facts, False), _kernel(facts), _posix(facts),
           _checkpoint(facts)]
    return [f for f in out if f is not None]


def key_metrics(res) -> dict:
    """Metric name (as in published.py) -> (value, None) of this result, from its facts: only facts the
    analysis marked as the same metric, and the counts and rates the published table lists."""
    facts = _facts(res)
    out = {f.published: (f.number, None) for f in facts.facts.values() if f.published and f.number is not None}
    if "posix.mmap_min" in facts:
        out["POSIX events, read(), largest point"] = (facts.number("posix.read_big"), None)
    return out


# ---------------------------------------------------------------------------- the opening
def _sweep(facts: Facts) -> Finding | None:
    c = facts.get("sweep_loader")
    if c is None:
        return None
    cache = facts[c.of].setting["cache"]
    text = (f"{cache.capitalize()}, over all {phrasing.value(facts[f'sweep.{cache}.points'])} sweep points, mmap "
            f"loaded batches **{_cmp(facts, 'sweep_loader')}** (read() ahead at "
            f"{phrasing.value(facts[f'sweep.{cache}.read_wins'])} points, mmap at "
            f"{phrasing.value(facts[f'sweep.{cache}.mmap_wins'])})")
    st = facts.get(f"sweep.{cache}.storage")
    if cache == "cold" and st is not None:
        text += f": its page faults pulled {phrasing.value(st)} the bytes read() pulled from storage"
    return Finding("sweep_loader", text + ".", c.number, "×")


def _snippet(a) -> str | None:
    if a.key == "tokens.loader_mode":
        return READ_SNIPPET if a.value == "read()" else MMAP_SNIPPET
    if a.key == "tokens.num_workers":
        return f"loader = DataLoader(dataset, batch_size=BATCH, num_workers={a.value})"
    return None


def _tracer_action(facts: Facts) -> Action:
    if "posix_events" not in facts:
        why = phrasing.text(facts.data.get("posix_why_not") or "the tracer did not run")
        return Action(f"To see the POSIX view, install DFTracer (`pip install dftracer pydftracer`) and run the "
                      f"chapter again: it did not run here ({why}).")
    c = facts.get("overhead")
    if c is None:
        return Action("Run the chapter with `overhead_rounds` of 1 or more to measure what the tracer costs here.")
    if c.level or (c.number or 0) <= 1:
        return Action(f"Tracing can stay on: traced, read() loaded batches {_cmp(facts, 'overhead')}.")
    per = facts.get("posix_us_per_call")
    return Action("Trace with DFTracer's POSIX view over a short window of a job, not all of it: traced, read() "
                  f"loaded batches {_cmp(facts, 'overhead')}"
                  + (f", {phrasing.value(per)} per recorded call" if per is not None and per.number else "")
                  + (f"; with the application spans alone it was {_cmp(facts, 'overhead.app')}"
                     if "overhead.app" in facts else "") + ".")


def actions(facts: Facts) -> list[Action]:
    out = [Action(phrasing.advice(a, facts), _snippet(a)) for a in facts.advice]
    return (out + [_tracer_action(facts)])[:3]


def opening(facts: Facts) -> Opening:
    """What chapter 10 opens with: what the choice of reader costs (loader time over the sweep, the per-sample
    bandwidth) and what the tracer costs, one sentence each; then which reader and how many workers (the
    analysis's advice) and how to trace."""
    out = [f for f in (_sweep(facts), _bandwidth(facts, True), _overhead(facts, True)) if f is not None]
    return Opening(out[:3], actions(facts))


def meaning(facts: Facts) -> str:
    """What this means for a training job, in words of the facts: the POSIX event ratio is set by how each reader
    works, the cost of the choice shows in loader time and in the bytes pulled from storage, and a POSIX tracer
    has a price of its own where calls are many."""
    parts = []
    c = facts.get("posix_events")
    if c is not None and c.number is not None:
        parts.append(f"The POSIX event ratio (read() {phrasing.ratio_words(c)} events than mmap at the largest point) "
                     "is large by construction: read() makes system calls for every document piece and mmap makes "
                     "none, so it tells which reader a POSIX tracer can see, not which one is faster.")
    sweeps = [(cache, facts[f"sweep_loader.{cache}"]) for cache in ("cold", "warm")
              if f"sweep_loader.{cache}" in facts]
    if sweeps:
        parts.append("What the choice costs shows in loader time: "
                     + "; ".join(f"{cache}, mmap was {phrasing.comparison(x, facts, baseline='read()')} over the "
                                 "sweep" for cache, x in sweeps) + ".")
    if "sweep.cold.amplification.mmap" in facts:
        parts.append(f"Cold, mmap's page faults brought in {phrasing.value(facts['sweep.cold.amplification.mmap'])} "
                     f"the bytes the samples hold and read()'s calls "
                     f"{phrasing.value(facts['sweep.cold.amplification.read'])}.")
    o = facts.get("overhead")
    if o is not None and facts.data.get("overhead_view") == "posix":
        parts.append("Tracing has a price of its own: " + f"traced by the POSIX view, read() loaded batches "
                     f"{_cmp(facts, 'overhead')}; mmap's I/O shows only in the kernel's page-fault counts and in "
                     "application spans, which a POSIX tracer cannot show.")
    return " ".join(parts)
