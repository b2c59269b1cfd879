"""Charts render and respond to hover in a real headless browser, with the network cut off."""
import functools
import http.server
import shutil
import threading

import pytest
from conftest import in_ci

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def server(run_book):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(run_book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.log_message = lambda *a: None
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM:
        if in_ci():
            pytest.fail("chromium is required in CI (./journey test installs it)")
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    blocked, errors = [], []
    page.route("**/*", lambda route: (route.continue_() if route.request.url.startswith("http://127.0.0.1")
                                      else (blocked.append(route.request.url), route.abort())))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load")
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
    from datajourney.chapters.c04_cpu_starvation import experiment as starvation
    from datajourney.chapters.c04_cpu_starvation.page import WHATIF_D

    page, plot, errors = _slider_plot(browser, f"{server}/notebooks/04_cpu_starvation.html")
    read = "el => [el.data[0].x.slice(0, 6), el.data[0].y.slice(0, 6), el.data[2].y.slice(0, 6), " \
           "el.layout.sliders[0].active]"
    _, before, _, _ = plot.evaluate(read)
    b, g = 32, 50  # B and G unchanged from the notebook defaults
    for frac, d in ((1.0, WHATIF_D[-1]), (0.0, WHATIF_D[0])):   # the largest D, the smallest
        _move_slider(page, plot, 0, frac)
        ws, wait, au, active = plot.evaluate(read)
        assert active == WHATIF_D.index(d)
        assert wait == pytest.approx([starvation.predicted_wait_ms(d, b, int(w), g) for w in ws])
        assert au == pytest.approx([100 * starvation.predicted_au(d, b, int(w), g) for w in ws])
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
