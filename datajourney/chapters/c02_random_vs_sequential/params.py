"""Chapter 2's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 2; the docstring of each field says what it sets."""
    n_files: int = 2000
    """files in the headline data set"""
    file_size: int = 16384
    """bytes per file (S); also the sequential chunk of the headline"""
    runs: int = 3
    """timed runs per configuration"""
    cache_states: list[str] = field(default_factory=lambda: ["cold", "warm"])
    purge_method: object = "auto"
    """auto: drop_caches when root, else per-file fadvise; or "drop_caches", "fadvise" """
    size_sweep: list[int] = field(default_factory=lambda: [4096, 65536, 1048576])
    """file sizes S for the sweep (each data set holds sweep_bytes)"""
    sweep_bytes: int = 33554432
    """bytes per data set in the size sweep"""
    shard_size: int = 268435456
    """the long shard: read-size sweep, latency check, dd check"""
    chunk_sweep: list[int] = field(default_factory=lambda: [4096, 65536, 1048576, 4194304])
    """sequential read sizes"""
    chunk_runs: int = 3
    """runs of the read-size sweep (its order is shuffled in every run)"""
    odirect: bool = True
    """also read with O_DIRECT (bypasses the page cache)"""
    odirect_max_bytes: int = 67108864
    """O_DIRECT reads at most this many bytes per run (small chunks are slow)"""
    latency_reads: int = 1000
    """cold 4 KiB O_DIRECT reads per pass in the latency check (0: skip it)"""
    dd_check: bool = True
    """compare the 1 MiB reader with dd (1 MiB blocks) after the same purge"""
    compare_purge_methods: bool = True
    """drop_caches vs fadvise on the small files (needs root)"""
    seed: int = 0
    data_dir: object = None
    """where data sets are generated (default: ~/.cache/datajourney)"""
