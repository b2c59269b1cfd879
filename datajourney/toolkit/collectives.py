"""Collective benchmarks summarised: median time, algorithm and bus bandwidth per path, op and size,
and the all-reduce bandwidth at any size (interpolated between measured sizes).

Example::

    import pandas as pd

    from datajourney.toolkit.collectives import bench_summary, interp_algbw

    bench = pd.DataFrame([dict(path="nccl", op="all_reduce", size=s, time_ms=t, algbw_GBps=s / t / 1e6,
                               busbw_GBps=s / t / 1e6, status="ok") for s, t in ((1 << 20, 0.05), (1 << 30, 5.0))])
    summary = bench_summary(bench)
    print(summary[["op", "size", "busbw_GBps"]])
    print(interp_algbw(summary[summary["op"] == "all_reduce"], 64 << 20))   # GB/s at 64 MiB, interpolated
"""
from __future__ import annotations

import math

import pandas as pd

__all__ = ["bench_summary", "interp_algbw"]


def bench_summary(bench: pd.DataFrame) -> pd.DataFrame:
    """Median time, algbw and busbw per path, op and size (with the min–max of busbw over repeats)."""
    b = bench[bench["status"] == "ok"]
    if b.empty:
        return pd.DataFrame(columns=["path", "op", "size", "time_ms", "algbw_GBps", "busbw_GBps", "busbw_min",
                                     "busbw_max", "repeats"])
    g = b.groupby(["path", "op", "size"])
    return g.agg(time_ms=("time_ms", "median"), algbw_GBps=("algbw_GBps", "median"),
                 busbw_GBps=("busbw_GBps", "median"), busbw_min=("busbw_GBps", "min"),
                 busbw_max=("busbw_GBps", "max"), repeats=("busbw_GBps", "size")).reset_index()


def interp_algbw(summary: pd.DataFrame, size: int) -> float:
    """all_reduce algbw (GB/s) at ``size`` bytes, interpolated in log(size) between measured sizes
    (clamped to the ends)."""
    s = summary.sort_values("size")
    xs, ys = [math.log(v) for v in s["size"]], list(s["algbw_GBps"])
    x = math.log(max(size, 1))
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    for i in range(1, len(xs)):
        if x <= xs[i]:
            f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return float(ys[i - 1] + f * (ys[i] - ys[i - 1]))
    return float(ys[-1])
