"""Advice for host work made in the step follows what this run's model reads (issue 24 item 2): token ids
through an embedding get tokenization advice, images through convolutions GPU transforms, and a model that
shows neither gets neither (sentence-transformers' encode() was told "torchvision.transforms.v2, DALI" for
its tokenizer). The operator names come from the committed H200 torch traces."""

from __future__ import annotations

import shutil
from pathlib import Path

from hybrid.load.torch_trace import load_torch_trace
from hybrid.pipeline import analyze_run_dir
from hybrid.rules.advice import batch_inputs, host_batch_work

FIXTURES = Path(__file__).parent / "fixtures"
IMAGE_TOOLS = ("transforms.v2", "DALI")


def _op_names(run: Path) -> frozenset[str]:
    trace = next((run / "torch").glob("trace.json*"))
    return frozenset(load_torch_trace(trace).ops["name"].astype(str))


def test_the_operators_tell_token_ids_from_images():
    assert batch_inputs(_op_names(FIXTURES / "runs" / "h200-hf-trainer-bf16")) == {
        "token ids": ("aten::embedding",)
    }
    assert set(batch_inputs(_op_names(FIXTURES / "runs" / "h200-resnet50-default"))) == {"images"}
    assert batch_inputs(_op_names(FIXTURES / "planted" / "sync_item_per_microstep" / "run")) == {}


def test_a_text_model_is_told_to_tokenize_ahead_not_to_use_image_transforms():
    """GPT-2 under the Trainer reads token ids through aten::embedding."""
    advice = host_batch_work(_op_names(FIXTURES / "runs" / "h200-hf-trainer-bf16"), condition="the GPU waits")
    texts = " ".join(s.text for s in advice)
    assert "tokenize" in texts.lower() and "tokenizer(texts" in texts
    assert not any(tool in texts for tool in IMAGE_TOOLS)
    assert advice[0].applies_to == ("aten::embedding",) and "aten::embedding" in advice[0].condition


def _preprocessing(run: Path, tmp_path: Path) -> dict:
    copy = tmp_path / run.parent.name
    shutil.copytree(run, copy)
    findings = analyze_run_dir(copy)["diagnosis"]["bottlenecks"]
    return next(f for f in findings if f["id"] == "cpu.preprocessing")


def test_image_advice_only_where_the_model_reads_images(tmp_path):
    """cpu_numpy_augment's CNN reads the numpy-augmented images through convolutions: GPU transforms, with
    the operators that show it; sync_item_per_microstep's MLP samples indices on the host and reads features
    through Linear layers: no image tool is named, a change to its per-batch work is."""
    images = _preprocessing(FIXTURES / "planted" / "cpu_numpy_augment" / "run", tmp_path)
    image_advice = [a for a in images["advice"] if "transforms.v2" in a["text"]]
    assert len(image_advice) == 1 and "aten::convolution" in image_advice[0]["condition"]
    assert not any("tokeniz" in a["text"].lower() for a in images["advice"])
    sampled = _preprocessing(FIXTURES / "planted" / "sync_item_per_microstep" / "run", tmp_path)
    texts = " ".join(a["text"] for a in sampled["advice"])
    assert not any(tool in texts for tool in IMAGE_TOOLS) and "tokeniz" not in texts.lower()
    assert any(not a.get("locates_code") for a in sampled["advice"])
