"""Suggestions against run configurations, table-driven, on real H200 captures: each case runs one rule on a
capture's measured context with a recorded `config` (as hybrid.inject.run_config writes it) and checks what is
and
is not suggested. A setting already on is never suggested; a framework's own switch replaces torch's."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import pytest

from hybrid.analysis.analyze import _rule_peaks
from hybrid.analysis.roofline import roofline
from hybrid.pipeline import load_run_dir, merged_profile
from hybrid.rules import engine
from hybrid.rules.advice import config_of, observed_config
from hybrid.rules.base import Context
from hybrid.rules.registry import RULES

FIXTURES = Path(__file__).parent / "fixtures"
BY_ID = {rule.id: rule for rule in RULES}


@cache
def _context(capture: str) -> Context:
    from hybrid.analysis.analyze import analyze

    profile, _ = merged_profile(*load_run_dir(FIXTURES / capture))
    analyzed = analyze(profile).analyzed  # the metrics with the ledger's idle causes, as the rules see them
    peaks, metrics = analyzed.peaks, analyzed.metrics
    return Context(
        metrics=metrics,
        pools=analyzed.ledger.ms_per_step(),
        roofline=roofline(profile, peaks),
        peaks=_rule_peaks(peaks),
        has_counters=not profile.counters.empty,
        op_names=frozenset(profile.ops["name"].astype(str)),
    )


def _with(capture: str, config: dict | None, pass_status: dict | None = None) -> Context:
    ctx = _context(capture)
    extras = {"config": copy.deepcopy(config)} if config is not None else {}
    return replace(ctx, config=config_of(extras, observed_config(ctx.metrics)), pass_status=pass_status or {})


def _config(**sections) -> dict:
    """A recorded configuration with nothing switched on, plus the given sections."""
    base = {
        "precision": {"tf32_matmul": False, "tf32_conv": False},
        "autocast": {"observed": True, "regions": [], "enabled": False, "dtypes": []},
        "compile": {"used": False, "modes": [], "observed": True},
        "optimizers": [
            {
                "class": "SGD",
                "fused": None,
                "foreach": None,
                "supports_fused": True,
                "foreach_effective": True,
            }
        ],
        "data_loaders": [],
        "distributed": {"initialized": False, "ddp": [], "fsdp": []},
        "channels_last": {"used": False},
        "cuda_graphs": {"graphs": 0},
        "framework": {"name": None},
    }
    return {**base, **sections}


HF = {
    "name": "transformers",
    "trainer": "Trainer",
    "training_arguments": {
        "tf32": None,
        "bf16": False,
        "fp16": False,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": True,
        "dataloader_persistent_workers": False,
    },
}
RESNET_FP32 = "runs/h200-resnet50"  # TF32 off: every conv and the fc GEMM in FP32 (ncu-measured)
GELU = "planted/roofline_unfused_gelu/run"  # an 8-kernel elementwise chain a step
MLP = "planted/graph_unfused_small_ops/run"  # 200 tiny kernels a step, launch-bound
NUMPY = "planted/cpu_numpy_augment/run"  # host augmentation, a host->device copy of the batch each step
SIMPLE_CNN = "runs/h200-simple_cnn"  # batches made on the GPU: no host data, no numpy, no DataLoader
# HF Trainer GPT-2 fp32 (session 3): 5.9 ms of host gap a step, its 2 copies the batch's input_ids and labels
HF_FP32 = "precision/hf_trainer_fp32/run"
LOADER = "planted/data_loader_workers0/run"  # DataLoader(num_workers=0)
PAGEABLE = "planted/data_pageable_h2d/run"
# A compiled model with AdamW (foreach): its host-only time is autograd's nodes (AccumulateGrad x32 a step)
# and the optimizer's step counts on the CPU (aten::item x64, aten::_foreach_add_), as in compiled training
GRAPH_BREAKS = "planted/graph_breaks/run"


@dataclass
class Case:
    name: str
    capture: str
    rule: str
    config: dict | None
    says: tuple[str, ...] = ()  # each must appear in some suggestion
    never: tuple[str, ...] = ()  # none may appear in any suggestion
    pass_status: dict = field(default_factory=dict)


CASES = [
    Case(
        "tf32 off: torch's flags, for the families that ran FP32",
        RESNET_FP32,
        "tensor.fp32_gemm",
        _config(),
        says=(
            "torch.backends.cuda.matmul.allow_tf32 = True",
            "torch.backends.cudnn.allow_tf32 = True",
            "TF32 is off in this run",
            "torch.autocast('cuda', dtype=torch.bfloat16)",
        ),
        never=("TrainingArguments",),
    ),
    Case(
        "tf32 already on: never suggested again; why it did not apply instead",
        RESNET_FP32,
        "tensor.fp32_gemm",
        _config(precision={"tf32_matmul": True, "tf32_conv": True}),
        says=("Find why these kernels stayed FP32",),
        never=("allow_tf32 = True", "set_float32_matmul_precision"),
    ),
    Case(
        "HF Trainer: its own switches",
        RESNET_FP32,
        "tensor.fp32_gemm",
        _config(framework=HF),
        says=("TrainingArguments(tf32=True)", "TrainingArguments(bf16=True)"),
        never=("torch.backends", "torch.autocast("),
    ),
    Case(
        "Lightning: Trainer(precision='bf16-mixed')",
        RESNET_FP32,
        "tensor.fp32_gemm",
        _config(framework={"name": "lightning", "precision": "32-true", "strategy": "SingleDeviceStrategy"}),
        says=("Trainer(precision='bf16-mixed')", "before Trainer.fit"),
        never=("torch.autocast(",),
    ),
    Case(
        "autocast already on: no autocast advice, the ops outside it named",
        RESNET_FP32,
        "tensor.fp32_gemm",
        _config(autocast={"observed": True, "enabled": True, "dtypes": ["bfloat16"], "regions": []}),
        says=("inside the autocast region",),
        never=("Train with mixed precision",),
    ),
    Case(
        "no config recorded: says so",
        RESNET_FP32,
        "tensor.fp32_gemm",
        None,
        says=("the run's TF32 flags were not recorded",),
    ),
    Case(
        "eager model: torch.compile",
        GELU,
        "compile.fusible_elementwise",
        _config(),
        says=("torch.compile(model)", "the model runs eager; compiling would fuse these kernels"),
    ),
    Case(
        "compiled model: never torch.compile again",
        GELU,
        "compile.fusible_elementwise",
        _config(compile={"used": True, "modes": ["default"], "observed": True}),
        says=("outside the compiled regions",),
        never=("torch.compile(model)",),
    ),
    Case(
        "SGD user: SGD(fused=True), never AdamW",
        GELU,
        "compile.fusible_elementwise",
        _config(),
        says=("torch.optim.SGD(..., fused=True)",),
        never=("AdamW",),
    ),
    Case(
        "fused optimizer already: not suggested",
        GELU,
        "compile.fusible_elementwise",
        _config(optimizers=[{"class": "AdamW", "fused": True, "supports_fused": True}]),
        never=("fused=True",),
    ),
    Case(
        "launch-bound eager: CUDA graphs via reduce-overhead",
        MLP,
        "launch.bound",
        _config(),
        says=("torch.compile(model, mode='reduce-overhead')",),
    ),
    Case(
        "launch-bound, gradients clipped one by one: foreach clipping, before the CUDA graphs",
        MLP,
        "launch.bound",
        _config(grad_clipping=[{"foreach": False, "calls": 30, "tensors": 32}]),
        says=(
            "clip_grad_norm_(..., foreach=True)",
            "clip_grad_norm_ ran with foreach=False over 32 gradients",
            "64 launches a call",
        ),
    ),
    Case(
        "launch-bound, clipping with foreach left to torch: nothing to say about it",
        MLP,
        "launch.bound",
        _config(grad_clipping=[{"foreach": None, "calls": 30, "tensors": 32}]),
        never=("clip_grad_norm_",),
    ),
    Case(
        "launch-bound, compiled with reduce-overhead: not again",
        MLP,
        "launch.bound",
        _config(
            compile={"used": True, "modes": ["reduce-overhead"], "observed": True}, cuda_graphs={"graphs": 3}
        ),
        never=("reduce-overhead", "torch.compile(model)"),
        says=("Increase the batch size",),
    ),
    Case(
        "HF launch-bound: TrainingArguments(torch_compile=True)",
        MLP,
        "launch.bound",
        _config(framework=HF),
        says=("TrainingArguments(torch_compile=True",),
        never=("torch.compile(model",),
    ),
    Case(
        "host images each step (a CNN reads them): move the image work to the GPU, build a DataLoader",
        NUMPY,
        "cpu.preprocessing",
        _config(),
        says=(
            "per-batch image work",
            "through aten::_convolution",
            "torch.utils.data.DataLoader",
            "the script uses no DataLoader",
        ),
    ),
    Case(
        "HF Trainer: its two batch copies are no host preprocessing; find the host code",
        HF_FP32,
        "cpu.preprocessing",
        _config(framework=HF, data_loaders=[{"num_workers": 0, "pin_memory": True}]),
        says=("py-spy",),
        never=("per-batch image work", "numpy or Python loops", "dataloader_num_workers"),
    ),
    Case(
        "no host data: no numpy, no DataLoader advice",
        SIMPLE_CNN,
        "cpu.preprocessing",
        _config(),
        # Its SGD step runs no host-only op (foreach launches kernels): no fused optimizer for this time.
        says=("the framework's own dispatch", "torch.cuda.graph around forward", "AccumulateGrad ×11"),
        never=("numpy", "DataLoader", "py-spy", "fused=True"),
    ),
    Case(
        "the same host time in a compiled model with CUDA graphs: nothing to turn on",
        SIMPLE_CNN,
        "cpu.preprocessing",
        _config(
            compile={"used": True, "modes": ["reduce-overhead"], "observed": True}, cuda_graphs={"graphs": 3}
        ),
        says=("TORCH_LOGS=graph_breaks,cudagraphs",),
        never=("torch.compile", "py-spy"),
    ),
    Case(
        "compiled (default mode), AdamW: the optimizer fused, the graph breaks removed, the rest captured",
        GRAPH_BREAKS,
        "cpu.preprocessing",
        _config(
            compile={"used": True, "modes": ["default"], "observed": True},
            optimizers=[{"class": "AdamW", "fused": None, "supports_fused": True, "foreach_effective": True}],
        ),
        says=(
            "torch.optim.AdamW(..., fused=True)",
            "Optimizer.step#AdamW.step runs aten::item ×64",
            "Remove what breaks the graph",
            "AccumulateGrad ×32",
            "torch.cuda.graph around forward",
        ),
        # Graphs of the compiled model alone leave AccumulateGrad and the optimizer eager; compiled autograd
        # made a compiled AdamW MLP slower on the H200 (6.54 -> 8.93-9.82 ms a step).
        never=(
            "compiled_autograd",
            "mode='reduce-overhead'",
            "torch.compile(model) to",
            "py-spy",
            "numpy",
            "Take that host work off",
        ),
    ),
    Case(
        "under a Trainer, which runs the step itself: no hand-made capture of the whole step",
        SIMPLE_CNN,
        "cpu.preprocessing",
        _config(framework=HF),
        says=("TrainingArguments(torch_compile=True)", "AccumulateGrad ×11"),
        never=("torch.cuda.graph around forward",),
    ),
    Case(
        "the optimizer already fused: not suggested again for its host time",
        GRAPH_BREAKS,
        "cpu.preprocessing",
        _config(
            compile={"used": True, "modes": ["default"], "observed": True},
            optimizers=[
                {"class": "AdamW", "fused": True, "supports_fused": True, "foreach_effective": False}
            ],
        ),
        says=("Remove what breaks the graph", "torch.cuda.graph around forward"),
        never=("fused=True", "foreach=True", "compiled_autograd"),
    ),
    Case(
        "an optimizer without a fused implementation, foreach off: foreach=True",
        GRAPH_BREAKS,
        "cpu.preprocessing",
        _config(
            compile={"used": True, "modes": ["default"], "observed": True},
            optimizers=[
                {
                    "class": "RMSprop",
                    "fused": None,
                    "foreach": False,
                    "supports_fused": False,
                    "foreach_effective": False,
                }
            ],
        ),
        says=("RMSprop(..., foreach=True)", "Optimizer.step#AdamW.step runs aten::item"),
        never=("fused=True",),
    ),
    Case(
        "fused AdamW under reduce-overhead: neither again, what the graphs leave out",
        SIMPLE_CNN,
        "cpu.preprocessing",
        _config(
            compile={"used": True, "modes": ["reduce-overhead"], "observed": True},
            cuda_graphs={"graphs": 2},
            optimizers=[{"class": "AdamW", "fused": True, "supports_fused": True}],
        ),
        says=("capturable=True",),
        never=("fused=True", "mode='reduce-overhead'", "py-spy"),
    ),
    Case(
        "workers=0 loader: workers, persistent, pinned",
        LOADER,
        "data.loader_stall",
        _config(data_loaders=[{"num_workers": 0, "pin_memory": False, "persistent_workers": False}]),
        says=("num_workers=N>0", "pin_memory=True"),
    ),
    Case(
        "HF loader stall: TrainingArguments(dataloader_num_workers=...)",
        LOADER,
        "data.loader_stall",
        _config(framework=HF),
        says=("TrainingArguments(dataloader_num_workers=4",),
        never=("DataLoader(num",),
    ),
    Case(
        "loader already pinned: pinning not suggested for it",
        PAGEABLE,
        "copy.pageable",
        _config(data_loaders=[{"num_workers": 4, "pin_memory": True, "persistent_workers": True}]),
        says=("the DataLoaders already pin their batches",),
        never=("DataLoader(..., pin_memory=True)",),
    ),
    Case(
        "ncu ran: no `--mode hybrid`",
        "planted/healthy_bf16_gemm/run",
        "tensor.pipe_idle",
        None,
        pass_status={"torch": "ok", "nsys": "ok", "ncu": "ok"},
        never=("--mode hybrid",),
        says=("the ncu pass ran",),
    ),
    Case(
        "no ncu pass: --mode hybrid",
        "planted/healthy_bf16_gemm/run",
        "tensor.pipe_idle",
        None,
        pass_status={"torch": "ok", "nsys": "ok"},
        says=("--mode hybrid",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_suggestions_follow_the_configuration(case):
    finding = engine.evaluate(BY_ID[case.rule], _with(case.capture, case.config, case.pass_status))
    assert finding is not None, f"{case.rule} did not fire on {case.capture}"
    text = " | ".join(finding.suggestions)
    for wanted in case.says:
        assert wanted in text, wanted
    for unwanted in case.never:
        assert unwanted not in text, unwanted
    # Every suggestion states the condition that triggered it.
    assert finding.advice and all(a["condition"] for a in finding.advice)
    assert len(finding.advice) == len(finding.suggestions)


@cache
def _h200(name: str) -> dict:
    from hybrid.pipeline import analyze_run_dir

    return analyze_run_dir(FIXTURES / "precision" / name / "run")


def _suggestions(doc: dict) -> str:
    return " | ".join(s for f in doc["diagnosis"]["bottlenecks"] for s in f["suggestions"])


def test_resnet50_at_pytorchs_default_precision_on_the_h200():
    """`hybrid diagnose --model resnet50` (call C): PyTorch's defaults recorded (cuDNN TF32 on, fp32 matmul at
    highest), every convolution measured TF32, nothing advises TF32; SGD is told SGD(fused=True); nsys slowed
    the step 31% over the default plain pass, which the headline says."""
    doc = _h200("resnet50_default")
    precision = doc["config"]["precision"]
    assert precision["tf32_conv"] is True and precision["tf32_matmul"] is False
    assert precision["float32_matmul_precision"] == "highest"
    assert (
        doc["metrics"]["gemm_tf32_conv_ms"]["value"] > 0 and doc["metrics"]["gemm_fp32_conv_ms"]["value"] == 0
    )
    text = _suggestions(doc)
    assert "allow_tf32" not in text and "set_float32_matmul_precision" not in text
    assert "torch.optim.SGD(..., fused=True)" in text and "AdamW" not in text
    assert [p["name"] for p in doc["passes"]][:2] == ["torch", "plain"]
    assert doc["timing"]["weighed_at_plain_step"] is True and doc["timing"]["collector_overhead_pct"] > 10


def test_hf_trainer_in_fp32_is_told_its_trainers_switches():
    """HF Trainer, GPT-2 in fp32 (call C): the FP32 GEMMs (measured) get TrainingArguments(tf32=True) and
    bf16=True, never torch's flags; compile advice is the Trainer's torch_compile."""
    doc = _h200("hf_trainer_fp32")
    assert doc["config"]["framework"]["name"] == "transformers"
    fp32 = next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == "tensor.fp32_gemm")
    assert fp32["severity"] == "CRITICAL"
    text = _suggestions(doc)
    assert "TrainingArguments(tf32=True)" in text and "TrainingArguments(bf16=True)" in text
    for torch_switch in ("torch.backends", "torch.autocast(", "torch.compile(model"):
        assert torch_switch not in text


def test_clipping_one_by_one_leads_where_its_launches_are_a_tenth_of_the_step():
    """graph_unfused_small_ops launches about 200 kernels a step: 32 gradients clipped one by one (64
    launches) lead the launch advice; 4 (8 launches) follow the CUDA graphs."""
    texts = {}
    for gradients in (32, 4):
        config = _config(grad_clipping=[{"foreach": False, "calls": 30, "tensors": gradients}])
        finding = engine.evaluate(BY_ID["launch.bound"], _with(MLP, config))
        texts[gradients] = finding.suggestions
    assert texts[32][0].startswith("torch.nn.utils.clip_grad_norm_(..., foreach=True)")
    assert not texts[4][0].startswith("torch.nn.utils.clip_grad_norm_")
    assert any(t.startswith("torch.nn.utils.clip_grad_norm_(..., foreach=True)") for t in texts[4])


def test_a_collector_pause_far_shorter_than_a_slow_steps_extra_is_not_what_slows_it():
    """sentence-transformers' encode loop on the H100 (benchmarks/results/s27_h100): Python's collector ran
    0.35 times a step for 0.059 ms (longest 0.21 ms), a quarter of the steps' 0.21 ms mean over median, but
    its slow steps added 3.81 ms each, sampled in tokenization: gc.freeze() could not be what helps. The
    same collector with a pause as long as the slow steps' extra is still advised."""
    from hybrid.rules.advice import freeze_gc

    measured = {"gc_ms_per_step": 0.05857205, "gc_collections_per_step": 0.35, "host_ms": 0.21177721}
    measured["condition"] = "c"
    assert freeze_gc(gc_longest_ms=0.210576, slow_step_extra_ms=3.8098688, **measured) == []
    advised = freeze_gc(gc_longest_ms=3.0, slow_step_extra_ms=3.8098688, **measured)
    assert [s.text.split(" once")[0] for s in advised] == ["Call gc.freeze()"]


def test_slow_steps_on_the_one_set_of_input_shapes_are_not_told_to_pad_inputs():
    """torchvision's segmentation loop on the H100 trains on fixed 480x480 crops: one set of input shapes in
    20 steps. Its slow steps grew in autograd's backward nodes, which keep no shapes to compare, and it was
    told to "pad or bucket the inputs whose size varies"; its own metrics (results.json of that run) say
    the inputs never varied."""
    from hybrid.provenance import Metric
    from hybrid.rules.data_pipeline import _host_side_advice

    results = Path(__file__).parents[1] / "benchmarks/results/s27_h100/stranger_torchvision_segmentation_amp"
    metrics = json.loads(results.with_name(results.name + ".results.json").read_text())["metrics"]
    ctx = Context(metrics={k: Metric(m["value"], m["unit"], m["source"]) for k, m in metrics.items()})
    assert ctx.value("step_shape_signatures") == 1 and ctx.value("slow_step_new_shapes") is None
    said = [s.text for s in _host_side_advice(ctx, "c")]
    assert said and not any("pad or bucket" in text for text in said)
    assert said[0].startswith("Look for what slowed the host on the slow steps")
