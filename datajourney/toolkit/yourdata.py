"""The reader's own data: a folder of images (``image_dir``) or a token set (``token_path``), checked,
listed and described, so that a chapter measures it in place of the data set it would generate.

What is checked, before any work (:func:`images` and :func:`token_source` raise a one-line
:class:`~datajourney.core.params.ParameterError` naming ``image_dir`` or ``token_path``): the path exists
and is a folder (or, for tokens, a ``.bin``/``.idx`` pair); every file is a regular file with a name
without line breaks, not empty, readable, and of the one format the folder holds (JPEG or PNG by their
first bytes; Megatron, Parquet, Arrow or JSONL for tokens); a symbolic link may point only inside the
folder; there are at least as many files as the chapter asks for; and the folder neither holds nor lies
inside the directory data sets are written to. Images are decoded from their headers (all of those
read) and fully (a seeded sample of them).

Which files are read: all names are listed and sorted, then put in a fixed shuffled order (the
chapter's ``seed``) and the first N the chapter asks for are taken. Nothing here writes, moves or
deletes a file of the reader's: the chapters read them, and a cold read purges them from the page cache
only (:func:`datajourney.toolkit.pagecache.purge`: ``posix_fadvise(POSIX_FADV_DONTNEED)`` or
``drop_caches``). Derived copies (chapter 3's shard, chapter 7's MDS shards, a text folder tokenised
for chapter 10) are written to the data directory like any generated data set.

What a result records (:meth:`ImageList.describe`, :meth:`TokenSource.describe`): counts, sizes and
their distribution, the format, image dimensions, and a digest of the files' names, sizes and times,
never a path or a file name.

Example::

    from datajourney.toolkit import yourdata

    imgs = yourdata.images("~/imagenet/train", 1000, seed=0)   # the first 1,000 of a fixed shuffled order
    print(imgs.describe()["files"], imgs.names[0])
"""
from __future__ import annotations

import hashlib
import json
import os
import stat as stat_mod
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from datajourney.core.params import ParameterError

__all__ = ["IMAGE_FORMATS", "TEXT_FORMATS", "FilesAndShard", "ImageList", "TokenSource", "describe_sizes",
           "files_and_shard", "images", "token_set", "token_source"]

#: The image formats a folder may hold (one of them), by the first bytes of a file.
IMAGE_FORMATS = {"JPEG": (b"\xff\xd8\xff",), "PNG": (b"\x89PNG\r\n\x1a\n",)}
#: The text formats a token folder may hold (one of them), by file suffix.
TEXT_FORMATS = {".parquet": "Parquet", ".arrow": "Arrow", ".jsonl": "JSONL"}
#: Files a folder may hold beside its images or text (skipped, never read as data).
IGNORED = ("dataset_info.json", "state.json", "dataset_dict.json", "README.md", "LICENSE")
#: Images fully decoded in preflight (a seeded sample of those the chapter reads); all are opened by header.
DECODE_SAMPLE = 32
#: The parameters that name the reader's data, and what a result file records for them instead of the path.
PARAMETERS = ("image_dir", "token_path")
RECORDED = "(given: described under your_data, its path not recorded)"
#: The column (or JSON key) holding a document's text; else the first string column.
TEXT_COLUMN = "text"


def _problem(name: str, value, what: str) -> ParameterError:
    return ParameterError(name, str(value), what)


def _shown(rel: str) -> str:
    """A file's name inside the reader's folder, for an error message only (one line: escapes kept)."""
    return repr(rel)


def _list(name: str, root: Path, *, skip=lambda rel: False) -> list[str]:
    """Every regular file under ``root`` (relative names, sorted), refusing names with line breaks and links
    out of ``root``; hidden entries and ``skip`` ones are left out. Links inside ``root`` are followed once
    (a linked file is read at its link's name; a linked folder inside is not listed twice)."""
    real_root = os.path.realpath(root)
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=None):
        rel_dir = os.path.relpath(dirpath, root)
        for entry in list(dirnames) + list(filenames):
            rel = os.path.normpath(os.path.join(rel_dir, entry))
            if "\n" in entry or "\r" in entry:
                raise _problem(name, root, f"a folder whose file names have no line breaks (found {_shown(rel)})")
            full = os.path.join(dirpath, entry)
            if os.path.islink(full):
                target = os.path.realpath(full)
                if os.path.commonpath([real_root, target]) != real_root:
                    raise _problem(name, root, f"a folder without symbolic links pointing out of it "
                                               f"({_shown(rel)} points outside)")
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and not os.path.islink(os.path.join(dirpath, d)))
        for f in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, f))
            if f.startswith(".") or skip(rel):
                continue
            out.append(rel)
    return sorted(out)


def _check_place(name: str, root: Path, data_dir) -> None:
    """Refuse a folder that is, holds or lies inside the data directory: data sets are written and
    cleaned there, and the reader's files are only ever read."""
    if data_dir is None:
        return
    a, b = os.path.realpath(root), os.path.realpath(data_dir)
    if os.path.commonpath([a, b]) in (a, b):
        raise _problem(name, root, f"a folder apart from data_dir ({'it holds' if a != b else 'it is'} "
                                   "the directory data sets are written to, or lies inside it)")


def _stat_file(name: str, root: Path, rel: str) -> os.stat_result:
    try:
        st = os.stat(os.path.join(root, rel))
    except OSError as e:
        raise _problem(name, root, f"a folder whose files can be read ({_shown(rel)}: {e.strerror})") from None
    if not stat_mod.S_ISREG(st.st_mode):
        raise _problem(name, root, f"a folder of regular files ({_shown(rel)} is not one)")
    if st.st_size == 0:
        raise _problem(name, root, f"a folder without empty files ({_shown(rel)} is 0 bytes)")
    return st


def _head(name: str, root: Path, rel: str, n: int = 16) -> bytes:
    try:
        with open(os.path.join(root, rel), "rb") as f:
            return f.read(n)
    except OSError as e:
        raise _problem(name, root, f"a folder whose files can be read ({_shown(rel)}: {e.strerror})") from None


def _digest(rels, stats) -> str:
    """A digest of the files' names, sizes and modification times (recorded instead of the names)."""
    h = hashlib.sha256()
    for rel, st in zip(rels, stats, strict=True):
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def describe_sizes(sizes) -> dict:
    """The distribution of file sizes in bytes: count, total, min, 10th/50th/90th percentiles, max."""
    a = np.asarray(sizes, dtype=np.float64)
    if a.size == 0:
        return dict(files=0, bytes=0)
    p10, p50, p90 = (float(x) for x in np.percentile(a, [10, 50, 90]))
    return dict(files=int(a.size), bytes=int(a.sum()), min_bytes=int(a.min()), p10_bytes=p10, median_bytes=p50,
                p90_bytes=p90, max_bytes=int(a.max()))


# ----------------------------------------------------------------------------------------- images
@dataclass(frozen=True)
class ImageList:
    """The reader's images a chapter reads: ``names`` (absolute paths, in the fixed shuffled order) and what
    an :class:`~datajourney.toolkit.images.ImageFolderSet` offers (``path(i)``, ``files``, ``n_images``,
    ``classes``, ``manifest``), so a chapter reads them where it would read its generated set. Image ``i``'s
    label is ``i % classes``, as in the generated sets (the label costs the same whatever its value; a chapter
    sets ``classes`` to its model's with :meth:`labelled`); ``folders`` counts the class folders."""

    root: Path
    rels: tuple
    sizes: tuple
    mtimes: tuple
    format: str
    available: int
    folders: int
    layout: str
    dims: tuple = field(default=())
    digest: str = ""
    classes: int = 1

    def labelled(self, classes: int) -> ImageList:
        """The same images with labels ``i % classes`` (a chapter's model has ``classes`` outputs)."""
        import dataclasses

        return dataclasses.replace(self, classes=classes)

    @property
    def n_images(self) -> int:
        return len(self.rels)

    @cached_property
    def names(self) -> list[str]:
        return [os.path.join(str(self.root), r) for r in self.rels]

    @property
    def files(self) -> list[Path]:
        return [Path(n) for n in self.names]

    def path(self, i: int) -> Path:
        return Path(self.names[i])

    def describe(self) -> dict:
        """What the images are, with no path or name: count, sizes, format, dimensions, layout, digest."""
        w = np.array([d[0] for d in self.dims], dtype=np.float64)
        h = np.array([d[1] for d in self.dims], dtype=np.float64)
        dims = dict(median_width=float(np.median(w)), median_height=float(np.median(h)),
                    min_width=int(w.min()), max_width=int(w.max()), min_height=int(h.min()),
                    max_height=int(h.max())) if self.dims else {}
        return dict(kind="images", parameter="image_dir", format=self.format, layout=self.layout,
                    class_folders=self.folders, available=self.available, **describe_sizes(self.sizes), **dims,
                    digest=self.digest[:16])

    @property
    def manifest(self) -> dict:
        """What a generated set's manifest holds for a result (params, bytes), described, no path."""
        d = self.describe()
        return dict(params=dict(kind="your_images", digest=self.digest, n_images=self.n_images), bytes=d["bytes"],
                    description=d)

    def source_plan(self) -> tuple[str, dict, int]:
        """(name, manifest parameters, bytes) of these images as a source of derived data sets (MDS shards)."""
        return f"yours-{self.digest[:16]}-{self.n_images}", self.manifest["params"], int(sum(self.sizes))

    def recheck(self) -> None:
        """Fail, naming ``image_dir``, when a file read by the run was removed or changed since it was listed."""
        for rel, size, mtime in zip(self.rels, self.sizes, self.mtimes, strict=True):
            try:
                st = os.stat(os.path.join(self.root, rel))
            except OSError as e:
                raise _problem("image_dir", self.root, f"a folder that stays as it is during the run "
                                                       f"({_shown(rel)}: {e.strerror} since it was listed)") from None
            if st.st_size != size or st.st_mtime_ns != mtime:
                raise _problem("image_dir", self.root, f"a folder that stays as it is during the run "
                                                       f"({_shown(rel)} changed since it was listed)")


def _image_format(head: bytes) -> str | None:
    for fmt, magics in IMAGE_FORMATS.items():
        if any(head.startswith(m) for m in magics):
            return fmt
    return None


def images(image_dir, n: int, *, seed: int = 0, data_dir=None, what: str = "n_images",
           decode_sample: int = DECODE_SAMPLE) -> ImageList:
    """The first ``n`` images of ``image_dir`` in a fixed shuffled order (``seed``), every check of the module
    docstring passed (else a one-line error naming ``image_dir``). ``what`` names the parameter that asks
    for ``n``, for the error when the folder holds fewer."""
    from PIL import Image

    name = "image_dir"
    if image_dir is None or str(image_dir) == "":
        raise _problem(name, image_dir, "a folder of JPEG or PNG files")
    root = Path(os.path.abspath(Path(str(image_dir)).expanduser()))
    if not root.exists():
        raise _problem(name, image_dir, "an existing folder of JPEG or PNG files (it does not exist)")
    if not root.is_dir():
        raise _problem(name, image_dir, "a folder of JPEG or PNG files (it is a file)")
    _check_place(name, root, data_dir)
    rels = _list(name, root)
    if not rels:
        raise _problem(name, image_dir, "a folder of JPEG or PNG files (it holds none)")
    bad = [r for r in rels if Path(r).suffix.lower() not in (".jpg", ".jpeg", ".png")]
    if bad:
        raise _problem(name, image_dir, f"a folder of JPEG or PNG files only (found {len(bad):,} other file(s), "
                                        f"e.g. {_shown(bad[0])})")
    if len(rels) < n:
        raise _problem(name, image_dir, f"a folder of at least {n:,} images for {what} = {n:,} "
                                        f"(it holds {len(rels):,}; lower {what} or give a larger folder)")
    order = np.random.default_rng(seed).permutation(len(rels))[:n]
    chosen = [rels[int(i)] for i in order]
    stats = [_stat_file(name, root, r) for r in chosen]
    formats: dict[str, int] = {}
    dims = []
    for r in chosen:
        fmt = _image_format(_head(name, root, r))
        if fmt is None:
            raise _problem(name, image_dir, f"a folder of JPEG or PNG files ({_shown(r)} is neither)")
        formats[fmt] = formats.get(fmt, 0) + 1
        try:
            with Image.open(os.path.join(root, r)) as im:
                dims.append(im.size)
        except (OSError, ValueError, Image.DecompressionBombError) as e:
            raise _problem(name, image_dir, f"a folder of images that decode ({_shown(r)}: "
                                            f"{type(e).__name__})") from None
    if len(formats) > 1:
        raise _problem(name, image_dir, "a folder of one image format (found " +
                       " and ".join(f"{k:,} {f}" for f, k in sorted(formats.items())) + " files)")
    rng = np.random.default_rng([seed, 1])
    for i in rng.permutation(n)[:decode_sample]:
        r = chosen[int(i)]
        try:
            with Image.open(os.path.join(root, r)) as im:
                im.load()
        except (OSError, ValueError, SyntaxError) as e:
            raise _problem(name, image_dir, f"a folder of images that decode ({_shown(r)}: "
                                            f"{type(e).__name__})") from None
    tops = {r.split(os.sep)[0] for r in rels if os.sep in r}
    layout = "ImageFolder tree" if tops and all(os.sep in r for r in rels) else "one folder"
    return ImageList(root, tuple(chosen), tuple(s.st_size for s in stats), tuple(s.st_mtime_ns for s in stats),
                     next(iter(formats)), len(rels), max(1, len(tops)), layout, tuple(dims), _digest(chosen, stats),
                     max(1, len(tops)))


@dataclass(frozen=True)
class FilesAndShard:
    """The reader's files (``files``, read where they lie) and ``shard``: the same bytes back to back in one
    generated file, sample ``i`` at ``offsets[i]:offsets[i + 1]`` (chapter 3's two layouts of one data set;
    what :class:`~datajourney.toolkit.datasets.SmallFiles` offers, with samples of different sizes)."""

    root: Path
    images: ImageList
    varying: bool = True

    @property
    def files(self) -> list[Path]:
        return self.images.files

    @property
    def shard(self) -> Path:
        return self.root / "shard.bin"

    @property
    def n_files(self) -> int:
        return self.images.n_images

    @property
    def file_size(self) -> int:
        """The median sample, in bytes (what a row's ``sample_size`` records)."""
        return int(np.median(self.images.sizes))

    @cached_property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(np.asarray(self.images.sizes, dtype=np.int64))])

    @property
    def total_bytes(self) -> int:
        return int(self.offsets[-1])

    @property
    def manifest(self) -> dict:
        return self.images.manifest


def shard_plan(imgs: ImageList) -> tuple[str, dict, int]:
    """(name, manifest parameters, bytes on disk) of the shard holding ``imgs``' bytes in their order."""
    return (f"yours-shard-{imgs.digest[:16]}-{imgs.n_images}", dict(kind="your_images_shard", digest=imgs.digest),
            int(sum(imgs.sizes)) + (1 << 20))


def files_and_shard(imgs: ImageList, data_dir=None, *, progress: bool = True) -> FilesAndShard:
    """``imgs`` and a generated shard of their bytes in order (written to the data directory, reused while the
    files are the same): the reader's files are only read."""
    from datajourney.toolkit import datasets

    name, params, needed = shard_plan(imgs)
    parent = datasets.parent_dir(data_dir)

    def write(tmp: Path, show: bool) -> str:
        h = hashlib.sha256()
        with open(tmp / "shard.bin", "wb") as out:
            for path in imgs.names:
                with open(path, "rb") as f:
                    data = f.read()
                out.write(data)
                h.update(data)
        return h.hexdigest()

    root = datasets.generate(parent, name, params, None, needed, write, progress)
    return FilesAndShard(root, imgs)


# ----------------------------------------------------------------------------------------- tokens
@dataclass(frozen=True)
class TokenSource:
    """The reader's token data: a Megatron ``.bin``/``.idx`` pair (``prefix``) or a folder of text files of one
    format (``files``, relative to ``root``, sorted)."""

    root: Path
    kind: str                     #: "Megatron", "Parquet", "Arrow" or "JSONL"
    prefix: Path | None = None
    files: tuple = ()
    sizes: tuple = ()
    digest: str = ""

    @property
    def is_megatron(self) -> bool:
        return self.kind == "Megatron"

    def index(self):
        from datajourney.toolkit import tokens

        return tokens.read_index(self.prefix.with_suffix(".idx"), self.prefix.with_suffix(".bin"))

    # ---------------------------------------------------------------- reading
    def texts(self, n: int, seed: int = 0) -> list[str]:
        """The first ``n`` documents' texts in a fixed shuffled order (``seed``) of the files read in order
        until ``n`` are found (a text folder only)."""
        out: list[str] = []
        for rel in self.files:
            out += _read_texts(self.root / rel, self.kind)
            if len(out) >= 4 * n:
                break
        order = np.random.default_rng(seed).permutation(len(out))[:n]
        return [out[int(i)] for i in order]

    def documents(self, n: int, seed: int = 0, tokenizer=None, eos: int | None = None) -> list[list[int]]:
        """The first ``n`` documents in a fixed shuffled order as token ids: a Megatron pair's sequences of each
        document, or a text folder's documents tokenised with ``tokenizer`` (``eos`` appended when given)."""
        if self.is_megatron:
            ix = self.index()
            docs = np.asarray(ix.document_indices)
            order = np.random.default_rng(seed).permutation(docs.size - 1)[:n]
            mm = np.memmap(ix.bin_path, dtype=ix.dtype, mode="r")
            out = []
            for d in order:
                a, b = int(docs[d]), int(docs[d + 1])
                if b <= a:
                    continue
                start = int(ix.pointers[a]) // ix.itemsize
                end = int(ix.pointers[b - 1]) // ix.itemsize + int(ix.lengths[b - 1])
                out.append([int(x) for x in mm[start:end]])
            del mm
            return out
        ids = [e.ids for e in tokenizer.encode_batch(self.texts(n, seed))]
        return [i + [eos] for i in ids] if eos is not None else ids

    def texts_for(self, n: int, seed: int, tokenizer) -> list[str]:
        """Texts to tokenise: a text folder's own, or a Megatron pair's documents decoded with ``tokenizer``
        (whose vocabulary must hold every id: else a one-line error naming ``token_path``)."""
        if not self.is_megatron:
            return self.texts(n, seed)
        docs = self.documents(n, seed)
        check_vocab(self, docs, tokenizer.get_vocab_size(), "the chapter's tokenizer")
        return [tokenizer.decode(d) for d in docs]

    def all_texts(self) -> list[str]:
        """Every document's text of a text folder, files in name order."""
        out: list[str] = []
        for rel in self.files:
            out += _read_texts(self.root / rel, self.kind)
        return out

    def token_count(self, tokenizer=None) -> int:
        """Tokens of the whole data: a Megatron pair's, or a text folder's tokenised (one end-of-text per document)."""
        if self.is_megatron:
            return self.index().tokens
        return sum(len(e.ids) + 1 for e in tokenizer.encode_batch(self.all_texts()))

    # ---------------------------------------------------------------- describing
    def describe(self, tokenizer=None, sample: int = 2000, seed: int = 0) -> dict:
        """What the token data is, with no path or name: the format, the files' count and sizes, and for a
        Megatron pair its documents, tokens and token type (else those of a sample tokenised)."""
        d = dict(kind="tokens", parameter="token_path", format=self.kind, **describe_sizes(self.sizes),
                 digest=self.digest[:16])
        if self.is_megatron:
            ix = self.index()
            lengths = np.diff(np.asarray(ix.document_indices))
            d.update(dtype=str(ix.dtype), sequences=int(ix.lengths.size), documents=int(lengths.size),
                     tokens=ix.tokens, median_doc_tokens=float(np.median(_doc_tokens(ix))) if lengths.size else 0.0)
        elif tokenizer is not None:
            docs = self.documents(sample, seed, tokenizer)
            lens = [len(x) for x in docs]
            d.update(documents_sampled=len(docs), tokens_sampled=int(sum(lens)),
                     median_doc_tokens=float(np.median(lens)) if lens else 0.0)
        return d


def check_vocab(src: TokenSource, docs, vocab: int, whose: str) -> None:
    """Fail, naming ``token_path``, when a document holds a token id outside ``vocab`` (another tokenizer's ids)."""
    top = max((max(d) for d in docs if len(d)), default=-1)
    if top >= vocab or min((min(d) for d in docs if len(d)), default=0) < 0:
        raise _problem("token_path", src.prefix or src.root,
                       f"token ids that {whose} knows (ids from 0 to {vocab - 1:,}; found {top:,})")


def chapter_documents(src: TokenSource, n: int, seed: int, tokenizer, *, vocab: int, what: str) -> list[list[int]]:
    """``n`` documents as token ids for a chapter that trains on them (ids inside ``vocab``), else a one-line
    error naming ``token_path`` (fewer documents than ``what`` asks for, ids of another vocabulary)."""
    docs = [d for d in src.documents(n, seed, tokenizer) if len(d)]
    if len(docs) < n:
        raise _problem("token_path", src.prefix or src.root,
                       f"data holding at least {n:,} documents for {what} = {n:,} (found {len(docs):,})")
    check_vocab(src, docs, vocab, "the chapter's model")
    return docs


def _doc_tokens(ix) -> np.ndarray:
    docs = np.asarray(ix.document_indices)
    cum = np.concatenate([[0], np.cumsum(np.asarray(ix.lengths, dtype=np.int64))])
    return cum[docs[1:]] - cum[docs[:-1]]


def _read_texts(path: Path, kind: str) -> list[str]:
    """The documents of one text file: the ``text`` column (else the first string column) of a Parquet or
    Arrow file, the ``text`` key (else the first string value) of each JSONL line."""
    if kind == "JSONL":
        out = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                out.append(rec if isinstance(rec, str) else _text_of(rec))
        return out
    import pyarrow as pa

    if kind == "Parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    else:
        try:
            with pa.memory_map(str(path)) as src:
                table = pa.ipc.open_stream(src).read_all()
        except pa.ArrowInvalid:
            with pa.memory_map(str(path)) as src:
                table = pa.ipc.open_file(src).read_all()
    col = _text_column(table.schema)
    return [s for s in table.column(col).to_pylist() if s is not None]


def _text_column(schema) -> str:
    import pyarrow as pa

    names = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    if TEXT_COLUMN in names:
        return TEXT_COLUMN
    if not names:
        raise ValueError("no text column")
    return names[0]


def _text_of(rec) -> str:
    if isinstance(rec, dict):
        if isinstance(rec.get(TEXT_COLUMN), str):
            return rec[TEXT_COLUMN]
        for v in rec.values():
            if isinstance(v, str):
                return v
    raise ValueError("a record without text")


def _megatron(name: str, shown, prefix: Path) -> TokenSource:
    from datajourney.toolkit import tokens

    for suffix in (".bin", ".idx"):
        p = prefix.with_suffix(suffix)
        if "\n" in p.name or "\r" in p.name:
            raise _problem(name, shown, "a .bin/.idx pair whose names have no line breaks")
        if not p.is_file():
            raise _problem(name, shown, f"a Megatron .bin/.idx pair (the {suffix} file is missing)")
        if p.stat().st_size == 0 and suffix == ".idx":
            raise _problem(name, shown, "a Megatron .bin/.idx pair (the .idx file is 0 bytes)")
        if not os.access(p, os.R_OK):
            raise _problem(name, shown, f"a .bin/.idx pair that can be read (the {suffix} file cannot)")
    try:
        ix = tokens.read_index(prefix.with_suffix(".idx"), prefix.with_suffix(".bin"))
    except (tokens.CorruptIndex, OSError, ValueError) as e:
        why = e.problem if isinstance(e, tokens.CorruptIndex) else type(e).__name__
        field_ = f"field {e.field!r}: " if isinstance(e, tokens.CorruptIndex) else ""
        raise _problem(name, shown, f"a valid Megatron .bin/.idx pair ({field_}{why})") from None
    if ix.lengths.size == 0 or ix.tokens == 0:
        raise _problem(name, shown, "a Megatron .bin/.idx pair holding tokens (it holds none)")
    stats = [os.stat(prefix.with_suffix(s)) for s in (".bin", ".idx")]
    return TokenSource(prefix.parent, "Megatron", prefix=prefix, files=(), sizes=tuple(s.st_size for s in stats),
                       digest=_digest([".bin", ".idx"], stats))


def token_source(token_path, *, data_dir=None) -> TokenSource:
    """The reader's token data at ``token_path`` checked (a one-line error naming ``token_path`` otherwise): a
    Megatron pair (``x.bin``, ``x.idx`` or the prefix ``x``; or a folder holding one pair), or a folder of
    Parquet, Arrow or JSONL files of one format, every one readable with a text column."""
    name = "token_path"
    if token_path is None or str(token_path) == "":
        raise _problem(name, token_path, "a Megatron .bin/.idx pair or a folder of Parquet, Arrow or JSONL text")
    p = Path(os.path.abspath(Path(str(token_path)).expanduser()))
    if p.suffix in (".bin", ".idx") or (not p.exists() and p.with_suffix(".idx").exists()):
        _check_place(name, p.parent, data_dir)
        if not p.exists() and p.suffix in (".bin", ".idx"):
            raise _problem(name, token_path, "an existing Megatron .bin/.idx pair (it does not exist)")
        return _megatron(name, token_path, p.with_suffix(""))
    if not p.exists():
        raise _problem(name, token_path, "an existing .bin/.idx pair or folder of text files (it does not exist)")
    if not p.is_dir():
        raise _problem(name, token_path, "a Megatron .bin/.idx pair or a folder of Parquet, Arrow or JSONL "
                                         f"files (it is a {p.suffix or 'plain'} file)")
    _check_place(name, p, data_dir)
    rels = _list(name, p, skip=lambda rel: os.path.basename(rel) in IGNORED)
    if not rels:
        raise _problem(name, token_path, "a folder of Parquet, Arrow or JSONL files or a .bin/.idx pair "
                                         "(it holds none)")
    idx = [r for r in rels if r.endswith(".idx")]
    if len(idx) == 1 and set(rels) == {idx[0], idx[0][:-4] + ".bin"}:
        return _megatron(name, token_path, p / idx[0][:-4])
    kinds: dict[str, int] = {}
    for r in rels:
        k = TEXT_FORMATS.get(Path(r).suffix.lower(), "other")
        kinds[k] = kinds.get(k, 0) + 1
    if "other" in kinds:
        other = next(r for r in rels if Path(r).suffix.lower() not in TEXT_FORMATS)
        raise _problem(name, token_path, f"a folder of Parquet, Arrow or JSONL files only (found {_shown(other)})")
    if len(kinds) > 1:
        raise _problem(name, token_path, "a folder of one text format (found "
                       + " and ".join(f"{k:,} {f}" for f, k in sorted(kinds.items())) + " files)")
    kind = next(iter(kinds))
    stats = [_stat_file(name, p, r) for r in rels]
    for r in rels:
        try:
            got = _read_texts(p / r, kind)
        except (OSError, ValueError, UnicodeDecodeError, ImportError) as e:
            raise _problem(name, token_path, f"a folder of {kind} files with a text column that can be read "
                                             f"({_shown(r)}: {type(e).__name__})") from None
        if not got:
            raise _problem(name, token_path, f"a folder of {kind} files holding text ({_shown(r)} holds none)")
    return TokenSource(p, kind, files=tuple(rels), sizes=tuple(s.st_size for s in stats), digest=_digest(rels, stats))


def token_set_plan(src: TokenSource) -> tuple[str, dict, int]:
    """(name, manifest parameters, bytes on disk at most) of a text folder tokenised for a chapter (a uint16 per
    token: at most two bytes per byte of text)."""
    return (f"yours-tokenised-{src.digest[:16]}", dict(kind="your_tokens_tokenised", digest=src.digest,
                                                      tokenizer="gpt2", format=1), 2 * sum(src.sizes) + (1 << 20))


def token_set(src: TokenSource, data_dir, *, tokenizer, eos: int, progress: bool = True):
    """A Megatron token set of the reader's data for a chapter that reads ``.bin``/``.idx`` (chapter 10): a
    pair is read where it lies, through links named ``tokens.bin``/``tokens.idx`` in the data directory
    (the reader's files are never copied or written); a text folder is tokenised once with ``tokenizer``
    into a generated set (:func:`datajourney.toolkit.datasets.generate`), reused while its files are the same."""
    from datajourney.toolkit import datasets, tokens

    parent = datasets.parent_dir(data_dir)
    if src.is_megatron:
        where = hashlib.sha256(f"{src.digest}\0{src.prefix}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
        view = parent / f"yours-tokens-{where}"
        if not view.is_dir():
            tmp = parent / f".tmp-yours-tokens-{where}-{os.getpid()}-{os.urandom(4).hex()}"
            tmp.mkdir()
            for s in (".bin", ".idx"):
                os.symlink(src.prefix.with_suffix(s), tmp / f"tokens{s}")
            try:
                os.rename(tmp, view)
            except OSError:   # another run made it a moment earlier: only the links are removed
                for s in (".bin", ".idx"):
                    os.unlink(tmp / f"tokens{s}")
                tmp.rmdir()
        return tokens.TokenSet(view, dict(params=dict(kind="your_tokens", digest=src.digest), bytes=src.sizes[0]))
    name, params, need = token_set_plan(src)

    def write(tmp: Path, show: bool) -> str:
        ids = [np.asarray(e.ids + [eos], dtype=np.uint16) for e in tokenizer.encode_batch(src.all_texts())]
        tokens.write_indexed(tmp / "tokens", np.concatenate(ids), np.array([i.size for i in ids]))
        h = hashlib.sha256((tmp / "tokens.bin").read_bytes())
        return h.hexdigest()

    root = datasets.generate(parent, name, params, None, need, write, progress)
    return tokens.TokenSet(root, json.loads((root / datasets.MANIFEST).read_text()))
