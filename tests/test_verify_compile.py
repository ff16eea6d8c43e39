"""`hybrid run --verify`'s compile fixes where the step calls no module with parameters: the stepped function
is compiled, in a real plain window on the CPU (torch.compile runs there)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

from hybrid.analysis import verified
from hybrid.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]


PLANTED_UNFUSED = ROOT / "benchmarks" / "planted" / "graph_unfused_small_ops.py"


def _fix_run(tmp_path: Path, fix: str, script: Path, *script_args: str) -> tuple[dict, dict, str]:
    """One plain window of `script` with `fix` applied, as hybrid.collect.verify runs a compiled fix (its
    minimum warmup, then until step times settle); what verified.realized makes of it, the run's inject.json
    and its stderr."""
    switch = verified.SWITCH_BY_NAME[fix]
    name = f"verify-{fix}"
    argv = inject_argv(
        tmp_path / name, "plain", str(script), warmup=switch.min_warmup, flags=["--apply-fix", fix]
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [*argv, *script_args], check=False, capture_output=True, text=True, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr
    inject = json.loads((tmp_path / name / "inject.json").read_text())
    reference = {"step_ms": 1.0, "warmup": inject["warmup_dropped"], "steps": 3, "folder": "none"}
    record = {"fix": fix, "status": "ok", "pass": name}
    return verified.realized(RunDir(tmp_path), record, reference), inject, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fix", ["compile", "compile_reduce_overhead"])
def test_the_compile_fixes_compile_the_stepped_function_of_a_step_without_modules(tmp_path, fix):
    """graph_unfused_small_ops (CPU sizes) calls a plain `mlp_layer(h, *weights)` 12 times a step and no
    module: on the H200 both compile fixes read "not applied: the script built nothing the fix acts on". The
    function the step spends most time in is compiled through its module-level name, the window measures it
    compiled, and the run ends at its step limit without waiting on Inductor's idle compile threads. On the
    CPU inductor runs reduce-overhead's graphs without CUDA graphs, which the reading says instead of a
    saving."""
    outcome, inject, stderr = _fix_run(tmp_path, fix, PLANTED_UNFUSED, "--device", "cpu")
    if fix == "compile_reduce_overhead":
        assert outcome["status"] == "not applied", outcome
        assert "without CUDA graphs: no reason given (graphs off the GPU)" in outcome["reason"]
    else:
        assert outcome["status"] == "realized", outcome
    (action,) = outcome["actions"]
    mode = "mode='reduce-overhead'" if fix == "compile_reduce_overhead" else ""
    assert action.startswith(f"mlp_layer() compiled with torch.compile({mode})")
    assert "over 12 call(s)" in action and action.endswith("called through mlp_layer")
    compiled = inject["config"]["compile"]
    assert compiled["graphs_compiled"] >= 1 and compiled["calls"][0]["target"] == "function"
    # Compiled after the second step, compiling in the third: the window opens after the minimum warmup, and
    # compiling (seconds on the CPU) falls in the warmup, not in a measured step (about 2 ms each). A measured
    # step that compiled would hold those seconds, and the warmup only milliseconds; a loaded box stalls a
    # step too, but for less than the compile (the full suite on 2 cores: 404 ms against a 6.2 s warmup).
    assert inject["warmup_dropped"] >= verified.SWITCH_BY_NAME[fix].min_warmup
    ends_ms = [0.0] + [ns / 1e6 for ns in inject["step_end_ns"]]
    slowest_ms = max(b - a for a, b in itertools.pairwise(ends_ms))
    warmup_ms = inject["unprofiled_step_time_ms"] * inject["unprofiled_steps"]
    assert warmup_ms > 2 * slowest_ms, (warmup_ms, slowest_ms)
    assert "still ran" not in stderr


def test_a_stepped_function_no_module_level_name_holds_is_not_compiled_and_says_why(tmp_path):
    script = ROOT / "tests" / "scripts" / "stepped_function.py"
    outcome, inject, _stderr = _fix_run(tmp_path, "compile", script)
    assert outcome["status"] == "not applied"
    assert "Layers.layer()" in outcome["reason"] and "no module-level name" in outcome["reason"]
    assert inject["config"]["compile"]["used"] is False


def test_a_compile_that_compiled_no_graph_is_no_saving(tmp_path):
    """Two compile fixes on the H100 (Python 3.12) compiled the stepped nn.Sequential and dynamo compiled no
    graph: their eager windows read as the compile's realized saving (-0.1 and -0.5 ms against 5.6 and 1.8
    predicted). A forward dynamo must skip (torch.compiler.disable) does the same on the CPU: the fix acts,
    the run records no graph, and the reading is "not applied" with that reason, not a saving."""
    script = ROOT / "tests" / "scripts" / "compile_disabled_forward.py"
    outcome, inject, _stderr = _fix_run(tmp_path, "compile", script)
    assert outcome["actions"] == ["Model.compile() at its first call"]
    assert inject["config"]["compile"]["graphs_compiled"] == 0
    assert outcome["status"] == "not applied"
    assert "compiled no graph" in outcome["reason"] and "realized_ms" not in outcome


def test_cuda_graphs_skipped_for_every_graph_are_no_reduce_overhead_saving():
    """Where inductor ran every compiled graph without CUDA graphs, the reduce-overhead window timed the
    default compile: not the fix. Where some graphs kept them, the window timed part of it and stands."""
    from hybrid.rules.advice import RunConfig

    switch = verified.SWITCH_BY_NAME["compile_reduce_overhead"]
    reason = "skipping cudagraphs due to mutated inputs (2 instances)"
    every = {"compile": {"graphs_compiled": 1, "cudagraph_skips": 2, "cudagraph_skip_reasons": [reason]}}
    assert switch.ineffective(RunConfig(every)).endswith("its 1 graph(s) without CUDA graphs: " + reason)
    # A training graph's forward kept its CUDA graphs where its backward lost them: one dynamo graph, two
    # inductor graphs.
    some = {
        "compile": {
            "graphs_compiled": 1,
            "inductor_graphs": 2,
            "cudagraph_skips": 1,
            "cudagraph_skip_reasons": [reason],
        }
    }
    assert switch.ineffective(RunConfig(some)) is None
    assert "compiled no graph" in switch.ineffective(RunConfig({"compile": {"graphs_compiled": 0}}))
    # A run recorded before these counters existed says nothing either way.
    assert switch.ineffective(RunConfig({"compile": {"used": True}})) is None
