"""How path (b)'s swept settings rank: each run as a share of the slower link measured in the same run, and
the settings best first. The experiment ranks its own sweep with it mid-run to choose path (b)'s setting
(:func:`~.experiment.choose_path_b`, a measurement step), and the analysis reads a result with the same
ranking, so neither imports the other (pandas only)."""
from __future__ import annotations

import pandas as pd


def sweep_shares(table: pd.DataFrame, pcie_GBps: float | None) -> pd.DataFrame:
    """Each cold path-(b) run of the sweep as a share of the slower link measured in the same run:
    min(that run's ``dd`` read, the PCIe copy). Setting each run against its own ``dd`` keeps the disk's
    drift between runs out of the comparison of settings."""
    if table is None or table.empty:
        return pd.DataFrame()
    t = table[table["error"].isna()] if "error" in table else table
    dd = t[t["mode"].str.startswith("dd")].groupby("run")["GBps"].mean()
    b = t[~t["mode"].str.startswith("dd")].copy()
    ceil = b["run"].map(dd)
    if pcie_GBps:
        ceil = ceil.clip(upper=pcie_GBps)
    b["ceiling_GBps"] = ceil
    b["share"] = b["GBps"] / ceil
    return b.dropna(subset=["share"])


def sweep_summary(table: pd.DataFrame, pcie_GBps: float | None) -> pd.DataFrame:
    """One row per swept setting (mode, chunk, buffers): mean GB/s, mean, lowest and highest share of the
    same run's slower link, CPU s per GB and runs; best first: the highest lowest-run share (a setting
    must keep up in every run), then the highest mean share."""
    b = sweep_shares(table, pcie_GBps)
    if b.empty:
        return b
    s = b.groupby(["mode", "chunk", "buffers"]).agg(GBps=("GBps", "mean"), share=("share", "mean"),
                                                    share_min=("share", "min"), share_max=("share", "max"),
                                                    cpu=("cpu_s_per_GB", "mean"), n=("run", "count")).reset_index()
    return s.sort_values(["share_min", "share"], ascending=False).reset_index(drop=True)
