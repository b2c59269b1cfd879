"""One rule for what "cold" means in a run (datajourney.chapters.common.cold_verdict): a band around the
flash floor where the answer is "cannot tell", chapter 2's check used by the other chapters of the same
run, and chapters 2 and 3 naming the same data alike."""
import pandas as pd
import pytest

from datajourney.chapters import common
from datajourney.chapters.c02_random_vs_sequential import analysis as analysis2
from datajourney.chapters.c02_random_vs_sequential import page as page2
from datajourney.chapters.c03_dataloader import page as page3
from datajourney.core.results import Result


def _latency(medians):
    rows = []
    for run, m in enumerate(medians):
        for series, f in (("O_DIRECT, first pass", 1.0), ("O_DIRECT, second pass", 1.0), ("page cache (warm)", 0.05)):
            rows.append(dict(series=series, run=run, reads=1000, request_bytes=4096, p10_us=0.9 * m * f,
                             p50_us=m * f, p90_us=1.2 * m * f, p99_us=2 * m * f, max_us=9 * m * f, error=None))
    return pd.DataFrame(rows)


def _result(chapter, medians, hypervisor=True, run_id="run-a"):
    return Result(chapter, run_id, {}, {"cpu": {"hypervisor": hypervisor}}, {"latency": _latency(medians)})


def test_medians_straddling_the_floor_cannot_tell():
    # one run just above the floor, the others just below: the old bare threshold said guest-cold
    r = _result(common.STORAGE_CHAPTER, [34.2, 40.3, 36.0])
    v = common.cold_verdict(r)
    assert v.state == "undecided"
    assert common.cold_label(r) == "cold"   # the label says just "cold"; a page qualifies its first use once
    assert common.guest_cold(r) is None
    assert "cannot tell" in v.sentence()


def test_clearly_below_is_guest_cold_and_clearly_above_is_the_device():
    low = _result(common.STORAGE_CHAPTER, [22.0, 25.7, 24.2])
    assert common.cold_verdict(low).state == "cache" and common.cold_label(low) == "guest-cold"
    assert common.guest_cold(low) is True
    high = _result(common.STORAGE_CHAPTER, [68.0, 72.0, 60.0])
    assert common.cold_verdict(high).state == "device" and common.cold_label(high) == "cold"
    assert common.guest_cold(high) is False
    bare = _result(common.STORAGE_CHAPTER, [15.0], hypervisor=False)   # fast, but no virtual machine
    assert common.cold_verdict(bare).state == "cache" and common.cold_label(bare) == "cold"


@pytest.mark.parametrize("medians", [[24.0, 26.0], [38.0, 41.0, 44.0], [70.0, 80.0]])
def test_chapters_2_and_3_label_the_same_data_the_same_way(medians):
    r2 = _result(common.STORAGE_CHAPTER, medians)
    r3 = _result("03_dataloader", medians)
    assert common.cold_label(r2) == common.cold_label(r3)
    rule = common.cold_verdict(r2).sentence(head=False)
    assert rule in page2.latency_note(analysis2.analyse(r2)) and rule in page3.latency_note(r3)


def test_chapter_3_follows_chapter_2_of_the_same_run(tmp_path):
    """Chapter 3's own check fell inside the band; chapter 2's, in the same run, clearly below it: chapter 3
    uses chapter 2's exported verdict (its stored facts, never its tables) and says so. A chapter 2 result of
    another run is not used, nor one without stored facts."""
    r2 = _result(common.STORAGE_CHAPTER, [22.0, 23.0, 24.0])
    r2.save(tmp_path)
    r3 = _result("03_dataloader", [68.0, 40.0])
    r3.save(tmp_path)
    assert common.cold_verdict(r3).source == "this chapter's latency check"  # chapter 2's tables are not read
    r2.facts = analysis2.analyse(r2)
    r2.save(tmp_path)
    v = common.cold_verdict(r3)
    assert v.state == "cache" and v.source.startswith("chapter 2") and common.cold_label(r3) == "guest-cold"
    assert "chapter 2's latency check in this run" in page3.latency_note(r3)
    other = _result("03_dataloader", [68.0, 40.0], run_id="run-b")
    other.save(tmp_path / "b")
    (tmp_path / "b" / f"{common.STORAGE_CHAPTER}.json").write_bytes((tmp_path / f"{common.STORAGE_CHAPTER}.json")
                                                                     .read_bytes())
    assert common.cold_verdict(other).source == "this chapter's latency check"
    assert common.cold_verdict(other).state == "undecided" and common.cold_label(other) == "cold"


def test_ranges_need_three_runs():
    assert common.over_runs(10.6, 12.4, 2) == "2 runs" and common.runs_interval(10.6, 12.4, 2) is None
    assert common.over_runs(10.6, 12.4, 3) == "10.6–12.4× over 3 runs"
    assert common.runs_interval(10.6, 12.4, 3) == (10.6, 12.4)


def _sections(path):
    """A notebook's text by section (its markdown headings), outputs included: (heading, text) pairs."""
    import json
    import re

    nb, out, heading = json.loads(path.read_text()), [], "top"
    for c in nb["cells"]:
        src = "".join(c.get("source", []))
        m = re.search(r"^#{1,6} (.+)$", src, re.M) if c["cell_type"] == "markdown" else None
        if m:
            heading = m.group(1)
            out.append((heading, ""))
        texts = [src] + ["".join(v) if isinstance(v, list) else str(v) for o in c.get("outputs", [])
                         for v in [*(o.get("data") or {}).values(), o.get("text", "")]]
        out.append((heading, "\n".join(texts)))
    by = {}
    for h, t in out:
        by[h] = by.get(h, "") + "\n" + t
    return by


def test_no_committed_page_repeats_what_cold_means():
    """Chapter 2's first finding read "One shard read in order, cold (device or host cache: cannot tell) ran 6.2×
    faster than 10,000 shuffled files of 16 KiB, cold (device or host cache: cannot tell)", 87 times over the book:
    the rendered pages say it at most once a section."""
    from datajourney.core import phrasing
    from datajourney.core.paths import REPO_ROOT

    qualifier = phrasing.UNDECIDED_COLD[4:]
    pages = [*sorted((REPO_ROOT / "notebooks").glob("*.ipynb")), *sorted((REPO_ROOT / "book").glob("*.ipynb"))]
    assert pages
    over = {(p.name, h): n for p in pages for h, t in _sections(p).items() if (n := t.count(qualifier)) > 1}
    assert not over, over


def test_a_reference_run_is_one_run_for_the_cold_verdict(tmp_path):
    """A reference run runs each chapter apart (run ids ``<run>-<NN>-<k>``): its chapters still follow chapter 2's
    verdict, as a reader's one-process run does; a chapter of another reference run does not. Chapter 9 says whose
    check gave the verdict and what its own said (here: inside the band, so alone it cannot tell)."""
    from datajourney.chapters.c09_reading_smarter import analysis as analysis9
    from datajourney.chapters.c09_reading_smarter import page as page9

    assert common.run_of("reference-h200-20261128-202402-03-1") == "reference-h200-20261128-202402"
    assert common.run_of("20261128-202402-quick") == "20261128-202402-quick"
    r2 = _result(common.STORAGE_CHAPTER, [22.0, 23.0, 24.0], run_id="reference-h200-20261128-202402-02-1")
    r2.facts = analysis2.analyse(r2)
    r2.save(tmp_path)
    r9 = _result("09_reading_smarter", [25.0, 33.0], run_id="reference-h200-20261128-202402-09-2")
    r9.save(tmp_path)
    assert common.cold_verdict(r9).source.startswith("chapter 2") and common.cold_verdict(r9).state == "cache"
    f9 = analysis9.analyse(r9)
    assert f9["virtual_disk_verdict"].value == "cache below"
    text = next(x.text for x in page9.findings(f9) if x.key == "virtual_disk")
    assert "comes from chapter 2's latency check in this run" in text and "alone cannot tell" in text
    r9.run_id = "reference-h200-20261129-101010-09-1"    # another reference run: its own check decides
    r9.save(tmp_path)
    assert common.cold_verdict(r9).source == "this chapter's latency check"
    text = next(x.text for x in page9.findings(analysis9.analyse(r9)) if x.key == "virtual_disk")
    assert "this chapter's own latency check: not every run's median lies clear of" in text
