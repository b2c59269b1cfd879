"""Cross-chapter reads go through exported facts only: chapters 3 and 7 word the cost of moving a batch between
processes from the facts chapter 8 exported (``ipc.*``), never from its ``ipc`` table, and no module of
chapters 3 or 7 reads a table that only another chapter's experiment writes."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from datajourney.chapters import common
from datajourney.chapters.c03_dataloader import page as page3
from datajourney.chapters.c07_full_picture import page as page7
from datajourney.chapters.c08_threads_processes_gil import analysis as analysis8
from datajourney.core import results
from datajourney.core.facts import Facts

CHAPTERS = Path(common.__file__).resolve().parent
IPC_KEYS = ("ipc.main_ms", "ipc.worker_ms", "ipc.extra_ms")


def _ipc_result(main_ms: float = 0.5, worker_ms: float = 4.0, analysed: bool = True) -> results.Result:
    """A chapter 8 result holding only the IPC table (two batch sizes, no worker and one), with its facts."""
    res = results.Result(chapter=common.IPC_CHAPTER, run_id="crossref", parameters={}, fingerprint={})
    res.add("ipc", [dict(batch_size=bs, workers=w, batch_bytes=bs * 150_528,
                         ms_per_batch=(main_ms if w == 0 else worker_ms) * bs / 32)
                    for bs in (32, 128) for w in (0, 1)])
    if analysed:
        res.facts = analysis8.analyse(res)
    return res


def _pointers(res: results.Result | None, tmp_path: Path) -> list[str]:
    """What chapter 3's and chapter 7's pages say about chapter 8's IPC measurement in a run holding ``res``."""
    if res is not None:
        res.save(tmp_path)
    return [page3.ipc_crossref(tmp_path, None), page7.ipc_note(tmp_path, None)]


def test_chapter_8_exports_the_ipc_facts_at_its_smallest_batch():
    f = _ipc_result(main_ms=0.5, worker_ms=4.0).facts
    assert set(IPC_KEYS) <= set(f.exports) and set(IPC_KEYS) <= set(f.facts)
    assert f.number("ipc.main_ms") == pytest.approx(0.5) and f.number("ipc.worker_ms") == pytest.approx(4.0)
    assert f.number("ipc.extra_ms") == pytest.approx(3.5)
    assert all(f[k].setting["batch_size"] == 32 for k in IPC_KEYS)
    # no IPC table (ipc_batch_sizes=[]), or no run with one worker: no ipc facts, nothing made up
    empty = results.Result(chapter=common.IPC_CHAPTER, run_id="x", parameters={}, fingerprint={})
    assert not set(IPC_KEYS) & set(analysis8.analyse(empty).facts)
    main_only = _ipc_result()
    main_only.tables["ipc"] = main_only.table("ipc").query("workers == 0")
    assert not set(IPC_KEYS) & set(analysis8.analyse(main_only).facts)


def test_chapters_3_and_7_word_the_exported_facts(tmp_path):
    for text in _pointers(_ipc_result(main_ms=0.5, worker_ms=4.25), tmp_path):
        assert "in this run, a batch of 32 images took 4.25 ms through one worker process" in text
        assert "against 0.50 ms in the main process (3.75 ms more)" in text
    for text in _pointers(_ipc_result(main_ms=6.0, worker_ms=3.0), tmp_path):   # the worker measured no cost
        assert "(no extra cost measured)" in text and "more)" not in text


@pytest.mark.parametrize("how", ["no facts stored", "facts without ipc", "ipc facts not exported"])
def test_a_chapter_8_result_without_the_ipc_facts_reads_not_measured(tmp_path, how):
    """The ``ipc`` table is in every one of these results: the pages must not fall back to reading it."""
    res = _ipc_result(analysed=how != "no facts stored")
    if how == "facts without ipc":
        res.facts = Facts(res.facts.chapter, {k: v for k, v in res.facts.facts.items() if not k.startswith("ipc.")},
                          exports=res.facts.exports)
    elif how == "ipc facts not exported":
        res.facts = dataclasses.replace(res.facts, exports=tuple(k for k in res.facts.exports if k not in IPC_KEYS))
    for text in _pointers(res, tmp_path):
        assert text.endswith("it was not measured in this run."), text
        assert " ms" not in text


def test_no_chapter_8_result_at_all(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "load_reference", lambda chapter, host=None: None)
    for text in _pointers(None, tmp_path):
        assert text.endswith("it has no result here yet.")


# --------------------------------------------------------------------------- no reads of other chapters' tables
def _table_names_written(folder: Path) -> set[str]:
    """The tables a chapter's modules write: ``x.add("name", ...)``, ``x.tables["name"] = ...``, and a dict of
    tables gathered before they are added (``tables = dict(name=...)``, ``tables["name"] = ...``)."""
    out = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                out.add(node.args[0].value)
            elif isinstance(node, ast.Assign):
                out |= {t.slice.value for t in node.targets if isinstance(t, ast.Subscript)
                        and (getattr(t.value, "attr", None) == "tables" or getattr(t.value, "id", None) == "tables")
                        and isinstance(t.slice, ast.Constant)}
                if (any(getattr(t, "id", None) == "tables" for t in node.targets) and isinstance(node.value, ast.Call)
                        and getattr(node.value.func, "id", None) == "dict"):
                    out |= {k.arg for k in node.value.keywords if k.arg}
    return out


def _table_reads(tree: ast.AST) -> set[str]:
    """The table names a module reads: ``.table("x")``, ``table_of(r, "x")``, ``.tables["x"]``,
    ``.tables.get("x")`` and ``"x" in r.tables``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name in ("table", "_table", "table_of", "has") and args:
                out.add(args[0])
            elif name == "get" and isinstance(f, ast.Attribute) and getattr(f.value, "attr", "") == "tables" and args:
                out.add(args[0])
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "tables"
              and isinstance(node.slice, ast.Constant)):
            out.add(node.slice.value)
        elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
              and any(isinstance(c, ast.Attribute) and c.attr == "tables" for c in node.comparators)):
            out.add(node.left.value)
    return out


def _folders() -> dict[str, Path]:
    return {p.name: p for p in sorted(CHAPTERS.glob("c[0-9][0-9]_*")) if p.is_dir()}


def test_the_table_read_check_sees_a_planted_read():
    planted = ast.parse('def f(r):\n    return r.table("ipc"), r.tables["epoch"], "ops" in r.tables')
    assert _table_reads(planted) == {"ipc", "epoch", "ops"}
    assert "ipc" in _table_names_written(_folders()["c08_threads_processes_gil"])


@pytest.mark.parametrize("chapter", ["c03_dataloader", "c07_full_picture"])
def test_no_module_of_chapters_3_and_7_reads_another_chapters_tables(chapter):
    folders = _folders()
    own = _table_names_written(folders[chapter])
    foreign = set().union(*(_table_names_written(p) for n, p in folders.items() if n != chapter)) - own
    assert "ipc" in foreign
    for path in sorted(folders[chapter].glob("*.py")):
        bad = _table_reads(ast.parse(path.read_text())) & foreign
        assert not bad, f"{path.name} reads another chapter's tables {sorted(bad)}: read its exported facts instead"


def test_the_crossref_that_chapters_3_and_7_call_reads_no_table():
    tree = ast.parse(Path(common.__file__).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "ipc_crossref")
    assert not _table_reads(fn)
    assert not [n for n in ast.walk(fn) if isinstance(n, ast.Attribute) and n.attr in ("table", "tables")]
