"""Chapter 9's parameters: the one place their defaults live, each declared once with its range.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every
declared range before any work, and the experiment's ``preflight`` adds the checks that span fields
(alignment for ``O_DIRECT``, sizes up to the file, free space, memory)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param
from datajourney.toolkit.pagecache import METHODS

#: Read modes of experiments 1 and 4.
MODES = ("buffered", "O_DIRECT")
READAHEAD_SYSFS = ("auto", "on", "off")
FADVISE = ("none", "SEQUENTIAL", "RANDOM", "WILLNEED")
GPU_PATHS = ("auto", "off")
#: A path (b) parameter with this value is chosen by the run's chunk x buffers x mode sweep.
AUTO = "auto"
_SIZE_MAX = 1 << 40


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "09_reading_smarter"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 9."""
    file_size: int = param(268435456, "one file of random bytes read by every experiment (a verified data set; "
                           "at least 1 MiB, a multiple of 4 KiB)", minimum=1 << 20, maximum=_SIZE_MAX, unit="bytes")
    request_sizes: list[int] = param([4096, 65536, 1048576, 4194304], "experiment 1: pread sizes",
                                     kind="int_list", minimum=512, maximum=1 << 30, unit="bytes")
    threads: list[int] = param([1, 4, 16], "experiment 1: threads, each with one request in flight (the asked "
                               "queue depth)", kind="int_list", minimum=1, maximum=1024)
    modes: list[str] = param(["buffered", "O_DIRECT"], "experiment 1: read modes", kind="str_list", choices=MODES)
    runs: int = param(2, "every measurement is repeated, cold, in a shuffled order", minimum=1, maximum=100)
    cell_seconds: float = param(0.2, "experiment 1: time per (size, threads, mode) cell", minimum=0, maximum=600,
                                unit="s")
    cell_max_bytes: int = param(67108864, "... or this many bytes, whichever comes first", minimum=1,
                                maximum=_SIZE_MAX, unit="bytes")
    random_reads: int = param(5000, "experiment 3: 4 KiB reads at random offsets", minimum=1, maximum=10_000_000)
    pool_threads: list[int] = param([4, 16], "experiment 3: thread-pool sizes", kind="int_list", minimum=2,
                                    maximum=1024)
    uring_depths: list[int] = param([1, 16, 64], "experiment 3: io_uring queue depths (needs liburing; [] "
                                    "skips it)", kind="int_list", maximum=4096)
    random_seconds: float = param(0.5, "experiments 2-3: time cap per random-read measurement", minimum=0,
                                  maximum=600, unit="s")
    readahead_sysfs: str = param("off", "experiment 2: auto (root: change read_ahead_kb, always restored), on, off",
                                 choices=READAHEAD_SYSFS)
    readahead_kb: list[int] = param([128, 1024], "experiment 2: values to set (the device's own value is added)",
                                    kind="int_list", minimum=0, maximum=1 << 20, unit="KiB")
    fadvise: list[str] = param(["none", "SEQUENTIAL", "RANDOM", "WILLNEED"], "experiment 2: per-file hints (no "
                               "root needed)", kind="str_list", choices=FADVISE)
    seq_chunk: int = param(131072, "experiment 2: sequential read size", minimum=1, maximum=1 << 30, unit="bytes")
    seq_bytes: int = param(134217728, "experiment 2: bytes per sequential read", minimum=1, maximum=_SIZE_MAX,
                           unit="bytes")
    gpu: str = param("auto", "experiment 4: auto (when CUDA is there) or off", choices=GPU_PATHS)
    gpu_chunk: int = param(8388608, "experiment 4: staging-buffer size of paths (a) and (c) (a multiple of 4 KiB)",
                           minimum=1, maximum=1 << 32, unit="bytes")
    path_b_chunk: object = param(AUTO, "experiment 4: path (b)'s chunk (a multiple of 4 KiB), or auto (the "
                                 "sweep's best)", kind="int", minimum=4096, maximum=1 << 32, unit="bytes",
                                 also=(AUTO,))
    path_b_buffers: object = param(AUTO, "experiment 4: path (b)'s pinned buffers, or auto (the sweep's best)",
                                   kind="int", minimum=2, maximum=64, also=(AUTO,))
    path_b_mode: object = param(AUTO, "experiment 4: path (b)'s reads, buffered, O_DIRECT or auto (the sweep's "
                                "best)", kind="choice", choices=MODES, also=(AUTO,))
    gpu_sweep_chunks: list[int] = param([4194304, 16777216], "experiment 4: path (b) chunk sizes swept (with "
                                        "CUDA), before path (b) is measured ([]: gpu_chunk)", kind="int_list",
                                        maximum=1 << 32, unit="bytes")
    gpu_sweep_buffers: list[int] = param([2, 4], "experiment 4: pinned buffers swept ([]: 2)", kind="int_list",
                                         maximum=64)
    gpu_sweep_modes: list[str] = param(["buffered", "O_DIRECT"], "experiment 4: read modes of the sweep ([] skips "
                                       "it)", kind="str_list", choices=MODES)
    gpu_sweep_runs: int = param(2, "experiment 4: runs of the sweep, each with its own dd ceiling", minimum=0,
                                maximum=100)
    kvikio_threads: list[int] = param([4], "experiment 4: kvikio thread-pool sizes", kind="int_list", minimum=1,
                                      maximum=256)
    kvikio_task: int = param(4194304, "experiment 4: kvikio task size", minimum=1, maximum=1 << 30, unit="bytes")
    latency_reads: int = param(1000, "experiment 6: QD1 4 KiB O_DIRECT reads per pass (0: skip)", minimum=0,
                               maximum=1_000_000)
    purge_method: str = param("auto", "auto, drop_caches (root) or fadvise", choices=METHODS)
    seed: int = param(0, "seed of the data set and of every random order", minimum=0, maximum=2**32 - 1)
    data_dir: object = param(None, "where the data set lives (default: $DATAJOURNEY_DATA_DIR or "
                             "~/.cache/datajourney)", kind="path", optional=True)
