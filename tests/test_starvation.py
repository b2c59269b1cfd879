"""Chapter 4: the model, the work kinds, the step and its calibration, the experiments, the
bad-input checks, and findings that follow the data (each claim reversed once)."""
import re
import time

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import has_nan

from datajourney.book import harness
from datajourney.chapters.c04_cpu_starvation import analysis, model, page
from datajourney.chapters.c04_cpu_starvation import charts as c04_charts
from datajourney.chapters.c04_cpu_starvation import experiment as starvation
from datajourney.core.params import ParameterError
from datajourney.core.results import Result
from datajourney.core.timing import NvmlSampler, clock_reason_names, run_sustained, steady_state
from datajourney.toolkit import textdata

P = dict(d_ms=5.0, batch_size=32, g_ms=50.0, workers=[0, 4], published_workers=[0, 4], steps=4, warmup_steps=1,
         work_kinds=["sleep"], real_work_scale=0, boundary_workers=2, steps_per_epoch=3, prefetch_factors=[2],
         boundary_runs=1, prefetch_workers=2, prefetch_runs=1, calibration_s=0.1, idle_gaps_ms=[0, 10],
         idle_repeats=1, idle_conditioning_steps=1, seed=0, dataset_path=None, tokenizer_dir=None,
         is_reference_run=False, reference_host=None)


def cpu_step(g_ms=1.0):
    return starvation.Step(g_ms, device="cpu", calibration_s=0.05)


# ---------------------------------------------------------------- the model
def test_model_matches_published_case():
    assert model.predicted_wait_ms(5, 32, 0, 50) == 160
    assert model.predicted_wait_ms(5, 32, 4, 50) == 0
    assert model.predicted_wait_ms(5, 32, 2, 50) == 30
    assert model.predicted_au(5, 32, 0, 50) == pytest.approx(50 / 210)
    # AU >= 0.9 needs W >= 0.9 * D*B / G
    assert model.workers_needed(5, 32, 50) == 3
    assert model.predicted_au(5, 32, 3, 50) >= 0.9 > model.predicted_au(5, 32, 2, 50)


# ---------------------------------------------------------------- parameters
@pytest.mark.parametrize("name,value", [
    ("d_ms", -1), ("d_ms", True), ("batch_size", 0), ("workers", [-1]), ("workers", [100_000]), ("workers", 0),
    ("workers", []), ("workers", "all"), ("g_ms", 0), ("steps", 0), ("work_kinds", ["gpu"]),
    ("prefetch_factors", [0]), ("boundary_workers", 0), ("boundary_runs", 0), ("prefetch_workers", 0),
    ("prefetch_runs", 0), ("calibration_s", 0), ("idle_gaps_ms", [-10]), ("idle_gaps_ms", 10), ("idle_repeats", 0),
    ("idle_conditioning_steps", 0), ("seed", -1), ("is_reference_run", "yes"), ("dataset_path", "/nonexistent/x"),
    ("real_work_scale", -1), ("warmup_steps", -1), ("published_workers", [])])
def test_bad_parameters_are_named(name, value):
    with pytest.raises(ParameterError, match=repr(name)):
        starvation.check_parameters({**P, name: value})


def test_workers_auto_is_the_default_list_and_zero_is_refused():
    assert starvation.check_parameters({**P, "workers": "auto"}).workers == starvation.default_workers()
    assert starvation.check_parameters({**P, "workers": [0]}).workers == [0]
    with pytest.raises(ParameterError, match="'workers'"):
        starvation.check_parameters({**P, "workers": 0})  # a scalar 0 never silently means the default list


def test_decode_scale_is_bounded_and_real_work_needs_a_cost():
    with pytest.raises(ParameterError, match="'real_work_scale'"):
        starvation.check_parameters({**P, "work_kinds": ["decode"], "real_work_scale": 1000})
    assert starvation.check_parameters({**P, "work_kinds": ["tokenize"], "real_work_scale": 1000})
    with pytest.raises(ParameterError, match="'d_ms'"):
        starvation.check_parameters({**P, "work_kinds": ["tokenize"], "d_ms": 0})
    assert starvation.check_parameters({**P, "d_ms": 0}).d_ms == 0  # sleep work may cost nothing


def test_tokenize_needs_the_tokenizers_package(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "tokenizers" else real(n, *a))
    with pytest.raises(ParameterError, match="'work_kinds'.*tokenizers"):
        starvation.preflight({**P, "work_kinds": ["sleep", "tokenize"]})


def test_default_workers_stop_at_the_cores():
    assert starvation.default_workers(16) == [0, 1, 2, 4, 8, 16]
    assert starvation.default_workers(2) == [0, 1, 2]


# ---------------------------------------------------------------- the step and its calibration
class DrittingDevice:
    """A fake accelerator on a virtual clock: a unit of work costs ``fast`` ms until the device
    has been busy for ``heat_ms`` without a rest, then ``slow`` ms (a power cap); a rest of at
    least ``cool_ms`` restores the fast clock."""

    def __init__(self, fast=1.0, slow=1.2, heat_ms=200.0, cool_ms=50.0):
        self.fast, self.slow, self.heat_ms, self.cool_ms = fast, slow, heat_ms, cool_ms
        self.busy = 0.0

    def units(self, n):
        ms = 0.0
        for _ in range(n):
            c = self.fast if self.busy < self.heat_ms else self.slow
            ms += c
            self.busy += c
        return ms

    def sleep(self, s):
        if 1e3 * s >= self.cool_ms:
            self.busy = 0.0


def test_calibration_uses_the_steady_state_not_the_burst():
    dev = DrittingDevice()
    step = starvation.Step(50.0, units=dev.units, sleep=dev.sleep, calibration_s=1.0, idle_s=0.1)
    assert step.calibration["burst_unit_ms"] == pytest.approx(1.0)     # a burst sees the fast clock
    assert step.iters == round(50 / 1.2)                               # sized for the capped clock
    assert step.steady_ms == pytest.approx(step.iters * 1.2)
    assert step.calibration["first_ms"] < step.steady_ms               # the trace starts rested
    t = step.calibration_table()
    assert set(t["phase"]) == {"sizing", "drift"} and (t["step_ms"] > 0).all()


def test_calibration_of_a_step_that_does_not_drift():
    dev = DrittingDevice(fast=1.0, slow=1.0)
    step = starvation.Step(50.0, units=dev.units, sleep=dev.sleep, calibration_s=1.0, idle_s=0.1)
    assert step.iters == 50 and step.steady_ms == pytest.approx(50.0)
    assert step.calibration["drift"] == pytest.approx(0.0) and step.calibration["settled"]


def test_steady_state_calibration_on_cpu():
    step = starvation.Step(20.0, device="cpu", calibration_s=0.3)
    assert "simulated" in step.kind and not step.cuda
    assert 19.0 <= step.steady_ms <= 26.0         # a sleep of about 20 ms, measured back-to-back
    assert step(torch.zeros(4)) >= 19.0


def test_run_sustained_and_steady_state():
    calls = iter([10.0, 11.0, 12.0] + [15.0] * 20)
    rows = run_sustained(lambda: next(calls), 100.0)
    assert sum(r["ms"] for r in rows) >= 100.0 and all(r["t1"] >= r["t0"] for r in rows)
    st = steady_state([r["ms"] for r in rows])
    assert st["steady_ms"] == 15.0 and st["first_ms"] == 10.0 and st["drift"] == pytest.approx(0.5)
    assert st["settled"] and not steady_state([1, 1, 1, 1, 1, 1, 2, 3])["settled"]


def test_idle_gap_experiment_interleaves_the_gaps():
    dev = DrittingDevice(heat_ms=30.0, cool_ms=25.0)
    step = starvation.Step(10.0, units=dev.units, sleep=dev.sleep, calibration_s=0.2, idle_s=0.1)
    df = starvation.idle_gap_experiment(step, [0, 10, 30, 100], repeats=3, conditioning=4, sleep=dev.sleep)
    assert len(df) == 12 and sorted(df["gap_ms"].unique()) == [0, 10, 30, 100]
    assert df.groupby("gap_ms").size().eq(3).all()
    assert list(df["gap_ms"]) != sorted(df["gap_ms"])                 # seeded shuffle, not gap by gap
    means = df.groupby("gap_ms")["step_ms"].mean()
    assert means[30] < means[0] and means[100] < means[0]             # rested long enough: fast clock


# ---------------------------------------------------------------- NVML bookkeeping
def test_nvml_sampler_windows_with_a_fake_reader():
    clock = iter(range(10**6))
    sampler = NvmlSampler(interval_ms=1.0, reader=lambda: dict(sm_clock_mhz=1980.0 - next(clock), power_w=500.0,
                                                             reasons=0x4, gpu_util_pct=100, temperature_c=60))
    with sampler:
        time.sleep(0.05)
    assert sampler.available and len(sampler.samples) >= 3
    t0, t1 = sampler.samples[0]["t"], sampler.samples[-1]["t"]
    w = sampler.window(t0, t1)
    assert w["nvml_samples"] == len(sampler.samples) and w["power_capped"] and w["clock_reasons"] == 4
    assert sampler.window(t1 + 1, t1 + 2) == {"nvml_samples": 0}
    df = sampler.annotate(pd.DataFrame({"t0": [t0], "t1": [t1]}))
    assert df["sm_clock_mhz"].iloc[0] < 1980.0
    assert clock_reason_names(0x4 | 0x1) == "gpu_idle,sw_power_cap"


def test_no_nvml_is_said_not_faked():
    sampler = NvmlSampler()
    if sampler.available:
        pytest.skip("NVML is available here")
    assert sampler.why and sampler.window(0, 1e9) == {"nvml_samples": 0}
    df = pd.DataFrame({"t0": [0.0], "t1": [1.0]})
    assert sampler.annotate(df).equals(df)


# ---------------------------------------------------------------- the loader experiments
def test_main_process_loading_waits_at_least_d_times_b():
    ds = starvation.WorkDataset(40, "sleep", cost_ms=2.0)
    df = starvation.train_steps(starvation.make_loader(ds, batch_size=4, workers=0), cpu_step(), steps=12)
    assert len(df) == 12 and df["epoch"].max() == 1  # 10 batches per epoch, so a second epoch started
    assert (df["wait_ms"] >= 8.0).all()  # four sleeps of 2 ms happen before each batch
    s = starvation.summarise_steps(df, warmup=1, g_cal_ms=1.0)
    assert 0 < s["au"] < 1 and s["idle_share"] == pytest.approx(1 - s["compute_share"])
    # the summary's wait is the mean of the steps after the warm-up one, and its p10 and p90 bracket their median: a
    # mean need not sit between them (one slow step among 11 on a busy host lifts it past their p90). Fails if the
    # summary counts the warm-up step or takes its percentiles from other rows.
    steady = df[df["step"] >= 1]["wait_ms"]
    assert s["steps"] == len(steady) == 11 and s["wait_ms"] == pytest.approx(steady.mean())
    assert steady.min() <= s["wait_p10_ms"] <= steady.median() <= s["wait_p90_ms"] <= steady.max()


def test_variable_cost_has_the_same_mean():
    ds = starvation.WorkDataset(4000, "sleep", cost_ms=2.0, variable=True, seed=3)
    assert ds.costs.mean() == pytest.approx(2.0, rel=0.1) and ds.costs.std() == pytest.approx(2.0, rel=0.15)
    assert np.array_equal(ds.costs, starvation.WorkDataset(4000, "sleep", cost_ms=2.0, variable=True, seed=3).costs)


def test_epoch_boundary_pays_start_up_only_without_persistent_workers():
    """Without persistent workers the first step of epoch 2 waits at least the workers' start-up
    plus one worker's D·B; with them, about D·B."""
    d, b = 20.0, 4
    db = d * b
    df = starvation.epoch_boundary(lambda n: starvation.WorkDataset(n, "sleep", cost_ms=d), batch_size=b, workers=2,
                                   steps_per_epoch=3, step=cpu_step(), runs=2)
    assert len(df) == 2 * 2 * 6 and set(df["epoch"]) == {0, 1} and df["startup_ms"].gt(0).all()
    first2 = df[(df["epoch"] == 1) & (df["step_in_epoch"] == 0)]
    non = first2[~first2["persistent_workers"]]["wait_ms"]
    per = first2[first2["persistent_workers"]]["wait_ms"]
    startup = min(starvation.startup_ms(workers=2, batch_size=b) for _ in range(3))
    assert (non >= db + 0.8 * startup).all(), (non.tolist(), startup)
    assert (per >= db).all() and (per <= db + 0.5 * startup + 25).all(), (per.tolist(), startup)
    assert non.mean() > per.mean()


def test_prefetch_experiment_is_balanced():
    step = cpu_step(2.0)
    steps, summ = starvation.prefetch_experiment(batch_size=4, workers=2, prefetch_factors=[1, 2], runs=1, steps=3,
                                                 warmup=1, step=step)
    assert len(summ) == 2 * 2 and set(summ["cost"]) == set(starvation.COST_PROFILES)
    # D·B/W just under G
    assert summ["d_ms"].iloc[0] * 4 / 2 == pytest.approx(starvation.PREFETCH_LOAD * step.steady_ms)
    assert (summ["predicted_wait_ms"] == 0).all() and len(steps) == 4 * 4


@pytest.mark.skipif(textdata.offline_dir() is None, reason="no local copy of the text data (data/text/)")
def test_real_work_kinds():
    texts, tok, _ = textdata.texts_and_source(16)
    for kind in ("tokenize", "decode"):
        ds = starvation.WorkDataset(8, kind, scale=2, texts=texts, tokenizer=tok, n_images=2)
        assert ds[3].shape == (64,) and ds[3].dtype == torch.int64
        assert starvation.measure_cost_ms(ds, samples=4) > 0
    scale = starvation.calibrate_scale(lambda s: starvation.WorkDataset(8, "decode", scale=s, n_images=1), "decode",
                                       1.0, 4, max_scale=64)
    assert 1 <= scale <= 64


# ---------------------------------------------------------------- the what-if chart
def test_whatif_figure_has_sliders_and_script():
    fig = page.whatif_figure(5, 32, 50, max_workers=8)
    assert [s.name for s in fig.layout.sliders] == ["D", "B", "G"]
    assert "plotly_sliderchange" in fig.layout.meta["post_script"]
    assert list(fig.data[0].y[:2]) == [160, 110]
    label = [a for a in fig.layout.annotations if "keeping up" in a.text][0]
    assert label.yref == "y2" and label.y == 100 * starvation.AU_THRESHOLD  # anchored to the AU axis
    assert list(fig.layout.yaxis2.tickvals) == [0, 20, 40, 60, 80, 100]
    ys = [s.y for s in fig.layout.sliders]
    assert all(a - b >= 0.3 for a, b in zip(ys, ys[1:]))                   # room for each slider's title


def test_whatif_is_static_outside_a_person_s_frontend():
    fig = page.whatif(5, 32, 50, max_workers=8)          # no kernel here: the static figure
    assert fig.layout.sliders
    widgets = pytest.importorskip("ipywidgets")
    box = page.whatif(5, 32, 50, max_workers=8, live=True)
    assert isinstance(box, widgets.VBox)
    d = box.children[0].children[0]
    d.value = 50                                                # moving a slider redraws the chart
    assert d.value == 50


# ---------------------------------------------------------------- findings follow the data
def _result(*, w0_wait=165.0, w4_wait=1.0, w4_step=51.0, g=50.0, sweep_waits=None, after_gap=43.0, before=50.0,
            clocks=None, capped=0.9, pf_variable=(30.0, 10.0), pf_constant=(2.0, 2.0), non=(210.0, 212.0),
            per=(170.0, 171.0), nvml=True, cuda=True) -> Result:
    def row(exp, work, w, wait, step_ms, d=5.0):
        wall = step_ms
        au = g / wall
        return dict(experiment=exp, work=work, workers=w, d_ms=d, batch_size=32, g_ms=50.0, g_cal_ms=g,
                    first_batch_ms=200.0 + 10 * w, wait_ms=wait, wait_std_ms=1.0, compute_ms=step_ms - wait,
                    step_ms=step_ms, au=au, compute_share=(step_ms - wait) / wall, idle_share=wait / wall, steps=30,
                    predicted_wait_ms=model.predicted_wait_ms(d, 32, w, g),
                    predicted_au=model.predicted_au(d, 32, w, g), keeps_up=au >= 0.9)

    rows = [row("published case", "sleep", 0, w0_wait, w0_wait + 50),
            row("published case", "sleep", 4, w4_wait, w4_step)]
    for kind, waits in (sweep_waits or {"sleep": {0: 160, 2: 30, 4: 1}, "tokenize": {0: 150, 2: 40, 4: 2}}).items():
        rows += [row("worker sweep", kind, w, x, x + 50) for w, x in waits.items()]
    idle = pd.DataFrame([dict(gap_ms=gap, repeat=r, step_ms=(before if gap == 0 else after_gap) + 0.1 * r,
                              sm_clock_mhz=(clocks or (1750, 1980))[gap > 0], power_w=(700, 450)[gap > 0],
                              power_capped=(gap == 0 and capped > 0.5), clock_reasons=4 if gap == 0 else 0)
                         for gap in (0, 170) for r in range(3)])
    if not nvml:
        idle = idle.drop(columns=["sm_clock_mhz", "power_w", "power_capped", "clock_reasons"])
    cal = pd.DataFrame([dict(phase="drift", call=i, step_ms=after_gap if i == 0 else before, t_start_s=i * 0.05)
                        for i in range(40)])
    pf = pd.DataFrame([dict(run=r, cost=c, prefetch_factor=k, workers=4, d_ms=6.25, wait_ms=v[i] + 0.1 * r)
                       for r in range(3) for c, v in (("constant", pf_constant), ("variable", pf_variable))
                       for i, k in ((0, 1), (0, 2), (1, 4))])   # 2, the DataLoader's default, waits as 1 does
    eb = pd.DataFrame([dict(run=r, persistent_workers=p, prefetch_factor=2, step=s, epoch=s // 10,
                            step_in_epoch=s % 10, wait_ms=((per if p else non)[r % 2] if s == 10 else 1.0),
                            startup_ms=45.0)
                       for r in range(2) for p in (False, True) for s in range(20)])
    meta = dict(cuda=cuda, step_kind="GPU matmul (CUDA events)", step_steady_ms=g, step_first_ms=after_gap,
                step_settled=True, nvml=dict(available=nvml, why=None if nvml else "nvidia-ml-py is not installed"),
                cores=16)
    return Result(chapter="04_cpu_starvation", run_id="constructed", parameters=dict(P, boundary_workers=4),
                  fingerprint={}, tables=dict(summary=pd.DataFrame(rows), idle_gaps=idle, calibration=cal,
                                              prefetch=pf, epoch_boundary=eb, steps=pd.DataFrame()), metadata=meta)


def _texts(res):
    return {f.key: f.text for f in page.findings(analysis.analyse(res))}


def _drift(res):
    """The step-drift finding with the clocks behind it (shown in the note beside the charts)."""
    f = analysis.analyse(res)
    return f"{page.finding_drift_facts(f).text} {page.drift_clocks(f)}"


def test_findings_of_a_constructed_run_say_what_it_shows():
    f = page.findings(analysis.analyse(_result()))
    assert 3 <= len(f) <= 6 and len({x.key for x in f}) == len(f)
    t = {x.key: x.text for x in f}
    assert "165 ms" in t["published_w0"] and "1.03× slower than D·B in the model" in t["published_w0"]
    assert "keeps up" in t["published_w4"] and "`D·B/W`, the CPU cost of a batch" in t["published_w4"]
    assert "accelerator utilisation (AU:" in t["published_w4"]
    assert "higher clocks" in _drift(_result()) and "power cap" in _drift(_result())
    assert "faster than a step with no idle gap before it" in t["step_drift"] and "MHz" not in t["step_drift"]
    assert "from **W = 4**" in t["workers_to_keep_up"] and "synthetic" in t["workers_to_keep_up"]
    assert "variable per-sample cost, a prefetch factor of 4 was 3" in t["prefetch_balanced"]
    assert "constant per-sample cost, a prefetch factor of 4 was level with" in t["prefetch_balanced"]
    assert "faster than the first step of epoch 2 without persistent workers" in t["epoch_boundary"]
    by_key = {x.key: x for x in f}
    assert by_key["published_w0"].published == "data wait per step, W=0"
    assert by_key["published_w4"].published == "data wait per step, W=4"


def test_reversed_workers_that_do_not_keep_up():
    res = _result(w4_wait=40.0, w4_step=91.0, sweep_waits={"tokenize": {0: 150, 2: 60, 4: 30}})
    t = _texts(res)
    assert "falls short" in t["published_w4"]
    assert "never" in t["workers_to_keep_up"] and "from **W" not in t["workers_to_keep_up"]


def test_reversed_w0_below_the_model():
    assert "faster than D·B in the model" in _texts(_result(w0_wait=120.0))["published_w0"]
    assert "slower than D·B in the model" in _texts(_result(w0_wait=175.0))["published_w0"]


def test_reversed_a_step_that_does_not_drift():
    t = _texts(_result(after_gap=50.0, clocks=(1980, 1980)))["step_drift"]
    assert "level with a step with no idle gap before it" in t and "higher clocks" not in t and "power cap" not in t


def test_reversed_a_step_slower_after_idle_and_clocks_that_do_not_explain_it():
    t = _drift(_result(after_gap=55.0, clocks=(1980, 1980)))
    assert "slower than a step with no idle gap before it" in t and "not the explanation" in t
    assert "higher clocks" not in t


def test_reversed_faster_after_idle_without_nvml():
    t = _drift(_result(nvml=False))
    assert "faster than a step with no idle gap before it" in t and "not logged" in t and "MHz" not in t


def test_reversed_prefetch_that_helps_and_one_that_does_not():
    t = _texts(_result(pf_variable=(10.0, 10.0)))["prefetch_balanced"]
    assert "faster" not in t and t.count("level with") == 2
    f = analysis.analyse(_result(pf_constant=(10.0, 3.0), pf_variable=(10.0, 3.0)))
    assert _texts(_result(pf_constant=(10.0, 3.0), pf_variable=(10.0, 3.0)))["prefetch_balanced"].count(
        "shorter in every run") == 2
    assert f.advice_for("synthetic.prefetch_factor").value == 4
    assert "slower than" in _texts(_result(pf_variable=(3.0, 10.0)))["prefetch_balanced"]
    kept = analysis.analyse(_result(pf_variable=(3.0, 10.0))).advice_for("synthetic.prefetch_factor")
    assert kept.verdict == "keep" and kept.value == 2   # deeper waited longer: keep the DataLoader's default


def test_prefetch_runs_that_disagree_make_no_claim():
    res = _result()
    pf = res.tables["prefetch"]
    pf.loc[(pf["cost"] == "variable") & (pf["run"] == 1) & (pf["prefetch_factor"] == 4), "wait_ms"] = 40.0
    f = analysis.analyse(res)
    assert "every_run" not in f["prefetch_balanced.variable"].setting   # the ranges overlap: level, no run claim
    assert f.advice_for("synthetic.prefetch_factor").verdict == "keep"  # the runs' spread is over the gain
    t = _texts(res)["prefetch_balanced"]
    assert "variable per-sample cost, a prefetch factor of 4 was level with" in t and "every run" not in t


def test_prefetch_shorter_in_each_pair_but_overlapping_ranges_is_level_without_a_run_claim():
    """Each run's deeper prefetch waited over 10% less than the same run's shallower one, but the two ranges
    overlap (run 0: 11.0 -> 9.8 ms, run 1: 7.7 -> 1.0 ms): the comparison is level, and nothing may say
    "in every run" beside it. Moving the deep runs below every shallow run makes it a direction again."""
    def with_variable(deep):
        res = _result()
        pf = res.tables["prefetch"]
        v = (pf["cost"] == "variable") & (pf["run"] < 2)
        res.tables["prefetch"] = pf = pf[(pf["run"] < 2)].copy()
        pf.loc[v & (pf["prefetch_factor"] == 1), "wait_ms"] = [11.0, 7.7]
        pf.loc[v & (pf["prefetch_factor"] == 4), "wait_ms"] = deep
        return res

    res = with_variable([9.8, 1.0])
    assert analysis.prefetch_effect(res.tables["prefetch"], "variable")["direction"] == 1   # paired: shorter
    t = _texts(res)["prefetch_balanced"]
    assert "a prefetch factor of 4 was level with a prefetch factor of 1" in t
    assert "shorter in every run" not in t and "every run" not in t.split("variable per-sample cost")[1]
    t = _texts(with_variable([5.0, 1.0]))["prefetch_balanced"]      # every deep run below every shallow one
    assert "variable per-sample cost, a prefetch factor of 4 was" in t and "faster than" in t.split("variable")[1]
    assert "(shorter in every run)" in t.split("variable per-sample cost")[1]


def test_reversed_persistent_workers_that_do_not_help():
    res = _result(non=(170.0, 172.0), per=(171.0, 170.5))
    assert "level with the first step of epoch 2 without" in _texts(res)["epoch_boundary"]
    assert analysis.analyse(res).advice_for("synthetic.persistent_workers").value is False


def test_takeaways_follow_the_data():
    assert "`persistent_workers=True`" in page.takeaways(analysis.analyse(_result()))
    t = page.takeaways(analysis.analyse(_result(non=(170.0, 172.0), per=(171.0, 170.5), pf_variable=(10.0, 10.0),
                                                pf_constant=(5.0, 5.0), after_gap=50.0, clocks=(1980, 1980))))
    assert "keep the default `persistent_workers=False`" in t and "keep the default `prefetch_factor=2`" in t
    assert "set `prefetch_factor" not in t
    assert "level with a step with no idle gap before it" in t


def test_findings_of_an_older_result_without_the_new_tables():
    res = _result()
    for name in ("idle_gaps", "calibration", "prefetch"):
        del res.tables[name]
    keys = [f.key for f in page.findings(analysis.analyse(res))]
    assert keys == ["published_w0", "published_w4", "workers_to_keep_up", "epoch_boundary"]


def test_findings_of_a_short_cpu_run(tmp_path):
    """The whole chapter on CPU with tiny settings: every computed sentence is built from its result."""
    kw = {k: v for k, v in P.items() if k not in ("is_reference_run", "reference_host")}
    res = harness.run("04_cpu_starvation",
                      **{**kw, "workers": [0, 2], "steps": 3, "prefetch_factors": [1, 2]}, run_dir=tmp_path,
                         progress=False)
    assert (tmp_path / f"{'04_cpu_starvation'}.json").exists()
    assert {"calibration", "idle_gaps", "summary", "steps", "prefetch", "epoch_boundary"} <= set(res.tables)
    assert res.facts is not None and "workers_to_keep_up" in res.facts
    items = page.findings(res.facts)
    assert 3 <= len(items) <= 6
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text
    assert "None" not in page.takeaways(res.facts)
    assert res.metadata["nvml"]["available"] in (True, False)
    texts = {fn.__name__: fn(res.facts) for fn in (
        page.model_gap_notes, page.gap_cause_note, page.step_sentence, page.published_case_sentences,
        page.first_batch_note, page.model_walkthrough, page.sizing_sentence, page.cores_sentence,
        page.au_drift_sentence, page.prefetch_sentence, page.nvml_util_sentence, page.drift_details)}
    assert "simulation" in texts["step_sentence"] or "matrix products" in texts["step_sentence"]
    for name, text in texts.items():
        assert text is None or (not has_nan(text) and "None" not in text and "—" not in text), name


def test_a_simulated_step_makes_no_claim_about_idle_gaps():
    t = _texts(_result(cuda=False, nvml=False))["step_drift"]
    assert "simulated sleep" in t and "less than" not in t and "higher clocks" not in t


def test_higher_clocks_without_a_power_cap_make_no_power_claim():
    res = _result(capped=0.0)
    res.tables["idle_gaps"]["power_w"] = 300.0
    res.metadata["nvml"]["power_limit_w"] = 700.0
    t = _drift(res)
    assert "higher clocks" in t and "power-capped" not in t and "did not report a power cap" in t


def test_whatif_is_live_in_a_person_s_kernel_and_static_under_the_book_s_executor():
    """JupyterLab asks the kernel to run cells with stdin allowed, papermill/nbclient never does:
    the first gets widgets that recompute in the kernel, the second the static figure."""
    pytest.importorskip("ipywidgets")
    manager = pytest.importorskip("jupyter_client.manager")
    km, kc = manager.start_new_kernel(kernel_name="python3")
    try:
        seen = {}
        for allow in (True, False):
            msg_id = kc.execute("from datajourney.chapters.c04_cpu_starvation import page\npage.whatif(5.0, 32, 50.0)",
                                allow_stdin=allow)
            kinds = set()
            while True:
                m = kc.get_iopub_msg(timeout=60)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                if m["msg_type"] in ("execute_result", "display_data"):
                    kinds |= set(m["content"]["data"])
                assert m["msg_type"] != "error", m["content"]
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
            seen[allow] = kinds
        assert "application/vnd.jupyter.widget-view+json" in seen[True]
        assert "application/vnd.jupyter.widget-view+json" not in seen[False]
        assert "application/vnd.plotly.v1+json" in seen[False]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


# ---------------------------------------------------------------- review round 2: text that follows the data
def _flag_everywhere(res, *, base_power=716.0, limit=700.0):
    """NVML's power-cap flag set in every sample, idle or not (as on the H200 reference board)."""
    idle = res.tables["idle_gaps"]
    idle["power_capped_share"] = 1.0
    idle["power_capped"] = True
    idle.loc[idle["gap_ms"] == 0, "power_w"] = base_power
    idle.loc[idle["gap_ms"] > 0, "power_w"] = 126.0
    res.metadata["nvml"]["power_limit_w"] = limit
    return res


def test_a_power_cap_flag_set_everywhere_is_not_cited_as_evidence():
    t = _drift(_flag_everywhere(_result()))
    assert "power cap" not in t and "against its 700 W limit" in t and "power limit" in t
    d = page.drift_details(_flag_everywhere(_result()))
    assert "does not tell" in d and "100%" in d
    # the flag that tells the states apart is cited (the constructed default: set back-to-back only)
    t = _drift(_result())
    assert "software power cap in 100% of the back-to-back" in t and "0% after the gap" in t


def test_below_the_limit_with_the_flag_everywhere_makes_no_power_claim():
    t = _drift(_flag_everywhere(_result(), base_power=400.0))
    assert "below the board's 700 W limit" in t and "does not tell the two apart" in t
    assert "power-capped" not in t and "power limit" not in t


def test_drift_details_add_to_the_key_result_instead_of_repeating_it():
    res = _result()
    key = _texts(res)["step_drift"]
    d = page.drift_details(res)
    assert "**In detail.**" in d and "The step's own time" not in d and "MHz" not in key
    assert "170 ms gap" in d and "0 ms gap" in d and d not in key
    for after, words in ((43.0, "mean step shortened"), (56.0, "mean step lengthened")):
        res = _result(after_gap=after)
        idle = res.tables["idle_gaps"]
        mid = idle[idle["gap_ms"] == 170].assign(gap_ms=30, step_ms=lambda x: (x["step_ms"] + 50.0) / 2)
        res.tables["idle_gaps"] = pd.concat([idle, mid], ignore_index=True)
        assert words in page.drift_details(res)
    assert page.drift_details(_result(cuda=False, nvml=False)) is None


def test_clocks_that_move_against_the_step_are_not_its_explanation():
    """Faster after an idle gap with the clock higher there: the clocks explain it. Swap the clocks (higher
    back-to-back) and the same step times read as not explained by them, the clock worded lower after the gap."""
    f = analysis.analyse(_result())
    assert f["clocks_explain"].value == "higher clocks" and f["clocks_explain"].setting == {"step": -1, "clock": 1}
    assert "ran at higher clocks" in page.drift_clocks(f)
    f = analysis.analyse(_result(clocks=(1980, 1750)))
    assert f["clocks_explain"].value == "no" and f["clocks_explain"].setting["clock"] == -1
    t = page.drift_clocks(f)
    assert "(lower after the gap)" in t and "not the explanation" in t and "higher clocks" not in t


def test_key_metrics_are_the_published_case_from_a_result_or_its_facts():
    res = _result()
    km = page.key_metrics(res)
    assert km == page.key_metrics(analysis.analyse(res))
    assert km["data wait per step, W=0"] == (165.0, 1.0) and km["GPU idle share, W=4"][0] == pytest.approx(100 / 51)


def test_nvml_utilisation_against_au_names_the_largest_difference():
    res = _result()
    sw = res.tables["summary"]
    sw["gpu_util_pct"] = 100 * sw["au"]
    at = (sw["experiment"] == "worker sweep") & (sw["work"] == "tokenize") & (sw["workers"] == 2)
    sw.loc[at, "gpu_util_pct"] = 20
    t = page.nvml_util_sentence(analysis.analyse(res))
    assert "largest difference was at tokenize W=2: 20% vs AU 55.6%" in t
    sw["gpu_util_pct"] = None
    assert page.nvml_util_sentence(analysis.analyse(res)) is None


def test_power_is_below_the_limit_only_where_no_step_drew_it():
    """The clock note may call the power "below the board's limit" only where no single step reached it: one
    back-to-back step above the limit turns it into "exceeded", one at the limit into "reached"."""
    res = _result(capped=0.0)
    res.metadata["nvml"]["power_limit_w"] = 800.0
    note = _drift(res)
    assert "every step below the board's 800 W limit (at most 700 W)" in note and "exceeded" not in note
    assert analysis.analyse(res)["power_vs_limit"].value == "below"
    for watts, state in ((816.0, "exceeded"), (800.2, "reached")):
        idle = res.tables["idle_gaps"]
        idle["power_w"] = idle["power_w"].astype(float)
        idle.loc[idle.index[0], "power_w"] = watts      # one back-to-back step; their mean stays under 95%
        note = _drift(res)
        assert f"single steps {state} the board's 800 W limit, up to {watts:,.0f} W back-to-back" in note
        assert "below the board" not in note
        assert analysis.analyse(res)["power_vs_limit"].value == state


def test_prefetch_lower_in_every_run_but_within_tolerance_makes_no_claim():
    res = _result(pf_constant=(10.0, 9.5))     # 5% lower in every run: within the 10% tolerance, ranges apart
    assert analysis.analyse(res)["prefetch_balanced.constant"].setting["every_run"] == 0
    assert "(shorter in every run, not every run by more than a tenth)" in _texts(res)["prefetch_balanced"]
    res = _result(pf_constant=(1.30, 1.25))    # 4% lower in every run, but the ranges overlap: level, no run claim
    assert "every_run" not in analysis.analyse(res)["prefetch_balanced.constant"].setting
    assert "every run" not in _texts(res)["prefetch_balanced"].split("variable per-sample cost")[0]


def test_prefetch_note_keeps_the_spread_of_the_runs():
    res = _result()
    pf = res.tables["prefetch"]
    v = pf["cost"] == "variable"
    pf.loc[v & (pf["prefetch_factor"] == 4), "wait_ms"] = [9.0, 1.0, 5.0]     # every run shorter, by 1.1-30x
    pf.loc[v & (pf["prefetch_factor"] == 1), "wait_ms"] = [10.0, 30.0, 11.0]
    t = _texts(res)["prefetch_balanced"]
    assert "spread widely" not in t   # the spread is the note's to tell
    s = page.prefetch_sentence(res)
    assert "coefficient of variation" in s and s not in t and "1–9 ms" in s
    wide = [k for k in analysis.analyse(res).facts if k.startswith("prefetch_cv.")]
    assert len(wide) > 1 and "The runs at prefetch_factor " in s and " and of " not in s, s   # the others, by cost


def test_prefetch_ranges_never_repeat_an_end():
    import re
    for res in (_result(), _result(pf_variable=(10.0, 10.0)), _result(pf_constant=(1.30, 1.25))):
        for text in (_texts(res)["prefetch_balanced"], page.prefetch_sentence(res)):
            for a, b in re.findall(r"(\d[\d.,]*)–(\d[\d.,]*)", text):
                assert a != b, text


def _with_steps(res, back_to_back_ms, after_wait_ms):
    st = pd.DataFrame([dict(step=i, wait_ms=1.0 if i % 2 else 50.0,
                            compute_ms=back_to_back_ms if i % 2 else after_wait_ms) for i in range(1, 21)])
    res.tables["steps"] = st
    return res


def test_au_against_compute_share_follows_the_step_length():
    res = _with_steps(_result(), 50.0, 42.0)
    sw = res.tables["summary"]
    w = sw["experiment"] == "worker sweep"
    sw.loc[w, "compute_ms"] = 42.0                                      # steps shorter than G = 50 ms
    sw.loc[w, "compute_share"] = 42.0 / sw.loc[w, "step_ms"]
    t = page.au_drift_sentence(analysis.analyse(res))
    assert "AU comes out above" in t and "points above the measured compute share" in t and "does not inflate" not in t
    sw.loc[w, "compute_ms"] = 58.0                                      # steps longer than G
    sw.loc[w, "compute_share"] = 58.0 / sw.loc[w, "step_ms"]
    t = page.au_drift_sentence(analysis.analyse(res))
    assert "AU comes out below" in t and "points below the measured compute share" in t


def test_model_gap_notes_give_large_excesses_as_a_factor():
    res = _result(sweep_waits={"tokenize": {0: 160, 1: 200, 2: 60, 4: 1}})
    sw = res.tables["summary"]
    sw.loc[(sw["work"] == "tokenize") & (sw["workers"] == 2), "predicted_wait_ms"] = 1.2
    t = page.model_gap_notes(res)
    assert "50.0× the model" in t and "4,9" not in t


def test_model_gap_notes_follow_the_side_of_the_model():
    """W = 1 waits 60 ms against the model's 110 ms (D·B/W - G): 45.5% below it; at 160 ms it is 45.5% above."""
    res = _result(sweep_waits={"tokenize": {0: 160, 1: 60, 4: 1}})
    f = analysis.analyse(res)
    assert f["model_gap.tokenize.w1"].setting["side"] == "below"
    assert "W=1: 60 ms vs 110 ms (45.5% below the model)" in page.model_gap_notes(f)
    sw = res.tables["summary"]
    sw.loc[(sw["work"] == "tokenize") & (sw["workers"] == 1), "wait_ms"] = 160.0
    t = page.model_gap_notes(analysis.analyse(res))
    assert "W=1: 160 ms vs 110 ms (45.5% above the model)" in t and "below" not in t


def _with_loop_cost(res, wall, cpu=None, after=None, kind="tokenize"):
    """The result with the per-item work timed inside the loop ({workers: ms}) and D after the sweep."""
    sw = res.tables["summary"]
    sel = (sw["experiment"] == "worker sweep") & (sw["work"] == kind)
    sw.loc[sel, "work_wall_ms"] = sw.loc[sel, "workers"].map(wall)
    sw.loc[sel, "work_cpu_ms"] = sw.loc[sel, "workers"].map(cpu or wall)
    sw.loc[sel, "d_after_ms"] = after if after is not None else 5.0
    return res


def test_gap_cause_note_without_the_loop_timing_says_so():
    res = _result(sweep_waits={"tokenize": {0: 240, 1: 150, 2: 60, 4: 1}})
    t = page.gap_cause_note(res)
    assert "Why tokenize sits above the model" in t and "7.50 ms at W=0" in t
    assert "timed inside the loop where it ran, is not recorded in this run" in t
    res.run_id = "reference-h200-x"
    assert "is not in the reference run" in page.gap_cause_note(res)
    on_line = _result(sweep_waits={"tokenize": {0: 160, 2: 30, 4: 1}})
    assert page.gap_cause_note(on_line) is None


def test_gap_cause_follows_the_cost_timed_inside_the_loop():
    waits = {"tokenize": {0: 240, 1: 150, 2: 60, 4: 1}}
    # the work cost 7.5 ms inside the loop (D = 5): slower work, and the model holds with it at W=0
    slower = page.gap_cause_note(_with_loop_cost(_result(sweep_waits=waits), {0: 7.5, 1: 6.0, 2: 5.6, 4: 5.0}))
    assert "support the work itself running slower inside the loop" in slower and "(at W=0, W=1, W=2)" in slower
    assert "its CPU time grew as well" in slower and "within 20% (or 2 ms) of the measured wait at W=0, W=1." in slower
    assert "At W=2 even the loop's own cost leaves the wait above the model" in slower
    # wall above CPU: waiting for a core
    waiting = page.gap_cause_note(_with_loop_cost(_result(sweep_waits=waits), {0: 7.5, 1: 7.5, 2: 7.5, 4: 5},
                                                  cpu={0: 5.0, 1: 5.0, 2: 5.0, 4: 5.0}))
    assert "part of it was waiting for a core" in waiting
    # the loop's cost equals D: the excess lies outside the work
    same = page.gap_cause_note(_with_loop_cost(_result(sweep_waits=waits), {0: 5.1, 1: 5.0, 2: 4.9, 4: 5.0}))
    assert "cost what `D` says inside the loop too" in same and "slower inside the loop" not in same
    # D itself grew after the sweep: the machine changed
    drift = page.gap_cause_note(_with_loop_cost(_result(sweep_waits=waits), {0: 7.5, 1: 7.5, 2: 7.5, 4: 7.5},
                                                after=7.4))
    assert "support a slower machine" in drift and "slower inside the loop" not in drift
    # workers slower than the main process inside the loop
    workers = page.gap_cause_note(_with_loop_cost(_result(sweep_waits=waits), {0: 5.0, 1: 7.0, 2: 7.0, 4: 5.0}))
    assert "Workers paid more per item than the main process did inside the loop" in workers


def test_timed_items_carry_their_work_and_the_loop_reads_it():
    ds = starvation.WorkDataset(8, "sleep", cost_ms=2.0, timed=True)
    x = ds[0]
    assert x.shape == (66,) and 1.5e6 < int(x[-2]) < 50e6 and int(x[-1]) >= 0
    step = starvation.Step(5.0, device="cpu", calibration_s=0.05)
    df = starvation.train_steps(starvation.make_loader(ds, batch_size=4, workers=0), step, 2)
    assert (df["work_wall_ms"] > 1.5).all() and (df["work_cpu_ms"] < df["work_wall_ms"]).all()  # sleep: no CPU
    plain = starvation.train_steps(starvation.make_loader(starvation.WorkDataset(8, "sleep", cost_ms=0.1),
                                                          batch_size=4, workers=0), step, 1)
    assert "work_wall_ms" not in plain


def test_first_batch_note_states_the_trend_over_all_workers():
    res = _result(sweep_waits={"tokenize": {0: 150, 1: 100, 2: 40, 4: 2, 8: 1, 16: 1}})
    sw = res.tables["summary"]
    tok = sw["work"] == "tokenize"
    sw.loc[tok, "first_batch_ms"] = sw.loc[tok, "workers"].map({0: 130, 1: 370, 2: 290, 4: 370, 8: 520, 16: 670})
    t = page.first_batch_note(analysis.analyse(res))
    assert ("**tokenize** took 670 ms at W = 16, 1.81× slower than the first batch at W = 1 (370 ms), "
            "except W=1 → W=2: 370 ms → 290 ms") in t
    assert "exceeds that spread" in t
    sw.loc[tok, "first_batch_ms"] = sw.loc[tok, "workers"].map({0: 130, 1: 670, 2: 600, 4: 500, 8: 400, 16: 370})
    t = page.first_batch_note(analysis.analyse(res))
    assert "**tokenize** took 370 ms at W = 16, 1.81× faster than the first batch at W = 1 (670 ms)" in t
    assert "except" not in t.split("**tokenize**")[1].split(";")[0]


def test_a_first_batch_dip_within_the_start_up_spread_is_noise():
    """A dip of 80 ms against fresh loaders that spread by 0 ms is named as beyond it; widen their spread past
    the dip and the same dip reads as start-up noise."""
    res = _result(sweep_waits={"tokenize": {0: 150, 1: 100, 2: 40, 4: 2}})
    sw = res.tables["summary"]
    tok = sw["work"] == "tokenize"
    sw.loc[tok, "first_batch_ms"] = sw.loc[tok, "workers"].map({0: 130, 1: 370, 2: 290, 4: 400})
    f = analysis.analyse(res)
    assert f["first_batch_dip.tokenize.w2"].number == pytest.approx(80) and f["first_batch_noise"].number == 0
    assert "exceeds that spread" in page.first_batch_note(f)
    eb = res.tables["epoch_boundary"]
    first = (eb["epoch"] == 0) & (eb["step_in_epoch"] == 0)
    eb.loc[first, "wait_ms"] = [200.0 + 40 * i for i in range(int(first.sum()))]
    t = page.first_batch_note(analysis.analyse(res))
    assert "within that spread: start-up noise" in t and "exceeds" not in t


def test_measured_vs_model_is_one_panel_per_kind_with_few_legend_entries():

    res = _result(sweep_waits={"sleep": {0: 160, 1: 110, 2: 30, 4: 1, 16: 1},
                               "tokenize": {0: 150, 1: 90, 2: 40, 4: 2, 16: 3},
                               "decode": {0: 140, 1: 80, 2: 25, 4: 1, 16: 1}})
    sw = res.tables["summary"]
    fig = c04_charts.measured_vs_model(sw[sw["experiment"] == "worker sweep"], title="t")
    assert len({t.xaxis for t in fig.data}) == 3                        # small multiples
    assert fig.layout.xaxis.type == "category" and list(fig.layout.xaxis.categoryarray) == ["0", "1", "2", "4", "16"]
    assert len([t for t in fig.data if t.showlegend is not False]) <= 3
    assert "bars" not in fig.layout.yaxis.title.text and "error bars: ± std of the steps" in fig.layout.title.text


def test_ch4_axis_titles_keep_the_unit_only():

    res = _result()
    sm = res.tables["summary"]
    figs = [c04_charts.stacked_step_bars(sm[sm["experiment"] == "published case"], x="workers", xaxis="W", title="t"),
            c04_charts.idle_gap_chart(res.tables["idle_gaps"], g_ms=50.0, title="t"),
            c04_charts.prefetch_chart(res.tables["prefetch"], title="t"),
            c04_charts.boundary_timeline(res.tables["epoch_boundary"], steps_per_epoch=10, title="t")]
    for fig in figs:
        y = fig.layout.yaxis.title.text
        assert "bars" not in y and "(ms" in y and len(y) <= 32, y
        assert re.search(r"error bars:|at most: no error bars", fig.layout.title.text)


def _sweep_edit(**cols):
    """The H200 reference with the tokenize sweep set to the case the model and the sweep disagree in: at the
    first count the sweep ran at or above the model's W, the accelerator short of the bar (AU 50%) and each worker
    delivering a sample every 1.5 × D (its step set to 1.5 × D × B ÷ W); the largest count keeping up (AU 99%).
    ``cols`` edit that row further (column=value). Returns the result, the edited row and the model's W."""
    import copy

    from datajourney.core import results
    res = copy.deepcopy(results.load_reference(analysis.CHAPTER, "h200"))
    m_w = analysis.analyse(res).number("model_workers.tokenize")
    t = res.tables["summary"]
    sweep = (t["experiment"] == "worker sweep") & (t["work"] == "tokenize")
    w = int(t.loc[sweep & (t["workers"] >= m_w), "workers"].min())
    assert w < int(t.loc[sweep, "workers"].max())   # the sweep ran past the model's count: the case exists
    m = sweep & (t["workers"] == w)
    row = t[m].iloc[0]
    t.loc[m, "au"] = 0.5
    t.loc[m, "step_ms"] = 1.5 * float(row["d_ms"]) * int(row["batch_size"]) / w
    t.loc[sweep & (t["workers"] == t.loc[sweep, "workers"].max()), "au"] = 0.99
    for c, v in cols.items():
        t.loc[m, c] = v
    return res, t[m].iloc[0], m_w


def test_the_model_and_the_sweep_disagree_by_a_measured_factor_with_its_place():
    """Where the sweep does not keep up at the count the model asks for (the H200 reference's tokenize work, set so
    at that count), the gap is the workers' measured time per sample (W × step ÷ B) against D, and the work timed
    inside a worker places it: outside the per-item work when the item took about D there, in slower work when it
    took more; a sweep that keeps up where the model says has no gap to explain."""
    # fails if the pace is not W × step ÷ B at the model's count, if the cause ignores the work timed in the worker
    # (or reads it the wrong way round), or if the page words another factor or count than the facts'
    _, row, m_w = _sweep_edit()
    d, w, b = float(row["d_ms"]), int(row["workers"]), int(row["batch_size"])
    # the item's own work took D inside a worker: the gap lies outside it
    outside, row, _ = _sweep_edit(work_wall_ms=d, work_cpu_ms=d)
    f = analysis.analyse(outside)
    assert f.number("d.tokenize") == pytest.approx(d)
    sw = outside.tables["summary"].query("experiment == 'worker sweep' and work == 'tokenize'")
    top = int(sw.loc[sw["au"] >= model.AU_THRESHOLD, "workers"].min())   # the first count that kept up, past w
    assert f.number("model_workers.tokenize") == m_w and f.number("keep_up.tokenize") == top > w
    pace = w * float(row["step_ms"]) / b
    assert pace == pytest.approx(1.5 * d)
    assert f.number("worker_pace.tokenize") == pytest.approx(pace)
    assert f.number("model_shortfall.tokenize") == pytest.approx(1.5)
    assert f["shortfall_cause.tokenize"].value == "outside the work"
    text = page.gap_cause_note(f)
    assert "outside the per-item work" in text and f"first kept up at W = {top}" in text
    shown = "1.50× slower than `D`"
    assert shown in text and f"At W = {w} the sweep's workers delivered one every {pace:.2f} ms" in text
    assert (f"(the model asks for {page._v(f, 'model_workers.tokenize')}; at W = {w} each worker took {pace:.2f} ms "
            f"a sample, {shown})" in page.finding_workers(f).text)
    # the item's own work took twice D inside a worker: the work itself ran slower there
    slow, _, _ = _sweep_edit(work_wall_ms=2 * d, work_cpu_ms=2 * d)
    g = analysis.analyse(slow)
    assert g["shortfall_cause.tokenize"].value == "slower work"
    assert "ran slower inside the workers" in page.gap_cause_note(g)
    kept, _, _ = _sweep_edit(au=0.95)   # the sweep keeps up where the model says
    assert "model_shortfall.tokenize" not in analysis.analyse(kept)


# ---------------------------------------------------------------- the worker question, its workload and the model
def _worker_answer(waits: dict):
    """The opening of a constructed run whose tokenize sweep waited ``waits`` (W -> ms; each step computes 50 ms)."""
    f = analysis.analyse(_result(sweep_waits={"sleep": {0: 160, 2: 30, 4: 1}, "tokenize": waits}))
    return f, f.advice_for("synthetic.num_workers"), page.opening(f)


def test_the_worker_count_is_the_fewest_within_the_minimum_gain_of_the_fastest_step():
    """The verdict reads the step rate against num_workers=0: the fewest workers within 3% of the fastest step,
    not the first count that reached the AU bar; "more may help" only where the sweep's last step still gained."""
    # W = 16 is the first to reach 90% AU, but W = 8's step is within 3% of it: advise 8, nothing about "more"
    f, a, op = _worker_answer({0: 150, 2: 40, 4: 14, 8: 7, 16: 5.5})
    assert f.number("keep_up.tokenize") == 16 and a.value == 8 and a.scope == "best"
    assert "set `num_workers=8`" in op.actions[0].text and "more may help" not in op.actions[0].text
    # W = 4 already reaches the bar, but W = 16 ran more than 3% faster than W = 8 (and than 4): advise 16, and the
    # trend of the sweep's last step says more may help
    f, a, op = _worker_answer({0: 150, 2: 40, 4: 4, 8: 6, 16: 1})
    assert f.number("keep_up.tokenize") == 4 and a.value == 16 and a.scope == "edge"
    assert "set `num_workers=16`" in op.actions[0].text and "more may help" in op.actions[0].text
    assert "W = 4 first kept the accelerator busy" in op.actions[0].text
    # steps level to the 3% threshold from W = 4 on: the fewest of them
    f, a, op = _worker_answer({0: 150, 2: 40, 4: 1.5, 8: 1.2, 16: 1.0})
    assert a.value == 4 and a.scope == "best"
    assert f[a.gain].basis == "step.tokenize.w0"   # against the default, num_workers=0


def test_the_opening_names_each_workload_and_the_model_beside_the_worker_count():
    """The published case (a CPU-free sleep) and the worker question (CPU-bound work) are different workloads: the
    first screen names each, gives the published case's count against the model, and the model's count for the
    advised work beside the advice, with the measured reason where the sweep parted from it."""
    from datajourney.core import results

    f = analysis.analyse(results.load_reference(analysis.CHAPTER, "h200"))
    op = page.opening(f)
    texts = [x.text for x in op.findings]
    assert "CPU-free sleeping work of 5 ms a sample" in texts[0]
    assert "With 4 workers on the same work" in texts[1] and "as the model predicts: the loader keeps up" in texts[1]
    a = f.advice_for("synthetic.num_workers")
    head = op.actions[0].text
    assert head.startswith("For synthetic CPU-bound tokenising work") and f"`num_workers={a.value}`" in head
    if "model_shortfall.tokenize" in f:
        pace = f["worker_pace.tokenize"]
        assert (f"The model asks for {int(f.number('model_workers.tokenize'))} workers; at W = "
                f"{pace.setting['workers']} each took") in head and "slower than `D`" in head
    # a measured wait that misses the model's prediction is said to
    short = analysis.analyse(_result(w4_wait=40.0, w4_step=91.0))
    assert "against what the model predicts: the loader falls short" in page.opening(short).findings[1].text


def test_no_worker_count_that_keeps_up_is_said_beside_the_fastest_one():
    f, a, op = _worker_answer({0: 150, 2: 60, 4: 30, 8: 20})
    assert f.number("keep_up.tokenize") is None and a.value == 8
    assert "no worker count up to W = 8 kept the accelerator busy" in op.actions[0].text


@pytest.mark.parametrize("host", ["h200", "h100"])
def test_more_may_help_only_where_the_sweeps_last_step_gained(host):
    """On every committed reference: an advised count at the sweep's edge says "more may help" only where its step
    beat the one before it by the minimum gain."""
    from datajourney.core import results
    from datajourney.core.answers import MIN_EFFECT

    f = analysis.analyse(results.load_reference(analysis.CHAPTER, host))
    a = f.advice_for("synthetic.num_workers")
    k = f["workers_to_keep_up"].setting["work"]
    ws = sorted(x.setting["workers"] for key, x in f.facts.items() if key.startswith(f"step.{k}.w"))
    gained = f.number(f"step.{k}.w{ws[-2]}") / f.number(f"step.{k}.w{ws[-1]}") - 1 >= MIN_EFFECT
    assert (a.scope == "edge") == (a.value == ws[-1] and gained)
    assert ("more may help" in page.opening(f).actions[0].text) == (a.scope == "edge")


def test_idle_share_and_au_past_100_percent_are_explained_only_when_they_are():
    """The idle share counts what a step computed, AU counts `G` a step: they add past 100% only when a step computed
    less than `G`, and then the page says so with both numbers; when they add to 100% it says nothing."""
    assert "together" not in page.published_case_sentences(analysis.analyse(_result()))   # compute = G
    f = analysis.analyse(_result(g=55.0))    # each step computed 50 ms, G is 55 ms
    assert f["case.w0.idle_plus_au"].value == pytest.approx(100 * (165 + 55) / 215)
    lines = page.published_case_sentences(f).splitlines()
    assert "together 102%" in lines[0] and "`G` = 55 ms" in lines[0] and "computed, 50 ms)" in lines[0]
    assert "over 100%" not in lines[0]
