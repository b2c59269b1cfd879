"""What a notebook of a run directory may bring into the book or into the committed notebooks: the outputs
its cells displayed, as data, and nothing else.

A run directory travels between hosts (``reference-run.sh pack``, ``promote``), so nothing in it is
trusted. Its notebook and cell metadata never travel (myst-nb executes a notebook whose metadata asks for
it); the cells are the committed notebook's (the caller checks that they are the same). Each output keeps
only what the book's own cells display (:data:`MIME_TYPES`): a chart's HTML is written again from its
plotly JSON, its script only one a chapter registered (:func:`datajourney.core.charts.script`); any other
HTML or Markdown is kept only when it holds the markup the package writes (tables, ``<details>``,
``<small>``, links to pages), else the output is replaced by a note saying it was left out.
"""
from __future__ import annotations

import copy
import html.parser
import re

#: The mime types the book's own cells display (tables, Markdown, plotly charts); any other is dropped.
MIME_TYPES = ("text/plain", "text/markdown", "text/html", "application/vnd.plotly.v1+json")
PLOTLY = "application/vnd.plotly.v1+json"
#: What an output that held anything else shows instead.
LEFT_OUT = "[an output of this run's notebook was left out: it held markup this book does not write]"

#: HTML the package writes: report.table_html's pandas tables, folded blocks, small print; the attributes
#: of those tables (ids, classes, inline style); nothing that loads or runs anything.
_TAGS = {"div", "span", "p", "br", "b", "i", "em", "strong", "small", "sup", "sub", "code", "details", "summary",
         "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col", "style"}
_ATTRIBUTES = {"id", "class", "style", "type", "colspan", "rowspan", "open"}
#: CSS that reaches outside the page or runs code.
_BAD_CSS = re.compile(r"url\s*\(|@import|expression\s*\(|javascript:|behavior\s*:|-moz-binding|\\|<", re.I)
#: A link the package writes: to the web, to an anchor, or to a page of the book.
_LINK = re.compile(r"(https?://\S+|#[\w.-]*|(\.\./)?(notebooks/|book/)?[\w.-]+\.(ipynb|md|html)(#[\w.-]*)?)")
#: A MyST directive or colon fence opening a line (```{raw} html, :::{include}).
_DIRECTIVE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*\{", re.M)
#: A MyST role's name just before a code span ({raw-html}`...`, {download}`...`).
_ROLE = re.compile(r"\{[^{}\s]+\}$")


class _Checker(html.parser.HTMLParser):
    """Collects what in an HTML text is not the package's markup (:data:`_TAGS`, :data:`_ATTRIBUTES`)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.bad: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        if tag not in _TAGS:
            self.bad.append(f"<{tag}>")
        for name, val in attrs:
            if name not in _ATTRIBUTES or (name == "style" and _BAD_CSS.search(val or "")) \
                    or (name == "type" and (tag != "style" or val != "text/css")):
                self.bad.append(f"<{tag} {name}=...>")
        self._in_style = tag == "style"

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self._in_style = False

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style and _BAD_CSS.search(data):
            self.bad.append("<style> that loads or runs something")

    def handle_comment(self, data):
        self.bad.append("<!-- -->")

    def handle_decl(self, decl):
        self.bad.append("<!...>")

    def handle_pi(self, data):
        self.bad.append("<?...>")

    def unknown_decl(self, data):
        self.bad.append("<![...]>")


def html_is_ours(text: str) -> bool:
    """Whether an HTML text holds only the markup the package writes."""
    checker = _Checker()
    checker.feed(text)
    checker.close()
    return not checker.bad


def markdown_is_ours(text: str) -> bool:
    """Whether a Markdown text (as myst-nb renders a ``text/markdown`` output) holds only what the package
    writes: no MyST directive or role, no image, links only to the web or to the book's pages, and inline or
    block HTML only of :func:`html_is_ours`."""
    from markdown_it import MarkdownIt

    if _DIRECTIVE.search(text):
        return False
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    for t in tokens:
        if t.type == "html_block" and not html_is_ours(t.content):
            return False
        if t.type == "fence" and t.info.strip().startswith("{"):
            return False
        children = t.children or []
        for i, c in enumerate(children):
            if c.type == "image" or (c.type == "html_inline" and not html_is_ours(c.content)):
                return False
            if c.type == "link_open" and not _LINK.fullmatch(str(c.attrGet("href") or "")):
                return False
            if c.type == "text" and i + 1 < len(children) and children[i + 1].type == "code_inline" \
                    and _ROLE.search(c.content):
                return False
    return True


def _text(value) -> str | None:
    """A notebook's text field (a string or a list of strings) as one string; None for anything else."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return value if isinstance(value, str) else None


def _chart(fig) -> dict | None:
    """A chart's outputs written again from its plotly JSON (its HTML as the book renders charts)."""
    from datajourney.core import charts

    _register_scripts()
    if not isinstance(fig, dict):
        return None
    try:
        return {PLOTLY: fig, "text/html": charts.html(copy.deepcopy(fig), trusted_script=False)}
    except (ValueError, TypeError, KeyError):
        return None


def _register_scripts() -> None:
    """Import every chapter's page, which registers the scripts its charts may run (a page that cannot be
    imported here registers none: its charts are kept without their script)."""
    import importlib

    from datajourney.book.registry import CHAPTERS

    for ch in CHAPTERS:
        try:
            importlib.import_module(ch.page)
        except ImportError:
            continue


def output(out) -> dict:
    """One output of a run's notebook as the book may show it (see the module's docstring)."""
    kind = out.get("output_type") if isinstance(out, dict) else None
    if kind == "stream":
        txt = _text(out.get("text"))
        if txt is not None and out.get("name") in ("stdout", "stderr"):
            return {"output_type": "stream", "name": out["name"], "text": txt}
    elif kind == "error":
        parts = [_text(out.get("ename")), _text(out.get("evalue"))]
        trace = out.get("traceback")
        if None not in parts and isinstance(trace, list) and all(isinstance(t, str) for t in trace):
            return {"output_type": "error", "ename": parts[0], "evalue": parts[1], "traceback": list(trace)}
    elif kind in ("display_data", "execute_result") and isinstance(out.get("data"), dict):
        data = {}
        for mime in MIME_TYPES:
            if mime not in out["data"]:
                continue
            if mime == PLOTLY:
                chart = _chart(out["data"][mime])
                if chart is None:
                    return _left_out()
                data.update(chart)
                continue
            if mime == "text/html" and PLOTLY in out["data"]:
                continue  # written again from the JSON
            txt = _text(out["data"][mime])
            ok = txt is not None and (mime == "text/plain" or (html_is_ours(txt) if mime == "text/html"
                                                               else markdown_is_ours(txt)))
            if not ok:
                return _left_out()
            data[mime] = txt
        if data:
            kept = {"output_type": kind, "data": data, "metadata": {}}
            if kind == "execute_result":
                kept["execution_count"] = out.get("execution_count") if isinstance(out.get("execution_count"),
                                                                                   int) else None
            return kept
        return _left_out()
    return _left_out()


def _left_out() -> dict:
    return {"output_type": "display_data", "data": {"text/plain": LEFT_OUT}, "metadata": {}}


def outputs(outs) -> list[dict]:
    """The outputs of one code cell of a run's notebook, each as :func:`output` keeps it."""
    return [output(o) for o in outs] if isinstance(outs, list) else [_left_out()]


def rebuilt(theirs, ours):
    """The committed notebook ``ours`` (its metadata, cells and cell metadata) with the outputs of the run's
    notebook ``theirs`` (same cells, checked by the caller), each kept as :func:`output` allows."""
    import nbformat

    nb = copy.deepcopy(ours)
    for mine, their in zip(nb.cells, theirs.cells):
        if mine.cell_type == "code":
            mine.outputs = [nbformat.from_dict(o) for o in outputs(their.get("outputs"))]
            count = their.get("execution_count")
            mine.execution_count = count if isinstance(count, int) and not isinstance(count, bool) else None
    return nb
