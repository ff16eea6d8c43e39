"""`hybrid run --verify`: a real run on the CPU of a loop whose DataLoader (num_workers=0) waits for every
item realizes the DataLoader-workers fix in a plain run of its own, with the loss compared at the same step;
and on a real H200 capture, the fixes --verify would run are those its rules declare, never a setting the run
already had on."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

from hybrid.analysis import verified
from hybrid.collect.verify import plan
from hybrid.inject import apply_fix, numerics
from hybrid.inject.apply_fix import FIXES
from hybrid.pipeline import analyze_run_dir
from hybrid.rules.advice import RunConfig, observed_config
from hybrid.rules.registry import RULE_BY_ID, RULES
from hybrid.rules.switches import (
    COMPILE_ACROSS_SYNCS,
    COMPILE_REDUCE_OVERHEAD,
    SWITCHES,
    switch_for,
)
from hybrid.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "waiting_loader.py"
HF_CAPTURE = ROOT / "tests" / "fixtures" / "precision" / "hf_trainer_fp32" / "run"


@pytest.fixture(scope="module")
def verified_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path, Path, str]:
    base = tmp_path_factory.mktemp("verify")
    out, cache = base / "run", base / "cache"
    script = base / SCRIPT.name
    shutil.copy(SCRIPT, script)
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", CUDA_VISIBLE_DEVICES="", HYBRID_CACHE_DIR=str(cache)
    )
    argv = [sys.executable, "-m", "hybrid", "run", "--steps", "3", "--warmup", "1", "--verify", "2"]
    # 10 ms of waiting per item: long beside the CPU a worker costs to hand a batch over (under -n 2 on a
    # loaded 2-core box, 2 ms items once made the run with workers slower than the one without).
    argv += ["--quiet", "--json", "-o", str(out), str(script), "--item-ms", "10"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=300)
    results = json.loads(done.stdout) if done.returncode == 0 else {}
    unchanged = hashlib.sha256(script.read_bytes()).hexdigest() == digest
    return done, results, out, cache, digest if unchanged else ""


def test_the_dataloader_fix_is_realized_in_a_plain_run_of_its_own(verified_run):
    done, results, out, _cache, unchanged = verified_run
    assert done.returncode == 0, done.stderr
    assert unchanged, "the user's script was modified"
    primary = results["diagnosis"]["primary_bottleneck"]
    assert primary["id"] == "data.loader_in_step"
    verify = primary["verify"]
    assert verify["fix"] == "loader_workers" and verify["status"] == "realized"
    # The fetch's thread ran on or waited for a CPU a few % of its time (its items sleep): the finding
    # advises 4 workers whatever the cores, and the fix's run gives the loader that many (with one worker a
    # core, CI's run realized 18% of its 205 ms step; one worker on one core here, nothing: 168.8 ms).
    assert results["metrics"]["data_loader_cpu_pct"]["value"] < 50
    assert verify["actions"] == ["DataLoader(num_workers=4, persistent_workers=True)"]
    assert any("num_workers=4" in s for s in primary["suggestions"])
    # 16 items of 10 ms of waiting a batch, fetched in the step without workers; in four, the waits overlap
    # the step and each other: the plain step loses a fifth or more (about 70% on 1 and 2 cores, 39% under
    # CI's -n 2 load, where the workers' sleeps overran).
    assert verify["step_before_ms"] == results["timing"]["baseline_step_time_ms"]
    assert verify["realized_ms"] == pytest.approx(verify["step_before_ms"] - verify["step_after_ms"])
    assert verify["realized_ms"] > verify["step_before_ms"] / 5
    assert verify["predicted_ms"] == pytest.approx(primary["time_lost_baseline_ms"])
    # The prediction keeps at least what the workers still take, a batch of 160 ms in each of 4 (or what the
    # cores cannot run at once, where that is more); the whole fetch, once predicted, was 80% over what 1 and
    # 2 cores realized. How close it comes is not asserted here: under CI's -n 2 load the 4 workers' sleeps
    # took 2.5 times as long as the plain run's (82 ms realized of 159 predicted, where this box realized 125
    # of 133); the GPU verify table (issue 23) scores the predictions.
    step_ms, fetch_ms = (results["metrics"][name]["value"] for name in ("step_time_ms", "data_loader_ms"))
    assert 0 < primary["time_lost_ms"] <= step_ms - fetch_ms / 4 + 1e-6
    # The same items in the same order reach the same seeded model: the loss of the last plain step is the
    # loss without workers.
    numerics = verify["numerics"]
    assert numerics["status"] == "unchanged", numerics
    assert numerics["loss_before"] == pytest.approx(numerics["loss_after"], rel=1e-4)
    # One process for the fix, recorded beside the others, named for what it verified.
    passes = {p["name"]: p for p in results["passes"]}
    assert passes["verify-loader_workers"]["status"] == "ok"
    assert (out / "verify-loader_workers" / "inject.json").is_file()
    assert sum(name.startswith("verify-") for name in passes) == 1
    # That process costs about one plain window, then it is stopped (the script would run 40 iterations): the
    # plain step's warmup, at least the workers' first round of batches, and whole rounds of 4 steps, at
    # least the plain step's count (10 steps held two or three of the workers' waits by phase alone).
    reference = verified.plain_reference(RunDir(out))
    fix_run = json.loads((out / "verify-loader_workers" / "inject.json").read_text())
    assert fix_run["outcome"] == "step_limit" and fix_run["steps_seen"] < 40
    assert fix_run["warmup_dropped"] == max(reference["warmup"], 4)
    assert fix_run["measured_steps"] % 4 == 0
    assert reference["steps"] <= fix_run["measured_steps"] < reference["steps"] + 4


def test_the_realized_saving_feeds_the_gpus_history(verified_run):
    done, results, _out, cache, _ = verified_run
    assert done.returncode == 0, done.stderr
    summary = results["diagnosis"]["verify_summary"]
    history = summary["gpu_history"]
    assert history["verified"] == 1 and history["applied"] == []
    stored = json.loads((cache / "realized.json").read_text())
    (entry,) = stored[history["device"]]["loader_workers"]
    verify = results["diagnosis"]["primary_bottleneck"]["verify"]
    assert entry["realized_ms"] == pytest.approx(verify["realized_ms"])
    # |realized - predicted| / realized, the denominator at least 1% of the plain step.
    floor = 0.01 * verify["step_before_ms"]
    error = abs(entry["realized_ms"] - entry["predicted_ms"]) / max(abs(entry["realized_ms"]), floor)
    assert entry["error"] == pytest.approx(error)
    assert summary["median_error_pct"] == pytest.approx(100.0 * error)


def test_the_report_leads_with_the_realized_saving(verified_run, tmp_path):
    done, results, out, _cache, _ = verified_run
    assert done.returncode == 0, done.stderr
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="200")
    report = subprocess.run(
        [sys.executable, "-m", "hybrid", "report", str(out), "--html", "--out", str(tmp_path / "report")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout
    # The table wraps its finding column to what the other columns leave (a wider realized or lost value
    # on a loaded CI box once split the title over two lines): read the words, not the layout.
    words = " ".join(report.split())
    finding = words[words.index("The step waits for the DataLoader") :]
    assert finding.index("realized") < finding.index("host time fetching a batch")
    assert "prediction error on this machine (no GPU)" in words and "not applied to predictions" in words
    numerics = results["diagnosis"]["primary_bottleneck"]["verify"]["numerics"]
    assert f"at step {numerics['step']}; tolerance 1%)" in words
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.index("realized") < page.index("time lost:")


@pytest.mark.slow
def test_a_fix_whose_run_fails_is_reported_failed_and_the_run_keeps_the_rest(tmp_path):
    """Workers break a dataset that can only be read in the main process: the fix's run fails, its finding
    says so with the script's own error, and the diagnosis stands (exit 0)."""
    out = tmp_path / "run"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CUDA_VISIBLE_DEVICES="",
        HYBRID_CACHE_DIR=str(tmp_path / "cache"),
    )
    argv = [sys.executable, "-m", "hybrid", "run", "--steps", "3", "--warmup", "1", "--verify", "1"]
    argv += ["--quiet", "--json", "-o", str(out), str(SCRIPT), "--main-process-only"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    primary = results["diagnosis"]["primary_bottleneck"]
    assert primary["id"] == "data.loader_in_step" and primary["time_lost_ms"] > 0
    verify = primary["verify"]
    assert verify["status"] == "failed" and "only be read in the main process" in verify["reason"]
    assert "realized_ms" not in verify
    failed = next(p for p in results["passes"] if p["name"] == "verify-loader_workers")
    assert failed["status"] == "failed" and failed["contributed"].startswith("nothing:")
    assert results["diagnosis"]["verify_summary"]["realized"] == 0


@pytest.mark.slow
def test_a_computing_loader_gets_a_worker_a_core_and_the_prediction_keeps_what_the_cores_cannot_run(tmp_path):
    """Items that compute 10 ms each (a busy loop) instead of waiting: the fetch's thread is on a CPU all its
    time, so the finding advises one worker a core the process may use, and its saving keeps what those
    cores cannot run at once: a batch of 160 ms of CPU on 2 cores still takes 80 ms a step."""
    out = tmp_path / "run"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        NO_COLOR="1",
        CUDA_VISIBLE_DEVICES="",
        HYBRID_CACHE_DIR=str(tmp_path / "cache"),
    )
    argv = [sys.executable, "-m", "hybrid", "run", "--steps", "3", "--warmup", "1", "--verify", "1"]
    argv += ["--quiet", "--json", "-o", str(out), str(SCRIPT), "--item-ms", "10", "--spin"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    metrics = {name: m["value"] for name, m in results["metrics"].items()}
    assert metrics["data_loader_cpu_pct"] > 50
    cores = metrics["host_cpus"]
    by_id = {f["id"]: f for f in results["diagnosis"]["bottlenecks"]}
    if cores == 1:
        # One core runs the fetch and the step one after the other, with workers or without: no saving to
        # claim, so no DataLoader finding (its saving is under the 5% floor).
        assert "data.loader_in_step" not in by_id
        return
    finding = by_id["data.loader_in_step"]
    workers = min(4, cores)
    assert any(f"num_workers={workers}" in s for s in finding["suggestions"])
    verify = finding["verify"]
    assert verify["status"] == "realized"
    assert verify["actions"] == [f"DataLoader(num_workers={workers}, persistent_workers=True)"]
    # On 2 cores: predicted 82.0 ms, realized 79.6 ms of a 164 ms step.
    assert abs(verify["predicted_ms"] - verify["realized_ms"]) < 0.25 * verify["step_before_ms"]
    assert verify["predicted_ms"] < 0.9 * metrics["data_loader_ms"]


@pytest.mark.slow
def test_a_loss_changed_by_workers_random_transforms_says_so(tmp_path):
    """Items with random noise, as random augmentation adds: in workers the noise comes from generators
    seeded per worker, so the loss differs from the run without them, and the verified fix says why."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", HYBRID_CACHE_DIR=str(tmp_path))
    argv = [sys.executable, "-m", "hybrid", "run", "--steps", "3", "--warmup", "1", "--verify", "1"]
    argv += ["--quiet", "--json", "-o", str(out), str(SCRIPT), "--item-ms", "10", "--augment"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    verify = json.loads(done.stdout)["diagnosis"]["primary_bottleneck"]["verify"]
    assert verify["status"] == "realized"
    numerics = verify["numerics"]
    assert numerics["status"] == "changed", numerics
    assert numerics["reason"] == verified.LOADER_WORKERS_RANDOMNESS


def _capture_config(run: Path, results: dict, **changes: dict) -> RunConfig:
    config = dict(RunDir(run).read_inject("torch")["config"])
    for section, values in changes.items():
        config[section] = {**(config.get(section) or {}), **values}
    return RunConfig(config, observed_config(results["metrics"]))


@pytest.fixture(scope="module")
def hf_capture(tmp_path_factory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("hf") / "run"
    shutil.copytree(HF_CAPTURE, run)
    return run, analyze_run_dir(run)


def test_verify_runs_the_switch_the_rule_declares_for_each_top_finding(hf_capture):
    """HF Trainer on the H200 with TF32 off: the FP32 GEMMs' fix is TF32, the launch gaps' CUDA graphs and
    the elementwise chains' torch.compile, each once, in the order of the savings they predict."""
    run, results = hf_capture
    planned, skipped = plan(results, 3, _capture_config(run, results))
    by_id = {f["id"]: f for f in results["diagnosis"]["bottlenecks"]}
    assert [(p.switch.name, list(p.predicted_ms)) for p in planned] == [
        ("tf32", ["tensor.fp32_gemm"]),
        ("compile_reduce_overhead", ["launch.bound"]),
        ("compile", ["compile.fusible_elementwise"]),
    ]
    assert planned[0].predicted_ms["tensor.fp32_gemm"] == pytest.approx(
        by_id["tensor.fp32_gemm"]["time_lost_baseline_ms"]
    )
    assert skipped == []


def test_a_setting_the_run_already_had_is_never_verified(hf_capture):
    """With TF32 on the FP32 finding falls back to its next switch; compiled, the elementwise chains' next
    switch is the fused optimizer, which this Trainer already runs (AdamW fused=True): passed over, and
    why."""
    run, results = hf_capture
    config = _capture_config(
        run, results, precision={"tf32_matmul": True, "tf32_conv": True}, compile={"used": True}
    )
    planned, skipped = plan(results, 5, config)
    names = [p.switch.name for p in planned]
    assert "tf32" not in names and "compile" not in names and "cudnn_benchmark" in names
    (passed,) = [s for s in skipped if s["finding"] == "compile.fusible_elementwise"]
    assert "already on" in passed["reason"] and "fused" in passed["reason"]


def test_every_declared_switch_is_one_the_injector_applies():
    declared = {switch.name for rule in RULES for switch in rule.switches}
    assert declared and declared <= set(FIXES)
    assert {switch.name for switch in SWITCHES} == set(FIXES)
    # The analysis reads what the injector writes (it imports nothing from the injector).
    assert (verified.FIX_FILE, verified.LOSS_FILE) == (apply_fix.FIX_FILE, numerics.LOSS_FILE)


def _tf32_verify_run(tmp_path: Path, name: str, loop_line: str) -> tuple[Path, dict]:
    """A plain window with the tf32 fix applied on a script that sets TF32 off at its top, and, with
    `loop_line`, again in every step."""
    script = tmp_path / f"{name}.py"
    script.write_text(
        "import torch\n"
        "torch.backends.cuda.matmul.allow_tf32 = False\n"
        "model = torch.nn.Linear(8, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(20):\n"
        f"    {loop_line}\n"
        "    optimizer.zero_grad()\n"
        "    model(torch.ones(4, 8)).sum().backward()\n"
        "    optimizer.step()\n"
    )
    run = tmp_path / name
    flags = ["--fixed-warmup", "--apply-fix", "tf32", "--capture-loss"]
    argv = inject_argv(run / "verify-tf32", "plain", str(script), warmup=2, flags=flags)
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    reference = {"step_ms": 1.0, "warmup": 2, "steps": 3, "folder": "verify-tf32"}
    record = {"fix": "tf32", "status": "ok", "pass": "verify-tf32"}
    return run, verified.realized(RunDir(run), record, reference)


@pytest.mark.slow
def test_a_flag_the_script_sets_off_in_its_setup_is_set_again_for_the_window(tmp_path):
    """tc_fp32_no_tf32 sets `allow_tf32 = False` at its top (Hugging Face's TrainingArguments(tf32=False)
    does the same in its setup): on the H200 the flag set before the script ran was undone and the verify
    run read 60.3 ms before and after. The fix stands for editing that line, so the injector sets TF32 again
    at the stepped module's first call, and says so."""
    run, outcome = _tf32_verify_run(tmp_path, "tf32_off_at_setup", "pass")
    actions = json.loads((run / "verify-tf32" / "fix.json").read_text())["actions"]
    assert any("set again at the stepped module's first call" in action for action in actions)
    assert outcome["status"] != "not applied", outcome


@pytest.mark.slow
def test_a_fix_the_script_switches_off_in_its_loop_reads_not_applied(tmp_path):
    """A script that sets TF32 off in every step undoes the fix within the window: the run says so instead
    of calling its step time the fix's saving."""
    _run, outcome = _tf32_verify_run(
        tmp_path, "tf32_off_each_step", "torch.backends.cuda.matmul.allow_tf32 = False"
    )
    assert outcome["status"] == "not applied" and "off again" in outcome["reason"]
    assert "realized_ms" not in outcome


class _CommandOnly:
    """The orchestrator's side of a fix's run, keeping the command it was asked to run (the command is
    what this test is about; the runs themselves are the tests above)."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir, self.passes, self.mode_reasons = run_dir, [], []
        self.target = type("Target", (), {"argv": ["train.py"], "is_module": False, "display": "train.py"})()
        self.argv: list[str] = []

    def results(self) -> dict:
        return {}

    def run_side_pass(self, name, options, *, note, contributed, limit_s):
        self.argv = options
        return None, None


def test_a_compiled_fix_warms_up_until_its_steps_settle_and_a_flag_for_a_fixed_count(tmp_path):
    """launch_batch1_deep_mlp's reduce-overhead run on the H200 measured compilation inside its window after
    a fixed 4 warmup steps (77.8 ms a step for a 0.9 ms forward): compiled fixes warm up until settled."""
    from hybrid.collect.verify import Planned, _run_fix
    from hybrid.rules.switches import COMPILE_REDUCE_OVERHEAD, LOADER_WORKERS

    reference = {"warmup": 2, "steps": 5}
    for switch, fixed in ((COMPILE_REDUCE_OVERHEAD, False), (LOADER_WORKERS, True)):
        runner = _CommandOnly(RunDir(tmp_path / switch.name))
        _run_fix(runner, Planned(switch), reference, limit_s=60, workers=None)
        warmup = runner.argv[runner.argv.index("--warmup") + 1]
        assert ("--fixed-warmup" in runner.argv) is fixed, switch.name
        assert int(warmup) == max(2, switch.min_warmup)


def test_the_verify_table_scores_the_run(verified_run, tmp_path):
    """benchmarks/verify_table.py, which publishes the H200 goal table, on this real verified run."""
    done, results, out, _cache, _ = verified_run
    assert done.returncode == 0, done.stderr
    (tmp_path / "waiting_loader").mkdir()
    (tmp_path / "waiting_loader" / "run").symlink_to(out)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    table = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "verify_table.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout
    verify = results["diagnosis"]["primary_bottleneck"]["verify"]
    (row,) = [line for line in table.splitlines() if line.startswith("| waiting_loader |")]
    assert "`data.loader_in_step` (primary) | loader_workers | realized" in row
    assert f"| {verify['realized_ms']:.3g} |" in row
    assert "- primary is the verified fix that saved most: 1 of 1 runs" in table
    assert (
        "- listed fixes realized: 1 of 1 (not applied 0, unsettled 0, beyond reach 0, failed 0; goal: all)"
        in table
    )


def test_across_data_dependent_syncs_the_default_compile_is_verified_and_replayed():
    """torchvision's Faster R-CNN eval syncs on nonzero/masked_select every step: no CUDA graph holds it, so
    the dispatch finding advises the default compile, replays what it does (the elementwise chains fused)
    and is verified with it, not with mode='reduce-overhead'."""
    # Analyzed where it lies (analysis never writes a run directory): the suite analyzes it once.
    run = ROOT / "tests" / "fixtures" / "unmarked_runs" / "torchvision_detection_eval" / "run"
    results = analyze_run_dir(run)
    assert results["metrics"]["data_dependent_sync_ops"]["value"] == "aten::nonzero, aten::masked_select"
    (dispatch,) = [f for f in results["diagnosis"]["bottlenecks"] if f["id"] == "launch.dispatch"]
    assert dispatch["advice"][0]["text"] == "torch.compile(model)"
    assert dispatch["replay"]["fix"] == "fused_kernels"
    assert "aten::nonzero, aten::masked_select" in dispatch["replay"]["basis"]
    planned, skipped = plan(results, 5, _capture_config(run, results))
    by_switch = {p.switch.name: p for p in planned}
    assert "compile_reduce_overhead" not in by_switch
    assert by_switch["compile"].predicted_ms["launch.dispatch"] == pytest.approx(
        dispatch["time_lost_baseline_ms"]
    )
    assert not [s for s in skipped if s["finding"] == "launch.dispatch"]


def test_where_graphs_hold_the_dispatch_finding_is_verified_with_them():
    """Without data-dependent syncs the dispatch finding's advice and replay are CUDA graphs, and the default
    compile is not its switch (a Lightning bf16-mixed Transformer: reduce-overhead)."""
    # Analyzed where it lies (analysis never writes a run directory): the suite analyzes it once.
    run = ROOT / "tests" / "fixtures" / "unmarked_runs" / "lightning_bf16_transformer" / "run"
    results = analyze_run_dir(run)
    assert "data_dependent_sync_ops" not in results["metrics"]
    launch = [f for f in results["diagnosis"]["bottlenecks"] if f["id"].startswith("launch.")]
    assert launch and all(f["replay"]["fix"] == "graph_launch" for f in launch)
    config = _capture_config(run, results)
    assert COMPILE_ACROSS_SYNCS.blocked(config) is not None
    assert switch_for(RULE_BY_ID[launch[0]["id"]].switches, config) is COMPILE_REDUCE_OVERHEAD
