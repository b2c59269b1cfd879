"""Chapter 4: the model, the work kinds, the step loop and the bad-input checks."""
import pytest
import torch

from datajourney import starvation, textdata
from datajourney.book.params import ParameterError

P = dict(d_ms=5.0, batch_size=32, g_ms=50.0, workers=[0, 4], published_workers=[0, 4], steps=4, warmup_steps=1,
         work_kinds=["sleep"], real_work_scale=0, boundary_workers=2, steps_per_epoch=3, prefetch_factors=[2])


def test_model_matches_published_case():
    assert starvation.predicted_wait_ms(5, 32, 0, 50) == 160
    assert starvation.predicted_wait_ms(5, 32, 4, 50) == 0
    assert starvation.predicted_wait_ms(5, 32, 2, 50) == 30
    assert starvation.predicted_au(5, 32, 0, 50) == pytest.approx(50 / 210)


@pytest.mark.parametrize("name,value", [("d_ms", -1), ("batch_size", 0), ("workers", [-1]), ("workers", [100_000]),
                                        ("g_ms", 0), ("steps", 0), ("work_kinds", ["gpu"]),
                                        ("prefetch_factors", [0]), ("boundary_workers", 0)])
def test_bad_parameters_are_named(name, value):
    with pytest.raises(ParameterError, match=repr(name)):
        starvation.check_parameters({**P, name: value})


def test_default_workers_stop_at_the_cores():
    assert starvation.default_workers(16) == [0, 1, 2, 4, 8, 16]
    assert starvation.default_workers(2) == [0, 1, 2]


def test_step_without_cuda_is_simulated():
    step = starvation.Step(5.0, device="cpu")
    assert "simulated" in step.kind and step(torch.zeros(4)) >= 5.0


def test_main_process_loading_waits_at_least_d_times_b():
    ds = starvation.WorkDataset(40, "sleep", cost_ms=2.0)
    df = starvation.train_steps(starvation.make_loader(ds, batch_size=4, workers=0),
                                starvation.Step(1.0, device="cpu"), steps=12)
    assert len(df) == 12 and df["epoch"].max() == 1  # 10 batches per epoch, so a second epoch started
    assert (df["wait_ms"] >= 8.0).all()  # four sleeps of 2 ms happen before each batch
    s = starvation.summarise_steps(df, warmup=1)
    assert 0 < s["au"] < 1 and s["idle_share"] == pytest.approx(1 - s["au"])


def test_epoch_boundary_rows():
    df = starvation.epoch_boundary(lambda n: starvation.WorkDataset(n, "sleep", cost_ms=0.5), batch_size=2,
                                   workers=1, steps_per_epoch=3, prefetch_factors=[1, 2],
                                   step=starvation.Step(0.5, device="cpu"))
    assert len(df) == 2 * 2 * 6 and set(df["epoch"]) == {0, 1}


@pytest.mark.skipif(textdata.offline_dir() is None, reason="no offline copy of the text data (../shared/data)")
def test_real_work_kinds():
    texts, tok, _ = textdata.texts_and_source(16)
    for kind in ("tokenize", "decode"):
        ds = starvation.WorkDataset(8, kind, scale=2, texts=texts, tokenizer=tok)
        assert ds[3].shape == (64,) and ds[3].dtype == torch.int64
        assert starvation.measure_cost_ms(ds, samples=4) > 0
    scale = starvation.calibrate_scale(lambda s: starvation.WorkDataset(8, "decode", scale=s), "decode", 1.0, 4)
    assert 1 <= scale <= 1000


def test_whatif_figure_has_sliders_and_script():
    fig = starvation.whatif_figure(5, 32, 50, max_workers=8)
    assert [s.name for s in fig.layout.sliders] == ["D", "B", "G"]
    assert "plotly_sliderchange" in fig.layout.meta["post_script"]
    assert list(fig.data[0].y[:2]) == [160, 110]
