"""Chapter 7's parameters: the one place their defaults live, each declared once with its range.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every
declared range before any work, and the experiment's ``preflight`` adds the checks that span fields
or depend on this machine (its cores, memory, libraries, the data directory's free space)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.chapters.c07_full_picture.reading import STORAGE_FORMATS
from datajourney.core.params import MAX_IMAGES, ChapterParams, param
from datajourney.toolkit.pagecache import METHODS

FORMATS = ("imagefolder", "mds")
#: How the load sweep's busy processes (or the tuned scenario's workers) are treated.
REMEDIES = ("none", "nice", "reserve", "nice+reserve")
LOAD_MODES = ("plain", "nice", "reserve", "nice+reserve", "cuda_graphs")
MODELS = ("resnet50", "small_cnn")


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "07_full_picture"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 7."""
    n_images: int = param(20000, "synthetic JPEGs", minimum=1, maximum=MAX_IMAGES)
    image_size: int = param(224, "stored image side", minimum=1, maximum=4096, unit="pixels")
    jpeg_quality: int = param(80, "JPEG quality of the stored images", minimum=1, maximum=95)
    classes: int = param(100, "labels: image i belongs to class i mod classes", minimum=1, maximum=100_000)
    out_size: int = param(224, "side after the resize transform", minimum=1, maximum=4096, unit="pixels")
    batch_size: int = param(64, "images per batch", minimum=1, maximum=65536)
    model: str = param("resnet50", '"resnet50" (needs torchvision; random weights) or "small_cnn" (CPU runs)',
                       choices=MODELS)
    lr: float = param(0.1, "SGD learning rate (momentum 0.9)", minimum=1e-6, maximum=10)
    formats: list[str] = param(["imagefolder", "mds"], '"mds" needs mosaicml-streaming; without it only ImageFolder '
                                                      "runs", kind="str_list", choices=FORMATS)
    workers: list[int] = param([0, 1, 4], 'DataLoader num_workers values (the "default" recipe)', minimum=0,
                               maximum=4096)
    one_worker_formats: list[str] = param(["imagefolder"], "formats also run with one worker (that question is "
                                                           "asked of one format)", kind="str_list", choices=FORMATS)
    steps: int = param(25, "timed steps per run (after the warm-up steps)", minimum=1, maximum=100_000)
    warmup_steps: int = param(5, "steps left out of the means (the first batch is reported apart)", minimum=1,
                              maximum=10_000)
    repeats: int = param(3, "runs of every scenario and of the ceiling, interleaved", minimum=1, maximum=100)
    single_thread_w0: bool = param(True, "also run 0 workers with one torch intra-op thread in the main process")
    tuned_workers: list[int] = param([8], "the tuned recipe (uint8 batches normalised on the GPU); [] to skip it",
                                     kind="int_list", maximum=4096)
    tuned_remedy: str = param("nice", 'its workers: "none", "nice" (nice 19), "reserve" (cores left free), '
                                      '"nice+reserve"', choices=REMEDIES)
    graphed_workers: list[int] = param([8], "the tuned recipe with its step replayed from CUDA graphs (GPU only); "
                                            "[] to skip", kind="int_list", maximum=4096)
    reserve_cores: object = param("auto", 'cores the "reserve" remedy leaves to the training process ("auto": 2)',
                                  kind="int", minimum=0, also=("auto",))
    load_levels: object = param("auto", 'busy processes in the load sweep ("auto": 0, cores, 1.5 x cores)',
                                kind="int_list", minimum=0, maximum=4096, also=("auto",))
    load_modes: list[str] = param(["plain", "nice", "reserve", "cuda_graphs"], "load-sweep modes; [] to skip the "
                                                                               "sweep", kind="str_list",
                                  choices=LOAD_MODES)
    load_steps: int = param(12, "timed steps per load-sweep point", minimum=1, maximum=100_000)
    reader_samples: int = param(256, "samples timed one by one for the per-sample reader costs", minimum=1,
                                maximum=MAX_IMAGES)
    storage_formats: list[str] = param(list(STORAGE_FORMATS), "the format comparison: the same images converted "
                                       "into each format (a missing library is skipped and named); [] to skip it",
                                       kind="str_list", choices=STORAGE_FORMATS)
    format_images: int = param(2000, "images of the set converted into each format (at most n_images)", minimum=1,
                               maximum=MAX_IMAGES)
    format_workers: object = param("auto", 'DataLoader num_workers values of the format comparison ("auto": 0, a '
                                           'quarter, half and all of the cores; "cores": all of them)',
                                   kind="int_list", minimum=0, maximum=4096, also=("auto", "cores"))
    format_steps: int = param(10, "timed steps per run of the format comparison (after the warm-up steps)",
                              minimum=1, maximum=100_000)
    format_repeats: int = param(2, "runs of every format, worker count and cache state, interleaved", minimum=1,
                                maximum=100)
    shard_images: object = param("auto", 'images per shard, chunk or row group ("auto": two shards per worker at '
                                         "least, none above 64 MiB)", kind="int", minimum=1, also=("auto",))
    shuffle_buffer: int = param(1000, "WebDataset's shuffle buffer (samples)", minimum=1, maximum=10_000_000)
    access_reads: int = param(64, "random images fetched by index per format, cold and warm", minimum=1,
                              maximum=MAX_IMAGES)
    purge_method: object = param("auto", "cold cache before each run: drop_caches when root, else fadvise",
                                 choices=METHODS)
    profile: bool = param(True, "record torch.profiler traces (0 workers, and the best configuration)")
    seed: int = param(0, "seed of the images, the shuffles and the model", minimum=0, maximum=2**31 - 1)
    data_dir: object = param(None, "where the images are generated (default: ~/.cache/datajourney)", kind="path",
                             optional=True)
    image_dir: object = param(None, "your own images instead of generated ones: a folder of JPEG or PNG files "
                                    "(ImageFolder tree or flat), only ever read (not set: the book's generated data)",
                              kind="path")


def worker_counts(choice, cores: int) -> list[int]:
    """The worker counts ``format_workers`` names on a host with ``cores`` cores: "auto" is none, then a quarter,
    half and all of the cores; "cores" all of them alone (the comparison where a loader has the most help)."""
    if choice == "auto":
        return sorted({0, max(1, cores // 4), max(1, cores // 2), max(1, cores)})
    if choice == "cores":
        return [max(1, cores)]
    return list(choice)
