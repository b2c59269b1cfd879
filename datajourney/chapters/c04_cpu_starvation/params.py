"""Chapter 4's parameters: the one place their defaults live, each declared once with its range and help.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` is the one generic
validator, and the experiment's ``preflight`` adds only what the declarations cannot say (worker counts
against this machine's cores, the decode image size, data paths, libraries)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param

#: Cost profiles of the prefetch experiment: every sample costs D, or D times an exponential draw (mean 1).
COST_PROFILES = ("constant", "variable")
#: The DataLoader's default prefetch_factor (used where the experiment does not vary it).
DEFAULT_PREFETCH = 2


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "04_cpu_starvation"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 4. Times in milliseconds unless named otherwise."""
    d_ms: float = param(5.0, "D: CPU cost per sample of the sleep work; the real work is sized to cost about the same",
                        minimum=0, maximum=10_000, unit="ms")
    batch_size: int = param(32, "B: samples per batch", minimum=1, maximum=65536)
    g_ms: float = param(50.0, "G: the step's target time, calibrated back-to-back (steady state)", minimum=0.001,
                        maximum=10_000, unit="ms")
    workers: object = param("auto", "W values for the sweep: a list, or \"auto\" (0, 1, 2, 4, ... up to the usable "
                                    "cores)", kind="int_list", minimum=0, also=("auto",))
    published_workers: list[int] = param([0, 4], "W values of the published case", minimum=0)
    steps: int = param(20, "timed steps per configuration (after the warm-up steps)", minimum=1, maximum=100_000)
    warmup_steps: int = param(3, "steps left out of the steady-state means (the first batch is reported apart)",
                              minimum=0, maximum=10_000)
    work_kinds: list[str] = param(["sleep", "tokenize", "decode"], "per-sample work for the sweep",
                                  choices=("sleep", "tokenize", "decode"))
    real_work_scale: int = param(0, "tokenize: text repeats; decode: image side in 16 px; 0: calibrate so D is "
                                    "about d_ms", minimum=0, maximum=1000)
    calibration_s: float = param(3.0, "seconds of back-to-back steps in each of the two calibration traces",
                                 minimum=0.05, maximum=600, unit="s")
    idle_gaps_ms: list[int] = param([0, 10, 30, 100, 170], "idle gaps before a step (the controlled experiment, no "
                                                           "DataLoader)", minimum=0, maximum=10_000, unit="ms")
    idle_repeats: int = param(6, "trials per gap, all gaps interleaved in a seeded random order", minimum=1,
                              maximum=1000)
    idle_conditioning_steps: int = param(8, "back-to-back steps before each gap (the sustained state)", minimum=1,
                                         maximum=1000)
    prefetch_factors: list[int] = param([1, 2, 4], "prefetch_factor values of the balanced case (D·B/W just under G)",
                                        minimum=1, maximum=64)
    prefetch_workers: int = param(4, "W of the balanced case", minimum=1)
    prefetch_runs: int = param(3, "runs of each (cost profile, prefetch_factor)", minimum=1, maximum=100)
    boundary_workers: int = param(4, "workers for the epoch-boundary experiment", minimum=1)
    steps_per_epoch: int = param(8, "steps per epoch in the epoch-boundary experiment (two epochs are run)",
                                 minimum=1, maximum=10_000)
    boundary_runs: int = param(3, "runs of the epoch-boundary experiment (with and without persistent workers)",
                               minimum=1, maximum=100)
    dataset_path: object = param(None, "Alpaca JSON for the tokenize work (default: offline copy, else the hub)",
                                 kind="path")
    tokenizer_dir: object = param(None, "directory with GPT-2 vocab.json and merges.txt (default: offline copy, "
                                        "else the hub)", kind="path")
    seed: int = param(0, "seed of the variable costs, the test images and the idle-gap order", minimum=0)
    token_path: object = param(None, "your own tokens instead of the book's: a Megatron .bin/.idx pair or a folder "
                                     "of Parquet, Arrow or JSONL text, only ever read (not set: the book's data)",
                               kind="path")
