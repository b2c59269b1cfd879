"""Chapter 11's per-GPU loss taken apart: the shares add up to the measured gap, the largest is named from the data,
the NCCL channel question is asked on NCCL only (skipped with its reason on gloo), and a CPU run measures it end to
end."""
import pandas as pd
import pytest

from datajourney.chapters.c11_gpu_to_gpu import analysis, page
from datajourney.chapters.c11_gpu_to_gpu import analysis_loss as efficiency
from datajourney.chapters.c11_gpu_to_gpu import experiment as ddp
from datajourney.chapters.c11_gpu_to_gpu.reading import EXPLAIN
from datajourney.core import results


def _windows(job, world, rung, v, **extra):
    return [{"job": job, "path": "direct", "world": world, "rung": rung, "window": i, "steps_per_s": x, **extra}
            for i, x in enumerate((v * 0.995, v, v * 1.005))]


def _result(*, plain=10.0, ddp1=9.8, nosync=9.6, sync=9.0, nccl=20.0, exposed=4.0, alone=10.0, channels=None,
            cuda=True, nosync1=None) -> results.Result:
    """A 4-GPU result with the decomposition's tables: steps/s of one GPU without DDP, DDP on one GPU, DDP on 4 with
    and without sync, the profiled NCCL time in training (and its exposed part) and alone; ``channels``: steps/s of
    DDP on 4 per NCCL channel count."""
    spec = ddp.parse_rung("ddp", 2000)
    keys = {k: spec[k] for k in ("ddp", "static_graph", "bucket_view", "hook", "bucket_cap_mb")}
    rungs = [{"job": "one", "path": "direct", "world": 1, "rung": "no_ddp", "status": "ok", "steps_per_s": plain,
              **keys, "ddp": False},
             {"job": "one", "path": "direct", "world": 1, "rung": "ddp", "status": "ok", "steps_per_s": ddp1, **keys},
             {"job": "n", "path": "direct", "world": 4, "rung": "ddp", "status": "ok", "steps_per_s": sync, **keys,
              "prof_nccl_ms": nccl, "prof_exposed_nccl_ms": exposed, "prof_overlap_ms": nccl - exposed,
              "prof_compute_ms": 1e3 / sync - exposed, "prof_copy_ms": 0.0, "prof_nccl_kernels": 2.0,
              "grad_bytes": 1 << 30}]
    windows = _windows("one", 1, "no_ddp", plain) + _windows("one", 1, "ddp", ddp1) + _windows("n", 4, "ddp", sync)
    ex = [{"job": "n", "path": "direct", "world": 4, "rung": "ddp", "sync": False, "status": "ok",
           "steps_per_s": nosync}]
    exw = _windows("n", 4, "ddp", nosync, sync=False)
    if nosync1 is not None:  # the no-sync step on one GPU
        ex.append({"job": "one", "path": "direct", "world": 1, "rung": "ddp", "sync": False, "status": "ok",
                   "steps_per_s": nosync1})
        exw += _windows("one", 1, "ddp", nosync1, sync=False)
    iso = [{"job": "n", "path": "direct", "world": 4, "rung": "ddp", "status": "ok", "buckets": 2,
            "bucket_sizes": "[1048576, 1073741824]", "prof_nccl_ms": alone, "window": 0, "step_ms": alone}]
    for c, v in (channels or {}).items():
        ex.append({"job": f"nch{c}", "path": "direct", "world": 4, "rung": "ddp", "sync": True, "status": "ok",
                   "steps_per_s": v})
        exw += _windows(f"nch{c}", 4, "ddp", v, sync=True)
    res = results.Result(chapter="11_gpu_to_gpu", run_id="t", parameters={"explain_rung": "ddp", "bucket_cap_mb": 2000,
                                                                      "nccl_channels": list(channels or {})},
                         fingerprint={}, metadata={"cuda": cuda, "backend": "nccl" if cuda else "gloo", "world": 4,
                                                   "jobs": []})
    for name, rows in (("rungs", rungs), ("windows", windows), ("explain", ex), ("explain_windows", exw),
                       ("explain_iso", iso)):
        res.add(name, pd.DataFrame(rows))
    if not cuda:  # the same jobs on gloo
        for t in res.tables.values():
            t["path"] = "gloo"
    res.add("transports", pd.DataFrame(columns=["job", "path", "channel", "src", "dst", "kind", "via", "transport"]))
    return res


def _shares(f, k=4):
    return {s: f[f"loss_{s}_{k}"].value for s in efficiency.SHARES if f"loss_{s}_{k}" in f}


def test_shares_sum_to_the_measured_gap():
    res = _result()
    f = analysis.analyse(res)
    gap = 100 * (1 - 9.0 / 10.0)  # the 4-GPU step against one GPU without DDP, from the windows' means
    assert f["loss_gap_4"].value == pytest.approx(gap)
    sh = _shares(f)
    assert set(sh) == set(efficiency.SHARES) and sum(sh.values()) == pytest.approx(gap)
    ts, tns = 1e3 / 9.0, 1e3 / 9.6
    assert sh["bookkeeping"] == pytest.approx(100 * (1e3 / 9.8 - 1e3 / 10.0) / ts)
    assert sh["apart"] == pytest.approx(100 * (tns - 1e3 / 9.8) / ts)
    # NCCL ran 2x its time alone: half of its exposed 4 ms is the slowdown, within the sync cost
    assert f["nccl_slowdown_4"].value == pytest.approx(2.0)
    assert sh["slowed"] == pytest.approx(100 * 2.0 / ts) and sh["exposed"] == pytest.approx(100 * (ts - tns - 2.0) / ts)
    # the slowdown is never more than the sync cost it sits in, and the sum still holds
    d = efficiency.decompose(100.0, 101.0, 102.0, 103.0, 50.0)
    assert d["shares"]["slowed"] == pytest.approx(100 * 1.0 / 103) and d["shares"]["exposed"] == pytest.approx(0.0)
    assert sum(d["shares"].values()) == pytest.approx(d["gap"])


def test_ranks_apart_is_set_against_the_no_sync_step_on_one_gpu():
    """Measured, the one-GPU no-sync step is the baseline of ranks apart: skipping sync on 4 ranks is no longer
    credited with the sync work one GPU does, and that work leaves the sync cost; the shares still add up."""
    f = analysis.analyse(_result(ddp1=9.8, nosync1=10.1, nosync=9.9, sync=9.0))
    sh, ts = _shares(f), 1e3 / 9.0
    t1, td1, tns1, tns = 1e3 / 10.0, 1e3 / 9.8, 1e3 / 10.1, 1e3 / 9.9
    assert sh["apart"] == pytest.approx(100 * (tns - tns1) / ts) and sh["apart"] > 0
    assert sh["bookkeeping"] == pytest.approx(100 * (td1 - t1) / ts)
    assert sh["exposed"] + sh["slowed"] == pytest.approx(100 * ((ts - tns) - (td1 - tns1)) / ts)
    assert sum(sh.values()) == pytest.approx(f["loss_gap_4"].value)
    assert f.data["loss"]["apart_from"] == "no_sync_one" and "no no-sync step" not in page.loss_text(f)
    assert page.loss_table(f)["no sync on one ms"].iloc[0] == pytest.approx(tns1)
    # the same result without it: against DDP on one GPU (negative here), and the page says which baseline
    f = analysis.analyse(_result(ddp1=9.8, nosync=9.9, sync=9.0))
    assert _shares(f)["apart"] < 0 and "no no-sync step on one GPU" in page.loss_text(f)
    # the plan runs the no-sync step in the one-GPU job
    p = ddp.preflight({"scale_worlds": [], "host_paths": [], "nccl_channels": []})
    one = ddp.plan_jobs(p, "nccl", 2)[0]
    assert one.name == "one" and any(r.get("sync") is False for r in one.rungs)


def test_the_largest_share_follows_the_data():
    f = analysis.analyse(_result(ddp1=9.8, nosync=9.7, sync=8.0))  # most of the loss comes with the sync
    assert f["loss_largest_4"].setting["share"] == "exposed"
    assert "the largest is exposed communication" in page.loss_text(f)
    f = analysis.analyse(_result(ddp1=8.2, nosync=8.15, sync=8.0, exposed=0.1))  # most of it is DDP on one GPU
    assert f["loss_largest_4"].setting["share"] == "bookkeeping"
    assert "the largest is DDP's own bookkeeping" in page.loss_text(f)
    f = analysis.analyse(_result(ddp1=9.9, nosync=8.5, sync=8.4, exposed=0.1))  # ranks apart, without any sync
    assert f["loss_largest_4"].setting["share"] == "apart"
    # below the target the facts name the largest measured share (the loss text words it); the page never words
    # the target, reached or not
    assert f.data["target"]["reached"] is False and f.data["target"]["held_by"] == "loss_largest_4"
    assert "the largest is ranks running apart" in page.loss_text(f) and "target" not in page.target_text(f)
    f = analysis.analyse(_result(ddp1=9.95, nosync=9.9, sync=9.8, exposed=0.1))
    assert f.data["target"]["reached"] is True and "target" not in page.target_text(f)


def test_channel_question_against_nccls_own_choice():
    f = analysis.analyse(_result(sync=9.0, channels={4: 9.9, 32: 9.05}))
    a = f.advice_for("ddp.nccl_channels")
    assert a.verdict == "change" and a.value == 4 and "NCCL_MAX_NCHANNELS=4" in a.call and a.needs == "gpus"
    assert f["target_best"].setting["channels"] == 4 and f["target_best"].value == pytest.approx(99.0)
    f = analysis.analyse(_result(sync=9.0, channels={4: 9.05, 32: 8.2}))
    a = f.advice_for("ddp.nccl_channels")
    assert a.verdict == "keep" and a.default.endswith("unset")  # 0.6% is under the 3% threshold
    assert "NCCL's own choice" in page.channels_text(f)


def test_channel_question_is_skipped_with_its_reason_on_gloo():
    f = analysis.analyse(_result(cuda=False, channels={}))
    assert f.data["channels"] == {"status": "skipped", "reason": "no_nccl", "asked": []}
    assert f.advice_for("ddp.nccl_channels") is None
    assert page.channels_text(f).startswith("**NCCL channel count:** skipped: gloo has no NCCL channels")
    # without CUDA the NCCL slowdown is not measured and says why; the shares still add up
    assert "loss_slowed_4" not in f and f.data["loss"]["slowed"] == "no_cuda"
    assert sum(_shares(f).values()) == pytest.approx(f["loss_gap_4"].value)
    assert "no CUDA device" in page.loss_text(f)
    p = ddp.preflight({"nccl_channels": [4, 16], "scale_worlds": [], "host_paths": []})
    assert [j.name for j in ddp.plan_jobs(p, "gloo", 2)] == ["one", "n"]
    jobs = ddp.plan_jobs(p, "nccl", 2)
    ch = [j for j in jobs if j.name.startswith("nch")]
    assert [(j.name, j.env) for j in ch] == [
        (f"nch{c}", {"NCCL_MIN_NCHANNELS": str(c), "NCCL_MAX_NCHANNELS": str(c)}) for c in (4, 16)]


def test_a_result_without_the_decomposition_says_so():
    """A result from before the decomposition (the reference run less its decomposition's tables and parameter): the
    loss and the channels say they were not measured, the target is still judged, and no share is named for it."""
    ref = results.load_reference("11_gpu_to_gpu", "h200")
    assert analysis.analyse(ref).data["loss"]["status"] == "ok"   # the reference took the loss apart
    old = results.Result(ref.chapter, ref.run_id, {k: v for k, v in ref.parameters.items() if k != "explain_rung"},
                         ref.fingerprint, {k: t for k, t in ref.tables.items() if not k.startswith(EXPLAIN)},
                         ref.metadata)
    f = analysis.analyse(old)
    assert f.data["loss"] == {"status": "not_measured"} and f.data["channels"]["status"] == "not_measured"
    assert "not measured" in page.loss_text(f) and page.loss_table(f).empty
    assert f["target_best"].value == pytest.approx(f[f"scaling_eff_{ref.metadata['world']}"].value)
    d = f.data["target"]
    assert d["status"] == "ok" and d["held_by"] is None and not any(k.startswith("loss_") for k in f.facts)
    assert "target" not in page.target_text(f) and "kept" in page.target_text(f)


def test_a_negative_share_is_noise_only_within_the_windows_spread():
    """A step faster than its baseline is called noise only when the windows' spread covers it; beyond, flagged."""
    row = {"processes": 4, "bookkeeping": 3.0, "apart": -2.7, "exposed": 0.0, "slowed": 9.0}
    assert "within the windows' spread" in page._negative_shares([{**row, "noise": 3.0}], "GPU")
    beyond = page._negative_shares([{**row, "noise": 0.5}], "GPU")
    assert "beyond the windows' spread" in beyond and "flagged" in beyond
    assert page._negative_shares([{**row, "apart": 1.0, "noise": 0.5}], "GPU") == ""
