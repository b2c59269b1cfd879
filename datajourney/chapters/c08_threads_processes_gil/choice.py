"""Chapter 8's end-to-end thread setting: the SPDL sweep's best, chosen from the rows the run has just measured.

The experiment runs the end-to-end comparison's thread pipeline at this setting after the sweep (a declared step of
the measurement), and the analysis names the same choice from the stored tables: one computation, no torch."""
from __future__ import annotations

import pandas as pd

#: How the end-to-end thread setting was chosen (``metadata.end_to_end_threads.how``): the sweep's best, or why not.
HOW = ("sweep_best", "no_sweep", "no_fit", "error")


def warm_pipeline_rows(comparison: pd.DataFrame, sweep: pd.DataFrame) -> pd.DataFrame:
    """The SPDL question's batch-decode pipeline runs with warm files: the sweep and the comparison's own pipeline."""
    comp = comparison
    if not comp.empty and {"state", "loader"} <= set(comp):
        comp = comp[(comp["state"] == "warm") & (comp["loader"] == "spdl_batch")]
    return pd.concat([sweep, comp], ignore_index=True)


def best_setting(rows: pd.DataFrame) -> dict | None:
    """The fastest configuration of ``rows`` (:func:`warm_pipeline_rows`; means over its runs): images per task,
    concurrency and threads, its mean images/s and runs, and every configuration's mean (what it was chosen from)."""
    if rows.empty or "config" not in rows:
        return None
    means = rows.groupby("config", sort=False)["images_per_s"].agg(["mean", "size"])
    cfg = str(means["mean"].idxmax())
    first = rows[rows["config"] == cfg].iloc[0]
    return dict(config=cfg, images_per_task=int(first["images_per_task"]), concurrency=int(first["concurrency"]),
                threads=int(first["threads"]), images_per_s=float(means.loc[cfg, "mean"]),
                runs=int(means.loc[cfg, "size"]),
                candidates={str(k): float(v) for k, v in means["mean"].items()})


def confirmed_rows(confirm: pd.DataFrame, best: dict | None) -> pd.DataFrame:
    """The fresh runs of the sweep's best setting (``paper_confirm``): the runs its verdict rests on, since the runs
    that picked a maximum overstate it. Empty where the run made none (results measured before they existed)."""
    if best is None or confirm.empty or "config" not in confirm:
        return confirm.iloc[0:0]
    return confirm[confirm["config"] == best["config"]]
