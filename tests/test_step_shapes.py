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


def test_host_work_that_grows_on_new_shapes_is_one_cause_with_the_step_time_variation(bert):
    # The slow steps (5 of 18) spend +93 ms of their +122 ms in host work without launches, in cuDNN
    # attention's forward and backward on sequence lengths no typical step ran: 21.6 of the host finding's
    # 45.6 ms a step. Padding leads its advice, and the variation is that finding's time, not a second cause.
    host = _advice(bert, "cpu.preprocessing")
    assert host[0]["text"].startswith("Give those ops the same inputs every step: pad or bucket")
    assert "21.6 ms of it on the steps that ran new input shapes" in host[0]["condition"]
    assert "ScaledDotProductCudnnAttentionBackward0" in host[0]["condition"]
    jitter = next(f for f in bert["diagnosis"]["bottlenecks"] if f["id"] == "steps.jitter")
    assert "cpu.preprocessing" in jitter["alternative_to"]
    assert jitter["advice"][0]["text"] == host[0]["text"]
