"""The whole pipeline on a real GPU with nsys and ncu (run on the device: pytest -m gpu)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hybrid_cli import hybrid_env

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 1024, device="cuda")
for _ in range(100):
    opt.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    opt.step()
"""


@pytest.mark.gpu
def test_hybrid_mode_measures_timeline_and_counters(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(WORKLOAD)
    out = tmp_path / "run"
    env = hybrid_env()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybrid",
            "run",
            "--mode",
            "hybrid",
            "--steps",
            "5",
            "--warmup",
            "3",
            "--nvtx-modules",
            "--out",
            str(out),
            "--json",
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert results["mode"] == "hybrid"
    assert results["workload"]["steps_measured"] == 5
    assert (out / "nsys" / "profile.sqlite").is_file() and (out / "ncu" / "counters.csv").is_file()
    assert results["device"]["name"].startswith("NVIDIA")
    sources = {m["source"] for m in results["metrics"].values()}
    assert {"measured:nsys", "measured:ncu"} <= sources
    assert results["timing"]["gpu_busy_ms"] > 0
    assert [p["status"] for p in results["passes"]] == ["ok", "ok", "ok"]
