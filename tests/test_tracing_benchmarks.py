"""Chapter 10's targets, checked against the committed reference run (not timed here)."""
import json

import numpy as np
import pytest

from datajourney.chapters.c10_mmap_vs_read import page
from datajourney.chapters.c10_mmap_vs_read.experiment import CONSTANT_TOLERANCE
from datajourney.chapters.c10_mmap_vs_read.params import CHAPTER
from datajourney.core import results

HOSTS = [h for h in results.reference_hosts() if (results.REFERENCE_DIR / h / f"{CHAPTER}.json").exists()]


@pytest.mark.parametrize("host", HOSTS)
def test_posix_events_constant_under_mmap_and_growing_under_read(host):
    r = results.load_reference(CHAPTER, host)
    assert r.metadata["posix_view"], "the reference run has a POSIX view"
    c = page.posix_counts(r)
    mm, rd = c[c["mode"] == "mmap"], c[c["mode"] == "read"]
    points = len(r.parameters["seq_lengths"]) * len(r.parameters["batch_sizes"])
    assert len(mm) == len(rd) == points >= 6          # every grid point traced, enough of them for a trend
    ev = mm["posix_events"]
    assert ev.max() - ev.min() <= CONSTANT_TOLERANCE * ev.mean()
    rd = rd.assign(tokens=rd["samples"] * rd["seq"]).sort_values("tokens")
    assert np.corrcoef(rd["tokens"], rd["posix_events"])[0, 1] > 0.99
    assert (rd["posix_reads"] == rd["pieces"]).all()          # every piece's read is seen
    assert page.key_metrics(r)["POSIX events read() ÷ mmap, largest point"][0] > 1


@pytest.mark.parametrize("host", HOSTS)
def test_tracer_overhead_measured_per_view_with_spread(host):
    r = results.load_reference(CHAPTER, host)
    t = page.overhead_table(r)
    assert {(m, v) for m in ("mmap", "read") for v in ("posix", "app", "both")} == set(zip(t["mode"], t["view"]))
    assert (t["n"] == r.parameters["overhead_rounds"]).all() and (t["n"] >= 2).all()   # a spread, every round
    assert (t["max"] >= t["min"]).all()


@pytest.mark.parametrize("host", HOSTS)
def test_full_profile_within_ten_minutes_and_cache_states_hold(host):
    r = results.load_reference(CHAPTER, host)
    runs = [json.loads(p.read_text()) for p in (results.REFERENCE_DIR / host).glob("run-reference-*.json")]
    mine = [c for rec in runs if rec.get("profile") == "full" for c in rec["chapters"] if c["chapter"] == CHAPTER
            and c["status"] == "ok"]
    assert mine and min(c["seconds"] for c in mine) <= 600
    s = r.table("sweep")
    assert s[s["cache"] == "cold"]["resident_at_start"].max() <= 0.05
    assert s[s["cache"] == "warm"]["resident_at_start"].min() >= 0.95
    # the checkpoint saved the GPU state the run asked for, at least 512 MiB (the full profile's: a state larger
    # than any cache on its way to the disk)
    asked = max(int(b) for b in r.parameters["checkpoint_sizes"])
    assert set(r.table("checkpoint")["device"]) == {"cuda"} and r.table("checkpoint")["state_bytes"].max() >= asked
    assert asked >= 1 << 29
