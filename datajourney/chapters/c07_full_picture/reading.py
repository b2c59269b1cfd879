"""How a chapter 7 result is read: the names of its stages, phases and rules, and the helpers over its
tables (scenarios, their statistics, the ceilings). The experiment records with them and the analysis and
page read with them, so they live apart from the measuring code (pandas only, no torch)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from datajourney.core.answers import KEEPS_UP

#: The phases of a training step, as the profiler's annotations name them.
PHASES = ("DATALOADER_WAIT", "H2D_TRANSFER", "FORWARD", "BACKWARD", "OPTIMIZER")
#: Stages of the data path timed inside the loader (per batch, ms).
STAGES = ("read", "decode", "normalise", "collate", "pin", "handover")
#: The step each variant runs, and so the ceiling its share is taken of.
STEP_KINDS = {"graphed": "graphed"}
#: Niceness of worker processes under the "nice" remedy (lowest priority).
WORKER_NICE = 19
#: A configuration keeps up when it reaches this share of the ceiling's images/s: its AU, held to the book's bar.
KEEP_UP = KEEPS_UP
#: MLPerf Storage's rule, the same bar (kept as its own name for the chart's line).
AU_RULE = KEEPS_UP
#: The loader keeps up when the data wait is below this share of the step.
LOADER_KEEPS_UP = 0.01  # a data wait this small is named as such, never as "keeps up" (that is AU's bar)
#: The data formats' names on the page.
LABELS = {"imagefolder": "ImageFolder", "mds": "MDS", "webdataset": "WebDataset",
          "hf_datasets": "Hugging Face datasets", "litdata": "LitData", "parquet": "Parquet"}
#: The storage formats of the format comparison, the baseline first (the order of the page's table).
STORAGE_FORMATS = ("imagefolder", "mds", "webdataset", "hf_datasets", "litdata", "parquet")


def scenario_label(fmt: str, w: int, variant: str) -> str:
    """A scenario's name, e.g. "ImageFolder, W=4, nice"."""
    return f"{LABELS.get(fmt, fmt)}, W={int(w)}" + ("" if variant == "default" else f", {variant}")


def step_kind(variant: str) -> str:
    """``"graphed"`` for a step replayed from CUDA graphs, else ``"eager"``: the ceiling it is measured against."""
    return STEP_KINDS.get(variant, "eager")


def share_of_ceiling(sc: pd.DataFrame, ceil: pd.DataFrame, graphed_ceil: pd.DataFrame | None = None) -> pd.Series:
    """Each run's images/s as % of the mean images/s of the ceiling of its own step: the eager
    ceiling, or for a graphed step the graphed ceiling (the same graph fed from device memory)."""
    kinds = sc["variant"].map(step_kind) if "variant" in sc else pd.Series("eager", index=sc.index)
    ref = {"eager": float(ceil["images_per_s"].mean())}
    if graphed_ceil is not None and not graphed_ceil.empty:
        ref["graphed"] = float(graphed_ceil["images_per_s"].mean())
    return 100 * sc["images_per_s"] / kinds.map(lambda k: ref.get(k, np.nan))


def ceiling_runs(res, kind: str = "eager") -> pd.DataFrame:
    """The runs of the eager ceiling (``kind="eager"``) or of the graphed one (empty when the result has none)."""
    if kind == "graphed":
        return res.table("graphed_ceiling") if "graphed_ceiling" in res.tables else pd.DataFrame()
    return res.table("ceiling")


def scenarios(res) -> pd.DataFrame:
    """The per-run scenario table, with the columns an older result lacks filled in."""
    sc = res.table("scenarios").copy()
    if "variant" not in sc:
        sc["variant"] = "default"
    if "repeat" not in sc:
        sc["repeat"] = 0
    sc["ceiling"] = sc["variant"].map(step_kind)
    sc["label"] = [scenario_label(f, w, v) for f, w, v in zip(sc["format"], sc["workers"], sc["variant"], strict=True)]
    return sc


def scenario_stats(res) -> pd.DataFrame:
    """One row per scenario (format, workers, variant): the mean over its runs of every measure,
    with ``<measure>_min`` / ``_max`` / ``_std`` for the main ones, ``runs`` and ``ceiling`` (the
    step kind whose ceiling its share is taken of)."""
    sc = scenarios(res)
    keys = ["format", "workers", "variant", "label", "ceiling"]
    measures = [c for c in sc.select_dtypes("number").columns if c not in ("workers", "repeat")]
    g = sc.groupby(keys, sort=False)
    out = g[measures].mean().reset_index()
    for c in ("images_per_s", "pct_of_ceiling", "DATALOADER_WAIT", "compute_ms", "au", "step_ms", "H2D_TRANSFER"):
        if c in sc:
            out[f"{c}_min"] = g[c].min().values
            out[f"{c}_max"] = g[c].max().values
            out[f"{c}_std"] = g[c].std().values  # NaN for a single run: no spread to show
    out["runs"] = g.size().values
    return out


def best_scenario(res):
    """The scenario with the highest mean share of its own ceiling (over all recipes)."""
    st = scenario_stats(res)
    return st.loc[st["pct_of_ceiling"].idxmax()]
