"""Load a torch.profiler Chrome trace into the normalized Profile frames.

Parsed once into one frame of complete ('X') events; each Profile frame is then a vectorized
selection of it (as Meta's HolisticTraceAnalysis does). Joins follow Kineto's links:
- a kernel/memcpy/memset and the runtime or driver call that launched it share `correlation`;
- a device event's `External id` is the innermost operator that was open at its launch.
Every event belongs to the measured step whose `ProfilerStep#N` annotation (`hybrid/step N` in traces
of earlier versions) enclosed its host start
(device work: the host start of its launch call). Times are Kineto's microseconds, turned into
int64 nanoseconds on the trace's own clock.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.errors import InputError
from hybrid.files import gunzip_limited
from hybrid.jsontypes import typed_fields
from hybrid.load.gc_paused import gc_paused
from hybrid.load.torch_stacks import op_callsites, stack_samples
from hybrid.markers import OP_FLOPS_FILE, TORCH_STEP_NAME, TORCH_STEP_PREFIX
from hybrid.profile import (
    ANNOTATION_PREFIX,
    KERNEL_COLUMNS,
    LAUNCH_COLUMNS,
    MEMCPY_COLUMNS,
    MEMSET_COLUMNS,
    OP_COLUMNS,
    STEP_COLUMNS,
    SYNC_COLUMNS,
    DeviceInfo,
    Profile,
    conform,
    name_matches,
    name_starts,
)
from hybrid.provenance import MEASURED_TORCH
from nsight.intervals import NO_RANGE, covered, interval_union, nesting_parents, step_of

# Event categories only Kineto (torch.profiler) writes; a Chrome trace with none of them and no
# `schemaVersion` comes from another tool.
TORCH_CATEGORIES = frozenset(
    {
        "cpu_op",
        "user_annotation",
        "gpu_user_annotation",
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_runtime",
        "cuda_driver",
        "python_function",
        "cuda_profiler_range",
    }
)
HOST_API_CATEGORIES = ("cuda_runtime", "cuda_driver")

# Host calls that wait for the device, by kind (SYNC_COLUMNS). Copy APIs are listed apart: a
# synchronous copy always blocks (except device-to-device), an async one blocks only when the host
# side is pageable memory (the driver stages it through a pinned buffer before returning).
SYNC_API_KIND = {
    "cudaStreamSynchronize": "stream",
    "cuStreamSynchronize": "stream",
    "cudaDeviceSynchronize": "device",
    "cuCtxSynchronize": "device",
    "cudaEventSynchronize": "event",
    "cuEventSynchronize": "event",
}
SYNC_COPY_APIS = frozenset(
    {
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cuMemcpy",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpy2D",
        "cuMemcpy3D",
    }
)
ASYNC_COPY_APIS = frozenset(
    {
        "cudaMemcpyAsync",
        "cudaMemcpy2DAsync",
        "cudaMemcpy3DAsync",
        "cudaMemcpyToSymbolAsync",
        "cudaMemcpyFromSymbolAsync",
        "cuMemcpyAsync",
        "cuMemcpyDtoHAsync",
        "cuMemcpyHtoDAsync",
    }
)
LAUNCH_APIS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cudaGraphLaunch",
        "cuGraphLaunch",
    }
)
# CUPTI names may carry a version or per-thread-stream suffix: cudaLaunchKernel_v7000, ..._ptsz.
API_SUFFIX = re.compile(r"(_v\d+)?(_ptsz|_ptds)?$")
MEMCPY_KIND = re.compile(r"Memcpy (HtoD|DtoH|DtoD|HtoH|PtoP)")
STEP_NAME = TORCH_STEP_NAME
# The GPU facts read from a trace's deviceProperties, with the JSON type each must have.
DEVICE_PROPERTY_TYPES = {
    "id": (int,),
    "name": (str,),
    "numSms": (int,),
    "totalGlobalMem": (int,),
    "computeMajor": (int,),
    "computeMinor": (int,),
    "maxThreadsPerMultiprocessor": (int,),
    "warpSize": (int,),
}
FIX = "pass the trace.json that torch.profiler wrote (export_chrome_trace), e.g. RUN_DIR/torch/trace.json"


def load_torch_trace(path: str | Path) -> Profile:
    """Read a torch.profiler Chrome trace (plain or gzipped JSON) into a Profile."""
    with gc_paused():
        return _load_torch_trace(Path(path))


def _load_torch_trace(path: Path) -> Profile:
    raw = _read_trace(path)
    events = _complete_events(raw["traceEvents"])
    warnings: list[str] = []

    runtime = _host_api_calls(events)
    kernels = _device_events(events, "kernel", runtime)
    memcpys = _device_events(events, "gpu_memcpy", runtime)
    memsets = _device_events(events, "gpu_memset", runtime)
    steps, step_source = _steps(events, path, warnings)

    device_busy = _device_busy(kernels, memcpys, memsets)
    ops = pd.concat(
        [
            _op_frame(events, kernels, steps, _saved_op_flops(path, warnings), device_busy),
            _annotation_frame(events, steps, device_busy),
        ],
        ignore_index=True,
    )
    ops = conform(ops, OP_COLUMNS)
    if (~name_starts(ops["name"], ANNOTATION_PREFIX)).any() and ops["flops"].isna().all():
        warnings.append(
            f"{path}: no operator FLOPs (the trace does not carry them and no {OP_FLOPS_FILE} "
            "lies beside it); FLOP counts must be estimated from shapes"
        )
    profile = Profile(
        steps=conform(steps, STEP_COLUMNS),
        kernels=conform(_kernel_frame(kernels, steps), KERNEL_COLUMNS),
        memcpys=conform(_memcpy_frame(memcpys, steps), MEMCPY_COLUMNS),
        memsets=conform(_memset_frame(memsets, steps), MEMSET_COLUMNS),
        syncs=conform(_sync_frame(runtime, memcpys, steps), SYNC_COLUMNS),
        launches=conform(_launch_frame(runtime, steps), LAUNCH_COLUMNS),
        ops=ops,
        samples=stack_samples(events),
        op_callsites=op_callsites(events),
        device=_device_info(raw, kernels, warnings),
        step_source=step_source,
        extras={
            "torch_trace": {
                key: raw.get(key)
                for key in (
                    "cuda_runtime_version",
                    "cuda_driver_version",
                    "cupti_version",
                    "record_shapes",
                    "with_flops",
                )
            }
        },
        warnings=warnings,
    )
    profile.sources = {
        name: MEASURED_TORCH
        for name in ("steps", "kernels", "memcpys", "memsets", "syncs", "launches", "ops", "device")
    }
    return profile


# -- reading -------------------------------------------------------------------------------------


def _read_trace(path: Path) -> dict:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read torch trace {path}: {exc.strerror or exc}", FIX) from exc
    if data[:2] == b"\x1f\x8b":  # gzip magic: torch writes trace.json.gz when asked
        try:
            data = gunzip_limited(data, path)  # bounded: a 4 MB gzip bomb expands to 8.5 GB
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"torch trace {path} is a damaged gzip file: {exc}", FIX) from exc
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"torch trace {path} is not JSON ({exc}); the file may be truncated", FIX) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
        raise InputError(f"{path} has no `traceEvents` list, so it is not a Chrome trace", FIX)
    _check_events(path, raw["traceEvents"])
    if "schemaVersion" not in raw and not any(
        isinstance(event, dict) and event.get("cat") in TORCH_CATEGORIES for event in raw["traceEvents"]
    ):
        raise InputError(
            f"{path} is a Chrome trace but not one from torch.profiler (no schemaVersion and no "
            "cpu_op/kernel/cuda_runtime events)",
            FIX,
        )
    return raw


def _check_events(path: Path, trace_events: list) -> None:
    """Every event an object, every complete event timed with numbers: a damaged record is named
    (file and index) rather than dropped or left to fail somewhere downstream. Exact types, not isinstance:
    JSON gives only dict, list, str, int, float, bool and None, and `type(True) is bool` keeps booleans out
    of the numbers; this check is a fifth of the 74 MB launch_per_sample_loss trace's load."""
    for index, event in enumerate(trace_events):
        if type(event) is not dict:
            raise InputError(
                f"{path}: traceEvents[{index}] is a JSON {type(event).__name__}, not an event "
                f"object: {_excerpt(event)}",
                FIX,
            )
        if event.get("ph") != "X":
            continue
        for key in ("ts", "dur"):
            value = event.get(key, 0)
            kind = type(value)
            if kind is not int and (kind is not float or not math.isfinite(value)):
                raise InputError(
                    f"{path}: traceEvents[{index}] ({_excerpt(event.get('name'))}) has a non-numeric "
                    f"{key!r}: {_excerpt(value)}",
                    FIX,
                )
        args = event.get("args", {})
        if (
            type(event.get("name", "")) is not str
            or type(event.get("cat", "")) is not str
            or type(args) is not dict
        ):
            raise InputError(
                f"{path}: traceEvents[{index}] has a `name` or `cat` that is not text or `args` "
                f"that is not an object: {_excerpt(event)}",
                FIX,
            )
        dims, types = args.get("Input Dims"), args.get("Input type")
        if (dims is not None and not _are_dims(dims)) or (
            types is not None and not (type(types) is list and _STR_ONLY.issuperset(map(type, types)))
        ):
            raise InputError(
                f"{path}: traceEvents[{index}] ({_excerpt(event.get('name'))}) has malformed "
                f"`Input Dims` or `Input type`: {_excerpt(dims)}, {_excerpt(types)}",
                FIX,
            )


_STR_ONLY = frozenset({str})
_INT_ONLY = frozenset({int})


def _are_dims(value: object) -> bool:
    """An operator's input shapes as Kineto writes them: a list with, per input, a list of sizes (nested
    for tensor lists); an input's sizes of ints only are told by the set of their types (3 times faster
    than a call per size)."""
    if type(value) is not list:
        return False
    for dims in value:
        if type(dims) is not list:
            if type(dims) is not int:
                return False
        elif not _INT_ONLY.issuperset(map(type, dims)) and not all(map(_is_dims, dims)):
            return False
    return True


def _is_dims(value: object) -> bool:
    """An operator input's shape as Kineto writes it: a list of sizes, nested for tensor lists."""
    if type(value) is list:
        return all(map(_is_dims, value))
    return type(value) is int


def _excerpt(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _complete_events(trace_events: list) -> pd.DataFrame:
    """One row per complete ('X') event: cat, name, pid, tid, start_ns, end_ns, args (dict)."""
    frame = pd.DataFrame.from_records(
        trace_events, columns=["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
    )
    frame = frame[frame["ph"] == "X"]
    ts_us = pd.to_numeric(frame["ts"], errors="coerce")
    dur_us = pd.to_numeric(frame["dur"], errors="coerce").fillna(0.0)
    frame = frame.assign(
        start_ns=np.rint(ts_us * 1000.0),
        end_ns=np.rint((ts_us + dur_us) * 1000.0),
        # Kineto's pseudo-threads ("PyTorch Profiler", "Spans") are strings; real ones are ints.
        tid=pd.to_numeric(frame["tid"], errors="coerce").fillna(-1).astype("int64"),
        args=[a if isinstance(a, dict) else {} for a in frame["args"]],
        name=frame["name"].fillna("").astype(str),
    )
    frame = frame[ts_us.notna()].astype({"start_ns": "int64", "end_ns": "int64"})
    return frame.drop(columns=["ph", "ts", "dur"]).reset_index(drop=True)


def _arg(frame: pd.DataFrame, key: str, default: object = -1) -> list:
    return [a.get(key, default) for a in frame["args"]]


def _int_arg(frame: pd.DataFrame, key: str) -> np.ndarray:
    values = pd.to_numeric(pd.Series(_arg(frame, key), dtype="object"), errors="coerce")
    return values.fillna(-1).astype("int64").to_numpy()


def _dim3(frame: pd.DataFrame, key: str) -> np.ndarray:
    """An (n, 3) int array from a [x, y, z] argument; -1 where absent."""
    rows = [v if isinstance(v, list) and len(v) == 3 else (-1, -1, -1) for v in _arg(frame, key, None)]
    return np.array(rows, dtype="int64").reshape(-1, 3)


# -- host API calls and device events ------------------------------------------------------------


def _host_api_calls(events: pd.DataFrame) -> pd.DataFrame:
    calls = events[events["cat"].isin(HOST_API_CATEGORIES)]
    return pd.DataFrame(
        {
            "api": calls["name"].str.replace(API_SUFFIX, "", regex=True).to_numpy(),
            "start_ns": calls["start_ns"].to_numpy(),
            "end_ns": calls["end_ns"].to_numpy(),
            "tid": calls["tid"].to_numpy(),
            "correlation": _int_arg(calls, "correlation"),
            "external_id": _int_arg(calls, "External id"),
        }
    )


def _device_events(events: pd.DataFrame, category: str, runtime: pd.DataFrame) -> pd.DataFrame:
    """Device events of one category with the host start of their launch call (`launch_ns`, -1 if
    the call is missing) and the operator that launched them (`external_id`)."""
    device = events[events["cat"] == category].reset_index(drop=True)
    device = device.assign(
        correlation=_int_arg(device, "correlation"), external_id=_int_arg(device, "External id")
    )
    launch = runtime[runtime["correlation"] >= 0].drop_duplicates("correlation").set_index("correlation")
    device["launch_ns"] = device["correlation"].map(launch["start_ns"]).fillna(-1).astype("int64")
    launch_op = device["correlation"].map(launch["external_id"]).fillna(-1).astype("int64")
    device["external_id"] = device["external_id"].where(device["external_id"] >= 0, launch_op)
    return device


def _step_of(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    return step_of(times, steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(), steps["step"].to_numpy())


def _launch_time(device: pd.DataFrame) -> np.ndarray:
    """Host time that decides a device event's step: its launch, else (no launch call) its start."""
    launch = device["launch_ns"].to_numpy()
    return np.where(launch >= 0, launch, device["start_ns"].to_numpy())


def _kernel_frame(kernels: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    grid = _dim3(kernels, "grid")
    block = _dim3(kernels, "block")
    return pd.DataFrame(
        {
            "name": kernels["name"],
            "start_ns": kernels["start_ns"],
            "end_ns": kernels["end_ns"],
            "stream": _int_arg(kernels, "stream"),
            "device": _int_arg(kernels, "device"),
            "correlation": kernels["correlation"],
            "launch_ns": kernels["launch_ns"],
            "grid_x": grid[:, 0],
            "grid_y": grid[:, 1],
            "grid_z": grid[:, 2],
            "block_x": block[:, 0],
            "block_y": block[:, 1],
            "block_z": block[:, 2],
            "registers": _int_arg(kernels, "registers per thread"),
            # Kineto's "shared memory" is static + dynamic shared memory per block.
            "shared_bytes": _int_arg(kernels, "shared memory"),
            "step": _step_of(_launch_time(kernels), steps),
            "layer": None,
        }
    )


def _memcpy_frame(memcpys: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    names = memcpys["name"]
    # "Memcpy DtoH (Device -> Pageable)": the host side is pinned or pageable; DtoD has neither.
    pinned = names.str.contains("Pinned", regex=False)
    pageable = names.str.contains("Pageable", regex=False)
    host_pinned = np.where(pinned, True, np.where(pageable, False, None))
    return pd.DataFrame(
        {
            "kind": names.str.extract(MEMCPY_KIND, expand=False).to_numpy(),
            "bytes": _int_arg(memcpys, "bytes"),
            "start_ns": memcpys["start_ns"],
            "end_ns": memcpys["end_ns"],
            "stream": _int_arg(memcpys, "stream"),
            "host_pinned": pd.Series(host_pinned, dtype="object"),
            "step": _step_of(_launch_time(memcpys), steps),
            "correlation": memcpys["correlation"],
        }
    )


def _memset_frame(memsets: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "bytes": _int_arg(memsets, "bytes"),
            "start_ns": memsets["start_ns"],
            "end_ns": memsets["end_ns"],
            "stream": _int_arg(memsets, "stream"),
            "step": _step_of(_launch_time(memsets), steps),
            "correlation": memsets["correlation"],
        }
    )


def _sync_frame(runtime: pd.DataFrame, memcpys: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    copy_of_call = memcpys.drop_duplicates("correlation").set_index("correlation")["name"]
    # As strings even when the trace has no copy (the map is then all-NaN floats).
    copy_name = runtime["correlation"].map(copy_of_call).astype("string").fillna("")
    blocking_copy = (runtime["api"].isin(SYNC_COPY_APIS) & ~copy_name.str.contains("DtoD", regex=False)) | (
        runtime["api"].isin(ASYNC_COPY_APIS) & copy_name.str.contains("Pageable", regex=False)
    )
    kind = runtime["api"].map(SYNC_API_KIND).where(~blocking_copy, "memcpy")
    syncs = runtime[kind.notna()]
    return pd.DataFrame(
        {
            "kind": kind[kind.notna()],
            "api": syncs["api"],
            "start_ns": syncs["start_ns"],
            "end_ns": syncs["end_ns"],
            "tid": syncs["tid"],
            "step": _step_of(syncs["start_ns"].to_numpy(), steps),
        }
    )


def _launch_frame(runtime: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    launches = runtime[runtime["api"].isin(LAUNCH_APIS)]
    return pd.DataFrame(
        {
            "api": launches["api"],
            "start_ns": launches["start_ns"],
            "end_ns": launches["end_ns"],
            "correlation": launches["correlation"],
            "tid": launches["tid"],
            "step": _step_of(launches["start_ns"].to_numpy(), steps),
        }
    )


# -- operators -----------------------------------------------------------------------------------


def _saved_op_flops(trace_path: Path, warnings: list[str]) -> dict[int, int]:
    """FLOPs per operator `External id` that the injector saved beside the trace (OP_FLOPS_FILE);
    empty when there is no such file (a trace recorded outside hybrid)."""
    flops_path = trace_path.with_name(OP_FLOPS_FILE)
    if not flops_path.is_file():
        return {}
    try:
        return {int(key): int(value) for key, value in json.loads(flops_path.read_text()).items()}
    except (OSError, ValueError, AttributeError) as exc:
        warnings.append(f"ignored {flops_path}: {exc}; operator FLOPs are unknown")
        return {}


def _device_busy(*device_frames: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """When the device ran anything (kernel, copy, memset), as disjoint intervals."""
    starts = np.concatenate([f["start_ns"].to_numpy(np.int64) for f in device_frames])
    ends = np.concatenate([f["end_ns"].to_numpy(np.int64) for f in device_frames])
    return interval_union(starts, ends)


def _device_idle_ns(
    start: np.ndarray, end: np.ndarray, device_busy: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    return (end - start) - covered(*device_busy, start, end)


def _op_frame(
    events: pd.DataFrame,
    kernels: pd.DataFrame,
    steps: pd.DataFrame,
    saved_flops: dict[int, int],
    device_busy: tuple[np.ndarray, np.ndarray],
) -> pd.DataFrame:
    ops = events[(events["cat"] == "cpu_op").to_numpy() & ~name_starts(events["name"], TORCH_STEP_PREFIX)]
    ops = ops.sort_values(["tid", "start_ns", "end_ns"], ascending=[True, True, False]).reset_index(drop=True)
    start = ops["start_ns"].to_numpy()
    end = ops["end_ns"].to_numpy()
    duration = end - start
    parent = _parents(ops["tid"].to_numpy(), end)
    children_ns = np.zeros(len(ops), dtype="int64")
    has_parent = parent >= 0
    np.add.at(children_ns, parent[has_parent], duration[has_parent])

    kernel_ns = (kernels["end_ns"] - kernels["start_ns"]).groupby(kernels["external_id"]).sum()
    external_id = pd.Series(_int_arg(ops, "External id"))
    # Older torch wrote FLOPs into the trace (args.flops); recent versions only keep them in memory,
    # so the injector saves them beside the trace.
    flops = pd.to_numeric(pd.Series(_arg(ops, "flops", None), dtype="object"), errors="coerce")
    flops = flops.fillna(external_id.map(saved_flops))
    return pd.DataFrame(
        {
            "name": ops["name"],
            "tid": ops["tid"],
            "start_ns": start,
            "end_ns": end,
            "cpu_self_ns": np.maximum(duration - children_ns, 0),
            "device_ns": external_id.map(kernel_ns).fillna(0).astype("int64"),
            "shapes": _arg(ops, "Input Dims", None),
            "dtypes": _arg(ops, "Input type", None),
            "flops": flops.astype("float64"),
            "top_level": ~has_parent,
            "step": _step_of(start, steps),
            "device_idle_ns": _device_idle_ns(start, end, device_busy),
        }
    )


def _annotation_frame(
    events: pd.DataFrame, steps: pd.DataFrame, device_busy: tuple[np.ndarray, np.ndarray]
) -> pd.DataFrame:
    """record_function ranges other than our step marks and torch's ProfilerStep#N, as op rows
    (OP_COLUMNS: ANNOTATION_PREFIX + name, outside the operator tree). torch marks its own Python-side
    work this way: the DataLoader's `__next__`, `Optimizer.step#SGD.step`, `Optimizer.zero_grad#...`."""
    marks = events[
        (events["cat"] == "user_annotation").to_numpy()
        & ~name_matches(events["name"], STEP_NAME)
        & ~name_starts(events["name"], TORCH_STEP_PREFIX)
    ]
    start = marks["start_ns"].to_numpy(np.int64)
    end = marks["end_ns"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "name": ANNOTATION_PREFIX + marks["name"],
            "tid": marks["tid"],
            "start_ns": start,
            "end_ns": end,
            "cpu_self_ns": 0,
            "device_ns": 0,
            "shapes": None,
            "dtypes": None,
            "flops": np.nan,
            "top_level": False,
            "step": _step_of(start, steps),
            "device_idle_ns": _device_idle_ns(start, end, device_busy),
        }
    )


def _parents(tid: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of each op's innermost enclosing op on the same thread, -1 for none. Input sorted by
    (tid, start, end descending), so a parent always precedes its children."""
    parent = np.full(len(end), NO_RANGE, dtype="int64")
    bounds = np.flatnonzero(np.r_[True, tid[1:] != tid[:-1], True])
    for first, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=False):
        local = nesting_parents(end[first:stop])
        parent[first:stop] = np.where(local != NO_RANGE, local + first, NO_RANGE)
    return parent


# -- steps and device ----------------------------------------------------------------------------


def _steps(events: pd.DataFrame, path: Path, warnings: list[str]) -> tuple[pd.DataFrame, str]:
    annotations = events[events["cat"] == "user_annotation"]
    index = annotations["name"].str.extract(STEP_NAME, expand=False)
    marked = annotations[index.notna()]
    # Kineto writes a range that was still open when the profiler stopped with finished=False: it
    # is the step the script's end cut short, not a measured step.
    finished = np.array([a.get("finished", True) is not False for a in marked["args"]], dtype=bool)
    if (~finished).any():
        warnings.append(
            f"{path}: ignored {int((~finished).sum())} step range(s) still open when the profiler stopped"
        )
    marked = marked[finished]
    if not marked.empty:
        steps = (
            pd.DataFrame(
                {
                    "name": marked["name"].to_numpy(),
                    "start_ns": marked["start_ns"].to_numpy(),
                    "end_ns": marked["end_ns"].to_numpy(),
                }
            )
            .sort_values("start_ns")
            .reset_index(drop=True)
        )
        # Numbered in time order: a script's own profiler schedule starts at ProfilerStep#<wait+warmup>.
        steps.insert(0, "step", np.arange(len(steps), dtype="int64"))
        return steps, "torch:annotation"
    timed = events[events["cat"] != "Trace"]  # Kineto's own span covers profiler setup too
    warnings.append(
        f"{path} has no `{TORCH_STEP_PREFIX}N` annotations: the whole trace is treated as one step "
        "(run the workload through `hybrid run` or mark steps with hybrid.mark_step())"
    )
    if timed.empty:
        return pd.DataFrame(columns=list(STEP_COLUMNS)), "none"
    whole = pd.DataFrame(
        {
            "step": [0],
            "name": ["whole trace"],
            "start_ns": [timed["start_ns"].min()],
            "end_ns": [timed["end_ns"].max()],
        }
    )
    return whole, "whole-capture"


def _device_info(raw: dict, kernels: pd.DataFrame, warnings: list[str]) -> DeviceInfo:
    listed = raw.get("deviceProperties")
    properties = [
        typed_fields(p, DEVICE_PROPERTY_TYPES, "the trace's deviceProperties", warnings)
        for p in (listed if isinstance(listed, list) else [])
        if isinstance(p, dict)
    ]
    if not properties:
        return DeviceInfo()
    used = _int_arg(kernels, "device")
    used_id = int(pd.Series(used).mode().iloc[0]) if len(used) else properties[0].get("id")
    chosen = next((p for p in properties if p.get("id") == used_id), properties[0])
    threads = chosen.get("maxThreadsPerMultiprocessor")
    warp = chosen.get("warpSize")
    major, minor = chosen.get("computeMajor"), chosen.get("computeMinor")
    return DeviceInfo(
        name=chosen.get("name"),
        sm_count=chosen.get("numSms"),
        memory_bytes=chosen.get("totalGlobalMem"),
        compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
        max_warps_per_sm=threads // warp if threads and warp else None,
        source=MEASURED_TORCH,
    )
