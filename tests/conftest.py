"""Shared fixtures: small data sets, and one ci-profile run of every notebook per session."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from datajourney.book import runner, sphinx_ext
from datajourney.core.paths import REPO_ROOT

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """A data directory on a real disk (not tmpfs), shared by the session."""
    base = os.environ.get("DATAJOURNEY_TEST_DATA_DIR")
    return Path(base) if base else tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory, data_dir) -> Path:
    """Every written chapter executed under the ci profile, as a reader's run would be."""
    root = tmp_path_factory.mktemp("results")
    return runner.run(profile="ci", overrides={"data_dir": str(data_dir)}, run_id="ci", results_root=root,
                      progress=False)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def tracked_digest() -> str:
    """A digest of the committed book: notebooks, reference results, book configuration."""
    h = hashlib.sha256()
    for p in sorted([*REPO_ROOT.glob("notebooks/*.ipynb"), *REPO_ROOT.glob("data/reference/**/*.json"),
                     REPO_ROOT / "_config.yml", REPO_ROOT / "_toc.yml"]):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="session")
def tracked_before() -> str:
    return tracked_digest()


@pytest.fixture(scope="session")
def run_book(tracked_before, ci_run) -> Path:
    """The book of a reader's run (ci profile), built with warnings as errors; its html directory."""
    return sphinx_ext.build(ci_run).parent


def has_nan(text: str) -> bool:
    """A computed text that printed a missing number ('nan' as a word, not 'NAND')."""
    import re

    return re.search(r"\bnan\b", text, re.I) is not None
