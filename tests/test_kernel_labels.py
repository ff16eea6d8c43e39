"""Kernels told apart on the terminal (issue 27 item 7), on the committed resnet50 H200 capture: cuDNN's
implicit-GEMM kernels differ deep in their names and shortened to one line read the same; each gets the
words that tell it apart, and its launch configuration (grid, block) as the nsys export recorded it."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.cli.received import received
from hybrid.errors import EXIT_USAGE, HybridError
from hybrid.pipeline import analyze_run_dir
from hybrid.report.common import short_name
from hybrid.report.compare import compare_results, render_compare
from hybrid.report.kernel_labels import distinct_labels, launch_text
from hybrid.report.terminal import KERNEL_NAME_WIDTH, render_terminal

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-resnet50"


@pytest.fixture(scope="module")
def resnet() -> dict:
    return analyze_run_dir(RUN)


def _section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 2 : end]


def test_different_kernels_never_share_a_label_in_the_kernel_table(resnet):
    names = [k["name"] for k in resnet["top_kernels"]]
    shortened = [short_name(name, KERNEL_NAME_WIDTH - 20) for name in names]
    assert len(set(shortened)) < len(set(names)), "the capture should hold names that shorten alike"
    rows = _section(render_terminal(resnet, verbose=True, color=False), "Top kernels per step")
    labels = [row.split("  <<<")[0].strip() for row in rows]
    assert len(rows) == len(names) and len(set(labels)) == len(set(names))
    assert any("[tilesize128x32x8]" in label for label in labels)
    assert any("[tilesize256x64x8]" in label for label in labels)


def test_the_launch_configuration_is_the_one_the_export_recorded_most_time_for(resnet):
    with sqlite3.connect(RUN / "nsys" / "profile.sqlite") as con:
        for kernel in resnet["top_kernels"][:4]:
            grid_block = con.execute(
                "SELECT gridX, gridY, gridZ, blockX, blockY, blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON k.demangledName = s.id WHERE s.value = ? "
                'GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY sum(k."end" - k.start) DESC LIMIT 1',
                (kernel["name"],),
            ).fetchone()
            assert [*kernel["grid"], *kernel["block"]] == list(grid_block), kernel["name"]
            configs = con.execute(
                "SELECT count(*) FROM (SELECT DISTINCT gridX, gridY, gridZ, blockX, blockY, blockZ "
                "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON k.demangledName = s.id "
                "WHERE s.value = ?)",
                (kernel["name"],),
            ).fetchone()[0]
            assert 1 <= kernel["launch_configs"] <= configs


def test_launch_text_reads_like_a_cuda_launch():
    assert (
        launch_text({"grid": [36, 7, 32], "block": [8, 8, 1], "launch_configs": 11})
        == "<<<(36,7,32), (8,8)>>> +10"
    )
    assert (
        launch_text({"grid": [25088, 1, 1], "block": [128, 1, 1], "launch_configs": 1}) == "<<<25088, 128>>>"
    )
    assert launch_text({"grid": [-1, 1, 1], "block": [128, 1, 1]}) == "" and launch_text({}) == ""


def test_roofline_points_of_one_name_show_their_own_launches(resnet):
    points = resnet["roofline"]["kernels"]
    same = [p for p in points if p["name"] == points[0]["name"]]
    assert len(same) > 1 and len({launch_text(p) for p in same}) == len(same)
    text = render_terminal(resnet, verbose=True, color=False)
    for point in same:
        assert launch_text(point) in text


def test_a_document_without_launches_still_tells_kernels_apart():
    """results.json written before the launch fields: no launch column, names still distinct."""
    document = json.loads((ROOT / "tests" / "fixtures" / "results" / "h200_resnet50.json").read_text())
    assert not any("grid" in k for k in document["top_kernels"])
    text = render_terminal(document, verbose=True, color=False)
    assert "<<<grid, block>>>" not in text
    names = [k["name"] for k in document["top_kernels"]]
    assert len(set(distinct_labels(names, KERNEL_NAME_WIDTH))) == len(set(names))


def test_the_comparison_tells_the_same_kernels_apart(resnet):
    text = render_compare(compare_results(resnet, resnet))
    lines = [line for line in text.splitlines() if line.startswith("  ")]
    labels = [line.rsplit(": ", 1)[0] for line in lines]
    assert len(labels) == len(set(labels)) == len(resnet["top_kernels"])


def test_identical_names_keep_one_label_and_alike_names_get_numbers():
    assert distinct_labels(["k<1>", "k<1>"], 40) == ["k<1>", "k<1>"]
    twins = ["void f<" + "a" * 80 + ", x>(int)", "void f<" + "a" * 80 + ", x>(long)"]
    labels = distinct_labels(twins, 30)
    assert len(set(labels)) == 2 and all(len(label) <= 40 for label in labels)


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.lists(st.one_of(st.integers(-3, 2**33), st.text(max_size=2)), max_size=4),
)


@settings(
    max_examples=int(os.environ.get("HYBRID_FUZZ_EXAMPLES", "0")) or 40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    changes=st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from(["grid", "block", "launch_configs", "name"]), HOSTILE),
        min_size=1,
        max_size=6,
    )
)
def test_hostile_launch_fields_in_a_received_document_render_or_are_refused(resnet, changes):
    """Any value in the new launch fields or the names of a received results.json: the terminal report and
    the comparison render it, or (as the CLI reads a received file) it is exit 2, never a traceback."""
    document = copy.deepcopy(resnet)
    for index, field, value in changes:
        document["top_kernels"][index % len(document["top_kernels"])][field] = value
        document["roofline"]["kernels"][index % len(document["roofline"]["kernels"])][field] = value
    try:
        with received(Path("results.json")):
            render_terminal(document, verbose=True, color=False)
            render_compare(compare_results(resnet, document))
    except HybridError as error:
        assert error.exit_code == EXIT_USAGE


def test_the_html_page_shows_each_kernels_launch_escaped(resnet):
    from hybrid.report.html_report import render_html

    page = render_html(resnet)
    top = resnet["top_kernels"][0]
    assert "<th>&lt;&lt;&lt;grid, block&gt;&gt;&gt;</th>" in page
    assert launch_text(top).replace("<", "&lt;").replace(">", "&gt;") in page
