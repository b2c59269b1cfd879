"""Chapter 10's page: the opening and the key results word the facts of
:mod:`~datajourney.chapters.c10_mmap_vs_read.analysis` (through :mod:`~datajourney.core.phrasing`); the notes,
tables and charts of the notebook show the result's tables as evidence. Every string from a result that reaches
Markdown goes through :func:`~datajourney.core.phrasing.text` or :func:`~datajourney.core.phrasing.code`."""
from __future__ import annotations

import re

import pandas as pd

from datajourney.chapters.c10_mmap_vs_read.analysis import (  # noqa: F401 - used by the notebook
    CHAPTER,
    METHOD_LABELS,
    MODE_NAMES,
    _grid,
    grid_wins,
    has_posix,
    overhead_table,
    per_call_cost,
    posix_counts,
)
from datajourney.chapters.c10_mmap_vs_read.analysis import analyse as _analyse
from datajourney.chapters.c10_mmap_vs_read.analysis import headline_cache as _cache_for_headline
from datajourney.chapters.c10_mmap_vs_read.analysis import largest as _largest
from datajourney.chapters.common import facts_reader, on_paper
from datajourney.chapters.wording import fact_value as _v
from datajourney.core import phrasing
from datajourney.core.facts import Facts
from datajourney.core.phrasing import Action, Finding, Opening, choose
from datajourney.core.results import Result
from datajourney.core.units import MB, GiB, KiB, MiB, num, size_label, span

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)

# ---------------------------------------------------------------------------- key results


def loader_note(facts: Facts) -> str:
    """Beside the loader-time heatmaps: at how many sweep points each mode was faster, per cache state."""
    out = []
    for cache in ("cold", "warm"):
        if f"sweep.{cache}.points" not in facts:
            continue
        t = (f"{cache}, mmap was faster at {_v(facts, f'sweep.{cache}.mmap_wins')} of "
             f"{_v(facts, f'sweep.{cache}.points')} sweep points and read() at {_v(facts, f'sweep.{cache}.read_wins')}")
        if cache == "cold" and "sweep.cold.read_won.mmap_MB" in facts:
            t += (f" (at those, mmap read {_mib_of(facts, 'sweep.cold.read_won.mmap_MB')} from storage per "
                  f"configuration and read() {_mib_of(facts, 'sweep.cold.read_won.read_MB')})")
        out.append(t)
    return ("Over the whole sweep: " + "; ".join(out) + ".") if out else ""


def _mib_of(facts: Facts, key: str) -> str:
    """Fact ``key``, a byte count the analysis holds in MB, in the binary units the page gives sizes in."""
    return _binary(facts.number(key) * MB)


def per_sample_bandwidth_table(res: Result) -> pd.DataFrame:
    """Bytes of a sample ÷ time inside ``__getitem__`` (lookup + read + construct), per mode,
    sequence length, batch and cache state (mean, min, max over runs) in MB/s."""
    g = _grid(res).copy()
    g["getitem_s"] = g["lookup_s"] + g["read_s"] + g["construct_s"]
    g["MBps"] = g["app_bytes"] / g["getitem_s"] / 1e6
    out = g.groupby(["cache", "mode", "seq", "batch"])["MBps"].agg(["mean", "min", "max", "count"]).reset_index()
    return out.rename(columns={"count": "n"})


def checkpoint_summary_table(res: Result) -> pd.DataFrame:
    c = res.table("checkpoint")
    return (c.groupby(["state_bytes", "method"]).agg(GBps=("GBps", "mean"), GBps_min=("GBps", "min"),
                                                     GBps_max=("GBps", "max"), blocked_s=("blocked_s", "mean"),
                                                     total_s=("total_s", "mean"), n=("GBps", "size"))
            .reset_index())


def checkpoint_note(facts: Facts) -> str:
    """Beside the checkpoint table: how long async_save went on writing after it returned, and its time
    from call to synced files against the synchronous save (largest state)."""
    c = facts.get("checkpoint.total_vs_sync")
    if c is None or "checkpoint.async_background" not in facts:
        return ""
    return (f"After async_save returned, writing went on for {_v(facts, 'checkpoint.async_background')} in the "
            f"background; from call to synced files it was {phrasing.comparison(c, baseline='the synchronous save')}.")


# ---------------------------------------------------------------------------- notes and tables
def data_note(facts: Facts) -> str:
    if "data.tokens" not in facts:
        return "The data set's composition was not recorded."
    c = facts.data.get("composition") or {}
    src = phrasing.text(c.get("real_source") or "none could be loaded here")
    return (f"Data set: {_v(facts, 'data.tokens')} tokens in {_v(facts, 'data.documents')} documents; "
            f"{_v(facts, 'data.real_tokens')} tokens ({_v(facts, 'data.real_documents')} documents) are real text "
            f"({src}), the other {_v(facts, 'data.synthetic_tokens')} are synthetic ids whose document lengths are "
            f"{phrasing.text(_lengths(c.get('synthetic_lengths')))}. Token values do not change the I/O; sizes and "
            "layout do.")


def _lengths(origin) -> str:
    """Where the synthetic documents' lengths came from, as the data set's manifest says it ("lengths drawn from
    the real documents' lengths", "no real text here: log-normal lengths (median 512, sigma 1.0)"), less the word
    the sentence says already: "drawn from the real documents' lengths", "log-normal (median 512, sigma 1.0)"."""
    text = str(origin or "not recorded").removeprefix("no real text here: ")
    return re.sub(r"^(.*?)\blengths\b ?", r"\1", text, count=1).strip() or text


def heatmap_table(res: Result, value: str = "loader_s", cache: str | None = None) -> pd.DataFrame:
    g = _grid(res)
    cache = cache or _cache_for_headline(g)
    g = g[g["cache"] == cache]
    return g.groupby(["mode", "seq", "batch"])[value].mean().reset_index()


def posix_table(res: Result) -> pd.DataFrame:
    c = posix_counts(res)
    c = c.assign(mode=c["mode"].map(MODE_NAMES))
    c["posix_read_MiB"] = c["posix_read_bytes"] / MiB
    return c[["mode", "seq", "batch", "samples", "pieces", "posix_events", "posix_opens", "posix_reads",
              "posix_read_MiB", "posix_mean_read_bytes", "posix_read_s"]]


def calls_note(facts: Facts) -> str:
    """Which calls the tracer recorded per document piece under read(), and which it did not."""
    names = facts.data.get("calls_recorded")
    if names is None:
        return ""
    listed = ", ".join(f"{phrasing.code(k)} {_v(facts, f'calls.{k}')}" for k in names)
    miss = "" if facts["calls.stat_seen"].value == "yes" else (
        " The reader also calls fstat on every piece; the tracer recorded no stat call, so it is blind to it here.")
    wtext = ""
    if "calls.workers" in facts:
        n = facts.number("calls.workers")
        wtext = (f" With {_v(facts, 'calls.workers')} DataLoader worker{'s' if n != 1 else ''} it recorded "
                 f"{_v(facts, 'calls.workers_bin_reads')} reads of `.bin` for {_v(facts, 'calls.workers_pieces')} "
                 "pieces: the workers' calls are traced too.")
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
                   "application: collate (ms)": m["collate_s"] * 1e3, "application: sample data (MiB)":
                   m["app_bytes"] / MiB, "kernel: read calls": m["syscr"], "kernel: minor page faults": m["minflt"],
                   "kernel: major page faults": m["majflt"],
                   "kernel: from storage (MiB)": m["read_bytes"] / MiB if pd.notna(m.get("read_bytes")) else None,
                   "disk: read (MiB)": m["disk_read_bytes"] / MiB if pd.notna(m.get("disk_read_bytes")) else None}
            if has_posix(res) and cache == "warm":
                c = posix_counts(res)
                pc = c[(c["mode"] == mode) & (c["seq"] == seq) & (c["batch"] == batch)]
                row["POSIX view: events"] = float(pc["posix_events"].iloc[0]) if len(pc) else None
                row["POSIX view: read calls"] = float(pc["posix_reads"].iloc[0]) if len(pc) else None
            rows.append(row)
    return pd.DataFrame(rows)


def spans_note(facts: Facts) -> str:
    """Which application span dominates each mode (warm, largest point)."""
    at = facts.data.get("spans_at")
    if not at:
        return ""
    out = [f"under {MODE_NAMES[mode]} {phrasing.text(facts[f'spans.{mode}'].label)} takes the largest share "
           f"({phrasing.share(facts.number(f'spans.{mode}'))} of the spans)" for mode in ("mmap", "read")
           if f"spans.{mode}" in facts]
    return (f"Application spans ({at['cache']}, sequence {num(at['seq'])}, batch {num(at['batch'])}): "
            + "; ".join(out) + ".")


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


def _binary(n: float | None) -> str:
    """A measured byte count in binary units, to three significant figures: '64.0 MiB', '171 MiB', '3.99 KiB',
    '143 bytes' ('—' where it is missing)."""
    if n is None:
        return "—"
    for unit, b in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= b:
            return num(n / b, unit)
    return num(n, "bytes")


def _exact_digits(v: float, most: int = 3) -> int:
    """The fewest decimals (up to ``most``) that show ``v`` exactly: 43,980.5 one, 380 none."""
    return next((d for d in range(most + 1) if abs(v - round(v, d)) < 1e-9), most)


def _bytes(n: float) -> str:
    """A byte count in KiB for working by hand, exact to the byte where that takes at most three decimals:
    '175,630 KiB', '768.75 KiB' (the kernel counts whole pages, so its counts are whole KiB)."""
    v = n / KiB
    return f"{v:,.{_exact_digits(v)}f} KiB"


def _count(k: float) -> str:
    """A count, a mean over the runs, as exactly as it is: '43,980.5', '380'."""
    return f"{k:,.{_exact_digits(k)}f}"


def _kib(text: str) -> float:
    """The number a reader reads in :func:`_bytes`' or :func:`_count`'s text."""
    return float(text.removesuffix(" KiB").replace(",", ""))


def paper_exercise(facts) -> str:
    """Read amplification worked by hand at the largest cold point: the bytes its samples hold (samples × tokens ×
    bytes a token), what ``read()`` and ``mmap`` brought in from storage per byte of them, and what one read call
    and one major page fault brought in; the answers folded, from this run's facts. Sizes are in KiB, exact, and
    every answer is worked from the numbers as shown, so a reader's division gives the printed result."""
    facts = facts_of(facts)
    ex = facts.data.get("exercise") or {}
    rd, mm = ex.get("read") or {}, ex.get("mmap") or {}
    if not ex.get("samples") or not ex.get("sample_bytes") or not (rd.get("bytes") or mm.get("bytes")):
        why = {"no cold runs": "cold runs", "no counters": "the kernel's byte counters"}.get(
            getattr(facts.get("theory"), "value", None), "cold runs with the kernel's byte counters")
        return f"The exercise on paper needs what the loader brought in from storage, cold: this run has no {why}."
    n, seq, size, held = ex["samples"], ex["seq"], ex["itemsize"], ex["sample_bytes"]
    brought = [(MODE_NAMES[m], d["bytes"]) for m, d in (("read", rd), ("mmap", mm)) if d.get("bytes") is not None]
    intro = (f"**Work it out.** At the largest point of the sweep, cold (sequence {num(seq)}, batch "
             f"{num(ex['batch'])}), the loader delivered **{num(n)}** samples of {num(seq + 1)} tokens (each sample "
             f"carries one token more than its sequence, for the shifted labels), {size} bytes a token. From storage "
             "the process brought in " + " and ".join(
                 f"**{_bytes(b)}** under {name}" for name, b in brought) + " (the kernel's count, a mean over the "
             "runs; KiB = 2¹⁰ = 1,024 bytes).")
    questions = ["How many bytes do the samples hold?"]
    answers = [f"{num(n)} × {num(seq + 1)} × {size} = {held:,.0f} bytes = **{_bytes(held)}**."]
    for name, b in brought:
        questions.append(f"How many bytes did {name} bring in per byte the samples hold?")
        answers.append(f"{_bytes(b)} ÷ {_bytes(held)} = **{num(_kib(_bytes(b)) / _kib(_bytes(held)), '×')}**.")
    each = [("read call", rd["calls"], rd["bytes"], MODE_NAMES["read"])
            if rd.get("calls") and rd.get("bytes") is not None else None,
            ("major page fault", mm["faults"], mm["bytes"], MODE_NAMES["mmap"])
            if mm.get("faults") and mm.get("bytes") is not None else None]
    each = [e for e in each if e is not None]
    if each:
        questions.append("On average, how much did " + " and ".join(
            f"one {what} under {name} bring in (**{_count(k)}** of them"
            + ("" if float(k).is_integer() else ", a mean over the runs") + ")" for what, k, _, name in each) + "?")
        answers.append("; ".join(f"{name}: {_bytes(b)} ÷ {_count(k)} = "
                                 f"**{num(_kib(_bytes(b)) / _kib(_count(k)), 'KiB')}** a {what}"
                                 for what, k, b, name in each)
                       + (f", against a readahead window of {_v(facts, 'read_ahead_kb')}" if "read_ahead_kb" in facts
                          else "") + ".")
    return on_paper(intro, questions, answers)


def theory_note(facts: Facts) -> str:
    st = facts.get("theory")
    if st is None or st.value == "no cold runs":
        return "The theoretical check compares with bytes read from storage, so it needs cold runs; this run had none."
    if st.value == "no counters":
        return "The kernel's byte counters were not available here, so the theoretical check is left out."
    parts = [f"{MODE_NAMES[mode]} needed {_v(facts, f'theory.{mode}.needed')} of sample data but moved "
             f"{_v(facts, f'theory.{mode}.moved')} from storage ({_v(facts, f'theory.{mode}.amplification')} the "
             "sample bytes)" for mode in ("mmap", "read") if f"theory.{mode}.needed" in facts]
    text = "Theoretical check at the largest point, cold: " + "; ".join(parts) + "."
    why = []
    if "theory.mmap.per_fault" in facts:
        why.append(f"under mmap each major page fault brought in {_v(facts, 'theory.mmap.per_fault')} on average "
                   "(the kernel reads around a faulting page)")
    if "theory.read.per_call" in facts:
        why.append(f"under read() each read call of {_v(facts, 'theory.read.call_bytes')} on average brought in "
                   f"{_v(facts, 'theory.read.per_call')} (a page is the smallest unit the page cache reads)")
    if "theory.mmap.whole_file" in facts:
        why.append(f"under mmap the storage delivered {phrasing.share(facts.number('theory.mmap.whole_file'))} of "
                   "the whole `.bin` for one configuration: reading around the faults cached the file, so the later "
                   "faults were minor")
    if why:
        text += " The gap, measured: " + "; ".join(why) + "."
    if "read_ahead_kb" in facts:
        text += f" The device's readahead setting is {_v(facts, 'read_ahead_kb')}."
    return text + (" Each document piece is a random read somewhere in the file, so the loader pays the latency "
                   "of these reads rather than the device's bandwidth.")


def overhead_note(facts: Facts) -> str:
    """What one traced call costs: the POSIX view's extra loader time ÷ the calls it recorded."""
    if "posix_calls" not in facts:
        return ""
    text = (f"Under read() the POSIX tracer recorded about {_v(facts, 'posix_calls_per_piece')} calls per document "
            f"piece, {_v(facts, 'posix_calls')} calls at this point; its extra {_v(facts, 'posix_extra_ms')} of "
            f"loader time is {_v(facts, 'posix_us_per_call')} per recorded call.")
    m = facts.get("overhead.mmap.paired")
    if m is not None:
        lo, hi = m.spread
        rounds = f"{phrasing.share(lo)} to {phrasing.share(hi)}"
        most = num(facts.number("posix.mmap_max"))
        text += (f" Under mmap, where it recorded at most {most} calls per point, its overhead was "
                 + (f"within the spread of the rounds ({rounds})." if facts["overhead.mmap.inside"].value ==
                           "yes" else f"{phrasing.share(m.number)} ({rounds})."))
    return text


def workers_table(res: Result) -> pd.DataFrame:
    s = res.table("sweep")
    w = s[s["part"] == "workers"]
    return (w.groupby(["cache", "mode", "workers"])["loader_s"].agg(["mean", "min", "max", "count"]).reset_index()
            .rename(columns={"count": "n"}).assign(mean=lambda d: d["mean"] * 1e3, min=lambda d: d["min"] * 1e3,
                                                   max=lambda d: d["max"] * 1e3))


def workers_note(facts: Facts) -> str:
    out = []
    for key in facts.data.get("workers_note") or []:
        _, cache, mode = key.split(".")
        base, best = facts[f"{key}.base"], facts[f"{key}.best"]
        if f"{key}.gain" not in facts:
            out.append(f"{cache} {MODE_NAMES[mode]}: no worker count beat {phrasing.text(base.label)} "
                       f"({phrasing.value(base)})")
        else:
            gain = phrasing.comparison(facts[f"{key}.gain"], facts)
            out.append(f"{cache} {MODE_NAMES[mode]}: fastest with {phrasing.text(best.label)} "
                       f"({phrasing.value(best, runs=False)}), {gain} ({phrasing.value(base, runs=False)})")
    return "Workers sweep (loader time, worker start-up included): " + "; ".join(out) + "." if out else ""


def checkpoint_invariance_note(facts) -> str:
    """Whether the checkpoint written after every sweep point made the same writes (``facts`` may be a result,
    analysed now)."""
    facts = facts_of(facts)
    if "checkpoint_sweep.identical" not in facts:
        return ""
    n = facts.number
    writes = span(n("checkpoint_sweep.writes_min"), n("checkpoint_sweep.writes_max"))
    size = span(n("checkpoint_sweep.bytes_min") / MiB, n("checkpoint_sweep.bytes_max") / MiB, "MiB")
    if facts["checkpoint_sweep.identical"].value == "yes":
        return (f"The same checkpoint, written after every sweep point under the POSIX view, made the same writes at "
                f"every sequence length and batch size: {writes} write calls, {size}.")
    return (f"The same checkpoint, written after every sweep point under the POSIX view, made different writes "
            f"across the sweep: {writes} write calls, {size}.")


def _method(method) -> str:
    """A checkpoint method as the page names it (an unknown id as stored)."""
    return METHOD_LABELS.get(str(method), str(method))


def checkpoint_posix_note(facts) -> str:
    """The checkpoint writes each method made as the POSIX view recorded them, against what the kernel counted,
    and what the tracer recorded where it missed most of the bytes (``facts`` may be a result, analysed now)."""
    c = facts_of(facts).data.get("checkpoint_posix")
    if c is None:
        return ""
    parts = []
    for r in c:
        parts.append(
            f"{phrasing.code(_method(r['method']))}: {num(r['writes'])} write calls "
            f"({_binary(r['write_bytes'])}), "
            f"{num(r['fsyncs'])} fsync; the kernel counted {_binary(r['kernel_write_bytes'])} "
            "written"
        )
    tail = ""
    for r in (r for r in c if r["blind"]):
        calls = ", ".join(f"{phrasing.code(k)} {phrasing.text(v)}" for k, v in r["calls"].items())
        tail += (f" For {phrasing.code(_method(r['method']))} the tracer recorded "
                 f"{_binary(r['write_bytes'])} of the "
                 f"{_binary(r['kernel_write_bytes'])} the kernel counted; the only calls it recorded ({calls})"
                 + (" are this chapter's own stat and fsync after the save: the library's file calls bypass the "
                    "preloaded wrappers." if r["method"] == "torch_save" else "."))
    return "Checkpoint writes under the POSIX view: " + "; ".join(parts) + "." + tail


# ---------------------------------------------------------------------------- why more workers can be slower
_WHY = {"start": ("Starting the extra workers accounts for {share} of the {extra} extra: a run of {steps} batches is "
                  "over before more workers can pay for their start"),
        "main": ("The main process's extra work accounts for {share} of the {extra} extra: with more workers it spends "
                 "longer receiving and rebuilding batches (IPC), and it is one process"),
        "work": ("Each worker's own extra work accounts for {share} of the {extra} extra: the workers did more per "
                 "batch (page faults, contention for cores)")}
_WHO = {"start": "the later start", "main": "the main process", "work": "the workers"}


def workers_cause_note(facts: Facts) -> str:
    """For each mode: is the largest worker count slower than a smaller one, and which measured
    candidate (the later start of more workers, the main process's work per batch, each
    worker's own work) accounts for the extra time."""
    if "cause" in facts:
        return ("What decides why more workers can be slower (when each worker started, the CPU time of "
                "the main process and of every worker) is not in the reference run, which predates these "
                "counters; a new run of the chapter records them.")
    out = []
    cache = str(facts.data.get("cause_cache") or "warm")
    for mode in facts.data.get("cause_modes") or []:
        key = f"cause.{mode}"
        k, b = facts[f"{key}.loader_k"], facts[f"{key}.loader_b"]
        head = (f"{cache.capitalize()} cache, {MODE_NAMES[mode]}: {phrasing.text(k.label)} took "
                f"{phrasing.value(k, runs=False)} for {num(k.setting['steps'])} batches against "
                f"{phrasing.value(b, runs=False)} with {num(b.setting['workers'])}, "
                f"{phrasing.comparison(facts[f'{key}.vs'], baseline='it')}")
        if facts[f"{key}.slower"].value != "yes":
            out.append(head + ", so there is no slowdown to explain.")
            continue
        bw = num(b.setting["workers"])
        detail = (f". The last of the {phrasing.text(k.label)} started {_v(facts, f'{key}.start_k')} after the loader "
                  f"(with {bw}: {_v(facts, f'{key}.start_b')}); the main process used {_v(facts, f'{key}.main_k')} "
                  f"of CPU per batch, receiving batches from the workers (with {bw}: {_v(facts, f'{key}.main_b')}); "
                  f"each worker used {_v(facts, f'{key}.work_k')} of CPU and took {_v(facts, f'{key}.faults_k')} "
                  f"page faults per batch of the run (with {bw}: {_v(facts, f'{key}.work_b')} and "
                  f"{_v(facts, f'{key}.faults_b')})")
        cause = facts[f"{key}.cause"]
        share, extra = phrasing.share(facts.number(f"{key}.cause_share")), _v(facts, f"{key}.extra")
        if cause.value != "none":
            why = _WHY[cause.value].format(share=share, extra=extra, steps=num(k.setting["steps"]))
        else:
            why = (f"None of these accounts for half of the {extra} extra (the largest, "
                   f"{_WHO[cause.setting['largest']]}, {share}), so these counters do not explain it")
        out.append(head + detail + ". " + why + ".")
    return " ".join(out)


# ---------------------------------------------------------------------------- DFTracer's application spans
def dft_app_note(facts) -> str:
    """What DFTracer's Python API recorded in the same trace as the POSIX calls, at the largest
    grid point, against what the POSIX view saw there (``facts`` may be a result, analysed now)."""
    facts = facts_of(facts)
    d = facts.data.get("dft_app")
    if d is None:
        return ""
    if d["state"] == "predates":
        return ("DFTracer's application spans (sample fetch, index lookup, read, construction, recorded through "
                "its Python API in the same trace as the POSIX calls) are not in the reference run, which "
                "predates them; a new run of the chapter records them.")
    if d["state"] != "recorded":
        return ("DFTracer's Python API recorded no application spans in this run (the preloaded tracer was "
                "active, but its Python side did not write to the trace).")

    def n(mode, name, unit=""):
        return num(facts.number(f"dft_app.{mode}.{name}"), unit)

    text = (f"In the same trace as the POSIX calls, DFTracer's Python API (`dft_fn` around each sample fetch and "
            f"its index lookup, read and construction) recorded, at sequence length {d['seq']} and batch "
            f"{d['batch']}: {n('mmap', 'samples')} sample fetches under mmap, spending {n('mmap', 'read_ms', 'ms')} "
            f"in reads, while the POSIX view saw {n('mmap', 'bin_reads')} read calls on `.bin`; and "
            f"{n('read', 'samples')} fetches under read(), {n('read', 'read_ms', 'ms')} in reads, with "
            f"{n('read', 'bin_reads')} read calls on `.bin`. Index lookups took "
            f"{n('mmap', 'lookup_ms', 'ms')} (mmap) and {n('read', 'lookup_ms', 'ms')} (read()). ")
    text += choose(1 if facts["dft_app.seen"].value == "yes" else -1,
                   "So the application view shows the time mmap spends reading that the POSIX view cannot see.",
                   "Here the POSIX view also saw the mmap reads, so the application spans add timing, not "
                   "visibility.", "")
    if d["workers"]:
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
                 "posix_reads": "reads", "posix_read_MiB": "read (MiB)", "posix_mean_read_bytes": "mean read (bytes)",
                 "posix_read_s": "time in reads (s)"}
#: Headers of the theoretical check.
THEORY_HEADERS = {"mode": "mode", "seq": "sequence length", "batch": "batch size",
                  "bytes_per_sample": "bytes per sample", "samples_per_s": "samples/s",
                  "needed_MBps": "sample data needed (MB/s)", "storage_MBps": "moved from storage (MB/s)",
                  "amplification": "storage ÷ sample bytes (×)"}
#: The tracer's views as a reader names them.
VIEW_NAMES = {"off": "tracing off", "posix": "POSIX view (preloaded)", "app": "application spans",
              "both": "POSIX view and application spans"}
#: Headers of the overhead table.
OVERHEAD_HEADERS = {"mode": "mode", "view": "view", "mean": "overhead, mean (%)", "min": "lowest round (%)",
                    "max": "highest round (%)", "n": "paired rounds", "off_ms": "loader, tracing off (ms)",
                    "view_ms": "loader, traced (ms)"}
#: Headers of the checkpoint table.
CHECKPOINT_HEADERS = {"state": "state", "method": "method", "GBps": "to synced files, mean (GB/s)",
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
    c = checkpoint_summary_table(res)
    order = {m: i for i, m in enumerate(METHOD_LABELS)}   # as the text names them: torch.save, DCP save, async
    c = c.assign(state=c["state_bytes"].map(size_label), order=c["method"].map(order)).sort_values(
        ["state_bytes", "order"], kind="stable")
    return _shown(c.assign(method=c["method"].map(_method)), CHECKPOINT_HEADERS).reset_index(drop=True)


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


def _cmp(facts: Facts, key: str, baseline: str | None = None) -> str:
    """Comparison ``key`` worded against its basis's label, or against ``baseline`` where the sentence has named the
    setting both sides share already (so that it is said once)."""
    c = facts.get(key)
    if c is not None and facts.flagged(key):  # traced faster than untraced: not an outcome
        return "faster than untraced: flagged, a measurement problem (measure again, more `overhead_rounds`)"
    return phrasing.comparison(c, facts, baseline=baseline) if c is not None else ""


def _loader(facts: Facts) -> Finding:
    at = facts.data["largest"]
    parts = []
    for cache in ("cold", "warm"):
        c = facts.get(f"loader_time.{cache}")
        if c is None:
            continue
        m, r = facts[f"loader.{cache}.mmap"], facts[f"loader.{cache}.read"]
        parts.append(f"{cache}, mmap took {phrasing.value(m)} and read() {phrasing.value(r)} for {at['steps']} "
                     f"steps: mmap was {_cmp(facts, f'loader_time.{cache}', 'read()')}")
    c = facts["loader_time"]
    return Finding("loader_time", f"Loader time at sequence {at['seq']}, batch {at['batch']}: " + "; ".join(parts)
                   + ".", c.number, "×")


def _bandwidth(facts: Facts, short: bool) -> Finding:
    c, m, r = facts["per_sample_bandwidth"], facts["bandwidth.mmap"], facts["bandwidth.read"]
    cache, seq = m.setting["cache"], m.setting["seq"]
    if short:
        text = (f"{cache.capitalize()}, inside `__getitem__` at sequence {seq}, mmap delivered "
                f"**{phrasing.value(m, runs=False)}** per sample, {_cmp(facts, 'per_sample_bandwidth', 'read()')}.")
    else:
        small = facts["bandwidth.mmap_small"]
        text = (f"Per-sample bandwidth inside `__getitem__` ({cache}): mmap {phrasing.value(small)} at sequence "
                f"{small.setting['seq']} and {phrasing.value(m)} at {seq}; read() {phrasing.value(r)} at {seq}: mmap "
                f"was {_cmp(facts, 'per_sample_bandwidth', 'read()')} over runs and batch sizes.")
    return Finding("per_sample_bandwidth", text, c.number, "×", published=c.published)


def _overhead(facts: Facts, short: bool) -> Finding | None:
    c = facts.get("overhead")
    if c is None:
        return None if short else Finding("overhead", "The tracer overhead was not measured in this run "
                                          "(overhead_rounds = 0).")
    view = "DFTracer's POSIX view" if facts.data.get("overhead_view") == "posix" else "the application spans"
    traced = facts["overhead.read." + facts.data["overhead_view"]]
    off = facts["overhead.read.off"]
    took = phrasing.value(off, runs=not short)   # after the comparison, not inside it: no nested parentheses
    text = (f"Traced by {view}, read() loaded batches in {phrasing.value(traced, runs=not short)}: "
            f"{_cmp(facts, 'overhead')}" + (f"; with tracing off they took {took}" if facts.flagged("overhead")
                                            else f", which took {took}"))
    if "overhead.mmap" in facts and facts.flagged("overhead.mmap"):
        text += "; mmap measured faster with tracing on, flagged as a measurement problem"
    elif "overhead.mmap" in facts:
        m = facts["overhead.mmap"]
        text += (("; for mmap, tracing cost nothing measurable" if m.level else
                  f"; for mmap, tracing made loading {phrasing.ratio_words(m) or 'not comparable'}") if short
                 else f"; traced, mmap loaded batches {_cmp(facts, 'overhead.mmap')}")
    if not short and facts.data.get("overhead_view") == "posix" and "overhead.app" in facts:
        text += f"; with the application spans alone, read() loaded batches {_cmp(facts, 'overhead.app')}"
    n = off.n
    return Finding("overhead", text + f", over {n} paired round{'s' if n != 1 else ''}.", c.number, "×")


def _kernel(facts: Facts) -> Finding:
    f = facts["kernel_view"]
    s = f.setting
    text = (f"The kernel sees what the POSIX view misses: at sequence {s['seq']}, batch {s['batch']} ({s['cache']}), "
            f"mmap took {phrasing.value(facts['kernel.mmap.syscr'])} read calls but "
            f"{phrasing.value(facts['kernel.mmap.minflt'])} minor and {phrasing.value(facts['kernel.mmap.majflt'])} "
            f"major page faults, in all {_cmp(facts, 'kernel.faults_vs_read', 'the page faults under read()')}, "
            "while read() made "
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
    same = lo.number == hi.number
    m_text = ((f"exactly {phrasing.value(lo)}" if same else f"between {phrasing.value(lo)} and {phrasing.value(hi)}")
              + " per sweep point under mmap" + ("" if same and const == "yes" else ": " + {
                  "yes": f"constant within ±{phrasing.share(facts['posix.mmap_constant'].setting['tolerance'])}",
                  "none": "none at all"}.get(const, "not constant")))
    small, big = facts["posix.read_small"], facts["posix.read_big"]
    trend = "grows with the tokens read" if facts["posix.read_grows"].value == "yes" else \
        "does not follow the tokens read"
    text = (f"The tracer saw {m_text}; under read() the count {trend}, from {phrasing.value(small)} "
            f"({phrasing.text(small.label)}) to {phrasing.value(big)} ({phrasing.text(big.label)})")
    text += (f"; at the largest point read() shows {_cmp(facts, 'posix_events', 'mmap')}" if c.number is not None else
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
    out = [_loader(facts), _bandwidth(facts, False), _overhead(facts, False), _kernel(facts), _posix(facts),
           _checkpoint(facts)]
    return [f for f in out if f is not None]


def key_metrics(res) -> dict:
    """Metric name (as in published.py) -> (value, None) of this result, from its facts: only facts the
    analysis marked as the same metric, and the counts and rates the published table lists."""
    facts = facts_of(res)
    out = {f.published: (f.number, None) for f in facts.facts.values() if f.published and f.number is not None}
    if "posix.mmap_min" in facts:
        out["POSIX events, read(), largest point"] = (facts.number("posix.read_big"), None)
    for metric, key in PUBLISHED_RATES.items():
        if facts.get(key) is not None and facts.number(key) is not None:
            out[metric] = (facts.number(key), None)
    return out


#: The published per-sample bandwidths (published.py's metric names) and the facts that measure them: each side
#: of the mmap ÷ read() comparison, and mmap at the smallest sequence length.
PUBLISHED_RATES = {"per-sample bandwidth, mmap, smallest sequence": "bandwidth.mmap_small",
                   "per-sample bandwidth, mmap, largest sequence": "bandwidth.mmap",
                   "per-sample bandwidth, read(), largest sequence": "bandwidth.read"}


# ---------------------------------------------------------------------------- the opening
def _sweep(facts: Facts) -> Finding | None:
    c = facts.get("sweep_loader")
    if c is None:
        return None
    cache = facts[c.of].setting["cache"]
    text = (f"{cache.capitalize()}, mmap loaded batches **{_cmp(facts, 'sweep_loader', 'read() over the whole sweep')}"
            f"** (read() ahead at "
            f"{phrasing.value(facts[f'sweep.{cache}.read_wins'])} of "
            f"{phrasing.value(facts[f'sweep.{cache}.points'])} points, mmap at "
            f"{phrasing.value(facts[f'sweep.{cache}.mmap_wins'])})")
    st = facts.get(f"sweep.{cache}.storage")
    if cache == "cold" and st is not None:
        text += f": its page faults pulled {phrasing.value(st)} the bytes read() pulled from storage"
    return Finding("sweep_loader", text + ".", c.number, "×")


def _snippet(a) -> str | None:
    if a.key == "tokens.loader_mode":
        return READ_SNIPPET if a.value == "read" else MMAP_SNIPPET
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
    if facts.flagged("overhead"):
        return Action(f"Traced, read() loaded batches {_cmp(facts, 'overhead')}; no advice on the tracer's cost.")
    if c.level or (c.number or 0) <= 1:
        return Action(f"Tracing can stay on: traced, read() loaded batches {_cmp(facts, 'overhead')}.")
    per = facts.get("posix_us_per_call")
    return Action("Trace DFTracer's POSIX view over a short window, not a whole job: traced, read() "
                  f"loaded batches {_cmp(facts, 'overhead')}"
                  + (f", {phrasing.value(per)} per recorded call" if per is not None and per.number else "") + ".")


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
        parts.append(f"Cold, over the whole sweep, mmap's page faults brought in "
                     f"{phrasing.value(facts['sweep.cold.amplification.mmap'])} the bytes the samples hold and "
                     "read()'s calls "
                     f"{phrasing.value(facts['sweep.cold.amplification.read'])}.")
    o = facts.get("overhead")
    if o is not None and facts.data.get("overhead_view") == "posix":
        parts.append("Tracing has a price of its own: " + f"traced by the POSIX view, read() loaded batches "
                     f"{_cmp(facts, 'overhead')}; mmap's I/O shows only in the kernel's page-fault counts and in "
                     "application spans, which a POSIX tracer cannot show.")
    return " ".join(parts)
