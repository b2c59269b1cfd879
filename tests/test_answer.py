"""Chapter 12 answers "what do I change": per workload the weakest link, the remedy (the advice of the
chapter that measured it, worded as there), the GPUs the host feeds at MLPerf Storage's 90% bar, the
caveats computed from the data, and a token step that is measured, not stated."""

from types import SimpleNamespace

import pytest
from helpers import analysed_references, with_default_rung

from datajourney.book import harness, registry, report
from datajourney.chapters import wording
from datajourney.chapters.c12_conclusion import analysis, page
from datajourney.core import phrasing as fx
from datajourney.core import results

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

REF = results.REFERENCE_DIR / "h200"
STATED = dict(llm_tokens_per_s=1e6)
TINY = dict(llm_tokens_per_s=None, token_model="tiny", tokens_per_batch=256, token_seq_len=128, token_steps=1)


def _run_with(tmp_path, edit=None, **params):
    referenced = [c for c in registry.sources("12_conclusion") if (REF / f"{c}.json").is_file()]
    analysed_references(tmp_path, REF, referenced, edit)
    return harness.run("12_conclusion", run_dir=tmp_path, **{**STATED, **params})


def _hop(res, wl, key):
    return next(h["capacity"] for h in res.facts.data["hops"] if h["workload"] == wl and h["hop"] == key)


def test_reference_answer_names_a_remedy_and_the_gpus_fed(tmp_path):
    """Each workload's action is its chapter's verdict in that chapter's words; the token count of GPUs fed is the
    hop model's (one advised loader per rank), and the image line states no count without a pipeline of its own
    measured end to end with the priced step."""
    res = _run_with(tmp_path)
    facts = res.facts
    op = page.opening(facts)
    recipe = facts.get("07.recipe")   # chapter 7's combined recipe, where it exports one that clears its threshold
    # the first screen's two workloads; the data-parallel step's action in its own section, beside its line
    said = page.data_parallel_answer(facts).split("**What to do**: ")
    assert len(said) == 2
    actions = [*op.actions, page.phrasing.Action(said[1])]
    for wl, action in zip(("image", "tokens", "gradients"), actions, strict=True):
        w = facts.data[f"{wl}.weakest"]
        chapter, keys = analysis.REMEDY[(wl, w["key"])]
        src = registry.lookup(chapter).analyse(results.Result.load(REF / f"{chapter}.json"))
        advice = next(src.advice_for(k) for k in keys if src.advice_for(k) is not None)
        assert f"[chapter {int(chapter[:2])}]({chapter}.ipynb)" in action.text
        if wl == "image" and recipe is not None:
            assert wording.recipe_sentence(facts, page.RECIPE_KEY) in action.text
        else:
            assert page.verdict_first(advice, src) in action.text
    cpu = next(h for h in facts.data["hops"] if h["hop"] == "token_cpu")
    fed = facts["tokens.gpus_fed"].value
    assert fed == cpu["gpus"] and f"could feed **{fed}** such GPUs" in op.findings[1].text
    # the image count only with a pipeline of chapter 7's measured end to end with the priced step: its recipe
    assert (facts.get("image.gpus_fed") is None) == (recipe is None) == ("could feed **" not in op.findings[0].text)
    assert not any("could feed **" in a.text for a in op.actions)   # a count is the workload's line, never the advice
    assert any(f"could feed {fed} such GPUs" in line for line in page.summary_lines(facts))


def test_slow_storage_picks_the_shard_remedy_and_the_caveat_follows_chapter_2(tmp_path):
    """One file per image 1,000× slower: the remedy moves to chapter 2's layout advice, and the storage
    caveat follows chapter 2's own verdict (guest-cold on the reference)."""
    def slow(ch, r):
        if ch == "02_random_vs_sequential":
            t = r.tables["size_sweep"]
            t.loc[t["pattern"] == "random", "MBps"] /= 1000

    res = _run_with(tmp_path, edit=slow)
    assert res.facts.data["image.weakest"]["key"] == "files"
    assert "[chapter 2](02_random_vs_sequential.ipynb)" in page.opening(res.facts).actions[0].text
    guest = res.facts.data["storage_guest_cold"]
    assert ("guest-cold" in page.caveats_markdown(res.facts)) == (guest is True)
    res.facts.data["storage_guest_cold"] = False   # a disk whose cold reads reached the device: no caveat
    assert page.caveats_markdown(res.facts) == ""


def test_cpu_only_run_is_worded_for_cpus(tmp_path):
    """Chapter 7 without a GPU: the step is the CPU's, and no GPU count is claimed."""
    def cpu(ch, r):
        if ch == "07_full_picture":
            r.metadata["device"] = "cpu"

    res = _run_with(tmp_path, edit=cpu)
    op = page.opening(res.facts)
    assert "on a CPU" in op.findings[0].text and "GPU's own step" not in op.findings[0].text
    assert "image.gpus_fed" not in res.facts
    assert "No GPU ran here" in page.count_note(res.facts, "image").text


def test_the_token_step_is_measured(tmp_path):
    """With no stated demand the token hop is a timed GPT-2 step (a tiny one here, on the CPU)."""
    res = _run_with(tmp_path, **TINY)
    t = res.metadata["token_step"]
    assert t["model"] == "tiny" and t["tokens_per_batch"] == 256 and t["tokens_per_s"] > 0
    assert t["tokens_per_s"] == pytest.approx(256 * 1e3 / t["median_ms"])
    assert len(res.table("token_step")) == 1
    assert _hop(res, "tokens", "gpu") == pytest.approx(t["tokens_per_s"])
    assert res.facts["token_step"].number == pytest.approx(t["tokens_per_s"])
    assert "stated demand" not in page.opening(res.facts).findings[1].text


def test_chapter_12_opening_follows_reversed_data(tmp_path):
    """Reverse the reference: DDP on N GPUs at a third of one GPU's steps/s (chapter 11's measured cost). The
    data-parallel answer follows it: each GPU kept about a third of one GPU's steps/s, and the exchange's row is
    slower than the step."""
    def slow(ch, r):
        if ch == "11_gpu_to_gpu":
            with_default_rung(r)
            w = r.tables["windows"]
            w.loc[w["world"] > 1, "steps_per_s"] /= 3

    ref = _run_with(tmp_path / "ref").facts
    facts = _run_with(tmp_path / "slow", edit=slow).facts
    kept = facts["11.ddp_default_eff"]
    assert kept.number == pytest.approx(ref.number("11.ddp_default_eff") / 3, rel=0.05)
    f = next(x for x in page.findings(facts) if x.key == kept.key)
    assert f"lost **{fx.value(facts['11.ddp_default_loss'], runs=False)}** of one GPU's steps/s" in f.text
    assert f.text in page.data_parallel_answer(facts)
    assert "slower" in page.hops_display(SimpleNamespace(facts=facts), "gradients").iloc[1]["against the step's need"]
    for x in [*page.opening(facts).findings, f]:
        assert fx.words(x.text) <= fx.OPENING_WORDS + 10


def test_checklist_shows_angle_brackets(tmp_path):
    """'/proc/<pid>/io' reaches the page as text, not as an HTML tag the browser drops."""
    html = report.table_html(page.checklist(_run_with(tmp_path), None))
    assert "/proc/&lt;pid&gt;/io" in html and "<pid>" not in html


def test_notebook_opens_with_the_answer():
    import nbformat

    nb = nbformat.read(registry.lookup("12").notebook, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    first = next(c for c in code if "opening.show(page," in c)
    assert "caveats_markdown" in first
    assert not any("stability." in s for s in code)
