"""Terminal report details on real data: kernel names from a real nsys export shortened to what identifies
them; the roofline, metric counts, passes and tables of the real H200 results documents."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from hybrid.report.common import format_value, short_name
from hybrid.report.terminal import render_terminal

EXPORT = Path(__file__).parent / "fixtures" / "h200-probe" / "nsys_matmul_copy.sqlite"


def _kernel_names() -> list[str]:
    with sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True) as db:
        return [
            row[0]
            for row in db.execute(
                "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.demangledName"
            )
        ]


def test_long_template_names_keep_the_identifying_part():
    names = _kernel_names()
    shortened = {short_name(name) for name in names}
    assert all(len(name) <= 72 for name in shortened)
    assert "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT" in shortened  # short names pass unchanged
    assert "vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<...>, array<...>>" in shortened
    assert "reduce_kernel<512, 1, ReduceOp<...>>" in shortened


RESULT_FILES = sorted((Path(__file__).parent / "fixtures" / "results").glob("*.json"))
GPU_FILES = [p for p in RESULT_FILES if json.loads(p.read_text())["roofline"]["bound"] is not None]


@pytest.fixture(params=GPU_FILES, ids=lambda p: p.stem)
def gpu_results(request) -> dict:
    return json.loads(request.param.read_text())


def _summary(output: str) -> str:
    return re.sub(r"\s+", " ", output.split("Bottlenecks")[0])


def test_roofline_is_placed_against_the_peaks(gpu_results):
    roof, peaks = gpu_results["roofline"], gpu_results["device"]["peaks"]
    summary = _summary(render_terminal(gpu_results, color=False))
    compute_pct = 100 * roof["flops_per_s"] / peaks["flops_per_s"][roof["precision"]]["value"]
    dram_pct = 100 * roof["bytes_per_s"] / peaks["dram_bytes_per_s"]["value"]
    assert f"{format_value(roof['flops_per_s'], 'FLOP/s')} = {format_value(compute_pct, '%')} of" in summary
    assert f"DRAM {format_value(roof['bytes_per_s'], 'B/s')} = {format_value(dram_pct, '%')} of" in summary
    assert "n/a" not in summary  # every summary number of a real H200 run is known


def test_metric_count_line_matches_the_metrics(gpu_results):
    sources = Counter(m["source"] for m in gpu_results["metrics"].values())
    measured = sum(n for s, n in sources.items() if s.startswith("measured:"))
    summary = _summary(render_terminal(gpu_results, color=False))
    assert f"Metrics: {measured} measured (" in summary
    for source, count in sources.items():
        expected = (
            f"{source.split(':')[1]} {count}" if source.startswith("measured:") else f"{count} {source}"
        )
        assert expected in summary
    assert "estimated:" not in summary  # no list of metric names


def test_ncu_pass_reads_as_replay_not_overhead(gpu_results):
    output = re.sub(r"\s+", " ", render_terminal(gpu_results, color=False))
    passes = {p["name"]: p for p in gpu_results["passes"]}
    assert (
        f"ncu ({format_value(passes['ncu']['wall_s'], 's')}, replay "
        f"{format_value(passes['ncu']['step_time_ms'] / 1000, 's')}/step)" in output
    )
    overhead = passes["nsys"]["overhead_pct"]
    if overhead is None:  # measured only against a plain pass (--baseline)
        assert not re.search(r"overhead [+-]\d", output)
    else:
        assert f"overhead {overhead:+.1f}%" in output


def test_verbose_tables_use_the_real_columns(gpu_results):
    verbose = render_terminal(gpu_results, color=False, verbose=True)
    first = gpu_results["top_kernels"][0]
    row = next(line for line in verbose.splitlines() if line.startswith(short_name(first["name"], 60)[:30]))
    assert (
        format_value(first["total_ms_per_step"], "ms") in row and format_value(first["share_pct"], "%") in row
    )
    for layer in gpu_results["layers"][:5]:
        row = next(line for line in verbose.splitlines() if line.split(" ")[0] == layer["name"])
        assert format_value(layer["share_of_step_pct"], "%") in row
    assert "All metrics" in verbose and all(name in verbose for name in gpu_results["metrics"])
