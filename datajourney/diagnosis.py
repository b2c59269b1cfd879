"""Chapter 12: the reader's pipeline diagnosed from the other chapters' results.

Nothing new is measured here. Every number comes from the result files the other chapters
wrote into the same run directory: each hop of the journey is turned into the rate it can
sustain for a reference workload (images per second for ResNet-50 training, tokens per
second for a token-based step), and the smallest rate is the weakest link. A chapter this
run did not execute leaves its hop out, named as missing, so a partial run still gets a
partial diagnosis.

The capacity of a hop is a simple, stated model of its measurement (for example "files
per second = the cold random-read bandwidth at this file size ÷ the file size"), never a
new measurement; :func:`budget` is the same model as a function of the workload's inputs,
and the chapter's budget chart evaluates it in the browser too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

CHAPTER = "12_conclusion"

#: The chapters whose results the diagnosis reads, and what each contributes.
SOURCES = {
    "02_random_vs_sequential": "storage: one file per sample vs one shard, cold",
    "03_dataloader": "DataLoader workers reading small files",
    "04_cpu_starvation": "the model of workers needed (D·B/W against G)",
    "05_padding_tax": "real tokens per computed position",
    "06_pcie": "host-to-device bandwidth, pinned",
    "07_full_picture": "ResNet-50's step, decode cost per image and the measured end-to-end pipeline",
}

#: Bytes of one decoded 224×224 RGB image as the tuned chapter 7 recipe ships it (uint8).
IMAGE_TENSOR_BYTES = 3 * 224 * 224


@dataclass(frozen=True)
class Hop:
    """One hop's sustainable rate for a workload, and how it was computed."""

    key: str
    label: str
    chapter: str
    capacity: float | None  #: samples (or tokens) per second; None when its chapter is missing
    basis: str              #: the measured inputs and the model, in words


# ----------------------------------------------------------------------------- inputs
def load_run(run_dir) -> dict:
    """The results of the chapters in :data:`SOURCES` found in ``run_dir`` (chapter -> Result)."""
    from .book.results import Result

    out = {}
    if run_dir is None:
        return out
    for ch in SOURCES:
        f = Path(run_dir) / f"{ch}.json"
        if f.is_file():
            try:
                out[ch] = Result.load(f)
            except (ValueError, KeyError):
                continue
    return out


def _loglog(x: float, xs, ys) -> float:
    """Interpolate ``ys`` at ``x`` on log-log axes (clamped to the measured range)."""
    xs, ys = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    order = np.argsort(xs)
    return float(np.exp(np.interp(math.log(x), xs[order], ys[order])))


def storage_curve(r2) -> pd.DataFrame | None:
    """Cold read bandwidth by file size (chapter 2's size sweep): mean MB/s per pattern and size."""
    if r2 is None or "size_sweep" not in r2.tables:
        return None
    ss = r2.table("size_sweep")
    ss = ss[ss["cache"] == "cold"]
    if ss.empty:
        return None
    return ss.groupby(["pattern", "file_size"], as_index=False)["MBps"].mean()


def pcie_curve(r6) -> pd.DataFrame | None:
    """Pinned host-to-device bandwidth by copy size (chapter 6, CUDA events), GB/s."""
    if r6 is None or not r6.metadata.get("cuda") or "bandwidth" not in r6.tables:
        return None
    b = r6.table("bandwidth")
    b = b[(b["direction"] == "H2D") & (b["memory"] == "pinned") & (b["clock"] == "CUDA events")]
    return None if b.empty else b[["size", "median"]].rename(columns={"median": "GBps"})


#: chapter 7's per-batch CPU stages a loader worker runs for each batch
CPU_STAGES = ("read_ms", "decode_ms", "normalise_ms", "collate_ms")


def image_workload(r7) -> dict | None:
    """The ResNet-50 workload as chapter 7 ran it: batch, step time with data already on the GPU,
    bytes per image on disk, the loader's CPU time per image (read, decode + resize, normalise,
    collate: the medians of its per-batch stage timings in the best scenario ÷ the batch size) and
    the best end-to-end pipeline measured."""
    if r7 is None or "ceiling" not in r7.tables:
        return None
    c = r7.table("ceiling")
    sc = r7.table("scenarios") if "scenarios" in r7.tables else pd.DataFrame()
    rd = r7.table("readers") if "readers" in r7.tables else pd.DataFrame()
    steps = r7.table("steps") if "steps" in r7.tables else pd.DataFrame()
    b = int(r7.parameters["batch_size"])
    out = dict(model=str(c["model"].iloc[0]) if "model" in c else r7.parameters.get("model"),
               batch_size=b, step_ms=float(c["step_ms"].mean()), device=r7.metadata.get("device"),
               cores=int(r7.metadata.get("cores") or 1), file_bytes=None, cpu_ms=None, best=None)
    if not rd.empty and "stored_kb" in rd:
        cold = rd[rd["stage"] == "read (cold)"]
        if not cold.empty:
            out["file_bytes"] = float(cold["stored_kb"].mean()) * 1024
    if not sc.empty:
        best = sc.groupby(["format", "workers", "variant"])["images_per_s"].mean()
        (fmt, w, var), v = best.idxmax(), float(best.max())
        out["best"] = dict(format=fmt, workers=int(w), variant=var, images_per_s=v)
        if not steps.empty and all(s in steps for s in CPU_STAGES):
            rows = steps[(steps["format"] == fmt) & (steps["workers"] == w) & (steps["variant"] == var)]
            if not rows.empty:
                out["cpu_ms"] = float(rows[list(CPU_STAGES)].median().sum()) / b
    return out


# ----------------------------------------------------------------------------- the model
def budget(*, step_ms: float, batch_size: int, file_bytes: float, cpu_ms: float, cores: int,
           storage: pd.DataFrame | None, pcie: pd.DataFrame | None,
           tensor_bytes: int = IMAGE_TENSOR_BYTES) -> dict:
    """Samples per second each hop sustains for one workload, and what the GPU asks for.

    * storage, one file per sample: cold random-read MB/s at ``file_bytes`` (chapter 2's size
      sweep, log-log interpolated) ÷ ``file_bytes`` — one reader thread;
    * storage, shard: cold sequential MB/s at the same request size ÷ ``file_bytes``;
    * CPU: ``cores`` × 1000 / ``cpu_ms`` (the loader's CPU time per image) — every core busy
      with the loader's work and nothing else;
    * PCIe: pinned host-to-device GB/s at the batch's size ÷ ``tensor_bytes``;
    * demand: ``batch_size`` × 1000 / ``step_ms``.
    Missing inputs give None."""
    out = {"demand": batch_size * 1000.0 / step_ms}
    for pattern, key in (("random", "files"), ("sequential", "shard")):
        part = None if storage is None else storage[storage["pattern"] == pattern]
        out[key] = (None if part is None or part.empty
                    else _loglog(file_bytes, part["file_size"], part["MBps"]) * 1e6 / file_bytes)
    out["cpu"] = cores * 1000.0 / cpu_ms if cpu_ms else None
    out["pcie"] = (None if pcie is None or pcie.empty
                   else _loglog(batch_size * tensor_bytes, pcie["size"], pcie["GBps"]) * 1e9 / tensor_bytes)
    return out


def image_hops(found: dict) -> tuple[list[Hop], dict | None]:
    """The ResNet-50 workload's hops (images/s) from the chapters found, and the workload."""
    w = image_workload(found.get("07_full_picture"))
    storage = storage_curve(found.get("02_random_vs_sequential"))
    pcie = pcie_curve(found.get("06_pcie"))
    if w is None:
        return [Hop("gpu", "GPU step", "07_full_picture", None, "chapter 7 not in this run")], None
    b = budget(step_ms=w["step_ms"], batch_size=w["batch_size"], file_bytes=w["file_bytes"] or 0,
               cpu_ms=w["cpu_ms"] or 0, cores=w["cores"], storage=storage if w["file_bytes"] else None,
               pcie=pcie)
    kb = f"{w['file_bytes'] / 1024:.1f} KiB" if w["file_bytes"] else "?"
    hops = [
        Hop("files", "storage: one file per image, one reader", "02_random_vs_sequential", b["files"],
            f"cold random reads at {kb} per file (chapter 2's size sweep) ÷ the file size"),
        Hop("shard", "storage: one shard, read in order", "02_random_vs_sequential", b["shard"],
            f"cold sequential reads in {kb} requests ÷ the file size"),
        Hop("cpu", "CPU: the loader's work, all cores", "07_full_picture", b["cpu"],
            f"{w['cores']} cores ÷ {w['cpu_ms']:.2f} ms of read, decode + resize, normalise and collate per image"
            if w["cpu_ms"] else "no per-stage timings"),
        Hop("pcie", "PCIe: pinned host-to-device copy", "06_pcie", b["pcie"],
            f"pinned H2D at a {w['batch_size']}-image uint8 batch ÷ {IMAGE_TENSOR_BYTES:,} bytes per image"),
        Hop("gpu", f"GPU: {w['model']} step, batch {w['batch_size']}", "07_full_picture", b["demand"],
            f"{w['batch_size']} images per {w['step_ms']:.1f} ms step (data already in GPU memory)"),
    ]
    return hops, w


def token_hops(found: dict, tokens_per_s: float, token_bytes: int, tokens_per_batch: int) -> list[Hop]:
    """A token-based step asking for ``tokens_per_s``: storage (shard, ``token_bytes`` per token)
    and PCIe (int64 ids), in tokens/s."""
    storage = storage_curve(found.get("02_random_vs_sequential"))
    pcie = pcie_curve(found.get("06_pcie"))
    hops = [Hop("gpu", "GPU: token step (a stated demand, not a measurement)", CHAPTER, float(tokens_per_s),
                "the parameter llm_tokens_per_s")]
    seq = None if storage is None else storage[storage["pattern"] == "sequential"]
    hops.append(Hop("shard", "storage: token shard, read in order", "02_random_vs_sequential",
                    None if seq is None or seq.empty else float(seq["MBps"].max()) * 1e6 / token_bytes,
                    f"best cold sequential MB/s ÷ {token_bytes} bytes per token"))
    hops.append(Hop("pcie", "PCIe: pinned host-to-device copy of int64 ids", "06_pcie",
                    None if pcie is None else _loglog(tokens_per_batch * 8, pcie["size"], pcie["GBps"]) * 1e9 / 8,
                    f"pinned H2D at a {tokens_per_batch:,}-token batch ÷ 8 bytes per token"))
    return hops


def padding_shares(r5) -> pd.DataFrame | None:
    """Real tokens per computed position by batching strategy (chapter 5, all samples)."""
    if r5 is None or "strategies" not in r5.tables:
        return None
    s = r5.table("strategies")
    s = s[s["population"] == "all samples"] if "population" in s else s
    return s[["strategy", "label", "efficiency"]].reset_index(drop=True)


def weakest(hops: list[Hop]) -> dict | None:
    """The hop with the smallest capacity, the next one and the margin between them."""
    known = sorted((h for h in hops if h.capacity is not None), key=lambda h: h.capacity)
    if not any(h.key != "gpu" for h in known) or not any(h.key == "gpu" for h in known):
        return None  # nothing to compare: no measured data hop, or no demand
    first = known[0]
    second = known[1] if len(known) > 1 else None
    return dict(key=first.key, label=first.label, chapter=first.chapter, capacity=first.capacity,
                next_key=second.key if second else None, next_label=second.label if second else None,
                next_capacity=second.capacity if second else None,
                margin=(second.capacity / first.capacity) if second else None)


#: The checklist: (chapter, key of one of its findings). Each row of chapter 12's checklist shows
#: that finding as this run computed it, beside the reference run and the published figure.
CHECKLIST = [
    ("02_random_vs_sequential", "cold_gap"),
    ("02_random_vs_sequential", "cold_latency"),
    ("03_dataloader", "published_w4"),
    ("03_dataloader", "first_batch"),
    ("04_cpu_starvation", "workers_to_keep_up"),
    ("05_padding_tax", "all_samples"),
    ("06_pcie", "h2d_pinned"),
    ("06_pcie", "cpu_overlap"),
    ("07_full_picture", "workers4"),
    ("07_full_picture", "best_vs_ceiling"),
]


def checklist_table(found: dict) -> pd.DataFrame:
    """Each :data:`CHECKLIST` row as the chapter's own page computed it from this run's result
    (its key results: value, unit, headline, published metric); rows of chapters not run stay empty."""
    import importlib

    from .book.chapters import lookup

    rows, cache = [], {}
    for ch, key in CHECKLIST:
        row = dict(chapter=ch, key=key, value=None, unit="", headline=None, published=None, text=None)
        if ch in found:
            if ch not in cache:
                page = importlib.import_module(lookup(ch).page)
                try:
                    cache[ch] = {f.key: f for f in page.findings(found[ch])}
                except (KeyError, ValueError, IndexError):
                    cache[ch] = {}
            f = cache[ch].get(key)
            if f is not None:
                row.update(value=f.value, unit=f.unit, headline=f.headline, published=f.published, text=f.text)
        rows.append(row)
    return pd.DataFrame(rows)


def _why_missing(found: dict, hops: list[Hop]) -> list[Hop]:
    """Hops without a rate say why: their chapter was not run, or ran without what it needs."""
    out = []
    for h in hops:
        if h.capacity is None:
            why = ("not in this run" if h.chapter not in found
                   else "ran without a GPU" if h.chapter == "06_pcie" else "has no usable result")
            h = Hop(h.key, h.label, h.chapter, None, f"chapter {int(h.chapter[:2])} {why}")
        out.append(h)
    return out


def hops_table(hops: list[Hop], workload: str) -> pd.DataFrame:
    return pd.DataFrame([dict(workload=workload, hop=h.key, label=h.label, chapter=h.chapter,
                              capacity=h.capacity, basis=h.basis) for h in hops])


# ----------------------------------------------------------------------------- run
def preflight(params: dict) -> dict:
    """Check the chapter's parameters before any work (one-line errors naming the parameter)."""
    from .params import choice, number, positive_int

    number("llm_tokens_per_s", params.get("llm_tokens_per_s"), minimum=1.0)
    choice("token_bytes", params.get("token_bytes"), (2, 4, 8))
    positive_int("tokens_per_batch", params.get("tokens_per_batch"), maximum=1 << 30)
    return dict(params)


def summary_lines(res) -> list[str]:
    """A few lines for the end of a run: the weakest link of each workload on this machine."""
    lines = []
    for wl, title in (("image", "ResNet-50 training"), ("tokens", "token-based step")):
        w = res.metadata.get("weakest", {}).get(wl)
        if not w:
            lines.append(f"{title}: no diagnosis (its chapters are not in this run)")
            continue
        unit = "images/s" if wl == "image" else "tokens/s"
        from .book.findings import num, times

        line = f"{title}: weakest link {w['label']} at {num(w['capacity'], unit)}"
        if w.get("next_label"):
            line += f"; next: {w['next_label']} ({times(w['margin'])} more)"
        lines.append(line)
    if res.metadata.get("missing"):
        lines.append("not run, so not diagnosed: chapters " + ", ".join(str(int(c[:2])) for c in res.metadata["missing"]))
    return lines


def run(*, llm_tokens_per_s: float = 1_000_000.0, token_bytes: int = 4, tokens_per_batch: int = 131072,
        diagnose=None, run_dir=None):
    """Diagnose the run in ``diagnose`` (default: this run, ``run_dir``) from the other chapters'
    result files there, and save the result to ``run_dir``."""
    from .book import results

    params = dict(llm_tokens_per_s=llm_tokens_per_s, token_bytes=token_bytes, tokens_per_batch=tokens_per_batch)
    preflight(params)
    if diagnose is not None and not Path(diagnose).is_dir():
        from .params import ParameterError

        raise ParameterError("diagnose", diagnose, "a directory holding other chapters' result files")
    rd = results.resolve_run_dir(run_dir)
    src = Path(diagnose) if diagnose is not None else rd
    found = load_run(src)
    res = results.start(CHAPTER, {**params, "diagnose": str(src), "run_dir": str(rd)}, run_dir)
    hops, w = image_hops(found)
    hops = _why_missing(found, hops)
    thops = _why_missing(found, token_hops(found, llm_tokens_per_s, token_bytes, tokens_per_batch))
    res.add("hops", pd.concat([hops_table(hops, "image"), hops_table(thops, "tokens")], ignore_index=True))
    res.add("checklist", checklist_table(found))
    pad = padding_shares(found.get("05_padding_tax"))
    if pad is not None:
        res.add("padding", pad)
    st = storage_curve(found.get("02_random_vs_sequential"))
    if st is not None:
        res.add("storage_curve", st)
    pc = pcie_curve(found.get("06_pcie"))
    if pc is not None:
        res.add("pcie_curve", pc)
    res.metadata.update(
        found=sorted(found), missing=[c for c in SOURCES if c not in found],
        sources={c: dict(run_id=r.run_id, host=r.fingerprint.get("host", {}).get("hostname")
                         if isinstance(r.fingerprint.get("host"), dict) else None)
                 for c, r in found.items()},
        image_workload=w, weakest={"image": weakest(hops), "tokens": weakest(thops)},
    )
    res.metadata["summary"] = summary_lines(res)
    res.save(rd)
    return res
