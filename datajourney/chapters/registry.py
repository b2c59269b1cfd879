"""The chapters, found from their folders: ``datajourney/chapters/cNN_slug/`` with its notebook
``notebooks/NN_slug.ipynb``. The runner, the book and chapter 12 use this list; adding a chapter
is one folder, one notebook and one line of ``_toc.yml``.

Every chapter folder holds the same pieces (see :data:`PIECES`): ``__init__.py`` with its
``TITLE``, ``params.py`` with its ``Params`` (the one set of defaults), ``experiment.py`` with
``run(params)`` and ``preflight(params)``, and ``page.py`` (what its page says: ``findings(result)`` where it measures).
A folder
that lacks one fails with a message naming it.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from datajourney.core.paths import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
CHAPTER_DIR = Path(__file__).resolve().parent
#: The files every chapter folder holds, and the names each must define.
PIECES = {"__init__.py": ("TITLE",), "params.py": ("Params",), "experiment.py": ("CHAPTER", "run"),
          "page.py": ()}
_FOLDER = re.compile(r"^c(\d{2})_([a-z0-9_]+)$")


class ChapterError(RuntimeError):
    """A chapter folder lacks a piece of the chapter interface; the message names it."""


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    title: str
    #: the chapter's package, e.g. ``datajourney.chapters.c02_random_vs_sequential``
    package: str
    #: whether its experiment checks parameters before work (chapter 1 measures nothing to check)
    measures: bool = True

    @property
    def name(self) -> str:
        """File stem and result-file name, e.g. ``02_random_vs_sequential``."""
        return f"{self.number:02d}_{self.slug}"

    @property
    def module(self) -> str | None:
        """The experiment module (``run``, ``preflight``), run by the runner before the notebook starts."""
        return f"{self.package}.experiment" if self.measures else None

    @property
    def page(self) -> str | None:
        """The module that turns this chapter's result into findings, notes and tables."""
        return f"{self.package}.page" if self.measures else None

    @property
    def params(self):
        """The chapter's ``Params`` dataclass: every parameter's one default, type and check."""
        return importlib.import_module(f"{self.package}.params").Params

    @property
    def notebook(self) -> Path:
        return NOTEBOOK_DIR / f"{self.name}.ipynb"

    @property
    def available(self) -> bool:
        return self.notebook.exists()


def missing_pieces(folder: Path) -> list[str]:
    """What ``folder`` lacks of the chapter interface, e.g. ``['params.py', 'page.py: findings']``."""
    out = []
    for piece, names in PIECES.items():
        path = folder / piece
        if not path.is_file():
            out.append(piece)
            continue
        text = path.read_text()
        out += [f"{piece}: {n}" for n in names
                if not re.search(rf"^(def |class )?{n}\b", text, re.M)]
    return out


def discover(root: Path = CHAPTER_DIR) -> list[Chapter]:
    """The chapters under ``root``, in order; a folder missing a piece raises :class:`ChapterError`."""
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and _FOLDER.match(p.name)):
        missing = missing_pieces(folder)
        if missing:
            raise ChapterError(f"chapter folder {folder.name} lacks {', '.join(missing)} "
                               f"(every chapter has: {', '.join(PIECES)})")
        number, slug = _FOLDER.match(folder.name).groups()
        package = f"{__package__}.{folder.name}"
        title = importlib.import_module(package).TITLE
        measures = "def preflight" in (folder / "experiment.py").read_text()
        out.append(Chapter(int(number), slug, title, package, measures))
    return out


CHAPTERS = discover()


def lookup(key: str) -> Chapter:
    """A chapter by number ('2', '02'), slug ('random_vs_sequential') or name ('02_random_vs_sequential')."""
    k = str(key).strip().removesuffix(".ipynb")
    for c in CHAPTERS:
        if k in (str(c.number), f"{c.number:02d}", c.slug, c.name):
            return c
    names = ", ".join(f"{c.number} ({c.slug})" for c in available())
    raise KeyError(f"unknown chapter {key!r}; available: {names}")


def findings(name: str, result) -> list:
    """The key results chapter ``name``'s page computes from ``result`` (its declared interface to
    the chapters that summarise others: 1 and 12)."""
    return importlib.import_module(lookup(name).page).findings(result)


def export(name: str, attr: str):
    """What chapter ``name`` exports to chapter 12 in its ``hops`` module (e.g. chapter 8's
    ``photo_decode``): chapter 12 reads other chapters' results through these, never their pages."""
    c = lookup(name)
    try:
        return getattr(importlib.import_module(f"{c.package}.hops"), attr)
    except (ModuleNotFoundError, AttributeError) as e:
        raise ChapterError(f"chapter folder {c.package.rsplit('.', 1)[-1]} exports no {attr!r} in hops.py") from e


def available() -> list[Chapter]:
    """Chapters whose notebook exists in this checkout."""
    return [c for c in CHAPTERS if c.available]
