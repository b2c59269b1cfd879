"""Chapter 8's shared pieces: names, the photo-like JPEG data set and the decoders."""

import hashlib
import io
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from datajourney.chapters.c08_threads_processes_gil.params import (  # noqa: F401 - the chapter's names, for the loaders
    AUTO_LOADER_MAX,
    CHAPTER,
    DECODERS,
    EXECUTORS,
    GPU_QUEUE_DEPTH,
    HYBRID_HEADROOM,
    HYBRID_STEP,
    LABELS,
    LOADERS,
    MAX_CONCURRENCY,
    MODEL_STEPS,
    OPS,
    START_METHODS,
    THREADED,
    WINDOW_FACTOR,
)
from datajourney.toolkit import datasets, images


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
        return False, f"FFmpeg libraries did not load: {first[:160]}"
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
        return False, f"torchvision decode_jpeg failed: {type(e).__name__}: {str(e)[:160]}"
    return True, "torchvision " + torchvision.__version__


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


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
