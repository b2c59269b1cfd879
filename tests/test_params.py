"""Bad input fails early, names the parameter and the allowed range, and damages nothing."""
import os
import subprocess
import sys

import pytest

from datajourney.chapters.c02_random_vs_sequential import experiment as storage
from datajourney.chapters.c03_dataloader import experiment as loader
from datajourney.core.params import ParameterError, free_space, writable_dir
from datajourney.toolkit import datasets

CH2 = dict(n_files=10, file_size=4096, runs=1, cache_states=["cold"], purge_method="auto", size_sweep=[4096],
           sweep_bytes=65536, shard_size=1 << 20, chunk_sweep=[4096], odirect=False, odirect_max_bytes=1 << 20,
           dd_check=False, compare_purge_methods=False, seed=0)
CH3 = dict(n_files=64, file_size=4096, batch_size=16, workers=[0], cache_states=["warm"], runs=1,
           purge_method="auto", seed=0)


@pytest.mark.parametrize("name,value,needle", [
    ("n_files", 0, "integer from 1"), ("n_files", -5, "integer from 1"), ("file_size", 0, "integer from 1"),
    ("runs", 0, "integer from 1"), ("shard_size", -1, "integer from 1"), ("chunk_sweep", [0], "512"),
    ("chunk_sweep", [4 << 20], "up to shard_size"), ("chunk_sweep", [1000], "multiples of 512"),
    ("cache_states", ["tepid"], "'cold'"), ("purge_method", "sudo", "'auto'"), ("size_sweep", [-1], "from 1"),
    ("runs", 2.5, "integer"),
])
def test_chapter2_rejects_bad_values(tmp_path, name, value, needle):
    with pytest.raises(ParameterError) as e:
        storage.preflight({**CH2, name: value, "data_dir": str(tmp_path)})
    assert repr(name) in str(e.value) and needle in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing was written


@pytest.mark.parametrize("name,value,needle", [
    ("batch_size", 0, "integer from 1"), ("batch_size", 65, "at most n_files"), ("workers", [-1], "from 0"),
    ("workers", [10_000], "from 0"), ("n_files", -1, "integer from 1"),
])
def test_chapter3_rejects_bad_values(tmp_path, name, value, needle):
    with pytest.raises(ParameterError) as e:
        loader.preflight({**CH3, name: value, "data_dir": str(tmp_path)})
    assert repr(name) in str(e.value) and needle in str(e.value)


def test_missing_data_dir_is_named(tmp_path):
    with pytest.raises(ParameterError, match="'data_dir'.*existing directory"):
        storage.preflight({**CH2, "data_dir": str(tmp_path / "no" / "such" / "dir")})


def test_data_dir_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ParameterError, match="'data_dir'.*not a file"):
        writable_dir("data_dir", f)


def test_unwritable_data_dir_is_named():
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="dj-readonly-", dir="/var/tmp")
    try:
        os.chmod(d, 0o555)
        # Root may write anywhere, so the child drops to an unprivileged user after its imports.
        drop = "import os; os.setgid(65534); os.setuid(65534)\n" if os.geteuid() == 0 else ""
        code = ("from datajourney.core.params import writable_dir, ParameterError\n" + drop +
                f"try:\n    writable_dir('data_dir', {d!r})\nexcept ParameterError as e:\n    print(e)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert "'data_dir'" in out.stdout and "writable directory" in out.stdout, out.stdout + out.stderr
    finally:
        os.chmod(d, 0o755)
        shutil.rmtree(d)


def test_too_little_disk_fails_before_writing(tmp_path):
    # 900 GiB of small files: more than any CI disk holds free
    with pytest.raises(ParameterError, match="'data_dir'.*GiB free"):
        datasets.small_files(tmp_path, n_files=900, file_size=1 << 30)
    assert list(tmp_path.iterdir()) == []


def test_free_space_check_names_parameter(tmp_path, monkeypatch):
    import shutil
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 1))
    with pytest.raises(ParameterError, match="'data_dir'"):
        free_space("data_dir", tmp_path, 1 << 20)


def test_bad_input_leaves_existing_data_intact(tmp_path):
    ds = datasets.small_files(tmp_path, n_files=8, file_size=4096, progress=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ParameterError):
        storage.preflight({**CH2, "n_files": -1, "data_dir": str(tmp_path)})
    with pytest.raises(ParameterError):
        datasets.small_files(tmp_path, n_files=900, file_size=1 << 30)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert datasets.verify(ds)


def test_memory_check_sees_an_address_space_limit():
    # ulimit -v makes allocations fail long before the machine runs out: the check must see it
    code = ("import resource, psutil\n"
            "from datajourney.core.params import memory, ParameterError\n"
            "vms = psutil.Process().memory_info().vms\n"
            "resource.setrlimit(resource.RLIMIT_AS, (vms + (1 << 30), resource.RLIM_INFINITY))\n"
            "try:\n    memory('batch_size', 65536, 4 << 30, what='the token matrix')\n"
            "except ParameterError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "'batch_size' = 65536" in out.stdout and "ulimit -v" in out.stdout, out.stdout + out.stderr


def test_available_memory_sees_a_parent_cgroups_limit(monkeypatch):
    """A container's limit often sits on a parent cgroup while the leaf says "max": the room
    left is bounded by the tightest limit up the tree, and the message names the cgroup."""
    from datajourney.core import fingerprint, params

    GiB = 1 << 30
    monkeypatch.setattr(fingerprint, "cgroup_limits", lambda: {
        "cgroup_version": 2, "cgroup_path": "/pod/ctr", "limit_bytes": 4 * GiB, "used_bytes": 3 * GiB,
        "cpu_quota_cores": None})
    room, what = params.available_memory()
    assert room == GiB and "/pod/ctr" in what
    with pytest.raises(params.ParameterError, match="n_bytes"):
        params.memory("n_bytes", 2 * GiB, 2 * GiB, what="the test buffer")


def test_no_parameter_description_shows_a_python_repr_or_an_ascii_minus():
    """A parameters table reads each description as written: "not set: …", never "null: …", "None: …" or "0 to
    nnodes - 1" (a fresh reader found all three)."""
    import re

    from datajourney.book import registry

    bad = []
    for ch in registry.CHAPTERS:
        for name, spec in ch.params.specs().items():
            if re.search(r"\b(null|None|True|False)\b|\w - \d", spec.help):
                bad.append(f"{ch.name}.{name}: {spec.help}")
    assert not bad, bad
