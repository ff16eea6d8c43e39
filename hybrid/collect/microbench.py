"""Time GEMM/convolution shapes with torch on this machine's GPU, in their own precision and in what a
fix proposes (hybrid.replay.calibrate.PROPOSALS), and the pinned host->device copy rate; no collector is
attached. Timings are cached per GPU, torch version and shape in ~/.cache/hybrid/calibration.json
(HYBRID_CACHE_DIR overrides the folder), so a second run on the same GPU times nothing twice; a time
budget bounds what one call times."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from hybrid.files import write_file
from hybrid.replay.calibrate import CONV_ASSUMED, PROPOSALS, RunShape, Shape, cache_dir, padded

CACHE_NAME = "calibration.json"
# A timing is the median of TIMED_RUNS loops after WARMUP_RUNS calls, each loop long enough (MIN_LOOP_S)
# that launch overhead and timer resolution are noise. A call slower than SLOW_CALL_S (8192x50257x1020 in
# fp16 took 7.5 ms on the H200; an FP32 GEMM of a large model can take 100 ms) is timed SLOW_RUNS times,
# once each, so one shape cannot spend the budget alone.
WARMUP_RUNS = 3
TIMED_RUNS = 5
MIN_LOOP_S = 0.02
MAX_LOOP = 200
SLOW_CALL_S = 0.05
SLOW_RUNS = 3
PINNED_COPY_BYTES = 64 * 1024 * 1024
# A variant is started only if the calls it needs at the shape's measured speed fit in what is left of the
# budget: about WARMUP_RUNS + 1 + TIMED_RUNS loops of MIN_LOOP_S, or SLOW_RUNS + 2 slow calls.
FAST_VARIANT_S = (WARMUP_RUNS + 1) * 0.001 + TIMED_RUNS * MIN_LOOP_S


def cache_path() -> Path:
    return cache_dir() / CACHE_NAME


def read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict, *, cache: bool = False) -> None:
    # hybrid.files: never through a link planted at a fixed temporary name in a received run directory,
    # and an earlier calibration.json kept as calibration.N.json; the cache is hybrid's own to replace.
    write_file(path, json.dumps(data, indent=1, sort_keys=True) + "\n", cache=cache)


def _operands(torch, shape: Shape, variant: str, device: str):
    base = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[shape.dtype]
    dims = padded(shape).dims if variant.endswith("_aligned") else shape.dims
    dtype = torch.bfloat16 if variant == "bf16" else base

    def matrix(rows: int, cols: int, batch: tuple[int, ...], transposed: bool):
        """A (batch, rows, cols) operand, column-major where the run's was (a transposed view)."""
        if transposed:
            return torch.randn(*batch, cols, rows, device=device, dtype=dtype).transpose(-1, -2)
        return torch.randn(*batch, rows, cols, device=device, dtype=dtype)

    layout = shape.layout or "nn"
    if shape.op in ("mm", "bmm"):
        m, n, k = dims[:3]
        batch = tuple(dims[3:4])
        return matrix(m, k, batch, layout[0] == "t"), matrix(k, n, batch, layout[1] == "t")
    n_, c, h, w, o, ci, kh, kw = dims
    return (
        torch.randn(n_, c, h, w, device=device, dtype=dtype),
        torch.randn(o, ci, kh, kw, device=device, dtype=dtype),
    )


def _call(torch, shape: Shape, a, b):
    if shape.op == "mm":
        return torch.mm(a, b)
    if shape.op == "bmm":
        return torch.bmm(a, b)
    if shape.conv:
        sh, sw, ph, pw, dh, dw, groups = shape.conv
        return torch.nn.functional.conv2d(
            a, b, stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=groups
        )
    return torch.nn.functional.conv2d(a, b, padding=(b.shape[2] // 2, b.shape[3] // 2))


def _time_us(torch, fn, device: str) -> float:
    """Median time of one call in microseconds (CUDA events' clock: the wall clock after a synchronize on a
    GPU; the wall clock on the CPU)."""

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    fn()  # the first call picks the kernel (cuBLAS heuristics, cuDNN algorithm) and allocates
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - start, 1e-7)
    if once >= SLOW_CALL_S:
        samples = []
        for _ in range(SLOW_RUNS):
            t0 = time.perf_counter()
            fn()
            sync()
            samples.append((time.perf_counter() - t0) * 1e6)
        return sorted(samples)[len(samples) // 2]
    for _ in range(WARMUP_RUNS - 1):
        fn()
    loop = int(min(MAX_LOOP, max(1, MIN_LOOP_S / once)))
    samples = []
    for _ in range(TIMED_RUNS):
        sync()
        t0 = time.perf_counter()
        for _ in range(loop):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / loop * 1e6)
    return sorted(samples)[len(samples) // 2]


def time_shape(torch, shape: Shape, variant: str, device: str) -> float:
    """Microseconds per call of `shape` in `variant` ("current", "tf32", "bf16", "*_aligned"); TF32 is off
    except for the "tf32" variant (the current FP32 kernels are the ones that ran without it)."""
    a, b = _operands(torch, shape, variant, device)
    tf32_before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        allow = variant == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
        with torch.no_grad():
            return _time_us(torch, lambda: _call(torch, shape, a, b), device)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32_before


def pinned_copy_bytes_per_s(torch, device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    host = torch.empty(PINNED_COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    target = torch.empty(PINNED_COPY_BYTES, dtype=torch.uint8, device=device)
    us = _time_us(torch, lambda: target.copy_(host, non_blocking=True), device)
    return PINNED_COPY_BYTES / (us * 1e-6)


def device_key(torch, device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)} | torch {torch.__version__}"
    return f"cpu | torch {torch.__version__}"


def _fits(timings: dict, left_s: float) -> bool:
    """Whether one more variant of a shape fits in `left_s`, judged by its slowest variant timed so far."""
    slowest_s = max(timings.values(), default=0.0) / 1e6
    needed = (SLOW_RUNS + 2) * slowest_s if slowest_s >= SLOW_CALL_S else FAST_VARIANT_S + 5 * slowest_s
    return needed <= left_s


def calibrate(
    shapes: list[RunShape],
    device: str = "cuda",
    cache: Path | None = None,
    budget_s: float | None = None,
    cudnn_benchmark: bool = False,
) -> dict:
    """Time each shape in its current precision and its proposals, largest share first, while `budget_s`
    lasts; reuse what `cache` holds for this device. Convolutions pick their cuDNN algorithm as the run did
    (`cudnn_benchmark`: autotuned, else cuDNN's heuristics). Returns the calibration document: {"device",
    "shapes": [{key, op, dims, dtype, conv, conv_params, share, run_us, us: {variant: us}}], "untimed":
    [{key, share, why}], "pinned_copy_bytes_per_s", "budget_s", "cudnn_benchmark", "timing_s"}; the cache is
    updated."""
    import torch

    cache = cache or cache_path()
    stored = read_cache(cache)
    torch.backends.cudnn.benchmark = cudnn_benchmark
    key = device_key(torch, device)
    # Autotuned convolutions may run other algorithms: their timings are kept apart.
    known = stored.setdefault(key + (" | cudnn.benchmark" if cudnn_benchmark else ""), {})
    started = time.monotonic()
    rows, untimed = [], []
    for shape, share, run_us in shapes:
        timings = known.setdefault(shape.key, {})
        why = ""
        for variant in ("current", *PROPOSALS.get(shape.dtype, ())):
            if variant in timings:
                continue
            left = budget_s - (time.monotonic() - started) if budget_s is not None else float("inf")
            if not _fits(timings, left):
                why = f"the {budget_s:g} s timing budget was spent on larger shapes"
                break
            try:
                timings[variant] = time_shape(torch, shape, variant, device)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                why = f"out of GPU memory for its {variant} operands"
                break
        if not timings:
            del known[shape.key]
        if "current" not in timings or len(timings) == 1:
            untimed.append({"key": shape.key, "share": share, "why": why or "no proposal to time"})
            continue
        rows.append(
            {
                **asdict(shape),
                "key": shape.key,
                "share": share,
                "run_us": run_us,
                "us": dict(timings),
                **({"conv_params": "recorded" if shape.conv else CONV_ASSUMED} if shape.op == "conv" else {}),
            }
        )
    if "pinned_copy_bytes_per_s" not in known:
        known["pinned_copy_bytes_per_s"] = pinned_copy_bytes_per_s(torch, device)
    write_json(cache, stored, cache=True)
    return {
        "device": key,
        "shapes": rows,
        "untimed": untimed,
        "pinned_copy_bytes_per_s": known["pinned_copy_bytes_per_s"],
        "budget_s": budget_s,
        "cudnn_benchmark": cudnn_benchmark,
        "timing_s": round(time.monotonic() - started, 3),
    }
