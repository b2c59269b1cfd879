"""How stable are the reference numbers: key metrics of a reference run beside its committed repeats."""
import json

import pandas as pd
import pytest

from datajourney.book import stability
from datajourney.book.registry import CHAPTERS
from datajourney.core import results

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

CH = "02_random_vs_sequential"
HOST = {"name": "gpu-a", "id": "aaa", "boot_id": "boot-1"}


def _result(random, sequential, *, run_id="ref", commit="c0ffee", host=None, date="2026-11-22T01:00:00Z",
            params=None):
    """A chapter-2 result whose cold reads run at these rates (MB/s, one value per run)."""
    rows = [{"cache": "cold", "pattern": "random", "MBps": v} for v in random]
    rows += [{"cache": "cold", "pattern": "sequential", "MBps": v} for v in sequential]
    fp = {"date_utc": date, "software": {"git_commit": commit}, "host": dict(host or HOST),
          "gpu": {"name": "NVIDIA H200", "available": True}}
    res = results.Result(chapter=CH, run_id=run_id, parameters=dict(params or {"n_files": 100}), fingerprint=fp)
    res.add("headline", pd.DataFrame(rows))
    return res


def test_a_metric_that_moved_is_named_and_one_that_did_not_is_not():
    main = _result([70, 71, 69], [1400, 1410, 1390])
    moved = _result([72, 73, 71], [700, 705, 695], run_id="rep", date="2026-11-22T01:30:00Z")
    df = stability.compare(main, moved)
    row = df.set_index("metric").loc["sequential read, cold"]
    assert row["change_pct"] == pytest.approx(-50) and not row["within_spread"]
    assert df.set_index("metric").loc["random read, cold", "change_pct"] == pytest.approx(100 * 2 / 70)
    text = stability.sentence(main, moved, df)
    assert "2 of the 3 key metrics moved by more than 10%" in text
    assert "sequential read, cold, −50%" in text and "beyond the runs' ± std" in text
    assert "random read, cold, " not in text
    assert "largest first: sequential ÷ random, cold, −51.4%" in text and "The largest change" not in text
    assert "same commit (c0ffee), 30 minutes apart, on the same host and boot, an H200 host" in text
    assert "run-to-run noise" in text
    # the reversal: nothing moved
    still = _result([70, 71, 69], [1400, 1410, 1390], run_id="rep")
    text = stability.sentence(main, still, stability.compare(main, still))
    assert "all 3 key metrics read the same in both runs" in text and "largest change" not in text
    assert "Both metrics with a spread moved by no more than" in text
    little = _result([71, 72, 70], [1400, 1410, 1390], run_id="rep")
    text = stability.sentence(main, little, stability.compare(main, little))
    assert "none of the 3 key metrics moved by more than 10%; the largest change is random read, cold, +1.4%" in text


def test_the_threshold_decides_what_is_named():
    main, rep = _result([70, 71, 69], [1400] * 3), _result([75, 76, 74], [1400] * 3, run_id="rep")
    df = stability.compare(main, rep)
    assert "none of the 3 key metrics" in stability.sentence(main, rep, df, threshold=0.10)
    assert "2 of the 3 key metrics moved by more than 5%" in stability.sentence(main, rep, df, threshold=0.05)


def test_a_change_within_the_runs_spread_says_so():
    main = _result([50, 70, 90], [1400] * 3)
    rep = _result([60, 80, 100], [1400] * 3, run_id="rep")
    df = stability.compare(main, rep)
    assert bool(df.set_index("metric").loc["random read, cold", "within_spread"])
    assert "(within the runs' own ± std)" in stability.sentence(main, rep, df)


@pytest.mark.parametrize("commit, host, expect", [
    ("c0ffee", HOST, "so these changes are run-to-run noise"),
    ("beef00", HOST, "different commits (c0ffee and beef00)"),
    ("c0ffee", {"name": "gpu-b", "id": "bbb", "boot_id": "boot-2"}, "on two different hosts, each an H200 host"),
    ("c0ffee", {"name": "gpu-a", "id": "aaa", "boot_id": "boot-2"}, "on the same host, an H200 host"),
    ("c0ffee", {"name": "gpu-a", "id": None, "boot_id": "boot-2"},
     "on an H200 host both times, though their fingerprints do not say whether on one machine"),
])
def test_commit_and_host_tell_code_and_hardware_from_noise(commit, host, expect):
    main = _result([70] * 3, [1400] * 3, host={**HOST, "id": HOST["id"] if host["id"] else None})
    rep = _result([70] * 3, [1400] * 3, run_id="rep", commit=commit, host=host, date="2026-11-24T01:00:00Z")
    text = stability.sentence(main, rep, stability.compare(main, rep))
    assert expect in text and "2 days apart" in text
    assert "gpu-a" not in text and "gpu-b" not in text   # a host by its hardware, never by its host name
    assert ("run-to-run noise" in text) == (expect == "so these changes are run-to-run noise"
                                             or expect.startswith("on the same host"))


def test_one_commit_recorded_at_two_lengths_is_one_commit_of_seven_characters():
    """Runs record 12- or 40-character commit ids: the table prints 7 for every run, and the two lengths of
    one commit are the same commit."""
    main = _result([70] * 3, [1400] * 3, commit="86993a7b1b41")
    rep = _result([70] * 3, [1400] * 3, run_id="rep", commit="86993a7b1b41" + "0" * 28, date="2026-11-24T01:00:00Z")
    assert stability.run_info(main)["commit"] == stability.run_info(rep)["commit"] == "86993a7"
    assert "the same commit (86993a7)" in stability.sentence(main, rep, stability.compare(main, rep))
    assert set(stability.runs_table({CH: [(main, rep, None)]})["commit"]) == {"86993a7"}


def test_different_parameters_are_named():
    main, rep = _result([70] * 3, [1400] * 3), _result([70] * 3, [1400] * 3, run_id="rep", params={"n_files": 50})
    assert "parameters differ (n_files)" in stability.sentence(main, rep, stability.compare(main, rep))


def test_a_metric_missing_from_one_run_shows_a_dash():
    main = _result([70] * 3, [1400] * 3)
    rep = _result([70] * 3, [], run_id="rep")  # the page gives no metric without both patterns
    df = stability.compare(main, rep)
    assert df["change_pct"].isna().all() and "nothing can be compared" in stability.sentence(main, rep, df)
    assert set(stability.table({CH: [(main, rep, df)]})["change"]) == {"—"}


def test_repeats_are_read_from_the_committed_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "REFERENCE_DIR", tmp_path)
    _result([70] * 3, [1400] * 3).save(tmp_path / "h200")
    rep = _result([70] * 3, [700] * 3, run_id="rep1", date="2026-11-23T01:00:00Z")
    rep.save(tmp_path / "h200" / "repeats")
    (tmp_path / "h200" / "repeats" / f"{CH}.json").rename(tmp_path / "h200" / "repeats" / f"{CH}-rep1.json")
    found = stability.comparisons("h200", [2, 6, 7])
    assert [r.run_id for _, r, _ in found[CH]] == ["rep1"] and found["06_pcie"] == []
    t = stability.table(found)
    assert t["chapter"].tolist() == [2, 2, 2, 6, 7]
    assert t.set_index("metric").loc["sequential read, cold", "change"] == "−50%"
    assert (t[t["chapter"] == 6]["repeat run"] == "no repeat committed yet").all()
    runs = stability.runs_table(found)
    assert runs["run"].tolist() == ["reference", "repeat"] and runs["commit"].tolist() == ["c0ffee"] * 2
    groups, lead = stability.summary(found)
    text = [t for _, said in groups for t in said]
    assert text[-1] == "No repeat of the reference run is committed yet for chapters 6 and 7."
    assert groups[0][0].startswith("**1 repeat of the reference's own commit**: These changes are run-to-run noise")
    assert "24 hours apart" in text[0]
    assert lead.startswith("Every repeat ran on") and "both times" not in text[0]   # where they ran: said once


def test_committed_reference_and_repeats():
    """The book's own table: chapter 7 has a repeat; every chapter the book repeats has a row."""
    found = stability.comparisons(results.DEFAULT_REFERENCE_HOST)
    t = stability.table(found)
    assert {2, 6, 7} <= set(t["chapter"])
    assert found["07_full_picture"] and len(found["07_full_picture"][0][2]) >= 5
    groups, lead = stability.summary(found)
    text = [t for _, said in groups for t in said]
    assert text and all("nan" not in s and "None" not in s for s in text)
    # what a change can come from: said once per group, never again in a repeat's own sentence
    assert len({head for head, _ in groups}) == len(groups)
    assert not any("as well as from noise" in t or "like for like" in t for t in text)
    where = [s for s in text if "whether on one machine" in s or "both times" in s]
    assert not (lead and where), "where the repeats ran is said once, above them, not in every sentence"
    assert stability.runs_table(found)["commit"].ne("unknown").all()


def test_chapter_12_shows_the_committed_runs_whatever_this_run_is():
    from datajourney.book import stability  # noqa: F401

    table, runs, text = stability.section(results.DEFAULT_REFERENCE_HOST)
    assert list(table.columns)[:3] == ["chapter", "repeat run", "metric"] and not runs.empty
    found = stability.comparisons(results.DEFAULT_REFERENCE_HOST)
    missing = [c for c in stability.REPEATED if not found.get(c)]
    assert text.split("\n\n")[-1].startswith("* Chapter ")
    assert all(f"Chapter {int(c[:2])}, repeat " in text for c in found if found[c])
    assert ("No repeat of the reference run" in text) == bool(missing)


@pytest.fixture(scope="module")
def appendix():
    """The appendix page on the reference runs, executed as the book build executes it."""
    import nbformat
    from nbclient import NotebookClient

    from datajourney.core.paths import REPO_ROOT

    nb = nbformat.read(REPO_ROOT / "book" / "reference_runs.ipynb", as_version=4)
    assert nb.metadata["mystnb"]["execution_mode"] == "force"   # computed at every build, never stale
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO_ROOT)}}).execute()
    return nb


def _shown(nb, call: str) -> list[str]:
    cell = next(c for c in nb.cells if c.cell_type == "code" and call in c.source)
    assert "hide-input" in cell.metadata["tags"]
    return [o["data"]["text/markdown"] for o in cell.outputs if "text/markdown" in o.get("data", {})]


def test_the_appendix_shows_the_committed_repeats(appendix):
    """The stability section left chapter 12 for an appendix page about the book's reference runs."""
    assert _shown(appendix, "stability.section(") == [stability.section(results.DEFAULT_REFERENCE_HOST)[2]]
    assert any("(stability-of-the-reference)=" in c.source for c in appendix.cells if c.cell_type == "markdown")


# ----------------------------------------------------------------------------- how long the reference run took
def _timed_reference(root, seconds: dict, runs: dict | None = None, status: dict | None = None, only=None,
                     gpus: int | None = None):
    """Reference results in ``root/h200`` for every chapter (or the numbers in ``only``), and each run's record:
    chapter -> seconds, chapter -> run id (default 'one' for all but chapter 11, 'multi' for it), chapter ->
    status; ``gpus``: every result's GPU count (default 2 for chapter 11, 1 for the others)."""
    import json


    runs, status = runs or {}, status or {}
    records: dict = {}
    for ch in CHAPTERS:
        if only is not None and ch.number not in only:
            continue
        run = runs.get(ch.number, "multi" if ch.name in stability.multi_gpu() else "one")
        count = gpus or (2 if ch.name in stability.multi_gpu() else 1)
        fp = {"host": dict(HOST), "gpu": {"name": "NVIDIA H200", "count": count, "available": True}}
        results.Result(chapter=ch.name, run_id=run, parameters={}, fingerprint=fp).save(root / "h200")
        records.setdefault(run, []).append({"chapter": ch.name, "seconds": seconds.get(ch.number, 100.0),
                                            "status": status.get(ch.number, "ok")})
    for run, chapters in records.items():
        (root / "h200" / f"run-{run}.json").write_text(json.dumps(
            {"run_id": run, "profile": "full", "status": "ok", "host": "gpu-a", "chapters": chapters}))


def _one_gpu_chapters() -> str:
    """'the 11 chapters that run on one GPU (1–10 and 12)', from the registry (a new chapter counts)."""
    nums = [c.number for c in CHAPTERS if c.name not in stability.multi_gpu()]
    return f"the {len(nums)} chapters that run on one GPU ({stability._numbers(nums)})"


def test_the_one_gpu_chapters_are_named_from_the_registry():
    assert stability.multi_gpu() == ("11_gpu_to_gpu",)
    text = _one_gpu_chapters()
    assert text.startswith(f"the {len(CHAPTERS) - 1} chapters that run on one GPU (1–10") and " 12" in text


@pytest.mark.parametrize("seconds", [100.0, 120.0])
def test_one_run_is_timed(tmp_path, monkeypatch, seconds):
    monkeypatch.setattr(results, "REFERENCE_DIR", tmp_path)
    _timed_reference(tmp_path, {c.number: seconds for c in CHAPTERS} | {11: 250.0})
    df = stability.run_times("h200")
    assert len(df) == len(CHAPTERS) and df.set_index("number").loc[11, "gpus"] == 2
    text = stability.time_sentence(df)
    expect = f"in {stability._duration(seconds * (len(CHAPTERS) - 1))}."
    assert text.startswith(f"Run one ran {_one_gpu_chapters()} on an H200 host in ") and expect in text
    assert text.endswith("Chapter 11 needs two or more GPUs, so it ran apart, on a 2 × H200 host: run multi, 250 s "
                         "(4.17 minutes).")
    assert "target" not in text  # a target is a benchmark's, not the page's
    rec = json.loads((tmp_path / "h200" / "run-one.json").read_text())
    (tmp_path / "h200" / "run-one.json").write_text(json.dumps({**rec, "wall_seconds": 1500.0}))
    assert "the whole job, start-up and the wait between chapters included, 1,500 s (25 minutes)." in \
        stability.time_sentence(df, "h200")


def test_chapters_from_several_runs_are_not_one_run(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "REFERENCE_DIR", tmp_path)
    _timed_reference(tmp_path, {c.number: 50.0 for c in CHAPTERS}, runs={9: "two", 10: "two"}, status={4: "failed"})
    text = stability.time_sentence(stability.run_times("h200"))
    assert text.startswith(f"The reference results of {_one_gpu_chapters()} come from "
                           "2 runs (one, two), so no one run's time covers them all.")
    n = len(CHAPTERS) - 2  # all but chapter 11 (apart) and chapter 4 (failed)
    assert "Chapter 4 has no time with status ok" in text
    assert f"The {n} chapters with one took {stability._duration(50.0 * n)}" in text
    assert "within the book" not in text and "over the book" not in text
    # a chapter whose run record is not committed: no time, and named
    (tmp_path / "h200" / "run-two.json").unlink()
    df = stability.run_times("h200")
    assert df.set_index("number").loc[[9, 10], "seconds"].isna().all()
    assert "Chapters 4, 9 and 10 have no time" in stability.time_sentence(df)


def test_one_run_that_did_not_finish_every_chapter_is_not_timed(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "REFERENCE_DIR", tmp_path)
    _timed_reference(tmp_path, {c.number: 50.0 for c in CHAPTERS}, status={7: "failed", 11: "failed"})
    text = stability.time_sentence(stability.run_times("h200"))
    assert text.startswith(f"The reference results of {_one_gpu_chapters()} come from "
                           "one run (one), but not all of them with a time and status ok")
    assert "Chapter 7 has no time" in text and "within" not in text and "over" not in text
    assert "Chapter 11 needs two or more GPUs and has no committed time with status ok." in text


def test_a_retried_chapter_counts_every_attempt(tmp_path, monkeypatch):
    """A chapter run twice in one record (a failed try, then a good one) took both tries' time."""
    import json

    monkeypatch.setattr(results, "REFERENCE_DIR", tmp_path)
    _timed_reference(tmp_path, {c.number: 100.0 for c in CHAPTERS})
    rec = json.loads((tmp_path / "h200" / "run-one.json").read_text())
    rec["chapters"].insert(0, {"chapter": "03_dataloader", "seconds": 40.0, "status": "failed"})
    (tmp_path / "h200" / "run-one.json").write_text(json.dumps(rec))
    df = stability.run_times("h200")
    assert df.set_index("number").loc[3, "seconds"] == 140.0 and df.set_index("number").loc[3, "status"] == "ok"
    assert f"in {stability._duration(100.0 * (len(CHAPTERS) - 1) + 40.0)}." in stability.time_sentence(df)


def test_the_committed_reference_run_has_a_time_for_every_chapter():
    from datajourney.book import stability  # noqa: F401

    df = stability.run_times(results.DEFAULT_REFERENCE_HOST)
    referenced = [c for c in CHAPTERS if results.load_reference(c.name) is not None]  # a new chapter may have none
    assert df["chapter"].tolist() == [c.name for c in referenced] and (df["seconds"] > 0).all()
    assert [int(n[:2]) for n in df["chapter"]][:12] == list(range(1, 13))
    table, text = stability.run_time_section(results.DEFAULT_REFERENCE_HOST)
    assert table["chapter"].tolist() == [c.number for c in referenced]
    assert text == stability.time_sentence(df, results.DEFAULT_REFERENCE_HOST)
    new = [c.number for c in CHAPTERS if c not in referenced]  # a new chapter: no time yet, and named
    assert "Run " in text or "no one run" in text or (new and "not all of them with a time" in text
                                                       and f"{new[-1]} " in text.split("no time")[0])
    assert "nan" not in text and "None" not in text


def test_the_appendix_names_a_host_by_its_hardware_never_by_its_host_name():
    """A reference run's fingerprint records the GPU host's name ("vm" on the reference hosts): the appendix's
    sentences and tables say which machine by its hardware ("an H200 host (16 cores)", "a 4 × H200 host (64
    cores)"), as every chapter's heading does, and never print that name."""
    import re

    from datajourney.core.facts import host_label

    shown, names, labels = [], set(), set()
    for h in results.reference_hosts():
        table, text = stability.run_time_section(h)
        shown += [text, *map(str, table["host"])]
        for c in CHAPTERS:
            res = results.load_reference(c.name, h)
            if res is not None:
                names.add(((res.fingerprint or {}).get("host") or {}).get("name"))
                labels.add(host_label(res.fingerprint))
    table, runs, text = stability.section(results.DEFAULT_REFERENCE_HOST)
    shown += [text, *map(str, runs["host"])]
    names.discard(None)
    assert names, "the committed fingerprints record no host name"
    for name in names - {w for label in labels for w in label.split()}:
        assert not [s for s in shown if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", s)], name
    assert any(label in " ".join(shown) for label in labels)


def test_the_appendix_shows_the_committed_run_time(appendix):
    """Each reference host's run time, from its run records."""
    assert _shown(appendix, "stability.run_time_section(") == [
        f"**{stability.host_heading(h)}**: " + stability.run_time_section(h)[1] for h in results.reference_hosts()]
    from datajourney.core.paths import REPO_ROOT

    toc = (REPO_ROOT / "_toc.yml").read_text()
    assert "file: book/reference_runs" in toc


def test_a_gain_in_the_appendix_reads_by_its_sign():
    """Chapter 8's "throughput gain" showed "−49.0%" in the appendix: a gain or reduction is worded."""
    t = stability.table(stability.comparisons("h200", ["08_threads_processes_gil"]))
    gains = t[t["metric"].str.contains("gain|reduction")]
    assert len(gains) >= 2
    assert (gains["reference run"] != "—").all()
    for col in ("reference run", "repeat"):  # a repeat without the paper's comparison shows "—", never a sign
        shown = gains[col][gains[col] != "—"]
        assert shown.str.contains(r"(?:faster|slower|more|less)").all() and not shown.str.startswith(("-", "−")).any()


def test_one_metric_reads_as_one_not_as_one_of_one():
    """A repeat compared on a single key metric: "its one key metric", never "1 of the 1 key metrics" (nor "0 of the
    2 metrics with a spread")."""
    main = _result([70, 71, 69], [1400, 1410, 1390])
    moved = _result([72, 73, 71], [700, 705, 695], run_id="rep")
    df = stability.compare(main, moved)
    one = df[df["metric"] == "sequential read, cold"]
    text = stability.sentence(main, moved, one)
    assert "its one key metric moved by more than 10%" in text and "1 of the 1" not in text, text
    assert "The one metric with a spread moved by more than" in text and "largest change" not in text, text
    still = stability.sentence(main, main, stability.compare(main, main)[lambda d: d["metric"] == "random read, cold"])
    assert "its one key metric read the same in both runs" in still and "0%" not in still, still
    near = _result([70.5, 71, 69], [1400, 1410, 1390], run_id="near")
    text = stability.sentence(main, near, stability.compare(main, near)[lambda d: d["metric"] == "random read, cold"])
    assert "its one key metric, random read, cold, moved by +0.2" in text, text
    two = df[df["within_spread"].notna()]
    if (two["within_spread"] == False).all() and len(two) > 1:  # noqa: E712
        assert "No metric of the" in stability.sentence(main, moved, two)


def test_a_host_kept_for_some_chapters_says_which_it_holds(tmp_path, monkeypatch):
    """The 4-GPU hosts' folders hold chapters 8 and 11 only; the page said "The reference results of the 11
    chapters that run on one GPU come from one run, but not all of them with a time … Chapters 1–7, 9, 10 and 12
    have no time", and that chapter 11 "ran apart" on the very host of that run."""
    monkeypatch.setattr(results, "REFERENCE_DIR", tmp_path)
    _timed_reference(tmp_path, {8: 500.0, 11: 300.0}, runs={8: "multi"}, only={8, 11}, gpus=4)
    text = stability.time_sentence(stability.run_times("h200"))
    assert text.startswith(f"This host's reference holds chapter 8 of {_one_gpu_chapters()}, from run multi")
    assert "Chapter 8 took 500 s" in text and "no time with status ok" not in text
    assert text.endswith("Chapter 11, which needs two or more GPUs, ran in the same run: 300 s (5 minutes).")


def test_the_lead_names_a_multi_gpu_host_whole():
    """Repeats on other machines of a 4-GPU host's kind: the lead read "another  × H200 host" (the label's first
    three characters cut off as if it began with "an ")."""
    a = {"host": "x", "host_id": "aaa", "boot_id": "b1", "gpu": "H200", "label": "a 4 × H200 host (64 cores)"}
    b = {**a, "host_id": "bbb", "boot_id": "b2"}
    assert stability._hosts(a, b)[1] == "Every repeat ran on another 4 × H200 host (64 cores) than its reference."


def test_a_signed_gain_changes_in_points_and_two_metrics_read_as_both():
    """A gain that turned a loss (25% faster, then 13% slower) changed by −38 points, not by "−153%" of itself; two
    metrics with a spread read "both", never "All 2"."""
    df = pd.DataFrame([dict(metric="gain", change_pct=-38.3, change_in="points", within_spread=False),
                       dict(metric="rate", change_pct=2.0, change_in="%", within_spread=True)])
    assert stability._signed(-38.3, "points") == "−38.3 points" and stability._signed(13.8) == "+13.8%"
    main = _result([70, 71, 69], [1400, 1410, 1390])
    text = stability.sentence(main, main, df)
    assert "−38.3 points" in text and "153" not in text
    df["within_spread"] = True
    assert "Both metrics with a spread moved by no more than" in stability.sentence(main, main, df)


def test_each_reference_host_is_headed_by_its_hardware_not_its_folder_key():
    from datajourney.core import results

    for host in results.reference_hosts():
        heading = stability.host_heading(host)
        assert heading[0].isupper() and " host (" in heading and host not in heading, (host, heading)
    from datajourney.core.paths import REPO_ROOT

    assert "stability.host_heading(host)" in (REPO_ROOT / "book" / "reference_runs.ipynb").read_text()
