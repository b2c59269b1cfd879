"""The import contracts, built from the registry so a new chapter folder is covered without editing a
list: layers (cli and book over chapters over toolkit over core), chapters independent of one another,
and experiments and analyses that never import a page or the phrasing module (they compute; pages word).

``python -m datajourney.book.contracts`` writes the contracts to a temporary import-linter
configuration and runs ``lint-imports`` on it (``./journey test`` does); :func:`config` is the text.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from datajourney.chapters.registry import CHAPTERS
from datajourney.core.paths import REPO_ROOT

LAYERS = ("datajourney.cli", "datajourney.book", "datajourney.chapters", "datajourney.toolkit", "datajourney.core")


def config() -> str:
    """An import-linter INI configuration holding the book's three contracts."""
    def block(items) -> str:
        return "".join(f"\n    {i}" for i in items)

    chapters = [c.package for c in CHAPTERS]
    here = Path(__file__).resolve().parents[1] / "chapters"

    def exists(module: str) -> bool:
        return (here / module.split(".")[2] / f"{module.split('.')[3]}.py").is_file()

    return f"""[importlinter]
root_package = datajourney
include_external_packages = False

[importlinter:contract:layers]
name = Layers: imports only point down (cli and book over chapters over toolkit over core)
type = layers
layers ={block(LAYERS)}

[importlinter:contract:independence]
name = Chapters are independent of one another (chapter 12 reads facts from result files, not code)
type = independence
modules ={block(chapters)}

[importlinter:contract:words]
name = Experiments and analyses compute and never word: no page, no phrasing
type = forbidden
source_modules ={block(m for p in chapters for m in (f"{p}.experiment", f"{p}.analysis") if exists(m))}
forbidden_modules ={block([m for p in chapters if exists(m := f"{p}.page")] + ["datajourney.core.phrasing"])}
"""


def main() -> int:
    with tempfile.NamedTemporaryFile("w", suffix=".ini", prefix="importlinter-", delete=False) as f:
        f.write(config())
    try:
        lint = Path(sys.executable).with_name("lint-imports")
        return subprocess.call([str(lint), f.name, "--no-cache"], cwd=REPO_ROOT)
    finally:
        Path(f.name).unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
