"""Chapter 9: the readers deliver exactly the file's bytes (every path to 'device' memory, checked on a
host target), offsets and thread pools do what they say, the device counters' arithmetic, readahead is
restored even when the work fails, GDS is never claimed in compatibility mode, bad parameters fail
early, and the findings follow the data (reversal tests on constructed results, and a real small run)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import has_nan, paren_depth

from datajourney.book import harness
from datajourney.chapters.c09_reading_smarter import analysis, page
from datajourney.chapters.c09_reading_smarter import experiment as reading
from datajourney.core import results
from datajourney.core.params import ParameterError
from datajourney.core.units import size_label

MiB = 1 << 20


@pytest.fixture()
def data_file(tmp_path) -> Path:
    p = tmp_path / "f.bin"
    p.write_bytes(np.random.default_rng(3).bytes(3 * MiB + 12288))   # not a multiple of any chunk
    return p


# --------------------------------------------------------------------------- readers
def test_random_offsets_are_aligned_and_inside(data_file):
    size = os.path.getsize(data_file)
    for req in (4096, 65536, MiB):
        off = reading.random_offsets(size, req, 500, seed=1)
        assert (off % req == 0).all() and (off + req <= size).all() and off.min() >= 0


def test_thread_pool_reads_every_offset_once(data_file):
    off = reading.random_offsets(os.path.getsize(data_file), 4096, 300, seed=2)
    r = reading.pread_load(data_file, size=4096, threads=4, direct=False, seconds=60, max_bytes=1 << 30, offsets=off)
    assert r["requests"] == 300 and r["bytes"] == 300 * 4096 and len(r["latencies_us"]) == 300
    r = reading.pread_load(data_file, size=65536, threads=3, direct=False, seconds=60, max_bytes=30 * 65536, seed=1)
    assert r["requests"] == 30 and r["bytes"] == 30 * 65536       # the byte budget shared out over threads


def test_odirect_refuses_unaligned_requests(data_file):
    with pytest.raises(ParameterError, match="request_sizes"):
        reading.pread_load(data_file, size=1000, threads=1, direct=True, seconds=1, max_bytes=MiB)


def test_read_fully_loops_over_short_reads(data_file):
    buf = bytearray(os.path.getsize(data_file))
    assert reading.read_fully(data_file, buf, max_call=100_000) == len(buf)   # many calls, like a 2 GiB read
    assert bytes(buf) == data_file.read_bytes()
    with pytest.raises(OSError, match="read"):
        reading.read_fully(data_file, bytearray(len(buf) - 10))


def test_mmap_touch_reads_the_same_offsets(data_file):
    off = reading.random_offsets(os.path.getsize(data_file), 4096, 50, seed=4)
    r = reading.mmap_touch(data_file, off, advice="RANDOM")
    assert r["requests"] == 50 and r["bytes"] == 50 * 4096


@pytest.mark.parametrize("chunk", [4096, 1 << 18, 5 * MiB])
def test_every_path_delivers_the_files_bytes(data_file, chunk):
    expected = np.frombuffer(data_file.read_bytes(), dtype=np.uint8)
    tgt = reading.HostTarget()
    for fn in (lambda d: reading.path_pageable(data_file, tgt, d, chunk),
               lambda d: reading.path_double_buffered(data_file, tgt, d, chunk),
               lambda d: reading.path_double_buffered(data_file, tgt, d, chunk, buffers=3),
               lambda d: reading.path_mmap_pinned(data_file, tgt, d, chunk)):
        dst = tgt.alloc(expected.size)
        assert fn(dst) == expected.size
        assert np.array_equal(dst, expected)


def test_double_buffering_waits_before_reusing_a_buffer(data_file):
    """A buffer is refilled only after the copy out of it completed (its event was waited on)."""
    class Recording(reading.HostTarget):
        def __init__(self):
            self.pending, self.log = {}, []

        def copy_async(self, dst, offset, src, n):
            super().copy_async(dst, offset, src, n)
            ev = object()
            self.pending[id(ev)] = id(src)
            self.log.append(("copy", id(src)))
            return ev

        def wait(self, event):
            if event is not None:
                self.log.append(("wait", self.pending.pop(id(event))))

    tgt = Recording()
    dst = tgt.alloc(os.path.getsize(data_file))
    reading.path_double_buffered(data_file, tgt, dst, MiB)
    copies = [b for op, b in tgt.log if op == "copy"]
    assert len(set(copies)) == 2 and len(copies) == 4
    for i, (op, buf) in enumerate(tgt.log):   # every copy after the first two is preceded by a wait on that buffer
        if op == "copy" and copies.index(buf) != i and i >= 2:
            assert ("wait", buf) in tgt.log[:i]


def test_to_gpu_on_a_host_target_checks_every_path(data_file):
    df, gds = reading.to_gpu(data_file, chunk=MiB, runs=2, kvikio_threads=[2], kvikio_task=MiB, method="fadvise",
                             tgt=reading.HostTarget())
    assert df["verified"].all() and (df["bytes"] == os.path.getsize(data_file)).all()
    assert set(df[df["cache"] == "cold"]["path"]) == {"pageable + copy", "pinned, double-buffered", "mmap + pinned"}
    assert (df[df["cache"] == "cold"]["resident_at_start"] <= 0.05).all()
    assert (df[df["cache"] == "warm"]["resident_at_start"] >= 0.95).all()
    assert df.groupby("path").size().eq(2).all() and (df["cpu_s_per_GB"] >= 0).all()
    ok, why = reading.direct_allowed(data_file, os.path.getsize(data_file))
    assert gds["path_b"] == dict(mode="O_DIRECT", chunk=MiB, buffers=2, by=None, best=None, settings=0,
                                 direct=ok, note=why)  # O_DIRECT where the file system takes it


def test_to_gpu_reads_path_b_at_the_setting_it_is_given(data_file):
    """Path (b) reads at the chosen setting (here buffered, 2 MiB x 3), not at the staging chunk of (a) and (c),
    and records it with the reason it was chosen."""
    chosen = reading.choose_path_b(pd.DataFrame(), chunk=2 * MiB, buffers=3, mode="buffered", fallback_chunk=MiB)
    seen = []
    real = reading.path_double_buffered

    def spy(path, tgt, dst, chunk, buffers=2, *, bufs=None):
        seen.append((chunk, len(bufs)))
        return real(path, tgt, dst, chunk, bufs=bufs)

    reading.path_double_buffered = spy
    try:
        df, gds = reading.to_gpu(data_file, chunk=MiB, runs=1, kvikio_threads=[], kvikio_task=MiB,
                                 method="fadvise", tgt=reading.HostTarget(), path_b=chosen)
    finally:
        reading.path_double_buffered = real
    assert df["verified"].all()
    assert (2 * MiB, 3) in seen                       # the cold path (b)
    pb = gds["path_b"]
    assert (pb["mode"], pb["chunk"], pb["buffers"], pb["direct"]) == ("buffered", 2 * MiB, 3, False)
    assert pb["by"] == dict(mode="parameter", chunk="parameter", buffers="parameter")


def test_path_b_falls_back_to_the_page_cache_with_the_reason(tmp_path, monkeypatch):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(os.urandom(reading.ALIGN * 3 + 1))
    ok, why = reading.direct_allowed(odd, odd.stat().st_size)
    assert not ok and "4,096-aligned" in why

    def refuse(path, direct):
        if direct:
            raise OSError(22, "Invalid argument")
        return os.open(path, os.O_RDONLY)

    monkeypatch.setattr(reading, "open_file", refuse)
    ok, why = reading.direct_allowed(odd.with_name("x"), reading.ALIGN)
    assert not ok and "refused O_DIRECT (Invalid argument)" in why and len(why.split()) < 8


@pytest.mark.parametrize("pb, words", [
    (None, "page cache, 16 MiB × 2"),   # a run before O_DIRECT: path (b) read through the page cache
    (dict(direct=True, chunk=64 * MiB, buffers=2, note=None), "O_DIRECT, 64 MiB × 2"),
    (dict(direct=False, chunk=64 * MiB, buffers=2, note="this file system refused O_DIRECT (x)"),
     "page cache, 64 MiB × 2")])
def test_path_b_setting_is_said_from_the_run(pb, words):
    res = results.Result.load(results.REFERENCE_DIR / "h200" / "09_reading_smarter.json")
    if pb is None:
        res.metadata["gds"].pop("path_b", None)
    else:
        res.metadata["gds"]["path_b"] = pb
    assert words in analysis.analyse(res)["path.b"].label


# --------------------------------------------------------------------------- device counters
def test_diskstats_delta_arithmetic():
    a = (0.0, [10, 0, 100, 50, 0, 0, 0, 0, 0, 20, 0], 1000)
    b = (1.0, [110, 5, 100 + 800, 50 + 2000, 0, 0, 0, 0, 0, 20 + 500, 0], 1000 + 800 * 512)
    d = reading.DiskStats.delta(a, b)
    assert d["dev_reads"] == 100 and d["dev_bytes"] == 800 * 512 and d["dev_request_bytes"] == 8 * 512 / 1
    assert d["dev_queue_depth"] == pytest.approx(2.0) and d["dev_util"] == pytest.approx(0.5)
    assert d["own_share"] == pytest.approx(1.0)
    assert reading.seen_over_asked(d, 800 * 512 // 2) == pytest.approx(2.0)
    none = reading.DiskStats.delta((0.0, None, None), (1.0, None, None))
    assert none["dev_bytes"] is None and reading.seen_over_asked(none, 10) is None


def test_diskstats_line_parsing():
    text = "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n 254       0 vda 5 6 7 8 9 10 11 12 13 14 15 16 17\n"
    assert reading._diskstats_line("vda", text) == [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    assert reading._diskstats_line("sdz", text) is None


# --------------------------------------------------------------------------- readahead restore
def _readahead_file(tmp_path, monkeypatch) -> Path:
    """A device's read_ahead_kb under a directory standing in for /sys (only such files are changed)."""
    from datajourney.toolkit import sysfs

    monkeypatch.setenv(sysfs.SYSFS_ROOT_ENV, str(tmp_path / "sys"))
    f = tmp_path / "sys" / "block" / "x" / "queue" / "read_ahead_kb"
    f.parent.mkdir(parents=True)
    return f


def test_readahead_is_restored_after_a_failure(tmp_path, monkeypatch):
    f = _readahead_file(tmp_path, monkeypatch)
    f.write_text("8192\n")
    log = []
    with pytest.raises(RuntimeError, match="boom"):
        with reading.readahead_kb("x", 128, log, _file=f, _state=tmp_path / "state") as now:
            assert now == 128 and f.read_text().strip() == "128"
            assert list((tmp_path / "state").glob("*.journal.json"))  # the original is on disk meanwhile
            raise RuntimeError("boom")
    assert f.read_text().strip() == "8192" and not list((tmp_path / "state").glob("*.journal.json"))
    assert log[0]["set"] == 128 and log[-1] == {"file": str(f), "restored": 8192, "read_back": 8192}


def test_readahead_left_by_a_killed_run_is_restored_by_the_next(tmp_path, monkeypatch):
    """A run killed (SIGKILL) while read_ahead_kb was changed leaves its journal: the next change of the same
    setting puts the original back first and takes that, not the leftover, for the original."""
    import signal
    import subprocess
    import sys
    import time

    f, state = _readahead_file(tmp_path, monkeypatch), tmp_path / "state"
    f.write_text("256\n")
    code = ("import sys, time; from pathlib import Path\n"
            "from datajourney.chapters.c09_reading_smarter import experiment as r\n"
            "with r.readahead_kb('x', 4096, _file=Path(sys.argv[1]), _state=Path(sys.argv[2])):\n"
            "    print('changed', flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(f), str(state)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "changed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    time.sleep(0.1)
    assert f.read_text().strip() == "4096"                   # what the killed run left
    log = []
    with reading.readahead_kb("x", 16, log, _file=f, _state=state):
        assert f.read_text().strip() == "16"
    assert log[0]["original"] == 256 and f.read_text().strip() == "256"


def test_unwritable_readahead_is_a_clear_error(tmp_path, monkeypatch):
    target = _readahead_file(tmp_path, monkeypatch)
    target.symlink_to("/proc/version")      # readable, never writable, even for root
    with pytest.raises(reading.SysfsError, match="cannot write"):
        with reading.readahead_kb("x", 128, _file=target, _state=tmp_path):
            pass
    assert not list(tmp_path.glob("*.journal.json"))  # nothing changed, nothing to restore
    ok, why = reading.can_set_readahead(None)
    assert not ok and "block device" in why


# --------------------------------------------------------------------------- GDS labels
def test_gds_is_never_claimed_in_compatibility_mode():
    assert reading.classify_gds(True, True) == "KvikIO POSIX (compatibility) mode"
    assert reading.classify_gds(False, False) == "cuFile compatibility mode"
    assert reading.classify_gds(False, True) == "GDS"
    assert reading.classify_gds(None, None).startswith("unknown")


@pytest.mark.parametrize("host", ["h200", "h100"])
def test_the_gds_finding_words_the_mode_without_nested_parentheses(host):
    """The reference hosts ran kvikio in its POSIX compatibility mode, whose stored name carries parentheses: the
    finding shows that name as code, words it in the fastest setting's label, and says the read went without GDS
    (no parentheses inside parentheses, no two in a row)."""
    from datajourney.core import results

    facts = analysis.analyse(results.load_reference("09_reading_smarter", host))
    (gds,) = [f for f in page.findings(facts) if f.key == "gds"]
    prose = re.sub(r"`[^`]*`", "CODE", gds.text)
    assert "without GDS at" in prose and "kvikio (KvikIO's POSIX compatibility mode, " in prose, gds.text
    assert paren_depth(prose) == 1 and ") (" not in prose, gds.text


# --------------------------------------------------------------------------- parameters
GOOD = dict(file_size=4 * MiB, request_sizes=[4096, MiB], threads=[1, 2], modes=["buffered", "O_DIRECT"], runs=1,
            cell_seconds=0.05, cell_max_bytes=MiB, random_reads=50, pool_threads=[2], random_seconds=0.1,
            readahead_sysfs="off", readahead_kb=[128], fadvise=["none", "RANDOM"], seq_chunk=65536, seq_bytes=MiB,
            gpu="off", gpu_chunk=MiB, kvikio_threads=[1], kvikio_task=MiB, latency_reads=20, purge_method="fadvise",
            seed=0)


@pytest.mark.parametrize("name,value,match", [
    ("threads", [0, 2], "threads"),
    ("request_sizes", [4096, 5000], "request_sizes"),          # not aligned for O_DIRECT
    ("request_sizes", [8 * MiB], "request_sizes"),             # larger than the file
    ("modes", ["mmap"], "modes"),
    ("file_size", 1000, "file_size"),
    ("readahead_sysfs", "maybe", "readahead_sysfs"),
    ("gpu_chunk", 1000, "gpu_chunk"),
    ("fadvise", ["SOMETIMES"], "fadvise"),
    ("cell_seconds", 0, "cell_seconds"),
    ("pool_threads", [1], "pool_threads"),
    ("path_b_chunk", 1000, "path_b_chunk"),                   # not aligned for O_DIRECT
    ("path_b_chunk", "big", "path_b_chunk"),
    ("path_b_buffers", 1, "path_b_buffers"),
    ("path_b_mode", "mmap", "path_b_mode"),
])
def test_bad_parameters_fail_early(name, value, match, tmp_path):
    with pytest.raises(ParameterError, match=match):
        reading.preflight({**GOOD, name: value, "data_dir": str(tmp_path)})


def test_unaligned_sizes_are_fine_without_odirect(tmp_path):
    plan = reading.preflight({**GOOD, "modes": ["buffered"], "request_sizes": [5000], "data_dir": str(tmp_path)})
    assert plan.params.request_sizes == [5000]


def test_too_large_a_file_fails_on_free_space(tmp_path):
    with pytest.raises(ParameterError, match="data_dir"):
        reading.preflight({**GOOD, "file_size": 1 << 39, "request_sizes": [4096], "data_dir": str(tmp_path)})


# --------------------------------------------------------------------------- findings follow the data
def _res(tables: dict, **meta) -> results.Result:
    fp = {"storage": {}, "gpu": {"name": "GPU"}}
    base = dict(gds={"kvikio": True, "path": "KvikIO POSIX (compatibility) mode", "compat_preferred": True,
                     "gds_available": False, "nvidia_fs": False},
                pcie_ceiling={"available": True, "GBps": 50.0, "size": 1 << 30},
                device={"fs_type": "ext4", "mount_options": "rw,relatime", "disk": "vda", "scheduler": "none",
                        "read_ahead_kb": 128, "max_sectors_kb": 1024, "max_segments": 128},
                nand_read_floor_us=40.0, physical_nvme_qd1_us=[60.0, 100.0],
                readahead_sysfs={"used": True, "original_kb": 128}, diskstats_device="vda1")
    base.update(meta)
    return results.Result("09_reading_smarter", "t", {}, fp, {k: pd.DataFrame(v) for k, v in tables.items()}, base)


def _gpu(pinned, pageable, kv, cpu_pinned=1.0, cpu_kv=2.0):
    rows = []
    for name, vals, cpu in (("pinned, double-buffered", pinned, cpu_pinned), ("pageable + copy", pageable, 1.5),
                            ("kvikio, KvikIO POSIX (compatibility) mode, 8 threads", kv, cpu_kv)):
        rows += [dict(path=name, cache="cold", run=i, GBps=v, cpu_s_per_GB=cpu, bytes=1 << 31, verified=True)
                 for i, v in enumerate(vals)]
    return rows


CEIL = [dict(run=i, GBps=v) for i, v in enumerate([2.0, 2.0, 2.0])]


def _note(fn, res):
    """A note of the page, worded from the facts of ``res``."""
    return fn(analysis.analyse(res))


def _finding(res, key):
    return page.finding(analysis.analyse(res), key)[0]


def test_to_gpu_finding_follows_the_share():
    good_res = _res({"gpu": _gpu([1.9, 1.95, 1.92], [1.0, 1.1, 1.0], [1.5] * 3), "ceiling": CEIL})
    good = _finding(good_res, "to_gpu")
    assert "pinned, double-buffered" in good.text and "(b)" not in good.text   # no letter outside the table
    assert "1.04× slower than this chapter's dd reading the file cold" in good.text
    assert "target" not in good.text
    assert "Path (a), pageable reads each copied before the next, was 1.86× slower than path (b)" in _note(
        page.gpu_note,
        good_res)
    bad_res = _res({"gpu": _gpu([1.0, 1.1, 1.0], [1.9, 1.95, 1.92], [1.5] * 3), "ceiling": CEIL})
    bad = _finding(bad_res, "to_gpu")
    assert "pageable + copy" in bad.text and "(a)" not in bad.text
    assert "target" not in bad.text and "1.04× slower than" in bad.text
    assert "faster than path (b)" in _note(page.gpu_note, bad_res)
    assert _note(page.gpu_note, bad_res).startswith("Cold paths, fastest first: (a) pageable + copy 1.92 GB/s")
    # the slower link is the bus when the device is faster than it
    fast = _res({"gpu": _gpu([9.5] * 3, [5] * 3, [6] * 3), "ceiling": [dict(run=0, GBps=100.0)]},
                pcie_ceiling={"available": True, "GBps": 10.0, "size": 1})
    assert "1.05× slower than the pinned PCIe copy alone" in _finding(fast, "to_gpu").text


def _sweep(rows):
    out = [dict(mode="dd bs=1M", chunk=None, buffers=None, run=r, GBps=2.0, cpu_s_per_GB=0.1) for r in (0, 1)]
    return out + [dict(mode=m, chunk=c, buffers=2, run=r, GBps=v, cpu_s_per_GB=0.1)
                  for (m, c, vals) in rows for r, v in enumerate(vals)]


SWEEP = [("O_DIRECT", 4 << 20, [2.3, 2.2]), ("buffered", 64 << 20, [1.5, 1.4]), ("O_DIRECT", 64 << 20, [1.8, 1.7])]


def _reversed(rows):
    """The same settings with their rates handed out in reverse order of speed."""
    rates = sorted((r[2] for r in rows), key=lambda v: sum(v))
    by_speed = sorted(rows, key=lambda r: -sum(r[2]))
    return [(m, c, v) for (m, c, _), v in zip(by_speed, rates)]


def _chosen(rows, **asked):
    summary = reading.sweep_summary(pd.DataFrame(_sweep(rows)), 50.0)
    return reading.choose_path_b(summary, **{**dict(chunk="auto", buffers="auto", mode="auto"), **asked},
                                 fallback_chunk=8 << 20)


def test_path_b_takes_the_sweeps_best_setting_and_follows_a_reversed_sweep():
    best = _chosen(SWEEP)
    assert (best["mode"], best["chunk"], best["buffers"]) == ("O_DIRECT", 4 << 20, 2)
    assert best["by"] == dict(mode="sweep", chunk="sweep", buffers="sweep") and best["settings"] == 3
    assert best["best"]["share_min"] == pytest.approx(1.1)                 # 2.2 / the run's dd of 2.0
    rev = _chosen(_reversed(SWEEP))
    assert (rev["mode"], rev["chunk"], rev["buffers"]) == ("buffered", 64 << 20, 2)


def test_a_path_b_value_given_wins_over_the_sweep():
    assert _chosen(SWEEP, mode="buffered")["chunk"] == 64 << 20            # the best buffered setting
    fixed = _chosen(SWEEP, chunk=64 << 20)
    assert (fixed["mode"], fixed["chunk"]) == ("O_DIRECT", 64 << 20)
    assert fixed["by"] == dict(chunk="parameter", mode="sweep", buffers="sweep")
    odd = _chosen(SWEEP, chunk=32 << 20)                                    # not swept: the overall best fills the rest
    assert (odd["mode"], odd["chunk"], odd["buffers"]) == ("O_DIRECT", 32 << 20, 2)
    none = reading.choose_path_b(pd.DataFrame(), chunk="auto", buffers=4, mode="auto", fallback_chunk=8 << 20)
    assert (none["mode"], none["chunk"], none["buffers"]) == ("O_DIRECT", 8 << 20, 4)
    assert none["by"] == dict(buffers="parameter", mode="fallback", chunk="fallback")


def _with_choice(rows, gpu):
    """A result whose path (b) was measured at the sweep's choice, as the run records it."""
    c = _chosen(rows)
    pb = dict(c, direct=c["mode"] == "O_DIRECT", note=None)
    return _res({"gpu": gpu, "ceiling": CEIL, "pipeline": _sweep(rows)},
                gds={"kvikio": False, "path": "kvikio not installed", "path_b": pb})


def test_the_text_follows_the_chosen_setting():
    """The finding, the sweep's note and the opening name the setting the sweep chose, and why; a reversed
    sweep names the other setting; no text claims the sweep explains a default or calls dd a ceiling when a
    read beat it."""
    gpu = _gpu([2.2, 2.3, 2.25], [1.0] * 3, [1.5] * 3)
    res = _with_choice(SWEEP, gpu)
    f = _finding(res, "to_gpu")
    assert "pinned, double-buffered (O\\_DIRECT, 4 MiB × 2)" in f.text
    note = _note(page.pipeline_note, res)
    assert "Best of the sweep's 3 settings: **O\\_DIRECT, 4 MiB × 2 pinned buffers**" in note
    assert "Path (b) above read at this best setting" in note and "no ceiling" in note
    assert "default" not in note + f.text and "target" not in note + f.text
    assert "no measured ceiling" in _note(page.ceilings_text, res)
    op = page.opening(analysis.analyse(res))
    # a technique in words, not a setting to paste: no code span
    assert any("use pinned, double-buffered (O\\_DIRECT, 4 MiB × 2): 2.2× faster than pageable + "
               "copy" in a.text
               for a in op.actions)
    rev = _with_choice(_reversed(SWEEP), gpu)
    assert "pinned, double-buffered (page cache, 64 MiB × 2)" in _finding(rev, "to_gpu").text
    assert "**page cache, 64 MiB × 2 pinned buffers**" in _note(page.pipeline_note, rev)
    assert any("use pinned, double-buffered (page cache, 64 MiB × 2)" in a.text
               for a in page.opening(analysis.analyse(rev)).actions)


def test_runs_are_counted_in_words():
    once = _with_choice([(m, c, v[:1]) for m, c, v in SWEEP], _gpu([2.2] * 3, [1.0] * 3, [1.5] * 3))
    assert "(in its one run)" in _note(page.pipeline_note, once) and "1 runs" not in _note(page.pipeline_note, once)
    twice = _with_choice(SWEEP, _gpu([2.2] * 3, [1.0] * 3, [1.5] * 3))
    assert "110%–115% over its 2 runs" in _note(page.pipeline_note, twice)


def test_dd_is_a_ceiling_only_where_nothing_beat_it():
    slow = [(m, c, [v[0] / 2, v[1] / 2]) for m, c, v in SWEEP]
    res = _with_choice(slow, _gpu([1.0, 1.1, 1.0], [0.9] * 3, [0.8] * 3))
    assert analysis.analyse(res).number("dd_fastest") == 2.0
    assert "is the disk's ceiling here" in _note(page.ceilings_text, res)
    assert "no ceiling" not in _note(page.pipeline_note, res)
    fast = _with_choice(SWEEP, _gpu([1.0, 1.1, 1.0], [0.9] * 3, [0.8] * 3))
    assert analysis.analyse(fast)["disk_ceiling"].value == "no"
    assert "pinned, double-buffered (O\\_DIRECT, 4 MiB × 2) read 2.30 GB/s" in _note(page.ceilings_text,
        fast)


def test_no_gpu_is_said_plainly():
    f = _finding(_res({}, gpu_note="no CUDA device"), "to_gpu")
    assert f.value is None and "no CUDA device" in f.text


def test_a_run_whose_gpu_reads_all_failed_says_so_and_shows_the_reference():
    """Every read into GPU memory failed: the analysis records no GPU path and why (not "no CUDA device"), the
    errors are listed from the facts, and the text points to a reference run only where that run read into GPU
    memory."""
    failed = [dict(path="pinned, double-buffered", cache="cold", run=0, GBps=None, error="CUDA error: out of memory")]
    f = analysis.analyse(_res({"gpu": failed}))
    assert not page.has_gpu(f) and f["gpu_ran"].value == "no"
    assert page.gpu_errors(f) == ["pinned, double-buffered: `CUDA error: out of memory`"]
    ref = _res({"gpu": _gpu([2.0, 2.1], [1.0, 1.1], [1.5, 1.6]), "ceiling": CEIL})
    assert page.has_gpu(analysis.analyse(ref)) and page.gpu_errors(analysis.analyse(ref)) == []
    shown = page.no_gpu_text(f, ref)
    assert "(every read into GPU memory failed)" in shown and "**reference run**" in shown
    alone = page.no_gpu_text(f, _res({"gpu": failed}))
    assert "no reference run with a GPU is committed" in alone
    cpu = analysis.analyse(_res({}, gpu_note="no CUDA device"))
    assert "(no CUDA device)" in page.no_gpu_text(cpu, None) and page.gpu_errors(cpu) == []


def test_readahead_note_follows_the_read_backs():
    """How often read_ahead_kb was set and restored, and whether every read-back matched, are the analysis's
    facts: one differing read-back turns the note; an unchanged device is said to have been left alone."""
    log = [dict(file="f", original=128, set=v, read_back=v) for v in (16, 1024)]
    log += [dict(file="f", restored=128, read_back=128) for _ in (16, 1024)]
    f = analysis.analyse(_res({}, readahead_changes=log))
    assert f.number("readahead_restored") == 2 and f["readahead_read_back"].value == "equal"
    assert "set 2 times and restored to its original 128 KiB after each, read back equal every time" in \
        page.readahead_note(f)
    log[-1] = dict(file="f", restored=128, read_back=256)
    f = analysis.analyse(_res({}, readahead_changes=log))
    assert f["readahead_read_back"].value == "differed" and "a read-back differed" in page.readahead_note(f)
    left = analysis.analyse(_res({}, readahead_sysfs={"used": False, "note": "not root"}))
    assert "readahead_restored" not in left and page.readahead_note(left).startswith(
        "The device's `read_ahead_kb` was left alone: not root.")


def test_storage_notes_follow_the_recorded_settings():
    """The notes on the data directory's storage follow what the run recorded: access-time policy, a disk that
    names no model, a virtio disk's rotational flag; with no record, they say so."""
    vd = page.storage_notes(analysis.analyse(_res({}, device={"mount_options": "rw,relatime", "disk": "vda",
                                                             "rotational": True, "scheduler": "none"})))
    assert vd.startswith("`relatime`") and "reports no model" in vd and "driver's default" in vd
    nvme = page.storage_notes(analysis.analyse(_res({}, device={"mount_options": "rw,noatime", "disk": "nvme0n1",
                                                               "model": "X", "rotational": False})))
    assert nvme.startswith("`noatime`") and "reports no model" not in nvme and "driver's default" not in nvme
    plain = page.storage_notes(analysis.analyse(_res({}, device={"mount_options": "rw", "disk": "sda",
                                                                "model": "X", "max_sectors_kb": 512})))
    assert plain.startswith("neither `noatime` nor `relatime`") and "max_sectors_kb 512" in plain
    assert page.storage_notes(analysis.analyse(_res({}, device={}))) == "No storage facts were recorded."


def test_the_sweeps_basis_follows_the_pcie_copy():
    """The sweep's shares are of the same run's dd read unless the PCIe copy was the slower link: the table,
    the chart's axis and the note all take that one fact from the analysis."""
    res = _with_choice(SWEEP, _gpu([1.0, 1.1, 1.0], [0.9] * 3, [0.8] * 3))
    assert analysis.sweep_basis(res) == "dd" and analysis.analyse(res)["sweep_basis"].value == "dd"
    assert "speed ÷ same run's dd (×, mean)" in page.pipeline_table(res).columns
    assert "of the same run's dd read" in _note(page.pipeline_note, res)
    res.metadata["pcie_ceiling"] = {"available": True, "GBps": 1.0, "size": 1 << 30}   # below the dd read
    assert analysis.analyse(res)["sweep_basis"].value == "dd or PCIe"
    assert "speed ÷ same run's dd or PCIe (×, mean)" in page.pipeline_table(res).columns
    assert "slower link (dd or PCIe)" in page.pipeline_chart(res, "t").layout.xaxis.title.text
    assert "of the same run's slower link (dd or PCIe)" in _note(page.pipeline_note, res)


def test_gds_finding_never_labels_compat_as_gds():
    r = _res({"gpu": _gpu([1.9] * 3, [1.0] * 3, [2.5] * 3), "ceiling": CEIL})
    f = _finding(r, "gds")
    assert "compatibility" in f.text and "without GDS" in f.text and f.published is None and "faster than" in f.text
    assert "more than path (b)" in _note(page.gds_note, r)        # CPU time per GB: 2.0 vs 1.0
    assert "storage → GPU memory with GDS" not in page.key_metrics(r)
    g = _res({"gpu": _gpu([1.9] * 3, [1.0] * 3, [1.5] * 3, cpu_kv=0.2), "ceiling": CEIL},
             gds={"kvikio": True, "path": "GDS", "compat_preferred": False, "gds_available": True, "nvidia_fs": True})
    f = _finding(g, "gds")
    assert "through GDS" in f.text and "slower than" in f.text and "less than path (b)" in _note(page.gds_note, g)
    assert "storage → GPU memory with GDS" in page.key_metrics(g)


def _random(one, pool):
    rows = [dict(mode="pread, 1 thread", threads=1, run=i, IOPS=v, dev_util=0.5) for i, v in enumerate(one)]
    for t, vals, util in pool:
        rows += [dict(mode="pread, thread pool", threads=t, run=i, IOPS=v, dev_util=util) for i, v in enumerate(vals)]
    rows += [dict(mode="mmap + touch", threads=1, run=i, IOPS=v / 2, dev_util=0.5) for i, v in enumerate(one)]
    df = pd.DataFrame(rows)
    for c in ("p50_us", "p99_us", "dev_request_bytes", "dev_queue_depth", "seen_over_asked"):
        df[c] = 1.0
    return df


def test_parallel_finding_follows_the_ratio():
    up = _finding(_res({"random": _random([1000, 1000], [(4, [3000, 3000], 0.5), (16, [6000, 6100], 0.6)])}),
                  "parallel_random")
    assert "6.0× faster than one pread thread" in up.text and "still grew" in up.text
    assert up.value > 4 and "target" not in up.text
    flat_res = _res({"random": _random([1000, 1000], [(4, [2000, 2000], 0.9), (16, [2050, 2000], 0.99)])})
    flat = _finding(flat_res, "parallel_random")
    assert "saturates" in flat.text and "target" not in flat.text
    assert "slower than one pread thread" in _note(page.random_note, flat_res)


def _ra(seq_lo, seq_hi, rnd_none, rnd_random):
    rows = []
    for v, mb in ((128, seq_lo), (4096, seq_hi)):
        rows += [dict(setting="read_ahead_kb", read_ahead_kb=v, fadvise="none", pattern="sequential", run=i, MBps=m,
                      request_bytes=131072, seen_over_asked=1.0, dev_request_bytes=1.0) for i, m in enumerate(mb)]
    for hint, soa in (("none", rnd_none), ("RANDOM", rnd_random)):
        rows += [dict(setting="fadvise", read_ahead_kb=None, fadvise=hint, pattern="random", run=i, MBps=1.0,
                      request_bytes=4096, seen_over_asked=s, dev_request_bytes=1.0) for i, s in enumerate(soa)]
        rows += [dict(setting="fadvise", read_ahead_kb=None, fadvise=hint, pattern="sequential", run=i, MBps=100.0,
                      request_bytes=131072, seen_over_asked=1.0, dev_request_bytes=1.0) for i in range(2)]
    return rows


def test_readahead_finding_follows_the_data():
    f = _finding(_res({"readahead": _ra([500, 510], [1500, 1490], [4.0, 4.1], [1.0, 1.0])}), "readahead")
    assert "faster than read\\_ahead\\_kb = 128" in f.text
    assert "less than without a hint)" in _note(page.readahead_more, _res({"readahead": _ra([500, 510], [1500, 1490],
                                                                                            [4.0, 4.1],
                                                                                [1.0, 1.0])}))
    rev = _res({"readahead": _ra([1500, 1490], [500, 510], [1.0, 1.0], [4.0, 4.1])})
    assert "slower than read\\_ahead\\_kb = 128" in _finding(rev, "readahead").text
    assert "more than without a hint)" in _note(page.readahead_more, rev)
    f = _finding(_res({"readahead": _ra([1, 1], [1, 1], [1, 1], [1, 1])[4:]},
                      readahead_sysfs={"used": False, "note": "no permission (needs root)"}), "readahead")
    assert "not changed: no permission" in f.text


def test_virtual_disk_finding_follows_the_latency():
    lat = lambda us: [dict(series="O_DIRECT, first pass", run=i, reads=100, p50_us=us) for i in range(2)]  # noqa: E731
    assert "a cache under this machine answered" in _finding(_res({"latency": lat(20.0)}), "virtual_disk").text
    assert "came from a device" in _finding(_res({"latency": lat(80.0)}), "virtual_disk").text


def _grid(own_share, seen_4k, seen_big):
    rows = []
    for mode in ("buffered", "O_DIRECT"):
        for size, seen in ((4096, seen_4k), (4 << 20, seen_big)):
            rows.append(dict(mode=mode, size=size, threads=1, run=0, MBps=1.0, IOPS=1.0, p50_us=1.0, p99_us=1.0,
                             dev_request_bytes=seen, dev_queue_depth=1.0, dev_util=0.5, seen_over_asked=1.0,
                             own_share=own_share, error=None))
    return rows


def test_depth_sentence_names_where_the_time_went():
    rows = _grid(1.0, 4096, 1 << 20)
    for r in rows:
        r.update(threads=64, dev_queue_depth=7.5, dev_read_ms=0.1, dev_reads=100, mean_us=800.0)
    note = _note(page.asked_seen_note, _res({"grid": rows}))
    assert "averaged 7.50 in flight" in note and "outside the device's queue" in note
    for r in rows:
        r.update(dev_queue_depth=150.0)
    assert "more than asked" in _note(page.asked_seen_note, _res({"grid": rows}))


def test_asked_vs_seen_follows_the_counters():
    same = _res({"grid": _grid(1.0, 4096, 1 << 20)})
    assert "(the same size)" in _finding(same, "asked_vs_seen").text
    note = _note(page.asked_seen_note, same)
    assert "between what the queue allows" in note and "At least 100%" in note
    split = _res({"grid": _grid(0.4, 16384, 3 << 20)})
    assert "4.0× larger" in _finding(split, "asked_vs_seen").text
    assert "cause not established" in _note(page.asked_seen_note, split)
    assert "Caution" in _note(page.asked_seen_note, split)
    f = _finding(_res({"grid": _grid(1.0, None, None)}, diskstats_device=None), "asked_vs_seen")
    assert "not on a block device" in f.text
    near = _res({"grid": _grid(1.0, 4096 * 1.15, 1 << 20)})   # 4.6 KiB seen for 4 KiB asked: not "the same size"
    text = _finding(near, "asked_vs_seen").text
    assert "(the same size)" not in text and "1.15× the asked size, within the 1.25×" in text, text


def test_chapter_9_opening_follows_reversed_data():
    """Make the disk's own dd read three times slower, then three times faster, than the reference recorded, and
    hand the single thread's random-read rates to the pool and back: the opening turns from "faster than this
    chapter's dd reading the file cold" to "slower", and from "use a pool" to "keep one thread"; the code pasted
    for path (b) carries the setting the run chose."""
    ref = results.load_reference("09_reading_smarter")

    def scaled(dd: float, one: float, pool: float) -> results.Result:
        c = ref.table("ceiling").copy()
        c["GBps"] *= dd
        p = ref.table("pipeline").copy()                    # every dd run of the chapter: the sweep's too
        p.loc[p["mode"].str.startswith("dd"), "GBps"] *= dd
        r = ref.table("random").copy()
        on, po = r["mode"] == "pread, 1 thread", r["mode"] == "pread, thread pool"
        r.loc[on, "IOPS"], r.loc[po, "IOPS"] = r.loc[on, "IOPS"] * one, r.loc[po, "IOPS"] * pool
        return results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint,
                              {**ref.tables, "ceiling": c, "pipeline": p, "random": r}, ref.metadata)

    f = analysis.analyse(scaled(1 / 3, 1 / 10, 10))
    op = page.opening(f)
    assert "faster than this chapter's dd reading the file cold" in op.findings[0].text
    size = size_label(ref.parameters["file_size"])     # the profile's file, as the run read it
    assert op.actions[0].text.startswith(f"For reading a {size} file into GPU memory, cold, use ")
    b = f["to_gpu"].setting
    if b.get("path") == analysis.PINNED:
        assert f"{b['chunk'] >> 20} << 20, {b['buffers']}" in op.actions[0].snippet
    assert "faster than one pread thread" in op.findings[1].text
    threads = f.advice_for("random_reads.threads")
    assert threads.verdict == "change" and f"`ThreadPoolExecutor(max_workers={threads.value})`" in op.actions[1].text
    op = page.opening(analysis.analyse(scaled(3, 10, 1 / 10)))
    assert "slower than this chapter's dd reading the file cold" in op.findings[0].text
    assert "slower than one pread thread" in op.findings[1].text
    assert "keep the default one reading thread" in op.actions[1].text and op.actions[1].snippet is None


def test_opening_without_a_gpu_says_what_to_run(tmp_path):
    """A run without CUDA: no path is recommended, the first action says what to run, and every opening
    finding carries a number."""
    ref = results.load_reference("09_reading_smarter")
    tables = {k: v for k, v in ref.tables.items() if k not in ("gpu", "pipeline")}
    cpu = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, tables,
                         {**ref.metadata, "cuda": False, "gpu_note": "no CUDA device"})
    op = page.opening(analysis.analyse(cpu))
    assert op.actions[0].text.startswith("Run this chapter on a machine with a CUDA GPU") and "no CUDA device" in \
        op.actions[0].text
    assert [f.key for f in op.findings] == ["parallel_random", "readahead", "virtual_disk"]
    assert all(f.value is not None for f in op.findings)


# --------------------------------------------------------------------------- a real small run
def test_findings_of_a_small_real_run(tmp_path):
    res = harness.run("09_reading_smarter",
                      **{**GOOD, "latency_reads": 20}, data_dir=str(tmp_path / "data"), run_dir=tmp_path / "run",
                      progress=False)
    assert res.facts is not None and set(results.Result.load(res.path).facts.facts) == set(res.facts.facts)
    items = page.findings(res.facts)
    assert 3 <= len(items) <= 6 and len({f.key for f in items}) == len(items)
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text, f
    g = res.table("grid")
    assert set(g["mode"]) <= {"buffered", "O_DIRECT"} and (g["resident_at_start"] <= 0.05).all()
    assert res.metadata["readahead_sysfs"]["used"] is False and res.metadata["readahead_changes"] == []
    assert results.Result.load(res.path).tables.keys() == res.tables.keys()
    for fn in (page.asked_seen_table, page.random_table, page.readahead_table, page.storage_table, page.gds_table):
        assert len(fn(res))


def test_the_chapter_states_one_dd_series_and_names_it_as_its_own():
    """The device-ceiling runs and the sweep's paired dd run are the same read of the same file: the ceilings
    text gives one mean, range and run count, the "faster than every one of these N runs" count is that same N,
    and the headline names the dd it compares with as this chapter's (not chapter 2's). Drop the sweep's dd and
    the count follows."""
    res = _with_choice(SWEEP, _gpu([1.0, 1.1, 1.0], [0.9] * 3, [0.8] * 3))   # 3 ceiling runs + 2 sweep runs
    f = analysis.analyse(res)
    assert f["dd_read"].n == 5 and f.number("dd_runs_all") == 5 and analysis.dd_runs(res) == [2.0] * 5
    text = _note(page.ceilings_text, res)
    assert "`dd bs=1M` (chapter 2's method, run in this chapter) 2 GB/s (each of 5 runs)" in text
    assert "every one of these 5 `dd` runs" in text and "3 runs" not in text
    assert "than this chapter's dd reading the file cold" in _finding(res, "to_gpu").text
    pipe = res.tables["pipeline"]
    res.tables["pipeline"] = pipe[~pipe["mode"].str.startswith("dd")]
    f = analysis.analyse(res)
    assert f["dd_read"].n == 3 and f.number("dd_runs_all") == 3
    assert "these 3 `dd` runs" in _note(page.ceilings_text, res)


def test_time_outside_the_device_queue_names_no_unmeasured_cause():
    """The depth note says how much of a call fell outside the device's queue, which was measured, and claims
    no cause this run did not time (the interpreter lock is not measured in this chapter)."""
    rows = _grid(1.0, 4096, 1 << 20)
    for r in rows:
        r.update(threads=64, dev_queue_depth=7.5, dev_read_ms=0.1, dev_reads=100, mean_us=800.0)
    note = _note(page.asked_seen_note, _res({"grid": rows}))
    assert "87.5% of its time was spent outside the device's queue" in note
    assert "interpreter lock" not in note and "does not time those parts apart" in note


def test_the_paths_figure_uses_the_chapters_letters():
    """Fig. 9's labels name each path by the letter the chapter's text and tables give it."""
    import re

    from datajourney.core.paths import REPO_ROOT
    svg = (REPO_ROOT / "book" / "figures" / "09-paths.svg").read_text()
    labels = re.findall(r">\(([a-e])\) ([^<]+)<", svg)
    assert {k for k, _ in labels} >= {"a", "b", "d"}
    names = {**{v[0]: k for k, v in page.PATH_NAMES.items()}, "d": "kvikio"}
    for letter, label in labels:
        assert label.startswith(names[letter]), (letter, label)
        assert page.path_letter(names[letter]).startswith(f"({letter}) ")
