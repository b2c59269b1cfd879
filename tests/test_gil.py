"""Chapter 8: data, loaders (every image once, order, same pixels), bad input, findings that follow the data."""

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import has_nan
from torch.utils.data import Dataset

from datajourney.chapters.c08_threads_processes_gil import experiment as gil
from datajourney.chapters.c08_threads_processes_gil import page
from datajourney.core import results
from datajourney.core.params import ParameterError

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
    h = {}
    feeds = gil.moonshot_feeds(lo, {"images_per_s": 4000.0}, tv=(True, ""), nice=10, read_threads=8, hybrid=h)
    assert feeds == [("threadpool", 16, 0, None), ("dataloader", 16, 0, None), ("dataloader", 16, 10, None),
                     ("nvjpeg", 8, 0, None), ("hybrid", 16, 10, 0.7)]     # 0.8 × 3400.5 / 4000 = 0.68 -> 0.70
    assert h == dict(share=0.7, rule=gil.HYBRID_RULE, cpu_rate=3400.5, ceiling=4000.0, workers=16)
    h = {}
    feeds = gil.moonshot_feeds(lo, {"images_per_s": 4000.0}, tv=(True, ""), nice=0, read_threads=8, share=0.25,
                               hybrid=h)
    assert [f for f in feeds if f[2]] == [] and feeds[-1] == ("hybrid", 16, 0, 0.25) and h["rule"] == gil.HYBRID_MANUAL
    h = {}
    feeds = gil.moonshot_feeds(lo, {"images_per_s": 4000.0}, tv=(False, "no torchvision"), nice=10, read_threads=8,
                               hybrid=h)
    assert {f[0] for f in feeds} == {"dataloader", "threadpool"} and "no torchvision" in h["note"]
    h = {}
    gil.moonshot_feeds(lo[lo["loader"] != "dataloader"], {"images_per_s": 4000.0}, tv=(True, ""), nice=10,
                       read_threads=8, hybrid=h)
    assert "DataLoader's sweep" in h["note"]


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
        gil.check_parameters({**BASE, name: value})
    assert "\n" not in str(e.value)


def test_good_hybrid_and_nice_parameters_are_accepted():
    q = gil.check_parameters({**BASE, "hybrid_share": 0.25, "model_worker_nice": 0})
    assert q["hybrid_share"] == 0.25 and q["model_worker_nice"] == 0
    q = gil.check_parameters(BASE)
    assert q["hybrid_share"] == "auto" and q["model_worker_nice"] == 10
    assert gil.check_parameters({**BASE, "hybrid_share": 1})["hybrid_share"] == 1.0


def test_spdl_decoder_without_ffmpeg_fails_up_front_and_auto_skips_it(monkeypatch):
    monkeypatch.setattr(gil, "ffmpeg_status", lambda: (False, "FFmpeg's libraries did not load"))
    with pytest.raises(ParameterError, match="decoders"):
        gil.check_parameters({**BASE, "decoders": ["pillow", "spdl"]})
    monkeypatch.setattr(gil, "decoder_status", lambda: {"pillow": (True, ""), "spdl": (False, "no FFmpeg"),
                                                        "torchvision": (False, "none")})
    assert gil.check_parameters({**BASE, "decoders": "auto"})["decoders"] == ["pillow"]


def test_spdl_pipeline_on_a_gpu_without_spdl_io_fails_up_front(monkeypatch):
    """On a CUDA host the SPDL pipeline's last stage needs spdl.io: missing, it is a one-line error
    naming `loaders` before any work, not a failure in the middle of the run."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(gil.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m == "spdl.io" else real(m, *a))
    with pytest.raises(ParameterError, match="loaders") as e:
        gil.check_parameters({**BASE, "loaders": ["dataloader", "spdl"], "decoders": ["pillow"]})
    assert "spdl-io" in str(e.value)
    gil.check_parameters({**BASE, "loaders": ["dataloader", "threadpool"], "decoders": ["pillow"]})


def test_moonshot_required_without_a_gpu_is_an_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ParameterError, match="moonshot"):
        gil.check_parameters({**BASE, "moonshot": True})


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
        for kind, c, ips, cpu, mem in (("dataloader", 8, dl_ips, dl_cpu, dl_mem), ("threadpool", 8, tp_ips, tp_cpu, tp_mem),
                                      ("dataloader", 2, dl_ips / 3, dl_cpu, dl_mem / 4)):
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
    res = results.Result(chapter=gil.CHAPTER, run_id="constructed", parameters={}, fingerprint={})
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


def _by_key(res):
    return {f.key: f for f in page.findings(res)}


def test_findings_threads_faster_and_slower_than_processes():
    f = _by_key(_result(thread_ips=2000, proc_ips=1000))["primitives"]
    assert "2.0× faster than processes" in f.text and f.value == pytest.approx(2.0, rel=0.02)
    f = _by_key(_result(thread_ips=1000, proc_ips=2000))["primitives"]
    assert "2.0× slower than processes" in f.text
    f = _by_key(_result(thread_ips=1000, proc_ips=1005))["primitives"]
    assert "level with" in f.text


def test_findings_contention_follows_per_op_times():
    f = _by_key(_result(thread_decode=(4.0, 8.0), proc_decode=4.2))["contention"]
    assert "interpreter lock" in f.text and "extra" in f.text and f.value == pytest.approx(2.0)
    f = _by_key(_result(thread_decode=(4.0, 4.1), proc_decode=4.1))["contention"]
    assert "did not slow this operation down" in f.text


def test_findings_end_to_end_and_target_follow_the_data():
    f = _by_key(_result(tp_ips=3000, dl_ips=1500))["end_to_end"]
    assert "2.0× faster than the DataLoader" in f.text and "meets the 1.50× target" in f.text
    assert f.value == pytest.approx(100, abs=2) and f.published == page.PUB_GAIN
    f = _by_key(_result(tp_ips=1500, dl_ips=3000))["end_to_end"]
    assert "2.0× slower than the DataLoader" in f.text and "short of the 1.50× target" in f.text
    assert f.value < 0


def test_findings_cpu_and_memory_follow_the_data():
    f = _by_key(_result(tp_cpu=1.0, dl_cpu=2.0, tp_mem=1e8, dl_mem=3e9))["cost"]
    assert "50% less CPU" in f.text and "the threads took less" in f.text
    f = _by_key(_result(tp_cpu=3.0, dl_cpu=2.0, tp_mem=3e9, dl_mem=1e8))["cost"]
    assert "50% more CPU" in f.text and "the threads took more" in f.text


def test_findings_first_batch_names_the_slowest_start_method():
    f = _by_key(_result())["first_batch"]
    assert "slowest start method was spawn" in f.text and f.value == pytest.approx(7.0)
    assert "added 4 s" in f.text


def test_findings_moonshot_meets_or_misses_the_target():
    f = _by_key(_result(model_pct=(95.0, 60.0)))["moonshot"]
    assert "meets the 90% target" in f.text and "GPU decode" in f.text
    f = _by_key(_result(model_pct=(70.0, 80.0)))["moonshot"]
    assert "short of the 90% target" in f.text and "DataLoader" in f.text
    f = _by_key(_result(cuda=False))["moonshot"]
    assert "did not run here" in f.text and f.value is None


def _with_new_feeds(res, *, hybrid_pct=95.0, nice_pct=85.0, share=0.45):
    """Constructed model-fed rows of the niced DataLoader and the hybrid, beside the older feeds."""
    rows = [dict(loader=kind, concurrency=8, repeat=r, resident_at_start=0.0, nice=10, share=sh,
                 pct_of_ceiling=v + r, images_per_s=40 * (v + r), first_batch_s=1.0, wait_share=0.01,
                 compute_ms=16.0, cpu_cores=4.0, seconds_total=3.0)
            for r in range(2) for kind, v, sh in (("dataloader", nice_pct, None), ("hybrid", hybrid_pct, share))]
    res.tables["model"] = pd.concat([res.table("model"), pd.DataFrame(rows)], ignore_index=True)
    res.metadata.update(model_worker_nice=10, hybrid=dict(share=share, rule=gil.HYBRID_RULE, cpu_rate=2000.0,
                                                          ceiling=4000.0, workers=8, nice=10, note=None))
    return res


def test_moonshot_names_the_best_feed_among_niced_and_hybrid_feeds(tmp_path):
    res = _with_new_feeds(_result(model_pct=(70.0, 60.0)), hybrid_pct=95.0, nice_pct=85.0)
    f = _by_key(res)["moonshot"]
    assert "fastest feed was DataLoader + nvJPEG, 8 workers at nice 10 (45% decoded on the CPU) at" in f.text
    assert "meets the 90% target" in f.text and f.value == pytest.approx(95.5)
    assert "DataLoader, 8 workers at nice 10 85.5%" in f.text and "DataLoader, 8 workers 60.5%" in f.text
    assert page.WHY_NICE_HYBRID in f.text and "decoded 45% of each batch in 8 DataLoader workers" in f.text
    t = page.model_table(res)
    assert len(t) == 4 and t["feed"].is_unique                  # niced and plain DataLoader kept apart
    assert len(page.model_bars(res)) == 4
    f2 = _by_key(_with_new_feeds(_result(model_pct=(70.0, 60.0)), hybrid_pct=75.0, nice_pct=85.0))["moonshot"]
    assert "fastest feed was DataLoader, 8 workers at nice 10" in f2.text and "short of the 90% target" in f2.text
    # saved and loaded (the shares of the other feeds come back as missing values): the same text
    back = results.Result.load(res.save(tmp_path))
    assert _by_key(back)["moonshot"].text == f.text
    # a result without the new feeds (as the reference) keeps its old text, without the new sentence
    old = _by_key(_result())["moonshot"]
    assert page.WHY_NICE_HYBRID not in old.text and "meets the 90% target" in old.text


def test_a_second_decoder_gets_its_own_primitive_sentence():
    """With spdl.io rows beside Pillow's, the primitive finding adds a sentence for spdl.io whose
    direction follows its own numbers (Pillow's figure stays the headline); without them there is none."""
    res = _result(thread_ips=1000, proc_ips=2000)
    assert "With spdl.io" not in _by_key(res)["primitives"].text
    prim = res.table("primitives")
    for t_ips, p_ips, word in ((3000.0, 2000.0, "faster"), (1500.0, 3000.0, "slower")):
        sp = prim.assign(decoder="spdl")
        sp["images_per_s"] = [(t_ips if e == "thread" else p_ips) * (0.5 if c == 1 else 1.0) * (1 + 0.01 * r)
                              for e, c, r in zip(sp["executor"], sp["concurrency"], sp["repeat"], strict=True)]
        res.tables["primitives"] = pd.concat([prim, sp], ignore_index=True)
        f = _by_key(res)["primitives"]
        pillow, spdl = f.text.split("With spdl.io, ")
        assert "with Pillow" in pillow and "slower than processes" in pillow and f.value == pytest.approx(0.5, rel=0.02)
        assert f"× {word} than processes" in spdl and len(page.findings(res)) == 6


def test_moonshot_ceiling_says_how_the_step_ran_and_follows_the_data():
    """The ceiling sentence names the step the feeds were measured with and compares it with the
    other step's ceiling in the direction the numbers give; reversed numbers reverse the words."""
    res = _result(model_pct=(95.0, 60.0))
    res.metadata.update(model_step="graphed", ceilings=dict(graphed=dict(images_per_s=4000.0),
                                                            eager=dict(images_per_s=3200.0)))
    res.metadata["ceiling"] = dict(images_per_s=4000.0)
    f = _by_key(res)["moonshot"]
    assert "its step replayed from CUDA graphs, runs at 4,000 img/s" in f.text
    assert "(launched op by op: 3,200 img/s, slower)" in f.text
    res.metadata["ceilings"]["eager"] = dict(images_per_s=4800.0)
    assert "(launched op by op: 4,800 img/s, faster)" in _by_key(res)["moonshot"].text
    res.metadata.update(model_step="eager", ceilings=dict(eager=dict(images_per_s=4000.0)),
                        graph_note="CUDA graph capture failed here (RuntimeError: x)")
    assert "the graphed step was not used (CUDA graph capture failed here" in _by_key(res)["moonshot"].text
    old = _by_key(_result())["moonshot"]           # an older result, without the step's kind: eager
    assert "its step launched op by op" in old.text


def test_graphed_step_without_a_gpu_says_why():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    graph, why = gil.bf16_graphed_step(torch.nn.Linear(2, 2), batch_size=2, out_size=8, classes=2, device="cpu")
    assert graph is None and "need a GPU" in why
    assert gil.check_parameters(BASE)["model_step"] == "graphed"
    assert gil.check_parameters({**BASE, "model_step": "eager"})["model_step"] == "eager"


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


def test_moonshot_says_why_the_hybrid_did_not_run():
    res = _result(model_pct=(70.0, 60.0))
    m = res.table("model")
    res.tables["model"] = pd.concat([m, m[m["loader"] == "dataloader"].assign(nice=10)], ignore_index=True)
    res.metadata["hybrid"] = dict(share=None, note="skipped: torchvision's JPEG decoder is not usable here")
    f = _by_key(res)["moonshot"]
    assert "The hybrid feed did not run (skipped: torchvision" in f.text and page.WHY_NICE_HYBRID in f.text


def test_findings_without_a_thread_loader_say_what_is_missing():
    res = _result()
    res.tables["loaders"] = res.table("loaders")[lambda d: d["loader"] == "dataloader"]
    assert "lacks one of them" in _by_key(res)["end_to_end"].text


def test_key_metrics_match_published_names():
    from datajourney.chapters import published

    names = {f.metric for f in published.figures(gil.CHAPTER)}
    km = page.key_metrics(_result())
    assert set(km) <= names and page.PUB_GAIN in km and page.PUB_TTFB4 in km and page.PUB_TTFB32 not in km


def test_findings_of_a_small_run(photos, tmp_path):
    res = gil.run(n_images=48, width=96, height=72, classes=3, out_size=16, batch_size=3, primitive_batch=4,
                  primitive_images=8, concurrency=[1, 2], decoders=["pillow"], repeats=1, dataloader_workers=[1],
                  thread_concurrency=[2], loader_batches=2, warm_batches=1, window_factor=1, start_methods=["fork"],
                  startup_workers=[1], startup_paths=[0, 100], ipc_batch_sizes=[4], moonshot=False,
                  model="small_cnn", data_dir=photos.root.parent, run_dir=tmp_path, progress=False)
    items = page.findings(results.Result.load(res.path))
    assert 3 <= len(items) <= 6 and len({f.key for f in items}) == len(items)
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text, f
    lo = res.table("loaders")
    assert ((lo["warm"] + 1 + lo["batches"]) * 3 == lo["images_seen"]).all()   # first + warm + timed batches
    assert (lo["warm"] >= [gil.in_flight(k, c, batch_size=3) for k, c in zip(lo["loader"], lo["concurrency"])]).all()
    assert (lo["batches"] == [gil.timed_batches(k, c, 2, batch_size=3, factor=1)
                              for k, c in zip(lo["loader"], lo["concurrency"])]).all()
    assert "window_rule" in res.metadata and (lo["added_pss_bytes"] == lo["pss_bytes"] - lo["base_pss_bytes"]).all()


def test_in_flight_depth_of_each_loader():
    assert gil.in_flight("dataloader", 8, batch_size=64, prefetch_factor=2) == 16
    assert gil.in_flight("dataloader", 0, batch_size=64) == 0
    assert gil.in_flight("threadpool", 8, batch_size=64) == 3      # 8 images + two batches of 64
    assert gil.in_flight("spdl", 32, batch_size=64) == 6


def test_old_windows_that_drained_a_queue_are_left_out_and_said_to_be_old():
    """Of a result timed with the old fixed windows, a window whose CPU per image is below one
    image's cost cannot have produced its images: left out, and the page says the rows are old."""
    res = _result(tp_ips=9000, dl_ips=2000, tp_cpu=0.2, old=True)     # 0.2 ms per image < 0.85 × 1 ms
    s = page.loader_summary(res).set_index(["loader", "concurrency"])
    assert not s.loc[("threadpool", 8), "steady"] and s.loc[("dataloader", 8), "steady"]
    f = _by_key(res)["end_to_end"]
    assert "lacks one of them" in f.text                       # the only thread loader was left out
    note = page.steady_note(res)
    assert note and "thread pool, 8 threads" in note and "left out" in note and "old timed windows" in note
    assert "old timed windows" in page.window_note(res)
    assert "old: left out" in set(page.loader_table(res)["timed window"])
    kept = _result(old=True)
    assert "not in the reference run" in _by_key(kept)["cost"].text and page.PUB_MEM not in page.key_metrics(kept)
    # windows sized by waves: every row counts, no flag, no old-window note
    new = _result(tp_ips=9000, dl_ips=2000, tp_cpu=0.2)
    assert page.loader_summary(new)["steady"].all() and page.steady_note(new) is None
    assert "timed window" not in page.loader_table(new) and "whole waves" in page.window_note(new)
    assert page.steady_note(_result()) is None


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
    fake = _Waves(workers=4, period=0.04)
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
    assert row["added_pss_bytes"] == row["pss_bytes"] - row["base_pss_bytes"]
    assert row["added_pss_bytes"] > 0 and row["uss_bytes"] <= row["pss_bytes"]
    tp = gil.measure_loader(gil.make_loader("threadpool", files, list(range(len(files))), batch_size=8, out_size=32,
                                            concurrency=2, decoder="pillow", device="cpu"),
                            batches=2, warm=2, device="cpu")
    assert tp["processes"] == 1 and tp["added_pss_bytes"] > -(8 << 20)   # no fork: only noise below zero


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
    res.tables["spdl_stages"] = t.assign(task_ms=[v + 4.0 if st == "decode" else v for v, st in zip(t["task_ms"], t["stage"])])
    text = page.spdl_limit_note(res)
    assert "hand-off between the event loop and the threads" in text and "4 ms handing" in text
    text = page.spdl_limit_note(_with_stages(_result(), limit="none"))
    assert "No stage was busy" in text


def test_spdl_limit_note_says_when_the_result_has_no_stage_statistics():
    res = _result()
    assert page.spdl_stages(res).empty and page.spdl_limit(res) is None
    lo = res.table("loaders")
    res.tables["loaders"] = pd.concat([lo, lo[lo["loader"] == "threadpool"].assign(loader="spdl")], ignore_index=True)
    assert "not in the reference run" in page.spdl_limit_note(res)


def test_full_profile_windows_skip_every_loader_queue():
    """The full profile's timed windows start after the batches the deepest loaders keep in flight
    (DataLoader 16 workers: 32), hold at least window_factor (3) times those in flight in whole waves
    (96 batches, 6 waves of 16), and the data set holds them all, for the loaders and the model-fed runs."""
    from datajourney.book import runner

    prof = runner.profiles()["full"][gil.CHAPTER]
    q = dict(prof, batch_size=prof.get("batch_size", 64), prefetch_factor=2, warm_batches=2,
             window_factor=prof.get("window_factor", gil.WINDOW_FACTOR), loaders=list(gil.LOADERS))
    plan = gil.loader_windows(q)
    assert q["window_factor"] >= 3 and ("dataloader", 16, 32, 32 * q["window_factor"]) in plan
    for kind, c, warm, timed in plan:
        assert timed >= q["window_factor"] * gil.in_flight(kind, c, batch_size=q["batch_size"]) and timed % gil.wave(kind, c) == 0
        assert (warm + timed + 1) * q["batch_size"] <= prof["n_images"]
        steps = gil.timed_batches(kind, c, prof["model_steps"], batch_size=q["batch_size"], factor=q["window_factor"])
        assert (max(warm, prof["model_warmup"]) + steps + 1) * q["batch_size"] <= prof["n_images"]
    # the model fed by the hybrid at the most workers: the DataLoader's batches and those on the GPU side
    w = max(q["dataloader_workers"])
    warm = max(prof["model_warmup"], gil.in_flight("hybrid", w, batch_size=q["batch_size"]))
    steps = gil.timed_batches("hybrid", w, prof["model_steps"], batch_size=q["batch_size"], factor=q["window_factor"])
    assert warm == 2 * w + gil.GPU_QUEUE_DEPTH + 1 and steps % w == 0
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

