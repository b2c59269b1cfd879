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


def _swapped(ref, column, a, b):
    """A copy of ``ref`` whose epochs have ``a`` and ``b`` of ``column`` swapped."""
    e = ref.table("epochs").copy()
    e[column] = e[column].map({a: b, b: a}).fillna(e[column]).astype(e[column].dtype)
    return results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, "epochs": e},
                          ref.metadata)


def test_workers_gain_note_follows_reversed_data():
    ref = results.load_reference(CH)
    note = page.workers_gain_note(analysis.analyse(ref))
    assert "small files, shuffled: " in note and "faster than none" in note.split("small files, shuffled: ")[1][:40]
    rev = page.workers_gain_note(analysis.analyse(_swapped(ref, "workers", 0, 4)))
    assert "slower than none" in rev.split("small files, shuffled: ")[1][:40]


def test_cold_vs_warm_note_follows_reversed_data():
    ref = results.load_reference(CH)
    note = page.cold_vs_warm_note(analysis.analyse(ref))
    head = note.split("small files, shuffled, `num_workers=0`: ")[1][:40]
    rev = page.cold_vs_warm_note(analysis.analyse(_swapped(ref, "cache", "cold", "warm")))
    rhead = rev.split("small files, shuffled, `num_workers=0`: ")[1][:40]
    assert ("faster" in head) == ("slower" in rhead)


def test_in_order_note_follows_reversed_data():
    ref = results.load_reference(CH)
    note = page.in_order_note(analysis.analyse(ref))
    assert "slower than no workers" in note
    e = ref.table("epochs")
    w = max(e["workers"])
    assert page.in_order_note(analysis.analyse(_swapped(ref, "workers", 0, w))).count("slower than no workers") \
        < note.count("slower than no workers")


def test_first_batch_and_spread_notes_word_facts():
    ref = results.load_reference(CH)
    f = analysis.analyse(ref)
    note = page.first_batch_note(f)
    assert "slower than that" in note
    rev = page.first_batch_note(analysis.analyse(_swapped(ref, "workers", 0, max(ref.table("epochs")["workers"]))))
    assert "faster than that" in rev
    assert all(x["cv"] > 0.2 for x in f.data["spread"])
    assert ("No configuration varied" in page.spread_notes(f)) == (not f.data["spread"])
