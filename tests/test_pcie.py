"""Chapter 6: link arithmetic, the unclipped overlap ratio and its verdicts, CPU-work calibration,
limits against a fake cgroup tree, the host side of the staging experiment, profiler-timeline
arithmetic, parameter checks, and findings that follow the data (reversal tests on constructed
results). The copies themselves need CUDA and run on the reference host; every part with a CPU
path runs here for real."""
from __future__ import annotations

import json
import threading
import time
from functools import partial

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import findings_by_key, has_nan

from datajourney.book import harness
from datajourney.chapters.c06_pcie import analysis, page, rules
from datajourney.chapters.c06_pcie import charts as c06_charts
from datajourney.chapters.c06_pcie import experiment as pcie
from datajourney.core import charts as plotting
from datajourney.core import phrasing as fx
from datajourney.core import results
from datajourney.core.facts import Facts
from datajourney.core.params import ParameterError

_by_key = partial(findings_by_key, page)   # a page's findings by key

MiB, GiB = 1 << 20, 1 << 30
P = dict(sizes=[65536], repeats=3, warmup=1, ceiling_size=65536, overlap_sizes=[65536], cpu_work_ms=1.0,
         staging_sizes=[1 << 20], kernel_ms=5.0, kernel_rounds=3, profile_timeline=True, dip_sizes=[], dip_rounds=0)
#: the book's options a notebook also passes (checked by ``preflight`` when it gets a mapping)
BOOK = dict(run_dir=None, reference_host=None, is_reference_run=False)


# --------------------------------------------------------------------------- arithmetic
def test_link_peaks():
    assert rules.link_peak_gbps(4, 16) == pytest.approx(31.51, abs=0.01)  # the published L40S link
    assert rules.link_peak_gbps(5, 16) == pytest.approx(63.02, abs=0.01)
    assert rules.link_peak_gbps(3, 8) == pytest.approx(7.88, abs=0.01)
    assert rules.link_peak_gbps(None, 16) is None


def test_overlap_ratio_is_not_clipped():
    assert rules.overlap_ratio(5, 5, 5) == 1.0 and rules.overlap_ratio(5, 5, 10) == 0.0
    assert rules.overlap_ratio(2, 8, 9) == pytest.approx(0.5)
    # noise shows as it is: "together" shorter than the CPU work alone, or longer than serial
    assert rules.overlap_ratio(0.1, 5.0, 4.9) == pytest.approx(2.0)
    assert rules.overlap_ratio(0.1, 5.0, 5.2) == pytest.approx(-1.0)


def test_verdicts_need_a_copy_longer_than_the_jitter():
    assert rules.verdict(0.9) == "overlaps" and rules.verdict(0.1) == "serial"
    assert rules.verdict(0.5) == "partly overlaps"
    # a 0.1 ms copy against 0.1 ms of jitter: no verdict, whatever the ratio says
    assert rules.verdict(1.0, copy_ms=0.1, jitter_ms=0.1) == rules.TOO_SHORT
    assert rules.verdict(1.0, copy_ms=0.31, jitter_ms=0.1) == "overlaps"
    assert rules.verdict(0.5, low=-0.2, high=1.1).startswith("unclear")


def test_bootstrap_interval_brackets_the_median():
    rng = np.random.default_rng(1)
    v = rng.normal(10, 1, 200)
    lo, hi = pcie.bootstrap_interval(v)
    assert lo < np.median(v) < hi and hi - lo < 0.6


# --------------------------------------------------------------------------- CPU work, for real
def test_spin_calibration_within_20_percent():
    """The calibrated work takes the target time: its fastest run within ±20% (the fastest, because
    this test may share its cores with other processes that stretch single runs)."""
    fastest = []
    for _ in range(5):  # a machine oversubscribed for a whole attempt gets another chance
        n, ms = pcie.calibrate_spin(3.0)
        assert n > 0 and ms > 0
        fastest.append(min(pcie._spin_ms(n) for _ in range(9)))
        if fastest[-1] == pytest.approx(3.0, rel=0.2):
            break
    assert fastest[-1] == pytest.approx(3.0, rel=0.2), fastest


def test_a_blocking_copy_is_serial_or_too_short_never_overlapping():
    """A blocking 'copy' (the host waits 20 ms for it, as for a blocking cudaMemcpy) and 10 ms of other
    work, through the chapter's own trials and summary: serial. (Sleeps stand in for both, so that a
    busy test machine cannot stretch them.)"""
    raw = pcie.overlap_trials(lambda: time.sleep(0.02), lambda: None, lambda: time.sleep(0.01), 9)
    s = pcie.summarise_overlap(raw.assign(size=64 * MiB, memory="pageable", mode="blocking")).iloc[0]
    assert s["verdict"] in ("serial", rules.TOO_SHORT), s  # too short only where the test machine is very busy
    assert s["overlap"] < rules.SERIAL
    short = pcie.summarise_overlap(raw.assign(size=64 * MiB, memory="pageable", mode="blocking"), jitter_ms=10.0)
    assert short.iloc[0]["verdict"] == rules.TOO_SHORT  # the same copy against a 10 ms jitter cannot be judged


def test_a_copy_running_beside_the_work_overlaps():
    """A 'copy' that runs on another thread (started by the call, joined at the wait), beside 20 ms of
    other work: the work hides behind it entirely."""
    box = {}

    def start():
        box["t"] = threading.Thread(target=time.sleep, args=(0.06,))
        box["t"].start()

    def wait():
        if "t" in box:
            box.pop("t").join()

    raw = pcie.overlap_trials(start, wait, lambda: time.sleep(0.02), 9)
    s = pcie.summarise_overlap(raw.assign(size=1, memory="pinned", mode="non_blocking")).iloc[0]
    assert s["verdict"] in ("overlaps", rules.TOO_SHORT), s  # too short only where the test machine is very busy
    assert s["overlap"] > 0.5, s


def test_a_tiny_copy_gets_no_verdict():
    raw = pd.DataFrame(dict(rep=range(10), copy_ms=0.05, cpu_ms=5 + 0.1 * np.sin(np.arange(10)),
                            both_ms=5.0 + 0.1 * np.cos(np.arange(10))))
    raw["ratio"] = [rules.overlap_ratio(c, w, b) for c, w, b in zip(raw["copy_ms"], raw["cpu_ms"], raw["both_ms"])]
    s = pcie.summarise_overlap(raw.assign(size=MiB, memory="pinned", mode="blocking")).iloc[0]
    assert s["verdict"] == rules.TOO_SHORT and s["jitter_ms"] > 0.05
    assert abs(s["overlap"]) > 0 and s["overlap_p90"] > s["overlap_p10"]  # unclipped, with its spread


def test_interleaved_rounds_run_on_cpu():
    from datajourney.core.timing import interleaved_ms

    t = interleaved_ms({"a": lambda: time.sleep(0.002), "b": lambda: time.sleep(0.004)}, 5,
                       sample=lambda: {"x": 1.0})
    assert len(t) == 10 and set(t["name"]) == {"a", "b"} and (t["x"] == 1.0).all()
    med = t.groupby("name")["ms"].median()
    assert med["b"] > med["a"] >= 2.0
    assert set(t.groupby("round")["name"].apply(frozenset)) == {frozenset("ab")}


# --------------------------------------------------------------------------- limits, for real
def _tree(root, rel, files):
    d = root.joinpath(*[p for p in rel.strip("/").split("/") if p])
    d.mkdir(parents=True, exist_ok=True)
    for k, v in files.items():
        (d / k).write_text(v)


def test_the_limits_table_shows_the_cgroup_version_not_its_path():
    """The group's path names how the measuring host is laid out (its orchestration), not a limit: the page
    shows the cgroup version only."""
    res = results.load_reference("06_pcie", "h200")
    res.metadata["limits"] = {**res.metadata["limits"], "cgroup_path": "/some/orchestrator/abc123", "cgroup_version": 2}
    t = page.limits_table(res)
    assert "/some/orchestrator/abc123" not in t.to_string() and "v2" in set(t["value"])


def test_limits_read_from_a_fake_cgroup_v2_tree(tmp_path, monkeypatch):
    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("cpu memory")
    _tree(cg, "/", {"memory.max": "max", "cpu.max": "max 100000"})
    _tree(cg, "/kubepods", {"memory.max": str(8 * GiB), "memory.current": str(1 * GiB), "cpu.max": "800000 100000"})
    _tree(cg, "/kubepods/pod1", {"memory.max": "max", "cpu.max": "200000 100000"})
    _tree(cg, "/kubepods/pod1/ctr", {"memory.max": str(16 * GiB), "memory.current": str(2 * GiB)})
    proc = tmp_path / "cgroup.proc"
    proc.write_text("0::/kubepods/pod1/ctr\n")
    lim = pcie.cgroup_limits(cg, proc)
    assert lim["cgroup_version"] == 2 and lim["cgroup_path"] == "/kubepods/pod1/ctr"
    assert lim["limit_bytes"] == 8 * GiB and lim["used_bytes"] == 1 * GiB  # the parent is tighter
    assert lim["cpu_quota_cores"] == pytest.approx(2.0)
    import psutil
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": 64 * GiB})())
    host = pcie.host_limits(cg, proc)
    assert host["cgroup_headroom_bytes"] == 7 * GiB and host["usable_bytes"] <= 7 * GiB
    assert host["cgroup_headroom_bound"] == "the cgroup limit"
    # the room under the limit never exceeds what the host has free, and says which bound it is
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": 3 * GiB})())
    host = pcie.host_limits(cg, proc)
    assert host["cgroup_headroom_bytes"] == 3 * GiB and host["cgroup_headroom_bound"] == "available host memory"
    lim = dict(host, available_bytes=2 * GiB)
    t = page.limits_table(type("R", (), {"metadata": {"limits": lim}})())
    room = t[t["limit"].str.startswith("room left")].iloc[0]
    assert room["value"] == "2.0 GiB" and "capped by available host memory" in room["limit"]
    # the fingerprint reads the same limits: one walk up the parents
    from datajourney.core import fingerprint
    assert pcie.cgroup_limits is fingerprint.cgroup_limits
    monkeypatch.setattr(fingerprint, "cgroup_limits", lambda: pcie.cgroup_limits(cg, proc))
    info = fingerprint.container_info()
    assert info["memory_limit_bytes"] == 8 * GiB and info["cpu_quota_cores"] == pytest.approx(2.0)


def test_limits_read_from_a_fake_cgroup_v1_tree(tmp_path):
    cg = tmp_path / "cgroup"
    _tree(cg, "/memory", {"memory.limit_in_bytes": str(1 << 62)})
    _tree(cg, "/memory/docker/abc", {"memory.limit_in_bytes": str(4 * GiB), "memory.usage_in_bytes": str(GiB)})
    _tree(cg, "/cpu/docker/abc", {"cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000"})
    proc = tmp_path / "cgroup.proc"
    proc.write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    lim = pcie.cgroup_limits(cg, proc)
    assert lim["cgroup_version"] == 1 and lim["limit_bytes"] == 4 * GiB and lim["used_bytes"] == GiB
    assert lim["cpu_quota_cores"] == pytest.approx(1.5)


def test_no_cgroup_means_no_limit(tmp_path):
    lim = pcie.cgroup_limits(tmp_path / "nothing", tmp_path / "none")
    assert lim["limit_bytes"] is None and lim["cpu_quota_cores"] is None


def test_a_size_over_the_cgroup_headroom_fails_before_allocating(tmp_path):
    lim = dict(available_bytes=64 * GiB, cgroup_limit_bytes=2 * GiB, usable_bytes=1536 * MiB, memlock_bytes=None)
    with pytest.raises(ParameterError, match="'sizes'"):
        pcie.check_sizes([600 * MiB], limits=lim)  # three buffers: more than the room under the cgroup limit
    warnings = pcie.check_sizes([400 * MiB], limits=lim)  # fits, but takes over half of the limit
    assert len(warnings) == 1 and warnings[0]["kind"] == "cgroup"
    res = results.Result(chapter="06_pcie", run_id="cpu", parameters={}, fingerprint={},
                         metadata={"cuda": False, "warnings": warnings})
    assert "half of the container's memory limit" in page.warnings_text(res)[0]


def test_last_level_cache_from_a_fake_sysfs(tmp_path):
    for i, (lvl, typ, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                          (3, "Unified", "107520K")]):
        _tree(tmp_path, f"index{i}", {"level": str(lvl), "type": typ, "size": size, "shared_cpu_list": "0-15"})
    llc = pcie.last_level_cache(tmp_path)
    assert llc["level"] == 3 and llc["bytes"] == 107520 * 1024
    assert pcie.last_level_cache(tmp_path / "missing")["bytes"] is None


# --------------------------------------------------------------------------- staging, host side, for real
def test_host_side_of_the_staging_experiment_runs_on_cpu():
    llc = pcie.last_level_cache()["bytes"]
    df = pcie.staging_experiment([MiB, 4 * MiB], repeats=3, warmup=1, llc_bytes=llc, cuda=False)
    assert set(df["measure"]) == {"memcpy one core, source cached", "memcpy one core, cache flushed"}
    assert (df["GBps"] > 0).all() and len(df) == 2 * 2 * 3
    s = pcie.summarise_staging(df)
    assert {"median", "p10", "p90", "n"} <= set(s.columns)


def test_huge_page_buffer_is_a_usable_tensor():
    b = pcie.HugePageBuffer(4 * MiB)
    assert b.tensor.numel() == 4 * MiB and int(b.tensor[-1]) == 1
    assert b.huge_bytes is None or b.huge_bytes >= 0
    b.close()


# --------------------------------------------------------------------------- the profiler timeline
def test_timeline_overlap_arithmetic():
    ev = [dict(cat="kernel", name="gemm", ts=0, dur=100), dict(cat="kernel", name="gemm", ts=100, dur=100),
          dict(cat="kernel", name="gemm", ts=200, dur=150),  # slowed beside the copy
          dict(cat="gpu_memcpy", name="Memcpy HtoD (Pinned -> Device)", ts=150, dur=250),
          dict(cat="gpu_memcpy", name="Memcpy DtoH (Device -> Pinned)", ts=0, dur=999)]  # other direction: ignored
    t = pcie.timeline_overlap(ev)
    assert t["copies"] == 1 and t["copy_ms"] == pytest.approx(0.25)
    assert t["covered_share"] == pytest.approx(200 / 250)
    assert t["kernel_slowdown"] == pytest.approx(150 / 100)


def test_profiler_timeline_runs_on_cpu():
    events = pcie.gpu_timeline(lambda: torch.ones(64, 64) @ torch.ones(64, 64), 2)
    # on a CPU the profiler records no GPU activity: no kernel or copy event may appear
    assert events == [] or all(e["cat"] in ("kernel", "gpu_memcpy") and e["dur"] >= 0 for e in events)
    assert not any(e["cat"] == "gpu_memcpy" for e in events)
    t = pcie.timeline_overlap(events)
    assert t["copies"] == 0


# --------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("name,value", [
    ("sizes", [0]), ("sizes", []), ("sizes", "1 MiB"), ("repeats", 0), ("repeats", 2), ("repeats", True),
    ("warmup", 0), ("cpu_work_ms", 0), ("cpu_work_ms", "5"), ("overlap_sizes", [-1]),
    ("staging_sizes", [1.5]), ("ceiling_size", 10), ("kernel_ms", -1), ("kernel_ms", float("nan")),
    ("kernel_rounds", 2), ("profile_timeline", "yes"), ("is_reference_run", 1),
    ("reference_host", "no-such-host")])
def test_bad_parameters_are_named(name, value):
    with pytest.raises(ParameterError, match=repr(name)):
        pcie.preflight({**P, **BOOK, name: value})


def test_run_dir_must_be_creatable(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ParameterError, match="'run_dir'"):
        pcie.preflight({**P, **BOOK, "run_dir": str(f / "sub")})
    assert pcie.preflight({**P, **BOOK, "run_dir": str(tmp_path / "new" / "dir")})


def test_size_beyond_host_memory_fails_before_allocating():
    with pytest.raises(ParameterError, match="'sizes'.*free host memory"):
        pcie.preflight({**P, "sizes": [1 << 36]})  # 64 GiB, three buffers: more than this machine has free


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_without_cuda_the_chapter_says_so_and_measures_the_host_side(tmp_path):
    res = harness.run("06_pcie", pcie.Params(**P), run_dir=tmp_path, progress=False)
    assert res.metadata["cuda"] is False and "note" not in res.metadata and "no_cuda" in res.facts
    assert "bandwidth" not in res.tables and page.key_metrics(res) == {}
    assert page.has_staging(res) and res.metadata["cpu_work"]["std_ms"] >= 0
    items = page.findings(res)
    assert [f.key for f in items] == ["no_cuda", "host_memcpy", "cpu_jitter"]
    assert all(not has_nan(f.text) for f in items)
    loaded = results.Result.load(res.path)
    assert [f.text for f in page.findings(loaded)] == [f.text for f in items]


# --------------------------------------------------------------------------- constructed GPU results
RATES = {("H2D", "pinned"): 55.0, ("D2H", "pinned"): 55.0, ("H2D", "pageable"): 17.5, ("D2H", "pageable"): 19.5}


def gpu_result(*, rates=None, h2d_large_drop=True, llc=96 * MiB, pin_later_ms=1.97, pin_allocs=1, copy_ms_small=0.03,
               overlap_pinned_nb=True, jitter=0.1, kernel_added_ms=0.2, reps=8, seed=0) -> results.Result:
    """A result shaped like a GPU run of :func:`pcie.run`, built from the module's own summarisers."""
    rng = np.random.default_rng(seed)
    rates = {**RATES, **(rates or {})}
    sizes = [64 << 10, MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB]
    rows = []
    for n in sizes:
        ramp = n / (n + (512 << 10))
        for (d, m), r in rates.items():
            rate = r * ramp * (0.56 if (h2d_large_drop and (d, m) == ("H2D", "pageable") and n > 64 * MiB) else 1)
            for clock, extra in (("CUDA events", 0.0), ("host clock", 0.01)):
                for i in range(reps):
                    ms = n / (rate * (1 + 0.01 * rng.standard_normal()) * 1e9) * 1e3 + extra
                    rows.append(dict(size=n, direction=d, memory=m, clock=clock, rep=i, ms=ms, GBps=n / ms / 1e6))
    raw = pd.DataFrame(rows)
    res = results.Result(chapter="06_pcie", run_id="constructed", parameters={},
                         fingerprint={"cpu": {"hypervisor": True}})
    peak = rules.link_peak_gbps(5, 16)
    res.add("bandwidth_raw", raw)
    res.add("bandwidth", pcie.summarise_bandwidth(raw, peak))
    # staging: cached copies fast while the source fits in a 96 MiB cache, DRAM-bound beyond
    st = []
    for n in [32 * MiB, 64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB]:
        fits = n <= 64 * MiB
        vals = {"memcpy one core, source cached": 30.0 if fits else 11.0, "memcpy one core, cache flushed": 11.0,
                "H2D pageable, source cached": (17.5 if fits else 9.8) if h2d_large_drop else 17.5,
                "H2D pageable, cache flushed": 9.8 if h2d_large_drop else 17.5,
                "H2D pageable, huge pages": (17.5 if fits else 9.9) if h2d_large_drop else 17.5,
                "D2H pageable": 19.5}
        for meas, g in vals.items():
            for i in range(reps):
                v = g * (1 + 0.01 * rng.standard_normal())
                st.append(dict(size=n, measure=meas, rep=i, ms=n / v / 1e6, GBps=v,
                               **({"huge_bytes": float(n), "advised": True} if "huge" in meas else {})))
    st = pd.DataFrame(st)
    res.add("staging_raw", st)
    res.add("staging", pcie.summarise_staging(st))
    # copy vs CPU work
    ov = []
    for n, c in ((MiB, copy_ms_small), (16 * MiB, 0.31), (256 * MiB, 4.85)):
        for m in ("pageable", "pinned"):
            for mode in ("blocking", "non_blocking"):
                cc = c * (3.5 if m == "pageable" else 1)
                for i in range(reps):
                    w = 5 + jitter * rng.standard_normal()
                    hide = overlap_pinned_nb and (m, mode) == ("pinned", "non_blocking")
                    b = (max(cc, w) if hide else cc + w) + jitter * rng.standard_normal()
                    ov.append(dict(rep=i, copy_ms=cc, cpu_ms=w, both_ms=b, ratio=rules.overlap_ratio(cc, w, b),
                                   size=n, memory=m, mode=mode))
    ov = pd.DataFrame(ov)
    res.add("overlap_raw", ov)
    res.add("overlap", pcie.summarise_overlap(ov))
    res.add("bidirectional", [dict(size=256 * MiB, h2d_ms=4.86, d2h_ms=4.86, both_ms=5.31, h2d_GBps=55.2,
                                   d2h_GBps=55.2, aggregate_GBps=101.1, overlap=0.91, overlap_p10=0.88,
                                   overlap_p90=0.93, n=reps, verdict="overlaps")])
    calls = []
    for design in ("blocks", "interleaved"):
        for r in range(12):
            k = 18.5 + 0.1 * rng.standard_normal()
            for name, ms in (("kernel", k), ("copy", 4.85), ("both", k + kernel_added_ms
                                                             + 0.05 * rng.standard_normal())):
                calls.append(dict(design=design, round=r, position=0, name=name, ms=ms, sm_clock_mhz=1980.0,
                                  power_w=600.0, temperature_c=50.0))
    calls = pd.DataFrame(calls)
    inter = calls[calls["design"] == "interleaved"]
    summary = dict(size=256 * MiB, matmuls=100, matmul_ms=0.185, nvml=True, blocks_overlap=0.6,
                   blocks_kernel_ms=18.5, blocks_both_ms=20.4, **pcie.paired_overlap(inter),
                   sm_clock_blocks_kernel=1980.0, sm_clock_blocks_both=1830.0, timeline=True,
                   timeline_covered_share=0.97, timeline_kernel_slowdown=1.02)
    res.add("copy_kernel_calls", calls)
    res.add("copy_kernel", [summary])
    pc = []
    for way, first, later in (("pin_memory() per batch, then copy", 25.0, pin_later_ms),
                              ("copy into a reused pinned buffer, then copy", 1.95, 1.91),
                              ("pageable copy", 4.5, 4.4),
                              ("pin_memory() with the pinned cache emptied before each call", 25.0, 24.0)):
        for call in range(1, reps + 2):
            pc.append(dict(way=way, call=call, ms=first if call == 1 else later * (1 + 0.01 * rng.standard_normal()),
                           size=64 * MiB))
    pc = pd.DataFrame(pc)
    res.add("pin_cost_raw", pc)
    res.add("pin_cost", pcie.summarise_pin_cost(pc))
    res.add("stale_read", [dict(expected=7, read_before_sync=0, read_after_sync=7, stale=True)])
    res.metadata.update(
        cuda=True, link=dict(gen_current=5, gen_max=5, width_current=16, width_max=16, peak_GBps=peak),
        ceiling=dict(available=True, path="CuPy", size=GiB, GBps=55.5), llc=dict(level=3, bytes=llc),
        pin_cost=dict(size=64 * MiB, host_allocations_during_pin_calls=pin_allocs, pin_calls=reps + 1),
        cpu_work=dict(iterations=1, calibrated_ms=5.0, std_ms=jitter, n=10),
        limits=dict(available_bytes=GiB, cgroup_limit_bytes=None, memlock_bytes=None, cpu_quota_cores=None),
        warnings=[])
    return res


#: The note beside each chart that carries the details of a key result.
NOTES = {"h2d_pinned": page.ceiling_text, "pageable_drop": page.pageable_drop_note,
         "cpu_overlap": page.cpu_overlap_note, "copy_kernel": page.copy_kernel_note, "pin_cost": page.pin_cost_note}


def _full(res, key):
    """A key result with the note that carries its details."""
    return _by_key(res)[key].text + " " + NOTES.get(key, lambda r: "")(res)


def test_findings_of_a_gpu_run():
    res = gpu_result()
    f = _by_key(res)
    assert list(f) == ["h2d_pinned", "slowest_path", "pageable_drop", "cpu_overlap", "copy_kernel", "pin_cost"]
    assert f["h2d_pinned"].published == "H2D pinned, 1 GiB" and "ceiling" in f["h2d_pinned"].text
    assert f["slowest_path"].published == "D2H pinned ÷ pageable, 1 GiB"
    assert "slowest path is **host-to-device from pageable memory**" in f["slowest_path"].text
    assert "the driver's CPU staging copy is fast only while the source is still in the CPU's cache" in \
        page.pageable_drop_note(res)
    assert f["pageable_drop"].text.count(". ") == 0  # one sentence of result; the cause beside the chart
    details = page.staging_details(res)
    assert "outgrow the 96 MiB last-level cache" in details and "page size is not the cause" in details
    assert "slower than a pageable copy of 64 MiB" in f["pageable_drop"].text  # the peak, then the drop
    assert f["cpu_overlap"].published == "overlap, pinned + non_blocking, 256 MiB"
    assert ": it overlaps." in f["cpu_overlap"].text and "1 MiB" in _full(res, "cpu_overlap")  # too short at 1 MiB
    assert "reuse the cached block" in _full(res, "pin_cost")
    for key, x in f.items():
        assert not has_nan(_full(res, key)) and "None" not in _full(res, key)
        assert fx.words(x.text) <= 60, (key, x.text)  # the details live in the notes


def test_a_knee_far_below_the_reported_cache_is_said_so():
    text = page.staging_details(gpu_result(llc=300 * MiB))
    assert "well below the 300 MiB last-level cache" in text and "virtual machine" in text


def test_reversed_d2h_pageable_is_the_slowest_path():
    f = _by_key(gpu_result(rates={("D2H", "pageable"): 1.77}, h2d_large_drop=False))
    assert "slowest path is **device-to-host into pageable memory**" in f["slowest_path"].text
    assert f["slowest_path"].value > 20  # pinned D2H ÷ pageable D2H
    assert "level with a pageable copy of 1 GiB" in f["pageable_drop"].text and "slower" not in f["pageable_drop"].text
    note = page.pageable_drop_note(gpu_result(rates={("D2H", "pageable"): 1.77}, h2d_large_drop=False))
    assert "Cause" not in note and "stayed within 10% from 32 MiB to 512 MiB" in note
    assert "the CPU-cache cause does not reproduce in this run" in note


def test_reversed_pinning_on_the_fly_is_expensive():
    res = gpu_result(pin_later_ms=24.0, pin_allocs=9)
    f = _by_key(res)["pin_cost"]
    assert "slower than a reused pinned buffer" in f.text and "was not reused every time" in page.pin_cost_note(res)
    f = _by_key(gpu_result())["pin_cost"]
    assert "slower than a reused pinned buffer" in f.text and "24" not in f.text


def test_reversed_copy_that_does_not_overlap_cpu_work():
    f = _by_key(gpu_result(overlap_pinned_nb=False))["cpu_overlap"]
    assert ": it ran serially." in f.text and f.value < 20


def test_reversed_every_copy_too_short_to_tell():
    res = gpu_result(jitter=8.0)  # jitter above every copy: no verdict anywhere
    o = res.table("overlap")
    assert (o["verdict"] == rules.TOO_SHORT).all()
    f = _by_key(res)["cpu_overlap"]
    assert rules.TOO_SHORT in f.text and "overlaps." not in _full(res, "cpu_overlap")
    assert page.key_metrics(res)["overlap, pinned + non_blocking, 256 MiB"] == (None, None)


def test_blocking_copies_never_read_as_overlapping():
    res = gpu_result()
    o = res.table("overlap")
    blocking = o[o["mode"] == "blocking"]
    assert set(blocking["verdict"]) <= {"serial", rules.TOO_SHORT}
    assert "Every blocking copy long enough to judge ran serially" in page.overlap_caveat(res)


def test_reversed_copy_kernel_overlap():
    hidden = _by_key(gpu_result(kernel_added_ms=0.1))["copy_kernel"]
    serial = _by_key(gpu_result(kernel_added_ms=4.8))["copy_kernel"]
    assert hidden.value > 90 and "overlaps" in hidden.text
    assert serial.value < 10 and "serial" in serial.text
    assert hidden.interval[0] <= hidden.value <= hidden.interval[1]


def test_computed_sections_of_a_gpu_run():
    res = gpu_result()
    text = page.two_clocks(res)
    assert "host clock adds about" in text and "bracket the whole pageable copy" in text
    assert "set by CuPy's 1 GiB copy" in page.ceiling_text(res) and "overlaps" in page.bidirectional_text(res)
    assert "target" not in page.ceiling_text(res) and "met" not in page.ceiling_text(res)
    assert "Nothing crashed" in page.stale_text(res)
    assert "slowest path at 1 GiB was host-to-device from pageable memory" in page.takeaways(res)
    assert "not the run's slowest path" in page.versus_published(res)
    assert "slowest path too" in page.versus_published(gpu_result(rates={("D2H", "pageable"): 1.5},
                                                                  h2d_large_drop=False))
    km = page.key_metrics(res)
    assert km["D2H pinned ÷ pageable, 1 GiB"][0] == pytest.approx(55 / 19.5, rel=0.05)
    assert km["overlap, pinned + non_blocking, 16 MiB"][0] is not None


def test_charts_and_tables_of_a_gpu_run():
    res = gpu_result()
    ev = page.bandwidth_frame(res)
    fig = plotting.lines_with_band(ev, x="size", color="path", title="t", xaxis="x", yaxis="y", centre="median",
                                   low="p10", high="p90", band_label="p10–p90")
    assert "p10–p90" in fig.data[0].hovertemplate and "median" in fig.data[0].hovertemplate
    assert "mean" not in fig.data[0].hovertemplate and "p10–p90" in fig.layout.title.text
    fig = c06_charts.overlap_ratio_chart(res.table("overlap"), title="t")
    points = {x for t in fig.data for x, y in zip(t.x, t.y) if y is not None}
    assert "1 MiB" not in points and "256 MiB" in points  # too-short rows are not what the chart leads with
    axis = {x for t in fig.data for x in t.x}
    assert "1 MiB" in axis  # but every size keeps its place on the axis, labelled "no verdict"
    notes = [a for a in fig.layout.annotations if "no verdict" in (a.text or "")]
    o = res.table("overlap")
    assert {a.x for a in notes} == {plotting.size_label(n) for n in o[o["verdict"] == rules.TOO_SHORT]["size"]}
    assert fig.layout.title.text.startswith("t<br>") and "p10–p90" in fig.data[1].hovertemplate
    lines = [a for a in fig.layout.annotations if a.text in ("serial", "fully hidden")]
    assert len(lines) == 2 and all(a.xref == "paper" and a.x >= 1 for a in lines)  # outside the points
    st = c06_charts.staging_chart(res.table("staging"), llc_bytes=96 * MiB, title="t")
    assert "GB/s" in st.layout.yaxis.title.text and "memcpy" in st.layout.yaxis.title.text
    assert all(t.yaxis in (None, "y") for t in st.data)  # one axis, titled after its series
    pr = c06_charts.paired_rounds_chart(res.table("copy_kernel_calls"), copy_ms=4.85, title="t")
    by_axis = {t.yaxis or "y": t.name for t in pr.data}
    assert "added" in by_axis["y"] and "SM clock" in by_axis["y2"]
    assert "added" in pr.layout.yaxis.title.text and "SM clock" in pr.layout.yaxis2.title.text
    assert pr.layout.yaxis2.tickformat == "d" and pr.layout.legend.orientation == "h" and pr.layout.legend.y < 0
    bt = page.bandwidth_table(res)
    assert list(bt["copy size"]) == ["64 KiB", "1 MiB", "16 MiB", "64 MiB", "256 MiB", "1 GiB"]
    assert page.staging_table(res)["buffer size"].iloc[0] == "32 MiB"
    cp = page.clocks_table(res)
    ratios = cp.drop(columns="copy size")
    assert (ratios.iloc[0] > 1.2).all() and (ratios > 0.9).all().all()  # launch cost weighs on the smallest copy
    od = page.overlap_table(res)
    assert len(od.columns) <= 7 and len(od) == len(res.table("overlap"))
    assert set(od["verdict"]) <= {"overlaps", "serial", "unclear", "too short"}
    assert not od["overlap: median (p10 to p90)"].str.contains("-0.0%|–-|- ", regex=True).any()
    ck = page.copy_kernel_table(res)
    assert set(ck["call"]) == {"kernel", "copy", "both"} and (ck["median (ms)"] > 0).all()
    pc = page.pin_cost_table(res)
    assert (pc["first call (ms)"] >= pc["later calls: median (ms)"]).all()
    lt = page.limits_table(res)
    assert lt.iloc[0]["value"] == "1.0 GiB" and "tightest" in lt.iloc[1]["limit"]


# --------------------------------------------------------------------------- text that follows the data (round 2)
def _with_staging(res, change):
    """``res`` with its staging table's medians changed by ``change(measure, size) -> factor or None``."""
    st = res.table("staging").copy()
    for i, r in st.iterrows():
        f = change(r["measure"], int(r["size"]))
        if f is not None:
            st.loc[i, ["median", "p10", "p90"]] = st.loc[i, ["median", "p10", "p90"]] * f
    res.tables["staging"] = st
    return res


def test_staging_details_report_the_share_range_a_dip_and_copies_one_core_cannot_model():
    res = gpu_result()
    text = page.staging_details(res)
    assert "of one core's DRAM copy rate" in text and "dips to" not in text
    assert "does not model the staging stage" not in text  # one core from cache (30) beats the copy (17.5)
    # the copy beats one core from cache at the small sizes; a dip beyond the knee that recovers at the end
    res = _with_staging(gpu_result(), lambda m, n: (0.5 if m == "memcpy one core, source cached" and n <= 64 * MiB
                                                    else 0.7 if m == "H2D pageable, source cached"
                                                    and 128 * MiB <= n < 512 * MiB
                                                    else None))
    text = page.staging_details(res)
    assert "At 32 MiB and 64 MiB the pageable copy" in text and "does not model the staging stage" in text
    assert (
        "dips to" in text and "recovers to" in text and "The interleaved check that decides it is not run here" in text
    )
    assert "in the bandwidth sweep and" in text and "apart. They differ" in text  # 256 MiB: sweep and staging differ
    share = text.split("of one core's DRAM copy rate")[0].rsplit("runs at ", 1)[1]
    assert "–" in share  # a range, not one size's figure


def _dipped():
    """A GPU result whose cached pageable copy dips at 128-384 MiB in the block experiment."""
    return _with_staging(gpu_result(), lambda m, n: (0.7 if m == "H2D pageable, source cached"
                                                     and 128 * MiB <= n < 512 * MiB else None))


def _dip_table(rates, faults=None, cpu=None, rounds=5):
    """The interleaved check: {size: GB/s}, page faults per copy and CPU ms per GB per size."""
    rows = []
    for n, r in rates.items():
        for k in range(rounds):
            ms = n / (r * (1 + 0.01 * k) * 1e9) * 1e3
            rows.append(dict(size=n, round=k, position=0, ms=ms, GBps=n / (ms / 1e3) / 1e9,
                             cpu_ms=(cpu or {}).get(n, 100.0) * n / 1e9, minor_faults=(faults or {}).get(n, 0),
                             major_faults=0))
    return pd.DataFrame(rows)


def test_the_interleaved_check_decides_the_dip():
    sizes = [128 * MiB, 256 * MiB, 512 * MiB]
    # no dip when interleaved: the order made it
    res = _dipped()
    res.tables["staging_dip"] = _dip_table({n: 9.3 for n in sizes})
    text = page.staging_details(res)
    assert "support an artefact of the order" in text and "measured one size at a time 128 MiB and 256 MiB did" in text
    assert "nearer the bandwidth sweep" in text  # 256 MiB: 9.3 interleaved, 9.8 in the sweep vs 7.0 staging
    table = page.dip_table(res)
    assert list(table["copy size"]) == ["128 MiB", "256 MiB", "512 MiB"] and (table["copies"] == 5).all()
    # the dip stays, with more page faults per byte at its sizes
    res.tables["staging_dip"] = _dip_table({128 * MiB: 7.0, 256 * MiB: 7.0, 512 * MiB: 9.3},
                                           faults={128 * MiB: 4096, 256 * MiB: 8192, 512 * MiB: 0})
    text = page.staging_details(res)
    assert "the dip belongs to the size, not the order" in text and "support page faults during the copy" in text
    # the dip stays, more CPU per byte, no faults
    res.tables["staging_dip"] = _dip_table({128 * MiB: 7.0, 256 * MiB: 7.0, 512 * MiB: 9.3},
                                           cpu={128 * MiB: 140.0, 256 * MiB: 140.0, 512 * MiB: 100.0})
    assert "support slower staging on the CPU" in page.staging_details(res)
    # the dip stays, nothing differs: no explanation claimed
    res.tables["staging_dip"] = _dip_table({128 * MiB: 7.0, 256 * MiB: 7.0, 512 * MiB: 9.3})
    text = page.staging_details(res)
    assert "support neither explanation" in text and "support page faults" not in text
    # without the check: said plainly, by why
    res = _dipped()
    res.run_id = "reference-h200-x"
    assert "The interleaved check that decides it is not in the reference run" in page.staging_details(res)
    assert page.dip_table(res).empty
    res.metadata["cuda"] = False
    assert "not measured in this run (skipped)" in page._dip_words(page.facts_of(res).data["dip_check"])


def test_dip_check_parameters_are_checked():
    with pytest.raises(ParameterError, match="'dip_rounds'"):
        pcie.preflight({**P, "dip_sizes": [MiB], "dip_rounds": 2})
    with pytest.raises(ParameterError, match="'dip_sizes'"):
        pcie.preflight({**P, "dip_sizes": [0], "dip_rounds": 5})
    assert pcie.preflight({**P, "dip_sizes": [], "dip_rounds": 0}).dip_sizes == []


def test_huge_pages_with_a_wide_spread_are_not_resolved():
    assert "page size is not the cause" in page.staging_details(gpu_result())
    res = _with_staging(gpu_result(), lambda m, n: ({128 * MiB: 0.7, 256 * MiB: 1.3}.get(n)
                                                    if m == "H2D pageable, huge pages" else None))
    text = page.staging_details(res)
    assert "not resolved by this run" in text and "page size is not the cause" not in text
    res = _with_staging(gpu_result(), lambda m, n: 0.6 if m == "H2D pageable, huge pages" and n > 64 * MiB else None)
    assert "they hurt here" in page.staging_details(res)


def test_overlap_caveat_names_the_sizes_judged_and_why_not_the_rest():
    res = gpu_result()
    text = page.overlap_caveat(res)
    o = res.table("overlap")
    judged = o[o["verdict"] != rules.TOO_SHORT]
    assert text.startswith(f"{len(judged)} of {len(o)} rows could be judged: ")
    assert "No verdict for 1 MiB (all four)" in text and "CPU-work jitter" in text
    assert "does not explain the swing" not in text  # the constructed CPU work is steady
    o.loc[o["size"] == 256 * MiB, "cpu_ms"] *= 1.65
    assert "does not explain the swing" in page.overlap_caveat(res)
    assert page.overlap_caveat(gpu_result(jitter=8.0)).startswith("No row could be judged")


def test_numbers_print_without_garbled_signs_or_ranges():
    import re
    res = gpu_result(overlap_pinned_nb=False)
    o = res.table("overlap")
    o.loc[(o["size"] == 256 * MiB) & (o["memory"] == "pinned") & (o["mode"] == "blocking"), "overlap"] = -0.0001
    texts = [_full(res, f.key) for f in page.findings(res)] + [page.overlap_caveat(res), page.staging_details(res),
                                                    page.takeaways(res), page.bidirectional_text(res)]
    for t in texts:
        assert "-0.0%" not in t and "−0.0%" not in t
        assert not re.search(r"\d–-", t) and not re.search(r"(\b[\d.,]+)–\1\b", t)  # no '-a–b', no 'X–X'
    assert "serial (0.0%)" in page.cpu_overlap_note(res)


def test_a_large_copy_with_fewer_repeats_says_why():
    res = gpu_result()
    res.parameters["repeats"] = 20
    assert "median of 8: above 256 MiB the sweep times fewer copies than the 20 repeats" in page.ceiling_text(res)
    res.parameters["repeats"] = 8
    assert "median of 8;" in page.ceiling_text(res)


def test_one_size_label():
    assert page.size_label is plotting.size_label
    assert [plotting.size_label(n) for n in (1572864, 1536, 100, 3 << 29, 48 * MiB)] == \
        ["1.5 MiB", "1.5 KiB", "100 B", "1.5 GiB", "48 MiB"]


# --------------------------------------------------------------------------- the ceiling is a ceiling
def _with_ceiling_rounds(res, cupy, torch_, size=GiB):
    """``res`` with the ceiling's interleaved rounds: CuPy and PyTorch GB/s, one per round."""
    rows = []
    for r, (c, t) in enumerate(zip(cupy, torch_)):
        phase = pcie.CEILING_PHASES[r % len(pcie.CEILING_PHASES)]
        for path, v in (("CuPy", c), ("PyTorch", t)):
            gbps = [v * (1 + 0.001 * (i - 2)) for i in range(5)]
            rows += [dict(round=r, phase=phase, path=path, rep=i, size=size, ms=size / g / 1e6, GBps=g)
                     for i, g in enumerate(gbps)]
    raw = pd.DataFrame(rows)
    res.add("ceiling_raw", raw)
    res.add("ceiling", pcie.summarise_ceiling(raw))
    res.metadata["ceiling"] = dict(available=True, path="CuPy", size=size, rounds=len(cupy), repeats=5)
    return res


def test_highest_of_a_set_of_measurements():
    from datajourney.toolkit import transfer

    top = transfer.highest([dict(source="a", GBps=50.3), dict(source="b", GBps=54.1), dict(source="c", GBps=None)])
    assert top["source"] == "b" and top["GBps"] == 54.1 and top["of"] == 2
    assert transfer.highest([]) is None


def test_no_pinned_copy_of_the_chapter_exceeds_its_ceiling():
    """As on a host whose bus drifted: the second path's rounds read 46-52 GB/s, while the sweep's pinned
    copies read up to 55 GB/s. The ceiling is the fastest of them, the page says so, and no share exceeds 100%."""
    res = _with_ceiling_rounds(gpu_result(), cupy=[46.3, 50.3, 51.8], torch_=[46.0, 50.0, 51.5])
    res.tables["bidirectional"] = res.table("bidirectional").assign(h2d_GBps=54.0)
    facts = analysis.analyse(res)
    c = facts["ceiling"]
    measured = analysis.pinned_h2d_measurements(res)
    assert len(measured) == 6 + 6 + 1  # sweep sizes, both paths' rounds, the both-directions copy
    assert c.setting["measurements"] == len(measured) and all(m["GBps"] <= c.number for m in measured)
    sweep = page.bandwidth_frame(res)
    assert c.number == pytest.approx(sweep[sweep["path"] == "H2D, pinned"]["median"].max())
    assert c.setting["kind"] == "sweep" and c.setting["path"] == "PyTorch"
    text = page.ceiling_text(facts)
    top = sweep[sweep["path"] == "H2D, pinned"].sort_values("median").iloc[-1]
    assert f"set by PyTorch's {fx.size_label(int(top['size']))} copy in the bandwidth sweep" in text
    assert "In 3 rounds spread over the run" in text
    assert "46.3–51.8 GB/s" in text and "level with" in text  # PyTorch against CuPy, round by round
    assert facts.number("h2d_pinned_share_of_ceiling") <= 100
    share = page.finding_pinned_h2d(facts).value / c.number
    assert share <= 1
    # the second path faster in a later round: it sets the ceiling instead
    res = _with_ceiling_rounds(gpu_result(), cupy=[50.0, 57.0, 51.0], torch_=[49.0, 50.0, 50.5])
    facts = analysis.analyse(res)
    assert facts.number("ceiling") == pytest.approx(57.0, rel=0.01)
    assert facts["ceiling"].setting["path"] == "CuPy" and facts["ceiling"].setting["round"] == 1
    text = page.ceiling_text(facts)
    assert "set by CuPy's 1 GiB copy in the ceiling's round 2" in text
    assert "slower than" in text or "level with" in text


def test_a_measurement_without_a_rate_never_sets_the_ceiling():
    """A copy whose rate could not be computed (NaN) is left out of the ceiling, not taken as its highest."""
    res = _with_ceiling_rounds(gpu_result(), cupy=[46.3, 50.3, 51.8], torch_=[46.0, 50.0, 51.5])
    res.tables["bidirectional"] = res.table("bidirectional").assign(h2d_GBps=float("nan"))
    facts = analysis.analyse(res)
    measured = analysis.pinned_h2d_measurements(res)
    assert facts["ceiling"].setting["measurements"] == len(measured) - 1
    assert facts.number("ceiling") == pytest.approx(max(m["GBps"] for m in measured if m["kind"] != "both directions"))


def test_summarise_ceiling_gives_one_median_per_round_and_path():
    res = _with_ceiling_rounds(gpu_result(), cupy=[50.0, 51.0], torch_=[49.0, 52.0])
    t = res.table("ceiling")
    assert len(t) == 4 and set(t["path"]) == {"CuPy", "PyTorch"} and (t["n"] == 5).all()
    assert t[(t["round"] == 1) & (t["path"] == "PyTorch")]["median"].iloc[0] == pytest.approx(52.0, rel=0.01)


def test_staging_text_follows_the_direction_of_its_table():
    """A pageable rate that rises 24% from 32 to 512 MiB, with a flush that changes nothing: the note
    says it rose, and that the cache cause does not reproduce; nothing says the size changes nothing."""
    rise = {32 * MiB: 1.0, 64 * MiB: 1.05, 128 * MiB: 1.1, 256 * MiB: 1.18, 512 * MiB: 1.24}

    def staged(res):
        raw = res.table("staging_raw").copy()
        pag = raw["measure"].isin(["H2D pageable, source cached", "H2D pageable, cache flushed"])
        raw.loc[pag, "GBps"] = 14.0 * raw.loc[pag, "size"].map(rise) * (1 + 0.002 * raw.loc[pag, "rep"])
        res.tables["staging_raw"] = raw
        res.tables["staging"] = pcie.summarise_staging(raw)
        return res

    res = staged(gpu_result(h2d_large_drop=False))
    note = page.pageable_drop_note(res)
    assert "rose by 24% from 32 MiB to 512 MiB" in note and "neither" not in note and "Cause" not in note
    assert "does not reproduce in this run" in note
    # reversed: the same table falling with size and a flush that hurts: the cause is stated
    res = gpu_result()
    assert "**Cause (staging experiment)" in page.pageable_drop_note(res)


def test_a_dip_the_interleaved_check_never_copied_is_left_undecided():
    res = _dipped()  # the block experiment dips at 128 and 256 MiB
    res.tables["staging_dip"] = _dip_table({400 * MiB: 9.3, 512 * MiB: 9.3})
    text = page.staging_details(res)
    assert "which the interleaved check did not copy" in text
    assert "measured one size at a time" not in text and "artefact of the order" not in text
    # one of the two covered: the sentence names only that one, and the one it did not copy
    res.tables["staging_dip"] = _dip_table({128 * MiB: 9.3, 512 * MiB: 9.3})
    text = page.staging_details(res)
    assert "measured one size at a time 128 MiB did" in text and "the check did not copy 256 MiB" in text


def test_chapter_6_opening_follows_reversed_data():
    """Swap pinned and pageable memory in the reference's bandwidth sweep: pinned copies turn from
    faster to slower, and the advice from "set pin_memory=True" to "leave it off"."""
    ref = results.load_reference("06_pcie")
    op = page.opening(ref)
    assert "faster than" in op.findings[0].text and "pin_memory=True" in op.actions[0].text
    assert op.actions[0].snippet and "pin_memory=True" in op.actions[0].snippet
    swap = {"pinned": "pageable", "pageable": "pinned"}
    tables = dict(ref.tables)
    for name in ("bandwidth", "bandwidth_raw"):
        t = ref.table(name).copy()
        t["memory"] = t["memory"].map(swap)
        tables[name] = t
    rev = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, tables, ref.metadata)
    op = page.opening(rev)
    assert "slower than" in op.findings[0].text and op.findings[0].value < 1
    ratio = page.facts_of(ref).number("pinned_vs_pageable_batch")  # the reference's own gain, now pageable's
    assert f"keep the default `pin_memory=False`, which ran {ratio:.1f}× faster than a pinned copy of 16 MiB" in (
        op.actions[0].text)
    assert op.actions[0].snippet is None
    # the copy that no longer hides behind compute turns the second action round too
    ck = ref.table("copy_kernel").copy()
    ck[["hidden", "hidden_lo", "hidden_hi"]] = [0.02, -0.05, 0.1]
    rev.tables["copy_kernel"] = ck
    assert "bought nothing" in page.opening(rev).actions[1].text


def test_chapter_6_opening_without_a_gpu_says_what_to_run():
    res = results.Result(chapter="06_pcie", run_id="cpu", parameters={}, fingerprint={},
                         metadata={"cuda": False, "cpu_work": dict(calibrated_ms=5.0, std_ms=0.2, n=10), "llc": {}})
    st = pd.DataFrame([dict(size=MiB, measure=m, rep=i, ms=0.1, GBps=10.0 + i) for i in range(3)
                       for m in ("memcpy one core, source cached", "memcpy one core, cache flushed")])
    res.add("staging", pcie.summarise_staging(st))
    op = page.opening(res)
    assert [f.key for f in op.findings] == ["no_cuda", "host_memcpy", "cpu_jitter"]
    assert "measured **no PCIe**" in op.findings[0].text and all(f.value for f in op.findings[1:])
    assert "NVIDIA GPU" in op.actions[0].text


WORDED = (page.pageable_drop_note, page.staging_details, page.two_clocks, page.cpu_overlap_note,
         page.overlap_rule, page.overlap_caveat, page.copy_kernel_note, page.pin_cost_note, page.bidirectional_text,
         page.stale_text, page.versus_published, page.warnings_text, page.key_metrics, page.has_staging,
         page.has_overlap_spread)


def test_the_page_words_the_stored_facts_and_reads_no_table():
    """The notes read the facts as stored in a result file (plain JSON), not the tables: the same words from
    the stored facts as from the result, and a decision changed in the stored facts changes the words."""
    res = gpu_result()
    stored = Facts.from_dict(json.loads(json.dumps(analysis.analyse(res).to_dict(), allow_nan=False)))
    for note in WORDED:
        assert note(stored) == note(res), note.__name__
    stale = stored.data["stale_read"]["stale"]
    assert ("Nothing crashed" in page.stale_text(res)) == stale
    stored.data["stale_read"]["stale"] = not stale
    assert ("Nothing crashed" in page.stale_text(stored)) != stale
    agree = stored.data["clocks"]["pageable_agree"]
    stored.data["clocks"]["pageable_agree"] = not agree
    assert ("outside the CUDA events" in page.two_clocks(stored)) == agree


def test_a_hidden_share_above_100_percent_is_explained_by_its_rows_jitter_or_flagged():
    """A copy cannot hide more than all of itself: where the overlap share's p90 passes 100%, the finding says how much
    sooner the pair ended than the shorter part allows and sets it against that row's CPU jitter: within 3× it is
    timing noise, beyond it a measurement problem. At or under 100% nothing is added."""
    ref = results.load_reference("06_pcie", "h200")
    o = ref.table("overlap").copy()
    row = (o["memory"] == "pinned") & (o["mode"] == "non_blocking") & (o["size"] == 256 << 20)
    shorter = float(np.minimum(o.loc[row, "copy_ms"], o.loc[row, "cpu_ms"]).iloc[0])

    def text(p90, jitter_ms):
        t = o.copy()
        t.loc[row, "overlap_p90"], t.loc[row, "jitter_ms"] = p90, jitter_ms
        res = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, "overlap": t},
                             ref.metadata)
        return page.finding_cpu_overlap(analysis.analyse(res)).text

    early = 0.05 * shorter                                   # p90 of 105%: the pair ended 5% of the shorter early
    assert "timing noise" in text(1.05, early) and "measurement problem" not in text(1.05, early)
    assert "flagged as a measurement problem" in text(1.05, early / 10)
    assert "Above 100%" not in text(0.99, early)
