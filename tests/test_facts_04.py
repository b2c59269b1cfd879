"""Chapter 4 on the facts layer: the analysis reproduces the page's old numbers from the reference result,
its workload is named as the synthetic one it is, findings follow reversed data, parameters are declared once,
and strings from a result never reach the page unescaped."""
import json
import re
from pathlib import Path

import pytest

from datajourney.chapters.c04_cpu_starvation import analysis, page
from datajourney.chapters.c04_cpu_starvation.params import Params
from datajourney.core import results
from datajourney.core.params import parameters_cell

CHAPTER_DIR = Path(analysis.__file__).parent
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "04_cpu_starvation.ipynb"
HOSTILE = "x` <img src=x onerror=alert(1)> `y"


def _ref():
    return results.load_reference("04_cpu_starvation")


def _with(ref, **tables):
    return results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, **tables},
                          dict(ref.metadata))


def test_facts_of_the_reference_equal_the_tables():
    ref = _ref()
    f = analysis.analyse(ref)
    s = ref.table("summary")
    pub = s[s["experiment"] == "published case"].set_index("workers")
    assert f["published_w0"].value == pytest.approx(pub.loc[0, "wait_ms"])
    assert f["published_w"].value == pytest.approx(pub.loc[4, "wait_ms"])
    assert f["published_w0_idle"].value == pytest.approx(100 * pub.loc[0, "idle_share"])
    sw = s[(s["experiment"] == "worker sweep") & (s["work"] == "tokenize")]
    first = int(sw[sw["au"] >= 0.9]["workers"].min())
    assert f["workers_to_keep_up"].value == first == 4
    eb = ref.table("epoch_boundary")
    eb = eb[(eb["epoch"] == 1) & (eb["step_in_epoch"] == 0) & (eb["prefetch_factor"] == 2)]
    per = eb[eb["persistent_workers"].astype(bool)]["wait_ms"].mean()
    non = eb[~eb["persistent_workers"].astype(bool)]["wait_ms"].mean()
    assert f["epoch_boundary"].value == pytest.approx(per / non)
    assert f["published_w0"].published == "data wait per step, W=0" and f["published_w"].published == (
        "data wait per step, W=4")
    a = f.advice_for("synthetic.num_workers")
    assert a.value == 4 and "synthetic tokenising work" in a.workload
    assert f.advice_for("image.num_workers") is None
    compile(a.snippet, "snippet", "exec")
    assert set(analysis.EXPORTS) <= set(f.facts) | set(f.data)
    json.dumps(f.to_dict())


def test_findings_follow_reversed_data():
    """Swap the epoch-boundary runs with and without persistent workers: faster turns to slower and the
    advice to leave them off, without the argument in the snippet."""
    ref = _ref()
    op = page.opening(analysis.analyse(ref))
    assert "faster than" in op.findings[2].text and op.findings[2].value < 1
    assert "persistent_workers=True" in op.actions[0].snippet
    eb = ref.table("epoch_boundary").copy()
    eb["persistent_workers"] = ~eb["persistent_workers"].astype(bool)
    f = analysis.analyse(_with(ref, epoch_boundary=eb))
    op = page.opening(f)
    assert "slower than" in op.findings[2].text and op.findings[2].value > 1
    assert "persistent_workers" not in op.actions[0].snippet
    assert "`persistent_workers=False`" in op.actions[1].text


def test_no_get_on_parameters():
    for path in CHAPTER_DIR.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\b(p|q|params|parameters|res\.parameters)\.get\(", text), path.name


def test_notebook_parameters_cell_is_generated_from_params():
    nb = json.loads(NOTEBOOK.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in (c["metadata"].get("tags") or []))
    src = "".join(cell["source"])
    assert src == parameters_cell(Params)   # the book's options are part of the generated cell


def _unescaped(markdown: str) -> bool:
    text = re.sub(r"(?s)(`{3,}).*?\1", "", markdown)
    while True:
        m = re.search(r"(`+)(.+?)\1", text)
        if not m:
            break
        text = text[:m.start()] + text[m.end():]
    return "<img" in text


def test_hostile_strings_never_reach_the_page_unescaped():
    ref = _ref()
    s = ref.table("summary").copy()
    s["work"] = s["work"].where(s["work"] != "tokenize", HOSTILE)
    pf = ref.table("prefetch").copy()
    pf["cost"] = pf["cost"].where(pf["cost"] != "constant", HOSTILE)
    res = _with(ref, summary=s, prefetch=pf)
    res.metadata["step_kind"] = HOSTILE
    f = analysis.analyse(res)
    op = page.opening(f)
    texts = [x.text for x in page.findings(f)] + [x.text for x in op.findings] + [a.text for a in op.actions]
    texts.append(page.takeaways(f))
    assert any("img" in t for t in texts)   # the hostile names did reach the page, escaped
    for t in texts:
        assert not _unescaped(t), t
    assert "no" in set(page.sweep_table(res)["keeps up"]) and "False" not in page.sweep_table(res).to_string()
    assert set(page.boundary_table(res)["persistent_workers"]) == {"on", "off"}
