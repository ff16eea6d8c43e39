"""One contract for every renderer (pyinstrument style): whatever the output format, each finding's
title, severity and time lost is in it, and its category in every full rendering (the default terminal
report leaves it to --verbose), every evidence source is in the full renderings (the
default terminal report shows the evidence of its top findings only), and program strings stay data.
Inputs are the real results documents in tests/fixtures/results/ (regenerate.sh there re-analyzes the
H200 runs they come from)."""

from __future__ import annotations

import copy
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hybrid.provenance import source_label
from hybrid.report.common import findings_by_impact, format_value
from hybrid.report.html_report import render_html
from hybrid.report.json_report import results_to_json
from hybrid.report.terminal import (
    EVIDENCE_DEFAULT,
    FINDING_ROWS_DEFAULT,
    FULL_FINDINGS_DEFAULT,
    REPORT_WIDTH,
    render_terminal,
)
from hybrid.schema import missing_keys

RESULTS_DIR = Path(__file__).parent / "fixtures" / "results"
RESULT_FILES = sorted(RESULTS_DIR.glob("*.json"))
ANSI = re.compile(r"\x1b\[")
LAMBDA_KERNEL = "void k<[lambda() (instance 1)]>"
HOSTILE_LAYER = "<img src=x onerror=alert(1)>"
SCREEN_LINES = 45  # one screen of the default report, at REPORT_WIDTH columns, on the real documents
SCREEN_LINES_12_FINDINGS = 50  # a dozen findings cost one line each beyond the expanded ones


def _as_json_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


# name -> (render, how a string from the results appears in the output, how a source is worded,
#          how many ranked findings are listed, how many show evidence and how many items each: None for all)
RENDERERS = {
    "terminal": (
        lambda r: render_terminal(r, color=False),
        str,
        source_label,
        (FINDING_ROWS_DEFAULT, FULL_FINDINGS_DEFAULT, EVIDENCE_DEFAULT),
    ),
    "terminal-verbose": (lambda r: render_terminal(r, color=False, verbose=True), str, source_label, None),
    "json": (results_to_json, _as_json_text, str, None),
    "html": (render_html, html.escape, source_label, None),
}
# The finding's fields each renderer shows: the default terminal report files no category (the title says
# what is wrong; the category is --verbose's, one screen being the default's budget).
SHOWN_KEYS = {name: ("title", "category", "severity") for name in RENDERERS} | {
    "terminal": ("title", "severity")
}


def _unwrapped(text: str) -> str:
    """The terminal output with line wraps and their indentation undone, so a wrapped title still matches."""
    return re.sub(r"\s+", " ", text)


def _load(path: Path) -> dict:
    results = json.loads(path.read_text())
    assert missing_keys(results) == [], f"{path.name} breaks the results.json contract"
    return results


def test_there_are_results_documents_to_render():
    documents = [_load(path) for path in RESULT_FILES]
    assert {doc["mode"] for doc in documents} >= {"hybrid", "cpu-only"}, "a GPU run and a CPU run at least"
    assert any(len(doc["diagnosis"]["bottlenecks"]) > 2 * FULL_FINDINGS_DEFAULT for doc in documents), (
        "one document should have more findings than the default report expands"
    )


@pytest.fixture(params=RESULT_FILES, ids=lambda p: p.stem)
def results(request) -> dict:
    return _load(request.param)


@pytest.mark.parametrize("renderer", RENDERERS)
def test_every_finding_and_source_is_rendered(results, renderer):
    render, encode, wording, shown = RENDERERS[renderer]
    output = render(results)
    if renderer.startswith("terminal"):
        output = _unwrapped(output)
    findings = findings_by_impact(results)
    listed, expanded, evidence_items = shown or (len(findings), len(findings), None)
    for number, finding in enumerate(findings[:listed], start=1):
        for key in SHOWN_KEYS[renderer]:
            assert encode(finding[key]) in output, f"{renderer} lost {key} of {finding['id']}"
        if renderer != "json":
            assert format_value(finding["time_lost_ms"], "ms") in output, (
                f"{renderer} lost time lost of {finding['id']}"
            )
        if number <= expanded:
            for evidence in finding["evidence"][:evidence_items]:
                assert wording(evidence["source"]) in output, f"{renderer} lost source {evidence['source']}"
    if len(findings) > listed:
        assert f"+ {len(findings) - listed} more" in output
    if not findings and renderer != "json":
        assert "none detected" in output.lower()


def _with_hostile_names(results: dict) -> dict:
    """The document with program strings that are markup in rich and in HTML, in every place a renderer
    shows a name: top kernels, roofline kernels, layers, a finding's evidence."""
    doc = copy.deepcopy(results)
    doc["top_kernels"] = [
        {
            "name": LAMBDA_KERNEL,
            "calls_per_step": 4.0,
            "total_ms_per_step": 1.2,
            "mean_us": 300.0,
            "share_pct": 10.0,
            "source": "measured:nsys",
        },
        *doc["top_kernels"][1:],
    ]
    doc["roofline"]["kernels"] = [
        {
            "name": LAMBDA_KERNEL,
            "ai": 2.0,
            "l2_ai": 1.0,
            "flops_per_s": 1e12,
            "bytes_per_s": 5e11,
            "time_ms": 0.5,
            "bound": "memory",
            "precision": "fp32",
            "achieved_pct_of_attainable": 10.0,
            "source": "measured:ncu",
        },
        *doc["roofline"]["kernels"][1:],
    ]
    doc["layers"] = [
        {
            "name": HOSTILE_LAYER,
            "gpu_ms": 1.5,
            "kernels": 3,
            "share_of_step_pct": 40.0,
            "source": "measured:nsys",
        }
    ]
    evidence = [
        {"label": "slowest layer", "value": HOSTILE_LAYER, "unit": "", "source": "measured:nsys"},
        {"label": "slowest kernel", "value": LAMBDA_KERNEL, "unit": "", "source": "measured:nsys"},
    ]
    findings = doc["diagnosis"]["bottlenecks"]
    if findings:
        findings[0]["evidence"][:0] = evidence
    else:
        findings.append(
            {
                "id": "test.hostile",
                "title": "hostile",
                "category": "KERNEL_LAUNCH",
                "severity": "LOW",
                "evidence": evidence,
                "explanation": "",
                "suggestions": [],
                "time_lost_ms": 0.0,
                "time_lost_pct": 0.0,
            }
        )
    return doc


def test_terminal_prints_program_names_literally(results):
    doc = _with_hostile_names(results)
    for output in (
        render_terminal(doc, color=False, verbose=True),
        render_terminal(doc, color=True, verbose=True),
    ):
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
    assert ANSI.search(render_terminal(results, color=True)), (
        "colour on must emit ANSI, else this test is moot"
    )
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
        finding["id"] = f"{finding['id']}.{index}"  # titles stay real: their length is what wraps
        findings.append(finding)
    doc["diagnosis"]["bottlenecks"] = findings
    return doc


def test_default_terminal_report_fits_one_screen(results):
    output = render_terminal(results, color=False)
    lines = output.splitlines()
    assert len(lines) <= SCREEN_LINES, output
    assert max(map(len, lines)) <= REPORT_WIDTH


def test_a_dozen_findings_still_fit_and_verbose_shows_more(results):
    if not results["diagnosis"]["bottlenecks"]:
        pytest.skip("no finding to repeat in this document")
    doc = _with_findings(results, 12)
    output = render_terminal(doc, color=False)
    lines = output.splitlines()
    assert len(lines) <= SCREEN_LINES_12_FINDINGS, output
    assert max(map(len, lines)) <= REPORT_WIDTH
    ranked = findings_by_impact(doc)
    for finding in ranked[:FINDING_ROWS_DEFAULT]:
        assert finding["title"] in _unwrapped(output)
    assert f"+ {len(ranked) - FINDING_ROWS_DEFAULT} more" in output
    verbose = render_terminal(doc, color=False, verbose=True)
    assert len(verbose.splitlines()) > len(lines)
    for finding in doc["diagnosis"]["bottlenecks"]:  # verbose shows every finding in full
        for fix in finding["suggestions"]:
            assert _unwrapped(fix) in _unwrapped(verbose)
