"""Chapter 5 on the facts layer: the analysis reproduces the page's old numbers from the reference result,
findings follow reversed data, parameters are declared once, and strings from a result never reach the page
unescaped."""
import json
import re
from pathlib import Path

import pytest

from datajourney.chapters.c05_padding_tax import analysis, page
from datajourney.chapters.c05_padding_tax.params import Params
from datajourney.core import results
from datajourney.core.params import parameters_cell

CHAPTER_DIR = Path(analysis.__file__).parent
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "05_padding_tax.ipynb"
HOSTILE = "x` <img src=x onerror=alert(1)> `y"


def _ref():
    return results.load_reference("05_padding_tax")


def _with(ref, **tables):
    return results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, **tables},
                          dict(ref.metadata))


def test_facts_of_the_reference_equal_the_tables():
    ref = _ref()
    f = analysis.analyse(ref)
    fb = ref.table("first_batch").set_index("strategy")["efficiency"]
    al = ref.table("strategies").set_index("strategy")["efficiency"]
    c = ref.table("cost").set_index("strategy")["seconds"]
    assert f["first_batch_ratio"].value == pytest.approx(fb["greedy_pack"] / fb["pad_to_context"])
    assert f"{f['first_batch_ratio'].value:.1f}" == "42.4"
    assert f["all_samples"].value == pytest.approx(al["greedy_pack"] / al["pad_to_longest"])
    assert f["all_samples_vs_context"].value == pytest.approx(al["greedy_pack"] / al["pad_to_context"])
    assert f"{f['all_samples_vs_context'].value:.1f}" == "56.3"
    assert f["packing_vs_longest"].value == pytest.approx(c["greedy_pack"] / c["pad_to_longest"])
    assert 1.5 < 1 / f["packing_vs_longest"].value < 2.5          # the timed baseline a reader would use
    assert f["packing_vs_context"].value == pytest.approx(c["greedy_pack"] / c["pad_to_context"])
    assert f["first_batch_pad_to_context"].published == "efficiency, pad to context"
    assert f["first_batch_ratio"].published == "packed ÷ pad to context"
    assert f["all_samples"].published is None and f["packing_vs_longest"].published is None
    a = f.advice_for("tokens.batching")
    assert a.value == "greedy_pack" and a.knob == "batching" and a.default == "padding each batch to its longest sample"
    assert (f[a.gain].of, f[a.gain].basis) == ("time.greedy_pack", "time.pad_to_longest")
    assert f.number(a.gain) == pytest.approx(f.number("packing_vs_longest"))
    compile(a.snippet, "snippet", "exec")
    assert "collate_packed" in a.snippet and ", 32, 4096)" in a.snippet   # what was timed, with its values
    shares = f.data["padding_shares"]
    assert [r["strategy"] for r in shares] == list(al.index)
    assert shares[0]["efficiency"] == pytest.approx(al["pad_to_context"]) and set(shares[0]) == {
        "strategy", "label", "efficiency"}
    assert set(analysis.EXPORTS) <= set(f.facts) | set(f.data)
    json.dumps(f.to_dict())


def test_the_opening_leads_with_the_timed_comparison_and_names_each_baseline():
    op = page.opening(analysis.analyse(_ref()))
    assert [x.key for x in op.findings] == ["packing_vs_longest", "all_samples", "all_samples_vs_context"]
    assert "faster than padding each batch to its longest sample" in op.findings[0].text  # one timed sentence,
    assert "faster than padding every sample to the context" in op.findings[0].text  # both baselines named
    assert op.actions[0].text.startswith("For GPT-2 architecture") and "use greedy packing in sample order" in (
        op.actions[0].text)
    assert "batching=" not in op.actions[0].text  # no pseudo-setting: the chapter's name for a layout


def test_findings_follow_reversed_data():
    """Give packing the time of padding to the longest sample and the reverse: faster turns to slower and the
    advice from packing to padding to the longest."""
    ref = _ref()
    c = ref.table("cost").copy().set_index("strategy")
    cols = ["seconds", "seconds_low", "seconds_high"]
    pack, longest = c.loc["greedy_pack", cols].to_numpy(), c.loc["pad_to_longest", cols].to_numpy()
    c.loc["pad_to_longest", cols] = pack
    for s in ("greedy_pack", "best_fit_decreasing", "bucketed"):
        c.loc[s, cols] = longest * 1.5
    f = analysis.analyse(_with(ref, cost=c.reset_index()))
    cost = next(x for x in page.findings(f) if x.key == "packing_vs_longest")
    assert "slower than padding each batch to its longest sample" in cost.text
    assert "faster than padding each" not in cost.text
    assert f.advice_for("tokens.batching").value == "pad_to_longest"
    assert "collate_padded" in f.advice_for("tokens.batching").snippet


def test_no_get_on_parameters():
    for path in CHAPTER_DIR.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\b(p|q|params|parameters|res\.parameters)\.get\(", text), path.name


def test_notebook_parameters_cell_is_generated_from_params():
    nb = json.loads(NOTEBOOK.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in (c["metadata"].get("tags") or []))
    src = "".join(cell["source"])
    assert src == parameters_cell(Params)   # the book's options are part of the generated cell


def _hostile(ref):
    res = _with(ref)
    res.parameters = {**ref.parameters, "template": HOSTILE, "eos": HOSTILE, "n_samples": 400}
    m = res.metadata
    m["template"] = {**m["template"], "name": HOSTILE, "with_input": HOSTILE, "example": HOSTILE + "\n```\n<img>"}
    m["eos"] = {"mode": HOSTILE}
    m["transformers"] = HOSTILE
    m["text_source"] = {"dataset": HOSTILE, "tokenizer": HOSTILE}
    res.fingerprint = {**ref.fingerprint, "gpu": {**(ref.fingerprint.get("gpu") or {}), "name": HOSTILE}}
    iso = ref.table("isolation").copy()
    iso["transformers"] = HOSTILE
    t = ref.table("templates").copy()
    t["template"] = HOSTILE
    t["eos"] = HOSTILE
    res.tables = {**res.tables, "isolation": iso, "templates": t}
    return res


def _unescaped(markdown: str) -> bool:
    """An ``<img`` outside every code span and fence."""
    text = re.sub(r"(?s)(`{3,}).*?\1", "", markdown)
    while True:
        m = re.search(r"(`+)(.+?)\1", text)
        if not m:
            break
        text = text[:m.start()] + text[m.end():]
    return "<img" in text


def test_hostile_strings_never_reach_the_page_unescaped():
    res = _hostile(_ref())
    f = analysis.analyse(res)
    op = page.opening(f)
    texts = [x.text for x in page.findings(f)] + [x.text for x in op.findings] + [a.text for a in op.actions]
    texts += [page.template_sentence(res), page.template_note(f), page.population_note(f),
              page.cost_note(f), page.collator_note(f), page.takeaways(f)]
    for t in texts:
        assert not _unescaped(t), t
    assert op.actions[0].snippet is None or HOSTILE not in op.actions[0].snippet


# ---------------------------------------------------------------------------- the notes word facts
def _swap(table, a, b, cols, key="strategy"):
    t = table.copy().set_index(key)
    t.loc[[a, b], cols] = t.loc[[b, a], cols].to_numpy()
    return t.reset_index()


def test_template_note_follows_reversed_data():
    ref = _ref()
    note = page.template_note(analysis.analyse(ref))
    assert "real tokens, 42.4× more than padding every sample to the context" in note
    t = ref.table("templates").copy()
    t[["first_batch_pad_to_context", "first_batch_greedy_pack"]] = t[
        ["first_batch_greedy_pack", "first_batch_pad_to_context"]].to_numpy()
    note = page.template_note(analysis.analyse(_with(ref, templates=t)))
    assert "42.4× less than padding every sample to the context" in note and "× more than" not in note


def test_population_note_follows_reversed_data():
    ref = _ref()
    assert "the gain is 1.33× more than the gain in the first batch" in page.population_note(analysis.analyse(ref))
    fb, al = ref.table("first_batch").copy(), ref.table("strategies").copy()
    e_fb = fb.set_index("strategy")["efficiency"]
    e_al = al.set_index("strategy")["efficiency"]
    fb["efficiency"] = [e_al[s] for s in fb["strategy"]]
    al["efficiency"] = [e_fb[s] for s in al["strategy"]]
    note = page.population_note(analysis.analyse(_with(ref, first_batch=fb, strategies=al)))
    assert "the gain is 1.33× less than the gain in the first batch" in note


def test_cost_and_breakdown_notes_follow_reversed_data():
    ref = _ref()
    note = page.cost_note(analysis.analyse(ref))
    assert "the measured time gives packing 21.0× faster than padding every sample to the context" in note
    assert "48.3× slower than the output layer and loss of a full padded step" in note
    cost = _swap(ref.table("cost"), "pad_to_context", "greedy_pack", ["seconds", "seconds_low", "seconds_high"])
    shp = ref.table("cost_shapes").copy()
    full = (shp["rows"] == shp["rows"].max()) & (shp["row_len"] == shp["row_len"].max())
    pad, pack = full & (shp["strategy"] == "pad_to_context"), full & (shp["strategy"] == "greedy_pack")
    head_pad, head_pack = shp.loc[pad, "head_ms"].iloc[0], shp.loc[pack, "head_ms"].iloc[0]
    shp.loc[pad, "head_ms"], shp.loc[pack, "head_ms"] = head_pack, head_pad
    note = page.cost_note(analysis.analyse(_with(ref, cost=cost, cost_shapes=shp)))
    assert "the measured time gives packing 21.0× slower than padding every sample to the context" in note
    assert "48.3× faster than the output layer and loss of a full padded step" in note


def test_takeaways_and_advice_without_timing_say_what_they_measure():
    ref = _ref()
    untimed = _with(ref)
    untimed.tables = {k: v for k, v in ref.tables.items() if k not in ("cost", "cost_shapes", "cost_steps")}
    f = analysis.analyse(untimed)
    a = f.advice_for("tokens.batching")
    assert (f[a.gain].of, f[a.gain].basis) == ("per_position.greedy_pack", "per_position.pad_to_longest")
    assert ": 3.1× more than the real tokens per computed position of padding each batch to its longest sample" in (
        page.opening(f).actions[0].text)
    assert "are 3.1× more than padding each batch" in page.takeaways(f)
    al = _swap(ref.table("strategies"), "greedy_pack", "pad_to_longest", ["efficiency"])
    t = page.takeaways(analysis.analyse(_with(ref, strategies=al)))
    assert "are 3.1× less than padding each batch" in t and "more than padding each" not in t


def test_collator_note_follows_the_check():
    ref = _ref()
    assert "identical input ids, position ids, labels" in page.collator_note(analysis.analyse(ref))
    c = ref.table("collator").copy()
    c["position_ids_equal"] = False
    assert "different position ids" in page.collator_note(analysis.analyse(_with(ref, collator=c)))
