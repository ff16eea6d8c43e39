"""Real `hybrid run`s of evaluation loops as torchvision users write them. The dataset applies an nn.Module
transform to each item (tests/scripts/eval_transform_module.py, as torchvision's Resize is applied in
FakeData's __getitem__): the transform's calls inside the DataLoader's fetch are not the step (a FakeData
eval loop was stepped on Resize.forward, a 2 ms "step" without the model). A script that ends before its
measured window does (tests/scripts/short_eval_loop.py) still has its DataLoader read for the advice: it was
freed when the script returned, and the advice said the script used no DataLoader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"

pytestmark = pytest.mark.slow


def _run(script: str, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", CUDA_VISIBLE_DEVICES="")
    argv = [sys.executable, "-m", "hybrid", "run", "--quiet", "--json", "-o", str(out), str(SCRIPTS / script)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=300)
    return done, json.loads(done.stdout) if done.returncode == 0 else {}


def test_the_step_is_the_scripts_loop_not_the_transform_in_the_fetch(tmp_path):
    done, results = _run("eval_transform_module.py", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    workload = results["workload"]
    assert workload["step_source"] == "script_loop"
    assert workload["step_unit"] == "one iteration of the loop at eval_transform_module.py:33"
    # A batch is 32 items of ~1 ms of transform each, then the model: the step is tens of ms, not one item's.
    assert results["timing"]["step_time_ms"] > 20
    primary = results["diagnosis"]["primary_bottleneck"]
    assert primary["id"] == "data.loader_in_step"


def test_a_script_that_ends_before_its_window_keeps_its_dataloader_for_the_advice(tmp_path):
    done, _results = _run("short_eval_loop.py", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    inject = json.loads((tmp_path / "run" / "torch" / "inject.json").read_text())
    assert inject["outcome"] == "completed" and inject["measured_steps"] < 20  # 24 batches, 20 asked for
    (loader,) = inject["config"]["data_loaders"]
    assert loader["num_workers"] == 0 and loader["dataset"] == "TensorDataset"
