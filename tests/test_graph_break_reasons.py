"""Graph-break reasons as dynamo wrote them in real runs: the planted graph_breaks capture (H200, torch 2.11:
`.item()` in compiled blocks) and the HF Trainer's verify-compile pass (transformers' logger calls)."""

from __future__ import annotations

import json
from pathlib import Path

from hybrid.analysis.graph_breaks import graph_break_metrics, reason_and_hints

FIXTURES = Path(__file__).parent / "fixtures"
PLANTED = FIXTURES / "planted" / "graph_breaks" / "run"
TRAINER = FIXTURES / "verify" / "hf_trainer_tf32_paired" / "run" / "verify-compile"


def _breaks(pass_dir: Path) -> list[dict]:
    return json.loads((pass_dir / "inject.json").read_text())["graph_breaks"]


def test_a_reason_is_its_first_line_and_dynamos_hints_are_kept_apart():
    reason, hints = reason_and_hints(_breaks(PLANTED / "torch")[0]["reason"])
    assert reason == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    hint = (
        "Set `torch._dynamo.config.capture_scalar_outputs = True` or `export "
        "TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1` to include these operations in the captured graph."
    )
    assert hints == [hint]
    metrics = {name: m.value for name, m in graph_break_metrics(_breaks(TRAINER)).items()}
    assert metrics["graph_break_reasons"] == "logging.Logger method not supported for non-export cases (x2)"
    assert "ignore_logging_functions" in metrics["graph_break_hints"]
    assert all("\n" not in str(value) for value in metrics.values())


def test_the_advice_is_the_recorded_reason_and_hint_not_how_to_list_them(analyzed_copy):
    doc = analyzed_copy(PLANTED)
    finding = next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == "compile.graph_breaks")
    (advice,) = finding["advice"]
    assert advice["text"].startswith(
        "Remove what breaks the graph: Unsupported Tensor.item() call with capture_scalar_outputs=False (x3)"
    )
    assert "keep the value as a device tensor" in advice["text"]
    assert "dynamo's own hint: Set `torch._dynamo.config.capture_scalar_outputs = True`" in advice["text"]
    assert not any(
        "TORCH_LOGS=graph_breaks" in text
        for f in doc["diagnosis"]["bottlenecks"]
        for text in f["suggestions"]
    )


def test_one_change_for_every_finding_the_breaks_cause(analyzed_copy):
    """The framework-dispatch finding's pieces (one CompiledFunctionBackward node a piece) come from the same
    breaks: it advises the same change in the same words, so What to change first says it once for both."""
    from hybrid.report.terminal import render_terminal

    doc = analyzed_copy(PLANTED)
    first = {f["id"]: f["suggestions"][0] for f in doc["diagnosis"]["bottlenecks"] if f["suggestions"]}
    host = next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == "cpu.preprocessing")
    same = [a for a in host["advice"] if a["text"].startswith("Remove what breaks the graph")]
    assert len(same) == 1 and "CompiledFunctionBackward ×8" in same[0]["condition"]
    text = " ".join(render_terminal(doc, verbose=False, color=False).split())
    changes = text.split("What to change first")[1]
    assert changes.count("Remove what breaks the graph") == 1
    assert first["compile.graph_breaks"].startswith("Remove what breaks the graph")
