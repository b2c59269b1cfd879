"""Synthetic JPEG data sets for the training-loop chapter: one file per image (ImageFolder
layout) and the same images as MosaicML Streaming (MDS) shards.

Images are generated in parallel, deterministically (image ``i`` depends only on the seed
and ``i``), into a hidden temporary directory that is renamed into place once the manifest
is written, like every data set of :mod:`datajourney.datasets`. The MDS shards are written
with the ``mosaicml-streaming`` library's own ``MDSWriter`` from the ImageFolder files, so
both formats hold byte-identical JPEGs.
"""
from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from . import datasets
from .book.params import ParameterError, positive_int, writable_dir

#: ImageNet channel statistics, used by the "normalise" step of the light transforms.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
MAX_IMAGES = 10_000_000


def jpeg(seed: int, index: int, size: int, quality: int) -> bytes:
    """One synthetic JPEG: smooth colour gradients plus noise, so it compresses like a photo
    rather than like flat colour or pure noise."""
    from PIL import Image

    rng = np.random.default_rng([seed, index])
    yy, xx = np.mgrid[0:size, 0:size]
    base = np.stack([(xx * rng.uniform(0.2, 1)) % 256, (yy * rng.uniform(0.2, 1)) % 256,
                     ((xx + yy) * rng.uniform(0.1, 0.5)) % 256], axis=-1)
    img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
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

    @property
    def manifest(self) -> dict:
        import json

        return json.loads((self.root / datasets.MANIFEST).read_text())


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
    parent = writable_dir("data_dir", data_dir if data_dir is not None else datasets.ensure_default_dir())
    workers = workers or max(1, len(os.sched_getaffinity(0)))

    def write(tmp: Path, show: bool) -> str:
        from tqdm import tqdm

        for k in range(min(classes, n_images)):
            (tmp / f"class_{k:03d}").mkdir()
        chunk = 256
        jobs = [(str(tmp), range(s, min(s + chunk, n_images)), seed, size, quality, classes)
                for s in range(0, n_images, chunk)]
        digests = [""] * n_images
        with get_context("fork").Pool(workers) as pool, tqdm(total=n_images, desc="JPEG images", disable=not show,
                                                               leave=False) as bar:
            for part in pool.imap_unordered(_write_chunk, jobs):
                for i, d in part:
                    digests[i] = d
                bar.update(len(part))
        return hashlib.sha256("".join(digests).encode()).hexdigest()

    root = datasets.generate(parent, name, params, None, needed, write, progress)
    return ImageFolderSet(root, n_images, classes)


# --------------------------------------------------------------------------- MDS shards
def streaming_status() -> tuple[bool, str]:
    """Whether ``mosaicml-streaming`` can be imported here, and why not."""
    try:
        import streaming  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means the MDS half cannot run
        return False, (f"mosaicml-streaming cannot be imported ({type(e).__name__}: {e}); install it with "
                       "'pip install mosaicml-streaming' to run the MDS half; the ImageFolder half runs without it")
    return True, "mosaicml-streaming " + getattr(__import__("streaming"), "__version__", "?")


def mds_plan(folder_plan: tuple[str, dict, int]) -> tuple[str, dict, int]:
    """(directory name, manifest parameters, bytes on disk) of the MDS copy of an ImageFolder set.
    The source's name holds all its generation parameters, and generation is deterministic."""
    name, _, size = folder_plan
    return f"mds-{name}", {"kind": "mds", "source": name}, size


def mds_shards(src: ImageFolderSet, data_dir=None, *, progress: bool = True) -> Path:
    """Get (write with ``MDSWriter``, or reuse) MDS shards holding exactly ``src``'s JPEG bytes and labels."""
    ok, why = streaming_status()
    if not ok:
        raise RuntimeError(why)
    parent = writable_dir("data_dir", data_dir if data_dir is not None else datasets.ensure_default_dir())
    p = src.manifest["params"]
    name, params, _ = mds_plan(image_folder_plan(p["n_images"], p["size"], p["quality"], p["classes"], p["seed"]))
    size = src.manifest["bytes"]

    def write(tmp: Path, show: bool) -> str:
        from streaming import MDSWriter
        from tqdm import tqdm

        h = hashlib.sha256()
        with MDSWriter(out=str(tmp / "shards"), columns={"jpeg": "bytes", "label": "int"}, compression=None,
                       progress_bar=False) as w:
            for i in tqdm(range(src.n_images), desc="MDS shards", disable=not show, leave=False):
                data = src.path(i).read_bytes()
                w.write({"jpeg": data, "label": i % src.classes})
                h.update(hashlib.sha256(data).hexdigest().encode())
        return h.hexdigest()

    return datasets.generate(parent, name, params, size, 2 * size + (64 << 20), write, progress) / "shards"


# --------------------------------------------------------------------------- reading
def decode(data: bytes, out_size: int) -> torch.Tensor:
    """The light transforms: JPEG decode, resize to ``out_size``², scale to [0, 1], normalise."""
    from PIL import Image

    img = Image.open(io.BytesIO(data)).convert("RGB")
    if img.size != (out_size, out_size):
        img = img.resize((out_size, out_size), Image.BILINEAR)
    x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).float().div_(255)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (x - mean) / std


class ImageFolderDataset(Dataset):
    """One JPEG file per sample, opened and decoded on every access."""

    def __init__(self, src: ImageFolderSet, out_size: int = 224):
        self.files = [str(p) for p in src.files]
        self.classes = src.classes
        self.out_size = out_size

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            data = f.read()
        return decode(data, self.out_size), i % self.classes


def mds_dataset(shards: Path, out_size: int = 224, *, shuffle: bool = True, batch_size: int = 64, seed: int = 0):
    """The MDS shards read back with ``streaming.StreamingDataset``, decoded like the ImageFolder set."""
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class DecodedMDS(StreamingDataset):
        def __getitem__(self, i):
            s = super().__getitem__(i)
            return decode(s["jpeg"], out_size), int(s["label"])

    return DecodedMDS(local=str(shards), shuffle=shuffle, shuffle_seed=seed, batch_size=batch_size)
