"""What a compiler would fix: unfused memory-bound kernels, torch.compile graph breaks."""

from __future__ import annotations

from hybrid.analysis.fusion import fusible_mask, unmeasured_fusion_premise
from hybrid.rules.advice import Suggestion, fused_optimizer, remove_graph_breaks, use_compile
from hybrid.rules.base import Context, Fix, FixInputs, Inputs, NoFix, Report, Rule
from hybrid.rules.common import rule_saving
from hybrid.rules.switches import COMPILE, FUSED_OPTIMIZER

MIN_LOST_PCT = 1.0
# The kernel time a fusible run can be in (not GEMMs: their causes are the tensor-core findings'):
# a fusion draws its saving from what the kernel findings before it left, the generic causes first, so
# no kernel nanosecond is claimed by it and by, say, the uncoalesced-load finding on the same chain
# (roofline_unfused_gelu: 0.25 ms of the chain's 2.25 ms is uncoalesced).
FUSION_POOL = (
    "kernel_no_shortfall",
    "kernel_unprofiled",
    "below_roofline",
    "uncoalesced",
    "low_occupancy",
    "small_grid",
)


def fusion_lost_ms(fusible_saving_ms: float) -> float:
    """Computed in metrics: each run of fusible kernels keeps its longest kernel's time once fused."""
    return max(0.0, fusible_saving_ms)


def graph_break_lost_ms(breaks: int, idle_launch_ms: float) -> float:
    """Without the compiled regions' timing (no torch pass): each break splits the compiled graph and
    returns to eager Python for the ops between; we charge the launch-idle time proportionally to the
    number of graph pieces beyond one."""
    if breaks <= 0:
        return 0.0
    return idle_launch_ms * breaks / (breaks + 1)


def fusion_advice(ctx: Context) -> list[Suggestion]:
    kinds = ctx.value("fusible_chain_kinds")
    condition = (
        f"{ctx.value('fusible_chains_per_step', 0.0):.0f} runs of "
        f"{ctx.value('fusible_chain_kernels_per_step', 0.0):.0f} back-to-back memory-bound "
        f"kernels a step ({ctx.value('fusible_chain_ms', 0.0):.3g} ms" + (f": {kinds})" if kinds else ")")
    )
    out = use_compile(ctx.config, why="fuse these kernels", condition=condition)
    if ctx.config.compiled:
        out.append(
            Suggestion(
                "Look for the runs outside the compiled regions (the optimizer step, the loss, "
                "code after a graph break) and compile or fuse those too",
                f"{condition}; the model is compiled, so these kernels run in eager code",
            )
        )
    out += fused_optimizer(ctx.config, condition=condition + "; an optimizer step is such a run unless fused")
    return out


def fusion_model(inp: Inputs) -> float | None:
    if inp["fusible_chains_per_step"] < 1:
        return None
    return fusion_lost_ms(inp["fusible_saving_ms"])


def fusion_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Back-to-back memory-bound kernels could be fused",
        pairs=[
            ("runs per step", "fusible_chains_per_step"),
            ("kernels in runs", "fusible_chain_kernels_per_step"),
            ("time in runs", "fusible_chain_ms"),
            ("what the runs hold", "fusible_chain_kinds"),
            ("estimated saving", "fusible_saving_ms"),
            ("distinct kernels per step", "distinct_kernels_per_step"),
        ],
        assumes=unmeasured_fusion_premise(
            ctx.value("fusible_chain_measured_pct"), ctx.value("fusible_chain_unmeasured_kinds")
        ),
        explanation=(
            "Each elementwise, normalization, softmax, reduction or layout-copy kernel reads its inputs "
            "from DRAM and writes its output back, so a run of them passes over the same tensors again "
            "and again. torch.compile generates these kernels itself and fuses each run into as few "
            "passes as its reductions need (a batch norm and its ReLU: one reduction, one pointwise "
            "pass), and runs convolutions channels-last, so cuDNN's layout transposes go. The estimate "
            "keeps each run's longest kernel; the launches between them are the launch findings' time."
        ),
        suggestions=fusion_advice(ctx),
    )


def graph_breaks_model(inp: Inputs) -> float | None:
    """The device idle time inside the compiled regions (the ledger carries the torch pass's regions
    onto the analyzed timeline): what removing the breaks can give back, as one graph runs its pieces
    back to back (graph_breaks on the H200: 7.2 ms of 17.8 idle inside the regions, 3.7 ms saved plain).
    Without the regions' timing, a share of the launch gaps."""
    breaks = int(inp["graph_breaks"])
    if breaks <= 0:
        return None
    if inp["compiled_region_idle_ms"] is not None:
        return inp.pools.get("compiled_region_break", 0.0)
    return graph_break_lost_ms(breaks, inp.pools.get("launch_gap", 0.0))


def graph_breaks_report(ctx: Context, lost_ms: float) -> Report:
    breaks = int(ctx.value("graph_breaks"))
    measured = "compiled_region_idle_ms" in ctx.metrics
    return Report(
        title=f"torch.compile graph breaks ({breaks})",
        pairs=[
            ("graph breaks", "graph_breaks"),
            ("reasons", "graph_break_reasons"),
            ("time in compiled regions", "compiled_region_ms"),
            ("GPU idle inside compiled regions", "compiled_region_idle_ms"),
        ],
        assumes=None
        if measured
        else "launch gaps spread evenly over the compiled pieces (the gaps are not attributed to a piece)",
        explanation=(
            "Each graph break ends a compiled region and falls back to eager Python, losing fusion and "
            "CUDA-graph capture across the break; the guard checks, graph switches, eager code and any "
            "sync at the break run on the host while the GPU waits."
        ),
        suggestions=[
            remove_graph_breaks(
                ctx.value("graph_break_reasons"),
                ctx.value("graph_break_hints"),
                f"torch.compile recorded {breaks} graph break(s)",
            )
        ],
    )


def fusion_fix(inputs: FixInputs) -> Fix:
    return Fix(
        "fused_kernels",
        "memory-bound kernels fused (torch.compile)",
        # The device side alone: the launches the fusion removes are the launch findings' host time
        # (planted cpu_numpy_augment: a host-bound step whose conv net's launches, dropped with the
        # fused kernels, replayed 2.4 ms of the CPU work's time as this finding's).
        {"host_launches": 0.0},
        "the step's measured runs of fusible kernels",
    )


def graph_breaks_fix(inputs: FixInputs) -> Fix | NoFix:
    return rule_saving(
        inputs,
        "less_host_work",
        "graph breaks removed (one compiled region)",
        "host time between compiled regions: the rule's estimate",
        "no host time between compiled regions",
    )


RULES = [
    Rule(
        "compile.fusible_elementwise",
        "COMPILER_GRAPH",
        ("fusible_saving_ms", "fusible_chains_per_step", "step_time_ms"),
        fusion_model,
        fusion_report,
        pool=FUSION_POOL,
        floor_pct=MIN_LOST_PCT,
        fix=fusion_fix,
        switches=(COMPILE, FUSED_OPTIMIZER),
        bound="fusible_chain_ms",
        callsite_kernels=fusible_mask,
    ),
    # Idle time inside the compiled regions, else launch gaps; the graph pieces' gaps come before
    # launch.bound's.
    Rule(
        "compile.graph_breaks",
        "COMPILER_GRAPH",
        ("graph_breaks", "step_time_ms"),
        graph_breaks_model,
        graph_breaks_report,
        optional=("compiled_region_idle_ms",),
        pool=("compiled_region_break", "launch_gap"),
        fix=graph_breaks_fix,
    ),
]
