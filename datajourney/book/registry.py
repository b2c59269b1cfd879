"""The chapters, found from their folders: ``datajourney/chapters/cNN_slug/`` with its notebook
``notebooks/NN_slug.ipynb``. The runner, the book and the tests use this list; adding a chapter
is one folder, one notebook and one line of ``_toc.yml``.

Every chapter folder holds the same pieces, one protocol (see :data:`PIECES`): ``__init__.py``
with its ``TITLE``; ``params.py`` with ``CHAPTER`` (its name) and ``Params`` (each parameter declared once);
``experiment.py`` with ``preflight(params) -> Plan`` and ``measure(plan, context)`` (it only measures: the harness,
:mod:`datajourney.book.harness`, starts, analyses and saves the result); ``analysis.py`` with
``analyse(result) -> Facts`` (pure, no prose) and ``EXPORTS`` (the fact keys other pages may read);
``page.py`` with ``opening(facts)`` and ``findings(facts)`` (it only words facts). The pieces are
checked by their attributes (:meth:`Chapter.verify`). Chapter 12 and the front page read other
chapters' *facts* from result files, never their modules.

The registry is book machinery: no chapter imports it (a contract says so). Importing it loads no chapter
package: the folders are found by name, and a chapter's modules (its title too) are imported when asked for.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from datajourney.core.paths import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
CHAPTER_DIR = Path(__file__).resolve().parents[1] / "chapters"
#: The package that holds the chapter folders.
CHAPTERS_PACKAGE = "datajourney.chapters"
#: The files every chapter folder holds, and the names each must define.
PIECES = {"__init__.py": ("TITLE",), "params.py": ("CHAPTER", "Params"),
          "experiment.py": ("preflight", "measure"), "analysis.py": ("analyse", "EXPORTS"),
          "page.py": ("opening", "findings")}
_FOLDER = re.compile(r"^c(\d{2})_([a-z0-9_]+)$")


class ChapterError(RuntimeError):
    """A chapter folder lacks a piece of the chapter interface; the message names it."""


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    #: the chapter's package, e.g. ``datajourney.chapters.c02_random_vs_sequential``
    package: str

    def _says(self, name: str, default=None):
        """What the chapter's package sets ``name`` to (``default`` where it sets nothing)."""
        return getattr(importlib.import_module(self.package), name, default)

    @property
    def title(self) -> str:
        """The chapter's title (its package's ``TITLE``)."""
        return importlib.import_module(self.package).TITLE

    @property
    def measures(self) -> bool:
        """Whether it measures anything (chapter 1 shows the machine's fingerprint only: its ``preflight``
        has nothing to check and the runner need not call it); the package's ``MEASURES``, True unless it says."""
        return self._says("MEASURES", True)

    @property
    def diagnosed(self) -> bool:
        """Whether the diagnosis (chapter 12) reads this chapter's exported facts: every chapter that measures a
        hop, unless its package says ``DIAGNOSED = False`` (chapter 1: the machine, not a hop)."""
        return self._says("DIAGNOSED", True)

    @property
    def headline(self) -> tuple[str, str] | None:
        """The chapter's key result for the front page: its package's ``HEADLINE``, (fact key, or ``?`` + a
        question's key; what it measures), or None when it names none."""
        h = self._says("HEADLINE")
        return tuple(h) if h else None

    @property
    def min_gpus(self) -> int:
        """The GPUs a host needs to run the chapter (its package's ``MIN_GPUS``; 0 when it says none)."""
        return int(self._says("MIN_GPUS", 0))

    @property
    def exports(self) -> tuple[str, ...]:
        """The fact and question keys the chapter's analysis exports to other pages (its ``EXPORTS``)."""
        return tuple(self.piece("analysis").EXPORTS)

    @property
    def name(self) -> str:
        """File stem and result-file name, e.g. ``02_random_vs_sequential``."""
        return f"{self.number:02d}_{self.slug}"

    @property
    def module(self) -> str | None:
        """The experiment module (``preflight``, ``measure``); the runner calls its preflight before any notebook."""
        return f"{self.package}.experiment" if self.measures else None

    @property
    def page(self) -> str:
        """The module that words this chapter's facts: opening, findings, notes and tables."""
        return f"{self.package}.page"

    def piece(self, name: str):
        """One of the chapter's modules (``experiment``, ``analysis``, ``page``), imported."""
        return importlib.import_module(f"{self.package}.{name}")

    def analyse(self, result):
        """The chapter's facts for ``result`` (its ``analysis.analyse``), with what it read of the reader's own
        data (``image_dir``, ``token_path``) as the fact ``your_data`` where it read any."""
        from datajourney.chapters.common import your_data_fact

        facts = self.piece("analysis").analyse(result)
        if facts is not None and facts.get("your_data") is None:
            facts.add(your_data_fact(result))
        return facts

    def verify(self) -> list[str]:
        """What the chapter's modules lack of the protocol, by attribute (empty when complete)."""
        out = []
        for piece, names in PIECES.items():
            mod = importlib.import_module(self.package) if piece == "__init__.py" else self.piece(piece[:-3])
            out += [f"{piece}: {n}" for n in names if not hasattr(mod, n)]
        return out

    @property
    def params(self):
        """The chapter's ``Params`` dataclass: every parameter's one default, type and check."""
        return self.piece("params").Params

    @property
    def notebook(self) -> Path:
        return NOTEBOOK_DIR / f"{self.name}.ipynb"

    @property
    def available(self) -> bool:
        return self.notebook.exists()


def missing_pieces(folder: Path) -> list[str]:
    """The files ``folder`` lacks of the chapter protocol, e.g. ``['analysis.py']`` (the names each
    must define are checked by attribute, :meth:`Chapter.verify`)."""
    return [piece for piece in PIECES if not (folder / piece).is_file()]


def discover(root: Path = CHAPTER_DIR) -> list[Chapter]:
    """The chapters under ``root``, in order, found by their folders' names (nothing imported); a folder
    missing a piece raises :class:`ChapterError`."""
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and _FOLDER.fullmatch(p.name)):
        missing = missing_pieces(folder)
        if missing:
            raise ChapterError(f"chapter folder {folder.name} lacks {', '.join(missing)} "
                               f"(every chapter has: {', '.join(PIECES)})")
        number, slug = _FOLDER.fullmatch(folder.name).groups()
        out.append(Chapter(int(number), slug, f"{CHAPTERS_PACKAGE}.{folder.name}"))
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


def analysed(result):
    """``result`` with its facts: as stored (schema 3), else analysed now by its chapter's ``analyse`` —
    the one place an older result file is upgraded. The book layer calls this when it loads results
    for pages; chapter 12 only reads the stored facts."""
    if result is not None and result.facts is None:
        result.facts = lookup(result.chapter).analyse(result)
    return result


def sources(of: str) -> tuple[str, ...]:
    """The chapters whose exported facts chapter ``of``'s diagnosis reads: every other chapter it is not one
    of the :attr:`Chapter.diagnosed` exceptions of, in order (a new chapter folder is among them)."""
    me = lookup(of).name
    return tuple(c.name for c in CHAPTERS if c.name != me and c.diagnosed)


def available() -> list[Chapter]:
    """Chapters whose notebook exists in this checkout."""
    return [c for c in CHAPTERS if c.available]
