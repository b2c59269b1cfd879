"""Chapter 1's front door: the key numbers and weakest links come from result files, and the
pipeline map links every hop to the chapters that measure it."""
from datajourney.book import overview as front
from datajourney.book import overview as intro
from datajourney.chapters.c12_conclusion import experiment as diagnosis
from datajourney.core import results

REF = results.REFERENCE_DIR / "h200"


def test_every_chapter_2_to_11_measures_a_hop():
    measured = {n for _, _, chapters in intro.HOPS for n in chapters}
    assert measured == set(range(2, 12))
    table = front.hops_markdown()
    for n in range(2, 12):
        name = [c for c in diagnosis.SOURCES if int(c[:2]) == n][0]
        assert f"({name}.html)" in table
    links = [a.text for a in intro.pipeline_map().layout.annotations if a.text and "href" in a.text]
    assert len(links) == len(intro.HOPS)
    assert all(f'href="{c}.html"' in "".join(links) for c in diagnosis.SOURCES)


def test_front_table_shows_the_reference_headlines():
    t = front.front_table(None, "h200", is_reference_run=True)
    assert list(t.columns) == ["chapter", "key number", "reference host"]
    assert [int(c[:2]) for c, _, _ in front.FRONT] == list(range(2, 12))
    for row, (ch, key, _) in zip(t.itertuples(), front.FRONT):
        assert row._3 == front._headline(results.load_reference(ch), ch, key)
        assert row._3 != "not in the reference run"


def test_this_run_column_follows_its_results(tmp_path):
    """A run directory with chapter 9's result, its paths to GPU memory twice as fast: the column
    shows that run's own number, and the chapters it lacks as not run."""
    r = results.Result.load(REF / "09_reading_smarter.json")
    r.tables["gpu"]["GBps"] *= 2
    r.save(tmp_path)
    t = front.front_table(tmp_path, "h200")
    mine = t["this run"].tolist()
    ours = front._headline(r, "09_reading_smarter", "to_gpu")
    assert mine[7] == ours and ours != t["reference host"].iloc[7]
    assert all(v == "not run" for i, v in enumerate(mine) if i != 7)
    md = front.front_markdown(tmp_path, "h200")
    assert "Weakest links on the reference host" in md and "Weakest links on this run" in md
    assert "not run, so not diagnosed: chapters 2, 3, 4, 5, 6, 7, 8, 10, 11" in md


def test_a_fresh_run_says_where_its_numbers_will_be(tmp_path):
    md = front.front_markdown(tmp_path, "h200")
    assert "this run" not in front.front_table(tmp_path, "h200").columns
    assert "have not run yet" in md and "(12_conclusion.html)" in md
    assert "have not run yet" not in front.front_markdown(tmp_path, "h200", is_reference_run=True)


def test_reference_weakest_links_match_chapter_12(tmp_path):
    """The front door's weakest links are chapter 12's, computed from the same reference files."""
    for ch in diagnosis.SOURCES:
        results.Result.load(REF / f"{ch}.json").save(tmp_path)
    res = diagnosis.run(run_dir=tmp_path)
    md = front.front_door(None, "h200", is_reference_run=True)
    for line in res.metadata["summary"]:
        assert line in md
