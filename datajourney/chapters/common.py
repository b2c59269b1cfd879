"""What several chapters' pages say alike: the cold-cache label and residency note of the storage
chapters, the spread of repeated runs, and the pointer from chapters 3 and 7 to chapter 8's IPC
measurement (read from its result file, never its code)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from datajourney.core import findings as fnd
from datajourney.core.findings import Finding, num, pct
from datajourney.toolkit.reads import NAND_READ_FLOOR_US

#: The source's claim for warm runs: "the difference collapses to near 1x" ("often within
#: 10% of each other"). A warm sequential ÷ random ratio at or below this counts as near 1x.
NEAR_ONE = 1.10

#: Chapter 2's result file, whose cold gap chapter 3 recaps.
STORAGE_CHAPTER = "02_random_vs_sequential"

#: Residency targets a cold (at most) and a warm (at least) run must meet.
COLD_TARGET, WARM_TARGET = 0.05, 0.95


# --------------------------------------------------------------------------- reading a result
def _values(df: pd.DataFrame, col: str = "MBps", **where) -> list[float]:
    """The values of ``col`` in the rows matching every ``column=value`` of ``where`` (chapters 2 and 3)."""
    if df is None or df.empty or col not in df:
        return []
    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        if k not in df:
            return []
        m &= df[k] == v
    return [float(x) for x in df.loc[m, col].dropna()]


def _mean(v: Sequence[float]) -> float:
    return sum(v) / len(v)


def cold_label(res) -> str:
    """'guest-cold' when the data say the host served the cold reads, else 'cold'."""
    return "guest-cold" if guest_cold(res) else "cold"


def spread_summary(df: pd.DataFrame, by: list[str], label, col: str = "MBps") -> str:
    """One sentence naming every group of ``by`` whose runs of ``col`` (MB/s) spread by more than
    :data:`findings.HIGH_SPREAD` (coefficient of variation), with their range."""
    if df.empty:
        return ""
    wide = []
    for key, g in df.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        v = g[col].dropna().tolist()
        c = fnd.cv(v)
        if c > fnd.HIGH_SPREAD and round(100 * c) > round(100 * fnd.HIGH_SPREAD):   # as printed, above the rule
            wide.append(f"{label(*key)} ({fnd.span(min(v), max(v), 'MB/s')}, "
                        f"coefficient of variation {pct(c)})")
    if not wide:
        return f"No configuration varied by more than {pct(fnd.HIGH_SPREAD)} (coefficient of variation) over its runs."
    return (f"Runs varied by more than {pct(fnd.HIGH_SPREAD)} (coefficient of variation) for " + "; ".join(wide)
            + ": read those as ranges, not points.")


def residency_note(df: pd.DataFrame, what: str = "runs", cold: str = "cold") -> str:
    """Whether cold runs started cold and warm runs warm, computed from ``resident_at_start``;
    ``cold`` names the cold state (e.g. 'guest-cold')."""
    verdict = []
    cold_rows = df[df["cache"] == "cold"] if "cache" in df else df
    warm = df[df["cache"] == "warm"] if "cache" in df else df.iloc[0:0]
    if len(cold_rows):
        worst = cold_rows["resident_at_start"].max()
        share = "**none** of the data" if worst <= 0 else f"at most **{pct(worst)}** of the data"
        verdict.append(f"{cold} {what} started with {share} resident "
                       f"(target at most {pct(COLD_TARGET)}: {'met' if worst <= COLD_TARGET else '**not met**'})")
    if len(warm):
        least = warm["resident_at_start"].min()
        verdict.append(f"warm {what} with at least **{pct(least)}** "
                       f"(target at least {pct(WARM_TARGET)}: {'met' if least >= WARM_TARGET else '**not met**'})")
    return ("Residency: " + "; ".join(verdict) + ".") if verdict else "No timed runs to check."


#: Chapter 8's notebook, whose section 4 measures moving a batch between processes on its own.
IPC_CHAPTER = "08_threads_processes_gil"


def ipc_crossref(run_dir=None, reference_host: str | None = None) -> str:
    """A pointer to chapter 8's IPC section with what it measured: this run's chapter 8 result when the run
    holds one, else the reference run's; the extra time per batch through one worker process at its
    smallest batch size."""
    from datajourney.core import results

    path = Path(results.resolve_run_dir(run_dir)) / f"{IPC_CHAPTER}.json"
    if path.exists():
        r, whose = results.Result.load(path), "in this run"
    else:
        r = results.load_reference(IPC_CHAPTER, reference_host)
        whose = f"on the reference host ({r.run_id})" if r is not None else ""
    link = f"[chapter 8, section 4]({IPC_CHAPTER}.ipynb)"
    ipc = r.table("ipc") if r is not None and "ipc" in r.tables else pd.DataFrame()
    if ipc.empty or not {"batch_size", "workers", "ms_per_batch"} <= set(ipc.columns):
        return f"{link} measures the cost of moving a batch between processes on its own; it has no result here yet."
    bs = int(ipc["batch_size"].min())
    g = ipc[ipc["batch_size"] == bs].groupby("workers")["ms_per_batch"].mean()
    if 0 not in g.index or 1 not in g.index:
        return f"{link} measures the cost of moving a batch between processes on its own."
    extra = float(g[1] - g[0])
    return (f"{link} measures that cost on its own, with already decoded images so that moving them is all the "
            f"loader does: {whose}, a batch of {bs} images took {num(float(g[1]), 'ms')} through one worker process "
            f"against {num(float(g[0]), 'ms')} in the main process ("
            + (f"{num(extra, 'ms')} more)." if extra > 0 else "no extra cost measured).")
            + " One worker can only be slower than none when that cost outweighs what it overlaps.")


def guest_cold(res) -> bool | None:
    """True when the latency check shows cold reads served faster than flash on a virtual
    machine (this run's "cold" is cold only for the guest); None when not measured."""
    lat = latency_stats(res)
    if lat is None:
        return None
    return bool(lat["median_us"] < NAND_READ_FLOOR_US and res.fingerprint.get("cpu", {}).get("hypervisor"))


def latency_stats(res) -> dict | None:
    """Medians and spread of the latency check, or None when it did not run (or failed)."""
    lat = _table(res, "latency")
    if lat.empty or "p50_us" not in lat:
        return None
    first = lat[(lat["series"] == "O_DIRECT, first pass") & lat["p50_us"].notna()]
    if first.empty:
        return None
    second = lat[(lat["series"] == "O_DIRECT, second pass") & lat["p50_us"].notna()]
    warm = lat[(lat["series"] == "page cache (warm)") & lat["p50_us"].notna()]
    return dict(
        median_us=float(first["p50_us"].median()), medians=first["p50_us"].tolist(),
        p10_us=float(first["p10_us"].median()), p90_us=float(first["p90_us"].median()),
        p99_us=float(first["p99_us"].median()), reads=int(first["reads"].sum()),
        request_bytes=int(first["request_bytes"].iloc[0]),
        second_medians=second["p50_us"].tolist(), warm_medians=warm["p50_us"].tolist(),
    )


def _table(res, name: str) -> pd.DataFrame:
    return res.tables.get(name, pd.DataFrame())


def _cold_gap(res) -> Finding:
    h = res.table("headline")
    rnd, seq = _values(h, pattern="random", cache="cold"), _values(h, pattern="sequential", cache="cold")
    label = cold_label(res)
    if not rnd or not seq:
        return Finding("cold_gap", f"No {label} runs in this result (`cache_states` left out `cold`).")
    n, size = int(h["n_files"].iloc[0]), int(h["file_size"].iloc[0])
    mid, lo, hi = fnd.ratio_interval(seq, rnd)
    phrase = _compared(seq, rnd, "the shard read sequentially", "the shuffled files")
    text = (f"**{label.capitalize()}**, {n:,} files of {_size(size)} read in shuffled order ran at "
            f"**{num(_mean(rnd), 'MB/s')}** and the same bytes read as one shard in {_size(size)} chunks at "
            f"**{num(_mean(seq), 'MB/s')}**: {phrase} ({_extremes(lo, hi)}).")
    return Finding("cold_gap", text, mid, "×", published="sequential ÷ random, cold", interval=(lo, hi),
                   values=dict(random=_mean(rnd), sequential=_mean(seq)))


def _size(n: int) -> str:
    from datajourney.core.findings import size_label

    return size_label(int(n))


def _compared(a: list[float], b: list[float], a_name: str, b_name: str) -> str:
    """'A was **5.1× faster than** B', or 'A and B were level (...)': :func:`findings.compare` in a clause."""
    if fnd.direction(a, b) == 0:
        return f"{a_name} and {b_name} were {fnd.compare(a, b, same='level')}, within the runs' spread"
    return f"{a_name} was **{fnd.compare(a, b)}** {b_name}"


def _extremes(lo: float, hi: float) -> str:
    """A ratio's range over the runs' extremes, e.g. '4.9–5.3× over the runs' extremes'."""
    return f"{fnd.span(lo, hi, '×')} over the runs' extremes"
