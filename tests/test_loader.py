"""Chapter 3's Datasets return the right bytes; epochs are timed as documented; findings follow the data."""
import time

import pandas as pd
import pytest
import torch
from helpers import has_nan
from torch.utils.data import Dataset

from datajourney.book import harness
from datajourney.chapters.c03_dataloader import analysis, page
from datajourney.chapters.c03_dataloader import experiment as loader
from datajourney.core.params import ParameterError
from datajourney.core.results import Result
from datajourney.toolkit import datasets


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return datasets.small_files(tmp_path_factory.mktemp("d"), n_files=40, file_size=4096, progress=False)


def test_both_datasets_return_the_same_samples(ds):
    a, b = loader.make_dataset(ds, "small_files"), loader.make_dataset(ds, "shard")
    assert len(a) == len(b) == 40
    for i in (0, 17, 39):
        assert torch.equal(a[i], b[i])
        assert bytes(a[i].numpy()) == ds.files[i].read_bytes()
    length = loader.make_dataset(ds, "shard_in_order", payload="length")
    assert int(length[3]) == 4096 and length[3].dtype == torch.long


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", loader.KINDS)
def test_epoch_sees_every_sample(ds, kind, workers):
    r = loader.time_epoch(loader.make_dataset(ds, kind), batch_size=16, num_workers=workers, seed=0,
                          shuffle=loader.shuffled(kind))
    assert r["samples"] == 40 and r["bytes"] == 40 * 4096 and r["batches"] == 3
    assert 0 < r["first_batch_s"] <= r["seconds"]
    assert r["steady_batches"] == 2 and r["steady_samples"] == 24 and r["steady_bytes"] == 24 * 4096
    assert r["main_cpu_s"] > 0 and (r["workers_cpu_s"] > 0) == (workers > 0)
    assert 0 <= r["workers_startup_cpu_s"] <= r["workers_cpu_s"] and (r["workers_startup_cpu_s"] > 0) == (workers > 0)


def test_length_payload_counts_the_same_bytes(ds):
    r = loader.time_epoch(loader.make_dataset(ds, "shard", payload="length"), batch_size=16, num_workers=0, seed=0)
    assert r["bytes"] == 40 * 4096


class _Indices(Dataset):
    """Returns each sample's index; sleeps on the first access in each process."""

    def __init__(self, n, first_delay=0.0):
        self.n, self.first_delay, self.seen = n, first_delay, False

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not self.seen:
            self.seen = True
            time.sleep(self.first_delay)
        return torch.tensor(i)


@pytest.mark.parametrize("workers", [0, 2])
def test_in_order_mode_reads_in_order(workers, monkeypatch):
    """time_epoch(shuffle=False) delivers samples 0, 1, 2, ... (shuffle=True does not)."""
    def run(shuffle):
        seen = []
        monkeypatch.setattr(loader, "_batch_bytes", lambda b: seen.extend(b.tolist()) or len(b))
        loader.time_epoch(_Indices(50), batch_size=8, num_workers=workers, seed=0, shuffle=shuffle)
        return seen

    assert run(False) == list(range(50))
    shuffled = run(True)
    assert sorted(shuffled) == list(range(50)) and shuffled != list(range(50))
    assert loader.shuffled("shard_in_order") is False and loader.shuffled("shard") and loader.shuffled("small_files")


def test_sweep_reads_the_in_order_shard_in_order(ds, monkeypatch):
    order = {}
    original = loader.ShardDataset.__getitem__

    def logged(self, i):
        order.setdefault(self._kind, []).append(i)
        return original(self, i)

    original_make = loader.make_dataset

    def make(d, kind, payload="bytes"):
        out = original_make(d, kind, payload)
        out._kind = kind
        return out

    monkeypatch.setattr(loader.ShardDataset, "__getitem__", logged)
    monkeypatch.setattr(loader, "make_dataset", make)
    df = loader.sweep(ds, workers=[0], cache_states=["warm"], runs=1, batch_size=8, method="auto", seed=0)
    assert order["shard_in_order"] == list(range(40))
    assert sorted(order["shard"]) == list(range(40)) and order["shard"] != list(range(40))
    assert df.set_index("kind")["shuffled"].to_dict() == {"small_files": True, "shard": True, "shard_in_order": False}


def test_steady_state_excludes_the_first_batch():
    delay = 0.4
    r = loader.time_epoch(_Indices(64, first_delay=delay), batch_size=8, num_workers=0, seed=0, shuffle=False)
    assert r["first_batch_s"] >= delay
    assert r["steady_s"] < delay / 2                      # the slow first batch is not in the steady state
    assert r["seconds"] >= r["first_batch_s"] + r["steady_s"] * 0.99
    assert r["steady_batches"] == 7 and r["steady_samples"] == 56
    d = loader._derived({**r, "bytes": 64, "steady_bytes": 56})
    assert d["ms_per_batch"] == pytest.approx(r["steady_s"] / 7 * 1e3)


def test_sweep_with_per_file_latency_makes_the_shard_win(ds, monkeypatch):
    """Inject a fixed latency into every small-file open: the shard must win at 0 workers, cold and warm."""
    original = loader.SmallFilesDataset.__getitem__

    def slow(self, i):
        time.sleep(0.002)
        return original(self, i)

    monkeypatch.setattr(loader.SmallFilesDataset, "__getitem__", slow)
    df = loader.sweep(ds, workers=[0, 2], cache_states=["cold", "warm"], runs=1, batch_size=8, method="auto", seed=0)
    assert len(df) == len(loader.KINDS) * 2 * 2
    assert df[df["cache"] == "cold"]["resident_at_start"].max() <= 0.05
    assert df[df["cache"] == "warm"]["resident_at_start"].min() >= 0.95
    sp = analysis.speedups(df).set_index(["cache", "workers"])
    for cache in ("cold", "warm"):
        assert sp.loc[(cache, 0), "shard_in_order ÷ small files"] > 3
        assert sp.loc[(cache, 0), "shard ÷ small files"] > 3
    small = df[(df["kind"] == "small_files") & (df["workers"] == 0)]
    assert (small["ms_per_batch"] >= 8 * 2.0).all()         # 8 files × 2 ms per batch at least


def test_transfer_cost_is_paired_by_run():
    rows = []
    for run, (w0, w1) in enumerate([(1.0, 1.6), (1.1, 1.5), (0.9, 1.7)]):
        for bs, scale in ((16, 1.0), (256, 4.0)):
            rows += [dict(payload="bytes", batch_size=bs, workers=0, run=run, ms_per_batch=w0 * scale,
                          main_cpu_ms_per_batch=w0 * scale),
                     dict(payload="bytes", batch_size=bs, workers=1, run=run, ms_per_batch=w0 * scale + (w1 - w0),
                          main_cpu_ms_per_batch=0.3)]
    tc = analysis.transfer_cost(pd.DataFrame(rows)).set_index("batch_size")
    assert tc.loc[16, "extra_ms_per_batch"] == pytest.approx(0.6)
    assert (tc.loc[16, "extra_min"], tc.loc[16, "extra_max"]) == (pytest.approx(0.4), pytest.approx(0.8))
    assert tc.loc[256, "extra_us_per_sample"] == pytest.approx(0.6 / 256 * 1e3)
    assert tc.loc[16, "main_cpu_ms_per_batch_w1"] == pytest.approx(0.3)
    line = pd.DataFrame(_transfer({bs: [0.5 + 0.01 * bs] * 2 for bs in (16, 64, 256)}))
    assert analysis.hand_over_fit(analysis.transfer_cost(line)) == (pytest.approx(0.5), pytest.approx(10.0))
    assert analysis.hand_over_fit(analysis.transfer_cost(line[line["batch_size"] == 16])) is None


def test_measure_transfer_runs_both_payloads(ds):
    tr = loader.measure_transfer(ds, batch_sizes=[8], runs=1, seed=0)
    assert set(tr["payload"]) == set(loader.PAYLOADS) and set(tr["workers"]) == {0, 1}
    assert (tr["bytes"] == 40 * 4096).all() and (tr["resident_at_start"] >= 0.95).all()
    assert tr[tr["workers"] == 1]["workers_cpu_ms_per_batch"].notna().all()


def test_run_writes_every_table(tmp_path):
    res = harness.run("03_dataloader",
                      n_files=64, file_size=4096, batch_size=16, workers=[0, 2], cache_states=["cold", "warm"], runs=1,
                     purge_method="auto", transfer_batch_sizes=[8, 32], latency_reads=20, handover_workers=0,
                     data_dir=tmp_path,
                     run_dir=tmp_path / "run", progress=False)
    saved = Result.load(tmp_path / "run" / f"{'03_dataloader'}.json")
    e = saved.table("epochs")
    assert set(e["kind"]) == set(loader.KINDS) and len(e) == 3 * 2 * 2
    assert {"steady_MBps", "first_batch_s", "main_busy", "batches_per_s"} <= set(e.columns)
    assert set(saved.table("transfer")["batch_size"]) == {8, 32}
    assert "latency" in saved.tables and "handover_modes" not in saved.tables
    assert {"dev_reads", "dev_request_bytes"} <= set(e.columns)
    m = page.key_metrics(saved)
    assert set(m) == {f"{a}, workers=0" for a in ("small files", "shard", "shard ÷ small files")}
    items = page.findings(saved)
    assert 3 <= len(items) <= 6 and len({f.key for f in items}) == len(items)
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text
    for note in (page.hand_over_note(saved), page.main_process_note(saved), page.first_batch_note(saved),
                 page.cold_vs_warm_note(saved), page.spread_notes(saved), page.residency(saved)):
        assert not has_nan(note)
    # the notes word the facts stored in the file exactly as they word the result analysed now
    for note in (page.hand_over_note, page.main_process_note, page.plateau_note, page.one_worker_note,
                 page.latency_note, page.key_metrics, page.paper_exercise):
        assert note(saved.facts) == note(saved), note.__name__
    assert res.path == saved.path


# ------------------------------------------------------------------ parameters
CH3 = dict(n_files=64, file_size=4096, batch_size=16, workers=[0], cache_states=["warm"], runs=1,
           purge_method="auto", seed=0, transfer_batch_sizes=[16], latency_reads=10)


@pytest.mark.parametrize("name,value,needle", [
    ("seed", -1, "integer from 0"), ("seed", "abc", "integer from 0"), ("transfer_batch_sizes", [0], "from 1"),
    ("transfer_batch_sizes", [65], "to 64"), ("transfer_batch_sizes", 16, "list"), ("latency_reads", -1, "from 0"),
    ("is_reference_run", "maybe", "true or false"), ("workers", [0.5], "integers"),
    ("handover_workers", -1, "from 0"), ("handover_workers", 1000, "to "),
])
def test_chapter3_checks_every_parameter_before_work(tmp_path, name, value, needle):
    with pytest.raises(ParameterError) as e:
        loader.preflight({**CH3, name: value, "data_dir": str(tmp_path)})
    assert repr(name) in str(e.value) and needle in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_unknown_kind_and_payload_are_named(ds):
    with pytest.raises(ValueError, match="'kind'"):
        loader.make_dataset(ds, "tar")
    with pytest.raises(ValueError, match="'payload'"):
        loader.make_dataset(ds, "shard", payload="pickle")


# ------------------------------------------------------------------ findings follow the data
def _epochs(table):
    """Rows from {(cache, workers, kind): [steady MB/s per run]} with plausible other columns."""
    rows = []
    for (cache, w, kind), vals in table.items():
        for run, v in enumerate(vals):
            busy = 0.95 if w >= 8 else 0.4
            rows.append(dict(kind=kind, shuffled=kind != "shard_in_order", workers=w, cache=cache, run=run,
                             batch_size=64, sample_size=4096, steady_MBps=v, MBps=0.9 * v, batches_per_s=v / 0.262,
                             main_busy=busy, first_batch_s=0.01 + 0.008 * w, first_batch_share=0.02 + 0.01 * w,
                             seconds=1.0, resident_at_start=0.0 if cache == "cold" else 1.0))
    return rows


def _res(table, **tables) -> Result:
    t = {"epochs": pd.DataFrame(_epochs(table)), **{k: pd.DataFrame(v) for k, v in tables.items()}}
    return Result("03_dataloader", "test", {"batch_size": 64}, {"cpu": {"hypervisor": False}}, t)


def _grid(w0, w4, w16, warm_factor=2.0):
    """w0/w4/w16: (small files, shard shuffled, shard in order) steady MB/s."""
    out = {}
    for w, vals in ((0, w0), (4, w4), (16, w16)):
        for kind, v in zip(("small_files", "shard", "shard_in_order"), vals):
            out[("cold", w, kind)] = [0.95 * v, v, 1.05 * v]
            out[("warm", w, kind)] = [warm_factor * 0.95 * v, warm_factor * v, warm_factor * 1.05 * v]
    return out


def _f(res, key):
    return next(f for f in page.findings(res) if f.key == key)


def test_published_comparison_uses_the_in_order_shard_and_follows_the_data():
    wins = _res(_grid((17, 60, 330), (80, 300, 385), (340, 336, 400)))
    f = _f(wins, "published_w0")
    assert "**19.4× faster than" in f.text and f.published == "shard ÷ small files, workers=0"
    assert page.key_metrics(wins)["shard, workers=0"][0] == pytest.approx(330)
    loses = _res(_grid((300, 60, 100), (380, 300, 200), (340, 336, 400)))
    f = _f(loses, "published_w0")
    assert "slower" in f.text and "faster" not in f.text and f.value < 1
    assert "slower" in _f(loses, "published_w4").text


def test_shuffled_gap_closes_or_stays_open_as_measured():
    closes = _res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400)))
    f = _f(closes, "shuffled_gap_max_workers")
    assert "level with" in f.text and "faster" not in f.text and "slower" not in f.text
    assert "the largest worker count measured" in f.text
    open_ = _res(_grid((17, 60, 330), (80, 300, 385), (100, 336, 400)))
    assert "faster than" in _f(open_, "shuffled_gap_max_workers").text
    rev = _res(_grid((17, 60, 330), (80, 300, 385), (500, 336, 400)))
    assert "slower than" in _f(rev, "shuffled_gap_max_workers").text


def _transfer(extra_by_bs, w0_ms=0.3, main_ms=0.5, worker_extra=1.0, length_scale=1.0):
    rows = []
    for bs, extras in extra_by_bs.items():
        for payload in ("bytes", "length"):
            for run, x in enumerate(extras):
                x = x * (length_scale if payload == "length" else 1.0)
                w0 = w0_ms * bs / 64
                rows += [dict(payload=payload, batch_size=bs, workers=0, run=run, ms_per_batch=w0,
                              main_cpu_ms_per_batch=w0, workers_cpu_ms_per_batch=None),
                         dict(payload=payload, batch_size=bs, workers=1, run=run, ms_per_batch=w0 + x,
                              main_cpu_ms_per_batch=main_ms, workers_cpu_ms_per_batch=w0 + worker_extra * x)]
    return rows


def test_one_worker_finding_measures_the_hand_over():
    grid = _grid((17, 60, 330), (80, 300, 385), (348, 336, 400))
    per_batch = _res(
        grid, transfer=_transfer({16: [0.55, 0.56, 0.57], 64: [0.55, 0.56, 0.58], 1024: [0.6, 0.62, 0.64]})
    )
    f = _f(per_batch, "one_worker")
    assert "**0.56 ms" in f.text and "costs that much" in f.text and f.value == pytest.approx(0.5633, rel=1e-3)
    # the finding is one short statement; how it scales and what it is made of go to the note beside the chart
    assert "larger batches amortise" not in f.text
    note = page.hand_over_note(per_batch)
    assert "added **0.56 ms**" in note and "larger batches amortise" in note and "per batch plus" in note
    assert "more work per batch than the reads alone" in note
    # the extra barely changes without bytes: a cost per batch, not copying bytes into shared memory
    assert "paid per batch whatever the batch holds, not for copying bytes" in note
    assert "building the batch in shared memory" not in note
    by_bytes = _res(grid, transfer=_transfer({16: [0.55, 0.56, 0.57], 64: [0.55, 0.56, 0.58]}, length_scale=0.2))
    assert "moving the bytes accounts for the difference" in page.hand_over_note(by_bytes)
    waiting = _res(grid, transfer=_transfer({16: [0.55, 0.56, 0.57], 64: [0.55, 0.56, 0.58]}, worker_extra=0.0))
    assert "spent waiting on the hand-over" in page.hand_over_note(waiting)
    cheaper = _res(grid, transfer=_transfer({16: [-0.2, -0.25, -0.3], 64: [-0.2, -0.21, -0.22]}))
    assert "one worker saved" in _f(cheaper, "one_worker").text
    level = _res(grid, transfer=_transfer({16: [-0.1, 0.0, 0.1], 64: [-0.1, 0.05, 0.1]}))
    assert "within the runs' spread" in _f(level, "one_worker").text
    per_sample = _res(grid, transfer=_transfer({16: [0.1, 0.11, 0.12], 1024: [6.4, 6.5, 6.6]}))
    assert "paid per sample" in page.hand_over_note(per_sample)
    two = _res(grid, transfer=_transfer({64: [0.55, 0.58]}))   # two paired runs: no range
    assert _f(two, "one_worker").interval is None and "–" not in _f(two, "one_worker").text


def test_main_process_bottleneck_is_stated_only_when_measured():
    grid = _grid((17, 60, 330), (80, 300, 385), (348, 336, 400))
    bound = _res(grid, transfer=_transfer({64: [0.5, 0.5, 0.5]}, main_ms=0.5))
    f = _f(bound, "main_process")
    assert "is the bottleneck" in f.text
    assert "2,000 batches/s" in page.main_process_note(bound) and "2,000 batches/s" not in f.text
    free_rows = _epochs(grid)
    for r in free_rows:
        r["main_busy"] = 0.3
    free = Result("03_dataloader", "t", {"batch_size": 64}, {"cpu": {}}, {"epochs": pd.DataFrame(free_rows)})
    f = _f(free, "main_process")
    assert "time to spare" in f.text and "bottleneck" not in f.text


def test_cold_vs_warm_wording_follows_the_ratio():
    small = _res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400), warm_factor=3))
    assert "less than an order of magnitude" in page.cold_vs_warm_note(small)
    same = _res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400), warm_factor=1.2))
    assert "little, in every configuration" in page.cold_vs_warm_note(same)
    big = _res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400), warm_factor=12))
    assert "an order of magnitude or more" in page.cold_vs_warm_note(big)


def test_one_worker_note_from_the_sweep():
    t = _grid((113, 219, 330), (80, 300, 385), (348, 336, 400))
    for kind, v in (("small_files", 80), ("shard", 145), ("shard_in_order", 330)):
        t[("cold", 1, kind)] = [0.97 * v, v, 1.03 * v]
    note = page.one_worker_note(_res(t))
    assert "small files, shuffled, cold: one worker 1.41× slower than none" in note
    assert "shard, in order (published design), cold: one worker level with" in note


def test_published_and_workers_notes_follow_the_data():
    res = _res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400)))
    note = page.published_note(res)
    assert "`num_workers=0`: published 19.5×" in note and "`num_workers=4`: published 4.8×" in note
    assert "this run 19.4× faster" in note and "target" not in note
    far = page.published_note(_res(_grid((100, 60, 330), (80, 300, 385), (348, 336, 400))))
    assert "this run 3.3× faster" in far
    gain = page.workers_gain_note(res)
    assert "small files, shuffled: 4.7× faster than none" in gain
    assert "shard, in order (published design): 1.17× faster than none" in gain


def test_hand_over_check_caps_its_epochs(ds, monkeypatch):
    monkeypatch.setattr(loader, "TRANSFER_MAX_SAMPLES", 16)
    tr = loader.measure_transfer(ds, batch_sizes=[4], runs=1, seed=0, payloads=["bytes"])
    assert (tr["samples"] == 16).all() and (tr["batches"] == 4).all()


def test_receive_cost_is_a_ceiling_only_when_every_rate_is_below_it():
    grid = _grid((17, 60, 330), (80, 300, 385), (348, 336, 400))
    high = page.main_process_note(_res(grid, transfer=_transfer({64: [0.5, 0.5, 0.5]}, main_ms=0.1)))
    assert "a ceiling, above every rate the sweep measured with workers" in high and "10,000 batches/s" in high
    low = page.main_process_note(_res(grid, transfer=_transfer({64: [0.5, 0.5, 0.5]}, main_ms=0.5)))
    assert "It is not a ceiling here" in low and "a ceiling of" not in low


def _plateau_grid(rates, busy=0.6, **tables):
    """rates: {workers: warm batches/s for every layout}; cold copies at half; main thread busy ``busy``."""
    t = {}
    for w, r in rates.items():
        for kind in loader.KINDS:
            t[("warm", w, kind)] = [0.262 * r] * 3
            t[("cold", w, kind)] = [0.131 * r] * 3
    rows = [dict(r, main_busy=busy) for r in _epochs(t)]
    return Result("03_dataloader", "test", {"batch_size": 64}, {"cpu": {}},
                  {"epochs": pd.DataFrame(rows), **{k: pd.DataFrame(v) for k, v in tables.items()}})


def test_plateau_note_compares_with_the_receive_rate_and_claims_no_cause():
    flat = _plateau_grid({0: 3000, 1: 900, 4: 1650, 8: 1700, 16: 1600},
                         transfer=_transfer({64: [0.5, 0.5, 0.5]}, main_ms=0.52))
    note = page.plateau_note(flat)
    assert "more workers stopped raising the rate" in note and "1,600–1,700 batches/s" in note
    assert "1,923 batches/s" in note and "below it" in note and "its CPU time alone does not set the plateau" in note
    assert "handing a batch over, did not run (`handover_workers` is 0)" in note
    assert "set the pace" not in note and "set the pace" not in _f(flat, "main_process").text
    matched = _plateau_grid({0: 3000, 1: 900, 4: 1850, 8: 1900, 16: 1880},
                            transfer=_transfer({64: [0.5, 0.5, 0.5]}, main_ms=0.52))
    assert "the plateau matches the main process's cost of receiving batches" in page.plateau_note(matched)
    rising = _plateau_grid({0: 3000, 1: 900, 4: 1200, 8: 1500, 16: 1900})
    assert "still rose up to the largest worker count" in page.plateau_note(rising)
    busy = _plateau_grid({0: 3000, 1: 900, 4: 1650, 8: 1700, 16: 1600}, busy=0.95)
    assert "receiving batches sets the pace" in page.plateau_note(busy)


def _with_device(res, kib):
    """The result with device counters on its cold in-order epochs: {workers: KiB per request}."""
    e = res.table("epochs").copy()
    e["dev_request_bytes"] = [kib.get(w, 0) * 1024.0 if c == "cold" else None for w, c in zip(e["workers"], e["cache"])]
    e["dev_merge_ratio"] = [3.0 if c == "cold" else None for c in e["cache"]]
    res.tables["epochs"] = e
    return res


def test_in_order_slowdown_cause_follows_the_device_and_the_warm_run():
    grid = ((74, 142, 734), (165, 224, 523), (237, 257, 367))
    # the device's requests shrank and the cold read fell behind the warm one: the device
    device = page.in_order_note(_with_device(_res(_grid(*grid)), {0: 512, 4: 256, 16: 64}))
    assert "**734 MB/s** with no workers" in device and "523 MB/s (`num_workers=4`)" in device
    assert "slower with every worker count measured" in device
    assert "512 KiB on average with no workers and 64 KiB" in device and "smaller with workers" in device
    assert "support the device explanation" in device and "hand-over explanation" not in device
    # cold as fast as warm: the hand-over, whatever the requests did
    level = page.in_order_note(_with_device(_res(_grid(*grid, warm_factor=1.0)), {0: 512, 16: 64}))
    assert "support the hand-over explanation" in level and "even though its requests shrank" in level
    # requests kept their size, cold still slower than warm: neither
    neither = page.in_order_note(_with_device(_res(_grid(*grid)), {0: 512, 16: 500}))
    assert "not smaller with workers" in neither and "Neither explanation fits" in neither
    # no device counters: said plainly, the warm comparison still decides what it can
    ref = _res(_grid(*grid, warm_factor=1.0))
    ref.run_id = "reference-h200-x"
    old = page.in_order_note(ref)
    assert "not in the reference run" in old and "the device is not what slows it down" in old
    assert "not recorded in this run" in page.in_order_note(_res(_grid(*grid)))
    table = page.device_table(_with_device(_res(_grid(*grid)), {0: 512, 4: 256, 16: 64}))
    assert list(table.columns) == ["layout", "num_workers", "requests per epoch", "KiB per request",
                                   "merges per request"]
    assert table.set_index("num_workers").loc[16, "KiB per request"].max() == 64
    assert page.device_table(_res(_grid(*grid))).empty
    assert page.in_order_note(_res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400)))) == ""


def _modes(rates):
    """The hand-over modes table from {mode: [batches/s per run]} at 16 workers."""
    return [dict(mode=m, workers=16, run=i, batches_per_s=v) for m, vals in rates.items() for i, v in enumerate(vals)]


def test_plateau_cause_follows_the_hand_over_modes():
    rates = {0: 3000, 1: 900, 4: 1650, 8: 1700, 16: 1600}
    fd = [1600, 1650, 1580]
    faster = page.plateau_note(_plateau_grid(rates, handover_modes=_modes(
        {"file descriptor": fd, "file name": [2400, 2500, 2300], "bytes through the pipe": [1600, 1620, 1590]})))
    assert "support the file-descriptor explanation" in faster and "(`file name`)" in faster
    level = page.plateau_note(_plateau_grid(rates, handover_modes=_modes(
        {"file descriptor": fd, "file name": [1610, 1640, 1570], "bytes through the pipe": [1590, 1660, 1600]})))
    assert "does not set the plateau" in level and "file-descriptor explanation" not in level
    pipe = page.plateau_note(_plateau_grid(rates, handover_modes=_modes(
        {"file descriptor": fd, "file name": [1610, 1640, 1570], "bytes through the pipe": [2400, 2500, 2300]})))
    assert "support the shared-memory explanation" in pipe and "file-descriptor explanation" not in pipe
    wide = page.plateau_note(_plateau_grid(rates, handover_modes=_modes(
        {"file descriptor": [1300, 1800], "file name": [1690, 3703], "bytes through the pipe": [3071, 2823]})))
    assert "cannot tell the explanations apart" in wide and "shared-memory explanation" not in wide
    assert "level with the default by the runs' overlap (1,690–3,703 against 1,300–1,800 batches/s)" in wide, wide
    slower = page.plateau_note(_plateau_grid(rates, handover_modes=_modes(
        {"file descriptor": fd, "file name": [900, 950, 920], "bytes through the pipe": [800, 850, 820]})))
    assert "Both alternatives were slower" in slower
    ref = _plateau_grid(rates)
    ref.run_id = "reference-h200-x"
    assert "is not in the reference run" in page.plateau_note(ref)


def test_worker_share_says_whether_workers_had_time_to_spare():
    rates = {0: 3000, 1: 900, 4: 1650, 8: 1700, 16: 1600}
    res = _plateau_grid(rates)
    e = res.table("epochs")
    e["workers_startup_cpu_s"] = 0.01
    e["workers_cpu_s"] = 0.01 + 0.2 * e["workers"]       # 20% of a 1 s epoch per worker
    assert "the workers had time to spare" in page.plateau_note(res)
    e["workers_cpu_s"] = 0.01 + 0.95 * e["workers"]
    assert "the workers were busy" in page.plateau_note(res)


def test_handover_modes_run_every_mode_and_restore_the_strategy(ds):
    import torch.multiprocessing as tmp

    before = tmp.get_sharing_strategy()
    hm = loader.measure_handover_modes(ds, workers=2, runs=1, batch_size=8, seed=0)
    assert tmp.get_sharing_strategy() == before
    assert set(hm["mode"]) <= set(loader.HANDOVER_MODES) and {"file descriptor", "bytes through the pipe"} <= set(
        hm["mode"]
    )
    assert (hm["samples"] == 40).all() and (hm["bytes"] == 40 * 4096).all() and (hm["batches_per_s"] > 0).all()


def test_sweep_records_what_the_device_saw(ds):
    dev = loader.block_device(ds.shard)["partition"]
    e = loader.sweep(ds, workers=[0], cache_states=["cold"], runs=1, batch_size=8, method="auto", seed=0,
                     kinds=["shard_in_order"], device=dev)
    assert {"dev_reads", "dev_request_bytes", "dev_merge_ratio"} <= set(e.columns)
    if dev:
        assert e["dev_reads"].iloc[0] is not None and e["dev_reads"].iloc[0] >= 0
    assert loader.device_view(dict(dev_reads=4, dev_merged=6))["dev_merge_ratio"] == 1.5


def test_first_batch_note_labels_each_cache_state_once():
    res = _res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400)))
    note = page.first_batch_note(res)
    assert note.count("of the whole epoch") == 1 and "took: warm," in note and "cold," not in note.split("took:")[-1]


def test_chapter_3_tables_are_readable():
    res = _res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400)),
               transfer=_transfer({16: [0.5, 0.5, 0.5], 64: [0.5, 0.6, 0.7]}))
    tp = page.throughput_table(res)
    assert "shard, in order ÷ small files (×)" in tp
    assert not set(tp.columns) & set(loader.KINDS) and not any("_in_order" in c for c in tp.columns)
    ho = page.hand_over_table(res)
    assert len(ho.columns) <= 9 and not any("_" in c for c in ho.columns)
    col = "extra, min–max over the runs (ms)"
    assert set(ho["payload"]) == {"bytes", "length only"} and "0.50–0.70" in set(ho[col])
    two = page.hand_over_table(_res(_grid((17, 60, 330), (80, 300, 385), (348, 336, 400)),
                                    transfer=_transfer({64: [0.5, 0.7]})))
    # no range from two runs: no column of them either, the header says what the mean is of
    assert col not in two and "extra (ms, mean of 2 paired runs)" in two
    assert "2 runs" not in set(two.astype(str).values.ravel())
    mp = page.main_process_display(res)
    assert "layout" in mp and "small_files" not in set(mp["layout"]) and mp["on a CPU (%)"].max() > 1
    assert "waiting for one (%)" not in mp   # not measured in these rows: no empty column
