"""Chapter 2's readers and experiments on small real data sets."""
import shutil

import pytest

from datajourney import datasets, pagecache, storage
from datajourney.book.results import Result


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return datasets.small_files(tmp_path_factory.mktemp("d"), n_files=32, file_size=16384, progress=False)


def test_readers_read_every_byte(small):
    assert storage.read_files(small.files, small.file_size) == small.total_bytes
    for chunk in (4096, 16384, 1 << 20):
        assert storage.read_sequential(small.shard, chunk) == small.total_bytes


def test_direct_read_bypasses_cache(small):
    pagecache.purge([small.shard], "fadvise")
    try:
        n = storage.read_direct(small.shard, 65536)
    except OSError as e:
        pytest.skip(f"O_DIRECT not supported here: {e}")
    assert n == small.total_bytes
    assert pagecache.residency([small.shard]).fraction <= 0.05  # nothing was cached


@pytest.mark.skipif(not shutil.which("dd"), reason="dd not installed")
def test_dd_reports_bytes_and_seconds(small):
    n, s = storage.dd_read(small.shard)
    assert n == small.total_bytes and s > 0


def test_cold_and_warm_states_reach_their_residency(small):
    assert storage.set_cache_state(small.files, "cold", "auto")["resident_at_start"] <= 0.05
    assert storage.set_cache_state(small.files, "warm", "auto")["resident_at_start"] >= 0.95


def test_run_writes_result_with_fingerprint(tmp_path):
    res = storage.run(n_files=20, file_size=4096, runs=2, cache_states=["cold", "warm"], purge_method="auto",
                      size_sweep=[4096, 16384], sweep_bytes=1 << 17, shard_size=1 << 20,
                      chunk_sweep=[4096, 1 << 20], odirect=True, odirect_max_bytes=1 << 20, dd_check=True,
                      compare_purge_methods=True, data_dir=tmp_path / "..", run_dir=tmp_path / "run",
                      progress=False)
    saved = Result.load(tmp_path / "run" / f"{storage.CHAPTER}.json")
    assert saved.fingerprint["cpu"]["logical_cores"] >= 1 and saved.parameters["n_files"] == 20
    h = saved.table("headline")
    assert len(h) == 2 * 2 * 2 and (h["bytes"] == 20 * 4096).all()
    assert h[h["cache"] == "cold"]["resident_at_start"].max() <= 0.05
    assert h[h["cache"] == "warm"]["resident_at_start"].min() >= 0.95
    assert set(saved.table("size_sweep")["file_size"]) == {4096, 16384}
    assert len(saved.table("chunk_sweep")) == 2 * 2 * 2
    assert "dd_fidelity" in saved.tables
    assert ("purge_methods" in saved.tables) == pagecache.can_drop_caches()
    m = storage.key_metrics(saved)
    assert m["sequential ÷ random, cold"][0] == pytest.approx(m["sequential read, cold"][0] / m["random read, cold"][0])
    assert res.path == saved.path
