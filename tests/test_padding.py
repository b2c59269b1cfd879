"""Chapter 5: layouts never split or drop a sample, the published figures are reproduced from the
first batch, packing with the right inputs is exact (project packers and transformers' collator
agree), the cost counts every batch at its own cost, findings follow the data, bad input is named."""
import numpy as np
import pandas as pd
import pytest
import torch
from helpers import has_nan

from datajourney.book import harness
from datajourney.chapters import published
from datajourney.chapters.c05_padding_tax import analysis, page
from datajourney.chapters.c05_padding_tax import charts as c05_charts
from datajourney.chapters.c05_padding_tax import experiment as padding
from datajourney.chapters.c05_padding_tax.params import PUBLISHED_SETTING
from datajourney.core.params import ParameterError
from datajourney.core.results import Result
from datajourney.toolkit import textdata

OFFLINE = pytest.mark.skipif(textdata.offline_dir() is None, reason="no local copy of Alpaca/GPT-2 (data/text/)")


# ------------------------------------------------------------------------------------------ layouts
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
    fb = padding.first_batch(lay, lengths)
    assert fb["efficiency"] == pytest.approx((padding.occupancy(lay, lengths, 0) >= 0).mean())
    # the heatmap's fractions, computed without the rows × row_len matrix, equal the matrix's
    bins = int(rng.integers(1, 300))
    frac, width = padding.fill_fractions(lay, lengths, bins)
    ref, ref_width = padding.downsample(padding.occupancy(lay, lengths, 0), bins)
    assert width == ref_width and np.allclose(frac, ref)


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


def test_first_batch_of_packing_is_the_sources_grid():
    """The source fills BATCH_SIZE rows greedily from the whole sample stream: batch 0 of greedy_pack."""
    lengths = [5, 7, 3, 9, 2, 8, 6, 4, 9, 1]
    fb = padding.first_batch(padding.greedy_pack(lengths, 2, 12), lengths)
    # rows: [5, 7] [3, 9] -> 24 real of 2 × 12
    assert (fb["rows"], fb["samples"], fb["real_tokens"], fb["last_sample"]) == (2, 4, 24, 3)
    assert fb["efficiency"] == 1.0


def test_eos_goes_where_the_mode_says():
    assert padding.uses_eos("greedy_pack", "packed_only") and not padding.uses_eos("pad_to_context", "packed_only")
    assert padding.uses_eos("pad_to_longest", "always") and not padding.uses_eos("greedy_pack", "never")
    assert padding.layout_tokens([[1, 2]], "greedy_pack", "packed_only") == [[1, 2, padding.EOS_ID]]


# ------------------------------------------------------------------------------------------ reproduction
@OFFLINE
def test_published_figures_reproduced_exactly_from_the_first_batch():
    records, _ = textdata.load_records(2000)
    tok, _ = textdata.load_tokenizer()
    lengths = [len(t) for t in padding.tokenize([textdata.join(r, "spaces") for r in records], tok)]
    e = padding.efficiencies(lengths, eos="packed_only", batch_size=32, context=4096)
    assert f"{100 * e['first_batch_pad_to_context']:.1f}" == "2.3"
    assert f"{100 * e['first_batch_greedy_pack']:.1f}" == "98.5"
    assert f"{e['first_batch_ratio']:.1f}" == "42.4"
    assert (e["first_batch_min"], e["first_batch_max"], round(e["first_batch_mean"]), e["first_batch_median"]) == (
        13, 307, 95, 83)
    assert len(padding.published_matches(e)) == len(padding.PUBLISHED_COLUMNS) == 7
    # ... and not from all samples: the population matters
    assert f"{100 * e['all_pad_to_context']:.1f}" != "2.3" and f"{e['all_ratio']:.1f}" != "42.4"


@OFFLINE
def test_run_reproduces_and_labels_populations(tmp_path):
    res = harness.run("05_padding_tax",
                      **{**P, "n_samples": 2000, "batch_size": 32, "strategies": list(padding.STRATEGIES),
                         "device": "none"}, run_dir=tmp_path, progress=False)
    assert res.facts["published_reproduced"].value == 3
    assert set(res.table("first_batch")["population"]) == {"first batch"}
    assert set(res.table("strategies")["population"]) == {"all samples"}
    assert list(res.table("length_stats")["population"]) == ["first batch", "all samples"]
    t = res.table("templates")
    best = t[t["published_matched"] == t["published_of"]]
    assert list(zip(best["template"], best["eos"])) == [("spaces", "packed_only")]
    items = page.findings(res.facts)
    assert 3 <= len(items) <= 6 and len({f.key for f in items}) == len(items)
    ratio = next(f for f in items if f.key == "first_batch_ratio")
    assert "**42.4× that of" in ratio.text and "reproduced as printed" in ratio.text
    note = page.template_note(analysis.analyse(res))
    assert "Of the 9 combinations" in note and "only `spaces`" in note
    tab = page.length_table(res)
    assert list(tab.iloc[:, 1]) == [published.figure("05_padding_tax", m).text for m in (
        "first batch: shortest sample", "first batch: longest sample", "first batch: mean length",
        "first batch: median length")]
    assert list(tab.iloc[:, 2]) == ["13", "307", "95", "83"]


# ------------------------------------------------------------------------------------------ packing done right
def test_block_causal_mask():
    doc = torch.tensor([[0, 0, 1, 1, 1, -1]])
    m = padding.block_causal_mask(doc)[0, 0]
    assert m[1, 0] and not m[0, 1]  # causal inside document 0
    assert not m[2, 1] and m[4, 2]  # document 1 does not see document 0
    assert m[5, 5] and not m[5, 4]  # padding sees only itself


def test_position_ids_restart_per_document():
    ids, pos, doc = padding.packed_inputs([[0, 1]], [[5, 6, 7], [8, 9]], 7, pad_id=0)
    assert pos.tolist() == [[0, 1, 2, 0, 1, 0, 0]] and doc.tolist() == [[0, 0, 0, 1, 1, -1, -1]]
    assert ids.tolist() == [[5, 6, 7, 8, 9, 0, 0]]
    assert padding.next_token_labels(ids, doc).tolist() == [[-100, 6, 7, -100, 9, -100, -100]]


def test_collator_builds_the_same_rows_as_the_project():
    c = padding.collate_packed([[0, 1], [2]], [[5, 6, 7], [8, 9], [4]], 7, pad_id=0)
    assert c["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0, 0], [4, 0, 0, 0, 0, 0, 0]]
    assert c["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1], [0, 0, 1, 2, 3, 4, 5]]  # padding: its own run
    assert c["labels"].tolist() == [[-100, 6, 7, -100, 9, -100, -100], [-100] * 7]
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, 50000, size=int(rng.integers(1, 40))).tolist() for _ in range(120)]
    lengths = [len(t) for t in tokens]
    for s in padding.PACKED:
        lay = padding.BUILDERS[s](lengths, 4, 64)
        for b in range(len(lay.batches)):
            r = padding.compare_with_collator(lay, tokens, batch=b)
            assert r["input_ids_equal"] and r["position_ids_equal"] and r["labels_equal"], (s, b)
            assert r["real_tokens"] == sum(lengths[i] for row in lay.batches[b] for i in row)


def test_collator_comparison_sees_a_difference(monkeypatch):
    real = padding.packed_inputs

    def shifted(rows, tokens, row_len, pad_id):  # positions that run on across documents: the classic bug
        ids, pos, doc = real(rows, tokens, row_len, pad_id)
        return ids, torch.arange(row_len).expand_as(pos).clone(), doc

    monkeypatch.setattr(padding, "packed_inputs", shifted)
    r = padding.compare_with_collator(padding.greedy_pack([3, 4, 2], 2, 10), [[1] * 3, [2] * 4, [3] * 2])
    assert r["input_ids_equal"] and not r["position_ids_equal"]


def test_isolation_check():
    df = padding.isolation_check(seed=1)
    by = {(r.code, r.inputs): r for r in df.itertuples()}
    proj = [r for (code, _), r in by.items() if code == "project"]
    assert proj[0].isolated and proj[0].max_abs_diff < 1e-4          # block mask + position ids: exact
    assert not proj[1].isolated and proj[1].max_abs_diff > 1e-2      # plain causal: contamination
    hf = df[df["code"] == "transformers"]
    assert not hf.iloc[-1]["isolated"]                                # no position ids: one long text
    import transformers
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    if (major, minor) >= (4, 56):  # masks derived from packed position ids (sdpa/eager)
        assert hf.iloc[0]["isolated"]


# ------------------------------------------------------------------------------------------ cost
def _fake_step(layout, calls):
    def step(b):
        calls.append(b)
        rows, n = layout.shape(b)
        return rows * n / 100 + 0.5   # deterministic: proportional to positions, plus a launch cost
    return step


def test_all_batches_estimate_is_the_sum_of_the_step_times():
    lengths = [30] * 70   # 70 samples, batch 32: two full batches and one of 6 rows
    lay = padding.pad_to_context(lengths, 32, 64)
    calls = []
    st = padding.time_layout(lay, _fake_step(lay, calls), mode="all_batches", repeats=1, warmup=2)
    assert len(st) == 3 and sorted(st["batch"]) == [0, 1, 2]
    total, shapes = padding.cost_of_layout(st, lay, mode="all_batches", real_tokens=sum(lengths))
    assert total["seconds"] * 1e3 == pytest.approx(st["ms"].sum())
    assert total["real_tokens"] == sum(lengths) == 2100
    assert total["real_tokens_per_s"] == pytest.approx(2100 / total["seconds"])
    assert len(calls) == 2 * 2 + 3   # warm-up per shape (32 × 64 and 6 × 64), then every batch once
    assert sorted(shapes["batches"]) == [1, 2] and shapes["seconds"].sum() == pytest.approx(total["seconds"])


def test_per_shape_estimate_does_not_overweight_a_partial_batch():
    lay = padding.pad_to_context([30] * 70, 32, 64)
    st = padding.time_layout(lay, _fake_step(lay, []), mode="per_shape", repeats=3, warmup=0)
    assert len(st) == 6   # 3 steps for each of the 2 shapes
    total, shapes = padding.cost_of_layout(st, lay, mode="per_shape", real_tokens=2100)
    full, part = 32 * 64 / 100 + 0.5, 6 * 64 / 100 + 0.5
    assert total["seconds"] * 1e3 == pytest.approx(2 * full + part)      # not 3 × the mean step
    assert total["seconds"] * 1e3 < 3 * full                           # the partial batch is not a full one
    # with all batches timed, the same layout gives the same estimate
    st_all = padding.time_layout(lay, _fake_step(lay, []), mode="all_batches", repeats=2, warmup=0)
    total_all, _ = padding.cost_of_layout(st_all, lay, mode="all_batches", real_tokens=2100)
    assert total_all["seconds"] == pytest.approx(total["seconds"]) and total_all["passes"] == 2


def test_all_batches_refuses_an_incomplete_pass():
    lay = padding.pad_to_context([30] * 70, 32, 64)
    st = padding.time_layout(lay, _fake_step(lay, []), mode="all_batches", repeats=1, warmup=0)
    with pytest.raises(ValueError, match="every batch"):
        padding.cost_of_layout(st.iloc[:2], lay, mode="all_batches", real_tokens=2100)


def test_train_step_runs_forward_and_backward_on_cpu():
    model = padding.gpt2_model(context=64, d_model=32, n_layers=1, n_heads=2, vocab=300).train()
    grads = {}
    zero = model.zero_grad

    def record(*a, **k):
        grads.update({n: p.grad is not None for n, p in model.named_parameters()})
        zero(*a, **k)

    model.zero_grad = record
    tokens = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    for collate, rows in ((padding.collate_packed, [[0, 1], [2]]), (padding.collate_padded, [[0], [1], [2]])):
        t = padding.train_step(model, collate(rows, tokens, 8, 0), "cpu")
        assert t["ms"] > 0 and grads and all(grads.values())   # every weight got a gradient
        assert t["ms"] == pytest.approx(sum(t[k] for k in padding.STEP_PARTS))
        assert t["real_targets"] == 9 - 3   # every token but each document's first


def test_memory_estimate_grows_with_the_batch():
    small = padding.memory_needed(rows=32, row_len=4096, real_tokens=4096, d_model=512, n_layers=4, context=4096)
    assert 4 * 2**30 < small < 40 * 2**30
    big = padding.memory_needed(rows=2000, row_len=1 << 20, real_tokens=140_000, d_model=512, n_layers=4,
                                context=1 << 20)
    assert big > 1000 * small


# ------------------------------------------------------------------------------------------ parameters
P = dict(n_samples=50, context_length=4096, batch_size=8, dataset="tatsu-lab/alpaca", dataset_path=None,
         tokenizer="gpt2", tokenizer_dir=None, template="spaces", eos="packed_only", strategies=["greedy_pack"],
         bucket_batches=2, heatmap_bins=16, device="none", timing="all_batches", timing_repeats=1, warmup_steps=0,
         d_model=32, n_layers=1, n_heads=2, seed=0)


@pytest.mark.parametrize("name,value", [
    ("context_length", 0), ("batch_size", 0), ("n_samples", -1), ("strategies", ["random"]), ("n_heads", 3),
    ("template", "alpacca"), ("template", "bogus"), ("template", "{nonsense}"), ("template", "{instruction}"),
    ("eos", True), ("eos", "maybe"), ("device", "gpu"), ("timing", "some"), ("timing_repeats", 0),
    ("warmup_steps", -1), ("seed", -1), ("seed", "abc"), ("dataset_path", [1, 2]), ("dataset", ""),
    ("heatmap_bins", 0), ("bucket_batches", 1.5), ("strategies", []),
])
def test_bad_parameters_are_named(name, value):
    with pytest.raises(ParameterError, match=repr(name)):
        padding.check_parameters({**P, name: value})


def test_template_typo_fails_before_any_work(monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("data were loaded before the template was checked")

    monkeypatch.setattr(textdata, "load_records", no_work)
    monkeypatch.setattr(textdata, "load_tokenizer", no_work)
    with pytest.raises(ParameterError) as e:
        padding.preflight({**P, "template": "alpacca"})
    msg = str(e.value)
    assert "'template'" in msg and "'alpacca'" in msg
    assert all(repr(t) in msg for t in textdata.TEMPLATES)


def test_cuda_device_without_cuda_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="'device'.*no CUDA"):
        padding.check_parameters({**P, "device": "cuda"})


@OFFLINE
def test_memory_is_checked_before_any_work():
    """Values inside the allowed ranges that cannot fit fail up front, naming the parameter."""
    with pytest.raises(ParameterError, match=r"'context_length'.*GiB"):
        padding.preflight({**P, "n_samples": 2000, "context_length": 1 << 20, "batch_size": 1 << 16, "device": "cpu",
                           "strategies": ["pad_to_context"]})


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


def test_missing_or_unreadable_dataset_file_is_named(tmp_path):
    with pytest.raises(ParameterError, match="'dataset_path'"):
        textdata.load_records(10, dataset_path=tmp_path / "nope.json")
    (tmp_path / "bad.json").write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ParameterError, match="'dataset_path'.*JSON"):
        textdata.load_records(10, dataset_path=tmp_path / "bad.json")


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
    assert textdata.join(r, "spaces") == "Do X.  Done."              # the empty input leaves two spaces
    assert textdata.join({**r, "output": "Done. "}, "spaces") == "Do X.  Done. "   # nothing stripped
    assert textdata.join(r, "alpaca").startswith("Below is an instruction that describes a task. Write")
    assert textdata.join(r, "Q: {instruction}\nA: {output}") == "Q: Do X.\nA: Done."
    for bad in ("alpacca", "{nonsense}", "no field at all", 3):
        with pytest.raises(ParameterError, match="'template'"):
            textdata.check_template(bad)


# ------------------------------------------------------------------------------------------ charts
def test_heatmap_hover_names_computed_positions():
    frac, width = padding.fill_fractions(padding.pad_to_context([100, 5000], 2, 4100), [100, 5000], 256)
    fig = c05_charts.occupancy_heatmap(frac, bin_width=width, row_len=4100, title="t")
    cd = np.asarray(fig.data[0].customdata)
    assert width == 17 and cd[0, 0] == "0–16" and cd[0, 1] == "17–33" and cd[0, -1] == "4,097–4,099"
    assert "%{customdata}" in fig.data[0].hovertemplate and "+" not in fig.data[0].hovertemplate


def test_histogram_gives_the_first_batch_its_own_panel():
    fig = c05_charts.length_histogram(pd.Series(range(1, 2001)), context=4096, batch_size=32, title="t")
    assert [t.yaxis for t in fig.data] == ["y", "y2"] and len(fig.data[1].x) == 32


def test_cost_chart_uses_dots_on_the_log_axis():
    fig = c05_charts.cost_dots(pd.DataFrame({"layout": ["a", "b"], "seconds": [20.0, 0.5], "low": [19.0, 0.4],
                                           "high": [21.0, 0.6], "how": ["x", "x"]}), title="t", source="this run")
    assert fig.data[0].type == "scatter" and fig.layout.xaxis.type == "log" and "min–max" in fig.layout.title.text


# ------------------------------------------------------------------------------------------ findings follow the data
def _result(*, pad_fb=0.02326, pack_fb=0.98549, pad_all=0.017, pack_all=0.974, cost=(20.0, 0.5), spread=0.05,
            isolated=(True, False), collator_equal=True, params=None, lengths=(13, 307, 95.28, 83)) -> Result:
    p = {**PUBLISHED_SETTING, "strategies": ["pad_to_context", "greedy_pack"], **(params or {})}
    fb = pd.DataFrame([
        dict(strategy="pad_to_context", label="pad to context", population="first batch", samples=32, first_sample=0,
             last_sample=31, real_tokens=int(pad_fb * 32 * 4096), positions=32 * 4096, efficiency=pad_fb, rows=32,
             row_len=4096),
        dict(strategy="greedy_pack", label="greedy", population="first batch", samples=1801, first_sample=0,
             last_sample=1800, real_tokens=int(pack_fb * 32 * 4096), positions=32 * 4096, efficiency=pack_fb,
             rows=32, row_len=4096)])
    al = pd.DataFrame([
        dict(strategy="pad_to_context", label="pad to context", population="all samples", samples=2000,
             real_tokens=141_000, positions=63 * 32 * 4096, efficiency=pad_all, rows=2000, steps=63, rows_per_step=32,
             mean_row_len=4096),
        dict(strategy="greedy_pack", label="greedy", population="all samples", samples=2000, real_tokens=143_000,
             positions=37 * 4096, efficiency=pack_all, rows=37, steps=2, rows_per_step=32, mean_row_len=4096)])
    ls = pd.DataFrame([dict(population="first batch", samples=32, min=lengths[0], max=lengths[1], mean=lengths[2],
                            median=lengths[3]),
                       dict(population="all samples", samples=2000, min=9, max=449, mean=70.8, median=54)])
    iso = pd.DataFrame([dict(code="transformers", model="GPT-2", inputs="use_cache=False", max_abs_diff=2e-7 if
                             isolated[0] else 0.3, isolated=isolated[0], transformers="5.0"),
                        dict(code="transformers", model="GPT-2", inputs="default", max_abs_diff=2e-7 if isolated[1]
                             else 0.21, isolated=isolated[1], transformers="5.0")])
    col = pd.DataFrame([dict(strategy="greedy_pack", batch=0, rows=32, real_tokens=1, documents=1801,
                             input_ids_equal=True, position_ids_equal=collator_equal, labels_equal=True)])
    res = Result(chapter="05_padding_tax", run_id="constructed", parameters=p, fingerprint={"gpu": {"name": "GPU X"}},
                 metadata={"timed_on": "cuda", "model": {"d_model": 512, "n_layers": 4}})
    for name, df in (("first_batch", fb), ("strategies", al), ("length_stats", ls), ("isolation", iso),
                     ("collator", col)):
        res.add(name, df)
    if cost is not None:
        res.add("cost", pd.DataFrame([
            dict(strategy=s, label=s, mode="all_batches", batches=63, shapes=2, timed_steps=189, passes=3, seconds=v,
                 seconds_low=v * (1 - spread), seconds_high=v * (1 + spread), real_tokens=1, real_tokens_per_s=1.0)
            for s, v in zip(("pad_to_context", "greedy_pack"), cost)]))
    return res


def _texts(res):
    items = page.findings(analysis.analyse(res))
    assert 3 <= len(items) <= 6 and len({f.key for f in items}) == len(items)
    for f in items:
        assert f.text and not has_nan(f.text) and "None" not in f.text
    return {f.key: f for f in items}


def test_findings_as_published():
    f = _texts(_result())
    assert "**2.3%**" in f["first_batch_pad_to_context"].text and "**98.5%**" in f["first_batch_packed"].text
    t = f["first_batch_ratio"].text
    assert "42.4× that of padding every sample to the context" in t and "reproduced as printed" in t
    assert "× that of padding every sample to the context**" in f["all_samples"].text  # names the population once
    assert "(all samples)" not in f["all_samples"].text and "(first batch)" not in f["first_batch_ratio"].text
    assert "**40.0× faster than padding every sample to the context**" in f["packing_vs_context"].text
    assert f["packing_vs_context"].value == pytest.approx(1 / 40.0)
    assert "reproduces each document alone" in f["packing_isolation"].text
    assert "does not: documents see each other" in f["packing_isolation"].text
    # the collator comparison is the note's beside its table, not repeated in the key result
    assert "identical input ids" in page.collator_note(analysis.analyse(_result()))
    assert "identical" not in f["packing_isolation"].text
    assert f["first_batch_pad_to_context"].published == "efficiency, pad to context"
    assert f["first_batch_packed"].published == "efficiency, packed"
    assert f["first_batch_ratio"].published == "packed ÷ pad to context"


def test_findings_when_packing_loses_the_first_batch():
    f = _texts(_result(pad_fb=0.5, pack_fb=0.4))
    assert "0.80× that of padding every sample" in f["first_batch_ratio"].text
    assert "not as published" in f["first_batch_ratio"].text


def test_findings_when_the_populations_reverse():
    f = _texts(_result(pad_all=0.5, pack_all=0.3))
    assert "0.60× that of padding every sample to the context**" in f["all_samples"].text


def test_findings_when_packing_is_slower_or_level():
    f = _texts(_result(cost=(1.0, 2.5)))
    assert "**2.5× slower than" in f["packing_vs_context"].text and "faster" not in f["packing_vs_context"].text
    f = _texts(_result(cost=(1.0, 1.05), spread=0.1))
    assert "level with padding every sample to the context" in f["packing_vs_context"].text


def test_findings_without_timings():
    f = _texts(_result(cost=None))
    assert "not measured" in f["packing_vs_longest"].text and f["packing_vs_longest"].value is None


def test_findings_when_documents_leak_or_collator_differs():
    f = _texts(_result(isolated=(False, False), collator_equal=False))
    t = f["packing_isolation"].text
    assert "reproduces" not in t and t.count("documents see each other") == 2
    assert "different position ids" in page.collator_note(analysis.analyse(_result(isolated=(False, False),
                                                                                 collator_equal=False)))


def test_findings_name_a_setting_that_is_not_the_published_one():
    f = _texts(_result(pack_fb=0.95, params={"template": "plain", "n_samples": 400}))
    t = f["first_batch_ratio"].text
    assert "not as published" in t and "`template` = `plain`" in t and "`n_samples` = `400`" in t


def test_key_metrics_are_first_batch_metrics_with_published_names():
    km = page.key_metrics(_result())
    names = {f.metric for f in published.figures("05_padding_tax")}
    assert set(km) == names
    assert km["efficiency, pad to context"][0] == pytest.approx(2.326)
    assert analysis.analyse(_result())["published_reproduced"].value == 3
    assert analysis.analyse(_result(pack_fb=0.99))["published_reproduced"].value == 1  # packed and ratio missed


def test_key_metrics_word_the_facts_and_follow_the_length_table():
    """The page's first-batch lengths and efficiencies are the analysis's facts: a result's stored facts give the
    same metrics as the result, and a changed length table moves both."""
    facts = analysis.analyse(_result(lengths=(7, 500, 99.5, 60)))
    assert facts["first_batch_length.max"].published == "first batch: longest sample"
    km = page.key_metrics(facts)
    assert km == page.key_metrics(_result(lengths=(7, 500, 99.5, 60)))
    assert km["first batch: shortest sample"] == (7.0, None) and km["first batch: median length"] == (60.0, None)
    assert km["packed ÷ pad to context"][0] == pytest.approx(0.98549 / 0.02326)


def test_run_notes_come_from_the_facts():
    """How the run was made, why it was untimed and whether it was timed are facts' data: the page words them
    from the facts alone, and the cost section falls back to the reference run only where the facts say so."""
    res = _result(cost=None)
    res.parameters = {**res.parameters, "template": "spaces", "eos": "packed_only"}
    res.metadata.update(untimed_because="no_cuda", text_source={"dataset": "d.json", "tokenizer": "tok/"},
                        template={"name": "spaces", "with_input": "{instruction} {input} {output}", "example": "Hi"})
    facts = analysis.analyse(res)
    assert facts.data["has_cost"] is False and facts.data["untimed_because"] == "no_cuda"
    assert facts.data["template"]["eos"] == "packed_only"       # from the parameters where the metadata has none
    assert page.untimed_note(facts) == "no CUDA device on this machine"
    text = page.template_sentence(facts)
    assert "`d.json`" in text and "`spaces` template" in text and text.endswith("Hi\n````")
    timed = _result()
    assert page.cost_result(res, timed) == (timed, "reference run constructed")
    assert page.cost_result(timed, res) == (timed, "this run") and page.cost_result(res, None) == (None, None)


@OFFLINE
def test_run_writes_every_table(tmp_path):
    res = harness.run("05_padding_tax",
                      **{**P, "strategies": list(padding.STRATEGIES), "n_samples": 40}, run_dir=tmp_path,
                      progress=False)
    assert {"lengths", "length_stats", "strategies", "first_batch", "templates", "isolation", "collator"} <= set(
        res.tables)
    assert "cost" not in res.tables and res.metadata["untimed_because"] == "device_none"
    assert "device is 'none'" in page.untimed_note(res)
    assert list(res.table("length_stats")["samples"]) == [8, 40]
    assert res.metadata["heatmap_greedy_pack"]["efficiency"] > 0
    assert res.table("collator")[["input_ids_equal", "position_ids_equal", "labels_equal"]].all(axis=None)
    assert (tmp_path / "05_padding_tax.json").exists()
    _texts(res)   # a small run's findings are complete sentences too


@OFFLINE
def test_run_times_every_batch_on_cpu(tmp_path):
    """The real timing path end to end, on a tiny setting: every batch timed, estimate = sum of steps."""
    res = harness.run("05_padding_tax", **{**P, "strategies": ["pad_to_context", "greedy_pack"], "n_samples": 24,
                         "context_length": 512, "device": "cpu", "d_model": 16, "n_heads": 2},
                      run_dir=tmp_path, progress=False)
    c, st = res.table("cost").set_index("strategy"), res.table("cost_steps")
    for s in ("pad_to_context", "greedy_pack"):
        steps = st[st["strategy"] == s]
        assert sorted(steps["batch"]) == list(range(int(c.loc[s, "batches"])))
        assert c.loc[s, "seconds"] * 1e3 == pytest.approx(steps["ms"].sum())
    assert c.loc["pad_to_context", "real_tokens"] == res.table("lengths")["tokens"].sum()
    assert c.loc["greedy_pack", "real_tokens"] == res.table("lengths")["tokens"].sum() + 24   # one EOS each
    f = _texts(res)
    assert "greedy packing took" in f["packing_vs_context"].text
    note = page.cost_note(analysis.analyse(res))
    assert "A full padded step" in note and "output layer and loss" in note
    b = page.step_breakdown(res).set_index("strategy")
    assert b.loc["greedy_pack", "real_targets"] > b.loc["pad_to_context", "real_targets"]
    assert (b["ms"] - b[list(padding.STEP_PARTS)].sum(axis=1)).abs().max() < 1e-6 * b["ms"].max() + 1e-9


def test_cost_note_compares_partial_batches_only_with_their_own_row_length():
    lay = padding.bucketed([10] * 16 + [300], 8, 512)   # the partial last batch holds the long sample
    st = padding.time_layout(lay, _fake_step(lay, []), mode="all_batches", repeats=1, warmup=0)
    _, shapes = padding.cost_of_layout(st, lay, mode="all_batches", real_tokens=460)
    res = _result()
    res.add("cost_shapes", shapes)
    note = page.cost_note(analysis.analyse(res))
    assert "1 of 3 batches is partial (1 row)" in note and "per step against" not in note


def test_cost_finding_names_the_model_by_size():
    f = _texts(_result(spread=0.0))["packing_vs_context"].text
    assert "GPT-2 architecture (4 layers, 512 wide)" in f and "of GPT-2 (" not in f


def test_one_gain_ratio_or_the_difference_said_once():
    f = _texts(_result())["all_samples"].text
    # efficiency ratio (end-of-text counted as real) and positions ratio differ: both named, the reason once,
    # the reason in the note beside the populations' table
    n = page.population_note(analysis.analyse(_result()))
    assert "**57.3× that of" in f and "end-of-text" not in f
    assert "In positions computed the gain is 54.5×" in n and n.count("end-of-text") == 1


def test_shares_below_100_percent_never_print_as_100():
    assert page.share_text(131_053 / 131_072) == "99.99" and page.share_text(1.0) == "100"
    assert page.share_text(0.0233) == "2.33" and page.share_text(1e-6) == "0.0001"

    fig = c05_charts.efficiency_bars(pd.DataFrame({"layout": ["a", "b"], "population": "p",
                                                 "efficiency": [99.986, 100.0]}), title="t")
    assert list(fig.data[0].text) == ["99.99%", "100%"]


def test_templates_table_has_short_headers():
    tt = pd.DataFrame([dict(template="spaces", eos="packed_only", first_batch_min=13, first_batch_max=307,
                            first_batch_mean=95.3, first_batch_median=83, first_batch_pad_to_context=0.0233,
                            first_batch_greedy_pack=0.9855, first_batch_ratio=42.4, published_matched=7,
                            published_of=7)])
    res = _result()
    res.add("templates", tt)
    t = page.templates_table(res)
    assert max(len(c) for c in t.columns) <= 12 and t["matched"].iloc[0] == "7/7"


@pytest.mark.parametrize("strategy", ["greedy_pack", "best_fit_decreasing", "pad_to_longest", "pad_to_context",
                                      "bucketed"])
def test_the_advice_snippet_builds_the_batches_the_run_timed(strategy):
    """Chapter 5's snippet imported the book's own experiment module, which no training loop has. It is plain
    Python on torch and transformers now, and run as printed (``tokens``, a ``model`` that records its batches)
    it gives the very batches the chapter timed: its layout's rows, collated as the chapter collates them."""
    import dataclasses

    from datajourney.chapters.c05_padding_tax import analysis as an
    from datajourney.chapters.c05_padding_tax import experiment as ex
    from datajourney.core import results

    ref = results.load_reference("05_padding_tax", "h200")
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, 50000, int(n)).tolist() for n in [*rng.integers(3, 900, 150), 1500]]   # one too long
    p = {**ref.parameters, "batch_size": 8, "context_length": 1024, "bucket_batches": 2}
    code = an.snippet(dataclasses.replace(ref, parameters=p), strategy)
    assert "datajourney" not in code
    seen = []

    class Model:
        def __call__(self, **batch):
            seen.append(batch)
            return type("Out", (), {"loss": torch.zeros((), requires_grad=True)})()

    # as a reader's tokens often come: NumPy arrays (``array + [eos]`` would add, not append)
    exec(compile(code, "snippet", "exec"), {"tokens": [np.asarray(t) for t in tokens], "model": Model()})
    keep = 1024 - (p["eos"] != "never")   # a longer document is cut to the context, as the chapter cuts yours
    toks = ex.layout_tokens([t[:keep] for t in tokens], strategy, p["eos"])
    kw = {"window_batches": 2} if strategy == "bucketed" else {}
    layout = ex.BUILDERS[strategy]([len(t) for t in toks], 8, 1024, **kw)
    collate = ex.collate_packed if strategy in ex.PACKED else ex.collate_padded
    assert len(seen) == len(layout.batches)
    for got, rows, n in zip(seen, layout.batches, layout.row_len, strict=True):
        want = collate(rows, toks, n, pad_id=ex.EOS_ID)
        assert got.pop("use_cache") is False   # the cache off, as every timed step ran
        assert set(got) == set(want), (set(got), set(want))
        for k in want:
            assert torch.equal(got[k], want[k]), k
