"""The purge really evicts: residency measured with mincore before and after, on this machine."""
import os

import pytest

from datajourney.core.fingerprint import storage_info
from datajourney.toolkit import pagecache


def _file(path, size=4 << 20):
    path.write_bytes(os.urandom(size))
    return path


@pytest.fixture
def cached_file(tmp_path):
    fs = storage_info(tmp_path).get("fs_type")
    if fs in ("tmpfs", "ramfs", "devtmpfs"):
        pytest.skip(f"{tmp_path} is on {fs}: its pages live only in RAM and cannot be evicted")
    f = _file(tmp_path / "data.bin")
    pagecache.warm([f])
    if pagecache.residency([f]).fraction < 0.95:
        pytest.skip("this file system does not report page-cache residency through mincore")
    return f


def test_warm_file_is_resident(cached_file):
    assert pagecache.residency([cached_file]).fraction >= 0.95


def test_fadvise_purge_evicts(cached_file):
    rep = pagecache.purge([cached_file], "fadvise")
    assert rep.method == "fadvise"
    assert rep.before["fraction"] >= 0.95
    assert rep.after["fraction"] <= 0.05
    assert pagecache.residency([cached_file]).fraction <= 0.05


def test_fadvise_purge_evicts_dirty_pages(tmp_path):
    f = _file(tmp_path / "dirty.bin")  # just written: pages are dirty, not yet on disk
    if storage_info(tmp_path).get("fs_type") in ("tmpfs", "ramfs"):
        pytest.skip("tmpfs cannot evict")
    assert pagecache.purge([f], "fadvise").after["fraction"] <= 0.05


@pytest.mark.skipif(not pagecache.can_drop_caches(), reason="needs root: /proc/sys/vm/drop_caches is not writable")
def test_drop_caches_purge_evicts(cached_file):
    rep = pagecache.purge([cached_file], "drop_caches")
    assert rep.method == "drop_caches"
    assert rep.after["fraction"] <= 0.05
    assert pagecache.residency([cached_file]).fraction <= 0.05


def test_auto_picks_what_is_permitted(cached_file):
    rep = pagecache.purge([cached_file])
    assert rep.method == ("drop_caches" if pagecache.can_drop_caches() else "fadvise")
    assert rep.after["fraction"] <= 0.05


def test_drop_caches_without_permission_says_so(cached_file, monkeypatch):
    monkeypatch.setattr(pagecache, "can_drop_caches", lambda: False)
    with pytest.raises(PermissionError, match="root"):
        pagecache.purge([cached_file], "drop_caches")
    assert pagecache.purge([cached_file], "auto").method == "fadvise"


def test_residency_counts_pages(tmp_path):
    f = tmp_path / "partial.bin"
    f.write_bytes(b"x" * (3 * pagecache.PAGE + 1))
    r = pagecache.residency([f, _file(tmp_path / "empty.bin", 0)])
    assert r.files == 2 and r.pages_total == 4


def test_unknown_method_is_named(tmp_path):
    with pytest.raises(ValueError, match="'purge_method'"):
        pagecache.purge([_file(tmp_path / "a")], "reboot")


def test_residency_of_many_files_is_checked_on_a_fixed_sample(tmp_path):
    files = [_file(tmp_path / f"f{i}", 4096) for i in range(30)]
    assert pagecache.check_sample(files, None) == files and pagecache.check_sample(files, 40) == files
    s = pagecache.check_sample(files, 10)
    assert len(set(s)) == 10 and set(s) <= set(files) and s == pagecache.check_sample(files, 10)
    r = pagecache.warm(files, sample=10)
    assert r.files == 10 and r.fraction >= 0.95 or pytest.skip("this file system keeps no page cache")
    rep = pagecache.purge(files, "fadvise", sample=10)
    assert rep.before["files"] == rep.after["files"] == 10 and rep.after["fraction"] <= 0.05
    # every file was purged, not only the checked ones
    assert pagecache.residency(files).fraction <= 0.05
