"""Every chapter notebook executes under the ci profile and writes a result with its fingerprint."""
import json

import nbformat
import pytest

from datajourney.book import registry as chapters
from datajourney.core.results import Result

pytestmark = pytest.mark.notebooks


def test_run_record(ci_run):
    record = json.loads((ci_run / "run.json").read_text())
    assert record["status"] == "ok" and record["profile"] == "ci"
    assert [c["chapter"] for c in record["chapters"]] == [c.name for c in chapters.available()]
    for c in record["chapters"]:
        print(f"{c['chapter']}: {c['seconds']:.1f} s under the ci profile")


@pytest.mark.parametrize("chapter", [c.name for c in chapters.available()])
def test_chapter_executed_cleanly(ci_run, chapter):
    nb = nbformat.read(ci_run / "notebooks" / f"{chapter}.ipynb", as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    # no progress bars or library warnings kept in the executed notebook
    assert not [o for o in outputs if o.output_type == "stream" and o.get("name") == "stderr"]
    # every chapter opens with its computed opening, and folds its key results under it
    if chapter != "01_introduction":
        md = [d.get("text/markdown", "") for o in outputs for d in [o.get("data", {})]]
        assert any(m.startswith(("**On this machine", "**On the reference host")) for m in md), "no opening"
        assert any("How we know" in m for m in md), "no key results block"
    # the injected parameters are kept in the metadata, not in a cell that would reset a reader's edits
    assert not [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert nb.metadata["datajourney"]["run_parameters"]["run_dir"] == str(ci_run)
    res = Result.load(ci_run / f"{chapter}.json")
    assert res.run_id == "ci" and res.fingerprint["software"]["python"]
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    if chapter != "01_introduction":
        assert figures, "chapter shows no chart"
    for f in figures:
        assert "text/html" in f["data"] and "Plotly.newPlot" in f["data"]["text/html"]


def test_ci_parameters_were_used(ci_run):
    r2 = Result.load(ci_run / "02_random_vs_sequential.json")
    assert r2.parameters["n_files"] == 200 and r2.parameters["chunk_sweep"] == [4096, 65536, 1048576]
    h = r2.table("headline")
    assert h[h["cache"] == "cold"]["resident_at_start"].max() <= 0.05
    r3 = Result.load(ci_run / "03_dataloader.json")
    assert sorted(set(r3.table("epochs")["workers"])) == [0, 4]
