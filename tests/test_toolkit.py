"""The toolkit a reader can import: public names documented, examples that run, and a Toolkit page
that is what the docstrings say."""
import importlib
import os

import pytest

from datajourney.book import toolkit_page

#: The pieces the Toolkit page must show with a runnable example.
MUST_HAVE_EXAMPLES = ("datajourney.toolkit.pagecache", "datajourney.toolkit.diskstats", "datajourney.toolkit.reads",
                      "datajourney.toolkit.tokens", "datajourney.toolkit.models", "datajourney.core.timing")


def test_committed_toolkit_page_is_generated_from_the_docstrings():
    assert toolkit_page.PAGE.read_text() == toolkit_page.render(), (
        "book/toolkit.md is stale: run python -m datajourney.book.toolkit_page")


@pytest.mark.parametrize("name", toolkit_page.modules())
def test_every_public_name_is_documented(name):
    mod = importlib.import_module(name)
    assert mod.__doc__ and mod.__doc__.strip(), name
    for n in getattr(mod, "__all__", []):
        obj = getattr(mod, n)
        if callable(obj):
            assert obj.__doc__ and obj.__doc__.strip(), f"{name}.{n} has no docstring"


@pytest.mark.parametrize("name", MUST_HAVE_EXAMPLES)
def test_example_runs(name, tmp_path, monkeypatch):
    """The example of the module's docstring runs on a CPU-only machine, in a scratch directory."""
    _, code = toolkit_page.split_doc(importlib.import_module(name).__doc__)
    assert code, f"{name} has no Example:: block"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    exec(compile(code, f"<example of {name}>", "exec"), {"__name__": "__example__"})
    assert os.getcwd() == str(tmp_path)


def test_signatures_read_as_code_and_pipes_survive_the_table():
    """A signature shows its defaults as a reader types them (``'auto'``, ``time.perf_counter``, never the
    repr ``<built-in function ...>``), and a ``|`` in a type shows as ``|``, not as an HTML entity."""
    from markdown_it import MarkdownIt

    md = toolkit_page.render()
    assert "&#124;" not in md and "<built-in" not in md and "<function" not in md
    assert "method: str = 'auto'" in md and "clock=time.perf_counter" in md
    html = MarkdownIt("commonmark").enable("table").render(toolkit_page.section("datajourney.toolkit.pagecache"))
    assert "<code>file_residency(path: str | os.PathLike) -&gt; tuple[int, int]</code>" in html
    assert "&amp;#124;" not in html and "\\|" not in html
