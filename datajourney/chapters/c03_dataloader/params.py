"""Chapter 3's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 3; the docstring of each field says what it sets."""
    n_files: int = 10000
    """samples (one file each, and the same bytes in one shard)"""
    file_size: int = 4096
    """bytes per sample"""
    batch_size: int = 64
    workers: list[int] = field(default_factory=lambda: [0, 1, 2, 4])
    """num_workers values to sweep (0: load in the main process)"""
    cache_states: list[str] = field(default_factory=lambda: ["cold", "warm"])
    runs: int = 2
    """epochs per configuration"""
    purge_method: object = "auto"
    """auto: drop_caches when root, else per-file fadvise"""
    transfer_batch_sizes: list[int] = field(default_factory=lambda: [16, 64, 256, 1024])
    """batch sizes of the worker-to-main hand-over check ([]: skip)"""
    latency_reads: int = 1000
    """cold 4 KiB O_DIRECT reads per pass in the latency check (0: skip it)"""
    handover_workers: int = 4
    """workers of the plateau check: one warm epoch per way of handing a batch over (0: skip)"""
    seed: int = 0
    data_dir: object = None
    """where the data set is generated (default: ~/.cache/datajourney)"""
