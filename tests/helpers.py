"""What several test files share: the hostile string and the one check that it stays text, copies of a result
with some of its tables replaced, a printed missing number, and the digest of the committed book."""
from __future__ import annotations

import hashlib
import os
import re

from datajourney.core import results
from datajourney.core.paths import REPO_ROOT

#: A string a result file could hold: it closes a code span and opens an HTML tag if worded carelessly.
HOSTILE = "x` <img src=x onerror=alert(1)> `y"


def _markup(md: str) -> list[str]:
    """The HTML that the Markdown ``md`` puts on a page as markup, as the book's Markdown parser reads it
    (CommonMark with tables, MyST's base): raw HTML blocks, inline HTML, and the same found again in the body
    of a MyST directive fence (```{note}), which MyST parses as Markdown; code spans and code blocks hold text."""
    from markdown_it import MarkdownIt

    out = []
    for t in MarkdownIt("commonmark").enable("table").parse(md):
        if t.type == "html_block":
            out.append(t.content)
        elif t.type == "fence" and t.info.strip().startswith("{"):
            out += _markup(t.content)
        out += [c.content for c in t.children or [] if c.type == "html_inline"]
    return out


def assert_stays_text(*texts: str, tag: str = "<img") -> None:
    """No text of ``texts`` puts ``tag`` on the page as HTML: a hostile string is shown (in a code span, or
    escaped), never rendered."""
    for text in texts:
        bad = [m for m in _markup(text) if tag in m.lower()]
        assert not bad, f"{bad} renders as HTML in:\n{text}"


def with_tables(res: results.Result, **tables) -> results.Result:
    """A copy of ``res`` whose tables ``tables`` are replaced (metadata copied, the rest shared)."""
    return results.Result(res.chapter, res.run_id, res.parameters, res.fingerprint, {**res.tables, **tables},
                          dict(res.metadata))


def findings_by_key(page, res) -> dict:
    """``page.findings(res)`` by key."""
    return {f.key: f for f in page.findings(res)}


def has_nan(text: str) -> bool:
    """A computed text that printed a missing number ('nan' as a word, not 'NAND')."""
    return re.search(r"\bnan\b", text, re.I) is not None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def tracked_digest() -> str:
    """A digest of the committed book: notebooks, reference results, book configuration."""
    h = hashlib.sha256()
    for p in sorted([*REPO_ROOT.glob("notebooks/*.ipynb"), *REPO_ROOT.glob("data/reference/**/*.json"),
                     REPO_ROOT / "_config.yml", REPO_ROOT / "_toc.yml"]):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()
