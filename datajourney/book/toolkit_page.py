"""The book's Toolkit appendix (``book/toolkit.md``), generated from the toolkit's docstrings: each
module's purpose, its public names (``__all__``) with their signatures and first paragraphs, and the
runnable example of its docstring (the ``Example::`` block; the tests run every one).

    python -m datajourney.book.toolkit_page      # writes book/toolkit.md
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import textwrap

from datajourney.core.paths import REPO_ROOT

PAGE = REPO_ROOT / "book" / "toolkit.md"
#: Beyond the toolkit package: the GPU timing helpers of the core a reader reuses too.
EXTRA_MODULES = ("datajourney.core.timing",)
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def modules() -> list[str]:
    """The toolkit's modules, then :data:`EXTRA_MODULES`."""
    import datajourney.toolkit as tk

    names = sorted(m.name for m in pkgutil.iter_modules(tk.__path__, "datajourney.toolkit.") if not m.ispkg)
    return names + list(EXTRA_MODULES)


def split_doc(doc: str | None) -> tuple[str, str | None]:
    """A module docstring as (description, example code or None)."""
    doc = inspect.cleandoc(doc or "")
    if "Example::" not in doc:
        return doc, None
    text, code = doc.split("Example::", 1)
    return text.rstrip(), textwrap.dedent(code.strip("\n")).strip() + "\n"


def _rst(text: str) -> str:
    """Docstring reST with cross-reference roles turned into literals (the page has no API targets)."""
    return _ROLE.sub(lambda m: f"``{m.group(1).split('.')[-1]}``", text)


class _Shown:
    """A value whose ``repr`` is the given text (how a signature shows an annotation or a default)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _default(value) -> _Shown:
    """A default as a reader would type it: ``time.perf_counter`` for a function, ``'auto'`` for a string."""
    if inspect.isroutine(value) or inspect.isclass(value):
        mod = getattr(value, "__module__", None) or ""
        return _Shown(f"{mod}.{value.__qualname__}" if mod and mod != "builtins" else value.__qualname__)
    return _Shown(repr(value))


def _signature(obj) -> str:
    """``obj``'s signature as its source writes it: annotations unquoted (they are strings under
    ``from __future__ import annotations``), defaults as code (strings quoted, functions by name)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    empty = inspect.Parameter.empty

    def ann(a):
        return _Shown(a) if isinstance(a, str) else a

    params = [p.replace(annotation=ann(p.annotation) if p.annotation is not empty else empty,
                        default=_default(p.default) if p.default is not empty else empty)
              for p in sig.parameters.values()]
    ret = sig.return_annotation
    return str(sig.replace(parameters=params, return_annotation=ann(ret) if ret is not empty else empty))


def _cell(text: str) -> str:
    """Text for a cell of a Markdown table: a ``|`` (in code spans too) escaped as ``\\|``, which the table
    reads as a character of the cell and the page shows as ``|``."""
    return text.replace("|", "\\|")


def section(name: str) -> str:
    """One module's section of the page."""
    mod = importlib.import_module(name)
    text, code = split_doc(mod.__doc__)
    out = [f"## `{name.removeprefix('datajourney.')}`", "", "```{eval-rst}", _rst(text), "```", ""]
    public = getattr(mod, "__all__", [])
    if public:
        out += ["| name | what it is |", "| --- | --- |"]
        for n in public:
            obj = getattr(mod, n)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                kind = "class" if inspect.isclass(obj) else "function"
                desc = (inspect.getdoc(obj) or "").split("\n\n", 1)[0]   # its first paragraph
                label = f"`{n}{_signature(obj)}`" if inspect.isfunction(obj) else f"`{n}`"
            else:
                kind, desc, label = "constant", f"`{obj!r}`"[:80], f"`{n}`"
            desc = " ".join(_ROLE.sub(lambda m: f"`{m.group(1).split('.')[-1]}`", desc).replace("``", "`").split())
            out.append(f"| {_cell(label)} | {kind}: {_cell(desc)} |")
        out.append("")
    if code:
        out += ["Example:", "", "```python", code.rstrip(), "```", ""]
    return "\n".join(out)


def render() -> str:
    """The whole page."""
    head = ("# Toolkit\n\n"
            "The pieces of this book a reader can reuse in their own training code, as the chapters use them. "
            "Install the package from a checkout (`pip install -e .`) and import them from `datajourney.toolkit`. "
            "This page is generated from the modules' docstrings; every example below runs in the book's "
            "tests on a CPU-only machine.\n")
    return head + "\n" + "\n".join(section(m) for m in modules())


def main() -> None:
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
