"""`hybrid compare` as CI runs it (real subprocesses, documents analyzed from the committed H200 captures):
different programs are refused unless told, a figure no measurement gives is refused naming it, the gate's
three outcomes have three exit codes (0 pass, 1 regressed, 5 undecided), and `--fail-on` names the
findings that tripped it. Hypothesis drives hostile timing figures through the gate: none may pass."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from hybrid_cli import run_hybrid
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.errors import EXIT_FINDING_AT_OR_ABOVE, EXIT_GATE_UNDECIDED, EXIT_USAGE
from hybrid.pipeline import analyze_export
from hybrid.report.compare import compare_results, gate

ROOT = Path(__file__).resolve().parent.parent
BARE = ROOT / "tests" / "fixtures" / "bare"
RESULTS = ROOT / "tests" / "fixtures" / "results" / "h200_simple_cnn.json"


def hybrid(*args: str) -> subprocess.CompletedProcess:
    return run_hybrid(*args, timeout=120)


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """results.json of four bare nsys exports (no hybrid involved in the capture: no program recorded)."""
    folder = tmp_path_factory.mktemp("bare")
    out = {}
    names = ("main_while_gather", "nested_gemm_loops", "dataloader_eval_loop", "torchvision_resnet_infer")
    for name in names:
        out[name] = folder / f"{name}.json"
        out[name].write_text(json.dumps(analyze_export(BARE / f"{name}.sqlite"), default=str))
    return out


def test_unrelated_bare_exports_are_refused_unless_told(exports):
    """main_while_gather (0.84 ms a step) against nested_gemm_loops (0.42 ms): they share no kernel, and
    compared as the same program read "-50% faster" with exit 0."""
    a, b = str(exports["main_while_gather"]), str(exports["nested_gemm_loops"])
    refused = hybrid("compare", a, b, "--fail-on-regression", "5")
    assert refused.returncode == EXIT_USAGE, refused.stderr
    assert "programs cannot be told the same" in refused.stderr and "--allow-different" in refused.stderr
    assert refused.stdout == ""
    told = hybrid("compare", a, b, "--allow-different")
    assert told.returncode == 0, told.stderr
    assert told.stdout.startswith("WARNING: programs cannot be told the same")
    gated = hybrid("compare", a, b, "--allow-different", "--fail-on-regression", "5")
    assert gated.returncode == EXIT_GATE_UNDECIDED and "different workloads" in gated.stderr


def test_exports_sharing_most_kernel_time_are_taken_as_one_program_and_said_so(exports):
    """Both run torchvision's resnet50 forward (the second with a DataLoader): 87% of the kernel time is in
    kernels both ran, so they compare, with a note saying how the program was matched."""
    done = hybrid("compare", str(exports["torchvision_resnet_infer"]), str(exports["dataloader_eval_loop"]))
    assert done.returncode == 0, done.stderr
    assert "taken as the same program because" in done.stdout


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("step_time_ms", -3.2, "timing.step_time_ms is -3.2"),
        ("step_time_ms", 0, "timing.step_time_ms is 0"),
        ("step_time_std_ms", -0.1, "timing.step_time_std_ms is -0.1"),
        ("step_times_ms", [3.9, -1.0, 4.0], "timing.step_times_ms holds values that are not positive"),
        ("step_times_ms", [1.0, 1.0], "one of them was changed"),
    ],
)
def test_a_step_figure_no_measurement_gives_is_refused_naming_it(tmp_path, field, value, said):
    document = json.loads(RESULTS.read_text())
    document["timing"][field] = value
    candidate = tmp_path / "results.json"
    candidate.write_text(json.dumps(document))
    done = hybrid("compare", str(RESULTS), str(candidate), "--fail-on-regression", "5")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert said in done.stderr and str(candidate) in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("factor", "code", "said"),
    [
        (1.001, 0, "regression gate passed"),
        (1.26, EXIT_FINDING_AT_OR_ABOVE, "regression gate failed: step time 3.87 ms -> 4.88 ms: +26%"),
        (1.02, EXIT_GATE_UNDECIDED, "regression gate undecided"),
    ],
)
def test_the_gate_has_an_exit_code_per_outcome(tmp_path, factor, code, said):
    """simple_cnn's 50 steps (3.87 ± 0.32 ms): +0.1% passes, +26% fails (the review's case, once
    "unchanged"), and +2% against a 1% threshold is within what the noise can make: undecided."""
    document = json.loads(RESULTS.read_text())
    document["timing"]["step_time_ms"] *= factor
    candidate = tmp_path / "results.json"
    candidate.write_text(json.dumps(document))
    done = hybrid("compare", str(RESULTS), str(candidate), "--fail-on-regression", "1")
    assert done.returncode == code, done.stderr
    assert said in done.stderr and "95% CI" in done.stderr


def test_fail_on_names_the_findings_that_tripped_it():
    document = json.loads(RESULTS.read_text())
    severe = [f for f in document["diagnosis"]["bottlenecks"] if f["severity"] in ("CRITICAL", "SEVERE")]
    done = hybrid("report", str(RESULTS), "--fail-on", "SEVERE")
    assert done.returncode == EXIT_FINDING_AT_OR_ABOVE, done.stderr
    assert severe and all(f"] {f['id']}: " in done.stderr for f in severe)
    assert done.stderr.count("--fail-on SEVERE: [") == len(severe)


TIMING = json.loads(RESULTS.read_text())
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4),
    st.lists(st.integers(-5, 5), max_size=4),
)


@settings(
    max_examples=int(os.environ.get("HYBRID_FUZZ_EXAMPLES", "0")) or 60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    changes=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "step_time_ms",
                    "step_time_std_ms",
                    "step_times_ms",
                    "baseline_step_time_ms",
                    "baseline_step_times_ms",
                    "steps_measured",
                    "steps_excluded",
                ]
            ),
            HOSTILE,
        ),
        min_size=1,
        max_size=3,
    ),
    side=st.sampled_from(["a", "b"]),
)
def test_hostile_step_figures_never_pass_the_gate_unseen(changes, side):
    """Any value in any figure the gate reads: the comparison either names it as a problem (the CLI refuses,
    exit 2) or decides on valid positive numbers; it never raises and never passes on a bad figure."""
    damaged = copy.deepcopy(TIMING)
    for field, value in changes:
        (damaged["workload"] if field == "steps_measured" else damaged["timing"])[field] = value
    pair = (TIMING, damaged) if side == "a" else (damaged, TIMING)
    diff = compare_results(*pair)
    decided = gate(diff, 5.0)
    if not diff["problems"][side]:
        return
    step = diff["step_time_ms"]
    assert decided["outcome"] != "pass" or (
        step["a"] is not None and step["b"] is not None and step["a"] > 0 and step["b"] > 0
    )
    for figure in (step["a"], step["b"]):
        assert figure is None or (math.isfinite(figure) and figure > 0)


@pytest.mark.parametrize(("field", "value"), [("severity", "critical"), ("severity", None)])
def test_fail_on_refuses_a_finding_it_cannot_weigh(tmp_path, field, value):
    """A lower-case or missing severity let a CRITICAL finding pass --fail-on unseen. (A not_measured that
    is not true/false is dropped on load, with a warning: the finding then counts as measured.)"""
    document = json.loads(RESULTS.read_text())
    document["diagnosis"]["bottlenecks"][0][field] = value
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    done = hybrid("report", str(path), "--fail-on", "LOW")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "--fail-on cannot weigh 1 finding(s)" in done.stderr
    assert document["diagnosis"]["bottlenecks"][0]["id"] in done.stderr
    assert hybrid("report", str(path)).returncode == 0  # without the gate, it is shown as it is


@pytest.mark.parametrize("literal", ["1" + "0" * 400, "-" + "9" * 5000, "1e999", "NaN", "-Infinity"])
def test_numbers_beyond_a_float_in_a_received_document_are_no_measurement(tmp_path, literal):
    """JSON allows integers of any length (10**400 made float() raise OverflowError: a traceback) and Python
    reads NaN and Infinity: the report shows such a step time as n/a, compare refuses it naming the field."""
    text = RESULTS.read_text()
    stated = json.dumps(json.loads(text)["timing"]["step_time_ms"])
    path = tmp_path / "results.json"
    path.write_text(text.replace(f'"step_time_ms": {stated}', f'"step_time_ms": {literal}', 1))
    shown = hybrid("report", str(path), "--verbose")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    refused = hybrid("compare", str(RESULTS), str(path), "--fail-on-regression", "5")
    assert refused.returncode == EXIT_USAGE and "timing.step_time_ms is" in refused.stderr, refused.stderr


def test_a_run_directory_never_analyzed_says_how_to_compare_it(tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn", run)
    done = hybrid("compare", str(run), str(RESULTS))
    assert (
        done.returncode == EXIT_USAGE
        and f"analyze it first with `hybrid report {run} --out {run}`" in done.stderr
    )
