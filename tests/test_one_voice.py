"""One fact, one value, one phrasing: the facts and advice a page shows are the ones its chapter's
analysis computed, and wherever a second page shows them (chapter 12, its checklist, the front page, the
command-line summary) they are the same object worded the same way. Reader text carries no Python
literals, raw column names, e-notation or acceptance-target words, and every snippet compiles."""
import ast
import importlib
import re

import pytest

from datajourney.book import harness, registry
from datajourney.chapters import wording
from datajourney.chapters.c07_full_picture import page as c7page
from datajourney.chapters.c12_conclusion import analysis as c12
from datajourney.chapters.c12_conclusion import page as c12page
from datajourney.core import phrasing, results

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

HOSTS = results.reference_hosts()
MEASURED = [c for c in registry.CHAPTERS if c.name != c12.CHAPTER]


def _facts(host):
    out = {}
    for c in MEASURED:
        r = results.load_reference(c.name, host)
        if r is not None:
            out[c.name] = registry.analysed(r).facts
    return out


@pytest.fixture(scope="module", params=HOSTS)
def diagnosed(request, tmp_path_factory):
    """The reference results of one host with their facts, and chapter 12's diagnosis of them."""
    d = tmp_path_factory.mktemp(request.param)
    for c in MEASURED:
        r = results.load_reference(c.name, request.param)
        if r is not None:
            registry.analysed(r).save(d)
    return request.param, _facts(request.param), harness.run("12_conclusion", run_dir=d, llm_tokens_per_s=1e6)


def test_each_piece_of_advice_comes_from_one_chapter():
    """A question ("how many workers for this workload?") has one answer: its advice key is given by
    one chapter only, the one that measured that workload."""
    for host in HOSTS:
        owner = {}
        for ch, facts in _facts(host).items():
            for a in facts.advice:
                assert owner.setdefault(a.key, ch) == ch, f"{a.key} advised by {owner[a.key]} and {ch}"


def test_chapter_12_words_the_remedy_as_its_chapter_does(diagnosed):
    host, found, res = diagnosed
    for wl in c12.UNITS:
        copy = res.facts.advice_for(f"{wl}.remedy")
        if copy is None:
            continue
        src_chapter = c12.REMEDY[(wl, res.facts.data[f"{wl}.weakest"]["key"])][0]
        src = next(a for a in found[src_chapter].advice if a.knob == copy.knob and a.workload == copy.workload)
        assert phrasing.advice(copy, res.facts) == phrasing.advice(src, found[src_chapter]), (host, wl)
        # verdict first, the workload after it: the same words as the chapter's advice (for images, chapter 7's
        # combined recipe where it exports one, worded by the one function chapter 7's page words it with); the
        # data-parallel step's in its own section
        recipe = res.facts.get("07.recipe") if wl == "image" else None
        said = wording.recipe_sentence(res.facts, c12page.RECIPE_KEY) if recipe is not None else \
            c12page.verdict_first(copy, res.facts)
        shown = [a.text for a in c12page.opening(res.facts).actions] + [c12page.data_parallel_answer(res.facts)]
        assert said in "\n".join(shown), (host, wl)
        if recipe is not None:   # chapter 7's page says the same sentence of the same fact
            c7 = found["07_full_picture"]
            assert wording.recipe_sentence(c7) in "\n".join(a.text for a in c7page.opening(c7).actions)
            assert wording.recipe_sentence(c7).replace(phrasing.comparison(c7["recipe"], c7), "") == \
                said.replace(phrasing.comparison(recipe, res.facts), "")


def test_checklist_and_front_page_show_each_chapters_own_fact(diagnosed):
    host, found, res = diagnosed
    for ch, key in c12.CHECKLIST:
        if key.startswith(c12.QUESTION) and ch in found and found[ch].advice_for(key[1:]) is not None:
            a, copy = found[ch].advice_for(key[1:]), res.facts.advice_for(f"{ch[:2]}.{key[1:]}")
            assert phrasing.verdict(copy, res.facts) == phrasing.verdict(a, found[ch]), (host, ch, key)
            continue
        if ch not in found or key not in found[ch]:
            continue
        mine, theirs = res.facts[f"{ch[:2]}.{key}"], found[ch][key]
        assert mine.value == theirs.value and phrasing.headline(mine) == phrasing.headline(theirs), (host, ch, key)
    if host == results.DEFAULT_REFERENCE_HOST:
        from datajourney.book import overview

        table = overview.front_table(host=host)
        firsts = table.drop_duplicates("chapter", keep="first")   # a chapter's own key number comes first
        for (ch, head, _), shown in zip(overview.front(), firsts["reference host"], strict=True):
            key = overview.headline_key(ch, found.get(ch), head)
            f = found[ch].get(key) if ch in found and key else None
            if f is not None and f.number is not None:
                assert shown.split(overview.FLIPPED)[0] == overview.comparand(f, found[ch])[1], (ch, key)


LEAKS = {
    "a Python literal": re.compile(r"(?<![`\w])(True|False|None)(?![`\w])"),
    "e-notation": re.compile(r"\b\d\.\d+e[+-]\d+\b"),
    "a raw column name": re.compile(r"\b(busbw_GBps|algbw_GBps|time_ms|images_per_s|MBps)\b"),
    "acceptance-target wording": re.compile(r"\b(the target is|% target|target at (most|least)|: met\b)"),
    "a byte count": re.compile(r"\b\d{1,3}(,\d{3}){2,} (bytes|B)\b"),
}


def _texts(host):
    for ch, facts in _facts(host).items():
        page = importlib.import_module(registry.lookup(ch).page)
        op = page.opening(facts)
        for f in [*op.findings, *page.findings(facts)]:
            yield ch, f.text
        for a in op.actions:
            yield ch, a.text


@pytest.mark.parametrize("host", HOSTS)
def test_reader_text_has_no_leaks(host):
    for ch, text in _texts(host):
        plain = re.sub(r"`[^`]*`", "", text)  # code spans show values as a reader types them
        for what, pat in LEAKS.items():
            assert not pat.search(plain), f"{host} {ch} shows {what}: {text}"


@pytest.mark.parametrize("host", HOSTS)
def test_openings_are_short(host):
    from datajourney.core.phrasing import OPENING_FINDINGS, OPENING_WORDS, words

    for ch, facts in _facts(host).items():
        op = importlib.import_module(registry.lookup(ch).page).opening(facts)
        assert len(op.findings) <= OPENING_FINDINGS, ch
        assert 1 <= len(op.actions) <= 3 or ch == "01_introduction", ch
        for f in op.findings:
            assert words(f.text) <= OPENING_WORDS + 10, (ch, f.text)


def _snippets():
    for host in HOSTS:
        for ch, facts in _facts(host).items():
            op = importlib.import_module(registry.lookup(ch).page).opening(facts)
            for a in [*op.actions]:
                if a.snippet:
                    yield host, ch, a.snippet
            for a in facts.advice:
                if a.snippet:
                    yield host, ch, a.snippet


def test_every_snippet_compiles_and_its_imports_resolve():
    """What a reader copies must parse, and every module it imports from this book exists (a third-party
    module is checked where it is installed)."""
    import importlib.util

    seen = 0
    for host, ch, snippet in _snippets():
        tree = ast.parse(snippet)  # a SyntaxError fails the test with the snippet
        seen += 1
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [n.name for n in node.names]
                for name in names:
                    top = name.split(".")[0]
                    if top == "datajourney" or importlib.util.find_spec(top) is not None:
                        assert importlib.util.find_spec(name) is not None, (host, ch, name, snippet)
    assert seen > 0
