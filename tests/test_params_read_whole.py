"""A parameter's default lives in one place, its chapter's ``Params``: code reads the value a run used with
``Params.value_of(result, name)`` (as stored, else the declared default), never with a literal fallback that
restates the default (``p["batch_size"] if "batch_size" in p else 64``, ``p.get("seed", 0)``, ``x or 2``)."""
import ast

import pytest

from datajourney.book import registry
from datajourney.core.results import Result

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters


def _reads(node: ast.AST) -> set[str]:
    """The names ``node`` reads a value under: ``x["name"]``, ``x.name``, ``x.get("name")``."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
            out.add(n.slice.value)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args
              and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)):
            out.add(n.args[0].value)
    return out


def _same(literal, default) -> bool:
    return type(literal) is type(default) and literal == default


def literal_fallbacks(source: str, defaults: dict) -> list[str]:
    """Each place in ``source`` where a parameter's value falls back to a literal equal to its declared default:
    ``<reads name> if ... else <default>``, ``<reads name> or <default>`` and ``.get("name", <default>)``."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.IfExp) and isinstance(n.orelse, ast.Constant):
            pairs = [(name, n.orelse.value) for name in _reads(n.body)]
        elif isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and isinstance(n.values[-1], ast.Constant):
            pairs = [(name, n.values[-1].value) for v in n.values[:-1] for name in _reads(v)]
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
              and len(n.args) == 2 and isinstance(n.args[0], ast.Constant) and isinstance(n.args[1], ast.Constant)):
            pairs = [(n.args[0].value, n.args[1].value)]
        else:
            continue
        hits = [name for name, lit in pairs if name in defaults and _same(lit, defaults[name])
                and lit is not None and not isinstance(lit, bool)]
        if hits:
            found.append(f"line {n.lineno}: {ast.unparse(n)[:100]} (the default of {hits[0]})")
    return found


@pytest.mark.parametrize("ch", registry.CHAPTERS, ids=lambda c: c.name)
def test_no_literal_fallback_restates_a_default(ch):
    defaults = ch.params.defaults()
    folder = registry.CHAPTER_DIR / ch.package.rsplit(".", 1)[-1]
    bad = {f.name: literal_fallbacks(f.read_text(), defaults) for f in sorted(folder.glob("*.py"))
           if f.name != "params.py"}
    assert not {k: v for k, v in bad.items() if v}, (f"{ch.name}: use Params.value_of(result, name) instead", bad)


def test_the_check_finds_each_kind_of_literal_fallback():
    defaults = {"batch_size": 64, "prefetch_factor": 2, "seed": 0, "odirect": 1}
    for line in ('b = int(p["batch_size"]) if "batch_size" in p else 64',
                 'f = res.parameters.get("prefetch_factor", 2)',
                 "s = params.seed or 0"):
        assert literal_fallbacks(line, defaults), line
    for line in ('b = int(p["batch_size"]) if "batch_size" in p else 32',   # not the default: a choice
                 "n = 2 if p.odirect else 1",                                 # a mapping, not a fallback
                 'b = Params.value_of(p, "batch_size")'):
        assert not literal_fallbacks(line, defaults), line


def test_value_of_reads_the_stored_value_else_the_declared_default():
    ch = registry.lookup("7")
    Params = ch.params
    res = Result(ch.name, "r", {"batch_size": 32}, {})
    assert Params.value_of(res, "batch_size") == 32
    assert Params.value_of(Result(ch.name, "r", {}, {}), "batch_size") == Params().batch_size
    assert Params.value_of({"batch_size": 16}, "batch_size") == 16
    with pytest.raises(KeyError, match="no parameter 'batch_sise'"):
        Params.value_of(res, "batch_sise")


def test_chapter_7_snippet_prints_the_run_s_workers_and_batch():
    """The uint8 recipe's snippet names the workers and batch size the run measured it at, not fixed numbers."""
    from datajourney.chapters.c07_full_picture import page
    from datajourney.core import results

    facts = results.load_reference("07_full_picture").facts
    c = facts["uint8_gain"]
    w = facts[c.of].setting["workers"]
    facts.data["image_workload"] = {**facts.data["image_workload"], "batch_size": 48}
    facts[c.of].setting["workers"] = w + 3
    action = page._action_uint8(facts)
    if action.snippet is None:
        pytest.skip("the reference keeps normalising in the workers: no snippet to check")
    assert f"batch_size=48, num_workers={w + 3}" in action.snippet
