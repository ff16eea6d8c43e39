"""The planted-bottleneck suite: every script compiles, the manifest covers the categories, each
twin differs from its script only by the fix, and a few scripts really run on the CPU (alone,
without hybrid, under the injector, and through benchmarks/run_planted.py)."""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

from hybrid.rules.base import CATEGORIES, SEVERITIES

REPO = Path(__file__).resolve().parents[1]
PLANTED = REPO / "benchmarks" / "planted"
MANIFEST = json.loads((PLANTED / "manifest.json").read_text())["scripts"]
SCRIPTS = sorted(p for p in PLANTED.glob("*.py") if p.name != "_planted.py")
# A fix is a few lines (a flag, a device= argument, a vectorized call); a twin that rewrites more
# than this is no longer "the same script with the one problem removed".
MAX_CHANGED_LINES_IN_TWIN = 30
RUN_TIMEOUT_S = 180


def _run(argv: list[str], cwd: Path = REPO, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, **kwargs
    )


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_script_compiles_and_documents_its_sizing(path: Path) -> None:
    source = path.read_text()
    compile(source, str(path), "exec")
    docstring = source.split('"""')[1]
    assert "H200" in docstring, f"{path.name} must explain its sizing for an H200 at the top"


def test_manifest_lists_every_script_and_existing_files() -> None:
    listed = set()
    for entry in MANIFEST:
        for role in ("script", "twin"):
            if entry[role] is not None:
                assert (PLANTED / entry[role]).is_file(), entry[role]
                listed.add(entry[role])
        assert entry["problem"] and entry["fix"]
    assert listed == {p.name for p in SCRIPTS}, "every script in benchmarks/planted belongs in the manifest"


def test_manifest_covers_every_single_gpu_category_and_has_healthy_controls() -> None:
    planted = [e for e in MANIFEST if e["expected_category"] != "none"]
    controls = [e for e in MANIFEST if e["expected_category"] == "none"]
    assert {e["expected_category"] for e in planted} <= set(CATEGORIES)
    assert {e["expected_category"] for e in planted} == set(CATEGORIES) - {"COMMUNICATION"}
    assert all(e["twin"] for e in planted)
    assert len(controls) >= 2
    assert all(e["max_severity"] in SEVERITIES and e["twin"] is None for e in controls)


@pytest.mark.parametrize("entry", [e for e in MANIFEST if e["twin"]], ids=lambda e: e["name"])
def test_twin_is_the_script_with_only_the_fix_changed(entry: dict) -> None:
    script = (PLANTED / entry["script"]).read_text().splitlines()
    twin = (PLANTED / entry["twin"]).read_text().splitlines()
    changed = [
        line
        for line in difflib.unified_diff(script, twin, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert 0 < len(changed) <= MAX_CHANGED_LINES_IN_TWIN, "\n".join(changed)
    planted_lines = [line for line in script if "PLANTED" in line]
    assert planted_lines, "the planted problem is marked in the script"
    assert not any("# PLANTED" in line for line in twin), "the twin still carries a planted line"
    assert any("FIXED" in line for line in twin)


def test_script_runs_on_cpu_without_hybrid_installed() -> None:
    # hybrid blocked in sys.modules: `from hybrid import mark_step` raises ImportError, as it would
    # where hybrid is not installed, and the script must still run.
    runner = (
        "import runpy, sys; sys.modules['hybrid'] = None; sys.argv = sys.argv[1:]; "
        "sys.path.insert(0, sys.argv[0].rsplit('/', 1)[0]); runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    script = PLANTED / "occ_few_row_cumsum.py"
    proc = _run([sys.executable, "-c", runner, str(script), "--device", "cpu", "--steps", "2"], cwd=PLANTED)
    assert proc.returncode == 0, proc.stderr
    assert "occ_few_row_cumsum: 2 steps on cpu" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cpu_roundtrip", "cpu_roundtrip_fixed", "data_loader_workers0_fixed"])
def test_script_runs_standalone_on_cpu(name: str) -> None:
    proc = _run(
        [sys.executable, str(PLANTED / f"{name}.py"), "--device", "cpu", "--steps", "2"], cwd=Path("/")
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{name}: 2 steps on cpu" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "step_source"),
    [("sync_item_per_microstep", "optimizer_hook"), ("mem_random_gather", "mark_step")],
)
def test_injector_counts_the_scripts_steps(tmp_path: Path, name: str, step_source: str) -> None:
    proc = _run(inject_argv(tmp_path, "plain", str(PLANTED / f"{name}.py"), "--device", "cpu", steps=2))
    assert proc.returncode == 0, proc.stderr
    inject = json.loads((tmp_path / "inject.json").read_text())
    assert inject["outcome"] == "step_limit"  # stopped after warmup + measured steps, not at loop end
    assert inject["measured_steps"] == 2
    assert inject["step_source"] == step_source


@pytest.mark.slow
def test_run_planted_keeps_going_past_a_failing_script(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("_planted.py", "healthy_bf16_gemm.py"):
        shutil.copy(PLANTED / name, suite / name)
    (suite / "crashes.py").write_text("raise RuntimeError('planted crash')\n")
    (suite / "manifest.json").write_text(
        json.dumps(
            {
                "scripts": [
                    {
                        "name": "crashes",
                        "script": "crashes.py",
                        "twin": None,
                        "expected_category": "SYNCHRONIZATION",
                        "problem": "raises at once",
                        "fix": "none",
                    },
                    {
                        "name": "healthy_bf16_gemm",
                        "script": "healthy_bf16_gemm.py",
                        "twin": None,
                        "expected_category": "none",
                        "max_severity": "MODERATE",
                        "problem": "none",
                        "fix": "none",
                    },
                ]
            }
        )
    )
    out = tmp_path / "results"
    proc = _run(
        [
            sys.executable,
            "benchmarks/run_planted.py",
            "--manifest",
            str(suite / "manifest.json"),
            "--modes",
            "torch",
            "--device",
            "cpu",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--out",
            str(out),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "planted_torch.json").read_text())
    rows = {row["name"]: row for row in report["rows"]}
    assert rows["crashes"]["verdict"] == "FAILED"
    assert "planted crash" in rows["crashes"]["script"]["error"]
    healthy = rows["healthy_bf16_gemm"]["script"]
    assert healthy["ok"] and healthy["step_time_ms"] > 0
    assert healthy["step_time_source"].startswith("measured: wall clock, plain pass")
    assert set(healthy["pass_wall_s"]) >= {"plain", "torch"}
    markdown = (out / "planted_torch.md").read_text()
    assert "benchmarks/run_planted.py --manifest" in markdown.split("```")[1]  # exact command on top
    assert "| crashes | SYNCHRONIZATION | failed:" in markdown


def test_run_planted_rejects_unknown_names() -> None:
    proc = _run([sys.executable, "benchmarks/run_planted.py", "--only", "no_such_script", "--modes", "torch"])
    assert proc.returncode == 2
    assert "graph_breaks" in proc.stderr
