"""The names a run writes (the injector into a pass's folder and its traces, the collectors into the run
directory) and the loaders read back: one home, so that the two sides cannot drift apart. Plain values
(only `re` imported), cheap to import inside the user's process."""

from __future__ import annotations

import re

# Files the injector leaves in a pass's folder.
INJECT_FILE = "inject.json"  # the workload's record: outcome, steps seen, step times, warnings
TRACE_FILE = "trace.json"  # torch.profiler's Chrome trace (torch pass)
# torch.profiler computes FLOPs per operator (with_flops) but recent versions leave them out of the
# Chrome trace; they are saved beside it, keyed by the operator's `External id` in the trace.
OP_FLOPS_FILE = "op_flops.json"

# Where a run directory keeps the nsys pass's export: NSYS_DIR/NSYS_EXPORT_FILE.
NSYS_DIR = "nsys"
NSYS_EXPORT_FILE = "profile.sqlite"

# NVTX domains of the injector's ranges (nsys and ncu passes).
STEP_DOMAIN = "hybrid"  # `warmup` and `step N`
MODULE_DOMAIN = "hybrid.modules"  # module ranges (--nvtx-modules)

# record_function name of measured step N in the torch trace: torch.profiler's own step marker, which
# HolisticTraceAnalysis and TensorBoard read. Traces of earlier versions named it `hybrid/step N`.
TORCH_STEP_PREFIX = "ProfilerStep#"
LEGACY_TORCH_STEP_PREFIX = "hybrid/step "
TORCH_STEP_NAME = re.compile(r"^(?:ProfilerStep#|hybrid/step )(\d+)$")

# The folder of rank N of a torchrun job inside the job's run directory.
RANK_DIR_FORMAT = "rank-{:02d}"
