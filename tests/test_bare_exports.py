"""Steps of bare Nsight Systems exports (`nsys profile -t cuda,nvtx,osrt python script.py`, no hybrid and
no markers) of the unmarked workloads in benchmarks/unmarked, captured on the H200: found from the
periodicity of the launching thread's CUDA calls, start-up excluded, and checked against each script's
own per-iteration clock (tests/fixtures/bare/expected.json, its ITER_MS line under nsys)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from hybrid.analysis.steps import step_windows
from hybrid.load.nsys_export import load_nsys_export
from hybrid.pipeline import analyze_export

BARE = Path(__file__).parent / "fixtures" / "bare"
EXPECTED = json.loads((BARE / "expected.json").read_text())
# hf_generate_gpt2's fixture is cut to its first 1.2 s of kernels (benchmarks/trim_bare_export.py
# --keep-s 1.2): its per-call overhead no longer averages as in the script's clock; tested apart.
WHOLE = sorted(name for name in EXPECTED if name != "hf_generate_gpt2")


@pytest.mark.parametrize("name", WHOLE)
def test_periodic_steps_match_the_scripts_own_iteration_time(name):
    results = analyze_export(BARE / f"{name}.sqlite")
    workload = results["workload"]
    assert workload["step_source"] == "periodicity"
    assert workload["step_unit"].startswith("one repeat of a ")
    assert workload["step_confidence"] in ("medium", "low") and "start-up" in workload["step_reason"]
    expected = EXPECTED[name]["script_ms_per_step"]
    assert results["timing"]["step_time_ms"] == pytest.approx(expected, rel=0.10)
    assert workload["steps_measured"] >= 15


def test_start_up_is_excluded_from_the_compiled_loop():
    """torch.compile's first call takes seconds: no step may hold it."""
    profile = load_nsys_export(BARE / "compiled_infer_loop.sqlite")
    with sqlite3.connect(BARE / "compiled_infer_loop.sqlite") as db:
        ((first_kernel,),) = db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert profile.steps["start_ns"].min() - first_kernel > 5e9
    assert (step_windows(profile)["dur_ns"] < 10e6).all()


def test_generate_steps_are_decode_steps():
    """Greedy decoding runs one argmax per new token: each step found holds one."""
    profile = load_nsys_export(BARE / "hf_generate_gpt2.sqlite")
    assert profile.step_source == "periodicity" and len(profile.steps) >= 60
    names = profile.kernels["name"].astype(str)
    argmax = profile.kernels[names.str.contains("ArgMax") & (profile.kernels["step"] >= 0)]
    per_step = argmax.groupby("step").size().reindex(profile.steps["step"], fill_value=0)
    assert (per_step == 1).mean() >= 0.95


def test_a_capture_that_never_repeats_is_one_labeled_window(tmp_path):
    """The first 30 ms of kernels of the nested-loop export: too few iterations to repeat."""
    cut = tmp_path / "short.sqlite"
    shutil.copyfile(BARE / "nested_gemm_loops.sqlite", cut)
    with sqlite3.connect(cut) as db:
        ((first,),) = db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            db.execute(f"DELETE FROM {table} WHERE start > ?", (first + 2_000_000,))
    results = analyze_export(cut)
    workload = results["workload"]
    assert (workload["step_source"], workload["step_confidence"]) == ("steady-window", "low")
    assert workload["steps_measured"] == 1
    assert any("analyzed as one range" in w for w in results["warnings"])


def test_periods_are_whole_iterations_not_repeated_blocks():
    """40 identical conv blocks repeat every 4 calls, but the head runs once per forward; a compiled
    encoder of identical layers shows its iteration only in the host gap of the script's loop."""
    for name, calls_per_iteration in (
        ("deep_narrow_conv_b1", 165),
        ("compiled_infer_loop", 72),
        ("nested_gemm_loops", 7),
    ):
        unit = analyze_export(BARE / f"{name}.sqlite")["workload"]["step_unit"]
        assert unit == f"one repeat of a {calls_per_iteration}-call CUDA sequence"


# -- nested loops: the step is the outermost unit that repeats like a step, not the shortest repeat ----------


def _make_large_export():
    spec = importlib.util.spec_from_file_location(
        "make_large_export", Path(__file__).parents[1] / "benchmarks" / "make_large_export.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LAUNCH_RUN_NSYS = Path(__file__).parent / "fixtures" / "planted" / "launch_batch1_deep_mlp" / "run" / "nsys"


@pytest.fixture(scope="module")
def bare_launch_loop(tmp_path_factory):
    """The planted launch-bound capture (each iteration: 64 batch-1 requests x 32 x (Linear + GELU), then
    one torch.cat: 4,097 kernels), its steady steps replicated to 21 iterations, every NVTX range removed."""
    out = tmp_path_factory.mktemp("bare") / "launch_loop.sqlite"
    facts = _make_large_export().make_large_export(100_000, out, 0, template="launch", bare=True)
    assert facts["steps"] == 0 and facts["kernels"] > 80_000
    return out


def _planted_step_ms() -> float:
    return json.loads((LAUNCH_RUN_NSYS / "inject.json").read_text())["step_time_ms"]


def test_outer_loop_of_many_identical_inner_iterations_is_the_step(bare_launch_loop):
    """The shortest repeat is one Linear + GELU (2 calls); the loop the user wrote is 64 requests of 32 layers
    and one concat of their outputs, which recurs once per iteration: that iteration is the step."""
    profile = load_nsys_export(bare_launch_loop)
    assert profile.step_source == "periodicity"
    assert profile.step_unit == "one repeat of a 4097-call CUDA sequence"
    assert len(profile.steps) >= 15
    per_step = profile.kernels[profile.kernels["step"] >= 0].groupby("step").size()
    assert (per_step == 4097).all()
    assert step_windows(profile)["dur_ns"].median() / 1e6 == pytest.approx(_planted_step_ms(), rel=0.05)


def test_outer_loop_marked_only_by_its_host_gap_is_the_step(bare_launch_loop, tmp_path):
    """Without the concat, nothing but the script's own Python between iterations (16x the median gap
    between calls) tells the iteration of 4,096 identical launches from one layer's 2."""
    cut = tmp_path / "no_concat.sqlite"
    shutil.copyfile(bare_launch_loop, cut)
    with sqlite3.connect(cut) as db:
        concat = (
            "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE '%CatArrayBatchedCopy%'"
        )
        db.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN ({concat})")
        db.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IN ({concat})")
    profile = load_nsys_export(cut)
    assert profile.step_unit == "one repeat of a 4096-call CUDA sequence"
    assert "host gap" in profile.step_reason
    assert step_windows(profile)["dur_ns"].median() / 1e6 == pytest.approx(_planted_step_ms(), rel=0.05)


def test_an_epoch_around_the_steps_is_not_the_step():
    """nested_gemm_loops runs 4 epochs of 10 iterations: the epoch repeats too few times to be a step, so
    the step stays one inner iteration (its script's own clock, 0.42 ms)."""
    results = analyze_export(BARE / "nested_gemm_loops.sqlite")
    assert results["workload"]["step_unit"] == "one repeat of a 7-call CUDA sequence"
    expected = EXPECTED["nested_gemm_loops"]["script_ms_per_step"]
    assert results["timing"]["step_time_ms"] == pytest.approx(expected, rel=0.10)


# -- a `hybrid run --mode nsys` of the unmarked HF generate() script on the H200 (GPU call B), offline -------

HF_RUN = Path(__file__).parent / "fixtures" / "unmarked_runs" / "hf_generate_gpt2" / "run"


def test_generate_run_measures_decode_steps_found_without_edits():
    """The injector chose one top-level GPT2LMHeadModel.forward as the step; the nsys pass's ranges hold one
    greedy decode step each (one argmax), and results.json says what the step is and how it was found."""
    from hybrid.pipeline import analyze_run_dir

    results = analyze_run_dir(HF_RUN)
    workload = results["workload"]
    assert (workload["step_source"], workload["step_ranges"], workload["step_confidence"]) == (
        "module_call",
        "nvtx:hybrid",
        "medium",
    )
    assert workload["step_unit"].startswith("one top-level GPT2LMHeadModel.forward")
    assert workload["steps_measured"] == 10 and workload["warmup_steps"] >= 3
    profile = load_nsys_export(HF_RUN / "nsys" / "profile.sqlite")
    names = profile.kernels["name"].astype(str)
    argmax = profile.kernels[names.str.contains("ArgMax") & (profile.kernels["step"] >= 0)]
    assert argmax.groupby("step").size().to_dict() == {step: 1 for step in range(10)}
