"""Python stack samples from an Nsight Systems export (nsys profile --python-sampling=true).

nsys writes each sample as an NVTX mark of its "Python Periodic Sampling" domain on the sampled
thread (and each Python backtrace of a CUDA call as one of "Python Backtrace on CUDA"), whose binary
payload is the stack. `nsys export --include-blobs=true` writes it to NVTX_EVENTS.binaryData as NVTX
extended payloads: a uint64 count of payloads, then per payload its uint64 schema id, size and byte
offset; at that offset the stack in the layout the export declares (sql/python_sample_layout.sql):
a uint64 thread-state id, a uint32 thread state, a uint32 frame count, then per frame, leaf first,
the uint64 StringIds ids of the function and the file, an int32 line number and 4 bytes of padding
(read off the H200 box's nsys 2025.3.1). StringIds holds the names HTML-escaped ('&lt;frozen abc&gt;'). Each
sample is
reduced here to its first frame in the user's own files (nsight.python_frames).
"""

from __future__ import annotations

import base64
import binascii
import html
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nsight.python_frames import Frame, first_library_frame, first_user_frame
from nsight.sqlite_export import NsysExport

ENVELOPE_COUNT = struct.Struct("<Q")
ENVELOPE_ENTRY = struct.Struct("<QQQ")  # schema id, size, offset
HEADER = struct.Struct("<QII")
FRAME = struct.Struct("<QQi4x")  # the line is an int32; the 4 bytes after it are padding, not zeroed
# The same layout as the export declares it (sql/python_sample_layout.sql): entry -> (byte offset,
# NVTX payload entry type: 15 int32, 16 uint32, 18 uint64, 80 registered string handle; None: any).
LAYOUT = {
    "Thread state ID": (0, 18),
    "Thread state": (8, None),
    "Frames count": (12, 16),
    "Frames": (HEADER.size, None),
    "Function": (0, 80),
    "File": (8, 80),
    "Line": (16, 15),
}


@dataclass
class PythonSamples:
    """One row per sample with a readable stack: time, sampled globalTid, its first user frame (file
    None, line -1 when the stack has none) and its library frame (python_frames.first_library_frame, None
    where the user's line made the call). `marks` counts every sample nsys recorded;
    `without_stack` those whose payload the export left out (`nsys profile --export sqlite` does),
    `unreadable` those whose payload has another layout."""

    start_ns: np.ndarray
    global_tid: np.ndarray
    file: list
    line: np.ndarray
    function: list
    library: list  # (file, line, function) or None, one per sample
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


def _stack_payload(blob: bytes) -> bytes | None:
    """The first payload of an NVTX extended-payload blob (see the module docstring)."""
    if len(blob) < ENVELOPE_COUNT.size + ENVELOPE_ENTRY.size:
        return None
    (count,) = ENVELOPE_COUNT.unpack_from(blob)
    if count < 1 or ENVELOPE_COUNT.size + count * ENVELOPE_ENTRY.size > len(blob):
        return None
    _, size, offset = ENVELOPE_ENTRY.unpack_from(blob, ENVELOPE_COUNT.size)
    return blob[offset : offset + size] if offset + size <= len(blob) else None


def _frames(blob: bytes | None) -> list[tuple[int, int, int]] | None:
    payload = _stack_payload(blob) if blob is not None else None
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
    entries = {
        name: (int(offset), int(kind))
        for name, offset, kind in zip(declared["name"], declared["offset"], declared["type"], strict=False)
    }
    return sizes <= {FRAME.size} and all(
        entries[name][0] == offset and kind in (None, entries[name][1])
        for name, (offset, kind) in LAYOUT.items()
        if name in entries
    )


def read_python_samples(
    export: NsysExport,
    start_ns: int,
    end_ns: int,
    pick: Callable[[list[Frame]], Frame | None] = first_user_frame,
) -> PythonSamples | None:
    """The export's Python samples in [start_ns, end_ns], each reduced to the frame `pick` chooses
    from its stack (leaf first) and its library frame; None when nsys recorded none (sampling was off,
    or an nsys without it)."""
    rows = export.frame("python_samples", {"start_ns": start_ns, "end_ns": end_ns})
    if rows is None or rows.empty:
        return None
    payloads = [_payload_bytes(p) for p in rows["payload"]]
    readable = layout_matches(export)
    stacks = [_frames(p) if readable else None for p in payloads]
    keep = np.array([s is not None for s in stacks], dtype=bool)
    ids = np.array(sorted({i for s in stacks if s for f in s for i in f[:2]}), dtype=np.int64)
    strings = {i: html.unescape(v) for i, v in export.strings(ids).items()}
    cache: dict[tuple, tuple] = {}
    files, lines, functions, library = [], [], [], []
    for stack in (s for s in stacks if s is not None):
        key = tuple(stack)
        if key not in cache:
            named = [
                (strings.get(int(file_id), ""), int(line), strings.get(int(function_id), ""))
                for function_id, file_id, line in key
            ]
            cache[key] = (pick(named) or (None, -1, None), first_library_frame(named))
        (file, line, function), called_in = cache[key]
        files.append(file)
        lines.append(line)
        functions.append(function)
        library.append(called_in)
    without = sum(p is None for p in payloads)
    return PythonSamples(
        rows["start_ns"].to_numpy(np.int64)[keep],
        rows["global_tid"].to_numpy(np.int64)[keep],
        files,
        np.array(lines, dtype=np.int64),
        functions,
        library,
        marks=len(rows),
        without_stack=without,
        unreadable=len(rows) - without - int(keep.sum()),
    )
