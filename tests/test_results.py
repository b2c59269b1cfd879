"""Result files: tidy tables, metadata, and the environment fingerprint, round-tripped."""
import json
import math
import os
import re

import pandas as pd
import pytest

from datajourney.chapters import published
from datajourney.core import results
from datajourney.core.fingerprint import fingerprint, summary
from datajourney.core.paths import REPO_ROOT

FIELDS = {
    "gpu": ["available"], "cpu": ["model", "logical_cores", "usable_cores", "hypervisor"],
    "memory": ["total_bytes"], "storage": ["fs_type", "mount_point"],
    "container": ["cgroup_version", "memory_limit_bytes", "cpu_quota_cores", "memlock_soft_bytes", "can_drop_caches"],
    "software": ["python", "torch", "cuda", "datajourney"], "os": ["kernel"],
}


def test_fingerprint_has_every_field(tmp_path):
    fp = fingerprint(tmp_path, {"n": 1})
    for section, keys in FIELDS.items():
        for k in keys:
            assert k in fp[section], (section, k)
    assert fp["parameters"] == {"n": 1} and fp["date_utc"].endswith("Z")
    assert fp["memory"]["total_bytes"] > 0 and fp["cpu"]["logical_cores"] >= 1
    assert set(summary(fp)) >= {"GPU", "PCIe link", "CPU", "RAM", "Storage device", "File system", "Kernel"}


def test_fingerprint_summary_prints_one_commit_length_and_binary_units(tmp_path):
    """A commit recorded with 12 or 40 characters prints with 7, and the last-level cache as sysfs writes it
    ("307200K") and the readahead in the unit every chapter uses ("300 MiB", "8 MiB")."""
    from datajourney.core.fingerprint import short_commit, size_text

    fp = fingerprint(tmp_path)
    fp["host"] = {**(fp.get("host") or {}), "numa_nodes": 1, "llc": "307200K"}
    fp["software"]["git_commit"] = "86993a7" + "0" * 33
    fp["storage"] = {**fp["storage"], "scheduler": "mq-deadline", "read_ahead_kb": 8192}
    s = summary(fp)
    assert s["NUMA nodes / last-level cache"] == "1 / 300 MiB" and s["Code (git commit)"] == "86993a7"
    assert s["Scheduler / readahead"] == "mq-deadline / 8 MiB"   # as the pages print a readahead, not "8192 KiB"
    assert short_commit("86993a7b1b41") == short_commit("86993a7" + "f" * 33) == "86993a7"
    assert short_commit("unknown") == "unknown" and short_commit(None) is None
    assert size_text("32M") == "32 MiB" and size_text("512") == "512 B" and size_text(None) is None


def test_storage_info_describes_block_device_fields(tmp_path):
    s = fingerprint(tmp_path)["storage"]
    if s.get("block_device") is None:
        pytest.skip(f"{tmp_path} is not on a block device ({s.get('fs_type')})")
    assert s["scheduler"] and s["read_ahead_kb"] is not None


def test_round_trip_with_nan(tmp_path):
    res = results.start("99_test", {"x": 1}, tmp_path)
    res.add("t", pd.DataFrame({"a": [1.0, float("nan")], "b": ["p", "q"]}))
    res.metadata["inf"] = float("inf")
    path = res.save(tmp_path)
    raw = json.loads(path.read_text())  # strict JSON: NaN and inf became null
    assert raw["schema"] == results.SCHEMA and raw["tables"]["t"][1]["a"] is None and raw["metadata"]["inf"] is None
    back = results.Result.load(path)
    assert back.run_id == tmp_path.name and back.fingerprint["cpu"] == res.fingerprint["cpu"]
    assert math.isnan(back.table("t")["a"][1]) and list(back.table("t")["b"]) == ["p", "q"]
    with pytest.raises(KeyError, match="no table 'u'"):
        back.table("u")


def test_a_column_of_missing_numbers_reads_back_as_numbers(tmp_path):
    """A measure a host could not take (GPU utilisation on a CPU run) is NaN in every row, saved as null:
    read back, it is still a numeric column (a page's numeric selections keep it), as in the run."""
    res = results.start("99_test", {}, tmp_path)
    res.add("t", pd.DataFrame({"gpu_util": [float("nan")] * 2, "rate": [1.0, 2.0], "note": [None, "x"]}))
    back = results.Result.load(res.save(tmp_path)).table("t")
    assert list(back.select_dtypes("number").columns) == ["gpu_util", "rate"]
    assert back["gpu_util"].isna().all() and back["note"].isna().tolist() == [True, False]


def test_a_file_read_again_is_its_current_bytes_and_each_load_is_the_callers_own(tmp_path):
    """Loads of an unchanged file share one parse (pages read the same references many times), yet a load is
    the caller's to change, and a file edited in place (same size, same modification time) reads as it is now."""
    res = results.start("99_test", {"x": 1}, tmp_path)
    res.add("t", pd.DataFrame({"a": [1.0, 2.0]}))
    path = res.save(tmp_path)
    first = results.Result.load(path)
    first.table("t").loc[0, "a"] = 99.0
    first.metadata["added"] = True
    first.parameters["x"] = 7
    second = results.Result.load(path)
    assert second.table("t")["a"].tolist() == [1.0, 2.0] and "added" not in second.metadata
    assert second.parameters == {"x": 1}
    stat = path.stat()
    path.write_text(path.read_text().replace('"a": 2.0', '"a": 3.0'))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert results.Result.load(path).table("t")["a"].tolist() == [1.0, 3.0]


def test_load_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text('{"schema": "other"}')
    with pytest.raises(results.ResultError, match="not a datajourney.result/3 file.*'other'"):
        results.Result.load(tmp_path / "x.json")


def test_committed_reference_results_carry_fingerprints():
    hosts = results.reference_hosts()
    assert results.DEFAULT_REFERENCE_HOST in hosts
    for host in hosts:
        for f in (results.REFERENCE_DIR / host).glob("0*.json"):
            r = results.Result.load(f)
            assert r.fingerprint["cpu"]["model"] and r.fingerprint["storage"]["fs_type"], f
            assert r.fingerprint["software"]["git_commit"], f


def test_three_columns_table():
    this = {"random read, cold": (10.0, 1.0), "sequential read, cold": (100.0, 2.0),
            "sequential ÷ random, cold": (10.0, None)}
    df = published.three_columns("02_random_vs_sequential", this, None)
    assert list(df["published (S1)"]) == ["70.39 ± 3.12 MB/s", "1,421.85 ± 13.47 MB/s", "20.2×"]
    assert list(df["this run"]) == ["10 ± 1 MB/s", "100 ± 2 MB/s", "10.0×"]
    assert (df["reference run"] == "not committed yet").all()
    ref = published.three_columns("02_random_vs_sequential", this, None, this_is_reference=True)
    assert "this run" not in ref.columns  # the committed book never repeats the reference column


def test_published_figures_are_quoted_exactly():
    """Every published figure (value and std) appears verbatim in its source document."""
    sources = {"S1": "000_48310452fe021a32.txt", "S2": "001_8e7b62aa73f37afa.txt", "S3": "003_b7d462fde50cc154.txt",
               "S4": "004_01937026ad74bacc.txt", "S5": "002_60da5f7a42a33467.txt"}
    shared = REPO_ROOT.parent / "shared" / "sources"
    if not shared.is_dir():
        pytest.skip("the source documents of the published figures are not part of the book: this check runs "
                    "where the team keeps them")
    for chapter, figs in published.PUBLISHED.items():
        for f in figs:
            text = (shared / sources[f.source]).read_text()
            for token in filter(None, (f.value, f.std)):
                assert re.search(rf"(?<![\d.]){re.escape(token)}(?![\d])", text), (chapter, f.metric, token)
            assert f.setting, (chapter, f.metric)


def _finished_run(tmp_path, run_id: str):
    import nbformat

    run = tmp_path / run_id
    (run / "notebooks").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), run / "notebooks" / "07_full_picture.ipynb")
    res = results.Result(chapter="07_full_picture", run_id=run_id, parameters={"steps": 5}, fingerprint={})
    res.add("t", pd.DataFrame({"a": [1.0]}))
    res.save(run)
    (run / "run.json").write_text(json.dumps({"status": "ok", "run_id": run_id, "chapters": []}))
    return run


@pytest.mark.parametrize("option, folder, loader", [("--repeat", "repeats", results.repeat_references),
                                                    ("--extra", "more", results.extra_references)])
def test_repeats_and_extra_references_are_promoted_beside_the_main_one(tmp_path, monkeypatch, option, folder,
                                                                       loader):
    from datajourney.cli import main

    _reference_in(tmp_path, monkeypatch)
    for run_id in ("run-b", "run-a"):
        assert main(["promote", str(_finished_run(tmp_path, run_id)), "--host", "h200", option]) == 0
    host = tmp_path / "ref" / "h200"
    assert [r.run_id for r in loader("07_full_picture", "h200")] == ["run-a", "run-b"]  # oldest run id first
    assert (host / folder / "run-run-a.json").exists() and (host / folder / "07_full_picture-run-b.json").exists()
    # the main reference, the other folder and the notebooks are left alone
    assert not (host / "07_full_picture.json").exists() and not (tmp_path / "notebooks").exists()
    other = results.extra_references if loader is results.repeat_references else results.repeat_references
    assert other("07_full_picture", "h200") == [] and loader("06_pcie", "h200") == []


def test_promote_takes_one_of_repeat_and_extra(tmp_path, capsys):
    from datajourney.cli import main

    with pytest.raises(SystemExit):
        main(["promote", str(tmp_path), "--host", "h200", "--repeat", "--extra"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_committed_repeats_load():
    got = results.repeat_references("07_full_picture", "h200")
    assert got and all(r.chapter == "07_full_picture" and r.run_id != results.load_reference(r.chapter).run_id
                       for r in got)


def test_promote_only_the_finished_chapters_of_a_run_that_ended_early(tmp_path, monkeypatch, capsys):
    from datajourney.cli import main

    run = _finished_run(tmp_path, "run-x")
    (run / "run.json").write_text(json.dumps({"status": "failed", "run_id": "run-x", "chapters": [
        {"chapter": "07_full_picture", "status": "ok", "parameters": {"steps": 5}},
        {"chapter": "08_threads_processes_gil", "status": "failed", "parameters": {}}]}))
    (run / "08_threads_processes_gil.json").write_text("{}")  # a half-written result of the failed chapter
    import nbformat

    for name in ("07_full_picture", "08_threads_processes_gil"):
        nbformat.write(nbformat.v4.new_notebook(), run / "notebooks" / f"{name}.ipynb")
    _reference_in(tmp_path, monkeypatch)
    (tmp_path / "notebooks").mkdir()
    assert main(["promote", str(run), "--host", "h200"]) == 2
    assert "run_dir" in capsys.readouterr().err
    assert main(["promote", str(run), "--host", "h200", "--only", "7", "8"]) == 2
    assert "only" in capsys.readouterr().err
    assert not (tmp_path / "ref").exists()  # nothing copied before the check
    assert main(["promote", str(run), "--host", "h200", "--only", "7"]) == 0
    host = tmp_path / "ref" / "h200"
    assert sorted(p.name for p in host.iterdir()) == ["07_full_picture.json", "run-run-x.json"]
    assert [p.name for p in (tmp_path / "notebooks").iterdir()] == ["07_full_picture.ipynb"]


def test_another_hosts_run_never_replaces_the_books_pages(tmp_path, monkeypatch):
    """The book shows the default reference host's executed notebooks: a run promoted as another host's reference
    brings its results and run record, and leaves ``notebooks/`` as it was."""
    from datajourney.cli import main

    run = _finished_run(tmp_path, "run-h")
    _reference_in(tmp_path, monkeypatch)
    (tmp_path / "notebooks").mkdir()
    assert main(["promote", str(run), "--host", "h100"]) == 0
    assert sorted(p.name for p in (tmp_path / "ref" / "h100").iterdir()) == ["07_full_picture.json", "run-run-h.json"]
    assert list((tmp_path / "notebooks").iterdir()) == []
    assert main(["promote", str(run), "--host", results.DEFAULT_REFERENCE_HOST]) == 0
    assert [p.name for p in (tmp_path / "notebooks").iterdir()] == ["07_full_picture.ipynb"]


def test_parameters_show_no_machine_local_path():
    from datajourney.book import report

    assert report._param_text("/home/someone/runs/x") == "a directory on the machine that ran it"
    assert report._param_text("auto") == "auto"
    assert report._param_text(1 << 20, "bytes") == "1 MiB" and report._param_text(1 << 20) == "1,048,576"


def test_parameters_show_no_raw_python_values():
    """None and True are Python's words, not a reader's; a separator inside a list reads as more items."""
    from datajourney.book import report

    assert report._param_text(None) == "not set"
    assert report._param_text(True) == "yes" and report._param_text(False) == "no"
    assert report._param_text([0, 1281167]) == "[0, 1281167]" and report._param_text([16, 64, 1024]) == "[16, 64, 1024]"
    assert report._param_text([4096, 1 << 20], "bytes") == "[4 KiB, 1 MiB]"
    assert report._param_text([True, None]) == "[yes, not set]"


def test_parameters_table_says_what_each_parameter_sets(monkeypatch):
    """Each row of a chapter's parameters table carries the help its declaration gives (one source)."""
    from datajourney.book import registry, report

    shown = []
    monkeypatch.setattr(report, "display", lambda obj: shown.append(obj.data))
    res = results.load_reference("09_reading_smarter", "h200")
    report.parameters(res)
    help_ = registry.lookup("09_reading_smarter").params.specs()["file_size"].help
    assert "what it sets" in shown[0] and help_.split(" (")[0] in shown[0]


def test_promoted_notebooks_name_no_directory_of_the_run_host(tmp_path, monkeypatch):
    import nbformat

    from datajourney.book.runner import HOST_PATH
    from datajourney.cli import main

    run = _finished_run(tmp_path, "run-p")
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell('run_dir = "/srv/x/run-p"\nsteps = 5\nreplay = None',
                                              metadata={"tags": ["injected-parameters"]}))
    nb.metadata["papermill"] = {"parameters": {"run_dir": "/srv/x/run-p", "steps": 5}, "input_path": "/srv/in.ipynb"}
    nbformat.write(nb, run / "notebooks" / "07_full_picture.ipynb")
    _reference_in(tmp_path, monkeypatch)
    (tmp_path / "notebooks").mkdir()
    assert main(["promote", str(run), "--host", "h200"]) == 0
    out = nbformat.read(tmp_path / "notebooks" / "07_full_picture.ipynb", as_version=4)
    assert "/srv" not in nbformat.writes(out)
    assert out.metadata["papermill"]["parameters"] == {"run_dir": HOST_PATH, "steps": 5}
    # the injected values are kept in the metadata, not in a cell that would reset a reader's edits
    assert out.metadata["datajourney"]["run_parameters"] == {"run_dir": HOST_PATH, "steps": 5}
    assert out.cells == []


def _reference_in(tmp_path, monkeypatch):
    """Promotions of this test go to ``tmp_path/ref`` (results) and ``tmp_path/notebooks``."""
    from datajourney.book import registry

    monkeypatch.setattr(results, "REFERENCE_DIR", tmp_path / "ref")
    monkeypatch.setattr(registry, "NOTEBOOK_DIR", tmp_path / "notebooks")
