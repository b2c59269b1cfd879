"""Chapter 2: random small-file reads vs one sequential shard, in plain Python.

What is measured: the wall time to read every byte of a data set either as ``N`` small
files opened in shuffled order (``open``/``read``/``close`` each) or as one contiguous
shard read front to back in fixed-size chunks; cold (page cache purged and verified
before every run) and warm (data read once, then timed). Bandwidth is in MB/s with
MB = 10^6 bytes, as in the published figures.
"""
from __future__ import annotations

import mmap
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from . import datasets, pagecache
from .book.params import ParameterError, choice, choices, int_list, positive_int

MB = 1e6
CACHE_STATES = ("cold", "warm")


# --------------------------------------------------------------------------- readers
def read_files(paths: Sequence[Path], size: int) -> int:
    """Open, read and close each file in the given order; return the bytes read."""
    buf = bytearray(size)
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            total += f.readinto(buf)
    return total


def read_sequential(path: Path, chunk: int) -> int:
    """Read one file front to back in ``chunk``-byte ``read`` calls into a reused buffer."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            total += n
    return total


def read_direct(path: Path, chunk: int, max_bytes: int | None = None) -> int:
    """Like :func:`read_sequential` but with ``O_DIRECT`` (no page cache), page-aligned buffer.

    Raises ``OSError`` where the file system refuses ``O_DIRECT`` (older tmpfs, some overlay and
    network file systems).
    """
    if not hasattr(os, "O_DIRECT"):
        raise OSError("O_DIRECT is not available on this platform")
    buf = mmap.mmap(-1, chunk)  # anonymous mappings are page aligned
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    total = 0
    try:
        limit = max_bytes or os.fstat(fd).st_size
        while total < limit:
            n = os.readv(fd, [buf])
            if n == 0:
                break
            total += n
    finally:
        os.close(fd)
        buf.close()
    return total


def dd_read(path: Path, block: int = 1 << 20) -> tuple[int, float]:
    """Read a file with ``dd of=/dev/null``; (bytes, seconds) as dd itself reports them."""
    out = subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", f"bs={block}"],
        capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, check=True,
    )
    m = re.search(r"^(\d+) bytes .* copied, ([0-9.eE+-]+) s", out.stderr, re.M)
    if not m:
        raise RuntimeError(f"could not parse dd output: {out.stderr!r}")
    return int(m.group(1)), float(m.group(2))


def timed(fn, *args) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = fn(*args)
    return n, time.perf_counter() - t0


# --------------------------------------------------------------------------- cache state
def set_cache_state(paths: Sequence[Path], state: str, method: str) -> dict:
    """Purge (cold) or pre-read (warm) ``paths``; return what was done and the residency."""
    if state == "cold":
        rep = pagecache.purge(paths, method)
        return {
            "purge_method": rep.method,
            "resident_before_purge": rep.before["fraction"],
            "resident_at_start": rep.after["fraction"],
        }
    res = pagecache.warm(paths)
    return {"purge_method": "none (warm)", "resident_before_purge": None, "resident_at_start": res.fraction}


# --------------------------------------------------------------------------- experiments
def measure_random_vs_sequential(
    ds: datasets.SmallFiles, *, runs: int, cache_states: Sequence[str], method: str, seed: int,
    chunk: int | None = None, progress=None,
) -> pd.DataFrame:
    """Shuffled small-file reads vs the shard read in ``chunk`` (default: file size) chunks."""
    chunk = chunk or ds.file_size
    files = ds.files
    everything = files + [ds.shard]
    rows = []
    for state in cache_states:
        for run in range(runs):
            order = np.random.default_rng(seed + run).permutation(len(files))
            shuffled = [files[i] for i in order]
            for pattern in ("random", "sequential"):
                info = set_cache_state(everything, state, method)
                if pattern == "random":
                    n, s = timed(read_files, shuffled, ds.file_size)
                else:
                    n, s = timed(read_sequential, ds.shard, chunk)
                rows.append(dict(pattern=pattern, cache=state, run=run, file_size=ds.file_size,
                                 n_files=ds.n_files, chunk=chunk, bytes=n, seconds=s,
                                 MBps=n / s / MB, **info))
                if progress:
                    progress.update(1)
    return pd.DataFrame(rows)


def measure_chunk_sweep(
    sh: datasets.Shard, *, chunks: Sequence[int], runs: int, method: str, odirect: bool,
    odirect_max_bytes: int, progress=None,
) -> pd.DataFrame:
    """Cold sequential read of one shard for each chunk size, buffered and with O_DIRECT."""
    rows = []
    modes = ["buffered"] + (["O_DIRECT"] if odirect else [])
    for run in range(runs):
        for chunk in chunks:
            for mode in modes:
                info = set_cache_state([sh.path], "cold", method)
                err = None
                try:
                    if mode == "buffered":
                        n, s = timed(read_sequential, sh.path, chunk)
                    else:
                        n, s = timed(read_direct, sh.path, chunk, odirect_max_bytes)
                except OSError as e:
                    n, s, err = 0, float("nan"), f"{type(e).__name__}: {e}"
                rows.append(dict(mode=mode, chunk=chunk, run=run, bytes=n, seconds=s,
                                 MBps=(n / s / MB) if n else float("nan"), error=err, **info))
                if progress:
                    progress.update(1)
    return pd.DataFrame(rows)


def measure_dd_fidelity(sh: datasets.Shard, *, runs: int, method: str, progress=None) -> pd.DataFrame:
    """Python's 1 MiB sequential cold read vs ``dd bs=1M``, interleaved, same purge each time."""
    rows = []
    for run in range(runs):
        for tool in ("python", "dd"):
            info = set_cache_state([sh.path], "cold", method)
            if tool == "python":
                n, s = timed(read_sequential, sh.path, 1 << 20)
            else:
                n, s = dd_read(sh.path, 1 << 20)
            rows.append(dict(tool=tool, run=run, bytes=n, seconds=s, MBps=n / s / MB, **info))
            if progress:
                progress.update(1)
    return pd.DataFrame(rows)


def measure_purge_methods(ds: datasets.SmallFiles, *, runs: int, seed: int, progress=None) -> pd.DataFrame:
    """Cold shuffled small-file reads after drop_caches vs after per-file fadvise (needs root).

    fadvise evicts file data but leaves dentries and inodes cached, so each ``open`` is
    cheaper than on a truly cold machine; this table shows by how much.
    """
    rows = []
    files = ds.files
    for run in range(runs):
        order = np.random.default_rng(seed + run).permutation(len(files))
        shuffled = [files[i] for i in order]
        for method in ("drop_caches", "fadvise"):
            rep = pagecache.purge(files, method)
            n, s = timed(read_files, shuffled, ds.file_size)
            rows.append(dict(purge_method=method, run=run, bytes=n, seconds=s, MBps=n / s / MB,
                             resident_at_start=rep.after["fraction"]))
            if progress:
                progress.update(1)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- chapter
def check_parameters(p: dict) -> dict:
    """Validate chapter 2's parameters before any work; return them normalised."""
    q = dict(p)
    q["n_files"] = positive_int("n_files", p["n_files"], maximum=datasets.MAX_FILES)
    q["file_size"] = positive_int("file_size", p["file_size"], maximum=1 << 30)
    q["runs"] = positive_int("runs", p["runs"], maximum=1000)
    q["cache_states"] = choices("cache_states", p["cache_states"], CACHE_STATES)
    q["purge_method"] = choice("purge_method", p["purge_method"], pagecache.METHODS)
    q["size_sweep"] = int_list("size_sweep", p["size_sweep"], minimum=1, maximum=1 << 30) if p["size_sweep"] else []
    q["sweep_bytes"] = positive_int("sweep_bytes", p["sweep_bytes"], maximum=datasets.MAX_BYTES)
    q["shard_size"] = positive_int("shard_size", p["shard_size"], maximum=datasets.MAX_BYTES)
    q["chunk_sweep"] = int_list("chunk_sweep", p["chunk_sweep"], minimum=512, maximum=1 << 30)
    for c in q["chunk_sweep"]:
        if c > q["shard_size"]:
            raise ParameterError("chunk_sweep", c, f"chunk sizes up to shard_size ({q['shard_size']:,} bytes)")
        if c % 512:
            raise ParameterError("chunk_sweep", c, "multiples of 512 bytes (O_DIRECT needs aligned reads)")
    for s in q["size_sweep"]:
        if s > q["sweep_bytes"]:
            raise ParameterError("size_sweep", s, f"sizes up to sweep_bytes ({q['sweep_bytes']:,})")
    q["odirect_max_bytes"] = positive_int("odirect_max_bytes", p["odirect_max_bytes"], maximum=datasets.MAX_BYTES)
    if q["purge_method"] == "drop_caches" and not pagecache.can_drop_caches():
        raise ParameterError("purge_method", "drop_caches", "'auto' or 'fadvise' (drop_caches needs root)")
    return q


def plans(p: dict) -> list:
    """Every data set chapter 2 needs, for the up-front free-space check."""
    out = [datasets.small_files_plan(p["n_files"], p["file_size"], p["seed"]),
           datasets.shard_plan(p["shard_size"], p["seed"])]
    out += [datasets.small_files_plan(max(1, p["sweep_bytes"] // s), s, p["seed"]) for s in p["size_sweep"]]
    return out


def preflight(params: dict) -> tuple[dict, Path]:
    """All checks that must pass before any work: parameters, data directory, free disk."""
    p = check_parameters(params)
    return p, datasets.check_space(p.get("data_dir"), plans(p))


CHAPTER = "02_random_vs_sequential"


def run(
    *, n_files: int, file_size: int, runs: int, cache_states, purge_method: str, size_sweep,
    sweep_bytes: int, shard_size: int, chunk_sweep, odirect: bool, odirect_max_bytes: int,
    dd_check: bool, compare_purge_methods: bool, seed: int = 0, data_dir=None, run_dir=None,
    progress: bool = True,
):
    """Run every chapter-2 experiment and save the result (tables + fingerprint) to ``run_dir``."""
    params = {k: v for k, v in locals().items() if k != "progress"}
    from tqdm import tqdm

    from .book import results

    p, parent = preflight(params)
    res = results.start(CHAPTER, params, run_dir, parent)
    can_drop = pagecache.can_drop_caches()
    compare = compare_purge_methods and can_drop
    steps = (len(p["cache_states"]) * runs * 2 * (1 + len(p["size_sweep"]))
             + runs * len(p["chunk_sweep"]) * (2 if odirect else 1)
             + (2 * runs if dd_check else 0) + (2 * runs if compare else 0))
    main = datasets.small_files(parent, n_files=n_files, file_size=file_size, seed=seed, progress=progress)
    sweep_sets = [datasets.small_files(parent, n_files=max(1, sweep_bytes // s), file_size=s, seed=seed,
                                       progress=progress) for s in p["size_sweep"]]
    big = datasets.shard(parent, size=shard_size, seed=seed, progress=progress)
    kw = dict(runs=runs, method=purge_method)
    with tqdm(total=steps, desc="chapter 2 runs", disable=not progress) as bar:
        res.add("headline", measure_random_vs_sequential(main, cache_states=p["cache_states"], seed=seed,
                                                 progress=bar, **kw))
        res.add("size_sweep", pd.concat(
            [measure_random_vs_sequential(d, cache_states=p["cache_states"], seed=seed, progress=bar, **kw)
             for d in sweep_sets], ignore_index=True) if sweep_sets else pd.DataFrame())
        res.add("chunk_sweep", measure_chunk_sweep(big, chunks=p["chunk_sweep"], odirect=odirect,
                                           odirect_max_bytes=odirect_max_bytes, progress=bar, **kw))
        if dd_check:
            res.add("dd_fidelity", measure_dd_fidelity(big, progress=bar, **kw))
        if compare:
            res.add("purge_methods", measure_purge_methods(main, runs=runs, seed=seed, progress=bar))
    res.metadata.update(
        can_drop_caches=can_drop,
        purge_methods_compared=compare,
        purge_methods_note=None if compare else "needs root (write access to /proc/sys/vm/drop_caches)",
        datasets={"headline": main.manifest, "shard": big.manifest},
    )
    res.save(results.resolve_run_dir(run_dir))
    return res


def key_metrics(res) -> dict:
    """The chapter's headline numbers as metric -> (mean, std), for the three-column table."""
    h = res.table("headline")
    c = h[h["cache"] == "cold"]
    r, s = c[c["pattern"] == "random"]["MBps"], c[c["pattern"] == "sequential"]["MBps"]
    if r.empty or s.empty:
        return {}
    return {
        "random read, cold": (r.mean(), r.std()),
        "sequential read, cold": (s.mean(), s.std()),
        "sequential ÷ random, cold": (s.mean() / r.mean(), None),
    }
