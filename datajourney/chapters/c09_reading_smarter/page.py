"""What chapter 9's page says about a result of :mod:`datajourney.reading`: key findings, the published
metrics, computed notes and the display tables of the notebook. Every number and direction word
comes from the result."""
from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from datajourney.chapters.c09_reading_smarter.experiment import CHAPTER, classify_gds  # noqa: F401 - CHAPTER re-exported for the notebook
from datajourney.core import findings as fx
from datajourney.core.findings import Finding, size_label
from datajourney.core.stats import summarise

#: Path (b) should reach this share of the slower of the two links (device, PCIe).
PIPELINE_TARGET = 0.90
#: A thread pool of pread calls should reach this many times the single thread's IOPS.
PARALLEL_TARGET = 4.0
#: A device is "saturated" when its utilisation reaches this share, or when doubling the pool adds less than
#: :data:`FLAT_GAIN`.
BUSY = 0.95
FLAT_GAIN = 1.15
#: The device "saw what was asked" when the average request it completed is within this factor of the asked size.
SAME_SIZE = 1.25

PINNED = "pinned, double-buffered"


# --------------------------------------------------------------------------- helpers
def _t(res, name: str) -> pd.DataFrame:
    return res.tables[name] if name in res.tables else pd.DataFrame()


def _mean(v: Sequence[float]) -> float:
    v = [float(x) for x in v if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(v) / len(v) if v else float("nan")


def _ok(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def has_gpu(res) -> bool:
    return "gpu" in res.tables and len(res.table("gpu")) > 0


def _gpu_ok(res) -> pd.DataFrame:
    g = _t(res, "gpu")
    if not g.empty and "error" in g:
        g = g[g["error"].isna()]
    return g


def gpu_errors(res) -> list[str]:
    g = _t(res, "gpu")
    if g.empty or "error" not in g:
        return []
    return [f"{p}: {e}" for p, e in dict.fromkeys(zip(g["path"], g["error"])) if isinstance(e, str)]


def gpu_runs(res, path: str, col: str = "GBps", cache: str | None = None) -> list[float]:
    g = _gpu_ok(res)
    if g.empty:
        return []
    g = g[g["path"] == path]
    if cache:
        g = g[g["cache"] == cache]
    return g[col].astype(float).tolist()


def device_ceiling(res) -> list[float]:
    c = _t(res, "ceiling")
    return c["GBps"].astype(float).tolist() if not c.empty else []


def pcie_ceiling(res) -> float | None:
    c = res.metadata.get("pcie_ceiling") or {}
    return c.get("GBps") if c.get("available") else None


def kvikio_paths(res) -> list[str]:
    g = _gpu_ok(res)
    return [p for p in dict.fromkeys(g["path"]) if str(p).startswith("kvikio")] if not g.empty else []


# --------------------------------------------------------------------------- published metrics
def key_metrics(res) -> dict:
    """Metric name (as in published.py) -> (mean, std) of this result."""
    out = {}
    v = gpu_runs(res, PINNED, cache="cold")
    if v:
        out["storage → GPU memory through the CPU"] = (_mean(v), pd.Series(v).std() if len(v) > 1 else None)
    gds = res.metadata.get("gds") or {}
    if gds.get("path") == "GDS":   # never a compatibility-mode number under the GDS name
        best = max(kvikio_paths(res), key=lambda p: _mean(gpu_runs(res, p, cache="cold")), default=None)
        if best:
            w = gpu_runs(res, best, cache="cold")
            out["storage → GPU memory with GDS"] = (_mean(w), pd.Series(w).std() if len(w) > 1 else None)
            if "storage → GPU memory through the CPU" in out:
                out["GDS gain over the CPU path"] = (
                    100 * (out["storage → GPU memory with GDS"][0] / out["storage → GPU memory through the CPU"][0] - 1),
                    None)
    return out


# --------------------------------------------------------------------------- findings
def path_b_setting(res) -> str:
    """How this run's path (b) read the file: O_DIRECT or through the page cache, its chunk and buffers.
    Runs made before O_DIRECT became path (b)'s default read through the page cache."""
    pb = (res.metadata.get("gds") or {}).get("path_b")
    chunk = int((pb or {}).get("chunk") or res.parameters.get("gpu_chunk") or 0)
    size = size_label(chunk) if chunk else "unknown"
    if pb is None:
        return (f"reads through the page cache in {size} chunks: this run predates O_DIRECT as path (b)'s "
                "default")
    if pb.get("direct"):
        return f"O_DIRECT reads of {size} into {pb.get('buffers', 2)} aligned buffers"
    return f"reads through the page cache in {size} chunks: {pb.get('note') or 'O_DIRECT was not used'}"


def finding_to_gpu(res) -> Finding:
    if not has_gpu(res):
        return Finding("to_gpu", "No file was read into GPU memory in this run ("
                       + (res.metadata.get("gpu_note") or "no CUDA device") + "): the reference run's paths to GPU "
                       "memory are shown below, labelled.")
    b = gpu_runs(res, PINNED, cache="cold")
    dev = device_ceiling(res)
    pc = pcie_ceiling(res)
    limit = min(_mean(dev), pc) if dev and pc else (_mean(dev) if dev else pc)
    which = "the device's cold sequential read (dd)" if (dev and (not pc or _mean(dev) <= pc)) else "the PCIe copy"
    share = _mean(b) / limit if limit else float("nan")
    lo, hi = (min(b) / limit, max(b) / limit) if limit else (float("nan"),) * 2
    a = gpu_runs(res, "pageable + copy", cache="cold")
    if lo >= PIPELINE_TARGET:
        verdict = "so reading to the GPU added next to nothing beyond the slower link"
    elif share >= PIPELINE_TARGET:
        verdict = (f"at the {fx.pct(PIPELINE_TARGET)} target on average but not in every run: the slower link's own "
                   f"runs spread over {fx.span(min(dev), max(dev), 'GB/s')}" if dev else
                   f"at the {fx.pct(PIPELINE_TARGET)} target on average but not in every run")
    else:
        verdict = f"below the {fx.pct(PIPELINE_TARGET)} target at this setting" + _sweep_verdict(res)
    text = (f"Cold, a {size_label(int(_t(res, 'gpu')['bytes'].iloc[0]))} file reached GPU memory at "
            f"**{fx.num(_mean(b), 'GB/s')}** through two pinned buffers (read one while the other is copied; "
            f"{path_b_setting(res)}), "
            f"{fx.pct(share)} ({fx.span(100 * lo, 100 * hi, '%')} over runs) of the slower link, {which} at "
            f"{fx.num(limit, 'GB/s')}, {verdict}.")
    if a:
        text += (f" Reading into pageable memory and copying each chunk before the next read was "
                 f"{fx.compare(a, b, more='faster than', less='slower than')} that.")
    return Finding("to_gpu", text, _mean(b), "GB/s", published="storage → GPU memory through the CPU",
                   interval=(min(b), max(b)), values=dict(share=share, limit=limit))


def steadiest_setting(res) -> pd.Series | None:
    """The chunk x buffers sweep's setting with the highest lowest-run share of the slower link (ties:
    the higher mean share); None without a sweep."""
    s = pipeline_summary(res)
    return None if s.empty else s.iloc[0]


def _sweep_verdict(res) -> str:
    """What this run's chunk x buffers sweep says about a path (b) below its target: its steadiest
    setting (its best, where the sweep ran once), and whether that one reached the target in every run."""
    b = steadiest_setting(res)
    if b is None:
        return " (this run has no chunk × buffers sweep to compare other settings with)"
    runs = int(b["n"])
    pb = (res.metadata.get("gds") or {}).get("path_b") or {}
    same = (bool(pb.get("direct")) == (b["mode"] == "O_DIRECT") and int(pb.get("chunk") or 0) == int(b["chunk"])
            and int(pb.get("buffers") or 0) == int(b["buffers"]))
    which = "best setting in its one run" if runs == 1 else f"steadiest setting over its {runs} runs"
    share = (f"{fx.pct(b['share'])} of that run's ceiling" if runs == 1 else
             f"{fx.span(100 * b['share_min'], 100 * b['share_max'], '%')} of the same runs' ceilings")
    text = (f"; the chunk × buffers sweep's {which}, {b['mode']} reads of {size_label(int(b['chunk']))} into "
            f"{int(b['buffers'])} buffers{' (this same setting)' if same else ''}, reached "
            f"{fx.num(b['GBps'], 'GB/s')} ({share})")
    if b["share_min"] < PIPELINE_TARGET:
        return text + ", so no setting swept reached the target in every run either"
    if same:
        return (text + ": the same setting kept up in the sweep but not in these runs: its rate varied between "
                       "the two measurements")
    return text + ": on this machine the read setting decides whether path (b) keeps up" + (
        " (in the sweep's one run)" if runs == 1 else "")


def finding_gds(res) -> Finding:
    gds = res.metadata.get("gds") or {}
    mode = gds.get("path") or "unknown"
    if not gds.get("kvikio"):
        return Finding("gds", "kvikio (cuFile) is not installed here, so whether GPUDirect Storage works was not "
                       "tested; the reference run's answer is shown below.")
    why = (f"cuFile reports GDS {'available' if gds.get('gds_available') else 'not available'}, "
           f"KvikIO {'prefers' if gds.get('compat_preferred') else 'does not prefer'} its POSIX path, "
           f"nvidia-fs is {'loaded' if gds.get('nvidia_fs') else 'not loaded'}")
    kv = kvikio_paths(res) if has_gpu(res) else []
    if not kv:
        errs = [e for e in gpu_errors(res) if e.startswith("kvikio")]
        return Finding("gds", f"kvikio runs in **{mode}** here ({why}); "
                       + (f"its reads failed: {errs[0]}." if errs else "nothing was read into GPU memory in this run."))
    best = max(kv, key=lambda p: _mean(gpu_runs(res, p, cache="cold")))
    k, b = gpu_runs(res, best, cache="cold"), gpu_runs(res, PINNED, cache="cold")
    ck, cb = gpu_runs(res, best, "cpu_s_per_GB", "cold"), gpu_runs(res, PINNED, "cpu_s_per_GB", "cold")
    label = "GDS" if mode == "GDS" else f"{mode}, not GDS"
    text = (f"kvikio ran in **{mode}** ({why}). Its fastest setting ({best.rsplit(', ', 1)[-1]}) read the cold file "
            f"into GPU memory at {fx.num(_mean(k), 'GB/s')} ({label}), "
            f"{fx.compare(k, b, more='faster than', less='slower than')} the pinned double-buffered path, using "
            f"{fx.num(_mean(ck), 's')} of CPU time per GB against {fx.num(_mean(cb), 's')}"
            f" ({fx.choose(fx.direction(ck, cb, tol=0.10), 'more', 'less', 'about the same')}).")
    if mode != "GDS":
        text += " The published GDS gain cannot be reproduced on this machine: its data still pass through host memory."
    return Finding("gds", text, _mean(k), "GB/s", interval=(min(k), max(k)),
                   published="storage → GPU memory with GDS" if mode == "GDS" else None)


def _grid(res) -> pd.DataFrame:
    g = _t(res, "grid")
    return g[g["error"].isna()] if not g.empty and "error" in g else g


def _sum(x: pd.Series) -> float:
    """A sum that stays NaN when every value is missing."""
    return x.astype(float).sum(min_count=1)


def asked_vs_seen(res) -> pd.DataFrame:
    """Per (mode, size, threads): asked request size and queue depth vs the device's view, pooled over runs
    (the device's request size is its bytes over its requests, summed over runs)."""
    g = _grid(res)
    if g.empty:
        return g
    g = g.copy()
    for c in ("dev_bytes", "dev_reads", "own_bytes", "own_share", "dev_read_ms", "mean_us"):
        if c not in g:
            g[c] = float("nan")
    g["_dev_ms_total"] = g["dev_read_ms"] * g["dev_reads"]
    out = g.groupby(["mode", "size", "threads"], sort=True).agg(
        MBps=("MBps", "mean"), IOPS=("IOPS", "mean"), p50_us=("p50_us", "mean"), p99_us=("p99_us", "mean"),
        mean_us=("mean_us", "mean"), dev_bytes=("dev_bytes", _sum), dev_reads=("dev_reads", _sum),
        dev_ms=("_dev_ms_total", _sum), seen_request_runs=("dev_request_bytes", "mean"),
        seen_qd=("dev_queue_depth", "mean"), util=("dev_util", "mean"),
        seen_over_asked=("seen_over_asked", "mean"), own_share=("own_share", "mean"), n=("run", "count")).reset_index()
    pooled = out["dev_bytes"] / out["dev_reads"].where(out["dev_reads"] > 0)
    out["seen_request"] = pooled.where(out["dev_bytes"].notna() & (out["dev_reads"] > 0), out["seen_request_runs"])
    out["dev_ms_per_request"] = out["dev_ms"] / out["dev_reads"].where(out["dev_reads"] > 0)
    out["request_ratio"] = out["seen_request"] / out["size"]
    return out


#: The device's averages describe this process's requests when at least this share of what it read was ours.
OWN_SHARE = 0.90


def split_bounds(res, size: int) -> tuple[float | None, float | None]:
    """(smallest, largest) device request an ``O_DIRECT`` read of ``size`` bytes can become: a buffer of separate
    4 KiB pages fills at most ``max_segments`` segments per request; a physically contiguous one (huge pages)
    is cut only at ``max_sectors_kb``."""
    d = res.metadata.get("device") or {}
    msk, segs = d.get("max_sectors_kb"), d.get("max_segments")
    hi = min(size, msk * 1024) if msk else None
    lo = size / math.ceil((size // 4096) / segs) if segs and size >= 4096 else None
    if lo is not None and hi is not None:
        lo = min(lo, hi)
    return lo, hi


def _split_text(res, rows: pd.DataFrame) -> str:
    size = int(rows["size"].iloc[0])
    seen = rows["seen_request"].astype(float)
    lo_s, hi_s = float(seen.min()), float(seen.max())
    by = ", ".join(f"{size_label(int(v))} at {int(t)}" for t, v in zip(rows["threads"], seen))
    text = (f" At {size_label(size)} with O_DIRECT the device saw requests of {by} "
            f"thread{'s' if int(rows['threads'].iloc[-1]) > 1 else ''}")
    lo, hi = split_bounds(res, size)
    d = res.metadata.get("device") or {}
    if hi_s >= size / SAME_SIZE:
        return text + ": as asked."
    if lo is not None and hi is not None and lo / SAME_SIZE <= lo_s and hi_s <= hi * SAME_SIZE:
        return text + (f": between what the queue allows for a buffer of separate 4 KiB pages "
                       f"({d.get('max_segments'):,} segments per request: {size_label(int(lo))}) and its "
                       f"max_sectors_kb ({size_label(int(hi))}, reached only where the buffer is physically "
                       "contiguous, as in huge pages). How contiguous each buffer was is not recorded here.")
    return text + ": outside what the queue's max_segments and max_sectors_kb predict (cause not established here)."


def _depth_text(res, s: pd.DataFrame) -> str:
    """Asked vs seen queue depth at the smallest O_DIRECT size and the most threads, and where the rest of each
    request's time went (device time per request vs the program's mean latency)."""
    r = s[(s["mode"] == "O_DIRECT") & (s["size"] == s["size"].min())]
    if r.empty:
        r = s[s["size"] == s["size"].min()]
    r = r[r["seen_qd"].notna()].sort_values("threads")
    if r.empty:
        return ""
    r = r.iloc[-1]
    t, qd = int(r["threads"]), float(r["seen_qd"])
    text = (f" Asked for {t} requests of {size_label(int(r['size']))} at once ({r['mode']}), the device averaged "
            f"{fx.num(qd)} in flight, busy {fx.pct(min(1.0, r['util']))} of the time")
    dev_ms, mean_us = r.get("dev_ms_per_request"), r.get("mean_us")
    if qd < t / SAME_SIZE and _ok(dev_ms) and _ok(mean_us) and mean_us > 0:
        out = 1 - 1e3 * dev_ms / mean_us
        if out > 0.5:
            text += (f": each request spent {fx.num(1e3 * dev_ms, 'µs')} in the block layer and the device but "
                     f"{fx.num(mean_us, 'µs')} on average from call to return, so {fx.pct(out)} of its time was "
                     "spent outside the device's queue, in the program, where the threads take turns with Python's "
                     "interpreter lock")
    elif qd > t * SAME_SIZE:
        text += ": more than asked, because the kernel split each request into several"
    return text + "."


def contamination(res, table: str = "grid") -> float | None:
    """The smallest share, over cells, of what the device read that this process asked for."""
    t = _t(res, table)
    if t.empty or "own_share" not in t or not t["own_share"].notna().any():
        return None
    return float(t["own_share"].dropna().min())


def finding_asked_vs_seen(res) -> Finding:
    s = asked_vs_seen(res)
    if s.empty or not s["seen_request"].notna().any():
        dev = res.metadata.get("diskstats_device")
        return Finding("asked_vs_seen", "The device's own counters could not be read here (" +
                       ("the data directory is not on a block device" if not dev else f"no /proc/diskstats line for {dev}")
                       + "), so only the program's side of each request is shown.")
    small = s["size"].min()
    parts = []
    head = None
    for mode in ("buffered", "O_DIRECT"):
        r = s[(s["mode"] == mode) & (s["size"] == small)].sort_values("threads")
        if r.empty or not _ok(r["seen_request"].iloc[0]):
            continue
        r = r.iloc[0]
        ratio = r["seen_request"] / small
        head = head if head is not None else ratio
        what = ("the same size" if abs(math.log(ratio)) <= math.log(SAME_SIZE) else
                f"{fx.times(ratio)} {'larger' if ratio > 1 else 'smaller'}")
        parts.append(f"{mode} {size_label(small)} requests reached the device as {size_label(int(r['seen_request']))} "
                     f"requests on average ({what})")
    tail = ""
    big = s[(s["mode"] == "O_DIRECT") & (s["size"] == s["size"].max()) & s["seen_request"].notna()].sort_values("threads")
    if not big.empty and s["size"].max() > small:
        tail += _split_text(res, big)
    tail += _depth_text(res, s)
    own = contamination(res)
    if own is not None and own < OWN_SHARE:
        tail += (f" Caution: in some cells only {fx.pct(own)} of what the device read was this process's "
                 "(/proc/self/io); other processes used the same device meanwhile, so its averages mix their "
                 "requests with ours.")
    elif own is not None:
        tail += f" At least {fx.pct(own)} of what the device read in every cell was this process's (/proc/self/io)."
    return Finding("asked_vs_seen", "Asked vs seen: " + "; ".join(parts) + "." + tail,
                   head, "×", values=dict(small=int(small)))


def random_summary(res) -> pd.DataFrame:
    r = _t(res, "random")
    if r.empty:
        return r
    r = r.assign(variant=[m if m != "pread, thread pool" else f"pread, {t} threads" for m, t in zip(r["mode"], r["threads"])])
    out = r.groupby(["variant", "mode", "threads"], sort=False).agg(
        IOPS=("IOPS", "mean"), IOPS_min=("IOPS", "min"), IOPS_max=("IOPS", "max"), p50_us=("p50_us", "mean"),
        p99_us=("p99_us", "mean"), seen_request=("dev_request_bytes", "mean"), seen_qd=("dev_queue_depth", "mean"),
        util=("dev_util", "mean"), seen_over_asked=("seen_over_asked", "mean"), n=("run", "count")).reset_index()
    return out


def finding_parallel(res) -> Finding:
    r = _t(res, "random")
    one = r[r["mode"] == "pread, 1 thread"]["IOPS"].tolist()
    pool = r[r["mode"] == "pread, thread pool"]
    best_t = pool.groupby("threads")["IOPS"].mean().idxmax()
    best = pool[pool["threads"] == best_t]["IOPS"].tolist()
    mid, lo, hi = fx.ratio_interval(best, one)
    text = (f"Cold random 4 KiB reads: a pool of {best_t} threads issuing pread reached **{fx.num(_mean(best))} "
            f"IOPS**, {fx.times(mid)} ({fx.span(lo, hi, '×')}) the single thread's {fx.num(_mean(one))} IOPS")
    s = random_summary(res)
    ps = s[s["mode"] == "pread, thread pool"].sort_values("threads")
    if mid >= PARALLEL_TARGET:
        text += f", past the {fx.times(PARALLEL_TARGET)} target."
    else:
        text += f", short of {fx.times(PARALLEL_TARGET)}."
    if len(ps) >= 2:
        last, prev = ps.iloc[-1], ps.iloc[-2]
        gain = last["IOPS"] / prev["IOPS"]
        util = last["util"]
        if gain < FLAT_GAIN or (_ok(util) and util >= BUSY):
            text += (f" From {int(prev['threads'])} to {int(last['threads'])} threads IOPS changed "
                     f"{fx.times(gain)}" + (f" with the device busy {fx.pct(min(1, util))} of the time" if _ok(util) else "")
                     + ": the device (or what serves it) saturates there.")
        else:
            text += (f" IOPS still grew {fx.times(gain)} from {int(prev['threads'])} to {int(last['threads'])} "
                     "threads: more requests in flight would help further.")
    mm = r[r["mode"] == "mmap + touch"]["IOPS"].tolist()
    if mm:
        text += f" Touching a memory map at the same offsets was {fx.compare(mm, one)} one pread thread"
        soa = r[r["mode"] == "mmap + touch"]["seen_over_asked"].dropna().tolist() if "seen_over_asked" in r else []
        if soa and _mean(soa) > SAME_SIZE:
            text += (f": the storage read {fx.num(_mean(soa), '×')} the bytes it touched, because each page fault "
                     "reads around the faulting page, up to the readahead window")
        mr = r[r["mode"] == "mmap + MADV_RANDOM"]["IOPS"].tolist()
        if mr:
            text += f"; marked MADV_RANDOM, the map was {fx.compare(mr, one, same='level with')} pread"
        text += "."
    return Finding("parallel_random", text, mid, "×", interval=(lo, hi))


def finding_readahead(res) -> Finding:
    ra = _t(res, "readahead")
    meta = res.metadata.get("readahead_sysfs") or {}
    if ra.empty:
        return Finding("readahead", "The readahead experiment did not run.")
    seq = ra[ra["pattern"] == "sequential"]
    rnd = ra[ra["pattern"] == "random"]
    sys_ = seq[seq["setting"] == "read_ahead_kb"]
    text = ""
    value = None
    if not sys_.empty:
        vals = sorted(sys_["read_ahead_kb"].dropna().unique())
        lo_v, hi_v = vals[0], vals[-1]
        a = sys_[sys_["read_ahead_kb"] == hi_v]["MBps"].tolist()
        b = sys_[sys_["read_ahead_kb"] == lo_v]["MBps"].tolist()
        value = _mean(a) / _mean(b)
        chunk = size_label(int(seq["request_bytes"].iloc[0]))
        text = (f"Cold sequential {chunk} reads with read_ahead_kb = {int(hi_v):,} were "
                f"{fx.compare(a, b)} with {int(lo_v):,} ({fx.num(_mean(a), 'MB/s')} vs {fx.num(_mean(b), 'MB/s')}; "
                f"the original {meta.get('original_kb')} KiB was restored after every setting).")
        means = sys_.groupby("read_ahead_kb")["MBps"].mean()
        best_v = means.idxmax()
        if best_v not in (lo_v, hi_v) and fx.direction(sys_[sys_["read_ahead_kb"] == best_v]["MBps"].tolist(), a) > 0:
            text += f" The fastest setting was {int(best_v):,} KiB ({fx.num(means[best_v], 'MB/s')})."
        ra_r = rnd[rnd["setting"] == "read_ahead_kb"]
        ra_hi = ra_r[ra_r["read_ahead_kb"] == hi_v]["seen_over_asked"].dropna().tolist()
        ra_lo = ra_r[ra_r["read_ahead_kb"] == lo_v]["seen_over_asked"].dropna().tolist()
        if ra_hi and ra_lo:
            text += (f" For random 4 KiB reads the storage read {fx.num(_mean(ra_lo), '×')} the asked bytes at "
                     f"{int(lo_v):,} KiB and {fx.num(_mean(ra_hi), '×')} at {int(hi_v):,} KiB.")
    else:
        text = ("The device's read_ahead_kb was not changed: " + (meta.get("note") or "not asked for") + ".")
    fa = seq[seq["setting"] == "fadvise"]
    if not fa.empty:
        none = fa[fa["fadvise"] == "none"]["MBps"].tolist()
        bits = []
        for hint in ("SEQUENTIAL", "WILLNEED", "RANDOM"):
            h = fa[fa["fadvise"] == hint]["MBps"].tolist()
            if h and none:
                bits.append(f"POSIX_FADV_{hint} was {fx.compare(h, none)} no hint")
        fr = rnd[rnd["setting"] == "fadvise"]
        h = fr[fr["fadvise"] == "RANDOM"]["seen_over_asked"].dropna().tolist()
        n0 = fr[fr["fadvise"] == "none"]["seen_over_asked"].dropna().tolist()
        if h and n0:
            word = fx.choose(fx.direction(h, n0, tol=0.10), "more than", "less than", "about as much as")
            bits.append(f"for random reads the storage read {fx.num(_mean(h), '×')} the asked bytes with "
                        f"POSIX_FADV_RANDOM and {fx.num(_mean(n0), '×')} without a hint ({word} without)")
        if bits:
            text += " Per file, without root: sequentially, " + fx.and_list(bits) + "."
        if value is None and none:
            s = fa[fa["fadvise"] == "SEQUENTIAL"]["MBps"].tolist()
            value = _mean(s) / _mean(none) if s else None
    return Finding("readahead", text, value, "×" if value is not None else "")


def latency_stats(res) -> dict | None:
    lat = _t(res, "latency")
    if lat.empty or "p50_us" not in lat:
        return None
    ok = lat[lat["reads"] > 0] if "reads" in lat else lat
    first = ok[ok["series"] == "O_DIRECT, first pass"]
    warm = ok[ok["series"] == "page cache (warm)"]
    if first.empty:
        return None
    second = ok[ok["series"] == "O_DIRECT, second pass"]
    return dict(first=first["p50_us"].tolist(), warm=warm["p50_us"].tolist() if not warm.empty else [],
                second=second["p50_us"].tolist() if not second.empty else [])


def finding_virtual_disk(res) -> Finding:
    dev = res.metadata.get("device") or res.fingerprint.get("storage", {})
    floor = res.metadata.get("nand_read_floor_us", 40.0)
    lo_n, hi_n = res.metadata.get("physical_nvme_qd1_us", [60.0, 100.0])
    facts = (f"The data directory sits on {dev.get('fs_type')} ({dev.get('mount_options')}) on "
             f"{dev.get('disk') or 'no block device'}"
             + (f", scheduler {dev.get('scheduler')}, readahead {dev.get('read_ahead_kb')} KiB, "
                f"{'rotational' if dev.get('rotational') else 'non-rotational'} flag, model "
                f"{dev.get('model') or 'not reported (a virtual disk)'}" if dev.get("disk") else "") + ".")
    st = latency_stats(res)
    if st is None:
        return Finding("virtual_disk", facts + " The single-request latency check did not run here.")
    p50 = _mean(st["first"])
    below = p50 < floor
    text = (facts + f" A cold 4 KiB O_DIRECT read, one at a time, took **{fx.num(p50, 'µs')}** (median), "
            + (f"below the fastest a flash read can be ({fx.num(floor, 'µs')}) and the "
               f"{fx.num(lo_n)}–{fx.num(hi_n, 'µs')} of a physical NVMe drive: a cache under this machine answered, "
               "so \"cold\" here means cold for this machine's page cache, not for the storage below it."
               if below else
               f"within reach of flash (at least {fx.num(floor, 'µs')}; a physical NVMe drive takes about "
               f"{fx.num(lo_n)}–{fx.num(hi_n, 'µs')}): cold reads here came from a device, not from a cache below."))
    if st.get("second"):
        sec = st["second"]
        d = fx.direction(sec, st["first"], tol=0.10)
        text += (f" Read again at once, the same blocks took {fx.num(_mean(sec), 'µs')} "
                 + fx.choose(d, "(slower)", "(faster: the first pass filled a cache below this machine)",
                             "(the same: both passes were served from the same place)") + ".")
    return Finding("virtual_disk", text, p50, "µs", interval=(min(st["first"]), max(st["first"])))


# --------------------------------------------------------------------------- io_uring (experiment 3b)
def uring_summary(res) -> pd.DataFrame:
    u = _t(res, "uring")
    if u.empty:
        return u
    return u.groupby(["io_mode", "depth"], sort=True).agg(
        IOPS=("IOPS", "mean"), IOPS_min=("IOPS", "min"), IOPS_max=("IOPS", "max"), p50_us=("p50_us", "mean"),
        p99_us=("p99_us", "mean"), seen_qd=("dev_queue_depth", "mean"), util=("dev_util", "mean"),
        seen_over_asked=("seen_over_asked", "mean"), n=("run", "count")).reset_index()


def uring_table(res) -> pd.DataFrame:
    s = uring_summary(res)
    if s.empty:
        return s
    return pd.DataFrame({"reader": [f"io_uring, {m}, depth {int(d)}" for m, d in zip(s["io_mode"], s["depth"])],
                         "IOPS (mean)": s["IOPS"], "min": s["IOPS_min"], "max": s["IOPS_max"],
                         "p50 (µs)": s["p50_us"], "p99 (µs)": s["p99_us"], "seen depth": s["seen_qd"],
                         "device busy (%)": 100 * s["util"].clip(upper=1),
                         "bytes read for us ÷ asked": s["seen_over_asked"], "runs": s["n"]})


def uring_note(res) -> str:
    """What io_uring did for the cold random 4 KiB reads, beside the pread thread pool at the same offsets;
    or why it was not measured."""
    u = _t(res, "uring")
    status = res.metadata.get("io_uring_status")
    if u.empty:
        if isinstance(status, dict) and not status.get("available"):
            return f"io_uring: {status.get('note')}."
        return ("io_uring: not in the reference run (the io_uring reader was added after it); run the chapter "
                "with the ch9 extra installed to measure it here.")
    bits = []
    for mode, g in u.groupby("io_mode", sort=False):
        by = g.groupby("depth")["IOPS"].mean()
        lo_d, best_d = int(by.index.min()), int(by.idxmax())
        base = g[g["depth"] == lo_d]["IOPS"].tolist()
        best = g[g["depth"] == best_d]["IOPS"].tolist()
        bit = f"{mode}: **{fx.num(_mean(best))} IOPS** at depth {best_d}"
        if best_d != lo_d:
            bit += f", {fx.compare(best, base, more='above', less='below', same='level with')} depth {lo_d}"
        hi_d = int(by.index.max())
        if best_d < hi_d:
            bit += f" (deeper queues, up to {hi_d}, added nothing: the device, or what serves it, was saturated)"
        bits.append(bit)
    text = "Cold random 4 KiB reads through one io_uring ring (one thread, no pool): " + "; ".join(bits) + "."
    r = _t(res, "random")
    pool = r[r["mode"] == "pread, thread pool"] if not r.empty else r
    if not pool.empty:
        best_t = pool.groupby("threads")["IOPS"].mean().idxmax()
        pbest = pool[pool["threads"] == best_t]["IOPS"].tolist()
        by_all = u.groupby(["io_mode", "depth"])["IOPS"].mean()
        (m, d) = by_all.idxmax()
        ubest = u[(u["io_mode"] == m) & (u["depth"] == d)]["IOPS"].tolist()
        d_cmp = fx.direction(ubest, pbest)
        text += (f" Its best ({m}, depth {int(d)}) was {fx.compare(ubest, pbest, same='level with')} the best pread "
                 f"pool ({best_t} threads, {fx.num(_mean(pbest))} IOPS): "
                 + fx.choose(d_cmp, "one thread with a deep queue beat many threads each waiting on one read.",
                             "the thread pool kept more reads in flight, or spent less per read, than this ring.",
                             "the same number of reads in flight gives the same IOPS whoever issues them; "
                             "the device sets the pace."))
    return text


# --------------------------------------------------------------------------- path (b): what decides its share
def pipeline_shares(res) -> pd.DataFrame:
    """Each cold path-(b) run of the sweep as a share of the slower link measured in the same run:
    min(that run's ``dd`` ceiling, the PCIe ceiling)."""
    t = _t(res, "pipeline")
    if t.empty:
        return t
    if "error" in t:
        t = t[t["error"].isna()]
    dd = t[t["mode"].str.startswith("dd")].groupby("run")["GBps"].mean()
    b = t[~t["mode"].str.startswith("dd")].copy()
    pc = pcie_ceiling(res)
    ceil = b["run"].map(dd)
    if pc:
        ceil = ceil.clip(upper=pc)
    b["ceiling_GBps"] = ceil
    b["share"] = b["GBps"] / ceil
    return b.dropna(subset=["share"])


def pipeline_summary(res) -> pd.DataFrame:
    b = pipeline_shares(res)
    if b.empty:
        return b
    s = b.groupby(["mode", "chunk", "buffers"]).agg(GBps=("GBps", "mean"), share=("share", "mean"),
                                                    share_min=("share", "min"), share_max=("share", "max"),
                                                    cpu=("cpu_s_per_GB", "mean"), n=("run", "count")).reset_index()
    return s.sort_values(["share_min", "share"], ascending=False).reset_index(drop=True)


def pipeline_table(res) -> pd.DataFrame:
    s = pipeline_summary(res)
    if s.empty:
        return s
    return pd.DataFrame({"reads": s["mode"], "chunk": s["chunk"].map(lambda v: size_label(int(v))),
                         "buffers": s["buffers"].astype(int), "GB/s (mean)": s["GBps"],
                         "share of the same run's ceiling (%)": 100 * s["share"],
                         "lowest run (%)": 100 * s["share_min"], "highest run (%)": 100 * s["share_max"],
                         "CPU s per GB": s["cpu"], "runs": s["n"]})


def _effect(s: pd.DataFrame, col: str) -> float | None:
    """The main effect of ``col`` on the mean share: max − min over its values of the share averaged over
    the other settings (the sweep is a full grid); None when the sweep holds one value of it."""
    m = s.groupby(col)["share"].mean()
    return float(m.max() - m.min()) if len(m) >= 2 else None


def drift_note(res) -> str:
    """Does the disk's own drift between runs explain path (b)'s spread against the mean ceiling? From the
    main table: the spread of the ``dd`` runs beside the spread of path (b)'s runs (max ÷ min of each)."""
    dd, pin = device_ceiling(res), gpu_runs(res, PINNED, cache="cold")
    if len(dd) < 2 or len(pin) < 2:
        return ""
    dd_s, pin_s = max(dd) / min(dd), max(pin) / min(pin)
    m = _mean(dd)
    text = (f"Against the mean ceiling ({fx.num(m, 'GB/s')}) path (b)'s runs spread over "
            f"{fx.span(min(pin) / m * 100, max(pin) / m * 100, '%')}; the device's own `dd` runs spread over "
            f"{fx.span(min(dd), max(dd), 'GB/s')} ({fx.times(dd_s)} max ÷ min, path (b): {fx.times(pin_s)}). ")
    d = fx.direction(dd_s, pin_s, tol=0.02)
    text += fx.choose(d, "The disk drifts between runs more than path (b) does: most of that spread is the disk's, "
                         "not the pipeline's, so each run must be set against a ceiling measured in the same run.",
                      "Path (b) varies more than the disk between runs: the pipeline itself (its chunk, its buffers, "
                      "its readahead) adds variation, which the sweep below measures.",
                      "The disk drifts between runs about as much as path (b) does: that spread is mostly the disk's, "
                      "so each run must be set against a ceiling measured in the same run.")
    return text


def pipeline_note(res) -> str:
    """Which chunk × buffers × read mode keeps path (b) closest to the disk on every run, and which of the
    three decides it; or, where the run lacks the sweep, what the main table already says about the spread."""
    s = pipeline_summary(res)
    drift = drift_note(res)
    if s.empty:
        return ((drift + " " if drift else "") + "The chunk × buffers sweep of path (b), buffered and O_DIRECT, each "
                "run paired with a `dd` ceiling of the same run, is not in the reference run; it runs where CUDA "
                "is available.").strip()
    best = s.iloc[0]
    n_runs, n_hit = int(best["n"]), None
    b = pipeline_shares(res)
    rows = b[(b["mode"] == best["mode"]) & (b["chunk"] == best["chunk"]) & (b["buffers"] == best["buffers"])]
    n_hit = int((rows["share"] >= PIPELINE_TARGET).sum())
    text = (f"Steadiest path (b): **{best['mode']} reads, {size_label(int(best['chunk']))} chunks × "
            f"{int(best['buffers'])} pinned buffers**, {fx.span(100 * best['share_min'], 100 * best['share_max'], '%')} "
            f"of the slower link measured in the same run (mean {fx.pct(best['share'])}): ")
    text += (f"at or above the {fx.pct(PIPELINE_TARGET)} target on every one of its {n_runs} runs."
             if n_hit == n_runs else f"at or above the {fx.pct(PIPELINE_TARGET)} target on {n_hit} of {n_runs} runs.")
    eff = {name: _effect(s, col) for name, col in (("the chunk size", "chunk"), ("the number of buffers", "buffers"),
                                                    ("O_DIRECT versus buffered reads", "mode"))}
    eff = {k: v for k, v in eff.items() if v is not None}
    if eff:
        top = max(eff, key=eff.get)
        parts = [f"{k} {fx.num(100 * v)} points" for k, v in eff.items()]
        text += (f" Averaged over the other settings, each setting moves the mean share by: {fx.and_list(parts)}; "
                 + ("none of them moves it by two points: the disk, not the pipeline's settings, sets the pace."
                    if eff[top] < 0.02 else
                    f"{top} decides it." if all(eff[top] - v >= 0.01 for k, v in eff.items() if k != top) else
                    "the largest effects are level (within a point), so this sweep cannot tell them apart."))
    od, bu = s[s["mode"] == "O_DIRECT"], s[s["mode"] == "buffered"]
    ra = (res.metadata.get("device") or {}).get("read_ahead_kb")
    if len(bu) and _ok(ra) and ra:
        c = int(bu.iloc[0]["chunk"])
        d = fx.direction(c, ra * 1024, tol=0.0)
        text += (f" The best buffered chunk ({size_label(c)}) is "
                 + fx.choose(d, "larger than", "smaller than", "the same size as")
                 + f" the device's readahead window ({size_label(int(ra) * 1024)}).")
    if len(od) and len(bu):
        o, u = od.iloc[0], bu.iloc[0]
        if _ok(o["cpu"]) and _ok(u["cpu"]):
            text += (f" At their best settings O_DIRECT used {fx.num(o['cpu'], 's')} of CPU per GB against "
                     f"buffered reads' {fx.num(u['cpu'], 's')} ({fx.compare([u['cpu']], [o['cpu']], more='more than', less='less than', same='about the same as')} "
                     "the O_DIRECT path's: buffered reads also copy out of the page cache).")
    return (drift + " " + text).strip() if drift else text


def findings(res) -> list[Finding]:
    return [finding_to_gpu(res), finding_gds(res), finding_parallel(res), finding_asked_vs_seen(res),
            finding_readahead(res), finding_virtual_disk(res)]


# --------------------------------------------------------------------------- notes and tables
def gpu_table(res) -> pd.DataFrame:
    """Per path: GB/s (mean ± std, min–max), CPU s per GB, % of the PCIe and device ceilings, bytes checked."""
    g = _gpu_ok(res)
    dev, pc = _mean(device_ceiling(res)), pcie_ceiling(res)
    rows = []
    for (path, cache), d in g.groupby(["path", "cache"], sort=False):
        m = d["GBps"].mean()
        rows.append({"path": path, "cache": cache, "GB/s (mean)": m, "min": d["GBps"].min(), "max": d["GBps"].max(),
                     "CPU s per GB": d["cpu_s_per_GB"].mean(),
                     "% of PCIe ceiling": 100 * m / pc if pc else float("nan"),
                     "% of device's cold read": 100 * m / dev if _ok(dev) else float("nan"),
                     "bytes checked": "all equal" if d["verified"].all() else "MISMATCH", "runs": len(d)})
    return pd.DataFrame(rows)


def gpu_chart_data(res) -> pd.DataFrame:
    g = _gpu_ok(res)
    s = summarise(g, ["path", "cache"], "GBps")
    return s


def ceilings_text(res) -> str:
    dev = device_ceiling(res)
    pc = res.metadata.get("pcie_ceiling") or {}
    out = (f"Ceilings measured in this run: the device's cold sequential read of the same file with `dd bs=1M` "
           f"(chapter 2's check) {fx.num(_mean(dev), 'GB/s')} ({fx.span(min(dev), max(dev), 'GB/s')} over "
           f"{len(dev)} runs)" if dev else "No device ceiling was measured")
    if pc.get("available"):
        out += (f"; a pinned host-to-device copy of {size_label(int(pc['size']))} through a second path "
                f"(chapter 6's independent ceiling) {fx.num(pc['GBps'], 'GB/s')}.")
    else:
        out += "; no PCIe ceiling (no GPU)."
    note = fx.spread_note("The device's cold read", dev, "GB/s") if dev else None
    return out + (" " + note if note else "")


def grid_chart_data(res) -> pd.DataFrame:
    s = asked_vs_seen(res)
    return s


def asked_seen_table(res) -> pd.DataFrame:
    s = asked_vs_seen(res)
    if s.empty:
        return s
    return pd.DataFrame({
        "mode": s["mode"], "asked size": s["size"].map(lambda v: size_label(int(v))), "threads (asked depth)": s["threads"],
        "MB/s": s["MBps"], "p50 latency (µs)": s["p50_us"], "p99 latency (µs)": s["p99_us"],
        "seen request size": s["seen_request"].map(lambda v: size_label(int(v)) if _ok(v) else "—"),
        "seen ÷ asked size": s["request_ratio"], "seen depth": s["seen_qd"],
        "device busy (%)": 100 * s["util"].clip(upper=1), "bytes read for us ÷ asked": s["seen_over_asked"],
        "our share of device reads (%)": 100 * s["own_share"],
    })


def random_table(res) -> pd.DataFrame:
    s = random_summary(res)
    if s.empty:
        return s
    return pd.DataFrame({"reader": s["variant"], "IOPS (mean)": s["IOPS"], "min": s["IOPS_min"], "max": s["IOPS_max"],
                         "p50 (µs)": s["p50_us"], "p99 (µs)": s["p99_us"],
                         "seen request": s["seen_request"].map(lambda v: size_label(int(v)) if _ok(v) else "—"),
                         "seen depth": s["seen_qd"], "bytes read for us ÷ asked": s["seen_over_asked"], "runs": s["n"]})


def readahead_table(res) -> pd.DataFrame:
    ra = _t(res, "readahead")
    if ra.empty:
        return ra
    ra = ra.assign(setting_label=[f"read_ahead_kb = {int(v):,}" if s == "read_ahead_kb" else
                                  ("no hint" if h == "none" else f"POSIX_FADV_{h}")
                                  for s, v, h in zip(ra["setting"], ra["read_ahead_kb"], ra["fadvise"])])
    out = ra.groupby(["setting_label", "pattern"], sort=False).agg(
        MBps=("MBps", "mean"), MBps_min=("MBps", "min"), MBps_max=("MBps", "max"),
        seen_request=("dev_request_bytes", "mean"), seen_over_asked=("seen_over_asked", "mean"),
        n=("run", "count")).reset_index()
    return pd.DataFrame({"setting": out["setting_label"], "reads": out["pattern"], "MB/s (mean)": out["MBps"],
                         "min": out["MBps_min"], "max": out["MBps_max"],
                         "seen request": out["seen_request"].map(lambda v: size_label(int(v)) if _ok(v) else "—"),
                         "bytes read for us ÷ asked": out["seen_over_asked"], "runs": out["n"]})


def readahead_note(res) -> str:
    meta = res.metadata.get("readahead_sysfs") or {}
    log = res.metadata.get("readahead_changes") or []
    if not meta.get("used"):
        return ("The device's `read_ahead_kb` was left alone: " + (meta.get("note") or "not asked for")
                + ". The per-file hints below need no privilege.")
    restored = [e for e in log if "restored" in e]
    ok = all(e["read_back"] == e["restored"] for e in restored)
    return (f"`read_ahead_kb` of the device was set {len(restored)} times and restored to its original "
            f"{meta.get('original_kb')} KiB after each, " + ("read back equal every time." if ok else
                                                            "but a read-back differed: see the result's metadata."))


def gds_table(res) -> pd.DataFrame:
    gds = res.metadata.get("gds") or {}
    keys = ["path", "version", "compat_mode", "compat_preferred", "gds_available", "nvidia_fs", "run_udev", "error"]
    return pd.DataFrame([{"check": k, "value": str(gds.get(k))} for k in keys])


def storage_table(res) -> pd.DataFrame:
    d = res.metadata.get("device") or {}
    keys = ["fs_type", "mount_point", "mount_options", "disk", "model", "rotational", "scheduler", "read_ahead_kb",
            "max_sectors_kb", "nr_requests", "logical_block_size"]
    return pd.DataFrame([{"fact": k, "value": str(d.get(k))} for k in keys])


def storage_notes(res) -> str:
    """What each storage fact means for this chapter's results, from the facts themselves."""
    d = res.metadata.get("device") or {}
    notes = []
    opts = str(d.get("mount_options") or "")
    if "noatime" in opts:
        notes.append("`noatime`: reads do not write access times")
    elif "relatime" in opts:
        notes.append("`relatime`: a read updates the access time at most once a day per file, so reads cost "
                     "almost no metadata writes (`noatime` removes the rest)")
    else:
        notes.append("neither `noatime` nor `relatime`: every read of a file may write its access time")
    sch = d.get("scheduler")
    if sch:
        notes.append(f"scheduler `{sch}`: " + ("requests go to the device in the order they come (the usual choice for "
                                               "NVMe)" if sch == "none" else
                                               "requests are sorted and batched with deadlines; at high queue depth on "
                                               "fast flash it costs some CPU per request" if sch == "mq-deadline" else
                                               "a fair-queueing scheduler: it trades throughput for fairness"))
    if d.get("model") is None and d.get("disk"):
        notes.append(f"`{d.get('disk')}` reports no model: a virtual disk, whose reads may be served from the host's "
                     "cache")
    if d.get("rotational") and str(d.get("disk", "")).startswith("vd"):
        notes.append("the rotational flag of a virtio disk is the driver's default, not a fact about the storage below")
    if d.get("max_sectors_kb"):
        notes.append(f"max_sectors_kb {d.get('max_sectors_kb')}: larger requests are split into pieces of this size")
    return "; ".join(notes) + "." if notes else "No storage facts were recorded."


def no_gpu_text(res, ref) -> str:
    why = res.metadata.get("gpu_note") or "no CUDA device"
    if ref is None or not has_gpu(ref):
        return f"Nothing was read into GPU memory here ({why}), and no reference run with a GPU is committed."
    return (f"Nothing was read into GPU memory on this machine ({why}). The charts and tables of this section show "
            f"the **reference run** ({ref.fingerprint.get('gpu', {}).get('name')}, run {ref.run_id}), labelled.")


def takeaways(res) -> str:
    items = []
    s = random_summary(res)
    if not s.empty:
        one = s[s["mode"] == "pread, 1 thread"]["IOPS"].mean()
        best = s[s["mode"] == "pread, thread pool"].sort_values("IOPS").iloc[-1]
        items.append(f"Random small reads: keep requests in flight. {int(best['threads'])} threads gave "
                     f"{fx.times(best['IOPS'] / one)} the IOPS of one here.")
    if has_gpu(res):
        f = finding_to_gpu(res)
        items.append(f"Disk to GPU: two pinned buffers and an asynchronous copy reached {fx.pct(f.values['share'])} "
                     "of the slower link here; the copy hides behind the read.")
    gds = res.metadata.get("gds") or {}
    if gds.get("kvikio") and gds.get("path") != "GDS":
        items.append(f"kvikio ran in {gds.get('path')}: check `is_gds_available` before expecting a GDS gain.")
    return "\n".join(f"* {i}" for i in items)
