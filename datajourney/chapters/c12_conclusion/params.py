"""Chapter 12's parameters: the one place their defaults live (each declared once with :func:`param`)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param

#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "12_conclusion"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 12."""
    llm_tokens_per_s: float | None = param(None, "a token demand to state instead of measuring one (not set: time a "
                                                 "GPT-2 step here)", kind="float", minimum=1.0, unit="tokens/s")
    token_model: str = param("auto", "the GPT-2 shape timed: gpt2 (124M), tiny, or auto (gpt2 on a GPU, tiny on a CPU)",
                             choices=("auto", "gpt2", "tiny"))
    token_seq_len: int = param(1024, "tokens per row of the timed batch", minimum=1, maximum=8192)
    token_steps: int = param(10, "timed training steps of the token model (after two untimed ones)",
                             minimum=1, maximum=1000)
    token_bytes: int = param(4, "bytes per stored token id (2 for uint16, 4 for int32)", kind="choice",
                             choices=(2, 4, 8))
    tokens_per_batch: int = param(131072, "tokens per batch copied to the GPU and trained on (e.g. 128 rows of 1,024)",
                                  minimum=1, maximum=1 << 30)
    diagnose: object = param(None, "a run directory to diagnose (not set: this run's own)", kind="path")
