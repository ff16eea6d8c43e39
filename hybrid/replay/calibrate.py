"""Measured speedups for the replay: time the step's top GEMM/conv shapes with torch on this GPU, in
their current precision and in what a fix proposes (TF32, bf16 autocast, dims padded to a multiple
of 8), and the host<->device copy bandwidth from pinned memory. No collector is attached: this is a
short pass of its own, run after the profiling passes.

    python -m hybrid.replay.calibrate RUN_DIR [RUN_DIR...] [--cache PATH] [--top 8] [--device cuda]
                                      [--out-dir DIR]

reads the shapes from each RUN_DIR's torch trace and writes RUN_DIR/calibration.json (or
DIR/NAME.json); results are cached
per GPU and shape in ~/.cache/hybrid/calibration.json (HYBRID_CACHE_DIR overrides the folder), so a
second run on the same GPU times nothing twice. On a machine without CUDA, --device cpu times the
same shapes on the CPU (a smoke test of the pass; CPU figures are never used for a GPU's replay).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hybrid.files import write_file

CALIBRATION_FILE = "calibration.json"
CACHE_NAME = "calibration.json"
# Each timing is the median of this many runs after WARMUP_RUNS, of a loop long enough (at least
# MIN_LOOP_S) that launch overhead and timer resolution are noise.
WARMUP_RUNS = 3
TIMED_RUNS = 5
MIN_LOOP_S = 0.02
MAX_LOOP = 200
PINNED_COPY_BYTES = 64 * 1024 * 1024
ALIGN = 8
# Precisions a fix can propose for a matmul of a given dtype.
PROPOSALS = {"fp32": ("tf32", "bf16"), "fp16": ("fp16_aligned",), "bf16": ("bf16_aligned",)}


@dataclass(frozen=True)
class Shape:
    """A GEMM (m, n, k[, batch]) or a convolution (input NCHW, weight OIhw, stride, padding) in a dtype."""

    op: str  # "mm", "bmm" or "conv"
    dims: tuple[int, ...]
    dtype: str  # "fp32", "fp16", "bf16"

    @property
    def key(self) -> str:
        return f"{self.op}:{'x'.join(map(str, self.dims))}:{self.dtype}"


def cache_path() -> Path:
    root = Path(os.environ.get("HYBRID_CACHE_DIR") or Path.home() / ".cache" / "hybrid")
    return root / CACHE_NAME


def read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict, *, cache: bool = False) -> None:
    # hybrid.files: never through a link planted at a fixed temporary name in a received run directory,
    # and an earlier calibration.json kept as calibration.N.json; the cache is hybrid's own to replace.
    write_file(path, json.dumps(data, indent=1, sort_keys=True) + "\n", cache=cache)


# -- shapes from the torch pass ---------------------------------------------------------------------

DTYPES = {"float": "fp32", "c10::half": "fp16", "c10::bfloat16": "bf16"}
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution")


def shape_of(name: str, shapes: list, dtypes: list) -> Shape | None:
    """The calibration shape of one torch op (aten::mm/addmm/bmm/baddbmm/convolution), None otherwise."""
    dtype = next((DTYPES[str(d).lower()] for d in dtypes if str(d).lower() in DTYPES), None)
    if dtype is None:
        return None
    if name == "aten::convolution":
        if len(shapes) < 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
            return None
        weight = shapes[1]
        # Stride and padding are not recorded as shapes; same-size output (stride 1, pad k//2) is assumed.
        return Shape("conv", (*shapes[0], *weight), dtype)
    mats = [s for s in shapes if isinstance(s, list) and len(s) in (2, 3)]
    if len(mats) < 2:
        return None
    a, b = mats[-2], mats[-1]
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return Shape("mm", (a[0], b[1], a[1]), dtype)
    if len(a) == 3 and len(b) == 3 and a[2] == b[1] and a[0] == b[0]:
        return Shape("bmm", (a[1], b[2], a[2], a[0]), dtype)
    return None


def _subtree_device_ns(ops) -> np.ndarray:
    """Device time of each op and everything it called (same thread, nested in time): a convolution's
    kernels are launched by the cuDNN op under it."""
    out = np.zeros(len(ops))
    for _, group in ops.reset_index(drop=True).groupby("tid"):
        g = group.sort_values("start_ns")
        starts = g["start_ns"].to_numpy()
        cum = np.r_[0, np.cumsum(g["device_ns"].to_numpy(float))]
        lo = np.searchsorted(starts, starts, side="left")
        hi = np.searchsorted(starts, g["end_ns"].to_numpy(), side="left")
        out[g.index.to_numpy()] = cum[hi] - cum[lo]
    return out


def top_shapes(ops, top: int) -> list[tuple[Shape, float]]:
    """The `top` GEMM/conv shapes of the measured steps by device time, with their share of the
    GEMM/conv device time (ops: Profile.ops from the torch pass)."""
    if ops is None or len(ops) == 0:
        return []
    ops = ops.reset_index(drop=True)
    device_ns = _subtree_device_ns(ops)
    wanted = np.flatnonzero(ops["name"].isin(list(GEMM_OPS)).to_numpy() & (ops["step"] >= 0).to_numpy())
    totals: dict[Shape, float] = {}
    for i in wanted:
        row = ops.iloc[i]
        shape = shape_of(row["name"], list(row["shapes"] or []), list(row["dtypes"] or []))
        if shape is not None:
            totals[shape] = totals.get(shape, 0.0) + float(device_ns[i])
    whole = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return [(shape, ns / whole if whole else 0.0) for shape, ns in ranked]


# -- timing -----------------------------------------------------------------------------------------


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _operands(torch, shape: Shape, variant: str, device: str):
    base = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[shape.dtype]
    dims = shape.dims
    if variant.endswith("_aligned"):
        dims = (
            tuple(_aligned(d) for d in dims[:3]) + dims[3:]
            if shape.op != "conv"
            else (
                dims[0],
                _aligned(dims[1]),
                dims[2],
                dims[3],
                _aligned(dims[4]),
                _aligned(dims[5]),
                dims[6],
                dims[7],
            )
        )
    dtype = torch.bfloat16 if variant == "bf16" else base
    if shape.op == "mm":
        m, n, k = dims[:3]
        return torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
    if shape.op == "bmm":
        m, n, k, b = dims[:4]
        return torch.randn(b, m, k, device=device, dtype=dtype), torch.randn(
            b, k, n, device=device, dtype=dtype
        )
    n_, c, h, w, o, ci, kh, kw = dims
    return (
        torch.randn(n_, c, h, w, device=device, dtype=dtype),
        torch.randn(o, ci, kh, kw, device=device, dtype=dtype),
    )


def _run(torch, shape: Shape, a, b):
    if shape.op == "mm":
        return torch.mm(a, b)
    if shape.op == "bmm":
        return torch.bmm(a, b)
    return torch.nn.functional.conv2d(a, b, padding=(b.shape[2] // 2, b.shape[3] // 2))


def _time_us(torch, fn, device: str) -> float:
    """Median time of one call in microseconds (CUDA events on a GPU, the wall clock on the CPU)."""

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(WARMUP_RUNS):
        fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - start, 1e-7)
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
    """Microseconds per call of `shape` in `variant` ("current", "tf32", "bf16", "*_aligned")."""
    a, b = _operands(torch, shape, variant, device)
    tf32_before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        allow = variant == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
        with torch.no_grad():
            return _time_us(torch, lambda: _run(torch, shape, a, b), device)
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


def calibrate(shapes: list[tuple[Shape, float]], device: str = "cuda", cache: Path | None = None) -> dict:
    """Time each shape in its current precision and its proposals; reuse what `cache` holds for this
    device. Returns {"device", "shapes": [{key, op, dims, dtype, share, us: {variant: us}}],
    "pinned_copy_bytes_per_s"}; the cache is updated."""
    import torch

    cache = cache or cache_path()
    stored = read_cache(cache)
    key = device_key(torch, device)
    known = stored.setdefault(key, {})
    rows = []
    for shape, share in shapes:
        timings = known.setdefault(shape.key, {})
        for variant in ("current", *PROPOSALS.get(shape.dtype, ())):
            if variant not in timings:
                timings[variant] = time_shape(torch, shape, variant, device)
        rows.append({**asdict(shape), "key": shape.key, "share": share, "us": dict(timings)})
    if "pinned_copy_bytes_per_s" not in known:
        known["pinned_copy_bytes_per_s"] = pinned_copy_bytes_per_s(torch, device)
    _write_json(cache, stored, cache=True)
    return {"device": key, "shapes": rows, "pinned_copy_bytes_per_s": known["pinned_copy_bytes_per_s"]}


def _label(run_dir: Path) -> str:
    """A name for a run directory's calibration file: the folder, or its parent for a `run/` folder."""
    resolved = run_dir.resolve()
    return resolved.parent.name if resolved.name == "run" else resolved.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hybrid.replay.calibrate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "run_dirs", type=Path, nargs="+", help="run directories with a torch pass (torch/trace.json)"
    )
    parser.add_argument("--cache", type=Path, default=None, help=f"cache file (default {cache_path()})")
    parser.add_argument("--top", type=int, default=8, help="GEMM/conv shapes to time, by device time")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a smoke test")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="write NAME.json here instead of RUN_DIR/calibration.json (NAME: the run's folder)",
    )
    args = parser.parse_args(argv)
    import torch

    from hybrid.errors import HybridError
    from hybrid.load.torch_trace import load_torch_trace
    from hybrid.rundir import RunDir

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
            trace = run.torch_trace()
            if trace is None:
                print(
                    f"error: {run_dir} has no torch pass (torch/trace.json)\n"
                    "fix: calibrate a run directory written by `hybrid run` with the torch pass on",
                    file=sys.stderr,
                )
                return 2
            result = calibrate(top_shapes(load_torch_trace(trace).ops, args.top), args.device, args.cache)
        except HybridError as exc:
            print(exc.message(), file=sys.stderr)
            return exc.exit_code
        out = (args.out_dir / f"{_label(run_dir)}.json") if args.out_dir else run.path / CALIBRATION_FILE
        _write_json(out, result)
        print(f"calibrated {len(result['shapes'])} shapes of {run_dir} on {result['device']} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
