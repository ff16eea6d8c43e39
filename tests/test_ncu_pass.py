"""Kernel selection from the probe's nsys export and matching the probe's ncu counters back to it.

The kernels frame is read from the nsys SQLite with plain sqlite3 here (hybrid/load/nsys_export.py, the real
loader, is another engineer's work in progress): kernels joined to their launch call on
correlationId, assigned to the `stepN` push/pop range that encloses the launch.
"""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from hybrid.load.ncu_match import attach_counters, representative_step, select_kernels
from hybrid.profile import (
    KERNEL_COLUMNS,
    KERNEL_COUNTER_COLUMNS,
    MATCH_CONFIG,
    MATCH_LAUNCH,
    MATCH_NAME,
    MATCH_NONE,
    Profile,
    conform,
    counters_per_kernel,
)
from hybrid.provenance import MEASURED_NCU
from nsight.ncu_csv import NcuCounters, parse_ncu_csv

PROBE = Path(__file__).parent / "fixtures" / "h200-probe"
EXPORT = PROBE / "nsys_matmul_copy.sqlite"
STDOUT_CSV = PROBE / "ncu_metrics_stdout.csv"

KERNELS_SQL = """
SELECT d.value AS name, k.start AS start_ns, k."end" AS end_ns, k.streamId AS stream,
       k.deviceId AS device, k.correlationId AS correlation, coalesce(r.start, -1) AS launch_ns,
       k.gridX AS grid_x, k.gridY AS grid_y, k.gridZ AS grid_z,
       k.blockX AS block_x, k.blockY AS block_y, k.blockZ AS block_z,
       k.registersPerThread AS registers, k.staticSharedMemory + k.dynamicSharedMemory AS shared_bytes
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
JOIN StringIds AS d ON d.id = k.demangledName
LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
  ON r.correlationId = k.correlationId AND (r.globalTid & -16777216) = k.globalPid
ORDER BY k.start
"""


def probe_kernels() -> pd.DataFrame:
    with sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True) as db:
        kernels = pd.read_sql_query(KERNELS_SQL, db)
        ranges = pd.read_sql_query(
            'SELECT start, "end", coalesce(text, s.value) AS text FROM NVTX_EVENTS '
            "LEFT JOIN StringIds AS s ON s.id = textId WHERE eventType = 59 ORDER BY start",
            db,
        )
    kernels["step"] = -1
    for _, rng in ranges.iterrows():
        inside = (kernels["launch_ns"] >= rng["start"]) & (kernels["launch_ns"] <= rng["end"])
        kernels.loc[inside, "step"] = int(rng["text"].removeprefix("step"))
    kernels["layer"] = None
    return conform(kernels, KERNEL_COLUMNS)


@pytest.fixture(scope="module")
def kernels() -> pd.DataFrame:
    return probe_kernels()


def _step_time(kernels: pd.DataFrame, step: int) -> pd.Series:
    in_step = kernels[kernels["step"] == step]
    return (in_step["end_ns"] - in_step["start_ns"]).groupby(in_step["name"]).sum()


def test_probe_kernels_fall_into_five_steps(kernels):
    # The workload: 5 steps of GEMM, mul, add, sum; two randn kernels before them.
    assert sorted(kernels["step"].unique()) == [-1, 0, 1, 2, 3, 4]
    assert (kernels["step"] >= 0).sum() == 20
    assert kernels.groupby("step").size().loc[0] == 4


def test_select_kernels_takes_fewest_names_reaching_coverage(kernels):
    step = representative_step(kernels)
    per_name = _step_time(kernels, step).sort_values(ascending=False)
    chosen = select_kernels(kernels, coverage=0.9, cap=12)
    # Independently: the smallest prefix of the names sorted by time that reaches 90%.
    needed = int((per_name.cumsum() < 0.9 * per_name.sum()).sum()) + 1
    assert chosen == list(per_name.index[:needed])
    assert chosen[0].startswith("nvjet_sm90")  # the fp16 GEMM dominates each step
    assert all(name in set(kernels["name"]) for name in chosen)


def test_select_kernels_respects_cap_and_full_coverage(kernels):
    assert len(select_kernels(kernels, coverage=1.0, cap=2)) == 2
    assert len(select_kernels(kernels, coverage=1.0, cap=12)) == 4  # all four kernels of a step


def test_select_kernels_never_picks_nccl(kernels):
    nccl = kernels[kernels["step"] == 0].head(1).copy()
    nccl["name"] = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    nccl["end_ns"] = nccl["start_ns"] + 10**10  # by far the longest kernel of the step
    with_nccl = pd.concat([kernels, nccl], ignore_index=True)
    assert not any("nccl" in name for name in select_kernels(with_nccl, coverage=1.0, cap=12, step=0))


def test_select_kernels_on_the_loaders_categorical_names():
    """The nsys loader gives names as a categorical; with one kernel name (the healthy bf16 GEMM
    script on the H200) mapping it to bools gave a categorical, and `~` on it raised TypeError."""
    from hybrid.load.nsys_export import load_nsys_export

    loaded = load_nsys_export(EXPORT, step_range="step").kernels
    gemm = loaded[loaded["name"].astype(str).str.startswith("nvjet_sm90")]
    assert str(gemm["name"].dtype) == "category" and gemm["name"].nunique() == 1
    assert select_kernels(gemm) == [gemm["name"].iloc[0]]
    only_nccl = gemm.assign(
        name=gemm["name"].cat.rename_categories(
            {
                gemm["name"].iloc[
                    0
                ]: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
            }
        )
    )
    assert str(only_nccl["name"].dtype) == "category"
    assert select_kernels(only_nccl) == []


def test_select_kernels_without_steps_uses_whole_capture(kernels):
    stepless = kernels.assign(step=-1)
    assert select_kernels(stepless, coverage=0.0, cap=1) == [
        _step_time(stepless, -1).sort_values(ascending=False).index[0]
    ]
    assert select_kernels(kernels.iloc[0:0]) == []


def _rows_of_ncu_ids(ids: set[str]) -> str:
    """The stdout capture cut down to the given ncu IDs: what an ncu run restricted to one step
    would have printed (the capture itself profiled every kernel of the run)."""
    lines = STDOUT_CSV.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    keep = [line for line in lines[header + 1 :] if next(csv.reader([line]))[0] in ids]
    return "\n".join([lines[header], *keep])


def _raw_value(ncu_id: str, metric: str) -> float:
    for row in csv.DictReader(line for line in STDOUT_CSV.read_text().splitlines() if line.startswith('"')):
        if row["ID"] == ncu_id and row["Metric Name"] == metric:
            return float(row["Metric Value"].replace(",", ""))
    raise KeyError((ncu_id, metric))


def test_one_step_of_counters_matches_every_step_by_launch(kernels):
    # IDs 2..5 are the first step's GEMM, mul, add and sum (NVTX column "step0" in the capture).
    counters = parse_ncu_csv(_rows_of_ncu_ids({"2", "3", "4", "5"}))
    profile = attach_counters(Profile(kernels=kernels), counters)
    ncu = profile.extras["ncu"]
    # One row per kernel, in the kernels' order, typed by the Profile's contract.
    profile.validate()
    assert len(profile.kernel_counters) == len(kernels)
    assert list(profile.kernel_counters.columns) == list(KERNEL_COUNTER_COLUMNS)
    assert profile.kernel_counters["counter_row"].dtype == "int64"
    levels = pd.Series(profile.kernel_counters["counter_match"].to_numpy(), index=kernels.index)
    assert (levels[kernels["step"] >= 0] == MATCH_LAUNCH).all()
    assert (levels[kernels["step"] < 0] == MATCH_NONE).all()  # the randn kernels were not profiled
    assert ncu["covered_gpu_time_pct"] == 100.0
    assert ncu["unmatched_counter_rows"] == 0
    assert profile.sources["counters"] == MEASURED_NCU

    # Counters are renamed to nsys's demangling, so (name, grid, block) joins work downstream.
    assert set(profile.counters["name"]) == set(kernels.loc[kernels["step"] == 0, "name"])
    joined = counters_per_kernel(profile)
    add = joined[joined["name"].str.contains("CUDAFunctorOnSelf_add") & (joined["step"] == 3)]
    mul = joined[joined["name"].str.contains("MulFunctor") & (joined["step"] == 3)]
    # Same function, grid and block: only the launch order tells them apart (ncu ID 3 is the mul).
    assert add["dram_write_bytes"].item() == _raw_value("4", "dram__bytes_write.sum")
    assert mul["dram_write_bytes"].item() == _raw_value("3", "dram__bytes_write.sum")
    assert ncu["ncu_names"][add["name"].item()].startswith("void at::vectorized_elementwise_kernel<4, ")


def test_all_counters_attach_and_unprofiled_kernels_are_listed(kernels):
    full = parse_ncu_csv(STDOUT_CSV.read_text())
    profile = attach_counters(Profile(kernels=kernels), full)
    levels = list(profile.kernel_counters["counter_match"])
    # The two randn kernels (Half and float) share name, grid and block; launch order pairs them.
    randn = counters_per_kernel(profile)[kernels["step"] == -1]
    assert list(randn["counter_match"]) == [MATCH_LAUNCH, MATCH_LAUNCH]
    assert list(randn["duration_ns"]) == [
        _raw_value("0", "gpu__time_duration.sum"),
        _raw_value("1", "gpu__time_duration.sum"),
    ]
    assert levels.count(MATCH_LAUNCH) == len(kernels)

    # Only GEMM counters: the other kernels are reported as not profiled, with their time.
    gemm_only = parse_ncu_csv(_rows_of_ncu_ids({"2"}))
    partial = attach_counters(Profile(kernels=kernels), gemm_only).extras["ncu"]
    step_time = (kernels["end_ns"] - kernels["start_ns"])[kernels["step"] >= 0]
    gemm = kernels["name"].str.startswith("nvjet")[kernels["step"] >= 0]
    assert partial["covered_gpu_time_pct"] == pytest.approx(
        100 * step_time[gemm].sum() / step_time.sum(), abs=0.01
    )
    not_profiled = {item["name"] for item in partial["kernels_not_profiled"]}
    assert not_profiled == set(
        kernels.loc[(kernels["step"] >= 0) & ~kernels["name"].str.startswith("nvjet"), "name"]
    )


def test_other_launch_configuration_falls_back_to_name(kernels):
    counters = parse_ncu_csv(_rows_of_ncu_ids({"2"}))
    reshaped = counters.frame.assign(grid_y=counters.frame["grid_y"] * 2)
    profile = attach_counters(Profile(kernels=kernels), NcuCounters(frame=reshaped))
    levels = pd.Series(profile.kernel_counters["counter_match"].to_numpy(), index=kernels.index)
    assert set(levels[kernels["name"].str.startswith("nvjet")]) == {MATCH_NAME}
    assert profile.extras["ncu"]["covered_gpu_time_pct"] == 0.0
    step_time = (kernels["end_ns"] - kernels["start_ns"])[kernels["step"] >= 0]
    gemm = kernels["name"].str.startswith("nvjet")[kernels["step"] >= 0]
    assert profile.extras["ncu"]["name_only_gpu_time_pct"] == pytest.approx(
        100 * step_time[gemm].sum() / step_time.sum(), abs=0.01
    )
    assert any("cover only" in w for w in profile.warnings)


def test_later_launches_past_the_profiled_ones_match_by_configuration(kernels):
    # Two GEMMs in one step, one profiled (launch cap): the second takes the first one's counters.
    step0 = kernels[kernels["step"] == 0]
    gemm = step0[step0["name"].str.startswith("nvjet")]
    second = gemm.assign(start_ns=gemm["start_ns"] + 1, launch_ns=gemm["launch_ns"] + 1)
    doubled = pd.concat([step0, second], ignore_index=True)
    profile = attach_counters(Profile(kernels=doubled), parse_ncu_csv(_rows_of_ncu_ids({"2"})))
    levels = pd.Series(profile.kernel_counters["counter_match"].to_numpy(), index=doubled.index)
    assert list(levels[doubled["name"].str.startswith("nvjet")]) == [MATCH_LAUNCH, MATCH_CONFIG]
