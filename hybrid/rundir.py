"""The run directory: every pass leaves its raw artifacts here next to results.json, so
`hybrid report DIR` re-analyzes offline and a failed pass keeps what it gathered."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hybrid.errors import InputError, UsageError
from hybrid.files import claimed, is_no_space, output_error, read_regular_text, write_file
from hybrid.jsontypes import NUMBER, text_items, typed_fields
from hybrid.markers import INJECT_FILE, NSYS_DIR, NSYS_EXPORT_FILE, TRACE_FILE

PASS_NAMES = ("plain", "torch", "nsys", "ncu")


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a crash or a full disk never leaves half a file."""
    write_file(path, text)


# The file that claims a run directory: created exclusively, so two runs never share one.
CLAIM_FILE = "run.json"


def _claim(path: Path) -> bool:
    """Make `path` this run's directory: True when it was absent or an empty folder and this process
    created its run.json first; False when it exists with content (another run, or anything else)."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        if not path.is_dir() or path.is_symlink() or any(path.iterdir()):
            return False
    try:
        fd = os.open(
            path / CLAIM_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666
        )
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("{}\n")
    claimed(path)
    return True


# Fields of run.json and inject.json that hybrid reads back, with the JSON types each may hold. A
# value of another type (a damaged or hand-edited file from someone else) is dropped and named in
# RunDir.problems, so that the analysis of what is intact goes on and says what it left out.
RUN_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "command": (str,),
    "model": (str,),
    "tools": (dict,),
    "passes": (list,),
    "mode_reasons": (list,),
    "job": (dict,),
    "options": (dict,),
    "target": (dict,),
    "fixed_warmup": (dict,),
    "verify": (dict,),
}
TARGET_TYPES: dict[str, tuple[type, ...]] = {"argv": (list,), "is_module": (bool,)}
FIXED_WARMUP_TYPES: dict[str, tuple[type, ...]] = {"warmup": (int,), "reason": (str,)}
PASS_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "status": (str,),
    "step_time_ms": NUMBER,
    "wall_s": NUMBER,
    "returncode": (int,),
    "message": (str,),
    "command": (list,),
}
INJECT_TYPES: dict[str, tuple[type, ...]] = {
    "outcome": (str,),
    "exit_code": (int,),
    "traceback": (str,),
    "cuda_available": (bool,),
    "batch_size": (int,),
    "warmup_steps": (int,),
    "measured_steps": (int,),
    "steps_seen": (int,),
    "peak_memory_bytes": (int,),
    "memory_capacity_bytes": (int,),
    "graph_breaks": (int, list),
    "uses_compile": (bool,),
    "step_time_ms": NUMBER,
    "unprofiled_step_time_ms": NUMBER,
    "torch_version": (str,),
    "device_name": (str,),
    "warnings": (list,),
    "step_source": (str,),
    "whole_run": (bool,),
    "window_ns": (int,),
    "window_cpu_ns": (int,),
    "step_end_ns": (list,),
    "gc": (dict,),
    "host_cpus": (int,),
    "data_loader": (dict,),
}


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []  # damaged fields of run.json / inject.json, left out when read

    @classmethod
    def create(cls, path: Path, *, unique: bool = False) -> RunDir:
        """A new run directory at `path`, which must not exist or be an empty folder: a run never
        mixes its artifacts with another's. With `unique` (a default name), `path-2`, `path-3`, ...
        are tried until one is free, so runs started in the same second each get their own."""
        candidates = [path] + ([path.with_name(f"{path.name}-{n}") for n in range(2, 1000)] if unique else [])
        for candidate in candidates:
            try:
                if _claim(candidate):
                    return cls(candidate)
            except OSError as error:
                if is_no_space(error):
                    raise output_error(candidate, error) from error
                raise UsageError(
                    f"cannot write the run directory {candidate}: {error.strerror or error}",
                    "choose a writable place with --out DIR",
                ) from error
        raise UsageError(
            f"the run directory {path} already exists and is not empty: a run never reuses "
            "another's folder (its old artifacts would be analyzed with the new ones)",
            "pass a new folder with --out DIR, or leave --out out for a fresh "
            "hybrid-runs/NAME-TIME; `hybrid report DIR` re-analyzes an existing one",
        )

    @classmethod
    def open(cls, path: Path) -> RunDir:
        if not path.is_dir():
            raise InputError(f"{path} is not a run directory", "pass the folder `hybrid run` wrote (--out)")
        return cls(path)

    def pass_dir(self, name: str) -> Path:
        folder = self.path / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def write_text(self, relative: str, text: str) -> Path:
        target = self.path / relative
        write_atomic(target, text)
        return target

    def run_json(self) -> dict:
        path = self.path / "run.json"
        fix = "re-run the workload, or remove run.json to analyze the artifacts alone"
        try:
            data = json.loads(read_regular_text(path))
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise InputError(f"cannot read {path}: {error.strerror or error}", fix) from error
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
            raise InputError(f"{path} is corrupt: {error}", fix) from error
        if not isinstance(data, dict):
            raise InputError(f"{path} is corrupt: a JSON {type(data).__name__}, not an object", fix)
        problems: list[str] = []
        data = typed_fields(data, RUN_JSON_TYPES, str(path), problems)
        if data.get("passes") is not None:
            given = data["passes"]
            passes = [
                typed_fields(p, PASS_TYPES, f"{path} passes[{i}]", problems)
                for i, p in enumerate(given)
                if isinstance(p, dict)
            ]
            data["passes"] = [p for p in passes if p.get("name")]
            if len(data["passes"]) < len(given):
                problems.append(
                    f"{path}: {len(given) - len(data['passes'])} pass entries without a name left out"
                )
        if data.get("mode_reasons") is not None:
            data["mode_reasons"] = text_items(data["mode_reasons"], f"{path} mode_reasons", problems)
        if data.get("tools") is not None:
            data["tools"] = {k: v for k, v in data["tools"].items() if isinstance(v, (str, type(None)))}
        if data.get("target") is not None:
            data["target"] = typed_fields(data["target"], TARGET_TYPES, f"{path} target", problems)
            if data["target"].get("argv") is not None:
                data["target"]["argv"] = text_items(data["target"]["argv"], f"{path} target argv", problems)
        if data.get("fixed_warmup") is not None:
            data["fixed_warmup"] = typed_fields(
                data["fixed_warmup"], FIXED_WARMUP_TYPES, f"{path} fixed_warmup", problems
            )
        self._note(problems)
        return data

    def _note(self, problems: list[str]) -> None:
        self.problems += [p for p in problems if p not in self.problems]

    def update_run_json(self, **fields) -> None:
        data = self.run_json()
        data.update(fields)
        write_atomic(self.path / "run.json", json.dumps(data, indent=1, default=str))

    def inject_path(self, name: str) -> Path:
        """Where the pass's workload writes its record (inject.json), in every ending."""
        return self.path / name / INJECT_FILE

    def read_inject(self, name: str) -> dict | None:
        """The pass's inject.json; None when absent or unreadable (inject_damaged tells which)."""
        path = self.inject_path(name)
        try:
            data = json.loads(read_regular_text(path))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        problems: list[str] = []
        data = typed_fields(data, INJECT_TYPES, str(path), problems)
        if data.get("warnings") is not None:
            data["warnings"] = text_items(data["warnings"], f"{path} warnings", problems)
        self._note(problems)
        return data

    def plain_steps_inject(self) -> dict:
        """The record of the run's plain steps: the plain pass's inject.json, else the window the torch
        pass's process timed before its profiler started (its `plain_window`); {} without either."""
        plain = self.read_inject("plain")
        if plain:
            return plain
        window = (self.read_inject("torch") or {}).get("plain_window")
        return window if isinstance(window, dict) and window.get("complete") else {}

    def inject_damaged(self, name: str) -> bool:
        """The pass left an inject.json that cannot be read as one."""
        return self.inject_path(name).exists() and self.read_inject(name) is None

    def _regular(self, path: Path) -> bool:
        """`path` is a regular file; something else there (a FIFO, a device: a received directory may hold
        anything) is never read, and named in `problems`."""
        if path.is_file():
            return True
        if path.exists() or path.is_symlink():
            self._note([f"{path} is not a regular file (a FIFO, device, socket or dangling link): left out"])
        return False

    def torch_trace(self) -> Path | None:
        for name in (TRACE_FILE, f"{TRACE_FILE}.gz"):  # archived runs keep the trace gzipped
            path = self.path / "torch" / name
            if self._regular(path):
                return path
        return None

    def nsys_export(self) -> Path | None:
        path = self.path / NSYS_DIR / NSYS_EXPORT_FILE
        return path if self._regular(path) else None

    def ncu_csv(self) -> Path | None:
        path = self.path / "ncu" / "counters.csv"
        return path if self._regular(path) and path.stat().st_size > 0 else None
