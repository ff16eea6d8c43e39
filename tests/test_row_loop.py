"""A Python loop over the rows of a tensor (hybrid.analysis.row_loop) in the two planted scripts that loop
over samples (a per-sample loss, batch-1 requests), advised first, with its evidence, by their launch
findings: batching the loop is their planted twin fix, where CUDA graphs of the model leave the loop in
place. That no other committed capture has such a loop is checked in tests/test_one_cause.py, which analyzes
them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.analysis.row_loop import row_loop
from hybrid.load.torch_trace import load_torch_trace
from hybrid.pipeline import analyze_run_dir

FIXTURES = Path(__file__).parent / "fixtures"
LOOPS = {
    "planted/launch_per_sample_loss/run": (512, "aten::select", "(512,)", "aten::cross_entropy_loss ×512"),
    "planted/launch_batch1_deep_mlp/run": (64, "aten::slice", "(64, 256)", "aten::linear ×2048"),
}


def test_the_planted_loops_are_found_with_their_rows_and_ops():
    for name, (rows, op, shape, first_op) in LOOPS.items():
        ops = load_torch_trace(FIXTURES / name / "torch" / "trace.json.gz").ops
        top = ops[ops["top_level"] & (ops["step"] >= 0)]
        loop = row_loop(top, top["step"].nunique())
        assert loop is not None, name
        assert (loop.rows, loop.indexing_op, loop.tensor_text()) == (rows, op, shape)
        assert loop.ops_text().startswith(first_op)
        assert loop.host_ms > 0


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_batching_the_loop_leads_the_launch_advice(name):
    rows, op, shape, first_op = LOOPS[name]
    results = analyze_run_dir(FIXTURES / name)
    metrics = results["metrics"]
    assert metrics["row_loop_rows"]["value"] == rows
    assert metrics["row_loop_rows"]["source"] == "measured:torch"
    launch = next(f for f in results["diagnosis"]["bottlenecks"] if f["id"].startswith("launch."))
    first = launch["advice"][0]
    assert first["text"].startswith(f"Batch the Python loop over the {rows} rows")
    assert f"indexes {op} of a {shape} tensor {rows} times" in first["condition"]
    assert first_op in first["condition"]
    assert first_op.split(" ×")[0] in first["applies_to"]
    # CUDA graphs of the model come after: they leave the script's loop as it is.
    assert any("reduce-overhead" in a["text"] for a in launch["advice"][1:])


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_verify_does_not_time_graphs_of_the_model_for_a_loop_in_the_script(name):
    """--verify would compile the stepped module with reduce-overhead, which leaves the loop in the script (on
    the H200 the per-sample loss ran 11.4 ms a step slower for a predicted 52.9 ms saved): it says why it
    passes the launch finding over instead."""
    from hybrid.collect.verify import plan
    from hybrid.rules.advice import config_of, observed_config
    from hybrid.rundir import RunDir

    run = FIXTURES / name
    results = analyze_run_dir(run)
    # as --verify reads it (the capture predates the recorded config: the timeline's observations hold)
    config = config_of(RunDir(run).read_inject("torch") or {}, observed_config(results["metrics"]))
    planned, skipped = plan(results, 3, config)
    assert "compile_reduce_overhead" not in [p.switch.name for p in planned]
    (launch,) = [s for s in skipped if s["finding"].startswith("launch.")]
    rows = LOOPS[name][0]
    assert f"a Python loop over {rows} rows in the script" in launch["reason"]
