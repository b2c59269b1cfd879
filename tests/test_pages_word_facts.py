"""Pages only word facts: a chapter page's function that reads a result's raw data (``res.table(...)``,
``res.tables``, ``res.metadata``, ``table_of(...)``) is a display function, named for what it returns (a
table, a chart, lines or rows to draw), never a sentence; every other page function words the stored facts
its chapter's analysis computed once.

A read counts where it happens in the function itself or in any function of the package it calls, however deep:
a helper of the same page, one imported from another module (the chapter's analysis, its charts, a page-level
helper of :mod:`datajourney.chapters.common`), or a module-level name bound to one of them. A wrapper such as
``_result_table(res, name)`` or ``analysis.loader_summary(res)`` hides no read. The one way from a result to its
facts, ``facts_of``, is a value built by ``facts_reader`` (not a function the page defines), so reading facts stays
allowed."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from datajourney.core.paths import REPO_ROOT

PAGES = sorted((REPO_ROOT / "datajourney" / "chapters").glob("c[0-9][0-9]_*/page.py"))
#: What a display function's name ends with.
DISPLAY = ("_table", "_chart", "_lines", "_rows", "_frame", "_display")
#: Chapters whose pages still compute sentences from raw data, with how many such functions each has left
#: (the count may only fall; the list empties as each page moves its computing into its analysis).
#: Following calls into helpers found these, reading through a helper of their analysis.
NOT_YET: dict[str, int] = {}
PACKAGE = "datajourney"
FUNCTIONS = ast.FunctionDef | ast.AsyncFunctionDef


def reads_directly(fn: ast.AST) -> bool:
    """Whether ``fn``'s own body (nested functions included) reads a result's raw data."""
    for node in ast.walk(fn):
        call = node.func if isinstance(node, ast.Call) else None
        if ((isinstance(call, ast.Attribute) and call.attr == "table")
                or (isinstance(call, ast.Name) and call.id == "table_of")
                or (isinstance(node, ast.Attribute) and node.attr in ("tables", "metadata"))):
            return True
    return False


class Module:
    """One module's functions and the names it binds to other modules' functions or modules (the package's only)."""

    def __init__(self, name: str, tree: ast.Module, package: str):
        self.name, self.defs, self.names, self.modules = name, {}, {}, {}
        for node in tree.body:
            if isinstance(node, FUNCTIONS):
                self.defs[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE):
                for a in node.names:
                    self.names[a.asname or a.name] = (node.module, a.name)
            elif isinstance(node, ast.ImportFrom) and node.level > 0:   # relative: within the package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
                for a in node.names:
                    self.names[a.asname or a.name] = (mod, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(PACKAGE):
                        self.modules[a.asname or a.name] = a.name
            elif isinstance(node, ast.Assign):   # `x = mod.f`, `a, b = mod.f, g`: a name bound to a function
                pairs = []
                for t in node.targets:
                    if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        pairs += list(zip(t.elts, node.value.elts, strict=False))
                    else:
                        pairs.append((t, node.value))
                for t, v in pairs:
                    if isinstance(t, ast.Name) and isinstance(v, ast.Name | ast.Attribute):
                        self.names.setdefault(t.id, ("<alias>", v))


def _source(module: str) -> Path | None:
    base = REPO_ROOT.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@cache
def load(module: str) -> Module | None:
    """The package's module ``module`` parsed (None for a module outside it or without a source)."""
    if not module.startswith(PACKAGE):
        return None
    p = _source(module)
    if p is None:
        return None
    package = module if p.name == "__init__.py" else module.rsplit(".", 1)[0]
    return Module(module, ast.parse(p.read_text()), package)


def _module_of(mod: Module, expr: ast.AST) -> str | None:
    """The package module an expression names (``analysis`` after ``from x import analysis``), else None."""
    if isinstance(expr, ast.Name):
        if expr.id in mod.modules:
            return mod.modules[expr.id]
        target = mod.names.get(expr.id)
        if target is not None and target[0] != "<alias>" and load(f"{target[0]}.{target[1]}") is not None:
            return f"{target[0]}.{target[1]}"
    if isinstance(expr, ast.Attribute):
        outer = _module_of(mod, expr.value)
        if outer is not None and load(f"{outer}.{expr.attr}") is not None:
            return f"{outer}.{expr.attr}"
    return None


def resolve(mod: Module, expr: ast.AST, depth: int = 0) -> tuple[str, str] | None:
    """The (module, function) a called expression names, following imports and module-level aliases; None for
    anything else (a class, a builtin, another library's function, a value such as ``facts_of``)."""
    if depth > 8:
        return None
    if isinstance(expr, ast.Name):
        if expr.id in mod.defs:
            return mod.name, expr.id
        target = mod.names.get(expr.id)
        if target is None:
            return None
        if target[0] == "<alias>":
            return resolve(mod, target[1], depth + 1)
        other = load(target[0])
        return None if other is None else resolve(other, ast.Name(target[1]), depth + 1)
    if isinstance(expr, ast.Attribute):
        owner = _module_of(mod, expr.value)
        other = load(owner) if owner is not None else None
        return None if other is None else resolve(other, ast.Name(expr.attr), depth + 1)
    return None


def calls(mod: Module, fn: ast.AST) -> set[tuple[str, str]]:
    """The package's functions ``fn`` calls (its nested functions' calls included)."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            target = resolve(mod, node.func)
            if target is not None:
                out.add(target)
    return out


def read_path(module: str, name: str, seen: frozenset = frozenset()) -> list[str] | None:
    """The chain of calls from ``module.name`` to a raw read (``[name, helper, ...]``), or None where none is."""
    mod = load(module)
    fn = mod.defs.get(name) if mod is not None else None
    if fn is None or (module, name) in seen:
        return None
    if reads_directly(fn):
        return [f"{module.rsplit('.', 1)[-1]}.{name}"]
    for target in sorted(calls(mod, fn)):
        if target == (module, name):
            continue
        below = read_path(*target, seen | {(module, name)})
        if below is not None:
            return [f"{module.rsplit('.', 1)[-1]}.{name}", *below]
    return None


def raw_readers(tree: ast.AST, module: Module | None = None) -> list[str]:
    """The functions (at any depth) in ``tree`` that read raw data themselves or through a function of the package
    they call and are not display functions, each as the chain of calls to the read (``"note"`` for one that reads
    in its own body, ``"note → page._rows_of → common.table_of"`` through helpers)."""
    mod = module or Module("<page>", tree, "<page>")
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, FUNCTIONS) or fn.name.endswith(DISPLAY):
            continue
        if reads_directly(fn):
            out.append(fn.name)
            continue
        for target in sorted(calls(mod, fn)):
            below = read_path(*target) if target[0] != "<page>" else _planted_path(mod, target[1], {fn.name})
            if below is not None:
                out.append(" → ".join([fn.name, *below]))
                break
    return out


def _planted_path(mod: Module, name: str, seen: set) -> list[str] | None:
    """:func:`read_path` within a module parsed from text (a planted page, not a file of the package)."""
    fn = mod.defs.get(name)
    if fn is None or name in seen:
        return None
    if reads_directly(fn):
        return [name]
    for target in sorted(calls(mod, fn)):
        below = (_planted_path(mod, target[1], seen | {name}) if target[0] == "<page>" else read_path(*target))
        if below is not None:
            return [name, *below]
    return None


def page_readers(page: Path) -> list[str]:
    """:func:`raw_readers` of a chapter's page, following its calls into the package."""
    module = ".".join(page.relative_to(REPO_ROOT).with_suffix("").parts)
    return raw_readers(ast.parse(page.read_text()), load(module))


def test_the_check_sees_a_planted_read():
    planted = ast.parse("def note(r):\n    return str(r.table('x'))\n\ndef ok_table(r):\n    return r.tables['x']\n"
                        "def cap(r):\n    return r.metadata['y']\n\ndef rows(r):\n    return table_of(r, 'x')\n")
    assert raw_readers(planted) == ["note", "cap", "rows"]


def test_the_check_follows_a_read_through_helpers():
    """A sentence reading through a helper of its page, a chain of helpers, a module-level alias or a function of
    another module of the package is caught, with the chain that leads to the read; a display function that reads
    is not, nor a sentence that only reads facts or calls a function that reads nothing."""
    planted = ast.parse(
        "from datajourney.chapters.common import table_of as _t\n"
        "from datajourney.chapters.c08_threads_processes_gil import analysis\n"
        "from datajourney.chapters.c09_reading_smarter import page as p9\n"
        "summary = analysis.loader_summary\n"
        "def _raw(res, name):\n    return _t(res, name)\n\n"
        "def _deeper(res):\n    return len(_raw(res, 'x'))\n\n"
        "def wrapped_note(res):\n    return f'{_deeper(res)} rows'\n\n"
        "def aliased_note(res):\n    return str(summary(res).shape)\n\n"
        "def analysed_note(res):\n    return str(analysis.old_windows(res))\n\n"
        "def other_page_note(res):\n    return str(p9._result_table(res, 'x').shape)\n\n"
        "def shown_table(res):\n    return _raw(res, 'x')\n\n"
        "def worded_note(facts):\n    return say(facts_of(facts)['x'])\n\n"
        "def label_note(facts):\n    return analysis.loader_label('spdl', 4)\n")
    found = raw_readers(planted)
    assert [f.split(" → ")[0] for f in found] == ["_raw", "_deeper", "wrapped_note", "aliased_note", "analysed_note",
                                                  "other_page_note"], found
    assert "wrapped_note → _deeper → _raw → common.table_of" in found
    assert "other_page_note → page._result_table" in found, found


@pytest.mark.chapters
@pytest.mark.parametrize("page", PAGES, ids=[p.parent.name for p in PAGES])
def test_page_functions_word_facts_and_only_display_functions_read_raw_data(page: Path):
    found = page_readers(page)
    allowed = NOT_YET.get(page.parent.name, 0)
    assert len(found) <= allowed, (f"{page.parent.name}: page functions computing from raw data: {found}; "
                                   "move the computing into the analysis (facts) or make it a display function")
