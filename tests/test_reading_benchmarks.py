"""Chapter 9's targets, checked against the committed reference run (never timed in a test)."""
import pytest

from datajourney.chapters.c09_reading_smarter import analysis, page
from datajourney.core import results

#: Path (b) should reach this share of the slower of the two links (device, PCIe), measured in the same run.
PIPELINE_TARGET = 0.90
#: A thread pool of pread calls should reach this many times the single thread's IOPS.
PARALLEL_TARGET = 4.0

HOSTS = [h for h in results.reference_hosts() if results.load_reference("09_reading_smarter", h) is not None]


@pytest.fixture(params=HOSTS)
def ref(request):
    return results.load_reference("09_reading_smarter", request.param)


def test_pinned_double_buffered_path_reaches_the_slower_link(ref):
    """Path (b) reaches 90% of the slower link at the sweep's best setting, in every run of the sweep
    (against the dd read of the same run); where the run measured path (b) at that setting (chosen by the
    sweep), path (b) in the main table reaches it on average too."""
    best = analysis.pipeline_summary(ref).iloc[0]     # the sweep's order: its best setting first
    assert best["share_min"] >= PIPELINE_TARGET and best["n"] == ref.parameters["gpu_sweep_runs"], best
    pb = ref.metadata["gds"]["path_b"]
    if set((pb.get("by") or {}).values()) == {"sweep"}:      # runs made before the sweep chose path (b) did not
        assert (pb["mode"], pb["chunk"], pb["buffers"]) == (best["mode"], best["chunk"], best["buffers"])
        f = analysis.analyse(ref)
        assert f.number("path.b") / min(f.number("dd_read"), f.number("pcie_copy")) >= PIPELINE_TARGET
    assert ref.table("gpu")["verified"].all()                     # every path delivered the file's bytes


#: References whose pread pool missed the target, each with what it measured: kept failing visibly (a strict
#: expected failure turns into a failure the day a new run meets the target) until a run sweeps past 64 threads.
MISSED: dict[str, str] = {}


@pytest.mark.parametrize("host", HOSTS)
def test_parallel_pread_reaches_four_times_or_shows_saturation(host, request):
    if host in MISSED:
        request.applymarker(pytest.mark.xfail(reason=MISSED[host], strict=True))
    f = analysis.analyse(results.load_reference("09_reading_smarter", host))
    assert f.number("parallel_random") >= PARALLEL_TARGET or f["pool_saturates"].value == "yes"


def test_readahead_was_restored_every_time(ref):
    log = ref.metadata["readahead_changes"]
    restored = [e for e in log if "restored" in e]
    assert restored and all(e["read_back"] == e["restored"] == ref.metadata["readahead_sysfs"]["original_kb"]
                            for e in restored)
    assert len(restored) == len([e for e in log if "set" in e])


def test_compatibility_mode_is_never_labelled_gds(ref):
    gds = ref.metadata["gds"]
    paths = [p for p in ref.table("gpu")["path"].unique() if p.startswith("kvikio")]
    if not gds["kvikio"]:   # kvikio did not load on that host: no kvikio path, and the result says why
        assert not paths and gds["error"]
        return
    if gds["path"] != "GDS":
        assert paths and not any("GDS" in p and "not GDS" not in p for p in paths)
        assert "storage → GPU memory with GDS" not in page.key_metrics(ref)


def test_cold_runs_started_cold(ref):
    for name in ("grid", "random", "readahead"):
        t = ref.table(name)
        assert t["resident_at_start"].max() <= 0.05 and set(t["purge_method"]) == {"drop_caches"}


def test_full_chapter_within_ten_minutes():
    import json

    from datajourney.core.paths import REPO_ROOT

    for p in (REPO_ROOT / "data" / "reference").glob("*/run-reference-*.json"):
        rec = json.loads(p.read_text())
        for c in rec.get("chapters", []):
            if c.get("chapter") == "09_reading_smarter" and rec.get("profile") == "full":
                assert c["seconds"] <= 600, (p.name, c["seconds"])


def test_best_path_b_setting_reaches_the_disk_on_every_run(ref):
    """With the sweep in the reference: its best setting reaches the target against each run's own dd read."""
    s = analysis.pipeline_summary(ref)
    if s.empty:
        pytest.skip("the chunk x buffers sweep of path (b) is not in the reference run")
    assert s.iloc[0]["share_min"] >= PIPELINE_TARGET, page.pipeline_note(analysis.analyse(ref))
    assert ref.table("pipeline")["verified"].dropna().all()


def test_uring_was_measured_or_its_skip_is_labelled(ref):
    if "uring" not in ref.tables:
        note = page.uring_note(analysis.analyse(ref))
        assert "not in the reference run" in note or "skipped" in note
    else:
        assert (ref.table("uring")["requests"] > 0).all()
