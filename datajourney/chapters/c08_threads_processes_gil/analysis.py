"""Chapter 8's facts: what its result shows, typed and named, no prose (the page words them).

Every number the page's opening, key results and advice use is computed here from the result's tables: the
primitive scaling (threads against processes at their peaks), the per-operation contention, the best thread
pipeline against the best DataLoader end to end (throughput, CPU and memory), the time to the first batch by
start method, the cost of moving a batch between processes (for chapters 3 and 7), the epoch's memory, the
model-fed runs, the SPDL question (section 8) and the loader advice; with ``facts.data["photo_decode"]`` for
chapter 12. The summaries the page's tables and charts show (:func:`loader_summary`, :func:`primitive_summary`,
...) live here too, so that both read one computation."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from datajourney.chapters.c08_threads_processes_gil import choice
from datajourney.chapters.c08_threads_processes_gil.params import (
    CHAPTER,
    HYBRID_HEADROOM,
    HYBRID_STEP,
    LABELS,
    THREADED,
    Params,
)
from datajourney.core import stats
from datajourney.core.answers import MIN_EFFECT, Candidate, Question, decide, exceeds
from datajourney.core.facts import FLAGGED, Advice, Fact, Facts, compare, measured

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
EXPORTS = ("primitives", "contention", "end_to_end", "cost", "first_batch", "moonshot", "epoch_memory",
           "photo_decode", "paper.gain.warm", "paper.gain.cold", "paper.decoder.warm", "paper.parallelism.warm",
           "paper.decoder_share.warm", "paper.parallelism_share.warm", "paper.cpu_ratio.warm", "paper.best_threads",
           "paper.limit", "paper.best.gil_busy_share", "paper.best.cpu_ms_per_image",
           "image_decode.loader", "ipc.main_ms", "ipc.worker_ms", "ipc.extra_ms")


#: What the comparison of a state with one run per loader decides: nothing (no spread to call two sides level).
ONE_RUN = "one_run"
ONE_RUN_LABEL = "one run each: no spread to decide whether the loaders differ"

#: The SPDL question's best thread configuration, named apart from section 3's "best thread pipeline" (cold).
BEST = "the SPDL sweep's best thread setting"
#: A sweep's best measured only in the runs that picked it (results from before the fresh runs existed): the
#: loader question then decides at the paper's own setting, whose runs picked nothing.
UNCONFIRMED = "paper.best_threads.unconfirmed"
UNCONFIRMED_LABEL = ("thread settings the sweep's best was picked from, with no fresh runs of it: the loader "
                     "question decides at the paper's setting")

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
        gain, cut = (PUB_GAIN, PUB_CPU) if state == "warm" else (None, None)   # the paper's figures are warm
        out += [*f.values(), *cpu.values(),
                compare(f"paper.gain.{state}", f["spdl_batch"], f["dl_pillow"], published=gain),
                compare(f"paper.decoder.{state}", f["dl_spdl"], f["dl_pillow"]),
                compare(f"paper.parallelism.{state}", f["spdl_batch"], f["dl_spdl"]),
                compare(f"paper.cpu_ratio.{state}", cpu["spdl_batch"], cpu["dl_pillow"], published=cut)]
        a, b, c = (f[k].number for k in ("dl_pillow", "dl_spdl", "spdl_batch"))
        if any(x.number is not None and x.n < 2 for x in f.values()):
            # one run: no spread to tell a difference from noise, so no side is named faster and no gain is shared
            out.append(Fact(f"paper.one_run.{state}", ONE_RUN, "", ONE_RUN_LABEL, "choice", None,
                            setting={"state": state}))
        elif a and b and c and abs(math.log(c / a)) > 1e-9:
            out += [Fact(f"paper.{what}_share.{state}", math.log(hi / lo) / math.log(c / a), "",
                         f"the {what}'s share of the gain (in logarithms)", "share", None, setting={"state": state})
                    for what, hi, lo in (("decoder", b, a), ("parallelism", c, b))]
    # a cold read cannot beat a warm one: a configuration that measured so is flagged, not compared
    by_key = {x.key: x for x in out}
    for k in ("dl_pillow", "dl_spdl", "spdl_batch"):
        cold, warm_f = by_key.get(f"paper.{k}.cold"), by_key.get(f"paper.{k}.warm")
        if cold is not None and warm_f is not None and exceeds(cold, warm_f):
            out.append(Fact(f"paper.{k}.cold" + FLAGGED, "flagged", "", f"{KIND_LABELS[k]} ran faster with cold files "
                            "than with warm ones", "choice", None))
    # the best thread configuration: the sweep and the comparison's pipeline, warm files (the choice the experiment
    # made from the same rows for the end-to-end comparison); its verdict against the DataLoaders is the loader
    # question's (:func:`loader_advice`), never a second one here
    warm = choice.warm_pipeline_rows(comp, sweep)
    chosen = choice.best_setting(warm)
    if chosen is not None:
        cfg = chosen["config"]
        # its value from the fresh runs of it, where the run made them: the runs that picked a maximum overstate it
        fresh = choice.confirmed_rows(_table(res, "paper_confirm"), chosen)
        rows = warm[warm["config"] == cfg] if fresh.empty else fresh
        setting = {k: chosen[k] for k in ("images_per_task", "concurrency", "threads")}
        out.append(measured("paper.best_threads", _rates(rows), unit="images/s", label=f"{BEST} ({cfg}), warm files",
                            setting=setting))
        if fresh.empty:
            out.append(Fact(UNCONFIRMED, len(chosen["candidates"]), "", UNCONFIRMED_LABEL, "count", None))
        g = rows["gil_busy_share"].astype(float).mean()
        cpu_ms = rows["cpu_ms_per_image"].astype(float).mean()
        load = float(rows["cpu_cores"].astype(float).mean()) / cores
        stages = _table(res, "paper_stages")
        busy = None
        if not stages.empty:
            d = stages[(stages["config"] == cfg) & (stages["stage"] == "decode") & (stages["state"] == "warm")]
            busy = float(d["busy"].astype(float).mean()) if not d.empty else None
            if busy is not None and busy > 1 + MIN_EFFECT:  # an occupancy above 100% is a measurement problem
                out.append(Fact("paper.best.decode_busy" + FLAGGED, busy, "%", OVER_FULL, "share", None))
                busy = None
        lag = rows["loop_lag_ms"].astype(float).mean() if "loop_lag_ms" in rows else float("nan")
        out += [Fact("paper.best.gil_busy_share", g, "%", "share of time the GIL was busy (probe)", "share", "lower"),
                Fact("paper.best.cpu_ms_per_image", cpu_ms, "ms", f"CPU per image, {BEST}", "amount", "lower"),
                Fact("paper.best.cpu_load", load, "%", f"share of the cores busy, {BEST}", "share", None),
                Fact("paper.best.decode_busy", busy, "%", f"decode stage occupancy, {BEST}", "share", None),
                Fact("paper.best.loop_lag_ms", lag if math.isfinite(lag) else None, "ms",
                     "the event loop's scheduling delay per wake", "time", "lower")]
        limit = ("gil" if g >= LIMIT_AT else "cpu" if load >= LIMIT_AT
                 else "decode_stage" if busy is not None and busy >= LIMIT_AT else "consumer")
        out.append(Fact("paper.limit", limit, "", f"what limits {BEST}", "choice", None, setting=setting))
    held = _table(res, "gil_held")
    for r in held.itertuples() if not held.empty else ():
        if r.op != "idle":
            out.append(Fact(f"paper.gil_held.{r.op}", float(r.held_ms_per_image), "ms",
                            f"GIL-held time per image, {r.op}", "time", "lower"))
    return out


# --------------------------------------------------------------------------- summaries of the tables
#: The decoders as the page names them.
DECODER_NAMES = {"pillow": "Pillow", "spdl": "spdl.io", "torchvision": "torchvision"}
#: Results measured before timed windows were sized by waves (no ``window_rule`` in their metadata) timed a
#: fixed number of batches. For them only, a window counts as steady when its CPU time per image (all
#: processes) reaches this share of one image's decode + resize on one core (the calibration).
STEADY_SHARE = 0.85
#: Windows sized by waves can still count images decoded before they opened (the loader's queues and prefetch
#: hold more than a wave on a host with many cores): a window whose CPU time per image falls below this share of
#: one image's decode + resize on one core did not make its images, and is left out like an old window that fell
#: short. Decoding a batch in one call costs less per image than the calibration's one-image decode, so the floor
#: is half, not all, of that cost.
DRAINED_SHARE = 0.5
#: A model-fed run cannot exceed its ceiling by more than this (timing noise).
CEILING_SLACK = 1.05
PUB_MEM = "memory reduction, thread pipeline vs DataLoader"
PUB_SPDL = "peak throughput, SPDL, Python 3.12"
PUB_DL = "peak throughput, DataLoader, Python 3.12"
PUB_TTFB4 = "DataLoader time to first batch, 4 workers"
PUB_TTFB32 = "DataLoader time to first batch, 32 workers"


def count(n: int, word: str) -> str:
    """'1 thread', '8 threads', '2 processes'."""
    return f"{int(n)} {word}" + ("" if int(n) == 1 else "es" if word.endswith("s") else "s")


def decoder_name(d) -> str:
    return DECODER_NAMES.get(d, str(d))


def shape_of(rows: pd.DataFrame) -> dict | None:
    """The batch-decode pipeline's images per task and threads of loader or model rows (None: not that pipeline)."""
    if "images_per_task" not in rows or rows.empty:
        return None
    k, t = rows["images_per_task"].iloc[0], rows["threads"].iloc[0] if "threads" in rows else None
    if k is None or pd.isna(k) or not int(k) or t is None or pd.isna(t):
        return None
    return dict(images_per_task=int(k), threads=int(t))


def loader_label(kind: str, c: int, nice=0, share=None, decoder=None, shape: dict | None = None) -> str:
    """A loader configuration in words: "thread pool, 32 threads, Pillow", "SPDL pipeline, batch decode, 64 per
    task, 16 at once, 20 threads, spdl.io" (plain text; the page escapes it)."""
    unit = "worker" if kind in ("dataloader", "hybrid") else ("read thread" if kind == "nvjpeg" else "thread")
    out = f"{LABELS.get(kind, kind)}, {count(c, unit)}"
    if shape:
        out = (f"{LABELS.get(kind, kind)}, {shape['images_per_task']} per task, {c} at once, "
               f"{count(shape['threads'], 'thread')}")
    if decoder is not None and not pd.isna(decoder) and kind not in ("nvjpeg", "hybrid"):
        out += f", {decoder_name(decoder)}"
    if nice is not None and not pd.isna(nice) and int(nice):
        out += f" at nice {int(nice)}"
    if share is not None and not pd.isna(share):
        out += f" ({100 * float(share):.0f}% decoded on the CPU)"
    return out


def has(res, name: str) -> bool:
    return name in res.tables and not res.table(name).empty


def primitive_summary(res) -> pd.DataFrame:
    s = stats.summarise(res.table("primitives"), ["decoder", "executor", "concurrency"], "images_per_s")
    st = stats.summarise(res.table("primitives"), ["decoder", "executor", "concurrency"], "startup_s")
    return s.merge(st[["decoder", "executor", "concurrency", "mean"]].rename(columns={"mean": "startup_s"}))


def peak(res, decoder: str, executor: str) -> dict | None:
    """The peak of one pool in the primitive sweep: its concurrency, mean, runs and where scaling stopped
    (the smallest concurrency within 5% of the peak)."""
    s = primitive_summary(res)
    g = s[(s["decoder"] == decoder) & (s["executor"] == executor)]
    if g.empty:
        return None
    top = g.loc[g["mean"].idxmax()]
    p = res.table("primitives")
    runs = p[(p["decoder"] == decoder) & (p["executor"] == executor) & (p["concurrency"] == top["concurrency"])]
    knee = int(g[g["mean"] >= 0.95 * top["mean"]]["concurrency"].min())
    return dict(c=int(top["concurrency"]), mean=float(top["mean"]), runs=runs["images_per_s"].tolist(), knee=knee)


def contention_level(res) -> int:
    """The largest concurrency of the sweep that does not exceed the cores (no oversubscription)."""
    cs = sorted(res.table("ops")["concurrency"].unique())
    within = [c for c in cs if c <= res.metadata["cores"]]
    return int(within[-1] if within else cs[0])


def loaders(res) -> pd.DataFrame:
    """The loader runs with a decoder on every row (results before the decoder sweep: Pillow) and the PSS each
    added in MB (older results recorded it in bytes)."""
    lo = res.table("loaders")
    if "decoder" not in lo:
        lo = lo.assign(decoder="pillow")
    if "added_pss_mb" not in lo:
        lo = lo.assign(added_pss_mb=lo["added_pss_bytes"] / 1e6 if "added_pss_bytes" in lo else np.nan)
    return lo


def unit_cost_ms(res, decoder: str = "pillow") -> float:
    """Decode + resize of one image on one core (ms), from the run's calibration."""
    cal = res.table("calibration").set_index("decoder")
    if decoder not in cal.index:
        return float("nan")
    return float(cal.loc[decoder, "decode_ms"] + cal.loc[decoder, "resize_ms"])


def old_windows(res) -> bool:
    """Whether a result was timed with the old fixed windows (before windows were sized by waves)."""
    return "window_rule" not in res.metadata


def floor_share(res) -> float:
    """The share of one image's decode + resize (one core) a window's CPU time per image must reach to count."""
    return STEADY_SHARE if old_windows(res) else DRAINED_SHARE


def steady(res, kind: str, cpu_ms: float, unit: float) -> bool:
    """Whether a timed window made the images it counted: its CPU time per image (all processes) reaches
    :func:`floor_share` of one image's decode + resize; GPU decoding is not judged by CPU time."""
    if kind == "nvjpeg" or not math.isfinite(unit):
        return True
    return cpu_ms >= floor_share(res) * unit


def loader_summary(res) -> pd.DataFrame:
    """One row per loader configuration (loader, concurrency, decoder): images/s over the runs and the means of
    first batch, CPU per image (user, system), busy cores and memory; ``threads``, the threads a loader ran where
    that is not its concurrency (the batch-decode pipeline: ``concurrency`` tasks at once on its own thread pool;
    else NaN)."""
    lo = loaders(res)
    keys = ["loader", "concurrency", "decoder"]
    out = stats.summarise(lo, keys, "images_per_s")
    extra = lo.assign(cpu_ms_per_image=1e3 * (lo["cpu_user_s"] + lo["cpu_system_s"]) / lo["images"],
                      user_ms_per_image=1e3 * lo["cpu_user_s"] / lo["images"],
                      system_ms_per_image=1e3 * lo["cpu_system_s"] / lo["images"],
                      pss_mb=lo["pss_bytes"] / 1e6, uss_mb=lo["uss_bytes"] / 1e6,
                      threads=(pd.to_numeric(lo["threads"], errors="coerce") if "threads" in lo else np.nan))
    cols = ["first_batch_s", "cpu_ms_per_image", "user_ms_per_image", "system_ms_per_image", "cpu_cores",
            "pss_mb", "uss_mb", "added_pss_mb", "processes", "threads"]
    agg = extra.groupby(keys, sort=False)[cols].mean().reset_index()
    out = out.merge(agg, on=keys)
    unit = [unit_cost_ms(res, d) for d in out["decoder"]]
    out["cpu_share"] = [np.nan if k == "nvjpeg" else v / u
                        for k, v, u in zip(out["loader"], out["cpu_ms_per_image"], unit, strict=True)]
    out["steady"] = [steady(res, k, v, u) for k, v, u in zip(out["loader"], out["cpu_ms_per_image"], unit,
                                                             strict=True)]
    return out


def best_loader(res, kinds, decoders=None) -> dict | None:
    """The fastest steady configuration among the loaders ``kinds`` (and ``decoders``, None: any)."""
    s = loader_summary(res)
    s = s[s["loader"].isin(kinds) & s["steady"] & (s["decoder"].isin(decoders) if decoders else True)]
    if s.empty:
        return None
    top = s.loc[s["mean"].idxmax()]
    lo = loaders(res)
    runs = lo[(lo["loader"] == top["loader"]) & (lo["concurrency"] == top["concurrency"])
              & (lo["decoder"] == top["decoder"])]
    shape = shape_of(runs)
    return dict(kind=top["loader"], c=int(top["concurrency"]), decoder=str(top["decoder"]), mean=float(top["mean"]),
                runs=runs, shape=shape, label=loader_label(top["loader"], top["concurrency"], decoder=top["decoder"],
                                                           shape=shape))


def best_threads(res) -> dict | None:
    """The thread pipeline the chapter sets against the DataLoader: the fastest with spdl.io (the paper's setting,
    decoding without the GIL) where the run has one, else the fastest of any decoder."""
    return best_loader(res, THREADED, ["spdl"]) or best_loader(res, THREADED)


def cpu_per_image(runs) -> list[float]:
    return (1e3 * (runs["cpu_user_s"] + runs["cpu_system_s"]) / runs["images"]).tolist()


def epoch_summary(res) -> pd.DataFrame:
    """One row per epoch (loader, storage): its time, the Dataset's size in the main process and, from each
    process's last sample, each worker's PSS and private memory (USS) and the whole tree's PSS growth over the
    epoch (from the first sample, before any worker existed); empty for results without the epoch."""
    if not has(res, "epoch"):
        return pd.DataFrame()
    ep, mem = res.table("epoch"), res.table("epoch_memory")
    rows = []
    for r in ep.itertuples():
        m = mem[(mem["loader"] == r.loader) & (mem["storage"] == r.storage)].sort_values("t")
        last = m.groupby("process").tail(1)
        workers = last[last["process"] != "main"]
        first = m[m["t"] == m["t"].min()]["pss_bytes"].sum()
        rows.append(dict(loader=r.loader, storage=r.storage, n_paths=int(r.n_paths), workers=int(r.workers),
                         seconds=float(r.seconds), dataset_mb=float(r.dataset_pss_mb),
                         worker_pss_mb=float(workers["pss_bytes"].mean()) / 1e6 if len(workers) else np.nan,
                         worker_uss_mb=float(workers["uss_bytes"].mean()) / 1e6 if len(workers) else np.nan,
                         main_uss_mb=float(last[last["process"] == "main"]["uss_bytes"].sum()) / 1e6,
                         tree_growth_mb=float(last["pss_bytes"].sum() - first) / 1e6 if len(m) else np.nan))
    return pd.DataFrame(rows)


def epoch_at(e: pd.DataFrame, loader: str, storage: str):
    row = e[(e["loader"] == loader) & (e["storage"] == storage)]
    return row.iloc[0] if len(row) else None


def model_runs(res) -> pd.DataFrame:
    """The model-fed runs, each labelled with its feed (kind, concurrency, workers' nice, CPU share); results made
    before the niced and hybrid feeds have neither column: nice 0, no share."""
    m = res.table("model") if "model" in res.tables else pd.DataFrame()
    if m.empty:
        return m
    nice = m["nice"] if "nice" in m else pd.Series(0, index=m.index)
    share = m["share"] if "share" in m else pd.Series(None, index=m.index, dtype=object)
    dec = m["decoder"] if "decoder" in m else pd.Series(None, index=m.index, dtype=object)
    shapes = [shape_of(m.loc[[i]]) for i in m.index]
    labels = [loader_label(k, c, n, sh, d, shape=sp) for k, c, n, sh, d, sp in zip(
        m["loader"], m["concurrency"], nice, share, dec, shapes, strict=True)]
    return m.assign(nice=nice.fillna(0), decoder=dec, label=labels)


def model_summary(res) -> pd.DataFrame:
    m = model_runs(res)
    if m.empty:
        return m
    s = stats.summarise(m, ["loader", "concurrency", "label"], "images_per_s")
    extra = m.groupby(["loader", "concurrency", "label"], sort=False)[
        ["pct_of_ceiling", "wait_share", "cpu_cores", "first_batch_s"]].mean().reset_index()
    s = s.merge(extra, on=["loader", "concurrency", "label"])
    s["cpu_ms_per_image"] = 1e3 * s["cpu_cores"] / s["mean"]
    unit = unit_cost_ms(res)
    s["steady"] = [steady(res, k, v, unit) and p <= 100 * CEILING_SLACK
                   for k, v, p in zip(s["loader"], s["cpu_ms_per_image"], s["pct_of_ceiling"], strict=True)]
    return s


# --------------------------------------------------------------------------- the key results as facts
def _as(f: Fact | None, key: str) -> Fact | None:
    """``f`` under another key (the headline copy of a per-decoder fact)."""
    return None if f is None else dataclasses.replace(f, key=key)


def headline_decoder(res) -> str | None:
    """The decoder of the primitive and contention headlines: Pillow where it ran, else the first decoder."""
    if not has(res, "primitives"):
        return None
    ds = list(dict.fromkeys(res.table("primitives")["decoder"]))
    return "pillow" if "pillow" in ds else ds[0]


def primitive_facts(res) -> list[Fact]:
    """Threads against processes at their peaks, for every decoder of the sweep; "primitives" is the headline
    decoder's comparison."""
    out: list[Fact] = []
    if not has(res, "primitives"):
        return out
    for d in dict.fromkeys(res.table("primitives")["decoder"]):
        t, p = peak(res, d, "thread"), peak(res, d, "process")
        if t is None or p is None:
            continue
        pools = [measured(f"primitives.{d}.{ex}", v["runs"], unit="images/s",
                          label=f"a {ex} pool ({count(v['c'], ex)}, {decoder_name(d)})",
                          setting=dict(decoder=d, executor=ex, concurrency=v["c"], knee=v["knee"]))
                 for ex, v in (("thread", t), ("process", p))]
        out += [*pools, compare(f"primitives.{d}", *pools)]
    head = headline_decoder(res)
    out.append(_as(next((f for f in out if f.key == f"primitives.{head}"), None), "primitives"))
    return out


#: The pools of the primitive sweep as a reader builds them.
POOL_CALLS = {"process": "concurrent.futures.ProcessPoolExecutor", "thread": "concurrent.futures.ThreadPoolExecutor"}


def pool_advice(facts: Facts, res) -> list[Advice]:
    """One threads-or-processes verdict per decoder, on the same work (section 1's warm decode, resize and batch of
    the same images): each pool at its peak, worker processes (the DataLoader's way) the baseline."""
    out = []
    for key in [k for k in facts.facts if k.startswith("primitives.") and k.endswith(".process")]:
        d = key.split(".")[1]
        cands = []
        for ex in ("process", "thread"):
            f = facts[f"primitives.{d}.{ex}"]
            c = int(f.setting["concurrency"])
            cands.append(Candidate(ex, f, call=f"{POOL_CALLS[ex]}(max_workers={c})"))
        q = Question(f"image_decode.pool.{d}", f"Worker processes or threads for decoding with {decoder_name(d)}?",
                     "executor", "process", "worker processes", "the DataLoader's way",
                     f"photo-like JPEGs decoded with {decoder_name(d)}, resized and batched, warm, on "
                     f"{int(res.metadata.get('cores') or 1)} cores")
        a = decide(q, cands, facts)
        if a is not None:
            out.append(a)
    return out


def contention_facts(res, op: str = "decode") -> list[Fact]:
    """Each decoder's ``op`` per image with one thread, with as many threads as cores and with as many processes;
    "contention" is the headline decoder's growth from one thread to many."""
    out: list[Fact] = []
    if not has(res, "ops"):
        return out
    m = res.table("ops").groupby(["decoder", "executor", "concurrency", "op"], as_index=False)["ms_per_image"].mean()
    n = contention_level(res)
    for d in dict.fromkeys(m["decoder"]):
        g = m[(m["decoder"] == d) & (m["op"] == op)]
        if g.empty:
            continue
        c1, fs = int(g["concurrency"].min()), {}
        for name, ex, c, where in (("thread_1", "thread", c1, "with"), ("thread_n", "thread", n, "with"),
                                   ("process_n", "process", n, "in")):
            v = g[(g["executor"] == ex) & (g["concurrency"] == c)]["ms_per_image"]
            if len(v):
                fs[name] = Fact(f"contention.{d}.{name}", float(v.iloc[0]), "ms",
                                f"{decoder_name(d)} {op} per image {where} {count(c, ex)}", "time", "lower",
                                setting=dict(decoder=d, op=op, concurrency=c, executor=ex))
        if "thread_1" not in fs or "thread_n" not in fs:
            continue
        f1, fn, fp = fs["thread_1"], fs["thread_n"], fs.get("process_n")
        out += [f1, fn, compare(f"contention.{d}", fn, f1)]
        if fp is not None:
            out += [fp, compare(f"contention.{d}.vs_processes", fn, fp)]
    head = headline_decoder(res)
    out.append(_as(next((f for f in out if f.key == f"contention.{head}"), None), "contention"))
    return out


def sweep_end_to_end(res) -> bool:
    """Whether the end-to-end runs hold the SPDL sweep's best setting (``spdl_batch``: results made since the
    experiment runs it after the sweep); older results compared thread loaders of one image per task only."""
    return has(res, "loaders") and bool((res.table("loaders")["loader"] == "spdl_batch").any())


def threads_label(t: dict) -> str:
    """The end-to-end thread side in words, named by what it is: the SPDL sweep's best setting, or (older results)
    the best of the thread loaders that decode one image per task."""
    return (f"the best thread loader ({t['label']}: the SPDL sweep's best setting)" if t["kind"] == "spdl_batch"
            else f"the best thread loader of one image per task ({t['label']})")


def end_to_end_facts(res) -> list[Fact]:
    """The best thread loader against the best DataLoader from cold files (the SPDL sweep's best setting among the
    thread loaders where the run has it): images/s, CPU per image and the memory each added (PSS over all
    processes)."""
    if not has(res, "loaders"):
        return []
    t, d = best_threads(res), best_loader(res, ["dataloader"])
    if t is None or d is None:
        return []
    st = dict(loader=t["kind"], concurrency=t["c"], decoder=t["decoder"], **(t["shape"] or {}))
    sd = dict(loader=d["kind"], concurrency=d["c"], decoder=d["decoder"])
    ft = measured("end_to_end.threads", t["runs"]["images_per_s"], unit="images/s", label=threads_label(t),
                  setting=st)
    fd = measured("end_to_end.dataloader", d["runs"]["images_per_s"], unit="images/s",
                  label=f"the best DataLoader ({d['label']})", setting=sd)
    ct = measured("cost.threads", cpu_per_image(t["runs"]), unit="ms", quantity="amount", better="lower",
                  label=f"the CPU per image of {threads_label(t)}", setting=st)
    cd = measured("cost.dataloader", cpu_per_image(d["runs"]), unit="ms", quantity="amount", better="lower",
                  label=f"the CPU per image of the best DataLoader ({d['label']}, all its processes)", setting=sd)
    # no ``published`` here: the paper's figures are percentages ("74% faster", "38% less CPU") that the front page
    # and the checklist show as printed, which is not this ratio's phrasing; section 8's facts carry them instead
    out = [ft, fd, compare("end_to_end", ft, fd), ct, cd, compare("cost", ct, cd)]
    tm, dm = float(t["runs"]["added_pss_mb"].mean()), float(d["runs"]["added_pss_mb"].mean())
    if math.isfinite(tm) and math.isfinite(dm):
        mt = Fact("cost.memory.threads", tm, "MB", f"the memory {threads_label(t)} added", "amount", "lower",
                  setting=st)
        md = Fact("cost.memory.dataloader", dm, "MB", f"the memory the best DataLoader added ({d['label']})",
                  "amount", "lower", setting=sd)
        out += [mt, md, compare("cost.memory", mt, md)]
    else:  # the memory each added is not in the result: the whole trees' PSS
        out += [Fact("cost.pss.threads", float(t["runs"]["pss_bytes"].mean()) / 1e6, "MB",
                     "the memory of all the thread pipeline's processes (PSS)", "amount", "lower", setting=st),
                Fact("cost.pss.dataloader", float(d["runs"]["pss_bytes"].mean()) / 1e6, "MB",
                     "the memory of all the DataLoader's processes (PSS)", "amount", "lower", setting=sd)]
    return out


def first_batch_facts(res) -> list[Fact]:
    """The DataLoader's time to its first batch with the most workers and the largest Dataset, by start method;
    "first_batch" is the slowest method's."""
    if not has(res, "startup"):
        return []
    st = res.table("startup")
    w, n = int(st["workers"].max()), int(st["n_paths"].max())
    part = st[(st["workers"] == w) & (st["n_paths"] == n)].set_index("start_method")
    small = st[(st["workers"] == w) & (st["n_paths"] == st["n_paths"].min())].set_index("start_method")
    by = {str(m): float(part.loc[m, "first_batch_s"]) for m in part.index}
    out = [Fact(f"first_batch.{m}", v, "s", f"the first batch with {m}", "time", "lower",
                setting=dict(start_method=m, workers=w, paths=n)) for m, v in by.items()]
    slow = max(by, key=by.get)
    head = dataclasses.replace(next(f for f in out if f.key == f"first_batch.{slow}"), key="first_batch")
    out.append(head)
    if slow in small.index and int(st["n_paths"].min()) != n:
        empty = Fact(f"first_batch.{slow}.small", float(small.loc[slow, "first_batch_s"]), "s",
                     f"the first batch with {slow} and {int(st['n_paths'].min()):,} paths", "time", "lower",
                     setting=dict(start_method=slow, workers=w, paths=int(st["n_paths"].min())))
        out += [empty, compare("first_batch.paths", head, empty)]
    if "fork" in by and "spawn" in by:
        out += [compare("first_batch.fork_vs_spawn", out[list(by).index("fork")], out[list(by).index("spawn")]),
                compare("first_batch.spawn_vs_fork", out[list(by).index("spawn")], out[list(by).index("fork")])]
    # the published start-up figures' setting: spawned workers (4 and 32) with the largest Dataset
    for k in (4, 32):
        v = st[(st["n_paths"] == n) & (st["start_method"] == "spawn") & (st["workers"] == k)]["first_batch_s"]
        if len(v):
            out.append(measured(f"first_batch.spawn.w{k}", [float(x) for x in v], unit="s", quantity="time",
                                better="lower", label=f"the first batch with spawn, {k} workers and {n:,} paths",
                                setting=dict(start_method="spawn", workers=k, paths=n)))
    if "pickled_bytes" in part:
        out.append(Fact("first_batch.pickled_mb", float(part["pickled_bytes"].iloc[0]) / 1e6, "MB",
                        "the Dataset pickled", "amount", "lower", setting=dict(paths=n)))
    return out


def ipc_facts(res) -> list[Fact]:
    """Moving a batch between processes on its own (already decoded images): ms per batch at the smallest
    batch size measured, in the main process and through one worker process, and the worker's extra time;
    exported for the pages of chapters 3 and 7, which point here where one worker meets none."""
    ipc = _table(res, "ipc")
    if ipc.empty or not {"batch_size", "workers", "ms_per_batch"} <= set(ipc.columns):
        return []
    bs = int(ipc["batch_size"].min())
    at = ipc[ipc["batch_size"] == bs]
    main, one = at[at["workers"] == 0]["ms_per_batch"], at[at["workers"] == 1]["ms_per_batch"]
    if main.empty or one.empty:
        return []
    fm = measured("ipc.main_ms", main, unit="ms", label=f"a batch of {bs} decoded images in the main process",
                  quantity="time", better="lower", setting=dict(batch_size=bs, workers=0))
    fw = measured("ipc.worker_ms", one, unit="ms", label=f"a batch of {bs} decoded images through one worker process",
                  quantity="time", better="lower", setting=dict(batch_size=bs, workers=1))
    extra = fw.number - fm.number if fw.number is not None and fm.number is not None else None
    return [fm, fw, Fact("ipc.extra_ms", extra, "ms", "one worker process's extra time per batch", "time", "lower",
                         setting=dict(batch_size=bs, workers=1))]


def epoch_facts(res) -> list[Fact]:
    """Each DataLoader worker's private memory at the end of an epoch, paths in a Python list against a NumPy
    array, and the thread pipeline's growth over the same epoch."""
    e = epoch_summary(res)
    if e.empty:
        return []
    lst, arr = epoch_at(e, "dataloader", "list"), epoch_at(e, "dataloader", "numpy")
    if lst is None or arr is None or not (math.isfinite(lst["worker_uss_mb"]) and math.isfinite(arr["worker_uss_mb"])):
        return []
    setting = dict(paths=int(lst["n_paths"]), workers=int(lst["workers"]))
    fl, fa = (Fact(f"epoch_memory.{st}", float(r["worker_uss_mb"]), "MB",
                   f"each worker's private memory with the paths in {held}", "amount", "lower", setting=setting)
              for st, r, held in (("list", lst, "a Python list"), ("numpy", arr, "a NumPy array")))
    out = [fl, fa, compare("epoch_memory", fl, fa), compare("epoch_memory.numpy_gain", fa, fl)]
    thr = epoch_at(e, "spdl", "list")
    if thr is not None and math.isfinite(thr["tree_growth_mb"]):
        out.append(Fact("epoch_memory.threads_growth", float(thr["tree_growth_mb"]), "MB",
                        "the thread pipeline's growth over the epoch (PSS)", "amount", "lower", setting=setting))
    return out


def moonshot_facts(res) -> list[Fact]:
    """The model-fed runs: the fastest steady feed's share of the model's ceiling (over its runs)."""
    s = model_summary(res)
    ceil = res.metadata.get("ceiling")
    if s.empty or not ceil:
        return []
    s = s[s["steady"]]
    if s.empty:
        return []
    top = s.loc[s["mean"].idxmax()]
    runs = model_runs(res)
    runs = runs[runs["label"] == top["label"]]
    kind = res.metadata.get("model_step") or "eager"
    setting = dict(feed=str(top["label"]), step=kind, left_out=int((~model_summary(res)["steady"]).sum()))
    out = [measured("moonshot", runs["pct_of_ceiling"], unit="%", quantity="share",
                    label=f"the share of the model's ceiling fed by {top['label']}", setting=setting),
           measured("moonshot.best", runs["images_per_s"], unit="images/s", label=str(top["label"]), setting=setting),
           Fact("moonshot.ceiling", float(ceil["images_per_s"]), "images/s",
                "the model's ceiling on a batch kept in GPU memory", setting=dict(step=kind))]
    other = {"graphed": "eager", "eager": "graphed"}[kind]
    oc = (res.metadata.get("ceilings") or {}).get(other)
    if oc:
        fo = Fact(f"moonshot.ceiling.{other}", float(oc["images_per_s"]), "images/s",
                  f"the {other} step's ceiling", setting=dict(step=other))
        out += [fo, compare("moonshot.step_gain", out[2], fo)]
    if kind == "eager" and res.metadata.get("graph_note"):   # why the graphed step was not used: a recorded code
        out.append(Fact("moonshot.graph_skipped", str(res.metadata["graph_note"]), "",
                        "why the graphed step was not used", "choice", None))
    return out


# --------------------------------------------------------------------------- advice
def _dataloader_snippet(res, workers: int, decoder: str) -> str:
    p = res.parameters
    pin = res.metadata.get("device") == "cuda"
    size = Params.value_of(p, "out_size")
    decode = (f"import spdl.io\n\n# in the Dataset's __getitem__, decode and scale with spdl.io in place of Pillow\n"
              f"image = spdl.io.to_numpy(spdl.io.convert_frames({SPDL_DECODE_CALL.removesuffix(')')},\n"
              f"    filter_desc=\"scale=w={size}:h={size}:flags=bilinear,format=pix_fmts=rgb24\")))\n\n"
              if decoder == "spdl" else f"# the Dataset decodes with {decoder_name(decoder)}\n")
    return (decode +
            f"loader = DataLoader(dataset, batch_size={Params.value_of(p, 'batch_size')}, "
            f"num_workers={workers}, pin_memory={pin},\n"
            f"                    prefetch_factor={Params.value_of(p, 'prefetch_factor')}, "
            "persistent_workers=True)")


def _threads_snippet(res, kind: str, c: int, decoder: str, shape: dict | None = None) -> str:
    """The winning thread loader as code, with this run's threads, batch and image size filled in (``shape``: the
    batch-decode pipeline's images per task and threads)."""
    p = res.parameters
    size = Params.value_of(p, "out_size")
    batch = Params.value_of(p, "batch_size")
    gpu = res.metadata.get("device") == "cuda"
    if kind == "spdl_batch" and shape:
        k, t = int(shape["images_per_task"]), int(shape["threads"])
        return ("import spdl.io\nimport torch\nfrom spdl.pipeline import PipelineBuilder\n\n"
                "def load(paths):   # one call reads, decodes and scales a task's images into one buffer\n"
                "    return spdl.io.to_torch(spdl.io.load_image_batch(paths, width=None, height=None, pix_fmt=None,\n"
                f"        filter_desc=\"scale=w={size}:h={size}:flags=bilinear,format=pix_fmts=rgb24\"))\n\n"
                f"pipeline = (PipelineBuilder().add_source(paths).aggregate({k})\n"
                f"            .pipe(load, concurrency={c})\n"
                + (f"            .aggregate({batch // k}).pipe(torch.cat)\n" if k < batch else "")
                + ("            .pipe(spdl.io.transfer_tensor)\n" if gpu else "")
                + f"            .add_sink(2).build(num_threads={t}))")
    spdl = decoder == "spdl"
    read = ("spdl.io.decode_packets(spdl.io.demux_image(path),\n"
            f"        filter_desc=\"scale=w={size}:h={size},format=pix_fmts=rgb24\")" if spdl else
            f"np.asarray(Image.open(path).convert(\"RGB\").resize(({size}, {size})))")
    stack = "spdl.io.to_torch(spdl.io.convert_frames({}))" if spdl else "torch.from_numpy(np.stack({}))"
    if kind == "threadpool":
        return (f"def decode(path):\n    return {read}\n\n"
                f"with ThreadPoolExecutor({c}) as pool:   # one task per image, in order\n"
                f"    images = list(pool.map(decode, paths[:{batch}]))\n"
                f"    batch = {stack.format('images')}")
    decode = ("def decode(path):" + ("   # FFmpeg decodes and scales without the GIL" if spdl else "")
              + f"\n    return {read}\n\n"
              + ("def batch(frames):   # one copy of the whole batch, GIL released\n" if spdl
                 else "def batch(images):\n")
              + f"    return {stack.format('frames' if spdl else 'images')}\n")
    return ("import spdl.io\nfrom spdl.pipeline import PipelineBuilder\n\n" + decode + "\n"
            f"pipeline = (PipelineBuilder().add_source(paths)\n"
            f"            .pipe(decode, concurrency={c}).aggregate({batch}).pipe(batch)\n"
            + ("            .pipe(spdl.io.transfer_tensor_h2d)\n" if gpu else "")
            + f"            .add_sink(4).build(num_threads={c + 3}))")


#: Why a stage's measured occupancy can pass 100%: the counter adds each task's whole time to the lap it ends in.
OVER_FULL = ("the decode stage's occupancy measured above 100%: each finished task's whole time counts in the lap "
             "it ends in, so tasks begun before a short lap push it past full")


#: The question chapter 8 answers for a reader: keep PyTorch's DataLoader (worker processes) as a reader has it,
#: decoding with Pillow (torchvision's image loader), or change the decoder, or decode in threads.
LOADER_DEFAULT = "torch.utils.data.DataLoader"
#: The decoder a DataLoader has by default: torchvision's datasets open images with Pillow.
DEFAULT_DECODER = "pillow"
#: How a reader decodes and scales one image with spdl.io in place of Pillow (the call the chapter measured).
SPDL_DECODE_CALL = "spdl.io.decode_packets(spdl.io.demux_image(data))"
#: What the advice names (its snippet holds the whole call): short enough for a table cell to wrap.
SPDL_DECODE = "spdl.io.decode_packets"


def dataloader_kind(decoder) -> str:
    """A DataLoader candidate's kind, named by its decoder: "DataLoader, Pillow" (the default),
    "DataLoader, spdl.io"."""
    return f"DataLoader, {decoder_name(decoder)}"


#: The loader question's baseline: the DataLoader with the decoder it has by default.
DEFAULT_KIND = dataloader_kind(DEFAULT_DECODER)


def _dataloader_candidate(res, value: str, f: Fact | None, workers: int | None, decoder: str) -> Candidate:
    """A DataLoader candidate: its own kind for each decoder (the default's decoder is the baseline); another
    decoder is advised as its decode call, in the DataLoader at its workers."""
    dl_call = f"{LOADER_DEFAULT}(num_workers={workers})" if workers else LOADER_DEFAULT
    default = decoder == DEFAULT_DECODER
    return Candidate(value, f, group=dataloader_kind(decoder),
                     call=(f"num_workers={workers}" if workers else None) if default
                     else SPDL_DECODE if decoder == "spdl" else None,
                     at=None if default else dl_call,
                     snippet=_dataloader_snippet(res, workers, decoder) if workers else None)


def _paper_workers(res, kind: str) -> int | None:
    comp = _table(res, "paper")
    rows = comp[comp["loader"] == kind] if not comp.empty and "loader" in comp else comp
    return int(rows["concurrency"].iloc[0]) if not rows.empty and "concurrency" in rows else None


def loader_advice(facts: Facts, res) -> Advice | None:
    """Which loader to use for this workload, decided like for like against the library's default: the DataLoader
    decoding with Pillow. Each candidate is named by its loader and its decoder, and each is its own kind, so a gain
    is always measured against that default. From the end-to-end runs (cold files to the GPU, the runs that feed
    the model) where they hold the sweep's best thread setting and a DataLoader decoding with Pillow; else from the
    SPDL question's warm runs, which always hold the default beside the DataLoader decoding with spdl.io and the
    sweep's best thread setting."""
    d, t = facts.get("end_to_end.dataloader"), facts.get("end_to_end.threads")
    e2e_default = d is not None and d.number is not None and str(d.setting.get("decoder")) == DEFAULT_DECODER
    paper = [facts.get(k) for k in ("paper.dl_pillow.warm", "paper.dl_spdl.warm", "paper.best_threads")]
    if not (sweep_end_to_end(res) and e2e_default) and paper[0] is not None:
        q = _question(res, "paper")
        dl_pillow, dl_spdl, threads = paper
        shape = dict(threads.setting) if threads is not None and "concurrency" in threads.setting else None
        if UNCONFIRMED in facts:    # a maximum with no fresh runs overstates itself: the paper's setting instead
            threads, shape = facts.get("paper.spdl_batch.warm"), (res.metadata.get("paper") or {}).get("spdl_config")
        c = int(shape["concurrency"]) if shape else None
        cands = [_dataloader_candidate(res, DEFAULT_KIND, dl_pillow, _paper_workers(res, "dl_pillow"), "pillow"),
                 _dataloader_candidate(res, dataloader_kind("spdl"), dl_spdl, _paper_workers(res, "dl_spdl"), "spdl"),
                 Candidate("SPDL pipeline, spdl.io", threads, group="threads", call="spdl.pipeline.PipelineBuilder",
                           at=f"concurrency={c}, num_threads={shape['threads']}" if shape else None,
                           snippet=_threads_snippet(res, "spdl_batch", c, "spdl", shape) if shape else None)]
        a = decide(q, cands, facts)
        return None if a is None else dataclasses.replace(a, evidence=a.evidence + ("paper.limit",))
    # the end-to-end runs: without a DataLoader decoding with Pillow among them the default was not measured, and
    # :func:`decide` gives no advice
    q = _question(res, "end_to_end")
    cands = []
    for f in (d, t):
        if f is None or f.number is None:
            continue
        kind, c, dec = str(f.setting["loader"]), int(f.setting["concurrency"]), str(f.setting["decoder"])
        if kind == "dataloader":
            cands.append(_dataloader_candidate(res, f"DataLoader, {count(c, 'worker')}, {decoder_name(dec)}", f, c,
                                               dec))
            continue
        shape = {k: f.setting[k] for k in ("images_per_task", "threads") if k in f.setting} or None
        at = (f"max_workers={c}" if kind == "threadpool"
              else f"concurrency={c}, num_threads={shape['threads']}" if shape else f"concurrency={c}")
        cands.append(Candidate(f"{LABELS.get(kind, kind)}, {count(c, 'thread')}, {decoder_name(dec)}", f,
                               group="threads", call=THREAD_CALLS.get(kind, kind), at=at,
                               snippet=_threads_snippet(res, kind, c, dec, shape)))
    a = decide(q, cands, facts)
    return None if a is None else dataclasses.replace(a, evidence=a.evidence + ("cost",))


#: How a reader sets up each feed of the model-fed runs, and which ones decode on the GPU (the question's cost).
FEED_CALLS = {"dataloader": LOADER_DEFAULT, "spdl_batch": "spdl.pipeline.PipelineBuilder",
              "spdl": "spdl.pipeline.PipelineBuilder", "threadpool": "concurrent.futures.ThreadPoolExecutor",
              "nvjpeg": "torchvision.io.decode_jpeg(data, device='cuda')",
              "hybrid": "decode_jpeg(data, device='cuda') for the GPU's share"}
GPU_DECODE = ("nvjpeg", "hybrid")
#: The model-fed runs' model, as the advice names it.
MODEL_WORDS = {"resnet50": "ResNet-50", "small_cnn": "a small CNN"}


def model_feed_advice(facts: Facts, res) -> Advice | None:
    """Decode on the CPU or on the GPU, for the model-fed runs (cold JPEG files into the training step, every feed
    doing that same work): the steady feeds' best run of each loader, against the library's default, the DataLoader
    decoding with Pillow. Decoding on the GPU (nvJPEG, alone or for part of each batch) has a cost, GPU time and memory
    taken from training, so it must clear the larger threshold. None without the default among the steady feeds."""
    s = model_summary(res)
    if s.empty:
        return None
    runs = model_runs(res)
    cands = []
    for _, row in s[s["steady"]].iterrows():
        kind, label = str(row["loader"]), str(row["label"])
        part = runs[runs["label"] == label]
        if kind == "dataloader" and not _default_feed(part).all():
            continue   # a DataLoader decoding otherwise, or with niced workers, is not the default: nor another kind
        f = measured(f"model_feed.{kind}.{int(row['concurrency'])}", part["images_per_s"].astype(float).tolist(),
                     unit="images/s", label=label, setting=dict(loader=kind, concurrency=int(row["concurrency"])))
        call = FEED_CALLS.get(kind, kind) if kind == "dataloader" else f"{label}, with {FEED_CALLS.get(kind, kind)}"
        cands.append(Candidate("dataloader" if kind == "dataloader" else label, f, group=kind, call=call,
                               costly=kind in GPU_DECODE))
    model = MODEL_WORDS.get(str(res.parameters["model"]) if "model" in res.parameters else "", "the model")
    q = Question("image_decode.model_feed", "Decode the photos on the CPU or on the GPU, feeding the model?", "feed",
                 "dataloader", "the DataLoader decoding with Pillow", "PyTorch's loader with torchvision's Pillow "
                 "decoding", f"{model} fed from cold JPEG files",
                 cost="decoding on the GPU takes GPU time and memory from training")
    return decide(q, cands, facts)


def _default_feed(runs: pd.DataFrame) -> pd.Series:
    """Which model-fed runs of a DataLoader are the library's default: decoding with Pillow, workers not niced."""
    return (runs["decoder"].astype(str) == DEFAULT_DECODER) & (runs["nice"] == 0)


def _unmeasured(question: str, decoder, runs: str) -> Fact:
    return Fact(f"{question}.unmeasured", decoder_name(str(decoder)), "",
                f"the DataLoader's decoder in the {runs}, not {decoder_name(DEFAULT_DECODER)}", "choice", None)


def default_unmeasured(facts: Facts, res) -> list[Fact]:
    """Why the loader question, or the model-fed one, has no answer where its runs held a DataLoader but not the
    default one (decoding with Pillow): the decoder the run's DataLoader used instead."""
    out = []
    d = facts.get("end_to_end.dataloader")
    if facts.advice_for("image_decode.loader") is None and d is not None:
        dec = str(d.setting.get("decoder"))
        out += [] if dec == DEFAULT_DECODER else [_unmeasured("image_decode.loader", dec, "end-to-end runs")]
    runs = model_runs(res)
    dl = runs[runs["loader"] == "dataloader"] if not runs.empty else runs
    if facts.advice_for("image_decode.model_feed") is None and not dl.empty and not _default_feed(dl).any():
        plain = dl[dl["nice"] == 0] if (dl["nice"] == 0).any() else dl
        dec = plain["decoder"].dropna()   # older results did not record the decoder: nothing to say
        out += [_unmeasured("image_decode.model_feed", dec.iloc[0], "model-fed runs")] if len(dec) else []
    return out


def _question(res, how: str) -> Question:
    """The loader question, with the work its candidates did (``how``: "end_to_end", from cold files to the GPU, or
    "paper", warm files into normalised batches); its baseline is the DataLoader decoding with Pillow."""
    dest = "the GPU" if res.metadata.get("device") == "cuda" else "batches in memory"
    return Question("image_decode.loader", "Worker processes (the DataLoader) or threads for decoding photos here?",
                    "loader", DEFAULT_KIND, LOADER_DEFAULT, "PyTorch's loader with torchvision's Pillow decoding",
                    f"photo-like JPEGs decoded and resized on {int(res.metadata.get('cores') or 1)} cores, "
                    + (f"from cold files to {dest}" if how == "end_to_end" else "warm files, normalised batches"))


#: How a reader builds each thread loader.
THREAD_CALLS = {"threadpool": "concurrent.futures.ThreadPoolExecutor", "spdl": "spdl.pipeline.PipelineBuilder",
                "spdl_batch": "spdl.pipeline.PipelineBuilder", "spdl_prealloc": "spdl.pipeline.PipelineBuilder"}


def photo_decode(res) -> dict | None:
    """Chapter 8's photo-like JPEGs for chapter 12: decode + resize of one image on one core (its calibration, for
    the decoder of its best DataLoader), the cores, and the best steady loader of each kind (worker processes: the
    DataLoader; threads: SPDL or a plain pool, with any decoder)."""
    if not (has(res, "calibration") and has(res, "loaders")):
        return None
    dl = best_loader(res, ["dataloader"])
    decoder = dl["decoder"] if dl is not None else "pillow"
    ms = unit_cost_ms(res, decoder)
    if not math.isfinite(ms) or ms <= 0:
        return None
    size = res.metadata.get("image_size")
    out = dict(decoder=decoder, ms=ms, cores=int(res.metadata.get("cores") or 1),
               image_size=list(size) if size is not None else None, process=None, thread=None)
    for kind, kinds in (("process", ["dataloader"]), ("thread", list(THREADED))):
        b = best_loader(res, kinds)
        if b is not None:
            out[kind] = dict(loader=str(b["kind"]), label=b["label"], concurrency=b["c"], images_per_s=b["mean"])
    return out


# --------------------------------------------------------------------------- the notes' facts
#: Two sides within this share of each other read as "about the same" in a note with one run each side.
NOTE_TOL = 0.10


def decoder_facts(res) -> list[Fact]:
    """The DataLoader's decoder (the process pools' peaks that chose it) and each decoder's best thread loader
    against the best DataLoader (images/s over their runs)."""
    if not has(res, "loaders"):
        return []
    d = best_loader(res, ["dataloader"])
    if d is None:
        return []
    sd = dict(loader=d["kind"], concurrency=d["c"], decoder=d["decoder"])
    fd = measured("decoders.dataloader", d["runs"]["images_per_s"], unit="images/s",
                  label=f"the best DataLoader ({d['label']})", setting=sd)
    out = [fd]
    peaks = (res.metadata.get("dataloader_decoder") or {}).get("peaks") or {}
    out += [Fact(f"decoders.peak.{k}", float(v), "images/s", f"the {decoder_name(k)} process pool's peak",
                 setting=dict(decoder=k)) for k, v in peaks.items()]
    for dec in sorted(set(loader_summary(res)["decoder"])):
        t = best_loader(res, THREADED, [dec])
        if t is None:
            continue
        st = dict(loader=t["kind"], concurrency=t["c"], decoder=dec)
        ft = measured(f"decoders.threads.{dec}", t["runs"]["images_per_s"], unit="images/s",
                      label=f"the best thread loader with {decoder_name(dec)} ({loader_label(t['kind'], t['c'])})",
                      setting=st)
        out += [ft, compare(f"decoders.threads_vs_dataloader.{dec}", ft, fd)]
    return out


def cpu_split_facts(res) -> list[Fact]:
    """User against system CPU per image of the best DataLoader (and the thread pipeline's system share)."""
    if not has(res, "loaders"):
        return []
    t, d = best_threads(res), best_loader(res, ["dataloader"])
    if d is None:
        return []

    def share(runs) -> float | None:
        u, sy = float(runs["cpu_user_s"].sum()), float(runs["cpu_system_s"].sum())
        return sy / (u + sy) if u + sy > 0 else None

    def ms(runs, col) -> float:
        return float((1e3 * runs[col] / runs["images"]).mean())

    sd = dict(loader=d["kind"], concurrency=d["c"], decoder=d["decoder"])
    sh = share(d["runs"])
    out = [Fact("cpu_split.dataloader", sh, "%", f"the kernel's share of the CPU time of {d['label']}", "share", None,
                setting=sd),
           Fact("cpu_split.dataloader.user_ms", ms(d["runs"], "cpu_user_s"), "ms", "user CPU per image", "amount",
                "lower", setting=sd),
           Fact("cpu_split.dataloader.system_ms", ms(d["runs"], "cpu_system_s"), "ms", "system CPU per image",
                "amount", "lower", setting=sd),
           Fact("cpu_split.dominant", None if sh is None else "system" if sh > 0.5 else "user", "",
                "which CPU time dominated the DataLoader's", "choice", None, setting=sd)]
    if t is not None:
        out.append(Fact("cpu_split.threads", share(t["runs"]), "%",
                        f"the kernel's share of the CPU time of {t['label']}", "share", None))
    return out


def epoch_note_facts(res) -> list[Fact]:
    """The growth of all processes' PSS over the epoch, per loader, list against array."""
    e = epoch_summary(res)
    if e.empty:
        return []
    out = []
    for loader, g in e.groupby("loader", sort=False):
        lst, arr = epoch_at(g, loader, "list"), epoch_at(g, loader, "numpy")
        if lst is None or arr is None:
            continue
        fl, fa = (Fact(f"epoch_growth.{loader}.{st}", float(r["tree_growth_mb"]), "MB",
                       f"the growth of {LABELS.get(loader, loader)} with the paths in {held}", "amount", "lower",
                       setting=dict(loader=loader, storage=st))
                  for st, r, held in (("list", lst, "a list"), ("numpy", arr, "an array")))
        out += [fl, fa]
        if loader == "dataloader":
            out.append(_direction("epoch_growth.dataloader.larger", fl.value, fa.value,
                                "which storage grew the DataLoader more", words=("list", "numpy", "level")))
    return out


def startup_facts(res) -> list[Fact]:
    """The first batch with an empty Dataset and the most workers, by start method, and whether fork was faster."""
    if not has(res, "startup"):
        return []
    st = res.table("startup")
    empty = st[st["n_paths"] == st["n_paths"].min()]
    w = int(empty["workers"].max())
    at = empty[empty["workers"] == w].groupby("start_method")["first_batch_s"].mean()
    if "fork" not in at.index or len(at) < 2:
        return []
    out = [Fact(f"startup.empty.{m}", float(v), "s", f"the first batch with {m}, an empty Dataset", "time", "lower",
                setting=dict(start_method=str(m), workers=w, paths=int(st["n_paths"].min()))) for m, v in at.items()]
    others = max(float(v) for m, v in at.items() if m != "fork")
    out.append(_direction("startup.empty.slower", others, float(at["fork"]),
                        "which start method was slower with an empty Dataset", words=("fresh", "fork", "level")))
    return out


def collate_facts(res) -> list[Fact]:
    """The Pillow pipeline decoding into each batch's rows against the same pipeline with a collate stage."""
    lo = loaders(res) if has(res, "loaders") else pd.DataFrame()
    if lo.empty:
        return []
    pre = lo[(lo["loader"] == "spdl_prealloc") & (lo["decoder"] == "pillow")]
    if pre.empty:
        return []
    c = int(pre["concurrency"].max())
    base = lo[(lo["loader"] == "spdl") & (lo["decoder"] == "pillow") & (lo["concurrency"] == c)]
    if base.empty:
        return []
    fp = measured("collate.prealloc", pre[pre["concurrency"] == c]["images_per_s"], unit="images/s",
                  label="the pipeline without the collate copy", setting=dict(concurrency=c))
    fb = measured("collate.base", base["images_per_s"], unit="images/s",
                  label="the pipeline with its collate stage", setting=dict(concurrency=c))
    return [fp, fb, compare("collate", fp, fb)]


def gpu_share_facts(res) -> list[Fact]:
    """GPU decoding alone, the share of the ceiling it allows if decoding and training take turns, and the share
    the model reached fed this way."""
    if not has(res, "loaders"):
        return []
    s, m = loader_summary(res), model_summary(res)
    ceil = res.metadata.get("ceiling")
    nv = s[s["loader"] == "nvjpeg"]
    mv = m[m["loader"] == "nvjpeg"] if not m.empty else m
    if nv.empty or mv.empty or not ceil:
        return []
    bs = int(Params.value_of(res, "batch_size"))
    rate = float(nv["mean"].iloc[0])
    dec_ms, step_ms = bs / rate * 1e3, bs / float(ceil["images_per_s"]) * 1e3
    pred, got = step_ms / (step_ms + dec_ms), float(mv["pct_of_ceiling"].iloc[0]) / 100
    b = dict(batch=bs)
    return [Fact("gpu_share.decode", rate, "images/s", "GPU decoding alone", setting=b),
            Fact("gpu_share.decode_ms", dec_ms, "ms", "GPU decode time per batch", "time", "lower", setting=b),
            Fact("gpu_share.step_ms", step_ms, "ms", "the training step", "time", "lower", setting=b),
            Fact("gpu_share.predicted", pred, "%", "the share of the ceiling if decoding and training take turns",
                 "share", None, setting=b),
            Fact("gpu_share.reached", got, "%", "the share of the ceiling fed by GPU decoding", "share", None,
                 setting=b),
            _direction("gpu_share.verdict", got, pred, "GPU-fed share against the turn-taking prediction",
                       ("above", "below", "level"), tol=0.05)]


# --------------------------------------------------------------------------- the notes' data (the page words it)
def _finite(v) -> float | None:
    """``v`` as a float, None when it is missing or not finite (facts are stored as JSON)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


#: Two model-fed shares of the ceiling within this share of each other read as level (one run a side, or overlapping).
FEED_TOL = 0.02


def _model_pcts(m: pd.DataFrame, loader: str, nice: int) -> list[float]:
    """% of the ceiling of each run of the best-labelled feed of ``loader`` at workers' ``nice``."""
    if m.empty:
        return []
    g = m[(m["loader"] == loader) & (m["nice"].astype(int) == int(nice))]
    if g.empty:
        return []
    top = g.groupby("label")["pct_of_ceiling"].mean().idxmax()
    return [float(v) for v in g[g["label"] == top]["pct_of_ceiling"]]


def _direction(key: str, a, b, label: str, words: tuple[str, str, str] = ("a", "b", "level"), tol: float = NOTE_TOL,
               setting: dict | None = None) -> Fact:
    """Which of two values or sets of runs is larger (:func:`~datajourney.core.stats.direction`, within ``tol``), as a
    choice: ``words`` = (a larger, b larger, level); level where a value is not finite."""
    finite = all(math.isfinite(float(x)) for x in [*np.atleast_1d(a), *np.atleast_1d(b)])
    d = stats.direction(a, b, tol=tol) if finite else 0
    return Fact(key, words[0] if d > 0 else words[1] if d < 0 else words[2], "", label, "choice", None,
                setting=dict(setting or {}))


def feed_facts(res) -> list[Fact]:
    """The model-fed runs with the workers at a lower priority and the hybrid feed: each one's share of the ceiling
    (its best-labelled feed's runs) and which way it went against the plain DataLoader at nice 0."""
    m = model_runs(res)
    if m.empty:
        return []
    nice = int(res.metadata.get("model_worker_nice") or 0)
    plain = _model_pcts(m, "dataloader", 0)
    niced = _model_pcts(m, "dataloader", nice) if nice else []
    out = [measured("feeds.dataloader", plain, unit="%", quantity="share", label="the DataLoader at nice 0",
                    setting=dict(nice=0))] if plain else []
    if plain and niced:
        out += [measured("feeds.dataloader.niced", niced, unit="%", quantity="share",
                         label=f"the DataLoader at nice {nice}", setting=dict(nice=nice)),
                _direction("feeds.nice", niced, plain, "the niced DataLoader against nice 0",
                           ("helped", "cost", "level"), FEED_TOL)]
    hy = {n: v for n in sorted({0, nice}) if (v := _model_pcts(m, "hybrid", n))}
    if hy:
        best_nice = max(hy, key=lambda n: float(np.mean(hy[n])))
        out.append(measured("feeds.hybrid", hy[best_nice], unit="%", quantity="share",
                            label=f"the hybrid at nice {best_nice}", setting=dict(nice=best_nice)))
        if plain:
            out.append(_direction("feeds.hybrid.vs_dataloader", hy[best_nice], plain,
                                  "the hybrid against the plain DataLoader", ("ahead", "behind", "level"), FEED_TOL))
        if len(hy) == 2:
            out.append(_direction("feeds.hybrid.niced", hy[nice], hy[0], f"the hybrid at nice {nice} against nice 0",
                                  ("faster", "slower", "level"), FEED_TOL, setting=dict(nice=nice)))
    return out


def hybrid_data(res) -> dict:
    """How the hybrid's CPU share was set, or why it did not run (the metadata the experiment recorded)."""
    h = res.metadata.get("hybrid") or {}
    how = h.get("how") or ("parameter" if h.get("rule") == "set by the parameter hybrid_share" else "auto")
    out = dict(share=_finite(h.get("share")), how=how, workers=h.get("workers"),
               headroom=_finite(h.get("headroom", HYBRID_HEADROOM)), step=_finite(h.get("step", HYBRID_STEP)),
               cpu_rate=_finite(h.get("cpu_rate")), ceiling=_finite(h.get("ceiling")))
    out.update({k: str(h[k]) for k in ("skipped", "note", "why") if h.get(k)})
    return out


def cold_data(res) -> dict | None:
    """How the loaders' files were evicted before each run, and whether any of them was still resident."""
    lo = _table(res, "loaders")
    if lo.empty or "resident_at_start" not in lo:
        return None
    r = float(lo["resident_at_start"].astype(float).max())
    return dict(methods=[str(m) for m in res.metadata.get("purge_methods") or []], resident=r,
                left="none" if r <= 0 else "some")


def ipc_data(res) -> list[dict]:
    """Every batch of the IPC runs through worker processes against the same batch in the main process: the extra
    time per batch and its share of the CPU time of decoding that batch (the calibration's first decoder)."""
    ipc, cal = _table(res, "ipc"), _table(res, "calibration")
    if ipc.empty or cal.empty:
        return []
    dec = float((cal["decode_ms"] + cal["resize_ms"]).iloc[0])
    out = []
    for bs, g in ipc.groupby("batch_size"):
        g = g.groupby("workers")[["ms_per_batch", "batch_bytes"]].mean()
        if 0 not in g.index:
            continue
        base = float(g.loc[0, "ms_per_batch"])
        for w in [w for w in g.index if w > 0]:
            v = float(g.loc[w, "ms_per_batch"])
            extra = v - base
            out.append(dict(batch_size=int(bs), workers=int(w), mb=float(g.loc[w, "batch_bytes"]) / 1e6, ms=v,
                            base_ms=base, extra_ms=extra, share=_finite(extra / (int(bs) * dec)) if dec > 0 else None,
                            verdict="extra" if extra > 0 else "none"))
    return out


# --------------------------------------------------------------------------- SPDL per-stage statistics
#: The pipeline's stages, source to sink (names as ``spdl.pipeline`` reports them).
STAGE_ORDER = ("src", "decode", "aggregate", "collate", "transfer", "sink")
#: A stage whose tasks kept its threads busy at least this share of the timed window sets the
#: pipeline's pace: below it, the stage waits for input or for room downstream.
BUSY_LIMIT = 0.80
#: The decode time per image in a pipeline thread, over the same work on one core alone, above
#: which the threads spend the difference waiting (for the interpreter lock, as in section 2).
CONTENTION_LIMIT = 1.5
#: A stage's occupancy above this is impossible (more than full): flagged, never shown as a share.
OVER_FULL_AT = 1 + MIN_EFFECT
#: The pipelines whose stages the page shows: (loader, decoder, what it is).
PIPELINES = (("spdl", "pillow", "Pillow, with a collate stage"),
             ("spdl_prealloc", "pillow", "Pillow, each image decoded into its batch's row"),
             ("spdl", "spdl", "spdl.io, batch converted by spdl.io"))


def spdl_stages_frame(res, loader: str = "spdl", decoder: str = "pillow") -> pd.DataFrame:
    """The per-stage statistics of one SPDL pipeline (``loader``, ``decoder``; means of the runs), or
    an empty frame when the result has none (runs made before they were recorded: Pillow's pipeline)."""
    t = _table(res, "spdl_stages")
    if t.empty:
        return pd.DataFrame()
    t = t[(t["loader"] == loader) & ((t["decoder"] if "decoder" in t else "pillow") == decoder)]
    if t.empty:
        return pd.DataFrame()
    cols = [c for c in ("stage_concurrency", "tasks", "task_ms", "busy", "out_occupancy", "out_put_wait_ms",
                        "out_get_wait_ms", "window_s", "read_ms", "decode_ms", "resize_ms") if c in t]
    g = t.groupby(["concurrency", "stage"], sort=False)[cols].mean().reset_index()
    g["order"] = [STAGE_ORDER.index(s) if s in STAGE_ORDER else len(STAGE_ORDER) for s in g["stage"]]
    g = g.sort_values(["concurrency", "order"]).drop(columns="order").reset_index(drop=True)
    # tasks that finished inside the window but began before it can push the sum past the window: the measured
    # value is kept (the tables flag it), the limit's rule reads it as full
    g["busy_measured"] = g["busy"]
    g["busy"] = g["busy"].clip(upper=1.0)
    return g


def spdl_limit(res, loader: str = "spdl", decoder: str = "pillow") -> dict | None:
    """Which stage limits an SPDL pipeline at its highest thread count, why (``cause``: "stage" after decoding,
    "handoff", "read", "gil", "threads" or "none"), and the numbers that decide it (missing ones None); None when
    the result has no per-stage statistics."""
    g = spdl_stages_frame(res, loader, decoder)
    if g.empty:
        return None
    c_hi, c_lo = int(g["concurrency"].max()), int(g["concurrency"].min())
    at = g[g["concurrency"] == c_hi].set_index("stage")
    busy = at["busy"].dropna()
    if busy.empty:
        return None
    stage = str(busy.idxmax())
    dec = g[g["stage"] == "decode"].set_index("concurrency")["task_ms"]
    lo = loaders(res)
    rate = float(lo[(lo["loader"] == loader) & (lo["decoder"] == decoder) & (lo["concurrency"] == c_hi)][
        "images_per_s"].mean())
    unit = unit_cost_ms(res, decoder)
    # in a decode thread, per image: the read of the (cold) file and the CPU work (decode + resize)
    read_ms = float(at["read_ms"].get("decode", float("nan"))) if "read_ms" in at else float("nan")
    work_ms = (float(at["decode_ms"].get("decode", float("nan")) + at["resize_ms"].get("decode", float("nan")))
               if "decode_ms" in at else float(dec.get(c_hi, float("nan"))))
    if busy.max() < BUSY_LIMIT:
        cause = "none"
    elif stage != "decode":
        cause = "stage"
    elif math.isfinite(read_ms) and (float(dec.get(c_hi, float("nan"))) - read_ms - work_ms) >= max(read_ms, work_ms):
        cause = "handoff"
    elif math.isfinite(read_ms) and read_ms >= work_ms:
        cause = "read"
    else:
        cause = "gil" if math.isfinite(unit) and work_ms / unit >= CONTENTION_LIMIT else "threads"
    sink = float(at["out_occupancy"].get("sink", float("nan")))
    # no stage saturated: batches waiting in the sink's queue most of the time mean the consumer set the pace
    waits = (None if not math.isfinite(sink) else
             {1: "consumer", -1: "stages", 0: "level"}[stats.direction(sink, 0.5, tol=0.0)])
    out = dict(c=c_hi, c_lo=c_lo, stage=stage, busy=float(busy.max()), cause=cause, rate=rate, unit=unit,
               read_ms=read_ms, work_ms=work_ms, decode_busy=float(at["busy"].get("decode", float("nan"))),
               decode_busy_measured=float(at["busy_measured"].get("decode", float("nan"))),
               decode_ms=float(dec.get(c_hi, float("nan"))), decode_ms_lo=float(dec.get(c_lo, float("nan"))),
               task_ms=float(at["task_ms"].get(stage, float("nan"))),
               stage_threads=int(at["stage_concurrency"].get(stage, 1)), sink_occupancy=sink)
    out = {k: v if isinstance(v, str | int) else _finite(v) for k, v in out.items()}
    out.update(waits=waits, over_full=(out["decode_busy_measured"] or 0.0) > OVER_FULL_AT,
               handoff_ms=(max(out["decode_ms"] - out["read_ms"] - out["work_ms"], 0.0)
                           if None not in (out["decode_ms"], out["read_ms"], out["work_ms"]) else None),
               growth=(out["decode_ms"] / out["decode_ms_lo"] if out["decode_ms"] and out["decode_ms_lo"]
                       and c_lo != c_hi else None),
               slowdown=out["work_ms"] / out["unit"] if out["work_ms"] and out["unit"] else None,
               cap=out["rate"] / out["busy"] if out["rate"] is not None and out["busy"] else None)
    return out


def top_stages(res) -> list[tuple[str, pd.DataFrame]]:
    """Each pipeline of :data:`PIPELINES` with per-stage statistics, as (what it is, its stages at its highest thread
    count)."""
    out = []
    for loader, dec, what in PIPELINES:
        g = spdl_stages_frame(res, loader, dec)
        if not g.empty:
            out.append((what, g[g["concurrency"] == g["concurrency"].max()]))
    return out


def stage_busy_rows(res) -> pd.DataFrame:
    """The stages of :func:`top_stages` as rows to judge (name, measured occupancy, window and task time)."""
    frames = [pd.DataFrame({"name": [f"{what}, {st}" for st in g["stage"]], "busy": g["busy_measured"],
                            "window_s": g["window_s"], "task_ms": g["task_ms"]})
              for what, g in top_stages(res) if "window_s" in g]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["name", "busy", "window_s",
                                                                                      "task_ms"])
    return rows.dropna(subset=["busy"])


def sweep_busy_rows(res) -> pd.DataFrame:
    """The decode stage of each configuration of the thread sweep (warm files): its measured occupancy, window and
    task time (means of the runs), named by the configuration."""
    st = _table(res, "paper_stages")
    if st.empty:
        return pd.DataFrame(columns=["name", "busy", "window_s", "task_ms"])
    d = st[(st["stage"] == "decode") & (st["state"] == "warm")]
    g = d.groupby("config", sort=False)[["busy", "window_s", "task_ms"]].mean().reset_index()
    return g.rename(columns={"config": "name"})


def busy_flags(rows: pd.DataFrame) -> list[dict]:
    """Each occupancy above full in ``rows`` (columns: name, busy, window_s, task_ms), with its measured cause: how
    much more than full it was per slot (ms) and whether that fits in one task (``edge``: a task begun before the
    window counts whole in it) or not (the stage's counters overlap beyond the window's edge)."""
    out = []
    for r in rows[rows["busy"].astype(float) > OVER_FULL_AT].itertuples():
        over_ms = (float(r.busy) - 1) * float(r.window_s) * 1e3
        out.append(dict(name=str(r.name), busy=float(r.busy), window_s=float(r.window_s), task_ms=float(r.task_ms),
                        over_ms=over_ms, edge=bool(over_ms <= float(r.task_ms) * OVER_FULL_AT)))
    return out


def unsteady_data(res) -> dict:
    """The timed windows that did not make the images they counted (left out of the chart, the best configurations
    and the findings): each loader and model-fed row with its CPU time per image, against one image's decode +
    resize on one core (``unit_ms``) and the share of it a window must reach (``floor``); ``old``: timed with the
    old fixed windows."""
    s = loader_summary(res) if has(res, "loaders") and has(res, "calibration") else pd.DataFrame()
    m = model_summary(res) if has(res, "calibration") else pd.DataFrame()
    lo = [] if s.empty else [dict(label=loader_label(r.loader, r.concurrency), cpu_ms=_finite(r.cpu_ms_per_image),
                                  share=_finite(r.cpu_share), rate=_finite(r.mean))
                             for r in s[~s["steady"]].itertuples()]
    mo = [] if m.empty else [dict(label=str(r.label), cpu_ms=_finite(r.cpu_ms_per_image),
                                  pct=_finite(r.pct_of_ceiling), above=bool(r.pct_of_ceiling > 100 * CEILING_SLACK))
                             for r in m[~m["steady"]].itertuples()]
    return dict(old=old_windows(res), floor=floor_share(res), loaders=lo, model=mo,
                unit_ms=_finite(unit_cost_ms(res)) if has(res, "calibration") else None)


def spread_data(res) -> list[dict]:
    """The steady loader configurations whose runs spread by more than :data:`~datajourney.core.stats.HIGH_SPREAD`
    (coefficient of variation): read as a range, not a point."""
    if not has(res, "loaders"):
        return []
    s = loader_summary(res)
    steady = {(k, c, d) for k, c, d, ok in zip(s["loader"], s["concurrency"], s["decoder"], s["steady"], strict=True)
              if ok}
    out = []
    for (k, c, d), g in loaders(res).groupby(["loader", "concurrency", "decoder"]):
        v = [float(x) for x in g["images_per_s"]]
        if (k, c, d) in steady and stats.cv(v) > stats.HIGH_SPREAD:
            out.append(dict(label=loader_label(k, c, decoder=d), low=min(v), high=max(v), n=len(v), cv=stats.cv(v)))
    return out


#: The operations of a primitive task (read, decode and resize, stack) as ``gil_held`` names them, per decoder.
TASK_OPS = {"pillow": ("read", "decode_pillow", "collate"), "spdl": ("read", "decode_spdl", "collate")}


def on_paper_data(res, decoder: str = "pillow") -> dict | None:
    """What the exercise on paper needs (Amdahl's law with the interpreter lock as the serial part): each operation
    of a primitive task with ``decoder``, its time per image alone on one thread and the part of it that held the
    GIL (``gil_held``), the thread count of section 2's contention (the most threads within the cores) and the
    thread pool's images/s at that count (section 1); None where the result lacks any of them."""
    g, p = _table(res, "gil_held"), _table(res, "primitives")
    if g.empty or p.empty or "ops" not in res.tables:
        return None
    g = g.set_index("op")
    ops = TASK_OPS.get(decoder, ())
    if not ops or not all(o in g.index for o in ops):
        return None
    n = contention_level(res)
    t = p[(p["decoder"] == decoder) & (p["executor"] == "thread") & (p["concurrency"] == n)]
    one = p[(p["decoder"] == decoder) & (p["executor"] == "thread") & (p["concurrency"] == 1)]
    if t.empty or n < 2:
        return None
    return dict(decoder=decoder, threads=int(n), measured=float(t["images_per_s"].mean()), runs=len(t),
                one_thread=float(one["images_per_s"].mean()) if len(one) else None,
                ops=[dict(op=o, ms=float(g.loc[o, "ms_per_image"]), held_ms=float(g.loc[o, "held_ms_per_image"]))
                     for o in ops])


def spdl_data(res) -> dict:
    """What limits each SPDL pipeline with per-stage statistics (by "loader/decoder"), and whether the result ran
    the SPDL pipeline at all (its statistics may predate the run)."""
    lo = _table(res, "loaders")
    limits = {f"{k}/{d}": lim for k, d, _ in PIPELINES if (lim := spdl_limit(res, k, d)) is not None}
    return dict(ran=bool(not lo.empty and (lo["loader"] == "spdl").any()), limits=limits)


def spdl_scaling_data(res) -> list[dict]:
    """How the SPDL pipeline scaled with threads for each decoder (its steady configurations' rates and busy cores,
    lowest to highest), beside the best plain thread pool with the same decoder and which of the two delivered
    more (``vs``: "more", "less" or "level", the pool against the pipeline's best)."""
    if not has(res, "loaders"):
        return []
    s = loader_summary(res)
    out = []
    for dec in sorted(set(s["decoder"])):
        sp = s[(s["loader"] == "spdl") & (s["decoder"] == dec) & s["steady"]]
        if len(sp) < 2:
            continue
        row = dict(decoder=str(dec), rate=[float(sp["mean"].min()), float(sp["mean"].max())],
                   threads=[int(sp["concurrency"].min()), int(sp["concurrency"].max())],
                   cores=[float(sp["cpu_cores"].min()), float(sp["cpu_cores"].max())], pool=None)
        tp = best_loader(res, ["threadpool"], [dec])
        if tp is not None:
            d = stats.direction(tp["mean"], float(sp["mean"].max()))
            row["pool"] = dict(label=tp["label"], rate=tp["mean"], vs="more" if d > 0 else "less" if d < 0 else "level")
        out.append(row)
    return out


def paper_data(res) -> dict:
    """Whether the SPDL question ran here, and what the run changed to fit (levels lowered, transforms in NumPy)."""
    md = res.metadata
    meta = md.get("paper") if isinstance(md.get("paper"), dict) else {}
    return dict(ran="paper" in res.tables and not md.get("paper_skipped"),
                skipped=str(md["paper_skipped"]) if md.get("paper_skipped") else None,
                clamped=[dict(what=str(c.get("what")), wanted=int(c.get("wanted", 0)), got=int(c.get("got", 0)))
                         for c in meta.get("clamped") or []],
                transforms=str(meta["transforms"]) if meta.get("transforms") else None)


def analyse(res) -> Facts:
    facts = Facts(CHAPTER, exports=EXPORTS)
    for part in (primitive_facts, contention_facts, end_to_end_facts, first_batch_facts, ipc_facts, epoch_facts,
                 moonshot_facts, paper_facts, decoder_facts, cpu_split_facts, epoch_note_facts, startup_facts,
                 collate_facts, gpu_share_facts, feed_facts):
        facts.add(*part(res))
    facts.advise(loader_advice(facts, res), *pool_advice(facts, res), model_feed_advice(facts, res))
    facts.add(*default_unmeasured(facts, res))
    facts.data.update(hybrid=hybrid_data(res), cold=cold_data(res), ipc=ipc_data(res), spdl=spdl_data(res),
                      paper=paper_data(res), spdl_scaling=spdl_scaling_data(res), unsteady=unsteady_data(res),
                      spread=spread_data(res), on_paper=on_paper_data(res),
                      busy_flags=dict(sweep=busy_flags(sweep_busy_rows(res)), stages=busy_flags(stage_busy_rows(res))))
    pd_ = photo_decode(res)
    if pd_ is not None:
        facts.data["photo_decode"] = pd_
    md = res.metadata
    cal = _table(res, "calibration")
    if not cal.empty and md.get("image_bytes") and md.get("image_size"):
        # the images and what one costs on one core: the page's calibration sentence
        facts.data["calibration"] = dict(
            size=[int(v) for v in md["image_size"]],
            bytes={k: float(md["image_bytes"][k]) for k in ("mean", "min", "max")},
            decoders=[dict(decoder=str(r.decoder), decode_ms=float(r.decode_ms), resize_ms=float(r.resize_ms))
                      for r in cal.itertuples()])
    lo = loaders(res) if has(res, "loaders") else pd.DataFrame()
    t = lo.groupby(["loader", "concurrency"])["batches"].first() if "batches" in lo else pd.Series(dtype=float)
    # what the page says about the run itself: its decoders, failures, windows, interpreter and missing libraries
    facts.data.update(
        decoders={str(k): dict(run=k in (md.get("decoders_run") or []), note=str((v or {}).get("note", "")))
                  for k, v in (md.get("decoders") or {}).items()},
        errors=[dict(what=str(e.get("what", "")), error=str(e.get("error", ""))) for e in md.get("errors") or []],
        windows=dict(old=old_windows(res), factor=(md.get("window_rule") or {}).get("factor"),
                     batches=[int(t.min()), int(t.max())] if len(t) else None,
                     loader_batches=int(res.parameters["loader_batches"]) if "loader_batches" in res.parameters
                     else None),
        end_to_end_threads=md.get("end_to_end_threads"), dali_installed=bool((md.get("dali") or {}).get("installed")),
        free_threading=md.get("free_threading"), free_threaded_check=md.get("free_threaded_check"),
        dataloader_decoder=dict(how=(md.get("dataloader_decoder") or {}).get("how")),
        loader_decoders=sorted(str(d) for d in set(lo["decoder"])) if not lo.empty else [],
        device=md.get("device"), cores=int(md.get("cores") or 1),
        n_images=int(((md.get("datasets") or {}).get("photos") or {}).get("params", {}).get("n_images") or 0),
        moonshot_skipped=None if md.get("ceiling") else md.get("moonshot_note"),
        paper_skipped=md.get("paper_skipped") if "paper" not in res.tables or md.get("paper_skipped") else None)
    return facts
