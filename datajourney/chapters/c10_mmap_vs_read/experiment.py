"""Chapter 10: tracing the I/O of a Megatron-style token data set, mmap vs read().

What is measured, on an indexed token data set written by :mod:`datajourney.toolkit.tokens`:

* **The sweep.** Samples of ``seq_length + 1`` tokens are built the way Megatron's
  ``GPTDataset`` builds them: documents in a shuffled order form one token stream, sample
  ``i`` starts at token ``i * seq_length``, and a shuffled sample order picks which samples
  a step reads. ``__getitem__`` looks the sample up (index lookup: which documents, from
  which offset), reads each document piece (``mmap``: a slice of a memory map of ``.bin``;
  ``read``: ``open``/``lseek``/``read``/``fstat``/``close`` per piece) and builds tokens
  and labels; the DataLoader collates. Sequence length × batch size, both modes, cold
  (page cache purged and checked) and warm, and a workers sweep at one point.
* **Three views of the same runs.** Application spans (time in index lookup, read,
  construction, collate, summed in every process, workers included); the kernel's view
  (minor and major page faults, ``/proc/<pid>/io`` read calls and bytes, of the main
  process and every worker, and ``/proc/diskstats`` of the data set's device); and the
  POSIX view of DFTracer's ``LD_PRELOAD`` library, where it loads.
* **Tracer overhead.** The same loader point run with tracing off, POSIX only,
  application spans only and both, in rounds: the views without the preloaded tracer share
  one process per round and those with it another, alternating configuration by configuration
  (the first round at the end of the sweep's process and of the POSIX view's).
* **Checkpoint writes.** A model state saved with ``torch.save`` (then ``fsync``) and with
  ``torch.distributed.checkpoint`` (``save`` and ``async_save``, files synced), timed
  for the time the caller is blocked and until the files are on disk; and, under the
  POSIX view, the write calls a fixed checkpoint makes after every sweep point.

Each group of configurations runs in a child process (``python -m datajourney.chapters.c10_mmap_vs_read.experiment``)
so that the tracer can be preloaded into it and nothing else.
"""
from __future__ import annotations

import contextlib
import functools
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from datajourney.chapters.c10_mmap_vs_read.params import CACHE_STATES, CHAPTER, POSIX_OPTIONS, Params  # noqa: F401
from datajourney.core import timing
from datajourney.core.params import ParameterError, memory
from datajourney.toolkit import datasets, pagecache, tokens

MODES = tokens.MODES
VIEWS = ("off", "posix", "app", "both")
#: DFTracer's category of the chapter's application spans, and their names.
DFT_CAT = "app"
DFT_SPANS = ("sample", "index_lookup", "read", "construct")
CONSTANT_TOLERANCE = 0.05
#: The tracer's POSIX calls that carry data (bytes in ``ret``).
READ_CALLS = ("read", "pread", "pread64", "readv", "preadv", "fread")
WRITE_CALLS = ("write", "pwrite", "pwrite64", "writev", "pwritev", "fwrite")
CHECKPOINT_METHODS = ("torch_save", "dcp_save", "dcp_async_save")
CHUNK = 64 << 20   # bytes per tensor of the synthetic model state


# ---------------------------------------------------------------------------- DFTracer
def preload_library() -> str | None:
    """Path of DFTracer's preload library, or None when the package is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("dftracer")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = Path(d) / "lib64" / "libdftracer_preload.so"
        if p.exists():
            return str(p)
    return None


def tracer_env(log_dir: Path, data_dir: Path) -> dict:
    lib = preload_library()
    return {"LD_PRELOAD": lib, "DFTRACER_ENABLE": "1", "DFTRACER_INIT": "PRELOAD", "DFTRACER_INC_METADATA": "1",
            "DFTRACER_LOG_FILE": str(Path(log_dir) / "trace"), "DFTRACER_DATA_DIR": str(data_dir)}


def posix_probe(work: Path) -> str | None:
    """None when DFTracer's preload library traces a read here; else why not."""
    if preload_library() is None:
        return "dftracer not installed"
    work = Path(work)
    d, logs = work / "probe-data", work / "probe-logs"
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(logs, ignore_errors=True)
    d.mkdir(parents=True)
    logs.mkdir()
    (d / "x").write_bytes(b"x" * 4096)
    code = f"f=open({str(d / 'x')!r},'rb',buffering=0); f.read(100); f.close()"
    env = {**os.environ, **tracer_env(logs, d)}
    try:
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60, text=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"a preloaded process failed ({type(e).__name__})"
    if r.returncode != 0:
        return f"a preloaded process failed: {(r.stderr or '').strip().splitlines()[-1:]}"
    ev = read_trace(logs)
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(logs, ignore_errors=True)
    if not any(e["name"] == "read" for e in ev):
        return "no read call recorded"
    return None


def read_trace(log_dir) -> list[dict]:
    """POSIX events (and the chapter's application spans, ``cat`` "app") of every
    ``*.pfw.gz``/``*.pfw`` file under ``log_dir`` (a truncated gzip
    file, as a worker killed at shutdown can leave, is read up to where it breaks)."""
    events, paths = [], {}
    for f in sorted(glob.glob(str(Path(log_dir) / "*.pfw*"))):
        opener = gzip.open if f.endswith(".gz") else open
        try:
            with opener(f, "rt", errors="replace") as fh:
                for line in fh:
                    line = line.strip().rstrip(",")
                    if not line.startswith("{"):
                        continue
                    try:
                        e = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if e.get("name") == "FH":
                        a = e.get("args", {})
                        paths[a.get("value")] = a.get("name")
                    elif e.get("cat") in ("POSIX", DFT_CAT):
                        a = e.get("args") or {}
                        events.append(dict(name=e["name"], cat=e["cat"], pid=e.get("pid"), ts=e.get("ts", 0),
                                           dur=e.get("dur", 0), ret=a.get("ret"), count=a.get("count"),
                                           fhash=a.get("fhash")))
        except (EOFError, OSError):
            pass
    for e in events:
        e["path"] = paths.get(e.pop("fhash"))
    return events


def summarise_events(events: list[dict]) -> dict:
    """Counts by call, data bytes and transfer sizes of a list of POSIX events."""
    out = {"events": len(events)}
    by = {}
    rd = [e for e in events if e["name"] in READ_CALLS]
    wr = [e for e in events if e["name"] in WRITE_CALLS]
    for e in events:
        by[e["name"]] = by.get(e["name"], 0) + 1
    rbytes = sum(max(int(e["ret"] or 0), 0) for e in rd)
    wbytes = sum(max(int(e["ret"] or 0), 0) for e in wr)
    out.update(reads=len(rd), read_bytes=rbytes, read_s=sum(e["dur"] for e in rd) / 1e6,
               mean_read_bytes=rbytes / len(rd) if rd else None, writes=len(wr), write_bytes=wbytes,
               mean_write_bytes=wbytes / len(wr) if wr else None, write_s=sum(e["dur"] for e in wr) / 1e6,
               opens=sum(v for k, v in by.items() if k.startswith("open")),
               fsyncs=sum(v for k, v in by.items() if "sync" in k),
               mmaps=sum(v for k, v in by.items() if k.startswith("mmap")),
               calls=json.dumps(dict(sorted(by.items()))))
    return out


# ---------------------------------------------------------------------------- samples
class SamplePlan:
    """Megatron-style samples over a shuffled document order: sample ``i`` is tokens
    ``[i * seq, i * seq + seq + 1)`` of the documents concatenated in that order."""

    def __init__(self, index: tokens.Index, seq_length: int, seed: int):
        n_docs = index.lengths.size
        total = index.tokens
        if seq_length + 1 > total:
            raise ParameterError("seq_lengths", seq_length,
                                 f"at most {total - 1:,} tokens: the documents of {index.idx_path} hold {total:,} "
                                 "tokens in all, and a sample needs seq_length + 1")
        rng = np.random.default_rng(seed)
        self.seq = int(seq_length)
        self.doc_order = rng.permutation(n_docs).astype(np.int64)
        lengths = index.lengths.astype(np.int64)
        self.lengths = lengths
        cum = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(lengths[self.doc_order], out=cum[1:])
        self.n_samples = int((total - 1) // seq_length)
        starts = np.arange(self.n_samples, dtype=np.int64) * seq_length
        pos = np.searchsorted(cum, starts, side="right") - 1
        self.sample_doc = pos.astype(np.int64)
        self.sample_off = (starts - cum[pos]).astype(np.int64)
        self.shuffle = rng.permutation(self.n_samples).astype(np.int64)

    ARRAYS = ("doc_order", "lengths", "sample_doc", "sample_off", "shuffle")

    def save(self, path) -> None:
        """Write the plan's arrays to ``path`` (an ``.npz``), so that every child process of the
        chapter loads it instead of rebuilding it."""
        np.savez(path, seq=np.int64(self.seq), n_samples=np.int64(self.n_samples),
                 **{k: getattr(self, k) for k in self.ARRAYS})

    @classmethod
    def load(cls, path) -> SamplePlan:
        with np.load(path) as z:
            plan = cls.__new__(cls)
            plan.seq, plan.n_samples = int(z["seq"]), int(z["n_samples"])
            for k in cls.ARRAYS:
                setattr(plan, k, z[k])
        return plan

    def pieces(self, s: int) -> list[tuple[int, int, int]]:
        """(document, offset, length) of each piece of sample ``s``."""
        need = self.seq + 1
        pos, off = int(self.sample_doc[s]), int(self.sample_off[s])
        out = []
        while need > 0:
            doc = int(self.doc_order[pos])
            take = min(int(self.lengths[doc]) - off, need)
            if take > 0:
                out.append((doc, off, take))
                need -= take
            pos += 1
            off = 0
        return out


class TokenSamples:
    """A map-style Dataset of Megatron-style samples; returns (tokens, labels, span stats).
    With ``dft``, each sample fetch and its index lookup, read and construction are also
    recorded as application spans through DFTracer's Python API (``dft_fn``), in the same
    trace as the POSIX calls of the preloaded library."""

    def __init__(self, tf: tokens.TokenFile, plan: SamplePlan, ids: np.ndarray, spans: bool, dft: bool = False):
        self.tf, self.plan, self.ids, self.spans = tf, plan, np.asarray(ids, dtype=np.int64), spans
        self.dft = dft

    def __len__(self):
        return int(self.ids.size)

    def __getitem__(self, k):
        import torch

        span = _dft_span if self.dft else _no_span
        clock = time.perf_counter_ns if self.spans else _zero
        with span("sample"):
            t0 = clock()
            with span("index_lookup"):
                pieces = self.plan.pieces(int(self.plan.shuffle[self.ids[k]]))
            t1 = clock()
            with span("read"):
                parts = [self.tf.get(d, o, n) for d, o, n in pieces]
            t2 = clock()
            with span("construct"):
                sample = torch.from_numpy(np.concatenate(parts).astype(np.int64))
                toks, labels = sample[:-1], sample[1:]
            t3 = clock()
        nbytes = sum(n for _, _, n in pieces) * self.tf.index.itemsize
        stats = torch.tensor([t1 - t0, t2 - t1, t3 - t2, len(pieces), nbytes], dtype=torch.float64)
        return toks, labels, stats


def _dft_span(name: str):
    """An application span in DFTracer's trace (its Python API)."""
    from dftracer.python import dft_fn

    return dft_fn(cat=DFT_CAT, name=name)


def _no_span(name: str):
    return contextlib.nullcontext()


def _zero() -> int:
    return 0


def collate(batch, spans: bool = False):
    """Stack tokens and labels; sum the samples' span stats; time itself when ``spans``."""
    import torch

    t0 = time.perf_counter_ns() if spans else 0
    toks = torch.stack([b[0] for b in batch])
    labels = torch.stack([b[1] for b in batch])
    stats = torch.stack([b[2] for b in batch]).sum(0)
    t1 = time.perf_counter_ns() if spans else 0
    return toks, labels, stats, t1 - t0


# ---------------------------------------------------------------------------- kernel counters
def proc_counters(pid="self") -> dict:
    """Page faults and CPU seconds (``/proc/<pid>/stat``; ``/proc/<pid>/schedstat`` where it
    exists, for the main thread: DataLoader workers and the loop run there) and I/O counters
    (``/proc/<pid>/io``) of one process."""
    out = {}
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        out["minflt"], out["majflt"] = int(rest[7]), int(rest[9])
        out["cpu_s"] = (int(rest[11]) + int(rest[12])) / _CLK_TCK     # utime + stime, in clock ticks
    except (OSError, IndexError, ValueError):
        out["minflt"] = out["majflt"] = out["cpu_s"] = None
    try:   # nanoseconds on a CPU, of the process's main thread: finer than clock ticks where it exists
        with open(f"/proc/{pid}/schedstat") as f:
            out["cpu_s"] = int(f.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                k, v = line.split(":")
                out[k.strip()] = int(v)
    except (OSError, ValueError):
        pass
    return out


IO_KEYS = ("minflt", "majflt", "rchar", "syscr", "read_bytes", "wchar", "syscw", "write_bytes", "cpu_s")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: Slots per worker in the shared array: its pid, its counters at start, the time it started.
_SLOTS = len(IO_KEYS) + 2


def _delta(a: dict, b: dict) -> dict:
    return {k: (b[k] - a[k]) if a.get(k) is not None and b.get(k) is not None else None for k in IO_KEYS}


def block_device(path) -> str | None:
    """The whole-disk name (``/proc/diskstats``) holding ``path``, or None (overlay, tmpfs, ...)."""
    try:
        st = os.stat(path)
        sys_dir = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve()
    except OSError:
        return None
    if not sys_dir.exists():
        return None
    if (sys_dir / "partition").exists():
        sys_dir = sys_dir.parent
    return sys_dir.name


def read_ahead_kb(dev: str | None) -> int | None:
    try:
        return int(Path(f"/sys/block/{dev}/queue/read_ahead_kb").read_text()) if dev else None
    except (OSError, ValueError):
        return None


def disk_counters(dev: str | None) -> dict | None:
    """Reads completed and bytes read of ``dev`` from ``/proc/diskstats``."""
    if not dev:
        return None
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if len(p) > 6 and p[2] == dev:
                    return {"disk_reads": int(p[3]), "disk_read_bytes": int(p[5]) * 512}
    except OSError:
        return None
    return None


def _worker_start(shared, worker_id: int) -> None:
    """worker_init_fn: record this worker's pid, counters and start time (``perf_counter``, one
    monotonic clock for all processes), so its own work can be told apart."""
    c = proc_counters()
    base = worker_id * _SLOTS
    shared[base] = os.getpid()
    for j, k in enumerate(IO_KEYS):
        shared[base + 1 + j] = c.get(k) or 0
    shared[base + _SLOTS - 1] = time.perf_counter()


# ---------------------------------------------------------------------------- one configuration
def time_loader(ds: TokenSamples, *, batch_size: int, workers: int, steps: int, dev: str | None = None) -> dict:
    """``steps`` batches through a DataLoader; per-step waits, app spans and kernel counters."""
    import multiprocessing

    import torch
    from torch.utils.data import DataLoader

    shared = multiprocessing.Array("d", max(workers, 1) * _SLOTS, lock=False)
    dl = DataLoader(ds, batch_size=batch_size, shuffle=False, num_workers=workers,
                    collate_fn=functools.partial(collate, spans=ds.spans),
                    worker_init_fn=functools.partial(_worker_start, shared) if workers else None)
    b0 = proc_counters()
    disk_counters(dev)
    own = _delta(b0, proc_counters())     # what taking the counters itself costs (reads of /proc)
    k0, d0 = proc_counters(), disk_counters(dev)
    t0 = time.perf_counter()
    it = iter(dl)
    waits, stats, collate_ns, toks = [], torch.zeros(5, dtype=torch.float64), 0, 0
    for _ in range(steps):
        tb = time.perf_counter()
        x, y, s, c = next(it)
        waits.append(time.perf_counter() - tb)
        stats += s
        collate_ns += c
        toks += x.numel()
    loader_s = time.perf_counter() - t0
    k1, d1 = proc_counters(), disk_counters(dev)
    kern = _delta(k0, k1)
    for k in ("syscr", "rchar"):
        if kern[k] is not None and own[k] is not None:
            kern[k] = max(kern[k] - own[k], 0)
    wk = {k: 0 for k in IO_KEYS}
    starts = []
    for w in range(workers):
        base = w * _SLOTS
        pid = int(shared[base])
        if pid:
            starts.append(shared[base + _SLOTS - 1] - t0)
        now = proc_counters(pid) if pid else {}
        for j, k in enumerate(IO_KEYS):
            if now.get(k) is not None and wk[k] is not None:
                wk[k] += now[k] - int(shared[base + 1 + j])
            else:
                wk[k] = None
    del it
    row = dict(loader_s=loader_s, first_batch_s=waits[0],
               step_ms=float(np.median(waits[1:])) * 1e3 if len(waits) > 1 else waits[0] * 1e3,
               samples=steps * batch_size, tokens=toks, app_bytes=float(stats[4]), pieces=float(stats[3]),
               lookup_s=float(stats[0]) / 1e9, read_s=float(stats[1]) / 1e9, construct_s=float(stats[2]) / 1e9,
               collate_s=collate_ns / 1e9,
               # when the first and the last worker started, from the loader's start (None: no workers)
               workers_first_start_s=min(starts) if starts else None,
               workers_last_start_s=max(starts) if starts else None, workers_started=len(starts))
    for k in IO_KEYS:
        row[f"main_{k}"] = kern[k]
        row[f"workers_{k}"] = wk[k] if workers else 0
        row[k] = (kern[k] + wk[k]) if kern[k] is not None and wk[k] is not None else None
    if d0 and d1:
        row.update(disk_reads=d1["disk_reads"] - d0["disk_reads"],
                   disk_read_bytes=d1["disk_read_bytes"] - d0["disk_read_bytes"])
    else:
        row.update(disk_reads=None, disk_read_bytes=None)
    return row


def _cache(files, state: str, method: str) -> dict:
    if state == "cold":
        rep = pagecache.purge(files, method)
        return {"purge_method": rep.method, "resident_at_start": rep.after["fraction"]}
    if pagecache.residency(files).fraction < 0.999:
        pagecache.warm(files)
    return {"purge_method": "none (warm)", "resident_at_start": pagecache.residency(files).fraction}


# ---------------------------------------------------------------------------- checkpoints
def make_state(nbytes: int, device: str):
    """A synthetic model state of ``nbytes`` (float32 tensors of at most 64 MiB)."""
    import torch

    state, left, i = {}, int(nbytes), 0
    while left > 0:
        n = min(left, CHUNK) // 4
        state[f"layer{i:04d}.weight"] = torch.ones(max(n, 1), dtype=torch.float32, device=device)
        left -= max(n, 1) * 4
        i += 1
    return state


def save_checkpoint(state: dict, method: str, target: Path) -> dict:
    """Save ``state`` with ``method`` to ``target``; the caller's blocked time and the time until
    the files are synced (``fsync``: always, for every method)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    k0 = proc_counters()
    t0 = time.perf_counter()
    if method == "torch_save":
        torch.save(state, target)
        t_saved = time.perf_counter()
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        blocked = total = time.perf_counter() - t0
        extra = {"save_without_fsync_s": t_saved - t0}
    else:
        import warnings

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter

        writer = FileSystemWriter(str(target), sync_files=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if method == "dcp_save":
                dcp.save(state, storage_writer=writer)
                blocked = total = time.perf_counter() - t0
            else:
                fut = dcp.async_save(state, storage_writer=writer)
                blocked = time.perf_counter() - t0
                fut.result()
                total = time.perf_counter() - t0
        extra = {"save_without_fsync_s": None}
    k1 = proc_counters()
    files = [target] if target.is_file() else [p for p in target.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return dict(method=method, blocked_s=blocked, total_s=total, file_bytes=size, files=len(files),
                kernel_write_bytes=_delta(k0, k1)["write_bytes"], fsync=True, **extra)


def checkpoint_sweep(sizes, runs: int, work: Path, progress=None) -> pd.DataFrame:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    work = Path(work)
    small = make_state(1 << 20, device)
    for method in CHECKPOINT_METHODS:   # untimed: the first save of each method pays one-time set-up
        target = work / f"warmup-{method}"
        save_checkpoint(small, method, target)
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink()
    for size in sizes:
        state = make_state(size, device)
        for run in range(runs):
            for method in CHECKPOINT_METHODS:
                target = work / f"ckpt-{method}"
                shutil.rmtree(target, ignore_errors=True)
                if target.is_file():
                    target.unlink()
                r = save_checkpoint(state, method, target)
                r.update(state_bytes=size, run=run, device=device, GBps=r["file_bytes"] / r["total_s"] / 1e9)
                rows.append(r)
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                elif target.exists():
                    target.unlink()
                if progress:
                    progress.update(1)
        del state
        if device == "cuda":
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- a child process
def child(spec: dict) -> list[dict]:
    """Run ``spec['configs']`` in this process (the tracer, if any, is preloaded by the parent)."""
    prefix = Path(spec["prefix"])
    # the cache state is set on .bin; the .idx stays mapped (as in Megatron), so it stays resident
    files = [prefix.with_suffix(".bin")]
    dev = block_device(files[0])
    files_tf = {m: tokens.TokenFile(prefix, m) for m in MODES}
    plans: dict = {}
    rows = []
    ckpt_dir = Path(spec["ckpt_dir"]) if spec.get("ckpt_dir") else None
    state = make_state(spec["ckpt_bytes"], "cpu") if spec.get("ckpt_bytes") else None
    if state is not None and ckpt_dir is not None:   # untimed warm-up of the checkpoint writer
        save_checkpoint(state, "dcp_save", ckpt_dir / "warmup")
        shutil.rmtree(ckpt_dir / "warmup", ignore_errors=True)
    saved = spec.get("plans") or {}
    dft = None
    if spec.get("dft_spans") and os.environ.get("DFTRACER_ENABLE") == "1":
        try:
            from dftracer.python import dftracer as _dft

            # the log file named as the preload library's, so that the Python side's own debug log
            # (dft.log) lands in the trace directory, not in the working directory
            dft = _dft.initialize_log(logfile=os.environ.get("DFTRACER_LOG_FILE"), data_dir=None, process_id=-1)
        except Exception:  # noqa: BLE001 - without the Python API the POSIX view still runs
            dft = None
    for c in spec["configs"]:
        key = (c["seq"], c["seed"])
        if key not in plans:
            t = time.perf_counter()
            built = saved.get(f"{c['seq']}-{c['seed']}")
            if built:   # built once by the parent: load it, keep the time it took to build
                plans[key] = SamplePlan.load(built[0])
                plans[key].build_s = built[1]
            else:
                plans[key] = SamplePlan(files_tf["mmap"].index, c["seq"], c["seed"])
                plans[key].build_s = time.perf_counter() - t
        plan = plans[key]
        view = c.get("view", spec["view"])
        spans = view in ("app", "both")
        n = c["steps"] * c["batch"]
        if n > plan.n_samples:
            raise ParameterError("batch_sizes", c["batch"],
                                 f"at most {plan.n_samples // c['steps']:,} at seq_length {c['seq']} with "
                                 f"{c['steps']} steps (the data set holds {plan.n_samples:,} samples)")
        start = (c["run"] * n) % max(plan.n_samples - n + 1, 1)
        # application spans in the main process only: a forked worker's copy of the Python
        # tracer would not write to the trace
        ds = TokenSamples(files_tf[c["mode"]], plan, np.arange(start, start + n), spans,
                          dft=dft is not None and c["workers"] == 0 and c.get("part") != "overhead")
        for tf in files_tf.values():
            tf.release()
        cache = _cache(files, c["cache"], spec["purge_method"])
        w0 = time.time_ns() // 1000
        r = time_loader(ds, batch_size=c["batch"], workers=c["workers"], steps=c["steps"], dev=dev)
        w1 = time.time_ns() // 1000
        row = {**c, **cache, **r, "view": view, "window_start_us": w0, "window_end_us": w1,
               "plan_build_s": plan.build_s, "device": dev}
        if state is not None and ckpt_dir is not None and c.get("part") != "overhead":
            target = ckpt_dir / "dcp"
            w2 = time.time_ns() // 1000
            ck = save_checkpoint(state, "dcp_save", target)
            row.update(
                ckpt_window_start_us=w2,
                ckpt_window_end_us=time.time_ns() // 1000,
                ckpt_s=ck["total_s"],
                ckpt_bytes=ck["file_bytes"],
                ckpt_kernel_write_bytes=ck["kernel_write_bytes"],
            )
            shutil.rmtree(target, ignore_errors=True)
        if not c.get("discard"):
            rows.append(row)
    if state is not None and ckpt_dir is not None and spec.get("ckpt_methods"):
        for method in CHECKPOINT_METHODS:
            target = ckpt_dir / f"m-{method}"
            w2 = time.time_ns() // 1000
            ck = save_checkpoint(state, method, target)
            rows.append({"phase": "checkpoint_method", **ck, "window_start_us": w2,
                         "window_end_us": time.time_ns() // 1000, "view": spec["view"]})
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink()
    if dft is not None:
        dft.finalize()
    return rows


def run_child(spec: dict, work: Path, trace_root: Path) -> tuple[pd.DataFrame, list[dict] | None]:
    """Run ``spec`` in a fresh Python process with the view's tracer; rows and POSIX events."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    tag = f"{spec['view']}-{time.time_ns()}"
    spec_path, out_path, logs = work / f"{tag}.json", work / f"{tag}.out.json", work / f"{tag}-logs"
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ)
    posix = spec["view"] in ("posix", "both")
    if posix:
        logs.mkdir()
        env.update(tracer_env(logs, trace_root))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = subprocess.run(
        [sys.executable, "-m", "datajourney.chapters.c10_mmap_vs_read.experiment", str(spec_path), str(out_path)],
        env=env,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        tail = "\n".join((r.stderr or "").strip().splitlines()[-15:])
        raise RuntimeError(f"the {spec['view']} measurement process failed (exit {r.returncode}):\n{tail}")
    rows = json.loads(out_path.read_text())
    events = read_trace(logs) if posix else None
    shutil.rmtree(logs, ignore_errors=True)
    spec_path.unlink()
    out_path.unlink()
    return pd.DataFrame(rows), events


def events_in(events: list[dict], start_us: int, end_us: int, ts: list | None = None) -> list[dict]:
    """The events with ``start_us <= ts <= end_us``; with ``ts`` (the events' sorted time
    stamps; ``events`` sorted the same way) found by bisection."""
    if ts is None:
        return [e for e in events if start_us <= e["ts"] <= end_us]
    import bisect

    return events[bisect.bisect_left(ts, start_us):bisect.bisect_right(ts, end_us)]


def attach_posix(rows: pd.DataFrame, events: list[dict], bin_name: str) -> pd.DataFrame:
    """Per row: the POSIX events inside its time window (data phase, and checkpoint phase)."""
    events = sorted(events, key=lambda e: e["ts"])
    stamps = [e["ts"] for e in events]
    events_in_ = functools.partial(events_in, ts=stamps)
    out = []
    for _, r in rows.iterrows():
        d = r.to_dict()
        both = events_in_(events, int(r["window_start_us"]), int(r["window_end_us"]))
        ev = [e for e in both if e.get("cat", "POSIX") == "POSIX"]
        app = [e for e in both if e.get("cat") == DFT_CAT]
        s = summarise_events(ev)
        d["app_spans"] = len(app)
        for name in DFT_SPANS:
            sel = [e for e in app if e["name"] == name]
            d[f"app_{name}_n"] = len(sel)
            d[f"app_{name}_s"] = sum(e["dur"] for e in sel) / 1e6
        d.update({f"posix_{k}": v for k, v in s.items()})
        d["posix_bin_reads"] = sum(1 for e in ev if e["name"] in READ_CALLS and (e["path"] or "").endswith(bin_name))
        if pd.notna(d.get("ckpt_window_start_us")):
            ce = summarise_events([e for e in events_in_(events, int(r["ckpt_window_start_us"]),
                                                         int(r["ckpt_window_end_us"]))
                                   if e.get("cat", "POSIX") == "POSIX"])
            d.update({f"ckpt_posix_{k}": v for k, v in ce.items()})
        out.append(d)
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class Plan:
    """What :func:`preflight` found: the checked parameters and the directory the data set lives in."""

    params: Params
    data_dir: Path
    #: with ``token_path``: the reader's token data (:class:`~datajourney.toolkit.yourdata.TokenSource`)
    yours: object = None


def your_tokens(q: Params):
    """The reader's token data at ``token_path`` (checked: one-line errors naming it), its token count and the
    tokenizer a text folder is tokenised with (GPT-2's, as the book's set)."""
    from datajourney.toolkit import textdata, yourdata

    src = yourdata.token_source(q.token_path, data_dir=datasets.parent_dir(q.data_dir))
    tok = None if src.is_megatron else textdata.load_tokenizer()[0]
    return src, src.token_count(tok), tok


def preflight(params) -> Plan:
    """Every parameter checked (:meth:`Params.checked`), then what the declarations cannot say: a checkpoint
    size of at least 1 MiB, the worker counts this machine can start, samples that fit the data set, the
    tracer's library, memory for the batches in flight and the checkpoints, free space."""
    q = Params.coerce(params).checked()
    if any(c < 1 << 20 for c in q.checkpoint_sizes):
        raise ParameterError("checkpoint_sizes", q.checkpoint_sizes, "a list of sizes of at least 1 MiB (or [])")
    limit = max(64, 4 * (os.cpu_count() or 1))
    if max(q.workers) > limit:
        raise ParameterError("workers", q.workers, f"a list of integers from 0 to {limit}")
    if q.purge_method == "drop_caches" and not pagecache.can_drop_caches():
        raise ParameterError("purge_method", "drop_caches", "'auto' or 'fadvise' (drop_caches needs root)")
    if q.posix_view == "on" and preload_library() is None:
        raise ParameterError("posix_view", "on", "'auto' or 'off' here: the dftracer package is not installed "
                             "(pip install dftracer pydftracer)")
    # a sample needs seq_length + 1 tokens; the data set holds dataset_bytes / 2 of them (or the reader's count)
    yours = your_tokens(q) if q.token_path is not None else None
    total = yours[1] if yours else q.dataset_bytes // 2
    for name, seqs, batches in (("seq_lengths", q.seq_lengths, q.batch_sizes),
                                ("workers_seq_length", [q.workers_seq_length], [q.workers_batch_size]),
                                ("overhead_seq_length", [q.overhead_seq_length], [q.overhead_batch_size])):
        for s in seqs:
            if s + 1 > total:
                raise ParameterError(name, s, f"at most {total - 1:,} tokens: a data set of dataset_bytes "
                                     f"{q.dataset_bytes:,} holds {total:,} uint16 tokens and a sample needs "
                                     "seq_length + 1")
            for b in batches:
                if q.steps * b > (total - 1) // s:
                    raise ParameterError("batch_sizes" if name == "seq_lengths" else name.replace("seq_length",
                                         "batch_size"), b, f"at most {((total - 1) // s) // q.steps:,} at "
                                         f"seq_length {s} with {q.steps} steps: the data set holds "
                                         f"{(total - 1) // s:,} samples of that length")
    big = max([max(q.batch_sizes), q.workers_batch_size, q.overhead_batch_size])
    big_seq = max([*q.seq_lengths, q.workers_seq_length, q.overhead_seq_length])
    memory("batch_sizes", big, big * (big_seq + 1) * 8 * 3 * (2 * max(q.workers) + 3), what="the batches in flight")
    if q.checkpoint_sizes:
        memory("checkpoint_sizes", max(q.checkpoint_sizes), 3 * max(q.checkpoint_sizes),
               what="the model state, copied twice")
    if yours:
        from datajourney.toolkit import yourdata

        need = [] if yours[0].is_megatron else [yourdata.token_set_plan(yours[0])]
        parent = datasets.check_space(q.data_dir, need)
    else:
        parent = datasets.check_space(q.data_dir, [tokens.plan(q.dataset_bytes, q.seed)])
    need = 3 * max(q.checkpoint_sizes or [0]) + 4 * q.posix_checkpoint_bytes
    if need:
        from datajourney.core.params import free_space

        free_space("checkpoint_sizes", parent, need)
    return Plan(q, parent, yours[0] if yours else None)


def _configs(p: dict) -> list[dict]:
    """The main sweep (W=0 grid) and the workers sweep, modes interleaved."""
    cs = []
    for cache in p["cache_states"]:
        for run in range(p["runs"]):
            for seq in p["seq_lengths"]:
                for batch in p["batch_sizes"]:
                    for mode in (MODES if run % 2 == 0 else MODES[::-1]):
                        cs.append(dict(part="grid", mode=mode, seq=seq, batch=batch, workers=0, cache=cache, run=run,
                                       steps=p["steps"], seed=p["seed"]))
            for w in p["workers"]:
                if (
                    w == 0
                    and p["workers_seq_length"] in p["seq_lengths"]
                    and p["workers_batch_size"] in p["batch_sizes"]
                ):
                    continue   # the same configuration as the grid's point: its rows are copied, not re-run
                for mode in (MODES if run % 2 == 0 else MODES[::-1]):
                    cs.append(dict(part="workers", mode=mode, seq=p["workers_seq_length"],
                                   batch=p["workers_batch_size"], workers=w, cache=cache, run=run, steps=p["steps"],
                                   seed=p["seed"]))
    return cs


def workers_from_grid(rows: pd.DataFrame, p: dict) -> pd.DataFrame:
    """The workers sweep's 0-worker rows, when its point is a point of the grid: the grid's rows
    of that point (the same samples, cache state, run and steps), relabelled and marked."""
    if 0 not in p["workers"] or rows.empty or "part" not in rows:
        return rows
    g = rows[(rows["part"] == "grid") & (rows["seq"] == p["workers_seq_length"])
             & (rows["batch"] == p["workers_batch_size"]) & (rows["workers"] == 0)]
    if g.empty or ((rows["part"] == "workers") & (rows["workers"] == 0)).any():
        return rows
    return pd.concat([rows, g.assign(part="workers", from_grid=True)], ignore_index=True)


def build_plans(index: tokens.Index, keys, work: Path) -> dict:
    """Build each (seq_length, seed) sample plan once and save it for the child processes:
    ``{"seq-seed": [path, seconds to build]}``."""
    out = {}
    for seq, seed in sorted(set(keys)):
        t = time.perf_counter()
        plan = SamplePlan(index, seq, seed)
        dt = time.perf_counter() - t
        path = Path(work) / f"plan-{seq}-{seed}.npz"
        plan.save(path)
        out[f"{seq}-{seed}"] = [str(path), dt]
    return out


def overhead_specs(views, rnd: int, cfg: list[dict]) -> list[tuple[str, list[dict]]]:
    """The child processes of one overhead round: the views without the tracer (off, app) share
    one process and those with it (posix, both) another; within each, the views alternate
    configuration by configuration, in an order that turns with the round."""
    order = list(views[rnd % len(views):]) + list(views[:rnd % len(views)])
    groups = {}
    for v in order:
        groups.setdefault("posix" if v in ("posix", "both") else "off", []).append(v)
    specs = []
    for proc, vs in groups.items():
        timed = [dict(c, view=v) for c in cfg for v in (vs if rnd % 2 == 0 else vs[::-1])]
        # the first loader of a process pays one-time costs (imports, first allocations): an
        # untimed copy of the first configuration runs before the timed ones
        specs.append((proc, [dict(timed[0], discard=True)] + timed))
    return specs


def measure(plan: Plan, context) -> None:
    """Run chapter 10's experiments into the started result (its tables and metadata)."""
    from tqdm import tqdm

    q, parent = plan.params, plan.data_dir
    p = q.as_dict()
    res, progress = context.result, context.progress
    lap = timing.Laps()

    if plan.yours is not None:   # the reader's pair read where it lies (or their text, tokenised once)
        from datajourney.toolkit import textdata, yourdata

        tok = None if plan.yours.is_megatron else textdata.load_tokenizer()[0]
        ts = yourdata.token_set(plan.yours, parent, tokenizer=tok, eos=textdata.eos_id(tok) if tok else None,
                                progress=progress)
        res.metadata["your_data"] = plan.yours.describe(tok, seed=p["seed"])
    else:
        ts = tokens.token_dataset(parent, total_bytes=p["dataset_bytes"], seed=p["seed"], progress=progress)
    lap("data set")
    work = Path(tempfile.mkdtemp(prefix="ch10-", dir=parent))
    try:
        keys = [(s_, p["seed"]) for s_ in p["seq_lengths"]] + [(p["workers_seq_length"], p["seed"])]
        if p["overhead_rounds"]:
            keys.append((p["overhead_seq_length"], p["seed"]))
        plans = build_plans(tokens.read_index(ts.prefix.with_suffix(".idx")), keys, work)
        lap("sample plans")
        why_not = None if p["posix_view"] != "off" else "switched off (posix_view = 'off')"
        if why_not is None:
            why_not = posix_probe(work)
            if why_not and p["posix_view"] == "on":
                raise ParameterError("posix_view", "on", f"'auto' or 'off' here: {why_not}")
        posix_ok = why_not is None
        views = [v for v in VIEWS if posix_ok or v in ("off", "app")]
        n_over = p["overhead_rounds"] * len(views)
        steps_total = 1 + (1 if posix_ok else 0) + n_over + len(p["checkpoint_sizes"]) * p["checkpoint_runs"] * 3
        base = dict(prefix=str(ts.prefix), purge_method=p["purge_method"], plans=plans)
        lap("probe")
        cfg_over = [dict(part="overhead", mode=m, seq=p["overhead_seq_length"], batch=p["overhead_batch_size"],
                         workers=0, cache="warm", run=0, steps=p["steps"], seed=p["seed"]) for m in MODES]
        # round 0 of the overhead runs at the end of the sweep's process (views off, app) and of the
        # POSIX view's (posix, both), after a warm-up pass; the other rounds start their own
        first = dict(overhead_specs(views, 0, cfg_over)) if p["overhead_rounds"] else {}
        over = []

        def split(rows_, proc):
            if "part" not in rows_ or proc not in first:
                return rows_
            o = rows_["part"] == "overhead"
            if o.any():
                over.append(rows_[o].assign(round=0).dropna(axis=1, how="all"))
                bar.update(len(set(rows_[o]["view"])))
            return rows_[~o]

        with tqdm(total=steps_total, desc="chapter 10", disable=not progress, mininterval=10) as bar:
            rows, _ = run_child({**base, "view": "app", "configs": _configs(p) + first.get("off", [])}, work, parent)
            rows = split(rows, "off")
            rows = workers_from_grid(rows, p)
            res.add("sweep", rows.drop(columns=[c for c in ("window_start_us", "window_end_us") if c in rows]))
            bar.update(1)
            lap("sweep")
            if posix_ok:
                cfg = [dict(part="posix", mode=m, seq=s, batch=b, workers=0, cache="warm", run=0, steps=p["steps"],
                            seed=p["seed"]) for s in p["seq_lengths"] for b in p["batch_sizes"] for m in MODES]
                cfg += [dict(part="posix_workers", mode=m, seq=p["workers_seq_length"], batch=p["workers_batch_size"],
                             workers=max(p["workers"]), cache="warm", run=0, steps=p["steps"], seed=p["seed"])
                        for m in MODES] if max(p["workers"]) > 0 else []
                ck = work / "ckpt"
                ck.mkdir()
                prow, events = run_child({**base, "view": "posix", "configs": cfg + first.get("posix", []),
                                          "ckpt_dir": str(ck), "dft_spans": True,
                                          "ckpt_bytes": p["posix_checkpoint_bytes"], "ckpt_methods": True},
                                         work, parent)
                prow = split(prow, "posix")
                posix = attach_posix(prow, events, "tokens.bin")
                res.add("posix", posix[posix.get("phase", pd.Series(index=posix.index)).isna()]
                        if "phase" in posix else posix)
                if "phase" in posix:
                    res.add("posix_checkpoint", posix[posix["phase"].notna()].dropna(axis=1, how="all"))
                bar.update(1)
            lap("posix view")
            for rnd in range(1, p["overhead_rounds"]):
                for proc, configs in overhead_specs(views, rnd, cfg_over):
                    orow, _ = run_child({**base, "view": proc, "configs": configs}, work, parent)
                    orow["round"] = rnd
                    over.append(orow)
                    bar.update(len({c["view"] for c in configs}))
            if over:
                o = pd.concat(over, ignore_index=True)
                res.add("overhead", o.drop(columns=[c for c in o if c.startswith("ckpt_") or c in (
                    "window_start_us", "window_end_us")]))
            lap("overhead")
            if p["checkpoint_sizes"]:
                res.add("checkpoint", checkpoint_sweep(p["checkpoint_sizes"], p["checkpoint_runs"], work, bar))
            lap("checkpoints")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    comp = ts.manifest.get("composition", {})
    res.metadata.update(dataset={k: ts.manifest.get(k) for k in ("params", "bytes", "sha256", "generation_seconds")},
                        composition=comp, posix_view=posix_ok, posix_why_not=why_not, views=views,
                        tracer=_tracer_version() if posix_ok else None,
                        itemsize=tokens.read_index(ts.prefix.with_suffix(".idx")).itemsize,
                        constant_tolerance=CONSTANT_TOLERANCE, cores=os.cpu_count(),
                        block_device=block_device(ts.files[0]),
                        read_ahead_kb=read_ahead_kb(block_device(ts.files[0])), seconds=lap.seconds)


def _tracer_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("dftracer")
    except Exception:  # noqa: BLE001 - the version is informative only
        return None


if __name__ == "__main__":
    import datajourney.chapters.c10_mmap_vs_read.experiment as _mod

    _spec = json.loads(Path(sys.argv[1]).read_text())
    _rows = _mod.child(_spec)
    Path(sys.argv[2]).write_text(json.dumps(_rows, default=lambda o: o.item() if hasattr(o, "item") else str(o)))
