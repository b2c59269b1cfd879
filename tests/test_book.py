"""The book builds with warnings as errors, serves plotly.js itself, and a re-run touches no tracked file."""
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import tracked_digest as _tracked_digest

from datajourney.book import registry as chapters
from datajourney.book import sphinx_ext

pytestmark = pytest.mark.book


def _check_html(html: Path):
    assert (html / "_static" / "plotly.min.js").stat().st_size > 1_000_000
    for ch in chapters.available():
        page = (html / "notebooks" / f"{ch.name}.html").read_text()
        assert 'src="../_static/plotly.min.js' in page
        external = re.findall(r'<script[^>]+src="(https?://[^"]+)"', page)
        assert not external, f"{ch.name} loads scripts from the network: {external}"
        assert "Plotly.newPlot" in page, f"{ch.name} has no chart"
        assert "application/vnd.plotly.v1+json" not in page


def test_run_book_builds_strictly(run_book):
    _check_html(run_book)
    page = (run_book / "notebooks" / "02_random_vs_sequential.html").read_text()
    assert "Published figure" in page and "70.39" in page  # the three columns are there


def test_reference_book_builds_strictly(reference_book):
    """The reference book builds with warnings as errors; built again into the same folder, the title page
    (computed from result files on every build) is computed again, not kept from the earlier build."""
    _check_html(reference_book)
    title = reference_book / "book" / "index.html"
    title.write_text(title.read_text().replace("What it found", "What an earlier build found"))
    assert sphinx_ext.build(None, path_output=reference_book.parents[1]).parent == reference_book
    assert "What an earlier build found" not in title.read_text()
    _check_html(reference_book)   # the session's reference book, whole again for the tests after this one


def test_rerun_modifies_no_tracked_file(run_book, tracked_before):
    assert tracked_before == _tracked_digest()


def test_every_module_the_book_names_imports():
    """A module path the book's prose or snippets name (``datajourney.toolkit.pagecache``, ``from
    datajourney.toolkit import pagecache``) is one a reader can import."""
    import importlib
    import json
    import re

    from datajourney.core.paths import REPO_ROOT

    texts = [p.read_text() for p in (REPO_ROOT / "book").glob("*.md")] + [(REPO_ROOT / "README.md").read_text()]
    for nb in [*(REPO_ROOT / "notebooks").glob("*.ipynb"), *(REPO_ROOT / "book").glob("*.ipynb")]:
        for cell in json.loads(nb.read_text())["cells"]:
            texts.append("".join(cell["source"]))
            for out in cell.get("outputs", []):
                texts.append("".join((out.get("data") or {}).get("text/markdown", "")))
    named = set()
    for t in texts:
        named |= set(re.findall(r"`(datajourney(?:\.[a-z_0-9]+)+)`", t))
        named |= {f"{m}.{n}" for m, n in re.findall(r"from (datajourney(?:\.[a-z_0-9]+)*) import ([a-z_0-9]+)", t)}
    assert len(named) > 5
    missing = []
    for name in sorted(named):
        try:
            importlib.import_module(name)
        except ImportError:
            mod, _, attr = name.rpartition(".")
            try:
                if not hasattr(importlib.import_module(mod), attr):
                    missing.append(name)
            except ImportError:
                missing.append(name)
    assert not missing, missing


def test_a_table_wider_than_the_text_column_is_shown_in_parts_that_fit():
    """Chapter 8's loaders table (13 columns) was 1,131 px in an 848 px column, its memory columns out of
    sight: it is shown in parts, each with the columns that tell its rows apart first, none wider than the
    column at its narrowest; a narrow table stays one table; text is left-aligned, numbers right-aligned."""
    from datajourney.book import report
    from datajourney.chapters.c08_threads_processes_gil import page
    from datajourney.core import results

    wide = page.loader_table(results.load_reference("08_threads_processes_gil", "h200"))
    parts = report.column_parts(wide)
    cols = list(wide.columns)   # the key columns: the fewest leading ones that tell the rows apart
    keys = cols[:next(i for i in range(1, len(cols)) if not wide[cols[:i]].astype(str).duplicated().any())]
    assert keys[0] == "loader" and len(parts) >= 2 and all(p[:len(keys)] == keys for p in parts)
    assert [c for p in parts for c in p[len(keys):]] == [c for c in cols if c not in keys]   # each column once
    narrowest = [sum(report._min_px(str(c), [report._cell(v) for v in wide[c]]) for c in p) for p in parts]
    assert max(narrowest) <= report.COLUMN_PX
    html = report.table_html(wide, "Loaders")
    assert html.count("<table") == len(parts) and html.count("Loaders (continued)") == len(parts) - 1
    long = report.table_html(wide, "Loaders (means of the runs): throughput")   # a part after the first: the head
    assert long.count("Loaders (continued)") == len(parts) - 1
    assert html.count("PSS added (MB)") == 1 and "white-space: normal" in html
    small = pd.DataFrame({"loader": ["a", "b"], "images/s": [1.0, 2.0]})
    one = report.table_html(small)
    assert one.count("<table") == 1 and "text-align: left" in one


def test_every_part_of_a_split_table_names_its_rows():
    """The reference-runs appendix's key-metric table was split with only "chapter" repeated: its "(continued)"
    part could be read only by counting rows. Every part starts with the columns that tell the rows apart; where
    those leave no room, or none do, with the rows' numbers (report.ROW)."""
    from datajourney.book import report, stability

    keyed = stability.section()[0]
    keys = ["chapter", "repeat run", "metric"]
    assert not keyed[keys].astype(str).duplicated().any()
    assert all(p[:3] == keys for p in report.column_parts(keyed)), report.column_parts(keyed)
    narrow = report.column_parts(keyed, width=560)   # the same table in a narrower column: split, keys in each
    assert len(narrow) >= 2 and all(p[:3] == keys for p in narrow), narrow
    n = 4
    # text cells: a number the same in every row would be said once, in the caption
    wide_keys = pd.DataFrame({"run": [f"{'x' * 80}{i}" for i in range(n)],
                              **{f"measure number {k}": ["1,234.5"] * n for k in range(8)}})
    same = pd.DataFrame({"kind": ["a"] * n, **{f"measure number {k}": ["1,234.5"] * n for k in range(10)}})
    for df in (wide_keys, same):   # keys too wide to repeat beside a column; no leading columns unique
        parts = report.column_parts(df)
        assert len(parts) >= 2 and all(p[0] == report.ROW for p in parts), parts
        html = report.table_html(df, "T")
        assert html.count(f">{report.ROW}</th>") == html.count("<table") == len(parts)
        assert html.count(">4</td>") == len(parts)   # the last row's number, in every part


def test_the_methodology_states_chapter_8s_window_factor_as_the_profiles_set_it():
    """The methodology page names the window factor of the profiles it mentions: each "N in `profile`" it states is
    that profile's value (a page once said 4 where the full profile set 2)."""
    from datajourney.book import runner
    from datajourney.core.paths import REPO_ROOT

    text = (REPO_ROOT / "book" / "methodology.md").read_text()
    part = text[text.index("`window_factor` times"):][:300]
    stated = re.findall(r"(\d+) in `(\w+)`", part)
    assert stated, part
    for value, profile in stated:
        assert runner.profiles()[profile]["08_threads_processes_gil"]["window_factor"] == int(value), (profile, part)
