"""Fixtures shared by test files, and one parse per torch trace per test process (see below)."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from collections.abc import Callable
from copy import deepcopy
from pathlib import Path

import pytest

from hybrid.load import torch_trace
from hybrid.profile import Profile

# The committed H200 captures are read by many test files (every-capture sweeps, ledger and rule checks, the
# planted suite in three modes): one test process parsed launch_per_sample_loss's 4.3 MB trace 8 times at
# 3.7 s of CPU each, where a fresh copy of the parsed Profile costs 0.05 s. A committed trace is parsed once
# per test process, keyed by its path as given (the warnings name it so) and the bytes of it and of the
# op_flops.json beside it; every call gets its own deep copy, so no test sees another's changes. Copies a
# test makes (and damages) are parsed every time, and subprocesses (the CLI, the injector) parse for
# themselves as a user's run does.
REPO = Path(__file__).resolve().parent.parent
COMMITTED = (REPO / "tests" / "fixtures", REPO / "examples")
_PARSED: dict[tuple[str, str], Profile] = {}


def _committed_trace_key(path: Path) -> tuple[str, str] | None:
    resolved = path.resolve()
    if not resolved.is_file() or not any(resolved.is_relative_to(root) for root in COMMITTED):
        return None
    digest = hashlib.blake2b(resolved.read_bytes())
    flops = resolved.with_name(torch_trace.OP_FLOPS_FILE)
    digest.update(flops.read_bytes() if flops.is_file() else b"")
    return str(path), digest.hexdigest()


def _parsed_once(load: Callable[[str | Path], Profile]) -> Callable[[str | Path], Profile]:
    @functools.wraps(load)
    def cached(path: str | Path) -> Profile:
        key = _committed_trace_key(Path(path))
        if key is None:
            return load(path)
        if key not in _PARSED:
            _PARSED[key] = load(path)
        return deepcopy(_PARSED[key])

    return cached


# Patched before any test module imports the name (conftest is imported first); the pipeline imports it at
# call time.
torch_trace.load_torch_trace = _parsed_once(torch_trace.load_torch_trace)


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
# 2026-12-02: test_cli 78, test_reliability 71, test_cost_windows 57, test_verify_history 53 (four `hybrid
# run`s one after another), test_distributed 48 ...; the rest took under 14 s each). `make test` hands files
# to its two workers in collection order (--dist loadfile --no-loadscope-reorder), so these start first and
# the files left for the end take seconds: both workers finish together. xdist's own order (most tests
# first) started these few-test, subprocess-heavy files last. Files not named keep their order after these.
HEAVY_FIRST = (
    "test_cli.py",
    "test_reliability.py",
    "test_cost_windows.py",
    "test_verify_history.py",
    "test_distributed.py",
    "test_model_reasons.py",
    "test_step_detect.py",
    "test_hostile_io.py",
    "test_verify.py",
    "test_run_config.py",
    "test_planted_scripts.py",
    "test_verify_compile.py",
    "test_report_compare.py",
    "test_planted_fixtures.py",
    "test_inject_robustness.py",
    "test_inject.py",
    "test_collectives.py",
    "test_calibration_pass.py",
    "test_outputs.py",
    "test_one_cause.py",
)
assert all((REPO / "tests" / name).is_file() for name in HEAVY_FIRST), "HEAVY_FIRST names a file that is gone"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(HEAVY_FIRST)}
    # A stable sort: each file's tests stay together and in their order.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
