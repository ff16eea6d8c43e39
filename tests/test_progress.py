"""The progress view: what a user reads while passes run, on a terminal and in a log."""

from __future__ import annotations

import io

from rich.console import Console
from test_ncu_command import PROFILING_LINES

from hybrid.collect.progress import _View


def _view(live: bool) -> tuple[_View, io.StringIO]:
    out = io.StringIO()
    return _View(Console(file=out, force_terminal=live, width=200), live=live), out


def test_ncu_pass_counts_replayed_launches_against_the_expected_total():
    view, out = _view(live=True)
    view("ncu", "total", "68")
    view("ncu", "start", "replaying 68 launch configurations of 12 kernels")
    for line in ["[hybrid] ncu warmup 1/5", *PROFILING_LINES[:2]]:
        view("ncu", "line", line)
    assert view.status is not None
    shown = str(view.status.renderable.text)
    assert "replayed 2 of ~68 launches" in shown and "sm80_xmma_fprop_implicit_gemm_f3..." in shown
    view("ncu", "end", "ok")
    assert "ok, 2 launches replayed after" in out.getvalue()


def test_a_log_gets_one_line_per_pass_start_and_end_and_no_per_launch_noise():
    view, out = _view(live=False)
    view("ncu", "start", "replaying 3 launch configurations of 2 kernels")
    for line in PROFILING_LINES:
        view("ncu", "line", line)
    view("ncu", "end", "ok")
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 2
    assert lines[1].startswith(
        "hybrid: Nsight Compute pass (hardware counters): ok, 3 launches replayed after"
    )


def test_more_launches_than_expected_drop_the_total_rather_than_read_71_of_69():
    view, _ = _view(live=True)
    view("ncu", "total", "1")
    view("ncu", "start", "replaying 1 launch configuration of 1 kernel")
    for line in PROFILING_LINES[:2]:
        view("ncu", "line", line)
    assert "replayed 2 launches" in str(view.status.renderable.text)
    view("ncu", "end", "ok")


def test_a_kernel_name_with_control_characters_is_shown_escaped():
    # ncu's progress line quotes the kernel name as the program registered it.
    view, _ = _view(live=True)
    view("ncu", "start", "replaying")
    view(
        "ncu", "line", PROFILING_LINES[0].replace("vectorized_elementwise_kernel", "k\x1b]0;title\x07\x1b[2J")
    )
    shown = str(view.status.renderable.text)
    assert "\x1b" not in shown and "\x07" not in shown and "k\\x1b]0;title\\x07\\x1b[2J" in shown
    view("ncu", "end", "ok")
