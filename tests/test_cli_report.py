"""`hybrid report`, `compare` and `doctor` as a user runs them (real subprocesses on real H200 run
directories): a results.json without its artifacts is re-rendered, the regression gate refuses thresholds
that cannot trip and fails, with the reason, when it cannot decide; every option says what it does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from hybrid.cli import app
from hybrid.doctor import INSTALL_NCU, INSTALL_NSYS, diagnose_environment, render_doctor

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "tests" / "fixtures" / "runs"


def hybrid(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=240,
    )


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> dict[str, Path]:
    """results.json of two real runs: resnet50 and simple_cnn on the H200."""
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for name in ("h200-resnet50", "h200-simple_cnn"):
        shutil.copytree(RUNS / name, base / name)
        done = hybrid("report", str(base / name), "--json", "--out", str(base / f"{name}-report"))
        assert done.returncode == 0, done.stderr
        out[name] = base / f"{name}-report" / "results.json"
    return out


def test_a_results_json_is_rendered_without_its_artifacts(analyzed, tmp_path):
    saved = tmp_path / "results.json"
    shutil.copy(analyzed["h200-resnet50"], saved)
    before = saved.read_bytes()
    done = hybrid("report", str(saved), "--html", "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    primary = json.loads(before)["diagnosis"]["primary_bottleneck"]["title"]
    assert "NVIDIA H200" in done.stdout and primary in " ".join(done.stdout.split())
    assert saved.read_bytes() == before  # shown, not re-analyzed or rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "results.json"]  # nothing beside it
    assert "Open the raw views" not in done.stdout  # its artifacts are not beside it
    assert (tmp_path / "report" / "report.html").is_file()
    assert f"report folder: {tmp_path / 'report'}  (results.json, report.txt, report.html)" in done.stderr


def test_a_run_directory_whose_artifacts_are_gone_is_rendered_from_its_results(analyzed, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(analyzed["h200-simple_cnn"], run / "results.json")
    done = hybrid("report", str(run))
    assert done.returncode == 0, done.stderr
    assert "keeps no raw artifacts: showing its results.json" in done.stderr
    assert "NVIDIA H200" in done.stdout


@pytest.mark.parametrize("threshold", ["nan", "inf", "-inf"])
def test_a_threshold_that_cannot_trip_is_refused(analyzed, threshold):
    done = hybrid(
        "compare",
        str(analyzed["h200-resnet50"]),
        str(analyzed["h200-resnet50"]),
        "--fail-on-regression",
        threshold,
    )
    assert done.returncode == 2 and "is not a number of percent" in done.stderr


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        ({}, "the candidate has no valid step time"),
        ({"schema_version": "1.0", "timing": {"step_time_ms": None}}, "the candidate has no valid step time"),
    ],
)
def test_a_candidate_without_a_step_time_leaves_the_gate_undecided(analyzed, tmp_path, candidate, reason):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(candidate))
    done = hybrid("compare", str(analyzed["h200-resnet50"]), str(path), "--fail-on-regression", "5")
    assert done.returncode == 5 and reason in done.stderr


def test_a_candidate_of_another_workload_is_refused_and_never_passes_the_gate(analyzed, tmp_path):
    refused = hybrid(
        "compare",
        str(analyzed["h200-resnet50"]),
        str(analyzed["h200-simple_cnn"]),
        "--fail-on-regression",
        "50",
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert "refusing to compare: models differ (resnet50 vs simple_cnn)" in refused.stderr
    done = hybrid(
        "compare",
        str(analyzed["h200-resnet50"]),
        str(analyzed["h200-simple_cnn"]),
        "--allow-different",
        "--fail-on-regression",
        "50",
        "--html",
        str(tmp_path / "compare.html"),
    )
    # simple_cnn's step is 90% faster: only the workload check can stop this gate passing.
    assert done.returncode == 5
    assert (
        "regression gate undecided (exit 5): the runs are of different workloads: models differ "
        "(resnet50 vs simple_cnn)" in done.stderr
    )
    assert done.stdout.startswith("WARNING: models differ")
    assert "WARNING: models differ" in (tmp_path / "compare.html").read_text()


def test_a_document_that_is_not_an_object_is_bad_input(analyzed, tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    done = hybrid("compare", str(analyzed["h200-resnet50"]), str(tmp_path / "list.json"))
    assert done.returncode == 2 and "holds a JSON list, not an object" in done.stderr


def test_every_option_says_what_it_does():
    command = typer.main.get_command(app)
    undocumented = [
        f"{name} {param.opts[0]}"
        for name, sub in command.commands.items()
        for param in sub.params
        if not getattr(param, "help", None)
    ]
    assert undocumented == []


def test_run_and_diagnose_share_the_module_ranges_default():
    command = typer.main.get_command(app)
    defaults = {
        name: next(p.default for p in command.commands[name].params if p.name == "nvtx_modules")
        for name in ("run", "diagnose")
    }
    assert defaults["run"] == defaults["diagnose"]


def test_doctor_says_how_to_get_what_is_missing():
    facts = diagnose_environment(probe_counters=False)
    text = render_doctor(facts)
    if facts["nsys"] is None:
        assert INSTALL_NSYS in text
    if facts["ncu"] is None:
        assert INSTALL_NCU in text
    refused = {**facts, "counters_permitted": False, "next_steps": None}
    assert "NVreg_RestrictProfilingToAdminUsers=0" in render_doctor(refused)


def test_an_unwritable_html_path_is_a_warning_not_a_traceback(analyzed):
    # A path under a regular file cannot be created (as root, permissions would not stop it).
    target = analyzed["h200-resnet50"] / "compare.html"
    done = hybrid(
        "compare", str(analyzed["h200-resnet50"]), str(analyzed["h200-resnet50"]), "--html", str(target)
    )
    assert done.returncode == 0 and f"warning: could not write {target}" in done.stderr
    assert "Step time (profiled steps):" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("document", ["{}", '{"timing": 5, "diagnosis": {"bottlenecks": [1]}}'])
def test_a_json_that_is_no_results_document_is_bad_input_for_report(tmp_path, document):
    path = tmp_path / "results.json"
    path.write_text(document)
    done = hybrid("report", str(path))
    assert done.returncode == 2 and "is not a complete results.json document" in done.stderr


def test_the_committed_seed_results_render(tmp_path):
    for document in sorted((ROOT / "tests" / "fixtures" / "seed-commands").glob("*/results.json")):
        shutil.copy(document, tmp_path / "results.json")
        done = hybrid("report", str(tmp_path / "results.json"))
        assert done.returncode == 0, (document, done.stderr)
        assert "NVIDIA H200" in done.stdout


def test_an_export_with_its_ncu_csv_reads_as_one_mode_throughout(tmp_path):
    run = RUNS / "h200-resnet50"
    export = tmp_path / "profile.sqlite"
    shutil.copy(run / "nsys" / "profile.sqlite", export)
    report = tmp_path / "report"
    done = hybrid(
        "report", str(export), "--ncu", str(run / "ncu" / "counters.csv"), "--html", "--out", str(report)
    )
    assert done.returncode == 0, done.stderr
    header, roofline = done.stdout.splitlines()[0], " ".join(done.stdout.split("Roofline:")[1].split()[:30])
    assert "mode hybrid" in header and "[measured (ncu)]" in roofline
    assert "mode hybrid" in (report / "report.txt").read_text().splitlines()[0]
    assert "measured (ncu)" in (report / "report.html").read_text()


def test_a_results_json_renders_without_importing_the_analysis(tmp_path):
    """Nothing to analyze in a results.json: `hybrid report` shows it without pandas, numpy or the pipeline
    (their import was half of its 0.58 s)."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('loaded', sorted({'pandas', 'numpy', 'torch', 'hybrid.pipeline'}"
        " & set(sys.modules)), file=sys.stderr))\n"
        "from hybrid.cli import main\n"
        "sys.argv = ['hybrid', 'report', sys.argv[1], '--out', sys.argv[2]]\n"
        "main()\n"
    )
    results = ROOT / "tests" / "fixtures" / "results" / "h200_simple_cnn.json"
    done = subprocess.run(
        [sys.executable, "-c", code, str(results), str(tmp_path / "shown")],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1"),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Step 3.87 ms" in done.stdout and (tmp_path / "shown" / "results.json").is_file()
    assert "loaded []" in done.stderr
