"""The HTML report is one offline file: no script, no network, a well-formed SVG roofline whose points
tell measured from estimated, and no machine paths unless asked."""

from __future__ import annotations

import html
import json
import re
import xml.dom.minidom
from pathlib import Path

import pytest

from hybrid.report.common import format_value
from hybrid.report.html_report import render_html

RESULT_FILES = sorted((Path(__file__).parent / "fixtures" / "results").glob("*.json"))


@pytest.fixture(params=RESULT_FILES, ids=lambda p: p.stem)
def results(request) -> dict:
    return json.loads(request.param.read_text())


def _svg(page: str) -> xml.dom.minidom.Document:
    return xml.dom.minidom.parseString(page[page.index("<svg") : page.index("</svg>") + len("</svg>")])


def test_page_is_self_contained(results):
    page = render_html(results)
    assert "<script" not in page.lower()
    links = set(re.findall(r"(?:https?:)?//[\w.-]+[^\s\"'<>]*", page))
    assert links <= {"http://www.w3.org/2000/svg"}  # the SVG namespace is a name, not a fetch


def test_roofline_draws_the_real_points_and_roofs(results):
    if results["roofline"]["bound"] is None:
        assert "Not placed" in render_html(results) and "<svg" not in render_html(results)
        return
    kernels = [
        k for k in results["roofline"]["kernels"] if (k["ai"] or 0) > 0 and (k["flops_per_s"] or 0) > 0
    ]
    assert kernels, "a placed roofline on an H200 run should have kernels with FLOPs"
    svg = _svg(render_html(results))
    circles = [c for c in svg.getElementsByTagName("circle") if "kernel" in c.getAttribute("class")]
    diamonds = [p for p in svg.getElementsByTagName("polygon") if "kernel" in p.getAttribute("class")]
    assert len(circles) == sum(k["source"].startswith("measured:") for k in kernels)
    assert len(diamonds) == sum(not k["source"].startswith("measured:") for k in kernels)
    assert all(d.getAttribute("fill") == "none" for d in diamonds)  # hollow: never read as a measurement
    tooltips = [n.getElementsByTagName("title")[0].firstChild.data for n in circles + diamonds]
    assert sorted(t.split("\n")[0] for t in tooltips) == sorted(k["name"] for k in kernels)

    # Placement: on log axes, a kernel with 10x the AI sits further right, one with more FLOP/s higher.
    measured = sorted(
        ((k["ai"], k["flops_per_s"]), (float(c.getAttribute("cx")), float(c.getAttribute("cy"))))
        for k, c in zip(sorted(kernels, key=lambda k: -(k["time_ms"] or 0.0)), circles, strict=False)
    )
    xs = [x for _, (x, _) in measured]
    assert xs == sorted(xs)
    by_flops = sorted(measured, key=lambda item: item[0][1])
    ys = [y for _, (_, y) in by_flops]
    assert ys == sorted(ys, reverse=True)

    # One roof per distinct compute peak, labelled with every precision that has it, and the DRAM roof.
    peaks = {p: v["value"] for p, v in results["device"]["peaks"]["flops_per_s"].items() if v and v["value"]}
    labels = [t.firstChild.data for t in svg.getElementsByTagName("text") if t.firstChild]
    roof_labels = [
        label.split(" ")[0].split("/") for label in labels if label.split(" ")[0].split("/")[0] in peaks
    ]
    assert sorted(p for names in roof_labels for p in names) == sorted(peaks)
    assert len(roof_labels) == len(set(peaks.values()))
    dram = results["device"]["peaks"]["dram_bytes_per_s"]["value"]
    assert f"DRAM {format_value(dram, 'B/s')}" in labels
    # the step's own point (all profiled kernels) is drawn too
    assert len([r for r in svg.getElementsByTagName("rect") if r.getAttribute("class") == "aggregate"]) == 1


def test_percent_of_peak_is_computed_from_the_real_rates(results):
    roof = results["roofline"]
    page = render_html(results)
    if roof["bound"] is None:
        return
    peak_flops = results["device"]["peaks"]["flops_per_s"][roof["precision"]]["value"]
    peak_dram = results["device"]["peaks"]["dram_bytes_per_s"]["value"]
    assert (
        f"= {format_value(100 * roof['flops_per_s'] / peak_flops, '%')} of {roof['precision']} peak" in page
    )
    assert f"= {format_value(100 * roof['bytes_per_s'] / peak_dram, '%')} of peak" in page
    assert "n/a" not in page.split("<h2>Roofline</h2>")[1].split("<svg")[0]


def test_kernel_and_layer_tables_show_the_real_columns(results):
    page = render_html(results)
    for kernel in results["top_kernels"]:
        assert html.escape(kernel["name"]) in page
        assert html.escape(format_value(kernel["total_ms_per_step"], "ms")) in page
    for layer in results["layers"]:
        assert (
            f"<code>{html.escape(layer['name'])}</code></td>"
            f'<td class="num">{format_value(layer["gpu_ms"], "ms")}'
        ) in page
        assert html.escape(format_value(layer["share_of_step_pct"], "%")) in page
    ncu = next((p for p in results["passes"] if p["name"] == "ncu"), None)
    if ncu:
        assert "kernel replay, not overhead" in page


def test_machine_paths_are_left_out_unless_asked(results):
    results["workload"]["command"] = [
        "python",
        "/home/alice/project/train.py",
        "--data",
        "C:\\Users\\alice\\d.bin",
    ]
    results["warnings"] = [*results["warnings"], "could not read /home/alice/.cache/x.json"]
    page = render_html(results)
    assert "alice" not in page
    assert "train.py" in page and "x.json" in page
    assert "/home/alice/project/train.py" in render_html(results, include_paths=True)


def test_no_roofline_without_device_peaks(results):
    results["device"]["peaks"] = {}
    page = render_html(results)
    assert "<svg" not in page
    assert "peaks are unknown" in page or results["roofline"]["bound"] is None


def test_hover_text_gives_the_points_own_flops_and_bytes(results):
    kernels = [
        k for k in results["roofline"]["kernels"] if (k["ai"] or 0) > 0 and (k["flops_per_s"] or 0) > 0
    ]
    if not kernels:
        return
    svg = _svg(render_html(results))
    # drawn longest first; names repeat (one kernel, several launch configurations), so match by order
    points = [n for n in svg.documentElement.childNodes if "kernel" in (n.getAttribute("class") or "")]
    assert len(points) == len(kernels)
    for point, kernel in zip(points, sorted(kernels, key=lambda k: -k["time_ms"]), strict=False):
        lines = point.getElementsByTagName("title")[0].firstChild.data.split("\n")
        assert lines[0] == kernel["name"]
        seconds = kernel["time_ms"] / 1e3
        assert lines[2].endswith(f", {format_value(kernel['flops_per_s'] * seconds, 'FLOP')}")
        assert lines[3] == (
            f"DRAM {format_value(kernel['bytes_per_s'] * seconds, 'B')} at "
            f"{format_value(kernel['bytes_per_s'], 'B/s')}"
        )
    # the legend names only the kinds of point drawn
    legend = [t.firstChild.data for t in svg.getElementsByTagName("text") if t.firstChild]
    has_estimated = any(not k["source"].startswith("measured:") for k in kernels)
    assert any(label.endswith(", estimated") for label in legend) == has_estimated


RESNET50_RUN = Path(__file__).parent / "fixtures" / "runs" / "h200-resnet50"


@pytest.fixture(scope="module")
def resnet50_results() -> dict:
    from hybrid.pipeline import analyze_run_dir

    return analyze_run_dir(RESNET50_RUN)


def _layer_markers(svg: xml.dom.minidom.Document) -> list:
    return [p for p in svg.getElementsByTagName("polygon") if p.getAttribute("class").startswith("layer")]


def _plotted_layers(results: dict) -> list[dict]:
    return [
        p
        for p in results["roofline"].get("layers") or []
        if (p["ai"] or 0) > 0 and (p["flops_per_s"] or 0) > 0
    ]


def test_one_layer_marker_per_layer_point_with_its_own_hover(resnet50_results):
    layers = _plotted_layers(resnet50_results)
    assert layers, "the resnet50 run has module ranges and ncu counters"
    svg = _svg(render_html(resnet50_results))
    markers = _layer_markers(svg)
    assert len(markers) == len(layers)
    for marker, layer in zip(markers, sorted(layers, key=lambda p: -p["time_ms"]), strict=False):
        lines = marker.getElementsByTagName("title")[0].firstChild.data.split("\n")
        assert lines[0] == layer["name"]
        assert (
            lines[1]
            == f"AI {format_value(layer['ai'], 'FLOP/B')} (L2 {format_value(layer['l2_ai'], 'FLOP/B')})"
        )
        assert f"{format_value(layer['covered_pct'], '%')} of the layer's kernel time profiled" in lines[4]
    legend = [t.firstChild.data for t in svg.getElementsByTagName("text") if t.firstChild]
    assert "layer (module range), measured (ncu)" in legend


def test_layer_markers_match_the_results_files(results):
    page = render_html(results)
    if "<svg" not in page:
        return
    assert len(_layer_markers(_svg(page))) == len(_plotted_layers(results))


def test_l2_roof_is_drawn_iff_its_peak_is_known(resnet50_results):
    l2 = resnet50_results["device"]["peaks"]["l2_bytes_per_s"]
    svg = _svg(render_html(resnet50_results))
    roofs = [line for line in svg.getElementsByTagName("line") if line.getAttribute("class") == "l2-roof"]
    assert len(roofs) == 1 and l2["source"] == "spec"
    labels = [t.firstChild.data for t in svg.getElementsByTagName("text") if t.firstChild]
    assert f"L2 {format_value(l2['value'], 'B/s')}" in labels and "L2 roof (against L2 intensity)" in labels
    # Parallel to the DRAM roof, above it by the ratio of the two bandwidths (log axes: a constant offset).
    dram = next(line for line in svg.getElementsByTagName("line") if line.getAttribute("stroke") == "#0550ae")
    assert float(roofs[0].getAttribute("y1")) < float(dram.getAttribute("y1"))

    unknown = json.loads(json.dumps(resnet50_results))
    unknown["device"]["peaks"]["l2_bytes_per_s"] = None
    svg = _svg(render_html(unknown))
    assert not [line for line in svg.getElementsByTagName("line") if line.getAttribute("class") == "l2-roof"]
    assert not any(
        t.firstChild.data.startswith("L2 ") for t in svg.getElementsByTagName("text") if t.firstChild
    )


def test_kernel_hover_gives_its_l2_intensity(resnet50_results):
    kernels = [
        k
        for k in resnet50_results["roofline"]["kernels"]
        if (k["ai"] or 0) > 0 and (k["flops_per_s"] or 0) > 0
    ]
    svg = _svg(render_html(resnet50_results))
    circles = [c for c in svg.getElementsByTagName("circle") if "kernel" in c.getAttribute("class")]
    for circle, kernel in zip(circles, sorted(kernels, key=lambda k: -k["time_ms"]), strict=False):
        line = circle.getElementsByTagName("title")[0].firstChild.data.split("\n")[1]
        assert (
            line.endswith(f"(L2 {format_value(kernel['l2_ai'], 'FLOP/B')})") and kernel["l2_ai"] is not None
        )
