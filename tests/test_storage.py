"""Chapter 2's readers and experiments on small real data sets, and its findings following the data."""
import shutil

import numpy as np
import pandas as pd
import pytest
from helpers import has_nan

from datajourney.book import harness
from datajourney.chapters.c02_random_vs_sequential import analysis, page
from datajourney.chapters.c02_random_vs_sequential import experiment as storage
from datajourney.core.params import ParameterError
from datajourney.core.results import Result
from datajourney.toolkit import datasets, pagecache


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return datasets.small_files(tmp_path_factory.mktemp("d"), n_files=32, file_size=16384, progress=False)


def test_readers_read_every_byte(small):
    assert storage.read_files(small.files, small.file_size) == small.total_bytes
    for chunk in (4096, 16384, 1 << 20):
        assert storage.read_sequential(small.shard, chunk) == small.total_bytes
    assert storage.read_sequential(small.shard, 16384, max_bytes=5 * 16384) == 5 * 16384


def test_direct_read_bypasses_cache(small):
    pagecache.purge([small.shard], "fadvise")
    try:
        n = storage.read_direct(small.shard, 65536)
    except OSError as e:
        pytest.skip(f"O_DIRECT not supported here: {e}")
    assert n == small.total_bytes
    assert pagecache.residency([small.shard]).fraction <= 0.05  # nothing was cached


def test_latency_reads_time_each_request(small):
    offsets = np.arange(0, small.total_bytes, 4096)[:20]
    warm = storage.read_latencies(small.shard, offsets, direct=False)
    assert warm.shape == (20,) and (warm > 0).all()
    pagecache.purge([small.shard], "fadvise")
    try:
        cold = storage.read_latencies(small.shard, offsets, direct=True)
    except OSError as e:
        pytest.skip(f"O_DIRECT not supported here: {e}")
    assert cold.shape == (20,) and (cold > 0).all()
    assert pagecache.residency([small.shard]).fraction <= 0.05  # O_DIRECT left nothing in the page cache


@pytest.mark.skipif(not shutil.which("dd"), reason="dd not installed")
def test_dd_reports_bytes_and_seconds(small):
    n, s = storage.dd_read(small.shard)
    assert n == small.total_bytes and s > 0


def test_cold_and_warm_states_reach_their_residency(small):
    assert storage.set_cache_state(small.files, "cold", "auto")["resident_at_start"] <= 0.05
    assert storage.set_cache_state(small.files, "warm", "auto")["resident_at_start"] >= 0.95


def test_run_writes_result_with_fingerprint(tmp_path):
    res = harness.run("02_random_vs_sequential",
                      n_files=20, file_size=4096, runs=2, cache_states=["cold", "warm"], purge_method="auto",
                      size_sweep=[4096, 16384], sweep_bytes=1 << 17, shard_size=1 << 20,
                      chunk_sweep=[4096, 1 << 20], chunk_runs=3, odirect=True, odirect_max_bytes=1 << 20,
                      latency_reads=50, dd_check=True, compare_purge_methods=True, data_dir=tmp_path / "..",
                      run_dir=tmp_path / "run", progress=False)
    saved = Result.load(tmp_path / "run" / f"{'02_random_vs_sequential'}.json")
    assert saved.fingerprint["cpu"]["logical_cores"] >= 1 and saved.parameters["n_files"] == 20
    h = saved.table("headline")
    assert len(h) == 2 * 2 * 2 and (h["bytes"] == 20 * 4096).all()
    assert h[h["cache"] == "cold"]["resident_at_start"].max() <= 0.05
    assert h[h["cache"] == "warm"]["resident_at_start"].min() >= 0.95
    assert set(saved.table("size_sweep")["file_size"]) == {4096, 16384}
    assert len(saved.table("chunk_sweep")) == 3 * 2 * 2          # chunk_runs, not runs
    sl = saved.table("shard_length")
    timed = sl[sl["MBps"].notna()]
    assert len(timed) == 2 * 3
    assert set(timed[timed["read"] != "long shard, whole"]["bytes"]) == {20 * 4096}
    assert timed[timed["read"] == "long shard, whole"]["bytes"].eq(1 << 20).all()
    lat = saved.table("latency")
    if lat["error"].isna().all():
        assert set(lat["series"]) == {"O_DIRECT, first pass", "O_DIRECT, second pass", "page cache (warm)"}
        assert (lat["reads"] == 50).all() and (lat["p10_us"] <= lat["p90_us"]).all()
        cdf = saved.table("latency_cdf")
        assert cdf.groupby("series")["us"].apply(lambda s: s.is_monotonic_increasing).all()
    assert "dd_fidelity" in saved.tables
    assert ("purge_methods" in saved.tables) == pagecache.can_drop_caches()
    m = page.key_metrics(saved)
    assert m["sequential ÷ random, cold"][0] == pytest.approx(m["sequential read, cold"][0] / m["random read, cold"][0])
    fresh = analysis.analyse(saved)
    assert saved.facts is not None and {k: f.value for k, f in saved.facts.facts.items()} == {
        k: f.value for k, f in fresh.facts.items()} and saved.facts.data == fresh.data
    facts = saved.facts
    items = page.findings(facts)
    assert 3 <= len(items) <= 6 and len({f.key for f in items}) == len(items)
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text
    for note in (page.headline_notes(saved), page.size_note(facts), page.odirect_note(facts),
                 page.shard_length_note(facts), page.dd_note(facts)):
        assert not has_nan(note)
    # the notes word the facts stored in the file exactly as they word the result analysed now
    for note in (page.size_note, page.odirect_note, page.key_metrics):
        assert note(facts) == note(saved), note.__name__
    assert res.path == saved.path


# ------------------------------------------------------------------ parameters
CH2 = dict(n_files=10, file_size=4096, runs=1, cache_states=["cold"], purge_method="auto", size_sweep=[4096],
           sweep_bytes=65536, shard_size=1 << 20, chunk_sweep=[4096], odirect=False, odirect_max_bytes=1 << 20,
           dd_check=False, compare_purge_methods=False, seed=0, chunk_runs=1, latency_reads=10)


@pytest.mark.parametrize("name,value,needle", [
    ("seed", -1, "integer from 0"), ("seed", "abc", "integer from 0"), ("seed", 1.5, "integer from 0"),
    ("odirect", "maybe", "true or false"), ("dd_check", "yes", "true or false"),
    ("compare_purge_methods", 1, "true or false"), ("chunk_runs", 0, "integer from 1"),
    ("latency_reads", -1, "integer from 0"), ("latency_reads", "many", "integer from 0"),
    ("is_reference_run", "maybe", "true or false"),
])
def test_chapter2_checks_every_parameter_before_work(tmp_path, name, value, needle):
    with pytest.raises(ParameterError) as e:
        storage.preflight({**CH2, name: value, "data_dir": str(tmp_path)})
    assert repr(name) in str(e.value) and needle in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_latency_needs_a_shard_to_read(tmp_path):
    with pytest.raises(ParameterError, match="'latency_reads'"):
        storage.preflight({**CH2, "shard_size": 1024, "chunk_sweep": [512], "data_dir": str(tmp_path)})
    storage.preflight({**CH2, "shard_size": 1024, "chunk_sweep": [512], "latency_reads": 0, "data_dir": str(tmp_path)})


# ------------------------------------------------------------------ findings follow the data
def _result(tables: dict, hypervisor: bool = False, **params) -> Result:
    return Result("02_random_vs_sequential", "test", {"n_files": 100, "file_size": 16384, **params},
                  {"cpu": {"hypervisor": hypervisor}}, {k: pd.DataFrame(v) for k, v in tables.items()})


def _headline(cold_random, cold_seq, warm_random=(), warm_seq=()):
    rows = []
    for cache, pattern, vals in (("cold", "random", cold_random), ("cold", "sequential", cold_seq),
                                 ("warm", "random", warm_random), ("warm", "sequential", warm_seq)):
        for run, v in enumerate(vals):
            rows.append(dict(pattern=pattern, cache=cache, run=run, file_size=16384, n_files=100, chunk=16384,
                             bytes=1638400, seconds=1638400 / v / 1e6, MBps=v,
                             resident_at_start=0.0 if cache == "cold" else 1.0))
    return rows


def _latency(median, second=None):
    rows = []
    for run in range(3):
        for series, m in (("O_DIRECT, first pass", median), ("O_DIRECT, second pass", second or median),
                          ("page cache (warm)", 2.0)):
            rows.append(dict(series=series, run=run, reads=100, request_bytes=4096, mean_us=m, p1_us=m / 2,
                             p10_us=0.8 * m, p50_us=m + run * 0.01 * m, p90_us=1.5 * m, p99_us=3 * m, max_us=9 * m,
                             error=None))
    return rows


def _key(items, key):
    return next(f for f in items if f.key == key)


def _findings(res):
    return page.findings(analysis.analyse(res))


def test_cold_gap_follows_the_data_both_ways():
    fast = _key(_findings(_result({"headline": _headline([70, 72, 71], [1400, 1420, 1410])})), "cold_gap")
    assert "faster than" in fast.text and fast.value == pytest.approx(1410 / 71, rel=1e-3)
    assert fast.published == "sequential ÷ random, cold"
    slow = _key(_findings(_result({"headline": _headline([900, 950, 920], [300, 310, 305])})), "cold_gap")
    assert "slower than" in slow.text and "faster" not in slow.text and slow.value < 1
    level = _key(_findings(_result({"headline": _headline([500, 520, 480], [510, 530, 490])})), "cold_gap")
    assert "level" in level.text and "faster" not in level.text and "slower" not in level.text


def test_warm_gap_judged_against_the_source_claim():
    wide = _key(_findings(_result({"headline": _headline([70], [1400], [2500, 3200, 3100], [8800, 8800, 8770])})),
                "warm_gap")
    assert "here it does not" in wide.text and "collapses to near 1x" in wide.text
    near = _key(_findings(_result({"headline": _headline([70], [1400], [8000, 8100, 8050], [8300, 8400, 8350])})),
                "warm_gap")
    assert "here it does (" in near.text
    rev = _key(_findings(_result({"headline": _headline([70], [1400], [9000, 9100, 9050], [3000, 3100, 3050])})),
               "warm_gap")
    assert "reverses" in rev.text


def test_guest_cold_label_only_when_the_latency_says_so():
    h = _headline([400, 410, 415], [2100, 2400, 2300])
    host_cached = _result({"headline": h, "latency": _latency(19.0)}, hypervisor=True)
    items = _findings(host_cached)
    assert analysis.analyse(host_cached).data["guest_cold"] is True
    assert page.cold_name(host_cached) == "guest-cold" and "guest-cold" in page.chart_series(host_cached)
    opened = page.opening(analysis.analyse(host_cached)).findings
    assert "guest-cold (out of this virtual machine's page cache" in _key(opened, "cold_gap").text
    lat = _key(items, "cold_latency")
    assert "guest-cold" in lat.text and lat.value == pytest.approx(19.0, rel=0.02)
    device = _result({"headline": h, "latency": _latency(80.0)}, hypervisor=True)
    assert analysis.analyse(device).data["guest_cold"] is False and page.cold_name(device) == "cold"
    assert "cold" in page.chart_series(device) and "guest-cold" not in page.chart_series(device)
    assert "consistent with reads from the device" in _key(_findings(device), "cold_latency").text
    bare_fast = _result({"headline": h, "latency": _latency(15.0)}, hypervisor=False)
    assert page.cold_name(bare_fast) == "cold"
    assert "faster memory or a cache" in _key(_findings(bare_fast), "cold_latency").text
    refilled = _result({"headline": h, "latency": _latency(90.0, second=20.0)}, hypervisor=True)
    assert "filled a cache" in _key(_findings(refilled), "cold_latency").text
    assert analysis.analyse(_result({"headline": h})).data["guest_cold"] is None


def test_cold_that_cannot_be_told_apart_is_said_once_on_the_page():
    """A latency check inside the band around the flash floor labels every cold read just "cold"; the page says once,
    at the opening's first use of the word, that the device and a host cache could not be told apart (the
    "(device or host cache: cannot tell)" after each of 87 labels was noise), and the latency note says why."""
    from datajourney.book import opening, registry
    from datajourney.core import phrasing

    h = _headline([400, 410, 415], [2100, 2400, 2300])
    res = _result({"headline": h, "latency": _latency(38.0)}, hypervisor=True)
    facts = analysis.analyse(res)
    assert facts["cold_state"].setting["state"] == "undecided" and facts.data["cold_label"] == "cold"
    assert all("cannot tell" not in f.label for f in facts.facts.values())   # labels: just "cold"
    first = page.opening(facts).findings[0].text
    assert first.count(phrasing.UNDECIDED_COLD[1:]) == 1 and first.count("cannot tell") == 1, first
    res.facts = facts
    shown = opening.markdown(page, res, None, is_reference_run=True)
    found = [f.text for f in page.findings(registry.analysed(res).facts)]
    assert "\n".join([shown, *found]).count("cannot tell)") == 1      # once on the page: opening and "How we know"
    assert "may have come from either" in page.latency_note(facts)   # the rule, in the latency section
    clear = analysis.analyse(_result({"headline": h, "latency": _latency(80.0)}, hypervisor=True))
    assert "cannot tell" not in page.opening(clear).findings[0].text   # the device: nothing to qualify


def _sweep(ratios_by_size):
    rows = []
    for size, (rnd, seq) in ratios_by_size.items():
        for cache in ("cold",):
            for run, (r, s) in enumerate(zip(rnd, seq)):
                rows += [dict(pattern="random", cache=cache, run=run, file_size=size, MBps=r),
                         dict(pattern="sequential", cache=cache, run=run, file_size=size, MBps=s)]
    return rows


def test_file_size_sweep_says_whether_layouts_converge():
    h = _headline([400], [2100])
    apart = _findings(_result({"headline": h, "size_sweep": _sweep(
        {4096: ([130, 135, 140], [1600, 2000, 2400]), 1 << 20: ([1060, 1100, 1140], [2250, 2300, 2350])})}))
    f = _key(apart, "size_sweep")
    assert "have not converged" in f.text and "narrows" in f.text and f.value == pytest.approx(2300 / 1100, rel=1e-3)
    together = _findings(_result({"headline": h, "size_sweep": _sweep(
        {4096: ([130, 135, 140], [1600, 2000, 2400]), 1 << 20: ([2200, 2300, 2400], [2250, 2300, 2350])})}))
    assert "they converge" in _key(together, "size_sweep").text


def _chunks(values):
    rows = []
    for (mode, chunk), runs in values.items():
        rows += [dict(mode=mode, chunk=chunk, run=i, MBps=v, error=None) for i, v in enumerate(runs)]
    return rows


def test_read_size_dips_are_judged_against_the_spread():
    noisy = _result({"headline": _headline([400], [2100]), "chunk_sweep": _chunks({
        ("O_DIRECT", 262144): [2829, 3497, 3583], ("O_DIRECT", 1 << 20): [1768, 1860, 3115],
        ("buffered", 262144): [3186, 3267, 3269], ("buffered", 1 << 20): [3100, 3150, 3270]})})
    text = page.chunk_sweep_notes(noisy)
    assert "inside the run-to-run spread" in text and "real dip" not in text
    real = _result({"headline": _headline([400], [2100]), "chunk_sweep": _chunks({
        ("O_DIRECT", 262144): [3300, 3350, 3400], ("O_DIRECT", 1 << 20): [2200, 2250, 2300]})})
    assert "a real dip" in page.chunk_sweep_notes(real)
    flat = _result({"headline": _headline([400], [2100]), "chunk_sweep": _chunks({
        ("buffered", 4096): [3000, 3010, 3020], ("buffered", 65536): [3100, 3110, 3120]})})
    assert "never fell" in page.chunk_sweep_notes(flat) and "No configuration varied" in page.chunk_sweep_notes(flat)
    assert "O\\_DIRECT at 1 MiB (1,768–3,115 MB/s, coefficient of variation 33.5%)" in text


def test_odirect_finding_follows_the_data():
    res = _result({"headline": _headline([400], [2100]), "chunk_sweep": _chunks({
        ("buffered", 4096): [2300, 2700, 2900], ("O_DIRECT", 4096): [200, 203, 240],
        ("buffered", 262144): [3186, 3267, 3269], ("O_DIRECT", 262144): [2829, 3497, 3583]})})
    f = _key(_findings(res), "odirect")
    assert "faster than O\\_DIRECT reads in 4 KiB requests" in f.text and "From 256 KiB" in f.text
    never = _result({"headline": _headline([400], [2100]), "chunk_sweep": _chunks({
        ("buffered", 4096): [2300, 2700, 2900], ("O_DIRECT", 4096): [200, 203, 240],
        ("buffered", 262144): [3186, 3267, 3269], ("O_DIRECT", 262144): [1000, 1100, 1200]})})
    assert "stayed below buffered" in _key(_findings(never), "odirect").text


def _length(short, part, whole):
    rows = []
    for what, vals, n in (("headline shard", short, 163840000), ("long shard, first part", part, 163840000),
                          ("long shard, whole", whole, 1 << 30)):
        rows += [dict(read=what, run=i, chunk=16384, bytes=n, MBps=v) for i, v in enumerate(vals)]
    return rows


def test_shard_length_note_names_the_cause_the_data_show():
    h = _headline([400], [2100])
    by_length = _result({"headline": h, "shard_length": _length([2100, 2300, 2200], [2150, 2250, 2200],
                                                                [3000, 3100, 3050])})
    assert "comes from the length of the read" in page.shard_length_note(analysis.analyse(by_length))
    by_file = _result({"headline": h, "shard_length": _length([2100, 2150, 2200], [3000, 3050, 3100],
                                                              [3000, 3100, 3050])})
    assert "comes from the file" in page.shard_length_note(analysis.analyse(by_file))
    neither = _result({"headline": h, "shard_length": _length([2000, 2600, 3000], [2100, 2500, 3100],
                                                              [2200, 2700, 3000])})
    assert "run-to-run variation" in page.shard_length_note(analysis.analyse(neither))


def test_purge_and_residency_notes_are_computed():
    pm = [dict(purge_method=m, run=r, MBps=v, resident_at_start=res)
          for m, vals, res in (("drop_caches", [450, 560, 330], 0.0), ("fadvise", [460, 420, 390], 0.0))
          for r, v in enumerate(vals)]
    clean = page.purge_note(analysis.analyse(_result({"purge_methods": pm})))
    assert "Both purges left none of the data pages" in clean and "at most 0%" not in clean
    assert "The run-by-run ratio fell on both sides of 1×" in clean
    dirty_pm = [dict(r, resident_at_start=0.4) if r["purge_method"] == "fadvise" else r for r in pm]
    dirty = page.purge_note(analysis.analyse(_result({"purge_methods": dirty_pm})))
    assert "Both purges" not in dirty and "`fadvise` left up to 40%" in dirty and "target" not in dirty
    fast = [dict(purge_method=m, run=r, MBps=v, resident_at_start=0.0)
            for m, vals in (("drop_caches", [100, 105, 110]), ("fadvise", [300, 310, 320])) for r, v in enumerate(vals)]
    assert "only `drop_caches` evicts" in page.purge_note(analysis.analyse(_result({"purge_methods": fast})))
    h = pd.DataFrame(_headline([400], [2100], [3000], [9000]))
    note = page.residency_note(analysis.analyse(_result({"headline": h})))
    assert "**none** of the data" in note and "at most **0%**" not in note and "met" not in note
    assert ("warm runs with **all** of the data resident" in note) == bool((h.loc[h["cache"] == "warm",
                                                                          "resident_at_start"] >= 1).all()), note
    h2 = h.copy()
    h2.loc[h2["cache"] == "warm", "resident_at_start"] = 0.9
    assert "warm runs with at least **90%** of the data resident" in page.residency_note(
        analysis.analyse(_result({"headline": h2})))
    guest = page.residency_note(analysis.analyse(_result({"headline": h, "latency": _latency(19.0)}, hypervisor=True)))
    assert guest.startswith("Residency: guest-cold runs")
    h.loc[h["cache"] == "cold", "resident_at_start"] = 0.3
    assert "at most **30%** of the data" in page.residency_note(analysis.analyse(_result({"headline": h})))


def test_spread_above_twenty_percent_is_commented():
    res = _result({"headline": _headline([400, 410, 415], [1610, 2426, 2334])})
    note = page.headline_notes(res)
    assert "cold sequential" in note and "1,610–2,426 MB/s" in note and "The first run was the slowest" in note
    calm = _result({"headline": _headline([400, 410, 415], [2300, 2426, 2334])})
    assert "less than 20%" in page.headline_notes(calm)


def test_published_comparison_names_the_kind_of_cold():
    h = _headline([400, 410, 415], [2100, 2400, 2300])
    guest = page.published_note(analysis.analyse(_result({"headline": h, "latency": _latency(19.0)},
                                                         hypervisor=True)))
    assert "Published cold ratio: 20.2×" in guest and "5.6× faster" in guest and "guest-cold" in guest
    device = page.published_note(analysis.analyse(_result({"headline": h, "latency": _latency(80.0)},
                                                          hypervisor=True)))
    assert "guest-cold" not in device and "no faster than flash" in device


def test_purge_note_pairs_the_runs():
    """Runs that swing together: the pooled ranges overlap, the run-by-run ratio says fadvise won every run."""
    pm = [dict(purge_method=m, run=r, MBps=v, resident_at_start=0.0)
          for m, vals in (("drop_caches", [100, 300, 200]), ("fadvise", [110, 330, 220])) for r, v in enumerate(vals)]
    note = page.purge_note(analysis.analyse(_result({"purge_methods": pm})))
    assert "`fadvise` ÷ `drop_caches` was **1.10×" in note and "3 runs" in note
    assert "`fadvise` was faster in all 3 runs" in note
    slower = [dict(r, MBps=r["MBps"] * (0.8 if r["purge_method"] == "fadvise" else 1)) for r in pm]
    assert "slower in all 3 runs" in page.purge_note(analysis.analyse(_result({"purge_methods": slower})))
    assert analysis.paired_ratios(pd.DataFrame(pm), dict(purge_method="fadvise"),
                                     dict(purge_method="drop_caches")) == pytest.approx([1.1, 1.1, 1.1])


def test_residency_and_latency_tables_are_readable():
    h = pd.DataFrame(_headline([400], [2100], [3000], [9000]))
    h["purge_method"] = "drop_caches"
    t = page.residency_table(h, ["cache", "pattern", "purge_method"], cold="guest-cold")
    # every read of a group started alike: one column, not a most and a least that repeat each other
    assert list(t.columns) == ["cache", "access pattern", "purge", "runs", "resident at start, all runs (%)"]
    assert "guest-cold" in set(t["cache"]) and "cold" not in set(t["cache"])
    assert t["resident at start, all runs (%)"].max() > 1   # percent, not a fraction
    half = h.iloc[[0]].assign(resident_at_start=0.5)       # a second read of a group started half cached
    t = page.residency_table(pd.concat([h, half]), ["cache", "pattern", "purge_method"], cold="guest-cold")
    assert list(t.columns)[-2:] == ["resident at start, most (%)", "resident at start, least (%)"]
    lat = pd.DataFrame([dict(series="O_DIRECT, first pass", run=0, reads=10, p10_us=20.0, p50_us=30.0, p90_us=40.0,
                             p99_us=50.0, max_us=60.0, error=None)])
    shown = page.latency_table(_result({"latency": lat}))
    assert "error" not in shown and "median (µs)" in shown and "p50_us" not in shown


def test_no_range_with_equal_ends_in_chapter_2_text():
    import re

    res = _result({"headline": _headline([400, 400, 400], [2000, 2000, 2000], [3000, 3000, 3000],
                                         [9000, 9000, 9000])})
    text = " ".join(f.text for f in _findings(res))
    for a, b in re.findall(r"([0-9][0-9.,]*)×?–([0-9][0-9.,]*)", text):
        assert a != b, text
    assert "the per-file cost of" not in text   # the warm gap's cause is mechanism, not a measured result
