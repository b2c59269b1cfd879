"""Chapter 10's parameters: the one place their defaults live, each declared once with its range.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every
declared range before any work, and the experiment's ``preflight`` adds the checks that span fields
(samples that fit the data set, memory, free space, the tracer's library)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param
from datajourney.toolkit.datasets import MAX_BYTES
from datajourney.toolkit.pagecache import METHODS

CACHE_STATES = ("cold", "warm")
POSIX_OPTIONS = ("auto", "on", "off")


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "10_mmap_vs_read"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 10."""
    dataset_bytes: int = param(268435456, "token data set (.bin), uint16 tokens (at least 1 MiB)", minimum=1 << 20,
                               maximum=MAX_BYTES, unit="bytes")
    seq_lengths: list[int] = param([512, 1024, 2048], "tokens per sample (each sample reads seq_length + 1)",
                                   kind="int_list", minimum=1, maximum=1 << 20)
    batch_sizes: list[int] = param([32, 64, 128], "samples per step (the global batch of one process)",
                                   kind="int_list", minimum=1, maximum=1 << 16)
    steps: int = param(3, "batches timed per configuration (the first includes starting the loader)", minimum=2,
                       maximum=10_000)
    runs: int = param(2, "repetitions of the whole sweep (different samples each run)", minimum=1, maximum=100)
    cache_states: list[str] = param(["cold", "warm"], "cold: page cache purged and checked before each "
                                    "configuration", kind="str_list", choices=CACHE_STATES)
    workers: list[int] = param([0, 2, 4], "DataLoader num_workers sweep, at one point (workers_seq_length, "
                               "workers_batch_size)", kind="int_list", minimum=0, maximum=1024)
    workers_seq_length: int = param(2048, "the workers sweep's sequence length", minimum=1, maximum=1 << 20)
    workers_batch_size: int = param(64, "the workers sweep's batch size", minimum=1, maximum=1 << 16)
    posix_view: str = param("auto", "DFTracer's LD_PRELOAD view: auto (when it loads), on, off",
                            choices=POSIX_OPTIONS)
    overhead_rounds: int = param(3, "paired rounds of tracing off / POSIX / app / both", minimum=0, maximum=100)
    overhead_seq_length: int = param(2048, "the overhead rounds' sequence length", minimum=1, maximum=1 << 20)
    overhead_batch_size: int = param(64, "the overhead rounds' batch size", minimum=1, maximum=1 << 16)
    checkpoint_sizes: list[int] = param([67108864, 268435456], "model states saved with torch.save and DCP ([]: "
                                        "none)", kind="int_list", maximum=1 << 40, unit="bytes")
    checkpoint_runs: int = param(2, "runs of each checkpoint write", minimum=1, maximum=100)
    posix_checkpoint_bytes: int = param(16777216, "checkpoint written after every point under the POSIX view",
                                        minimum=1, maximum=1 << 34, unit="bytes")
    purge_method: str = param("fadvise", "fadvise (the data set's .bin only), drop_caches (root) or auto",
                              choices=METHODS)
    seed: int = param(0, "seed of the data set and of the samples drawn", minimum=0, maximum=2**32 - 1)
    data_dir: object = param(None, "where the data set lives (not set: ~/.cache/datajourney)", kind="path",
                             optional=True)
    token_path: object = param(None, "your own tokens instead of the book's: a Megatron .bin/.idx pair or a folder "
                                     "of Parquet, Arrow or JSONL text, only ever read (not set: the book's data)",
                               kind="path")
