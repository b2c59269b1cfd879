"""Synthetic JPEG data sets for the training-loop chapter (issue 5, in progress): ImageFolder
generation, reading, and the message when mosaicml-streaming is missing."""
import builtins

import pytest
import torch

from datajourney import images
from datajourney.book.params import ParameterError


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


def test_reading_decodes_resizes_and_normalises(tmp_path):
    s = images.image_folder(tmp_path, n_images=6, size=40, classes=3, workers=1, progress=False)
    ds = images.ImageFolderDataset(s, out_size=24)
    x, label = ds[4]
    assert x.shape == (3, 24, 24) and x.dtype == torch.float32 and label == 1
    assert -3 < float(x.mean()) < 3


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
