"""Chapter 2: random small-file reads vs one sequential shard, in plain Python.

What is measured: the wall time to read every byte of a data set either as ``N`` small
files opened in shuffled order (``open``/``read``/``close`` each) or as one contiguous
shard read front to back in fixed-size chunks; cold (page cache purged and verified
before every run) and warm (data read once, then timed). Bandwidth is in MB/s with
MB = 10^6 bytes, as in the published figures.

Around the headline: a file-size sweep, a read-size sweep with and without ``O_DIRECT``,
a check of the harness against ``dd``, a read of two shards of different length with the
same settings (why the headline and the sweep differ), the latency of single cold 4 KiB
reads (is "cold" really the device?), and what a purge without root leaves cached.

What the run found is :mod:`.analysis`'s facts (stored in the result); the chapter's page words them
(:mod:`.page`).
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from datajourney.chapters.c02_random_vs_sequential.params import Params
from datajourney.core.params import ParameterError, memory, run_options
from datajourney.core.units import MB
from datajourney.toolkit import datasets, pagecache
from datajourney.toolkit.reads import (  # noqa: F401
    CACHE_STATES,
    LATENCY_BLOCK,
    LATENCY_QUANTILES,
    NAND_READ_FLOOR_US,
    dd_read,
    measure_latency,
    read_direct,
    read_files,
    read_latencies,
    read_sequential,
    set_cache_state,
    timed,
)


# --------------------------------------------------------------------------- experiments
def measure_random_vs_sequential(
    ds: datasets.SmallFiles, *, runs: int, cache_states: Sequence[str], method: str, seed: int,
    chunk: int | None = None, progress=None,
) -> pd.DataFrame:
    """Shuffled small-file reads vs the shard read in ``chunk`` (default: file size) chunks.

    Each timed read starts from the cache state of exactly what it reads (the files, or
    the shard), purged and verified (cold) or read once (warm)."""
    chunk = chunk or ds.file_size
    files = ds.files
    rows = []
    for state in cache_states:
        for run in range(runs):
            order = np.random.default_rng(seed + run).permutation(len(files))
            shuffled = [files[i] for i in order]
            for pattern in ("random", "sequential"):
                info = set_cache_state(files if pattern == "random" else [ds.shard], state, method)
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
    odirect_max_bytes: int, seed: int = 0, progress=None,
) -> pd.DataFrame:
    """Cold sequential read of one shard for each chunk size, buffered and with O_DIRECT.

    The order of the read sizes is shuffled in every run, so that a slow phase of the
    machine (a neighbour's I/O, a cache below the guest filling) falls on different sizes
    in different runs instead of looking like a property of one size."""
    rows = []
    modes = ["buffered"] + (["O_DIRECT"] if odirect else [])
    for run in range(runs):
        order = np.random.default_rng(seed + 1000 + run).permutation(len(chunks))
        for k in order:
            chunk = chunks[k]
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


def _first_read_ms(path: Path, chunk: int) -> float:
    """Time of the first ``chunk``-byte read of a (cold) file, open included, in ms."""
    buf = bytearray(chunk)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        f.readinto(buf)
    return (time.perf_counter() - t0) * 1e3


def measure_shard_length(
    main: datasets.SmallFiles, big: datasets.Shard, *, runs: int, method: str, seed: int = 0, progress=None,
) -> pd.DataFrame:
    """The same cold sequential read (the headline's chunk) of a short and a long shard.

    Three reads, in shuffled order in every run, each after its own purge: the headline
    shard (``N`` bytes), the first ``N`` bytes of the long shard, and the whole long shard.
    If the first ``N`` bytes of the long shard read like the short shard, a difference
    between the headline and the sweep comes from the length of the read (costs paid once
    per read, amortised over more bytes); if they read like the whole long shard, it comes
    from the file. A separate cold read of one chunk measures the cost paid at the start.
    """
    chunk = main.file_size
    n_short = min(main.total_bytes, big.size)
    reads = [("headline shard", main.shard, main.total_bytes),
             ("long shard, first part", big.path, n_short),
             ("long shard, whole", big.path, big.size)]
    rows = []
    for run in range(runs):
        for k in np.random.default_rng(seed + 2000 + run).permutation(len(reads)):
            what, path, limit = reads[k]
            info = set_cache_state([path], "cold", method)
            n, s = timed(read_sequential, path, chunk, limit)
            rows.append(dict(read=what, run=run, chunk=chunk, file_bytes=os.path.getsize(path), bytes=n,
                             seconds=s, MBps=n / s / MB, **info))
            if progress:
                progress.update(1)
        for what, path, _ in reads[:2]:
            set_cache_state([path], "cold", method)
            rows.append(dict(read=what + ": first chunk", run=run, chunk=chunk,
                             file_bytes=os.path.getsize(path), bytes=chunk, seconds=None, MBps=None,
                             first_read_ms=_first_read_ms(path, chunk)))
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
@dataclass(frozen=True)
class Plan:
    """What :func:`preflight` found: the checked parameters and the directory the data sets go to."""

    params: Params
    data_dir: Path


def plans(p: Params) -> list:
    """Every data set chapter 2 needs, for the up-front free-space check."""
    out = [datasets.small_files_plan(p.n_files, p.file_size, p.seed), datasets.shard_plan(p.shard_size, p.seed)]
    out += [datasets.small_files_plan(max(1, p.sweep_bytes // s), s, p.seed) for s in p.size_sweep]
    return out


def preflight(params) -> Plan:
    """All checks that must pass before any work: every declared range (:meth:`Params.checked`), then
    what spans fields or depends on this machine (read buffers in memory, root for ``drop_caches``, the
    data directory and its free space)."""
    if not isinstance(params, Params):
        run_options(dict(params))
    p = Params.coerce(params).checked()
    if not p.cache_states:
        raise ParameterError("cache_states", p.cache_states, "a non-empty list drawn from 'cold', 'warm'")
    for s in p.size_sweep:
        if s < 1:
            raise ParameterError("size_sweep", p.size_sweep, f"a list of integers from 1 to {1 << 30:,} (or [])")
        if s > p.sweep_bytes:
            raise ParameterError("size_sweep", s, f"sizes up to sweep_bytes ({p.sweep_bytes:,})")
    for c in p.chunk_sweep:
        if c > p.shard_size:
            raise ParameterError("chunk_sweep", c, f"chunk sizes up to shard_size ({p.shard_size:,} bytes)")
        if c % 512:
            raise ParameterError("chunk_sweep", c, "multiples of 512 bytes (O_DIRECT needs aligned reads)")
    memory("chunk_sweep", max(p.chunk_sweep), 2 * max(p.chunk_sweep), what="one read buffer")
    memory("file_size", p.file_size, 2 * p.file_size, what="one read buffer")
    if p.latency_reads and p.shard_size < LATENCY_BLOCK:
        raise ParameterError("latency_reads", p.latency_reads,
                             f"0 when shard_size is below {LATENCY_BLOCK:,} bytes (nothing to read)")
    if p.purge_method == "drop_caches" and not pagecache.can_drop_caches():
        raise ParameterError("purge_method", "drop_caches", "'auto' or 'fadvise' (drop_caches needs root)")
    if p.chunk_runs is None:
        p = p.replace(chunk_runs=p.runs)
    return Plan(p, datasets.check_space(p.data_dir, plans(p)))


def measure(plan: Plan, context) -> None:
    """Run every chapter-2 experiment into the started result (its tables and metadata)."""
    from tqdm import tqdm

    from datajourney.core.timing import Laps  # loads torch: only when the chapter measures

    p, parent = plan.params, plan.data_dir
    res, progress = context.result, context.progress
    lap = Laps()  # how long each part of the run took (metadata)
    can_drop = pagecache.can_drop_caches()
    compare = p.compare_purge_methods and can_drop
    runs, crun, seed = p.runs, p.chunk_runs, p.seed
    steps = (len(p.cache_states) * runs * 2 * (1 + len(p.size_sweep))
             + crun * len(p.chunk_sweep) * (2 if p.odirect else 1) + 3 * runs
             + (runs if p.latency_reads else 0)
             + (2 * runs if p.dd_check else 0) + (2 * runs if compare else 0))
    main = datasets.small_files(parent, n_files=p.n_files, file_size=p.file_size, seed=seed, progress=progress)
    sweep_sets = [datasets.small_files(parent, n_files=max(1, p.sweep_bytes // s), file_size=s, seed=seed,
                                       progress=progress) for s in p.size_sweep]
    big = datasets.shard(parent, size=p.shard_size, seed=seed, progress=progress)
    lap("data sets")
    kw = dict(runs=runs, method=p.purge_method)
    with tqdm(total=steps, desc="chapter 2 runs", disable=not progress, mininterval=10) as bar:
        res.add("headline", measure_random_vs_sequential(main, cache_states=p.cache_states, seed=seed,
                                                         progress=bar, **kw))
        lap("headline")
        if p.latency_reads:   # before anything reads the long shard as a whole
            lat, cdf = measure_latency(big.path, reads=p.latency_reads, seed=seed, progress=bar, **kw)
            res.add("latency", lat)
            res.add("latency_cdf", cdf)
            lap("latency")
        res.add("size_sweep", pd.concat(
            [measure_random_vs_sequential(d, cache_states=p.cache_states, seed=seed, progress=bar, **kw)
             for d in sweep_sets], ignore_index=True) if sweep_sets else pd.DataFrame())
        lap("size sweep")
        res.add("chunk_sweep", measure_chunk_sweep(big, chunks=p.chunk_sweep, odirect=p.odirect, runs=crun,
                                                   method=p.purge_method, odirect_max_bytes=p.odirect_max_bytes,
                                                   seed=seed, progress=bar))
        lap("chunk sweep")
        res.add("shard_length", measure_shard_length(main, big, seed=seed, progress=bar, **kw))
        lap("shard length")
        if p.dd_check:
            res.add("dd_fidelity", measure_dd_fidelity(big, progress=bar, **kw))
            lap("dd check")
        if compare:
            res.add("purge_methods", measure_purge_methods(main, runs=runs, seed=seed, progress=bar))
            lap("purge methods")
    res.metadata.update(
        can_drop_caches=can_drop,
        purge_methods_compared=compare,
        purge_methods_needs_root=not compare and not can_drop,
        datasets={"headline": main.manifest, "shard": big.manifest},
        nand_read_floor_us=NAND_READ_FLOOR_US,
        seconds=lap.seconds,
    )
