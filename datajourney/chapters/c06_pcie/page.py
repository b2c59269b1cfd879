"""What chapter 6's page says about a result of :mod:`datajourney.chapters.c06_pcie.experiment`: the key findings, the
published metrics, the computed notes and the display tables of the notebook."""
from __future__ import annotations

import pandas as pd

from datajourney.chapters.c06_pcie import analysis
from datajourney.chapters.c06_pcie.analysis import CHAPTER, _events
from datajourney.chapters.c06_pcie.analysis import analyse as _analyse
from datajourney.chapters.c06_pcie.rules import (
    CLOCKS_AGREE,
    DIP_TOL,
    LINE_RATE,
    MIN_COPY_OVER_JITTER,
    OVERLAPS,
    PER_LANE_GBPS,
    SAME_PATH_TOL,
    SERIAL,
    STAGING_TOL,
    TOO_SHORT,
)
from datajourney.chapters.common import facts_reader, on_paper, short_time
from datajourney.core import phrasing as fx
from datajourney.core import phrasing as say
from datajourney.core.facts import Fact, Facts, host_label
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.units import size_label

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)

#: Lines the opening's findings and first sentences of actions fill: the introduction above them runs six lines.
OPENING_LINES = 10


def key_metrics(res) -> dict:
    """The published metrics of this chapter, from a result's facts: name -> (value, None)."""
    return {k: (v, None) for k, v in (facts_of(res).data.get("key_metrics") or {}).items()}


_PATHS = {("H2D", "pinned"): "host-to-device from pinned memory",
          ("H2D", "pageable"): "host-to-device from pageable memory",
          ("D2H", "pinned"): "device-to-host into pinned memory",
          ("D2H", "pageable"): "device-to-host into pageable memory"}


def _pct(fraction: float) -> str:
    """A share as a percentage, without a minus sign on a value that prints as zero ('0.0%', not '-0.0%')."""
    text = fx.pct(fraction)
    if text.startswith("-"):
        return text[1:] if not text.strip("-0.,%") else "−" + text[1:]
    return text


def _source_words(m: dict) -> str:
    """Where a pinned host-to-device measurement comes from (its ``kind``, ``path``, ``size``, ``round`` and
    ``phase``), in words."""
    n, path = size_label(int(m["size"])), say.text(m.get("path", ""))
    return {"sweep": f"PyTorch's {n} copy in the bandwidth sweep",
            "ceiling round": f"{path}'s {n} copy in the ceiling's round {int(m.get('round', 0)) + 1} "
                             f"({say.text(m.get('phase', ''))})",
            "second path": f"{path}'s {n} copy",
            "both directions": f"PyTorch's {n} copy alone in the both-directions test"}.get(str(m.get("kind")),
                                                                                           f"a {n} copy")


def ceiling_text(facts) -> str:
    """How the ceiling was measured and which measurement set it; the two paths compared round by
    round; the drift of the rounds over the run; the largest pinned copy's share of the ceiling
    (worded from the chapter's facts)."""
    facts = facts_of(facts)
    c = facts.get("ceiling")
    if c is None:
        return "No pinned host-to-device copy was measured here."
    out = [f"The ceiling is **{say.value(c)}**, the highest of the {int(c.setting['measurements'])} pinned "
           "host-to-device measurements of this run (each the median of its copies), set by "
           f"{_source_words(c.setting)}: no measurement of "
           "this chapter exceeds it."]
    torch_, cupy = facts.get("ceiling_rounds_pytorch"), facts.get("ceiling_rounds_cupy")
    if torch_ is not None:
        size = _size(torch_)
        if cupy is not None:
            out.append(f"In {torch_.n} rounds spread over the run, {size} copies through CuPy's own pinned buffer "
                       f"and `cudaMemcpyAsync` measured {_range(cupy)} and PyTorch's copy of the same size "
                       f"{_range(torch_)}: PyTorch's copy was "
                       f"{say.comparison(facts['ceiling_pytorch_vs_cupy'], baseline='the second path')}.")
        else:
            out.append(f"No second path here: in {torch_.n} rounds spread over the run, PyTorch's {size} copy "
                       f"measured {_range(torch_)}.")
        if "ceiling_drift" in facts:
            out.append(f"From round to round the rate moved by {say.value(facts['ceiling_drift'], runs=False)} "
                       "(highest over lowest round median); the ceiling is their highest, not one round's.")
    elif "ceiling_second_path" in facts:
        sp = facts["ceiling_second_path"]
        out.append(f"This result has one measurement through the second path ({_size(sp)}): {say.value(sp)}.")
    h, share = facts.get("h2d_pinned"), facts.get("h2d_pinned_share_of_ceiling")
    if h is not None and share is not None:
        rep = facts.get("sweep_repeats")
        why = (f": above {size_label(256 << 20)} the sweep times fewer copies than the {say.value(rep)} repeats, "
               "to bound its run time" if rep is not None and rep.number is not None and h.n < rep.number else "")
        spread = f"; lowest to highest {_range(h)}" if h.spread is not None and "–" in _range(h) else ""
        out.append(f"This chapter's pinned host-to-device copy at its largest size, {_size(h)}, moved "
                   f"**{say.value(h, runs=False)}** (median of {h.n}{why}{spread}), {say.value(share, runs=False)} "
                   "of the ceiling.")
    return " ".join(out)


def _staging(res) -> dict:
    """The staging story of a result's facts (:func:`analysis.staging_story` and what its details decide)."""
    return facts_of(res).data["staging"]


def _change_words(c: dict, *, up: str, down: str, same: str) -> str:
    """A change the analysis measured (its direction and relative size), in words: 'rose by 24%' (``up``),
    'fell by 12%', or 'stayed within 10%'."""
    r = c["change"]
    return fx.choose(c["direction"], f"{up} by {fx.pct(r)}", f"{down} by {fx.pct(-r)}",
                     f"{same} within {fx.pct(STAGING_TOL)}")


def pageable_drop_note(res) -> str:
    """What the staging experiment says about the cause of the pageable host-to-device rate, in one
    or two sentences worded from its facts: the cause only when this run's data support it, and
    otherwise how the rate moved with size and with a flushed cache, and that the CPU-cache cause
    does not reproduce here."""
    s = _staging(res)
    if not s["has_staging"]:
        return "This result has no staging experiment, so the cause is not measured in it."
    kind = s["kind"]
    small, large = size_label(s["small"]), size_label(s["large"])
    if kind == "cache":
        knee = s.get("knee")
        return ("**Cause (staging experiment): the driver's CPU staging copy is fast only while the source is "
                f"still in the CPU's cache**: flushing the cache slows a {small} copy from "
                f"{fx.num(s['cached_small'])} to {fx.num(s['flushed_small'], 'GB/s')}, and from "
                + (f"about {size_label(knee)}" if knee else "the larger sizes")
                + " on the source no longer stays cached between copies.")
    by_size = _change_words(s["by_size"], up="rose", down="fell", same="stayed")
    by_flush = _change_words(s["by_flush"], up="sped up", down="slowed", same="stayed")
    text = (f"In the staging experiment the cached pageable copy {by_size} from {small} to {large} "
            f"({fx.num(s['cached_small'])} to {fx.num(s['cached_large'], 'GB/s')}), and a {small} copy "
            f"{by_flush} with the CPU caches flushed first ({fx.num(s['flushed_small'], 'GB/s')}): ")
    return text + {"other": "the rate falls with size, but not because the source leaves the CPU's cache; this run "
                            "does not measure what else it is.",
                   "cached": "the cache matters at that size, but the rate does not fall as the source outgrows "
                             "it, so the CPU-cache cause does not reproduce in this run.",
                   "none": "the CPU-cache cause does not reproduce in this run, and the run measures no other."}[kind]


def _sizes_text(sizes, among=None) -> str:
    """Sizes in words: "64 MiB", "64 MiB and 256 MiB"; "48 MiB to 256 MiB" only where ``among`` (the sizes the
    experiment measured) has none between them that they leave out, else each named ("48 MiB, 64 MiB and 192 MiB")."""
    sizes = sorted(int(x) for x in sizes)
    if len(sizes) > 2 and among is not None and all(
            int(x) in sizes for x in among if sizes[0] <= int(x) <= sizes[-1]):
        return f"{size_label(sizes[0])} to {size_label(sizes[-1])}"
    return say.and_list([size_label(x) for x in sizes])


def _dip_words(d: dict) -> str:
    """The interleaved check's reading of a dip (:func:`analysis.dip_check`): the order of the block
    experiment (each size measured in one block, after different work: the dip vanishes when sizes are
    interleaved), or something about those sizes (it stays); then whether the driver's staging work per byte
    (the calling thread's CPU time) or page faults grow at the dip's sizes."""
    if not d["ran"]:
        if not d["cuda"]:
            return ("The interleaved check that decides the dip copies to a GPU: not measured in this run "
                    "(skipped).")
        where = "not in the reference run" if d["reference"] else "not run here (`dip_sizes` is empty)"
        return f"The interleaved check that decides it is {where}."
    large = d["large"]
    text = (f"Interleaved ({d['rounds']} rounds, every size once per round in a shuffled order), the pageable copy "
            "ran at " + "; ".join(f"{fx.num(v, 'GB/s')} at {size_label(n)}" for n, v in d["medians"]) + ". ")
    block, covered = d["block"], d["covered"]
    if block and not covered:
        return text + (f"The dip of the block experiment lies at {_sizes_text(block)}, which the interleaved check "
                       "did not copy: this run does not say whether the order or the size made it.")
    if not d["dips"]:
        missed = d["missed"]
        return text + ("**The data support an artefact of the order**: interleaved, no size below "
                       f"{size_label(large)} fell more than {fx.pct(DIP_TOL)} under it"
                       + (f", although measured one size at a time {_sizes_text(covered)} did" if covered else "")
                       + "; what ran before each block, not the size, made the dip"
                       + (f" (the check did not copy {_sizes_text(missed)})." if missed else "."))
    text += (f"At {_sizes_text(d['dips'], [n for n, _ in d['medians']])} it stays more than {fx.pct(DIP_TOL)} below "
             f"{size_label(large)}: "
             "the dip belongs to the size, not the order. ")
    text += (f"The calling thread spent {fx.span(*d['cpu_per_GB'], 'ms')} of CPU per GB there against "
             f"{fx.num(d['cpu_per_GB_large'], 'ms')} at {size_label(large)}, and the process took "
             f"{fx.span(*d['faults_per_MiB'])} page faults per MiB against {fx.num(d['faults_per_MiB_large'])}. ")
    if d["faults_up"]:
        return text + ("**The data support page faults during the copy**: the dip's sizes fault more per byte, and "
                       "each fault stalls the staging.")
    if d["cpu_up"]:
        return text + ("**The data support slower staging on the CPU**: the driver's copy into its staging buffers "
                       "costs more CPU per byte at those sizes, without more page faults.")
    return text + ("Neither page faults nor the CPU's staging work per byte grow at those sizes, so the data support "
                   "neither explanation: this run does not explain the dip.")


def _same_path_words(same: dict) -> str:
    """Which of two differing measurements of the same path the interleaved check agrees with."""
    if not same.get("check"):
        return "; this run does not say which difference matters."
    return "; " + "; ".join(
        f"at {size_label(c['size'])} the interleaved check measured {fx.num(c['GBps'], 'GB/s')}, nearer "
        + ("the bandwidth sweep" if c["nearer"] == "sweep" else "the staging experiment") for c in same["check"]) + "."


def staging_details(res) -> str:
    """What the staging experiment shows beyond the key result, worded from its facts: the rates behind the
    cause, the share of one core's copy rate, where one core does not model the staging stage, a dip and
    recovery decided by the interleaved check, the same path measured in two experiments, huge pages: one bullet
    each, led by its topic, so that a reader finds the one they look for."""
    s = _staging(res)
    if not s["has_staging"]:
        return ""
    small, large = size_label(s["small"]), size_label(s["large"])
    out = [f"**Cache against DRAM.** A {small} pageable copy ran at {fx.num(s['cached_small'], 'GB/s')} with its "
           f"source cached and {fx.num(s['flushed_small'], 'GB/s')} with the CPU caches flushed first; at {large}, "
           f"{fx.num(s['cached_large'], 'GB/s')} (flushed: {fx.num(s['flushed_large'], 'GB/s')}). One core copying "
           f"the same {small} source managed {fx.num(s['memcpy_cached_small'], 'GB/s')} from cache and "
           f"{fx.num(s['memcpy_flushed_small'], 'GB/s')} from DRAM."]
    knee, llc = s.get("knee"), s["llc"]
    if s["kind"] == "cache" and knee:
        if s["flushed_like_knee"]:
            out[-1] += (f" The flushed {small} copy runs about as fast as a cached {size_label(knee)} copy "
                        f"({fx.num(s['cached_at_knee'], 'GB/s')}): from there on the source is read from DRAM.")
        if llc:
            vm = (" (in a virtual machine other guests may share that cache; this run does not measure how much)"
                  if s["in_vm"] else "")
            out.append(f"**The knee.** The cached copy's knee, {size_label(knee)}, is where source and staging buffers "
                       f"outgrow the {size_label(llc)} last-level cache."
                       if s["knee_at_llc"] else
                       f"**The knee.** The cached copy's knee, {size_label(knee)}, lies well below the "
                       f"{size_label(llc)} last-level cache this CPU reports, so the cache's size alone does not place "
                       f"it{vm}.")
    share = s.get("dram_share")
    if share:
        lo, hi = share["low"], share["high"]
        out.append(f"**Against one core.** From {size_label(share['from'])} on, the cached copy runs at "
                   f"{fx.span(100 * lo, 100 * hi, '%')} of one core's DRAM copy rate at the same size"
                   + ("" if fx.pct(lo) == fx.pct(hi) else
                      f" ({fx.pct(share['last'])} at {size_label(share['last_size'])})") + ".")
    faster = s.get("faster_than_core")
    if faster:
        core = (f"At {_sizes_text(faster['sizes'])} the pageable copy ({fx.span(*faster['copy'], 'GB/s')}) "
                f"is faster than one core copying the same source even from cache "
                f"({fx.span(*faster['memcpy'], 'GB/s')}), so one core's memcpy does not "
                "model the staging stage at those sizes.")
        if share:
            out[-1] += " " + core
        else:
            out.append("**Against one core.** " + core)
    dip = s.get("dip")
    if dip:
        out.append(f"**The dip.** The cached copy dips to {fx.span(*dip['range'], 'GB/s')} at "
                   f"{_sizes_text(dip['sizes'])}, then recovers to {fx.num(s['cached_large'], 'GB/s')} at {large}. "
                   + _dip_words(dip["check"]))
    same = s["same_path"]
    if same["differ"]:
        out.append("**One path, two experiments.** Pageable host-to-device, measured in two experiments: "
                   + "; ".join(f"at {size_label(x['size'])} {fx.num(x['sweep'], 'GB/s')} in the bandwidth sweep and "
                               f"{fx.num(x['staging'], 'GB/s')} here (source cached), {fx.pct(x['apart'])} apart"
                               for x in same["differ"])
                   + f". They differ by more than the {fx.pct(SAME_PATH_TOL)} this chapter treats as agreement. "
                     "Both time the same copy with CUDA events but in different experiments (what ran before "
                     "each copy differs)" + _same_path_words(same))
    elif same["sizes"]:
        out.append(f"**One path, two experiments.** At {_sizes_text(same['sizes'])} the bandwidth sweep measured "
                   "the same path within "
                   f"{fx.pct(SAME_PATH_TOL)} of this experiment.")
    huge = s.get("huge")
    if huge:
        backed = " (the kernel backed none of it with huge pages)" if s.get("huge_bytes") == 0 else ""
        lo, hi = huge["changes"]
        head = (f"**Huge pages.** Asked for the source{backed}, they "
                f"{_faster_slower(huge['median_change'], 'at the median')} over "
                f"{huge['sizes']} sizes from {size_label(s['huge_sizes'][0])} "
                f"({_change_span(lo, hi)} size by size): ")
        d = huge["direction"]
        if d == 0 and huge["wide"]:
            out.append(head + "an effect, if any, is within that wide spread and not resolved by this run.")
        else:
            out.append(head + fx.choose(d, "page size matters too.", "they hurt here.",
                                        "not a clear change over those sizes, so page size is not the cause."))
    return "\n".join(f"* {o}" for o in out)


def _signed_change(change: float) -> str:
    """A relative change of a rate as the page prints it, its direction in words: '9.2% faster', '3.9% slower',
    '0.0%' (one that prints as zero has none)."""
    return fx.signed(100 * change, "%", "faster", "slower")


def _faster_slower(change: float, where: str) -> str:
    """'made the copy 9.2% faster at the median' (``where``), or 'left the copy's rate unchanged at the median'."""
    words = _signed_change(change)
    return (f"made the copy {words} {where}" if words.endswith(("faster", "slower"))
            else f"left the copy's rate unchanged {where}")


def _change_span(low: float, high: float) -> str:
    """The range of a change over sizes, each end with its direction: '3.9% slower to 15.6% faster'; a range in one
    direction names it once: '2.0–15.6% faster'."""
    a, b = _signed_change(low), _signed_change(high)
    if a == b:
        return a
    if (low > 0 and high > 0) or (low < 0 and high < 0):
        ends = sorted((100 * abs(low), 100 * abs(high)))
        return f"{fx.span(*ends, '%')} {'faster' if low > 0 else 'slower'}"
    return f"{a} to {b}"


def cpu_overlap_note(res) -> str:
    """The other three combinations at the pinned non_blocking copy's size and the CPU work's jitter, beside
    the overlap chart (worded from the result's facts)."""
    facts = facts_of(res)
    o = facts.data["overlap"]
    beside, jitter = o.get("beside"), facts.get("cpu_overlap_jitter_ms")
    if beside is None or not o["spread"]:
        return ""
    note = []
    if beside["others"]:
        note.append(f"The other three at {size_label(beside['size'])}: "
                    + "; ".join(f"{m} {md}: {v} ({_pct(r)})" for m, md, v, r in beside["others"]) + ".")
    if jitter is not None:
        short = beside["too_short"]
        note.append(f"The CPU work's jitter (its std within a row) was {fx.num(jitter.number, 'ms')} in that row and "
                    f"{fx.span(*o['jitter'], 'ms')} over all rows; a copy shorter "
                    f"than {MIN_COPY_OVER_JITTER:g}× its row's jitter gets no verdict"
                    + (": some or all of the " + ", ".join(size_label(s) for s in short) + " copies were too short "
                       "to tell." if short else "; every copy here was long enough to judge."))
    return " ".join(note)


def copy_kernel_note(res) -> str:
    """The profiler's timeline, the naive estimate and the kernels' drift, beside the paired-rounds chart
    (worded from the result's facts)."""
    d = facts_of(res).data["copy_kernel_details"]
    if not d:
        return ""
    text = ""
    tl = d.get("timeline")
    if tl:
        text += f" The profiler's GPU timeline shows {fx.pct(tl['covered'])} of the copy's time running under a kernel"
        if tl["slowdown"] is not None:
            text += f", and the kernels that ran beside the copy took {fx.times(tl['slowdown'])} as long as the others"
        text += "."
    if d["blocks_overlap"] is not None:
        text += (f" Timed the naive way (all kernel-only runs, then all copy-only, then all together) the same "
                 f"copy looked {_pct(d['blocks_overlap'])} hidden.")
    kb = d.get("kernel_block")
    if kb:
        text += f" Within the kernel-only block alone the matrix products took {fx.span(*kb['ms'], 'ms')}"
        if kb["sm_clock_mhz"]:
            text += f" while the SM clock read {fx.span(*kb['sm_clock_mhz'], 'MHz')}"
            if kb["power_w"]:
                text += f" and the power {fx.span(*kb['power_w'], 'W')}"
        text += (f": a drift of {fx.num(kb['drift_ms'], 'ms')}, "
                 + ("more than the whole copy" if kb["drift_over_copy"] else f"{fx.pct(kb['drift_share'])} of the copy")
                 + f". Every 1% the matrix products speed up or slow down between separately timed phases moves "
                   f"an unpaired estimate by {fx.num(kb['points_per_percent'])} percentage points; the paired rounds "
                   "cancel it.")
    return text.strip()


def pin_cost_note(res) -> str:
    """The caching host allocator's allocations and a fresh allocation per call, beside the pinning table
    (worded from the result's facts)."""
    d = facts_of(res).data["pin_cost_details"]
    if not d:
        return ""
    text = ""
    allocs = d["allocations"]
    if allocs is not None:
        text += (f" PyTorch's caching host allocator made {allocs} page-locked allocation"
                 f"{'' if allocs == 1 else 's'} over {d['calls']} calls: "
                 + ("later calls reuse the cached block, so pinning per batch costs about a host copy."
                    if d["reused"] else "the cached block was not reused every time."))
    e = d.get("emptied")
    if e:
        fa = e["allocations"]
        made = "" if fa is None else f" ({fa} page-locked allocation{'' if fa == 1 else 's'} in {d['calls']} calls)"
        text += (f" With the cache emptied before every call{made}, `pin_memory()` then copy took "
                 f"{fx.num(e['ms'], 'ms')} per batch: "
                 + fx.choose(e["direction"], "that is what pinning afresh on every call would cost.",
                             "no slower, so the allocation itself is cheap here.",
                             "about the same, so the allocation itself is cheap here."))
    return text.strip()


# --------------------------------------------------------------------------- other computed text


def two_clocks(res) -> str:
    """The conclusion of the two-clocks comparison, worded from the result's facts."""
    c = facts_of(res).data["clocks"]
    if c["agree_from"] is not None:
        out = [f"From {size_label(c['agree_from'])} up the two clocks agree within {fx.pct(CLOCKS_AGREE)} on every "
               "path"]
    else:
        out = [f"The two clocks differ by more than {fx.pct(CLOCKS_AGREE)} on some path at every size"]
    w = c["worst"]
    out[-1] += (f"; at {size_label(c['smallest'])} the host clock adds about {fx.num(c['extra_us'], 'µs')} per copy "
                f"(median over the four paths), the cost of launching and synchronising, which weighs most on the "
                f"shortest copies (largest gap: {_PATHS[(w['direction'], w['memory'])]} at {size_label(w['size'])}, "
                f"host ÷ events {fx.times(w['ratio'])}).")
    if c["pageable_ratio"] is not None:
        out.append(f"For pageable memory at {size_label(c['largest'])} host ÷ events is "
                   f"{fx.times(c['pageable_ratio'])}: "
                   + ("the CUDA events bracket the whole pageable copy, the CPU's staging included, because a "
                      "pageable copy returns to the host only when the staging is done."
                      if c["pageable_agree"] else
                      "part of the pageable copy's staging happens outside the CUDA events."))
    return " ".join(out)


def bidirectional_text(res) -> str:
    """Both directions at once: each alone, together in aggregate, and their overlap (from the facts)."""
    bi = facts_of(res).data["bidirectional"]
    spread = (f", p10–p90 {fx.span(100 * bi['spread'][0], 100 * bi['spread'][1], '%')}" if "spread" in bi else "")
    return (f"**Both directions at once** ({size_label(bi['size'])} each way, pinned, two streams): "
            f"host-to-device alone {fx.num(bi['h2d_GBps'], 'GB/s')}, device-to-host alone "
            f"{fx.num(bi['d2h_GBps'], 'GB/s')}, together **{fx.num(bi['aggregate_GBps'], 'GB/s')}** in aggregate: "
            f"overlap {_pct(bi['overlap'])}{spread} ({bi['verdict']}).")


def stale_text(res) -> str:
    """What the host read of a non_blocking device-to-host copy before and after synchronising (from the facts)."""
    st = facts_of(res).data["stale_read"]
    return (f"**Reading a non_blocking device-to-host result too early**: the host read **{st['before_sync']}** "
            f"before synchronising and **{st['after_sync']}** after (expected {st['expected']}). "
            + ("Nothing crashed; the value was simply not there yet." if st["stale"] else
               "This time the copy had already landed - by luck of timing, not by guarantee."))


def _combos_text(pairs) -> str:
    """Which (memory, mode) combinations the overlap rows of one size cover, in words."""
    pairs = {tuple(p) for p in pairs}
    if len(pairs) == 4:
        return "all four"
    mems = {m for m, _ in pairs}
    modes = {md for _, md in pairs}
    if len(pairs) == 2 and len(mems) == 1:
        return f"{next(iter(mems))}, both modes"
    if len(pairs) == 2 and len(modes) == 1:
        return f"{next(iter(modes))}, both memories"
    return ", ".join(f"{m} {md}" for m, md in sorted(pairs))


def _by_size_text(groups) -> str:
    """'1 MiB, 4 MiB and 16 MiB (all four) and 64 MiB (pinned, both modes)': sizes grouped by what they cover."""
    out: dict[str, list[str]] = {}
    for n, pairs in groups:
        out.setdefault(_combos_text(pairs), []).append(size_label(int(n)))
    return fx.and_list([f"{fx.and_list(sizes)} ({combo})" for combo, sizes in out.items()])


def overlap_caveat(res) -> str:
    """What the overlap table can and cannot say, worded from its facts: which sizes could be judged, why the
    others could not, how steady the CPU work was, and the verdicts."""
    c = (facts_of(res).data["overlap"] or {}).get("caveat")
    if c is None:
        return ""
    if not c["judged_rows"]:
        parts = [f"No row could be judged: in every one the copy ({fx.span(*c['copy_ms'], 'ms')}) "
                 f"lasted less than {MIN_COPY_OVER_JITTER:g}× its row's CPU-work jitter."]
    else:
        parts = [f"{c['judged_rows']} of {c['rows']} rows could be judged: {_by_size_text(c['judged'])}."]
        if c["short"]:
            parts.append(f"No verdict for {_by_size_text(c['short'])}: in each of those rows the copy "
                         f"({fx.span(*c['short_copy_ms'], 'ms')}) lasted less than "
                         f"{MIN_COPY_OVER_JITTER:g}× that row's CPU-work jitter (it would have needed "
                         f"{fx.span(*c['short_min_copy_ms'], 'ms')}).")
    if c["cpu_swing"]:
        parts.append(f"The same calibrated CPU work took {fx.span(*c['cpu_ms'], 'ms')} (row medians) in "
                     f"different rows, the slowest {fx.pct(c['cpu_swing_share'])} above the fastest; this run "
                     "does not explain the swing (candidates: time taken by other tenants of the host, CPU clock "
                     "changes).")
    if c["blocking_judged"]:
        bad = c["blocking_not_serial"]
        parts.append("Every blocking copy long enough to judge ran serially with the CPU work."
                     if not bad else
                     f"{len(bad)} blocking row(s) did not read as serial: " +
                     "; ".join(f"{size_label(n)} {m}: {v} ({_pct(r)})" for n, m, v, r in bad) + ".")
    for key, name in (("pinned_non_blocking", "Pinned"), ("pageable_non_blocking", "Pageable")):
        if c[key]:
            parts.append(f"{name} non_blocking: " + ", ".join(f"{size_label(n)} {v}" for n, v in c[key]) + ".")
    return " ".join(parts)


# --------------------------------------------------------------------------- tables for the notebook


def bandwidth_frame(res) -> pd.DataFrame:
    """CUDA-event rows of the bandwidth summary with a ``path`` label (direction, memory), for the chart."""
    return _events(res).assign(path=lambda d: d["direction"] + ", " + d["memory"])


def bandwidth_table(res) -> pd.DataFrame:
    """Median GB/s per size and path, then each as a share of the link's peak, the paths named as the chart's legend
    names them ("H2D, pinned": :func:`bandwidth_frame`'s ``path``, the text's host-to-device (H2D))."""
    ev = bandwidth_frame(res)
    piv = ev.pivot_table(index="size", columns="path", values="median")
    pct = ev.pivot_table(index="size", columns="path", values="pct_of_peak")
    out = piv.rename(columns=lambda c: f"{c} (GB/s)").join(
        pct.rename(columns=lambda c: f"{c} (% of peak)")).reset_index()
    out.insert(0, "copy size", out.pop("size").map(size_label))
    return out


def has_staging(res) -> bool:
    """Whether the result holds a staging table (on any host: one core's memcpy runs without CUDA too)."""
    return bool(facts_of(res).data.get("has_staging_table"))


def staging_table(res) -> pd.DataFrame:
    st = res.table("staging")
    piv = st.pivot_table(index="size", columns="measure", values="median", sort=False)
    piv = piv.rename(columns=lambda c: f"{c} (GB/s)").reset_index()
    piv.insert(0, "buffer size", piv.pop("size").map(size_label))
    return piv


def dip_table(res) -> pd.DataFrame:
    """The interleaved dip check per size, with readable headers (empty without the check)."""
    ds = analysis.dip_summary(res)
    if ds.empty:
        return ds
    out = ds.reset_index()
    out.insert(0, "copy size", out.pop("size").map(size_label))
    return out.rename(columns={"median": "median (GB/s)", "p10": "p10 (GB/s)", "p90": "p90 (GB/s)",
                               "cpu_ms_per_GB": "calling thread's CPU (ms per GB)",
                               "faults_per_MiB": "page faults per MiB", "n": "copies"})


def clocks_table(res) -> pd.DataFrame:
    """Host clock ÷ CUDA events per copy size (rows) and path (columns): the ratio of the median times."""
    t = analysis.clock_ratios(res).assign(path=lambda d: d["direction"] + ", " + d["memory"])
    piv = t.pivot_table(index="size", columns="path", values="ratio").reset_index()
    piv.insert(0, "copy size", piv.pop("size").map(size_label))
    return piv


def has_overlap_spread(res) -> bool:
    """Whether the overlap was measured round by round (its p10 and p90, and verdicts)."""
    o = facts_of(res).data.get("overlap")
    return bool(o and o["spread"])


def overlap_rule(res) -> str:
    """The verdict rule of the overlap table, with the CPU work's jitter over its rows (from the facts)."""
    o = facts_of(res).data["overlap"]
    return (f"Rule: no verdict when the copy lasts less than {MIN_COPY_OVER_JITTER:g}× the CPU work's jitter in "
            f"its row (the standard deviation of the CPU work over the row's rounds: "
            f"{fx.span(*o['jitter'], 'ms')} here); otherwise \"overlaps\" from "
            f"a median ratio of {fx.pct(OVERLAPS)}, \"serial\" up to {fx.pct(SERIAL)}, and \"unclear\" when the "
            "p10–p90 spread reaches from one to the other.")


def overlap_table(res) -> pd.DataFrame:
    """The overlap table in seven columns: size, memory + mode, the three median times, the
    overlap (median, and its p10 to p90 over rounds) and the verdict ('too short' for no verdict)."""
    o = res.table("overlap").copy()
    out = pd.DataFrame({"size": o["size"].map(size_label), "copy": o["memory"] + ", " + o["mode"],
                        "copy (ms)": o["copy_ms"], "CPU work (ms)": o["cpu_ms"], "together (ms)": o["both_ms"]})
    if "overlap_p10" in o:
        out["overlap: median (p10 to p90)"] = [f"{_pct(m)} ({_to_range(a, b)})"
                                               for m, a, b in zip(o["overlap"], o["overlap_p10"], o["overlap_p90"])]
        out["verdict"] = o["verdict"].replace({TOO_SHORT: "too short"})
    else:
        out["overlap (%)"] = 100 * o["overlap"]
    return out


def _to_range(low: float, high: float) -> str:
    """A range of shares in the one form a column shows whatever their signs ("70.9 to 125%", "−178 to 108%", as
    :func:`~datajourney.core.units.span` words a range with a negative end); one share where both ends print alike."""
    a, b = fx.num(100 * low, "%", with_unit=False), fx.num(100 * high, "%", with_unit=False)
    return f"{a}%" if a == b else f"{a} to {b}%"


def copy_kernel_table(res) -> pd.DataFrame:
    c = res.table("copy_kernel_calls")
    agg = {"ms": "median"}
    for col in ("sm_clock_mhz", "power_w", "temperature_c"):
        if col in c and c[col].notna().any():
            agg[col] = "median"
    t = c.groupby(["design", "name"], sort=False).agg(agg).reset_index()
    return t.rename(columns={"ms": "median (ms)", "sm_clock_mhz": "SM clock (MHz)", "power_w": "power (W)",
                             "temperature_c": "temperature (°C)", "name": "call"})


def pin_cost_table(res) -> pd.DataFrame:
    """The pinning experiment's ways of getting one batch to the GPU, with readable headers."""
    pc = res.table("pin_cost")
    if "first_ms" in pc:
        return pc[["way", "first_ms", "median_ms", "p10_ms", "p90_ms", "n", "GBps"]].rename(columns={
            "first_ms": "first call (ms)", "median_ms": "later calls: median (ms)", "p10_ms": "p10 (ms)",
            "p90_ms": "p90 (ms)", "n": "later calls", "GBps": "effective GB/s (median)"})
    return pc[["way", "median_ms", "min_ms", "max_ms", "GBps"]].rename(columns={
        "median_ms": "median (ms)", "min_ms": "min (ms)", "max_ms": "max (ms)", "GBps": "effective GB/s"})


def limits_table(res) -> pd.DataFrame:
    lim = res.metadata["limits"]
    gib = lambda b: "unlimited" if b is None else f"{b / 2**30:.1f} GiB"  # noqa: E731
    rows = [{"limit": "available host memory", "value": gib(lim["available_bytes"])},
            {"limit": "cgroup memory limit (tightest of this cgroup and its parents)",
             "value": gib(lim["cgroup_limit_bytes"])}]
    if lim.get("cgroup_headroom_bytes") is not None:
        room = min(lim["cgroup_headroom_bytes"], lim["available_bytes"])
        bound = ("available host memory" if room < lim["cgroup_headroom_bytes"]
                 else lim.get("cgroup_headroom_bound") or "the cgroup limit")
        rows.append({"limit": "room left under the cgroup limit" + (" (capped by available host memory, which is "
                                                                     "smaller)" if bound == "available host memory"
                                                                     else ""),
                     "value": gib(room)})
    rows += [{"limit": "locked-memory limit (ulimit -l)", "value": gib(lim["memlock_bytes"])},
             {"limit": "CPU quota", "value": "none" if not lim["cpu_quota_cores"] else
              f"{lim['cpu_quota_cores']:.1f} cores"}]
    if lim.get("cgroup_version"):  # the version only: the group's path names the host's own layout, not a limit
        rows.append({"limit": "cgroup version", "value": f"v{lim['cgroup_version']}"})
    return pd.DataFrame(rows)


def versus_published(res, *, where: str = "here") -> str:
    """This run's slowest path and its pageable device-to-host rate beside the published host's
    (``where``: how the text names the machine of ``res``, e.g. "on the reference host")."""
    from datajourney.chapters import published

    fig = published.figure(CHAPTER, "D2H pageable, 1 GiB")
    facts = facts_of(res)
    d2h, slow = facts.get("d2h_pageable"), facts.get("slowest_path")
    if fig is None or d2h is None or slow is None:
        return ""
    text = (f"On the published host (S1) device-to-host into pageable memory collapsed to {fig.text} ({fig.setting}); "
            f"{where} it reached {fx.num(d2h.number, 'GB/s')} at {_size(d2h)}, "
            f"{fx.compare(d2h.number, fig.mean, more='faster than', less='slower than', same='level with')} that "
            "figure")
    if slow.value != "D2H, pageable":
        text += (f", and it is not the run's slowest path: the slowest is {_path_words(slow.value)} "
                 f"({fx.num(slow.setting['GBps'], 'GB/s')}). The staging experiment below measures what limits it "
                 "here.")
    else:
        text += ", and it is the run's slowest path too."
    return text


# --------------------------------------------------------------------------- the opening


# --------------------------------------------------------------------------- facts, worded


_VERDICT_WORDS = {"overlaps": "it overlaps", "partly overlaps": "it partly overlaps", "serial": "it ran serially",
                  "unclear": "unclear: the spread reaches from serial to overlapping",
                  "too short": "too short to tell against the CPU work's jitter"}


def _size(f: Fact) -> str:
    return size_label(int(f.setting["size"]))


def _range(f: Fact) -> str:
    """A fact's lowest to highest over its runs, with its unit ("46.3–51.8 GB/s"); its value without a spread."""
    return fx.span(*f.spread, f.unit) if f.spread is not None else say.value(f)


def _none_added(facts: Facts) -> bool:
    """Whether the side-stream copy's paired rounds measured it adding less than nothing (a hidden share above
    100%): then the share is no share, and the page words the time it added instead."""
    a = facts.get("copy_kernel_added_ms")
    return a is not None and a.number is not None and a.number < 0


def _added_words(facts: Facts, *, jitter: bool = True, short: bool = False) -> str:
    """What the side-stream copy added to the matrix products, from the paired rounds: its median, the 95%
    interval, and the matrix products' own round-to-round jitter that a negative median lies within; ``short``:
    the median alone (the advice and the summary, whose evidence the section states in full)."""
    a, f = facts["copy_kernel_added_ms"], facts["copy_kernel"]
    out = f"a median of {say.value(a, runs=False)} over {f.n} paired rounds"
    if short:
        return out
    if a.spread is not None:
        out += f", 95% interval {fx.span(*a.spread, 'ms')}"
    j = facts.get("copy_kernel_kernel_jitter_ms")
    if j is not None and jitter:
        out += f"; the matrix products alone moved by {say.value(j, runs=False)} (std) from round to round"
    return out


def _hidden_words(facts: Facts) -> str:
    """How much of the side-stream copy hid: its share, or, where the rounds measured it adding less than
    nothing, that it added no measurable time (a share above 100% is no share)."""
    f = facts["copy_kernel"]
    if _none_added(facts):
        return f"the copy added no measurable time to the matrix products ({_added_words(facts, short=True)})"
    return f"{say.value(f, runs=False)} of the copy hid behind compute"


def _path_words(value) -> str:
    """A path fact's value ("H2D, pageable") in words; anything else as code."""
    d, _, m = str(value).partition(", ")
    return _PATHS.get((d, m)) or say.code(value)


def finding_pinned_h2d(facts) -> Finding:
    """Pinned H2D at the largest size, against the link's peak and the run's ceiling."""
    facts = facts_of(facts)
    f = facts["h2d_pinned"]
    parts = []
    if "h2d_pinned_share_of_peak" in facts:
        parts.append(f"{say.value(facts['h2d_pinned_share_of_peak'])} of the link's theoretical peak of "
                     f"{say.value(facts['link_peak'])}")
    if "h2d_pinned_share_of_ceiling" in facts:
        parts.append(f"{say.value(facts['h2d_pinned_share_of_ceiling'])} of the run's ceiling "
                     f"({say.value(facts['ceiling'])})")
    text = (f"A pinned host-to-device copy of {_size(f)} moved **{say.value(f)}**"
            + (", " + fx.and_list(parts) if parts else "") + ".")
    return Finding("h2d_pinned", text, f.number, "GB/s", published=f.published, interval=f.spread,
                   values=dict(size=f.setting["size"]))


def finding_slowest_path(facts) -> Finding:
    """Which of the four paths is slowest at the largest size, and pinned against pageable device-to-host."""
    facts = facts_of(facts)
    slow, fast, c = facts["slowest_path"], facts["fastest_path"], facts["d2h_pinned_vs_pageable"]
    text = (f"At {_size(slow)} the slowest path is **{_path_words(slow.value)}** at "
            f"{fx.num(slow.setting['GBps'], 'GB/s')}, the fastest {_path_words(fast.value)} at "
            f"{fx.num(fast.setting['GBps'], 'GB/s')}; device-to-host into pinned memory ran "
            f"{say.comparison(c, facts)}.")
    return Finding("slowest_path", text, c.number, "×", published=c.published,
                   values=dict(size=slow.setting["size"], slowest=str(slow.value)))


def finding_pageable_drop(facts) -> Finding:
    """The pageable H2D rate at the largest size against its peak from 16 MiB on; its cause, where the
    staging experiment supports one, is :func:`pageable_drop_note`."""
    facts = facts_of(facts)
    last, c = facts["h2d_pageable"], facts["pageable_drop"]
    text = (f"Host-to-device from pageable memory moved {say.value(last)} at {_size(last)}, "
            f"{say.comparison(c, facts)}; device-to-host into pageable memory moved "
            f"{say.value(facts['d2h_pageable'])}.")
    return Finding("pageable_drop", text, c.number, "×")


def finding_cpu_overlap(facts) -> Finding:
    """Overlap of a pinned non_blocking copy with CPU work at the size nearest 256 MiB, and its verdict."""
    facts = facts_of(facts)
    f, v = facts["cpu_overlap"], facts["cpu_overlap_verdict"]
    copy, work = facts.get("cpu_overlap_copy_ms"), facts.get("cpu_overlap_work_ms")
    text = (f"At {_size(f)}, a pinned non_blocking copy ({say.value(copy, runs=False)}) and "
            f"{say.value(work, runs=False)} of Python work: **{say.value(f)}** of the shorter hidden behind the "
            f"other: {_VERDICT_WORDS.get(str(v.value), say.code(v.value))}.")
    x = facts.get("cpu_overlap_excess_ms")
    if x is not None:   # a share above 100%: the pair ended sooner than its parts' own rounds
        j = facts["cpu_overlap_jitter_ms"]
        text += (f" (Above 100%: the pair ended up to {say.value(x, runs=False)} early, "
                 + ("under" if x.setting["noise"] else "over")
                 + f" {fx.num(MIN_COPY_OVER_JITTER, '×')} this row's CPU jitter of {say.value(j, runs=False)}: "
                 + ("timing noise.)" if x.setting["noise"] else "flagged as a measurement problem.)"))
    return Finding("cpu_overlap", text, f.number, "%", published=f.published, interval=f.spread,
                   values=dict(size=f.setting["size"], verdict=str(v.value)))


def finding_copy_kernel(facts) -> Finding:
    """How much of a side-stream copy hides behind matrix products (paired rounds)."""
    facts = facts_of(facts)
    f = facts["copy_kernel"]
    v = facts.get("copy_kernel_verdict")
    if v is None:  # an older result: one unpaired estimate
        text = f"A {_size(f)} copy on a side stream: {say.value(f)} hidden, by one unpaired estimate."
        return Finding("copy_kernel", text, f.number, "%", values=dict(size=f.setting["size"]))
    head = (f"A {_size(f)} pinned copy on a side stream ({say.value(facts['copy_kernel_copy_ms'], runs=False)} "
            f"alone) beside {say.value(facts['copy_kernel_kernel_ms'], runs=False)} of matrix products")
    if _none_added(facts):
        text = (f"{head} added **no measurable time** to them: {_added_words(facts)} "
                f"({_VERDICT_WORDS.get(str(v.value), '')}).")
    else:
        text = (f"{head} added {say.value(facts['copy_kernel_added_ms'], runs=False)} to them: "
                f"**{say.value(f, runs=False)} of the copy hidden** (95% interval {fx.span(*f.spread, '%')}; "
                f"{_VERDICT_WORDS.get(str(v.value), '')}).")
    return Finding("copy_kernel", text, f.number, "%", interval=f.spread,
                   values=dict(size=f.setting["size"], verdict=str(v.value)))


def finding_pin_cost(facts) -> Finding:
    """What ``pin_memory()`` per batch costs: first call, later calls, against a reused pinned buffer."""
    facts = facts_of(facts)
    f, c = facts["pin_cost"], facts["pin_vs_reused"]
    first = facts.get("pin_first")
    text = (f"For one {_size(f)} batch, "
            + (f"the first `pin_memory()` call took **{say.value(first)}**, later calls " if first is not None
               else "`pin_memory()` then copy took ")
            + f"{say.value(f)}, {say.comparison(c, facts)}.")
    return Finding("pin_cost", text, f.number, "ms", interval=f.spread, values=dict(size=f.setting["size"]))


def finding_no_cuda() -> Finding:
    return Finding("no_cuda", "This run measured **no PCIe**: the host has no CUDA device, so nothing crossed a bus; "
                              "what ran is the host side of the chapter.")


def finding_host_memcpy(facts) -> Finding:
    """Host side of the staging experiment (runs on any machine): one core's memcpy from cache and from DRAM."""
    facts = facts_of(facts)
    f, c = facts["host_memcpy"], facts.get("host_memcpy_cached")
    llc = f.setting.get("llc")
    text = (f"One core copying a {_size(f)} buffer (the work a pageable copy puts on the CPU) ran at "
            f"**{say.value(f)}** from DRAM" + (f" and {say.value(c)} from cache" if c is not None else "")
            + (f" (last-level cache: {size_label(int(llc))})." if llc else "."))
    return Finding("host_memcpy", text, f.number, "GB/s", values=dict(size=f.setting["size"]))


def finding_cpu_jitter(facts) -> Finding:
    facts = facts_of(facts)
    f = facts["cpu_jitter"]
    cal = f.setting.get("calibrated_ms")
    text = (f"The CPU work calibrated to {fx.num(cal, 'ms')} varied by {say.value(f)} (std over {f.n} runs), so a "
            f"copy shorter than {fx.num(MIN_COPY_OVER_JITTER * f.number, 'ms')} could not be judged against it.")
    return Finding("cpu_jitter", text, f.number, "ms")


def findings(facts) -> list[Finding]:
    """The chapter's key results (3-6), worded from its facts (a result is analysed first)."""
    facts = facts_of(facts)
    if "no_cuda" in facts:
        out = [finding_no_cuda()]
        out += [fn(facts) for key, fn in (("host_memcpy", finding_host_memcpy), ("cpu_jitter", finding_cpu_jitter))
                if key in facts]
        return out
    out = [finding_pinned_h2d(facts), finding_slowest_path(facts), finding_pageable_drop(facts)]
    for key, fn in (("cpu_overlap", finding_cpu_overlap), ("copy_kernel", finding_copy_kernel),
                    ("pin_cost", finding_pin_cost)):
        if key in facts:
            out.append(fn(facts))
    return out[:6]


# --------------------------------------------------------------------------- the opening
SIDE_STREAM_SNIPPET = '''import torch

copy_stream = torch.cuda.Stream()
with torch.cuda.stream(copy_stream):
    # the next batch crosses the bus ...
    x_next = x_pinned.to("cuda", non_blocking=True)
ready = torch.cuda.Event()
ready.record(copy_stream)
loss = step(x)  # ... while this step computes
# the GPU waits for the copy, not the host
torch.cuda.current_stream().wait_event(ready)
x_next.record_stream(torch.cuda.current_stream())'''


def _opening_no_cuda(facts: Facts) -> Opening:
    out = [Finding("no_cuda", "This run measured **no PCIe**: the host has no CUDA device, so nothing crossed a bus.")]
    if "host_memcpy" in facts:
        f = facts["host_memcpy"]
        out.append(Finding("host_memcpy", f"Only the host side ran: one core copied a {_size(f)} buffer from DRAM at "
                                          f"**{say.value(f)}**.", f.number, "GB/s"))
    if "cpu_jitter" in facts:
        f = facts["cpu_jitter"]
        out.append(Finding("cpu_jitter", f"The calibrated CPU work varied by **{say.value(f, runs=False)}** (std).",
                           f.number, "ms"))
    return Opening(out[:3], [Action("Run this chapter on a host with an NVIDIA GPU (`./journey lab`) to measure "
                                    "what pinning and overlapping copies gain there; the reference host's findings "
                                    "follow.")])


def opening(facts) -> Opening:
    """What the chapter opens with: pinned against pageable copies to the GPU at the sweep's largest size and
    at a training batch's size, PyTorch's pinned copy against the run's ceiling, and how much of a copy hides
    behind compute, one sentence each; then whether to pin and whether to copy on a side stream."""
    facts = facts_of(facts)
    if "no_cuda" in facts:
        return _opening_no_cuda(facts)
    out = []
    c, cb = facts.get("pinned_vs_pageable"), facts.get("pinned_vs_pageable_batch")
    if c is not None:
        text = f"At {_size(facts['h2d_pinned'])}, a pinned copy to the GPU ran **{say.comparison(c, facts)}**"
        if cb is not None and cb.setting["size"] != c.setting["size"]:
            text += f"; at a batch's {_size(facts['h2d_pinned_batch'])}, {say.comparison(cb, facts)}"
        out.append(Finding("pinned_vs_pageable", text + ".", c.number, "×"))
    if "ceiling" in facts:
        h = facts["h2d_pinned"]
        share = facts.get("h2d_pinned_share_of_ceiling")
        out.append(Finding("h2d_pinned", f"PyTorch's pinned {_size(h)} copy moved **{say.value(h, runs=False)}**, "
                                         f"{say.value(share)} of the run's ceiling of {say.value(facts['ceiling'])}, "
                                         "the fastest pinned copy measured.", h.number, "GB/s", published=h.published,
                           interval=h.spread))
    if "copy_kernel" in facts:
        f = facts["copy_kernel"]
        v = facts.get("copy_kernel_verdict")
        text = (f"On a side stream, a {_size(f)} copy ({say.value(facts['copy_kernel_copy_ms'], runs=False)} alone) "
                f"added **no measurable time** to matrix products: {_added_words(facts, jitter=False)}"
                if _none_added(facts) else
                f"On a side stream, **{say.value(f, runs=False)}** of a {_size(f)} copy hid behind matrix products")
        out.append(Finding("copy_kernel", text + (f" ({_VERDICT_WORDS.get(str(v.value), '')})." if v is not None
                                                  else "."), f.number, "%", interval=f.spread))
    return Opening(out[:3], _actions(facts)[:3])


def _actions(facts: Facts) -> list[Action]:
    out = []
    a = facts.advice_for("pcie.pin_memory")
    cb = facts.get("pinned_vs_pageable_batch")
    if a is not None:
        out.append(Action(say.advice(a, facts) + (" Copy with `non_blocking=True`." if a.value is True else ""),
                          a.snippet))
    elif cb is not None:
        out.append(Action(f"Pinning changed nothing measurable at {_size(facts['h2d_pinned_batch'])}: "
                          f"{say.comparison(cb, facts)}; leave `pin_memory` as it is."))
    v = facts.get("copy_kernel_verdict")
    if v is not None:
        hidden = _hidden_words(facts)
        out.append(
            Action(f"Copy the next batch on a side stream while the current step computes: here {hidden}.",
                   SIDE_STREAM_SNIPPET) if v.value == "overlaps" else
            Action(f"A side-stream copy bought nothing here ({hidden}): keep the copy on the compute stream.")
            if v.value == "serial" else
            Action(f"The side-stream overlap is not settled here ({hidden}, {_VERDICT_WORDS.get(str(v.value), '')}): "
                   "run the chapter again with more `kernel_rounds` before restructuring the loop."))
    return out


def takeaways(facts) -> str:
    """The chapter's closing advice, worded from its facts."""
    facts = facts_of(facts)
    if "no_cuda" in facts:
        return "* This run measured no PCIe; the reference host's results above show what the copies gain there."
    slow = facts["slowest_path"]
    lines = [f"* Use pinned host memory for anything that crosses the bus every step (`DataLoader(pin_memory=True)`) "
             f"and copy with `non_blocking=True`. In this result the slowest path at {_size(slow)} was "
             f"{_path_words(slow.value)} ({fx.num(slow.setting['GBps'], 'GB/s')}); pinned copies moved "
             f"{say.value(facts['h2d_pinned'], runs=False)} to the device and "
             f"{say.value(facts['d2h_pinned'], runs=False)} back."]
    if "copy_kernel_verdict" in facts:
        f = facts["copy_kernel"]
        did = (f"the copy added no measurable time to the compute ({_added_words(facts, short=True)})"
               if _none_added(facts)
               else f"that hid {say.value(f, runs=False)} of the copy (95% interval {fx.span(*f.spread, '%')})")
        lines.append(f"* Overlap the next batch's copy with this step's compute on a side stream, with the stream "
                     f"synchronisation done on the GPU (`wait_event`, `record_stream`); in this result {did}.")
    return "\n".join(lines)


def host_words(res, *, reference: bool) -> str:
    """The host of ``res`` by name: "the reference host, an H200 host (16 cores)" or "a CPU-only host (2 cores)"."""
    label = say.text(host_label(res.fingerprint))
    return f"the reference host, {label}" if reference else label


def link_text(facts, *, host: str) -> str:
    """The PCIe link of the result whose facts these are, on ``host`` (:func:`host_words`)."""
    facts = facts_of(facts)
    link, peak = facts.data.get("link") or {}, facts.get("link_peak")
    if "no_cuda" in facts:
        return f"This run measured no PCIe link: {host} has no CUDA device."
    if peak is None:
        return f"The link's generation and width could not be read on {host}."
    gen, width = link.get("gen_max"), link.get("width_max")
    return (f"On {host}, the GPU sits on a **PCIe {gen}.0 x{width}** link (running at gen {link.get('gen_current')} "
            f"x{link.get('width_current')} when read; idle links may train down), whose theoretical peak per "
            f"direction is **{say.value(peak)}**: {PER_LANE_GBPS[gen]:.3f} GB/s per lane after line coding, "
            f"× {width} lanes.")


def paper_exercise(facts) -> str:
    """The link's peak worked by hand from its lanes, line rate and encoding (``n·r·e/8``), the largest pinned
    copy's share of it, and what the pinned and the pageable rate mean for the time of that copy; the answers
    folded, from this run's facts. A pinned copy above the peak is named a measurement problem, never a share."""
    facts = facts_of(facts)
    peak, pinned = facts.get("link_peak"), facts.get("h2d_pinned")
    gen, width = (peak.setting.get("gen"), peak.setting.get("width")) if peak is not None else (None, None)
    if "no_cuda" in facts or peak is None or gen not in LINE_RATE or not width or pinned is None:
        return ("The exercise on paper needs the link's generation and width and a pinned copy to the GPU, which "
                "this run does not hold (no CUDA device, or the link could not be read).")
    rate, bits, line = LINE_RATE[gen]
    size, gbps = int(pinned.setting["size"]), pinned.number
    intro = (f"**Work it out.** The GPU sits on a PCIe {gen}.0 link of **{width} lanes**. Each lane of this "
             f"generation carries **{rate:g} GT/s** (one bit per transfer) with {bits}b/{line}b line coding: of every "
             f"{line} bits sent, {bits} are data. The largest pinned copy to the GPU ({size_label(size)}) ran at "
             f"**{say.value(pinned, runs=False)}** (median; GB = 10⁹ bytes).")
    per_dir = width * rate * bits / line / 8
    share = gbps / per_dir
    questions = ["What is the link's peak per direction (lanes × rate × encoding ÷ 8 bits per byte)?",
                 "What share of that peak did the pinned copy reach?"]
    answers = [f"{width} × {rate:g} × {bits}/{line} ÷ 8 = **{fx.num(per_dir, 'GB/s')}**.",
               f"{say.value(pinned, runs=False)} ÷ {fx.num(per_dir, 'GB/s')} = **{_pct(share)}**"
               + (": above 100%, which no copy can reach over its link; a measurement problem (the copy's timing "
                  "or its size), not a rate." if share > 1 else ".")]
    pageable = facts.get("h2d_pageable")
    if pageable is not None and pageable.number and share <= 1:
        t_pin, t_page = size / (gbps * 1e9), size / (pageable.number * 1e9)
        questions.append(f"The same {size_label(size)} from pageable memory ran at "
                         f"**{say.value(pageable, runs=False)}**. How long does the copy take each way?")
        answers.append(f"{size:,} B ÷ {say.value(pinned, runs=False)} = **{short_time(t_pin)}** pinned; "
                       f"{size:,} B ÷ {say.value(pageable, runs=False)} = **{short_time(t_page)}** pageable, "
                       f"{fx.times(t_page / t_pin)} as long.")
    return on_paper(intro, questions, answers)


def no_cuda_text(ref) -> str:
    return ("**This run measured no PCIe: the host has no CUDA device. The GPU sections below show "
            + (f"the reference run ({say.code(ref.run_id)}), labelled as such.**" if ref is not None else
               "nothing: no reference result is committed.**"))


def warnings_text(res) -> list[str]:
    """What may exceed this host's limits when the buffers are pinned, one sentence each (from the result's data;
    an older result's sentences are shown as its text, escaped)."""
    out = []
    for w in facts_of(res).data.get("warnings") or []:
        if not isinstance(w, dict):
            out.append(f"⚠ {say.text(w)}")
        elif w.get("kind") == "memlock":
            out.append(f"⚠ `ulimit -l` is {size_label(int(w['limit_bytes']))}, below the largest pinned buffer "
                       f"({size_label(int(w['largest_bytes']))}): pinning may fail or fall back where the limit is "
                       "enforced.")
        elif w.get("kind") == "cgroup":
            out.append(f"⚠ The pinned buffers ({size_label(int(w['pinned_bytes']))}) take over half of the "
                       f"container's memory limit ({size_label(int(w['limit_bytes']))}); pinned pages cannot be "
                       "swapped and count against that limit.")
    return out
