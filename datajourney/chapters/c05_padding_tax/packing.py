"""Chapter 5's row packers in plain Python (no torch): the experiment lays out its packed batches with them, and the
advice prints their source for a reader to paste, so the code advised is the code timed."""
from __future__ import annotations

import bisect


def greedy_rows(lengths, context: int) -> list[list[int]]:
    """Samples in order; a new row when the next one does not fit (the source's ``simulate_packed_batching``)."""
    rows, row, used = [], [], 0
    for i, n in enumerate(lengths):
        if row and used + n > context:
            rows.append(row)
            row, used = [], 0
        row.append(i)
        used += n
    return rows + [row] if row else rows


def best_fit_rows(lengths, context: int) -> list[list[int]]:
    """Longest samples first, each into the open row it fills most tightly."""
    rows, free = [], []  # free: sorted (space left, row)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        k = bisect.bisect_left(free, (lengths[i], -1))
        if k < len(free):
            space, r = free.pop(k)
            rows[r].append(i)
            bisect.insort(free, (space - lengths[i], r))
        else:
            rows.append([i])
            bisect.insort(free, (context - lengths[i], len(rows) - 1))
    return rows


#: The packed layouts' row builders, by strategy.
ROWS = {"greedy_pack": greedy_rows, "best_fit_decreasing": best_fit_rows}
