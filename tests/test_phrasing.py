"""The one phrasing: comparisons take their direction from the data and the quantity, "level" only
within both sides' measured spread, advice reads the same wherever it is worded, and no string from a
result file can leave a code span or open an HTML tag."""
import re

import pytest
from helpers import HOSTILE, assert_stays_text
from markdown_it import MarkdownIt

from datajourney.core import phrasing
from datajourney.core.facts import Advice, Fact, Facts, compare, measured


def _html(md: str) -> str:
    return MarkdownIt("commonmark").render(md)


def test_comparison_follows_the_data_both_ways():
    fast, slow = measured("a", [300, 310, 305], unit="MB/s", label="the shard"), \
        measured("b", [100, 101, 99], unit="MB/s", label="small files")
    assert phrasing.comparison(compare("c", fast, slow)).startswith("3.0× faster than")
    assert phrasing.comparison(compare("c", slow, fast)).startswith("3.1× slower than")
    facts = Facts("x").add(fast, slow)
    assert phrasing.comparison(compare("c", fast, slow), facts).endswith("faster than small files")


def test_a_ratio_that_would_print_as_one_names_no_direction():
    """0.998× would print "1.00× slower": a direction its own number does not show."""
    a, b = Fact("a", 0.499, "s", "a", "time", "lower"), Fact("b", 0.5, "s", "b", "time", "lower")
    assert phrasing.comparison(compare("c", a, b), baseline="b") == "about the same as b, within 0.5%"
    c = Fact("c2", 0.49, "s", "c", "time", "lower")
    assert phrasing.comparison(compare("c", c, b), baseline="b") == "1.02× faster than b"


@pytest.mark.parametrize("quantity,better,more,less", [("time", "lower", "slower", "faster"),
                                                        ("amount", "lower", "more", "less")])
def test_direction_words_come_from_the_quantity(quantity, better, more, less):
    a = Fact("a", 2.0, "ms", "a", quantity, better)
    b = Fact("b", 1.0, "ms", "b", quantity, better)
    assert phrasing.comparison(compare("c", a, b), baseline="b") == f"2.0× {more} than b"
    assert phrasing.comparison(compare("c", b, a), baseline="b") == f"2.0× {less} than b"


def test_level_only_within_both_spreads():
    a = measured("a", [26.0, 27.4], unit="MB/s", label="a")
    b = measured("b", [22.0, 23.4], unit="MB/s", label="b")
    assert not compare("c", a, b).level  # 26.7 against 22.7 MB/s with no overlap is a difference
    c = measured("c", [22.5, 26.5], unit="MB/s", label="c")
    assert compare("d", a, c).level
    assert phrasing.comparison(compare("d", a, c), baseline="c") == "level with c"   # the glossary says what it means
    one = Fact("e", 26.0, "MB/s", "e", n=1)
    assert not compare("f", one, c).level  # one run has no spread: never "level"


def test_advice_is_one_text_with_its_gain_and_scope():
    w8 = measured("w8", [900, 910], unit="images/s", label="8 workers")
    w0 = measured("w0", [300, 310], unit="images/s", label="no workers")
    facts = Facts("x").add(w8, w0, compare("gain", w8, w0))
    a = Advice("image.num_workers", "num_workers", 8, "ResNet-50 training", gain="gain", scope="edge")
    text = phrasing.advice(a, facts)
    assert text == ("For ResNet-50 training, set `num_workers=8`: 3.0× faster than no workers "
                    "(the largest value measured; more may help).")
    assert phrasing.advice(a, facts) == text
    layout = Advice("files.layout", "layout", "shard", "reads", gain="gain", at="num_workers=0")
    assert phrasing.advice(layout, facts).startswith(
        "For reads, set `layout='shard'` (at `num_workers=0`): 3.0× faster")
    assert Advice.from_dict(layout.to_dict()) == layout


def test_a_kept_default_reads_alike_in_advice_and_in_a_table_cell():
    """A "keep the default" verdict kept at a setting other than the library's default (the DataLoader at 16
    workers) names that setting in the advice and in chapter 12's checklist cell alike: the cell never credits the
    bare default with a gain measured at another setting."""
    dl = measured("dl", [900, 910], unit="images/s", label="the DataLoader")
    th = measured("th", [800, 810], unit="images/s", label="the best thread loader")
    facts = Facts("x").add(dl, th, compare("gain", dl, th))
    a = Advice("image_decode.loader", "loader", "dataloader", "photos", gain="gain", verdict="keep",
               default="torch.utils.data.DataLoader", call="num_workers=16")
    assert "keep the default `torch.utils.data.DataLoader` with `num_workers=16`" in phrasing.advice(a, facts)
    assert phrasing.verdict(a, facts).startswith("keep the default torch.utils.data.DataLoader with num_workers=16")


def test_hostile_strings_stay_text():
    md = f"note {phrasing.code(HOSTILE)} and {phrasing.text(HOSTILE)}"
    assert_stays_text(md)
    assert "onerror" in _html(md)  # shown, as text
    for s in ("`", "``x``", "a`b", " ", "<script>alert(1)</script>"):
        assert_stays_text(phrasing.code(s), phrasing.text(s), tag="<script")


def test_facts_round_trip_through_json():
    f = Facts("x", exports=("a",)).add(measured("a", [1, 2, 3], unit="ms", label="a", quantity="time",
                                               better="lower", setting={"w": 4}))
    f.advise(Advice("k.n", "n", 4, "w", gain=None, scope="only", evidence=("a",)))
    back = Facts.from_dict(f.to_dict())
    assert back.facts == f.facts and back.advice == f.advice and back.exports == f.exports


def test_a_bad_fact_is_refused():
    with pytest.raises(ValueError, match="quantity"):
        Fact("a", 1, quantity="speed")
    with pytest.raises(ValueError, match="scope"):
        Advice("a", "k", 1, "w", scope="maybe")


def test_text_keeps_apostrophes_and_ampersands_readable():
    html = _html(phrasing.text("the host's cache & *disk* #1 <b>"))
    assert "the host's cache &amp; *disk* #1 &lt;b&gt;" in html.replace("&#x27;", "'")


def test_a_fact_without_a_better_direction_keeps_it():
    f = Fact("mode", "mmap", "", "the faster loader", "choice", None)
    assert Fact.from_dict(f.to_dict()) == f


def test_one_minus_sign_everywhere_a_number_is_printed():
    """"-0.029" next to "−0.15" reads as two kinds of number: every negative number gets U+2212, and a value
    that rounds to zero gets no sign at all."""
    from datajourney.book import report
    from datajourney.core.units import num, span

    assert num(-0.029, "ms") == "−0.029 ms" and num(-1234.5) == "−1,234" and num(-49.2, "%") == "−49.2%"
    assert num(-0.0001, "%") == "0.0%" and num(-0.4) == "−0.40"
    assert span(-0.03, 0.28, "ms") == "−0.030 to 0.28 ms"
    assert report._cell(-0.15) == "−0.15" and "-" not in phrasing.magnitude(-3.5)


def test_published_figures_are_separated_like_every_other_number():
    """A published "1421.85 ± 13.47" beside this run's "1,856" reads as two formats: the source's digits
    stay, the thousands separator is the book's."""
    from datajourney.chapters import published

    fig = published.Figure("m", "1421.85", "MB/s", "13.47")
    assert fig.text == "1,421.85 ± 13.47 MB/s"
    assert published.Figure("m", "9 846").text == "9,846" and published.Figure("m", "2627", "img/s").text == \
        "2,627 img/s"
    assert published.Figure("m", "98.5", "%").text == "98.5%" and published.separated("about 5") == "about 5"
    every = [f for figs in published.PUBLISHED.values() for f in figs]
    assert not [f.text for f in every if any(len(part) > 3 for part in
                                             f.text.split(".")[0].replace("±", ",").replace(" ", ",").split(",")
                                             if part.isdigit())]


def test_a_negative_gain_is_worded_by_its_sign():
    """"−49.0%" in a "throughput gain" row leaves the reader to guess what it means: a change is worded by
    its sign."""
    from datajourney.chapters import published
    from datajourney.core.units import signed

    assert signed(-49.04, "%", "faster", "slower") == "49.0% slower" and signed(74, "%", "faster", "slower") == \
        "74% faster"
    assert signed(-0.0001, "%", "faster", "slower") == "0.0%"
    gain = published.figure("08_threads_processes_gil", "throughput gain, thread pipeline over DataLoader")
    cpu = published.figure("08_threads_processes_gil", "CPU reduction, thread pipeline vs DataLoader")
    assert gain.text == "74% faster" and cpu.text == "38% less CPU"
    df = published.three_columns("08_threads_processes_gil", {gain.metric: (-49.04, None), cpu.metric: (-76.0, None)},
                                 None)
    cells = dict(zip(df["metric"], df["this run"], strict=True))
    assert cells[gain.metric] == "49.0% slower" and cells[cpu.metric] == "76% more CPU"
    assert phrasing.share(-0.072) == "−7.2%"


def test_a_share_above_the_whole_is_flagged_not_shown_bare():
    """"the best loader against the GPU's own ceiling | 133%" and "decode stage busy 117%": a share cannot
    exceed its whole, so a share fact that prints above 100% says so; a ratio or a rate in % is left alone."""
    over = Fact("s", 133.0, "%", "share of its ceiling", "share", "higher", 2, (130.0, 136.0))
    assert phrasing.headline(over) == f"133% ({phrasing.OVER_WHOLE})"
    assert phrasing.value(over) == f"133% (130–136%, 2 runs) ({phrasing.OVER_WHOLE})"
    assert phrasing.headline(Fact("s", 98.5, "%", "share", "share", "higher")) == "98.5%"
    assert phrasing.headline(Fact("s", 100.04, "%", "share", "share", "higher")) == "100%"   # prints as 100%
    assert phrasing.headline(Fact("r", 133.0, "%", "of dd's read", "rate", "higher")) == "133%"


def test_a_kept_default_says_where_the_gain_it_had_to_clear_comes_from():
    """"under the 11.5% that would change it" left a reader guessing: the words name the question's minimum effect
    (the runs' spread enters through "level" alone)."""
    from datajourney.core import answers
    from datajourney.core.facts import Advice
    from datajourney.core.phrasing import advice

    def words(threshold):
        return advice(Advice("q", "num_workers", 0, workload="w", verdict="keep", default="num_workers=0",
                             within=0.02, threshold=threshold, best="num_workers=4"))

    assert "3% minimum gain" in words(answers.MIN_EFFECT)
    assert "10% minimum gain" in words(answers.COST_EFFECT)
    assert "under the 11.5%" not in words(answers.MIN_EFFECT) and "spread" not in words(answers.MIN_EFFECT)


def test_only_code_is_shown_as_code():
    """A technique in words ("pinned, double-buffered (O_DIRECT, 64 MiB × 2)") is not a setting to paste."""
    from datajourney.core.phrasing import paste

    for call in ("num_workers=8", "DataLoader(num_workers=4, pin_memory=True)", "os.O_DIRECT", "ImageFolder",
                 "NCCL_MIN_NCHANNELS=4 NCCL_MAX_NCHANNELS=4", "ThreadPoolExecutor(max_workers=4)"):
        assert paste(call).startswith("`"), call
    for words in ("pinned, double-buffered (O_DIRECT, 64 MiB × 2)", "one file per sample", "pageable + copy"):
        assert not paste(words).startswith("`"), words


def test_a_large_rate_is_shown_scaled_to_three_significant_figures():
    """"2,540,943,917 tokens/s" is ten digits a reader counts to read "2.5 billion": a rate of counted things from
    a million on, and any measured value that is not a whole count, print scaled to three significant figures, in
    a sentence, a range and a table cell alike; a whole count (bytes, paths, tokens in a data set) stays exact."""
    from datajourney.book import report
    from datajourney.core.units import num, span

    assert num(2540943917.3, "tokens/s") == "2.54 G tokens/s" and num(358060561, "tokens/s") == "358 M tokens/s"
    assert num(2704166.2, "tokens/s", with_unit=False) == "2.70 M" and num(999_700_000.0, "images/s") == \
        "1.00 G images/s"
    assert num(156360.4, "tokens/s") == "156,360 tokens/s"   # below a million: every digit, as before
    assert num(1073741824, "B") == "1,073,741,824 B" and num(14457652) == "14,457,652"   # counts stay exact
    assert num(1_500_000.7, "MB/s") == "1,500,001 MB/s"   # a byte rate's unit is its scale
    assert num(-2.5e9, "steps/s") == "−2.50 G steps/s" and num(1_234_567.8, "ms") == "1,230,000 ms"
    assert span(2.50e9, 2.61e9, "tokens/s") == "2.50–2.61 G tokens/s"
    assert report._cell(8112497.4) == "8.11 M"
    import numpy as np
    import pandas as pd

    assert report._cell(np.int64(1_281_167)) == "1,281,167" and report._cell(np.int64(-3)) == "−3"   # counts
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", report.table_html(pd.DataFrame(
        {"hop": ["PCIe", "step"], "rate (tokens/s)": [2540943917.3, 156360.2]})))
    assert cells == ["PCIe", "2.54 G", "step", "156,360"]
    f = measured("rate", [2.50e9, 2.55e9, 2.61e9], unit="tokens/s", label="the PCIe link")
    assert phrasing.value(f) == "2.55 G tokens/s (2.50–2.61 G, 3 runs)"
    assert phrasing.headline(f) == "2.55 G tokens/s"


def test_no_reference_rate_prints_more_than_six_digits():
    """Every count rate the committed references store (tokens/s, images/s, steps/s, ...), as a page words it:
    at most six digits in a row, so none reads like the ten-digit "2,540,943,917 tokens/s"."""
    import re

    from datajourney.book import registry
    from datajourney.core import results

    seen = 0
    for host in results.reference_hosts():
        for ch in registry.CHAPTERS:
            res = results.load_reference(ch.name, host)
            facts = registry.analysed(res).facts if res is not None else None
            for f in (facts.facts.values() if facts is not None else ()):
                if f.number is None or not f.unit.endswith("/s") or f.unit.endswith("B/s"):
                    continue
                seen += 1
                shown = phrasing.value(f)
                assert not re.search(r"\d(?:,?\d){6}", shown), (host, ch.name, f.key, shown)
    assert seen, "no count rate in the committed references"


def test_runs_that_print_alike_show_no_range_of_one_number():
    """"11.6 steps/s (11.6, 3 runs)" read as a range collapsed to nothing: runs whose ends print the same say so."""
    f = measured("steps", [11.58, 11.6, 11.62], unit="steps/s", label="steps")
    assert phrasing.value(f) == "11.6 steps/s (each of 3 runs)"
    g = measured("steps", [11.2, 11.6, 12.0], unit="steps/s", label="steps")
    assert phrasing.value(g) == "11.6 steps/s (11.2–12, 3 runs)"


def test_a_comparison_names_the_setting_both_sides_share_once():
    """"A, num_workers=0, cold ran 2× faster than B, num_workers=0, cold" says the shared setting once, after the
    comparison; commas inside parentheses or numbers do not split a label; a level comparison keeps it with its
    baseline; labels that share nothing read as before."""
    assert phrasing.shared_setting("one shard, num_workers=0, cold", "10,000 files, num_workers=0, cold") == (
        "one shard", "10,000 files", "num_workers=0, cold")
    assert phrasing.shared_setting("a pool (16 threads, Pillow)", "a pool (16 processes, Pillow)") == (
        "a pool (16 threads, Pillow)", "a pool (16 processes, Pillow)", "")
    assert phrasing.shared_setting("warm", "shard, warm") == ("warm", "shard, warm", "")   # nothing left of a side
    a = Fact("a", 200.0, "MB/s", "one shard, cold", "rate", "higher")
    b = Fact("b", 100.0, "MB/s", "10,000 files, cold", "rate", "higher")
    facts = Facts("x")
    facts.add(a, b, compare("gap", a, b))
    assert phrasing.contrast(facts["gap"], facts) == ("one shard", "2.0× faster than 10,000 files", "cold")
    a2 = Fact("a", 101.0, "MB/s", "one shard, cold", "rate", "higher", 2, (95.0, 110.0))
    b2 = Fact("b", 100.0, "MB/s", "10,000 files, cold", "rate", "higher", 2, (90.0, 105.0))
    level = Facts("x")
    level.add(a2, b2, compare("gap", a2, b2))
    subject, said, shared = phrasing.contrast(level["gap"], level)
    assert said == "level with 10,000 files, both cold" and shared == ""
    c = Fact("c", 1.0, "MB/s", "a thread pool", "rate", "higher")
    other = Facts("x")
    other.add(a, c, compare("x", a, c))
    assert phrasing.contrast(other["x"], other) == ("one shard, cold", "200× faster than a thread pool", "")


def test_advice_does_not_repeat_its_workloads_setting_in_the_baseline():
    """An advice's comparison names the baseline less what the workload already says ("cold page cache" in the
    workload: no "(cold)" after the baseline), and keeps the parts the workload does not name."""
    from datajourney.core.facts import Advice, Fact, Facts, compare

    a = Fact("a", 2.0, "batches/s", "read() over the sweep (cold)", "rate", "higher")
    b = Fact("b", 1.0, "batches/s", "mmap over the sweep (512 tokens, cold)", "rate", "higher")
    facts = Facts("10_mmap_vs_read", {f.key: f for f in (a, b, compare("gain", a, b))})
    adv = Advice("tokens.reader", "reader", "read()", workload="token files, one process, cold page cache",
                 gain="gain", call="os.preadv(fd, [buffer], offset)")
    text = phrasing.advice(adv, facts)
    assert "2.0× faster than mmap over the sweep (512 tokens)." in text, text
    assert text.count("cold") == 1, text
    assert phrasing.without_workload("shards, num_workers=0, warm", "JPEGs, cold") == "shards, num_workers=0, warm"


def test_a_ratio_of_percentages_reads_as_a_factor_of_the_baseline():
    """"3.1× more than" two percentages leaves open whether the factor is 3.1 or 4.1: a share (or a ratio) reads
    "3.1× that of …", or "3.1× the efficiency of …" when the baseline is a noun phrase, below 1 as its own factor;
    a larger amount against a named one reads as its factor too."""
    a, b = Fact("a", 97.4, "%", "packing", "share"), Fact("b", 31.1, "%", "padding each batch", "share")
    assert phrasing.comparison(compare("c", a, b), {"a": a, "b": b}) == "3.1× that of padding each batch"
    assert phrasing.comparison(compare("c", b, a), baseline="the efficiency of packing") == \
        "0.32× the efficiency of packing"
    assert phrasing.ratio_words(compare("c", a, b)) == "3.1×"
    t = Fact("t", 2.0, "ms", "x", "amount")
    u = Fact("u", 1.0, "ms", "y", "amount")
    assert phrasing.comparison(compare("d", t, u), baseline="y") == "2.0× more than y"
    # a larger amount against a named one is its factor; a smaller one keeps "less than" ("0.50× the …" reads worse)
    assert phrasing.comparison(compare("d", t, u), baseline="the compute") == "2.0× the compute"
    assert phrasing.comparison(compare("d", u, t), baseline="the compute") == "2.0× less than the compute"
