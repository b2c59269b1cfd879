"""Chapter 3's Datasets return the right bytes; an epoch sees every sample once."""
import pytest
import torch

from datajourney import datasets, loader


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return datasets.small_files(tmp_path_factory.mktemp("d"), n_files=40, file_size=4096, progress=False)


def test_both_datasets_return_the_same_samples(ds):
    a, b = loader.make_dataset(ds, "small_files"), loader.make_dataset(ds, "shard")
    assert len(a) == len(b) == 40
    for i in (0, 17, 39):
        assert torch.equal(a[i], b[i])
        assert bytes(a[i].numpy()) == ds.files[i].read_bytes()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", loader.KINDS)
def test_epoch_sees_every_sample(ds, kind, workers):
    r = loader.time_epoch(loader.make_dataset(ds, kind), batch_size=16, num_workers=workers, seed=0)
    assert r["samples"] == 40 and r["bytes"] == 40 * 4096
    assert 0 < r["first_batch_s"] <= r["seconds"]


def test_unknown_kind_is_named(ds):
    with pytest.raises(ValueError, match="'kind'"):
        loader.make_dataset(ds, "tar")


def test_sweep_rows_and_speedups(ds):
    df = loader.sweep(ds, workers=[0, 4], cache_states=["cold", "warm"], runs=1, batch_size=8, method="auto", seed=0)
    assert len(df) == 2 * 2 * 2
    sp = loader.speedups(df)
    assert set(sp["workers"]) == {0, 4}
    assert (sp["shard_speedup"] > 0).all()
