"""Chapter 7's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 7; the docstring of each field says what it sets."""
    n_images: int = 20000
    """synthetic JPEGs (the full profile uses 100,000)"""
    image_size: int = 224
    """stored image side (pixels)"""
    jpeg_quality: int = 80
    classes: int = 100
    """labels: image i belongs to class i mod classes"""
    out_size: int = 224
    """side after the resize transform"""
    batch_size: int = 64
    model: str = "resnet50"
    """"resnet50" (needs torchvision; random weights) or "small_cnn" (CPU runs)"""
    lr: float = 0.1
    """SGD learning rate (momentum 0.9)"""
    formats: list[str] = field(default_factory=lambda: ["imagefolder", "mds"])
    """"mds" needs mosaicml-streaming; without it only ImageFolder runs"""
    workers: list[int] = field(default_factory=lambda: [0, 1, 4])
    """DataLoader num_workers values (the "default" recipe)"""
    one_worker_formats: list[str] = field(default_factory=lambda: ["imagefolder"])
    """formats also run with one worker (that question is asked of one format)"""
    steps: int = 25
    """timed steps per run (after the warm-up steps)"""
    warmup_steps: int = 5
    """steps left out of the means (the first batch is reported apart)"""
    repeats: int = 3
    """runs of every scenario and of the ceiling, interleaved"""
    single_thread_w0: bool = True
    """also run 0 workers with one torch intra-op thread in the main process"""
    tuned_workers: list[int] = field(default_factory=lambda: [8])
    """the tuned recipe (uint8 batches normalised on the GPU); [] to skip it"""
    tuned_remedy: str = "nice"
    """its workers: "none", "nice" (nice 19), "reserve" (cores left free), "nice+reserve" """
    graphed_workers: list[int] = field(default_factory=lambda: [8])
    """the tuned recipe with its step replayed from CUDA graphs (GPU only); [] to skip"""
    reserve_cores: object = "auto"
    """cores the "reserve" remedy leaves to the training process ("auto": 2)"""
    load_levels: object = "auto"
    """busy processes in the load sweep ("auto": 0, cores, 1.5 x cores)"""
    load_modes: list[str] = field(default_factory=lambda: ["plain", "nice", "reserve", "cuda_graphs"])
    """load-sweep modes; [] to skip the sweep"""
    load_steps: int = 12
    """timed steps per load-sweep point"""
    reader_samples: int = 256
    """samples timed one by one for the per-sample reader costs"""
    purge_method: object = "auto"
    """cold cache before each run: drop_caches when root, else fadvise"""
    profile: bool = True
    """record torch.profiler traces (0 workers, and the best configuration)"""
    seed: int = 0
    data_dir: object = None
    """where the images are generated (default: ~/.cache/datajourney)"""
