"""Chapter 8's page: findings, notes and tables computed from a run's result."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from datajourney.chapters.c08_threads_processes_gil import experiment as gil
from datajourney.core import stats
from datajourney.core.findings import (
    Finding,
    choose,
    compare,
    direction,
    num,
    pct,
    ratio_interval,
    span,
    spread_note,
    times,
)

THREADED = ("spdl", "threadpool")
#: Results measured before timed windows were sized by waves (no ``window_rule`` in their
#: metadata) timed a fixed number of batches, a fraction of a wave more or less than whole waves
#: of a DataLoader's batches. For them only, a window counts as steady when its CPU time per image
#: (all processes) reaches this share of one image's decode + resize on one core (the
#: calibration); below it, part of its images were decoded before it opened.
STEADY_SHARE = 0.85
#: A model-fed run cannot exceed its ceiling by more than this (timing noise).
CEILING_SLACK = 1.05
PUB_GAIN = "throughput gain, thread pipeline over DataLoader"
PUB_CPU = "CPU reduction, thread pipeline vs DataLoader"
PUB_MEM = "memory reduction, thread pipeline vs DataLoader"
PUB_SPDL = "peak throughput, SPDL, Python 3.12"
PUB_DL = "peak throughput, DataLoader, Python 3.12"
PUB_TTFB4 = "DataLoader time to first batch, 4 workers"
PUB_TTFB32 = "DataLoader time to first batch, 32 workers"


def _label(kind: str, c: int, nice=0, share=None) -> str:
    unit = "workers" if kind in ("dataloader", "hybrid") else ("read threads" if kind == "nvjpeg" else "threads")
    out = f"{gil.LABELS.get(kind, kind)}, {int(c)} {unit}"
    if nice is not None and not pd.isna(nice) and int(nice):
        out += f" at nice {int(nice)}"
    if share is not None and not pd.isna(share):
        out += f" ({pct(float(share))} decoded on the CPU)"
    return out


# --------------------------------------------------------------------------- experiment 1 and 2
def primitive_summary(res) -> pd.DataFrame:
    s = stats.summarise(res.table("primitives"), ["decoder", "executor", "concurrency"], "images_per_s")
    st = stats.summarise(res.table("primitives"), ["decoder", "executor", "concurrency"], "startup_s")
    return s.merge(st[["decoder", "executor", "concurrency", "mean"]].rename(columns={"mean": "startup_s"}))


def _peak(res, decoder: str, executor: str):
    s = primitive_summary(res)
    g = s[(s["decoder"] == decoder) & (s["executor"] == executor)]
    if g.empty:
        return None
    top = g.loc[g["mean"].idxmax()]
    p = res.table("primitives")
    runs = p[(p["decoder"] == decoder) & (p["executor"] == executor) & (p["concurrency"] == top["concurrency"])]
    # where scaling stopped: the smallest concurrency within 5% of the peak
    knee = int(g[g["mean"] >= 0.95 * top["mean"]]["concurrency"].min())
    return dict(c=int(top["concurrency"]), mean=float(top["mean"]), runs=runs["images_per_s"].tolist(), knee=knee)


def finding_primitives(res, decoder: str = "pillow") -> Finding:
    t, p = _peak(res, decoder, "thread"), _peak(res, decoder, "process")
    name = {"pillow": "Pillow", "spdl": "spdl.io", "torchvision": "torchvision"}.get(decoder, decoder)
    if t is None or p is None:
        return Finding("primitives", f"The primitive scaling of {name} needs both executors; this run has "
                       f"{'threads' if t else 'processes' if p else 'neither'}.")
    mid, lo, hi = ratio_interval(t["runs"], p["runs"])
    text = (f"Decoding, resizing and batching with {name}, a thread pool peaked at {num(t['mean'], 'img/s')} "
            f"({t['c']} threads) and a process pool at {num(p['mean'], 'img/s')} ({p['c']} processes): at their "
            f"peaks threads were {compare(t['runs'], p['runs'])} processes. Threads reached 95% of their peak at "
            f"{t['knee']} threads, processes at {p['knee']} "
            f"(this host has {res.metadata['cores']} cores).")
    return Finding("primitives", text, mid, "×", interval=(lo, hi))


def _op_means(res) -> pd.DataFrame:
    return res.table("ops").groupby(["decoder", "executor", "concurrency", "op"], as_index=False)["ms_per_image"].mean()


def contention_level(res) -> int:
    """The largest concurrency of the sweep that does not exceed the cores (no oversubscription)."""
    cs = sorted(res.table("ops")["concurrency"].unique())
    within = [c for c in cs if c <= res.metadata["cores"]]
    return int(within[-1] if within else cs[0])


def finding_contention(res, decoder: str = "pillow", op: str = "decode") -> Finding:
    m = _op_means(res)
    m = m[(m["decoder"] == decoder) & (m["op"] == op)]
    n = contention_level(res)
    c1 = int(m["concurrency"].min())

    def at(ex, c):
        v = m[(m["executor"] == ex) & (m["concurrency"] == c)]["ms_per_image"]
        return float(v.iloc[0]) if len(v) else float("nan")

    t1, tn, pn = at("thread", c1), at("thread", n), at("process", n)
    if not all(math.isfinite(v) for v in (t1, tn)):
        return Finding("contention", f"The per-operation times of {decoder} need a thread sweep; this run has none.")
    grow = tn / t1
    text = (f"Per image, {decoder}'s {op} took {num(t1, 'ms')} with {c1} thread and {num(tn, 'ms')} each with {n} "
            f"threads ({times(grow)})")
    if math.isfinite(pn):
        d = direction(tn, pn, tol=0.10)
        text += (f"; in {n} processes it took {num(pn, 'ms')}: "
                 + choose(d, f"the threads' extra {num(tn - pn, 'ms')} per image is time an operation spends "
                             "holding or waiting for the interpreter lock, or sharing caches and memory bandwidth "
                             "more closely than processes do",
                          "threads were quicker per operation than processes here",
                          "threads and processes took about as long per operation, so at this concurrency the "
                          "interpreter lock did not slow this operation down"))
    return Finding("contention", text + ".", grow, "×", values=dict(thread_1=t1, thread_n=tn, process_n=pn, n=n))


# --------------------------------------------------------------------------- experiment 3
def unit_cost_ms(res, decoder: str = "pillow") -> float:
    """Decode + resize of one image on one core (ms), from the run's calibration."""
    cal = res.table("calibration").set_index("decoder")
    if decoder not in cal.index:
        return float("nan")
    return float(cal.loc[decoder, "decode_ms"] + cal.loc[decoder, "resize_ms"])


def old_windows(res) -> bool:
    """True for a result timed with the old fixed windows (before windows were sized by waves)."""
    return "window_rule" not in res.metadata


def _steady(res, kind: str, cpu_ms: float, unit: float) -> bool:
    if not old_windows(res):  # whole waves, many of them: every window measures production
        return True
    if kind == "nvjpeg" or not math.isfinite(unit):  # the GPU decodes: CPU time says nothing here
        return True
    return cpu_ms >= STEADY_SHARE * unit


def loader_summary(res) -> pd.DataFrame:
    lo = res.table("loaders")
    out = stats.summarise(lo, ["loader", "concurrency"], "images_per_s")
    added = lo["added_pss_bytes"] if "added_pss_bytes" in lo else pd.Series(np.nan, index=lo.index)
    extra = lo.assign(cpu_ms_per_image=1e3 * (lo["cpu_user_s"] + lo["cpu_system_s"]) / lo["images"],
                      user_ms_per_image=1e3 * lo["cpu_user_s"] / lo["images"],
                      system_ms_per_image=1e3 * lo["cpu_system_s"] / lo["images"],
                      pss_mb=lo["pss_bytes"] / 1e6, uss_mb=lo["uss_bytes"] / 1e6, added_pss_mb=added / 1e6)
    cols = ["first_batch_s", "cpu_ms_per_image", "user_ms_per_image", "system_ms_per_image", "cpu_cores",
            "pss_mb", "uss_mb", "added_pss_mb", "processes"]
    agg = extra.groupby(["loader", "concurrency"], sort=False)[cols].mean().reset_index()
    out = out.merge(agg, on=["loader", "concurrency"])
    unit = unit_cost_ms(res, str(lo["decoder"].iloc[0]) if "decoder" in lo and len(lo) else "pillow")
    out["cpu_share"] = [np.nan if k == "nvjpeg" else v / unit for k, v in zip(out["loader"], out["cpu_ms_per_image"],
                                                                            strict=True)]
    out["steady"] = [_steady(res, k, v, unit) for k, v in zip(out["loader"], out["cpu_ms_per_image"], strict=True)]
    return out


def best_loader(res, kinds) -> dict | None:
    s = loader_summary(res)
    s = s[s["loader"].isin(kinds) & s["steady"]]
    if s.empty:
        return None
    top = s.loc[s["mean"].idxmax()]
    lo = res.table("loaders")
    runs = lo[(lo["loader"] == top["loader"]) & (lo["concurrency"] == top["concurrency"])]
    return dict(kind=top["loader"], c=int(top["concurrency"]), mean=float(top["mean"]), runs=runs,
                label=_label(top["loader"], top["concurrency"]))


def _cpu_per_image(runs) -> list[float]:
    return (1e3 * (runs["cpu_user_s"] + runs["cpu_system_s"]) / runs["images"]).tolist()


def finding_end_to_end(res) -> Finding:
    t, d = best_loader(res, THREADED), best_loader(res, ["dataloader"])
    if t is None or d is None:
        return Finding("end_to_end", "The end-to-end comparison needs a DataLoader and a thread pipeline in "
                       "`loaders`; this run lacks one of them.")
    tr, dr = t["runs"]["images_per_s"].tolist(), d["runs"]["images_per_s"].tolist()
    mid, lo, hi = ratio_interval(tr, dr)
    target = res.metadata.get("thread_target", gil.THREAD_TARGET)
    text = (f"From cold files to pinned memory and a copy to the {'GPU' if res.metadata['device'] == 'cuda' else 'device'}, "
            f"the best thread pipeline ({t['label']}) delivered {num(t['mean'], 'img/s')} and the best DataLoader "
            f"({d['label']}) {num(d['mean'], 'img/s')}: the threads were {compare(tr, dr)} the DataLoader "
            f"(threads ÷ DataLoader {span(lo, hi, '×')} over the runs), "
            + choose(1 if mid >= target else -1, f"which meets the {times(target)} target",
                     f"short of the {times(target)} target", "") + ".")
    return Finding("end_to_end", text, 100 * (mid - 1), "%", published=PUB_GAIN,
                   interval=(100 * (lo - 1), 100 * (hi - 1)))


def finding_cost(res) -> Finding:
    t, d = best_loader(res, THREADED), best_loader(res, ["dataloader"])
    if t is None or d is None:
        return Finding("cost", "The CPU and memory comparison needs a DataLoader and a thread pipeline.")
    tc, dc = _cpu_per_image(t["runs"]), _cpu_per_image(d["runs"])
    red = 100 * (1 - np.mean(tc) / np.mean(dc))
    has_added = "added_pss_bytes" in t["runs"] and "added_pss_bytes" in d["runs"]
    tm = t["runs"]["added_pss_bytes"].mean() / 1e9 if has_added else float("nan")
    dm = d["runs"]["added_pss_bytes"].mean() / 1e9 if has_added else float("nan")
    tt, dt = t["runs"]["pss_bytes"].mean() / 1e9, d["runs"]["pss_bytes"].mean() / 1e9

    def per_image(runs, col):
        return float((1e3 * runs[col] / runs["images"]).mean())

    t_user, t_sys = per_image(t["runs"], "cpu_user_s"), per_image(t["runs"], "cpu_system_s")
    d_user, d_sys = per_image(d["runs"], "cpu_user_s"), per_image(d["runs"], "cpu_system_s")
    dcpu = direction(tc, dc, tol=0.05)
    text = (f"Per image, the thread pipeline used {num(np.mean(tc), 'ms')} of CPU time (user {num(t_user, 'ms')}, system "
            f"{num(t_sys, 'ms')}) and the DataLoader {num(np.mean(dc), 'ms')} (user {num(d_user, 'ms')}, system "
            f"{num(d_sys, 'ms')}), summed over all their processes: "
            + choose(dcpu, f"{pct(-red / 100)} more", f"{pct(red / 100)} less", "about the same") + " CPU. ")
    if has_added:
        text += ("The memory each loader added to the process tree while it ran (PSS summed over all its processes, "
                 f"less the same tree's PSS just before it started) was {num(tm * 1e3, 'MB')} for the threads "
                 f"against {num(dm * 1e3, 'MB')} for the DataLoader: "
                 + choose(direction(tm, dm, tol=0.05), "the threads took more", "the threads took less",
                          "about the same") + ".")
    else:
        text += ("The memory each loader added over the process tree before it started is not in the reference "
                 "run (its baseline was taken from the main process before an earlier run's memory was freed, "
                 "which made some increases negative); all its processes together held "
                 f"{num(tt * 1e3, 'MB')} (PSS) with the threads and {num(dt * 1e3, 'MB')} with the DataLoader, "
                 "main process included.")
    return Finding("cost", text, red, "%", published=PUB_CPU,
                   values=dict(thread_mem_gb=tm, dl_mem_gb=dm, mem_saving_gb=dm - tm, thread_pss_gb=tt, dl_pss_gb=dt))


def finding_first_batch(res) -> Finding:
    st = res.table("startup") if "startup" in res.tables else pd.DataFrame()
    if st.empty:
        return Finding("first_batch", "The DataLoader start-up sweep did not run (`startup_workers` is empty).")
    w, n = int(st["workers"].max()), int(st["n_paths"].max())
    part = st[(st["workers"] == w) & (st["n_paths"] == n)].set_index("start_method")
    small = st[(st["workers"] == w) & (st["n_paths"] == st["n_paths"].min())].set_index("start_method")
    by = {m: float(part.loc[m, "first_batch_s"]) for m in part.index}
    slow = max(by, key=by.get)
    fast = min(by, key=by.get)
    text = (f"With {w} worker{'s' if w > 1 else ''} and a Dataset holding {n:,} file paths ({num(float(part['pickled_bytes'].iloc[0]) / 1e6, 'MB')} "
            "pickled), the first batch arrived after "
            + ", ".join(f"{num(v, 's')} with {m}" for m, v in by.items()))
    if slow in small.index:
        text += (f"; with an empty Dataset {slow} took {num(float(small.loc[slow, 'first_batch_s']), 's')}, so the "
                 f"path list " + choose(direction(by[slow], float(small.loc[slow, 'first_batch_s']), tol=0.10),
                                        f"added {num(by[slow] - float(small.loc[slow, 'first_batch_s']), 's')}",
                                        "did not add to it", "added little to it"))
    text += f". The slowest start method was {slow}, {times(by[slow] / by[fast])} the time of {fast}."
    return Finding("first_batch", text, by[slow], "s", values=dict(by=by, workers=w, paths=n))


# --------------------------------------------------------------------------- experiment 6
def model_runs(res) -> pd.DataFrame:
    """The model-fed runs, each labelled with its feed (kind, concurrency, workers' nice, CPU share);
    results made before the niced and hybrid feeds have neither column: nice 0, no share."""
    m = res.table("model") if "model" in res.tables else pd.DataFrame()
    if m.empty:
        return m
    nice = m["nice"] if "nice" in m else pd.Series(0, index=m.index)
    share = m["share"] if "share" in m else pd.Series(None, index=m.index, dtype=object)
    return m.assign(label=[_label(k, c, n, sh) for k, c, n, sh in zip(m["loader"], m["concurrency"], nice, share,
                                                                     strict=True)])


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
    s["steady"] = [_steady(res, k, v, unit) and p <= 100 * CEILING_SLACK
                   for k, v, p in zip(s["loader"], s["cpu_ms_per_image"], s["pct_of_ceiling"], strict=True)]
    return s


def finding_moonshot(res) -> Finding:
    s = model_summary(res)
    ceil = res.metadata.get("ceiling")
    if s.empty or not ceil:
        why = res.metadata.get("moonshot_note") or "it did not run"
        return Finding("moonshot", f"The model-fed runs did not run here ({why}).")
    target = res.metadata.get("moonshot_target", gil.MOONSHOT_TARGET)
    excluded = s[~s["steady"]]
    s = s[s["steady"]]
    if s.empty:
        return Finding("moonshot", "No model-fed run of this result measured a steady state (see the note on "
                       "steady windows), so the moonshot has no valid figure here.")
    top = s.loc[s["mean"].idxmax()]
    share = float(top["pct_of_ceiling"]) / 100
    others = "; ".join(f"{r.label} {pct(r.pct_of_ceiling / 100)}" for r in s.itertuples() if r.label != top["label"])
    if len(excluded):
        others += ("; " if others else "") + "not steady, left out: " + ", ".join(excluded["label"])
    text = (ceiling_text(res) + f" From cold files, the fastest feed was {top['label']} at {num(top['mean'], 'img/s')}, "
            f"{pct(share)} of that ceiling: "
            + choose(1 if share >= target else -1, f"it meets the {pct(target)} target", f"short of the {pct(target)} target", "")
            + (f" (the others: {others})" if others else "") + ".")
    m = model_runs(res)
    if "hybrid" in set(m["loader"]) or ("nice" in m and (m["nice"].fillna(0) > 0).any()):
        text += " " + hybrid_text(res)
    runs = m[m["label"] == top["label"]]["pct_of_ceiling"]
    return Finding("moonshot", text, 100 * share, "%", interval=(float(runs.min()), float(runs.max())))


#: How each kind of model step is run, in the chapter's words.
STEP_WORDS = {"graphed": "replayed from CUDA graphs", "eager": "launched op by op"}


def ceiling_text(res) -> str:
    """The ceiling the model-fed runs are measured against, how its step ran, and the other kind of
    step's ceiling where it was measured (or why the graphed step was not used)."""
    md = res.metadata
    kind = md.get("model_step") or "eager"
    text = (f"ResNet-50 in bf16 with channels_last, its step {STEP_WORDS[kind]}, runs at "
            f"{num(md['ceiling']['images_per_s'], 'img/s')} on a batch kept in GPU memory")
    other = {"graphed": "eager", "eager": "graphed"}[kind]
    oc = (md.get("ceilings") or {}).get(other)
    if oc:
        d = direction(float(md["ceiling"]["images_per_s"]), float(oc["images_per_s"]), tol=0.01)
        text += (f" ({STEP_WORDS[other]}: {num(oc['images_per_s'], 'img/s')}, "
                 + choose(d, "slower", "faster", "level") + ")")
    if kind == "eager" and md.get("graph_note"):
        text += f"; the graphed step was not used ({md['graph_note']})"
    return text + "."


#: Why the two newer feeds can help (mechanism only; the figures say whether they did).
WHY_NICE_HYBRID = ("Workers at a lower priority leave the main process's thread the first claim on a core, so the "
                   "training step's kernel launches are not delayed behind busy decoders; splitting each batch "
                   "between CPU and GPU decoding gives the GPU back the decode time it would otherwise take from "
                   "the training step, while the CPU decodes only as many images as it can keep up with.")


def hybrid_text(res) -> str:
    """The hybrid's CPU share and how it was chosen (from the run's metadata), and why the niced and
    hybrid feeds can help."""
    h = res.metadata.get("hybrid") or {}
    if h.get("share") is not None:
        how = (f"{num(h['cpu_rate'], 'img/s')} from the best DataLoader alone against a ceiling of "
               f"{num(h['ceiling'], 'img/s')}, by the rule {h['rule']}" if h.get("rule") != gil.HYBRID_MANUAL
               else gil.HYBRID_MANUAL)
        lead = (f"The hybrid decoded {pct(float(h['share']))} of each batch in {h['workers']} DataLoader workers "
                f"and the rest on the GPU ({how}). ")
    else:
        lead = f"The hybrid feed did not run ({h['note']}). " if h.get("note") else ""
    return lead + WHY_NICE_HYBRID


def findings(res) -> list[Finding]:
    dec = "pillow" if "pillow" in set(res.table("primitives")["decoder"]) else res.table("primitives")["decoder"].iloc[0]
    others = [d for d in ("spdl", "torchvision") if d != dec and d in set(res.table("primitives")["decoder"])]
    first = finding_primitives(res, dec)
    if others:
        first = Finding(first.key, " ".join([first.text, *[decoder_sentence(res, d) for d in others]]), first.value,
                        first.unit, interval=first.interval)
    return [first, finding_contention(res, dec), finding_end_to_end(res), finding_cost(res),
            finding_first_batch(res), finding_moonshot(res)]


def decoder_sentence(res, decoder: str) -> str:
    """The same peak comparison for another decoder of the run (spdl.io decodes without holding the
    GIL), one sentence, so that the key results stay six."""
    t, p = _peak(res, decoder, "thread"), _peak(res, decoder, "process")
    name = {"spdl": "spdl.io", "torchvision": "torchvision"}.get(decoder, decoder)
    if t is None or p is None:
        return f"With {name} this run lacks one of the two executors."
    return (f"With {name}, threads peaked at {num(t['mean'], 'img/s')} ({t['c']}) and processes at "
            f"{num(p['mean'], 'img/s')} ({p['c']}): threads were {compare(t['runs'], p['runs'])} processes.")


def key_metrics(res) -> dict:
    out = {}
    t, d = best_loader(res, THREADED), best_loader(res, ["dataloader"])
    if t is not None and d is not None:
        out[PUB_GAIN] = (100 * (t["mean"] / d["mean"] - 1), None)
        tc, dc = _cpu_per_image(t["runs"]), _cpu_per_image(d["runs"])
        out[PUB_CPU] = (100 * (1 - np.mean(tc) / np.mean(dc)), None)
        if "added_pss_bytes" in t["runs"] and "added_pss_bytes" in d["runs"]:
            out[PUB_MEM] = ((d["runs"]["added_pss_bytes"].mean() - t["runs"]["added_pss_bytes"].mean()) / 1e9, None)
    sp = best_loader(res, ["spdl"])
    if sp is not None:
        out[PUB_SPDL] = (sp["mean"], float(sp["runs"]["images_per_s"].std()) if len(sp["runs"]) > 1 else None)
    if d is not None:
        out[PUB_DL] = (d["mean"], float(d["runs"]["images_per_s"].std()) if len(d["runs"]) > 1 else None)
    st = res.table("startup") if "startup" in res.tables else pd.DataFrame()
    if not st.empty:
        big = st[(st["n_paths"] == st["n_paths"].max()) & (st["start_method"] == "spawn")]
        for w, metric in ((4, PUB_TTFB4), (32, PUB_TTFB32)):
            v = big[big["workers"] == w]["first_batch_s"]
            if len(v):
                out[metric] = (float(v.mean()), None)
    return out


# --------------------------------------------------------------------------- notes and tables
def calibration_text(res) -> str:
    cal = res.table("calibration")
    ib = res.metadata["image_bytes"]
    w, h = res.metadata["image_size"]
    parts = [f"{r.decoder} {num(r.decode_ms + r.resize_ms, 'ms')} " + (
             "(decode and resize in one FFmpeg filter graph)" if r.decoder == "spdl" else
             f"(decode {num(r.decode_ms, 'ms')}, resize {num(r.resize_ms, 'ms')})") for r in cal.itertuples()]
    return (f"The {w}×{h} JPEGs of this run average {num(ib['mean'] / 1e3, 'kB')} "
            f"({num(ib['min'] / 1e3, 'kB')}–{num(ib['max'] / 1e3, 'kB')}). Decoding and resizing one image on one "
            f"core (median of a few images, page cache warm) took: " + "; ".join(parts) + ". The SPDL paper does not "
            "state a per-image cost for its host.")


def decoder_notes(res) -> str:
    lines = []
    for k, v in res.metadata["decoders"].items():
        lines.append(f"* **{k}**: " + ("measured" if k in res.metadata["decoders_run"] else "not measured")
                     + f" — {v['note']}")
    return "\n".join(lines)


def primitive_table(res) -> pd.DataFrame:
    s = primitive_summary(res)
    return pd.DataFrame({"decoder": s["decoder"], "executor": s["executor"], "concurrency": s["concurrency"],
                         "img/s (mean)": s["mean"], "min": s["min"], "max": s["max"],
                         "start-up (s)": s["startup_s"]})


def primitive_lines(res) -> pd.DataFrame:
    s = primitive_summary(res)
    return s.assign(executor=s["executor"].map({"thread": "ThreadPoolExecutor", "process": "ProcessPoolExecutor"}))


def op_lines(res, decoder: str) -> pd.DataFrame:
    o = res.table("ops")
    o = o[o["decoder"] == decoder]
    s = stats.summarise(o, ["op", "executor", "concurrency"], "ms_per_image")
    return s[s["op"].isin(["read", "decode", "resize"] if decoder != "spdl" else ["read", "decode"])]


def startup_note(res) -> str:
    st = res.table("startup")
    start = st[st["n_paths"] == st["n_paths"].min()]
    start = start.groupby("start_method")["first_batch_s"].max()
    fork = float(start.get("fork", float("nan")))
    others = {m: float(v) for m, v in start.items() if m != "fork"}
    if not others or not math.isfinite(fork):
        return ""
    txt = ", ".join(f"{m} {num(v, 's')}" for m, v in others.items())
    return (f"Even with an empty Dataset the slowest start (the most workers) took {num(fork, 's')} with fork and "
            f"{txt}: a spawned or forkserver worker starts a fresh interpreter and imports torch before it can "
            "run the Dataset.")


def startup_lines(res) -> pd.DataFrame:
    st = res.table("startup").copy()
    st["dataset"] = [f"{n:,} paths" for n in st["n_paths"]]
    st["series"] = st["start_method"] + ", " + st["dataset"]
    return st.assign(mean=st["first_batch_s"], min=st["first_batch_s"], max=st["first_batch_s"], n=1)


def loader_lines(res) -> pd.DataFrame:
    """Every configuration; of a result with the old windows, only those whose CPU time shows
    they produced what they counted (the others overstate throughput; they stay in the table)."""
    s = loader_summary(res)
    s = s[s["steady"]]
    return s.assign(loader=s["loader"].map(gil.LABELS))


def window_note(res) -> str:
    """How the timed windows of this result were sized (and, for old ones, what that means)."""
    lo = res.table("loaders")
    if not old_windows(res):
        f = res.metadata["window_rule"]["factor"]
        t = (lo.groupby(["loader", "concurrency"])["batches"].first() if "batches" in lo else pd.Series(dtype=float))
        span_txt = f" (here {int(t.min())} to {int(t.max())} batches)" if len(t) else ""
        return (f"Each timed window held at least {f} times the batches its loader had in flight, in whole waves of "
                f"the DataLoader's workers{span_txt}, and the thread pool made one image per task.")
    n = int(res.parameters.get("loader_batches", 0))
    return (f"These loader rows come from the old timed windows: a fixed {n} batches after the batches in flight, "
            "with the thread pool making one batch per task. A DataLoader's workers (and those tasks) finish "
            "their batches in waves, and a window of a fraction of a wave more or less than whole waves counts "
            "a wave's batches in the time of fewer, so its rate depends on where it fell: the deeper "
            "configurations may be overstated even where they are kept. Rerun the chapter for windows sized "
            "by waves.")


def steady_note(res) -> str | None:
    """Of a result with the old windows: which were not steady, with the numbers that show it."""
    if not old_windows(res):
        return None
    s = loader_summary(res)
    bad = s[~s["steady"]]
    m = model_summary(res)
    mbad = m[~m["steady"]] if not m.empty else m
    if bad.empty and mbad.empty:
        return None
    unit = unit_cost_ms(res)
    parts = [f"{_label(r.loader, r.concurrency)} used {num(r.cpu_ms_per_image, 'ms')} of CPU per image "
             f"({pct(r.cpu_share)} of it) and showed {num(r.mean, 'img/s')}" for r in bad.itertuples()]
    parts += [f"the model fed by {r.label} used {num(r.cpu_ms_per_image, 'ms')} of CPU per image and showed "
              f"{pct(r.pct_of_ceiling / 100)} of the ceiling" for r in mbad.itertuples()]
    return (f"Decoding and resizing one image costs {num(unit, 'ms')} of CPU on one core (calibration above), and "
            "a loader cannot produce an image for less. In these old timed windows the CPU time per image fell "
            f"below {pct(STEADY_SHARE)} of that: " + "; ".join(parts) + ". Their windows spanned too few waves of "
            "batches, so their images/s overstate production; they are left out of the chart, of the best "
            "configurations and of the findings.")


def gpu_share_note(res) -> str | None:
    """Why GPU decoding feeds the model below its ceiling, computed from the decode-only rate."""
    s = loader_summary(res)
    m = model_summary(res)
    ceil = res.metadata.get("ceiling")
    nv = s[s["loader"] == "nvjpeg"]
    mv = m[m["loader"] == "nvjpeg"] if not m.empty else m
    if nv.empty or mv.empty or not ceil:
        return None
    bs = int(res.parameters.get("batch_size", 64))
    dec_ms = bs / float(nv["mean"].iloc[0]) * 1e3
    step_ms = bs / float(ceil["images_per_s"]) * 1e3
    pred = step_ms / (step_ms + dec_ms)
    got = float(mv["pct_of_ceiling"].iloc[0]) / 100
    d = direction(got, pred, tol=0.05)
    return (f"GPU decoding alone delivered {num(float(nv['mean'].iloc[0]), 'img/s')}: at most {num(dec_ms, 'ms')} of "
            f"GPU time per batch of {bs}, against a training step of {num(step_ms, 'ms')}. If decoding and training "
            f"take turns on the GPU, the model can reach {pct(pred)} of its ceiling; fed this way it reached "
            f"{pct(got)}: " + choose(d, "more than that, so part of the decoding ran beside the training kernels",
                                    "less than that, so something besides the GPU's time also held the steps back",
                                    "as predicted, so the shortfall is the GPU's own time spent decoding") + ".")


def loader_table(res) -> pd.DataFrame:
    s = loader_summary(res)
    out = pd.DataFrame({"loader": s["loader"].map(gil.LABELS), "workers / threads": s["concurrency"],
                        "img/s": s["mean"], "min": s["min"], "max": s["max"]})
    if old_windows(res):
        out["timed window"] = ["old: kept" if v else "old: left out" for v in s["steady"]]
    out["first batch (s)"] = s["first_batch_s"]
    out["CPU ms/img (user)"] = s["user_ms_per_image"]
    out["CPU ms/img (system)"] = s["system_ms_per_image"]
    out["busy cores"] = s["cpu_cores"]
    out["PSS, all processes (MB)"] = s["pss_mb"]
    out["USS, all processes (MB)"] = s["uss_mb"]
    if s["added_pss_mb"].notna().any():
        out["PSS added (MB)"] = s["added_pss_mb"]
    out["processes"] = s["processes"]
    return out


def loader_spread(res) -> list[str]:
    lo = res.table("loaders")
    s = loader_summary(res)
    steady = {(k, c) for k, c, ok in zip(s["loader"], s["concurrency"], s["steady"], strict=True) if ok}
    notes = []
    for (k, c), g in lo.groupby(["loader", "concurrency"]):
        if (k, c) not in steady:
            continue
        n = spread_note(_label(k, c), g["images_per_s"].tolist(), "img/s")
        if n:
            notes.append(n)
    return notes


def cold_note(res) -> str:
    lo = res.table("loaders")
    r = float(lo["resident_at_start"].max())
    meth = ", ".join(res.metadata.get("purge_methods", [])) or "?"
    return (f"Before each loader the files it reads were evicted from the page cache ({meth}); at most "
            f"{pct(r)} of them were still resident when it started.")


def ipc_text(res) -> str:
    ipc = res.table("ipc") if "ipc" in res.tables else pd.DataFrame()
    if ipc.empty:
        return "The IPC experiment did not run (`ipc_batch_sizes` is empty)."
    cal = res.table("calibration")
    dec = float((cal["decode_ms"] + cal["resize_ms"]).iloc[0])
    parts = []
    for bs, g in ipc.groupby("batch_size"):
        g = g.set_index("workers")
        if 0 not in g.index:
            continue
        base = float(g.loc[0, "ms_per_batch"])
        for w in [w for w in g.index if w > 0]:
            v = float(g.loc[w, "ms_per_batch"])
            extra = v - base
            b = float(g.loc[w, "batch_bytes"])
            parts.append(f"a batch of {bs} images ({num(b / 1e6, 'MB')}) took {num(v, 'ms')} through {w} worker "
                         f"process{'es' if w > 1 else ''} against {num(base, 'ms')} in the main process "
                         + (f"(+{num(extra, 'ms')}, {pct(extra / (bs * dec))} of the CPU time of decoding that batch)"
                            if extra > 0 else "(no extra cost measured)"))
    return ("With the images already decoded, so that moving them is all a loader does: " + "; ".join(parts) + ".")


def free_threading_text(res) -> str:
    ft = res.metadata["free_threading"]
    if not ft["gil_enabled"]:
        return (f"This run used Python {ft['python']} with the GIL disabled: experiments 1 and 2 above ran on a "
                "free-threaded interpreter, and the threads' per-operation times show what is left without the lock.")
    return (f"This run used Python {ft['python']} with the GIL enabled (free-threaded build: "
            f"{'yes' if ft['free_threaded_build'] else 'no'}), so the free-threaded comparison is skipped here. "
            "The published figures for Python 3.13t are shown in the table above, labelled as published.")


def model_table(res) -> pd.DataFrame:
    s = model_summary(res)
    if s.empty:
        return s
    return pd.DataFrame({"feed": s["label"], "timed window": [("old: " if old_windows(res) else "")
                                                             + ("kept" if v else "left out") for v in s["steady"]],
                         "img/s": s["mean"], "min": s["min"], "max": s["max"],
                         "% of ceiling": s["pct_of_ceiling"], "data-wait share": 100 * s["wait_share"],
                         "busy cores": s["cpu_cores"]})


def model_bars(res) -> pd.DataFrame:
    s = model_summary(res)
    return s.assign(series="from cold files")


def takeaways(res) -> str:
    out = []
    t, d = best_loader(res, THREADED), best_loader(res, ["dataloader"])
    if t is not None and d is not None:
        dd = direction(t["runs"]["images_per_s"].tolist(), d["runs"]["images_per_s"].tolist())
        out.append("* On this host " + choose(dd, f"a thread pipeline ({t['label']}) was the faster loader",
                                              f"the DataLoader ({d['label']}) was the faster loader",
                                              "threads and processes delivered about the same")
                   + "; measure both on yours before choosing.")
    s = model_summary(res)
    s = s[s["steady"]] if not s.empty else s
    if not s.empty:
        top = s.loc[s["mean"].idxmax()]
        out.append(f"* To keep ResNet-50 (bf16) fed, the best feed here was {top['label']} "
                   f"({pct(top['pct_of_ceiling'] / 100)} of the ceiling).")
    return "\n".join(out)


def errors_text(res) -> str | None:
    """The measurements that failed in this run, each with its error (none: None)."""
    errs = res.metadata.get("errors") or []
    if not errs:
        return None
    return ("These measurements failed in this run and are missing from its tables:\n\n"
            + "\n".join(f"* {e['what']}: `{e['error']}`" for e in errs))


def spdl_note(res) -> str | None:
    """How the SPDL pipeline scaled with threads, beside the thread pool with the same decode function."""
    s = loader_summary(res)
    sp = s[(s["loader"] == "spdl") & s["steady"]]
    if len(sp) < 2:
        return None
    tp = best_loader(res, ["threadpool"])
    text = (f"With the same decode function in its stage, the SPDL pipeline delivered "
            f"{span(sp['mean'].min(), sp['mean'].max(), 'img/s')} from {int(sp['concurrency'].min())} to "
            f"{int(sp['concurrency'].max())} threads, keeping {span(sp['cpu_cores'].min(), sp['cpu_cores'].max())} "
            "cores busy")
    if tp is not None:
        d = direction(tp["mean"], float(sp["mean"].max()))
        text += (f"; the plain thread pool reached {num(tp['mean'], 'img/s')} ({tp['label']}), "
                 + choose(d, "more than", "less than", "about as much as") + " the pipeline's best")
    return text + "."


# --------------------------------------------------------------------------- SPDL per-stage statistics
#: The pipeline's stages, source to sink (names as ``spdl.pipeline`` reports them).
STAGE_ORDER = ("src", "decode", "aggregate", "collate", "transfer", "sink")
#: A stage whose tasks kept its threads busy at least this share of the timed window sets the
#: pipeline's pace: below it, the stage waits for input or for room downstream.
BUSY_LIMIT = 0.80
#: The decode time per image in a pipeline thread, over the same work on one core alone, above
#: which the threads spend the difference waiting (for the interpreter lock, as in section 2).
CONTENTION_LIMIT = 1.5


def spdl_stages(res) -> pd.DataFrame:
    """The SPDL pipeline's per-stage statistics (means of the runs), or an empty frame when the
    result has none (runs made before they were recorded)."""
    if "spdl_stages" not in res.tables or res.table("spdl_stages").empty:
        return pd.DataFrame()
    t = res.table("spdl_stages")
    cols = [c for c in ("stage_concurrency", "tasks", "task_ms", "busy", "out_occupancy", "out_put_wait_ms",
                        "out_get_wait_ms", "window_s", "read_ms", "decode_ms", "resize_ms") if c in t]
    g = t.groupby(["concurrency", "stage"], sort=False)[cols].mean().reset_index()
    g["order"] = [STAGE_ORDER.index(s) if s in STAGE_ORDER else len(STAGE_ORDER) for s in g["stage"]]
    g = g.sort_values(["concurrency", "order"]).drop(columns="order").reset_index(drop=True)
    # tasks that finished inside the window but began before it can push the sum past the window
    g["busy"] = g["busy"].clip(upper=1.0)
    return g


def spdl_stage_table(res) -> pd.DataFrame:
    g = spdl_stages(res)
    if g.empty:
        return g
    out = pd.DataFrame({"threads": g["concurrency"], "stage": g["stage"], "tasks in window": g["tasks"],
                        "ms per task": g["task_ms"], "busy (share of its threads)": g["busy"],
                        "output queue held an item": g["out_occupancy"],
                        "ms a task waited to put": g["out_put_wait_ms"]})
    if "read_ms" in g:
        out["of which read (ms)"] = g["read_ms"]
    return out


def spdl_limit(res) -> dict | None:
    """Which stage limits the SPDL pipeline at its highest thread count, and the numbers that
    decide it; None when the result has no per-stage statistics."""
    g = spdl_stages(res)
    if g.empty:
        return None
    c_hi, c_lo = int(g["concurrency"].max()), int(g["concurrency"].min())
    at = g[g["concurrency"] == c_hi].set_index("stage")
    busy = at["busy"].dropna()
    if busy.empty:
        return None
    stage = str(busy.idxmax())
    dec = g[g["stage"] == "decode"].set_index("concurrency")["task_ms"]
    lo = res.table("loaders")
    rate = float(lo[(lo["loader"] == "spdl") & (lo["concurrency"] == c_hi)]["images_per_s"].mean())
    unit = unit_cost_ms(res, str(lo["decoder"].iloc[0]) if "decoder" in lo and len(lo) else "pillow")
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
    return dict(c=c_hi, c_lo=c_lo, stage=stage, busy=float(busy.max()), cause=cause, rate=rate, unit=unit,
                read_ms=read_ms, work_ms=work_ms,
                decode_busy=float(at["busy"].get("decode", float("nan"))),
                decode_ms=float(dec.get(c_hi, float("nan"))), decode_ms_lo=float(dec.get(c_lo, float("nan"))),
                task_ms=float(at["task_ms"].get(stage, float("nan"))),
                stage_threads=int(at["stage_concurrency"].get(stage, 1)),
                sink_occupancy=float(at["out_occupancy"].get("sink", float("nan"))))


def spdl_limit_note(res, ref=None) -> str:
    """The measured cause of the SPDL pipeline's plateau, computed from its per-stage statistics."""
    lim = spdl_limit(res)
    if lim is None:
        if "loaders" in res.tables and (res.table("loaders")["loader"] == "spdl").any():
            return ("The SPDL pipeline's per-stage statistics (task time per stage, queue occupancy) are not in "
                    "this result: they are not in the reference run, which predates them; a new run of the "
                    "chapter records them.")
        return "The SPDL pipeline did not run here, so it has no per-stage statistics."
    c, b = lim["c"], lim["busy"]
    head = (f"With {c} decode threads the SPDL pipeline delivered {num(lim['rate'], 'img/s')}. Its decode threads "
            f"were busy {pct(lim['decode_busy'])} of the timed window, at {num(lim['decode_ms'], 'ms')} per image")
    if math.isfinite(lim["read_ms"]):
        other = lim["decode_ms"] - lim["read_ms"] - lim["work_ms"]
        head += (f": {num(lim['read_ms'], 'ms')} reading the file, {num(lim['work_ms'], 'ms')} decoding and "
                 f"resizing it (which takes {num(lim['unit'], 'ms')} on one core alone), and "
                 f"{num(max(other, 0.0), 'ms')} handing the task to a pool thread and its result back to the "
                 "pipeline's event loop")
    else:
        head += f" (decoding and resizing alone take {num(lim['unit'], 'ms')} on one core)"
    if math.isfinite(lim["decode_ms_lo"]) and lim["c_lo"] != c:
        head += (f"; from {lim['c_lo']} to {c} threads the time per image grew "
                 f"{times(lim['decode_ms'] / lim['decode_ms_lo'])} while the threads grew {times(c / lim['c_lo'])}")
    head += ". "
    if lim["cause"] == "stage":
        cap = lim["rate"] / b if b > 0 else float("nan")
        return head + (f"The busiest stage was {lim['stage']} ({lim['stage_threads']} "
                       f"thread{'s' if lim['stage_threads'] != 1 else ''}), busy {pct(b)} of the window at "
                       f"{num(lim['task_ms'], 'ms')} per task; at full time it would pass about "
                       f"{num(cap, 'img/s')}. So the {lim['stage']} stage, after decoding, limits the pipeline: "
                       "more decode threads cannot help, and the GIL is not what stops it.")
    if lim["cause"] == "handoff":
        return head + ("Decode was the busiest stage, and most of each task went to the hand-off between the "
                       "event loop and the threads, Python code that runs one thread at a time under the "
                       "interpreter lock: the GIL limits the pipeline, through its scheduling rather than the "
                       "decode itself.")
    if lim["cause"] == "read":
        return head + ("Decode was the busiest stage, and its threads spent more of each image reading the cold "
                       "file than decoding it: storage latency limits the pipeline; more reads in flight (more "
                       "threads, or a separate read stage with its own concurrency) would raise throughput, and the "
                       "GIL is not what stops it.")
    if lim["cause"] == "gil":
        return head + (f"Decode was the busiest stage, and decoding and resizing an image took "
                       f"{times(lim['work_ms'] / lim['unit'])} its time on one core alone: the threads spend the "
                       "difference waiting for the interpreter lock (the per-operation contention of section 2), "
                       "so the GIL limits the pipeline, not the number of threads or the batching stages.")
    if lim["cause"] == "threads":
        return head + ("Decode was the busiest stage, and decoding an image took about its time on one core alone, "
                       "so the decode threads were simply too few: more decode concurrency would raise "
                       "throughput.")
    return head + (f"No stage was busy {pct(BUSY_LIMIT)} of the window or more (the busiest, {lim['stage']}, "
                   f"{pct(b)}), and the queue the training loop takes batches from held one "
                   f"{pct(lim['sink_occupancy'])} of the time: " + choose(
                       direction(lim["sink_occupancy"], 0.5, tol=0.0), "batches were waiting for the consumer, "
                       "so the loop that takes them (the copy to the device) set the pace",
                       "the pipeline's stages waited on each other, and these statistics do not single out "
                       "one cause", "") + ".")
