"""Three columns of truth: the published figure, the project's reference run, this run.

Published figures are facts quoted from the sources, with the hardware they were
measured on; they are the only numbers in the project that are typed in, and they are
always labelled as published. The other two columns are computed from result files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

#: Hardware of the published figures marked S1.
S1 = ("S1: AMD EPYC 7R13 (16 cores), 124 GiB, local NVMe, NVIDIA L40S on PCIe 4.0 x16, "
      "Linux 6.8, PyTorch 2.10")


@dataclass(frozen=True)
class Figure:
    """One published number (mean and, where given, standard deviation)."""

    metric: str
    mean: float
    std: float | None = None
    unit: str = "MB/s"
    source: str = "S1"
    setting: str = ""


PUBLISHED: dict[str, list[Figure]] = {
    "02_random_vs_sequential": [
        Figure("random read, cold", 70.39, 3.12, setting="10,000 × 16 KiB files, 3 runs"),
        Figure("sequential read, cold", 1421.85, 13.47, setting="one 160 MB shard, 16 KiB chunks, 3 runs"),
        Figure("sequential ÷ random, cold", 20.2, unit="×"),
    ],
    "04_cpu_starvation": [
        Figure("data wait per step, W=0", 160.59, unit="ms", setting="D = 5 ms (sleep), B = 32, G = 50 ms"),
        Figure("compute per step, W=0", 50.09, unit="ms", setting="simulated step"),
        Figure("GPU idle share, W=0", 76, unit="%"),
        Figure("data wait per step, W=4", 1.50, unit="ms", setting="D = 5 ms (sleep), B = 32, G = 50 ms"),
    ],
    "05_padding_tax": [
        Figure("efficiency, pad to context", 2.3, unit="%", setting="first 2,000 Alpaca samples, GPT-2, context 4,096"),
        Figure("efficiency, packed", 98.5, unit="%", setting="greedy packing"),
        Figure("packed ÷ pad to context", 42.4, unit="×"),
    ],
    "06_pcie": [
        Figure("H2D pinned, 1 GiB", 13.46, unit="GB/s", setting="L40S, PCIe 4.0 x16"),
        Figure("D2H pageable, 256 MiB", 1.77, unit="GB/s"),
        Figure("D2H pageable, 1 GiB", 1.77, unit="GB/s"),
        Figure("D2H pinned, 1 GiB", 13.2, unit="GB/s"),
        Figure("D2H pinned ÷ pageable, 1 GiB", 7.5, unit="×"),
        Figure("overlap, pinned + non_blocking, 256 MiB", 100, unit="%"),
        Figure("overlap, pinned + non_blocking, 16 MiB", 77, unit="%"),
        Figure("link peak (theoretical)", 31.51, unit="GB/s", setting="PCIe 4.0 x16"),
    ],
    "07_full_picture": [
        Figure("ImageFolder, workers=0: data wait", 130.52, unit="ms", setting="ResNet-50, batch 64, 224×224 JPEGs"),
        Figure("ImageFolder, workers=0: images/s", 280.5, unit="img/s"),
        Figure("streaming (MDS), workers=0: data wait", 92.09, unit="ms"),
        Figure("streaming (MDS), workers=0: images/s", 337.1, unit="img/s"),
        Figure("ImageFolder, workers=4: data wait", 0.4, unit="ms", setting="both formats ≈0.4 ms"),
        Figure("ImageFolder, workers=4: images/s", 652, unit="img/s", setting="both formats ≈652 img/s"),
        Figure("streaming (MDS), workers=4: data wait", 0.4, unit="ms"),
        Figure("streaming (MDS), workers=4: images/s", 652, unit="img/s"),
        Figure("compute per step (forward+backward+optimizer)", 94.6, unit="ms"),
        Figure("H2D per step", 3.07, unit="ms"),
    ],
    "03_dataloader": [
        Figure("small files, workers=0", 16.70, setting="50,000 × 4 KiB, batch 64"),
        Figure("shard, workers=0", 326.05, setting="50,000 × 4 KiB, batch 64"),
        Figure("shard ÷ small files, workers=0", 19.5, unit="×"),
        Figure("small files, workers=4", 79.94, setting="50,000 × 4 KiB, batch 64"),
        Figure("shard, workers=4", 384.85, setting="50,000 × 4 KiB, batch 64"),
        Figure("shard ÷ small files, workers=4", 4.8, unit="×"),
    ],
}


def fmt(mean, std=None, unit: str = "") -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "—"
    digits = 1 if unit == "×" else 2
    text = f"{mean:,.{digits}f}"
    if std is not None and not (isinstance(std, float) and math.isnan(std)):
        text += f" ± {std:,.{digits}f}"
    return text + (f" {unit}" if unit and unit != "×" else ("×" if unit == "×" else ""))


def three_columns(chapter: str, this: dict, reference: dict | None, *, this_is_reference: bool = False,
                  reference_label: str = "reference run") -> pd.DataFrame:
    """A table: metric | published | reference run | this run.

    ``this`` and ``reference`` map metric name -> (mean, std); they come from the same
    chapter function applied to this run's and the reference run's result files.
    """
    rows = []
    for f in PUBLISHED.get(chapter, []):
        t = this.get(f.metric, (None, None))
        r = (reference or {}).get(f.metric, (None, None))
        rows.append({
            "metric": f.metric,
            f"published ({f.source})": fmt(f.mean, f.std, f.unit),
            reference_label: fmt(*r, f.unit) if reference else "not committed yet",
            "this run": fmt(*t, f.unit) + (" (this is the reference run)" if this_is_reference else ""),
        })
    return pd.DataFrame(rows)
