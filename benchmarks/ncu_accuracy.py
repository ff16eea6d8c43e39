"""Check hybrid's ncu metric set, command line and CSV reader against kernels whose work is known.

Runs on a GPU machine with Nsight Compute:

    python benchmarks/ncu_accuracy.py RESULTS.md

Each case runs in its own process under ncu, built by nsight.ncu.build_ncu_command and read by
nsight.ncu_csv, exactly as the ncu pass does; the op is warmed up outside the NVTX range
"step 0" (domain "hybrid") and run once inside it, and every kernel of that step is summed. The
cases launch from one thread, so the NVTX step filter sees all their kernels.
Writes a markdown table of expected vs measured values and exits 1 when a check fails; a case whose
ncu run fails is reported as failed and the other cases still run.

    python benchmarks/ncu_accuracy.py RESULTS.md --rescore WORK --gpu "NVIDIA H200"

checks the CSVs a GPU run left in WORK (its --work folder) again, without a GPU.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hybrid.errors import HybridError, nsight_errors_as_hybrid
from hybrid.hardware import match_spec
from nsight import ncu
from nsight.ncu_csv import parse_ncu_csv

# The copy case moves 1 GiB: 40x the H200's 50 MB L2, so at most ~2.5% of the writes can still sit in
# L2. A contiguous same-dtype copy_ is a cudaMemcpy on the copy engine, which ncu does not profile (the
# first H200 run said "No kernels were profiled"), so the source is a column slice of a wider matrix:
# rows of COPY_COLS floats, contiguous within a row, and PyTorch copies it with a kernel that reads
# and writes each byte once.
COPY_ROWS, COPY_COLS = 32768, 8192
COPY_BYTES = COPY_ROWS * COPY_COLS * 4
GEMM_BF16 = (8192, 8192, 8192)
GEMM_FP32 = (4096, 4096, 4096)
ELEMENTWISE_FLOATS = 1 << 28  # 1 GiB of fp32

DRAM_TOLERANCE = 0.05  # the brief's ±5% for DRAM bytes of a copy
FLOP_TOLERANCE = 0.02  # ±2% for FLOPs of a GEMM
# "Tensor FLOPs ≈ 0" for an fp32 GEMM with TF32 off: under 0.1% of its FLOPs.
NO_TENSOR_FRACTION = 0.001
# A large bf16 GEMM keeps the tensor pipe busy most of the time (95% seen on an H200).
TENSOR_PIPE_BUSY_PCT = 50.0
WARMUP_RUNS = 2
CASE_TIMEOUT_S = 300


def build_op(name: str) -> Callable[[], object]:
    """The op of case `name`, its tensors allocated on the GPU."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if name == "copy":
        wide = torch.empty(COPY_ROWS, 2 * COPY_COLS, device="cuda")
        src = wide[:, :COPY_COLS]
        dst = torch.empty(COPY_ROWS, COPY_COLS, device="cuda")
        op = lambda: dst.copy_(src)
    elif name in ("gemm_bf16", "gemm_fp32"):
        m, n, k = GEMM_BF16 if name == "gemm_bf16" else GEMM_FP32
        dtype = torch.bfloat16 if name == "gemm_bf16" else torch.float32
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        op = lambda: torch.mm(a, b, out=out)
    elif name == "elementwise":
        x = torch.randn(ELEMENTWISE_FLOATS, device="cuda")
        y = torch.empty_like(x)
        op = lambda: torch.mul(x, 2.0, out=y)
    else:
        raise SystemExit(f"unknown case {name}")
    return op


def run_case(name: str) -> None:
    """The profiled process: one op, warmed up, then once inside the step range."""
    import nvtx
    import torch

    op = build_op(name)
    for _ in range(WARMUP_RUNS):
        op()
    torch.cuda.synchronize()
    with nvtx.annotate("step 0", domain="hybrid"):
        op()
        torch.cuda.synchronize()


@dataclass
class Check:
    case: str
    quantity: str
    expected: str
    measured: float
    passed: bool
    unit: str


def profile(case: str, ncu_path: Path, work: Path) -> dict[str, float]:
    """Run one case under ncu; the counters of all kernels in its step, summed."""
    run = ncu.run_ncu(
        ncu_path,
        work / f"{case}.csv",
        work / f"{case}.log",
        [sys.executable, str(Path(__file__).resolve()), "--case", case],
        kernel_names=[],
        nvtx_step=0,
        env=dict(os.environ),
        timeout_s=CASE_TIMEOUT_S,
    )
    return summed_counters(run.csv_path)


def summed_counters(csv_path: Path) -> dict[str, float]:
    """The counters of all kernels in a case's CSV, summed (percentages: the time-weighted mean)."""
    frame = parse_ncu_csv(csv_path).frame
    weights = frame["duration_ns"] / frame["duration_ns"].sum()
    summed = {
        col: float(frame[col].sum(min_count=1))
        for col in ("duration_ns", "dram_read_bytes", "dram_write_bytes", "fp32_flops", "tensor_flops")
    }
    for col in ("tensor_pipe_pct", "sm_throughput_pct", "memory_throughput_pct"):
        summed[col] = float((frame[col] * weights).sum(min_count=1))
    summed["kernels"] = float(len(frame))
    return summed


def within(measured: float, expected: float, tolerance: float) -> bool:
    return not math.isnan(measured) and abs(measured - expected) <= tolerance * expected


def roofline_bound(flops: float, dram_bytes: float, precision: str, gpu: str) -> tuple[float, float, str]:
    """(arithmetic intensity, ridge point, bound) by hybrid's roofline rule (hybrid/analysis/roofline.py:
    memory-
    bound left of the ridge, peak FLOP/s of the precision over DRAM bandwidth), from the measured FLOPs
    and DRAM bytes and the datasheet peaks of `gpu`."""
    spec = match_spec(gpu)
    if spec is None or not spec.flops_per_s.get(precision):
        return math.nan, math.nan, "unknown GPU"
    ai = flops / dram_bytes if dram_bytes > 0 else math.inf
    ridge = spec.flops_per_s[precision] / spec.dram_bytes_per_s
    return ai, ridge, "memory" if ai < ridge else "compute"


def bound_check(
    case: str, counters: dict[str, float], flops_column: str, precision: str, expected: str, gpu: str
) -> Check:
    dram = counters["dram_read_bytes"] + counters["dram_write_bytes"]
    ai, ridge, bound = roofline_bound(counters[flops_column], dram, precision, gpu)
    return Check(
        case,
        f"roofline class (AI vs ridge {ridge:.4g} FLOP/B)",
        f"{expected}-bound",
        ai,
        bound == expected,
        f"FLOP/B: {bound}-bound",
    )


def copy_checks(copy: dict[str, float], gpu: str) -> list[Check]:
    dram = copy["dram_read_bytes"] + copy["dram_write_bytes"]
    return [
        Check(
            "strided copy 1 GiB",
            "DRAM read+write bytes",
            f"{2 * COPY_BYTES:.4g} ±5%",
            dram,
            within(dram, 2 * COPY_BYTES, DRAM_TOLERANCE),
            "byte",
        )
    ]


def gemm_bf16_checks(bf16: dict[str, float], gpu: str) -> list[Check]:
    m, n, k = GEMM_BF16
    out = []
    out.append(
        Check(
            f"bf16 GEMM {m}x{n}x{k}",
            "tensor FLOPs",
            f"{2 * m * n * k:.4g} ±2%",
            bf16["tensor_flops"],
            within(bf16["tensor_flops"], 2 * m * n * k, FLOP_TOLERANCE),
            "flop",
        )
    )
    out.append(
        Check(
            f"bf16 GEMM {m}x{n}x{k}",
            "tensor pipe busy",
            f"> {TENSOR_PIPE_BUSY_PCT:.0f}",
            bf16["tensor_pipe_pct"],
            bf16["tensor_pipe_pct"] > TENSOR_PIPE_BUSY_PCT,
            "%",
        )
    )
    out.append(bound_check(f"bf16 GEMM {m}x{n}x{k}", bf16, "tensor_flops", "bf16", "compute", gpu))
    return out


def gemm_fp32_checks(fp32: dict[str, float], gpu: str) -> list[Check]:
    m, n, k = GEMM_FP32
    out = []
    out.append(
        Check(
            f"fp32 GEMM {m}x{n}x{k}, TF32 off",
            "tensor FLOPs",
            f"< {NO_TENSOR_FRACTION:.1%} of 2MNK",
            fp32["tensor_flops"],
            fp32["tensor_flops"] < NO_TENSOR_FRACTION * 2 * m * n * k,
            "flop",
        )
    )
    out.append(
        Check(
            f"fp32 GEMM {m}x{n}x{k}, TF32 off",
            "fp32 FLOPs",
            f"{2 * m * n * k:.4g} ±2%",
            fp32["fp32_flops"],
            within(fp32["fp32_flops"], 2 * m * n * k, FLOP_TOLERANCE),
            "flop",
        )
    )
    return out


def elementwise_checks(ew: dict[str, float], gpu: str) -> list[Check]:
    return [bound_check("elementwise x*2 (1 GiB fp32)", ew, "fp32_flops", "fp32", "memory", gpu)]


CASES = {
    "copy": copy_checks,
    "gemm_bf16": gemm_bf16_checks,
    "gemm_fp32": gemm_fp32_checks,
    "elementwise": elementwise_checks,
}


def failed_case(case: str, error: HybridError) -> Check:
    """A case whose ncu run gave no counters: one failing row that says why."""
    # One table cell: ncu's message lines joined, and no "|" to split the row.
    reason = " ".join(error.cause.split()).replace("|", "/")
    return Check(case, f"ncu run failed: {reason}", "counters", math.nan, False, "")


def run_cases(
    measure: Callable[[str], dict[str, float]], gpu: str, cases: dict = CASES
) -> tuple[dict[str, dict[str, float]], list[Check]]:
    """Measure every case and check it; a case that fails is reported and the rest still run."""
    results: dict[str, dict[str, float]] = {}
    rows: list[Check] = []
    for case, case_checks in cases.items():
        try:
            with nsight_errors_as_hybrid():
                results[case] = measure(case)
        except HybridError as error:
            rows.append(failed_case(case, error))
            continue
        rows += case_checks(results[case], gpu)
    return results, rows


def device_name() -> str:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def write_report(path: Path, source: str, results: dict[str, dict[str, float]], rows: list[Check]) -> None:
    lines = [
        "# ncu accuracy: hybrid's metric set on kernels of known work",
        "",
        source,
        "",
        "| case | quantity | expected | measured | unit | result |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.case} | {r.quantity} | {r.expected} | {r.measured:.4g} | {r.unit} | "
        f"{'pass' if r.passed else 'FAIL'} |"
        for r in rows
    ]
    lines += [
        "",
        "Kernels profiled per case: "
        + ", ".join(f"{case} {int(res['kernels'])}" for case, res in results.items()),
        "",
    ]
    path.write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="markdown file to write")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: the profiled process
    parser.add_argument("--work", type=Path, help="keep the ncu CSVs and logs here")
    parser.add_argument(
        "--rescore", type=Path, metavar="WORK", help="check the CSVs of an earlier run's --work folder"
    )
    parser.add_argument("--gpu", help="with --rescore: the GPU the CSVs were measured on (for its peaks)")
    args = parser.parse_args()
    if args.case:
        run_case(args.case)
        return 0
    if args.out is None:
        parser.error("give the markdown file to write")
    if args.rescore:
        if not args.gpu:
            parser.error("--rescore needs --gpu NAME (the device the CSVs came from)")
        results, rows = run_cases(lambda case: summed_counters(args.rescore / f"{case}.csv"), args.gpu)
        source = (
            f"GPU: {args.gpu}; counters re-read from the CSVs in {args.rescore} (no GPU used for this table)"
        )
    else:
        found = ncu.find_ncu()
        if found is None:
            parser.error(f"ncu not found: put it on PATH or set {ncu.NCU_ENV}")
        work = args.work or Path(tempfile.mkdtemp(prefix="ncu_accuracy_"))
        work.mkdir(parents=True, exist_ok=True)
        gpu = device_name()
        results, rows = run_cases(lambda case: profile(case, found, work), gpu.split(",")[0])
        source = f"GPU: {gpu}; ncu {ncu.ncu_version(found)} ({found})"
    write_report(args.out, source, results, rows)
    print(args.out.read_text())
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
