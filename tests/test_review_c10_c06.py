"""A fresh reviewer's defects of chapters 10 and 6, each checked on the committed reference results (and, where a
condition decides the wording, on a copy with the condition reversed): the published-figure table shows the
measured per-sample bandwidths, computed sentences say each thing once, sizes are in binary units, the parameters
read without a dangling colon or a circular default, a worked answer reproduces from its shown inputs, the
checkpoint table names methods as the text does; chapter 6 names the sizes its interleaved check did not copy, gives
the huge pages' change a direction, names the paths in its table as its chart does and shows one range form in a
column."""
from __future__ import annotations

import dataclasses
import math
import re

import pytest
from helpers import paren_depth

from datajourney.chapters import published
from datajourney.chapters.c06_pcie import analysis as a06
from datajourney.chapters.c06_pcie import charts as charts06
from datajourney.chapters.c06_pcie import page as p06
from datajourney.chapters.c10_mmap_vs_read import analysis as a10
from datajourney.chapters.c10_mmap_vs_read import page as p10
from datajourney.chapters.c10_mmap_vs_read.params import Params as Params10
from datajourney.core import results
from datajourney.core.params import spec_of
from datajourney.core.units import MiB, num, size_label

HOSTS10 = [h for h in ("h200", "h100") if results.load_reference(a10.CHAPTER, h) is not None]
HOSTS06 = [h for h in ("h200", "h100") if results.load_reference(a06.CHAPTER, h) is not None]
#: A size or rate in decimal units ("67.1 MB", "0.13 KB", "16.4 kB"); a rate ("MB/s") may stay decimal.
DECIMAL_SIZE = re.compile(r"\b(?:kB|KB|MB|GB)\b(?!/s)")


def _ref(chapter: str, host: str):
    """A fresh copy of a committed reference result (its tables may be changed by the test)."""
    res = results.load_reference(chapter, host)
    res.tables = dict(res.tables)
    return res


# ---------------------------------------------------------------------------------------------- chapter 10
@pytest.mark.parametrize("host", HOSTS10)
def test_published_table_shows_the_measured_per_sample_bandwidths(host):
    """The published-figure table looks its rows up by metric name: the three per-sample bandwidths the chapter
    measures (mmap at the smallest and largest sequence, read() at the largest) are there, with the values the key
    result words, so their cells show numbers, not a dash."""
    res = _ref(a10.CHAPTER, host)
    facts = a10.analyse(res)
    got = p10.key_metrics(res)
    metrics = {f.metric for f in published.figures(a10.CHAPTER)}
    assert set(got) <= metrics
    for metric, key in (("per-sample bandwidth, mmap, smallest sequence", "bandwidth.mmap_small"),
                        ("per-sample bandwidth, mmap, largest sequence", "bandwidth.mmap"),
                        ("per-sample bandwidth, read(), largest sequence", "bandwidth.read")):
        assert got[metric][0] == pytest.approx(facts.number(key))
        assert num(facts.number(key), "MB/s") in p10.finding(facts, "per_sample_bandwidth")[0].text
    table = published.three_columns(a10.CHAPTER, got, None, this_is_reference=True)
    rows = table.set_index("metric")
    col = [c for c in table.columns if c.startswith("reference")][0]
    for metric in ("per-sample bandwidth, mmap, smallest sequence", "per-sample bandwidth, mmap, largest sequence",
                   "per-sample bandwidth, read(), largest sequence"):
        assert rows.loc[metric, col] != "—", metric


@pytest.mark.parametrize("host", HOSTS10)
def test_computed_sentences_say_each_thing_once(host):
    """The opening's sweep sentence names the cache state once, the POSIX finding names the largest point once, the
    loader-time finding names its point once, the data note says "lengths" of the documents once, and no finding
    nests parentheses (the kernel's comparison, the overhead's untraced time)."""
    res = _ref(a10.CHAPTER, host)
    facts = a10.analyse(res)
    sweep = p10.opening(facts).findings[0]
    assert sweep.key == "sweep_loader"
    assert sweep.text.lower().count("cold") == 1 and sweep.text.count("over the whole sweep") == 1, sweep.text
    f = {x.key: x for x in p10.findings(facts)}
    at = facts.data["largest"]
    point = f"sequence {at['seq']}, batch {at['batch']}"
    assert f["posix_events"].text.count(point) == 1, f["posix_events"].text
    assert "at the largest point read() shows" in f["posix_events"].text
    assert f["loader_time"].text.count(point) == 1, f["loader_time"].text
    assert f["per_sample_bandwidth"].text.count(f"at sequence {at['seq']}") == 0
    assert "lengths are lengths" not in p10.data_note(facts)
    assert "document lengths are drawn from the real documents' lengths" in p10.data_note(facts)
    for key in ("kernel_view", "overhead", "per_sample_bandwidth", "loader_time"):
        assert paren_depth(f[key].text) <= 1, f[key].text
    assert "more than the page faults under read()" in f["kernel_view"].text   # the ratio names what it counts
    # the fallback lengths of a data set without real text keep their meaning, less the repeated word
    assert p10._lengths("no real text here: log-normal lengths (median 512, sigma 1.0)") == \
        "log-normal (median 512, sigma 1.0)"


@pytest.mark.parametrize("host", HOSTS10)
def test_the_sweep_sentence_names_the_cache_state_it_compared_once_when_warm(host):
    """Reversed: without cold runs the headline comparison is the warm sweep, and the sentence names "warm" once."""
    res = _ref(a10.CHAPTER, host)
    s = res.table("sweep")
    res.tables["sweep"] = s[s["cache"] != "cold"]
    sweep = p10.opening(a10.analyse(res)).findings[0]
    assert sweep.text.startswith("Warm,") and sweep.text.lower().count("warm") == 1, sweep.text


@pytest.mark.parametrize("host", HOSTS10)
def test_sizes_are_in_binary_units(host):
    """Sizes of files, checkpoints and reads are in KiB, MiB, GiB (or bytes) in the chapter's tables and notes; a
    rate in MB/s may stay decimal."""
    res = _ref(a10.CHAPTER, host)
    facts = a10.analyse(res)
    for table in (p10.posix_display(res), p10.checkpoint_display(res), p10.views_display(res)):
        headers = " ".join(map(str, table.columns)) + " " + " ".join(map(str, table.iloc[:, 0]))
        assert not DECIMAL_SIZE.search(headers), headers
    ck = p10.checkpoint_display(res)
    assert size_label(facts.data["checkpoint"]["bytes"]) in set(ck["state"]) and ck["state"].str.endswith("iB").all()
    for text in (p10.loader_note(facts), p10.checkpoint_posix_note(facts), p10.checkpoint_invariance_note(facts),
                 p10.paper_exercise(facts), p10.theory_note(facts)):
        assert not DECIMAL_SIZE.search(text), text
    assert "64.0 MiB" in p10.checkpoint_invariance_note(facts)
    assert "MiB written" in p10.checkpoint_posix_note(facts)
    assert "KiB = 2¹⁰" in p10.paper_exercise(facts) and "kB = 10³" not in p10.paper_exercise(facts)


def test_parameters_read_without_a_dangling_colon_or_a_circular_default():
    """The parameters table's descriptions: the workers sweep names the point it runs at; data_dir says where the
    data set goes when it is not set, as chapters 2 and 3 word it, not the environment variable its value shows."""
    helps = {f.name: spec_of(f).help for f in dataclasses.fields(Params10)}
    assert not helps["workers"].rstrip().endswith(":")
    assert "workers_seq_length" in helps["workers"] and "workers_batch_size" in helps["workers"]
    assert "$DATAJOURNEY_DATA_DIR" not in helps["data_dir"] and "(not set: ~/.cache/datajourney)" in helps["data_dir"]


#: "A unit ÷ B unit = **C": a worked division (as tests/test_teaching.py reads the committed pages).
_DIVISION = re.compile(r"(?<![\d.,])(\d[\d,]*(?:\.\d+)?)(?: [A-Za-zµ/]+)? ÷ (\d[\d,]*(?:\.\d+)?)(?: [A-Za-zµ/]+)? = "
                       r"\*\*(\d[\d,]*(?:\.\d+)?)")


def _wrong_divisions(text: str) -> list[str]:
    wrong = []
    for m in _DIVISION.finditer(text):
        a, b, c = m.groups()
        x, y, z = (float(v.replace(",", "")) for v in (a, b, c))
        k = round(math.log10(z / (x / y)))
        digits = len(c.split(".")[1]) if "." in c else 0
        got = f"{x / y * 10 ** k:,.{digits}f}" if digits or z < 1000 else num(round(x / y * 10 ** k))
        if got != c:
            wrong.append(f"{a} ÷ {b} = {c} (the shown inputs give {got})")
    return wrong


@pytest.mark.parametrize("host", HOSTS10)
def test_the_worked_answer_reproduces_from_its_shown_inputs(host):
    """Every division of the exercise gives its printed result from its printed inputs, in one unit family (KiB),
    also where the counts are means with a fraction (380.5 faults) and the bytes are not whole KiB."""
    res = _ref(a10.CHAPTER, host)
    facts = a10.analyse(res)
    text = p10.paper_exercise(facts)
    assert len(_DIVISION.findall(text)) == 4 and not _wrong_divisions(text), _wrong_divisions(text)
    assert "MB" not in text and "KiB" in text
    # the per-fault answer is the theory note's, from the same facts
    assert f"**{num(facts.number('theory.mmap.per_fault'), 'KiB')}** a major page fault" in text
    # bytes that are no whole KiB and counts that are means: still reproduced
    ex = facts.data["exercise"]
    odd = {**ex, "sample_bytes": ex["sample_bytes"] + 333.0,
           "read": {"bytes": ex["read"]["bytes"] + 517.0, "calls": ex["read"]["calls"] + 0.25},
           "mmap": {"bytes": ex["mmap"]["bytes"] + 1001.0, "faults": 381.75}}
    facts.data["exercise"] = odd
    try:
        text = p10.paper_exercise(facts)
    finally:
        facts.data["exercise"] = ex
    assert len(_DIVISION.findall(text)) == 4 and not _wrong_divisions(text), _wrong_divisions(text)


@pytest.mark.parametrize("host", HOSTS10)
def test_checkpoint_table_names_the_methods_as_the_text_does(host):
    res = _ref(a10.CHAPTER, host)
    facts = a10.analyse(res)
    shown = list(p10.checkpoint_display(res)["method"])
    assert set(shown) <= set(a10.METHOD_LABELS.values()) and not {"torch_save", "dcp_save"} & set(shown)
    text = p10.finding(facts, "checkpoint")[0].text + p10.checkpoint_posix_note(facts)
    assert all(name in text for name in shown)


# ---------------------------------------------------------------------------------------------- chapter 6
def test_sizes_are_spanned_only_where_none_between_is_left_out():
    sizes = [48 * MiB, 64 * MiB, 192 * MiB]
    assert p06._sizes_text(sizes) == "48 MiB, 64 MiB and 192 MiB"
    assert p06._sizes_text(sizes, [48 * MiB, 64 * MiB, 128 * MiB, 192 * MiB]) == "48 MiB, 64 MiB and 192 MiB"
    assert p06._sizes_text(sizes, [32 * MiB, 48 * MiB, 64 * MiB, 192 * MiB, 256 * MiB]) == "48 MiB to 192 MiB"
    assert p06._sizes_text([64 * MiB, 256 * MiB]) == "64 MiB and 256 MiB"


@pytest.mark.parametrize("host", HOSTS06)
def test_the_sizes_the_check_did_not_copy_are_named_from_the_data(host):
    """Every size named as not copied by the interleaved check is one of the block dip's sizes the check did not
    copy, and no size it copied is among them (the old sentence spanned 48 MiB to 192 MiB across 96 and 128 MiB)."""
    res = _ref(a06.CHAPTER, host)
    s = p06.facts_of(res).data["staging"]
    text = p06.staging_details(res)
    m = re.search(r"the check did not copy ([^)]*)\)", text)
    check = (s.get("dip") or {}).get("check") or {}
    if not check.get("missed") or check.get("dips"):
        assert m is None
        return
    named = re.findall(r"(\d+) MiB", m.group(1))
    assert sorted(int(x) * MiB for x in named) == sorted(check["missed"])
    assert not {n for n, _ in check["medians"]} & {int(x) * MiB for x in named}
    assert " to " not in m.group(1)


def _huge_sentence(res) -> str:
    text = p06.staging_details(res)
    return text[text.index("**Huge pages.**"):]


@pytest.mark.parametrize("host", HOSTS06)
def test_the_huge_pages_change_has_its_direction(host):
    """The median change names its direction as its sign (faster, slower); reversed (huge pages made 20% slower than
    recorded), the sentence turns to "slower"."""
    res = _ref(a06.CHAPTER, host)
    huge = p06.facts_of(res).data["staging"]["huge"]
    sentence = _huge_sentence(res)
    word = "faster" if huge["median_change"] > 0 else "slower"
    assert f"% {word} at the median" in sentence and "changed the rate" not in sentence, sentence
    st = res.table("staging").copy()
    rows = st["measure"] == "H2D pageable, huge pages"
    st.loc[rows, "median"] = st.loc[rows, "median"] / (1 + huge["median_change"]) * 0.8
    res.tables["staging"] = st
    reversed_ = _huge_sentence(res)
    assert "% slower at the median" in reversed_ and "faster at the median" not in reversed_, reversed_


@pytest.mark.parametrize("host", HOSTS06)
def test_the_bandwidth_table_names_the_paths_as_the_chart(host):
    res = _ref(a06.CHAPTER, host)
    cols = [c for c in p06.bandwidth_table(res).columns if c != "copy size"]
    paths = {re.sub(r" \((GB/s|% of peak)\)$", "", c) for c in cols}
    assert paths == set(p06.bandwidth_frame(res)["path"]) and paths <= set(charts06.SERIES)
    assert not any("GPU" in c for c in cols)


@pytest.mark.parametrize("host", HOSTS06)
def test_the_overlap_column_shows_one_range_form(host):
    """Whether a row's p10 is negative or not, its range reads "a to b%" (as a range with a negative end reads)."""
    res = _ref(a06.CHAPTER, host)
    col = p06.overlap_table(res)["overlap: median (p10 to p90)"]
    assert col.str.contains("−").any()   # the reference has rows with a negative p10: both kinds are checked
    for cell in col:
        assert re.fullmatch(r"−?[\d.,]+% \(−?[\d.,]+( to −?[\d.,]+)?%\)", cell), cell
        assert "–" not in cell
