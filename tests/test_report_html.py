"""The HTML report is one offline file: no script, no network, a well-formed SVG roofline whose points
tell measured from estimated, and no machine paths unless asked."""

from __future__ import annotations

import json
import re
import xml.dom.minidom
from pathlib import Path

import pytest

from hybrid.report.html_report import render_html

RESULT_FILES = sorted((Path(__file__).parent / "fixtures" / "results").glob("*.json"))


@pytest.fixture(params=RESULT_FILES, ids=lambda p: p.stem)
def results(request) -> dict:
    return json.loads(request.param.read_text())


def _svg(page: str) -> xml.dom.minidom.Document:
    return xml.dom.minidom.parseString(page[page.index("<svg"):page.index("</svg>") + len("</svg>")])


def test_page_is_self_contained(results):
    page = render_html(results)
    assert "<script" not in page.lower()
    links = set(re.findall(r"(?:https?:)?//[\w.-]+[^\s\"'<>]*", page))
    assert links <= {"http://www.w3.org/2000/svg"}  # the SVG namespace is a name, not a fetch


def test_roofline_points_tell_measured_from_estimated(results):
    kernels = [k for k in results["roofline"]["kernels"]
               if (k.get("arithmetic_intensity") or 0) > 0 and (k.get("flops_per_s") or 0) > 0]
    svg = _svg(render_html(results))
    circles = [c for c in svg.getElementsByTagName("circle") if "kernel" in c.getAttribute("class")]
    diamonds = [p for p in svg.getElementsByTagName("polygon") if "kernel" in p.getAttribute("class")]
    assert len(circles) == sum(k["source"].startswith("measured:") for k in kernels)
    assert len(diamonds) == sum(not k["source"].startswith("measured:") for k in kernels)
    assert all(d.getAttribute("fill") == "none" for d in diamonds)  # hollow: never read as a measurement
    tooltips = [n.getElementsByTagName("title")[0].firstChild.data for n in circles + diamonds]
    assert sorted(t.split("\n")[0] for t in tooltips) == sorted(k["name"] for k in kernels)
    # one compute roof per precision the device has a peak for
    roofs = [t.firstChild.data for t in svg.getElementsByTagName("text")
             if t.firstChild and t.firstChild.data.split(" ")[0] in results["device"]["peaks"]["flops_per_s"]]
    assert len(roofs) == len(results["device"]["peaks"]["flops_per_s"])


def test_machine_paths_are_left_out_unless_asked(results):
    results["workload"]["command"] = ["python", "/home/alice/project/train.py", "--data", "C:\\Users\\alice\\d.bin"]
    results["warnings"] = [*results["warnings"], "could not read /home/alice/.cache/x.json"]
    page = render_html(results)
    assert "alice" not in page
    assert "train.py" in page and "x.json" in page
    assert "/home/alice/project/train.py" in render_html(results, include_paths=True)


def test_no_roofline_without_device_peaks(results):
    results["device"]["peaks"] = {}
    page = render_html(results)
    assert "<svg" not in page and "peaks are unknown" in page
