"""Chapter 10 on the facts layer: the analysis gives the numbers the page used to compute (checked here from the
tables, independently), the findings follow reversed data, no parameter is read with a fallback default, the
notebook's parameters cell is the declared one, and a hostile string in the result never reaches Markdown as HTML."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from datajourney.book import opening
from datajourney.chapters.c10_mmap_vs_read import analysis, page
from datajourney.chapters.c10_mmap_vs_read.params import Params
from datajourney.core import results
from datajourney.core.params import BOOK_OPTIONS, parameters_cell

CHAPTER = "10_mmap_vs_read"
FOLDER = Path(page.__file__).parent
HOSTILE = "x` <img src=x onerror=alert(1)> `y"
#: The notes under the notebook's tables and charts, each worded from facts.
NOTES = (page.loader_note, page.checkpoint_note, page.data_note, page.calls_note, page.spans_note, page.theory_note,
         page.overhead_note, page.workers_note, page.workers_cause_note)


@pytest.fixture(scope="module")
def ref():
    return results.load_reference(CHAPTER, "h200")


def test_facts_equal_what_the_tables_hold(ref):
    f = analysis.analyse(ref)
    s = ref.table("sweep")
    g = s[s["part"] == "grid"]
    cold = g[g["cache"] == "cold"]
    per = cold.groupby(["mode", "run"])["loader_s"].sum()
    assert f.number("sweep_loader") == pytest.approx(per["mmap"].mean() / per["read"].mean())
    seq = g["seq"].max()
    batch = g[g["seq"] == seq]["batch"].max()
    at = g[(g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == "warm")]
    m, r = (at[at["mode"] == mode]["loader_s"].mean() for mode in ("mmap", "read"))
    assert f.number("loader_time") == pytest.approx(m / r)
    w = g[(g["cache"] == "warm") & (g["seq"] == seq)]
    bw = w["app_bytes"] / (w["lookup_s"] + w["read_s"] + w["construct_s"])
    assert f.number("per_sample_bandwidth") == pytest.approx(bw[w["mode"] == "mmap"].mean()
                                                             / bw[w["mode"] == "read"].mean())
    p = ref.table("posix")
    p = p[(p["part"] == "posix") & (p["seq"] == p["seq"].max())]
    p = p[p["batch"] == p["batch"].max()].set_index("mode")["posix_events"]
    assert f.number("posix_events") == pytest.approx(p["read"] / p["mmap"])
    o = ref.table("overhead")
    o = o[o["mode"] == "read"].groupby("view")["loader_s"].mean()
    assert f.number("overhead") == pytest.approx(o["posix"] / o["off"])
    c = g[(g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == "cold")]
    mm = c[c["mode"] == "mmap"]
    assert f.number("kernel_view") == pytest.approx((mm["minflt"] + mm["majflt"]).mean())
    # chapter 12's token loader: the best cold tokens per second of each reader
    cs = s[(s["cache"] == "cold") & (s["loader_s"] > 0)]
    rate = cs.assign(rate=cs["tokens"] / cs["loader_s"]).groupby(["mode", "seq", "batch", "workers"])["rate"].mean()
    tl = f.data["token_loader"]
    for mode in ("mmap", "read"):
        assert tl["modes"][mode]["tokens_per_s"] == pytest.approx(rate[mode].max())
    assert tl["best"] == max(("mmap", "read"), key=lambda k: rate[k].max())
    a = f.advice_for("tokens.loader_mode")
    assert a.value == "read" and a.default.startswith("numpy.memmap")
    assert f.number(a.gain) == pytest.approx(per["read"].mean() / per["mmap"].mean())
    assert set(analysis.EXPORTS) <= set(f.facts) | set(f.data)
    json.dumps(f.to_dict())


def _swap(res):
    r = copy.deepcopy(res)
    swap = {"mmap": "read", "read": "mmap"}
    r.tables["sweep"] = r.tables["sweep"].assign(mode=lambda d: d["mode"].map(swap))
    return r


def test_findings_follow_reversed_data(ref):
    f, rev = analysis.analyse(ref), analysis.analyse(_swap(ref))
    assert "slower than read() over the whole sweep" in page.opening(f).findings[0].text
    assert "faster than read() over the whole sweep" in page.opening(rev).findings[0].text
    assert f.advice_for("tokens.loader_mode").value == "read"
    kept = rev.advice_for("tokens.loader_mode")
    assert kept.value == "mmap" and kept.verdict == "keep"
    # the checklist's row reads with its direction
    assert f["loader_time"].quantity == "time" and f["loader_time"].basis == "loader.warm.read"


def test_no_parameter_is_read_with_a_fallback():
    for name in ("experiment.py", "analysis.py", "page.py", "params.py"):
        text = (FOLDER / name).read_text()
        assert not re.search(r"\b(p|params|parameters|q)\.get\(", text), name


def test_notebook_parameters_cell_is_the_declared_one():
    nb = json.loads((Path(page.__file__).parents[3] / "notebooks" / f"{CHAPTER}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in (c["metadata"].get("tags") or []))
    src = "".join(cell["source"])
    assert src == parameters_cell(Params)           # with the book's options, which Params does not hold
    assert all(f"\n{name} = " in src for name in BOOK_OPTIONS)
    assert {"parameters", "remove-cell"} <= set(cell["metadata"]["tags"])


def _outside_code(md: str) -> str:
    md = re.sub(r"```.*?```", "", md, flags=re.S)
    return re.sub(r"(`+).*?\1", "", md)


def test_a_hostile_string_never_reaches_markdown_as_html(ref):
    r = copy.deepcopy(ref)
    r.metadata["composition"] = dict(r.metadata.get("composition") or {}, real_source=HOSTILE,
                                     synthetic_lengths=HOSTILE, real_tokens=1, synthetic_tokens=1)
    r.tables["checkpoint"] = r.tables["checkpoint"].assign(device=HOSTILE)
    p = r.tables["posix"]
    r.tables["posix"] = p.assign(posix_calls=json.dumps({HOSTILE: 3}))
    if "posix_checkpoint" in r.tables:
        pc = r.tables["posix_checkpoint"]
        r.tables["posix_checkpoint"] = pc.assign(method=HOSTILE, posix_calls=json.dumps({HOSTILE: 1}),
                                                 posix_write_bytes=0)
    no_posix = copy.deepcopy(r)
    del no_posix.tables["posix"]
    no_posix.metadata["posix_why_not"] = HOSTILE
    out = []
    for res in (r, no_posix):
        facts = analysis.analyse(res)
        out += [opening.markdown(page, res, None, is_reference_run=True), page.meaning(facts)]
        out += [x.text for x in page.findings(facts)]
        out += [page.checkpoint_posix_note(res)] + [note(facts) for note in NOTES]
    for text in out:
        assert "<img" not in _outside_code(text), text


def test_no_python_literals_or_column_names_in_reader_text(ref):
    f = analysis.analyse(ref)
    text = " ".join(x.text for x in page.findings(f)) + " ".join(a.text for a in page.opening(f).actions)
    for word in ("True", "False", "None", "nan", "e+0", "target", "loader_s", "time_ms"):
        assert word not in text, word
    for table in (page.posix_display(ref), page.theory_display(ref), page.overhead_display(ref),
                  page.checkpoint_display(ref), page.views_display(ref)):
        assert not [c for c in table.columns if re.fullmatch(r"[a-z]+(_[a-z]+)+", str(c))], table.columns


# --------------------------------------------------------------------------- the notes follow reversed data
def _swapped(ref, table: str, part: str | None = None):
    """A copy of ``ref`` whose two readers trade their rows of ``table`` (only the rows of ``part``)."""
    r = copy.deepcopy(ref)
    t = r.tables[table]
    rows = t["part"] == part if part else t.index == t.index
    t.loc[rows, "mode"] = t.loc[rows, "mode"].map({"mmap": "read", "read": "mmap"})
    return r


def test_loader_note_follows_reversed_data(ref):
    assert "cold, mmap was faster at 1 of 9 sweep points and read() at 8" in page.loader_note(analysis.analyse(ref))
    rev = page.loader_note(analysis.analyse(_swapped(ref, "sweep", "grid")))
    assert "cold, mmap was faster at 8 of 9 sweep points and read() at 1" in rev


def test_checkpoint_note_follows_reversed_data(ref):
    assert "slower than the synchronous save" in page.checkpoint_note(analysis.analyse(ref))
    r = copy.deepcopy(ref)
    c = r.tables["checkpoint"]
    a = c["method"] == "dcp_async_save"
    c.loc[a, "total_s"] = c.loc[a, "total_s"] / 10
    c.loc[a, "blocked_s"] = c.loc[a, "blocked_s"] / 10
    assert "faster than the synchronous save" in page.checkpoint_note(analysis.analyse(r))


def test_data_note_follows_the_composition(ref):
    r = copy.deepcopy(ref)
    r.metadata["composition"] = dict(r.metadata["composition"], real_tokens=7, synthetic_tokens=5)
    assert page.data_note(analysis.analyse(r)).startswith("Data set: 12 tokens")
    r.metadata["composition"] = {}
    assert "not recorded" in page.data_note(analysis.analyse(r))


def test_calls_note_follows_the_trace(ref):
    assert "no stat call" in page.calls_note(analysis.analyse(ref))
    r = copy.deepcopy(ref)
    p = r.tables["posix"]
    r.tables["posix"] = p.assign(posix_calls=json.dumps({"fstat": 1000, "read": 1000}))
    note = page.calls_note(analysis.analyse(r))
    assert "`fstat`" in note and "no stat call" not in note


def test_spans_note_follows_reversed_data(ref):
    r = copy.deepcopy(ref)
    s = r.tables["sweep"]
    s["read_s"], s["lookup_s"] = s["lookup_s"], s["read_s"]
    assert "under mmap reading" in page.spans_note(analysis.analyse(ref))
    assert "under mmap index lookup" in page.spans_note(analysis.analyse(r))


def test_theory_note_follows_reversed_data(ref):
    f, rev = analysis.analyse(ref), analysis.analyse(_swapped(ref, "sweep", "grid"))
    assert f.number("theory.mmap.amplification") == pytest.approx(rev.number("theory.read.amplification"))
    assert "mmap needed" in page.theory_note(rev) and "whole `.bin`" not in page.theory_note(rev)
    assert "whole `.bin`" in page.theory_note(f)


def test_overhead_note_follows_reversed_data(ref):
    assert "within the spread of the rounds" in page.overhead_note(analysis.analyse(ref))
    r = copy.deepcopy(ref)
    o = r.tables["overhead"]
    m = (o["mode"] == "mmap") & (o["view"] == "posix")
    o.loc[m, "loader_s"] = o.loc[m, "loader_s"] * 2
    note = page.overhead_note(analysis.analyse(r))
    assert "within the spread" not in note and "its overhead was" in note


def test_workers_note_follows_reversed_data(ref):
    assert "cold read(): fastest with 4 workers" in page.workers_note(analysis.analyse(ref))
    r = copy.deepcopy(ref)
    s = r.tables["sweep"]
    w = (s["part"] == "workers") & (s["workers"] == 0)
    s.loc[w, "loader_s"] = s.loc[w, "loader_s"] / 100
    note = page.workers_note(analysis.analyse(r))
    assert "cold read(): no worker count beat 0 workers" in note and "faster than 0 workers" not in note


def test_workers_cause_note_follows_reversed_data(ref):
    assert "8 workers took" in (note := page.workers_cause_note(analysis.analyse(ref))) and "slower than it" in note
    r = copy.deepcopy(ref)
    s = r.tables["sweep"]
    w = (s["part"] == "workers") & (s["workers"] == 8) & (s["cache"] == "warm")
    s.loc[w, "loader_s"] = s.loc[w, "loader_s"] / 4
    note = page.workers_cause_note(analysis.analyse(r))
    assert "faster than it" in note and "no slowdown to explain" in note
