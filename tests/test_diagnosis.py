"""Chapter 12: the diagnosis follows the data it reads, names what is missing, and the budget
model is the one the chart's JavaScript evaluates."""
import shutil

import pytest

from datajourney.chapters.c12_conclusion import experiment as diagnosis
from datajourney.chapters.c12_conclusion import page
from datajourney.core import results
from datajourney.core.params import ParameterError

REF = results.REFERENCE_DIR / "h200"


#: A stated token demand, so that these tests time no model (the measured step has tests of its own).
STATED = dict(llm_tokens_per_s=1e6)


def _run_with(tmp_path, chapters=None, edit=None, **params):
    """Diagnose a run directory holding the reference results of ``chapters`` (all by default),
    after ``edit(chapter, result)`` changed them."""
    for ch in chapters or diagnosis.SOURCES:
        r = results.Result.load(REF / f"{ch}.json")
        if edit:
            edit(ch, r)
        r.save(tmp_path)
    return diagnosis.run(run_dir=tmp_path, **{**STATED, **params})


def test_reference_run_names_the_slowest_hop(tmp_path):
    res = _run_with(tmp_path)
    hops = res.table("hops")
    image = hops[hops["workload"] == "image"].dropna(subset=["capacity"])
    assert set(image["hop"]) & diagnosis.ASIDE  # chapter 8's photo hops are shown ...
    image = image[~image["hop"].isin(diagnosis.ASIDE)]  # ... but never taken as chapter 7's weakest link
    w = res.metadata["weakest"]["image"]
    assert w["capacity"] == image["capacity"].min() and w["key"] == image.loc[image["capacity"].idxmin(), "hop"]
    assert w["margin"] == pytest.approx(sorted(image["capacity"])[1] / w["capacity"])
    assert diagnosis.weakest_of(res) == res.metadata["weakest"]
    assert res.metadata["missing"] == []
    f = {x.key: x for x in page.findings(res)}
    assert w["label"] in f["weakest_image"].text and "not computed" not in f["weakest_image"].text


def test_slow_storage_becomes_the_weakest_link(tmp_path):
    """Reverse the reference: make one-file-per-sample reads 1,000× slower; the diagnosis must move."""
    def slow(ch, r):
        if ch == "02_random_vs_sequential":
            t = r.tables["size_sweep"]
            t.loc[t["pattern"] == "random", "MBps"] /= 1000

    res = _run_with(tmp_path, edit=slow)
    w = res.metadata["weakest"]["image"]
    assert w["key"] == "files" and w["next_key"] != "files"
    f = {x.key: x for x in page.findings(res)}
    assert "one file per image" in f["weakest_image"].text
    assert "weakest link storage: one file per image" in "\n".join(res.metadata["summary"])


def test_measured_pipeline_above_the_model_is_called_so(tmp_path):
    def fast(ch, r):
        if ch == "07_full_picture":
            r.tables["scenarios"]["images_per_s"] *= 3

    f = {x.key: x for x in page.findings(_run_with(tmp_path, edit=fast))}
    assert "above the model's limit" in f["predicted_vs_measured"].text and f["predicted_vs_measured"].value > 100


def test_workers_needed_follows_the_step_time(tmp_path):
    def slow_cpu(ch, r):
        if ch == "07_full_picture":
            for c in diagnosis.CPU_STAGES:
                r.tables["steps"][c] *= 50

    res = _run_with(tmp_path, edit=slow_cpu)
    f = {x.key: x for x in page.findings(res)}
    assert f["workers_needed"].value > res.metadata["image_workload"]["cores"]
    assert "cannot keep up" in f["workers_needed"].text
    assert res.metadata["weakest"]["image"]["key"] == "cpu"


def test_partial_run_names_the_missing_chapters(tmp_path):
    res = _run_with(tmp_path, chapters=["07_full_picture"])
    assert set(res.metadata["missing"]) == set(diagnosis.SOURCES) - {"07_full_picture"}
    f = {x.key: x for x in page.findings(res)}
    assert "chapter 2 not in this run" in f["weakest_image"].text
    assert "chapter 6 not in this run" in f["weakest_image"].text
    assert res.metadata["weakest"]["image"]["key"] in ("cpu", "gpu")
    assert res.metadata["weakest"]["tokens"] is None  # no measured hop for tokens: no verdict
    assert "no hop could be compared" in f["weakest_tokens"].text
    table = page.checklist(res, None)
    assert (table.loc[table["chapter"] == 2, "this run"] == "not run").all()


def test_empty_run_still_renders(tmp_path):
    res = diagnosis.run(run_dir=tmp_path, **STATED)
    assert res.metadata["found"] == [] and res.metadata["weakest"] == {"image": None, "tokens": None, "gradients": None}
    assert page.budget_figure(res) is None
    assert len(page.findings(res)) >= 2


def test_budget_model_matches_the_hops(tmp_path):
    """The chart starts from the run's own workload, so the model gives the table's rates there."""
    res = _run_with(tmp_path)
    m = page.budget_model(page.budget_inputs(res))
    hops = res.table("hops").set_index(["workload", "hop"])["capacity"]
    for key in ("files", "shard", "cpu", "pcie"):
        assert m[key] == pytest.approx(hops[("image", key)])
    assert m["demand"] == pytest.approx(hops[("image", "gpu")])


@pytest.mark.parametrize("name,value", [("token_bytes", 3), ("llm_tokens_per_s", 0), ("tokens_per_batch", 0),
                                        ("llm_tokens_per_s", float("nan")), ("token_model", "gpt3"),
                                        ("token_seq_len", 0), ("token_steps", 0), ("tokens_per_batch", 512)])
def test_bad_parameters_fail_before_work(tmp_path, name, value):
    """One-line errors naming the parameter, before any work (512 tokens cannot fill one 1,024-token row)."""
    params = dict(llm_tokens_per_s=None, token_bytes=4, tokens_per_batch=4096, run_dir=tmp_path)
    params[name] = value
    with pytest.raises(ParameterError, match=name) as e:
        diagnosis.run(**params)
    assert "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())


def test_checklist_rows_exist_in_their_chapters():
    """Every checklist row names a finding its chapter's page really computes on the reference run."""
    import importlib

    from datajourney.chapters.registry import lookup

    for ch, key in diagnosis.CHECKLIST:
        keys = {f.key for f in importlib.import_module(lookup(ch).page).findings(results.load_reference(ch))}
        assert key in keys, (ch, key)
        assert (ch, key) in page.PRACTICE


def test_copy_leaves_reference_untouched(tmp_path):
    before = {p.name: p.read_bytes() for p in REF.glob("0*.json")}
    _run_with(tmp_path)
    assert before == {p.name: p.read_bytes() for p in REF.glob("0*.json")}
    shutil.rmtree(tmp_path)


# ----------------------------------------------------------------------------- chapters 8-11
def _f(res):
    return {x.key: x for x in [*page.findings(res), *(n for wl in ("image", "tokens", "gradients")
                                                      for n in page.hop_notes(res, wl))]}


def test_sources_cover_chapters_2_to_11():
    assert [int(c[:2]) for c in diagnosis.SOURCES] == list(range(2, 12))


def test_photo_decode_too_slow_for_the_gpu(tmp_path):
    """Reverse chapter 8: decoding 30× slower needs more cores than the host has, and the
    photo CPU hop becomes the weakest link."""
    def slow(ch, r):
        if ch == "08_threads_processes_gil":
            r.tables["calibration"][["decode_ms", "resize_ms"]] *= 30

    res = _run_with(tmp_path, edit=slow)
    f = _f(res)["photo_workers"]
    assert f.value > res.metadata["photo"]["cores"] and "cannot feed this GPU" in f.text
    assert res.metadata["weakest"]["image"]["key"] not in diagnosis.ASIDE  # photos are a what-if beside it
    ref = _f(_run_with(tmp_path / "ref"))["photo_workers"]
    assert ref.value <= res.metadata["photo"]["cores"] and "within the" in ref.text


@pytest.mark.parametrize("faster", ["threads", "processes"])
def test_the_faster_loader_kind_is_said(tmp_path, faster):
    """Make chapter 8's thread loaders (or its DataLoaders) 4× faster: the best loader, the sentence
    and the checklist row follow."""
    def boost(ch, r):
        if ch == "08_threads_processes_gil":
            lo = r.tables["loaders"]
            t = lo["loader"].isin(["spdl", "threadpool"])
            t = t if faster == "threads" else ~t
            lo.loc[t, "images_per_s"] *= 4
            lo.loc[t, "seconds"] /= 4

    res = _run_with(tmp_path, edit=boost)
    f = _f(res)["photo_workers"]
    photo = res.metadata["photo"]
    row = res.table("checklist").set_index(["chapter", "key"]).loc[("08_threads_processes_gil", "end_to_end")]
    if faster == "threads":
        assert "(threads)" in f.text and photo["thread"]["images_per_s"] > photo["process"]["images_per_s"]
        assert row["value"] > 0
    else:
        assert "(worker processes)" in f.text and photo["thread"]["images_per_s"] < photo["process"]["images_per_s"]
        assert row["value"] < 0


def test_slow_loaders_fall_short(tmp_path):
    def slow(ch, r):
        if ch == "08_threads_processes_gil":
            r.tables["loaders"]["images_per_s"] /= 20
            r.tables["loaders"]["seconds"] *= 20

    res = _run_with(tmp_path, edit=slow)
    assert "it falls short" in _f(res)["photo_workers"].text
    assert res.metadata["weakest"]["image"]["key"] not in diagnosis.ASIDE


def test_disk_to_gpu_names_the_lower_ceiling(tmp_path):
    """Reference: the disk is the lower ceiling. Reversed: a PCIe ceiling below the disk's."""
    assert "the lower ceiling is the device's" in _f(_run_with(tmp_path / "ref"))["to_gpu_path"].text

    def narrow_link(ch, r):
        if ch == "09_reading_smarter":
            r.metadata["pcie_ceiling"] = dict(r.metadata["pcie_ceiling"], GBps=0.5)

    f = _f(_run_with(tmp_path, edit=narrow_link))["to_gpu_path"]
    assert "the lower ceiling is the pinned PCIe copy" in f.text


def test_slow_path_to_gpu_limits_tokens(tmp_path):
    def slow(ch, r):
        if ch == "09_reading_smarter":
            r.tables["gpu"]["GBps"] /= 1e4

    res = _run_with(tmp_path, edit=slow)
    assert res.metadata["weakest"]["tokens"]["key"] == "to_gpu"
    assert "storage → GPU memory" in _f(res)["weakest_tokens"].text


def test_chapter_9_without_a_gpu_is_named(tmp_path):
    def cpu_only(ch, r):
        if ch == "09_reading_smarter":
            r.metadata["cuda"] = False
            del r.tables["gpu"]

    res = _run_with(tmp_path, edit=cpu_only)
    assert "to_gpu_path" not in _f(res)
    assert "chapter 9 ran without a GPU" in _f(res)["weakest_tokens"].text


def test_token_loader_follows_the_faster_mode(tmp_path):
    """Reference: read() is the faster cold loader. Reversed: mmap 10× faster; then 1,000× slower
    loaders fall short of the demand and become the weakest link."""
    ref = _run_with(tmp_path / "ref")
    assert ref.metadata["token_loader"]["best"] == "read" and "used **read()**" in _f(ref)["token_loader"].text

    def fast_mmap(ch, r):
        if ch == "10_mmap_vs_read":
            s = r.tables["sweep"]
            s.loc[s["mode"] == "mmap", "loader_s"] /= 10

    res = _run_with(tmp_path / "mmap", edit=fast_mmap)
    f = _f(res)["token_loader"]
    assert "used **mmap**" in f.text and "faster than read()'s best" in f.text

    def slow(ch, r):
        if ch == "10_mmap_vs_read":
            r.tables["sweep"]["loader_s"] *= 1000

    res = _run_with(tmp_path / "slow", edit=slow)
    assert "it falls short" in _f(res)["token_loader"].text
    assert res.metadata["weakest"]["tokens"]["key"] == "token_loader"


def test_allreduce_slower_than_the_step(tmp_path):
    """Reference: the gradients' all-reduce fits in the step. Reversed: 100× less bandwidth."""
    ref = _run_with(tmp_path / "ref")
    assert "shorter than the step" in _f(ref)["allreduce_vs_step"].text
    assert ref.metadata["weakest"]["gradients"]["key"] == "gpu"

    def slow(ch, r):
        if ch == "11_gpu_to_gpu":
            b = r.tables["bench"]
            b[["algbw_GBps", "busbw_GBps"]] /= 100
            b["time_ms"] *= 100

    res = _run_with(tmp_path / "slow", edit=slow)
    f = _f(res)["allreduce_vs_step"]
    assert "longer than the step, so no overlap can hide it" in f.text and f.value > 100
    assert res.metadata["weakest"]["gradients"]["key"] == "allreduce"
    g = res.metadata["gradient_exchange"]
    d = g["paths"][g["default"]]
    assert d["allreduce_ms"] == pytest.approx(
        100 * ref.metadata["gradient_exchange"]["paths"][g["default"]]["allreduce_ms"]
    )


def test_partial_run_without_chapters_8_to_11(tmp_path):
    res = _run_with(tmp_path, chapters=[c for c in diagnosis.SOURCES if int(c[:2]) < 8])
    f = _f(res)
    assert {"photo_workers", "to_gpu_path", "token_loader", "allreduce_vs_step"}.isdisjoint(f)
    assert "chapter 8 not in this run" in f["weakest_image"].text
    assert (
        "chapter 9 not in this run" in f["weakest_tokens"].text
        and "chapter 10 not in this run" in f["weakest_tokens"].text
    )
    assert res.metadata["weakest"]["gradients"] is None and "chapter 11 not in this run" in f["weakest_gradients"].text
    assert "data-parallel step: no diagnosis" in "\n".join(res.metadata["summary"])
    table = page.checklist(res, None)
    assert (table.loc[table["chapter"].isin([8, 9, 10, 11]), "this run"] == "not run").all()


@pytest.mark.parametrize("chapter,key,edit,check", [
    ("09_reading_smarter", "to_gpu", lambda r: r.tables["gpu"].__setitem__("GBps", r.tables["gpu"]["GBps"] * 2),
     lambda mine, ref: mine == pytest.approx(2 * ref)),
    ("10_mmap_vs_read", "loader_time", lambda r: r.tables["sweep"].__setitem__(
        "loader_s", r.tables["sweep"]["loader_s"].where(r.tables["sweep"]["mode"] != "read",
                                                        r.tables["sweep"]["loader_s"] * 4)),
     lambda mine, ref: mine == pytest.approx(4 * ref)),
    ("11_gpu_to_gpu", "allreduce_busbw",
     lambda r: r.tables["bench"].__setitem__("busbw_GBps", r.tables["bench"]["busbw_GBps"] / 10),
     lambda mine, ref: mine == pytest.approx(ref / 10)),
])
def test_checklist_rows_follow_this_run(tmp_path, chapter, key, edit, check):
    """The checklist shows what the chapter computes from this run's data, not a stored figure."""
    ref = _run_with(tmp_path / "ref").table("checklist").set_index(["chapter", "key"]).loc[(chapter, key), "value"]
    mine = _run_with(tmp_path / "mine", edit=lambda ch, r: edit(r) if ch == chapter else None)
    assert check(mine.table("checklist").set_index(["chapter", "key"]).loc[(chapter, key), "value"], ref)


def test_the_run_command_ends_with_the_diagnosis(tmp_path, capsys):
    """`./journey book` runs `python -m datajourney run --book`, which ends by printing chapter 12's
    summary of the run: one line per workload, and the chapters missing."""
    from datajourney.cli import _print_diagnosis

    res = _run_with(tmp_path, chapters=[c for c in diagnosis.SOURCES if c != "11_gpu_to_gpu"])
    _print_diagnosis(tmp_path)
    out = capsys.readouterr().out
    assert out.strip().splitlines()[0] == "Your pipeline, diagnosed (chapter 12):"
    for line in res.metadata["summary"]:
        assert line in out
    assert "data-parallel step: no diagnosis" in out and "not run, so not diagnosed: chapters 11" in out
    assert len(out.strip().splitlines()) <= 8


def test_reference_column_follows_the_reference_files(tmp_path):
    """A reader's run (not the reference) gets the reference column from every chapter's committed
    result, chapters 8-11 included, even where the committed diagnosis predates them."""
    res = _run_with(tmp_path, edit=lambda ch, r: r.tables["gpu"].__setitem__("GBps", r.tables["gpu"]["GBps"] * 2)
                    if ch == "09_reading_smarter" else None)
    old = results.load_reference(diagnosis.CHAPTER)
    table = page.checklist(res, old).set_index(["chapter", "practice"])
    row = table.loc[(9, page.PRACTICE[("09_reading_smarter", "to_gpu")])]
    assert row["reference run"] != row["this run"]
    assert row["reference run"] == page.reference_checklist().set_index(["chapter", "key"]).loc[
        ("09_reading_smarter", "to_gpu"), "headline"]
    assert not (table["reference run"] == "—").any()


@pytest.mark.parametrize("graphed_factor, kind", [(0.9, "graphed"), (1.1, "eager")])
def test_gpu_step_is_the_faster_of_the_eager_and_graphed_ceilings(tmp_path, graphed_factor, kind):
    """Where chapter 7 measured its step replayed from CUDA graphs, the GPU hop is the faster ceiling."""
    def graphed(ch, r):
        if ch == "07_full_picture":
            g = r.tables["ceiling"].copy()
            g["step_ms"] *= graphed_factor
            r.tables["graphed_ceiling"] = g

    res = _run_with(tmp_path, edit=graphed)
    wl, eager = res.metadata["image_workload"], results.Result.load(REF / "07_full_picture.json").table("ceiling")
    assert wl["step_kind"] == kind
    assert wl["step_ms"] == pytest.approx(eager["step_ms"].mean() * min(graphed_factor, 1.0))
    hops = res.table("hops")
    gpu = hops[(hops["workload"] == "image") & (hops["hop"] == "gpu")]
    assert ("CUDA graphs" in gpu["basis"].iloc[0]) == (kind == "graphed")
