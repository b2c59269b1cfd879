"""Targets checked against recorded benchmark results (reference runs, the recorded ci timing),
not against timings taken during the test run."""
import json

import pytest
from helpers import hosts_with

from datajourney.chapters.c07_full_picture.params import Params as Params07
from datajourney.core import results
from datajourney.core.paths import REPO_ROOT
from datajourney.core.stats import summarise

HOSTS = results.reference_hosts()


@pytest.mark.parametrize("host", hosts_with("02_random_vs_sequential"))
def test_reference_sequential_reader_reaches_dd(host):
    r = results.load_reference("02_random_vs_sequential", host)
    dd = summarise(r.table("dd_fidelity"), ["tool"], "MBps").set_index("tool")["mean"]
    assert dd["python"] / dd["dd"] >= 0.90, dd


@pytest.mark.parametrize("chapter,table,host", [(c, t, h) for c, t in [("02_random_vs_sequential", "headline"),
                                                                        ("03_dataloader", "epochs")]
                                               for h in hosts_with(c)])
def test_reference_cold_and_warm_residency(chapter, table, host):
    t = results.load_reference(chapter, host).table(table)
    cold, warm = t[t["cache"] == "cold"], t[t["cache"] == "warm"]
    assert len(cold) and cold["resident_at_start"].max() <= 0.05
    assert len(warm) and warm["resident_at_start"].min() >= 0.95
    assert set(cold["purge_method"]) == {"drop_caches"}  # the reference host purges as root


def test_recorded_ci_profile_time():
    rec = json.loads((REPO_ROOT / "data" / "benchmarks" / "ci_profile.json").read_text())
    assert set(rec["seconds"]) >= {"01_introduction", "02_random_vs_sequential", "03_dataloader"}
    for chapter, seconds in rec["seconds"].items():
        assert seconds < rec["target_seconds_per_chapter"] == 60, (chapter, seconds)


@pytest.mark.parametrize("host", hosts_with("06_pcie"))
def test_reference_pinned_copy_reaches_the_independent_ceiling(host):
    from datajourney.chapters.c06_pcie import analysis

    r = results.load_reference("06_pcie", host)
    ceiling = r.metadata["ceiling"]
    assert ceiling["available"] and ceiling["size"] == 1 << 30
    top = analysis.analyse(r).number("ceiling")   # the highest pinned copy of the chapter: nothing measured exceeds it
    b = analysis._events(r)
    pinned = b[(b["direction"] == "H2D") & (b["memory"] == "pinned")].sort_values("size")
    assert float(pinned["median"].iloc[-1]) >= 0.95 * top   # at the largest size measured
    b = r.table("bandwidth")
    assert r.metadata["link"]["peak_GBps"] and b["pct_of_peak"].notna().all()  # every point against the peak
    assert (1 << 30) in set(b["size"]) and {16 << 20, 256 << 20} <= set(r.table("overlap")["size"])


#: The hosts with a second full run of chapter 7 recorded beside the reference (its repeats/ folder).
HOSTS_07_TWICE = [h for h in hosts_with("07_full_picture")
                  if any((results.REFERENCE_DIR / h / "repeats").glob("07_full_picture-*.json"))]


@pytest.mark.parametrize("host", HOSTS_07_TWICE)
def test_reference_training_loop_keeps_up_on_two_full_runs(host):
    """Chapter 7's best configuration (over every recipe, eager or graphed: the highest share of the
    GPU-resident ceiling of its own step) reaches 95% of that ceiling in every run of its scenario, in
    the reference run and in a second, separate full run recorded beside it; where a run falls short,
    the chapter's own measurements explain why: its lost time per step is mostly slower compute, and
    the load experiment measured compute slowing by more than that when the loader's work keeps the
    cores busy (for a graphed best, with the step replayed from CUDA graphs)."""
    from datajourney.book.runner import profiles
    from datajourney.chapters.c07_full_picture import analysis, reading

    files = [results.REFERENCE_DIR / host / "07_full_picture.json",
             *sorted((results.REFERENCE_DIR / host / "repeats").glob("07_full_picture-*.json"))]
    assert len(files) >= 2, files
    for f in files:
        r = results.Result.load(f)
        full = profiles()["full"]["07_full_picture"]
        assert r.parameters["n_images"] >= full.get("n_images", Params07().n_images), f  # at full scale
        sc, best = reading.scenarios(r), reading.best_scenario(r)
        runs = sc[sc["label"] == best["label"]]
        assert len(runs) == r.parameters["repeats"] >= 2, (f.name, runs)  # every repeat of the scenario
        if runs["pct_of_ceiling"].min() >= 100 * reading.KEEP_UP:
            continue
        g = analysis.analyse(r).data["best_gap"]   # what the best scenario's step lost, by part
        parts = g["parts"]
        assert g["largest"] == "compute", (f.name, parts)
        load = r.table("load")
        mode = "cuda_graphs" if reading.step_kind(best["variant"]) == "graphed" else "plain"
        under = load[load["mode"] == mode].groupby("busy")["compute_ms"].median()
        assert under.max() - under.loc[0] > parts["compute"], (f.name, mode, under)
    records = [json.loads(p.read_text()) for p in sorted((results.REFERENCE_DIR / host).glob("**/run-*.json"))]
    seconds = [c["seconds"] for rec in records for c in rec["chapters"] if c["chapter"] == "07_full_picture"]
    assert seconds and max(seconds) <= 600  # data generation included


@pytest.mark.parametrize("record", ["verify_full.json", "verify_full_h200.json"])
def test_recorded_verification_cost_of_the_full_data_sets(record):
    """Verifying the chapter 2 and 3 full-profile data sets on reuse costs at most 10 % of generating
    them (``python -m datajourney bench verify``), with the page cache warm and dropped: on this
    2-core machine and on the H200 host."""
    rec = json.loads((REPO_ROOT / "data" / "benchmarks" / record).read_text())
    assert rec["profile"] == "full" and rec["target_ratio"] == 0.10
    names = {r["data_set"] for r in rec["rows"]}
    assert {"smallfiles-10000x16384-s0", "shard-1073741824-s0", "smallfiles-50000x4096-s0"} <= names
    t = rec["total"]
    assert t["ratio_warm"] <= 0.10 and t["ratio_cold"] <= 0.10, t
    for r in rec["rows"]:
        assert r["verify_warm_s"] <= 0.10 * r["generate_s"], r
        assert r["bytes_hashed"] < r["bytes"] / 20, r  # a sample, not a re-read


#: The recorded `./journey book quick` runs (scripts/bench-book.sh in a fresh clone: install, chapters, book build).
QUICK_BOOKS = sorted((REPO_ROOT / "data" / "benchmarks").glob("quick_book*.json"))


@pytest.mark.parametrize("path", QUICK_BOOKS, ids=[p.stem for p in QUICK_BOOKS])
def test_recorded_quick_book_fits_ten_minutes_install_included(path):
    """`./journey book` (quick profile) from a fresh clone, as a reader runs it: the install, every chapter with its
    data generation, and the book build took at most 10 minutes on the machine it was recorded on."""
    from datajourney.book import registry as chapters

    rec = json.loads(path.read_text())
    assert set(rec["seconds"]) == {c.name for c in chapters.CHAPTERS if c.available}
    assert set(rec["status"].values()) == {"ok"} and rec["book_build_seconds"] > 0
    assert rec["install_and_start_seconds"] > 0   # the whole command was timed, not the chapters alone
    parts = sum(rec["seconds"].values()) + rec["book_build_seconds"] + rec["install_and_start_seconds"]
    assert parts == pytest.approx(rec["total_seconds"], abs=0.2)
    assert rec["total_seconds"] <= rec["target_total_seconds"] == 600


def test_the_quick_book_is_recorded_on_a_cpu_laptop_and_on_a_gpu_host():
    """The ten-minute target holds for both kinds of reader: one record without a GPU, one with."""
    gpus = {json.loads(p.read_text())["fingerprint"]["gpu"]["available"] for p in QUICK_BOOKS}
    assert gpus == {False, True}


DDP = "11_gpu_to_gpu"
#: Modules that only turn results into text, tables and charts: a change there measures nothing differently.
RENDER_ONLY = ("datajourney/book/pages/", "datajourney/book/findings.py", "datajourney/book/report.py",
               "datajourney/book/plotting.py", "datajourney/book/stability.py", "datajourney/book/sphinx_ext.py")


def _git(*args):
    import subprocess

    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)


def _measured_alike(a: str, b: str) -> bool:
    """Whether commits ``a`` and ``b`` measure chapter 11 alike: between them nothing under datajourney/
    changed but render-only modules, other chapters' experiment modules and other chapters' profile
    entries; its notebook's code (the injected parameters aside) and full-profile parameters are equal."""
    import nbformat
    import yaml

    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone lacks the commits to compare")
    for c in (a, b):
        assert _git("cat-file", "-e", f"{c}^{{commit}}").returncode == 0, f"commit {c} is not in this repository"
    changed = _git("diff", "--name-only", a, b, "--", "datajourney").stdout.split()
    measuring = [f for f in changed if not f.startswith(RENDER_ONLY) and f != "datajourney/book/profiles.yaml"
                 and not _other_chapters_module(f)]
    full = [yaml.safe_load(_git("show", f"{c}:datajourney/book/profiles.yaml").stdout)["full"][DDP] for c in (a, b)]
    code = [[c.source for c in nbformat.reads(_git("show", f"{x}:notebooks/{DDP}.ipynb").stdout, as_version=4).cells
             if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])] for x in (a, b)]
    return not measuring and full[0] == full[1] and code[0] == code[1]


#: Other chapters' experiment modules before the package took one folder per chapter.
OLD_CHAPTER_MODULES = {"intro", "storage", "loader", "starvation", "padding", "pcie", "training", "gil", "reading",
                       "tracing", "diagnosis"}


def _other_chapters_module(path: str) -> bool:
    """A module of a chapter other than 11: ``datajourney/chapters/cNN_*/`` with NN != 11, or, in the
    layout before the chapter folders, ``datajourney/<module>.py`` of another chapter."""
    from pathlib import PurePosixPath

    p = PurePosixPath(path)
    if len(p.parts) > 3 and p.parts[1] == "chapters" and p.parts[2].startswith("c"):
        return not p.parts[2].startswith("c11_")
    return p.suffix == ".py" and p.parent.name == "datajourney" and p.stem in OLD_CHAPTER_MODULES


def test_reference_chapters_come_from_one_commit_at_the_full_profile():
    """Every chapter of the committed H200 reference was measured by the same code (one commit) under
    the full profile, and each chapter's run record says it finished."""
    from datajourney.book import registry as chapters

    refs = {c.name: results.load_reference(c.name, "h200") for c in chapters.CHAPTERS}
    commits = {r.fingerprint["software"]["git_commit"] for n, r in refs.items() if n != DDP}
    assert len(commits) == 1
    ddp_commit = refs[DDP].fingerprint["software"]["git_commit"]
    if ddp_commit not in commits and not _measured_alike(ddp_commit, next(iter(commits))):
        # chapter 11 needs a multi-GPU host and was measured at an earlier commit whose code differs: its page
        # must say which code measured it and which renders it, so no reader takes it for this code's run
        import nbformat

        nb = nbformat.read(chapters.lookup("11").notebook, as_version=4)
        text = "".join(str(o.get("data", {}).get("text/markdown", "")) for c in nb.cells if c.cell_type == "code"
                       for o in c.get("outputs", []))
        from datajourney.core.fingerprint import short_commit

        assert f"by the code of commit {short_commit(ddp_commit)}" in text, \
            "chapter 11's page hides that other code measured it"
    for name, r in refs.items():
        from datajourney.book.stability import run_record

        rec = run_record(r.run_id, "h200")
        assert rec["profile"] == "full", name
        assert [c["status"] for c in rec["chapters"] if c["chapter"] == name] == ["ok"], name


#: Time budgets of the reference runs (issue 45), checked against their committed run records.
FULL_ONE_GPU_BUDGET_S, DDP_FOUR_GPUS_BUDGET_S = 900, 300
#: Budgets a committed run missed, with what it measured: the test fails the day a run meets them.
MISSED_BUDGETS = {
    ("one_gpu", "h100"): "1,020 s of chapters 1–10 and 12 (full profile) on the H100 host (run of 2026-11-28 05:20)",
    ("ddp4", "h200"): "chapter 11 took 328 s on the 4 × H200 host (run of 2026-11-28 14:23)",
    ("ddp4", "h200x4"): "chapter 11 took 328 s on the 4 × H200 host (run of 2026-11-28 14:23)",
    ("ddp4", "h100x4"): "chapter 11 took 379 s on the 4 × H100 host (run of 2026-11-27)",
}


def _budget_hosts(kind: str) -> list[str]:
    """Hosts whose reference holds what a budget times: every one-GPU chapter from one ok run ('one_gpu'), or
    chapter 11 measured on 4 GPUs ('ddp4')."""
    from datajourney.book import stability

    out = []
    for h in HOSTS:
        t = stability.run_times(h)
        if kind == "one_gpu":
            one = t[t["chapter"].isin(stability.timed())]
            if len(one) == len(stability.timed()) and one["run_id"].nunique() == 1 and set(one["status"]) == {"ok"}:
                out.append(h)
        elif (t["chapter"] == DDP).any() and results.load_reference(DDP, h).metadata.get("world") == 4:
            out.append(h)
    return out


def _budget(request, kind: str, host: str) -> None:
    if (kind, host) in MISSED_BUDGETS:
        request.applymarker(pytest.mark.xfail(reason=MISSED_BUDGETS[(kind, host)], strict=True))


@pytest.mark.parametrize("host", _budget_hosts("one_gpu"))
def test_full_profile_on_one_gpu_fits_fifteen_minutes(host, request):
    """The full profile's one-GPU chapters, timed by the runner in the reference run's record, take at most
    15 minutes together."""
    from datajourney.book import stability

    _budget(request, "one_gpu", host)
    t = stability.run_times(host)
    assert t[t["chapter"].isin(stability.timed())]["seconds"].sum() <= FULL_ONE_GPU_BUDGET_S


@pytest.mark.parametrize("host", _budget_hosts("ddp4"))
def test_chapter_11_full_on_four_gpus_fits_five_minutes(host, request):
    """Chapter 11 at the full profile (1, 2 and 4 GPUs in one run) takes at most 300 s on a 4-GPU host."""
    from datajourney.book import stability

    _budget(request, "ddp4", host)
    t = stability.run_times(host)
    assert float(t.loc[t["chapter"] == DDP, "seconds"].iloc[0]) <= DDP_FOUR_GPUS_BUDGET_S


def test_bench_verify_records_a_fresh_data_set(tmp_path):
    """`python -m datajourney bench verify` generates a chapter's data sets from its checked parameters and
    records generation and verification times for each."""
    from datajourney.cli import main

    out = tmp_path / "verify.json"
    assert main(["bench", "verify", "--profile", "ci", "--chapters", "3", "--out", str(out), "--tmp",
                 str(tmp_path)]) == 0
    rec = json.loads(out.read_text())
    assert rec["profile"] == "ci" and len(rec["rows"]) == 1
    row = rec["rows"][0]
    assert row["files"] > 0 and row["generate_s"] > 0 and row["verify_warm_s"] > 0 and row["bytes_hashed"] > 0
