"""Chapter 8's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 8; the docstring of each field says what it sets."""
    n_images: int = 11600
    """photo-like JPEGs: enough for the skipped + timed batches of 16 DataLoader workers (hybrid too)"""
    width: int = 500
    """pixels of each stored JPEG"""
    height: int = 375
    jpeg_quality: int = 92
    classes: int = 10
    out_size: int = 224
    """decoded images are resized to out_size²"""
    batch_size: int = 64
    """batch of the end-to-end loaders and the model"""
    primitive_batch: int = 32
    """batch of the primitive scaling tasks"""
    primitive_images: int = 256
    """images per point of the primitive sweep"""
    concurrency: object = "auto"
    """threads/processes of the primitive sweep; "auto": 1, 2, 4, … cores, 2 × cores"""
    decoders: object = "auto"
    """any of pillow, spdl, torchvision; "auto": those this machine can run"""
    executors: list[str] = field(default_factory=lambda: ["thread", "process"])
    repeats: int = 2
    """runs of every point (interleaved)"""
    loaders: list[str] = field(default_factory=lambda: ["dataloader", "spdl", "threadpool"])
    thread_decoders: object = "auto"
    """decoders of the SPDL pipeline and the thread pool; "auto": spdl (spdl.io, the paper's setting) and pillow,
    those this machine can run"""
    dataloader_decoder: object = "auto"
    """the DataLoader's decoder; "auto": the one whose process pool peaked highest in the primitive sweep"""
    collate_check: bool = True
    """the SPDL pipeline with Pillow again at the most threads, decoding into each batch's rows (no collate copy)"""
    dataloader_workers: object = "auto"
    """DataLoader worker sweep; "auto": 1, 2, 4, … up to the cores (at most 16)"""
    thread_concurrency: object = "auto"
    """thread sweep of the SPDL pipeline and the thread pool"""
    loader_batches: int = 20
    """timed batches per loader run (after the first and the warm ones)"""
    warm_batches: int = 2
    prefetch_factor: int = 2
    """DataLoader batches in flight per worker"""
    window_factor: int = 4
    """a timed window holds at least this many times the batches in flight (whole waves)"""
    start_methods: list[str] = field(default_factory=lambda: ["fork", "forkserver", "spawn"])
    startup_workers: list[int] = field(default_factory=lambda: [1, 4])
    """DataLoader workers of the start-up sweep"""
    startup_paths: list[int] = field(default_factory=lambda: [0, 100000])
    """file paths held by the Dataset object of the start-up sweep"""
    epoch_paths: int = 1281167
    """paths of the Dataset whose memory is followed over a whole epoch (0: skip); ImageNet's training set"""
    epoch_batch_size: int = 256
    epoch_workers: object = "auto"
    """DataLoader workers and pipeline threads of the epoch; "auto": the most of the DataLoader sweep"""
    memory_interval_s: float = 0.25
    """seconds between memory samples of every process during the epoch"""
    ipc_batch_sizes: list[int] = field(default_factory=lambda: [32, 128])
    """batches passed through one worker process"""
    ipc_workers: list[int] = field(default_factory=lambda: [0, 1])
    free_threaded: object = "auto"
    """true: require a free-threaded interpreter; "auto": detect"""
    paper: object = "auto"
    """the SPDL question: the paper's comparison, its decomposition, the GIL probes and the thread sweep;
    "auto": when spdl.io decodes here (else a labelled skip)"""
    paper_workers: object = "auto"
    """DataLoader workers and pipeline concurrency of the paper's comparison; "auto": the cores (lowered to fit
    n_images)"""
    paper_configs: object = "auto"
    """[images per decode task, concurrency, threads] of the thread sweep; "auto": from the cores"""
    paper_window_factor: int = 2
    """the paper runs' timed windows hold at least this many times the batches in flight (whole waves)"""
    gil_images: int = 64
    """images per operation of the GIL-held calibration"""
    moonshot: object = "auto"
    """model-fed runs (ResNet-50 bf16, channels_last); "auto": when a GPU is present"""
    model: str = "resnet50"
    model_steps: int = 30
    model_warmup: int = 5
    read_threads: int = 8
    """threads reading bytes for GPU decoding"""
    model_worker_nice: int = 10
    """the DataLoader and hybrid model-fed runs are made at nice 0 and at this nice (0: nice 0 only)"""
    hybrid_share: object = "auto"
    """share of each batch the hybrid decodes on the CPU; "auto": from this run's rates"""
    model_step: str = "graphed"
    """"graphed": the model-fed step replayed from CUDA graphs; "eager": op by op"""
    purge_method: object = "auto"
    """how files are evicted from the page cache before each loader"""
    seed: int = 0
    data_dir: object = None
    """where data sets are generated (default: ~/.cache/datajourney)"""
