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


#: Byte units: a rate of bytes ("MB/s") carries its scale in its unit already.
BYTE_UNITS = ("B", "bytes", "kB", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
#: From this magnitude on a number is shown to three significant figures with a scale (:data:`SCALES`): a rate
#: of tokens, images or steps per second, and a measured value that is not a whole count (not one in bytes,
#: whose unit carries its scale).
LARGE = 1e6
#: The scales of a large number, largest first: "2.54 G tokens/s", "358 M tokens/s".
SCALES = (("T", 1e12), ("G", 1e9), ("M", 1e6))


def count_rate(unit: str) -> bool:
    """Whether ``unit`` is a rate of things counted one by one ("tokens/s", "images/s", "steps/s"), not of bytes."""
    return unit.endswith("/s") and unit[:-2] not in BYTE_UNITS and bool(unit[:-2])


def _bytes(unit: str) -> bool:
    """Whether ``unit`` counts bytes or bytes per second ("MiB", "GB/s"): its own prefix is its scale."""
    return unit.removesuffix("/s") in BYTE_UNITS


def num(value: float | None, unit: str = "", *, with_unit: bool = True) -> str:
    """A number with three significant digits (thousands separated, no false precision, a true minus sign); from
    :data:`LARGE` on, a rate of counted things (:func:`count_rate`) and any value that is not a whole number are
    shown to three significant figures, scaled where no other unit says the scale ("2.54 G tokens/s", "358 M",
    "1,230,000 ms"), while a whole count stays exact ("1,073,741,824 B").

    >>> num(2123.19, "MB/s"), num(5.123, "×"), num(0.9712, "×"), num(76.2, "%"), num(-0.029, "ms")
    ('2,123 MB/s', '5.1×', '0.97×', '76.2%', '−0.029 ms')
    >>> num(2540943917.3, "tokens/s"), num(358060561, "tokens/s"), num(2540943917.3, "tokens/s", with_unit=False)
    ('2.54 G tokens/s', '358 M tokens/s', '2.54 G')
    """
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    v = float(value)
    a = abs(v)
    if a >= LARGE and unit not in ("×", "%") and not _bytes(unit) and (count_rate(unit) or not v.is_integer()):
        return _scaled(v, unit, with_unit)
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


def alike(values: list[float], unit: str = "") -> list[str]:
    """Values of one quantity side by side, as :func:`num` prints them but with one count of decimals: a whole
    value among measured ones gets theirs ("5.00 ms" beside "5.60 ms", not "5 ms"), so a sentence never shows one
    quantity at two precisions."""
    out = [num(v, unit) for v in values]
    decimals = [len(t.split(" ")[0].rstrip("×%").partition(".")[2]) for t in out]
    d = max(decimals, default=0)
    return [t if v is None or k == d or not 0 <= float(v) < 100 else
            f"{float(v):,.{d}f}" + ("" if not unit else unit if unit in ("×", "%") else f" {unit}")
            for v, k, t in zip(values, decimals, out, strict=True)]


def shown(value: float, unit: str = "") -> float:
    """``value`` as :func:`num` prints it, read back: a worked answer computes from the inputs it shows, so a reader's
    own arithmetic on the page gives the page's result.

    >>> shown(37.04, "µs"), shown(2123.19, "MB/s"), shown(-0.0291, "ms")
    (37.0, 2123.0, -0.029)
    """
    text = num(value, unit, with_unit=False)
    if not text.replace(",", "").replace("−", "").replace(".", "").isdigit():   # a scaled value ("2.54 G"): as is
        return float(value)
    return float(text.replace(",", "").replace("−", "-"))


def equals(value: float, unit: str, gives) -> str:
    """The sign between a worked answer's inputs and its result: "=" where ``gives(value as printed)`` holds (the
    result, worked by hand from the printed input, comes out as printed), else "≈" (the input is rounded).

    >>> equals(36.749, "ms", lambda g: f"{64e3 / g:,.0f}" == "1,742"), equals(31.4, "ms", lambda g: True)
    ('≈', '=')
    """
    return "=" if gives(shown(value, unit)) else "≈"


def _scaled(v: float, unit: str, with_unit: bool) -> str:
    """``v`` (at least :data:`LARGE` in magnitude) to three significant figures: with the scale it reaches for a
    count rate or a bare number ("2.54 G"), in zeros beside a unit of its own ("1,230,000 ms")."""
    r = float(f"{v:.3g}")   # rounded first: 999.7 M prints as 1.00 G, not 1,000 M
    if unit and not count_rate(unit):
        text = f"{abs(r):,.0f}"
    else:
        prefix, scale = next((p, s) for p, s in SCALES if abs(r) >= s or s == SCALES[-1][1])
        x = abs(r) / scale
        text = f"{x:,.{2 if x < 10 else 1 if x < 100 else 0}f} {prefix}"
    text = ("−" if v < 0 else "") + text
    return f"{text} {unit}" if with_unit and unit else text


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


def prints_alike(low: float, high: float, unit: str = "") -> bool:
    """Whether a range's two ends print the same: a range of one number, which :func:`span` prints as one value."""
    return num(low, unit, with_unit=False) == num(high, unit, with_unit=False)


def span(low: float, high: float, unit: str = "", *, with_unit: bool = True) -> str:
    """A range as text: '1.2–3.4 ms'; 'a to b' when an end is negative ('−0.03 to 0.28 ms');
    a single value when both ends print the same ('20.9×'); one scale for both ends of a large rate
    ('2.50–2.60 G tokens/s'; without ``with_unit``, '2.50–2.60 G')."""
    a, b = num(low, unit, with_unit=False), num(high, unit, with_unit=False)
    tail = "" if not unit or not with_unit else (unit if unit in ("×", "%") else f" {unit}")
    if prints_alike(low, high, unit):
        return a + tail
    scale = next((f" {p}" for p, _ in SCALES if a.endswith(f" {p}") and b.endswith(f" {p}")), "")
    if scale:   # one scale for both ends: "2.50–2.60 G tokens/s"
        a, b, tail = a.removesuffix(scale), b.removesuffix(scale), scale + tail
    if low < 0 or high < 0:
        return f"{a.replace('-', '−')} to {b.replace('-', '−')}{tail}"
    return f"{a}–{b}{tail}"
