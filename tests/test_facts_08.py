"""Chapter 8 on the facts layer: the analysis of the committed reference results (H200 and H100) gives the key
results the page computed before (computed again here from the tables), chapter 12's photo_decode, the loader
advice; the findings follow reversed data; no parameter is read with ``.get``; the notebook's parameters cell is
the Params'; a hostile string in the result never reaches the page unescaped."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

from datajourney.chapters.c08_threads_processes_gil import analysis, experiment, page
from datajourney.chapters.c08_threads_processes_gil.params import Params
from datajourney.core import results
from datajourney.core.facts import best
from datajourney.core.params import parameters_cell

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "08_threads_processes_gil"
HOSTS = [h for h in ("h200", "h100") if (ROOT / f"data/reference/{h}/{CHAPTER}.json").is_file()]
HOSTILE = "x` <img src=x onerror=alert(1)> `y"
#: The key results the page computed before the facts layer (tests/data/reference_findings.json).
BEFORE = json.loads((ROOT / "tests/data/reference_findings.json").read_text())["values"]
BEFORE_COMMIT = json.loads((ROOT / "tests/data/reference_findings.json").read_text())["commit"]


def _load(host: str):
    res = results.Result.load(ROOT / f"data/reference/{host}/{CHAPTER}.json")
    res.facts = None
    return res


def _old(host: str):
    """The reference result of ``host`` at the commit the key results were recorded from (None in a shallow
    clone): the result the old page computed them on."""
    import subprocess
    import tempfile

    try:
        text = subprocess.run(["git", "show", f"{BEFORE_COMMIT}:data/reference/{host}/{CHAPTER}.json"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / f"{CHAPTER}.json"
        f.write_text(text)
        res = results.Result.load(f)
    res.facts = None
    return res


def _peak_runs(res, decoder, executor):
    p = res.table("primitives")
    g = p[(p["decoder"] == decoder) & (p["executor"] == executor)]
    c = g.groupby("concurrency")["images_per_s"].mean().idxmax()
    return g[g["concurrency"] == c]["images_per_s"].tolist()


def _best(lo, kinds, decoders=None):
    g = lo[lo["loader"].isin(kinds) & (lo["decoder"].isin(decoders) if decoders else True)]
    m = g.groupby(["loader", "concurrency", "decoder"])["images_per_s"].mean()
    k, c, d = m.idxmax()
    return g[(g["loader"] == k) & (g["concurrency"] == c) & (g["decoder"] == d)]


@pytest.mark.parametrize("host", HOSTS)
def test_reference_facts_equal_the_tables_and_the_old_key_results(host):
    res = _load(host)
    f = analysis.analyse(res)
    before = BEFORE[host][CHAPTER]
    old = _old(host)
    fo = analysis.analyse(old) if old is not None else None
    # threads against processes at their peaks (Pillow), computed here from the table
    ratio = np.mean(_peak_runs(res, "pillow", "thread")) / np.mean(_peak_runs(res, "pillow", "process"))
    assert f.number("primitives") == pytest.approx(ratio)
    # the key results the old page computed, on the result it computed them from
    if fo is not None:
        assert fo.number("primitives") == pytest.approx(before["primitives"], rel=1e-9)
        assert fo.number("contention") == pytest.approx(before["contention"], rel=1e-9)
        assert fo.number("end_to_end") == pytest.approx(1 + before["end_to_end"] / 100, rel=1e-9)
        assert fo.number("cost") == pytest.approx(1 - before["cost"] / 100, rel=1e-9)
        assert fo.number("first_batch") == pytest.approx(before["first_batch"], rel=1e-9)
        assert fo.number("moonshot") == pytest.approx(before["moonshot"], rel=1e-9)
    # Pillow's decode per image: as many threads as cores against one thread
    ops = res.table("ops")
    d = ops[(ops["decoder"] == "pillow") & (ops["op"] == "decode") & (ops["executor"] == "thread")]
    per = d.groupby("concurrency")["ms_per_image"].mean()
    n = max(c for c in per.index if c <= res.metadata["cores"])
    assert f.number("contention") == pytest.approx(per[n] / per[per.index.min()])
    # end to end: the best thread pipeline (spdl.io where it ran) over the best DataLoader, now as a ratio
    lo = res.table("loaders")
    t = (_best(lo, ["spdl", "spdl_prealloc", "threadpool"], ["spdl"]) if (lo["decoder"] == "spdl").any()
         and lo[lo["decoder"] == "spdl"]["loader"].isin(["spdl", "spdl_prealloc", "threadpool"]).any()
         else _best(lo, ["spdl", "spdl_prealloc", "threadpool"]))
    dl = _best(lo, ["dataloader"])
    assert f.number("end_to_end") == pytest.approx(t["images_per_s"].mean() / dl["images_per_s"].mean())
    # the paper's "74% faster" is a percentage the front page prints as it is: not beside this ratio
    assert f["end_to_end"].published is None and f["cost"].published is None
    # CPU per image, all processes: the threads over the DataLoader, now as a ratio
    def cpu(r):
        return ((1e3 * (r["cpu_user_s"] + r["cpu_system_s"]) / r["images"]).mean())
    assert f.number("cost") == pytest.approx(cpu(t) / cpu(dl))
    # the slowest start method's first batch with the most workers and the largest Dataset
    st = res.table("startup")
    big = st[(st["workers"] == st["workers"].max()) & (st["n_paths"] == st["n_paths"].max())]
    assert f.number("first_batch") == pytest.approx(big["first_batch_s"].max())
    assert f["first_batch"].setting["start_method"] == "spawn"
    # chapter 12's photo hops: the calibration of the best DataLoader's decoder and each kind's best loader
    pdec = f.data["photo_decode"]
    cal = res.table("calibration").set_index("decoder")
    assert pdec["ms"] == pytest.approx(cal.loc[pdec["decoder"], "decode_ms"] + cal.loc[pdec["decoder"], "resize_ms"])
    assert pdec["process"]["images_per_s"] == pytest.approx(dl["images_per_s"].mean())
    assert set(pdec) == {"decoder", "ms", "cores", "image_size", "process", "thread"}
    assert set(pdec["thread"]) == {"loader", "label", "concurrency", "images_per_s"}
    # the advice: the best of each kind against the other, the DataLoader being the default
    a = f.advice_for("image_decode.loader")
    g = f[a.gain]
    if "paper.best_threads" in f:  # from the SPDL question's warm runs: the best DataLoader against the sweep's best
        assert {g.of, g.basis} == {"paper.best_threads", best([f["paper.dl_pillow.warm"], f["paper.dl_spdl.warm"]]).key}
    else:
        assert a.value.startswith("DataLoader, 16 workers") and (g.of, g.basis) == (
            "end_to_end.dataloader", "end_to_end.threads")
    assert a.default == "torch.utils.data.DataLoader"
    if a.snippet:
        compile(a.snippet, "snippet", "exec")
    assert {"primitives", "end_to_end", "cost", "first_batch", "photo_decode", "image_decode.loader"} <= set(f.exports)
    json.dumps(f.to_dict())


@pytest.mark.parametrize("host", HOSTS)
def test_opening_states_the_paper_and_why(host):
    from datajourney.core.findings import OPENING_WORDS, words

    op = page.opening(analysis.analyse(_load(host)))
    assert 1 <= len(op.findings) <= 3 and 1 <= len(op.actions) <= 3
    assert all(words(x.text) <= OPENING_WORDS for x in op.findings)
    first = op.findings[0].text
    assert "1.74× faster than the PyTorch DataLoader" in first
    if "paper.gain.warm" in analysis.analyse(_load(host)):   # the SPDL question: level, the limit and each factor
        assert "level with the paper's baseline" in first
        assert op.findings[1].text.startswith("What limits the SPDL sweep's best thread setting here: the decode stage")
        assert "1.20× faster than Pillow" in op.findings[1].text and "1.21× slower" in op.findings[1].text
        assert "%" not in op.findings[1].text.split(";")[-1]    # no shares of a level gain
    else:
        assert "slower than the best DataLoader" in first
        assert op.findings[1].text.startswith("Why:") and "more than the DataLoader" in op.findings[1].text
    assert op.actions[0].text.startswith("For photo-like JPEGs") and "DataLoader" in op.actions[0].text
    assert "loader=" not in op.actions[0].text  # a real class, not the chapter's own name for it
    text = " ".join(x.text for x in [*op.findings, *op.actions])
    assert not re.search(r"\b(True|False|None)\b|\d\.\d+e[+-]\d|target|−?\d+(\.\d+)?% ?(faster|slower)", text)


def test_findings_follow_reversed_data():
    """Threads 4× faster: end to end and the opening turn from slower to faster and the advice to the threads;
    spawn faster than fork: the start-method action turns too."""
    res = _load("h200")
    assert "slower than the DataLoader" in page.finding_end_to_end(analysis.analyse(res)).text
    rev = copy.deepcopy(res)
    lo = rev.table("loaders").copy()
    lo.loc[lo["loader"].isin(page.THREADED), "images_per_s"] *= 4
    st = rev.table("startup").copy()
    st["first_batch_s"] = [0.05 if m == "spawn" else 9.0 for m in st["start_method"]]
    pp = rev.table("paper").copy()
    pp.loc[pp["loader"] == "spdl_batch", "images_per_s"] *= 4
    rev.tables.update(loaders=lo, startup=st, paper=pp)
    f = analysis.analyse(rev)
    assert "faster than the DataLoader" in page.finding_end_to_end(f).text
    op = page.opening(f)
    assert "faster than the paper's baseline" in op.findings[0].text
    a = f.advice_for("image_decode.loader")
    assert a.value == "SPDL pipeline, spdl.io" and a.verdict == "change"
    assert f[a.gain].of == "paper.best_threads" and a.call == "spdl.pipeline.PipelineBuilder"
    assert "PipelineBuilder" in a.snippet
    assert any(x.text.startswith("Keep the start method you have") for x in op.actions)


def test_no_parameter_is_read_with_get():
    for py in Path(experiment.__file__).parent.glob("*.py"):
        assert not re.search(r"\b(p|q|params|parameters|res\.parameters)\.get\(", py.read_text()), py


def test_notebook_parameters_cell_is_the_params():
    nb = json.loads((ROOT / f"notebooks/{CHAPTER}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    assert "".join(cell["source"]) == parameters_cell(Params)


def test_notebook_opens_with_the_page_module():
    nb = json.loads((ROOT / f"notebooks/{CHAPTER}.ipynb").read_text())
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "opening.show(page, res, ref, is_reference_run=is_reference_run)" in src
    assert "opening.evidence(page, res, ref, is_reference_run=is_reference_run)" in src
    assert "experiment.Params.from_namespace(globals())" in src


@pytest.mark.parametrize("host", HOSTS)
def test_hostile_strings_stay_escaped(host):
    from datajourney.book import opening

    res = copy.deepcopy(_load(host))
    res.run_id = HOSTILE
    for name in ("loaders", "model", "primitives", "ops", "calibration", "spdl_stages"):
        t = res.table(name).copy()
        if "decoder" in t:
            t["decoder"] = t["decoder"].replace({"pillow": HOSTILE})
        res.tables[name] = t
    st = res.table("startup").copy()
    st["start_method"] = st["start_method"].replace({"forkserver": HOSTILE})
    res.tables["startup"] = st
    md = res.metadata
    md.update(errors=[dict(what=HOSTILE, error=HOSTILE)], graph_note=HOSTILE, moonshot_note=HOSTILE,
              purge_methods=[HOSTILE], decoders={HOSTILE: {"ok": True, "note": HOSTILE}}, decoders_run=[HOSTILE],
              free_threading=dict(md["free_threading"], python=HOSTILE),
              hybrid=dict(md.get("hybrid") or {}, share=None, skipped=HOSTILE, why=HOSTILE),
              dataloader_decoder=dict(decoder=HOSTILE, how="auto", peaks={HOSTILE: 1.0}))
    facts = analysis.analyse(res)
    res.facts = facts
    op = page.opening(facts)
    texts = [x.text for x in [*page.findings(facts), *op.findings, *op.actions]]
    texts += [opening.markdown(page, res, None, is_reference_run=True), page.errors_text(res),
              page.decoder_notes(res), page.calibration_text(res), page.cold_note(res), page.decoder_note(res),
              page.free_threading_text(res), page.nice_hybrid_note(res) or "", page.spdl_note(res) or "",
              page.startup_note(res), *[x.text for s in ("primitives", "contention", "moonshot")
                                        for x in page.section_findings(res, s)]]
    md.update(ceiling=None, moonshot_note=HOSTILE)
    texts.append(page.finding_moonshot(analysis.analyse(res)).text)
    for t in texts:
        outside = re.sub(r"(`+)(?:(?!\1).)*?\1", "", t)
        assert "<img" not in outside, t


def _swap(df, col, a_mask, b_mask):
    """``df`` with the values of ``col`` of the rows ``a_mask`` and ``b_mask`` exchanged (cycled to fit)."""
    out = df.copy()
    a, b = df.loc[a_mask, col].tolist(), df.loc[b_mask, col].tolist()
    out.loc[a_mask, col] = [b[i % len(b)] for i in range(len(a))]
    out.loc[b_mask, col] = [a[i % len(a)] for i in range(len(b))]
    return out


def test_notes_follow_reversed_data():
    """Each converted note words its facts, and its direction word flips when the two sides are swapped."""
    res = _load("h200")
    f = analysis.analyse(res)
    assert "slower than it" in page.decoder_note(f) and "user time dominated" in page.finding_cpu_split(f).text
    assert "list grew more than its array" in page.epoch_note(f)
    assert "fresh interpreter" in page.startup_note(f)
    assert "more than that" in page.gpu_share_note(f)
    rev = copy.deepcopy(res)
    lo = rev.table("loaders").copy()
    lo.loc[lo["loader"].isin(page.THREADED), "images_per_s"] *= 10
    lo["cpu_user_s"], lo["cpu_system_s"] = lo["cpu_system_s"].copy(), lo["cpu_user_s"].copy()
    pre = (lo["loader"] == "spdl_prealloc") & (lo["decoder"] == "pillow")
    c = int(lo[pre]["concurrency"].max())
    base = (lo["loader"] == "spdl") & (lo["decoder"] == "pillow") & (lo["concurrency"] == c)
    lo.loc[pre, "images_per_s"] *= 3
    st = rev.table("startup").copy()
    st["first_batch_s"] = [0.05 if m != "fork" else 9.0 for m in st["start_method"]]
    ep = rev.table("epoch_memory").copy()
    ep = _swap(ep, "pss_bytes", ep["storage"] == "list", ep["storage"] == "numpy")
    m = rev.table("model").copy()
    m.loc[m["loader"] == "nvjpeg", "pct_of_ceiling"] = 30.0
    rev.tables.update(loaders=lo, startup=st, epoch_memory=ep, model=m)
    g = analysis.analyse(rev)
    assert "faster than it" in page.decoder_note(g) and "slower than it" not in page.decoder_note(g)
    assert "system time dominated" in page.finding_cpu_split(g).text
    assert "array grew more than its list" in page.epoch_note(g)
    assert "forking this process cost more" in page.startup_note(g)
    assert "less than that" in page.gpu_share_note(g)
    assert "faster than the pipeline with its collate stage" in page.finding_collate(g, rev).text
    assert "was holding it back" in page.finding_collate(g, rev).text
    assert base.any()


def test_paper_note_gives_shares_only_of_a_gain_both_factors_made():
    """On the H200 reference the warm comparison is level and the threads went the other way: no shares, what each
    factor did instead; a gain both factors made (cold) is split in shares; reversed, the gain flips."""
    res = _load("h200")
    note = page.paper_note(res)
    warm, cold = note.split("\n\n")[:2]
    assert "level with the DataLoader with Pillow" in warm and "published: 1.74× faster" in warm
    assert "no gain to share" in warm and "the decoder 1.20× faster, the threads 1.21× slower" in warm
    assert "%" not in warm.split(" — ")[-1] and "accounts for" not in warm
    assert "accounts for" in cold and "warm files ran" not in note
    rev = copy.deepcopy(res)
    pp = rev.table("paper").copy()
    w = pp["state"] == "warm"
    pp.loc[w & (pp["loader"] == "spdl_batch"), "images_per_s"] *= 1.5
    rev.tables["paper"] = pp
    rev.facts = None
    warm = page.paper_note(rev).split("\n\n")[0]
    assert "1.49× faster than the DataLoader with Pillow" in warm and "accounts for" in warm
    pp.loc[w & (pp["loader"] == "spdl_batch"), "images_per_s"] /= 3
    rev.tables["paper"] = pp
    warm = page.paper_note(rev).split("\n\n")[0]
    assert "slower than the DataLoader with Pillow" in warm and "different ways" in warm
