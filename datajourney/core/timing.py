"""Timing helpers shared by the GPU chapters: device time between CUDA events, and host time
between two device synchronisations.

Example::

    import time

    from datajourney.core.timing import NvmlSampler

    with NvmlSampler(interval_ms=10) as gpu:        # samples NVML in a thread; records nothing without a GPU
        t0 = time.perf_counter()
        time.sleep(0.2)                             # your training steps here
        t1 = time.perf_counter()
    print(gpu.why or gpu.window(t0, t1))            # SM clock, power, utilisation, throttle reasons over [t0, t1]
"""
from __future__ import annotations

import time

import torch

__all__ = ["cuda_ms", "interleaved_ms", "NvmlSampler", "nvml_reader", "run_sustained", "steady_state"]


def cuda_ms(fn, calls: int = 1) -> float:
    """Device time in ms of ``calls`` back-to-back calls of ``fn``, between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


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
    clock from :func:`nvml_reader`) stored with that call. Returns a DataFrame with one row per
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


# --------------------------------------------------------------------------- sustained load
def run_sustained(fn, total_ms: float, *, max_calls: int = 100_000, clock=time.perf_counter) -> list[dict]:
    """Call ``fn()`` (which does one unit of work and returns its time in ms) back-to-back until
    the returned times add up to ``total_ms``. One row per call: ``ms`` and the host clock at the
    call's start and end (``t0``, ``t1``, seconds of ``clock``), so that samples of other counters
    (e.g. :class:`NvmlSampler`) can be matched to each call."""
    rows, acc = [], 0.0
    while acc < total_ms and len(rows) < max_calls:
        t0 = clock()
        ms = float(fn())
        rows.append(dict(call=len(rows), ms=ms, t0=t0, t1=clock()))
        acc += ms
    return rows


def steady_state(times_ms, *, tail: float = 0.5, settle_tol: float = 0.02) -> dict:
    """The steady state of a series of back-to-back times: the median of the last ``tail`` share
    of the calls, the first call (the state the load started from), and whether the series had
    settled (the last quarter's median within ``settle_tol`` of the third quarter's)."""
    import statistics

    v = [float(x) for x in times_ms]
    if not v:
        raise ValueError("steady_state needs at least one time")
    k = max(1, int(len(v) * (1 - tail)))
    steady = statistics.median(v[k:] or v[-1:])
    q = len(v) // 4
    settled = None
    if q >= 1:
        third, last = statistics.median(v[2 * q:3 * q]), statistics.median(v[3 * q:])
        settled = abs(last - third) <= settle_tol * steady
    return dict(steady_ms=steady, first_ms=v[0], drift=steady / v[0] - 1 if v[0] else float("nan"),
                settled=settled, calls=len(v))


# --------------------------------------------------------------------------- GPU clocks and power
#: NVML's clock event ("throttle") reason bits (nvml.h, nvmlClocksEventReason*).
CLOCK_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}


def clock_reason_names(bits: int | None) -> str:
    """NVML clock event reason bits as names, e.g. 0x4 -> 'sw_power_cap' ('' for none)."""
    if bits is None:
        return ""
    return ",".join(name for bit, name in CLOCK_REASONS.items() if int(bits) & bit)


def nvml_reader(device_index: int | None = None):
    """A function that reads the GPU's SM clock (MHz), power (W), clock event reasons (bits),
    utilisation (%) and temperature (°C) through NVML, and a dict describing the device;
    or ``(None, why)`` when NVML (nvidia-ml-py's ``pynvml``) or the GPU is not available."""
    try:
        import pynvml as nv
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        nv.nvmlInit()
        handle = None
        if device_index is None:
            import torch

            device_index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        try:  # the CUDA device's PCI address, so CUDA_VISIBLE_DEVICES cannot point NVML elsewhere
            import torch

            p = torch.cuda.get_device_properties(device_index)
            bus = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
            handle = nv.nvmlDeviceGetHandleByPciBusId_v2(bus.encode())
        except Exception:  # noqa: BLE001 - older torch or driver: fall back to the index
            handle = nv.nvmlDeviceGetHandleByIndex(device_index)
    except Exception as e:  # noqa: BLE001 - no driver, no GPU
        return None, f"NVML could not be initialised ({e})"

    reasons = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or nv.nvmlDeviceGetCurrentClocksThrottleReasons)
    instant = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)

    def power_w():
        if instant is not None:
            try:
                f = nv.nvmlDeviceGetFieldValues(handle, [instant])[0]
                if f.nvmlReturn == 0:
                    return f.value.uiVal / 1e3
            except Exception:  # noqa: BLE001
                pass
        return nv.nvmlDeviceGetPowerUsage(handle) / 1e3

    def read() -> dict:
        return dict(sm_clock_mhz=nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM), power_w=power_w(),
                    reasons=int(reasons(handle)), gpu_util_pct=nv.nvmlDeviceGetUtilizationRates(handle).gpu,
                    temperature_c=nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))

    info = {}
    for key, call in (("name", lambda: nv.nvmlDeviceGetName(handle)),
                      ("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)),
                      ("applications_sm_clock_mhz",
                       lambda: nv.nvmlDeviceGetApplicationsClock(handle, nv.NVML_CLOCK_SM)),
                      ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3),
                      ("driver", lambda: nv.nvmlSystemGetDriverVersion()),
                      ("power_reading", lambda: "instantaneous (NVML_FI_DEV_POWER_INSTANT)" if instant is not None
                       else "nvmlDeviceGetPowerUsage (may be averaged over about a second)")):
        try:
            v = call()
            info[key] = v.decode() if isinstance(v, bytes) else v
        except Exception:  # noqa: BLE001 - not every GPU reports every field
            info[key] = None
    try:
        read()
    except Exception as e:  # noqa: BLE001
        return None, f"NVML could not read the GPU ({e})"
    return read, info


class NvmlSampler:
    """Samples GPU counters in a background thread every ``interval_ms`` (host clock
    ``time.perf_counter``), so that each training step can be given the SM clock, power and
    clock-limit reasons that NVML reported while it ran (:meth:`window`).

    ``reader`` is a function returning a dict of numbers (default: :func:`nvml_reader`); when
    no reader is available the sampler records nothing and ``why`` says why. NVML calls are
    C calls that release the GIL; the thread adds a few tens of microseconds per sample."""

    def __init__(self, interval_ms: float = 10.0, reader=None, info: dict | None = None):
        import threading

        self.interval_ms = interval_ms
        if reader is None:
            reader, info_or_why = nvml_reader()
            self.why = None if reader else info_or_why
            self.info = info_or_why if reader else {}
        else:
            self.why, self.info = None, info or {}
        self.reader = reader
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = None

    @property
    def available(self) -> bool:
        return self.reader is not None

    def _loop(self):
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                self.samples.append(dict(t=t, **self.reader()))
            except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a failed run
                pass
            self._stop.wait(self.interval_ms / 1e3)

    def start(self) -> NvmlSampler:
        import threading

        if self.available and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def window(self, t0: float, t1: float) -> dict:
        """Counters over ``[t0, t1]`` (perf_counter seconds): mean SM clock, power, utilisation and
        temperature, the OR of the clock-limit reason bits, and the number of samples (0: none)."""
        import bisect

        samples = list(self.samples)       # the thread may append meanwhile; samples are in time order
        ts = [x["t"] for x in samples]
        return _aggregate(samples[bisect.bisect_left(ts, t0):bisect.bisect_right(ts, t1)])

    def annotate(self, df, *, t0: str = "t0", t1: str = "t1"):
        """``df`` with the counters of each row's ``[t0, t1]`` window added as columns."""
        import pandas as pd

        if not self.available or df.empty:
            return df
        import bisect

        samples = list(self.samples)
        ts = [x["t"] for x in samples]
        rows = []
        for a, b in zip(df[t0], df[t1], strict=True):
            part = samples[bisect.bisect_left(ts, a):bisect.bisect_right(ts, b)]
            rows.append(_aggregate(part))
        extra = pd.DataFrame(rows, index=df.index)
        return pd.concat([df, extra], axis=1)


def _aggregate(s: list[dict]) -> dict:
    if not s:
        return dict(nvml_samples=0)
    out = {k: sum(x[k] for x in s) / len(s) for k in ("sm_clock_mhz", "power_w", "gpu_util_pct", "temperature_c")
           if k in s[0]}
    bits = 0
    for x in s:
        bits |= int(x.get("reasons", 0))
    capped = sum(1 for x in s if int(x.get("reasons", 0)) & 0x4)
    out.update(clock_reasons=bits, power_capped=bool(bits & 0x4), power_capped_share=capped / len(s),
               nvml_samples=len(s))
    return out


class Laps:
    """Wall seconds of a run's sections, for the result's metadata: ``lap(name)`` closes the section
    that began at the previous lap (or at creation); ``seconds`` maps names to seconds."""

    def __init__(self, clock=time.perf_counter):
        self.clock, self.t, self.seconds = clock, clock(), {}

    def __call__(self, name: str) -> None:
        now = self.clock()
        self.seconds[name] = round(now - self.t, 2)
        self.t = now
