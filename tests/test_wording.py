"""Findings follow the data: number formatting, direction words, and no measured number in fixed prose."""
import importlib
import importlib.util
import json
import re

import pytest
from helpers import has_nan

from datajourney.book import registry as chapters
from datajourney.core import phrasing as findings
from datajourney.core import results
from datajourney.core.paths import REPO_ROOT
from datajourney.core.phrasing import compare
from datajourney.core.stats import direction
from datajourney.core.units import num

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

#: What a measured statement looks like in prose: a number with a unit of throughput, time, ratio or share.
MEASURED = re.compile(r"\d[\d,.]*\s*(MB/s|GB/s|GiB/s|ms\b|µs\b|img/s|images/s|steps/s|tokens/s|×(?!\d)|%)")


def test_numbers_have_no_false_precision():
    assert num(2123.19, "MB/s") == "2,123 MB/s"
    assert num(5.123, "×") == "5.1×" and num(0.9712, "×") == "0.97×" and num(1.234, "×") == "1.23×"
    assert num(76.0, "%") == "76%" and num(2.34, "%") == "2.3%" and num(98.49, "%") == "98.5%"
    assert num(0.036, "ms") == "0.036 ms" and num(float("nan")) == "—"


def test_one_quantity_side_by_side_prints_at_one_precision():
    """A whole value beside measured ones takes their decimals (chapter 4: "D = 5.00 ms" beside "D = 5.60 ms");
    values that all print whole, or of 100 and more, stay as num prints them."""
    from datajourney.core.units import alike

    assert alike([5.0, 5.6], "ms") == ["5.00 ms", "5.60 ms"]
    assert alike([40.0, 50.04], "ms") == ["40.0 ms", "50.0 ms"]
    assert alike([5.0, 7.0], "ms") == ["5 ms", "7 ms"] and alike([150.0, 5.6], "ms") == ["150 ms", "5.60 ms"]
    assert alike([None, 2.5], "ms") == ["—", "2.50 ms"]


def test_ranges_read_as_ranges():
    assert findings.span(1.21, 3.4, "ms") == "1.21–3.40 ms"
    assert findings.span(-0.033, 0.28, "ms") == "−0.033 to 0.28 ms"
    assert findings.span(20.91, 20.94, "×") == "20.9×"


def test_direction_follows_the_data_both_ways():
    assert direction(10.0, 5.0) == 1 and direction(5.0, 10.0) == -1
    assert direction(10.0, 10.2) == 0                       # within the tolerance
    assert direction([9, 10, 11], [10.5, 11, 12]) == 0      # overlapping runs: no winner
    assert direction([20, 21, 22], [10, 11, 12]) == 1
    assert compare(20.0, 10.0) == "2.0× faster than"
    assert compare(10.0, 20.0) == "2.0× slower than"
    assert compare(10.0, 10.1).startswith("level with")


def test_spread_note_only_for_a_wide_spread():
    assert findings.spread_note("x", [10, 10.5, 9.8]) is None
    note = findings.spread_note("cold sequential", [1610, 2426, 2334], "MB/s")
    assert note and "1,610–2,426 MB/s" in note


def _markdown_cells(nb_path):
    nb = json.loads(nb_path.read_text())
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] == "markdown":
            yield i, "".join(c["source"])


@pytest.mark.parametrize("chapter", [c.name for c in chapters.available()])
def test_fixed_prose_states_no_measured_number(chapter):
    """Measured outcomes are computed findings; published figures live in published.py."""
    for i, text in _markdown_cells(chapters.lookup(chapter).notebook):
        text = re.sub(r"`[^`]*`", "", text)  # code spans are code, not claims
        m = MEASURED.search(text)
        assert not m, f"{chapter} markdown cell {i} states a number: {m.group(0)!r}"


def test_book_pages_state_no_measured_number():
    for page in (REPO_ROOT / "book").glob("*.md"):
        text = re.sub(r"```.*?```|`[^`]*`", "", page.read_text(), flags=re.S)
        m = MEASURED.search(text)
        assert not m, f"{page.name} states a number: {m.group(0)!r}"
        # no leftover placeholder (an all-capitals word alone on a line, TODO, XXX)
        m = re.search(r"(?m)^[A-Z0-9_]{4,}$|\bTODO\b|\bXXX\b", text)
        assert not m, f"{page.name} has a placeholder: {m.group(0)!r}"


def _chapter_modules():
    """The chapters that measure a hop (chapter 1 records the machine only)."""
    return [c for c in chapters.available() if c.module and c.name != "01_introduction"]


@pytest.mark.parametrize("chapter", [c.name for c in _chapter_modules()])
def test_findings_of_the_reference_run(chapter):
    """Each chapter words 3-8 key results from the facts of its committed reference result."""
    ch = chapters.lookup(chapter)
    mod = importlib.import_module(ch.page if importlib.util.find_spec(ch.page) else ch.module)
    ref = results.load_reference(ch.name)
    if ref is None and not list(results.REFERENCE_DIR.glob(f"*/{ch.name}.json")):
        pytest.skip(f"{ch.name} is new: no host has a committed reference result of it yet")
    assert ref is not None
    items = mod.findings(chapters.analysed(ref).facts)
    assert 3 <= len(items) <= 8, [f.key for f in items]
    assert len({f.key for f in items}) == len(items)
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text, f


def test_a_level_pair_names_its_shared_setting_once():
    """"A ran at x and B at y, both cold: level with B, both cold: …" said the shared setting twice."""
    from datajourney.chapters.wording import pair_words
    from datajourney.core.facts import Fact, Facts, compare

    a = Fact("a", 101.0, "MB/s", "one shard, cold", "rate", "higher", 2, (95.0, 110.0))
    b = Fact("b", 100.0, "MB/s", "10,000 files, cold", "rate", "higher", 2, (90.0, 105.0))
    facts = Facts("x")
    facts.add(a, b, compare("gap", a, b))
    text = pair_words(facts, "gap")
    assert text.count("cold") == 1 and ", both cold: **level with 10,000 files**" in text
