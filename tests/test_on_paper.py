"""Chapters 2, 3 and 7: the exercise a reader works out with a pen (its numbers and its folded answers computed
from the run by the page, never typed), the "Try it" exercises' claims about their own values (a multiple of a
parameter, a worker list past the cores), and chapter 7's charts and wording of AU and the compute share."""
import json
import re
from dataclasses import replace

import pytest
from test_browser import _chart_html, _chart_page, _inspect_page, _open, browser  # noqa: F401 - browser: a fixture
from test_teaching import exercises

from datajourney.book import registry, runner
from datajourney.chapters.c02_random_vs_sequential import page as p2
from datajourney.chapters.c03_dataloader import analysis as an3
from datajourney.chapters.c03_dataloader import page as p3
from datajourney.chapters.c07_full_picture import charts as c7charts
from datajourney.chapters.c07_full_picture import page as p7
from datajourney.chapters.c07_full_picture import reading
from datajourney.chapters.common import on_paper, short_time
from datajourney.core import charts, results

MINE = ("02_random_vs_sequential", "03_dataloader", "07_full_picture")
#: Every chapter with an exercise on paper (tests/test_paper_exercises.py checks the measuring chapters' answers).
PAPER = MINE + ("04_cpu_starvation", "05_padding_tax", "06_pcie", "09_reading_smarter", "10_mmap_vs_read",
                "11_gpu_to_gpu", "12_conclusion")
HOSTS = [h for h in results.reference_hosts() if all(results.load_reference(c, h) is not None for c in MINE)]


def _folded(text: str) -> tuple[str, str]:
    """(the questions, the folded answers) of an exercise on paper."""
    assert text.count("<details>") == 1 and text.rstrip().endswith("</details>"), text
    ask, answers = text.split("<details>")
    return ask, answers


def _receive_cost(res) -> float:
    """The hand-over check's main-process CPU per received batch (ms), bytes, at the run's batch size."""
    tc = an3.transfer_cost(res.table("transfer"))
    row = tc[(tc["payload"] == "bytes") & (tc["batch_size"] == int(res.parameters["batch_size"]))]
    return float(row["main_cpu_ms_per_batch_w1"].iloc[0])


def _with_table(res, name: str, table):
    """A copy of ``res`` whose table ``name`` is ``table``."""
    return replace(res, tables={**res.tables, name: table})


@pytest.mark.parametrize("host", HOSTS)
def test_chapter_2_on_paper_is_worked_from_the_headline(host):
    res = registry.analysed(results.load_reference("02_random_vs_sequential", host))
    facts = res.facts
    ask, answers = _folded(p2.paper_exercise(facts, res))
    rand, seq = facts.number("cold.random"), facts.number("cold.sequential")
    size, n = int(res.parameters["file_size"]), int(res.parameters["n_files"])
    t_file, t_shard = size / (rand * 1e6), size / (seq * 1e6)
    assert f"{n:,} shuffled files" in ask and f"{size:,} bytes" in ask
    for shown in (short_time(t_file), short_time(t_shard), short_time(t_file - t_shard),
                  short_time((t_file - t_shard) * n)):
        assert f"**{shown}**" in answers, (shown, answers)
    # a slower random read: every answer moves with the data (nothing in it is typed)
    slower = replace(facts, facts={**facts.facts, "cold.random": replace(facts["cold.random"], value=rand / 2)})
    moved = _folded(p2.paper_exercise(slower, res))[1]
    assert f"**{short_time(2 * t_file)}**" in moved and moved != answers


@pytest.mark.parametrize("host", HOSTS)
def test_chapter_3_on_paper_bounds_the_rate_by_the_hand_over(host):
    res = results.load_reference("03_dataloader", host)
    ask, answers = _folded(p3.paper_exercise(res))
    cost = _receive_cost(res)
    bound = 1e3 / cost
    e = res.table("epochs")
    warm = e[(e["cache"] == "warm") & (e["workers"] > 0)]
    best = warm.groupby(["workers", "kind"])["batches_per_s"].mean().max()
    assert f"**{cost:.3g} ms**" in ask and f"**{p3.num(best)} batches/s**" in ask
    assert f"**{p3.num(bound)} batches/s**" in answers and f"**{p3.pct(best / bound)}**" in answers
    tr = res.table("transfer").copy()
    tr["main_cpu_ms_per_batch"] = tr["main_cpu_ms_per_batch"] * 2   # receiving twice as dear: half the bound
    dear = _with_table(res, "transfer", tr)
    assert f"**{p3.num(1e3 / _receive_cost(dear))} batches/s**" in _folded(p3.paper_exercise(dear))[1]
    assert "did not measure" in p3.paper_exercise(_with_table(res, "transfer", tr.iloc[0:0]))


@pytest.mark.parametrize("host", HOSTS)
def test_chapter_7_on_paper_tells_au_from_the_compute_share(host):
    res = results.load_reference("07_full_picture", host)
    ask, answers = _folded(p7.paper_exercise(res))
    st = reading.scenario_stats(res)
    row = st[st["variant"] == "default"].sort_values("pct_of_ceiling").iloc[-1]
    au = row["images_per_s"] / reading.ceiling_runs(res)["images_per_s"].mean()
    assert f"**{p7.pct(au)}**" in answers and f"**{p7.pct(row['compute_ms'] / row['step_ms'])}**" in answers
    assert ("reaches" if au >= reading.KEEP_UP else "falls short of") in answers
    # the same scenario twice as fast against the same ceiling: the direction word follows the numbers
    sc = res.table("scenarios").copy()
    sc["images_per_s"] = sc["images_per_s"] * 2
    fast = _folded(p7.paper_exercise(_with_table(res, "scenarios", sc)))[1]
    assert "reaches" in fast and "falls short of" not in fast


def test_an_exercise_on_paper_needs_an_answer_to_each_question():
    with pytest.raises(ValueError, match="one answer per question"):
        on_paper("numbers", ["one?", "two?"], ["1."])


@pytest.mark.parametrize("name", PAPER)
def test_each_page_shows_its_exercise_on_paper_from_the_page_module(name):
    """A heading and one code cell that asks the page for the exercise, before "Try it"; the heading's prose
    states no measured number (those come from the cell)."""
    cells = json.loads(registry.lookup(name).notebook.read_text())["cells"]
    at = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
              and re.search(r"^## Work it out on paper", "".join(c["source"]), re.M))
    code = "".join(cells[at + 1]["source"])
    assert cells[at + 1]["cell_type"] == "code" and re.fullmatch(r"report\.say\(page\.paper_exercise\([^)]*\)\)", code)
    assert at + 1 < next(i for i, c in enumerate(cells) if "## Try it" in "".join(c["source"]))
    assert not re.search(r"\d[\d,.]*\s*(?:MB/s|GB/s|images/s|batches/s|ms|µs|×|%)", "".join(cells[at]["source"]))


#: Words that state a multiple, and the factor each states.
MULTIPLES = {"twice": 2, "two times": 2, "four times": 4, "ten times": 10}


def _value(ch, profile: str, name: str):
    return (runner.profiles().get(profile) or {}).get(ch.name, {}).get(name, ch.params.defaults()[name])


@pytest.mark.parametrize("name", MINE)
def test_a_multiple_an_exercise_states_holds_under_every_profile(name):
    """"ten times the files" for -p n_files 20000 was twice the full profile's 10,000: a multiple an exercise
    states is the ratio of its value to the value of the laptop's (quick) and the GPU host's (full) profile."""
    ch = registry.lookup(name)
    for e in exercises(ch):
        said = [k for word, k in MULTIPLES.items() if re.search(rf"\b{word}\b", e["text"], re.I)]
        numeric = {k: v for k, v in e["overrides"].items() if isinstance(v, (int, float))}
        if not said or len(numeric) != 1:
            continue
        (knob, value), = numeric.items()
        for profile in ("quick", "full"):
            assert value / _value(ch, profile, knob) in said, (name, knob, profile, e["text"][:80])


def test_the_workers_exercise_reaches_past_every_reference_hosts_cores():
    """Chapter 3's exercise on workers and cores asked for at most 8 workers while the reference host has 16
    cores: its list reaches past the cores of every host that ran the chapter."""
    ch = registry.lookup("03_dataloader")
    lists = [e["overrides"]["workers"] for e in exercises(ch) if "workers" in e["overrides"]]
    assert lists
    for host in results.reference_hosts():
        res = results.load_reference(ch.name, host)
        if res is None:
            continue
        cpu = res.fingerprint.get("cpu") or {}
        cores = cpu.get("usable_cores") or cpu.get("logical_cores")
        assert max(max(w) for w in lists) > cores, (host, cores, lists)


@pytest.mark.parametrize("host", HOSTS)
def test_chapter_7_calls_no_share_of_the_step_au(host):
    """AU is the glossary's steps × G ÷ wall time (the share of the ceiling); the compute share is named as such
    in the chart and on the page."""
    res = results.load_reference("07_full_picture", host)
    fig = c7charts.au_and_ceiling(reading.scenario_stats(res), title="t")
    names = {t.name for t in fig.data if t.name}
    assert {"compute share (%)", "share of the ceiling (%)"} <= names
    assert not any("AU" in n for n in names)
    cells = json.loads(registry.lookup("07_full_picture").notebook.read_text())["cells"]
    prose = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert not re.search(r"(Accelerator utilisation|\bAU\b)\s*\(compute", prose)


def _chapter_7_figures(res):
    st = reading.scenario_stats(res)
    figs = [c7charts.phase_bars(st, phases=reading.PHASES, title="Per-step phase breakdown, batch 64"),
            c7charts.au_and_ceiling(st, title="Compute share and share of the ceiling"),
            c7charts.wait_per_step(res.table("steps"), title="Data wait per step")]
    if not p7.stage_rows(res).empty:
        figs.append(c7charts.stage_bars(p7.stage_rows(res), title="Where the data time goes, per image", batch_size=64))
    if not p7.load_table(res).empty:
        figs.append(c7charts.compute_under_load(p7.load_table(res), title="Compute per step while other processes "
                                                "keep the CPU busy", ceiling_ms=float(res.table("ceiling")
                                                                                     ["compute_ms"].mean())))
    return figs


#: Every pair of texts a chart draws that meet (titles, subtitles, panel titles, axis titles, ticks), and a
#: title or subtitle drawn over a plot area: the page checks of test_browser see neither subtitles nor an axis
#: title against a panel's title.
TEXTS_MEET = r"""() => {
  const R = el => { const r = el.getBoundingClientRect(); return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}; };
  const hit = (a, b) => Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0) > 1
                        && Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0) > 1;
  const out = [];
  document.querySelectorAll('.js-plotly-plot').forEach((plot, i) => {
    const texts = [...plot.querySelectorAll('text')].filter(t => t.textContent.trim() && !t.closest('.legend')
                                                          && R(t).x1 > R(t).x0);
    const areas = [...plot.querySelectorAll('.nsewdrag')].map(R);
    const name = t => `${t.getAttribute('class') || ''} "${t.textContent.slice(0, 30)}"`;
    texts.forEach((a, k) => {
      texts.slice(k + 1).forEach(b => {
        if (hit(R(a), R(b))) out.push(`chart ${i + 1}: ${name(a)} meets ${name(b)}`);
      });
      if (/gtitle/.test(a.getAttribute('class') || '') && areas.some(r => hit(R(a), r)))
        out.push(`chart ${i + 1}: ${name(a)} is drawn over the plot`);
    });
  });
  return out;
}"""


@pytest.mark.browser
@pytest.mark.parametrize("host", HOSTS)
def test_chapter_7_charts_draw_no_text_over_another(browser, tmp_path, host):  # noqa: F811 - the fixture
    """Subtitles ran into the first panel's title, and the first panel's x title into the second panel's
    ("DataLoader workers" over "MDS shards"); drawn as the book draws them, no two texts meet."""


    charts.setup()
    body = "".join(_chart_html(f, tidy=True) for f in _chapter_7_figures(results.load_reference("07_full_picture",
                                                                                                 host)))
    assert not _inspect_page(browser, tmp_path, body)["charts"]
    with _chart_page(tmp_path, body) as url:
        page, _, errors = _open(browser, url)
        page.wait_for_timeout(1000)
        found = page.evaluate(TEXTS_MEET)
        page.close()
    assert not errors and not found, "\n".join(found)


#: A sentence of fixed prose about what a busy or a spare CPU does, with a direction or a limit in it.
_WAY = r"(slower|faster|(?<!no )longer|shorter|grows?|only as long as)"
CPU_CLAIM = re.compile(rf"\b(busy|spare cores?)\b.*\b{_WAY}\b|\b{_WAY}\b.*\b(busy|spare cores?)\b", re.I)
#: Words that make such a sentence a mechanism or a hypothesis a section tests, not an outcome.
HEDGE = re.compile(r"\b(may|might|can|could|would|if|whether|tests?)\b", re.I)


@pytest.mark.parametrize("name", MINE)
def test_fixed_prose_states_what_a_busy_cpu_does_only_as_a_hypothesis(name):
    """Chapter 7's "How it works" said "A busy machine makes compute itself slower", where its computed finding
    can say the sweep found no isolated cause; chapter 3 said workers hide latency "only as long as there are
    spare cores", where its data put the plateau on the hand-over. Fixed prose words such a cause as a mechanism
    or a hypothesis the page tests; the outcome is the computed text's."""
    cells = json.loads(registry.lookup(name).notebook.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    sentences = re.split(r"(?<=[.;:])\s+", re.sub(r"\s*\n\s*", " ", text))
    claims = [s for s in sentences if CPU_CLAIM.search(s) and not HEDGE.search(s)]
    assert not claims, claims
