"""Findings: the sentences that state a measured outcome, computed from a run's results.

Fixed prose in a chapter explains mechanisms. Every sentence that states or interprets
a measured result is built here or by the chapter's ``findings(res)`` from the numbers
in that run's result file: its figures *and* its direction words (faster / slower, keeps
up / falls behind, closes / stays open). A re-run on another machine therefore never
shows a sentence its own data contradict, and when the data do not support the usual
conclusion, the sentence says what happened instead.

A chapter module exposes::

    def findings(res: Result) -> list[Finding]: ...

The notebook shows them with :func:`datajourney.book.opening.evidence`, which puts the reference
host's value of the same fact and the published figure (when the finding names one) beside each.

The helpers below turn numbers into words. Directions are decided from the spread of
the runs where there are several (two min–max ranges that overlap are "within the
spread", not a win), else from a relative tolerance.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from datajourney.core.stats import mean


@dataclass(frozen=True)
class Finding:
    """One computed sentence and the figure behind it."""

    key: str                          #: stable identifier, e.g. ``"shard_vs_small_cold_w0"``
    text: str                         #: Markdown, built from the result
    value: float | None = None        #: the headline number of this run
    unit: str = ""                    #: unit of ``value``: "MB/s", "ms", "×", "%", ...
    published: str | None = None      #: metric name in :data:`published.PUBLISHED` to show beside it
    interval: tuple[float, float] | None = None  #: (low, high) of ``value`` over runs
    values: dict = field(default_factory=dict)    #: other numbers the sentence uses

    @property
    def headline(self) -> str:
        """``value`` with its unit and interval, e.g. ``"5.1× (3.9–5.9)"``."""
        if self.value is None:
            return "—"
        text = num(self.value, self.unit)
        if self.interval is not None:
            lo, hi = self.interval
            rng = span(lo, hi)
            if rng != num(self.value, with_unit=False):  # no "(20.9)" beside 20.9
                text += f" ({rng})"
        return text


#: The most findings a chapter opens with, and the most words in each (one sentence each).
OPENING_FINDINGS, OPENING_WORDS = 3, 35


@dataclass(frozen=True)
class Action:
    """One thing to do on this machine, chosen from this run's data: the setting that won here and
    its measured gain (``text``), with a copy-pasteable ``snippet`` where code is the answer."""

    text: str
    snippet: str | None = None


@dataclass(frozen=True)
class Opening:
    """What a chapter opens with: at most :data:`OPENING_FINDINGS` short findings (one sentence of at
    most :data:`OPENING_WORDS` words each, with one number) and one to three :class:`Action` items."""

    findings: list[Finding]
    actions: list[Action]


def words(text: str) -> int:
    """Words a reader reads in ``text`` (Markdown emphasis, code ticks and links count as their words)."""
    plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    plain = re.sub(r"[*`_]", "", plain)
    return len(plain.split())


# ---------------------------------------------------------------- numbers as text
def num(value: float | None, unit: str = "", *, with_unit: bool = True) -> str:
    """A number with three significant digits (thousands separated, no false precision, a true minus sign).

    >>> num(2123.19, "MB/s"), num(5.123, "×"), num(0.9712, "×"), num(76.2, "%"), num(-0.029, "ms")
    ('2,123 MB/s', '5.1×', '0.97×', '76.2%', '−0.029 ms')
    """
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    v = float(value)
    a = abs(v)
    if v.is_integer() and unit != "×" and a < 1e15:
        digits = 0   # counts (workers, tokens) and round values carry no decimals
    elif unit == "%":
        digits = 0 if a >= 100 else 1   # 98.5% stays 98.5%, as the sources print shares
    elif a >= 100:
        digits = 0
    elif a >= 10:
        digits = 1
    elif a >= 1:
        digits = 2 if unit != "×" or a < 2 else 1
    elif a == 0:
        digits = 0
    else:
        digits = min(6, max(2, 1 - int(math.floor(math.log10(a)))))
    text = f"{v:,.{digits}f}"
    if text.startswith("-"):  # a true minus sign, and none on a value that rounds to zero ("0.0", not "−0.0")
        text = "−" + text[1:] if text.strip("-0.,") else text[1:]
    if not with_unit or not unit:
        return text
    return text + unit if unit in ("×", "%") else f"{text} {unit}"


def size_label(n: int) -> str:
    """4096 -> '4 KiB', 1048576 -> '1 MiB', 1572864 -> '1.5 MiB': the largest binary unit the size
    reaches, whole or with one exact decimal; else the largest unit that divides it; else one
    (rounded) decimal in the largest unit; below 1 KiB, bytes."""
    n = int(n)
    units = [(u, 1 << k) for u, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)) if n >= 1 << k]
    if not units:
        return f"{n} B"
    unit, b = units[0]
    if n % b == 0:
        return f"{n // b} {unit}"
    if (10 * n) % b == 0:
        return f"{n / b:.1f} {unit}"
    for u, bu in units[1:]:
        if n % bu == 0:
            return f"{n // bu} {u}"
    return f"{n / b:.1f} {unit}"


def pct(fraction: float) -> str:
    """A fraction as a percentage: 0.7634 -> '76%'."""
    return num(100 * fraction, "%")


def signed(value: float | None, unit: str, up: str, down: str) -> str:
    """A change that may go either way, worded so its sign needs no reading: ``signed(-49.0, "%", "faster",
    "slower")`` -> "49.0% slower", ``signed(74, "%", "faster", "slower")`` -> "74% faster"."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    text = num(abs(float(value)), unit)
    return text if text.strip("0.,%") == "" else f"{text} {up if value > 0 else down}"


def times(ratio: float) -> str:
    """A ratio: 5.123 -> '5.1×'."""
    return num(ratio, "×")


def and_list(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def span(low: float, high: float, unit: str = "") -> str:
    """A range as text: '1.2–3.4 ms'; 'a to b' when an end is negative ('−0.03 to 0.28 ms');
    a single value when both ends print the same ('20.9×')."""
    a, b = num(low, unit, with_unit=False), num(high, unit, with_unit=False)
    tail = "" if not unit else (unit if unit in ("×", "%") else f" {unit}")
    if a == b:
        return a + tail
    if low < 0 or high < 0:
        return f"{a.replace('-', '−')} to {b.replace('-', '−')}{tail}"
    return f"{a}–{b}{tail}"


# ---------------------------------------------------------------- comparing
def ratio(a: float, b: float) -> float:
    """a / b (nan when b is zero)."""
    return a / b if b else float("nan")


def ratio_interval(a_runs: Sequence[float], b_runs: Sequence[float]) -> tuple[float, float, float]:
    """mean(a)/mean(b) and the range of the ratio over the runs' extremes (min a/max b, max a/min b)."""
    a = [float(x) for x in a_runs]
    b = [float(x) for x in b_runs]
    mid = ratio(sum(a) / len(a), sum(b) / len(b))
    return mid, ratio(min(a), max(b)), ratio(max(a), min(b))


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
    if len(a_runs) > 1 and len(b_runs) > 1 and min(a_runs) <= max(b_runs) and min(b_runs) <= max(a_runs):
        return 0
    return 1 if ma > mb else -1


def compare(a, b, *, more: str = "faster than", less: str = "slower than",
            same: str = "level with", tol: float = 0.05, as_ratio: bool = True) -> str:
    """A comparison phrase of a against b, e.g. '3.1× faster than', '1.4× slower than', 'level with' (within
    the runs' spread or ``tol``: no ratio then).

    For "higher is better" quantities (throughput): ``compare(shard, small)``. The ratio
    printed is always ≥ 1 (the larger over the smaller).
    """
    d = direction(a, b, tol=tol)
    ma, mb = mean(a), mean(b)
    if d == 0:  # no ratio beside "level": a number next to it reads as a difference the runs do not show
        return same
    r = ratio(ma, mb) if d > 0 else ratio(mb, ma)
    word = more if d > 0 else less
    return f"{times(r)} {word}" if as_ratio else word


def choose(d: int, more: str, less: str, same: str) -> str:
    """The phrase for a direction from :func:`direction`."""
    return more if d > 0 else less if d < 0 else same


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


def spread_note(label: str, values: Sequence[float], unit: str = "") -> str | None:
    """A sentence when the runs of ``label`` spread by more than :data:`HIGH_SPREAD`, else None."""
    c = cv(values)
    if not (c > HIGH_SPREAD):
        return None
    return (f"{label} varied over {span(min(values), max(values), unit)} in "
            f"{len(values)} runs (coefficient of variation {pct(c)}): read it as a range, not a point.")


def _runs(x) -> list[float]:
    if isinstance(x, (int, float)):
        return [float(x)]
    return [float(v) for v in x]


def as_markdown(findings: Sequence[Finding]) -> str:
    """Findings as a Markdown bullet list."""
    return "\n".join(f"* {f.text}" for f in findings)
