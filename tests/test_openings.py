"""Every chapter opens with at most three one-sentence findings and "What to do", computed from the
run: checked on the committed reference results, on reversed data, and in the notebooks."""
import re

import nbformat
import pytest

from datajourney.book import registry
from datajourney.core import phrasing as fx
from datajourney.core import results

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

#: the chapters that open with findings and actions (chapter 1 opens with the front door instead)
MEASURING = [c for c in registry.available() if c.name != "01_introduction"]
ONE_SENTENCE = re.compile(r"[.!?]\*{0,2}\s+\*{0,2}[A-Z]")   # a second sentence starts after an end mark


def _opening(ch):
    import importlib

    return importlib.import_module(ch.page).opening


@pytest.mark.parametrize("ch", MEASURING, ids=lambda c: c.name)
def test_opening_of_the_reference_run_is_short(ch):
    ref = results.load_reference(ch.name)
    if ref is None and not list(results.REFERENCE_DIR.glob(f"*/{ch.name}.json")):  # tests/test_new_chapter.py
        pytest.skip(f"{ch.name} is new: no host has a committed reference result of it yet")   # runs its opening
    op = _opening(ch)(registry.analysed(ref).facts)
    assert 1 <= len(op.findings) <= fx.OPENING_FINDINGS, ch.name
    for f in op.findings:
        assert fx.words(f.text) <= fx.OPENING_WORDS, (ch.name, fx.words(f.text), f.text)
        assert not ONE_SENTENCE.search(f.text), (ch.name, "more than one sentence", f.text)
        assert f.value is not None, (ch.name, f.key)
    assert 1 <= len(op.actions) <= 3, ch.name
    for a in op.actions:
        assert a.text and fx.words(a.text) <= 60, (ch.name, a.text)


@pytest.mark.parametrize("ch", MEASURING, ids=lambda c: c.name)
def test_notebook_opens_with_the_opening_and_folds_its_parameters(ch):
    nb = nbformat.read(ch.notebook, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    setup = next(i for i, s in enumerate(code) if re.search(r"^res = ", s, re.M))
    shown = next(i for i, s in enumerate(code) if "opening.show(page" in s)
    assert shown == setup + 1, f"{ch.name}: the opening is not the first thing the page shows"
    assert code[-1].strip() == "report.parameters(res, folded=True)", ch.name


def test_chapter_2_opening_follows_reversed_data():
    """Swap the two layouts' measurements: the cold finding turns from faster to slower and the advice
    from "use shards" to "keep the layout"."""
    from datajourney.chapters.c02_random_vs_sequential import page

    ref = results.load_reference("02_random_vs_sequential")
    op = page.opening(ref)
    assert "faster than" in op.findings[0].text and "one shard read in order" in op.actions[0].text
    h = ref.table("headline").copy()
    h["pattern"] = h["pattern"].map({"random": "sequential", "sequential": "random"})
    rev = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, "headline": h},
                         ref.metadata)
    op = page.opening(rev)
    assert "slower than" in op.findings[0].text and op.findings[0].value < 1
    assert "one file per sample" in op.actions[0].text and "slower" not in op.actions[0].text


def test_an_opening_that_would_not_fit_the_first_screen_moves_findings_and_details_below(monkeypatch):
    """Findings past the opening's length budget, the reference host's values, each action's later sentences and its
    code leave the first screen for folded blocks under it, and nothing is lost: each one is still on the page."""
    from datajourney.book import opening
    from datajourney.core.facts import Facts

    long = "word " * 60
    op = fx.Opening([fx.Finding(f"k{i}", f"Finding {i}: {long}ran **{i}× faster**.", float(i), "×") for i in (1, 2, 3)],
                    [fx.Action(f"Use setting {i}: {long}faster. It has a cost {i}.", f"x = {i}") for i in (1, 2, 3)])

    class Page:
        @staticmethod
        def opening(facts):
            return op

        @staticmethod
        def findings(facts):
            return op.findings[2:]

    res = results.Result(chapter="07_full_picture", run_id="r", parameters={}, fingerprint={})
    res.facts = Facts("07_full_picture")
    md = opening.markdown(Page, res)
    head, folded = md.split("<details>")
    assert "Finding 1" in head and "Finding 2" not in head and "Finding 3" not in head
    leads = [opening.first_sentence(a.text)[0] for a in op.actions]
    assert sum(map(opening.lines, [op.findings[0].text, *leads])) > opening.OPENING_LINES  # shown even so
    assert [re.search(rf"^{i}\. Use setting {i}:", head, re.M) is not None for i in (1, 2, 3)] == [True] * 3
    assert "It has a cost" not in head and "x = 1" not in head
    assert all(f"It has a cost {i}." in folded and f"x = {i}" in folded for i in (1, 2, 3))
    said = []
    monkeypatch.setattr(opening.report, "say", said.append)
    opening.evidence(Page, res)
    assert all(f"Finding {i}" in said[0] for i in (1, 2, 3))   # every finding is under "How we know"


def test_a_finding_flagged_as_a_measurement_problem_stays_on_the_first_screen():
    """The opening's budget folds findings away in order, but never one that flags a measurement problem."""
    from datajourney.book import opening
    from datajourney.core.phrasing import Action, Finding, Opening

    long = "A finding that fills the screen " + "with many words " * 40 + "."
    flag = Finding("x.flagged", f"{opening.FLAG_MARK}: a measurement problem.** The rate exceeded its ceiling.")
    op = Opening([Finding("a", long), Finding("b", long), flag], [Action("Do this.")])
    keys = [f.key for f in opening.shown(op)]
    assert "x.flagged" in keys and "a" in keys and "b" not in keys


def test_the_budget_counts_wrapped_lines_and_code_spans():
    """Three two-line findings beside three three-line actions (code spans draw wider than prose) overran the first
    screen of a CPU run's chapter 9 by a line: the budget counts lines, so the last finding moves to "How we know"."""
    from datajourney.book import opening
    from datajourney.core.phrasing import Action, Finding, Opening

    finding = "Cold random 4 KiB reads from 4 threads issuing pread ran 3.2× faster than one pread thread, again."
    action = ("For cold random 4 KiB reads from one file, use `ThreadPoolExecutor(max_workers=4)`: 3.2× faster than "
              "one pread thread (the largest value measured; more may help).")
    assert opening.lines(finding) == 2 and opening.lines(action) == 3
    op = Opening([Finding(k, finding) for k in "abc"], [Action(action)] * 3)
    assert [f.key for f in opening.shown(op)] == ["a", "b"]
    assert [f.key for f in opening.shown(op, budget=15)] == ["a", "b", "c"]
