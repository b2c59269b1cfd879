"""Chapter 9's io_uring reader: the same bytes as pread at the same offsets (buffered and O_DIRECT, at
several queue depths), a labelled skip where the binding or the kernel is missing, and the io_uring
sentence follows the data (reversal tests on constructed results)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest

from datajourney.chapters.c09_reading_smarter import analysis, page
from datajourney.chapters.c09_reading_smarter import experiment as reading
from datajourney.core import results
from datajourney.core.params import ParameterError

MiB = 1 << 20
STATUS = reading.uring_status()
needs_uring = pytest.mark.skipif(not STATUS["available"], reason=f"io_uring unavailable here: {STATUS['note']}")


@pytest.fixture()
def data_file(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(np.random.default_rng(5).bytes(2 * MiB))
    return p


@needs_uring
@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("depth", [1, 4, 32])
def test_uring_reads_the_same_bytes_as_pread(data_file, direct, depth):
    off = reading.random_offsets(os.path.getsize(data_file), 4096, 300, seed=depth)
    r = reading.uring_load(data_file, off, size=4096, depth=depth, direct=direct, keep=True)
    fd = os.open(data_file, os.O_RDONLY)
    try:
        want = [os.pread(fd, 4096, int(o)) for o in off]
    finally:
        os.close(fd)
    assert r["requests"] == len(off) and r["bytes"] == 4096 * len(off)
    assert r["data"] == want
    assert (r["latencies_us"] > 0).all() and r["seconds"] > 0


@needs_uring
def test_uring_stops_at_the_deadline_and_drains(data_file):
    off = np.tile(reading.random_offsets(os.path.getsize(data_file), 4096, 100, seed=1), 2000)
    r = reading.uring_load(data_file, off, size=4096, depth=8, direct=False, seconds=0.05)
    assert 0 < r["requests"] < len(off) and r["bytes"] == 4096 * r["requests"]


def test_uring_refuses_unaligned_odirect_before_any_work(data_file):
    if not STATUS["available"]:
        pytest.skip(f"io_uring unavailable here: {STATUS['note']}")
    with pytest.raises(ParameterError, match="size"):
        reading.uring_load(data_file, [0], size=1000, depth=1, direct=True)
    with pytest.raises(ParameterError, match="offsets"):
        reading.uring_load(data_file, [512], size=4096, depth=1, direct=True)


@pytest.fixture()
def fresh_status():
    reading.uring_status.cache_clear()
    yield reading.uring_status
    reading.uring_status.cache_clear()


def test_missing_binding_is_a_labelled_skip(monkeypatch, fresh_status):
    monkeypatch.setitem(sys.modules, "liburing", None)          # import fails as if not installed
    st = fresh_status()
    assert st["available"] is False and st["note"].startswith("skipped:") and "liburing" in st["note"]


def _probe_gives(monkeypatch, returncode: int, stdout: str):
    import subprocess

    monkeypatch.setitem(sys.modules, "liburing", type(sys)("liburing"))   # imports here; the child decides
    monkeypatch.setattr(reading, "uring_probe", lambda: subprocess.CompletedProcess([], returncode, stdout, ""))


def test_refused_ring_is_a_labelled_skip(monkeypatch, fresh_status):
    _probe_gives(monkeypatch, 3, "2026.3.30\nrefused [Errno 1] Operation not permitted\n")
    st = fresh_status()
    assert st["available"] is False and "kernel refused" in st["note"] and st["version"] == "2026.3.30"


def test_a_binding_that_crashes_on_this_cpu_is_a_labelled_skip(monkeypatch, fresh_status):
    """A wheel built for other CPUs dies of an illegal instruction in the child, never in the chapter."""
    import signal

    _probe_gives(monkeypatch, -signal.SIGILL, "2026.3.30\n")
    st = fresh_status()
    assert st["available"] is False and "cannot run on this CPU" in st["note"] and "SIGILL" in st["note"]


def test_the_real_probe_returns_a_status_without_crashing(fresh_status):
    st = fresh_status()
    assert st["available"] in (True, False) and st["note"]


def test_uring_depths_are_checked(tmp_path):
    from test_reading import GOOD

    good = {**GOOD, "data_dir": str(tmp_path)}
    with pytest.raises(ParameterError, match="uring_depths"):
        reading.preflight({**good, "uring_depths": [0]})
    assert reading.preflight({**good, "uring_depths": []}).params.uring_depths == []
    assert reading.preflight(good).params.uring_depths == list(reading.URING_DEPTHS)


# --------------------------------------------------------------------------- the sentence follows the data
def _uring_note(res):
    return page.uring_note(analysis.analyse(res))


def _note(fn, res):
    return fn(analysis.analyse(res))


def _res(tables: dict, **meta) -> results.Result:
    return results.Result("09_reading_smarter", "t", {}, {}, {k: pd.DataFrame(v) for k, v in tables.items()}, meta)


def _uring(by_depth: dict):
    rows = []
    for mode, series in by_depth.items():
        for depth, vals in series.items():
            rows += [dict(io_mode=mode, depth=depth, run=i, IOPS=v, p50_us=1.0, p99_us=2.0, dev_queue_depth=1.0,
                          dev_util=0.5, seen_over_asked=1.0) for i, v in enumerate(vals)]
    return rows


def _pool(vals):
    return [dict(mode="pread, thread pool", threads=16, run=i, IOPS=v) for i, v in enumerate(vals)]


def test_uring_note_follows_the_data():
    deep = {"buffered": {1: [1000, 1000], 64: [9000, 9100]}, "O_DIRECT": {1: [1100, 1100], 64: [12000, 12100]}}
    up = _uring_note(_res({"uring": _uring(deep), "random": _pool([3000, 3000])}))
    assert "faster than depth 1" in up and "faster than the best pread pool" in up and "beat many threads" in up
    assert "added nothing" not in up
    flat = {"buffered": {1: [1000, 1000], 16: [3000, 3000], 64: [2900, 2950]}}
    down = _uring_note(_res({"uring": _uring(flat), "random": _pool([6000, 6000])}))
    assert "at depth 16" in down and "added nothing" in down and "slower than the best pread pool" in down
    same = _uring_note(_res({"uring": _uring(flat), "random": _pool([3000, 2990])}))
    assert "level with the best pread pool" in same and "the device sets the pace" in same


def test_uring_note_says_why_it_is_missing():
    assert "not in the reference run" in _uring_note(_res({}))
    st = dict(available=False, note="skipped: the kernel refused to set up an io_uring ring (EPERM)")
    assert _uring_note(_res({}, io_uring_status=st)).startswith("**io\\_uring:** not measured: the kernel refused")
    assert page.uring_table(_res({})).empty


def test_reference_run_without_uring_reads_plainly():
    for host in results.reference_hosts():
        ref = results.load_reference("09_reading_smarter", host)
        if ref is not None and "uring" not in ref.tables:
            assert "not in the reference run" in _uring_note(ref)


# --------------------------------------------------------------------------- path (b): O_DIRECT and the sweep
def test_direct_double_buffered_delivers_the_files_bytes(tmp_path):
    p = tmp_path / "g.bin"
    p.write_bytes(np.random.default_rng(9).bytes(3 * MiB + 4096))     # not a multiple of the chunk
    tgt = reading.HostTarget()
    dst = tgt.alloc(os.path.getsize(p))
    assert reading.path_double_buffered_direct(p, tgt, dst, MiB, 3) == os.path.getsize(p)
    assert bytes(dst) == p.read_bytes()
    assert all(b.ctypes.data % reading.ALIGN == 0 for b in reading.aligned_host_buffers(tgt, 8192, 4))


def test_sweep_pairs_every_run_with_its_own_ceiling(tmp_path):
    p = tmp_path / "g.bin"
    p.write_bytes(np.random.default_rng(9).bytes(2 * MiB))
    t = reading.pipeline_sweep(p, chunks=[65536, MiB], buffers=[2, 3], modes=["buffered", "O_DIRECT"], runs=2,
                               method="fadvise", tgt=reading.HostTarget())
    assert len(t) == 2 * (2 * 2 * 2 + 1) and t[t["mode"] != "dd bs=1M"]["verified"].all()
    assert (t.groupby("run")["mode"].apply(lambda m: (m == "dd bs=1M").sum()) == 1).all()
    assert (t[t["mode"] == "O_DIRECT"]["purge_method"] == "none (O_DIRECT)").all()


@pytest.mark.parametrize("name,value", [("gpu_sweep_chunks", [5000]), ("gpu_sweep_buffers", [1]),
                                        ("gpu_sweep_modes", ["mmap"])])
def test_sweep_parameters_fail_early(name, value, tmp_path):
    from test_reading import GOOD

    with pytest.raises(ParameterError, match=name):
        reading.preflight({**GOOD, name: value, "data_dir": str(tmp_path)})


def _sweep(cells: dict, dd: list[float]):
    rows = [dict(mode="dd bs=1M", chunk=None, buffers=None, run=i, GBps=v, cpu_s_per_GB=None, error=None)
            for i, v in enumerate(dd)]
    for (mode, chunk, buffers), vals in cells.items():
        rows += [dict(mode=mode, chunk=chunk, buffers=buffers, run=i, GBps=v, error=None,
                      cpu_s_per_GB=0.2 if mode == "O_DIRECT" else 0.6) for i, v in enumerate(vals)]
    return rows


def test_pipeline_note_names_what_decides_it():
    dd = [2.0, 1.6]
    chunk_decides = {("buffered", 4 * MiB, 2): [1.5, 1.2], ("buffered", 16 * MiB, 2): [1.9, 1.55],
                     ("buffered", 16 * MiB, 4): [1.9, 1.56], ("O_DIRECT", 16 * MiB, 2): [1.88, 1.54]}
    t = _note(page.pipeline_note,
              _res({"pipeline": _sweep(chunk_decides, dd)}, pcie_ceiling={"available": True, "GBps": 50}))
    assert "**page cache, 16 MiB × 4 pinned buffers**" in t and "over its 2 runs" in t and "target" not in t
    assert "the chunk size decides it" in t and "× the O_DIRECT path" in t
    flat = {("buffered", 4 * MiB, 2): [1.85, 1.3], ("buffered", 16 * MiB, 2): [1.86, 1.31],
            ("O_DIRECT", 4 * MiB, 2): [1.85, 1.3]}
    t2 = _note(page.pipeline_note, _res({"pipeline": _sweep(flat, dd)}))
    assert "the disk, not the pipeline's settings, sets the pace" in t2
    bufs = {("O_DIRECT", 16 * MiB, 2): [1.4, 1.1], ("O_DIRECT", 16 * MiB, 8): [1.95, 1.58]}
    t3 = _note(page.pipeline_note, _res({"pipeline": _sweep(bufs, dd)}))
    assert "O\\_DIRECT, 16 MiB × 8" in t3 and "the number of buffers decides it" in t3


def _gpu_and_ceiling(pinned, dd):
    return {"gpu": [dict(path=page.PINNED, cache="cold", run=i, GBps=v, error=None) for i, v in enumerate(pinned)],
            "ceiling": [dict(run=i, GBps=v) for i, v in enumerate(dd)]}


def test_drift_note_says_whose_spread_it_is():
    disk = _note(page.drift_note, _res(_gpu_and_ceiling([1.53, 1.64, 1.68], [1.98, 1.64, 1.77])))
    assert "The disk drifts between runs more than path (b) does" in disk and "85" in disk
    pipe = _note(page.drift_note, _res(_gpu_and_ceiling([1.2, 1.7, 1.5], [1.8, 1.79, 1.81])))
    assert "Path (b) varies more than the disk" in pipe
    assert page.drift_note(analysis.analyse(_res({}))) == ""
    assert "not in this result" in _note(page.pipeline_note, _res({}))


def test_pipeline_note_does_not_pick_between_level_effects():
    tied = {("buffered", 4 * MiB, 2): [1.5, 1.2], ("O_DIRECT", 16 * MiB, 4): [1.9, 1.55]}   # all three changed together
    t = _note(page.pipeline_note, _res({"pipeline": _sweep(tied, [2.0, 1.6])}))
    assert "cannot tell them apart" in t and "decides it" not in t


def test_pipeline_note_sets_the_chunk_against_the_readahead_window():
    cells = {("buffered", 4 * MiB, 2): [1.5, 1.2], ("buffered", 16 * MiB, 2): [1.9, 1.55]}
    for ra, word in ((8192, "larger than"), (65536, "smaller than"), (16384, "the same size as")):
        t = _note(page.pipeline_note, _res({"pipeline": _sweep(cells, [2.0, 1.6])}, device={"read_ahead_kb": ra}))
        assert f"is {word} the device's readahead window" in t, t
