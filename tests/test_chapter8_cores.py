"""Chapter 8 on any number of cores: the full profile's sweeps are named by the host's cores ("quarters",
"cores") and its data set is sized to their windows ("auto"), so a 64-core host sweeps to 64 workers and
threads and a 16-core host to 16."""
from __future__ import annotations

import os

import pytest

from datajourney.book import runner
from datajourney.chapters.c08_threads_processes_gil import experiment
from datajourney.chapters.c08_threads_processes_gil.params import scaled
from datajourney.core import params as core_params
from datajourney.core.params import ParameterError

CH = "08_threads_processes_gil"


def _full(cores: int, monkeypatch, **changes) -> dict:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    monkeypatch.setattr(core_params, "memory", lambda *a, **k: None)   # a 64-core host has the memory for it
    prof = {**runner.profiles()["full"][CH], "moonshot": False, "paper": False, **changes}
    return experiment.resolve(prof)


def test_scaled_sweeps():
    assert scaled("cores", 64) == [64] and scaled("half_and_cores", 64) == [32, 64]
    assert scaled("quarters", 16) == [1, 4, 16] and scaled("quarters", 64) == [1, 4, 16, 64]
    assert scaled("quarters", 12) == [1, 4, 12] and scaled("half_and_cores", 1) == [1]


def test_a_16_core_host_sweeps_to_its_cores(monkeypatch):
    q = _full(16, monkeypatch)
    assert q["concurrency"] == [1, 4, 16] and q["dataloader_workers"] == [16] and q["thread_concurrency"] == [16]
    assert q["n_images"] == 6208  # the DataLoader at 16 workers: 32 batches skipped, 64 timed, + 1, of 64
    # (loader, concurrency, skipped, timed): the thread loaders time loader_batches (10), at least window_factor (2)
    # times the batches they keep in flight
    assert sorted(experiment.loader_windows(q)) == [("dataloader", 16, 32, 64), ("spdl", 16, 6, 12),
                                                    ("threadpool", 16, 3, 10)]


@pytest.mark.parametrize("cores", [32, 64, 96])
def test_the_full_profile_reaches_every_core(monkeypatch, cores):
    q = _full(cores, monkeypatch)
    for name in ("concurrency", "dataloader_workers", "thread_concurrency"):
        assert max(q[name]) == cores, name
    assert q["epoch_workers"] == cores
    warm, timed = max((w, t) for _, _, w, t in experiment.loader_windows(q))
    assert q["n_images"] >= (warm + timed + 1) * q["batch_size"]   # every window fits: preflight passed


def test_a_fixed_data_set_too_small_for_the_cores_is_one_line(monkeypatch):
    with pytest.raises(ParameterError, match="n_images") as e:
        _full(64, monkeypatch, n_images=9600)
    assert "\n" not in str(e.value)
