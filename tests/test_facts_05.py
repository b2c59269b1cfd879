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
    assert 1.8 < 1 / f["packing_vs_longest"].value < 2.0          # the timed baseline a reader would use
    assert f["packing_vs_context"].value == pytest.approx(c["greedy_pack"] / c["pad_to_context"])
    assert f["first_batch_pad_to_context"].published == "efficiency, pad to context"
    assert f["first_batch_ratio"].published == "packed ÷ pad to context"
    assert f["all_samples"].published is None and f["packing_vs_longest"].published is None
    a = f.advice_for("tokens.batching")
    assert a.value == "greedy_pack" and a.gain == "packing_vs_longest" and a.knob == "batching"
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
    assert [x.key for x in op.findings] == ["packing_vs_longest", "packing_vs_context", "all_samples"]
    assert "faster than padding each batch to its longest sample" in op.findings[0].text
    assert "faster than padding every sample to the context" in op.findings[1].text
    assert op.actions[0].text.startswith("For GPT-2 architecture") and "`batching='greedy_pack'`" in op.actions[0].text


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
    assert src.startswith(parameters_cell(Params) + "\n")
    rest = src[len(parameters_cell(Params)) + 1:]
    assert {line.split("=")[0].strip() for line in rest.splitlines() if line.strip()} == {
        "run_dir", "reference_host", "is_reference_run", "replay"}


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
    texts += [page.template_sentence(res), page.template_note(res), page.population_note(res),
              page.cost_note(res), page.collator_note(res), page.takeaways(res)]
    for t in texts:
        assert not _unescaped(t), t
    assert op.actions[0].snippet is None or HOSTILE not in op.actions[0].snippet
