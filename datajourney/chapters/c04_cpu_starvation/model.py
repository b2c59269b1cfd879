"""Chapter 4's model of a loader that keeps up or not (see :mod:`.experiment`'s docstring): each sample costs
``D`` ms, a batch holds ``B``, ``W`` workers, a step of ``G`` ms. Pure arithmetic the experiment, the analysis,
the page and the charts share, so the measuring code is not needed to read a result."""
from __future__ import annotations

import math

from datajourney.core.answers import KEEPS_UP

#: MLPerf Storage counts a configuration as keeping up at AU at or above this share (the book's one bar).
AU_THRESHOLD = KEEPS_UP


def predicted_wait_ms(d_ms: float, b: int, w: int, g_ms: float) -> float:
    """Data wait per step that the simple model predicts (see the module docstring)."""
    if w == 0:
        return d_ms * b
    return max(0.0, d_ms * b / w - g_ms)


def predicted_au(d_ms: float, b: int, w: int, g_ms: float) -> float:
    return g_ms / (g_ms + predicted_wait_ms(d_ms, b, w, g_ms))


def workers_needed(d_ms: float, b: int, g_ms: float, threshold: float = AU_THRESHOLD) -> int:
    """The fewest workers for which the model's AU reaches ``threshold``."""
    # AU = G / (G + D·B/W − G) ≥ t  <=>  W ≥ t·D·B / G  (for W ≥ 1)
    return max(1, math.ceil(threshold * d_ms * b / g_ms - 1e-9))
