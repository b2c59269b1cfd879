"""Chapter 3 on the facts layer: its analysis gives the numbers the page used to compute, its page words
them (following the data), its parameters are declared once, its advice names its synthetic workload,
and strings from a result stay text."""
import json
import re
from pathlib import Path

import pytest

from datajourney.chapters.c03_dataloader import analysis, page
from datajourney.chapters.c03_dataloader.params import Params
from datajourney.core import results
from datajourney.core.params import parameters_cell

CH = "03_dataloader"
HOSTS = [h for h in ("h200", "h100") if (results.REFERENCE_DIR / h / f"{CH}.json").exists()]
HOSTILE = "x` <img src=x onerror=alert(1)> `y"
FOLDER = Path(analysis.__file__).parent


def _steady(e, **where):
    m = e["cache"] == where.pop("cache")
    for k, v in where.items():
        m &= e[k] == v
    return e.loc[m, "steady_MBps"].mean()


@pytest.mark.parametrize("host", HOSTS)
def test_reference_facts_equal_what_the_tables_give(host):
    ref = results.load_reference(CH, host)
    f = analysis.analyse(ref)
    e = ref.table("epochs")
    for w in (0, 4):
        expected = (_steady(e, cache="cold", workers=w, kind="shard_in_order")
                    / _steady(e, cache="cold", workers=w, kind="small_files"))
        assert f.number(f"published_w{w}") == pytest.approx(expected)
        assert f[f"published_w{w}"].published == f"shard ÷ small files, workers={w}"
    w = max(e["workers"])
    assert f.number("shuffled_gap_max_workers") == pytest.approx(
        _steady(e, cache="cold", workers=w, kind="shard") / _steady(e, cache="cold", workers=w, kind="small_files"))
    cold = e[(e["cache"] == "cold") & (e["workers"] == w)]
    assert f.number("first_batch") == pytest.approx(1e3 * cold["first_batch_s"].mean())
    fb = 1e3 * cold["first_batch_s"]
    assert f["first_batch"].spread == pytest.approx((fb.min(), fb.max()))
    json.dumps(f.to_dict())
    assert set(analysis.EXPORTS) <= set(f.facts) | set(f.data) | {a.key for a in f.advice}


def test_advice_names_its_synthetic_workload():
    f = analysis.analyse(results.load_reference(CH))
    a = f.advice_for("small_files.num_workers")
    assert "synthetic" in a.workload and "no decoding, no model" in a.workload and "ResNet" not in a.workload
    assert a.snippet and f"num_workers={a.value}" in a.snippet
    compile(a.snippet, "snippet", "exec")


def test_findings_follow_reversed_data():
    ref = results.load_reference(CH)
    op = page.opening(analysis.analyse(ref))
    assert "faster than" in op.findings[0].text and op.findings[0].value > 1
    e = ref.table("epochs").copy()
    e["kind"] = e["kind"].map({"small_files": "shard_in_order", "shard_in_order": "small_files"}).fillna(e["kind"])
    rev = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, "epochs": e},
                         ref.metadata)
    facts = analysis.analyse(rev)
    op = page.opening(facts)
    assert "slower than" in op.findings[0].text and op.findings[0].value < 1
    assert facts.advice_for("small_files.layout").value == "one file per sample"


def test_no_parameter_read_with_get():
    for py in FOLDER.glob("*.py"):
        assert not re.search(r"\b(p|q|params|parameters)\.get\(", py.read_text()), py.name


def test_notebook_parameters_cell_is_generated_from_params():
    nb = json.loads((Path(__file__).parents[1] / "notebooks" / f"{CH}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    assert "".join(cell["source"]) == parameters_cell(Params)
    assert {"parameters", "remove-cell"} <= set(cell["metadata"]["tags"])


def _outside_code(md: str) -> str:
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", md, flags=re.S)


def test_strings_from_a_result_stay_text():
    """The strings of a result this page prints (the kinds and modes of its tables, the run id) stay text."""
    ref = results.load_reference(CH)
    hm = ref.table("handover_modes").copy() if "handover_modes" in ref.tables else None
    tables = dict(ref.tables)
    if hm is not None:
        hm.loc[hm["mode"] == "file name", "mode"] = HOSTILE
        tables["handover_modes"] = hm
    hostile = results.Result(ref.chapter, HOSTILE, ref.parameters, ref.fingerprint, tables, ref.metadata)
    facts = analysis.analyse(hostile)
    md = "\n".join([*(f.text for f in page.findings(facts)), *(f.text for f in page.opening(facts).findings),
                    *(a.text for a in page.opening(facts).actions), page.published_note(facts),
                    page.residency(facts), page.plateau_note(hostile)])
    assert "<img" not in _outside_code(md)


def test_no_target_words_or_python_literals_in_reader_text():
    facts = analysis.analyse(results.load_reference(CH))
    md = "\n".join([*(f.text for f in page.findings(facts)), page.published_note(facts), page.residency(facts),
                    *(a.text for a in page.opening(facts).actions)])
    assert not re.search(r"\b(target|met|True|False|None)\b", md), md
