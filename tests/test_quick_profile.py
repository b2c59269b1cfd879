"""The quick profile asks the same work of any host: no sweep grows with the host's cores, no GPU brings a
larger model. The recorded benchmark (data/benchmarks/quick_book.json, a 2-core laptop) then bounds it on a
64-core GPU host too."""
from __future__ import annotations

import pytest

from datajourney.book import runner
from datajourney.chapters.c04_cpu_starvation import experiment as ch4
from datajourney.chapters.c07_full_picture import experiment as ch7
from datajourney.chapters.c08_threads_processes_gil import experiment as ch8

#: (chapter, parameter, what "auto" resolves to on a host of ``cores`` cores): the sweeps that grow with the cores.
BY_CORES = [
    ("04_cpu_starvation", "workers", ch4.default_workers),
    ("07_full_picture", "load_levels", ch7.auto_levels),
    ("08_threads_processes_gil", "concurrency", ch8.auto_concurrency),
    ("08_threads_processes_gil", "paper_workers", lambda cores: cores),
]
LAPTOP, GPU_HOST = 2, 64


def _quick(chapter: str) -> dict:
    return runner.profiles()["quick"][chapter] or {}


@pytest.mark.parametrize("chapter,name,auto", BY_CORES, ids=[f"{c}:{n}" for c, n, _ in BY_CORES])
def test_quick_sweeps_do_not_grow_with_the_cores(chapter, name, auto):
    """The value the quick profile runs with is the same on a 2-core laptop and on a 64-core host, and it is
    what "auto" gives on the laptop the quick book's time was recorded on."""
    value = _quick(chapter).get(name, "auto")
    on = {cores: auto(cores) if value == "auto" else value for cores in (LAPTOP, GPU_HOST)}
    assert on[LAPTOP] == on[GPU_HOST], f"quick {chapter}.{name} grows with the cores: {on}"
    assert value == auto(LAPTOP)


@pytest.mark.parametrize("chapter,name,small", [("08_threads_processes_gil", "model", "small_cnn"),
                                                ("11_gpu_to_gpu", "model", "small_vit")])
def test_quick_models_are_small_on_a_gpu_too(chapter, name, small):
    """Chapter 8's model-fed runs start wherever a GPU is, chapter 11's "auto" model is ViT-L/32 there: the quick
    profile names the small models (chapter 7's already does)."""
    assert _quick(chapter).get(name) == small
