"""Chapter 8: data, loaders (every image once, order, same pixels), bad input, findings that follow the data."""

import os
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import findings_by_key, has_nan
from torch.utils.data import Dataset

from datajourney.book import harness
from datajourney.chapters.c08_threads_processes_gil import analysis, page
from datajourney.chapters.c08_threads_processes_gil import experiment as gil
from datajourney.chapters.c08_threads_processes_gil import params as params8
from datajourney.core import results
from datajourney.core.params import ParameterError

_by_key = partial(findings_by_key, page)   # a page's findings by key

SPDL_IO = gil.ffmpeg_status()[0]
#: spdl.io scales with FFmpeg's swscale (bilinear, no antialiasing), Pillow with its antialiased
#: bilinear filter: the same image differs by a few levels on average.
SPDL_MEAN_TOLERANCE = 6.0


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return gil.photo_set(tmp_path_factory.mktemp("data"), n_images=48, width=96, height=72, classes=3,
                         progress=False)


def test_photos_are_deterministic_and_photo_like():
    a, b = gil.photo_jpeg(0, 5), gil.photo_jpeg(0, 5)
    assert a == b and a != gil.photo_jpeg(0, 6) and a != gil.photo_jpeg(1, 5)
    sizes = [len(gil.photo_jpeg(0, i)) for i in range(4)]
    assert all(40_000 < s < 250_000 for s in sizes), sizes   # near an ImageNet JPEG, not flat, not noise
    import io

    from PIL import Image

    assert Image.open(io.BytesIO(a)).size == (500, 375)


def test_photo_set_is_reused_through_the_data_set_machinery(photos, tmp_path):
    from datajourney.toolkit import datasets

    again = gil.photo_set(photos.root.parent, n_images=48, width=96, height=72, classes=3, progress=False)
    assert again.root == photos.root
    assert datasets.check(photos.root) == []
    assert photos.path(7).read_bytes() == gil.photo_jpeg(0, 7, 96, 72, 92)


def _collect(it):
    xs, ys = [], []
    for x, y in it:
        xs.append(x.cpu())
        ys.append(y.cpu())
    return torch.cat(xs), torch.cat(ys)


@pytest.mark.parametrize("kind,c", [("dataloader", 0), ("dataloader", 2), ("spdl", 3), ("threadpool", 3)])
def test_every_loader_yields_every_image_once_in_order_with_the_same_pixels(photos, kind, c):
    files = [str(p) for p in photos.files]
    order = list(np.random.default_rng(0).permutation(len(files)))
    mk = gil.make_loader(kind, files, order, batch_size=5, out_size=32, concurrency=c, decoder="pillow",
                         device="cpu")
    x, y = _collect(mk())
    assert y.tolist() == [int(i) for i in order]           # every image once, in the requested order
    assert x.shape == (len(files), 3, 32, 32) and x.dtype == torch.uint8
    ref = np.stack([gil.decode_one("pillow", Path(files[i]).read_bytes(), 32) for i in order])
    assert torch.equal(x, torch.from_numpy(ref).permute(0, 3, 1, 2))   # same decoder: identical pixels


def _pillow_batch_decode(data, out_size):
    """A CPU stand-in for the GPU decode: the same bytes decoded and resized by Pillow."""
    arrs = [gil.decode_one("pillow", bytes(t.numpy()), out_size) for t in data]
    return torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2).contiguous()


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("workers", [0, 2])
def test_hybrid_yields_every_image_once_in_order_with_the_dataloaders_pixels(photos, share, workers):
    """The hybrid (CPU part in DataLoader workers, the rest through the GPU-decode callable, here
    a Pillow stand-in on the CPU) gives the same batches as the DataLoader."""
    files = [str(p) for p in photos.files]
    order = [int(i) for i in np.random.default_rng(1).permutation(len(files))]
    mk = gil.make_loader("hybrid", files, order, batch_size=5, out_size=32, concurrency=workers, decoder="pillow",
                         device="cpu", share=share, nice=3, gpu_decode=_pillow_batch_decode)
    batches = list(mk())
    assert [len(y) for _, y in batches] == [5] * 9 + [3]                       # whole batches, last one short
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    assert y.tolist() == order                                                   # every image once, in order
    dl = gil.make_loader("dataloader", files, order, batch_size=5, out_size=32, concurrency=0, decoder="pillow",
                         device="cpu")
    ref, ref_y = _collect(dl())
    assert ref_y.tolist() == order and x.dtype == torch.uint8 and x.shape == ref.shape
    assert torch.equal(x, ref)                                # same decoder on both sides: identical pixels


def test_hybrid_splits_each_batch_by_the_share(photos):
    ds = gil.HybridBatches([str(p) for p in photos.files], [[3, 1, 4, 0], [2]], 16, share=0.5)
    cpu, data, sizes, idx = ds[0]
    assert cpu.shape == (2, 3, 16, 16) and idx.tolist() == [3, 1, 4, 0] and len(sizes) == 2
    assert bytes(data[:int(sizes[0])].numpy()) == photos.path(4).read_bytes()   # the first round(s×B) on the CPU
    assert [gil.hybrid_cpu_count(64, s) for s in (0, 0.05, 0.5, 1)] == [0, 3, 32, 64]


def test_hybrid_error_in_the_producer_reaches_the_consumer(photos):
    def broken(data, out_size):
        raise RuntimeError("decoder failed")

    files = [str(p) for p in photos.files]
    it = gil.hybrid_iter(files, list(range(10)), batch_size=5, out_size=16, workers=0, share=0.5, device="cpu",
                         gpu_decode=broken)
    with pytest.raises(RuntimeError, match="decoder failed"):
        list(it)


def test_nvjpeg_feed_with_a_stand_in_decoder_yields_every_image_once(photos):
    files = [str(p) for p in photos.files]
    order = list(range(len(files)))[::-1]
    it = gil.nvjpeg_iter(files, order, batch_size=7, out_size=16, read_threads=2, device="cpu",
                         gpu_decode=_pillow_batch_decode)
    x, y = _collect(it)
    assert y.tolist() == order
    ref = np.stack([gil.decode_one("pillow", Path(files[i]).read_bytes(), 16) for i in order])
    assert torch.equal(x, torch.from_numpy(ref).permute(0, 3, 1, 2))
    it = gil.nvjpeg_iter(files, order, batch_size=7, out_size=16, read_threads=2, device="cpu",
                         gpu_decode=_pillow_batch_decode)
    next(it)
    it.close()                                                 # a consumer that stops early stops the producer


def test_hybrid_share_auto_rule():
    assert gil.hybrid_share_auto(3150, 3242) == 0.8           # 0.8 × 0.97 = 0.777 -> 0.80
    assert gil.hybrid_share_auto(1000, 4000) == 0.2
    assert gil.hybrid_share_auto(1100, 4000) == 0.2           # 0.22 -> 0.20
    assert gil.hybrid_share_auto(1150, 4000) == 0.25          # 0.23 -> 0.25
    assert gil.hybrid_share_auto(8000, 4000) == 1.0           # R > C: all on the CPU (clamped)
    assert gil.hybrid_share_auto(4400, 4000) == 0.9           # R a little above C: 0.8 × 1.1 = 0.88 -> 0.90
    assert gil.hybrid_share_auto(0, 4000) == 0.0 and gil.hybrid_share_auto(10, 4000) == 0.0


def test_moonshot_feeds_add_the_niced_dataloader_and_the_hybrid_from_this_runs_data():
    lo = pd.DataFrame([dict(loader=k, concurrency=c, repeat=r, images_per_s=v + r)
                       for r in range(2) for k, c, v in (("dataloader", 8, 3000.0), ("dataloader", 16, 3400.0),
                                                         ("threadpool", 16, 2000.0), ("nvjpeg", 8, 9000.0))])
    lo["decoder"] = ["spdl" if k == "threadpool" else "pillow" for k in lo["loader"]]
    h = {}
    feeds = gil.moonshot_feeds(lo, {"images_per_s": 4000.0}, tv=(True, ""), nice=10, read_threads=8, hybrid=h)
    # each best loader with its decoder; the DataLoader and the hybrid at nice 0 and at nice 10
    assert feeds == [("threadpool", 16, 0, None, "spdl"), ("dataloader", 16, 0, None, "pillow"),
                     ("dataloader", 16, 10, None, "pillow"), ("nvjpeg", 8, 0, None, None),
                     ("hybrid", 16, 0, 0.7, "pillow"), ("hybrid", 16, 10, 0.7, "pillow")]  # 0.8 × 3400.5 / 4000
    assert h == dict(share=0.7, how="auto", headroom=params8.HYBRID_HEADROOM, step=params8.HYBRID_STEP, cpu_rate=3400.5,
                     ceiling=4000.0, workers=16)
    h = {}
    feeds = gil.moonshot_feeds(lo, {"images_per_s": 4000.0}, tv=(True, ""), nice=0, read_threads=8, share=0.25,
                               hybrid=h)
    assert [f for f in feeds if f[2]] == [] and feeds[-1] == ("hybrid", 16, 0, 0.25, "pillow")
    assert h["how"] == "parameter"
    h = {}
    feeds = gil.moonshot_feeds(lo, {"images_per_s": 4000.0}, tv=(False, "no torchvision"), nice=10, read_threads=8,
                               hybrid=h)
    assert {f[0] for f in feeds} == {"dataloader", "threadpool"} and h == dict(skipped="torchvision",
                                                                              why="no torchvision")
    h = {}
    gil.moonshot_feeds(lo[lo["loader"] != "dataloader"], {"images_per_s": 4000.0}, tv=(True, ""), nice=10,
                       read_threads=8, hybrid=h)
    assert h["skipped"] == "no_dataloader" and "DataLoader's sweep" in page.HYBRID_SKIPS[h["skipped"]]


class _Niceness(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return os.getpriority(os.PRIO_PROCESS, 0), os.nice(0)


@pytest.mark.parametrize("nice", [0, 7])
def test_niced_workers_run_at_the_requested_niceness(nice):
    from torch.utils.data import DataLoader

    base = os.nice(0)
    dl = DataLoader(_Niceness(), batch_size=None, num_workers=2, multiprocessing_context="fork",
                    worker_init_fn=gil.worker_init(nice))
    got = list(dl)
    assert all(int(a) == int(b) == min(19, base + nice) for a, b in got), (base, got)
    assert os.nice(0) == base                                  # the main process keeps its priority


def test_spdl_pipeline_in_completion_order_still_yields_every_image_once(photos):
    files = [str(p) for p in photos.files]
    order = list(range(len(files)))
    _, y = _collect(gil.spdl_iter(files, order, batch_size=4, out_size=16, concurrency=4, ordered=False))
    assert sorted(y.tolist()) == order


@pytest.mark.skipif(not SPDL_IO, reason="spdl.io cannot load FFmpeg's libraries here")
def test_spdl_io_decodes_the_same_pixels_within_tolerance(photos):
    for i in range(4):
        data = photos.path(i).read_bytes()
        a = gil.decode_one("pillow", data, 32).astype(int)
        b = gil.decode_one("spdl", data, 32).astype(int)
        assert a.shape == b.shape
        assert np.abs(a - b).mean() <= SPDL_MEAN_TOLERANCE


def test_primitive_point_threads_and_processes_do_the_same_work(photos):
    paths = [str(p) for p in photos.files[:16]]
    for ex in ("thread", "process"):
        row, ops = gil.primitive_point("pillow", ex, 2, paths, batch_size=4, out_size=16)
        assert row["images"] == 16 and row["images_per_s"] > 0 and row["startup_s"] >= 0
        assert {o["op"] for o in ops} == set(gil.OPS) and all(o["ms_per_image"] >= 0 for o in ops)


def test_batch_arrays_match_between_executors(photos):
    paths = [str(p) for p in photos.files[:6]]
    a, _ = gil.load_batch("pillow", paths, 16)
    with gil.ProcessPoolExecutor(1, mp_context=gil.get_context("fork")) as pool:
        b, _ = pool.submit(gil.load_batch, "pillow", paths, 16).result()
    assert np.array_equal(a, b)


def test_startup_and_ipc_points_measure(photos):
    r = gil.startup_point(1, "fork", 1000)
    assert r["first_batch_s"] > 0 and r["pickled_bytes"] > 1000 * 40
    i = gil.ipc_point(8, 1, 16, batches=4)
    assert i["batch_bytes"] == 8 * 3 * 16 * 16 and i["ms_per_batch"] > 0


# --------------------------------------------------------------------------- bad input
BASE = dict(n_images=128, width=96, height=72, jpeg_quality=92, out_size=32, batch_size=8, primitive_batch=4,
            primitive_images=16, concurrency=[1, 2], decoders=["pillow"], repeats=1, loaders=["dataloader"],
            dataloader_workers=[1], thread_concurrency=[1], loader_batches=2, start_methods=["fork"],
            startup_workers=[1], startup_paths=[0], ipc_batch_sizes=[8], purge_method="auto", moonshot=False)


@pytest.mark.parametrize("name,value,needle", [
    ("concurrency", [0, 2], "concurrency"),
    ("concurrency", [100000], "concurrency"),
    ("thread_concurrency", [-1], "thread_concurrency"),
    ("loaders", ["dali"], "loaders"),
    ("decoders", ["libjpeg-turbo"], "decoders"),
    ("start_methods", ["vfork"], "start_methods"),
    ("free_threaded", True, "free_threaded"),
    ("moonshot", "yes", "moonshot"),
    ("loader_batches", 1000, "loader_batches"),
    ("ipc_workers", [1, 2], "ipc_workers"),
    ("primitive_images", 2, "primitive_images"),
    ("hybrid_share", 1.5, "hybrid_share"),
    ("hybrid_share", -0.1, "hybrid_share"),
    ("hybrid_share", "half", "hybrid_share"),
    ("hybrid_share", True, "hybrid_share"),
    ("model_worker_nice", 20, "model_worker_nice"),
    ("model_worker_nice", -1, "model_worker_nice"),
    ("model_worker_nice", 2.5, "model_worker_nice"),
    ("model_step", "compiled", "model_step"),
])
def test_bad_parameters_fail_early_naming_the_parameter(name, value, needle):
    if name == "free_threaded" and not gil.free_threading()["gil_enabled"]:
        pytest.skip("a free-threaded interpreter accepts free_threaded=true")
    with pytest.raises(ParameterError, match=needle) as e:
        gil.resolve({**BASE, name: value})
    assert "\n" not in str(e.value)


def test_good_hybrid_and_nice_parameters_are_accepted():
    q = gil.resolve({**BASE, "hybrid_share": 0.25, "model_worker_nice": 0})
    assert q["hybrid_share"] == 0.25 and q["model_worker_nice"] == 0
    q = gil.resolve(BASE)
    assert q["hybrid_share"] == "auto" and q["model_worker_nice"] == 10
    assert gil.resolve({**BASE, "hybrid_share": 1})["hybrid_share"] == 1.0


def test_spdl_decoder_without_ffmpeg_fails_up_front_and_auto_skips_it(monkeypatch):
    monkeypatch.setattr(gil, "ffmpeg_status", lambda: (False, "FFmpeg's libraries did not load"))
    with pytest.raises(ParameterError, match="decoders"):
        gil.resolve({**BASE, "decoders": ["pillow", "spdl"]})
    monkeypatch.setattr(gil, "decoder_status", lambda: {"pillow": (True, ""), "spdl": (False, "no FFmpeg"),
                                                        "torchvision": (False, "none")})
    assert gil.resolve({**BASE, "decoders": "auto"})["decoders"] == ["pillow"]


def test_spdl_pipeline_on_a_gpu_without_spdl_io_fails_up_front(monkeypatch):
    """On a CUDA host the SPDL pipeline's last stage needs spdl.io: missing, it is a one-line error
    naming `loaders` before any work, not a failure in the middle of the run."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(gil.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m == "spdl.io" else real(m, *a))
    with pytest.raises(ParameterError, match="loaders") as e:
        gil.resolve({**BASE, "loaders": ["dataloader", "spdl"], "decoders": ["pillow"]})
    assert "spdl-io" in str(e.value)
    gil.resolve({**BASE, "loaders": ["dataloader", "threadpool"], "decoders": ["pillow"]})


def test_moonshot_required_without_a_gpu_is_an_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ParameterError, match="moonshot"):
        gil.resolve({**BASE, "moonshot": True})


def test_an_image_set_too_large_for_the_disk_is_refused(tmp_path):
    with pytest.raises(ParameterError):
        gil.preflight({**BASE, "n_images": 9_000_000, "width": 8000, "height": 8000, "loader_batches": 2,
                       "data_dir": str(tmp_path), "run_dir": str(tmp_path / "run")})


# --------------------------------------------------------------------------- findings follow the data
def _result(*, thread_ips=2000.0, proc_ips=1000.0, thread_decode=(4.0, 4.2), proc_decode=4.0, tp_ips=3000.0,
            dl_ips=2000.0, tp_cpu=1.0, dl_cpu=2.0, tp_mem=1e8, dl_mem=3e9, model_pct=(95.0, 60.0),
            cuda=True, old=False) -> results.Result:
    prim, ops = [], []
    for r in range(2):
        for ex, top in (("thread", thread_ips), ("process", proc_ips)):
            for c in (1, 4):
                ips = top * (0.5 if c == 1 else 1.0) * (1 + 0.01 * r)
                prim.append(dict(decoder="pillow", executor=ex, concurrency=c, images=256, startup_s=0.1,
                                 seconds=256 / ips, images_per_s=ips, repeat=r))
                dec = (thread_decode[0] if c == 1 else thread_decode[1]) if ex == "thread" else proc_decode
                for op in gil.OPS:
                    ops.append(dict(decoder="pillow", executor=ex, concurrency=c, op=op,
                                    ms_per_image=dec if op == "decode" else 0.5, repeat=r))
    lo = []
    for r in range(2):
        for kind, c, ips, cpu, mem in (
            ("dataloader", 8, dl_ips, dl_cpu, dl_mem),
            ("threadpool", 8, tp_ips, tp_cpu, tp_mem),
            ("dataloader", 2, dl_ips / 3, dl_cpu, dl_mem / 4),
        ):
            v = ips * (1 + 0.01 * r)
            lo.append(dict(loader=kind, concurrency=c, repeat=r, decoder="pillow", resident_at_start=0.0,
                           first_batch_s=0.5, images=1920, seconds=1920 / v, images_per_s=v,
                           cpu_user_s=cpu * 1.92 * 0.7, cpu_system_s=cpu * 1.92 * 0.3, cpu_cores=4.0,
                           pss_bytes=mem + 5e8, uss_bytes=mem, base_pss_bytes=5e8, added_pss_bytes=mem, batches=30,
                           processes=9 if kind == "dataloader" else 1, images_seen=2100))
    start = [dict(workers=4, start_method=m, n_paths=n, pickled_bytes=60_000_000 if n else 80,
                  first_batch_s=(0.05 if m == "fork" else 3.0) + (4.0 if (n and m != "fork") else 0.0))
             for m in ("fork", "spawn") for n in (0, 1_000_000)]
    ceiling = {"images_per_s": 4000.0, "compute_ms": 16.0} if cuda else None
    model = []
    if cuda:
        for r in range(2):
            for kind, c, share in (("nvjpeg", 8, model_pct[0]), ("dataloader", 8, model_pct[1])):
                model.append(dict(loader=kind, concurrency=c, repeat=r, resident_at_start=0.0,
                                  pct_of_ceiling=share + r, images_per_s=40 * (share + r), first_batch_s=1.0,
                                  wait_share=0.1, compute_ms=16.0, cpu_cores=4.0, seconds_total=3.0))
    res = results.Result(chapter="08_threads_processes_gil", run_id="constructed", parameters={}, fingerprint={})
    res.add("calibration", [dict(decoder="pillow", decode_ms=0.8, resize_ms=0.2)])
    res.add("primitives", prim)
    res.add("ops", ops)
    res.add("loaders", lo)
    res.add("startup", start)
    res.add("ipc", [dict(batch_size=64, workers=0, batch_bytes=9633792, ms_per_batch=2.0),
                    dict(batch_size=64, workers=1, batch_bytes=9633792, ms_per_batch=12.0)])
    res.add("model", model)
    if not old:
        res.metadata["window_rule"] = dict(factor=4, whole_waves=True, threadpool="per image")
    else:  # a result of the old fixed windows: no window rule, no added PSS
        res.tables["loaders"] = res.table("loaders").drop(columns=["added_pss_bytes", "base_pss_bytes", "batches"])
    res.metadata.update(device="cuda" if cuda else "cpu", cores=8, ceiling=ceiling, thread_target=1.5,
                        moonshot_target=0.9, moonshot_note=None if cuda else "no CUDA GPU on this machine",
                        decoders={"pillow": {"ok": True, "note": "Pillow"}}, decoders_run=["pillow"],
                        image_bytes=dict(mean=1e5, min=8e4, max=1.2e5, total=1e8), image_size=[500, 375],
                        purge_methods=["drop_caches"],
                        free_threading=dict(gil_enabled=True, free_threaded_build=False, python="3.12.3"))
    return res


def test_findings_threads_faster_and_slower_than_processes():
    f = _by_key(_result(thread_ips=2000, proc_ips=1000))["primitives"]
    assert "2.0× faster than processes" in f.text and f.value == pytest.approx(2.0, rel=0.02)
    f = _by_key(_result(thread_ips=1000, proc_ips=2000))["primitives"]
    assert "2.0× slower than processes" in f.text
    f = _by_key(_result(thread_ips=1000, proc_ips=1005))["primitives"]
    assert "level with" in f.text


def test_findings_contention_follows_per_op_times():
    f = _by_key(_result(thread_decode=(4.0, 8.0), proc_decode=4.2))["contention"]
    assert "interpreter lock" in f.text and "2.0× slower than one thread" in f.text and f.value == pytest.approx(2.0)
    assert "threads 1.90× slower than processes" in f.text
    f = _by_key(_result(thread_decode=(4.0, 4.1), proc_decode=4.1))["contention"]
    assert "interpreter lock" not in f.text and "threads about the same as processes" in f.text


def test_findings_end_to_end_follow_the_data_and_name_the_decoders():
    f = _by_key(_result(tp_ips=3000, dl_ips=1500))["end_to_end"]
    assert "2.0× faster than the DataLoader" in f.text and "target" not in f.text
    assert "(thread pool, 8 threads, Pillow)" in f.text and "(DataLoader, 8 workers, Pillow)" in f.text
    # the paper's "74% faster" is a percentage printed as published: not beside this ratio
    assert f.value == pytest.approx(2.0, rel=0.02) and page.facts_of(_result())["end_to_end"].published is None
    assert "The SPDL paper" not in f.text
    f = _by_key(_result(tp_ips=1500, dl_ips=3000))["end_to_end"]
    assert "2.0× slower than the DataLoader" in f.text and "target" not in f.text
    assert f.value < 1


def test_findings_cpu_and_memory_follow_the_data():
    f = _by_key(_result(tp_cpu=1.0, dl_cpu=2.0, tp_mem=1e8, dl_mem=3e9))["cost"]
    assert "the threads' CPU time per image was **2.0× less than the best DataLoader's**" in f.text
    assert "30.0× less than the best DataLoader's" in f.text
    f = _by_key(_result(tp_cpu=3.0, dl_cpu=2.0, tp_mem=3e9, dl_mem=1e8))["cost"]
    assert "the threads' CPU time per image was **1.50× the best DataLoader's**" in f.text
    assert "30.0× the best DataLoader's" in f.text


def test_findings_first_batch_names_the_slowest_start_method():
    f = _by_key(_result())["first_batch"]
    assert "7 s with spawn" in f.text and f.value == pytest.approx(7.0)
    assert "spawned workers were **140× slower than forked ones**" in f.text
    assert "(3 s with an empty Dataset: the paths made it 2.3× slower)" in f.text


def test_findings_moonshot_names_the_fastest_feed():
    f = _by_key(_result(model_pct=(95.0, 60.0)))["moonshot"]
    assert "fastest feed was GPU decode" in f.text and f.value == pytest.approx(95.5) and "target" not in f.text
    f = _by_key(_result(model_pct=(70.0, 80.0)))["moonshot"]
    assert "fastest feed was DataLoader" in f.text and f.value == pytest.approx(80.5)
    f = _by_key(_result(cuda=False))["moonshot"]
    assert "did not run here" in f.text and f.value is None


def _with_new_feeds(res, *, hybrid_pct=95.0, nice_pct=85.0, share=0.45, hybrid_nice0_pct=None):
    """Constructed model-fed rows of the niced DataLoader and the hybrid (at nice 10, and at nice 0 when
    ``hybrid_nice0_pct`` is given), beside the older feeds (the plain DataLoader at 60%)."""
    feeds = [("dataloader", 10, nice_pct, None), ("hybrid", 10, hybrid_pct, share)]
    if hybrid_nice0_pct is not None:
        feeds.append(("hybrid", 0, hybrid_nice0_pct, share))
    rows = [dict(loader=kind, concurrency=8, repeat=r, resident_at_start=0.0, nice=n, share=sh,
                 pct_of_ceiling=v + r, images_per_s=40 * (v + r), first_batch_s=1.0, wait_share=0.01,
                 compute_ms=16.0, cpu_cores=4.0, seconds_total=3.0)
            for r in range(2) for kind, n, v, sh in feeds]
    res.tables["model"] = pd.concat([res.table("model"), pd.DataFrame(rows)], ignore_index=True)
    res.metadata.update(model_worker_nice=10, hybrid=dict(share=share, how="auto", headroom=0.8, step=0.05,
                                                          cpu_rate=2000.0, ceiling=4000.0, workers=8, nice=10))
    return res


def test_moonshot_names_the_best_feed_among_niced_and_hybrid_feeds(tmp_path):
    res = _with_new_feeds(_result(model_pct=(70.0, 60.0)), hybrid_pct=95.0, nice_pct=85.0)
    f = _by_key(res)["moonshot"]
    assert "fastest feed was DataLoader + nvJPEG, 8 workers at nice 10 (45% decoded on the CPU) at" in f.text
    assert f.value == pytest.approx(95.5) and "target" not in f.text
    t = page.model_table(res)
    assert len(t) == 4 and t["feed"].is_unique                  # niced and plain DataLoader kept apart
    assert len(page.model_chart(res).data[0].y) == 4
    f2 = _by_key(_with_new_feeds(_result(model_pct=(70.0, 60.0)), hybrid_pct=75.0, nice_pct=85.0))["moonshot"]
    assert "fastest feed was DataLoader, 8 workers at nice 10" in f2.text
    # saved and loaded (the shares of the other feeds come back as missing values): the same text
    back = results.Result.load(res.save(tmp_path))
    assert _by_key(back)["moonshot"].text == f.text and page.nice_hybrid_note(back) == page.nice_hybrid_note(res)


def test_nice_and_hybrid_sentences_follow_the_data():
    """Niced workers ahead of, behind or level with plain ones, and the hybrid ahead of or behind the plain
    DataLoader: each sentence says what the numbers show, and no fixed explanation is printed."""
    note = page.nice_hybrid_note(_with_new_feeds(_result(model_pct=(70.0, 60.0)), hybrid_pct=95.0, nice_pct=85.0))
    assert "85.5% of the ceiling against 60.5% at nice 0: the lower priority helped" in note
    assert "ahead of the plain DataLoader" in note and "0.8 × the best DataLoader's 2,000 img/s" in note
    note = page.nice_hybrid_note(_with_new_feeds(_result(model_pct=(70.0, 90.0)), hybrid_pct=70.0, nice_pct=80.0))
    assert "the lower priority cost more than it gave" in note and "helped" not in note
    assert "behind the plain DataLoader" in note and "ahead" not in note
    note = page.nice_hybrid_note(_with_new_feeds(_result(model_pct=(70.0, 85.0)), hybrid_pct=85.0, nice_pct=85.0))
    assert "made no difference" in note and "level with the plain DataLoader" in note
    # the hybrid at both priorities: which one won is said, and the best one is quoted
    note = page.nice_hybrid_note(_with_new_feeds(_result(model_pct=(70.0, 60.0)), hybrid_pct=80.0, nice_pct=85.0,
                                                 hybrid_nice0_pct=95.0))
    assert "reached 95.5% of the ceiling at nice 0" in note and "at nice 10 against nice 0 it was slower" in note
    res = _with_new_feeds(_result(model_pct=(70.0, 60.0)))
    res.metadata["hybrid"] = dict(share=0.3, how="parameter", cpu_rate=2000.0, ceiling=4000.0, workers=8)
    assert "(`hybrid_share`)" in page.nice_hybrid_note(res)


def test_a_second_decoder_gets_its_own_primitive_sentence():
    """With spdl.io rows beside Pillow's, section 1 adds a line for spdl.io (its pool advice, which names the
    comparison) whose direction follows its own numbers (Pillow's finding stays the headline); without them there is
    none."""
    res = _result(thread_ips=1000, proc_ips=2000)
    assert [f.key for f in page.section_findings(res, "primitives")] == ["primitives.pillow"]
    prim = res.table("primitives")
    for t_ips, p_ips, word in ((3000.0, 2000.0, "faster"), (1500.0, 3000.0, "slower")):
        sp = prim.assign(decoder="spdl")
        sp["images_per_s"] = [(t_ips if e == "thread" else p_ips) * (0.5 if c == 1 else 1.0) * (1 + 0.01 * r)
                              for e, c, r in zip(sp["executor"], sp["concurrency"], sp["repeat"], strict=True)]
        res.tables["primitives"] = pd.concat([prim, sp], ignore_index=True)
        res.facts = None
        f = _by_key(res)["primitives"]
        assert "Pillow)" in f.text and "slower than processes" in f.text and f.value == pytest.approx(0.5, rel=0.02)
        pillow, spdl = page.section_findings(res, "primitives")
        assert "faster than a thread pool" in pillow.text and "Pillow)" in pillow.text and pillow.value == f.value
        assert "spdl.io)" in spdl.text
        sf = page.finding_primitives(res, "spdl", advice=False)
        assert f"× {word} than processes" in sf.text and spdl.value == sf.value
        assert [f.key for f in page.findings(res)] == ["primitives", "contention", "end_to_end", "cost",
                                                       "first_batch", "moonshot"]


def test_moonshot_ceiling_says_how_the_step_ran_and_follows_the_data():
    """The ceiling sentence names the step the feeds were measured with and compares it with the
    other step's ceiling in the direction the numbers give; reversed numbers reverse the words."""
    res = _result(model_pct=(95.0, 60.0))
    res.metadata.update(model_step="graphed", ceilings=dict(graphed=dict(images_per_s=4000.0),
                                                            eager=dict(images_per_s=3200.0)))
    res.metadata["ceiling"] = dict(images_per_s=4000.0)
    f = _by_key(res)["moonshot"]
    assert "its step replayed from CUDA graphs) runs at 4,000 images/s" in f.text
    assert "(1.25× faster than the eager step's ceiling)" in f.text
    res.metadata["ceilings"]["eager"] = dict(images_per_s=4800.0)
    assert "(1.20× slower than the eager step's ceiling)" in _by_key(res)["moonshot"].text
    res.metadata.update(model_step="eager", ceilings=dict(eager=dict(images_per_s=4000.0)),
                        graph_note="failed: RuntimeError: x")
    assert "the graphed step was not used (the graphed step failed (`RuntimeError: x`)" in _by_key(res)["moonshot"].text
    old = _by_key(_result())["moonshot"]           # an older result, without the step's kind: eager
    assert "its step launched op by op" in old.text


def test_graphed_step_without_a_gpu_says_why():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    graph, why = gil.bf16_graphed_step(torch.nn.Linear(2, 2), batch_size=2, out_size=8, classes=2, device="cpu")
    assert graph is None and why == "no_gpu" and "need a GPU" in page.GRAPH_SKIPS[why]
    assert gil.resolve(BASE)["model_step"] == "graphed"
    assert gil.resolve({**BASE, "model_step": "eager"})["model_step"] == "eager"


def _burn(seconds: float) -> None:
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def test_cpu_times_keep_the_time_of_ended_child_processes():
    """A worker that ended inside a timed window still counts: its CPU time moves to the parent's
    counters of waited-for children (the hybrid's workers end before its last batch is used)."""
    import multiprocessing as mp

    a = gil.cpu_times()
    p = mp.get_context("fork").Process(target=_burn, args=(0.3,))
    p.start()
    p.join()
    b = gil.cpu_times()
    assert b["user"] + b["system"] - a["user"] - a["system"] >= 0.25


def test_the_page_says_why_the_hybrid_did_not_run():
    res = _result(model_pct=(70.0, 60.0))
    m = res.table("model")
    res.tables["model"] = pd.concat([m, m[m["loader"] == "dataloader"].assign(nice=10)], ignore_index=True)
    res.metadata.update(model_worker_nice=10, hybrid=dict(share=None, skipped="torchvision", why="no module"))
    note = page.nice_hybrid_note(res)
    assert "The hybrid feed did not run (torchvision's JPEG decoder is not usable here: no module)." in note
    res.metadata["hybrid"] = dict(share=None, note="skipped: an older result's reason")   # results before the codes
    assert "The hybrid feed did not run (skipped: an older result's reason)." in page.nice_hybrid_note(res)


def test_findings_without_a_thread_loader_say_what_is_missing():
    res = _result()
    res.tables["loaders"] = res.table("loaders")[lambda d: d["loader"] == "dataloader"]
    assert "lacks one of them" in _by_key(res)["end_to_end"].text


def test_key_metrics_match_published_names():
    from datajourney.chapters import published

    names = {f.metric for f in published.figures("08_threads_processes_gil")}
    km = page.key_metrics(_result())   # no SPDL question in this result: the paper's comparison stays apart
    assert set(km) <= names and analysis.PUB_GAIN not in km
    assert analysis.PUB_TTFB4 in km and analysis.PUB_TTFB32 not in km


def test_findings_of_a_small_run(photos, tmp_path):
    res = harness.run("08_threads_processes_gil",
                      n_images=48, width=96, height=72, classes=3, out_size=16, batch_size=3, primitive_batch=4,
                  primitive_images=8, concurrency=[1, 2], decoders=["pillow"], repeats=1, dataloader_workers=[1],
                  thread_concurrency=[2], loader_batches=2, warm_batches=1, window_factor=1, start_methods=["fork"],
                  startup_workers=[1], startup_paths=[0, 100], epoch_paths=3000, memory_interval_s=0.02, gil_images=8,
                  ipc_batch_sizes=[4], moonshot=False, model="small_cnn", data_dir=photos.root.parent,
                  run_dir=tmp_path, progress=False)
    items = page.findings(results.Result.load(res.path))
    assert 3 <= len(items) <= 8 and len({f.key for f in items}) == len(items)
    for f in [page.finding_collate(res), page.finding_cpu_split(res), page.finding_epoch_memory(res)]:
        assert f is not None and f.text and not has_nan(f.text) and "None" not in f.text, f
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text, f
    lo = res.table("loaders")
    assert ((lo["warm"] + 1 + lo["batches"]) * 3 == lo["images_seen"]).all()   # first + warm + timed batches
    assert (lo["warm"] >= [gil.in_flight(k, c, batch_size=3) for k, c in zip(lo["loader"], lo["concurrency"])]).all()
    # the sweep's best thread setting (chosen by this machine's timings) may decode several images per task
    per_task = lo["images_per_task"] if "images_per_task" in lo else pd.Series(0, index=lo.index)
    assert (lo["batches"] == [gil.timed_batches(k, c, 2, batch_size=3, factor=1,
                                                images_per_task=0 if pd.isna(t) else int(t))
                              for k, c, t in zip(lo["loader"], lo["concurrency"], per_task)]).all()
    assert "window_rule" in res.metadata
    assert np.allclose(lo["added_pss_mb"] * 1e6, lo["pss_bytes"] - lo["base_pss_bytes"])
    # every thread loader with each decoder this machine runs, the DataLoader with the one chosen from section 1
    want = {"spdl", "pillow"} if SPDL_IO else {"pillow"}
    assert set(lo[lo["loader"] == "threadpool"]["decoder"]) == want
    assert set(lo[lo["loader"] == "dataloader"]["decoder"]) == {res.metadata["dataloader_decoder"]["decoder"]}
    assert set(res.table("epoch")["storage"]) == {"list", "numpy"} and len(res.table("epoch_memory")) > 0


def test_in_flight_depth_of_each_loader():
    assert gil.in_flight("dataloader", 8, batch_size=64, prefetch_factor=2) == 16
    assert gil.in_flight("dataloader", 0, batch_size=64) == 0
    assert gil.in_flight("threadpool", 8, batch_size=64) == 3      # 8 images + two batches of 64
    assert gil.in_flight("spdl", 32, batch_size=64) == 6


def test_old_windows_that_drained_a_queue_are_left_out_and_said_to_be_old():
    """Of a result timed with the old fixed windows, a window whose CPU per image is below one
    image's cost cannot have produced its images: left out, and the page says the rows are old."""
    res = _result(tp_ips=9000, dl_ips=2000, tp_cpu=0.2, old=True)     # 0.2 ms per image < 0.85 × 1 ms
    s = analysis.loader_summary(res).set_index(["loader", "concurrency"])
    assert not s.loc[("threadpool", 8), "steady"] and s.loc[("dataloader", 8), "steady"]
    f = _by_key(res)["end_to_end"]
    assert "lacks one of them" in f.text                       # the only thread loader was left out
    note = page.steady_note(res)
    assert note and "thread pool, 8 threads" in note and "left out" in note and "old timed windows" in note
    assert "old timed windows" in page.window_note(res)
    assert "no: old timed window, not steady" in set(page.loader_table(res)["in the findings"])
    kept = _result(old=True)
    assert "not in this result" in _by_key(kept)["cost"].text and analysis.PUB_MEM not in page.key_metrics(kept)
    assert page.steady_note(_result()) is None


def test_windows_sized_by_waves_that_counted_images_made_before_them_are_left_out():
    """Windows sized by waves can still count what a deep queue decoded before they opened (seen on a 64-core host:
    the SPDL pipeline's windows used 3% of one image's decode per image): under half that cost a row is left out,
    the page says why with its numbers, and the loader question is decided without it; above half it counts (a
    batch decode costs less per image than the one-image calibration)."""
    new = _result(tp_ips=9000, dl_ips=2000, tp_cpu=0.2)                 # 0.2 ms per image < 0.5 × 1 ms
    s = analysis.loader_summary(new).set_index(["loader", "concurrency"])
    assert not s.loc[("threadpool", 8), "steady"] and s.loc[("dataloader", 8), "steady"]
    assert "lacks one of them" in _by_key(new)["end_to_end"].text
    note = page.steady_note(new)
    assert note and "thread pool, 8 threads" in note and "decoded before they opened" in note
    assert "old timed windows" not in note and "whole waves" in page.window_note(new)
    cells = set(page.loader_table(new)["in the findings"])
    assert cells == {"yes", "no: CPU per image under 50% of one image's decode"}
    kept = _result(tp_ips=9000, dl_ips=2000, tp_cpu=0.6)                # 0.6 ms: counts in a window sized by waves
    assert analysis.loader_summary(kept)["steady"].all() and page.steady_note(kept) is None
    assert "in the findings" not in page.loader_table(kept)
    assert not analysis.loader_summary(_result(tp_ips=9000, dl_ips=2000, tp_cpu=0.6, old=True))["steady"].all()


class _Waves:
    """A fake DataLoader: ``workers`` workers start together and each delivers one batch every
    ``period`` seconds, so batches arrive in waves of ``workers`` (true rate: workers × batch /
    period images/s)."""

    def __init__(self, workers, period, batch=4):
        self.workers, self.period, self.batch = workers, period, batch

    def __call__(self):
        t0 = time.perf_counter()
        for i in range(10_000):
            due = t0 + (i // self.workers + 1) * self.period
            time.sleep(max(0.0, due - time.perf_counter()))
            yield torch.zeros(self.batch, 1), torch.arange(i * self.batch, (i + 1) * self.batch)

    @property
    def rate(self):
        return self.workers * self.batch / self.period


def test_a_short_window_overstates_a_loader_in_waves_and_whole_waves_do_not():
    fake = _Waves(workers=4, period=0.12)
    skip = gil.in_flight("dataloader", 4, batch_size=4)            # 8 batches: two waves
    short = gil.measure_loader(fake, batches=10, warm=skip, device="cpu")   # 2.5 waves, as the old windows
    assert short["images_per_s"] > 1.15 * fake.rate, (short["images_per_s"], fake.rate)
    n = gil.timed_batches("dataloader", 4, 10, batch_size=4)
    assert n == 32 and n % 4 == 0                                   # 4 × 8 in flight, whole waves of 4
    good = gil.measure_loader(fake, batches=n, warm=skip, device="cpu")
    assert abs(good["images_per_s"] / fake.rate - 1) < 0.08, (good["images_per_s"], fake.rate)
    # the thread pool makes one image per task: no waves, its window is not rounded
    assert gil.wave("threadpool", 32) == 1 and gil.in_flight("threadpool", 32, batch_size=64) == 3


def test_loader_memory_is_the_whole_trees_pss_and_its_increase_is_not_negative_after_a_fork(photos):
    """After fork the main process's PSS and USS fall as its pages become shared; the PSS summed
    over the tree is conserved, so the loader's increase stays >= 0 (the old main-process-only
    baseline could go negative)."""
    files = [str(f) for f in photos.files]
    mk = gil.make_loader("dataloader", files, list(range(len(files))), batch_size=8, out_size=32,
                         concurrency=2, decoder="pillow", device="cpu")
    row = gil.measure_loader(mk, batches=2, warm=2, device="cpu")
    assert row["processes"] == 3 and row["base_processes"] == 1
    assert row["added_pss_mb"] * 1e6 == pytest.approx(row["pss_bytes"] - row["base_pss_bytes"])
    assert row["added_pss_mb"] > 0 and row["uss_bytes"] <= row["pss_bytes"]
    tp = gil.measure_loader(gil.make_loader("threadpool", files, list(range(len(files))), batch_size=8, out_size=32,
                                            concurrency=2, decoder="pillow", device="cpu"),
                            batches=2, warm=2, device="cpu")
    assert tp["processes"] == 1 and tp["added_pss_mb"] > -8.4   # no fork: only noise below zero


def test_gpu_share_note_follows_the_data():
    res = _result()
    res.tables["loaders"] = pd.concat([res.table("loaders"), pd.DataFrame([dict(
        loader="nvjpeg", concurrency=8, repeat=0, decoder="pillow", resident_at_start=0.0, first_batch_s=0.5,
        images=1920, seconds=0.15, images_per_s=12800.0, cpu_user_s=0.1, cpu_system_s=0.1, cpu_cores=1.0,
        pss_bytes=1e8, uss_bytes=1e8, base_pss_bytes=1e8, added_pss_bytes=0.0, batches=30, processes=1,
        images_seen=2000)])],
        ignore_index=True)
    # step 16 ms (4000 img/s), decode 5 ms per 64 -> 76% if they take turns; measured 95% -> overlap
    assert "ran beside the training kernels" in page.gpu_share_note(res)
    res2 = _result(model_pct=(60.0, 50.0))
    res2.tables["loaders"] = res.table("loaders")
    assert "something besides" in page.gpu_share_note(res2)


# --------------------------------------------------------------------------- primitives: enough work for every worker
def test_primitive_points_give_every_worker_two_batches():
    assert gil.primitive_images_at(1, 256, 32, 5000) == 256
    assert gil.primitive_images_at(8, 256, 32, 5000) == 512
    assert gil.primitive_images_at(32, 256, 32, 5000) == 2048
    assert gil.primitive_images_at(32, 256, 32, 1000) == 1000     # capped by the data set


# --------------------------------------------------------------------------- SPDL per-stage statistics
def test_spdl_pipeline_records_per_stage_statistics(photos):
    pytest.importorskip("spdl.pipeline")
    files = [str(photos.path(i)) for i in range(photos.n_images)]
    stages = gil.SpdlStages()
    mk = gil.make_loader("spdl", files, list(range(40)), batch_size=4, out_size=32, concurrency=2,
                         decoder="pillow", device="cpu", stages=stages)
    row = gil.measure_loader(mk, batches=4, warm=2, device="cpu", stages=stages)
    st = pd.DataFrame(row["stages"])
    assert {"decode", "aggregate", "collate", "sink"} <= set(st["stage"]) and row["images"] == 16
    assert ((st["out_occupancy"] >= 0) & (st["out_occupancy"] <= 1)).all()
    # over a whole pass, the decode stage ran one task per image, the collate stage one per batch
    stages = gil.SpdlStages()
    it = gil.spdl_iter(files, list(range(40)), batch_size=4, out_size=32, concurrency=2, stages=stages)
    stages.lap()
    assert sum(int(y.numel()) for _, y in it) == 40
    st = pd.DataFrame(stages.lap()).set_index("stage")
    assert st.loc["decode", "stage_concurrency"] == 2 and st.loc["decode", "tasks"] == 40
    assert st.loc["collate", "tasks"] == 10 and st.loc["decode", "task_ms"] > 0
    assert 0 < st.loc["decode", "busy"] <= 1.05


def _with_stages(res, *, limit="collate", decode_ms=(1.0, 1.1), unit=1.0, read_ms=0.2):
    """Constructed SPDL rows: ``limit`` is the stage busy 95% of the window at the top thread count."""
    res.tables["calibration"] = pd.DataFrame([dict(decoder="pillow", decode_ms=0.8 * unit, resize_ms=0.2 * unit)])
    lo = res.table("loaders")
    sp = lo[lo["loader"] == "threadpool"].assign(loader="spdl", concurrency=4)
    sp2 = sp.assign(concurrency=16)
    res.tables["loaders"] = pd.concat([lo, sp, sp2], ignore_index=True)
    rows = []
    for c, dms in ((4, decode_ms[0]), (16, decode_ms[1])):
        for stage, sc in (("src", 1), ("decode", c), ("aggregate", 1), ("collate", 1), ("sink", 1)):
            busy = None if stage in ("src", "sink") else (0.95 if (c == 16 and stage == limit) else 0.3)
            rows.append(dict(loader="spdl", concurrency=c, repeat=0, stage=stage, stage_concurrency=sc,
                             window_s=1.0, out_items=100, out_occupancy=0.9 if stage == "src" else 0.1,
                             out_put_wait_ms=0.1, out_get_wait_ms=1.0, tasks=None if busy is None else 100,
                             task_ms=None if busy is None else (dms + read_ms if stage == "decode" else 5.0),
                             busy=busy, read_ms=read_ms if stage == "decode" else None,
                             decode_ms=0.8 * dms if stage == "decode" else None,
                             resize_ms=0.2 * dms if stage == "decode" else None))
    res.add("spdl_stages", rows)
    return res


def test_spdl_limit_note_names_the_stage_the_data_show():
    text = page.spdl_limit_note(_with_stages(_result(), limit="collate"))
    assert "collate stage, after decoding, limits the pipeline" in text and "GIL is not" in text
    text = page.spdl_limit_note(_with_stages(_result(), limit="decode", decode_ms=(1.0, 4.0), unit=1.0))
    assert "so the GIL limits the pipeline" in text and "4.0×" in text
    text = page.spdl_limit_note(_with_stages(_result(), limit="decode", decode_ms=(1.0, 1.1), unit=1.0))
    assert "too few" in text and "GIL limits" not in text
    text = page.spdl_limit_note(_with_stages(_result(), limit="decode", decode_ms=(1.0, 1.0), read_ms=5.0))
    assert "storage latency limits the pipeline" in text and "5 ms reading" in text
    res = _with_stages(_result(), limit="decode", decode_ms=(1.0, 1.0), read_ms=0.5)
    t = res.tables["spdl_stages"]
    res.tables["spdl_stages"] = t.assign(
        task_ms=[v + 4.0 if st == "decode" else v for v, st in zip(t["task_ms"], t["stage"])]
    )
    text = page.spdl_limit_note(res)
    assert "hand-off between the event loop and the threads" in text and "4 ms handing" in text
    text = page.spdl_limit_note(_with_stages(_result(), limit="none"))
    assert "No stage was busy" in text


def test_spdl_limit_note_says_when_the_result_has_no_stage_statistics():
    res = _result()
    assert analysis.spdl_stages_frame(res).empty and page.spdl_limit(res) is None
    lo = res.table("loaders")
    res.tables["loaders"] = pd.concat([lo, lo[lo["loader"] == "threadpool"].assign(loader="spdl")], ignore_index=True)
    assert "not in the reference run" in page.spdl_limit_note(res)


def test_full_profile_windows_skip_every_loader_queue(monkeypatch):
    """On a 16-core host, the full profile's timed windows start after the batches the deepest loaders keep in
    flight (DataLoader 16 workers: 32), hold at least window_factor (2) times those in flight in whole waves
    (64 batches, 4 waves of 16), and the data set ("auto") holds them all, for the loaders and the model-fed
    runs (the hybrid: 7,488 images)."""
    import os

    from datajourney.book import runner
    from datajourney.core import params as core_params

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    monkeypatch.setattr(core_params, "memory", lambda *a, **k: None)
    full = {**runner.profiles()["full"]["08_threads_processes_gil"], "paper": False}
    q = gil.resolve(full)   # every "auto" and every host-scaled sweep resolved for 16 cores
    prof = dict(q)
    assert q["n_images"] == 7488
    plan = gil.loader_windows(q)
    assert q["window_factor"] >= 2 and ("dataloader", 16, 32, 32 * q["window_factor"]) in plan
    for kind, c, warm, timed in plan:
        assert (
            timed >= q["window_factor"] * gil.in_flight(kind, c, batch_size=q["batch_size"])
            and timed % gil.wave(kind, c) == 0
        )
        assert (warm + timed + 1) * q["batch_size"] <= prof["n_images"]
        steps = gil.timed_batches(kind, c, prof["model_steps"], batch_size=q["batch_size"], factor=q["window_factor"])
        assert (max(warm, prof["model_warmup"]) + steps + 1) * q["batch_size"] <= prof["n_images"]
    # the model fed by the hybrid at the most workers: the DataLoader's batches and those on the GPU side
    w = max(q["dataloader_workers"])
    warm = max(prof["model_warmup"], gil.in_flight("hybrid", w, batch_size=q["batch_size"]))
    steps = gil.timed_batches("hybrid", w, prof["model_steps"], batch_size=q["batch_size"], factor=q["window_factor"])
    assert warm == 2 * w + params8.GPU_QUEUE_DEPTH + 1 and steps % w == 0
    assert (warm + steps + 1) * q["batch_size"] <= prof["n_images"]


@pytest.mark.parametrize("cy, cx, r", [(5.0, 7.0, 3.5), (0.2, 0.3, 6.0), (11.9, 15.9, 4.0), (6.0, 8.0, 40.0)])
def test_a_disc_blends_exactly_the_pixels_a_full_frame_mask_would(cy, cx, r):
    """Drawing inside the bounding box changes the same pixels, by the same amount, as a mask over the
    whole image, at the edges and for a disc larger than the image too."""
    rng = np.random.default_rng(1)
    img = rng.uniform(0, 255, (12, 16, 3)).astype(np.float32)
    colour = np.array([10, 200, 90], np.float32)
    want = img.copy()
    yy, xx = np.mgrid[0:12, 0:16]
    m = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
    want[m] = want[m] * 0.5 + colour * 0.5
    gil.blend_disc(img, cy, cx, r, colour)
    assert m.any() and np.array_equal(img, want)



# --------------------------------------------------------------------------- spdl.io loaders and the collate check
@pytest.mark.skipif(not SPDL_IO, reason="spdl.io cannot load FFmpeg's libraries here")
@pytest.mark.parametrize("kind", ["spdl", "threadpool"])
def test_thread_loaders_with_spdl_io_yield_every_image_once_with_spdl_io_pixels(photos, kind):
    """With spdl.io the thread loaders convert a whole batch of frames at once: every image once, in
    order, and the pixels spdl.io gives one image at a time."""
    files = [str(p) for p in photos.files]
    order = [int(i) for i in np.random.default_rng(2).permutation(len(files))]
    mk = gil.make_loader(kind, files, order, batch_size=5, out_size=32, concurrency=3, decoder="spdl", device="cpu")
    x, y = _collect(mk())
    assert y.tolist() == order and x.shape == (len(files), 3, 32, 32) and x.dtype == torch.uint8
    ref = np.stack([gil.decode_one("spdl", Path(files[i]).read_bytes(), 32) for i in order])
    assert torch.equal(x, torch.from_numpy(ref).permute(0, 3, 1, 2))


@pytest.mark.parametrize("decoder", ["pillow", pytest.param("spdl", marks=pytest.mark.skipif(
    not SPDL_IO, reason="spdl.io cannot load FFmpeg's libraries here"))])
def test_pipeline_decoding_into_batch_rows_gives_the_collated_batches(photos, decoder):
    """The collate check's pipeline: each image written into its batch's row, batches handed on whole, in
    order, the last one short, the same pixels as the pipeline that collates."""
    pytest.importorskip("spdl.pipeline")
    files = [str(p) for p in photos.files]
    order = [int(i) for i in np.random.default_rng(3).permutation(len(files))]
    got = list(gil.make_loader("spdl_prealloc", files, order, batch_size=5, out_size=32, concurrency=4,
                               decoder=decoder, device="cpu")())
    assert [len(y) for _, y in got] == [5] * 9 + [3]
    x, y = torch.cat([b[0] for b in got]), torch.cat([b[1] for b in got])
    ref, ref_y = _collect(gil.make_loader("spdl", files, order, batch_size=5, out_size=32, concurrency=4,
                                          decoder=decoder, device="cpu")())
    assert y.tolist() == ref_y.tolist() == order and torch.equal(x, ref)


def test_batch_slots_allocate_each_batch_once_and_hand_it_over_once():
    slots = gil.BatchSlots(batch_size=4, out_size=2, total=10)
    for k in range(10):
        slots.row(k)[...] = k
    first, last = slots.take(0), slots.take(9)
    assert first.shape == (4, 2, 2, 3) and last.shape == (2, 2, 2, 3)      # the last batch holds what is left
    assert first[:, 0, 0, 0].tolist() == [0, 1, 2, 3] and last[:, 0, 0, 0].tolist() == [8, 9]
    with pytest.raises(KeyError):
        slots.take(1)                                                      # handed over: forgotten here


def test_dataloader_decoder_is_the_best_in_processes_or_the_parameter():
    prim = pd.DataFrame([dict(decoder=d, executor=e, concurrency=c, images_per_s=v)
                         for d, e, c, v in (("pillow", "process", 4, 900.0), ("pillow", "process", 8, 1500.0),
                                            ("spdl", "process", 8, 1400.0), ("spdl", "thread", 8, 9000.0))])
    got = gil.dataloader_decoder_choice(prim, "auto")
    assert got == dict(decoder="pillow", how="auto", peaks={"pillow": 1500.0, "spdl": 1400.0})   # threads ignored
    prim.loc[2, "images_per_s"] = 1600.0
    assert gil.dataloader_decoder_choice(prim, "auto")["decoder"] == "spdl"
    assert gil.dataloader_decoder_choice(prim, "pillow")["how"] == "parameter"
    assert gil.dataloader_decoder_choice(prim[prim["executor"] == "thread"], "auto")["how"] == "no_process_sweep"


def test_loader_plan_runs_each_thread_loader_with_each_decoder_and_the_collate_check_once_per_repeat():
    p = dict(repeats=2, loaders=["dataloader", "spdl", "threadpool"], dataloader_workers=[4, 8],
             thread_concurrency=[8, 16], thread_decoders=["spdl", "pillow"], collate_check=True, read_threads=8)
    plan = gil.plan_loaders(p, gpu_decode=True)
    assert ("dataloader", 8, None, 1) in plan and ("threadpool", 16, "spdl", 0) in plan
    assert [t for t in plan if t[0] == "spdl_prealloc"] == [("spdl_prealloc", 16, "pillow", 0),
                                                             ("spdl_prealloc", 16, "pillow", 1)]
    assert len(plan) == 2 * (2 + 2 * 2 * 2 + 1 + 1)
    assert not [t for t in gil.plan_loaders({**p, "thread_decoders": ["spdl"]}, gpu_decode=False)
                if t[0] in ("spdl_prealloc", "nvjpeg")]


@pytest.mark.parametrize("name,value", [("thread_decoders", ["libjpeg"]), ("dataloader_decoder", "dali"),
                                        ("collate_check", "yes"), ("epoch_paths", -1), ("epoch_batch_size", 0),
                                        ("epoch_workers", 0), ("memory_interval_s", 0)])
def test_bad_new_parameters_fail_early_naming_the_parameter(name, value):
    with pytest.raises(ParameterError, match=name) as e:
        gil.resolve({**BASE, name: value})
    assert "\n" not in str(e.value)


def test_thread_decoders_without_ffmpeg_fail_up_front_and_auto_keeps_pillow(monkeypatch):
    monkeypatch.setattr(gil, "ffmpeg_status", lambda: (False, "FFmpeg's libraries did not load"))
    with pytest.raises(ParameterError, match="thread_decoders"):
        gil.resolve({**BASE, "thread_decoders": ["spdl"]})
    with pytest.raises(ParameterError, match="dataloader_decoder"):
        gil.resolve({**BASE, "dataloader_decoder": "spdl"})
    monkeypatch.setattr(gil, "decoder_status", lambda: {"pillow": (True, ""), "spdl": (False, "no FFmpeg"),
                                                        "torchvision": (False, "none")})
    assert gil.resolve(BASE)["thread_decoders"] == ["pillow"]


def _with_spdl_io(res, *, spdl_ips=6000.0):
    """Constructed rows of the thread pool decoding with spdl.io beside the Pillow loaders."""
    lo = res.table("loaders")
    sp = lo[lo["loader"] == "threadpool"].assign(decoder="spdl")
    sp["images_per_s"] = [spdl_ips * (1 + 0.01 * r) for r in sp["repeat"]]
    res.tables["loaders"] = pd.concat([lo, sp], ignore_index=True)
    res.tables["calibration"] = pd.concat([res.table("calibration"), pd.DataFrame(
        [dict(decoder="spdl", decode_ms=1.0, resize_ms=0.0)])], ignore_index=True)
    return res


def test_headline_sets_the_spdl_io_threads_against_the_dataloader_and_names_both_decoders():
    res = _with_spdl_io(_result(tp_ips=3000, dl_ips=2000), spdl_ips=1000.0)
    f = _by_key(res)["end_to_end"]
    # the paper's setting is the headline even when the Pillow threads were faster
    assert "(thread pool, 8 threads, spdl.io)" in f.text and "2.0× slower than the DataLoader" in f.text
    note = page.decoder_note(res)
    assert "the best thread loader with Pillow (thread pool, 8 threads) ran 1.50× faster" in note
    # spdl.io's threads against the DataLoader are the key result's comparison, not said again here
    assert "with spdl.io" not in note.split("Against its best")[1]
    assert "No loader of this result decoded with spdl.io" in page.decoder_note(_result())


def test_cpu_split_follows_the_user_and_system_times():
    f = page.finding_cpu_split(_result())          # constructed: 70% user, 30% system
    assert "spent 30% in the kernel" in f.text and "unlike the paper" in f.text
    res = _result()
    lo = res.table("loaders")
    res.tables["loaders"] = lo.assign(cpu_user_s=lo["cpu_system_s"], cpu_system_s=lo["cpu_user_s"])
    f = page.finding_cpu_split(res)
    assert "spent 70% in the kernel" in f.text and "as in the paper" in f.text
    assert f.value == pytest.approx(70.0)


def test_startup_note_names_the_workers_and_follows_the_data():
    res = _result()
    note = page.startup_note(res)
    assert "With an empty Dataset and 4 workers" in note and "fresh interpreter" in note
    st = res.table("startup")
    res.tables["startup"] = st.assign(first_batch_s=[3.0 if m == "fork" else 0.05 for m in st["start_method"]])
    note = page.startup_note(res)
    assert "imports torch" not in note and "forking this process cost more" in note


def _with_collate_check(res, *, pre_ips):
    lo = res.table("loaders")
    base = lo[lo["loader"] == "threadpool"].assign(loader="spdl", concurrency=16)
    pre = base.assign(loader="spdl_prealloc", images_per_s=[pre_ips * (1 + 0.01 * r) for r in base["repeat"]])
    res.tables["loaders"] = pd.concat([lo, base, pre], ignore_index=True)
    return res


def test_collate_check_says_whether_the_collate_stage_held_the_pipeline():
    f = page.finding_collate(_with_collate_check(_result(tp_ips=1000.0), pre_ips=2500.0))
    assert "2.5× faster than the pipeline with its collate stage" in f.text and "holding it back" in f.text
    assert f.value == pytest.approx(2.5)
    f = page.finding_collate(_with_collate_check(_result(tp_ips=1000.0), pre_ips=1000.0))
    assert "level with the pipeline with its collate stage" in f.text and "holding it back" not in f.text
    f = page.finding_collate(_with_collate_check(_result(tp_ips=1000.0), pre_ips=500.0))
    assert "2.0× slower than the pipeline with its collate stage" in f.text
    assert page.finding_collate(_result()) is None


def _with_epoch(res, *, list_uss=(180e6, 190e6), numpy_uss=(60e6, 62e6), thread_growth=1e6):
    """Constructed epochs: DataLoader workers ending with ``list_uss`` / ``numpy_uss`` private bytes."""
    ep, mem = [], []
    for loader in ("dataloader", "spdl"):
        for storage, uss in (("list", list_uss), ("numpy", numpy_uss)):
            ep.append(dict(loader=loader, storage=storage, n_paths=1_281_167, workers=2, items=1_281_167,
                           seconds=5.0, dataset_pss_mb=150.0 if storage == "list" else 80.0, samples=5))
            mem.append(dict(loader=loader, storage=storage, t=0.0, process="main", pss_bytes=500e6, uss_bytes=400e6))
            if loader == "dataloader":
                mem += [dict(loader=loader, storage=storage, t=t, process=f"worker {k + 1}", pss_bytes=u + 40e6 * t,
                             uss_bytes=u * t / 4) for t in (1.0, 4.0) for k, u in enumerate(uss)]
                mem.append(dict(loader=loader, storage=storage, t=4.0, process="main", pss_bytes=400e6,
                                uss_bytes=300e6))
            else:
                mem.append(dict(loader=loader, storage=storage, t=4.0, process="main", pss_bytes=500e6 + thread_growth,
                                uss_bytes=400e6))
    res.add("epoch", ep)
    res.add("epoch_memory", mem)
    return res


def test_epoch_memory_finding_and_note_follow_the_workers_private_memory():
    res = _with_epoch(_result())
    f = page.finding_epoch_memory(res)
    assert "185 MB of private memory with a Python list, 61 MB with a NumPy array" in f.text
    assert "**3.0× more than with the array**" in f.text and f.value == pytest.approx(185 / 61, rel=0.01)
    # the thread pipeline's growth is the table's (one process, 1 MB), the section's finding adds the DataLoader's
    t = page.epoch_table(res)
    assert t[t["loader"] == "SPDL pipeline"]["all processes' PSS growth over the epoch (MB)"].tolist() == [1.0, 1.0]
    assert "the list more, as copy-on-read predicts" in page.epoch_note(res)
    assert page.section_findings(res, "epoch_memory")[0].text == f.text + " " + page.epoch_note(res)
    same = _with_epoch(_result(), list_uss=(60e6, 62e6))
    assert "**about the same as with the array, within 0.5%**" in page.finding_epoch_memory(same).text
    assert "did not show" in page.epoch_note(same)
    assert len(page.epoch_table(res)) == 4 and set(page.epoch_lines(res)["series"]) == {
        "main process", "each worker (mean)", "all processes"}
    page.epoch_chart(res)
    assert page.finding_epoch_memory(_result()) is None


def test_epoch_copies_the_path_list_into_each_worker_and_not_the_array():
    """A real epoch over 200,000 paths in two forked workers: reading a Python list's strings copies its
    pages into every worker (tens of MB each), reading a NumPy array does not; threads stay one process."""
    pytest.importorskip("spdl.pipeline")
    uss = {}
    for storage in gil.PATH_STORAGE:
        row, samples = gil.epoch_point("dataloader", storage, 200_000, workers=2, batch_size=512, interval=0.05)
        m = pd.DataFrame(samples)
        last = m.sort_values("t").groupby("process").tail(1)
        w = last[last["process"] != "main"]
        assert row["items"] == 200_000 and len(w) == 2
        uss[storage] = w["uss_bytes"].mean()
    assert uss["list"] - uss["numpy"] > 8e6, uss
    row, samples = gil.epoch_point("spdl", "list", 20_000, workers=2, batch_size=512, interval=0.05)
    assert row["items"] == 20_000 and {s["process"] for s in samples} == {"main"}


def test_dali_is_said_to_be_unmeasured_with_no_figures():
    res = _result()
    res.metadata["dali"] = dict(installed=False)
    assert "not measured" in page.dali_note(res) and "not installed here" in page.dali_note(res)
    res.metadata["dali"] = dict(installed=True)
    assert "installed here, but the chapter has no DALI loader" in page.dali_note(res)


def test_opening_is_short_and_follows_reversed_loaders():
    """Constructed run: threads 1.5× faster -> "use the thread pool" with a pipeline snippet; DataLoader
    1.5× faster -> "keep the DataLoader" with the DataLoader(...) call and its workers."""
    from datajourney.core import phrasing as fx
    res = _with_epoch(_result(tp_ips=3000.0, dl_ips=2000.0))
    res.parameters.update(batch_size=64, out_size=224, prefetch_factor=2)
    op = page.opening(res)
    assert [f.key for f in op.findings] == ["end_to_end", "cost", "epoch_memory"]
    assert all(fx.words(f.text) <= fx.OPENING_WORDS and f.value is not None for f in op.findings)
    assert "1.50× faster than" in op.findings[0].text
    assert "use `concurrent.futures.ThreadPoolExecutor` (at `max_workers=8`)" in op.actions[0].text
    assert "ThreadPoolExecutor(8)" in op.actions[0].snippet and "np.stack" in op.actions[0].snippet
    assert "NumPy array" in op.actions[1].text and "np.bytes_" in op.actions[1].snippet
    res = _with_epoch(_result(tp_ips=2000.0, dl_ips=3000.0), list_uss=(60e6, 62e6))
    op = page.opening(res)
    assert "1.50× slower than" in op.findings[0].text
    assert "keep the default `torch.utils.data.DataLoader` with `num_workers=8`" in op.actions[0].text
    assert "num_workers=8" in op.actions[0].snippet and "Keep the paths as they are" in op.actions[1].text
