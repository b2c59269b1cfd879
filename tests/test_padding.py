"""Chapter 5: layouts never split or drop a sample, packing with the right mask is exact,
and bad input is named."""
import numpy as np
import pytest
import torch

from datajourney import padding, textdata
from datajourney.book.params import ParameterError

OFFLINE = pytest.mark.skipif(textdata.offline_dir() is None, reason="no offline copy of Alpaca/GPT-2 (../shared/data)")


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("strategy", padding.STRATEGIES)
def test_layouts_keep_every_sample_whole(strategy, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 300, size=int(rng.integers(1, 400))).tolist()
    context = int(rng.integers(max(lengths), 1200))
    lay = padding.BUILDERS[strategy](lengths, int(rng.integers(1, 40)), context)
    padding.validate(lay, lengths)
    ev = padding.evaluate(lay, lengths, 8)
    assert ev["real_tokens"] == sum(lengths) and 0 < ev["efficiency"] <= 1
    occ = np.concatenate([(padding.occupancy(lay, lengths, b) >= 0).ravel() for b in range(len(lay.batches))])
    assert occ.sum() == sum(lengths) and occ.size == lay.positions  # efficiency is exact


def test_validate_catches_a_dropped_sample():
    lay = padding.greedy_pack([3, 3, 3], 2, 6)
    lay.batches[0][0].pop()
    with pytest.raises(AssertionError, match="dropped"):
        padding.validate(lay, [3, 3, 3])


def test_packing_beats_padding_on_short_samples():
    lengths = [10] * 64
    naive = padding.evaluate(padding.pad_to_context(lengths, 8, 100), lengths, 8)
    packed = padding.evaluate(padding.best_fit_decreasing(lengths, 8, 100), lengths, 8)
    assert naive["efficiency"] == 0.1 and packed["rows"] == 7 and packed["efficiency"] == 640 / 700


def test_block_causal_mask():
    doc = torch.tensor([[0, 0, 1, 1, 1, -1]])
    m = padding.block_causal_mask(doc)[0, 0]
    assert m[1, 0] and not m[0, 1]  # causal inside document 0
    assert not m[2, 1] and m[4, 2]  # document 1 does not see document 0
    assert m[5, 5] and not m[5, 4]  # padding sees only itself


def test_packed_with_mask_equals_documents_alone():
    c = padding.contamination_check(seed=1, lengths=(7, 3, 12), row_len=30)
    assert c["with_mask"] < 1e-4
    assert c["without_mask"] > 1e-2  # cross-contamination without the mask


def test_position_ids_restart_per_document():
    ids, pos, doc = padding.packed_inputs([[0, 1]], [[5, 6, 7], [8, 9]], 7, pad_id=0)
    assert pos.tolist() == [[0, 1, 2, 0, 1, 0, 0]] and doc.tolist() == [[0, 0, 0, 1, 1, -1, -1]]
    assert ids.tolist() == [[5, 6, 7, 8, 9, 0, 0]]


def test_training_step_timing_on_cpu():
    torch.manual_seed(0)
    tokens = [list(range(1, n + 1)) for n in (20, 35, 12, 40, 8, 30)]
    lengths = [len(t) for t in tokens]
    model = padding.TinyCausalLM(vocab=100, d_model=32, n_layers=1, n_heads=2, max_len=128)
    r = padding.time_training_steps(model, padding.greedy_pack(lengths, 2, 64), tokens, pad_id=0, steps=2,
                                    warmup=1, device="cpu")
    assert r["timed_steps"] >= 1 and r["ms_per_step"] > 0 and r["real_tokens_per_s"] > 0


P = dict(n_samples=50, context_length=4096, batch_size=8, dataset="tatsu-lab/alpaca", dataset_path=None,
         tokenizer="gpt2", tokenizer_dir=None, template="plain", add_eos=True, strategies=["greedy_pack"],
         bucket_batches=2, heatmap_bins=16, gpu_steps=1, d_model=32, n_layers=1, n_heads=2)


@pytest.mark.parametrize("name,value", [("context_length", 0), ("batch_size", 0), ("n_samples", -1),
                                        ("strategies", ["random"]), ("n_heads", 3)])
def test_bad_parameters_are_named(name, value):
    with pytest.raises(ParameterError, match=repr(name)):
        padding.check_parameters({**P, name: value})


@OFFLINE
def test_context_shorter_than_a_sample_is_named():
    with pytest.raises(ParameterError, match="'context_length'.*longest sample"):
        padding.preflight({**P, "context_length": 16})


def test_unknown_dataset_without_network(monkeypatch):
    monkeypatch.setattr(textdata, "offline_dir", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ParameterError, match="'dataset'.*dataset_path"):
        textdata.load_records(10, "someone/unknown-set")


def test_tokenizer_dir_without_vocabulary(tmp_path):
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(ParameterError, match="'tokenizer_dir'.*vocab.json"):
        textdata.load_tokenizer(tokenizer_dir=tmp_path)


def test_missing_dataset_file_is_named(tmp_path):
    with pytest.raises(ParameterError, match="'dataset_path'"):
        textdata.load_records(10, dataset_path=tmp_path / "nope.json")


@OFFLINE
def test_offline_data_is_the_real_thing():
    records, origin = textdata.load_records(2000)
    assert records[0]["instruction"] == "Give three tips for staying healthy."
    assert records[1999]["instruction"] == "Identify a way to reduce greenhouse gas emissions."
    tok, _ = textdata.load_tokenizer()
    assert tok.encode("Hello world").ids == [15496, 995] and textdata.eos_id(tok) == 50256


def test_templates():
    r = {"instruction": "Do X.", "input": "", "output": "Done."}
    assert textdata.join(r) == "Do X.\n\nDone."
    assert textdata.join({**r, "input": "ctx"}) == "Do X.\n\nctx\n\nDone."
    assert textdata.join(r, "alpaca").startswith("Below is an instruction that describes a task. Write")
    with pytest.raises(ParameterError, match="'template'"):
        textdata.texts_and_source(1, template="{nonsense}")


@OFFLINE
def test_run_writes_every_table(tmp_path):
    res = padding.run(**{**P, "strategies": list(padding.STRATEGIES), "n_samples": 40}, run_dir=tmp_path,
                      progress=False)
    assert {"lengths", "length_stats", "strategies", "templates", "contamination"} <= set(res.tables)
    assert ("gpu" in res.tables) == torch.cuda.is_available()
    assert list(res.table("length_stats")["samples"]) == [8, 40]
    assert res.metadata["heatmap_greedy_pack"]["exact_efficiency"] > 0
    assert (tmp_path / "05_padding_tax.json").exists()
