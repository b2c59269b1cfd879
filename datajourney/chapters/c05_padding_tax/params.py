"""Chapter 5's parameters: the one place their defaults live, each declared once with its range and help.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and ``run()`` start from :class:`Params`; :meth:`Params.checked` is the one generic
validator, and the experiment's ``preflight`` adds only what the declarations cannot say (the template's
fields, CUDA, data, memory)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param

#: The batch layouts the chapter builds (the experiment's ``STRATEGIES``).
STRATEGY_CHOICES = ("pad_to_context", "pad_to_longest", "bucketed", "greedy_pack", "best_fit_decreasing")


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 5."""
    n_samples: int = param(2000, "the first N Alpaca records", minimum=1, maximum=10_000_000)
    context_length: int = param(4096, "positions per row for padding-to-context and packing", minimum=1,
                                maximum=1 << 20, unit="tokens")
    batch_size: int = param(32, "rows per training step (the first batch is the published figures' population)",
                            minimum=1, maximum=1 << 16)
    dataset: str = param("tatsu-lab/alpaca", "public name, used when no local file is given or found")
    dataset_path: object = param(None, "a local Alpaca JSON (default: offline copy if present, else the hub)",
                                 kind="path")
    tokenizer: str = param("gpt2", "public name of the tokenizer")
    tokenizer_dir: object = param(None, "a directory with GPT-2 vocab.json and merges.txt (default: offline copy, "
                                        "else the hub)", kind="path")
    template: str = param("spaces", "how fields become one text: \"spaces\" (the published setting), \"plain\", "
                                    "\"alpaca\", or a format string naming {instruction}, {input}, {output}")
    eos: str = param("packed_only", "end-of-text token: \"packed_only\" (published setting), \"always\" or \"never\"",
                     choices=("packed_only", "always", "never"))
    strategies: list[str] = param(list(STRATEGY_CHOICES), "batch layouts to build and time",
                                  choices=STRATEGY_CHOICES)
    bucket_batches: int = param(8, "length bucketing sorts windows of this many batches", minimum=1, maximum=1 << 16)
    heatmap_bins: int = param(256, "heatmap columns (positions are grouped for page weight; efficiencies are exact)",
                              minimum=1, maximum=4096)
    device: str = param("auto", "where the cost is measured: \"auto\" (the GPU if any), \"cuda\", \"cpu\" or \"none\"",
                        choices=("auto", "cuda", "cpu", "none"))
    timing: str = param("all_batches", "\"all_batches\": time every batch; \"per_shape\": time each batch shape, "
                                       "weight by count", choices=("all_batches", "per_shape"))
    timing_repeats: int = param(3, "passes over all batches (all_batches) or timed steps per shape (per_shape)",
                                minimum=1, maximum=1000)
    warmup_steps: int = param(1, "untimed steps per batch shape before timing", minimum=0, maximum=1000)
    d_model: int = param(512, "GPT-2 built from its config for the cost (random weights, no download): width",
                         minimum=1, maximum=1 << 16)
    n_layers: int = param(4, "GPT-2's layers", minimum=1, maximum=1 << 16)
    n_heads: int = param(8, "GPT-2's attention heads (a divisor of d_model)", minimum=1, maximum=1 << 16)
    seed: int = param(0, "seed of the timed model's random weights and the isolation check", minimum=0,
                      maximum=2**32 - 1)
