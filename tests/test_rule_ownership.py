"""One cause, one finding: rules that see the same time through another lens count only what the more
specific finding leaves. Checked on the real H200 runs (resnet50 fp32, simple_cnn) and planted captures."""

from functools import cache
from pathlib import Path

import pytest

from hybrid.analyze import _rule_peaks
from hybrid.hardware import peaks_for
from hybrid.metrics import compute_metrics
from hybrid.ncu_pass import attach_counters
from hybrid.nsys_pass import load_nsys_export
from hybrid.pipeline import _inject_facts, analyze_run_dir, merge
from hybrid.roofline import roofline
from hybrid.rules import cpu_residency, data_pipeline, kernel_launch, occupancy
from hybrid.rules import roofline as roofline_rule
from hybrid.rules.base import SEVERITY_RANK, Context
from hybrid.rules.common import ASSUMED_SEVERITY_CAP, finding
from hybrid.rules.kernel_launch import batch_headroom_lost_ms
from hybrid.rules.registry import RULES
from hybrid.rundir import RunDir
from hybrid.torch_pass import load_torch_trace
from nsight.ncu_csv import parse_ncu_csv

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = FIXTURES / "runs"
PLANTED = FIXTURES / "planted"
# Findings whose time lost is GPU idle time inside the step (batch.headroom counts half of what it claims).
IDLE_FINDINGS = {"launch.bound": 1.0, "compile.graph_breaks": 1.0, "sync.per_step": 1.0, "cpu.preprocessing": 1.0,
                 "data.loader_stall": 1.0, "cpu.heavy_ops": 1.0, "batch.headroom": 2.0}


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


def test_simple_cnn_launch_gaps_are_owned_by_launch_bound_which_names_the_host_heavy_ops():
    doc = run(RUNS / "h200-simple_cnn")
    found = findings(doc)
    assert {"launch.bound", "cpu.preprocessing"} <= set(found)
    # CPU-heavy ops and a larger batch explain the same idle gaps; nothing is left for them.
    assert "cpu.heavy_ops" not in found and "batch.headroom" not in found
    names = next(e for e in found["launch.bound"]["evidence"] if e["label"].startswith("ops with CPU:GPU"))
    assert names["value"] == doc["metrics"]["cpu_heavy_op_names"]["value"] and names["value"]


PLANTED_RUNS = sorted(p.name for p in PLANTED.iterdir() if (p / "run").is_dir())


@pytest.mark.parametrize("name", PLANTED_RUNS)
def test_idle_time_is_claimed_at_most_once(name):
    doc = run(PLANTED / name / "run")
    idle_ms = doc["metrics"]["gpu_idle_ms"]["value"]
    # The rules' own claims (a replayed finding keeps its rule's figure in time_lost_model_ms).
    claimed = sum(f.get("time_lost_model_ms", f["time_lost_ms"]) * IDLE_FINDINGS[f["id"]]
                  for f in doc["diagnosis"]["bottlenecks"] if f["id"] in IDLE_FINDINGS)
    assert claimed <= idle_ms * (1 + 1e-9) + 1e-9


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
    assert "aten::addmm [[50257], [8192, 1020], [1020, 50257], [], []]" in m["misaligned_gemm_shapes"]["value"]


def test_fp32_gemms_are_not_also_an_idle_tensor_pipe():
    found = findings(run(PLANTED / "tc_fp32_no_tf32" / "run"))
    assert "tensor.fp32_gemm" in found and "tensor.pipe_idle" not in found


def test_a_grid_of_a_few_blocks_owns_the_roofline_shortfall_it_causes():
    doc = run(PLANTED / "occ_few_row_softmax" / "run")
    found = findings(doc)
    assert doc["roofline"]["achieved_pct_of_attainable"] < roofline_rule.LOW_EFFICIENCY_PCT  # far below it
    assert "occupancy.small_grid" in found and "roofline.low_efficiency" not in found
    assert doc["diagnosis"]["primary_bottleneck"]["category"] == "OCCUPANCY"


def test_every_owner_named_is_a_registered_rule():
    ids = {rule.id for rule in RULES}
    owners = (roofline_rule.SPECIFIC_CAUSES + occupancy.OCCUPANCY_OWNERS + kernel_launch.IDLE_OWNERS
              + cpu_residency.IDLE_OWNERS + cpu_residency.COPY_OWNERS + data_pipeline.COPY_OWNERS)
    assert set(owners) <= ids


@pytest.fixture(scope="module")
def simple_cnn_context() -> Context:
    # Built as analyze_run_dir builds it, so the rules see the injector's facts (peak memory, batch).
    run_dir = RunDir.open(RUNS / "h200-simple_cnn")
    profile = merge(load_torch_trace(run_dir.torch_trace()), load_nsys_export(run_dir.nsys_export()))
    profile.extras.update({k: v for k, v in _inject_facts(run_dir).items() if k not in profile.extras})
    profile = attach_counters(profile, parse_ncu_csv(run_dir.ncu_csv()))
    peaks = peaks_for(profile.device)
    return Context(profile=profile, metrics=compute_metrics(profile, peaks), roofline=roofline(profile, peaks),
                   peaks=_rule_peaks(peaks))


def test_an_estimate_on_an_unmeasured_premise_says_so_and_stays_below_severe(simple_cnn_context):
    half_step = 0.5 * simple_cnn_context.value("step_time_ms")
    kwargs = {"id": "x", "title": "x", "category": "KERNEL_LAUNCH", "pairs": [], "explanation": "",
              "suggestions": [], "lost_ms": half_step}
    measured = finding(simple_cnn_context, **kwargs)
    assumed = finding(simple_cnn_context, assumes="the batch can double", **kwargs)
    assert measured.severity == "CRITICAL" and assumed.severity == ASSUMED_SEVERITY_CAP
    assert assumed.time_lost_ms == measured.time_lost_ms  # the estimate stands; only its rank is capped
    premise = assumed.evidence[-1]
    assert (premise.label, premise.value, premise.source) == ("time lost assumes", "the batch can double", "estimated")


def test_batch_headroom_counts_only_idle_time_no_other_finding_explains(simple_cnn_context):
    ctx = simple_cnn_context
    launch, host = ctx.value("idle_launch_ms"), ctx.value("idle_host_ms")
    assert batch_headroom_lost_ms(launch, host, 0.0) == pytest.approx(0.5 * (launch + host))
    assert batch_headroom_lost_ms(launch, host, launch) == pytest.approx(0.5 * host)
    assert batch_headroom_lost_ms(launch, host, 2 * (launch + host)) == 0.0
    # simple_cnn uses 0.1% of the H200's memory, so the rule applies; launch.bound and
    # cpu.preprocessing explain all of the idle time it would amortize.
    assert ctx.value("peak_memory_pct") < kernel_launch.BATCH_HEADROOM_PEAK_PCT
    owners = {rule.id: rule.evaluate(ctx) for rule in RULES if rule.id in kernel_launch.IDLE_OWNERS}
    assert owners["launch.bound"] is not None and owners["cpu.preprocessing"] is not None
    assert kernel_launch.check_batch_headroom(ctx) is None
    assert SEVERITY_RANK[ASSUMED_SEVERITY_CAP] < SEVERITY_RANK["SEVERE"]


def test_sectors_per_request_no_load_width_explains_is_measured_the_rest_is_an_assumption():
    # mem_random_gather: 20 sectors a request, more than a coalesced warp of 16-byte loads reads.
    gather = findings(run(PLANTED / "mem_random_gather" / "run"))["memory.uncoalesced"]
    assert gather["severity"] == "CRITICAL"
    assert not any(e["label"] == "time lost assumes" for e in gather["evidence"])
    # roofline_unfused_gelu: 16 on vectorized elementwise kernels, which 16-byte loads reach coalesced.
    gelu = findings(run(PLANTED / "roofline_unfused_gelu" / "run"))
    assert gelu["memory.uncoalesced"]["time_lost_pct"] >= 30  # the estimate alone would say CRITICAL
    assert gelu["memory.uncoalesced"]["severity"] == ASSUMED_SEVERITY_CAP
    assert any(e["label"] == "time lost assumes" for e in gelu["memory.uncoalesced"]["evidence"])
