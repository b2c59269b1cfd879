"""What chapter 11's result says, as facts: no prose, no page, one computation per number.

The page (:mod:`.page`), chapter 12 and the front page word these facts; they never compute from the
tables again. Throughput is steps/s per GPU (per process on gloo), the mean over timed windows; a
comparison's spread comes from the windows' extremes.

Facts (``k`` is a GPU count, ``path`` one of ``direct``, ``gloo``, ``p2p_off``, ``p2p_shm_off``, ``slug``
a rung name with ``@`` written ``_at_``):

* ``one_gpu``, ``ddp_one_gpu``: one GPU without and with DDP; ``ddp_one_device``: the second against the first;
* ``rate_<path>_<slug>_<k>``: every DDP rung that ran, at every GPU count and path;
* ``scaling_eff_<k>``: steps/s per GPU of the fastest DDP setting measured on ``k`` GPUs over the direct
  path, as a share of one GPU without DDP; ``scaling_direct``: the share lost at N (the checklist's key);
* ``best_option_direct`` / ``best_option_host``: the fastest DDP option other than one-bucket DDP on N GPUs,
  against one-bucket DDP on the same path (the direct path; the slowest forced host path), and
  ``gap_closed_direct`` / ``gap_closed_host``: the share of the gap between one-bucket DDP and one GPU without DDP
  that option closed; ``option_<path>_<slug>_<k>``: every option against one-bucket DDP on its path;
* ``host_cost_<path>`` (each forced host path), ``host_path_cost`` (the slowest): one-bucket DDP forced through the
  host against one-bucket DDP on the direct path; ``host_path_collapse``: one GPU without DDP against one-bucket DDP on
  the slowest host path (the published metric's direction); ``direct_path_gain``: the direct path against
  P2P off, the gain of leaving ``NCCL_P2P_DISABLE`` unset; ``path_<path>``: the rate of the DDP settings every path
  ran, on each path (the sides of the question ``ddp.path``, named by their path); ``compression``: the compression
  hook that sped a forced host path up most, against one-bucket DDP there;
* ``allreduce_busbw``: all-reduce bus bandwidth at the largest size on N GPUs over the direct path;
  ``allreduce_busbw_<path>`` the same on a host path; ``busbw_<path>_<k>`` at the scaling size per count;
* the published metrics' counterparts: ``ddp_slowdown_direct``, ``nccl_share_host``, ``bucket_view_gain``,
  ``bf16_gain_host``, ``powersgd_host``; the bucket sweep (``sweep_best``), the profile (overlap and copies) and
  the prediction of all-reduce time (``prediction_one_bucket``, ``prediction_many_buckets``).

``facts.data``: ``workload`` (model, GPUs, backend), ``gradient_exchange`` (chapter 12's gradient hop),
``scaling`` and ``scaling_bench`` (the curve's points, records), ``transports`` (NCCL channel connections
by job and transport), ``skipped`` (rungs that did not run and why), ``profile_flags`` (profiled rungs whose
GPU was idle or slower than the timed steps), ``snippets`` (the DDP call of a rung, by job and rung),
``topology`` (the kinds of link between GPU pairs), ``failed_jobs`` (the torchrun jobs that did not finish, and why).
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd

from datajourney.chapters.c11_gpu_to_gpu import analysis_loss as efficiency
from datajourney.chapters.c11_gpu_to_gpu.params import CHAPTER, Params
from datajourney.chapters.c11_gpu_to_gpu.reading import (
    DDP_DEFAULT_MB,
    DEFAULT_RUNG,
    HOST_PATHS,
    MIN_JOB_S,
    link_kind,
    option_words,
    parse_topology,
    predict_comm,
)
from datajourney.core.answers import Candidate, Question, decide, exceeds
from datajourney.core.facts import FLAGGED, Advice, Fact, Facts, best, compare, measured
from datajourney.core.stats import HIGH_SPREAD, cv
from datajourney.core.units import size_label
from datajourney.toolkit.collectives import bench_summary, interp_algbw

#: The facts and data other pages may read (``scaling_eff_<k>`` for every count the result holds).
EXPORTS = ("scaling_direct", "host_path_collapse", "allreduce_busbw", "host_path_cost", "best_option_direct",
           "best_option_host", "gap_closed_direct", "gap_closed_host", "direct_path_gain", "one_gpu",
           "scaling_eff_2", "scaling_eff_4", "scaling_eff_8", "ddp_default_eff", "ddp_default_loss",
           "gradient_exchange", "scaling", "workload", "ddp_default")
#: The all-reduce size the scaling curve's bus bandwidth is read at (else the largest measured).
HEADLINE_SIZE = 1 << 30
HOST_ORDER = ("p2p_off", "p2p_shm_off")
#: A step whose GPU ran no kernel for more than this share of it was held up by the host.
IDLE_SHARE = 0.10
#: A profiled step whose GPU was busy this much longer than a timed step is flagged (the profiler slowed it).
PROFILE_SLOWER = 1.2
#: The environment of each path as a reader sets it.
PATH_ENV = {"direct": "", "gloo": "", **{h: " ".join(f"{k}={v}" for k, v in env.items())
                                         for h, env in HOST_PATHS.items()}}
MODEL_WORDS = {"vit_l_32": "ViT-L/32", "small_vit": "a small ViT"}


# ----------------------------------------------------------------------------- reading the result
def _opt(res, name: str) -> pd.DataFrame:
    return res.table(name) if name in res.tables else pd.DataFrame()


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"] if len(df) else df


def _windows(w: pd.DataFrame, job: str, rung: str) -> list[float]:
    if w.empty:
        return []
    return [float(x) for x in w[(w["job"] == job) & (w["rung"] == rung)]["steps_per_s"]]


def slug(rung: str) -> str:
    return str(rung).replace("@", "_at_")


def devices(cuda: bool, k: int) -> str:
    """'2 GPUs', '1 GPU', '2 processes'."""
    d = "GPU" if cuda else "process"
    return f"{k} {d}" + ("" if k == 1 else "es" if d == "process" else "s")


def path_words(path: str) -> str:
    """How a path reads after "on 2 GPUs": "over the path NCCL picked", "with P2P off (NCCL_P2P_DISABLE=1)"."""
    return {"direct": "over the path NCCL picked", "gloo": "over gloo on the CPU",
            "p2p_off": f"with P2P off ({PATH_ENV['p2p_off']})",
            "p2p_shm_off": f"with P2P and SHM off ({PATH_ENV['p2p_shm_off']})"}.get(path, str(path))


def rung_words(rung: str, cap: int) -> str:
    """A rung's DDP settings in words: "one-bucket DDP (bucket_cap_mb=2000)", "DDP + static_graph"."""
    base = str(rung).partition("@")[0]
    return (f"one-bucket DDP (bucket_cap_mb={cap})" if rung == "ddp" else
            f"DDP with PyTorch's defaults (bucket_cap_mb={DDP_DEFAULT_MB})" if base == DEFAULT_RUNG else
            option_words(rung) if base == "ddp" else f"DDP + {option_words(rung)}")


def rate_label(rung: str, k: int, path: str, cuda: bool, cap: int) -> str:
    return f"{rung_words(rung, cap)} on {devices(cuda, k)} {path_words(path)}"


def _busy_ms(r) -> float:
    """GPU-busy time per profiled step: compute and NCCL kernels (their overlap counted once) and copies."""
    def g(k):
        v = r[k] if k in r else 0.0
        return 0.0 if v is None or pd.isna(v) else float(v)
    return g("prof_compute_ms") + g("prof_nccl_ms") - g("prof_overlap_ms") + g("prof_copy_ms")


def _nccl_share(r) -> float | None:
    """NCCL kernel time per profiled step ÷ the step (the timed step, or the profiled GPU-busy time where the
    profiled steps ran longer)."""
    if r is None or "prof_nccl_ms" not in r or pd.isna(r["prof_nccl_ms"]):
        return None
    step = max(1e3 / r["steps_per_s"], _busy_ms(r))
    return float(r["prof_nccl_ms"]) / step


def _profiled(rungs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``rungs`` (finished rungs) that ran under torch.profiler: those with an NCCL kernel time."""
    return rungs[rungs["prof_nccl_ms"].notna()] if len(rungs) and "prof_nccl_ms" in rungs else pd.DataFrame()


def profiled(res) -> pd.DataFrame:
    """Every profiled rung of the result, of the N-process jobs and the scaling jobs alike: the rows the profile's
    facts and ``profile_flags`` are computed from (those on two or more processes), and the rows the page's profile
    table shows."""
    return _profiled(_Run(res).ok).reset_index(drop=True)


def _ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(a)/mean(b) and its range over the windows' extremes (min a/max b, max a/min b)."""
    return (sum(a) / len(a)) / (sum(b) / len(b)), min(a) / max(b), max(a) / min(b)


def _share_fact(key: str, a: list[float], b: list[float], *, label: str, setting: dict,
                published: str | None = None) -> Fact | None:
    """mean(a) as a share of mean(b), in %, with the windows' range."""
    if not a or not b:
        return None
    mid, lo, hi = _ratio(a, b)
    return Fact(key, 100 * mid, "%", label, "share", "higher", min(len(a), len(b)), (100 * lo, 100 * hi),
                dict(setting), published=published)


def _loglog(x: float, xs, ys) -> float:
    """Interpolate ``ys`` at ``x`` on log-log axes (clamped to the measured range)."""
    xs, ys = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    order = np.argsort(xs)
    return float(np.exp(np.interp(math.log(x), xs[order], ys[order])))


# ----------------------------------------------------------------------------- the analysis
class _Run:
    """The result's rungs and windows of every job (the N-process ones and the scaling jobs), read once."""

    def __init__(self, res):
        self.res = res
        md = res.metadata
        self.cuda = bool(md.get("cuda"))
        self.n = int(md.get("world", 1))
        self.path0 = "direct" if md.get("backend") == "nccl" else "gloo"
        self.cap = int(Params.value_of(res, "bucket_cap_mb"))
        parts = [t for t in (_opt(res, "rungs"), _opt(res, "scale_rungs")) if len(t)]
        self.rungs = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        wparts = [t for t in (_opt(res, "windows"), _opt(res, "scale_windows")) if len(t)]
        self.windows = pd.concat(wparts, ignore_index=True) if wparts else pd.DataFrame()
        self.ok = _ok(self.rungs)

    def job(self, k: int, path: str) -> str | None:
        """The job that ran ``k`` processes on ``path``."""
        if k == 1:
            return "one" if path == self.path0 else None
        if self.ok.empty:
            return None
        r = self.ok[(self.ok["world"] == k) & (self.ok["path"] == path) & self.ok["ddp"]]
        return str(r["job"].iloc[0]) if len(r) else None

    def w(self, k: int, path: str, rung: str) -> list[float]:
        job = self.job(k, path)
        return _windows(self.windows, job, rung) if job else []

    def row(self, k: int, path: str, rung: str):
        job = self.job(k, path)
        if job is None:
            return None
        r = self.ok[(self.ok["job"] == job) & (self.ok["rung"] == rung)]
        return None if r.empty else r.iloc[0]

    def ddp_rungs(self, k: int, path: str) -> list[str]:
        job = self.job(k, path)
        if job is None:
            return []
        r = self.ok[(self.ok["job"] == job) & self.ok["ddp"]]
        return [str(x) for x in r["rung"] if _windows(self.windows, job, str(x))]

    def worlds(self, path: str) -> list[int]:
        if self.ok.empty:
            return []
        return sorted(int(k) for k in self.ok[(self.ok["path"] == path) & (self.ok["world"] >= 2)]["world"].unique())


def analyse(res) -> Facts:
    """Chapter 11's facts from its result (see the module's docstring)."""
    run = _Run(res)
    facts = Facts(CHAPTER, exports=EXPORTS)
    dev = "GPU" if run.cuda else "process"
    model = str(res.metadata.get("model") or "")
    facts.data["workload"] = dict(model=model, model_words=MODEL_WORDS.get(model, model), world=run.n,
                                  backend=str(res.metadata.get("backend") or ""), cuda=run.cuda, device=dev,
                                  batch_size=res.parameters["batch_size"] if "batch_size" in res.parameters
                                  else None, path=run.path0, bucket_cap_mb=run.cap,
                                  device_name=str((res.metadata.get("start") or {}).get("device") or "") or None,
                                  nccl=sorted({str(j["nccl_version"]) for j in res.metadata.get("jobs") or []
                                               if j.get("nccl_version")}))
    _one_device(facts, run)
    _rates(facts, run)
    _scaling(facts, run)
    _options(facts, run)
    _host_paths(facts, run)
    _bandwidth(facts, run)
    _published(facts, run)
    _sweep_and_profile(facts, run)
    facts.data["gradient_exchange"] = gradient_exchange(res)
    facts.data["transports"] = _transports(res)
    facts.data["topology"] = _topology(res)
    facts.data["failed_jobs"] = _failed_jobs(res)
    facts.data["skipped"] = [{"job": str(r["job"]), "path": str(r["path"]), "rung": str(r["rung"]),
                              "reason": None if pd.isna(r["reason"]) else str(r["reason"])}
                             for _, r in run.rungs.iterrows() if r["status"] == "skipped"] if len(run.rungs) else []
    facts.data["snippets"] = _snippets(run)
    facts.data["spread"] = _spread(run)
    facts.data["powersgd_state"] = _powersgd_state(run)
    facts.data["workload"]["words"] = _workload(run)
    _advise(facts, run)
    words = lambda k: f"on {devices(run.cuda, k)} {path_words(run.path0)}"  # noqa: E731
    efficiency.loss(facts, res, run, words)
    efficiency.channels(facts, res, run, _workload(run), words)
    efficiency.target(facts, run)
    return facts


def _one_device(facts: Facts, run: _Run) -> None:
    dev = "GPU" if run.cuda else "process"
    one, ddp1 = run.w(1, run.path0, "no_ddp"), run.w(1, run.path0, "ddp")
    pub = run.cuda
    if one:
        facts.add(measured("one_gpu", one, unit="steps/s", label=f"one {dev} without DDP",
                           setting={"gpus": 1, "rung": "no_ddp"}, published="one GPU without DDP" if pub else None))
    if ddp1:
        facts.add(measured("ddp_one_gpu", ddp1, unit="steps/s", label=f"DDP on one {dev}",
                           setting={"gpus": 1, "rung": "ddp"}, published="DDP on one GPU" if pub else None))
    if one and ddp1:
        facts.add(compare("ddp_one_device", facts["ddp_one_gpu"], facts["one_gpu"]))
        if exceeds(facts["ddp_one_gpu"], facts["one_gpu"]):  # DDP only adds work: an impossible result, flagged
            facts.add(Fact("ddp_one_device" + FLAGGED, "flagged", "", f"DDP on one {dev} ran faster than without DDP",
                           "choice", None))


def _rate_key(path: str, rung: str, k: int) -> str:
    return f"rate_{path}_{slug(rung)}_{k}"


def _rates(facts: Facts, run: _Run) -> None:
    for path in (run.path0, *HOST_ORDER):
        for k in run.worlds(path):
            for rung in run.ddp_rungs(k, path):
                facts.add(measured(_rate_key(path, rung, k), run.w(k, path, rung), unit="steps/s",
                                   label=rate_label(rung, k, path, run.cuda, run.cap),
                                   setting={"gpus": k, "path": path, "rung": rung}))


def _fastest(facts: Facts, run: _Run, k: int, path: str, *, plain: bool = True) -> Fact | None:
    """The fastest DDP rung on ``k`` GPUs and ``path`` (one-bucket DDP included or not)."""
    return best(facts[_rate_key(path, r, k)] for r in run.ddp_rungs(k, path)
                if (plain or r.partition("@")[0] != "ddp") and _rate_key(path, r, k) in facts)


def _scaling(facts: Facts, run: _Run) -> None:
    """``scaling_eff_<k>`` and the curve's table: per count and path, one-bucket DDP and the fastest setting."""
    one = run.w(1, run.path0, "no_ddp")
    dev = "GPU" if run.cuda else "process"
    rows = []
    if one:
        rows.append(dict(processes=1, path=run.path0, series=f"one {dev}, no DDP", rung="no_ddp", w=one))
    for path in (run.path0, *HOST_ORDER):
        for k in run.worlds(path):
            if "ddp" in run.ddp_rungs(k, path):
                rows.append(dict(processes=k, path=path, series="one-bucket DDP", rung="ddp",
                                 w=run.w(k, path, "ddp")))
            if path != run.path0:
                continue
            top = _fastest(facts, run, k, path)
            if top is None:
                continue
            rung = top.setting["rung"]
            rows.append(dict(processes=k, path=path, series="best option", rung=rung, w=run.w(k, path, rung)))
            if one:
                facts.add(_share_fact(
                    f"scaling_eff_{k}", run.w(k, path, rung), one, setting={"gpus": k, "path": path, "rung": rung},
                    label=(f"steps/s per {dev} on {devices(run.cuda, k)} with the fastest DDP setting measured there "
                           f"({option_words(rung)}, {path_words(path)}), as a share of one {dev} without DDP")))
    if f"scaling_eff_{run.n}" in facts:  # the same measurement as the throughput lost (the checklist's key)
        f = facts[f"scaling_eff_{run.n}"]
        rung = f.setting["rung"]
        mid, lo, hi = _ratio(run.w(run.n, run.path0, rung), one)
        facts.add(Fact("scaling_direct", 100 * (1 - mid), "%",
                       f"steps/s per {dev} lost on {devices(run.cuda, run.n)} with the fastest DDP setting measured "
                       f"there ({option_words(rung)}, {path_words(run.path0)}), against one {dev} without DDP",
                       "share", "lower", f.n, (100 * (1 - hi), 100 * (1 - lo)), dict(f.setting)))
    out = []
    for x in rows:
        w = x.pop("w")
        if not w or not one:
            continue
        mid, lo, hi = _ratio(w, one)
        share = _nccl_share(run.row(x["processes"], x["path"], x["rung"]))
        out.append({**x, "mean": sum(w) / len(w), "min": min(w), "max": max(w), "n": len(w), "of_one": mid,
                    "of_one_min": lo, "of_one_max": hi, "nccl_share": share})
    facts.data["scaling"] = out


def _gap_closed(key: str, best_w: list[float], base_w: list[float], one_w: list[float], label: str,
                setting: dict) -> Fact | None:
    """(best - one-bucket DDP) ÷ (one GPU - one-bucket DDP), in %: the share of DDP's gap to one GPU an option
    closed."""
    if not best_w or not base_w or not one_w:
        return None
    b, base, one = (sum(x) / len(x) for x in (best_w, base_w, one_w))
    if one <= base:
        return None
    return Fact(key, 100 * (b - base) / (one - base), "%", label, "share", "higher", min(map(len, (best_w, base_w))),
                None, dict(setting))


def _options(facts: Facts, run: _Run) -> None:
    """Every option against one-bucket DDP on its path (N GPUs), and the fastest one on the direct path."""
    for path in (run.path0, *HOST_ORDER):
        base = facts.get(_rate_key(path, "ddp", run.n))
        if base is None:
            continue
        for rung in run.ddp_rungs(run.n, path):
            if rung.partition("@")[0] != "ddp":
                facts.add(compare(f"option_{path}_{slug(rung)}_{run.n}", facts[_rate_key(path, rung, run.n)], base))
    _best_option(facts, run, run.path0, "direct")


def _best_option(facts: Facts, run: _Run, path: str, name: str) -> None:
    base = facts.get(_rate_key(path, "ddp", run.n))
    top = _fastest(facts, run, run.n, path, plain=False)
    if base is None or top is None:
        return
    facts.add(compare(f"best_option_{name}", top, base))
    rung = top.setting["rung"]
    dev = "GPU" if run.cuda else "process"
    facts.add(_gap_closed(f"gap_closed_{name}", run.w(run.n, path, rung), run.w(run.n, path, "ddp"),
                          run.w(1, run.path0, "no_ddp"), setting={"gpus": run.n, "path": path, "rung": rung},
                          label=(f"the share of the gap between one-bucket DDP on {devices(run.cuda, run.n)} "
                                 f"{path_words(path)} and one {dev} without DDP that {option_words(rung)} "
                                 "closed")))


def _host_paths(facts: Facts, run: _Run) -> None:
    direct = facts.get(_rate_key(run.path0, "ddp", run.n))
    hosts = [h for h in HOST_ORDER if _rate_key(h, "ddp", run.n) in facts]
    if direct is None or not hosts:
        return
    for h in hosts:
        facts.add(compare(f"host_cost_{h}", facts[_rate_key(h, "ddp", run.n)], direct))
    worst = min(hosts, key=lambda h: facts[_rate_key(h, "ddp", run.n)].number or math.inf)
    c = facts[f"host_cost_{worst}"]
    facts.add(Fact("host_path_cost", c.value, c.unit, c.label, c.quantity, c.better, c.n, c.spread,
                   dict(c.setting), of=c.of, basis=c.basis, level=c.level))
    mild = "p2p_off" if "p2p_off" in hosts else worst
    facts.add(compare("direct_path_gain", direct, facts[_rate_key(mild, "ddp", run.n)]))
    # the published host-path figures are of NCCL's shared-memory transport: only a path that ran on it is their
    # counterpart (the slowest path, on sockets, is another transport and carries no published figure)
    shm = facts.data["shm_path"] = _shm_path(run.res, hosts)
    if "one_gpu" in facts:
        facts.add(compare("host_path_collapse", facts["one_gpu"], facts[_rate_key(worst, "ddp", run.n)],
                          published=PUB_COLLAPSE if run.cuda and worst == shm else None))
        if shm is not None and shm != worst:
            facts.add(compare("host_path_collapse_shm", facts["one_gpu"], facts[_rate_key(shm, "ddp", run.n)],
                              published=PUB_COLLAPSE if run.cuda else None))
    _best_option(facts, run, worst, "host")
    facts.data["host_path"] = worst
    hooked = [compare("compression", facts[_rate_key(h, r, run.n)], facts[_rate_key(h, "ddp", run.n)])
              for h in hosts for r in run.ddp_rungs(run.n, h)
              if run.row(run.n, h, r) is not None and run.row(run.n, h, r)["hook"] != "none"]
    facts.add(best(hooked))  # the compression that sped a forced host path up most, against one-bucket DDP there


#: The published figure of one GPU against N GPUs over the host (NCCL's SHM transport).
PUB_COLLAPSE = "DDP on N GPUs, host path: one GPU ÷ N GPUs"


def _shm_path(res, hosts: list[str]) -> str | None:
    """The forced host path whose every NCCL channel connection went through shared memory (``via SHM/…`` in its
    log), the transport of the published host-path figures; None where no path ran on SHM alone."""
    t = _opt(res, "transports")
    if t.empty:
        return None
    return next((h for h in hosts if set(t.loc[t["job"] == h, "transport"]) == {"SHM"}), None)


def _bench(res) -> pd.DataFrame:
    parts = [t for t in (_opt(res, "bench"), _opt(res, "scale_bench")) if len(t)]
    if not parts:
        return pd.DataFrame()
    b = pd.concat(parts, ignore_index=True)
    return b[(b["status"] == "ok") & (b["op"] == "all_reduce")]


def _bandwidth(facts: Facts, run: _Run) -> None:
    res = run.res
    dev_s = devices(run.cuda, run.n)
    if "bench" in res.tables:
        s = bench_summary(res.table("bench"))
        s = s[s["op"] == "all_reduce"]
        if len(s):
            top = int(s["size"].max())
            for _, d in s[s["size"] == top].iterrows():
                path = str(d["path"])
                key = "allreduce_busbw" if path == run.path0 else f"allreduce_busbw_{path}"
                facts.add(Fact(key, float(d["busbw_GBps"]), "GB/s",
                               f"all-reduce bus bandwidth at {size_label(top)} on {dev_s} {path_words(path)}",
                               "rate", "higher", int(d["repeats"]), (float(d["busbw_min"]), float(d["busbw_max"])),
                               {"bytes": top, "gpus": run.n, "path": path}))
    b = _bench(res)
    rows = []
    if len(b):
        at = HEADLINE_SIZE if (b["size"] == HEADLINE_SIZE).any() else int(b["size"].max())
        b = b[b["size"] == at]
        for (k, path), g in b.groupby(["world", "path"]):
            x = g["busbw_GBps"]
            rows.append(dict(processes=int(k), path=str(path), mean=float(x.median()), min=float(x.min()),
                             max=float(x.max()), n=int(len(x)), bytes=int(at)))
            where = f"{devices(run.cuda, int(k))} {path_words(path)}"
            facts.add(Fact(f"busbw_{path}_{int(k)}", float(x.median()), "GB/s",
                           f"all-reduce bus bandwidth at {size_label(at)} on {where}",
                           "rate", "higher", int(len(x)), (float(x.min()), float(x.max())) if len(x) > 1 else None,
                           {"bytes": int(at), "gpus": int(k), "path": str(path)}))
    facts.data["scaling_bench"] = rows
    pred = prediction(res)
    if pred is not None and len(pred) and pred["profiled_nccl_ms"].notna().any():
        p = pred[pred["profiled_nccl_ms"].notna()]
        ratio = p["profiled_nccl_ms"] / p["predicted_ms"]
        for key, part, words in (("prediction_one_bucket", ratio[p["buckets"] <= 2], "one bucket"),
                                 ("prediction_many_buckets", ratio[p["buckets"] > 2], "several buckets")):
            if len(part):
                facts.add(Fact(key, float(part.mean()), "×",
                               f"profiled NCCL kernel time ÷ the all-reduce time gradient bytes and the measured "
                               f"bandwidth predict, {words}", "amount", None, int(len(part)),
                               (float(part.min()), float(part.max())) if len(part) > 1 else None))


def prediction(res) -> pd.DataFrame | None:
    """The prediction of each uncompressed rung's all-reduce time, computed with this code from the result's
    rungs and benchmark (None without a benchmark)."""
    if "bench" not in res.tables or "rungs" not in res.tables:
        return None
    return predict_comm(res.table("rungs"), res.table("bench"), int(res.metadata.get("world", 1)))


def _published(facts: Facts, run: _Run) -> None:
    """The counterparts of the published figures (the same metric, the same direction)."""
    pub = (lambda m: m) if run.cuda else (lambda m: None)  # noqa: E731 - a CPU run is another metric
    one = run.w(1, run.path0, "no_ddp")
    base = run.w(run.n, run.path0, "ddp")
    if one and base and run.n >= 2:
        mid, lo, hi = _ratio(base, one)
        facts.add(Fact("ddp_slowdown_direct", 100 * (1 - mid), "%",
                       f"per-{'GPU' if run.cuda else 'process'} throughput one-bucket DDP lost on "
                       f"{devices(run.cuda, run.n)} {path_words(run.path0)} against one without DDP", "share", "lower",
                       min(len(one), len(base)), (100 * (1 - hi), 100 * (1 - lo)), {"gpus": run.n},
                       published=pub("DDP on N GPUs, direct path: slowdown vs one GPU")))
    sg, bv = run.w(run.n, run.path0, "static_graph"), run.w(run.n, run.path0, "bucket_view")
    if sg and bv:
        mid, lo, hi = _ratio(bv, sg)
        facts.add(Fact("bucket_view_gain", 100 * (mid - 1), "%",
                       "steps/s gained by gradient_as_bucket_view on top of static_graph", "share", "higher",
                       min(len(sg), len(bv)), (100 * (lo - 1), 100 * (hi - 1)), {"gpus": run.n},
                       published=pub("gradient_as_bucket_view gain")))
    host = facts.data.get("shm_path")  # the published host path's transport: like with like, or no counterpart
    if host is None:
        return
    share = _nccl_share(run.row(run.n, host, "ddp"))
    if share is not None:
        facts.add(Fact("nccl_share_host", 100 * float(share), "%",
                       f"share of the one-bucket DDP step taken by NCCL all-reduce kernels {path_words(host)}", "share",
                       "lower",
                       setting={"path": host}, published=pub("NCCL all-reduce share of the step, host path")))
    hb, bf = run.w(run.n, host, "ddp"), run.w(run.n, host, "bf16")
    if hb and bf:
        mid, lo, hi = _ratio(bf, hb)
        facts.add(Fact("bf16_gain_host", 100 * (mid - 1), "%",
                       f"steps/s gained by bf16 compression over one-bucket DDP {path_words(host)}", "share", "higher",
                       min(len(hb), len(bf)), (100 * (lo - 1), 100 * (hi - 1)), {"path": host},
                       published=pub("bf16 compression gain, host path")))
    ps = run.w(run.n, host, "powersgd")
    if ps:
        facts.add(measured("powersgd_host", ps, unit="steps/s", label=f"DDP + PowerSGD {path_words(host)}",
                           setting={"path": host, "rung": "powersgd"}, published=pub("PowerSGD, host path")))


def _sweep_and_profile(facts: Facts, run: _Run) -> None:
    """The bucket sweep's fastest and slowest setting; the profile's overlap, copies and flagged rungs."""
    r = run.ok
    n, p0 = run.n, run.path0
    if len(r):
        s = r[(r["world"] == n) & (r["path"] == p0) & (r["hook"] == "none") & r["static_graph"] & r["bucket_view"]]
        s = s[[bool(run.w(n, p0, str(x))) for x in s["rung"]]] if len(s) else s
        if len(s) >= 2:
            keys = [_rate_key(p0, str(x), n) for x in s["rung"]]
            hi = best(facts[k] for k in keys)
            lo = min((facts[k] for k in keys), key=lambda f: f.number)
            facts.add(compare("sweep_best", hi, lo))
            others = sorted((facts[k] for k in keys if k != hi.key), key=lambda f: -f.number)
            facts.add(compare("sweep_next", hi, others[0]))
            # the sizes whose windows overlap the fastest's are level with it: then no one size is the fastest
            facts.data["sweep"] = dict(caps={k: int(c) for k, c in zip(keys, s["bucket_cap_mb"])},
                                       level=[f.key for f in others if compare("_", f, hi).level])
    prof = _profiled(r)
    prof = prof[prof["world"] > 1] if len(prof) else prof
    flags = []
    if len(prof):
        for key, part, words in (("overlap_largest_bucket", prof[prof["bucket_cap_mb"] == prof["bucket_cap_mb"].max()],
                                  "the largest bucket"),
                                 ("overlap_smallest_bucket", prof[prof["bucket_cap_mb"] == prof["bucket_cap_mb"].min()],
                                  "the smallest bucket")):
            cap = int(part["bucket_cap_mb"].iloc[0])
            facts.add(Fact(key, 100 * float((part["prof_overlap_ms"] / part["prof_nccl_ms"]).median()), "%",
                           f"share of NCCL kernel time beside a compute kernel with {words} (bucket_cap_mb={cap}), "
                           "median over its rungs", "share", "higher", int(len(part)), None, {"bucket_cap_mb": cap}))
        for _, x in prof.iterrows():
            step, busy = 1e3 / float(x["steps_per_s"]), _busy_ms(x)
            kind = "slow" if busy > PROFILE_SLOWER * step else "idle" if busy < (1 - IDLE_SHARE) * step else None
            if kind:
                flags.append(dict(kind=kind, path=str(x["path"]), rung=str(x["rung"]), world=int(x["world"]),
                                  busy_ms=busy, step_ms=step, idle_ms=step - busy,
                                  compute_ms=float(x["prof_compute_ms"])))
        for rung in ("static_graph", "bucket_view"):
            x = run.row(n, p0, rung)
            if x is not None and "prof_copy_ms" in x and not pd.isna(x["prof_copy_ms"]):
                facts.add(Fact(f"copy_ms_{rung}", float(x["prof_copy_ms"]), "ms",
                               f"device-to-device copies per step with {option_words(rung)}", "time", "lower",
                               setting={"rung": rung}))
        if "copy_ms_static_graph" in facts and "copy_ms_bucket_view" in facts:
            facts.add(compare("copies_bucket_view", facts["copy_ms_bucket_view"], facts["copy_ms_static_graph"]))
    elif len(r) and "profile_error" in r:
        errs = r["profile_error"].dropna().unique()
        facts.data["profile_error"] = str(errs[0]) if len(errs) else None
    facts.data["profile_flags"] = flags


def _spread(run: _Run) -> list[dict]:
    """Every rung whose windows spread by more than :data:`~datajourney.core.phrasing.HIGH_SPREAD` (their
    coefficient of variation): label, lowest, highest, windows."""
    w = run.windows
    out = []
    if w.empty:
        return out
    for (_job, path, world, rung), g in w.groupby(["job", "path", "world", "rung"], sort=False):
        v = [float(x) for x in g["steps_per_s"]]
        c = cv(v)
        if c > HIGH_SPREAD:
            out.append(dict(label=rate_label(rung, int(world), path, run.cuda, run.cap) if rung != "no_ddp"
                            else f"one {'GPU' if run.cuda else 'process'} without DDP",
                            low=min(v), high=max(v), n=len(v), cv=c))
    return out


def _powersgd_state(run: _Run) -> dict:
    """The PowerSGD state the run used (its settings), from the first rung that ran it."""
    r = run.rungs
    if r.empty or "hook_state" not in r:
        return {}
    r = r[(r["hook"] == "powersgd") & r["hook_state"].notna()]
    if r.empty:
        return {}
    st = json.loads(r.iloc[0]["hook_state"])
    return {str(k): v for k, v in st.items() if k != "hook" and isinstance(v, (int, float, str, bool))}


def _transports(res) -> dict:
    """NCCL's channel connections by job and ``via`` (parsed from NCCL_DEBUG=INFO)."""
    t = _opt(res, "transports")
    if t.empty:
        return {}
    return {str(job): {str(v): int(c) for v, c in g["via"].value_counts().items()} for job, g in t.groupby("job")}


def topology_table(res) -> pd.DataFrame:
    """The topology parsed (again, with this code) from the recorded ``nvidia-smi topo -m`` text, else the
    result's own table: a, b, link."""
    text = res.metadata.get("topology_text")
    return parse_topology(text) if text else _opt(res, "topology")


def _topology(res) -> dict:
    """Whether the run read a topology (``read``), and the kinds of link between its GPU pairs (``links``, sorted:
    ``NV`` for any bonded set of NVLinks, else the code of ``nvidia-smi topo -m``)."""
    t = topology_table(res)
    if t.empty:
        return dict(read=False, links=[])
    gpu = t["a"].astype(str).str.startswith("GPU") & t["b"].astype(str).str.startswith("GPU")
    pairs = t[(t["a"] != t["b"]) & gpu]
    return dict(read=True, links=sorted({link_kind(x) for x in pairs["link"]}))


def _failed_jobs(res) -> list[dict]:
    """The torchrun jobs that did not finish: job, status, reason, the tail of their log, and for a job skipped for
    lack of time the least time a job needed (``min_s``, the experiment's threshold)."""
    out = []
    for j in res.metadata.get("jobs", []):
        if j["status"] == "ok":
            continue
        reason = j.get("reason")
        out.append(dict(job=str(j["job"]), status=str(j["status"]), reason=None if reason is None else str(reason),
                        error_tail=str(j["error_tail"]) if j.get("error_tail") else None,
                        min_s=MIN_JOB_S if reason == "time_budget_s" else None))
    return out


def snippet(row, cuda: bool, res=None) -> str:
    """The DDP call (and communication hook) of a rung as the run made it, from its row (Python that compiles),
    naming only the arguments it sets away from DDP's defaults; a hook state the row does not record is the run's
    parameter (``res``'s, else the declared default)."""
    cap = int(row["bucket_cap_mb"])
    args = [] if cap == DDP_DEFAULTS["bucket_cap_mb"] else [f"bucket_cap_mb={cap}"]
    args += [f"{k}=True" for k, on in (("static_graph", row["static_graph"]),
                                       ("gradient_as_bucket_view", row["bucket_view"])) if on]
    lines = ["from torch.nn.parallel import DistributedDataParallel as DDP", "",
             "model = " + default_call(cuda)[:-1] + "".join(f", {a}" for a in args) + ")"]
    if row["hook"] in ("bf16", "fp16"):
        lines[0:0] = ["from torch.distributed.algorithms.ddp_comm_hooks import default_hooks"]
        lines.append(f"model.register_comm_hook(None, default_hooks.{row['hook']}_compress_hook)")
    elif row["hook"] == "powersgd":
        hs = row["hook_state"] if "hook_state" in row else None
        st = json.loads(hs) if isinstance(hs, str) else {}
        rank = int(st["matrix_approximation_rank"] if "matrix_approximation_rank" in st
                   else Params.value_of(res or {}, "powersgd_rank"))
        start = int(st["start_powerSGD_iter"] if "start_powerSGD_iter" in st
                    else Params.value_of(res or {}, "powersgd_start_iter"))
        lines[0:0] = ["from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook"]
        lines += ["state = powerSGD_hook.PowerSGDState(",
                  f"    process_group=None, matrix_approximation_rank={rank},",
                  f"    start_powerSGD_iter={start}, use_error_feedback=True, warm_start=True)",
                  "model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)"]
    return "\n".join(lines)


def _snippets(run: _Run) -> dict:
    out = {}
    for path in (run.path0, *HOST_ORDER):
        for rung in run.ddp_rungs(run.n, path):
            out[f"{path}:{rung}"] = snippet(run.row(run.n, path, rung), run.cuda, run.res)
    return out


def _workload(run: _Run, path: str | None = None) -> str:
    model = str(run.res.metadata.get("model") or "the model")
    words = MODEL_WORDS.get(model, model)
    how = (f"training on {devices(True, run.n)} over NCCL" if run.cuda
           else f"training in {run.n} CPU processes over gloo")
    return f"{words} {how}" + (f", forced through the host ({PATH_ENV[path]})" if path else "")


#: DDP's defaults (torch.nn.parallel.DistributedDataParallel): the baseline of every DDP question.
DDP_DEFAULTS = {"static_graph": False, "gradient_as_bucket_view": False, "bucket_cap_mb": 25, "comm_hook": "none"}
#: The cost of a communication hook: it changes what is summed across GPUs.
HOOK_COST = ("it changes the gradients' precision (bf16/fp16) or approximates them (PowerSGD), which can "
             "change convergence: check the loss curve")
_HOOK_CALLS = {"bf16": "default_hooks.bf16_compress_hook", "fp16": "default_hooks.fp16_compress_hook",
               "powersgd": "powerSGD_hook.powerSGD_hook"}
_ASK = {"static_graph": "Should DDP be told the graph is static?",
        "gradient_as_bucket_view": "Should DDP's gradients be views of its buckets?",
        "bucket_cap_mb": "How large should DDP's gradient buckets be?",
        "comm_hook": "Should DDP compress its gradients?"}


def _config(row) -> dict:
    """A rung's DDP settings, by the names a reader passes to DDP."""
    return {"static_graph": bool(row["static_graph"]), "gradient_as_bucket_view": bool(row["bucket_view"]),
            "bucket_cap_mb": int(row["bucket_cap_mb"]), "comm_hook": str(row["hook"])}


def _setting(knob: str, value) -> str:
    if knob == "comm_hook":
        return ("no communication hook" if value == "none"
                else f"model.register_comm_hook(..., {_HOOK_CALLS.get(value, value)})")
    return f"{knob}={value}"


def _questions(facts: Facts, run: _Run, path: str) -> list[Advice]:
    """Each DDP knob the run varied with every other knob held (like for like), decided against DDP's default
    for it. The ladder adds settings one on top of another, so a knob's candidates are the rungs that differ
    from a rung at its default in that knob alone; ``at`` names the other settings where they are not DDP's."""
    wl = _workload(run, None if path == run.path0 else path)
    rungs = [(g, _config(run.row(run.n, path, g))) for g in run.ddp_rungs(run.n, path)
             if _rate_key(path, g, run.n) in facts]
    out = []
    for knob, default in DDP_DEFAULTS.items():
        groups: dict[tuple, list] = {}
        for g, c in rungs:
            groups.setdefault(tuple((k, v) for k, v in c.items() if k != knob), []).append((g, c))
        usable = [(held, m) for held, m in groups.items()
                  if len(m) > 1 and any(c[knob] == default for _, c in m)]
        if not usable:
            continue
        held, members = max(usable, key=lambda x: (sum(DDP_DEFAULTS[k] == v for k, v in x[0]), len(x[1])))
        at = ", ".join(_setting(k, v) for k, v in held if DDP_DEFAULTS[k] != v) or None
        key = f"ddp.{knob}" if path == run.path0 else "ddp.host_option"
        q = Question(key, _ASK[knob], knob, default, _setting(knob, default), "DDP's default", wl,
                     cost=HOOK_COST if knob == "comm_hook" else None)
        cands = [Candidate(c[knob], facts[_rate_key(path, g, run.n)], call=_setting(knob, c[knob]), at=at,
                           snippet=facts.data["snippets"].get(f"{path}:{g}"),
                           costly=knob == "comm_hook" and c[knob] != "none") for g, c in members]
        out.append(decide(q, cands, facts))
    return [replace(a, needs="gpus") for a in out if a is not None]


def _call_args(config: dict) -> str:
    """A rung's DDP settings as a reader passes them, those that differ from DDP's defaults:
    "static_graph=True, gradient_as_bucket_view=True" (a hook as the call that registers it)."""
    args = [f"{k}={config[k]}" for k in ("bucket_cap_mb", "static_graph", "gradient_as_bucket_view")
            if config[k] != DDP_DEFAULTS[k]]
    if config["comm_hook"] != "none":
        args.append(_setting("comm_hook", config["comm_hook"]))
    return ", ".join(args)


def default_call(cuda: bool) -> str:
    """DDP as a reader wraps a model without the book: every argument at PyTorch's default."""
    return "DDP(model, device_ids=[local_rank])" if cuda else "DDP(model)"


def _default_rung(facts: Facts, run: _Run) -> str | None:
    """The DDP rung on N devices over the run's own path whose settings are all DDP's defaults (the ``default``
    rung), with ``ddp_default_eff``: its steps/s per device as a share of one device without DDP (chapter 12's
    data-parallel margin). ``facts.data["ddp_default"]`` says whether the run measured it: a result from before the
    rung has none, and its answer says so."""
    p0, dev = run.path0, "GPU" if run.cuda else "process"
    rung = next((g for g in run.ddp_rungs(run.n, p0) if _config(run.row(run.n, p0, g)) == DDP_DEFAULTS
                 and _rate_key(p0, g, run.n) in facts), None)
    facts.data["ddp_default"] = dict(measured=rung is not None, rung=rung, call=default_call(run.cuda),
                                     settings=", ".join(f"{k}={DDP_DEFAULTS[k]}" for k in
                                                        ("bucket_cap_mb", "static_graph", "gradient_as_bucket_view")))
    one = run.w(1, p0, "no_ddp")
    if rung is not None and one:
        w = run.w(run.n, p0, rung)
        where = f"on {devices(run.cuda, run.n)} with DDP's defaults (bucket_cap_mb={DDP_DEFAULT_MB}), {path_words(p0)}"
        setting = {"gpus": run.n, "path": p0, "rung": rung}
        facts.add(_share_fact("ddp_default_eff", w, one, setting=setting,
                              label=f"steps/s per {dev} {where}, as a share of one {dev} without DDP"))
        mid, lo, hi = _ratio(w, one)
        facts.add(Fact("ddp_default_loss", 100 * (1 - mid), "%", f"steps/s per {dev} lost {where}, against one "
                       f"{dev} without DDP", "share", "lower", min(len(w), len(one)), (100 * (1 - hi), 100 * (1 - lo)),
                       dict(setting)))
    return rung


def _option_question(facts: Facts, run: _Run) -> Advice | None:
    """``ddp.option``, the chapter's one data-parallel answer: every DDP rung measured on N devices over the run's
    own path (the same model, batch and steps), decided against the rung with every DDP argument at its default;
    none when the run did not measure that rung (a gain needs its baseline)."""
    p0 = run.path0
    call = default_call(run.cuda)
    q = Question("ddp.option", "Which DDP settings?", "DistributedDataParallel", "defaults", call, "DDP's defaults",
                 _workload(run), cost=HOOK_COST)
    cands = []
    for g in run.ddp_rungs(run.n, p0):
        if _rate_key(p0, g, run.n) not in facts:
            continue
        c = _config(run.row(run.n, p0, g))
        mine = c == DDP_DEFAULTS
        cands.append(Candidate("defaults" if mine else _call_args(c), facts[_rate_key(p0, g, run.n)],
                               call=call if mine else _call_args(c), snippet=facts.data["snippets"].get(f"{p0}:{g}"),
                               costly=c["comm_hook"] != "none"))
    # the fewest changes from DDP's defaults first, a hook last: of the candidates level with the best, the first is
    # advised
    cands.sort(key=lambda c: (c.costly, 0 if c.value == "defaults" else len(str(c.call).split(", "))))
    a = decide(q, cands, facts)
    return None if a is None else replace(a, needs="gpus")


def _advise(facts: Facts, run: _Run) -> None:
    """Every DDP question on the direct path (and compression on the slowest host path); ``ddp.option``, the
    chapter's one data-parallel answer, every measured DDP setting against DDP's defaults; and ``ddp.path``: leave
    NCCL's direct path on (its default) unless a forced host path ran faster."""
    answers = _questions(facts, run, run.path0)
    worst = facts.get("host_path_collapse")
    host = _questions(facts, run, worst.setting["path"]) if worst is not None and "path" in worst.setting else []
    facts.advise(*answers, *(a for a in host if a.knob == "comm_hook"))
    _default_rung(facts, run)
    option = _option_question(facts, run)
    if option is not None:
        facts.advise(option)
    if run.cuda:
        _path_question(facts, run)


def _shared_rungs(facts: Facts, run: _Run) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The forced host paths that ran, and the DDP settings every path ran alike: {direct rung: {host path: the same
    settings' rung there}}, DDP's defaults first where the host ladder ran them, then the fewest settings changed
    from them, a communication hook last."""
    def configs(p):
        return {g: _config(run.row(run.n, p, g)) for g in run.ddp_rungs(run.n, p) if _rate_key(p, g, run.n) in facts}
    direct = configs(run.path0)
    by_cfg = {h: {tuple(c.items()): g for g, c in configs(h).items()} for h in HOST_ORDER}
    hosts = [h for h in HOST_ORDER if by_cfg[h]]
    shared = {g: {h: by_cfg[h].get(tuple(c.items())) for h in hosts} for g, c in direct.items()}
    order = sorted((g for g, m in shared.items() if all(m.values())), key=lambda g: (
        direct[g]["comm_hook"] != "none", sum(v != DDP_DEFAULTS[k] for k, v in direct[g].items())))
    return hosts, {g: shared[g] for g in order}


def _path_question(facts: Facts, run: _Run) -> None:
    """``ddp.path``: leave NCCL's direct path on (its default) unless a forced host path ran faster, decided like
    for like, on the DDP settings every path ran (``facts.data["path_rung"]``); where the ladders share none, no
    answer, and ``path_rung`` names the rungs each side ran (the missing measurement)."""
    hosts, shared = _shared_rungs(facts, run)
    if not hosts:
        return
    if not shared:
        facts.data["path_rung"] = dict(rung=None, host=hosts[0], **{
            side: [rung_words(g, run.cap) for g in run.ddp_rungs(run.n, p)]
            for side, p in (("direct_rungs", run.path0), ("host_rungs", hosts[0]))})
        return
    rung, on_host = next(iter(shared.items()))
    words = rung_words(rung, run.cap)
    facts.data["path_rung"] = dict(rung=rung, words=words,
                                   defaults=_config(run.row(run.n, run.path0, rung)) == DDP_DEFAULTS)

    def side(path: str, g: str) -> Fact:
        """The rung's rate on ``path`` as the answer's side (``path_<path>``): named by its path alone, since the
        question's workload names the DDP settings both sides ran."""
        return replace(facts[_rate_key(path, g, run.n)], key=f"path_{path}",
                       label=f"the same DDP settings {path_words(path)}")
    cands = [Candidate("unset", side(run.path0, rung), call="NCCL_P2P_DISABLE unset", group="direct")]
    cands += [Candidate(p, side(p, g), call=PATH_ENV[p], group="host") for p, g in on_host.items()]
    q = Question("ddp.path", "Should NCCL go through the host?", "NCCL_P2P_DISABLE", "unset",
                 "NCCL_P2P_DISABLE unset", "NCCL's default", f"{_workload(run)} with {words} on each path")
    a = decide(q, cands, facts)
    if a is not None:
        facts.advise(Advice(**{**a.__dict__, "needs": "gpus", "snippet": (
            "import os\n\n# before torch.distributed.init_process_group: NCCL picks the direct GPU-to-GPU path\n"
            "os.environ.pop(\"NCCL_P2P_DISABLE\", None)\nos.environ.pop(\"NCCL_SHM_DISABLE\", None)")
            if a.verdict == "keep" else a.snippet}))


# ----------------------------------------------------------------------------- chapter 12's gradient hop
def gradient_exchange(res) -> dict | None:
    """Chapter 11's model on N GPUs: the gradient bytes of one step, the one-GPU step time (no DDP), and for
    each path the time one all-reduce of all those bytes takes at the all-reduce bandwidth measured at that
    size (interpolated in log(size) between the measured sizes), with the bus bandwidth there. The path DDP
    ran on by default is the one the one-bucket DDP rung used."""
    if res is None or "rungs" not in res.tables or "bench" not in res.tables:
        return None
    r = res.table("rungs")
    r = r[r["status"] == "ok"]
    one = r[(r["world"] == 1) & (r["rung"] == "no_ddp")]
    many = r[(r["world"] > 1) & (r["rung"] == "ddp")]
    summ = bench_summary(res.table("bench"))
    summ = summ[summ["op"] == "all_reduce"]
    if one.empty or many.empty or summ.empty:
        return None
    grad = int(one["grad_bytes"].iloc[0])
    default = str(many["path"].iloc[0])
    paths = {}
    for path, part in summ.groupby("path"):
        alg = interp_algbw(part, grad)
        paths[str(path)] = dict(allreduce_ms=grad / (alg * 1e9) * 1e3,
                                busbw_GBps=_loglog(grad, part["size"], part["busbw_GBps"]),
                                ddp_steps_per_s=(float(many.loc[many["path"] == path, "steps_per_s"].iloc[0])
                                                 if (many["path"] == path).any() else None))
    if default not in paths:
        return None
    return dict(model=res.metadata.get("model"), world=int(many["world"].iloc[0]), grad_bytes=grad,
                cuda=bool(res.metadata.get("cuda")),
                step_ms=1e3 / float(one["steps_per_s"].iloc[0]), default=default, paths=paths)
