"""The twelve chapters: number, notebook name and title. The runner and the book use this list."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    title: str
    #: module with ``preflight(params)``, run by the runner before the notebook starts
    module: str | None = None

    @property
    def name(self) -> str:
        """File stem and result-file name, e.g. ``02_random_vs_sequential``."""
        return f"{self.number:02d}_{self.slug}"

    @property
    def page(self) -> str | None:
        """The module that turns this chapter's result into findings, notes and tables."""
        return self.module.replace("datajourney.", "datajourney.book.pages.", 1) if self.module else None

    @property
    def notebook(self) -> Path:
        return NOTEBOOK_DIR / f"{self.name}.ipynb"

    @property
    def available(self) -> bool:
        return self.notebook.exists()


CHAPTERS = [
    Chapter(1, "introduction", "Introduction: the journey and your machine"),
    Chapter(2, "random_vs_sequential", "Random vs sequential reads", "datajourney.storage"),
    Chapter(3, "dataloader", "The DataLoader hides the problem", "datajourney.loader"),
    Chapter(4, "cpu_starvation", "CPU starvation", "datajourney.starvation"),
    Chapter(5, "padding_tax", "The padding tax", "datajourney.padding"),
    Chapter(6, "pcie", "Crossing PCIe", "datajourney.pcie"),
    Chapter(7, "full_picture", "The full picture", "datajourney.training"),
    Chapter(8, "threads_processes_gil", "Threads, processes and the GIL", "datajourney.gil"),
    Chapter(9, "reading_smarter", "Reading smarter", "datajourney.reading"),
    Chapter(10, "mmap_vs_read", "Tracing the I/O: mmap vs read()", "datajourney.tracing"),
    Chapter(11, "gpu_to_gpu", "GPU to GPU", "datajourney.ddp"),
    Chapter(12, "conclusion", "Your pipeline, diagnosed", "datajourney.diagnosis"),
]


def lookup(key: str) -> Chapter:
    """A chapter by number ('2', '02'), slug ('random_vs_sequential') or name ('02_random_vs_sequential')."""
    k = str(key).strip().removesuffix(".ipynb")
    for c in CHAPTERS:
        if k in (str(c.number), f"{c.number:02d}", c.slug, c.name):
            return c
    names = ", ".join(f"{c.number} ({c.slug})" for c in available())
    raise KeyError(f"unknown chapter {key!r}; available: {names}")


def available() -> list[Chapter]:
    """Chapters whose notebook exists in this checkout."""
    return [c for c in CHAPTERS if c.available]
