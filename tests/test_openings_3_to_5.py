"""Chapters 3, 4 and 5 open with findings and advice that follow the data: flip the measured comparison in
a copy of the reference result and the direction word and the action flip with it."""
from helpers import with_tables

from datajourney.core import results


def test_chapter_3_opening_follows_reversed_data():
    """Swap the small files and the in-order shard: the shard turns from faster to slower and the advice
    from "store the samples in a shard" to "keep one file per sample"."""
    from datajourney.chapters.c03_dataloader import page

    ref = results.load_reference("03_dataloader")
    op = page.opening(ref)
    assert "faster than" in op.findings[0].text and op.findings[0].value > 1
    # the layout to change first; the worker count after it, for files kept one per sample (alternatives)
    assert "use one shard read in order" in op.actions[0].text
    assert op.actions[1].text.startswith("If you keep one file per sample instead, set `num_workers=16`")
    assert "num_workers=16" in op.actions[1].snippet
    assert sum(a.text.count("For a DataLoader over") for a in op.actions) == 1
    e = ref.table("epochs").copy()
    e["kind"] = e["kind"].map({"small_files": "shard_in_order", "shard_in_order": "small_files"}).fillna(e["kind"])
    op = page.opening(with_tables(ref, epochs=e))
    assert "slower than" in op.findings[0].text and op.findings[0].value < 1
    assert "keep the default one file per sample" in op.actions[-1].text
    assert not any(a.text.startswith("If you keep") for a in op.actions)


def test_chapter_3_prints_no_range_from_two_runs():
    from datajourney.chapters.c03_dataloader import page

    ref = results.load_reference("03_dataloader")
    f = next(f for f in page.findings(ref) if f.key == "published_w0")
    assert ref.parameters["runs"] == 2 and f.interval is None and "MB/s (" not in f.text
