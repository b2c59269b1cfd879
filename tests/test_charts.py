"""The rules every chart follows (charts.tidy, applied as a figure is shown) and the shared helpers'
spread, order and scale choices."""
import math

import pandas as pd
import plotly.graph_objects as go
import pytest

from datajourney.chapters.c09_reading_smarter import charts as c09_charts
from datajourney.chapters.c10_mmap_vs_read import charts as c10_charts
from datajourney.core import charts
from datajourney.core.units import num


def shown(fig: go.Figure) -> dict:
    """The figure as the book renders it."""
    return charts.tidy(fig.to_dict())


def summary(n: int, threads=(16, 4, 64, 1)) -> pd.DataFrame:
    rows = [dict(threads=t, size=s, mode=m, mean=100.0 * s * t, min=90.0 * s * t, max=110.0 * s * t, n=n)
            for t in threads for s in (1, 2, 4) for m in ("buffered", "direct")]
    return pd.DataFrame(rows)


def test_no_scientific_notation_in_hovers_texts_or_axes():
    df = pd.DataFrame({"mode": "read", "seq": [512, 512, 1024, 1024], "batch": [32, 64, 32, 64],
                       "loader_s": [1.734, 2.5, 3.1, 4.0]})
    fig = shown(c10_charts.heatmap_pair(df, value="loader_s", facet="mode", title="t", unit="ms", scale=1e3))
    heat = fig["data"][0]
    assert "~r}" in heat["texttemplate"] and "~r}" in heat["hovertemplate"]
    assert "g}" not in heat["texttemplate"] + heat["hovertemplate"]
    raw = go.Figure(go.Scatter(x=[1, 2], y=[1e6, 2e6], hovertemplate="%{y:,.3~g} B/s<extra></extra>"))
    d = shown(raw)
    assert d["data"][0]["hovertemplate"] == "%{y:,.3~r} B/s<extra></extra>"
    assert d["layout"]["yaxis"]["exponentformat"] == "none" and d["layout"]["yaxis"]["separatethousands"]


def test_log_axis_only_over_a_wide_range_with_readable_ticks():
    narrow = go.Figure(go.Scatter(x=[1, 2, 3], y=[10, 15, 20], hovertemplate="%{y} MB/s (log scale)"))
    narrow.update_yaxes(type="log", dtick=1, title_text="MB/s (log scale)")
    d = shown(narrow)
    assert d["layout"]["yaxis"]["type"] == "linear" and "dtick" not in d["layout"]["yaxis"]
    assert d["layout"]["yaxis"]["title"]["text"] == "MB/s" and "log" not in d["data"][0]["hovertemplate"]
    wide = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 40, 900]))
    wide.update_yaxes(type="log")
    axis = shown(wide)["layout"]["yaxis"]
    assert axis["type"] == "log" and axis["tickmode"] == "array"
    shown_ticks = [t for v, t in zip(axis["tickvals"], axis["ticktext"], strict=True) if 3 <= v <= 900]
    assert shown_ticks == ["5", "10", "20", "50", "100", "200", "500"]   # 1, 2, 5 × 10ⁿ, never plotly's "2, 3"
    huge = go.Figure(go.Scatter(x=[1, 2], y=[0.01, 50_000]))
    huge.update_yaxes(type="log")
    axis = shown(huge)["layout"]["yaxis"]
    assert {"0.01", "1", "1,000", "10,000"} <= set(axis["ticktext"]) and "2" not in axis["ticktext"]


def test_whole_quantities_get_whole_ticks():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3.5, 4.25]))
    d = shown(fig)
    assert d["layout"]["xaxis"]["dtick"] >= 1 and d["layout"]["xaxis"]["tickformat"] == ",d"   # no "1.5 GPUs"
    assert "dtick" not in d["layout"]["yaxis"]   # a measured rate keeps plotly's ticks
    counted = shown(charts.count_axis(go.Figure(go.Scatter(x=[0.5, 1.5], y=[0.4, 2.6])), "y"))
    assert counted["layout"]["yaxis"]["dtick"] == 1 and counted["layout"]["yaxis"]["tickformat"] == ",d"
    wide = shown(go.Figure(go.Scatter(x=[0, 100], y=[1.5, 2.5])))
    assert wide["layout"]["xaxis"]["dtick"] == 20


def test_numeric_legends_and_categories_in_numeric_order():
    fig = charts.lines_facets(summary(5), x="size", color="threads", facet="mode", title="t", xaxis="size",
                              yaxis="MB/s")
    assert list(dict.fromkeys(t.name for t in fig.data)) == ["1", "4", "16", "64"]
    raw = go.Figure([go.Scatter(x=[1, 2], y=[1, 2], name=f"{t} threads") for t in (16, 4, 64, 1)])
    d = shown(raw)
    assert sorted(d["data"], key=lambda t: t["legendrank"])[0]["name"] == "1 threads"
    assert [t["name"] for t in sorted(d["data"], key=lambda t: t["legendrank"])][-1] == "64 threads"
    words = shown(go.Figure([go.Scatter(x=[1], y=[1], name=n) for n in ("pinned", "pageable")]))
    assert all("legendrank" not in t for t in words["data"])   # names without numbers keep their order
    cats = shown(go.Figure(go.Bar(x=["16", "4", "64", "1"], y=[1, 2, 3, 4])))
    assert cats["layout"]["xaxis"]["categoryarray"] == ["1", "4", "16", "64"]


@pytest.mark.parametrize("helper", ["lines_facets", "lines_with_band", "bars_facets"])
def test_error_bars_only_with_three_runs_or_more(helper):
    def draw(n):
        s = summary(n)
        if helper == "lines_facets":
            return charts.lines_facets(s, x="size", color="threads", facet="mode", title="t", xaxis="x", yaxis="y")
        if helper == "lines_with_band":
            return charts.lines_with_band(s[s["mode"] == "direct"], x="size", color="threads", title="t", xaxis="x",
                                          yaxis="y")
        return charts.bars_facets(s.assign(size=s["size"].astype(str)), x="size", color="threads", facet="mode",
                                  title="t", xaxis="x", yaxis="y")

    one = draw(1)
    assert not any(t.error_y.visible for t in one.data)
    # what the points and bars are goes under the title; the axis names the quantity alone
    assert "one run" in one.layout.title.text and "bars" not in one.layout.title.text
    assert "run" not in one.layout.yaxis.title.text
    assert all("none (one run)" in t.customdata[0] if isinstance(t.customdata[0], str) else
               "none (one run)" in t.customdata[0][1] for t in one.data)
    two = draw(2)
    assert not any(t.error_y.visible for t in two.data) and "no error bars" in two.layout.title.text
    five = draw(5)
    assert all(t.error_y.visible and None not in t.error_y.array for t in five.data)
    assert "min–max over 5 runs" in five.layout.title.text and "(" not in five.layout.yaxis.title.text
    text = str(five.to_dict())
    assert "std" not in text and "± " not in text


def test_long_category_labels_turn_bars_horizontal_or_wrap():
    rungs = ["one GPU, no DDP", "+ gradient_as_bucket_view, bucket_cap_mb=100", "+ PowerSGD"]
    s = pd.DataFrame({"step": rungs, "label": "2 GPUs", "mean": [9.5, 9.1, 8.2], "min": 8.0, "max": 10.0, "n": 5})
    fig = charts.bars_facets(s, x="step", color="label", facet=None, title="t", xaxis="rung", yaxis="steps/s")
    fig.add_hline(y=9.0)
    d = shown(fig)
    bar = d["data"][0]
    assert bar["orientation"] == "h" and list(bar["y"]) == rungs and "error_x" in bar
    assert "%{y}" in bar["hovertemplate"] and "%{x:" in bar["hovertemplate"]
    assert d["layout"]["yaxis"]["title"]["text"] == "rung" and "steps/s" in d["layout"]["xaxis"]["title"]["text"]
    assert d["layout"]["yaxis"]["autorange"] == "reversed"   # the first rung on top
    assert all("<br>" in t or len(t) <= 28 for t in d["layout"]["yaxis"]["ticktext"])
    line = d["layout"]["shapes"][0]
    assert line["xref"] == "x" and line["x0"] == line["x1"] == 9.0   # the reference line turned with the bars
    short = shown(charts.bars_facets(s.assign(step=["a", "b", "c"]), x="step", color="label", facet=None, title="t",
                                     xaxis="rung", yaxis="steps/s"))
    assert short["data"][0].get("orientation") in (None, "v")
    two = charts.bars_facets(pd.concat([s.assign(path="NVLink"), s.assign(path="PCIe")]), x="step", color="label",
                             facet="path", title="t", xaxis="rung", yaxis="steps/s")
    d = shown(two)
    assert all(t.get("orientation") in (None, "v") for t in d["data"])
    axis = d["layout"]["xaxis"]
    assert axis["tickangle"] == 0 and any("<br>" in t for t in axis["ticktext"])


def test_title_sits_above_the_plot_and_long_axis_titles_wrap():
    fig = charts.lines_facets(summary(5), x="size", color="threads", facet="mode", title="A chart", xaxis="size",
                              yaxis="milliseconds per image of each operation (point: mean of the runs, log scale)")
    d = shown(fig)
    title = d["layout"]["title"]
    assert title["automargin"] and title["yref"] == "paper" and title["yanchor"] == "bottom"
    assert title["pad"]["b"] >= 22   # clear of the subplot titles ("mode: buffered") drawn above the panels
    assert "<br>" in d["layout"]["yaxis"]["title"]["text"]
    assert all(d["layout"][k]["automargin"] for k in d["layout"] if k.startswith(("xaxis", "yaxis")))
    plain = shown(go.Figure(go.Scatter(x=[1, 2], y=[1, 2]), layout=dict(title="t")))
    assert plain["layout"]["title"]["pad"]["b"] == 16   # clear of the top y tick's label, half of it above the plot
    noted = shown(go.Figure(go.Scatter(x=[1, 2], y=[1, 2]), layout=dict(title="Data wait<br><sup>bars: p10–p90</sup>")))
    assert noted["layout"]["title"]["text"] == "Data wait"   # plotly would draw the second line into the plot
    assert noted["layout"]["title"]["subtitle"]["text"] == "bars: p10–p90"


def test_hbars_log_axis_or_leave_out_for_one_value_off_the_scale():
    rows = pd.DataFrame({"label": ["O_DIRECT → pinned", "page cache → pinned", "device copy"],
                         "mean": [6.1, 2.3, 1907.0], "min": [5.9, 2.1, 1900.0], "max": [6.4, 2.5, 1911.0],
                         "n": [3, 3, 3]})
    log = c09_charts.hbars(rows, title="File to GPU memory", xaxis="GB/s", unit="GB/s")
    assert log.layout.xaxis.type == "log" and log.data[0].type == "scatter"   # dots: no bar length on a log axis
    assert "log scale" in log.layout.xaxis.title.text and "min–max over 3 runs" in log.layout.title.text
    linear = c09_charts.hbars(rows, title="File to GPU memory", xaxis="GB/s", unit="GB/s", log_x=False,
                          leave_out=["device copy"])
    assert linear.layout.xaxis.type == "linear" and linear.data[0].type == "bar"
    assert "device copy" not in list(linear.data[0].y) and "not drawn: device copy, 1,907 GB/s" in \
        linear.layout.title.text
    assert list(linear.data[0].y)[-1] == "O_DIRECT → pinned"   # the fastest on top (plotly draws upwards)


def test_size_ticks_thin_out_when_labels_would_collide():
    sizes = [2 ** k for k in range(10, 31)]
    fig = charts.size_ticks(go.Figure(go.Scatter(x=sizes, y=sizes)).update_xaxes(type="log"), sizes)
    assert len(fig.layout.xaxis.tickvals) < len(sizes) and fig.layout.xaxis.ticktext[0] == "1 KiB"
    few = charts.size_ticks(go.Figure(go.Scatter(x=sizes[:4], y=sizes[:4])), sizes[:4])
    assert len(few.layout.xaxis.tickvals) == 4


def test_size_ticks_always_label_both_ends_of_the_range():
    """Chapter 2's size sweep (4, 16, 64 KiB and 1 MiB in two panels) was labelled "4 KiB" and "64 KiB" only:
    every second size from the first, so the largest went unlabelled. Thinned labels keep both ends, in a
    regular stride where one fits."""
    from plotly.subplots import make_subplots

    sizes = [4096, 16384, 65536, 1048576]
    fig = make_subplots(rows=1, cols=2)
    for col in (1, 2):
        fig.add_scatter(x=sizes, y=[1, 2, 3, 4], row=1, col=col)
    axis = shown(charts.size_ticks(fig, sizes))["layout"]["xaxis"]
    assert axis["ticktext"][0] == "4 KiB" and axis["ticktext"][-1] == "1 MiB" and len(axis["ticktext"]) >= 3
    for hi in range(20, 34):
        sweep = [2 ** k for k in range(12, hi)]
        text = shown(charts.size_ticks(go.Figure(go.Scatter(x=sweep, y=sweep)), sweep))["layout"]["xaxis"]["ticktext"]
        assert text[0] == "4 KiB" and text[-1] == charts.size_label(sweep[-1]), text


def test_a_narrow_byte_axis_stays_logarithmic_with_sizes_in_binary_units():
    """Chapter 6's staging chart (32 to 512 MiB) was drawn on a linear axis reading "100,000,000": sizes that
    double step evenly on a log axis, labelled as the page writes them."""
    sz = [32 << 20, 48 << 20, 64 << 20, 128 << 20, 256 << 20, 512 << 20]
    axis = shown(charts.size_ticks(go.Figure(go.Scatter(x=sz, y=sz)), sz, powers=True))["layout"]["xaxis"]
    assert axis["type"] == "log" and axis["ticktext"] == ["32 MiB", "64 MiB", "128 MiB", "256 MiB", "512 MiB"]
    seen = [3000.0, 70000.0, 9e5]
    y = shown(charts.size_ticks(go.Figure(go.Scatter(x=[1, 2, 3], y=seen)), seen, axis="y",
                                powers=True))["layout"]["yaxis"]
    assert y["type"] == "log" and all(t.endswith(("KiB", "MiB")) for t in y["ticktext"]), y["ticktext"]


def test_a_log_axis_reaching_a_million_writes_every_tick_in_one_style():
    """Chapters 6, 9 and 12 read "100,000" beside "10⁶" on one axis: past a million every tick from 100 on is a
    power of ten."""
    text = shown(go.Figure(go.Scatter(x=[10, 3e7], y=[1, 2])).update_xaxes(type="log"))["layout"]["xaxis"]["ticktext"]
    assert "10⁶" in text and not any("," in t for t in text), text
    small = shown(go.Figure(go.Scatter(x=[10, 1.5e5], y=[1, 2])).update_xaxes(type="log"))["layout"]["xaxis"]
    assert "100,000" in small["ticktext"]   # below a million, plain numbers throughout


def test_chapter_6_keeps_the_pageable_copys_name_and_colour_from_chart_to_chart():
    """The bandwidth sweep drew "H2D, pageable" green; the staging chart next to it called the same copy
    "H2D pageable · source cached" in sky blue (its colour was the source state's). The copy keeps its name and
    colour; the source's state is the line's dash."""
    from datajourney.chapters.c06_pcie import charts as c06_charts
    from datajourney.chapters.c06_pcie import page as c06_page
    from datajourney.core import results

    ref = results.load_reference("06_pcie", "h200")
    band = charts.lines_with_band(c06_page.bandwidth_frame(ref), x="size", color="path", order=c06_charts.SERIES,
                                  title="t", xaxis="x", yaxis="y", centre="median", low="p10", high="p90")
    colour = {t.name: t.line.color for t in band.data}
    staging = c06_charts.staging_chart(ref.table("staging"), llc_bytes=None, title="t")
    copies = [t for t in staging.data if t.name.endswith("H2D, pageable")]
    assert len(copies) == 3 and {t.line.color for t in copies} == {colour["H2D, pageable"]}
    assert len({t.line.dash for t in copies}) == 3
    assert all(t.line.color == colour[t.name] for t in staging.data if t.name in colour)


def test_error_bars_are_named_by_what_they_span_and_what_was_counted():
    """Chapter 11's ladder said "error bar: one std" in its title and "min–max over 3 runs" on its axis, of
    bars drawn from the slowest to the fastest timed window: the one function that draws the bars names them."""
    from datajourney.chapters.c11_gpu_to_gpu import charts as c11_charts
    from datajourney.chapters.c11_gpu_to_gpu import page as c11_page
    from datajourney.core import results

    lad = c11_page.ladder_frame(results.load_reference("11_gpu_to_gpu", "h200"))
    fig = c11_charts.ladder_chart(lad)
    text = str(fig.to_dict())
    assert "std" not in text and "standard deviation" not in text
    assert "min–max over" in fig.layout.title.text and "timed windows" in fig.layout.title.text
    few = charts.bars_facets(lad.assign(n=2), x="step", color="label", facet=None, title="t", xaxis="x", yaxis="y",
                             per="timed windows")
    assert "2 timed windows at most: no error bars" in few.layout.title.text
    assert charts.bars_label([1], "min–max", per="epochs") == "one epoch"


def test_no_notebook_says_in_fixed_words_what_its_error_bars_are():
    """What error bars span is said by the code that draws them (charts.bars_label), never by a notebook's
    fixed prose or a title typed in a cell, which cannot follow the data (chapters 2, 3 and 11 said "one
    standard deviation" beside min–max bars)."""
    import json
    import re

    from datajourney.core.paths import REPO_ROOT

    claim = re.compile(r"error ?bars?[^.\n]{0,30}(standard\s+deviation|\bstd\b|min[–-]max)", re.I)
    found = [f"{nb.name}: {m.group(0)!r}" for nb in sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
             for cell in json.loads(nb.read_text())["cells"] for m in [claim.search("".join(cell["source"]))] if m]
    assert not found, found


def _c08():
    from datajourney.chapters.c08_threads_processes_gil import charts as c08_charts
    from datajourney.chapters.c08_threads_processes_gil import page as c08_page
    from datajourney.core import results

    return c08_charts, c08_page, results.load_reference("08_threads_processes_gil", "h200")


def test_chapter_8_names_and_colours_each_pool_the_same_in_every_chart():
    """Threads were blue and "ThreadPoolExecutor" in one chart, orange and "thread" in the next."""
    c08_charts, c08_page, res = _c08()
    figs = [c08_charts.primitive_chart(c08_page.primitive_lines(res))]
    figs += [c08_charts.op_chart(c08_page.op_lines(res, d), d) for d in res.metadata["decoders_run"]]
    colours = {}
    for fig in figs:
        for t in fig.data:
            colours.setdefault(t.name, set()).add(t.line.color)
    assert set(colours) == set(c08_charts.POOLS.values())
    assert all(len(c) == 1 for c in colours.values())
    assert colours[c08_charts.POOLS["thread"]] == {charts.PALETTE[0]}
    assert colours[c08_charts.POOLS["process"]] == {charts.PALETTE[1]}


def test_chapter_8_loaders_at_one_count_are_drawn_apart_each_at_its_measured_count():
    """Six of the seven loaders sat on top of each other at 16 workers; then a dodge on a linear axis drew the
    16-thread pool at 19. Now each point sits at its measured count (a category of the axis, in numeric order),
    the loaders of one count grouped side by side around it."""
    c08_charts, c08_page, res = _c08()
    lines = c08_page.loader_lines(res)
    d = shown(c08_charts.loader_chart(lines))
    counts = sorted(set(int(c) for c in lines["concurrency"]))
    assert d["layout"]["xaxis"]["type"] == "category" and d["layout"]["scattermode"] == "group"
    assert [int(c) for c in d["layout"]["xaxis"]["categoryarray"]] == counts
    for t in d["data"]:   # each point at the count that was measured, and the hover gives it too
        measured = sorted(lines[lines["loader"] == t["name"]]["concurrency"])
        assert [int(x) for x in t["x"]] == measured
        assert sorted(int(c[0]) for c in t["customdata"]) == measured


def test_no_axis_says_its_runs_twice_or_both_ways():
    """"seconds (one run) (one run)" and "images/s (point: mean of runs) (one run)"."""
    c08_charts, c08_page, res = _c08()
    figs = [c08_charts.startup_chart(c08_page.startup_lines(res)), c08_charts.loader_chart(c08_page.loader_lines(res)),
            c08_charts.primitive_chart(c08_page.primitive_lines(res))]
    one = pd.DataFrame({"x": [1, 2], "s": "a", "f": "p", "mean": [1.0, 2.0], "min": [1.0, 2.0], "max": [1.0, 2.0],
                        "n": 1})
    figs.append(charts.lines_facets(one, x="x", color="s", facet="f", title="t", xaxis="x", yaxis="seconds"))
    for fig in figs:
        title = f"{fig.layout.title.text} {fig.layout.yaxis.title.text}"
        assert title.count("run") <= 2 and "(one run) (one run)" not in title and "mean of runs" not in title, title
    assert figs[-1].layout.yaxis.title.text == "seconds" and figs[-1].layout.title.text == "t<br><sup>one run</sup>"


def _c12():
    from datajourney.chapters.c12_conclusion import page as c12_page
    from datajourney.core import results

    return c12_page, results.load_reference("12_conclusion", "h200")


@pytest.mark.parametrize("workload", ["image", "tokens", "gradients"])
def test_chapter_12_hop_axes_hold_every_point_and_never_go_below_zero(workload):
    """The data-parallel chart drew a rate in steps/s on a linear axis with a −50 tick."""
    c12_page, res = _c12()
    d = shown(c12_page.hops_chart(res, workload))
    axis = d["layout"]["xaxis"]
    need = res.facts.number(f"{workload}.demand")
    pts = [*d["data"][0]["x"], *([need] if need else [])]
    if axis["type"] == "log":
        lo, hi = (10 ** v for v in axis["range"])
        assert lo < min(pts) and max(pts) < hi
        assert min(axis["tickvals"]) > 0
    else:
        assert axis["range"][0] == 0 and max(pts) < axis["range"][1]


def test_chapter_12_budget_chart_leaves_room_labels_its_line_and_steps_regularly():
    """The step's line sat on the axis edge, unlabelled, then labelled without its value on its top point (cut
    by the plot's edge); the sample-size slider read 64, 110, 256. Its line is labelled above the plot with
    its value, as the hop charts label theirs: the same need, from the run's own step (not the slider's
    rounded one), and the script writes the label again as the sliders move."""
    c12_page, res = _c12()
    fig = c12_page.budget_figure(res)
    d = shown(fig)
    axis = d["layout"]["xaxis"]
    assert axis["type"] == "log"
    lo, hi = (10 ** v for v in axis["range"])
    pts = [v for t in d["data"] for v in t["x"] if v]
    assert lo * 1.5 < min(pts) and max(pts) * 1.5 < hi   # room on both sides, the step's need included
    need = res.facts.number("image.demand")
    assert d["data"][1]["x"] == pytest.approx([need, need], rel=1e-9)
    [note] = [a for a in d["layout"].get("annotations", []) if a["text"].startswith("the step's need")]
    hop = [a for a in shown(c12_page.hops_chart(res, "image"))["layout"]["annotations"]
           if a["text"].startswith("the step's need")]
    assert note["text"] == f"the step's need: {num(need, c12_page.BUDGET_UNIT)}"
    assert [note["text"].split()[3]] == [a["text"].split()[3] for a in hop]   # the same value in both charts
    assert note["x"] == pytest.approx(math.log10(need)) and note["yref"] == "paper" and note["y"] > 1
    assert "annotations[0].text" in d["layout"]["meta"]["post_script"]
    kib = next(s for s in d["layout"]["sliders"] if s["name"] == "kib")
    values = [float(st["value"]) for st in kib["steps"]]
    run = c12_page.budget_inputs(res.facts)["kib"]
    ladder = [v for v in values if v != run]
    assert all(b == 2 * a for a, b in zip(ladder, ladder[1:], strict=False)), values
    assert "s.pad" in d["layout"]["meta"]["post_script"] and "xaxis.range" in d["layout"]["meta"]["post_script"]


def test_chapter_7_phase_chart_names_the_model_by_its_readable_name():
    """Its title read "…, batch 64, resnet50", the torchvision id, where the page's prose says ResNet-50."""
    from datajourney.chapters.c07_full_picture import analysis
    from datajourney.chapters.c07_full_picture import page as c07_page
    from datajourney.chapters.c07_full_picture.params import Params
    from datajourney.core import results

    res = results.load_reference("07_full_picture", "h200")
    title = shown(c07_page.phase_chart(res))["layout"]["title"]["text"]
    model, batch = analysis.model_of(res), Params.value_of(res, "batch_size")
    assert title.endswith(f"batch {batch}, {analysis.MODEL_NAMES[model]}") and model not in title, title


def test_a_panel_title_breaks_to_fit_its_panel():
    """Side-by-side panels share the chart's width: a long panel title breaks after a comma (or a space), so the
    outermost one never runs past the chart's edge ("run: further reference, 4 GPUs" did at three panels)."""
    from datajourney.core.charts import PANEL_TITLE_CHARS, _panel_title

    t = _panel_title("run: further reference, 4 GPUs", 3)
    assert t == "run: further reference,<br>4 GPUs"
    assert all(len(line) <= PANEL_TITLE_CHARS[3] for line in t.split("<br>"))
    assert _panel_title("run: this run", 3) == "run: this run" and "<br>" not in _panel_title("x " * 20, 1)


def test_a_legend_is_titled_only_by_a_name_that_tells_the_reader_something():
    """A legend coloured by a code-side column ("label", "series", "kind", ...) has no title; one coloured by what
    the series are ("num_workers") keeps it (a reviewer found "label" and "series" as legend titles)."""
    import pandas as pd

    from datajourney.core import charts

    df = pd.DataFrame({"x": [1, 2, 1, 2], "y": [1.0, 2.0, 3.0, 4.0], "label": ["a", "a", "b", "b"]})
    fig = charts.lines(df, x="x", y="y", color="label", title="t", xaxis="x", yaxis="y")
    assert not fig.layout.legend.title.text
    fig = charts.lines(df.rename(columns={"label": "num_workers"}), x="x", y="y", color="num_workers", title="t",
                       xaxis="x", yaxis="y")
    assert fig.layout.legend.title.text == "num_workers"


def test_size_ticks_skip_values_that_are_no_size_and_label_powers_inside_the_data():
    """A value below one byte or not finite crashed the thinning (a zero size, a log of zero); powers of two are
    labelled inside the data's range, where plotly draws them, not just past its ends."""
    fig = go.Figure(go.Scatter(x=[0.5, 4096, 65536, 1 << 20, float("inf")], y=[1, 2, 3, 4, 5]))
    assert shown(charts.size_ticks(fig, [0.5, 4096, 65536, 1 << 20, float("inf")]))["layout"]["xaxis"]["ticktext"]
    seen = [3000.0, 70000.0, 9e5]
    y = shown(charts.size_ticks(go.Figure(go.Scatter(x=[1, 2, 3], y=seen)), seen, axis="y", powers=True))
    vals = y["layout"]["yaxis"]["tickvals"]
    assert min(seen) <= min(vals) and max(vals) <= max(seen), vals


def test_a_panel_is_titled_by_its_value_unless_the_value_is_a_bare_number():
    """Panels read "guest-cold", "Pillow", "reference run, 4 GPUs", never "cache: guest-cold" (a table's column name);
    a bare number keeps its column ("GPUs: 2")."""
    from datajourney.core.charts import facet_label

    assert facet_label("cache", "guest-cold") == "guest-cold" and facet_label("op", "read") == "read"
    assert facet_label("GPUs", 2) == "GPUs: 2" and facet_label("size", "4.0") == "size: 4.0"
    df = pd.DataFrame(dict(x=[1, 2, 1, 2], line=["a", "a", "a", "a"], cache=["warm", "warm", "cold", "cold"],
                           mean=[1.0, 2.0, 3.0, 4.0], min=[1.0, 2.0, 3.0, 4.0], max=[1.0, 2.0, 3.0, 4.0], n=1))
    fig = charts.lines_facets(df, x="x", color="line", facet="cache", title="t", xaxis="x", yaxis="y")
    assert [a.text for a in fig.layout.annotations][:2] == ["warm", "cold"]


def test_a_shared_log_axis_is_labelled_over_every_panels_range():
    """Chapter 10's facets share their y axis: the panel with the tick labels drew 1, 2, 5 … over its own range
    (6 to 49,068) while the axis spans the other panel's too (to 175,512), and the labels touched. The labels are
    placed over the range every tied panel draws, and a title's second line counts against the plot's height."""
    rows = pd.DataFrame({"x": [1, 2, 1, 2], "s": "a", "f": ["p", "p", "q", "q"],
                         "mean": [6.0, 49068.0, 6.0, 175512.0], "n": 1})
    rows = rows.assign(min=rows["mean"], max=rows["mean"])
    fig = charts.lines_facets(rows, x="x", color="s", facet="f", log_y=True, shared_y=True, unit="events",
                              title=charts.subtitle("t", "0 drawn at 0.5"), xaxis="x", yaxis="events (log scale)")
    ticks = charts.tidy(fig.to_dict())["layout"]["yaxis"]["ticktext"]
    assert ticks[-1] == "100,000" and "2" not in ticks and "5" not in ticks, ticks


def test_a_short_shared_log_axis_with_a_title_note_and_a_legend_below_labels_powers_of_ten():
    """Chapter 4's measured-vs-model chart in a reader's ci run: the labelled panel's own waits were narrow, another
    panel's reached 0.1 ms, so the shared axis is log over three decades; in a plot shortened by its margins, the
    title's second line and the legend below it, 1, 2, 5 … touched. Only powers of ten fit there."""
    from datajourney.chapters.c04_cpu_starvation import charts as c04_charts
    from datajourney.chapters.c04_cpu_starvation import page as c04_page
    from datajourney.core import results

    df = c04_page._sweep_frame(results.load_reference("04_cpu_starvation", "h200")).copy()
    first = df["work"] == df["work"].iloc[0]
    df.loc[first, "wait_ms"] = df.loc[first, "wait_ms"].clip(lower=30.0)   # the labelled panel: narrow
    df.loc[~first, "wait_ms"] = df.loc[~first, "wait_ms"].clip(upper=200.0).clip(lower=0.1)
    fig = c04_charts.measured_vs_model(df, title="Data wait per step: measured vs the model")
    axis = charts.tidy(fig.to_dict())["layout"]["yaxis"]
    assert axis["type"] == "log" and not any(t[0] in "25" for t in axis["ticktext"]), axis.get("ticktext")


def test_an_axis_title_closes_with_one_parenthesis():
    """"reads per second (IOPS) (log scale)" read as two afterthoughts: the book joins them, and says a repeated one
    once."""
    fig = go.Figure(go.Bar(x=[1e3, 1e6], y=["a", "b"], orientation="h"))
    fig.update_xaxes(title_text="reads per second (IOPS) (log scale)", type="log")
    fig.update_yaxes(title_text="seconds (one run) (one run)")
    d = shown(fig)["layout"]
    assert d["xaxis"]["title"]["text"] == "reads per second (IOPS, log scale)"
    assert d["yaxis"]["title"]["text"] == "seconds (one run)"
