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
    llm_tokens_per_s: float | None = None
    """a token demand to state instead of measuring one (tokens per second; None: time a GPT-2 step here)"""
    token_model: str = "auto"
    """the GPT-2 shape timed: gpt2 (124M), tiny, or auto (gpt2 on a GPU, tiny on a CPU)"""
    token_seq_len: int = 1024
    """tokens per row of the timed batch"""
    token_steps: int = 10
    """timed training steps of the token model (after two untimed ones)"""
    token_bytes: int = 4
    """bytes per stored token id (2 for uint16, 4 for int32)"""
    tokens_per_batch: int = 131072
    """tokens per batch copied to the GPU and trained on (e.g. 128 rows of 1,024)"""
    diagnose: object = None
    """a run directory to diagnose (None: this run, run_dir)"""
