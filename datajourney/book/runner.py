"""Execute chapter notebooks with papermill into a run directory.

A run directory ``results/<run-id>/`` holds the executed notebooks (``notebooks/``), each
chapter's result file (``<chapter>.json``) and ``run.json`` (profile, parameters, status).
Every check that can fail (profile, parameter names, parameter values, data directory,
free disk) runs for every chapter before the first notebook starts; any error there is
one line naming the chapter (and the parameter, where the chapter's check names one).

Run directories are never shared: a default id (date-time-profile) gets a ``-2``, ``-3``
... suffix when another run claimed it in the same second (claimed with an exclusive
``mkdir``), and an explicit ``--run-id`` that already exists is refused unless the run
asks to replace it, which deletes the old run first, so no page of it is mixed into the
new one.

``run.json`` says ``running`` (with host and pid) while the run goes on and always ends
with ``ok``, ``failed`` or ``interrupted``. A failure names chapter, notebook and cell,
also when the kernel died (with the likely cause: the signal that killed it, and whether
the out-of-memory killer ran meanwhile). Ctrl-C and SIGTERM alike interrupt the running cell
(its ``finally`` blocks run; a second signal or a cell that does not stop within
:data:`GRACE_S` kills the kernel), say what was kept, and leave no process of the
kernel behind: after every chapter, whatever is left of the kernel's process group
(DataLoader or pool workers) is killed.

Everything the runner writes in a run directory (``run.json``, executed notebooks) is
written whole or not at all (:func:`~datajourney.core.files.write_atomic`; papermill writes
into a hidden partial notebook that is published once complete). A write that fails (a full
disk) is one line naming the chapter and the file, and ``run.json`` ends ``failed`` with
the reason.

Run records and result files are data from another host: their parameters reach papermill
(``rerender``), the committed notebooks (``promote``) and the book (``book --run``) only
when they are the chapter's own parameter names with plain literal values; result files
pass :func:`~datajourney.core.results.check`.
"""
from __future__ import annotations

import ast
import datetime as _dt
import fcntl
import importlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from datajourney.book import registry
from datajourney.book.registry import Chapter, available, lookup
from datajourney.core import results
from datajourney.core.files import WRITE_ERRNOS, write_atomic, write_error
from datajourney.core.params import BOOK_OPTIONS, ParameterError, host_name, run_options, writable_dir
from datajourney.core.paths import DATA_DIR_ENV, RESULTS_ROOT, boot_id, default_data_dir

PROFILES_FILE = Path(__file__).with_name("profiles.yaml")
#: Parameters the runner sets itself; a profile or -p may not.
RUNNER_PARAMETERS = ("run_dir",)
#: Seconds a cell gets to stop after Ctrl-C before its kernel is killed.
GRACE_S = 10.0
NOTICES_FILE = ".notices.log"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # used with fullmatch: no trailing newline
#: pip names of modules whose import name differs
_PIP_NAMES = {"PIL": "pillow", "yaml": "pyyaml", "streaming": "mosaicml-streaming", "papermill": "papermill",
              "sklearn": "scikit-learn"}


class RunError(RuntimeError):
    """A run could not start or a chapter failed; the message says which and where."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class Interrupted(RunError):
    """The run was stopped (Ctrl-C, SIGTERM); the message says what was kept."""

    exit_code = 130


def missing_module(e: ModuleNotFoundError, who: str) -> RunError:
    """A one-line error for a Python module that is not installed."""
    name = (e.name or str(e)).split(".")[0]
    pip = _PIP_NAMES.get(name, name)
    hint = ("pip install -e '.[book]'" if name in ("papermill", "nbformat", "nbclient", "jupyter_client")
            else f"pip install {pip}")
    return RunError(f"{who} needs the Python module {name!r}, which is not installed here ({hint})", exit_code=2)


def profiles() -> dict:
    return yaml.safe_load(PROFILES_FILE.read_text())


def notebook_parameters(ch: Chapter) -> dict:
    """The parameters cell of a chapter's notebook: name -> default value."""
    try:
        import papermill as pm
    except ModuleNotFoundError as e:
        raise missing_module(e, "the runner") from None

    out = {}
    for name, info in pm.inspect_notebook(str(ch.notebook)).items():
        try:
            out[name] = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            out[name] = info["default"]
    return out


def chapter_parameters(ch: Chapter) -> dict:
    """Every parameter a chapter's notebook takes, with its one default: the chapter's ``Params``
    dataclass, plus the book's options (:data:`~datajourney.core.params.BOOK_OPTIONS`)."""
    return {**ch.params.defaults(), **dict.fromkeys(BOOK_OPTIONS), "is_reference_run": False}


#: Words YAML 1.1 reads as booleans besides true and false (PyYAML: on, off, yes, no in any case).
YAML_BOOLEAN_WORDS = ("on", "off", "yes", "no", "y", "n")


def parse_value(text: str, name: str | None = None):
    """A ``-p`` value: YAML scalars and lists ('4', '[0, 4]', 'true', 'null', 'fadvise').
    A YAML syntax error is an error naming the parameter (quote text to pass it as is). A word
    YAML reads as a boolean (on, off, yes, no) is said in a note, with how to pass it as text.
    Text holding undecodable bytes (surrogate escapes, which YAML refuses) is passed as it is."""
    if any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ParameterError(f"-p {name}" if name else "-p", text,
                             f"a YAML value such as 4, [0, 4], true or a name ({problem}; to pass "
                             f"text as it is, quote it: \"'...'\")") from None
    if isinstance(value, bool) and text.strip().lower() in YAML_BOOLEAN_WORDS:
        word = text.strip()
        print(f"note: -p {name or 'NAME'} {word} was read as {str(value).lower()} (a YAML boolean); "
              f"to pass the word {word!r}, quote it: -p {name or 'NAME'} \"'{word}'\"", file=sys.stderr)
    return value


def absolute_paths(params: dict) -> dict:
    """``params`` with every relative path parameter (``*_dir``, ``*_path``, ``diagnose``, ``replay``) made absolute
    against this process's working directory, so the checks before the run and the kernel (which runs in
    ``notebooks/``) mean the same place."""
    return {k: str(Path(v).expanduser().absolute())
            if (k.endswith(("_dir", "_path")) or k in ("diagnose", "replay")) and isinstance(v, str) and v else v
            for k, v in params.items()}


@dataclass
class Plan:
    chapter: Chapter
    parameters: dict  # what papermill injects (profile + overrides + run_dir)


def _one_line(text) -> str:
    return " ".join(str(text).split())


def plan(chapter_keys, profile: str, overrides: dict, run_dir: Path, extra: dict | None = None) -> list[Plan]:
    """Resolve chapters and parameters, validate everything, and return what to execute.
    A ``-p`` name that only other chapters have is ignored with a note (scripts may pass
    ``data_dir`` to any selection); a name no chapter has is an error."""
    absolute_data_dir_env()
    profs = profiles()
    if profile not in profs:
        raise ParameterError("--profile", profile, "one of " + ", ".join(profs))
    chapters = [lookup(k) for k in chapter_keys] if chapter_keys else available()
    for ch in chapters:
        if not ch.available:
            raise RunError(f"chapter {ch.number} ({ch.slug}) has no notebook yet: {ch.notebook.name}")
        _check_parameters_cell(ch)
    if extra and extra.get("reference_host") is not None:
        host_name("--as-reference", extra["reference_host"])  # any plain name: promote makes its folder
    defaults = {ch.name: chapter_parameters(ch) for ch in chapters}
    known = set().union(*defaults.values()) if defaults else set()
    for name in overrides:
        if name in RUNNER_PARAMETERS:
            raise ParameterError(f"-p {name}", overrides[name], "not this one: the runner sets it (use --run-id)")
    unknown = [n for n in overrides if n not in known]
    if unknown:
        others = {c: chapter_parameters(c) for c in available() if c.name not in defaults}
        for name in unknown:
            users = [c for c, params in others.items() if name in params]
            if not users:
                raise ParameterError(f"-p {name}", overrides[name], _unknown_words(name, known))
            which = (f"chapter {users[0].number} uses it" if len(users) == 1 else
                     "chapters " + ", ".join(str(c.number) for c in users) + " use it")
            print(f"note: -p {name} is not a parameter of the selected chapters; ignored ({which})", file=sys.stderr)
    plans = []
    for ch in chapters:
        prof = (profs[profile] or {}).get(ch.name, {}) or {}
        unknown = set(prof) - set(defaults[ch.name])
        if unknown:
            raise RunError(f"{PROFILES_FILE.name}: profile {profile!r} sets unknown parameters "
                           f"{sorted(unknown)} for {ch.name}")
        inject = {**prof, **{k: v for k, v in overrides.items() if k in defaults[ch.name]}, **(extra or {})}
        inject = absolute_paths({k: v for k, v in inject.items() if k in defaults[ch.name]})
        inject["run_dir"] = str(run_dir)
        _check_book_options(ch, inject, from_extra=set(extra or ()))
        if "data_dir" in defaults[ch.name]:
            _check_data_dir(inject.get("data_dir"), run_dir.parent)
        if ch.module:
            _preflight(ch, {**defaults[ch.name], **inject})
        plans.append(Plan(ch, inject))
    # a chapter that measures nothing (chapter 1) summarises the others: it runs after them, so its page shows
    # this run's numbers; the book orders pages by its table of contents, not by this order
    return sorted(plans, key=lambda p: not p.chapter.measures)


def _check_data_dir(data_dir, results_root: Path) -> None:
    """The data directory a chapter will use (``-p data_dir``, else ``$DATAJOURNEY_DATA_DIR``, else the
    default) is neither ``/``, the checkout nor this run's results folder (:func:`datasets.check_data_dir`)."""
    from datajourney.toolkit import datasets

    if data_dir is None:
        data_dir, name = default_data_dir(), (DATA_DIR_ENV if os.environ.get(DATA_DIR_ENV) else "data_dir")
    else:
        name = "data_dir"
    if isinstance(data_dir, (str, os.PathLike)) and str(data_dir):
        datasets.check_data_dir(name, data_dir, results_root=results_root)


def _unknown_words(name: str, known: set) -> str:
    """What an unknown ``-p`` name should have been: the closest names ("did you mean"), else the parameters a
    reader sets (the runner's own options, such as ``replay`` and ``is_reference_run``, left out)."""
    import difflib

    readers = sorted(k for k in known if k not in BOOK_OPTIONS)
    close = difflib.get_close_matches(name, readers, n=3, cutoff=0.6)
    if close:
        return "a parameter of the selected chapters (did you mean " + " or ".join(f"'{c}'" for c in close) + "?)"
    return "a parameter of the selected chapters: " + ", ".join(readers)


def absolute_data_dir_env() -> None:
    """A relative ``$DATAJOURNEY_DATA_DIR`` made absolute against this process's working directory, once,
    so that the checks before the run and the kernels (which run in ``notebooks/``) mean the same place."""
    value = os.environ.get(DATA_DIR_ENV)
    if value and not os.path.isabs(os.path.expanduser(value)):
        os.environ[DATA_DIR_ENV] = str(Path(value).expanduser().absolute())


def _check_parameters_cell(ch: Chapter) -> None:
    """A chapter's notebook must have its cell tagged ``parameters``: without it papermill puts the profile's
    and ``-p`` values at the top, where the notebook's own assignments overwrite them unseen."""
    import nbformat

    try:
        nb = nbformat.read(ch.notebook, as_version=4)
    except (OSError, ValueError) as e:
        raise RunError(f"chapter {ch.number}: its notebook {ch.notebook} cannot be read ({type(e).__name__}: "
                       f"{_one_line(e)[:120]})", exit_code=2) from None
    if not any("parameters" in (c.get("metadata", {}).get("tags") or []) for c in nb.cells):
        raise RunError(f"chapter {ch.number}: its notebook {ch.notebook} has no cell tagged 'parameters', so the "
                       "profile's and -p values would be ignored (tag the cell that sets the parameters)",
                       exit_code=2)


def _check_book_options(ch: Chapter, params: dict, *, from_extra: set) -> None:
    """The book's options and ``diagnose``, checked before anything runs: ``reference_host`` a host with
    committed reference results (``--as-reference``'s was checked by :func:`plan`), ``replay`` a run directory
    holding this chapter's result file, ``diagnose`` one holding other chapters' result files."""
    if params.get("reference_host") is not None and "reference_host" not in from_extra:
        run_options({"reference_host": params["reference_host"]})
    if params.get("replay") is not None:
        _replay_source(ch, params["replay"])
    if params.get("diagnose") is not None:
        _diagnose_source(ch, params["diagnose"])


def _replay_source(ch: Chapter, source) -> results.Result:
    """The result file a chapter replays (``-p replay DIR``), checked like any result file."""
    allowed = f"a run directory holding {ch.name}.json (a result file of this chapter)"
    if not isinstance(source, str) or not source:
        raise ParameterError("replay", source, allowed)
    f = Path(source) / f"{ch.name}.json"
    if not f.is_file():
        raise ParameterError("replay", source, allowed)
    res = results.Result.load(f)
    if res.chapter != ch.name:
        raise ParameterError("replay", source, f"{allowed}: {f} holds chapter {res.chapter!r}")
    return res


def _diagnose_source(ch: Chapter, source) -> None:
    """``-p diagnose DIR``: a run directory holding result files of other chapters (checked)."""
    allowed = "a run directory holding other chapters' result files (<chapter>.json)"
    if not isinstance(source, str) or not source or not Path(source).is_dir():
        raise ParameterError("diagnose", source, allowed)
    found = 0
    for other in available():
        f = Path(source) / f"{other.name}.json"
        if other.name != ch.name and f.is_file():
            results.Result.load(f)
            found += 1
    if not found:
        raise ParameterError("diagnose", source, f"{allowed}: {source} holds none")


def _preflight(ch: Chapter, params: dict) -> None:
    """A chapter's checks; anything they raise becomes a one-line error naming the chapter."""
    who = f"chapter {ch.number} ({ch.name})"
    try:
        importlib.import_module(ch.module).preflight(params)
    except (ParameterError, RunError):
        raise
    except ModuleNotFoundError as e:
        raise missing_module(e, who) from None
    except Exception as e:  # noqa: BLE001 - any failure of a check is bad input, said in one line
        raise RunError(f"{who}: its checks failed before any work: {type(e).__name__}: {_one_line(e)}",
                       exit_code=2) from None


def new_run_id(profile: str) -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{profile}"


# --------------------------------------------------------------------------- run directories
def results_dir(results_root=None) -> Path:
    """The parent of run directories, created if missing; a one-line error when it cannot be."""
    root = Path(results_root) if results_root else RESULTS_ROOT
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ParameterError("--results", str(root), f"a directory that can be created ({e.strerror or e})") from None
    root = writable_dir("--results", root, create=False)
    for left in [*root.glob(".replaced-*"), *root.glob(".latest-*")]:  # of a replace or link cut short
        if left.is_symlink() or left.is_file():
            left.unlink(missing_ok=True)
        else:
            shutil.rmtree(left, ignore_errors=True)
    for d in root.iterdir():
        if not d.name.startswith(".") and d.is_dir() and not d.is_symlink():
            _close_killed_run(d)
    _repair_latest(root)
    return root


def _close_killed_run(run_dir: Path) -> bool:
    """A run whose runner was killed (``kill -9``: its ``run.json`` still says ``running`` and its process
    is gone) is closed by the next run: its partial notebooks are published with the cell they stopped
    in marked, its notices file is removed, and ``run.json`` says ``interrupted``. Whether it was one.
    A damaged ``run.json`` is left alone with a note: one bad run never stops the others."""
    try:
        rec = _record_at(run_dir)
    except ParameterError as e:
        print(f"note: {e.value} is left alone (it should be {e.allowed})", file=sys.stderr, flush=True)
        return False
    if rec is None or rec.get("status") != "running" or _runner_alive(rec):
        return False
    for partial in (run_dir / "notebooks").glob(".*.partial.ipynb"):
        out = partial.with_name(partial.name[1:-len(".partial.ipynb")] + ".ipynb")
        try:
            _publish(out, {"mark": True, "ename": "Interrupted", "evalue": "the runner was killed"}, tidy=False)
        except OSError:
            partial.unlink(missing_ok=True)
    (run_dir / NOTICES_FILE).unlink(missing_ok=True)
    rec.update(status="interrupted", finished=rec.get("finished") or _now(),
               note="the runner was killed without recording a status; closed by a later run")
    try:
        _write_record(run_dir, rec)
    except OSError:
        pass
    print(f"note: run {run_dir.name} was killed while running; it is marked 'interrupted' and its partial "
          "notebooks are kept with the cell they stopped in", file=sys.stderr, flush=True)
    return True


#: The largest process id a ``pid_t`` holds (a larger number in a run record is no process id at all).
MAX_PID = (1 << 31) - 1


def _record_at(run_dir) -> dict | None:
    """``run_dir/run.json`` as written (``None``: there is none), its shape checked: a run record may come from
    another host, or be damaged, and is then a one-line :class:`ParameterError` naming the file and the field."""
    path = Path(run_dir) / "run.json"
    try:
        rec = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ParameterError("run_dir", str(path), f"a readable run record ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise ParameterError("run_dir", str(path), f"a run record in JSON ({_one_line(e)[:80]})") from None
    chapters = rec.get("chapters", []) if isinstance(rec, dict) else None
    pid = rec.get("pid") if isinstance(rec, dict) else None
    if not isinstance(rec, dict):
        why = f"a JSON object, not {type(rec).__name__}"
    elif not isinstance(chapters, list) or not all(isinstance(c, dict) and isinstance(c.get("chapter"), str)
                                                   for c in chapters):
        why = "'chapters' a list of objects, each naming its chapter"
    elif not all(isinstance(rec.get(k), (str, type(None))) for k in ("status", "run_id", "host")):
        why = "'status', 'run_id' and 'host' texts"
    elif pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= MAX_PID):
        why = f"'pid' a process id (1 to {MAX_PID:,})"
    else:
        return rec
    raise ParameterError("run_dir", str(path), f"a run record: {why}")


def read_record(run_dir) -> dict | None:
    """A run's ``run.json`` (``None``: there is none), checked (:func:`_record_at`); a run whose runner
    died without a word reads as ``interrupted``."""
    rec = _record_at(run_dir)
    if rec is None:
        return None
    if rec.get("status") == "running" and not _runner_alive(rec):
        rec["status"] = "interrupted"
        rec.setdefault("note", "the runner stopped without recording a status (killed)")
    return rec


def _runner_alive(rec: dict) -> bool:
    if rec.get("host") != socket.gethostname():
        return True  # cannot tell: assume it runs
    pid = rec.get("pid")
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, TypeError, ValueError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def _target(root: Path, run_id: str | None, profile: str, replace: bool) -> tuple[Path, bool]:
    """(run directory to claim, whether its name is fixed); refuses a used ``--run-id``, and one that is a
    symbolic link whatever it points to (a run directory is never reached through a link, so replacing
    one never deletes anything outside ``root``). Checked again, under the results folder's lock, by
    :func:`_remove_run` and :func:`_claim`: this early check only says it before the run is planned."""
    if not run_id:
        return root.resolve() / new_run_id(profile), False
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or run_id == "latest":
        raise ParameterError("--run-id", run_id, "a name of letters, digits, '.', '_' and '-' (not 'latest')")
    target = root.resolve() / run_id  # the name itself, never what a link of that name points to
    if target.is_symlink():
        raise ParameterError("--run-id", run_id, f"the name of a run directory: {target} is a symbolic link "
                             f"(to {os.readlink(target)}), which is left alone")
    if target.exists():
        if not replace:
            raise ParameterError("--run-id", run_id, f"a new run id: {target} already exists "
                                 "(pass --replace to delete that run and make a new one)")
        _replaceable(target)
    return target, True


def _replaceable(target: Path) -> None:
    """Refuse to replace ``target`` unless it is a run directory that is not running: a one-line error."""
    run_id = target.name
    if target.is_symlink() or not target.is_dir():
        raise ParameterError("--run-id", run_id, f"the name of a run directory: {target} is not one")
    rec = read_record(target)
    if rec is None and any(target.iterdir()):
        raise ParameterError("--run-id", run_id, f"the id of a run: {target} is not a run directory "
                             "(no run.json), so it is left alone")
    if rec and rec.get("status") == "running":
        raise ParameterError("--run-id", run_id, f"a run that has finished: {target} is being written by "
                             f"pid {rec.get('pid')} on {rec.get('host')}")


def _runs_locked(root: Path):
    """The results folder's lock, held while a run is checked and removed or created with its first ``run.json``:
    two runs of one id never delete or share each other's directory."""
    return _flocked(root, f"the run directories of {root}", by="another run")


def _remove_run(target: Path) -> None:
    """Delete an old run directory (moved aside first, so a half-deleted one is never seen). Under the
    results folder's lock (:func:`_runs_locked`) it is checked again to be a run directory that is not
    running (another ``--replace`` may have started a run in it since :func:`_target` looked), and a
    link is never followed: what is moved aside must be a real directory, else nothing is deleted."""
    with _runs_locked(target.parent):
        _replaceable(target)
        aside = target.with_name(f".replaced-{target.name}-{uuid.uuid4().hex[:8]}")
        target.rename(aside)
        if aside.is_symlink() or not aside.is_dir():  # swapped for a link in between: put it back, delete nothing
            os.rename(aside, target)
            raise ParameterError("--run-id", target.name, f"the name of a run directory: {target} changed under us")
    shutil.rmtree(aside, ignore_errors=True)
    _repair_latest(target.parent)


def _repair_latest(root: Path) -> None:
    """Keep ``root/latest`` a link to a run directory of ``root``: one left dangling (its run was deleted)
    or pointing elsewhere is pointed at the newest run that ended ``ok``, or removed when there is none.
    A folder whose ``run.json`` is damaged is no candidate (:func:`results_dir` notes it)."""
    latest = root / "latest"
    if not latest.is_symlink():
        return
    name = os.readlink(latest)
    if "/" not in name and (root / name).is_dir() and not (root / name).is_symlink():
        return

    def ended_ok(d: Path) -> bool:
        try:
            return (read_record(d) or {}).get("status") == "ok"
        except ParameterError:
            return False

    runs = [d for d in root.iterdir() if not d.name.startswith(".") and d.name != "latest"
            and d.is_dir() and not d.is_symlink() and ended_ok(d)]
    if runs:
        _point_latest(root, max(runs, key=lambda d: d.stat().st_mtime))
    else:
        latest.unlink(missing_ok=True)


def _claim(target: Path, fixed: bool) -> Path:
    """Create the run directory with an exclusive mkdir, and its first ``run.json`` (``running``, this
    process), under the results folder's lock: two runs never share one, and a ``--replace`` checking
    it meanwhile sees a running run, never an empty folder it may delete."""
    with _runs_locked(target.parent):
        for k in range(1, 1000):
            cand = target if k == 1 else target.with_name(f"{target.name}-{k}")
            try:
                cand.mkdir()
            except FileExistsError:
                if fixed:
                    raise ParameterError("--run-id", target.name,
                                         "a new run id: another run has just taken it") from None
                continue
            try:
                _write_record(cand, {"run_id": cand.name, "started": _now(), "status": "running",
                                     "host": socket.gethostname(), "pid": os.getpid(), "chapters": []})
            except OSError as e:
                cand.rmdir()
                raise RunError(f"the run could not start: {write_error(e, cand / 'run.json')}") from None
            return cand
    raise RunError(f"no free run directory name next to {target}")


def _point_latest(root: Path, run_dir: Path) -> None:
    latest = root / "latest"
    if latest.exists() and not latest.is_symlink():
        return
    tmp = root / f".latest-{uuid.uuid4().hex[:8]}"
    try:
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, latest)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


# --------------------------------------------------------------------------- kernels
_WATCH = None  # the _Kernel of the chapter being executed
_REAPER = None  # kills the kernels' process groups when this runner ends, however it ends (first kernel)


class _Kernel:
    """The kernel process of one chapter: its Popen and process group."""

    def __init__(self):
        self.process = None
        self.pid = None
        self.pgid = None

    def started(self, provisioner) -> None:
        self.process = getattr(provisioner, "process", None)
        self.pid = getattr(provisioner, "pid", None) or getattr(self.process, "pid", None)
        self.pgid = getattr(provisioner, "pgid", None)
        if self.pgid and self.pgid == self.pid and self.pgid != os.getpgrp():
            _reaper().watch(self.pgid)  # its group dies with this runner, even under kill -9

    @property
    def returncode(self):
        return self.process.poll() if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig) -> None:
        if self.pid:
            try:
                os.kill(self.pid, sig)
            except OSError:
                pass

    def kill_group(self) -> None:
        """Kill the kernel and every process still in its process group (DataLoader or pool workers)."""
        if self.pgid and self.pgid != os.getpgrp():
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except OSError:
                pass
        elif self.alive():
            self.signal(signal.SIGKILL)
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except Exception:  # noqa: BLE001 - still unreaped: the watcher keeps its group registered
                return
        if self.pgid and _REAPER is not None:
            _REAPER.forget(self.pgid)


def _kernel_manager_class():
    from jupyter_client.manager import AsyncKernelManager

    from datajourney.toolkit import lifetime

    class WatchedKernelManager(AsyncKernelManager):
        """Records the kernel's process for the runner (exit signal, process group). The kernel gets
        SIGKILL when the runner dies, even by ``kill -9`` (:func:`~datajourney.toolkit.lifetime.child_setup`),
        and the processes it forks get SIGKILL when it dies (:data:`KERNEL_STARTUP`)."""

        async def start_kernel(self, **kw):
            kw.setdefault("preexec_fn", lifetime.child_setup())
            out = await super().start_kernel(**kw)
            if _WATCH is not None:
                _WATCH.started(self.provisioner)
            return out

    return WatchedKernelManager


#: Run by each kernel before the first cell (IPython's ``exec_lines``): whatever the kernel forks dies with it.
KERNEL_STARTUP = ("--IPKernelApp.exec_lines=__import__('datajourney.toolkit.lifetime', fromlist=['_'])"
                  ".children_die_with_this_process()")


def oom_kills() -> dict:
    """Counters of out-of-memory kills: the machine's (/proc/vmstat) and this cgroup's."""
    files = [Path("/proc/vmstat")]
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                files.append(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events")
            elif "memory" in controllers.split(","):
                files.append(Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control")
    except (OSError, ValueError):
        pass
    out = {}
    for f in files:
        try:
            for row in f.read_text().splitlines():
                if row.startswith("oom_kill "):
                    out[f"{f} oom_kill"] = int(row.split()[1])
        except (OSError, ValueError):
            pass
    return out


def death_cause(returncode, oom_before: dict, oom_after: dict) -> str:
    """Why a kernel died, as far as its exit status and the OOM counters tell."""
    grew = [f"{k} {oom_before[k]} -> {v}" for k, v in oom_after.items() if k in oom_before and v > oom_before[k]]
    if returncode is None:
        return "the kernel stopped answering"
    if returncode >= 0:
        return f"the kernel exited with status {returncode}"
    try:
        sig = signal.Signals(-returncode).name
    except ValueError:
        sig = f"signal {-returncode}"
    if grew:
        return (f"the kernel was killed by {sig} while the out-of-memory killer ran ({'; '.join(grew)}): "
                "the likely cause is memory; use smaller sizes or a machine with more memory")
    if sig == "SIGKILL":
        if oom_after:
            return ("the kernel was killed by SIGKILL with no out-of-memory kill recorded: by hand, by a job "
                    "scheduler, or by a memory limit this machine does not report")
        return "the kernel was killed by SIGKILL (what the out-of-memory killer sends; kill -9 sends it too)"
    if sig in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGABRT", "SIGFPE"):
        return f"the kernel crashed ({sig}) in native code: a library bug or a broken installation"
    return f"the kernel was stopped by {sig}"


# --------------------------------------------------------------------------- interrupts and notices
class _Stopped(Exception):
    """Raised before a cell starts once the run was asked to stop."""


class _Stop:
    """Ctrl-C, SIGTERM and SIGHUP while chapters execute, all alike: the first interrupts the running cell
    (its clean-up runs) and kills the kernel after :data:`GRACE_S`; a second kills it at once."""

    def __init__(self):
        self.requested = None  # the signal's name once asked to stop
        self.kernel: _Kernel | None = None
        self._timer = None

    def hook(self, cell=None, cell_index=None, **_):
        if self.requested:
            raise _Stopped(self.requested)

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        first = self.requested is None
        self.requested = self.requested or name
        k = self.kernel
        if first:
            print(f"\ninterrupting ({name}): stopping the running cell (Ctrl-C again stops at once; after "
                  f"{GRACE_S:.0f} s the kernel is killed)", file=sys.stderr, flush=True)
            if k is not None and k.alive():
                k.signal(signal.SIGINT)
                self._timer = threading.Timer(GRACE_S, k.kill_group)
                self._timer.daemon = True
                self._timer.start()
        else:
            if k is not None:
                k.kill_group()

    def cancel_timer(self) -> None:
        if self._timer:
            self._timer.cancel()
            self._timer = None

    @contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {}
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(s) is not signal.SIG_IGN:  # nohup and background jobs ignore some: keep that
                old[s] = signal.signal(s, self._handle)
        try:
            yield self
        finally:
            self.cancel_timer()
            for s, h in old.items():
                signal.signal(s, h)


class _Notices:
    """Lines the kernel writes to ``$DATAJOURNEY_NOTICES`` (waiting for a data set, damage found,
    clean-up), shown in the runner's terminal as they come and kept in the chapter's entry."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / NOTICES_FILE
        self.path.write_text("")
        self.offset = 0
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        from datajourney.toolkit.datasets import NOTICES_ENV

        self._env = NOTICES_ENV
        self._old = os.environ.get(NOTICES_ENV)
        os.environ[NOTICES_ENV] = str(self.path)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(0.3):
            self.drain()

    def drain(self) -> list[str]:
        with self._lock:
            try:
                with open(self.path) as f:
                    f.seek(self.offset)
                    text = f.read()
            except OSError:
                return []
            complete = text[:text.rfind("\n") + 1]
            self.offset += len(complete.encode())
            new = [ln for ln in complete.splitlines() if ln.strip()]
            for ln in new:
                print(f"      {ln}", file=sys.stderr, flush=True)
            self.lines += new
            return new

    def take(self) -> list[str]:
        self.drain()
        out, self.lines = self.lines, []
        return out

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=2)
        self.drain()
        if self._old is None:
            os.environ.pop(self._env, None)
        else:
            os.environ[self._env] = self._old
        try:
            self.path.unlink()
        except OSError:
            pass
        return False


def _mark_dead_cell(nb, ename: str, evalue: str) -> tuple[int | None, int | None]:
    """Find the cell that was running when execution stopped (the last one papermill started),
    give it an error output saying why, and return (cell index, execution count)."""
    import nbformat

    last = None
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") == "code" and cell.metadata.get("papermill", {}).get("start_time"):
            last = i
    if last is None:
        return None, None
    cell = nb.cells[last]
    cell.outputs.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]))
    cell.metadata.setdefault("papermill", {}).update(status="failed", exception=True)
    return last, cell.get("execution_count")


def _partial(out: Path) -> Path:
    """Where papermill writes a chapter's notebook while it executes (hidden; published whole when done)."""
    return out.with_name(f".{out.stem}.partial.ipynb")


def _publish(out: Path, failure: dict | None, tidy: bool) -> None:
    """Publish the notebook papermill wrote to :func:`_partial` whole to ``out``, the cell a dead kernel or an
    interrupt stopped in marked (``failure``), tidied when the chapter finished; a cut-short one publishes nothing."""
    import nbformat

    partial = _partial(out)
    if not partial.exists():  # the kernel did not start
        return
    try:
        nb = nbformat.read(partial, as_version=4)
    except (OSError, ValueError):
        nb = None
    finally:
        partial.unlink(missing_ok=True)
    if nb is None:
        if failure is not None:
            failure["notebook"] = "not written (its partial notebook was incomplete)"
        return
    if failure is not None and failure.pop("mark", False):
        failure["cell"], failure["execution_count"] = _mark_dead_cell(nb, failure["ename"], failure["evalue"])
    nb.metadata.setdefault("papermill", {})["output_path"] = str(out)
    if tidy:
        _tidy(nb)
    write_atomic(out, nbformat.writes(nb) + "\n")


# --------------------------------------------------------------------------- execute
def _run_notebook(p: Plan, out: Path, stop: _Stop, km_class, progress: bool) -> dict | None:
    """Execute chapter ``p``'s notebook into ``out`` with papermill, in a kernel of its own that nothing of the
    chapter outlives, and publish it: None when every cell ran, else the failure (the cell and its error, or
    how the kernel died, with the settings it left changed; ``write`` when a file could not be written)."""
    global _WATCH
    import papermill as pm
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    kernel = _Kernel()
    _WATCH = stop.kernel = kernel
    oom_before = oom_kills()
    failure = None
    try:
        pm.execute_notebook(
            str(p.chapter.notebook), str(_partial(out)), parameters=p.parameters,
            kernel_name="python3", progress_bar=progress, cwd=str(p.chapter.notebook.parent),
            kernel_manager_class=km_class, on_cell_start=stop.hook,
            extra_arguments=["--IPKernelApp.log_level=ERROR",  # no transport chatter on the console
                             KERNEL_STARTUP],
        )
    except PapermillExecutionError as e:
        failure = {"cell": e.cell_index, "execution_count": e.exec_count, "ename": e.ename,
                   "evalue": _one_line(e.evalue)}
    except DeadKernelError:
        cause = "stopped on request" if stop.requested else death_cause(
            kernel.returncode, oom_before, oom_kills())
        failure = {"mark": True, "ename": "DeadKernelError", "evalue": f"the kernel died: {cause}",
                   "returncode": kernel.returncode}
    except _Stopped:
        failure = {"mark": True, "ename": "KeyboardInterrupt", "evalue": "the run was interrupted"}
    except Exception as e:  # noqa: BLE001 - the kernel did not start, papermill could not write, ...
        wrote = isinstance(e, OSError) and e.errno in WRITE_ERRNOS  # its notebook (a full disk)
        failure = {"mark": True, "ename": type(e).__name__, "write": wrote,
                   "evalue": write_error(e, out) if wrote else _one_line(e) or repr(e)}
    finally:
        stop.cancel_timer()
        kernel.kill_group()  # nothing of the chapter outlives it
        _WATCH = stop.kernel = None
    if failure is not None and failure.get("mark"):  # a dead or stopped kernel: settings it left
        failure["evalue"] += _left_changed()
    try:
        _publish(out, failure, tidy=failure is None and not stop.requested)
    except OSError as e:
        failure = failure or {}
        failure.update(ename=failure.get("ename", "OSError"), write=True,
                       evalue=(f"{failure['evalue']}; " if failure.get("evalue") else "")
                       + write_error(e, out))
    if failure is not None:
        failure.pop("mark", None)
        failure.setdefault("cell", None)
        failure.setdefault("execution_count", None)
    return failure


def execute(plans: list[Plan], run_dir: Path, *, profile: str, progress: bool = True,
            keep_going: bool = False, rendered_from: dict | None = None) -> dict:
    """Execute each planned notebook in order; stop at the first failing cell (with ``keep_going``: fail at the
    end, naming every chapter that failed). A failed write stops the run with one line naming the file."""
    try:
        import nbclient  # noqa: F401
        import papermill  # noqa: F401
    except ModuleNotFoundError as e:
        raise missing_module(e, "the runner") from None

    # The console shows chapter and cell progress: no profiler debug lines from the kernels
    # (they inherit this environment) and no kernel-transport chatter.
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    for name in ("traitlets", "papermill", "nbclient"):
        logging.getLogger(name).setLevel(logging.ERROR)
    nb_dir = run_dir / "notebooks"
    record = {"run_id": run_dir.name, "profile": profile, "started": _now(), "status": "running",
              "host": socket.gethostname(), "pid": os.getpid(), "boot_id": boot_id(), "chapters": []}
    if rendered_from:
        record["rendered_from"] = rendered_from
    stop = _Stop()
    km_class = _kernel_manager_class()
    where = "the run"
    try:
        nb_dir.mkdir(parents=True, exist_ok=True)
        _write_record(run_dir, record)
        with stop.installed(), _Notices(run_dir) as notices:
            for i, p in enumerate(plans, 1):
                out = nb_dir / p.chapter.notebook.name
                where = f"chapter {p.chapter.number} ({p.chapter.notebook.name})"
                if stop.requested:
                    _finish(record, run_dir, "interrupted")
                    raise Interrupted(_kept(run_dir, record, f"interrupted before {where}"))
                print(f"[{i}/{len(plans)}] chapter {p.chapter.number}: {p.chapter.title}", file=sys.stderr,
                      flush=True)
                t0 = time.perf_counter()
                entry = {"chapter": p.chapter.name, "parameters": p.parameters,
                         "notebook": str(out.relative_to(run_dir))}
                failure = _run_notebook(p, out, stop, km_class, progress)
                entry["seconds"] = round(time.perf_counter() - t0, 2)
                said = notices.take()
                if said:
                    entry["notices"] = said
                entry["status"] = "interrupted" if stop.requested else "failed" if failure else "ok"
                if entry["status"] != "ok":
                    entry["error"] = failure
                record["chapters"].append(entry)
                if stop.requested:
                    _finish(record, run_dir, "interrupted")
                    known = failure and failure.get("cell") is not None
                    cell = f", cell {failure['cell']} of the executed notebook" if known else ""
                    raise Interrupted(_kept(run_dir, record, f"interrupted in {where}{cell}"
                                            + _left_changed().replace("; the kernel", ". The kernel")))
                if failure and (not keep_going or failure.get("write")):
                    _finish(record, run_dir, "failed")
                    if failure.pop("write", False):
                        raise RunError(f"{where} failed: {failure['evalue']}; run.json says 'failed' (kept in "
                                       f"{run_dir})")
                    at = (f" in cell {failure['cell']} of the executed notebook "
                          f"(execution count {failure['execution_count']})" if failure.get("cell") is not None
                          else "")
                    raise RunError(f"{where} failed{at}: {failure['ename']}: {failure['evalue']}\n"
                                   f"  executed notebook with the traceback: {out}")
                _write_record(run_dir, record)
                print(f"      failed: {failure['ename']}: {failure['evalue']} (executed notebook: {out}); going on "
                      "with the next chapter" if failure else f"      done in {entry['seconds']:.1f} s",
                      file=sys.stderr, flush=True)
        if stop.requested:
            _finish(record, run_dir, "interrupted")
            raise Interrupted(_kept(run_dir, record, "interrupted after the last chapter"))
        failed = [c["chapter"] for c in record["chapters"] if c.get("status") == "failed"]
        _finish(record, run_dir, "failed" if failed else "ok")
        if failed:
            raise RunError(f"{len(failed)} of {len(plans)} chapters failed: {', '.join(failed)}; the others "
                           f"finished (kept in {run_dir}; their executed notebooks hold the tracebacks)")
    except OSError as e:  # run.json, the notices file or the notebooks folder could not be written
        raise RunError(f"{where} failed: {write_error(e, run_dir)}; {_record_failure(record, run_dir, e)}") from None
    finally:
        _release_reaper()
    return record


def _reaper():
    """This runner's watcher (:class:`~datajourney.toolkit.lifetime.GroupReaper`), started with the first kernel."""
    global _REAPER
    if _REAPER is None:
        from datajourney.toolkit.lifetime import GroupReaper

        _REAPER = GroupReaper()
    return _REAPER


def _release_reaper() -> None:
    """Every kernel of this run has ended: the watcher exits (a process that runs chapters in-process, such as
    a test session, keeps no child of its own between runs)."""
    global _REAPER
    if _REAPER is not None:
        _REAPER.close()
        _REAPER = None


def _left_changed() -> str:
    """What a killed kernel left changed of the system's settings (a device's read_ahead_kb), with the
    command that puts it back; empty when nothing was."""
    from datajourney.toolkit import sysfs

    left = sysfs.left_changed()
    if not left:
        return ""
    return (f"; the kernel left {', '.join(left)} changed (it was killed before putting "
            f"{'it' if len(left) == 1 else 'them'} back): run '{sysfs.RESTORE_COMMAND}'")


def _record_failure(record: dict, run_dir: Path, e: OSError) -> str:
    """Try to leave ``run.json`` saying ``failed`` with the reason; what it says, for the message."""
    record.update(status="failed", finished=_now(), error=write_error(e, run_dir))
    try:
        _write_record(run_dir, record)
    except OSError:
        return ("run.json could not be updated either (it reads 'interrupted' once this runner has exited; "
                f"kept in {run_dir})")
    return f"run.json says 'failed' (kept in {run_dir})"


def _finish(record: dict, run_dir: Path, status: str) -> None:
    record.update(status=status, finished=_now())
    _write_record(run_dir, record)


def _kept(run_dir: Path, record: dict, what: str) -> str:
    ok = [c["chapter"] for c in record["chapters"] if c.get("status") == "ok"]
    partial = [c["notebook"] for c in record["chapters"] if c.get("status") != "ok"]
    kept = (f"results and notebooks of {', '.join(ok)}" if ok else "no finished chapter")
    if partial:
        kept += f"; the partial notebook {', '.join(partial)}"
    return (f"{what}. Kept in {run_dir}: {kept}; run.json says 'interrupted'. The kernel and the processes "
            "it started were stopped. Data sets are only ever published complete; the temporary files of "
            "an interrupted generation are removed by the kernel or, if it was killed, by the next run.")


def run(chapter_keys=(), *, profile: str = "quick", overrides: dict | None = None, run_id: str | None = None,
        results_root: Path | None = None, extra: dict | None = None, progress: bool = True,
        replace: bool = False, keep_going: bool = False) -> Path:
    """Plan (validating everything), then execute; the run directory. ``run_id``: its name (default:
    date-time-profile, made unique); an existing one is refused unless ``replace`` (deleted once checks pass)."""
    root = results_dir(results_root)
    target, fixed = _target(root, run_id, profile, replace)
    plans = plan(chapter_keys, profile, overrides or {}, target, extra)
    return _execute_new(root, target, fixed, replace, lambda _: plans, profile=profile, progress=progress,
                        keep_going=keep_going)


def _execute_new(root: Path, target: Path, fixed: bool, replace: bool, plans_for, **how) -> Path:
    """The lifecycle of a new run once it is planned: the old run of a fixed id replaced, the run directory
    claimed, ``plans_for(run_dir)`` executed in it, ``latest`` pointed at it; the run directory."""
    if replace and (target.exists() or target.is_symlink()):
        _remove_run(target)
    run_dir = _claim(target, fixed)
    plans = plans_for(run_dir)
    for p in plans:
        p.parameters["run_dir"] = str(run_dir)
    execute(plans, run_dir, **how)
    _point_latest(root, run_dir)
    return run_dir


def rerender(source, *, run_id: str | None = None, results_root: Path | None = None, replace: bool = False,
             progress: bool = True) -> Path:
    """Execute the notebooks of the finished run ``source`` again with this checkout's code, each
    rendering that run's result file (parameter ``replay``) instead of measuring: the text, tables
    and charts of a run, made again by newer code from the same measurements. The chapters'
    preflight checks are skipped: nothing is measured, so this machine need not be able to."""
    source = Path(source).resolve()
    record = read_record(source) or {}
    if record.get("status") != "ok":
        raise ParameterError("run_dir", str(source), "a run directory whose run.json says status 'ok'")
    recorded = [_recorded_parameters(entry, source / "run.json") for entry in record.get("chapters") or []]
    # Every result file is checked before anything is created, and the chapter's own parameters (what a page
    # counts and titles) are the result's, the measurements' own record, not the run record's.
    recorded = [(ch, {**params, **_result_parameters(ch, _replay_source(ch, str(source)), source)})
                for ch, params in recorded]
    for ch, _ in recorded:
        _check_parameters_cell(ch)
    root = results_dir(results_root)
    target, fixed = _target(root, run_id or f"{record['run_id']}-rendered", "rendered", replace)
    return _execute_new(root, target, fixed, replace, lambda _: [Plan(ch, {**params, "replay": str(source)})
                                                                 for ch, params in recorded],
                        profile=f"{record.get('profile')} (rendered from {record['run_id']})", progress=progress,
                        rendered_from={"run_id": record["run_id"], "started": record.get("started")})


def _result_parameters(ch: Chapter, res: results.Result, source: Path) -> dict:
    """The parameters a result file records that are the chapter's own, plain and each within its declaration
    (what a rendered page takes its counts and titles from); else a one-line error naming the file and it."""
    where = source / f"{ch.name}.json"
    own = {k: v for k, v in (res.parameters or {}).items() if k in ch.params.defaults()}
    _recorded_parameters({"chapter": ch.name, "parameters": own}, where)
    specs = ch.params.specs()
    for name, value in own.items():
        if name in specs:
            try:
                specs[name].check(name, value)
            except ParameterError as e:
                raise ParameterError("run_dir", str(where), f"a result whose parameter {name!r} is "
                                     f"{e.allowed} (not {_one_line(repr(value))[:60]})") from None
    return own


def _plain(value) -> bool:
    """A value papermill can write into a notebook as a literal: None, bool, number, text, or lists and
    mappings of those (a run record is data from another host; nothing else passes)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _recorded_parameters(entry, where) -> tuple[Chapter, dict]:
    """A chapter of a run record (the file ``where``) and its parameters, checked before anything
    runs: papermill writes names and values into the notebook as code, so only the chapter's own
    parameter names (its ``Params`` and the book's options) with plain literal values are accepted."""
    where = str(where)
    if not isinstance(entry, dict) or not isinstance(entry.get("parameters"), dict):
        raise ParameterError("run_dir", where, "a run record whose chapters each hold a 'parameters' mapping")
    try:
        ch = lookup(str(entry.get("chapter")))
    except KeyError:
        raise ParameterError(
            "run_dir", where, f"a run record of known chapters (not {entry.get('chapter')!r})"
        ) from None
    allowed = chapter_parameters(ch)
    for name, value in entry["parameters"].items():
        if not isinstance(name, str) or name not in allowed:
            raise ParameterError("run_dir", where, f"a run record whose parameter names are {ch.name}'s own "
                                                   f"(not {str(name)[:60]!r})")
        if not _plain(value):
            raise ParameterError("run_dir", where, f"a run record whose parameter {name!r} of {ch.name} is a "
                                                   "plain value (None, bool, number, text, list)")
    return ch, entry["parameters"]


# --------------------------------------------------------------------------- checks of a finished run
def _notebook_of(path: Path, what: str):
    """A run's executed notebook, read; one that is missing or not a notebook is a one-line error naming it."""
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise ParameterError(what, str(path.parent.parent), f"a complete run: {path} is missing") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ParameterError(what, str(path.parent.parent), f"a run whose executed notebooks are whole: {path} is "
                             f"not a notebook ({type(e).__name__}: {_one_line(e)[:120]})") from None


def _result_of(run_dir: Path, name: str, what: str) -> Path:
    """A chapter's result file in a run, checked (:func:`results.read`, :func:`results.check`)."""
    f = run_dir / f"{name}.json"
    if not f.is_file():
        raise ParameterError(what, str(run_dir), f"a complete run: {name} has no result file {f}")
    res = results.Result.load(f)
    if res.chapter != name:
        raise ParameterError(what, str(run_dir), f"a run whose result files are their chapters': {f} holds "
                             f"chapter {res.chapter!r}")
    _result_parameters(lookup(name), res, run_dir)
    return f


def check_run(run_dir) -> dict:
    """What ``book --run`` checks first: the run record's parameters (:func:`_recorded_parameters`), each finished
    chapter's result file, each executed notebook (:func:`shown_notebook`); the record."""
    run_dir = Path(run_dir)
    record = read_record(run_dir) or {}
    for entry in record.get("chapters") or []:
        ch, _ = _recorded_parameters(entry, run_dir / "run.json")
        if entry.get("status") == "ok":
            _result_of(run_dir, ch.name, "--run")
    for ch in available():
        nb = run_dir / "notebooks" / ch.notebook.name
        if nb.exists():
            shown_notebook(nb, ch, "--run")
    return record


def shown_notebook(path: Path, ch: Chapter, what: str):
    """A run's executed notebook as the book shows it and ``promote`` commits it: its cells must be the
    committed notebook's (:func:`_same_code`, a one-line error naming ``what`` otherwise); what is taken is
    the committed notebook, its metadata and cells, with the run's outputs as data (:mod:`.foreign`). A
    run directory travels between hosts: its notebook metadata (which could ask myst-nb to execute it),
    cell metadata and markup never come in."""
    from datajourney.book import foreign

    doc = _notebook_of(path, what)
    try:
        _strip_injected(doc)
    except (AttributeError, TypeError):
        raise ParameterError(what, str(path.parent.parent), f"a run whose executed notebooks are whole: {path} "
                             "has cell tags or papermill metadata of the wrong type") from None
    doc.cells = [c for c in doc.cells if PAPERMILL_ERROR_TAG not in c.get("metadata", {}).get("tags", [])]
    ours = _same_code(doc, path, ch, what)
    if ours is None:  # a chapter with no committed notebook yet: its cells, nothing else of the run's
        import nbformat

        ours = nbformat.v4.new_notebook(metadata={"kernelspec": KERNELSPEC})
        for c in doc.cells:
            tags = c.get("metadata", {}).get("tags")
            meta = {"tags": [t for t in tags if isinstance(t, str)]} if isinstance(tags, list) else {}
            new = nbformat.v4.new_code_cell if c.cell_type == "code" else nbformat.v4.new_markdown_cell
            ours.cells.append(new(c.source, metadata=meta))
    nb = foreign.rebuilt(doc, ours)
    nb.metadata.pop("mystnb", None)
    return nb


#: The tag of the cells papermill adds to a failed notebook (a banner, an anchor): its own, not the chapter's; the
#: failed cell's error output says where the run stopped.
PAPERMILL_ERROR_TAG = "papermill-error-cell-tag"
#: The kernel a notebook made from a run's cells runs on.
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


# --------------------------------------------------------------------------- promote
#: What a committed notebook says instead of a directory of the machine that ran it.
HOST_PATH = "<a directory on the run's host>"


def _hide_host_paths(doc) -> None:
    """Absolute paths among a run's injected parameters name directories of the run's host, not the reader's:
    replaced by :data:`HOST_PATH` (in papermill's record and in :data:`RUN_PARAMETERS`)."""
    for params in (doc.metadata.get("papermill", {}).get("parameters", {}),
                   doc.metadata.get(RUN_PARAMETERS[0], {}).get(RUN_PARAMETERS[1], {})):
        for k, v in params.items():
            if isinstance(v, str) and os.path.isabs(v):
                params[k] = HOST_PATH


#: What of papermill's record of a run a committed notebook keeps (plain values only).
PAPERMILL_KEYS = ("parameters", "duration", "start_time", "end_time", "exception", "version")


def _committed_notebook(path: Path, ch: Chapter) -> str:
    """A run's executed notebook as the committed one (:func:`shown_notebook`), with the run's checked parameters
    and papermill's record of its run in metadata, no machine-local paths."""
    import nbformat

    run = _notebook_of(path, "run_dir")
    pm = run.metadata.get("papermill") if isinstance(run.metadata.get("papermill"), dict) else {}
    pm = {k: v for k, v in pm.items() if k in PAPERMILL_KEYS and _plain(v)}
    _recorded_parameters({"chapter": ch.name, "parameters": pm.get("parameters") or {}}, path)
    _strip_injected(run)
    ours = run.metadata.get(RUN_PARAMETERS[0])
    mine = ours.get(RUN_PARAMETERS[1]) if isinstance(ours, dict) else None
    mine = mine if isinstance(mine, dict) else {}
    _recorded_parameters({"chapter": ch.name, "parameters": mine}, path)
    doc = shown_notebook(path, ch, "run_dir")
    doc.metadata["papermill"] = {**pm, "input_path": f"notebooks/{path.name}", "output_path": f"notebooks/{path.name}"}
    doc.metadata[RUN_PARAMETERS[0]] = {RUN_PARAMETERS[1]: mine}
    _hide_host_paths(doc)
    return nbformat.writes(doc) + "\n"


def _same_code(doc, path: Path, ch: Chapter, what: str = "run_dir"):
    """A run's notebook brings its outputs to the committed one, never code: the first cell that differs from the
    committed notebook's is a one-line error naming it; the committed notebook (None for a chapter with none yet)."""
    import nbformat

    committed = ch.notebook
    if not committed.is_file():
        return None
    ours = nbformat.read(committed, as_version=4)
    _strip_injected(ours)
    theirs = [(c.cell_type, c.source) for c in doc.cells]
    mine = [(c.cell_type, c.source) for c in ours.cells]
    for i in range(max(len(theirs), len(mine))):
        if i < len(theirs) and i < len(mine) and theirs[i] == mine[i]:
            continue
        kind = (theirs[i] if i < len(theirs) else mine[i])[0]
        differs = ("is missing" if i >= len(theirs) else "is one more than the committed notebook has"
                   if i >= len(mine) else f"differs from the committed {committed}: {_one_line(theirs[i][1])[:80]!r}")
        raise ParameterError(what, str(path.parent.parent), f"a run of the committed notebooks: cell {i} "
                             f"({kind}) of {path} {differs} (run it again with this checkout, or 'rerender' it)")
    return ours


def promote(run_dir, host: str, *, only=None, side: str | None = None) -> list[Path]:
    """Make a finished run the committed reference of ``host``: its result files and run record to
    ``data/reference/<host>/`` (or, for ``side`` ``more``/``repeats``, beside it under the run's id)
    and, for the main reference of the book's own host (:data:`results.DEFAULT_REFERENCE_HOST`), its executed
    notebooks to ``notebooks/`` (another host's run never replaces the book's pages). ``only``: the chapters
    (that finished) to take from a run that ended early. All or nothing: everything is checked first, then
    swapped in (:func:`_swap`); a failure leaves the previous files and names the file. The files written."""
    host_name("--host", host)
    run_dir = Path(run_dir).resolve()
    record = read_record(run_dir) or {}
    done = {c.get("chapter"): c for c in record.get("chapters") or [] if isinstance(c, dict)}
    if only is not None:  # the chapters of a run that ended early (e.g. its host was taken back) that did finish
        finished = {n for n, c in done.items() if c.get("status") == "ok"}
        only = {lookup(c).name for c in only}
        if not only <= finished:
            raise ParameterError("only", sorted(only), "chapters this run finished ('ok' in its run.json): "
                                 + (", ".join(sorted(finished)) or "none"))
    elif record.get("status") != "ok":
        raise ParameterError("run_dir", str(run_dir), "a run whose status is 'ok' (or name its finished "
                             "chapters with --only)")
    run_id = record.get("run_id")
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ParameterError("run_dir", str(run_dir / "run.json"), "a run record whose run_id is a plain name")
    pages = side is None and host == results.DEFAULT_REFERENCE_HOST   # the book shows this host's notebooks
    chapters = only if only is not None else _chapters_of(run_dir, done, notebooks=pages)
    dest = results.REFERENCE_DIR / host / (side or "")
    files: dict[Path, bytes] = {dest / f"run-{run_id}.json": (run_dir / "run.json").read_bytes()}
    for name in sorted(chapters):
        ch = lookup(name)
        if name in done:
            _recorded_parameters(done[name], run_dir / "run.json")
        src = _result_of(run_dir, name, "run_dir")
        files[dest / (f"{name}-{run_id}.json" if side else f"{name}.json")] = src.read_bytes()
        if pages:
            nb = run_dir / "notebooks" / ch.notebook.name
            files[registry.NOTEBOOK_DIR / nb.name] = _committed_notebook(nb, ch).encode()
    _swap(files, results.REFERENCE_DIR / host)
    for target in files:
        print(f"  -> {target}")
    return list(files)


def _chapters_of(run_dir: Path, done: dict, *, notebooks: bool) -> set[str]:
    """The chapters a run holds: those its record says finished, those with a result file and
    (``notebooks``) those with an executed notebook. A file of no chapter is an error."""
    names = {n for n, c in done.items() if c.get("status") == "ok"}
    files = [f for f in run_dir.glob("*.json") if f.name != "run.json" and not f.name.startswith(".")]
    if notebooks:
        files += [f for f in (run_dir / "notebooks").glob("*.ipynb") if not f.name.startswith(".")]
    for f in files:
        try:
            name = lookup(f.stem).name
        except KeyError:
            name = None
        if name != f.stem:
            raise ParameterError("run_dir", str(run_dir), f"a run of this book's chapters: {f} is no chapter's")
        names.add(name)
    return names


#: The journal of a promote's swap, in the reference folder: written once every file is staged whole, removed
#: once every file is in place. One left by a killed promote is completed by the next (:func:`_roll_forward`).
SWAP_JOURNAL = ".promote-journal.json"


@contextmanager
def _flocked(folder: Path, what: str, *, by: str = "another promote"):
    """An exclusive ``flock`` on ``folder`` for the block (a second holder waits, saying so: ``by`` is
    writing ``what``)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"note: {by} is writing {what}; waiting for it to finish", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _roll_forward(root: Path, roots: tuple[Path, ...]) -> list[Path]:
    """Complete the swap of a promote that was killed while moving its files into place: every file its
    journal names that is still staged is moved to its target (all were staged whole before the journal was
    written), so the reference is the new one throughout, never half old and half new. Moves that name a
    place outside ``roots`` or a staged file outside a ``.promote-*`` folder are ignored. Returns the targets."""
    journal = root / SWAP_JOURNAL
    try:
        moves = json.loads(journal.read_text())["moves"]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError):
        journal.unlink(missing_ok=True)
        return []
    done, folders = [], set()
    for staged, target in moves if isinstance(moves, list) else []:
        staged, target = Path(str(staged)), Path(str(target))
        if not any(r in target.parents for r in roots) or \
                not staged.parent.name.startswith(".promote-") or staged.parent.parent != target.parent:
            continue
        folders.add(staged.parent)
        if staged.is_file() and not staged.is_symlink():
            os.replace(staged, target)
            done.append(target)
    journal.unlink(missing_ok=True)
    for folder in folders:
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
    if done:
        print(f"note: completed a promote that was killed while swapping in its files ({len(done)} files)",
              file=sys.stderr, flush=True)
    return done


def _swap(files: dict[Path, bytes], lock_dir: Path) -> None:
    """Write ``files`` (path -> content) all or nothing: staged whole (fsync) in a hidden folder
    beside each destination, then moved into place one by one under an exclusive ``flock`` on the
    reference folder (one lock for every host, as all share ``notebooks/``) and on ``lock_dir``. Once
    every file is staged a journal says which moves make the swap; a promote killed while moving is
    completed by the next one from it (:func:`_roll_forward`), one killed before it left nothing. If a
    move fails, the files already moved are put back as they were."""
    root = results.REFERENCE_DIR
    staging: dict[Path, Path] = {}
    moved: list[tuple[Path, Path | None]] = []  # (target, its previous file kept aside, or None)
    with _flocked(root, str(root)), _flocked(lock_dir, str(lock_dir)):
        _roll_forward(root, (root, registry.NOTEBOOK_DIR))
        for parent in {t.parent for t in files}:  # staging of a promote killed before its journal: dropped
            for left in parent.glob(".promote-*"):
                if left.is_dir() and not left.is_symlink():
                    shutil.rmtree(left, ignore_errors=True)
        tag = f".promote-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for target in files:
            folder = target.parent / tag
            if folder not in staging.values():
                folder.mkdir(parents=True, exist_ok=True)
            staging[target] = folder
        try:
            for target, data in files.items():
                try:
                    write_atomic(staging[target] / target.name, data)
                except OSError as e:
                    raise RunError(f"promote: could not write {target}: {e.strerror or e} (while staging it); "
                                   "nothing was changed") from None
            kept: dict[Path, Path | None] = {}
            for target in files:
                kept[target] = staging[target] / f"previous-{target.name}"
                if not target.exists():
                    kept[target] = None
                elif not _link_or_copy(target, kept[target]):
                    raise RunError(f"promote: could not keep {target} aside: nothing was changed")
            try:
                write_atomic(root / SWAP_JOURNAL, json.dumps(
                    {"pid": os.getpid(), "moves": [[str(staging[t] / t.name), str(t)] for t in files]}))
            except OSError as e:
                raise RunError(f"promote: could not write {root / SWAP_JOURNAL}: {e.strerror or e}; nothing "
                               "was changed") from None
            for target in files:
                try:
                    os.replace(staging[target] / target.name, target)
                except OSError as e:
                    _put_back(moved)
                    (root / SWAP_JOURNAL).unlink(missing_ok=True)
                    raise RunError(f"promote: could not write {target}: {e.strerror or e}; every file was put "
                                   "back as it was") from None
                moved.append((target, kept[target]))
            (root / SWAP_JOURNAL).unlink(missing_ok=True)
        finally:
            if not (root / SWAP_JOURNAL).exists():
                for folder in set(staging.values()):
                    shutil.rmtree(folder, ignore_errors=True)


def _link_or_copy(src: Path, dst: Path) -> bool:
    """Keep ``src`` aside as ``dst``: a hard link, else a copy; whether it worked."""
    try:
        os.link(src, dst)
    except OSError:
        try:
            shutil.copy2(src, dst)
        except OSError:
            return False
    return True


def _put_back(moved: list[tuple[Path, Path | None]]) -> None:
    """Undo the moves of a promote that failed half way: previous files back, new ones removed."""
    for target, kept in reversed(moved):
        try:
            if kept is None:
                target.unlink()
            else:
                os.replace(kept, target)
        except OSError:
            pass


def _tidy(nb) -> None:
    """An executed notebook fit to read and to run again: no stderr streams (progress bars, warnings), and no
    injected-parameters cell (:func:`_strip_injected`; each chapter shows its run's parameters as a table)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", [])
                            if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    _strip_injected(nb)


#: Where a notebook keeps the parameters its run injected (once their cell is removed).
RUN_PARAMETERS = ("datajourney", "run_parameters")


def strip_injected(path) -> bool:
    """:func:`_strip_injected` on the notebook file at ``path``, written whole; whether it had the cell. A committed
    notebook so treated runs top to bottom in JupyterLab with the reader's edits to its parameters cell."""
    import nbformat

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    if not _strip_injected(nb):
        return False
    write_atomic(path, nbformat.writes(nb) + "\n")
    return True


def _strip_injected(nb) -> bool:
    """Remove the injected-parameters cell (it would reset a reader's edits to the run's values and its host's
    paths), its values kept in :data:`RUN_PARAMETERS` of the metadata; whether a cell was removed."""
    cells = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    if not cells:
        return False
    values = dict(nb.metadata.get("papermill", {}).get("parameters") or {})
    if not values:
        for c in cells:
            values.update(_assignments(c.source))
    nb.metadata.setdefault(RUN_PARAMETERS[0], {})[RUN_PARAMETERS[1]] = values
    drop = {id(c) for c in cells}
    nb.cells = [c for c in nb.cells if id(c) not in drop]
    return True


def _assignments(source: str) -> dict:
    """``name = literal`` lines of a cell as a dict (anything else is skipped)."""
    out = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def note_book_build(run_dir, seconds: float) -> None:
    """Record in a finished run's ``run.json`` how long building the HTML book from it took
    (``book_build_seconds``): what ``bench book`` adds to the chapters' own times."""
    rec = _record_at(run_dir)
    if rec is None:
        raise ParameterError("run_dir", str(run_dir), "a run directory holding run.json")
    rec["book_build_seconds"] = round(seconds, 2)
    _write_record(Path(run_dir), rec)


def _write_record(run_dir: Path, record: dict) -> None:
    """Write ``run.json`` whole (:func:`write_atomic`)."""
    write_atomic(run_dir / "run.json", json.dumps(record, indent=1, default=str))
