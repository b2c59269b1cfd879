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
    return f"""[importlinter]
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

[importlinter:contract:words]
name = Experiments and analyses compute and never word: no page, no phrasing
type = forbidden
source_modules ={block(experiments + analyses)}
forbidden_modules ={block(pages + ["datajourney.core.phrasing"])}

[importlinter:contract:analysis-experiment]
name = An analysis reads a result, never its experiment
type = forbidden
source_modules ={block(analyses)}
forbidden_modules ={block(experiments)}

[importlinter:contract:experiment-analysis]
name = An experiment only measures: it never imports an analysis (the harness analyses)
type = forbidden
source_modules ={block(experiments)}
forbidden_modules ={block(analyses)}

[importlinter:contract:page-experiment]
name = A page words facts and never imports an experiment
type = forbidden
source_modules ={block(pages)}
forbidden_modules ={block(experiments)}

[importlinter:contract:chapter-registry]
name = No chapter imports the registry or anything in book/ (other chapters are read through exported facts)
type = forbidden
source_modules ={block(["datajourney.chapters"])}
forbidden_modules ={block(["datajourney.book.registry", "datajourney.book"])}

[importlinter:contract:no-torch]
name = Analyses and pages read results without torch
type = forbidden
source_modules ={block(analyses + pages)}
forbidden_modules ={block(["torch"])}
# taking a fingerprint asks torch for the GPU inside the function that does it; reading one does not
ignore_imports ={block(["datajourney.core.fingerprint -> torch"])}
"""


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
