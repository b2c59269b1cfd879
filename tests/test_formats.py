"""The storage-format comparison of chapter 7: every format's writer and reader give back the same images
(bytes, labels, and their order by index), a missing library is a labelled skip, the question's answer follows
the data (and turns when the data is reversed), impossible rates are flagged rather than advised, the committed
references (which predate the comparison) say so, and the ci run of chapter 7 shows the section."""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader

from datajourney.chapters.c07_full_picture import analysis, page, params, reading, storage
from datajourney.core import phrasing as say
from datajourney.core import results
from datajourney.toolkit import formats, images

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "data/reference/h200/07_full_picture.json"
N = 23  # not a multiple of the shard size: the last shard, chunk or row group is short


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> formats.Source:
    d = tmp_path_factory.mktemp("images")
    files = []
    for i in range(N):
        f = d / f"{i:03d}.jpg"
        f.write_bytes(images.jpeg(7, i, 24 + i % 5, 80))  # sizes differ, so a swapped image shows
        files.append(str(f))
    return formats.Source(tuple(files), tuple((3 * i) % 4 for i in range(N)))


def _stored(fmt, source, tmp_path):
    ok, why = formats.status(fmt)
    if not ok:
        pytest.skip(why)  # the same labelled reason the chapter records
    return formats.convert(fmt, source, tmp_path / fmt, per_shard=5)


def test_the_lists_of_formats_agree():
    assert formats.FORMATS == reading.STORAGE_FORMATS == params.STORAGE_FORMATS
    assert set(formats.SHUFFLE) == set(formats.INDEXED) == set(formats.FORMATS) == set(reading.LABELS)
    assert set(analysis.FORMAT_COSTS) == set(formats.FORMATS) - {"imagefolder"}


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_each_format_round_trips_the_same_images(fmt, source, tmp_path):
    st = _stored(fmt, source, tmp_path)
    assert st.n == N and st.bytes > 0 and st.files and all(Path(f).is_file() for f in st.files)
    if fmt != "imagefolder":
        assert all(Path(f).is_relative_to(tmp_path) for f in st.files) and st.seconds > 0
    # every image, its bytes and label, in storage order, through the library's own reader
    got = list(formats.items(st))
    assert [i for i, _, _ in got] == list(range(N))
    assert [(d, lab) for _, d, lab in got] == [source.item(i) for i in range(N)]
    get = formats.accessor(st)
    assert (get is None) == (not formats.INDEXED[fmt])
    if get is not None:  # by index, in any order
        try:
            for i in np.random.default_rng(0).permutation(N):
                assert get(int(i)) == source.item(int(i))
        finally:
            formats.close(get)
    # one shuffled epoch yields each image once; the DataLoader gets every label, with and without workers
    order = formats.epoch_order(st, seed=3, batch_size=4, buffer=6)
    assert sorted(order) == list(range(N))
    for w in (0, 2):
        ds, sampler = formats.loader_dataset(st, 16, seed=3, batch_size=4, buffer=6)
        dl = DataLoader(ds, batch_size=4, sampler=sampler, num_workers=w, collate_fn=images.collate,
                        multiprocessing_context="fork" if w else None)
        try:
            batches = list(dl)
        finally:
            formats.close(ds)
        labels = sorted(int(v) for b in batches for v in b.y)
        assert labels == sorted(source.labels), (fmt, w)
        assert all(b.x.shape[1:] == (3, 16, 16) for b in batches)
    compile(formats.calls(st, batch_size=4, buffer=6)["snippet"], fmt, "exec")


def test_a_missing_library_is_a_labelled_skip(monkeypatch, source, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "webdataset" else real(name, *a))
    ok, why = formats.status("webdataset")
    assert not ok and why.startswith("not measured: webdataset is not installed")
    # the comparison records it and measures the rest
    p = dict(storage_formats=["imagefolder", "webdataset"], format_workers=[0], shard_images="auto", out_size=16,
             batch_size=4, seed=0, shuffle_buffer=4, purge_method="fadvise", warmup_steps=1, format_steps=1,
             format_repeats=1, access_reads=4)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    table, runs, meta = storage.measure(source, p, data_dir=tmp_path, net=net, opt=opt, device="cpu")
    assert list(table["format"]) == ["imagefolder"] and set(runs["cache"]) == {"cold", "warm"}
    assert meta["notes"]["webdataset"].startswith("not measured: webdataset is not installed")
    assert not list(tmp_path.glob(".tmp-formats-*"))  # the scratch copies are gone


def test_cobatch_is_one_for_a_global_shuffle_and_more_for_a_local_one():
    rng = np.random.default_rng(0)
    assert formats.cobatch(rng.permutation(20000).tolist(), 64) == pytest.approx(1, abs=0.25)
    blocks = [b * 100 + j for b in rng.permutation(200) for j in rng.permutation(100)]  # shuffled within 100
    assert formats.cobatch(blocks, 64) > 10


# --------------------------------------------------------------------------- the question
def _with_formats(rates: dict[str, tuple[float, float]], *, resident: float = 0.0):
    """The reference result with a format comparison: ``rates`` {format: (cold, warm)} images/s, two runs each."""
    res = copy.deepcopy(results.Result.load(REF))
    res.facts = None
    fmts = list(rates)
    res.tables["formats"] = pd.DataFrame([dict(
        format=f, library="x", images=100, per_shard=10, shards=10, files=10, convert_s=1.0, bytes=1000,
        source_bytes=900, shuffle=formats.SHUFFLE[f], buffer=None, cobatch=1.0, random_access=formats.INDEXED[f],
        access_cold_ms=1.0 if formats.INDEXED[f] else np.nan, access_warm_ms=0.1 if formats.INDEXED[f] else np.nan,
        accesses=4, cpu_ms_per_image=2.0, call=f"{f}()", snippet=f"dataset = {f}") for f in fmts])
    res.tables["format_runs"] = pd.DataFrame([dict(
        format=f, workers=w, cache=c, repeat=r, images_per_s=(rates[f][c == "warm"] * (1 + 0.01 * r)) / (2 - w // 4),
        first_batch_ms=50.0, resident_at_start=resident if c == "cold" else 1.0)
        for f in fmts for w in (0, 4) for c in ("cold", "warm") for r in (0, 1)])
    return res


def test_the_format_question_follows_the_data_and_its_reversal():
    f = analysis.analyse(_with_formats({"imagefolder": (400.0, 500.0), "parquet": (900.0, 950.0),
                                        "webdataset": (800.0, 850.0)}))
    a = f.advice_for("image.storage_format")
    assert a.verdict == "change" and a.value == "parquet" and a.at == "num_workers=4, cold cache"
    assert a.cost == analysis.FORMAT_COSTS["parquet"] and "row group" in a.cost
    assert f[a.gain].basis == analysis.format_key("imagefolder", "cold") and a.default.startswith("one JPEG file")
    text = say.advice(a, f)
    assert "parquet()" in text and "Its cost" in text and "faster" in text
    rev = analysis.analyse(_with_formats({"imagefolder": (900.0, 950.0), "parquet": (400.0, 500.0),
                                          "webdataset": (800.0, 850.0)}))
    b = rev.advice_for("image.storage_format")
    assert b.verdict == "keep" and b.value == "imagefolder" and "keep the default" in say.advice(b, rev)
    # a gain under the 10% an option with a cost needs keeps the default
    near = analysis.analyse(_with_formats({"imagefolder": (900.0, 950.0), "litdata": (950.0, 990.0)}))
    assert near.advice_for("image.storage_format").verdict == "keep"


def test_impossible_format_rates_are_flagged_not_advised():
    res = _with_formats({"imagefolder": (400.0, 300.0), "parquet": (900.0, 950.0)})  # ImageFolder: cold > warm
    f = analysis.analyse(res)
    assert "format.imagefolder.cold_vs_warm.flagged" in f and f.advice_for("image.storage_format") is None
    assert "Flagged: a measurement problem" in page.format_note(res) and "has no answer" in page.format_note(res)
    res = _with_formats({"imagefolder": (400.0, 500.0), "parquet": (900.0, 950.0)}, resident=0.9)  # not cold
    assert f"{analysis.format_key('parquet', 'cold')}" in analysis.analyse(res)
    assert "format.parquet.cold_vs_warm.flagged" in analysis.analyse(res)
    ceiling = float(res.table("ceiling")["images_per_s"].mean())
    over = _with_formats({"imagefolder": (400.0, 500.0), "parquet": (3 * ceiling, 3.1 * ceiling)})
    g = analysis.analyse(over)
    assert f"{analysis.format_key('parquet', 'cold')}.flagged" in g
    assert g.advice_for("image.storage_format") is None  # the one other candidate is not a finding


def test_the_references_say_not_measured_and_keep_their_facts():
    """A committed result made before the format comparison existed says it was not measured, and its stored facts
    are what the analysis gives."""
    res = next(r for r in (results.Result.load(p) for p in sorted(REF.parent.glob("repeats/07_full_picture-*.json")))
               if "formats" not in r.tables)
    stored = res.facts
    res.facts = None
    f = analysis.analyse(res)
    assert "formats" not in f.data and f.advice_for("image.storage_format") is None
    assert not [x for x in f.to_dict()["facts"] if x["key"].startswith("format.")]
    assert "not measured in this run" in page.format_note(res) and page.format_table(res).empty
    assert stored is not None and f.to_dict() == stored.to_dict()  # the stored facts are what the analysis gives


@pytest.mark.notebooks
def test_the_ci_run_of_chapter_7_shows_the_section(ci_run):
    import nbformat

    res = results.Result.load(ci_run / "07_full_picture.json")
    table, runs = res.table("formats"), res.table("format_runs")
    measured = [f for f in formats.FORMATS if formats.status(f)[0]]
    assert list(table["format"]) == measured and set(runs["format"]) == set(measured)
    assert set(res.metadata["formats"]["notes"]) == set(formats.FORMATS) - set(measured)
    assert all(n.startswith("not measured: ") for n in res.metadata["formats"]["notes"].values())
    nb = nbformat.read(ci_run / "notebooks" / "07_full_picture.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "format_table(res)" in c.source)
    html = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
    assert all(reading.LABELS[f] in html for f in measured)
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in cell.outputs)


def test_format_workers_name_counts_by_the_cores_and_bad_ones_fail_first():
    from datajourney.chapters.c07_full_picture import experiment
    from datajourney.chapters.c07_full_picture.params import worker_counts
    from datajourney.core.params import ParameterError

    assert worker_counts("auto", 16) == [0, 4, 8, 16] and worker_counts("cores", 64) == [64]
    assert worker_counts([2, 3], 16) == [2, 3] and worker_counts("auto", 1) == [0, 1]
    with pytest.raises(ParameterError, match="format_workers"):
        experiment.preflight({"format_workers": "half"})


def test_one_best_worker_count_for_every_format_is_said_once_in_the_caption():
    """Every format's best images/s at 16 workers: the count goes in the caption, the cells hold numbers; formats
    best at different counts keep each count in brackets."""
    import copy

    from datajourney.chapters.c07_full_picture import analysis, page
    from datajourney.core import results

    res = results.load_reference("07_full_picture", "h200")
    facts = copy.deepcopy(page.facts_of(res))   # the page's facts are shared: change a copy
    workers = {int(facts[k].setting["workers"]) for k in facts.facts if k.startswith("format.") and
               k.count(".") == 2 and facts[k].number is not None and "workers" in facts[k].setting}
    assert workers == {16}, workers
    assert "16 for every format" in page.format_caption(res)
    assert "images/s, cold" in page.format_table(res).columns
    key = analysis.format_key("mds", "cold")
    facts.facts[key] = type(facts[key])(**{**facts[key].__dict__, "setting": {**facts[key].setting, "workers": 8}})
    assert "in brackets" in page.format_caption(facts) and "images/s, cold (W)" in page.format_table(facts).columns
