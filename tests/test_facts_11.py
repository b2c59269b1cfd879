"""Chapter 11 on the facts layer: the analysis finds in the reference results what an independent reading of
their tables finds, the page's words follow reversed data, parameters are declared once, and a hostile string
in a result stays text."""
import json
import re

import pandas as pd
import pytest

from datajourney.book import registry
from datajourney.chapters.c11_gpu_to_gpu import analysis, page
from datajourney.chapters.c11_gpu_to_gpu.params import Params
from datajourney.core import phrasing, results
from datajourney.core.params import parameters_cell
from datajourney.core.paths import REPO_ROOT

CH = "11_gpu_to_gpu"
FOLDER = REPO_ROOT / "datajourney" / "chapters" / "c11_gpu_to_gpu"


def _refs():
    main = results.load_reference(CH, "h200")
    return [main, *results.extra_references(CH, "h200")]


def _mean(res, job, rung):
    w = pd.concat([res.table(t) for t in ("windows", "scale_windows") if t in res.tables])
    return w[(w["job"] == job) & (w["rung"] == rung)]["steps_per_s"].mean()


def _fastest(res, job, *, plain=True):
    """The DDP rung of ``job`` with the highest mean windows, read from the tables."""
    r = pd.concat([res.table(t) for t in ("rungs", "scale_rungs") if t in res.tables])
    r = r[(r["job"] == job) & (r["status"] == "ok") & r["ddp"].astype(bool)]
    if not plain:
        r = r[r["rung"] != "ddp"]
    return max(r["rung"], key=lambda x: _mean(res, job, x))


# --------------------------------------------------------------------------- (a) the reference results
@pytest.mark.parametrize("res", _refs(), ids=lambda r: r.run_id)
def test_facts_equal_an_independent_reading_of_the_tables(res):
    f = analysis.analyse(res)
    n = res.metadata["world"]
    one = _mean(res, "one", "no_ddp")
    best = _fastest(res, "n")
    assert f["scaling_direct"].value == pytest.approx(100 * (1 - _mean(res, "n", best) / one))
    assert f[f"scaling_eff_{n}"].value == pytest.approx(100 * _mean(res, "n", best) / one)
    for k in res.metadata["scale_worlds"]:
        job = f"scale{k}"
        assert f[f"scaling_eff_{k}"].value == pytest.approx(100 * _mean(res, job, _fastest(res, job)) / one)
        assert f[f"scaling_eff_{k}"].setting["rung"] == _fastest(res, job)
    worst = min(("p2p_off", "p2p_shm_off"), key=lambda h: _mean(res, h, "ddp"))
    assert f["host_path_cost"].value == pytest.approx(_mean(res, worst, "ddp") / _mean(res, "n", "ddp"))
    assert f["host_path_cost"].setting["path"] == worst == "p2p_shm_off"
    assert f["host_path_collapse"].value == pytest.approx(one / _mean(res, worst, "ddp"))
    opt = _fastest(res, "n", plain=False)
    assert f["best_option_direct"].setting["rung"] == opt
    assert f["best_option_direct"].value == pytest.approx(_mean(res, "n", opt) / _mean(res, "n", "ddp"))
    hopt = _fastest(res, worst, plain=False)
    assert f["best_option_host"].setting["rung"] == hopt == "powersgd"
    assert f["gap_closed_host"].value == pytest.approx(
        100 * (_mean(res, worst, hopt) - _mean(res, worst, "ddp")) / (one - _mean(res, worst, "ddp")))
    b = res.table("bench")
    b = b[(b["op"] == "all_reduce") & (b["path"] == "direct") & (b["size"] == b["size"].max())]
    assert f["allreduce_busbw"].value == pytest.approx(b["busbw_GBps"].median())
    assert f["allreduce_busbw"].published is None and f["host_path_collapse"].published
    # the advice: each DDP knob against DDP's default with the others held; none beat its threshold here
    for key, default in (("ddp.bucket_cap_mb", "bucket_cap_mb=25"), ("ddp.static_graph", "static_graph=False"),
                         ("ddp.comm_hook", "no communication hook")):
        a = f.advice_for(key)
        assert a.verdict == "keep" and a.default == default, key
    assert f.advice_for("ddp.option").verdict == "keep" and f.advice_for("ddp.option").default.startswith("DDP(model")
    assert f.advice_for("ddp.path").knob == "NCCL_P2P_DISABLE" and f.advice_for("ddp.path").needs == "gpus"
    assert f.advice_for("ddp.path").verdict == "keep"
    # the forced host paths ran their ladder from one-bucket DDP straight to compression: no like-for-like pair
    assert f.advice_for("ddp.host_option") is None
    assert set(f.exports) >= {"scaling_direct", "host_path_collapse", "allreduce_busbw", "gradient_exchange"}


def test_gradient_exchange_keeps_chapter_12s_shape():
    res = results.load_reference(CH, "h200")
    g = analysis.analyse(res).data["gradient_exchange"]
    assert g["default"] == "direct" and g["world"] == 2 and g["cuda"] is True and g["model"] == "vit_l_32"
    assert g["grad_bytes"] == int(res.table("rungs")["grad_bytes"].iloc[0])
    one = res.table("rungs").query("rung == 'no_ddp'")["steps_per_s"].iloc[0]
    assert g["step_ms"] == pytest.approx(1e3 / float(one))
    assert set(g["paths"]) == {"direct", "p2p_off", "p2p_shm_off"}
    assert set(g["paths"]["direct"]) == {"allreduce_ms", "busbw_GBps", "ddp_steps_per_s"}
    json.dumps(g)


# --------------------------------------------------------------------------- (b) reversed data
def _swap(res, job_a, job_b, rung="ddp"):
    """A copy of ``res`` whose jobs ``job_a`` and ``job_b`` trade the windows of ``rung`` (settings stay)."""
    w = res.table("windows").copy()
    a, b = (w["job"] == job_a) & (w["rung"] == rung), (w["job"] == job_b) & (w["rung"] == rung)
    w.loc[a, "job"], w.loc[b, "job"] = job_b, job_a
    return results.Result(res.chapter, res.run_id, res.parameters, res.fingerprint, {**res.tables, "windows": w},
                          res.metadata)


def test_the_host_path_finding_flips_with_the_data():
    ref = results.load_reference(CH, "h200")
    facts = analysis.analyse(ref)
    assert "slower than" in phrasing.comparison(facts["host_path_cost"], facts)
    rev = analysis.analyse(_swap(ref, "n", "p2p_shm_off"))
    assert "faster than" in phrasing.comparison(rev["host_path_cost"], rev)
    # the slowest host path now wins: forcing it is advised, against NCCL's default
    assert rev.advice_for("ddp.path").verdict == "change" and rev.advice_for("ddp.path").value == "p2p_shm_off"
    assert "faster than" in page.opening(rev).findings[1].text


def test_the_best_option_follows_the_data():
    ref = results.load_reference(CH, "h200")
    w = ref.table("windows").copy()
    at = (w["job"] == "n") & (w["rung"] != "ddp")
    w.loc[at, "steps_per_s"] *= 0.8
    rev = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, "windows": w},
                         ref.metadata)
    f = analysis.analyse(rev)
    assert f["best_option_direct"].value < 1 and f.advice_for("ddp.option").verdict == "keep"
    assert page.opening(rev).actions[0].text.startswith("For ViT-L/32 training on 2 GPUs over NCCL, keep the default")


# --------------------------------------------------------------------------- (c) (d) parameters declared once
def test_no_fallback_defaults_on_parameters():
    for py in FOLDER.glob("*.py"):
        assert not re.findall(r"\b(p|params|q|parameters|res\.parameters)\.get\(", py.read_text()), py.name


def test_notebook_parameters_cell_is_generated():
    from datajourney.book import cells

    assert cells.current(registry.lookup(CH)) == parameters_cell(Params)


def test_notebook_opens_with_the_page_module():
    nb = json.loads((REPO_ROOT / "notebooks" / f"{CH}.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert any("opening.show(page, res, ref, is_reference_run=is_reference_run)" in c for c in code)
    assert any("harness.run(ddp.CHAPTER, ddp.Params.from_namespace(globals()), run_dir=run_dir)" in c for c in code)


# --------------------------------------------------------------------------- (e) hostile strings stay text
HOSTILE = "x` <img src=x onerror=alert(1)> `y"


def _hostile(res):
    r = results.Result(res.chapter, res.run_id, dict(res.parameters), json.loads(json.dumps(res.fingerprint)),
                       {k: v.copy() for k, v in res.tables.items()}, json.loads(json.dumps(res.metadata)))
    r.metadata["model"] = HOSTILE
    r.metadata["topology_text"] = None
    r.metadata["start"] = {**(r.metadata.get("start") or {}), "device": HOSTILE}
    for j in r.metadata["jobs"]:
        j.update(job=HOSTILE, status=HOSTILE, error_tail="```\n" + HOSTILE, nccl_version=HOSTILE)
    t = r.tables["transports"]
    t["via"] = HOSTILE
    rg = r.tables["rungs"]
    rg.loc[rg["hook"] == "bf16", "status"] = "skipped"
    rg["reason"] = HOSTILE
    rg.loc[rg["hook"] == "powersgd", "hook_state"] = json.dumps({"hook": "x", HOSTILE: HOSTILE})
    r.tables["topology"] = pd.DataFrame([{"a": "GPU0", "b": "GPU1", "link": HOSTILE}])
    return r


def _unescaped(md: str) -> bool:
    """Whether ``<img`` shows outside code (fenced blocks and inline spans removed)."""
    plain = re.sub(r"(`{3,})[^\n]*\n.*?\n\1", "", md, flags=re.S)
    plain = re.sub(r"(`+)(?:(?!\1).)*?\1", "", plain, flags=re.S)
    return "<img" in plain


def test_a_hostile_string_in_the_result_stays_text():
    from datajourney.book import opening

    res = _hostile(results.load_reference(CH, "h200"))
    facts = page.facts_of(res)
    md = [opening.markdown(page, res, None), *(f.text for f in page.findings(facts)),
          page.no_gpu_text(res, res), page.scope_text(res, res), page.sweep_text(facts), page.profile_note(facts),
          page.spread_notes(facts), page.powersgd_state(facts), page.topology_text(res), page.failed_jobs_text(res),
          page.scaling_text([("this run", res)])]
    cpu = _hostile(results.load_reference(CH, "h200"))
    cpu.metadata.update(cuda=False, backend="gloo")
    md += [opening.markdown(page, cpu, res), page.no_gpu_text(cpu, res)]
    for text in md:
        assert not _unescaped(text), text
    assert any("img" in t for t in md)  # the string did reach the page, as text
