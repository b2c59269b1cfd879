"""Chapter 3's parameters: the one place their defaults live, each declared once with its range.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every
declared range before any work, and the experiment's ``preflight`` adds the checks that span fields
or depend on this machine (its core count, memory, the data directory)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param
from datajourney.toolkit.datasets import MAX_FILES
from datajourney.toolkit.pagecache import METHODS
from datajourney.toolkit.reads import CACHE_STATES

#: The most workers a sweep may ask for on this machine (four per core, at least 64).
MAX_WORKERS = max(64, 4 * (os.cpu_count() or 1))

#: The layouts timed: one file per sample, one shard read shuffled, one shard read in order.
KINDS = ("small_files", "shard", "shard_in_order")
#: A main process busy at least this share of the steady state is the bottleneck: it
#: cannot take batches any faster, however many workers prepare them.
MAIN_BOUND_SHARE = 0.85


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "03_dataloader"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 3."""
    n_files: int = param(10000, "samples (one file each, and the same bytes in one shard)", minimum=1,
                         maximum=MAX_FILES)
    file_size: int = param(4096, "bytes per sample", minimum=1, maximum=1 << 30, unit="bytes")
    batch_size: int = param(64, "samples per batch (at most n_files)", minimum=1, maximum=1 << 20)
    workers: list[int] = param([0, 1, 2, 4], "num_workers values to sweep (0: load in the main process)", minimum=0,
                               maximum=MAX_WORKERS)
    cache_states: list[str] = param(["cold", "warm"], "cache states to time: cold (purged) and warm (read once)",
                                    kind="str_list", choices=CACHE_STATES)
    runs: int = param(2, "epochs per configuration", minimum=1, maximum=1000)
    purge_method: str = param("auto", "auto: drop_caches when root, else per-file fadvise; or drop_caches, fadvise",
                              choices=METHODS)
    transfer_batch_sizes: list[int] = param([16, 64, 256, 1024],
                                            "batch sizes of the worker-to-main hand-over check ([]: skip)",
                                            kind="int_list")
    latency_reads: int = param(1000, "cold 4 KiB O_DIRECT reads per pass in the latency check (0: skip it)",
                               minimum=0, maximum=1_000_000)
    handover_workers: int = param(4, "workers of the plateau check: one warm epoch per way of handing a batch over "
                                     "(0: skip)", minimum=0, maximum=MAX_WORKERS)
    seed: int = param(0, "seed of the data and of the shuffled orders", minimum=0, maximum=2**32 - 1)
    data_dir: str | None = param(None, "where the data set is generated (not set: ~/.cache/datajourney)", kind="path")
    image_dir: object = param(None, "your own images instead of generated ones: a folder of JPEG or PNG files "
                                    "(ImageFolder tree or flat), only ever read (not set: the book's generated data)",
                              kind="path")
