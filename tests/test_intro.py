"""Chapter 1's front door: the key numbers and weakest links come from result files, and the
pipeline map links every hop to the chapters that measure it."""
import pytest
from helpers import hosts_with

from datajourney.book import harness, registry
from datajourney.book import overview as front
from datajourney.book import overview as intro
from datajourney.chapters.c12_conclusion import page as dpage
from datajourney.core import phrasing, results
from datajourney.core.facts import host_label

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters

REF = results.REFERENCE_DIR / "h200"


def test_every_chapter_2_to_11_measures_a_hop():
    measured = {n for _, _, chapters in intro.HOPS for n in chapters}
    assert measured == set(range(2, 12))
    table = front.hops_markdown()
    for n in range(2, 12):
        name = registry.lookup(str(n)).name
        assert f"({name}.ipynb)" in table   # a notebook link: MyST resolves it to the chapter's page
    links = [a.text for a in intro.pipeline_map().layout.annotations if a.text and "href" in a.text]
    assert len(links) == len(intro.HOPS)
    assert all(f'href="{registry.lookup(str(n)).name}.html"' in "".join(links) for n in measured)


def _chapter_of(t):
    return t["chapter"].str.extract(r"\((\d\d_\w+)\.ipynb")[0]


def _unsaid(text: str, definitions) -> str:
    for d in definitions:
        text = text.replace(d, "")
    return text


def test_front_table_shows_the_reference_facts():
    """Each chapter's row repeats the fact its own first screen leads with (its HEADLINE where shown there), with the
    chapter's comparand and the published figure of that same metric; a figure the chapter reproduces for another
    metric gets a row of its own, never a place beside another number."""
    t = front.front_table(None, "h200", is_reference_run=True)
    assert list(t.columns) == ["chapter", "key number", "published", "reference host"]
    assert [c for c, _, _ in front.front()] == list(registry.sources("12_conclusion"))
    chapters = _chapter_of(t)
    assert list(dict.fromkeys(chapters)) == [c for c, _, _ in front.front()]
    for ch, head, _ in front.front():
        rows = t[chapters == ch]
        ref = results.load_reference(ch)
        if ref is None:  # a chapter with no committed reference yet
            assert rows["reference host"].tolist() == ["not in the reference run"]
            continue
        facts = registry.analysed(ref).facts
        key = front.headline_key(ch, facts, head)
        shown = front.first_screen(ch, facts)
        assert key == shown[0], (ch, key, shown)   # the number the chapter leads with
        what, value = front.comparand(facts[key], facts)
        first = rows.iloc[0]
        scope = front.scope(facts[key], facts)   # the question's workload, where the number answers one
        cell = first["key number"].removeprefix(f"for {scope}: " if scope else "")
        # what "cold" (or "guest-cold") means, said once in the table: the label is the chapter's
        said = (phrasing.UNDECIDED_COLD[4:], phrasing.GUEST_COLD[len("guest-cold"):])
        shown_value = first["reference host"].split(front.FLIPPED)[0]   # a flip's note: its own test below
        assert (_unsaid(cell, said), shown_value) == (_unsaid(what, said), value), ch
        assert first["published"] == front.same_metric(ch, facts[key]), ch
        for _, r in rows.iloc[1:].iterrows():  # a reproduced figure: its own metric, its own row
            assert first["published"] == "—" and r["key number"].startswith("the source's own metric") \
                and r["published"] != "—", ch
    pub = t.set_index(chapters)["published"]
    assert pub["02_random_vs_sequential"] == "20.2×" and "not comparable" not in " ".join(t["published"])
    # a ratio of two shares names what it divides (not "42.4× that of padding every sample to the context")
    ch5 = t.set_index(chapters).loc["05_padding_tax", "reference host"].tolist()
    assert any("× the efficiency of padding every sample to the context" in v for v in ch5), ch5


def test_key_numbers_follow_the_chapters_first_screen(tmp_path):
    """The rows the review found disagreeing with their chapters: chapter 3's row is its W=0 ratio with the published
    19.5×; chapter 8's a number beside the paper's 74% (not an advice sentence); chapter 10's its speed verdict (not
    the event ratio the chapter calls not comparable); chapter 11's names DDP's fastest setting, and the published 8%
    sits beside the run's one-bucket slowdown."""
    t = front.front_table(None, "h200", is_reference_run=True)
    rows = {ch: g for ch, g in t.groupby(_chapter_of(t))}
    c3 = rows["03_dataloader"].iloc[0]
    assert "num_workers=0" in c3["key number"] and c3["published"] == "19.5×"
    c8 = rows["08_threads_processes_gil"].iloc[0]
    assert c8["published"] == "74% faster" and not c8["reference host"].startswith(("keep", "set", "use"))
    c10 = rows["10_mmap_vs_read"]
    assert "read()" in c10.iloc[0]["reference host"] and "events" not in " ".join(c10["key number"])
    c11 = rows["11_gpu_to_gpu"]
    assert "fastest DDP setting" in c11.iloc[0]["key number"] and c11.iloc[0]["published"] == "—"
    assert "one-bucket DDP" in c11.iloc[1]["key number"] and c11.iloc[1]["published"] == "8%"


def test_this_run_column_follows_its_results(tmp_path):
    """A run directory with chapter 9's result, its paths to GPU memory twice as fast: the column
    shows that run's own number, and the chapters it lacks as not run."""
    r = results.Result.load(REF / "09_reading_smarter.json")
    r.tables["gpu"]["GBps"] *= 2
    if "gpu_sweep" in r.tables:
        r.tables["gpu_sweep"]["GBps"] *= 2
    r.facts = None  # its stored facts describe the committed measurements, not these
    r.save(tmp_path)
    t = front.front_table(tmp_path, "h200")
    mine, nine = t["this run"].tolist(), _chapter_of(t).tolist().index("09_reading_smarter")
    ours = phrasing.headline(registry.analysed(r).facts.get("to_gpu"))  # this run's own number
    assert mine[nine] == ours and ours != t["reference host"].iloc[nine]
    assert all(v == "not run" for i, v in enumerate(mine) if i != nine)
    md = front.front_markdown(tmp_path, "h200")
    assert "The reference host" in md and "Your run" not in md
    assert "| chapter | key number | published | reference host | this run |" in md


def test_a_fresh_run_says_where_its_numbers_will_be(tmp_path):
    md = front.front_markdown(tmp_path, "h200")
    assert "this run" not in front.front_table(tmp_path, "h200").columns
    assert "have not run yet" in md and "(12_conclusion.ipynb)" in md
    assert "have not run yet" not in front.front_markdown(tmp_path, "h200", is_reference_run=True)


def _diagnosed(tmp_path, slow_files: bool):
    for ch in (c for c in registry.sources("12_conclusion") if (REF / f"{c}.json").is_file()):
        r = results.Result.load(REF / f"{ch}.json")
        if slow_files and ch == "02_random_vs_sequential":
            t = r.tables["size_sweep"]
            t.loc[t["pattern"] == "random", "MBps"] /= 1000
        r.facts = registry.lookup(ch).analyse(r)
        r.save(tmp_path)
    return harness.run("12_conclusion", run_dir=tmp_path, llm_tokens_per_s=1e6)


def test_the_readers_run_comes_first(tmp_path):
    """The front door and the title page of a reader's book open with that run's answer, headed with its
    host, then the reference host's; the answer is chapter 12's own wording (here with storage 1,000×
    slower, so the remedy is chapter 2's)."""
    mine = _diagnosed(tmp_path, slow_files=True)
    host = host_label(mine.fingerprint)
    for md in (front.front_door(tmp_path, "h200"), front.title_markdown("h200", run_dir=tmp_path)):
        assert md.index(f"**Your run, {host}") < md.index("**The reference host")
        assert "02_random_vs_sequential.ipynb)" in md
        for f in dpage.opening(mine.facts).findings:
            assert f.text in md


def test_title_page_of_the_committed_book(tmp_path):
    """The committed book's title page: the reference host's answer (chapter 12's opening, computed from
    its committed result) and the key numbers of chapters 2 and 5, each linking to its chapter."""
    md = front.title_markdown("h200")
    assert "Your run" not in md and "**The reference host" in md
    ref12 = registry.analysed(results.load_reference("12_conclusion"))
    for f in dpage.opening(ref12.facts).findings:
        assert f.text in md
    # every workload's answer, the data-parallel step's too (chapter 12 gives it its own section)
    every = dpage.every_answer(ref12.facts)
    linked = [t.replace("](", "](../notebooks/") for t in [f.text for f in every.findings] + [a.text for a in
                                                                                      every.actions]]
    assert len(every.findings) == 3 and all(t in md for t in linked) and "Keep the default `DDP(model" in md
    door = front.front_door(None, "h200", is_reference_run=True)   # chapter 1 states the same three answers
    assert all(f.text in door for f in every.findings) and "Keep the default `DDP(model" in door
    cold = front.key_rows("02_random_vs_sequential", results.load_reference("02_random_vs_sequential"))[0]
    assert f"**{cold['reference']}** (published: {cold['published']})" in md
    assert "](../notebooks/02_random_vs_sequential.ipynb)" in md


def test_front_door_names_guest_cold_and_pairs_published_figures_like_with_like():
    """The title page names chapter 2's cold reads as chapter 2 does (guest-cold, or its label where its latency
    check could not tell); its padding line is chapter 5's lead number, names which padding it is against, and the
    published 42.4× sits only beside the run's value of the same metric (packed ÷ padding to the context)."""
    from datajourney.book import overview, registry
    from datajourney.core import results

    data = registry.analysed(results.load_reference("02_random_vs_sequential", "h200")).facts.data
    title = overview.title_markdown("h200")
    assert ("guest-cold" in title) == (data.get("guest_cold") is True)
    assert data.get("guest_cold") is True or data.get("cold_label", "cold") in title
    padding = next(line for line in title.splitlines() if line.startswith("* **Padding**"))
    head, _, rest = padding.partition(";")
    assert "padding each batch to its longest sample" in head and "published" not in head
    assert head.startswith("* **Padding** on the reference host, for ")  # the workload its lead number measured
    assert "padding every sample to the context" in rest and "(published: 42.4×)" in rest


def test_the_map_and_chapter_1s_figure_name_the_same_chapters():
    """The hops chapter 1's figure draws (storage, page cache, CPU workers, PCIe) link the same chapters in the
    pipeline map's table and chart as the figure names under them."""
    import re

    from datajourney.core.paths import REPO_ROOT

    svg = (REPO_ROOT / "book" / "figures" / "01-journey.svg").read_text()
    drawn = [tuple(int(x) for x in m.split(", ")) for m in re.findall(r"ch\. (\d+(?:, \d+)*)", svg)]
    hops = {name: chapters for name, _, chapters in intro.HOPS}
    assert [hops[h] for h in ("Storage", "Page cache", "CPU preprocessing", "PCIe")] == drawn[:4]


STORAGE = ("02_random_vs_sequential", "03_dataloader")


@pytest.fixture
def fresh_storage(monkeypatch):
    """The committed references, chapters 2 and 3 analysed by this checkout (their stored facts may predate it)."""
    import copy

    load = results.load_reference

    def fresh(chapter, host=None):
        r = load(chapter, host)
        if r is not None and r.chapter in STORAGE:
            r = copy.copy(r)
            r.facts = None
            registry.analysed(r)
        return r

    monkeypatch.setattr(results, "load_reference", fresh)
    return fresh


@pytest.mark.parametrize("host", hosts_with(STORAGE[0]))
def test_what_cold_means_is_said_once_on_the_title_page_and_in_chapter_1(fresh_storage, host):
    """Where chapter 2's latency check could not tell the device from a host cache, its labels say just "cold": the
    title page and chapter 1's key numbers say what that "cold" means once, at its first use (not after every
    label, as "..., cold (device or host cache: cannot tell) ran 6.2× faster than ..., cold (device or host cache:
    cannot tell)" did), and nothing where the check decided."""
    r2 = fresh_storage(STORAGE[0], host)
    undecided = r2.facts["cold_state"].setting["state"] == "undecided"
    for md in (front.title_markdown(host), front.markdown_table(front.front_table(None, host, True))):
        assert md.count(phrasing.UNDECIDED_COLD[4:]) == (1 if undecided else 0), md
        for sentence in md.split("\n"):
            assert sentence.count("cannot tell") <= 1, sentence


def test_a_summary_row_names_the_question_its_number_answers(fresh_storage):
    """Chapter 2's "use one shard read in order" answers a question about synthetic 16 KiB samples read in plain
    Python; chapter 7's "Use ImageFolder" one about ResNet-50 end to end, where decoding dominates. The title page and
    chapter 1 name the workload the chapter declared for its question beside its number, so the two answers read
    as answers to two questions; a number that answers no declared question gets no scope made up for it."""
    facts = fresh_storage(STORAGE[0], "h200").facts
    workload = facts.advice_for("samples.layout").workload
    assert workload and "plain Python" in workload
    storage = next(line for line in front.title_markdown("h200").splitlines() if line.startswith("* **Storage"))
    assert f"on the reference host, for {phrasing.text(workload)}: " in storage
    cell = front.front_table(None, "h200", True).set_index("key number").index[0]
    assert cell.startswith(f"for {workload}: one shard read in order")
    assert front.scope(facts["cold_gap"], facts) == workload
    assert front.scope(facts["cold_latency"], facts) is None   # no question asked of it: no scope
    padding = registry.analysed(results.load_reference("05_padding_tax", "h200")).facts
    shown = padding.get(front.headline_key("05_padding_tax", padding, "all_samples"))
    if front.scope(shown, padding) is None:
        assert any(line.startswith("* **Padding** (reference host), real tokens per computed position: ")
                   for line in front.title_markdown("h200").splitlines())


@pytest.mark.parametrize("gpus, word", [(1, "1 GPU."), (4, "4 GPUs."), (0, "0 GPUs.")])
def test_chapter_1_counts_the_machines_gpus_in_words_that_agree(gpus, word):
    from datajourney.chapters.c01_introduction import page as p1
    from datajourney.core.facts import Fact, Facts

    f = Facts("01_introduction")
    f.add(Fact("cores", 16.0, "", "usable cores", "count"), Fact("gpus", float(gpus), "", "GPUs", "count"))
    text = p1.findings(f)[0].text
    assert text.endswith(word), text


def test_the_title_head_names_every_host_its_answers_were_measured_on():
    """The reference host's answers on the title page come from more than one machine where chapter 11 ran on a
    multi-GPU host: the head names both, as the data-parallel bullet names its own."""
    hosts = registry.analysed(results.load_reference("12_conclusion", "h200")).facts.data["hosts"]
    title = front.title_markdown("h200")
    head = next(line for line in title.splitlines() if line.startswith("**The reference host"))
    assert all(h in head for h in set(hosts.values())), (head, hosts)


def test_a_key_number_a_repeat_read_the_other_way_says_so():
    """Chapter 1's key numbers: a number whose committed repeat on the same host read the other way (chapter 8's
    warm SPDL gain, +25% then −13% on the H200 host) carries the repeat's value; the others carry nothing."""
    from datajourney.book import stability

    t = front.front_table(None, "h200", is_reference_run=True)
    repeats = stability.comparisons("h200")
    for ch, _, _ in front.front():
        rows = front.key_rows(ch, results.load_reference(ch, "h200"))
        cells = t[_chapter_of(t) == ch]["reference host"].tolist()
        for r, cell in zip(rows, cells, strict=False):
            flipped = stability.flips(repeats[ch], ch, r["metric"]) if r["reference"] and r["metric"] else []
            assert (front.FLIPPED in cell) == bool(flipped), (ch, cell, flipped)
    assert any(front.FLIPPED in c for c in t["reference host"]), "the H200 set has a flipped repeat"
