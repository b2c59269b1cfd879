"""Summary statistics used by every chapter: mean, standard deviation, min, max, n."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

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


# ---------------------------------------------------------------- directions
def ratio(a: float, b: float) -> float:
    """a / b (nan when b is zero)."""
    return a / b if b else float("nan")


def direction(a: float | Sequence[float], b: float | Sequence[float], *, tol: float = 0.05) -> int:
    """+1 when a is clearly larger than b, -1 when clearly smaller, 0 when they are level.

    With several runs on each side, "clearly" means their min–max ranges do not overlap
    *and* the means differ by more than ``tol`` (relative); with single values only the
    tolerance applies.
    """
    a_runs = _runs(a)
    b_runs = _runs(b)
    ma, mb = sum(a_runs) / len(a_runs), sum(b_runs) / len(b_runs)
    if mb == 0 and ma == 0:
        return 0
    if abs(ma - mb) <= tol * max(abs(ma), abs(mb)):
        return 0
    if level(_range(a_runs), _range(b_runs)):
        return 0
    return 1 if ma > mb else -1


def level(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    """The book's one meaning of "level": two measurements whose runs' (min, max) ranges overlap, so their
    difference is within the measured spread and no direction is claimed. A side without a range (fewer than
    two runs) has no measured spread and is never level."""
    return bool(a and b and a[0] <= b[1] and b[0] <= a[1])


def _range(runs: Sequence[float]) -> tuple[float, float] | None:
    return (min(runs), max(runs)) if len(runs) > 1 else None


def cv(values: Iterable[float]) -> float:
    """Coefficient of variation (sample std / mean) of values; 0 for fewer than two."""
    v = [float(x) for x in values]
    if len(v) < 2:
        return 0.0
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    return sd / m if m else float("nan")


#: Above this coefficient of variation a chapter comments on the spread.
HIGH_SPREAD = 0.20


def _runs(x) -> list[float]:
    if isinstance(x, (int, float)):
        return [float(x)]
    return [float(v) for v in x]
