"""Turn an Nsight Systems SQLite export into the normalized Profile.

Steps are found by hybrid.load.nsys_steps. Device work belongs to the step open in its *process* when it
was launched: step ranges are pushed on the main thread, while PyTorch launches backward kernels from its
autograd thread, so matching on the launching thread would drop the whole backward pass. Module ranges
(`hybrid.modules`) are matched on the launching thread, since they wrap forward calls on that thread.

Torch-free on purpose (`hybrid report X.sqlite` must start fast): numpy and pandas only.
"""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.errors import InputError, nsight_errors_as_hybrid
from hybrid.files import read_regular_text
from hybrid.load.nsys_runtime import TID_MASK, Columns, Runtime, by_start, pid_of, take_rows
from hybrid.load.nsys_steps import Steps, find_steps, nvtx_ranges
from hybrid.load.plausible import implausible_rows
from hybrid.markers import INJECT_FILE, MODULE_DOMAIN, NSYS_DIR, NSYS_EXPORT_FILE
from hybrid.profile import (
    API_CALL_COLUMNS,
    KERNEL_COLUMNS,
    LAUNCH_COLUMNS,
    LAYER_COLUMNS,
    MEMCPY_COLUMNS,
    MEMSET_COLUMNS,
    SAMPLE_COLUMNS,
    SYNC_COLUMNS,
    DeviceInfo,
    Profile,
    conform,
)
from hybrid.provenance import MEASURED_NSYS
from nsight.intervals import depths, nesting_parents, stab_innermost
from nsight.python_samples import read_python_samples
from nsight.sqlite_export import WHOLE_CAPTURE, NsysExport, open_export

# A Python sample stands for the time until its thread's next sample, at most this many sampling
# periods (the median time between a thread's samples): past that the thread ran no Python, or the
# sampler missed it, and the sample says nothing about that time.
SAMPLE_SPAN_PERIODS = 2

# An export with more kernels than this is analyzed in a window of about this many kernels around the
# middle of its capture, so that memory stays bounded whatever the export's size (a Profile costs about
# 0.5 KiB per kernel with its launch and API-call rows: 1M kernels, ~0.5 GiB).
WINDOW_KERNELS = 1_000_000
# The steps analyzed in such a window keep this share of it clear at each end: work launched in the
# window's last steps may start after it (a queue the host ran ahead of), and its first steps' may have
# been launched before it.
WINDOW_MARGIN = 0.1
# A window whose rows span more than this many times the time their share of the capture would is not
# in time order by row (a merged export): a window of the expected length is used instead.
WINDOW_DISORDER = 4.0

LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch")
COPY_PREFIXES = ("cudaMemcpy", "cuMemcpy")


def sync_kind(api: str) -> str | None:
    """What a host API waits for, or None when it does not block the host on the device.
    Synchronous copies (cudaMemcpy, cuMemcpyDtoH, ...: no 'Async') wait for the copy."""
    if "Synchronize" in api:
        for word, kind in (("Stream", "stream"), ("Event", "event"), ("Device", "device"), ("Ctx", "device")):
            if word in api:
                return kind
        return "other"
    if api.startswith(COPY_PREFIXES) and "Async" not in api:
        return "memcpy"
    return None


def _categorical(ids: np.ndarray, names: dict[int, str]) -> pd.Categorical:
    """Kernel names as a categorical over the distinct StringIds: one string per distinct name."""
    unique_ids, codes = np.unique(ids, return_inverse=True)
    labels = [names.get(int(i), f"<unknown string {int(i)}>") for i in unique_ids]
    categories, label_codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(label_codes[codes], categories=categories)


def _launch_times(runtime: Runtime, device: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(host launch start, launching globalTid) of device activity rows; -1 where not captured."""
    rows = runtime.launch_of(device["global_pid"], device["correlation"])
    found = rows >= 0
    launch = np.full(len(rows), -1, dtype=np.int64)
    tid = np.full(len(rows), -1, dtype=np.int64)
    launch[found] = runtime.calls["start_ns"][rows[found]]
    tid[found] = runtime.calls["global_tid"][rows[found]]
    return launch, tid


def _launch_steps(runtime: Runtime, device: Columns, steps_for) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(launch_ns, launching globalTid, step) of device rows. A row whose launch call was not
    captured is placed by its own start time and process."""
    launch, tid = _launch_times(runtime, device)
    step = steps_for(
        np.where(launch >= 0, launch, device["start_ns"]), np.where(tid >= 0, tid, device["global_pid"])
    )
    return launch, tid, step


def _module_layers(nvtx: pd.DataFrame, steps: Steps) -> tuple[pd.DataFrame, dict[int, tuple]]:
    """Profile.layers, and per launching thread the arrays stab_innermost needs."""
    modules = nvtx[nvtx["domain"] == MODULE_DOMAIN]
    per_thread: dict[int, tuple] = {}
    layers = []
    for tid, group in modules.groupby("global_tid"):
        ordered = group.sort_values(["start_ns", "end_ns"], ascending=[True, False])
        starts, ends = ordered["start_ns"].to_numpy(), ordered["end_ns"].to_numpy()
        parents = nesting_parents(ends)
        names = ordered["text"].to_numpy()
        per_thread[int(tid)] = (starts, ends, parents, names)
        layers.append(
            pd.DataFrame(
                {
                    "name": names,
                    "depth": depths(parents),
                    "start_ns": starts,
                    "end_ns": ends,
                    "step": steps.assign(starts, np.full(len(starts), tid, dtype=np.int64)),
                }
            )
        )
    frame = pd.concat(layers, ignore_index=True) if layers else pd.DataFrame(columns=list(LAYER_COLUMNS))
    return conform(frame, LAYER_COLUMNS), per_thread


def _kernel_layers(launch: np.ndarray, tid: np.ndarray, per_thread: dict[int, tuple]) -> pd.Categorical:
    """Innermost module range open on the launching thread at launch, NaN when none."""
    names: list[str] = sorted(
        {str(n) for (_, _, _, thread_names) in per_thread.values() for n in thread_names}
    )
    code_of = {name: i for i, name in enumerate(names)}
    codes = np.full(len(launch), -1, dtype=np.int64)
    for thread, (starts, ends, parents, thread_names) in per_thread.items():
        mask = (tid == thread) & (launch >= 0)
        if not mask.any():
            continue
        idx = stab_innermost(launch[mask], starts, ends, parents)
        name_codes = np.array([code_of[str(n)] for n in thread_names], dtype=np.int64)
        codes[mask] = np.where(idx >= 0, name_codes[np.clip(idx, 0, None)], -1)
    return pd.Categorical.from_codes(codes, categories=names)


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=d) for c, d in columns.items()})


def _contract_frame(data: dict, columns: dict[str, str]) -> pd.DataFrame:
    """A frame of exactly the contract's columns, built without copying the arrays. conform()
    would copy every column (about a second for a million kernels), so the big frames are built
    typed and checked instead; object columns may hold categoricals (interned names)."""
    frame = pd.DataFrame(data, copy=False)
    if list(frame.columns) != list(columns):
        raise ValueError(f"loader bug: columns {list(frame.columns)} differ from {list(columns)}")
    wrong = [c for c, dtype in columns.items() if dtype != "object" and frame[c].dtype != dtype]
    if wrong:
        raise ValueError(f"loader bug: columns {wrong} have the wrong dtype")
    return frame


def _kernels(
    raw: Columns | None, export: NsysExport, runtime: Runtime, steps_for, per_thread: dict[int, tuple]
) -> tuple[pd.DataFrame, int]:
    if raw is None or len(raw["start_ns"]) == 0:
        return _empty(KERNEL_COLUMNS), 0
    raw = by_start(raw)
    launch, tid, step = _launch_steps(runtime, raw, steps_for)
    frame = {
        "name": _categorical(raw["name_id"], export.strings(raw["name_id"])),
        **{c: raw[c] for c in ("start_ns", "end_ns", "stream", "device", "correlation")},
        "launch_ns": launch,
        **{
            c: raw[c]
            for c in (
                "grid_x",
                "grid_y",
                "grid_z",
                "block_x",
                "block_y",
                "block_z",
                "registers",
                "shared_bytes",
            )
        },
        "step": step,
        "layer": _kernel_layers(launch, tid, per_thread),
    }
    return _contract_frame(frame, KERNEL_COLUMNS), int((launch < 0).sum())


# Codes written by sql/memcpys.sql.
COPY_KINDS = np.array(["Unknown", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"], dtype=object)
HOST_PINNED = np.array([None, False, True], dtype=object)  # indexed by host_pinned_code + 1


def _memcpys(raw: Columns | None, runtime: Runtime, steps_for) -> pd.DataFrame:
    if raw is None or len(raw["start_ns"]) == 0:
        return _empty(MEMCPY_COLUMNS)
    raw = by_start(raw)
    frame = {
        "kind": pd.Categorical.from_codes(raw["kind_code"], categories=COPY_KINDS),
        **{c: raw[c] for c in ("bytes", "start_ns", "end_ns", "stream")},
        "host_pinned": HOST_PINNED[raw["host_pinned_code"] + 1],
        "step": _launch_steps(runtime, raw, steps_for)[2],
        "correlation": raw["correlation"],
    }
    return _contract_frame(frame, MEMCPY_COLUMNS)


def _memsets(raw: Columns | None, runtime: Runtime, steps_for) -> pd.DataFrame:
    if raw is None or len(raw["start_ns"]) == 0:
        return _empty(MEMSET_COLUMNS)
    raw = by_start(raw)
    frame = {
        **{c: raw[c] for c in ("bytes", "start_ns", "end_ns", "stream")},
        "step": _launch_steps(runtime, raw, steps_for)[2],
        "correlation": raw["correlation"],
    }
    return _contract_frame(frame, MEMSET_COLUMNS)


def _launches(runtime: Runtime, steps_for) -> pd.DataFrame:
    calls = runtime.where_name(lambda name: name.startswith(LAUNCH_PREFIXES))
    frame = {
        "api": _categorical(calls["name_id"], runtime.names),
        "start_ns": calls["start_ns"],
        "end_ns": calls["end_ns"],
        "correlation": calls["correlation"],
        "tid": calls["global_tid"] & TID_MASK,
        "step": steps_for(calls["start_ns"], calls["global_tid"]),
    }
    return _contract_frame(frame, LAUNCH_COLUMNS)


def _api_calls(runtime: Runtime, sync_targets: Columns | None, steps_for) -> pd.DataFrame:
    """Profile.api_calls: every call runtime_calls.sql keeps, with the stream its synchronization
    record names (joined on process and correlation id)."""
    calls = runtime.calls
    stream = np.full(len(calls["start_ns"]), -1, dtype=np.int64)
    if sync_targets is not None and len(sync_targets["correlation"]):
        rows = runtime.launch_of(sync_targets["global_pid"], sync_targets["correlation"])
        found = rows >= 0
        stream[rows[found]] = sync_targets["stream"][found]
    frame = {
        "api": _categorical(calls["name_id"], runtime.names),
        "start_ns": calls["start_ns"],
        "end_ns": calls["end_ns"],
        "global_tid": calls["global_tid"],
        "correlation": calls["correlation"],
        "sync_stream": stream,
        "step": steps_for(calls["start_ns"], calls["global_tid"]),
    }
    return _contract_frame(frame, API_CALL_COLUMNS)


def _syncs(runtime: Runtime, steps_for) -> pd.DataFrame:
    calls = runtime.where_name(lambda name: sync_kind(name) is not None)
    apis = _categorical(calls["name_id"], runtime.names)
    frame = {
        "kind": apis.map({api: sync_kind(api) for api in apis.categories}),
        "api": apis,
        "start_ns": calls["start_ns"],
        "end_ns": calls["end_ns"],
        "tid": calls["global_tid"] & TID_MASK,
        "step": steps_for(calls["start_ns"], calls["global_tid"]),
    }
    return _contract_frame(frame, SYNC_COLUMNS)


def _samples(export: NsysExport, steps: pd.DataFrame, warnings: list[str], facts: dict) -> pd.DataFrame:
    """Profile.samples: the measured steps' Python samples with the time each stands for. `facts`
    gets how many nsys recorded and how many came without a stack."""
    if steps.empty:
        return _empty(SAMPLE_COLUMNS)
    found = read_python_samples(export, int(steps["start_ns"].min()), int(steps["end_ns"].max()))
    if found is None:
        return _empty(SAMPLE_COLUMNS)
    facts.update(python_samples=found.marks, python_samples_without_stack=found.without_stack)
    if found.without_stack:
        warnings.append(
            f"{found.without_stack} of {found.marks} Python samples have no stack in the export "
            "(`nsys profile --export sqlite` leaves NVTX payloads out): they name no line; export "
            "the report again with `nsys export --type sqlite --include-blobs=true REPORT.nsys-rep`"
        )
    if found.unreadable:
        warnings.append(
            f"{found.unreadable} Python samples have a payload layout hybrid does not know; they name no line"
        )
    if len(found.start_ns) == 0:
        return _empty(SAMPLE_COLUMNS)
    tid = found.global_tid & TID_MASK
    order = np.lexsort((found.start_ns, tid))
    start, tid = found.start_ns[order], tid[order]
    same_thread = np.r_[tid[1:] == tid[:-1], False]
    following = np.r_[start[1:], start[-1:]]
    period = float(np.median((following - start)[same_thread])) if same_thread.any() else 1e6
    cap = int(SAMPLE_SPAN_PERIODS * period)
    end = np.where(same_thread, np.minimum(following, start + cap), start + int(period))
    frame = {
        "start_ns": start,
        "end_ns": end.astype(np.int64),
        "tid": tid,
        "file": np.array(found.file, dtype=object)[order],
        "line": found.line[order],
        "function": np.array(found.function, dtype=object)[order],
        **_library_columns([found.library[i] for i in order]),
    }
    return _contract_frame(frame, SAMPLE_COLUMNS)


def _library_columns(frames: list) -> dict[str, np.ndarray]:
    """SAMPLE_COLUMNS' library_* columns from each sample's library frame (None: the user's line)."""
    return {
        "library_file": np.array([f[0] if f else None for f in frames], dtype=object),
        "library_line": np.array([f[1] if f else -1 for f in frames], dtype=np.int64),
        "library_function": np.array([f[2] if f else None for f in frames], dtype=object),
    }


def _device_info(export: NsysExport, kernels: pd.DataFrame) -> DeviceInfo:
    gpus = export.frame("gpu_info")
    if gpus is None or gpus.empty:
        return DeviceInfo()
    if not kernels.empty:  # the GPU that ran most of the kernels
        busiest = int(kernels["device"].value_counts().idxmax())
        chosen = gpus[gpus["device"] == busiest]
        gpu = (chosen if not chosen.empty else gpus).iloc[0]
    else:
        gpu = gpus.iloc[0]

    def number(key: str, kind=int):
        value = gpu[key]
        return None if value is None or pd.isna(value) else kind(value)

    cc = None if pd.isna(gpu["cc_major"]) else f"{int(gpu['cc_major'])}.{int(gpu['cc_minor'])}"
    return DeviceInfo(
        name=gpu["name"],
        sm_count=number("sm_count"),
        sm_clock_hz=number("clock_hz", float),
        memory_bytes=number("memory_bytes"),
        memory_bandwidth_bytes_per_s=number("memory_bandwidth_bytes_per_s", float),
        l2_bytes=number("l2_bytes"),
        compute_capability=cc,
        max_warps_per_sm=number("max_warps_per_sm"),
        source=MEASURED_NSYS,
    )


def _capture_bounds(raw_kernels: Columns | None, runtime: Runtime) -> tuple[int, int]:
    spans = [c for c in (raw_kernels, runtime.calls) if c is not None and len(c["start_ns"])]
    if not spans:
        return (0, 0)
    return (int(min(c["start_ns"].min() for c in spans)), int(max(c["end_ns"].max() for c in spans)))


def _extras(export: NsysExport, steps: pd.DataFrame, unlaunched: int) -> dict:
    window = (int(steps["start_ns"].min()), int(steps["end_ns"].max())) if not steps.empty else (0, 0)
    overhead = export.frame("profiler_overhead", {"start_ns": window[0], "end_ns": window[1]})
    sync_events = export.frame("sync_events")
    return {
        "schema_version": export.schema_version,
        "product_version": export.product_version,
        "profiler_overhead_ns": None if overhead is None else int(overhead["total_ns"].iloc[0]),
        "profiler_overhead_in_steps_ns": None if overhead is None else int(overhead["in_window_ns"].iloc[0]),
        # As the exporter labels them; nsys 2025.3 files cudaStreamSynchronize under syncType 2
        # ("Stream wait sync"), so the Profile's syncs come from the host API calls instead.
        "sync_events": [] if sync_events is None else sync_events.to_dict("records"),
        "kernels_without_launch_record": unlaunched,
    }


def _analysis_window(export: NsysExport) -> dict | None:
    """{t0, t1, export_kernels, capture_start_ns} of the window to analyze when the export holds more than
    WINDOW_KERNELS kernels, None when it is read whole. Found through rowids (nsys appends rows in about
    time order): the middle WINDOW_KERNELS rows of the kernel table and the time they span."""
    extent = export.frame("kernel_extent")
    if extent is None or extent.empty or extent.isna().any(axis=None):
        return None
    first, last, first_start, last_start = (int(v) for v in extent.iloc[0])
    total = last - first + 1
    if total <= WINDOW_KERNELS:
        return None
    middle = (first + last) // 2
    span = export.frame(
        "kernel_span",
        {"first_row": middle - WINDOW_KERNELS // 2, "last_row": middle + WINDOW_KERNELS // 2 - 1},
    )
    t0, t1 = int(span["first_start_ns"].iloc[0]), int(span["last_start_ns"].iloc[0])
    expected = (last_start - first_start) * WINDOW_KERNELS / total
    if t1 - t0 > WINDOW_DISORDER * expected:
        centre = (first_start + last_start) // 2
        t0, t1 = int(centre - expected / 2), int(centre + expected / 2)
    return {"t0": t0, "t1": t1, "export_kernels": total, "capture_start_ns": first_start}


# Without the session's own start and stop (trimmed exports lack ANALYSIS_DETAILS), a record is placed
# against the host calls' span: it may not start or end more than that span (and a minute) outside it.
LIMIT_PAD_NS = 60_000_000_000


def _capture_limits(export: NsysExport, raw: dict[str, Columns | None]) -> tuple[int, int] | None:
    """When the capture ran: the session's start and stop, else the host calls' span padded (its extreme
    call at either end left out, in case that one is the corrupt record); None when nothing tells."""
    calls = raw.get("runtime_calls")
    session = export.frame("session")
    if session is not None and not session.empty and session.notna().all(axis=None):
        start, stop = int(session["start_ns"].iloc[0]), int(session["stop_ns"].iloc[0])
        # Only where the records share its clock: under --capture-range=cudaProfilerApi, nsys 2025.3 wrote
        # ANALYSIS_DETAILS at 11.75-12.44 s and every record at 0.015-0.69 s (H200, resnet50), which dropped
        # all 14,820 kernels as implausible.
        if calls is None or not len(calls["start_ns"]) or start <= int(np.median(calls["start_ns"])) <= stop:
            return start, stop
    if calls is None or len(calls["start_ns"]) < 3:
        return None
    starts = np.sort(calls["start_ns"])
    lo, hi = int(starts[1]), int(starts[-2])
    pad = (hi - lo) + LIMIT_PAD_NS
    return lo - pad, hi + pad


def _drop_implausible(
    raw: dict[str, Columns | None], limits: tuple[int, int] | None, warnings: list[str]
) -> None:
    """Drop the records that cannot be measurements (hybrid.load.plausible.implausible_rows), naming them."""
    for name, label in (
        ("runtime_calls", "CUDA API calls"),
        ("kernels", "kernels"),
        ("memcpys", "copies"),
        ("memsets", "memsets"),
    ):
        columns = raw.get(name)
        if columns is None or not len(columns["start_ns"]):
            continue
        bad = implausible_rows(columns["start_ns"], columns["end_ns"], limits, columns.get("bytes"))
        if not bad.any():
            continue
        first = int(np.flatnonzero(bad)[0])
        example = f"start {columns['start_ns'][first]}, end {columns['end_ns'][first]}" + (
            f", {columns['bytes'][first]} bytes" if "bytes" in columns else ""
        )
        where = f"; the capture ran from {limits[0]} to {limits[1]} ns" if limits else ""
        warnings.append(
            f"{int(bad.sum())} {label} with impossible times or sizes dropped (e.g. {example}"
            f"{where}): corrupt records in the export, not measurements"
        )
        raw[name] = take_rows(columns, np.flatnonzero(~bad))


def _drop_backwards_ranges(nvtx: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """NVTX ranges that end before they start are corrupt records, not steps or layers: dropped, named."""
    backwards = (nvtx["end_ns"] < nvtx["start_ns"]).to_numpy(bool)
    if not backwards.any():
        return nvtx
    example = str(nvtx["text"][backwards].iloc[0])[:60]
    warnings.append(
        f"{int(backwards.sum())} NVTX range(s) that end before they start dropped (e.g. "
        f"{example!r}): corrupt records in the export, not measurements"
    )
    return nvtx[~backwards]


def _window_bounds(window: dict | None) -> tuple[dict, dict, dict]:
    """The :t0/:t1 of the host calls, the device activity and the NVTX ranges read for `window`: host
    calls and ranges from a margin before it (the launches of its first kernels) to a margin after it (the
    launches of what started there), device activity to a margin after it (what its last steps queued)."""
    if window is None:
        return WHOLE_CAPTURE, WHOLE_CAPTURE, WHOLE_CAPTURE
    t0, t1 = window["t0"], window["t1"]
    margin = int(WINDOW_MARGIN * (t1 - t0))
    around = {"t0": t0 - margin, "t1": t1 + margin}
    return around, {"t0": t0, "t1": t1 + margin}, around


def _window_warning(window: dict, steps: pd.DataFrame, kernels: int) -> str:
    def at(ns: int) -> str:
        return f"{(ns - window['capture_start_ns']) / 1e9:.2f} s"

    where = (
        f" between {at(int(steps['start_ns'].min()))} and {at(int(steps['end_ns'].max()))}"
        if len(steps)
        else ""
    )
    return (
        f"the export holds {window['export_kernels']:,} kernels: to keep memory bounded, hybrid analyzed "
        f"the {len(steps)} step(s){where} of the capture (its middle; {kernels:,} kernels), not the whole "
        "capture"
    )


def export_file(path: str | Path) -> Path:
    """`path`, or the export a run directory holds (nsys/profile.sqlite, or a profile.sqlite beside
    run.json). InputError when a directory holds neither; a missing or foreign file is nsight's to name."""
    path = Path(path)
    if not path.is_dir():
        return path
    for candidate in (path / NSYS_DIR / NSYS_EXPORT_FILE, path / NSYS_EXPORT_FILE):
        if candidate.is_file():
            return candidate
    raise InputError(
        f"{path} is a directory without an Nsight Systems export ({NSYS_DIR}/{NSYS_EXPORT_FILE})",
        "pass the .sqlite file itself, or a run directory whose nsys pass finished "
        "(see run.json for the status of each pass)",
    )


def injector_measured_steps(export_path: Path) -> int | None:
    """Measured steps that the injector reported in the inject.json next to the export (the nsys
    pass directory of a run); None for a foreign export or an unreadable file."""
    try:
        facts = json.loads(read_regular_text(export_path.parent / INJECT_FILE))  # never blocks on a FIFO
    except (OSError, ValueError):
        return None
    measured = facts.get("measured_steps") if isinstance(facts, dict) else None
    return measured if isinstance(measured, int) and not isinstance(measured, bool) else None


def load_nsys_export(
    path: str | Path, *, step_range: str | None = None, measured_steps: int | None = None
) -> Profile:
    """Parse an nsys SQLite export (or a run directory holding nsys/profile.sqlite) into a Profile.

    `measured_steps` (default: what the injector's inject.json next to the export says) drops the
    injector's `step N` ranges with N at or past it. With no kernel in the export,
    `extras["nsys"]["no_kernels_reason"]` says why (explain_no_kernels), and a warning repeats it.
    InputError when the file is not a readable export or --step-range names no range."""
    with nsight_errors_as_hybrid(), closing(open_export(export_file(path))) as export:
        warnings = list(export.warnings)
        if measured_steps is None:
            measured_steps = injector_measured_steps(export.path)
        window = _analysis_window(export)
        host, device, ranges = _window_bounds(window)
        # Biggest first: the two workers read kernels and runtime calls side by side.
        raw = export.columns_many(
            {
                "kernels": device,
                "runtime_calls": host,
                "memcpys": device,
                "memsets": device,
                "sync_targets": device,
            }
        )
        _drop_implausible(raw, _capture_limits(export, raw), warnings)
        runtime = Runtime(export, raw.pop("runtime_calls"))
        nvtx = _drop_backwards_ranges(nvtx_ranges(export, ranges), warnings)
        raw_kernels = raw.pop("kernels")
        steps = find_steps(
            nvtx,
            step_range,
            _capture_bounds(raw_kernels, runtime),
            measured_steps,
            warnings,
            runtime,
            raw_kernels,
            windowed=window is not None,
        )
        if window is not None:
            margin = int(WINDOW_MARGIN * (window["t1"] - window["t0"]))
            steps = steps.within(window["t0"] + margin, window["t1"] - margin)
        layers, per_thread = _module_layers(nvtx, steps)
        sample_facts: dict = {}
        kernels, unlaunched = _kernels(raw_kernels, export, runtime, steps.assign, per_thread)
        del raw_kernels
        profile = Profile(
            steps=steps.frame,
            kernels=kernels,
            memcpys=_memcpys(raw["memcpys"], runtime, steps.assign),
            memsets=_memsets(raw["memsets"], runtime, steps.assign),
            syncs=_syncs(runtime, steps.assign),
            launches=_launches(runtime, steps.assign),
            api_calls=_api_calls(runtime, raw["sync_targets"], steps.assign),
            layers=layers,
            samples=_samples(export, steps.frame, warnings, sample_facts),
            device=_device_info(export, kernels),
            step_source=steps.source,
            step_unit=steps.unit,
            step_confidence=steps.confidence,
            step_reason=steps.reason,
            extras={"nsys": _extras(export, steps.frame, unlaunched)},
        )
        profile.extras["nsys"].update(sample_facts)
        if window is not None:
            profile.extras["nsys"].update(
                analyzed_window_ns=[window["t0"], window["t1"]], export_kernels=window["export_kernels"]
            )
            warnings.append(_window_warning(window, steps.frame, int((kernels["step"] >= 0).sum())))
        no_kernels_reason = explain_no_kernels(export) if kernels.empty else None
        profile.extras["nsys"]["no_kernels_reason"] = no_kernels_reason
        if no_kernels_reason is not None:
            warnings.append(f"the export holds no kernels: {no_kernels_reason}")
        elif unlaunched:
            warnings.append(
                f"{unlaunched} kernels have no launch call in the export (launched before the "
                "capture started or from an untraced API); they are placed by their GPU start time"
            )
    profile.sources = {
        name: MEASURED_NSYS
        for name in (
            "steps",
            "kernels",
            "memcpys",
            "memsets",
            "syncs",
            "launches",
            "layers",
            "api_calls",
            "samples",
        )
    }
    profile.warnings = warnings
    return profile


def explain_no_kernels(path_or_export: str | Path | NsysExport) -> str:
    """Why a capture has no kernels, as far as the export tells: nothing recorded at all (the
    capture range never opened), CUDA calls but no launches, or steps in one process while the
    CUDA work ran in another."""
    with nsight_errors_as_hybrid():
        if isinstance(path_or_export, NsysExport):
            return _explain(path_or_export)
        with closing(open_export(export_file(path_or_export))) as export:
            return _explain(export)


def _explain(export: NsysExport) -> str:
    processes = export.frame("cuda_processes")
    nvtx = nvtx_ranges(export)
    if (processes is None or processes.empty) and nvtx.empty:
        return (
            "nothing was recorded: the capture range never opened (cudaProfilerStart was not reached, "
            "e.g. the script stopped during warmup or never called the step hook) or CUDA was never used. "
            "Check the workload's output in nsys.log, or rerun with --whole-run"
        )
    if processes is None or processes.empty:
        return (
            "NVTX ranges were recorded but no CUDA API call: the GPU work ran in a process nsys did not "
            "trace (a fork without exec: pass --trace-fork-before-exec=true) or the model ran on the CPU"
        )
    step_pids = set(pid_of(nvtx["global_tid"].to_numpy()).tolist()) if not nvtx.empty else set()
    cuda_pids = set(processes["pid"].astype(int).tolist())
    if step_pids and not step_pids & cuda_pids:
        return (
            f"the NVTX ranges are in process {sorted(step_pids)} but the CUDA calls in {sorted(cuda_pids)}: "
            "the work ran in a child process outside the measured steps"
        )
    return (
        "CUDA API calls were recorded but no kernel ran: the tensors may be on the CPU, or kernel "
        "tracing was off (nsys -t must include cuda)"
    )
