"""The ledger's causes, in declared precedence: a nanosecond two causes could claim goes to the one
listed first. Idle causes explain why the device ran nothing; busy causes give each kernel's time one
shortfall, the most specific first (a small-grid FP32 GEMM is an FP32 GEMM: fixing the precision
changes the kernel, and with it the grid)."""

from __future__ import annotations

BUSY = "busy"
IDLE = "idle"

# (cause, label). Idle: what the host was doing while the device sat idle.
IDLE_CAUSES: tuple[tuple[str, str], ...] = (
    ("sync_wait", "host blocked in a sync"),
    ("blocking_copy", "host blocked in a synchronous copy"),
    ("compiled_region_break", "compiled regions split by graph breaks"),
    ("dataloader_fetch", "fetching a batch from a DataLoader"),
    ("host_after_sync", "host work after a sync (queue drained)"),
    ("launch_gap", "launch gaps between kernels"),
    ("cpu_heavy_op", "in CPU-heavy operators"),
    ("host_other", "other host work"),
)

# Busy: a compute kernel's time goes to its first shortfall, or to no shortfall at all; copies and
# memsets are what they are; collectives come last, so that the time they run beside compute is the
# compute's and `communication` is the exposed part.
BUSY_CAUSES: tuple[tuple[str, str], ...] = (
    ("fp32_gemm", "FP32 GEMMs (no tensor cores)"),
    ("misaligned_gemm", "16-bit GEMMs, narrow-alignment kernels"),
    ("small_grid", "kernels with fewer blocks than SMs"),
    ("uncoalesced", "kernels with uncoalesced loads"),
    ("low_occupancy", "kernels at low occupancy"),
    ("tensor_pipe_idle", "16-bit GEMMs with an idle tensor pipe"),
    ("below_roofline", "kernels far below the roofline"),
    ("kernel_no_shortfall", "kernels with no shortfall found"),
    ("kernel_unprofiled", "unprofiled kernels, no shortfall seen"),
    ("copy", "memory copies"),
    ("memset", "memsets"),
    ("communication", "collectives, no compute beside them"),
)

# Labels fit the terminal waterfall's 38 columns.
IDLE_ORDER = tuple(cause for cause, _ in IDLE_CAUSES)
BUSY_ORDER = tuple(cause for cause, _ in BUSY_CAUSES)
# Kernel shortfall classes in precedence (the compute kernels' part of BUSY_ORDER).
KERNEL_SHORTFALLS = BUSY_ORDER[:7]
LABELS = dict(IDLE_CAUSES + BUSY_CAUSES)
STATE = {**{cause: IDLE for cause in IDLE_ORDER}, **{cause: BUSY for cause in BUSY_ORDER}}
