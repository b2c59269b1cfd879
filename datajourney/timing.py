"""Timing helpers shared by the GPU chapters: device time between CUDA events, and host time
between two device synchronisations."""
from __future__ import annotations

import time

import torch


def cuda_ms(fn, calls: int = 1) -> float:
    """Device time in ms of ``calls`` back-to-back calls of ``fn``, between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def synced_ms(fn, repeats: int) -> list[float]:
    """Host-clock ms of ``fn`` between two device synchronisations, ``repeats`` times after one
    untimed warm-up call."""
    out = []
    for k in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if k:
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def interleaved_ms(fns: dict, rounds: int, *, seed: int = 0, sample=None, warmup: int = 1):
    """Host-clock ms of each function in ``fns`` (name -> callable), between two device
    synchronisations, over ``rounds`` rounds that run every function once in a random order
    (after ``warmup`` untimed rounds). Interleaving spreads slow drift (clock, temperature,
    neighbours) over all functions alike, so per-round differences pair like with like.

    ``sample``, if given, is called right after each function has queued its work and before
    the synchronisation (while the GPU runs it); it returns a dict of readings (e.g. the SM
    clock from :func:`gpu_sampler`) stored with that call. Returns a DataFrame with one row per
    call: round, position, name, ms and the readings. Works without CUDA (no synchronisation)."""
    import random

    import pandas as pd

    rng = random.Random(seed)
    names = list(fns)
    rows = []
    for r in range(warmup + rounds):
        order = names[:]
        rng.shuffle(order)
        for pos, name in enumerate(order):
            _sync()
            t0 = time.perf_counter()
            fns[name]()
            reading = sample() if sample is not None else {}
            _sync()
            ms = (time.perf_counter() - t0) * 1e3
            if r >= warmup:
                rows.append(dict(round=r - warmup, position=pos, name=name, ms=ms, **(reading or {})))
    return pd.DataFrame(rows)


def gpu_sampler(device: int = 0):
    """A function returning the GPU's SM clock (MHz), power (W) and temperature (°C) now, read
    through NVML (package ``nvidia-ml-py``); None when NVML or a GPU is not available."""
    if not torch.cuda.is_available():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(device)
        handle = None
        bus = getattr(props, "pci_bus_id", None)
        if bus is not None:
            dom, dev = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
            try:
                handle = pynvml.nvmlDeviceGetHandleByPciBusId(f"{dom:08X}:{bus:02X}:{dev:02X}.0")
            except pynvml.NVMLError:
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:  # no NVML library, no permission, an old driver: no readings, not a failure
        return None

    def read() -> dict:
        out = {}
        for key, fn in (("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                        ("power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3),
                        ("temperature_c", lambda: pynvml.nvmlDeviceGetTemperature(handle,
                                                                                  pynvml.NVML_TEMPERATURE_GPU))):
            try:
                out[key] = float(fn())
            except Exception:
                out[key] = float("nan")
        return out

    return read
