"""Cache behaviour and access patterns of memory-bound kernels (needs ncu counters)."""

from __future__ import annotations

from hybrid.analysis.counters import UNCOALESCED_SECTORS_PER_REQUEST
from hybrid.rules.advice import Suggestion, use_compile
from hybrid.rules.base import Context, Inputs, NotMeasured, Report, Rule
from hybrid.rules.common import faster_kernels_fix

# 4 sectors (32 B each) per request is a fully coalesced warp of 4-byte loads (hopper-metrics.md).
IDEAL_SECTORS_PER_REQUEST = 4.0
# The widest load a thread issues is 16 bytes: a fully coalesced warp request then covers 512 B, 16
# sectors. Above that no access width explains the figure; at or below it, vectorized loads could.
MAX_COALESCED_SECTORS_PER_REQUEST = 16.0
MIN_LOST_PCT = 2.0
# Where most of the uncoalesced kernels' time loads through an index, the order of the indices decides the
# coalescing (mem_random_gather: 100%); over INDEXED_ONLY_PCT a layout change has nothing to act on.
INDEXED_SHARE_PCT = 50.0
INDEXED_ONLY_PCT = 80.0


def uncoalesced_lost_ms(memory_bound_ms: float, sectors_per_request: float) -> float:
    """Memory-bound time scales with sectors fetched: coalesced, it would shrink to ideal/actual."""
    if sectors_per_request <= IDEAL_SECTORS_PER_REQUEST:
        return 0.0
    return memory_bound_ms * (1.0 - IDEAL_SECTORS_PER_REQUEST / sectors_per_request)


def coalescing_advice(ctx: Context, sectors_per_request: float) -> list[Suggestion]:
    condition = (
        f"global loads fetch {sectors_per_request:.1f} sectors a request "
        f"({IDEAL_SECTORS_PER_REQUEST:.0f} is ideal)"
    )
    indexed = ctx.value("ncu_uncoalesced_indexed_pct", 0.0) or 0.0
    out = []
    if indexed >= INDEXED_SHARE_PCT:
        out.append(
            Suggestion(
                "Order the indices these kernels load through: sort each index batch once where it is built "
                "(or group lookups of the same rows) so neighbouring threads read neighbouring rows, and "
                "each fetched sector serves several of them",
                f"{condition}; {indexed:.0f}% of the uncoalesced kernels' time loads through an index "
                f"({ctx.value('ncu_uncoalesced_kernels')}), L2 hit rate "
                f"{ctx.value('ncu_l2_hit_pct', 0.0):.0f}%",
            )
        )
    if indexed >= INDEXED_ONLY_PCT:
        return out  # layouts, channels_last and a compiler's layout choice leave the indices' order as it is
    out.append(
        Suggestion(
            "Make tensors contiguous in the dimension kernels read (.contiguous()); avoid permute/transpose "
            "feeding elementwise ops",
            condition,
        )
    )
    if ctx.value("conv_kernel_ms", 0.0) > 0 and ctx.config.channels_last is not True:
        out.append(
            Suggestion(
                "model.to(memory_format=torch.channels_last) and inputs likewise",
                f"{condition}; convolutions ran without channels_last weights",
            )
        )
    return out + use_compile(ctx.config, why="let the compiler pick the layout", condition=condition)


def model(inp: Inputs) -> float | None:
    spr = inp["ncu_sectors_per_request"]
    if spr is None or spr < UNCOALESCED_SECTORS_PER_REQUEST:
        return None
    memory_share = inp.roofline.get("memory_bound_time_pct") or 0.0
    return uncoalesced_lost_ms(inp["kernel_time_ms"] * memory_share / 100.0, spr)


def report(ctx: Context, lost_ms: float) -> Report:
    spr = ctx.value("ncu_sectors_per_request")
    return Report(
        title="Global loads are poorly coalesced",
        # The ideal of 4 sectors holds for 4-byte loads; a fully coalesced warp of 16-byte vector loads
        # (PyTorch's vectorized elementwise kernels) reads 16 sectors a request, and the counters
        # collected do not give the access width (roofline_unfused_gelu: 16.0 on pow/add kernels;
        # mem_random_gather's 20.0 is uncoalesced at any width).
        assumes=(
            None
            if spr > MAX_COALESCED_SECTORS_PER_REQUEST
            else "4-byte loads per thread (coalesced 8- or 16-byte vector loads also fetch 8 or 16 sectors "
            "per request)"
        ),
        pairs=[
            ("sectors per load request", "ncu_sectors_per_request"),
            ("L1 hit rate", "ncu_l1_hit_pct"),
            ("L2 hit rate", "ncu_l2_hit_pct"),
            ("kernel time covered by ncu", "ncu_coverage_pct"),
            ("uncoalesced kernels", "ncu_uncoalesced_kernels"),
        ],
        explanation=(
            "Warps fetch many more 32-byte sectors per load than needed: strided or transposed access, or "
            "loads through an index whose neighbouring entries point far apart (a gather by random ids)."
        ),
        suggestions=coalescing_advice(ctx, spr),
    )


NOT_MEASURED = NotMeasured(
    id="memory.not_measured",
    title="Cache hit rates and DRAM traffic were not measured",
    explanation="L1/L2 hit rates, DRAM bytes and coalescing need ncu hardware counters; "
    "the roofline uses bytes estimated from tensor shapes instead.",
)
RULES = [
    Rule(
        "memory.uncoalesced",
        "MEMORY_HIERARCHY",
        ("kernel_time_ms", "step_time_ms"),
        model,
        report,
        optional=("ncu_sectors_per_request",),
        pool=("uncoalesced",),
        floor_pct=MIN_LOST_PCT,
        counters=NOT_MEASURED,
        fix=faster_kernels_fix,
    )
]
