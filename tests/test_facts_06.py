"""Chapter 6 on the facts layer: the analysis of the committed reference results gives the numbers the
tables give, the findings follow reversed data, no parameter is read with ``.get``, the notebook's
parameters cell is the Params', and a hostile string in the result never reaches the page unescaped."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from datajourney.chapters.c06_pcie import analysis, experiment, page
from datajourney.chapters.c06_pcie.params import Params
from datajourney.core import results
from datajourney.core.params import parameters_cell

ROOT = Path(__file__).resolve().parents[1]
REFS = [p for p in (ROOT / "data/reference/h200/06_pcie.json", ROOT / "data/reference/h100/06_pcie.json")
        if p.is_file()]
HOSTILE = "x` <img src=x onerror=alert(1)> `y"


def _median(res, size, direction, memory):
    b = res.table("bandwidth")
    b = b[(b["clock"] == "CUDA events") & (b["size"] == size) & (b["direction"] == direction) & (b["memory"] == memory)]
    return float(b["median"].iloc[0])


@pytest.mark.parametrize("path", REFS, ids=lambda p: p.parent.name)
def test_reference_facts_equal_the_tables(path):
    res = results.Result.load(path)
    f = analysis.analyse(res)
    b = res.table("bandwidth")
    n = int(b["size"].max())
    assert f.number("h2d_pinned") == pytest.approx(_median(res, n, "H2D", "pinned"))
    assert f["h2d_pinned"].published == ("H2D pinned, 1 GiB" if n == 1 << 30 else None)
    ratio = _median(res, n, "H2D", "pinned") / _median(res, n, "H2D", "pageable")
    assert f.number("pinned_vs_pageable") == pytest.approx(ratio)
    # the typical batch: the sweep's size nearest 64 uint8 images of 224² (16 MiB in the reference sweep)
    batch = min(b["size"].unique(), key=lambda s: abs(__import__("math").log(s / (64 * 3 * 224 * 224))))
    assert batch == 16 << 20
    assert f.number("pinned_vs_pageable_batch") == pytest.approx(
        _median(res, batch, "H2D", "pinned") / _median(res, batch, "H2D", "pageable"))
    assert f.number("pinned_vs_pageable_batch") < f.number("pinned_vs_pageable")  # the headline's size matters
    # the ceiling: the highest pinned host-to-device median of the chapter
    assert f.number("ceiling") == pytest.approx(max(m["GBps"] for m in page.pinned_h2d_measurements(res)))
    assert f.number("ceiling") >= f.number("h2d_pinned")
    o = res.table("overlap")
    at = o[(o["size"] == 256 << 20) & (o["memory"] == "pinned") & (o["mode"] == "non_blocking")]
    assert f.number("cpu_overlap") == pytest.approx(100 * float(at["overlap"].iloc[0]))
    assert f.number("copy_kernel") == pytest.approx(100 * float(res.table("copy_kernel")["hidden"].iloc[0]))
    a = f.advice_for("pcie.pin_memory")
    assert a is not None and a.value is True and a.verdict == "change" and a.needs == "gpu"
    assert (f[a.gain].of, f[a.gain].basis) == ("h2d_pinned_batch", "h2d_pageable_batch")  # against the default
    compile(a.snippet, "snippet", "exec")
    assert max(map(len, a.snippet.splitlines())) <= 72  # no sideways scrolling
    curve = f.data["pcie_curve"]
    assert [r["size"] for r in curve] == sorted(int(s) for s in b["size"].unique())
    assert set(f.exports) >= {"h2d_pinned", "cpu_overlap", "pcie_curve"}
    json.dumps(f.to_dict())  # plain JSON


def _swapped(res):
    rev = copy.deepcopy(res)
    rev.facts = None
    for name in ("bandwidth", "bandwidth_raw"):
        t = rev.table(name).copy()
        t["memory"] = t["memory"].map({"pinned": "pageable", "pageable": "pinned"})
        rev.tables[name] = t
    return rev


def test_findings_follow_reversed_data():
    res = results.Result.load(REFS[0])
    res.facts = None
    op = page.opening(res)
    assert "faster than a pageable copy of 1 GiB" in op.findings[0].text
    assert "for host-to-device copies of 16 mib batches, set `pin_memory=true`" in op.actions[0].text.lower()
    rev = page.opening(_swapped(res))
    assert "slower than a pageable copy of 1 GiB" in rev.findings[0].text
    assert "`pin_memory=False`" in rev.actions[0].text and "faster than a pinned copy" in rev.actions[0].text


def test_no_parameter_is_read_with_get():
    folder = Path(experiment.__file__).parent
    for py in folder.glob("*.py"):
        text = py.read_text()
        assert not re.search(r"\b(p|q|params|parameters|res\.parameters|\(res\.parameters or \{\}\))\.get\(", text), py


def test_notebook_parameters_cell_is_the_params():
    nb = json.loads((ROOT / "notebooks/06_pcie.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    assert "".join(cell["source"]) == parameters_cell(Params)
    assert "remove-cell" in cell["metadata"]["tags"]


def _poison(res):
    """Every string the page prints from the result made hostile."""
    res = copy.deepcopy(res)
    res.facts = None
    res.run_id = HOSTILE
    res.metadata["ceiling"] = dict(res.metadata.get("ceiling") or {}, note=HOSTILE, path=HOSTILE)
    res.metadata["warnings"] = [HOSTILE]
    if "ceiling" in res.tables:
        c = res.table("ceiling").copy()
        c["phase"], c["path"] = HOSTILE, HOSTILE
        res.tables["ceiling"] = c
    return res


def _no_tag(md: str) -> None:
    outside = re.sub(r"(`+)(?:(?!\1).)*?\1", "", md)  # code spans removed
    assert "<img" not in outside, md


def test_hostile_strings_stay_escaped():
    from datajourney.book import opening

    res = _poison(results.Result.load(REFS[0]))
    texts = [f.text for f in page.findings(res)] + [page.ceiling_text(res), page.no_cuda_text(res),
                                                     page.takeaways(res), *page.warnings_text(res),
                                                     page.link_text(res, host=page.host_words(res, reference=True))]
    texts.append(opening.markdown(page, res, None, is_reference_run=True))
    for t in texts:
        _no_tag(t)


def _fresh(path=None):
    res = results.Result.load(path or REFS[0])
    res.facts = None  # this checkout's analysis, not the facts stored with the file
    return res


def _rounds(res, pytorch: float, cupy: float):
    """``res`` with the ceiling's rounds set: PyTorch's at ``pytorch`` GB/s, CuPy's at ``cupy`` (±1% per round)."""
    res = copy.deepcopy(res)
    c = res.table("ceiling").copy()
    c["median"] = [(pytorch if p == "PyTorch" else cupy) * (1 + 0.01 * (r % 2)) for p, r in zip(c["path"], c["round"])]
    res.tables["ceiling"] = c
    return res


def test_ceiling_note_words_facts_and_follows_reversed_data():
    res = _fresh()
    f = analysis.analyse(res)
    c = res.table("ceiling")
    torch_ = c[c["path"] == "PyTorch"]["median"]
    assert f.number("ceiling_rounds_pytorch") == pytest.approx(float(torch_.mean()))
    assert f["ceiling_rounds_pytorch"].spread == pytest.approx((float(torch_.min()), float(torch_.max())))
    both = c["median"]
    assert f.number("ceiling_drift") == pytest.approx(100 * (float(both.max()) / float(both.min()) - 1))
    text = page.ceiling_text(f)
    assert "PyTorch's copy was" in text and "of the ceiling" in text
    slow = page.ceiling_text(analysis.analyse(_rounds(res, 40.0, 50.0)))
    fast = page.ceiling_text(analysis.analyse(_rounds(res, 50.0, 40.0)))
    assert "PyTorch's copy was 1.25× slower than the second path" in slow
    assert "PyTorch's copy was 1.25× faster than the second path" in fast


def test_a_share_above_100_percent_is_not_called_a_share():
    """On the H200 reference the paired rounds measured the copy adding a negative median time (a hidden share
    of 101%): the page words the time the copy added, its interval and the matrix products' own jitter."""
    res = _fresh()
    f = analysis.analyse(res)
    ck = res.table("copy_kernel").iloc[0]
    assert f.number("copy_kernel") > 100 and f.number("copy_kernel_added_ms") < 0
    calls = res.table("copy_kernel_calls")
    alone = calls[(calls["design"] == "interleaved") & (calls["name"] == "kernel")]["ms"]
    assert f.number("copy_kernel_kernel_jitter_ms") == pytest.approx(float(alone.std()))
    assert f.number("copy_kernel_kernel_jitter_ms") > abs(float(ck["added_ms"]))  # the median lies within the jitter
    op = page.opening(f)
    texts = [op.findings[-1].text, *[a.text for a in op.actions], page.finding_copy_kernel(f).text, page.takeaways(f)]
    for t in texts:
        assert not re.search(r"10\d(\.\d)?%", t), t  # no share above 100%
    assert "no measurable time" in op.findings[-1].text and "95% interval" in op.findings[-1].text
    assert "(std) from round to round" in page.finding_copy_kernel(f).text
    # a copy that added time reads as a share again
    res2 = copy.deepcopy(res)
    res2.tables["copy_kernel"] = res.table("copy_kernel").assign(added_ms=1.2, added_lo_ms=0.9, added_hi_ms=1.5,
                                                                 hidden=0.76, hidden_lo=0.7, hidden_hi=0.82)
    op2 = page.opening(analysis.analyse(res2))
    assert "**76%** of a 256 MiB copy hid behind matrix products" in op2.findings[-1].text
