"""Data sets under concurrency, corruption and interruption (issue 9, cases 2, 3, 4, 8, 13, 14):
one writer per data set, verification on reuse, self-healing, stale temporary data, free space."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from datajourney.core.params import ParameterError, free_space
from datajourney.toolkit import datasets

PY = sys.executable
# A child process: imports, says "ready", waits for the go file, then gets a data set and prints its manifest.
CHILD = """
import json, os, sys, time
from pathlib import Path
from datajourney.toolkit import datasets
data, go, slow = sys.argv[1], sys.argv[2], float(sys.argv[3])
if slow:  # a slow generation: each progress step sleeps
    class Slow:
        def __enter__(self): return self
        def __exit__(self, *a): return False
        def update(self, k): time.sleep(slow)
    datasets._bar = lambda *a, **k: Slow()
print("ready", os.getpid(), flush=True)
while go != "-" and not Path(go).exists():
    time.sleep(0.01)
ds = datasets.small_files(data, n_files=int(os.environ.get("N_FILES", "400")), file_size=1024, progress=False)
print("manifest", json.dumps(ds.manifest["generated_by"]), flush=True)
if os.environ.get("HOLD"):
    sys.stdin.read()  # keep using the data set until the test closes stdin
"""


def _child(data, go="-", slow=0.0, n_files=400, hold=False):
    env = {**os.environ, "N_FILES": str(n_files), "PYTHONUNBUFFERED": "1"}
    env.pop(datasets.NOTICES_ENV, None)
    if hold:
        env["HOLD"] = "1"
    p = subprocess.Popen([PY, "-c", CHILD, str(data), str(go), str(slow)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    assert line.startswith("ready"), line + p.stderr.read()
    return p


def _manifest_line(p) -> dict:
    for line in p.stdout:
        if line.startswith("manifest"):
            return json.loads(line.split(" ", 1)[1])
    raise AssertionError(p.stderr.read())


def _entries(d):
    return sorted(p.name for p in Path(d).iterdir() if not p.name.startswith(".lock-"))


# --------------------------------------------------------------------------- case 2: one writer
def test_runs_started_together_generate_once_and_share(tmp_path):
    go = tmp_path / "go"
    kids = [_child(tmp_path / "data", go, n_files=1500) for _ in range(3)]
    (tmp_path / "data").mkdir()
    go.touch()
    owners = [_manifest_line(k) for k in kids]
    for k in kids:
        k.stdin.close()
        assert k.wait(timeout=120) == 0, k.stderr.read()
    assert len({o["pid"] for o in owners}) == 1  # one process generated it, the others reused it
    assert _entries(tmp_path / "data") == ["smallfiles-1500x1024-s0"]  # no second copy, no temporary left
    assert datasets.verify(datasets.SmallFiles(tmp_path / "data" / "smallfiles-1500x1024-s0", 1500, 1024, 0))


def test_second_run_waits_for_the_generator_with_a_message_then_reuses(tmp_path):
    first = _child(tmp_path, slow=0.05, n_files=40)  # about 2 s of generation
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".tmp-smallfiles-40x1024-s0-*")):
        assert time.monotonic() < deadline and first.poll() is None, first.stderr.read()
        time.sleep(0.01)
    second = _child(tmp_path, n_files=40)
    a, b = _manifest_line(first), _manifest_line(second)
    for k in (first, second):
        k.stdin.close()
        k.wait(timeout=60)
    err = second.stderr.read()
    assert a == b  # the second reused what the first generated
    assert "another run is generating it" in err and f"pid {a['pid']}" in err and "waiting" in err, err


def test_a_damaged_data_set_is_not_replaced_under_a_run_reading_it(tmp_path):
    reader = _child(tmp_path, n_files=20, hold=True)
    _manifest_line(reader)  # the reader has it and keeps it
    (tmp_path / "smallfiles-20x1024-s0" / "files" / "00000003.bin").write_bytes(b"x")
    writer = _child(tmp_path, n_files=20)
    time.sleep(1.5)
    assert writer.poll() is None  # waits for the reader instead of renaming its data away
    reader.stdin.close()
    assert reader.wait(timeout=30) == 0
    _manifest_line(writer)
    writer.stdin.close()
    assert writer.wait(timeout=60) == 0
    err = writer.stderr.read()
    assert f"another run is using or generating it (held on this host by pid {reader.pid}" in err, err
    assert "waiting before regenerating it" in err, err
    assert "files/00000003.bin is 1 bytes instead of 1,024 (truncated)" in err, err


def test_forked_workers_do_not_keep_a_data_set_locked(tmp_path):
    import fcntl
    import multiprocessing

    datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)  # holds it shared
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    worker.start()  # like a DataLoader or pool worker, orphaned if its parent is killed
    try:
        datasets.release(tmp_path, "smallfiles-4x512-s0")
        fd = os.open(tmp_path / ".lock-smallfiles-4x512-s0", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it any more
        os.close(fd)
    finally:
        worker.kill()
        worker.join()


# --------------------------------------------------------------------------- cases 3, 4: corruption
def _truncate(root):
    os.truncate(root / "files" / "00000002.bin", 100)
    return "files/00000002.bin is 100 bytes instead of 4,096 (truncated)"


def _flip(root):
    with open(root / "shard.bin", "r+b") as f:  # 4 bytes in the third 1 MiB block
        f.seek((2 << 20) + 4096)
        f.write(b"\xde\xad\xbe\xef")
    return "shard.bin differs from what was generated (block 2 at byte 2,097,152)"


def _delete(root):
    (root / "files" / "00000009.bin").unlink()
    return "files/00000009.bin is missing"


@pytest.mark.parametrize("damage", [_truncate, _flip, _delete], ids=["truncate", "bit-flip", "delete"])
def test_damaged_data_set_is_regenerated_with_a_message(tmp_path, capsys, damage):
    ds = datasets.small_files(tmp_path, n_files=1024, file_size=4096, progress=False)
    stamp = ds.manifest["generated_at"], (ds.root / "manifest.json").stat().st_mtime_ns
    what = damage(ds.root)
    capsys.readouterr()
    again = datasets.small_files(tmp_path, n_files=1024, file_size=4096, progress=False)
    err = capsys.readouterr().err
    assert f"data set {ds.root.name} in {tmp_path} is damaged: {what}; regenerating it" in err, err
    assert (again.root / "manifest.json").stat().st_mtime_ns != stamp[1]
    assert datasets.verify(again) and _entries(tmp_path) == [ds.root.name]


def test_a_write_is_caught_by_its_time_stamps_not_by_luck(tmp_path):
    # 2,000 files of 4 KiB and their shard: the sample reads about 2 MiB of 16, 1 block in 8; the changed
    # ctime is what makes the damaged file hashed.
    ds = datasets.small_files(tmp_path, n_files=2000, file_size=4096, progress=False)
    victim = ds.root / "files" / "00001234.bin"
    data = bytearray(victim.read_bytes())
    data[7] ^= 0x01  # one bit, same size
    victim.write_bytes(bytes(data))
    stats = {}
    assert datasets.check(ds.root, stats=stats) == ["files/00001234.bin differs from what was generated"]
    assert stats["changed"] == 1 and stats["blocks_sampled"] < stats["total_blocks"] / 4


def test_damage_no_time_stamp_shows_is_caught_by_the_sample_or_full_check(tmp_path, monkeypatch):
    ds = datasets.small_files(tmp_path, n_files=8, file_size=4096, progress=False)
    victim = ds.root / "files" / "00000005.bin"
    with open(victim, "r+b") as f:
        f.write(b"\x00\x01")
    # pretend the file system never told: refresh the stamps as if nothing had been written
    index_sha = ds.manifest["integrity"]["index_sha256"]
    paths = json.loads((ds.root / datasets.INDEX).read_text())["paths"]
    stamps = [x for rel in paths for st in [os.stat(ds.root / rel)]
              for x in (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)]
    datasets._write_stamps(ds.root, index_sha, stamps)
    assert datasets.check(ds.root) == ["files/00000005.bin differs from what was generated"]  # small: all sampled
    monkeypatch.setenv(datasets.VERIFY_ENV, "full")
    assert datasets.check(ds.root) and not datasets.verify(ds)


def test_copied_data_set_is_hashed_once_then_trusted(tmp_path):
    import shutil

    ds = datasets.small_files(tmp_path / "a", n_files=100, file_size=1000, progress=False)
    copy = tmp_path / "b" / ds.root.name
    shutil.copytree(ds.root, copy)  # new inodes and ctimes
    stats = {}
    assert datasets.check(copy, stats=stats) == [] and stats["changed"] == 101
    assert datasets.check(copy, stats=stats) == [] and stats["changed"] == 0  # stamps refreshed


def test_index_tampering_is_damage(tmp_path, capsys):
    ds = datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    (ds.root / datasets.INDEX).write_text("{}")
    assert datasets.check(ds.root) == [f"its integrity index {datasets.INDEX} does not match its manifest"]
    datasets.small_files(tmp_path, n_files=4, file_size=512, progress=False)
    assert "is damaged" in capsys.readouterr().err and datasets.verify(ds)


# --------------------------------------------------------------------------- read-only data directories
def _as_nobody(code: str, d: str) -> subprocess.CompletedProcess:
    drop = "import os; os.setgid(65534); os.setuid(65534)\n" if os.geteuid() == 0 else ""
    return subprocess.run(
        [
            PY,
            "-c",
            "from datajourney.toolkit import datasets\n"
            "from datajourney.chapters.c02_random_vs_sequential import experiment as storage\n"
            + drop
            + code,
            d,
        ],
        capture_output=True,
        text=True,
    )


@pytest.fixture
def readonly_data():
    import shutil

    d = tempfile.mkdtemp(prefix="dj-ro-", dir="/var/tmp")
    os.chmod(d, 0o755)
    datasets.small_files(d, n_files=16, file_size=4096, progress=False)
    for root, dirs, files in os.walk(d):
        for x in dirs:
            os.chmod(os.path.join(root, x), 0o555)
        for x in files:
            os.chmod(os.path.join(root, x), 0o444)
    os.chmod(d, 0o555)
    try:
        yield d
    finally:
        for root, dirs, _ in os.walk(d):
            for x in dirs:
                os.chmod(os.path.join(root, x), 0o755)
        os.chmod(d, 0o755)
        shutil.rmtree(d)


def test_read_only_data_directory_is_reused(readonly_data):
    code = ("import sys\nd = sys.argv[1]\n"
            "plan = datasets.small_files_plan(16, 4096)\n"
            "assert datasets.check_space(d, [plan])\n"
            "ds = datasets.small_files(d, n_files=16, file_size=4096, progress=False)\n"
            "print('reused', ds.root)\n")
    out = _as_nobody(code, readonly_data)
    assert out.returncode == 0 and "reused" in out.stdout, out.stdout + out.stderr


def test_damaged_data_in_a_read_only_directory_is_named(readonly_data):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    os.chmod(Path(readonly_data) / "smallfiles-16x4096-s0" / "files", 0o755)
    (Path(readonly_data) / "smallfiles-16x4096-s0" / "files" / "00000004.bin").unlink()
    os.chmod(Path(readonly_data) / "smallfiles-16x4096-s0" / "files", 0o555)
    code = ("import sys\n"
            "try:\n    datasets.small_files(sys.argv[1], n_files=16, file_size=4096, progress=False)\n"
            "except datasets.ParameterError as e:\n    print(e)\n")
    out = _as_nobody(code, readonly_data)
    assert "'data_dir'" in out.stdout and "files/00000004.bin is missing" in out.stdout, out.stdout + out.stderr


# --------------------------------------------------------------------------- case 8: interrupted generations
def test_killed_generation_leaves_its_owner_and_an_unrelated_run_removes_it(tmp_path, capsys):
    victim = _child(tmp_path, slow=0.05, n_files=400)
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".tmp-*/files/00000003.bin")):
        assert time.monotonic() < deadline, victim.stderr.read()
        time.sleep(0.01)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    tmp = next(tmp_path.glob(".tmp-*"))
    owner = json.loads((tmp / datasets.OWNER).read_text())
    assert owner["host"] == socket.gethostname() and owner["pid"] == victim.pid and owner["boot_id"]
    assert not (tmp_path / "smallfiles-400x1024-s0").exists()  # nothing half-written was published
    capsys.readouterr()
    other = datasets.shard(tmp_path, size=4096, progress=False)  # a different data set
    err = capsys.readouterr().err
    assert f"removed stale temporary data {tmp}" in err and f"process {victim.pid} on this host is gone" in err
    assert _entries(tmp_path) == [other.root.name]


def _fake_temp(parent: Path, name: str, owner: dict | None, age_s: float = 0) -> Path:
    d = parent / f".tmp-{name}-{owner['pid'] if owner else 4242}-0badc0de"
    (d / "files").mkdir(parents=True)
    (d / "files" / "x").write_bytes(b"x" * 100)
    if owner is not None:
        (d / datasets.OWNER).write_text(json.dumps({"name": name, "bytes": 1 << 20, "inodes": 10, **owner}))
    if age_s:
        t = time.time() - age_s
        for p in (d / "files" / "x", d / "files", *(d.iterdir()), d):
            os.utime(p, (t, t))
    return d


def test_stale_rules_never_touch_a_live_generation(tmp_path):
    me = datasets.identity()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        live_here = _fake_temp(tmp_path, "a", {**me, "pid": sleeper.pid, "start": datasets._proc_start(sleeper.pid)})
        other_host = _fake_temp(tmp_path, "b", {**me, "host": "elsewhere", "pid": 1})
        other_host_old = _fake_temp(tmp_path, "c", {**me, "host": "elsewhere", "pid": 1},
                                    age_s=2 * datasets.STALE_AGE_S)
        reused_pid = _fake_temp(tmp_path, "d", {**me, "pid": sleeper.pid, "start": -1})
        rebooted = _fake_temp(tmp_path, "e", {**me, "pid": sleeper.pid, "boot_id": "another-boot"})
        dead_here = _fake_temp(tmp_path, "f", {**me, "pid": 999_999_999})
        old_publish = tmp_path / ".old-g-12345678"
        old_publish.mkdir()
        locked = _fake_temp(tmp_path, "h", {**me, "pid": 999_999_999})
        holder = subprocess.Popen([PY, "-c", "import fcntl, os, sys; "
                                   "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_SH); "
                                   "print('held', flush=True); sys.stdin.read()",
                                   str(tmp_path / ".lock-h")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        removed = datasets.clean_stale(tmp_path)
        holder.stdin.close()
        holder.wait()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sorted(removed) == sorted(p.name for p in (other_host_old, reused_pid, rebooted, dead_here, old_publish))
    assert live_here.exists() and other_host.exists() and locked.exists()


def test_check_space_counts_what_other_runs_are_still_writing(tmp_path, monkeypatch):
    import shutil

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        me = datasets.identity()
        _fake_temp(tmp_path, "other", {**me, "pid": sleeper.pid, "start": datasets._proc_start(sleeper.pid),
                                       "bytes": 30 << 20})
        monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1 << 30, 1 << 30, 40 << 20))
        plan = datasets.small_files_plan(64, 4096)
        assert datasets.pending_writes(tmp_path)[0] > 29 << 20
        with pytest.raises(ParameterError, match=r"other runs are still writing 30\.0 MiB"):
            datasets.check_space(tmp_path, [datasets.shard_plan(12 << 20)])
        assert datasets.check_space(tmp_path, [plan]) == tmp_path  # 0.5 MiB still fits beside them
    finally:
        sleeper.kill()
        sleeper.wait()


# --------------------------------------------------------------------------- case 13: free space
def test_margin_scales_with_the_data_set(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(20 << 20, 0, 20 << 20))
    free_space("data_dir", tmp_path, 250_000)  # a 0.25 MB data set fits a 20 MiB disk
    with pytest.raises(ParameterError, match=r"needs 20\.0 MiB; 20\.0 MiB free"):
        free_space("data_dir", tmp_path, 20 << 20)


def test_inodes_are_checked(tmp_path, monkeypatch):
    real = os.statvfs

    def few(p):  # a file system with 250 free inodes
        st = real(p)
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, st.f_bfree, st.f_bavail, 300, 250, 250,
                                  st.f_flag, st.f_namemax))

    monkeypatch.setattr(os, "statvfs", few)
    with pytest.raises(ParameterError, match=r"'data_dir'.*free inodes \(the data set needs 1,008 files"):
        datasets.check_space(tmp_path, [datasets.small_files_plan(1000, 64)])
    assert list(tmp_path.iterdir()) == []


def test_unusable_default_data_dir_is_one_line(monkeypatch):
    monkeypatch.setenv(datasets.DATA_DIR_ENV, "/proc/x")
    with pytest.raises(ParameterError, match="'DATAJOURNEY_DATA_DIR' = '/proc/x'.*can be created"):
        datasets.check_space(None, [datasets.shard_plan(4096)])


@pytest.mark.parametrize("value", [[1, 2], 5, {"a": 1}])
def test_data_dir_of_the_wrong_type_is_named(value):
    with pytest.raises(ParameterError, match="'data_dir'.*a directory path"):
        datasets.check_space(value, [datasets.shard_plan(4096)])
