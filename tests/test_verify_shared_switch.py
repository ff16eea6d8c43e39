"""One switch, several findings: torch.compile both fuses elementwise chains and (Inductor's shape_padding)
pads misaligned fp16 GEMMs, so tensor.misaligned_dims now declares it too and `--verify` runs it once for
both. On the H200 the compiled run of tc_fp16_unaligned saved 14.9 ms a step where the elementwise chains
alone predicted 2.4 ms (tests/fixtures/verify/tc_fp16_unaligned_compile, captured before the misaligned
finding declared the switch): the realized saving is compared with the sum of the two predictions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hybrid.analysis.verified import relative_error
from hybrid.collect.verify import plan
from hybrid.pipeline import analyze_run_dir
from hybrid.report.verified import verify_line
from hybrid.rules.advice import config_of, observed_config
from hybrid.rundir import RunDir

CAPTURE = Path(__file__).parent / "fixtures" / "verify" / "tc_fp16_unaligned_compile" / "run"


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict:
    """The capture's verify record as today's plan writes it (both findings on the compile switch), then
    the run analyzed again."""
    run = tmp_path_factory.mktemp("shared") / "run"
    shutil.copytree(CAPTURE, run)
    results = analyze_run_dir(run)
    config = config_of(RunDir(run).read_inject("torch"), observed_config(results["metrics"]))
    planned, _skipped = plan(results, 3, config)
    (compiled,) = [p for p in planned if p.switch.name == "compile"]
    record = json.loads((run / "run.json").read_text())
    fix = record["verify"]["fixes"][0]
    assert fix["fix"] == "compile" and fix["status"] == "ok"
    fix["findings"], fix["predicted_ms"] = list(compiled.predicted_ms), compiled.predicted_ms
    (run / "run.json").write_text(json.dumps(record))
    return analyze_run_dir(run)


def test_both_findings_are_verified_by_one_run_of_the_switch(shared):
    verified = {f["id"]: f["verify"] for f in shared["diagnosis"]["bottlenecks"] if f.get("verify")}
    assert set(verified) == {"tensor.misaligned_dims", "compile.fusible_elementwise"}
    misaligned, chains = verified["tensor.misaligned_dims"], verified["compile.fusible_elementwise"]
    assert misaligned["pass"] == chains["pass"] == "verify-compile"
    assert misaligned["realized_ms"] == chains["realized_ms"] == pytest.approx(14.9, abs=0.1)
    total = misaligned["predicted_ms"] + chains["predicted_ms"]
    assert misaligned["fix_predicted_ms"] == chains["fix_predicted_ms"] == pytest.approx(total)
    # The run's error is the switch's, scored once on the sum.
    summary = shared["diagnosis"]["verify_summary"]
    assert summary["error_findings"] == 1
    expected = relative_error(total, misaligned["realized_ms"], misaligned["step_before_ms"])
    assert summary["median_error_pct"] == pytest.approx(100 * expected)
    finding = next(f for f in shared["diagnosis"]["bottlenecks"] if f["id"] == "compile.fusible_elementwise")
    assert "with the other findings it fixes: tensor.misaligned_dims" in verify_line(finding)


def test_each_finding_is_ranked_on_its_share_of_what_the_switch_realized(shared):
    verified = {f["id"]: f for f in shared["diagnosis"]["bottlenecks"] if f.get("verify")}
    for finding in verified.values():
        verify = finding["verify"]
        assert finding["weighed_on"] == "realized"
        share = verify["realized_ms"] * verify["predicted_ms"] / verify["fix_predicted_ms"]
        assert finding["weighed_lost_ms"] == pytest.approx(share)
    assert sum(f["weighed_lost_ms"] for f in verified.values()) == pytest.approx(14.9, abs=0.1)


def test_the_misaligned_finding_advises_compile_where_the_model_runs_eager(shared):
    misaligned = next(f for f in shared["diagnosis"]["bottlenecks"] if f["id"] == "tensor.misaligned_dims")
    advice = misaligned["advice"]
    assert advice[0]["text"].startswith("Pad hidden sizes")
    # The change alone as its text, what compiling would do in its condition.
    assert any(
        a["text"] == "torch.compile(model)"
        and "Inductor pad these GEMMs" in a["condition"]
        and "shape_padding" in a["condition"]
        for a in advice[1:]
    )
