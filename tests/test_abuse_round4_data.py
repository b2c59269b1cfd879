"""The data directory and run records (issue 41, reliability round 4): nothing a data directory or a
results folder holds reaches outside it or stops a run with a traceback. Symbolic links planted in the
data directory (also by another user), a data set folder that is a link, two ``--replace`` runs of one
id at once, run records of the wrong type, a truncated stamps cache, a result's own parameters of the
wrong kind, and a data directory that is ``/``, the checkout or the results folder. And, left from round 3:
spawned workers killed while still starting die with the process that started them."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import cmdline, file_tree, finished_run, one_line, run_processes

from datajourney.book import runner, sphinx_ext
from datajourney.cli import main
from datajourney.core import results
from datajourney.core.params import ParameterError
from datajourney.core.paths import REPO_ROOT, RESULTS_ROOT
from datajourney.toolkit import datasets

SET = "smallfiles-4x4096-s0"


def _small(data: Path):
    """A 4-file data set in ``data`` (generated or reused), its lock released."""
    try:
        return datasets.small_files(data, n_files=4, file_size=4096, seed=0, progress=False)
    finally:
        datasets.release(data, SET)


def _victim(d: Path) -> dict:
    """A folder outside the data directory holding someone's files; what it holds."""
    (d / "sub").mkdir(parents=True)
    (d / "thesis.tex").write_text("precious")
    (d / "sub" / "notes.txt").write_text("precious too")
    return file_tree(d)


@pytest.fixture
def shared_data():
    """A data directory every user may write (0777, no sticky bit), as a shared scratch folder is: outside
    pytest's private base folder, so that another user can reach it."""
    d = Path(tempfile.mkdtemp(prefix="dj-shared-data-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _plant_link(target: Path, link: Path) -> None:
    """``link -> target``, made by an unprivileged user (``nobody``) when this test runs as root, as the
    attack of round 4 did; by this user otherwise."""
    if os.geteuid() != 0:
        link.symlink_to(target)
        return
    pid = os.fork()
    if pid == 0:  # the child drops to nobody and plants the link
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.symlink(target, link)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "nobody could not plant the link"
    assert link.lstat().st_uid == 65534


# --------------------------------------------------------------------------- A06: links in the data directory
@pytest.mark.parametrize("name", [f".old-{SET}-deadbeef", f".tmp-{SET}-4000000-cafebabe"])
def test_clean_stale_removes_a_planted_link_never_what_it_points_to(tmp_path, shared_data, name):
    victim = tmp_path / "victim"  # root's private folder, when run as root
    before = _victim(victim)
    victim.chmod(0o700)
    _plant_link(victim, shared_data / name)
    assert datasets.clean_stale(shared_data) == [name]
    assert file_tree(victim) == before
    assert not os.path.lexists(shared_data / name)  # the link itself is gone, as a link


@pytest.mark.parametrize("name", [f".old-{SET}-deadbeef", f".tmp-{SET}-4000000-cafebabe"])
def test_a_run_in_a_shared_data_directory_touches_nothing_outside(tmp_path, shared_data, name):
    """Round 4's attack across users: links planted as temporary data and as the lock file; the run
    that follows (as root) neither empties the target nor creates the lock file's target."""
    victim, made = tmp_path / "victim", tmp_path / "created-by-lock"
    before = _victim(victim)
    _plant_link(victim, shared_data / name)
    with pytest.raises(ParameterError, match=f"lock-{SET}.*symbolic link"):
        _plant_link(made, shared_data / f".lock-{SET}")
        _small(shared_data)
    assert file_tree(victim) == before
    assert not os.path.lexists(made)


def test_a_lock_file_link_creates_nothing_and_is_one_line(tmp_path, capsys):
    data, outside = tmp_path / "data", tmp_path / "created-by-lock"
    data.mkdir()
    (data / f".lock-{SET}").symlink_to(outside)
    with pytest.raises(ParameterError) as e:
        _small(data)
    assert e.value.name == "data_dir" and f".lock-{SET}" in str(e.value) and "\n" not in str(e.value)
    assert not os.path.lexists(outside)
    (outside).write_text("someone's file")  # a link to an existing file: not opened for writing either
    with pytest.raises(ParameterError):
        _small(data)
    assert outside.read_text() == "someone's file"


def test_a_linked_data_set_folder_is_refused_and_never_emptied(tmp_path):
    """A reader who keeps one data set on another disk through a link: refused in one line naming the
    link (data_dir is the way to put data sets elsewhere), twice, and the folder keeps everything."""
    data, elsewhere = tmp_path / "data", tmp_path / "other-disk"
    data.mkdir()
    _small(elsewhere)  # an intact data set, made on the other disk
    before = file_tree(elsewhere / SET)
    (data / SET).symlink_to(elsewhere / SET)
    for _ in range(2):
        with pytest.raises(ParameterError, match=f"{SET} is a symbolic link"):
            _small(data)
        datasets.clean_stale(data)
        assert file_tree(elsewhere / SET) == before
        assert (data / SET).is_symlink()  # never renamed
    name, params, nbytes = datasets.small_files_plan(4, 4096)
    with pytest.raises(ParameterError, match=f"{SET} is a symbolic link"):  # a chapter's preflight says it first
        datasets.check_space(data, [(name, params, nbytes)])


def test_a_link_planted_as_the_data_set_while_it_is_generated_is_never_followed(tmp_path, monkeypatch):
    """The link appears between the checks and the publish: the publish refuses it and leaves its target."""
    data, victim = tmp_path / "data", tmp_path / "victim"
    data.mkdir()
    before = _victim(victim)
    publish = datasets._publish

    def late_link(tmp, final):
        final.symlink_to(victim)
        publish(tmp, final)

    monkeypatch.setattr(datasets, "_publish", late_link)
    with pytest.raises(ParameterError, match="symbolic link"):
        _small(data)
    datasets.clean_stale(data)
    assert file_tree(victim) == before


def test_remove_tree_of_a_link_removes_the_link_only(tmp_path):
    victim = tmp_path / "victim"
    before = _victim(victim)
    (tmp_path / "link").symlink_to(victim)
    datasets._remove_tree(tmp_path / "link")
    assert file_tree(victim) == before and not os.path.lexists(tmp_path / "link")


# --------------------------------------------------------------------------- A12: the stamps cache
def test_a_truncated_stamps_file_is_a_cache_miss(tmp_path):
    ds = _small(tmp_path)
    stamps = ds.root / datasets.STAMPS
    head, _, body = stamps.read_text().partition("\n")
    stamps.write_text(head + "\n" + body.replace("[", "[1, ", 1)[: len(body) // 2])
    stats = {}
    assert datasets.check(ds.root, stats=stats) == []
    assert stats["changed"] == stats["files"]  # every file hashed, as with no stamps at all
    json.loads(stamps.read_text().partition("\n")[2])  # written again, whole
    stamps.write_text(head + "\n" + json.dumps({"not": "a list"}))
    assert datasets.check(ds.root) == []


def test_the_stamps_are_written_through_fsync(tmp_path, monkeypatch):
    ds = _small(tmp_path)
    os.utime(ds.files[0])  # a changed stamp: the stamps are written again
    synced = []
    fsync = os.fsync

    def recording(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    assert datasets.check(ds.root) == []
    assert any(datasets.STAMPS in Path(p).name for p in synced), synced


# --------------------------------------------------------------------------- A15: where data sets may go
@pytest.mark.parametrize("where", ["/", str(REPO_ROOT), str(RESULTS_ROOT), f"{REPO_ROOT}/notebooks/.."],
                         ids=["root", "checkout", "results", "checkout-spelled-otherwise"])
def test_data_dir_is_never_the_root_the_checkout_or_the_results(where):
    with pytest.raises(ParameterError) as e:
        datasets.parent_dir(where)
    assert e.value.name == "data_dir" and "\n" not in str(e.value)


def test_the_environment_data_dir_is_checked_too(monkeypatch):
    monkeypatch.setenv(datasets.DATA_DIR_ENV, "/")
    with pytest.raises(ParameterError, match=datasets.DATA_DIR_ENV):
        datasets.parent_dir(None)


@pytest.mark.parametrize("how", ["-p", "env"])
def test_run_refuses_its_own_results_folder_as_data_dir_before_any_work(tmp_path, capsys, monkeypatch, how):
    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("a notebook was executed"))
    root = tmp_path / "res"
    root.mkdir()
    argv = ["run", "2", "--profile", "ci", "--results", str(root), "--run-id", "x"]
    if how == "-p":
        argv += ["-p", "data_dir", str(root)]
    else:
        monkeypatch.setenv(datasets.DATA_DIR_ENV, str(root))
    assert main(argv) == 2
    one_line(capsys.readouterr().err, "data_dir" if how == "-p" else datasets.DATA_DIR_ENV, str(root))
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == []


# --------------------------------------------------------------------------- A08: two --replace runs of one id
def test_replace_never_deletes_a_run_that_started_meanwhile(tmp_path, capsys):
    """B checked X (a finished run, so it may replace it); meanwhile A replaced X and is running in it:
    B's removal, checked again under the results folder's lock, is a one-line error and deletes nothing."""
    root = tmp_path / "res"
    finished_run(root, "X")
    target, _ = runner._target(root, "X", "ci", True)  # B's early check
    runner._remove_run(target)  # A ...
    live = runner._claim(target, True)  # ... is running in X (its first run.json written with the folder)
    assert runner.read_record(live)["status"] == "running"
    with pytest.raises(ParameterError, match="being written by pid"):
        runner._remove_run(target)
    assert (live / "run.json").exists() and not list(root.glob(".replaced-*"))


RACER = """
import sys, time
from pathlib import Path
from datajourney.book import runner
from datajourney.core.params import ParameterError
root, go = Path(sys.argv[1]), Path(sys.argv[2])
target, _ = runner._target(root, "X", "ci", True)
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
try:  # what run() does once its plan is checked
    if target.exists():
        runner._remove_run(target)
    runner._claim(target, True)
    print("won", flush=True)
    time.sleep(2)  # still running
except ParameterError as e:
    print("lost:", e, flush=True)
"""


@pytest.mark.parametrize("when", ["together", "after-the-first-claimed"])
def test_two_replace_runs_of_one_id_one_wins(tmp_path, when):
    """Two processes replace X, each as run() does, both having checked X while it was a finished run: at
    the same moment, or the second once the first runs in X. One runs in X, the other gets a one-line
    error; never both (round 4: one deleted the other's running run and both went on)."""
    root = tmp_path / "res"
    env = {**os.environ, "PYTHONPATH": str(Path(runner.__file__).parents[2])}
    finished_run(root, "X")
    go = [tmp_path / f"go{k}" for k in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(root), str(g)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for g in go]
    assert [p.stdout.readline() for p in procs] == ["ready\n"] * 2  # both have checked X: a finished run
    go[0].touch()
    if when != "together":
        assert procs[0].stdout.readline() == "won\n"
    go[1].touch()
    outs = [p.communicate(timeout=60) for p in procs]
    said = sorted(o.strip().split(":")[0] for o, _ in outs)
    assert said == (["lost", "won"] if when == "together" else ["", "lost"]), outs  # "": "won" was read above


# --------------------------------------------------------------------------- A01: run records of the wrong type
BAD_RECORDS = {
    "list": [], "string": "x", "number": 5, "not-json": "{\"run_id\": ",
    "chapters-int": {"run_id": "r", "status": "ok", "chapters": 5},
    "chapter-list": {"run_id": "r", "status": "ok", "chapters": [{"chapter": [1], "status": "ok", "parameters": {}}]},
    "pid-1e20": {"run_id": "r", "status": "running", "host": socket.gethostname(), "pid": 10 ** 20, "chapters": []},
}


def _write_record(run: Path, record) -> None:
    text = record if isinstance(record, str) and record.startswith("{") else json.dumps(record)
    (run / "run.json").write_text(text)


@pytest.mark.parametrize("record", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
@pytest.mark.parametrize("cmd", ["book", "rerender", "promote"])
def test_a_run_record_of_the_wrong_type_is_one_line(tmp_path, committed, capsys, monkeypatch, record, cmd):  # noqa: F811
    monkeypatch.setattr(sphinx_ext, "build", lambda *a, **k: pytest.fail("the book was built"))
    run = finished_run(tmp_path, "r")
    _write_record(run, record)
    argv = {"book": ["book", "--run", str(run)], "rerender": ["rerender", str(run), "--results", str(tmp_path / "res")],
            "promote": ["promote", str(run), "--host", "h999"]}[cmd]
    assert main(argv) == 2
    one_line(capsys.readouterr().err, str(run / "run.json"))
    assert file_tree(committed) == {} and file_tree(tmp_path / "res") == {}


@pytest.mark.parametrize("record", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_one_bad_run_record_does_not_stop_later_runs(tmp_path, capsys, record):
    """A damaged run.json beside other runs: every later run there goes on, with a note naming it;
    replacing that run is a one-line error naming it."""
    root = tmp_path / "res"
    finished_run(root, "good")
    _write_record(finished_run(root, "evil"), record)
    (root / "latest").symlink_to("gone")
    assert runner.results_dir(root) == root
    assert os.readlink(root / "latest") == "good"
    assert str(root / "evil" / "run.json") in capsys.readouterr().err
    assert runner._claim(runner._target(root, "next", "ci", False)[0], True) == root / "next"
    with pytest.raises(ParameterError, match="run.json"):
        runner._target(root, "evil", "ci", True)
    assert (root / "evil" / "run.json").exists()


# --------------------------------------------------------------------------- A18: a result's own parameters
def _run_with_parameter(tmp_path: Path, name: str, value) -> Path:
    """A finished run of chapter 3 whose result file records ``name = value`` among its parameters."""
    run = finished_run(tmp_path, "src", names=("03_dataloader",), parameters={})
    f = run / "03_dataloader.json"
    doc = json.loads(f.read_text())
    doc["parameters"][name] = value
    f.write_text(json.dumps(doc))
    return run


@pytest.mark.parametrize("name,value", [("n_files", "many"), ("batch_size", [1, 2]), ("cache_states", ["hot"]),
                                        ("workers", [-1])])
@pytest.mark.parametrize("cmd", ["rerender", "promote --repeat", "promote", "book"])
def test_a_result_whose_parameters_do_not_fit_their_declaration_is_one_line(tmp_path, committed, capsys,  # noqa: F811
                                                                           monkeypatch, name, value, cmd):
    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("a notebook was executed"))
    monkeypatch.setattr(sphinx_ext, "build", lambda *a, **k: pytest.fail("the book was built"))
    run = _run_with_parameter(tmp_path, name, value)
    argv = {"rerender": ["rerender", str(run), "--results", str(tmp_path / "res")],
            "promote --repeat": ["promote", str(run), "--host", "h999", "--repeat"],
            "promote": ["promote", str(run), "--host", "h999"], "book": ["book", "--run", str(run)]}[cmd]
    assert main(argv) == 2
    one_line(capsys.readouterr().err, str(run / "03_dataloader.json"), repr(name))
    assert file_tree(committed) == {} and file_tree(tmp_path / "res") == {}
    assert results.Result.load(run / "03_dataloader.json").parameters[name] == value  # the file was valid otherwise


# --------------------------------------------------------------------------- round 3: spawned workers die with it
SPAWNER = """
import multiprocessing as mp, sys, time
from datajourney.toolkit import lifetime
def work(path):
    open(path, "w").write("running")
    time.sleep(120)
if __name__ == "__main__":
    lifetime.children_die_with_this_process()
    ctx = mp.get_context("spawn")
    first = ctx.Process(target=work, args=(sys.argv[1],))
    first.start()
    while not __import__("os").path.exists(sys.argv[1]):
        time.sleep(0.01)
    ctx.Process(target=work, args=(sys.argv[1] + ".2",)).start()
    print("started", flush=True)  # the second is still starting: no code of its own has run yet
    time.sleep(120)
"""


def test_spawned_workers_and_their_resource_tracker_die_with_a_killed_parent(tmp_path):
    """A process (a kernel) that asked for its children's death (as every kernel does) starts spawned workers
    (chapter 8's start-up sweep) and is killed with -9: one worker running its code, one still starting
    (before any worker_init_fn could ask for a death signal). No runner's watcher is there to kill a process
    group: 2 s later neither worker nor the resource tracker is left."""
    token = f"spawn-{os.getpid()}-{time.time()}"
    env = {**os.environ, "DJ_TEST_RUN": token, "PYTHONPATH": str(Path(runner.__file__).parents[2])}
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path / "running")], stdout=subprocess.PIPE, text=True,
                         env=env, cwd=tmp_path)
    try:
        assert p.stdout.readline() == "started\n"
        started = run_processes(token)
    finally:
        p.kill()
        p.wait()
    time.sleep(2)
    left = [f"{pid} {cmdline(pid)}" for pid in run_processes(token)]
    for pid in run_processes(token):
        os.kill(pid, 9)
    assert len(started) >= 4 and left == [], left  # the parent, two workers and the resource tracker were there
