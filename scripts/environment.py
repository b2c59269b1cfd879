"""Write environment.yml (the conda environment) from pyproject.toml, so the two never disagree.

conda provides Python and pip; every package comes from pyproject.toml through one editable
pip install of the checkout with the extras below. ``--check`` compares instead of writing
(exit 1 when environment.yml is stale; a test runs it).

usage: python scripts/environment.py [--check]
"""
from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "environment.yml"
PYTHON = "3.12"
#: The extras a conda user gets: the book and JupyterLab, chapter 8's SPDL (with FFmpeg from the av
#: wheel) and chapter 10's DFTracer. The text data travel with the checkout (data/text/).
EXTRAS = ("book", "ch8", "ch10")


def render(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The text of environment.yml for ``pyproject``; an extra it lacks is an error."""
    project = tomllib.loads(pyproject.read_text())["project"]
    missing = [e for e in EXTRAS if e not in project.get("optional-dependencies", {})]
    if missing:
        raise SystemExit(f"{pyproject}: [project.optional-dependencies] has no {', '.join(missing)}")
    return "\n".join([
        "# Generated from pyproject.toml by scripts/environment.py: edit pyproject.toml, then run it.",
        "# conda env create -f environment.yml && conda activate datajourney",
        "# torch comes from PyPI (the CUDA build on Linux). Without a GPU, take the CPU build first:",
        "#   conda create -n datajourney python=3.12 pip && conda activate datajourney",
        "#   pip install torch --index-url https://download.pytorch.org/whl/cpu",
        "#   conda env update -n datajourney -f environment.yml",
        f"name: {project['name']}",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={PYTHON}",
        "  - pip",
        "  - pip:",
        f"      - -e .[{','.join(EXTRAS)}]",
        "",
    ])


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        if TARGET.is_file() and TARGET.read_text() == text:
            return 0
        print(f"{TARGET.name} differs from what scripts/environment.py writes: run it", file=sys.stderr)
        return 1
    if argv:
        print("usage: environment.py [--check]", file=sys.stderr)
        return 2
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
