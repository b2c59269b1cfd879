"""Chapter 8: threads, processes and the GIL - the multiprocess DataLoader against thread pipelines.

The data are photo-like JPEGs (about 500×375 pixels, a 1/f colour field with hard-edged
shapes, so that decoding costs what a real photo costs), generated deterministically
through :mod:`datajourney.toolkit.datasets` in the ImageFolder layout of chapter 7.

Experiments:

1. **Primitive scaling**: decode + resize + batch in a ``ThreadPoolExecutor`` vs a
   ``ProcessPoolExecutor`` over a sweep of concurrency, for each decoder (Pillow, SPDL's
   ``spdl.io`` when FFmpeg's libraries load, torchvision's CPU decoder when torchvision
   imports). Worker start-up is timed apart and excluded from throughput.
2. **GIL contention**: every task times its operations (read, decode, resize, batch);
   the same operation timed in threads and in processes at the same concurrency shows
   what waiting for the interpreter lock adds.
3. **End to end**: the DataLoader (worker sweep, with the decoder whose process pool peaked
   highest in experiment 1), an SPDL ``PipelineBuilder`` pipeline (per-stage concurrency,
   transfer on its own CUDA stream) and a plain thread pool, each thread loader with Pillow and
   with ``spdl.io`` (the paper's setting: decoding without the GIL, a batch converted from the
   decoded frames in one copy), from cold files to pinned memory and an H2D copy, consumed by a
   no-op step; time to first batch, throughput, CPU user and system time summed over every
   process of the loader, PSS and USS summed over processes. The collate check runs the Pillow
   pipeline once more with each image decoded into its row of the batch (no collate copy), to
   tell whether the collate stage holds it back. Then the DataLoader's time to first batch vs
   workers × start method × size of the Dataset object, and the memory of every process over a
   whole epoch of a Dataset holding ImageNet's 1.28 M paths as a Python list or a NumPy array,
   in DataLoader workers and in pipeline threads.
4. **IPC**: the cost of moving a batch from a worker process to the main process.
5. **Free-threaded Python**: detected; on a GIL interpreter a labelled skip.
6. **Moonshot**: ResNet-50 in bf16 with channels_last (chapter 7's model and step) fed by
   the best DataLoader, the best thread pipeline and GPU decoding (nvJPEG through
   ``torchvision.io.decode_jpeg(device="cuda")``), each against the model's ceiling; beside
   them the DataLoader with its workers at a lower priority (``model_worker_nice``) and a
   hybrid that decodes a share of each batch in DataLoader workers (at nice 0 and at that nice)
   and the rest on the GPU (``hybrid_share``). By default the step is replayed from CUDA graphs
   (``model_step``), so that the feeds' threads and processes cannot slow its kernel launches;
   the ceiling is measured for both the graphed and the eager step.
"""
from __future__ import annotations

import os
import sys
import sysconfig
from concurrent.futures import ProcessPoolExecutor  # noqa: F401  (tests reach it through this module)
from dataclasses import dataclass, field
from multiprocessing import get_context  # noqa: F401
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from datajourney.chapters.c08_threads_processes_gil import paper
from datajourney.chapters.c08_threads_processes_gil.common import (  # noqa: F401
    AUTO_LOADER_MAX,
    CHAPTER,
    DECODERS,
    LABELS,
    MAX_CONCURRENCY,
    OPS,
    _keep_sigterm,
    _read,
    _version,
    _write_photos,
    blend_disc,
    collate,
    decode_item,
    decode_one,
    ffmpeg_status,
    photo_jpeg,
    photo_plan,
    photo_set,
    spdl_frames,
    torchvision_status,
)
from datajourney.chapters.c08_threads_processes_gil.epoch_memory import (  # noqa: F401
    PATH_STORAGE,
    BatchSource,
    MemorySampler,
    PathsDataset,
    _epoch_fetch,
    _paths_dataset,
    epoch_iter,
    epoch_point,
    imagenet_paths,
    ipc_point,
    startup_point,
)
from datajourney.chapters.c08_threads_processes_gil.loaders import (  # noqa: F401
    BatchSlots,
    HybridBatches,
    PhotoDataset,
    SpdlStages,
    _assemble,
    _collate_items,
    _decode_into,
    _decode_item,
    _dl_worker_init,
    _niced_worker_init,
    _procs,
    _side_stream_feed,
    _sync,
    cpu_times,
    dataloader_iter,
    gpu_decode_resize,
    hybrid_cpu_count,
    hybrid_iter,
    hybrid_share_auto,
    in_flight,
    make_loader,
    measure_loader,
    memory,
    nvjpeg_iter,
    release_memory,
    spdl_iter,
    threadpool_iter,
    timed_batches,
    wave,
    worker_init,
)
from datajourney.chapters.c08_threads_processes_gil.model_feed import (  # noqa: F401
    bf16_graphed_step,
    feed_model,
    model_ceiling,
    model_step_factory,
    moonshot_feeds,
)
from datajourney.chapters.c08_threads_processes_gil.paper import (  # noqa: F401
    decomposition,
    free_threaded_check,
    paper_plan_size,
    run_paper,
)
from datajourney.chapters.c08_threads_processes_gil.params import SCALED, Params, scaled
from datajourney.chapters.c08_threads_processes_gil.primitives import (  # noqa: F401
    _pool_init,
    _warm,
    load_batch,
    primitive_images_at,
    primitive_point,
    primitives,
    torch_threads,
)
from datajourney.core import timing
from datajourney.core.params import MAX_IMAGES
from datajourney.toolkit import datasets, models


def decoder_status() -> dict[str, tuple[bool, str]]:
    return {"pillow": (True, "Pillow " + _version("pillow")), "spdl": ffmpeg_status(),
            "torchvision": torchvision_status()}


def _error(what: str, e: BaseException) -> dict:
    """A failed measurement, recorded (and shown by the chapter) instead of stopping the run."""
    text = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    return dict(what=what, error=text)


# --------------------------------------------------------------------------- parameters
def free_threading() -> dict:
    build = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return dict(free_threaded_build=build, gil_enabled=bool(gil), python=sys.version.split()[0])


def auto_concurrency(cores: int) -> list[int]:
    """1, 2, 4, ... up to the cores, and twice the cores (beyond them)."""
    out, c = [], 1
    while c < cores:
        out.append(c)
        c *= 2
    return sorted(set(out + [cores, 2 * cores]))


def loader_windows(q: dict) -> list[tuple[str, int, int, int]]:
    """(loader, concurrency, batches skipped, batches timed) of every end-to-end configuration."""
    out = []
    for kind in q["loaders"]:
        for c in q["dataloader_workers"] if kind == "dataloader" else q["thread_concurrency"]:
            f = in_flight(kind, c, batch_size=q["batch_size"], prefetch_factor=q["prefetch_factor"])
            out.append((kind, c, max(q["warm_batches"], f),
                        timed_batches(kind, c, q["loader_batches"], batch_size=q["batch_size"],
                                      prefetch_factor=q["prefetch_factor"], factor=q["window_factor"])))
    return out


def plan_loaders(p: dict, *, gpu_decode: bool) -> list[tuple[str, int, str | None, int]]:
    """(loader, concurrency, decoder, repeat) of the end-to-end runs, repeats interleaved: the
    DataLoader's sweep (decoder None: chosen from the primitive sweep, :func:`dataloader_decoder_choice`),
    each thread loader with each of ``thread_decoders``, the collate check (the SPDL pipeline with
    Pillow at the most threads, decoding into its batch's rows) and GPU decoding alone."""
    plan = []
    for r in range(p["repeats"]):
        for kind in p["loaders"]:
            if kind == "dataloader":
                plan += [(kind, c, None, r) for c in p["dataloader_workers"]]
            else:
                plan += [(kind, c, d, r) for d in p["thread_decoders"] for c in p["thread_concurrency"]]
        if p["collate_check"] and "spdl" in p["loaders"] and "pillow" in p["thread_decoders"]:
            plan.append(("spdl_prealloc", max(p["thread_concurrency"]), "pillow", r))
        if gpu_decode:  # GPU decoding as a loader alone, no model
            plan.append(("nvjpeg", p["read_threads"], None, r))
    return plan


def dataloader_decoder_choice(prim: pd.DataFrame, param) -> dict:
    """The DataLoader's decoder: ``param``, or ("auto") the decoder whose process pool peaked highest
    in the primitive sweep (means over repeats), with the peaks it was chosen from."""
    peaks = {}
    if not prim.empty and "process" in set(prim["executor"]):
        m = prim[prim["executor"] == "process"].groupby(["decoder", "concurrency"])["images_per_s"].mean()
        peaks = {str(d): float(g.max()) for d, g in m.groupby(level=0)}
    if param != "auto":
        return dict(decoder=param, how="parameter", peaks=peaks)
    if not peaks:
        return dict(decoder="pillow", how="no_process_sweep", peaks=peaks)
    return dict(decoder=max(peaks, key=peaks.get), how="auto", peaks=peaks)


def dali_status() -> dict:
    """Whether NVIDIA DALI imports here (the chapter does not measure it either way)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:
        found = False
    return dict(installed=found)


def runnable(name: str, value, decoders) -> None:
    """A :class:`ParameterError` naming ``name`` when one of ``decoders`` cannot run on this machine."""
    from datajourney.core.params import ParameterError, requires

    if "spdl" in decoders:
        requires(name, value, "spdl.io", "spdl (pip install spdl)")
    for d, status in (("spdl", ffmpeg_status), ("torchvision", torchvision_status)):
        if d in decoders:
            ok, why = status()
            if not ok:
                raise ParameterError(name, value, f"decoders this machine can run ({why})")


def resolve(params) -> dict:
    """The parameters as ``measure`` runs with them: every declared range checked (:meth:`Params.checked`), then
    what the declarations cannot express — limits that depend on this machine's cores, memory, decoders and
    libraries, checks that span fields (windows that fit the data set, batches that fit in memory) — and each
    "auto" resolved for this machine. A :class:`ParameterError` names the first bad parameter."""
    from datajourney.core.params import ParameterError, requires
    from datajourney.core.params import memory as mem

    p = Params.coerce(params).checked()
    q = p.as_dict()
    cores = len(os.sched_getaffinity(0))
    lim = min(MAX_CONCURRENCY, max(16, 8 * cores))

    def upto(name: str, values, low: int = 1) -> list[int]:
        if any(v < low or v > lim for v in values):
            raise ParameterError(name, values, f"a list of integers from {low} to {lim}")
        return list(values)

    if p.primitive_images < p.primitive_batch:
        raise ParameterError("primitive_images", p.primitive_images,
                             f"at least one batch (primitive_batch = {p.primitive_batch})")
    for name in ("concurrency", "dataloader_workers", "thread_concurrency"):
        v = getattr(p, name)
        auto = (auto_concurrency(cores) if name == "concurrency"
                else [c for c in auto_concurrency(cores) if c <= min(cores, AUTO_LOADER_MAX)])
        q[name] = auto if v == "auto" else scaled(v, cores) if v in SCALED else upto(name, v)
    status = None
    if p.decoders == "auto":
        status = decoder_status()
        q["decoders"] = [d for d in DECODERS if status[d][0]]
    else:
        runnable("decoders", p.decoders, p.decoders)
    if "spdl" in p.loaders:
        requires("loaders", p.loaders, "spdl.pipeline", "spdl (pip install spdl)")
        if torch.cuda.is_available():  # its last stage copies to the GPU with spdl.io's transfer_tensor
            requires("loaders", p.loaders, "spdl.io", "spdl-io (pip install spdl)")
    if p.thread_decoders == "auto":
        q["thread_decoders"] = ["spdl", "pillow"] if (status or decoder_status())["spdl"][0] else ["pillow"]
    else:
        runnable("thread_decoders", p.thread_decoders, p.thread_decoders)
    if p.dataloader_decoder != "auto":
        runnable("dataloader_decoder", p.dataloader_decoder, [p.dataloader_decoder])
    plan = loader_windows(q)
    k, c, warm, timed = max(plan, key=lambda t: t[2] + t[3]) if plan else ("dataloader", 0, 0, 0)
    if p.n_images == "auto":  # the fewest images every window needs on this host (the model-fed ones added below)
        q["n_images"] = max((warm + timed + 1) * q["batch_size"], p.primitive_images, p.gil_images)
    if plan and (warm + timed + 1) * q["batch_size"] > q["n_images"]:
        raise ParameterError("n_images", q["n_images"],
                             f"at least {(warm + timed + 1) * q['batch_size']}: {LABELS[k]} at {c} skips {warm} "
                             f"batches (those in flight) and times {timed} (loader_batches = {q['loader_batches']}, "
                             f"at least window_factor = {q['window_factor']} times those in flight, whole waves), "
                             f"each of batch_size = {q['batch_size']} distinct images (or lower window_factor)")
    upto("startup_workers", p.startup_workers)
    mem("startup_paths", max(p.startup_paths or [0]), max(p.startup_paths or [0]) * 200 * (2 + max(
        p.startup_workers or [0])), what="path lists in every process")
    q["epoch_workers"] = max(q["dataloader_workers"]) if p.epoch_workers == "auto" else upto(
        "epoch_workers", [p.epoch_workers])[0]
    if p.memory_interval_s <= 0:
        raise ParameterError("memory_interval_s", p.memory_interval_s, "a number > 0 and <= 60")
    if p.epoch_paths:
        requires("epoch_paths", p.epoch_paths, "spdl.pipeline", "spdl (pip install spdl)")
        mem("epoch_paths", p.epoch_paths, p.epoch_paths * 200 * (2 + q["epoch_workers"]),
            what="path lists in every process")
    if any(b < 1 or b > 4096 for b in p.ipc_batch_sizes):
        raise ParameterError("ipc_batch_sizes", p.ipc_batch_sizes, "a list of integers from 1 to 4096")
    upto("ipc_workers", p.ipc_workers, 0)
    if p.ipc_batch_sizes and 0 not in p.ipc_workers:
        raise ParameterError("ipc_workers", p.ipc_workers, "a list that includes 0 (the baseline without IPC)")
    if p.free_threaded is True and free_threading()["gil_enabled"]:
        raise ParameterError("free_threaded", p.free_threaded, "false or \"auto\" on this interpreter: it runs with "
                             "the GIL (run the chapter with a free-threaded Python such as python3.13t)")
    if p.paper is True:
        requires("paper", p.paper, "spdl.pipeline", "spdl (pip install spdl)")
        runnable("paper", p.paper, ["spdl"])
    if p.paper_workers != "auto":
        upto("paper_workers", [p.paper_workers])

    q["paper_configs"] = paper_configs(p.paper_configs, batch_size=p.batch_size, lim=lim)
    if p.n_images == "auto" and p.paper is not False:  # the SPDL question's windows fit too, none lowered, and
        # the end-to-end window at whichever of its settings the sweep finds best
        q["n_images"] = max(q["n_images"], _paper_images(q, cores))
        b = q["batch_size"]
        want = cores if q["paper_workers"] == "auto" else int(q["paper_workers"])
        configs = paper.auto_configs(cores, b) if q["paper_configs"] == "auto" else q["paper_configs"]
        model = p.moonshot is not False
        q["n_images"] = max([q["n_images"]] + [batch_pipeline_images(q, c, k, model=model)
                                               for k, c, _ in [*configs, (b, want, 0)]])
    if p.moonshot is True and not torch.cuda.is_available():
        raise ParameterError("moonshot", p.moonshot, 'false or "auto" on a machine without a CUDA GPU')
    if p.model == "resnet50" and p.moonshot is True and torch.cuda.is_available():  # "auto" skips without it
        requires("model", "resnet50", "torchvision", "torchvision (pip install torchvision)")
    upto("read_threads", [p.read_threads])
    model_windows(p, q, plan)
    for name in ("primitive_images", "gil_images"):
        if getattr(p, name) > q["n_images"]:
            raise ParameterError(name, getattr(p, name), f"an integer from 1 to {q['n_images']:,} (n_images)")
    if q["n_images"] > MAX_IMAGES:
        raise ParameterError("n_images", p.n_images, f"at most {MAX_IMAGES:,}: this host's windows need "
                             f"{q['n_images']:,} images (lower window_factor or loader_batches)")
    w_max = max(q["dataloader_workers"])
    batch_bytes = p.batch_size * 3 * p.out_size ** 2
    mem("batch_size", p.batch_size, (p.prefetch_factor * w_max + 8) * batch_bytes + 2 * w_max * (200 << 20),
        what=f"{p.prefetch_factor * w_max + 8} uint8 batches in flight and {w_max} worker processes")
    return q


def model_windows(p: Params, q: dict, plan: list[tuple[str, int, int, int]]) -> None:
    """The model-fed windows: "auto" sizes the data set (``q["n_images"]``) for them wherever they may run (the
    same data set on a GPU host and off it); a fixed n_images is checked against them where they run."""
    from datajourney.core.params import ParameterError

    gpu = torch.cuda.is_available()
    if p.moonshot is not False and (gpu or p.n_images == "auto"):
        model_plan = [(k, c, w, t) for k, c, w, t in plan if k != "nvjpeg"]
        if "dataloader" in p.loaders and (not gpu or torchvision_status()[0]):  # the hybrid, at the most workers
            model_plan.append(("hybrid", max(q["dataloader_workers"]), 0, 0))
        for k, c, _, _ in model_plan:
            warm = max(p.model_warmup, in_flight(k, c, batch_size=p.batch_size, prefetch_factor=p.prefetch_factor))
            timed = timed_batches(k, c, p.model_steps, batch_size=p.batch_size,
                                  prefetch_factor=p.prefetch_factor, factor=p.window_factor)
            if p.n_images == "auto":
                q["n_images"] = max(q["n_images"], (warm + timed + 1) * p.batch_size)
            if (warm + timed + 1) * p.batch_size > q["n_images"]:
                raise ParameterError("model_steps", p.model_steps,
                                     f"a model-fed window that fits n_images = {q['n_images']}: {LABELS[k]} at {c} "
                                     f"skips {warm} batches and times {timed} (whole waves, at least window_factor "
                                     "times those in flight)")


def batch_pipeline_images(q: dict, concurrency: int, images_per_task: int, *, model: bool) -> int:
    """The images the end-to-end window of the batch-decode pipeline needs at this setting (the loaders' rule:
    ``window_factor``, whole waves), and its model-fed window where ``model``."""
    b = q["batch_size"]
    f = in_flight("spdl_batch", concurrency, batch_size=b, images_per_task=images_per_task)
    out = 0
    for skip, batches in ((q["warm_batches"], q["loader_batches"]),) + (((q["model_warmup"], q["model_steps"]),)
                                                                          if model else ()):
        t = timed_batches("spdl_batch", concurrency, batches, batch_size=b, factor=q["window_factor"],
                          images_per_task=images_per_task)
        out = max(out, (max(skip, f) + t + 1) * b)
    return out


def end_to_end_choice(paper_out: dict | None, skipped, *, n_images: int, q: dict, model: bool) -> dict:
    """The end-to-end comparison's thread setting: the one the SPDL sweep chose (``paper_out["best"]``, picked once by
    :func:`.paper.run_paper` and confirmed there by fresh runs: images per task, concurrency, threads, with the rates
    it was chosen from), ``how`` = "sweep_best"; or why there is none (``how`` = "no_sweep" with the reason, "no_fit"
    when its windows need more images than the data set holds)."""
    if paper_out is None:
        return dict(how="no_sweep", why=skipped or "off")
    best = paper_out.get("best")
    if best is None:
        return dict(how="no_sweep", why="no_rows")
    need = batch_pipeline_images(q, best["concurrency"], best["images_per_task"], model=model)
    return dict(best, how="sweep_best" if need <= n_images else "no_fit", images_needed=need)


def _paper_images(q: dict, cores: int) -> int:
    """The images the SPDL question's largest window needs (its DataLoader, its pipeline and its sweep)."""
    b = q["batch_size"]
    win = dict(batch_size=b, batches=q["loader_batches"], factor=q["paper_window_factor"],
               prefetch_factor=q["prefetch_factor"], warm_batches=q["warm_batches"])
    want = cores if q["paper_workers"] == "auto" else int(q["paper_workers"])
    configs = paper.auto_configs(cores, b) if q["paper_configs"] == "auto" else q["paper_configs"]
    levels = [("dl_pillow", want, 0), ("spdl_batch", want, b), *(("spdl_batch", c, k) for k, c, _ in configs)]
    return max((sum(paper.paper_window(kind, c, images_per_task=k, **win)) + 1) * b for kind, c, k in levels)


def paper_configs(pc, *, batch_size: int, lim: int):
    """``paper_configs``: "auto", or a list of [images per task, concurrency, threads] with images per task
    dividing ``batch_size`` and concurrency and threads from 1 to ``lim``."""
    from datajourney.core.params import ParameterError

    if pc == "auto":
        return pc
    ok = isinstance(pc, (list, tuple)) and bool(pc) and all(
        isinstance(c, (list, tuple)) and len(c) == 3 and all(isinstance(v, int) and not isinstance(v, bool)
                                                             for v in c)
        and 1 <= c[0] <= batch_size and batch_size % c[0] == 0 and 1 <= c[1] <= lim and 1 <= c[2] <= lim
        for c in pc)
    if not ok:
        raise ParameterError("paper_configs", pc, '"auto" or a list of [images per task, concurrency, threads]: '
                             f"images per task dividing batch_size = {batch_size}, concurrency and threads from 1 "
                             f"to {lim}")
    return [[int(v) for v in c] for c in pc]


@dataclass
class Plan:
    """What preflight found: the checked parameters, the settings ``measure`` runs with (every "auto" resolved
    for this machine) and the directory the data set goes under."""

    params: Params
    settings: dict
    data_dir: Path
    #: with ``image_dir``: the reader's images, read instead of generated photos
    images: object = None


def preflight(params, *, run_dir=None) -> Plan:
    """Every declared range, then what spans fields or depends on this machine (:func:`resolve`), the output
    directory and the data directory's free space."""
    from datajourney.core import results
    from datajourney.core.params import creatable_dir, run_options

    opts = run_options(dict(params)) if not isinstance(params, Params) else {}
    p = Params.coerce(params).checked()
    q = resolve(p)
    creatable_dir("run_dir", results.resolve_run_dir(run_dir if run_dir is not None else opts.get("run_dir")))
    if p.image_dir is not None:   # the reader's images, checked before any work; nothing to generate
        from datajourney.toolkit import yourdata

        parent = datasets.parent_dir(p.data_dir)
        return Plan(p, q, parent, yourdata.images(p.image_dir, q["n_images"], seed=p.seed, data_dir=parent))
    plan = photo_plan(q["n_images"], p.width, p.height, p.jpeg_quality, p.classes, p.seed)
    return Plan(p, q, datasets.check_space(p.data_dir, [plan]))


# --------------------------------------------------------------------------- the chapter
@dataclass
class _Run:
    """What the sections of one run share: the settings, the images, where the run measures, the random order of
    its cold reads, its progress bar, and what it records across sections (errors, purge methods, loader rows)."""

    p: dict
    device: str
    cores: int
    status: dict
    files: list[str] = field(default_factory=list)
    rng: np.random.Generator | None = None
    bar: object = None
    errors: list[dict] = field(default_factory=list)
    purge_methods: set[str] = field(default_factory=set)
    loader_rows: list[dict] = field(default_factory=list)
    stage_rows: list[dict] = field(default_factory=list)

    def purge(self, paths) -> float:
        """Evict ``paths`` from the page cache (the method used recorded); the share still resident after."""
        from datajourney.toolkit import pagecache

        pr = pagecache.purge(paths, self.p["purge_method"])
        self.purge_methods.add(pr.method)
        return pr.after["fraction"]

    def loader(self, kind: str, c: int, dec, r: int, shape: dict | None = None) -> None:
        """One end-to-end run from cold files into the loader rows (``shape``: the batch-decode pipeline's)."""
        p, files = self.p, self.files
        k = int(shape["images_per_task"]) if shape else 0
        warm = max(p["warm_batches"], in_flight(kind, c, batch_size=p["batch_size"],
                                                prefetch_factor=p["prefetch_factor"], images_per_task=k))
        timed = timed_batches(kind, c, p["loader_batches"], batch_size=p["batch_size"],
                              prefetch_factor=p["prefetch_factor"], factor=p["window_factor"], images_per_task=k)
        n_used = (warm + timed + 1) * p["batch_size"]
        order = self.rng.permutation(len(files))[:n_used].tolist()
        resident = self.purge([files[i] for i in order])
        stages = SpdlStages() if kind in ("spdl", "spdl_prealloc", "spdl_batch") else None
        mk = make_loader(kind, files, order, batch_size=p["batch_size"], out_size=p["out_size"], concurrency=c,
                         decoder=dec, device=self.device, prefetch_factor=p["prefetch_factor"], stages=stages,
                         shape=shape)
        try:
            row = measure_loader(mk, batches=timed, warm=warm, device=self.device, stages=stages)
        except Exception as e:
            self.errors.append(_error(f"{LABELS[kind]}, concurrency {c}, {dec}", e))
        else:
            self.stage_rows.extend(dict(loader=kind, concurrency=c, decoder=dec, repeat=r, **st)
                                   for st in row.pop("stages", []))
            extra = dict(images_per_task=k, threads=int(shape["threads"])) if shape else {}
            self.loader_rows.append(dict(loader=kind, concurrency=c, repeat=r, decoder=dec, warm=warm,
                                         resident_at_start=resident, **extra, **row))
        self.bar.update(1)


def _data_set(plan: Plan, res, progress):
    """The images: the reader's (read where they lie, described in the metadata) or the generated photos."""
    p = plan.settings
    if plan.images is not None:
        plan.images.recheck()
        src = plan.images.labelled(p["classes"])
        res.metadata["your_data"] = src.describe()
        return src
    return photo_set(plan.data_dir, n_images=p["n_images"], width=p["width"], height=p["height"],
                     quality=p["jpeg_quality"], classes=p["classes"], seed=p["seed"], progress=progress)


def _calibration(p: dict, files: list[str]) -> list[dict]:
    """One image's decode and resize cost on one core, per decoder (medians over up to 32 images)."""
    calib = []
    sample = _read(files[0])
    for d in p["decoders"]:
        decode_one(d, sample, p["out_size"])
        reps = []
        for i in range(min(32, len(files))):
            data = _read(files[i])
            t = dict.fromkeys(OPS, 0.0)
            decode_one(d, data, p["out_size"], t)
            reps.append((t["decode"], t["resize"]))
        calib.append(dict(decoder=d, decode_ms=float(np.median([r[0] for r in reps])),
                          resize_ms=float(np.median([r[1] for r in reps]))))
    return calib


def _points(p: dict, loader_plan: list, paper_skipped) -> int:
    """The measurements the progress bar counts: every section's points before the model-fed runs."""
    n_prim = p["repeats"] * len(p["decoders"]) * len(p["executors"]) * len(p["concurrency"])
    n_start = len(p["start_methods"]) * len(p["startup_workers"]) * len(p["startup_paths"])
    n_ipc = len(p["ipc_batch_sizes"]) * len(p["ipc_workers"])
    n_epoch = 2 * len(PATH_STORAGE) if p["epoch_paths"] else 0
    n_paper = 0 if paper_skipped else paper_plan_size(p) + p["repeats"]
    return n_prim + len(loader_plan) + n_start + n_epoch + n_ipc + n_paper


def _startup(run: _Run) -> list[dict]:
    """The DataLoader's time to first batch: workers × start method × size of the Dataset object."""
    p, rows = run.p, []
    for m in p["start_methods"]:
        if m == "forkserver" and p["startup_workers"]:  # untimed: the server starts once, with the first
            startup_point(1, m, 0)
        for w in p["startup_workers"]:
            for n in p["startup_paths"]:
                try:
                    rows.append(startup_point(w, m, n))
                except Exception as e:
                    run.errors.append(_error(f"start-up, {m}, {w} workers, {n} paths", e))
                run.bar.update(1)
    _paths_dataset.cache_clear()
    return rows


def _epoch_memory(run: _Run) -> tuple[list[dict], list[dict]]:
    """The memory of every process over a whole epoch of a Dataset holding ``epoch_paths`` paths as a list or an
    array, in DataLoader workers and in pipeline threads: one row per epoch, and the samples over time."""
    p, epoch_rows, memory_rows = run.p, [], []
    for loader in ("dataloader", "spdl") if p["epoch_paths"] else ():
        for storage in PATH_STORAGE:
            try:
                row, samples = epoch_point(loader, storage, p["epoch_paths"], workers=p["epoch_workers"],
                                           batch_size=p["epoch_batch_size"], interval=p["memory_interval_s"],
                                           seed=p["seed"])
            except Exception as e:
                run.errors.append(_error(f"epoch, {LABELS[loader]}, paths in a {storage}", e))
            else:
                epoch_rows.append(row)
                memory_rows += samples
            run.bar.update(1)
    return epoch_rows, memory_rows


def _ipc(run: _Run) -> list[dict]:
    """The cost of moving a batch from a worker process to the main process, per batch size and workers."""
    p, rows = run.p, []
    for bs in p["ipc_batch_sizes"]:
        for w in p["ipc_workers"]:
            try:
                rows.append(ipc_point(bs, w, p["out_size"], batches=max(8, min(40, 4096 // bs))))
            except Exception as e:
                run.errors.append(_error(f"IPC, batch {bs}, {w} workers", e))
            run.bar.update(1)
    return rows


def _paper(run: _Run) -> tuple[dict | None, str | None]:
    """The SPDL question (:func:`run_paper`); its output, or None and "error" when it failed."""
    try:
        return run_paper(run.files, params=run.p, device=run.device, rng=run.rng, purge=run.purge, cores=run.cores,
                         decoders=[d for d in ("pillow", "spdl") if run.status[d][0]], progress=run.bar), None
    except Exception as e:
        run.errors.append(_error("the SPDL question", e))
        return None, "error"


def _end_to_end(run: _Run, paper_out, paper_skipped, lap) -> dict:
    """A declared step: the end-to-end comparison's thread pipeline at the SPDL sweep's best setting (read from
    the rows just measured), from cold files like the loaders; the model-fed runs take it too."""
    p = run.p
    e2e = end_to_end_choice(paper_out, paper_skipped, n_images=len(run.files), q=p,
                            model=p["moonshot"] is not False and run.device == "cuda")
    if e2e["how"] == "sweep_best":
        for r in range(p["repeats"]):
            run.loader("spdl_batch", e2e["concurrency"], "spdl", r, shape=e2e)
        lap("end-to-end at sweep's best")
    return e2e


def _model_step(run: _Run, net, opt, ceilings: dict):
    """The model's step (CUDA-graphed where ``model_step`` asks and the capture works, else eager), with the
    ceiling of each step measured into ``ceilings``; (step function, its kind, the graph's note)."""
    p = run.p
    run_steps, step_kind, graph_note = model_step_factory(net, opt, run.device), "eager", None
    cargs = dict(batch_size=p["batch_size"], out_size=p["out_size"], classes=p["classes"], device=run.device,
                 steps=p["model_steps"], warmup=p["model_warmup"])
    try:
        ceilings["eager"] = model_ceiling(net, opt, run_steps, **cargs)
    except Exception as e:
        run.errors.append(_error("model ceiling", e))
    if p["model_step"] == "graphed":
        graph, graph_note = bf16_graphed_step(net, batch_size=p["batch_size"], out_size=p["out_size"],
                                              classes=p["classes"], device=run.device)
        if graph is not None:
            graphed = model_step_factory(net, opt, run.device, graph=graph)
            try:
                ceilings["graphed"] = model_ceiling(net, opt, graphed, **cargs)
                run_steps, step_kind = graphed, "graphed"
            except Exception as e:
                run.errors.append(_error("graphed model ceiling", e))
                graph_note = "failed: " + run.errors[-1]["error"]
    return run_steps, step_kind, graph_note


def _model_runs(run: _Run, feeds, run_steps, ceiling: dict | None, step_kind: str, e2e: dict) -> list[dict]:
    """The model fed by each feed from cold files, repeats interleaved; each against the model's ceiling."""
    from datajourney.toolkit import pagecache

    p, files, rows = run.p, run.files, []
    for r in range(p["repeats"] if ceiling else 0):
        for kind, c, f_nice, share, dec in feeds:
            shape = e2e if kind == "spdl_batch" else None
            k = int(e2e["images_per_task"]) if shape else 0
            warm = max(p["model_warmup"], in_flight(kind, c, batch_size=p["batch_size"],
                                                    prefetch_factor=p["prefetch_factor"], images_per_task=k))
            steps = timed_batches(kind, c, p["model_steps"], batch_size=p["batch_size"],
                                  prefetch_factor=p["prefetch_factor"], factor=p["window_factor"],
                                  images_per_task=k)
            n_model = (warm + steps + 1) * p["batch_size"]
            order = run.rng.permutation(len(files))[:n_model].tolist()
            pr = pagecache.purge([files[i] for i in order], p["purge_method"])
            mk = make_loader(kind, files, order, batch_size=p["batch_size"], out_size=p["out_size"],
                             concurrency=c, decoder=dec, device=run.device,
                             prefetch_factor=p["prefetch_factor"], nice=f_nice, share=share or 0.0, shape=shape)
            try:
                row = feed_model(mk, run_steps, steps=steps, warmup=warm,
                                 classes=p["classes"])
            except Exception as e:
                run.errors.append(_error(f"model fed by {LABELS[kind]}, concurrency {c}"
                                         + (f", nice {f_nice}" if f_nice else "")
                                         + (f", CPU share {share:.2f}" if share is not None else ""), e))
                continue
            rows.append(dict(loader=kind, concurrency=c, decoder=dec, repeat=r, warm=warm, steps=steps,
                             **(dict(images_per_task=k, threads=int(shape["threads"])) if shape else {}),
                             nice=f_nice, share=share, step=step_kind,
                             resident_at_start=pr.after["fraction"],
                             pct_of_ceiling=100 * row["images_per_s"] / ceiling["images_per_s"], **row))
    return rows


def _moonshot(run: _Run, lo: pd.DataFrame, e2e: dict, lap) -> dict:
    """The model (bf16, channels_last) fed by the best DataLoader, the best thread pipeline, GPU decoding, niced
    workers and the hybrid, each against its ceiling; or why it did not run (``why``)."""
    p, status = run.p, run.status
    nice = p["model_worker_nice"]
    out = dict(rows=[], ceiling=None, ceilings={}, step="eager", graph_note=None, why=None,
               hybrid=dict(share=None, how=None, cpu_rate=None, ceiling=None, workers=None, nice=nice, skipped=None))
    if p["moonshot"] is False:
        out["why"] = "off"
    elif run.device != "cuda":
        out["why"] = "no_gpu"
    elif p["model"] == "resnet50" and not status["torchvision"][0]:
        out["why"] = "torchvision: " + status["torchvision"][1]
    else:
        torch.manual_seed(p["seed"])
        torch.backends.cudnn.benchmark = True
        net = models.make_model(p["model"], p["classes"]).to(run.device, memory_format=torch.channels_last)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        run_steps, out["step"], out["graph_note"] = _model_step(run, net, opt, out["ceilings"])
        ceiling = out["ceiling"] = out["ceilings"].get(out["step"])
        if ceiling is None:
            out["why"] = "no_ceiling: " + run.errors[-1]["error"]
        feeds = moonshot_feeds(lo, ceiling, tv=status["torchvision"], nice=nice, read_threads=p["read_threads"],
                               share=p["hybrid_share"], hybrid=out["hybrid"])
        out["rows"] = _model_runs(run, feeds, run_steps, ceiling, out["step"], e2e)
        lap("moonshot")
    if out["hybrid"]["share"] is None and out["hybrid"]["skipped"] is None:
        out["hybrid"]["skipped"] = "no_moonshot"
    return out


def measure(plan: Plan, context) -> None:
    """Run chapter 8 into the started result (its tables and metadata), with the settings preflight resolved."""
    from tqdm import tqdm

    p, res = plan.settings, context.result
    lap = timing.Laps()
    run = _Run(p, cores=len(os.sched_getaffinity(0)), device="cuda" if torch.cuda.is_available() else "cpu",
               status=decoder_status())
    src = _data_set(plan, res, context.progress)
    run.files = [str(f) for f in src.files]
    sizes = np.array([os.path.getsize(f) for f in run.files])
    lap("data set")

    calib = _calibration(p, run.files)
    ft = free_threading()
    loader_plan = plan_loaders(p, gpu_decode=run.device == "cuda" and run.status["torchvision"][0])
    paper_skipped = ("off" if p["paper"] is False else None if run.status["spdl"][0] else "spdl")
    run.bar = tqdm(total=_points(p, loader_plan, paper_skipped), desc="chapter 8", disable=not context.progress)
    with run.bar:
        prim, ops = primitives(src, decoders=p["decoders"], executors=p["executors"], concurrency=p["concurrency"],
                               n_images=p["primitive_images"], batch_size=p["primitive_batch"],
                               out_size=p["out_size"], repeats=p["repeats"], progress=run.bar)
        lap("primitives")
        dl_dec = dataloader_decoder_choice(prim, p["dataloader_decoder"])
        run.rng = np.random.default_rng(p["seed"])
        for kind, c, dec, r in loader_plan:
            run.loader(kind, c, dec or dl_dec["decoder"], r)
        lap("loaders")
        start_rows = _startup(run)
        lap("start-up")
        epoch_rows, memory_rows = _epoch_memory(run)
        lap("epoch memory")
        ipc_rows = _ipc(run)
        lap("ipc")
        paper_out = None
        if not paper_skipped:
            paper_out, paper_skipped = _paper(run)
            lap("paper")
        e2e = _end_to_end(run, paper_out, paper_skipped, lap)

    lo = pd.DataFrame(run.loader_rows)
    moon = _moonshot(run, lo, e2e, lap)
    ceiling = moon["ceiling"]
    tables = dict(calibration=pd.DataFrame(calib), primitives=prim, ops=ops, loaders=lo,
                  spdl_stages=pd.DataFrame(run.stage_rows), startup=pd.DataFrame(start_rows),
                  epoch=pd.DataFrame(epoch_rows), epoch_memory=pd.DataFrame(memory_rows), ipc=pd.DataFrame(ipc_rows),
                  model=pd.DataFrame(moon["rows"]))
    for name, key in (("paper", "comparison"), ("paper_sweep", "sweep"), ("paper_confirm", "confirm"),
                      ("paper_stages", "stages"), ("gil_held", "gil_held")):
        tables[name] = pd.DataFrame(paper_out[key] if paper_out else [])
    for name, table in tables.items():
        res.add(name, table)
    res.metadata.update(
        device=run.device, cores=run.cores, decoders={k: {"ok": v[0], "note": v[1]} for k, v in run.status.items()},
        decoders_run=p["decoders"], concurrency=p["concurrency"], free_threading=ft,
        free_threaded_note=None if not ft["gil_enabled"] else "gil_enabled",
        image_bytes=dict(mean=float(sizes.mean()), min=int(sizes.min()), max=int(sizes.max()),
                         total=int(sizes.sum())),
        image_size=[p["width"], p["height"]] if plan.images is None else
        [round(res.metadata["your_data"]["median_width"]), round(res.metadata["your_data"]["median_height"])],
        purge_methods=sorted(run.purge_methods),
        ceiling=ceiling, ceilings=moon["ceilings"], model_step=moon["step"] if ceiling else None,
        graph_note=moon["graph_note"], model=p["model"] if ceiling else None, moonshot_note=moon["why"],
        errors=run.errors, model_worker_nice=p["model_worker_nice"], hybrid=moon["hybrid"],
        dataloader_decoder=dl_dec, dali=dali_status(),
        window_rule=dict(factor=p["window_factor"], whole_waves=True, threadpool="per image"), seconds=lap.seconds,
        torch_threads=torch.get_num_threads(), datasets={"photos": src.manifest},
        paper=paper_out["meta"] if paper_out else None, paper_skipped=paper_skipped, end_to_end_threads=e2e,
        free_threaded_check=free_threaded_check())
