"""Chapter 8's SPDL question (issue 37): the paper's comparison, its decomposition, the GIL probes and
the thread sweep, on CPU; on a machine without spdl.io the section is skipped with its reason and the
rest of the chapter runs."""
import math

import numpy as np
import pytest

from datajourney.book import harness
from datajourney.chapters.c08_threads_processes_gil import analysis, choice, page, paper
from datajourney.chapters.c08_threads_processes_gil import experiment as gil
from datajourney.core.params import ParameterError

SMALL = dict(n_images=224, width=160, height=120, out_size=64, batch_size=16, primitive_batch=8, primitive_images=32,
             concurrency=[1, 2], repeats=2, dataloader_workers=[1, 2], thread_concurrency=[2], loader_batches=4,
             window_factor=1, start_methods=["fork"], startup_workers=[1], startup_paths=[0], epoch_paths=0,
             ipc_batch_sizes=[16], moonshot=False, collate_check=False, paper_window_factor=1, gil_images=8,
             paper_configs=[[1, 2, 3], [16, 1, 2]])


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return gil.photo_set(tmp_path_factory.mktemp("photos"), n_images=48, width=96, height=72, progress=False)


def test_decomposition_multiplies_to_the_whole_and_shares_sum_to_one():
    d = paper.decomposition(1000.0, 1500.0, 1740.0)
    assert d["decoder"] * d["parallelism"] == pytest.approx(d["total"]) == pytest.approx(1.74)
    assert d["decoder_share"] + d["parallelism_share"] == pytest.approx(1.0)
    assert paper.decomposition(0.0, 1.0, 1.0)["total"] is None


@pytest.mark.parametrize("cores", [2, 16, 64])
def test_sweep_scales_with_the_cores_and_fits_the_data_set(cores):
    cfg = paper.auto_configs(cores, 64)
    assert max(c for _, c, _ in cfg) == 2 * cores and all(t >= c for _, c, t in cfg)
    assert all(64 % k == 0 for k, _, _ in cfg)
    w = dict(batch_size=64, batches=40, factor=2, prefetch_factor=2, warm_batches=2)
    c = paper.fit_level("dl_pillow", cores, n_images=9600, **w)
    assert c <= cores and paper.fits("dl_pillow", c, n_images=9600, **w)
    assert paper.fit_level("spdl_batch", 64, k=64, n_images=9600, **w) <= 32


def test_batch_pipeline_yields_every_image_once_in_order_with_spdl_io_pixels(photos):
    files = [str(f) for f in photos.files]
    order = list(range(40))
    loop = paper.LoopProbe()
    xs, ids = [], []
    for x, i in paper.spdl_batch_iter(files, order, batch_size=16, out_size=32, images_per_task=8, concurrency=2,
                                      threads=4, loop=loop):
        xs.append(x)
        ids += i.tolist()
    assert ids == order and xs[0].shape == (16, 3, 32, 32)
    ref = gil.decode_one("spdl", gil._read(files[3]), 32)
    assert np.array_equal(xs[0][3].permute(1, 2, 0).numpy(), ref)
    assert loop.stop


def test_normalisation_is_the_same_in_the_workers_and_on_the_batch():
    a = np.random.default_rng(0).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    x = paper.normalise_image(a, "numpy")
    import torch

    y = paper.normalise_batch(torch.from_numpy(a).permute(2, 0, 1)[None])[0]
    assert torch.allclose(x, y, atol=1e-5)


def test_gil_probe_sees_a_thread_that_holds_the_lock():
    import threading
    import time

    probe = paper.GilProbe()
    probe.lap()
    stop = time.perf_counter() + 0.3

    def spin():
        while time.perf_counter() < stop:
            pass
    t = threading.Thread(target=spin)
    t.start()
    t.join()
    busy = probe.lap()
    time.sleep(0.2)
    idle = probe.lap()
    probe.close()
    assert busy["gil_busy_share"] > idle["gil_busy_share"] and busy["gil_wait_ms"] > idle["gil_wait_ms"]


def test_paper_configs_are_checked_naming_the_parameter():
    for bad in ([[3, 2, 4]], [[16, 0, 4]], "many", [[16, 2]]):
        with pytest.raises(ParameterError, match="paper_configs"):
            gil.preflight(gil.Params.coerce({**gil.Params().as_dict(), **SMALL, "paper_configs": bad}))


def test_the_question_runs_end_to_end_and_its_facts_follow_the_tables(tmp_path):
    res = harness.run("08_threads_processes_gil",
                      gil.Params(), run_dir=tmp_path / "run", progress=False, data_dir=tmp_path / "data", **SMALL)
    comp = res.table("paper")
    assert set(comp["loader"]) == set(paper.PAPER_KINDS)
    assert set(comp["state"]) == {"cold", "warm"} and len(comp) == 9
    assert len(res.table("paper_sweep")) == 2 and not res.table("gil_held").empty
    # the sweep's best runs again, as often as the comparison's loaders, and its verdict rests on those runs
    best = choice.best_setting(choice.warm_pipeline_rows(comp, res.table("paper_sweep")))
    fresh = res.table("paper_confirm")
    assert len(fresh) == SMALL["repeats"] and set(fresh["config"]) == {best["config"]}
    assert res.metadata["seconds"]["paper"] > 0 and res.metadata["paper"]["seconds"]["gil_held"] > 0
    assert (res.table("gil_held")["held_share"].between(0, 1)).all()
    f = analysis.analyse(res)
    w = comp[comp["state"] == "warm"].groupby("loader")["images_per_s"].mean()
    assert f.number("paper.gain.warm") == pytest.approx(w["spdl_batch"] / w["dl_pillow"])
    assert f.number("paper.decoder.warm") * f.number("paper.parallelism.warm") == pytest.approx(
        f.number("paper.gain.warm"))
    assert f["paper.limit"].value in analysis.LIMITS
    assert f.advice_for("image_decode.loader") is not None and analysis.UNCONFIRMED not in f
    assert f.get("paper.best_threads").number == pytest.approx(fresh["images_per_s"].mean())
    assert {k for k in analysis.EXPORTS if k.startswith("paper.")} <= set(f.facts)
    note = page.paper_note(res)
    assert "published: 1.74× faster" in note and "The sweep's best setting used" in note
    assert not page.sweep_table(res).empty and not page.paper_table(res).empty
    # reversed: swap the baseline's and the pipeline's rates, the direction word flips
    comp2 = comp.copy()
    a, b = comp2["loader"] == "dl_pillow", comp2["loader"] == "spdl_batch"
    comp2.loc[a, "images_per_s"], comp2.loc[b, "images_per_s"] = (comp.loc[b, "images_per_s"].values[:a.sum()],
                                                                   comp.loc[a, "images_per_s"].values[:b.sum()])
    res.tables["paper"] = comp2
    g = analysis.analyse(res).number("paper.gain.warm")
    assert math.isclose(g, 1 / f.number("paper.gain.warm"), rel_tol=1e-9)


def test_without_spdl_io_the_question_is_skipped_and_the_chapter_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(gil, "decoder_status", lambda: {"pillow": (True, ""), "spdl": (False, "no FFmpeg"),
                                                          "torchvision": (False, "none")})
    res = harness.run("08_threads_processes_gil", gil.Params(), run_dir=tmp_path / "run", progress=False,
                      data_dir=tmp_path / "data",
                  **{**SMALL, "thread_decoders": ["pillow"], "decoders": ["pillow"], "dataloader_decoder": "pillow"})
    assert res.metadata["paper_skipped"] == "spdl" and res.table("paper").empty
    assert not res.table("loaders").empty
    assert "spdl.io" in page.paper_note(res)
