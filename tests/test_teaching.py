"""Every chapter teaches before it measures: a hand-written "How it works" section right after its opening,
with a conceptual SVG figure (and a displayed equation where a model predicts), "Try it" exercises that use
the chapter's real parameters, and citations that resolve to the book's bibliography."""
import json
import re
import shlex
import xml.etree.ElementTree as ET

import pytest
import yaml

from datajourney.book import registry, runner, sphinx_ext
from datajourney.chapters import published
from datajourney.core.paths import REPO_ROOT
from datajourney.core.results import Result

CHAPTERS = registry.available()
#: Chapters whose model the page computes, and a term of the equation that must be displayed.
EQUATIONS = {"02_random_vs_sequential": r"\frac{S}{c + S/B}", "04_cpu_starvation": r"\dfrac{D \cdot B}{W} - G",
             "06_pcie": r"\frac{n \cdot r \cdot e}{8}", "08_threads_processes_gil": r"\frac{1}{H + (T - H)/N}",
             "09_reading_smarter": r"\frac{Q}{t}", "11_gpu_to_gpu": r"\frac{2(n-1)}{n}",
             "12_conclusion": r"\min_i r_i", "07_full_picture": r"\frac{S \cdot G}{T}",
             "10_mmap_vs_read": r"B \cdot p", "03_dataloader": r"\frac{1}{t_h}"}
#: Parameters the runner sets itself: never an exercise.
RUNNER_SET = {"run_dir", "is_reference_run", "replay"}
FIGURE = re.compile(r"```\{figure\}\s+(\S+)\n((?::\w+:.*\n)*)")
COMMAND = re.compile(r"`(python -m datajourney run [^`]+)`")
CITE = re.compile(r"\{cite(?::[pt])?\}`([^`]+)`")


def _markdown(ch) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(ch.notebook.read_text())["cells"] if c["cell_type"] == "markdown"]


def _section(ch, heading: str) -> str:
    found = [m for m in _markdown(ch) if re.search(rf"^## {heading}", m, re.M)]
    assert len(found) == 1, f"{ch.name}: {len(found)} sections '## {heading}'"
    return found[0]


def exercises(ch) -> list[dict]:
    """The numbered items of a chapter's "Try it" section: their command's chapter and ``-p`` values."""
    items = re.split(r"^\d+\. ", _section(ch, "Try it"), flags=re.M)[1:]
    out = []
    for item in items:
        cmds = COMMAND.findall(item)
        assert len(cmds) == 1, f"{ch.name}: an exercise without one command: {item[:80]}"
        words = shlex.split(cmds[0])[4:]
        chapters = [w for w in words[:words.index("-p")]] if "-p" in words else words
        pairs = [words[i + 1:i + 3] for i, w in enumerate(words) if w == "-p"]
        out.append(dict(text=item, chapters=chapters,
                        overrides={name: runner.parse_value(value, name) for name, value in pairs}))
    return out


def _prose(text: str) -> str:
    """A section's prose: its figure, displayed equations, label and heading left out."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    return re.sub(r"^\(.*\)=$|^#.*$", "", text, flags=re.M)


@pytest.mark.chapters
@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.name)
def test_mechanism_section_follows_the_opening(ch):
    """The section that explains the mechanism comes right after the page's opening (its findings and What
    to do), is short, and states no measured outcome: no number with a unit a run measures."""
    cells = json.loads(ch.notebook.read_text())["cells"]
    anchor = "front.front_markdown" if ch.name == "01_introduction" else "opening.show(page"
    at = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and anchor in "".join(c["source"]))
    text = "".join(cells[at + 1]["source"])
    assert cells[at + 1]["cell_type"] == "markdown" and re.search(r"^## How it works", text, re.M), ch.name
    words = len(_prose(text).split())
    assert 150 <= words <= 260, (ch.name, words)  # a short read: a reader's time is scarce
    measured = re.findall(r"\d[\d,.]*\s*(?:MB/s|GB/s|img/s|images/s|steps/s|ms|µs|×|%)(?!\w)", _prose(text))
    assert not measured, f"{ch.name}: the mechanism states measured-looking numbers {measured}"


@pytest.mark.chapters
@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.name)
def test_every_chapter_has_a_valid_svg_figure(ch):
    figures = [(m.group(1), m.group(2)) for md in _markdown(ch) for m in FIGURE.finditer(md)]
    svgs = [(p, opts) for p, opts in figures if p.endswith(".svg")]
    assert svgs, f"{ch.name}: no SVG figure"
    for path, opts in svgs:
        f = (ch.notebook.parent / path).resolve()
        assert f.is_file() and f.is_relative_to(REPO_ROOT / "book"), f"{ch.name}: {path} is not in book/"
        root = ET.parse(f).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("viewBox"), path
        assert root.get("viewBox").split()[2] == "800", f"{path}: not drawn for an 800 px column"
        title = root.find("{http://www.w3.org/2000/svg}title")
        assert title is not None and title.text, f"{path}: no <title>"
        assert re.search(r"^:alt: \S", opts, re.M), f"{ch.name}: {path} has no alt text"


@pytest.mark.chapters
def test_figures_share_one_style():
    """One palette and one font: every figure of the book carries the same style sheet."""
    styles = {f.name: ET.parse(f).getroot().find("{http://www.w3.org/2000/svg}style").text
              for f in sorted((REPO_ROOT / "book" / "figures").glob("*.svg"))}
    assert len(styles) >= len(CHAPTERS) and len(set(styles.values())) == 1, sorted(styles)


@pytest.mark.parametrize("name", sorted(EQUATIONS))
def test_a_model_is_shown_as_a_displayed_equation(name):
    text = _section(registry.lookup(name), "How it works")
    shown = re.findall(r"\$\$(.*?)\$\$", text, re.S)
    assert any(EQUATIONS[name] in eq for eq in shown), f"{name}: its model is not displayed"


@pytest.mark.chapters
@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.name)
def test_try_it_exercises_use_the_chapters_parameters(ch, tmp_path):
    """Two or three exercises at the end of the page, each with a prediction to make, what to look for,
    and a command whose ``-p`` names are the chapter's parameters and whose values the runner accepts
    under the laptop profile (``quick``)."""
    cells = json.loads(ch.notebook.read_text())["cells"]
    assert re.search(r"^## Try it", "".join(cells[-1]["source"]), re.M), f"{ch.name}: the page does not end with it"
    items = exercises(ch)
    assert 2 <= len(items) <= 3, (ch.name, len(items))
    params = set(ch.params.defaults())
    knobs = set(runner.chapter_parameters(ch)) - RUNNER_SET
    assert any(set(e["overrides"]) <= params for e in items), f"{ch.name}: no exercise changes one of its Params"
    for e in items:
        assert "*Predict:*" in e["text"] and "*Look for:*" in e["text"], e["text"]
        assert e["chapters"] == [str(ch.number)], e["chapters"]
        assert e["overrides"] and set(e["overrides"]) <= knobs, (ch.name, set(e["overrides"]) - knobs)
        runner.plan(e["chapters"], "quick", e["overrides"], tmp_path / "run")


def _cited_keys(texts) -> set[str]:
    return {k.strip() for t in texts for m in CITE.findall(t) for k in m.split(",")}


def _bib_entries() -> dict[str, str]:
    text = (REPO_ROOT / "book" / "references.bib").read_text()
    return dict(re.findall(r"^@\w+\{([^,\s]+),(.*?)^\}", text, re.M | re.S))


@pytest.mark.chapters
def test_every_citation_resolves_to_a_full_bibliography_entry():
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    assert config["bibtex_bibfiles"] == ["book/references.bib"]
    toc = (REPO_ROOT / "_toc.yml").read_text()
    assert "file: book/bibliography" in toc and "{bibliography}" in (REPO_ROOT / "book" / "bibliography.md").read_text()
    entries = _bib_entries()
    texts = [m for ch in CHAPTERS for m in _markdown(ch)] + [p.read_text() for p in (REPO_ROOT / "book").glob("*.md")]
    cited = _cited_keys(texts)
    assert cited and cited <= set(entries), sorted(cited - set(entries))
    for key, body in entries.items():
        fields = set(re.findall(r"^\s*(\w+)\s*=", body, re.M))
        assert {"title", "year"} <= fields, (key, fields)
        assert fields & {"author", "key"}, f"{key}: no author"
        assert fields & {"url", "publisher", "institution", "howpublished"}, f"{key}: neither a URL nor a venue"


@pytest.mark.chapters
def test_every_source_label_is_explained():
    """Each published source label (S1…S5) is cited on the bibliography page beside its label, and each
    chapter whose published column carries a label cites that source on its page."""
    page = (REPO_ROOT / "book" / "bibliography.md").read_text()
    key_of = {}
    for label in published.SOURCES:
        row = re.search(rf"^\| {label} \|.*\{{cite:p\}}`(\w+)`", page, re.M)
        assert row, f"{label} is not explained on the bibliography page"
        key_of[label] = row.group(1)
    assert set(key_of.values()) <= set(_bib_entries())
    for ch in CHAPTERS:
        labels = {f.source for f in published.figures(ch.name)}
        cited = _cited_keys(_markdown(ch))
        assert {key_of[s] for s in labels} <= cited, f"{ch.name}: cites none of {labels}"


def test_staged_book_keeps_figures_and_bibliography(tmp_path):
    """A reader's run is built from a staged copy: every figure a chapter shows and the bibliography file are
    found there, at the paths the pages and the configuration name."""
    dest = sphinx_ext.stage(tmp_path)
    config = yaml.safe_load((dest / "_config.yml").read_text())
    assert all((dest / b).is_file() for b in config["bibtex_bibfiles"])
    for nb in sorted((dest / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            for m in FIGURE.finditer("".join(cell["source"])):
                assert (nb.parent / m.group(1)).is_file(), f"{nb.name}: {m.group(1)} not staged"


@pytest.mark.notebooks
def test_an_exercise_runs_under_the_ci_profile(tmp_path, data_dir):
    """Chapter 2's first exercise, with its ``-p`` values, runs through the runner and the result records
    the values the reader asked for."""
    ch = registry.lookup("2")
    e = exercises(ch)[0]
    run_dir = runner.run(e["chapters"], profile="ci", overrides={**e["overrides"], "data_dir": str(data_dir)},
                         run_id="try-it", results_root=tmp_path, progress=False)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ok"
    res = Result.load(run_dir / f"{ch.name}.json")
    for name, value in e["overrides"].items():
        assert res.parameters[name] == value, name


def test_equations_are_drawn_as_mathml():
    """The book's equations become MathML while it builds (browsers draw it offline), not MathJax from a CDN."""
    from docutils import nodes

    class Translator:
        body: list = []

    for node, display in ((nodes.math_block("", r"\frac{D \cdot B}{W} - G"), "block"), (nodes.math("", "D"), "inline")):
        with pytest.raises(nodes.SkipNode):
            sphinx_ext._mathml(Translator, node)
        assert f'display="{display}"' in Translator.body[-1] and "<mi>D</mi>" in Translator.body[-1]
    assert "<mfrac>" in Translator.body[0]
    assert yaml.safe_load((REPO_ROOT / "_config.yml").read_text())["sphinx"]["config"]["html_math_renderer"] == "mathml"


def test_a_book_extra_without_the_equation_renderer_is_named(monkeypatch):
    """An environment whose book extra predates the equations gets one line naming what to install."""
    from sphinx.errors import ExtensionError

    monkeypatch.setitem(__import__("sys").modules, "latex2mathml", None)
    with pytest.raises(ExtensionError, match=r"latex2mathml.*pip install -e '\.\[book\]'"):
        sphinx_ext.setup(object())


#: "A unit ÷ B unit = **C": a worked division on a committed page (units: letters, µ, /).
_DIVISION = re.compile(r"(?<![\d.,])(\d[\d,]*(?:\.\d+)?)(?: [A-Za-zµ/]+)? ÷ (\d[\d,]*(?:\.\d+)?)(?: [A-Za-zµ/]+)? = "
                       r"\*\*(\d[\d,]*(?:\.\d+)?)")


def test_worked_divisions_give_their_shown_result_from_their_shown_inputs():
    """A worked answer ("1 ÷ 37.0 µs = **27,027 IOPS**") is checked by a reader with the numbers it shows: the result
    printed is what those inputs give at its printed precision (units may scale it by a power of ten)."""
    import math

    from datajourney.core.units import num

    wrong, seen = [], 0
    for nb in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        text = json.dumps(json.loads(nb.read_text()), ensure_ascii=False)
        for m in _DIVISION.finditer(text):
            a, b, c = m.groups()
            x, y, z = (float(v.replace(",", "")) for v in (a, b, c))
            if not (x and y and z) or any(op in text[m.start() - 3:m.start()] for op in "×/+−(÷"):
                continue   # a part of a longer expression
            seen += 1
            k = round(math.log10(z / (x / y)))
            digits = len(c.split(".")[1]) if "." in c else 0
            got = f"{x / y * 10 ** k:,.{digits}f}" if digits or z < 1000 else num(round(x / y * 10 ** k))
            if got != c:
                wrong.append(f"{nb.name}: {a} ÷ {b} = {c} (the shown inputs give {got})")
    assert seen >= 10, seen
    assert not wrong, wrong
