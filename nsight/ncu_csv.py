"""Read Nsight Compute CSV into a counter frame: one row per profiled kernel instance, its name, launch
dimensions and the columns nsight.ncu_metrics.counter_columns names.

Two layouts exist and both are read:
- long (`ncu --csv --metrics ...`, the default details page): one row per (kernel, metric) with
  "Metric Name", "Metric Unit", "Metric Value" columns; on stdout it is mixed with `==PROF==` /
  `==WARNING==` lines and the program's own output before and after the table.
- wide (`--page raw`): one row per kernel, one column per metric, a units row under the header.

Values carry thousands separators ("11,520"), "n/a" or "no data", and, without
`--print-units base`, scaled units ("us", "Gbyte/s", "Ghz"); all are converted to base units
(bytes, ns, Hz, %, counts). Kernel names are C++ with commas and quotes inside: the csv module
handles the quoting, so a name is never split.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from nsight.errors import UnreadableInput
from nsight.ncu_metrics import METRICS, counter_columns

# Column names shared by both layouts (ncu 2023+; checked on 2025.3.1).
ID_COLUMN = "ID"
PID_COLUMN = "Process ID"
KERNEL_COLUMN = "Kernel Name"
BLOCK_COLUMN = "Block Size"
GRID_COLUMN = "Grid Size"
METRIC_NAME_COLUMN = "Metric Name"
METRIC_UNIT_COLUMN = "Metric Unit"
METRIC_VALUE_COLUMN = "Metric Value"
HEADER_START = f'"{ID_COLUMN}","{PID_COLUMN}"'

# Always in the raw page (ncu records it for every kernel): how often the kernel was replayed.
REPLAY_PASSES = "profiler__replayer_passes"

# ncu says this instead of printing a table when the filters matched no kernel.
NO_KERNELS_TEXT = "No kernels were profiled"

# Unit (lower case, as ncu prints it) -> factor to the base unit. Units not listed are refused
# rather than guessed (the value becomes NaN and a note names the unit).
UNIT_SCALE = {
    "": 1.0,
    "%": 1.0,
    "inst": 1.0,
    "sector": 1.0,
    "request": 1.0,
    "warp": 1.0,
    "block": 1.0,
    "cycle": 1.0,
    "pass": 1.0,
    "register/thread": 1.0,
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
    "hz": 1.0,
    "khz": 1e3,
    "mhz": 1e6,
    "ghz": 1e9,
    "cycle/second": 1.0,
    "cycle/msecond": 1e3,
    "cycle/usecond": 1e6,
    "cycle/nsecond": 1e9,
}
MISSING_VALUES = {"", "n/a", "no data", "nan"}

_LAUNCH_DIMS = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass
class NcuCounters:
    """Counters of one ncu run: the frame plus what the reader noticed about it."""

    frame: pd.DataFrame  # one row per profiled kernel instance, in ncu's ID order (parse_ncu_csv)
    missing_metrics: list[str] = field(default_factory=list)  # requested but reported for no kernel
    # requested, reported for some kernels and n/a (or absent) for others: metric -> kernels lacking it
    partial_metrics: dict[str, int] = field(default_factory=dict)
    replay_passes: int | None = None  # the most passes any kernel needed; None when not reported
    process_ids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def parse_number(text: str) -> float:
    """ncu's number text -> float; "11,520" -> 11520.0, "n/a" -> NaN."""
    cleaned = text.strip().replace(",", "")
    if cleaned.lower() in MISSING_VALUES:
        return math.nan
    try:
        return float(cleaned)
    except ValueError:
        return math.nan


def parse_launch_dims(text: str) -> tuple[int, int, int]:
    """ "(256, 1, 1)" -> (256, 1, 1); (-1, -1, -1) when ncu gave something else."""
    match = _LAUNCH_DIMS.match(text.strip())
    if not match:
        return (-1, -1, -1)
    return tuple(int(part) for part in match.groups())  # type: ignore[return-value]


def _to_base(value: float, unit: str, metric: str, notes: list[str]) -> float:
    scale = UNIT_SCALE.get(unit.strip().lower())
    if scale is None:
        note = f"unit {unit!r} of {metric} not understood; value dropped"
        if note not in notes:
            notes.append(note)
        return math.nan
    return value * scale


@dataclass
class _Instance:
    """One profiled kernel instance while the table is being read."""

    ncu_id: int
    pid: int
    name: str
    block: str
    grid: str
    values: dict[str, float] = field(default_factory=dict)


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Split ncu output into (header, rows) tables. Lines that are not CSV rows (==PROF== lines,
    the program's output) are skipped; a repeated header (several processes, appended runs) starts
    a new table."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    for line in text.lstrip("\ufeff").splitlines():
        if line.startswith(HEADER_START):
            tables.append((next(csv.reader([line])), []))
        elif tables and line.startswith('"'):
            tables[-1][1].append(next(csv.reader([line])))
    return tables


def _instance_key(row: list[str], col: dict[str, int], notes: list[str]) -> tuple[int, int] | None:
    """(process id, ncu id) of a row; None, with a note, when either is not a number (a damaged row)."""
    pid, ncu_id = parse_number(row[col[PID_COLUMN]]), parse_number(row[col[ID_COLUMN]])
    if not (math.isfinite(pid) and math.isfinite(ncu_id)):
        note = "CSV rows whose ID or Process ID is not a number skipped"
        if note not in notes:
            notes.append(note)
        return None
    return int(pid), int(ncu_id)


def _read_long(
    header: list[str],
    rows: list[list[str]],
    wanted: set[str],
    instances: dict[tuple[int, int], _Instance],
    notes: list[str],
) -> None:
    col = {name: i for i, name in enumerate(header)}
    for row in rows:
        key = _instance_key(row, col, notes)
        if key is None:
            continue
        inst = instances.get(key)
        if inst is None:
            inst = instances[key] = _Instance(
                key[1], key[0], row[col[KERNEL_COLUMN]], row[col[BLOCK_COLUMN]], row[col[GRID_COLUMN]]
            )
        metric = row[col[METRIC_NAME_COLUMN]]
        if metric in wanted:
            inst.values[metric] = _to_base(
                parse_number(row[col[METRIC_VALUE_COLUMN]]), row[col[METRIC_UNIT_COLUMN]], metric, notes
            )


def _read_raw(
    header: list[str],
    rows: list[list[str]],
    wanted: set[str],
    instances: dict[tuple[int, int], _Instance],
    notes: list[str],
) -> None:
    col = {name: i for i, name in enumerate(header)}
    units = [""] * len(header)
    if rows and rows[0][col[ID_COLUMN]] == "":
        units, rows = rows[0], rows[1:]
    metric_columns = [(name, i) for name, i in col.items() if name in wanted]
    for row in rows:
        key = _instance_key(row, col, notes)
        if key is None:
            continue
        inst = instances[key] = _Instance(
            key[1], key[0], row[col[KERNEL_COLUMN]], row[col[BLOCK_COLUMN]], row[col[GRID_COLUMN]]
        )
        for metric, i in metric_columns:
            inst.values[metric] = _to_base(parse_number(row[i]), units[i], metric, notes)


def _no_table_error(text: str, source: str) -> UnreadableInput:
    if NO_KERNELS_TEXT in text:
        return UnreadableInput(
            f"ncu profiled no kernel ({source} says '{NO_KERNELS_TEXT}'): the kernel-name filter or "
            "the NVTX step range matched no launch",
            "check that the step range exists (the workload must step under the injector) and that "
            "the selected kernels run inside it (ncu.log lists the launches ncu saw)",
        )
    return UnreadableInput(
        f"{source} holds no ncu CSV table (no header line starting with {HEADER_START})",
        "pass the CSV written by `ncu --csv` (stdout or --log-file) or by "
        "`ncu --import REPORT --csv --page raw`; see ncu.log next to it for why ncu wrote none",
    )


def parse_ncu_csv(source: Path | str, *, metrics: tuple[str, ...] = METRICS) -> NcuCounters:
    """Parse ncu CSV (either layout) into counters: a Path is read from disk, a str is the CSV text.
    Raises UnreadableInput when the file cannot be read, holds no table, or the table has no kernel."""
    if isinstance(source, Path):
        return read_ncu_csv(source, metrics=metrics)
    return _parse_text(source, "ncu CSV", metrics)


def _parse_text(text: str, source: str, metrics: tuple[str, ...]) -> NcuCounters:
    tables = _tables(text)
    if not tables:
        raise _no_table_error(text, source)
    wanted = set(metrics) | {REPLAY_PASSES}
    instances: dict[tuple[int, int], _Instance] = {}
    notes: list[str] = []
    for header, rows in tables:
        required = [ID_COLUMN, PID_COLUMN, KERNEL_COLUMN, BLOCK_COLUMN, GRID_COLUMN]
        absent = [c for c in required if c not in header]
        if absent:
            raise UnreadableInput(
                f"{source}: ncu CSV header lacks columns {absent}",
                "write the CSV with a recent ncu (2023.1 or newer) and --csv",
            )
        complete = [row for row in rows if len(row) == len(header)]
        if len(complete) < len(rows):
            notes.append(f"{len(rows) - len(complete)} malformed CSV line(s) skipped")
        reader = _read_long if METRIC_NAME_COLUMN in header else _read_raw
        reader(header, complete, wanted, instances, notes)
    if not instances:
        if NO_KERNELS_TEXT in text:
            raise _no_table_error(text, source)
        raise UnreadableInput(
            f"{source}: the ncu CSV table has a header but no kernel rows",
            "ncu stopped before printing results; read ncu.log next to it",
        )

    ordered = sorted(instances.values(), key=lambda inst: (inst.ncu_id, inst.pid))
    records = []
    for inst in ordered:
        grid, block = parse_launch_dims(inst.grid), parse_launch_dims(inst.block)
        records.append(
            {
                "name": inst.name,
                "grid_x": grid[0],
                "grid_y": grid[1],
                "grid_z": grid[2],
                "block_x": block[0],
                "block_y": block[1],
                "block_z": block[2],
                **counter_columns(inst.values, inst.name),
            }
        )
    frame = pd.DataFrame.from_records(records)
    # pandas turns None into NaN in a mixed object column; no limiter is None.
    limiter = frame["occupancy_limiter"]
    frame["occupancy_limiter"] = limiter.astype(object).where(limiter.notna(), None)

    def reported(metric: str) -> bool:
        return any(not math.isnan(inst.values.get(metric, math.nan)) for inst in ordered)

    missing = [m for m in metrics if not reported(m)]
    if missing:
        notes.append(
            f"{len(missing)} requested metric(s) reported for no kernel ({', '.join(missing)}): "
            "the figures that need them are unmeasured"
        )
    partial = {
        m: lacking
        for m in metrics
        if m not in missing and (lacking := sum(math.isnan(inst.values.get(m, math.nan)) for inst in ordered))
    }
    if partial:
        listed = ", ".join(f"{metric} on {n} of {len(ordered)} kernels" for metric, n in partial.items())
        notes.append(
            f"no value (n/a) for {listed}: those kernels' figures that need them are unmeasured "
            "(a kernel enters the roofline only with all of its work measured)"
        )
    passes = [
        inst.values[REPLAY_PASSES]
        for inst in ordered
        if not math.isnan(inst.values.get(REPLAY_PASSES, math.nan))
    ]
    return NcuCounters(
        frame=frame,
        missing_metrics=missing,
        partial_metrics=partial,
        replay_passes=int(max(passes)) if passes else None,
        process_ids=sorted({inst.pid for inst in ordered}),
        notes=notes,
    )


def read_ncu_csv(path: str | Path, *, metrics: tuple[str, ...] = METRICS) -> NcuCounters:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UnreadableInput(
            f"cannot read ncu CSV {path}: {exc.strerror}",
            "check the path; the ncu pass writes RUN_DIR/ncu/counters.csv",
        ) from exc
    return _parse_text(text, str(path), metrics)
