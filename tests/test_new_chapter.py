"""Adding a chapter is one folder, one notebook and one line of the table of contents (the README's
recipe: ``python -m datajourney.book.scaffold``): in a copy of the checkout with chapter 13 scaffolded, every
test that iterates over the registry's chapters (marked ``chapters``) passes without editing a test, the
chapter runs and opens with its facts, and chapter 12, the front page and the stability page take it in
without editing a list."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from datajourney.core.paths import REPO_ROOT


@pytest.fixture(scope="module")
def copy_with_chapter_13(tmp_path_factory):
    """A copy of this checkout (its tracked and new files, the committed references included) with chapter 13
    added by the scaffold."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    root = tmp_path_factory.mktemp("checkout")
    for f in files:
        src = REPO_ROOT / f
        if f and src.is_file():
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / f)
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-m", "datajourney.book.scaffold", "13", "sums", "Summing a list"],
                   cwd=root, env=env, check=True, capture_output=True)
    yield root, env
    shutil.rmtree(root, ignore_errors=True)


def test_the_scaffold_puts_the_chapter_before_the_conclusion(copy_with_chapter_13):
    root, _ = copy_with_chapter_13
    assert (root / "notebooks" / "13_sums.ipynb").is_file()
    toc = [line.split("notebooks/")[1] for line in (root / "_toc.yml").read_text().splitlines()
           if "- file: notebooks/" in line]
    assert toc[-2:] == ["13_sums", "12_conclusion"] and toc[:-2] == sorted(toc[:-2])


#: A plugin for the copy's pytest: at collection it writes each test's id and markers to ``$CHOSEN_OUT`` and keeps
#: only the tests marked ``chapters`` whose id names none of ``$OTHER_CHAPTERS`` (one collection, one run).
CHOOSE = textwrap.dedent("""
    import json, os

    def pytest_collection_modifyitems(config, items):
        markers = {i.nodeid: sorted({m.name for m in i.iter_markers()}) for i in items}
        with open(os.environ["CHOSEN_OUT"], "w") as f:
            json.dump(markers, f)
        others = os.environ["OTHER_CHAPTERS"].split()
        kept = {i.nodeid for i in items if "chapters" in markers[i.nodeid] and not any(n in i.nodeid for n in others)}
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in kept])
        items[:] = [i for i in items if i.nodeid in kept]
""")


def test_the_chapter_tests_pass_with_the_new_chapter(copy_with_chapter_13, tmp_path):
    """Every test marked ``chapters`` (they iterate over the registry), run in the copy: chapter 13 is among the
    chapters they check, and none of them names a chapter list to edit. Of the tests parametrized by chapter, the
    copy runs chapter 13's cases (the suite itself runs the other chapters'); every other test runs whole. A test
    parametrized by chapter carries the marker, so a rule added to every chapter is one the new chapter is held
    to here (the "How it works" and "Try it" rules were not); those marked ``notebooks`` execute every chapter
    end to end, which the next test does for chapter 13."""
    from datajourney.book import registry
    root, env = copy_with_chapter_13
    (tmp_path / "choose13.py").write_text(CHOOSE)
    listing = tmp_path / "markers.json"
    others = [c.name for c in registry.CHAPTERS]   # this checkout's chapters, all but the new one
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "choose13",
                          "-W", "ignore::pytest.PytestUnknownMarkWarning", "tests"],
                         cwd=root, env={**env, "PYTHONPATH": f"{root}{os.pathsep}{tmp_path}",
                                        "CHOSEN_OUT": str(listing), "OTHER_CHAPTERS": " ".join(others)},
                         capture_output=True, text=True, timeout=1500)
    markers = json.loads(listing.read_text())
    unmarked = [i for i, m in markers.items() if "13_sums" in i and not {"chapters", "notebooks"} & set(m)]
    assert not unmarked, f"parametrized by chapter without the chapters marker: {unmarked}"
    ids = [i for i, m in markers.items() if "chapters" in m]
    assert any("13_sums" in i for i in ids)  # the parametrized tests took the new chapter in
    chosen = [i for i in ids if not any(name in i for name in others)]
    assert len(chosen) > 10
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    ran = {k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped)", out.stdout.splitlines()[-1])}
    assert ran.get("passed", 0) + ran.get("skipped", 0) == len(chosen), out.stdout[-2000:]


def test_the_new_chapter_runs_and_opens_with_its_facts(copy_with_chapter_13, tmp_path):
    root, env = copy_with_chapter_13
    out = subprocess.run([sys.executable, "-m", "datajourney", "run", "13", "--profile", "ci", "--results",
                          str(tmp_path), "--run-id", "t13", "--quiet"], cwd=root, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = (tmp_path / "t13" / "notebooks" / "13_sums.ipynb").read_text()
    assert "Summing a list ran at" in text and "integers/s" in text


def test_chapter_12_and_the_front_page_take_the_new_chapter_in(copy_with_chapter_13, tmp_path):
    """A run directory with the committed references and chapter 13's own result: chapter 12 reads chapter 13's
    exported facts (coverage, checklist) and the front page shows its key number, with no list edited."""
    root, env = copy_with_chapter_13
    for f in (root / "data" / "reference" / "h200").glob("[01][0-9]_*.json"):
        if not f.name.startswith(("01_", "12_")):
            shutil.copy2(f, tmp_path / f.name)
    code = textwrap.dedent(f"""
        import json
        from datajourney.book import harness, overview
        from datajourney.chapters.c12_conclusion import page
        run_dir = {str(tmp_path)!r}
        harness.run("13", run_dir=run_dir, progress=False, runs=2, n=1000)
        res = harness.run("12", run_dir=run_dir, progress=False, llm_tokens_per_s=1e6)
        table = page.checklist(res, None)
        front = overview.front_table(run_dir, "h200")
        print(json.dumps(dict(found=res.facts.data["found"], missing=res.facts.data["missing"],
                              coverage=[f.text for f in page.findings(res.facts) if f.key == "coverage"][0],
                              checklist=table[table["chapter"] == 13].to_dict("records"),
                              front=front[front["chapter"].str.contains("13_sums")].to_dict("records"))))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "13_sums" in got["found"] and got["missing"] == []
    assert "13_sums" not in got["coverage"] and f"reads all {len(got['found'])} chapters" in got["coverage"]
    assert [r["practice"] for r in got["checklist"]] == ["summing a list"]
    assert "integers/s" in got["checklist"][0]["this run"]
    (row,) = got["front"]
    assert row["key number"] == "summing a list" and "integers/s" in row["this run"]
    assert row["reference host"] == "not in the reference run"
