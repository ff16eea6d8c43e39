"""Hugging Face generate() decoding with the dynamic KV cache (tests/fixtures/unmarked_runs/hf_generate_gpt2,
captured on the H200: each step is one GPT-2 forward, 17 per generate() call). CUDA graphs of the model
cannot hold a cache that grows every token: --verify's reduce-overhead run of the same script failed there
("self.keys = torch.cat([self.keys, key_states], dim=-2) ... To prevent overwriting",
benchmarks/results/s9_h200/verify.md). The advice is the static cache the graphs need, --verify does not
time graphs of the model, and an inference run is not told to scale a learning rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.collect.verify import plan
from hybrid.pipeline import analyze_run_dir
from hybrid.rules.advice import config_of, observed_config
from hybrid.rundir import RunDir

RUN = Path(__file__).parent / "fixtures" / "unmarked_runs" / "hf_generate_gpt2" / "run"


@pytest.fixture(scope="module")
def results() -> dict:
    return analyze_run_dir(RUN)


def _advice(results: dict, finding: str) -> list[str]:
    found = next(f for f in results["diagnosis"]["bottlenecks"] if f["id"] == finding)
    return [a["text"] for a in found["advice"]]


def test_the_step_is_read_as_a_forward_of_generate():
    config = config_of(RunDir(RUN).read_inject("torch") or {})
    assert config.stepped_call == "generate"
    assert config.decodes_with_dynamic_cache  # the capture predates config.generation: no static cache seen


def test_the_graph_advice_is_a_static_cache(results):
    texts = _advice(results, "launch.dispatch")
    assert texts[0].startswith("Decode with a static KV cache")
    # The capture predates config.generation's compiles_static_forward: generate() is taken to compile the
    # forward itself, as the transformers that made it does; compiling model.forward by hand as well
    # stopped generate() there (benchmarks/results/s12/hf_generate_static.md).
    assert "cache_implementation = 'static'" in texts[0] and "leave model.forward uncompiled" in texts[0]
    assert "torch.compile(model.forward" not in texts[0]
    # graphs of the whole model with the dynamic cache are not offered, in any finding
    everything = [t for f in results["diagnosis"]["bottlenecks"] for t in _advice(results, f["id"])]
    assert not any(t.startswith("torch.compile(model, mode='reduce-overhead')") for t in everything)


def test_an_inference_run_is_told_to_batch_prompts_not_to_scale_a_learning_rate(results):
    everything = [t for f in results["diagnosis"]["bottlenecks"] for t in _advice(results, f["id"])]
    assert not any("learning rate" in t for t in everything)
    assert any(t.startswith("Batch more prompts into each generate() call") for t in everything)


def test_verify_does_not_time_graphs_of_the_model(results):
    config = config_of(RunDir(RUN).read_inject("torch") or {}, observed_config(results["metrics"]))
    planned, skipped = plan(results, 3, config)
    assert "compile_reduce_overhead" not in [p.switch.name for p in planned]
    launch = next(s for s in skipped if s["finding"] == "launch.dispatch")
    assert "generate() with the dynamic KV cache" in launch["reason"]


def test_a_generate_that_does_not_compile_is_told_to_compile_the_forward(tmp_path):
    # The same capture, as a transformers whose generation config has no compile_config records it.
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("results*.json"))
    inject = json.loads((run / "torch" / "inject.json").read_text())
    inject.setdefault("config", {})["generation"] = {
        "models": [
            {"class": "GPT2LMHeadModel", "cache_implementation": None, "compiles_static_forward": False}
        ]
    }
    (run / "torch" / "inject.json").write_text(json.dumps(inject))
    texts = _advice(analyze_run_dir(run), "launch.dispatch")
    assert texts[0].startswith("Decode with a static KV cache and graph the forward")
    assert "torch.compile(model.forward, mode='reduce-overhead', fullgraph=True)" in texts[0]
