"""What a diagnosis costs (issue 21), on the CPU with real subprocesses: the plain reference is a window
of the torch pass's process, timed before torch.profiler starts; a script too short for that window gets
its torch pass again without it; every pass of a run shares one compile cache, so a torch.compile'd
script compiles once; and the ncu pass runs only where counters can change the diagnosis (decided on
committed H200 captures without their counters)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

from hybrid.collect.ncu_plan import KernelHeadroom, plan_ncu
from hybrid.collect.orchestrate import COMPILE_CACHE_DIR, Orchestrator, RunOptions, Target
from hybrid.load.ncu_match import select_kernels
from hybrid.load.nsys_export import load_nsys_export
from hybrid.pipeline import analyze_run_dir
from hybrid.profile import LAUNCH_CONFIG_COLUMNS
from hybrid.rundir import RunDir
from nsight.ncu import SECONDS_PER_LAUNCH, function_base_name

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
FIXTURES = ROOT / "tests" / "fixtures"


def _trace_names(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return [event.get("name", "") for event in json.load(handle)["traceEvents"]]


@pytest.mark.slow
def test_the_plain_window_runs_before_torch_profiler_starts(tmp_path):
    out = tmp_path / "torch"
    done = subprocess.run(
        inject_argv(
            out,
            "torch",
            str(SCRIPTS / "steady_steps.py"),
            "60",
            warmup=2,
            steps=4,
            flags=["--plain-steps", "3", "--plain-on-cpu"],
        ),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    inject = json.loads((out / "inject.json").read_text())
    window = inject["plain_window"]
    assert window["complete"] and window["measured_steps"] == 3 and len(window["step_end_ns"]) == 3
    # Steps sleep 50 ms: the window's mean is that or a little more on a loaded box, never less.
    assert 45 <= window["step_time_ms"] <= 500
    assert inject["measured_steps"] == 4
    assert inject["steps_seen"] == inject["warmup_dropped"] + 3 + 4
    # The profiler saw the measured steps only: one matmul a step, none of the plain window's three.
    names = _trace_names(out / "trace.json")
    steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
    assert steps == [f"ProfilerStep#{i}" for i in range(4)]
    assert names.count("aten::mm") == 4
    assert "torch plain window step 3/3 (no collector)" in done.stdout


def test_a_run_records_the_plain_window_as_its_plain_pass(tmp_path):
    out = tmp_path / "run"
    orchestrator = Orchestrator(
        Target([str(SCRIPTS / "steady_steps.py"), "60"]),
        RunOptions(out_dir=out, mode="torch", warmup=2, steps=4),
    )
    orchestrator.run()
    run = json.loads((out / "run.json").read_text())
    assert [(p["name"], p["process"]) for p in run["passes"]] == [("torch", None), ("plain", "torch")]
    plain = run["passes"][1]
    window = json.loads((out / "torch" / "inject.json").read_text())["plain_window"]
    assert plain["step_time_ms"] == window["step_time_ms"]
    assert plain["wall_s"] == round(window["window_ns"] / 1e9, 3)
    assert "without a collector" in plain["contributed"]
    assert not (out / "plain").exists()  # no process of its own
    results = analyze_run_dir(out)
    rows = {row["name"]: row for row in results["passes"]}
    assert rows["plain"]["process"] == "torch"
    # The reference the collector's overhead is measured against: the torch pass's own plain steps.
    expected = 100.0 * (rows["torch"]["step_time_ms"] / rows["plain"]["step_time_ms"] - 1.0)
    assert rows["torch"]["overhead_pct"] == pytest.approx(expected, abs=0.1)


@pytest.mark.slow
def test_a_script_too_short_for_the_plain_window_gets_its_torch_pass_again_without_it(tmp_path):
    # 14 steps: at least 2 warmup + 10 plain leave at most 2 of the 4 measured steps; the torch window comes
    # up short, so the torch pass runs again with no window, dropping 10 steps (more where warmup took more).
    out = tmp_path / "run"
    orchestrator = Orchestrator(
        Target([str(SCRIPTS / "steady_steps.py"), "14"]),
        RunOptions(out_dir=out, mode="torch", warmup=2, steps=4),
    )
    orchestrator.run()
    run = json.loads((out / "run.json").read_text())
    assert [p["name"] for p in run["passes"]] == ["torch"]  # the second torch pass replaced the first
    assert "--plain-steps" not in run["passes"][0]["command"]
    inject = json.loads((out / "torch" / "inject.json").read_text())
    warmup = run["fixed_warmup"]["warmup"]
    assert warmup >= 10 and inject["plain_window"] is None
    assert inject["measured_steps"] == min(4, 14 - warmup) and inject["warmup_dropped"] == warmup
    assert "too few for the plain window" in run["fixed_warmup"]["reason"]


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++")), reason="inductor on the CPU needs a C++ compiler"
)
def test_every_pass_of_a_run_shares_one_compile_cache(tmp_path, monkeypatch):
    for variable in (
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_FX_GRAPH_CACHE",
        "TORCHINDUCTOR_AUTOGRAD_CACHE",
    ):
        monkeypatch.delenv(variable, raising=False)
    out = tmp_path / "run"
    # --baseline: a plain pass of its own, then the torch pass: two processes compiling the same model.
    Orchestrator(
        Target([str(SCRIPTS / "compiled_steps.py"), "30"]),
        RunOptions(out_dir=out, mode="torch", warmup=2, steps=3, baseline=True),
    ).run()
    run = json.loads((out / "run.json").read_text())
    caches = {p["name"]: p["compile_cache"] for p in run["passes"]}
    assert caches["plain"]["fxgraph_cache_miss"] >= 1 and caches["plain"]["fxgraph_cache_hit"] == 0
    assert caches["torch"]["fxgraph_cache_hit"] >= 1 and caches["torch"]["fxgraph_cache_miss"] == 0
    # Loading what the first pass compiled costs a fraction of compiling it (35 s vs 4.6 s for a small MLP).
    assert caches["torch"]["compile_s"] < caches["plain"]["compile_s"]
    assert not (out / COMPILE_CACHE_DIR).exists()  # run-private, removed when the passes end


def test_a_compile_cache_the_user_chose_is_left_as_set(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    env = Orchestrator(Target([str(script)]), RunOptions(out_dir=tmp_path / "run"))._env()
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "run" / COMPILE_CACHE_DIR / "triton")
    assert env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == env["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"


def _plan_without_counters(capture: str, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / capture, run)
    shutil.rmtree(run / "ncu")
    for old in run.glob("results*.json"):
        old.unlink()
    profile = load_nsys_export(RunDir(run).nsys_export())
    return plan_ncu(analyze_run_dir(run), profile, select_kernels(profile.kernels), forced=False)


@pytest.mark.parametrize(
    ("capture", "runs", "why"),
    [
        # Host-bound: the GPU waits for launches, so no counter finding saves what launch.dispatch does.
        ("runs/h200-resnet50-default", False, "less than the primary finding launch.dispatch"),
        ("planted/sync_item_per_microstep/run", False, "less than the primary finding cpu.preprocessing"),
        # FP32 GEMMs take the step, by name; counters could move 0.74 ms of the 1.44 ms of other kernels the
        # fusion finding (LOW) draws on, enough to put it under its floor.
        ("planted/tc_fp32_no_tf32/run", True, "of compile.fusible_elementwise's saving (LOW)"),
        # The timeline's roofline finding is an estimate the counters measure (they make it
        # memory.uncoalesced).
        ("planted/mem_random_gather/run", True, "counters measure what roofline.low_efficiency estimates"),
        # Unfused GELU chains: a finding resting on counters could save as much as the fusion finding.
        ("planted/roofline_unfused_gelu/run", True, "could save as much as the primary finding compile."),
        # The fusion finding (MODERATE) draws on the time counters move.
        ("verify/hf_trainer_tf32_paired/run", True, "of compile.fusible_elementwise's saving (MODERATE)"),
        # Host-bound bf16 Trainer: launch.dispatch's 12.2 ms a step; the kernels' time saves little of it.
        ("runs/h200-hf-trainer-bf16", False, "less than the primary finding launch.dispatch"),
    ],
)
def test_ncu_runs_only_where_counters_can_change_the_primary_or_a_severity(capture, runs, why, tmp_path):
    plan = _plan_without_counters(capture, tmp_path)
    assert plan.run is runs
    assert why in plan.reason
    if "estimates" not in why:
        assert plan.movable_ms is not None and plan.headroom_ms is not None
    if not runs:
        assert "counters cannot change the primary or a severity" in plan.reason
        assert plan.headroom_ms <= plan.movable_ms + 1e-6  # a step never saves more kernel time than it loses


def test_the_time_counters_can_move_is_the_kernels_no_name_or_grid_classes(tmp_path):
    # resnet50 (default precision): 5.75 ms a step of small grids are told by launch configuration alone,
    # so counters can move only the other 11.23 ms (the ledger's kernel_unprofiled pool without counters).
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs/h200-resnet50-default", run)
    shutil.rmtree(run / "ncu")
    profile = load_nsys_export(RunDir(run).nsys_export())
    headroom = KernelHeadroom(profile)
    pools = analyze_run_dir(run)["ledger"]["ms_per_step"]
    assert headroom.movable_ms() == pytest.approx(pools["kernel_unprofiled"], rel=0.02)
    assert pools["small_grid"] > 5.0
    largest = headroom.by_name.idxmax()
    assert headroom.movable_ms([largest]) == pytest.approx(headroom.movable_ms() - headroom.by_name.max())
    # A claim is weighed by the replay: never more than the time claimed, and more time saves more.
    assert 0 <= headroom.weighed_ms(1.0) <= headroom.weighed_ms(5.0) <= 5.0 + 1e-6


def test_ncu_profiles_only_the_kernels_whose_counters_can_change_the_answer(tmp_path):
    # PyG's GCN: counters could take the whole fusion finding's pool (it rests on kernels no name classes);
    # with three kernels' launches profiled, the rest could not change the answer.
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "unmarked_runs/pyg_gcn_train/run", run)
    shutil.rmtree(run / "ncu")
    for old in run.glob("results*.json"):
        old.unlink()
    profile = load_nsys_export(RunDir(run).nsys_export())
    candidates = select_kernels(profile.kernels)
    analysis = analyze_run_dir(run)
    plan = plan_ncu(analysis, profile, candidates, forced=False)
    headroom = KernelHeadroom(profile)
    # Most movable time per launch ncu replays first: index_add's one launch before the gather, which holds
    # the most time but over two launches.
    first = headroom.profiling_order(candidates)[0]
    assert plan.run and plan.kernel_names[0] == first and len(candidates) > len(plan.kernel_names) == 3
    largest = headroom.by_name.idxmax()
    assert first != largest and headroom.launches_of(first) == 1 and headroom.launches_of(largest) == 2
    assert set(plan.kernel_names) <= set(candidates)
    assert (
        f"the others' ({headroom.movable_ms(plan.kernel_names):.2f} ms) could change neither" in plan.reason
    )
    assert plan_ncu(analysis, profile, candidates, forced=True).kernel_names is None  # --mode hybrid: all


def _cost_bench():
    spec = importlib.util.spec_from_file_location("cost_bench", ROOT / "benchmarks" / "cost_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "capture",
    ["runs/h200-resnet50-default", "planted/sync_cuda_synchronize/run", "planted/cpu_tensors_then_moved/run"],
)
def test_where_the_plan_skips_ncu_the_counters_change_no_answer(capture):
    # The captures' own counters, analyzed: what the plan skipped would have changed neither the primary,
    # nor a severity, nor a saving (sync_cuda_synchronize gains a LOW memory.uncoalesced finding).
    row = _cost_bench().plan_row(FIXTURES / capture)
    assert not row["ncu_runs"] and row["skip_safe"], row


def test_ncu_replay_is_held_within_its_budget(tmp_path):
    # resnet50 fp32: the estimated roofline finding wants counters on every selected kernel, 69 launches
    # (~30 s of replay); 5 s holds 11, taken from the kernels holding the most movable time per launch.
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs/h200-resnet50", run)
    shutil.rmtree(run / "ncu")
    for old in run.glob("results*.json"):
        old.unlink()
    profile = load_nsys_export(RunDir(run).nsys_export())
    candidates = select_kernels(profile.kernels)
    analysis = analyze_run_dir(run)
    unbudgeted = plan_ncu(analysis, profile, candidates, forced=False)
    assert unbudgeted.run and unbudgeted.kernel_names is None and unbudgeted.budget is None
    plan = plan_ncu(analysis, profile, candidates, forced=False, budget_s=5.0)
    headroom = KernelHeadroom(profile)
    replayed = headroom.launches_for(plan.kernel_names)
    assert plan.run and replayed <= int(5.0 / SECONDS_PER_LAUNCH) < plan.budget["launches_wanted"]
    assert plan.budget["launches"] == replayed and plan.budget["launches_wanted"] > 60
    # In the budget's order, the first always; a kernel whose launches would overrun it is passed over for a
    # later one that fits.
    order = headroom.budget_order(candidates)
    assert plan.kernel_names[0] == order[0]
    assert plan.kernel_names == [name for name in order if name in plan.kernel_names]
    passed_over = [
        name for name in order[: order.index(plan.kernel_names[-1])] if name not in plan.kernel_names
    ]
    assert all(
        headroom.launches_for([*plan.kernel_names, name]) > int(5.0 / SECONDS_PER_LAUNCH)
        for name in passed_over
    )
    assert plan.budget["movable_ms_left_out"] > 0
    assert plan.reason.startswith(unbudgeted.reason) and "replay budget of 5 s" in plan.reason
    # No budget, a budget that holds them all, and --mode hybrid: the plan as the answer made it.
    assert plan_ncu(analysis, profile, candidates, forced=False, budget_s=0).kernel_names is None
    assert plan_ncu(analysis, profile, candidates, forced=False, budget_s=1000).budget is None
    assert plan_ncu(analysis, profile, candidates, forced=True, budget_s=5.0).kernel_names is None


def test_a_kernel_costs_the_launches_of_every_kernel_sharing_its_base_name():
    # ncu's filter matches function base names: selecting one instantiation of vectorized_elementwise_kernel
    # replays one launch per configuration of all five in the step (on the H100 the 5 s budget planned 10
    # launches and ncu replayed 19). Selections sharing a base name share those launches.
    profile = load_nsys_export(RunDir(FIXTURES / "runs/h200-resnet50").nsys_export())
    headroom = KernelHeadroom(profile)
    step = profile.kernels[profile.kernels["step"] == profile.kernels["step"].min()]
    names = sorted(
        {str(n) for n in step["name"] if function_base_name(str(n)) == "vectorized_elementwise_kernel"}
    )
    assert len(names) == 5
    own_configs = len(step[step["name"] == names[0]].drop_duplicates(list(LAUNCH_CONFIG_COLUMNS)))
    assert headroom.launches_of(names[0]) == headroom.launches_for(names) == 8 > own_configs
    assert Orchestrator._launch_configs(profile, names[:1]) == 8
    assert headroom.launches_for([names[0], "no_such_kernel"]) == 9  # an unseen name: one launch


def test_counters_on_the_budgets_kernels_give_the_answers_all_counters_give():
    # The capture's own counters, kept only on the kernels the 5 s budget replays: the same primary,
    # severities and savings as with all 31 profiled launches (resnet50 fp32, 10 of 69 launches).
    (row,) = _cost_bench().budget_rows(FIXTURES / "runs/h200-resnet50", budgets_s=(5.0,))
    assert row["launches"] < row["launches_unbudgeted"] and row["changes"] == [], row
