"""The test session itself: under pytest-xdist each long shared fixture is made in one worker (its tests carry
one ``xdist_group``, and go out first), and a session that leaves more than tempcheck's limit in the temporary
folder fails, naming what it left."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import tempcheck

TESTS = Path(__file__).resolve().parent

#: Collects the files given and prints, as its last line, each test's id and its xdist group, in the session's order.
GROUPS = textwrap.dedent("""
    import json, sys
    import pytest

    class Groups:
        def pytest_collection_finish(self, session):
            self.items = [(i.nodeid, [m.args[0] for m in i.iter_markers("xdist_group")]) for i in session.items]

    groups = Groups()
    code = pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[groups])
    print(json.dumps(groups.items))
    sys.exit(code)
""")


def test_the_tests_of_each_shared_run_share_one_group_and_go_first():
    files = ["tests/test_book.py", "tests/test_browser.py", "tests/test_notebooks.py", "tests/test_new_chapter.py",
             "tests/test_install.py"]
    out = subprocess.run([sys.executable, "-c", GROUPS, *files], cwd=TESTS.parent, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    items = json.loads(out.stdout.strip().splitlines()[-1])
    group = {nodeid: (g[0] if g else None) for nodeid, g in items}
    assert all(len(g) <= 1 for _, g in items)
    # the ci run and the book built from it; the reference book; each by name or through book_html's parameter
    assert group["tests/test_notebooks.py::test_run_record"] == "ci-run"
    assert group["tests/test_book.py::test_run_book_builds_strictly"] == "ci-run"
    assert group["tests/test_book.py::test_reference_book_builds_strictly"] == "reference-book"
    browsed = {n: g for n, g in group.items() if n.startswith("tests/test_browser.py") and "[" in n}
    assert browsed and all(g == ("reference-book" if n.endswith("[reference]") else "ci-run")
                           for n, g in browsed.items()), browsed
    # a module-scoped fixture of a test's own file (a copy of the checkout): that file's tests in one group
    assert {g for n, g in group.items() if n.startswith("tests/test_new_chapter.py")} == {"tests/test_new_chapter.py"}
    # a test with nothing to share goes wherever a worker is free
    assert group["tests/test_book.py::test_every_module_the_book_names_imports"] is None
    assert group["tests/test_install.py::test_a_fresh_clone_installs_from_a_wheelhouse_with_no_index"] is None
    # the shared runs first, the ci run's before the reference book's; then what runs chapters end to end
    order = [g for _, g in items]
    ci, ref = order.index(["ci-run"]), order.index(["reference-book"])
    assert ci == 0 and all(g == ["ci-run"] for g in order[:ci + 1]) and ref < len(order) - 1
    assert max(i for i, g in enumerate(order) if g == ["ci-run"]) < ref
    assert max(i for i, g in enumerate(order) if g == ["reference-book"]) < min(
        i for i, g in enumerate(order) if not g)


def _session(tmp_path, body: str) -> subprocess.CompletedProcess:
    """A pytest session of one test file holding ``body``, with tempcheck, its temporary folder a new one."""
    suite, temp = tmp_path / "suite", tmp_path / "temp"
    suite.mkdir(parents=True)
    temp.mkdir()
    (suite / "test_one.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tempcheck", "-p", "no:cacheprovider",
                           "-o", "tmp_path_retention_policy=failed", "test_one.py"], cwd=suite, env=env,
                          capture_output=True, text=True, timeout=300)


BIG = f"b'x' * {tempcheck.LIMIT_MB * 1_100_000}"


def test_a_session_that_leaves_more_than_the_limit_in_the_temp_folder_fails_naming_it(tmp_path):
    r = _session(tmp_path, f"""
        import tempfile
        from pathlib import Path

        def test_leaves_a_file():
            Path(tempfile.gettempdir(), "left-behind").write_bytes({BIG})
    """)
    assert r.returncode == 1, r.stdout[-2000:]
    assert "1 passed" in r.stdout and "FAILED: the tests left 11" in r.stdout
    (line,) = [s for s in r.stdout.splitlines() if s.endswith("left-behind")]
    assert float(line.split()[0]) >= tempcheck.LIMIT_MB
    # what the tests make in tmp_path pytest removes when the session passes: nothing left, and the session passes
    r = _session(tmp_path / "2", f"""
        def test_fills_its_tmp_path(tmp_path):
            (tmp_path / "big").write_bytes({BIG})
    """)
    assert r.returncode == 0, r.stdout[-2000:]
    assert "temporary folder: 0.0 MB left" in r.stdout


def test_a_failing_sessions_own_folder_is_named_not_counted(tmp_path):
    r = _session(tmp_path, f"""
        def test_fails(tmp_path):
            (tmp_path / "big").write_bytes({BIG})
            assert False
    """)
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout[-2000:]
    assert "FAILED: the tests left" not in r.stdout
    assert "temporary folder: 0.0 MB left" in r.stdout and "(this failing session's, kept by pytest)" in r.stdout
