"""Chapter 4's analysis: what a CPU-starvation result finds, as facts (no prose).

The workload is synthetic: per-sample CPU work of ``D`` ms (a sleep, or real tokenising and decoding sized to
cost about ``D``), batches of ``B``, a step calibrated to ``G`` ms. So its advice is keyed ``synthetic.*`` and
names that workload with the run's parameters; it is not the answer for a real model (chapter 7 measures
ResNet-50's loader).
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from datajourney.chapters.c04_cpu_starvation.model import (
    AU_THRESHOLD,
    predicted_au,
    predicted_wait_ms,
    workers_needed,
)
from datajourney.chapters.c04_cpu_starvation.params import CHAPTER, COST_PROFILES, DEFAULT_PREFETCH
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Fact, Facts, compare, measured
from datajourney.core.results import Result
from datajourney.core.stats import HIGH_SPREAD, cv
from datajourney.core.units import num

#: The facts other pages may read (chapter 12's checklist, the front page).
EXPORTS = ("workers_to_keep_up", "published_w0", "epoch_boundary", "step_g")
#: A paired prefetch effect counts only when every run moved by more than this (relative).
PREFETCH_TOL = 0.10
#: persistent_workers is advised only when the first step of epoch 2 is this much (relative) shorter with them.
BOUNDARY_TOL = 0.05
#: What each kind of work is, in a reader's words: a sleep leaves the core free, real work keeps it busy, so the two
#: are different workloads whatever their cost per sample (the question each answers names which).
WORK = {"sleep": "CPU-free sleeping", "tokenize": "CPU-bound tokenising", "decode": "CPU-bound JPEG decoding"}


def calibrated_step(res: Result) -> float:
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
    return (f"synthetic {WORK.get(kind, 'per-sample')} work ({num(float(d), 'ms')} a sample, batches of {b}, a "
            f"{num(float(g), 'ms')} step)")


def analyse(res: Result) -> Facts:
    """Chapter 4's facts (see the module docstring)."""
    out = Facts(CHAPTER, exports=EXPORTS)
    g = calibrated_step(res)
    out.add(_ms("step_g", g, "the calibrated step G", better=None),
            _pct("au_threshold", AU_THRESHOLD, "the share of AU that counts as keeping up"),
            Fact("step_device", "gpu" if res.metadata.get("cuda") else "simulated", "", "what the step ran on",
                 "choice", None))
    _step(res, out)
    _published(res, out, g)
    _sweep(res, out, g)
    _drift(res, out, g)
    _prefetch(res, out, g)
    _boundary(res, out)
    _first_batch(res, out)
    _nvml_util(res, out, g)
    _model_gaps(res, out, g)
    _gap_causes(res, out)
    _model_shortfall(res, out, g)
    _advice(res, out, g)
    _notes(res, out, g)
    return out


def _step(res: Result, out: Facts) -> None:
    """How the step was made and timed, and what NVML sampled (the setup the page states before the results)."""
    m = res.metadata
    nv = m.get("nvml") or {}
    out.add(Fact("step_kind", m.get("step_kind"), "", "what the training step is", "choice", None),
            Fact("step_units", m.get("step_units"), "", "matrix products in one step", "count", None),
            _ms("step_g_target", m.get("step_g_target_ms", res.parameters["g_ms"]), "the step asked for",
                better=None),
            _ms("step_first_rested", m.get("step_first_ms"), "the first calibrated step after a rested GPU",
                better=None),
            Fact("nvml", "available" if nv.get("available") else "not available", "", "whether NVML sampled the GPU",
                 "choice", None),
            Fact("nvml_why", nv.get("why"), "", "why NVML did not sample the GPU", "choice", None),
            Fact("nvml_gpu", nv.get("name"), "", "the GPU NVML sampled", "choice", None),
            _ms("nvml_interval", nv.get("interval_ms"), "NVML's sampling interval", better=None),
            Fact("power_limit", nv.get("power_limit_w"), "W", "the board's power limit", "amount", None),
            Fact("max_sm_clock", nv.get("max_sm_clock_mhz"), "MHz", "the board's highest SM clock", "amount", None))


def _plain(v) -> float | None:
    """A table value as a plain float for :attr:`Facts.data` (None where it is missing)."""
    return None if v is None or pd.isna(v) else float(v)


def _published(res: Result, out: Facts, g: float) -> None:
    p = _summary(res, "published case").set_index("workers")
    km = {}
    for w, r in p.iterrows():
        w, s = int(w), {"workers": int(w)}
        out.add(_ms(f"case.w{w}.wait", r["wait_ms"], f"the data wait per step with W = {w}", setting=s),
                _ms(f"case.w{w}.model", r["predicted_wait_ms"], f"the model's wait with W = {w}", setting=s),
                _ms(f"case.w{w}.compute", r["compute_ms"], f"compute per step with W = {w}", better=None, setting=s),
                _pct(f"case.w{w}.idle", r["idle_share"], f"the accelerator's idle share with W = {w}", "lower",
                     setting=s),
                _pct(f"case.w{w}.au", _au(r, g), f"AU against G with W = {w}", setting=s))
        if float(r["idle_share"]) + _au(r, g) > 1.005:   # AU counts G a step, idle what the step computed
            out.add(Fact(f"case.w{w}.idle_plus_au", 100 * (float(r["idle_share"]) + _au(r, g)), "%",
                         f"the idle share and AU added, with W = {w} (a sum, not a share)", "amount", None,
                         setting=s))
        if w in (0, 4):
            km[f"data wait per step, W={w}"] = [_plain(r["wait_ms"]), _plain(r.get("wait_std_ms"))]
            km[f"compute per step, W={w}"] = [_plain(r["compute_ms"]), _plain(r.get("compute_std_ms"))]
            km[f"GPU idle share, W={w}"] = [100 * float(r["idle_share"]), None]
    out.data["key_metrics"] = km
    if 0 in p.index:
        r = p.loc[0]
        out.add(_ms("published_w0", r["wait_ms"], "the data wait per step with no workers (W = 0)",
                    published="data wait per step, W=0", setting={"workers": 0}),
                _ms("published_w0_model", float(r["d_ms"]) * int(r["batch_size"]),
                    "D·B in the model (the training process preparing every batch itself)"),
                _pct("published_w0_idle", r["idle_share"], "the accelerator's idle share with no workers", "lower",
                     published="GPU idle share, W=0"),
                _ms("published_d", r["d_ms"], "the cost of one sample in the published case", better=None,
                    setting={"work": str(r.get("work", "sleep")), "batch_size": int(r["batch_size"])}),
                _ms("published_w0_compute", r["compute_ms"], "compute per step with no workers"))
        out.add(compare("published_w0_vs_model", out["published_w0"], out["published_w0_model"]))
    ws = [int(w) for w in p.index if w > 0]
    if ws:
        w = 4 if 4 in ws else max(ws)
        r = p.loc[w]
        au = _au(r, g)
        d, b = float(r["d_ms"]), int(r["batch_size"])
        model = "keeps up" if predicted_au(d, b, w, g) >= AU_THRESHOLD else "falls short"
        out.add(_ms("published_w", r["wait_ms"], f"the data wait per step with {w} workers",
                    published=f"data wait per step, W={w}", setting={"workers": w}),
                Fact("published_w_model", model, "", f"whether the model predicts that {w} workers keep the step busy",
                     "choice", None, setting={"workers": w}),
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
    out.data["exercise"] = dict(work=str(kind), batch_size=b)   # the page's exercise on paper: D·B/G of this work


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
            measured("step_back_to_back", base, unit="ms", label="a step with no idle gap before it" if gaps[0] == 0
                     else f"a step after an idle gap of {gaps[0]:g} ms", quantity="time", better=None,
                     setting={"gap_ms": float(gaps[0])}),
            measured("step_after_gap", top, unit="ms", label=f"a step after an idle gap of {gaps[-1]:g} ms",
                     quantity="time", better=None, setting={"gap_ms": float(gaps[-1])}))
    out.add(compare("step_drift", out["step_after_gap"], out["step_back_to_back"]))
    p = power_against_limit(idle, (res.metadata.get("nvml") or {}).get("power_limit_w"))
    if p is not None:
        out.add(Fact("power_peak", p["peak"], "W", "the most power a step of the idle-gap experiment drew", "amount",
                     None, setting={"gap_ms": p["gap_ms"]}),
                Fact("power_vs_limit", p["state"], "", f"the steps' power against the board's {p['limit']:.0f} W limit",
                     "choice", None, setting={"limit_w": p["limit"]}))
    _clocks(res, out, idle, gaps)
    _trace(out, drift.reset_index(drop=True), g)
    _gaps(out, idle, gaps)


#: A step of the drift trace has reached `G` when it is within this (relative) of it.
DRIFT_NEAR = 0.03
#: The board runs at its power limit where its mean back-to-back power is at least this share of the limit.
AT_LIMIT = 0.95
#: NVML's power-cap flag tells the states apart only where it is set in more than FLAG_MOST of the back-to-back
#: samples and in FLAG_APART (share) fewer after the gap; set after every gap within FLAG_APART of each other,
#: above FLAG_MOST, it is set everywhere and tells nothing.
FLAG_MOST, FLAG_APART = 0.5, 0.25


def direction(c: Fact) -> int:
    """A comparison's direction: +1 where the compared side is larger, -1 smaller, 0 where the runs' spreads
    overlap (``level``) or one side is missing."""
    r = c.number
    return 0 if c.level or r is None or r == 1 else 1 if r > 1 else -1


def _cap_column(idle: pd.DataFrame) -> str | None:
    """The column of NVML's power-cap flag: the share of samples a step had it set, else a flag per step."""
    cap = "power_capped_share" if "power_capped_share" in idle else "power_capped" if "power_capped" in idle else None
    return cap if cap and idle[cap].notna().any() else None


def _clocks(res: Result, out: Facts, idle: pd.DataFrame, gaps: list) -> None:
    """The clocks and power behind the step's drift: back-to-back against after the longest idle gap, and
    whether they line up with the step times (the clock higher where the step was shorter)."""
    if "sm_clock_mhz" not in idle or not idle["sm_clock_mhz"].notna().any():
        return
    base, top = idle[idle["gap_ms"] == gaps[0]], idle[idle["gap_ms"] == gaps[-1]]
    s0, s1 = {"gap_ms": float(gaps[0])}, {"gap_ms": float(gaps[-1])}
    after = f"after an idle gap of {gaps[-1]:g} ms"

    def amount(key, rows, col, unit, label, s):
        return measured(key, rows[col].dropna(), unit=unit, label=label, quantity="amount", better=None, setting=s)

    out.add(amount("clock_back_to_back", base, "sm_clock_mhz", "MHz", "the SM clock back-to-back", s0),
            amount("clock_after_gap", top, "sm_clock_mhz", "MHz", f"the SM clock {after}", s1),
            amount("power_back_to_back", base, "power_w", "W", "the board's power back-to-back", s0),
            amount("power_after_gap", top, "power_w", "W", f"the board's power {after}", s1))
    out.add(compare("clock_drift", out["clock_after_gap"], out["clock_back_to_back"]))
    step, clock = direction(out["step_drift"]), direction(out["clock_drift"])
    out.add(Fact("clocks_explain", "higher clocks" if step < 0 and clock > 0 else
                 "level" if step == 0 and clock == 0 else "no", "",
                 "whether the clocks line up with the step times", "choice", None,
                 setting={"step": step, "clock": clock}))
    limit = (res.metadata.get("nvml") or {}).get("power_limit_w")
    power = out.number("power_back_to_back")
    out.add(Fact("power_at_limit", "yes" if limit and power is not None and power >= AT_LIMIT * limit else "no", "",
                 f"whether the board drew at least {AT_LIMIT:.0%} of its power limit back-to-back", "choice", None))
    cap = _cap_column(idle)
    if cap is None:
        return
    counted = "samples" if cap.endswith("share") else "steps"
    b, t = float(base[cap].astype(float).mean()), float(top[cap].astype(float).mean())
    out.add(_pct("capped_back_to_back", b, f"the back-to-back {counted} with NVML's power-cap flag set", None,
                 setting={**s0, "counted": counted}),
            _pct("capped_after_gap", t, f"the {counted} {after} with NVML's power-cap flag set", None,
                 setting={**s1, "counted": counted}),
            Fact("cap_flag_tells", "mostly unset" if b <= FLAG_MOST else "tells" if b - t > FLAG_APART else "set alike",
                 "", "whether NVML's power-cap flag tells back-to-back steps from rested ones", "choice", None))


def _trace(out: Facts, drift: pd.DataFrame, g: float) -> None:
    """The drift trace in detail: the first step after a rest, the first step within DRIFT_NEAR of `G`, the
    clock of its second half."""
    clocks = "sm_clock_mhz" in drift and drift["sm_clock_mhz"].notna().any()
    first = drift.iloc[0]
    if clocks:
        out.add(Fact("drift_first_clock", float(first["sm_clock_mhz"]), "MHz", "the SM clock of the first step after "
                     "a rest", "amount", None),
                Fact("drift_first_power", float(first["power_w"]), "W", "the board's power in the first step after "
                     "a rest", "amount", None))
    reached = drift.index[(drift["step_ms"] - g).abs() <= DRIFT_NEAR * g]
    k = int(reached[0]) if len(reached) else None
    out.add(Fact("drift_reach", None if k is None else k + 1, "", f"the first step of the trace within "
                 f"{DRIFT_NEAR:.0%} of G", "count", "lower", setting={"near": DRIFT_NEAR}))
    if k is not None:
        out.add(_ms("drift_reach_step", drift["step_ms"].iloc[k], "that step", better=None),
                _ms("drift_reach_at", 1e3 * (drift["t_start_s"].iloc[k] - first["t_start_s"]),
                    "how far into the trace it came", better=None))
    if clocks:
        tail = drift.iloc[len(drift) // 2:]
        out.add(Fact("drift_tail_clock", float(tail["sm_clock_mhz"].mean()), "MHz",
                     "the mean SM clock of the trace's second half", "amount", None))


def _gaps(out: Facts, idle: pd.DataFrame, gaps: list) -> None:
    """The step after every idle gap (its clock and power where NVML sampled them), how it moved from gap to
    gap, and the power-cap flag's share after every gap."""
    clocks = "sm_clock_mhz" in idle and idle["sm_clock_mhz"].notna().any()
    for gap in gaps:
        rows, s = idle[idle["gap_ms"] == gap], {"gap_ms": float(gap)}
        out.add(measured(f"idle_step.g{gap:g}", rows["step_ms"], unit="ms", quantity="time", better=None,
                         label=f"a step after an idle gap of {gap:g} ms", setting=s))
        if clocks and rows["sm_clock_mhz"].notna().any():
            out.add(Fact(f"idle_clock.g{gap:g}", float(rows["sm_clock_mhz"].mean()), "MHz", "the SM clock there",
                         "amount", None, setting=s),
                    Fact(f"idle_power.g{gap:g}", float(rows["power_w"].mean()), "W", "the board's power there",
                         "amount", None, setting=s))
    if len(gaps) > 2:
        ways = [direction(compare("_", out[f"idle_step.g{b:g}"], out[f"idle_step.g{a:g}"]))
                for a, b in zip(gaps, gaps[1:], strict=False)]
        out.add(Fact("idle_trend", "shorter" if all(w <= 0 for w in ways) and any(w < 0 for w in ways) else
                     "longer" if all(w >= 0 for w in ways) and any(w > 0 for w in ways) else "unsteady", "",
                     "how the step moved with every longer idle gap", "choice", None))
    cap = _cap_column(idle)
    if cap is not None:
        shares = idle.groupby("gap_ms")[cap].apply(lambda v: float(v.astype(float).mean()))
        lo, hi = float(shares.min()), float(shares.max())
        out.add(Fact("cap_flag_share", 100 * lo, "%", "the samples with NVML's power-cap flag set, after every gap",
                     "share", None, spread=(100 * lo, 100 * hi)),
                Fact("cap_flag_everywhere", "yes" if hi - lo <= FLAG_APART and lo > FLAG_MOST else "no", "",
                     "whether NVML's power-cap flag was set after every gap alike", "choice", None))


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
    _prefetch_runs(out, pf)
    if pf["prefetch_factor"].nunique() < 2:
        return
    w, d = int(pf["workers"].iloc[0]), float(pf["d_ms"].iloc[0])
    b = int(pf["batch_size"].iloc[0]) if "batch_size" in pf else int(res.parameters["batch_size"])
    out.add(_pct("prefetch_load", d * b / w / g, "the balanced case's D·B/W against G", None,
                 setting={"workers": w}),
            _ms("prefetch_d", d, "D of the balanced case", better=None, setting={"workers": w}),
            _ms("prefetch_per_batch", d * b / w, "D·B/W of the balanced case", better=None, setting={"workers": w}))
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


def _prefetch_runs(out: Facts, pf: pd.DataFrame) -> None:
    """Every prefetch_factor's wait over the runs, per cost profile, and the ones whose runs spread widely
    (coefficient of variation above :data:`~datajourney.core.phrasing.HIGH_SPREAD`), widest first."""
    wide = []
    for cost in dict.fromkeys(pf["cost"]):
        for k, v in pf[pf["cost"] == cost].groupby("prefetch_factor")["wait_ms"]:
            f = measured(f"prefetch.{cost}.pf{int(k)}", v.tolist(), unit="ms", quantity="time", better="lower",
                         label=f"a prefetch factor of {int(k)}", setting={"cost": str(cost), "prefetch_factor": int(k)})
            out.add(f)
            c = cv(v.tolist())
            if c > HIGH_SPREAD:
                wide.append(Fact(f"prefetch_cv.{cost}.pf{int(k)}", 100 * c, "%", "the coefficient of variation of "
                                 f"{f.label}'s runs", "amount", "lower", setting=f.setting))
    out.add(*sorted(wide, key=lambda f: -f.number))


#: A first batch this much (relative) shorter than the one with fewer workers counts as a dip.
FIRST_BATCH_DIP = 0.05


def _first_batch(res: Result, out: Facts) -> None:
    """Time to the first batch with workers (one measurement per configuration): from the fewest workers to
    the most, each dip on the way, and the spread of fresh loaders of one configuration (the epoch-boundary
    runs) that a dip must exceed to be more than start-up noise."""
    if "epoch_boundary" in res.tables:
        eb = res.table("epoch_boundary")
        f0 = eb[(eb["epoch"] == 0) & (eb["step_in_epoch"] == 0)]["wait_ms"]
        if len(f0) > 1:
            out.add(measured("first_batch_fresh", f0, unit="ms", quantity="time", better="lower",
                             label="the first batch of fresh loaders of one configuration",
                             setting={"workers": int(res.parameters["boundary_workers"]), "work": "sleep"}))
    fresh = out.get("first_batch_fresh")
    noise = fresh.spread[1] - fresh.spread[0] if fresh is not None and fresh.spread else None
    if noise is not None:
        out.add(_ms("first_batch_noise", noise, "the spread of those first batches", better=None))
    sw = _summary(res, "worker sweep")
    for kind in dict.fromkeys(sw["work"]):
        part = sw[(sw["work"] == kind) & (sw["workers"] > 0)].sort_values("workers")
        if len(part) < 2:
            continue
        s = {"work": str(kind)}
        fs = [_ms(f"first_batch.{kind}.w{int(w)}", v, f"the first batch at W = {int(w)}",
                  setting={**s, "workers": int(w)}) for w, v in zip(part["workers"], part["first_batch_ms"],
                                                                   strict=True)]
        out.add(*fs)
        trend = compare(f"first_batch_trend.{kind}", fs[-1], fs[0])
        out.add(trend)
        if direction(trend) < 0:
            continue   # falling overall: a dip on the way is the trend, not an exception to it
        for a, b in zip(fs, fs[1:], strict=False):
            if b.number < (1 - FIRST_BATCH_DIP) * a.number:
                drop = a.number - b.number
                out.add(_ms(f"first_batch_dip.{kind}.w{b.setting['workers']}", drop, "how much shorter the first "
                            "batch was than with fewer workers", better=None,
                            setting={**b.setting, "from": a.key, "to": b.key,
                                     "beyond_noise": None if noise is None else drop > noise}))


def _nvml_util(res: Result, out: Facts, g: float) -> None:
    """NVML's utilisation (the share of time a kernel ran) against AU over the sweep: the mean difference, and
    the configuration where they differ most."""
    sw = _summary(res, "worker sweep")
    if "gpu_util_pct" not in sw or sw["gpu_util_pct"].isna().all():
        return
    rows = sw.dropna(subset=["gpu_util_pct"])
    au = rows.apply(lambda r: _au(r, g), axis=1)
    diff = rows["gpu_util_pct"] - 100 * au
    i = diff.abs().idxmax()
    s = {"work": str(rows.loc[i, "work"]), "workers": int(rows.loc[i, "workers"])}
    out.add(Fact("nvml_util_vs_au", float(diff.abs().mean()), "points",
                 "the mean difference of NVML's utilisation and AU over the sweep", "amount", "lower"),
            _pct("nvml_util_worst", rows.loc[i, "gpu_util_pct"] / 100, "NVML's utilisation there", None, setting=s),
            _pct("nvml_util_worst_au", au.loc[i], "AU there", None, setting=s))


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
            Fact("au_vs_share.points", round(abs(au.number - cs.number), 1), "points",
                 "how far AU stood from the measured compute share", "amount", "lower", setting=s),
            _ms("au_vs_share.compute", r["compute_ms"], "compute per step there", better=None, setting=s))
    quick = sw["wait_ms"] < QUICK_WAIT_MS
    if quick.any() and not quick.all():
        out.add(Fact("au_vs_share.quick_points", round(100 * float(diff[quick].abs().max()), 1), "points",
                     "the largest difference of AU and the compute share where the steps ran back-to-back",
                     "amount", "lower"))


#: The measured wait leaves the model's line where it differs by more than MODEL_GAP_REL (relative) and
#: MODEL_GAP_FLOOR_MS; a step's compute is noted beside it where it is more than COMPUTE_OFF (relative) from G.
MODEL_GAP_REL, MODEL_GAP_FLOOR_MS, COMPUTE_OFF = 0.2, 2.0, 0.05
#: A per-sample cost this much (relative) above D counts as slower than D.
COST_TOL = 0.10


def _leaves(m: float, p: float) -> bool:
    """Whether a measured wait ``m`` leaves the model's ``p`` (:data:`MODEL_GAP_REL`, :data:`MODEL_GAP_FLOOR_MS`)."""
    return abs(m - p) > max(MODEL_GAP_FLOOR_MS, MODEL_GAP_REL * max(m, p))


def _model_gaps(res: Result, out: Facts, g: float) -> None:
    """Where the sweep's measured wait leaves the model's line: the wait against the model's, as a factor where
    it is twice the model's or more, else as a relative difference, and the step's compute where it was off G."""
    sw = _summary(res, "worker sweep")
    kinds = [str(k) for k in dict.fromkeys(sw["work"])]
    for k in kinds:
        for _, r in sw[sw["work"] == k].sort_values("workers").iterrows():
            m, p, w = float(r["wait_ms"]), float(r["predicted_wait_ms"]), int(r["workers"])
            if not _leaves(m, p):
                continue
            s = {"work": k, "workers": w}
            a = _ms(f"model_gap.{k}.w{w}.wait", m, f"the wait at W = {w}", setting=s)
            b = _ms(f"model_gap.{k}.w{w}.model", p, f"the model's wait at W = {w}", setting=s)
            c = compare(f"model_gap.{k}.w{w}", a, b)
            off = abs(float(r["compute_ms"]) / g - 1) > COMPUTE_OFF
            out.add(a, b, dataclasses.replace(c, setting={**s, "side": "above" if m > p else "below",
                                                         "factor": m >= 2 * p, "compute_off": off}))
            if off:
                out.add(_ms(f"model_gap.{k}.w{w}.compute", r["compute_ms"], "compute that step", better=None,
                            setting=s))
    out.data["sweep_work"] = kinds


def _gap_causes(res: Result, out: Facts) -> None:
    """For real work whose wait sits above the model where the model predicts one: the per-sample cost those
    waits imply, and which explanation the data support. The deciding measurement: each item's work timed where
    it ran, inside the loop (main process at W = 0, a worker at W ≥ 1), wall and CPU, and D timed again back to
    back after the sweep. If the loop's cost exceeds D while D after the sweep does not, the work itself ran
    slower inside the loop (then: with the loop's own cost, does the model hold?); if the loop's cost is D, the
    excess lies outside the work. The verdict is ``gap_cause.<work>``; its setting lists the worker counts."""
    sw = _summary(res, "worker sweep")
    for k in [str(k) for k in dict.fromkeys(sw["work"]) if k != "sleep"]:
        part = sw[sw["work"] == k].sort_values("workers").set_index("workers")
        above = [int(w) for w, r in part.iterrows() if r["predicted_wait_ms"] > 0
                 and r["wait_ms"] - r["predicted_wait_ms"] > max(MODEL_GAP_FLOOR_MS, MODEL_GAP_REL * r["wait_ms"])]
        if not above:
            continue
        d, b = float(part["d_ms"].iloc[0]), int(part["batch_size"].iloc[0])
        s = {"work": k}
        for w in above:
            r = part.loc[w]
            out.add(_ms(f"implied_d.{k}.w{w}", r["wait_ms"] / b if w == 0 else (r["wait_ms"] + r["compute_ms"]) * w / b,
                        f"the per-sample cost the wait at W = {w} implies", setting={**s, "workers": w}))
        if 0 in part.index and 1 in part.index:
            out.add(*(_ms(f"gap_first.{k}.w{w}", part.loc[w, "first_batch_ms"], f"the first batch at W = {w}",
                          setting={**s, "workers": w}) for w in (0, 1)))
        verdict = dict(above=above)
        if "work_wall_ms" not in part or part["work_wall_ms"].isna().all():
            where = "the reference run" if str(res.run_id).startswith("reference") else "this run"
            out.add(Fact(f"gap_cause.{k}", "not timed", "", "what the data support", "choice", None,
                         setting={**s, **verdict, "where": where}))
            continue
        loop = {int(w): float(r["work_wall_ms"]) for w, r in part.iterrows() if pd.notna(r.get("work_wall_ms"))}
        cpu = {int(w): float(r["work_cpu_ms"]) for w, r in part.iterrows() if pd.notna(r.get("work_cpu_ms"))}
        ws = [w for w in above if w in loop]
        for w in sorted(set(ws) | ({0} & set(loop))):
            out.add(_ms(f"loop_wall.{k}.w{w}", loop[w], f"one item's work inside the loop at W = {w}",
                        setting={**s, "workers": w}))
            if w in cpu:
                out.add(_ms(f"loop_cpu.{k}.w{w}", cpu[w], f"its CPU time at W = {w}", setting={**s, "workers": w}))
        after = part["d_after_ms"].dropna() if "d_after_ms" in part else pd.Series(dtype=float)
        if not after.empty:
            out.add(_ms(f"d_after.{k}", after.iloc[0], "D timed back to back after the sweep", setting=s))
        slow = [w for w in ws if loop[w] > (1 + COST_TOL) * d]
        g = {int(w): float(r["g_cal_ms"]) if pd.notna(r.get("g_cal_ms")) else float(r["g_ms"])
             for w, r in part.iterrows()}
        fits = [w for w in slow if abs(float(part.loc[w, "wait_ms"]) - predicted_wait_ms(loop[w], b, w, g[w]))
                <= max(MODEL_GAP_FLOOR_MS, MODEL_GAP_REL * float(part.loc[w, "wait_ms"]))]
        wk = [w for w in slow if w > 0]
        value = ("timed elsewhere" if not ws else
                 "slower machine" if not after.empty and after.iloc[0] > (1 + COST_TOL) * d else
                 "outside the work" if not slow else "slower work")
        verdict.update(timed=ws, slow=slow, fits=fits,
                       waiting=any(w in cpu and loop[w] > (1 + COST_TOL) * cpu[w] for w in slow),
                       workers_pay_more=bool(wk) and 0 in loop and all(loop[w] > (1 + COST_TOL) * loop[0] for w in wk))
        out.add(Fact(f"gap_cause.{k}", value, "", "what the data support", "choice", None, setting={**s, **verdict}))


def _model_shortfall(res: Result, out: Facts, g: float) -> None:
    """Where the sweep does not keep up at the first worker count the model's ``W`` allows: the model assumes each
    worker delivers a sample every ``D``; the sweep's workers delivered one every ``W × step ÷ B`` each
    (``worker_pace.<work>``), and ``model_shortfall.<work>`` is that against ``D``, the factor by which the
    assumption fails. ``shortfall_cause.<work>`` says where the data place it: the item's own work, timed inside a
    worker there ("slower work" above ``D`` by more than COST_TOL, else "outside the work"), or "not timed"."""
    sw = _summary(res, "worker sweep")
    for k in [str(k) for k in dict.fromkeys(sw["work"])] if not sw.empty else []:
        part = sw[(sw["work"] == k) & (sw["workers"] >= out.number(f"model_workers.{k}"))].sort_values("workers")
        if part.empty or _au(part.iloc[0], g) >= AU_THRESHOLD:
            continue
        r, s = part.iloc[0], {"work": k, "workers": int(part["workers"].iloc[0])}
        w, b, d = s["workers"], int(r["batch_size"]), out[f"d.{k}"]
        pace = _ms(f"worker_pace.{k}", w * float(r["step_ms"]) / b, f"each worker's time per sample at W = {w}",
                   setting={**s, "step_ms": float(r["step_ms"]), "batch_size": b})
        out.add(pace, compare(f"model_shortfall.{k}", pace, d))
        timed = pd.notna(r.get("work_wall_ms"))
        if timed:
            out.add(_ms(f"worker_work.{k}", r["work_wall_ms"], f"one item's work inside a worker at W = {w}",
                        setting=s), _ms(f"worker_cpu.{k}", r["work_cpu_ms"], "its CPU time", setting=s))
        cause = ("not timed" if not timed else
                 "slower work" if float(r["work_wall_ms"]) > (1 + COST_TOL) * d.number else "outside the work")
        out.add(Fact(f"shortfall_cause.{k}", cause, "", "where the data place the shortfall", "choice", None,
                     setting=s))


def _advice(res: Result, out: Facts, g: float) -> None:
    need = out.get("workers_to_keep_up")
    if need is None:
        return
    kind = need.setting["work"]
    sw = _summary(res, "worker sweep")
    b = int(sw["batch_size"].iloc[0])
    wl = workload(kind, out.number(f"d.{kind}"), b, g)
    persistent = _persistent_answer(res, out, b, g)
    deeper = _prefetch_answer(res, out, wl, b, g)
    persistent = persistent is not None and persistent.verdict == "change"
    deeper = deeper.value if deeper is not None and deeper.verdict == "change" else None
    _workers_answer(out, kind, sorted(int(w) for w in sw[sw["work"] == kind]["workers"]), b, wl, persistent, deeper)


def _workers_answer(out: Facts, kind: str, ws: list[int], b: int, wl: str, persistent: bool, deeper) -> None:
    """num_workers against DataLoader's default (0), on the sweep's step time for its real work (a reader's step
    rate): the fewest workers within the minimum effect of the fastest measured; "more may help" only where the
    last step of the sweep still gained by more than that (:func:`~datajourney.core.answers.more_may_help`)."""

    def snippet(w: int) -> str:
        args = [f"batch_size={b}", f"num_workers={w}"]
        args += ["persistent_workers=True"] * (w > 0 and persistent)
        args += [f"prefetch_factor={deeper}"] * (w > 0 and deeper is not None)
        return "loader = DataLoader(dataset, " + ", ".join(args) + ")"

    q = Question("synthetic.num_workers", "How many DataLoader workers does this work need?", "num_workers", 0,
                 "num_workers=0", "PyTorch's DataLoader default", wl, swept=True)
    out.advise(decide(q, [Candidate(w, out.get(f"step.{kind}.w{w}"), snippet=snippet(w)) for w in ws], out))


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


def _prefetch_answer(res: Result, out: Facts, wl: str, b: int, g: float):
    """prefetch_factor against DataLoader's default (2), on the balanced case's mean wait per step (the variable
    cost profile where it ran), for the work that experiment ran (sleep sized so that D·B/W is just under G, at
    its own workers); no answer where the run did not measure the default."""
    if "prefetch" not in res.tables:
        return None
    pf = res.table("prefetch")
    cost = "variable" if "variable" in set(pf["cost"]) else str(pf["cost"].iloc[0])
    mine = pf[pf["cost"] == cost]
    first = mine.iloc[0]
    if "d_ms" in first:   # the work that experiment ran, where the result recorded it
        wl = workload("sleep", float(first["d_ms"]), int(first.get("batch_size", b)), g) + (
            f", {int(first['workers'])} workers" if "workers" in first else "")
    ks = sorted(int(k) for k in set(mine["prefetch_factor"]))
    cands = [Candidate(k, out[f"prefetch.{cost}.pf{k}"]) for k in ks]   # the runs' facts (_prefetch_runs)
    q = Question("synthetic.prefetch_factor", "How many batches should each worker prefetch?", "prefetch_factor",
                 DEFAULT_PREFETCH, f"prefetch_factor={DEFAULT_PREFETCH}", "PyTorch's DataLoader default", wl,
                 swept=True)
    a = decide(q, cands, out)
    out.advise(a)
    return a
