import pytest

from hybrid.rules.base import CATEGORIES
from hybrid.rules.common import severity_for
from hybrid.rules.cpu_residency import late_migration_lost_ms, transfers_lost_ms
from hybrid.rules.data_pipeline import exposed_copy_lost_ms, pageable_copy_lost_ms
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
    assert sync_stall_lost_ms(10.0, 8.0, 6.0, 3.0, 0.0) == pytest.approx(2.0)
    # Host slower than the GPU, barely blocked: the syncs cost what the host waited, not the idle after them.
    assert sync_stall_lost_ms(4.46, 1.25, 0.064, 1.07, 0.0) == pytest.approx(0.064)
    # Bounded by the device idle the syncs left.
    assert sync_stall_lost_ms(10.0, 2.0, 9.0, 0.5, 0.2) == pytest.approx(0.7)


def test_misaligned_saving_is_the_time_beyond_the_practical_roofline():
    assert misaligned_lost_ms(10.0, 12.0) == pytest.approx(10.0 * (1 - 12 / 80))
    assert misaligned_lost_ms(10.0, 95.0) == 0
    assert misaligned_lost_ms(10.0, None) == pytest.approx(5.0)  # no FLOPs: the guide's ~2x slowdown


@pytest.mark.parametrize("pct, severity", [(45, "CRITICAL"), (30, "CRITICAL"), (20, "SEVERE"), (6, "MODERATE"),
                                           (1, "LOW")])
def test_severity_follows_share_of_step_lost(pct, severity):
    assert severity_for(pct) == severity


def test_registry_covers_the_nine_families_with_unique_ids():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert {r.category for r in RULES} == set(CATEGORIES) - {"COMMUNICATION"}
