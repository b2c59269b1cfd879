"""Each chapter notebook's cell tagged ``parameters``, written from the chapter's ``Params``
(:func:`datajourney.core.params.parameters_cell`): the declaration is the one place a default lives.

``python -m datajourney.book.cells`` rewrites the cells that differ; ``--check`` only lists them.
"""
from __future__ import annotations

import argparse
import json

from datajourney.book.registry import CHAPTERS, Chapter
from datajourney.core.params import parameters_cell


def _cell(nb: dict) -> dict | None:
    return next((c for c in nb["cells"] if c["cell_type"] == "code"
                 and "parameters" in c.get("metadata", {}).get("tags", [])), None)


def current(ch: Chapter) -> str | None:
    """The source of ``ch``'s notebook's parameters cell as committed (None without one)."""
    cell = _cell(json.loads(ch.notebook.read_text()))
    return None if cell is None else "".join(cell["source"])


def write(ch: Chapter) -> bool:
    """Rewrite ``ch``'s parameters cell from its ``Params``; True when it changed."""
    nb = json.loads(ch.notebook.read_text())
    cell, text = _cell(nb), parameters_cell(ch.params)
    if cell is None or "".join(cell["source"]) == text:
        return False
    lines = text.split("\n")
    cell["source"] = [line + "\n" for line in lines[:-1]] + [lines[-1]]
    ch.notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m datajourney.book.cells", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="list the notebooks whose cell differs; change nothing")
    a = ap.parse_args(argv)
    stale = [c for c in CHAPTERS if c.available and current(c) != parameters_cell(c.params)]
    for c in stale:
        print(f"{c.notebook.name}: parameters cell differs from its Params" if a.check
              else f"{c.notebook.name}: parameters cell written" if write(c) else "")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
