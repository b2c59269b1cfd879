"""Child processes that never outlive the process that started them (Linux).

A job started as a subprocess (``torchrun`` and its ranks) must end with the Python process that
launched it, however that process ends: an exception or Ctrl-C (its ``finally`` stops the job,
:func:`stop`), SIGTERM or SIGKILL (no ``finally`` runs: the kernel's ``PR_SET_PDEATHSIG`` sends
SIGKILL to the child when its parent exits, :func:`die_with_parent`), or a parent that is alive but
stuck (``alarm(2)`` kills the child after a hard time limit, :func:`child_setup`). Each process of
a chain (launcher -> torchrun -> ranks) asks for its own death signal, so the whole chain follows.

The death signal fires when the *thread* that started the child exits; :func:`child_setup` is
meant for a launcher that waits for its child in the thread that started it.

The runner starts each chapter's kernel with :func:`child_setup` (the kernel dies with the runner, even
under ``kill -9``) and registers the kernel's process group with a :class:`GroupReaper` (whatever is still in
that group when the runner ends is killed: processes started by fork + exec that never asked for their
own death signal), and the kernel calls :func:`children_die_with_this_process` when it starts: every
process it forks from then on (DataLoader workers, process pools, and their own children in turn) gets
SIGKILL when the kernel dies, so no worker is left behind, even one blocked writing to a queue nobody
reads any more; every interpreter multiprocessing spawns starts through a launcher that asks for that
signal before the interpreter's own code runs (:func:`spawn_launcher`), so a spawned worker killed while
still importing is no exception.
"""
from __future__ import annotations

import ctypes
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import psutil

PR_SET_PDEATHSIG = 1


def _prctl():
    """libc's ``prctl`` (None off Linux), resolved here so that nothing is loaded between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits; if the parent is already
    gone (this process was re-parented before the request took effect), die now. False where the
    request is not available (not Linux)."""
    parent = os.getppid()
    prctl = _prctl()
    if prctl is None or prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if parent == 1 or os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return True


_FORKER: list[int] = []  # the pid of the process that is forking (set just before each fork)
_BOUND = False
_PRCTL = _prctl()  # resolved once, here: nothing is loaded in a freshly forked child


def _before_fork() -> None:
    _FORKER[:] = [os.getpid()]


def _child_dies_with_parent() -> None:
    """In a freshly forked child: SIGKILL when the forking thread exits; die now if it already has."""
    if _PRCTL is None:
        return
    _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if _FORKER and os.getppid() != _FORKER[0]:
        os.kill(os.getpid(), signal.SIGKILL)


def children_die_with_this_process() -> bool:
    """Every process this one forks from now on (``os.fork``, multiprocessing's ``fork`` start method:
    DataLoader and pool workers) gets SIGKILL when the thread that forked it exits, that is, at the latest,
    when this process dies; the hook is inherited, so their own children follow them. Interpreters that
    multiprocessing starts by fork + exec (``spawn`` workers, the resource tracker, the fork server) start
    through :func:`spawn_launcher`, which asks for the same signal before their own code runs. Processes
    started with ``subprocess`` (fork + exec, no Python hook) ask for it themselves (:func:`child_setup`).
    Whether the hook is in place (False off Linux)."""
    global _BOUND
    if _BOUND:
        return True
    if _PRCTL is None:
        return False
    os.register_at_fork(before=_before_fork, after_in_child=_child_dies_with_parent)
    # multiprocessing's fork server is started by fork + exec (no hook runs in it), and its workers die with
    # it, not with this process: the server asks for its own death signal as it imports its preload modules
    import multiprocessing

    multiprocessing.set_forkserver_preload([FORKSERVER_PRELOAD])
    # spawned interpreters (spawn workers, the resource tracker, the fork server) start through a launcher
    # that asks for the death signal before any of their own code runs (imports, unpickling, worker_init_fn)
    launcher = spawn_launcher()
    if launcher is not None:
        multiprocessing.set_executable(str(launcher))
    _BOUND = True
    return True


#: What a spawned interpreter runs first (:func:`spawn_launcher`): remember the parent, ask for SIGKILL when it
#: exits, die now if it already has, then exec the real interpreter with the same arguments.
_LAUNCHER = """#!{python} -IS
import ctypes, os, signal, sys
parent = os.getppid()
ctypes.CDLL(None).prctl({request}, int(signal.SIGKILL), 0, 0, 0)
if parent == 1 or os.getppid() != parent:
    os.kill(os.getpid(), signal.SIGKILL)
os.execv({python!r}, [{python!r}] + sys.argv[1:])
"""


def spawn_launcher():
    """The launcher :func:`children_die_with_this_process` gives ``multiprocessing.set_executable``: a script
    run by this interpreter (``-IS``: no site, about 20 ms) that sets the parent-death signal and then execs
    this interpreter, so that a spawned process dies with the thread that started it even when it is killed
    while still importing. Written once per interpreter, in a folder of this user's own (mode 0700, checked:
    a folder of that name made by someone else is never used). ``None`` where it cannot be written."""
    import hashlib
    import stat
    import tempfile
    from pathlib import Path

    from datajourney.core.files import write_atomic

    python = sys.executable
    if not python or any(c.isspace() for c in python) or len(python) > 200:  # what a '#!' line holds
        return None
    text = _LAUNCHER.format(python=python, request=PR_SET_PDEATHSIG)
    folder = Path(tempfile.gettempdir()) / f"datajourney-{os.getuid()}"
    path = folder / f"spawn-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    try:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        try:
            if path.read_text() == text:
                return path
        except OSError:
            pass
        return write_atomic(path, text, mode=0o700)
    except OSError:
        return None


#: The module the fork server imports as it starts: it makes the server die with the process that started it.
FORKSERVER_PRELOAD = "datajourney.toolkit.forkserver_dies_with_parent"


def child_setup(hard_timeout_s: float | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets SIGKILL when the launching thread
    exits, and SIGALRM (whose default action ends it) after ``hard_timeout_s`` whatever the launcher
    does; both survive the child's ``exec``."""
    prctl = _prctl()
    secs = max(1, math.ceil(hard_timeout_s)) if hard_timeout_s else 0

    def setup() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        if secs:
            signal.alarm(secs)

    return setup


def stop(proc: subprocess.Popen, *, grace_s: float = 3.0) -> None:
    """End a job started with ``start_new_session=True`` and every process under it: SIGTERM to its
    process group (torchrun then stops its ranks, which run in sessions of their own), and after
    ``grace_s`` SIGKILL to the group and to every descendant seen before the first signal. Does
    nothing to a job that has ended with nothing left."""
    try:
        tracked = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    except psutil.NoSuchProcess:
        tracked = []
    _killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _, alive = psutil.wait_procs(tracked, timeout=0.5)
    _killpg(proc.pid, signal.SIGKILL)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=2)
    proc.wait()


class GroupReaper:
    """Kills the process groups this process registered once it exits, however it exits (``kill -9``
    included): a watcher process (:mod:`datajourney.toolkit.reaper`) in a session of its own reads the
    groups from a pipe and kills those still registered when the pipe closes. Started on the first
    :meth:`watch`. A group leader must be a direct child (its pid is its group: no reuse while unreaped)."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None

    def watch(self, pgid: int) -> None:
        """Kill process group ``pgid`` when this process exits, unless :meth:`forget` is called first."""
        if self._proc is None or self._proc.poll() is not None:
            script = os.path.join(os.path.dirname(__file__), "reaper.py")
            self._proc = subprocess.Popen([sys.executable, "-I", script], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True, text=True)
        self._send(f"+{int(pgid)}")

    def forget(self, pgid: int) -> None:
        """Leave group ``pgid`` alone after all (it has ended)."""
        if self._proc is not None and self._proc.poll() is None:
            self._send(f"-{int(pgid)}")

    def close(self) -> None:
        """Stop watching: the watcher kills the groups still registered (none, once each was forgotten) and exits."""
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _send(self, line: str) -> None:
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):
            pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
