"""The library code a callsite's time went to (`inside`), on real captures: a Hugging Face Trainer's
every finding sits at its `.train()` line (hf_trainer_fp32, H200), resnet50's at the model zoo's own lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.report.common import through_text
from hybrid.report.html_report import render_html
from hybrid.report.terminal import render_terminal

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def trainer(analyzed_copy) -> dict:
    return analyzed_copy(FIXTURES / "precision" / "hf_trainer_fp32" / "run")


def _top(doc: dict, finding_id: str) -> dict:
    finding = next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == finding_id)
    return finding["callsites"][0]


def test_a_trainer_line_says_which_library_code_its_time_went_to(trainer):
    # FP32 GEMMs: most of their time is the backward accelerate runs for the Trainer.
    gemms = _top(trainer, "tensor.fp32_gemm")
    assert gemms["file"] == "hf_trainer_gpt2.py"
    assert gemms["inside"][0]["site"] == "accelerate/accelerator.py:2861 backward"
    # The per-step sync: Trainer's own epoch loop.
    assert _top(trainer, "sync.per_step")["inside"][0]["site"].startswith("transformers/trainer.py:")
    for finding in trainer["diagnosis"]["bottlenecks"]:
        for site in finding.get("callsites") or []:
            shares = [part["share_pct"] for part in site.get("inside") or []]
            assert shares == sorted(shares, reverse=True)
            assert sum(shares) <= site["share_pct"] + 0.5  # a part of the line's share, rounded


def test_the_renderers_say_it_under_the_line(trainer):
    through = through_text(_top(trainer, "tensor.fp32_gemm"))
    assert through.startswith("through accelerate/accelerator.py:2861 backward (")
    terminal = render_terminal(trainer, verbose=True, color=False)
    assert through.split(",")[0] in " ".join(terminal.split())
    assert through.split(",")[0] in render_html(trainer)


def test_a_line_that_makes_its_own_calls_names_no_library(analyzed_copy):
    """The planted pageable-copy script calls torch itself: no library between its lines and the calls."""
    doc = analyzed_copy(FIXTURES / "callsites" / "planted" / "data_pageable_h2d" / "run")
    sites = [site for f in doc["diagnosis"]["bottlenecks"] for site in f.get("callsites") or []]
    assert sites and all("inside" not in site and through_text(site) is None for site in sites)


def test_a_model_zoo_call_goes_through_the_zoos_code(analyzed_copy):
    """resnet50's step calls torchvision's ResNet: the dispatch finding's line `model(x)` goes through its
    forward, `loss.backward()` through no library."""
    doc = analyzed_copy(FIXTURES / "runs" / "h200-resnet50-default")
    dispatch = next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == "launch.dispatch")
    forward = next(site for site in dispatch["callsites"] if site.get("inside"))
    assert all(part["site"].startswith("torchvision/models/resnet.py:") for part in forward["inside"])
    assert "inside" not in dispatch["callsites"][0]  # hybrid/models.py:263, loss.backward()


def test_inductors_output_code_is_no_users_line(analyzed_copy):
    """compiled_train_mlp (H200) ran Inductor's output code from the run's compile cache
    (.../compile-cache/inductor/ce/ccem2ox7...py): its `call` had taken 6.8% of the CPU-heavy ops as a user
    line; the script's line that called the compiled model has it."""
    doc = analyzed_copy(FIXTURES / "unmarked_runs" / "compiled_train_mlp" / "run")
    sites = [site for f in doc["diagnosis"]["bottlenecks"] for site in f.get("callsites") or []]
    assert sites and {site["file"] for site in sites} == {"compiled_train_mlp.py"}
