"""Synthetic JPEG data sets for the training-loop chapter: one file per image (ImageFolder
layout) and the same images as MosaicML Streaming (MDS) shards.

Images are generated in parallel, deterministically (image ``i`` depends only on the seed
and ``i``), into a hidden temporary directory that is renamed into place once the manifest
is written, like every data set of :mod:`datajourney.toolkit.datasets`. The MDS shards are written
with the ``mosaicml-streaming`` library's own ``MDSWriter`` from the ImageFolder files, so
both formats hold byte-identical JPEGs.

Reading is instrumented: every sample carries the time it spent in each stage (read,
decode, normalise) and every batch the time of its collation and pinning, so that a
training loop can split its data wait into stages (:class:`Batch`). A JPEG that cannot be
decoded raises :class:`CorruptImageError` naming its file (or MDS shard and sample).
"""
from __future__ import annotations

import ctypes
import hashlib
import io
import os
import signal
import time
from dataclasses import dataclass
from functools import cached_property
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from datajourney.core.params import MAX_IMAGES, ParameterError, positive_int
from datajourney.toolkit import datasets
from datajourney.toolkit.imagenet import MEAN, STD


def jpeg(seed: int, index: int, size: int, quality: int) -> bytes:
    """One synthetic JPEG: smooth colour gradients plus noise, so it compresses like a photo
    rather than like flat colour or pure noise. Pixel (y, x) is
    ``clip([x·u0 mod 256, y·u1 mod 256, (x+y)·u2 mod 256] + N(0, 12), 0, 255)`` as uint8, with
    u0, u1, u2 and the noise drawn in that order from ``default_rng([seed, index])``. Each
    gradient is computed once along its axis (or diagonal) and broadcast, and the noise is
    drawn as standard normals scaled in place: the same float64 numbers as drawing
    ``normal(0, 12)`` and adding a full gradient image, at a fraction of the cost."""
    from PIL import Image

    rng = np.random.default_rng([seed, index])
    u0, u1, u2 = rng.uniform(0.2, 1), rng.uniform(0.2, 1), rng.uniform(0.1, 0.5)
    i = np.arange(size)
    img = rng.standard_normal((size, size, 3))
    img *= 12
    img[:, :, 0] += (i * u0) % 256
    img[:, :, 1] += ((i * u1) % 256)[:, None]
    img[:, :, 2] += ((np.arange(2 * size - 1) * u2) % 256)[i[:, None] + i[None, :]]
    np.clip(img, 0, 255, out=img)
    buf = io.BytesIO()
    Image.fromarray(img.astype(np.uint8)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def _bytes_per_image(size: int) -> int:
    """A generous estimate of one JPEG on disk, for the free-space check."""
    return max(4096, size * size * 3 // 4) + 4096


def image_folder_plan(n_images: int, size: int, quality: int, classes: int, seed: int) -> tuple[str, dict, int]:
    positive_int("n_images", n_images, maximum=MAX_IMAGES)
    positive_int("image_size", size, maximum=4096)
    positive_int("classes", classes, maximum=100_000)
    if not 1 <= quality <= 95:
        raise ParameterError("jpeg_quality", quality, "an integer from 1 to 95")
    params = {"kind": "image_folder", "n_images": n_images, "size": size, "quality": quality, "classes": classes,
              "seed": seed}
    return f"imagefolder-{n_images}x{size}-q{quality}-c{classes}-s{seed}", params, n_images * _bytes_per_image(size)


@dataclass(frozen=True)
class ImageFolderSet:
    """``root/class_KKK/IIIIIIII.jpg``; image ``i`` belongs to class ``i % classes``."""

    root: Path
    n_images: int
    classes: int

    def path(self, i: int) -> Path:
        return self.root / f"class_{i % self.classes:03d}" / f"{i:08d}.jpg"

    @property
    def files(self) -> list[Path]:
        return [self.path(i) for i in range(self.n_images)]

    @cached_property
    def names(self) -> list[str]:
        """Every image's path as text, in index order, built once per set (as many ``Path`` objects
        cost about a second per 100,000 images, which every loader of a run would pay again)."""
        root = str(self.root)
        return [f"{root}/class_{i % self.classes:03d}/{i:08d}.jpg" for i in range(self.n_images)]

    @property
    def manifest(self) -> dict:
        import json

        return json.loads((self.root / datasets.MANIFEST).read_text())


def die_with_parent(parent: int | None = None) -> None:
    """Make this (child) process receive SIGTERM when its parent dies (Linux ``prctl``
    ``PR_SET_PDEATHSIG``), and exit now if the parent is already gone. Used as the
    initializer of every pool this package starts, so killing a run (runner, kernel or
    ``kill -9``) never leaves orphaned workers behind. Elsewhere it does nothing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: no prctl
        return
    if parent is not None and os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _write_chunk(args) -> list[tuple[int, str]]:
    tmp, indices, seed, size, quality, classes = args
    out = []
    for i in indices:
        data = jpeg(seed, i, size, quality)
        p = Path(tmp) / f"class_{i % classes:03d}" / f"{i:08d}.jpg"
        p.write_bytes(data)
        out.append((i, hashlib.sha256(data).hexdigest()))
    return out


def image_folder(data_dir=None, *, n_images: int, size: int = 224, quality: int = 80, classes: int = 10,
                 seed: int = 0, workers: int | None = None, progress: bool = True) -> ImageFolderSet:
    """Get (generate in parallel, or reuse) ``n_images`` synthetic JPEGs in an ImageFolder layout."""
    name, params, needed = image_folder_plan(n_images, size, quality, classes, seed)
    parent = datasets.parent_dir(data_dir)
    workers = workers or max(1, len(os.sched_getaffinity(0)))

    def write(tmp: Path, show: bool) -> str:
        return write_folder(tmp, n_images, classes, _write_chunk, (seed, size, quality, classes), chunk=256,
                            workers=workers, show=show, desc="JPEG images")

    root = datasets.generate(parent, name, params, None, needed, write, progress)
    return ImageFolderSet(root, n_images, classes)


def write_folder(tmp: Path, n_images: int, classes: int, writer, args: tuple, *, chunk: int, workers: int,
                 show: bool, desc: str) -> str:
    """Write an ImageFolder layout of ``n_images`` into ``tmp`` with a pool of forked ``workers``:
    ``writer((str(tmp), range_of_indices, *args))`` writes a chunk and returns ``[(index, digest)]``.
    Returns the data set's digest (over the images in index order) for its manifest."""
    from tqdm import tqdm

    for k in range(min(classes, n_images)):
        (tmp / f"class_{k:03d}").mkdir()
    jobs = [(str(tmp), range(s, min(s + chunk, n_images)), *args) for s in range(0, n_images, chunk)]
    digests = [""] * n_images
    pool = get_context("fork").Pool(workers, initializer=die_with_parent, initargs=(os.getpid(),))
    with pool, tqdm(total=n_images, desc=desc, disable=not show, leave=False) as bar:
        for part in pool.imap_unordered(writer, jobs):
            for i, d in part:
                digests[i] = d
            bar.update(len(part))
    return hashlib.sha256("".join(digests).encode()).hexdigest()


# --------------------------------------------------------------------------- MDS shards
def streaming_status() -> tuple[bool, str]:
    """Whether ``mosaicml-streaming`` can be imported here, and why not."""
    import warnings

    try:
        with warnings.catch_warnings():  # its import of tqdm.auto warns about notebook widgets
            warnings.simplefilter("ignore")
            import streaming  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means the MDS half cannot run
        why = "it is not installed" if isinstance(e, ModuleNotFoundError) else f"its import failed: {e}"
        return False, (f"mosaicml-streaming cannot be imported ({why}); install it with "
                       "'pip install mosaicml-streaming' to run the MDS half; the ImageFolder half runs without it")
    return True, "mosaicml-streaming " + getattr(__import__("streaming"), "__version__", "?")


#: Shard size limit of the MDS copy: ``MDSWriter``'s default (64 MiB).
MDS_SIZE_LIMIT = 1 << 26
#: The MDS columns: the JPEG's bytes and its label.
MDS_COLUMNS = {"jpeg": "bytes", "label": "int"}


def mds_plan(folder_plan: tuple[str, dict, int], size_limit: int = MDS_SIZE_LIMIT) -> tuple[str, dict, int]:
    """(directory name, manifest parameters, bytes on disk) of the MDS copy of an ImageFolder set.
    The source's name holds all its generation parameters, and generation is deterministic."""
    name, _, size = folder_plan
    params = {"kind": "mds", "source": name}
    if size_limit != MDS_SIZE_LIMIT:
        params["size_limit"] = size_limit
        return f"mds-{name}-l{size_limit}", params, size
    return f"mds-{name}", params, size


def mds_shards(src: ImageFolderSet, data_dir=None, *, progress: bool = True, workers: int | None = None,
               size_limit: int = MDS_SIZE_LIMIT) -> Path:
    """Get (write with ``MDSWriter``, or reuse) MDS shards holding exactly ``src``'s JPEG bytes and
    labels. With more than one worker the shards are written in parallel (:func:`write_mds`), byte
    for byte what one ``MDSWriter`` writes from all the samples in order."""
    ok, why = streaming_status()
    if not ok:
        raise RuntimeError(why)
    parent = datasets.parent_dir(data_dir)
    p = src.manifest["params"]
    source = src.source_plan() if hasattr(src, "source_plan") else \
        image_folder_plan(p["n_images"], p["size"], p["quality"], p["classes"], p["seed"])  # a reader's own images
    name, params, _ = mds_plan(source, size_limit)
    size = src.manifest["bytes"]
    workers = workers or max(1, len(os.sched_getaffinity(0)))

    def write(tmp: Path, show: bool) -> str:
        return write_mds(src, tmp / "shards", size_limit=size_limit, workers=workers, show=show)

    return datasets.generate(parent, name, params, size, 2 * size + (64 << 20), write, progress) / "shards"


def mds_layout(sizes, size_limit: int, *, shard_bytes: int, sample_bytes: int) -> list[tuple[int, int]]:
    """``MDSWriter``'s shards for samples of ``sizes`` encoded bytes, as (first, end) index ranges:
    a shard starts at ``shard_bytes`` (its header), each sample adds its size plus
    ``sample_bytes`` (its offset), and a sample that would take the shard past ``size_limit``
    starts the next one (the rule of the library's ``Writer.write``; an empty range is a shard
    the library writes without samples)."""
    out, first, total = [], 0, shard_bytes
    for i, n in enumerate(sizes):
        s = n + sample_bytes
        if size_limit and size_limit < total + s:
            out.append((first, i))
            first, total = i, shard_bytes
        total += s
    if first < len(sizes):
        out.append((first, len(sizes)))
    return out


def _mds_writer(out, size_limit: int):
    from streaming import MDSWriter

    return MDSWriter(out=str(out), columns=MDS_COLUMNS, compression=None, size_limit=size_limit,
                     progress_bar=False)


def _write_mds_part(args) -> tuple[int, list[str], list[dict]]:
    """Write samples ``first`` to ``end`` of an ImageFolder set with one ``MDSWriter`` into ``out``:
    (first, the samples' sha256 digests, the writer's shard entries)."""
    import json

    names, classes, first, end, out, size_limit = args
    digests = []
    with _mds_writer(out, size_limit) as w:
        for i in range(first, end):
            data = Path(names[i - first]).read_bytes()
            w.write({"jpeg": data, "label": i % classes})
            digests.append(hashlib.sha256(data).hexdigest())
    return first, digests, json.loads((Path(out) / "index.json").read_text())["shards"]


def write_mds(src: ImageFolderSet, out: Path, *, size_limit: int = MDS_SIZE_LIMIT, workers: int = 1,
              show: bool = False) -> str:
    """Write ``src`` as MDS shards into ``out`` (which must not exist); returns the data set's digest
    (over the samples' sha256, in index order). ``MDSWriter`` writes alone, one sample after the
    other. With several ``workers`` the shard boundaries are first laid out from the files' sizes by
    the library's own rule (:func:`mds_layout`, with the header and per-sample sizes an
    ``MDSWriter`` reports), then each shard is written by its own ``MDSWriter`` in a forked pool,
    renamed to its place in the sequence, and the index is written as the library writes it: the
    same bytes as one writer, in a fraction of the time."""
    import json
    import shutil

    from tqdm import tqdm

    out = Path(out)
    h = hashlib.sha256()
    if workers > 1:
        probe = out.parent / f".{out.name}-probe"
        w = _mds_writer(probe, size_limit)
        shard_bytes, sample_bytes = w.extra_bytes_per_shard, w.extra_bytes_per_sample
        head = len(w.encode_sample({"jpeg": b"", "label": 0}))
        w.finish()
        shutil.rmtree(probe)
        sizes = [head + os.stat(src.path(i)).st_size for i in range(src.n_images)]
        layout = mds_layout(sizes, size_limit, shard_bytes=shard_bytes, sample_bytes=sample_bytes)
        if len(layout) < 2 or any(a == b for a, b in layout):  # one shard, or a sample above the limit
            workers = 1
    if workers <= 1:
        with _mds_writer(out, size_limit) as w:
            for i in tqdm(range(src.n_images), desc="MDS shards", disable=not show, leave=False):
                data = src.path(i).read_bytes()
                w.write({"jpeg": data, "label": i % src.classes})
                h.update(hashlib.sha256(data).hexdigest().encode())
        return h.hexdigest()
    out.mkdir()
    parts = out / ".parts"
    jobs = [(src.names[a:b], src.classes, a, b, str(parts / f"{k:05d}"), size_limit) for k, (a, b) in enumerate(layout)]
    done = {}
    pool = get_context("fork").Pool(min(workers, len(jobs)), initializer=die_with_parent, initargs=(os.getpid(),))
    with pool, tqdm(total=src.n_images, desc="MDS shards", disable=not show, leave=False) as bar:
        for first, digests, shards in pool.imap_unordered(_write_mds_part, jobs):
            done[first] = (digests, shards)
            bar.update(len(digests))
    entries = []
    for k, (a, b) in enumerate(layout):
        digests, shards = done[a]
        if len(shards) != 1 or shards[0]["samples"] != b - a:
            raise RuntimeError(f"MDS shard {k}: the writer split samples {a}-{b - 1} into {len(shards)} shard(s), "
                               "not one as laid out")
        entry = shards[0]
        name = f"shard.{k:05}.mds"
        os.rename(parts / f"{k:05d}" / entry["raw_data"]["basename"], out / name)
        entry["raw_data"]["basename"] = name
        entries.append(entry)
        for d in digests:
            h.update(d.encode())
    shutil.rmtree(parts)
    with open(out / "index.json", "w") as f:  # as MDSWriter writes its index
        json.dump({"version": 2, "shards": entries}, f, sort_keys=True)
    return h.hexdigest()


# --------------------------------------------------------------------------- reading
#: The per-sample stages a :class:`Sample` times, and the per-batch ones a :class:`Batch` adds.
SAMPLE_STAGES = ("read", "decode", "normalise")
BATCH_STAGES = ("collate", "pin")


class CorruptImageError(OSError):
    """A stored image cannot be decoded; the message names the file (or shard and sample)."""


def decode_rgb(data: bytes, out_size: int) -> np.ndarray:
    """JPEG bytes -> an ``out_size``² RGB uint8 array (H, W, C): decode, convert, resize.
    A truncated or corrupt image raises :class:`CorruptImageError`."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(data))
        img = img.convert("RGB")
        if img.size != (out_size, out_size):
            img = img.resize((out_size, out_size), Image.BILINEAR)
        return np.asarray(img)
    except (OSError, ValueError, SyntaxError, UnidentifiedImageError) as e:
        raise CorruptImageError(f"cannot decode the JPEG ({len(data):,} bytes): {type(e).__name__}: {e}") from None


def to_tensor(rgb: np.ndarray, *, normalise: bool = True) -> torch.Tensor:
    """(H, W, C) uint8 -> (C, H, W): float32 scaled to [0, 1] and normalised with the ImageNet
    statistics (``normalise=True``), or the uint8 values unchanged, to be normalised on the GPU."""
    x = torch.from_numpy(rgb.copy()).permute(2, 0, 1)
    if not normalise:
        return x.contiguous()
    x = x.float().div_(255)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (x - mean) / std


def decode(data: bytes, out_size: int) -> torch.Tensor:
    """The light transforms: JPEG decode, resize to ``out_size``², scale to [0, 1], normalise."""
    return to_tensor(decode_rgb(data, out_size))


_AFFINE: dict = {}


def normalise_on_device(x: torch.Tensor) -> torch.Tensor:
    """A uint8 (N, C, H, W) batch already on its device -> normalised float32, in two kernels
    (conversion, then one multiply-add with a per-channel scale and shift kept on the device)."""
    if x.device not in _AFFINE:
        mean = torch.tensor(MEAN, dtype=torch.float64).view(1, 3, 1, 1)
        std = torch.tensor(STD, dtype=torch.float64).view(1, 3, 1, 1)
        _AFFINE[x.device] = ((-mean / std).float().to(x.device), (1.0 / (255.0 * std)).float().to(x.device))
    shift, scale = _AFFINE[x.device]
    return torch.addcmul(shift, x.float(), scale)


class Sample(tuple):
    """``(x, label, stages)``: ``stages`` is (read, decode, normalise) in ms."""

    __slots__ = ()


def timed_sample(read, out_size: int, where, *, uint8: bool = False) -> Sample:
    """Run the stages of one sample, timing each with the host clock: ``read()`` returns the
    stored bytes and the label; then decode (+ resize) and normalise (skipped for uint8
    output). ``where`` (text, or a function giving it) names the sample if it cannot be decoded."""
    t0 = time.perf_counter()
    data, label = read()
    t1 = time.perf_counter()
    try:
        rgb = decode_rgb(data, out_size)
    except CorruptImageError as e:
        raise CorruptImageError(f"{where() if callable(where) else where}: {e}") from None
    t2 = time.perf_counter()
    x = to_tensor(rgb, normalise=not uint8)
    t3 = time.perf_counter()
    return Sample((x, label, ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)))


class Batch:
    """A collated batch plus where its time went: the sums of its samples' stages, the time
    to collate it, the time to pin it, the process that made it, and when (host clock,
    ``time.perf_counter``, which is the same monotonic clock in every process of a machine)
    it was collated and pinned. DataLoader pins a batch by calling its ``pin_memory``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, stages: dict):
        self.x, self.y, self.stages = x, y, stages

    def pin_memory(self, device=None):
        t0 = time.perf_counter()
        x, y = self.x.pin_memory(), self.y.pin_memory()
        t1 = time.perf_counter()
        return Batch(x, y, dict(self.stages, pin=(t1 - t0) * 1e3, t_pinned=t1))

    def __iter__(self):  # x, y = batch
        return iter((self.x, self.y))


def collate(samples) -> Batch:
    """Stack samples into a :class:`Batch`, timing the stacking. In a DataLoader worker
    ``default_collate`` writes the stacked tensor straight into shared memory."""
    from torch.utils.data import default_collate, get_worker_info

    t0 = time.perf_counter()
    x = default_collate([s[0] for s in samples])
    y = torch.tensor([s[1] for s in samples])
    t1 = time.perf_counter()
    sums = [sum(s[2][k] for s in samples) for k in range(len(SAMPLE_STAGES))]
    info = get_worker_info()
    stages = dict(zip(SAMPLE_STAGES, sums, strict=True), collate=(t1 - t0) * 1e3, pin=0.0, t_collated=t1,
                  t_pinned=None, worker=-1 if info is None else info.id, pid=os.getpid())
    return Batch(x, y, stages)


class ImageFolderDataset(Dataset):
    """One JPEG file per sample, opened, read and decoded on every access. Items are
    :class:`Sample` s (use :func:`collate`); ``uint8=True`` leaves normalisation to the GPU."""

    def __init__(self, src: ImageFolderSet, out_size: int = 224, *, uint8: bool = False):
        self.files = src.names
        self.classes = src.classes
        self.out_size = out_size
        self.uint8 = uint8

    def __len__(self):
        return len(self.files)

    def read(self, i: int) -> bytes:
        with open(self.files[i], "rb") as f:
            return f.read()

    def __getitem__(self, i):
        return timed_sample(lambda: (self.read(i), i % self.classes), self.out_size, self.files[i], uint8=self.uint8)


def mds_dataset(shards: Path, out_size: int = 224, *, shuffle: bool = True, batch_size: int = 64, seed: int = 0,
                uint8: bool = False, decoded: bool = True):
    """The MDS shards read back with ``streaming.StreamingDataset``, decoded like the ImageFolder
    set (items are :class:`Sample` s); ``decoded=False`` gives the library's raw samples."""
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class DecodedMDS(StreamingDataset):
        def where(self, i: int) -> str:
            shard_id, j = self.spanner[i]
            shard = self.shards[shard_id]
            path = Path(shard.dirname) / shard.split / shard.raw_data.basename
            return f"MDS shard {path}, sample {j} of the shard (index {i})"

        def __getitem__(self, i):
            def read():
                sample = super(DecodedMDS, self).__getitem__(i)
                return sample["jpeg"], int(sample["label"])

            return timed_sample(read, out_size, lambda: self.where(i), uint8=uint8)

    cls = DecodedMDS if decoded else StreamingDataset
    return cls(local=str(shards), shuffle=shuffle, shuffle_seed=seed, batch_size=batch_size)


def stop_streaming(ds) -> None:
    """Stop the background threads a ``StreamingDataset`` starts in the process that iterates it
    (they poll every few milliseconds until the epoch's end otherwise, also after the loop that
    iterated it has moved on). Anything else: nothing to do."""
    it = getattr(ds, "_iterator", None)
    if it is not None:
        it.non_blocking_exit()
    ex = getattr(ds, "_executor", None)
    if ex is not None:
        ex.shutdown(wait=True, cancel_futures=True)
        del ds._executor
