"""Chapter 12: the reader's pipeline diagnosed from the other chapters' results.

One thing is measured here: the training step of a GPT-2-family model, the token rate a GPU
consumes (:mod:`datajourney.toolkit.lmstep`). Every other number comes from the result files the
other chapters wrote into the same run directory: each hop of the journey is turned into the rate it can
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

from datajourney.chapters import registry
from datajourney.chapters.c12_conclusion.params import Params
from datajourney.core.findings import num, times

CHAPTER = "12_conclusion"

#: The chapters whose results the diagnosis reads, and what each contributes.
SOURCES = {
    "02_random_vs_sequential": "storage: one file per sample vs one shard, cold",
    "03_dataloader": "DataLoader workers reading small files",
    "04_cpu_starvation": "the model of workers needed (D·B/W against G)",
    "05_padding_tax": "real tokens per computed position",
    "06_pcie": "host-to-device bandwidth, pinned",
    "07_full_picture": "ResNet-50's step, decode cost per image and the measured end-to-end pipeline",
    "08_threads_processes_gil": ("photo-like JPEGs: decode cost per image per core and the best loader, "
                                 "threads vs processes"),
    "09_reading_smarter": "a file's path from the disk to GPU memory against the PCIe and device ceilings",
    "10_mmap_vs_read": "a token data set read by mmap vs read(), and what a POSIX tracer sees of it",
    "11_gpu_to_gpu": "all-reduce bandwidth against the gradient bytes of one step",
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
    from datajourney.core.results import Result

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
    """The ResNet-50 workload as chapter 7 ran it: batch, step time with data already on the GPU
    (the faster of its eager and CUDA-graph ceilings, where both were measured), bytes per image on disk, the loader's
    CPU time per image (read, decode + resize, normalise,
    collate: the medians of its per-batch stage timings in the best scenario ÷ the batch size) and
    the best end-to-end pipeline measured."""
    if r7 is None or "ceiling" not in r7.tables:
        return None
    c = r7.table("ceiling")
    sc = r7.table("scenarios") if "scenarios" in r7.tables else pd.DataFrame()
    rd = r7.table("readers") if "readers" in r7.tables else pd.DataFrame()
    steps = r7.table("steps") if "steps" in r7.tables else pd.DataFrame()
    b = int(r7.parameters["batch_size"])
    step_ms, step_kind = float(c["step_ms"].mean()), "eager"
    g = r7.table("graphed_ceiling") if "graphed_ceiling" in r7.tables else pd.DataFrame()
    if not g.empty and float(g["step_ms"].mean()) < step_ms:
        step_ms, step_kind = float(g["step_ms"].mean()), "graphed"
    out = dict(model=str(c["model"].iloc[0]) if "model" in c else r7.parameters.get("model"),
               batch_size=b, step_ms=step_ms, step_kind=step_kind, device=r7.metadata.get("device"),
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


def photo_decode(r8) -> dict | None:
    """Chapter 8's decode cost per image and best loader of each kind, as chapter 8 exports them."""
    return registry.export("08_threads_processes_gil", "photo_decode")(r8)


def disk_to_gpu(r9) -> dict | None:
    """Chapter 9's fastest cold path from a file to GPU memory (GB/s, mean over runs, bytes verified),
    beside the two ceilings it cannot beat: the device's cold sequential read (dd) and the PCIe copy."""
    if r9 is None or not r9.metadata.get("cuda") or "gpu" not in r9.tables:
        return None
    g = r9.table("gpu")
    g = g[(g["cache"] == "cold") & g["error"].isna() & g["verified"].astype(bool)]
    if g.empty:
        return None
    by = g.groupby("path")["GBps"].mean()
    pc = r9.metadata.get("pcie_ceiling") or {}
    dev = r9.table("ceiling")["GBps"].astype(float) if "ceiling" in r9.tables else pd.Series(dtype=float)
    gds = r9.metadata.get("gds") or {}
    return dict(path=str(by.idxmax()), GBps=float(by.max()), paths={str(k): float(v) for k, v in by.items()},
                pcie=float(pc["GBps"]) if pc.get("available") and pc.get("GBps") else None,
                device=float(dev.mean()) if len(dev) else None, gds=gds.get("path"))


def token_loader(r10) -> dict | None:
    """Chapter 10's token loader, cold: tokens per second of the best configuration of each mode
    (mmap, read()) over its sweep (tokens read ÷ loader time, mean over runs)."""
    if r10 is None or "sweep" not in r10.tables:
        return None
    s = r10.table("sweep")
    s = s[(s["cache"] == "cold") & (s["loader_s"] > 0)]
    if s.empty:
        return None
    rate = (s.assign(rate=s["tokens"] / s["loader_s"])
            .groupby(["mode", "seq", "batch", "workers"])["rate"].mean().reset_index())
    modes = {}
    for mode, part in rate.groupby("mode"):
        top = part.loc[part["rate"].idxmax()]
        modes[str(mode)] = dict(tokens_per_s=float(top["rate"]), seq=int(top["seq"]), batch=int(top["batch"]),
                                workers=int(top["workers"]))
    best = max(modes, key=lambda m: modes[m]["tokens_per_s"])
    return dict(best=best, modes=modes, itemsize=r10.metadata.get("itemsize"))


def gradient_exchange(r11) -> dict | None:
    """Chapter 11's model on N GPUs: the gradient bytes of one step, the one-GPU step time (no DDP),
    and for each path the time one all-reduce of all those bytes takes at the all-reduce bandwidth
    measured at that size (interpolated in log(size) between the measured sizes), with the bus
    bandwidth there. The path DDP ran on by default is the one the plain DDP rung used."""
    if r11 is None or "rungs" not in r11.tables or "bench" not in r11.tables:
        return None
    from datajourney.toolkit.collectives import bench_summary, interp_algbw

    r = r11.table("rungs")
    r = r[r["status"] == "ok"]
    one = r[(r["world"] == 1) & (r["rung"] == "no_ddp")]
    many = r[(r["world"] > 1) & (r["rung"] == "ddp")]
    summ = bench_summary(r11.table("bench"))
    summ = summ[summ["op"] == "all_reduce"]
    if one.empty or many.empty or summ.empty:
        return None
    grad = int(one["grad_bytes"].iloc[0])
    default = str(many["path"].iloc[0])
    paths = {}
    for path, part in summ.groupby("path"):
        alg = interp_algbw(part, grad)
        paths[str(path)] = dict(allreduce_ms=grad / (alg * 1e9) * 1e3,
                                busbw_GBps=_loglog(grad, part["size"], part["busbw_GBps"]),
                                ddp_steps_per_s=(float(many.loc[many["path"] == path, "steps_per_s"].iloc[0])
                                                 if (many["path"] == path).any() else None))
    if default not in paths:
        return None
    return dict(model=r11.metadata.get("model"), world=int(many["world"].iloc[0]), grad_bytes=grad,
                cuda=bool(r11.metadata.get("cuda")),
                step_ms=1e3 / float(one["steps_per_s"].iloc[0]), default=default, paths=paths)


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
        Hop("gpu", f"{_device_word(w.get('device'))}: {w['model']} step, batch {w['batch_size']}", "07_full_picture",
            b["demand"],
            f"{w['batch_size']} images per {w['step_ms']:.1f} ms step (data already in GPU memory"
            + ("; the step replayed from CUDA graphs)" if w.get("step_kind") == "graphed" else ")")),
    ]
    return hops + photo_hops(found), w


def photo_hops(found: dict) -> list[Hop]:
    """Chapter 8's photo-like JPEGs as the samples: all cores decoding and resizing, and the best
    loader it measured from cold files (threads or worker processes), in images/s."""
    p = photo_decode(found.get("08_threads_processes_gil"))
    size = "×".join(str(v) for v in p["image_size"]) if p and p.get("image_size") else "photo-like"
    cpu = Hop("photo_cpu", f"CPU: decode + resize {size} photos, all cores", "08_threads_processes_gil",
              None if p is None else p["cores"] * 1000.0 / p["ms"],
              "" if p is None else f"{p['cores']} cores ÷ {p['ms']:.2f} ms per image on one core ({p['decoder']})")
    best = None if p is None else max((p[k] for k in ("process", "thread") if p[k]),
                                      key=lambda b: b["images_per_s"], default=None)
    other = None if p is None or best is None else next(
        (p[k] for k in ("process", "thread") if p[k] and p[k] is not best), None)
    basis = "" if best is None else (f"the best steady loader measured from cold files: {best['label']}"
                                     + (f" (the best of the other kind: {other['label']}, "
                                        f"{other['images_per_s']:,.0f} images/s)" if other else ""))
    loader = Hop("photo_loader", f"loader: {size} photos, best measured", "08_threads_processes_gil",
                 None if best is None else best["images_per_s"], basis)
    return [cpu, loader]


def _device_word(device) -> str:
    """How a step's device is named: 'GPU', or 'CPU (no GPU here)' for a run without one."""
    return "GPU" if str(device or "").startswith("cuda") else "CPU (no GPU here)"


#: The token model's name in the page's words.
TOKEN_MODELS = {"gpt2": "GPT-2 (124M)", "tiny": "a tiny GPT-2"}


def token_gpu_hop(step: dict | None, stated: float | None) -> Hop:
    """The token workload's demand: the stated ``llm_tokens_per_s`` when a reader gave one, else the
    measured GPT-2 step (``step``, :func:`datajourney.toolkit.lmstep.token_step`)."""
    if stated is not None:
        return Hop("gpu", "GPU: token step (a stated demand, not a measurement)", CHAPTER, float(stated),
                   "the parameter llm_tokens_per_s")
    if step is None:
        return Hop("gpu", "GPU: token step", CHAPTER, None, "chapter 12's token step did not run")
    return Hop("gpu", f"{_device_word(step['device'])}: {TOKEN_MODELS.get(step['model'], step['model'])} "
               f"training step, {step['precision']}", CHAPTER, float(step["tokens_per_s"]),
               f"{step['tokens_per_batch']:,} tokens ({step['rows']} rows of {step['seq_len']:,}) per "
               f"{step['median_ms']:.1f} ms step (median of {len(step['step_ms'])}), ids already in device memory")


def token_hops(found: dict, gpu: Hop, token_bytes: int, tokens_per_batch: int) -> list[Hop]:
    """The token workload's hops in tokens/s: the step's demand (``gpu``, :func:`token_gpu_hop`),
    storage (shard, ``token_bytes`` per token), PCIe (int64 ids), chapter 9's path to GPU memory
    and chapter 10's loader."""
    storage = storage_curve(found.get("02_random_vs_sequential"))
    pcie = pcie_curve(found.get("06_pcie"))
    hops = [gpu]
    seq = None if storage is None else storage[storage["pattern"] == "sequential"]
    hops.append(Hop("shard", "storage: token shard, read in order", "02_random_vs_sequential",
                    None if seq is None or seq.empty else float(seq["MBps"].max()) * 1e6 / token_bytes,
                    f"best cold sequential MB/s ÷ {token_bytes} bytes per token"))
    hops.append(Hop("pcie", "PCIe: pinned host-to-device copy of int64 ids", "06_pcie",
                    None if pcie is None else _loglog(tokens_per_batch * 8, pcie["size"], pcie["GBps"]) * 1e9 / 8,
                    f"pinned H2D at a {tokens_per_batch:,}-token batch ÷ 8 bytes per token"))
    g = disk_to_gpu(found.get("09_reading_smarter"))
    hops.append(Hop("to_gpu", "storage → GPU memory, fastest cold path", "09_reading_smarter",
                    None if g is None else g["GBps"] * 1e9 / token_bytes,
                    "" if g is None else f"{g['path']} at {g['GBps']:.2f} GB/s ÷ {token_bytes} bytes per token"))
    t = token_loader(found.get("10_mmap_vs_read"))
    if t is not None:
        b, m = t["best"], t["modes"][t["best"]]
        others = "; ".join(f"{k}: {v['tokens_per_s']:,.0f} tokens/s" for k, v in t["modes"].items() if k != b)
        basis = (f"{'mmap' if b == 'mmap' else 'read()'} at sequence {m['seq']}, batch {m['batch']}, "
                 f"{m['workers']} workers: tokens read ÷ loader time, cold" + (f" ({others})" if others else ""))
    hops.append(Hop("token_loader", "token loader: indexed data set, cold, best of mmap and read()",
                    "10_mmap_vs_read", None if t is None else t["modes"][t["best"]]["tokens_per_s"],
                    "" if t is None else basis))
    return hops


def _sig(x: float) -> str:
    """Three significant digits without an exponent: 1,226 · 83.7 · 0.457."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def gradient_hops(found: dict) -> tuple[list[Hop], dict | None]:
    """Chapter 11's model on N GPUs, in steps per second: what one GPU's step allows, and what one
    all-reduce of the step's gradients over the path DDP used allows if nothing overlapped it."""
    g = gradient_exchange(found.get("11_gpu_to_gpu"))
    if g is None:
        return [Hop("gpu", "GPU step (chapter 11's model)", "11_gpu_to_gpu", None, "")], None
    d = g["paths"][g["default"]]
    dev, devs = ("GPU", "GPUs") if g["cuda"] else ("CPU process", "CPU processes")
    return [Hop("gpu", f"{'GPU' if g['cuda'] else 'CPU'}: {g['model']} step on one {dev}", "11_gpu_to_gpu",
                1e3 / g["step_ms"], f"1 ÷ {_sig(g['step_ms'])} ms per step without DDP"),
            Hop("allreduce", f"{'GPU to GPU' if g['cuda'] else 'process to process'}: all-reduce of the gradients, "
                f"{g['world']} {devs} ({g['default']})", "11_gpu_to_gpu", 1e3 / d["allreduce_ms"],
                f"1 ÷ ({_sig(g['grad_bytes'] / 1e6)} MB of gradients ÷ the all-reduce's measured bandwidth at that "
                f"size: {_sig(d['allreduce_ms'])} ms, bus bandwidth {_sig(d['busbw_GBps'])} GB/s), "
                "with no overlap with the backward pass")], g


def padding_shares(r5) -> pd.DataFrame | None:
    """Real tokens per computed position by batching strategy (chapter 5, all samples)."""
    if r5 is None or "strategies" not in r5.tables:
        return None
    s = r5.table("strategies")
    s = s[s["population"] == "all samples"] if "population" in s else s
    return s[["strategy", "label", "efficiency"]].reset_index(drop=True)


#: Chapter 8's photo hops describe other samples (500×375 photos, not chapter 7's images): they are
#: shown beside the image workload as a what-if, never taken as its weakest link.
ASIDE = frozenset({"photo_cpu", "photo_loader"})


def weakest(hops: list[Hop]) -> dict | None:
    """The hop with the smallest capacity, the next one and the margin between them (hops in
    :data:`ASIDE` left out)."""
    known = sorted((h for h in hops if h.capacity is not None and h.key not in ASIDE), key=lambda h: h.capacity)
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
    ("08_threads_processes_gil", "primitives"),
    ("08_threads_processes_gil", "end_to_end"),
    ("08_threads_processes_gil", "cost"),
    ("08_threads_processes_gil", "first_batch"),
    ("09_reading_smarter", "to_gpu"),
    ("09_reading_smarter", "gds"),
    ("09_reading_smarter", "parallel_random"),
    ("10_mmap_vs_read", "loader_time"),
    ("10_mmap_vs_read", "posix_events"),
    ("10_mmap_vs_read", "kernel_view"),
    ("10_mmap_vs_read", "overhead"),
    ("11_gpu_to_gpu", "scaling_direct"),
    ("11_gpu_to_gpu", "host_path_collapse"),
    ("11_gpu_to_gpu", "allreduce_busbw"),
]


def checklist_table(found: dict) -> pd.DataFrame:
    """Each :data:`CHECKLIST` row as the chapter's own page computed it from this run's result
    (its key results: value, unit, headline, published metric); rows of chapters not run stay empty."""
    rows, cache = [], {}
    for ch, key in CHECKLIST:
        row = dict(chapter=ch, key=key, value=None, unit="", headline=None, published=None, text=None)
        if ch in found:
            if ch not in cache:
                try:
                    cache[ch] = {f.key: f for f in registry.findings(ch, found[ch])}
                except (KeyError, ValueError, IndexError):
                    cache[ch] = {}
            f = cache[ch].get(key)
            if f is not None:
                row.update(value=f.value, unit=f.unit, headline=f.headline, published=f.published, text=f.text)
        rows.append(row)
    return pd.DataFrame(rows)


def _why_missing(found: dict, hops: list[Hop]) -> list[Hop]:
    """Hops without a rate say why: their chapter was not run, or ran without what it needs (chapter
    12's own token step keeps its own reason)."""
    out = []
    for h in hops:
        if h.capacity is None and h.chapter != CHAPTER:
            why = ("not in this run" if h.chapter not in found
                   else "ran without a GPU" if h.chapter in ("06_pcie", "09_reading_smarter")
                   and not found[h.chapter].metadata.get("cuda") else "has no usable result")
            h = Hop(h.key, h.label, h.chapter, None, f"chapter {int(h.chapter[:2])} {why}")
        out.append(h)
    return out


def hops_table(hops: list[Hop], workload: str) -> pd.DataFrame:
    return pd.DataFrame([dict(workload=workload, hop=h.key, label=h.label, chapter=h.chapter,
                              capacity=h.capacity, basis=h.basis) for h in hops])


# ----------------------------------------------------------------------------- the answer
#: MLPerf Storage's bar: a GPU counts as fed when it computes at least this share of the time.
AU_MIN = 0.90
#: The hops a host shares among all its GPUs, by workload, in groups of alternatives (the faster
#: alternative of a group counts: a reader picks the better storage layout). PCIe links and the
#: step itself come with each GPU.
SHARED = {"image": {"storage": ("files", "shard"), "CPU": ("cpu",)},
          "tokens": {"storage": ("shard", "to_gpu"), "token loader": ("token_loader",)}}

#: Each hop in a few words, and what it does to a sample (for "the CPU could prepare 6.4× ...").
HOP_NAMES = {"files": ("one-file-per-sample storage", "deliver"), "shard": ("sharded storage", "deliver"),
             "cpu": ("the CPU", "prepare"), "pcie": ("the PCIe link", "copy"),
             "to_gpu": ("the path from storage to GPU memory", "move"), "token_loader": ("the token loader", "load"),
             "allreduce": ("the all-reduce", "keep pace with")}
NOUNS = {"image": "images", "tokens": "tokens", "gradients": "steps"}


def gpus_fed(workload: str, hops: pd.DataFrame) -> dict | None:
    """How many GPUs like this run's one the host's shared hops (:data:`SHARED`) can feed with each
    GPU computing at least :data:`AU_MIN` of the time: ⌊the slowest shared group's rate ÷ (AU_MIN × one
    GPU's need)⌋, and the group that binds. None without a measured need or shared hop."""
    demand = hops.loc[hops["hop"] == "gpu", "capacity"].dropna()
    groups = {}
    for name, keys in SHARED.get(workload, {}).items():
        rates = hops[hops["hop"].isin(keys)].dropna(subset=["capacity"])
        if not rates.empty:
            best = rates.loc[rates["capacity"].idxmax()]
            groups[name] = (float(best["capacity"]), str(best["hop"]))
    if demand.empty or not groups:
        return None
    need = AU_MIN * float(demand.iloc[0])
    name, (rate, hop) = min(groups.items(), key=lambda g: g[1][0])
    return dict(gpus=int(math.floor(rate / need)), binding=name, hop=hop, rate=rate, need_per_gpu=need,
                unmeasured=[g for g in SHARED[workload] if g not in groups])


def _step_on_gpu(res, workload: str) -> bool:
    """Whether the workload's step ran on a GPU (its label says so)."""
    h = res.table("hops")
    row = h[(h["workload"] == workload) & (h["hop"] == "gpu")]
    return not row.empty and str(row["label"].iloc[0]).startswith("GPU")


def remedy(res, workload: str, w: dict) -> dict:
    """What to change for ``workload`` whose weakest link is ``w``: the chapter that measured the fix,
    its setting filled in from this run's data, and why (the decision guide: which hop limits decides
    which row applies). ``gain``: the most the fix can bring before the next hop limits (None: none from
    the input pipeline)."""
    md, key = res.metadata, w["key"]
    gain = w["margin"] if key != "gpu" else None
    wl = md.get("image_workload") or {}
    if workload == "image":
        if key == "gpu" and not _step_on_gpu(res, "image"):
            return dict(chapter="07_full_picture", setting="run the step on a GPU", gain=None,
                        why="the model's step on the CPU is slower than every hop that feeds it")
        if key == "gpu":
            n = math.ceil(wl["cpu_ms"] * wl["batch_size"] / wl["step_ms"]) if wl.get("cpu_ms") else None
            return dict(chapter="04_cpu_starvation" if n else "07_full_picture",
                        setting=f"num_workers={max(n, 1)}" if n else "keep the loader you have", gain=None,
                        why="enough workers to stay ahead of the step, D·B/W ≤ G; the GPU limits, not the input"
                        if n else "the GPU limits, not the input")
        if key == "files":
            return dict(chapter="02_random_vs_sequential", setting="shards read in order", gain=gain,
                        why="one file per sample costs a random read each; a shard is read sequentially")
        if key == "shard":
            return dict(chapter="09_reading_smarter", setting="more reads in flight", gain=gain,
                        why="one reader waits for each request; parallel reads fill the device's queue")
        if key == "cpu":
            return dict(chapter="08_threads_processes_gil", setting="decode on the GPU (nvJPEG)", gain=gain,
                        why="every core busy with decoding still falls short of the step")
        if key == "pcie":
            return dict(chapter="06_pcie", setting="pin_memory=True, non_blocking=True", gain=gain,
                        why="pageable copies go through a bounce buffer; uint8 batches cross at a quarter the bytes")
    if workload == "tokens":
        if key == "gpu":
            pad = res.table("padding") if "padding" in res.tables else None
            if pad is not None and {"pad_to_longest"} <= set(pad["strategy"]):
                packed = float(pad["efficiency"].max())
                padded = float(pad.loc[pad["strategy"] == "pad_to_longest", "efficiency"].iloc[0])
                return dict(chapter="05_padding_tax", setting="pack sequences instead of padding them",
                            gain=packed / padded, gain_of="real tokens per step",
                            why="the input keeps up; the step's own waste is padding")
            return dict(chapter="05_padding_tax", setting="pack sequences instead of padding them", gain=None,
                        why="the input keeps up; the step's own waste is padding")
        if key == "token_loader":
            t = md.get("token_loader") or {}
            m = (t.get("modes") or {}).get(t.get("best"), {})
            setting = (f"{'mmap' if t.get('best') == 'mmap' else 'read()'}, num_workers={m['workers']}"
                       if m else "the faster of mmap and read()")
            return dict(chapter="10_mmap_vs_read", setting=setting, gain=gain,
                        why="the fastest loader measured; more workers than it used keep more reads in flight")
        if key in ("shard", "to_gpu"):
            g = md.get("to_gpu") or {}
            return dict(chapter="09_reading_smarter", setting=g.get("path") or "more reads in flight", gain=gain,
                        why="the fastest cold path measured from a file into GPU memory")
        if key == "pcie":
            return dict(chapter="06_pcie", setting="pin_memory=True, non_blocking=True", gain=gain,
                        why="pageable copies go through a bounce buffer")
    if workload == "gradients":
        g = md.get("gradient_exchange") or {}
        if key == "gpu":
            return dict(chapter="11_gpu_to_gpu", setting="keep NCCL's direct GPU-to-GPU path", gain=None,
                        why="the all-reduce is shorter than the step: DDP hides it behind the backward pass")
        return dict(chapter="11_gpu_to_gpu", setting="a direct GPU-to-GPU path, or no_sync() over several steps",
                    gain=gain, why=f"the all-reduce over {g.get('default', 'this path')} is longer than the step")
    return dict(chapter=w["chapter"], setting="see its chapter", gain=gain, why="")


def guest_cold_of(r2) -> bool | None:
    """Chapter 2's verdict on its cold reads: True when a cache below a virtual machine served them
    (guest-cold), False when they reached the device, None when not measured."""
    from datajourney.chapters.common import guest_cold

    return None if r2 is None else guest_cold(r2)


def caveats(res, workload: str, hops: set) -> list[str]:
    """The measured facts that change a margin involving ``hops`` (the weakest, the next and the
    binding shared hop): storage read guest-cold (chapter 2), and photos instead of chapter 7's small
    synthetic JPEGs (chapter 8)."""
    md, out = res.metadata, []
    if hops & {"files", "shard", "to_gpu", "token_loader"}:
        gc = md.get("storage_guest_cold", "unknown")
        if gc is True:
            out.append("storage rates are guest-cold: chapter 2's cold reads came from a cache below this virtual "
                       "machine, so a physical disk may deliver less")
        elif gc == "unknown":
            out.append("this result does not record whether chapter 2's cold reads reached the device")
    wl, photo = md.get("image_workload") or {}, md.get("photo")
    if workload == "image" and "cpu" in hops and photo and wl.get("step_ms"):
        need = wl["batch_size"] * 1e3 / wl["step_ms"]
        rate = photo["cores"] * 1e3 / photo["ms"]
        kib = f"{wl['file_bytes'] / 1024:.1f} KiB " if wl.get("file_bytes") else ""
        out.append(f"chapter 7's images are small synthetic {kib}JPEGs; with {'×'.join(map(str, photo['image_size']))} "
                   f"photos (chapter 8) the CPU would prepare {num(rate, 'images/s')}, "
                   f"{times(rate / need)} the GPU's need")
    return out


def answer(res) -> dict:
    """For each workload: its weakest link, what the margin to the next hop is, the remedy, the
    GPUs this host can feed (:func:`gpus_fed`) and the caveats next to them, from the result."""
    out = {}
    weak = weakest_of(res)
    h = res.table("hops") if "hops" in res.tables else pd.DataFrame(columns=["workload", "hop", "capacity"])
    for wl in WORKLOADS:
        w = weak.get(wl)
        if not w:
            out[wl] = None
            continue
        noun = NOUNS[wl]
        consumer = "the GPU" if _step_on_gpu(res, wl) else "the CPU's step"
        verb = "runs" if wl == "gradients" else "consumes"
        if w["key"] == "gpu":
            name, does = HOP_NAMES.get(w["next_key"], (w["next_label"], "deliver"))
            margin = (f"{name} could {does} {times(w['margin'])} the {noun} {consumer} {verb}"
                      if w["next_key"] else None)
        else:
            demand = h.loc[(h["workload"] == wl) & (h["hop"] == "gpu"), "capacity"].iloc[0]
            name, does = HOP_NAMES.get(w["key"], (w["label"], "deliver"))
            margin = f"{consumer} could {verb[:-1]} {times(demand / w['capacity'])} the {noun} {name} can {does}"
        fed = gpus_fed(wl, h[h["workload"] == wl]) if _step_on_gpu(res, wl) else None
        involved = {w["key"], w.get("next_key")} | ({fed["hop"]} if fed else set())
        out[wl] = dict(weakest=w, margin=margin, remedy=remedy(res, wl, w), fed=fed,
                       caveats=caveats(res, wl, involved), on_gpu=_step_on_gpu(res, wl))
    return out


# ----------------------------------------------------------------------------- run
def preflight(params: dict) -> dict:
    """Check the chapter's parameters before any work (one-line errors naming the parameter)."""
    from datajourney.core.params import ParameterError, choice, number, positive_int

    if params.get("llm_tokens_per_s") is not None:
        number("llm_tokens_per_s", params.get("llm_tokens_per_s"), minimum=1.0)
    choice("token_model", params.get("token_model"), ("auto", "gpt2", "tiny"))
    seq = positive_int("token_seq_len", params.get("token_seq_len"), maximum=8192)
    positive_int("token_steps", params.get("token_steps"), maximum=1000)
    choice("token_bytes", params.get("token_bytes"), (2, 4, 8))
    n = positive_int("tokens_per_batch", params.get("tokens_per_batch"), maximum=1 << 30)
    if n < seq:
        raise ParameterError("tokens_per_batch", n, f"at least token_seq_len ({seq:,}): one row of tokens")
    return dict(params)


#: The workloads diagnosed, their titles and the unit of their rates.
WORKLOADS = {"image": "ResNet-50 training", "tokens": "token-based step", "gradients": "data-parallel step"}
UNITS = {"image": "images/s", "tokens": "tokens/s", "gradients": "steps/s"}


def summary_lines(res) -> list[str]:
    """A few lines for the end of a run: each workload's weakest link, what to change and how many
    GPUs of this kind the host feeds."""
    lines = []
    for wl, a in answer(res).items():
        if a is None:
            lines.append(f"{WORKLOADS[wl]}: no diagnosis (its chapters are not in this run)")
            continue
        w, r = a["weakest"], a["remedy"]
        line = f"{WORKLOADS[wl]}: weakest link {w['label']} at {num(w['capacity'], UNITS[wl])}"
        if a["margin"]:
            line += f" ({a['margin']})"
        line += f"; do: chapter {int(r['chapter'][:2])}: {r['setting']}"
        if a["fed"] is not None:
            line += f"; feeds {a['fed']['gpus']} such GPUs at ≥ {AU_MIN:.0%} utilisation"
        lines.append(line)
    missing = res.metadata.get("missing")
    if missing:
        lines.append("not run, so not diagnosed: chapters " + ", ".join(str(int(c[:2])) for c in missing))
    return lines


def weakest_of(res) -> dict:
    """The weakest link of each workload, computed again from the result's hops table (so a result
    rendered by newer code follows that code's rule), else as the run stored it."""
    if "hops" not in res.tables:
        return res.metadata.get("weakest", {})
    h = res.table("hops")
    return {wl: weakest([Hop(r["hop"], r["label"], r["chapter"],
                             None if pd.isna(r["capacity"]) else float(r["capacity"]), r["basis"])
                         for _, r in h[h["workload"] == wl].iterrows()])
            for wl in WORKLOADS}


def measure_token_step(*, token_model: str, tokens_per_batch: int, token_seq_len: int, token_steps: int) -> dict:
    """Time the GPT-2 training step on this machine's GPU (bf16), or on its CPU without one."""
    import torch

    from datajourney.toolkit.lmstep import token_step

    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = token_model if token_model != "auto" else ("gpt2" if device == "cuda" else "tiny")
    return token_step(size=size, tokens_per_batch=tokens_per_batch, seq_len=token_seq_len, steps=token_steps,
                      device=device)


def _measure(*, llm_tokens_per_s: float | None, token_model: str, token_seq_len: int, token_steps: int,
             token_bytes: int, tokens_per_batch: int, diagnose, run_dir=None):
    """Diagnose the run in ``diagnose`` (default: this run, ``run_dir``) from the other chapters'
    result files there, time the token step (unless a demand is stated) and save the result to ``run_dir``."""
    from datajourney.core import results

    params = dict(llm_tokens_per_s=llm_tokens_per_s, token_model=token_model, token_seq_len=token_seq_len,
                  token_steps=token_steps, token_bytes=token_bytes, tokens_per_batch=tokens_per_batch)
    preflight(params)
    if diagnose is not None and not Path(diagnose).is_dir():
        from datajourney.core.params import ParameterError

        raise ParameterError("diagnose", diagnose, "a directory holding other chapters' result files")
    rd = results.resolve_run_dir(run_dir)
    src = Path(diagnose) if diagnose is not None else rd
    found = load_run(src)
    res = results.start(CHAPTER, {**params, "diagnose": str(src), "run_dir": str(rd)}, run_dir)
    step = None
    if llm_tokens_per_s is None:
        step = measure_token_step(token_model=token_model, tokens_per_batch=tokens_per_batch,
                                  token_seq_len=token_seq_len, token_steps=token_steps)
        res.add("token_step", pd.DataFrame({"step": range(1, len(step["step_ms"]) + 1), "ms": step["step_ms"]}))
    hops, w = image_hops(found)
    hops = _why_missing(found, hops)
    thops = _why_missing(found, token_hops(found, token_gpu_hop(step, llm_tokens_per_s), token_bytes,
                                           tokens_per_batch))
    ghops, grads = gradient_hops(found)
    ghops = _why_missing(found, ghops)
    res.add("hops", pd.concat([hops_table(hops, "image"), hops_table(thops, "tokens"),
                               hops_table(ghops, "gradients")], ignore_index=True))
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
        image_workload=w, weakest={"image": weakest(hops), "tokens": weakest(thops), "gradients": weakest(ghops)},
        photo=photo_decode(found.get("08_threads_processes_gil")),
        to_gpu=disk_to_gpu(found.get("09_reading_smarter")),
        token_loader=token_loader(found.get("10_mmap_vs_read")),
        gradient_exchange=grads,
        token_step=None if step is None else {k: v for k, v in step.items() if k != "step_ms"},
        storage_guest_cold=guest_cold_of(found.get("02_random_vs_sequential")),
    )
    res.metadata["summary"] = summary_lines(res)
    res.save(rd)
    return res


def run(params: Params | None = None, *, run_dir=None, **changes):
    """Run chapter 12's experiment with ``params`` (default: :class:`Params`, the notebook's defaults)
    changed by ``changes``, save the result to ``run_dir`` and return it."""
    p = (params or Params()).replace(**changes)
    return _measure(**p.as_dict(), run_dir=run_dir)
