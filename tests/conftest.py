"""Shared fixtures: small data sets, and one ci-profile run of every notebook per session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import has_nan, in_ci, tracked_digest  # noqa: F401  (also imported from here)
from tempcheck import pytest_sessionfinish, pytest_sessionstart  # noqa: F401  (what a session leaves in the temp folder)

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



#: The session fixtures that take minutes, and the group of the tests that use each. Under pytest-xdist
#: (``./journey test``; ``--dist loadgroup`` is in pyproject's addopts) a group runs in one worker, so each is made
#: once a session, and the two groups go to different workers. test_browser's ``book_html`` asks for one of the
#: books by its parameter, so its tests go by that.
SHARED = {"ci_run": "ci-run", "run_book": "ci-run", "reference_book": "reference-book"}
BOOK_HTML = {"reader's run": "ci-run", "reference": "reference-book"}


def _group(item) -> str | None:
    """The xdist group ``item`` runs in: a shared session fixture's, else its file's when it uses a module-scoped
    fixture of its own file (made once, not once in each worker), else none (the test goes wherever a worker is
    free)."""
    names = getattr(item, "fixturenames", ())
    for name, group in SHARED.items():
        if name in names:
            return group
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("book_html") in BOOK_HTML:
        return BOOK_HTML[callspec.params["book_html"]]
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::", 1)[0]
    for defs in (info.name2fixturedefs.values() if info else ()):
        if defs and defs[-1].scope == "module" and defs[-1].baseid == module:
            return module
    return None


def _rank(item) -> tuple[int, int]:
    """Where ``item`` goes in the session: the shared runs' groups first (their worker starts on them at once),
    then the other groups and the tests that run chapters end to end (marked ``notebooks``: a minute or more
    each), then the rest."""
    mark = item.get_closest_marker("xdist_group")
    group = mark.args[0] if mark else None
    order = list(dict.fromkeys(SHARED.values()))
    if group in order:
        return 0, order.index(group)
    return (1 if group or item.get_closest_marker("notebooks") else 2), 0


@pytest.hookimpl(tryfirst=True)   # before xdist's worker appends each test's group to its id
def pytest_collection_modifyitems(config, items):
    """Each test's group (:func:`_group`) as its ``xdist_group`` mark, and the tests in the order of
    :func:`_rank` (``--no-loadscope-reorder`` keeps it): the workers start on the long runs, and what is left
    for the end of the session, when a worker waits for the other, is short."""
    for item in items:
        group = _group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            if getattr(config.option, "loadgroup", False) and hasattr(item, "_id"):   # an xdist worker
                _in_group(item, group)
    items.sort(key=_rank)


def _in_group(item, group: str) -> None:
    """What xdist's worker does for a grouped test under ``--dist loadgroup``: its id ends in ``@group``, which the
    scheduler reads. xdist 3.8 sets ``item._nodeid``, which pytest 9 no longer reads (a test's id is ``item._id``),
    so without this every test went wherever a worker was free and each shared fixture was made in both workers."""
    from _pytest.nodeid import coerce_node_id

    item._id = coerce_node_id(f"{item.nodeid}@{group}")

