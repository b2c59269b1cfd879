"""The package's shape: one folder per chapter behind one interface, layers that only import down,
and a reorganisation that changed no number."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from datajourney.book import registry
from datajourney.core import results
from datajourney.core.paths import REPO_ROOT

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

#: The key results the pages of commit da3c797 computed from that commit's committed reference results,
#: on both reference hosts (before the facts layer): the analyses must find the same values in the same files.
BEFORE = json.loads((REPO_ROOT / "tests" / "data" / "reference_findings.json").read_text())
#: Key results the facts layer re-expressed on purpose, (chapter, key) -> (the fact that holds the old value,
#: how: "same" | "inverse" | "ratio_gain" (1 + old %/100) | "ratio_cost" (1 − old %/100) | "fraction" (old %/100)
#: | None where the new fact is a different statistic, named in the comment).
CHANGED: dict[tuple[str, str], tuple[str, str | None]] = {
    ("04_cpu_starvation", "published_w4"): ("published_w", "same"),      # renamed: the case's own W
    ("04_cpu_starvation", "prefetch_balanced"): ("prefetch_balanced", "inverse"),  # deep ÷ shallow, one direction
    ("04_cpu_starvation", "step_drift"): ("step_g", "same"),             # the drift is now a ratio; G kept the ms
    ("04_cpu_starvation", "epoch_boundary"): ("epoch_boundary", None),   # ms of start-up → with ÷ without, ratio
    ("05_padding_tax", "all_samples"): ("all_samples_vs_context", "same"),  # all_samples is against pad-to-longest
    ("05_padding_tax", "measured_cost"): ("packing_vs_context", "inverse"),  # time ratio: packed ÷ pad-to-context
    ("06_pcie", "slowest_path"): ("slowest_path", None),                 # a choice; its ratio is pinned_vs_pageable
    ("06_pcie", "pageable_drop"): ("pageable_drop", None),               # a share of the peak, not a ratio to it
    ("08_threads_processes_gil", "end_to_end"): ("end_to_end", "ratio_gain"),  # % gain → ratio: one convention
    ("08_threads_processes_gil", "cost"): ("cost", "ratio_cost"),        # % saved → ratio of CPU per image
    ("09_reading_smarter", "to_gpu"): ("path.b", "same"),                # to_gpu is the fastest path, sweep included
    ("10_mmap_vs_read", "loader_time"): ("loader_time", "inverse"),      # mmap ÷ read(): "N× faster/slower"
    ("10_mmap_vs_read", "overhead"): ("overhead", None),                 # mean % over runs → ratio of means
    ("10_mmap_vs_read", "checkpoint"): ("checkpoint", "fraction"),       # a share as a fraction
}
_HOW = {"same": lambda v: v, "inverse": lambda v: 1 / v, "ratio_gain": lambda v: 1 + v / 100,
        "ratio_cost": lambda v: 1 - v / 100, "fraction": lambda v: v / 100}


def _old_reference(host: str, chapter: str):
    """The reference result of ``chapter`` as commit ``BEFORE['commit']`` held it (None outside a full clone)."""
    out = subprocess.run(["git", "show", f"{BEFORE['commit']}:data/reference/{host}/{chapter}.json"],
                         cwd=REPO_ROOT, capture_output=True)
    if out.returncode != 0:
        return None
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / f"{chapter}.json"
        f.write_bytes(out.stdout)
        return results.Result.load(f)


@pytest.mark.parametrize("host,chapter", [(h, c) for h, v in BEFORE["values"].items() for c in sorted(v)
                                          if c != "12_conclusion"])
def test_facts_are_the_key_results_before_the_facts_layer(host, chapter):
    """Every key result the pages computed before the facts layer is a fact of the same key and value now,
    from the same result file (chapter 12 diagnoses again and has tests of its own)."""
    res = _old_reference(host, chapter)
    if res is None:
        pytest.skip(f"commit {BEFORE['commit']} is not in this clone (a shallow clone)")
    facts = registry.lookup(chapter).analyse(res)
    for key, before in BEFORE["values"][host][chapter].items():
        if (chapter, key) in CHANGED:
            new, how = CHANGED[(chapter, key)]
            assert new in facts, f"{host} {chapter}: {key!r} is now {new!r}, which has no fact"
            if how is not None and before is not None:
                assert facts[new].number == pytest.approx(_HOW[how](before), rel=1e-9), (host, chapter, key, new)
            continue
        if before is None:  # not measured on that host (e.g. no kvikio): no number now either
            assert key not in facts or facts[key].number is None, (host, chapter, key)
            continue
        assert key in facts, f"{host} {chapter}: key result {key!r} has no fact"
        now = facts[key].value
        if before is None:
            assert facts[key].number is None, (host, chapter, key, now)
        elif isinstance(before, (int, float)) and not isinstance(before, bool):
            assert now == pytest.approx(before, rel=1e-9), (host, chapter, key)
        else:
            assert str(now) == str(before), (host, chapter, key)


def test_import_contracts_hold():
    """import-linter, with the contracts built from the registry: core <- toolkit <- chapters <- book <- cli,
    no chapter imports another, no experiment or analysis imports a page or the phrasing module, and the flow
    runs one way (no analysis ↔ experiment, no page -> experiment, no torch in analyses and pages, no chapter ->
    registry or book)."""
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("import-linter is not installed (the test extra installs it)")
    out = subprocess.run([sys.executable, "-m", "datajourney.book.contracts"], cwd=REPO_ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "8 kept, 0 broken" in out.stdout


def test_contracts_cover_every_chapter_folder():
    """A new chapter folder is in the independence contract without editing a list."""
    from datajourney.book.contracts import config

    text = config()
    for ch in registry.CHAPTERS:
        assert f"    {ch.package}\n" in text


def test_every_chapter_keeps_the_protocol():
    """Each chapter's modules have the protocol's names (checked by attribute, not source text)."""
    for ch in registry.CHAPTERS:
        assert ch.verify() == [], ch.name


def test_every_chapter_folder_has_the_interface():
    for ch in registry.CHAPTERS:
        folder = registry.CHAPTER_DIR / ch.package.rsplit(".", 1)[-1]
        assert registry.missing_pieces(folder) == [], ch.name
        assert ch.available, f"{ch.name} has no notebook"
    assert [c.number for c in registry.CHAPTERS] == list(range(1, len(registry.CHAPTERS) + 1))


def test_parameters_cells_are_generated_from_params():
    """Each notebook's parameters cell is exactly what its chapter's Params declares (one default, one place)."""
    from datajourney.book import cells
    from datajourney.core.params import parameters_cell

    for ch in registry.CHAPTERS:
        assert cells.current(ch) == parameters_cell(ch.params), \
            f"{ch.notebook.name}: run python -m datajourney.book.cells"


def test_every_parameter_is_declared_once():
    """Every Params field is declared with param() (kind, range, help) and nothing else gives a default:
    no `.get(` on parameters in a chapter's experiment, analysis or page."""
    import dataclasses
    import re

    from datajourney.core.params import spec_of

    for ch in registry.CHAPTERS:
        for f in dataclasses.fields(ch.params):
            assert spec_of(f) is not None, f"{ch.name}: {f.name} is not declared with param()"
        folder = registry.CHAPTER_DIR / ch.package.rsplit(".", 1)[-1]
        for py in folder.glob("*.py"):
            text = py.read_text()
            bad = re.findall(r"\b(p|params|q|parameters|res\.parameters)\.get\(", text)
            assert not bad, f"{py.relative_to(REPO_ROOT)}: {len(bad)} fallback default(s) on parameters"


def _committed_results():
    return sorted(p for p in results.REFERENCE_DIR.rglob("[0-9][0-9]_*.json"))


@pytest.mark.parametrize("path", _committed_results(), ids=lambda p: str(p.relative_to(results.REFERENCE_DIR)))
def test_stored_facts_are_what_the_analysis_finds_now(path):
    """A committed result's stored facts are its chapter's analysis of it with this code (stale facts would
    let one page show a number another page recomputes differently): `python -m datajourney.book.analyse
    --force` stores them again after an analysis changed."""
    res = results.Result.load(path)
    if res.facts is None:
        pytest.skip("no stored facts: analysed on load")
    now = results._clean(registry.lookup(res.chapter).analyse(res).to_dict())
    assert json.loads(json.dumps(now)) == json.loads(json.dumps(results._clean(res.facts.to_dict())))


#: The project's limit on a function's length, in lines from its ``def`` to its last line.
MAX_FUNCTION_LINES = 120


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:function:length`` of every function (nested ones and methods too) under ``root`` longer than
    ``limit`` lines."""
    import ast

    out = []
    for py in sorted(root.rglob("*.py")):
        for n in ast.walk(ast.parse(py.read_text(), filename=str(py))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit:
                out.append(f"{py.relative_to(root.parent)}:{n.name}:{n.end_lineno - n.lineno + 1}")
    return out


def test_no_function_in_the_package_is_over_the_limit():
    """No function in datajourney/ is longer than MAX_FUNCTION_LINES: a longer one is split into one helper
    per part it does."""
    assert long_functions(REPO_ROOT / "datajourney") == []


def test_the_length_check_counts_from_def_to_the_last_line(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(f"def fits():\n{body}\n\nclass C:\n    def over(self):\n"
                                           + body.replace("    ", "        ") + "        return 1\n")
    assert long_functions(tmp_path / "pkg") == [f"pkg/m.py:over:{MAX_FUNCTION_LINES + 1}"]
