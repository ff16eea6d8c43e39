"""Host-device synchronization inside the step: .item(), .cpu(), print(tensor), blocking copies."""

from __future__ import annotations

from hybrid.rules.advice import Suggestion
from hybrid.rules.base import Context, Finding, Rule
from hybrid.rules.common import claimed_ms, finding, lost_pct

# Below 1% of the step a sync stall is not worth restructuring the loop for.
MIN_LOST_PCT = 1.0


def sync_stall_lost_ms(step_ms: float, gpu_busy_ms: float, sync_blocked_ms: float,
                       idle_sync_ms: float, idle_memcpy_ms: float, idle_host_after_sync_ms: float = 0.0) -> float:
    """What removing the syncs saves. Without them host and device overlap, so the step takes at
    least the longer of the GPU's busy time and the host's own (non-blocked) time: the syncs cost at
    most step - max(busy, step - blocked). A host slower than the GPU barely waits in its syncs, and
    removing them saves nothing (the first H200 captures of the sync scripts: 0.06-0.07 ms blocked a
    step, and the fixed twins were no faster). The device idle the syncs caused bounds it as well: the
    wait itself, and the host work that followed a sync while the drained device waited for it."""
    overlap_bound = max(0.0, step_ms - max(gpu_busy_ms, step_ms - max(0.0, sync_blocked_ms)))
    idle_bound = max(0.0, idle_sync_ms) + max(0.0, idle_memcpy_ms) + max(0.0, idle_host_after_sync_ms)
    return min(overlap_bound, idle_bound)


def host_idle_claimed_ms(ctx: Context) -> float:
    """The part of the host-work idle time (idle_host_ms) that the sync finding explains: what it
    claims beyond the wait itself, at most the host time that followed a sync."""
    beyond_wait = (claimed_ms(ctx, "sync.per_step") - ctx.value("idle_sync_ms", 0.0)
                   - ctx.value("idle_memcpy_ms", 0.0))
    return min(max(0.0, beyond_wait), max(0.0, ctx.value("idle_host_after_sync_ms", 0.0)))


# Ops whose result shape depends on the data: they copy a count to the host and wait for it.
DATA_DEPENDENT_OPS = ("aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::repeat_interleave")
SCALAR_READ_OPS = ("aten::item", "aten::_local_scalar_dense")


def sync_advice(ctx: Context) -> list[Suggestion]:
    condition = (f"the host waits {ctx.value('sync_blocked_ms', 0.0):.3g} ms a step in "
                 f"{ctx.value('sync_count', 0.0):.0f} synchronizations")
    ops = ctx.profile.ops
    names = set(ops["name"].astype(str)) if len(ops) else set()
    out = []
    reads = [n for n in SCALAR_READ_OPS if n in names]
    if reads or ctx.value("dtoh_count", 0.0) > 0:
        what = ", ".join(reads) if reads else f"{ctx.value('dtoh_count', 0.0):.0f} device->host copies a step"
        out.append(Suggestion("Remove .item()/.cpu()/print(loss) from the training loop: accumulate metrics on the GPU "
                              "and read them every N steps, or copy with non_blocking=True into pinned memory and "
                              "read the value later", f"{condition}; the step reads values back ({what})",
                              tuple(reads)))
    shaped = [n for n in DATA_DEPENDENT_OPS if n in names]
    if shaped:
        out.append(Suggestion("Avoid data-dependent shapes in the step (torch.where instead of x[mask], fixed-size "
                              "outputs instead of nonzero/unique)", f"{condition}; the step runs {', '.join(shaped)}",
                              tuple(shaped)))
    out.append(Suggestion("Find each sync's source with torch.cuda.set_sync_debug_mode('warn')", condition))
    return out


def check_sync_per_step(ctx: Context) -> Finding | None:
    if ctx.value("sync_count", 0) < 1:
        return None
    lost = sync_stall_lost_ms(ctx.value("step_time_ms", 0.0), ctx.value("gpu_busy_ms", 0.0),
                              ctx.value("sync_blocked_ms", 0.0), ctx.value("idle_sync_ms", 0.0),
                              ctx.value("idle_memcpy_ms", 0.0), ctx.value("idle_host_after_sync_ms", 0.0))
    # A sync inside compiled code (.item() in a compiled forward) is also a graph break; that finding
    # owns the idle time inside the compiled regions.
    lost -= claimed_ms(ctx, "compile.graph_breaks")
    if lost_pct(ctx, lost) < MIN_LOST_PCT:
        return None
    return finding(
        ctx, id="sync.per_step", title="The host waits for the GPU inside every step", category="SYNCHRONIZATION",
        pairs=[("syncs per step", "sync_count"), ("host blocked in sync", "sync_blocked_ms"),
               ("GPU busy", "gpu_busy_ms"), ("GPU idle after syncs", "idle_sync_ms"),
               ("GPU idle while the host worked after a sync", "idle_host_after_sync_ms"),
               ("device->host copies per step", "dtoh_count")],
        explanation=("Each synchronization empties the GPU's work queue: the host blocks until the device "
                     "finishes, then the device idles while the host prepares and launches the next work; "
                     "host work that could have run while the GPU computed (sampling, logging, batch "
                     "preparation) now runs while it waits. "
                     "Typical sources are .item(), .cpu(), .tolist(), print(tensor), torch.nonzero or boolean "
                     "indexing (data-dependent shapes) and blocking copies."),
        suggestions=sync_advice(ctx),
        lost_ms=lost)


RULES = [Rule("sync.per_step", "SYNCHRONIZATION", ("sync_count", "step_time_ms"), check_sync_per_step)]
