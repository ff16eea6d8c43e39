"""Host-device synchronization inside the step: .item(), .cpu(), print(tensor), blocking copies."""

from __future__ import annotations

from hybrid.analysis.op_ranges import DATA_DEPENDENT_OPS
from hybrid.rules.advice import Suggestion
from hybrid.rules.base import Context, Fix, FixInputs, Inputs, Report, Rule
from hybrid.rules.common import SCALAR_READ_OPS

# Below 1% of the step a sync stall is not worth restructuring the loop for.
MIN_LOST_PCT = 1.0
# The device idle the syncs caused: the waits themselves, and the host work that followed a sync
# while the drained device waited for it (hybrid.ledger.causes).
POOL = ("sync_wait", "blocking_copy", "host_after_sync")
# Where most of the time the host sat in syncs shows one library's frames (hybrid.analysis.sync_sites),
# the syncs are that library's to remove: torchvision's Faster R-CNN eval, 100% in its nms, box decoding
# and RoI pooling; torch_geometric's GCN, 96% in add_remaining_self_loops. Over LIBRARY_ONLY_PCT, the
# loop's own lines hold too little to advise editing them.
LIBRARY_SHARE_PCT = 50.0
LIBRARY_ONLY_PCT = 80.0


def sync_stall_lost_ms(step_ms: float, gpu_busy_ms: float, sync_blocked_ms: float) -> float:
    """What removing the syncs saves. Without them host and device overlap, so the step takes at
    least the longer of the GPU's busy time and the host's own (non-blocked) time: the syncs cost at
    most step - max(busy, step - blocked). A host slower than the GPU barely waits in its syncs, and
    removing them saves nothing (the first H200 captures of the sync scripts: 0.06-0.07 ms blocked a
    step, and the fixed twins were no faster). The device idle the syncs caused (the pool) bounds it too."""
    return max(0.0, step_ms - max(gpu_busy_ms, step_ms - max(0.0, sync_blocked_ms)))


def sync_advice(ctx: Context) -> list[Suggestion]:
    condition = (
        f"the host waits {ctx.value('sync_blocked_ms', 0.0):.3g} ms a step in "
        f"{ctx.value('sync_count', 0.0):.0f} synchronizations"
    )
    names = ctx.op_names
    out = []
    library_pct = ctx.value("sync_library_pct", 0.0) or 0.0
    library = library_pct >= LIBRARY_SHARE_PCT
    if library:
        out.append(_library_advice(ctx, condition, library_pct))
    loops_own = library_pct < LIBRARY_ONLY_PCT
    reads = [n for n in SCALAR_READ_OPS if n in names] if loops_own else []
    shaped = [n for n in DATA_DEPENDENT_OPS if n in names] if loops_own else []
    if shaped:
        out.append(
            Suggestion(
                "Avoid data-dependent shapes in the step (torch.where instead of x[mask], fixed-size "
                "outputs instead of nonzero/unique)",
                f"{condition}; the step runs {', '.join(shaped)}",
                tuple(shaped),
            )
        )
    if reads or (loops_own and ctx.value("dtoh_count", 0.0) > 0):
        what = ", ".join(reads) if reads else f"{ctx.value('dtoh_count', 0.0):.0f} device->host copies a step"
        read_back = Suggestion(
            "Remove .item()/.cpu()/print(loss) from the loop: accumulate metrics on the GPU and read them "
            "every N steps, or copy with non_blocking=True into pinned memory and read the value later",
            f"{condition}; the step reads values back ({what})",
            tuple(reads),
        )
        # Each data-dependent op copies its result's size to the host: without a scalar read in the step,
        # those are the copies (torchvision's detection eval: 22 copies a step, no .item(), nonzero and
        # masked_select in its post-processing), and reshaping comes first.
        if reads and not library:
            out.insert(0, read_back)
        else:
            out.append(read_back)
    device_syncs = ctx.value("device_sync_count", 0.0)
    if device_syncs >= 1:
        # torch.cuda.set_sync_debug_mode flags the syncs tensor operations make, not these.
        out.insert(
            0,
            Suggestion(
                "Remove the torch.cuda.synchronize() calls from the step (where they time its phases, record "
                "torch.cuda.Event(enable_timing=True) pairs and read their elapsed_time() once per log "
                "interval)",
                f"{condition}; {device_syncs:.0f} a step are device-wide (cudaDeviceSynchronize, which "
                "torch.cuda.synchronize() calls)",
            ),
        )
    # The samples already place a library's syncs; set_sync_debug_mode would list the same calls.
    if (ctx.value("sync_count", 0.0) - device_syncs >= 1 and not library) or not out:
        out.append(
            Suggestion("Find each sync's source with torch.cuda.set_sync_debug_mode('warn')", condition)
        )
    return out


def _library_advice(ctx: Context, condition: str, library_pct: float) -> Suggestion:
    """The syncs are a library's: where they are, and the two ways a caller removes a library's host read
    (supply what it reads back, or call it less often), not a rewrite of the loop."""
    package = str(ctx.value("sync_library_package"))
    owner = f"{package}'" if package.endswith("s") else f"{package}'s"
    return Suggestion(
        f"The syncs are in {owner} code, not in a line of the loop: look at those functions for an "
        "argument that supplies what they read back from the GPU (sizes, counts, a result cached across "
        "steps whose inputs do not change), or call them on more data at a time so each sync is paid once "
        "for more of it",
        f"{condition}; {library_pct:.0f}% of the Python samples taken while the host sat in them are in "
        f"{package}: {ctx.value('sync_library_sites')}",
    )


def model(inp: Inputs) -> float | None:
    if inp["sync_count"] < 1:
        return None
    return sync_stall_lost_ms(inp.step_ms, inp["gpu_busy_ms"], inp["sync_blocked_ms"])


def report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="The host waits for the GPU inside every step",
        pairs=[
            ("syncs per step", "sync_count"),
            ("host blocked in sync", "sync_blocked_ms"),
            ("GPU busy", "gpu_busy_ms"),
            ("GPU idle while the host sat in a sync", "idle_sync_wait_ms"),
            ("GPU idle while the host worked after a sync", "idle_host_after_sync_ms"),
            ("device->host copies per step", "dtoh_count"),
            ("where the host sat in them, by share of the samples", "sync_library_sites"),
        ],
        explanation=(
            "Each synchronization empties the GPU's work queue: the host blocks until the device "
            "finishes, then the device idles while the host prepares and launches the next work; "
            "host work that could have run while the GPU computed (sampling, logging, batch "
            "preparation) now runs while it waits. "
            "Typical sources are .item(), .cpu(), .tolist(), print(tensor), torch.nonzero or boolean "
            "indexing (data-dependent shapes) and blocking copies."
        ),
        suggestions=sync_advice(ctx),
    )


def fix(inputs: FixInputs) -> Fix:
    return Fix(
        "no_syncs",
        "no host waits inside the step (values kept on the device)",
        {},
        "the step's measured syncs and blocking reads",
    )


RULES = [
    Rule(
        "sync.per_step",
        "SYNCHRONIZATION",
        ("sync_count", "step_time_ms", "gpu_busy_ms", "sync_blocked_ms"),
        model,
        report,
        pool=POOL,
        floor_pct=MIN_LOST_PCT,
        fix=fix,
    )
]
