"""The import contracts of the one-way flow (experiment → result → analysis → facts → page) can fail: a
violation of each is planted in a copy of the package, and lint-imports must report that contract broken
for the planted import, while the package itself keeps every contract."""
import shutil
import sys
from pathlib import Path

import pytest

from datajourney.book import contracts
from datajourney.core.paths import REPO_ROOT

#: contract name -> (a module of the package, the import planted in it, what lint-imports must report)
PLANTED = {
    "An analysis reads a result, never its experiment": (
        "chapters/c07_full_picture/analysis.py", "from datajourney.chapters.c07_full_picture import experiment",
        "datajourney.chapters.c07_full_picture.analysis is not allowed to import "
        "datajourney.chapters.c07_full_picture.experiment"),
    "An experiment only measures: it never imports an analysis (the harness analyses)": (
        "chapters/c02_random_vs_sequential/experiment.py",
        "from datajourney.chapters.c02_random_vs_sequential import analysis",
        "datajourney.chapters.c02_random_vs_sequential.experiment is not allowed to import "
        "datajourney.chapters.c02_random_vs_sequential.analysis"),
    "A page words facts and never imports an experiment": (
        "chapters/c11_gpu_to_gpu/page.py", "from datajourney.chapters.c11_gpu_to_gpu import experiment",
        "datajourney.chapters.c11_gpu_to_gpu.page is not allowed to import "
        "datajourney.chapters.c11_gpu_to_gpu.experiment"),
    "Analyses and pages read results without torch": (
        "chapters/c10_mmap_vs_read/analysis.py", "import torch",
        "datajourney.chapters.c10_mmap_vs_read.analysis is not allowed to import torch"),
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
    for module, line, _ in PLANTED.values():
        f = tmp_path / "datajourney" / module
        f.write_text(f.read_text() + f"\n{line}  # noqa\n")
    out = contracts.lint(tmp_path)
    report = _flat(out.stdout)
    assert out.returncode != 0, report[-3000:]
    for name, (_, _, says) in PLANTED.items():
        assert _flat(f"{name} BROKEN") in report, name
        assert _flat(says) in report, says
