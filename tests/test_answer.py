"""Chapter 12 answers "what do I change": per workload the weakest link, the remedy row the data pick,
the expected gain, the GPUs the host feeds at MLPerf Storage's 90% bar, the caveats computed from the
data, and a token step that is measured, not stated."""
import math

import pytest

from datajourney.book import report
from datajourney.chapters.c12_conclusion import experiment as diagnosis
from datajourney.chapters.c12_conclusion import page
from datajourney.core import findings as fx
from datajourney.core import results

REF = results.REFERENCE_DIR / "h200"
STATED = dict(llm_tokens_per_s=1e6)
TINY = dict(llm_tokens_per_s=None, token_model="tiny", tokens_per_batch=256, token_seq_len=128, token_steps=1)


def _run_with(tmp_path, edit=None, **params):
    for ch in diagnosis.SOURCES:
        r = results.Result.load(REF / f"{ch}.json")
        if edit:
            edit(ch, r)
        r.save(tmp_path)
    return diagnosis.run(run_dir=tmp_path, **{**STATED, **params})


def test_reference_answer_names_a_remedy_and_the_gpus_fed(tmp_path):
    res = _run_with(tmp_path)
    a = diagnosis.answer(res)["image"]
    w, fed = a["weakest"], a["fed"]
    assert w["key"] == "gpu" and a["remedy"]["gain"] is None
    assert a["margin"] == f"the CPU could prepare {fx.times(w['margin'])} the images the GPU consumes"
    h = res.table("hops").set_index(["workload", "hop"])["capacity"]
    shared = min(max(h[("image", "files")], h[("image", "shard")]), h[("image", "cpu")])
    assert fed["gpus"] == math.floor(shared / (diagnosis.AU_MIN * h[("image", "gpu")])) and fed["gpus"] >= 1
    wl = res.metadata["image_workload"]
    assert a["remedy"]["setting"] == f"num_workers={math.ceil(wl['cpu_ms'] * wl['batch_size'] / wl['step_ms'])}"
    op = page.opening(res)
    assert "[chapter 4](04_cpu_starvation.ipynb)" in op.actions[0].text and "num_workers=" in op.actions[0].snippet
    summary = "\n".join(res.metadata["summary"])
    assert "do: chapter 4: num_workers=" in summary and f"feeds {fed['gpus']} such GPUs" in summary
    assert "CPU binds first" in op.actions[0].text


def test_slow_storage_picks_the_shard_row_with_its_gain(tmp_path):
    """One file per image 1,000× slower: the remedy moves to chapter 2's shards, with the gain up to
    the next hop, and the storage caveat follows chapter 2's own verdict (guest-cold on the reference)."""
    def slow(ch, r):
        if ch == "02_random_vs_sequential":
            t = r.tables["size_sweep"]
            t.loc[t["pattern"] == "random", "MBps"] /= 1000

    res = _run_with(tmp_path, edit=slow)
    a = diagnosis.answer(res)["image"]
    assert a["weakest"]["key"] == "files" and a["remedy"]["chapter"] == "02_random_vs_sequential"
    assert a["remedy"]["gain"] == pytest.approx(a["weakest"]["margin"])
    assert a["margin"].startswith("the GPU could consume ") and "one-file-per-sample storage" in a["margin"]
    assert res.metadata["storage_guest_cold"] is True
    assert any("guest-cold" in c for c in a["caveats"])
    text = page.opening(res).actions[0].text
    assert "shards read in order" in text and f"up to {fx.times(a['remedy']['gain'])} faster" in text
    res.metadata["storage_guest_cold"] = False   # a disk whose cold reads reached the device: no caveat
    assert not any("guest-cold" in c for c in diagnosis.answer(res)["image"]["caveats"])


def test_cpu_only_run_is_worded_for_cpus(tmp_path):
    """Chapter 7 without a GPU: the step is the CPU's, and no GPU count is claimed."""
    def cpu(ch, r):
        if ch == "07_full_picture":
            r.metadata["device"] = "cpu"

    res = _run_with(tmp_path, edit=cpu)
    summary = res.metadata["summary"][0]
    assert "weakest link GPU" not in summary and "CPU (no GPU here)" in summary and "such GPUs" not in summary
    op = page.opening(res)
    assert "the model's step on the CPU" in op.findings[0].text and "GPU's own step" not in op.findings[0].text
    assert "no GPU here" in op.actions[0].text and diagnosis.answer(res)["image"]["fed"] is None


def test_the_token_step_is_measured(tmp_path):
    """With no stated demand the token hop is a timed GPT-2 step (a tiny one here, on the CPU)."""
    res = _run_with(tmp_path, **TINY)
    t = res.metadata["token_step"]
    assert t["model"] == "tiny" and t["tokens_per_batch"] == 256 and t["tokens_per_s"] > 0
    assert t["tokens_per_s"] == pytest.approx(256 * 1e3 / t["median_ms"])
    assert len(res.table("token_step")) == 1
    h = res.table("hops")
    gpu = h[(h["workload"] == "tokens") & (h["hop"] == "gpu")].iloc[0]
    assert gpu["capacity"] == pytest.approx(t["tokens_per_s"]) and "stated" not in gpu["label"]
    f = {x.key: x for x in page.hop_notes(res, "tokens")}["token_step"]
    assert f.value == pytest.approx(t["tokens_per_s"])
    assert "stated demand" not in page.opening(res).findings[1].text


def test_chapter_12_opening_follows_reversed_data(tmp_path):
    """Reverse the reference: all-reduce bandwidth 100× lower. The gradients answer turns from "the
    step limits, keep the direct path" to "the all-reduce limits", with a gain up to the step."""
    ref = page.opening(_run_with(tmp_path / "ref"))
    assert "the GPU's own step" in ref.findings[2].text and "keep pace with" in ref.findings[2].text
    assert "keep NCCL's direct" in ref.actions[2].text

    def slow(ch, r):
        if ch == "11_gpu_to_gpu":
            b = r.tables["bench"]
            b[["algbw_GBps", "busbw_GBps"]] /= 100
            b["time_ms"] *= 100

    op = page.opening(_run_with(tmp_path / "slow", edit=slow))
    f = op.findings[2]
    assert "the weakest link is the all-reduce" in f.text and "the GPU could run" in f.text and f.value > 1
    assert "keep NCCL's direct" not in op.actions[2].text and "faster" in op.actions[2].text
    for x in op.findings:
        assert fx.words(x.text) <= fx.OPENING_WORDS


def test_checklist_shows_angle_brackets():
    """'/proc/<pid>/io' reaches the page as text, not as an HTML tag the browser drops."""
    html = report.table_html(page.checklist(results.load_reference(diagnosis.CHAPTER), None))
    assert "/proc/&lt;pid&gt;/io" in html and "<pid>" not in html


def test_notebook_opens_with_the_answer_and_moved_the_reference_tables():
    import nbformat

    from datajourney.chapters import registry

    nb = nbformat.read(registry.lookup("12").notebook, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    first = next(c for c in code if "opening.show(page.opening" in c)
    assert "caveats_markdown" in first
    assert not any("stability." in s for s in code)
    assert not any("key_results(" in s for s in code)   # its list printed as a repr under the results
