"""Journaled changes of kernel settings in sysfs (a block device's ``read_ahead_kb``, for one).

A measurement that changes a system-wide setting must put it back even when the run is killed,
and two runs must not change the same setting at once (each would take the other's value for the
original, and label its rows with a value that changed under it). :func:`changed` therefore

1. takes an exclusive ``fcntl`` lock on the setting, shared by every run on the machine (a second
   run waits for it),
2. writes the original value to a journal file (atomically: written aside, then renamed),
3. changes the setting, and on leaving puts the original back and removes the journal.

A run killed in between (SIGKILL, a killed kernel) leaves its journal; :func:`restore_pending`
puts such settings back once their run is gone (the journal's process no longer exists and the
machine was not rebooted since: a reboot resets sysfs by itself). :func:`changed` does so for its
own setting first, chapter 9 for all of them when it starts, and ``python -m datajourney restore``
on demand.

The lock and journal files live in :func:`state_dir`: ``$DATAJOURNEY_STATE_DIR`` if set, else
``/run/datajourney`` for root (``/run`` is a tmpfs only root writes, emptied at boot), else
``$XDG_RUNTIME_DIR/datajourney``, else ``<temp dir>/datajourney-<uid>``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil


class SysfsError(RuntimeError):
    """A setting cannot be changed here (no root, read-only sysfs, no such file)."""


def state_dir() -> Path:
    """Where locks and journals live (see the module's description)."""
    if os.environ.get("DATAJOURNEY_STATE_DIR"):
        return Path(os.environ["DATAJOURNEY_STATE_DIR"])
    if os.geteuid() == 0 and os.path.isdir("/run"):
        return Path("/run/datajourney")
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "datajourney"
    return Path(tempfile.gettempdir()) / f"datajourney-{os.geteuid()}"


def boot_id() -> str | None:
    """This boot's id (Linux); a journal from another boot is void: sysfs starts afresh at boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _key(setting: Path) -> str:
    return str(Path(setting).absolute()).strip("/").replace("/", "%")


def _journal(setting: Path, state: Path) -> Path:
    return state / f"{_key(setting)}.journal.json"


@contextlib.contextmanager
def _locked(setting: Path, state: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the setting's lock for the block; yields False (without it) when ``wait`` is off and
    another run holds it."""
    state.mkdir(parents=True, exist_ok=True)
    with open(state / f"{_key(setting)}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read(setting: Path) -> str:
    return Path(setting).read_text().strip()


def _write(setting: Path, value: str) -> None:
    try:
        Path(setting).write_text(f"{value}\n")
    except OSError as e:
        raise SysfsError(f"cannot write {setting}: {e.strerror or e}") from None


def _owner_alive(entry: dict) -> bool:
    """Whether the process that wrote a journal still runs (the same pid and start time, this boot)."""
    if entry.get("boot_id") != boot_id():
        return False
    try:
        return psutil.Process(int(entry["pid"])).create_time() == entry.get("pid_started")
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError):
        return False


def _restore_one(journal: Path) -> dict | None:
    """Put back the setting of a journal whose run is gone (its lock is held by the caller)."""
    try:
        entry = json.loads(journal.read_text())
    except (OSError, json.JSONDecodeError):
        journal.unlink(missing_ok=True)  # cut short before its rename: the setting was not changed yet
        return None
    if _owner_alive(entry):
        return None
    setting = Path(entry["file"])
    if entry.get("boot_id") != boot_id():
        journal.unlink(missing_ok=True)
        return None
    found = _read(setting)
    _write(setting, entry["original"])
    journal.unlink(missing_ok=True)
    return {"file": str(setting), "value_found": found, "restored_to": entry["original"]}


def restore_pending(state: Path | None = None) -> list[dict]:
    """Put back every setting a dead run left changed: one ``{file, value_found, restored_to}`` per
    setting restored. Settings whose run is still going (its lock is held) are left to it; one that
    cannot be written here keeps its journal and is listed with an ``error``."""
    state = Path(state) if state is not None else state_dir()
    done = []
    for journal in sorted(state.glob("*.journal.json")) if state.is_dir() else []:
        try:
            setting = Path(json.loads(journal.read_text())["file"])
        except (OSError, json.JSONDecodeError, KeyError):
            journal.unlink(missing_ok=True)
            continue
        with _locked(setting, state, wait=False) as mine:
            if mine and journal.exists():
                try:
                    entry = _restore_one(journal)
                except (SysfsError, OSError) as e:
                    entry = {"file": str(setting), "value_found": None, "restored_to": None, "error": str(e)}
                if entry:
                    done.append(entry)
    return done


@contextlib.contextmanager
def changed(setting: Path, value, *, state: Path | None = None, restored: list | None = None) -> Iterator[str]:
    """Set the sysfs file ``setting`` to ``value`` for the ``with`` block, journaled and under the
    setting's lock, and put the original back afterwards; yields the original value. A change left
    by a dead run is undone first and appended to ``restored``."""
    setting = Path(setting)
    state = Path(state) if state is not None else state_dir()
    with _locked(setting, state):
        journal = _journal(setting, state)
        if journal.exists():
            entry = _restore_one(journal)
            if entry and restored is not None:
                restored.append(entry)
        original = _read(setting)
        me = psutil.Process()
        _write_atomically(journal, json.dumps({"file": str(setting), "original": original, "pid": me.pid,
                                               "pid_started": me.create_time(), "boot_id": boot_id()}))
        try:
            _write(setting, str(value))
        except SysfsError:
            journal.unlink(missing_ok=True)  # nothing was changed
            raise
        try:
            yield original
        finally:
            _write(setting, original)
            journal.unlink(missing_ok=True)  # kept when the write back failed: a later restore retries
