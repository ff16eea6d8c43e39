"""The run directory: every pass leaves its raw artifacts here next to results.json, so
`hybrid report DIR` re-analyzes offline and a failed pass keeps what it gathered."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hybrid.errors import InputError, UsageError

PASS_NAMES = ("plain", "torch", "nsys", "ncu")


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a crash or a full disk never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, path: Path) -> RunDir:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as error:
            raise UsageError(f"cannot write the run directory {path}: {error.strerror or error}",
                             "choose a writable place with --out DIR (and check free disk space)") from error
        return cls(path)

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
        try:
            return json.loads((self.path / "run.json").read_text())
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise InputError(f"{self.path / 'run.json'} is corrupt: {error}",
                             "re-run the workload, or remove run.json to analyze the artifacts alone") from error

    def update_run_json(self, **fields) -> None:
        data = self.run_json()
        data.update(fields)
        write_atomic(self.path / "run.json", json.dumps(data, indent=1, default=str))

    def read_inject(self, name: str) -> dict | None:
        path = self.path / name / "inject.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None

    def torch_trace(self) -> Path | None:
        for name in ("trace.json", "trace.json.gz"):  # archived runs keep the trace gzipped
            path = self.path / "torch" / name
            if path.is_file():
                return path
        return None

    def nsys_export(self) -> Path | None:
        path = self.path / "nsys" / "profile.sqlite"
        return path if path.is_file() else None

    def ncu_csv(self) -> Path | None:
        path = self.path / "ncu" / "counters.csv"
        return path if path.is_file() and path.stat().st_size > 0 else None
