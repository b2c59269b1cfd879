"""How stable are the reference numbers? Each chapter's key metrics in its committed reference run
beside the same metrics in the committed repeats of that run (``data/reference/<host>/repeats/``).

This module reads result files only; it measures nothing. A repeat is the same chapter run again
with the same parameters at another time or on another host (``python -m datajourney promote
RUN --host HOST --repeat``). The comparison names each run's commit, date and host, so that a
reader can tell a change of the code or of the machine from run-to-run noise.
"""
from __future__ import annotations

import datetime as _dt
import importlib
import json
import re

import pandas as pd

from datajourney.book.registry import CHAPTERS, lookup
from datajourney.chapters import published
from datajourney.chapters.wording import cap
from datajourney.core import phrasing as fx
from datajourney.core import results
from datajourney.core.facts import host_label
from datajourney.core.fingerprint import short_commit

#: A key metric that moved by more than this fraction between two runs is named in the sentence.
THRESHOLD = 0.10
#: The chapters whose reference run the book repeats (storage, PCIe, the end-to-end step).
REPEATED = ("02_random_vs_sequential", "06_pcie", "07_full_picture")
#: Parameters that name the run rather than the experiment.
_RUN_PARAMETERS = {"run_dir", "replay", "reference_host", "is_reference_run", "data_dir"}


def key_metrics(res: results.Result) -> dict:
    """``key_metrics`` of the chapter's page, read from the result's stored facts (analysed now, and not stored,
    where it has none): metric -> (value, std); {} when the page has none or the result lacks what it needs."""
    ch = lookup(res.chapter)
    if ch.page is None:
        return {}
    page = importlib.import_module(ch.page)
    try:
        facts = res.facts if res.facts is not None else ch.analyse(res)   # the result untouched
        return dict(page.key_metrics(facts)) if hasattr(page, "key_metrics") else {}
    except (KeyError, ValueError, IndexError):
        return {}


def _number(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v and abs(v) != float("inf") else None


def run_info(res: results.Result) -> dict:
    """Commit, date and host of a run, from its fingerprint: the host's name, ids and GPU (which tell one machine
    from another) and its hardware in a reader's words (``label``, :func:`host_label`: what a page shows)."""
    fp = res.fingerprint or {}
    h = fp.get("host") or {}
    return {"run": res.run_id, "commit": short_commit((fp.get("software") or {}).get("git_commit")),
            "date": fp.get("date_utc") or res.created_utc or None, "host": h.get("name"), "host_id": h.get("id"),
            "boot_id": h.get("boot_id"), "gpu": (fp.get("gpu") or {}).get("name"), "label": host_label(fp)}


def host_text(info: dict) -> str:
    """The machine by its hardware, as every page names a host: "an H200 host (16 cores)", "a 4 × H200 host (64
    cores)", never its host name (a name such as "vm" says nothing of the machine)."""
    return info.get("label") or "an unknown host"


def same_host(a: dict, b: dict) -> bool | None:
    """True when two runs' fingerprints show one machine (same boot id or host id), False when they
    show two (different host ids, names or GPUs), None when they cannot tell."""
    if a.get("boot_id") and a.get("boot_id") == b.get("boot_id"):
        return True
    if a.get("host_id") and b.get("host_id"):
        return a["host_id"] == b["host_id"]
    if a.get("host") != b.get("host") or a.get("gpu") != b.get("gpu"):
        return False
    return None


def _parameters(res: results.Result) -> dict:
    return {k: v for k, v in res.parameters.items() if k not in _RUN_PARAMETERS}


def compare(main: results.Result, repeat: results.Result) -> pd.DataFrame:
    """One row per key metric of the chapter: its value in the main reference and in the repeat, the
    change in percent of the main value, whether the change stays within the two runs' own spread
    (the sum of their standard deviations, where the page gives them), and each run's commit, date
    and host."""
    a, b = key_metrics(main), key_metrics(repeat)
    ia, ib = run_info(main), run_info(repeat)
    rows = []
    for metric in dict.fromkeys([*a, *b]):
        (va, sa), (vb, sb) = a.get(metric, (None, None)), b.get(metric, (None, None))
        va, sa, vb, sb = _number(va), _number(sa), _number(vb), _number(sb)
        fig = published.figure(main.chapter, metric)
        points = getattr(fig, "ways", None) is not None   # a signed gain (25% faster, 13% slower): change in points
        change = (vb - va if points else 100 * (vb - va) / abs(va)) if va not in (None, 0) and vb is not None \
            else None
        within = None
        if change is not None and sa is not None and sb is not None:
            within = abs(vb - va) <= sa + sb
        rows.append({"chapter": main.chapter, "metric": metric, "unit": fig.unit if fig else "",
                     "reference": va, "reference_std": sa, "repeat": vb, "repeat_std": sb,
                     "change_pct": change, "change_in": "points" if points else "%", "within_spread": within,
                     **{f"reference_{k}": v for k, v in ia.items()}, **{f"repeat_{k}": v for k, v in ib.items()}})
    return pd.DataFrame(rows)


def comparisons(host: str | None = None, chapters=None) -> dict[str, list[tuple]]:
    """For each chapter (all by default): [(main reference, repeat, :func:`compare` of the two), ...],
    one per committed repeat; an empty list where the chapter has no main reference or no repeat."""
    names = [c.name for c in CHAPTERS] if chapters is None else [lookup(c).name for c in chapters]
    out = {}
    for name in names:
        main = results.load_reference(name, host)
        reps = results.repeat_references(name, host) if main is not None else []
        out[name] = [(main, r, compare(main, r)) for r in reps]
    return out


def flips(pairs: list[tuple], chapter: str, metric: str) -> list[str]:
    """The committed repeats (``pairs``: :func:`comparisons`' entry for ``chapter``) in which ``metric`` read the
    other way than in the main reference (a gain turned a loss, a ratio crossed 1): each repeat's value as
    :func:`table` prints it."""
    fig = published.figure(chapter, metric)
    ways = getattr(fig, "ways", None)
    out = []
    for _, _, df in pairs:
        for r in df[df["metric"] == metric].itertuples():
            centre = 0.0 if ways else 1.0 if r.unit == "×" else None
            if centre is not None and pd.notna(r.reference) and pd.notna(r.repeat) \
                    and (r.reference - centre) * (r.repeat - centre) < 0:
                out.append(_value(r.repeat, r.unit, r.repeat_std, ways))
    return out


def without_repeat(found: dict) -> list[str]:
    """The chapters of :data:`REPEATED` among those compared that have no committed repeat."""
    return [name for name in REPEATED if name in found and not found[name]]


def _value(v, unit: str, std=None, ways: tuple[str, str] | None = None) -> str:
    return published.fmt(v, std, unit, ways) if v is not None else "—"


def _count(n: int, noun: str) -> str:
    """"its one key metric", "both key metrics", "all 3 key metrics": every one of ``n`` ``noun``s."""
    return f"its one {noun}" if n == 1 else f"both {noun}s" if n == 2 else f"all {n} {noun}s"


def _signed(pct: float, change_in: str = "%") -> str:
    """A change as the table prints it: "+13.8%" of the reference's value, or "−38.3 points" for a signed gain
    (a percentage of a percentage that changed sign would read −153%)."""
    sign = "+" if pct > 0 else "−" if pct < 0 else ""
    return sign + (fx.num(abs(pct), "%") if change_in == "%" else f"{fx.num(abs(pct))} points")


def table(found: dict) -> pd.DataFrame:
    """The displayed table: chapter · metric · reference run · repeat · change · within the spread;
    a row per chapter of :data:`REPEATED` without a repeat says so."""
    rows = []
    for name, pairs in found.items():
        for _, rep, df in pairs:
            for r in df.itertuples():
                ways = getattr(published.figure(name, r.metric), "ways", None)   # a gain reads "49.0% slower"
                rows.append({"chapter": lookup(name).number, "repeat run": rep.run_id, "metric": r.metric,
                             "reference run": _value(r.reference, r.unit, r.reference_std, ways),
                             "repeat": _value(r.repeat, r.unit, r.repeat_std, ways),
                             "change": _signed(r.change_pct, r.change_in) if r.change_pct is not None else "—",
                             "within the runs' ± std": ("—" if r.within_spread is None
                                                        else "yes" if r.within_spread else "no")})
    for name in without_repeat(found):
        rows.append({"chapter": lookup(name).number, "repeat run": "no repeat committed yet", "metric": "—",
                     "reference run": "—", "repeat": "—",
                     "change": "—", "within the runs' ± std": "—"})
    df = pd.DataFrame(rows, columns=["chapter", "repeat run", "metric", "reference run", "repeat", "change",
                                     "within the runs' ± std"])
    return df.sort_values("chapter", kind="stable").reset_index(drop=True)


def runs_table(found: dict) -> pd.DataFrame:
    """Each compared run: chapter · role · run id · commit · date · host."""
    rows, seen = [], set()
    for name, pairs in found.items():
        for main, rep in ((m, r) for m, r, _ in pairs):
            for role, info in (("reference", run_info(main)), ("repeat", run_info(rep))):
                if (name, info["run"]) in seen:
                    continue
                seen.add((name, info["run"]))
                rows.append({"chapter": lookup(name).number, "run": role, "run id": info["run"],
                             "commit": info["commit"] or "unknown", "date (UTC)": info["date"] or "unknown",
                             "host": host_text(info)})
    return pd.DataFrame(rows, columns=["chapter", "run", "run id", "commit", "date (UTC)", "host"])


def _hours(a: str | None, b: str | None) -> float | None:
    try:
        t = [_dt.datetime.strptime(x, "%Y-%m-%dT%H:%M:%SZ") for x in (a, b)]
    except (TypeError, ValueError):
        return None
    return abs((t[1] - t[0]).total_seconds()) / 3600


def _apart(hours: float | None) -> str:
    if hours is None:
        return "at times the fingerprints do not give"
    if hours < 1:
        return f"{fx.num(round(hours * 60))} minutes apart"
    if hours < 48:
        return f"{fx.num(hours)} hours apart"
    return f"{fx.num(hours / 24)} days apart"


def _hosts(ia: dict, ib: dict) -> tuple[str, str]:
    """Where a reference and its repeat ran: (the clause a repeat's sentence ends with, the sentence that says it once
    for every repeat when all of them ran alike)."""
    host, alike = same_host(ia, ib), host_text(ia) == host_text(ib)
    boot = ia.get("boot_id") is not None and ia.get("boot_id") == ib.get("boot_id")
    if host:
        return (f"on the same host{' and boot' if boot else ''}, {host_text(ia)}",
                f"Every repeat ran on the same host as its reference, {host_text(ia)}.")
    if host is False:
        kind = re.sub(r"^(an?|the)\s+", "", host_text(ia))   # "a 4 × H200 host (64 cores)" -> "4 × H200 host …"
        return ((f"on two different hosts, each {host_text(ia)}", f"Every repeat ran on another {kind} than its "
                 "reference.") if alike else
                (f"on different hosts, {host_text(ia)} and {host_text(ib)}", ""))
    if alike:
        return (f"on {host_text(ia)} both times, though their fingerprints do not say whether on one machine",
                f"Every repeat ran on {host_text(ia)}, as its reference did; the fingerprints do not say whether on "
                "the same machine.")
    return (f"on {host_text(ia)} and on {host_text(ib)}, though their fingerprints do not say whether on one machine",
            "")


def _reading(main: results.Result, repeat: results.Result) -> str:
    """What a change between the two runs can come from, by their commits, hosts and parameters: the same
    sentence for every repeat alike, so that :func:`summary` says it once above them."""
    return _source(main, repeat) + (" Their parameters differ, so the comparison is not like for like."
                                    if _differ(main, repeat) else "")


def _same_commit(main: results.Result, repeat: results.Result) -> bool:
    """Whether the two runs recorded one commit (an unknown commit is no match)."""
    ia, ib = run_info(main), run_info(repeat)
    return ia["commit"] is not None and ia["commit"] == ib["commit"]


def _source(main: results.Result, repeat: results.Result) -> str:
    """What a change between the two runs can come from, by their commits and hosts."""
    same_commit, host = _same_commit(main, repeat), same_host(run_info(main), run_info(repeat))
    if same_commit and host:
        text = "these changes are run-to-run noise, not code or hardware."
    elif not same_commit and host is False:
        text = "a change may come from the code, the host or noise, and two runs cannot tell which."
    elif not same_commit:
        text = "a change may come from the code as well as from noise."
    else:
        text = "a change may come from the host as well as from noise."
    return text


def _differ(main: results.Result, repeat: results.Result) -> list[str]:
    """The parameters two runs set differently."""
    return sorted(k for k in set(_parameters(main)) | set(_parameters(repeat))
                  if _parameters(main).get(k) != _parameters(repeat).get(k))


def sentence(main: results.Result, repeat: results.Result, df: pd.DataFrame, threshold: float = THRESHOLD, *,
             host_said: bool = False, reading: bool = True) -> str:
    """What moved between the reference run and one repeat, by how much, and whether the two runs
    share commit and host (so the change is run-to-run noise) or not; ``host_said``: where they ran is said once
    above every repeat (:func:`summary`), not again here; ``reading``: what a change can come from
    (:func:`_reading`), left out where :func:`summary` says it once above a group of repeats."""
    ch = lookup(main.chapter)
    ia, ib = run_info(main), run_info(repeat)
    head = f"Chapter {ch.number}, repeat {repeat.run_id}"
    moved = df.dropna(subset=["change_pct"]) if not df.empty else df
    if moved.empty:
        text = f"{head}: no key metric was measured in both runs, so nothing can be compared."
    else:
        big = moved[moved["change_pct"].abs() > 100 * threshold]
        top = moved.loc[moved["change_pct"].abs().idxmax()]
        top_said = _signed(top["change_pct"], top["change_in"])
        if big.empty and top_said.lstrip("+−") in ("0%", "0 points"):
            text = f"{head}: {_count(len(moved), 'key metric')} read the same in both runs, at the precision printed."
        elif big.empty and len(moved) == 1:
            text = (f"{head}: its one key metric, {top['metric']}, moved by {top_said}, no more than "
                    f"{fx.pct(threshold)}.")
        elif big.empty:
            text = (f"{head}: none of the {len(moved)} key metrics moved by more than {fx.pct(threshold)}; the "
                    f"largest change is {top['metric']}, {top_said}.")
        else:
            named = "; ".join(f"{r.metric}, {_signed(r.change_pct, r.change_in)}"
                              + ("" if r.within_spread is None else
                                 " (within the runs' own ± std)" if r.within_spread else " (beyond the runs' ± std)")
                              for r in big.sort_values("change_pct", key=abs, ascending=False).itertuples())
            which = ("its one key metric" if len(moved) == 1 else _count(len(moved), "key metric")
                     if len(big) == len(moved) else f"{len(big)} of the {len(moved)} key metrics")
            order = ", largest first" if len(big) > 1 else ""
            text = f"{head}: {which} moved by more than {fx.pct(threshold)}{order}: {named}."
        n_within = int((moved["within_spread"] == True).sum())  # noqa: E712 - None means no spread given
        n_judged = int(moved["within_spread"].notna().sum())
        within = "the two runs' standard deviations together"
        if n_judged == 1:
            text += f" The one metric with a spread moved by {'no more' if n_within else 'more'} than {within}."
        elif n_judged and n_within == n_judged:
            text += f" {cap(_count(n_judged, 'metric'))} with a spread moved by no more than {within}."
        elif n_judged and n_within == 0:
            text += f" No metric of the {n_judged} with a spread stayed within {within}."
        elif n_judged:
            text += f" {n_within} of the {n_judged} metrics with a spread moved by no more than {within}."
    same_commit, host = _same_commit(main, repeat), same_host(ia, ib)
    commit_text = (f"the same commit ({ia['commit']})" if same_commit
                   else f"different commits ({ia['commit'] or 'unknown'} and {ib['commit'] or 'unknown'})")
    where = "" if host_said else f", {_hosts(ia, ib)[0]}"
    text += f" The two runs came from {commit_text}, {_apart(_hours(ia['date'], ib['date']))}{where}"
    diff = _differ(main, repeat)
    if not reading:
        return text + (f"; their parameters differ ({', '.join(diff)})." if diff else ".")
    text += (", so " if same_commit and host else ": ") + _source(main, repeat)
    if diff:
        text += f" The runs' parameters differ ({', '.join(diff)}), so the comparison is not like for like."
    return text


def summary(found: dict, threshold: float = THRESHOLD) -> tuple[list[tuple[str, list[str]]], str]:
    """The repeats in groups that a change can come from alike (:func:`_reading`: the same commit and host, other
    commits, other parameters), each group's reading said once in its head and one sentence per repeat under it;
    last, one naming the chapters of :data:`REPEATED` without a repeat (its head empty); and the sentence that says
    where every repeat ran when they all ran alike ("" when not: each sentence says it)."""
    pairs = [p for ps in found.values() for p in ps]
    wheres = {_hosts(run_info(main), run_info(rep)) for main, rep, _ in pairs}   # said alike only if all alike
    lead = wheres.pop()[1] if len(wheres) == 1 else ""
    groups: dict[tuple[str, str], list[str]] = {}
    for main, rep, df in pairs:
        origin = "of the reference's own commit" if _same_commit(main, rep) else "of other commits"
        groups.setdefault((origin, _reading(main, rep)), []).append(
            sentence(main, rep, df, threshold, host_said=bool(lead), reading=False))
    out = [(f"**{len(v)} {'repeat' if len(v) == 1 else 'repeats'} {origin}**: {cap(k)}", v)
           for (origin, k), v in groups.items()]
    missing = without_repeat(found)
    if missing:
        nums = [str(lookup(n).number) for n in missing]
        which = fx.and_list(nums)
        out.append(("", [f"No repeat of the reference run is committed yet for chapter{'s' if len(nums) > 1 else ''} "
                         f"{which}."]))
    return out, lead


# ----------------------------------------------------------------------------- how long the reference run took
def multi_gpu() -> tuple[str, ...]:
    """The chapters that need a host with two or more GPUs (their package's ``MIN_GPUS``): a reference run runs
    them apart, and their time is stated apart."""
    return tuple(c.name for c in CHAPTERS if c.min_gpus > 1)


def timed() -> tuple[str, ...]:
    """The chapters that run on one GPU, timed together: every chapter but :func:`multi_gpu`'s."""
    return tuple(c.name for c in CHAPTERS if c.name not in multi_gpu())


def run_record(run_id: str, host: str | None = None) -> dict | None:
    """The committed run record of run ``run_id``: ``<host>/run-<run id>.json``, or the record of the reference
    run that holds it as one of its chapters' runs (a reference run made one chapter at a time names each
    chapter's run id in its record); None when neither is committed."""
    folder = results.REFERENCE_DIR / (host or results.DEFAULT_REFERENCE_HOST)
    path = folder / f"run-{run_id}.json"
    if path.exists():
        return json.loads(path.read_text())
    for p in sorted(folder.glob("run-*.json")):
        rec = json.loads(p.read_text())
        if any(c.get("run_id") == run_id for c in rec.get("chapters", [])):
            return rec
    return None


def run_times(host: str | None = None) -> pd.DataFrame:
    """One row per chapter with a committed reference: its run id, the wall time of the chapter in that
    run's record (timed by the runner around the notebook's execution, data generation included; every
    attempt of it in the record summed; None where the record is missing), the status of its last
    attempt, and the GPU count and host from the result's fingerprint."""
    rows, records = [], {}
    for ch in CHAPTERS:
        res = results.load_reference(ch.name, host)
        if res is None:
            continue
        if res.run_id not in records:
            records[res.run_id] = run_record(res.run_id, host) or {}
        rec = records[res.run_id]
        tries = [c for c in rec.get("chapters", []) if c.get("chapter") == ch.name]
        secs = [x for x in (_number(c.get("seconds")) for c in tries) if x is not None]
        info = run_info(res)
        rows.append({"chapter": ch.name, "number": ch.number, "run_id": rec.get("run_id") or res.run_id,
                     "seconds": sum(secs) if secs else None, "status": tries[-1].get("status") if tries else None,
                     "gpus": ((res.fingerprint or {}).get("gpu") or {}).get("count"), "host": host_text(info)})
    return pd.DataFrame(rows, columns=["chapter", "number", "run_id", "seconds", "status", "gpus", "host"])


def _numbers(nums) -> str:
    """[1, 2, 3, 5, 7, 8] -> '1–3, 5, 7 and 8'."""
    spans: list[list[int]] = []
    for n in sorted(nums):
        if spans and n == spans[-1][-1] + 1:
            spans[-1].append(n)
        else:
            spans.append([n])
    return fx.and_list([p for s in spans for p in ([f"{s[0]}–{s[-1]}"] if len(s) > 2 else map(str, s))])


def _duration(seconds: float) -> str:
    """'1,171 s (19.5 minutes)'; seconds alone under a minute."""
    if abs(seconds) < 60:
        return fx.num(seconds, "s")
    minutes = fx.num(seconds / 60)
    return f"{fx.num(seconds, 's')} ({minutes} minute{'' if minutes == '1' else 's'})"


def _where(row) -> str:
    """The host a chapter ran on, by its hardware: "a 4 × H200 host (64 cores)" (its GPU count in the label)."""
    return row["host"]


def _untimed(gaps: list[int]) -> str:
    """' Chapters 4, 9 and 10 have no time with status ok in a committed run record.' ('' for none)."""
    if not gaps:
        return ""
    return (f" Chapter{'s' if len(gaps) > 1 else ''} {_numbers(gaps)} {'have' if len(gaps) > 1 else 'has'} no time "
            "with status ok in a committed run record.")


def time_sentence(df: pd.DataFrame, host: str | None = None) -> str:
    """How long the chapters of :func:`timed` took in :func:`run_times`' table: one run's summed wall
    time (and the whole job's, where its record has it) when one run holds them all (status ok), else which
    runs they come from, what is missing and the time of those that have one; then each of :func:`multi_gpu`'s own
    time and run. (The time the full profile may take is a benchmark's target, not the page's.)"""
    one_gpu = timed()
    timed_df = df[df["chapter"].isin(one_gpu)]
    which = f"the {len(one_gpu)} chapters that run on one GPU ({_numbers(lookup(c).number for c in one_gpu)})"
    good = timed_df[timed_df["seconds"].notna() & (timed_df["status"] == "ok")]
    runs = list(dict.fromkeys(timed_df["run_id"]))
    total = float(good["seconds"].sum())
    if len(good) == len(one_gpu) and len(runs) == 1:
        text = f"Run {runs[0]} ran {which} on {_where(timed_df.iloc[0])} in {_duration(total)}."
        wall = _number((run_record(runs[0], host) or {}).get("wall_seconds")) if host is not None else None
        if wall is not None:
            text = text[:-1] + f"; the whole job, start-up and the wait between chapters included, {_duration(wall)}."
    elif not runs:
        text = f"No committed reference holds any of {which}."
    elif len(timed_df) < len(one_gpu) and (timed_df["gpus"].fillna(1) > 1).all():   # a multi-GPU host kept for
        # some chapters only (the 4-GPU hosts: chapters 8 and 11); a one-GPU host missing one is told below
        held = _numbers(timed_df["number"])
        text = (f"This host's reference holds chapter{'s' if len(timed_df) > 1 else ''} {held} of {which}, from "
                f"run{'s' if len(runs) > 1 else ''} {', '.join(runs)}, on {_where(timed_df.iloc[0])}.")
        times = [f"chapter {r.number} took {_duration(r.seconds)}" for r in good.itertuples()]
        if times:
            text += f" {cap(fx.and_list(times))}."
        text += _untimed([r.number for r in timed_df.itertuples() if r.chapter not in set(good["chapter"])])
    else:
        gaps = [lookup(c).number for c in one_gpu if c not in set(good["chapter"])]
        text = (f"The reference results of {which} come from one run ({runs[0]}), but not all of them with a time "
                "and status ok in its record." if len(runs) == 1 else
                f"The reference results of {which} come from {len(runs)} runs ({', '.join(runs)}), so no one "
                "run's time covers them all.")
        text += _untimed(gaps)
        if len(good):
            text += (f" The {len(good)} chapter{'s' if len(good) != 1 else ''} with one took {_duration(total)} "
                     "together.")
    for name in multi_gpu():
        multi = df[(df["chapter"] == name) & df["seconds"].notna() & (df["status"] == "ok")]
        n = lookup(name).number
        if multi.empty:
            text += f" Chapter {n} needs two or more GPUs and has no committed time with status ok."
        elif multi.iloc[0]["run_id"] in runs:   # the same run as the chapters above: on the same host
            text += (f" Chapter {n}, which needs two or more GPUs, ran in the same run: "
                     f"{_duration(multi.iloc[0]['seconds'])}.")
        else:
            r = multi.iloc[0]
            text += (f" Chapter {n} needs two or more GPUs, so it ran apart, on {_where(r)}: run {r['run_id']}, "
                     f"{_duration(r['seconds'])}.")
    return text


# ----------------------------------------------------------------------------- how stable are these numbers?
def section(host: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The committed reference runs against their committed repeats (never this run, so a reader's run
    shows the same section): the key metrics side by side, the compared runs (commit, date, host) and
    the computed sentences, as Markdown bullets."""
    found = comparisons(host)
    groups, lead = summary(found)
    blocks = [(f"{head}\n\n" if head else "") + "\n".join(f"* {s}" for s in said) for head, said in groups]
    return table(found), runs_table(found), "\n\n".join(([lead] if lead else []) + blocks)


# ----------------------------------------------------------------------------- how long did the reference run take?
def host_heading(host: str | None = None) -> str:
    """A reference host's folder by the hardware that ran most of its chapters ("An H100 80GB HBM3 host (16
    cores)"), as a page heads its runs: never the folder's key ("h100")."""
    labels = [h for h in run_times(host)["host"] if isinstance(h, str) and h]
    return cap(max(dict.fromkeys(labels), key=labels.count)) if labels else f"Reference host {host}"


def run_time_section(host: str | None = None) -> tuple[pd.DataFrame, str]:
    """The committed reference run's wall time per chapter, from its run records (never this run), and
    the computed sentence: the summed time and the whole job's, the chapters that need several GPUs apart."""
    df = run_times(host)
    table = pd.DataFrame({"chapter": df["number"], "run id": df["run_id"], "wall time (s)": df["seconds"],
                          "status": df["status"].fillna("no record"), "GPUs": df["gpus"], "host": df["host"]})
    return table, time_sentence(df, host or results.DEFAULT_REFERENCE_HOST)
