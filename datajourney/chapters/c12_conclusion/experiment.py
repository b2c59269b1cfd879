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

from datajourney.chapters import registry
from datajourney.chapters.c12_conclusion.params import Params

CHAPTER = "12_conclusion"

#: The chapters whose results the diagnosis reads, and what each contributes.
SOURCES = {
    "02_random_vs_sequential": "storage: one file per sample vs one shard, cold",
    "03_dataloader": "DataLoader workers reading small files",
    "04_cpu_starvation": "the model of workers needed (D·B/W against G)",
    "05_padding_tax": "real tokens per computed position",
    "06_pcie": "host-to-device bandwidth, pinned",
    "07_full_picture": "ResNet-50's step, decode cost per image and the measured end-to-end pipeline",
    "08_threads_processes_gil": "photo-like JPEGs: decode cost per image per core and the best loader, threads vs processes",
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
    (the faster of its eager and CUDA-graph ceilings, where both were measured), bytes per image on disk, the loader's CPU time per image (read, decode + resize, normalise,
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
        Hop("gpu", f"GPU: {w['model']} step, batch {w['batch_size']}", "07_full_picture", b["demand"],
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
    """Hops without a rate say why: their chapter was not run, or ran without what it needs."""
    out = []
    for h in hops:
        if h.capacity is None:
            why = ("not in this run" if h.chapter not in found
                   else "ran without a GPU" if h.chapter in ("06_pcie", "09_reading_smarter")
                   and not found[h.chapter].metadata.get("cuda") else "has no usable result")
            h = Hop(h.key, h.label, h.chapter, None, f"chapter {int(h.chapter[:2])} {why}")
        out.append(h)
    return out


def hops_table(hops: list[Hop], workload: str) -> pd.DataFrame:
    return pd.DataFrame([dict(workload=workload, hop=h.key, label=h.label, chapter=h.chapter,
                              capacity=h.capacity, basis=h.basis) for h in hops])


# ----------------------------------------------------------------------------- run
def preflight(params: dict) -> dict:
    """Check the chapter's parameters before any work (one-line errors naming the parameter)."""
    from datajourney.core.params import choice, number, positive_int

    number("llm_tokens_per_s", params.get("llm_tokens_per_s"), minimum=1.0)
    choice("token_bytes", params.get("token_bytes"), (2, 4, 8))
    positive_int("tokens_per_batch", params.get("tokens_per_batch"), maximum=1 << 30)
    return dict(params)


#: The workloads diagnosed, their titles and the unit of their rates.
WORKLOADS = {"image": "ResNet-50 training", "tokens": "token-based step", "gradients": "data-parallel step"}
UNITS = {"image": "images/s", "tokens": "tokens/s", "gradients": "steps/s"}


def weakest_links(found: dict, *, llm_tokens_per_s: float = 1_000_000.0, token_bytes: int = 4,
                  tokens_per_batch: int = 131072) -> dict:
    """The weakest link of each workload for the results in ``found`` (nothing saved)."""
    hops, _ = image_hops(found)
    ghops, _ = gradient_hops(found)
    return {"image": weakest(hops), "tokens": weakest(token_hops(found, llm_tokens_per_s, token_bytes,
                                                                 tokens_per_batch)),
            "gradients": weakest(ghops)}


def summary_lines(res) -> list[str]:
    """A few lines for the end of a run: the weakest link of each workload on this machine."""
    return summary_from(weakest_of(res), res.metadata.get("missing"))


def weakest_of(res) -> dict:
    """The weakest link of each workload, computed again from the result's hops table (so a result
    rendered by newer code follows that code's rule), else as the run stored it."""
    if "hops" not in res.tables:
        return res.metadata.get("weakest", {})
    h = res.table("hops")
    return {wl: weakest([Hop(r["hop"], r["label"], r["chapter"], None if pd.isna(r["capacity"]) else float(r["capacity"]),
                             r["basis"]) for _, r in h[h["workload"] == wl].iterrows()])
            for wl in ("image", "tokens", "gradients")}


def summary_from(weakest_by_workload: dict, missing=None) -> list[str]:
    """:func:`summary_lines` for the weakest links of :func:`weakest_links` and the chapters missing."""
    lines = []
    for wl, title in WORKLOADS.items():
        w = weakest_by_workload.get(wl)
        if not w:
            lines.append(f"{title}: no diagnosis (its chapters are not in this run)")
            continue
        unit = UNITS[wl]
        from datajourney.core.findings import num, times

        line = f"{title}: weakest link {w['label']} at {num(w['capacity'], unit)}"
        if w.get("next_label"):
            line += f"; next: {w['next_label']} ({times(w['margin'])} more)"
        lines.append(line)
    if missing:
        lines.append("not run, so not diagnosed: chapters " + ", ".join(str(int(c[:2])) for c in missing))
    return lines


def _measure(*, llm_tokens_per_s: float, token_bytes: int, tokens_per_batch: int,
        diagnose, run_dir=None):
    """Diagnose the run in ``diagnose`` (default: this run, ``run_dir``) from the other chapters'
    result files there, and save the result to ``run_dir``."""
    from datajourney.core import results

    params = dict(llm_tokens_per_s=llm_tokens_per_s, token_bytes=token_bytes, tokens_per_batch=tokens_per_batch)
    preflight(params)
    if diagnose is not None and not Path(diagnose).is_dir():
        from datajourney.core.params import ParameterError

        raise ParameterError("diagnose", diagnose, "a directory holding other chapters' result files")
    rd = results.resolve_run_dir(run_dir)
    src = Path(diagnose) if diagnose is not None else rd
    found = load_run(src)
    res = results.start(CHAPTER, {**params, "diagnose": str(src), "run_dir": str(rd)}, run_dir)
    hops, w = image_hops(found)
    hops = _why_missing(found, hops)
    thops = _why_missing(found, token_hops(found, llm_tokens_per_s, token_bytes, tokens_per_batch))
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
    )
    res.metadata["summary"] = summary_lines(res)
    res.save(rd)
    return res


def run(params: Params | None = None, *, run_dir=None, **changes):
    """Run chapter 12's experiment with ``params`` (default: :class:`Params`, the notebook's defaults)
    changed by ``changes``, save the result to ``run_dir`` and return it."""
    p = (params or Params()).replace(**changes)
    return _measure(**p.as_dict(), run_dir=run_dir)
