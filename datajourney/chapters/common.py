"""What several chapters' pages say alike: the cold-cache label and residency note of the storage
chapters, the spread of repeated runs, and the pointer from chapters 3 and 7 to chapter 8's IPC
measurement. Another chapter's result is read only for the facts it exports (never its tables or code)."""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from datajourney.core.facts import Fact
from datajourney.core.units import num, pct, span
from datajourney.toolkit.reads import NAND_READ_FLOOR_US

#: The source's claim for warm runs: "the difference collapses to near 1x" ("often within
#: 10% of each other"). A warm sequential ÷ random ratio at or below this counts as near 1x.
NEAR_ONE = 1.10

#: Chapter 2's result file, whose exported cold verdict and cold gap chapter 3 reads.
STORAGE_CHAPTER = "02_random_vs_sequential"



# --------------------------------------------------------------------------- reading a result
#: The two storage layouts chapters 2 and 3 compare, as the advice names them (the first is the baseline a
#: reader has: an ImageFolder-style tree).
FILES = "one file per sample"
SHARD = "one shard read in order"


def values_of(df: pd.DataFrame, col: str = "MBps", **where) -> list[float]:
    """The values of ``col`` in the rows matching every ``column=value`` of ``where`` (chapters 2 and 3)."""
    if df is None or df.empty or col not in df:
        return []
    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        if k not in df:
            return []
        m &= df[k] == v
    return [float(x) for x in df.loc[m, col].dropna()]


def cold_label(res) -> str:
    """The run's name for its cold state, from :func:`cold_verdict`: 'guest-cold' or 'cold' (also where the latency
    check cannot tell the device from a cache below the guest: a page says so once, where it first uses the word,
    with :func:`datajourney.core.phrasing.define_cold`)."""
    return cold_verdict(res).label


#: Chapter 8's notebook, one of whose sections measures moving a batch between processes on its own.
IPC_CHAPTER = "08_threads_processes_gil"
#: Words of that section's heading, by which its number is found (:func:`section_number`).
IPC_HEADING = "moving a batch between processes"


def section_number(notebook: str, words: str) -> str | None:
    """The number of the section of ``notebooks/<notebook>.ipynb`` whose heading ("## 6. The cost of ...") holds
    ``words``, read from the notebook's own headings so that a pointer to it follows a renumbering; None where the
    notebook or such a numbered heading is missing."""
    from datajourney.core.paths import REPO_ROOT

    path = REPO_ROOT / "notebooks" / f"{notebook}.ipynb"
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return None
    for c in cells:
        if c.get("cell_type") != "markdown":
            continue
        for line in "".join(c.get("source", [])).splitlines():
            m = re.match(r"#{1,6}\s+(\d+)\.\s+(.*)", line)
            if m and words.lower() in m.group(2).lower():
                return m.group(1)
    return None


def exported(r, key: str) -> Fact | None:
    """The fact ``key`` that the result ``r`` stored and its chapter exports, else None (no result, no stored
    facts, or a key the chapter keeps to itself): the one way a chapter reads another chapter's result."""
    fs = getattr(r, "facts", None)
    return fs.get(key) if fs is not None and key in fs.exports else None


def ipc_crossref(run_dir=None, reference_host: str | None = None) -> str:
    """A pointer to chapter 8's IPC section with what it measured: this run's chapter 8 result when the run
    holds one, else the reference run's; the extra time per batch through one worker process at its
    smallest batch size, read from the facts chapter 8 exported (``ipc.main_ms``, ``ipc.worker_ms``,
    ``ipc.extra_ms``), never from its tables."""
    from datajourney.core import results

    path = Path(results.resolve_run_dir(run_dir)) / f"{IPC_CHAPTER}.json"
    if path.exists():
        r, whose = results.Result.load(path), "in this run"
    else:
        r = results.load_reference(IPC_CHAPTER, reference_host)
        whose = f"on the reference host ({r.run_id})" if r is not None else ""
    n = section_number(IPC_CHAPTER, IPC_HEADING)
    link = f"[chapter 8{f', section {n}' if n else ''}]({IPC_CHAPTER}.ipynb)"
    if r is None:
        return f"{link} measures the cost of moving a batch between processes on its own; it has no result here yet."
    main, one, extra = (exported(r, f"ipc.{k}_ms") for k in ("main", "worker", "extra"))
    if any(f is None or f.number is None for f in (main, one, extra)):
        return (f"{link} measures the cost of moving a batch between processes on its own; it was not measured "
                f"{whose}.")
    bs = int(one.setting["batch_size"])
    return (f"{link} measures that cost on its own, with already decoded images so that moving them is all the "
            f"loader does: {whose}, a batch of {bs} images took {num(one.number, 'ms')} through one worker process "
            f"against {num(main.number, 'ms')} in the main process ("
            + (f"{num(extra.number, 'ms')} more)." if extra.number > 0 else "no extra cost measured).")
            + " One worker can only be slower than none when that cost outweighs what it overlaps.")


def guest_cold(res) -> bool | None:
    """True when the run's latency check shows cold reads clearly faster than flash on a virtual machine
    (this run's "cold" is cold only for the guest); False when it clearly does not; None when it cannot
    tell (medians inside the band around the floor) or did not run. See :func:`cold_verdict`."""
    v = cold_verdict(res)
    if v.state is None or v.state == "undecided":
        return None
    return v.state == "cache" and v.hypervisor


# --------------------------------------------------------------------------- what "cold" means in a run
#: Medians within this factor of :data:`NAND_READ_FLOOR_US`, either side, cannot tell a cache below the
#: guest from flash: with the floor at 40 µs the band is 32–50 µs, wider than the run-to-run spread of a
#: median (a few µs), so noise moves a run into "cannot tell" but never across to the other answer.
COLD_MARGIN = 1.25

#: What a median too close to the flash floor says, in every chapter that words it (its cold label stays "cold";
#: :func:`datajourney.core.phrasing.define_cold` qualifies a page's first use of it).
UNDECIDED_WORDS = "too close to a flash read to tell the device from a cache below this machine"


@dataclass(frozen=True)
class ColdVerdict:
    """What the cold reads of a run reached, decided once per run from the latency check's
    distribution: ``state`` is "cache" (every run's median below the band: something faster than
    flash answered), "device" (every median above it), "undecided" (a median inside it) or None
    (not measured); ``source`` says whose latency check decided."""

    state: str | None
    medians: tuple[float, ...] = ()
    share_below: float | None = None      #: share of the first pass's reads faster than the floor
    hypervisor: bool = False
    source: str = "this chapter's latency check"
    floor_us: float = NAND_READ_FLOOR_US

    @property
    def band(self) -> tuple[float, float]:
        """(low, high) µs: medians between them cannot tell."""
        return self.floor_us / COLD_MARGIN, self.floor_us * COLD_MARGIN

    @property
    def label(self) -> str:
        """The cold state's name in labels: "guest-cold" where a cache below a virtual machine served the cold reads,
        else "cold" (where the check cannot tell, too: a page qualifies its first use once, never every label)."""
        return "guest-cold" if self.state == "cache" and self.hypervisor else "cold"

    @property
    def served(self) -> str:
        """A short clause: what served a cold read (for a chapter's opening)."""
        return {"cache": ("faster than NAND flash, so a cache below this machine served it and \"cold\" here is "
                          + ("guest-cold" if self.hypervisor else "below the page cache only")),
                "device": "as slow as a device read, so \"cold\" here reached the device",
                "undecided": UNDECIDED_WORDS,
                }.get(self.state, "not measured")

    def sentence(self, *, head: bool = True) -> str:
        """What the latency check says about this run's cold reads and why (the rule); with ``head``, first
        whose check decided and the medians it decided on."""
        if self.state is None:
            return "The latency check did not run, so whether 'cold' reads reached the device is not known."
        lo, hi = self.band
        meds = (f"the median of its {len(self.medians)} runs' medians, {num(_median(self.medians), 'µs')} "
                f"({span(min(self.medians), max(self.medians), 'µs')})" if len(self.medians) > 1
                else f"its median, {num(self.medians[0], 'µs')}")
        share = f", with {pct(self.share_below)} of the reads below {num(self.floor_us, 'µs')}" \
            if self.share_below is not None else ""
        head = f"Classified by {self.source}: {meds}{share}. " if head else ""
        floor = f"a NAND flash read takes at least about {num(self.floor_us, 'µs')}"
        if self.state == "cache":
            return head + (f"Every run's median lies below {num(lo, 'µs')}, clear of the flash floor ({floor}): "
                           + ("a cache below this virtual machine (the host's) served the blocks, so this run's cold "
                              "numbers are **guest-cold**: cold for the guest's page cache, not for the device."
                              if self.hypervisor else
                              "either a device built on faster memory or a cache below the page cache (a "
                              "controller's, an array's) served the blocks."))
        if self.state == "device":
            return head + (f"Every run's median lies above {num(hi, 'µs')}, no faster than flash ({floor}): these "
                           "cold reads are consistent with reads from the device"
                           + (" (on a virtual machine, a slow cache below the guest cannot be ruled out by latency "
                              "alone)." if self.hypervisor else "."))
        return head + (f"The flash floor ({floor}) is known only to within {COLD_MARGIN:g}× either way, so a "
                       f"median within {span(lo, hi, 'µs')}, on either side of it, cannot tell the device from a "
                       "cache below this machine: this run's reads labelled **cold** may have come from either.")


def _median(values) -> float:
    return float(pd.Series(list(values), dtype=float).median())


def _verdict_of(res, source: str) -> ColdVerdict:
    """The verdict of ``res``'s own latency check (state None when it has none)."""
    lat = latency_stats(res)
    hyper = bool((res.fingerprint.get("cpu") or {}).get("hypervisor"))
    if lat is None:
        return ColdVerdict(None, hypervisor=hyper, source=source)
    floor = float(res.metadata.get("nand_read_floor_us") or NAND_READ_FLOOR_US)
    meds = tuple(float(m) for m in lat["medians"])
    return ColdVerdict(classify(meds, floor), meds, _share_below(res, floor), hyper, source, floor)


def classify(medians, floor: float = NAND_READ_FLOOR_US) -> str:
    """The one rule for what cold reads reached, from the medians of single 4 KiB reads (one per run):
    "cache" when every median is below ``floor / COLD_MARGIN``, "device" when every one is above
    ``floor × COLD_MARGIN``, else "undecided"."""
    lo, hi = floor / COLD_MARGIN, floor * COLD_MARGIN
    return "cache" if max(medians) < lo else "device" if min(medians) > hi else "undecided"


def _share_below(res, floor: float) -> float | None:
    """Share of the first pass's reads faster than ``floor``, read off the pooled latency quantiles."""
    cdf = table_of(res, "latency_cdf")
    if cdf.empty or not {"series", "quantile", "us"} <= set(cdf.columns):
        return None
    first = cdf[cdf["series"] == "O_DIRECT, first pass"].dropna(subset=["us"]).sort_values("us")
    if len(first) < 2:
        return None
    return float(np.interp(floor, first["us"], first["quantile"]))


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int):
    from datajourney.core import results

    return results.Result.load(path)


def same_run_result(res, chapter: str):
    """``chapter``'s result of the same run as ``res`` (the file beside ``res``'s, of the same run), or None. A
    reference run runs each chapter apart, as ``<run id>-<NN>-<k>``: its chapters are one run (:func:`run_of`)."""
    if getattr(res, "path", None) is None:
        return None
    path = Path(res.path).parent / f"{chapter}.json"
    try:
        other = _load(str(path), path.stat().st_mtime_ns)
    except (OSError, ValueError):
        return None
    return other if run_of(other.run_id) == run_of(res.run_id) else None


def run_of(run_id: str) -> str:
    """The run a result belongs to: its run id, less the ``-<NN>-<k>`` (chapter, attempt) a reference run gives each
    chapter it runs apart (``reference-h200-20261128-202402-03-1`` is run ``reference-h200-20261128-202402``)."""
    m = re.fullmatch(r"(reference-.+)-\d{2}-\d+", run_id or "")
    return m.group(1) if m else run_id


def cold_verdict(res) -> ColdVerdict:
    """The one classification of a run's cold reads, used by every chapter: the verdict chapter 2 exported
    (its stored fact ``cold_state``) when the run holds chapter 2's result (measured once per run, with its
    spread over runs), else the chapter's own latency check. The rule: every run's median below
    ``floor / COLD_MARGIN`` means a cache answered, every median above ``floor × COLD_MARGIN`` means the
    device, anything else cannot tell. Another chapter's tables are never read: only its exported facts."""
    if res.chapter != STORAGE_CHAPTER:
        r2 = same_run_result(res, STORAGE_CHAPTER)
        v = exported_verdict(r2, "chapter 2's latency check in this run") if r2 is not None else None
        if v is not None:
            return v
    return _verdict_of(res, "this chapter's latency check")


def exported_verdict(r2, source: str) -> ColdVerdict | None:
    """The cold verdict chapter 2's result ``r2`` stored as its exported fact ``cold_state``, said to come from
    ``source``; None when it stores none (no facts, or no latency check)."""
    f = exported(r2, "cold_state")
    if f is None or f.value is None:
        return None
    s = f.setting
    return ColdVerdict(s["state"], tuple(float(m) for m in s["medians"]), s["share_below"], bool(s["hypervisor"]),
                       source, float(s["floor_us"]))


def latency_stats(res) -> dict | None:
    """Medians and spread of the latency check, or None when it did not run (or failed)."""
    lat = table_of(res, "latency")
    if lat.empty or "p50_us" not in lat:
        return None
    first = lat[(lat["series"] == "O_DIRECT, first pass") & lat["p50_us"].notna()]
    if first.empty:
        return None
    second = lat[(lat["series"] == "O_DIRECT, second pass") & lat["p50_us"].notna()]
    warm = lat[(lat["series"] == "page cache (warm)") & lat["p50_us"].notna()]
    def med(col):   # a quantile the table lacks (an older or partial result) is not a number
        return float(first[col].median()) if col in first else float("nan")

    return dict(
        median_us=med("p50_us"), medians=first["p50_us"].tolist(), p10_us=med("p10_us"), p90_us=med("p90_us"),
        p99_us=med("p99_us"), reads=int(first["reads"].sum()),
        request_bytes=int(first["request_bytes"].iloc[0]) if "request_bytes" in first else None,
        second_medians=second["p50_us"].tolist(), warm_medians=warm["p50_us"].tolist(),
    )


def table_of(res, name: str) -> pd.DataFrame:
    return res.tables.get(name, pd.DataFrame())


# --------------------------------------------------------------------------- ranges over runs
#: A range over runs is shown from this many runs on; fewer runs show the value and how many runs gave it.
MIN_RUNS_FOR_RANGE = 3


def runs_interval(lo: float, hi: float, n: int) -> tuple[float, float] | None:
    """``(lo, hi)`` as a finding's interval when ``n`` runs are enough to call it a range, else None."""
    return (lo, hi) if n >= MIN_RUNS_FOR_RANGE else None


def over_runs(lo: float, hi: float, n: int, unit: str = "×", what: str = "runs") -> str:
    """'10.6–12.4× over 3 runs' from :data:`MIN_RUNS_FOR_RANGE` runs on, else '2 runs' (no range from fewer)."""
    if n >= MIN_RUNS_FOR_RANGE:
        return f"{span(lo, hi, unit)} over {n} {what}"
    return f"{n} {what[:-1] if n == 1 and what.endswith('s') else what}"


def _content_key(res) -> bytes:
    """A digest of everything a chapter's analysis may read from ``res`` (every field but its stored facts: the run
    id says whether it is a reference run): equal for an unchanged result, different once any of it is edited, even
    in place."""
    import hashlib
    import pickle

    body = tuple((f.name, getattr(res, f.name)) for f in fields(res) if f.name != "facts")
    return hashlib.blake2b(pickle.dumps(body, protocol=pickle.HIGHEST_PROTOCOL), digest_size=16).digest()


def facts_reader(analyse):
    """A page's ``facts_of``, bound to its own chapter's ``analyse``: a :class:`~datajourney.core.facts.Facts`
    as it is, a result of that chapter analysed now (pure, from its tables, so a page of an edited result
    follows the edit). A page asks for its facts from many functions; each distinct content is analysed
    once (chapter 8's page analysed its result 18 times, 14 s of its 17 s render). The facts returned are shared
    by every caller that asks for the same content: read them, never change them."""
    from datajourney.core.facts import Facts

    memo: dict[bytes, Facts] = {}

    def facts_of(x):
        """What this page words: ``x`` itself when it is facts, else the facts of the result ``x``."""
        if isinstance(x, Facts):
            return x
        if not is_dataclass(x):   # not a result: the analysis says what is wrong with it
            return analyse(x)
        key = _content_key(x)
        if key not in memo:
            if len(memo) >= 8:     # a page words its run and its reference: a few results at most
                memo.clear()
            memo[key] = analyse(x)
        return memo[key]

    return facts_of


# --------------------------------------------------------------------------- exercises on paper
def on_paper(intro: str, questions: list[str], answers: list[str]) -> str:
    """A pen-and-paper exercise in Markdown: the page's numbers (``intro``), numbered questions, and their worked
    answers folded in a ``<details>`` block, so a reader works them out before looking. The chapter's page
    computes every number from its run; this only lays them out."""
    if len(questions) != len(answers) or not questions:
        raise ValueError(f"an exercise needs one answer per question: {len(questions)} questions, "
                         f"{len(answers)} answers")
    ask = "\n".join(f"{k}. {q}" for k, q in enumerate(questions, start=1))
    worked = "\n".join(f"{k}. {a}" for k, a in enumerate(answers, start=1))
    return (f"{intro}\n\n{ask}\n\n<details>\n<summary>Answers, worked from this run's numbers</summary>\n\n"
            f"{worked}\n\n</details>")


def residency_facts(out, table: pd.DataFrame, what: str) -> None:
    """Facts ``residency.cold`` and ``residency.warm``: the most of the data resident in the page cache when a cold
    ``what`` (read, epoch) started, and the least when a warm one did, from the ``resident_at_start`` column."""
    if "resident_at_start" not in table:
        return
    c, w = table[table["cache"] == "cold"], table[table["cache"] == "warm"]
    if len(c):
        out.add(Fact("residency.cold", 100 * float(c["resident_at_start"].max()), "%", quantity="share",
                     better="lower", n=len(c), label=f"the most of the data resident when a cold {what} started"))
    if len(w):
        out.add(Fact("residency.warm", 100 * float(w["resident_at_start"].min()), "%", quantity="share",
                     better="higher", n=len(w), label=f"the least of the data resident when a warm {what} started"))


def short_time(seconds: float) -> str:
    """A duration in the unit that reads best: '51.7 µs', '2.4 ms', '0.52 s'."""
    a = abs(seconds)
    return num(seconds * 1e6, "µs") if a < 1e-3 else num(seconds * 1e3, "ms") if a < 1 else num(seconds, "s")


# --------------------------------------------------------------------------- the reader's own data
#: The fact every chapter that read the reader's own data holds (``image_dir``, ``token_path``).
YOUR_DATA = "your_data"


def your_data_fact(res) -> Fact | None:
    """What a run read of the reader's own data, from its ``your_data`` metadata (counts, sizes, format, no path):
    a fact whose value is the files (images) or tokens (a token set) read, whose setting holds the description."""
    d = (getattr(res, "metadata", None) or {}).get(YOUR_DATA)
    if not isinstance(d, dict) or d.get("kind") not in ("images", "tokens"):
        return None
    value = d.get("files") if d["kind"] == "images" else d.get("tokens", d.get("tokens_sampled"))
    return Fact(YOUR_DATA, value, "", f"your {d['kind']}", "count", None, setting=dict(d))
