"""Summary statistics used by every chapter: mean, standard deviation, min, max, n."""
from __future__ import annotations

import math

import pandas as pd


def summarise(df: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """One row per group of ``by`` with mean, std (sample, ddof=1), min, max and n of ``value``."""
    g = df.groupby(by, sort=False)[value]
    out = g.agg(mean="mean", std="std", min="min", max="max", n="count").reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out


def mean(values) -> float:
    """The mean of the finite values among ``values`` (a number or an iterable of numbers; None and
    NaN are left out); NaN when none is left."""
    vals = [values] if isinstance(values, (int, float)) else list(values)
    finite = [float(v) for v in vals if v is not None and math.isfinite(float(v))]
    return sum(finite) / len(finite) if finite else float("nan")
