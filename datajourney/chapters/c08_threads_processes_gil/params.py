"""Chapter 8's parameters: the one place their defaults live, each declared once with its range.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every
declared range before any work, and the experiment's ``preflight`` adds the checks that span fields or depend on
this machine (its cores, memory, decoders and libraries, the data directory's free space)
and resolves the "auto" values."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import MAX_IMAGES, ChapterParams, param
from datajourney.toolkit.pagecache import METHODS

AUTO = ("auto",)
#: Sweeps named by the host's cores, so a profile reaches every host's core count: "cores" is [cores],
#: "half_and_cores" [cores ÷ 2, cores], "quarters" 1, 4, 16, … below the cores, then the cores.
SCALED = ("cores", "half_and_cores", "quarters")


def scaled(choice: str, cores: int) -> list[int]:
    """The counts a :data:`SCALED` choice names on a host with ``cores`` cores."""
    if choice == "cores":
        return [cores]
    if choice == "half_and_cores":
        return sorted({max(1, cores // 2), cores})
    out, c = [], 1
    while c < cores:
        out.append(c)
        c *= 4
    return out + [cores]
#: The chapter's names: decoders, executors, loaders, start methods and the pipeline's operations.
DECODERS = ("pillow", "spdl", "torchvision")
EXECUTORS = ("thread", "process")
LOADERS = ("dataloader", "spdl", "threadpool")
START_METHODS = ("fork", "forkserver", "spawn")
OPS = ("read", "decode", "resize", "batch")
LABELS = {"dataloader": "DataLoader", "spdl": "SPDL pipeline", "spdl_prealloc": "SPDL pipeline, no collate copy",
          "threadpool": "thread pool", "nvjpeg": "GPU decode (nvJPEG)", "hybrid": "DataLoader + nvJPEG",
          "spdl_batch": "SPDL pipeline, batch decode"}
#: The loaders that run in threads of one process ("spdl_batch": the SPDL sweep's best setting, run end to end).
THREADED = ("spdl", "spdl_prealloc", "threadpool", "spdl_batch")
MAX_CONCURRENCY = 256
#: "auto" loader sweeps stop at the cores or here, whichever is lower, so that the batches the
#: deepest loader keeps in flight (skipped before timing) fit in the default data set.
AUTO_LOADER_MAX = 16
#: A timed window holds at least this many times the batches the loader has in flight (whole waves).
WINDOW_FACTOR = 4
#: The automatic CPU share of the hybrid feed uses this part of the CPU loaders' measured rate (the
#: rest is headroom for the main process's thread and the copy to the GPU).
HYBRID_HEADROOM = 0.8
#: The automatic share is rounded to this step.
HYBRID_STEP = 0.05
#: How the model-fed runs step the model: replayed from CUDA graphs (falling back to eager, with the
#: reason, where the capture fails) or launched op by op from Python.
MODEL_STEPS = ("graphed", "eager")
#: Batches the GPU-decoding feeds keep ready on their side stream.
GPU_QUEUE_DEPTH = 3


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "08_threads_processes_gil"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 8."""
    n_images: object = param(11600, "photo-like JPEGs: enough for the skipped + timed batches of 16 DataLoader "
                                    'workers (hybrid too); "auto": the fewest every window needs on this host',
                             kind="int", minimum=1, maximum=MAX_IMAGES, also=AUTO)
    width: int = param(500, "width of each stored JPEG", minimum=1, maximum=8192, unit="pixels")
    height: int = param(375, "height of each stored JPEG", minimum=1, maximum=8192, unit="pixels")
    jpeg_quality: int = param(92, "JPEG quality of the stored images", minimum=1, maximum=95)
    classes: int = param(10, "labels: image i belongs to class i mod classes", minimum=1, maximum=100_000)
    out_size: int = param(224, "decoded images are resized to out_size²", minimum=1, maximum=4096, unit="pixels")
    batch_size: int = param(64, "batch of the end-to-end loaders and the model", minimum=1, maximum=4096)
    primitive_batch: int = param(32, "batch of the primitive scaling tasks", minimum=1, maximum=4096)
    primitive_images: int = param(256, "images per point of the primitive sweep", minimum=1, maximum=MAX_IMAGES)
    concurrency: object = param("auto", 'threads/processes of the primitive sweep; "auto": 1, 2, 4, … cores, '
                                        '2 × cores; or one of "cores", "half_and_cores", "quarters"',
                                kind="int_list", minimum=1, also=AUTO + SCALED)
    decoders: object = param("auto", 'any of pillow, spdl, torchvision; "auto": those this machine can run',
                             kind="str_list", choices=DECODERS, also=AUTO)
    executors: list[str] = param(["thread", "process"], "pools of the primitive sweep", kind="str_list",
                                 choices=EXECUTORS)
    repeats: int = param(2, "runs of every point (interleaved)", minimum=1, maximum=100)
    loaders: list[str] = param(["dataloader", "spdl", "threadpool"], "loaders of the end-to-end runs",
                               kind="str_list", choices=LOADERS)
    thread_decoders: object = param("auto", 'decoders of the SPDL pipeline and the thread pool; "auto": spdl '
                                            "(spdl.io, the paper's setting) and pillow, those this machine can run",
                                    kind="str_list", choices=DECODERS, also=AUTO)
    dataloader_decoder: object = param("auto", "the DataLoader's decoder; \"auto\": the one whose process pool "
                                               "peaked highest in the primitive sweep", choices=DECODERS + AUTO)
    collate_check: bool = param(True, "the SPDL pipeline with Pillow again at the most threads, decoding into each "
                                      "batch's rows (no collate copy)")
    dataloader_workers: object = param("auto", 'DataLoader worker sweep; "auto": 1, 2, 4, … up to the cores (at '
                                               'most 16); or one of "cores", "half_and_cores", "quarters"',
                                       kind="int_list", minimum=1, also=AUTO + SCALED)
    thread_concurrency: object = param("auto", 'thread sweep of the SPDL pipeline and the thread pool; or one of '
                                               '"cores", "half_and_cores", "quarters"',
                                       kind="int_list", minimum=1, also=AUTO + SCALED)
    loader_batches: int = param(20, "timed batches per loader run (after the first and the warm ones)", minimum=1,
                                maximum=100_000)
    warm_batches: int = param(2, "batches left out before timing (at least those in flight)", minimum=0,
                              maximum=1000)
    prefetch_factor: int = param(2, "DataLoader batches in flight per worker", minimum=1, maximum=64)
    window_factor: int = param(4, "a timed window holds at least this many times the batches in flight (whole "
                                  "waves)", minimum=1, maximum=100)
    start_methods: list[str] = param(["fork", "forkserver", "spawn"], "start methods of the start-up sweep",
                                     kind="str_list", choices=START_METHODS)
    startup_workers: list[int] = param([1, 4], "DataLoader workers of the start-up sweep ([] to skip it)",
                                       kind="int_list")
    startup_paths: list[int] = param([0, 100000], "file paths held by the Dataset object of the start-up sweep",
                                     kind="int_list", minimum=0, maximum=20_000_000)
    epoch_paths: int = param(1281167, "paths of the Dataset whose memory is followed over a whole epoch (0: skip); "
                                      "ImageNet's training set", minimum=0, maximum=20_000_000)
    epoch_batch_size: int = param(256, "batch of the epoch", minimum=1, maximum=65536)
    epoch_workers: object = param("auto", 'DataLoader workers and pipeline threads of the epoch; "auto": the most of '
                                          "the DataLoader sweep", kind="int", minimum=1, also=AUTO)
    memory_interval_s: float = param(0.25, "seconds between memory samples of every process during the epoch",
                                     minimum=0, maximum=60, unit="s")
    ipc_batch_sizes: list[int] = param([32, 128], "batches passed through one worker process ([] to skip)",
                                       kind="int_list")
    ipc_workers: list[int] = param([0, 1], "worker processes of the IPC runs (0: the main process, the baseline)",
                                   kind="int_list", minimum=0)
    free_threaded: object = param("auto", 'true: require a free-threaded interpreter; "auto": detect', kind="bool",
                                  also=AUTO)
    paper: object = param("auto", "the SPDL question: the paper's comparison, its decomposition, the GIL probes and "
                                  'the thread sweep; "auto": when spdl.io decodes here (else a labelled skip)',
                          kind="bool", also=AUTO)
    paper_workers: object = param("auto", "DataLoader workers and pipeline concurrency of the paper's comparison; "
                                          '"auto": the cores (lowered to fit n_images)', kind="int", minimum=1,
                                  also=AUTO)
    paper_configs: object = param("auto", '[images per decode task, concurrency, threads] of the thread sweep; '
                                          '"auto": from the cores', kind="any")
    paper_window_factor: int = param(2, "the paper runs' timed windows hold at least this many times the batches in "
                                        "flight (whole waves)", minimum=1, maximum=100)
    gil_images: int = param(64, "images per operation of the GIL-held calibration", minimum=1, maximum=MAX_IMAGES)
    moonshot: object = param("auto", 'model-fed runs (ResNet-50 bf16, channels_last); "auto": when a GPU is present',
                             kind="bool", also=AUTO)
    model: str = param("resnet50", '"resnet50" (needs torchvision) or "small_cnn"', choices=("resnet50", "small_cnn"))
    model_steps: int = param(30, "timed steps of each model-fed run", minimum=1, maximum=100_000)
    model_warmup: int = param(5, "steps before timing (at least the batches in flight)", minimum=1, maximum=10_000)
    read_threads: int = param(8, "threads reading bytes for GPU decoding", minimum=1)
    model_worker_nice: int = param(10, "the DataLoader and hybrid model-fed runs are made at nice 0 and at this nice "
                                       "(0: nice 0 only)", minimum=0, maximum=19)
    hybrid_share: object = param("auto", 'share of each batch the hybrid decodes on the CPU; "auto": from this '
                                         "run's rates", kind="float", minimum=0, maximum=1, also=AUTO)
    model_step: str = param("graphed", '"graphed": the model-fed step replayed from CUDA graphs; "eager": op by op',
                            choices=MODEL_STEPS)
    purge_method: object = param("auto", "how files are evicted from the page cache before each loader",
                                 choices=METHODS)
    seed: int = param(0, "seed of the images and the shuffles", minimum=0, maximum=2**31 - 1)
    data_dir: object = param(None, "where data sets are generated (default: ~/.cache/datajourney)", kind="path",
                             optional=True)
    image_dir: object = param(None, "your own images instead of generated ones: a folder of JPEG or PNG files "
                                    "(ImageFolder tree or flat), only ever read (not set: the book's generated data)",
                              kind="path")
