"""SMs left idle: grids smaller than the GPU, and (with ncu) low achieved occupancy."""

from __future__ import annotations

from hybrid.rules.advice import Suggestion, use_compile
from hybrid.rules.base import Context, Inputs, NotMeasured, Report, Rule
from hybrid.rules.common import faster_kernels_fix

# A fifth of kernel time on grids that cannot cover every SM is worth a look.
SMALL_GRID_TIME_PCT = 20.0
MIN_LOST_PCT = 2.0
# Below a quarter of the warp slots busy, latency hiding usually suffers (CUDA best-practices
# guide); except in wgmma GEMMs, which run at ~15% occupancy with a busy tensor pipe
# (hopper-metrics.md), hence the tensor-pipe escape below.
LOW_OCCUPANCY_PCT = 25.0
TENSOR_PIPE_BUSY_PCT = 50.0


def small_grid_lost_ms(small_grid_ms: float, sm_fill_pct: float) -> float:
    """A grid covering a fraction f of the SMs could at best finish in f of its time with a full grid."""
    return small_grid_ms * (1.0 - min(sm_fill_pct, 100.0) / 100.0)


def occupancy_lost_ms(kernel_ms: float, sm_throughput_pct: float, memory_throughput_pct: float) -> float:
    """Headroom left by the busier of the SM and memory pipes, relative to the practical 80%."""
    busiest = max(sm_throughput_pct, memory_throughput_pct)
    return kernel_ms * max(0.0, 1.0 - busiest / 80.0)


def small_grid_advice(ctx: Context) -> list[Suggestion]:
    condition = (
        f"{ctx.value('small_grid_time_pct', 0.0):.0f}% of kernel time is on grids that fill "
        f"{ctx.value('small_grid_sm_fill_pct', 0.0):.0f}% of the SMs"
    )
    out = [
        Suggestion(
            "Increase the batch size or sequence length so each kernel has more parallel work; run "
            "independent small work concurrently (CUDA streams)",
            condition,
        )
    ]
    return out + use_compile(ctx.config, why="fuse the small kernels", condition=condition)


def small_grid_model(inp: Inputs) -> float | None:
    if inp["small_grid_time_pct"] < SMALL_GRID_TIME_PCT:
        return None
    fill = inp["small_grid_sm_fill_pct"]
    # The ledger's small-grid kernels (those no more specific cause took: an FP32 GEMM on a few blocks is
    # the FP32 finding's), at the SM fill all small grids reach.
    return small_grid_lost_ms(inp.pool_ms, 100.0 if fill is None else fill)


def small_grid_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Kernels launch fewer blocks than the GPU has SMs",
        pairs=[
            ("kernel time on small grids", "small_grid_time_pct"),
            ("SMs those grids can fill", "small_grid_sm_fill_pct"),
            ("small-grid kernels per step", "small_grid_kernels_per_step"),
        ],
        explanation=(
            "A grid with fewer blocks than SMs leaves the remaining SMs idle for the kernel's whole run."
        ),
        suggestions=small_grid_advice(ctx),
    )


def achieved_model(inp: Inputs) -> float | None:
    occ = inp["ncu_achieved_occupancy_pct"]
    if occ is None or occ >= LOW_OCCUPANCY_PCT or (inp["ncu_tensor_pipe_pct"] or 0.0) >= TENSOR_PIPE_BUSY_PCT:
        return None
    return occupancy_lost_ms(
        inp["kernel_time_ms"], inp["ncu_sm_throughput_pct"] or 0.0, inp["ncu_memory_throughput_pct"] or 0.0
    )


def achieved_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Low achieved occupancy in the profiled kernels",
        pairs=[
            ("achieved occupancy", "ncu_achieved_occupancy_pct"),
            ("SM throughput", "ncu_sm_throughput_pct"),
            ("memory throughput", "ncu_memory_throughput_pct"),
            ("kernel time covered by ncu", "ncu_coverage_pct"),
        ],
        explanation=(
            "Few warps are resident per SM and neither the SM nor memory pipes are busy: "
            "latency is not hidden."
        ),
        suggestions=[
            Suggestion(
                "Check the limiter in ncu's Occupancy section (registers, shared memory, block size); for "
                "custom kernels: fewer registers per thread (__launch_bounds__), larger blocks",
                f"achieved occupancy {ctx.value('ncu_achieved_occupancy_pct', 0.0):.0f}% with neither SM "
                "nor memory pipes busy",
            )
        ],
    )


NOT_MEASURED = NotMeasured(
    id="occupancy.not_measured",
    title="Achieved occupancy was not measured",
    explanation="Achieved occupancy and its limiter (registers, shared memory, block "
    "size) need ncu hardware counters; this run has none.",
)
RULES = [
    Rule(
        "occupancy.small_grid",
        "OCCUPANCY",
        ("small_grid_time_pct", "step_time_ms"),
        small_grid_model,
        small_grid_report,
        optional=("small_grid_sm_fill_pct",),
        pool=("small_grid",),
        floor_pct=MIN_LOST_PCT,
        fix=faster_kernels_fix,
    ),
    # Low occupancy is also what a grid of a few blocks or a GEMM on CUDA cores looks like to ncu: the
    # ledger gives those kernels to their own causes, and this finding the kernels classed low occupancy.
    Rule(
        "occupancy.low",
        "OCCUPANCY",
        ("kernel_time_ms", "step_time_ms"),
        achieved_model,
        achieved_report,
        optional=(
            "ncu_achieved_occupancy_pct",
            "ncu_tensor_pipe_pct",
            "ncu_sm_throughput_pct",
            "ncu_memory_throughput_pct",
        ),
        pool=("low_occupancy",),
        floor_pct=MIN_LOST_PCT,
        counters=NOT_MEASURED,
        fix=faster_kernels_fix,
    ),
]
