"""A step whose input shapes change every few steps (hybrid.analysis.step_shapes), on real captures.

tests/fixtures/unmarked_runs/hf_bert_classifier_loop is the Hugging Face course's plain-PyTorch BERT fine-tune
(benchmarks/strangers/hf_bert_classifier_loop.py) captured on an H100: its collate_fn tokenizes each batch and
pads it to its own longest sentence, so nearly every step runs a new sequence length. There, --verify's
torch.compile(mode='reduce-overhead') compiled and recorded graphs past the job's 240 s limit without a steady
window: graphs of the model come after padding to fixed sizes, and --verify does not time them as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.analysis.step_shapes import padding_buckets, shapes_change_per_step
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


@pytest.mark.parametrize(
    ("capture", "varying", "sizes", "padded"),
    [
        # A batch of token ids padded to its longest sentence: the batch's length takes a new size most steps.
        (
            "unmarked_runs/hf_bert_classifier_loop/run",
            "aten::to [32, L]",
            (11, 182, 201),
            (8, [184, 192, 200, 208]),
        ),
        (
            "unmarked_runs/sentence_transformers_encode/run",
            "aten::to [64, L]",
            (9, 109, 117),
            (8, [112, 120]),
        ),
        # generate() grows its input by one token a step (its advice is the static KV cache).
        ("unmarked_runs/hf_generate_gpt2/run", "aten::slice [1, L]", (10, 22, 31), (8, [24, 32])),
        ("unmarked_runs/torchaudio_frontend_train/run", None, None, None),  # the same inputs but a last batch
        ("runs/h200-resnet50", None, None, None),
    ],
)
def test_the_input_whose_size_changes_is_named_with_the_sizes_padding_leaves(capture, varying, sizes, padded):
    metrics = analyze_run_dir(FIXTURES / capture)["metrics"]
    if varying is None:
        assert "step_varying_input" not in metrics
        return
    assert metrics["step_varying_input"]["value"] == varying
    taken = [int(size) for size in metrics["step_varying_sizes"]["value"].split(", ")]
    assert (len(taken), taken[0], taken[-1]) == sizes
    assert padding_buckets(taken) == padded


def test_padding_takes_the_smallest_multiple_that_leaves_a_few_sizes():
    # Every length from 70 to 330: a multiple of 8 leaves 33 sizes, of 64 five, of 128 three.
    assert padding_buckets(list(range(70, 331))) == (128, [128, 256, 384])
    # Sizes already few: the multiple leaves fewer of them.
    assert padding_buckets([16, 24, 32]) == (16, [16, 32])


def test_graphs_are_advised_after_padding_to_fixed_sizes(bert):
    sets, steps = _shape_sets(bert)
    first = _advice(bert, "launch.bound")[0]
    # The batch's token ids took 11 lengths from 182 to 201: a multiple of 8 leaves four.
    assert first["text"] == (
        "Pad the step's inputs to a multiple of 8 so the step repeats its shapes (4 sizes: 184, 192, 200, "
        "208), then torch.compile(model, mode='reduce-overhead')"
    )
    assert f"{sets} different sets of input shapes in {steps} steps" in first["condition"]
    assert "aten::to [32, L] took 11 sizes of L, 182 to 201" in first["condition"]
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
    assert host[0]["text"] == (
        "Pad the step's inputs to a multiple of 8 so the work each new size costs runs once per size "
        "(4 sizes: 184, 192, 200, 208); tokenizer(..., pad_to_multiple_of=8)"
    )
    assert "21.6 ms of it on the steps that ran new input shapes" in host[0]["condition"]
    assert "ScaledDotProductCudnnAttentionBackward0" in host[0]["condition"]
    jitter = next(f for f in bert["diagnosis"]["bottlenecks"] if f["id"] == "steps.jitter")
    assert "cpu.preprocessing" in jitter["alternative_to"]
    assert jitter["advice"][0]["text"] == host[0]["text"]
