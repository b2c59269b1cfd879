"""A new chapter from the template: ``python -m datajourney.book.scaffold 13 my_slug "My title"`` writes
``datajourney/chapters/c13_my_slug/`` (params, experiment, analysis, page), ``notebooks/13_my_slug.ipynb``
(its parameters cell generated from ``Params``) and the chapter's line in ``_toc.yml``, before the conclusion.
The template measures one thing (the time to sum a list, over several runs) through the whole protocol, so the new
chapter runs, renders and passes the suite before its own experiment replaces that measurement."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from datajourney.core.params import parameters_cell
from datajourney.core.paths import REPO_ROOT

TEMPLATE = Path(__file__).resolve().parent / "template"


def create(number: int, slug: str, title: str, root: Path = REPO_ROOT) -> Path:
    """Write the chapter's folder, notebook and table-of-contents line under ``root``; returns the folder."""
    if not re.fullmatch(r"[a-z0-9_]+", slug) or not 1 <= number <= 99:
        raise ValueError("a chapter is a number from 1 to 99 and a slug of lower-case letters, digits and _")
    name = f"{number:02d}_{slug}"
    folder = root / "datajourney" / "chapters" / f"c{name}"
    if folder.exists():
        raise FileExistsError(f"{folder} exists")
    folder.mkdir(parents=True)
    for src in sorted(TEMPLATE.glob("*.py.txt")):
        text = src.read_text().replace("{{NAME}}", name).replace("{{PACKAGE}}", f"c{name}").replace("{{TITLE}}", title)
        (folder / src.name.removesuffix(".txt")).write_text(text)
    nb = json.loads((TEMPLATE / "notebook.ipynb.txt").read_text().replace("{{PACKAGE}}", f"c{name}")
                    .replace("{{TITLE}}", title).replace("{{NUMBER}}", str(number)))
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
