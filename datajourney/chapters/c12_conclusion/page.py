"""Chapter 12's page: the answer first (per workload of the data path: the weakest link, how many GPUs of this kind
the host feeds, and what to change with its measured gain), then the hops behind it (the data-parallel step's answer
with its own), the checklist, the budget chart and the budget worked on paper. It words the facts of
:mod:`.analysis` (the other chapters' exported facts, copied into this chapter's result) through
:mod:`datajourney.core.phrasing`; it computes no finding of its own."""
from __future__ import annotations

import html
import math
import re

import pandas as pd

from datajourney.chapters import common, published, wording
from datajourney.chapters.c12_conclusion import analysis
from datajourney.chapters.c12_conclusion.analysis import AU_MIN, IMAGE_TENSOR_BYTES, UNITS
from datajourney.core import charts, phrasing
from datajourney.core.facts import Facts
from datajourney.core.phrasing import Action, Finding, Opening
from datajourney.core.units import equals, num

#: What each checklist row checks (mechanism only: the numbers come from the run).
PRACTICE = {
    ("02_random_vs_sequential", "?samples.layout"): "Many small samples: one file each, or shards read in order?",
    ("02_random_vs_sequential", "cold_latency"): "Know what served one small cold read at queue depth 1",
    ("02_random_vs_sequential", "?shard.odirect"): "Read a shard with buffered reads or O_DIRECT?",
    ("03_dataloader", "published_w4"): "Workers hide per-file latency, but do not remove the layout's cost",
    ("03_dataloader", "first_batch"): "Start-up: workers are processes, and the first batch waits for them",
    ("04_cpu_starvation", "workers_to_keep_up"): "Synthetic work: enough workers to prepare a batch within a step",
    ("04_cpu_starvation", "?synthetic.persistent_workers"): "Keep the DataLoader's workers between epochs?",
    ("05_padding_tax", "?tokens.batching"): "Pack variable-length sequences, or pad them?",
    ("06_pcie", "?pcie.pin_memory"): "Copy batches to the GPU from pinned or pageable memory?",
    ("06_pcie", "cpu_overlap"): "Copy with non_blocking=True from pinned memory so the CPU keeps working",
    ("07_full_picture", "recipe"): "End to end: which setting feeds the training step best?",
    ("07_full_picture", "best_vs_ceiling"): "End to end: the best loader against its step's own ceiling",
    ("08_threads_processes_gil", "primitives"): "Decode in processes or threads: where the interpreter lock binds",
    ("08_threads_processes_gil", "?image_decode.loader"): "Decode photos in DataLoader worker processes or threads?",
    ("08_threads_processes_gil", "?image_decode.model_feed"):
        "Decode photos on the CPU or on the GPU, feeding the model?",
    ("08_threads_processes_gil", "cost"): "Count the loader's CPU and memory over all its processes",
    ("08_threads_processes_gil", "first_batch.fork_vs_spawn"):
        "Start workers with fork, or keep the Dataset small to pickle",
    ("09_reading_smarter", "?storage_to_gpu.path"): "Which path from a file into GPU memory?",
    ("09_reading_smarter", "gds"): "GPUDirect Storage only where cuFile really runs without compatibility mode",
    ("09_reading_smarter", "?random_reads.threads"): "Keep many small reads in flight: how many threads?",
    ("10_mmap_vs_read", "?tokens.loader_mode"): "mmap or read() for an indexed token set?",
    ("10_mmap_vs_read", "posix_events"): "A POSIX tracer does not see mmap's I/O",
    ("10_mmap_vs_read", "kernel_view"): "Check page faults and /proc/<pid>/io beside the tracer",
    ("10_mmap_vs_read", "overhead"): "Measure the tracer's own cost, traced against untraced",
    ("11_gpu_to_gpu", "scaling_direct"): "DDP over a direct GPU-to-GPU path: what each GPU loses",
    ("11_gpu_to_gpu", "?ddp.option"): "DDP's settings: change a default only for a measured gain",
    ("11_gpu_to_gpu", "host_path_cost"): "Know whether the GPUs talk directly or through the host",
    ("11_gpu_to_gpu", "allreduce_busbw"): "Compare gradient bytes per step with the all-reduce bandwidth",
}

#: Each hop of each workload in a few words (what the rate belongs to).
HOP_NAMES = {"files": "one-file-per-sample storage", "shard": "sharded storage read in order",
             "cpu": "the CPU (the loader's work on all cores)", "pcie": "the PCIe link (pinned copy)",
             "to_gpu": "the path from storage to GPU memory", "token_loader": "the token loader",
             "token_cpu": "the CPU (one token loader per GPU, as many as the cores hold)",
             "allreduce": "the step with DDP's exchange of gradients (its defaults)",
             "photo_cpu": "decoding photos on all cores",
             "photo_loader": "the best CPU-decoding photo loader measured"}

#: The hops in a few words, for the opening's one-sentence findings (the tables name them in full).
SHORT_NAMES = {"cpu": "the CPU", "token_cpu": "the CPU", "allreduce": "DDP's exchange", "pcie": "the PCIe link",
               "to_gpu": "the path to GPU memory"}


def workload_name(facts: Facts, workload: str, *, plain: bool = False) -> str:
    """A workload named by what ran: the model and device of its step (a CPU run says so); as Markdown, or
    ``plain`` text for a table caption or chart title, which escape it themselves ("small_cnn", never
    "small\\_cnn")."""
    esc = phrasing.visible if plain else phrasing.text
    d = facts.data
    if workload == "image":
        w = d.get("image_workload") or {}
        if not w.get("batch_size"):
            return "image training (chapter 7's workload)"
        dev = "GPU" if str(w.get("device") or "").startswith("cuda") else "CPU"
        words = d.get("image_words") or f"{w.get('model')} training on a {dev}"
        return f"{esc(words)}, batch {esc(w['batch_size'])}"
    if workload == "tokens":
        h = _hop(facts, "tokens", "gpu")
        if h and h.get("stated"):
            return "a token-based step (a stated demand)"
        on_gpu = bool(h and h.get("on_gpu"))
        return (f"token-based {token_model(facts)} training" if on_gpu
                else f"token-based {token_model(facts)} training on a CPU")
    h = _hop(facts, "gradients", "gpu")
    host = (facts.data.get("hosts") or {}).get("11_gpu_to_gpu")
    where = (f" on {esc(host)}" if host and host != facts.data.get("host")
             and h and h["capacity"] is not None else "")
    return "a data-parallel step" + ("" if not h or h["capacity"] is None or h.get("on_gpu")
                                     else " (CPU processes with gloo)") + where


def token_model(facts: Facts) -> str:
    """The token step's model as this chapter timed it ("124M-parameter GPT-2"), so its GPU count is never read as
    that of chapter 5's smaller model."""
    t = facts.data.get("token_step") or {}
    size = f"{t['parameters'] / 1e6:,.0f}M-parameter " if t.get("parameters") else ""
    return size + ("GPT-2" if str(t.get("model") or "gpt2") == "gpt2" else f"GPT-2 {phrasing.text(t['model'])}")


def _hops(facts: Facts, workload: str) -> list[dict]:
    return [h for h in facts.data.get("hops", []) if h["workload"] == workload]


def _hop(facts: Facts, workload: str, key: str) -> dict | None:
    return next((h for h in _hops(facts, workload) if h["hop"] == key), None)


def hop_label(facts: Facts, workload: str, key: str) -> str:
    """A hop in a reader's words: the step by its device, the others by :data:`HOP_NAMES`."""
    if key == "gpu":
        h = _hop(facts, workload, "gpu") or {}
        if h.get("stated"):
            return "the stated token demand"
        return phrasing.where("step", h.get("on_gpu"))
    return HOP_NAMES.get(key) or phrasing.text(key)


def chapter_number(ch: str) -> int:
    """The number of the chapter whose result file is named ``ch`` ('07_full_picture' -> 7)."""
    return int(ch[:2])


def chapter_link(ch: str) -> str:
    """A Markdown link to chapter ``ch`` (a sibling notebook of this page: MyST resolves it to its page)."""
    return f"[chapter {chapter_number(ch)}]({ch}.ipynb)"


def _weakest_sentence(facts: Facts, wl: str) -> str:
    """One sentence: the weakest link and its margin, in the facts' phrasing; for the data-parallel step, chapter
    11's measured share of one device's steps/s that each kept with DDP's defaults (the measured cost, not a model)."""
    wk = facts.data.get(f"{wl}.weakest")
    title = workload_name(facts, wl)
    if not wk:
        return f"**{title[0].upper() + title[1:]}**: no diagnosis ({_why_not(facts, wl)})."
    text = f"**{title[0].upper() + title[1:]}**: "
    kept = facts.get(f"11.{analysis.DDP_KEPT}") if wl == "gradients" else None
    if kept is not None:
        rank = phrasing.where("rank", _on_gpu(facts, wl))
        lost = facts.get(f"11.{analysis.DDP_LOST}")
        said = phrasing.lost_or_kept(lost, kept, bold=True)   # chapter 11's phrasing of the same measurement
        return (text + f"with DDP's defaults each {rank} {said} of one {rank}'s steps/s without DDP, measured in "
                f"{chapter_link('11_gpu_to_gpu')}.")
    text += f"the weakest link is {hop_label(facts, wl, wk['key'])}"
    if wk["key"] == "gpu" and facts.get(f"{wl}.gpus_fed") is not None:   # the data path keeps up: how far it goes
        return text + f"; {_count_clause(facts, wl)}."
    m = facts.get(f"{wl}.margin")
    if m is not None and m.number is not None:
        if wk["key"] == "gpu":
            text += (f"; the next hop, {SHORT_NAMES.get(wk['next_key']) or hop_label(facts, wl, wk['next_key'])}, "
                     f"is **{phrasing.comparison(m, baseline='the step')}**")
        else:
            text += f", **{phrasing.comparison(m, baseline='the step')}**"
    return text + "."


def _why_not(facts: Facts, wl: str) -> str:
    """Why a workload has no diagnosis: its chapters did not run, or did not measure what its margin needs."""
    ran = {h["chapter"] for h in _hops(facts, wl)} & set(facts.data.get("found", []))
    if wl == "gradients":
        h = _hop(facts, wl, "allreduce") or {}
        return ("chapter 11 did not run here" if not ran else
                "chapter 11 measured DDP with its defaults no slower than one device without it, a measurement "
                "problem" if h.get("added_ms") is not None and h["added_ms"] <= 0 else
                "chapter 11's run has no rung with DDP's defaults, the baseline its cost is measured against")
    return "its chapters are not in this run" if not ran else "its chapters measured too few of its hops"


def _action(facts: Facts, wl: str, host: str | None) -> Action | None:
    """What to do for one workload: the advice of the chapter that measured the remedy, worded exactly as there
    (the GPUs of this kind the host feeds are the workload's line and its count note, :func:`count_note`)."""
    wk = facts.data.get(f"{wl}.weakest")
    if not wk:
        return None
    a = facts.advice_for(f"{wl}.remedy")
    chapter = analysis.REMEDY.get((wl, wk["key"]), (wk["chapter"],))[0]
    recipe = facts.get(RECIPE_KEY) if wl == "image" and wk["key"] == "gpu" else None
    said = wording.recipe_sentence(facts, RECIPE_KEY) if recipe is not None else None
    if said is not None and (a is None or a.knob != "recipe"):
        # chapter 7's combined recipe, with its own evidence: what the image line and its code show, as chapter 7
        # words them (one function for both pages)
        text = f"{chapter_link(chapter)}: {said}"
        a = None
        device = (facts.data.get("image_workload") or {}).get("device") or "cpu"
        snippet = wording.recipe_snippet(recipe.setting, device)
    elif a is not None:
        text = f"{chapter_link(chapter)}: {verdict_first(a, facts)}"
    else:
        text = (f"{chapter_link(chapter)}: this run measured no setting that shortens "
                f"{hop_label(facts, wl, wk['key'])}.")
    if said is None or a is not None:
        snippet = a.snippet if a is not None else None
    return Action(text, snippet)


#: Chapter 7's combined end-to-end recipe as chapter 12 copies it (with both sides of its comparison).
RECIPE_KEY = f"07.{analysis.RECIPE}"


def verdict_first(a, facts: Facts) -> str:
    """A chapter's advice in its own words (:func:`phrasing.advice`), its verdict first and the workload it was
    measured on after it ("Set `num_workers=4`: 3.6× faster than …. Measured for ResNet-50 training …."), so the
    verdict is the first sentence the opening shows beside the finding that names the workload."""
    words = phrasing.advice(a, facts)
    lead = f"For {phrasing.text(a.workload)}, " if a.workload else ""
    if not lead or not words.startswith(lead):
        return words
    body = words[len(lead):]
    return f"{body[0].upper()}{body[1:]} Measured for {phrasing.text(a.workload)}."


def gpus_sentence(facts: Facts, wl: str) -> str:
    """How many GPUs like this one the host feeds, in a sentence of its own that names the step it counts for. For
    images the count is given only when the pipeline the diagnosis recommends (``data["image.pipeline"]``), measured
    end to end on one GPU with the step priced here, fed it at the bar (:func:`analysis.supported`); otherwise the
    sentence gives that pipeline's measured share, or says it was measured with another step, and gives no count:
    a setting is never paired with another setting's end-to-end share. The token count names this chapter's own
    model, never chapter 5's (whose advice precedes it)."""
    bar = phrasing.share(AU_MIN)
    if not _on_gpu(facts, wl):
        return "No GPU ran here, so how many GPUs this host feeds needs a run on one."
    share = facts.get("image.fed_share") if wl == "image" else None
    fed = facts.get(f"{wl}.gpus_fed")
    pick = facts.data.get("image.pipeline") if wl == "image" else None
    if share is not None and share.number is not None:
        measured = (f"End to end the pipeline recommended above fed one such GPU "
                    f"{phrasing.share(share.number / 100)} of its need")
        if fed is None:
            return f"{measured}, under the {bar} bar, so this run gives no count of GPUs this host feeds."
        lead = f"{measured}; by the hop model, "
    elif wl == "image":
        w, steps = facts.data.get("image_workload") or {}, analysis.VARIANT_STEP_WORDS
        if not pick or (pick["step"] == (w.get("step_kind") or "eager") and not pick.get("runs")):
            return ("Chapter 7 measured no end-to-end rate of this setting that the diagnosis can price, so this run "
                    "gives no count of GPUs this host feeds.")
        return (f"Chapter 7 measured this setting end to end with the {steps.get(pick['step'], pick['step'])}, not "
                f"the {steps.get(w.get('step_kind') or 'eager')} priced here, so this run gives no count of GPUs this "
                "host feeds.")
    elif fed is None:
        return "Not every hop this host's GPUs share was measured here, so this run gives no count of GPUs it feeds."
    else:
        lead = f"For the {token_model(facts)} step timed here, " if wl == "tokens" else ""
    sentence = lead + _count_clause(facts, wl) + "."
    return sentence[0].upper() + sentence[1:]


def _count_clause(facts: Facts, wl: str) -> str:
    """"this host's CPU could feed **4** such GPUs at ≥ 90% of the time" (a capacity: the host may hold fewer GPUs): the
    count the analysis stated (``<wl>.gpus_fed``, the fewest of the shared hops' own counts the hop table shows) and
    the hop that sets it."""
    bar, fed = phrasing.share(AU_MIN), facts[f"{wl}.gpus_fed"]
    found = facts.data.get(f"{wl}.fed") or {}
    binding = phrasing.text(found.get("binding", ""))
    if not fed.value:
        return f"this host's {binding} cannot feed one such GPU at ≥ {bar}"
    fit = found.get("fit")
    why = f" (one loader per rank: {fit['loaders']} fit on {fit['cores']} cores)" if fit else ""
    count = phrasing.value(fed, runs=False)
    return f"this host's {binding} could feed **{count}** such GPUs at ≥ {bar} of the time{why}"


def count_note(facts: Facts, wl: str) -> Finding | None:
    """How many GPUs like this one the host feeds for ``wl`` (images, tokens), and the evidence or the reason there
    is no count (:func:`gpus_sentence`): shown under the workload's hop table and under "How we know"."""
    if wl not in SHARED_WORKLOADS or not facts.data.get(f"{wl}.weakest"):
        return None
    fed = facts.get(f"{wl}.gpus_fed")
    return Finding(f"{wl}.gpus_fed", f"**GPUs this host feeds, {SHARED_WORKLOADS[wl]}**: {gpus_sentence(facts, wl)}",
                   fed.number if fed is not None else None, "")


#: The workloads whose hops a host's GPUs share (a count of GPUs fed), in a reader's words.
SHARED_WORKLOADS = {"image": "image training", "tokens": "token training"}


def _finding(facts: Facts, wl: str) -> Finding:
    """One workload's line of the answer, keyed by the fact whose number it states: the data-parallel step's is
    chapter 11's measured share (``11.ddp_default_eff``); where the step is the weakest link, the GPUs this host
    feeds (``<wl>.gpus_fed``, when the analysis states a count); else the margin."""
    kept = facts.get(f"11.{analysis.DDP_KEPT}") if wl == "gradients" else None
    wk = facts.data.get(f"{wl}.weakest")
    if kept is not None and wk:
        return Finding(kept.key, _weakest_sentence(facts, wl), kept.number, kept.unit)
    fed = facts.get(f"{wl}.gpus_fed") if wk and wk["key"] == "gpu" else None
    if fed is not None:
        return Finding(fed.key, _weakest_sentence(facts, wl), fed.number, "")
    m = facts.get(f"{wl}.margin") if wk else None
    return Finding(f"{wl}.margin", _weakest_sentence(facts, wl), m.number if m else None, "×")


#: The workloads the first screen answers, each line beside its action: the data path, whose hops feed one GPU. The
#: data-parallel step (chapter 11's measurement, often of another host) has its line and its action together in its
#: own section (:func:`data_parallel_answer`): three workloads' lines and actions do not fit one screen, and a line
#: folded away from its action would leave advice on the first screen without the finding it answers.
FIRST_SCREEN = ("image", "tokens")
#: The first screen keeps every line of the opening (one per workload of :data:`FIRST_SCREEN`), never folding a
#: workload's finding away from its action (:func:`datajourney.book.opening.shown` folds past this budget).
OPENING_LINES = 40


def opening(facts: Facts) -> Opening:
    """The answer in one screen, for the workloads of :data:`FIRST_SCREEN`: per workload, the weakest link and, where
    the step itself is it, the GPUs this host feeds, else its margin (one sentence each); and what to do: the
    remedy's chapter and setting with its measured gain, in that chapter's words. Each action follows its workload's
    line, in the same order, and every line is shown (:data:`OPENING_LINES`), so no action stands on the first screen
    without the finding it answers."""
    out, actions = [], []
    for wl in FIRST_SCREEN:   # a workload without a diagnosis says why in one line
        out.append(_finding(facts, wl))
        a = _action(facts, wl, None)
        if a is not None:
            actions.append(a)
    return Opening(out, actions)


def every_answer(facts: Facts) -> Opening:
    """:func:`opening` with the data-parallel step's line and action after the first screen's: every workload's
    answer, for a summary that states them all (the title page)."""
    op = opening(facts)
    a = _action(facts, "gradients", None)
    return Opening(op.findings + [_finding(facts, "gradients")], op.actions + ([a] if a is not None else []))


def data_parallel_answer(facts: Facts) -> str:
    """The data-parallel step's answer, its line and what to do together (Markdown, with the advice's code): shown
    in its own section, beside its hops, never split across the page."""
    text = _finding(facts, "gradients").text
    a = _action(facts, "gradients", None)
    if a is None:
        return text
    text += f"\n\n**What to do**: {a.text}"
    return text + (f"\n\n{_fenced(a.snippet)}" if a.snippet else "")


def _fenced(code: str) -> str:
    """A Python code block that nothing inside it can end: fenced by more backticks than its longest run."""
    body = phrasing.visible(code.replace("\r", ""))
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", body)), default=0))
    return f"{fence}python\n{body}\n{fence}"


def undiagnosed(facts: Facts) -> list[Finding]:
    """One line per workload this run could not diagnose, and why (its chapters not run, or not the measurement
    its margin needs): shown under "How we know"."""
    return [Finding(f"{wl}.margin", _weakest_sentence(facts, wl), None, "×") for wl in UNITS
            if not facts.data.get(f"{wl}.weakest")]


def summary_lines(facts: Facts) -> list[str]:
    """The same answer in plain lines, for the terminal at the end of a run (Markdown emphasis removed)."""
    def plain(s: str) -> str:
        s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s.replace("**", "").replace("`", ""))
        return html.unescape(re.sub(r"\\(.)", r"\1", s))

    shown = [_finding(facts, wl).text for wl in UNITS]   # the terminal has room for every workload's line
    keys = {_finding(facts, wl).key for wl in UNITS}
    shown += [n.text for n in (count_note(facts, wl) for wl in FIRST_SCREEN) if n is not None and n.key not in keys]
    lines = [plain(t) for t in shown]
    lines += [plain(a.text) for a in (_action(facts, wl, None) for wl in UNITS) if a is not None]
    yours = phrasing.your_data(facts.get("your_data"))
    if yours:   # the diagnosis is of the reader's own data: said first
        lines.insert(0, plain(f"Diagnosed reading {yours}; the other hops measured the book's generated data."))
    missing = facts.data.get("missing") or []
    if missing:
        lines.append("not run, so not diagnosed: chapters " + ", ".join(str(int(c[:2])) for c in missing))
    return lines


def findings(facts: Facts) -> list[Finding]:
    """The key results: the weakest link of each workload, the token step, and the coverage."""
    out = list(opening(facts).findings)   # the opening's own (same keys), so "How we know" shows each once
    notes = [count_note(facts, wl) for wl in FIRST_SCREEN]
    for f in [n for n in notes if n is not None] + [_finding(facts, wl) for wl in UNITS if wl not in FIRST_SCREEN] \
            + undiagnosed(facts):
        if f.key not in {x.key for x in out}:   # a count the workload's line states is shown once
            out.append(f)
    t = facts.get("token_step")
    if t is not None:
        out.append(Finding("token_step", f"**The token step** (timed here): {phrasing.value(t)}.", t.number, t.unit))
    found, missing = facts.data.get("found", []), facts.data.get("missing", [])
    text = (f"**Coverage**: this diagnosis reads {len(found)} of the {len(found) + len(missing)} chapters it uses; "
            f"missing: {', '.join(chapter_link(c) for c in missing)}." if missing
            else f"**Coverage**: this diagnosis reads all {len(found)} chapters it uses.")
    out.append(Finding("coverage", text, len(found), ""))
    return out


def caveats_markdown(facts: Facts) -> str:
    """The measured facts that change a margin above (storage read guest-cold), or nothing."""
    if facts.data.get("storage_guest_cold") is True:
        return ("**What could change these margins**: chapter 2's cold reads came from a cache below this "
                "virtual machine (*guest-cold*: the guest's page cache was empty, the host's was not), so a "
                "physical disk may deliver less than the storage rates this diagnosis used.")
    return ""


# ----------------------------------------------------------------------------- on paper
def paper_exercise(res) -> str:
    """The budget model worked by hand: from chapter 7's step (G for a batch of B) and the CPU time one image costs
    in the pipeline recommended above (D: its loader workers' plus its training process's), what one GPU asks for,
    what the cores prepare, and how many GPUs they feed at the bar; then the token loaders, one per rank, that fit on
    the cores. The numbers are the hop table's; the answers folded."""
    facts = res.facts
    gpu, cpu = _hop(facts, "image", "gpu") or {}, _hop(facts, "image", "cpu") or {}
    if not (gpu.get("on_gpu") and gpu.get("step_ms") and gpu.get("batch_size") and cpu.get("cpu_ms")
            and cpu.get("cores")):
        return ("The exercise on paper needs chapter 7's step on a GPU and the CPU time one image costs in the "
                "pipeline recommended above, which this run does not hold.")
    b, g, c, d = int(gpu["batch_size"]), float(gpu["step_ms"]), int(cpu["cores"]), float(cpu["cpu_ms"])
    bar, split = AU_MIN, cpu.get("workers_ms") is not None and cpu.get("main_ms") is not None
    need, rate = b * 1e3 / g, c * 1e3 / d
    n = int(cpu["gpus"]) if cpu.get("gpus") is not None else math.floor(rate / (bar * need))   # the table's own
    cost = (f"**{num(cpu['workers_ms'], 'ms')}** of CPU in its loader workers and **{num(cpu['main_ms'], 'ms')}** "
            "in its training process" if split else f"**{num(d, 'ms')}** of CPU")
    intro = (f"**Work it out.** One GPU asks for r_need = B ÷ G images per second (B images a step of G); the "
             f"host's C cores prepare r_CPU = C ÷ D, where D is the CPU time of one image; a GPU counts as fed when it "
             f"computes at least {phrasing.share(bar)} of the time. In the pipeline recommended above each image cost "
             f"{cost}, its step took **G = {num(g, 'ms')}** for a batch of **B = {b}**, on **C = {c} cores**.")
    questions = ["How many images per second does one GPU ask for (r_need = B ÷ G)?",
                 "How many images per second can the cores prepare (D is every process's CPU per image, so "
                 "r_CPU = C ÷ D)?",
                 f"How many GPUs does the CPU feed with each computing at least {phrasing.share(bar)} of the time "
                 f"(N = ⌊r_CPU ÷ ({bar:g} · r_need)⌋)?"]
    # the hop table's rates as the results: "≈" where the rounded G or D would give another last digit by hand
    g_eq = equals(g, "ms", lambda x: num(b * 1e3 / x, "images/s") == num(need, "images/s"))
    d_eq = equals(d, "ms", lambda x: num(c * 1e3 / x, "images/s") == num(rate, "images/s"))
    answers = [f"{b} ÷ {num(g, 'ms')} {g_eq} **{num(need, 'images/s')}**.",
               (f"D = {num(cpu['workers_ms'], 'ms')} + {num(cpu['main_ms'], 'ms')} = {num(d, 'ms')}; " if split
                else "") + f"{c} ÷ {num(d, 'ms')} {d_eq} **{num(rate, 'images/s')}**.",
               f"{num(rate, 'images/s')} ÷ ({bar:g} × {num(need, 'images/s')}) = {num(rate / (bar * need))}, so "
               f"**{n} GPU{'' if n == 1 else 's'}**{_paper_count(facts, 'image', n)}"]
    loader, ranks, step = _hop(facts, "tokens", "token_loader") or {}, _hop(facts, "tokens", "token_cpu") or {}, \
        _hop(facts, "tokens", "gpu") or {}
    if ranks.get("cores") and loader.get("capacity") and step.get("capacity") and step.get("on_gpu"):
        w, cores, ask = int(ranks["workers"]), int(ranks["cores"]), step["capacity"]
        one = ranks.get("loader_rate") or loader["capacity"]
        fit, loaders, fed = cores // (w + 1), int(ranks["loaders"]), int(ranks["gpus"])   # the hop table's own
        shape = (f" (batches of {ranks['loader_batch']:,} sequences of {ranks['loader_seq']:,} tokens, chapter 10's "
                 "workers sweep)" if ranks.get("loader_batch") and ranks.get("loader_seq") else "")
        questions.append(f"For the token step, each GPU's rank runs its own token loader with **{w} workers** besides "
                         f"its own process (the fewest that feed the GPU), and one such loader{shape} read "
                         f"**{num(one, 'tokens/s')}**; the step asks for "
                         f"**{num(ask, 'tokens/s')}**. How many ranks' loaders fit on the {cores} cores, and how many "
                         "GPUs do they feed?")
        factor = analysis.rank_loader_need(w, 1.0)   # without workers, loading and the step take turns
        answers.append(f"⌊{cores} ÷ ({w} + 1)⌋ = {fit}"
                       + (f", and one rank runs however few the cores: {loaders} loader" if loaders != fit else
                          " loaders")
                       + f"; one loader's {num(one, 'tokens/s')} "
                       + ("reaches" if fed else "falls short of")
                       + (f" {bar:g} × {num(ask, 'tokens/s')}" if w else
                          f" {bar:g} ÷ (1 − {bar:g}) × {num(ask, 'tokens/s')} (no workers: the rank loads, then steps)")
                       + f" = {num(factor * ask, 'tokens/s')}, so "
                       f"**{fed} GPU{'' if fed == 1 else 's'}**{_paper_count(facts, 'tokens', fed)}")
    return common.on_paper(intro, questions, answers)


def _paper_count(facts: Facts, wl: str, n: int) -> str:
    """How an exercise's count of GPUs stands beside the count the answer above states: the same, or another hop's
    smaller one, or none stated."""
    fed = facts.get(f"{wl}.gpus_fed")
    binding = phrasing.text((facts.data.get(f"{wl}.fed") or {}).get("binding", ""))
    if fed is None:
        return (": the answer above states no count, since it gives one only where the pipeline, measured end to "
                "end with this step, fed one GPU at the bar." if wl == "image" else ".")
    if fed.value == n:
        return ", the count the answer above states."
    return f"; the host's {binding} feeds fewer, {fed.value}, the count the answer above states."


# ----------------------------------------------------------------------------- tables
def _on_gpu(facts: Facts, workload: str) -> bool:
    """Whether the step of ``workload`` ran on a GPU (its "gpu" hop says), which decides how the page words it."""
    return bool((_hop(facts, workload, "gpu") or {}).get("on_gpu"))


def _basis(h: dict, gpu: bool) -> str:
    """How a hop's rate was computed, from the numbers the analysis kept beside it; ``gpu``: whether the
    workload's step ran on a GPU (:func:`datajourney.core.phrasing.where` words it). Plain text, never Markdown: a
    table cell and a chart's hover label show it, and each escapes what it shows (a Markdown escape would show as
    a backslash there)."""
    k = h["hop"]
    if k in ("files", "shard") and h.get("file_bytes"):
        return (f"cold {'random' if k == 'files' else 'sequential'} reads at {num(h['file_bytes'] / 1024, 'KiB')} "
                f"per request (chapter 2's size sweep) ÷ the file size")
    if k == "shard" and h.get("token_bytes"):
        return f"best cold sequential MB/s ÷ {h['token_bytes']} bytes per token"
    if k == "cpu" and h.get("cpu_source") == "counters" and h.get("workers_ms") is not None \
            and h.get("main_ms") is not None:
        return (f"{h['cores']} cores ÷ ({num(h['workers_ms'], 'ms')} in its loader workers + "
                f"{num(h['main_ms'], 'ms')} in the training process) of CPU per image, each from the CPU counters "
                "of the pipeline recommended above ÷ its images/s")
    if k == "cpu" and h.get("cpu_source") == "counters":
        return (f"{h['cores']} cores ÷ {num(h['cpu_ms'], 'ms')} of CPU per image: the whole machine's busy cores "
                f"({num(h['busy_cores'], '')}, from its CPU counters) ÷ the images/s of the pipeline recommended "
                "above")
    if k == "cpu" and h.get("cpu_ms") and h.get("main_ms"):
        return (f"{h['cores']} cores ÷ ({num(h['workers_ms'], 'ms')} of loader work per image in a worker, from "
                f"host-clock stage timings, + {num(h['main_ms'], 'ms')} of the training process's cores per image) "
                "in the pipeline recommended above"
                + (f", its stages timed at num_workers={h['at']}" if h.get("at") is not None
                   and h["at"] != (h.get("recipe") or {}).get("workers") else ""))
    if k == "cpu" and h.get("cpu_ms"):
        return (f"{h['cores']} cores ÷ {num(h['cpu_ms'], 'ms')} of loader work per image (chapter 7's host-clock "
                "stage timings; this result has no CPU counters)")
    if k == "pcie" and h.get("batch_size"):
        return f"pinned H2D at a {h['batch_size']}-image uint8 batch ÷ {IMAGE_TENSOR_BYTES:,} bytes per image"
    if k == "pcie" and h.get("tokens_per_batch"):
        return f"pinned H2D at a {h['tokens_per_batch']:,}-token batch ÷ 8 bytes per int64 id"
    if k == "to_gpu":
        return f"chapter 9's fastest cold path to GPU memory ÷ {h.get('token_bytes')} bytes per token"
    if k == "token_loader" and h.get("mode"):
        why = ("the reader chapter 10 advises, at its best measured setting" if h.get("advised")
               else "chapter 10's fastest; this result holds no advice on the reader")
        return (f"chapter 10's cold loader with {phrasing.visible(h.get('call') or h['mode'])}, "
                f"num_workers={h['workers']} ({why}): "
                "tokens read ÷ loader time")
    if k == "token_loader":
        return "chapter 10's cold loader: tokens read ÷ loader time"
    if k == "token_cpu":
        return (f"one token loader per rank, as many as fit: {h['cores']} cores ÷ ({h['workers']} workers + the "
                f"rank's process) = {h['loaders']} loaders, each with the fewest workers whose loader "
                f"({num(h.get('loader_rate') or 0, 'tokens/s')}) feeds its GPU"
                + (f", of the worker counts chapter 10 tried ({phrasing.and_list([str(x) for x in h['tried']])})"
                   if h.get("tried") else ""))
    if k == "allreduce":
        return _exchange_basis(h, gpu)
    if k == "photo_cpu":
        return f"{h['cores']} cores ÷ {num(h['ms'], 'ms')} per photo on one core (chapter 8)"
    if k == "photo_loader":
        return "chapter 8's best steady loader from cold files"
    if k == "gpu" and h.get("step_ms"):
        computing = f", {num(h['compute_ms'], 'ms')} of it computing" if h.get("compute_ms") else ""
        return (f"{h['batch_size']} images per {num(h['step_ms'], 'ms')} step{computing} (chapter 7's "
                f"{'graphed' if h.get('graphed') else 'eager'} ceiling: the batch already in "
                f"{phrasing.where('memory', gpu)})")
    if k == "gpu" and h.get("stated"):
        return "the parameter llm_tokens_per_s"
    if k == "gpu":
        return "timed here" if h["workload"] == "tokens" else "chapter 11's step without DDP"
    return ""


def _exchange_basis(h: dict, gpu: bool) -> str:
    """How the data-parallel step's exchange row was computed: chapter 11's measured share, the time it means per
    step, and the bandwidth model beside it (never the row's rate)."""
    ranks, rank = f"{h['world']} {phrasing.where('ranks', gpu)}", phrasing.where("rank", gpu)
    model = (f"a bandwidth model alone ({num(h['grad_bytes'] / 1e6, 'MB')} of gradients at "
             f"{num(h['busbw_GBps'], 'GB/s')} bus bandwidth, not overlapped) gives {num(h['allreduce_ms'], 'ms')} per "
             "all-reduce")
    if h.get("added_ms") is not None and h["added_ms"] <= 0:
        return (f"none measurable: DDP with its defaults ran {num(-h['added_ms'], 'ms')} faster per step on {ranks} "
                f"than one {rank} without it, which no exchange can do: a measurement problem, not a gain; {model}")
    if h.get("kept") is None or h.get("added_ms") is None:
        return f"not measured: chapter 11's run did not time DDP with its defaults; {model}"
    return (f"each {rank}'s steps/s with DDP's defaults on {ranks}, measured (chapter 11): {num(h['kept'], '%')} of "
            f"one {rank}'s, so DDP added {num(h['added_ms'], 'ms')} to each {num(h['step_ms'], 'ms')} step; {model}")


def hops_display(res, workload: str) -> pd.DataFrame:
    """Each hop of ``workload``: its chapter, its rate, that rate against the step's need and how it was computed;
    where the answer states how many GPUs this host feeds, each shared hop's own count beside it (the count the
    answer states is the fewest of them, a storage layout counting its faster one), so the table and the answer show
    one computed value."""
    facts = res.facts
    unit = UNITS[workload]
    d = facts.number(f"{workload}.demand")
    counted = facts.get(f"{workload}.gpus_fed") is not None
    rows = []
    for h in _hops(facts, workload):
        v = h["capacity"]
        row = {"hop": hop_label(facts, workload, h["hop"]), "chapter": chapter_number(h["chapter"]),
               f"rate ({unit})": num(v, unit, with_unit=False) if v is not None else "not run",
               "against the step's need": ("—" if d is None or v is None or h["hop"] == "gpu"
                                           else phrasing.comparison(
                                               _ratio(v, d), baseline="the need").replace(" than the need", ""))}
        if counted:
            row[GPUS_COLUMN] = f"{h['gpus']:,}" if h.get("gpus") is not None else "—"
        rows.append({**row, "how it is computed": _basis(h, _on_gpu(facts, workload))})
    return pd.DataFrame(rows)


#: The hop table's column of the GPUs each shared hop feeds (the answer's count is the fewest of them).
GPUS_COLUMN = f"GPUs it feeds at ≥ {AU_MIN:.0%}"


def _ratio(a: float, b: float):
    from datajourney.core.facts import Fact, compare
    return compare("r", Fact("a", a), Fact("b", b))


def hop_notes(facts: Facts, workload: str) -> list[Finding]:
    """The notes under a workload's hop table: the GPUs this host feeds (:func:`count_note`), the hops that sit beside
    its chain (chapter 8's photos) in the same comparison phrasing, and its model checked against a measurement."""
    note = count_note(facts, workload)
    out = [note] if note is not None else []
    d = facts.number(f"{workload}.demand")
    for h in _hops(facts, workload):
        if h["hop"] in analysis.ASIDE and h["capacity"] is not None and d:
            out.append(Finding(h["hop"], f"**What if the images were photos** ({hop_label(facts, workload, h['hop'])}, "
                               f"chapter 8): {num(h['capacity'], UNITS[workload])}, "
                               f"{phrasing.comparison(_ratio(h['capacity'], d), baseline='the step’s need')}.",
                               h["capacity"], UNITS[workload]))
    c = facts.get(f"{workload}.model_check")
    if c is not None and c.number is not None and workload == "gradients":
        out.append(Finding(c.key, f"**The bandwidth model, checked**: {phrasing.text(facts[c.of].label)} was "
                                  f"{phrasing.value(facts[c.of], runs=False)}, {phrasing.comparison(c, facts)} "
                                  f"({phrasing.value(facts[c.basis], runs=False)}).", c.number, "×"))
    elif c is not None and c.number is not None:
        out.append(Finding(c.key, f"**The model, checked**: {phrasing.text(facts[c.of].label)} measured "
                                  f"{phrasing.value(facts[c.of])}, {phrasing.comparison(c, facts)} "
                                  f"({phrasing.value(facts[c.basis], runs=False)}).", c.number, "×"))
    return out


def padding_text(facts: Facts) -> str:
    """Chapter 5's share of real tokens per strategy: the part of the token step's tokens/s that is data."""
    shares = facts.data.get("padding_shares") or []
    if not shares:
        return ""
    parts = ", ".join(f"{phrasing.text(r['label'])} {phrasing.share(r['efficiency'])}"
                      for r in sorted(shares, key=lambda r: r["efficiency"]))
    return f"Of every position the step computes, the share that holds a real token (chapter 5, all samples): {parts}."


def checklist_caption(res, ref) -> str:
    """The checklist's caption, naming the columns it has."""
    both = ref is not None and ref is not res and ref.facts is not None
    return ("The optimisation checklist: this run, the reference host, the published figure" if both else
            "The optimisation checklist: this run and the published figure")


def _cell(f, facts, values: bool = False) -> str:
    """A checklist cell (plain text: the HTML table escapes it): a comparison with both its sides named
    ("a thread pool: 1.65× slower than a process pool"), with ``values`` each side's value too ("the first batch
    with fork (0.08 s): 188× faster than the first batch with spawn (15.1 s)"), any other fact as its headline."""
    subject = facts.get(f.of) if f.is_comparison and f.of else None
    basis = facts.get(f.basis) if f.is_comparison and f.basis else None
    if subject is None or basis is None or not subject.label or not basis.label or f.number is None:
        # what it measured, in its chapter's words, so a value is never read without its setting
        return f"{f.label}: {phrasing.headline(f)}" if f.label and f.number is not None else phrasing.headline(f)
    if values:
        return (f"{subject.label} ({phrasing.headline(subject)}): "
                f"{phrasing.comparison(f, baseline=f'{basis.label} ({phrasing.headline(basis)})')}")
    return f"{subject.label}: {phrasing.comparison(f, baseline=basis.label)}"  # an HTML cell: escaped there


def _practice(facts: Facts, ch: str, key: str) -> str:
    """What a checklist row of a chapter :data:`PRACTICE` does not name checks: its fact's or question's label."""
    k = f"{ch[:2]}.{key.removeprefix(analysis.QUESTION)}"
    a = facts.advice_for(k) if key.startswith(analysis.QUESTION) else None
    f = facts.get(k) if a is None else None
    return (a.question if a is not None and a.question else
            f.label if f is not None and f.label else key.removeprefix(analysis.QUESTION))


#: A checklist cell whose fact its chapter flagged as impossible (a rate above its ceiling, say).
FLAGGED_CELL = "flagged: a measurement problem in this run (see the chapter)"
#: Published figures that measure something else than the row beside them, by (chapter, metric): why (the source's
#: method, as the chapter explains it); the figure is shown marked, never as a value to compare with.
NOT_COMPARABLE = {
    ("10_mmap_vs_read", "POSIX events read() ÷ mmap, largest point"):
        "the source counted every event of a whole training job, most of them not data reads (chapter 10)",
}
#: Checklist rows that show both sides' values beside the comparison (a start-up time is read by its value; a count
#: of events says what it counts).
WITH_VALUES = {("08_threads_processes_gil", "first_batch.fork_vs_spawn"), ("10_mmap_vs_read", "posix_events")}


def published_cell(chapter: str, fig, *, metric: bool = True) -> str:
    """A published figure as a summary table shows it: "20.2× (sequential ÷ random, cold)" (without ``metric``
    the figure alone), marked not comparable where :data:`NOT_COMPARABLE` says the source measured something
    else; a dash without one."""
    if fig is None:
        return "—"
    why = NOT_COMPARABLE.get((chapter, fig.metric))
    return fig.text + (f" ({fig.metric})" if metric else "") + (f"; not comparable: {why}" if why else "")


def _served(facts: Facts, ch: str, key: str, cell: str) -> str:
    """A cold-read row's cell with what served the read, as chapter 2's latency check classified it: guest-cold
    (a cache below the virtual machine, not the device) where it says so."""
    st = facts.get(f"{ch[:2]}.cold_state") if key == "cold_latency" else None
    if st is None or (st.setting or {}).get("state") != "cache":
        return cell
    return f"{cell}, guest-cold: a cache below this virtual machine served it, not the device"


#: A checklist question whose chapter ran but did not measure its baseline (the library's default) in this run.
UNANSWERED = "not decided: this run did not measure the library's default it is decided against"
#: A checklist question whose chapter ran and gave no answer for another reason (its section did not run, say).
NO_ANSWER = "no answer from this run (the chapter says why)"


def unanswered(facts: Facts, ch: str, question: str) -> str:
    """The cell of a question a chapter that ran left without an answer: why, where the chapter said."""
    return UNANSWERED if f"{ch[:2]}.{question}{analysis.UNMEASURED}" in facts else NO_ANSWER


def checklist(res, ref, host: str | None = None) -> pd.DataFrame:
    """Practice · this run · reference host · published figure, one row per checklist entry: each the
    source chapter's own fact, copied into the diagnosis."""
    mine, theirs = res.facts, (ref.facts if ref is not None and ref is not res and ref.facts is not None else None)
    rows = []
    rows_of = mine.data.get("checklist") or [dict(chapter=ch, key=k) for ch, k in analysis.CHECKLIST]
    for ch, key in ((r["chapter"], r["key"]) for r in rows_of):
        if key.startswith(analysis.QUESTION):  # a question: the chapter's verdict, its gain's published figure
            a = mine.advice_for(f"{ch[:2]}.{key[1:]}")
            b = theirs.advice_for(f"{ch[:2]}.{key[1:]}") if theirs is not None else None
            g = mine.get(a.gain) if a is not None and a.gain else None
            fig = published.figure(ch, g.published) if g is not None and g.published else None
            mine_cell = (phrasing.verdict(a, mine) if a is not None else "not run" if ch not in mine.data.get(
                "found", []) else unanswered(mine, ch, key[1:]))
            theirs_cell = phrasing.verdict(b, theirs) if b is not None else "—"
        else:
            f = mine.get(f"{ch[:2]}.{key}")
            o = theirs.get(f"{ch[:2]}.{key}") if theirs is not None else None
            fig = published.figure(ch, f.published) if f is not None and f.published else None
            mine_cell = _cell(f, mine, (ch, key) in WITH_VALUES) if f is not None else "not run"
            theirs_cell = _cell(o, theirs, (ch, key) in WITH_VALUES) if o is not None else "—"
            mine_cell = _served(mine, ch, key, mine_cell) if f is not None else mine_cell
            theirs_cell = _served(theirs, ch, key, theirs_cell) if o is not None else theirs_cell
            mine_cell, theirs_cell = (FLAGGED_CELL if facts is not None and facts.flagged(f"{ch[:2]}.{key}") else c
                                      for facts, c in ((mine, mine_cell), (theirs, theirs_cell)))
        practice = PRACTICE.get((ch, key)) or _practice(mine, ch, key)
        rows.append({"chapter": chapter_number(ch), "practice": practice, "this run": mine_cell,
                     "reference host": theirs_cell,
                     "published": published_cell(ch, fig)})
    for column, facts in (("this run", mine), ("reference host", theirs)):
        # the first cell that names the cold state says what chapter 2's latency check found "cold" to mean there
        state = facts.get("02.cold_state") if facts is not None else None
        for r, text in zip(rows, phrasing.define_first_text([r[column] for r in rows], state)):
            r[column] = text
    df = pd.DataFrame(rows)
    if theirs is None:
        df = df.drop(columns=["reference host"])
    return df


# ----------------------------------------------------------------------------- charts
def hops_chart(res, workload: str):
    """Each hop's rate (dots on a log axis) against what the step asks for (the dashed line)."""
    import plotly.graph_objects as go

    from datajourney.core.charts import LOG_SPAN, PALETTE, log_axis

    facts = res.facts
    unit = UNITS[workload]
    d = facts.number(f"{workload}.demand")
    data = [h for h in _hops(facts, workload) if h["hop"] != "gpu" and h["capacity"] is not None]
    xs = [h["capacity"] for h in data]
    pts = [v for v in [*xs, d] if v is not None and v > 0]
    wide = bool(pts) and max(pts) / min(pts) >= LOG_SPAN   # else a linear axis from zero: a rate is never below it
    colours = [PALETTE[2] if d is None or v >= d else PALETTE[5] for v in xs]
    fig = go.Figure(go.Scatter(x=xs, y=[hop_label(facts, workload, h["hop"]) for h in data], mode="markers",
                               name="hop", marker=dict(size=14, color=colours),
                               # the hover label draws HTML: the plain basis escaped there, as a table escapes it
                               customdata=[[html.escape(_basis(h, _on_gpu(facts, workload)), quote=False)]
                                           for h in data],
                               hovertemplate="%{y}: %{x:,.3~s} " + unit + "<br>%{customdata[0]}<extra></extra>"))
    if d is not None:
        fig.add_vline(x=d, line=dict(dash="dash", color=PALETTE[7]))
        lo, hi = ((math.log10(min(pts) / 2), math.log10(max(pts) * 2)) if wide else (0.0, 1.15 * max(pts)))
        at = math.log10(d) if wide else d
        # a need near the axis's right end is labelled leftwards from its line, so its label stays in the plot
        fig.add_annotation(**_need_note(d, unit, at), **({"xanchor": "right"} if at > lo + 0.65 * (hi - lo) else {}))
    name = html.escape(workload_name(facts, workload, plain=True), quote=False)
    fig.update_layout(title=dict(text=f"{name[0].upper() + name[1:]}: each hop's rate (green keeps up)", y=0.97),
                      height=180 + 55 * max(len(data), 1), margin=dict(l=20, t=110), showlegend=False)
    if wide:   # every point and the step's need inside the axis, with room on both sides
        log_axis(fig.update_xaxes(type="log", range=[math.log10(min(pts) / 2), math.log10(max(pts) * 2)],
                                  title_text=f"{unit} the hop sustains (log scale; a model of its measurement)"))
    else:
        fig.update_xaxes(type="linear", range=[0, 1.15 * max(pts)] if pts else None, rangemode="tozero",
                         title_text=f"{unit} the hop sustains (a model of its measurement)")
    fig.update_yaxes(title_text="", visible=bool(data))   # no hop measured (a flagged one left out): no empty axis
    return fig


def _need_note(d: float, unit: str, x: float) -> dict:
    """The label of the step's need, above the plot at its dashed line (``x`` on the axis's own scale), with its
    value: the same in the hop charts and in the budget chart (whose script writes it again as the sliders move)."""
    return dict(x=x, yref="paper", y=1.02, showarrow=False, yanchor="bottom", text=f"the step's need: {num(d, unit)}")


_BUDGET_JS = charts.script_template("""
var gd = document.getElementById('{plot_id}');
var s = %s;
function num(v) {   // datajourney.core.phrasing.num for a rate: no false precision, thousands separated
  var a = Math.abs(v);
  var d = Number.isInteger(v) || a >= 100 || a == 0 ? 0 : a >= 10 ? 1 : a >= 1 ? 2
          : Math.min(6, Math.max(2, 1 - Math.floor(Math.log10(a))));
  return v.toLocaleString('en-US', {minimumFractionDigits: d, maximumFractionDigits: d});
}
function loglog(x, xs, ys) {
  var lx = Math.log(x), n = xs.length;
  if (n == 0) return null;
  if (lx <= Math.log(xs[0])) return ys[0];
  if (lx >= Math.log(xs[n - 1])) return ys[n - 1];
  for (var i = 1; i < n; i++) {
    if (lx <= Math.log(xs[i])) {
      var a = Math.log(xs[i - 1]), b = Math.log(xs[i]);
      var t = (lx - a) / (b - a);
      return Math.exp(Math.log(ys[i - 1]) + t * (Math.log(ys[i]) - Math.log(ys[i - 1])));
    }
  }
}
function model() {
  var bytes = s.kib * 1024, out = {};
  out.files = s.random.x.length ? loglog(bytes, s.random.x, s.random.y) * 1e6 / bytes : null;
  out.shard = s.sequential.x.length ? loglog(bytes, s.sequential.x, s.sequential.y) * 1e6 / bytes : null;
  out.cpu = s.cores * 1000 / s.cpu;
  out.pcie = s.pcie.x.length ? loglog(s.B * s.tensor, s.pcie.x, s.pcie.y) * 1e9 / s.tensor : null;
  var demand = s.B * 1000 / s.step;
  var xs = s.keys.map(function (k) { return out[k]; });
  var colours = xs.map(function (v) { return v >= demand ? s.ok : s.short; });
  Plotly.restyle(gd, {x: [xs, [demand, demand]], 'marker.color': [colours, null]}, [0, 1]);
  var all = xs.concat([demand]).filter(function (v) { return v > 0; });
  Plotly.relayout(gd, {'xaxis.range': [Math.log10(Math.min.apply(null, all) / s.pad),
                                       Math.log10(Math.max.apply(null, all) * s.pad)],
                       'annotations[0].x': Math.log10(demand),
                       'annotations[0].text': "the step's need: " + num(demand) + ' ' + s.unit});
}
gd.on('plotly_sliderchange', function (e) { s[e.slider.name] = +e.step.value; model(); });
""")

#: The sliders' steps, each a regular ladder (1, 2, 5 or doubling), with this run's own value added by :func:`_with`.
BUDGET_STEP_MS = [5, 10, 20, 50, 100, 200, 500]
BUDGET_BATCH = [8, 16, 32, 64, 128, 256, 512]
BUDGET_KIB = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
BUDGET_CPU_MS = [0.25, 0.5, 1, 2, 4, 8, 16]


#: Room (a factor) the budget chart leaves beyond its slowest and fastest point, the step's need included.
BUDGET_PAD = 2.0
#: What the budget chart's rates count: a sample of any size (its slider sets the bytes on disk).
BUDGET_UNIT = "samples/s"


def _with(values, current: float) -> list:
    """A slider's values with this run's own value among them, exact (the slider shows it rounded): the chart starts
    at the rates and the step's need that the hop charts show."""
    return sorted(set(values) | {float(current)})


def budget_inputs(facts: Facts) -> dict | None:
    """The measured curves and this run's workload that the budget chart starts from."""
    wl = facts.data.get("image_workload")
    if not wl:
        return None
    st = facts.data.get("storage_curve") or []
    pc = facts.data.get("pcie_curve") or []

    def curve(rows, pattern=None, x="file_size", y="MBps"):
        rows = sorted((r for r in rows if pattern is None or r.get("pattern") == pattern), key=lambda r: r[x])
        return {"x": [float(r[x]) for r in rows], "y": [float(r[y]) for r in rows]}

    # CPU per sample: the CPU hop's (loader workers and training process together)
    cpu = (_hop(facts, "image", "cpu") or {}).get("cpu_ms") or 1.0
    return dict(step=float(wl["step_ms"]), B=wl["batch_size"], kib=(wl.get("file_bytes") or 16 * 1024) / 1024,
                cpu=float(cpu), cores=wl["cores"], tensor=IMAGE_TENSOR_BYTES,
                random=curve(st, "random"), sequential=curve(st, "sequential"), pcie=curve(pc, None, "size", "GBps"),
                keys=["files", "shard", "cpu", "pcie"])


def budget_model(state: dict) -> dict:
    """Python twin of the chart's JavaScript: the hop rates and the demand for slider ``state``."""
    st = pd.DataFrame([*({"pattern": "random", "file_size": x, "MBps": y}
                         for x, y in zip(state["random"]["x"], state["random"]["y"])),
                       *({"pattern": "sequential", "file_size": x, "MBps": y}
                         for x, y in zip(state["sequential"]["x"], state["sequential"]["y"]))])
    pc = pd.DataFrame({"size": state["pcie"]["x"], "GBps": state["pcie"]["y"]})
    return analysis.budget(step_ms=state["step"], batch_size=state["B"], file_bytes=state["kib"] * 1024,
                           cpu_ms=state["cpu"], cores=state["cores"], storage=st if len(st) else None,
                           pcie=pc if len(pc) else None, tensor_bytes=state["tensor"])


def budget_figure(res):
    """The budget calculator: sliders for the GPU step, batch size, bytes per sample on disk and CPU time
    per sample; every hop's rate is recomputed in the browser by the same model as
    :func:`datajourney.chapters.c12_conclusion.analysis.budget` (no kernel needed)."""
    import plotly.graph_objects as go

    from datajourney.core.charts import PALETTE, log_axis, value_slider

    state = budget_inputs(res.facts)
    if state is None:
        return None
    labels = {"files": "storage: one file per sample", "shard": "storage: one shard, in order",
              "cpu": "CPU: the loader's work, all cores", "pcie": "PCIe: pinned copy (uint8 224² images)"}
    m = budget_model(state)
    xs = [m[k] for k in state["keys"]]
    fig = go.Figure(go.Scatter(x=xs, y=[labels[k] for k in state["keys"]], mode="markers", name="hop",
                               marker=dict(size=14, color=[PALETTE[2] if (v or 0) >= m["demand"] else PALETTE[5]
                                                           for v in xs]),
                               hovertemplate=f"%{{y}}: %{{x:,.3~s}} {BUDGET_UNIT}<extra></extra>"))
    # the step's need: a dashed line labelled above the plot, as in the hop charts (a label on the line's top
    # point was cut by the plot's edge where the need lay near it)
    fig.add_scatter(x=[m["demand"]] * 2, y=[labels[state["keys"][0]], labels[state["keys"][-1]]],
                    mode="lines", name="the step's need", line=dict(dash="dash", color=PALETTE[7]),
                    hovertemplate=f"the step's need: %{{x:,.3~s}} {BUDGET_UNIT}<extra></extra>")
    fig.add_annotation(**_need_note(m["demand"], BUDGET_UNIT, math.log10(m["demand"])))
    state_js = dict(state, ok=PALETTE[2], short=PALETTE[5], pad=BUDGET_PAD, unit=BUDGET_UNIT)
    every = [v for v in [*xs, m["demand"]] if v is not None and v > 0]
    fig.update_layout(
        title=dict(text="Budget: which hops keep up? (move the sliders; starts at this run's workload)", y=0.98),
        height=860, margin=dict(t=130, b=430, l=20), showlegend=False,   # the dots and the line are labelled
        sliders=[
            value_slider("step", "step (ms)", _with(BUDGET_STEP_MS, state["step"]), state["step"], -0.35),
            value_slider("B", "batch size", _with(BUDGET_BATCH, state["B"]), state["B"], -0.35 - 0.32),
            value_slider("kib", "sample on disk (KiB)", _with(BUDGET_KIB, state["kib"]), state["kib"], -0.35 - 0.64),
            value_slider("cpu", "CPU time per sample (ms), loader and training process", _with(BUDGET_CPU_MS,
                                                                                            state["cpu"]), state["cpu"],
                         -0.35 - 0.96),
        ],
        meta={"post_script": charts.script(_BUDGET_JS, state_js)},
    )
    fig.update_xaxes(type="log", title_text=f"{BUDGET_UNIT} (log scale)",   # the script keeps this room as values move
                     range=[math.log10(min(every) / BUDGET_PAD), math.log10(max(every) * BUDGET_PAD)])
    return log_axis(fig)
