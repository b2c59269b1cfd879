"""A pytest plugin: what a session leaves in the system's temporary folder, reported at its end, and a failure
when it is more than :data:`LIMIT_MB` (the suite's conftest loads it; ``-p tempcheck`` loads it elsewhere)."""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

#: What a session may leave in the system's temporary folder, in MB.
LIMIT_MB = 100
_before = pytest.StashKey[tuple]()


def _is_controller(config) -> bool:
    """Not a pytest-xdist worker: the session that starts and ends the whole run."""
    return not hasattr(config, "workerinput")


def disk_bytes(path: Path) -> int:
    """What ``path`` takes on disk, as du counts it (blocks; links not followed)."""
    try:
        if path.is_symlink() or not path.is_dir():
            return path.lstat().st_blocks * 512
    except OSError:
        return 0
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def pytest_sessionstart(session):
    if _is_controller(session.config):
        temp = Path(tempfile.gettempdir())
        session.config.stash[_before] = (temp, time.time(), {p.name for p in temp.iterdir()})


@pytest.hookimpl(trylast=True)   # after pytest has removed a passing session's own temporary folder
def pytest_sessionfinish(session, exitstatus):
    """The entries the session added to the temporary folder and left there, each with what it takes on disk;
    more than :data:`LIMIT_MB` in all fails a passing session. A failing session's own folder, which pytest
    keeps for a look (tmp_path_retention_policy), is named but not counted."""
    config = session.config
    if not _is_controller(config) or _before not in config.stash:
        return
    temp, started, before = config.stash[_before]
    kept = getattr(config, "_tmp_path_factory", None) and config._tmp_path_factory._basetemp
    kept = kept if kept is not None and kept.exists() else None
    kept_bytes = disk_bytes(kept) if kept is not None else 0
    left = {}
    for p in temp.iterdir():
        try:
            if p.name in before or p.lstat().st_mtime < started - 1:
                continue
        except OSError:
            continue
        left[p] = disk_bytes(p) - (kept_bytes if kept is not None and kept.is_relative_to(p) else 0)
    total = sum(left.values())
    report = config.pluginmanager.get_plugin("terminalreporter")
    if report is not None:
        report.write_sep("-", f"temporary folder: {total / 1e6:.1f} MB left in {temp} (at most {LIMIT_MB} MB)")
        for p, b in sorted(left.items(), key=lambda x: -x[1])[:10]:
            report.write_line(f"{b / 1e6:9.1f} MB  {p}")
        if kept is not None:
            report.write_line(f"{kept_bytes / 1e6:9.1f} MB  {kept} (this failing session's, kept by pytest)")
    if total > LIMIT_MB * 1e6 and session.exitstatus == 0:
        if report is not None:
            report.write_line(f"FAILED: the tests left {total / 1e6:.0f} MB in {temp} (at most {LIMIT_MB} MB): "
                              "each test removes what it makes outside its tmp_path", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
