"""What torchrun itself recorded about a failed job: the summary its elastic agent prints at the end
of a pass's console.log (`Failures:` and `Root Cause (first observed failure):` blocks), one entry
per failed rank with its exit code and, for a rank killed by a signal, the signal's name.

A rank that dies outside Python (SIGABRT in a C++ library, SIGKILL from the OOM killer) writes no
inject.json: this summary is then the only record of which rank went first and how. Its tail is read
(the summary is the last thing torchrun prints), never executed or echoed beyond the fields parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# The summary of a 1024-rank job is ~250 KB; the tail of a console.log is enough.
SUMMARY_TAIL_BYTES = 1 << 20

_BLOCK = re.compile(r"^\[\d+\]:\s*$")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:.*\((SIG[A-Z]+)\))?")


@dataclass(frozen=True)
class RankFailure:
    rank: int
    exit_code: int
    signal: str | None  # "SIGABRT" where the rank was ended by a signal

    def describe(self) -> str:
        how = f"exit code {self.exit_code}" + (f", {self.signal}" if self.signal else "")
        return f"{how} per torchrun"


@dataclass(frozen=True)
class TorchrunFailures:
    ranks: dict[int, RankFailure]
    root_cause: int | None  # the rank torchrun observed failing first


def _read_tail(path: Path) -> str:
    try:
        with path.open("rb") as log:
            log.seek(0, 2)
            size = log.tell()
            log.seek(max(0, size - SUMMARY_TAIL_BYTES))
            return log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def parse_torchrun_failures(text: str) -> TorchrunFailures:
    """The failed ranks of the last summary in `text`; empty where torchrun printed none."""
    start = text.rfind("Failures:")
    if start < 0:
        return TorchrunFailures({}, None)
    ranks: dict[int, RankFailure] = {}
    root_cause: int | None = None
    in_root = False
    rank: int | None = None
    for line in text[start:].splitlines():
        if line.startswith("Root Cause"):
            in_root = True
            continue
        if _BLOCK.match(line):
            rank = None
            continue
        if (found := _RANK.match(line)) is not None:
            rank = int(found.group(1))
            if in_root and root_cause is None:
                root_cause = rank
            continue
        if rank is not None and (found := _EXIT.match(line)) is not None:
            ranks[rank] = RankFailure(rank, int(found.group(1)), found.group(2))
    return TorchrunFailures(ranks, root_cause)


def read_torchrun_failures(console_log: Path) -> TorchrunFailures:
    return parse_torchrun_failures(_read_tail(console_log))
