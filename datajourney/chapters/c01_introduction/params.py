"""Chapter 1's parameters: the one place their defaults live (each declared once with :func:`param`)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param

#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "01_introduction"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 1."""
    data_dir: object = param(None, "describe the storage under this directory (default: the data-set directory)",
                             kind="path")
