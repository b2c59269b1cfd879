"""Data sets: correct bytes, manifest, reuse, regeneration, and no half data set after an interrupt."""
import json
import os

import pytest

from datajourney.toolkit import datasets


def _entries(d):
    """What a data directory holds, apart from the (empty, persistent) lock files."""
    return sorted(p.name for p in d.iterdir() if not p.name.startswith(".lock-"))


def test_small_files_and_shard_hold_the_same_bytes(tmp_path):
    ds = datasets.small_files(tmp_path, n_files=16, file_size=1000, seed=3, progress=False)
    shard = ds.shard.read_bytes()
    assert len(shard) == 16_000
    for i, f in enumerate(ds.files):
        assert f.read_bytes() == shard[i * 1000:(i + 1) * 1000]
    m = ds.manifest
    assert m["params"] == {"kind": "small_files", "n_files": 16, "file_size": 1000, "seed": 3}
    assert m["bytes"] == 16_000 and len(m["sha256"]) == 64
    assert datasets.verify(ds)


def test_reused_when_manifest_matches(tmp_path):
    a = datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    stamp = (a.root / "manifest.json").stat().st_mtime_ns
    b = datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    assert b.root == a.root and (b.root / "manifest.json").stat().st_mtime_ns == stamp


def test_regenerated_when_manifest_differs(tmp_path):
    a = datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    m = json.loads((a.root / "manifest.json").read_text())
    m["params"]["seed"] = 99  # stale or foreign manifest
    (a.root / "manifest.json").write_text(json.dumps(m))
    (a.root / "files" / "00000000.bin").write_bytes(b"corrupt")
    b = datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    assert b.manifest["params"]["seed"] == 0 and datasets.verify(b)


def test_directory_without_manifest_is_not_used(tmp_path):
    (tmp_path / "smallfiles-4x512-s0" / "files").mkdir(parents=True)  # looks like a data set, no manifest
    ds = datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    assert datasets.verify(ds)


def test_interrupted_generation_leaves_nothing_complete(tmp_path, monkeypatch):
    class Interrupting:  # a progress bar whose fifth update is a Ctrl-C
        n = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, k):
            Interrupting.n += 1
            if Interrupting.n == 5:
                raise KeyboardInterrupt

    monkeypatch.setattr(datasets, "_bar", lambda *a, **k: Interrupting())
    with pytest.raises(KeyboardInterrupt):
        datasets.small_files(tmp_path, n_files=10, file_size=512, progress=False)
    assert _entries(tmp_path) == []  # no final directory, no temporary left behind


def test_killed_generation_is_cleaned_up_next_time(tmp_path):
    # a temporary directory of a process that no longer exists (killed with SIGKILL)
    stale = tmp_path / ".tmp-smallfiles-4x512-s0-999999999-deadbeef"
    (stale / "files").mkdir(parents=True)
    ds = datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    assert not stale.exists() and datasets.verify(ds)
    assert _entries(tmp_path) == [ds.root.name]


def test_shard(tmp_path):
    sh = datasets.shard(tmp_path, size=3 * (8 << 20) + 5, seed=1, progress=False)
    assert os.path.getsize(sh.path) == 3 * (8 << 20) + 5 and datasets.verify(sh)


def test_check_space_counts_only_missing_sets(tmp_path):
    datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    plan = datasets.small_files_plan(4, 512)
    assert datasets.is_ready(tmp_path, plan[0], plan[1])
    assert datasets.check_space(tmp_path, [plan]) == tmp_path
