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


def test_model_walkthrough_follows_reversed_data():
    """Swap D·B/W and G: the batch that came faster than the step now comes slower."""
    ref = _ref()
    note = page.model_walkthrough(analysis.analyse(ref))
    assert "deliver one every 40 ms, 1.25× faster than the calibrated step G" in note
    f = analysis.analyse(ref)
    g, per = f.number("step_g"), f.number("published_w_per_batch")
    s = ref.table("summary").copy()
    row = (s["experiment"] == "published case") & (s["workers"] == 4)
    s.loc[row, "d_ms"] = g * 4 / int(s.loc[row, "batch_size"].iloc[0])
    res = _with(ref, summary=s)
    res.metadata["step_steady_ms"] = per
    note = page.model_walkthrough(analysis.analyse(res))
    assert "1.25× slower than the calibrated step G" in note and "faster than" not in note


def test_sizing_sentence_follows_reversed_data():
    ref = _ref()
    note = page.sizing_sentence(analysis.analyse(ref))
    assert "tokenize 3.11 ms (1.61× faster than D, the cost the work was sized to)" in note
    s = ref.table("summary").copy()
    tok = s["work"] == "tokenize"
    d = float(s.loc[tok, "d_ms"].iloc[0])
    s.loc[tok, "d_ms"] = ref.parameters["d_ms"]
    res = _with(ref, summary=s)
    res.parameters = {**ref.parameters, "d_ms": d}
    note = page.sizing_sentence(analysis.analyse(res))
    assert "tokenize 5 ms (1.61× slower than D, the cost the work was sized to)" in note


def test_cores_sentence_follows_reversed_data():
    ref = _ref()
    assert "never asks for more workers than cores" in page.cores_sentence(analysis.analyse(ref))
    res = _with(ref)
    res.metadata["cores"] = 8
    s = ref.table("summary").copy()
    sel = (s["experiment"] == "worker sweep") & (s["work"] == "sleep")
    s.loc[sel & (s["workers"] == 8), "wait_ms"], s.loc[sel & (s["workers"] == 16), "wait_ms"] = 2.0, 6.0
    note = page.cores_sentence(analysis.analyse(_with(res, summary=s)))
    assert "sleep: the wait at W = 16 was 6 ms, 3.0× slower than the wait at W = 8 (2 ms)" in note
    s.loc[sel & (s["workers"] == 8), "wait_ms"], s.loc[sel & (s["workers"] == 16), "wait_ms"] = 6.0, 2.0
    note = page.cores_sentence(analysis.analyse(_with(res, summary=s)))
    assert "sleep: the wait at W = 16 was 2 ms, 3.0× faster than the wait at W = 8 (6 ms)" in note


def test_au_drift_sentence_follows_reversed_data():
    """Swap the steps after a short and after a long wait, and AU with the compute share: every direction flips."""
    ref = _ref()
    note = page.au_drift_sentence(analysis.analyse(ref))
    assert "× faster than the back-to-back ones" in note and "AU comes out above" in note
    assert "× more than the measured compute share" in note
    st = ref.table("steps").copy()
    st["wait_ms"] = [50.0 if w < 2 else 1.0 if w >= 20 else w for w in st["wait_ms"]]
    s = ref.table("summary").copy()
    sel = s["experiment"] == "worker sweep"
    s.loc[sel, ["au", "compute_share"]] = s.loc[sel, ["compute_share", "au"]].to_numpy()
    note = page.au_drift_sentence(analysis.analyse(_with(ref, steps=st, summary=s)))
    assert "× slower than the back-to-back ones" in note and "AU comes out below" in note
    assert "× less than the measured compute share" in note and "more than the measured" not in note
