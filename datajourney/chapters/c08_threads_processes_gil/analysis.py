"""Chapter 8's facts: what its result shows, typed and named, no prose (the page words them).

So far the SPDL question (experiment 7) and the loader advice; the older findings are still
computed by the page (see the chapter's notes)."""
from __future__ import annotations

import math

import pandas as pd

from datajourney.core.facts import Advice, Fact, Facts, best, compare, measured

CHAPTER = "08_threads_processes_gil"
#: The published metrics (the SPDL paper) with the same meaning as a fact here: a rate ratio of the
#: thread pipeline over the DataLoader, and a ratio of CPU per image (thread pipeline / DataLoader).
PUB_GAIN = "throughput gain, thread pipeline over DataLoader"
PUB_CPU = "CPU reduction, thread pipeline vs DataLoader"
KIND_LABELS = {"dl_pillow": "the DataLoader with Pillow and transforms (paper baseline)",
               "dl_spdl": "the DataLoader with spdl.io and transforms",
               "spdl_batch": "the SPDL pipeline with spdl.io (as in the paper)"}
#: A GIL-busy share, a CPU load (of the cores) or a stage occupancy at or above this limits the pipeline.
LIMIT_AT = 0.8
LIMITS = ("gil", "cpu", "decode_stage", "consumer")
EXPORTS = ("paper.gain.warm", "paper.gain.cold", "paper.decoder.warm", "paper.parallelism.warm",
           "paper.decoder_share.warm", "paper.parallelism_share.warm", "paper.cpu_ratio.warm", "paper.best_threads",
           "paper.best_vs_dataloader", "paper.limit", "paper.best.gil_busy_share", "paper.best.cpu_ms_per_image",
           "image_decode.loader")


def _table(res, name: str) -> pd.DataFrame:
    try:
        return res.table(name)
    except Exception:
        return pd.DataFrame()


def _rates(df: pd.DataFrame, col: str = "images_per_s") -> list[float]:
    return [float(v) for v in df[col] if v is not None and math.isfinite(float(v))]


def paper_facts(res) -> list[Fact]:
    """The comparison and its decomposition (cold and warm), CPU per image, the best thread configuration
    and what limits it."""
    comp, sweep = _table(res, "paper"), _table(res, "paper_sweep")
    out: list[Fact] = []
    if comp.empty:
        return out
    cores = int(res.metadata.get("cores") or 1)
    for state in ("cold", "warm"):
        s = comp[comp["state"] == state]
        if s.empty:
            continue
        f = {k: measured(f"paper.{k}.{state}", _rates(s[s["loader"] == k]), unit="images/s",
                         label=KIND_LABELS[k] + f", {state} files", setting={"state": state})
             for k in ("dl_pillow", "dl_spdl", "spdl_batch")}
        cpu = {k: measured(f"paper.cpu.{k}.{state}", _rates(s[s["loader"] == k], "cpu_ms_per_image"), unit="ms",
                           label="CPU per image, " + KIND_LABELS[k] + f", {state} files", quantity="amount",
                           better="lower", setting={"state": state}) for k in ("dl_pillow", "spdl_batch")}
        out += list(f.values()) + list(cpu.values())
        out.append(compare(f"paper.gain.{state}", f["spdl_batch"], f["dl_pillow"],
                           published=PUB_GAIN if state == "warm" else None))
        out.append(compare(f"paper.decoder.{state}", f["dl_spdl"], f["dl_pillow"]))
        out.append(compare(f"paper.parallelism.{state}", f["spdl_batch"], f["dl_spdl"]))
        out.append(compare(f"paper.cpu_ratio.{state}", cpu["spdl_batch"], cpu["dl_pillow"],
                           published=PUB_CPU if state == "warm" else None))
        a, b, c = (f[k].number for k in ("dl_pillow", "dl_spdl", "spdl_batch"))
        if a and b and c and abs(math.log(c / a)) > 1e-9:
            lt = math.log(c / a)
            out.append(Fact(f"paper.decoder_share.{state}", math.log(b / a) / lt, "%",
                            "the decoder's share of the gain (in logarithms)", "share", None, setting={"state": state}))
            out.append(Fact(f"paper.parallelism_share.{state}", math.log(c / b) / lt, "%",
                            "the parallelism's share of the gain (in logarithms)", "share", None,
                            setting={"state": state}))
    # the best thread configuration: the sweep and the comparison's pipeline, warm files
    warm = pd.concat([sweep, comp[(comp["state"] == "warm") & (comp["loader"] == "spdl_batch")]], ignore_index=True)
    if not warm.empty and "config" in warm:
        means = warm.groupby("config").agg(rate=("images_per_s", "mean"), n=("images_per_s", "size"))
        cfg = str(means["rate"].idxmax())
        rows = warm[warm["config"] == cfg]
        first = rows.iloc[0]
        setting = dict(images_per_task=int(first["images_per_task"]), concurrency=int(first["concurrency"]),
                       threads=int(first["threads"]))
        bt = measured("paper.best_threads", _rates(rows), unit="images/s",
                      label=f"the best thread pipeline ({cfg}), warm files", setting=setting)
        out.append(bt)
        dls = [x for x in out if x.key in ("paper.dl_pillow.warm", "paper.dl_spdl.warm")]
        bd = best(dls)
        if bd is not None:
            out.append(compare("paper.best_vs_dataloader", bt, bd))
        g = rows["gil_busy_share"].astype(float).mean()
        cpu_ms = rows["cpu_ms_per_image"].astype(float).mean()
        load = float(rows["cpu_cores"].astype(float).mean()) / cores
        stages = _table(res, "paper_stages")
        busy = None
        if not stages.empty:
            d = stages[(stages["config"] == cfg) & (stages["stage"] == "decode") & (stages["state"] == "warm")]
            busy = min(1.0, float(d["busy"].astype(float).mean())) if not d.empty else None
        lag = rows["loop_lag_ms"].astype(float).mean() if "loop_lag_ms" in rows else float("nan")
        out += [Fact("paper.best.gil_busy_share", g, "%", "share of time the GIL was busy (probe)", "share", "lower"),
                Fact("paper.best.cpu_ms_per_image", cpu_ms, "ms", "CPU per image, best thread pipeline", "amount",
                     "lower"),
                Fact("paper.best.cpu_load", load, "%", "share of the cores busy, best thread pipeline", "share", None),
                Fact("paper.best.decode_busy", busy, "%", "decode stage occupancy, best thread pipeline", "share",
                     None),
                Fact("paper.best.loop_lag_ms", lag if math.isfinite(lag) else None, "ms",
                     "the event loop's scheduling delay per wake", "time", "lower")]
        limit = ("gil" if g >= LIMIT_AT else "cpu" if load >= LIMIT_AT
                 else "decode_stage" if busy is not None and busy >= LIMIT_AT else "consumer")
        out.append(Fact("paper.limit", limit, "", "what limits the best thread pipeline", "choice", None,
                        setting=setting))
    held = _table(res, "gil_held")
    for r in held.itertuples() if not held.empty else ():
        if r.op != "idle":
            out.append(Fact(f"paper.gil_held.{r.op}", float(r.held_ms_per_image), "ms",
                            f"GIL-held time per image, {r.op}", "time", "lower"))
    return out


def loader_advice(facts: Facts, res) -> Advice | None:
    """Which loader to use for this workload, from the SPDL question's warm runs."""
    cands = [facts.get(k) for k in ("paper.dl_pillow.warm", "paper.dl_spdl.warm", "paper.best_threads")]
    top = best([c for c in cands if c is not None])
    if top is None:
        return None
    value = {"paper.dl_pillow.warm": "DataLoader, Pillow", "paper.dl_spdl.warm": "DataLoader, spdl.io",
             "paper.best_threads": "SPDL pipeline, spdl.io"}[top.key]
    cores = int(res.metadata.get("cores") or 1)
    gain = ("paper.best_vs_dataloader" if top.key == "paper.best_threads"
            else "paper.decoder.warm" if top.key == "paper.dl_spdl.warm" else None)
    return Advice("image_decode.loader", "loader", value,
                  f"photo-like JPEGs decoded and resized on {cores} cores", gain=gain,
                  evidence=tuple(c.key for c in cands if c is not None) + ("paper.limit",))


#: The checklist's keys (chapter 12, the front page): still computed by the page's findings, carried
#: over here as facts until the page words facts only.
CHECKLIST = ("primitives", "end_to_end", "cost", "first_batch")


def checklist_facts(res) -> list[Fact]:
    from datajourney.chapters.c08_threads_processes_gil import page as _page  # bridge, see CHECKLIST

    out = []
    for key, fn in (("primitives", _page.finding_primitives), ("end_to_end", _page.finding_end_to_end),
                    ("cost", _page.finding_cost), ("first_batch", _page.finding_first_batch)):
        try:
            f = fn(res)
        except Exception:
            continue
        v = f.value if isinstance(f.value, (int, float)) and not isinstance(f.value, bool) else None
        out.append(Fact(key, v, str(f.unit or ""), key.replace("_", " "), "share" if f.unit == "%" else "amount",
                        None))
    return out


def photo_decode(res) -> dict | None:
    from datajourney.chapters.c08_threads_processes_gil import hops  # bridge: hops reads the page's rules

    try:
        return hops.photo_decode(res)
    except Exception:
        return None


def analyse(res) -> Facts:
    facts = Facts(CHAPTER, exports=EXPORTS + CHECKLIST + ("photo_decode",))
    facts.add(*checklist_facts(res))
    facts.add(*paper_facts(res))
    facts.advise(loader_advice(facts, res))
    pd_ = photo_decode(res)
    if pd_ is not None:
        facts.data["photo_decode"] = pd_
    return facts
