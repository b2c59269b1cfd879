"""A new chapter from the template: ``python -m datajourney.book.scaffold 13 my_slug "My title"`` writes
``datajourney/chapters/c13_my_slug/`` (params, experiment, analysis, page), ``notebooks/13_my_slug.ipynb``
(its parameters cell generated from ``Params``; its "How it works" section, figure and "Try it" exercises),
``book/figures/13-my_slug.svg`` (drawn with the book's one style sheet) and the chapter's line in ``_toc.yml``,
before the conclusion. The template measures one thing (the time to sum a list, over several runs) through the whole
protocol, so the new chapter runs, renders and passes the suite before its own experiment replaces that
measurement."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from datajourney.core.params import parameters_cell
from datajourney.core.paths import REPO_ROOT

TEMPLATE = Path(__file__).resolve().parent / "template"


def create(number: int, slug: str, title: str, root: Path = REPO_ROOT) -> Path:
    """Write the chapter's folder, notebook, figure and table-of-contents line under ``root``; returns the folder."""
    if not re.fullmatch(r"[a-z0-9_]+", slug) or not 1 <= number <= 99:
        raise ValueError("a chapter is a number from 1 to 99 and a slug of lower-case letters, digits and _")
    name = f"{number:02d}_{slug}"
    folder = root / "datajourney" / "chapters" / f"c{name}"
    figures = root / "book" / "figures"
    figure = figures / f"{number:02d}-{slug}.svg"
    for path in (folder, figure):
        if path.exists():
            raise FileExistsError(f"{path} exists")
    fill = {"NAME": name, "PACKAGE": f"c{name}", "TITLE": title, "NUMBER": str(number), "NN": f"{number:02d}",
            "FIGURE": figure.stem, "STYLE": book_style(figures)}

    def filled(template: str) -> str:
        return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: fill[m.group(1)], (TEMPLATE / template).read_text("utf-8"))

    folder.mkdir(parents=True)
    for src in sorted(TEMPLATE.glob("*.py.txt")):
        (folder / src.name.removesuffix(".txt")).write_text(filled(src.name))
    figure.write_text(filled("figure.svg.txt"), "utf-8")
    nb = json.loads(filled("notebook.ipynb.txt"))
    import importlib
    import sys

    sys.path.insert(0, str(root))
    params = importlib.import_module(f"datajourney.chapters.c{name}.params").Params
    lines = parameters_cell(params).split("\n")
    nb["cells"][1]["source"] = [line + "\n" for line in lines[:-1]] + [lines[-1]]
    (root / "notebooks" / f"{name}.ipynb").write_text(json.dumps(nb, indent=1) + "\n")
    toc = root / "_toc.yml"
    toc.write_text(toc_with(toc.read_text(), name))
    return folder


def book_style(figures: Path) -> str:
    """The style sheet and arrow markers every figure of the book carries (one palette, one font), taken from its
    first figure, so a new chapter's figure looks like the others."""
    svg = min(figures.glob("*.svg")).read_text("utf-8")
    return "\n".join(re.search(pattern, svg, re.S).group(0) for pattern in (r"<style>.*?</style>", r"<defs>.*?</defs>"))


def toc_with(text: str, name: str) -> str:
    """The table of contents ``text`` with notebook ``name`` among the chapters, in number order, before the
    conclusion (the last chapter, which diagnoses all the others)."""
    lines = re.findall(r"^      - file: notebooks/(\S+)\n", text, re.M)
    later = [n for n in lines[:-1] if n > name] + lines[-1:]  # the conclusion stays last
    anchor = f"      - file: notebooks/{later[0]}\n"
    return text.replace(anchor, f"      - file: notebooks/{name}\n" + anchor, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m datajourney.book.scaffold", description=__doc__.splitlines()[0])
    ap.add_argument("number", type=int)
    ap.add_argument("slug")
    ap.add_argument("title")
    a = ap.parse_args(argv)
    print(f"written: {create(a.number, a.slug, a.title)}")
    return 0
