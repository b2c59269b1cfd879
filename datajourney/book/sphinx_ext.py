"""Build the Jupyter Book, from the committed reference notebooks or from a reader's run.

Also a Sphinx extension (listed in ``_config.yml``) that serves plotly's bundled
``plotly.min.js`` from the book's ``_static/`` as a plain script in every page head, so
charts render with no internet access.

A reader's run is built from a staged copy under the run directory: the book sources
with the run's executed notebooks in place of the committed ones. No tracked file is
modified, so the reference book stays reproducible.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from datajourney.core.paths import REPO_ROOT

BOOK_SOURCES = ("_config.yml", "_toc.yml", "book")


# --------------------------------------------------------------------------- sphinx extension
def _plotly_static(app) -> None:
    import plotly

    src = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    static = Path(app.doctreedir).parent / "datajourney_static"
    static.mkdir(parents=True, exist_ok=True)
    if not (static / src.name).exists() or (static / src.name).stat().st_size != src.stat().st_size:
        shutil.copyfile(src, static / src.name)
    app.config.html_static_path.append(str(static))


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """sphinx-thebe registers its inline configuration script twice, which throws a
    'THEBE_JS_URL has already been declared' error in every page: keep each script once."""
    seen, kept = set(), []
    for js in context.get("script_files", []):
        key = (getattr(js, "filename", None) or "", repr(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


def _mathml(self, node) -> None:
    """A page's LaTeX math (``$...$``, ``$$...$$``) as MathML, converted while the book builds: browsers
    draw MathML themselves, so the book loads no MathJax from a CDN and its equations show offline."""
    from docutils import nodes
    from latex2mathml.converter import convert

    block = not isinstance(node, nodes.math)
    math = convert(node.astext(), display="block" if block else "inline")
    # not the theme's div.math: its flex row (meant for MathJax and equation numbers) pushes MathML right
    self.body.append(f'<div class="dj-math" style="overflow-x: auto; font-size: 1.15em">{math}</div>'
                     if block else math)
    raise nodes.SkipNode


#: Pages computed on every build from result files (executed, not stored): the title page.
COMPUTED_PAGES = ("book/index",)


def _read_computed_pages(app, env, added, changed, removed) -> list[str]:
    """Sphinx reads a page again only when its source changed; a computed page's output depends on the
    result files, so it is read (and executed) again on every build, never left as an earlier build had it."""
    return [d for d in COMPUTED_PAGES if d in env.found_docs and d not in added | changed]


def setup(app):
    try:
        import latex2mathml  # noqa: F401 - the equations' renderer, checked before any page is read
    except ModuleNotFoundError:
        from sphinx.errors import ExtensionError

        raise ExtensionError("the book's equations need latex2mathml, part of the book extra: "
                             "pip install -e '.[book]'") from None
    app.connect("builder-inited", _plotly_static)
    app.connect("env-get-outdated", _read_computed_pages)
    app.connect("html-page-context", _dedupe_scripts, priority=900)  # after the theme adds its own
    app.add_js_file("plotly.min.js", priority=100)
    app.add_html_math_renderer("mathml", (_mathml, None), (_mathml, None))  # html_math_renderer in _config.yml
    return {"parallel_read_safe": True, "parallel_write_safe": True}


class PlotlyJsonPlugin:
    """myst-nb mime plugin: plotly's JSON mimetype renders as nothing in the static book.

    Every figure also carries a ``text/html`` rendering (see :mod:`datajourney.plotting`),
    which the book shows; without this plugin myst-nb warns about the JSON one.
    """

    mime_priority_overrides = ()

    @staticmethod
    def handle_mime(renderer, data, inline):
        return [] if data.mime_type == "application/vnd.plotly.v1+json" else None


# --------------------------------------------------------------------------- building
def jupyter_book(source: Path, *, strict: bool = True, path_output: Path | None = None) -> Path:
    """``jupyter-book build`` of ``source`` (warnings are errors when strict) into
    ``path_output/_build`` (default: ``source/_build``); the index page."""
    # datajourney first: it keeps jsonschema (through myst-nb's nbformat) from compiling an IRI grammar it never uses
    cmd = [sys.executable, "-c", "import datajourney; from jupyter_book.cli.main import main; main()", "build",
           str(source)]
    if path_output:
        cmd += ["--path-output", str(path_output)]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
        raise RuntimeError(f"jupyter-book build of {source} failed:\n{tail}")
    return Path(path_output or source) / "_build" / "html" / "index.html"


def stage(run_dir: Path) -> Path:
    """Copy the book sources into ``<run_dir>/book`` with the run's executed notebooks, as data: each is the
    committed notebook with the run's outputs (:func:`~datajourney.book.runner.shown_notebook`), and the
    staged configuration executes none of them. The title page holds this run's answer as a stored output.
    A ``book`` folder that is, or holds, a symbolic link is refused before anything is deleted or written
    (:func:`_no_links`)."""
    import nbformat

    from datajourney.book import runner
    from datajourney.book.registry import lookup

    run_dir = Path(run_dir).resolve()
    dest = run_dir / "book"
    _no_links(dest)
    executed = run_dir / "notebooks"
    shown = {}  # every run notebook checked before anything is deleted or written
    for nb in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        if (executed / nb.name).exists():
            shown[nb.name] = runner.shown_notebook(executed / nb.name, lookup(nb.stem), "--run")
            shown[nb.name].metadata["mystnb"] = {"execution_mode": "off"}
    if dest.exists():
        for name in (*BOOK_SOURCES, "notebooks"):
            target = dest / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    dest.mkdir(exist_ok=True)
    for name in BOOK_SOURCES:
        src = REPO_ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, dest / name)
    _never_execute_notebooks(dest / "_config.yml")
    (dest / "notebooks").mkdir()
    for nb in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        if nb.name in shown:
            (dest / "notebooks" / nb.name).write_text(nbformat.writes(shown[nb.name]) + "\n")
        else:
            shutil.copyfile(nb, dest / "notebooks" / nb.name)
    _title_page_of_run(dest / "book" / "index.ipynb", run_dir)
    return dest


def _no_links(dest: Path) -> None:
    """A run's ``book`` folder is written and deleted by every build of its book: when it, or anything in it,
    is a symbolic link, that would reach outside the run. A one-line error naming the link; nothing is
    followed, deleted or written."""
    from datajourney.core.params import ParameterError

    found = dest if dest.is_symlink() else None
    if found is None and dest.is_dir():
        for root, dirs, files in os.walk(dest):
            found = next((Path(root) / n for n in (*dirs, *files) if os.path.islink(os.path.join(root, n))), None)
            if found is not None:
                break
    if found is not None:
        raise ParameterError("--run", str(dest.parent), f"a run whose book folder holds no symbolic link: {found} "
                             f"is one (to {os.readlink(found)}), which is left alone")


def _never_execute_notebooks(config: Path) -> None:
    """The staged configuration names every chapter notebook as excluded from execution: a setting
    no notebook's own metadata can override (only the title page, a page of the checkout, is computed)."""
    import yaml

    conf = yaml.safe_load(config.read_text())
    conf.setdefault("execute", {}).update(execute_notebooks="off", exclude_patterns=["notebooks/*"])
    config.write_text(yaml.safe_dump(conf, sort_keys=False, allow_unicode=True))


def _title_page_of_run(index: Path, run_dir: Path) -> None:
    """The staged title page opens with this run's answer: its computed cell's output is written from the
    run's result files (the reader's host first, the reference host beside it) and stored, never executed
    again (the page's own metadata would execute it, without the run)."""
    import json

    from datajourney.book import overview

    if not index.is_file():
        return
    nb = json.loads(index.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "overview.title_markdown" in "".join(cell["source"]):
            cell["outputs"] = [{"output_type": "display_data", "metadata": {},
                                "data": {"text/markdown": overview.title_markdown(run_dir=run_dir),
                                         "text/plain": ["<IPython.core.display.Markdown object>"]}}]
    nb["metadata"]["mystnb"] = {"execution_mode": "off"}
    index.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def build(run_dir: Path | None = None, *, strict: bool = True, path_output: Path | None = None) -> Path:
    """Build the reference book (``run_dir`` None) or a run's book; return the index page."""
    if run_dir is None:
        return jupyter_book(REPO_ROOT, strict=strict, path_output=path_output)
    return jupyter_book(stage(run_dir), strict=strict)
