"""Fixtures shared by test files, and one parse per torch trace per test process (see below)."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from copy import deepcopy
from pathlib import Path
from typing import TypeVar

import pytest

from hybrid import pipeline
from hybrid.load import torch_trace
from hybrid.profile import Profile
from hybrid.replay.realized import realized_cache_path

# The committed H200 captures are read by many test files (every-capture sweeps, ledger and rule checks, the
# planted suite in three modes): one test process parsed launch_per_sample_loss's 4.3 MB trace 8 times at
# 3.7 s of CPU each, where a fresh copy of the parsed Profile costs 0.05 s. A committed trace is parsed once
# per test session, keyed by its path as given (the warnings name it so) and the bytes of it and of the
# op_flops.json beside it; every call gets its own deep copy, so no test sees another's changes. Copies a
# test makes (and damages) are parsed every time, and subprocesses (the CLI, the injector) parse for
# themselves as a user's run does.
REPO = Path(__file__).resolve().parent.parent
COMMITTED = (REPO / "tests" / "fixtures", REPO / "examples")
# Made once per session, not once per xdist worker: the controller makes this folder (pytest_configure
# below) and the workers inherit it; what the first worker makes is pickled there, and the second waits on
# its lock and reads it rather than making it again. Parsing every committed trace took one worker 19 s of
# CPU (test_gpu_callsites reads them all), which the other worker spent again.
SHARED_ENV = "HYBRID_TEST_SHARED"
_PARSED: dict[str, Profile] = {}
_T = TypeVar("_T")


def _made_once(key: str, make: Callable[[], _T]) -> _T:
    """make()'s value, made by the first process of the session that asks for `key`, unpickled by the rest
    (and by every later call: each gets its own copy)."""
    folder = os.environ.get(SHARED_ENV)
    if folder is None:
        return make()
    stored = Path(folder) / f"{key}.pickle"
    with open(Path(folder) / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stored.is_file():
            partial = stored.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(make()))
            partial.replace(stored)
        return pickle.loads(stored.read_bytes())


def _committed_trace_key(path: Path) -> str | None:
    resolved = path.resolve()
    if not resolved.is_file() or not any(resolved.is_relative_to(root) for root in COMMITTED):
        return None
    digest = hashlib.blake2b(repr(("load_torch_trace", str(path))).encode())
    digest.update(resolved.read_bytes())
    flops = resolved.with_name(torch_trace.OP_FLOPS_FILE)
    digest.update(flops.read_bytes() if flops.is_file() else b"")
    return digest.hexdigest()


def _parsed_once(load: Callable[[str | Path], Profile]) -> Callable[[str | Path], Profile]:
    @functools.wraps(load)
    def cached(path: str | Path) -> Profile:
        key = _committed_trace_key(Path(path))
        if key is None:
            return load(path)
        if key not in _PARSED:
            _PARSED[key] = _made_once(key, lambda: load(path))
        return deepcopy(_PARSED[key])

    return cached


# Patched before any test module imports the name (conftest is imported first); the pipeline imports it at
# call time.
torch_trace.load_torch_trace = _parsed_once(torch_trace.load_torch_trace)

# The committed captures are analyzed whole by several files (every-capture sweeps in test_model_reasons and
# test_one_cause, the resnet50 runs four times over in test_report_compare, ...): one_cause's sweep took 21 s
# of CPU after model_reasons had analyzed the same captures in the same process. An analysis of a committed
# capture is made once per session (_made_once), keyed by the function, the path as given, its keyword
# arguments and the bytes of the capture and of the realized-fix history the analysis reads; every call gets
# its own unpickled copy. Captures a test copied or damaged, and calls given a file beside them (an ncu CSV,
# peer counters), are analyzed every time.


def _committed_capture_key(name: str, path: Path, options: dict[str, object]) -> str | None:
    resolved = path.resolve()
    if not resolved.exists() or not any(resolved.is_relative_to(root) for root in COMMITTED):
        return None
    if any(value is not None and not isinstance(value, str) for value in options.values()):
        return None
    digest = hashlib.blake2b(repr((name, str(path), sorted(options.items()))).encode())
    files = [resolved] if resolved.is_file() else sorted(p for p in resolved.rglob("*") if p.is_file())
    history = realized_cache_path()
    for file in [*files, *([history] if history.is_file() else [])]:
        digest.update(str(file).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def _analyzed_once(analyze: Callable[..., dict]) -> Callable[..., dict]:
    @functools.wraps(analyze)
    def cached(path: str | Path, **options: object) -> dict:
        key = _committed_capture_key(analyze.__name__, Path(path), options)
        if key is None:
            return analyze(path, **options)
        return _made_once(key, lambda: analyze(path, **options))

    return cached


# Patched before any test module imports the names, as load_torch_trace above.
for _name in ("analyze_run_dir", "analyze_export", "analyze_job"):
    setattr(pipeline, _name, _analyzed_once(getattr(pipeline, _name)))


def pytest_configure(config: pytest.Config) -> None:
    """The controller (or the only process) makes the folder of what is made once per session; xdist workers,
    started after this, inherit it through the environment."""
    if not hasattr(config, "workerinput") and SHARED_ENV not in os.environ:
        os.environ[SHARED_ENV] = tempfile.mkdtemp(prefix="hybrid-test-shared-")
        config.add_cleanup(functools.partial(shutil.rmtree, os.environ[SHARED_ENV], ignore_errors=True))


@pytest.fixture(scope="module")
def analyzed_copy(tmp_path_factory) -> Callable[[Path], dict]:
    """analyze_run_dir on a scratch copy of a committed run directory, so the fixture stays as captured."""
    from hybrid.pipeline import analyze_run_dir

    def analyze(run: Path) -> dict:
        copy = tmp_path_factory.mktemp(run.name) / "run"
        shutil.copytree(run, copy)
        return analyze_run_dir(copy)

    return analyze


@pytest.fixture(scope="session", autouse=True)
def report_folders(tmp_path_factory) -> Path:
    """`hybrid report` run by a test (its working directory is the repository) makes its report folders
    here rather than in the repository's hybrid-reports/."""
    folder = tmp_path_factory.mktemp("hybrid-reports")
    os.environ["HYBRID_REPORTS_DIR"] = str(folder)
    return folder


# Test files that take longest, heaviest first (seconds each took in `make test` on the 2-core box,
# 2026-12-06: test_reliability 54, test_report_compare 38, test_cli 38, test_planted_fixtures 32,
# test_ledger 30 ...; the rest took under 11 s each). `make test` hands files to its two workers in
# collection order (--dist loadfile --no-loadscope-reorder), so these start first and the files left for
# the end take seconds: both workers finish together. xdist's own order (most tests first) started the
# few-test, subprocess-heavy files last. Files not named keep their order after these.
HEAVY_FIRST = (
    "test_reliability.py",
    "test_report_compare.py",
    "test_cli.py",
    "test_planted_fixtures.py",
    "test_ledger.py",
    "test_cost_windows.py",
    "test_hostile_io.py",
    "test_verify.py",
    "test_own_profiler.py",
    "test_inject.py",
    "test_one_cause.py",
    "test_run_config.py",
    "test_fuzz_readers.py",
    "test_step_detect.py",
    "test_report_reading.py",
    "test_outputs.py",
    "test_cli_report.py",
    "test_compare_cli.py",
    "test_models.py",
    "test_browser.py",
)
assert all((REPO / "tests" / name).is_file() for name in HEAVY_FIRST), "HEAVY_FIRST names a file that is gone"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(HEAVY_FIRST)}
    # A stable sort: each file's tests stay together and in their order.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
