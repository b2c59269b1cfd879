"""Chapter 12: the diagnosis reads the facts other chapters stored in their result files (never their
code), follows the data it reads, names what is missing, and the budget model is the one the chart's
JavaScript evaluates."""
import re
from html import escape as html_escape

import pytest
from helpers import HOSTILE, analysed_references, assert_stays_text, with_default_rung

from datajourney.book import harness, opening, registry, report
from datajourney.chapters import wording
from datajourney.chapters.c12_conclusion import analysis, page
from datajourney.core import results
from datajourney.core.facts import Advice, Fact, compare
from datajourney.core.params import ParameterError

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

REF = results.REFERENCE_DIR / "h200"
#: A stated token demand, so that these tests time no model (the measured step has tests of its own).
STATED = dict(llm_tokens_per_s=1e6)


def _referenced() -> list[str]:
    """The chapters the diagnosis reads that have a committed reference result (a new chapter may have none)."""
    return [c for c in registry.sources("12_conclusion") if (REF / f"{c}.json").is_file()]


def _run_with(tmp_path, chapters=None, edit=None, **params):
    """Diagnose a run directory holding the reference results of ``chapters`` (all by default), after
    ``edit(chapter, result)`` changed their measurements; each file's facts come from its own analysis."""
    analysed_references(tmp_path, REF, chapters or _referenced(), edit)
    return harness.run("12_conclusion", run_dir=tmp_path, **{**STATED, **params})


def _hops(res, workload):
    return {h["hop"]: h for h in res.facts.data["hops"] if h["workload"] == workload}


def test_reference_run_names_the_slowest_hop(tmp_path):
    res = _run_with(tmp_path)
    image = _hops(res, "image")
    assert set(image) & analysis.ASIDE  # chapter 8's photo hops are shown ...
    known = {k: h["capacity"] for k, h in image.items() if h["capacity"] is not None and k not in analysis.ASIDE}
    w = res.facts.data["image.weakest"]  # ... but never taken as chapter 7's weakest link
    assert w["capacity"] == min(known.values()) and known[w["key"]] == w["capacity"]
    assert res.facts.data["missing"] == [c for c in registry.sources("12_conclusion") if c not in _referenced()]
    assert res.facts["image.weakest"].value == w["key"]
    opening = page.opening(res.facts)
    assert page.hop_label(res.facts, "image", w["key"]) in opening.findings[0].text


def test_slow_storage_becomes_the_weakest_link(tmp_path):
    """Reverse the reference: make one-file-per-sample reads 1,000× slower; the diagnosis must move."""
    def slow(ch, r):
        if ch == "02_random_vs_sequential":
            t = r.tables["size_sweep"]
            t.loc[t["pattern"] == "random", "MBps"] /= 1000

    res = _run_with(tmp_path, edit=slow)
    assert res.facts.data["image.weakest"]["key"] == "files"
    m = res.facts["image.margin"]
    assert m.number < 1 and "slower than the step" in page.opening(res.facts).findings[0].text
    assert any("one-file-per-sample storage" in line for line in page.summary_lines(res.facts))


def test_partial_run_names_the_missing_chapters(tmp_path):
    res = _run_with(tmp_path, chapters=["07_full_picture"])
    assert set(res.facts.data["missing"]) == set(registry.sources("12_conclusion")) - {"07_full_picture"}
    assert res.facts.data["image.weakest"]["key"] in ("cpu", "gpu")
    assert res.facts.data["tokens.weakest"] is None  # no measured hop for tokens: no verdict
    op = page.opening(res.facts)   # the first screen's workloads: one not diagnosed says why in one line
    assert [f.key for f in op.findings] == ["image.margin", "tokens.margin"]
    assert "no diagnosis (its chapters are not in this run)" in op.findings[1].text
    # the data-parallel step says why in its own section and under "How we know"
    assert "no diagnosis (chapter 11 did not run here)" in page.data_parallel_answer(res.facts)
    assert any("no diagnosis (chapter 11 did not run here)" in f.text for f in page.findings(res.facts))
    assert opening.shown(op, getattr(page, "OPENING_LINES", opening.OPENING_LINES)) == op.findings
    table = page.checklist(res, None)
    assert (table.loc[table["chapter"] == 2, "this run"] == "not run").all()


def test_empty_run_still_renders(tmp_path):
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    assert res.facts.data["found"] == []
    assert all(res.facts.data[f"{wl}.weakest"] is None for wl in analysis.UNITS)
    assert page.budget_figure(res) is None
    assert len(page.findings(res.facts)) >= 2


def test_result_files_without_facts_are_not_read(tmp_path):
    """Chapter 12 reads stored facts only: a result file of schema 2 (no facts) is named as missing."""
    for ch in ("02_random_vs_sequential", "07_full_picture"):
        r = results.Result.load(REF / f"{ch}.json")
        r.facts = None  # as a file written before schema 3
        r.save(tmp_path)
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    assert "07_full_picture" in res.facts.data["missing"]


def test_budget_model_matches_the_hops(tmp_path):
    """The chart starts from the run's own workload, so the model gives the table's rates there."""
    res = _run_with(tmp_path)
    state = page.budget_inputs(res.facts)
    hops = _hops(res, "image")
    w = res.facts.data["image_workload"]
    exact = dict(state, step=w["step_ms"], kib=w["file_bytes"] / 1024, cpu=hops["cpu"]["cpu_ms"])
    m = page.budget_model(exact)
    for key in ("files", "shard", "cpu", "pcie"):
        assert m[key] == pytest.approx(hops[key]["capacity"])
    assert m["demand"] == pytest.approx(hops["gpu"]["capacity"])


@pytest.mark.parametrize("name,value", [("token_bytes", 3), ("llm_tokens_per_s", 0), ("tokens_per_batch", 0),
                                        ("llm_tokens_per_s", float("nan")), ("token_model", "gpt3"),
                                        ("token_seq_len", 0), ("token_steps", 0), ("tokens_per_batch", 512)])
def test_bad_parameters_fail_before_work(tmp_path, name, value):
    """One-line errors naming the parameter, before any work (512 tokens cannot fill one 1,024-token row)."""
    params = dict(llm_tokens_per_s=None, token_bytes=4, tokens_per_batch=4096, run_dir=tmp_path)
    params[name] = value
    with pytest.raises(ParameterError, match=name) as e:
        harness.run("12_conclusion", **params)
    assert "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())


def test_checklist_rows_exist_in_their_chapters():
    """Every checklist row names a fact its chapter's analysis really computes on the reference run."""
    for ch, key in analysis.CHECKLIST:
        facts = registry.lookup(ch).analyse(results.load_reference(ch))
        if key.startswith(analysis.QUESTION):  # a question: its chapter answers it on the reference run, or
            # says the run did not measure its baseline (chapter 11's results from before DDP's defaults were a rung)
            assert facts.advice_for(key[1:]) is not None or (ch, facts.data.get("ddp_default", {}).get("measured")) \
                == ("11_gpu_to_gpu", False), (ch, key)
        else:
            assert key in facts, (ch, key)
        assert (ch, key) in page.PRACTICE


def test_copy_leaves_reference_untouched(tmp_path):
    before = {p.name: p.read_bytes() for p in REF.glob("0*.json")}
    _run_with(tmp_path)
    assert before == {p.name: p.read_bytes() for p in REF.glob("0*.json")}


def test_sources_are_every_chapter_but_the_machine_and_the_diagnosis():
    """The diagnosis reads every chapter the registry finds (a new folder too), but chapter 1 (the machine) and
    itself."""
    assert registry.sources("12_conclusion") == tuple(c.name for c in registry.CHAPTERS
                                                       if c.number not in (1, 12))
    assert [int(c[:2]) for c in registry.sources("12_conclusion")][:10] == list(range(2, 12))


def test_photo_decode_too_slow_for_the_gpu(tmp_path):
    """Reverse chapter 8: decoding 30× slower makes the photo what-if fall short of the step's need."""
    def slow(ch, r):
        if ch == "08_threads_processes_gil" and "calibration" in r.tables:
            for col in [c for c in r.tables["calibration"] if c.endswith("_ms")]:
                r.tables["calibration"][col] *= 30

    ref = _hops(_run_with(tmp_path / "ref"), "image")["photo_cpu"]["capacity"]
    mine = _hops(_run_with(tmp_path / "mine", edit=slow), "image")["photo_cpu"]["capacity"]
    assert mine < ref


def test_allreduce_slower_than_the_step(tmp_path):
    """Reverse chapter 11: DDP on N GPUs at a third of one GPU's steps/s (its measured cost, not the bandwidth
    model) makes the exchange of gradients the weakest link."""
    def slow(ch, r):
        if ch == "11_gpu_to_gpu":
            with_default_rung(r)
            w = r.tables["windows"]
            w.loc[w["world"] > 1, "steps_per_s"] /= 3

    res = _run_with(tmp_path, edit=slow)
    assert res.facts.data["gradients.weakest"]["key"] == "allreduce"


def _ddp_kept(run_dir) -> tuple[float, float, float]:
    """Chapter 11's measured share (%) each GPU kept with DDP's defaults, worked from the result's raw tables: each
    GPU's mean steps/s on N GPUs with DDP's defaults ÷ one GPU's without DDP; with one GPU's step (ms) and its
    bandwidth model of one all-reduce (ms), from the exported data the diagnosis reads."""
    r = results.Result.load(run_dir / "11_gpu_to_gpu.json")
    w, rungs = r.table("windows"), r.table("rungs")
    rungs = rungs[rungs["status"] == "ok"]
    n = int(rungs["world"].max())
    default = rungs[(rungs["world"] == n) & (rungs["path"] == "direct") & (rungs["bucket_cap_mb"] == 25)
                    & ~rungs["static_graph"].astype(bool) & ~rungs["bucket_view"].astype(bool)
                    & (rungs["hook"] == "none")]
    job, rung = str(default["job"].iloc[0]), str(default["rung"].iloc[0])
    many = w[(w["job"] == job) & (w["rung"] == rung)]["steps_per_s"].mean()
    one = w[(w["job"] == "one") & (w["rung"] == "no_ddp")]["steps_per_s"].mean()
    gx = r.facts.data["gradient_exchange"]
    return 100 * many / one, 1e3 / one, gx["paths"][gx["default"]]["allreduce_ms"]


@pytest.mark.parametrize("factor", [1.0, 0.8, 1 / 3])
def test_the_data_parallel_hop_is_chapter_11s_measured_cost_not_the_bandwidth_model(tmp_path, factor):
    """The first screen read "the next hop, the all-reduce, is 15.8× faster than the step" while chapter 11 measured
    each GPU losing 6% of one GPU's steps/s to DDP. The data-parallel answer is chapter 11's exported measured share
    (worked here from its raw tables), the exchange's row is the step at that share, and the bandwidth model stands
    beside it only as the model its measured time checks. Slowing DDP's windows moves all three with it."""
    def slow(ch, r):
        if ch == "11_gpu_to_gpu":
            w = r.tables["windows"]
            w.loc[w["world"] > 1, "steps_per_s"] *= factor

    res = _run_with(tmp_path, edit=slow if factor != 1.0 else None)
    kept, step_ms, model_ms = _ddp_kept(tmp_path)
    copied = res.facts["11.ddp_default_eff"]
    assert copied.number == pytest.approx(kept)
    row = _hops(res, "gradients")["allreduce"]
    assert row["capacity"] == pytest.approx(1e3 / step_ms * kept / 100)   # the step at the measured share
    added = step_ms * (100 / kept - 1)
    assert res.facts.number("gradients.added_ms") == pytest.approx(added)
    assert res.facts.number("gradients.model_ms") == pytest.approx(model_ms)
    assert res.facts.number("gradients.model_check") == pytest.approx(added / model_ms)
    said = page.data_parallel_answer(res.facts)
    # worded as chapter 11 words it: the share each GPU lost (100% − the share kept), one phrasing for one fact
    lost = res.facts["11.ddp_default_loss"]
    assert lost.number == pytest.approx(100 - kept)
    assert f"each GPU lost **{page.phrasing.value(lost, runs=False)}** of one GPU's steps/s" in said
    assert "faster than the step" not in said and "all-reduce" not in said.split("**What to do**")[0]
    # the margin follows the measured share: the step at it against the step alone
    assert res.facts.number("gradients.margin") == pytest.approx(kept / 100)
    assert "[chapter 11](11_gpu_to_gpu.ipynb)" in said
    basis = page.hops_display(res, "gradients").iloc[1]["how it is computed"]
    assert page.num(kept, "%") in basis and page.num(model_ms, "ms") in basis and "bandwidth model" in basis
    note = next(f for f in page.hop_notes(res.facts, "gradients") if f.key == "gradients.model_check")
    assert page.num(added, "ms") in note.text and page.num(model_ms, "ms") in note.text


def test_the_data_parallel_answer_needs_chapter_11s_export(tmp_path):
    """Chapter 12 reads chapter 11 only through its exported facts: without ``ddp_default_eff`` among the exports
    (its value still stored) the data-parallel step has no diagnosis, never one from the bandwidth model."""
    analysed_references(tmp_path, REF, _referenced())
    r = results.Result.load(tmp_path / "11_gpu_to_gpu.json")
    assert r.facts.get(analysis.DDP_KEPT) is not None
    r.facts.exports = tuple(k for k in r.facts.exports if k != analysis.DDP_KEPT)
    r.save(tmp_path, created_utc=r.created_utc)
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    assert res.facts.data["gradients.weakest"] is None and res.facts.get("11.ddp_default_eff") is None
    assert "no diagnosis" in page.data_parallel_answer(res.facts)


def test_the_run_command_ends_with_the_diagnosis(tmp_path, capsys):
    """`./journey book` runs `python -m datajourney run --book`, which ends by printing chapter 12's
    answer: one line per workload and per remedy, and the chapters missing."""
    from datajourney.cli import _print_diagnosis

    res = _run_with(tmp_path, chapters=[c for c in _referenced() if c != "11_gpu_to_gpu"])
    _print_diagnosis(tmp_path)
    out = capsys.readouterr().out
    assert out.strip().splitlines()[0] == "Your pipeline, diagnosed (chapter 12):"
    for line in page.summary_lines(res.facts):
        assert line in out
    assert "no diagnosis" in out and "not run, so not diagnosed: chapters 11" in out
    assert "**" not in out and "](" not in out


def test_reference_column_comes_from_the_reference_facts(tmp_path):
    """A reader's run gets the reference column from the reference diagnosis's copy of each chapter's fact."""
    ref = _run_with(tmp_path / "ref")
    mine = _run_with(tmp_path / "mine", edit=lambda ch, r: r.tables["overlap"].__setitem__(
        "overlap", r.tables["overlap"]["overlap"] / 2) if ch == "06_pcie" else None)
    table = page.checklist(mine, ref).set_index(["chapter", "practice"])
    row = table.loc[(6, page.PRACTICE[("06_pcie", "cpu_overlap")])]
    assert row["reference host"] != row["this run"]


@pytest.mark.parametrize("graphed_factor, kind", [(0.9, "graphed"), (1.1, "eager")])
def test_gpu_step_is_the_faster_of_the_eager_and_graphed_ceilings(tmp_path, graphed_factor, kind):
    """Where chapter 7 measured its step replayed from CUDA graphs, the GPU hop is the faster ceiling."""
    def graphed(ch, r):
        if ch == "07_full_picture":
            g = r.tables["ceiling"].copy()
            g["step_ms"] *= graphed_factor
            r.tables["graphed_ceiling"] = g

    res = _run_with(tmp_path, edit=graphed)
    wl = res.facts.data["image_workload"]
    eager = results.Result.load(REF / "07_full_picture.json").table("ceiling")
    assert wl["step_kind"] == kind
    assert wl["step_ms"] == pytest.approx(eager["step_ms"].mean() * min(graphed_factor, 1.0))
    assert _hops(res, "image")["gpu"]["graphed"] == (kind == "graphed")


def test_hostile_strings_from_other_chapters_stay_text(tmp_path):
    """A hostile string in another chapter's result (its model name, its loader labels) reaches chapter 12's
    page only as text: no tag opens in the opening, the notes, the hop table or the checklist."""
    from datajourney.book import report

    evil = HOSTILE

    def edit(ch, r):
        if ch == "07_full_picture":
            r.metadata["model"] = evil
            for t in r.tables.values():
                if "model" in t:
                    t["model"] = evil
        if ch == "08_threads_processes_gil" and "loaders" in r.tables:
            for col in ("label", "kind"):
                if col in r.tables["loaders"]:
                    r.tables["loaders"][col] = r.tables["loaders"][col].astype(str) + evil

    res = _run_with(tmp_path, edit=edit)
    op = page.opening(res.facts)
    md = "\n".join([*(f.text for f in op.findings), *(a.text for a in op.actions),
                    *(f.text for f in page.findings(res.facts)), page.caveats_markdown(res.facts),
                    *(f.text for wl in analysis.UNITS for f in page.hop_notes(res.facts, wl))])
    assert "onerror" in md  # the string is shown ...
    assert_stays_text(md)  # ... as text
    for wl in analysis.UNITS:
        assert "<img" not in report.table_html(page.hops_display(res, wl))
    assert "<img" not in report.table_html(page.checklist(res, None))


def with_recipe(run_dir, **setting):
    """Chapter 7's result in ``run_dir`` with an exported ``recipe`` fact as chapter 7 exports it: its combined
    end-to-end setting (by default the fastest pipeline run with the priced step) against ImageFolder with
    ``num_workers=0``, its knobs as code (``parts``) and whether it cleared its threshold (``verdict``)."""
    r = results.Result.load(run_dir / "07_full_picture.json")
    top = r.facts.data["image_workload"]["step_recipe"]
    setting = {**{k: top[k] for k in ("format", "workers", "variant")}, "verdict": "change", **setting}
    w = setting["workers"]
    setting.setdefault("parts", [
        dict(what="one JPEG file per image", knob=None, code="dataset = ImageFolder(root)"),
        dict(what="the DataLoader", knob=f"num_workers={w}",
             code=f"DataLoader(dataset, batch_size=64, num_workers={w})"),
        dict(what="workers at nice 19", knob="worker_init_fn=lambda _: os.nice(19)",
             code="worker_init_fn=lambda _: os.nice(19)"),
        dict(what="the step replayed from CUDA graphs", knob="torch.cuda.graph", code="graph.replay()")])
    setting.setdefault("share", r.facts["best_vs_ceiling"].number)
    mine = Fact("recipe.ips", top["images_per_s"], "images/s", f"ImageFolder with num_workers={w}, the whole recipe")
    base = Fact(**{**r.facts["ips.imagefolder.w0"].__dict__, "key": "recipe.baseline",
                   "label": "ImageFolder with num_workers=0 and the default recipe"})
    r.facts.add(mine, base, Fact(**{**compare("recipe", mine, base).__dict__, "setting": setting}))
    r.facts.exports = (*r.facts.exports, "recipe")
    r.save(run_dir, created_utc=r.created_utc)


def test_without_a_recipe_the_image_line_is_chapter_7s_advice_with_its_own_evidence(tmp_path):
    """Chapter 7 exports no combined recipe: the image line is its worker-count verdict with that verdict's own
    evidence; the CPU hop is priced with that setting's cost per image (its loader's stages in a worker plus the
    training process's cores), and no other pipeline's end-to-end share or GPU count is set beside it."""
    analysed_references(tmp_path, REF, _referenced())
    r = results.Result.load(tmp_path / "07_full_picture.json")   # as a chapter 7 that exports no recipe
    r.facts.facts = {k: f for k, f in r.facts.facts.items() if k != "recipe" and not k.startswith("recipe.")}
    r.save(tmp_path, created_utc=r.created_utc)
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    w = res.facts.data["image_workload"]
    src = r.facts
    advice = src.advice_for("image.num_workers")
    cpu = _hops(res, "image")["cpu"]
    assert (cpu["recipe"]["workers"], cpu["recipe"]["variant"], cpu["cpu_source"]) == (advice.value, "default", "clock")
    runs = w["recipe_runs"]
    assert cpu["cpu_ms"] == pytest.approx(w["cpu_ms"] + w["main_cores"] * 1000 / (sum(runs) / len(runs)))
    action = page.opening(res.facts).actions[0]
    assert page.verdict_first(advice, src) in action.text and action.snippet == advice.snippet
    assert res.facts.get("image.fed_share") is None and res.facts.get("image.gpus_fed") is None
    best = src["best_vs_ceiling"].setting
    note = page.count_note(res.facts, "image").text   # the GPUs fed: the workload's note, never the advice's
    assert f"num\\_workers={best['workers']}" not in action.text and "could feed **" not in action.text + note
    assert "with the eager step" in note and "no count of GPUs" in note


def test_a_recipe_export_is_what_the_image_line_and_code_show(tmp_path):
    """A chapter 7 ``recipe`` fact (the pipeline that reached the highest share of its ceiling): the image line and
    its code are that recipe, the CPU hop is priced from its own CPU counters and its own end-to-end share decides
    the GPU count. A recipe chapter 7 did not run with the priced step gives no count."""
    analysed_references(tmp_path, REF, _referenced())
    with_recipe(tmp_path)
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    top = res.facts.data["image_workload"]["step_recipe"]
    cpu = _hops(res, "image")["cpu"]
    # one image's CPU: its loader workers' and its training process's, each from the recipe's own counters
    d = top["workers_ms"] + top["main_ms"]
    assert cpu["cpu_source"] == "counters" and cpu["cpu_ms"] == pytest.approx(d)
    assert cpu["capacity"] == pytest.approx(res.facts.data["image_workload"]["cores"] * 1000 / d)
    share = res.facts["image.fed_share"]
    assert share.number == pytest.approx(100 * top["images_per_s"] / res.facts.number("image.demand"))
    action = page.opening(res.facts).actions[0]
    # the recipe as chapter 7 words it (one function for both pages), in its own parts' words
    assert wording.recipe_sentence(res.facts, page.RECIPE_KEY) in action.text
    assert ("End to end, feed the GPU from one JPEG file per image with `num_workers=8`, workers at nice 19 "
            "(`worker_init_fn=lambda _: os.nice(19)`) and the step replayed from CUDA graphs") in action.text
    assert "faster than ImageFolder with num\\_workers=0 and the default recipe" in action.text
    assert "loader = DataLoader(dataset, batch_size=64, num_workers=8, worker_init_fn=lambda _: os.nice(19))" \
        in action.snippet and "graph.replay()" in action.snippet
    assert "Set `num_workers=" not in action.text and "# the DataLoader" in action.snippet
    assert res.facts.get("image.gpus_fed") is not None and "could feed **" in page.opening(res.facts).findings[0].text

    with_recipe(tmp_path, verdict="keep")   # a recipe under its threshold is not recommended
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    assert "chapter 7's recipe" not in page.opening(res.facts).actions[0].text

    with_recipe(tmp_path, workers=16, variant="default")   # measured with the eager step, not the priced one
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    assert res.facts.get("image.fed_share") is None and res.facts.get("image.gpus_fed") is None
    assert "no count of GPUs" in page.count_note(res.facts, "image").text


def test_a_gpu_count_needs_the_measured_pipeline_to_feed_one_gpu_at_the_bar(tmp_path):
    """The recipe with the priced step fed one GPU above the bar: a count is given. Slow its measured images/s to
    80%: the count goes and the answer gives the measured share instead."""
    analysed_references(tmp_path / "ref", REF, _referenced())
    with_recipe(tmp_path / "ref")
    res = harness.run("12_conclusion", run_dir=tmp_path / "ref", **STATED)
    assert res.facts.number("image.fed_share") >= 100 * analysis.AU_MIN
    assert "such GPUs at ≥ 90% of the time" in page.opening(res.facts).findings[0].text

    def slower(ch, r):
        if ch == "07_full_picture":
            r.tables["scenarios"]["images_per_s"] *= 0.8

    analysed_references(tmp_path / "slow", REF, _referenced(), slower)
    with_recipe(tmp_path / "slow")
    res = harness.run("12_conclusion", run_dir=tmp_path / "slow", **STATED)
    share = res.facts["image.fed_share"]
    assert share.number < 100 * analysis.AU_MIN and res.facts.get("image.gpus_fed") is None
    text = page.count_note(res.facts, "image").text + page.opening(res.facts).findings[0].text
    assert "under the 90% bar" in text and "could feed **" not in text


def test_the_token_next_hop_is_the_slowest_row_and_both_loader_rows_price_one_loader(tmp_path):
    """The margin's next hop is the minimum over every other row of the token table (the CPU row included), and the
    loader row and the CPU row price the same reader; the CPU row's loader per rank is the one with the fewest
    workers that feeds its GPU (without workers the rank loads, then steps: it must read 9× the need at a 90% bar),
    at chapter 10's rate for that count."""
    res = _run_with(tmp_path, llm_tokens_per_s=None, token_model="tiny", token_steps=1, tokens_per_batch=1024,
                    token_seq_len=128)
    hops = _hops(res, "tokens")
    rest = [h["capacity"] for k, h in hops.items() if k != "gpu" and h["capacity"] is not None]
    wk = res.facts.data["tokens.weakest"]
    if wk["key"] == "gpu":
        assert wk["next_capacity"] == min(rest)
    loader, cpu = hops["token_loader"], hops["token_cpu"]
    assert loader["mode"] == cpu["mode"]
    demand = hops["gpu"]["capacity"]
    by = _c10_rates(cpu["mode"])
    enough = [w for w in sorted(by) if by[w] >= analysis.rank_loader_need(w, demand)]
    assert cpu["workers"] == (enough[0] if enough else loader["workers"])
    assert cpu["capacity"] == pytest.approx(cpu["loaders"] * by.get(cpu["workers"], loader["capacity"]))
    assert analysis.rank_loader_need(0, 1.0) == pytest.approx(analysis.AU_MIN / (1 - analysis.AU_MIN))
    assert analysis.rank_loader_need(4, 1.0) == pytest.approx(analysis.AU_MIN)


def _c10_rates(mode: str) -> dict[int, float]:
    """Chapter 10's best cold rate of ``mode`` at each worker count, as the committed reference exports it."""
    t = registry.lookup("10_mmap_vs_read").analyse(results.Result.load(REF / "10_mmap_vs_read.json")).data
    return {int(w): r for w, r in t["token_loader"]["modes"][mode]["by_workers"].items()}


def test_token_loader_is_the_reader_chapter_10_advises(tmp_path):
    """Both token rows price the reader chapter 10 advises, at the rate chapter 10 exported for it, whichever is
    faster or has fewer workers; without its answer, chapter 10's fastest."""
    modes = {"mmap": {"tokens_per_s": 2e6, "workers": 0}, "read": {"tokens_per_s": 3e6, "workers": 4}}
    t = {"best": "read", "modes": modes, "cores": 16}
    assert analysis.token_loader(t, Advice("tokens.loader_mode", "reader", "mmap", verdict="keep"))[:2] == (
        "mmap", modes["mmap"])
    assert analysis.token_loader(t, Advice("tokens.loader_mode", "reader", "read"))[0] == "read"
    assert analysis.token_loader(t, None)[0] == "read"     # no answer: chapter 10's fastest
    hops = analysis.token_hops({"10_mmap_vs_read": analysis.Facts("10_mmap_vs_read")}, None, 1e6, 4, 4096)
    assert hops[-1]["hop"] == "token_loader" and hops[-1]["capacity"] is None

    res = _run_with(tmp_path)
    advice = registry.lookup("10_mmap_vs_read").analyse(
        results.Result.load(REF / "10_mmap_vs_read.json")).advice_for("tokens.loader_mode")
    loader, cpu = _hops(res, "tokens")["token_loader"], _hops(res, "tokens")["token_cpu"]
    assert loader["mode"] == cpu["mode"] == advice.value and loader["advised"]
    assert "the reader chapter 10 advises" in page.hops_display(res, "tokens").iloc[4]["how it is computed"]


def test_how_we_know_shows_each_workload_once(tmp_path):
    res = _run_with(tmp_path)
    keys = [f.key for f in page.findings(res.facts)]
    assert len(keys) == len(set(keys))
    assert {f.key for f in page.opening(res.facts).findings} <= set(keys)


def test_checklist_marks_unlike_figures_and_names_what_it_measured(tmp_path):
    """The tracer row's published figure is marked not comparable, the start-up row shows fork's own time, and the
    cold-latency row says guest-cold only while chapter 2 found a cache below the machine served it."""
    res = _run_with(tmp_path)
    t = page.checklist(res, None).set_index("practice")
    assert "not comparable" in t.loc[page.PRACTICE[("10_mmap_vs_read", "posix_events")], "published"]
    fork = res.facts["08.first_batch.fork"]
    assert page.phrasing.headline(fork) in t.loc[page.PRACTICE[("08_threads_processes_gil",
                                                                 "first_batch.fork_vs_spawn")], "this run"]
    row = page.PRACTICE[("02_random_vs_sequential", "cold_latency")]
    st = res.facts["02.cold_state"]
    res.facts.add(analysis.Fact(**{**st.__dict__, "setting": {**st.setting, "state": "cache"}}))
    assert "guest-cold" in page.checklist(res, None).set_index("practice").loc[row, "this run"]
    res.facts.add(analysis.Fact(**{**st.__dict__, "setting": {**st.setting, "state": "device"}}))
    assert "guest-cold" not in page.checklist(res, None).set_index("practice").loc[row, "this run"]


#: A Markdown escape (a backslash before a character Markdown would read) shown as text.
MARKDOWN_ESCAPE = re.compile(r"\\[\\`*_\[\]{}#|!~]")


@pytest.mark.parametrize("call", [None, "os.readv(fd, [buf_a, *rest], off)  # [x]"])
def test_hop_tables_and_hover_labels_show_a_call_as_written(tmp_path, call):
    """The token loader's row read "os.preadv(fd, \\[buffer\\], offset)": the row's text was escaped for Markdown and
    shown in an HTML table cell and a chart's hover label, which escape for HTML themselves. Both show the call as
    chapter 10 wrote it (the reference's, and one full of Markdown's characters), and the cell's HTML holds no tag
    from it."""
    res = _run_with(tmp_path)
    loader = _hops(res, "tokens")["token_loader"]
    if call is not None:
        loader["call"] = call
    written = loader["call"]
    assert "[" in written
    for wl in analysis.UNITS:
        cells = page.hops_display(res, wl)["how it is computed"].tolist()
        assert not [c for c in cells if MARKDOWN_ESCAPE.search(c)], cells
        hover = [c[0] for c in page.hops_chart(res, wl).data[0].customdata]
        assert not [h for h in hover if MARKDOWN_ESCAPE.search(h)], hover
    row = page.hops_display(res, "tokens").set_index("hop").loc[page.hop_label(res.facts, "tokens", "token_loader")]
    assert f"with {written}, num_workers=" in row["how it is computed"]
    html = report.table_html(page.hops_display(res, "tokens"))
    assert html_escape(written, quote=False) in html or html_escape(written) in html
    hover = next(c[0] for c, h in zip(page.hops_chart(res, "tokens").data[0].customdata,
                                      page.hops_chart(res, "tokens").data[0].y) if "token loader" in h)
    assert html_escape(written, quote=False) in hover


@pytest.mark.parametrize("host", [h for h in results.reference_hosts()
                                  if results.load_reference("12_conclusion", h) is not None])
def test_the_image_recipe_code_is_chapter_7s_exported_recipe_with_its_uint8_transform(tmp_path, host):
    """The snippet under the image answer built an ImageFolder with no transform, so its batches were never uint8,
    although chapter 7's verdict names "uint8 batches normalised on the GPU". The code is chapter 7's exported recipe,
    each part's own code in order (read, not restated), its uint8 part whole: the Dataset handing out uint8 images,
    the statistics it normalises with, then the part's line. A recipe without that part gets none of it, and a
    Dataset that is not an ImageFolder is told so in words."""
    from datajourney.toolkit.imagenet import MEAN

    ref = results.REFERENCE_DIR / host
    analysed_references(tmp_path, ref, [c for c in registry.sources("12_conclusion")
                                        if (ref / f"{c}.json").is_file()])
    res = harness.run("12_conclusion", run_dir=tmp_path, **STATED)
    recipe = res.facts.get(page.RECIPE_KEY)
    if recipe is None:
        pytest.skip(f"{host}: chapter 7 exports no combined recipe")
    exported = results.Result.load(tmp_path / "07_full_picture.json").facts["recipe"].setting
    code = page.opening(res.facts).actions[0].snippet
    compile(code, "recipe", "exec")
    args = [str(part["code"]) for part in exported["parts"] if re.match(r"^\w+=(?!=)", str(part["code"]))]
    at = [code.index(str(part["code"]).rstrip(")")) for part in exported["parts"] if str(part["code"]) not in args]
    assert at == sorted(at) and all(arg in code for arg in args)   # every part's own code, in chapter 7's order
    uint8 = next(part for part in exported["parts"] if part["what"].startswith("uint8 "))
    assert f"# {uint8['what']}" in code and "v2.PILToTensor()" in code and "ImageFolder(" in code
    assert code.index("v2.PILToTensor()") < code.index(uint8["code"])
    assert f"mean = torch.tensor([{', '.join(f'{v:g}' for v in MEAN)}]" in code and "* 255" in code
    assert "from torchvision.transforms import v2" in code and "import torchvision" in code
    # the same recipe without its uint8 part, and on a Dataset of another kind
    plain = dict(exported, parts=[p for p in exported["parts"] if p is not uint8])
    assert "PILToTensor" not in wording.recipe_snippet(plain, "cuda") and "mean" not in wording.recipe_snippet(plain)
    other = dict(exported, parts=[dict(exported["parts"][0], code="StreamingDataset(local='shards/')"),
                                  *exported["parts"][1:]])
    shown = wording.recipe_snippet(other, "cuda")
    assert "PILToTensor" not in shown and "# the Dataset hands out each image decoded and resized, as uint8" in shown
    assert 'device="cuda"' not in wording.recipe_snippet(exported, "cpu")


def _slow_files(ch, r):
    if ch == "02_random_vs_sequential":
        t = r.tables["size_sweep"]
        t.loc[t["pattern"] == "random", "MBps"] /= 1000


def _slow_ddp(ch, r):
    if ch == "11_gpu_to_gpu":
        w = r.tables["windows"]
        w.loc[w["world"] > 1, "steps_per_s"] /= 3


@pytest.mark.parametrize("edit", [None, _slow_files, _slow_ddp], ids=["reference", "slow files", "slow DDP"])
def test_every_action_on_the_first_screen_follows_its_workloads_line(tmp_path, edit):
    """The first screen gave chapter 11's DDP advice while the data-parallel line had been folded below it (three
    workloads' lines and actions did not fit). The first screen holds the data path's workloads, each line shown
    beside its action, within the book's line budget; the data-parallel line and its advice stand together in their
    own section (and the line under "How we know"), wherever the data moves the answers."""
    res = _run_with(tmp_path, edit=edit)
    op = page.opening(res.facts)
    budget = getattr(page, "OPENING_LINES", opening.OPENING_LINES)
    assert opening.shown(op, budget) == op.findings   # no line folded away from its action
    assert [f.key.split(".")[0] for f in op.findings] == ["image", "tokens"]
    actions = [a for a in (page._action(res.facts, wl, None) for wl in page.FIRST_SCREEN) if a is not None]
    assert op.actions == actions and len(op.actions) <= len(op.findings)
    # what the book's budget holds on the first screen: every line and every action's first sentence
    used = sum(opening.lines(f.text) for f in op.findings) + sum(
        opening.lines(opening.first_sentence(a.text)[0]) for a in op.actions)
    assert used <= opening.OPENING_LINES, used
    assert "11_gpu_to_gpu.ipynb" not in "\n".join(a.text for a in op.actions)
    dp = page.data_parallel_answer(res.facts)
    line = page._finding(res.facts, "gradients")
    assert dp.startswith(line.text) and "**What to do**: [chapter 11](11_gpu_to_gpu.ipynb)" in dp
    assert line.key in {f.key for f in page.findings(res.facts)}


def _fewer_cores(ch, r):
    if ch == "10_mmap_vs_read":
        r.metadata["cores"] = int(r.metadata["cores"]) // 2
    if ch == "07_full_picture":
        r.tables["scenarios"]["worker_cores"] *= 2


@pytest.mark.parametrize("edit", [None, _fewer_cores], ids=["reference", "fewer cores, dearer images"])
def test_the_gpu_count_is_one_value_in_the_answer_the_table_and_the_model(tmp_path, edit):
    """The token line said "this host's CPU feeds 3 such GPUs" while the table's CPU row (8.1M tokens/s against a
    need of 156k) and the displayed N = ⌊r_shared ÷ 0.9·r_need⌋ implied 57. Each shared hop's own count is a column
    of its table: ⌊rate ÷ 0.9·need⌋ where its work is shared (storage; the images' CPU, whose D is one image's CPU
    in the loader's workers plus the training process's), the ranks whose loaders fit on the cores for tokens
    (loaders are per rank); the answer's count is the fewest of them, a storage layout counting its faster one."""
    res = _run_with(tmp_path, edit=edit)
    for wl in ("image", "tokens"):
        stated = res.facts.get(f"{wl}.gpus_fed")
        if stated is None:
            continue
        hops = _hops(res, wl)
        need = analysis.AU_MIN * hops["gpu"]["capacity"]
        table = page.hops_display(res, wl).set_index("hop")
        counts = {}
        for key, h in hops.items():
            shown = table.loc[page.hop_label(res.facts, wl, key), page.GPUS_COLUMN]
            if key not in {k for keys in analysis.SHARED[wl].values() for k in keys} or h["capacity"] is None:
                assert shown == "—", (wl, key)
                continue
            n = h["loaders"] * (h["capacity"] / h["loaders"] >= analysis.rank_loader_need(
                h["workers"], hops["gpu"]["capacity"])) if key == "token_cpu" else int(h["capacity"] // need)
            assert shown == f"{n:,}", (wl, key, shown, n)
            counts[key] = n
        per_group = [max(counts[k] for k in keys if k in counts) for keys in analysis.SHARED[wl].values()]
        assert stated.value == min(per_group)
        said = page.opening(res.facts).findings[0 if wl == "image" else 1].text
        assert f"could feed **{stated.value}** such GPUs" in said
        cpu = hops.get("token_cpu") or {}
        # a token count that the cores per rank set says so, with the cores and each rank's loader workers
        bound = f"(one loader per rank: {cpu.get('loaders')} fit on {cpu.get('cores')} cores)"
        assert (bound in said) == (wl == "tokens" and counts.get("token_cpu") == stated.value), said
    cpu = _hops(res, "image")["cpu"]
    assert cpu["cpu_ms"] == pytest.approx(cpu["workers_ms"] + cpu["main_ms"])
