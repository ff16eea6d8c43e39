"""Calibrate a run on its GPU: time the torch pass's top GEMM/convolution shapes in the precisions its fixes
propose (hybrid.collect.microbench) and write RUN_DIR/calibration.json, which the analysis replays the fixes
with. `hybrid run` runs this as its calibration pass (hybrid.collect.calibration_pass); by hand:

    python -m hybrid.collect.calibrate_run RUN_DIR [RUN_DIR...] [--budget-s 5] [--top 8] [--device cuda]
                                           [--cache PATH] [--out-dir DIR]

writes RUN_DIR/calibration.json (or DIR/NAME.json). On a machine without CUDA, --device cpu times the same
shapes on the CPU (a smoke test of the pass; CPU figures are never used for a GPU's replay).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from hybrid.collect.microbench import cache_path, calibrate, write_json
from hybrid.errors import HybridError, InputError
from hybrid.files import gunzip_limited, read_regular
from hybrid.load.torch_trace import load_torch_trace
from hybrid.replay.calibrate import CALIBRATION_FILE, GEMM_OPS, RunShape, summary, top_shapes
from hybrid.rundir import RunDir

# Seconds of timing one run's calibration may take (start-up, trace loading and the pinned copy aside):
# 8 shapes in three precisions took 3.6 s on the H200 (session 3's calibration of the planted captures).
DEFAULT_BUDGET_S = 5.0
DEFAULT_TOP = 8
NO_SHAPES = "no GEMM/convolution with recorded shapes in the torch pass's measured steps"


def recorded_args(trace_path: Path) -> dict[tuple[int, int], dict]:
    """The trace args of each GEMM/convolution op (Concrete Inputs: a convolution's stride, padding,
    dilation, transposed, groups; Input Strides: a GEMM operand's layout) by (tid, start_ns), as
    hybrid.load.torch_trace keys its operators: Profile.ops keeps their shapes, not these."""
    data = read_regular(trace_path)
    if data[:2] == b"\x1f\x8b":
        data = gunzip_limited(data, trace_path)
    out: dict[tuple[int, int], dict] = {}
    for event in json.loads(data).get("traceEvents") or []:
        if not isinstance(event, dict) or event.get("name") not in GEMM_OPS or event.get("ph") != "X":
            continue
        args, tid, ts = event.get("args"), event.get("tid"), event.get("ts")
        if isinstance(args, dict) and isinstance(tid, int) and isinstance(ts, (int, float)):
            out[(tid, int(np.rint(ts * 1000.0)))] = args
    return out


def run_shapes(trace_path: Path, top: int) -> list[RunShape]:
    """The run's top shapes, each GEMM in its operands' layout and each convolution with its stride,
    padding, dilation and groups (a second read of the trace: resnet50's 0.76 MB trace.json.gz)."""
    return top_shapes(load_torch_trace(trace_path).ops, top, recorded_args(trace_path))


def calibrate_run(
    run: RunDir, *, device: str, budget_s: float, top: int = DEFAULT_TOP, cache: Path | None = None
) -> dict:
    """The calibration document of one run directory (not written)."""
    trace = run.torch_trace()
    if trace is None:
        raise InputError(
            f"{run.path} has no torch pass (torch/trace.json): the GEMM and convolution shapes come from it",
            "calibrate a run directory written by `hybrid run` with the torch pass on",
        )
    shapes = run_shapes(trace, top)
    precision = ((run.read_inject("torch") or {}).get("config") or {}).get("precision") or {}
    result = calibrate(
        shapes, device, cache, budget_s, cudnn_benchmark=precision.get("cudnn_benchmark") is True
    )
    if not shapes:
        result["note"] = NO_SHAPES
    return result


def _label(run_dir: Path) -> str:
    """A name for a run directory's calibration file: the folder, or its parent for a `run/` folder."""
    resolved = run_dir.resolve()
    return resolved.parent.name if resolved.name == "run" else resolved.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hybrid.collect.calibrate_run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "run_dirs", type=Path, nargs="+", help="run directories with a torch pass (torch/trace.json)"
    )
    parser.add_argument("--cache", type=Path, default=None, help=f"cache file (default {cache_path()})")
    parser.add_argument(
        "--top", type=int, default=DEFAULT_TOP, help="GEMM/conv shapes to time, by device time"
    )
    parser.add_argument(
        "--budget-s", type=float, default=DEFAULT_BUDGET_S, help="seconds of timing per run directory"
    )
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a smoke test")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="write NAME.json here instead of RUN_DIR/calibration.json (NAME: the run's folder)",
    )
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "error: CUDA is not available here\nfix: run the calibration on the GPU the run used, "
            "or pass --device cpu for a smoke test",
            file=sys.stderr,
        )
        return 2
    for run_dir in args.run_dirs:
        try:
            run = RunDir.open(run_dir)
            result = calibrate_run(
                run, device=args.device, budget_s=args.budget_s, top=args.top, cache=args.cache
            )
            out = (args.out_dir / f"{_label(run_dir)}.json") if args.out_dir else run.path / CALIBRATION_FILE
            write_json(out, result)
        except HybridError as exc:
            print(exc.message(), file=sys.stderr)
            return exc.exit_code
        print(f"{run_dir}: {summary(result)} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
