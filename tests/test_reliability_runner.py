"""The runner under concurrency, dead kernels, interrupts and bad input (issue 9, cases 1, 6, 10, 11, 14):
unique run directories, refused run ids, failures that name chapter, notebook and cell, a clean
Ctrl-C that leaves no process behind, one-line errors."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from helpers import DRIVER, notebook_dir, process_gone, terminal_signals

from datajourney.book import registry as chapters
from datajourney.book import runner
from datajourney.core.params import ParameterError

PY = sys.executable


# --------------------------------------------------------------------------- case 1: run directories
def _claim(args):
    target, q = args
    q.put(str(runner._claim(Path(target), False)))


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path):
    target = tmp_path / "20260101-120000-ci"
    with multiprocessing.get_context("fork").Manager() as m:
        q = m.Queue()
        with multiprocessing.get_context("fork").Pool(4) as pool:
            pool.map(_claim, [(str(target), q)] * 4)
        got = sorted(q.get() for _ in range(4))
    assert len(set(got)) == 4 and str(target) in got and str(target) + "-4" in got


def test_two_runs_with_the_same_default_id_keep_their_own_results(tmp_path, monkeypatch):
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", "import os\nprint('pid', os.getpid())"))
    monkeypatch.setattr(runner, "new_run_id", lambda profile: "20260101-120000-ci")
    a = runner.run(["1"], profile="ci", results_root=tmp_path / "res", progress=False)
    b = runner.run(["1"], profile="ci", results_root=tmp_path / "res", progress=False)
    assert a != b and b.name == "20260101-120000-ci-2"
    for d in (a, b):
        rec = json.loads((d / "run.json").read_text())
        assert rec["status"] == "ok" and rec["run_id"] == d.name
        assert rec["chapters"][0]["parameters"]["run_dir"] == str(d)
        assert (d / "notebooks" / "01_introduction.ipynb").exists()


# --------------------------------------------------------------------------- case 10: reused run ids
def test_reused_run_id_is_refused_and_replace_drops_the_old_pages(tmp_path, monkeypatch):
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", "x = 1"))
    old = tmp_path / "res" / "r"
    (old / "notebooks").mkdir(parents=True)
    (old / "run.json").write_text(json.dumps({"run_id": "r", "status": "failed", "chapters": []}))
    (old / "notebooks" / "02_random_vs_sequential.ipynb").write_text("{}")  # a failed chapter of the old run
    with pytest.raises(ParameterError, match="'--run-id'.*already exists.*--replace"):
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="r", progress=False)
    assert (old / "notebooks" / "02_random_vs_sequential.ipynb").exists()  # untouched
    with pytest.raises(ParameterError, match="'-p n_filez'"):  # bad input: the old run is kept
        runner.run(["1"], profile="ci", overrides={"n_filez": -1}, results_root=tmp_path / "res",
                   run_id="r", replace=True, progress=False)
    assert (old / "run.json").exists()
    d = runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="r", replace=True, progress=False)
    assert d == old.resolve()
    assert sorted(p.name for p in (d / "notebooks").iterdir()) == ["01_introduction.ipynb"]
    assert [c["chapter"] for c in json.loads((d / "run.json").read_text())["chapters"]] == ["01_introduction"]
    assert [p.name for p in (tmp_path / "res").iterdir() if p.name.startswith(".")] == []


def test_replace_leaves_a_directory_that_is_not_a_run_alone(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(ParameterError, match="not a run directory"):
        runner._target(tmp_path, "mine", "ci", True)
    with pytest.raises(ParameterError, match="'--run-id'"):
        runner._target(tmp_path, "../escape", "ci", True)


def test_a_run_whose_runner_was_killed_reads_as_interrupted(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"status": "running", "host": os.uname().nodename,
                                                   "pid": 999_999_999, "chapters": []}))
    assert runner.read_record(tmp_path)["status"] == "interrupted"


# --------------------------------------------------------------------------- case 6: dead kernel
def test_dead_kernel_names_chapter_notebook_cell_and_cause(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(
        tmp_path / "nb", "x = 1",
        "import os, signal, subprocess\n"
        "child = subprocess.Popen(['sleep', '120'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "os.kill(os.getpid(), signal.SIGKILL)"))
    with pytest.raises(runner.RunError) as e:
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="dead", progress=False)
    msg = str(e.value)
    assert "chapter 1 (01_introduction.ipynb) failed in cell 3 of the executed notebook" in msg, msg
    assert "the kernel died" in msg and "SIGKILL" in msg, msg
    rec = json.loads((tmp_path / "res" / "dead" / "run.json").read_text())
    assert rec["status"] == "failed"
    err = rec["chapters"][0]["error"]
    assert err["cell"] == 3 and err["ename"] == "DeadKernelError" and err["returncode"] == -signal.SIGKILL
    nb = nbformat.read(tmp_path / "res" / "dead" / "notebooks" / "01_introduction.ipynb", as_version=4)
    assert nb.cells[3].outputs[-1]["ename"] == "DeadKernelError"  # the page shows where it stopped
    kernel, child = map(int, pids.read_text().split())
    deadline = time.monotonic() + 5
    while not process_gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(kernel) and process_gone(child)  # the kernel's child did not outlive it


def test_death_cause_reads_signals_and_oom_counters():
    assert "memory" in runner.death_cause(-9, {"/proc/vmstat oom_kill": 3}, {"/proc/vmstat oom_kill": 4})
    assert "no out-of-memory kill" in runner.death_cause(-9, {"/proc/vmstat oom_kill": 3}, {"/proc/vmstat oom_kill": 3})
    assert "crashed (SIGSEGV)" in runner.death_cause(-11, {}, {})
    assert "exited with status 3" in runner.death_cause(3, {}, {})


# --------------------------------------------------------------------------- Ctrl-C and SIGTERM


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_cleanly_and_leaves_no_process(tmp_path, sig):
    pids, marker = tmp_path / "pids", tmp_path / "finally"
    nb = notebook_dir(tmp_path / "nb", "x = 1",
                   "import os, subprocess, time\n"
                   "child = subprocess.Popen(['sleep', '120'])\n"
                   f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
                   f"try:\n    time.sleep(120)\nfinally:\n    open({str(marker)!r}, 'w').write('cleaned up')")
    p = subprocess.Popen([PY, "-c", DRIVER, str(nb), "run", "1", "--profile", "ci", "--quiet", "--results",
                          str(tmp_path / "res"), "--run-id", "i"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=terminal_signals)
    deadline = time.monotonic() + 60
    while not pids.exists() or not pids.read_text():
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "ZMQError" not in err, err
    assert "interrupted in chapter 1 (01_introduction.ipynb), cell 3" in err and "Kept in" in err, err
    rec = json.loads((tmp_path / "res" / "i" / "run.json").read_text())
    assert rec["status"] == "interrupted" and rec["chapters"][0]["status"] == "interrupted"
    assert marker.read_text() == "cleaned up"  # Ctrl-C or SIGTERM: the cell was interrupted, its clean-up ran
    kernel, child = map(int, pids.read_text().split())
    deadline = time.monotonic() + 5
    while not (process_gone(kernel) and process_gone(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(kernel) and process_gone(child)


# --------------------------------------------------------------------------- case 11, 14: one-line errors
def _one_line_error(rc, err, expected_rc=2, *needles):
    assert rc == expected_rc, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("args,env,needles", [
    (["-p", "data_dir", "[1, 2]"], None, ["'data_dir' = [1, 2]", "a directory path"]),
    (["-p", "data_dir", "5"], None, ["'data_dir' = 5"]),
    ([], {"DATAJOURNEY_DATA_DIR": "/proc/x"}, ["'DATAJOURNEY_DATA_DIR' = '/proc/x'"]),
    (["--results", "/proc/res"], None, ["'--results' = '/proc/res'"]),
    (["-p", "n_files", "[1, 2"], None, ["'-p n_files' = '[1, 2'", "YAML"]),
], ids=["data_dir-list", "data_dir-int", "env-data-dir", "results", "yaml"])
def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys, args, env, needles):
    from datajourney.cli import main

    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    base = ["run", "2", "--profile", "ci", "--quiet"]
    if "--results" not in args:
        base += ["--results", str(tmp_path / "res")]
    if "data_dir" not in args and not env:
        base += ["-p", "data_dir", str(tmp_path / "data")]
    rc = main([*base, *args])
    _one_line_error(rc, capsys.readouterr().err, 2, *needles)
    assert not (tmp_path / "res").exists() or list((tmp_path / "res").iterdir()) == []


@pytest.fixture
def fake_chapter(tmp_path, monkeypatch):
    """Chapter 1 with a module whose checks raise what ``$FAKE_RAISE`` says."""
    (tmp_path / "fakech").mkdir()
    (tmp_path / "fakech" / "__init__.py").write_text("TITLE = 'fake'\n")
    (tmp_path / "fakech" / "params.py").write_text("from datajourney.chapters.c01_introduction.params import Params\n")
    (tmp_path / "fakech" / "experiment.py").write_text(
        "import json, os\n"
        "def preflight(params):\n"
        "    what = os.environ['FAKE_RAISE']\n"
        "    if what == 'json':\n        json.loads(open('/etc/hostname').read())\n"
        "    if what == 'module':\n        import tokenizers_not_here_at_all\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", "x = 1"))
    ch = chapters.Chapter(1, "introduction", "fakech")  # a package with an experiment module
    monkeypatch.setattr(chapters, "CHAPTERS", [ch, *chapters.CHAPTERS[1:]])
    return ch


@pytest.mark.parametrize("what,needle", [
    ("json", "chapter 1 (01_introduction): its checks failed before any work: JSONDecodeError: "),
    ("module", "chapter 1 (01_introduction) needs the Python module 'tokenizers_not_here_at_all', "
               "which is not installed here (pip install tokenizers_not_here_at_all)"),
])
def test_any_failure_of_a_chapter_check_is_one_line(tmp_path, monkeypatch, capsys, fake_chapter, what, needle):
    from datajourney.cli import main

    monkeypatch.setenv("FAKE_RAISE", what)
    rc = main(["run", "1", "--profile", "ci", "--results", str(tmp_path / "res")])
    _one_line_error(rc, capsys.readouterr().err, 2, needle)


def test_missing_papermill_is_one_line(tmp_path):
    code = ("import sys\nsys.modules['papermill'] = None\nfrom datajourney.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run([PY, "-c", code, "run", "2", "--profile", "ci", "--results", str(tmp_path)],
                       capture_output=True, text=True)
    _one_line_error(r.returncode, r.stderr, 2, "the runner needs the Python module 'papermill'")


def test_parameter_of_another_chapter_is_ignored_with_a_note(tmp_path, capsys):
    plans = runner.plan(["1"], "ci", {"n_files": 10}, tmp_path / "r")
    assert "n_files" not in plans[0].parameters
    assert "note: -p n_files is not a parameter of the selected chapters; ignored (chapters 2, 3 use it)" \
        in capsys.readouterr().err
    with pytest.raises(ParameterError, match="'-p n_filez'"):
        runner.plan(["1"], "ci", {"n_filez": 10}, tmp_path / "r")


def test_yaml_syntax_error_is_an_error_not_a_string():
    with pytest.raises(ParameterError, match=r"'-p workers' = '\[0, 4'.*YAML"):
        runner.parse_value("[0, 4", "workers")
    assert runner.parse_value("'[0, 4'") == "[0, 4"


def test_keep_going_runs_the_chapters_after_a_failing_one(tmp_path, monkeypatch):
    """With ``keep_going`` a failing chapter is recorded and the next one still runs; the run ends
    'failed' with one line naming the chapter that failed."""
    nb = notebook_dir(tmp_path / "nb", "raise ValueError('broken on purpose')", name="01_introduction")
    notebook_dir(nb, "x = 1", name="02_random_vs_sequential")
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", nb)
    plans = [runner.Plan(chapters.lookup("1"), {"run_dir": str(tmp_path / "run")}),
             runner.Plan(chapters.lookup("2"), {"run_dir": str(tmp_path / "run")})]
    (tmp_path / "run").mkdir()
    with pytest.raises(runner.RunError, match=r"^1 of 2 chapters failed: 01_introduction;"):
        runner.execute(plans, tmp_path / "run", profile="ci", progress=False, keep_going=True)
    rec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert rec["status"] == "failed"
    assert [c["status"] for c in rec["chapters"]] == ["failed", "ok"]
    assert (tmp_path / "run" / "notebooks" / "02_random_vs_sequential.ipynb").exists()
