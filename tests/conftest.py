"""Shared fixtures: small data sets, and one ci-profile run of every notebook per session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import has_nan, in_ci, tracked_digest  # noqa: F401  (also imported from here)

from datajourney.book import registry as chapters
from datajourney.book import runner, sphinx_ext
from datajourney.core import results

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


@pytest.fixture
def committed(tmp_path, monkeypatch) -> Path:
    """Promotions go to ``tmp/repo/data/reference`` and ``tmp/repo/notebooks``; returns ``tmp/repo``."""
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    monkeypatch.setattr(results, "REFERENCE_DIR", repo / "data" / "reference")
    monkeypatch.setattr(chapters, "NOTEBOOK_DIR", repo / "notebooks")
    return repo


@pytest.fixture(scope="session")
def tracked_before() -> str:
    return tracked_digest()


@pytest.fixture(scope="session")
def run_book(tracked_before, ci_run) -> Path:
    """The book of a reader's run (ci profile), built with warnings as errors; its html directory."""
    return sphinx_ext.build(ci_run).parent


@pytest.fixture(scope="session")
def reference_book(tmp_path_factory) -> Path:
    """The committed reference book, built with warnings as errors, once a session; its html directory."""
    return sphinx_ext.build(None, path_output=tmp_path_factory.mktemp("reference-book")).parent



#: The session fixtures that take minutes. Their tests run first and, under pytest-xdist (``./journey test``), in
#: one worker: each is made once a session while the other worker runs the rest. (test_browser's ``book_html``
#: asks for one of the books by name when it runs, so it is named here too.)
SHARED = ("ci_run", "run_book", "reference_book", "book_html")
TESTS = Path(__file__).resolve().parent


def _shared(item) -> bool:
    return bool(set(SHARED) & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config, items):
    """The shared runs' tests first, then the other tests that run chapters end to end (marked ``notebooks``: a
    minute or more each), then the rest, each part in its order: the other worker starts on the long runs, and
    what is left for the end of the session, when a worker waits for the other, is short."""
    items.sort(key=lambda i: (not _shared(i), i.get_closest_marker("notebooks") is None))


def pytest_xdist_make_scheduler(config, log):
    """Every test of a file that names a shared fixture in one unit of work (one worker), each other test its own
    (xdist's --dist loadgroup cannot group by fixture: the scheduler sees test ids only)."""
    import re

    from xdist.scheduler import LoadScopeScheduling

    names = re.compile(r"\b(" + "|".join(SHARED) + r")\b")
    files = {p.name for p in TESTS.glob("test_*.py") if names.search(p.read_text())}

    class SharedRunsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return "shared-runs" if nodeid.split("::", 1)[0].rsplit("/", 1)[-1] in files else nodeid

    return SharedRunsTogether(config, log)
