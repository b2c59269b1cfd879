"""Chapter 6's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 6; the docstring of each field says what it sets."""
    sizes: list[int] = field(default_factory=lambda: [65536, 1048576, 16777216, 268435456])
    """bandwidth sweep"""
    repeats: int = 10
    """timed copies per point (fewer above 256 MiB); at least 3"""
    warmup: int = 3
    """untimed copies first"""
    ceiling_size: int = 268435456
    """copy size of the ceiling's rounds (pinned H2D through CuPy and PyTorch, spread over the run)"""
    overlap_sizes: list[int] = field(default_factory=lambda: [16777216, 268435456])
    """copy sizes for the overlap experiments"""
    cpu_work_ms: float = 5.0
    """Python work done while a copy runs"""
    staging_sizes: list[int] = field(default_factory=lambda: [16777216, 67108864, 268435456])
    """why pageable copies slow down"""
    kernel_ms: float = 20.0
    """matrix products a side-stream copy runs beside"""
    kernel_rounds: int = 20
    """interleaved rounds: kernel, copy, both"""
    profile_timeline: bool = True
    """read the copy/kernel overlap off a profiler timeline"""
    dip_sizes: list[int] = field(default_factory=lambda: [134217728, 268435456])
    """pageable H2D sizes copied interleaved, to decide the dip ([]: skip)"""
    dip_rounds: int = 10
    """rounds of the interleaved check (each size once per round, shuffled)"""
