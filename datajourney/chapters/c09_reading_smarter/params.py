"""Chapter 9's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 9; the docstring of each field says what it sets."""
    file_size: int = 268435456
    """one file of random bytes read by every experiment (a verified data set)"""
    request_sizes: list[int] = field(default_factory=lambda: [4096, 65536, 1048576, 4194304])
    """experiment 1: pread sizes"""
    threads: list[int] = field(default_factory=lambda: [1, 4, 16])
    """experiment 1: threads, each with one request in flight (the asked queue depth)"""
    modes: list[str] = field(default_factory=lambda: ["buffered", "O_DIRECT"])
    runs: int = 2
    """every measurement is repeated, cold, in a shuffled order"""
    cell_seconds: float = 0.2
    """experiment 1: time per (size, threads, mode) cell"""
    cell_max_bytes: int = 67108864
    """... or this many bytes, whichever comes first"""
    random_reads: int = 5000
    """experiment 3: 4 KiB reads at random offsets"""
    pool_threads: list[int] = field(default_factory=lambda: [4, 16])
    """experiment 3: thread-pool sizes"""
    uring_depths: list[int] = field(default_factory=lambda: [1, 16, 64])
    """experiment 3: io_uring queue depths (needs the ch9 extra; [] skips it)"""
    random_seconds: float = 0.5
    """experiments 2-3: time cap per random-read measurement"""
    readahead_sysfs: str = "off"
    """experiment 2: "auto" (root: change read_ahead_kb, always restored), "on", "off" """
    readahead_kb: list[int] = field(default_factory=lambda: [128, 1024])
    """experiment 2: values to set (the device's own value is added)"""
    fadvise: list[str] = field(default_factory=lambda: ["none", "SEQUENTIAL", "RANDOM", "WILLNEED"])
    """experiment 2: per-file hints (no root needed)"""
    seq_chunk: int = 131072
    """experiment 2: sequential read size"""
    seq_bytes: int = 134217728
    """experiment 2: bytes per sequential read"""
    gpu: object = "auto"
    """experiment 4: "auto" (when CUDA is there) or "off" """
    gpu_chunk: int = 8388608
    """experiment 4: staging-buffer size of paths (a) and (c)"""
    path_b_chunk: object = "auto"
    """experiment 4: path (b)'s chunk in bytes, or "auto" (the sweep's best)"""
    path_b_buffers: object = "auto"
    """experiment 4: path (b)'s pinned buffers, or "auto" (the sweep's best)"""
    path_b_mode: object = "auto"
    """experiment 4: path (b)'s reads, "buffered", "O_DIRECT" or "auto" (the sweep's best)"""
    gpu_sweep_chunks: list[int] = field(default_factory=lambda: [4194304, 16777216])
    """experiment 4: path (b) chunk sizes swept (with CUDA), before path (b) is measured"""
    gpu_sweep_buffers: list[int] = field(default_factory=lambda: [2, 4])
    """experiment 4: pinned buffers swept"""
    gpu_sweep_modes: list[str] = field(default_factory=lambda: ["buffered", "O_DIRECT"])
    """experiment 4: read modes of the sweep ([] skips it)"""
    gpu_sweep_runs: int = 2
    """experiment 4: runs of the sweep, each with its own dd ceiling"""
    kvikio_threads: list[int] = field(default_factory=lambda: [4])
    """experiment 4: kvikio thread-pool sizes"""
    kvikio_task: int = 4194304
    """experiment 4: kvikio task size"""
    latency_reads: int = 1000
    """experiment 6: QD1 4 KiB O_DIRECT reads per pass (0: skip)"""
    purge_method: object = "auto"
    """"auto", "drop_caches" (root) or "fadvise" """
    seed: int = 0
    data_dir: object = None
    """where the data set lives (default: $DATAJOURNEY_DATA_DIR or ~/.cache/datajourney)"""
