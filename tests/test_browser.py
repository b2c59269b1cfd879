"""Charts render and respond to hover in a real headless browser, with the network cut off."""
import contextlib
import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest
from helpers import in_ci

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: The network is cut off: every request that is not to this machine goes to a proxy at a closed local port. (Not
#: playwright's request routing, which turns the browser's cache off.)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1"]


@pytest.fixture(scope="module", params=["reader's run", "reference"])
def book_html(request) -> Path:
    """The built book's html directory: ``$DATAJOURNEY_TEST_BOOK`` when set (a book built from another run),
    else both books a reader opens: the book of this session's ci run, and the committed reference book."""
    given = os.environ.get("DATAJOURNEY_TEST_BOOK")
    if given:
        return Path(given)
    return request.getfixturevalue("reference_book" if request.param == "reference" else "run_book")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """Quiet, and a page is never taken from the browser's cache: tests write different pages under one name, and a
    later server may get an earlier one's port (scripts and styles are cached, as a reader's browser does)."""

    def log_message(self, *args):
        pass

    def _a_page(self) -> bool:
        return not self.path.split("?", 1)[0].endswith((".js", ".css", ".woff2"))

    def send_head(self):
        if self._a_page():
            del self.headers["If-Modified-Since"]
        return super().send_head()

    def end_headers(self):
        if self._a_page():
            self.send_header("Cache-Control", "no-store")
        super().end_headers()


@contextlib.contextmanager
def _serve(directory):
    """``directory`` over HTTP on a free local port; yields its address."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@pytest.fixture(scope="module")
def server(book_html):
    with _serve(book_html) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM:
        if in_ci():
            pytest.fail("chromium is required in CI (./journey test installs it)")
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        # one profile on disk, as a reader's browser keeps: from a page's third load on, chromium reuses its compiled
        # scripts (plotly.js alone takes a second to compile on a 2-core machine)
        context = p.chromium.launch_persistent_context(tmp_path_factory.mktemp("chromium"), executable_path=CHROMIUM,
                                                       args=ARGS, viewport=WINDOW)
        yield context
        context.close()


#: The browser window the book is checked in: a common laptop's width, where the text column is narrowest (a table's
#: box there is 688 px wide).
WINDOW = {"width": 1280, "height": 900}


def _open(browser, url, viewport=WINDOW):
    page = browser.new_page()
    page.set_viewport_size(viewport)
    blocked, errors = [], []   # the requests for anything not on this machine (none of them is answered)
    page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "data:")) else blocked.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load", timeout=90000)   # a busy 2-core machine loads a page in seconds
    return page, blocked, errors


def _hover_first(page, selector):
    """Move the mouse onto the first matching point (the part inside the plot area) and return
    the text of the hover label that plotly draws."""
    plot = page.locator(".js-plotly-plot", has=page.locator(selector)).first
    plot.scroll_into_view_if_needed()
    area = plot.locator(".nsewdrag").first.bounding_box()
    box = plot.locator(selector).first.bounding_box()
    assert box and area, f"{selector} is not drawn"
    x0, x1 = max(box["x"], area["x"]), min(box["x"] + box["width"], area["x"] + area["width"])
    y0, y1 = max(box["y"], area["y"]), min(box["y"] + box["height"], area["y"] + area["height"])
    assert x0 < x1 and y0 < y1, "the point lies outside the plot area"
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=8)
    page.wait_for_function("document.querySelectorAll('.hoverlayer .hovertext').length > 0", timeout=5000)
    return page.locator(".hoverlayer .hovertext").first.text_content()


def test_bar_chart_renders_and_hovers(server, browser):
    page, blocked, errors = _open(browser, f"{server}/notebooks/02_random_vs_sequential.html")
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=15000)
    assert page.locator(".js-plotly-plot").count() >= 3
    text = _hover_first(page, ".bars .point path")
    assert "MB/s" in text and "runs" in text
    assert not [e for e in errors if "Plotly" in e], errors
    assert not [u for u in blocked if "plotly" in u], blocked  # the chart needed nothing from the network
    page.close()


def test_pipeline_map_hovers(server, browser):
    page, _, errors = _open(browser, f"{server}/notebooks/01_introduction.html")
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=15000)
    text = _hover_first(page, ".scatterlayer .point")
    assert "chapters" in text
    assert not [e for e in errors if "Plotly" in e], errors
    page.close()


def _slider_plot(browser, url):
    """Open ``url`` and return (page, the first chart that has sliders, page errors)."""
    page, _, errors = _open(browser, url)
    page.wait_for_selector(".js-plotly-plot .slider-container", timeout=15000)
    plot = page.locator(".js-plotly-plot", has=page.locator(".slider-container")).first
    plot.scroll_into_view_if_needed()
    return page, plot, errors


def _move_slider(page, plot, idx: int, frac: float) -> None:
    """Click slider ``idx`` of ``plot`` at ``frac`` of its rail (0: first step, 1: last) and wait
    until plotly has moved it."""
    active = plot.evaluate("(el, i) => el.layout.sliders[i].active", idx)
    rail = plot.locator(".slider-group").nth(idx).locator(".slider-rail-rect").bounding_box()
    page.mouse.click(rail["x"] + 3 + frac * (rail["width"] - 6), rail["y"] + rail["height"] / 2)
    page.wait_for_function("([el, i, a]) => el.layout.sliders[i].active !== a",
                           arg=[plot.element_handle(), idx, active], timeout=5000)


def test_whatif_sliders_recompute_in_the_browser(server, browser):
    """The chart's JavaScript recomputes wait and AU as the Python model does (predicted_wait_ms,
    predicted_au), at two slider settings, so the two implementations cannot drift apart."""
    from datajourney.chapters.c04_cpu_starvation import model
    from datajourney.chapters.c04_cpu_starvation.page import WHATIF_D

    page, plot, errors = _slider_plot(browser, f"{server}/notebooks/04_cpu_starvation.html")
    read = "el => [el.data[0].x.slice(0, 6), el.data[0].y.slice(0, 6), el.data[2].y.slice(0, 6), " \
           "el.layout.sliders[0].active]"
    _, before, _, _ = plot.evaluate(read)
    # B and G stay at the run's values, where their sliders stand
    b, g = plot.evaluate("el => [1, 2].map(i => Number(el.layout.sliders[i].steps[el.layout.sliders[i].active].value))")
    for frac, d in ((1.0, WHATIF_D[-1]), (0.0, WHATIF_D[0])):   # the largest D, the smallest
        _move_slider(page, plot, 0, frac)
        ws, wait, au, active = plot.evaluate(read)
        assert active == WHATIF_D.index(d)
        assert wait == pytest.approx([model.predicted_wait_ms(d, b, int(w), g) for w in ws])
        assert au == pytest.approx([100 * model.predicted_au(d, b, int(w), g) for w in ws])
        if frac == 1.0:
            assert wait != before
    assert not [e for e in errors if "Plotly" in e], errors
    page.close()


def test_budget_sliders_recompute_in_the_browser(server, browser):
    """Chapter 12's budget chart: moving the GPU-step and sample-size sliders recomputes every hop's
    rate and the GPU's need in the page, equal to the Python model (datajourney.diagnosis.budget)."""
    import json

    from datajourney.chapters.c12_conclusion import page as dpage

    page, plot, errors = _slider_plot(browser, f"{server}/notebooks/12_conclusion.html")
    read = "el => [el.data[0].x, el.data[1].x, el.layout.sliders.map(s => s.active), " \
           "el.layout.sliders.map(s => s.steps.map(t => t.value))]"
    before, _, _, values = plot.evaluate(read)
    script = page.evaluate("() => Array.from(document.scripts).map(s => s.textContent)"
                           ".find(t => t.includes('function loglog'))")
    state = json.loads(script.rsplit("var s = ", 1)[1].split(";\n", 1)[0])  # the script, not the layout's copy
    for idx, name in ((0, "step"), (2, "kib")):   # the GPU step, then the sample size on disk
        _move_slider(page, plot, idx, 1.0)   # its largest value
        xs, demand, active, _ = plot.evaluate(read)
        state[name] = float(values[idx][active[idx]])
        m = dpage.budget_model(state)
        for got, want in zip(xs, [m[k] for k in state["keys"]], strict=True):   # None: a hop not measured
            assert got == want if want is None else got == pytest.approx(want, rel=1e-6)
        assert demand == pytest.approx([m["demand"]] * 2, rel=1e-6)
    assert xs != before
    assert not [e for e in errors if "Plotly" in e], errors
    page.close()


# ------------------------------------------------------------------ what a reader sees on every page
#: Visible text that is a Markdown table that was never rendered ("| a | b |", "| --- |").
RAW_TABLE = r"^\s*\|.*\|.*\|\s*$|\|\s*:?-{3,}:?\s*\|"
#: An object's repr printed where a reader expected a sentence, a table or a chart.
REPRS = (r"\[Finding\(", r"\bFinding\(key=", r"<datajourney\.", r"Timestamp\(", r"\bdtype: \w",
         r" object at 0x[0-9a-f]+", r"\bnp\.(float|int)\d+\(", r"<bound method", r"\bFigure\(\{", r"<IPython\.core\.",
         r"<Figure size")

#: Runs in the page: every check reads what the browser drew (bounding boxes, computed styles), after the
#: charts stop moving (plotly's automargin redraws once the labels are measured).
INSPECT = r"""async ([rawTable, reprs]) => {
  const R = el => {
    const r = el.getBoundingClientRect(); return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
  };
  const hit = (a, b) => Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0) > 1
                        && Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0) > 1;
  const shown = el => {
    const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0 && el.textContent.trim();
  };
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const snap = () => JSON.stringify(plots.map(p => [...p.querySelectorAll('text')].map(t => R(t))));
  for (let last = '', i = 0; i < 30; i++) {
    const now = snap(); if (now === last) break; last = now; await new Promise(r => setTimeout(r, 150));
  }
  const article = document.querySelector('article') || document.querySelector('main') || document.body;
  const copy = article.cloneNode(true);
  copy.querySelectorAll('script, style, .cell_input').forEach(e => e.remove());
  copy.querySelectorAll('.highlight').forEach(e => { if (!e.closest('.cell_output')) e.remove(); });
  const raw = new RegExp(rawTable);
  const markdown = copy.textContent.split('\n').filter(l => raw.test(l)).map(l => l.trim());
  copy.querySelectorAll('.cell_output [class*="highlight-"]:not(.highlight-myst-ansi)')
      .forEach(e => e.remove());   // a code listing that an output shows is code, not a repr
  const outputs = [...copy.querySelectorAll('.cell_output')].map(o => o.textContent);
  const repr = reprs.flatMap(p => outputs.flatMap(t => (t.match(new RegExp('.{0,40}' + p + '.{0,40}', 'm')) || [])));
  const charts = [];
  plots.forEach((plot, i) => {
    const svg = plot.querySelector('.main-svg');
    if (!svg || !shown(plot)) return;   // not drawn (inside a closed <details>)
    const box = R(svg);
    const label = 'chart ' + (i + 1) + ' "' + (plot.querySelector('.gtitle')?.textContent || '').slice(0, 60) + '"';
    const pick = sel => [...plot.querySelectorAll(sel)].filter(shown);
    const name = e => '"' + e.textContent.slice(0, 40) + '"';
    const title = pick('.gtitle, .gtitle-subtitle');   // plotly draws a subtitle as a text of its own, under the title
    const axisTitles = pick('text').filter(e => /^[xy]\d*title$/.test(e.getAttribute('class') || ''));
    const notes = pick('.annotation-text');
    const legend = pick('.legendtext');
    const areas = [...plot.querySelectorAll('.nsewdrag')].map(R);
    const ticks = pick('g[class$="tick"] > text').filter(e => /^[xy]\d*tick$/.test(e.parentNode.getAttribute('class')));
    for (const t of [...title, ...axisTitles, ...notes, ...ticks]) {
      const r = R(t);
      if (r.x0 < box.x0 - 2 || r.x1 > box.x1 + 2 || r.y0 < box.y0 - 2 || r.y1 > box.y1 + 2)
        charts.push(`${label}: ${name(t)} is clipped by the chart's edge`);
    }
    for (const t of title) {
      for (const o of [...axisTitles, ...notes, ...ticks])
        if (hit(R(t), R(o))) charts.push(`${label}: the title ${name(t)} overlaps ${name(o)}`);
      if (areas.some(a => hit(R(t), a))) charts.push(`${label}: the title ${name(t)} is drawn over the plot`);
    }
    // a label drawn beside a point is clipped at its plot area's edge (plotly's cliponaxis): it must lie inside
    const inside = (r, a) => r.x0 >= a.x0 - 1 && r.x1 <= a.x1 + 1 && r.y0 >= a.y0 - 1 && r.y1 <= a.y1 + 1;
    for (const t of pick('.scatterlayer .textpoint text'))
      if (!areas.some(a => inside(R(t), a))) charts.push(`${label}: point label ${name(t)} is cut at the plot's edge`);
    axisTitles.forEach((t, k) => {
      if (areas.some(a => hit(R(t), a))) charts.push(`${label}: axis title ${name(t)} is drawn over the plot`);
      for (const o of [...axisTitles.slice(k + 1), ...ticks, ...notes])   // notes: a panel's title too
        if (hit(R(t), R(o))) charts.push(`${label}: axis title ${name(t)} overlaps ${name(o)}`);
    });
    for (const t of legend)
      for (const o of [...title, ...axisTitles, ...ticks])
        if (hit(R(t), R(o))) charts.push(`${label}: legend entry ${name(t)} overlaps ${name(o)}`);
    for (const t of pick('.slider-label'))   // a value with more than three significant digits and a fraction
      for (const v of t.textContent.match(/\d[\d,]*\.\d+/g) || [])
        if (v.replace(/[,.]/g, '').replace(/^0+/, '').length > 3)
          charts.push(`${label}: slider label ${name(t)} shows false precision`);
    // every bar ends where its axis puts its value (a bar layer drawn before a re-layout does not)
    const svgBox = R(svg);
    plot.querySelectorAll('.barlayer .trace').forEach(g => {
      const cd = g.__data__;
      const tr = cd && cd[0] && cd[0].trace;
      if (!tr || !plot._fullLayout) return;
      const horiz = tr.orientation === 'h';
      const ax = plot._fullLayout[horiz ? 'xaxis' + tr.xaxis.slice(1) : 'yaxis' + tr.yaxis.slice(1)];
      g.querySelectorAll('.point').forEach(pt => {
        const d = pt.__data__, path = pt.querySelector('path');
        if (!ax || !path || d == null || d.s == null || !isFinite(d.s) || !shown(path)) return;
        const end = (d.b || 0) + d.s, r = R(path);
        const want = ax._offset + ax.l2p(ax.c2l(end));
        const got = horiz ? (d.s >= 0 ? r.x1 : r.x0) - svgBox.x0 : (d.s >= 0 ? r.y0 : r.y1) - svgBox.y0;
        if (Math.abs(got - want) > 2)
          charts.push(`${label}: a bar of ${name(g.querySelector('text') || path)} ends ${Math.round(got - want)} px ` +
                      `from its value ${end}`);
      });
    });
    const groups = new Map();
    for (const t of ticks) {
      const key = (t.closest('.subplot')?.getAttribute('class') || '') + ' ' + t.parentNode.getAttribute('class');
      if (/rotate/.test(t.getAttribute('transform') || '') && t.textContent.length > 12)
        charts.push(`${label}: long tick label ${name(t)} is rotated`);
      groups.set(key, [...(groups.get(key) || []), t]);
    }
    for (const g of groups.values())
      g.forEach((t, k) => g.slice(k + 1).forEach(o => {
        if (hit(R(t), R(o))) charts.push(`${label}: tick labels ${name(t)} and ${name(o)} overlap`);
      }));
  });
  const right = R(article).x1 - parseFloat(getComputedStyle(article).paddingRight);   // the text column's edge
  const caption = t => (t.querySelector('caption, th')?.textContent || '').trim().slice(0, 60);
  const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const tables = [...article.querySelectorAll('table')].filter(t => shown(t)).flatMap(t => {
    for (let e = t.parentElement; e && e !== document.body; e = e.parentElement)
      if (scrolls(e)) return [];
    return R(t).x1 > right + 1 ? [`table "${caption(t)}" is ${Math.round(R(t).x1 - right)} px wider than the ` +
                                  'text column, with no scroll box'] : [];
  });
  // a table in a scroll box still hides what lies past the box's edge (and print cuts it off): the room a table has
  // is up to its box's edge and the text column's
  const room = t => {
    let box = t.parentElement;
    while (box && box !== article && !scrolls(box)) box = box.parentElement;
    return Math.round(Math.min(right, box && box !== article ? R(box).x0 + box.clientWidth : Infinity) - R(t).x0);
  };
  const wide = [...article.querySelectorAll('table')].filter(t => shown(t) && t.scrollWidth > room(t) + 1)
    .map(t => `table "${caption(t)}" is ${Math.round(t.scrollWidth)} px wide in a ${room(t)} px column`);
  return {markdown, repr, charts, tables, wide};
}"""


def book_pages(html) -> list[str]:
    """The book's pages, relative to its html directory: the chapters and the book's own pages."""
    return sorted(str(p.relative_to(html)) for p in [*html.glob("*.html"), *html.glob("*/*.html")]
                  if p.name not in ("genindex.html", "search.html") and not p.parts[-2].startswith("_")
                  and 'http-equiv="refresh"' not in p.read_text(errors="replace").lower())   # a redirect is no page


@pytest.fixture(scope="module")
def seen(server, browser, book_html):
    """What each page of the book shows: the problems :data:`INSPECT` finds, by kind, per page; and on a chapter's
    page, the same page resized to :data:`FIRST_SCREEN`, where its "What to do" block ends (one load a page)."""
    found = {}
    for rel in book_pages(book_html):
        page, _, _ = _open(browser, f"{server}/{rel}")
        found[rel] = page.evaluate(INSPECT, [RAW_TABLE, list(REPRS)])
        if rel.startswith("notebooks/"):
            page.set_viewport_size(FIRST_SCREEN)
            found[rel]["what_to_do_end"] = page.evaluate(WHAT_TO_DO_END)
        page.close()
    return found


def _problems(seen, kind: str) -> list[str]:
    return [f"{page}: {p}" for page, kinds in seen.items() for p in kinds[kind]]


def test_no_markdown_table_shows_as_text(seen):
    assert not _problems(seen, "markdown"), "\n".join(_problems(seen, "markdown"))


def test_no_python_repr_in_an_output(seen):
    assert not _problems(seen, "repr"), "\n".join(_problems(seen, "repr"))


def test_chart_titles_and_labels_neither_overlap_nor_clip(seen):
    assert not _problems(seen, "charts"), "\n".join(_problems(seen, "charts"))


def test_wide_tables_scroll_instead_of_hiding_columns(seen):
    assert not _problems(seen, "tables"), "\n".join(_problems(seen, "tables"))


def test_no_table_is_wider_than_the_text_column(seen):
    assert not _problems(seen, "wide"), "\n".join(_problems(seen, "wide"))


@functools.cache
def _plotly_js() -> str:
    """The address of plotly.js, one for the whole session (the browser compiles it once and then takes it from its
    cache), served from the installed plotly package as the book serves it."""
    import plotly

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(
        _Quiet, directory=str(Path(plotly.__file__).parent / "package_data")))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/plotly.min.js"


@contextlib.contextmanager
def _chart_page(tmp_path, body: str, width: int = 800):
    """A page of ``body`` in a text column ``width`` px wide, with plotly.js, written in ``tmp_path`` and served;
    yields its address."""
    (tmp_path / "page.html").write_text(f'<!DOCTYPE html><html><head><script src="{_plotly_js()}"></script></head>'
                                        f'<body><article style="width: {width}px">{body}</article></body></html>')
    with _serve(tmp_path) as url:
        yield f"{url}/page.html"


def _inspect_page(browser, tmp_path, body: str, width: int = 800) -> dict:
    """INSPECT's findings on a page of ``body`` in a text column ``width`` px wide (with plotly.js, as the book
    serves it)."""
    with _chart_page(tmp_path, body, width) as url:
        page, _, errors = _open(browser, url)
        found = page.evaluate(INSPECT, [RAW_TABLE, list(REPRS)])
        page.close()
    assert not errors, errors
    return found


def _chart_html(fig, tidy: bool) -> str:
    from datajourney.core import charts

    if tidy:
        return charts.BookRenderer().to_mimebundle(fig.to_dict())["text/html"]
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=False, full_html=False)


def _crowded_figures():
    """Charts as chapters draw them: long rung names on bars, a long y title on small multiples with
    subplot titles, a log axis over two decades (plotly's minor digits), whole numbers of workers, a
    y axis whose top tick falls on the plot's top edge (its label half above it, under the title), and
    subtitles (what the error bars are) over subplot titles and over that top tick; panels so narrow that the x title
    takes two lines above a legend below the plot."""
    import pandas as pd

    from datajourney.core import charts

    charts.setup()
    rungs = ["one GPU, no DDP", "+ gradient_as_bucket_view, bucket_cap_mb=100", "+ bf16 compression, bucket_cap_mb=25",
             "+ PowerSGD", "+ static_graph, gradient_as_bucket_view"]
    ladder = pd.DataFrame({"step": rungs, "label": "2 GPUs", "mean": [9.5, 9.1, 8.7, 8.2, 9.0], "min": 8.0,
                           "max": 10.0, "n": 5})
    bars = charts.bars_facets(ladder, x="step", color="label", facet=None, unit="steps/s", title="Steps/s per GPU",
                              xaxis="rung", yaxis="steps/s per GPU (mean over the timed windows of every rung)")
    rows = [dict(op=op, threads=t, executor=e, mean=v * t ** 0.5, min=v * t ** 0.5 * 0.9, max=v * t ** 0.5 * 1.1,
                 n=3) for op in ("read", "decode", "resize") for t in (1, 2, 4, 8) for e, v in (("thread", 2.0),
                                                                                           ("process", 3.0))]
    lines = charts.lines_facets(pd.DataFrame(rows), x="threads", color="executor", facet="op", log_y=True,
                                title=charts.subtitle("Time per image of each operation, by threads and processes",
                                                      "error bars: min–max over runs (points: mean)"),
                                xaxis="threads or processes", unit="ms",
                                yaxis="ms per image (point: mean of runs, log scale, three operations)")
    loaders = pd.DataFrame({"concurrency": [1, 2, 1, 2], "loader": ["DataLoader, Pillow"] * 2 + ["thread pool"] * 2,
                            "mean": [750.0, 1440.0, 2830.0, 900.0], "min": 700.0, "max": 1500.0, "n": 1})
    top = charts.lines_with_band(loaders, x="concurrency", color="loader",
                                 title=charts.subtitle("Loaders from cold files: images/s", "points: mean of runs"),
                                 xaxis="workers or threads", yaxis="images/s", unit="img/s", dodge=0.5)
    top.update_yaxes(range=[0, 3000])
    # chapter 8's chart of four operations: each panel so narrow that the x title wraps, over a legend below
    from datajourney.chapters.c08_threads_processes_gil import charts as c08_charts

    ops = pd.DataFrame([dict(op=op, executor=e, concurrency=c, mean=v * c ** 0.3, min=v * c ** 0.3 * 0.9,
                             max=v * c ** 0.3 * 1.1, n=3) for op in ("read", "decode", "resize", "batch")
                        for c in (1, 4, 16, 64) for e, v in (("thread", 2.0), ("process", 3.0))])
    return [bars, lines, top, c08_charts.op_chart(ops, "Pillow")]


def test_the_browser_reaches_nothing_off_this_machine_and_never_shows_a_stale_page(browser, tmp_path):
    """A script from another host is asked for, recorded and not answered; a page written again under the same name
    is shown as written (the browser keeps scripts in its cache, never pages)."""
    (tmp_path / "page.html").write_text('<script src="http://192.0.2.1/x.js"></script><script src="https://example.com'
                                        '/y.js"></script><p id="p">first</p>')
    with _serve(tmp_path) as url:
        page, blocked, errors = _open(browser, f"{url}/page.html")
        assert sorted(blocked) == ["http://192.0.2.1/x.js", "https://example.com/y.js"], blocked
        # nothing came back from off this machine (the local server may answer the browser's own favicon request)
        assert page.evaluate("performance.getEntriesByType('resource').filter(r => !r.name.startsWith("
                             "'http://127.0.0.1')).every(r => r.transferSize === 0 && r.decodedBodySize === 0)")
        page.close()
        (tmp_path / "page.html").write_text('<p id="p">second</p>')
        page, _, _ = _open(browser, f"{url}/page.html")
        assert page.text_content("#p") == "second"
        page.close()


def test_the_page_checks_catch_each_problem(browser, tmp_path):
    """Every check fires on a page made to show its problem, so a clean book means something."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = go.Figure(go.Bar(x=[f"a long category label, number {i}" for i in range(6)], y=[1, 2, 3, 4, 5, 6]))
    fig.update_layout(title=dict(text="A title drawn over the plot", y=0.5, yref="container"), height=300)
    fig.update_xaxes(tickangle=0)
    # a subtitle hanging from a title set on the plot's top edge; a point's label running out of the plot
    sub = go.Figure(go.Scatter(x=[1, 2], y=[1, 2], mode="lines+text", text=["", "a label past the edge"],
                               textposition="middle right"))
    sub.update_layout(title=dict(text="A title", subtitle=dict(text="its subtitle"), yref="paper", y=1,
                                 yanchor="bottom"), height=300)
    panels = make_subplots(rows=2, cols=1, subplot_titles=["upper panel", "lower panel"], vertical_spacing=0.15)
    panels.add_scatter(x=[1, 2], y=[1, 2], row=1, col=1).add_scatter(x=[1, 2], y=[1, 2], row=2, col=1)
    panels.update_xaxes(title_text="an x title over the next panel's title", row=1, col=1)
    body = ("<p>| phase | ms |\n| --- | --- |\n| read | 3 |</p>"
            "<div class='cell_output'><pre>[Finding(key='read', text='…')]</pre></div>"
            "<table><tr><td style='min-width: 1500px'>a wide table</td></tr></table>"
            "<div style='overflow-x: auto; width: 400px'><table><caption>boxed</caption>"
            "<tr><td style='min-width: 500px'>wider than its box</td></tr></table></div>"
            + "".join(_chart_html(f, tidy=False) for f in (fig, sub, panels)))
    found = _inspect_page(browser, tmp_path, body)
    assert found["markdown"] and found["repr"] and found["tables"]
    assert any('"boxed"' in p for p in found["wide"]), found["wide"]   # its box is narrower than the column
    assert any("title" in p and "is drawn over the plot" in p for p in found["charts"])
    assert any('the title "its subtitle" is drawn over the plot' in p for p in found["charts"]), found["charts"]
    assert any('point label "a label past the edge" is cut' in p for p in found["charts"]), found["charts"]
    assert any('"an x title over the next panel' in p and 'overlaps "lower panel"' in p
               for p in found["charts"]), found["charts"]
    assert any("tick labels" in p and "overlap" in p for p in found["charts"])


def test_charts_read_well_once_tidied(browser, tmp_path):
    """The same crowded charts overlap or clip as plotly draws them by default, and do not once they
    went through the book's renderer (charts.tidy)."""
    figs = _crowded_figures()
    raw = _inspect_page(browser, tmp_path, "".join(_chart_html(f, tidy=False) for f in figs))
    assert raw["charts"]
    tidied = _inspect_page(browser, tmp_path, "".join(_chart_html(f, tidy=True) for f in figs))
    assert not tidied["charts"], "\n".join(tidied["charts"])


def test_tables_fit_the_text_column_and_each_part_names_its_rows(browser, tmp_path):
    """Tables as the book renders them (report.table_html), in the box a table gets at a 1,280 px window (688 px,
    the book's font): chapter 8's loaders table drawn whole runs past it (the check sees it); chapter 10's POSIX
    table (726 px) and chapter 11's tables (up to 699 px) once did too, split for a wider column than the book's.
    Every part fits, and each part after the first repeats the first part's key columns (the appendix's
    key-metric table once kept only "chapter")."""
    import itertools
    import re
    from html import unescape

    from datajourney.book import report, stability
    from datajourney.chapters.c08_threads_processes_gil import page as c08
    from datajourney.chapters.c10_mmap_vs_read import page as c10
    from datajourney.chapters.c11_gpu_to_gpu import page as c11
    from datajourney.core import results

    font, column = "<style>article { font: 16px system-ui, sans-serif; }</style>", 688   # the built book's
    loaders = c08.loader_table(results.load_reference("08_threads_processes_gil", "h200"))
    assert _inspect_page(browser, tmp_path, font + report._one_table_html(loaders, "Loaders"), column)["wide"]
    ddp = results.load_reference("11_gpu_to_gpu")
    tables = [loaders, c10.posix_display(results.load_reference("10_mmap_vs_read", "h200")), c11.jobs_table(ddp),
              c11.ladder_table(ddp), c11.profile_table(ddp), c11.prediction_table(ddp), c11.bench_table(ddp),
              stability.section()[0]]
    html = "".join(report.table_html(df, f"table {i}") for i, df in enumerate(tables))
    found = _inspect_page(browser, tmp_path, font + html, column)
    assert not found["wide"] and not found["tables"], found["wide"] + found["tables"]
    for i, df in enumerate(tables):
        parts = [[unescape(h) for h in re.findall(r'class="col_heading[^"]*" >([^<]*)</th>', t)]
                 for t in report.table_html(df, "T").split("<table")[1:]]
        keys = [c[0] for c in itertools.takewhile(lambda cs: len(set(cs)) == 1, zip(*parts))]   # in every part
        assert len(parts) == 1 or keys == [report.ROW] or (keys and not df[keys].astype(str).duplicated().any()), (
            i, parts)


def test_budget_chart_keeps_every_point_in_view_and_labels_the_need_as_the_sliders_move(browser, tmp_path):
    """Chapter 12's budget chart, as the book renders it: wherever the sliders put the hops and the step's
    need, the axis moves with them and leaves room on both sides (a hop below the need once fell off), and
    the need's line is labelled with its value as the hop charts label theirs, clear of the plot's edge
    (its label, on the line's top point, was cut to "e step's need")."""

    from datajourney.chapters.c12_conclusion import page as c12_page
    from datajourney.core import charts, results
    from datajourney.core.units import num

    charts.setup()
    res = results.load_reference("12_conclusion", "h200")
    fig = c12_page.budget_figure(res)
    read = ("el => [el.data[0].x.concat(el.data[1].x).filter(v => v > 0), el._fullLayout.xaxis.range, "
            "el._fullLayout.xaxis.type, (el.layout.annotations || []).map(a => a.text), "
            "el.layout.sliders.map(s => [s.name, s.steps[s.active].value])]")
    state = c12_page.budget_inputs(res.facts)
    with _chart_page(tmp_path, _chart_html(fig, tidy=True), 688) as url:
        page, plot, errors = _slider_plot(browser, url)
        # as drawn, then the shortest step, the largest sample, the longest step
        for idx, frac in ((None, None), (0, 0.0), (2, 1.0), (0, 1.0)):
            if idx is not None:
                _move_slider(page, plot, idx, frac)
            xs, (lo, hi), kind, notes, sliders = plot.evaluate(read)
            assert kind == "log" and 10 ** lo * 1.5 < min(xs) and max(xs) * 1.5 < 10 ** hi, (idx, xs, lo, hi)
            state.update({name: float(value) for name, value in sliders})
            need = c12_page.budget_model(state)["demand"]
            assert notes == [f"the step's need: {num(need, c12_page.BUDGET_UNIT)}"], (idx, notes)
            assert not page.evaluate(INSPECT, [RAW_TABLE, list(REPRS)])["charts"], idx
        page.close()
    assert not errors, errors


def test_a_readers_book_opens_with_your_run(run_book, browser):
    """The title page of a book built from a reader's run shows that run's answer first, in the first screen
    a browser draws (the staged title page holds it as a stored output: it is never executed again)."""
    with _serve(run_book) as url:
        page, blocked, errors = _open(browser, f"{url}/book/index.html")   # the title page (/ only redirects)
        try:
            first = page.locator("strong", has_text="Your run,").first       # the answer's heading, with its host
            assert first.count() and first.is_visible()
            box = first.bounding_box()
            assert box is not None and box["y"] < 900, f"'Your run' is {box} down the page"
            reference = page.locator("strong", has_text="The reference host,").first
            if reference.count():
                assert reference.bounding_box()["y"] > box["y"]   # the reader's run comes first
            assert not errors
        finally:
            page.close()


# ------------------------------------------------------------------ a chapter's first screen
#: The screen a reader opens a chapter on: a common laptop's browser window.
FIRST_SCREEN = {"width": 1280, "height": 800}

#: Where the chapter's "What to do" block ends on the page (its heading and the list after it), in CSS pixels
#: from the top of the page; null where the page has none.
WHAT_TO_DO_END = r"""() => {
  const article = document.querySelector('article') || document.body;
  const head = [...article.querySelectorAll('p')].find(p => p.textContent.trim() === 'What to do');
  if (!head) return null;
  let end = head;
  for (let n = head.nextElementSibling; n && !['DETAILS', 'SECTION', 'H1', 'H2', 'H3'].includes(n.tagName);
       n = n.nextElementSibling) end = n;
  return Math.round(end.getBoundingClientRect().bottom + window.scrollY);
}"""


def test_each_chapter_opens_with_its_findings_and_what_to_do_on_the_first_screen(seen, book_html):
    """At 1280×800, every chapter page that gives advice shows all of its "What to do" block on the first
    screen, without scrolling: the findings and the advice come before the evidence."""
    chapters = sorted(str(p.relative_to(book_html)) for p in book_html.glob("notebooks/*.html"))
    assert chapters and all(rel in seen for rel in chapters), sorted(set(chapters) - set(seen))
    late, advised = [], 0
    for rel in chapters:
        end = seen[rel]["what_to_do_end"]
        if end is None:
            continue
        advised += 1
        if end > FIRST_SCREEN["height"]:
            late.append(f"{rel}: 'What to do' ends at {end} px, below the first {FIRST_SCREEN['height']} px")
    assert advised >= 10, f"only {advised} chapter pages have a 'What to do' block"
    assert not late, "\n".join(late)
