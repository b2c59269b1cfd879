"""Declared questions, decided like for like against the library default (core.answers), and the invariants
every committed reference result keeps: the advised candidate is the best measured, no advice rests on a gain
under its threshold, chapter 12 repeats each chapter's verdict, and findings follow reversed data."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from datajourney.book import registry
from datajourney.core import phrasing, results
from datajourney.core.answers import MIN_EFFECT, Candidate, Question, decide, exceeds, more_may_help
from datajourney.core.facts import Facts, compare, measured
from datajourney.core.paths import REPO_ROOT

REFERENCE = REPO_ROOT / "data" / "reference"
FILES = sorted(p for p in REFERENCE.rglob("[01][0-9]_*.json") if not p.name.startswith(("01_", "12_")))


def _q(**kw) -> Question:
    base = dict(key="t.knob", ask="Which?", knob="knob", default=0, default_call="knob=0", whose="the library's",
                workload="a test workload")
    return Question(**{**base, **kw})


def _c(value, runs, **kw) -> Candidate:
    return Candidate(value, measured(f"rate.{value}", runs, unit="items/s", label=f"knob={value}"), **kw)


# ----------------------------------------------------------------------------- the rule itself
def test_a_gain_over_the_threshold_changes_the_default():
    f = Facts("t")
    a = decide(_q(), [_c(0, [100, 101]), _c(4, [150, 151]), _c(8, [140, 141])], f)
    assert a.verdict == "change" and a.value == 4
    assert f[a.gain].basis == "rate.0"  # against the default, not a weaker option
    assert "set `knob=4`" in phrasing.advice(a, f)


def test_a_gain_under_the_threshold_keeps_the_default_and_says_how_close():
    f = Facts("t")
    a = decide(_q(), [_c(0, [100]), _c(4, [101])], f)  # 1.01×: under the 3% floor
    assert a.verdict == "keep" and a.value == 0 and a.within == pytest.approx(0.01)
    words = phrasing.advice(a, f)
    assert "keep the default `knob=0`" in words and "within 1.0% of the best measured (`knob=4`)" in words
    assert "set `knob=" not in words


def test_of_candidates_level_with_the_best_the_first_listed_is_advised():
    f = Facts("t")
    a = decide(_q(), [_c(0, [100]), _c(4, [150]), _c(8, [152])], f)  # 8 is within 3% of 4: four workers do
    assert a.verdict == "change" and a.value == 4 and a.within == pytest.approx(0.5)


def test_more_may_help_only_where_the_last_value_measured_still_gained():
    """ "The largest value measured; more may help" needs the trend: the advice is the last candidate and it beat the
    one before it by the minimum gain with the runs apart."""
    q = _q()
    grows = [_c(0, [100, 101]), _c(4, [150, 151]), _c(8, [170, 171])]
    a = decide(q, grows, Facts("t"))
    assert a.value == 8 and more_may_help(q, grows, a)
    flat = [_c(0, [100, 101]), _c(4, [150, 151]), _c(8, [152, 153])]   # 8 is best, but within 3% of 4
    a = decide(q, flat, Facts("t"))
    assert a.value == 4 and not more_may_help(q, flat, a)
    a = decide(q, grows[:2], Facts("t"))                                    # the last of two, 1.5× the default
    assert a.value == 4 and more_may_help(q, grows[:2], a)
    kept = [_c(0, [150, 151]), _c(4, [100, 101])]
    assert not more_may_help(q, kept, decide(q, kept, Facts("t")))       # keeping the default says nothing of more


def test_a_swept_question_carries_more_may_help_in_its_advice_and_only_then():
    """One rule for "more may help": ``decide`` words the edge for a sweep whose last step still gained, never for a
    last value that merely won (a flat top) nor for candidates that are not one knob's values in order."""
    swept = dataclasses.replace(_q(), swept=True)
    grows = [_c(0, [100, 101]), _c(4, [150, 151]), _c(8, [170, 171])]
    flat_top = [_c(0, [100, 101]), _c(4, [150, 151]), _c(8, [160, 161])]   # 8 wins by 6.6%, 4→8 the last step
    plateau = [_c(0, [100, 101]), _c(4, [150, 151]), _c(8, [151, 152])]
    assert decide(swept, grows, Facts("t")).scope == "edge"
    assert decide(swept, flat_top, Facts("t")).scope == "edge"
    assert decide(swept, plateau, Facts("t")).scope == "best"
    assert decide(_q(), grows, Facts("t")).scope == "best"
    f = Facts("t")
    assert "more may help" in phrasing.advice(decide(swept, grows, f), f)
    f = Facts("t")
    assert "more may help" not in phrasing.advice(decide(swept, plateau, f), f)


def test_a_gain_within_the_runs_spread_keeps_the_default():
    f = Facts("t")
    # 10% apart, but each side's runs spread ±15%: their ranges overlap, level (noise, not a gain)
    a = decide(_q(), [_c(0, [85, 115]), _c(4, [95.5, 124.5])], f)
    assert a.verdict == "keep" and f[a.gain].level
    assert "level with" in phrasing.advice(a, f)


def test_an_option_with_a_cost_needs_a_larger_gain_and_names_its_cost():
    f = Facts("t")
    q = _q(cost="it changes precision")
    kept = decide(q, [_c(0, [100]), _c(4, [106], costly=True)], f)
    assert kept.verdict == "keep"  # 6% is over the 3% floor but under the 10% of a costly option
    changed = decide(q, [_c(0, [100]), _c(4, [115], costly=True)], Facts("t"))
    assert changed.verdict == "change" and changed.cost == "it changes precision"
    assert "Its cost: it changes precision." in phrasing.advice(changed, Facts("t"))


def test_the_best_of_each_kind_is_compared_not_a_weaker_configuration():
    # the default kind (the DataLoader) has a strong and a weak configuration; threads beat only the weak one
    cands = [Candidate("dl weak", measured("dl.weak", [2900], unit="i/s", label="weak"), group="dl"),
             Candidate("dl best", measured("dl.best", [3800], unit="i/s", label="best"), group="dl"),
             Candidate("threads", measured("threads", [3100], unit="i/s", label="threads"), group="threads")]
    f = Facts("t")
    a = decide(_q(default="dl"), cands, f)
    assert a.verdict == "keep" and a.value == "dl best"
    assert f[a.gain].of == "dl.best" and f[a.gain].basis == "threads"


def test_no_advice_without_the_default_or_an_alternative():
    assert decide(_q(), [_c(4, [100]), _c(8, [120])], Facts("t")) is None  # the default did not run
    assert decide(_q(), [_c(0, [100])], Facts("t")) is None


def test_times_are_better_lower():
    f = Facts("t")
    t = [Candidate(v, measured(f"t.{v}", [ms], unit="ms", label=str(v), quantity="time", better="lower"))
         for v, ms in ((0, 10.0), (2, 5.0))]
    a = decide(_q(), t, f)
    assert a.verdict == "change" and a.value == 2 and a.within == pytest.approx(1.0)


def test_level_has_one_meaning_for_the_facts_the_verdicts_and_the_flags():
    """Runs where the means-apart-by-the-spread rule and the ranges-overlap rule disagreed: an impossible-result
    flag, a verdict and a comparison fact now read one rule (the runs' ranges overlap: level)."""
    def rate(key, runs):
        return measured(key, runs, unit="items/s", label=key)
    # means 10% apart, beyond either side's half-width, but the ranges overlap (100 <= 105): level
    wide, base = rate("wide", [100, 110, 120]), rate("base", [95, 100, 105])
    assert compare("_", wide, base).level and not exceeds(wide, base)
    # ranges apart (101 > 100) with a mean 26% above, under the wide side's 39% half-width: not level
    skew, tight = rate("skew", [101, 101, 101, 200]), rate("tight", [99, 100])
    assert not compare("_", skew, tight).level and exceeds(skew, tight)
    for a, b in ((wide, base), (skew, tight)):
        f = Facts("t")
        adv = decide(_q(), [Candidate(0, b), Candidate(4, a)], f)
        assert (adv.verdict == "change") == (not f[adv.gain].level) == exceeds(a, b)


# ----------------------------------------------------------------------------- every committed result
def _analysed(path: Path):
    res = results.Result.load(path)
    return res, registry.lookup(res.chapter).analyse(res)


@pytest.fixture(scope="module")
def analysed():
    return {p: _analysed(p) for p in FILES}


def _declared(facts: Facts):
    return [a for a in facts.advice if a.question]


def test_every_committed_result_answers_its_questions_by_the_rule(analysed):
    seen = 0
    for path, (_, facts) in analysed.items():
        for a in _declared(facts):
            seen += 1
            where = f"{path.relative_to(REFERENCE)}: {a.key}"
            assert a.threshold is not None and a.threshold >= MIN_EFFECT, where
            if a.verdict == "change":
                assert a.within >= a.threshold, f"{where}: advice on a gain under its threshold"
                g = facts[a.gain]
                assert g.basis is not None and not g.level, where
                # the advised candidate is the best measured among the question's candidates
                cands = [facts[k] for k in a.evidence if k in facts and not facts[k].is_comparison
                         and facts[k].unit == facts[g.of].unit and facts[k].number is not None]
                top = facts[g.of].number
                k = 1 + a.threshold
                better = [c for c in cands if (c.number > top * k if c.better != "lower" else c.number * k < top)
                          and not compare("_", c, facts[g.of]).level]  # level: within the runs' spread
                assert not better, f"{where}: {[c.key for c in better]} measured better than the advice"
            else:
                # kept: the default's kind won, or the best is under the threshold, or its runs overlap the
                # default's (level: within the runs' spread)
                assert a.within is not None and (a.within == 0 or a.within < a.threshold
                                                 or facts[a.gain].level), where
    assert seen >= 10


LIBRARY_DEFAULTS = re.compile(r"set `(bucket_cap_mb=25|NCCL_P2P_DISABLE=0|O_DIRECT=False|pin_memory=False|"
                              r"num_workers=0)\b|set `(loader|path|layout|reader)='")


def test_no_advice_sells_a_library_default_or_a_pseudo_setting(analysed):
    for path, (_, facts) in analysed.items():
        for a in facts.advice:
            words = phrasing.advice(a, facts)
            assert not LIBRARY_DEFAULTS.search(words), f"{path.name}: {words}"


def test_chapter_12_repeats_each_chapter_verdict(tmp_path, analysed):
    from datajourney.book.analyse import rediagnose

    copied = 0
    for host in ("h200", "h100"):
        folder = REFERENCE / host
        run = tmp_path / host
        run.mkdir()
        for p in folder.glob("[01][0-9]_*.json"):
            res = results.Result.load(p)
            if not p.name.startswith(("01_", "12_")):
                res.facts = analysed[p][1]
            d = res.to_dict()
            d["created_utc"] = res.created_utc
            (run / p.name).write_text(json.dumps(d))
        rediagnose(run / "12_conclusion.json")
        c12 = results.Result.load(run / "12_conclusion.json").facts
        remedies = [a for a in c12.advice if a.key.endswith(".remedy")]
        copied += len(remedies)
        for a in remedies:
            # the copy keeps the chapter's verdict, value, default and setting (evidence keys: "07.<key>")
            prefix = a.evidence[0].split(".", 1)[0]
            owner = next(f for p, (_, f) in analysed.items() if p.parent == folder and p.name.startswith(prefix))
            mine = next(b for b in owner.advice if b.value == a.value and b.workload == a.workload)
            assert (mine.verdict, mine.default, mine.call, mine.within) == (a.verdict, a.default, a.call, a.within)
    assert copied >= 3  # the H200 reference: images, tokens and data-parallel


# ----------------------------------------------------------------------------- findings follow reversed data
def _c11(scale: dict[str, float]):
    res = results.Result.load(REFERENCE / "h200" / "11_gpu_to_gpu.json")
    res = copy.deepcopy(res)
    for name in ("windows",):
        t = res.tables[name]
        for rung, k in scale.items():
            m = (t["rung"] == rung) & (t["job"] == "n")
            t.loc[m, "steps_per_s"] = t.loc[m, "steps_per_s"] * k
    return registry.lookup("11_gpu_to_gpu").analyse(res)


def test_chapter_11_follows_a_bucket_size_made_faster():
    """The bucket size is decided like for like, every other DDP setting at its default: the reference keeps 25 MB;
    lift the other size's windows wholly above the default's by 5% and the answer, and the data-parallel one, move to
    it."""
    before = _c11({})
    assert before.advice_for("ddp.bucket_cap_mb").verdict == "keep"
    ref = results.Result.load(REFERENCE / "h200" / "11_gpu_to_gpu.json")
    r, w = ref.table("rungs"), ref.table("windows")
    r = r[(r["job"] == "n") & ~r["static_graph"].astype(bool) & ~r["bucket_view"].astype(bool) & (r["hook"] == "none")]
    (other, cap), = [(g, int(c)) for g, c in zip(r["rung"], r["bucket_cap_mb"]) if c != 25]
    wins = {g: w.loc[(w["job"] == "n") & (w["rung"] == g), "steps_per_s"] for g in (other, "default")}
    after = _c11({other: 1.05 * wins["default"].max() / wins[other].min()})
    a = after.advice_for("ddp.bucket_cap_mb")
    n = ref.metadata["world"]
    assert a.verdict == "change" and a.value == cap and after[a.gain].basis == f"rate_direct_default_{n}"
    # DDP's defaults were measured: the data-parallel answer moves from them to the faster bucket size
    o = after.advice_for("ddp.option")
    assert after.data["ddp_default"]["measured"] and o.verdict == "change" and o.call == f"bucket_cap_mb={cap}"


def _m11(rung: str) -> float:
    """A rung's mean steps/s over its windows on the reference's N-GPU job."""
    w = results.Result.load(REFERENCE / "h200" / "11_gpu_to_gpu.json").table("windows")
    return float(w.loc[(w["job"] == "n") & (w["rung"] == rung), "steps_per_s"].mean())


def test_chapter_11_keeps_the_default_for_a_gain_shrunk_to_one_percent():
    # bucket_view (gradient_as_bucket_view=True) 1.01× over static_graph: under the threshold
    f = _c11({"bucket_view": 1.01 * _m11("static_graph") / _m11("bucket_view")})
    a = f.advice_for("ddp.gradient_as_bucket_view")
    assert a.verdict == "keep" and a.within == pytest.approx(0.01) and a.within < a.threshold


def test_chapter_11_compression_needs_its_larger_threshold():
    # bf16 compression 6% faster than no hook (static_graph + bucket view): over the 3% of a free option, under the
    # 10% of a costly one
    mild = _c11({"bf16": 1.06 * _m11("bucket_view") / _m11("bf16")})
    a = mild.advice_for("ddp.comm_hook")
    assert a.verdict == "keep" and a.within == pytest.approx(0.06) and MIN_EFFECT < a.within < a.threshold
    strong = _c11({"bf16": 1.20 * _m11("bucket_view") / _m11("bf16")})
    a = strong.advice_for("ddp.comm_hook")
    assert a.verdict == "change" and a.cost and "register_comm_hook" in a.call


def _c11_host_ladder(keep_host: set[str], add_default: bool = False):
    """The H200 reference with its forced host paths' rungs cut to ``keep_host`` (and, with ``add_default``, a
    ``default`` rung there, its windows the direct path's default windows × 0.6)."""
    res = copy.deepcopy(results.Result.load(REFERENCE / "h200" / "11_gpu_to_gpu.json"))
    r, w = res.tables["rungs"], res.tables["windows"]
    host = r["job"].isin(["p2p_off", "p2p_shm_off"])
    if add_default:
        for job in ("p2p_off", "p2p_shm_off"):
            row = r[(r["job"] == "n") & (r["rung"] == "default")].assign(job=job, path=job)
            win = w[(w["job"] == "n") & (w["rung"] == "default")].assign(job=job, path=job)
            win = win.assign(steps_per_s=0.6 * win["steps_per_s"])
            r, w = pd.concat([r, row], ignore_index=True), pd.concat([w, win], ignore_index=True)
        host = r["job"].isin(["p2p_off", "p2p_shm_off"])
        keep_host = keep_host | {"default"}
    keep = ~host | r["rung"].isin(keep_host)
    res.tables["rungs"] = r[keep].reset_index(drop=True)
    host_w = w["job"].isin(["p2p_off", "p2p_shm_off"])
    res.tables["windows"] = w[~host_w | w["rung"].isin(keep_host)].reset_index(drop=True)
    return res


def test_chapter_11_path_answer_compares_the_same_ddp_settings_on_both_paths():
    """The path question sets NCCL's direct path against a forced host path with the same DDP settings on both, and
    names them: DDP's defaults where the host ladder ran them, else the settings both ladders share; where they
    share none, the page says the paths are not comparable and which rung is missing."""
    from datajourney.chapters.c11_gpu_to_gpu import page

    def gain_rungs(f):
        g = f[f.advice_for("ddp.path").gain]
        return f[g.of].setting["rung"], f[g.basis].setting["rung"]
    ref = _c11({})
    a = ref.advice_for("ddp.path")
    assert gain_rungs(ref) == ("ddp", "ddp") and "one-bucket DDP (bucket_cap_mb=2000) on each path" in a.workload
    assert "DDP's defaults did not run through the host" in " ".join(x.text for x in page.opening(ref).actions)
    both = registry.lookup("11_gpu_to_gpu").analyse(_c11_host_ladder({"ddp", "bf16"}, add_default=True))
    assert gain_rungs(both) == ("default", "default") and "DDP with PyTorch's defaults" in both.advice_for(
        "ddp.path").workload
    assert "did not run through the host" not in " ".join(x.text for x in page.opening(both).actions)
    none = registry.lookup("11_gpu_to_gpu").analyse(_c11_host_ladder({"bf16@25"}))
    assert none.advice_for("ddp.path") is None
    said = " ".join(x.text for x in page.opening(none).actions)
    assert "not comparable in this run" in said and "`default` in `host_ladder`" in said


# ----------------------------------------------------------------------------- impossible results are flagged
def _scaled(chapter: str, table: str, k: float, **where):
    res = copy.deepcopy(results.load_reference(chapter))
    t = res.tables[table]
    m = pd.Series(True, index=t.index)
    for col, v in where.items():
        m &= t[col] == v
    col = {"windows": "steps_per_s"}.get(table, "images_per_s")
    t.loc[m, col] = t.loc[m, col] * k
    return res


def test_a_rate_above_its_own_ceiling_is_flagged_not_worded_as_an_outcome():
    from datajourney.chapters.c07_full_picture import page

    ok = registry.lookup("07_full_picture").analyse(results.load_reference("07_full_picture"))
    assert not ok.flagged("best_vs_ceiling")
    res = _scaled("07_full_picture", "ceiling", 0.5)
    res.tables["graphed_ceiling"]["images_per_s"] *= 0.5
    facts = registry.lookup("07_full_picture").analyse(res)
    assert facts.flagged("best_vs_ceiling")
    text = page.finding_best_vs_ceiling(facts).text
    assert "measurement problem" in text and "it keeps up" not in text and "level with" not in text


def test_ddp_faster_than_no_ddp_is_flagged():
    from datajourney.chapters.c11_gpu_to_gpu import page

    assert not registry.lookup("11_gpu_to_gpu").analyse(results.load_reference("11_gpu_to_gpu")).flagged(
        "ddp_one_device")
    facts = registry.lookup("11_gpu_to_gpu").analyse(_scaled("11_gpu_to_gpu", "windows", 1.5, job="one", rung="ddp"))
    assert facts.flagged("ddp_one_device")
    words = " ".join(f.text for f in page.findings(facts))
    assert "measurement problem" in words and "faster than the same model without DDP" not in words


def test_a_tracer_that_measured_faster_than_no_tracer_is_flagged_and_advises_nothing():
    from datajourney.chapters.c10_mmap_vs_read import page

    res = copy.deepcopy(results.load_reference("10_mmap_vs_read"))
    facts = registry.lookup("10_mmap_vs_read").analyse(res)
    assert not facts.flagged("overhead")   # the reference's traced loader: no measurement problem
    o = res.tables["overhead"]
    off = o.loc[(o["mode"] == "read") & (o["view"] == "off"), "loader_s"].min()
    o.loc[(o["mode"] == "read") & (o["view"] == "posix"), "loader_s"] = 0.5 * off   # traced: twice as fast as untraced
    facts = registry.lookup("10_mmap_vs_read").analyse(res)
    assert facts.flagged("overhead")
    text = page.actions(facts)[-1].text
    assert "measurement problem" in text and "Tracing can stay on" not in text


# ----------------------------------------------------------------------------- no page contradicts its advice
def _advised_key(a, facts) -> str:
    g = facts[a.gain]
    return g.of if a.verdict == "change" or not a.within else g.basis


def _contradictions(facts: Facts) -> list[str]:
    """Comparison facts a page words that show another candidate of a question clearly better (beyond the
    question's threshold, runs apart) than the candidate its advice names."""
    out = []
    for a in _declared(facts):
        mine, cands = _advised_key(a, facts), set(a.evidence)
        for c in facts.facts.values():
            if not c.is_comparison or c.number is None or c.level or {c.of, c.basis} - cands or mine not in (
                    c.of, c.basis):
                continue
            other_better = c.number if c.basis == mine else 1 / c.number   # other ÷ advised, as a rate
            if facts[mine].better == "lower":
                other_better = 1 / other_better
            if other_better > 1 + a.threshold:
                out.append(f"{a.key}: {c.key} shows {c.of if c.basis == mine else c.basis} better than {mine}")
    return out


def _with_cores(res, cores: int):
    res = copy.deepcopy(res)
    res.metadata["cores"] = cores
    res.fingerprint.setdefault("cpu", {}).update(logical_cores=cores, usable_cores=cores)
    return res


def test_no_committed_page_contradicts_its_advice(analysed):
    for path, (_, facts) in analysed.items():
        assert not _contradictions(facts), path.name


@pytest.mark.parametrize("host", ["h200", "h100"])
def test_a_64_core_4_gpu_host_gets_advice_its_pages_agree_with(host, tmp_path):
    """Chapter 8 on a 64-core fingerprint and chapter 11 on 4 GPUs, through chapter 12: every chapter's
    advice is the best of its question on its own page, and chapter 12 repeats it unchanged."""
    from datajourney.book.analyse import rediagnose

    folder = REFERENCE / host
    for p in folder.glob("[01][0-9]_*.json"):
        res = results.Result.load(p)
        if res.chapter == "08_threads_processes_gil":
            res = _with_cores(res, 64)
        if res.chapter == "11_gpu_to_gpu":
            res = results.Result.load(next((REFERENCE / "h200" / "more").glob("11_*.json")))
        if not p.name.startswith(("01_", "12_")):
            res.facts = registry.lookup(res.chapter).analyse(res)
            assert not _contradictions(res.facts), res.chapter
        d = res.to_dict()
        d["created_utc"] = res.created_utc
        (tmp_path / p.name).write_text(json.dumps(d))
    if (tmp_path / "12_conclusion.json").exists():
        rediagnose(tmp_path / "12_conclusion.json")
        c12 = results.Result.load(tmp_path / "12_conclusion.json").facts
        for a in c12.advice:
            prefix = a.evidence[0].split(".", 1)[0] if a.evidence else ""
            src = results.Result.load(next(tmp_path.glob(f"{prefix}_*.json"))).facts
            assert any((b.key, b.value, b.verdict) == (a.key.split(".", 1)[-1] if not a.key.endswith(".remedy")
                       else b.key, a.value, a.verdict) for b in src.advice), a.key


def test_the_contradiction_check_catches_advice_for_a_weaker_candidate():
    f = Facts("t")
    a = decide(_q(), [_c(0, [100, 101]), _c(4, [150, 151]), _c(8, [200, 201])], f)
    f.advise(a)
    assert a.value == 8 and not _contradictions(f)
    f.add(compare("page.says", f["rate.8"], f["rate.4"]))     # the page words 8 against 4: agrees
    assert not _contradictions(f)
    f.advice[0] = dataclasses.replace(a, value=4, gain="page.four")   # advice names the weaker 4
    f.add(compare("page.four", f["rate.4"], f["rate.0"]))
    assert _contradictions(f)


# ----------------------------------------------------------------------------- the summary repeats, never re-decides
def _runs() -> dict[str, dict[str, Path]]:
    """Every committed reference run, as {where: {chapter: its result file}}: each host folder's own files, and the
    files of one run id in ``more/`` and ``repeats/`` (named ``<chapter>-<run id>.json``)."""
    out: dict[str, dict[str, Path]] = {}
    for p in FILES:
        chapter, _, run = p.stem.partition("-")
        out.setdefault(f"{p.parent.relative_to(REFERENCE)}/{run or 'reference'}", {})[chapter] = p
    return out


def _summarised(run_dir: Path, found: dict[str, tuple]):
    """Chapter 12 diagnosing ``run_dir``, which holds the results of ``found`` (chapter -> (result, facts)) with
    those facts: what the title page, chapter 1 and chapter 12 say is computed from it."""
    from datajourney.book import harness

    run_dir.mkdir(parents=True, exist_ok=True)
    for res, facts in found.values():
        res = copy.copy(res)
        res.facts = facts
        d = res.to_dict()
        d["created_utc"] = res.created_utc
        (run_dir / f"{res.chapter}.json").write_text(json.dumps(d))
    return harness.run("12_conclusion", run_dir=run_dir, llm_tokens_per_s=1e6)


def _summary_disagreements(found: dict[str, tuple], c12) -> list[str]:
    """Every summary statement against its chapter's own verdict, by question or fact key: chapter 12's checklist
    rows and its actions (the title page's and chapter 12's first screen), chapter 1's key-number rows and the title
    page's levers. Returns what disagrees."""
    from datajourney.book import overview
    from datajourney.chapters.c12_conclusion import analysis as diag
    from datajourney.chapters.c12_conclusion import page

    out = []
    table = page.checklist(c12, None)
    for (_, row), r in zip(table.iterrows(), c12.facts.data["checklist"], strict=True):
        ch, key = r["chapter"], r["key"]
        if ch not in found:
            continue
        facts = found[ch][1]
        if key.startswith(diag.QUESTION):
            a = facts.advice_for(key[1:])
            want = phrasing.verdict(a, facts) if a is not None else (
                page.UNANSWERED if f"{key[1:]}{diag.UNMEASURED}" in facts else page.NO_ANSWER)
        elif facts.get(key) is None:
            continue
        else:
            want = (page.FLAGGED_CELL if facts.flagged(key)
                    else page._cell(facts[key], facts, (ch, key) in page.WITH_VALUES))
        if not row["this run"].startswith(want):
            out.append(f"checklist {ch} {key}: {row['this run']!r} is not {want!r}")
    for wl in diag.UNITS:
        wk = c12.facts.data.get(f"{wl}.weakest")
        chapter, keys = diag.REMEDY.get((wl, (wk or {}).get("key")), (None, ()))
        if chapter not in found:
            continue
        facts = found[chapter][1]
        a = next((facts.advice_for(k) for k in keys if facts.advice_for(k) is not None), None)
        action = page._action(c12.facts, wl, None)
        recipe = facts.get("recipe") if wl == "image" and wk["key"] == "gpu" else None
        if recipe is not None and recipe.setting.get("verdict") != "keep":   # chapter 7's combined recipe
            want = phrasing.comparison(recipe, baseline=phrasing.text(facts[recipe.basis].label))
            if want not in action.text:
                out.append(f"{wl}: {action.text!r} does not repeat chapter 7's recipe {want!r}")
        elif a is not None and page.verdict_first(a, facts) not in action.text:
            out.append(f"{wl}: {action.text!r} does not repeat {chapter}'s {a.key}")
    hops = {h["hop"]: h for h in c12.facts.data["hops"] if h["workload"] in ("image", "tokens")}
    a = found["10_mmap_vs_read"][1].advice_for("tokens.loader_mode") if "10_mmap_vs_read" in found else None
    mode = (hops.get("token_loader") or {}).get("mode")
    if a is not None and mode is not None and mode != str(a.value):
        out.append(f"chapter 12 prices the token loader with {mode!r}, not chapter 10's answer {a.value!r}")
    c7 = found["07_full_picture"][1] if "07_full_picture" in found else None
    priced = (hops.get("cpu") or {}).get("recipe")
    if c7 is not None and priced:
        recipe = c7.get("recipe")
        a = c7.advice_for("image.num_workers")
        want = (recipe.setting if recipe is not None else
                {"workers": a.value if a.verdict == "change" else 0, "variant": "default"} if a is not None else {})
        if any(str(priced.get(k)) != str(v) for k, v in want.items() if k in ("format", "workers", "variant")):
            out.append(f"chapter 12 prices the image CPU with {priced}, not chapter 7's answer {want}")
    for ch, (res, facts) in found.items():
        if not registry.lookup(ch).diagnosed:
            continue
        head = registry.lookup(ch).headline
        r = copy.copy(res)
        r.facts = facts
        rows = overview.key_rows(ch, r, None, head[0] if head else None)
        key, shown = rows[0]["key"], overview.first_screen(ch, facts)
        if shown and key != shown[0]:
            out.append(f"chapter 1, {ch}: {key} is not the number its first screen leads with {shown}")
        f = facts.get(key)
        if f is not None and not facts.flagged(key) and rows[0]["reference"] != overview.comparand(f, facts)[1]:
            out.append(f"chapter 1, {ch}: {rows[0]['reference']!r} is not the chapter's {key}")
        if f is not None and rows[0]["published"] != overview.same_metric(ch, f):
            out.append(f"chapter 1, {ch}: a published figure of another metric beside {key}")
        topic = dict(overview.TITLE_FINDINGS).get(ch)
        line = overview.lever_line(ch, topic, r) if topic else None
        if line is not None and f"**{rows[0]['reference']}**" not in line:
            out.append(f"title page, {ch}: {line!r} is not chapter 1's {rows[0]['reference']!r}")
    return out


@pytest.mark.parametrize("where", sorted(_runs()))
def test_every_summary_statement_is_its_chapters_verdict(where, tmp_path, analysed):
    """Over every committed reference run (h200, h100, h200/more, h200/repeats, h100x4): the title page, chapter 1's
    key numbers and chapter 12's checklist and actions say what each chapter's own verdict says, by key."""
    found = {ch: analysed[p] for ch, p in _runs()[where].items()}
    c12 = _summarised(tmp_path, found)
    assert not _summary_disagreements(found, c12)


def _swap_readers(res):
    """Chapter 10's result with mmap's and read()'s measurements swapped: the other reader wins."""
    res = copy.deepcopy(res)
    t = res.tables["sweep"]
    t["mode"] = t["mode"].map({"mmap": "read", "read": "mmap"}).fillna(t["mode"])
    res.facts = None
    return res


def test_a_swapped_winner_flips_the_chapter_and_every_summary(tmp_path, analysed):
    """Swap chapter 10's readers: its verdict flips, and chapter 12's checklist row, the token loader it prices and
    chapter 1's row flip with it (each still equal to the chapter's own)."""
    from datajourney.book import overview
    from datajourney.chapters.c12_conclusion import page

    found = {ch: analysed[p] for ch, p in _runs()["h200/reference"].items()}
    before = found["10_mmap_vs_read"][1].advice_for("tokens.loader_mode")
    swapped = _swap_readers(found["10_mmap_vs_read"][0])
    found["10_mmap_vs_read"] = (swapped, registry.lookup("10_mmap_vs_read").analyse(swapped))
    after = found["10_mmap_vs_read"][1].advice_for("tokens.loader_mode")
    assert (before.value, after.value) == ("read", "mmap") and after.verdict == "keep"
    c12 = _summarised(tmp_path, found)
    assert not _summary_disagreements(found, c12)
    row = page.checklist(c12, None).set_index("practice").loc["mmap or read() for an indexed token set?", "this run"]
    assert row.startswith("keep the default numpy.memmap")
    loader = next(h for h in c12.facts.data["hops"] if h["hop"] == "token_loader")
    assert loader["mode"] == "mmap" and loader["advised"]
    r = copy.copy(swapped)
    r.facts = found["10_mmap_vs_read"][1]
    assert "faster than read()" in overview.key_rows("10_mmap_vs_read", r, None, "posix_events")[0]["reference"]


def test_chapter_2_sets_each_way_of_reading_a_shard_at_its_fastest_request_size():
    """Buffered reads against O_DIRECT: each at its own best request size, so a default that wins is never credited
    with a gain over O_DIRECT's worst (4 KiB) requests; with O_DIRECT made 1.5× faster at its best size it is
    advised, at that size, its alignment cost named."""
    from datajourney.chapters.c02_random_vs_sequential import analysis as c2

    res = results.load_reference("02_random_vs_sequential", "h200")
    f = c2.analyse(res)
    a = f.advice_for("shard.odirect")
    chunks = {int(f[k].setting["chunk"]) for k in a.evidence}
    best = {m: max((x for x in f.facts.values() if x.key.startswith("chunk.") and x.key.endswith(m)),
                   key=lambda x: x.number) for m in (".buffered", ".direct")}
    assert chunks == {int(b.setting["chunk"]) for b in best.values()}
    assert "fastest request size" in a.workload
    t = res.tables["chunk_sweep"].copy()
    top = int(best[".direct"].setting["chunk"])
    t.loc[(t["mode"] == "O_DIRECT") & (t["chunk"] == top), "MBps"] *= 1.5 * best[".buffered"].number / best[
        ".direct"].number
    a2 = c2.analyse(results.Result(res.chapter, res.run_id, res.parameters, res.fingerprint,
                                   {**res.tables, "chunk_sweep": t}, res.metadata)).advice_for("shard.odirect")
    assert a2.verdict == "change" and a2.value is True and a2.cost
