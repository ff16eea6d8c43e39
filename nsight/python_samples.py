"""Python stack samples from an Nsight Systems export (nsys profile --python-sampling=true).

nsys writes each sample as an NVTX event of its "Python Periodic Sampling" domain on the sampled
thread, whose binary payload is the stack: a header (uint64 schema word, uint32 thread state,
uint32 frame count), then per frame, leaf first, uint64 StringIds ids of the function and the file
and a uint64 line number. Each sample is reduced here to its first frame in the user's own files
(nsight.python_frames).
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

import numpy as np

from nsight.python_frames import first_user_frame
from nsight.sqlite_export import NsysExport

HEADER = struct.Struct("<QII")
FRAME = struct.Struct("<QQQ")
# The same layout as the export declares it (sql/python_sample_layout.sql): entry -> byte offset.
LAYOUT = {"Thread state ID": 0, "Thread state": 8, "Frames count": 12, "Frames": HEADER.size,
          "Function": 0, "File": 8, "Line": 16}


@dataclass
class PythonSamples:
    """One row per sample with a readable stack: time, sampled globalTid, and its first user frame
    (file None, line -1 when the stack has none). `marks` counts every sample nsys recorded;
    `without_stack` those whose payload the export left out (`nsys profile --export sqlite` does),
    `unreadable` those whose payload has another layout."""

    start_ns: np.ndarray
    global_tid: np.ndarray
    file: list
    line: np.ndarray
    function: list
    marks: int = 0
    without_stack: int = 0
    unreadable: int = 0


def _payload_bytes(value: object) -> bytes | None:
    """binaryData as bytes: the column is declared TEXT, so a payload may arrive as a BLOB, as hex
    or as base64 text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    try:
        return bytes.fromhex(text)
    except ValueError:
        pass
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _frames(payload: bytes | None) -> list[tuple[int, int, int]] | None:
    if payload is None or len(payload) < HEADER.size:
        return None
    _, _, count = HEADER.unpack_from(payload)
    if len(payload) != HEADER.size + count * FRAME.size:
        return None
    return [FRAME.unpack_from(payload, HEADER.size + i * FRAME.size) for i in range(count)]


def layout_matches(export: NsysExport) -> bool:
    """Whether the export declares the payload layout _frames decodes (True when it declares none)."""
    declared = export.frame("python_sample_layout")
    if declared is None or declared.empty:
        return True
    sizes = set(declared["payload_size"].dropna().astype(int))
    offsets = dict(zip(declared["name"], declared["offset"].astype(int)))
    return sizes <= {FRAME.size} and all(offsets.get(name, offset) == offset for name, offset in LAYOUT.items())


def read_python_samples(export: NsysExport, start_ns: int, end_ns: int) -> PythonSamples | None:
    """The export's Python samples in [start_ns, end_ns]; None when nsys recorded none (sampling
    was off, or an nsys without it)."""
    rows = export.frame("python_samples", {"start_ns": start_ns, "end_ns": end_ns})
    if rows is None or rows.empty:
        return None
    payloads = [_payload_bytes(p) for p in rows["payload"]]
    readable = layout_matches(export)
    stacks = [_frames(p) if readable else None for p in payloads]
    keep = np.array([s is not None for s in stacks], dtype=bool)
    ids = np.array(sorted({i for s in stacks if s for f in s for i in f[:2]}), dtype=np.int64)
    strings = export.strings(ids)
    cache: dict[tuple, tuple] = {}
    files, lines, functions = [], [], []
    for stack in (s for s in stacks if s is not None):
        key = tuple(stack)
        if key not in cache:
            named = [(strings.get(int(file_id), ""), int(line), strings.get(int(function_id), ""))
                     for function_id, file_id, line in key]
            cache[key] = first_user_frame(named) or (None, -1, None)
        file, line, function = cache[key]
        files.append(file)
        lines.append(line)
        functions.append(function)
    without = sum(p is None for p in payloads)
    return PythonSamples(rows["start_ns"].to_numpy(np.int64)[keep], rows["global_tid"].to_numpy(np.int64)[keep],
                         files, np.array(lines, dtype=np.int64), functions, marks=len(rows),
                         without_stack=without, unreadable=len(rows) - without - int(keep.sum()))
