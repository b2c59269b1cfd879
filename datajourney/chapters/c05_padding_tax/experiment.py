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

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from datajourney.chapters.c05_padding_tax.packing import best_fit_rows, greedy_rows
from datajourney.chapters.c05_padding_tax.params import (
    CHAPTER,
    EOS_ID,
    EOS_MODES,
    ISOLATED,
    ISOLATION_MODEL,
    LABELS,
    PACKED,
    STEP_PARTS,
    STRATEGIES,
    VOCAB,
    Params,
    uses_eos,
)
from datajourney.core import timing
from datajourney.core.params import ParameterError, run_options

#: How the GPU (or CPU) cost of a layout is measured (the page says what each means).
TIMING_MODES = ("all_batches", "per_shape")


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
    source's ``simulate_packed_batching``, continued past the first batch: :func:`~.packing.greedy_rows`)."""
    b = _chunks(greedy_rows(lengths, context), batch_size)
    return Layout("greedy_pack", b, [context] * len(b))


def best_fit_decreasing(lengths, batch_size: int, context: int) -> Layout:
    """Longest samples first; each goes into the open row it fills most tightly (:func:`~.packing.best_fit_rows`)."""
    b = _chunks(best_fit_rows(lengths, context), batch_size)
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
        rows.append(("project", "small causal LM", "explicit_mask",
                     _max_diff(tiny(ids, pos, block_causal_mask(doc))[0], alone, docs)))
        rows.append(("project", "small causal LM", "plain_causal",
                     _max_diff(tiny(ids)[0], alone, docs)))
        alone = [gpt2(input_ids=torch.tensor([d]), use_cache=False).logits[0] for d in docs]
        rows.append(("transformers", f"GPT-2 ({impl})",
                     "collator_no_cache",
                     _max_diff(gpt2(input_ids=flat["input_ids"], position_ids=flat["position_ids"],
                                    use_cache=False).logits[0], alone, docs)))
        gpt2.config.use_cache = True  # what a model loaded from the hub has
        rows.append(("transformers", f"GPT-2 ({impl})",
                     "collator_default",
                     _max_diff(gpt2(input_ids=flat["input_ids"], position_ids=flat["position_ids"]).logits[0],
                               alone, docs)))
        gpt2.config.use_cache = False
        rows.append(("transformers", f"GPT-2 ({impl})", "no_position_ids",
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
    if mode not in TIMING_MODES:
        raise ParameterError("timing", mode, "one of " + ", ".join(map(repr, TIMING_MODES)))
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
    "first batch: shortest sample": ("first_batch_min", 1),
    "first batch: longest sample": ("first_batch_max", 1),
    "first batch: mean length": ("first_batch_mean", 1),
    "first batch: median length": ("first_batch_median", 1),
    "efficiency, pad to context": ("first_batch_pad_to_context", 100),
    "efficiency, packed": ("first_batch_greedy_pack", 100),
    "packed ÷ pad to context": ("first_batch_ratio", 1),
}


def published_matches(row: dict) -> list[str]:
    """The published figures of this chapter that a :func:`efficiencies` row reproduces as printed."""
    from datajourney.chapters import published

    out = []
    for metric, (col, scale) in PUBLISHED_COLUMNS.items():
        f = published.figure(CHAPTER, metric)
        if f is not None and col in row and row[col] is not None and published.printed_as(scale * row[col], f):
            out.append(metric)
    return out


def template_comparison(records, tok, *, batch_size: int, context: int, eos_id: int = EOS_ID) -> pd.DataFrame:
    """Every named template × every end-of-text mode: the first batch's length statistics and the
    efficiencies of both populations, and how many published figures each reproduces as printed."""
    from datajourney.toolkit import textdata

    rows = []
    for name in textdata.TEMPLATES:
        lengths = [len(t) for t in tokenize([textdata.join(r, name) for r in records], tok)]
        for eos in EOS_MODES:
            r = dict(template=name, eos=eos, **efficiencies(lengths, eos=eos, batch_size=batch_size, context=context))
            m = published_matches(r)
            rows.append({**r, "published_matched": len(m), "published_of": len(PUBLISHED_COLUMNS)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- chapter
def check_parameters(params) -> Params:
    """Every parameter checked before any work: the declarations (:meth:`Params.checked`), then what they
    cannot say: the template names the record's fields, the names are not blank, at least one layout, the
    heads divide the width, CUDA where it is asked for."""
    from datajourney.toolkit import textdata

    if isinstance(params, Mapping):
        run_options(params)
    p = Params.coerce(params).checked()
    for name, example in (("dataset", textdata.DATASET_NAME), ("tokenizer", textdata.TOKENIZER_NAME)):
        if not getattr(p, name).strip():
            raise ParameterError(name, getattr(p, name), f"a public name such as {example!r}")
    textdata.check_template(p.template)
    if not p.strategies:
        raise ParameterError("strategies", p.strategies,
                             "a non-empty list drawn from " + ", ".join(map(repr, STRATEGIES)))
    if p.d_model % p.n_heads:
        raise ParameterError("n_heads", p.n_heads, f"a divisor of d_model ({p.d_model})")
    if p.device == "cuda" and not torch.cuda.is_available():
        raise ParameterError("device", "cuda", "'auto', 'cpu' or 'none' (no CUDA device on this machine)")
    return p


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


def check_memory(p: Params, layouts: dict[str, Layout], layout_lengths: dict[str, list[int]]) -> dict:
    """Memory the timed steps need (their largest batch) against what the device has free; fails
    naming ``context_length`` (with the batch shape) before any work when it does not fit."""
    dev = timing_device(p.device)
    if dev is None:
        return dict(device=None, needed_bytes=0, available_bytes=None)
    need, worst = 0, None
    for s, lay in layouts.items():
        for b in range(len(lay.batches)):
            real = sum(layout_lengths[s][i] for row in lay.batches[b] for i in row)
            m = memory_needed(rows=len(lay.batches[b]), row_len=lay.row_len[b], real_tokens=real,
                              d_model=p.d_model, n_layers=p.n_layers, context=p.context_length)
            if m > need:
                need, worst = m, (s, *lay.shape(b))
    have = _available_bytes(dev)
    if need > have:
        s, rows, n = worst
        where = "GPU memory free" if dev == "cuda" else "memory available"
        raise ParameterError("context_length", p.context_length,
                             f"a value for which one timed step fits ({LABELS[s]}: a batch of {rows:,} × {n:,} "
                             f"positions needs about {need / 2**30:,.1f} GiB, {have / 2**30:,.1f} GiB {where}); "
                             "lower context_length, batch_size or d_model, or set device 'none'")
    return dict(device=dev, needed_bytes=need, available_bytes=have, largest_batch=list(worst))


@dataclass
class Plan:
    """What :func:`preflight` found: the checked parameters, the records and their tokens, the tokenizer,
    where both came from, and the memory the timed steps need."""

    params: Params
    records: list | None
    tokens: list[list[int]]
    tokenizer: object
    source: object
    memory: dict
    #: with ``token_path``: what the reader's data is (:meth:`~datajourney.toolkit.yourdata.TokenSource.describe`)
    your_data: dict | None = None


def preflight(params) -> Plan:
    """Parameters, data and tokenizer, that every sample fits the context, and memory: before any work."""
    import importlib.util

    from datajourney.core.params import requires
    from datajourney.toolkit import textdata

    p = check_parameters(params)
    requires("tokenizer", p.tokenizer, "tokenizers", "tokenizers (pip install tokenizers)")
    if importlib.util.find_spec("transformers") is None:
        raise ParameterError("template", p.template, "a setting this machine can run: chapter 5 needs the "
                             "transformers package for GPT-2 and its packing collator (pip install transformers)")
    yours = None
    if p.token_path is not None:   # the reader's documents (their tokens, or their text tokenised), only read
        from datajourney.toolkit import yourdata

        src = yourdata.token_source(p.token_path)
        tok, t_origin = textdata.load_tokenizer(p.tokenizer, p.tokenizer_dir)
        records, d_origin = None, f"your token_path ({src.kind})"
        tokens = yourdata.chapter_documents(src, p.n_samples, p.seed, tok, vocab=VOCAB, what="n_samples")
        # a packer never splits a sample: longer documents are cut to the context (and counted)
        keep = p.context_length - (1 if p.eos != "never" else 0)
        cut = sum(len(t) > keep for t in tokens)
        tokens = [t[:keep] for t in tokens]
        yours = dict(src.describe(tok, seed=p.seed), documents_read=len(tokens), cut_to_context=cut)
    else:
        records, d_origin = textdata.load_records(p.n_samples, p.dataset, p.dataset_path)
        tok, t_origin = textdata.load_tokenizer(p.tokenizer, p.tokenizer_dir)
        tokens = tokenize([textdata.join(r, p.template) for r in records], tok)
    longest = max(len(t) for t in tokens) + (1 if p.eos != "never" else 0)
    if longest > p.context_length:
        raise ParameterError("context_length", p.context_length,
                             f"at least the longest sample ({longest} tokens): a packer never splits a sample")
    layouts, lens = build_layouts(p, [len(t) for t in tokens])
    return Plan(p, records, tokens, tok, textdata.Source(d_origin, t_origin), check_memory(p, layouts, lens), yours)


def build_layouts(p: Params, lengths: list[int]) -> tuple[dict[str, Layout], dict[str, list[int]]]:
    """Every requested layout (validated) and the per-sample lengths it carries (EOS included where used)."""
    layouts, lens = {}, {}
    for s in p.strategies:
        lens[s] = [n + 1 for n in lengths] if uses_eos(s, p.eos) else list(lengths)
        kw = {"window_batches": p.bucket_batches} if s == "bucketed" else {}
        layouts[s] = BUILDERS[s](lens[s], p.batch_size, p.context_length, **kw)
        validate(layouts[s], lens[s])
    return layouts, lens


def measure(plan: Plan, context) -> None:
    """Run chapter 5 into the started result (its tables and metadata)."""
    from tqdm import tqdm

    lap = timing.Laps()  # how long each part of the run took (metadata)
    p, tokens = plan.params, plan.tokens
    batch_size, eos = p.batch_size, p.eos
    transformers = _import_transformers()
    res, progress = context.result, context.progress
    lengths = [len(t) for t in tokens]
    res.add("lengths", pd.DataFrame({"sample": range(len(lengths)), "tokens": lengths}))
    layouts, lens = build_layouts(p, lengths)
    pad_len = lens.get("pad_to_context") or ([n + 1 for n in lengths] if eos == "always" else lengths)
    res.add("length_stats", [length_stats(pad_len[:batch_size], "first batch"),
                             length_stats(pad_len, "all samples")])
    res.add("strategies", [evaluate(layouts[s], lens[s], batch_size) for s in p.strategies])
    res.add("first_batch", [first_batch(layouts[s], lens[s]) for s in p.strategies])
    for s in ("pad_to_context", "greedy_pack", "best_fit_decreasing"):
        if s in layouts:
            frac, width = fill_fractions(layouts[s], lens[s], p.heatmap_bins)
            fb = first_batch(layouts[s], lens[s])
            res.metadata[f"heatmap_{s}"] = dict(fraction_real=np.round(frac, 4).tolist(), bin_width=width,
                                                row_len=layouts[s].row_len[0], efficiency=fb["efficiency"],
                                                samples=fb["samples"])
    lap("layouts")
    if plan.records is not None:   # the templates join Alpaca's fields; a reader's documents come joined
        res.add("templates", template_comparison(plan.records, plan.tokenizer, batch_size=batch_size,
                                                 context=p.context_length))
        lap("templates")
    res.add("isolation", isolation_check(p.seed))
    lap("isolation check")
    lay_tokens = {s: layout_tokens(tokens, s, eos) for s in p.strategies}
    res.add("collator", [compare_with_collator(layouts[s], lay_tokens[s]) for s in p.strategies if s in PACKED])
    lap("collator")
    dev = plan.memory["device"]
    if dev is not None:
        model = gpt2_model(context=p.context_length, d_model=p.d_model, n_layers=p.n_layers, n_heads=p.n_heads,
                           seed=p.seed).to(dev).train()
        totals, shapes, steps = [], [], []
        bar = tqdm(total=sum(timed_steps(layouts[s], p.timing, p.timing_repeats) for s in p.strategies),
                   desc="chapter 5 timing", disable=not progress, mininterval=5)
        for s in p.strategies:
            lay, toks = layouts[s], lay_tokens[s]
            collate = collate_packed if s in PACKED else collate_padded

            def step(b, lay=lay, toks=toks, collate=collate):
                batch = {k: v.to(dev) for k, v in collate(lay.batches[b], toks, lay.row_len[b], EOS_ID).items()}
                return train_step(model, batch, dev)

            st = time_layout(lay, step, mode=p.timing, repeats=p.timing_repeats, warmup=p.warmup_steps, progress=bar)
            total, shp = cost_of_layout(st, lay, mode=p.timing, real_tokens=sum(lens[s]))
            totals.append({**total, "device": dev})
            shapes.append(shp)
            steps.append(st)
        bar.close()
        res.add("cost", totals)
        res.add("cost_shapes", pd.concat(shapes, ignore_index=True))
        res.add("cost_steps", pd.concat(steps, ignore_index=True))
        lap("step timing")
    from datajourney.toolkit import textdata

    t = textdata.TEMPLATES.get(p.template)
    # names and values only: the page words them (EOS_MODES, the template's description) and escapes them
    res.metadata.update(
        text_source=vars(plan.source), timed_on=dev,
        untimed_because=None if dev else ("no_cuda" if p.device == "auto" else "device_none"),
        model=dict(architecture="gpt2", d_model=p.d_model, n_layers=p.n_layers, n_heads=p.n_heads, vocab=VOCAB,
                   context=p.context_length),
        transformers=transformers.__version__, memory=plan.memory,
        template=dict(name=p.template, with_input=t.with_input if t else p.template,
                      without_input=t.without_input if t else p.template,
                      example=textdata.join(plan.records[0], p.template) if plan.records is not None
                      else plan.tokenizer.decode(tokens[0])[:500]),
        eos=dict(mode=eos), seconds=lap.seconds)
    if plan.your_data is not None:
        res.metadata["your_data"] = plan.your_data
