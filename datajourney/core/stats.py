"""Summary statistics used by every chapter: mean, standard deviation, min, max, n."""
from __future__ import annotations

import pandas as pd


def summarise(df: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """One row per group of ``by`` with mean, std (sample, ddof=1), min, max and n of ``value``."""
    g = df.groupby(by, sort=False)[value]
    out = g.agg(mean="mean", std="std", min="min", max="max", n="count").reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out
