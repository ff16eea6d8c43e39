"""Callsites: findings point at the user's lines, from the nsys pass's Python samples and the torch
pass's operator stacks, on real captures and real injector runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.callsites import NO_SAMPLES_NOTE
from hybrid.pipeline import analyze_run_dir
from hybrid.torch_pass import load_torch_trace
from hybrid.torch_stacks import is_user_trace_file
from nsight.python_frames import first_user_frame, is_user_file

REPO = Path(__file__).resolve().parent.parent
PLANTED = REPO / "tests" / "fixtures" / "planted"
OPS_SCRIPT = REPO / "tests" / "scripts" / "callsite_ops.py"


def _marked_line(script: Path, marker: str) -> int:
    return next(number for number, text in enumerate(script.read_text().splitlines(), 1) if marker in text)


def test_user_files_are_not_the_library_the_interpreter_or_hybrid():
    assert is_user_file("/home/me/project/train.py")
    assert is_user_file("train.py")
    for library in ("/usr/lib/python3.12/runpy.py", "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/module.py",
                    "/usr/local/lib/python3.11/dist-packages/numpy/core/numeric.py", "<frozen runpy>", "<string>",
                    "/root/repo/hybrid/inject.py", "/root/repo/hybrid/stepping.py", ""):
        assert not is_user_file(library), library
    stack = [("/x/site-packages/torch/_tensor.py", 10, "item"), ("/x/train.py", 42, "<module>"),
             ("/x/hybrid/inject.py", 5, "main")]
    assert first_user_frame(stack) == ("/x/train.py", 42, "<module>")
    # The profiler writes paths relative to the sys.path entry they were found under.
    assert not is_user_trace_file("torch/nn/modules/module.py")
    assert not is_user_trace_file("enum.py")
    assert is_user_trace_file("train.py") and is_user_trace_file("/abs/train.py")


def test_a_capture_without_python_samples_says_so():
    results = analyze_run_dir(PLANTED / "sync_item_per_microstep" / "run")
    findings = results["diagnosis"]["bottlenecks"]
    assert findings and all(f["callsites"] == [] for f in findings)
    assert results["diagnosis"]["primary_bottleneck"]["callsites"] == []
    assert any(note.startswith(NO_SAMPLES_NOTE) for note in results["limitations"])


@pytest.fixture(scope="module")
def stacked_trace(tmp_path_factory) -> Path:
    """The torch pass with --python-stacks on a CPU loop (a real injector subprocess)."""
    out = tmp_path_factory.mktemp("torch")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "hybrid.inject", "--pass", "torch", "--python-stacks", "--out",
                           str(out), "--warmup", "1", "--steps", "3", "--", str(OPS_SCRIPT)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / "trace.json"


def test_torch_stacks_place_item_and_cpu_tensor_creation_on_their_lines(stacked_trace):
    calls = load_torch_trace(stacked_trace).op_callsites
    for op, marker in (("aten::item", "CALLSITE: item"), ("aten::randn", "CALLSITE: randn")):
        rows = calls[calls["op"] == op]
        assert len(rows) == 1, rows
        row = rows.iloc[0]
        assert Path(row["file"]).name == OPS_SCRIPT.name
        assert row["line"] == _marked_line(OPS_SCRIPT, marker)
        assert row["function"] == "<module>" and row["ns"] > 0


def test_a_trace_without_stacks_has_no_op_callsites():
    trace = PLANTED / "cpu_tensors_then_moved" / "run" / "torch" / "trace.json.gz"
    assert load_torch_trace(trace).op_callsites.empty
