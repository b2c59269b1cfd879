"""What chapter 9's page says: the opening and the key results word the facts of
:mod:`~datajourney.chapters.c09_reading_smarter.analysis` (through :mod:`~datajourney.core.phrasing`); the notes,
tables and charts of the notebook show the result's tables as evidence. Every string from a result that reaches
Markdown goes through :func:`~datajourney.core.phrasing.text` or :func:`~datajourney.core.phrasing.code`."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from datajourney.chapters.c09_reading_smarter import analysis
from datajourney.chapters.c09_reading_smarter.analysis import CHAPTER  # noqa: F401 - re-exported for the notebook
from datajourney.core import charts as plotting
from datajourney.core import findings as fx
from datajourney.core import phrasing
from datajourney.core.facts import Facts, host_label
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


def _gpu_ok(res) -> pd.DataFrame:
    g = _t(res, "gpu")
    if not g.empty and "error" in g:
        g = g[g["error"].isna()]
    return g


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
            note = str(status.get("note") or "")
            why = (" Install the book's ch9 extra to measure io_uring." if "liburing" in note else
                   " Container seccomp profiles and the sysctl kernel.io\\_uring\\_disabled commonly block it."
                   if "refused" in note else "")
            return f"io_uring: {phrasing.text(note)}.{why}"
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


#: What kvikio reports, in words (the result's keys on the right).
GDS_CHECKS = {"kvikio's path": "path", "kvikio version": "version", "compatibility mode setting": "compat_mode",
              "KvikIO prefers its POSIX path": "compat_preferred", "cuFile reports GDS available": "gds_available",
              "nvidia-fs module loaded": "nvidia_fs", "/run/udev present": "run_udev", "error": "error"}
#: The storage facts of the data directory, in words.
STORAGE_FACTS = {"file system": "fs_type", "mount point": "mount_point", "mount options": "mount_options",
                 "disk": "disk", "model": "model", "rotational flag": "rotational", "I/O scheduler": "scheduler",
                 "readahead (KiB)": "read_ahead_kb", "largest request (max_sectors_kb)": "max_sectors_kb",
                 "queue size (nr_requests)": "nr_requests", "logical block size (bytes)": "logical_block_size"}


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




# --------------------------------------------------------------------------- evidence helpers (tables, notes)
def has_gpu(res) -> bool:
    return "gpu" in res.tables and len(res.table("gpu")) > 0


def pipeline_shares(res) -> pd.DataFrame:
    """Each cold path-(b) run of the sweep as a share of the slower link measured in the same run."""
    return analysis.sweep_shares(_t(res, "pipeline"), pcie_ceiling(res))


def pipeline_summary(res) -> pd.DataFrame:
    """One row per swept setting, best first (:func:`analysis.sweep_summary`)."""
    return analysis.pipeline_summary(res)


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


def gpu_errors(res) -> list[str]:
    """Each failed path and its error, as Markdown (the error, a string from the result, in a code span)."""
    g = _t(res, "gpu")
    if g.empty or "error" not in g:
        return []
    return [f"{phrasing.text(p)}: {phrasing.code(e)}" for p, e in dict.fromkeys(zip(g["path"], g["error"]))
            if isinstance(e, str)]


def readahead_note(res) -> str:
    meta = res.metadata.get("readahead_sysfs") or {}
    log = res.metadata.get("readahead_changes") or []
    if not meta.get("used"):
        return ("The device's `read_ahead_kb` was left alone: " + phrasing.text(meta.get("note") or "not asked for")
                + ". The per-file hints below need no privilege.")
    restored = [e for e in log if "restored" in e]
    ok = all(e["read_back"] == e["restored"] for e in restored)
    return (f"`read_ahead_kb` of the device was set {len(restored)} times and restored to its original "
            f"{fx.num(meta.get('original_kb'))} KiB after each, "
            + ("read back equal every time." if ok else "but a read-back differed: see the result's metadata."))


def _cell(v) -> str:
    """A value of the result's metadata as a table cell: yes/no for flags, a dash for nothing, else plain text."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return fx.num(v)
    return str(v)


def gds_table(res) -> pd.DataFrame:
    gds = res.metadata.get("gds") or {}
    return pd.DataFrame([{"check": k, "value": _cell(gds.get(v))} for k, v in GDS_CHECKS.items()])


def storage_table(res) -> pd.DataFrame:
    d = res.metadata.get("device") or {}
    return pd.DataFrame([{"fact": k, "value": _cell(d.get(v))} for k, v in STORAGE_FACTS.items()])


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
        notes.append(f"scheduler {phrasing.code(sch)}: " + (
            "requests go to the device in the order they come (the usual choice for NVMe)" if sch == "none" else
            "requests are sorted and batched with deadlines; at high queue depth on fast flash it costs some CPU "
            "per request" if sch == "mq-deadline" else "a fair-queueing scheduler: it trades throughput for fairness"))
    if d.get("model") is None and d.get("disk"):
        notes.append(f"{phrasing.code(d.get('disk'))} reports no model: a virtual disk, whose reads may be served "
                     "from the host's cache")
    if d.get("rotational") and str(d.get("disk", "")).startswith("vd"):
        notes.append("the rotational flag of a virtio disk is the driver's default, not a fact about the storage below")
    if d.get("max_sectors_kb"):
        notes.append(f"max_sectors_kb {fx.num(d.get('max_sectors_kb'))}: larger requests are split into pieces of "
                     "this size")
    return "; ".join(notes) + "." if notes else "No storage facts were recorded."


def no_gpu_text(res, ref) -> str:
    why = phrasing.text(res.metadata.get("gpu_note") or "no CUDA device")
    if ref is None or not has_gpu(ref):
        return f"Nothing was read into GPU memory here ({why}), and no reference run with a GPU is committed."
    return (f"Nothing was read into GPU memory in this run ({why}). The charts and tables of this section show "
            f"the **reference run** ({phrasing.text(host_label(ref.fingerprint))}, run {phrasing.code(ref.run_id)}), "
            "labelled.")


def key_metrics(res) -> dict:
    """Metric name (as in published.py) -> (value, None) of this result, from its facts: a rate is published
    beside only the fact the analysis marked as the same metric."""
    facts = _facts(res)
    return {f.published: (f.number, None) for f in facts.facts.values()
            if f.published and f.number is not None and not f.is_comparison}


def _facts(res) -> Facts:
    return res.facts if getattr(res, "facts", None) is not None else analysis.analyse(res)


# --------------------------------------------------------------------------- findings: words for facts
def _cmp(facts: Facts, key: str) -> str:
    c = facts.get(key)
    return phrasing.comparison(c, facts) if c is not None else ""


def _to_gpu(facts: Facts, short: bool) -> Finding:
    f = facts["to_gpu"]
    if f.number is None:
        why = phrasing.text(f.setting.get("why") or "no CUDA device")
        return Finding("to_gpu", f"No file was read into GPU memory in this run ({why}): the reference run's paths "
                       "to GPU memory are shown below, labelled.")
    size = size_label(int(f.setting.get("bytes") or facts.data.get("file_bytes") or 0))
    n = facts.number("cold_paths")
    text = (f"Cold, the fastest of {fx.num(n)} paths into GPU memory, {phrasing.text(f.label)}, moved a {size} file "
            f"at **{phrasing.value(f, runs=not short)}**: {_cmp(facts, 'to_gpu_vs_dd')}")
    if not short:
        text += f", and {_cmp(facts, 'to_gpu_vs_pcie')}"
        if f.setting.get("measured_in") == "sweep":
            text += " (path (b) at the best setting of its sweep, timed in the sweep)"
    return Finding("to_gpu", text + ".", f.number, f.unit, published=f.published, interval=f.spread)


def _gds(facts: Facts) -> Finding:
    st = facts.data.get("gds_status") or {}
    if not st.get("kvikio"):
        return Finding("gds", "kvikio (cuFile) is not installed here, so whether GPUDirect Storage works was not "
                       "tested; the reference run's answer is shown below.")
    mode = st.get("path") or "unknown"
    why = (f"cuFile reports GDS {'available' if st.get('gds_available') else 'not available'}, "
           f"KvikIO {'prefers' if st.get('compat_preferred') else 'does not prefer'} its POSIX path, "
           f"nvidia-fs is {'loaded' if st.get('nvidia_fs') else 'not loaded'}")
    f = facts.get("gds")
    if f is None:
        errs = facts.data.get("gds_errors") or []
        return Finding("gds", f"kvikio runs in {phrasing.code(mode)} here ({why}); "
                       + (f"its reads failed: {phrasing.code(errs[0])}." if errs else
                          "nothing was read into GPU memory in this run."))
    label = "GDS" if mode == "GDS" else "not GDS"
    text = (f"kvikio ran in {phrasing.code(mode)} ({why}). Its fastest setting, {phrasing.text(f.label)}, read the "
            f"cold file into GPU memory at {phrasing.value(f)} ({label})")
    if "gds_vs_path_b" in facts:
        text += f", {_cmp(facts, 'gds_vs_path_b')}"
    return Finding("gds", text + ".", f.number, f.unit, published=f.published, interval=f.spread)


def _parallel(facts: Facts, short: bool) -> Finding | None:
    c = facts.get("parallel_random")
    if c is None:
        return None if short else Finding("parallel_random", "No pread thread pool was measured in this run.")
    pool = facts["random_pool"]
    if short:
        t = pool.setting.get("threads")
        return Finding("parallel_random", f"Cold random 4 KiB reads from {t} threads issuing `pread` ran "
                       f"**{_cmp(facts, 'parallel_random')}**.", c.number, "×")
    text = (f"Cold random 4 KiB reads: {phrasing.text(pool.label)} reached **{phrasing.value(pool)}**, "
            f"{_cmp(facts, 'parallel_random')}.")
    step = facts.get("pool_step")
    if step is not None:
        last, prev = facts["random_pool_last"], facts["random_pool_prev"]
        busy = facts.get("pool_busy")
        span_ = f"From {prev.setting['threads']} to {last.setting['threads']} threads"
        if facts["pool_saturates"].value == "yes":
            text += (f" {span_} IOPS were {phrasing.ratio_words(step) or 'unchanged'}"
                     + (f" with the device busy {phrasing.share(busy.number)} of the time" if busy else "")
                     + ": the device (or what serves it) saturates there.")
        else:
            text += f" {span_} IOPS still grew ({phrasing.ratio_words(step)}): more requests in flight would help."
    return Finding("parallel_random", text, c.number, "×")


def _asked(facts: Facts) -> Finding:
    f = facts.get("asked_vs_seen")
    if f is None:
        dev = facts.data.get("diskstats_device")
        return Finding("asked_vs_seen", "The device's own counters could not be read here ("
                       + ("the data directory is not on a block device" if not dev else
                          f"no /proc/diskstats line for {phrasing.code(dev)}")
                       + "), so only the program's side of each request is shown.")
    parts = []
    for mode in ("buffered", "O_DIRECT"):
        m = facts.get(f"asked_vs_seen.{mode}")
        if m is None:
            continue
        v = m.setting["verdict"]
        what = "the same size" if v == "same" else f"{fx.num(m.number, '×')} {v}"
        parts.append(f"{mode} {size_label(m.setting['asked'])} requests reached the device as "
                     f"{size_label(m.setting['seen'])} requests on average ({what})")
    return Finding("asked_vs_seen", "Asked vs seen: " + "; ".join(parts) + ".", f.number, "×")


def _readahead(facts: Facts, short: bool) -> Finding | None:
    c = facts.get("readahead")
    meta = facts.data.get("readahead_sysfs") or {}
    if c is None:
        if short:
            return None
        if not meta.get("used"):
            return Finding("readahead", "The device's read_ahead_kb was not changed: "
                           + phrasing.text(meta.get("note") or "not asked for") + ".")
        return Finding("readahead", "The readahead experiment did not run.")
    hi, lo = facts["readahead_high"], facts["readahead_low"]
    if short:
        return Finding("readahead", f"Cold sequential reads with {phrasing.text(hi.label)} ran "
                       f"**{_cmp(facts, 'readahead')}** ({phrasing.value(hi, runs=False)} against "
                       f"{phrasing.value(lo, runs=False)}).", c.number, "×")
    if hi.setting.get("how") == "sysfs":
        chunk = hi.setting.get("chunk")
        text = (f"Cold sequential {size_label(chunk) + ' ' if chunk else ''}reads with {phrasing.text(hi.label)} were "
                f"{_cmp(facts, 'readahead')} ({phrasing.value(hi)} vs {phrasing.value(lo)}; the original "
                f"{fx.num(meta.get('original_kb'))} KiB was restored after every setting).")
    else:
        text = ("The device's read_ahead_kb was not changed: " + phrasing.text(meta.get("note") or "not asked for")
                + f". Per file, cold sequential reads with {phrasing.text(hi.label)} were {_cmp(facts, 'readahead')}.")
    return Finding("readahead", text, c.number, "×")


def _virtual_disk(facts: Facts, short: bool) -> Finding | None:
    f = facts.get("virtual_disk")
    st = facts.data.get("storage") or {}
    where = f"On {phrasing.code(st.get('disk') or 'no block device')} ({phrasing.code(st.get('fs_type'))}),"
    if f is None:
        return None if short else Finding("virtual_disk", f"{where} the single-request latency check did not run.")
    below = facts["virtual_disk_verdict"].value == "cache below"
    floor = facts["flash_floor"]
    if short:
        how = ("faster than any flash read, so a cache below this machine answered" if below else
               "as slow as a flash read, so cold reads reached the device")
        return Finding("virtual_disk", f"A cold 4 KiB read took **{phrasing.value(f, runs=False)}**, {how}.",
                       f.number, f.unit, interval=f.spread)
    lo_n, hi_n = facts.data.get("physical_nvme_qd1_us") or [60.0, 100.0]
    text = (f"{where} a cold 4 KiB O_DIRECT read, one at a time, took **{phrasing.value(f)}** (median), "
            + (f"below the fastest a flash read can be ({phrasing.value(floor)}) and the "
               f"{fx.num(lo_n)}–{fx.num(hi_n, 'µs')} of a physical NVMe drive: a cache under this machine answered, "
               "so \"cold\" here means cold for this machine's page cache, not for the storage below it."
               if below else
               f"within reach of flash (at least {phrasing.value(floor)}; a physical NVMe drive takes about "
               f"{fx.num(lo_n)}–{fx.num(hi_n, 'µs')}): cold reads here came from a device, not from a cache below."))
    return Finding("virtual_disk", text, f.number, f.unit, interval=f.spread)


def finding(facts: Facts, key: str) -> list[Finding]:
    """The key result ``key`` (as a one-item list for :func:`~datajourney.book.report.findings`)."""
    return [f for f in findings(facts) if f.key == key]


def findings(facts: Facts) -> list[Finding]:
    """The chapter's key results, each one fact in the book's words."""
    if not isinstance(facts, Facts):        # a Result, from a caller that has not moved to facts yet
        facts = _facts(facts)
    out = [_to_gpu(facts, False), _gds(facts), _parallel(facts, False), _asked(facts), _readahead(facts, False),
           _virtual_disk(facts, False)]
    return [f for f in out if f is not None]


# --------------------------------------------------------------------------- the opening
def _snippet(a, facts: Facts) -> str | None:
    """Code for a piece of advice, its setting filled in from the facts."""
    if a.key == "random_reads.threads":
        return POOL_SNIPPET.format(threads=a.value) if a.value > 1 else None
    if a.key == "random_reads.fadvise":
        return "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)   # no readahead for this file"
    if a.key != "storage_to_gpu.path":
        return None
    s = facts["to_gpu"].setting
    path = s.get("path")
    chunk = int(facts.data["gpu_chunk"])
    if path == PINNED:
        return _b_snippet(s["mode"], int(s["chunk"]), int(s["buffers"]))
    if str(path).startswith("kvikio"):
        threads = int(str(path).rsplit(", ", 1)[-1].split()[0])
        task = int(facts.data["kvikio_task"])
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


def actions(facts: Facts) -> list[Action]:
    """What to do, each the advice of the analysis in the book's one phrasing (with code to paste)."""
    out = []
    if facts["to_gpu"].number is None:
        why = phrasing.text(facts["to_gpu"].setting.get("why") or "no CUDA device")
        out.append(Action("Run this chapter on a machine with a CUDA GPU (`python -m datajourney run 9`) to rank "
                          f"the paths from a file into GPU memory: this run read none ({why})."))
    for a in facts.advice:
        out.append(Action(phrasing.advice(a, facts), _snippet(a, facts)))
    return out[:fx.OPENING_FINDINGS]


def opening(facts: Facts) -> Opening:
    """What chapter 9 opens with: the fastest path measured from a file into GPU memory against the disk's own
    read, the pread pool's gain on random reads, then readahead or the cold read's latency; and what to do,
    each the analysis's advice (the path to GPU memory with its setting, the pool size, the per-file hint)."""
    out = []
    if facts["to_gpu"].number is not None:
        out.append(_to_gpu(facts, True))
    out += [f for f in (_parallel(facts, True), _readahead(facts, True), _virtual_disk(facts, True)) if f is not None]
    return Opening(out[:fx.OPENING_FINDINGS], actions(facts))


def takeaways(facts: Facts) -> str:
    """What this means for a training job: the opening's actions, and whether a GDS gain can be expected here."""
    items = [a.text for a in actions(facts)]
    st = facts.data.get("gds_status") or {}
    if st.get("kvikio") and st.get("path") != "GDS":
        items.append(f"kvikio ran in {phrasing.code(st.get('path'))}: check `is_gds_available` before expecting a "
                     "GDS gain.")
    return "\n".join(f"* {i}" for i in items)
