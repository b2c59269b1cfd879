"""What chapter 9's page says about a result of :mod:`datajourney.chapters.c09_reading_smarter.experiment`:
the opening, key findings, the published metrics, computed notes and the display tables and charts of the
notebook. Every number and direction word comes from the result."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from datajourney.chapters.c09_reading_smarter import experiment as reading
from datajourney.chapters.c09_reading_smarter.experiment import CHAPTER, classify_gds  # noqa: F401 - CHAPTER re-exported for the notebook
from datajourney.core import charts as plotting
from datajourney.core import findings as fx
from datajourney.core.findings import Action, Finding, Opening, size_label
from datajourney.core.stats import mean, summarise

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
        out["storage → GPU memory through the CPU"] = (mean(v), pd.Series(v).std() if len(v) > 1 else None)
    gds = res.metadata.get("gds") or {}
    if gds.get("path") == "GDS":   # never a compatibility-mode number under the GDS name
        best = max(kvikio_paths(res), key=lambda p: mean(gpu_runs(res, p, cache="cold")), default=None)
        if best:
            w = gpu_runs(res, best, cache="cold")
            out["storage → GPU memory with GDS"] = (mean(w), pd.Series(w).std() if len(w) > 1 else None)
            if "storage → GPU memory through the CPU" in out:
                out["GDS gain over the CPU path"] = (
                    100
                    * (out["storage → GPU memory with GDS"][0] / out["storage → GPU memory through the CPU"][0] - 1),
                    None,
                )
    return out


# --------------------------------------------------------------------------- findings
#: Each path to GPU memory by its letter in the chapter's table of paths, and in a few words.
PATH_NAMES = {"pageable + copy": ("a", "pageable reads, each copied before the next"),
              PINNED: ("b", "two pinned buffers, one read while the other is copied"),
              "mmap + pinned": ("c", "a memory map copied through pinned buffers")}


def path_letter(path: str) -> str:
    """'(b) pinned, double-buffered': a path's name with its letter in the chapter's table of paths; (d) is kvikio,
    (e) the preloaded (warm) paths."""
    letter = (PATH_NAMES.get(path, ("",))[0] or ("d" if str(path).startswith("kvikio") else "e"))
    return f"({letter}) {path}"


def path_words(path: str) -> str:
    """A path in a few words a reader needs no table for."""
    if path in PATH_NAMES:
        return PATH_NAMES[path][1]
    if str(path).startswith("kvikio"):
        threads = str(path).rsplit(", ", 1)[-1]
        return f"kvikio with {threads}" + (" (GDS)" if ", GDS," in f"{path}," else " (not GDS)")
    return str(path)


def _path_b(res) -> dict | None:
    return (res.metadata.get("gds") or {}).get("path_b")


def _b_mode(pb: dict) -> str:
    """How path (b) really read: O_DIRECT only where the file system took it."""
    return "O_DIRECT" if pb.get("direct") else "buffered"


def _setting(mode: str, chunk: int, buffers: int) -> str:
    return f"{mode}, {size_label(int(chunk))} × {int(buffers)}"


def path_b_setting(res) -> str:
    """How this run's path (b) read the file: O_DIRECT or through the page cache, its chunk and buffers.
    Runs made before O_DIRECT became path (b)'s default read through the page cache."""
    pb = _path_b(res)
    chunk = int((pb or {}).get("chunk") or res.parameters.get("gpu_chunk") or 0)
    size = size_label(chunk) if chunk else "unknown"
    if pb is None:
        return (f"reads through the page cache in {size} chunks: this run predates O_DIRECT as path (b)'s "
                "default")
    n = int(pb.get("buffers") or 2)
    if pb.get("direct"):
        return f"O_DIRECT reads of {size} into {n} aligned buffers"
    if pb.get("mode") == "buffered":
        return f"buffered reads of {size} into {n} buffers"
    return f"reads through the page cache in {size} chunks: {pb.get('note') or 'O_DIRECT was not used'}"


def path_b_choice(res) -> str:
    """Why path (b) read at its setting: the sweep's best, the run's parameters, the fallback, or (a run made
    before the sweep chose it) the run's fixed setting."""
    pb = _path_b(res) or {}
    by = pb.get("by")
    if not by:
        return "a fixed setting of this run, made before the sweep chose it"
    n = int(pb.get("settings") or 0)
    ways = set(by.values())
    if ways == {"sweep"}:
        return f"the best of the sweep's {n} setting{'s' if n != 1 else ''}, measured first"
    if ways == {"parameter"}:
        return "set by the run's parameters"
    if ways == {"fallback"}:
        return "the fallback setting: no sweep ran to choose from"
    parts = [f"{k} by {'the ' + v if v != 'parameter' else 'parameter'}" for k, v in sorted(by.items())]
    return fx.and_list(parts)


def cold_paths(res) -> pd.Series:
    """Mean cold GB/s of each path to GPU memory, fastest first."""
    g = _gpu_ok(res)
    if g.empty:
        return pd.Series(dtype=float)
    return g[g["cache"] == "cold"].groupby("path")["GBps"].mean().sort_values(ascending=False)


def dd_runs(res) -> list[float]:
    """Every ``dd`` read of this chapter: the main table's and the sweep's (GB/s)."""
    t = _t(res, "pipeline")
    sweep = t[t["mode"].str.startswith("dd")]["GBps"].astype(float).tolist() if not t.empty else []
    return device_ceiling(res) + sweep


def fastest_read(res) -> tuple[str, float] | None:
    """The fastest single cold read of a file in this chapter (a path to GPU memory or a sweep setting)."""
    cands = []
    g = _gpu_ok(res)
    if not g.empty:
        c = g[g["cache"] == "cold"]
        cands += [(path_letter(p), float(v)) for p, v in zip(c["path"], c["GBps"])]
    b = pipeline_shares(res)
    if not b.empty:
        cands += [(f"path (b) at {_setting(m, c, n)}", float(v))
                  for m, c, n, v in zip(b["mode"], b["chunk"], b["buffers"], b["GBps"])]
    return max(cands, key=lambda x: x[1]) if cands else None


def disk_ceiling(res) -> float | None:
    """The highest of every ``dd`` read of the chapter, where no cold read went faster (then it is the disk's
    ceiling); None where a read went faster than every ``dd`` run, or no ``dd`` ran."""
    dd = dd_runs(res)
    top = fastest_read(res)
    if not dd or (top is not None and top[1] > max(dd)):
        return None
    return max(dd)


def _slower_link(res) -> tuple[list[float], str, str]:
    """The slower of the two links this run measured: its runs (GB/s), its name in the long text and its
    name in a few words."""
    dev, pc = device_ceiling(res), pcie_ceiling(res)
    if dev and (not pc or mean(dev) <= pc):
        return dev, "the device's cold sequential read (`dd`)", "the disk's own `dd` read"
    return ([pc] if pc else []), "the PCIe copy", "the PCIe copy alone"


def finding_to_gpu(res) -> Finding:
    if not has_gpu(res):
        return Finding("to_gpu", "No file was read into GPU memory in this run ("
                       + (res.metadata.get("gpu_note") or "no CUDA device") + "): the reference run's paths to GPU "
                       "memory are shown below, labelled.")
    b = gpu_runs(res, PINNED, cache="cold")
    link, which, _ = _slower_link(res)
    limit = mean(link) if link else float("nan")
    share = mean(b) / limit if link else float("nan")
    lo, hi = (min(b) / limit, max(b) / limit) if link else (float("nan"),) * 2
    verdict = fx.choose(fx.direction(b, link), ", faster than that link's own measurement",
                        "", ": reading into GPU memory cost next to nothing beyond that link") if link else ""
    text = (f"Cold, a {size_label(int(_t(res, 'gpu')['bytes'].iloc[0]))} file reached GPU memory at "
            f"**{fx.num(mean(b), 'GB/s')}** through path (b), two pinned buffers, one read while the other is "
            f"copied ({path_b_setting(res)}; {path_b_choice(res)}): {fx.pct(share)} "
            f"({fx.span(100 * lo, 100 * hi, '%')}) of the slower link, {which} at "
            f"{fx.num(limit, 'GB/s')}{verdict}.")
    return Finding("to_gpu", text, mean(b), "GB/s", published="storage → GPU memory through the CPU",
                   interval=(min(b), max(b)), values=dict(share=share, limit=limit))


def best_setting(res) -> pd.Series | None:
    """The chunk × buffers × mode sweep's best setting (:func:`experiment.sweep_summary`'s order: highest
    lowest-run share of the same run's slower link, then highest mean); None without a sweep."""
    s = pipeline_summary(res)
    return None if s.empty else s.iloc[0]


def gpu_note(res) -> str:
    """The cold paths to GPU memory ranked by this run's means, and how path (b) compares with the simplest."""
    ranked = cold_paths(res)
    if ranked.empty:
        return ""
    text = ("Cold paths, fastest first: "
            + ", ".join(f"{path_letter(p)} {fx.num(v, 'GB/s')}" for p, v in ranked.items()) + ".")
    a, b = gpu_runs(res, "pageable + copy", cache="cold"), gpu_runs(res, PINNED, cache="cold")
    if a and b:
        text += (f" Path (a), pageable reads each copied before the next, was "
                 f"{fx.compare(a, b, more='faster than', less='slower than')} path (b).")
    return text


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
    best = _best_kvikio(res)
    k, b = gpu_runs(res, best, cache="cold"), gpu_runs(res, PINNED, cache="cold")
    label = "GDS" if mode == "GDS" else f"{mode}, not GDS"
    text = (f"kvikio ran in **{mode}** ({why}). Its fastest setting ({best.rsplit(', ', 1)[-1]}) read the cold file "
            f"into GPU memory at {fx.num(mean(k), 'GB/s')} ({label}), "
            f"{fx.compare(k, b, more='faster than', less='slower than')} path (b), the pinned buffers.")
    return Finding("gds", text, mean(k), "GB/s", interval=(min(k), max(k)),
                   published="storage → GPU memory with GDS" if mode == "GDS" else None)


def _best_kvikio(res) -> str | None:
    kv = kvikio_paths(res) if has_gpu(res) else []
    return max(kv, key=lambda p: mean(gpu_runs(res, p, cache="cold"))) if kv else None


def gds_note(res) -> str:
    """Beside the GDS finding: kvikio's CPU time per GB against path (b)'s, and whether the published GDS gain
    can be reproduced here."""
    best = _best_kvikio(res)
    if best is None:
        return ""
    ck, cb = gpu_runs(res, best, "cpu_s_per_GB", "cold"), gpu_runs(res, PINNED, "cpu_s_per_GB", "cold")
    text = (f"kvikio's fastest setting used {fx.num(mean(ck), 's')} of CPU time per GB against path (b)'s "
            f"{fx.num(mean(cb), 's')} ({fx.choose(fx.direction(ck, cb, tol=0.10), 'more', 'less', 'about the same')}).")
    if (res.metadata.get("gds") or {}).get("path") != "GDS":
        text += " The published GDS gain cannot be reproduced on this machine: its data still pass through host memory."
    return text


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
        return Finding(
            "asked_vs_seen",
            "The device's own counters could not be read here ("
            + ("the data directory is not on a block device" if not dev else f"no /proc/diskstats line for {dev}")
            + "), so only the program's side of each request is shown.",
        )
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
    return Finding("asked_vs_seen", "Asked vs seen: " + "; ".join(parts) + ".", head, "×",
                   values=dict(small=int(small)))


def asked_seen_note(res) -> str:
    """Beside the asked-vs-seen table: how the largest O_DIRECT requests were split, the queue depth the device
    saw and where the rest of each request's time went, and how much of what the device read was ours."""
    s = asked_vs_seen(res)
    if s.empty or not s["seen_request"].notna().any():
        return ""
    small = s["size"].min()
    text = ""
    big = s[(s["mode"] == "O_DIRECT") & (s["size"] == s["size"].max()) & s["seen_request"].notna()].sort_values(
        "threads"
    )
    if not big.empty and s["size"].max() > small:
        text += _split_text(res, big)
    text += _depth_text(res, s)
    own = contamination(res)
    if own is not None and own < OWN_SHARE:
        text += (f" Caution: in some cells only {fx.pct(own)} of what the device read was this process's "
                 "(/proc/self/io); other processes used the same device meanwhile, so its averages mix their "
                 "requests with ours.")
    elif own is not None:
        text += f" At least {fx.pct(own)} of what the device read in every cell was this process's (/proc/self/io)."
    return text.strip()


def random_summary(res) -> pd.DataFrame:
    r = _t(res, "random")
    if r.empty:
        return r
    r = r.assign(
        variant=[m if m != "pread, thread pool" else f"pread, {t} threads" for m, t in zip(r["mode"], r["threads"])]
    )
    out = r.groupby(["variant", "mode", "threads"], sort=False).agg(
        IOPS=("IOPS", "mean"), IOPS_min=("IOPS", "min"), IOPS_max=("IOPS", "max"), p50_us=("p50_us", "mean"),
        p99_us=("p99_us", "mean"), seen_request=("dev_request_bytes", "mean"), seen_qd=("dev_queue_depth", "mean"),
        util=("dev_util", "mean"), seen_over_asked=("seen_over_asked", "mean"), n=("run", "count")).reset_index()
    return out


def finding_parallel(res) -> Finding:
    pool = _best_pool(res)
    if pool is None:
        return Finding("parallel_random", "No pread thread pool was measured in this run.")
    t, best, one = pool
    mid, lo, hi = fx.ratio_interval(best, one)
    text = (f"Cold random 4 KiB reads: a pool of {t} threads issuing pread reached **{fx.num(mean(best))} "
            f"IOPS**, {fx.times(mid)} ({fx.span(lo, hi, '×')}) the single thread's {fx.num(mean(one))} IOPS.")
    s = random_summary(res)
    ps = s[s["mode"] == "pread, thread pool"].sort_values("threads")
    if len(ps) >= 2:
        last, prev = ps.iloc[-1], ps.iloc[-2]
        gain = last["IOPS"] / prev["IOPS"]
        util = last["util"]
        if gain < FLAT_GAIN or (_ok(util) and util >= BUSY):
            text += (
                f" From {int(prev['threads'])} to {int(last['threads'])} threads IOPS changed "
                f"{fx.times(gain)}"
                + (f" with the device busy {fx.pct(min(1, util))} of the time" if _ok(util) else "")
                + ": the device (or what serves it) saturates there."
            )
        else:
            text += (f" IOPS still grew {fx.times(gain)} from {int(prev['threads'])} to {int(last['threads'])} "
                     "threads: more requests in flight would help further.")
    return Finding("parallel_random", text, mid, "×", interval=(lo, hi))


def random_note(res) -> str:
    """A memory map at the same random offsets against one pread thread, and what its page faults read."""
    r = _t(res, "random")
    one = r[r["mode"] == "pread, 1 thread"]["IOPS"].tolist() if not r.empty else []
    mm = r[r["mode"] == "mmap + touch"]["IOPS"].tolist() if not r.empty else []
    if not (mm and one):
        return ""
    text = f"Touching a memory map at the same offsets was {fx.compare(mm, one)} one pread thread"
    soa = r[r["mode"] == "mmap + touch"]["seen_over_asked"].dropna().tolist() if "seen_over_asked" in r else []
    if soa and mean(soa) > SAME_SIZE:
        text += (f": the storage read {fx.num(mean(soa), '×')} the bytes it touched, because each page fault "
                 "reads around the faulting page, up to the readahead window")
    mr = r[r["mode"] == "mmap + MADV_RANDOM"]["IOPS"].tolist()
    if mr:
        text += f"; marked MADV_RANDOM, the map was {fx.compare(mr, one, same='level with')} pread"
    return text + "."


def finding_readahead(res) -> Finding:
    ra = _t(res, "readahead")
    meta = res.metadata.get("readahead_sysfs") or {}
    if ra.empty:
        return Finding("readahead", "The readahead experiment did not run.")
    seq = ra[ra["pattern"] == "sequential"]
    pair = _readahead_pair(res)
    value = mean(pair[1]) / mean(pair[3]) if pair is not None else None
    if not seq[seq["setting"] == "read_ahead_kb"].empty:
        la, a, lb, b = pair
        chunk = size_label(int(seq["request_bytes"].iloc[0]))
        text = (f"Cold sequential {chunk} reads with {la} were {fx.compare(a, b)} with {lb} "
                f"({fx.num(mean(a), 'MB/s')} vs {fx.num(mean(b), 'MB/s')}; the original {meta.get('original_kb')} "
                "KiB was restored after every setting).")
    else:
        text = "The device's read_ahead_kb was not changed: " + (meta.get("note") or "not asked for") + "."
        if pair is not None:
            la, a, lb, b = pair
            text += f" Per file, cold sequential reads with {la} were {fx.compare(a, b)} reads with {lb}."
    return Finding("readahead", text, value, "×" if value is not None else "")


def readahead_more(res) -> str:
    """Beside the readahead table: the fastest read_ahead_kb where it is neither end, what random reads cost at
    each end, and the per-file hints (no root needed)."""
    ra = _t(res, "readahead")
    if ra.empty:
        return ""
    seq = ra[ra["pattern"] == "sequential"]
    rnd = ra[ra["pattern"] == "random"]
    sys_ = seq[seq["setting"] == "read_ahead_kb"]
    text = ""
    if not sys_.empty:
        vals = sorted(sys_["read_ahead_kb"].dropna().unique())
        lo_v, hi_v = vals[0], vals[-1]
        a = sys_[sys_["read_ahead_kb"] == hi_v]["MBps"].tolist()
        means = sys_.groupby("read_ahead_kb")["MBps"].mean()
        best_v = means.idxmax()
        if best_v not in (lo_v, hi_v) and fx.direction(sys_[sys_["read_ahead_kb"] == best_v]["MBps"].tolist(), a) > 0:
            text += f" The fastest setting was {int(best_v):,} KiB ({fx.num(means[best_v], 'MB/s')})."
        ra_r = rnd[rnd["setting"] == "read_ahead_kb"]
        ra_hi = ra_r[ra_r["read_ahead_kb"] == hi_v]["seen_over_asked"].dropna().tolist()
        ra_lo = ra_r[ra_r["read_ahead_kb"] == lo_v]["seen_over_asked"].dropna().tolist()
        if ra_hi and ra_lo:
            text += (f" For random 4 KiB reads the storage read {fx.num(mean(ra_lo), '×')} the asked bytes at "
                     f"{int(lo_v):,} KiB and {fx.num(mean(ra_hi), '×')} at {int(hi_v):,} KiB.")
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
            bits.append(f"for random reads the storage read {fx.num(mean(h), '×')} the asked bytes with "
                        f"POSIX_FADV_RANDOM and {fx.num(mean(n0), '×')} without a hint ({word} without)")
        if bits:
            text += " Per file, without root: sequentially, " + fx.and_list(bits) + "."
    return text.strip()


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
    where = f"On {dev.get('disk') or 'no block device'} ({dev.get('fs_type')}),"
    st = latency_stats(res)
    if st is None:
        return Finding("virtual_disk", f"{where} the single-request latency check did not run.")
    p50 = mean(st["first"])
    below = p50 < floor
    text = (f"{where} a cold 4 KiB O_DIRECT read, one at a time, took **{fx.num(p50, 'µs')}** (median), "
            + (f"below the fastest a flash read can be ({fx.num(floor, 'µs')}) and the "
               f"{fx.num(lo_n)}–{fx.num(hi_n, 'µs')} of a physical NVMe drive: a cache under this machine answered, "
               "so \"cold\" here means cold for this machine's page cache, not for the storage below it."
               if below else
               f"within reach of flash (at least {fx.num(floor, 'µs')}; a physical NVMe drive takes about "
               f"{fx.num(lo_n)}–{fx.num(hi_n, 'µs')}): cold reads here came from a device, not from a cache below."))
    return Finding("virtual_disk", text, p50, "µs", interval=(min(st["first"]), max(st["first"])))


def latency_note(res) -> str:
    """Beside the latency chart: the same blocks read again at once, against the first pass."""
    st = latency_stats(res)
    if st is None or not st.get("second"):
        return ""
    sec = st["second"]
    d = fx.direction(sec, st["first"], tol=0.10)
    return (f"Read again at once, the same blocks took {fx.num(mean(sec), 'µs')} against "
            f"{fx.num(mean(st['first']), 'µs')} "
            + fx.choose(d, "(slower)", "(faster: the first pass filled a cache below this machine)",
                        "(the same: both passes were served from the same place)") + ".")


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
                         "IOPS (mean)": s["IOPS"],
                         "IOPS over runs": [fx.span(lo, hi) for lo, hi in zip(s["IOPS_min"], s["IOPS_max"])],
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
        bit = f"{mode}: **{fx.num(mean(best))} IOPS** at depth {best_d}"
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
                 f"pool ({best_t} threads, {fx.num(mean(pbest))} IOPS): "
                 + fx.choose(d_cmp, "one thread with a deep queue beat many threads each waiting on one read.",
                             "the thread pool kept more reads in flight, or spent less per read, than this ring.",
                             "the same number of reads in flight gives the same IOPS whoever issues them; "
                             "the device sets the pace."))
    return text


# --------------------------------------------------------------------------- path (b): what decides its share
def pipeline_shares(res) -> pd.DataFrame:
    """Each cold path-(b) run of the sweep as a share of the slower link measured in the same run."""
    return reading.sweep_shares(_t(res, "pipeline"), pcie_ceiling(res))


def pipeline_summary(res) -> pd.DataFrame:
    """One row per swept setting, best first (:func:`experiment.sweep_summary`)."""
    return reading.sweep_summary(_t(res, "pipeline"), pcie_ceiling(res))


def _share_basis(res) -> str:
    """What the sweep's shares are of: the same run's ``dd`` read, or the PCIe copy where that was lower."""
    b = pipeline_shares(res)
    pc = pcie_ceiling(res)
    clipped = bool(pc) and not b.empty and bool((b["ceiling_GBps"] >= pc).any())
    return "the same run's slower link (dd or PCIe)" if clipped else "the same run's dd read"


def pipeline_table(res) -> pd.DataFrame:
    s = pipeline_summary(res)
    if s.empty:
        return s
    basis = "dd or PCIe" if "PCIe" in _share_basis(res) else "dd"
    return pd.DataFrame({"reads": s["mode"], "chunk": s["chunk"].map(lambda v: size_label(int(v))),
                         "pinned buffers": s["buffers"].astype(int), "GB/s (mean)": s["GBps"],
                         f"% of same run's {basis} (mean)": 100 * s["share"],
                         "% over runs": [fx.span(100 * lo, 100 * hi) for lo, hi in zip(s["share_min"], s["share_max"])],
                         "CPU s per GB": s["cpu"], "runs": s["n"].astype(int)})


def _effect(s: pd.DataFrame, col: str) -> float | None:
    """The main effect of ``col`` on the mean share: max − min over its values of the share averaged over
    the other settings (the sweep is a full grid); None when the sweep holds one value of it."""
    m = s.groupby(col)["share"].mean()
    return float(m.max() - m.min()) if len(m) >= 2 else None


def drift_note(res) -> str:
    """Does the disk's own drift between runs explain path (b)'s spread against the mean ``dd`` read? From the
    main table: the spread of the ``dd`` runs beside the spread of path (b)'s runs (max ÷ min of each)."""
    dd, pin = device_ceiling(res), gpu_runs(res, PINNED, cache="cold")
    if len(dd) < 2 or len(pin) < 2:
        return ""
    dd_s, pin_s = max(dd) / min(dd), max(pin) / min(pin)
    m = mean(dd)
    text = (f"Against the mean `dd` read ({fx.num(m, 'GB/s')}) path (b)'s runs spread over "
            f"{fx.span(min(pin) / m * 100, max(pin) / m * 100, '%')}; the device's own `dd` runs spread over "
            f"{fx.span(min(dd), max(dd), 'GB/s')} ({fx.times(dd_s)} max ÷ min, path (b): {fx.times(pin_s)}). ")
    d = fx.direction(dd_s, pin_s, tol=0.02)
    text += fx.choose(d, "The disk drifts between runs more than path (b) does: most of that spread is the disk's, "
                         "not the pipeline's, so each run must be set against a `dd` read of the same run.",
                      "Path (b) varies more than the disk between runs: the pipeline itself (its chunk, its buffers, "
                      "its readahead) adds variation, which the sweep below measures.",
                      "The disk drifts between runs about as much as path (b) does: that spread is mostly the disk's, "
                      "so each run must be set against a `dd` read of the same run.")
    return text


def _runs_of(b: pd.DataFrame, row) -> list[float]:
    return b[(b["mode"] == row["mode"]) & (b["chunk"] == row["chunk"]) & (b["buffers"] == row["buffers"])][
        "GBps"].astype(float).tolist()


def pipeline_note(res) -> str:
    """The sweep's best and slowest settings, which setting path (b) used and why, whether any setting read
    faster than ``dd``, and which of chunk, buffers and read mode moves the share most."""
    s = pipeline_summary(res)
    drift = drift_note(res)
    if s.empty:
        return ((drift + " " if drift else "") + "The chunk × buffers sweep of path (b), buffered and O_DIRECT, each "
                "run paired with a `dd` read of the same run, is not in this result; it runs where CUDA "
                "is available.").strip()
    b = pipeline_shares(res)
    best, worst, k = s.iloc[0], s.iloc[-1], len(s)
    n = int(best["n"])
    basis = _share_basis(res)
    spread = ("in its one run" if n == 1 else
              f"{fx.span(100 * best['share_min'], 100 * best['share_max'], '%')} over its {n} runs")
    name = _setting(best["mode"], best["chunk"], best["buffers"])
    text = (f"Best of the sweep's {k} setting{'s' if k != 1 else ''}: **{name} pinned buffers**, "
            f"{fx.num(best['GBps'], 'GB/s')}, {fx.pct(best['share'])} of {basis} ({spread}).")
    if k > 1:
        text += (f" The slowest, {_setting(worst['mode'], worst['chunk'], worst['buffers'])}, read "
                 f"{fx.num(worst['GBps'], 'GB/s')}: the best was "
                 f"{fx.compare(_runs_of(b, best), _runs_of(b, worst), same='level with')} it.")
    pb = _path_b(res) or {}
    if pb.get("chunk"):
        mode = _b_mode(pb)
        mine = s[(s["mode"] == mode) & (s["chunk"] == int(pb["chunk"])) & (s["buffers"] == int(pb.get("buffers") or 2))]
        used = _setting(mode, pb["chunk"], pb.get("buffers") or 2)
        if not mine.empty and mine.index[0] == 0:
            text += f" Path (b) above read at this best setting ({path_b_choice(res)})."
        elif not mine.empty:
            text += (f" Path (b) above read at {used} ({path_b_choice(res)}), which in the sweep was "
                     f"{fx.compare(_runs_of(b, mine.iloc[0]), _runs_of(b, best), same='level with')} the best.")
        else:
            text += f" Path (b) above read at {used} ({path_b_choice(res)}), a setting the sweep did not include."
    over = b[b["share"] > 1]
    if len(over):
        text += (f" {len(over)} of the sweep's {len(b)} reads went faster than the same run's `dd` (up to "
                 f"{fx.pct(over['share'].max())}): `dd` reads 1 MiB at a time through the page cache, and is no "
                 "ceiling for these settings.")
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
            text += (
                f" At their best settings O_DIRECT used {fx.num(o['cpu'], 's')} of CPU per GB against "
                f"buffered reads' {fx.num(u['cpu'], 's')} "
                f"({fx.compare([u['cpu']], [o['cpu']], more='more than', less='less than', same='about the same as')} "
                "the O_DIRECT path's: buffered reads also copy out of the page cache)."
            )
    return (drift + " " + text).strip() if drift else text


def findings(res) -> list[Finding]:
    return [finding_to_gpu(res), finding_gds(res), finding_parallel(res), finding_asked_vs_seen(res),
            finding_readahead(res), finding_virtual_disk(res)]


# --------------------------------------------------------------------------- notes and tables
def gpu_table(res) -> pd.DataFrame:
    """Per path, cold ones fastest first and then the warm ones: GB/s (mean, lowest and highest run), CPU s per
    GB, % of the PCIe copy and of the mean ``dd`` read, bytes checked."""
    g = _gpu_ok(res)
    dev, pc = mean(device_ceiling(res)), pcie_ceiling(res)
    rows = []
    for (path, cache), d in g.groupby(["path", "cache"], sort=False):
        m = d["GBps"].mean()
        rows.append({"path": path_letter(path), "cache": cache, "GB/s (mean)": m,
                     "GB/s over runs": fx.span(d["GBps"].min(), d["GBps"].max()),
                     "CPU s per GB": d["cpu_s_per_GB"].mean(),
                     "% of the PCIe copy": 100 * m / pc if pc else float("nan"),
                     "% of dd's cold read": 100 * m / dev if _ok(dev) else float("nan"),
                     "bytes checked": "all equal" if d["verified"].all() else "MISMATCH", "runs": len(d)})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["cache", "GB/s (mean)"], ascending=[True, False]).reset_index(drop=True)


def hbars(rows: pd.DataFrame, *, title: str, xaxis: str, unit: str, line: float | None = None,
          line_label: str = "") -> go.Figure:
    """Horizontal bars (long labels stay readable) of ``rows`` (``label``, ``mean``, ``min``, ``max``, ``n``),
    largest on top; with two runs or more a min–max bar named in the axis title (never a standard deviation);
    ``line``: a dashed reference value."""
    r = rows.sort_values("mean")
    n = int(r["n"].max()) if len(r) else 0
    err = (dict(type="data", symmetric=False, array=r["max"] - r["mean"], arrayminus=r["mean"] - r["min"])
           if n >= 2 else None)
    fig = go.Figure(go.Bar(y=r["label"], x=r["mean"], orientation="h", marker_color=plotting.PALETTE[0],
                           error_x=err, customdata=list(zip(r["min"], r["max"], r["n"])),
                           hovertemplate=(f"<b>%{{y}}</b><br>mean %{{x:,.3~r}} {unit}<br>lowest "
                                          "%{customdata[0]:,.3~r}, highest %{customdata[1]:,.3~r}, "
                                          "runs: %{customdata[2]}<extra></extra>")))
    if line is not None:
        fig.add_vline(x=line, line=dict(dash="dash", color="#555555"),
                      annotation_text=line_label, annotation_position="top")
    spread = f" (bars: min–max over {n} runs)" if n >= 2 else " (one run)"
    fig.update_layout(title=title, showlegend=False, height=max(260, 60 + 34 * len(r)), margin=dict(l=10))
    fig.update_xaxes(title_text=xaxis + spread, rangemode="tozero", tickformat=",.3~r")
    fig.update_yaxes(type="category", automargin=True)
    return fig


def gpu_chart(res, title: str) -> go.Figure:
    """The cold paths to GPU memory, fastest on top, with the mean ``dd`` read as a dashed line."""
    g = _gpu_ok(res)
    c = g[g["cache"] == "cold"]
    s = summarise(c, ["path"], "GBps").assign(label=lambda d: d["path"].map(path_letter))
    dev = device_ceiling(res)
    return hbars(s, title=title, xaxis="GB/s", unit="GB/s", line=mean(dev) if dev else None,
                 line_label="dd, cold (mean)")


def pipeline_chart(res, title: str) -> go.Figure:
    """Every swept setting of path (b) as a share of the same run's ``dd`` read, best on top; 100% dashed."""
    b = pipeline_shares(res).copy()
    b["label"] = [_setting(m, c, n) for m, c, n in zip(b["mode"], b["chunk"], b["buffers"])]
    b["share_pct"] = 100 * b["share"]
    return hbars(summarise(b, ["label"], "share_pct"), title=title, unit="%", line=100.0,
                 xaxis=f"% of {_share_basis(res)}", line_label="= dd")


def random_chart(res, title: str) -> go.Figure:
    """Cold random 4 KiB reads: IOPS of each reader, fastest on top."""
    r = _t(res, "random")
    r = r.assign(label=[m if m != "pread, thread pool" else f"pread, {t} threads"
                        for m, t in zip(r["mode"], r["threads"])])
    return hbars(summarise(r, ["label"], "IOPS"), title=title, xaxis="reads per second (IOPS)", unit="IOPS")


def ceilings_text(res) -> str:
    """The two links measured in this run, and whether the disk's ``dd`` read is a ceiling here."""
    dev = device_ceiling(res)
    pc = res.metadata.get("pcie_ceiling") or {}
    every = dd_runs(res)
    out = (f"Measured in this run: the device's cold sequential read of the same file with `dd bs=1M` "
           f"(chapter 2's check) {fx.num(mean(dev), 'GB/s')} ({fx.span(min(dev), max(dev), 'GB/s')} over "
           f"{len(dev)} run{'s' if len(dev) != 1 else ''})" if dev else "No `dd` read was measured")
    if pc.get("available"):
        out += (f"; a pinned host-to-device copy of {size_label(int(pc['size']))} through a second path "
                f"(chapter 6's independent ceiling) {fx.num(pc['GBps'], 'GB/s')}.")
    else:
        out += "; no PCIe ceiling (no GPU)."
    top, ceiling = fastest_read(res), disk_ceiling(res)
    if every and ceiling is not None:
        out += (f" The fastest of the chapter's {len(every)} `dd` runs, {fx.num(ceiling, 'GB/s')}, is the disk's "
                "ceiling here: no cold read went faster.")
    elif every and top is not None:
        out += (f" The disk has no measured ceiling here: {top[0]} read {fx.num(top[1], 'GB/s')}, faster than "
                f"every one of the chapter's {len(every)} `dd` runs (at most {fx.num(max(every), 'GB/s')}).")
    note = fx.spread_note("The device's cold read", dev, "GB/s") if dev else None
    return out + (" " + note if note else "")


def asked_seen_table(res) -> pd.DataFrame:
    s = asked_vs_seen(res)
    if s.empty:
        return s
    return pd.DataFrame(
        {
            "mode": s["mode"],
            "asked size": s["size"].map(lambda v: size_label(int(v))),
            "threads (asked depth)": s["threads"],
            "MB/s": s["MBps"],
            "p50 latency (µs)": s["p50_us"],
            "p99 latency (µs)": s["p99_us"],
            "seen request size": s["seen_request"].map(lambda v: size_label(int(v)) if _ok(v) else "—"),
            "seen depth": s["seen_qd"],
            "device busy (%)": 100 * s["util"].clip(upper=1),
            "bytes read for us ÷ asked": s["seen_over_asked"],
        }
    )


def random_table(res) -> pd.DataFrame:
    s = random_summary(res)
    if s.empty:
        return s
    return pd.DataFrame({"reader": s["variant"], "IOPS (mean)": s["IOPS"],
                         "IOPS over runs": [fx.span(lo, hi) for lo, hi in zip(s["IOPS_min"], s["IOPS_max"])],
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
                         "MB/s over runs": [fx.span(lo, hi) for lo, hi in zip(out["MBps_min"], out["MBps_max"])],
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


#: What kvikio reports, in words (the result's keys on the right).
GDS_CHECKS = {"kvikio's path": "path", "kvikio version": "version", "compatibility mode setting": "compat_mode",
              "KvikIO prefers its POSIX path": "compat_preferred", "cuFile reports GDS available": "gds_available",
              "nvidia-fs module loaded": "nvidia_fs", "/run/udev present": "run_udev", "error": "error"}
#: The storage facts of the data directory, in words.
STORAGE_FACTS = {"file system": "fs_type", "mount point": "mount_point", "mount options": "mount_options",
                 "disk": "disk", "model": "model", "rotational flag": "rotational", "I/O scheduler": "scheduler",
                 "readahead (KiB)": "read_ahead_kb", "largest request (max_sectors_kb)": "max_sectors_kb",
                 "queue size (nr_requests)": "nr_requests", "logical block size (bytes)": "logical_block_size"}


def gds_table(res) -> pd.DataFrame:
    gds = res.metadata.get("gds") or {}
    return pd.DataFrame([{"check": k, "value": str(gds.get(v))} for k, v in GDS_CHECKS.items()])


def storage_table(res) -> pd.DataFrame:
    d = res.metadata.get("device") or {}
    return pd.DataFrame([{"fact": k, "value": str(d.get(v))} for k, v in STORAGE_FACTS.items()])


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


# --------------------------------------------------------------------------- the opening
def _double_buffer_snippet(imports: str, setup: str, fill: str, chunk: int, buffers: int, comment: str,
                           close: str = "") -> str:
    """Code that reads a file into GPU memory through ``buffers`` pinned buffers of ``chunk`` bytes: a buffer is
    refilled (``fill``) only after its last asynchronous copy finished, as the chapter's paths (b) and (c) do."""
    return f'''{imports}
import torch

CHUNK, BUFFERS = {chunk >> 20} << 20, {buffers}   # {comment}
{setup}
gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
raw = [torch.empty(CHUNK + 4096, dtype=torch.uint8, pin_memory=True) for _ in range(BUFFERS)]
bufs = [r[(-r.data_ptr()) % 4096:][:CHUNK] for r in raw]   # 4 KiB-aligned, as O_DIRECT needs
done, stream, off, i = [None] * BUFFERS, torch.cuda.Stream(), 0, 0
while off < size:
    k = i % BUFFERS
    if done[k] is not None:
        done[k].synchronize()             # this buffer's last copy has finished
    {fill}
    with torch.cuda.stream(stream):
        gpu[off:off + n].copy_(bufs[k][:n], non_blocking=True)
        done[k] = torch.cuda.Event()
        done[k].record(stream)
    off, i = off + n, i + 1
torch.cuda.synchronize(){close}'''


def _b_snippet(mode: str, chunk: int, buffers: int) -> str:
    """Path (b) as code, with a setting filled in."""
    flag = " | os.O_DIRECT" if mode == "O_DIRECT" else ""
    return _double_buffer_snippet("import os", f"fd = os.open(path, os.O_RDONLY{flag})\nsize = os.fstat(fd).st_size",
                                  "n = os.preadv(fd, [bufs[k].numpy()], off)", chunk, buffers,
                                  f"{mode} reads of {size_label(chunk)} into {buffers} buffers",
                                  close="\nos.close(fd)")


def _path_snippet(res, path: str) -> str | None:
    """The winning path to GPU memory as code, with this run's setting."""
    chunk = int(res.parameters.get("gpu_chunk") or 1 << 24)
    if path == PINNED:
        pb = _path_b(res) or {}
        mode = _b_mode(pb)
        return _b_snippet(mode, int(pb.get("chunk") or chunk), int(pb.get("buffers") or 2))
    if str(path).startswith("kvikio"):
        threads = int(str(path).rsplit(", ", 1)[-1].split()[0])
        task = int(res.parameters.get("kvikio_task") or 1 << 22)
        return (f'import os\nimport kvikio\nimport kvikio.defaults\nimport torch\n\n'
                f'gpu = torch.empty(os.path.getsize(path), dtype=torch.uint8, device="cuda")\n'
                f'with kvikio.defaults.set({{"num_threads": {threads}, "task_size": {task >> 20} << 20}}):\n'
                f'    with kvikio.CuFile(path, "r") as f:\n        f.read(gpu)')
    if path == "pageable + copy":
        return (f'import os\nimport torch\n\nCHUNK = {chunk >> 20} << 20\n'
                f'gpu = torch.empty(os.path.getsize(path), dtype=torch.uint8, device="cuda")\n'
                f'buf = torch.empty(CHUNK, dtype=torch.uint8)\noff = 0\n'
                f'with open(path, "rb", buffering=0) as f:\n    while n := f.readinto(buf.numpy()):\n'
                f'        gpu[off:off + n].copy_(buf[:n])\n        off += n')
    if path == "mmap + pinned":
        return _double_buffer_snippet(
            "import mmap", 'with open(path, "rb") as f:\n    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n'
            "m.madvise(mmap.MADV_SEQUENTIAL)\nsrc, size = torch.frombuffer(m, dtype=torch.uint8), len(m)",
            "n = min(CHUNK, size - off)\n    bufs[k][:n].copy_(src[off:off + n])   # page faults read the file",
            chunk, 2, f"a memory map copied through 2 pinned buffers of {size_label(chunk)}")
    return None


POOL_SNIPPET = '''import os
from concurrent.futures import ThreadPoolExecutor

fd = os.open(path, os.O_RDONLY)
with ThreadPoolExecutor(max_workers={threads}) as pool:   # {threads} reads in flight at once
    records = list(pool.map(lambda off: os.pread(fd, 4096, off), offsets))'''


def _best_pool(res) -> tuple[int, list[float], list[float]] | None:
    """(threads, IOPS runs) of the fastest pread pool, and the single thread's IOPS runs."""
    r = _t(res, "random")
    if r.empty:
        return None
    pool = r[r["mode"] == "pread, thread pool"]
    one = r[r["mode"] == "pread, 1 thread"]["IOPS"].tolist()
    if pool.empty or not one:
        return None
    t = int(pool.groupby("threads")["IOPS"].mean().idxmax())
    return t, pool[pool["threads"] == t]["IOPS"].tolist(), one


def _readahead_pair(res) -> tuple[str, list[float], str, list[float]] | None:
    """The readahead comparison the chapter leads with: the largest read_ahead_kb against the smallest
    (root), else POSIX_FADV_SEQUENTIAL against no hint; (label, MB/s runs) of each side."""
    ra = _t(res, "readahead")
    if ra.empty:
        return None
    seq = ra[ra["pattern"] == "sequential"]
    sys_ = seq[seq["setting"] == "read_ahead_kb"]
    if not sys_.empty:
        vals = sorted(sys_["read_ahead_kb"].dropna().unique())
        lo_v, hi_v = vals[0], vals[-1]
        return (f"read_ahead_kb = {int(hi_v):,}", sys_[sys_["read_ahead_kb"] == hi_v]["MBps"].tolist(),
                f"read_ahead_kb = {int(lo_v):,}", sys_[sys_["read_ahead_kb"] == lo_v]["MBps"].tolist())
    fa = seq[seq["setting"] == "fadvise"]
    s, none = fa[fa["fadvise"] == "SEQUENTIAL"]["MBps"].tolist(), fa[fa["fadvise"] == "none"]["MBps"].tolist()
    return ("POSIX_FADV_SEQUENTIAL", s, "no hint", none) if s and none else None


def _opening_findings(res) -> list[Finding]:
    out = []
    if has_gpu(res):
        long = finding_to_gpu(res)
        b = gpu_runs(res, PINNED, cache="cold")
        link, _, short = _slower_link(res)
        pb = _path_b(res) or {}
        mode = _b_mode(pb)
        setting = _setting(mode, pb.get("chunk") or res.parameters.get("gpu_chunk"), pb.get("buffers") or 2)
        out.append(Finding("to_gpu", f"Cold, two pinned buffers read in turn ({setting}) moved a "
                           f"{size_label(int(_t(res, 'gpu')['bytes'].iloc[0]))} file into GPU memory at "
                           f"**{fx.num(mean(b), 'GB/s')}**, {fx.compare(b, link, same='level with')} {short}.",
                           long.value, "GB/s", published=long.published, interval=long.interval))
        ranked = cold_paths(res)
        top = ranked.index[0]
        if top == PINNED and len(ranked) > 1:
            nxt = ranked.index[1]
            text = (f"Of {len(ranked)} cold paths to GPU memory the pinned buffers were fastest, "
                    f"{fx.compare(b, gpu_runs(res, nxt, cache='cold'), same='level with')} {path_words(nxt)}.")
        else:
            text = (f"Of {len(ranked)} cold paths to GPU memory the fastest was {path_words(top)}, "
                    f"**{fx.num(ranked.iloc[0], 'GB/s')}**, "
                    f"{fx.compare(gpu_runs(res, top, cache='cold'), b, same='level with')} the pinned buffers.")
        out.append(Finding("fastest_path", text, float(ranked.iloc[0]), "GB/s"))
    pool = _best_pool(res)
    if pool is not None:
        t, best, one = pool
        mid, lo, hi = fx.ratio_interval(best, one)
        out.append(Finding("parallel_random", f"Cold random 4 KiB reads from {t} threads issuing `pread` ran "
                           f"**{fx.compare(best, one, same='level with')}** one thread ({fx.num(mean(best))} against "
                           f"{fx.num(mean(one))} IOPS).", mid, "×", interval=(lo, hi)))
    pair = _readahead_pair(res)
    if pair is not None and len(out) < 3:
        la, a, lb, b2 = pair
        out.append(Finding("readahead", f"Cold sequential reads with {la} ran "
                           f"**{fx.compare(a, b2, same='level with')}** reads with {lb} "
                           f"({fx.num(mean(a), 'MB/s')} against {fx.num(mean(b2), 'MB/s')}).", mean(a) / mean(b2), "×"))
    st = latency_stats(res)
    if st is not None and len(out) < 3:
        p50, floor = mean(st["first"]), res.metadata.get("nand_read_floor_us", 40.0)
        where = ("faster than any flash read, so a cache below this machine answered" if p50 < floor else
                 "as slow as a flash read, so cold reads reached the device")
        out.append(Finding("virtual_disk", f"A cold 4 KiB read took **{fx.num(p50, 'µs')}**, {where}.", p50, "µs",
                           interval=(min(st["first"]), max(st["first"]))))
    return out[:fx.OPENING_FINDINGS]


def _path_action(res) -> Action:
    ranked = cold_paths(res)
    top = ranked.index[0]
    base = "pageable + copy"
    t, a = gpu_runs(res, top, cache="cold"), gpu_runs(res, base, cache="cold")
    if top != base and a and fx.direction(t, a) > 0:
        extra = ""
        if top == PINNED:
            pb = _path_b(res) or {}
            mode = _b_mode(pb)
            extra = f" at {_setting(mode, pb.get('chunk') or 0, pb.get('buffers') or 2)}"
        return Action(f"Move files into GPU memory with {path_words(top)}{extra}: the fastest of this run's "
                      f"{len(ranked)} cold paths, {fx.compare(t, a)} pageable reads copied one by one.",
                      _path_snippet(res, top))
    return Action(f"Plain reads copied to the GPU chunk by chunk ({fx.num(mean(a), 'GB/s')}) ran "
                  f"{fx.compare(a, t, same='level with')} the fastest of this run's {len(ranked)} cold paths, "
                  f"{path_words(top)} ({fx.num(ranked.iloc[0], 'GB/s')}): no special path is needed here.",
                  _path_snippet(res, base))


def _sweep_action(res) -> Action | None:
    s = pipeline_summary(res)
    if len(s) < 2:
        return None
    b = pipeline_shares(res)
    best, worst = s.iloc[0], s.iloc[-1]
    d = fx.direction(_runs_of(b, best), _runs_of(b, worst))
    if d <= 0:
        return Action(f"Path (b)'s chunk, buffer count and read mode made no clear difference here: the best and "
                      f"the slowest of its {len(s)} settings were {fx.compare(_runs_of(b, best), _runs_of(b, worst))}"
                      " each other; keep the simplest.")
    return Action(f"With pinned buffers, read {_setting(best['mode'], best['chunk'], best['buffers'])} (mode, chunk "
                  f"× buffers): the best of this run's {len(s)} settings, "
                  f"{fx.compare(_runs_of(b, best), _runs_of(b, worst))} the slowest "
                  f"({_setting(worst['mode'], worst['chunk'], worst['buffers'])}).",
                  _b_snippet(str(best["mode"]), int(best["chunk"]), int(best["buffers"])))


def _pool_action(res) -> Action | None:
    pool = _best_pool(res)
    if pool is None:
        return None
    t, best, one = pool
    if fx.direction(best, one) > 0:
        return Action(f"Issue random small reads from a pool of {t} threads: {fx.compare(best, one)} one thread "
                      "here, cold.", POOL_SNIPPET.format(threads=t))
    return Action(f"Keep random small reads on one thread: the best pool here ({t} threads) ran "
                  f"{fx.compare(best, one, same='level with')} one thread, so more threads do not help on this "
                  "storage.")


def _fadvise_action(res) -> Action | None:
    ra = _t(res, "readahead")
    if ra.empty:
        return None
    fr = ra[(ra["pattern"] == "random") & (ra["setting"] == "fadvise")]
    h = fr[fr["fadvise"] == "RANDOM"]["seen_over_asked"].dropna().tolist()
    n0 = fr[fr["fadvise"] == "none"]["seen_over_asked"].dropna().tolist()
    if not (h and n0):
        return None
    if fx.direction(n0, h, tol=0.10) > 0:
        return Action(f"Mark files read at random with `POSIX_FADV_RANDOM`: without it the storage read "
                      f"{fx.num(mean(n0), '×')} the asked bytes here, with it {fx.num(mean(h), '×')}.",
                      "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)   # no readahead for this file")
    return Action(f"Leave readahead alone for random reads: the storage read {fx.num(mean(n0), '×')} the asked bytes "
                  f"without a hint and {fx.num(mean(h), '×')} with `POSIX_FADV_RANDOM`, so the hint changed nothing "
                  "here.")


def opening(res) -> Opening:
    """What chapter 9 opens with: how fast a cold file reached GPU memory through the pinned buffers and which
    cold path was fastest (or, without a GPU, readahead and the cold read's latency), and the pread pool's
    gain; then what to do, each chosen from this run's ranking (the path to GPU memory, path (b)'s setting,
    random reads), or what to run where the run cannot tell."""
    actions = []
    if has_gpu(res) and not cold_paths(res).empty:
        actions += [_path_action(res), _sweep_action(res), _pool_action(res)]
    else:
        actions += [Action("Run this chapter on a machine with a CUDA GPU (`python -m datajourney run 9`) to rank "
                           "the paths from a file into GPU memory: this run read none"
                           f" ({res.metadata.get('gpu_note') or 'no CUDA device'})."),
                    _pool_action(res), _fadvise_action(res)]
    return Opening(_opening_findings(res), [a for a in actions if a is not None][:3])


def takeaways(res) -> str:
    """What this means for a training job: the opening's actions, and whether a GDS gain can be expected here."""
    items = [a.text for a in opening(res).actions]
    gds = res.metadata.get("gds") or {}
    if gds.get("kvikio") and gds.get("path") != "GDS":
        items.append(f"kvikio ran in {gds.get('path')}: check `is_gds_available` before expecting a GDS gain.")
    return "\n".join(f"* {i}" for i in items)
