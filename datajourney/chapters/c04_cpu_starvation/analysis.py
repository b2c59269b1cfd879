"""Chapter 4's analysis: what a CPU-starvation result finds, as facts (no prose).

The workload is synthetic: per-sample CPU work of ``D`` ms (a sleep, or real tokenising and decoding sized to
cost about ``D``), batches of ``B``, a step calibrated to ``G`` ms. So its advice is keyed ``synthetic.*`` and
names that workload with the run's parameters; it is not the answer for a real model (chapter 7 measures
ResNet-50's loader).
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from datajourney.chapters.c04_cpu_starvation.model import AU_THRESHOLD, workers_needed
from datajourney.chapters.c04_cpu_starvation.params import COST_PROFILES, DEFAULT_PREFETCH
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Advice, Fact, Facts, compare, measured
from datajourney.core.results import Result

CHAPTER = "04_cpu_starvation"
#: The facts other pages may read (chapter 12's checklist, the front page).
EXPORTS = ("workers_to_keep_up", "published_w0", "epoch_boundary", "step_g")
#: A paired prefetch effect counts only when every run moved by more than this (relative).
PREFETCH_TOL = 0.10
#: persistent_workers is advised only when the first step of epoch 2 is this much (relative) shorter with them.
BOUNDARY_TOL = 0.05
#: What each kind of work is, in a reader's words.
WORK = {"sleep": "sleeping", "tokenize": "tokenising", "decode": "JPEG decoding"}


def _g(res: Result) -> float:
    """The calibrated steady-state step of a result (older results: the burst calibration)."""
    m = res.metadata
    return float(m.get("step_steady_ms") or m.get("step_calibrated_ms") or res.parameters["g_ms"])


def _summary(res: Result, experiment: str) -> pd.DataFrame:
    s = res.table("summary")
    return s[s["experiment"] == experiment]


def _au(row, g: float) -> float:
    """AU of a summary row against the calibrated step (older results: steps × G / wall from the means)."""
    if "g_cal_ms" in row and pd.notna(row.get("g_cal_ms")):
        return float(row["au"])
    return g / float(row["step_ms"])


def _ms(key, value, label, better="lower", **kw) -> Fact:
    return Fact(key, None if value is None else float(value), "ms", label, "time", better, **kw)


def _pct(key, fraction, label, better="higher", **kw) -> Fact:
    return Fact(key, 100 * float(fraction), "%", label, "share", better, **kw)


def workload(kind: str, d: float, b: int, g: float) -> str:
    """The synthetic workload in words, with the run's parameters."""
    return (f"synthetic {WORK.get(kind, 'per-sample')} work of {d:.2g} ms a sample in batches of {b}, "
            f"against a {g:.0f} ms step")


def analyse(res: Result) -> Facts:
    """Chapter 4's facts (see the module docstring)."""
    out = Facts(CHAPTER, exports=EXPORTS)
    g = _g(res)
    out.add(_ms("step_g", g, "the calibrated step G", better=None),
            _pct("au_threshold", AU_THRESHOLD, "the share of AU that counts as keeping up"),
            Fact("step_device", "gpu" if res.metadata.get("cuda") else "simulated", "", "what the step ran on",
                 "choice", None))
    _published(res, out, g)
    _sweep(res, out, g)
    _drift(res, out, g)
    _prefetch(res, out, g)
    _boundary(res, out)
    _advice(res, out, g)
    _notes(res, out, g)
    return out


def _published(res: Result, out: Facts, g: float) -> None:
    p = _summary(res, "published case").set_index("workers")
    if 0 in p.index:
        r = p.loc[0]
        out.add(_ms("published_w0", r["wait_ms"], "the data wait per step with no workers (W = 0)",
                    published="data wait per step, W=0", setting={"workers": 0}),
                _ms("published_w0_model", float(r["d_ms"]) * int(r["batch_size"]),
                    "D·B in the model (the training process preparing every batch itself)"),
                _pct("published_w0_idle", r["idle_share"], "the accelerator's idle share with no workers", "lower",
                     published="GPU idle share, W=0"),
                _ms("published_w0_compute", r["compute_ms"], "compute per step with no workers"))
        out.add(compare("published_w0_vs_model", out["published_w0"], out["published_w0_model"]))
    ws = [int(w) for w in p.index if w > 0]
    if ws:
        w = 4 if 4 in ws else max(ws)
        r = p.loc[w]
        au = _au(r, g)
        out.add(_ms("published_w", r["wait_ms"], f"the data wait per step with {w} workers",
                    published=f"data wait per step, W={w}", setting={"workers": w}),
                _ms("published_w_per_batch", float(r["d_ms"]) * int(r["batch_size"]) / w,
                    f"D·B/W in the model with {w} workers", setting={"workers": w}),
                _pct("published_w_au", au, f"accelerator utilisation (AU) with {w} workers", setting={"workers": w}),
                Fact("published_w_keeps_up", "keeps up" if au >= AU_THRESHOLD else "falls short", "",
                     f"whether {w} workers kept the step busy", "choice", None, setting={"workers": w}))


def _sweep(res: Result, out: Facts, g: float) -> None:
    sw = _summary(res, "worker sweep")
    if sw.empty:
        return
    firsts = {}
    for kind in dict.fromkeys(sw["work"]):
        part = sw[sw["work"] == kind].sort_values("workers")
        d, b = float(part["d_ms"].iloc[0]), int(part["batch_size"].iloc[0])
        au = [_au(r, g) for _, r in part.iterrows()]
        ok = [int(w) for w, a in zip(part["workers"], au, strict=True) if a >= AU_THRESHOLD]
        model_w = workers_needed(d, b, g)
        first = min(ok) if ok else None
        firsts[kind] = first
        s = {"work": str(kind)}
        out.add(Fact(f"keep_up.{kind}", first, "workers", f"workers that kept the step busy, {kind} work", "count",
                     "lower", setting=s),
                Fact(f"model_workers.{kind}", model_w, "workers", f"workers the model asks for, {kind} work", "count",
                     "lower", setting=s),
                _ms(f"d.{kind}", d, f"the cost of one sample of {kind} work", setting=s),
                _pct(f"best_au.{kind}", max(au), f"the best AU of the sweep, {kind} work", setting=s))
        for _, r in part.iterrows():
            w = int(r["workers"])
            out.add(_ms(f"step.{kind}.w{w}", r["step_ms"],
                        "loading in the training process (W = 0)" if w == 0 else f"num_workers={w}",
                        setting={**s, "workers": w}))
    out.add(Fact("sweep_max_workers", int(sw["workers"].max()), "workers", "the most workers the sweep ran",
                 "count", None),
            Fact("cores", res.metadata.get("cores"), "cores", "usable cores", "count", None))
    real = [k for k in firsts if k != "sleep"]
    kind = real[0] if real else next(iter(firsts))
    f = out[f"keep_up.{kind}"]
    b = int(sw[sw["work"] == kind]["batch_size"].iloc[0])
    wl = workload(kind, out.number(f"d.{kind}"), b, g)
    out.add(dataclasses.replace(f, key="workers_to_keep_up", label=f"workers that kept the step busy, {wl}"))
    if f.number is not None and f"step.{kind}.w0" in out:
        out.add(compare("workers_gain", out[f"step.{kind}.w{int(f.number)}"], out[f"step.{kind}.w0"]))


def _drift(res: Result, out: Facts, g: float) -> None:
    if "calibration" not in res.tables or "idle_gaps" not in res.tables:
        return
    cal = res.table("calibration")
    drift = cal[cal["phase"] == "drift"]
    idle = res.table("idle_gaps")
    gaps = sorted(idle["gap_ms"].unique())
    if drift.empty or not gaps:
        return
    base = idle[idle["gap_ms"] == gaps[0]]["step_ms"]
    top = idle[idle["gap_ms"] == gaps[-1]]["step_ms"]
    out.add(_ms("step_first", drift["step_ms"].iloc[0], "the first step after a rest"),
            measured("step_back_to_back", base, unit="ms", label="a step run back-to-back", quantity="time",
                     better=None, setting={"gap_ms": float(gaps[0])}),
            measured("step_after_gap", top, unit="ms", label=f"a step after an idle gap of {gaps[-1]:g} ms",
                     quantity="time", better=None, setting={"gap_ms": float(gaps[-1])}))
    out.add(compare("step_drift", out["step_after_gap"], out["step_back_to_back"]))
    p = power_against_limit(idle, (res.metadata.get("nvml") or {}).get("power_limit_w"))
    if p is not None:
        out.add(Fact("power_peak", p["peak"], "W", "the most power a step of the idle-gap experiment drew", "amount",
                     None, setting={"gap_ms": p["gap_ms"]}),
                Fact("power_vs_limit", p["state"], "", f"the steps' power against the board's {p['limit']:.0f} W limit",
                     "choice", None, setting={"limit_w": p["limit"]}))


def power_against_limit(idle: pd.DataFrame, limit: float | None) -> dict | None:
    """The highest per-step power of the idle-gap steps (NVML samples averaged over each step) against the
    board's power limit: ``below`` only where no step drew as much as the limit, ``reached`` where the
    highest step drew the limit (to the watt), ``exceeded`` above it. None without a limit or power samples."""
    if not limit or "power_w" not in idle or not idle["power_w"].notna().any():
        return None
    top = idle.loc[idle["power_w"].idxmax()]
    peak = float(top["power_w"])
    state = "below" if round(peak) < round(limit) else "reached" if round(peak) == round(limit) else "exceeded"
    return dict(state=state, peak=peak, gap_ms=float(top["gap_ms"]), limit=float(limit))


def prefetch_effect(pf: pd.DataFrame, cost: str, *, tol: float = PREFETCH_TOL) -> dict:
    """The deepest against the shallowest prefetch_factor for one cost profile, paired by run: +1 when every
    run's wait shortened by more than ``tol``, -1 when every run's lengthened, 0 otherwise."""
    lo_pf, hi_pf = pf["prefetch_factor"].min(), pf["prefetch_factor"].max()
    part = pf[pf["cost"] == cost]
    a = part[part["prefetch_factor"] == lo_pf].set_index("run")["wait_ms"]
    b = part[part["prefetch_factor"] == hi_pf].set_index("run")["wait_ms"]
    runs = sorted(set(a.index) & set(b.index))
    ratios = [float(a[r] / b[r]) if b[r] > 0 else float("inf") for r in runs]
    d = (1 if ratios and all(r > 1 + tol for r in ratios) else
         -1 if ratios and all(r < 1 / (1 + tol) for r in ratios) else 0)
    return dict(direction=d, lo=int(lo_pf), hi=int(hi_pf), shallow=a[runs].tolist(), deep=b[runs].tolist())


def _prefetch(res: Result, out: Facts, g: float) -> None:
    if "prefetch" not in res.tables:
        return
    pf = res.table("prefetch")
    if pf["prefetch_factor"].nunique() < 2:
        return
    w, d = int(pf["workers"].iloc[0]), float(pf["d_ms"].iloc[0])
    b = int(pf["batch_size"].iloc[0]) if "batch_size" in pf else int(res.parameters["batch_size"])
    out.add(_pct("prefetch_load", d * b / w / g, "the balanced case's D·B/W against G", None,
                 setting={"workers": w}))
    for cost in [c for c in COST_PROFILES if c in set(pf["cost"])]:
        e = prefetch_effect(pf, cost)
        s = {"cost": cost, "workers": w}
        lo = measured(f"prefetch.{cost}.shallow", e["shallow"], unit="ms", quantity="time", better="lower",
                      label=f"a prefetch factor of {e['lo']}", setting={**s, "prefetch_factor": e["lo"]})
        hi = measured(f"prefetch.{cost}.deep", e["deep"], unit="ms", quantity="time", better="lower",
                      label=f"a prefetch factor of {e['hi']}", setting={**s, "prefetch_factor": e["hi"]})
        c = compare(f"prefetch_balanced.{cost}", hi, lo)
        # a run-by-run claim only where the comparison itself has a direction: with overlapping ranges the
        # page says "level", and "shorter in every run" beside it would contradict it
        paired = {} if c.level else {"every_run": e["direction"]}
        out.add(lo, hi, dataclasses.replace(c, setting={**c.setting, **paired}))
    key = "prefetch_balanced.variable" if "prefetch_balanced.variable" in out else next(
        k for k in out.facts if k.startswith("prefetch_balanced."))
    out.add(dataclasses.replace(out[key], key="prefetch_balanced"))


def _boundary(res: Result, out: Facts) -> None:
    if "epoch_boundary" not in res.tables:
        return
    eb = res.table("epoch_boundary")
    if "prefetch_factor" in eb and DEFAULT_PREFETCH in set(eb["prefetch_factor"]):
        eb = eb[eb["prefetch_factor"] == DEFAULT_PREFETCH]
    first2 = eb[(eb["epoch"] == 1) & (eb["step_in_epoch"] == 0)]
    non = first2[~first2["persistent_workers"].astype(bool)]["wait_ms"].tolist()
    per = first2[first2["persistent_workers"].astype(bool)]["wait_ms"].tolist()
    if not non or not per:
        return
    out.add(measured("boundary_non_persistent", non, unit="ms", quantity="time", better="lower",
                     label="the first step of epoch 2 without persistent workers"),
            measured("boundary_persistent", per, unit="ms", quantity="time", better="lower",
                     label="the first step of epoch 2 with persistent workers"))
    if "startup_ms" in eb and eb["startup_ms"].notna().any():
        out.add(measured("boundary_startup", eb["startup_ms"].dropna().unique(), unit="ms", quantity="time",
                         better="lower", label="worker start-up alone"))
    out.add(_ms("boundary_db", float(res.parameters["d_ms"]) * int(res.parameters["batch_size"]),
                "one worker building a batch (D·B)"))
    out.add(compare("epoch_boundary", out["boundary_persistent"], out["boundary_non_persistent"]))


#: Steps after a wait under this (ms) count as back-to-back; after one of at least AFTER_WAIT_MS, as after a rest.
QUICK_WAIT_MS = 2.0
AFTER_WAIT_MS = 20.0
#: AU and the measured compute share count as apart when they differ by more than this (relative).
AU_SHARE_TOL = 0.02


def _notes(res: Result, out: Facts, g: float) -> None:
    """The facts behind the notes under the tables and charts (the model walk-through, the cost sizing,
    the sweep beyond the cores, the step during the sweep and AU against the measured compute share)."""
    _walkthrough(res, out, g)
    _sizing(res, out)
    _cores(res, out)
    _sweep_steps(res, out, g)


def _walkthrough(res: Result, out: Facts, g: float) -> None:
    if "published_w0_model" not in out:
        return
    db = out.number("published_w0_model")
    out.add(_pct("model_w0_idle", db / (db + g), "the accelerator's idle share the model predicts with no workers",
                 "lower"))
    if "published_w_per_batch" in out:
        per = out["published_w_per_batch"]
        w = int(per.setting["workers"])
        p = _summary(res, "published case").set_index("workers").loc[w]
        out.add(compare("model_w_vs_g", per, out["step_g"]),
                _ms("model_w_wait", float(p["predicted_wait_ms"]), f"the wait the model predicts with {w} workers",
                    setting={"workers": w}))


def _sizing(res: Result, out: Facts) -> None:
    kinds = [k.split(".", 1)[1] for k in out.facts if k.startswith("d.") and k != "d.sleep"]
    if not kinds:
        return
    out.add(_ms("d_target", float(res.parameters["d_ms"]), "D, the cost the work was sized to", better=None))
    for k in kinds:
        out.add(compare(f"sizing.{k}", out[f"d.{k}"], out["d_target"]))


def _cores(res: Result, out: Facts) -> None:
    cores, wmax = out.number("cores"), out.number("sweep_max_workers")
    if not cores or wmax is None or wmax <= cores:
        return
    sw = _summary(res, "worker sweep")
    for k in dict.fromkeys(sw["work"]):
        part = sw[sw["work"] == k].set_index("workers")["wait_ms"].sort_index()
        at, beyond = part[part.index <= cores], part[part.index > cores]
        if len(at) and len(beyond):
            wa, wb = int(at.index[-1]), int(beyond.index[-1])
            s = {"work": str(k)}
            a = _ms(f"cores_wait.{k}.within", at.iloc[-1], f"the wait at W = {wa}", setting={**s, "workers": wa})
            b = _ms(f"cores_wait.{k}.beyond", beyond.iloc[-1], f"the wait at W = {wb}", setting={**s, "workers": wb})
            out.add(a, b, compare(f"cores_wait.{k}", b, a))


def _sweep_steps(res: Result, out: Facts, g: float) -> None:
    st = res.table("steps") if "steps" in res.tables else None
    if st is not None and {"wait_ms", "compute_ms", "step"} <= set(st):
        busy = st[(st["wait_ms"] < QUICK_WAIT_MS) & (st["step"] > 0)]["compute_ms"]
        idle = st[st["wait_ms"] >= AFTER_WAIT_MS]["compute_ms"]
        if not busy.empty:
            out.add(_ms("sweep_step_quick", busy.median(), f"a step after a wait under {QUICK_WAIT_MS:g} ms "
                        "(median over the sweep)", better=None))
            out.add(compare("sweep_step_quick_vs_g", out["sweep_step_quick"], out["step_g"]))
            if not idle.empty:
                out.add(_ms("sweep_step_rested", idle.median(), f"a step after a wait of {AFTER_WAIT_MS:g} ms or "
                            "more (median over the sweep)", better=None))
                out.add(compare("sweep_step_rested_vs_quick", out["sweep_step_rested"], out["sweep_step_quick"]))
    sw = _summary(res, "worker sweep")
    if sw.empty or "au" not in sw or sw["au"].isna().all() or not {"wait_ms", "compute_ms"} <= set(sw):
        return
    share = sw["compute_share"] if "compute_share" in sw else 1 - sw["idle_share"]
    diff = sw["au"] - share
    r = sw.loc[diff.abs().idxmax()]
    a, c = float(r["au"]), float(share.loc[r.name])
    s = {"work": str(r["work"]), "workers": int(r["workers"])}
    d = 1 if a > (1 + AU_SHARE_TOL) * c else -1 if a < c / (1 + AU_SHARE_TOL) else 0
    au = _pct("au_vs_share.au", a, f"AU at {r['work']} W={int(r['workers'])}", None, setting=s)
    cs = _pct("au_vs_share.share", c, "the measured compute share", None, setting=s)
    cmp = compare("au_vs_share", au, cs)
    out.add(au, cs, dataclasses.replace(cmp, setting={**cmp.setting, "direction": d}),
            _ms("au_vs_share.compute", r["compute_ms"], "compute per step there", better=None, setting=s))
    quick = sw["wait_ms"] < QUICK_WAIT_MS
    if quick.any() and not quick.all():
        out.add(Fact("au_vs_share.quick_points", round(100 * float(diff[quick].abs().max()), 1), "points",
                     "the largest difference of AU and the compute share where the steps ran back-to-back",
                     "amount", "lower"))


def _advice(res: Result, out: Facts, g: float) -> None:
    need = out.get("workers_to_keep_up")
    if need is None:
        return
    kind = need.setting["work"]
    b = int(_summary(res, "worker sweep")["batch_size"].iloc[0])
    wl = workload(kind, out.number(f"d.{kind}"), b, g)
    persistent = _persistent_answer(res, out, b, g)
    deeper = _prefetch_answer(res, out, wl)
    persistent = persistent is not None and persistent.verdict == "change"
    deeper = deeper.value if deeper is not None and deeper.verdict == "change" else None
    if need.number is not None:
        w = int(need.number)
        args = [f"batch_size={b}", f"num_workers={w}"]
        if w > 0 and persistent:
            args.append("persistent_workers=True")
        if w > 0 and deeper is not None:
            args.append(f"prefetch_factor={deeper}")
        edge = w == out.number("sweep_max_workers")
        out.advise(Advice("synthetic.num_workers", "num_workers", w, wl, gain="workers_gain" if "workers_gain" in out
                          else None, scope="edge" if edge else "best",
                          evidence=("workers_to_keep_up", f"best_au.{kind}"),
                          snippet="loader = DataLoader(dataset, " + ", ".join(args) + ")"))


def _persistent_answer(res: Result, out: Facts, b: int, g: float):
    """persistent_workers against DataLoader's default (False), on the epoch-boundary experiment's sleep workload."""
    on, off = out.get("boundary_persistent"), out.get("boundary_non_persistent")
    if on is None or off is None:
        return None
    q = Question("synthetic.persistent_workers", "Should the DataLoader keep its workers between epochs?",
                 "persistent_workers", False, "persistent_workers=False", "PyTorch's DataLoader default",
                 workload("sleep", float(res.parameters["d_ms"]), b, g))
    a = decide(q, [Candidate(False, off), Candidate(True, on)], out)
    out.advise(a)
    return a


def _prefetch_answer(res: Result, out: Facts, wl: str):
    """prefetch_factor against DataLoader's default (2), on the balanced case's mean wait per step (the variable
    cost profile where it ran); no answer where the run did not measure the default."""
    if "prefetch" not in res.tables:
        return None
    pf = res.table("prefetch")
    cost = "variable" if "variable" in set(pf["cost"]) else str(pf["cost"].iloc[0])
    part = pf[pf["cost"] == cost]
    cands = [Candidate(int(k), measured(f"prefetch.{cost}.pf{int(k)}", g["wait_ms"].tolist(), unit="ms",
                                        quantity="time", better="lower", label=f"a prefetch factor of {int(k)}",
                                        setting={"cost": cost, "prefetch_factor": int(k)}))
             for k, g in part.groupby("prefetch_factor")]
    q = Question("synthetic.prefetch_factor", "How many batches should each worker prefetch?", "prefetch_factor",
                 DEFAULT_PREFETCH, f"prefetch_factor={DEFAULT_PREFETCH}", "PyTorch's DataLoader default", wl)
    a = decide(q, cands, out)
    if a is not None:
        top = max(c.value for c in cands)
        out.advise(dataclasses.replace(a, scope="edge" if a.verdict == "change" and a.value == top else "best"))
    return a
