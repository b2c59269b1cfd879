"""A Megatron-compatible indexed token data set (``.bin`` + ``.idx``), written and read here.

The layout is Megatron-LM's ``MMIDIDX`` format (``megatron.core.datasets.indexed_dataset``),
little-endian:

====  ==========  =====================================================================
off   type        field
====  ==========  =====================================================================
0     9 bytes     magic ``b"MMIDIDX\\x00\\x00"``
9     u64         version (1)
17    u8          dtype code (uint8=1 int8=2 int16=3 int32=4 int64=5 float64=6 float32=7 uint16=8)
18    u64         sequence_count N
26    u64         document_count M (documents + 1)
34    int32[N]    sequence_lengths (items, not bytes)
..    int64[N]    sequence_pointers (byte offsets into ``.bin``)
..    int64[M]    document_indices (sequence boundaries of documents: first 0, last N)
====  ==========  =====================================================================

``.bin`` is the token arrays back to back, no header. One sequence per document, as
Megatron's ``tools/preprocess_data.py`` writes them without sentence splitting.

:func:`read_index` checks every field against the file sizes and raises
:class:`CorruptIndex` naming the file and the field. :class:`TokenFile` reads one
sequence (or a piece of one) either through a memory map of ``.bin`` (``mode="mmap"``)
or with an explicit ``open``/``lseek``/``read``/``fstat``/``close`` per call
(``mode="read"``), the two access modes of Megatron's ``IndexedDataset``.

:func:`token_dataset` makes (or reuses) the chapter's data set: real text (the Alpaca
copy, GPT-2 tokenizer) where it can be loaded, extended to the wanted size with synthetic
token ids whose document lengths are drawn from the real lengths. The manifest records
how many documents and tokens of each kind there are.

Example::

    import pathlib
    import tempfile

    import numpy as np

    from datajourney.toolkit.tokens import TokenFile, write_indexed

    prefix = pathlib.Path(tempfile.mkdtemp()) / "tokens"
    tokens = np.arange(1_000, dtype=np.int32)
    write_indexed(prefix, tokens, doc_lengths=np.array([400, 600]))   # two documents
    for mode in ("mmap", "read"):                                      # the two readers chapter 10 traces
        seqs = TokenFile(prefix, mode=mode)
        print(mode, len(seqs), seqs.get(1, offset=0, length=5))        # [400 401 402 403 404]
"""
from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datajourney.core.params import ParameterError, positive_int
from datajourney.toolkit import datasets

__all__ = ["MODES", "CorruptIndex", "Index", "TokenFile", "TokenSet", "write_indexed", "write_index", "read_index"]

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = 34
DTYPE_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
               8: np.uint16}
CODE_OF = {np.dtype(v): k for k, v in DTYPE_CODES.items()}
MODES = ("mmap", "read")
#: GPT-2's vocabulary size: ids fit uint16, as Megatron stores vocabularies below 65,500.
GPT2_VOCAB = 50257
#: Document lengths used when no real text can be loaded (labelled in the manifest):
#: log-normal with this median and shape, clipped to [MIN_DOC, MAX_DOC] tokens.
FALLBACK_MEDIAN, FALLBACK_SIGMA, MIN_DOC, MAX_DOC = 120, 0.8, 8, 4096


class CorruptIndex(ValueError):
    """A ``.idx``/``.bin`` pair that does not describe a valid data set; names file and field."""

    def __init__(self, path, field: str, problem: str):
        self.path, self.field, self.problem = str(path), field, problem
        super().__init__(f"{path}: field {field!r}: {problem}")


# ------------------------------------------------------------------------------- writing
def write_indexed(prefix, tokens: np.ndarray, doc_lengths: np.ndarray) -> tuple[Path, Path]:
    """Write ``prefix.bin`` (tokens) and ``prefix.idx`` (one sequence per document)."""
    prefix = Path(prefix)
    tokens = np.ascontiguousarray(tokens)
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    if lengths.sum() != tokens.size:
        raise ValueError(f"document lengths sum to {int(lengths.sum()):,}, tokens hold {tokens.size:,}")
    if tokens.dtype not in CODE_OF:
        raise ValueError(f"token dtype {tokens.dtype} has no Megatron dtype code (one of {sorted(map(str, CODE_OF))})")
    bin_path, idx_path = prefix.with_suffix(".bin"), prefix.with_suffix(".idx")
    with open(bin_path, "wb") as f:
        f.write(memoryview(tokens).cast("B"))
    write_index(idx_path, lengths, tokens.dtype)
    return bin_path, idx_path


def write_index(idx_path, lengths, dtype, document_indices=None) -> None:
    """Write the ``.idx`` of sequences of ``lengths`` items of ``dtype`` stored back to back (by default
    one sequence per document)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    pointers = np.zeros(n, dtype=np.int64)
    if n:
        pointers[1:] = np.cumsum(lengths[:-1] * np.dtype(dtype).itemsize)
    docs = np.arange(n + 1, dtype=np.int64) if document_indices is None else np.asarray(document_indices, np.int64)
    with open(idx_path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", VERSION))
        f.write(struct.pack("<B", CODE_OF[np.dtype(dtype)]))
        f.write(struct.pack("<Q", n))
        f.write(struct.pack("<Q", docs.size))
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(docs.astype("<i8").tobytes())


# ------------------------------------------------------------------------------- reading
@dataclass
class Index:
    """The parsed ``.idx``: arrays are read-only views of a memory map (as Megatron keeps them)."""

    idx_path: Path
    bin_path: Path
    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))


def read_index(idx_path, bin_path=None) -> Index:
    """Parse and check ``idx_path`` against ``bin_path`` (default: the same prefix + ``.bin``)."""
    idx_path = Path(idx_path)
    bin_path = Path(bin_path) if bin_path else idx_path.with_suffix(".bin")
    if not idx_path.is_file():
        raise CorruptIndex(idx_path, "file", "does not exist")
    if not bin_path.is_file():
        raise CorruptIndex(bin_path, "file", "does not exist (the .bin beside the .idx)")
    size = idx_path.stat().st_size
    with open(idx_path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < len(MAGIC) or head[:len(MAGIC)] != MAGIC:
        raise CorruptIndex(idx_path, "magic", f"expected {MAGIC!r}, found {head[:len(MAGIC)]!r}")
    if len(head) < HEADER_BYTES:
        raise CorruptIndex(idx_path, "header", f"truncated: {size} bytes, the header needs {HEADER_BYTES}")
    (version,) = struct.unpack_from("<Q", head, 9)
    if version != VERSION:
        raise CorruptIndex(idx_path, "version", f"expected {VERSION}, found {version}")
    code = head[17]
    if code not in DTYPE_CODES:
        raise CorruptIndex(idx_path, "dtype", f"unknown dtype code {code} (known: {sorted(DTYPE_CODES)})")
    n, m = struct.unpack_from("<QQ", head, 18)
    need = HEADER_BYTES + 4 * n + 8 * n + 8 * m
    if size < need:
        raise CorruptIndex(idx_path, "sequence_count/document_count",
                           f"truncated: {size:,} bytes, but {n:,} sequences and {m:,} document indices need {need:,}")
    if size > need + n:   # Megatron's optional multimodal byte per sequence is the only allowed tail
        raise CorruptIndex(
            idx_path,
            "sequence_count/document_count",
            f"{size - need:,} bytes past the arrays that {n:,} sequences and {m:,} document indices need",
        )
    mm = np.memmap(idx_path, dtype=np.uint8, mode="r")
    lengths = np.frombuffer(mm, dtype="<i4", count=n, offset=HEADER_BYTES)
    pointers = np.frombuffer(mm, dtype="<i8", count=n, offset=HEADER_BYTES + 4 * n)
    docs = np.frombuffer(mm, dtype="<i8", count=m, offset=HEADER_BYTES + 12 * n)
    dtype = np.dtype(DTYPE_CODES[code])
    bin_size = bin_path.stat().st_size
    if n:
        if lengths.min() < 0:
            i = int(np.argmin(lengths))
            raise CorruptIndex(idx_path, "sequence_lengths", f"sequence {i} has a negative length {int(lengths[i])}")
        if pointers.min() < 0:
            i = int(np.argmin(pointers))
            raise CorruptIndex(
                idx_path, "sequence_pointers", f"sequence {i} points before the start ({int(pointers[i])})"
            )
        ends = pointers + lengths.astype(np.int64) * dtype.itemsize
        if ends.max() > bin_size:
            i = int(np.argmax(ends > bin_size))
            raise CorruptIndex(idx_path, "sequence_pointers",
                               f"sequence {i} ends at byte {int(ends[i]):,}, past the end of {bin_path.name} "
                               f"({bin_size:,} bytes)")
    if m == 0 or docs[0] != 0 or docs[-1] != n or (m > 1 and np.any(np.diff(docs) < 0)):
        raise CorruptIndex(idx_path, "document_indices",
                           f"must rise from 0 to the sequence count {n:,} (found {m:,} entries"
                           + (f", first {int(docs[0])}, last {int(docs[-1])})" if m else ")"))
    return Index(idx_path, bin_path, dtype, lengths, pointers, docs)


class TokenFile:
    """Sequences of an indexed data set, read by memory map or by explicit reads.

    ``mode="mmap"``: ``.bin`` is mapped once per process; a read is a slice of the map
    (copied, so the pages are touched and a sample owns its memory). ``mode="read"``: every
    call opens ``.bin``, seeks, reads into a fresh buffer, fstat's and closes it, the
    per-sequence system calls of the source's "direct" mode.
    """

    def __init__(self, prefix, mode: str = "mmap"):
        if mode not in MODES:
            raise ParameterError("mode", mode, "one of " + ", ".join(repr(m) for m in MODES))
        prefix = Path(prefix)
        self.mode = mode
        self.index = read_index(prefix.with_suffix(".idx"), prefix.with_suffix(".bin"))
        self.bin_path = str(self.index.bin_path)
        self._map = None
        self._pid = None

    def _mapped(self) -> memoryview:
        if self._map is None or self._pid != os.getpid():
            # as Megatron's reader: a memory map of the whole file, numpy views made with frombuffer
            self._map = memoryview(np.memmap(self.bin_path, dtype=np.uint8, mode="r"))
            self._pid = os.getpid()
        return self._map

    def __len__(self) -> int:
        return int(self.index.lengths.size)

    def release(self) -> None:
        """Unmap ``.bin`` (pages mapped into a process cannot be evicted from the page cache)."""
        self._map = None
        self._pid = None

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``offset .. offset + length`` of sequence ``i``."""
        n = int(self.index.lengths[i])
        if length is None:
            length = n - offset
        if offset < 0 or length < 0 or offset + length > n:
            raise IndexError(f"sequence {i} has {n} tokens; asked for {offset}..{offset + length}")
        isz = self.index.itemsize
        start = int(self.index.pointers[i]) + offset * isz
        if self.mode == "mmap":   # copied, so the pages are touched here, inside the read
            return np.frombuffer(self._mapped(), dtype=self.index.dtype, count=length, offset=start).copy()
        buf = np.empty(length, dtype=self.index.dtype)
        fd = os.open(self.bin_path, os.O_RDONLY)
        try:
            os.lseek(fd, start, os.SEEK_SET)
            got = os.readv(fd, [memoryview(buf).cast("B")])
            os.fstat(fd)
        finally:
            os.close(fd)
        if got != length * isz:
            raise CorruptIndex(self.bin_path, "sequence_pointers",
                               f"sequence {i}: read {got} bytes at {start:,}, expected {length * isz}")
        return buf

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_map"] = state["_pid"] = None
        state["index"] = None
        state["_prefix"] = str(Path(self.bin_path).with_suffix(""))
        return state

    def __setstate__(self, state):
        prefix = state.pop("_prefix")
        self.__dict__.update(state)
        self.index = read_index(Path(prefix).with_suffix(".idx"), Path(prefix).with_suffix(".bin"))


# ------------------------------------------------------------------------------- the data set
@dataclass(frozen=True)
class TokenSet:
    root: Path
    manifest: dict

    @property
    def prefix(self) -> Path:
        return self.root / "tokens"

    @property
    def files(self) -> list[Path]:
        return [self.prefix.with_suffix(".bin"), self.prefix.with_suffix(".idx")]


def plan(total_bytes: int, seed: int = 0, real: bool = True) -> tuple[str, dict, int]:
    """(directory name, manifest parameters, bytes on disk) of the token data set."""
    positive_int("dataset_bytes", total_bytes, maximum=datasets.MAX_BYTES)
    params = {"kind": "megatron_tokens", "bytes": int(total_bytes), "seed": seed, "real_text": bool(real),
              "dtype": "uint16", "format": 2}
    tokens = total_bytes // 2
    # .bin + .idx (at most one sequence per MIN_DOC tokens: 20 bytes each)
    return f"tokens-{total_bytes}-s{seed}{'' if real else '-synthetic'}", params, \
        total_bytes + 20 * (tokens // MIN_DOC + 2) + (1 << 20)


def real_documents(text_records: int = 2000):
    """Token ids of the Alpaca copy (GPT-2 tokenizer, one document per record, end-of-text
    appended) and where they came from; None when no copy can be loaded without a network."""
    from datajourney.toolkit import textdata

    if textdata.offline_dir() is None:
        return None
    texts, tok, src = textdata.texts_and_source(text_records)
    eos = textdata.eos_id(tok)
    docs = [np.asarray(e.ids + [eos], dtype=np.uint16) for e in tok.encode_batch(texts)]
    return docs, f"{src.dataset}, {src.tokenizer}"


def synthetic_ids(n: int, seed: int, chunk: int = 1 << 24, threads: int | None = None):
    """``n`` uniform GPT-2 token ids in chunks, in order. Chunk ``k`` comes from its own
    generator (seeded by ``seed`` and ``k``), so the ids do not depend on how many threads
    draw them; the threads run ahead of the caller by at most two chunks each."""
    from concurrent.futures import ThreadPoolExecutor

    def draw(k):
        rng = np.random.default_rng([seed, k, 10])
        return rng.integers(0, GPT2_VOCAB, size=min(chunk, n - k * chunk), dtype=np.uint16)

    n_chunks = -(-n // chunk)
    threads = threads or max(1, min(8, len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(threads) as pool:
        pending, k = [], 0
        while k < n_chunks or pending:
            while k < n_chunks and len(pending) < 2 * threads:
                pending.append(pool.submit(draw, k))
                k += 1
            yield pending.pop(0).result()


def token_dataset(data_dir=None, *, total_bytes: int, seed: int = 0, real: bool = True,
                  progress: bool = True) -> TokenSet:
    """Get (generate or reuse) the chapter's indexed token data set of about ``total_bytes``."""
    name, params, needed = plan(total_bytes, seed, real)
    parent = datasets.parent_dir(data_dir)
    info: dict = {}

    def write(tmp: Path, show: bool) -> str:
        rng = np.random.default_rng(seed)
        want = total_bytes // 2
        got = real_documents() if real else None
        docs = got[0] if got else []
        real_lengths = np.array([d.size for d in docs], dtype=np.int64)
        real_tokens = int(real_lengths.sum()) if docs else 0
        if real_tokens > want:    # keep whole real documents up to the size
            keep = int(np.searchsorted(np.cumsum(real_lengths), want, side="right"))
            docs, real_lengths = docs[:keep], real_lengths[:keep]
            real_tokens = int(real_lengths.sum())
        left = want - real_tokens
        if real_lengths.size:
            pool = real_lengths
            origin = "lengths drawn from the real documents' lengths"
        else:
            pool = np.clip(rng.lognormal(np.log(FALLBACK_MEDIAN), FALLBACK_SIGMA, 100_000).astype(np.int64),
                           MIN_DOC, MAX_DOC)
            origin = f"no real text here: log-normal lengths (median {FALLBACK_MEDIAN}, sigma {FALLBACK_SIGMA})"
        syn = []
        total = 0
        while total < left:
            draw = rng.choice(pool, size=max(1024, int(left / max(pool.mean(), 1)) + 1024))
            cum = np.cumsum(draw)
            k = int(np.searchsorted(cum, left - total, side="left")) + 1
            syn.append(draw[:k])
            total += int(cum[min(k, draw.size) - 1])
        syn_lengths = np.concatenate(syn) if syn else np.zeros(0, np.int64)
        if syn_lengths.size and total > left:   # trim the last document to land on the size exactly
            syn_lengths[-1] -= total - left
            if syn_lengths[-1] <= 0:
                syn_lengths = syn_lengths[:-1]
        h = hashlib.sha256()
        bin_path = tmp / "tokens.bin"
        with open(bin_path, "wb") as f:
            for d in docs:
                f.write(d.tobytes())
                h.update(d.tobytes())
            n_syn = int(syn_lengths.sum())
            for ids in synthetic_ids(n_syn, seed):
                f.write(ids.data)
                h.update(ids.data)
        lengths = np.concatenate([real_lengths, syn_lengths]).astype(np.int64)
        write_index(tmp / "tokens.idx", lengths, np.uint16)
        h.update((tmp / "tokens.idx").read_bytes())
        info.update(real_documents=int(real_lengths.size), real_tokens=real_tokens,
                    synthetic_documents=int(syn_lengths.size), synthetic_tokens=int(syn_lengths.sum()),
                    real_source=got[1] if got else None, synthetic_lengths=origin)
        import json
        (tmp / "composition.json").write_text(json.dumps(info))
        return h.hexdigest()

    root = datasets.generate(parent, name, params, None, needed, write, progress)
    import json
    manifest = json.loads((root / datasets.MANIFEST).read_text())
    comp = root / "composition.json"
    if comp.exists():
        manifest["composition"] = json.loads(comp.read_text())
    return TokenSet(root, manifest)
