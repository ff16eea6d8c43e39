"""hybrid.inject.run_config in real profiled processes: the injector records what
tests/scripts/config_probe.py
switched on (and nothing it did not), and the script's result is the same with and without the observers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "scripts" / "config_probe.py"
TIMEOUT_S = 180

CASES = {
    "plain": (),
    "tuned": (
        "--tf32",
        "--autocast",
        "bfloat16",
        "--compile",
        "max-autotune",
        "--optimizer",
        "adamw",
        "--fused",
        "--channels-last",
        "--scaler",
        "--pin-memory",
        "--clip-one-by-one",
    ),
    "workers": (
        "--workers",
        "2",
    ),
}


def _run(case: str, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    # --fixed-warmup: the probe runs exactly warmup + steps iterations, so it must stop at the step limit,
    # with its objects alive, whatever the box's load does to step times.
    argv = inject_argv(out, "plain", str(PROBE), *CASES[case], flags=["--fixed-warmup"])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "inject.json").read_text())


@cache
def recorded(tmp_root: str) -> dict[str, dict]:
    with ThreadPoolExecutor(len(CASES)) as pool:
        futures = {case: pool.submit(_run, case, Path(tmp_root) / case) for case in CASES}
        return {case: f.result() for case, f in futures.items()}


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, dict]:
    return {
        case: inject["config"] for case, inject in recorded(str(tmp_path_factory.mktemp("config"))).items()
    }


def test_nothing_switched_on_is_recorded_as_off(configs):
    config = configs["plain"]
    assert config["errors"] == []
    assert config["precision"]["tf32_matmul"] is False and config["precision"]["tf32_conv"] is False
    assert config["autocast"]["enabled"] is False
    assert config["compile"]["used"] is False
    assert config["grad_scaler"] == {"instances": 0, "enabled": False}
    assert [o["class"] for o in config["optimizers"]] == ["SGD"]
    assert config["optimizers"][0]["fused"] in (None, False) and config["optimizers"][0]["supports_fused"]
    assert config["data_loaders"][0]["num_workers"] == 0 and config["data_loaders"][0]["pin_memory"] is False
    assert config["channels_last"]["used"] is False and config["channels_last"]["conv2d_modules"] == 1
    assert config["distributed"]["initialized"] is False and config["distributed"]["ddp"] == []
    assert config["framework"] == {"name": None}
    assert config["grad_clipping"] == []


def test_what_the_script_switched_on_is_recorded(configs):
    config = configs["tuned"]
    assert config["errors"] == []
    assert config["precision"]["tf32_matmul"] and config["precision"]["tf32_conv"]
    assert config["autocast"]["enabled"] and config["autocast"]["dtypes"] == ["bfloat16"]
    assert {r["device"] for r in config["autocast"]["regions"]} == {"cpu"}
    assert config["compile"]["used"] and config["compile"]["modes"] == ["max-autotune"]
    assert config["compile"]["compiled_modules"] == 1
    assert config["optimizers"][0]["class"] == "AdamW" and config["optimizers"][0]["fused"] is True
    assert config["grad_scaler"]["instances"] == 1
    assert config["channels_last"]["used"] is True
    assert config["data_loaders"][0]["pin_memory"] is True
    assert configs["workers"]["data_loaders"][0]["num_workers"] == 2
    # One clip_grad_norm_ call a step, foreach=False, over the conv's and the linear's weights and biases (the
    # generator of parameters it was given, listed by the observer and passed on; the final loss, below, is
    # the same with and without it).
    (clipping,) = config["grad_clipping"]
    assert clipping["foreach"] is False and clipping["tensors"] == 4 and clipping["calls"] >= 4


def test_a_disabled_autocast_region_is_seen_but_not_enabled(configs):
    regions = configs["plain"]["autocast"]["regions"]
    assert regions and all(not r["enabled"] for r in regions)


@pytest.mark.slow
def test_the_observers_do_not_change_the_result(tmp_path):
    """The tuned loop run to its end under the injector (more steps asked than the script has) prints the
    same final loss as the script run alone."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    alone = subprocess.run(
        [sys.executable, str(PROBE), *CASES["tuned"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    injected = subprocess.run(
        inject_argv(tmp_path, "plain", str(PROBE), *CASES["tuned"], steps=50),
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert alone.returncode == 0 and injected.returncode == 0, alone.stderr + injected.stderr
    loss = [line for line in alone.stdout.splitlines() if line.startswith("final loss")]
    assert loss and loss == [line for line in injected.stdout.splitlines() if line.startswith("final loss")]


@pytest.mark.gpu
def test_cuda_autocast_and_tf32_are_recorded_on_a_gpu(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    argv = inject_argv(
        tmp_path,
        "plain",
        str(PROBE),
        "--device",
        "cuda",
        "--tf32",
        "--autocast",
        "bfloat16",
        "--optimizer",
        "adamw",
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "inject.json").read_text())["config"]
    assert config["errors"] == []
    assert {(r["device"], r["dtype"]) for r in config["autocast"]["regions"] if r["enabled"]} == {
        ("cuda", "bfloat16")
    }
    assert config["precision"]["tf32_matmul"] and config["precision"]["tf32_conv"]
    # AdamW with foreach left to torch takes the multi-tensor path on CUDA parameters.
    assert config["optimizers"][0]["foreach_effective"] is True


def test_results_json_carries_the_config_of_the_run(tmp_path):
    """`hybrid run` end to end (torch pass, CPU): results.json has the injector's config at top level."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybrid",
            "run",
            "--mode",
            "torch",
            "--warmup",
            "1",
            "--steps",
            "3",
            "--json",
            "--out",
            str(tmp_path / "run"),
            str(PROBE),
            "--optimizer",
            "adamw",
            "--fused",
            "--steps",
            "40",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert (
        results["config"]["optimizers"][0]["class"] == "AdamW" and results["config"]["optimizers"][0]["fused"]
    )
    assert results["config"] == json.loads((tmp_path / "run" / "torch" / "inject.json").read_text())["config"]


@pytest.mark.slow
def test_a_compiled_function_that_clips_keeps_its_one_graph(tmp_path):
    """The clip_grad_norm_ observer calls straight through while torch.compile traces it: a step function
    compiled with fullgraph=True (which raises at any graph break) that clips still compiles, and nothing is
    recorded from inside the graph."""
    script = tmp_path / "compiled_clip.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(8, 8)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "@torch.compile(backend='eager', fullgraph=True)\n"
        "def clip():\n"
        "    return torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0, foreach=False)\n"
        "for _ in range(8):\n"
        "    optimizer.zero_grad()\n"
        "    model(torch.ones(2, 8)).sum().backward()\n"
        "    clip()\n"
        "    optimizer.step()\n"
    )
    argv = inject_argv(tmp_path / "out", "plain", str(script), flags=["--fixed-warmup"])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    inject = json.loads((tmp_path / "out" / "inject.json").read_text())
    assert inject["outcome"] == "step_limit" and inject["graph_breaks"] == []
    assert inject["config"]["grad_clipping"] == []


def test_inductor_reasons_for_skipping_cuda_graphs_are_recorded():
    """Inductor warns why it runs a reduce-overhead graph without CUDA graphs only on GPUs; here its own
    warning function is called as inductor calls it, after the observers are in (a fresh process: the
    logger is process-wide). The count and the reason reach `config.compile`, each reason once."""
    code = (
        "import json, torch\n"
        "from hybrid.inject import run_config\n"
        "run_config.install()\n"
        "from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter as skip\n"
        "for _ in range(2): skip('skipping cudagraphs due to mutated inputs (1 instances)')\n"
        "print(json.dumps(run_config.capture()['compile']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    assert compiled["cudagraph_skips"] == 2
    assert compiled["cudagraph_skip_reasons"] == ["skipping cudagraphs due to mutated inputs (1 instances)"]
    # The warning still reaches the console as it would without hybrid.
    assert "skipping cudagraphs due to mutated inputs" in done.stderr


def test_a_raw_tensor_loop_builds_no_model_and_is_not_told_to_compile_one(tmp_path, configs):
    """raw_elementwise_loop (eight elementwise ops on one tensor a step, no nn.Module) was told
    "torch.compile(model)" for its fusion finding on the H100. Its recorded config says it holds no module
    with parameters, and the compile advice then names the step's own code; the probe's model keeps
    torch.compile(model)."""
    from hybrid.rules.advice import RunConfig, use_compile

    script = REPO / "benchmarks" / "unmarked" / "raw_elementwise_loop.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = inject_argv(tmp_path / "raw", "plain", str(script), "--device", "cpu", flags=["--fixed-warmup"])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    raw = json.loads((tmp_path / "raw" / "inject.json").read_text())["config"]
    assert raw["modules"] == {"with_parameters": False}
    (advice,) = use_compile(RunConfig(raw), why="fuse these kernels", condition="c")
    assert advice.text.startswith("Move the step's tensor code into a function decorated with @torch.compile")
    assert advice.text.endswith("(the script builds no model)")
    assert "; the step runs eager; compiling would fuse these kernels" in advice.condition
    assert configs["plain"]["modules"] == {"with_parameters": True}
    (modelled,) = use_compile(RunConfig(configs["plain"]), why="fuse these kernels", condition="c")
    assert modelled.text == "torch.compile(model)"
