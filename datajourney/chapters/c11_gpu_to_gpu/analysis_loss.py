"""Where each GPU's loss goes on the direct path, as facts: the per-GPU efficiency gap of one DDP rung taken apart at
each GPU count, the NCCL channel counts tried, and whether the best measured setting reaches the chapter's target.

The gap of the explained rung R on k GPUs is ``1 - t1 / tS`` (t1: one GPU's step without DDP; tS: R's step on k GPUs,
the slowest rank counting). It splits exactly into step-time differences, each divided by tS (points of one GPU's
steps/s per GPU):

* ``bookkeeping``: DDP's own work on one GPU, ``tD1 - t1`` (R on one GPU against the plain model);
* ``apart``: k ranks running the same step with gradient sync skipped (``DDP.no_sync``) against that no-sync step on
  one GPU, ``tNS - tNS1``: every rank waits for the slowest and the ranks share one host (results from before the
  one-GPU no-sync step was measured: against DDP on one GPU, ``tNS - tD1``, which also holds the sync work one GPU
  does and no-sync skips);
* the sync cost on k ranks beyond one GPU's, ``(tS - tNS) - (tD1 - tNS1)`` (the same ranks, the same work, with and
  without the all-reduce, less the same difference on one GPU; older results: ``tS - tNS``), split into
  ``slowed``, NCCL kernels slower than alone: the exposed NCCL time (NCCL kernels beside no compute kernel, profiled)
  times ``1 - isolated / in training`` (the same all-reduces, bucket by bucket, profiled alone), at most the sync
  cost; and ``exposed``, the rest of the sync cost. Without CUDA (or without a profile) ``slowed`` is not measured and
  the sync cost is all ``exposed``.

Facts: ``loss_gap_<k>``, ``loss_<share>_<k>``, ``loss_largest_<k>`` (its setting names the share), ``nccl_slowdown_<k>``
(NCCL kernel time in training ÷ alone); ``channels_unset`` and ``channels_<c>`` (R on N GPUs per channel setting) and
the question ``ddp.nccl_channels``; ``target_best`` (the best measured setting's share of one GPU, against
:data:`TARGET`). ``facts.data``: ``loss`` (the decomposition's rows, or why it was not measured), ``channels`` (the
settings, or why skipped), ``target``.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from datajourney.chapters.c11_gpu_to_gpu.reading import CHANNEL_ENV, CHANNEL_JOB, EXPLAIN, rung_label
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Fact, Facts, measured

#: The chapter's declared target: each GPU keeps this share (%) of one GPU's steps/s without DDP.
TARGET = 95.0
#: The shares of the gap, in the order the page lists them.
SHARES = ("bookkeeping", "apart", "exposed", "slowed")


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None and not pd.isna(x)]
    return sum(xs) / len(xs) if xs else None


def _spread(xs) -> float:
    """Points of spread of a list of windows' rates: (max - min) / mean, in %."""
    return 100 * (max(xs) - min(xs)) / (sum(xs) / len(xs)) if xs else 0.0


def _num(v) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


class _Explain:
    """The decomposition's rows of a result: the explained rung's windows (from the ladder's tables or the
    decomposition's own), its no-sync windows, its isolated all-reduces and its profile."""

    def __init__(self, res, run):
        self.res, self.run = res, run
        # a result from before the decomposition has neither the parameter nor its tables
        self.rung = str(res.parameters["explain_rung"]) if "explain_rung" in res.parameters else ""
        self.t = res.table(EXPLAIN) if EXPLAIN in res.tables else pd.DataFrame()
        self.w = res.table(f"{EXPLAIN}_windows") if f"{EXPLAIN}_windows" in res.tables else pd.DataFrame()
        self.iso = res.table(f"{EXPLAIN}_iso") if f"{EXPLAIN}_iso" in res.tables else pd.DataFrame()

    def windows(self, job: str, *, sync: bool = True) -> list[float]:
        """R's steps/s windows in ``job``: the ladder's where it ran there, else the decomposition's."""
        if sync:
            w = self.run.windows
            if len(w):
                x = w[(w["job"] == job) & (w["rung"] == self.rung)]["steps_per_s"]
                if len(x):
                    return [float(v) for v in x]
        if self.w.empty:
            return []
        x = self.w[(self.w["job"] == job) & (self.w["rung"] == self.rung) & (self.w["sync"] == sync)]
        return [float(v) for v in x["steps_per_s"]]

    def profile(self, job: str) -> dict:
        """The synced rung's profile per step (ms) in ``job``: NCCL kernel time and its part beside no compute."""
        for t in (self.run.rungs, self.t):
            if t.empty or "prof_nccl_ms" not in t:
                continue
            r = t[(t["job"] == job) & (t["rung"] == self.rung) & (t["status"] == "ok")]
            if "sync" in r:
                r = r[r["sync"].fillna(True).astype(bool)]
            if len(r) and _num(r["prof_nccl_ms"].iloc[0]) is not None:
                x = r.iloc[0]
                return {"nccl_ms": _num(x["prof_nccl_ms"]), "exposed_ms": _num(x["prof_exposed_nccl_ms"])}
        return {}

    def isolated(self, job: str) -> dict:
        if self.iso.empty:
            return {}
        r = self.iso[(self.iso["job"] == job) & (self.iso["status"] == "ok")]
        if r.empty:
            return {}
        return {"step_ms": _mean(r["step_ms"]), "nccl_ms": _mean(r["prof_nccl_ms"]),
                "buckets": int(r["buckets"].iloc[0]), "bucket_sizes": json.loads(r["bucket_sizes"].iloc[0])}

    def jobs(self) -> list[tuple[int, str]]:
        """(k, job) of every count on the direct path with the rung run without sync."""
        if self.t.empty:
            return []
        r = self.t[(~self.t["sync"].astype(bool)) & (self.t["status"] == "ok") & (self.t["path"] == self.run.path0)
                   & (self.t["job"] != "one")]
        return sorted({(int(k), str(j)) for k, j in zip(r["world"], r["job"])})


def decompose(t1: float, td1: float, tns: float, ts: float, slowed_ms: float | None,
              tns1: float | None = None) -> dict:
    """The gap ``1 - t1/ts`` and its shares (points of one device's steps/s), from step times (ms); the shares sum to
    the gap exactly. ``slowed_ms``: the NCCL slowdown on the step's critical path (None: not measured), at most the
    sync cost; ``tns1``: the no-sync step on one GPU (None: not measured, so ranks apart is set against DDP on one)."""
    base = td1 if tns1 is None else tns1
    sync = (ts - tns) - (td1 - base)
    slowed = None if slowed_ms is None else min(max(slowed_ms, 0.0), max(sync, 0.0))
    pts = lambda ms: 100 * ms / ts  # noqa: E731
    shares = {"bookkeeping": pts(td1 - t1), "apart": pts(tns - base), "exposed": pts(sync - (slowed or 0.0)),
              "slowed": None if slowed is None else pts(slowed)}
    return {"gap": pts(ts - t1), "shares": shares,
            "largest": max((k for k in SHARES if shares[k] is not None), key=lambda k: shares[k])}


def slowed_on_path(exposed_ms: float | None, train_ms: float | None, iso_ms: float | None) -> float | None:
    """The part of the step's exposed NCCL time due to NCCL kernels running slower than alone: the exposed time
    times ``1 - alone / in training`` (None where a term was not measured)."""
    if exposed_ms is None or not train_ms or iso_ms is None:
        return None
    return exposed_ms * (1 - iso_ms / train_ms)


def _not_measured(run) -> str:
    if not run.cuda:
        return "no_cuda"
    return "no_profile"


def loss(facts: Facts, res, run, words) -> None:
    """``loss_*`` facts and ``facts.data['loss']``: the explained rung's gap at every count, taken apart."""
    ex = _Explain(res, run)
    one = run.w(1, run.path0, "no_ddp")
    td1 = _mean(ex.windows("one"))
    counts = ex.jobs()
    if not counts or not one or td1 is None:
        facts.data["loss"] = {"status": "not_measured"}
        return
    dev = "GPU" if run.cuda else "process"
    t1 = 1e3 / _mean(one)
    ns1 = _mean(ex.windows("one", sync=False))
    tns1 = None if ns1 is None else 1e3 / ns1
    rows = []
    for k, job in counts:
        ws, wns = ex.windows(job), ex.windows(job, sync=False)
        if not ws or not wns:
            continue
        ts, tns = 1e3 / _mean(ws), 1e3 / _mean(wns)
        prof, iso = ex.profile(job), ex.isolated(job)
        slowed = slowed_on_path(prof.get("exposed_ms"), prof.get("nccl_ms"), iso.get("nccl_ms")) if run.cuda else None
        d = decompose(t1, 1e3 / td1, tns, ts, slowed, tns1)
        on = words(k)
        n = min(len(ws), len(wns), len(one))
        facts.add(Fact(f"loss_gap_{k}", d["gap"], "%", f"points of one {dev}'s steps/s lost per {dev} with "
                       f"{rung_label(ex.rung)} {on}", "share", "lower", n, None, {"gpus": k, "rung": ex.rung}))
        for s in SHARES:
            if d["shares"][s] is not None:
                facts.add(Fact(f"loss_{s}_{k}", d["shares"][s], "%", f"points of that loss {on}: {s}", "share", "lower",
                               n, None, {"gpus": k, "rung": ex.rung, "share": s}))
        top = d["largest"]
        facts.add(Fact(f"loss_largest_{k}", d["shares"][top], "%", f"the largest share of that loss {on}", "share",
                       "lower", n, None, {"gpus": k, "rung": ex.rung, "share": top}))
        if run.cuda and prof.get("nccl_ms") and iso.get("nccl_ms"):
            facts.add(Fact(f"nccl_slowdown_{k}", prof["nccl_ms"] / iso["nccl_ms"], "×",
                           f"NCCL kernel time per step in training ÷ the same all-reduces alone {on}", "amount", None,
                           setting={"gpus": k, "rung": ex.rung}))
        rows.append(dict(processes=k, job=job, t_plain_ms=t1, t_ddp_one_ms=1e3 / td1, t_no_sync_one_ms=tns1,
                         t_no_sync_ms=tns, t_sync_ms=ts,
                         nccl_train_ms=prof.get("nccl_ms"), nccl_exposed_ms=prof.get("exposed_ms"),
                         nccl_alone_ms=iso.get("nccl_ms"), alone_step_ms=iso.get("step_ms"),
                         buckets=iso.get("buckets"), slowed_ms=slowed, gap=d["gap"], largest=top,
                         noise=max(_spread(ws), _spread(wns), _spread(ex.windows("one")),
                                   _spread(ex.windows("one", sync=False))), **d["shares"]))
    facts.data["loss"] = {"status": "ok" if rows else "not_measured", "rung": ex.rung, "rows": rows,
                          "apart_from": "ddp_one" if tns1 is None else "no_sync_one",
                          "slowed": None if all(r["slowed"] is not None for r in rows) else _not_measured(run)}


def channels(facts: Facts, res, run, workload: str, words) -> None:
    """The explained rung on N GPUs with each NCCL channel count (its own launch) against NCCL's own choice, and the
    question ``ddp.nccl_channels``."""
    asked = list(res.parameters["nccl_channels"]) if "nccl_channels" in res.parameters else []
    if not run.cuda:
        facts.data["channels"] = {"status": "skipped", "reason": "no_nccl", "asked": asked}
        return
    ex = _Explain(res, run)
    base = ex.windows("n")
    done = sorted({int(str(j)[len(CHANNEL_JOB):]) for j in ex.t["job"] if str(j).startswith(CHANNEL_JOB)
                   and str(j)[len(CHANNEL_JOB):].isdigit()}) \
        if len(ex.t) else []
    if not done or not base:
        facts.data["channels"] = {"status": "not_measured", "asked": asked}
        return
    on = words(run.n)
    used = _channels_used(res)
    facts.add(measured("channels_unset", base, unit="steps/s", label=f"{rung_label(ex.rung)} {on}, NCCL's own "
                       "channel count", setting={"channels": "unset", "rung": ex.rung, "gpus": run.n}))
    cands = [Candidate("unset", facts["channels_unset"], call=" and ".join(CHANNEL_ENV) + " unset")]
    rows = [dict(channels="unset", job="n", used=used.get("n"), steps_per_s=facts["channels_unset"].number)]
    for c in done:
        w = ex.windows(f"{CHANNEL_JOB}{c}")
        if not w:
            continue
        f = measured(f"channels_{c}", w, unit="steps/s", label=f"{rung_label(ex.rung)} {on}, {c} NCCL channels",
                     setting={"channels": c, "rung": ex.rung, "gpus": run.n})
        facts.add(f)
        call = " ".join(f"{e}={c}" for e in CHANNEL_ENV)
        snippet = ("import os\n\n# before torch.distributed.init_process_group\n"
                   + "\n".join(f'os.environ["{e}"] = "{c}"' for e in CHANNEL_ENV))
        cands.append(Candidate(c, f, call=call, snippet=snippet))
        rows.append(dict(channels=c, job=f"{CHANNEL_JOB}{c}", used=used.get(f"{CHANNEL_JOB}{c}"), steps_per_s=f.number))
    facts.data["channels"] = {"status": "ok", "asked": asked, "rows": rows, "rung": ex.rung}
    q = Question("ddp.nccl_channels", "How many channels should NCCL use?", "NCCL_MAX_NCHANNELS", "unset",
                 " and ".join(CHANNEL_ENV) + " unset", "NCCL's default", workload)
    a = decide(q, cands, facts)
    if a is not None:
        facts.advise(replace(a, needs="gpus", at=rung_label(ex.rung).removeprefix("+ ")))


def _channels_used(res) -> dict:
    """The channels NCCL set up in each job (distinct channel numbers in its log's channel lines)."""
    t = res.table("transports") if "transports" in res.tables else pd.DataFrame()
    if t.empty:
        return {}
    return {str(j): int(g["channel"].nunique()) for j, g in t.groupby("job")}


def target(facts: Facts, run) -> None:
    """``target_best``: the best measured setting on N GPUs (the ladder's fastest, or a channel setting) as a share of
    one GPU without DDP, and ``facts.data['target']``: the declared target, whether it was reached and, where not, the
    largest measured share of the loss."""
    one = facts.get("one_gpu")
    eff = facts.get(f"scaling_eff_{run.n}")
    if one is None or one.number is None or eff is None:
        facts.data["target"] = {"target": TARGET, "status": "not_measured"}
        return
    cands = [(eff.number, {"rung": eff.setting["rung"], "channels": "unset"}, eff.n)]
    for k, f in facts.facts.items():
        if k.startswith("channels_") and k != "channels_unset" and f.number is not None:
            cands.append((100 * f.number / one.number, {"rung": f.setting["rung"], "channels": f.setting["channels"]},
                          f.n))
    top, setting, n = max(cands, key=lambda c: c[0])
    facts.add(Fact("target_best", top, "%", f"steps/s per {'GPU' if run.cuda else 'process'} on N with the best "
                   "setting measured, as a share of one without DDP", "share", "higher", n, None,
                   {**setting, "gpus": run.n}))
    largest = facts.get(f"loss_largest_{run.n}")
    facts.data["target"] = {"target": TARGET, "status": "ok", "reached": bool(top >= TARGET),
                            "held_by": None if top >= TARGET or largest is None else largest.key}
