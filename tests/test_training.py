"""Chapter 7: the profiled loop on CPU with a small network (the GPU run is the reference)."""
import pytest
import torch

from datajourney import training
from datajourney.book.params import ParameterError

P = dict(n_images=96, image_size=32, jpeg_quality=80, classes=4, out_size=32, batch_size=16, model="small_cnn",
         lr=0.1, formats=["imagefolder", "mds"], workers=[0, 2], steps=3, warmup_steps=1, purge_method="auto",
         profile=True, seed=0)


def test_phases_sum_to_the_step():
    net = training.make_model("small_cnn", 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    df = training.ceiling(net, opt, batch_size=8, out_size=32, classes=4, steps=3, warmup=1, device="cpu")
    assert len(df) == 4 and (df["DATALOADER_WAIT"] >= 0).all()
    parts = df[["DATALOADER_WAIT", "H2D_TRANSFER", "FORWARD", "BACKWARD", "OPTIMIZER"]].sum(axis=1)
    assert (parts <= df["wall_ms"] * 1.05 + 0.5).all()  # phases are inside the step
    s = training.summarise(df, 1)
    assert 0 < s["au"] <= 1 and s["images_per_s"] > 0


def test_run_on_cpu(tmp_path):
    res = training.run(**P, data_dir=tmp_path, run_dir=tmp_path / "run", progress=False)
    sc = res.table("scenarios")
    assert set(sc["workers"]) == {0, 2} and (sc["resident_at_start"] <= 0.05).all()
    assert (sc["pct_of_ceiling"] > 0).all() and res.metadata["decode_ms_per_image"] > 0
    trace = tmp_path / "run" / res.metadata["traces"]["imagefolder"]
    assert trace.exists() and "DATALOADER_WAIT" in trace.read_text()  # the phases are in the trace
    if not res.metadata["mds_available"]:
        assert "mosaicml-streaming" in res.metadata["mds_note"] and set(sc["format"]) == {"imagefolder"}


@pytest.mark.parametrize("name,value,needle", [
    ("n_images", 8, "at least one batch"), ("workers", [-1], "from 0"), ("formats", ["tfrecord"], "'imagefolder'"),
    ("model", "vit", "resnet50")])
def test_bad_parameters_are_named(tmp_path, name, value, needle):
    with pytest.raises(ParameterError, match=repr(name)) as e:
        training.preflight({**P, name: value, "data_dir": str(tmp_path), "run_dir": str(tmp_path)})
    assert needle in str(e.value)


def test_unwritable_output_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ParameterError, match="'run_dir'.*is a file"):
        training.preflight({**P, "data_dir": str(tmp_path), "run_dir": str(tmp_path / "file" / "run")})
    training.preflight({**P, "data_dir": str(tmp_path), "run_dir": str(tmp_path / "new" / "run")})  # creatable
    assert not (tmp_path / "new").exists()  # nothing was created


def test_too_many_images_for_the_disk(tmp_path):
    with pytest.raises(ParameterError, match="'data_dir'.*GiB free"):
        training.preflight({**P, "n_images": 9_000_000, "image_size": 1024, "data_dir": str(tmp_path),
                            "run_dir": str(tmp_path)})
