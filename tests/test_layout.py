"""The package's shape: one folder per chapter behind one interface, layers that only import down,
and a reorganisation that changed no number."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from datajourney.chapters import registry
from datajourney.core import results
from datajourney.core.paths import REPO_ROOT

SNAPSHOT = json.loads((REPO_ROOT / "tests" / "data" / "reference_findings_h200.json").read_text())["values"]


@pytest.mark.parametrize("chapter", sorted(SNAPSHOT))
def test_reference_key_results_are_those_before_the_reorganisation(chapter):
    """Every key result the pages computed from the committed reference before the chapter folders
    existed is still computed, with the same value."""
    found = {f.key: f.value for f in registry.findings(chapter, results.load_reference(chapter, "h200"))}
    for key, before in SNAPSHOT[chapter].items():
        assert key in found, f"{chapter}: key result {key!r} is gone"
        now = found[key]
        if before is None or (isinstance(now, float) and math.isnan(now)):
            assert now is None or (isinstance(now, float) and math.isnan(now)), (chapter, key, now)
        elif isinstance(before, (int, float)) and not isinstance(before, bool):
            assert now == pytest.approx(before, rel=1e-12), (chapter, key)
        else:
            assert str(now) == str(before), (chapter, key)


def test_import_contracts_hold():
    """import-linter: core <- toolkit <- chapters <- book <- cli, and no chapter imports another."""
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("import-linter is not installed (the test extra installs it)")
    out = subprocess.run([str(exe)], cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_every_chapter_folder_has_the_interface():
    for ch in registry.CHAPTERS:
        folder = registry.CHAPTER_DIR / ch.package.rsplit(".", 1)[-1]
        assert registry.missing_pieces(folder) == [], ch.name
        assert ch.available, f"{ch.name} has no notebook"
    assert [c.number for c in registry.CHAPTERS] == list(range(1, len(registry.CHAPTERS) + 1))
