"""Adding a chapter is one folder, one notebook and one line of the table of contents (the README's
recipe: ``python -m datajourney.book.scaffold``), and the suite's checks of the chapter protocol, the
import contracts and the parameters cells pass for it without editing a test."""
import os
import shutil
import subprocess
import sys

import pytest

from datajourney.core.paths import REPO_ROOT


@pytest.fixture(scope="module")
def copy_with_chapter_13(tmp_path_factory):
    """A copy of this checkout (its tracked and new files) with chapter 13 added by the scaffold."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    root = tmp_path_factory.mktemp("checkout")
    for f in files:
        src = REPO_ROOT / f
        if f and src.is_file() and not f.startswith("data/reference/"):
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / f)
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-m", "datajourney.book.scaffold", "13", "sums", "Summing a list"],
                    cwd=root, env=env, check=True, capture_output=True)
    return root, env


def test_the_new_chapter_is_found_and_keeps_the_protocol(copy_with_chapter_13):
    root, env = copy_with_chapter_13
    assert (root / "notebooks" / "13_sums.ipynb").is_file()
    assert "notebooks/13_sums" in (root / "_toc.yml").read_text()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_layout.py",
                          "-k", "protocol or contracts or parameters_cells or declared or interface"],
                         cwd=root, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]


def test_the_new_chapter_runs_and_opens_with_its_facts(copy_with_chapter_13, tmp_path):
    root, env = copy_with_chapter_13
    out = subprocess.run([sys.executable, "-m", "datajourney", "run", "13", "--profile", "ci", "--results",
                          str(tmp_path), "--run-id", "t13", "--quiet"], cwd=root, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = (tmp_path / "t13" / "notebooks" / "13_sums.ipynb").read_text()
    assert "Summing a list ran at" in text and "integers/s" in text
