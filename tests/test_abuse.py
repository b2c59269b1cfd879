"""Runs, result files and promotions under abuse: tampered run records and result files, markup in
values of a run, a full disk, promotions cut short or run twice at once, odd host names, relative
and non-ASCII paths, YAML's boolean words, racing first use of a data directory, and the
committed notebooks run top to bottom in Jupyter."""
import errno
import fcntl
import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml
from helpers import CH7, file_tree, finished_run, notebook_dir, one_line, small_result

from datajourney.book import registry as chapters
from datajourney.book import report, runner
from datajourney.cli import main
from datajourney.core import files, results
from datajourney.core.params import ParameterError, writable_dir
from datajourney.toolkit import datasets

PY = sys.executable


# --------------------------------------------------------------------------- a finished run, and where promote writes


def _promoted_from(repo: Path) -> set[str]:
    """The run ids the committed files of chapters 6 and 7 come from."""
    ids = {results.Result.load(f).run_id for f in (repo / "data" / "reference" / "h200").glob("0*.json")}
    for nb in (repo / "notebooks").glob("*.ipynb"):
        ids.add(re.search(r"print\('([^']+)'\)", nbformat.read(nb, as_version=4).cells[-1].outputs[0].text).group(1))
    return ids


# --------------------------------------------------------------------------- run records feed nothing but plain values
@pytest.mark.parametrize("params", [
    {"__import__('os').system('touch /tmp/x') or run_dir": None},
    {"steps": "${HOME}", "not_a_parameter": 1},
    {"run_dir": [1, {"a": {"b": 2}}], "steps": {"__class__": "x"}, "x y": 3},
], ids=["code-name", "unknown-name", "name-with-space"])
def test_promote_refuses_parameters_a_chapter_does_not_declare(tmp_path, committed, capsys, params):
    run = finished_run(tmp_path, "r1")
    rec = json.loads((run / "run.json").read_text())
    rec["chapters"][0]["parameters"] = params
    (run / "run.json").write_text(json.dumps(rec))
    assert main(["promote", str(run), "--host", "h200"]) == 2
    one_line(capsys.readouterr().err, "run.json", "07_full_picture's own")
    assert file_tree(committed / "data") == {} and file_tree(committed / "notebooks") == {}


def test_promote_refuses_a_notebook_whose_injected_parameters_are_not_plain(tmp_path, committed, capsys):
    run = finished_run(tmp_path, "r1")
    nb = nbformat.read(run / "notebooks" / f"{CH7}.ipynb", as_version=4)
    nb.metadata["papermill"]["parameters"] = {"run_dir": "/x", "evil = __import__('os'); y": 1}
    nbformat.write(nb, run / "notebooks" / f"{CH7}.ipynb")
    assert main(["promote", str(run), "--host", "h200"]) == 2
    one_line(capsys.readouterr().err, f"{CH7}.ipynb")
    assert file_tree(committed / "notebooks") == {}


def test_book_run_refuses_a_tampered_run_record_before_building(tmp_path, monkeypatch, capsys):
    from datajourney.book import sphinx_ext

    monkeypatch.setattr(sphinx_ext, "build", lambda *a, **k: pytest.fail("the book was built"))
    run = finished_run(tmp_path, "r1")
    rec = json.loads((run / "run.json").read_text())
    rec["chapters"][0]["parameters"]["os.system('id')"] = 1
    (run / "run.json").write_text(json.dumps(rec))
    assert main(["book", "--run", str(run)]) == 2
    one_line(capsys.readouterr().err, str(run / "run.json"))


# --------------------------------------------------------------------------- values of a run are text, not markup
XSS = "<img src=x onerror=alert(1)>"


def _shown(monkeypatch) -> list[str]:
    """What report displays, as HTML or Markdown text."""
    out = []
    monkeypatch.setattr(report, "display", lambda obj: out.append(obj.data))
    return out


def test_parameters_table_escapes_values_of_the_run(monkeypatch):
    shown = _shown(monkeypatch)
    res = results.Result(chapter="02_random_vs_sequential", run_id=f"r{XSS}", fingerprint={},
                         parameters={"data_dir": XSS, "note": "**bold** _x_", f"k{XSS}": 1})
    res.replayed_from = "/x"
    res.fingerprint = {"date_utc": XSS, "software": {"git_commit": "<script>alert(1)</script>"}}
    report.parameters(res)
    text = "\n".join(shown)
    assert "<img" not in text and "<script" not in text, text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text


def test_table_cells_show_angle_brackets_as_written(monkeypatch):
    shown = _shown(monkeypatch)
    report.table(pd.DataFrame([{"check": "Check page faults and /proc/<pid>/io", f"col{XSS}": XSS}]), f"cap{XSS}")
    html = shown[0]
    assert "/proc/&lt;pid&gt;/io" in html and "<img" not in html, html


def test_escape_keeps_markdown_and_html_characters_as_text():
    assert report.escape("/proc/<pid>/io & *a* _b_ `c` [d](e) |") == \
        r"/proc/&lt;pid&gt;/io &amp; \*a\* \_b\_ \`c\` \[d\](e) \|"


# --------------------------------------------------------------------------- a full disk
def _enospc_for(monkeypatch, pattern: str, times: int = 1):
    """``os.write`` fails with ENOSPC for files whose name matches ``pattern`` (the first ``times`` times)."""
    real = os.write
    left = [times]

    def write(fd, data):
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            name = ""
        if left[0] > 0 and re.search(pattern, name):
            left[0] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_write_atomic_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    f = tmp_path / "x.json"
    f.write_text("old")
    _enospc_for(monkeypatch, r"^\.x\.json\.")
    with pytest.raises(OSError) as e:
        files.write_atomic(f, "new" * 1000)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(f)
    assert f.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]
    files.write_atomic(f, "new")
    assert f.read_text() == "new"


def test_result_files_are_0644_under_the_usual_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = small_result("r").save(tmp_path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def _no_temporaries(run_dir: Path) -> None:
    left = [p.name for p in run_dir.rglob("*") if p.name.endswith(".tmp") or ".partial." in p.name]
    assert left == [], left


def test_full_disk_while_publishing_the_notebook_is_one_line_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", "x = 1"))
    _enospc_for(monkeypatch, r"^\.01_introduction\.ipynb\.")
    with pytest.raises(runner.RunError) as e:
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="full", progress=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("chapter 1 (01_introduction.ipynb) failed: could not write "), msg
    run = tmp_path / "res" / "full"
    assert str(run / "notebooks" / "01_introduction.ipynb") in msg and "No space left on device" in msg
    rec = json.loads((run / "run.json").read_text())
    assert rec["status"] == "failed" and "No space left" in rec["chapters"][0]["error"]["evalue"]
    assert not (run / "notebooks" / "01_introduction.ipynb").exists()  # no half notebook
    _no_temporaries(run)


def test_full_disk_while_papermill_writes_leaves_no_truncated_notebook(tmp_path, monkeypatch):
    import papermill.iorw

    real_open = open
    calls = [0]

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()
            return False

        def write(self, buf):
            self.f.write(buf[: len(buf) // 2])
            self.f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fake_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        if "w" in mode and str(path).endswith(".ipynb"):
            calls[0] += 1
            if calls[0] >= 3:  # the first writes fit, then the disk is full
                return Full(f)
        return f

    monkeypatch.setattr(papermill.iorw, "open", fake_open, raising=False)
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", "x = 1", "y = 2"))
    with pytest.raises(runner.RunError) as e:
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="full", progress=False)
    run = tmp_path / "res" / "full"
    msg = str(e.value)
    assert "\n" not in msg and "chapter 1 (01_introduction.ipynb)" in msg, msg
    assert str(run / "notebooks" / "01_introduction.ipynb") in msg and "No space left on device" in msg, msg
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    nb = run / "notebooks" / "01_introduction.ipynb"
    assert not nb.exists() or nbformat.read(nb, as_version=4)
    _no_temporaries(run)


def test_full_disk_in_the_kernel_names_the_result_file(tmp_path, monkeypatch):
    cell = ("import errno, os\nfrom datajourney.core import results\n"
            "os.write = lambda fd, b: (_ for _ in ()).throw(OSError(errno.ENOSPC, 'No space left on device'))\n"
            "results.Result(chapter='01_introduction', run_id='k', parameters={}, fingerprint={}).save(run_dir)")
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", notebook_dir(tmp_path / "nb", cell))
    with pytest.raises(runner.RunError) as e:
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="k", progress=False)
    first = str(e.value).splitlines()[0]
    run = tmp_path / "res" / "k"
    assert first.startswith("chapter 1 (01_introduction.ipynb) failed in cell 2") and \
        str(run / "01_introduction.json") in first and "No space left on device" in first, first
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    _no_temporaries(run)


def test_book_of_a_run_with_a_truncated_notebook_names_the_file(tmp_path, monkeypatch, capsys):
    from datajourney.book import sphinx_ext

    monkeypatch.setattr(sphinx_ext, "build", lambda *a, **k: pytest.fail("the book was built"))
    run = finished_run(tmp_path, "r1")
    nb = run / "notebooks" / f"{CH7}.ipynb"
    nb.write_bytes(nb.read_bytes()[:200])
    assert main(["book", "--run", str(run)]) == 2
    one_line(capsys.readouterr().err, str(nb), "not a notebook")


# --------------------------------------------------------------------------- promote is all or nothing
def test_promote_cut_short_leaves_the_previous_reference(tmp_path, committed, monkeypatch, capsys):
    names = (CH7, "06_pcie")
    assert main(["promote", str(finished_run(tmp_path, "old", names)), "--host", "h200"]) == 0
    before = {**file_tree(committed / "data"), **file_tree(committed / "notebooks")}
    real = os.replace
    count = [0]

    def replace(src, dst):
        if ".promote-" in str(src) and not Path(src).name.startswith(".") and not Path(src).name.startswith("prev"):
            count[0] += 1
            if count[0] == 3:  # the third file of the swap: the disk failed
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert main(["promote", str(finished_run(tmp_path, "new", names, value=2.0)), "--host", "h200"]) == 1
    one_line(capsys.readouterr().err, "promote: could not write", "put back")
    assert {**file_tree(committed / "data"), **file_tree(committed / "notebooks")} == before
    assert not list(committed.rglob(".promote-*"))


def test_promote_on_a_full_disk_changes_nothing_and_names_the_file(tmp_path, committed, monkeypatch, capsys):
    assert main(["promote", str(finished_run(tmp_path, "old")), "--host", "h200"]) == 0
    before = {**file_tree(committed / "data"), **file_tree(committed / "notebooks")}
    _enospc_for(monkeypatch, r"^\.07_full_picture\.ipynb\.")
    assert main(["promote", str(finished_run(tmp_path, "new", value=2.0)), "--host", "h200"]) == 1
    one_line(capsys.readouterr().err, str(committed / "notebooks" / f"{CH7}.ipynb"), "No space left on device")
    assert {**file_tree(committed / "data"), **file_tree(committed / "notebooks")} == before
    assert not list(committed.rglob(".promote-*"))


def test_an_ok_run_missing_a_result_file_is_not_promoted(tmp_path, committed, capsys):
    assert main(["promote", str(finished_run(tmp_path, "old", (CH7, "06_pcie"))), "--host", "h200"]) == 0
    before = {**file_tree(committed / "data"), **file_tree(committed / "notebooks")}
    run = finished_run(tmp_path, "new", (CH7, "06_pcie"))
    (run / "06_pcie.json").unlink()
    assert main(["promote", str(run), "--host", "h200"]) == 2
    one_line(capsys.readouterr().err, "06_pcie has no result file", str(run / "06_pcie.json"))
    assert {**file_tree(committed / "data"), **file_tree(committed / "notebooks")} == before


def test_a_second_promote_waits_for_the_first(tmp_path, committed):
    host = committed / "data" / "reference" / "h200"
    host.mkdir(parents=True)
    fd = os.open(host, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a promote in progress
    done = []
    t = threading.Thread(target=lambda: done.append(runner.promote(finished_run(tmp_path, "b"), "h200")))
    t.start()
    time.sleep(1.0)
    assert not done and not (host / f"{CH7}.json").exists()  # it waits: nothing written meanwhile
    os.close(fd)
    t.join(timeout=30)
    assert done and results.Result.load(host / f"{CH7}.json").run_id == "b"


def test_promotes_at_once_never_mix_two_runs(tmp_path, committed, monkeypatch):
    names = (CH7, "06_pcie")
    runs = [finished_run(tmp_path, f"run{i}", names) for i in range(4)]
    real = files.write_atomic

    def slow(path, data, **kw):  # staging takes a while: the promotes overlap
        time.sleep(0.05)
        return real(path, data, **kw)

    monkeypatch.setattr(runner, "write_atomic", slow)
    threads = [threading.Thread(target=runner.promote, args=(r, "h200")) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(_promoted_from(committed)) == 1


@pytest.mark.parametrize("host", ["../../x", "/abs", "H200", "h 200", "", "-x", "a/b"])
def test_host_is_a_plain_name(tmp_path, committed, capsys, host):
    run = finished_run(tmp_path, "r1")
    for extra in ([], ["--extra"]):
        assert main(["promote", str(run), f"--host={host}", *extra]) == 2
        one_line(capsys.readouterr().err, "'--host'", "a plain host name")
    assert file_tree(committed / "data") == {} and not (tmp_path / "x").exists() and not Path("/abs").exists()


# --------------------------------------------------------------------------- relative paths mean one place
def test_relative_data_dir_is_resolved_once_for_checks_and_kernel(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plans = runner.plan(["2"], "ci", {"data_dir": "reldata"}, tmp_path / "run")
    assert plans[0].parameters["data_dir"] == str(tmp_path / "reldata")
    assert (tmp_path / "reldata").is_dir() and not (chapters.NOTEBOOK_DIR / "reldata").exists()
    assert runner.absolute_paths({"diagnose": "~/x", "n_files": 3, "dataset_path": None}) == {
        "diagnose": str(Path.home() / "x"), "n_files": 3, "dataset_path": None}


# --------------------------------------------------------------------------- result files are checked on load
@pytest.mark.parametrize("edit,field", [
    (lambda d: d["tables"]["t"][0].update(a="NaN"), "tables.t[0].a"),
    (lambda d: d["tables"]["t"][0].update(a="1e308"), "tables.t[0].a"),
    (lambda d: d["tables"]["t"][0].update(MBps=-5.0), "tables.t[0].MBps"),
    (lambda d: d["tables"]["t"][0].update(a=[1, 2]), "tables.t[0].a"),
    (lambda d: d["metadata"].update(x="-Infinity"), "metadata.x"),
    (lambda d: d.update(parameters=[1]), "parameters"),
    (lambda d: d.update(tables={"t": {"a": 1}}), "tables.t"),
    (lambda d: d.pop("run_id"), "run_id"),
], ids=["nan", "huge", "negative-bandwidth", "list-cell", "inf-in-metadata", "parameters-type", "table-type",
        "missing"])
def test_tampered_result_is_one_line_naming_file_and_field(tmp_path, edit, field):
    path = small_result("r").save(tmp_path)
    d = json.loads(path.read_text())
    edit(d)
    text = json.dumps(d)
    for literal in ("NaN", "1e308", "-Infinity"):  # as the literals a tampered file holds
        text = text.replace(f'"{literal}"', literal)
    path.write_text(text)
    with pytest.raises(results.ResultError) as e:
        results.Result.load(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and f"field {field}" in msg, msg


@pytest.mark.parametrize("old", ["datajourney.result/1", "datajourney.result/2"])
def test_older_schemas_are_read_and_saved_as_3(tmp_path, old):
    path = small_result("r").save(tmp_path)
    d = json.loads(path.read_text())
    assert d["schema"] == "datajourney.result/3"
    d["schema"] = old
    path.write_text(json.dumps(d))
    back = results.Result.load(path)
    assert back.to_dict()["schema"] == "datajourney.result/3" and back.table("t")["a"][0] == 1.0
    assert back.facts is None  # an older file has no facts until its chapter analyses it
    assert results._upgrade_v1(d) == {**d, "schema": "datajourney.result/3"}


def test_book_of_a_run_with_a_tampered_result_names_file_and_field(tmp_path, monkeypatch, capsys):
    from datajourney.book import sphinx_ext

    monkeypatch.setattr(sphinx_ext, "build", lambda *a, **k: pytest.fail("the book was built"))
    run = finished_run(tmp_path, "r1")
    path = run / f"{CH7}.json"
    path.write_text(path.read_text().replace('"a": 1.0', '"a": 1e308'))
    assert main(["book", "--run", str(run)]) == 2
    one_line(capsys.readouterr().err, str(path), "tables.t[0].a")


# --------------------------------------------------------------------------- first use of a new data directory, at once
def _first_use(args):
    """One process's first use of the data directory ``d``, on a loaded machine: a look that finds
    nothing there takes a while (so every process looks before any creates it)."""
    d, go = args
    exists = Path.exists

    def slow_exists(self, *a, **k):
        there = exists(self, *a, **k)
        if not there:
            time.sleep(0.05)
        return there

    Path.exists = slow_exists  # in this forked worker only
    while not os.path.exists(go):
        pass
    try:
        writable_dir("data_dir", d)
        datasets.parent_dir(Path(d) / "sub")
        return None
    except ParameterError as e:
        return str(e)


def test_concurrent_first_use_of_a_data_directory_never_fails(tmp_path):
    ctx = multiprocessing.get_context("fork")
    failures = []
    with ctx.Pool(3) as pool:
        for rnd in range(5):
            d, go = tmp_path / f"data{rnd}", tmp_path / f"go{rnd}"
            pending = pool.map_async(_first_use, [(str(d), str(go))] * 3)
            time.sleep(0.2)
            go.touch()
            failures += [f for f in pending.get(timeout=60) if f]
    assert failures == []


# --------------------------------------------------------------------------- YAML booleans, non-ASCII paths
def test_yaml_boolean_words_are_said_in_a_note(capsys):
    assert runner.parse_value("on", "readahead_sysfs") is True
    err = capsys.readouterr().err
    assert "note: -p readahead_sysfs on was read as true" in err and "-p readahead_sysfs \"'on'\"" in err
    assert runner.parse_value("'on'", "readahead_sysfs") == "on" and runner.parse_value("true") is True
    assert capsys.readouterr().err == ""


#: ``python -m datajourney`` with chapter 1's notebook taken from ``argv[1]``: the command line first
#: goes through the restart in UTF-8 mode (which does not return), then the run.
DRIVER = """
import sys
from datajourney import cli
if not sys.flags.utf8_mode:
    cli.main()
from pathlib import Path
from datajourney.book import registry as chapters
chapters.NOTEBOOK_DIR = Path(sys.argv[1])
sys.exit(cli.main(sys.argv[2:]))
"""


def test_non_ascii_path_under_the_c_locale_is_accepted(tmp_path):
    data = tmp_path / "dätä"
    nb = notebook_dir(tmp_path / "nb", "import json, os\nos.makedirs(data_dir)\n"
                                        "open(os.path.join(run_dir, 'seen.json'), 'w').write(json.dumps(data_dir))")
    cell = nbformat.read(nb / "01_introduction.ipynb", as_version=4)
    cell.cells[0].source = "run_dir = None\ndata_dir = None"
    nbformat.write(cell, nb / "01_introduction.ipynb")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    r = subprocess.run([PY, "-c", DRIVER, str(nb), "run", "1", "--profile", "ci", "--quiet", "-p", "data_dir",
                        str(data), "--results", str(tmp_path / "res"), "--run-id", "u"],
                       capture_output=True, env=env)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert json.loads((tmp_path / "res" / "u" / "seen.json").read_text()) == str(data) and data.is_dir()


# --------------------------------------------------------------------------- committed notebooks run in Jupyter
@pytest.mark.notebooks
def test_a_committed_notebook_runs_top_to_bottom_with_the_readers_edits(tmp_path):
    from nbclient import NotebookClient

    ch = chapters.lookup("2")
    copy = tmp_path / ch.notebook.name
    copy.write_bytes(ch.notebook.read_bytes())
    committed = nbformat.read(copy, as_version=4)
    assert not [c for c in committed.cells if "injected-parameters" in c.metadata.get("tags", [])], (
        "a committed notebook still holds papermill's injected cell")
    assert runner.strip_injected(copy) is False   # nothing left to strip
    inject = nbformat.v4.new_code_cell("is_reference_run = True", metadata={"tags": ["injected-parameters"]})
    committed.cells.insert(1, inject)   # as papermill leaves a run's notebook
    nbformat.write(committed, copy)
    assert runner.strip_injected(copy) is True and runner.strip_injected(copy) is False
    nb = nbformat.read(copy, as_version=4)
    assert not [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert nb.metadata["datajourney"]["run_parameters"]["is_reference_run"] is True  # the reference run's values
    edits = {**yaml.safe_load(runner.PROFILES_FILE.read_text())["ci"][ch.name],
             "data_dir": str(tmp_path / "data"), "run_dir": str(tmp_path / "run")}
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    for name, value in edits.items():  # what a reader types into the parameters cell
        cell.source, n = re.subn(rf"(?m)^{name} = .*$", f"{name} = {value!r}", cell.source)
        assert n == 1, name
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    res = results.Result.load(tmp_path / "run" / f"{ch.name}.json")
    assert res.parameters["n_files"] == edits["n_files"] != runner.chapter_parameters(ch)["n_files"]
    assert res.parameters["data_dir"] == str(tmp_path / "data")


# --------------------------------------------------------------------------- --help
def test_help_lists_every_command_on_one_plain_line():
    r = subprocess.run([PY, "-m", "datajourney", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0 and "``" not in r.stdout, r.stdout
    listed = dict(re.findall(r"(?m)^    (\S+)\s{2,}(\S.*)$", r.stdout.split("commands:", 1)[1]))
    for cmd in ("run", "book", "rerender", "promote", "fingerprint", "bench", "chapters"):
        assert cmd in listed, r.stdout
        nxt = r.stdout.split(f"    {cmd} ", 1)[1].split("\n", 2)[1]
        assert re.match(r"^    \S", nxt) or not nxt.strip(), f"{cmd}'s help takes more than one line:\n{r.stdout}"
