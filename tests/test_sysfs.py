"""Journaled sysfs settings (datajourney.toolkit.sysfs): a temporary file stands in for the sysfs file. A killed
run's change is restored, concurrent runs serialise theirs and never see each other's value, the command line
restores on demand."""
import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from datajourney.core.paths import REPO_ROOT
from datajourney.toolkit import sysfs

#: A process that changes the setting ``sys.argv[1]`` (journal in ``sys.argv[2]``) to ``sys.argv[3]``, holds
#: it for ``sys.argv[4]`` seconds at a time, ``sys.argv[5]`` times, checking the value stays its own.
CHANGER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from datajourney.toolkit import sysfs
    f, state, value = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    hold, times = float(sys.argv[4]), int(sys.argv[5])
    wrong = 0
    for _ in range(times):
        with sysfs.changed(f, value, state=state):
            print("changed", flush=True)
            for _ in range(5):
                time.sleep(hold / 5)
                wrong += f.read_text().strip() != value
    print("wrong", wrong, flush=True)
""")


def _changer(f, state, value, hold, times) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHANGER, str(f), str(state), str(value), str(hold), str(times)],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def setting(tmp_path, monkeypatch):
    """A device's read_ahead_kb under a directory standing in for /sys (only such files are restored)."""
    monkeypatch.setenv(sysfs.SYSFS_ROOT_ENV, str(tmp_path / "sys"))
    f = tmp_path / "sys" / "block" / "sda" / "queue" / "read_ahead_kb"
    f.parent.mkdir(parents=True)
    f.write_text("256\n")
    return f, tmp_path / "state"


def test_the_original_is_journaled_while_changed_and_restored_after(setting):
    f, state = setting
    with sysfs.changed(f, 4096, state=state) as original:
        assert original == "256" and f.read_text() == "4096\n"
        (journal,) = state.glob("*.journal.json")
        entry = json.loads(journal.read_text())
        assert entry["original"] == "256" and entry["file"] == str(f) and entry["boot_id"] == sysfs.boot_id()
        assert sysfs.restore_pending(state) == []  # its run is alive and holds the lock: left alone
        assert f.read_text() == "4096\n"
    assert f.read_text() == "256\n" and not list(state.glob("*.journal.json"))


def test_a_killed_run_is_restored(setting):
    """SIGKILL while the setting is changed: the value stays changed and the journal stays; restore_pending
    puts the original back (the journal's process is gone) and says what it found."""
    f, state = setting
    child = _changer(f, state, 4096, 60, 1)
    assert child.stdout.readline().strip() == "changed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert f.read_text().strip() == "4096" and list(state.glob("*.journal.json"))
    assert sysfs.restore_pending(state) == [{"file": str(f), "value_found": "4096", "restored_to": "256"}]
    assert f.read_text().strip() == "256" and not list(state.glob("*.journal.json"))
    assert sysfs.restore_pending(state) == []


def test_a_journal_of_another_boot_is_void(setting):
    """After a reboot the kernel has reset the setting: the old journal is dropped, nothing is written."""
    f, state = setting
    state.mkdir()
    (state / "x.journal.json").write_text(json.dumps({"file": str(f), "original": "16", "pid": 1,
                                                      "pid_started": 0.0, "boot_id": "another-boot"}))
    assert sysfs.restore_pending(state) == [] and f.read_text() == "256\n"
    assert not list(state.glob("*.journal.json"))


def test_concurrent_runs_take_turns(setting):
    """Two processes changing the same setting at once: each sees only its own value while it holds it, and the
    original is back when both have ended."""
    f, state = setting
    procs = [_changer(f, state, v, 0.2, 4) for v in (4096, 16)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert all(o.strip().endswith("wrong 0") for o in outs), outs
    assert f.read_text().strip() == "256" and not list(state.glob("*.journal.json"))


def test_a_second_run_waits_for_the_lock(setting):
    f, state = setting
    holder = _changer(f, state, 4096, 1.5, 1)
    assert holder.stdout.readline().strip() == "changed"
    t0 = time.monotonic()
    with sysfs.changed(f, 16, state=state) as original:
        waited = time.monotonic() - t0
        assert original == "256"  # the holder's value was never taken for the original
    holder.wait(timeout=30)
    assert waited > 0.5 and f.read_text().strip() == "256"


def test_restore_command(setting, monkeypatch, capsys):
    """``python -m datajourney restore`` puts back what a killed run left and says so."""
    from datajourney.cli import main

    f, state = setting
    child = _changer(f, state, 4096, 60, 1)
    assert child.stdout.readline().strip() == "changed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    monkeypatch.setenv("DATAJOURNEY_STATE_DIR", str(state))
    assert main(["restore"]) == 0
    out = capsys.readouterr().out
    assert f.read_text().strip() == "256" and str(f) in out and "4096" in out and "256" in out
    assert main(["restore"]) == 0 and "nothing to restore" in capsys.readouterr().out
