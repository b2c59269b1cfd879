"""Chapter 6's rules over numbers: a PCIe link's theoretical peak and the overlap verdict. The experiment
words each measured row with them and the analysis and page read a result with them, so they live apart
from the measuring code (pure arithmetic, no torch)."""
from __future__ import annotations

import math

#: Overlap ratio at or above which a copy "overlaps", at or below which it is "serial".
OVERLAPS, SERIAL = 0.8, 0.2
#: Each generation's line rate per lane (GT/s, one bit per transfer) and its encoding (payload bits of line bits):
#: Gen 1-2 use 8b/10b, Gen 3-5 128b/130b; Gen 6 (PAM4, FLIT mode) 242/256.
LINE_RATE = {1: (2.5, 8, 10), 2: (5.0, 8, 10), 3: (8.0, 128, 130), 4: (16.0, 128, 130), 5: (32.0, 128, 130),
             6: (64.0, 242, 256)}
#: One lane's payload per direction, GB/s: rate × encoding ÷ 8 bits.
PER_LANE_GBPS = {g: rate * bits / line / 8 for g, (rate, bits, line) in LINE_RATE.items()}
#: A copy must last at least this many times the CPU work's jitter (std) before its overlap is judged.
MIN_COPY_OVER_JITTER = 3.0
#: Verdict when the copy is too short to be told apart from the CPU work's jitter.
TOO_SHORT = "too short to tell"


def link_peak_gbps(gen: int | None, width: int | None) -> float | None:
    """Theoretical one-direction peak of a PCIe link, GB/s (None when unknown)."""
    if not gen or not width or gen not in PER_LANE_GBPS:
        return None
    return PER_LANE_GBPS[gen] * width


def overlap_ratio(t_a: float, t_b: float, t_both: float) -> float:
    """Share of the shorter activity that was hidden: 1 when two activities ran fully in
    parallel (both together take as long as the longer), 0 when serially (they take the
    sum). *Not clipped*: below 0 means "together" took longer than one after the other,
    above 1 that it took less than the longer alone - both are measurement noise, and
    showing them is how a reader sees how noisy the measurement is."""
    shorter = min(t_a, t_b)
    return float((t_a + t_b - t_both) / shorter) if shorter > 0 else float("nan")


def verdict(ratio: float, *, copy_ms: float | None = None, jitter_ms: float | None = None,
            low: float | None = None, high: float | None = None) -> str:
    """Words for an overlap ratio. No verdict (:data:`TOO_SHORT`) when the copy lasted less than
    :data:`MIN_COPY_OVER_JITTER` × the jitter of the work it is compared with, or when the
    spread of the ratio (``low``-``high``) reaches from serial to overlapping."""
    if copy_ms is not None and jitter_ms is not None and copy_ms < MIN_COPY_OVER_JITTER * jitter_ms:
        return TOO_SHORT
    if not math.isfinite(ratio):
        return TOO_SHORT
    if low is not None and high is not None and low <= SERIAL and high >= OVERLAPS:
        return "unclear"  # the spread spans serial to overlapping
    return "overlaps" if ratio >= OVERLAPS else ("serial" if ratio <= SERIAL else "partly overlaps")


# --------------------------------------------------------------------------- thresholds of the analysis
#: Two clocks "agree" when their medians differ by less than this share.
CLOCKS_AGREE = 0.05
#: A change of the staging experiment's rate (size to size, cached to flushed) smaller than this is "level".
STAGING_TOL = 0.10
#: Two measurements of the same path that differ by more than this are reported as differing.
SAME_PATH_TOL = 0.10
#: A spread of the huge-page effect over sizes wider than this (max - min of the ratios) leaves it unresolved.
HUGE_SPREAD = 0.2
#: A size whose interleaved median lies this much (relative) below the largest size's dips.
DIP_TOL = 0.15
#: Page faults or CPU time per byte this much (relative) above the largest size's count as "more".
DIP_COST_TOL = 0.25
