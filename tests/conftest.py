"""Shared fixtures: small data sets, and one ci-profile run of every notebook per session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import has_nan, in_ci, tracked_digest  # noqa: F401  (also imported from here)

from datajourney.book import runner, sphinx_ext

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


@pytest.fixture(scope="session")
def tracked_before() -> str:
    return tracked_digest()


@pytest.fixture(scope="session")
def run_book(tracked_before, ci_run) -> Path:
    """The book of a reader's run (ci profile), built with warnings as errors; its html directory."""
    return sphinx_ext.build(ci_run).parent

