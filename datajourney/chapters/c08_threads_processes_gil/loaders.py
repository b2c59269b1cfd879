"""Chapter 8, experiment 3: the end-to-end loaders (DataLoader, SPDL pipeline, thread pool, GPU
decoding, hybrid), their CPU and memory, and the timed windows."""

import math
import os
import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from functools import partial

import numpy as np
import torch
from torch.utils.data import Dataset

from datajourney.chapters.c08_threads_processes_gil.common import (  # noqa: F401
    GPU_QUEUE_DEPTH,
    HYBRID_HEADROOM,
    HYBRID_STEP,
    WINDOW_FACTOR,
    _read,
    collate,
    decode_item,
    decode_one,
)
from datajourney.toolkit import images

#: Batches the batch-decode pipeline (:func:`spdl_batch_iter`) keeps in its sink.
SINK = 2

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


def scale_filter(out_size: int) -> str:
    """The FFmpeg filter of the chapter's spdl.io decoding: bilinear scale to out_size², RGB."""
    return f"scale=w={out_size}:h={out_size}:flags=bilinear,format=pix_fmts=rgb24"


def load_chunk(out_size: int, items):
    """A list of (path, index) -> (uint8 (k, S, S, 3) tensor, indices): the files read, decoded and
    scaled by one ``spdl.io.load_image_batch`` call into one buffer (the lock released inside)."""
    import spdl.io

    paths, idx = zip(*items, strict=True)
    buf = spdl.io.load_image_batch(list(paths), width=None, height=None, pix_fmt=None,
                                   filter_desc=scale_filter(out_size))
    return spdl.io.to_torch(buf), torch.tensor(idx)


def _merge(chunks):
    xs, ids = zip(*chunks, strict=True)
    return torch.cat(xs), torch.cat(ids)


def _nchw(item):
    x, idx = item
    return x.permute(0, 3, 1, 2), idx


def spdl_batch_iter(files, order, *, batch_size: int, out_size: int, images_per_task: int, concurrency: int,
                    threads: int, transfer: bool = False, stages: SpdlStages | None = None,
                    loop=None):
    """SPDL's own way: source -> aggregate(``images_per_task``) -> decode (``load_chunk``,
    ``concurrency`` tasks at once) -> [aggregate + concatenate into a batch] -> NCHW view ->
    [heartbeat: ``loop``, a :class:`.paper.LoopProbe`] -> [copy to the GPU on SPDL's stream] -> sink,
    built on ``threads`` threads. Yields (uint8 images, indices), channels-last in memory; the SPDL
    question's consumer normalises them (:func:`.paper.normalise_batch`), the model's step does it on the GPU."""
    from spdl.pipeline import PipelineBuilder

    k = images_per_task
    src = [(str(files[int(i)]), int(i)) for i in order]
    b = (PipelineBuilder().add_source(src).aggregate(k, drop_last=False)
         .pipe(partial(load_chunk, out_size), concurrency=concurrency, output_order="input", name="decode"))
    if k < batch_size:
        b = b.aggregate(batch_size // k, drop_last=False).pipe(_merge, name="merge")
    b = b.pipe(_nchw, name="layout")
    if loop is not None:
        b = b.pipe(loop.tick, name="heartbeat")
    if transfer:
        import spdl.io

        b = b.pipe(spdl.io.transfer_tensor, name="transfer")
    pipe = b.add_sink(SINK).build(num_threads=threads, **(stages.build_kwargs if stages else {}))
    try:
        with pipe.auto_stop():
            yield from pipe.get_iterator(timeout=600)
    finally:
        if loop is not None:
            loop.stop = True


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
    ready: queue.Queue = queue.Queue(depth)
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
                    ready.put((x, idx, ev))
            ready.put(None)
        except BaseException as e:
            ready.put(e)
        finally:
            items.close()

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    try:
        while True:
            item = ready.get()
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
                ready.get_nowait()
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


def in_flight(kind: str, concurrency: int, *, batch_size: int, prefetch_factor: int = 2,
              images_per_task: int = 0) -> int:
    """How many batches a loader works on ahead of the consumer once it is full: the batches a
    timed window must skip so that it measures production, not a queue built up earlier
    (``images_per_task``: of the batch-decode pipeline, :func:`spdl_batch_iter`)."""
    if kind == "dataloader":
        return concurrency * prefetch_factor
    if kind == "threadpool":  # images in flight: one per thread and two batches ready
        return -(-concurrency // batch_size) + 2
    if kind in ("spdl", "spdl_prealloc"):  # items in the decode stage, the batch being aggregated, the sink's buffer
        return -(-concurrency // batch_size) + 1 + 4
    if kind == "spdl_batch":  # decode tasks in flight, the batch being merged (part-batch tasks), the sink
        k = images_per_task or batch_size
        return -(-concurrency * k // batch_size) + 1 + (1 if k < batch_size else 0) + SINK
    if kind == "nvjpeg":
        return GPU_QUEUE_DEPTH + 1
    if kind == "hybrid":  # the DataLoader's batches and those ready or in the producer
        return concurrency * prefetch_factor + GPU_QUEUE_DEPTH + 1
    raise ValueError(kind)


def wave(kind: str, concurrency: int, *, batch_size: int = 0, images_per_task: int = 0) -> int:
    """Batches a loader delivers together: a DataLoader's workers each make a whole batch and
    start in phase, so they finish in waves of ``concurrency`` batches; the batch-decode pipeline's
    tasks start together too (``concurrency`` × ``images_per_task`` images); the others make one
    image (or one batch) at a time."""
    if kind == "spdl_batch":
        return max(1, concurrency * (images_per_task or batch_size) // batch_size) if batch_size else 1
    return concurrency if kind in ("dataloader", "hybrid") else 1


def timed_batches(kind: str, concurrency: int, batches: int, *, batch_size: int, prefetch_factor: int = 2,
                  factor: int = WINDOW_FACTOR, images_per_task: int = 0) -> int:
    """Batches of a timed window: at least ``batches`` and ``factor`` times the loader's batches in
    flight, rounded up to whole waves. A window of a fraction of a wave more or less than whole
    waves counts a wave's batches in the time of fewer (or more) waves: its rate depends on where
    it falls; over whole waves, and many of them, it does not."""
    w = wave(kind, concurrency, batch_size=batch_size, images_per_task=images_per_task)
    n = max(batches, factor * in_flight(kind, concurrency, batch_size=batch_size, prefetch_factor=prefetch_factor,
                                        images_per_task=images_per_task))
    return -(-n // w) * w


def make_loader(kind: str, files, order, *, batch_size: int, out_size: int, concurrency: int, decoder: str,
                device: str, start_method: str = "fork", prefetch_factor: int = 2, stages: SpdlStages | None = None,
                nice: int = 0, share: float = 0.0, gpu_decode=None, shape: dict | None = None):
    """A loader of ``kind`` as a function that builds its iterator; ``shape`` ({"images_per_task", "threads"}):
    the batch-decode pipeline's tasks and thread pool."""
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
    if kind == "spdl_batch":
        return partial(spdl_batch_iter, files, order, batch_size=batch_size, out_size=out_size,
                       images_per_task=int(shape["images_per_task"]), concurrency=concurrency,
                       threads=int(shape["threads"]), transfer=cuda, stages=stages)
    if kind == "threadpool":
        return partial(threadpool_iter, files, order, batch_size=batch_size, out_size=out_size,
                       concurrency=concurrency, decoder=decoder, pin=cuda)
    if kind == "nvjpeg":
        return partial(nvjpeg_iter, files, order, batch_size=batch_size, out_size=out_size,
                       read_threads=concurrency, device=device, gpu_decode=gpu_decode)
    raise ValueError(kind)
