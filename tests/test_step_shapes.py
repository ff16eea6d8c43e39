"""A step whose input shapes change every few steps (hybrid.analysis.step_shapes), on real captures.

tests/fixtures/unmarked_runs/hf_bert_classifier_loop is the Hugging Face course's plain-PyTorch BERT fine-tune
(benchmarks/strangers/hf_bert_classifier_loop.py) captured on an H100: its collate_fn tokenizes each batch and
pads it to its own longest sentence, so nearly every step runs a new sequence length. There, --verify's
torch.compile(mode='reduce-overhead') compiled and recorded graphs past the job's 240 s limit without a steady
window: graphs of the model come after padding to fixed sizes, and --verify does not time them as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.analysis.step_shapes import shapes_change_per_step
from hybrid.collect.verify import plan
from hybrid.pipeline import analyze_run_dir
from hybrid.rules.advice import config_of, observed_config
from hybrid.rundir import RunDir

FIXTURES = Path(__file__).parent / "fixtures"
BERT = FIXTURES / "unmarked_runs" / "hf_bert_classifier_loop" / "run"


@pytest.fixture(scope="module")
def bert() -> dict:
    return analyze_run_dir(BERT)


def _shape_sets(results: dict) -> tuple[int, int]:
    metrics = results["metrics"]
    return metrics["step_shape_signatures"]["value"], metrics["step_shape_steps"]["value"]


def _advice(results: dict, finding: str) -> list[dict]:
    return next(f for f in results["diagnosis"]["bottlenecks"] if f["id"] == finding)["advice"]


@pytest.mark.parametrize(
    ("capture", "changing"),
    [
        ("unmarked_runs/hf_bert_classifier_loop/run", True),  # padded to each batch's longest sentence
        ("unmarked_runs/sentence_transformers_encode/run", True),  # encode() pads each batch likewise
        ("unmarked_runs/hf_generate_gpt2/run", True),  # the dynamic KV cache grows every token
        ("unmarked_runs/torchaudio_frontend_train/run", False),  # one short last batch: two sets in 20 steps
        ("runs/h200-resnet50", False),
    ],
)
def test_steps_whose_shapes_change_are_told_from_steps_that_repeat(capture, changing):
    sets, steps = _shape_sets(analyze_run_dir(FIXTURES / capture))
    assert steps >= 5
    assert shapes_change_per_step(sets, steps) is changing
    if not changing:
        assert sets <= 2


def test_graphs_are_advised_after_padding_to_fixed_sizes(bert):
    sets, steps = _shape_sets(bert)
    first = _advice(bert, "launch.bound")[0]
    assert first["text"].startswith("Pad the step's inputs to a few fixed sizes")
    assert first["text"].endswith("torch.compile(model, mode='reduce-overhead')")
    assert f"{sets} different sets of input shapes in {steps} steps" in first["condition"]
    everything = [a["text"] for f in bert["diagnosis"]["bottlenecks"] for a in f["advice"]]
    assert "torch.compile(model, mode='reduce-overhead')" not in everything


def test_verify_does_not_time_graphs_of_changing_shapes(bert):
    config = config_of(RunDir(BERT).read_inject("torch") or {}, observed_config(bert["metrics"]))
    planned, skipped = plan(bert, 3, config)
    assert "compile_reduce_overhead" not in [p.switch.name for p in planned]
    reasons = [s["reason"] for s in skipped if s["finding"] == "launch.bound"]
    assert reasons and "different sets of input shapes" in reasons[0]


def test_a_loader_that_tokenizes_in_the_training_process_is_given_workers_first(bert):
    # 15.2 ms of the finding's 45.6 ms a step is spent in the DataLoader's fetch, whose collate_fn tokenizes.
    advice = _advice(bert, "cpu.preprocessing")
    assert advice[0]["text"].startswith("DataLoader(num_workers=")
    assert "fetching batches from the DataLoader in the training process" in advice[0]["condition"]
    assert advice[1]["text"].startswith("Tokenize ahead of the GPU")
