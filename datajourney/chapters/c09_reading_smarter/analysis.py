"""Chapter 9's analysis: what a result of :mod:`~datajourney.chapters.c09_reading_smarter.experiment` found,
as facts (no prose). The page, the front page and chapter 12 word these; none recomputes them.

* the paths from a file into GPU memory: every cold path's rate, path (b) at the setting its sweep chose,
  the fastest path measured (``to_gpu``) against the disk's own ``dd`` read and the PCIe copy, and against
  the plain path (pageable reads copied one by one);
* kvikio (``gds``): its path (GDS or a compatibility mode) and its fastest setting against path (b);
* random 4 KiB reads: a pread thread pool against one thread (``parallel_random``), io_uring;
* what the device saw against what was asked (``asked_vs_seen``), readahead (``readahead``), the cold
  read's latency against flash (``virtual_disk``).

GB/s and MB/s use 10^9 and 10^6 bytes.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from datajourney.chapters.c09_reading_smarter.params import CHAPTER, Params
from datajourney.chapters.c09_reading_smarter.sweep import sweep_shares, sweep_summary
from datajourney.chapters.common import classify, cold_verdict, table_of
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Advice, Fact, Facts, compare, measured

#: What chapter 12 and the front page may read.
EXPORTS = ("to_gpu", "to_gpu_vs_dd", "to_gpu_vs_pcie", "gds", "parallel_random", "disk_to_gpu")

PINNED = "pinned, double-buffered"
PLAIN = "pageable + copy"
#: Each cold path by its letter in the chapter's table of paths, and in a few words.
PATH_WORDS = {PLAIN: ("a", "pageable reads, each copied before the next"),
              PINNED: ("b", "two pinned buffers, one read while the other is copied"),
              "mmap + pinned": ("c", "a memory map copied through pinned buffers")}
#: The device "saw what was asked" when the average request it completed is within this factor of the asked size.
SAME_SIZE = 1.25
#: A pool "saturates" when doubling it adds less than this, or the device is this busy.
FLAT_GAIN = 1.15
BUSY = 0.95
#: A per-file hint is advised only where it cuts the bytes read by more than this share.
HINT_GAIN = 0.10


# --------------------------------------------------------------------------- tables
def dd_runs(res) -> list[float]:
    """Every cold ``dd bs=1M`` read of the chapter's file, in GB/s: the device-ceiling runs and the one paired
    with each run of the sweep. They are the same read of the same file after the same purge, so the chapter
    states them as one series (one mean, one range, one run count)."""
    dd = table_of(res, "ceiling")
    t = table_of(res, "pipeline")
    t = t[t["error"].isna()] if not t.empty and "error" in t else t
    sweep = t[t["mode"].str.startswith("dd")]["GBps"].astype(float).tolist() if not t.empty else []
    return (dd["GBps"].astype(float).tolist() if not dd.empty else []) + sweep


def _ok_rows(t: pd.DataFrame) -> pd.DataFrame:
    if t.empty:
        return t
    if "error" in t:
        t = t[t["error"].isna()]
    if "verified" in t:
        t = t[t["verified"].map(lambda v: v is not False and v == v)]  # unchecked rows (None) pass
    return t


def gpu_cold(res) -> pd.DataFrame:
    g = _ok_rows(table_of(res, "gpu"))
    return g[g["cache"] == "cold"] if not g.empty else g


def pcie_copy_runs(res) -> list[float]:
    """GB/s of each repeat of the independent pinned PCIe copy (one value, its median, in results that kept only
    that)."""
    c = res.metadata.get("pcie_ceiling") or {}
    if not c.get("available"):
        return []
    if c.get("ms") and c.get("size"):
        return [float(c["size"]) / (float(ms) / 1e3) / 1e9 for ms in c["ms"] if ms]
    return [float(c["GBps"])] if c.get("GBps") else []


#: Path (e)'s warm copy from pinned RAM to GPU memory: the same pinned host-to-device copy the independent one times.
COPY_ONLY = "in pinned RAM: copy only"


def copy_only_runs(res) -> list[float]:
    """GB/s of each checked run of path (e)'s copy from pinned RAM to GPU memory."""
    g = _ok_rows(table_of(res, "gpu"))
    return [] if g.empty else [float(v) for v in g[g["path"] == COPY_ONLY]["GBps"].dropna()]


def pcie_ceiling(res) -> float | None:
    """The PCIe link's ceiling: the fastest pinned host-to-device copy of the run, a repeat of the independent
    copy or a run of path (e)'s copy from pinned RAM, which is the same copy (a ceiling is what nothing measured
    exceeds, so neither a median nor one of the two alone)."""
    runs = pcie_copy_runs(res) + copy_only_runs(res)
    return max(runs) if runs else None


def pipeline_summary(res) -> pd.DataFrame:
    return sweep_summary(table_of(res, "pipeline"), pcie_ceiling(res))


def sweep_basis(res) -> str:
    """What the sweep's shares are of: "dd" (the same run's ``dd`` read), or "dd or PCIe" where the PCIe copy
    was the slower link of some run."""
    pc = pcie_ceiling(res)
    b = sweep_shares(table_of(res, "pipeline"), pc)
    return "dd or PCIe" if pc and not b.empty and bool((b["ceiling_GBps"] >= pc).any()) else "dd"


def gpu_errors(res) -> list[list[str]]:
    """Each failed path into GPU memory and its error ([path, error]), once each, in the run's order."""
    g = table_of(res, "gpu")
    if g.empty or "error" not in g:
        return []
    return [[str(p), e] for p, e in dict.fromkeys(zip(g["path"], g["error"])) if isinstance(e, str)]


def setting_words(mode: str, chunk: int, buffers: int) -> str:
    """"O_DIRECT, 16 MiB × 2" or "page cache, 16 MiB × 2": path (b)'s setting as the chapter names it (in brackets
    after the path's name)."""
    from datajourney.core.units import size_label

    return f"{MODE_WORDS.get(mode, mode)}, {size_label(int(chunk))} × {int(buffers)}"


#: How path (b)'s read modes read in a setting: O_DIRECT by its name, buffered reads by where they go.
MODE_WORDS = {"buffered": "page cache"}


def path_b_used(res) -> dict | None:
    """How the main table's path (b) read: mode (O_DIRECT only where the file system took it), chunk, buffers,
    and how the setting was chosen (``by``: "sweep", "parameter", "fallback", or None for a fixed setting)."""
    if gpu_cold(res).empty:
        return None
    pb = (res.metadata.get("gds") or {}).get("path_b") or {}
    chunk = pb.get("chunk") or _param(res, "gpu_chunk")
    by = set((pb.get("by") or {}).values())
    return dict(mode="O_DIRECT" if pb.get("direct") else "buffered", chunk=int(chunk) if chunk else None,
                buffers=int(pb.get("buffers") or 2), by=(by.pop() if len(by) == 1 else "mixed") if by else None,
                settings=int(pb.get("settings") or 0))


def _param(res, name: str):
    """A parameter of the run, or its default (a result written before the parameter existed)."""
    return res.parameters[name] if name in res.parameters else getattr(Params(), name)


# --------------------------------------------------------------------------- the paths to GPU memory
def _to_gpu(res, f: Facts) -> None:
    cold = gpu_cold(res)
    f.add(measured("dd_read", dd_runs(res), unit="GB/s", quantity="rate",
                   label="this chapter's dd reading the file cold"))
    f.add(measured("pcie_copy", pcie_copy_runs(res), unit="GB/s", label="the pinned PCIe copy alone"))
    ceiling, copies = pcie_ceiling(res), pcie_copy_runs(res)
    if ceiling is not None:   # where path (e)'s copy from pinned RAM beat every repeat, its fastest run is the ceiling
        f.add(Fact("pcie_ceiling", ceiling, "GB/s", "the fastest pinned copy to GPU memory", "rate", "higher",
                   setting={"from": "independent copy" if copies and ceiling <= max(copies) else "copy only"}))
    f.data["gpu_errors"] = gpu_errors(res)
    if cold.empty:
        why = res.metadata.get("gpu_note") or ("every read into GPU memory failed" if f.data["gpu_errors"] else
                                               "no CUDA device")
        f.add(Fact("to_gpu", None, "GB/s", "the fastest cold path into GPU memory", "rate", setting={"why": why}))
        return
    size = int(cold["bytes"].iloc[0]) if "bytes" in cold else 0
    f.data.update(file_bytes=size, gpu_chunk=int(_param(res, "gpu_chunk")), kvikio_task=int(_param(res, "kvikio_task")))
    pb = path_b_used(res)
    b_setting = setting_words(pb["mode"], pb["chunk"], pb["buffers"]) if pb and pb["chunk"] else None
    cands: dict[str, Fact] = {}
    for path, part in cold.groupby("path", sort=False):
        letter = PATH_WORDS.get(path, ("",))[0]
        # named in words alone: the letters of the chapter's table of paths mean nothing in advice or on other pages
        label = str(path) + (f" ({b_setting})" if path == PINNED and b_setting else "")
        setting = {"path": str(path)}
        if path == PINNED and pb:
            setting.update(mode=pb["mode"], chunk=pb["chunk"], buffers=pb["buffers"])
        key = f"path.{letter}" if letter else f"path.{path}"
        cands[key] = measured(key, part["GBps"].astype(float).tolist(), unit="GB/s", label=label, setting=setting)
    f.add(*cands.values())
    # path (b) at the setting its sweep chose: the main table's runs where it ran at that setting, else the sweep's
    s = pipeline_summary(res)
    if not s.empty:
        top = s.iloc[0]
        mode, chunk, bufs = str(top["mode"]), int(top["chunk"]), int(top["buffers"])
        same = pb is not None and (pb["mode"], pb["chunk"], pb["buffers"]) == (mode, chunk, bufs)
        if same:
            runs = cands["path.b"]
            src = "main"
        else:
            sw = _ok_rows(table_of(res, "pipeline"))
            sw = sw[(sw["mode"] == mode) & (sw["chunk"] == chunk) & (sw["buffers"] == bufs)]
            runs = measured("x", sw["GBps"].astype(float).tolist(), unit="GB/s", label="")
            src = "sweep"
        f.add(Fact("path_b_best", runs.value, "GB/s", f"{PINNED} ({setting_words(mode, chunk, bufs)})", "rate",
                   "higher", runs.n, runs.spread, dict(path=PINNED, mode=mode, chunk=chunk, buffers=bufs,
                                                     measured_in=src)))
        f.add(Fact("sweep_settings", int(len(s)), "", "settings of path (b) swept", "count", None))
    pool = [c for k, c in f.facts.items() if (k.startswith("path.") and not (k == "path.b" and "path_b_best" in f))
            or k == "path_b_best"]
    top = max((c for c in pool if c.number is not None), key=lambda c: c.number)
    gds = (res.metadata.get("gds") or {}).get("path")
    through_cpu = not (str(top.setting.get("path", "")).startswith("kvikio") and gds == "GDS")
    f.add(Fact("to_gpu", top.value, "GB/s", top.label, "rate", "higher", top.n, top.spread,
               dict(top.setting, bytes=size),
               published="storage → GPU memory through the CPU" if through_cpu else None))
    f.add(Fact("fastest_path", top.label, "", "the fastest cold path into GPU memory", "choice", None,
               setting=dict(top.setting)))
    f.add(Fact("cold_paths", len(pool), "", "cold paths into GPU memory measured", "count", None))
    f.add(compare("to_gpu_vs_dd", f["to_gpu"], f["dd_read"]), compare("to_gpu_vs_pcie", f["to_gpu"], f["pcie_copy"]))
    f.data["disk_to_gpu"] = dict(path=str(top.label), GBps=float(top.value),
                                 paths={c.label: float(c.value) for c in pool if c.number is not None},
                                 pcie=pcie_ceiling(res), device=f.number("dd_read"), gds=gds)
    if "path.a" in f:
        q = Question("storage_to_gpu.path", "Which path from a file to GPU memory?", "path", "a",
                     "pageable read + copy", "PyTorch's plain path (read into pageable memory, then .to('cuda'))",
                     f"reading a {_size(size)} file into GPU memory, cold")
        a = decide(q, [Candidate("a" if c.key == "path.a" else c.label, c,
                                 call="pageable read + copy" if c.key == "path.a" else c.label)
                       for c in pool if c.number is not None], f)
        f.advise(replace(a, needs="gpu", evidence=a.evidence + ("to_gpu", "to_gpu_vs_dd", "to_gpu_vs_pcie"))
                 if a is not None else None)


def _size(n: int) -> str:
    from datajourney.core.units import size_label

    return size_label(int(n))


#: kvikio's paths as a label words them (the stored names carry parentheses of their own).
GDS_PATH_WORDS = {"KvikIO POSIX (compatibility) mode": "KvikIO's POSIX compatibility mode",
                  "unknown (kvikio could not tell)": "a mode kvikio could not tell"}


def _gds(res, f: Facts) -> None:
    gds = res.metadata.get("gds") or {}
    f.data["gds_status"] = {k: gds.get(k) for k in ("kvikio", "path", "gds_available", "compat_preferred",
                                                      "nvidia_fs", "error")}
    cold = gpu_cold(res)
    kv = [p for p in dict.fromkeys(cold["path"]) if str(p).startswith("kvikio")] if not cold.empty else []
    if not kv:
        errs = table_of(res, "gpu")
        errs = [f"{p}: {e}" for p, e in zip(errs.get("path", []), errs.get("error", []))
                if isinstance(e, str) and str(p).startswith("kvikio")] if not errs.empty else []
        f.data["gds_errors"] = errs[:1]
        return
    best = max(kv, key=lambda p: cold[cold["path"] == p]["GBps"].mean())
    part = cold[cold["path"] == best]
    mode = gds.get("path") or "unknown"
    f.add(measured("gds", part["GBps"].astype(float).tolist(), unit="GB/s",
                   label=f"kvikio ({GDS_PATH_WORDS.get(mode, mode)}, {str(best).rsplit(', ', 1)[-1]})",
                   setting={"path": str(best), "gds_path": mode},
                   published="storage → GPU memory with GDS" if mode == "GDS" else None))
    if "path.b" in f:
        f.add(compare("gds_vs_path_b", f["gds"], f["path.b"]))
        b = cold[cold["path"] == PINNED]
        f.add(measured("gds_cpu", part["cpu_s_per_GB"].astype(float).tolist(), unit="s", quantity="amount",
                       better="lower", label="the CPU time per GB of kvikio"),
              measured("path_b_cpu", b["cpu_s_per_GB"].astype(float).tolist(), unit="s", quantity="amount",
                       better="lower", label="the CPU time per GB of path (b)"))
        f.add(compare("gds_cpu_vs_path_b", f["gds_cpu"], f["path_b_cpu"]))


# --------------------------------------------------------------------------- random reads
def little_rows(r: pd.DataFrame) -> list[dict]:
    """Little's law's averages for each number of pread threads (one read in flight per thread): the IOPS, the
    mean time of a read from call to return (µs) and, where ``/proc/diskstats`` was read, the requests in flight
    in the block layer and the device; means over the runs, for the page's exercise on paper."""
    if not {"mode", "threads", "IOPS", "mean_us"} <= set(r.columns):
        return []
    p = r[r["mode"].isin(["pread, 1 thread", "pread, thread pool"])]
    out = []
    for t, g in p.groupby("threads"):
        depth = g["dev_queue_depth"].astype(float).mean() if "dev_queue_depth" in g else float("nan")
        asked = g["requests"].sum() if {"bytes", "requests"} <= set(g.columns) else 0
        out.append(dict(threads=int(t), iops=float(g["IOPS"].astype(float).mean()),
                        latency_us=float(g["mean_us"].astype(float).mean()), runs=len(g),
                        request=int(round(g["bytes"].sum() / asked)) if asked else None,
                        device_depth=None if depth != depth else float(depth)))
    return out


def _random(res, f: Facts) -> None:
    r = table_of(res, "random")
    if r.empty:
        return
    one = r[r["mode"] == "pread, 1 thread"]["IOPS"].astype(float).tolist()
    pool = r[r["mode"] == "pread, thread pool"]
    f.add(measured("random_one_thread", one, unit="IOPS", label="one pread thread"))
    f.data["little"] = little_rows(r)
    mm = r[r["mode"] == "mmap + touch"]
    if len(mm) and one:
        f.add(measured("random_mmap", mm["IOPS"].astype(float).tolist(), unit="IOPS",
                       label="touching a memory map at the same offsets"))
        f.add(compare("random_mmap_vs_one", f["random_mmap"], f["random_one_thread"]))
        if "seen_over_asked" in mm and mm["seen_over_asked"].notna().any():
            f.add(measured("random_mmap_read_per_touched", mm["seen_over_asked"].dropna().tolist(), unit="×",
                           quantity="amount", better="lower", label="bytes the storage read per byte touched"))
    if pool.empty or not one:
        return
    by = pool.groupby("threads")["IOPS"].mean()
    t = int(by.idxmax())
    f.add(measured("random_pool", pool[pool["threads"] == t]["IOPS"].astype(float).tolist(), unit="IOPS",
                   label=f"a pool of {t} pread threads", setting={"threads": t}))
    f.add(compare("parallel_random", f["random_pool"], f["random_one_thread"]))
    ts = sorted(by.index)
    if len(ts) >= 2:
        last, prev = ts[-1], ts[-2]
        f.add(measured("random_pool_last", pool[pool["threads"] == last]["IOPS"].tolist(), unit="IOPS",
                       label=f"{int(last)} threads", setting={"threads": int(last)}),
              measured("random_pool_prev", pool[pool["threads"] == prev]["IOPS"].tolist(), unit="IOPS",
                       label=f"{int(prev)} threads", setting={"threads": int(prev)}))
        f.add(compare("pool_step", f["random_pool_last"], f["random_pool_prev"]))
        util = pool[pool["threads"] == last]["dev_util"].mean() if "dev_util" in pool else float("nan")
        if util == util:
            f.add(Fact("pool_busy", min(1.0, float(util)), "", f"the device busy at {int(last)} threads", "share"))
        step = f.number("pool_step") or 0.0
        f.add(Fact("pool_saturates", "yes" if step < FLAT_GAIN or (util == util and util >= BUSY) else "no", "",
                   "the pool saturates at its largest size", "choice", None))
    q = Question("random_reads.threads", "How many threads for random small reads?", "threads", 1,
                 "one reading thread", "a plain reader's", "cold random 4 KiB reads from one file",
                 swept=True)
    cands = [Candidate(1, f["random_one_thread"], call="one reading thread")]
    cands += [Candidate(int(k), measured(f"random_pool.t{int(k)}", g["IOPS"].astype(float).tolist(), unit="IOPS",
                                         label=f"a pool of {int(k)} pread threads", setting={"threads": int(k)}),
                        call=f"ThreadPoolExecutor(max_workers={int(k)})") for k, g in pool.groupby("threads") if k != 1]
    a = decide(q, cands, f)
    if a is not None:
        f.advise(replace(a, evidence=a.evidence + ("parallel_random",)))


def _uring(res, f: Facts) -> None:
    st = res.metadata.get("io_uring_status")
    f.data["uring_status"] = ({"available": bool(st.get("available")), "note": str(st.get("note") or "")}
                              if isinstance(st, dict) else None)
    u = table_of(res, "uring")
    if u.empty:
        return
    by = u.groupby(["io_mode", "depth"])["IOPS"].mean()
    m, d = by.idxmax()
    part = u[(u["io_mode"] == m) & (u["depth"] == d)]
    f.add(measured("uring_best", part["IOPS"].astype(float).tolist(), unit="IOPS",
                   label=f"one io_uring ring ({m}, depth {int(d)})", setting={"mode": str(m), "depth": int(d)}))
    if "random_pool" in f:
        f.add(compare("uring_vs_pool", f["uring_best"], f["random_pool"]))


# --------------------------------------------------------------------------- asked vs seen, readahead, latency
def _asked_vs_seen(res, f: Facts) -> None:
    g = _ok_rows(table_of(res, "grid"))
    if g.empty or "dev_request_bytes" not in g or not g["dev_request_bytes"].notna().any():
        f.data["diskstats_device"] = res.metadata.get("diskstats_device")
        return
    small = int(g["size"].min())
    head = None
    for mode in ("buffered", "O_DIRECT"):
        r = g[(g["mode"] == mode) & (g["size"] == small)]
        if r.empty:
            continue
        r = r[r["threads"] == r["threads"].min()]
        dev_b, dev_r = r.get("dev_bytes"), r.get("dev_reads")
        if dev_b is not None and dev_r is not None and dev_b.notna().all() and float(dev_r.sum()) > 0:
            seen = float(dev_b.sum()) / float(dev_r.sum())
        else:
            seen = float(r["dev_request_bytes"].mean())
        if seen != seen:
            continue
        ratio = seen / small
        word = "same" if abs(math.log(ratio)) <= math.log(SAME_SIZE) else ("larger" if ratio > 1 else "smaller")
        f.add(Fact(f"asked_vs_seen.{mode}", ratio, "×",
                   f"the request the device saw ÷ the asked {_size(small)} ({mode})", "amount", None,
                   setting={"mode": mode, "asked": small, "seen": int(seen), "verdict": word}))
        head = head or f[f"asked_vs_seen.{mode}"]
    if head is not None:
        f.add(Fact("asked_vs_seen", head.value, "×", head.label, "amount", None, setting=dict(head.setting)))


def _readahead(res, f: Facts) -> None:
    ra = table_of(res, "readahead")
    meta = res.metadata.get("readahead_sysfs") or {}
    f.data["readahead_sysfs"] = {"used": bool(meta.get("used")), "note": meta.get("note"),
                                 "original_kb": meta.get("original_kb")}
    if meta.get("used"):
        restored = [e for e in res.metadata.get("readahead_changes") or [] if "restored" in e]
        f.add(Fact("readahead_restored", len(restored), "", "times read_ahead_kb was set and restored", "count",
                   None),
              Fact("readahead_read_back", "equal" if all(e.get("read_back") == e["restored"] for e in restored)
                   else "differed", "", "read_ahead_kb read back after each restore", "choice", None))
    if ra.empty:
        return
    seq = ra[ra["pattern"] == "sequential"]
    sys_ = seq[seq["setting"] == "read_ahead_kb"]
    if not sys_.empty:
        vals = sorted(sys_["read_ahead_kb"].dropna().unique())
        lo, hi = vals[0], vals[-1]
        a = sys_[sys_["read_ahead_kb"] == hi]["MBps"].tolist()
        b = sys_[sys_["read_ahead_kb"] == lo]["MBps"].tolist()
        la, lb = f"read_ahead_kb = {int(hi):,}", f"read_ahead_kb = {int(lo):,}"
        how = "sysfs"
    else:
        fa = seq[seq["setting"] == "fadvise"]
        a = fa[fa["fadvise"] == "SEQUENTIAL"]["MBps"].tolist()
        b = fa[fa["fadvise"] == "none"]["MBps"].tolist()
        la, lb, how = "POSIX_FADV_SEQUENTIAL", "no hint", "fadvise"
    if a and b:
        chunk = int(seq["request_bytes"].iloc[0]) if "request_bytes" in seq and len(seq) else None
        f.add(measured("readahead_high", a, unit="MB/s", label=la, setting={"how": how, "chunk": chunk}),
              measured("readahead_low", b, unit="MB/s", label=lb, setting={"how": how}))
        f.add(compare("readahead", f["readahead_high"], f["readahead_low"]))
    fr = ra[(ra["pattern"] == "random") & (ra["setting"] == "fadvise")]
    h = fr[fr["fadvise"] == "RANDOM"]["seen_over_asked"].dropna().tolist() if "seen_over_asked" in fr else []
    n0 = fr[fr["fadvise"] == "none"]["seen_over_asked"].dropna().tolist() if "seen_over_asked" in fr else []
    if h and n0:
        f.add(measured("fadvise_random_bytes", h, unit="×", quantity="amount", better="lower",
                       label="the bytes read per asked byte with POSIX_FADV_RANDOM"),
              measured("no_hint_bytes", n0, unit="×", quantity="amount", better="lower",
                       label="the bytes read per asked byte without a hint"))
        f.add(compare("fadvise_random", f["fadvise_random_bytes"], f["no_hint_bytes"]))
        c = f["fadvise_random"]
        if c.number is not None and c.number < 1 - HINT_GAIN and not c.level:
            f.advise(Advice("random_reads.fadvise", "posix_fadvise", "POSIX_FADV_RANDOM",
                            "cold random 4 KiB reads from one file", gain="fadvise_random", scope="only",
                            evidence=("fadvise_random",)))


def _storage(res, f: Facts) -> None:
    """What the data directory's storage settings mean for this chapter's reads: how reads update access
    times, whether the disk names a model (a virtual disk names none), whether its rotational flag is only a
    virtio driver's default; the scheduler and the largest request as recorded."""
    d = res.metadata.get("device") or {}
    if not d:
        f.data["device"] = None
        return
    opts = str(d.get("mount_options") or "")
    disk = d.get("disk")
    f.data["device"] = {
        "atime": "noatime" if "noatime" in opts else "relatime" if "relatime" in opts else "every read",
        "scheduler": d.get("scheduler"), "disk": disk, "model_missing": d.get("model") is None and bool(disk),
        "rotational_default": bool(d.get("rotational")) and str(disk or "").startswith("vd"),
        "max_sectors_kb": d.get("max_sectors_kb")}


def _latency(res, f: Facts) -> None:
    lat = table_of(res, "latency")
    dev = res.metadata.get("device") or res.fingerprint.get("storage", {}) or {}
    f.data["storage"] = {"disk": dev.get("disk"), "fs_type": dev.get("fs_type")}
    floor = float(res.metadata.get("nand_read_floor_us", 40.0))
    f.data["physical_nvme_qd1_us"] = [float(v) for v in res.metadata.get("physical_nvme_qd1_us", [60.0, 100.0])]
    f.add(Fact("flash_floor", floor, "µs", "the fastest a flash read can be", "time", "lower"))
    if lat.empty or "p50_us" not in lat:
        return
    ok = lat[lat["reads"] > 0] if "reads" in lat else lat
    first = ok[ok["series"] == "O_DIRECT, first pass"]["p50_us"].astype(float).tolist()
    if not first:
        return
    f.add(measured("virtual_disk", first, unit="µs", quantity="time", better="lower",
                   label="a cold 4 KiB O_DIRECT read, one at a time (median)"))
    # the run's one verdict (chapter 2's where this run holds it, else this chapter's check), by the book's one rule;
    # this chapter's own check classified alone beside it
    v, own = cold_verdict(res), classify(first, floor)
    words = {"cache": "cache below", "device": "device", "undecided": "cannot tell"}
    f.add(Fact("virtual_disk_verdict", words[v.state or own], "", "what answered the cold reads", "choice", None,
               setting=dict(source=v.source, medians=list(v.medians), own=words[own])))
    second = ok[ok["series"] == "O_DIRECT, second pass"]["p50_us"].astype(float).tolist()
    if second:
        f.add(measured("second_pass", second, unit="µs", quantity="time", better="lower",
                       label="the same blocks read again at once"))
        f.add(compare("second_vs_first", f["second_pass"], f["virtual_disk"]))


def analyse(res) -> Facts:
    """Every fact chapter 9's page, chapter 12 and the front page word, from ``res`` alone."""
    f = Facts(CHAPTER, exports=EXPORTS)
    f.add(Fact("gpu_ran", "yes" if not gpu_cold(res).empty else "no", "", "paths into GPU memory measured",
               "choice", None))
    _to_gpu(res, f)
    _gds(res, f)
    _random(res, f)
    _uring(res, f)
    _asked_vs_seen(res, f)
    _readahead(res, f)
    _storage(res, f)
    _latency(res, f)
    return analyse_notes(res, f)


# --------------------------------------------------------------------------- what the notebook's notes word
def _paths_note(f: Facts) -> None:
    """The cold paths ranked (for the note under the chart of paths), path (a) against path (b)."""
    ranked = [k for k in f.facts if k.startswith("path.") and f.number(k) is not None]
    if not ranked:
        return
    ranked.sort(key=lambda k: -f.number(k))
    f.data["paths_ranked"] = ranked
    if "path.a" in f and "path.b" in f:
        f.add(compare("plain_vs_path_b", f["path.a"], f["path.b"]))


def _drift(res, f: Facts) -> None:
    """The disk's own drift between runs (max ÷ min of the chapter's ``dd`` runs) against path (b)'s."""
    dd = dd_runs(res)
    cold = gpu_cold(res)
    pin = cold[cold["path"] == PINNED]["GBps"].astype(float).tolist() if not cold.empty else []
    if len(dd) < 2 or len(pin) < 2 or min(dd) <= 0 or min(pin) <= 0:
        return
    m = sum(dd) / len(dd)
    dd_s, pin_s = max(dd) / min(dd), max(pin) / min(pin)
    f.add(Fact("path_b_share_of_dd", sum(pin) / len(pin) / m, "", "path (b) as a share of the mean dd read",
               "share", "higher", len(pin), (min(pin) / m, max(pin) / m)))
    f.add(Fact("dd_drift", dd_s, "×", "the dd runs, highest ÷ lowest", "amount", "lower", len(dd)),
          Fact("path_b_drift", pin_s, "×", "the runs of path (b), highest ÷ lowest", "amount", "lower", len(pin)))
    d = 0 if abs(dd_s - pin_s) <= 0.02 * max(dd_s, pin_s) else (1 if dd_s > pin_s else -1)
    f.add(Fact("drift_whose", {1: "disk", -1: "pipeline", 0: "level"}[d], "", "whose spread the runs of path (b) show",
               "choice", None))


def _sweep_notes(res, f: Facts) -> None:
    """The chunk × buffers × mode sweep of path (b): its best and slowest settings, the setting path (b) used,
    the reads faster than ``dd``, each setting's main effect on the share, the chunk against readahead, CPU."""
    pc = pcie_ceiling(res)
    s = pipeline_summary(res)
    if s.empty:
        return
    b = sweep_shares(table_of(res, "pipeline"), pc)
    f.add(Fact("sweep_basis", sweep_basis(res), "", "what the sweep's shares are of", "choice", None))

    def runs(row) -> list[float]:
        return b[(b["mode"] == row["mode"]) & (b["chunk"] == row["chunk"]) & (b["buffers"] == row["buffers"])][
            "GBps"].astype(float).tolist()

    def setting(row) -> dict:
        return dict(mode=str(row["mode"]), chunk=int(row["chunk"]), buffers=int(row["buffers"]))

    best, worst = s.iloc[0], s.iloc[-1]
    if "sweep_settings" not in f:
        f.add(Fact("sweep_settings", int(len(s)), "", "settings of path (b) swept", "count", None))
    f.add(measured("sweep_best", runs(best), unit="GB/s", label=setting_words(**setting(best)), setting=setting(best)))
    n = int(best["n"])
    f.add(Fact("sweep_best_share", float(best["share"]), "", "its share of the same run's slower link", "share",
               "higher", n, (float(best["share_min"]), float(best["share_max"])) if n > 1 else None))
    if len(s) > 1:
        f.add(measured("sweep_worst", runs(worst), unit="GB/s", label=setting_words(**setting(worst)),
                       setting=setting(worst)))
        f.add(compare("sweep_best_vs_worst", f["sweep_best"], f["sweep_worst"]))
    pb = (res.metadata.get("gds") or {}).get("path_b") or {}
    f.add(Fact("path_b_by", "|".join(f"{k}:{v}" for k, v in sorted((pb.get("by") or {}).items())), "",
               "how path (b)'s setting was chosen", "choice", None, setting={"settings": int(pb.get("settings") or 0)}))
    if pb.get("chunk"):
        used = dict(mode="O_DIRECT" if pb.get("direct") else "buffered", chunk=int(pb["chunk"]),
                    buffers=int(pb.get("buffers") or 2))
        mine = s[(s["mode"] == used["mode"]) & (s["chunk"] == used["chunk"]) & (s["buffers"] == used["buffers"])]
        where = "absent" if mine.empty else ("best" if mine.index[0] == 0 else "other")
        f.add(Fact("path_b_setting", where, "", setting_words(**used), "choice", None, setting=used))
        if where == "other":
            f.add(measured("sweep_used", runs(mine.iloc[0]), unit="GB/s", label=setting_words(**used), setting=used))
            f.add(compare("sweep_used_vs_best", f["sweep_used"], f["sweep_best"]))
    over = b[b["share"] > 1]
    f.add(Fact("sweep_reads", int(len(b)), "", "reads of the sweep", "count", None),
          Fact("sweep_over_dd", int(len(over)), "", "reads of the sweep faster than the same run's dd", "count", None))
    if len(over):
        f.add(Fact("sweep_over_dd_top", float(over["share"].max()), "", "the fastest of them, as a share of dd",
                   "share"))
    names = {"chunk": "the chunk size", "buffers": "the number of buffers", "mode": "O_DIRECT versus buffered reads"}
    eff = {}
    for col, name in names.items():
        m = s.groupby(col)["share"].mean()
        if len(m) >= 2:
            eff[col] = float(m.max() - m.min())
            f.add(Fact(f"sweep_effect.{col}", 100 * eff[col], "points", name, "amount", None))
    if eff:
        top = max(eff, key=eff.get)
        verdict = ("none" if eff[top] < 0.02 else
                   "one" if all(eff[top] - v >= 0.01 for k, v in eff.items() if k != top) else "level")
        f.add(Fact("sweep_effect", verdict, "", "which setting moves the share most", "choice", None,
                   setting={"top": names[top]}))
    od, bu = s[s["mode"] == "O_DIRECT"], s[s["mode"] == "buffered"]
    ra = (res.metadata.get("device") or {}).get("read_ahead_kb")
    if len(bu) and ra is not None and ra == ra and ra:
        c, w = int(bu.iloc[0]["chunk"]), int(ra) * 1024
        f.add(Fact("sweep_buffered_chunk", c, "B", "the best buffered chunk", "amount", None),
              Fact("readahead_window", w, "B", "the device's readahead window", "amount", None),
              Fact("chunk_vs_window", "larger" if c > w else "smaller" if c < w else "same", "",
                   "the best buffered chunk against the readahead window", "choice", None))
    if len(od) and len(bu):
        o, u = od.iloc[0], bu.iloc[0]
        if o["cpu"] == o["cpu"] and u["cpu"] == u["cpu"]:
            f.add(Fact("sweep_cpu_direct", float(o["cpu"]), "s", "the O_DIRECT path's", "amount", "lower"),
                  Fact("sweep_cpu_buffered", float(u["cpu"]), "s", "buffered reads' CPU time per GB", "amount",
                       "lower"))
            f.add(compare("sweep_cpu_buffered_vs_direct", f["sweep_cpu_buffered"], f["sweep_cpu_direct"]))


def _ceilings(res, f: Facts) -> None:
    """Every ``dd`` read of the chapter (main table and sweep), and the fastest single cold read: the disk's
    ceiling is the fastest ``dd`` run where no cold read beat it."""
    every = dd_runs(res)
    c = res.metadata.get("pcie_ceiling") or {}
    if c.get("available") and c.get("size"):
        f.data["pcie_size"] = int(c["size"])
    cands = []
    cold = gpu_cold(res)
    if not cold.empty:
        cands += [(str(p), float(v)) for p, v in zip(cold["path"], cold["GBps"])]
    b = sweep_shares(table_of(res, "pipeline"), pcie_ceiling(res))
    if not b.empty:
        cands += [(f"{PINNED} ({setting_words(m, c_, n)})", float(v))
                  for m, c_, n, v in zip(b["mode"], b["chunk"], b["buffers"], b["GBps"])]
    top = max(cands, key=lambda x: x[1]) if cands else None
    if not every:
        return
    f.add(Fact("dd_runs_all", len(every), "", "dd runs of the chapter", "count", None))
    f.add(Fact("dd_fastest", max(every), "GB/s", "the fastest dd run", "rate"))
    if top is not None:
        f.add(Fact("fastest_read", top[1], "GB/s", top[0], "rate"))
    f.add(Fact("disk_ceiling", "yes" if top is None or top[1] <= max(every) else "no", "",
               "the fastest dd run is the disk's ceiling", "choice", None))


def _random_notes(res, f: Facts) -> None:
    r = table_of(res, "random")
    if r.empty or "random_one_thread" not in f:
        return
    soa = f.get("random_mmap_read_per_touched")
    if soa is not None:
        f.add(Fact("random_mmap_readaround", "yes" if (soa.number or 0) > SAME_SIZE else "no", "",
                   "page faults read more than they touched", "choice", None))
    mr = r[r["mode"] == "mmap + MADV_RANDOM"]["IOPS"].astype(float).tolist()
    if mr:
        f.add(measured("random_madv", mr, unit="IOPS", label="the map marked MADV_RANDOM"))
        f.add(compare("random_madv_vs_one", f["random_madv"], f["random_one_thread"]))


def _uring_notes(res, f: Facts) -> None:
    """Per io_uring mode: its best depth against its shallowest, and whether deeper queues added nothing."""
    u = table_of(res, "uring")
    if u.empty:
        return
    modes = []
    for mode, g in u.groupby("io_mode", sort=False):
        by = g.groupby("depth")["IOPS"].mean()
        lo_d, best_d, hi_d = int(by.index.min()), int(by.idxmax()), int(by.index.max())
        k = f"uring.{mode}"
        modes.append(str(mode))
        f.add(measured(f"{k}.best", g[g["depth"] == best_d]["IOPS"].astype(float).tolist(), unit="IOPS",
                       label=f"{mode}, depth {best_d}", setting={"depth": best_d, "deepest": hi_d}))
        if best_d != lo_d:
            f.add(measured(f"{k}.shallow", g[g["depth"] == lo_d]["IOPS"].astype(float).tolist(), unit="IOPS",
                           label=f"depth {lo_d}", setting={"depth": lo_d}))
            f.add(compare(f"{k}.gain", f[f"{k}.best"], f[f"{k}.shallow"]))
    f.data["uring_modes"] = modes
    r = table_of(res, "random")
    pool = r[r["mode"] == "pread, thread pool"] if not r.empty else r
    if not pool.empty:
        t = int(pool.groupby("threads")["IOPS"].mean().idxmax())
        f.add(measured("pread_pool_best", pool[pool["threads"] == t]["IOPS"].astype(float).tolist(), unit="IOPS",
                       label=f"a pool of {t} pread threads", setting={"threads": t}))
        f.add(compare("uring_vs_pread_pool", f["uring_best"], f["pread_pool_best"]))


def _asked_seen_notes(res, f: Facts) -> None:
    """The device's view of the grid: how the largest O_DIRECT requests were split, the queue depth it saw and
    where the rest of each request's time went, and how much of what it read was this process's."""
    g = _ok_rows(table_of(res, "grid"))
    if g.empty or "dev_request_bytes" not in g:
        return
    g = g.copy()
    for c in ("dev_bytes", "dev_reads", "own_share", "dev_read_ms", "mean_us", "dev_util", "dev_queue_depth"):
        if c not in g:
            g[c] = float("nan")
    g["_ms"] = g["dev_read_ms"] * g["dev_reads"]

    def total(x):
        return x.astype(float).sum(min_count=1)

    s = g.groupby(["mode", "size", "threads"], sort=True).agg(
        runs_seen=("dev_request_bytes", "mean"), dev_bytes=("dev_bytes", total), dev_reads=("dev_reads", total),
        dev_ms=("_ms", total), qd=("dev_queue_depth", "mean"), util=("dev_util", "mean"),
        mean_us=("mean_us", "mean")).reset_index()
    pooled = s["dev_bytes"] / s["dev_reads"].where(s["dev_reads"] > 0)
    s["seen"] = pooled.where(s["dev_bytes"].notna() & (s["dev_reads"] > 0), s["runs_seen"])
    s["ms_per"] = s["dev_ms"] / s["dev_reads"].where(s["dev_reads"] > 0)
    if not s["seen"].notna().any():
        return
    small, large = int(s["size"].min()), int(s["size"].max())
    big = s[(s["mode"] == "O_DIRECT") & (s["size"] == large) & s["seen"].notna()].sort_values("threads")
    if not big.empty and large > small:
        f.data["split_seen"] = [[int(t), int(v)] for t, v in zip(big["threads"], big["seen"])]
        lo_s, hi_s = float(big["seen"].min()), float(big["seen"].max())
        d = res.metadata.get("device") or {}
        msk, segs = d.get("max_sectors_kb"), d.get("max_segments")
        hi = min(large, msk * 1024) if msk else None
        lo = large / math.ceil((large // 4096) / segs) if segs and large >= 4096 else None
        if lo is not None and hi is not None:
            lo = min(lo, hi)
        verdict = ("as asked" if hi_s >= large / SAME_SIZE else
                   "between" if lo is not None and hi is not None and lo / SAME_SIZE <= lo_s and hi_s <= hi * SAME_SIZE
                   else "outside")
        f.add(Fact("split", verdict, "", f"how O_DIRECT requests of {_size(large)} reached the device", "choice",
                   None, setting={"asked": large, "low": int(lo) if lo else None, "high": int(hi) if hi else None,
                                  "max_segments": segs}))
    r = s[(s["mode"] == "O_DIRECT") & (s["size"] == small)]
    if r.empty:
        r = s[s["size"] == small]
    r = r[r["qd"].notna()].sort_values("threads")
    if not r.empty:
        r = r.iloc[-1]
        t, qd = int(r["threads"]), float(r["qd"])
        f.add(Fact("seen_depth", qd, "", f"requests in flight at the device, {t} asked", "count", None,
                   setting={"threads": t, "asked": int(r["size"]), "mode": str(r["mode"])}))
        if r["util"] == r["util"]:
            f.add(Fact("seen_busy", min(1.0, float(r["util"])), "", "the device busy", "share"))
        why = "none"
        ms, mu = r["ms_per"], r["mean_us"]
        if qd < t / SAME_SIZE and ms == ms and mu == mu and mu > 0 and 1 - 1e3 * ms / mu > 0.5:
            why = "outside"
            f.add(Fact("device_us", 1e3 * float(ms), "µs", "in the block layer and the device", "time", "lower"),
                  Fact("call_us", float(mu), "µs", "from call to return", "time", "lower"),
                  Fact("outside_share", 1 - 1e3 * float(ms) / float(mu), "", "outside the device's queue", "share",
                       "lower"))
        elif qd > t * SAME_SIZE:
            why = "split"
        f.add(Fact("seen_depth_verdict", why, "", "where the asked depth went", "choice", None))
    if "own_share" in g and g["own_share"].notna().any():
        own = float(g["own_share"].dropna().min())
        f.add(Fact("own_share", own, "", "what the device read that was this process's, the least of any cell",
                   "share"), Fact("own_share_clean", "yes" if own >= OWN_SHARE else "no", "",
                                  "the device's averages are this process's", "choice", None))


#: The device's averages describe this process's requests when at least this share of what it read was ours.
OWN_SHARE = 0.90


def _readahead_notes(res, f: Facts) -> None:
    ra = table_of(res, "readahead")
    if ra.empty:
        return
    seq, rnd = ra[ra["pattern"] == "sequential"], ra[ra["pattern"] == "random"]
    sys_ = seq[seq["setting"] == "read_ahead_kb"]
    if not sys_.empty:
        vals = sorted(sys_["read_ahead_kb"].dropna().unique())
        lo_v, hi_v = vals[0], vals[-1]
        means = sys_.groupby("read_ahead_kb")["MBps"].mean()
        best_v = means.idxmax()
        if best_v not in (lo_v, hi_v):
            f.add(measured("readahead_best", sys_[sys_["read_ahead_kb"] == best_v]["MBps"].tolist(), unit="MB/s",
                           label=f"read_ahead_kb = {int(best_v):,}", setting={"read_ahead_kb": int(best_v)}),
                  measured("readahead_largest", sys_[sys_["read_ahead_kb"] == hi_v]["MBps"].tolist(), unit="MB/s",
                           label=f"read_ahead_kb = {int(hi_v):,}"))
            f.add(compare("readahead_best_vs_largest", f["readahead_best"], f["readahead_largest"]))
        ra_r = rnd[rnd["setting"] == "read_ahead_kb"]
        for key, v in (("low", lo_v), ("high", hi_v)):
            xs = ra_r[ra_r["read_ahead_kb"] == v]["seen_over_asked"].dropna().tolist()
            if xs:
                f.add(measured(f"readahead_random_bytes.{key}", xs, unit="×", quantity="amount", better="lower",
                               label=f"{int(v):,} KiB", setting={"read_ahead_kb": int(v)}))
    fa = seq[seq["setting"] == "fadvise"]
    if fa.empty:
        return
    none = fa[fa["fadvise"] == "none"]["MBps"].tolist()
    if none:
        f.add(measured("no_hint_seq", none, unit="MB/s", label="no hint"))
    for hint in ("SEQUENTIAL", "WILLNEED", "RANDOM"):
        h = fa[fa["fadvise"] == hint]["MBps"].tolist()
        if h and none:
            f.add(measured(f"fadvise_seq.{hint}", h, unit="MB/s", label=f"POSIX_FADV_{hint}"))
            f.add(compare(f"fadvise_seq.{hint}.vs_none", f[f"fadvise_seq.{hint}"], f["no_hint_seq"]))


def analyse_notes(res, f: Facts) -> Facts:
    """The facts the notebook's notes word (beside the key results)."""
    _paths_note(f)
    _drift(res, f)
    _sweep_notes(res, f)
    _ceilings(res, f)
    _random_notes(res, f)
    _uring_notes(res, f)
    _asked_seen_notes(res, f)
    _readahead_notes(res, f)
    return f
