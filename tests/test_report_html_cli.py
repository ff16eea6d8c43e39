"""`hybrid report DIR --html` on a real H200 run directory whose command names the script by an absolute
path, as `hybrid run /home/me/train.py` records it: report.html keeps the file name and drops the
directories of the user's machine unless --include-paths."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"


def _report_html(run_dir: Path, *options: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "hybrid", "report", str(run_dir), "--html", "--out", str(run_dir), *options],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return (run_dir / "report.html").read_text()


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """The torch pass of the H200 run (the fastest to re-analyze), its command an absolute script path."""
    run = tmp_path / "home" / "alice" / "runs" / "cnn"
    shutil.copytree(SOURCE_RUN / "torch", run / "torch")
    run_json = json.loads((SOURCE_RUN / "run.json").read_text())
    run_json["command"] = f"{tmp_path}/home/alice/project/train_cnn.py --batch-size 64"
    (run / "run.json").write_text(json.dumps(run_json))
    return run


def test_report_html_leaves_machine_paths_out(run_dir, tmp_path):
    page = _report_html(run_dir)
    assert str(tmp_path) not in page and "alice" not in page
    assert ".../train_cnn.py --batch-size 64" in page


def test_include_paths_keeps_them(run_dir, tmp_path):
    page = _report_html(run_dir, "--include-paths")
    assert f"{tmp_path}/home/alice/project/train_cnn.py --batch-size 64" in page
