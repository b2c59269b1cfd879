"""A GPT-2-family training step, timed: how many tokens per second a device consumes when it trains a
language model. The model is built from a ``transformers`` config with random weights (nothing is
downloaded); on a GPU it runs in bf16 autocast, on a CPU in fp32."""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

import torch

from datajourney.toolkit.tokens import GPT2_VOCAB

#: Model shapes: GPT-2 small (124M parameters) for a GPU, and a tiny one so a CPU step takes well
#: under a second.
SIZES = {"gpt2": dict(n_embd=768, n_layer=12, n_head=12), "tiny": dict(n_embd=64, n_layer=2, n_head=2)}
#: The most tokens one forward/backward holds at once: a larger batch accumulates gradients over
#: micro-batches of this size (its logits alone take 16,384 × 50,257 × 4 bytes = 3.3 GB).
MICRO_TOKENS = 16384


@contextmanager
def _quiet():
    """transformers' notices (config defaults, the loss it picks) held back: the page reports the step."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def gpt2(size: str, *, context: int, vocab: int = GPT2_VOCAB, seed: int = 0, device: str = "cpu"):
    """A GPT-2 model of ``size`` (a key of :data:`SIZES`) from its config, random weights, dropout
    off so that every timed step does the same work; its weights are made on ``device`` (initialising
    124M parameters on the CPU and copying them over takes seconds)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_positions=context, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     use_cache=False, **SIZES[size])
    with _quiet(), torch.device(device):
        return GPT2LMHeadModel(cfg)


def token_step(*, size: str, tokens_per_batch: int, seq_len: int, steps: int, device: str,
               warmup: int = 2, seed: int = 0) -> dict:
    """Time ``steps`` training steps (forward, backward, AdamW) of :func:`gpt2` on batches of
    ``tokens_per_batch // seq_len`` rows of random token ids already on ``device``, after
    ``warmup`` untimed steps. Returns the model, precision and shape, each step's ms (host clock
    around a synchronised step) and tokens/s at the median step."""
    rows = tokens_per_batch // seq_len
    model = gpt2(size, context=seq_len, seed=seed, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, GPT2_VOCAB, (rows, seq_len), generator=gen).to(device)
    chunks = ids.split(max(1, MICRO_TOKENS // seq_len))
    cuda = device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32

    def step():
        opt.zero_grad(set_to_none=True)
        for c in chunks:
            with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=dtype, enabled=cuda):
                loss = model(input_ids=c, labels=c).loss / len(chunks)
            loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()

    model.train()
    ms = []
    with _quiet():
        for _ in range(warmup):
            step()
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            ms.append((time.perf_counter() - t0) * 1e3)
    median = statistics.median(ms)
    return dict(model=size, parameters=sum(p.numel() for p in model.parameters()), device=device,
                device_name=torch.cuda.get_device_name() if cuda else "CPU",
                precision="bf16 autocast" if cuda else "fp32", rows=rows, seq_len=seq_len,
                tokens_per_batch=rows * seq_len, micro_batches=len(chunks), step_ms=ms, median_ms=median,
                tokens_per_s=rows * seq_len * 1e3 / median)
