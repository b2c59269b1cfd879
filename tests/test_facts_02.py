"""Chapter 2 on the facts layer: its analysis gives the numbers the page used to compute, its page words
them (following the data), its parameters are declared once, and strings from a result stay text."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from datajourney.chapters.c02_random_vs_sequential import analysis, page
from datajourney.chapters.c02_random_vs_sequential.params import Params
from datajourney.core import results
from datajourney.core.params import parameters_cell

CH = "02_random_vs_sequential"
HOSTS = [h for h in ("h200", "h100") if (results.REFERENCE_DIR / h / f"{CH}.json").exists()]
HOSTILE = "x` <img src=x onerror=alert(1)> `y"
FOLDER = Path(analysis.__file__).parent


def _means(df, **where):
    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        m &= df[k] == v
    return df.loc[m, "MBps"].mean()


@pytest.mark.parametrize("host", HOSTS)
def test_reference_facts_equal_what_the_tables_give(host):
    ref = results.load_reference(CH, host)
    f = analysis.analyse(ref)
    h = ref.table("headline")
    seq, rnd = _means(h, cache="cold", pattern="sequential"), _means(h, cache="cold", pattern="random")
    assert f.number("cold.sequential") == pytest.approx(seq) and f.number("cold.random") == pytest.approx(rnd)
    assert f.number("cold_gap") == pytest.approx(seq / rnd)
    assert f["cold_gap"].published == "sequential ÷ random, cold" and f["cold_gap"].basis == "cold.random"
    warm = _means(h, cache="warm", pattern="sequential") / _means(h, cache="warm", pattern="random")
    assert f.number("warm_gap") == pytest.approx(warm)
    lat = ref.table("latency")
    first = lat[lat["series"] == "O_DIRECT, first pass"]["p50_us"]
    assert f.number("cold_latency") == pytest.approx(first.median()) and f["cold_latency"].n == len(first)
    sw = ref.table("size_sweep")
    curve = sw[sw["cache"] == "cold"].groupby(["pattern", "file_size"], as_index=False)["MBps"].mean()
    got = f.data["storage_curve"]
    assert [(r["pattern"], r["file_size"]) for r in got] == list(zip(curve["pattern"], curve["file_size"]))
    assert [r["MBps"] for r in got] == pytest.approx(curve["MBps"].tolist())
    json.dumps(f.to_dict())   # plain JSON, as the result file stores it
    assert set(analysis.EXPORTS) <= set(f.facts) | set(f.data) | {a.key for a in f.advice}
    cs = ref.table("chunk_sweep")
    small = min(cs["chunk"])
    assert f.number("odirect") == pytest.approx(_means(cs, mode="buffered", chunk=small)
                                                / _means(cs, mode="O_DIRECT", chunk=small))
    dd = ref.table("dd_fidelity")
    assert f.number("dd_ratio") == pytest.approx(_means(dd, tool="python") / _means(dd, tool="dd"))


def test_findings_follow_reversed_data():
    ref = results.load_reference(CH)
    op = page.opening(analysis.analyse(ref))
    assert "faster than" in op.findings[0].text and op.findings[0].value > 1
    h = ref.table("headline").copy()
    h["pattern"] = h["pattern"].map({"random": "sequential", "sequential": "random"})
    rev = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, "headline": h},
                         ref.metadata)
    facts = analysis.analyse(rev)
    op = page.opening(facts)
    assert "slower than" in op.findings[0].text and op.findings[0].value < 1
    assert facts.advice_for("samples.layout").value == "one file per sample"
    assert "faster than" in op.actions[0].text   # the advice states its own gain, files over the shard


def test_no_parameter_read_with_get():
    for py in FOLDER.glob("*.py"):
        text = py.read_text()
        assert not re.search(r"\b(p|q|params|parameters)\.get\(", text), py.name


def test_notebook_parameters_cell_is_generated_from_params():
    nb = json.loads((Path(__file__).parents[1] / "notebooks" / f"{CH}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    assert "".join(cell["source"]) == parameters_cell(Params)
    assert {"parameters", "remove-cell"} <= set(cell["metadata"]["tags"])


def _outside_code(md: str) -> str:
    """Markdown with its inline code spans removed (a span is fenced by equal runs of backticks)."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", md, flags=re.S)


def test_strings_from_a_result_stay_text():
    ref = results.load_reference(CH)
    cs = ref.table("chunk_sweep").copy()
    cs["error"] = cs["error"].astype(object)  # read back from a file holding text here, the column is text
    cs.loc[cs["mode"] == "O_DIRECT", "error"] = HOSTILE
    lat = ref.table("latency").copy()
    lat["p50_us"] = float("nan")
    lat["error"] = HOSTILE
    hostile = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint,
                             {**ref.tables, "chunk_sweep": cs, "latency": lat}, ref.metadata)
    facts = analysis.analyse(hostile)
    assert facts.data["odirect_errors"] == [HOSTILE]
    md = "\n".join([*(f.text for f in page.findings(facts)), *(a.text for a in page.opening(facts).actions),
                    *(f.text for f in page.opening(facts).findings), page.odirect_note(facts, hostile),
                    page.latency_note(facts), page.published_note(facts), page.shard_length_note(facts),
                    page.dd_note(facts), page.purge_note(facts), page.residency_note(facts)])
    assert "img src=x" in md                    # it is shown ...
    assert "<img" not in _outside_code(md)      # ... as code, never as a tag


def test_no_target_words_or_python_literals_in_reader_text():
    facts = analysis.analyse(results.load_reference(CH))
    md = "\n".join([*(f.text for f in page.findings(facts)), page.dd_note(facts), page.purge_note(facts),
                    page.residency_note(facts), page.published_note(facts)])
    assert not re.search(r"\b(target|met|True|False|None)\b", md), md
    assert "guest-cold (purged from this virtual machine's page cache" in page.opening(facts).findings[0].text


def test_spread_notes_word_the_facts_data():
    """The spread notes name what the analysis found wide, with the first-run remark only when the data say so."""
    ref = results.load_reference(CH)
    h = ref.table("headline").copy()
    m = (h["cache"] == "cold") & (h["pattern"] == "random")
    first = h.loc[m, "run"].min()
    h.loc[m, "MBps"] = [10.0 if r == first else 100.0 + r for r in h.loc[m, "run"]]
    wide = results.Result(ref.chapter, ref.run_id, ref.parameters, ref.fingerprint, {**ref.tables, "headline": h},
                          ref.metadata)
    facts = analysis.analyse(wide)
    note = page.headline_notes(facts)
    assert "random read varied over" in note and "The first run was the slowest." in note
    h.loc[m, "MBps"] = [200.0 if r == first else 100.0 + r for r in h.loc[m, "run"]]
    rev = page.headline_notes(analysis.analyse(results.Result(ref.chapter, ref.run_id, ref.parameters,
                                                              ref.fingerprint, {**ref.tables, "headline": h},
                                                              ref.metadata)))
    assert "The first run was the slowest." not in rev
