"""Host-device synchronization inside the step: .item(), .cpu(), print(tensor), blocking copies."""

from __future__ import annotations

from hybrid.rules.base import Context, Finding, Rule
from hybrid.rules.common import finding, lost_pct

# Below 1% of the step a sync stall is not worth restructuring the loop for.
MIN_LOST_PCT = 1.0


def sync_stall_lost_ms(idle_sync_ms: float, idle_memcpy_ms: float) -> float:
    """Device idle time while (or right after) the host blocked on it: the queue drained and the GPU
    waited for the host to refill it. Without the sync the host would have run ahead."""
    return max(0.0, idle_sync_ms) + max(0.0, idle_memcpy_ms)


def check_sync_per_step(ctx: Context) -> Finding | None:
    if ctx.value("sync_count", 0) < 1:
        return None
    lost = sync_stall_lost_ms(ctx.value("idle_sync_ms", 0.0), ctx.value("idle_memcpy_ms", 0.0))
    if lost_pct(ctx, lost) < MIN_LOST_PCT:
        return None
    return finding(
        ctx, id="sync.per_step", title="The host waits for the GPU inside every step", category="SYNCHRONIZATION",
        pairs=[("syncs per step", "sync_count"), ("host blocked in sync", "sync_blocked_ms"),
               ("GPU idle after syncs", "idle_sync_ms"), ("device->host copies per step", "dtoh_count")],
        explanation=("Each synchronization empties the GPU's work queue: the host blocks until the device "
                     "finishes, then the device idles while the host prepares and launches the next work. "
                     "Typical sources are .item(), .cpu(), .tolist(), print(tensor), torch.nonzero or boolean "
                     "indexing (data-dependent shapes) and blocking copies."),
        suggestions=[("Remove .item()/.cpu()/print(loss) from the training loop: accumulate metrics on the GPU "
                     "and read them every N steps."),
                     "Find hidden syncs with torch.cuda.set_sync_debug_mode('warn').",
                     "Copy to the host with non_blocking=True into pinned memory and read the value later.",
                     "Avoid data-dependent shapes (torch.nonzero, x[mask]) in the step; use torch.where."],
        lost_ms=lost)


RULES = [Rule("sync.per_step", "SYNCHRONIZATION", ("sync_count", "step_time_ms"), check_sync_per_step)]
