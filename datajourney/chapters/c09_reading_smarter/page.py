"""What chapter 9's page says: the opening and the key results word the facts of
:mod:`~datajourney.chapters.c09_reading_smarter.analysis` (through :mod:`~datajourney.core.phrasing`); the notes,
tables and charts of the notebook show the result's tables as evidence. Every string from a result that reaches
Markdown goes through :func:`~datajourney.core.phrasing.text` or :func:`~datajourney.core.phrasing.code`."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from datajourney.chapters.c09_reading_smarter import analysis, charts
from datajourney.chapters.c09_reading_smarter.analysis import CHAPTER  # noqa: F401 - re-exported for the notebook
from datajourney.chapters.c09_reading_smarter.analysis import analyse as _analyse
from datajourney.chapters.common import COLD_MARGIN, UNDECIDED_WORDS, facts_reader, on_paper, table_of
from datajourney.chapters.wording import fact_value as _v
from datajourney.core import phrasing
from datajourney.core import phrasing as fx
from datajourney.core.facts import Facts, host_label
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.stats import mean, summarise
from datajourney.core.units import equals, size_label

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)

PINNED = "pinned, double-buffered"


# --------------------------------------------------------------------------- helpers
def _result_table(res, name: str) -> pd.DataFrame:
    """A table of the result as the run recorded it (empty where it has none): what the display functions show."""
    return table_of(res, name)


def _ok(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _gpu_ok_rows(res) -> pd.DataFrame:
    g = _result_table(res, "gpu")
    if not g.empty and "error" in g:
        g = g[g["error"].isna()]
    return g


# --------------------------------------------------------------------------- published metrics


# --------------------------------------------------------------------------- findings
#: Each path to GPU memory by its letter in the chapter's table of paths, and in a few words (the analysis's).
PATH_NAMES = analysis.PATH_WORDS


def path_letter(path: str, label: str | None = None) -> str:
    """'(b) pinned, double-buffered': a path's name (or ``label``) with its letter in the chapter's table of paths;
    (d) is kvikio, (e) the preloaded (warm) paths. The facts name paths in words alone (advice and other pages have
    no table of paths); this page's notes add the letter."""
    letter = (PATH_NAMES.get(path, ("",))[0] or ("d" if str(path).startswith("kvikio") else "e"))
    return f"({letter}) {label or path}"


def gpu_note(facts: Facts) -> str:
    """The cold paths to GPU memory ranked by this run's means, and how path (a) compares with path (b)."""
    ranked = facts.data.get("paths_ranked") or []
    if not ranked:
        return ""
    text = ("Cold paths, fastest first: "
            + ", ".join(f"{phrasing.text(path_letter(facts[k].setting['path'], facts[k].label))} {_v(facts, k)}"
                        for k in ranked) + ".")
    if "plain_vs_path_b" in facts:
        text += (" Path (a), pageable reads each copied before the next, was "
                 f"{phrasing.comparison(facts['plain_vs_path_b'], baseline='path (b)')}.")
    return text


def gds_note(facts: Facts) -> str:
    """Beside the GDS finding: kvikio's CPU time per GB against path (b)'s, and whether the published GDS gain
    can be reproduced here."""
    if "gds" not in facts:
        return ""
    text = ""
    if "gds_cpu_vs_path_b" in facts:
        text = (f"kvikio's fastest setting used {_v(facts, 'gds_cpu')} of CPU time per GB against path (b)'s "
                f"{_v(facts, 'path_b_cpu')} "
                f"({phrasing.comparison(facts['gds_cpu_vs_path_b'], baseline='path (b)')}).")
    if (facts.data.get("gds_status") or {}).get("path") != "GDS":
        text += " The published GDS gain cannot be reproduced here: its data still pass through host memory."
    return text.strip()


def _grid_rows(res) -> pd.DataFrame:
    g = _result_table(res, "grid")
    return g[g["error"].isna()] if not g.empty and "error" in g else g


def _sum(x: pd.Series) -> float:
    """A sum that stays NaN when every value is missing."""
    return x.astype(float).sum(min_count=1)


def asked_vs_seen_frame(res) -> pd.DataFrame:
    """Per (mode, size, threads): asked request size and queue depth vs the device's view, pooled over runs
    (the device's request size is its bytes over its requests, summed over runs)."""
    g = _grid_rows(res)
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


def asked_seen_note(facts: Facts) -> str:
    """Beside the asked-vs-seen table: how the largest O_DIRECT requests were split, the queue depth the device
    saw and where the rest of each request's time went, and how much of what the device read was ours."""
    text = ""
    sp = facts.get("split")
    if sp is not None:
        seen = facts.data.get("split_seen") or []
        st = sp.setting
        by = ", ".join(f"{size_label(v)} at {fx.num(t)}" for t, v in seen)
        text += (f" At {size_label(st['asked'])} with O_DIRECT the device saw requests of {by} "
                 f"thread{'s' if seen and seen[-1][0] > 1 else ''}")
        if sp.value == "as asked":
            text += ": as asked."
        elif sp.value == "between":
            text += (f": between what the queue allows for a buffer of separate 4 KiB pages "
                     f"({fx.num(st['max_segments'])} segments per request: {size_label(st['low'])}) and its "
                     f"max_sectors_kb ({size_label(st['high'])}, reached only where the buffer is physically "
                     "contiguous, as in huge pages). How contiguous each buffer was is not recorded here.")
        else:
            text += ": outside what the queue's max_segments and max_sectors_kb predict (cause not established here)."
    qd = facts.get("seen_depth")
    if qd is not None:
        s = qd.setting
        busy = facts.get("seen_busy")
        text += (f" Asked for {fx.num(s['threads'])} requests of {size_label(s['asked'])} at once "
                 f"({phrasing.text(s['mode'])}), the device averaged {phrasing.value(qd)} in flight"
                 + (f", busy {phrasing.share(busy.number)} of the time" if busy is not None else ""))
        why = facts["seen_depth_verdict"].value
        if why == "outside":
            text += (f": each request spent {_v(facts, 'device_us')} in the block layer and the device but "
                     f"{_v(facts, 'call_us')} on average from call to return, so "
                     f"{phrasing.share(facts.number('outside_share'))} of its time was spent outside the device's "
                     "queue, in the rest of each timed call (the system call above the block layer, and the thread "
                     "getting to run again once the read returns); this run does not time those parts apart")
        elif why == "split":
            text += ": more than asked, because the kernel split each request into several"
        text += "."
    own = facts.get("own_share")
    if own is not None:
        if facts["own_share_clean"].value == "no":
            text += (f" Caution: in some cells only {phrasing.share(own.number)} of what the device read was this "
                     "process's (/proc/self/io); other processes used the same device meanwhile, so its averages "
                     "mix their requests with ours.")
        else:
            text += (f" At least {phrasing.share(own.number)} of what the device read in every cell was this "
                     "process's (/proc/self/io).")
    return text.strip()


def random_summary_frame(res) -> pd.DataFrame:
    r = _result_table(res, "random")
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


def random_note(facts: Facts) -> str:
    """A memory map at the same random offsets against one pread thread, and what its page faults read."""
    c = facts.get("random_mmap_vs_one")
    if c is None:
        return ""
    text = f"Touching a memory map at the same offsets was {phrasing.comparison(c, baseline='one pread thread')}"
    if facts.get("random_mmap_readaround") is not None and facts["random_mmap_readaround"].value == "yes":
        text += (f": the storage read {_v(facts, 'random_mmap_read_per_touched')} the bytes it touched, because "
                 "each page fault reads around the faulting page, up to the readahead window")
    if "random_madv_vs_one" in facts:
        text += (f"; marked MADV_RANDOM, the map was "
                 f"{phrasing.comparison(facts['random_madv_vs_one'], baseline='pread')}")
    return text + "."


def readahead_more(facts: Facts) -> str:
    """Beside the readahead table: the fastest read_ahead_kb where it is neither end, what random reads cost at
    each end, and the per-file hints (no root needed)."""
    text = ""
    c = facts.get("readahead_best_vs_largest")
    if c is not None and c.number is not None and c.number > 1 and not c.level:
        text += (f" The fastest setting was {phrasing.text(facts['readahead_best'].label)} "
                 f"({_v(facts, 'readahead_best')}), {phrasing.comparison(c, facts)}.")
    lo, hi = facts.get("readahead_random_bytes.low"), facts.get("readahead_random_bytes.high")
    if lo is not None and hi is not None:
        text += (f" For random 4 KiB reads the storage read {phrasing.value(lo, runs=False)} the asked bytes at "
                 f"{phrasing.text(lo.label)} and {phrasing.value(hi, runs=False)} at {phrasing.text(hi.label)}.")
    bits = [f"POSIX_FADV_{h} was {phrasing.comparison(facts[f'fadvise_seq.{h}.vs_none'], baseline='no hint')}"
            for h in ("SEQUENTIAL", "WILLNEED", "RANDOM") if f"fadvise_seq.{h}.vs_none" in facts]
    if "fadvise_random" in facts:
        bits.append(f"for random reads the storage read {_v(facts, 'fadvise_random_bytes')} the asked bytes with "
                    f"POSIX_FADV_RANDOM and {_v(facts, 'no_hint_bytes')} without a hint "
                    f"({phrasing.comparison(facts['fadvise_random'], baseline='without a hint')})")
    if bits:
        text += " Per file, without root: sequentially, " + fx.and_list(bits) + "."
    return text.strip()


def latency_note(facts: Facts) -> str:
    """Beside the latency chart: the same blocks read again at once, against the first pass."""
    c = facts.get("second_vs_first")
    if c is None:
        return ""
    why = ""
    if c.level:
        why = "; both passes were served from the same place"
    elif c.number is not None and c.number < 1:
        why = "; the first pass filled a cache below this machine"
    return (f"Read again at once, the same blocks took {_v(facts, 'second_pass')} against the first pass's "
            f"{_v(facts, 'virtual_disk')}: {phrasing.comparison(c, baseline='the first pass')}{why}.")


# --------------------------------------------------------------------------- io_uring (experiment 3b)
def uring_summary_frame(res) -> pd.DataFrame:
    u = _result_table(res, "uring")
    if u.empty:
        return u
    return u.groupby(["io_mode", "depth"], sort=True).agg(
        IOPS=("IOPS", "mean"), IOPS_min=("IOPS", "min"), IOPS_max=("IOPS", "max"), p50_us=("p50_us", "mean"),
        p99_us=("p99_us", "mean"), seen_qd=("dev_queue_depth", "mean"), util=("dev_util", "mean"),
        seen_over_asked=("seen_over_asked", "mean"), n=("run", "count")).reset_index()


def uring_table(res) -> pd.DataFrame:
    s = uring_summary_frame(res)
    if s.empty:
        return s
    return pd.DataFrame({"reader": [f"io_uring, {m}, depth {int(d)}" for m, d in zip(s["io_mode"], s["depth"])],
                         "IOPS (mean)": s["IOPS"],
                         "IOPS over runs": [fx.span(lo, hi) for lo, hi in zip(s["IOPS_min"], s["IOPS_max"])],
                         "p50 (µs)": s["p50_us"], "p99 (µs)": s["p99_us"], "seen depth": s["seen_qd"],
                         "device busy (%)": 100 * s["util"].clip(upper=1),
                         "bytes read for us ÷ asked": s["seen_over_asked"], "runs": s["n"]})


def uring_note(facts: Facts) -> str:
    """What io_uring did for the cold random 4 KiB reads, beside the pread thread pool at the same offsets;
    or why it was not measured (the status the run recorded)."""
    modes = facts.data.get("uring_modes") or []
    status = facts.data.get("uring_status")
    if not modes:
        if status is not None and not status["available"]:
            note = status["note"]
            why = (" To measure it, install liburing (`pip install liburing`)." if "liburing" in note else
                   " Container seccomp profiles and the sysctl kernel.io\\_uring\\_disabled commonly block it."
                   if "refused" in note else "")
            return phrasing.skipped("io_uring", note) + why
        return ("io_uring: not in the reference run (the io_uring reader was added after it); run the chapter "
                "with liburing installed (`pip install liburing`) to measure it here.")
    bits = []
    for mode in modes:
        best = facts[f"uring.{mode}.best"]
        bit = f"{phrasing.text(mode)}: **{_v(facts, f'uring.{mode}.best')}** at depth {fx.num(best.setting['depth'])}"
        if f"uring.{mode}.gain" in facts:
            shallow = facts[f"uring.{mode}.shallow"]
            bit += (", " + phrasing.comparison(facts[f"uring.{mode}.gain"],
                                               baseline=f"depth {fx.num(shallow.setting['depth'])}"))
        if best.setting["depth"] < best.setting["deepest"]:
            bit += (f" (deeper queues, up to {fx.num(best.setting['deepest'])}, added nothing: the device, or what "
                    "serves it, was saturated)")
        bits.append(bit)
    text = "Cold random 4 KiB reads through one io_uring ring (one thread, no pool): " + "; ".join(bits) + "."
    c = facts.get("uring_vs_pread_pool")
    if c is not None:
        u, pool = facts["uring_best"], facts["pread_pool_best"]
        text += (f" Its best ({phrasing.text(u.setting['mode'])}, depth {fx.num(u.setting['depth'])}) was "
                 f"{phrasing.comparison(c, baseline='the best pread pool')} "
                 f"({fx.num(pool.setting['threads'])} threads, {_v(facts, 'pread_pool_best')}): "
                 + ("the same number of reads in flight gives the same IOPS whoever issues them; the device sets "
                    "the pace." if c.level or c.number is None else
                    "one thread with a deep queue beat many threads each waiting on one read." if c.number > 1 else
                    "the thread pool kept more reads in flight, or spent less per read, than this ring."))
    return text


# --------------------------------------------------------------------------- path (b): what decides its share


def _basis_words(basis: str) -> str:
    """What the sweep's shares are of (:func:`.analysis.sweep_basis`), in words."""
    return "the same run's slower link (dd or PCIe)" if basis == "dd or PCIe" else "the same run's dd read"


def pipeline_table(res) -> pd.DataFrame:
    s = analysis.pipeline_summary(res)
    if s.empty:
        return s
    basis = analysis.sweep_basis(res)
    # `dd` is no ceiling for these settings (a setting may read faster), so each is a speed ratio, never a share
    return pd.DataFrame({"reads": s["mode"], "chunk": s["chunk"].map(lambda v: size_label(int(v))),
                         "pinned buffers": s["buffers"].astype(int), "GB/s (mean)": s["GBps"],
                         f"speed ÷ same run's {basis} (×, mean)": s["share"],
                         "× over runs": [fx.span(lo, hi) for lo, hi in zip(s["share_min"], s["share_max"])],
                         "CPU s per GB": s["cpu"], "runs": s["n"].astype(int)})


def drift_note(facts: Facts) -> str:
    """Does the disk's own drift between runs explain path (b)'s spread against the mean ``dd`` read? From the
    main table: the spread of the ``dd`` runs beside the spread of path (b)'s runs (highest ÷ lowest of each)."""
    share = facts.get("path_b_share_of_dd")
    if share is None:
        return ""
    lo, hi = share.spread
    a, b = phrasing.share(lo), phrasing.share(hi)
    runs = f"spread over {a}–{b}" if a != b else f"each came to {a}"   # never a range of one number
    text = (f"Against the mean `dd` read ({_v(facts, 'dd_read')}) path (b)'s runs {runs} of it; the device's own "
            f"`dd` runs spread over "
            f"{_v(facts, 'dd_read', runs=True)}: {_v(facts, 'dd_drift')} highest ÷ lowest, against "
            f"{_v(facts, 'path_b_drift')} for path (b). ")
    whose = facts["drift_whose"].value
    text += {"disk": "The disk drifts between runs more than path (b) does: most of that spread is the disk's, not "
                     "the pipeline's, so each run must be set against a `dd` read of the same run.",
             "pipeline": "Path (b) varies more than the disk between runs: the pipeline itself (its chunk, its "
                         "buffers, its readahead) adds variation, which the sweep below measures.",
             "level": "The disk drifts between runs about as much as path (b) does: that spread is mostly the "
                      "disk's, so each run must be set against a `dd` read of the same run."}[whose]
    return text


def pipeline_note(facts: Facts) -> str:
    """The sweep's best and slowest settings, which setting path (b) used and why, whether any setting read
    faster than ``dd``, and which of chunk, buffers and read mode moves the share most."""
    drift = drift_note(facts)
    if "sweep_best" not in facts:
        return ((drift + " " if drift else "") + "The chunk × buffers sweep of path (b), buffered and O_DIRECT, each "
                "run paired with a `dd` read of the same run, is not in this result; it runs where CUDA "
                "is available.").strip()
    best, share = facts["sweep_best"], facts["sweep_best_share"]
    k = int(facts.number("sweep_settings") or 0)
    basis = _basis_words(facts["sweep_basis"].value)
    spread = ("in its one run" if share.spread is None else
              f"{phrasing.share(share.spread[0])}–{phrasing.share(share.spread[1])} over its {fx.num(share.n)} runs")
    text = (f"Best of the sweep's {fx.num(k)} setting{'s' if k != 1 else ''}: **{phrasing.text(best.label)} pinned "
            f"buffers**, {_v(facts, 'sweep_best')}, {phrasing.share(share.number)} of {basis} ({spread}).")
    if "sweep_best_vs_worst" in facts:
        text += (f" The slowest, {phrasing.text(facts['sweep_worst'].label)}, read {_v(facts, 'sweep_worst')}: the "
                 f"best was {phrasing.comparison(facts['sweep_best_vs_worst'], baseline='it')}.")
    used = facts.get("path_b_setting")
    if used is not None:
        why = path_b_choice(facts)
        if used.value == "best":
            text += f" Path (b) above read at this best setting ({why})."
        elif used.value == "other":
            text += (f" Path (b) above used {phrasing.text(used.label)} ({why}), which in the sweep was "
                     f"{phrasing.comparison(facts['sweep_used_vs_best'], baseline='the best')}.")
        else:
            text += f" Path (b) above used {phrasing.text(used.label)} ({why}), a setting the sweep did not include."
    over = facts.number("sweep_over_dd") or 0
    if over:
        text += (f" {fx.num(over)} of the sweep's {fx.num(facts.number('sweep_reads'))} reads went faster than the "
                 f"same run's `dd` (up to {phrasing.share(facts.number('sweep_over_dd_top'))}): `dd` reads 1 MiB at "
                 "a time through the page cache, and is no ceiling for these settings.")
    eff = [facts[f"sweep_effect.{c}"] for c in ("chunk", "buffers", "mode") if f"sweep_effect.{c}" in facts]
    if eff:
        v = facts["sweep_effect"]
        parts = [f"{phrasing.text(e.label)} {phrasing.value(e)}" for e in eff]
        text += (f" Averaged over the other settings, each setting moves the mean share by: {fx.and_list(parts)}; "
                 + ("none of them moves it by two points: the disk, not the pipeline's settings, sets the pace."
                    if v.value == "none" else f"{phrasing.text(v.setting['top'])} decides it." if v.value == "one" else
                    "the largest effects are level (within a point), so this sweep cannot tell them apart."))
    cw = facts.get("chunk_vs_window")
    if cw is not None:
        text += (f" The best buffered chunk ({size_label(facts.number('sweep_buffered_chunk'))}) is "
                 + {"larger": "larger than", "smaller": "smaller than", "same": "the same size as"}[cw.value]
                 + f" the device's readahead window ({size_label(facts.number('readahead_window'))}).")
    if "sweep_cpu_buffered_vs_direct" in facts:
        text += (f" At their best settings O_DIRECT used {_v(facts, 'sweep_cpu_direct')} of CPU per GB against "
                 f"buffered reads' {_v(facts, 'sweep_cpu_buffered')} "
                 f"({phrasing.comparison(facts['sweep_cpu_buffered_vs_direct'], baseline='the O_DIRECT path')}: "
                 "buffered reads also copy out of the page cache).")
    return (drift + " " + text).strip() if drift else text


# --------------------------------------------------------------------------- notes and tables
#: The warm path whose data never leave GPU memory (so it has no share of the PCIe link).
DEVICE_COPY = "device copy"


def paper_exercise(facts) -> str:
    """Little's law on the random-read table, worked by hand: each pread thread keeps one read in flight, so IOPS ≈
    threads ÷ the mean time of a read; one thread and the largest pool against what they measured, and, where
    ``/proc/diskstats`` was read, the time a request spent in the block layer and the device; the answers folded,
    from this run's facts."""
    facts = facts_of(facts)
    rows = sorted((r for r in facts.data.get("little") or [] if r.get("iops") and r.get("latency_us")),
                  key=lambda r: r["threads"])
    if not rows:
        return ("The exercise on paper needs the random-read table's pread rows, which this run did not measure "
                "(`random_reads` or `random_seconds` left no read).")
    one, top = rows[0], rows[-1]
    size = f"{size_label(one['request'])} " if one.get("request") else ""

    def threads(r) -> str:
        return "one thread" if r["threads"] == 1 else f"a pool of {r['threads']} threads"

    def predicted(r) -> tuple[str, float]:
        p = r["threads"] / (r["latency_us"] * 1e-6)
        eq = equals(r["latency_us"], "µs", lambda x: fx.num(r["threads"] / (x * 1e-6), "IOPS") == fx.num(p, "IOPS"))
        return (f"{r['threads']} ÷ {fx.num(r['latency_us'], 'µs')} {eq} **{fx.num(p, 'IOPS')}**; measured "
                f"{fx.num(r['iops'], 'IOPS')}, {fx.pct(r['iops'] / p)} of it"), r["iops"] / p

    intro = (f"**Work it out.** Little's law holds for any queue in a steady state: the requests in flight = the rate "
             "× the time each one spends, so **IOPS ≈ requests in flight ÷ latency**. A pread thread waits for its "
             f"read, so each thread keeps one read in flight. In the random-read table (cold {size}reads at random "
             f"offsets) a read took **{fx.num(one['latency_us'], 'µs')}** on average from call to return with "
             f"{threads(one)}" + ("." if top is one else
                                  f", and **{fx.num(top['latency_us'], 'µs')}** with {threads(top)}."))
    text, share = predicted(one)
    questions = [f"What IOPS does Little's law predict for {threads(one)}?"]
    answers = [text + (": below the prediction by the time a thread spends between reads, with none in flight."
                       if share < 1 else ".")]
    if top is not one:
        text, _ = predicted(top)
        questions.append(f"And for {threads(top)}?")
        answers.append(text + ".")
    depth = top.get("device_depth")
    if depth:
        at = depth / top["iops"] * 1e6
        eq = equals(depth, "", lambda x: fx.num(x / top["iops"] * 1e6, "µs") == fx.num(at, "µs"))
        questions.append(f"While {threads(top)} read, the block layer and the device held **{fx.num(depth)}** "
                         "requests in flight on average (`/proc/diskstats`). How long did each request spend there, "
                         "and what share of a read's time is that?")
        answers.append(f"{fx.num(depth)} ÷ {fx.num(top['iops'], 'IOPS')} {eq} **{fx.num(at, 'µs')}**, "
                       f"**{fx.pct(at / top['latency_us'])}** of the {fx.num(top['latency_us'], 'µs')} a read took; "
                       "the rest of each read's time was spent outside the block layer and the device.")
    return on_paper(intro, questions, answers)


def gpu_table(res) -> pd.DataFrame:
    """Per path, cold ones fastest first and then the warm ones: GB/s (mean, lowest and highest run), CPU s per
    GB, the share of the PCIe ceiling (the run's fastest pinned copy; only for a path that crosses the link: a copy
    inside GPU memory does not), the speed against the mean cold ``dd`` read (a ratio: a warm path never touches
    the disk, so it is no share of it), bytes checked."""
    g = _gpu_ok_rows(res)
    dev, pc = mean(analysis.dd_runs(res)), analysis.pcie_ceiling(res)
    rows = []
    for (path, cache), d in g.groupby(["path", "cache"], sort=False):
        m = d["GBps"].mean()
        rows.append({"path": path_letter(path), "cache": cache, "GB/s (mean)": m,
                     "GB/s over runs": fx.span(d["GBps"].min(), d["GBps"].max()),
                     "CPU s per GB": d["cpu_s_per_GB"].mean(),
                     "% of the PCIe copy": 100 * m / pc if pc and not path.endswith(DEVICE_COPY) else float("nan"),
                     "speed ÷ dd's cold read (×)": m / dev if _ok(dev) else float("nan"),
                     "bytes checked": "all equal" if d["verified"].all() else "MISMATCH", "runs": len(d)})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["cache", "GB/s (mean)"], ascending=[True, False]).reset_index(drop=True)


def gpu_chart(res, title: str) -> go.Figure:
    """The cold paths to GPU memory, fastest on top, with the mean ``dd`` read as a dashed line."""
    g = _gpu_ok_rows(res)
    c = g[g["cache"] == "cold"]
    s = summarise(c, ["path"], "GBps").assign(label=lambda d: d["path"].map(path_letter))
    dev = analysis.dd_runs(res)
    return charts.hbars(s, title=title, xaxis="GB/s", unit="GB/s", line=mean(dev) if dev else None,
                        line_label="dd, cold (mean)")


def pipeline_chart(res, title: str) -> go.Figure:
    """Every swept setting of path (b) as a share of the same run's ``dd`` read, best on top; 100% dashed."""
    b = pipeline_shares_frame(res).copy()
    b["label"] = [analysis.setting_words(m, c, n) for m, c, n in zip(b["mode"], b["chunk"], b["buffers"])]
    b["share_pct"] = 100 * b["share"]
    return charts.hbars(summarise(b, ["label"], "share_pct"), title=title, unit="%", line=100.0,
                        xaxis=f"% of {_basis_words(analysis.sweep_basis(res))}", line_label="= dd")


def random_chart(res, title: str) -> go.Figure:
    """Cold random 4 KiB reads: IOPS of each reader, fastest on top."""
    r = _result_table(res, "random")
    r = r.assign(label=[m if m != "pread, thread pool" else f"pread, {t} threads"
                        for m, t in zip(r["mode"], r["threads"])])
    return charts.hbars(summarise(r, ["label"], "IOPS"), title=title, xaxis="reads per second (IOPS)", unit="IOPS")


def ceilings_text(facts: Facts) -> str:
    """The two links measured in this run, and whether the disk's ``dd`` read is a ceiling here."""
    dd = facts.get("dd_read")
    pc = facts.get("pcie_copy")
    out = ("Measured in this run: the device's cold sequential read of the same file with `dd bs=1M` "
           f"(chapter 2's method, run in this chapter) {phrasing.value(dd)}"
           if dd is not None and dd.number is not None
           else "No `dd` read was measured")
    if pc is not None and pc.number is not None and facts.data.get("pcie_size"):
        out += (f"; a pinned host-to-device copy of {size_label(facts.data['pcie_size'])} through a second path "
                f"(chapter 6's independent copy) {phrasing.value(pc)}.")
    else:
        out += "; no PCIe ceiling (no GPU)."
    top = facts.get("pcie_ceiling")
    if top is not None:
        out += (f" The PCIe ceiling, of which the table below gives shares, is the run's fastest pinned copy: "
                f"{phrasing.value(top)}, " + ("a run of path (e)'s copy from pinned RAM (the same copy), faster than "
                                              "every repeat of the independent one." if top.setting.get("from") ==
                                              "copy only" else "the independent copy's fastest repeat."))
    every = facts.get("dd_runs_all")
    if every is not None:
        if facts["disk_ceiling"].value == "yes":
            out += (f" The fastest of these {fx.num(every.number)} `dd` runs, {_v(facts, 'dd_fastest')}, is "
                    "the disk's ceiling here: no cold read went faster.")
        else:
            top = facts["fastest_read"]
            out += (f" The disk has no measured ceiling here: {phrasing.text(top.label)} read "
                    f"{_v(facts, 'fastest_read')}, faster than every one of these {fx.num(every.number)} "
                    "`dd` runs (at most "
                    f"{_v(facts, 'dd_fastest')}).")
    return out


def asked_seen_table(res) -> pd.DataFrame:
    s = asked_vs_seen_frame(res)
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
    s = random_summary_frame(res)
    if s.empty:
        return s
    return pd.DataFrame({"reader": s["variant"], "IOPS (mean)": s["IOPS"],
                         "IOPS over runs": [fx.span(lo, hi) for lo, hi in zip(s["IOPS_min"], s["IOPS_max"])],
                         "p50 (µs)": s["p50_us"], "p99 (µs)": s["p99_us"],
                         "seen request": s["seen_request"].map(lambda v: size_label(int(v)) if _ok(v) else "—"),
                         "seen depth": s["seen_qd"], "bytes read for us ÷ asked": s["seen_over_asked"], "runs": s["n"]})


def readahead_table(res) -> pd.DataFrame:
    ra = _result_table(res, "readahead")
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


# --------------------------------------------------------------------------- evidence helpers (tables, notes)
def has_gpu(facts: Facts) -> bool:
    """Whether the run read its file into GPU memory along any path (its analysis's ``gpu_ran``)."""
    ran = facts.get("gpu_ran")
    return ran is not None and ran.value == "yes"


def pipeline_shares_frame(res) -> pd.DataFrame:
    """Each cold path-(b) run of the sweep as a share of the slower link measured in the same run."""
    return analysis.sweep_shares(_result_table(res, "pipeline"), analysis.pcie_ceiling(res))


def path_b_choice(facts: Facts) -> str:
    """Why path (b) read at its setting: the sweep's best, the run's parameters, the fallback, or (a run made
    before the sweep chose it) the run's fixed setting."""
    f = facts.get("path_b_by")
    by = dict(x.split(":", 1) for x in str(f.value).split("|")) if f is not None and f.value else {}
    if not by:
        return "a fixed setting of this run, made before the sweep chose it"
    n = int(f.setting.get("settings") or 0)
    ways = set(by.values())
    if ways == {"sweep"}:
        return f"the best of the sweep's {fx.num(n)} setting{'s' if n != 1 else ''}, measured first"
    if ways == {"parameter"}:
        return "set by the run's parameters"
    if ways == {"fallback"}:
        return "the fallback setting: no sweep ran to choose from"
    parts = [f"{phrasing.text(k)} by {'the ' + phrasing.text(v) if v != 'parameter' else 'parameter'}"
             for k, v in sorted(by.items())]
    return fx.and_list(parts)


def gpu_errors(facts: Facts) -> list[str]:
    """Each failed path and its error, as Markdown (the error, a string from the result, in a code span)."""
    return [f"{phrasing.text(p)}: {phrasing.code(e)}" for p, e in facts.data.get("gpu_errors") or []]


def readahead_note(facts: Facts) -> str:
    """Whether the device's read_ahead_kb was changed, and whether every restore read back equal."""
    meta = facts.data.get("readahead_sysfs") or {}
    if not meta.get("used") or "readahead_restored" not in facts:
        return ("The device's `read_ahead_kb` was left alone: " + phrasing.text(meta.get("note") or "not asked for")
                + ". The per-file hints below need no privilege.")
    return (f"`read_ahead_kb` of the device was set {fx.num(facts.number('readahead_restored'))} times and restored "
            f"to its original {fx.num(meta.get('original_kb'))} KiB after each, "
            + ("read back equal every time." if facts["readahead_read_back"].value == "equal" else
               "but a read-back differed: see the result's metadata."))


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


def storage_notes(facts: Facts) -> str:
    """What each storage setting of the data directory means for this chapter's results (as the analysis read
    them from the run's record)."""
    d = facts.data.get("device")
    if not d:
        return "No storage facts were recorded."
    notes = [{"noatime": "`noatime`: reads do not write access times",
              "relatime": "`relatime`: a read updates the access time at most once a day per file, so reads cost "
                          "almost no metadata writes (`noatime` removes the rest)"}.get(
        d["atime"], "neither `noatime` nor `relatime`: every read of a file may write its access time")]
    sch = d.get("scheduler")
    if sch:
        notes.append(f"scheduler {phrasing.code(sch)}: " + (
            "requests go to the device in the order they come (the usual choice for NVMe)" if sch == "none" else
            "requests are sorted and batched with deadlines; at high queue depth on fast flash it costs some CPU "
            "per request" if sch == "mq-deadline" else "a fair-queueing scheduler: it trades throughput for fairness"))
    if d.get("model_missing"):
        notes.append(f"{phrasing.code(d.get('disk'))} reports no model: a virtual disk, whose reads may be served "
                     "from the host's cache")
    if d.get("rotational_default"):
        notes.append("the rotational flag of a virtio disk is the driver's default, not a fact about the storage below")
    if d.get("max_sectors_kb"):
        notes.append(f"max_sectors_kb {fx.num(d.get('max_sectors_kb'))}: larger requests are split into pieces of "
                     "this size")
    return "; ".join(notes) + "."


def no_gpu_text(facts: Facts, ref) -> str:
    """Why nothing was read into GPU memory in this run (``facts``), and whether the reference run ``ref`` (a
    result, or None) shows the section instead."""
    why = phrasing.text(facts["to_gpu"].setting.get("why") or "no CUDA device")
    if ref is None or not has_gpu(facts_of(ref)):
        return f"Nothing was read into GPU memory here ({why}), and no reference run with a GPU is committed."
    return (f"Nothing was read into GPU memory in this run ({why}). The charts and tables of this section show "
            f"the **reference run** ({phrasing.text(host_label(ref.fingerprint))}, run {phrasing.code(ref.run_id)}), "
            "labelled.")


def key_metrics(res) -> dict:
    """Metric name (as in published.py) -> (value, None) of this result, from its facts: a rate is published
    beside only the fact the analysis marked as the same metric."""
    facts = facts_of(res)
    return {f.published: (f.number, None) for f in facts.facts.values()
            if f.published and f.number is not None and not f.is_comparison}


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
    lead = (f"Cold, the fastest path into GPU memory, {phrasing.text(f.label)}, ran" if short else
            f"Cold, the fastest of {fx.num(n)} paths into GPU memory, {phrasing.text(f.label)}, moved a {size} file")
    text = f"{lead} at **{phrasing.value(f, runs=not short)}**: {_cmp(facts, 'to_gpu_vs_dd')}"
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
    through = "through GDS" if mode == "GDS" else "without GDS"
    text = (f"kvikio ran in {phrasing.code(mode)} ({why}). Its fastest setting, {phrasing.text(f.label)}, read the "
            f"cold file into GPU memory {through} at {phrasing.value(f)}")
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
        beyond = facts.get("uring_vs_pool")  # another way of issuing reads that went past the pool's plateau
        if facts["pool_saturates"].value == "yes":
            text += (f" {span_} IOPS were {phrasing.ratio_words(step) or 'unchanged'}"
                     + (f" with the device busy {phrasing.share(busy.number)} of the time" if busy else ""))
            if beyond is not None and beyond.number is not None and beyond.number > 1 and not beyond.level:
                text += (f": the threads stop gaining there, not the device, since "
                         f"{phrasing.text(facts['uring_best'].label)} reached {phrasing.value(facts['uring_best'])}, "
                         f"{phrasing.comparison(beyond, facts)}.")
            else:
                text += ": the device (or what serves it) saturates there."
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
        if v != "same":
            what = f"{fx.num(m.number, '×')} {v}"
        elif round(m.number, 2) == 1.0:   # as the ratio is printed: 1.00×
            what = "the same size"
        else:
            what = (f"{fx.num(m.number, '×')} the asked size, within the {fx.num(analysis.SAME_SIZE, '×')} this "
                    "chapter counts as unchanged")
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
                f"{_cmp(facts, 'readahead')}: {phrasing.value(hi)} against {phrasing.value(lo)} (the original "
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
    vf = facts["virtual_disk_verdict"]
    verdict = vf.value
    below = verdict == "cache below"
    floor = facts["flash_floor"]
    if verdict == "cannot tell":  # the shared rule's band around the flash floor (chapter 2 words it the same way)
        text = (f"{where} a cold 4 KiB O_DIRECT read, one at a time, took **{phrasing.value(f, runs=not short)}**"
                f" (median): {UNDECIDED_WORDS}.")
        return Finding("virtual_disk", text + ("" if short else _whose_verdict(vf, floor)), f.number, f.unit,
                       interval=f.spread)
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
    return Finding("virtual_disk", text + _whose_verdict(vf, floor), f.number, f.unit, interval=f.spread)


_OWN = {"cache below": "a cache below this machine", "device": "the device", "cannot tell": "cannot tell"}


def _whose_verdict(vf, floor) -> str:
    """Whose latency check gave the verdict, by the rule every chapter uses: chapter 2's in this run (this chapter's
    own check then said beside it, agreeing or not), or this chapter's own."""
    lo, hi = floor.number / COLD_MARGIN, floor.number * COLD_MARGIN
    band = f"{fx.span(lo, hi, 'µs')}, the band around the flash floor ({phrasing.value(floor)})"
    s = vf.setting or {}
    source, own = s.get("source") or "this chapter's latency check", s.get("own", vf.value)
    if source.startswith("this chapter"):
        rule = ("every run's median lies below" if vf.value == "cache below" else
                "every run's median lies above" if vf.value == "device" else "not every run's median lies clear of")
        return f" By the rule every chapter uses, this chapter's own latency check: {rule} {band}."
    meds = [float(m) for m in s.get("medians") or ()]
    said = f" ({fx.span(min(meds), max(meds), 'µs')} over its runs)" if meds else ""
    alone = ("agrees" if own == vf.value else "alone cannot tell: a run's median lies inside " + band
             if own == "cannot tell" else f"alone points to {_OWN[own]}")
    return (f" The verdict comes from {phrasing.text(source)}{said}, which every chapter of this run follows; "
            f"this chapter's own check {alone}.")


def finding(facts: Facts, key: str) -> list[Finding]:
    """The key result ``key`` (as a one-item list for :func:`~datajourney.book.report.findings`)."""
    return [f for f in findings(facts) if f.key == key]


def findings(facts: Facts) -> list[Finding]:
    """The chapter's key results, each one fact in the book's words."""
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
