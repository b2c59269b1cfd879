"""A chapter's result records how long each section of its run took (metadata "seconds"), so that a profile's
time budget can be trimmed from data."""
import time

from datajourney.book import harness
from datajourney.core.results import Result


def test_chapter_records_each_section_in_order_within_its_wall_time(tmp_path):
    t0 = time.perf_counter()
    harness.run("02_random_vs_sequential",
                n_files=20, file_size=4096, runs=2, cache_states=["cold", "warm"], purge_method="auto",
                size_sweep=[4096, 16384], sweep_bytes=1 << 17, shard_size=1 << 20,
                chunk_sweep=[4096, 1 << 20], chunk_runs=2, odirect=False, latency_reads=20, dd_check=True,
                compare_purge_methods=False, data_dir=tmp_path / "data", run_dir=tmp_path / "run", progress=False)
    wall = time.perf_counter() - t0
    seconds = Result.load(tmp_path / "run" / f"{'02_random_vs_sequential'}.json").metadata["seconds"]
    # the sections in the order they ran; one the parameters skip (comparing purge methods) records no lap
    assert list(seconds) == ["data sets", "headline", "latency", "size sweep", "chunk sweep", "shard length",
                             "dd check"]
    assert all(isinstance(s, (int, float)) and s >= 0 for s in seconds.values())
    assert 0 < sum(seconds.values()) <= wall     # each section timed once: together within the run's wall time
