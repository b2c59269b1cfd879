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
``$XDG_RUNTIME_DIR/datajourney``, else ``<temp dir>/datajourney-<uid>``. A journal says which file to
write and what, so the directory must be this user's alone: it is created with mode 0700, and one that is
a symbolic link, owned by another user, or writable by others is refused (:func:`secure_state_dir`). A
journal is data all the same: only the settings this book changes (:data:`SETTING`, a block device's
``read_ahead_kb``) with values in range (:data:`MAX_VALUE`) are restored; any other is refused and kept.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil


class SysfsError(RuntimeError):
    """A setting cannot be changed here (no root, read-only sysfs, no such file)."""


#: The only settings a journal may name: a block device's ``read_ahead_kb`` (chapter 9's, the one sysfs
#: knob this book changes), under :func:`sysfs_root`.
SETTING = re.compile(r"block/[A-Za-z0-9][A-Za-z0-9_.:+-]*/queue/read_ahead_kb")
#: Where sysfs is: ``/sys``, or ``$DATAJOURNEY_SYSFS_ROOT`` (a directory standing in for it, in tests).
SYSFS_ROOT_ENV = "DATAJOURNEY_SYSFS_ROOT"


def sysfs_root() -> str:
    return (os.environ.get(SYSFS_ROOT_ENV) or "/sys").rstrip("/") or "/"


#: The largest value a journal may restore (KiB of readahead: 1 GiB, beyond any device's).
MAX_VALUE = 1 << 20
#: What a reader runs to put back settings a killed run left changed.
RESTORE_COMMAND = "python -m datajourney restore"


def check_setting(setting, value=None) -> Path:
    """``setting`` if it is a file this book may change (:data:`SETTING` under :func:`sysfs_root`) and
    ``value`` (when given) an integer from 0 to :data:`MAX_VALUE` (a number or its decimal text);
    :class:`SysfsError` otherwise."""
    text = str(setting)
    root = sysfs_root()
    rel = text[len(root) + 1:] if text.startswith(root + "/") else None
    if not isinstance(setting, (str, os.PathLike)) or rel is None or not SETTING.fullmatch(rel):
        raise SysfsError(f"{text[:200]!r} is not a setting this book changes (only {root}/{SETTING.pattern})")
    if value is not None:
        v = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        if not (v.isascii() and v.isdigit()) or int(v) > MAX_VALUE:
            raise SysfsError(f"{str(value)[:40]!r} is not a value of {text}: an integer from 0 to {MAX_VALUE}")
    return Path(text)


def secure_state_dir(state: Path, *, create: bool = True) -> bool:
    """Make sure the journal directory ``state`` is this user's alone: created with mode 0700 when missing
    (``create``), and refused (:class:`SysfsError`, one line) when it is a symbolic link or not a directory,
    owned by another user, or writable by others. One of this user's own that others may only read is
    tightened to 0700. Whether it exists."""
    state = Path(state)
    if create:
        try:
            state.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(state, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise SysfsError(f"cannot create the journal directory {state}: {e.strerror or e}") from None
    try:
        st = os.lstat(state)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise SysfsError(f"cannot read the journal directory {state}: {e.strerror or e}") from None
    why = ("it is a symbolic link" if stat.S_ISLNK(st.st_mode) else
           "it is not a directory" if not stat.S_ISDIR(st.st_mode) else
           f"it belongs to uid {st.st_uid}, not {os.geteuid()}" if st.st_uid != os.geteuid() else
           f"others may write it (mode {stat.S_IMODE(st.st_mode):04o})" if st.st_mode & 0o022 else "")
    if why:
        raise SysfsError(f"refusing the journal directory {state}: {why}; it must be a directory of this user's "
                         "with mode 0700 (remove it, or set DATAJOURNEY_STATE_DIR)")
    if stat.S_IMODE(st.st_mode) != 0o700:
        try:
            os.chmod(state, 0o700)
        except OSError as e:
            raise SysfsError(f"cannot make the journal directory {state} private: {e.strerror or e}") from None
    return True


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
    secure_state_dir(state)
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
    """Put back the setting of a journal whose run is gone (its lock is held by the caller). A journal
    naming a file this book does not change, or a value out of range, is refused (:func:`check_setting`)."""
    try:
        entry = json.loads(journal.read_text())
    except (OSError, json.JSONDecodeError):
        journal.unlink(missing_ok=True)  # cut short before its rename: the setting was not changed yet
        return None
    if not isinstance(entry, dict):
        raise SysfsError(f"{journal} is not a journal of this book (not a mapping); left as it is")
    if _owner_alive(entry):
        return None
    setting = check_setting(entry.get("file"), entry.get("original"))
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
    cannot be written here keeps its journal and is listed with an ``error``; so is a journal that names a
    file this book does not change or a value out of range (:func:`check_setting`). A journal directory
    that is not this user's alone is refused (:class:`SysfsError`, see :func:`secure_state_dir`)."""
    state = Path(state) if state is not None else state_dir()
    done = []
    if not secure_state_dir(state, create=False):
        return done
    for journal in sorted(state.glob("*.journal.json")):
        try:
            named = json.loads(journal.read_text())["file"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            journal.unlink(missing_ok=True)
            continue
        try:
            setting = check_setting(named)
        except SysfsError as e:
            done.append({"file": str(named)[:200], "value_found": None, "restored_to": None, "error": str(e)})
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


def left_changed(state: Path | None = None) -> list[str]:
    """The settings a dead run left changed (their journals' files), without restoring them: what a
    runner names after a killed kernel, with :data:`RESTORE_COMMAND`. Never raises."""
    state = Path(state) if state is not None else state_dir()
    out = []
    try:
        if not secure_state_dir(state, create=False):
            return out
        for journal in sorted(state.glob("*.journal.json")):
            try:
                entry = json.loads(journal.read_text())
                if entry.get("boot_id") == boot_id() and not _owner_alive(entry):
                    out.append(str(check_setting(entry.get("file"))))
            except (OSError, ValueError, AttributeError, SysfsError):
                continue
    except (OSError, SysfsError):
        pass
    return out


@contextlib.contextmanager
def changed(setting: Path, value, *, state: Path | None = None, restored: list | None = None) -> Iterator[str]:
    """Set the sysfs file ``setting`` to ``value`` for the ``with`` block, journaled and under the
    setting's lock, and put the original back afterwards; yields the original value. A change left
    by a dead run is undone first and appended to ``restored``. Only the settings this book changes are
    accepted (:func:`check_setting`)."""
    setting = check_setting(setting, value)
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
