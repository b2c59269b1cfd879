"""Chapter 12's analysis: each hop's sustainable rate for three workloads, from the facts the other
chapters exported into this chapter's result (``metadata.inputs``), and the weakest link of each.

Pure and prose-free. A hop's capacity is a stated model of another chapter's measurement (for example
"files per second = the cold random-read bandwidth at this file size ÷ the file size"), never a new
measurement; :func:`budget` is that model as a function of the workload's inputs (the page's budget
chart evaluates the same model in the browser). The data-parallel step is priced with chapter 11's measured
cost of DDP (its exported share of one device's steps/s), its bandwidth model kept only as a check beside it.
The remedy for a weakest link is the advice of the chapter that measured it, copied with the fact that
measures its gain, so it reads the same here as there.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from datajourney.chapters.c12_conclusion.params import CHAPTER
from datajourney.core.answers import KEEPS_UP
from datajourney.core.facts import FLAGGED, Advice, Fact, Facts, compare, host_label, measured

#: Bytes of one decoded 224×224 RGB image as chapter 7's tuned recipe ships it (uint8).
IMAGE_TENSOR_BYTES = 3 * 224 * 224
#: MLPerf Storage's bar: a GPU counts as fed when it computes at least this share of the time.
AU_MIN = KEEPS_UP
#: The workloads diagnosed and the unit of their rates.
UNITS = {"image": "images/s", "tokens": "tokens/s", "gradients": "steps/s"}
#: Chapter 8's photo hops describe other samples than chapter 7's images: shown as a what-if, never the weakest.
ASIDE = frozenset({"photo_cpu", "photo_loader"})
#: The hops a host shares among all its GPUs, by workload, in groups of alternatives (the faster of a group counts).
#: The token loader is not among them: every data-parallel rank runs its own loader, so its rate is one GPU's.
SHARED = {"image": {"storage": ("files", "shard"), "CPU": ("cpu",)},
          "tokens": {"storage": ("shard", "to_gpu"), "CPU": ("token_cpu",)}}
#: The remedy for a weakest hop: the chapter that measured the fix and the keys of its advice, in order of preference.
REMEDY = {
    ("image", "gpu"): ("07_full_picture", ("image.recipe", "image.num_workers")),
    ("image", "files"): ("02_random_vs_sequential", ("samples.layout",)),
    ("image", "shard"): ("09_reading_smarter", ("random_reads.threads", "storage_to_gpu.path")),
    ("image", "cpu"): ("08_threads_processes_gil", ("image_decode.loader",)),
    ("image", "pcie"): ("06_pcie", ("pcie.pin_memory",)),
    ("tokens", "gpu"): ("05_padding_tax", ("tokens.batching",)),
    ("tokens", "token_loader"): ("10_mmap_vs_read", ("tokens.loader_mode",)),
    ("tokens", "shard"): ("09_reading_smarter", ("storage_to_gpu.path",)),
    ("tokens", "to_gpu"): ("09_reading_smarter", ("storage_to_gpu.path",)),
    ("tokens", "pcie"): ("06_pcie", ("pcie.pin_memory",)),
    ("gradients", "gpu"): ("11_gpu_to_gpu", ("ddp.option", "ddp.path")),
    ("gradients", "allreduce"): ("11_gpu_to_gpu", ("ddp.option", "ddp.path")),
}
#: A checklist key naming a chapter's declared question (its advice key) rather than one of its facts.
QUESTION = "?"
#: The suffix of the fact a chapter adds where a question of its has no answer because its run lacked the default.
UNMEASURED = ".unmeasured"
#: The checklist: (chapter, fact key, or QUESTION + a question's key). Each row shows that chapter's fact as its own
#: analysis computed it, or its verdict on the question, so the checklist never re-decides what a chapter answered.
CHECKLIST = [
    ("02_random_vs_sequential", "?samples.layout"), ("02_random_vs_sequential", "cold_latency"),
    ("02_random_vs_sequential", "?shard.odirect"),
    ("03_dataloader", "published_w4"), ("03_dataloader", "first_batch"),
    ("04_cpu_starvation", "workers_to_keep_up"), ("04_cpu_starvation", "?synthetic.persistent_workers"),
    ("05_padding_tax", "?tokens.batching"),
    ("06_pcie", "?pcie.pin_memory"), ("06_pcie", "cpu_overlap"),
    ("07_full_picture", "recipe"), ("07_full_picture", "best_vs_ceiling"),
    ("08_threads_processes_gil", "primitives"), ("08_threads_processes_gil", "?image_decode.loader"),
    ("08_threads_processes_gil", "?image_decode.model_feed"),
    ("08_threads_processes_gil", "cost"), ("08_threads_processes_gil", "first_batch.fork_vs_spawn"),
    ("09_reading_smarter", "?storage_to_gpu.path"), ("09_reading_smarter", "gds"),
    ("09_reading_smarter", "?random_reads.threads"),
    ("10_mmap_vs_read", "?tokens.loader_mode"), ("10_mmap_vs_read", "posix_events"), ("10_mmap_vs_read", "kernel_view"),
    ("10_mmap_vs_read", "overhead"),
    ("11_gpu_to_gpu", "scaling_direct"), ("11_gpu_to_gpu", "?ddp.option"), ("11_gpu_to_gpu", "host_path_cost"),
    ("11_gpu_to_gpu", "allreduce_busbw"),
]
EXPORTS = ("image.weakest", "tokens.weakest", "gradients.weakest", "image.margin", "tokens.margin",
           "gradients.margin", "image.gpus_fed", "tokens.gpus_fed", "hops")


# ----------------------------------------------------------------------------- inputs
def inputs(res) -> dict[str, Facts]:
    """The facts each source chapter exported into this result (chapter -> Facts)."""
    return {ch: Facts.from_dict(v["facts"]) for ch, v in (res.metadata.get("inputs") or {}).items()
            if isinstance(v, dict) and v.get("facts")}


def sources(res) -> list[str]:
    """The chapters this diagnosis reads, in order: those the run gathered facts from and those it found
    missing (the harness names them from the book's chapters, so a new chapter is among them)."""
    return sorted({*res.metadata.get("found", []), *res.metadata.get("missing", [])})


def checklist_rows(found: dict[str, Facts]) -> list[tuple[str, str]]:
    """The checklist's (chapter, key) rows: :data:`CHECKLIST`, then for a chapter it does not name, every key
    that chapter exports (its declared questions as ``?<key>``), so a new chapter is checked as it stands."""
    named = {ch for ch, _ in CHECKLIST}
    extra = [(ch, QUESTION + k if src.advice_for(k) is not None else k)
             for ch, src in sorted(found.items()) if ch not in named for k in src.exports]
    return CHECKLIST + extra


def _data(found: dict[str, Facts], chapter: str, name: str):
    f = found.get(chapter)
    return None if f is None else f.data.get(name)


def _loglog(x: float, xs, ys) -> float:
    """Interpolate ``ys`` at ``x`` on log-log axes (clamped to the measured range)."""
    xs, ys = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    order = np.argsort(xs)
    return float(np.exp(np.interp(math.log(x), xs[order], ys[order])))


def _frame(records) -> pd.DataFrame | None:
    return None if not records else pd.DataFrame(records)


def budget(*, step_ms: float, batch_size: int, file_bytes: float, cpu_ms: float, cores: int,
           storage: pd.DataFrame | None, pcie: pd.DataFrame | None,
           tensor_bytes: int = IMAGE_TENSOR_BYTES) -> dict:
    """Samples per second each hop sustains for one workload, and what the GPU asks for:
    storage, one file per sample: cold random MB/s at ``file_bytes`` ÷ ``file_bytes`` (one reader);
    storage, shard: cold sequential MB/s at the same request size ÷ ``file_bytes``; CPU: ``cores`` × 1000
    ÷ ``cpu_ms``, the CPU time one image costs (loader workers and training process together);
    PCIe: pinned H2D GB/s at the batch's size ÷ ``tensor_bytes``; demand: batch × 1000 ÷ step."""
    out = {"demand": batch_size * 1000.0 / step_ms}
    for pattern, key in (("random", "files"), ("sequential", "shard")):
        part = None if storage is None else storage[storage["pattern"] == pattern]
        out[key] = (None if part is None or part.empty or not file_bytes
                    else _loglog(file_bytes, part["file_size"], part["MBps"]) * 1e6 / file_bytes)
    out["cpu"] = cores * 1000.0 / cpu_ms if cpu_ms else None
    out["pcie"] = (None if pcie is None or pcie.empty
                   else _loglog(batch_size * tensor_bytes, pcie["size"], pcie["GBps"]) * 1e9 / tensor_bytes)
    return out


def _hop(workload, key, chapter, capacity, **numbers) -> dict:
    return dict(workload=workload, hop=key, chapter=chapter,
                capacity=None if capacity is None or not math.isfinite(capacity) else float(capacity), **numbers)


#: Chapter 7's exported fact for its combined end-to-end recipe (format, workers, transforms, step), when it has one:
#: the image pipeline chapter 12 recommends and prices; without it, chapter 7's advised worker count.
RECIPE = "recipe"
#: Chapter 7's advice the recommended pipeline follows without a ``recipe`` fact (keys of its questions, in order).
RECIPE_ADVICE = ("image.recipe",)
WORKERS_ADVICE = "image.num_workers"
#: The step each of chapter 7's variants ran with (its transforms, and whether the step was replayed from a graph).
VARIANT_STEP = {"default": "eager", "tuned": "eager", "graphed": "graphed"}


def _step_of(setting: dict) -> str:
    return str(setting.get("step") or setting.get("ceiling") or VARIANT_STEP.get(str(setting.get("variant")), "eager"))


def recommended(found: dict) -> dict | None:
    """The image pipeline the diagnosis recommends, the one whose CPU cost it prices and whose end-to-end rate it
    repeats: chapter 7's combined recipe (its ``recipe`` fact, or an ``image.recipe`` advice) when chapter 7 exports
    one, else the setting chapter 7 advises (``image.num_workers``, its default transforms). Each with only its own
    evidence: its measured images/s runs, the step it ran with, and the CPU time per image of that same pipeline: its
    loader workers' plus its training process's, from its CPU counters where chapter 7 recorded them for it (the whole
    machine's busy cores where they were not counted apart), else its loader's stage timings in a worker plus the
    training process's cores; None when chapter 7 names no such pipeline."""
    src = found.get("07_full_picture")
    w = _data(found, "07_full_picture", "image_workload") or {}
    if src is None or not w:
        return None
    r = w.get("step_recipe") or {}
    same = ("format", "workers", "variant")
    fact = src.get(RECIPE)
    if fact is not None and (fact.setting or {}).get("verdict") == "keep":
        fact = None   # chapter 7's recipe did not clear its threshold over the defaults: not recommended
    advice = next((src.advice_for(k) for k in RECIPE_ADVICE if src.advice_for(k) is not None), None)
    if fact is not None or advice is not None:
        setting = dict(fact.setting if fact is not None else {})
        if not all(k in setting for k in same) and r:
            setting = {**{k: r.get(k) for k in same}, **setting}
        out = dict(source="recipe", format=setting.get("format"), workers=setting.get("workers"),
                   variant=setting.get("variant"), format_name=setting.get("format_name") or r.get("format_name"),
                   step=_step_of(setting), runs=None, cpu_source=None, ms=None)
        if r and all(str(r.get(k)) == str(setting.get(k)) for k in same):  # chapter 7's counters of this pipeline
            # one image's CPU: its loader workers' and its training process's (a second GPU brings both again);
            # the whole machine's busy cores only where the two were not counted apart
            parts = (r.get("workers_ms"), r.get("main_ms"))
            out.update(runs=r.get("runs"), step=r.get("step") or out["step"], cpu_source="counters",
                       ms=sum(parts) if None not in parts else r.get("busy_ms"), workers_ms=r.get("workers_ms"),
                       main_ms=r.get("main_ms"), busy_cores=r.get("busy_cores"))
        return out
    a = src.advice_for(WORKERS_ADVICE)
    c = w.get("cpu_recipe") or {}
    if a is None:
        return None
    workers = a.value if a.verdict == "change" else 0
    out = dict(source="advice", format=c.get("format"), format_name=c.get("format_name"), workers=workers,
               variant="default", step="eager", runs=None, cpu_source=None, ms=None)
    if c and c.get("variant", "default") == "default" and w.get("cpu_ms"):
        # the advised transforms and format as chapter 7 timed their stages (at its fastest worker count, ``at``):
        # the cost per image in a worker, plus the training process's cores there spread over the images/s it
        # measured; that pipeline's end-to-end runs only where it is the advised worker count itself
        runs = w.get("recipe_runs") or []
        ips = sum(runs) / len(runs) if runs else None
        main = w["main_cores"] * 1000.0 / ips if w.get("main_cores") and ips else None
        out.update(cpu_source="clock", ms=w["cpu_ms"] + (main or 0.0), workers_ms=w["cpu_ms"], main_ms=main,
                   at=int(c["workers"]), runs=runs or None if int(c.get("workers", -1)) == int(workers) else None)
    return out


def image_cpu(w: dict, pick: dict | None = None) -> dict:
    """The CPU time one image of chapter 7's workload costs (ms) in the pipeline the diagnosis recommends (``pick``,
    :func:`recommended`), and how it was measured: ``source`` "counters" (the loader workers' and the training
    process's busy cores ÷ its images/s) or "clock" (the loader's stage timings in a worker plus the training
    process's cores); None without one."""
    pick = pick or {}
    if not pick.get("ms"):
        return dict(source=None, ms=None)
    return {"source": pick["cpu_source"], "ms": pick["ms"],
            **{k: pick.get(k) for k in ("workers_ms", "main_ms", "busy_cores", "at")}}


def image_hops(found: dict, step_on_gpu: bool) -> list[dict]:
    """The image workload's hops (images/s): storage (files, shard), CPU, PCIe and the step (chapter 7),
    with chapter 8's photo hops beside them."""
    w = _data(found, "07_full_picture", "image_workload")
    if not w:
        return [_hop("image", "gpu", "07_full_picture", None)]
    storage = _frame(_data(found, "02_random_vs_sequential", "storage_curve"))
    pcie = _frame(_data(found, "06_pcie", "pcie_curve"))
    pick = recommended(found)
    cpu = image_cpu(w, pick)
    b = budget(step_ms=w["step_ms"], batch_size=w["batch_size"], file_bytes=w.get("file_bytes") or 0,
               cpu_ms=cpu["ms"] or 0, cores=w["cores"], storage=storage, pcie=pcie)
    recipe = {k: (pick or {}).get(k) for k in ("format", "format_name", "workers", "variant")}
    hops = [_hop("image", "files", "02_random_vs_sequential", b["files"], file_bytes=w.get("file_bytes")),
            _hop("image", "shard", "02_random_vs_sequential", b["shard"], file_bytes=w.get("file_bytes")),
            _hop("image", "cpu", "07_full_picture", b["cpu"], cores=w["cores"], cpu_ms=cpu["ms"],
                 cpu_source=cpu["source"], workers_ms=cpu.get("workers_ms"), main_ms=cpu.get("main_ms"),
                 busy_cores=cpu.get("busy_cores"), recipe=recipe if cpu["source"] else None, at=cpu.get("at")),
            _hop("image", "pcie", "06_pcie", b["pcie"], batch_size=w["batch_size"]),
            _hop("image", "gpu", "07_full_picture", b["demand"], batch_size=w["batch_size"], step_ms=w["step_ms"],
                 compute_ms=w.get("compute_ms"), on_gpu=step_on_gpu, graphed=w.get("step_kind") == "graphed")]
    photo = _data(found, "08_threads_processes_gil", "photo_decode")
    if photo:
        best = max((photo[k] for k in ("process", "thread") if photo.get(k)), key=lambda x: x["images_per_s"],
                   default=None)
        hops += [_hop("image", "photo_cpu", "08_threads_processes_gil", photo["cores"] * 1000.0 / photo["ms"],
                      cores=photo["cores"], ms=photo["ms"]),
                 _hop("image", "photo_loader", "08_threads_processes_gil",
                      None if best is None else best["images_per_s"])]
    return hops


def token_hops(found: dict, step: dict | None, stated: float | None, token_bytes: int,
               tokens_per_batch: int) -> list[dict]:
    """The token workload's hops (tokens/s): the step's demand (measured here, or stated), storage, PCIe
    (int64 ids), chapter 9's path to GPU memory and chapter 10's loader."""
    demand = stated if stated is not None else (step or {}).get("tokens_per_s")
    hops = [_hop("tokens", "gpu", CHAPTER, demand, stated=stated is not None,
                 on_gpu=bool(step and str(step.get("device", "")).startswith("cuda")) or stated is not None)]
    storage = _frame(_data(found, "02_random_vs_sequential", "storage_curve"))
    seq = None if storage is None else storage[storage["pattern"] == "sequential"]
    hops.append(_hop("tokens", "shard", "02_random_vs_sequential",
                     None if seq is None or seq.empty else float(seq["MBps"].max()) * 1e6 / token_bytes,
                     token_bytes=token_bytes))
    pcie = _frame(_data(found, "06_pcie", "pcie_curve"))
    hops.append(_hop("tokens", "pcie", "06_pcie",
                     None if pcie is None else _loglog(tokens_per_batch * 8, pcie["size"], pcie["GBps"]) * 1e9 / 8,
                     tokens_per_batch=tokens_per_batch))
    g = _data(found, "09_reading_smarter", "disk_to_gpu")
    hops.append(_hop("tokens", "to_gpu", "09_reading_smarter", None if not g else g["GBps"] * 1e9 / token_bytes,
                     token_bytes=token_bytes))
    t = _data(found, "10_mmap_vs_read", "token_loader")
    c10 = found.get("10_mmap_vs_read")
    mode = token_loader(t, c10.advice_for(LOADER_ADVICE) if c10 is not None else None)
    if mode is None:
        hops.append(_hop("tokens", "token_loader", "10_mmap_vs_read", None))
        return hops
    name, one, advised = mode
    call = c10.advice_for(LOADER_ADVICE).call if advised else None
    hops.append(_hop("tokens", "token_loader", "10_mmap_vs_read", one["tokens_per_s"], mode=name,
                     workers=int(one["workers"]), advised=advised, call=call,
                     fits=bool(demand) and one["tokens_per_s"] >= AU_MIN * demand))
    # every data-parallel rank runs its own loader of the advised reader, so the host's cores bound the ranks: each
    # needs its loader's workers plus its own process. A rank's loader is the one with the fewest workers (chapter
    # 10's best rate at that count) that feeds its GPU at AU_MIN of the time (rank_loader_need), so the ranks that
    # fit are as many as possible; the CPU's rate is those loaders together. No such loader: the row above's, and no
    # GPU fed
    if t.get("cores"):
        rates = {int(w): r for w, r in (one.get("by_workers") or {}).items()}
        enough = sorted(w for w, r in rates.items() if demand and r >= rank_loader_need(w, demand))
        w = enough[0] if enough else int(one["workers"])
        rate = rates.get(w, one["tokens_per_s"])
        loaders = max(1, int(t["cores"]) // (w + 1))
        fed = loaders if demand and rate >= rank_loader_need(w, demand) else 0
        at = one.get("by_workers_at") or {}
        hops.append(_hop("tokens", "token_cpu", "10_mmap_vs_read", loaders * rate, loaders=loaders,
                         cores=int(t["cores"]), workers=w, tried=sorted(rates), mode=name, gpus=fed, loader_rate=rate,
                         loader_seq=at.get("seq"), loader_batch=at.get("batch")))
    return hops


def rank_loader_need(workers: int, demand: float) -> float:
    """The tokens/s a rank's own loader must read for its GPU to compute at least :data:`AU_MIN` of the time: with
    workers the loading overlaps the step, so AU_MIN × the step's need; without workers (the rank's own process
    loads, then steps) the two take turns, AU = step ÷ (step + load), so AU_MIN ÷ (1 − AU_MIN) × the need."""
    return demand * (AU_MIN if workers > 0 else AU_MIN / (1 - AU_MIN))


#: Chapter 10's question whose answer is the token loader chapter 12 prices.
LOADER_ADVICE = "tokens.loader_mode"


def token_loader(t: dict | None, advice: Advice | None) -> tuple[str, dict, bool] | None:
    """The one token loader both token hops price (the loader row and the CPU row): the reader chapter 10 advises
    (its ``tokens.loader_mode`` answer, kept or changed) at the rate chapter 10 exported for it (``modes``: read
    mode -> its best cold rate and the workers it ran with); without that answer, chapter 10's fastest (``best``).
    The third item says whether it is the advised one."""
    if not t or not t.get("modes"):
        return None
    modes = t["modes"]
    if advice is not None and str(advice.value) in modes:
        return str(advice.value), modes[str(advice.value)], True
    best = t.get("best") if t.get("best") in modes else max(modes, key=lambda k: modes[k]["tokens_per_s"])
    return best, modes[best], False


#: Chapter 11's exported fact the data-parallel step is priced with: each device's steps/s with DDP's defaults on N
#: devices, as a share of one device's without DDP (the cost chapter 11 measured, not a model of it).
DDP_KEPT = "ddp_default_eff"
#: The same measurement as the share each device lost, the way chapter 11's page words it (one phrasing).
DDP_LOST = "ddp_default_loss"


def gradient_hops(found: dict) -> list[dict]:
    """Chapter 11's model on N devices (steps/s), read only through chapter 11's exports: one device's step without
    DDP (``gradient_exchange``: the step's time, the gradients and the bandwidth chapter 11 measured), and the step
    with DDP's gradient exchange as chapter 11 measured it, each device's steps/s with DDP's defaults: one device's
    rate × ``ddp_default_eff``, the share of it each device kept. The time that added to each step follows from the
    two; the bandwidth model (one all-reduce of all the gradients at the bus bandwidth measured at that size, nothing
    overlapped) is kept beside it as the model the measurement checks, never as the hop's rate. Without the share (a
    run that did not time DDP's defaults) the hop is unmeasured; a share at or above 100% (DDP no slower than one
    device without it) is a measurement problem, never a rate."""
    g = _data(found, "11_gpu_to_gpu", "gradient_exchange")
    if not g or g.get("default") not in (g.get("paths") or {}):
        return [_hop("gradients", "gpu", "11_gpu_to_gpu", None)]
    d = g["paths"][g["default"]]
    src = found["11_gpu_to_gpu"]
    kept = src.number(DDP_KEPT) if DDP_KEPT in src.exports else None
    one = 1e3 / g["step_ms"]
    added = g["step_ms"] * (100 / kept - 1) if kept else None   # per step, ms; ≤ 0: no cost measurable
    return [_hop("gradients", "gpu", "11_gpu_to_gpu", one, on_gpu=bool(g.get("cuda"))),
            _hop("gradients", "allreduce", "11_gpu_to_gpu", one * kept / 100 if kept and kept < 100 else None,
                 world=g["world"], grad_bytes=g["grad_bytes"], kept=kept, step_ms=g["step_ms"], added_ms=added,
                 allreduce_ms=d["allreduce_ms"], busbw_GBps=d["busbw_GBps"])]


def _gradient_facts(found: dict, hops: list[dict], facts: Facts) -> None:
    """The data-parallel step's facts beside its hops: chapter 11's measured share (copied as ``11.ddp_default_eff``,
    the answer's number), the time DDP with its defaults added to each step, and the bandwidth model's time for one
    all-reduce of the gradients against it (``gradients.model_check``: the model shown beside its measured check)."""
    src = found.get("11_gpu_to_gpu")
    if src is None or DDP_KEPT not in src.exports or copy_fact(src, "11_gpu_to_gpu", DDP_KEPT, facts) is None:
        return
    if DDP_LOST in src.exports:   # the same measurement as chapter 11 words it: the share lost (where it ran)
        copy_fact(src, "11_gpu_to_gpu", DDP_LOST, facts)
    h = next((h for h in hops if h["hop"] == "allreduce"), None)
    if h is None or h.get("added_ms") is None or h["added_ms"] <= 0 or not h.get("allreduce_ms"):
        return
    on_gpu = next((x for x in hops if x["hop"] == "gpu"), {}).get("on_gpu")
    ranks = f"{h['world']} {'GPUs' if on_gpu else 'processes'}"
    added = Fact("gradients.added_ms", h["added_ms"], "ms", f"the time DDP with its defaults added to each step on "
                 f"{ranks} (chapter 11, measured)", "time", "lower", setting={"gpus": h["world"]})
    model = Fact("gradients.model_ms", h["allreduce_ms"], "ms", "the bandwidth model's time for one all-reduce of a "
                 "step's gradients, at the bus bandwidth measured at that size with nothing overlapped", "time",
                 "lower")
    facts.add(added, model, replace(compare("gradients.model_check", added, model), quantity="amount"))


def weakest(hops: list[dict]) -> dict | None:
    """The hop with the smallest capacity (the what-if hops of :data:`ASIDE` left out) and the next one: the
    slowest of every other row of the workload's hop table."""
    known = sorted((h for h in hops if h["capacity"] is not None and h["hop"] not in ASIDE),
                   key=lambda h: h["capacity"])
    if not any(h["hop"] != "gpu" for h in known) or not any(h["hop"] == "gpu" for h in known):
        return None  # nothing to compare: no measured data hop, or no demand
    first, second = known[0], (known[1] if len(known) > 1 else None)
    return dict(key=first["hop"], chapter=first["chapter"], capacity=first["capacity"],
                next_key=second["hop"] if second else None, next_capacity=second["capacity"] if second else None)


def hop_gpus(h: dict, need: float) -> int:
    """The GPUs one shared hop feeds, each at ``need`` (:data:`AU_MIN` × one GPU's need): the ranks the hop counted
    itself (``gpus``: per-rank token loaders that fit on the cores), else ⌊its rate ÷ need⌋."""
    return int(h["gpus"]) if h.get("gpus") is not None else int(math.floor(h["capacity"] / need))


def gpus_fed(workload: str, hops: list[dict]) -> dict | None:
    """How many GPUs like this run's one the host's shared hops (:data:`SHARED`) feed with each computing at
    least :data:`AU_MIN` of the time: each shared hop's count (:func:`hop_gpus`, stored in the hop as ``gpus``, the
    number its table row shows), per shared group its fastest hop's, and the fewest of the groups (None when a group
    was not measured). The count the answer states is this one value."""
    demand = next((h["capacity"] for h in hops if h["hop"] == "gpu" and h["capacity"]), None)
    if demand is None:
        return None
    need = AU_MIN * demand
    groups = {}
    for name, keys in SHARED.get(workload, {}).items():
        rates = [h for h in hops if h["hop"] in keys and h["capacity"] is not None]
        for h in rates:
            h["gpus"] = hop_gpus(h, need)
        if rates:
            groups[name] = max(rates, key=lambda h: h["capacity"])   # the group's fastest hop
    if not groups or set(groups) != set(SHARED.get(workload, {})):
        return None   # a shared hop this run did not measure: no count
    name, top = min(groups.items(), key=lambda g: g[1]["gpus"])
    # a count set by how many ranks' loaders fit on the cores (the token CPU hop) says so, with the numbers
    fit = {k: int(top[k]) for k in ("cores", "workers", "loaders") if top.get(k) is not None}
    return dict(gpus=int(top["gpus"]), binding=name, hop=top["hop"], rate=top["capacity"], need_per_gpu=need,
                **({"fit": fit} if len(fit) == 3 else {}))


def _model_check(found: dict, hops: list[dict], facts: Facts) -> None:
    """The image model against what chapter 7 measured end to end for the pipeline the diagnosis recommends
    (:func:`recommended`, stored as ``data["image.pipeline"]``), when that pipeline ran with the step the diagnosis
    prices: its images/s on one GPU ÷ the rate the model predicts for one GPU (its slowest hop, the step's need
    included), and its share of the step's need (``image.fed_share``), which decides whether a count of GPUs fed is
    stated (:func:`supported`). A pipeline measured with another step gives no share: it is never paired with
    another pipeline's."""
    w = _data(found, "07_full_picture", "image_workload") or {}
    r = recommended(found)
    facts.data["image.pipeline"] = r
    runs = (r or {}).get("runs") or []
    known = [h["capacity"] for h in hops if h["capacity"] is not None and h["hop"] not in ASIDE]
    need = next((h["capacity"] for h in hops if h["hop"] == "gpu" and h["capacity"]), None)
    if not runs or not known or not need or r["step"] != (w.get("step_kind") or "eager"):
        return
    setting = {k: r[k] for k in ("format", "workers", "variant", "step")}
    setting["format_name"] = r.get("format_name") or r["format"]
    label = "the pipeline recommended above, end to end (chapter 7)"   # its settings are worded once, in the answer
    measured_rate = measured("image.measured", runs, unit="images/s", label=label, setting=setting)
    model = Fact("image.predicted", min(known), "images/s", "the rate the hops predict for one GPU", "rate")
    share = measured("image.fed_share", [100.0 * x / need for x in runs], unit="%", quantity="share",
                     label=f"{label}: its share of the step's need", setting=setting)
    facts.add(measured_rate, model, compare("image.model_check", measured_rate, model), share)


#: The two steps chapter 7 ran, as a reader knows them.
VARIANT_STEP_WORDS = {"eager": "eager step", "graphed": "step replayed from CUDA graphs"}


def supported(facts: Facts, workload: str) -> bool:
    """Whether a count of GPUs fed may be stated for ``workload``: for images only when chapter 7's pipeline with
    the same step, measured end to end on one GPU, fed it at least :data:`AU_MIN` of its need (every run); the
    other workloads have no end-to-end measurement and state the model's count as one."""
    if workload != "image":
        return True
    s = facts.get("image.fed_share")
    if s is None or s.number is None:
        return False
    return min(s.spread or (s.number, s.number)) >= 100 * AU_MIN


# ----------------------------------------------------------------------------- facts
def _copy_advice(found: dict, workload: str, key: str, facts: Facts) -> Advice | None:
    """The source chapter's advice for a weakest hop, with the fact that measures its gain copied under
    a chapter-qualified key (``07.<key>``), so it reads exactly as it does on that chapter's page."""
    chapter, keys = REMEDY.get((workload, key), (None, ()))
    src = found.get(chapter)
    if src is None:
        return None
    a = next((src.advice_for(k) for k in keys if src.advice_for(k) is not None), None)
    return None if a is None else copied(a, chapter, src, facts, f"{workload}.remedy")


def copied(a: Advice, chapter: str, src: Facts, facts: Facts, key: str) -> Advice:
    """Chapter ``chapter``'s advice ``a`` as chapter 12 repeats it under ``key``: the same verdict and setting,
    with the fact measuring its gain and both its sides copied under chapter-qualified keys (``07.<key>``)."""
    prefix = chapter[:2]
    gain = None
    if a.gain and src.get(a.gain) is not None:
        g = src[a.gain]
        gain = f"{prefix}.{g.key}"
        facts.add(Fact(**{**g.__dict__, "key": gain,
                          "basis": f"{prefix}.{g.basis}" if g.basis else None,
                          "of": f"{prefix}.{g.of}" if g.of else None}))
        for k in (g.basis, g.of):
            if k and src.get(k) is not None:
                facts.add(Fact(**{**src[k].__dict__, "key": f"{prefix}.{k}"}))
    return Advice(**{**a.__dict__, "key": key, "gain": gain, "evidence": tuple(f"{prefix}.{k}" for k in a.evidence)})


def copy_fact(src: Facts, chapter: str, key: str, facts: Facts) -> Fact | None:
    """Chapter ``chapter``'s fact ``key`` copied under ``<nn>.<key>``, a comparison with both its sides (so it reads
    with the chapter's own comparand); None when the chapter has no such fact."""
    f, pre = src.get(key), chapter[:2]
    if f is None:
        return None
    facts.add(Fact(**{**f.__dict__, "key": f"{pre}.{key}", "basis": f"{pre}.{f.basis}" if f.basis else None,
                      "of": f"{pre}.{f.of}" if f.of else None}))
    for side in (f.of, f.basis):
        if side and src.get(side) is not None and facts.get(f"{pre}.{side}") is None:
            facts.add(Fact(**{**src[side].__dict__, "key": f"{pre}.{side}"}))
    return facts[f"{pre}.{key}"]


def your_data(found: dict[str, Facts]) -> Fact | None:
    """Which of the diagnosed chapters read the reader's own data (``image_dir``, ``token_path``) and what it is:
    one fact ``your_data`` listing, per kind, the largest reading and the chapters (None when none did)."""
    parts = []
    for kind in ("images", "tokens"):
        seen = {ch: f for ch, src in sorted(found.items()) if (f := src.get("your_data")) is not None
                and f.setting.get("kind") == kind}
        if seen:
            most = max(seen.values(), key=lambda f: f.number or 0)
            parts.append({**most.setting, "chapters": [int(ch[:2]) for ch in seen]})
    if not parts:
        return None
    return Fact("your_data", sum(len(p["chapters"]) for p in parts), "", "chapters that read your data", "count",
                None, setting={"kind": "diagnosis", "parts": parts})


def analyse(res) -> Facts:
    """The diagnosis as facts: per workload the demand, the weakest hop, its margin, the GPUs fed and the
    remedy (the advice of the chapter that measured it); the hops in ``data["hops"]``."""
    found = inputs(res)
    p = res.parameters
    step = res.metadata.get("token_step")
    stated = p["llm_tokens_per_s"]
    w = _data(found, "07_full_picture", "image_workload") or {}
    image_on_gpu = str(w.get("device") or "").startswith("cuda")
    by = {"image": image_hops(found, image_on_gpu),
          "tokens": token_hops(found, step, stated, int(p["token_bytes"]), int(p["tokens_per_batch"])),
          "gradients": gradient_hops(found)}
    facts = Facts(CHAPTER, exports=EXPORTS)
    facts.data["hops"] = [h for hops in by.values() for h in hops]
    facts.data["found"] = sorted(found)
    facts.data["hosts"] = {ch: v.get("host") for ch, v in (res.metadata.get("inputs") or {}).items()
                           if isinstance(v, dict)}
    facts.data["host"] = host_label(res.fingerprint)
    facts.data["missing"] = [c for c in sources(res) if c not in found]
    facts.data["image_workload"] = w or None
    facts.data["image_words"] = _data(found, "07_full_picture", "workload")
    facts.data["padding_shares"] = _data(found, "05_padding_tax", "padding_shares")
    facts.data["storage_curve"] = _data(found, "02_random_vs_sequential", "storage_curve")
    facts.data["pcie_curve"] = _data(found, "06_pcie", "pcie_curve")
    facts.data["storage_guest_cold"] = _data(found, "02_random_vs_sequential", "guest_cold")
    rows = checklist_rows(found)
    facts.data["checklist"] = [dict(chapter=ch, key=k) for ch, k in rows]
    for ch, k in rows:
        src = found.get(ch, Facts(ch))
        if k.startswith(QUESTION):  # a question: the chapter's verdict, repeated
            a = src.advice_for(k[1:])
            facts.advise(copied(a, ch, src, facts, f"{ch[:2]}.{k[1:]}") if a is not None else None)
            if a is None and f"{k[1:]}{UNMEASURED}" in src:  # why not: the chapter's run lacked the default
                copy_fact(src, ch, k[1:] + UNMEASURED, facts)
            continue
        if src.flagged(k):
            facts.add(Fact(**{**src[k + FLAGGED].__dict__, "key": f"{ch[:2]}.{k}{FLAGGED}"}))
        copy_fact(src, ch, k, facts)
    for wl, hops in by.items():
        unit = UNITS[wl]
        demand = next((h for h in hops if h["hop"] == "gpu"), None)
        if demand and demand["capacity"] is not None:
            facts.add(Fact(f"{wl}.demand", demand["capacity"], unit, "the step's need", "rate"))
        if wl == "gradients":
            _gradient_facts(found, hops, facts)
        wk = weakest(hops)
        facts.data[f"{wl}.weakest"] = wk
        if wk is None:
            continue
        facts.add(Fact(f"{wl}.weakest", wk["key"], "", "the weakest link", "choice", None))
        facts.add(Fact(f"{wl}.weakest_rate", wk["capacity"], unit, f"hop {wk['key']}", "rate"))
        if wk["key"] == "gpu" and wk["next_key"]:
            facts.add(Fact(f"{wl}.next_rate", wk["next_capacity"], unit, f"hop {wk['next_key']}", "rate"))
            facts.add(compare(f"{wl}.margin", facts[f"{wl}.next_rate"], facts[f"{wl}.demand"]))
        elif wk["key"] != "gpu":
            facts.add(compare(f"{wl}.margin", facts[f"{wl}.weakest_rate"], facts[f"{wl}.demand"]))
            if wk["next_key"]:
                facts.add(Fact(f"{wl}.next_rate", wk["next_capacity"], unit, f"hop {wk['next_key']}", "rate"))
                facts.add(compare(f"{wl}.headroom", facts[f"{wl}.next_rate"], facts[f"{wl}.weakest_rate"]))
        on_gpu = bool(demand and demand.get("on_gpu"))
        if wl == "image":
            _model_check(found, hops, facts)
            if (facts.data.get("image.pipeline") or {}).get("source") == "recipe" and \
                    found["07_full_picture"].get(RECIPE) is not None:
                copy_fact(found["07_full_picture"], "07_full_picture", RECIPE, facts)
        fed = gpus_fed(wl, hops) if on_gpu and supported(facts, wl) else None
        facts.data[f"{wl}.fed"] = fed
        if fed is not None:
            facts.add(Fact(f"{wl}.gpus_fed", fed["gpus"], "", f"GPUs fed at ≥ {AU_MIN:.0%} of the time",
                           "count", "higher", setting={"binding": fed["binding"]}))
        facts.advise(_copy_advice(found, wl, wk["key"], facts))
    c7 = found.get("07_full_picture")
    contention = c7.get("contention") if c7 is not None else None
    if contention is not None:  # chapter 7's step beside busy loader processes ÷ the step alone
        facts.add(Fact(**{**contention.__dict__, "key": "image.step_under_load", "basis": None, "of": None}))
    facts.add(your_data(found))
    facts.data["token_step"] = {k: step.get(k) for k in ("model", "parameters", "seq_len", "tokens_per_batch",
                                                           "device")} if step else None
    if found.get("02_random_vs_sequential") is not None and found["02_random_vs_sequential"].get("cold_state"):
        facts.add(Fact(**{**found["02_random_vs_sequential"]["cold_state"].__dict__, "key": "02.cold_state"}))
    if step:
        facts.add(Fact("token_step", step["tokens_per_s"], "tokens/s", "the timed token step", "rate",
                       n=len(res.table("token_step")) if "token_step" in res.tables else 1))
    return facts
