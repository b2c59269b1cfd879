"""Chapters 4, 5, 6, 8, 9, 10 and 11: the exercise a reader works out with a pen, tied to each chapter's mechanism
(W ≥ D·B/G, the padding efficiency η, the link's peak n·r·e/8, Amdahl's law with the GIL as its serial part,
Little's law, read amplification, the ring all-reduce's T). Each expected answer here is worked from the committed
reference's raw tables, not from the page's facts; a result without what the exercise needs gets the line that says
so, never a number; chapter 9's shares of the PCIe link stay at or under its ceiling."""
import math
import re
from dataclasses import replace

import pytest
from test_on_paper import _folded, test_each_page_shows_its_exercise_on_paper_from_the_page_module

from datajourney.chapters.c04_cpu_starvation import analysis as an4
from datajourney.chapters.c04_cpu_starvation import page as p4
from datajourney.chapters.c05_padding_tax import page as p5
from datajourney.chapters.c06_pcie import page as p6
from datajourney.chapters.c06_pcie.rules import LINE_RATE, PER_LANE_GBPS
from datajourney.chapters.c08_threads_processes_gil import page as p8
from datajourney.chapters.c09_reading_smarter import analysis as an9
from datajourney.chapters.c09_reading_smarter import page as p9
from datajourney.chapters.c10_mmap_vs_read import page as p10
from datajourney.chapters.c11_gpu_to_gpu import analysis as an11
from datajourney.chapters.c11_gpu_to_gpu import page as p11
from datajourney.core import results
from datajourney.core.units import num, pct

MISSING = "The exercise on paper needs"


def _hosts(chapter: str) -> list[str]:
    return [h for h in results.reference_hosts() if results.load_reference(chapter, h) is not None]


def _with(res, name: str, table):
    """A copy of ``res`` whose table ``name`` is ``table`` (its stored facts dropped: the page analyses it now)."""
    return replace(res, tables={**res.tables, name: table}, facts=None)


def _missing(text: str) -> None:
    assert text.startswith(MISSING) and "<details>" not in text and "**" not in text, text


# --------------------------------------------------------------------------- chapter 4: W ≥ D·B/G
@pytest.mark.parametrize("host", _hosts("04_cpu_starvation"))
def test_chapter_4_on_paper_sizes_the_workers_from_d_b_and_g(host):
    res = results.load_reference("04_cpu_starvation", host)
    ask, answers = _folded(p4.paper_exercise(res))
    sw = res.table("summary")
    sw = sw[(sw["experiment"] == "worker sweep") & (sw["work"] == "tokenize")]
    d, b, g = float(sw["d_ms"].iloc[0]), int(sw["batch_size"].iloc[0]), an4.calibrated_step(res)
    assert f"**D = {num(d, 'ms')}**" in ask and f"**B = {b}**" in ask and f"**G = {num(g, 'ms')}**" in ask
    assert "tokenising" in ask
    assert f"**{num(d * b, 'ms')}** per batch" in answers
    assert f"**{math.ceil(d * b / g)} workers**" in answers
    need = math.ceil(0.9 * d * b / g)
    assert f"so **{need} workers**." in answers
    at = sw.loc[sw["workers"] == need, "step_ms"]
    if at.empty:   # the sweep did not run that count: no question on its AU
        assert "AU is that" not in ask
    else:
        au = g / float(at.iloc[0])
        assert f"**{pct(au)}**" in answers and ("falls short of" if au < 0.9 else "reaches") in answers
    # twice the cost per sample: twice the workers the model asks for (every answer moves with the data)
    s = res.table("summary").copy()
    s.loc[s["work"] == "tokenize", "d_ms"] *= 2
    assert f"**{math.ceil(2 * d * b / g)} workers**" in _folded(p4.paper_exercise(_with(res, "summary", s)))[1]


@pytest.mark.parametrize("host", _hosts("04_cpu_starvation"))
def test_chapter_4_on_paper_without_a_worker_sweep_says_so(host):
    res = results.load_reference("04_cpu_starvation", host)
    s = res.table("summary")
    _missing(p4.paper_exercise(_with(res, "summary", s[s["experiment"] != "worker sweep"])))


# --------------------------------------------------------------------------- chapter 5: η of the first batch
@pytest.mark.parametrize("host", _hosts("05_padding_tax"))
def test_chapter_5_on_paper_works_eta_from_the_first_batch(host):
    res = results.load_reference("05_padding_tax", host)
    ask, answers = _folded(p5.paper_exercise(res))
    fb = res.table("first_batch").set_index("strategy")
    ctx, longest, packed = fb.loc["pad_to_context"], fb.loc["pad_to_longest"], fb.loc["greedy_pack"]
    real, b, c = int(ctx["real_tokens"]), int(ctx["samples"]), int(ctx["row_len"])
    assert f"**{b}** samples with **{real:,}** real tokens" in ask and f"**{c:,}** positions" in ask
    eta = real / (b * c)
    assert f"= **{100 * eta:.3g}%**" in answers
    assert f"= **{pct(real / (b * int(longest['row_len'])))}**" in answers
    assert f"**{num(float(packed['efficiency']) / eta, '×')}**" in answers
    assert eta == pytest.approx(float(ctx["efficiency"]))   # the η the page works out is the one the run stored


@pytest.mark.parametrize("host", _hosts("05_padding_tax"))
def test_chapter_5_on_paper_without_the_padded_first_batch_says_so(host):
    res = results.load_reference("05_padding_tax", host)
    fb = res.table("first_batch")
    _missing(p5.paper_exercise(_with(res, "first_batch", fb[fb["strategy"] != "pad_to_context"])))


# --------------------------------------------------------------------------- chapter 6: the link's peak
def _pinned_h2d(res) -> tuple[int, float]:
    b = res.table("bandwidth")
    b = b[(b["direction"] == "H2D") & (b["memory"] == "pinned") & (b["clock"] == b["clock"].iloc[0])]
    top = b[b["size"] == b["size"].max()]
    return int(top["size"].iloc[0]), float(top["median"].iloc[0])


@pytest.mark.parametrize("host", _hosts("06_pcie"))
def test_chapter_6_on_paper_works_the_peak_from_lanes_rate_and_encoding(host):
    res = results.load_reference("06_pcie", host)
    link = res.metadata["link"]
    gen, width = link["gen_max"], link["width_max"]
    rate, bits, line = LINE_RATE[gen]
    peak = width * rate * bits / line / 8
    assert peak == pytest.approx(link["peak_GBps"]) and PER_LANE_GBPS[gen] * width == pytest.approx(peak)
    ask, answers = _folded(p6.paper_exercise(res))
    assert f"**{width} lanes**" in ask and f"**{rate:g} GT/s**" in ask and f"{bits}b/{line}b" in ask
    size, gbps = _pinned_h2d(res)
    assert f"= **{num(peak, 'GB/s')}**" in answers and f"= **{pct(gbps / peak)}**" in answers
    assert "measurement problem" not in answers
    assert f"**{p6.short_time(size / (gbps * 1e9))}** pinned" in answers


@pytest.mark.parametrize("host", _hosts("06_pcie"))
def test_chapter_6_on_paper_names_a_copy_above_the_peak_a_measurement_problem(host):
    res = results.load_reference("06_pcie", host)
    b = res.table("bandwidth").copy()
    b.loc[(b["direction"] == "H2D") & (b["memory"] == "pinned"), "median"] *= 1.5   # above the link's peak
    res = replace(_with(res, "bandwidth", b), metadata={**res.metadata, "link": dict(res.metadata["link"])})
    answers = _folded(p6.paper_exercise(res))[1]
    assert "measurement problem" in answers and "pageable" not in answers


@pytest.mark.parametrize("host", _hosts("06_pcie"))
def test_chapter_6_on_paper_without_the_link_says_so(host):
    res = results.load_reference("06_pcie", host)
    link = {k: v for k, v in res.metadata["link"].items() if k != "peak_GBps"}
    _missing(p6.paper_exercise(replace(res, metadata={**res.metadata, "link": link}, facts=None)))


# --------------------------------------------------------------------------- chapter 8: Amdahl's law and the GIL
def _task(res) -> tuple[float, float]:
    """(T, H): one image of section 1's task with Pillow (read, decode and resize, stack) alone on one thread, and the
    part of it that held the GIL, from the GIL-held table."""
    g = res.table("gil_held").set_index("op")
    ops = ("read", "decode_pillow", "collate")
    return (float(sum(g.loc[o, "ms_per_image"] for o in ops)), float(sum(g.loc[o, "held_ms_per_image"] for o in ops)))


@pytest.mark.parametrize("host", _hosts("08_threads_processes_gil"))
def test_chapter_8_on_paper_bounds_the_threads_by_the_time_an_image_holds_the_gil(host):
    res = results.load_reference("08_threads_processes_gil", host)
    ask, answers = _folded(p8.paper_exercise(res))
    t, h = _task(res)
    ops = res.table("ops")
    n = int(max(c for c in ops["concurrency"].unique() if c <= res.metadata["cores"]))   # no oversubscription
    p = res.table("primitives")
    got = p[(p["decoder"] == "pillow") & (p["executor"] == "thread") & (p["concurrency"] == n)]["images_per_s"].mean()
    assert f"**T = {num(t, 'ms')}**" in ask and f"**H = {num(h, 'ms')}**" in ask and f"**N = {n} threads**" in ask
    assert f"**{num(got, 'img/s')}**" in ask
    def said(v):   # a result, after "=" or "≈" (the printed inputs give it by hand, or are rounded)
        return re.search(f"[=≈] \\*\\*{re.escape(v)}\\*\\*", answers)

    assert said(num(1e3 / h, "img/s"))
    pred = 1e3 / (h + (t - h) / n)
    assert said(num(pred, "img/s")) and said(pct(got / pred))
    assert ("short of it" in answers) == (got / pred < 1 - p8.PREDICTION_TOL)
    # twice the time held: half the ceiling (every answer moves with the data)
    g = res.table("gil_held").copy()
    g["held_ms_per_image"] *= 2
    answers = _folded(p8.paper_exercise(_with(res, "gil_held", g)))[1]
    assert said(num(1e3 / (2 * h), "img/s"))


@pytest.mark.parametrize("host", _hosts("08_threads_processes_gil"))
def test_chapter_8_on_paper_without_a_time_held_says_so(host):
    res = results.load_reference("08_threads_processes_gil", host)
    _missing(p8.paper_exercise(_with(res, "gil_held", res.table("gil_held").iloc[0:0])))
    g = res.table("gil_held").assign(held_ms_per_image=0.0)   # nothing held: no ceiling to work out
    _missing(p8.paper_exercise(_with(res, "gil_held", g)))


def test_chapter_8_shows_its_exercise_on_paper_from_the_page_module():
    test_each_page_shows_its_exercise_on_paper_from_the_page_module("08_threads_processes_gil")


# --------------------------------------------------------------------------- chapter 9: Little's law
@pytest.mark.parametrize("host", _hosts("09_reading_smarter"))
def test_chapter_9_on_paper_applies_littles_law_to_the_pread_table(host):
    res = results.load_reference("09_reading_smarter", host)
    ask, answers = _folded(p9.paper_exercise(res))
    r = res.table("random")
    pread = r[r["mode"].isin(["pread, 1 thread", "pread, thread pool"])]
    for t, g in pread.groupby("threads"):
        if t not in (pread["threads"].min(), pread["threads"].max()):
            continue
        lat, iops = g["mean_us"].mean(), g["IOPS"].mean()
        assert f"**{num(lat, 'µs')}**" in ask
        # "=" where the rounded latency gives the printed IOPS by hand, "≈" where it does not
        assert re.search(f"{t} ÷ {num(lat, 'µs')} [=≈] \\*\\*{num(t / (lat * 1e-6), 'IOPS')}\\*\\*", answers)
        assert f"measured {num(iops, 'IOPS')}, {pct(iops / (t / (lat * 1e-6)))} of it" in answers
    top = pread[pread["threads"] == pread["threads"].max()]
    depth, iops = top["dev_queue_depth"].mean(), top["IOPS"].mean()
    assert re.search(f"[=≈] \\*\\*{num(depth / iops * 1e6, 'µs')}\\*\\*", answers)


@pytest.mark.parametrize("host", _hosts("09_reading_smarter"))
def test_chapter_9_on_paper_without_random_reads_says_so(host):
    res = results.load_reference("09_reading_smarter", host)
    _missing(p9.paper_exercise(_with(res, "random", res.table("random").iloc[0:0])))


@pytest.mark.parametrize("host", _hosts("09_reading_smarter"))
def test_chapter_9_shares_of_the_pcie_link_never_pass_its_ceiling(host):
    """Path (e)'s copy from pinned RAM printed 102% "of the PCIe copy", a ceiling the glossary says nothing
    exceeds: it is the same pinned copy, so the ceiling is the fastest of both, and the page says which."""
    res = results.load_reference("09_reading_smarter", host)
    g = res.table("gpu").copy()
    copy_only = g["path"] == an9.COPY_ONLY
    assert copy_only.any()
    top = max(an9.pcie_copy_runs(res))
    g.loc[copy_only, "GBps"] = g.loc[copy_only, "GBps"] / g.loc[copy_only, "GBps"].min() * top * 1.02
    faster = _with(res, "gpu", g)
    share = p9.gpu_table(faster)["% of the PCIe copy"].dropna()
    assert not share.empty and share.max() <= 100 + 1e-9, share.tolist()
    assert an9.pcie_ceiling(faster) == pytest.approx(g.loc[copy_only, "GBps"].max())
    assert "a run of path (e)'s copy from pinned RAM" in p9.ceilings_text(p9.facts_of(faster))
    # where the independent copy is the fastest, the page says so
    g.loc[copy_only, "GBps"] = top / 2
    assert "the independent copy's fastest repeat" in p9.ceilings_text(p9.facts_of(_with(res, "gpu", g)))


# --------------------------------------------------------------------------- chapter 10: read amplification
@pytest.mark.parametrize("host", _hosts("10_mmap_vs_read"))
def test_chapter_10_on_paper_divides_the_bytes_brought_in_by_the_samples_bytes(host):
    res = results.load_reference("10_mmap_vs_read", host)
    ask, answers = _folded(p10.paper_exercise(res))
    s = res.table("sweep")
    cold = s[(s["cache"] == "cold") & (s["part"] == s["part"].iloc[0])]
    seq = cold["seq"].max()
    at = cold[(cold["seq"] == seq) & (cold["batch"] == cold[cold["seq"] == seq]["batch"].max())]
    n, held = at["samples"].mean(), at["app_bytes"].mean()
    assert held == pytest.approx(n * (seq + 1) * res.metadata.get("itemsize", 2))
    assert f"**{num(n)}** samples of {num(seq + 1)} tokens" in ask
    assert f"= **{p10._bytes(held)}**" in answers
    for mode in ("read", "mmap"):
        m = at[at["mode"] == mode]
        got = m["read_bytes"].mean()
        assert f"{p10._bytes(got)} ÷ {p10._bytes(held)} = **{num(got / held, '×')}**" in answers
        k = m["syscr" if mode == "read" else "majflt"].mean()
        assert f"= **{num(got / k / 1024, 'KiB')}**" in answers


@pytest.mark.parametrize("host", _hosts("10_mmap_vs_read"))
def test_chapter_10_on_paper_without_cold_runs_says_so(host):
    res = results.load_reference("10_mmap_vs_read", host)
    s = res.table("sweep")
    text = p10.paper_exercise(_with(res, "sweep", s[s["cache"] != "cold"]))
    _missing(text)
    assert "cold runs" in text


# --------------------------------------------------------------------------- chapter 11: the ring all-reduce
@pytest.mark.parametrize("host", _hosts("11_gpu_to_gpu"))
def test_chapter_11_on_paper_times_the_gradients_ring_all_reduce(host):
    res = results.load_reference("11_gpu_to_gpu", host)
    ask, answers = _folded(p11.paper_exercise(res))
    r = res.table("rungs")
    r = r[r["status"] == "ok"]
    ddp = r[(r["world"] > 1) & (r["rung"] == "ddp")].iloc[0]
    n, grad = int(ddp["world"]), int(r[r["rung"] == "no_ddp"]["grad_bytes"].iloc[0])
    gx = an11.gradient_exchange(res)
    bus = gx["paths"][gx["default"]]["busbw_GBps"]
    t = 2 * (n - 1) / n * grad / (bus * 1e9) * 1e3
    # the ring's traffic over busbw is the gradients over the algorithm bandwidth the model of chapter 12 uses
    assert t == pytest.approx(gx["paths"][gx["default"]]["allreduce_ms"], rel=1e-6)
    assert f"**S = {grad:,} bytes**" in ask and f"**n = {n}**" in ask and f"**busbw = {num(bus, 'GB/s')}**" in ask
    assert f"= **{num(t, 'ms')}**" in answers
    loss = [row for row in an11.analyse(res).data["loss"].get("rows") or [] if row.get("processes") == n]
    if loss:   # the NCCL time the loss split profiled in training, on the rung it took apart
        assert f"= **{num(loss[0]['nccl_train_ms'] / t, '×')}** in training" in answers
    grew = 1e3 / float(ddp["steps_per_s"]) - 1e3 / float(r[r["rung"] == "no_ddp"]["steps_per_s"].iloc[0])
    assert f"**{num(grew, 'ms')}** longer" in answers and f"= **{pct(t / grew)}**" in answers


@pytest.mark.parametrize("host", _hosts("11_gpu_to_gpu"))
def test_chapter_11_on_paper_on_one_process_says_so(host):
    res = results.load_reference("11_gpu_to_gpu", host)
    r = res.table("rungs")
    _missing(p11.paper_exercise(_with(res, "rungs", r[r["world"] == 1])))


def test_every_exercise_on_paper_states_its_numbers_in_bold_and_answers_each_question():
    """Every chapter's block on the committed reference: numbered questions, as many folded answers, each answer
    ending in a bold computed result."""
    for chapter, page in (("04_cpu_starvation", p4), ("05_padding_tax", p5), ("06_pcie", p6),
                          ("08_threads_processes_gil", p8), ("09_reading_smarter", p9), ("10_mmap_vs_read", p10),
                          ("11_gpu_to_gpu", p11)):
        for host in _hosts(chapter):
            ask, answers = _folded(page.paper_exercise(results.load_reference(chapter, host)))
            asked = re.findall(r"^\d+\. ", ask, re.M)
            worked = re.findall(r"^\d+\. .*\*\*[^*\n]+\*\*", answers, re.M)
            assert len(asked) >= 2 and len(worked) == len(asked), (chapter, host, answers)


@pytest.mark.parametrize("host", _hosts("11_gpu_to_gpu"))
def test_chapter_11_on_paper_of_a_cpu_run_speaks_of_processes(host):
    """A run without CUDA all-reduces between processes (gloo): its exercise names no GPU."""
    res = results.load_reference("11_gpu_to_gpu", host)
    text = p11.paper_exercise(replace(res, metadata={**res.metadata, "cuda": False}, facts=None))
    assert "**n = " in text and "GPU" not in text, text


# --------------------------------------------------------------------------- chapter 12: the budget model
def _diagnosed(host: str, tmp_path, edit=None):
    """Chapter 12's diagnosis of a host's committed references (each analysed now, after ``edit``), with a stated
    token demand (the measured step has tests of its own)."""
    from helpers import analysed_references

    from datajourney.book import harness, registry

    ref = results.REFERENCE_DIR / host
    chapters = [c for c in registry.sources("12_conclusion") if (ref / f"{c}.json").is_file()]
    analysed_references(tmp_path, ref, chapters, edit)
    return harness.run("12_conclusion", run_dir=tmp_path, llm_tokens_per_s=1e6)


def _budget_from_tables(run_dir) -> dict:
    """The budget model worked from chapter 7's and chapter 10's raw tables: chapter 7's step (the faster of its
    eager and graphed ceilings), batch and cores; the CPU per image (loader workers' and training process's busy
    cores ÷ images/s) of its fastest pipeline run with that step; chapter 10's advised reader's best cold rate, its
    workers and the cores."""
    r7 = results.Result.load(run_dir / "07_full_picture.json")
    steps = {k: float(r7.table(t)["step_ms"].mean()) for k, t in (("eager", "ceiling"), ("graphed", "graphed_ceiling"))
             if t in r7.tables}
    kind = min(steps, key=steps.get)
    sc = r7.table("scenarios")
    sc = sc[sc["ceiling"] == kind]
    fmt, w, var = sc.groupby(["format", "workers", "variant"])["images_per_s"].mean().idxmax()
    rows = sc[(sc["format"] == fmt) & (sc["workers"] == w) & (sc["variant"] == var)]
    ips = rows["images_per_s"].mean()
    r10 = results.Result.load(run_dir / "10_mmap_vs_read.json")
    mode = r10.facts.advice_for("tokens.loader_mode").value     # chapter 10's verdict on the reader
    sw = r10.table("sweep")
    sw = sw[(sw["cache"] == "cold") & (sw["loader_s"] > 0) & (sw["mode"] == mode)]
    rate = sw.assign(rate=sw["tokens"] / sw["loader_s"]).groupby(["seq", "batch", "workers"])["rate"].mean()
    return dict(g=steps[kind], b=int(r7.parameters["batch_size"]), c=int(r7.metadata["cores"]),
                workers_ms=rows["worker_cores"].mean() * 1e3 / ips, main_ms=rows["main_cores"].mean() * 1e3 / ips,
                token_rate=float(rate.max()), token_workers=int(rate.idxmax()[2]),
                token_cores=int(r10.metadata["cores"]))


def _check_budget_exercise(res, raw: dict) -> tuple[int, int]:
    """The exercise's numbers and answers against the raw tables' own; the image and token counts it works out."""
    from datajourney.chapters.c12_conclusion import page as p12

    ask, answers = _folded(p12.paper_exercise(res))
    g, b, c = raw["g"], raw["b"], raw["c"]
    d = raw["workers_ms"] + raw["main_ms"]
    assert f"**G = {num(g, 'ms')}**" in ask and f"**B = {b}**" in ask and f"**C = {c} cores**" in ask
    assert f"**{num(raw['workers_ms'], 'ms')}** of CPU in its loader workers" in ask
    assert f"**{num(raw['main_ms'], 'ms')}** in its training process" in ask
    need, rate = b * 1e3 / g, c * 1e3 / d
    n = math.floor(rate / (0.9 * need))
    assert re.search(f"[=≈] \\*\\*{num(need, 'images/s')}\\*\\*", answers)
    assert re.search(f"[=≈] \\*\\*{num(rate, 'images/s')}\\*\\*", answers)
    assert f"so **{n} GPU{'' if n == 1 else 's'}**" in answers
    fit = raw["token_cores"] // (raw["token_workers"] + 1)
    loaders = max(1, fit)   # one rank runs however few the cores
    fed = loaders if raw["token_rate"] >= 0.9 * 1e6 else 0
    assert f"**{raw['token_workers']} workers**" in ask and f"**{num(raw['token_rate'], 'tokens/s')}**" in ask
    assert f"⌊{raw['token_cores']} ÷ ({raw['token_workers']} + 1)⌋ = {fit}" in answers
    assert f"{loaders} loader" in answers
    assert f"**{fed} GPU{'' if fed == 1 else 's'}**" in answers
    return n, fed


@pytest.mark.parametrize("host", _hosts("12_conclusion"))
def test_chapter_12_on_paper_counts_the_gpus_the_cpu_feeds_from_d_and_the_step(host, tmp_path):
    """The budget model by hand: r_need = B ÷ G, r_CPU = C ÷ D (D: one image's CPU in the loader's workers plus the
    training process's), N = ⌊r_CPU ÷ (0.9 · r_need)⌋, and the token loaders (one per rank, W + 1 cores each) that
    fit; every number worked here from the raw tables. The counts are the ones the answer states and the hop
    tables show: one computed value."""
    from datajourney.chapters.c12_conclusion import page as p12

    res = _diagnosed(host, tmp_path / "ref")
    n, fed = _check_budget_exercise(res, _budget_from_tables(tmp_path / "ref"))
    for wl, count in (("image", n), ("tokens", fed)):
        stated = res.facts.get(f"{wl}.gpus_fed")
        if stated is None:   # the image count needs the pipeline measured end to end at the bar
            continue
        binding = res.facts.data[f"{wl}.fed"]["hop"]
        table = p12.hops_display(res, wl).set_index("hop")
        row = table.loc[p12.hop_label(res.facts, wl, binding)]
        assert row[p12.GPUS_COLUMN] == f"{stated.value:,}"
        if res.facts.data[f"{wl}.fed"]["binding"] == "CPU":
            assert stated.value == count
        line = p12.opening(res.facts).findings[0 if wl == "image" else 1].text
        assert f"could feed **{stated.value}** such GPUs" in line


@pytest.mark.parametrize("host", _hosts("12_conclusion"))
def test_chapter_12_on_paper_follows_a_dearer_image_and_fewer_cores(host, tmp_path):
    """Three times the loader workers' CPU per image in chapter 7's counters, and chapter 10 on a quarter of the
    cores: the exercise's D, its counts and the answer's counts move with the data."""
    def edit(ch, r):
        if ch == "07_full_picture":
            r.tables["scenarios"]["worker_cores"] *= 3
        if ch == "10_mmap_vs_read":
            r.metadata["cores"] = max(1, int(r.metadata["cores"]) // 4)

    before = _diagnosed(host, tmp_path / "ref")
    res = _diagnosed(host, tmp_path / "dear", edit)
    raw = _budget_from_tables(tmp_path / "dear")
    n, fed = _check_budget_exercise(res, raw)
    assert n < _check_budget_exercise(before, _budget_from_tables(tmp_path / "ref"))[0]
    for wl, count in (("image", n), ("tokens", fed)):
        stated = res.facts.get(f"{wl}.gpus_fed")
        if stated is not None and res.facts.data[f"{wl}.fed"]["binding"] == "CPU":
            assert stated.value == count, wl


def test_chapter_12_on_paper_without_chapter_7_says_so(tmp_path):
    from datajourney.book import harness
    from datajourney.chapters.c12_conclusion import page as p12

    res = harness.run("12_conclusion", run_dir=tmp_path, llm_tokens_per_s=1e6)
    _missing(p12.paper_exercise(res))


@pytest.mark.parametrize("host", _hosts("12_conclusion"))
def test_chapter_12_exercise_states_its_numbers_in_bold_and_answers_each_question(host, tmp_path):
    from datajourney.chapters.c12_conclusion import page as p12

    ask, answers = _folded(p12.paper_exercise(_diagnosed(host, tmp_path)))
    asked = re.findall(r"^\d+\. ", ask, re.M)
    worked = re.findall(r"^\d+\. .*\*\*[^*\n]+\*\*", answers, re.M)
    assert len(asked) >= 2 and len(worked) == len(asked), answers


def test_chapter_11_on_paper_says_when_its_nccl_times_come_from_slower_profiled_steps():
    """NCCL's kernel time per step can exceed a timed step only because the profiled steps ran longer: where the
    analysis flagged the split rung's profiled steps as slower than its timed ones, the question says so with both
    lengths; without that flag it adds nothing."""
    from datajourney.book import registry

    facts = registry.analysed(results.load_reference("11_gpu_to_gpu", "h200x4")).facts
    rung = str(facts.data["loss"]["rung"])
    n = max(r["processes"] for r in facts.data["loss"]["rows"])
    flags = [x for x in facts.data["profile_flags"]
             if x["kind"] == "slow" and x["rung"] == rung and x["world"] == n and x["path"] == "direct"]
    assert flags, "the reference's split rung was profiled slower than timed: the case this test reads"
    ask = _folded(p11.paper_exercise(facts))[0]
    assert "ran slower than the timed ones" in ask and f"{p11.num(flags[0]['step_ms'], 'ms')}" in ask
    quiet = replace(facts, data={**facts.data, "profile_flags": [x for x in facts.data["profile_flags"]
                                                                  if x not in flags]})
    assert "ran slower than the timed ones" not in _folded(p11.paper_exercise(quiet))[0]
