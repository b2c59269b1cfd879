"""Chapter 7 on the facts layer: the analysis of the committed reference results gives the numbers the
tables give (and the image workload chapter 12 computed from them), the findings follow reversed data, no
parameter is read with ``.get``, the notebook's parameters cell is the Params', a hostile string in the
result never reaches the page unescaped, and the AU chart keeps its legend beside the plot."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

from datajourney.chapters.c07_full_picture import analysis, experiment, page, reading
from datajourney.chapters.c07_full_picture import charts as c07_charts
from datajourney.chapters.c07_full_picture.params import Params
from datajourney.core import charts, results
from datajourney.core.params import parameters_cell

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "data/reference/h200/07_full_picture.json"
HOSTILE = "x` <img src=x onerror=alert(1)> `y"


def _runs(res, fmt, w, col, variant="default"):
    sc = res.table("scenarios")
    return sc[(sc["format"] == fmt) & (sc["workers"] == w) & (sc["variant"] == variant)][col].tolist()


def test_reference_facts_equal_the_tables():
    res = results.Result.load(REF)
    f = analysis.analyse(res)
    assert f.number("wait_w0") == pytest.approx(np.mean(_runs(res, "imagefolder", 0, "DATALOADER_WAIT")))
    assert f.number("workers4") == pytest.approx(np.mean(_runs(res, "imagefolder", 4, "images_per_s")))
    assert f["workers4"].published == "ImageFolder, workers=4: images/s"
    # the GPU step under the heaviest loader load against the step alone: 60.8% slower on the reference
    t = res.table("load")
    plain = t[t["mode"] == "plain"].groupby("busy")["compute_ms"].mean()
    assert f.number("contention") == pytest.approx(plain.max() / plain[0])
    assert f.number("contention") > 1  # the step slows under the loader's load
    st = reading.scenario_stats(res)
    best = st.loc[st["pct_of_ceiling"].idxmax()]
    assert f.number("best_vs_ceiling") == pytest.approx(best["pct_of_ceiling"])
    # the image workload chapter 12 prices: the same dict its own function computed from these tables
    wl = f.data["image_workload"]
    steps = res.table("steps")
    # the CPU cost of the advised recipe (the default transforms at their fastest setting), in a worker
    sc = res.table("scenarios")
    d = sc[sc["variant"] == "default"].groupby(["format", "workers"])["images_per_s"].mean()
    fmt, w = d.idxmax()
    assert wl["cpu_recipe"] == {"format": fmt, "workers": int(w), "variant": "default"}
    rows = steps[(steps["format"] == fmt) & (steps["workers"] == w) & (steps["variant"] == "default")]
    cpu = float(rows[list(analysis.CPU_STAGES)].median().sum()) / wl["batch_size"]
    assert wl["cpu_ms"] == pytest.approx(cpu) and f.number("cpu_ms_per_image") == wl["cpu_ms"]
    try:
        from datajourney.chapters.c12_conclusion.experiment import image_workload
    except ImportError:
        image_workload = None
    if image_workload is not None:
        theirs = image_workload(res)
        assert set(wl) == set(theirs)
        for k in ("model", "batch_size", "step_kind", "device", "cores"):
            assert wl[k] == theirs[k], k
        for k in ("step_ms", "file_bytes", "cpu_ms"):
            assert wl[k] == pytest.approx(theirs[k]), k
        assert wl["best"]["workers"] == theirs["best"]["workers"]
    # the advice: the fastest default worker count against W=0, inside the range measured
    a = f.advice_for("image.num_workers")
    ws = sorted(set(st[st["variant"] == "default"]["workers"]))
    assert a.value == 8 and a.scope == ("edge" if a.value == max(ws) else "best") and a.verdict == "change"
    assert f[a.gain].basis == analysis.ips_key("imagefolder", 0) and a.default == "num_workers=0"
    assert a.workload.startswith("ResNet-50 training on a GPU")
    compile(a.snippet, "snippet", "exec")
    assert {"contention", "cpu_ms_per_image", "image_workload", "workers4", "best_vs_ceiling"} <= set(f.exports)
    json.dumps(f.to_dict())


def test_a_cpu_run_names_the_model_that_ran():
    res = copy.deepcopy(results.Result.load(REF))
    res.facts = None
    res.metadata.update(model="small_cnn", device="cpu")
    f = analysis.analyse(res)
    a = f.advice_for("image.num_workers")
    assert "small CNN" in a.workload and "ResNet-50" not in a.workload and "on a CPU" in a.workload
    assert "ResNet-50" not in " ".join(x.text for x in page.opening(f).actions)


def test_findings_follow_reversed_data():
    res = results.Result.load(REF)
    res.facts = None
    sc = res.table("scenarios").copy()  # W=1 clearly slower than W=0 (the reference's two are level)
    one = (sc["workers"] == 1) & (sc["variant"] == "default")
    sc.loc[one, "images_per_s"] = [300.0, 310.0]
    res.tables["scenarios"] = sc
    assert "slower than ImageFolder with 0 workers" in page.finding_one_worker(analysis.analyse(res)).text
    rev = copy.deepcopy(res)
    sc = rev.table("scenarios").copy()
    one, zero = (sc["workers"] == 1) & (sc["variant"] == "default"), (sc["workers"] == 0) & (sc["variant"] == "default")
    sc.loc[one, "workers"], sc.loc[zero, "workers"] = 0, 1
    rev.tables["scenarios"] = sc
    assert "faster than ImageFolder with 0 workers" in page.finding_one_worker(analysis.analyse(rev)).text


def test_no_parameter_is_read_with_get():
    for py in Path(experiment.__file__).parent.glob("*.py"):
        assert not re.search(r"\b(p|q|params|parameters|res\.parameters)\.get\(", py.read_text()), py


def test_notebook_parameters_cell_is_the_params():
    nb = json.loads((ROOT / "notebooks/07_full_picture.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    assert "".join(cell["source"]) == parameters_cell(Params)


def test_hostile_strings_stay_escaped():
    from datajourney.book import opening

    res = copy.deepcopy(results.Result.load(REF))
    res.facts = None
    res.run_id = HOSTILE
    sc = res.table("scenarios").copy()
    sc.loc[sc["variant"] == "graphed", "variant"] = HOSTILE
    res.tables["scenarios"] = sc
    tl = res.table("timeline").copy()
    tl["label"] = HOSTILE
    res.tables["timeline"] = tl
    res.metadata.update(mds_note=HOSTILE, graph_note=HOSTILE, load_notes={"cuda_graphs": HOSTILE}, model=HOSTILE)
    texts = [f.text for f in page.findings(res)] + [opening.markdown(page, res, None, is_reference_run=True),
                                                     page.device_note(res), page.timeline_note(res),
                                                     page.load_note(res), page.nvml_note(res), page.sizing(res)]
    texts += [page.finding_note(res, k) for k in ("best_vs_ceiling", "one_worker", "mds_vs_imagefolder_w0")]
    for t in texts:
        outside = re.sub(r"(`+)(?:(?!\1).)*?\1", "", t)
        assert "<img" not in outside, t


def test_au_chart_keeps_its_legend_beside_the_plot():
    """A legend below the plot made plotly.js draw the bars about 9 points above their values: the chapter's
    chart names its threshold lines short enough to keep the legend beside the plot."""
    st = reading.scenario_stats(results.Result.load(REF))
    fig = c07_charts.au_and_ceiling(st, title="AU", au_rule=0.9, keep_up=0.95)
    names = [t.name for t in fig.data if t.name]
    assert max(map(len, names)) <= charts.LEGEND_CHARS
    d = charts.tidy(json.loads(fig.to_json()))
    assert (d["layout"].get("legend") or {}).get("orientation") != "h"


def _two_settings(w1_runs):
    """The reference cut to what a CPU run measures (ImageFolder's default recipe at W=0 and W=1), W=1's
    images/s set to ``w1_runs``."""
    res = copy.deepcopy(results.Result.load(REF))
    res.facts = None
    sc = res.table("scenarios")
    sc = sc[(sc["format"] == "imagefolder") & (sc["variant"] == "default") & sc["workers"].isin([0, 1])].copy()
    one = sc["workers"] == 1
    sc.loc[one, "images_per_s"] = list(w1_runs)
    res.tables["scenarios"] = sc.reset_index(drop=True)
    return res


def test_advice_keeps_the_baseline_when_the_best_is_level_with_it():
    zero = _runs(results.Result.load(REF), "imagefolder", 0, "images_per_s")
    level = _two_settings([max(zero) - 1, max(zero) + 20])  # W=1 best on average, inside W=0's spread
    f = analysis.analyse(level)
    assert f["workers_gain"].level and f.number(analysis.ips_key("imagefolder", 1)) > f.number(
        analysis.ips_key("imagefolder", 0))
    a = f.advice_for("image.num_workers")
    assert a.value == 0 and a.verdict == "keep"
    act = page._action_workers(f).text
    assert "keep the default `num_workers=0`" in act and "level with" in act and "set `num_workers=1`" not in act
    # W=1 clear of W=0's spread: the advice sets it, with its gain
    fast = analysis.analyse(_two_settings([max(zero) * 1.5, max(zero) * 1.6]))
    a = fast.advice_for("image.num_workers")
    assert a.value == 1 and a.verdict == "change" and fast[a.gain].of == analysis.ips_key("imagefolder", 1)
    assert "set `num_workers=1`: " in page._action_workers(fast).text
    assert "faster than ImageFolder with 0 workers" in page._action_workers(fast).text
