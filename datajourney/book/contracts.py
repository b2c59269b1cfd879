"""The import contracts, built from the registry so a new chapter folder is covered without editing a
list: layers (cli and book over chapters over toolkit over core), chapters independent of one another,
experiments and analyses that never import a page or the phrasing module (they compute; pages word), and
the one-way flow experiment → result → analysis → facts → page: no analysis imports an experiment, no
experiment imports an analysis (the harness analyses), no page imports an experiment, and neither an
analysis nor a page loads torch (reading a result needs no measuring code); and no chapter imports the
registry or anything else in ``book/`` (the book finds the chapters, a chapter never finds another: it
reads other chapters only through the facts their result files export).

``python -m datajourney.book.contracts`` writes the contracts to a temporary import-linter
configuration and runs ``lint-imports`` on it (``./journey test`` does); :func:`config` is the text and
:func:`lint` runs it on a package root (a copy of the package, in the tests).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from datajourney.book.registry import CHAPTERS
from datajourney.core.paths import REPO_ROOT

LAYERS = ("datajourney.cli", "datajourney.book", "datajourney.chapters", "datajourney.toolkit", "datajourney.core")


def config() -> str:
    """An import-linter INI configuration holding the book's contracts."""
    def block(items) -> str:
        return "".join(f"\n    {i}" for i in items)

    chapters = [c.package for c in CHAPTERS]
    here = Path(__file__).resolve().parents[1] / "chapters"

    def pieces(name: str) -> list[str]:
        """Each chapter's module ``name`` (``experiment``, ``analysis``, ``page``) where the chapter has one."""
        return [f"{p}.{name}" for p in chapters if (here / p.split(".")[2] / f"{name}.py").is_file()]

    experiments, analyses, pages = pieces("experiment"), pieces("analysis"), pieces("page")
    forbidden = [  # (id, name, source modules, forbidden modules)
        ("words", "Experiments and analyses compute and never word: no page, no phrasing",
         experiments + analyses, pages + ["datajourney.core.phrasing"]),
        ("analysis-experiment", "An analysis reads a result, never its experiment", analyses, experiments),
        ("experiment-analysis", "An experiment only measures: it never imports an analysis (the harness analyses)",
         experiments, analyses),
        ("page-experiment", "A page words facts and never imports an experiment", pages, experiments),
        ("chapter-registry", "No chapter imports the registry or anything in book/ (other chapters are read through "
         "exported facts)", ["datajourney.chapters"], ["datajourney.book.registry", "datajourney.book"]),
        ("no-torch", "Analyses and pages read results without torch", analyses + pages, ["torch"]),
    ]
    text = f"""[importlinter]
root_package = datajourney
include_external_packages = True

[importlinter:contract:layers]
name = Layers: imports only point down (cli and book over chapters over toolkit over core)
type = layers
layers ={block(LAYERS)}

[importlinter:contract:independence]
name = Chapters are independent of one another (chapter 12 reads facts from result files, not code)
type = independence
modules ={block(chapters)}
"""
    for key, name, sources, banned in forbidden:
        text += (f"\n[importlinter:contract:{key}]\nname = {name}\ntype = forbidden\nsource_modules ={block(sources)}"
                 f"\nforbidden_modules ={block(banned)}\n")
    # taking a fingerprint asks torch for the GPU inside the function that does it; reading one does not
    return text + f"ignore_imports ={block(['datajourney.core.fingerprint -> torch'])}\n"


def lint(root: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """``lint-imports`` with :func:`config` on the package under ``root`` (its output captured)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ini", prefix="importlinter-", delete=False) as f:
        f.write(config())
    try:
        lint_imports = Path(sys.executable).with_name("lint-imports")
        env = {**os.environ, "PYTHONPATH": str(root)}
        return subprocess.run([str(lint_imports), f.name, "--no-cache"], cwd=root, env=env,
                              capture_output=True, text=True)
    finally:
        Path(f.name).unlink(missing_ok=True)


def main() -> int:
    out = lint()
    print(out.stdout, end="")
    print(out.stderr, end="", file=sys.stderr)
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
