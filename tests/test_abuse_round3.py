"""Nothing is deleted outside the results, nothing is left running (issue 36, items 2-12): planted sysfs
journals, symbolic links as run ids, processes that outlive a killed runner, altered notebook code in a
promotion, result files that fit no measurement, relative data directories, names with a trailing
newline, notebooks without a parameters cell, unchecked book options, promotions cut short, and the
leftovers of killed runs."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pandas as pd
import psutil
import pytest
from helpers import (
    CH7,
    DRIVER,
    cmdline,
    file_tree,
    finished_run,
    notebook_dir,
    one_line,
    process_gone,
    run_processes,
    terminal_signals,
)

from datajourney.book import registry as chapters
from datajourney.book import runner
from datajourney.cli import main
from datajourney.core import results
from datajourney.core.params import ParameterError
from datajourney.toolkit import datasets, sysfs

PY = sys.executable


# --------------------------------------------------------------------------- item 2: sysfs journals
@pytest.fixture
def fake_sysfs(tmp_path, monkeypatch):
    """A device's read_ahead_kb under a directory standing in for /sys, and a private journal directory."""
    monkeypatch.setenv("DATAJOURNEY_SYSFS_ROOT", str(tmp_path / "sys"))
    f = tmp_path / "sys" / "block" / "sda" / "queue" / "read_ahead_kb"
    f.parent.mkdir(parents=True)
    f.write_text("256\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return f, state


def _plant(state: Path, target, original) -> Path:
    """A journal of a dead run of this boot naming ``target`` and ``original``."""
    j = state / "planted.journal.json"
    j.write_text(json.dumps({"file": str(target), "original": original, "pid": 999_999_999,
                             "pid_started": 0.0, "boot_id": sysfs.boot_id()}))
    return j


def test_a_planted_journal_cannot_write_a_chosen_file(fake_sysfs, tmp_path):
    _, state = fake_sysfs
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    _plant(state, victim, "chosen text")
    done = sysfs.restore_pending(state)
    assert victim.read_text() == "mine\n"
    assert len(done) == 1 and "not a setting this book changes" in done[0]["error"], done
    for name in ("/proc/version", "/sys/block/../../etc/passwd", "/sys/block/sda/queue/scheduler",
                 "/sys/block/sda/queue/read_ahead_kb\n"):
        with pytest.raises(sysfs.SysfsError):
            sysfs.check_setting(name)


@pytest.mark.parametrize("original", ["1; reboot", "-5", "99999999999", "", "4096\n4096", True])
def test_a_journal_value_out_of_range_is_refused(fake_sysfs, original):
    f, state = fake_sysfs
    f.write_text("4096\n")
    _plant(state, f, original)
    done = sysfs.restore_pending(state)
    assert f.read_text() == "4096\n" and done and "not a value of" in done[0]["error"], done


def test_a_journal_directory_open_to_others_is_refused(fake_sysfs, tmp_path):
    f, state = fake_sysfs
    f.write_text("4096\n")
    _plant(state, f, "16")
    os.chmod(state, 0o777)
    with pytest.raises(sysfs.SysfsError, match="others may write it") as e:
        sysfs.restore_pending(state)
    assert "\n" not in str(e.value) and f.read_text() == "4096\n"
    link = tmp_path / "link"
    link.symlink_to(state)
    with pytest.raises(sysfs.SysfsError, match="symbolic link"):
        sysfs.restore_pending(link)
    if os.geteuid() == 0:
        os.chmod(state, 0o700)
        os.chown(state, 65534, 65534)
        with pytest.raises(sysfs.SysfsError, match="belongs to uid 65534"):
            sysfs.restore_pending(state)
        assert f.read_text() == "4096\n"


def test_a_new_journal_directory_is_private(fake_sysfs, tmp_path):
    f, _ = fake_sysfs
    state = tmp_path / "new" / "state"
    old = os.umask(0o022)
    try:
        with sysfs.changed(f, 16, state=state):
            assert os.stat(state).st_mode & 0o777 == 0o700
    finally:
        os.umask(old)
    assert f.read_text() == "256\n"


# --------------------------------------------------------------------------- item 3: symbolic links as run ids
def test_replace_never_follows_a_symlinked_run_id(tmp_path, monkeypatch):
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", "x = 1"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "run.json").write_text(json.dumps({"run_id": "r", "status": "ok", "chapters": []}))
    (outside / "thesis.tex").write_text("precious")
    res = tmp_path / "res"
    res.mkdir()
    (res / "r").symlink_to(outside)
    with pytest.raises(ParameterError, match="symbolic link"):
        runner.run(["1"], profile="ci", results_root=res, run_id="r", replace=True, progress=False)
    assert (outside / "thesis.tex").read_text() == "precious" and (res / "r").is_symlink()


def test_a_dangling_latest_is_repaired(tmp_path, monkeypatch):
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", "x = 1"))
    res = tmp_path / "res"
    a = runner.run(["1"], profile="ci", results_root=res, run_id="a", progress=False)
    (res / "latest").unlink()
    (res / "latest").symlink_to("gone")
    runner.results_dir(res)
    assert os.readlink(res / "latest") == "a" and (res / "latest").resolve() == a


# --------------------------------------------------------------------------- item 4: nothing left running
FORKER = """
import os, sys, time
from datajourney.toolkit import lifetime
assert lifetime.children_die_with_this_process()
pid = os.fork()
if pid == 0:
    time.sleep(120)
    os._exit(0)
print(pid, flush=True)
time.sleep(120)
"""


def test_a_forked_child_dies_with_its_parent():
    p = subprocess.Popen([PY, "-c", FORKER], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while not process_gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = not process_gone(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the forked child outlived its killed parent"


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _killed_runner_leaves_nothing(cmd: list[str], token: str, when, cwd=None) -> list[str]:
    """Start ``cmd`` (a runner), SIGKILL it once ``when(processes of the run)`` holds (or after 120 s), and
    return the processes of the run still there 5 s later, as "pid command line" (killed then, so none is
    left either way). The wait ends early once two looks a little apart find none: a process of the run
    carries the token, so with none left none can start."""
    env = {**os.environ, "DJ_TEST_RUN": token, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=terminal_signals)
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline and not when(p, run_processes(token)):
        time.sleep(0.1)
    p.kill()
    p.wait()
    deadline, empty = time.monotonic() + 5, 0
    while (left := run_processes(token)) or empty < 2:
        empty = 0 if left else empty + 1
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    named = [f"{pid} {cmdline(pid)}" for pid in left]
    _kill_all(left)
    return named


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_kill_9_of_the_runner_leaves_no_kernel_and_no_worker(tmp_path, method):
    """A kernel whose cell has started workers that block, forked (as a DataLoader does: the kernel's fork
    hook asks for their death signal) or spawned by fork + exec (no hook runs in them; the runner's watcher
    kills the kernel's process group, the resource tracker included): kill -9 of the runner, and 5 s later
    neither the kernel nor a worker is left."""
    pids = tmp_path / "pids"
    nb = notebook_dir(tmp_path / "nb",
                   "import multiprocessing as mp, os, time\n"
                   f"ctx = mp.get_context({method!r})\n"
                   "ws = [ctx.Process(target=time.sleep, args=(300,)) for _ in range(2)]\n"
                   "[w.start() for w in ws]\n"
                   f"open({str(pids)!r}, 'w').write(' '.join(str(w.pid) for w in ws))\n"
                   "time.sleep(300)")
    token = f"k9-{method}-{os.getpid()}-{time.time()}"
    cmd = [PY, "-c", DRIVER, str(nb), "run", "1", "--profile", "ci", "--quiet", "--results", str(tmp_path / "res")]
    left = _killed_runner_leaves_nothing(cmd, token, lambda p, procs: pids.exists() and pids.read_text())
    assert pids.exists() and left == [], left


#: Kill points spread over each chapter's ci run (seconds after the runner started: its kernel starting, data
#: generated, workers or ranks running, the page drawn); 12 in all.
KILL_POINTS = {"3": [2, 4, 6, 8], "8": [3, 9, 15, 21], "11": [4, 9, 14, 19]}


@pytest.mark.notebooks
def test_kill_9_of_the_runner_at_12_points_of_chapters_3_8_and_11(tmp_path, data_dir):
    """kill -9 of ``python -m datajourney run`` at points spread over chapters 3, 8 and 11 (ci profile):
    5 s later no process of the run exists (kernel, DataLoader and pool workers, torchrun and its ranks).
    The runs of one chapter go at once, each killed at its own point, to keep the test short."""
    failures = []
    for chapter, points in KILL_POINTS.items():
        threads, found = [], {}
        for at in points:
            token = f"kp-{os.getpid()}-{chapter}-{at}-{time.time()}"
            cmd = [PY, "-m", "datajourney", "run", chapter, "--profile", "ci", "--quiet", "-p", "data_dir",
                   str(data_dir), "--results", str(tmp_path / "res")]

            def one(cmd=cmd, token=token, at=at, found=found):
                t0 = time.monotonic()
                found[at] = _killed_runner_leaves_nothing(cmd, token, lambda p, procs: time.monotonic() - t0 >= at)

            threads.append(threading.Thread(target=one))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=200)
        failures += [f"chapter {chapter}, killed at {at} s: {left}" for at, left in found.items() if left]
    assert failures == []


# --------------------------------------------------------------------------- item 5: promote takes no code from a run
def test_promote_refuses_a_notebook_whose_code_was_altered(tmp_path, committed, capsys):  # noqa: F811
    assert main(["promote", str(finished_run(tmp_path, "old")), "--host", "h200"]) == 0
    before = {**file_tree(committed / "data"), **file_tree(committed / "notebooks")}
    run = finished_run(tmp_path, "new", value=2.0)
    f = run / "notebooks" / f"{CH7}.ipynb"
    nb = nbformat.read(f, as_version=4)
    nb.cells[-1].source = "print(run_id)\nimport os; os.system('touch /tmp/owned')"
    nbformat.write(nb, f)
    assert main(["promote", str(run), "--host", "h200"]) == 2
    one_line(capsys.readouterr().err, "cell 1 (code)", str(f), "os.system")
    assert {**file_tree(committed / "data"), **file_tree(committed / "notebooks")} == before


# --------------------------------------------------------------------------- item 6: numbers that fit a measurement
@pytest.mark.parametrize("rows,field", [
    ([{"MBps": 100.0}, {"MBps": True}], "tables.t[1].MBps"),
    ([{"speedup": 1.5}, {"speedup": True}], "tables.t[1].speedup"),
    ([{"us": -27.5}], "tables.t[0].us"),
    ([{"p50_us": 10.0}, {"p50_us": -1.0}], "tables.t[1].p50_us"),
    ([{"first_batch_s": "fast"}], "tables.t[0].first_batch_s"),
    ([{"read_bytes": -4096}], "tables.t[0].read_bytes"),
], ids=["bool-in-rate", "bool-in-number", "negative-us", "negative-latency", "text-in-seconds", "negative-bytes"])
def test_a_column_holds_its_own_kind_and_range(tmp_path, rows, field):
    res = results.Result(chapter=CH7, run_id="r", parameters={}, fingerprint={})
    res.tables["t"] = pd.DataFrame(rows)
    path = res.save(tmp_path)
    d = json.loads(path.read_text())
    d["tables"]["t"] = rows
    path.write_text(json.dumps(d))
    with pytest.raises(results.ResultError) as e:
        results.Result.load(path)
    assert f"field {field}" in str(e.value) and "\n" not in str(e.value), e.value


def test_differences_may_be_negative_and_nulls_pass(tmp_path):
    res = results.Result(chapter=CH7, run_id="r", parameters={}, fingerprint={})
    res.add("t", pd.DataFrame({"added_ms": [-1.5, 2.0], "d_ms": [-0.1, None], "MBps": [None, 5.0],
                               "worker": [-1, 0], "ok": [True, None]}))
    results.Result.load(res.save(tmp_path))


def _ch2_run(tmp_path: Path, n_run_json: int, n_result: int, tamper=None) -> Path:
    run = tmp_path / "src"
    run.mkdir()
    res = results.Result(chapter="02_random_vs_sequential", run_id="src", parameters={"n_files": n_result},
                         fingerprint={})
    res.add("t", pd.DataFrame({"us": [27.5]}))
    path = res.save(run)
    if tamper:
        path.write_text(path.read_text().replace("27.5", tamper))
    (run / "run.json").write_text(json.dumps({"run_id": "src", "status": "ok", "chapters": [
        {"chapter": "02_random_vs_sequential", "status": "ok", "parameters": {"n_files": n_run_json}}]}))
    return run


def test_rerender_takes_counts_from_the_result_not_the_run_record(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "execute", lambda plans, run_dir, **kw: seen.extend(plans) or {})
    runner.rerender(_ch2_run(tmp_path, 99_999, 200), results_root=tmp_path / "res", progress=False)
    assert seen[0].parameters["n_files"] == 200


def test_rerender_checks_result_files_before_creating_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("a notebook was executed"))
    src = _ch2_run(tmp_path, 200, 200, tamper="-27.5")
    with pytest.raises(results.ResultError, match="tables.t.0..us"):
        runner.rerender(src, results_root=tmp_path / "res", progress=False)
    assert not (tmp_path / "res").exists() or [p.name for p in (tmp_path / "res").iterdir()] == []


# --------------------------------------------------------------------------- item 7: relative DATAJOURNEY_DATA_DIR
def test_a_relative_data_dir_variable_is_made_absolute_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATAJOURNEY_DATA_DIR", "reldata")
    runner.plan(["2"], "ci", {}, tmp_path / "run")
    assert os.environ["DATAJOURNEY_DATA_DIR"] == str(tmp_path / "reldata")
    assert (tmp_path / "reldata").is_dir() and not (chapters.NOTEBOOK_DIR / "reldata").exists()


# --------------------------------------------------------------------------- item 8: no trailing newline in names
def test_names_with_a_trailing_newline_are_refused(tmp_path, committed, capsys):  # noqa: F811
    run = finished_run(tmp_path, "r1")
    assert main(["promote", str(run), "--host", "evil\n"]) == 2
    assert "a plain host name" in capsys.readouterr().err
    assert file_tree(committed / "data") == {}
    with pytest.raises(ParameterError, match="'--run-id'"):
        runner._target(tmp_path, "r\n", "ci", False)
    rec = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**rec, "run_id": "r1\n"}))
    assert main(["promote", str(run), "--host", "h200"]) == 2
    assert "run_id is a plain name" in capsys.readouterr().err


# --------------------------------------------------------------------------- item 9: the parameters cell
def test_a_notebook_without_its_parameters_cell_is_refused(tmp_path, monkeypatch):
    nb_dir = notebook_dir(tmp_path / "nb", "x = 1")
    f = nb_dir / "01_introduction.ipynb"
    nb = nbformat.read(f, as_version=4)
    nb.cells[0].metadata["tags"] = []
    nbformat.write(nb, f)
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", nb_dir)
    with pytest.raises(runner.RunError, match="no cell tagged 'parameters'") as e:
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", progress=False)
    assert "\n" not in str(e.value) and str(f) in str(e.value)
    assert [p.name for p in (tmp_path / "res").iterdir()] == []


# --------------------------------------------------------------------------- item 10: the book's options, up front
@pytest.mark.parametrize("chapter,name,value,needle", [
    ("2", "reference_host", "../../etc", "a host under data/reference/"),
    ("2", "replay", "/etc", "02_random_vs_sequential.json"),
    ("12", "diagnose", "/etc", "other chapters' result files"),
])
def test_book_options_are_checked_before_anything_runs(tmp_path, chapter, name, value, needle):
    with pytest.raises(ParameterError, match=f"'{name}'") as e:
        runner.plan([chapter], "ci", {name: value, "data_dir": str(tmp_path / "d")}, tmp_path / "run")
    assert needle in str(e.value)


def test_as_reference_is_a_plain_host_name(tmp_path, capsys):
    rc = main(["run", "1", "--profile", "ci", "--results", str(tmp_path / "res"), "--as-reference", "../x"])
    assert rc == 2
    one_line(capsys.readouterr().err, "'--as-reference'", "a plain host name")
    assert not (tmp_path / "res").exists() or list((tmp_path / "res").iterdir()) == []


# --------------------------------------------------------------------------- item 11: promotions are atomic
def test_promotes_to_two_hosts_take_turns(tmp_path, committed):  # noqa: F811
    import fcntl

    ref = committed / "data" / "reference"
    ref.mkdir(parents=True)
    fd = os.open(ref, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a promote to another host in progress
    done = []
    t = threading.Thread(target=lambda: done.append(runner.promote(finished_run(tmp_path, "b"), "h100")))
    t.start()
    time.sleep(1.0)
    assert not done and not (committed / "notebooks" / f"{CH7}.ipynb").exists()
    os.close(fd)
    t.join(timeout=30)
    assert done


KILLED_PROMOTE = """
import os, signal, sys
from pathlib import Path
from datajourney.book import runner
from datajourney.book import registry
from datajourney.core import results
repo, run = Path(sys.argv[1]), sys.argv[2]
results.REFERENCE_DIR = repo / "data" / "reference"
registry.NOTEBOOK_DIR = repo / "notebooks"
real, moved = os.replace, []
def replace(src, dst):
    if ".promote-" in str(src) and not Path(src).name.startswith((".", "previous-")):
        moved.append(dst)
        if len(moved) == 2:  # killed half way through the swap
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
os.replace = replace
runner.promote(run, "h200")
"""


def test_a_promote_killed_mid_swap_is_completed_by_the_next(tmp_path, committed):  # noqa: F811
    names = (CH7, "06_pcie")
    runner.promote(finished_run(tmp_path, "old", names), "h200")
    new = finished_run(tmp_path, "new", names, value=2.0)
    r = subprocess.run([PY, "-c", KILLED_PROMOTE, str(committed), str(new)], capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    runner.promote(finished_run(tmp_path, "side", (CH7,)), "h200", side=results.REPEAT_DIR)  # any later promote
    host = committed / "data" / "reference" / "h200"
    assert {results.Result.load(host / f"{n}.json").run_id for n in names} == {"new"}
    shown = {nbformat.read(committed / "notebooks" / f"{n}.ipynb", as_version=4).cells[-1].outputs[0].text
             for n in names}
    assert shown == {"print('new')\n"}
    assert not list(committed.rglob(".promote-*"))


# --------------------------------------------------------------------------- item 12: leftovers
def test_a_run_killed_by_kill_9_is_closed_by_the_next(tmp_path):
    run = tmp_path / "res" / "killed"
    (run / "notebooks").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "killed", "status": "running", "host": os.uname().nodename,
                                              "pid": 999_999_999, "chapters": []}))
    (run / runner.NOTICES_FILE).write_text("waiting for a data set\n")
    cell = nbformat.v4.new_code_cell("x = 1", metadata={"papermill": {"start_time": "2026-01-01T00:00:00"}})
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), run / "notebooks" / ".01_introduction.partial.ipynb")
    runner.results_dir(tmp_path / "res")
    assert [p.name for p in run.rglob(".*")] == []
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    nb = nbformat.read(run / "notebooks" / "01_introduction.ipynb", as_version=4)
    assert nb.cells[0].outputs[-1]["ename"] == "Interrupted"


def test_removing_stale_temporary_data_says_so_with_progress(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(datasets, "PROGRESS_EVERY_S", 0.0)
    tmp = tmp_path / ".tmp-smallfiles-9x9-s0-999999999-abcdef12"
    (tmp / "files").mkdir(parents=True)
    for i in range(50):
        (tmp / "files" / f"{i}.bin").write_bytes(b"x" * 100)
    (tmp / datasets.OWNER).write_text(json.dumps({**datasets.identity(), "pid": 999_999_999, "start": 1}))
    assert datasets.clean_stale(tmp_path) == [tmp.name]
    err = capsys.readouterr().err
    assert not tmp.exists()
    assert err.index(f"removing stale temporary data {tmp}") < err.index("removed so far") < \
        err.index(f"removed stale temporary data {tmp}"), err


def test_a_killed_kernel_that_left_read_ahead_kb_changed_names_the_restore_command(tmp_path, monkeypatch,
                                                                                    fake_sysfs):
    f, state = fake_sysfs
    monkeypatch.setenv("DATAJOURNEY_STATE_DIR", str(state))
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(
        tmp_path / "nb", "import os, signal\nfrom pathlib import Path\nfrom datajourney.toolkit import sysfs\n"
                         f"with sysfs.changed(Path({str(f)!r}), 4096):\n    os.kill(os.getpid(), signal.SIGKILL)"))
    with pytest.raises(runner.RunError) as e:
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="k", progress=False)
    assert f.read_text().strip() == "4096"
    assert str(f) in str(e.value) and "'python -m datajourney restore'" in str(e.value), e.value
    assert sysfs.restore_pending(state)[0]["restored_to"] == "256" and f.read_text() == "256\n"


def test_a_fork_server_and_its_workers_die_with_the_kernel():
    """multiprocessing's fork server is started by fork + exec, so no fork hook reaches it: it and the worker
    it forks must still die when the process that started it is killed (chapter 8 starts one)."""
    import subprocess
    import sys
    import time


    code = ("import multiprocessing as mp, time\n"
            "from datajourney.toolkit import lifetime\n"
            "lifetime.children_die_with_this_process()\n"
            "p = mp.get_context('forkserver').Process(target=time.sleep, args=(60,)); p.start()\n"
            "print('started', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(0.5)
        kids = psutil.Process(proc.pid).children(recursive=True)
        assert any("forkserver" in " ".join(k.cmdline()) for k in kids)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
        if not left:
            break
        time.sleep(0.2)
    for k in kids:
        if k.is_running():
            k.kill()
    assert not left, f"left running 5 s after the kill: {left}"
