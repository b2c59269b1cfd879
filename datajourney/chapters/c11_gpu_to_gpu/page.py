"""What chapter 11's page says: it words the facts of :mod:`.analysis` (through :mod:`datajourney.core.phrasing`)
and shows the result's tables as evidence. No number in a sentence is computed here."""
from __future__ import annotations

import re

import pandas as pd

from datajourney.chapters.c11_gpu_to_gpu import analysis
from datajourney.chapters.c11_gpu_to_gpu.analysis import CHAPTER, PATH_ENV, option_words, path_words, topology_table
from datajourney.chapters.c11_gpu_to_gpu.analysis import analyse as _analyse
from datajourney.chapters.c11_gpu_to_gpu.reading import rung_label
from datajourney.chapters.common import facts_reader, on_paper
from datajourney.core import phrasing as say
from datajourney.core.facts import Fact, Facts
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.units import num, pct, size_label, span
from datajourney.toolkit.collectives import bench_summary

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)

__all__ = ["CHAPTER", "TOPO_LEGEND", "size_label", "topology_table"]

#: The paths as the tables and charts name them.
#: (short enough for a table cell and a chart panel's title; the environment each sets is in the jobs table)
PATH_LABELS = {"direct": "direct", "p2p_off": "P2P off", "p2p_shm_off": "P2P and SHM off",
               "gloo": "gloo (CPU)"}
#: What each link code of ``nvidia-smi topo -m`` means (its own legend).
TOPO_LEGEND = {
    "X": "self", "SYS": "PCIe + the interconnect between NUMA nodes (e.g. QPI/UPI)",
    "NODE": "PCIe + the interconnect between PCIe host bridges within a NUMA node",
    "PHB": "PCIe + a PCIe host bridge (typically the CPU)", "PXB": "several PCIe bridges, no host bridge",
    "PIX": "at most a single PCIe bridge", "NV": "NVLink, a bonded set of NV# links",
}
#: The codes a result records for what did not run, as a reader reads them.
REASONS = {"no_cuda": "no CUDA device: no GPU kernels to profile",
           "time_budget_s": "the job's time budget ran out before this rung"}
RUN_ON_GPUS = ("To rank the DDP options and NCCL's paths between GPUs, run this chapter on a host with two or more "
               "GPUs: `python -m datajourney run 11`.")
#: How the direct path's one-bucket DDP reads as the baseline of a host path.
DIRECT_BASE = "one-bucket DDP over the path NCCL picked"
#: The process counts the scaling curve is drawn for (the published results are from eight GPUs).
SCALE_POINTS = (1, 2, 4, 8)


# --------------------------------------------------------------------------- facts


def _finding(facts: Facts, key: str, text: str) -> Finding:
    f = facts[key]
    return Finding(key, text, value=f.number, unit=f.unit, published=f.published, interval=f.spread)


def _option(f: Fact) -> str:
    """The option a fact belongs to, as a reader reads it: "gradient_as_bucket_view with bucket_cap_mb=25"."""
    return say.text(option_words(f.setting["rung"]))


def _dev(facts: Facts) -> str:
    return "GPU" if facts.data["workload"]["cuda"] else "process"


def _devs(facts: Facts, k: int) -> str:
    return analysis.devices(facts.data["workload"]["cuda"], k)


def _n(facts: Facts) -> int:
    return int(facts.data["workload"]["world"])


def _env(path: str) -> str:
    return say.code(PATH_ENV[path])


def _kept(facts: Facts, *, runs: bool = False) -> str:
    """"lost 3.6%" (the throughput DDP lost at N), or "kept 107%" where it lost none."""
    s = facts["scaling_direct"]
    if s.number is not None and s.number >= 0:
        return f"lost {say.value(s, runs=runs)}"
    return f"kept {say.value(facts[f'scaling_eff_{_n(facts)}'], runs=runs)}"


def _option_action(facts: Facts) -> Action | None:
    """The chapter's data-parallel answer (every DDP setting against DDP's defaults), or, where the run did not
    measure DDP's defaults, that it did not, with the fastest setting it measured against one-bucket DDP."""
    a = facts.advice_for("ddp.option")
    if a is not None:
        return Action(say.advice(a, facts), a.snippet)
    d = facts.data.get("ddp_default") or {}
    b = facts.get("best_option_direct")
    if b is None or d.get("measured", True):
        return None
    return Action(f"For {say.text(facts.data['workload']['words'])}, DDP's defaults ({say.code(d['call'])}: "
                  f"{say.code(d['settings'])}) were not measured in this run, so no DDP setting is advised against "
                  f"them. The fastest setting it measured, {_option(b)}, ran "
                  f"{say.comparison(b, facts, baseline='one-bucket DDP')}.")


def _default_words(facts: Facts) -> str:
    """"; with DDP's defaults, each GPU lost 5.1%" where the run measured them, else that it did not."""
    f, lost, dev = facts.get("ddp_default_eff"), facts.get("ddp_default_loss"), _dev(facts)
    if f is None or lost is None:
        d = facts.data.get("ddp_default") or {}
        return "; DDP's defaults were not measured in this run" if d.get("measured") is False else ""
    call = say.code(facts.data["ddp_default"]["call"])
    return f"; with DDP's defaults ({call}), each {dev} {say.lost_or_kept(lost, f)}"


def _path_actions(facts: Facts) -> list[Action]:
    out = []
    pr = facts.data.get("path_rung") or {}
    for key in ("ddp.path", "ddp.host_option", "ddp.nccl_channels"):
        a = facts.advice_for(key)
        if a is not None:
            why = (" DDP's defaults did not run through the host (no `default` rung in `host_ladder`)."
                   if key == "ddp.path" and not pr.get("defaults", True) else "")
            out.append(Action(say.advice(a, facts) + why, a.snippet))
    if pr.get("host") and pr.get("rung") is None:
        out.append(Action(f"Whether NCCL should go through the host is not comparable in this run: no rung ran with "
                          f"the same DDP settings on both paths (over the path NCCL picked: "
                          f"{say.and_list([say.text(w) for w in pr['direct_rungs']])}; with {_env(pr['host'])}: "
                          f"{say.and_list([say.text(w) for w in pr['host_rungs']])}). One rung measured on both, "
                          f"e.g. `default` in `host_ladder`, would settle it."))
    c = facts.get("host_path_cost")
    if facts.advice_for("ddp.path") is None and c is not None:
        out.append(Action(f"Forced through the host with {_env(c.setting['path'])}, one-bucket DDP ran "
                          f"{say.comparison(c, baseline=DIRECT_BASE)}: no direct path to keep."))
    return out


def opening(facts) -> Opening:
    """What chapter 11 opens with. On GPUs: the share of one GPU's throughput each GPU kept with DDP's fastest
    option, what the slowest forced host path cost, and the option that closed most of its gap; then the
    settings to use. Without a GPU: what gloo on the CPU measured, said as such, and where to run for GPU
    numbers."""
    facts = facts_of(facts)
    dev = _dev(facts)
    one_dev = [_finding(facts, "ddp_one_device", _ddp_one_flagged(facts) if facts.flagged("ddp_one_device") else
                        f"DDP on one {dev} ran "
                        f"{say.comparison(facts['ddp_one_device'], baseline='the same model without DDP')}.")
               ] if "ddp_one_device" in facts else []
    if "scaling_direct" not in facts:
        return Opening(one_dev, [Action(RUN_ON_GPUS)])
    s = facts["scaling_direct"]
    n = _n(facts)
    if facts.data["workload"]["cuda"]:
        fastest = ("DDP's defaults" if s.setting.get("rung") == "default"
                   else f"DDP's fastest setting, {_option(s)}{_default_words(facts)}")
        out = [_finding(facts, "scaling_direct", f"On {_devs(facts, n)} over NCCL, each GPU {_kept(facts)} of one "
                        f"GPU's steps/s without DDP, with {fastest}.")]
        c = facts.get("host_path_cost")
        if c is not None:
            out.append(_finding(facts, "host_path_cost", f"Forced through the host with {_env(c.setting['path'])}, "
                                f"one-bucket DDP ran {say.comparison(c, baseline=DIRECT_BASE)}."))
        b, g = facts.get("best_option_host"), facts.get("gap_closed_host")
        if b is not None:
            gap = f", closing {say.value(g, runs=False)} of its gap to one GPU without DDP" if g is not None else ""
            out.append(_finding(facts, "best_option_host", f"There, {_option(b)} ran "
                                f"{say.comparison(b, baseline='one-bucket DDP')}{gap}."))
        actions = [_option_action(facts), *_path_actions(facts)]
    else:
        model = say.code(facts.data["workload"]["model"])
        out = [_finding(facts, "scaling_direct", f"No GPU here: in {n} gloo processes training {model}, each process "
                        f"{_kept(facts)} of one process's steps/s without DDP, with the fastest DDP setting, "
                        f"{_option(s)}{_default_words(facts)}; GPU numbers on this page are the reference host's.")]
        out += one_dev
        b = facts.get("best_option_direct")
        if b is not None:
            out.append(_finding(facts, "best_option_direct", f"The fastest DDP option on gloo, {_option(b)}, ran "
                                f"{say.comparison(b, baseline='one-bucket DDP')}."))
        actions = [_option_action(facts), Action(RUN_ON_GPUS)]
    return Opening(out[:3], [a for a in actions if a is not None][:3])


# --------------------------------------------------------------------------- key results
def findings(facts) -> list[Finding]:
    """The chapter's key results, each wording one fact (its key) and the facts beside it."""
    facts = facts_of(facts)
    out = []
    if "ddp_one_device" in facts:
        out.append(_finding_ddp_one(facts))
    if "scaling_direct" in facts:
        out.append(_finding_scaling(facts))
    if "host_path_collapse" in facts:
        out.append(_finding_host_path(facts))
    c = _finding_options(facts)
    if c is not None:
        out.append(c)
    if "allreduce_busbw" in facts:
        out.append(_finding_bandwidth(facts))
    c = _finding_curve(facts)
    if c is not None:
        out.append(c)
    return out[:6]


def _ddp_one_flagged(facts: Facts) -> str:
    """DDP on one device measured faster than the same model without it: impossible (DDP only adds work)."""
    dev = _dev(facts)
    return (f"**Flagged: a measurement problem.** DDP on one {dev} ran {say.value(facts['ddp_one_gpu'], runs=False)}"
            f" against {say.value(facts['one_gpu'], runs=False)} without DDP. DDP only adds work on one {dev}, so the "
            "two measurements cannot both be right: this run's DDP cost on one device is not a finding (run the "
            "chapter again; the cause was not measured).")


def _finding_ddp_one(facts: Facts) -> Finding:
    dev = _dev(facts)
    if facts.flagged("ddp_one_device"):
        return _finding(facts, "ddp_one_device", _ddp_one_flagged(facts))
    return _finding(facts, "ddp_one_device",
                    f"**DDP on one {dev}** ran {say.value(facts['ddp_one_gpu'])}: "
                    f"{say.comparison(facts['ddp_one_device'], facts)} ({say.value(facts['one_gpu'], runs=False)}).")


def _rate(facts: Facts, path: str, rung: str, k: int | None = None) -> Fact | None:
    return facts.get(f"rate_{path}_{analysis.slug(rung)}_{k or _n(facts)}")


def _finding_scaling(facts: Facts) -> Finding:
    s = facts["scaling_direct"]
    n, dev, path = _n(facts), _dev(facts), s.setting["path"]
    base = _rate(facts, path, "ddp")
    top = _rate(facts, path, s.setting["rung"])
    plain = (f"one-bucket DDP ran {say.value(base, runs=False)} per {dev}; " if base is not None and base is not top
             else "")
    return _finding(facts, "scaling_direct",
                    f"**DDP on {_devs(facts, n)}**: {plain}the fastest setting, {_option(s)}, ran "
                    f"{say.value(top, runs=False)}: each {dev} {_kept(facts, runs=True)} of one {dev}'s throughput "
                    "without DDP.")


def _finding_host_path(facts: Facts) -> Finding:
    parts = []
    for h in analysis.HOST_ORDER:
        c = facts.get(f"host_cost_{h}")
        if c is None:
            continue
        share = facts.get("nccl_share_host")
        share = share if share is not None and share.setting["path"] == h else None
        parts.append(f"{path_words(h)} {say.value(_rate(facts, h, 'ddp'), runs=False)}, "
                     f"{say.comparison(c, baseline='the direct path')}"
                     + (f", NCCL kernels {say.value(share)} of the step" if share is not None else ""))
    return _finding(facts, "host_path_collapse",
                    "**Forced off the direct path** (an emulation), one-bucket DDP ran " + "; ".join(parts)
                    + ". One GPU without DDP ran "
                    + say.comparison(facts["host_path_collapse"], baseline="one-bucket DDP on the slowest path") + ".")


def _finding_options(facts: Facts) -> Finding | None:
    """Every option against one-bucket DDP (the ladder's table), and the one that closed most of the gap to one device
    on the direct path."""
    key = "compression" if "compression" in facts else "best_option_direct"
    if key not in facts:
        return None
    # the host path's best is the opening's own finding (best_option_host); here, the direct path's
    b, g = facts.get("best_option_direct"), facts.get("gap_closed_direct")
    cap = facts.data["workload"].get("bucket_cap_mb")
    base = "one-bucket DDP" + (f" ({say.text(f'bucket_cap_mb={cap}')})" if cap else "")
    closed = ("" if b is None or g is None else
              f": {_option(b)} {path_words(b.setting['path'])} closed {say.value(g)} of the gap between one-bucket "
              f"DDP and one {_dev(facts)} without DDP, the most of any option")
    skipped = "".join(f" {say.text(option_words(x['rung']))} was skipped: "
                      f"{say.text(REASONS.get(x['reason'], x['reason'] or 'no reason given'))}."
                      for x in facts.data["skipped"] if "budget" not in str(x["reason"]))
    text = f"**DDP options against {base}** (each in the ladder's table){closed}.{skipped}"
    return _finding(facts, key, text)


def _finding_bandwidth(facts: Facts) -> Finding:
    f = facts["allreduce_busbw"]
    others = "; ".join(f"{say.value(facts[k], runs=False)} {path_words(facts[k].setting['path'])}" for k in facts.facts
                       if k.startswith("allreduce_busbw_"))
    pred = []
    for key, words in (("prediction_one_bucket", "with one bucket"), ("prediction_many_buckets", "with several")):
        p = facts.get(key)
        if p is not None:
            pred.append(f"{say.value(p, runs=False)} the prediction {words} (mean of {p.n} rungs)")
    ptxt = (" Profiled NCCL kernel time per step was " + " and ".join(pred) + ".") if pred else ""
    return _finding(facts, "allreduce_busbw",
                    f"**All-reduce bus bandwidth** at {size_label(f.setting['bytes'])} on {_devs(facts, _n(facts))}: "
                    f"{say.value(f)} {path_words(f.setting['path'])}" + (f"; {others}" if others else "") + "."
                    + ptxt)


def _effs(facts: Facts) -> list[Fact]:
    return sorted((f for k, f in facts.facts.items() if re.fullmatch(r"scaling_eff_\d+", k)),
                  key=lambda f: f.setting["gpus"])


def _bandwidth_curve(facts: Facts, host_words: str) -> str:
    """The all-reduce's bus bandwidth at each count, on the direct path and with P2P off (``host_words`` names it)."""
    bw = [f for k, f in facts.facts.items() if k.startswith("busbw_")]
    if not bw:
        return ""

    def at(path):
        return ", ".join(f"{say.value(f, runs=False)} at {f.setting['gpus']}"
                         for f in sorted(bw, key=lambda f: f.setting["gpus"]) if f.setting["path"] == path)
    host = at("p2p_off")
    return (f"all-reduce bus bandwidth at {size_label(bw[0].setting['bytes'])}: {at(facts.data['workload']['path'])}"
            + (f", and {host_words} {host}" if host else ""))


def _curve_sentence(facts: Facts) -> str:
    """One run's curve: the share of one device each count kept, with the setting that kept it, and the all-reduce
    bus bandwidth."""
    dev = _dev(facts)
    text = (f"each {dev} kept " + ", ".join(f"{say.value(f, runs=False)} at {f.setting['gpus']} ({_option(f)})"
                                           for f in _effs(facts))
            + f" of one {dev}'s throughput without DDP")
    bw = _bandwidth_curve(facts, path_words("p2p_off"))
    return text + (f"; {bw}" if bw else "")


def _finding_curve(facts: Facts) -> Finding | None:
    effs = _effs(facts)
    if len(effs) < 2:
        return None
    worst = min(effs, key=lambda f: f.number)
    return _finding(facts, worst.key, "**Scaling with the number of GPUs:** " + _curve_sentence(facts) + ".")


# --------------------------------------------------------------------------- published metrics
PUBLISHED_FACTS = ("one_gpu", "ddp_one_gpu", "ddp_slowdown_direct", "host_path_collapse", "host_path_collapse_shm",
                   "nccl_share_host", "bucket_view_gain", "bf16_gain_host", "powersgd_host")


def key_metrics(facts) -> dict:
    """The published metrics' counterparts: metric -> (value, None), from the facts that carry them."""
    facts = facts_of(facts)
    return {f.published: (f.number, None) for k in PUBLISHED_FACTS if (f := facts.get(k)) is not None
            and f.published and f.number is not None}


# --------------------------------------------------------------------------- notes
def no_gpu_text(res, ref) -> str:
    """Without a GPU: what the run measured instead, and the reference run shown beside it (from both runs' facts)."""
    if facts_of(res).data["workload"]["cuda"]:
        return ""
    t = ("This machine has no CUDA device: the jobs ran on the CPU with the gloo backend and a small ViT, so "
         "the DDP code paths, hooks and collectives ran, but there are no NCCL transports, no GPU kernels and no "
         "forced host paths here. The processes share this machine's cores, so their steps/s say how the code "
         "path behaves, not how GPUs would.")
    if ref is not None:
        wl = facts_of(ref).data["workload"]
        device = wl.get("device_name") or "GPU"
        t += (f" Below, next to this run's tables, the reference run ({num(wl['world'])} × {say.text(device)}) is "
              "shown, labelled.")
    return t


def scope_text(res, ref) -> str:
    """Which scale this run (and the reference run) measured (from the runs' facts)."""
    def one(r, who):
        wl = facts_of(r).data["workload"]
        dev = "GPU" if wl["cuda"] else "process"
        batch = f", batch {num(wl['batch_size'])} per {dev}" if wl["batch_size"] is not None else ""
        nccl = "".join(f" {say.code(v)}" for v in wl.get("nccl") or [])
        return (f"{who} ran the N-{dev} jobs on {analysis.devices(wl['cuda'], wl['world'])} "
                f"({say.text(wl.get('device_name') or 'unknown device')}, {say.code(wl['backend'])}{nccl}), model "
                f"{say.code(wl['model'])}{batch}.")
    t = one(res, "This run")
    if ref is not None and ref is not res:
        t += " " + one(ref, "The reference run")
    counts = sorted({int(facts_of(r).data["workload"]["world"]) for _, r in scaling_sources(res, ref)})
    t += (" The code takes any number of GPUs (parameter `gpus`); the runs shown measured "
          + say.and_list([num(k) for k in counts]) + " GPUs of one host"
          + (": the published figures' eight GPUs have no counterpart here." if max(counts) < 8 else "."))
    return t


def sweep_text(facts) -> str:
    """The bucket sweep: the fastest size (or the sizes level with it: their windows overlap, so none is named
    fastest), the next one and the slowest, each against the top."""
    facts = facts_of(facts)
    c = facts.get("sweep_best")
    if c is None:
        return ""
    d = facts.data["sweep"]
    hi, lo, nxt = facts[c.of], facts[c.basis], facts[facts["sweep_next"].basis]

    def size(f: Fact) -> str:
        return say.code(f"bucket_cap_mb={d['caps'][f.key]}")

    head = f"Over the sweep ({say.text('static_graph + gradient_as_bucket_view')} at each bucket size), "
    top = [hi, *(facts[k] for k in d["level"])]
    if len(top) > 1:
        parts = [f"{size(f)} at {say.value(f)}" for f in top]
        text = (head + ", ".join(parts[:-1]) + f" and {parts[-1]} were level at the top: their "
                "windows' ranges overlap, so none of them is named the fastest")
    else:
        text = head + f"{size(hi)} was fastest at {say.value(hi)}"
        if nxt is not lo:
            text += f", {say.comparison(facts['sweep_next'], baseline=f'the next, {size(nxt)}')}"
    if lo not in top:
        text += f"; {size(lo)} was slowest at {say.value(lo)}, and {size(hi)} ran " \
                f"{say.comparison(c, baseline=size(lo))}"
    return text + "."


def profile_note(facts) -> str:
    facts = facts_of(facts)
    big, small = facts.get("overlap_largest_bucket"), facts.get("overlap_smallest_bucket")
    if big is None or small is None:
        err = facts.data.get("profile_error")
        return "No per-kernel profile in this run" + (f" ({say.text(REASONS.get(err, err))})." if err else ".")
    copies = ""
    sg, bv, c = facts.get("copy_ms_static_graph"), facts.get("copy_ms_bucket_view"), facts.get("copies_bucket_view")
    if sg is not None and bv is not None and c is not None:
        fewer = c.number is not None and c.number < 1 and not c.level
        copies = (f"Device-to-device copies took {say.value(sg)} per step with static_graph alone and "
                  f"{say.value(bv)} with gradient_as_bucket_view: "
                  + ("the option removes the copies into and out of the buckets. " if fewer
                     else "the option did not remove copies here. "))
    kinds = [x["kind"] for x in facts.data["profile_flags"]]   # each a row of the profile table, marked there
    flags = ""
    if "slow" in kinds:
        k = kinds.count("slow")
        flags += (f" In {num(k)} {'row' if k == 1 else 'rows'} the profiled steps ran slower than the timed ones "
                  f"(“{PROFILE_FLAG_WORDS['slow']}”, last column): those rows describe the profiled steps.")
    if "idle" in kinds:
        k = kinds.count("idle")
        flags += f" In {num(k)} {'row' if k == 1 else 'rows'} the GPU sat idle waiting for the host (“GPU idle”)."
    return (copies + f"With the largest bucket (bucket_cap_mb={big.setting['bucket_cap_mb']}) "
            f"{say.value(big, runs=False)} of the NCCL kernel time ran beside a compute kernel (median of its rungs), "
            f"with the smallest (bucket_cap_mb={small.setting['bucket_cap_mb']}) {say.value(small, runs=False)}."
            + flags)


# --------------------------------------------------------------------------- where the per-GPU loss goes
#: Each share of the decomposition as the page names it (the chapter's prose says what each one compares).
SHARE_WORDS = {"bookkeeping": "DDP's own bookkeeping", "apart": "ranks running apart",
               "exposed": "exposed communication", "slowed": "NCCL kernels slowed by overlapping compute"}
#: Why a part of the decomposition was not measured, by the code the facts carry.
NOT_MEASURED = {"no_cuda": "no CUDA device, so no GPU kernels to profile",
                "no_profile": "no NCCL kernel profile of the training steps or of the all-reduces alone "
                              "(profile_steps = 0, or the profiler failed)",
                "not_measured": "this run's result holds no such measurement (it ran before the chapter measured it)",
                "no_nccl": "gloo has no NCCL channels; the NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS settings apply "
                           "to NCCL only"}
#: A result from before the no-sync step was measured on one GPU sets ranks apart against DDP on one GPU.
OLDER_BASELINE = (" This run measured no no-sync step on one GPU, so ranks running apart is set against DDP on one "
                  "GPU (which also does the sync work that no-sync skips) and exposed communication holds all of the "
                  "sync cost.")


def loss_text(facts) -> str:
    """At each count: the explained rung's gap and its largest share (every share is the loss table's; all from the
    facts), or why not."""
    facts = facts_of(facts)
    d = facts.data.get("loss") or {"status": "not_measured"}
    dev = _dev(facts)
    if d["status"] != "ok":
        return f"**Where each {dev}'s loss goes:** not measured: {NOT_MEASURED[d['status']]}."
    out = []
    for row in d["rows"]:
        k = row["processes"]
        top = facts[f"loss_largest_{k}"]
        share = str(top.setting["share"])
        slow = facts.get(f"nccl_slowdown_{k}")
        part = facts.get(f"loss_{share}_{k}")
        out.append(f"on {_devs(facts, k)}, {say.value(facts[f'loss_gap_{k}'], runs=False)} of one {dev}'s steps/s "
                   f"per {dev}, the largest is {SHARE_WORDS[share]}"
                   + (f" ({say.value(part, runs=False)})" if part is not None else "")
                   + (f", NCCL kernels took {say.value(slow, runs=False)} their time alone" if slow is not None
                      else ""))
    missing = ("" if d.get("slowed") is None else
               f" NCCL kernels slowed by overlapping compute: not measured here ({NOT_MEASURED[d['slowed']]}), so "
               "the whole sync cost counts as exposed communication.")
    return (f"**Where each {dev}'s loss goes**, with {say.text(rung_label(d['rung']).removeprefix('+ '))} (every "
            "share in the table): "
            + "; ".join(out) + "." + missing + (OLDER_BASELINE if d.get("apart_from") != "no_sync_one" else "")
            + _negative_shares(d["rows"], dev))


def _negative_shares(rows, dev: str) -> str:
    """A share below zero (a step faster than its baseline), set against the windows' spread: within it, noise;
    beyond it, flagged as not explained by this run."""
    out = []
    for row in rows:
        for s in SHARES_SHOWN:
            v = row.get(s)
            if v is None or v >= 0 or "noise" not in row:
                continue
            within = -v <= row["noise"]
            out.append(f"{SHARE_WORDS[s]} on {row['processes']} {dev}s at {v:.1f}% is ".replace("-", "−")
                       + (f"within the windows' spread ({row['noise']:.1f}%), so it is noise" if within else
                          f"beyond the windows' spread ({row['noise']:.1f}%): those steps ran faster than their "
                          "baseline, which this run does not explain (flagged as a measurement to check)"))
    return (" Negative shares: " + "; ".join(out) + ".") if out else ""


SHARES_SHOWN = ("bookkeeping", "apart", "exposed", "slowed")
#: The loss table's columns that could be read as one another: the profiler's NCCL time beside no compute kernel (ms
#: of a profiled step) and each share of the loss (step-time differences of timed steps, in points).
LOSS_COLUMNS = {"nccl_exposed_ms": "NCCL beside no compute, profiled ms",
                **{s: f"loss from {SHARE_WORDS[s]} (points)" for s in SHARES_SHOWN}}


def loss_table(facts) -> pd.DataFrame:
    """The decomposition's step times (ms) and shares (points of one device's steps/s), one row per count."""
    d = facts_of(facts).data.get("loss") or {}
    rows = d.get("rows") or []
    return pd.DataFrame([{"processes": r["processes"], "one, no DDP ms": r["t_plain_ms"],
                          "DDP on one ms": r["t_ddp_one_ms"], "no sync on one ms": r.get("t_no_sync_one_ms"),
                          "no sync ms": r["t_no_sync_ms"],
                          "with sync ms": r["t_sync_ms"], "NCCL in training ms": r["nccl_train_ms"],
                          LOSS_COLUMNS["nccl_exposed_ms"]: r["nccl_exposed_ms"], "NCCL alone ms": r["nccl_alone_ms"],
                          "all-reduces alone, wall ms": r["alone_step_ms"], "buckets": r["buckets"],
                          "loss (points)": r["gap"], **{LOSS_COLUMNS[s]: r[s] for s in SHARES_SHOWN},
                          "largest share": SHARE_WORDS.get(r["largest"], r["largest"])} for r in rows])


def channels_text(facts) -> str:
    """The NCCL channel counts tried against NCCL's own choice, the answer, or why not tried."""
    facts = facts_of(facts)
    d = facts.data.get("channels") or {"status": "not_measured"}
    if d["status"] != "ok":
        return f"**NCCL channel count:** {'skipped' if d['status'] == 'skipped' else 'not measured'}: " \
               f"{NOT_MEASURED[d.get('reason') or d['status']]}."
    parts = []
    for row in d["rows"]:
        f = facts[f"channels_{row['channels']}"]
        setup = f", NCCL set up {num(row['used'])} channels" if row.get("used") else ""
        name = "NCCL's own choice" if row["channels"] == "unset" else f"{num(row['channels'])} channels"
        parts.append(f"{name}: {say.value(f)}{setup}")
    return ("**NCCL channel count** (each setting its own launch of the ranks), "
            f"{say.text(rung_label(d['rung']).removeprefix('+ '))} on {_devs(facts, _n(facts))}: "
            + "; ".join(parts) + ".")


def target_text(facts) -> str:
    """The best setting measured on N devices (the ladder's fastest, or an NCCL channel count with the explained rung)
    as a share of one device without DDP, followed by the chapter's answer on that setting, in the opening's words:
    the page states what was kept and what the answer decides, never a verdict of its own (the declared target is the
    benchmarks' and the tests', in ``facts.data["target"]``)."""
    facts = facts_of(facts)
    f = facts.get("target_best")
    if f is None:
        return ""
    dev = _dev(facts)
    ch = f.setting.get("channels")
    how = say.text(option_words(f.setting["rung"]))
    nccl = ch not in (None, "unset")
    how += f" with {num(ch)} NCCL channels" if nccl else ""
    # NCCL's channel count is not a DDP setting: the fastest DDP setting (the loss the opening states) is another row
    counting = ", counting NCCL's own settings besides DDP's" if nccl else ""
    head = (f"**The best setting measured** on {_devs(facts, _n(facts))}{counting}, {how}, kept "
            f"{say.value(f, runs=False)} of one {dev}'s steps/s per {dev}.")
    a = facts.advice_for("ddp.nccl_channels" if nccl else "ddp.option")
    return head if a is None else f"{head} {say.advice(a, facts)}"


def spread_notes(facts) -> str:
    """A comment for every rung whose windows spread by more than findings.HIGH_SPREAD (from the facts' data)."""
    facts = facts_of(facts)
    notes = [f"* {say.text(x['label'])} varied over {num(x['low'])}–{num(x['high'], 'steps/s')} in {x['n']} windows "
             f"(coefficient of variation {say.share(x['cv'])}): read it as a range, not a point."
             for x in facts.data["spread"]]
    if not notes:
        return ""
    cause = ("" if facts.data["workload"]["cuda"] else " Here the processes share few CPU cores with whatever else "
             "runs, which is the likely cause; a GPU host's windows are far tighter (see the reference run).")
    return "\n".join(notes) + cause


def powersgd_state(facts) -> str:
    st = facts_of(facts).data["powersgd_state"]
    if not st:
        return ""
    return "PowerSGD ran with " + ", ".join(say.setting(k, v) for k, v in st.items()) + "."


def topology_text(facts) -> str:
    """The kinds of link between the run's GPU pairs (from the facts), each with ``nvidia-smi``'s meaning."""
    t = facts_of(facts).data.get("topology") or {"read": False, "links": []}
    if not t["read"]:
        return "No `nvidia-smi` here: no GPU topology to read."
    kinds = t["links"]
    return ("GPU pairs are linked by " + ", ".join(f"{say.code(k)} ({TOPO_LEGEND.get(k, 'see nvidia-smi legend')})"
                                                    for k in kinds) + ".") if kinds else "Only one GPU."


def _fenced(text: str) -> str:
    """A code block that nothing inside it can end: fenced by more backticks than its longest run."""
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}text\n{text}\n{fence}"


def failed_jobs_text(facts) -> str:
    """Each torchrun job that did not finish, why, and the end of its log (from the facts)."""
    out = []
    for j in facts_of(facts).data.get("failed_jobs") or []:
        why = f": less than {num(j['min_s'])} s of {say.code(j['reason'])} left" if j.get("min_s") is not None else ""
        out.append(f"Job {say.code(j['job'])} {say.text(j['status'])}{why}."
                   + (f" Its log ends:\n\n{_fenced(j['error_tail'])}" if j.get("error_tail") else ""))
    return "\n\n".join(out)


# --------------------------------------------------------------------------- tables (evidence)
def _path(p) -> str:
    return PATH_LABELS.get(p, str(p))


def _against_one_bucket(facts: Facts, path, world, rung) -> str:
    """A ladder row against one-bucket DDP on its path and process count (the analysis's ``option_*`` facts)."""
    if str(rung).partition("@")[0] == "ddp" and int(world) == _n(facts):
        return "baseline"
    f = facts.get(f"option_{path}_{analysis.slug(str(rung))}_{int(world)}")
    return "—" if f is None else (say.ratio_words(f) or "—")


def ladder_table(res) -> pd.DataFrame:
    r = res.table("rungs")
    facts = facts_of(res)
    rows = []
    for _, x in r.iterrows():
        def g(k, x=x):
            return x[k] if k in x and not pd.isna(x[k]) else None
        rows.append({"path": _path(x["path"]), "processes": int(x["world"]), "rung": rung_label(x["rung"]),
                     "steps/s (mean)": g("steps_per_s"),
                     "min–max": span(g("sps_min"), g("sps_max")) if g("sps_min") is not None else "—",
                     "forward ms": g("forward_ms"),
                     "backward ms (with waits)": g("backward_ms"),
                     "optimizer ms": g("optimizer_ms"),
                     "against one-bucket DDP": _against_one_bucket(facts, x["path"], x["world"], x["rung"]),
                     "status": x["status"] if x["status"] == "ok" else f"{x['status']}: {g('reason')}"})
    out = pd.DataFrame(rows)
    return out.drop(columns="status") if len(out) and (out["status"] == "ok").all() else out


#: How the profile table marks a row whose profiled steps the analysis flagged (``profile_flags``).
PROFILE_FLAG_WORDS = {"slow": "slower than timed", "idle": "GPU idle {idle} per step"}


def _profile_flag(flags: dict, path, rung, world) -> str:
    x = flags.get((str(path), str(rung), int(world)))
    return "—" if x is None else PROFILE_FLAG_WORDS[x["kind"]].format(idle=num(x["idle_ms"], "ms"))


def profile_table(res) -> pd.DataFrame:
    """Every profiled rung (the N-process and the scaling jobs': :func:`analysis.profiled`), each flagged row marked
    as the analysis flagged it (``profile_flags``, which :func:`profile_note` counts)."""
    r = analysis.profiled(res)
    if r.empty:
        return pd.DataFrame()
    flags = {(x["path"], x["rung"], x.get("world", 0)): x for x in facts_of(res).data.get("profile_flags") or []}
    out = pd.DataFrame({"path": [_path(p) for p in r["path"]], "rung": [rung_label(x) for x in r["rung"]],
                         "processes": r["world"], "timed step ms": 1e3 / r["steps_per_s"],
                         "GPU busy ms": [analysis._busy_ms(x) for _, x in r.iterrows()],
                         "NCCL kernels ms": r["prof_nccl_ms"], "beside compute ms": r["prof_overlap_ms"],
                         "NCCL share %": [100 * (analysis._nccl_share(x) or 0) for _, x in r.iterrows()],
                         "NCCL kernels/step": r["prof_nccl_kernels"]})
    if flags:
        out["profiled steps"] = [_profile_flag(flags, p, g, w) for p, g, w in zip(r["path"], r["rung"], r["world"])]
    return out


def transports_table(res) -> pd.DataFrame:
    t = res.table("transports")
    if t.empty:
        return t
    g = t.groupby(["path", "via"]).size().reset_index(name="channel connections")
    g["path"] = [_path(p) for p in g["path"]]
    return g.rename(columns={"via": "NCCL transport (via)"})


#: The collective table's columns as a reader reads them.
BENCH_COLUMNS = {"op": "collective", "path": "path", "size": "message size", "time_ms": "time (ms)",
                 "algbw_GBps": "algorithm bandwidth (GB/s)", "busbw_GBps": "bus bandwidth (GB/s)",
                 "busbw_min": "bus bandwidth, lowest (GB/s)", "busbw_max": "bus bandwidth, highest (GB/s)",
                 "repeats": "repeats"}


def bench_frame(res) -> pd.DataFrame:
    """The collectives' summary for the chart: median time, algorithm and bus bandwidth per path, op and size."""
    if "bench" not in res.tables:
        return pd.DataFrame()
    s = bench_summary(res.table("bench"))
    s["series"] = [f"{o} · {_path(p)}" for o, p in zip(s["op"], s["path"])]
    return s


def bench_table(res) -> pd.DataFrame:
    """:func:`bench_frame` as readers read it: named columns, sizes in KiB/MiB/GiB (the algorithm bandwidth is the size
    over the time, so only the bus bandwidth is a column)."""
    s = bench_frame(res)
    if s.empty:
        return s
    s = s.drop(columns=[c for c in ("series", "algbw_GBps") if c in s]).assign(
        path=[_path(p) for p in s["path"]], size=[size_label(int(x)) for x in s["size"]],
        busbw_min=[span(a, b) for a, b in zip(s["busbw_min"], s["busbw_max"], strict=True)])
    return s.drop(columns="busbw_max").rename(columns={**BENCH_COLUMNS, "busbw_min": "bus bandwidth, min–max"})


def prediction_table(res) -> pd.DataFrame:
    p = analysis.prediction(res)
    if p is None or p.empty:
        return pd.DataFrame()
    return pd.DataFrame({"path": [_path(x) for x in p["path"]], "rung": [rung_label(x) for x in p["rung"]],
                         "all-reduces per step": p["buckets"], "counted from": p["buckets_from"],
                         "gradient MB": p["grad_bytes"] / 1e6, "predicted all-reduce ms": p["predicted_ms"],
                         "profiled NCCL ms": p["profiled_nccl_ms"]})


def jobs_table(res) -> pd.DataFrame:
    rows = [{"job": j["job"], "path": _path(j["path"]), "processes": j["nproc"],
             "extra environment": " ".join(f"{k}={v}" for k, v in (j.get("env") or {}).items()) or "—",
             "status": j["status"], "seconds": j.get("wall_s")}
            for j in res.metadata.get("jobs", [])]
    return pd.DataFrame(rows)


def ladder_frame(res) -> pd.DataFrame:
    """mean/std/min/max/n of steps/s per rung and path (for :func:`plotting.bars_facets`)."""
    w = res.table("windows")
    if w.empty:
        return pd.DataFrame()
    cuda = bool(res.metadata.get("cuda"))
    g = w.groupby(["job", "path", "world", "rung"], sort=False)["steps_per_s"]
    s = g.agg(["mean", "std", "min", "max", "size"]).reset_index().rename(columns={"size": "n"})
    s["label"] = [f"{analysis.devices(cuda, wd)} · {_path(p)}" for wd, p in zip(s["world"], s["path"])]
    s["step"] = [rung_label(x) for x in s["rung"]]
    return s


def phases_frame(res) -> pd.DataFrame:
    """Per-step phases of every timed rung (ms): forward, backward split into compute and the NCCL
    time that overlapped nothing (from the profile, at most the backward phase), optimizer."""
    r = res.table("rungs")
    r = r[r["status"] == "ok"] if len(r) else r
    if r.empty or "forward_ms" not in r:
        return pd.DataFrame()
    cuda = bool(res.metadata.get("cuda"))
    exposed = r["prof_exposed_nccl_ms"].fillna(0.0) if "prof_exposed_nccl_ms" in r else 0.0
    exposed = pd.concat([pd.Series(exposed, index=r.index), r["backward_ms"]], axis=1).min(axis=1)
    return pd.DataFrame({"path": [f"{analysis.devices(cuda, w)} · {_path(p)}" for w, p in zip(r["world"], r["path"])],
                         "rung": [rung_label(x) for x in r["rung"]], "forward": r["forward_ms"],
                         "backward": r["backward_ms"] - exposed, "exposed": exposed, "optimizer": r["optimizer_ms"],
                         "step": 1e3 / r["steps_per_s"]})


# --------------------------------------------------------------------------- scaling with N
def scaling_sources(res, ref) -> list[tuple[str, object]]:
    """The runs the scaling curve is drawn from: this run, the reference run and the committed
    reference runs of the same host kind with more GPUs (each labelled by its GPU count)."""
    from datajourney.core import results

    out, seen = [], set()
    for who, r in [("reference run" if ref is res else "this run", res), ("reference run", ref),
                   *[("further reference", x) for x in results.extra_references(CHAPTER)]]:
        if r is None or r.run_id in seen:
            continue
        wl = facts_of(r).data["workload"]
        if not wl["cuda"] and who != "this run":
            continue
        seen.add(r.run_id)
        out.append((f"{who}, {analysis.devices(wl['cuda'], wl['world'])}", r))
    return out


def scaling_long(sources) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The curve's points (steps/s and bus bandwidth) of every source, from its facts' data, with a ``run``
    column."""
    steps, bw = [], []
    for label, r in sources:
        d = facts_of(r).data
        t = pd.DataFrame(d["scaling"])
        if len(t) > 1:
            steps.append(t.assign(run=label))
        if d["scaling_bench"]:
            bw.append(pd.DataFrame(d["scaling_bench"]).assign(run=label))
    steps = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
    bw = pd.concat(bw, ignore_index=True) if bw else pd.DataFrame()
    if len(steps):  # chart columns: the share of one GPU in percent, one line per series and path
        steps = steps.assign(line=[s if p in ("direct", "gloo") else f"{s} · {_path(p)}"
                                   for s, p in zip(steps["series"], steps["path"])],
                             pct=100 * steps["of_one"], pct_min=100 * steps["of_one_min"],
                             pct_max=100 * steps["of_one_max"])
    if len(bw):
        bw = bw.assign(line=bw["path"].map(_path))
    return steps, bw


def scaling_text(sources) -> str:
    """The all-reduce's bus bandwidth at each count of every run shown (each count's share of one GPU is the scaling
    table's), and the counts no run measured."""
    parts, seen = [], set()
    for label, r in sources:
        f = facts_of(r)
        if len(_effs(f)) + (1 if "one_gpu" in f else 0) < 2:
            continue
        bw = _bandwidth_curve(f, f"with {_path('p2p_off')}")
        parts.append(f"{say.text(label)}, {bw}" if bw else say.text(label))
        seen |= {1} | {e.setting["gpus"] for e in _effs(f)}
    if not parts:
        return "No run shown here measured more than one process count."
    missing = [k for k in SCALE_POINTS if k not in seen]
    return ("**Scaling with the number of GPUs** (each count's share of one GPU: the table): " + "; ".join(parts) + "."
            + (f" Not measured by any run shown here: {', '.join(map(str, missing))} GPUs." if missing else ""))


def scaling_display(steps: pd.DataFrame) -> pd.DataFrame:
    """The scaling table as shown: one row per run, process count, path and series (the rung names the series; the
    best option's is marked)."""
    return pd.DataFrame({"run": steps["run"], "GPUs": steps["processes"].astype(int),
                         "path": steps["path"].map(_path),
                         "rung": [("best: " if s == "best option" else "") + rung_label(r)
                                  for s, r in zip(steps["series"], steps["rung"], strict=True)],
                         "steps/s per GPU": steps["mean"],
                         "% of one GPU": steps["pct"],
                         "NCCL share of the step": [None if v is None or pd.isna(v) else say.share(v)
                                                    for v in steps["nccl_share"]]})


# --------------------------------------------------------------------------- an exercise on paper
def _profiled_slower(facts: Facts, rung: str, world: int, dev: str) -> str:
    """Why a profiled NCCL time can exceed the timed step: where the profiled steps of ``rung`` on ``world`` ran
    slower than the timed ones (the analysis's ``slow`` flag), a sentence saying so with both lengths; else ""."""
    for x in facts.data.get("profile_flags") or []:
        if x["kind"] == "slow" and x["rung"] == rung and x["world"] == world and x["path"] == "direct":
            return (f" (These times come from profiled steps, which ran slower than the timed ones: the {dev} was busy "
                    f"{num(x['busy_ms'], 'ms')} per profiled step against a timed step of {num(x['step_ms'], 'ms')}, "
                    "so NCCL's time may exceed a timed step.)")
    return ""


def paper_exercise(facts) -> str:
    """The ring all-reduce's time worked by hand, ``T = 2(n−1)/n · S / busbw``, for one step's gradients at the bus
    bandwidth the collective benchmark measured at that size (the path DDP ran on), against the NCCL time the
    profiler saw in one-bucket DDP training (and the same all-reduces alone), and the steps/s the exposed part
    alone would leave; the answers folded, from this run's facts."""
    facts = facts_of(facts)
    gx = facts.data.get("gradient_exchange") or {}
    path = (gx.get("paths") or {}).get(gx.get("default")) or {}
    n, grad, bus = gx.get("world"), gx.get("grad_bytes"), path.get("busbw_GBps")
    if not n or n < 2 or not grad or not bus:
        return ("The exercise on paper needs the gradients' size and the all-reduce bandwidth measured on at least "
                "two processes, which this run does not hold (one process, or no collective benchmark).")
    t = 2 * (n - 1) / n * grad / (bus * 1e9) * 1e3
    work = facts.data.get("workload") or {}
    model, dev = work.get("model_words") or "the model", "GPU" if work.get("cuda", gx.get("cuda")) else "process"
    intro = (f"**Work it out.** Each step, DDP all-reduces {model}'s gradients, **S = {grad:,} bytes**, across "
             f"**n = {n}** processes; each {dev} sends 2(n−1)/n · S bytes, and the collective benchmark measured that "
             f"traffic at **busbw = {num(bus, 'GB/s')}** at this size ({path_words(gx['default'])}).")
    questions = ["How long should one all-reduce of all the gradients take (T = 2(n−1)/n · S ÷ busbw)?"]
    answers = [f"2 × {n - 1} ÷ {n} × {grad:,} B ÷ {num(bus, 'GB/s')} = **{num(t, 'ms')}**."]
    rows = [r for r in (facts.data.get("loss") or {}).get("rows") or [] if r.get("processes") == n]
    row = rows[0] if rows else {}
    train, alone = row.get("nccl_train_ms"), row.get("nccl_alone_ms")
    plain = row.get("t_plain_ms") or gx.get("step_ms")
    if train:
        split = str((facts.data.get("loss") or {}).get("rung") or "ddp")   # the rung the loss split profiled
        setting = option_words(split)
        questions.append(f"The profiler saw NCCL's kernels take **{num(train, 'ms')}** per step in training with "
                         f"{say.text(setting)}"
                         + (f", and **{num(alone, 'ms')}** for the same all-reduces run alone" if alone else "")
                         + f". How many times your T is each?{_profiled_slower(facts, split, n, dev)}")
        answers.append(f"{num(train, 'ms')} ÷ {num(t, 'ms')} = **{num(train / t, '×')}** in training"
                       + (f"; {num(alone, 'ms')} ÷ {num(t, 'ms')} = **{num(alone / t, '×')}** alone" if alone else "")
                       + ".")
    measured = path.get("ddp_steps_per_s")
    if plain and measured:
        ddp = 1e3 / measured
        grew = ddp - plain
        questions.append(f"One {dev} without DDP took **{num(plain, 'ms')}** a step; one-bucket DDP on {n} "
                         f"{dev}{'s' if dev == 'GPU' else 'es'} ran **{num(measured, 'steps/s')}**. How much longer "
                         "is its step, and what share of that is your T?")
        if grew <= 0:
            answers.append(f"1,000 ms ÷ {num(measured, 'steps/s')} = {num(ddp, 'ms')}, no longer than "
                           f"{num(plain, 'ms')}: DDP no slower than one {dev} without it is a measurement problem "
                           "(the two runs' timing), not a result.")
        else:
            answers.append(f"1,000 ms ÷ {num(measured, 'steps/s')} = {num(ddp, 'ms')}, **{num(grew, 'ms')}** longer; "
                           f"{num(t, 'ms')} ÷ {num(grew, 'ms')} = **{pct(t / grew)}**"
                           + (": more than the step grew, so part of the all-reduce ran beside other work."
                              if t > grew else f": the rest is DDP's other costs, which the section on each {dev}'s "
                                               "loss splits."))
    return on_paper(intro, questions, answers)
