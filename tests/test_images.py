"""Synthetic JPEG data sets for the training-loop chapter: generation (parallel, deterministic,
orphan-free when killed), reading with stage timers, collation into timed batches, corrupt
images named, and the message when mosaicml-streaming is missing."""
import builtins
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import torch

from datajourney.core.params import ParameterError
from datajourney.core.paths import REPO_ROOT
from datajourney.toolkit import images


def test_image_folder_is_generated_deterministically(tmp_path):
    s = images.image_folder(tmp_path, n_images=40, size=32, classes=4, workers=2, progress=False)
    files = s.files
    assert len(files) == 40 and all(p.exists() for p in files)
    assert s.path(5).parent.name == "class_001"
    assert files[7].read_bytes() == images.jpeg(0, 7, 32, 80)  # image i depends only on seed and i
    m = s.manifest
    assert m["params"]["n_images"] == 40 and m["bytes"] == sum(p.stat().st_size for p in files)
    stamp = (s.root / "manifest.json").stat().st_mtime_ns
    assert images.image_folder(tmp_path, n_images=40, size=32, classes=4, progress=False).root == s.root
    assert (s.root / "manifest.json").stat().st_mtime_ns == stamp  # reused, not rewritten


def _jpeg_as_defined(seed, index, size, quality):
    """The synthetic image as first written: full gradient images, N(0, 12) noise drawn whole."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng([seed, index])
    yy, xx = np.mgrid[0:size, 0:size]
    base = np.stack([(xx * rng.uniform(0.2, 1)) % 256, (yy * rng.uniform(0.2, 1)) % 256,
                     ((xx + yy) * rng.uniform(0.1, 0.5)) % 256], axis=-1)
    img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


@pytest.mark.parametrize("size", [1, 17, 64, 224])
def test_the_fast_generator_writes_the_same_bytes(size):
    """Broadcast gradients and in-place noise: byte for byte the images of the full-array definition,
    so data sets generated before stay valid (same manifest, same digests)."""
    for i in (0, 1, 7, 12345):
        assert images.jpeg(3, i, size, 80) == _jpeg_as_defined(3, i, size, 80), (size, i)


def test_path_names_are_built_once_and_match_the_paths(tmp_path):
    s = images.ImageFolderSet(tmp_path / "a b", 250, 7)
    assert s.names == [str(p) for p in s.files]
    assert s.names is s.names  # cached on the set
    assert images.ImageFolderDataset(s, 8).files is s.names


def test_mds_layout_follows_the_writer_rule():
    # shard header 10 bytes, 4 bytes per sample beside its encoded size, a limit of 50 bytes
    assert images.mds_layout([10, 10, 10, 10], 50, shard_bytes=10, sample_bytes=4) == [(0, 2), (2, 4)]
    assert images.mds_layout([20, 22], 50, shard_bytes=10, sample_bytes=4) == [(0, 1), (1, 2)]
    assert images.mds_layout([5] * 3, None, shard_bytes=10, sample_bytes=4) == [(0, 3)]  # no limit: one shard
    assert images.mds_layout([], 50, shard_bytes=10, sample_bytes=4) == []
    # a sample too big for any shard: the writer flushes an empty shard first
    assert images.mds_layout([60, 5], 50, shard_bytes=10, sample_bytes=4) == [(0, 0), (0, 1), (1, 2)]


@pytest.mark.skipif(not images.streaming_status()[0], reason="mosaicml-streaming is not importable here")
def test_mds_shards_written_in_parallel_are_those_of_one_writer(tmp_path):
    """Shards written by a pool of writers, one shard each, are byte for byte what one MDSWriter
    writes from all the samples in order: every shard, the index, the manifest's digest."""
    s = images.image_folder(tmp_path, n_images=120, size=40, classes=7, workers=2, progress=False)
    limit = 30_000  # several shards from a small set
    one = images.mds_shards(s, tmp_path / "one", workers=1, size_limit=limit, progress=False)
    many = images.mds_shards(s, tmp_path / "many", workers=3, size_limit=limit, progress=False)
    names = sorted(p.name for p in one.iterdir())
    assert len(names) >= 4 and names == sorted(p.name for p in many.iterdir())
    for n in names:
        assert (one / n).read_bytes() == (many / n).read_bytes(), n
    m1 = json.loads((one.parent / "manifest.json").read_text())
    m2 = json.loads((many.parent / "manifest.json").read_text())
    assert m1["sha256"] == m2["sha256"] and m1["params"]["size_limit"] == limit
    ds = images.mds_dataset(many, 40, shuffle=False, decoded=False)
    try:
        assert len(ds) == 120 and ds.get_item(37)["jpeg"] == s.path(37).read_bytes()
    finally:
        images.stop_streaming(ds)


def test_reading_decodes_resizes_normalises_and_times_each_stage(tmp_path):
    s = images.image_folder(tmp_path, n_images=6, size=40, classes=3, workers=1, progress=False)
    ds = images.ImageFolderDataset(s, out_size=24)
    x, label, stages = ds[4]
    assert x.shape == (3, 24, 24) and x.dtype == torch.float32 and label == 1
    assert -3 < float(x.mean()) < 3
    assert len(stages) == len(images.SAMPLE_STAGES) and all(t >= 0 for t in stages)
    x8, _, st8 = images.ImageFolderDataset(s, out_size=24, uint8=True)[4]
    assert x8.dtype == torch.uint8 and x8.shape == (3, 24, 24)
    assert torch.allclose(images.normalise_on_device(x8[None].clone())[0], x, atol=1e-5)  # same numbers on the GPU


def test_collate_sums_the_stages_of_its_samples(tmp_path):
    s = images.image_folder(tmp_path, n_images=8, size=32, classes=4, workers=1, progress=False)
    ds = images.ImageFolderDataset(s, out_size=32)
    samples = [ds[i] for i in range(8)]
    b = images.collate(samples)
    x, y = b
    assert x.shape == (8, 3, 32, 32) and y.tolist() == [i % 4 for i in range(8)]
    for k, name in enumerate(images.SAMPLE_STAGES):
        assert b.stages[name] == pytest.approx(sum(smp[2][k] for smp in samples))
    assert b.stages["collate"] > 0 and b.stages["worker"] == -1 and b.stages["pin"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs an accelerator")
def test_pinning_is_timed(tmp_path):
    s = images.image_folder(tmp_path, n_images=4, size=32, classes=2, workers=1, progress=False)
    b = images.collate([images.ImageFolderDataset(s, 32)[i] for i in range(4)]).pin_memory()
    assert b.x.is_pinned() and b.stages["pin"] > 0 and b.stages["t_pinned"] >= b.stages["t_collated"]


def test_a_truncated_jpeg_names_its_file(tmp_path):
    s = images.image_folder(tmp_path, n_images=6, size=32, classes=2, workers=1, progress=False)
    p = s.path(3)
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(images.CorruptImageError, match=str(p)) as e:
        images.ImageFolderDataset(s, 32)[3]
    assert "cannot decode" in str(e.value)
    with pytest.raises(images.CorruptImageError, match="cannot decode"):
        images.decode(b"not a jpeg", 32)


@pytest.mark.parametrize("kw,name", [({"n_images": 0}, "'n_images'"), ({"size": 0}, "'image_size'"),
                                     ({"quality": 100}, "'jpeg_quality'"), ({"classes": 0}, "'classes'")])
def test_bad_values_are_named(tmp_path, kw, name):
    args = dict(n_images=4, size=16, quality=80, classes=2, seed=0) | kw
    with pytest.raises(ParameterError, match=name):
        images.image_folder_plan(args["n_images"], args["size"], args["quality"], args["classes"], args["seed"])


def test_too_many_images_for_the_disk(tmp_path):
    with pytest.raises(ParameterError, match="'data_dir'.*GiB free"):
        images.image_folder(tmp_path, n_images=9_000_000, size=1024, progress=False)
    assert list(tmp_path.iterdir()) == []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_killing_the_run_during_generation_leaves_no_pool_worker(tmp_path):
    """kill -9 of the process that generates the JPEGs: its pool workers die with it. The images
    are large, so that a worker left behind would still be busy with its chunk for a minute."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from datajourney.toolkit import images
        images.image_folder({str(tmp_path)!r}, n_images=600, size=1024, classes=4, workers=2, progress=False)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    workers = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.2)
            workers = [c.pid for c in psutil.Process(parent.pid).children()]
        assert len(workers) >= 2, "the pool did not start"
        time.sleep(0.5)  # the workers are writing images
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "pool workers outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for w in workers:  # a failed test leaves nothing running either
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def test_die_with_parent_exits_at_once_when_the_parent_is_gone():
    code = "from datajourney.toolkit import images; images.die_with_parent(1); print('still here')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert out.returncode == 1 and "still here" not in out.stdout  # its parent is not pid 1: it exits


def test_stop_streaming_leaves_other_datasets_alone(tmp_path):
    s = images.image_folder(tmp_path, n_images=4, size=16, classes=2, workers=1, progress=False)
    images.stop_streaming(images.ImageFolderDataset(s, 16))  # nothing to stop


def test_missing_streaming_is_explained(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_streaming(name, *a, **k):
        if name == "streaming" or name.startswith("streaming."):
            raise ImportError("No module named 'streaming'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_streaming)
    ok, why = images.streaming_status()
    assert not ok and "pip install mosaicml-streaming" in why and "ImageFolder half runs" in why
    s = images.image_folder(tmp_path, n_images=4, size=16, classes=2, workers=1, progress=False)
    with pytest.raises(RuntimeError, match="mosaicml-streaming"):
        images.mds_shards(s, tmp_path, progress=False)
