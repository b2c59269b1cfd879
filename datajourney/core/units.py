"""Byte units, one definition each: decimal (MB, GB: as the published figures and ``dd`` count)
and binary (KiB, MiB, GiB: as buffers and block sizes are sized); and a number printed with its unit, the one
way the book prints one (analyses label sizes with it; :mod:`~datajourney.core.phrasing` words sentences around it)."""
from __future__ import annotations

import math

KB = 1e3
MB = 1e6
GB = 1e9
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


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
