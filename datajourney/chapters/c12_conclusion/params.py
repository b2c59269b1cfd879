"""Chapter 12's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 12; the docstring of each field says what it sets."""
    llm_tokens_per_s: float = 1000000.0
    """what a hypothetical token-based step asks for (tokens per second)"""
    token_bytes: int = 4
    """bytes per stored token id (2 for uint16, 4 for int32)"""
    tokens_per_batch: int = 131072
    """tokens per batch copied to the GPU (e.g. 32 rows of 4,096)"""
    diagnose: object = None
    """a run directory to diagnose (None: this run, run_dir)"""
