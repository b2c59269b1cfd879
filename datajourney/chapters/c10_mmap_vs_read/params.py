"""Chapter 10's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 10; the docstring of each field says what it sets."""
    dataset_bytes: int = 268435456
    """token data set (.bin), uint16 tokens"""
    seq_lengths: list[int] = field(default_factory=lambda: [512, 1024, 2048])
    """tokens per sample (each sample reads seq_length + 1)"""
    batch_sizes: list[int] = field(default_factory=lambda: [32, 64, 128])
    """samples per step (the global batch of one process)"""
    steps: int = 3
    """batches timed per configuration (the first includes starting the loader)"""
    runs: int = 2
    """repetitions of the whole sweep (different samples each run)"""
    cache_states: list[str] = field(default_factory=lambda: ["cold", "warm"])
    """cold: page cache purged and checked before each configuration"""
    workers: list[int] = field(default_factory=lambda: [0, 2, 4])
    """DataLoader num_workers sweep, at one point:"""
    workers_seq_length: int = 2048
    workers_batch_size: int = 64
    posix_view: object = "auto"
    """DFTracer's LD_PRELOAD view: "auto" (when it loads), "on", "off" """
    overhead_rounds: int = 3
    """paired rounds of tracing off / POSIX / app / both"""
    overhead_seq_length: int = 2048
    overhead_batch_size: int = 64
    checkpoint_sizes: list[int] = field(default_factory=lambda: [67108864, 268435456])
    """model states saved with torch.save and DCP"""
    checkpoint_runs: int = 2
    posix_checkpoint_bytes: int = 16777216
    """checkpoint written after every point under the POSIX view"""
    purge_method: str = "fadvise"
    """"fadvise" (the data set's .bin only), "drop_caches" (root) or "auto" """
    seed: int = 0
    data_dir: object = None
    """where the data set lives (default: $DATAJOURNEY_DATA_DIR)"""
