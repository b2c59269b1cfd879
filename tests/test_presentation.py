"""What a reader's own book says about their run: a CPU run is worded as one, a section that did not run is
one plain labelled line (never exception text), the data directory is named the way the reader chose it,
and no table cell reads as a share above its whole."""
import re
from types import SimpleNamespace

import pandas as pd
import pytest

from datajourney.book import report
from datajourney.core import phrasing, results
from datajourney.core.facts import Facts
from datajourney.core.fingerprint import data_dir_source
from datajourney.core.paths import DATA_DIR_ENV

#: Python's own text: an exception's class, a traceback, a missing module as Python words it.
EXCEPTION_TEXT = re.compile(r"\b\w+(Error|Exception)\b|Traceback|No module named")


# ------------------------------------------------------------------ where the step ran
@pytest.mark.parametrize("device, gpu", [({"gpu": {"available": True}}, True), ({"gpu": {"available": False}}, False),
                                         ({"gpu": None}, False), ("cuda:0", True), ("cpu", False), (True, True)])
def test_device_words_follow_the_fingerprint(device, gpu):
    assert phrasing.on_gpu(device) is gpu
    for word in ("device", "step", "memory", "normalise", "ranks", "rank"):
        said = phrasing.where(word, device)
        assert ("GPU" in said) is gpu, (word, said)


def _diagnosis(on_gpu: bool):
    """Chapter 12's facts for an image step and a data-parallel step that ran on a GPU or on the CPU, DDP
    measured faster than no DDP (an impossible result) on the latter."""
    hops = [dict(workload="image", hop="gpu", chapter="07_full_picture", capacity=1286.0, on_gpu=on_gpu,
                 batch_size=32, step_ms=24.9),
            dict(workload="image", hop="cpu", chapter="07_full_picture", capacity=848.0, cores=2, cpu_ms=1.4,
                 workers_ms=0.44, main_ms=0.96),
            dict(workload="gradients", hop="gpu", chapter="11_gpu_to_gpu", capacity=34.4, on_gpu=on_gpu),
            dict(workload="gradients", hop="allreduce", chapter="11_gpu_to_gpu", capacity=None, world=2,
                 grad_bytes=4.6e5, added_ms=-1.54, allreduce_ms=2.07, busbw_GBps=0.22)]
    return SimpleNamespace(facts=Facts(chapter="12_conclusion", data={"hops": hops}))


def test_a_cpu_runs_diagnosis_speaks_of_the_cpu():
    """The hop tables of a run without a GPU name no GPU (its step, its memory, its ranks); a GPU run's do."""
    from datajourney.chapters.c12_conclusion import page

    for on_gpu in (False, True):
        res = _diagnosis(on_gpu)
        cells = " ".join(" ".join(page.hops_display(res, wl).astype(str).to_numpy().ravel())
                         for wl in ("image", "gradients"))
        assert ("GPU" in cells) is on_gpu, cells
        assert "none measurable" in cells and "measurement problem" in cells   # never "−1.54 ms" added


def test_checklist_rows_name_no_device():
    """A checklist row holds this run's value and the reference host's: its practice names no GPU where both
    kinds of run answer it (the end-to-end rows of chapter 7)."""
    from datajourney.chapters.c12_conclusion import page

    for key in ("recipe", "best_vs_ceiling"):
        assert "GPU" not in page.PRACTICE[("07_full_picture", key)]


# ------------------------------------------------------------------ what did not run
@pytest.mark.parametrize("note, want", [
    ("skipped: liburing does not import (ModuleNotFoundError: No module named 'liburing')",
     "liburing does not import (liburing is not installed)."),
    ("torchvision decode_jpeg failed: ModuleNotFoundError: No module named 'torchvision.io'",
     r"torchvision decode\_jpeg failed: torchvision is not installed."),
    ("Traceback (most recent call last):\n  File \"x.py\"\nRuntimeError: BF16 all reduce hook required CUDA 11+",
     "BF16 all reduce hook required CUDA 11+."),
    ("", "no reason was recorded."),
])
def test_a_recorded_reason_reads_as_one_plain_sentence(note, want):
    said = phrasing.reason(note)
    assert said == want
    assert not EXCEPTION_TEXT.search(said) and "\n" not in said


def test_a_skipped_section_is_one_labelled_line():
    line = phrasing.skipped("io_uring", "skipped: io_uring reads failed here (OSError: [Errno 1] refused)")
    assert line.startswith("**io\\_uring:** not measured: ") and line.endswith(".") and "\n" not in line
    assert not EXCEPTION_TEXT.search(line)


def test_chapter_pages_word_a_missing_library_without_exception_text():
    """Chapter 7's MDS half and chapter 9's io_uring reader, skipped for a missing library: one plain line, and
    chapter 9 names what to install on any machine (liburing), not an extra that pulls in CUDA packages."""
    from datajourney.chapters.c07_full_picture import page as c07
    from datajourney.chapters.c09_reading_smarter import analysis as an09
    from datajourney.chapters.c09_reading_smarter import page as c09
    from datajourney.toolkit import images

    ok, note = images.streaming_status()
    res = results.load_reference("07_full_picture", "h200")
    res.metadata = {**res.metadata, "mds_note": "mosaicml-streaming cannot be imported (ModuleNotFoundError: "
                                                "No module named 'streaming')"}
    for text in (c07.device_note(res), "" if ok else note):
        assert not EXCEPTION_TEXT.search(text), text
    ref = results.load_reference("09_reading_smarter", "h200")
    ref.metadata = {**ref.metadata, "io_uring_status": {
        "available": False, "note": "skipped: liburing does not import (ModuleNotFoundError: No module named "
                                    "'liburing')"}}
    ref.tables = {k: v for k, v in ref.tables.items() if k != "uring"}
    said = c09.uring_note(an09.analyse(ref))
    assert not EXCEPTION_TEXT.search(said) and "pip install liburing" in said and "ch9 extra" not in said


# ------------------------------------------------------------------ the data directory
@pytest.mark.parametrize("given, env, source", [(None, "/srv/dj", DATA_DIR_ENV), (None, None, "default"),
                                                 ("/mnt/nvme/dj", "/srv/dj", "data_dir")])
def test_the_data_directory_is_named_as_the_reader_chose_it(monkeypatch, given, env, source):
    """A run records what chose its data directory; the parameters table names that choice
    ($DATAJOURNEY_DATA_DIR, the default, or -p data_dir) and never prints the machine's own path."""
    if env:
        monkeypatch.setenv(DATA_DIR_ENV, env)
    else:
        monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert data_dir_source({"data_dir": given}) == source
    assert data_dir_source({"runs": 2}) is None
    res = results.start("02_random_vs_sequential", {"data_dir": given}, run_dir="/tmp/dj-present-run")
    assert res.fingerprint["storage"]["data_dir_from"] == source
    shown = report._data_dir_text(given, res.fingerprint)
    assert {"data_dir": "-p data_dir", DATA_DIR_ENV: f"${DATA_DIR_ENV}", "default": "~/.cache/datajourney"}[source] \
        in shown
    assert "/srv" not in shown and "/mnt" not in shown and str(res.fingerprint["storage"]["path"]) not in shown


def test_an_older_result_names_its_data_directory_too():
    """The reference results predate the record: the parameter unset and a directory outside ~/.cache means
    the environment variable chose it."""
    ref = results.load_reference("02_random_vs_sequential", "h200")
    assert ref.parameters["data_dir"] is None
    assert report._data_dir_text(None, ref.fingerprint).startswith(f"${DATA_DIR_ENV}")
    home = {"storage": {"path": "/home/someone/.cache/datajourney"}}
    assert report._data_dir_text(None, home).startswith("~/.cache/datajourney")


# ------------------------------------------------------------------ shares in chapter 9's tables
def _share_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if "%" in c and c != "% over runs"]


def test_chapter_9_tables_show_no_share_above_its_whole():
    """Chapter 9's path tables: a speed against dd (no ceiling: a warm path never reads the disk) is a ratio,
    never a percentage (it printed 133,484%); a share of the PCIe copy only for paths that cross the link
    (the device-to-device copy printed 3,671%); so no share column holds a value that prints above 100%."""
    from datajourney.chapters.c09_reading_smarter import page

    ref = results.load_reference("09_reading_smarter", "h200")
    gpu, sweep = page.gpu_table(ref), page.pipeline_table(ref)
    assert not gpu.empty and not sweep.empty
    for df in (gpu, sweep):
        for col in _share_columns(df):
            assert not (df[col].dropna() >= 100.5).any(), (col, df[col].tolist())
    assert gpu["speed ÷ dd's cold read (×)"].max() > 100   # the warm device copy: a ratio, shown as one
    copy = gpu[gpu["path"].str.contains(page.DEVICE_COPY)]
    assert len(copy) == 1 and copy["% of the PCIe copy"].isna().all()


def test_names_in_a_caption_or_chart_title_carry_no_markdown_escapes():
    """A table caption and a chart title are not Markdown: "small_cnn" there, never "small\\_cnn"."""
    from datajourney.chapters.c12_conclusion import page

    facts = Facts(chapter="12_conclusion", data={
        "image_workload": {"batch_size": 32, "device": "cpu", "model": "small_cnn"},
        "image_words": "a small CNN (small_cnn) training on a CPU", "hops": _diagnosis(False).facts.data["hops"]})
    assert "\\" not in page.workload_name(facts, "image", plain=True)
    assert "small\\_cnn" in page.workload_name(facts, "image")   # in a sentence it is Markdown, escaped
    title = page.hops_chart(SimpleNamespace(facts=facts), "image").layout.title.text
    assert "\\" not in title and title.startswith("A small CNN (small_cnn)")


def test_a_cpu_build_of_torch_reads_as_one():
    """The fingerprint's software row of a CPU run: no bare "None" where torch has no CUDA."""
    from datajourney.core.fingerprint import summary

    fp = results.load_reference("01_introduction", "h200").fingerprint
    fp = {**fp, "software": {**fp["software"], "cuda": None}}
    row = summary(fp)["Python / torch / CUDA"]
    assert "None" not in row and row.endswith("none (a CPU build of torch)")


def test_a_long_table_is_folded_with_its_caption_and_row_count_and_a_short_one_is_not():
    """A page's length is its text and charts: a table longer than FOLD_ROWS is folded behind its caption and row
    count, with every row still in it; a short one is shown as it is."""
    long = pd.DataFrame({"run": range(report.FOLD_ROWS + 1), "rate": [1.5] * (report.FOLD_ROWS + 1)})
    html = report.folded_html(long, "Every <run>")
    assert html.startswith("<details><summary>Every &lt;run&gt; (25 rows: open to show)</summary>")
    assert html.count("<tr>") == report.table_html(long, "Every <run>").count("<tr>") == report.FOLD_ROWS + 2
    short = long.head(report.FOLD_ROWS)
    shown = report.folded_html(short, "x")
    assert "<details>" not in shown and shown.count("<tr>") == report.FOLD_ROWS + 1


def test_a_number_the_same_in_every_row_is_said_once_in_the_caption():
    """A column that reads the same in every row ("runs" 2, "cached at start (%)" 0) is said once in the caption;
    with one run a row, the columns spanning a row's runs go too (they would repeat its value); a column that
    differs, a short table and text columns stay as they are."""
    from datajourney.book import report

    df = pd.DataFrame({"scenario": ["a", "b", "c"], "images/s": [10.0, 20.0, 30.0], "runs": [2, 2, 2],
                       "cached at start (%)": [0.0, 0.0, 0.0], "kind": ["x", "x", "x"]})
    html = report.table_html(df, "Scenarios (means over runs)")
    assert "(means over runs; 2 runs each; cached at start: 0% in every row)" in html
    assert ">runs</th>" not in html and "cached at start (%)</th>" not in html and ">kind</th>" in html
    one = pd.DataFrame({"reads": ["x", "y", "z"], "GB/s (mean)": [1.0, 2.0, 3.0], "GB/s over runs": ["1", "2", "3"],
                        "lowest run (GB/s)": [1.0, 2.0, 3.0], "runs": [1, 1, 1]})
    html = report.table_html(one, "Path (b)")
    assert "Path (b) (one run each)" in html and "over runs" not in html and "lowest run" not in html
    mixed = one.assign(runs=[1, 2, 1])
    assert "GB/s over runs</th>" in report.table_html(mixed, "Path (b)")
    two = report.table_html(df.head(2), "Two rows")   # a count still goes; two values alike may be the point
    assert ">runs</th>" not in two and "Two rows (2 runs each" in two and "cached at start (%)</th>" in two
    assert ">runs</th>" in report.table_html(df.head(1), "One row")
