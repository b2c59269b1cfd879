"""Experiments measure; pages word. No experiment module of a chapter (``experiment.py`` and the modules
it is split into: every module but ``page`` and ``charts``, the chapter's words and chart labels, and
``analysis`` and ``params``, whose fact labels are noun phrases) holds a reader sentence: a string of six
or more words outside docstrings, error messages, progress output and the reason a section was skipped (the
environment's own words)."""
import ast

import pytest

from datajourney.book import registry

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

#: Calls whose text is for the person running the book, not the page: errors, warnings, progress.
SPOKEN = {"ParameterError", "ValueError", "RuntimeError", "KeyError", "TypeError", "OSError", "FileNotFoundError",
          "ChapterError", "ResultError", "print", "warn", "note", "notice", "say_progress", "log", "info", "warning",
          "debug", "error", "exception", "SystemExit", "AssertionError", "skip", "Skip", "NotImplementedError",
          "TimeoutError", "PermissionError", "ImportError", "ModuleNotFoundError", "write", "progress", "status"}


def _sentences(path) -> list[str]:
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and (
                getattr(node.func, "id", None) in SPOKEN or getattr(node.func, "attr", None) in SPOKEN)):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # attribute docstrings
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value.strip()
            if (len(text.split()) >= 6 and not text.startswith(("-", "/", "#", "skipped"))
                    and "\n" not in text.strip()):
                out.append(text)
    return out


#: Row labels of tables, noun phrases that older result files carry as keys (not sentences).
ROW_LABELS = {"copy into a reused pinned buffer, then copy",
              "pin_memory() with the pinned cache emptied before each call"}


@pytest.mark.parametrize("chapter", [c.name for c in registry.CHAPTERS])
def test_no_reader_sentences_outside_pages(chapter):
    c = registry.lookup(chapter)
    folder = registry.CHAPTER_DIR / c.package.rsplit(".", 1)[-1]
    skip = ("page.py", "charts.py", "params.py", "analysis.py", "__init__.py")
    found = {}
    for p in sorted(folder.glob("*.py")):
        worded = p.name in skip or p.name.startswith("analysis_")  # an analysis's own modules word facts too
        said = [] if worded else [t for t in _sentences(p) if t not in ROW_LABELS]
        if said:
            found[p.name] = said
    assert not found, f"{chapter}: reader sentences in its experiment: {found}"
