"""Where chapters 4 and 5 find their text: explicit parameter, $DATAJOURNEY_TEXT_DATA, the checkout's
data/text/, the hub, in that order; the copy in the checkout is the real, licensed data."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from datajourney.core.params import ParameterError
from datajourney.core.paths import REPO_ROOT
from datajourney.toolkit import textdata

TEXT = REPO_ROOT / "data" / "text"


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to reach the hub fails the test: every case here must resolve locally."""
    monkeypatch.delenv(textdata.TEXT_DATA_ENV, raising=False)

    def refuse(*a, **k):
        raise AssertionError("the hub was consulted")

    monkeypatch.setattr(textdata, "hub_reachable", refuse)


def _copy(dest, n_records=None):
    """A text-data directory laid out like data/text/, optionally with fewer records."""
    (dest / "gpt2").mkdir(parents=True)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(TEXT / "gpt2" / f, dest / "gpt2" / f)
    records = json.loads((TEXT / textdata.OFFLINE_JSON).read_text())
    (dest / textdata.OFFLINE_JSON).write_text(json.dumps(records[:n_records]))
    return dest


def test_the_checkout_carries_the_text_data_with_licences():
    sha = {textdata.OFFLINE_JSON: "f689d77b804d0cbfaaf44fdd2a42c2b6dcb0613b1fd4550e2ff6a615ea078bad",
           "gpt2/vocab.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
           "gpt2/merges.txt": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"}
    for name, digest in sha.items():
        assert hashlib.sha256((TEXT / name).read_bytes()).hexdigest() == digest, name
    readme = (TEXT / "README.md").read_text()
    assert "CC BY-NC 4.0" in readme and "Modified MIT License" in readme
    assert "Attribution-NonCommercial 4.0" in (TEXT / "LICENSE-alpaca-data.txt").read_text()
    assert "OpenAI" in (TEXT / "gpt2" / "LICENSE").read_text()


def test_without_the_variable_the_checkout_copy_is_used_offline(no_hub):
    assert textdata.offline_dir() == TEXT
    records, origin = textdata.load_records(2000)
    assert len(records) == 2000 and records[0]["instruction"] == "Give three tips for staying healthy."
    assert origin == f"offline copy {textdata.OFFLINE_JSON}"
    tok, t_origin = textdata.load_tokenizer()
    assert tok.encode("Hello world").ids == [15496, 995] and t_origin == "offline copy gpt2/"


def test_the_variable_comes_before_the_checkout(no_hub, monkeypatch, tmp_path):
    d = _copy(tmp_path / "mine", n_records=30)
    monkeypatch.setenv(textdata.TEXT_DATA_ENV, str(d))
    assert textdata.offline_dir() == d
    with pytest.raises(ParameterError, match="'n_samples'.*at most 30"):  # its 30 records, not the checkout's
        textdata.load_records(31)


def test_explicit_files_come_before_the_variable(no_hub, monkeypatch, tmp_path):
    monkeypatch.setenv(textdata.TEXT_DATA_ENV, str(_copy(tmp_path / "env")))
    f = tmp_path / "own.json"
    f.write_text(json.dumps([{"instruction": "Say hi.", "input": "", "output": "Hi."}] * 3))
    records, origin = textdata.load_records(3, dataset_path=f)
    assert origin == "file own.json" and records[0]["output"] == "Hi."


def test_a_variable_naming_an_incomplete_directory_is_an_error(monkeypatch, tmp_path):
    (tmp_path / textdata.OFFLINE_JSON).write_text("[]")
    monkeypatch.setenv(textdata.TEXT_DATA_ENV, str(tmp_path))
    with pytest.raises(ParameterError, match="'DATAJOURNEY_TEXT_DATA'.*missing: gpt2/vocab.json, gpt2/merges.txt"):
        textdata.load_records(10)


def test_without_any_copy_the_hub_is_next(monkeypatch, tmp_path):
    monkeypatch.delenv(textdata.TEXT_DATA_ENV, raising=False)
    monkeypatch.setattr(textdata, "CHECKOUT_TEXT_DIR", tmp_path / "absent")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert textdata.offline_dir() is None
    with pytest.raises(ParameterError, match="'dataset'.*DATAJOURNEY_TEXT_DATA"):
        textdata.load_records(10)


def test_no_lookup_outside_the_checkout():
    """The text is found in the checkout or where the reader points, never beside the checkout."""
    source = (REPO_ROOT / "datajourney" / "toolkit" / "textdata.py").read_text()
    assert "REPO_ROOT.parent" not in source and "../shared" not in source
