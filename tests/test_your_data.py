"""The reader's own data (``image_dir``, ``token_path``): checked before any work with one-line errors naming the
parameter, listed in a fixed shuffled order, described without a path, only ever read (hashes equal before and
after), and named by the pages of a run that read it."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datajourney.core.params import ParameterError
from datajourney.toolkit import pagecache, tokens, yourdata


# ----------------------------------------------------------------------------- generated data
def write_images(root: Path, n: int, *, classes: int = 3, fmt: str = "JPEG", size=(64, 48), seed: int = 0) -> Path:
    """``n`` small noise images in an ImageFolder tree of ``classes`` folders."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        d = root / f"class{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        a = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(a).save(d / f"im{i:05d}.{'jpg' if fmt == 'JPEG' else 'png'}", fmt)
    return root


def write_pair(prefix: Path, docs: int = 600, *, vocab: int = 50000, seed: int = 0) -> Path:
    """A Megatron .bin/.idx pair of ``docs`` documents of random ids below ``vocab``."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 200, docs)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tokens.write_indexed(prefix, rng.integers(0, vocab, int(lengths.sum())).astype(np.uint16), lengths)
    return prefix


def hashes(root: Path) -> dict:
    """Every file under ``root`` (links as links): its sha256, size and modification time."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath, f)
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            else:
                st = p.stat()
                out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_images(tmp_path_factory.mktemp("yours") / "images", 40)


def one_line(e: ParameterError, name: str) -> str:
    text = str(e)
    assert "\n" not in text and f"'{name}'" in text, text
    return text


# ----------------------------------------------------------------------------- images: listing
def test_images_are_a_fixed_shuffled_choice_described_without_paths(folder):
    a = yourdata.images(folder, 10, seed=0)
    assert a.names == yourdata.images(folder, 10, seed=0).names            # fixed
    assert a.names != yourdata.images(folder, 10, seed=1).names            # by the seed
    assert len(set(a.names)) == 10 and all(Path(n).is_file() for n in a.names)
    assert a.names != sorted(a.names)                                      # shuffled, not the listing's order
    d = a.describe()
    assert (d["files"], d["available"], d["format"], d["class_folders"]) == (10, 40, "JPEG", 3)
    assert d["bytes"] == sum(Path(n).stat().st_size for n in a.names)
    assert (d["median_width"], d["median_height"]) == (64, 48)
    text = json.dumps([d, a.manifest])
    assert str(folder) not in text and "im0" not in text and "class0" not in text


def test_a_link_inside_the_folder_is_read_and_one_out_of_it_is_refused(tmp_path, folder):
    root = write_images(tmp_path / "imgs", 6)
    os.symlink(root / "class0" / "im00000.jpg", root / "class1" / "again.jpg")
    assert yourdata.images(root, 7).n_images == 7
    os.symlink(next(folder.rglob("*.jpg")), root / "class2" / "outside.jpg")
    with pytest.raises(ParameterError) as e:
        yourdata.images(root, 7)
    assert "points outside" in one_line(e.value, "image_dir")


def _hostile(kind: str, tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "h"
    if kind == "missing":
        return tmp_path / "nowhere", "does not exist"
    if kind == "empty":
        root.mkdir()
        return root, "holds none"
    write_images(root, 8)
    if kind == "zero bytes":
        (root / "class0" / "empty.jpg").write_bytes(b"")
        return root, "0 bytes"
    if kind == "not an image":
        (root / "class0" / "notes.txt").write_text("hello")
        return root, "other file"
    if kind == "undecodable":
        (root / "class0" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 300)
        return root, "decode"
    if kind == "not a JPEG inside":
        (root / "class0" / "fake.jpg").write_bytes(b"GIF89a" + b"\x00" * 300)
        return root, "neither"
    if kind == "mixed formats":
        write_images(root, 4, fmt="PNG", seed=1)
        return root, "one image format"
    if kind == "newline in a name":
        (root / "class0" / "bad\nname.jpg").write_bytes((root / "class0" / "im00000.jpg").read_bytes())
        return root, "line breaks"
    if kind == "too few":
        return root, "at least 100"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "empty", "zero bytes", "not an image", "undecodable", "not a JPEG inside",
                                  "mixed formats", "newline in a name", "too few"])
def test_bad_image_folders_fail_in_one_line_naming_image_dir(kind, tmp_path):
    root, words = _hostile(kind, tmp_path)
    n = 100 if kind == "too few" else 8
    with pytest.raises(ParameterError) as e:
        # every file read (decode_sample): the hostile file is among them whatever the shuffle
        yourdata.images(root, n if kind != "not a JPEG inside" else 9, decode_sample=1000)
    assert words in one_line(e.value, "image_dir")


def test_an_image_folder_that_holds_or_is_inside_the_data_directory_is_refused(tmp_path):
    root = write_images(tmp_path / "imgs", 4)
    for data_dir in (root, root / "class0", tmp_path):
        with pytest.raises(ParameterError, match="'image_dir'.*apart from data_dir"):
            yourdata.images(root, 4, data_dir=data_dir)


def test_chapter_preflights_check_image_dir_before_any_work(tmp_path, folder):
    from datajourney.chapters.c03_dataloader import experiment as c3
    from datajourney.chapters.c07_full_picture import experiment as c7

    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(ParameterError) as e:
        c3.preflight({"image_dir": str(folder), "n_files": 41, "batch_size": 8, "data_dir": str(data)})
    assert "n_files = 41" in one_line(e.value, "image_dir")
    with pytest.raises(ParameterError, match="'image_dir'.*does not exist"):
        c7.preflight({"image_dir": str(tmp_path / "none"), "n_images": 8, "batch_size": 4, "reader_samples": 8,
                      "model": "small_cnn", "data_dir": str(data)})
    plan = c3.preflight({"image_dir": str(folder), "n_files": 40, "batch_size": 8, "data_dir": str(data),
                         "latency_reads": 0, "transfer_batch_sizes": [8]})
    assert plan.images.n_images == 40 and list(data.iterdir()) == []   # nothing written by a preflight


def test_a_file_removed_after_preflight_stops_the_chapter_naming_image_dir(tmp_path):
    from datajourney.book.harness import Context
    from datajourney.chapters.c03_dataloader import experiment as c3
    from datajourney.core import results

    root = write_images(tmp_path / "imgs", 12)
    data = tmp_path / "data"
    data.mkdir()
    plan = c3.preflight({"image_dir": str(root), "n_files": 12, "batch_size": 4, "data_dir": str(data),
                         "latency_reads": 0, "workers": [0], "runs": 1, "transfer_batch_sizes": [],
                         "handover_workers": 0})
    gone = Path(plan.images.names[3])
    gone.unlink()
    before = hashes(root)
    res = results.start("03_dataloader", plan.params.as_dict(), tmp_path / "run")
    with pytest.raises(ParameterError) as e:
        c3.measure(plan, Context(res, tmp_path / "run", progress=False))
    assert "since it was listed" in one_line(e.value, "image_dir") and "im" in str(e.value)
    assert hashes(root) == before and not any(data.iterdir())            # nothing read into a shard, nothing lost


def test_chapter_3_reads_the_files_and_a_shard_of_the_same_bytes(tmp_path):
    from datajourney.chapters.c03_dataloader import experiment as c3

    root = write_images(tmp_path / "imgs", 10)
    imgs = yourdata.images(root, 10, seed=3)
    ds = yourdata.files_and_shard(imgs, tmp_path / "data", progress=False)
    shard = c3.make_dataset(ds, "shard")
    files = c3.make_dataset(ds, "small_files")
    for i in range(10):   # sample i of the shard is file i, byte for byte, whatever its size
        assert bytes(shard[i].numpy()) == bytes(files[i].numpy()) == Path(imgs.names[i]).read_bytes()
    r = c3.time_epoch(shard, batch_size=4, num_workers=0, seed=0, collate_fn=c3.collate_for(ds))
    assert (r["samples"], r["bytes"]) == (10, ds.total_bytes)


def test_a_cold_purge_of_the_readers_files_drops_page_cache_only(folder):
    files = yourdata.images(folder, 20).names
    before = hashes(folder)
    pagecache.warm(files)
    report = pagecache.purge(files, "fadvise")
    assert report.method == "fadvise" and hashes(folder) == before


# ----------------------------------------------------------------------------- tokens
@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    return write_pair(tmp_path_factory.mktemp("yours") / "tok" / "corpus_text_document")


def test_a_megatron_pair_is_described_without_paths_and_read_through_links(pair, tmp_path):
    for given in (pair.with_suffix(".bin"), pair.with_suffix(".idx"), pair, pair.parent):
        src = yourdata.token_source(given)
        assert src.kind == "Megatron" and src.prefix == pair
    d = src.describe()
    assert d["documents"] == 600 and d["tokens"] == src.index().tokens and "corpus" not in json.dumps(d)
    before = hashes(pair.parent)
    ts = yourdata.token_set(src, tmp_path / "data", tokenizer=None, eos=None, progress=False)
    assert all(f.is_symlink() and f.resolve() == pair.with_suffix(f.suffix) for f in ts.files)
    assert len(tokens.TokenFile(ts.prefix)) == 600 and hashes(pair.parent) == before
    docs = src.documents(5, seed=0)
    ix = src.index()
    assert [len(x) for x in docs] == [int(ix.lengths[i]) for i in np.random.default_rng(0).permutation(600)[:5]]


def _bad_tokens(kind: str, tmp_path: Path) -> tuple[Path, str]:
    d = tmp_path / "t"
    d.mkdir()
    if kind == "missing":
        return d / "none.bin", "does not exist"
    if kind == "no idx":
        write_pair(d / "x")
        (d / "x.idx").unlink()
        return d / "x.bin", "missing"
    if kind == "corrupt idx":
        write_pair(d / "x")
        (d / "x.idx").write_bytes(b"MMIDIDX\x00\x00" + b"\x01" * 20)
        return d / "x.bin", "valid Megatron"
    if kind == "empty folder":
        return d, "holds none"
    if kind == "mixed":
        (d / "a.jsonl").write_text('{"text": "hello"}\n')
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"text": ["hi"]}), d / "b.parquet")
        return d, "one text format"
    if kind == "no text":
        (d / "a.jsonl").write_text('{"n": 1}\n')
        return d, "text column"
    if kind == "other file":
        (d / "a.jsonl").write_text('{"text": "hello"}\n')
        (d / "b.csv").write_text("x\n")
        return d, "only"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "no idx", "corrupt idx", "empty folder", "mixed", "no text",
                                  "other file"])
def test_bad_token_paths_fail_in_one_line_naming_token_path(kind, tmp_path):
    path, words = _bad_tokens(kind, tmp_path)
    with pytest.raises(ParameterError) as e:
        yourdata.token_source(path)
    assert words in one_line(e.value, "token_path")


def test_text_folders_of_each_format_give_documents(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datajourney.toolkit import textdata

    tok, _ = textdata.load_tokenizer()
    texts = [f"document number {i} " + "word " * i for i in range(30)]
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"id": list(range(30)), "text": texts}), tmp_path / "p" / "part-0.parquet")
    (tmp_path / "a").mkdir()
    with pa.OSFile(str(tmp_path / "a" / "data-00000.arrow"), "wb") as sink, \
            pa.ipc.new_stream(sink, pa.schema([("text", pa.string())])) as w:
        w.write_table(pa.table({"text": texts}))
    (tmp_path / "a" / "state.json").write_text("{}")   # beside the shards of datasets.save_to_disk: skipped
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "x.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    for sub, kind in (("p", "Parquet"), ("a", "Arrow"), ("j", "JSONL")):
        src = yourdata.token_source(tmp_path / sub)
        assert src.kind == kind and sorted(src.texts(30, seed=1)) == sorted(texts)
        assert src.token_count(tok) == sum(len(tok.encode(t).ids) + 1 for t in texts)


def test_chapter_5_refuses_ids_its_model_does_not_know_and_too_few_documents(tmp_path):
    from datajourney.chapters.c05_padding_tax import experiment as c5

    wide = write_pair(tmp_path / "wide" / "x", 50, vocab=60000)
    with pytest.raises(ParameterError) as e:
        c5.preflight({"token_path": str(wide), "n_samples": 50, "device": "none"})
    assert "ids from 0 to 50,256" in one_line(e.value, "token_path")
    small = write_pair(tmp_path / "small" / "x", 20)
    with pytest.raises(ParameterError) as e:
        c5.preflight({"token_path": str(small), "n_samples": 50, "device": "none"})
    assert "n_samples = 50" in one_line(e.value, "token_path")


# ----------------------------------------------------------------------------- the runs
def _pages(run: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((run / "notebooks").glob("*.ipynb")))


def _assert_named(run: Path, chapters: list[str], words: str, secret: str) -> None:
    for ch in chapters:
        d = json.loads((run / f"{ch}.json").read_text())
        assert d["metadata"]["your_data"]["kind"] in ("images", "tokens"), ch
        assert secret not in json.dumps(d), ch                               # never the path, nor a name
        nb = (run / "notebooks" / f"{ch}.ipynb").read_text()
        assert f"reading {words}" in nb, ch


@pytest.fixture(scope="module")
def your_run(tmp_path_factory) -> dict:
    """One ci run of the chapters that read images (3, 7, 8: ``image_dir``) and tokens (4, 5, 10: ``token_path``),
    and chapter 12, on the reader's images and Megatron pair; their hashes before the run and after it."""
    from datajourney.book import runner

    tmp = tmp_path_factory.mktemp("your-run")
    root = write_images(tmp / "my photos", 520, classes=4)
    prefix = write_pair(tmp / "my tokens" / "corpus_text_document", 600)
    before = {"images": hashes(root), "tokens": hashes(prefix.parent)}
    data = tmp / "data"
    data.mkdir()
    runner.run(["3", "4", "5", "7", "8", "10", "12"], profile="ci",
               overrides={"image_dir": str(root), "token_path": str(prefix.with_suffix(".bin")), "data_dir": str(data)},
               run_id="yours", results_root=tmp / "res", progress=False)
    after = {"images": hashes(root), "tokens": hashes(prefix.parent)}
    yield {"run": tmp / "res" / "yours", "images": root, "before": before, "after": after}
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.notebooks
def test_run_3_7_8_measures_your_images_and_leaves_them_untouched(your_run):
    run, root = your_run["run"], your_run["images"]
    d = json.loads((run / "03_dataloader.json").read_text())["metadata"]["your_data"]
    kb = d["median_bytes"] / 1e3
    words = f"your images ({d['files']:,} files, median {kb:,.1f} kB)"
    _assert_named(run, ["03_dataloader", "07_full_picture", "08_threads_processes_gil"], "your images (", str(root))
    assert words in _pages(run)
    assert your_run["after"]["images"] == your_run["before"]["images"]


@pytest.mark.notebooks
def test_run_4_5_10_measures_your_tokens_and_leaves_them_untouched(your_run):
    run = your_run["run"]
    _assert_named(run, ["04_cpu_starvation", "05_padding_tax", "10_mmap_vs_read"], "your tokens (", "corpus_text")
    d = json.loads((run / "10_mmap_vs_read.json").read_text())["metadata"]["your_data"]
    assert f"your tokens ({d['tokens']:,} tokens in {d['documents']:,} documents" in _pages(run)
    assert your_run["after"]["tokens"] == your_run["before"]["tokens"]


@pytest.mark.notebooks
def test_chapter_12_names_both_kinds_of_your_data_with_their_chapters(your_run):
    """A run that read the reader's images and tokens: chapter 12's opening names each kind with the chapters that
    read it."""
    nb = json.loads((your_run["run"] / "notebooks" / "12_conclusion.ipynb").read_text())
    page12 = json.dumps([c.get("outputs", []) for c in nb["cells"]]).replace("\\\\", "")   # as text, unescaped
    said = re.search(r"reading (your images \([^)]*\)) in chapters 3, 7 and 8 and (your tokens \([^)]*\)) "
                     r"in chapters 4, 5 and 10", page12)
    assert said, page12[:3000]
    assert "files, median" in said.group(1) and "documents, a Megatron .bin/.idx pair" in said.group(2)
