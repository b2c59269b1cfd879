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


def _first_paragraph(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n\n", 1)[0]


def _signature(obj) -> str:
    try:
        return str(inspect.signature(obj)).replace("'", "")
    except (TypeError, ValueError):
        return ""


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
                kind, desc = ("class" if inspect.isclass(obj) else "function"), _first_paragraph(obj)
                label = f"`{n}{_signature(obj)}`" if inspect.isfunction(obj) else f"`{n}`"
            else:
                kind, desc, label = "constant", f"`{obj!r}`"[:80], f"`{n}`"
            desc = " ".join(_ROLE.sub(lambda m: f"`{m.group(1).split('.')[-1]}`", desc).replace("``", "`").split())
            out.append(f"| {label.replace('|', '&#124;')} | {kind}: {desc.replace('|', '&#124;')} |")
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
