"""Pages only word facts: a chapter page's function that reads a result's raw data (``res.table(...)``,
``res.tables``, ``res.metadata``, ``table_of(...)``) is a display function, named for what it returns (a
table, a chart, lines or rows to draw), never a sentence; every other page function words the stored facts
its chapter's analysis computed once."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from datajourney.core.paths import REPO_ROOT

PAGES = sorted((REPO_ROOT / "datajourney" / "chapters").glob("c[0-9][0-9]_*/page.py"))
#: What a display function's name ends with.
DISPLAY = ("_table", "_chart", "_lines", "_rows", "_frame")
#: Chapters whose pages still compute sentences from raw data, with how many such functions each has left
#: (the count may only fall; the list empties as each page moves its computing into its analysis).
NOT_YET: dict[str, int] = {}


def raw_readers(tree: ast.AST) -> list[str]:
    """Names of the functions (at any depth) in ``tree`` that read raw data and are not display functions."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn.name.endswith(DISPLAY):
            continue
        for node in ast.walk(fn):
            call = node.func if isinstance(node, ast.Call) else None
            if ((isinstance(call, ast.Attribute) and call.attr == "table")
                    or (isinstance(call, ast.Name) and call.id == "table_of")
                    or (isinstance(node, ast.Attribute) and node.attr in ("tables", "metadata"))):
                out.append(fn.name)
                break
    return out


def test_the_check_sees_a_planted_read():
    planted = ast.parse("def note(r):\n    return str(r.table('x'))\n\ndef ok_table(r):\n    return r.tables['x']\n"
                        "def cap(r):\n    return r.metadata['y']\n\ndef rows(r):\n    return table_of(r, 'x')\n")
    assert raw_readers(planted) == ["note", "cap", "rows"]


@pytest.mark.chapters
@pytest.mark.parametrize("page", PAGES, ids=[p.parent.name for p in PAGES])
def test_page_functions_word_facts_and_only_display_functions_read_raw_data(page: Path):
    found = raw_readers(ast.parse(page.read_text()))
    allowed = NOT_YET.get(page.parent.name, 0)
    assert len(found) <= allowed, (f"{page.parent.name}: page functions computing from raw data: {found}; "
                                   "move the computing into the analysis (facts) or make it a display function")
