"""One harness runs every chapter (datajourney.book.harness): the experiments only measure, and the harness
checks once, starts, analyses and saves."""
import ast
import inspect

import pytest

from datajourney.book import harness, registry
from datajourney.core import results

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters


def test_every_experiment_only_measures():
    """No experiment starts, analyses or saves a result itself, or keeps a run() of its own: it has
    preflight and measure(plan, context), and the harness does the rest."""
    for ch in registry.CHAPTERS:
        exp = ch.piece("experiment")
        assert callable(exp.measure) and not hasattr(exp, "run"), ch.name
        assert list(inspect.signature(exp.measure).parameters)[1:] == ["context"], ch.name
        tree = ast.parse(inspect.getsource(exp))
        calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert not {c for c in calls if c in ("results.start", "res.save") or c.endswith("analyse")}, ch.name


def test_the_harness_checks_once_measures_analyses_and_saves(tmp_path, monkeypatch):
    ch = registry.lookup("1")
    exp = ch.piece("experiment")
    checked = []
    real = exp.preflight
    monkeypatch.setattr(exp, "preflight", lambda p: checked.append(p) or real(p))
    res = harness.run("1", run_dir=tmp_path, data_dir=str(tmp_path))
    assert len(checked) == 1
    saved = results.Result.load(tmp_path / "01_introduction.json")
    assert saved.parameters["data_dir"] == str(tmp_path) and "machine" in saved.tables
    assert saved.facts is not None
    assert saved.facts.to_dict() == ch.analyse(saved).to_dict() == res.facts.to_dict()


def test_a_replayed_chapter_12_is_gathered_again_from_its_run_directory(tmp_path):
    """Chapter 12's replayed result takes the facts of the results beside it as they are now, and keeps
    its creation time (rendered, not measured)."""
    ref = results.REFERENCE_DIR / "h200"
    for name in ("12_conclusion", "07_full_picture"):
        (tmp_path / f"{name}.json").write_bytes((ref / f"{name}.json").read_bytes())
    res = results.Result.load(tmp_path / "12_conclusion.json")
    created = res.created_utc
    out = harness.regather(res, tmp_path)
    assert out.metadata["found"] == ["07_full_picture"]
    again = results.Result.load(tmp_path / "12_conclusion.json")
    assert again.created_utc == created and again.metadata["found"] == ["07_full_picture"]
    assert again.facts.to_dict() == registry.lookup("12").analyse(again).to_dict()
