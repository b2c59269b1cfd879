"""Chapter 11's page as a reader reads it, on the committed reference results: the profile's text counts the rows its
table marks, lists read as lists, the options' key result is a sentence naming its baseline once, the ladder names
one-bucket DDP as the prose does, the page words what the best setting kept and the chapter's answer (no target),
the parameters and the loss table read as prose, and the scaling panels are titled by their run."""
import copy
import dataclasses

import pytest

from datajourney.chapters.c11_gpu_to_gpu import analysis, charts, page
from datajourney.chapters.c11_gpu_to_gpu.params import Params
from datajourney.chapters.c11_gpu_to_gpu.reading import option_words, rung_label
from datajourney.core import phrasing as say
from datajourney.core import results
from datajourney.core.params import spec_of
from datajourney.core.units import num

CH = analysis.CHAPTER
HOSTS = ("h200x4", "h100x4")


def _ref(host: str = "h200x4") -> results.Result:
    r = results.load_reference(CH, host)
    if r is None:
        pytest.skip(f"no committed {host} reference of chapter 11")
    return r


def _marked(table, kind: str) -> int:
    col = table["profiled steps"]
    return int((col == page.PROFILE_FLAG_WORDS["slow"]).sum() if kind == "slow" else col.str.startswith("GPU idle")
               .sum())


def _rows(k: int) -> str:
    return f"{num(k)} {'row' if k == 1 else 'rows'}"


# --------------------------------------------------------------------------- 1. the profile's counts
@pytest.mark.parametrize("host", HOSTS)
def test_profile_note_counts_the_rows_its_table_marks(host):
    """Every flagged profile (the scaling jobs' too) is a row of the table, and the text counts those rows (the 4-GPU
    reference flagged two rows of its 2-GPU scaling job that the table left out: "9 rows" above 7 marked)."""
    r = _ref(host)
    t, note, flags = page.profile_table(r), page.profile_note(r), page.facts_of(r).data["profile_flags"]
    slow, idle = _marked(t, "slow"), _marked(t, "idle")
    assert slow + idle == len(flags) and slow == sum(x["kind"] == "slow" for x in flags)
    assert (f"In {_rows(slow)} the profiled steps ran slower" in note) == (slow > 0)
    assert (f"In {_rows(idle)} the GPU sat idle" in note) == (idle > 0)
    assert set(t["processes"]) >= {int(x["world"]) for x in flags}


def test_profile_note_follows_the_scaling_jobs_profile():
    """Without the scaling job's profile, its rows leave the table and the count alike."""
    r = copy.deepcopy(_ref())
    before = page.profile_table(r)
    s = r.tables["scale_rungs"]
    r.tables["scale_rungs"] = s.assign(prof_nccl_ms=float("nan"))
    t, note = page.profile_table(r), page.profile_note(r)
    assert len(t) == len(before) - int((s["prof_nccl_ms"].notna() & (s["status"] == "ok")).sum())
    assert 2 not in set(t["processes"])
    slow = _marked(t, "slow")
    assert slow == _marked(before[before["processes"] != 2], "slow") < _marked(before, "slow")
    assert f"In {_rows(slow)} the profiled steps ran slower" in note


# --------------------------------------------------------------------------- 2. a list of counts
def test_scope_text_lists_the_gpu_counts_with_and():
    r = _ref()
    counts = sorted({int(page.facts_of(x).data["workload"]["world"]) for _, x in page.scaling_sources(r, r)})
    text = page.scope_text(r, r)
    assert f"the runs shown measured {say.and_list([num(k) for k in counts])} GPUs of one host" in text
    assert len(counts) < 2 or ", ".join(map(num, counts)) + " GPUs" not in text


# --------------------------------------------------------------------------- 3. the options, the path answer
def test_options_finding_is_a_sentence_naming_its_baseline_once():
    r = _ref()
    f = page.facts_of(r)
    text = next(x.text for x in page.findings(r) if x.key in ("compression", "best_option_direct")
                and x.text.startswith("**DDP options"))
    b, g = f["best_option_direct"], f["gap_closed_direct"]
    cap = f.data["workload"]["bucket_cap_mb"]
    assert text.startswith(f"**DDP options against one-bucket DDP ({say.text(f'bucket_cap_mb={cap}')})**")
    assert (f"{say.text(option_words(b.setting['rung']))} {analysis.path_words(b.setting['path'])} closed "
            f"{say.value(g)} of the gap between one-bucket DDP and one GPU without DDP, the most of any option."
            ) in text
    assert text.count(f"bucket\\_cap\\_mb={cap}") == 1


def test_path_answer_names_the_shared_ddp_settings_once():
    """The path question's sides are named by their path (``path_<path>``), the DDP settings both ran by the
    workload: the advice names one-bucket DDP once, and its sides are still like for like."""
    r = _ref()
    f = page.facts_of(r)
    a = f.advice_for("ddp.path")
    g = f[a.gain]
    of, basis = f[g.of], f[g.basis]
    assert of.key.startswith("path_") and basis.key.startswith("path_")
    assert of.setting["rung"] == basis.setting["rung"] == f.data["path_rung"]["rung"]
    assert basis.label == f"the same DDP settings {analysis.path_words(basis.setting['path'])}"
    text = say.advice(a, f)
    words = say.text(f.data["path_rung"]["words"])
    assert text.count(words) == 1 and f"{say.comparison(g, f)}." in text
    assert any(x.text.startswith(text) for x in page.opening(r).actions)


# --------------------------------------------------------------------------- 4. the ladder's name for one-bucket DDP
def test_ladder_names_one_bucket_ddp_as_the_prose_does():
    r = _ref()
    assert rung_label("ddp") == option_words("ddp") == "one-bucket DDP"
    assert rung_label("ddp@25") == "DDP, bucket_cap_mb=25"   # DDP with its own bucket size is not one bucket
    t = page.ladder_table(r)
    row = t[(t["rung"] == "one-bucket DDP") & (t["processes"] == r.metadata["world"]) & (t["path"] == "direct")]
    assert len(row) == 1 and row["against one-bucket DDP"].iloc[0] == "baseline"
    assert "DDP" not in set(t["rung"]) and "DDP" not in set(page.ladder_frame(r)["step"])
    assert "DDP" not in set(page.phases_frame(r)["rung"]) and "DDP" not in set(page.profile_table(r)["rung"])
    steps, _ = page.scaling_long(page.scaling_sources(r, r))
    assert "one-bucket DDP" in set(steps["line"]) and "one-bucket DDP" in charts.COLOURS


# --------------------------------------------------------------------------- 5. no target on the page
@pytest.mark.parametrize("host", HOSTS)
def test_best_setting_text_says_what_was_kept_and_the_answer_not_the_target(host):
    r = _ref(host)
    f = page.facts_of(r)
    text = page.target_text(r)
    best = f["target_best"]
    assert "target" not in text.lower()
    assert f"kept {say.value(best, runs=False)} of one GPU's steps/s per GPU." in text
    nccl = best.setting.get("channels") not in (None, "unset")
    a = f.advice_for("ddp.nccl_channels" if nccl else "ddp.option")
    assert (a is None) or text.endswith(say.advice(a, f))


def test_the_answer_kept_says_why_the_best_alternative_did_not_change_it():
    """On the 4-GPU reference the 4-channel setting measured best, by less than the minimum effect: the page's answer
    says both, computed; with the 4-channel windows 10% faster the same sentence changes the default instead."""
    r = _ref()
    f = page.facts_of(r)
    a = f.advice_for("ddp.nccl_channels")
    assert a.verdict == "keep" and a.best and 0 < a.within < a.threshold
    text = page.target_text(r)
    assert (f"within {num(100 * a.within, '%')} of the best measured ({say.paste(a.best)}), under the "
            f"{num(100 * a.threshold, '%')} minimum gain.") in text
    fast = copy.deepcopy(r)
    w = fast.tables["explain_windows"]
    fast.tables["explain_windows"] = w.assign(steps_per_s=[v * (1.10 if j == "nch4" else 1.0)
                                                            for j, v in zip(w["job"], w["steps_per_s"])])
    ff = page.facts_of(fast)
    b = ff.advice_for("ddp.nccl_channels")
    assert b.verdict == "change" and "target" not in page.target_text(fast).lower()
    assert page.target_text(fast).endswith(say.advice(b, ff)) and "keep the default" not in page.target_text(fast)


# --------------------------------------------------------------------------- 6. the parameters read as prose
def test_parameter_descriptions_have_no_repr_and_no_ascii_minus():
    helps = {fl.name: spec_of(fl).help for fl in dataclasses.fields(Params) if spec_of(fl) is not None}
    assert "None" not in helps["rdzv_endpoint"] and "single node" in helps["rdzv_endpoint"]
    assert " - " not in helps["node_rank"] and "one less than nnodes" in helps["node_rank"]


# --------------------------------------------------------------------------- 7. the loss table's two "exposed"
def test_loss_table_tells_the_profiled_time_from_the_share_of_the_loss():
    r = _ref()
    t = page.loss_table(r)
    rows = page.facts_of(r).data["loss"]["rows"]
    assert "of which exposed ms" not in t and "exposed (points)" not in t
    ms, pts = page.LOSS_COLUMNS["nccl_exposed_ms"], page.LOSS_COLUMNS["exposed"]
    assert ms.endswith(" ms") and "profiled" in ms and pts == "loss from exposed communication (points)"
    assert list(t[ms]) == [x["nccl_exposed_ms"] for x in rows] and list(t[pts]) == [x["exposed"] for x in rows]
    assert list(t["largest share"]) == [page.SHARE_WORDS[x["largest"]] for x in rows]


# --------------------------------------------------------------------------- 8. the scaling panels' titles
def test_scaling_panels_are_titled_by_their_run():
    r = _ref()
    sources = page.scaling_sources(r, r)
    steps, bw = page.scaling_long(sources)
    figs = charts.scaling_charts(steps, bw)
    assert len(figs) == 2
    for fig, frame in zip(figs, (steps, bw)):
        titles = [a.text for a in fig.layout.annotations if a.text and "GPUs" in a.text]
        assert titles and not any(x.startswith("run:") for x in titles)
        assert [x.replace("<br>", " ") for x in titles] == list(dict.fromkeys(frame["run"]))
