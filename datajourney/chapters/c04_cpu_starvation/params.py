"""Chapter 4's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 4; the docstring of each field says what it sets."""
    d_ms: float = 5.0
    """D: CPU cost per sample of the sleep work; the real work is sized to cost about the same"""
    batch_size: int = 32
    """B"""
    g_ms: float = 50.0
    """G: the step's target time, calibrated back-to-back (steady state)"""
    workers: object = "auto"
    """W values for the sweep: a list, or "auto" (0, 1, 2, 4, ... up to the usable cores)"""
    published_workers: list[int] = field(default_factory=lambda: [0, 4])
    """W values of the published case"""
    steps: int = 20
    """timed steps per configuration (after the warm-up steps)"""
    warmup_steps: int = 3
    """steps left out of the steady-state means (the first batch is reported apart)"""
    work_kinds: list[str] = field(default_factory=lambda: ["sleep", "tokenize", "decode"])
    """per-sample work for the sweep"""
    real_work_scale: int = 0
    """tokenize: text repeats; decode: image side in 16 px; 0: calibrate so D is about d_ms"""
    calibration_s: float = 3.0
    """seconds of back-to-back steps in each of the two calibration traces"""
    idle_gaps_ms: list[int] = field(default_factory=lambda: [0, 10, 30, 100, 170])
    """idle gaps before a step (the controlled experiment, no DataLoader)"""
    idle_repeats: int = 6
    """trials per gap, all gaps interleaved in a seeded random order"""
    idle_conditioning_steps: int = 8
    """back-to-back steps before each gap (the sustained state)"""
    prefetch_factors: list[int] = field(default_factory=lambda: [1, 2, 4])
    """prefetch_factor values of the balanced case (D·B/W just under G)"""
    prefetch_workers: int = 4
    """W of the balanced case"""
    prefetch_runs: int = 3
    """runs of each (cost profile, prefetch_factor)"""
    boundary_workers: int = 4
    """workers for the epoch-boundary experiment"""
    steps_per_epoch: int = 8
    """steps per epoch in the epoch-boundary experiment (two epochs are run)"""
    boundary_runs: int = 3
    """runs of the epoch-boundary experiment (with and without persistent workers)"""
    dataset_path: object = None
    """Alpaca JSON for the tokenize work (default: offline copy, else the hub)"""
    tokenizer_dir: object = None
    """directory with GPT-2 vocab.json and merges.txt (default: offline copy, else the hub)"""
    seed: int = 0
