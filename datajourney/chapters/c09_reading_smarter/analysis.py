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

import pandas as pd

from datajourney.chapters.c09_reading_smarter.params import Params
from datajourney.core.facts import Advice, Fact, Facts, compare, measured

CHAPTER = "09_reading_smarter"
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
def _t(res, name: str) -> pd.DataFrame:
    return res.tables[name] if name in res.tables else pd.DataFrame()


def _ok_rows(t: pd.DataFrame) -> pd.DataFrame:
    if t.empty:
        return t
    if "error" in t:
        t = t[t["error"].isna()]
    if "verified" in t:
        t = t[t["verified"].map(lambda v: v is not False and v == v)]  # unchecked rows (None) pass
    return t


def gpu_cold(res) -> pd.DataFrame:
    g = _ok_rows(_t(res, "gpu"))
    return g[g["cache"] == "cold"] if not g.empty else g


def pcie_ceiling(res) -> float | None:
    c = res.metadata.get("pcie_ceiling") or {}
    return float(c["GBps"]) if c.get("available") and c.get("GBps") else None


def sweep_shares(table: pd.DataFrame, pcie_GBps: float | None) -> pd.DataFrame:
    """Each cold path-(b) run of the sweep as a share of the slower link measured in the same run:
    min(that run's ``dd`` read, the PCIe copy). Setting each run against its own ``dd`` keeps the disk's
    drift between runs out of the comparison of settings."""
    if table is None or table.empty:
        return pd.DataFrame()
    t = table[table["error"].isna()] if "error" in table else table
    dd = t[t["mode"].str.startswith("dd")].groupby("run")["GBps"].mean()
    b = t[~t["mode"].str.startswith("dd")].copy()
    ceil = b["run"].map(dd)
    if pcie_GBps:
        ceil = ceil.clip(upper=pcie_GBps)
    b["ceiling_GBps"] = ceil
    b["share"] = b["GBps"] / ceil
    return b.dropna(subset=["share"])


def sweep_summary(table: pd.DataFrame, pcie_GBps: float | None) -> pd.DataFrame:
    """One row per swept setting (mode, chunk, buffers): mean GB/s, mean, lowest and highest share of the
    same run's slower link, CPU s per GB and runs; best first: the highest lowest-run share (a setting
    must keep up in every run), then the highest mean share."""
    b = sweep_shares(table, pcie_GBps)
    if b.empty:
        return b
    s = b.groupby(["mode", "chunk", "buffers"]).agg(GBps=("GBps", "mean"), share=("share", "mean"),
                                                    share_min=("share", "min"), share_max=("share", "max"),
                                                    cpu=("cpu_s_per_GB", "mean"), n=("run", "count")).reset_index()
    return s.sort_values(["share_min", "share"], ascending=False).reset_index(drop=True)


def pipeline_summary(res) -> pd.DataFrame:
    return sweep_summary(_t(res, "pipeline"), pcie_ceiling(res))


def setting_words(mode: str, chunk: int, buffers: int) -> str:
    """"O_DIRECT, 16 MiB × 2": path (b)'s setting as the chapter names it."""
    from datajourney.core.findings import size_label

    return f"{mode}, {size_label(int(chunk))} × {int(buffers)}"


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


def _path_label(path: str) -> str:
    letter = PATH_WORDS.get(path, ("",))[0] or ("d" if str(path).startswith("kvikio") else "e")
    return f"({letter}) {path}"


# --------------------------------------------------------------------------- the paths to GPU memory
def _to_gpu(res, f: Facts) -> None:
    cold = gpu_cold(res)
    dd = _t(res, "ceiling")
    f.add(measured("dd_read", dd["GBps"].tolist() if not dd.empty else [], unit="GB/s", quantity="rate",
                   label="the disk alone, read cold by dd in 1 MiB blocks"))
    pc = pcie_ceiling(res)
    f.add(measured("pcie_copy", [pc] if pc else [], unit="GB/s", label="the pinned PCIe copy alone"))
    if cold.empty:
        f.add(Fact("to_gpu", None, "GB/s", "the fastest cold path into GPU memory", "rate",
                   setting={"why": res.metadata.get("gpu_note") or "no CUDA device"}))
        return
    size = int(cold["bytes"].iloc[0])
    f.data.update(file_bytes=size, gpu_chunk=int(_param(res, "gpu_chunk")), kvikio_task=int(_param(res, "kvikio_task")))
    pb = path_b_used(res)
    b_setting = setting_words(pb["mode"], pb["chunk"], pb["buffers"]) if pb and pb["chunk"] else None
    cands: dict[str, Fact] = {}
    for path, part in cold.groupby("path", sort=False):
        letter = PATH_WORDS.get(path, ("",))[0]
        label = _path_label(path) + (f" at {b_setting}" if path == PINNED and b_setting else "")
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
            sw = _ok_rows(_t(res, "pipeline"))
            sw = sw[(sw["mode"] == mode) & (sw["chunk"] == chunk) & (sw["buffers"] == bufs)]
            runs = measured("x", sw["GBps"].astype(float).tolist(), unit="GB/s", label="")
            src = "sweep"
        f.add(Fact("path_b_best", runs.value, "GB/s", f"(b) {PINNED} at {setting_words(mode, chunk, bufs)}", "rate",
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
    if "path.a" in f:
        f.add(compare("to_gpu_vs_plain", f["to_gpu"], f["path.a"]))
        if "path.b" in f:
            f.add(compare("path_b_vs_plain", f["path.b"], f["path.a"]))
    f.data["disk_to_gpu"] = dict(path=str(top.label), GBps=float(top.value),
                                 paths={c.label: float(c.value) for c in pool if c.number is not None},
                                 pcie=pc, device=f.number("dd_read"), gds=gds)
    f.advise(Advice("storage_to_gpu.path", "path", top.label.split(") ", 1)[-1],
                    f"reading a {_size(size)} file into GPU memory, cold", gain="to_gpu_vs_plain" if "path.a" in f
                    and top.key != "path.a" else None, scope="best" if len(pool) > 1 else "only",
                    evidence=("to_gpu", "to_gpu_vs_dd", "to_gpu_vs_pcie"), needs="gpu"))


def _size(n: int) -> str:
    from datajourney.core.findings import size_label

    return size_label(int(n))


def _gds(res, f: Facts) -> None:
    gds = res.metadata.get("gds") or {}
    f.data["gds_status"] = {k: gds.get(k) for k in ("kvikio", "path", "gds_available", "compat_preferred",
                                                      "nvidia_fs", "error")}
    cold = gpu_cold(res)
    kv = [p for p in dict.fromkeys(cold["path"]) if str(p).startswith("kvikio")] if not cold.empty else []
    if not kv:
        errs = _t(res, "gpu")
        errs = [f"{p}: {e}" for p, e in zip(errs.get("path", []), errs.get("error", []))
                if isinstance(e, str) and str(p).startswith("kvikio")] if not errs.empty else []
        f.data["gds_errors"] = errs[:1]
        return
    best = max(kv, key=lambda p: cold[cold["path"] == p]["GBps"].mean())
    part = cold[cold["path"] == best]
    mode = gds.get("path") or "unknown"
    f.add(measured("gds", part["GBps"].astype(float).tolist(), unit="GB/s",
                   label=f"kvikio ({mode}, {str(best).rsplit(', ', 1)[-1]})",
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
def _random(res, f: Facts) -> None:
    r = _t(res, "random")
    if r.empty:
        return
    one = r[r["mode"] == "pread, 1 thread"]["IOPS"].astype(float).tolist()
    pool = r[r["mode"] == "pread, thread pool"]
    f.add(measured("random_one_thread", one, unit="IOPS", label="one pread thread"))
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
    c = f["parallel_random"]
    if c.number is not None and c.number > 1 and not c.level:
        f.advise(Advice("random_reads.threads", "threads", t, "cold random 4 KiB reads from one file",
                        gain="parallel_random", scope="edge" if t == max(ts) else "best",
                        evidence=("parallel_random",)))
    else:
        f.add(compare("one_vs_pool", f["random_one_thread"], f["random_pool"]))
        f.advise(Advice("random_reads.threads", "threads", 1, "cold random 4 KiB reads from one file",
                        gain="one_vs_pool", scope="best", evidence=("parallel_random",)))


def _uring(res, f: Facts) -> None:
    u = _t(res, "uring")
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
    g = _ok_rows(_t(res, "grid"))
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
    ra = _t(res, "readahead")
    meta = res.metadata.get("readahead_sysfs") or {}
    f.data["readahead_sysfs"] = {"used": bool(meta.get("used")), "note": meta.get("note"),
                                 "original_kb": meta.get("original_kb")}
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


def _latency(res, f: Facts) -> None:
    lat = _t(res, "latency")
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
    f.add(Fact("virtual_disk_verdict", "cache below" if f.number("virtual_disk") < floor else "device", "",
               "what answered the cold reads", "choice", None))
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
    _latency(res, f)
    return f
