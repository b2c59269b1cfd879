"""Chapter 5's parameters: the one place their defaults live, each declared once with its range and help.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` is the one generic
validator, and the experiment's ``preflight`` adds only what the declarations cannot say (the template's
fields, CUDA, data, memory)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param

#: The batch layouts the chapter builds, and their names on the page.
STRATEGIES = ("pad_to_context", "pad_to_longest", "bucketed", "greedy_pack", "best_fit_decreasing")
LABELS = {"pad_to_context": "pad to context", "pad_to_longest": "pad to longest in batch",
          "bucketed": "length-bucketed batches", "greedy_pack": "greedy packing (in order)",
          "best_fit_decreasing": "best-fit-decreasing packing"}
#: Layouts that put several samples in one row (and so need per-document positions and masks).
PACKED = ("greedy_pack", "best_fit_decreasing")
#: Where an end-of-text token follows a sample. The source's code tokenises each sample as is
#: for the padded grid and packs samples "separated by EOS tokens": ``packed_only``.
EOS_MODES = ("packed_only", "always", "never")
#: The setting the published figures were measured in (the source's code and text).
PUBLISHED_SETTING = dict(n_samples=2000, template="spaces", eos="packed_only", context_length=4096, batch_size=32)
#: Largest |logit difference| between a packed document and the same document alone that
#: still counts as "kept apart" (float32 rounding is ~1e-6).
ISOLATED = 1e-4
#: GPT-2's vocabulary size and its end-of-text id (the padding id of the timed batches).
VOCAB = 50257
EOS_ID = 50256
#: The models of the isolation check (random weights): small, since only equality of outputs matters.
ISOLATION_MODEL = dict(d_model=64, n_layers=2, n_heads=4)
#: The parts of a timed step, in order (their sum is the step).
STEP_PARTS = ("layers_forward_ms", "head_ms", "layers_backward_ms")


def uses_eos(strategy: str, eos: str) -> bool:
    """Whether samples in this layout are followed by an end-of-text token."""
    return eos == "always" or (eos == "packed_only" and strategy in PACKED)


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "05_padding_tax"


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
    strategies: list[str] = param(list(STRATEGIES), "batch layouts to build and time",
                                  choices=STRATEGIES)
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
    token_path: object = param(None, "your own tokens instead of the book's: a Megatron .bin/.idx pair or a folder "
                                     "of Parquet, Arrow or JSONL text, only ever read (not set: the book's data)",
                               kind="path")
