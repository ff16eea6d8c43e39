"""One cause, one finding: every finding claims time from the ledger's pools, each nanosecond once, and a
generic finding reads only what the specific causes leave. Checked on the real H200 runs (resnet50 fp32,
simple_cnn) and planted captures."""

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from hybrid.analysis.analyze import _rule_peaks
from hybrid.analysis.roofline import roofline
from hybrid.ledger.causes import LABELS
from hybrid.pipeline import analyze_run_dir, load_run_dir, merged_profile
from hybrid.rules import engine, kernel_launch
from hybrid.rules import roofline as roofline_rule
from hybrid.rules.base import SEVERITY_RANK, Context, Report
from hybrid.rules.engine import ASSUMED_SEVERITY_CAP
from hybrid.rules.kernel_launch import batch_headroom_lost_ms
from hybrid.rules.registry import RULES

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = FIXTURES / "runs"
PLANTED = FIXTURES / "planted"
# Findings whose time lost is GPU idle time inside the step (batch.headroom is an alternative remedy for it).
IDLE_FINDINGS = {
    "launch.bound",
    "launch.dispatch",
    "compile.graph_breaks",
    "sync.per_step",
    "cpu.preprocessing",
    "data.loader_stall",
    "cpu.heavy_ops",
}


@cache
def run(path: Path) -> dict:
    return analyze_run_dir(path)


def findings(doc: dict) -> dict[str, dict]:
    return {f["id"]: f for f in doc["diagnosis"]["bottlenecks"]}


def test_resnet50_fp32_gemm_time_is_claimed_once_with_the_ncu_pipe_figure_as_evidence():
    doc = run(RUNS / "h200-resnet50")
    found = findings(doc)
    tensor = [f for f in found.values() if f["category"] == "TENSOR_CORE" and not f["not_measured"]]
    assert [f["id"] for f in tensor] == ["tensor.fp32_gemm"]
    pipe = next(e for e in found["tensor.fp32_gemm"]["evidence"] if e["label"].startswith("tensor pipe busy"))
    assert pipe["source"] == "measured:ncu" and pipe["value"] < 1.0  # sgemm-class kernels: tensor pipe idle
    # Low occupancy of those same conv kernels is theirs too: no second finding on the GEMM time.
    assert "occupancy.low" not in found
    assert doc["diagnosis"]["primary_bottleneck"]["id"] == "tensor.fp32_gemm"


def test_simple_cnn_dispatch_gaps_are_one_finding_which_names_the_host_heavy_ops():
    """simple_cnn's launch gaps (1.97 ms a step) outweigh its longer host gaps (1.10 ms): both are eager
    dispatch, one finding, and the larger batch is a note on it rather than a finding of its own."""
    doc = run(RUNS / "h200-simple_cnn")
    found = findings(doc)
    pools = doc["ledger"]["ms_per_step"]
    assert "launch.dispatch" in found
    assert not {"launch.bound", "cpu.preprocessing", "batch.headroom"} & set(found)
    assert _model_ms(found["launch.dispatch"]) == pytest.approx(pools["launch_gap"] + pools["host_other"])
    # CPU-heavy ops claim only the idle time inside their own calls, not the launch gaps between them.
    assert _model_ms(found["cpu.heavy_ops"]) <= pools["cpu_heavy_op"] + 1e-9
    names = next(e for e in found["launch.dispatch"]["evidence"] if e["label"].startswith("ops with CPU:GPU"))
    assert names["value"] == doc["metrics"]["cpu_heavy_op_names"]["value"] and names["value"]
    gaps = sum(pools[c] for c in kernel_launch.HOST_GAPS)
    note = next(e for e in found["launch.dispatch"]["evidence"] if e["label"].startswith("a doubled batch"))
    assert note["value"] == pytest.approx(batch_headroom_lost_ms(gaps))
    assert doc["diagnosis"]["primary_bottleneck"]["id"] == "launch.dispatch"


PLANTED_RUNS = sorted(p.name for p in PLANTED.iterdir() if (p / "run").is_dir())


def _model_ms(finding: dict) -> float:
    return finding.get("time_lost_model_ms", finding["time_lost_ms"])


@pytest.mark.parametrize("name", PLANTED_RUNS)
def test_idle_time_is_claimed_at_most_once(name):
    doc = run(PLANTED / name / "run")
    idle_ms = doc["metrics"]["gpu_idle_ms"]["value"]
    bottlenecks = doc["diagnosis"]["bottlenecks"]
    # The rules' own claims (a replayed finding keeps its rule's figure in time_lost_model_ms).
    claimed = sum(_model_ms(f) for f in bottlenecks if f["id"] in IDLE_FINDINGS)
    assert claimed <= idle_ms * (1 + 1e-9) + 1e-9
    # Each ledger cause gives out at most its time, whatever findings read it (alternatives draw nothing).
    pools = doc["ledger"]["ms_per_step"]
    for cause, ms in pools.items():
        drawn = sum(_model_ms(f) for f in bottlenecks if f["pool"] == [cause] and not f["alternative_to"])
        assert drawn <= ms * (1 + 1e-9) + 1e-9, cause


def test_misaligned_gemms_own_their_time_and_leave_the_idle_pipe_finding_only_the_rest():
    doc = run(PLANTED / "tc_fp16_unaligned" / "run")
    found, m = findings(doc), doc["metrics"]
    assert doc["diagnosis"]["primary_bottleneck"]["id"] == "tensor.misaligned_dims"
    # Every GEMM of this model has a dimension off a multiple of 8, the forward addmm calls included
    # (bias first, alpha and beta last in their recorded shapes): nothing is left for the idle pipe.
    rest = m["gemm_time_ms"]["value"] - m["gemm_fp32_ms"]["value"] - m["misaligned_gemm_device_ms"]["value"]
    assert rest < 0.01 * m["gemm_time_ms"]["value"]
    assert "tensor.pipe_idle" not in found
    # 5 forward addmm (2 blocks x 2 Linear + the vocabulary head) and 10 backward mm a step.
    assert m["misaligned_gemms_per_step"]["value"] == 15
    assert (
        "aten::addmm [[50257], [8192, 1020], [1020, 50257], [], []]" in m["misaligned_gemm_shapes"]["value"]
    )


def test_fp32_gemms_are_not_also_an_idle_tensor_pipe():
    found = findings(run(PLANTED / "tc_fp32_no_tf32" / "run"))
    assert "tensor.fp32_gemm" in found and "tensor.pipe_idle" not in found


def test_a_grid_of_a_few_blocks_owns_the_roofline_shortfall_it_causes():
    doc = run(PLANTED / "occ_few_row_softmax" / "run")
    found = findings(doc)
    assert doc["roofline"]["achieved_pct_of_attainable"] < roofline_rule.LOW_EFFICIENCY_PCT  # far below it
    assert "occupancy.small_grid" in found and "roofline.low_efficiency" not in found
    assert doc["diagnosis"]["primary_bottleneck"]["category"] == "OCCUPANCY"


def test_every_pool_a_rule_reads_is_a_ledger_cause():
    assert {cause for rule in RULES for cause in rule.pool} <= set(LABELS)


@pytest.fixture(scope="module")
def simple_cnn_context() -> Context:
    # Built as analyze builds it, so the rules see the injector's facts (peak memory, batch) and the ledger.
    from hybrid.analysis.analyze import analyze

    profile, _ = merged_profile(*load_run_dir(RUNS / "h200-simple_cnn"))
    analyzed = analyze(profile).analyzed
    peaks = analyzed.peaks
    return Context(
        metrics=analyzed.metrics,
        pools=analyzed.ledger.ms_per_step(),
        roofline=roofline(profile, peaks),
        peaks=_rule_peaks(peaks),
        has_counters=True,
    )


def test_an_estimate_on_an_unmeasured_premise_says_so_and_stays_below_severe(simple_cnn_context):
    half_step = 0.5 * simple_cnn_context.value("step_time_ms")
    rule = next(r for r in RULES if r.id == "launch.bound")
    plain = Report(title="x", pairs=[], explanation="", suggestions=[])
    assumed_report = Report(
        title="x", pairs=[], explanation="", suggestions=[], assumes="the batch can double"
    )
    measured = engine.build_finding(simple_cnn_context, rule, plain, half_step, missing=[], alternative_to=[])
    assumed = engine.build_finding(
        simple_cnn_context, rule, assumed_report, half_step, missing=[], alternative_to=[]
    )
    assert measured.severity == "CRITICAL" and assumed.severity == ASSUMED_SEVERITY_CAP
    assert assumed.time_lost_ms == measured.time_lost_ms  # the estimate stands; only its rank is capped
    premise = assumed.evidence[-1]
    assert (premise.label, premise.value, premise.source) == (
        "time lost assumes",
        "the batch can double",
        "estimated",
    )


def test_batch_headroom_is_ranked_only_where_it_saves_more_than_the_gaps_owners(simple_cnn_context):
    ctx = simple_cnn_context
    assert batch_headroom_lost_ms(3.0) == pytest.approx(1.5)
    assert batch_headroom_lost_ms(-1.0) == 0.0
    # simple_cnn uses 0.1% of the H200's memory, but half its host gaps is less than the dispatch finding
    # claims.
    assert ctx.value("peak_memory_pct") < kernel_launch.BATCH_HEADROOM_PEAK_PCT
    found = {f.id: f for f in engine.run(RULES, ctx)}
    gaps = sum(ctx.pools[c] for c in kernel_launch.HOST_GAPS)
    assert "batch.headroom" not in found
    assert found["launch.dispatch"].time_lost_ms <= gaps
    # Host gaps spread over causes no one finding owns most of: the larger batch is the lever that saves most,
    # shown as an alternative to the findings that draw on those gaps, on the gaps before any finding drew.
    spread = dict(ctx.pools, launch_gap=1.0, host_other=0.0, host_after_sync=3.0, cpu_heavy_op=3.0)
    found = {f.id: f for f in engine.run(RULES, replace(ctx, pools=spread))}
    assert found["batch.headroom"].time_lost_ms == pytest.approx(3.5)
    assert found["batch.headroom"].alternative and "cpu.heavy_ops" in found["batch.headroom"].alternative_to
    assert SEVERITY_RANK[ASSUMED_SEVERITY_CAP] < SEVERITY_RANK["SEVERE"]


def test_sectors_per_request_no_load_width_explains_is_measured_the_rest_is_an_assumption():
    # mem_random_gather: 20 sectors a request, more than a coalesced warp of 16-byte loads reads.
    gather = findings(run(PLANTED / "mem_random_gather" / "run"))["memory.uncoalesced"]
    assert gather["severity"] == "CRITICAL"
    assert not any(e["label"] == "time lost assumes" for e in gather["evidence"])
    # roofline_unfused_gelu: 16 on vectorized elementwise kernels, which 16-byte loads reach coalesced.
    doc = run(PLANTED / "roofline_unfused_gelu" / "run")
    gelu = findings(doc)["memory.uncoalesced"]
    assert any(e["label"] == "time lost assumes" for e in gelu["evidence"])
    assert SEVERITY_RANK[gelu["severity"]] <= SEVERITY_RANK[ASSUMED_SEVERITY_CAP]
    # Only the kernel launches whose own counters read 16 sectors a request are its time (this capture's
    # other kernels matched a profiled launch by name only): the step-wide figure is not extrapolated.
    assert 0 < _model_ms(gelu) <= doc["ledger"]["ms_per_step"]["uncoalesced"] * (1 + 1e-9)


def test_uncoalesced_gathers_are_advised_to_order_their_indices_not_their_layout():
    """mem_random_gather's uncoalesced time is all in index_select's _scatter_gather_elementwise_kernel (its
    twin sorts each index batch); mem_transposed_operand's is an elementwise kernel reading a transposed
    operand, whose layout is the fix."""
    gather = findings(run(PLANTED / "mem_random_gather" / "run"))["memory.uncoalesced"]
    texts = [a["text"] for a in gather["advice"]]
    assert texts[0].startswith("Order the indices these kernels load through: sort each index batch")
    assert "_scatter_gather_elementwise_kernel 100%" in gather["advice"][0]["condition"]
    assert not any(".contiguous()" in t or t.startswith("torch.compile") for t in texts)
    transposed = findings(run(PLANTED / "mem_transposed_operand" / "run"))["memory.uncoalesced"]
    texts = [a["text"] for a in transposed["advice"]]
    assert texts[0].startswith("Make tensors contiguous") and not any(
        t.startswith("Order the") for t in texts
    )
