"""Chapter 12: the diagnosis follows the data it reads, names what is missing, and the budget
model is the one the chart's JavaScript evaluates."""
import shutil

import pytest

from datajourney import diagnosis
from datajourney.book import results
from datajourney.book.pages import diagnosis as page
from datajourney.params import ParameterError

REF = results.REFERENCE_DIR / "h200"


def _run_with(tmp_path, chapters=None, edit=None, **params):
    """Diagnose a run directory holding the reference results of ``chapters`` (all by default),
    after ``edit(chapter, result)`` changed them."""
    for ch in chapters or diagnosis.SOURCES:
        r = results.Result.load(REF / f"{ch}.json")
        if edit:
            edit(ch, r)
        r.save(tmp_path)
    return diagnosis.run(run_dir=tmp_path, **params)


def test_reference_run_names_the_slowest_hop(tmp_path):
    res = _run_with(tmp_path)
    hops = res.table("hops")
    image = hops[hops["workload"] == "image"].dropna(subset=["capacity"])
    w = res.metadata["weakest"]["image"]
    assert w["capacity"] == image["capacity"].min() and w["key"] == image.loc[image["capacity"].idxmin(), "hop"]
    assert w["margin"] == pytest.approx(sorted(image["capacity"])[1] / w["capacity"])
    assert res.metadata["missing"] == []
    f = {x.key: x for x in page.findings(res)}
    assert w["label"] in f["weakest_image"].text and "not computed" not in f["weakest_image"].text


def test_slow_storage_becomes_the_weakest_link(tmp_path):
    """Reverse the reference: make one-file-per-sample reads 1,000× slower; the diagnosis must move."""
    def slow(ch, r):
        if ch == "02_random_vs_sequential":
            t = r.tables["size_sweep"]
            t.loc[t["pattern"] == "random", "MBps"] /= 1000

    res = _run_with(tmp_path, edit=slow)
    w = res.metadata["weakest"]["image"]
    assert w["key"] == "files" and w["next_key"] != "files"
    f = {x.key: x for x in page.findings(res)}
    assert "one file per image" in f["weakest_image"].text
    assert "weakest link storage: one file per image" in "\n".join(res.metadata["summary"])


def test_measured_pipeline_above_the_model_is_called_so(tmp_path):
    def fast(ch, r):
        if ch == "07_full_picture":
            r.tables["scenarios"]["images_per_s"] *= 3

    f = {x.key: x for x in page.findings(_run_with(tmp_path, edit=fast))}
    assert "above the model's limit" in f["predicted_vs_measured"].text and f["predicted_vs_measured"].value > 100


def test_workers_needed_follows_the_step_time(tmp_path):
    def slow_cpu(ch, r):
        if ch == "07_full_picture":
            for c in diagnosis.CPU_STAGES:
                r.tables["steps"][c] *= 50

    res = _run_with(tmp_path, edit=slow_cpu)
    f = {x.key: x for x in page.findings(res)}
    assert f["workers_needed"].value > res.metadata["image_workload"]["cores"]
    assert "cannot keep up" in f["workers_needed"].text
    assert res.metadata["weakest"]["image"]["key"] == "cpu"


def test_partial_run_names_the_missing_chapters(tmp_path):
    res = _run_with(tmp_path, chapters=["07_full_picture"])
    assert set(res.metadata["missing"]) == set(diagnosis.SOURCES) - {"07_full_picture"}
    f = {x.key: x for x in page.findings(res)}
    assert "chapter 2 not in this run" in f["weakest_image"].text
    assert "chapter 6 not in this run" in f["weakest_image"].text
    assert res.metadata["weakest"]["image"]["key"] in ("cpu", "gpu")
    assert res.metadata["weakest"]["tokens"] is None  # no measured hop for tokens: no verdict
    assert "no hop could be compared" in f["weakest_tokens"].text
    table = page.checklist(res, None)
    assert (table.loc[table["chapter"] == 2, "this run"] == "not run").all()


def test_empty_run_still_renders(tmp_path):
    res = diagnosis.run(run_dir=tmp_path)
    assert res.metadata["found"] == [] and res.metadata["weakest"] == {"image": None, "tokens": None}
    assert page.budget_figure(res) is None
    assert len(page.findings(res)) >= 2


def test_budget_model_matches_the_hops(tmp_path):
    """The chart starts from the run's own workload, so the model gives the table's rates there."""
    res = _run_with(tmp_path)
    m = page.budget_model(page.budget_inputs(res))
    hops = res.table("hops").set_index(["workload", "hop"])["capacity"]
    for key in ("files", "shard", "cpu", "pcie"):
        assert m[key] == pytest.approx(hops[("image", key)])
    assert m["demand"] == pytest.approx(hops[("image", "gpu")])


@pytest.mark.parametrize("name,value", [("token_bytes", 3), ("llm_tokens_per_s", 0), ("tokens_per_batch", 0),
                                        ("llm_tokens_per_s", float("nan"))])
def test_bad_parameters_fail_before_work(tmp_path, name, value):
    params = dict(llm_tokens_per_s=1e6, token_bytes=4, tokens_per_batch=1024, run_dir=tmp_path)
    params[name] = value
    with pytest.raises(ParameterError, match=name):
        diagnosis.run(**params)
    assert not list(tmp_path.iterdir())


def test_checklist_rows_exist_in_their_chapters():
    """Every checklist row names a finding its chapter's page really computes on the reference run."""
    import importlib

    from datajourney.book.chapters import lookup

    for ch, key in diagnosis.CHECKLIST:
        keys = {f.key for f in importlib.import_module(lookup(ch).page).findings(results.load_reference(ch))}
        assert key in keys, (ch, key)
        assert (ch, key) in page.PRACTICE


def test_copy_leaves_reference_untouched(tmp_path):
    before = {p.name: p.read_bytes() for p in REF.glob("0*.json")}
    _run_with(tmp_path)
    assert before == {p.name: p.read_bytes() for p in REF.glob("0*.json")}
    shutil.rmtree(tmp_path)
