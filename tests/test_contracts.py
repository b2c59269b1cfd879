"""The import contracts of the one-way flow (experiment → result → analysis → facts → page) can fail: a
violation of each is planted in a copy of the package, and lint-imports must report that contract broken
for the planted import, while the package itself keeps every contract. The registry the contracts are built
from lives in book/ and loads no chapter when imported."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from datajourney.book import contracts, registry
from datajourney.core.paths import REPO_ROOT

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

#: contract name -> [(a module of the package, the import planted in it, what lint-imports must report)]
PLANTED = {
    "An analysis reads a result, never its experiment": [(
        "chapters/c07_full_picture/analysis.py", "from datajourney.chapters.c07_full_picture import experiment",
        "datajourney.chapters.c07_full_picture.analysis is not allowed to import "
        "datajourney.chapters.c07_full_picture.experiment")],
    "An experiment only measures: it never imports an analysis (the harness analyses)": [(
        "chapters/c02_random_vs_sequential/experiment.py",
        "from datajourney.chapters.c02_random_vs_sequential import analysis",
        "datajourney.chapters.c02_random_vs_sequential.experiment is not allowed to import "
        "datajourney.chapters.c02_random_vs_sequential.analysis")],
    "A page words facts and never imports an experiment": [(
        "chapters/c11_gpu_to_gpu/page.py", "from datajourney.chapters.c11_gpu_to_gpu import experiment",
        "datajourney.chapters.c11_gpu_to_gpu.page is not allowed to import "
        "datajourney.chapters.c11_gpu_to_gpu.experiment")],
    "Analyses and pages read results without torch": [
        ("chapters/c10_mmap_vs_read/analysis.py", "import torch",
         "datajourney.chapters.c10_mmap_vs_read.analysis is not allowed to import torch"),
        ("chapters/c05_padding_tax/page.py", "import torch",
         "datajourney.chapters.c05_padding_tax.page is not allowed to import torch")],
    "No chapter imports the registry or anything in book/ (other chapters are read through exported facts)": [
        ("chapters/c12_conclusion/page.py", "from datajourney.book.registry import lookup",
         "datajourney.chapters.c12_conclusion.page -> datajourney.book.registry"),
        ("chapters/common.py", "from datajourney.book import harness",
         "datajourney.chapters.common -> datajourney.book.harness")],
}

needs_linter = pytest.mark.skipif(not Path(sys.executable).with_name("lint-imports").exists(),
                                  reason="import-linter is not installed (the test extra installs it)")


def _flat(text: str) -> str:
    """lint-imports' report with its line wrapping (and so every space) taken out."""
    return "".join(text.split())


@needs_linter
def test_the_package_keeps_every_contract():
    out = contracts.lint()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert f"{len(contracts.config().split('[importlinter:contract:')) - 1} kept, 0 broken" in out.stdout


@needs_linter
def test_each_one_way_contract_fails_on_a_planted_import(tmp_path):
    shutil.copytree(REPO_ROOT / "datajourney", tmp_path / "datajourney",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for module, line, _ in (p for planted in PLANTED.values() for p in planted):
        f = tmp_path / "datajourney" / module
        f.write_text(f.read_text() + f"\n{line}  # noqa\n")
    out = contracts.lint(tmp_path)
    report = _flat(out.stdout)
    assert out.returncode != 0, report[-3000:]
    for name, planted in PLANTED.items():
        assert _flat(f"{name} BROKEN") in report, name
        for _, _, says in planted:
            assert _flat(says) in report, says


def test_every_contract_has_a_planted_violation():
    """Each contract of the one-way flow, the registry's and torch's is planted above (a new one needs its plant)."""
    names = {line.split("=", 1)[1].strip() for line in contracts.config().splitlines() if line.startswith("name =")}
    one_way = {n for n in names if not n.startswith(("Layers", "Chapters are independent", "Experiments and"))}
    assert one_way == set(PLANTED)


def test_importing_the_registry_loads_no_chapter():
    """The registry finds the chapters by their folders; a chapter's modules load only when asked for."""
    code = ("import sys; from datajourney.book import registry; "
            "assert len(registry.CHAPTERS) >= 12; "
            "print(sorted(m for m in sys.modules if m.startswith('datajourney.chapters.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert registry.lookup("7").title == "The full picture" and registry.lookup("7").measures
