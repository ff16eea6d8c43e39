"""Fixtures shared by test files."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


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
