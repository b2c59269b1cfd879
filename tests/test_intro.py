"""Chapter 1's front door: the key numbers and weakest links come from result files, and the
pipeline map links every hop to the chapters that measure it."""
import pytest

from datajourney.book import harness, registry
from datajourney.book import overview as front
from datajourney.book import overview as intro
from datajourney.chapters.c12_conclusion import experiment as diagnosis
from datajourney.chapters.c12_conclusion import page as dpage
from datajourney.core import phrasing, results
from datajourney.core.facts import host_label

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

REF = results.REFERENCE_DIR / "h200"


def test_every_chapter_2_to_11_measures_a_hop():
    measured = {n for _, _, chapters in intro.HOPS for n in chapters}
    assert measured == set(range(2, 12))
    table = front.hops_markdown()
    for n in range(2, 12):
        name = registry.lookup(str(n)).name
        assert f"({name}.ipynb)" in table   # a notebook link: MyST resolves it to the chapter's page
    links = [a.text for a in intro.pipeline_map().layout.annotations if a.text and "href" in a.text]
    assert len(links) == len(intro.HOPS)
    assert all(f'href="{registry.lookup(str(n)).name}.html"' in "".join(links) for n in measured)


def test_front_table_shows_the_reference_facts():
    t = front.front_table(None, "h200", is_reference_run=True)
    assert list(t.columns) == ["chapter", "key number", "published", "reference host"]
    assert [c for c, _, _ in front.front()] == list(registry.sources(diagnosis.CHAPTER))
    for row, (ch, key, _) in zip(t.itertuples(), front.front()):
        if results.load_reference(ch) is None:  # a chapter with no committed reference yet
            assert row._4 == "not in the reference run"
            continue
        facts = registry.analysed(results.load_reference(ch)).facts
        if key.startswith("?"):  # a question: the chapter's verdict, as chapter 12's checklist words it
            assert row._4 == phrasing.verdict(facts.advice_for(key[1:]), facts), (ch, key)
        else:
            assert row._4 == phrasing.headline(facts.get(key)), (ch, key)
        assert row._4 != "not in the reference run"
    published = t.set_index(t["chapter"].str.extract(r"\((\d\d)_")[0])["published"]
    assert published["02"] == "20.2×" and published["04"] == "—"   # chapter 4's key number has no source figure


def test_this_run_column_follows_its_results(tmp_path):
    """A run directory with chapter 9's result, its paths to GPU memory twice as fast: the column
    shows that run's own number, and the chapters it lacks as not run."""
    r = results.Result.load(REF / "09_reading_smarter.json")
    r.tables["gpu"]["GBps"] *= 2
    if "gpu_sweep" in r.tables:
        r.tables["gpu_sweep"]["GBps"] *= 2
    r.facts = None  # its stored facts describe the committed measurements, not these
    r.save(tmp_path)
    t = front.front_table(tmp_path, "h200")
    mine = t["this run"].tolist()
    ours = front._headline(r, "09_reading_smarter", "to_gpu")
    assert mine[7] == ours and ours != t["reference host"].iloc[7]
    assert all(v == "not run" for i, v in enumerate(mine) if i != 7)
    md = front.front_markdown(tmp_path, "h200")
    assert "The reference host" in md and "Your run" not in md
    assert "| chapter | key number | published | reference host | this run |" in md


def test_a_fresh_run_says_where_its_numbers_will_be(tmp_path):
    md = front.front_markdown(tmp_path, "h200")
    assert "this run" not in front.front_table(tmp_path, "h200").columns
    assert "have not run yet" in md and "(12_conclusion.ipynb)" in md
    assert "have not run yet" not in front.front_markdown(tmp_path, "h200", is_reference_run=True)


def _diagnosed(tmp_path, slow_files: bool):
    for ch in (c for c in registry.sources(diagnosis.CHAPTER) if (REF / f"{c}.json").is_file()):
        r = results.Result.load(REF / f"{ch}.json")
        if slow_files and ch == "02_random_vs_sequential":
            t = r.tables["size_sweep"]
            t.loc[t["pattern"] == "random", "MBps"] /= 1000
        r.facts = registry.lookup(ch).analyse(r)
        r.save(tmp_path)
    return harness.run(diagnosis.CHAPTER, run_dir=tmp_path, llm_tokens_per_s=1e6)


def test_the_readers_run_comes_first(tmp_path):
    """The front door and the title page of a reader's book open with that run's answer, headed with its
    host, then the reference host's; the answer is chapter 12's own wording (here with storage 1,000×
    slower, so the remedy is chapter 2's)."""
    mine = _diagnosed(tmp_path, slow_files=True)
    host = host_label(mine.fingerprint)
    for md in (front.front_door(tmp_path, "h200"), front.title_markdown("h200", run_dir=tmp_path)):
        assert md.index(f"**Your run, {host}**") < md.index("**The reference host, ")
        assert "02_random_vs_sequential.ipynb)" in md
        for f in dpage.opening(mine.facts).findings:
            assert f.text in md


def test_title_page_of_the_committed_book(tmp_path):
    """The committed book's title page: the reference host's answer (chapter 12's opening, computed from
    its committed result) and the key numbers of chapters 2 and 5, each linking to its chapter."""
    md = front.title_markdown("h200")
    assert "Your run" not in md and "**The reference host, " in md
    ref12 = registry.analysed(results.load_reference(diagnosis.CHAPTER))
    for f in dpage.opening(ref12.facts).findings:
        assert f.text in md
    cold = front._headline(results.load_reference("02_random_vs_sequential"), "02_random_vs_sequential", "cold_gap")
    assert f"**{cold}**" in md and "](../notebooks/02_random_vs_sequential.ipynb)" in md


def test_front_door_names_guest_cold_and_marks_unlike_published_figures():
    """The title page names chapter 2's cold reads as chapter 2 does (guest-cold, or its label where its latency
    check could not tell); chapter 1's table shows chapter 5's reproduced published figure (same unit as its
    headline) and marks chapter 10's as not comparable."""
    from datajourney.book import overview, registry
    from datajourney.core import results

    data = registry.analysed(results.load_reference("02_random_vs_sequential", "h200")).facts.data
    title = overview.title_markdown("h200")
    assert ("guest-cold" in title) == (data.get("guest_cold") is True)
    assert data.get("guest_cold") is True or data.get("cold_label", "cold") in title
    t = overview.front_table(None, "h200", True)
    pub = dict(zip(t["chapter"].str.extract(r"\[(\d+)\.")[0].astype(int), t["published"], strict=True))
    assert pub[5] != "—" and "42.4×" in pub[5]
    assert "not comparable" in pub[10]
