"""The book builds with warnings as errors, serves plotly.js itself, and a re-run touches no tracked file."""
import re
from pathlib import Path

import pytest
from conftest import tracked_digest as _tracked_digest

from datajourney.book import sphinx_ext
from datajourney.chapters import registry as chapters

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


def test_reference_book_builds_strictly(tmp_path):
    _check_html(sphinx_ext.build(None, path_output=tmp_path).parent)


def test_rerun_modifies_no_tracked_file(run_book, tracked_before):
    assert tracked_before == _tracked_digest()
