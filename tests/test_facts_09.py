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
    assert a is not None and a.gain == "to_gpu_vs_plain" and a.needs == "gpu"
    assert set(analysis.EXPORTS) - {"gds"} <= set(f.facts) | set(f.data)     # gds: only where kvikio loaded
    json.dumps(f.to_dict())                               # plain JSON, as result files store it


def test_the_headline_names_the_best_path_and_the_advice_its_setting():
    """The h200 reference timed path (b) at a fixed 4 MiB × 2 while its sweep found 64 MiB × 4 faster: the
    headline and the advice name the sweep's setting, not the slower one."""
    ref = results.load_reference(CHAPTER, "h200")
    f = analysis.analyse(ref)
    assert "64 MiB × 4" in f["to_gpu"].label
    op = page.opening(f)
    assert "64 MiB × 4" in op.findings[0].text and "64 MiB × 4" in op.actions[0].text
    assert "no special path" not in " ".join(a.text for a in op.actions)
    assert "1.41× faster than (a) pageable + copy" in op.actions[0].text


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
    assert "slower than the disk alone" in page.finding(up, "to_gpu")[0].text
    assert "faster than the disk alone" in page.finding(down, "to_gpu")[0].text
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
    assert src.startswith(parameters_cell(Params) + "\n")
    rest = [line.split("=")[0].strip() for line in src[len(parameters_cell(Params)) + 1:].splitlines()]
    assert rest == list(BOOK_OPTIONS)                 # the book's options, which Params does not hold
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
    out += [page.readahead_note(r), page.storage_notes(r), page.no_gpu_text(cpu, r), page.uring_note(cpu),
            page.gds_note(r), page.gpu_note(r), page.ceilings_text(r), page.pipeline_note(r)] + page.gpu_errors(r)
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
