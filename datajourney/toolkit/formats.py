"""The same images in the storage formats people train from, each written by its own library and read back
through a PyTorch ``DataLoader``: one file per image (ImageFolder, the baseline), MosaicML MDS shards,
WebDataset tar shards, a Hugging Face ``datasets`` Arrow table saved to disk, LitData chunks and a Parquet
file read with ``pyarrow``.

Every copy holds the same three fields per image, in the source's order: its ``index``, its encoded bytes
(``jpeg``) and its ``label``. Shards, chunks and row groups hold ``per_shard`` images each, so that the
formats split the set alike. A reader yields :class:`~datajourney.toolkit.images.Sample` s (read, decode and
normalise timed per image, as chapter 7's loaders do), so that the same collate function and training step
consume them. A library that is missing or cannot be imported is reported by :func:`status` as
"not measured: ... is not installed", never raised.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from datajourney.toolkit import images

#: The formats, the baseline first.
FORMATS = ("imagefolder", "mds", "webdataset", "hf_datasets", "litdata", "parquet")
#: Each format's library: (module imported, distribution a reader installs).
LIBRARIES = {"mds": ("streaming", "mosaicml-streaming"), "webdataset": ("webdataset", "webdataset"),
             "hf_datasets": ("datasets", "datasets"), "litdata": ("litdata", "litdata"),
             "parquet": ("pyarrow", "pyarrow")}
#: How each format shuffles as read here: over the whole set ("global"), or shards in random order with the
#: samples mixed in a buffer ("buffer") or within the shard, chunk or row group that holds them ("shard").
SHUFFLE = {"imagefolder": "global", "mds": "global", "webdataset": "buffer", "hf_datasets": "global",
           "litdata": "shard", "parquet": "shard"}
#: Whether the format's reader fetches image ``i`` by its index.
INDEXED = {"imagefolder": True, "mds": True, "webdataset": False, "hf_datasets": True, "litdata": True,
           "parquet": True}
#: The largest shard, chunk or row group the automatic layout makes (MDSWriter's default size limit).
SHARD_BYTES = 64 << 20


def status(fmt: str) -> tuple[bool, str]:
    """(whether ``fmt`` can be written and read here, the library's version or why it is not measured)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "imagefolder":
        return True, "plain files"
    module, dist = LIBRARIES[fmt]
    if importlib.util.find_spec(module) is None:
        return False, f"not measured: {dist} is not installed (pip install {dist})"
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means the format cannot run here
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return False, f"not measured: {dist} cannot be imported ({type(e).__name__}: {first})"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return True, f"{dist} {version(dist)}"
    except PackageNotFoundError:
        return True, dist


# --------------------------------------------------------------------------- the images
@dataclass(frozen=True)
class Source:
    """The images to convert, in index order: their files (only ever read) and labels."""

    files: tuple[str, ...]
    labels: tuple[int, ...]

    def __post_init__(self):
        if len(self.files) != len(self.labels):
            raise ValueError(f"{len(self.files)} files against {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.files)

    def read(self, i: int) -> bytes:
        with open(self.files[i], "rb") as f:
            return f.read()

    def item(self, i: int) -> tuple[bytes, int]:
        return self.read(i), int(self.labels[i])


def auto_per_shard(n: int, total_bytes: int, workers: int) -> int:
    """Images per shard: enough shards that every worker of the largest count gets at least two, and none
    above :data:`SHARD_BYTES`."""
    shards = max(2 * max(1, workers), math.ceil(total_bytes / SHARD_BYTES))
    return max(1, math.ceil(n / shards))


@dataclass
class Stored:
    """One copy of the images: its format, where it is, every file it consists of, its layout and what the
    conversion cost (wall seconds, bytes on disk)."""

    fmt: str
    root: Path | None
    files: list[str]
    n: int
    per_shard: int
    seconds: float
    bytes: int
    source: Source | None = field(default=None, repr=False)

    @property
    def shards(self) -> int:
        return math.ceil(self.n / self.per_shard) if self.fmt != "imagefolder" else self.n


def _files_under(root: Path) -> list[str]:
    return sorted(str(p) for p in Path(root).rglob("*") if p.is_file())


def convert(fmt: str, source: Source, out: Path, *, per_shard: int) -> Stored:
    """Write ``source`` as ``fmt`` into ``out`` (a new directory) with the library's own writer, timed; the
    ImageFolder baseline is the source files themselves (no conversion)."""
    if fmt == "imagefolder":
        size = sum(os.stat(f).st_size for f in source.files)
        return Stored(fmt, None, list(source.files), len(source), 1, 0.0, size, source)
    out = Path(out)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    WRITERS[fmt](source, out, per_shard)
    seconds = time.perf_counter() - t0
    files = _files_under(out)
    return Stored(fmt, out, files, len(source), per_shard, seconds, sum(os.stat(f).st_size for f in files), source)


def _write_mds(source: Source, out: Path, per_shard: int) -> None:
    from streaming import MDSWriter

    mean = sum(os.stat(f).st_size for f in source.files[:256]) / min(256, len(source))
    limit = max(1 << 12, int(per_shard * (mean + 64)))
    with MDSWriter(out=str(out), columns={"index": "int", "jpeg": "bytes", "label": "int"}, compression=None,
                   size_limit=limit, progress_bar=False) as w:
        for i in range(len(source)):
            data, label = source.item(i)
            w.write({"index": i, "jpeg": data, "label": label})


def _write_webdataset(source: Source, out: Path, per_shard: int) -> None:
    import webdataset as wds

    with wds.ShardWriter(str(out / "%06d.tar"), maxcount=per_shard, maxsize=1 << 40, verbose=0) as sink:
        for i in range(len(source)):
            data, label = source.item(i)
            sink.write({"__key__": f"{i:08d}", "jpg": data, "cls": str(label).encode()})


def _arrow_schema():
    import pyarrow as pa

    return pa.schema([("index", pa.int64()), ("jpeg", pa.binary()), ("label", pa.int64())])


def _arrow_batches(source: Source, per_shard: int):
    import pyarrow as pa

    schema = _arrow_schema()
    for a in range(0, len(source), per_shard):
        idx = list(range(a, min(a + per_shard, len(source))))
        items = [source.item(i) for i in idx]
        yield pa.record_batch([pa.array(idx, pa.int64()), pa.array([d for d, _ in items], pa.binary()),
                               pa.array([lab for _, lab in items], pa.int64())], schema=schema)


def _hf_rows(source: Source):
    for i in range(len(source)):
        data, label = source.item(i)
        yield {"index": i, "jpeg": data, "label": label}


def _write_hf(source: Source, out: Path, per_shard: int) -> None:
    import datasets

    datasets.disable_progress_bars()
    features = datasets.Features({"index": datasets.Value("int64"), "jpeg": datasets.Value("binary"),
                                  "label": datasets.Value("int64")})
    cache = out.parent / f".{out.name}-cache"
    try:
        ds = datasets.Dataset.from_generator(partial(_hf_rows, source), features=features, cache_dir=str(cache),
                                             writer_batch_size=per_shard)
        mean = ds.data.nbytes / max(1, len(ds))
        ds.save_to_disk(str(out), max_shard_size=max(1 << 16, int(per_shard * mean * 1.05)))
        del ds
    finally:
        import shutil

        shutil.rmtree(cache, ignore_errors=True)


def _lit_item(source: Source, i: int) -> dict:
    data, label = source.item(i)
    return {"index": i, "jpeg": data, "label": label}


def _write_litdata(source: Source, out: Path, per_shard: int) -> None:
    import contextlib
    import io

    import litdata

    with contextlib.redirect_stdout(io.StringIO()):  # its note about Lightning's cloud goes to stdout
        litdata.optimize(fn=partial(_lit_item, source), inputs=list(range(len(source))), output_dir=str(out),
                         chunk_size=per_shard, num_workers=1, start_method="fork", verbose=False,
                         reorder_files=False, keep_data_ordered=True, mode="overwrite")


def _write_parquet(source: Source, out: Path, per_shard: int) -> None:
    import pyarrow.parquet as pq

    with pq.ParquetWriter(str(out / "images.parquet"), _arrow_schema()) as w:
        for batch in _arrow_batches(source, per_shard):
            w.write_batch(batch, row_group_size=per_shard)


WRITERS: dict[str, Callable[[Source, Path, int], None]] = {
    "mds": _write_mds, "webdataset": _write_webdataset, "hf_datasets": _write_hf, "litdata": _write_litdata,
    "parquet": _write_parquet}


# --------------------------------------------------------------------------- index access
class _Parquet:
    """Row ``i`` of a Parquet file: the row group that holds it is read whole (Parquet's smallest read)."""

    def __init__(self, path: str):
        import pyarrow.parquet as pq

        self.path = path
        self.file = pq.ParquetFile(path)
        sizes = [self.file.metadata.row_group(g).num_rows for g in range(self.file.num_row_groups)]
        self.starts = np.cumsum([0] + sizes)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def group(self, g: int):
        return self.file.read_row_group(g, columns=["index", "jpeg", "label"])

    def get(self, i: int) -> tuple[bytes, int]:
        g = int(np.searchsorted(self.starts, i, side="right") - 1)
        t = self.group(g)
        j = i - int(self.starts[g])
        return t.column("jpeg")[j].as_py(), int(t.column("label")[j].as_py())


def _litdata(root: Path, **kw):
    import litdata

    return litdata.StreamingDataset(str(root), **kw)


def accessor(stored: Stored) -> Callable[[int], tuple[bytes, int]] | None:
    """A function that fetches image ``i`` (its bytes and label) through the format's own reader, or None
    where the format reads only in sequence (WebDataset's tar streams)."""
    fmt = stored.fmt
    if fmt == "imagefolder":
        return stored.source.item
    if fmt == "mds":
        ds = images.mds_dataset(stored.root, shuffle=False, decoded=False)

        def mds(i):
            s = ds.get_item(i)
            return s["jpeg"], int(s["label"])
        mds.dataset = ds
        return mds
    if fmt == "hf_datasets":
        return _HF(str(stored.root))
    if fmt == "litdata":
        ds = _litdata(stored.root)

        def lit(i):
            r = ds[int(i)]
            return r["jpeg"], int(r["label"])
        return lit
    if fmt == "parquet":
        return _Parquet(str(stored.root / "images.parquet")).get
    return None


def close(obj) -> None:
    """Stop what a reader left running (streaming's threads) for a dataset or an accessor."""
    images.stop_streaming(getattr(obj, "dataset", obj))


def release() -> None:
    """Let go of the memory maps that finished readers still hold, so that a purge can drop their pages (a
    mapped page stays in the page cache): LitData's item loaders outlive the datasets that iterated (a method
    cache keeps them), each with the chunk files it mapped, which its ``close`` unmaps."""
    import contextlib
    import gc
    import sys

    gc.collect()
    if "litdata.streaming.item_loader" not in sys.modules:
        return
    for obj in gc.get_objects():
        if type(obj).__module__ == "litdata.streaming.item_loader" and callable(getattr(obj, "close", None)):
            with contextlib.suppress(Exception):
                obj.close(0)


# --------------------------------------------------------------------------- DataLoader datasets
class Indexed(Dataset):
    """A map-style dataset over any function that fetches image ``i``: decoded and timed like chapter 7's
    loaders (:func:`~datajourney.toolkit.images.timed_sample`)."""

    def __init__(self, get: Callable[[int], tuple[bytes, int]], n: int, out_size: int, *, uint8: bool = False,
                 where: str = "image"):
        self.get, self.n, self.out_size, self.uint8, self.where = get, n, out_size, uint8, where

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return images.timed_sample(lambda: self.get(i), self.out_size, lambda: f"{self.where} {i}", uint8=self.uint8)


class _HF:
    """Image ``i`` of a saved ``datasets`` table; the table is opened (memory-mapped) in each process that reads."""

    def __init__(self, root: str):
        self.root, self.ds = root, None

    def __call__(self, i: int) -> tuple[bytes, int]:
        if self.ds is None:
            import datasets

            self.ds = datasets.load_from_disk(self.root)
        r = self.ds[int(i)]
        return r["jpeg"], int(r["label"])

    def __getstate__(self):
        return {"root": self.root, "ds": None}


class Streamed(IterableDataset):
    """An iterable dataset over a function that makes, for this worker, an iterator of ``(index, bytes,
    label)``: each image decoded and timed like :class:`Indexed`'s (the read is the wait for the next item)."""

    def __init__(self, items: Callable[[], Iterator[tuple[int, bytes, int]]], out_size: int, *, uint8: bool = False,
                 where: str = "sample"):
        self.items, self.out_size, self.uint8, self.where = items, out_size, uint8, where

    def __iter__(self):
        it = self.items()
        while True:
            t0 = time.perf_counter()
            try:
                i, data, label = next(it)
            except StopIteration:
                return
            fetch = (time.perf_counter() - t0) * 1e3
            s = images.timed_sample(lambda d=data, lab=label: (d, lab), self.out_size,
                                    lambda i=i: f"{self.where} {i}", uint8=self.uint8)
            yield images.Sample((s[0], s[1], (s[2][0] + fetch, s[2][1], s[2][2])))


def _wds_items(urls: list[str], seed: int, buffer: int, shuffle: bool) -> Iterator[tuple[int, bytes, int]]:
    import webdataset as wds

    ds = wds.WebDataset(urls, shardshuffle=len(urls) if shuffle else False, seed=seed, empty_check=False)
    if shuffle and buffer > 1:
        ds = ds.shuffle(buffer, seed=seed)
    for s in ds:
        yield int(s["__key__"]), s["jpg"], int(s["cls"])


def _lit_items(root: str, seed: int, shuffle: bool) -> Iterator[tuple[int, bytes, int]]:
    for s in _litdata(Path(root), shuffle=shuffle, seed=seed):
        yield int(s["index"]), s["jpeg"], int(s["label"])


def _parquet_items(path: str, seed: int, shuffle: bool) -> Iterator[tuple[int, bytes, int]]:
    """Row groups in a seeded random order, this worker's share of them (every W-th), each group's rows
    shuffled: the order of a row-group reader."""
    pf = _Parquet(path)
    info = get_worker_info()
    w, k = (1, 0) if info is None else (info.num_workers, info.id)
    rng = np.random.default_rng(seed)
    groups = rng.permutation(pf.file.num_row_groups) if shuffle else np.arange(pf.file.num_row_groups)
    for g in groups[k::w]:
        t = pf.group(int(g))
        idx, data, lab = t.column("index").to_pylist(), t.column("jpeg"), t.column("label").to_pylist()
        rows = np.random.default_rng([seed, int(g)]).permutation(len(idx)) if shuffle else range(len(idx))
        for j in rows:
            yield int(idx[j]), data[int(j)].as_py(), int(lab[j])


def _tar_urls(stored: Stored) -> list[str]:
    return [f for f in stored.files if f.endswith(".tar")]


def loader_dataset(stored: Stored, out_size: int, *, seed: int, batch_size: int, buffer: int,
                   uint8: bool = False, shuffle: bool = True):
    """(the dataset a ``DataLoader`` reads ``stored`` through, its sampler or None): a seeded random
    permutation over the whole set for the formats read by index, the library's own shuffle otherwise."""
    fmt = stored.fmt
    order = None
    if fmt in ("imagefolder", "hf_datasets"):
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(stored.n, generator=g).tolist() if shuffle else list(range(stored.n))
    if fmt == "imagefolder":
        return Indexed(stored.source.item, stored.n, out_size, uint8=uint8, where="file of image"), order
    if fmt == "hf_datasets":
        return Indexed(_HF(str(stored.root)), stored.n, out_size, uint8=uint8, where="Arrow row"), order
    if fmt == "mds":
        return images.mds_dataset(stored.root, out_size, shuffle=shuffle, batch_size=batch_size, seed=seed,
                                  uint8=uint8), None
    if fmt == "webdataset":
        items = partial(_wds_items, _tar_urls(stored), seed, buffer, shuffle)
        return Streamed(items, out_size, uint8=uint8, where="WebDataset sample"), None
    if fmt == "litdata":
        return Streamed(partial(_lit_items, str(stored.root), seed, shuffle), out_size, uint8=uint8,
                        where="LitData sample"), None
    if fmt == "parquet":
        return Streamed(partial(_parquet_items, str(stored.root / "images.parquet"), seed, shuffle), out_size,
                        uint8=uint8, where="Parquet row"), None
    raise ValueError(f"unknown format {fmt!r}")


def epoch_order(stored: Stored, *, seed: int, batch_size: int, buffer: int) -> list[int]:
    """The images' indices in the order one shuffled epoch in one process yields them (no decoding)."""
    fmt = stored.fmt
    if fmt in ("imagefolder", "hf_datasets"):
        return torch.randperm(stored.n, generator=torch.Generator().manual_seed(seed)).tolist()
    if fmt == "mds":
        ds = images.mds_dataset(stored.root, shuffle=True, batch_size=batch_size, seed=seed, decoded=False)
        try:
            return [int(s["index"]) for s in ds]
        finally:
            images.stop_streaming(ds)
    items = {"webdataset": partial(_wds_items, _tar_urls(stored), seed, buffer, True),
             "litdata": partial(_lit_items, str(stored.root), seed, True),
             "parquet": partial(_parquet_items, str(stored.root / "images.parquet"), seed, True)}[fmt]
    return [i for i, _, _ in items()]


def items(stored: Stored) -> Iterator[tuple[int, bytes, int]]:
    """Every image of ``stored`` as ``(index, bytes, label)`` in storage order, through the format's own reader
    (by index where it has one, else streamed without shuffling)."""
    if stored.fmt == "webdataset":
        yield from _wds_items(_tar_urls(stored), 0, 1, False)
        return
    get = accessor(stored)
    try:
        for i in range(stored.n):
            yield (i, *get(i))
    finally:
        close(get)


def cobatch(order: Sequence[int], batch_size: int) -> float:
    """How often two images stored side by side (``i`` and ``i + 1``) land in the same batch, as a multiple of
    how often a uniform shuffle of the whole set puts them together ((B - 1) / (N - 1)): 1 for a global
    shuffle, more the more the order keeps storage neighbours together."""
    n = len(order)
    if n < 2 or batch_size < 2:
        return float("nan")
    pos = np.empty(max(order) + 1, dtype=np.int64)
    pos[np.asarray(order)] = np.arange(n)
    batch = pos // batch_size
    idx = np.sort(np.asarray(order))
    together = batch[idx[:-1]] == batch[idx[1:]]
    expected = (min(batch_size, n) - 1) / (n - 1)
    return float(together.mean() / expected)


# --------------------------------------------------------------------------- what a reader pastes
def calls(stored: Stored, *, batch_size: int, buffer: int) -> dict:
    """The reader's call for ``stored`` as a reader writes it (``call``) and the writer and reader together
    (``snippet``: code that compiles), with this run's layout filled in."""
    k, b = stored.per_shard, batch_size
    last = max(0, stored.shards - 1)
    read = {
        "imagefolder": 'torchvision.datasets.ImageFolder("train/")',
        "mds": f'streaming.StreamingDataset(local="mds/", shuffle=True, batch_size={b})',
        "webdataset": f'webdataset.WebDataset("wds/{{000000..{last:06d}}}.tar", shardshuffle={last + 1})'
                      f".shuffle({buffer})",
        "hf_datasets": 'datasets.load_from_disk("arrow/")',
        "litdata": 'litdata.StreamingDataset("litdata/", shuffle=True)',
        "parquet": 'pyarrow.parquet.ParquetFile("images.parquet").read_row_group(g)',
    }[stored.fmt]
    rows = "samples = [(i, open(path, 'rb').read(), label) for i, (path, label) in enumerate(files)]"
    write = {
        "imagefolder": ["# the images as they are: one JPEG file per image, one folder per class"],
        "mds": ["import streaming", "", rows,
                'with streaming.MDSWriter(out="mds/", columns={"index": "int", "jpeg": "bytes", "label": "int"},',
                f"                          size_limit={max(1 << 12, stored.bytes // max(1, stored.shards))}) as w:",
                "    for i, data, label in samples:",
                '        w.write({"index": i, "jpeg": data, "label": label})'],
        "webdataset": ["import webdataset", "", rows,
                       f'with webdataset.ShardWriter("wds/%06d.tar", maxcount={k}) as sink:',
                       "    for i, data, label in samples:",
                       '        sink.write({"__key__": f"{i:08d}", "jpg": data, "cls": str(label).encode()})'],
        "hf_datasets": ["import datasets", "", rows,
                        'table = datasets.Dataset.from_dict({"index": [s[0] for s in samples],',
                        '                                    "jpeg": [s[1] for s in samples],',
                        '                                    "label": [s[2] for s in samples]})',
                        'table.save_to_disk("arrow/")'],
        "litdata": ["import litdata", "", "def sample(i):", "    path, label = files[i]",
                    '    return {"index": i, "jpeg": open(path, "rb").read(), "label": label}', "",
                    f'litdata.optimize(fn=sample, inputs=list(range(len(files))), output_dir="litdata/", '
                    f"chunk_size={k})"],
        "parquet": ["import pyarrow as pa", "import pyarrow.parquet", "", rows,
                    'table = pa.table({"index": [s[0] for s in samples], "jpeg": [s[1] for s in samples],',
                    '                  "label": [s[2] for s in samples]})',
                    f'pyarrow.parquet.write_table(table, "images.parquet", row_group_size={k})'],
    }[stored.fmt]
    imports = {"imagefolder": "import torchvision", "mds": "", "webdataset": "", "hf_datasets": "",
               "litdata": "", "parquet": ""}[stored.fmt]
    reader = ([imports] if imports else []) + [f"dataset = {read}"]
    snippet = "\n".join(["# files: [(path, label), ...] of the images, in a fixed order", *write, "", *reader])
    return {"call": read, "snippet": snippet}
