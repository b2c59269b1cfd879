"""Chapter 9 on the facts layer: the analysis gives the numbers the page used to compute (checked here from the
tables, independently), the findings follow reversed data, no parameter is read with a fallback default, the
notebook's parameters cell is the declared one, and a hostile string in the result never reaches Markdown as HTML."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from datajourney.book import opening
from datajourney.chapters.c09_reading_smarter import analysis, page
from datajourney.chapters.c09_reading_smarter.params import Params
from datajourney.core import results
from datajourney.core.params import BOOK_OPTIONS, parameters_cell

CHAPTER = "09_reading_smarter"
HOSTS = [h for h in results.reference_hosts() if results.load_reference(CHAPTER, h) is not None]
FOLDER = Path(page.__file__).parent
HOSTILE = "x` <img src=x onerror=alert(1)> `y"
#: The notes under the notebook's tables and charts, each worded from facts.
NOTES = (page.gpu_note, page.gds_note, page.asked_seen_note, page.random_note, page.readahead_more, page.latency_note,
         page.drift_note, page.pipeline_note, page.ceilings_text)


@pytest.fixture(params=HOSTS)
def ref(request):
    return results.load_reference(CHAPTER, request.param)


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


def test_facts_equal_what_the_tables_hold(ref):
    f = analysis.analyse(ref)
    g = ref.table("gpu")
    cold = g[(g["cache"] == "cold") & g["error"].isna()]
    by = cold.groupby("path")["GBps"].mean()
    dd = _mean(ref.table("ceiling")["GBps"])
    assert f.number("dd_read") == pytest.approx(dd)
    assert f.number("path.a") == pytest.approx(by["pageable + copy"])
    # the fastest path: every cold path, with path (b) at the setting its sweep chose (the sweep's best row)
    p = ref.table("pipeline")
    runs = p[p["mode"].str.startswith("dd")].set_index("run")["GBps"]
    b = p[~p["mode"].str.startswith("dd")].assign(share=lambda d: d["GBps"] / d["run"].map(runs))
    top = b.groupby(["mode", "chunk", "buffers"]).agg(GBps=("GBps", "mean"), share_min=("share", "min"),
                                                      share=("share", "mean")) \
        .sort_values(["share_min", "share"], ascending=False).iloc[0]
    pb = ref.metadata["gds"]["path_b"]
    same = (("O_DIRECT" if pb.get("direct") else "buffered"), pb.get("chunk"), pb.get("buffers")) == \
        (top.name[0], top.name[1], top.name[2])
    b_rate = by["pinned, double-buffered"] if same else top["GBps"]
    best = max([v for k, v in by.items() if k != "pinned, double-buffered"] + [b_rate])
    assert f.number("to_gpu") == pytest.approx(best)
    assert f.number("to_gpu_vs_dd") == pytest.approx(best / dd)
    assert f.number("to_gpu_vs_pcie") == pytest.approx(best / ref.metadata["pcie_ceiling"]["GBps"])
    assert f.data["disk_to_gpu"]["GBps"] == pytest.approx(best)
    assert f.data["disk_to_gpu"]["device"] == pytest.approx(dd)
    r = ref.table("random")
    one = _mean(r[r["mode"] == "pread, 1 thread"]["IOPS"])
    pool = r[r["mode"] == "pread, thread pool"].groupby("threads")["IOPS"].mean()
    assert f.number("parallel_random") == pytest.approx(pool.max() / one)
    assert f.advice_for("random_reads.threads").value == int(pool.idxmax())
    ra = ref.table("readahead")
    seq = ra[(ra["pattern"] == "sequential") & (ra["setting"] == "read_ahead_kb")]
    means = seq.groupby("read_ahead_kb")["MBps"].mean()
    assert f.number("readahead") == pytest.approx(means[means.index.max()] / means[means.index.min()])
    lat = ref.table("latency")
    first = lat[(lat["series"] == "O_DIRECT, first pass") & (lat["reads"] > 0)]["p50_us"]
    assert f.number("virtual_disk") == pytest.approx(_mean(first))
    a = f.advice_for("storage_to_gpu.path")
    assert a is not None and a.needs == "gpu" and f[a.gain].basis == "path.a"  # against the plain path
    assert set(analysis.EXPORTS) - {"gds"} <= set(f.facts) | set(f.data)     # gds: only where kvikio loaded
    json.dumps(f.to_dict())                               # plain JSON, as result files store it


def test_the_headline_names_the_best_path_and_the_advice_its_setting():
    """Path (b) reads at the setting its sweep chose (the sweep's best row, from the table): the headline and
    the advice name that setting."""
    ref = results.load_reference(CHAPTER, "h200")
    f = analysis.analyse(ref)
    s = analysis.pipeline_summary(ref).iloc[0]
    words = analysis.setting_words(s["mode"], s["chunk"], s["buffers"])
    assert words in f["to_gpu"].label
    op = page.opening(f)
    assert words.replace("_", "\\_") in op.findings[0].text and words.replace("_", "\\_") in op.actions[0].text
    assert "no special path" not in " ".join(a.text for a in op.actions)
    assert "faster than (a) pageable + copy" in op.actions[0].text


def _swap_dd(res, factor):
    r = copy.deepcopy(res)
    r.tables["ceiling"] = r.tables["ceiling"].assign(GBps=r.tables["ceiling"]["GBps"] * factor)
    return r


def test_findings_follow_reversed_data(ref):
    f = analysis.analyse(ref)
    to_gpu = f.number("to_gpu")
    # the disk's dd read set just above and just below the best path: the direction word flips
    up = analysis.analyse(_swap_dd(ref, 1.5 * to_gpu / f.number("dd_read")))
    down = analysis.analyse(_swap_dd(ref, 0.5 * to_gpu / f.number("dd_read")))
    assert "slower than dd reading the disk cold" in page.finding(up, "to_gpu")[0].text
    assert "faster than dd reading the disk cold" in page.finding(down, "to_gpu")[0].text
    r = copy.deepcopy(ref)
    t = r.tables["random"]
    one, pool = t["mode"] == "pread, 1 thread", t["mode"] == "pread, thread pool"
    t.loc[one, "IOPS"], t.loc[pool, "IOPS"] = t.loc[one, "IOPS"] * 10, t.loc[pool, "IOPS"] / 10
    rev = analysis.analyse(r)
    assert "slower than one pread thread" in page.finding(rev, "parallel_random")[0].text
    assert rev.advice_for("random_reads.threads").value == 1


def test_no_parameter_is_read_with_a_fallback():
    for name in ("experiment.py", "analysis.py", "page.py", "params.py"):
        text = (FOLDER / name).read_text()
        assert not re.search(r"\b(p|params|parameters|q)\.get\(", text), name
        assert "or 1 << 24" not in text and "or 1 << 22" not in text, name


def test_notebook_parameters_cell_is_the_declared_one():
    nb = json.loads((Path(page.__file__).parents[3] / "notebooks" / f"{CHAPTER}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in (c["metadata"].get("tags") or []))
    src = "".join(cell["source"])
    assert src == parameters_cell(Params)           # with the book's options, which Params does not hold
    assert all(f"\n{name} = " in src for name in BOOK_OPTIONS)
    assert {"parameters", "remove-cell"} <= set(cell["metadata"]["tags"])


def _outside_code(md: str) -> str:
    """Markdown with its code spans and fenced blocks removed."""
    md = re.sub(r"```.*?```", "", md, flags=re.S)
    return re.sub(r"(`+).*?\1", "", md)


def test_a_hostile_string_never_reaches_markdown_as_html():
    ref = results.load_reference(CHAPTER, "h200")
    r = copy.deepcopy(ref)
    g = r.tables["gpu"]
    g.loc[g["path"] == "mmap + pinned", "GBps"] *= 10            # the hostile path is the fastest
    g.loc[g["path"] == "mmap + pinned", "path"] = HOSTILE
    g["error"] = g["error"].astype(object)  # read back from a file holding text here, the column is text
    g.loc[g.index[-1], "error"] = HOSTILE
    md = r.metadata
    md["gds"] = dict(md["gds"], path=HOSTILE, error=HOSTILE, compat_mode=HOSTILE)
    md["device"] = dict(md["device"], disk=HOSTILE, fs_type=HOSTILE, scheduler=HOSTILE, model=None)
    md["readahead_sysfs"] = dict(md["readahead_sysfs"], note=HOSTILE, used=False)
    md["gpu_note"] = HOSTILE
    md["io_uring_status"] = dict(available=False, note=HOSTILE)
    md["diskstats_device"] = HOSTILE
    r.run_id = HOSTILE
    f = analysis.analyse(r)
    cpu = copy.deepcopy(r)
    cpu.tables = {k: v for k, v in cpu.tables.items() if k not in ("gpu", "pipeline", "uring")}
    out = [opening.markdown(page, r, None, is_reference_run=True),
           opening.markdown(page, cpu, None, is_reference_run=True)]
    for facts in (f, analysis.analyse(cpu)):
        out += [x.text for x in page.findings(facts)] + [page.takeaways(facts)]
    out += [page.readahead_note(r), page.storage_notes(r), page.no_gpu_text(cpu, r), page.uring_note(cpu, f)]
    out += [note(facts) for facts in (f, analysis.analyse(cpu)) for note in NOTES] + page.gpu_errors(r)
    for text in out:
        assert "<img" not in _outside_code(text), text
    assert "True" not in page.gds_table(r).to_string() and "None" not in page.storage_table(r).to_string()


def test_no_python_literals_in_reader_text(ref):
    f = analysis.analyse(ref)
    text = " ".join(x.text for x in page.findings(f)) + " ".join(a.text for a in page.opening(f).actions)
    for word in ("True", "False", "None", "nan", "e+0", "target"):
        assert word not in text, word
    assert not isinstance(page.gds_table(ref), type(None)) and "True" not in page.gds_table(ref).to_string()
    assert isinstance(page.storage_table(ref), pd.DataFrame)


# --------------------------------------------------------------------------- the notes follow reversed data
def _h200():
    return copy.deepcopy(results.load_reference(CHAPTER, "h200"))


def _scaled(r, table: str, where, col: str, factor: float):
    t = r.tables[table]
    t.loc[where(t), col] = t.loc[where(t), col] * factor
    return r


def test_gpu_note_follows_reversed_data():
    assert "slower than path (b)" in page.gpu_note(analysis.analyse(_h200()))
    r = _h200()
    g = r.tables["gpu"]
    a, b = g["path"] == "pageable + copy", g["path"] == analysis.PINNED
    g.loc[a, "GBps"], g.loc[b, "GBps"] = g.loc[a, "GBps"] * 3, g.loc[b, "GBps"] / 3
    note = page.gpu_note(analysis.analyse(r))
    assert "faster than path (b)" in note and note.startswith("Cold paths, fastest first: (a) pageable + copy")


def test_gds_note_follows_reversed_data():
    assert "more than path (b)" in page.gds_note(analysis.analyse(_h200()))
    r = _scaled(_h200(), "gpu", lambda t: t["path"].str.startswith("kvikio"), "cpu_s_per_GB", 0.1)
    assert "less than path (b)" in page.gds_note(analysis.analyse(r))


def test_asked_seen_note_follows_reversed_data():
    assert "outside the device's queue" in page.asked_seen_note(analysis.analyse(_h200()))
    r = _scaled(_h200(), "grid", lambda t: t["size"] == t["size"].min(), "dev_queue_depth", 1000)
    note = page.asked_seen_note(analysis.analyse(r))
    assert "more than asked" in note and "outside the device's queue" not in note
    r = _scaled(_h200(), "grid", lambda t: t["own_share"].notna(), "own_share", 0.5)
    assert "Caution" in page.asked_seen_note(analysis.analyse(r))


def test_random_note_follows_reversed_data():
    assert "slower than one pread thread" in page.random_note(analysis.analyse(_h200()))
    r = _scaled(_h200(), "random", lambda t: t["mode"].str.startswith("mmap"), "IOPS", 1000)
    assert "faster than one pread thread" in page.random_note(analysis.analyse(r))


def test_readahead_more_follows_reversed_data():
    assert "POSIX_FADV_RANDOM was 1.96× slower than no hint" in page.readahead_more(analysis.analyse(_h200()))
    r = _scaled(_h200(), "readahead", lambda t: (t["pattern"] == "sequential") & (t["fadvise"] == "RANDOM"),
                "MBps", 4)
    assert "POSIX_FADV_RANDOM was" in (n := page.readahead_more(analysis.analyse(r))) and "faster than no hint" in n


def test_latency_note_follows_reversed_data():
    assert "level with the first pass" in page.latency_note(analysis.analyse(_h200()))
    second = lambda t: t["series"] == "O_DIRECT, second pass"    # noqa: E731
    fast = page.latency_note(analysis.analyse(_scaled(_h200(), "latency", second, "p50_us", 0.2)))
    slow = page.latency_note(analysis.analyse(_scaled(_h200(), "latency", second, "p50_us", 5)))
    assert "faster than the first pass" in fast and "filled a cache below" in fast
    assert "slower than the first pass" in slow and "cache below" not in slow


def test_uring_note_follows_reversed_data():
    r = _h200()
    assert "faster than the best pread pool" in page.uring_note(r, analysis.analyse(r))
    r = _scaled(r, "random", lambda t: t["mode"] == "pread, thread pool", "IOPS", 5)
    assert "slower than the best pread pool" in page.uring_note(r, analysis.analyse(r))


def test_pipeline_note_follows_reversed_data():
    assert "more than the O_DIRECT path" in page.pipeline_note(analysis.analyse(_h200()))
    r = _scaled(_h200(), "pipeline", lambda t: t["mode"] == "O_DIRECT", "cpu_s_per_GB", 10)
    assert "less than the O_DIRECT path" in page.pipeline_note(analysis.analyse(r))


def test_drift_note_follows_reversed_data():
    r = _h200()
    r.tables["ceiling"] = r.tables["ceiling"].assign(GBps=[1.0, 2.0])
    assert "The disk drifts between runs more than path (b) does" in page.drift_note(analysis.analyse(r))
    r.tables["ceiling"] = r.tables["ceiling"].assign(GBps=[1.5, 1.5])
    assert "Path (b) varies more than the disk" in page.drift_note(analysis.analyse(r))


def test_ceilings_text_follows_reversed_data():
    assert "no measured ceiling" in page.ceilings_text(analysis.analyse(_h200()))
    r = _scaled(_h200(), "ceiling", lambda t: t["GBps"] > 0, "GBps", 3)
    r = _scaled(r, "pipeline", lambda t: t["mode"].str.startswith("dd"), "GBps", 3)
    assert "is the disk's ceiling here" in page.ceilings_text(analysis.analyse(r))


def test_a_thread_plateau_blames_the_device_only_when_nothing_went_past_it():
    """Where io_uring reached more IOPS than the pread pool's plateau, the plateau is the threads', not the
    device's; without such a result the device (or what serves it) is named."""
    ref = results.load_reference(CHAPTER, "h200")
    f = analysis.analyse(ref)
    if f.get("pool_saturates") is None or f["pool_saturates"].value != "yes" or f.get("uring_vs_pool") is None:
        pytest.skip("the reference's pool did not plateau beside an io_uring run")
    assert f["uring_vs_pool"].number > 1 and "not the device" in page._parallel(f, False).text
    r = copy.deepcopy(ref)
    r.tables.pop("uring", None)
    text = page._parallel(analysis.analyse(r), False).text
    assert "the device (or what serves it) saturates there" in text and "not the device" not in text
