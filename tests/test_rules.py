import pytest

from hybrid.provenance import Metric
from hybrid.rules import engine
from hybrid.rules.base import CATEGORIES, Context, Report, Rule
from hybrid.rules.cpu_residency import late_migration_lost_ms, transfers_lost_ms
from hybrid.rules.data_pipeline import exposed_copy_lost_ms, pageable_copy_lost_ms
from hybrid.rules.engine import severity_for
from hybrid.rules.kernel_launch import launch_bound_lost_ms
from hybrid.rules.memory_hierarchy import uncoalesced_lost_ms
from hybrid.rules.occupancy import small_grid_lost_ms
from hybrid.rules.registry import RULES
from hybrid.rules.roofline import roofline_lost_ms
from hybrid.rules.synchronization import sync_stall_lost_ms
from hybrid.rules.tensor_core import fp32_gemm_lost_ms, misaligned_lost_ms


def test_pageable_copy_saving_is_the_bandwidth_gap_on_exposed_time():
    # 4 ms exposed at 9 GB/s; pinned at 51.2 GB/s would take 9/51.2 of it
    assert pageable_copy_lost_ms(4.0, 9e9, 51.2e9) == pytest.approx(4.0 * (1 - 9 / 51.2))
    assert pageable_copy_lost_ms(4.0, 9e9, None) == 0  # unknown pinned rate: no invented saving
    assert pageable_copy_lost_ms(4.0, 60e9, 51.2e9) == 0


def test_fp32_gemm_saving_uses_the_peak_ratio():
    assert fp32_gemm_lost_ms(10.0, 67e12, 494.7e12) == pytest.approx(10 * (1 - 67 / 494.7))
    assert fp32_gemm_lost_ms(10.0, 67e12, None) == 0


def test_simple_time_lost_models():
    assert launch_bound_lost_ms(-1) == 0
    assert exposed_copy_lost_ms(5.0, 2.0) == 2.0  # can only hide behind the compute there is
    assert transfers_lost_ms(10.0, 20) == pytest.approx(9.0)
    assert transfers_lost_ms(10.0, 2) == 0
    assert late_migration_lost_ms(3.0, 2, 1) == pytest.approx(1.5)
    assert small_grid_lost_ms(4.0, 25.0) == pytest.approx(3.0)
    assert uncoalesced_lost_ms(8.0, 16.0) == pytest.approx(6.0)
    assert roofline_lost_ms(10.0, 40.0) == pytest.approx(5.0)
    assert roofline_lost_ms(10.0, 90.0) == 0


def test_sync_saving_is_bounded_by_host_device_overlap():
    # GPU-heavy loop, host waits 6 of 10 ms: without syncs the 4 ms of host work hides under 8 ms of GPU.
    assert sync_stall_lost_ms(10.0, 8.0, 6.0) == pytest.approx(2.0)
    # Host slower than the GPU, barely blocked: the syncs cost what the host waited, not the idle after them.
    assert sync_stall_lost_ms(4.46, 1.25, 0.064) == pytest.approx(0.064)


def test_misaligned_saving_is_the_time_beyond_the_practical_roofline():
    assert misaligned_lost_ms(10.0, 12.0) == pytest.approx(10.0 * (1 - 12 / 80))
    assert misaligned_lost_ms(10.0, 95.0) == 0
    assert misaligned_lost_ms(10.0, None) == pytest.approx(5.0)  # no FLOPs: the guide's ~2x slowdown


@pytest.mark.parametrize(
    "pct, severity", [(45, "CRITICAL"), (30, "CRITICAL"), (20, "SEVERE"), (6, "MODERATE"), (1, "LOW")]
)
def test_severity_follows_share_of_step_lost(pct, severity):
    assert severity_for(pct) == severity


def test_registry_covers_the_nine_families_with_unique_ids():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert {r.category for r in RULES} == set(CATEGORIES) - {"COMMUNICATION"}


# The engine: declared inputs, floors, pools drawn once, alternatives beside what they replace.
def _rule(rule_id, lost, *, pool=(), floor=0.0, optional=(), alternative=False, seen=None):
    def model(inp):
        if seen is not None:
            seen.append(inp)
        return lost(inp) if callable(lost) else lost

    def report(ctx, lost_ms):
        return Report(title=rule_id, pairs=[("step", "step_time_ms")], explanation="", suggestions=[])

    return Rule(
        rule_id,
        "KERNEL_LAUNCH",
        ("step_time_ms",),
        model,
        report,
        optional=optional,
        pool=pool,
        floor_pct=floor,
        alternative=alternative,
    )


def _ctx(pools):
    return Context(
        metrics={
            "step_time_ms": Metric(10.0, "ms", "measured:nsys"),
            "idle_launch_ms": Metric(None, "ms", "measured:nsys"),
        },
        pools=pools,
    )


def test_a_pool_bounds_the_saving_and_is_drawn_once_in_rule_order():
    found = engine.run(
        [_rule("a", 3.0, pool=("launch_gap", "host_other")), _rule("b", 5.0, pool=("host_other",))],
        _ctx({"launch_gap": 1.0, "host_other": 4.0}),
    )
    assert [(f.id, f.time_lost_ms) for f in found] == [
        ("a", 3.0),
        ("b", 2.0),
    ]  # a took 1 + 2, b what was left
    assert found[0].pool == ["launch_gap", "host_other"]


def test_a_finding_under_its_floor_draws_nothing():
    found = engine.run(
        [_rule("small", 0.5, pool=("host_other",), floor=10.0), _rule("next", 9.0, pool=("host_other",))],
        _ctx({"host_other": 4.0}),
    )
    assert [(f.id, f.time_lost_ms) for f in found] == [("next", 4.0)]


def test_absent_optional_inputs_reach_the_model_as_none_and_are_listed():
    seen = []
    found = engine.run([_rule("a", 1.0, optional=("idle_launch_ms", "batch_size"), seen=seen)], _ctx({}))
    assert seen[0]["idle_launch_ms"] is None and seen[0]["batch_size"] is None
    assert found[0].missing_inputs == ["idle_launch_ms", "batch_size"]
    with pytest.raises(KeyError):
        seen[0]["gpu_busy_ms"]  # undeclared: a model reads only what its rule declares


def test_an_alternative_reads_the_whole_pool_draws_nothing_and_names_what_it_replaces():
    rules = [
        _rule("alt", lambda inp: inp.pool_ms / 2, pool=("launch_gap",), alternative=True),
        _rule("owner", 2.0, pool=("launch_gap",)),
    ]
    found = {f.id: f for f in engine.run(rules, _ctx({"launch_gap": 3.0}))}
    assert found["owner"].time_lost_ms == 2.0 and found["alt"].time_lost_ms == 1.5
    assert found["alt"].alternative_to == ["owner"] and found["alt"].alternative
