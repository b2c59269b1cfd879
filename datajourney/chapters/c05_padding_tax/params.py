"""Chapter 5's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 5; the docstring of each field says what it sets."""
    n_samples: int = 2000
    """the first N Alpaca records"""
    context_length: int = 4096
    """positions per row for padding-to-context and packing"""
    batch_size: int = 32
    """rows per training step (the first batch is the published figures' population)"""
    dataset: str = "tatsu-lab/alpaca"
    """public name, used when no local file is given or found"""
    dataset_path: object = None
    """a local Alpaca JSON (default: offline copy if present, else the hub)"""
    tokenizer: str = "gpt2"
    """public name of the tokenizer"""
    tokenizer_dir: object = None
    """a directory with GPT-2 vocab.json and merges.txt (default: offline copy, else the hub)"""
    template: str = "spaces"
    """how fields become one text: "spaces" (the published setting), "plain", "alpaca","""
    eos: str = "packed_only"
    """end-of-text token: "packed_only" (published setting), "always" or "never" """
    strategies: list[str] = field(
        default_factory=lambda: ["pad_to_context", "pad_to_longest", "bucketed", "greedy_pack", "best_fit_decreasing"]
    )
    bucket_batches: int = 8
    """length bucketing sorts windows of this many batches"""
    heatmap_bins: int = 256
    """heatmap columns (positions are grouped for page weight; efficiencies are exact)"""
    device: object = "auto"
    """where the cost is measured: "auto" (the GPU if any), "cuda", "cpu" or "none" """
    timing: str = "all_batches"
    """"all_batches": time every batch; "per_shape": time each batch shape, weight by count"""
    timing_repeats: int = 3
    """passes over all batches (all_batches) or timed steps per shape (per_shape)"""
    warmup_steps: int = 1
    """untimed steps per batch shape before timing"""
    d_model: int = 512
    """GPT-2 built from its config for the cost (random weights, no download)"""
    n_layers: int = 4
    n_heads: int = 8
    seed: int = 0
