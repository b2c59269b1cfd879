"""Chapter 10: the indexed token data set, its readers, bad input, and findings that follow the data."""
import json
import struct
import warnings

import numpy as np
import pandas as pd
import pytest

from datajourney.book import harness
from datajourney.chapters.c10_mmap_vs_read import analysis, page
from datajourney.chapters.c10_mmap_vs_read import experiment as tracing
from datajourney.core import phrasing, results
from datajourney.core.params import ParameterError
from datajourney.toolkit import tokens


@pytest.fixture()
def small(tmp_path):
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 40, size=300)
    toks = rng.integers(0, tokens.GPT2_VOCAB, size=int(lengths.sum()), dtype=np.uint16)
    prefix = tmp_path / "t"
    tokens.write_indexed(prefix, toks, lengths)
    return prefix, toks, lengths


def test_round_trip_both_modes_same_bytes(small):
    prefix, toks, lengths = small
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for mode in tokens.MODES:
        tf = tokens.TokenFile(prefix, mode)
        assert len(tf) == lengths.size
        for i in (0, 7, 299):
            assert np.array_equal(tf.get(i), toks[starts[i]:starts[i] + lengths[i]])
        assert np.array_equal(tf.get(7, 1, 3), toks[starts[7] + 1:starts[7] + 4]) or lengths[7] < 4


def test_megatron_reads_our_files(small):
    prefix, toks, lengths = small
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install 'datajourney[ch10]')")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset
    ours = tokens.TokenFile(prefix, "mmap")
    for mmap in (True, False):
        ds = IndexedDataset(str(prefix), mmap=mmap)
        assert len(ds) == lengths.size
        assert np.array_equal(ds.sequence_lengths, lengths)
        assert np.array_equal(ds.document_indices, np.arange(lengths.size + 1))
        for i in range(0, lengths.size, 37):
            assert np.array_equal(ds[i], ours.get(i))


def test_reader_agrees_with_an_independent_parse(small):
    """Without megatron-core: parse the header with struct and compare every field."""
    prefix, toks, lengths = small
    raw = prefix.with_suffix(".idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    version, code, n, m = struct.unpack_from("<QBQQ", raw, 9)
    assert (version, code, n, m) == (1, 8, lengths.size, lengths.size + 1)
    ptr = np.frombuffer(raw, "<i8", count=n, offset=34 + 4 * n)
    assert ptr[-1] == 2 * (lengths.sum() - lengths[-1])


def _corrupt(prefix, offset=None, data=None, truncate=None):
    p = prefix.with_suffix(".idx")
    raw = bytearray(p.read_bytes())
    if truncate is not None:
        raw = raw[:truncate]
    if offset is not None:
        raw[offset:offset + len(data)] = data
    p.write_bytes(bytes(raw))


@pytest.mark.parametrize("how, field", [
    (dict(offset=0, data=b"XXXXXXX"), "magic"),
    (dict(truncate=20), "header"),
    (dict(truncate=200), "sequence_count/document_count"),
    (dict(offset=17, data=bytes([42])), "dtype"),
    (dict(offset=9, data=struct.pack("<Q", 2)), "version"),
])
def test_corrupt_index_names_file_and_field(small, how, field):
    prefix, _, _ = small
    _corrupt(prefix, **how)
    with pytest.raises(tokens.CorruptIndex) as e:
        tokens.read_index(prefix.with_suffix(".idx"))
    assert e.value.field == field and str(prefix.with_suffix(".idx")) in str(e.value)


def test_pointer_past_the_end_of_bin(small):
    prefix, _, lengths = small
    n = lengths.size
    _corrupt(prefix, offset=34 + 4 * n + 8 * (n - 1), data=struct.pack("<q", 10 ** 9))
    with pytest.raises(tokens.CorruptIndex, match="past the end of t.bin") as e:
        tokens.read_index(prefix.with_suffix(".idx"))
    assert e.value.field == "sequence_pointers"


def test_truncated_bin(small):
    prefix, _, _ = small
    b = prefix.with_suffix(".bin")
    b.write_bytes(b.read_bytes()[:-10])
    with pytest.raises(tokens.CorruptIndex, match="sequence_pointers"):
        tokens.TokenFile(prefix, "read")


def test_samples_are_megatron_windows_of_the_shuffled_stream(small):
    prefix, toks, lengths = small
    tf = tokens.TokenFile(prefix, "read")
    plan = tracing.SamplePlan(tf.index, 50, seed=3)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    stream = np.concatenate([toks[starts[d]:starts[d] + lengths[d]] for d in plan.doc_order])
    ds = tracing.TokenSamples(tf, plan, np.arange(plan.n_samples), spans=True)
    seen = set()
    for k in range(len(ds)):
        x, y, stats = ds[k]
        s = int(plan.shuffle[k])
        seen.add(s)
        want = stream[s * 50:s * 50 + 51].astype(np.int64)
        assert np.array_equal(x.numpy(), want[:-1]) and np.array_equal(y.numpy(), want[1:])
        assert stats[4] == 51 * 2
    assert seen == set(range(plan.n_samples))   # every sample exactly once
    mm = tracing.TokenSamples(tokens.TokenFile(prefix, "mmap"), plan, np.arange(5), spans=False)
    rd = tracing.TokenSamples(tf, plan, np.arange(5), spans=False)
    assert all(np.array_equal(mm[i][0], rd[i][0]) for i in range(5))


def test_sequence_longer_than_the_documents(small):
    prefix, _, lengths = small
    with pytest.raises(ParameterError, match="seq_lengths") as e:
        tracing.SamplePlan(tokens.read_index(prefix.with_suffix(".idx")), int(lengths.sum()), seed=0)
    assert "t.idx" in str(e.value)


CI = dict(dataset_bytes=4 << 20, seq_lengths=[128], batch_sizes=[4], steps=2, runs=1, cache_states=["warm"],
          workers=[0], workers_seq_length=128, workers_batch_size=4, posix_view="auto", overhead_rounds=1,
          overhead_seq_length=128, overhead_batch_size=4, checkpoint_sizes=[], checkpoint_runs=1,
          posix_checkpoint_bytes=1 << 20, purge_method="auto")


@pytest.mark.parametrize("change, name", [
    (dict(batch_sizes=[0]), "batch_sizes"),
    (dict(seq_lengths=[3 << 20]), "seq_lengths"),
    (dict(batch_sizes=[100_000]), "batch_sizes"),
    (dict(steps=1), "steps"),
    (dict(posix_view="maybe"), "posix_view"),
    (dict(cache_states=["hot"]), "cache_states"),
    (dict(dataset_bytes=-1), "dataset_bytes"),
])
def test_bad_parameters_fail_up_front(change, name, tmp_path):
    with pytest.raises(ParameterError) as e:
        tracing.preflight({**CI, **change, "data_dir": str(tmp_path)})
    assert e.value.name == name if hasattr(e.value, "name") else name in str(e.value)
    assert name in str(e.value)


def test_trace_reader_survives_a_truncated_file(tmp_path):
    import gzip

    lines = [json.dumps({"name": "FH", "cat": "dftracer", "args": {"name": "/d/tokens.bin", "value": "h1"}}),
             json.dumps({"name": "read", "cat": "POSIX", "pid": 1, "ts": 10, "dur": 2,
                         "args": {"ret": 100, "count": 100, "fhash": "h1"}})]
    raw = gzip.compress(("\n".join(lines * 50) + "\n").encode())
    (tmp_path / "a.pfw.gz").write_bytes(raw[: len(raw) - 20])
    ev = tracing.read_trace(tmp_path)
    assert ev and ev[0]["path"] == "/d/tokens.bin"
    s = tracing.summarise_events(ev)
    assert s["reads"] == len(ev) and s["read_bytes"] == 100 * len(ev)


# ---------------------------------------------------------------------------- findings follow the data
def _result(mmap_events=(6, 6, 6, 6), read_scale=1.0, mmap_loader=1.0, read_loader=2.0, over=(1.0, 1.2)):
    grid, posix = [], []
    for seq in (128, 256):
        for batch in (4, 16):
            for mode in ("mmap", "read"):
                for cache in ("cold", "warm"):
                    for run in (0, 1):
                        pieces = batch * seq / 20
                        grid.append(dict(part="grid", mode=mode, seq=seq, batch=batch, workers=0, cache=cache, run=run,
                                         steps=2, samples=2 * batch,
                                         loader_s=(mmap_loader if mode == "mmap" else read_loader) * (1 + 0.01 * run),
                                         app_bytes=2 * batch * (seq + 1) * 2, pieces=pieces, lookup_s=0.001,
                                         read_s=0.002 if mode == "mmap" else 0.01, construct_s=0.001, collate_s=0.001,
                                         minflt=100 if mode == "mmap" else 5, majflt=3 if mode == "mmap" else 0,
                                         syscr=5 if mode == "mmap" else pieces, read_bytes=1e6, disk_read_bytes=1e6))
                i = len(posix)
                ev = mmap_events[i // 2 % len(mmap_events)] if mode == "mmap" else 4 * batch * seq / 20 * read_scale
                posix.append(dict(part="posix", mode=mode, seq=seq, batch=batch, samples=2 * batch, posix_events=ev,
                                  posix_reads=ev / 4, posix_opens=ev / 4, posix_bin_reads=ev / 4, posix_read_bytes=ev,
                                  posix_mean_read_bytes=40.0, posix_read_s=0.001, pieces=batch * seq / 20,
                                  posix_calls=json.dumps({"open64": 1, "read": 1}), ckpt_posix_writes=4,
                                  ckpt_posix_write_bytes=1000))
    overhead = []
    for rnd in (0, 1):
        for mode in ("mmap", "read"):
            overhead.append(dict(view="off", mode=mode, round=rnd, loader_s=over[0]))
            overhead.append(dict(view="posix", mode=mode, round=rnd, loader_s=over[1]))
    ck = [dict(state_bytes=1 << 20, method=m, run=r, GBps=1.0, blocked_s=b, total_s=1.0, device="cpu")
          for r in (0, 1) for m, b in (("torch_save", 1.0), ("dcp_save", 1.0), ("dcp_async_save", 0.2))]
    res = results.Result(chapter="10_mmap_vs_read", run_id="t", parameters={}, fingerprint={},
                         metadata={"itemsize": 2, "composition": {}})
    res.add("sweep", pd.DataFrame(grid))
    res.add("posix", pd.DataFrame(posix))
    res.add("overhead", pd.DataFrame(overhead))
    res.add("checkpoint", pd.DataFrame(ck))
    return res


def test_findings_follow_the_data():
    base = {f.key: f for f in page.findings(analysis.analyse(_result()))}
    # the same count at every point is "exactly", never also "constant within ±5%"
    assert "exactly 6 events per sweep point under mmap;" in base["posix_events"].text
    assert "constant within" not in base["posix_events"].text and "grows with the tokens read" in base[
        "posix_events"].text
    assert "mmap was 2.0× faster than read()" in base["loader_time"].text
    assert base["overhead"].value == pytest.approx(1.2) and "1.20× slower than read() with tracing off" in \
        base["overhead"].text
    # reversed: mmap counts vary, mmap slower, tracing makes things faster
    rev = {f.key: f for f in page.findings(analysis.analyse(
        _result(mmap_events=(6, 60, 6, 6), mmap_loader=3.0, over=(1.0, 0.8))))}
    assert "not constant" in rev["posix_events"].text
    assert "mmap was 1.50× slower than read()" in rev["loader_time"].text
    assert "mmap was faster at 0 of 4 sweep points and read() at 4" in page.loader_note(analysis.analyse(
        _result(mmap_events=(6, 60, 6, 6), mmap_loader=3.0, over=(1.0, 0.8))))
    assert "mmap was faster at 4 of 4 sweep points and read() at 0" in page.loader_note(analysis.analyse(_result()))
    # a traced loader faster than the untraced one is impossible: flagged, never worded as an outcome
    assert rev["overhead"].value == pytest.approx(0.8) and "measurement problem" in rev["overhead"].text
    assert "1.25× faster than" not in rev["overhead"].text
    same = {f.key: f for f in page.findings(analysis.analyse(_result(mmap_loader=2.0)))}
    assert "mmap was level with read()" in same["loader_time"].text
    assert "5.0× faster than the caller blocked by DCP save" in base["checkpoint"].text


def test_findings_without_the_posix_view():
    res = _result()
    del res.tables["posix"]
    res.metadata["posix_why_not"] = "the dftracer package is not installed"
    f = next(f for f in page.findings(analysis.analyse(res)) if f.key == "posix_events")
    assert f.value is None and "did not run" in f.text and "not installed" in f.text
    facts = analysis.analyse(res)
    tracer = page.opening(facts).actions[-1].text
    assert "install DFTracer" in tracer and "not installed" in tracer
    assert "event ratio" not in page.meaning(facts)
    assert "POSIX events read() ÷ mmap, largest point" not in page.key_metrics(res)


def _reversed(res: results.Result) -> results.Result:
    """A copy of ``res`` whose two readers trade their measurements (sweep and overhead rounds) and whose
    tracer overhead is turned around (tracing off and the POSIX view trade places)."""
    swap = {"mmap": "read", "read": "mmap"}
    sweep = res.table("sweep").assign(mode=lambda d: d["mode"].map(swap))
    o = res.table("overhead")
    o = o.assign(view=o["view"].map({"off": "posix", "posix": "off"}).fillna(o["view"]))
    return results.Result(res.chapter, res.run_id, res.parameters, res.fingerprint,
                          {**res.tables, "sweep": sweep, "overhead": o}, res.metadata)


def test_chapter_10_opening_follows_reversed_data():
    """The reference run leads with loader time, not the POSIX event ratio: cold, read() loaded faster and the
    POSIX view cost read() loader time. With the readers' measurements traded and the tracer's rounds turned
    around, the direction words, the reader to use and the advice on tracing all flip."""
    ref = results.load_reference("10_mmap_vs_read")
    op = page.opening(analysis.analyse(ref))
    assert [f.key for f in op.findings] == ["sweep_loader", "per_sample_bandwidth", "overhead"]
    sweep, _, over = op.findings
    assert sweep.text.startswith("Cold") and "slower than" in sweep.text and sweep.value > 1
    assert "slower than read() with tracing off" in over.text and over.value > 1
    assert "use `os.preadv(fd, [buffer], offset)`" in op.actions[0].text and "preadv" in op.actions[0].snippet
    assert "reader=" not in op.actions[0].text  # a real call, not the chapter's name for the mode
    assert "num_workers=" in op.actions[1].snippet and "read()" in op.actions[1].text
    assert op.actions[2].text.startswith("Trace DFTracer's POSIX view over a short window")
    cold = phrasing.ratio_words(analysis.analyse(ref)["sweep_loader.cold"])
    assert cold.endswith("slower") and f"cold, mmap was {cold} than read()" in page.meaning(analysis.analyse(ref))
    rev = analysis.analyse(_reversed(ref))
    op = page.opening(rev)
    sweep, bw, over = op.findings
    assert "faster than" in sweep.text and sweep.value < 1
    # traced faster than untraced is impossible: flagged, and the tracer gets no advice
    assert "measurement problem" in over.text and over.value < 1
    assert "keep the default `numpy.memmap(" in op.actions[0].text and "np.memmap" in op.actions[0].snippet
    assert "mmap" in op.actions[1].text
    assert "no advice on the tracer's cost" in op.actions[2].text
    assert f"cold, mmap was {cold.replace('slower', 'faster')} than read()" in page.meaning(rev)


def test_chapter_10_opening_when_the_readers_are_level():
    op = page.opening(analysis.analyse(_result(mmap_loader=2.0)))
    assert "**level with" in op.findings[0].text and "level with" in op.actions[0].text


def test_a_ci_run_end_to_end(tmp_path, monkeypatch):
    """A small real run: findings are computed and the modes read the same samples."""
    monkeypatch.setenv("DATAJOURNEY_DATA_DIR", str(tmp_path / "data"))
    res = harness.run("10_mmap_vs_read", **{**CI, "cache_states": ["cold", "warm"], "checkpoint_sizes": [1 << 20]},
                      data_dir=tmp_path / "data", run_dir=tmp_path / "run", progress=False)
    s = res.table("sweep")
    assert set(s["mode"]) == {"mmap", "read"} and (s["samples"] == 8).all()
    assert s.groupby("mode")["app_bytes"].sum().nunique() == 1        # same bytes both ways
    read = s[s["mode"] == "read"]
    assert (read["syscr"] >= read["pieces"]).all()                    # one read call per piece at least
    assert res.facts is not None
    items = page.findings(res.facts)
    assert 3 <= len(items) <= 6 and all("nan" not in f.text for f in items)
    if res.metadata["posix_view"]:
        p = res.table("posix")
        r = p[p["mode"] == "read"]
        assert (r["posix_reads"] == r["pieces"]).all()               # the tracer sees every piece's read


def test_saved_sample_plan_loads_identical(small, tmp_path):
    prefix, _, _ = small
    index = tokens.read_index(prefix.with_suffix(".idx"))
    plans = tracing.build_plans(index, [(16, 0), (16, 0), (8, 3)], tmp_path)
    assert sorted(plans) == ["16-0", "8-3"] and all(v[1] >= 0 for v in plans.values())
    a, b = tracing.SamplePlan(index, 16, 0), tracing.SamplePlan.load(plans["16-0"][0])
    assert (a.seq, a.n_samples) == (b.seq, b.n_samples)
    for k in tracing.SamplePlan.ARRAYS:
        assert np.array_equal(getattr(a, k), getattr(b, k))
    assert [a.pieces(s) for s in range(5)] == [b.pieces(s) for s in range(5)]


def test_workers_sweep_reuses_the_grid_point_instead_of_rerunning_it():
    p = dict(seq_lengths=[64, 128], batch_sizes=[4, 8], workers=[0, 2], workers_seq_length=128,
             workers_batch_size=8, cache_states=["cold"], runs=1, steps=2, seed=0)
    cs = tracing._configs(p)
    assert not [c for c in cs if c["part"] == "workers" and c["workers"] == 0]
    rows = pd.DataFrame([dict(c, loader_s=1.0 + i) for i, c in enumerate(cs)])
    out = tracing.workers_from_grid(rows, p)
    w0 = out[(out["part"] == "workers") & (out["workers"] == 0)]
    g = rows[(rows["part"] == "grid") & (rows["seq"] == 128) & (rows["batch"] == 8)]
    assert len(w0) == len(g) == 2 and sorted(w0["loader_s"]) == sorted(g["loader_s"]) and w0["from_grid"].all()
    # a workers point off the grid is measured as before
    p2 = dict(p, workers_batch_size=16)
    assert [c for c in tracing._configs(p2) if c["part"] == "workers" and c["workers"] == 0]


def test_overhead_rounds_pair_views_by_tracer_and_warm_each_process_first():
    cfg = [dict(part="overhead", mode=m) for m in ("mmap", "read")]
    for rnd in range(3):
        specs = tracing.overhead_specs(list(tracing.VIEWS), rnd, cfg)
        assert len(specs) == 2
        for proc, configs in specs:
            assert configs[0]["discard"] and not any(c.get("discard") for c in configs[1:])
            views = {c["view"] for c in configs}
            assert views == ({"posix", "both"} if proc == "posix" else {"off", "app"})
            assert len(configs) == 1 + 2 * len(cfg)
    firsts = [tracing.overhead_specs(list(tracing.VIEWS), r, cfg)[0][1][1]["view"] for r in range(2)]
    assert firsts[0] != firsts[1]       # the order within a process turns with the round
    assert len(tracing.overhead_specs(["off", "app"], 0, cfg)) == 1


def test_posix_windows_by_bisection_match_a_scan():
    rng = np.random.default_rng(0)
    ev = [dict(name="read", pid=1, ts=int(t), dur=1, ret=10, count=10, path="/d/tokens.bin")
          for t in rng.integers(0, 1000, 500)]
    rows = pd.DataFrame([dict(window_start_us=a, window_end_us=a + 100) for a in (0, 250, 900, 2000)])
    out = tracing.attach_posix(rows, ev, "tokens.bin")
    for (_, r), n in zip(out.iterrows(), [sum(a <= e["ts"] <= a + 100 for e in ev) for a in (0, 250, 900, 2000)]):
        assert r["posix_events"] == n and r["posix_bin_reads"] == n


def test_synthetic_ids_do_not_depend_on_threads():
    a = np.concatenate(list(tokens.synthetic_ids(70_000, 5, chunk=20_000, threads=1)))
    b = np.concatenate(list(tokens.synthetic_ids(70_000, 5, chunk=20_000, threads=3)))
    assert a.size == 70_000 and np.array_equal(a, b) and a.max() < tokens.GPT2_VOCAB


def _workers(res, *, start=(0.02, 0.08), main=(0.004, 0.004), work=(0.02, 0.02), loader=(0.100, 0.160)):
    """Warm workers rows at 4 and 8 workers: per-count last start, main CPU, CPU per worker, loader time."""
    rows = []
    for k, st, mn, wk, lo in zip((4, 8), start, main, work, loader, strict=True):
        for mode in ("mmap", "read"):
            for run in (0, 1):
                rows.append(dict(part="workers", mode=mode, seq=256, batch=8, workers=k, cache="warm", run=run,
                                 steps=4, loader_s=lo * (1 + 0.01 * run), workers_last_start_s=st, main_cpu_s=mn,
                                 workers_cpu_s=wk * k, workers_minflt=400 * k, main_minflt=50))
    res.tables["sweep"] = pd.concat([res.table("sweep"), pd.DataFrame(rows)], ignore_index=True)
    return res


def test_workers_slowdown_cause_follows_the_counters():
    t = page.workers_cause_note(analysis.analyse(_workers(_result())))
    assert "slower than" in t and "Starting the extra workers accounts for 99.5% of the 60.3 ms extra" in t
    t = page.workers_cause_note(analysis.analyse(_workers(_result(), start=(0.02, 0.02), main=(0.004, 0.054))))
    assert "The main process's extra work accounts for 82.9%" in t
    t = page.workers_cause_note(analysis.analyse(_workers(_result(), start=(0.02, 0.02), work=(0.02, 0.07))))
    assert "Each worker's own extra work accounts for 82.9%" in t
    t = page.workers_cause_note(analysis.analyse(_workers(_result(), start=(0.02, 0.03))))
    assert "None of these accounts for half of the 60.3 ms extra" in t and "do not explain it" in t
    t = page.workers_cause_note(analysis.analyse(_workers(_result(), loader=(0.160, 0.100))))
    assert "no slowdown to explain" in t and "faster than" in t
    # a result from before the counters says so
    res = _workers(_result())
    res.tables["sweep"] = res.table("sweep").drop(columns=["workers_last_start_s", "main_cpu_s", "workers_cpu_s"])
    assert "not in the reference run" in page.workers_cause_note(analysis.analyse(res))


def test_time_loader_records_worker_starts_and_cpu(small):
    prefix, _, _ = small
    tf = tokens.TokenFile(prefix, "mmap")
    plan = tracing.SamplePlan(tf.index, 16, 0)
    ds = tracing.TokenSamples(tf, plan, np.arange(8), spans=False)
    tf.release()
    row = tracing.time_loader(ds, batch_size=2, workers=2, steps=3)
    assert row["workers_started"] == 2 and 0 <= row["workers_first_start_s"] <= row["workers_last_start_s"]
    assert row["workers_last_start_s"] < row["loader_s"] and row["main_cpu_s"] >= 0 and row["workers_cpu_s"] >= 0
    row0 = tracing.time_loader(ds, batch_size=2, workers=0, steps=3)
    assert row0["workers_started"] == 0 and row0["workers_last_start_s"] is None and row0["workers_cpu_s"] == 0


def test_checkpoint_notes_word_the_facts():
    """The checkpoint notes read the analysis's facts alone: the writes of every sweep point's checkpoint, and
    per method what the POSIX view recorded against the kernel (a tracer that missed most bytes is named)."""
    res = _result()
    f = analysis.analyse(res)
    assert f["checkpoint_sweep.identical"].value == "yes" and f.number("checkpoint_sweep.bytes_max") == 1000
    note = page.checkpoint_invariance_note(f)
    assert "made the same writes at every" in note and ": 4 write calls, " in note and "4–4" not in note, note
    p = res.table("posix")
    res.tables["posix"] = p.assign(ckpt_posix_writes=range(len(p)))
    assert "made different writes" in page.checkpoint_invariance_note(analysis.analyse(res))
    assert "posix_checkpoint" not in res.tables and page.checkpoint_posix_note(f) == ""
    res.tables["posix_checkpoint"] = pd.DataFrame([
        dict(method=m, posix_writes=w, posix_write_bytes=b, posix_fsyncs=1, kernel_write_bytes=2e6,
             posix_calls=json.dumps({"fsync": 1})) for m, w, b in (("torch_save", 0, 0), ("dcp_save", 4, 2e6))])
    f = analysis.analyse(res)
    assert [r["blind"] for r in f.data["checkpoint_posix"]] == [True, False]
    t = page.checkpoint_posix_note(f)
    assert "`torch.save`: 0 write calls (0 bytes)" in t and "For `torch.save` the tracer recorded 0 bytes" in t
    assert "For `DCP save`" not in t and page.checkpoint_posix_note(res) == t


def test_dft_app_note_follows_the_trace():
    res = _result()
    assert "not in the reference run" in page.dft_app_note(res)
    p = res.table("posix")
    big = p["seq"].eq(p["seq"].max()) & p["batch"].eq(p["batch"].max())
    app = dict(app_sample_n=32.0, app_index_lookup_n=32.0, app_read_n=32.0, app_construct_n=32.0,
               app_sample_s=0.01, app_index_lookup_s=0.002, app_read_s=0.004, app_construct_s=0.002)
    res.tables["posix"] = p.assign(**app, posix_bin_reads=[0.0 if m == "mmap" else v for m, v in
                                                             zip(p["mode"], p["posix_bin_reads"])])
    t = page.dft_app_note(res)
    assert "32 sample fetches under mmap" in t and "cannot see" in t and big.any()
    res.tables["posix"] = p.assign(**app)   # mmap reads visible to POSIX too (constructed)
    assert "add timing, not visibility" in page.dft_app_note(res)
    f = analysis.analyse(res)
    assert f.data["dft_app"]["state"] == "recorded" and f["dft_app.seen"].value == "no"
    assert f.number("dft_app.mmap.read_ms") == pytest.approx(4.0) and page.dft_app_note(f) == page.dft_app_note(res)
