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

import functools
import hashlib
import io
import math
import os
import pickle
import queue
import sys
import sysconfig
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from datajourney.chapters.c08_threads_processes_gil.params import Params
from datajourney.core import timing
from datajourney.toolkit import datasets, images, models

CHAPTER = "08_threads_processes_gil"
DECODERS = ("pillow", "spdl", "torchvision")
EXECUTORS = ("thread", "process")
LOADERS = ("dataloader", "spdl", "threadpool")
START_METHODS = ("fork", "forkserver", "spawn")
OPS = ("read", "decode", "resize", "batch")
LABELS = {"dataloader": "DataLoader", "spdl": "SPDL pipeline", "spdl_prealloc": "SPDL pipeline, no collate copy",
          "threadpool": "thread pool", "nvjpeg": "GPU decode (nvJPEG)", "hybrid": "DataLoader + nvJPEG"}
#: The loaders that run in threads of one process.
THREADED = ("spdl", "spdl_prealloc", "threadpool")
MAX_CONCURRENCY = 256
#: "auto" loader sweeps stop at the cores or here, whichever is lower, so that the batches the
#: deepest loader keeps in flight (skipped before timing) fit in the default data set.
AUTO_LOADER_MAX = 16
#: A timed window holds at least this many times the batches the loader has in flight (whole waves).
WINDOW_FACTOR = 4
#: The automatic CPU share of the hybrid feed uses this part of the CPU loaders' measured rate (the
#: rest is headroom for the main process's thread and the copy to the GPU).
HYBRID_HEADROOM = 0.8
#: The automatic share is rounded to this step.
HYBRID_STEP = 0.05
#: How the model-fed runs step the model: replayed from CUDA graphs (falling back to eager, with the
#: reason, where the capture fails) or launched op by op from Python.
MODEL_STEPS = ("graphed", "eager")
#: Batches the GPU-decoding feeds keep ready on their side stream.
GPU_QUEUE_DEPTH = 3


# --------------------------------------------------------------------------- data
def photo_jpeg(seed: int, index: int, width: int = 500, height: int = 375, quality: int = 92) -> bytes:
    """One photo-like JPEG: a smooth 1/f colour field (the spectrum of natural images) with a few
    hard-edged discs (objects) and light sensor noise. Depends only on (seed, index), for a given NumPy
    (its FFTs keep float32 from 2.0 on). Drawn in float32, each disc only inside its bounding box,
    which makes the data set quicker to generate (it counts in the chapter's wall time)."""
    from PIL import Image

    rng = np.random.default_rng([seed, index, 8])
    fy = np.fft.fftfreq(height).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(width).astype(np.float32)[None, :]
    f = np.sqrt(fx ** 2 + fy ** 2)
    f[0, 0] = 1.0
    amp = f ** np.float32(-rng.uniform(1.0, 1.3))
    amp[0, 0] = 0.0
    shape = (2, height, width // 2 + 1)

    def complex_normal():
        z = rng.standard_normal(shape, dtype=np.float32)
        return z[0] + 1j * z[1]

    base = complex_normal()
    img = np.empty((height, width, 3), np.float32)
    for k in range(3):
        z = np.float32(0.8) * base + np.float32(0.6) * complex_normal()
        c = np.fft.irfft2(z * amp, s=(height, width))
        img[..., k] = (c - c.mean()) / (c.std() + 1e-9)
    img = img * np.float32(rng.uniform(35, 60)) + rng.uniform(70, 180, size=3).astype(np.float32)
    for _ in range(int(rng.integers(2, 6))):
        cy, cx, r = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(20, 120)
        blend_disc(img, cy, cx, r, rng.uniform(0, 255, size=3).astype(np.float32))
    img += rng.standard_normal(img.shape, dtype=np.float32) * np.float32(3)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def blend_disc(img: np.ndarray, cy: float, cx: float, r: float, colour: np.ndarray) -> None:
    """Blend ``colour`` half into the pixels of ``img`` (H x W x 3) whose centres lie inside the disc,
    touching only the disc's bounding box."""
    height, width = img.shape[:2]
    y0, x0 = max(0, int(cy - r)), max(0, int(cx - r))
    yy, xx = np.ogrid[y0:min(height, int(cy + r) + 1), x0:min(width, int(cx + r) + 1)]
    box = img[y0:y0 + yy.shape[0], x0:x0 + xx.shape[1]]
    m = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
    box[m] = box[m] * 0.5 + colour * 0.5


def photo_plan(n_images: int, width: int, height: int, quality: int, classes: int, seed: int):
    from datajourney.core.params import ParameterError, positive_int

    positive_int("n_images", n_images, maximum=images.MAX_IMAGES)
    positive_int("width", width, maximum=8192)
    positive_int("height", height, maximum=8192)
    positive_int("classes", classes, maximum=100_000)
    if not 1 <= int(quality) <= 95:
        raise ParameterError("jpeg_quality", quality, "an integer from 1 to 95")
    params = {"kind": "photo_jpeg_f32", "n_images": n_images, "width": width, "height": height,
              "quality": quality, "classes": classes, "seed": seed}
    per = int(width * height * 3 * 0.3) + 8192  # generous: a detailed q92 photo is near 0.2 bytes per value
    return f"photos-{n_images}x{width}x{height}-q{quality}-c{classes}-s{seed}", params, n_images * per


def _write_photos(args) -> list[tuple[int, str]]:
    tmp, indices, seed, width, height, quality, classes = args
    out = []
    for i in indices:
        data = photo_jpeg(seed, i, width, height, quality)
        (Path(tmp) / f"class_{i % classes:03d}" / f"{i:08d}.jpg").write_bytes(data)
        out.append((i, hashlib.sha256(data).hexdigest()))
    return out


def photo_set(data_dir=None, *, n_images: int, width: int = 500, height: int = 375, quality: int = 92,
              classes: int = 10, seed: int = 0, workers: int | None = None,
              progress: bool = True) -> images.ImageFolderSet:
    """Get (generate in parallel, or reuse) ``n_images`` photo-like JPEGs, ImageFolder layout,
    through :func:`datajourney.toolkit.datasets.generate` (atomic, manifest, verified on reuse)."""
    name, params, needed = photo_plan(n_images, width, height, quality, classes, seed)
    parent = datasets.parent_dir(data_dir)
    workers = workers or max(1, len(os.sched_getaffinity(0)))

    def write(tmp: Path, show: bool) -> str:
        return images.write_folder(tmp, n_images, classes, _write_photos, (seed, width, height, quality, classes),
                                   chunk=64, workers=workers, show=show, desc="photo JPEGs")

    root = datasets.generate(parent, name, params, None, needed, write, progress)
    return images.ImageFolderSet(root, n_images, classes)


# --------------------------------------------------------------------------- decoders
def ffmpeg_status() -> tuple[bool, str]:
    """Whether ``spdl.io`` can decode a JPEG here (it needs FFmpeg's shared libraries), and why not."""
    try:
        import spdl.io
    except Exception as e:
        return False, f"spdl is not installed ({type(e).__name__}: {e}); pip install spdl"
    try:
        with _keep_sigterm():
            spdl.io.get_video_filter_desc(scale_width=8, scale_height=8, pix_fmt="rgb24")
            data = photo_jpeg(0, 0, 16, 16, 90)
            spdl.io.to_numpy(spdl.io.load_image(data))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return False, ("spdl.io cannot decode here: FFmpeg's shared libraries (libavutil, libavcodec, ...) "
                       f"did not load ({first[:160]})")
    return True, "spdl " + _version("spdl_io")


@contextmanager
def _keep_sigterm():
    """Loading libspdl initialises Google logging, whose failure handler also catches SIGTERM and
    prints a stack trace when a kernel or runner stops the process normally; keep Python's
    SIGTERM disposition (main thread only: elsewhere signals cannot be set)."""
    import signal

    main = threading.current_thread() is threading.main_thread()
    prev = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and prev is not None:
            signal.signal(signal.SIGTERM, prev)


def torchvision_status() -> tuple[bool, str]:
    try:
        import torchvision
        from torchvision.io import decode_jpeg  # noqa: F401

        torchvision.io.decode_jpeg(torch.frombuffer(bytearray(photo_jpeg(0, 0, 16, 16, 90)), dtype=torch.uint8))
    except Exception as e:
        return False, f"torchvision's JPEG decoder is not usable here ({type(e).__name__}: {str(e)[:160]})"
    return True, "torchvision " + torchvision.__version__


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def decoder_status() -> dict[str, tuple[bool, str]]:
    return {"pillow": (True, "Pillow " + _version("pillow")), "spdl": ffmpeg_status(),
            "torchvision": torchvision_status()}


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def decode_one(decoder: str, data: bytes, out_size: int, times: dict | None = None) -> np.ndarray:
    """JPEG bytes -> (out_size, out_size, 3) uint8, by one decoder; ``times`` gets the ms of
    decode and resize added (spdl decodes and scales in one FFmpeg filter graph: all "decode")."""
    t0 = time.perf_counter()
    if decoder == "pillow":
        from PIL import Image

        img = Image.open(io.BytesIO(data))
        img = img.convert("RGB")  # forces the decode
        t1 = time.perf_counter()
        arr = np.array(img.resize((out_size, out_size), Image.BILINEAR))
    elif decoder == "spdl":
        import spdl.io

        arr = spdl.io.to_numpy(spdl.io.convert_frames(spdl_frames(data, out_size)))
        t1 = time.perf_counter()
    elif decoder == "torchvision":
        from torchvision.io import decode_jpeg
        from torchvision.transforms.v2.functional import resize

        x = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        t1 = time.perf_counter()
        arr = resize(x, [out_size, out_size], antialias=True).permute(1, 2, 0).numpy()
    else:
        raise ValueError(f"unknown decoder {decoder!r}")
    t2 = time.perf_counter()
    if times is not None:
        times["decode"] += (t1 - t0) * 1e3
        times["resize"] += (t2 - t1) * 1e3
    return arr


def spdl_frames(data: bytes, out_size: int):
    """JPEG bytes -> ``spdl.io`` frames decoded and scaled to out_size² in one FFmpeg filter graph,
    without the interpreter lock; stretched like the other decoders (SPDL's own helper keeps the
    aspect ratio and pads). Left unconverted: a batch of them becomes one array in one copy
    (:func:`collate`)."""
    import spdl.io

    return spdl.io.decode_packets(spdl.io.demux_image(data), filter_desc=(
        f"scale=w={out_size}:h={out_size}:flags=bilinear,format=pix_fmts=rgb24"))


def decode_item(decoder: str, data: bytes, out_size: int, times: dict | None = None):
    """One image as a loader's decode step leaves it for :func:`collate`: ``spdl.io`` frames for
    spdl (converted a whole batch at a time), an (S, S, 3) uint8 array for the other decoders."""
    if decoder != "spdl":
        return decode_one(decoder, data, out_size, times)
    t0 = time.perf_counter()
    frames = spdl_frames(data, out_size)
    if times is not None:
        times["decode"] += (time.perf_counter() - t0) * 1e3
    return frames


def collate(decoder: str, items) -> torch.Tensor:
    """A batch of :func:`decode_item` results -> (B, 3, S, S) uint8. spdl.io's batch conversion
    copies the frames once into one buffer with the lock released and the batch stays channels-last
    in memory (the layout the model uses); the arrays of the other decoders are stacked and
    transposed to a contiguous NCHW batch in Python, as ``default_collate`` leaves a DataLoader's."""
    if decoder == "spdl":
        import spdl.io

        return spdl.io.to_torch(spdl.io.convert_frames(list(items))).permute(0, 3, 1, 2)
    return torch.from_numpy(np.stack(items)).permute(0, 3, 1, 2).contiguous()


def load_batch(decoder: str, paths, out_size: int) -> tuple[np.ndarray, dict]:
    """Read, decode, resize and stack a batch; returns it with the ms each operation took (summed
    over the batch) and the thread/process that did it."""
    times = dict.fromkeys(OPS, 0.0)
    arrs = []
    for p in paths:
        t0 = time.perf_counter()
        data = _read(p)
        times["read"] += (time.perf_counter() - t0) * 1e3
        arrs.append(decode_one(decoder, data, out_size, times))
    t0 = time.perf_counter()
    batch = np.stack(arrs)
    times["batch"] = (time.perf_counter() - t0) * 1e3
    return batch, times


def _pool_init(parent: int) -> None:
    images.die_with_parent(parent)
    torch.set_num_threads(1)


def _warm(decoder: str, path: str, out_size: int) -> int:
    decode_one(decoder, _read(path), out_size)
    return os.getpid()


# --------------------------------------------------------------------------- experiments 1 + 2
def primitive_point(decoder: str, executor: str, concurrency: int, paths: list, *, batch_size: int,
                    out_size: int) -> tuple[dict, list[dict]]:
    """One point of experiment 1: ``paths`` in batches through a pool of ``concurrency``.
    Start-up (create the pool, start every worker, import and warm the decoder) is timed apart."""
    batches = [paths[i:i + batch_size] for i in range(0, len(paths), batch_size)]
    t0 = time.perf_counter()
    if executor == "thread":
        pool = ThreadPoolExecutor(concurrency)
    else:
        pool = ProcessPoolExecutor(concurrency, mp_context=get_context("fork"), initializer=_pool_init,
                                   initargs=(os.getpid(),))
    with pool:
        # one warm task per worker, held long enough that each lands on a different worker
        list(pool.map(_warm, [decoder] * concurrency, [paths[0]] * concurrency, [out_size] * concurrency))
        t1 = time.perf_counter()
        futures = [pool.submit(load_batch, decoder, b, out_size) for b in batches]
        ops = [f.result()[1] for f in futures]
        t2 = time.perf_counter()
    n = len(paths)
    row = dict(decoder=decoder, executor=executor, concurrency=concurrency, images=n, startup_s=t1 - t0,
               seconds=t2 - t1, images_per_s=n / (t2 - t1))
    per_op = [dict(decoder=decoder, executor=executor, concurrency=concurrency, op=k,
                   ms_per_image=sum(o[k] for o in ops) / n) for k in OPS]
    return row, per_op


def primitive_images_at(concurrency: int, n_images: int, batch_size: int, available: int) -> int:
    """Images of one primitive point: at least ``n_images`` and at least two batches per worker
    (fewer batches than workers would leave some idle and measure fewer than ``concurrency``),
    at most the ``available`` images of the data set."""
    return min(max(n_images, 2 * concurrency * batch_size), available)


def primitives(src, *, decoders, executors, concurrency, n_images: int, batch_size: int, out_size: int,
               repeats: int, progress=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Experiments 1 and 2 (page cache warm: this is about the CPU, not the disk). Each point
    decodes :func:`primitive_images_at` images: ``n_images`` at low concurrency, two batches per
    worker at high."""
    total = max(primitive_images_at(c, n_images, batch_size, src.n_images) for c in concurrency)
    paths = [str(src.path(i)) for i in range(total)]
    for p in paths:
        _read(p)
    rows, ops = [], []
    with torch_threads(1):
        for r in range(repeats):
            for d in decoders:
                for ex in executors:
                    for c in concurrency:
                        n = primitive_images_at(c, n_images, batch_size, len(paths))
                        row, per_op = primitive_point(d, ex, c, paths[:n], batch_size=batch_size, out_size=out_size)
                        rows.append(dict(row, repeat=r))
                        ops += [dict(o, repeat=r) for o in per_op]
                        if progress is not None:
                            progress.update(1)
    return pd.DataFrame(rows), pd.DataFrame(ops)


@contextmanager
def torch_threads(n: int | None):
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# --------------------------------------------------------------------------- loaders
class PhotoDataset(Dataset):
    """Item ``i``: image ``i`` read, decoded and resized to a (3, out, out) uint8 tensor, and ``i``
    (so that a test can check that every image comes exactly once)."""

    def __init__(self, files, out_size: int, decoder: str = "pillow"):
        self.files = [str(f) for f in files]
        self.out_size = out_size
        self.decoder = decoder

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        arr = decode_one(self.decoder, _read(self.files[i]), self.out_size)
        return torch.from_numpy(arr).permute(2, 0, 1).contiguous(), i


def _collate_items(decoder: str, items):
    """A pipeline's batch of (image, index) items -> (images, indices)."""
    arrs, idx = zip(*items, strict=True)
    return collate(decoder, arrs), torch.tensor(idx)


def _decode_item(decoder: str, out_size: int, path_index, ops=None):
    """Read and decode one image (:func:`decode_item`); ``ops`` (a :class:`SpdlStages`) is given
    the ms of each step."""
    path, i = path_index
    if ops is None:
        return decode_item(decoder, _read(path), out_size), i
    t0 = time.perf_counter()
    data = _read(path)
    t = {"read": (time.perf_counter() - t0) * 1e3, "decode": 0.0, "resize": 0.0}
    img = decode_item(decoder, data, out_size, t)
    ops.add_ops(t)
    return img, i


class BatchSlots:
    """Batches filled in place: image ``k`` of the stream is written into row ``k % B`` of batch
    ``k // B``, a (rows, S, S, 3) uint8 array allocated when its first image arrives, so that no
    stage stacks or transposes a batch (the pipeline's collate stage, off the critical path). A
    batch is handed over, and forgotten here, when it is assembled."""

    def __init__(self, batch_size: int, out_size: int, total: int):
        self.batch_size, self.out_size, self.total = batch_size, out_size, total
        self._bufs: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def row(self, k: int) -> np.ndarray:
        b = k // self.batch_size
        with self._lock:
            buf = self._bufs.get(b)
            if buf is None:
                rows = min(self.batch_size, self.total - b * self.batch_size)
                buf = self._bufs[b] = np.empty((rows, self.out_size, self.out_size, 3), np.uint8)
        return buf[k % self.batch_size]

    def take(self, k: int) -> np.ndarray:
        with self._lock:
            return self._bufs.pop(k // self.batch_size)


def _decode_into(decoder: str, out_size: int, slots: BatchSlots, item, ops=None):
    """Decode one image (path, index, position in the stream) straight into its batch's row."""
    path, i, k = item
    img, _ = _decode_item(decoder, out_size, (path, i), ops)
    if decoder == "spdl":  # frames: converted one image at a time here
        import spdl.io

        img = spdl.io.to_numpy(spdl.io.convert_frames(img))
    slots.row(k)[...] = img
    return k, i


def _assemble(slots: BatchSlots, items):
    """The filled batch of a group of decoded rows, as a channels-last (B, 3, S, S) view, and its indices."""
    ks, idx = zip(*items, strict=True)
    return torch.from_numpy(slots.take(ks[0])).permute(0, 3, 1, 2), torch.tensor(idx)


def dataloader_iter(files, order, *, batch_size: int, out_size: int, workers: int, decoder: str = "pillow",
                    start_method: str = "fork", prefetch_factor: int = 2, pin: bool = False, nice: int = 0):
    """The DataLoader; ``nice`` > 0 lowers its workers' priority by that much (``os.nice``)."""
    from torch.utils.data import DataLoader

    ds = PhotoDataset(files, out_size, decoder)
    kw = dict(prefetch_factor=prefetch_factor, multiprocessing_context=start_method,
              worker_init_fn=worker_init(nice)) if workers else {}
    dl = DataLoader(ds, batch_size=batch_size, sampler=list(order), num_workers=workers, pin_memory=pin, **kw)
    return iter(dl)


def _dl_worker_init(worker_id: int) -> None:
    images.die_with_parent()


def _niced_worker_init(nice: int, worker_id: int) -> None:
    images.die_with_parent()
    os.nice(nice)


def worker_init(nice: int = 0):
    """A DataLoader ``worker_init_fn``: the worker dies with its parent and, with ``nice`` > 0,
    runs at that much lower priority, so that the training step's kernel launches in the main
    process are not delayed by busy workers on every core (chapter 7's nice 10 load)."""
    return partial(_niced_worker_init, int(nice)) if nice else _dl_worker_init


class SpdlStages:
    """Per-stage statistics of one SPDL pipeline, from the counters ``spdl.pipeline`` keeps:
    each stage's task times (``TaskStatsHook``) and each stage's output queue (``StatsQueue``:
    the share of time it held an item, how long its producer waited to put and its consumer
    to get). :meth:`lap` returns them for the time since the previous call, one row per stage."""

    def __init__(self):
        from spdl.pipeline import StatsQueue, TaskStatsHook

        self.queues: dict = {}
        self.hooks: dict = {}
        rec = self

        class Queue(StatsQueue):
            def __init__(self, info, *, buffer_size: int = 1, interval: float = -1):
                super().__init__(info, buffer_size=buffer_size, interval=interval)
                rec.queues[str(info)] = self

            def _log_stats(self, stats) -> None:   # kept here, not logged
                pass

        class Hook(TaskStatsHook):
            def __init__(self, info, interval: float = -1):
                super().__init__(info, interval)
                rec.hooks[str(info)] = self

            def _log_stats(self, stats) -> None:
                pass

        self.build_kwargs = dict(queue_class=Queue, task_hook_factory=lambda info: [Hook(info)])
        self._lock = threading.Lock()
        self._ops = dict(read=0.0, decode=0.0, resize=0.0, n=0)

    def add_ops(self, t: dict) -> None:
        """One image's read, decode and resize times (ms, wall clock in its decode thread)."""
        with self._lock:
            for k in ("read", "decode", "resize"):
                self._ops[k] += t[k]
            self._ops["n"] += 1

    def _lap_ops(self) -> dict:
        with self._lock:
            o, self._ops = self._ops, dict(read=0.0, decode=0.0, resize=0.0, n=0)
        n = o["n"]
        return dict(read_ms=o["read"] / n if n else None, decode_ms=o["decode"] / n if n else None,
                    resize_ms=o["resize"] / n if n else None)

    @staticmethod
    def stage_name(info) -> str:
        return str(info.stage_name).split("(")[0]

    def lap(self) -> list[dict]:
        rows = {}
        for key, q in list(self.queues.items()):
            st = q._get_lap_stats()
            rows[key] = dict(stage=self.stage_name(q.info), stage_concurrency=int(q.info.concurrency or 1),
                             window_s=st.elapsed, out_items=st.num_items, out_occupancy=st.occupancy_rate,
                             out_put_wait_ms=1e3 * st.ave_put_time, out_get_wait_ms=1e3 * st.ave_get_time,
                             tasks=None, task_ms=None, busy=None)
        for key, h in list(self.hooks.items()):
            st = h._get_lap_stats()
            r = rows.setdefault(key, dict(stage=self.stage_name(h.info), stage_concurrency=int(h.info.concurrency
                                                                                               or 1)))
            r.update(tasks=st.num_tasks, task_ms=1e3 * st.ave_time)
            w = r.get("window_s")
            # tasks finished in the window, some begun before it: at most a few tasks' worth above 1
            r["busy"] = (st.num_tasks * st.ave_time / (w * r["stage_concurrency"])) if w else None
        ops = self._lap_ops()
        for r in rows.values():
            r.update(ops if r["stage"] == "decode" else dict.fromkeys(ops))
        return list(rows.values())


def spdl_iter(files, order, *, batch_size: int, out_size: int, concurrency: int, decoder: str = "pillow",
              transfer: bool = False, ordered: bool = True, stages: SpdlStages | None = None,
              prealloc: bool = False):
    """An SPDL pipeline: source -> decode (``concurrency`` threads) -> batch -> collate ->
    (pin + copy on SPDL's own CUDA stream) -> sink. Yields (images, indices). With ``prealloc``
    the decode threads write each image into its row of the batch (:class:`BatchSlots`) and the
    collate stage only hands the filled batch on. With ``stages``, the pipeline's per-stage
    statistics are kept there."""
    from spdl.pipeline import PipelineBuilder

    order = [int(i) for i in order]
    if prealloc:
        slots = BatchSlots(batch_size, out_size, len(order))
        src = [(str(files[i]), i, k) for k, i in enumerate(order)]
        decode, gather = partial(_decode_into, decoder, out_size, slots, ops=stages), partial(_assemble, slots)
    else:
        src = [(str(files[i]), i) for i in order]
        decode, gather = partial(_decode_item, decoder, out_size, ops=stages), partial(_collate_items, decoder)
    # prealloc fills rows by stream position: it needs the input order
    b = (PipelineBuilder().add_source(src)
         .pipe(decode, concurrency=concurrency, output_order="input" if ordered or prealloc else "completion",
               name="decode")
         .aggregate(batch_size, drop_last=False)
         .pipe(gather, name="collate"))
    if transfer:
        import spdl.io

        b = b.pipe(spdl.io.transfer_tensor, name="transfer")
    pipe = b.add_sink(4).build(num_threads=concurrency + 3, **(stages.build_kwargs if stages else {}))
    with pipe.auto_stop():
        yield from pipe.get_iterator(timeout=600)


def threadpool_iter(files, order, *, batch_size: int, out_size: int, concurrency: int, decoder: str = "pillow",
                    pin: bool = False):
    """A plain thread pool: one task per image (read, decode, resize), ``concurrency + 2 *
    batch_size`` images in flight (one per thread and two batches ready); the consumer collates
    (:func:`collate`) and pins each batch of finished images, in order. Per-image tasks make a
    smooth stream: one task per batch would start in phase and deliver batches in waves of
    ``concurrency``."""
    def task(i):
        return decode_item(decoder, _read(files[i]), out_size)

    with ThreadPoolExecutor(concurrency) as pool:
        pending = deque()
        it = iter(order)
        for i in it:
            pending.append((i, pool.submit(task, i)))
            if len(pending) >= concurrency + 2 * batch_size:
                break
        imgs, idx = [], []
        while pending:
            i, f = pending.popleft()
            imgs.append(f.result())
            idx.append(i)
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(task, nxt)))
            if len(imgs) == batch_size or not pending:
                x = collate(decoder, imgs)
                yield (x.pin_memory() if pin else x), torch.tensor(idx)
                imgs, idx = [], []


def gpu_decode_resize(data, out_size: int, device: str = "cuda") -> torch.Tensor:
    """A batch of JPEG byte tensors -> (n, 3, out_size, out_size) uint8 on ``device``: torchvision's
    batched decode (nvJPEG on a GPU), a bilinear antialiased resize in float, rounded."""
    from torchvision.io import decode_jpeg

    x = torch.stack(decode_jpeg(list(data), device=device)).float()
    x = torch.nn.functional.interpolate(x, size=(out_size, out_size), mode="bilinear", antialias=True,
                                        align_corners=False)
    return x.round_().clamp_(0, 255).to(torch.uint8)


def _side_stream_feed(source, work, *, device: str, depth: int = GPU_QUEUE_DEPTH):
    """Yield ``work(item)`` for each item of the generator ``source()``, both run by a producer
    thread on its own CUDA stream (on a GPU): each (images, indices) is handed over through a queue
    of ``depth`` with an event the consumer's stream waits on, and the images are recorded on the
    consumer's stream. Closing the consumer stops the producer and closes ``source``; an error in
    the producer is raised in the consumer."""
    cuda = device == "cuda"
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    stream = torch.cuda.Stream() if cuda else None

    def produce():
        items = source()
        try:
            with torch.cuda.stream(stream) if cuda else nullcontext():
                for item in items:
                    if stop.is_set():
                        return
                    x, idx = work(item)
                    ev = None
                    if cuda:
                        ev = torch.cuda.Event()
                        ev.record(stream)
                    q.put((x, idx, ev))
            q.put(None)
        except BaseException as e:
            q.put(e)
        finally:
            items.close()

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    try:
        while True:
            item = q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            x, y, ev = item
            if cuda:
                torch.cuda.current_stream().wait_event(ev)
                x.record_stream(torch.cuda.current_stream())
            yield x, y
    finally:
        stop.set()
        while th.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                time.sleep(0.01)


def nvjpeg_iter(files, order, *, batch_size: int, out_size: int, read_threads: int, depth: int = GPU_QUEUE_DEPTH,
                device: str = "cuda", gpu_decode=None):
    """GPU decoding: ``read_threads`` threads read the bytes of a batch, a decode thread runs
    ``gpu_decode`` (default :func:`gpu_decode_resize`: nvJPEG and the resize) on its own CUDA
    stream and hands each (uint8 images, indices) over (:func:`_side_stream_feed`)."""
    decode = gpu_decode or partial(gpu_decode_resize, device=device)
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]

    def read(idx):
        return [torch.frombuffer(bytearray(_read(files[i])), dtype=torch.uint8) for i in idx], idx

    def source():
        pool = ThreadPoolExecutor(read_threads)
        try:
            yield from pool.map(read, batches)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def work(item):
        data, idx = item
        return decode(data, out_size), torch.tensor(list(idx))

    yield from _side_stream_feed(source, work, device=device, depth=depth)


def hybrid_cpu_count(batch: int, share: float) -> int:
    """Images of a batch of ``batch`` decoded on the CPU at ``share``: the first round(share × batch)."""
    return min(batch, max(0, int(math.floor(share * batch + 0.5))))


class HybridBatches(Dataset):
    """Item ``b``: batch ``b`` of ``batches`` split for the hybrid feed. Its first
    :func:`hybrid_cpu_count` images read, decoded and resized on the CPU (uint8, (k, 3, S, S)),
    the rest as their JPEG bytes concatenated in one uint8 tensor with their sizes (one
    shared-memory block to move, not one per image), and the batch's indices."""

    def __init__(self, files, batches, out_size: int, share: float, decoder: str = "pillow"):
        self.files = [str(f) for f in files]
        self.batches = [list(map(int, b)) for b in batches]
        self.out_size, self.share, self.decoder = out_size, float(share), decoder

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, b):
        idx = self.batches[b]
        k = hybrid_cpu_count(len(idx), self.share)
        s = self.out_size
        cpu = (torch.from_numpy(np.stack([decode_one(self.decoder, _read(self.files[i]), s) for i in idx[:k]]))
               .permute(0, 3, 1, 2).contiguous() if k else torch.empty((0, 3, s, s), dtype=torch.uint8))
        raw = [_read(self.files[i]) for i in idx[k:]]
        data = (
            torch.frombuffer(bytearray(b"".join(raw)), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        )
        return cpu, data, torch.tensor([len(r) for r in raw], dtype=torch.int64), torch.tensor(idx)


def hybrid_iter(files, order, *, batch_size: int, out_size: int, workers: int, share: float,
                decoder: str = "pillow", start_method: str = "fork", prefetch_factor: int = 2, nice: int = 0,
                device: str = "cuda", gpu_decode=None, depth: int = GPU_QUEUE_DEPTH):
    """The hybrid feed: DataLoader workers (one whole batch each, at ``nice``) decode a ``share`` of
    each batch on the CPU and pass the rest as bytes; a producer thread of this process copies the
    CPU part to the device (pinned, non_blocking), decodes the bytes with ``gpu_decode`` (default
    :func:`gpu_decode_resize`) on its own CUDA stream and yields one uint8 (B, 3, S, S) batch on
    the device with its indices, in the batch's order. The CPU takes the images it can decode
    without falling behind; the GPU spends decode time only on the rest."""
    from torch.utils.data import DataLoader

    decode = gpu_decode or partial(gpu_decode_resize, device=device)
    cuda = device == "cuda"
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    ds = HybridBatches(files, batches, out_size, share, decoder)
    kw = dict(prefetch_factor=prefetch_factor, multiprocessing_context=start_method,
              worker_init_fn=worker_init(nice)) if workers else {}
    dl = DataLoader(ds, batch_size=None, sampler=range(len(ds)), num_workers=workers, pin_memory=cuda, **kw)

    def source():
        it = iter(dl)
        try:
            yield from it
        finally:
            del it          # its workers are shut down when the iterator goes

    def work(item):
        cpu, data, sizes, idx = item
        parts = [cpu.to(device, non_blocking=True)] if len(cpu) else []
        if len(sizes):
            parts.append(decode(torch.split(data, sizes.tolist()), out_size))
        return (parts[0] if len(parts) == 1 else torch.cat(parts)), idx

    yield from _side_stream_feed(source, work, device=device, depth=depth)


def hybrid_share_auto(cpu_rate: float, ceiling_rate: float, headroom: float = HYBRID_HEADROOM) -> float:
    """The hybrid's CPU share from this run's data: ``headroom`` × the CPU loaders' rate (best
    DataLoader, loader alone) over the model's ceiling, clamped to [0, 1], rounded to 0.05."""
    if not (cpu_rate > 0 and ceiling_rate > 0) or not math.isfinite(cpu_rate / ceiling_rate):
        return 0.0
    s = min(1.0, max(0.0, headroom * cpu_rate / ceiling_rate))
    return round(round(s / HYBRID_STEP) * HYBRID_STEP, 2)



# --------------------------------------------------------------------------- CPU and memory of a loader
def _procs():
    import psutil

    me = psutil.Process()
    return [me] + me.children(recursive=True)


def cpu_times() -> dict:
    """User and system CPU seconds of this process (all threads) and its child processes, live or
    ended: an ended child's time is in its parent's ``children_*`` counters once the parent has
    waited for it, so a loader whose workers exit inside the timed window is still counted."""
    import psutil

    u = s = 0.0
    for p in _procs():
        try:
            t = p.cpu_times()
            u += t.user + getattr(t, "children_user", 0.0)
            s += t.system + getattr(t, "children_system", 0.0)
        except psutil.Error:
            pass
    return dict(user=u, system=s, t=time.perf_counter())


def memory() -> dict:
    """PSS and USS (bytes) summed over this process and its live child processes, and how many."""
    import psutil

    pss = uss = 0
    n = 0
    for p in _procs():
        try:
            m = p.memory_full_info()
            pss, uss, n = pss + getattr(m, "pss", m.uss), uss + m.uss, n + 1
        except psutil.Error:
            pass
    return dict(pss=pss, uss=uss, processes=n)


def release_memory() -> None:
    """Collect garbage and hand freed heap memory back to the system (glibc ``malloc_trim``), so
    that a baseline taken next is not inflated by what an earlier measurement left freed but held."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def measure_loader(make_iter, *, batches: int, warm: int, device: str, step=None, stages=None) -> dict:
    """Time to first batch (from building the loader), then ``warm`` batches, then ``batches``
    timed ones: images/s, CPU user/system seconds of all processes, and memory.

    Memory: ``pss_bytes``/``uss_bytes`` sum PSS and USS over every process of the loader (this
    one and its workers) at the end of the timed window, while it runs; ``base_pss_bytes`` is the
    same process tree's PSS just before the loader was built (after freeing what earlier runs
    left), and ``added_pss_mb`` the difference in MB (noise can take it below 0): what the loader
    added. PSS splits a page shared by k processes k ways, so pages a forked worker shares with the main process move
    from the main's PSS to the workers' without changing the sum; USS counts only pages of one
    process, so after a fork the shared pages leave it (no increase is taken from USS).
    Each batch is copied to the device (non_blocking; it is pinned) and given to ``step``. With
    ``stages`` (a :class:`SpdlStages`), its per-stage rows of the timed window come back under
    ``"stages"``."""
    release_memory()
    base = memory()
    t0 = time.perf_counter()
    it = make_iter()
    seen = []
    try:
        x, y = next(it)
        t_first = time.perf_counter() - t0
        seen.append(y)
        for _ in range(warm):
            x, y = next(it)
            seen.append(y)
        _sync(device)
        a = cpu_times()
        if stages is not None:
            stages.lap()
        n = 0
        for _ in range(batches):
            x, y = next(it)
            seen.append(y)
            x = x.to(device, non_blocking=True)
            if step is not None:
                step(x, y)
            n += int(x.shape[0])
        _sync(device)
        b = cpu_times()
        window = stages.lap() if stages is not None else None
        m = memory()
    finally:
        close = getattr(it, "close", None)
        if close:
            close()
        del it
    dt = b["t"] - a["t"]
    return dict(first_batch_s=t_first, images=n, batches=batches, seconds=dt, images_per_s=n / dt,
                cpu_user_s=b["user"] - a["user"], cpu_system_s=b["system"] - a["system"],
                cpu_cores=(b["user"] - a["user"] + b["system"] - a["system"]) / dt,
                pss_bytes=m["pss"], uss_bytes=m["uss"], base_pss_bytes=base["pss"], base_processes=base["processes"],
                added_pss_mb=(m["pss"] - base["pss"]) / 1e6, processes=m["processes"],
                images_seen=int(sum(len(s) for s in seen)), **({"stages": window} if window is not None else {}))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def in_flight(kind: str, concurrency: int, *, batch_size: int, prefetch_factor: int = 2) -> int:
    """How many batches a loader works on ahead of the consumer once it is full: the batches a
    timed window must skip so that it measures production, not a queue built up earlier."""
    if kind == "dataloader":
        return concurrency * prefetch_factor
    if kind == "threadpool":  # images in flight: one per thread and two batches ready
        return -(-concurrency // batch_size) + 2
    if kind in ("spdl", "spdl_prealloc"):  # items in the decode stage, the batch being aggregated, the sink's buffer
        return -(-concurrency // batch_size) + 1 + 4
    if kind == "nvjpeg":
        return GPU_QUEUE_DEPTH + 1
    if kind == "hybrid":  # the DataLoader's batches and those ready or in the producer
        return concurrency * prefetch_factor + GPU_QUEUE_DEPTH + 1
    raise ValueError(kind)


def wave(kind: str, concurrency: int) -> int:
    """Batches a loader delivers together: a DataLoader's workers each make a whole batch and
    start in phase, so they finish in waves of ``concurrency`` batches; the others make one
    image (or one batch) at a time."""
    return concurrency if kind in ("dataloader", "hybrid") else 1


def timed_batches(kind: str, concurrency: int, batches: int, *, batch_size: int, prefetch_factor: int = 2,
                  factor: int = WINDOW_FACTOR) -> int:
    """Batches of a timed window: at least ``batches`` and ``factor`` times the loader's batches in
    flight, rounded up to whole waves. A window of a fraction of a wave more or less than whole
    waves counts a wave's batches in the time of fewer (or more) waves: its rate depends on where
    it falls; over whole waves, and many of them, it does not."""
    w = wave(kind, concurrency)
    n = max(batches, factor * in_flight(kind, concurrency, batch_size=batch_size, prefetch_factor=prefetch_factor))
    return -(-n // w) * w


def make_loader(kind: str, files, order, *, batch_size: int, out_size: int, concurrency: int, decoder: str,
                device: str, start_method: str = "fork", prefetch_factor: int = 2, stages: SpdlStages | None = None,
                nice: int = 0, share: float = 0.0, gpu_decode=None):
    cuda = device == "cuda"
    if kind == "dataloader":
        return partial(dataloader_iter, files, order, batch_size=batch_size, out_size=out_size, workers=concurrency,
                       decoder=decoder, start_method=start_method, prefetch_factor=prefetch_factor, pin=cuda,
                       nice=nice)
    if kind == "hybrid":
        return partial(hybrid_iter, files, order, batch_size=batch_size, out_size=out_size, workers=concurrency,
                       share=share, decoder=decoder, start_method=start_method, prefetch_factor=prefetch_factor,
                       nice=nice, device=device, gpu_decode=gpu_decode)
    if kind in ("spdl", "spdl_prealloc"):
        return partial(spdl_iter, files, order, batch_size=batch_size, out_size=out_size, concurrency=concurrency,
                       decoder=decoder, transfer=cuda, stages=stages, prealloc=kind == "spdl_prealloc")
    if kind == "threadpool":
        return partial(threadpool_iter, files, order, batch_size=batch_size, out_size=out_size,
                       concurrency=concurrency, decoder=decoder, pin=cuda)
    if kind == "nvjpeg":
        return partial(nvjpeg_iter, files, order, batch_size=batch_size, out_size=out_size,
                       read_threads=concurrency, device=device, gpu_decode=gpu_decode)
    raise ValueError(kind)


# --------------------------------------------------------------------------- experiment 3b: start-up
def imagenet_paths(n: int) -> list[str]:
    """``n`` file names laid out like ImageNet's training set (1,300 per class folder)."""
    return [f"/data/imagenet/train/n{k // 1300:08d}/n{k // 1300:08d}_{k:06d}.JPEG" for k in range(n)]


#: How a Dataset can hold its file list: Python ``str`` objects in a list, or one NumPy array of
#: fixed-width bytes (a single buffer, no object per path).
PATH_STORAGE = ("list", "numpy")


class PathsDataset(Dataset):
    """A Dataset whose only weight is a list of ``n_paths`` file names (``storage``: a Python list
    or a NumPy bytes array); item ``i`` is the length of path ``i % n_paths`` (0 without paths), so
    reading an item touches its path the way a real Dataset opening the file would. ``items``: the
    length (default one per path)."""

    def __init__(self, n_paths: int, items: int | None = None, storage: str = "list"):
        paths = imagenet_paths(n_paths)
        self.paths = np.array(paths, dtype=np.bytes_) if storage == "numpy" else paths
        self.items = n_paths if items is None else items

    def __len__(self):
        return self.items

    def __getitem__(self, i):
        n = len(self.paths)
        return len(self.paths[i % n]) if n else 0


@functools.lru_cache(maxsize=2)
def _paths_dataset(n_paths: int) -> tuple[PathsDataset, int]:
    """The Dataset of ``n_paths`` paths and its pickled size, built once per size for the sweep
    (:func:`startup_point`); ``_paths_dataset.cache_clear()`` frees them."""
    ds = PathsDataset(n_paths, items=64)
    return ds, len(pickle.dumps(ds, protocol=pickle.HIGHEST_PROTOCOL))


def startup_point(workers: int, method: str, n_paths: int) -> dict:
    from torch.utils.data import DataLoader

    ds, size = _paths_dataset(n_paths)
    dl = DataLoader(ds, batch_size=1, num_workers=workers, multiprocessing_context=method,
                    worker_init_fn=_dl_worker_init)
    t0 = time.perf_counter()
    it = iter(dl)
    next(it)
    t1 = time.perf_counter()
    del it
    return dict(workers=workers, start_method=method, n_paths=n_paths, pickled_bytes=size, first_batch_s=t1 - t0)


# --------------------------------------------------------------------------- experiment 3c: memory over an epoch
class MemorySampler:
    """PSS and USS of this process and of each child process started after it (a loader's workers,
    not helpers that were already running), every ``interval`` seconds in a background thread and
    whenever :meth:`sample` is called: rows of (seconds since start, process: "main" or "worker k"
    in order of appearance, pss_bytes, uss_bytes). A process that is exiting (no memory left) is
    not sampled."""

    def __init__(self, interval: float):
        self.interval, self.rows = interval, []
        self._names: dict[int, str] = {}
        self._before: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        import psutil

        me = psutil.Process()
        t = time.perf_counter() - self._t0
        with self._lock:
            kids = sorted((c for c in me.children(recursive=True) if c.pid not in self._before), key=lambda c: c.pid)
            for p in [me] + kids:
                try:
                    m = p.memory_full_info()
                except psutil.Error:
                    continue
                if not m.uss:
                    continue
                name = self._names.setdefault(p.pid, "main" if p.pid == me.pid else f"worker {len(self._names)}")
                self.rows.append(dict(t=t, process=name, pss_bytes=getattr(m, "pss", m.uss), uss_bytes=m.uss))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self):
        import psutil

        self._t0 = time.perf_counter()
        self._before = {c.pid for c in psutil.Process().children(recursive=True)}
        self._names[os.getpid()] = "main"
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _epoch_fetch(ds, idx) -> torch.Tensor:
    return torch.tensor([ds[int(i)] for i in idx])


def epoch_iter(loader: str, ds, batches, workers: int):
    """One pass over ``batches`` (index arrays) of ``ds``: DataLoader worker processes (fork) or an
    SPDL pipeline whose ``workers`` threads fetch the batches in this process."""
    if loader == "dataloader":
        from torch.utils.data import DataLoader

        yield from DataLoader(ds, batch_sampler=batches, num_workers=workers, multiprocessing_context="fork",
                              worker_init_fn=_dl_worker_init)
        return
    from spdl.pipeline import PipelineBuilder

    pipe = (PipelineBuilder().add_source(batches).pipe(partial(_epoch_fetch, ds), concurrency=workers)
            .add_sink(4).build(num_threads=workers + 1))
    with pipe.auto_stop():
        yield from pipe.get_iterator(timeout=600)


def epoch_point(loader: str, storage: str, n_paths: int, *, workers: int, batch_size: int, interval: float,
                seed: int = 0) -> tuple[dict, list[dict]]:
    """A whole epoch over a Dataset of ``n_paths`` paths held as ``storage`` (shuffled, batches of
    ``batch_size``), with the memory of every process sampled: the summary and the samples. The
    last sample is taken just before the last batch is taken, while the DataLoader's workers live."""
    release_memory()
    base = memory()["pss"]
    ds = PathsDataset(n_paths, storage=storage)
    built = memory()["pss"]  # the main process alone: helpers started earlier are in both
    order = np.random.default_rng(seed).permutation(n_paths)
    batches = [order[i:i + batch_size] for i in range(0, n_paths, batch_size)]
    seen = 0
    with MemorySampler(interval) as ms:
        t0 = time.perf_counter()
        it = epoch_iter(loader, ds, batches, workers)
        for k in range(len(batches)):
            if k == len(batches) - 1:
                ms.sample()
            seen += len(next(it))
        seconds = time.perf_counter() - t0
        it.close()
    del ds
    rows = [dict(loader=loader, storage=storage, **r) for r in ms.rows]
    return dict(loader=loader, storage=storage, n_paths=n_paths, workers=workers, items=seen, seconds=seconds,
                dataset_pss_mb=(built - base) / 1e6, samples=len(rows)), rows


# --------------------------------------------------------------------------- experiment 4: IPC
class BatchSource(Dataset):
    """Items already decoded (one fixed image): moving them is all the loader does."""

    def __init__(self, out_size: int, n: int):
        self.x = torch.randint(0, 255, (3, out_size, out_size), dtype=torch.uint8, generator=torch.Generator()
                               .manual_seed(0))
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.x


def ipc_point(batch_size: int, workers: int, out_size: int, batches: int) -> dict:
    """ms per batch of a loader that only collates ready images: with workers, the batch is
    collated into shared memory in a worker and rebuilt in the main process."""
    from torch.utils.data import DataLoader

    ds = BatchSource(out_size, batch_size * (batches + 4 + 2 * max(workers, 1)))
    kw = dict(multiprocessing_context="fork", worker_init_fn=_dl_worker_init) if workers else {}
    it = iter(DataLoader(ds, batch_size=batch_size, num_workers=workers, **kw))
    for _ in range(2 + 2 * workers):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - t0
    del it
    return dict(batch_size=batch_size, workers=workers, batch_bytes=batch_size * 3 * out_size ** 2,
                ms_per_batch=dt / batches * 1e3)


# --------------------------------------------------------------------------- experiment 6: the model
def model_step_factory(net, opt, device: str, graph=None):
    """Chapter 7's model in bf16 autocast and channels_last, stepped by chapter 7's loop
    (:func:`datajourney.models.train_steps`: uint8 batches normalised on the device); with
    ``graph`` (:func:`bf16_graphed_step`) each step replays its CUDA graphs instead."""

    def run_steps(batches, steps: int, first_step: int = 0):
        if graph is not None:
            return models.train_steps(batches, net, opt, steps=steps, device=device, first_step=first_step,
                                        graph=graph)
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else nullcontext()
        with ctx:
            return models.train_steps(batches, net, opt, steps=steps, device=device, first_step=first_step)

    return run_steps


def bf16_graphed_step(net, *, batch_size: int, out_size: int, classes: int, device: str):
    """Chapter 7's :class:`~datajourney.toolkit.models.GraphedStep` of a copy of ``net``, captured under
    bf16 autocast (its weight cache off, as a graph replays the casts each step): a step is a few
    graph launches, so busy cores and other Python threads in this process no longer pace it.
    Returns (graph or None, the reason it is None)."""

    if device != "cuda":
        return None, "CUDA graphs need a GPU; this machine has none"
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        return models.graphed_step(net, 0.01, batch_size=batch_size, out_size=out_size, classes=classes,
                                     device=device)


def feed_model(make_iter, run_steps, *, steps: int, warmup: int, classes: int) -> dict:
    """Images/s of the model fed by a loader (steady state after ``warmup`` steps), the data
    wait share, time to first batch and CPU of all processes. The loaders yield image indices;
    the model is given class ``index % classes``, as the ImageFolder layout assigns them."""
    t0 = time.perf_counter()
    it = make_iter()
    labelled = ((x, y % classes) for x, y in it)
    try:
        w = run_steps(labelled, warmup)
        a = cpu_times()
        df = run_steps(labelled, steps, warmup)
        b = cpu_times()
    finally:
        close = getattr(it, "close", None)
        if close:
            close()
        del it
    wall = df["wall_ms"].sum() / 1e3
    return dict(first_batch_s=float(w["DATALOADER_WAIT"].iloc[0]) / 1e3, images_per_s=df["images"].sum() / wall,
                wait_share=df["DATALOADER_WAIT"].sum() / df["wall_ms"].sum(),
                compute_ms=float(df["compute_ms"].mean()),
                cpu_cores=(b["user"] - a["user"] + b["system"] - a["system"]) / (b["t"] - a["t"]),
                seconds_total=time.perf_counter() - t0)


def moonshot_feeds(lo: pd.DataFrame, ceiling: dict | None, *, tv: tuple[bool, str], nice: int, read_threads: int,
                   share="auto", hybrid: dict) -> list[tuple[str, int, int, float | None, str | None]]:
    """The model-fed runs, (kind, concurrency, workers' nice, CPU share, decoder): the best of each
    loader of the sweep ``lo`` (means over repeats) with its decoder, the best DataLoader again with
    its workers at ``nice``, GPU decoding, and the hybrid at the best DataLoader's workers and
    decoder, at nice 0 and at ``nice`` (the run tells which priority feeds the model better), with
    the share (``"auto"``: :func:`hybrid_share_auto` of that DataLoader's rate and the ceiling).
    ``hybrid`` is filled with the share, how it was chosen and its inputs, or why the hybrid is
    skipped (a code: the page words it)."""
    feeds, best = [], pd.DataFrame(columns=["loader", "concurrency", "decoder", "images_per_s"])
    if not lo.empty:
        dec = lo["decoder"] if "decoder" in lo else pd.Series("pillow", index=lo.index)
        best = (lo.assign(decoder=dec.fillna("")).groupby(["loader", "concurrency", "decoder"])["images_per_s"]
                .mean().reset_index().sort_values("images_per_s").groupby("loader").tail(1))
        feeds = [(r.loader, int(r.concurrency), 0, None, r.decoder or None) for r in best.itertuples()
                 if r.loader != "nvjpeg"]
    if nice:
        feeds += [("dataloader", c, nice, None, d) for k, c, _, _, d in list(feeds) if k == "dataloader"]
    if tv[0]:
        feeds.append(("nvjpeg", read_threads, 0, None, None))
    dl_best = best[best["loader"] == "dataloader"]
    if not tv[0]:
        hybrid.update(skipped="torchvision", why=tv[1])
    elif dl_best.empty:
        hybrid.update(skipped="no_dataloader")
    elif not ceiling:
        hybrid.update(skipped="no_ceiling")
    else:
        r_cpu, c_rate = float(dl_best["images_per_s"].iloc[0]), float(ceiling["images_per_s"])
        auto = share == "auto"
        hybrid.update(share=hybrid_share_auto(r_cpu, c_rate) if auto else float(share),
                      how="auto" if auto else "parameter", headroom=HYBRID_HEADROOM, step=HYBRID_STEP,
                      cpu_rate=r_cpu, ceiling=c_rate, workers=int(dl_best["concurrency"].iloc[0]))
        dec = dl_best["decoder"].iloc[0] or None
        feeds += [("hybrid", hybrid["workers"], n, hybrid["share"], dec) for n in sorted({0, nice})]
    return feeds


def model_ceiling(net, opt, run_steps, *, batch_size: int, out_size: int, classes: int, device: str, steps: int,
                  warmup: int) -> dict:
    """The model fed by one uint8 batch kept in device memory (no loading, no copy)."""
    from itertools import cycle

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 255, (batch_size, 3, out_size, out_size), dtype=torch.uint8, generator=g).to(device)
    y = torch.randint(0, classes, (batch_size,), generator=g).to(device)
    it = cycle([(x, y)])
    run_steps(it, warmup)
    df = run_steps(it, steps, warmup)
    return dict(images_per_s=df["images"].sum() / (df["wall_ms"].sum() / 1e3), compute_ms=float(df["compute_ms"]
                                                                                               .mean()))


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


def hybrid_share_param(v):
    """``hybrid_share``: "auto" or the share of each batch decoded on the CPU, a number from 0 to 1."""
    from datajourney.core.params import ParameterError

    if v == "auto":
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise ParameterError("hybrid_share", v, '"auto" or a number from 0 to 1 (the share decoded on the CPU)')
    return float(v)


def runnable(name: str, value, decoders) -> None:
    """A :class:`ParameterError` naming ``name`` when one of ``decoders`` cannot run on this machine."""
    from datajourney.core.params import ParameterError, requires

    if "spdl" in decoders:
        requires(name, value, "spdl.io", "spdl (pip install spdl) and FFmpeg's shared libraries")
    for d, status in (("spdl", ffmpeg_status), ("torchvision", torchvision_status)):
        if d in decoders:
            ok, why = status()
            if not ok:
                raise ParameterError(name, value, f"decoders this machine can run ({why})")


def check_parameters(p: dict) -> dict:
    from datajourney.core.params import (
        ParameterError,
        boolean,
        choice,
        choices,
        int_list,
        nonnegative_int,
        number,
        positive_int,
        requires,
    )
    from datajourney.core.params import memory as mem
    from datajourney.toolkit import pagecache

    q = dict(p)
    cores = len(os.sched_getaffinity(0))
    q["n_images"] = positive_int("n_images", p["n_images"], maximum=images.MAX_IMAGES)
    q["width"] = positive_int("width", p["width"], maximum=8192)
    q["height"] = positive_int("height", p["height"], maximum=8192)
    q["jpeg_quality"] = positive_int("jpeg_quality", p["jpeg_quality"], maximum=95)
    q["classes"] = positive_int("classes", p.get("classes", 10), maximum=100_000)
    q["out_size"] = positive_int("out_size", p["out_size"], maximum=4096)
    q["batch_size"] = positive_int("batch_size", p["batch_size"], maximum=4096)
    q["primitive_batch"] = positive_int("primitive_batch", p["primitive_batch"], maximum=4096)
    q["primitive_images"] = positive_int("primitive_images", p["primitive_images"], maximum=q["n_images"])
    if q["primitive_images"] < q["primitive_batch"]:
        raise ParameterError("primitive_images", q["primitive_images"],
                             f"at least one batch (primitive_batch = {q['primitive_batch']})")
    q["repeats"] = positive_int("repeats", p["repeats"], maximum=100)
    lim = min(MAX_CONCURRENCY, max(16, 8 * cores))
    for name in ("concurrency", "dataloader_workers", "thread_concurrency"):
        v = p[name]
        auto = (auto_concurrency(cores) if name == "concurrency"
                else [c for c in auto_concurrency(cores) if c <= min(cores, AUTO_LOADER_MAX)])
        q[name] = auto if v == "auto" else int_list(name, v, minimum=1, maximum=lim)
    ds = p["decoders"]
    status = None
    if ds == "auto":
        status = decoder_status()
        q["decoders"] = [d for d in DECODERS if status[d][0]]
    else:
        q["decoders"] = choices("decoders", ds, DECODERS)
        runnable("decoders", ds, q["decoders"])
    q["executors"] = choices("executors", p.get("executors", list(EXECUTORS)), EXECUTORS)
    q["loaders"] = choices("loaders", p["loaders"], LOADERS)
    if "spdl" in q["loaders"]:
        requires("loaders", p["loaders"], "spdl.pipeline", "spdl (pip install spdl)")
        if torch.cuda.is_available():  # its last stage copies to the GPU with spdl.io's transfer_tensor
            requires("loaders", p["loaders"], "spdl.io", "spdl-io for the GPU transfer stage (pip install spdl)")
    td = p.get("thread_decoders", "auto")
    if td == "auto":
        q["thread_decoders"] = ["spdl", "pillow"] if (status or decoder_status())["spdl"][0] else ["pillow"]
    else:
        q["thread_decoders"] = choices("thread_decoders", td, DECODERS)
        runnable("thread_decoders", td, q["thread_decoders"])
    dd = p.get("dataloader_decoder", "auto")
    if dd != "auto":
        runnable("dataloader_decoder", dd, [choice("dataloader_decoder", dd, DECODERS)])
    q["dataloader_decoder"] = dd
    q["collate_check"] = boolean("collate_check", p.get("collate_check", True))
    q["loader_batches"] = positive_int("loader_batches", p["loader_batches"], maximum=100_000)
    q["warm_batches"] = nonnegative_int("warm_batches", p.get("warm_batches", 2), maximum=1000)
    q["prefetch_factor"] = positive_int("prefetch_factor", p.get("prefetch_factor", 2), maximum=64)
    q["window_factor"] = positive_int("window_factor", p.get("window_factor", WINDOW_FACTOR), maximum=100)
    plan = loader_windows(q)
    k, c, warm, timed = max(plan, key=lambda t: t[2] + t[3]) if plan else ("dataloader", 0, 0, 0)
    if plan and (warm + timed + 1) * q["batch_size"] > q["n_images"]:
        raise ParameterError("n_images", q["n_images"],
                             f"at least {(warm + timed + 1) * q['batch_size']}: {LABELS[k]} at {c} skips {warm} "
                             f"batches (those in flight) and times {timed} (loader_batches = {q['loader_batches']}, "
                             f"at least window_factor = {q['window_factor']} times those in flight, whole waves), "
                             f"each of batch_size = {q['batch_size']} distinct images (or lower window_factor)")
    q["start_methods"] = choices("start_methods", p["start_methods"], START_METHODS)
    q["startup_workers"] = ([] if p["startup_workers"] == [] else
                            int_list("startup_workers", p["startup_workers"], minimum=1, maximum=lim))
    q["startup_paths"] = int_list("startup_paths", p["startup_paths"], minimum=0, maximum=20_000_000)
    mem("startup_paths", max(q["startup_paths"] or [0]),
        max(q["startup_paths"] or [0]) * 200 * (2 + max(q["startup_workers"] or [0])),
        what="the path lists of the Dataset objects in the main process and every worker")
    q["epoch_paths"] = nonnegative_int("epoch_paths", p.get("epoch_paths", 0), maximum=20_000_000)
    q["epoch_batch_size"] = positive_int("epoch_batch_size", p.get("epoch_batch_size", 256), maximum=65536)
    ew = p.get("epoch_workers", "auto")
    q["epoch_workers"] = (max(q["dataloader_workers"]) if ew == "auto"
                          else positive_int("epoch_workers", ew, maximum=lim))
    q["memory_interval_s"] = number("memory_interval_s", p.get("memory_interval_s", 0.25), minimum=0, maximum=60,
                                    exclusive_minimum=True)
    if q["epoch_paths"]:
        requires("epoch_paths", q["epoch_paths"], "spdl.pipeline", "spdl (pip install spdl) for the thread pipeline")
        mem("epoch_paths", q["epoch_paths"], q["epoch_paths"] * 200 * (2 + q["epoch_workers"]),
            what="the path list in the main process and a copy in every worker")
    q["ipc_batch_sizes"] = ([] if p["ipc_batch_sizes"] == [] else
                            int_list("ipc_batch_sizes", p["ipc_batch_sizes"], minimum=1, maximum=4096))
    q["ipc_workers"] = int_list("ipc_workers", p.get("ipc_workers", [0, 1]), minimum=0, maximum=lim)
    if q["ipc_batch_sizes"] and 0 not in q["ipc_workers"]:
        raise ParameterError("ipc_workers", q["ipc_workers"], "a list that includes 0 (the baseline without IPC)")
    ft = p.get("free_threaded", "auto")
    if ft not in ("auto", True, False):
        raise ParameterError("free_threaded", ft, '"auto", true or false')
    if ft is True and free_threading()["gil_enabled"]:
        raise ParameterError("free_threaded", ft, "false or \"auto\" on this interpreter: it runs with the GIL "
                             "(run the chapter with a free-threaded Python such as python3.13t)")
    q["free_threaded"] = ft
    mo = p.get("moonshot", "auto")
    if mo not in ("auto", True, False):
        raise ParameterError("moonshot", mo, '"auto", true or false')
    if mo is True and not torch.cuda.is_available():
        raise ParameterError("moonshot", mo, 'false or "auto" on a machine without a CUDA GPU')
    q["moonshot"] = mo
    q["model"] = choice("model", p.get("model", "resnet50"), ("resnet50", "small_cnn"))
    if q["model"] == "resnet50" and mo is True and torch.cuda.is_available():  # "auto" skips without it
        requires("model", "resnet50", "torchvision", "torchvision (pip install torchvision)")
    q["model_steps"] = positive_int("model_steps", p.get("model_steps", 30), maximum=100_000)
    q["model_warmup"] = positive_int("model_warmup", p.get("model_warmup", 5), maximum=10_000)
    q["read_threads"] = positive_int("read_threads", p.get("read_threads", 8), maximum=lim)
    q["model_step"] = choice("model_step", p.get("model_step", "graphed"), MODEL_STEPS)
    q["model_worker_nice"] = nonnegative_int("model_worker_nice", p.get("model_worker_nice", 10), maximum=19)
    q["hybrid_share"] = hybrid_share_param(p.get("hybrid_share", "auto"))
    if mo is not False and torch.cuda.is_available():
        model_plan = [(k, c, w, t) for k, c, w, t in plan if k != "nvjpeg"]
        if "dataloader" in q["loaders"] and torchvision_status()[0]:  # the hybrid, at the most workers it may get
            model_plan.append(("hybrid", max(q["dataloader_workers"]), 0, 0))
        for k, c, _, _ in model_plan:
            warm = in_flight(k, c, batch_size=q["batch_size"], prefetch_factor=q["prefetch_factor"])
            warm = max(q["model_warmup"], warm)
            timed = timed_batches(k, c, q["model_steps"], batch_size=q["batch_size"],
                                  prefetch_factor=q["prefetch_factor"], factor=q["window_factor"])
            if (warm + timed + 1) * q["batch_size"] > q["n_images"]:
                raise ParameterError("model_steps", q["model_steps"],
                                     f"a model-fed window that fits n_images = {q['n_images']}: {LABELS[k]} at {c} "
                                     f"skips {warm} batches and times {timed} (whole waves, at least window_factor "
                                     "times those in flight)")
    q["purge_method"] = choice("purge_method", p["purge_method"], pagecache.METHODS)
    q["seed"] = nonnegative_int("seed", p.get("seed", 0), maximum=2 ** 31 - 1)
    q["progress"] = boolean("progress", p.get("progress", True))
    w_max = max(q["dataloader_workers"])
    batch_bytes = q["batch_size"] * 3 * q["out_size"] ** 2
    mem("batch_size", q["batch_size"], (q["prefetch_factor"] * w_max + 8) * batch_bytes + 2 * w_max * (200 << 20),
        what=f"{q['prefetch_factor'] * w_max + 8} uint8 batches in flight and {w_max} worker processes")
    return q


def preflight(params: dict):
    from datajourney.core import results
    from datajourney.core.params import creatable_dir

    p = check_parameters(params)
    creatable_dir("run_dir", results.resolve_run_dir(p.get("run_dir")))
    plan = photo_plan(p["n_images"], p["width"], p["height"], p["jpeg_quality"], p["classes"], p["seed"])
    parent = datasets.check_space(p.get("data_dir"), [plan])
    return p, parent


# --------------------------------------------------------------------------- the chapter
def _measure(*, n_images: int, width: int, height: int, jpeg_quality: int, classes: int,
        out_size: int, batch_size: int, primitive_batch: int, primitive_images: int,
        concurrency, decoders, executors, repeats: int,
        loaders, thread_decoders, dataloader_decoder, collate_check: bool, dataloader_workers, thread_concurrency,
        loader_batches: int, warm_batches: int, prefetch_factor: int, window_factor: int,
        start_methods, startup_workers, startup_paths,
        epoch_paths: int, epoch_batch_size: int, epoch_workers, memory_interval_s: float,
        ipc_batch_sizes, ipc_workers, free_threaded, moonshot,
        model: str, model_steps: int, model_warmup: int, read_threads: int,
        model_worker_nice: int, hybrid_share, model_step: str, purge_method: str,
        seed: int, data_dir=None, run_dir=None, progress: bool = True):
    """Run chapter 8 and save its result (tables + fingerprint) to ``run_dir``."""
    params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in locals().items()}
    from tqdm import tqdm

    from datajourney.core import results
    from datajourney.toolkit import pagecache

    p, parent = preflight(params)
    params.pop("progress")
    rd = results.resolve_run_dir(run_dir)
    res = results.start(CHAPTER, params, run_dir, parent)
    lap = timing.Laps()

    cores = len(os.sched_getaffinity(0))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    status = decoder_status()
    src = photo_set(parent, n_images=p["n_images"], width=p["width"], height=p["height"], quality=p["jpeg_quality"],
                    classes=p["classes"], seed=p["seed"], progress=progress)
    files = [str(f) for f in src.files]
    sizes = np.array([os.path.getsize(f) for f in files])
    lap("data set")

    # calibration: one image's decode + resize cost on one core, per decoder
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
    ft = free_threading()
    n_prim = p["repeats"] * len(p["decoders"]) * len(p["executors"]) * len(p["concurrency"])
    loader_plan = plan_loaders(p, gpu_decode=device == "cuda" and status["torchvision"][0])
    n_start = len(p["start_methods"]) * len(p["startup_workers"]) * len(p["startup_paths"])
    n_ipc = len(p["ipc_batch_sizes"]) * len(p["ipc_workers"])
    n_epoch = 2 * len(PATH_STORAGE) if p["epoch_paths"] else 0
    bar = tqdm(total=n_prim + len(loader_plan) + n_start + n_epoch + n_ipc, desc="chapter 8", disable=not progress)
    with bar:
        prim, ops = primitives(src, decoders=p["decoders"], executors=p["executors"], concurrency=p["concurrency"],
                               n_images=p["primitive_images"], batch_size=p["primitive_batch"],
                               out_size=p["out_size"], repeats=p["repeats"], progress=bar)
        lap("primitives")
        dl_dec = dataloader_decoder_choice(prim, p["dataloader_decoder"])

        rng = np.random.default_rng(p["seed"])
        loader_rows, errors, stage_rows = [], [], []
        purge_methods = set()
        for kind, c, dec, r in loader_plan:
            dec = dec or dl_dec["decoder"]
            warm = max(p["warm_batches"], in_flight(kind, c, batch_size=p["batch_size"],
                                                    prefetch_factor=p["prefetch_factor"]))
            timed = timed_batches(kind, c, p["loader_batches"], batch_size=p["batch_size"],
                                  prefetch_factor=p["prefetch_factor"], factor=p["window_factor"])
            n_used = (warm + timed + 1) * p["batch_size"]
            order = rng.permutation(len(files))[:n_used].tolist()
            pr = pagecache.purge([files[i] for i in order], p["purge_method"])
            purge_methods.add(pr.method)
            stages = SpdlStages() if kind in ("spdl", "spdl_prealloc") else None
            mk = make_loader(kind, files, order, batch_size=p["batch_size"], out_size=p["out_size"], concurrency=c,
                             decoder=dec, device=device, prefetch_factor=p["prefetch_factor"], stages=stages)
            try:
                row = measure_loader(mk, batches=timed, warm=warm, device=device, stages=stages)
            except Exception as e:
                errors.append(_error(f"{LABELS[kind]}, concurrency {c}, {dec}", e))
            else:
                stage_rows += [dict(loader=kind, concurrency=c, decoder=dec, repeat=r, **st)
                               for st in row.pop("stages", [])]
                loader_rows.append(dict(loader=kind, concurrency=c, repeat=r, decoder=dec, warm=warm,
                                        resident_at_start=pr.after["fraction"], **row))
            bar.update(1)
        lap("loaders")

        start_rows = []
        for m in p["start_methods"]:
            if m == "forkserver" and p["startup_workers"]:  # untimed: the server starts once, with the first
                startup_point(1, m, 0)
            for w in p["startup_workers"]:
                for n in p["startup_paths"]:
                    try:
                        start_rows.append(startup_point(w, m, n))
                    except Exception as e:
                        errors.append(_error(f"start-up, {m}, {w} workers, {n} paths", e))
                    bar.update(1)
        _paths_dataset.cache_clear()
        lap("start-up")
        epoch_rows, memory_rows = [], []
        for loader in ("dataloader", "spdl") if p["epoch_paths"] else ():
            for storage in PATH_STORAGE:
                try:
                    row, samples = epoch_point(loader, storage, p["epoch_paths"], workers=p["epoch_workers"],
                                               batch_size=p["epoch_batch_size"], interval=p["memory_interval_s"],
                                               seed=p["seed"])
                except Exception as e:
                    errors.append(_error(f"epoch, {LABELS[loader]}, paths in a {storage}", e))
                else:
                    epoch_rows.append(row)
                    memory_rows += samples
                bar.update(1)
        lap("epoch memory")
        ipc_rows = []
        for bs in p["ipc_batch_sizes"]:
            for w in p["ipc_workers"]:
                try:
                    ipc_rows.append(ipc_point(bs, w, p["out_size"], batches=max(8, min(40, 4096 // bs))))
                except Exception as e:
                    errors.append(_error(f"IPC, batch {bs}, {w} workers", e))
                bar.update(1)
        lap("ipc")

    lo = pd.DataFrame(loader_rows)
    model_rows, ceiling = [], None
    moon_why = None
    nice = p["model_worker_nice"]
    ceilings, step_kind, graph_note = {}, "eager", None
    hybrid = dict(share=None, how=None, cpu_rate=None, ceiling=None, workers=None, nice=nice, skipped=None)
    if p["moonshot"] is False:
        moon_why = "the moonshot was switched off (moonshot = false)"
    elif device != "cuda":
        moon_why = "no CUDA GPU on this machine: the model-fed runs need one"
    elif p["model"] == "resnet50" and not status["torchvision"][0]:
        moon_why = "ResNet-50 needs torchvision (pip install torchvision): " + status["torchvision"][1]
    else:
        torch.manual_seed(p["seed"])
        torch.backends.cudnn.benchmark = True
        net = models.make_model(p["model"], p["classes"]).to(device, memory_format=torch.channels_last)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        run_steps = model_step_factory(net, opt, device)
        cargs = dict(batch_size=p["batch_size"], out_size=p["out_size"], classes=p["classes"], device=device,
                     steps=p["model_steps"], warmup=p["model_warmup"])
        try:
            ceilings["eager"] = model_ceiling(net, opt, run_steps, **cargs)
        except Exception as e:
            errors.append(_error("model ceiling", e))
        if p["model_step"] == "graphed":
            graph, graph_note = bf16_graphed_step(net, batch_size=p["batch_size"], out_size=p["out_size"],
                                                  classes=p["classes"], device=device)
            if graph is not None:
                graphed = model_step_factory(net, opt, device, graph=graph)
                try:
                    ceilings["graphed"] = model_ceiling(net, opt, graphed, **cargs)
                    run_steps, step_kind = graphed, "graphed"
                except Exception as e:
                    errors.append(_error("graphed model ceiling", e))
                    graph_note = "the graphed step failed: " + errors[-1]["error"]
        ceiling = ceilings.get(step_kind)
        if ceiling is None:
            moon_why = "the model's ceiling could not be measured: " + errors[-1]["error"]
        feeds = moonshot_feeds(lo, ceiling, tv=status["torchvision"], nice=nice, read_threads=p["read_threads"],
                               share=p["hybrid_share"], hybrid=hybrid)
        for r in range(p["repeats"] if ceiling else 0):
            for kind, c, f_nice, share, dec in feeds:
                warm = max(p["model_warmup"], in_flight(kind, c, batch_size=p["batch_size"],
                                                        prefetch_factor=p["prefetch_factor"]))
                steps = timed_batches(kind, c, p["model_steps"], batch_size=p["batch_size"],
                                      prefetch_factor=p["prefetch_factor"], factor=p["window_factor"])
                n_model = (warm + steps + 1) * p["batch_size"]
                order = rng.permutation(len(files))[:n_model].tolist()
                pr = pagecache.purge([files[i] for i in order], p["purge_method"])
                mk = make_loader(kind, files, order, batch_size=p["batch_size"], out_size=p["out_size"],
                                 concurrency=c, decoder=dec, device=device,
                                 prefetch_factor=p["prefetch_factor"], nice=f_nice, share=share or 0.0)
                try:
                    row = feed_model(mk, run_steps, steps=steps, warmup=warm,
                                     classes=p["classes"])
                except Exception as e:
                    errors.append(_error(f"model fed by {LABELS[kind]}, concurrency {c}"
                                         + (f", nice {f_nice}" if f_nice else "")
                                         + (f", CPU share {share:.2f}" if share is not None else ""), e))
                    continue
                model_rows.append(dict(loader=kind, concurrency=c, decoder=dec, repeat=r, warm=warm, steps=steps,
                                       nice=f_nice, share=share, step=step_kind,
                                       resident_at_start=pr.after["fraction"],
                                       pct_of_ceiling=100 * row["images_per_s"] / ceiling["images_per_s"], **row))
        lap("moonshot")
    if hybrid["share"] is None and hybrid["skipped"] is None:
        hybrid["skipped"] = "no_moonshot"

    res.add("calibration", pd.DataFrame(calib))
    res.add("primitives", prim)
    res.add("ops", ops)
    res.add("loaders", lo)
    res.add("spdl_stages", pd.DataFrame(stage_rows))
    res.add("startup", pd.DataFrame(start_rows))
    res.add("epoch", pd.DataFrame(epoch_rows))
    res.add("epoch_memory", pd.DataFrame(memory_rows))
    res.add("ipc", pd.DataFrame(ipc_rows))
    res.add("model", pd.DataFrame(model_rows))
    res.metadata.update(
        device=device, cores=cores, decoders={k: {"ok": v[0], "note": v[1]} for k, v in status.items()},
        decoders_run=p["decoders"], concurrency=p["concurrency"], free_threading=ft,
        free_threaded_note=None if not ft["gil_enabled"] else (
            "this interpreter runs with the GIL (sys._is_gil_enabled() is True): the free-threaded section is "
            "skipped; run the chapter with a free-threaded build (python3.13t or 3.14t) to fill it"),
        image_bytes=dict(mean=float(sizes.mean()), min=int(sizes.min()), max=int(sizes.max()),
                         total=int(sizes.sum())),
        image_size=[p["width"], p["height"]], purge_methods=sorted(purge_methods),
        ceiling=ceiling, ceilings=ceilings, model_step=step_kind if ceiling else None, graph_note=graph_note,
        model=p["model"] if ceiling else None, moonshot_note=moon_why, errors=errors,
        model_worker_nice=nice, hybrid=hybrid, dataloader_decoder=dl_dec, dali=dali_status(),
        window_rule=dict(factor=p["window_factor"], whole_waves=True, threadpool="per image"), seconds=lap.seconds,
        torch_threads=torch.get_num_threads(), datasets={"photos": src.manifest})
    res.save(rd)
    return res


def run(params: Params | None = None, *, run_dir=None, progress: bool = True, **changes):
    """Run chapter 8's experiment with ``params`` (default: :class:`Params`, the notebook's defaults)
    changed by ``changes``, save the result to ``run_dir`` and return it."""
    p = (params or Params()).replace(**changes)
    return _measure(**p.as_dict(), run_dir=run_dir, progress=progress)
