"""The runner: profiles, parameter checks before any work, clear failures naming notebook and cell."""
import json
import subprocess
import sys

import nbformat
import pytest

from datajourney.book import registry as chapters
from datajourney.book import runner
from datajourney.core.params import ParameterError


@pytest.mark.chapters
def test_every_profile_sets_only_real_parameters():
    profs = runner.profiles()
    assert set(profs) == {"ci", "quick", "full"}
    for ch in chapters.available():
        names = set(runner.chapter_parameters(ch))
        assert {"run_dir", "reference_host", "is_reference_run"} <= names, ch.name
        for prof in profs.values():
            assert set(prof.get(ch.name) or {}) <= names, ch.name


@pytest.mark.chapters
@pytest.mark.parametrize("ch", chapters.available(), ids=lambda c: c.name)
def test_notebook_parameters_cell_holds_the_params_defaults(ch):
    """One default per parameter: the notebook's parameters cell is the chapter's ``Params`` (plus the
    book's options), name for name and value for value."""
    assert runner.notebook_parameters(ch) == runner.chapter_parameters(ch)


def test_a_chapter_folder_missing_a_piece_is_named(tmp_path):
    good = chapters.CHAPTER_DIR / "c02_random_vs_sequential"
    folder = tmp_path / "c13_new_hop"
    folder.mkdir()
    for piece in chapters.PIECES:
        (folder / piece).write_text((good / piece).read_text())
    assert chapters.missing_pieces(folder) == []
    (folder / "params.py").unlink()
    (folder / "analysis.py").unlink()
    with pytest.raises(chapters.ChapterError, match=r"c13_new_hop lacks params.py, analysis.py"):
        chapters.discover(tmp_path)


def test_a_chapter_missing_a_name_of_the_protocol_is_named(monkeypatch):
    """The protocol is checked by attribute: a page without ``opening`` is named, whatever its source says."""
    import sys
    import types

    c = chapters.lookup("2")
    page = types.ModuleType("page")
    page.findings = lambda facts: []
    monkeypatch.setitem(sys.modules, f"{c.package}.page", page)
    assert "page.py: opening" in c.verify()


def test_chapter_lookup():
    assert chapters.lookup("2").slug == chapters.lookup("02_random_vs_sequential").slug == "random_vs_sequential"
    with pytest.raises(KeyError, match="unknown chapter"):
        chapters.lookup("99")


def test_unknown_profile_is_named(tmp_path):
    with pytest.raises(ParameterError, match="'--profile'.*ci, quick, full"):
        runner.plan([], "huge", {}, tmp_path)


def test_unknown_parameter_is_named(tmp_path):
    with pytest.raises(ParameterError, match="'-p n_filez'.*n_files"):
        runner.plan(["2"], "ci", {"n_filez": 3}, tmp_path)


def test_bad_value_fails_before_any_notebook(tmp_path):
    with pytest.raises(ParameterError, match="'n_files'"):
        runner.run(["1", "2"], profile="ci", overrides={"n_files": -1}, results_root=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []  # chapter 1 did not run either


def test_parse_value():
    assert runner.parse_value("[0, 4]") == [0, 4]
    assert runner.parse_value("4") == 4 and runner.parse_value("null") is None
    assert runner.parse_value("fadvise") == "fadvise"


def test_cli_exit_codes(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "datajourney", *args], capture_output=True, text=True)

    r = cli("run", "--profile", "nope", "--results", str(tmp_path))
    assert r.returncode == 2 and "'--profile'" in r.stderr
    r = cli("run", "2", "--profile", "ci", "-p", "chunk_sweep", "[16777216]", "--results", str(tmp_path))
    assert r.returncode == 2 and "'chunk_sweep'" in r.stderr and "shard_size" in r.stderr
    assert cli("chapters").returncode == 0


def test_failing_cell_is_reported(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("raise RuntimeError('disk on fire')"),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    (tmp_path / "nb").mkdir()
    nbformat.write(nb, tmp_path / "nb" / "01_introduction.ipynb")
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", tmp_path / "nb")
    with pytest.raises(runner.RunError) as e:
        runner.run(["1"], profile="ci", results_root=tmp_path / "res", run_id="r", progress=False)
    msg = str(e.value)
    assert "01_introduction.ipynb" in msg and "cell 3 of the executed notebook" in msg and "disk on fire" in msg
    record = json.loads((tmp_path / "res" / "r" / "run.json").read_text())
    assert record["status"] == "failed" and record["chapters"][0]["error"]["cell"] == 3


@pytest.mark.notebooks
def test_a_readers_run_renders_again_with_every_chapter(ci_run, tmp_path):
    """``rerender`` of a reader's run renders every chapter from the stored result files (a CPU host's
    results, with measures it could not take stored as nulls), as the run itself rendered them."""
    out = runner.rerender(ci_run, results_root=tmp_path, progress=False)
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "ok", record
    assert [c["chapter"] for c in record["chapters"]] == [c.name for c in chapters.available()]
    assert all(c["status"] == "ok" for c in record["chapters"]), record["chapters"]


def test_a_misspelled_parameter_gets_did_you_mean_and_no_internal_knobs(tmp_path):
    """`-p worker 2` names `workers`; an unknown name lists only what a reader sets (no replay, run_dir...)."""
    with pytest.raises(ParameterError) as e:
        runner.plan(["3"], "ci", {"worker": 2}, tmp_path)
    assert "did you mean 'workers'?" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ParameterError) as e:
        runner.plan(["3"], "ci", {"zzzq": 2}, tmp_path)
    assert "workers" in str(e.value)
    assert not any(k in str(e.value) for k in ("replay", "is_reference_run", "run_dir"))


def test_a_kernel_drawing_charts_does_not_compile_the_iri_grammar():
    """Every chapter's kernel imports plotly, whose renderers import nbformat and so jsonschema; with the optional
    rfc3987_syntax installed, jsonschema would compile its IRI grammar (seconds of CPU per kernel). Importing the
    package first leaves that module out; nbformat and jsonschema still load."""
    import importlib.util

    if importlib.util.find_spec("rfc3987_syntax") is None:
        pytest.skip("rfc3987_syntax is not installed here: nothing to leave out")
    code = ("import sys, datajourney, plotly.io._renderers; "
            "print(sorted(m for m in ('nbformat', 'jsonschema', 'rfc3987_syntax', 'lark') if sys.modules.get(m)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "['jsonschema', 'nbformat']", out.stdout + out.stderr


def test_bench_puts_its_data_sets_beside_its_run_not_in_its_results_folder(tmp_path, monkeypatch):
    """`python -m datajourney bench` once gave its one temporary folder as both the data folder and the results
    folder, which the run's own check refuses ("a directory for data sets only, not the results folder"), so it
    failed in a second on every machine. The real plan (every chapter, the ci profile) now accepts what it passes."""
    import json

    from datajourney import cli
    from datajourney.book import runner

    seen = {}

    def planned_only(root, target, fixed, replace, plans_for, **how):   # the plan has run, with its checks
        seen["plans"] = plans_for(target)
        target.mkdir(parents=True, exist_ok=True)
        (target / "run.json").write_text(json.dumps({"chapters": []}))
        return target

    monkeypatch.setattr(runner, "_execute_new", planned_only)
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "chapters", "--profile", "ci", "--out", str(out), "--tmp", str(tmp_path)]) == 0
    assert seen["plans"] and json.loads(out.read_text())["seconds"] == {}


def test_bench_book_counts_the_install_as_the_wall_time_left_over_and_refuses_what_no_book_run_wrote(tmp_path,
                                                                                                      capsys):
    """`bench book` records a `./journey book` run: its chapters and book build from run.json (the build time written
    by `run --book` itself), the rest of the command's wall time as install and start-up. A run without a book
    build, or a wall time shorter than the chapters it holds, is a one-line error naming the option."""
    import json

    from datajourney import cli
    from datajourney.book import runner

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "r", "status": "ok", "profile": "quick", "chapters": [
        {"chapter": "01_introduction", "seconds": 4.0, "status": "ok"},
        {"chapter": "02_random_vs_sequential", "seconds": 20.0, "status": "ok"}]}))
    out = tmp_path / "b.json"
    args = ["bench", "book", "--run", str(run), "--out", str(out), "--tmp", str(tmp_path)]
    assert cli.main([*args, "--wall-seconds", "200"]) == 2     # no book build recorded: not a `./journey book` run
    assert "--run" in capsys.readouterr().err and not out.exists()
    runner.note_book_build(run, 6.0)
    assert cli.main([*args, "--wall-seconds", "20"]) == 2      # shorter than its own chapters
    assert "--wall-seconds" in capsys.readouterr().err and not out.exists()
    assert cli.main([*args, "--wall-seconds", "200"]) == 0
    rec = json.loads(out.read_text())
    assert rec["seconds"] == {"01_introduction": 4.0, "02_random_vs_sequential": 20.0}
    assert rec["book_build_seconds"] == 6.0 and rec["total_seconds"] == 200.0
    assert rec["install_and_start_seconds"] == 170.0 and rec["target_total_seconds"] == 600.0
