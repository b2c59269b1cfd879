"""Chapter 5: the padding tax - how many of the positions a GPU computes are real tokens.

A batch is a ``rows × row_len`` block of positions. Variable-length samples either get a
row each and are padded (to the context length, or to the longest sample of their batch,
optionally after grouping samples of similar length), or are packed several to a row. The
efficiency of a layout is real tokens / positions; the positions are what the GPU pays for.

Two populations are kept apart everywhere: the **first batch** (``batch_size`` rows: what
the published figures describe, one ``32 × 4,096`` grid) and **all samples** (what an
epoch costs).

Packing is only correct with two extra inputs: position ids that restart at 0 for every
document, and a block-diagonal causal attention mask so that no token attends to another
document. :func:`packed_inputs` and :func:`block_causal_mask` build them with the project's
own code; :func:`collate_packed` builds the same rows with ``transformers``'
``DataCollatorWithFlattening``, and :func:`isolation_check` shows on a small causal
transformer and on GPT-2 (random weights from its config) that packed outputs then equal
per-document outputs. :func:`time_layout` times forward + backward of GPT-2 on every batch
of a layout (or on every batch *shape*, weighted by how often it occurs).
"""
from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from .params import ParameterError, boolean, choice, choices, creatable_dir, nonnegative_int, positive_int

CHAPTER = "05_padding_tax"
STRATEGIES = ("pad_to_context", "pad_to_longest", "bucketed", "greedy_pack", "best_fit_decreasing")
LABELS = {"pad_to_context": "pad to context", "pad_to_longest": "pad to longest in batch",
          "bucketed": "length-bucketed batches", "greedy_pack": "greedy packing (in order)",
          "best_fit_decreasing": "best-fit-decreasing packing"}
#: Layouts that put several samples in one row (and so need per-document positions and masks).
PACKED = ("greedy_pack", "best_fit_decreasing")
SHORT = {"greedy_pack": "greedy", "best_fit_decreasing": "best-fit-decreasing"}
#: Where an end-of-text token follows a sample. The source's code tokenises each sample as is
#: for the padded grid and packs samples "separated by EOS tokens": ``packed_only``.
EOS_MODES = {
    "packed_only": "an end-of-text token after each sample in packed rows only (padded rows end at the padding)",
    "always": "an end-of-text token after every sample, in every layout",
    "never": "no end-of-text token anywhere",
}
#: How the GPU (or CPU) cost of a layout is measured.
TIMING_MODES = {
    "all_batches": "every batch of every layout is timed, once per pass; the time for all samples is the "
                   "sum of the step times (mean over passes, range min–max over passes)",
    "per_shape": "each distinct batch shape (rows × row length) is timed ``timing_repeats`` times; the time "
                 "for all samples is the sum over shapes of mean step time × batches of that shape",
}
#: Where the cost is measured: ``auto`` = the GPU when there is one, else not measured.
DEVICES = ("auto", "cuda", "cpu", "none")
#: The setting the published figures were measured in (the source's code and text).
PUBLISHED_SETTING = dict(n_samples=2000, template="spaces", eos="packed_only", context_length=4096, batch_size=32)
#: Largest |logit difference| between a packed document and the same document alone that
#: still counts as "kept apart" (float32 rounding is ~1e-6).
ISOLATED = 1e-4
#: GPT-2's vocabulary size and its end-of-text id (the padding id of the timed batches).
VOCAB = 50257
EOS_ID = 50256


# --------------------------------------------------------------------------- layouts
@dataclass
class Layout:
    """Batches of rows of sample indices; ``row_len[b]`` positions per row of batch ``b``."""

    strategy: str
    batches: list[list[list[int]]] = field(default_factory=list)
    row_len: list[int] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(b) for b in self.batches)

    @property
    def positions(self) -> int:
        return sum(len(b) * n for b, n in zip(self.batches, self.row_len, strict=True))

    def shape(self, b: int) -> tuple[int, int]:
        """``(rows, row_len)`` of batch ``b``."""
        return len(self.batches[b]), self.row_len[b]

    def shapes(self) -> dict[tuple[int, int], list[int]]:
        """Each distinct batch shape and the batches that have it, in order of first appearance."""
        out: dict[tuple[int, int], list[int]] = {}
        for b in range(len(self.batches)):
            out.setdefault(self.shape(b), []).append(b)
        return out


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def pad_to_context(lengths, batch_size: int, context: int) -> Layout:
    """One sample per row, every row ``context`` long."""
    b = _chunks([[i] for i in range(len(lengths))], batch_size)
    return Layout("pad_to_context", b, [context] * len(b))


def pad_to_longest(lengths, batch_size: int, context: int) -> Layout:
    """One sample per row, in order; rows as long as the longest sample of their batch."""
    b = _chunks([[i] for i in range(len(lengths))], batch_size)
    return Layout("pad_to_longest", b, [max(lengths[r[0]] for r in rows) for rows in b])


def bucketed(lengths, batch_size: int, context: int, window_batches: int = 8) -> Layout:
    """Sort each window of ``window_batches`` batches' worth of samples by length, then pad to
    the longest in each batch (a common "length-grouped" sampler)."""
    order: list[int] = []
    for w in _chunks(list(range(len(lengths))), batch_size * window_batches):
        order += sorted(w, key=lambda i: lengths[i])
    b = _chunks([[i] for i in order], batch_size)
    return Layout("bucketed", b, [max(lengths[r[0]] for r in rows) for rows in b])


def greedy_pack(lengths, batch_size: int, context: int) -> Layout:
    """Fill rows in sample order; start a new row when the next sample does not fit (the
    source's ``simulate_packed_batching``, continued past the first batch)."""
    rows, cur, used = [], [], 0
    for i, n in enumerate(lengths):
        if cur and used + n > context:
            rows.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += n
    if cur:
        rows.append(cur)
    b = _chunks(rows, batch_size)
    return Layout("greedy_pack", b, [context] * len(b))


def best_fit_decreasing(lengths, batch_size: int, context: int) -> Layout:
    """Longest samples first; each goes into the open row it fills most tightly."""
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # sorted (space left, row index)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        k = bisect.bisect_left(free, (n, -1))
        if k < len(free):
            space, r = free.pop(k)
            rows[r].append(i)
            bisect.insort(free, (space - n, r))
        else:
            rows.append([i])
            bisect.insort(free, (context - n, len(rows) - 1))
    b = _chunks(rows, batch_size)
    return Layout("best_fit_decreasing", b, [context] * len(b))


BUILDERS = {"pad_to_context": pad_to_context, "pad_to_longest": pad_to_longest, "bucketed": bucketed,
            "greedy_pack": greedy_pack, "best_fit_decreasing": best_fit_decreasing}


def validate(layout: Layout, lengths) -> None:
    """Every sample appears exactly once, whole, and no row is longer than its batch allows."""
    seen = [i for b in layout.batches for row in b for i in row]
    if sorted(seen) != list(range(len(lengths))):
        raise AssertionError(f"{layout.strategy}: samples dropped or repeated")
    for b, n in zip(layout.batches, layout.row_len, strict=True):
        for row in b:
            if sum(lengths[i] for i in row) > n:
                raise AssertionError(f"{layout.strategy}: a row holds more than {n} tokens")


def uses_eos(strategy: str, eos: str) -> bool:
    """Whether samples in this layout are followed by an end-of-text token."""
    return eos == "always" or (eos == "packed_only" and strategy in PACKED)


def layout_tokens(tokens: list[list[int]], strategy: str, eos: str, eos_id: int = EOS_ID) -> list[list[int]]:
    """The token sequences a layout carries: each sample, followed by end-of-text where ``eos`` says so."""
    return [t + [eos_id] for t in tokens] if uses_eos(strategy, eos) else tokens


def evaluate(layout: Layout, lengths, batch_size: int) -> dict:
    """All samples: real tokens, positions, efficiency, rows and steps of a layout."""
    real = int(sum(lengths))
    return dict(strategy=layout.strategy, label=LABELS[layout.strategy], population="all samples",
                samples=len(lengths), real_tokens=real, positions=layout.positions,
                efficiency=real / layout.positions, rows=layout.rows, steps=len(layout.batches),
                rows_per_step=batch_size, mean_row_len=layout.positions / layout.rows)


def first_batch(layout: Layout, lengths, batch: int = 0) -> dict:
    """One batch (the first by default): its rows, positions, real tokens and the samples it carries."""
    rows, n = layout.batches[batch], layout.row_len[batch]
    samples = [i for row in rows for i in row]
    real = int(sum(lengths[i] for i in samples))
    return dict(strategy=layout.strategy, label=LABELS[layout.strategy], population="first batch",
                samples=len(samples), first_sample=min(samples), last_sample=max(samples), real_tokens=real,
                positions=len(rows) * n, efficiency=real / (len(rows) * n), rows=len(rows), row_len=n)


def length_stats(lengths, population: str) -> dict:
    a = np.asarray(lengths)
    return dict(population=population, samples=len(a), min=int(a.min()), median=float(np.median(a)),
                mean=float(a.mean()), p90=float(np.percentile(a, 90)), p99=float(np.percentile(a, 99)),
                max=int(a.max()), total_tokens=int(a.sum()))


def occupancy(layout: Layout, lengths, batch: int = 0) -> np.ndarray:
    """``rows × row_len`` matrix of one batch: the document index at each position, -1 for padding.
    (Memory: rows × row_len × 8 bytes; the chapter uses :func:`fill_fractions`.)"""
    rows, n = layout.batches[batch], layout.row_len[batch]
    m = np.full((len(rows), n), -1, dtype=np.int64)
    for r, row in enumerate(rows):
        pos = 0
        for i in row:
            m[r, pos:pos + lengths[i]] = i
            pos += lengths[i]
    return m


def downsample(m: np.ndarray, bins: int) -> tuple[np.ndarray, int]:
    """Fraction of real tokens in each of ``bins`` column groups of an :func:`occupancy` matrix."""
    width = max(1, math.ceil(m.shape[1] / bins))
    cols = math.ceil(m.shape[1] / width)
    padded = np.full((m.shape[0], cols * width), -1)
    padded[:, :m.shape[1]] = m
    real = (padded >= 0).reshape(m.shape[0], cols, width).mean(axis=2)
    return real, width


def fill_fractions(layout: Layout, lengths, bins: int, batch: int = 0) -> tuple[np.ndarray, int]:
    """What :func:`downsample` of :func:`occupancy` gives, without building the matrix: every
    layout fills a row from position 0, so a row's real tokens are one prefix. Memory is
    rows × bins, whatever the context length. (The last group may be narrower than the others;
    its fraction is still over ``width`` positions, as in :func:`downsample`.)"""
    rows, n = layout.batches[batch], layout.row_len[batch]
    width = max(1, math.ceil(n / bins))
    cols = math.ceil(n / width)
    used = np.array([sum(lengths[i] for i in row) for row in rows], dtype=np.int64)
    starts = np.arange(cols, dtype=np.int64) * width
    real = np.clip(used[:, None] - starts[None, :], 0, width) / width
    return real, width


def bin_ranges(row_len: int, width: int) -> list[str]:
    """The positions each heatmap column groups, e.g. ``'1,776–1,791'`` (the last may be shorter)."""
    cols = math.ceil(row_len / width)
    return [f"{c * width:,}–{min((c + 1) * width, row_len) - 1:,}" if width > 1 else f"{c * width:,}"
            for c in range(cols)]


# --------------------------------------------------------------------------- packing done right
def packed_inputs(rows: list[list[int]], tokens: list[list[int]], row_len: int, pad_id: int):
    """``input_ids``, ``position_ids`` (restarting per document) and ``doc_ids`` (-1 for padding)."""
    ids = torch.full((len(rows), row_len), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), row_len), dtype=torch.long)
    doc = torch.full((len(rows), row_len), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        p = 0
        for i in row:
            t = tokens[i]
            ids[r, p:p + len(t)] = torch.tensor(t)
            pos[r, p:p + len(t)] = torch.arange(len(t))
            doc[r, p:p + len(t)] = i
            p += len(t)
    return ids, pos, doc


def next_token_labels(ids: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
    """Labels in the Hugging Face convention (the model shifts them): a token's own id, or -100
    where it starts a document (nothing of its document precedes it) or is padding."""
    starts = torch.ones_like(doc, dtype=torch.bool)
    starts[:, 1:] = doc[:, 1:] != doc[:, :-1]
    return torch.where(starts | (doc < 0), -100, ids)


def block_causal_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """``[rows, 1, L, L]`` boolean mask: position i may attend to j when both belong to the same
    document and j ≤ i. Padding attends only to itself (keeps softmax finite; its output is unused)."""
    L = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.ones(L, L, dtype=torch.bool, device=doc_ids.device).tril()
    return (same & causal)[:, None]


def _import_transformers():
    """``transformers``, imported without the progress-bar warning its import prints inside a notebook."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers
    return transformers


def _collator():
    import warnings

    from transformers import DataCollatorWithFlattening

    with warnings.catch_warnings():  # older versions warn on every construction that they flatten the batch
        warnings.simplefilter("ignore", UserWarning)
        return DataCollatorWithFlattening(return_position_ids=True)  # labels: -100 at document starts


def collate_packed(rows: list[list[int]], tokens: list[list[int]], row_len: int, pad_id: int) -> dict:
    """Packed rows built by ``transformers.DataCollatorWithFlattening`` (one call per row: the
    collator flattens what it is given into one sequence), right-padded to ``row_len``.

    ``input_ids``, ``position_ids`` (restarting at 0 per document, as the collator makes them)
    and ``labels`` (-100 at each document start and on padding). The padding tail gets
    positions 0, 1, 2, ... of its own, so a model that reads document boundaries from the
    position ids treats it as one more (ignored) document instead of a continuation."""
    collate = _collator()
    out = {k: torch.full((len(rows), row_len), v, dtype=torch.long)
           for k, v in (("input_ids", pad_id), ("position_ids", 0), ("labels", -100))}
    for r, row in enumerate(rows):
        flat = collate([{"input_ids": tokens[i]} for i in row], return_tensors="pt")
        n = flat["input_ids"].shape[1]
        for k in out:
            out[k][r, :n] = flat[k][0]
        out["position_ids"][r, n:] = torch.arange(row_len - n)
    return out


def collate_padded(rows: list[list[int]], tokens: list[list[int]], row_len: int, pad_id: int) -> dict:
    """One sample per row, right-padded: ``input_ids``, ``attention_mask`` (1 on real tokens) and
    ``labels`` (-100 on padding and on each sample's first token), as a padding collator makes them."""
    ids, _, doc = packed_inputs(rows, tokens, row_len, pad_id)
    return {"input_ids": ids, "attention_mask": (doc >= 0).long(), "labels": next_token_labels(ids, doc)}


def compare_with_collator(layout: Layout, tokens: list[list[int]], *, batch: int = 0, pad_id: int = EOS_ID) -> dict:
    """The project's packed rows (:func:`packed_inputs`) against the collator's (:func:`collate_packed`)
    for one batch: are input ids, per-document position ids and labels identical on every real token?"""
    rows, n = layout.batches[batch], layout.row_len[batch]
    ids, pos, doc = packed_inputs(rows, tokens, n, pad_id)
    c = collate_packed(rows, tokens, n, pad_id)
    real = doc >= 0
    return dict(strategy=layout.strategy, batch=batch, rows=len(rows), real_tokens=int(real.sum()),
                documents=sum(len(r) for r in rows),
                input_ids_equal=bool(torch.equal(ids, c["input_ids"])),
                position_ids_equal=bool(torch.equal(pos[real], c["position_ids"][real])),
                labels_equal=bool(torch.equal(next_token_labels(ids, doc), c["labels"])))


class TinyCausalLM(nn.Module):
    """A small pre-norm causal transformer (learned positions) that takes an explicit attention
    mask: the project's own check of :func:`block_causal_mask`, independent of any library version."""

    def __init__(self, vocab: int = VOCAB, d_model: int = 256, n_layers: int = 2, n_heads: int = 4,
                 max_len: int = 4096):
        super().__init__()
        self.n_heads = n_heads
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(nn.ModuleDict(dict(
                ln1=nn.LayerNorm(d_model), qkv=nn.Linear(d_model, 3 * d_model), proj=nn.Linear(d_model, d_model),
                ln2=nn.LayerNorm(d_model), up=nn.Linear(d_model, 4 * d_model), down=nn.Linear(4 * d_model, d_model))))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, ids, position_ids=None, mask=None):
        """``mask`` None: plain causal attention over the whole row (what packing without a mask does)."""
        b, L = ids.shape
        if position_ids is None:
            position_ids = torch.arange(L, device=ids.device).expand(b, L)
        x = self.tok(ids) + self.pos(position_ids)
        for blk in self.layers:
            q, k, v = blk["qkv"](blk["ln1"](x)).view(b, L, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
            if mask is None:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + blk["proj"](a.transpose(1, 2).reshape(b, L, -1))
            x = x + blk["down"](F.gelu(blk["up"](blk["ln2"](x))))
        return self.head(self.ln(x))


def gpt2_model(*, context: int, d_model: int, n_layers: int, n_heads: int, vocab: int = VOCAB, seed: int = 0):
    """GPT-2's architecture from ``transformers`` with random weights, built from its config
    (no download); dropout off so that every timed step does the same work."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_positions=context, n_embd=d_model, n_layer=n_layers, n_head=n_heads,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                     bos_token_id=min(EOS_ID, vocab - 1), eos_token_id=min(EOS_ID, vocab - 1))
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return GPT2LMHeadModel(cfg)
    finally:
        transformers.logging.set_verbosity(verbosity)


def _max_diff(packed: torch.Tensor, alone: list[torch.Tensor], docs) -> float:
    out, p = 0.0, 0
    for d, ref in zip(docs, alone, strict=True):
        out = max(out, (packed[p:p + len(d)] - ref).abs().max().item())
        p += len(d)
    return out


#: The models of the isolation check (random weights): small, since only equality of outputs matters.
ISOLATION_MODEL = dict(d_model=64, n_layers=2, n_heads=4)


def isolation_check(seed: int = 0, lengths=(5, 9, 4), row_len: int = 24) -> pd.DataFrame:
    """Three random documents packed into one row, against each run alone: the largest absolute
    logit difference for each way of feeding the packed row, on the project's small model (with
    its explicit block mask) and on GPT-2 from ``transformers`` (with the collator's inputs)."""
    import transformers

    torch.manual_seed(seed)
    docs = [torch.randint(1, 1000, (n,)).tolist() for n in lengths]
    ids, pos, doc = packed_inputs([list(range(len(docs)))], docs, row_len, pad_id=0)
    tiny = TinyCausalLM(vocab=1000, max_len=64, **ISOLATION_MODEL).eval()
    gpt2 = gpt2_model(context=64, vocab=1000, seed=seed, **ISOLATION_MODEL).eval()
    flat = _collator()([{"input_ids": d} for d in docs], return_tensors="pt")
    impl = getattr(gpt2.config, "_attn_implementation", None) or "eager"
    rows = []
    with torch.no_grad():
        alone = [tiny(torch.tensor([d]))[0] for d in docs]
        rows.append(("project", "small causal LM", "block-diagonal mask + per-document position ids",
                     _max_diff(tiny(ids, pos, block_causal_mask(doc))[0], alone, docs)))
        rows.append(("project", "small causal LM", "plain causal attention, positions run on",
                     _max_diff(tiny(ids)[0], alone, docs)))
        alone = [gpt2(input_ids=torch.tensor([d]), use_cache=False).logits[0] for d in docs]
        rows.append(("transformers", f"GPT-2 ({impl})",
                     "collator's position ids, no attention mask, use_cache=False",
                     _max_diff(gpt2(input_ids=flat["input_ids"], position_ids=flat["position_ids"],
                                    use_cache=False).logits[0], alone, docs)))
        gpt2.config.use_cache = True  # what a model loaded from the hub has
        rows.append(("transformers", f"GPT-2 ({impl})",
                     "collator's position ids, model called with its default use_cache=True",
                     _max_diff(gpt2(input_ids=flat["input_ids"], position_ids=flat["position_ids"]).logits[0],
                               alone, docs)))
        gpt2.config.use_cache = False
        rows.append(("transformers", f"GPT-2 ({impl})", "packed row without position ids",
                     _max_diff(gpt2(input_ids=flat["input_ids"], use_cache=False).logits[0], alone, docs)))
    df = pd.DataFrame(rows, columns=["code", "model", "inputs", "max_abs_diff"])
    df["isolated"] = df["max_abs_diff"] < ISOLATED
    df["transformers"] = transformers.__version__
    return df


# --------------------------------------------------------------------------- GPU (or CPU) cost
#: The output layer and the loss run on this many target tokens at a time, so that their memory
#: (logits: tokens × vocabulary) stays bounded whatever the batch (as chunked or fused
#: cross-entropy kernels do in memory-efficient trainers).
HEAD_CHUNK = 4096


#: The parts of a timed step, in order (their sum is the step).
STEP_PARTS = ("layers_forward_ms", "head_ms", "layers_backward_ms")


def train_step(model, batch: dict, device: str) -> dict:
    """One forward + backward of GPT-2 on a batch, timed in three parts (CUDA events on a GPU, the
    host clock on a CPU): the layers' forward (attention mask included), the output layer and
    loss forward + backward, and the layers' backward. Every layer runs on every position,
    padding included; the output layer and the loss only on positions with a real next-token
    target, :data:`HEAD_CHUNK` targets at a time, so their cost follows real tokens.
    Returns ``ms`` (the whole step), each part of :data:`STEP_PARTS` and ``real_targets``."""
    marks = []

    def mark():
        if device == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append(e)
        else:
            marks.append(time.perf_counter())

    mark()
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        h = model.transformer(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"),
                              position_ids=batch.get("position_ids"), use_cache=False).last_hidden_state
    mark()
    labels = batch["labels"][:, 1:]
    keep = labels != -100
    hidden, target = h[:, :-1][keep], labels[keep]
    detached = hidden.detach().requires_grad_(True)
    for i in range(0, len(target), HEAD_CHUNK):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model.lm_head(detached[i:i + HEAD_CHUNK])
        loss = F.cross_entropy(logits.float(), target[i:i + HEAD_CHUNK], reduction="sum") / max(1, len(target))
        loss.backward()
    mark()
    if detached.grad is not None:
        hidden.backward(detached.grad)
    else:  # no real target in the batch (one-token samples): the layers still run backward
        (h.float().sum() * 0).backward()
    model.zero_grad(set_to_none=True)
    mark()
    if device == "cuda":
        marks[-1].synchronize()
        parts = [marks[i].elapsed_time(marks[i + 1]) for i in range(3)]
    else:
        parts = [(marks[i + 1] - marks[i]) * 1e3 for i in range(3)]
    return {"ms": float(sum(parts)), **dict(zip(STEP_PARTS, (float(x) for x in parts), strict=True)),
            "real_targets": int(len(target))}


def time_layout(layout: Layout, step: Callable[[int], float | dict], *, mode: str, repeats: int, warmup: int,
                progress=None) -> pd.DataFrame:
    """Time the steps of a layout: ``step(b)`` runs batch ``b`` and returns its ms (or a dict with
    ``ms`` and the parts of the step, as :func:`train_step` does).

    Each distinct shape first runs ``warmup`` untimed steps (a new shape costs kernel selection
    and memory allocation once). ``all_batches``: every batch, ``repeats`` passes. ``per_shape``:
    ``repeats`` steps of each shape (cycling through the batches of that shape). One row per
    timed step: pass, batch, rows, row_len, ms."""
    choice("timing", mode, tuple(TIMING_MODES))
    shapes = layout.shapes()
    for members in shapes.values():
        for _ in range(warmup):
            step(members[0])
    if mode == "all_batches":
        plan = [(rep, b) for rep in range(repeats) for b in range(len(layout.batches))]
    else:
        plan = [(rep, members[rep % len(members)]) for members in shapes.values() for rep in range(repeats)]
    out = []
    for rep, b in plan:
        t = step(b)
        out.append(dict(strategy=layout.strategy, pass_=rep, batch=b, rows=layout.shape(b)[0],
                        row_len=layout.shape(b)[1], **(t if isinstance(t, dict) else {"ms": float(t)})))
        if progress is not None:
            progress.update(1)
    return pd.DataFrame(out).rename(columns={"pass_": "pass"})


def timed_steps(layout: Layout, mode: str, repeats: int) -> int:
    """How many timed steps :func:`time_layout` will run (for a progress bar)."""
    return repeats * (len(layout.batches) if mode == "all_batches" else len(layout.shapes()))


def cost_of_layout(steps: pd.DataFrame, layout: Layout, *, mode: str, real_tokens: int) -> tuple[dict, pd.DataFrame]:
    """The time a layout needs for all its batches, from :func:`time_layout`'s steps.

    ``all_batches``: the sum of the step times of each pass (estimate = mean over passes,
    low/high = min/max over passes). ``per_shape``: Σ over shapes of (batches of that shape ×
    mean step ms), low/high with the shape's min/max step. Either way a partial last batch
    counts once, at its own cost. Also one row per shape: how many batches have it, its step
    times (mean, std, min, max over the timed steps) and its share of the estimate."""
    counts = {s: len(m) for s, m in layout.shapes().items()}
    g = steps.groupby(["rows", "row_len"], sort=False)["ms"]
    shp = g.agg(mean="mean", std="std", min="min", max="max", timed="count").reset_index()
    shp["std"] = shp["std"].fillna(0.0)
    for part in STEP_PARTS:
        if part in steps:
            shp[part] = steps.groupby(["rows", "row_len"], sort=False)[part].mean().to_numpy()
    shp["batches"] = [counts[(r, n)] for r, n in zip(shp["rows"], shp["row_len"], strict=True)]
    if mode == "all_batches":
        per_pass = steps.groupby("pass")["ms"].sum()
        if set(steps.groupby("pass")["batch"].nunique()) != {len(layout.batches)}:
            raise ValueError("all_batches timing must time every batch in every pass")
        est, low, high = per_pass.mean(), per_pass.min(), per_pass.max()
        shp["seconds"] = [steps[(steps["rows"] == r) & (steps["row_len"] == n)]["ms"].sum() / len(per_pass) / 1e3
                          for r, n in zip(shp["rows"], shp["row_len"], strict=True)]
        passes = len(per_pass)
    else:
        est = float((shp["batches"] * shp["mean"]).sum())
        low, high = float((shp["batches"] * shp["min"]).sum()), float((shp["batches"] * shp["max"]).sum())
        shp["seconds"] = shp["batches"] * shp["mean"] / 1e3
        passes = None
    shp.insert(0, "strategy", layout.strategy)
    total = dict(strategy=layout.strategy, label=LABELS[layout.strategy], mode=mode, batches=len(layout.batches),
                 shapes=len(counts), timed_steps=len(steps), passes=passes, seconds=est / 1e3,
                 seconds_low=low / 1e3, seconds_high=high / 1e3, real_tokens=int(real_tokens),
                 real_tokens_per_s=real_tokens / (est / 1e3) if est > 0 else float("nan"))
    return total, shp


def memory_needed(*, rows: int, row_len: int, real_tokens: int, d_model: int, n_layers: int, context: int,
                  vocab: int = VOCAB) -> int:
    """Bytes one timed forward + backward of GPT-2 needs on its device, for the largest batch.

    Weights and gradients in float32 plus bfloat16 copies (10 bytes per parameter); stored
    activations about 34 bytes per position, layer and model dimension (bfloat16, as in
    Korthikanti et al. 2022, attention scores not kept); the boolean attention mask
    transformers builds and its bfloat16 bias (3 bytes per query–key pair); logits of one chunk
    of :data:`HEAD_CHUNK` real targets in bfloat16 and float32 with their gradient (12 bytes per
    target and vocabulary entry); the input tensors. Plus a quarter for allocator slack. An estimate, meant to refuse
    configurations that cannot fit, not to size a job to the last byte."""
    params = vocab * d_model + context * d_model + n_layers * 12 * d_model * d_model
    positions = rows * row_len
    need = (10 * params + 34 * positions * n_layers * d_model + 3 * rows * row_len * row_len
            + 12 * min(real_tokens, HEAD_CHUNK) * vocab + 4 * 8 * positions)
    return int(need * 1.25)


# --------------------------------------------------------------------------- text → tokens
def tokenize(texts, tok) -> list[list[int]]:
    """Token ids of each text, no special tokens (GPT-2's tokenizer adds none)."""
    return [e.ids for e in tok.encode_batch(texts)]


def efficiencies(lengths: list[int], *, eos: str, batch_size: int, context: int) -> dict:
    """Pad-to-context and greedy-packed efficiency of the first batch and of all samples, and the
    first batch's length statistics (lengths as a padded row holds them)."""
    out = {}
    for s in ("pad_to_context", "greedy_pack"):
        lay_len = [n + 1 for n in lengths] if uses_eos(s, eos) else lengths
        lay = BUILDERS[s](lay_len, batch_size, context)
        out[f"first_batch_{s}"] = first_batch(lay, lay_len)["efficiency"]
        out[f"all_{s}"] = evaluate(lay, lay_len, batch_size)["efficiency"]
        if s == "pad_to_context":
            st = length_stats(lay_len[:batch_size], "first batch")
            out.update({f"first_batch_{k}": st[k] for k in ("min", "max", "mean", "median")})
    out["first_batch_ratio"] = out["first_batch_greedy_pack"] / out["first_batch_pad_to_context"]
    out["all_ratio"] = out["all_greedy_pack"] / out["all_pad_to_context"]
    return out


#: Which column of :func:`template_comparison` each published figure of the chapter is compared with.
PUBLISHED_COLUMNS = {
    "first batch: shortest sample": ("first_batch_min", 1), "first batch: longest sample": ("first_batch_max", 1),
    "first batch: mean length": ("first_batch_mean", 1), "first batch: median length": ("first_batch_median", 1),
    "efficiency, pad to context": ("first_batch_pad_to_context", 100), "efficiency, packed": ("first_batch_greedy_pack", 100),
    "packed ÷ pad to context": ("first_batch_ratio", 1),
}


def printed_as(value: float, figure) -> bool:
    """Whether ``value`` prints as the published figure does, to the digits the source printed."""
    text = figure.value.replace(",", "")
    digits = len(text.split(".")[1]) if "." in text else 0
    return f"{value:.{digits}f}" == text


def published_matches(row: dict) -> list[str]:
    """The published figures of this chapter that a :func:`efficiencies` row reproduces as printed."""
    from .book import published

    out = []
    for metric, (col, scale) in PUBLISHED_COLUMNS.items():
        f = published.figure(CHAPTER, metric)
        if f is not None and col in row and row[col] is not None and printed_as(scale * row[col], f):
            out.append(metric)
    return out


def template_comparison(records, tok, *, batch_size: int, context: int, eos_id: int = EOS_ID) -> pd.DataFrame:
    """Every named template × every end-of-text mode: the first batch's length statistics and the
    efficiencies of both populations, and how many published figures each reproduces as printed."""
    from . import textdata

    rows = []
    for name in textdata.TEMPLATES:
        lengths = [len(t) for t in tokenize([textdata.join(r, name) for r in records], tok)]
        for eos in EOS_MODES:
            r = dict(template=name, eos=eos, **efficiencies(lengths, eos=eos, batch_size=batch_size, context=context))
            m = published_matches(r)
            rows.append({**r, "published_matched": len(m), "published_of": len(PUBLISHED_COLUMNS)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- chapter
def check_parameters(p: dict) -> dict:
    """Every parameter of the chapter, checked before any work (types, ranges, names)."""
    from . import textdata

    q = dict(p)
    q["n_samples"] = positive_int("n_samples", p["n_samples"], maximum=10_000_000)
    q["context_length"] = positive_int("context_length", p["context_length"], maximum=1 << 20)
    q["batch_size"] = positive_int("batch_size", p["batch_size"], maximum=1 << 16)
    for name in ("dataset", "tokenizer"):
        if not isinstance(p[name], str) or not p[name].strip():
            raise ParameterError(name, p[name], "a public name such as "
                                 + repr(textdata.DATASET_NAME if name == "dataset" else textdata.TOKENIZER_NAME))
    for name in ("dataset_path", "tokenizer_dir"):
        if p.get(name) is not None and not (isinstance(p[name], str) and p[name].strip()):
            raise ParameterError(name, p[name], "null (use the offline copy or the hub) or a path")
    q["template"] = textdata.check_template(p["template"])
    q["eos"] = choice("eos", p["eos"], tuple(EOS_MODES))
    q["strategies"] = choices("strategies", p["strategies"], STRATEGIES)
    q["bucket_batches"] = positive_int("bucket_batches", p["bucket_batches"], maximum=1 << 16)
    q["heatmap_bins"] = positive_int("heatmap_bins", p["heatmap_bins"], maximum=4096)
    q["device"] = choice("device", p["device"], DEVICES)
    if q["device"] == "cuda" and not torch.cuda.is_available():
        raise ParameterError("device", "cuda", "'auto', 'cpu' or 'none' (no CUDA device on this machine)")
    q["timing"] = choice("timing", p["timing"], tuple(TIMING_MODES))
    q["timing_repeats"] = positive_int("timing_repeats", p["timing_repeats"], maximum=1000)
    q["warmup_steps"] = nonnegative_int("warmup_steps", p["warmup_steps"], maximum=1000)
    for name in ("d_model", "n_layers", "n_heads"):
        q[name] = positive_int(name, p[name], maximum=1 << 16)
    if q["d_model"] % q["n_heads"]:
        raise ParameterError("n_heads", q["n_heads"], f"a divisor of d_model ({q['d_model']})")
    q["seed"] = nonnegative_int("seed", p.get("seed", 0), maximum=2**32 - 1)
    q["progress"] = boolean("progress", p.get("progress", True))
    if p.get("run_dir") is not None:
        if not isinstance(p["run_dir"], (str, Path)) or not str(p["run_dir"]).strip():
            raise ParameterError("run_dir", p["run_dir"], "a directory path")
        creatable_dir("run_dir", p["run_dir"])
    return q


def timing_device(device: str) -> str | None:
    """The device the cost is measured on, or None (``auto`` on a machine without CUDA, ``none``)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else None
    return None if device == "none" else device


def _available_bytes(device: str) -> int:
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    import psutil

    return int(psutil.virtual_memory().available)


def check_memory(p: dict, layouts: dict[str, Layout], layout_lengths: dict[str, list[int]]) -> dict:
    """Memory the timed steps need (their largest batch) against what the device has free; fails
    naming ``context_length`` (with the batch shape) before any work when it does not fit."""
    dev = timing_device(p["device"])
    if dev is None:
        return dict(device=None, needed_bytes=0, available_bytes=None)
    need, worst = 0, None
    for s, lay in layouts.items():
        for b in range(len(lay.batches)):
            real = sum(layout_lengths[s][i] for row in lay.batches[b] for i in row)
            m = memory_needed(rows=len(lay.batches[b]), row_len=lay.row_len[b], real_tokens=real,
                              d_model=p["d_model"], n_layers=p["n_layers"], context=p["context_length"])
            if m > need:
                need, worst = m, (s, *lay.shape(b))
    have = _available_bytes(dev)
    if need > have:
        s, rows, n = worst
        where = "GPU memory free" if dev == "cuda" else "memory available"
        raise ParameterError("context_length", p["context_length"],
                             f"a value for which one timed step fits ({LABELS[s]}: a batch of {rows:,} × {n:,} "
                             f"positions needs about {need / 2**30:,.1f} GiB, {have / 2**30:,.1f} GiB {where}); "
                             "lower context_length, batch_size or d_model, or set device 'none'")
    return dict(device=dev, needed_bytes=need, available_bytes=have, largest_batch=list(worst))


def preflight(params: dict):
    """Parameters, data and tokenizer, that every sample fits the context, and memory: before any work.
    Returns (checked parameters, records, tokens per sample, tokenizer, source)."""
    import importlib.util

    from . import textdata
    from .params import requires

    p = check_parameters(params)
    requires("tokenizer", p["tokenizer"], "tokenizers", "the tokenizers package: pip install tokenizers")
    if importlib.util.find_spec("transformers") is None:
        raise ParameterError("template", p["template"], "a setting this machine can run: chapter 5 needs the "
                             "transformers package for GPT-2 and its packing collator (pip install transformers)")
    records, d_origin = textdata.load_records(p["n_samples"], p["dataset"], p.get("dataset_path"))
    tok, t_origin = textdata.load_tokenizer(p["tokenizer"], p.get("tokenizer_dir"))
    tokens = tokenize([textdata.join(r, p["template"]) for r in records], tok)
    longest = max(len(t) for t in tokens) + (1 if p["eos"] != "never" else 0)
    if longest > p["context_length"]:
        raise ParameterError("context_length", p["context_length"],
                             f"at least the longest sample ({longest} tokens): a packer never splits a sample")
    layouts, lens = build_layouts(p, [len(t) for t in tokens])
    p["memory"] = check_memory(p, layouts, lens)
    return p, records, tokens, tok, textdata.Source(d_origin, t_origin)


def build_layouts(p: dict, lengths: list[int]) -> tuple[dict[str, Layout], dict[str, list[int]]]:
    """Every requested layout (validated) and the per-sample lengths it carries (EOS included where used)."""
    layouts, lens = {}, {}
    for s in p["strategies"]:
        lens[s] = [n + 1 for n in lengths] if uses_eos(s, p["eos"]) else list(lengths)
        kw = {"window_batches": p["bucket_batches"]} if s == "bucketed" else {}
        layouts[s] = BUILDERS[s](lens[s], p["batch_size"], p["context_length"], **kw)
        validate(layouts[s], lens[s])
    return layouts, lens


def run(*, n_samples: int, context_length: int, batch_size: int, dataset: str, dataset_path, tokenizer: str,
        tokenizer_dir, template: str, eos: str, strategies, bucket_batches: int, heatmap_bins: int, device: str,
        timing: str, timing_repeats: int, warmup_steps: int, d_model: int, n_layers: int, n_heads: int,
        seed: int = 0, run_dir=None, progress: bool = True):
    """Run chapter 5 and save the result (tables + fingerprint) to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from tqdm import tqdm

    from . import textdata
    from .book import results

    p, records, tokens, tok, source = preflight({**params, "progress": progress})
    transformers = _import_transformers()
    res = results.start(CHAPTER, params, run_dir)
    lengths = [len(t) for t in tokens]
    res.add("lengths", pd.DataFrame({"sample": range(len(lengths)), "tokens": lengths}))
    layouts, lens = build_layouts(p, lengths)
    pad_len = lens.get("pad_to_context") or ([n + 1 for n in lengths] if eos == "always" else lengths)
    res.add("length_stats", [length_stats(pad_len[:batch_size], "first batch"),
                             length_stats(pad_len, "all samples")])
    res.add("strategies", [evaluate(layouts[s], lens[s], batch_size) for s in p["strategies"]])
    res.add("first_batch", [first_batch(layouts[s], lens[s]) for s in p["strategies"]])
    for s in ("pad_to_context", "greedy_pack", "best_fit_decreasing"):
        if s in layouts:
            frac, width = fill_fractions(layouts[s], lens[s], heatmap_bins)
            fb = first_batch(layouts[s], lens[s])
            res.metadata[f"heatmap_{s}"] = dict(fraction_real=np.round(frac, 4).tolist(), bin_width=width,
                                                row_len=layouts[s].row_len[0], efficiency=fb["efficiency"],
                                                samples=fb["samples"])
    res.add("templates", template_comparison(records, tok, batch_size=batch_size, context=context_length))
    res.add("isolation", isolation_check(seed))
    lay_tokens = {s: layout_tokens(tokens, s, eos) for s in p["strategies"]}
    res.add("collator", [compare_with_collator(layouts[s], lay_tokens[s]) for s in p["strategies"] if s in PACKED])
    dev = p["memory"]["device"]
    if dev is not None:
        model = gpt2_model(context=context_length, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                           seed=seed).to(dev).train()
        totals, shapes, steps = [], [], []
        bar = tqdm(total=sum(timed_steps(layouts[s], timing, timing_repeats) for s in p["strategies"]),
                   desc="chapter 5 timing", disable=not progress, mininterval=5)
        for s in p["strategies"]:
            lay, toks = layouts[s], lay_tokens[s]
            collate = collate_packed if s in PACKED else collate_padded

            def step(b, lay=lay, toks=toks, collate=collate):
                batch = {k: v.to(dev) for k, v in collate(lay.batches[b], toks, lay.row_len[b], EOS_ID).items()}
                return train_step(model, batch, dev)

            st = time_layout(lay, step, mode=timing, repeats=timing_repeats, warmup=warmup_steps, progress=bar)
            total, shp = cost_of_layout(st, lay, mode=timing, real_tokens=sum(lens[s]))
            totals.append({**total, "device": dev})
            shapes.append(shp)
            steps.append(st)
        bar.close()
        res.add("cost", totals)
        res.add("cost_shapes", pd.concat(shapes, ignore_index=True))
        res.add("cost_steps", pd.concat(steps, ignore_index=True))
    t = textdata.TEMPLATES.get(template)
    res.metadata.update(
        text_source=vars(source), timed_on=dev,
        timing_note=None if dev else ("no CUDA device on this machine" if device == "auto"
                                      else "the parameter device is 'none'"),
        model=dict(architecture="GPT-2 (transformers, random weights from GPT2Config)", d_model=d_model,
                   n_layers=n_layers, n_heads=n_heads, vocab=VOCAB, context=context_length),
        transformers=transformers.__version__, memory=p["memory"],
        template=dict(name=template, with_input=t.with_input if t else template,
                      without_input=t.without_input if t else template, description=t.description if t else
                      "a format string given as a parameter", example=textdata.join(records[0], template)),
        eos=dict(mode=eos, description=EOS_MODES[eos]))
    res.save(results.resolve_run_dir(run_dir))
    return res


# --------------------------------------------------------------------------- findings (computed text)
#: The packer the published figures used (the source's greedy, in-order packing).
SOURCE_PACKER = "greedy_pack"


def _published(metric: str):
    from .book import published

    return published.figure(CHAPTER, metric)


def _like(value: float, unit: str, metric: str | None = None) -> str:
    """A value with the digits of the published figure it is compared with (else three significant)."""
    from .book.findings import num

    f = _published(metric) if metric else None
    if f is None:
        return num(value, unit)
    text = f.value.replace(",", "")
    digits = len(text.split(".")[1]) if "." in text else 0
    return f"{value:,.{digits}f}" + (unit if unit in ("%", "×") else f" {unit}")


def model_label(res) -> str:
    """The timed model as the chapter names it: 'GPT-2 architecture (4 layers, 512 wide)' (not GPT-2 itself)."""
    m = res.metadata.get("model", {}) if hasattr(res, "metadata") else {}
    n, d = m.get("n_layers"), m.get("d_model")
    if n is None or d is None:
        return "GPT-2 architecture"
    return f"GPT-2 architecture ({n} layer{'s' if n != 1 else ''}, {d} wide)"


def share_text(fraction: float) -> str:
    """A share in percent with enough digits that a share below 100% never prints as 100%
    (131,053 of 131,072 -> '99.99'), nor a share above 0 as 0; no % sign."""
    v = 100 * float(fraction)
    if v >= 100:
        return f"{v:.0f}"
    digits = 2 if v < 10 else 1   # three significant digits, as the other tables print
    while digits < 6 and (round(v, digits) >= 100 or (v > 0 and round(v, digits) == 0)):
        digits += 1
    return f"{v:.{digits}f}"


def _device_name(res) -> str:
    dev = res.metadata.get("timed_on")
    if dev == "cuda":
        return (res.fingerprint.get("gpu") or {}).get("name") or "the GPU"
    return (res.fingerprint.get("cpu") or {}).get("model") or "the CPU"


def key_metrics(res) -> dict:
    """First-batch metrics under the published metric names (the population the published figures describe)."""
    fb = res.table("first_batch").set_index("strategy")
    out = {}
    if "pad_to_context" in fb.index:
        out["efficiency, pad to context"] = (100 * fb.loc["pad_to_context", "efficiency"], None)
    if SOURCE_PACKER in fb.index:
        out["efficiency, packed"] = (100 * fb.loc[SOURCE_PACKER, "efficiency"], None)
        if "pad_to_context" in fb.index:
            out["packed ÷ pad to context"] = (fb.loc[SOURCE_PACKER, "efficiency"]
                                              / fb.loc["pad_to_context", "efficiency"], None)
    st = res.table("length_stats").set_index("population")
    if "first batch" in st.index:
        s = st.loc["first batch"]
        out.update({"first batch: shortest sample": (float(s["min"]), None),
                    "first batch: longest sample": (float(s["max"]), None),
                    "first batch: mean length": (float(s["mean"]), None),
                    "first batch: median length": (float(s["median"]), None)})
    return out


def reproduction(res) -> dict:
    """Which published figures this run reproduces as printed (first batch), and which it does not."""
    got = key_metrics(res)
    out = {"matched": [], "missed": []}
    for metric, (value, _) in got.items():
        f = _published(metric)
        if f is not None:
            out["matched" if printed_as(value, f) else "missed"].append(metric)
    return out


def _setting_differs(res) -> list[str]:
    p = res.parameters
    return [f"`{k}` = `{p.get(k)}` (published: `{v}`)" for k, v in PUBLISHED_SETTING.items() if p.get(k) != v]


def findings(res) -> list:
    """The chapter's key results, computed from a result: first batch (the published figures'
    population), all samples, measured cost, and whether packed documents stay apart."""
    from .book.findings import Finding, choose, compare, direction, pct, times

    fb = res.table("first_batch").set_index("strategy")
    al = res.table("strategies").set_index("strategy")
    L = int(res.parameters["context_length"])
    eos = res.parameters.get("eos")
    out = []
    pad = fb.loc["pad_to_context"] if "pad_to_context" in fb.index else None
    pk = fb.loc[SOURCE_PACKER] if SOURCE_PACKER in fb.index else None
    if pad is not None:
        mean = pad["real_tokens"] / pad["samples"]
        out.append(Finding(
            "first_batch_pad_to_context",
            f"**First batch** ({int(pad['samples'])} samples, the population of the published figures), padded "
            f"to the context of {L:,}: **{_like(100 * pad['efficiency'], '%', 'efficiency, pad to context')}** "
            f"of the positions are real tokens (a sample fills {mean:,.0f} of {L:,} positions on average).",
            value=100 * pad["efficiency"], unit="%", published="efficiency, pad to context"))
    if pk is not None:
        sep = ", each followed by an end-of-text token" if uses_eos(SOURCE_PACKER, eos) else ""
        out.append(Finding(
            "first_batch_packed",
            f"**First batch** packed greedily in sample order: its {int(pk['rows'])} rows of {int(pk['row_len']):,} "
            f"positions carry samples {int(pk['first_sample'])}–{int(pk['last_sample']):,} "
            f"({int(pk['samples']):,} samples{sep}), **{_like(100 * pk['efficiency'], '%', 'efficiency, packed')}** "
            "real tokens.",
            value=100 * pk["efficiency"], unit="%", published="efficiency, packed"))
    if pad is not None and pk is not None:
        r = pk["efficiency"] / pad["efficiency"]
        cmp = choose(direction(pk["efficiency"], pad["efficiency"], tol=0.01),
                     "more real tokens per computed position than", "fewer real tokens per computed position than",
                     "as many real tokens per computed position as")
        rep = reproduction(res)
        three = ("efficiency, pad to context", "efficiency, packed", "packed ÷ pad to context")
        if all(m in rep["matched"] for m in three):
            verdict = ("the three published figures are reproduced as printed, from the first batch, with the "
                       f"`{res.parameters.get('template')}` template and end-of-text `{eos}`")
        else:
            missed = [m for m in three if m not in rep["matched"]]
            differs = _setting_differs(res)
            verdict = (f"not as published for {', '.join(missed)}"
                       + (f"; this run's setting differs from the published one: {', '.join(differs)}" if differs
                          else ""))
        out.append(Finding(
            "first_batch_ratio",
            f"In the first batch, packing carries {cmp} padding to the context: "
            f"**{_like(r, '×', 'packed ÷ pad to context')}** ({verdict}).",
            value=r, unit="×", published="packed ÷ pad to context"))
    if "pad_to_context" in al.index and SOURCE_PACKER in al.index:
        a, b = al.loc["pad_to_context"], al.loc[SOURCE_PACKER]
        r = b["efficiency"] / a["efficiency"]
        word = compare(b["efficiency"], a["efficiency"], more="more", less="fewer", same="as many", tol=0.01,
                       as_ratio=False)
        moved = compare(a["efficiency"], pad["efficiency"], more="higher than", less="lower than",
                        same="the same as", tol=0.01, as_ratio=False) if pad is not None else None
        out.append(Finding(
            "all_samples",
            f"**All {int(a['samples']):,} samples** (a second population: what an epoch costs): padded to the "
            f"context {pct(a['efficiency'])} real tokens"
            + (f" ({moved} the first batch)" if moved else "")
            + f", packed {pct(b['efficiency'])}: **{times(r)}** {word} real tokens per position, "
            f"{int(b['steps']):,} step{'s' if b['steps'] != 1 else ''} of {int(a['rows_per_step'])} rows instead "
            f"of {int(a['steps']):,}." + _eos_note(a, b, eos),
            value=r, unit="×"))
    out.append(_cost_finding(res))
    iso = _isolation_finding(res)
    if iso is not None:
        out.append(iso)
    return out


def _eos_note(a, b, eos) -> str:
    """Why the efficiency ratio and the positions ratio differ (end-of-text tokens count as real tokens
    in packed rows), said once, with both numbers; empty when they print alike."""
    from .book.findings import times

    pos = a["positions"] / b["positions"]
    eff = b["efficiency"] / a["efficiency"]
    if times(pos) == times(eff):
        return ""
    return (f" In positions computed the gain is {times(pos)}: the efficiency counts each packed sample's "
            "end-of-text token as a real token, as the source's grid does, and padded rows carry none"
            if uses_eos(SOURCE_PACKER, eos) and not uses_eos("pad_to_context", eos) else
            f" In positions computed the gain is {times(pos)}") + " (the cost section compares time with positions)."


def _cost_finding(res):
    from .book import findings as fnd
    from .book.findings import Finding, compare, num

    if "cost" not in res.tables:
        note = res.metadata.get("timing_note") or "cost not measured"
        return Finding("measured_cost", f"Cost in GPU time: not measured in this run ({note}); the cost section "
                       "shows the reference run's timings where it has them, labelled as such.")
    c = res.table("cost").set_index("strategy")
    if not {"pad_to_context", SOURCE_PACKER} <= set(c.index):
        return Finding("measured_cost", "Cost: this run timed neither both padding to the context and greedy "
                       "packing, so the two are not compared.")
    a, b = c.loc["pad_to_context"], c.loc[SOURCE_PACKER]
    mid = a["seconds"] / b["seconds"]
    lo, hi = a["seconds_low"] / b["seconds_high"], a["seconds_high"] / b["seconds_low"]
    phrase = compare([a["seconds_low"], a["seconds_high"]], [b["seconds_low"], b["seconds_high"]],
                     more="faster", less="slower", same="level with padding", as_ratio=False)
    how = (f"every batch timed, {int(a['passes'])} pass{'es' if a['passes'] != 1 else ''}"
           if a["mode"] == "all_batches" else "each batch shape timed and weighted by how many batches have it")
    passes = int(a["passes"]) if a["mode"] == "all_batches" else 0

    def rng(x, y):   # the ratio's range, or 'in all N passes' when both ends print alike
        if fnd.span(x, y, "×") == num(x, "×"):
            return (f", in all {passes} passes" if passes > 1 else
                    ", in its one pass" if passes == 1 else ", from the fastest and the slowest step of each shape alike")
        how_range = "min–max over passes" if passes else "from the fastest and slowest step of each shape"
        return f" (range {fnd.span(x, y, '×')}, {how_range})"

    if phrase == "faster":
        ratio_text, tail = f"**{num(mid, '×')} faster**", rng(lo, hi)
    elif phrase == "slower":
        ratio_text, tail = f"**{num(1 / mid, '×')} slower**", rng(1 / hi, 1 / lo)
    else:
        ratio_text, tail = f"**{phrase}** (padded ÷ packed time {num(mid, '×')})", rng(lo, hi)
    unit = "GPU" if res.metadata.get("timed_on") == "cuda" else "CPU"
    return Finding(
        "measured_cost",
        f"Measured forward + backward of a {model_label(res)}, random weights, on {_device_name(res)}: all samples took "
        f"**{num(b['seconds'], 's')}** packed against **{num(a['seconds'], 's')}** padded to the context ({how}): "
        f"packing is {ratio_text} in measured {unit} time{tail}.",
        value=mid, unit="×", interval=None if fnd.span(lo, hi, "×") == num(lo, "×") else (lo, hi))


def _isolation_finding(res):
    from .book.findings import Finding, num

    if "isolation" not in res.tables:
        return None
    iso = res.table("isolation")
    hf = iso[iso["code"] == "transformers"].reset_index(drop=True)
    if len(hf) < 2:
        return None
    right, default = hf.iloc[0], hf.iloc[1]
    v = right.get("transformers", "?")

    def state(row):
        return (f"reproduces each document alone (largest logit difference {row['max_abs_diff']:.0e})"
                if row["isolated"] else
                f"does not: documents see each other (largest logit difference {num(row['max_abs_diff'])})")

    text = (f"Packed rows from `DataCollatorWithFlattening` (position ids restarting per document, no attention "
            f"mask): a small model of GPT-2's architecture in transformers {v} called with `use_cache=False` "
            f"{state(right)}; called with its "
            f"default `use_cache=True` it {state(default)}.")
    if "collator" in res.tables and len(res.table("collator")):
        col = res.table("collator")
        same = col[["input_ids_equal", "position_ids_equal", "labels_equal"]].all(axis=None)
        names = " and ".join(SHORT[s] for s in col["strategy"])
        text += (f" The project's {names} packer{'s' if len(col) > 1 else ''} and the collator build "
                 + ("identical input ids, position ids and labels for the first batch." if same else
                    "different inputs for the first batch: see the comparison table."))
    return Finding("packing_isolation", text)


# --------------------------------------------------------------------------- more computed text and tables
def template_note(res) -> str:
    """Which joining of the fields and which end-of-text handling reproduce the published figures."""
    t = res.table("templates")
    best = t[t["published_matched"] == t["published_of"]]
    lines = []
    if len(best):
        combos = ", ".join(f"`{r.template}` with end-of-text `{r.eos}`" for r in best.itertuples())
        lines.append(f"Of the {len(t)} combinations of template and end-of-text handling tried, "
                     f"{'only ' if len(best) == 1 else ''}{combos} reproduce{'s' if len(best) == 1 else ''} all "
                     f"{int(t['published_of'].iloc[0])} published first-batch figures as printed.")
    else:
        top = t.sort_values("published_matched", ascending=False).iloc[0]
        lines.append(f"None of the {len(t)} combinations tried reproduces all published first-batch figures; the "
                     f"closest, `{top.template}` with `{top.eos}`, matches {int(top.published_matched)} of "
                     f"{int(top.published_of)}.")
    for r in t[t["eos"] == "packed_only"].itertuples():
        lines.append(f"`{r.template}`: first batch {r.first_batch_min:.0f} / {r.first_batch_max:.0f} / "
                     f"{r.first_batch_mean:.1f} / {r.first_batch_median:.0f} tokens (min / max / mean / median), "
                     f"{100 * r.first_batch_pad_to_context:.2f}% padded, {100 * r.first_batch_greedy_pack:.2f}% "
                     f"packed, {r.first_batch_ratio:.2f}×.")
    differs = _setting_differs(res)
    if differs:
        lines.append("This run's setting is not the published one: " + ", ".join(differs) + ".")
    return "\n\n".join(lines[:1]) + "\n\n" + "\n".join(f"* {x}" for x in lines[1:])


def templates_table(res) -> pd.DataFrame:
    """The first batch under every template and end-of-text handling, with short headers (the
    caption explains them): lengths in tokens, efficiencies in percent, the packing gain, and how
    many published first-batch figures each reproduces as printed."""
    tt = res.table("templates")
    return pd.DataFrame({
        "template": tt["template"], "eos": tt["eos"], "min": tt["first_batch_min"], "max": tt["first_batch_max"],
        "mean": tt["first_batch_mean"], "median": tt["first_batch_median"],
        "padded (%)": [share_text(v) for v in tt["first_batch_pad_to_context"]],
        "packed (%)": [share_text(v) for v in tt["first_batch_greedy_pack"]],
        "gain (×)": tt["first_batch_ratio"],
        "matched": [f"{a}/{b}" for a, b in zip(tt["published_matched"], tt["published_of"])]})


def length_table(res) -> pd.DataFrame:
    """The source's length table beside this run's first batch and all samples."""
    st = res.table("length_stats").set_index("population")
    rows = []
    for label, key, metric in (("shortest", "min", "first batch: shortest sample"),
                               ("longest", "max", "first batch: longest sample"),
                               ("mean", "mean", "first batch: mean length"),
                               ("median", "median", "first batch: median length")):
        f = _published(metric)
        rows.append({"tokens per sample": label, "published (S1): first batch": f.text if f else "—",
                     f"this run: first batch ({int(st.loc['first batch', 'samples'])})":
                         _like(float(st.loc["first batch", key]), "", metric).strip(),
                     f"this run: all samples ({int(st.loc['all samples', 'samples']):,})":
                         _like(float(st.loc["all samples", key]), "", metric).strip()})
    return pd.DataFrame(rows)


def populations_table(res) -> pd.DataFrame:
    """Efficiency of every layout in both populations, side by side."""
    fb = res.table("first_batch").set_index("strategy")
    al = res.table("strategies").set_index("strategy")
    return pd.DataFrame([{
        "layout": LABELS[s], "first batch: rows × positions": f"{int(fb.loc[s, 'rows'])} × {int(fb.loc[s, 'row_len']):,}",
        "first batch: samples": int(fb.loc[s, "samples"]), "first batch: efficiency (%)": share_text(fb.loc[s, "efficiency"]),
        "all samples: steps": int(al.loc[s, "steps"]), "all samples: efficiency (%)": share_text(al.loc[s, "efficiency"]),
        "positions vs pad to context (×)": (al.loc["pad_to_context", "positions"] / al.loc[s, "positions"]
                                            if "pad_to_context" in al.index else float("nan")),
    } for s in al.index])


def population_note(res) -> str:
    """How much the population alone moves the numbers."""
    from .book.findings import compare, pct, times

    fb = res.table("first_batch").set_index("strategy")
    al = res.table("strategies").set_index("strategy")
    if not {"pad_to_context", SOURCE_PACKER} <= set(fb.index):
        return ""
    rf = fb.loc[SOURCE_PACKER, "efficiency"] / fb.loc["pad_to_context", "efficiency"]
    ra = al.loc[SOURCE_PACKER, "efficiency"] / al.loc["pad_to_context", "efficiency"]
    return (f"Same template, same tokenizer, same code: the population alone takes padding to the context from "
            f"{pct(fb.loc['pad_to_context', 'efficiency'])} (first batch) to {pct(al.loc['pad_to_context', 'efficiency'])} "
            f"(all samples), and the packing gain from {times(rf)} to {times(ra)} "
            f"({compare(ra, rf, more='larger', less='smaller', same='about the same', as_ratio=False, tol=0.02)} "
            "over all samples). A figure is only comparable with one of the same population.")


def cost_result(res, ref=None):
    """The result whose timings the cost section shows (this run's, else the reference run's) and a label."""
    if "cost" in res.tables:
        return res, "this run"
    if ref is not None and "cost" in getattr(ref, "tables", {}):
        return ref, f"reference run {ref.run_id}"
    return None, None


def cost_note(res) -> str:
    """Per-shape facts of the timing: partial batches, spreads, and measured time against positions."""
    from .book import findings as fnd
    from .book.findings import HIGH_SPREAD, num, pct, spread_note

    c = res.table("cost").set_index("strategy")
    shp = res.table("cost_shapes")
    lines = []
    for s, g in shp.groupby("strategy", sort=False):
        full = g[g["rows"] == g["rows"].max()]
        part = g[g["rows"] < g["rows"].max()]
        if len(part):
            n, total = int(part["batches"].sum()), int(g["batches"].sum())
            text = (f"{LABELS[s]}: {n} of {total} batches {'is' if n == 1 else 'are'} partial "
                    f"({', '.join(str(int(r)) for r in part['rows'])} row{'s' if part['rows'].max() > 1 else ''})")
            same_len = part[part["row_len"].isin(full["row_len"])]
            if len(same_len) and len(full):
                r = same_len.iloc[0]
                f = full[full["row_len"] == r["row_len"]].iloc[0]
                text += (f"; {int(r['rows'])} × {int(r['row_len']):,} took {num(r['mean'], 'ms')} per step against "
                         f"{num(f['mean'], 'ms')} for {int(f['rows'])} × {int(f['row_len']):,}")
            lines.append(text + "; each batch counts once, at its own cost.")
        wide = g[(g["timed"] > 1) & (g["mean"] > 0) & (g["std"] > HIGH_SPREAD * g["mean"])]
        if len(wide):
            w = wide.assign(cv=wide["std"] / wide["mean"]).sort_values("cv").iloc[-1]
            lines.append(f"{LABELS[s]}: step times of {len(wide)} of {len(g)} batch shape"
                         f"{'s' if len(g) != 1 else ''} spread by more than {pct(HIGH_SPREAD)} (coefficient of "
                         f"variation); the widest, {int(w['rows'])} × {int(w['row_len']):,}, ran "
                         f"{fnd.span(w['min'], w['max'], 'ms')} over {int(w['timed'])} steps: read "
                         "these as ranges.")
    if {"pad_to_context", SOURCE_PACKER} <= set(c.index):
        al = res.table("strategies").set_index("strategy")
        pos = al.loc["pad_to_context", "positions"] / al.loc[SOURCE_PACKER, "positions"]
        t = c.loc["pad_to_context", "seconds"] / c.loc[SOURCE_PACKER, "seconds"]
        lines.append(f"Positions predict a {num(pos, '×')} gain; the measured time gives {num(t, '×')} "
                     f"({num(100 * t / pos, '%')} of the positions' prediction).")
        split = breakdown_note(res)
        if split:
            lines.append(split)
    if "isolation" in res.tables:
        hf = res.table("isolation")
        hf = hf[hf["code"] == "transformers"]
        if len(hf) and not bool(hf.iloc[0]["isolated"]):
            lines.append(f"In transformers {hf.iloc[0]['transformers']} the packed rows were timed as the library ran "
                         "them: without a block-diagonal mask (documents saw each other in the check above), so "
                         "their cost is that of plain causal attention.")
    if "cost_steps" in res.tables:
        st = res.table("cost_steps")
        if st["pass"].nunique() > 1:
            for s, g in st.groupby("strategy", sort=False):
                note = spread_note(f"{LABELS[s]}, time per pass", (g.groupby('pass')['ms'].sum() / 1e3).tolist(), "s")
                if note:
                    lines.append(note)
    return "\n".join(f"* {x}" for x in lines)


def step_breakdown(res) -> pd.DataFrame:
    """The parts of a full step (the most frequent shape with the most rows) of each layout: layers
    forward, output layer + loss, layers backward, with the real targets and positions of that shape."""
    shp = res.table("cost_shapes")
    if not set(STEP_PARTS) <= set(shp.columns):
        return pd.DataFrame()
    st = res.table("cost_steps")
    rows = []
    for s, g in shp.groupby("strategy", sort=False):
        full = g[g["rows"] == g["rows"].max()].sort_values("batches").iloc[-1]
        mine = st[(st["strategy"] == s) & (st["rows"] == full["rows"]) & (st["row_len"] == full["row_len"])]
        rows.append(dict(strategy=s, label=LABELS[s], rows=int(full["rows"]), row_len=int(full["row_len"]),
                         positions=int(full["rows"] * full["row_len"]), ms=float(full["mean"]),
                         **{k: float(full[k]) for k in STEP_PARTS},
                         real_targets=float(mine["real_targets"].mean()) if "real_targets" in mine else float("nan")))
    return pd.DataFrame(rows)


def breakdown_note(res) -> str:
    """Why time does not follow positions: the parts of a full padded and a full packed step."""
    from .book.findings import compare, num

    b = step_breakdown(res)
    if b.empty or not {"pad_to_context", SOURCE_PACKER} <= set(b["strategy"]):
        return ""
    b = b.set_index("strategy")
    a, k = b.loc["pad_to_context"], b.loc[SOURCE_PACKER]
    layers_a = a["layers_forward_ms"] + a["layers_backward_ms"]
    layers_k = k["layers_forward_ms"] + k["layers_backward_ms"]
    per_pos = compare(layers_k / k["positions"], layers_a / a["positions"], more="more", less="less",
                      same="about the same", as_ratio=False, tol=0.1)
    head = compare(k["head_ms"], a["head_ms"], more="more", less="less", same="about the same", as_ratio=False)
    targets = (f" for {num(k['real_targets'], '')} real targets against {num(a['real_targets'], '')}"
               if not (np.isnan(k["real_targets"]) or np.isnan(a["real_targets"])) else "")
    return (f"A full padded step ({int(a['rows'])} × {int(a['row_len']):,}) took {num(a['ms'], 'ms')}: layers "
            f"{num(layers_a, 'ms')}, output layer and loss {num(a['head_ms'], 'ms')}. A full packed step "
            f"({int(k['rows'])} × {int(k['row_len']):,}) took {num(k['ms'], 'ms')}: layers {num(layers_k, 'ms')} "
            f"({per_pos} per position), output layer and loss {num(k['head_ms'], 'ms')} ({head}{targets}). "
            "Positions set the layers' cost; real tokens set the output layer's.")


def cost_table(res) -> pd.DataFrame:
    c = res.table("cost")
    return pd.DataFrame({
        "layout": c["label"], "batches": c["batches"], "batch shapes": c["shapes"], "steps timed": c["timed_steps"],
        "time for all samples (s)": c["seconds"], "min (s)": c["seconds_low"], "max (s)": c["seconds_high"],
        "real tokens/s": c["real_tokens_per_s"]})


#: Layouts with more batch shapes than this get one summary row in :func:`shapes_table`.
SHAPES_SHOWN = 6


def shapes_table(res) -> pd.DataFrame:
    """Step time of each batch shape; a layout with many shapes (padding to the longest) is summarised
    in one row: the range of its shapes and of their mean step times."""
    rows = []
    for s, g in res.table("cost_shapes").groupby("strategy", sort=False):
        if len(g) <= SHAPES_SHOWN:
            for r in g.itertuples():
                rows.append({"layout": LABELS[s], "shape (rows × positions)": f"{int(r.rows)} × {int(r.row_len):,}",
                             "batches": int(r.batches), "steps timed": int(r.timed), "ms per step": r.mean,
                             "std (ms)": r.std, "min (ms)": r.min, "max (ms)": r.max, "time (s)": r.seconds})
        else:
            rows.append({"layout": LABELS[s],
                         "shape (rows × positions)": f"{len(g)} shapes: {int(g['rows'].min())}–{int(g['rows'].max())}"
                                                     f" × {int(g['row_len'].min()):,}–{int(g['row_len'].max()):,}",
                         "batches": int(g["batches"].sum()), "steps timed": int(g["timed"].sum()),
                         "ms per step": float((g["batches"] * g["mean"]).sum() / g["batches"].sum()),
                         "std (ms)": float("nan"), "min (ms)": float(g["min"].min()), "max (ms)": float(g["max"].max()),
                         "time (s)": float(g["seconds"].sum())})
    return pd.DataFrame(rows)


def isolation_table(res) -> pd.DataFrame:
    iso = res.table("isolation")
    size = f"{ISOLATION_MODEL['n_layers']} layers, {ISOLATION_MODEL['d_model']} wide"
    model = iso["model"].str.replace(r"^GPT-2 \((.*)\)$", rf"GPT-2 architecture ({size}; \1)", regex=True)
    return pd.DataFrame({"code": iso["code"], "model": model, "packed row fed as": iso["inputs"],
                         "largest |logit difference| vs alone": [f"{v:.1e}" for v in iso["max_abs_diff"]],
                         "documents kept apart": iso["isolated"].map({True: "yes", False: "no"})})


def collator_note(res) -> str:
    if "collator" not in res.tables or not len(res.table("collator")):
        return "No packing layout in this run: nothing to compare with the collator."
    lines = []
    for r in res.table("collator").itertuples():
        same = [n for n, ok in (("input ids", r.input_ids_equal), ("position ids", r.position_ids_equal),
                                ("labels", r.labels_equal)) if ok]
        diff = [n for n in ("input ids", "position ids", "labels") if n not in same]
        lines.append(f"{LABELS[r.strategy]}, first batch ({r.rows} rows, {r.documents:,} documents, "
                     f"{r.real_tokens:,} real tokens): "
                     + ("identical " + ", ".join(same) if not diff else "different " + ", ".join(diff))
                     + " from `packed_inputs` and from `DataCollatorWithFlattening`.")
    return "\n".join(f"* {x}" for x in lines)


def takeaways(res) -> str:
    """The chapter's closing bullets, each following this run's data."""
    from .book.findings import choose, direction, pct

    al = res.table("strategies").set_index("strategy")
    lines = []
    if "pad_to_context" in al.index:
        order = al["efficiency"].sort_values(ascending=False)
        lines.append("Efficiency over all samples, best first: " + ", ".join(
            f"{LABELS[s]} {pct(e)}" for s, e in order.items()) + ".")
    if {"pad_to_longest", SOURCE_PACKER} <= set(al.index):
        d = direction(al.loc[SOURCE_PACKER, "efficiency"], al.loc["pad_to_longest", "efficiency"], tol=0.01)
        lines.append(choose(d, "Padding to the longest sample of each batch recovers part of the waste; packing "
                               "recovers more.",
                            "Here padding to the longest sample of each batch is more efficient than greedy packing.",
                            "Here padding to the longest sample of each batch is as efficient as greedy packing."))
    iso = res.table("isolation") if "isolation" in res.tables else None
    if iso is not None:
        hf = iso[iso["code"] == "transformers"]
        if len(hf) >= 2 and bool(hf.iloc[0]["isolated"]) and not bool(hf.iloc[1]["isolated"]):
            lines.append("With transformers, packed rows stay correct only when nothing else overrides the "
                         "position ids: no attention mask and no cache (`use_cache=False`), or a "
                         "variable-length attention kernel.")
        elif len(hf) >= 1 and not bool(hf.iloc[0]["isolated"]):
            lines.append("This transformers version does not keep packed documents apart from position ids alone: "
                         "pass an explicit block-diagonal mask or use a variable-length attention kernel.")
    return "\n".join(f"* {x}" for x in lines)
