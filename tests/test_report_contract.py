"""One contract for every renderer (pyinstrument style): whatever the output format, each finding's
title, category and severity and every evidence source is in it, and program strings stay data.
Inputs are every results document in tests/fixtures/results/ (swap or add files there)."""

from __future__ import annotations

import copy
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hybrid.provenance import source_label
from hybrid.report.html_report import render_html
from hybrid.report.json_report import results_to_json
from hybrid.report.terminal import REPORT_WIDTH, render_terminal
from hybrid.schema import missing_keys

RESULTS_DIR = Path(__file__).parent / "fixtures" / "results"
RESULT_FILES = sorted(RESULTS_DIR.glob("*.json"))
ANSI = re.compile(r"\x1b\[")
LAMBDA_KERNEL = "void k<[lambda() (instance 1)]>"
HOSTILE_LAYER = "<img src=x onerror=alert(1)>"
SCREEN_LINES = 60


def _as_json_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


# name -> (render, how a string from the results appears in the output, how a source is worded)
RENDERERS = {
    "terminal": (lambda r: render_terminal(r, color=False), str, source_label),
    "terminal-verbose": (lambda r: render_terminal(r, color=False, verbose=True), str, source_label),
    "json": (results_to_json, _as_json_text, str),
    "html": (render_html, html.escape, source_label),
}


def _load(path: Path) -> dict:
    results = json.loads(path.read_text())
    assert missing_keys(results) == [], f"{path.name} breaks the results.json contract"
    return results


def test_there_are_results_documents_to_render():
    assert RESULT_FILES, f"no results documents in {RESULTS_DIR}"


@pytest.fixture(params=RESULT_FILES, ids=lambda p: p.stem)
def results(request) -> dict:
    return _load(request.param)


@pytest.mark.parametrize("renderer", RENDERERS)
def test_every_finding_and_source_is_rendered(results, renderer):
    render, encode, wording = RENDERERS[renderer]
    output = render(results)
    findings = results["diagnosis"]["bottlenecks"]
    assert findings, "a contract test over a document without findings proves nothing"
    for finding in findings:
        for key in ("title", "category", "severity"):
            assert encode(finding[key]) in output, f"{renderer} lost {key} of {finding['id']}"
        for evidence in finding["evidence"]:
            assert wording(evidence["source"]) in output, f"{renderer} lost source {evidence['source']}"


def _with_hostile_names(results: dict) -> dict:
    doc = copy.deepcopy(results)
    doc["top_kernels"][0]["name"] = LAMBDA_KERNEL
    doc["roofline"]["kernels"][0]["name"] = LAMBDA_KERNEL
    doc["layers"] = [{"name": HOSTILE_LAYER, "gpu_ms": 1.5, "kernels": 3, "share_pct": 40.0,
                      "source": "measured:nsys"}]
    primary = doc["diagnosis"]["bottlenecks"][0]
    primary["evidence"].append({"label": "slowest kernel", "value": LAMBDA_KERNEL, "unit": "",
                                "source": "measured:nsys"})
    primary["evidence"].insert(0, {"label": "slowest layer", "value": HOSTILE_LAYER, "unit": "",
                                   "source": "measured:nsys"})
    return doc


def test_terminal_prints_program_names_literally(results):
    doc = _with_hostile_names(results)
    for output in (render_terminal(doc, color=False, verbose=True), render_terminal(doc, color=True, verbose=True)):
        plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
        assert LAMBDA_KERNEL in plain  # rich markup would have eaten "[lambda() (instance 1)]"
        assert HOSTILE_LAYER in plain


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))


def test_html_escapes_program_names(results):
    page = render_html(_with_hostile_names(results))
    assert HOSTILE_LAYER not in page
    assert html.escape(HOSTILE_LAYER) in page
    assert html.escape(LAMBDA_KERNEL) in page
    parser = _Tags()
    parser.feed(page)
    tags = {tag for tag, _ in parser.tags}
    assert "img" not in tags and "script" not in tags
    handlers = [(tag, name) for tag, attrs in parser.tags for name, _ in attrs if name.startswith("on")]
    assert handlers == []


def test_no_color_means_no_ansi(results, monkeypatch):
    assert ANSI.search(render_terminal(results, color=True)), "colour on must emit ANSI, else this test is moot"
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI.search(render_terminal(results, color=None))
    assert not ANSI.search(render_terminal(results, color=True, verbose=True))


def test_not_a_tty_means_no_ansi(results, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("sys.stdout", open("/dev/null", "w"))  # noqa: SIM115 - closed with the test process
    assert not ANSI.search(render_terminal(results))


def _with_findings(results: dict, count: int) -> dict:
    doc = copy.deepcopy(results)
    real = doc["diagnosis"]["bottlenecks"]
    findings = []
    for index in range(count):
        finding = copy.deepcopy(real[index % len(real)])
        finding["id"] = f"{finding['id']}.{index}"
        finding["title"] = f"{finding['title']} (#{index})"
        findings.append(finding)
    doc["diagnosis"]["bottlenecks"] = findings
    return doc


def test_default_terminal_report_fits_one_screen(results):
    doc = _with_findings(results, 12)
    output = render_terminal(doc, color=False)
    lines = output.splitlines()
    assert len(lines) <= SCREEN_LINES, output
    assert max(map(len, lines)) <= REPORT_WIDTH
    for finding in doc["diagnosis"]["bottlenecks"]:
        assert finding["title"] in output
    verbose = render_terminal(doc, color=False, verbose=True)
    assert len(verbose.splitlines()) > len(lines)  # verbose shows every finding in full
