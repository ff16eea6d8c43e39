"""Callsites: findings point at the user's lines, from the nsys pass's Python samples and the torch
pass's operator stacks, on real captures and real injector runs."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

from hybrid.analysis.callsites import NO_SAMPLES_NOTE, NO_STACKS_NOTE
from hybrid.load.nsys_export import load_nsys_export
from hybrid.load.torch_stacks import is_user_trace_file
from hybrid.load.torch_trace import load_torch_trace
from hybrid.pipeline import analyze_export, analyze_run_dir
from nsight import nsys
from nsight.python_frames import first_user_frame, is_user_file
from nsight.python_samples import layout_matches, read_python_samples
from nsight.sqlite_export import open_export

REPO = Path(__file__).resolve().parent.parent
PLANTED = REPO / "tests" / "fixtures" / "planted"
FIXTURES = REPO / "tests" / "fixtures" / "callsites"
OPS_SCRIPT = REPO / "tests" / "scripts" / "callsite_ops.py"
# `nsys profile --help` of nsys 2025.3.1 on the H200 box (GPU call A, session 3).
H200_HELP = (FIXTURES / "h200_nsys_2025.3.1_profile_help.txt").read_text()
# data_pageable_h2d under nsys 2025.3.1 with --python-sampling, exported by `nsys profile --export sqlite`
# (call A; trimmed to the window of its kernels, unreferenced strings dropped): 1 kHz sampling marks whose
# payloads the export left out.
NO_BLOBS_EXPORT = FIXTURES / "h200_data_pageable_h2d_sampled_no_blobs.sqlite"
# `python3 -c PROGRAM` under nsys 2025.3.1 --python-sampling, exported with --include-blobs=true (the
# callsites probe, benchmarks/probe/python_samples_export.sh; trimmed to the samples of its loop).
BLOBS_EXPORT = FIXTURES / "h200_python_samples_blobs.sqlite"
PROBE_LOOP_LINE = 6  # `total += (x @ x).sum().item()` in the probe's program


def _marked_line(script: Path, marker: str) -> int:
    return next(number for number, text in enumerate(script.read_text().splitlines(), 1) if marker in text)


def test_user_files_are_not_the_library_the_interpreter_or_hybrid():
    assert is_user_file("/home/me/project/train.py")
    assert is_user_file("train.py")
    # `hybrid diagnose --model resnet50` runs hybrid's model zoo as the workload: its lines are the user's.
    assert is_user_file("/root/repo/hybrid/models.py")
    for library in (
        "/usr/lib/python3.12/runpy.py",
        "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/module.py",
        "/usr/local/lib/python3.11/dist-packages/numpy/core/numeric.py",
        "<frozen runpy>",
        "<string>",
        "/root/repo/hybrid/inject.py",
        "/root/repo/hybrid/stepping.py",
        "/root/repo/hybrid/nvtx_ranges.py",
        # the injector since the package moved into folders (it named hybrid/inject/*.py as the user's)
        "/root/repo/hybrid/inject/stepping.py",
        "/root/repo/hybrid/inject/script.py",
        "/root/repo/hybrid/inject/nvtx_ranges.py",
        "",
    ):
        assert not is_user_file(library), library
    stack = [
        ("/x/site-packages/torch/_tensor.py", 10, "item"),
        ("/x/train.py", 42, "<module>"),
        ("/x/hybrid/inject.py", 5, "main"),
    ]
    assert first_user_frame(stack) == ("/x/train.py", 42, "<module>")
    # Inside hybrid's step marker (its final sync), the time is hybrid's, not the optimizer.step() line's.
    hook = [
        ("/x/site-packages/torch/cuda/__init__.py", 1, "synchronize"),
        ("/x/hybrid/stepping.py", 9, "step"),
        ("/x/site-packages/torch/optim/optimizer.py", 5, "wrapper"),
        ("/x/train.py", 50, "<module>"),
    ]
    assert first_user_frame(hook) is None
    # The profiler writes paths relative to the sys.path entry they were found under.
    assert not is_user_trace_file("torch/nn/modules/module.py")
    assert not is_user_trace_file("enum.py")
    assert is_user_trace_file("train.py") and is_user_trace_file("/abs/train.py")


def test_a_capture_without_python_samples_says_so():
    results = analyze_run_dir(PLANTED / "sync_item_per_microstep" / "run")
    findings = results["diagnosis"]["bottlenecks"]
    assert findings and all(f["callsites"] == [] for f in findings)
    assert results["diagnosis"]["primary_bottleneck"]["callsites"] == []
    assert any(note.startswith(NO_SAMPLES_NOTE) for note in results["limitations"])


@pytest.fixture(scope="module")
def stacked_trace(tmp_path_factory) -> Path:
    """The torch pass with --python-stacks on a CPU loop (a real injector subprocess)."""
    out = tmp_path_factory.mktemp("torch")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        inject_argv(out, "torch", str(OPS_SCRIPT), flags=["--python-stacks"]),
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / "trace.json"


def test_torch_stacks_place_item_and_cpu_tensor_creation_on_their_lines(stacked_trace):
    profile = load_torch_trace(stacked_trace)
    # The recorded Python calls read as samples too (every 100 us): the loop's lines, each on its thread.
    sampled = profile.samples.dropna(subset=["file"])
    assert len(sampled) and set(sampled["file"].map(lambda f: Path(f).name)) == {OPS_SCRIPT.name}
    assert set(sampled["line"]) <= set(range(1, len(OPS_SCRIPT.read_text().splitlines()) + 1))
    assert (profile.samples["end_ns"] - profile.samples["start_ns"] == 100_000).all()
    calls = profile.op_callsites
    for op, marker in (("aten::item", "CALLSITE: item"), ("aten::randn", "CALLSITE: randn")):
        rows = calls[calls["op"] == op]
        assert len(rows) == 1, rows
        row = rows.iloc[0]
        assert Path(row["file"]).name == OPS_SCRIPT.name
        assert row["line"] == _marked_line(OPS_SCRIPT, marker)
        assert row["function"] == "<module>" and row["ns"] > 0


def test_a_trace_without_stacks_has_no_op_callsites():
    trace = PLANTED / "cpu_tensors_then_moved" / "run" / "torch" / "trace.json.gz"
    assert load_torch_trace(trace).op_callsites.empty


def test_callsite_flags_are_those_the_installed_nsys_lists():
    assert nsys.callsite_sampling(H200_HELP, "off").flags == ()
    python = nsys.callsite_sampling(H200_HELP, "python")
    assert python.flags == ("--python-sampling=true", "--python-sampling-frequency=1000")
    assert not python.cpu_sampling and not python.missing and python.separate_export
    cuda = nsys.callsite_sampling(H200_HELP, "cuda")
    assert cuda.flags[2:] == ("--python-backtrace=cuda", "--cudabacktrace=sync:100000,memory:100000")
    argv = nsys.build_nsys_command(
        Path("nsys"), Path("out"), ["python3", "x.py"], capture_range=True, sampling=cuda
    )
    assert argv[argv.index("-s") + 1] == "process-tree"  # the CUDA backtraces need CPU sampling
    assert argv[argv.index("--export") + 1] == "none" and argv[-2:] == ["python3", "x.py"]
    # An nsys whose help lacks the Python options (before 2024.1): the pass runs as before, and says why.
    older = "\n".join(line for line in H200_HELP.splitlines() if "python" not in line.lower())
    degraded = nsys.callsite_sampling(older, "cuda")
    assert degraded.flags == () and degraded.missing == ("--python-sampling", "--python-backtrace")
    argv = nsys.build_nsys_command(
        Path("nsys"), Path("out"), ["python3", "x.py"], capture_range=True, sampling=degraded
    )
    assert argv[argv.index("--export") + 1] == "sqlite" and argv[argv.index("-s") + 1] == "none"


def _fake_nsys(path: Path, *, knows_blobs: bool) -> Path:
    """An `nsys export` stand-in that writes the -o file, and refuses --include-blobs if told to."""
    refuse = (
        "" if knows_blobs else 'case "$*" in *--include-blobs*) echo "unrecognised option"; exit 1;; esac\n'
    )
    path.write_text("#!/bin/sh\n" + refuse + 'while [ "$1" != "-o" ]; do shift; done; echo export > "$2"\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("knows_blobs", [True, False])
def test_the_export_keeps_payloads_where_nsys_can(tmp_path, knows_blobs):
    fake = _fake_nsys(tmp_path / "nsys", knows_blobs=knows_blobs)
    log = nsys.export_sqlite(fake, tmp_path / "profile", log_path=tmp_path / "export.log")
    assert (tmp_path / "profile.sqlite").read_text() == "export\n"
    runs = [line for line in log.splitlines() if line.startswith("$ ")]
    assert "--include-blobs=true" in runs[0]
    assert len(runs) == (1 if knows_blobs else 2)
    if not knows_blobs:
        assert "--include-blobs" not in runs[-1]
    assert (tmp_path / "export.log").read_text() == log


def test_an_export_without_the_sample_stacks_says_how_to_get_them():
    with closing(open_export(NO_BLOBS_EXPORT)) as export:
        assert layout_matches(export)  # the declared payload layout is the one decoded
    profile = load_nsys_export(NO_BLOBS_EXPORT)
    facts = profile.extras["nsys"]
    assert profile.samples.empty and facts["python_samples"] == facts["python_samples_without_stack"] > 100
    results = analyze_export(NO_BLOBS_EXPORT)
    assert all(f["callsites"] == [] for f in results["diagnosis"]["bottlenecks"])
    assert any(n.startswith(NO_STACKS_NOTE) and "--include-blobs=true" in n for n in results["limitations"])


def test_graph_breaks_carry_the_user_line_dynamo_recorded():
    import torch
    from torch._dynamo import utils as dynamo_utils

    from hybrid.analysis.callsites import _graph_break_callsites, _Paths
    from hybrid.inject.stepping import _graph_breaks
    from hybrid.profile import Profile

    def step(x):
        y = x * 2
        total = y.sum().item()  # GRAPH BREAK
        return y + total

    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    torch.compile(step, backend="eager")(torch.randn(8))
    breaks = _graph_breaks()
    line = _marked_line(Path(__file__), "# GRAPH BREAK")
    assert (
        breaks
        and breaks[0]["file"] == __file__
        and breaks[0]["line"] == line
        and breaks[0]["function"] == "step"
    )
    sites = _graph_break_callsites(Profile(extras={"graph_breaks": breaks}), _Paths(__file__, [__file__]))
    assert (
        sites[0]["file"] == Path(__file__).name
        and sites[0]["line"] == line
        and sites[0]["share_pct"] == 100.0
    )
    assert sites[0]["source_line"] == "total = y.sum().item()  # GRAPH BREAK"


def test_sample_stacks_decode_from_the_exported_payloads():
    with closing(open_export(BLOBS_EXPORT)) as export:
        assert layout_matches(export)
        program = read_python_samples(
            export, 0, 2**62, pick=lambda stack: next((f for f in stack if f[0] == "<string>"), None)
        )
    assert program.marks == len(program.start_ns) > 200 and program.without_stack == program.unreadable == 0
    lines = Counter(program.line.tolist())
    # The program spends its time in its loop; the int32 line numbers are read without the padding after them.
    assert lines.most_common(1)[0][0] == PROBE_LOOP_LINE and lines[PROBE_LOOP_LINE] > 0.9 * len(program.line)
    assert (
        Counter(
            f for f, line in zip(program.function, program.line, strict=False) if line == PROBE_LOOP_LINE
        ).most_common(1)[0][0]
        == "<module>"
    )


# -- planted scripts whose cause is one line, run through `hybrid run --mode nsys` on the H200 ------------
# (GPU calls C/D of session 3, benchmarks/jobs/s3_callsites.tsv; Python sampling at 1 kHz, the report
# exported with its payloads). tests/fixtures/callsites/planted/NAME/job.log has the exact command.

CAPTURES = FIXTURES / "planted"
PLANTED_SCRIPTS = REPO / "benchmarks" / "planted"


# Where a `# PLANTED` comment sits over a block, the block's last line (the rest of each script is the
# model's ordinary training step).
PLANTED_BLOCK_ENDS = {
    "cpu_numpy_augment": "augmented[i] = (image - MEAN) / STD",
    "cpu_roundtrip": "hard = torch.from_numpy",
    "cpu_tensors_then_moved": "t = torch.randint",
}


def _planted_lines(name: str) -> set[int]:
    """The script's planted lines: those marked `# PLANTED`, and the block under a marked comment."""
    lines = (PLANTED_SCRIPTS / f"{name}.py").read_text().splitlines()
    planted = set()
    for number, text in enumerate(lines, 1):
        if "# PLANTED" not in text:
            continue
        if text.lstrip().startswith("#"):
            last = next(
                n for n in range(number + 1, len(lines) + 1) if PLANTED_BLOCK_ENDS[name] in lines[n - 1]
            )
            planted |= set(range(number + 1, last + 1))
        else:
            planted.add(number)
    return planted


@pytest.fixture(scope="module")
def planted_results() -> dict[str, dict]:
    return {path.name: analyze_run_dir(path / "run") for path in sorted(CAPTURES.iterdir())}


@pytest.mark.parametrize("name", ["sync_item_per_microstep", "cpu_numpy_augment", "data_pageable_h2d"])
def test_the_primary_finding_points_at_the_planted_line(planted_results, name):
    results = planted_results[name]
    primary = results["diagnosis"]["primary_bottleneck"]
    top = primary["callsites"][0]
    assert top["file"] == f"{name}.py" and top["line"] in _planted_lines(name), (primary["id"], top)
    script_lines = (PLANTED_SCRIPTS / f"{name}.py").read_text().splitlines()
    assert top["source_line"] == script_lines[top["line"] - 1].strip() and top["function"] == "<module>"
    assert 40 < top["share_pct"] <= 100 and len(primary["callsites"]) <= 3
    shares = [c["share_pct"] for c in primary["callsites"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 100.1
    assert not any(n.startswith(("no callsites", NO_STACKS_NOTE)) for n in results["limitations"])


def test_the_sync_finding_points_at_the_item_call(planted_results):
    findings = {f["id"]: f for f in planted_results["sync_item_per_microstep"]["diagnosis"]["bottlenecks"]}
    top = findings["sync.per_step"]["callsites"][0]
    assert "loss.item()" in top["source_line"] and top["line"] in _planted_lines("sync_item_per_microstep")
    # The notes on counters the nsys-only run did not measure place no time, and say so.
    assert all(
        f["callsites"] == [] and f["callsite_reason"].startswith("no callsite: a note on counters")
        for f in findings.values()
        if f["category"] in ("OCCUPANCY", "MEMORY_HIERARCHY")
    )


def test_helper_modules_show_relative_to_the_scripts_folder(planted_results):
    sites = [
        c
        for f in planted_results["sync_item_per_microstep"]["diagnosis"]["bottlenecks"]
        for c in f["callsites"]
    ]
    sampler = next(c for c in sites if c["function"] == "next_indices")
    assert sampler["file"] == "_planted.py" and sampler["path"].endswith("/benchmarks/planted/_planted.py")


def test_the_terminal_and_html_show_the_planted_line(planted_results):
    from hybrid.report.html_report import render_html
    from hybrid.report.terminal import render_terminal

    results = planted_results["data_pageable_h2d"]
    line = next(iter(_planted_lines("data_pageable_h2d") - {24}))
    # Under the finding, the top line and its source (wrapped at the report's width).
    assert f"at data_pageable_h2d.py:{line}  images =" in render_terminal(results, color=False)
    page = render_html(results)
    assert (
        f"at <code>data_pageable_h2d.py:{line}</code>" in page and page.count('<ul class="callsites">') >= 1
    )


def test_only_python_files_named_by_a_profile_are_read_for_their_lines(tmp_path):
    """A received profile names its frames' files: a frame naming a file that is not Python source (an
    SSH key, a credentials file) gets no source line, so the report cannot print a line of it."""
    from hybrid.analysis.callsites import _Paths

    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = not-for-a-report\n")
    script = tmp_path / "train.py"
    script.write_text("import torch\nloss.backward()\n")
    paths = _Paths(str(script), [str(script), str(secret)])
    assert paths.source_line(str(secret), 1) is None
    assert paths.source_line(str(script), 2) == "loss.backward()"
