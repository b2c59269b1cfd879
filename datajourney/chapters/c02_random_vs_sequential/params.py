"""Chapter 2's parameters: the one place their defaults live, each declared once with its range.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every
declared range before any work, and the experiment's ``preflight`` adds the checks that span fields."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param
from datajourney.toolkit.datasets import MAX_BYTES, MAX_FILES
from datajourney.toolkit.pagecache import METHODS
from datajourney.toolkit.reads import CACHE_STATES

#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "02_random_vs_sequential"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 2."""
    n_files: int = param(2000, "files in the headline data set", minimum=1, maximum=MAX_FILES)
    file_size: int = param(16384, "bytes per file (S); also the sequential chunk of the headline",
                           minimum=1, maximum=1 << 30, unit="bytes")
    runs: int = param(3, "timed runs per configuration", minimum=1, maximum=1000)
    cache_states: list[str] = param(["cold", "warm"], "cache states to time: cold (purged) and warm (read once)",
                                    kind="str_list", choices=CACHE_STATES)
    purge_method: str = param("auto", "auto: drop_caches when root, else per-file fadvise; or drop_caches, fadvise",
                              choices=METHODS)
    size_sweep: list[int] = param([4096, 65536, 1048576],
                                  "file sizes S for the sweep, each data set holding sweep_bytes ([]: skip)",
                                  kind="int_list", maximum=1 << 30, unit="bytes")
    sweep_bytes: int = param(33554432, "bytes per data set in the size sweep", minimum=1, maximum=MAX_BYTES,
                             unit="bytes")
    shard_size: int = param(268435456, "the long shard: read-size sweep, latency check, dd check",
                            minimum=1, maximum=MAX_BYTES, unit="bytes")
    chunk_sweep: list[int] = param([4096, 65536, 1048576, 4194304], "sequential read sizes, multiples of 512",
                                   minimum=512, maximum=1 << 30, unit="bytes")
    chunk_runs: int = param(3, "runs of the read-size sweep, its order shuffled in every run (not set: runs)",
                            minimum=1, maximum=1000, optional=True)
    odirect: bool = param(True, "also read with O_DIRECT (bypasses the page cache)")
    odirect_max_bytes: int = param(67108864, "O_DIRECT reads at most this many bytes per run (small chunks are slow)",
                                   minimum=1, maximum=MAX_BYTES, unit="bytes")
    latency_reads: int = param(1000, "cold 4 KiB O_DIRECT reads per pass in the latency check (0: skip it)",
                               minimum=0, maximum=1_000_000)
    dd_check: bool = param(True, "compare the 1 MiB reader with dd (1 MiB blocks) after the same purge")
    compare_purge_methods: bool = param(True, "drop_caches vs fadvise on the small files (needs root)")
    seed: int = param(0, "seed of the data and of the shuffled orders", minimum=0, maximum=2**32 - 1)
    data_dir: str | None = param(None, "where data sets are generated (not set: ~/.cache/datajourney)", kind="path")
