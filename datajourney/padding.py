"""Chapter 5: the padding tax - how many of the positions a GPU computes are real tokens.

A batch is a ``rows × row_len`` block of positions. Variable-length samples either get a
row each and are padded (to the context length, or to the longest sample of their batch,
optionally after grouping samples of similar length), or are packed several to a row. The
efficiency of a layout is real tokens / positions; the positions are what the GPU pays for.

Packing is only correct with two extra inputs: position ids that restart at 0 for every
document, and a block-diagonal causal attention mask so that no token attends to another
document. :func:`packed_inputs` and :func:`block_causal_mask` build them; the tests show
with a small causal transformer that packed outputs then equal per-document outputs.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from .book.params import ParameterError, choices, positive_int

CHAPTER = "05_padding_tax"
STRATEGIES = ("pad_to_context", "pad_to_longest", "bucketed", "greedy_pack", "best_fit_decreasing")
LABELS = {"pad_to_context": "pad to context", "pad_to_longest": "pad to longest in batch",
          "bucketed": "length-bucketed batches", "greedy_pack": "greedy packing (in order)",
          "best_fit_decreasing": "best-fit-decreasing packing"}


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


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def pad_to_context(lengths, batch_size: int, context: int) -> Layout:
    """One sample per row, every row ``context`` long."""
    rows = [[i] for i in range(len(lengths))]
    b = _chunks(rows, batch_size)
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
    """Fill rows in sample order; start a new row when the next sample does not fit."""
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
    import bisect

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


def evaluate(layout: Layout, lengths, batch_size: int) -> dict:
    real = int(sum(lengths))
    return dict(strategy=layout.strategy, label=LABELS[layout.strategy], real_tokens=real,
                positions=layout.positions, efficiency=real / layout.positions, rows=layout.rows,
                steps=len(layout.batches), rows_per_step=batch_size,
                mean_row_len=layout.positions / layout.rows)


def length_stats(lengths, population: str) -> dict:
    a = np.asarray(lengths)
    return dict(population=population, samples=len(a), min=int(a.min()), median=float(np.median(a)),
                mean=float(a.mean()), p90=float(np.percentile(a, 90)), p99=float(np.percentile(a, 99)),
                max=int(a.max()), total_tokens=int(a.sum()))


def occupancy(layout: Layout, lengths, batch: int = 0) -> np.ndarray:
    """``rows × row_len`` matrix of one batch: the document index at each position, -1 for padding."""
    rows, n = layout.batches[batch], layout.row_len[batch]
    m = np.full((len(rows), n), -1, dtype=np.int64)
    for r, row in enumerate(rows):
        pos = 0
        for i in row:
            m[r, pos:pos + lengths[i]] = i
            pos += lengths[i]
    return m


def downsample(m: np.ndarray, bins: int) -> tuple[np.ndarray, int]:
    """Fraction of real tokens in each of ``bins`` column groups (for a light-weight heatmap)."""
    width = max(1, math.ceil(m.shape[1] / bins))
    cols = math.ceil(m.shape[1] / width)
    padded = np.full((m.shape[0], cols * width), -1)
    padded[:, :m.shape[1]] = m
    real = (padded >= 0).reshape(m.shape[0], cols, width).mean(axis=2)
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


def block_causal_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """``[rows, 1, L, L]`` boolean mask: position i may attend to j when both belong to the same
    document and j ≤ i. Padding attends only to itself (keeps softmax finite; its output is unused)."""
    L = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.ones(L, L, dtype=torch.bool, device=doc_ids.device).tril()
    return (same & causal)[:, None]


class TinyCausalLM(nn.Module):
    """A small pre-norm causal transformer (learned positions) built from a config: no download."""

    def __init__(self, vocab: int = 50257, d_model: int = 256, n_layers: int = 2, n_heads: int = 4,
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

    def forward(self, ids, position_ids=None, mask=None, hidden: bool = False):
        """``mask`` None: plain causal attention over the whole row (what packing without a mask does).
        ``hidden``: return the final hidden states instead of the logits."""
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
        x = self.ln(x)
        return x if hidden else self.head(x)


def contamination_check(seed: int = 0, lengths=(5, 9, 4), row_len: int = 24) -> dict:
    """Pack three random documents into one row and compare with running each alone:
    max |difference| of the logits with the block mask + position ids, and without them."""
    torch.manual_seed(seed)
    model = TinyCausalLM(vocab=1000, d_model=64, n_layers=2, n_heads=4, max_len=64).eval()
    docs = [torch.randint(1, 1000, (n,)).tolist() for n in lengths]
    ids, pos, doc = packed_inputs([list(range(len(docs)))], docs, row_len, pad_id=0)
    with torch.no_grad():
        alone = [model(torch.tensor([d]))[0] for d in docs]
        right = model(ids, pos, block_causal_mask(doc))[0]
        naive = model(ids)[0]
    out, p = {"with_mask": 0.0, "without_mask": 0.0}, 0
    for d, ref in zip(docs, alone, strict=True):
        out["with_mask"] = max(out["with_mask"], (right[p:p + len(d)] - ref).abs().max().item())
        out["without_mask"] = max(out["without_mask"], (naive[p:p + len(d)] - ref).abs().max().item())
        p += len(d)
    return out


# --------------------------------------------------------------------------- GPU cost
def time_training_steps(model: nn.Module, layout: Layout, tokens, *, pad_id: int, steps: int, warmup: int,
                        device: str) -> dict:
    """Forward + backward (next-token loss) of ``steps`` batches spread evenly over a layout; each
    batch is run ``warmup`` times untimed first (a new shape costs kernel selection and memory
    allocation once), then timed; CUDA events on a GPU, a host clock otherwise. Every layer runs
    on every position, padding included; the LM head and loss only on real next-token targets
    (as memory-efficient trainers do). Mean ms per step over the batches, and real tokens/s."""
    nb = len(layout.batches)
    chosen = sorted(set(np.linspace(0, nb - 1, min(steps, nb)).round().astype(int).tolist()))
    times, real = [], 0
    for b in chosen:
        ids, pos, doc = packed_inputs(layout.batches[b], tokens, layout.row_len[b], pad_id)
        ids, pos, doc = ids.to(device), pos.to(device), doc.to(device)
        mask = block_causal_mask(doc)
        target = torch.where(doc[:, 1:] == doc[:, :-1], ids[:, 1:], -100)
        for _ in range(warmup):
            _train_step(model, ids, pos, mask, target, device)
        times.append(_train_step(model, ids, pos, mask, target, device))
        real += int((doc >= 0).sum())
    return dict(strategy=layout.strategy, label=LABELS[layout.strategy], timed_steps=len(times),
                ms_per_step=float(np.mean(times)), ms_std=float(np.std(times, ddof=1)) if len(times) > 1 else 0.0,
                real_tokens_per_s=real / (sum(times) / 1e3), steps_for_all=len(layout.batches),
                est_seconds_for_all=float(np.mean(times)) * len(layout.batches) / 1e3, device=device)


def _train_step(model, ids, pos, mask, target, device: str) -> float:
    """One forward + backward; its time in ms."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    else:
        t0 = time.perf_counter()
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        h = model(ids, pos, mask, hidden=True)
        sel = target != -100
        logits = model.head(h[:, :-1][sel])
    loss = F.cross_entropy(logits.float(), target[sel])
    loss.backward()
    model.zero_grad(set_to_none=True)
    if device == "cuda":
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    return (time.perf_counter() - t0) * 1e3


def template_comparison(n, dataset, dataset_path, tok, batch_size: int, context: int) -> pd.DataFrame:
    """Naive and packed efficiency for each named template, with and without EOS: how much the
    choice of text format alone moves the numbers."""
    from . import textdata

    records, _ = textdata.load_records(n, dataset, dataset_path)
    rows = []
    for name in textdata.TEMPLATES:
        for eos in (True, False):
            lengths = [len(t) for t in tokenize([textdata.join(r, name) for r in records], tok, eos)]
            naive = evaluate(pad_to_context(lengths, batch_size, context), lengths, batch_size)["efficiency"]
            packed = evaluate(greedy_pack(lengths, batch_size, context), lengths, batch_size)["efficiency"]
            rows.append(dict(template=name, add_eos=eos, mean_tokens=float(np.mean(lengths)),
                             pad_to_context=naive, greedy_pack=packed, ratio=packed / naive))
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- chapter
def check_parameters(p: dict) -> dict:
    q = dict(p)
    q["n_samples"] = positive_int("n_samples", p["n_samples"], maximum=10_000_000)
    q["context_length"] = positive_int("context_length", p["context_length"], maximum=1 << 20)
    q["batch_size"] = positive_int("batch_size", p["batch_size"], maximum=1 << 16)
    q["bucket_batches"] = positive_int("bucket_batches", p["bucket_batches"], maximum=1 << 16)
    q["heatmap_bins"] = positive_int("heatmap_bins", p["heatmap_bins"], maximum=4096)
    q["strategies"] = choices("strategies", p["strategies"], STRATEGIES)
    q["gpu_steps"] = positive_int("gpu_steps", p["gpu_steps"], maximum=100_000)
    for name in ("d_model", "n_layers", "n_heads"):
        q[name] = positive_int(name, p[name], maximum=1 << 16)
    if q["d_model"] % q["n_heads"]:
        raise ParameterError("n_heads", q["n_heads"], f"a divisor of d_model ({q['d_model']})")
    return q


def tokenize(texts, tok, add_eos: bool) -> list[list[int]]:
    from .textdata import eos_id

    enc = [e.ids for e in tok.encode_batch(texts)]
    return [ids + [eos_id(tok)] for ids in enc] if add_eos else enc


def preflight(params: dict):
    """Parameters, data and tokenizer, and that every sample fits the context: before any work."""
    from . import textdata

    p = check_parameters(params)
    texts, tok, source = textdata.texts_and_source(
        p["n_samples"], dataset=p["dataset"], dataset_path=p.get("dataset_path"), tokenizer=p["tokenizer"],
        tokenizer_dir=p.get("tokenizer_dir"), template=p["template"])
    tokens = tokenize(texts, tok, p["add_eos"])
    longest = max(len(t) for t in tokens)
    if longest > p["context_length"]:
        raise ParameterError("context_length", p["context_length"],
                             f"at least the longest sample ({longest} tokens): a packer never splits a sample")
    return p, tokens, tok, source


def run(*, n_samples: int, context_length: int, batch_size: int, dataset: str, dataset_path, tokenizer: str,
        tokenizer_dir, template: str, add_eos: bool, strategies, bucket_batches: int, heatmap_bins: int,
        gpu_steps: int, d_model: int, n_layers: int, n_heads: int, seed: int = 0, run_dir=None,
        progress: bool = True):
    """Run chapter 5 and save the result (tables + fingerprint) to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from tqdm import tqdm

    from .book import results

    p, tokens, tok, source = preflight(params)
    res = results.start(CHAPTER, params, run_dir)
    lengths = [len(t) for t in tokens]
    res.add("lengths", pd.DataFrame({"sample": range(len(lengths)), "tokens": lengths}))
    res.add("length_stats", [length_stats(lengths[:batch_size], f"the first batch ({min(batch_size, len(lengths))} "
                                          "samples)"), length_stats(lengths, f"all {len(lengths):,} samples")])
    layouts = {}
    for s in p["strategies"]:
        kw = {"window_batches": bucket_batches} if s == "bucketed" else {}
        layouts[s] = BUILDERS[s](lengths, batch_size, context_length, **kw)
        validate(layouts[s], lengths)
    ev = pd.DataFrame([evaluate(layouts[s], lengths, batch_size) for s in p["strategies"]])
    base = ev.set_index("strategy")["positions"].get("pad_to_context", ev["positions"].max())
    ev["speedup_vs_pad_to_context"] = base / ev["positions"]
    res.add("strategies", ev)
    for s in ("pad_to_context", "greedy_pack", "best_fit_decreasing"):
        if s in layouts:
            occ = occupancy(layouts[s], lengths, 0)
            frac, width = downsample(occ, heatmap_bins)
            res.metadata[f"heatmap_{s}"] = dict(fraction_real=np.round(frac, 3).tolist(), bin_width=width,
                                                exact_efficiency=float((occ >= 0).mean()))
    res.add("templates", template_comparison(n_samples, dataset, dataset_path, tok, batch_size, context_length))
    res.add("contamination", [contamination_check(seed)])
    device = "cuda" if torch.cuda.is_available() else None
    if device:
        torch.manual_seed(seed)
        model = TinyCausalLM(d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_len=context_length).to(device)
        rows = []
        for s in tqdm(p["strategies"], desc="chapter 5 GPU timing", disable=not progress):
            rows.append(time_training_steps(model, layouts[s], tokens, pad_id=0, steps=gpu_steps, warmup=2,
                                            device=device))
        res.add("gpu", rows)
    res.metadata.update(text_source=vars(source), gpu_timed=bool(device),
                        gpu_note=None if device else "no CUDA device: GPU cost not measured on this machine",
                        model=dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, vocab=50257))
    res.save(results.resolve_run_dir(run_dir))
    return res


def key_metrics(res) -> dict:
    ev = res.table("strategies").set_index("strategy")
    out = {}
    if "pad_to_context" in ev.index:
        out["efficiency, pad to context"] = (100 * ev.loc["pad_to_context", "efficiency"], None)
    if "greedy_pack" in ev.index:
        out["efficiency, packed"] = (100 * ev.loc["greedy_pack", "efficiency"], None)
        if "pad_to_context" in ev.index:
            out["packed ÷ pad to context"] = (ev.loc["greedy_pack", "efficiency"]
                                               / ev.loc["pad_to_context", "efficiency"], None)
    return out
