"""Hostile surroundings, in real `python -m hybrid` subprocesses on the committed H200 captures: a terminal
that cannot encode the report, stdout on a full disk or closed by its reader, COLUMNS=0, names with escape
sequences on stderr, a gzip bomb as the torch trace, FIFOs where files belong, and nsys/ncu binaries that
never answer. Each ends with a documented exit code and a message, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "tests" / "fixtures" / "results" / "h200_simple_cnn.json"
H200_RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, NO_COLOR="1")
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


def hybrid(
    *args: str, timeout: float = 120, stdout=subprocess.PIPE, **extra: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        check=False,
        cwd=ROOT,
        env=_env(**extra),
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def non_ascii_results(tmp_path_factory) -> tuple[Path, dict]:
    """The H200 simple_cnn document with a kernel and a finding title that are not ASCII, and its
    `report --json` on a UTF-8 terminal: the reference each encoding's run is compared with, one run for
    both (the same command on the same file)."""
    document = json.loads(RESULTS.read_text())
    document["top_kernels"][0]["name"] = "fused_gelu_α→β<float>"
    document["diagnosis"]["bottlenecks"][0]["title"] += " — très lent"
    path = tmp_path_factory.mktemp("non_ascii") / "results.json"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path, json.loads(hybrid("report", str(path), "--json", PYTHONIOENCODING="utf-8").stdout)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_cannot_encode_the_report_still_gets_it(non_ascii_results, encoding):
    results, utf8 = non_ascii_results
    text = hybrid("report", str(results), "--verbose", PYTHONIOENCODING=encoding)
    assert text.returncode == 0, text.stderr.decode(errors="replace")
    shown = text.stdout.decode(encoding)
    assert "Step 3.87 ms" in shown and "Traceback" not in text.stderr.decode(errors="replace")
    if encoding == "ascii":
        assert "+- 316 us" in shown  # the report's own symbols have ASCII stand-ins
    carried = hybrid("report", str(results), "--json", PYTHONIOENCODING=encoding)
    assert carried.returncode == 0, carried.stderr.decode(errors="replace")
    assert json.loads(carried.stdout.decode(encoding)) == utf8  # the same strings, escaped as JSON allows
    assert utf8["top_kernels"][0]["name"] == "fused_gelu_α→β<float>"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [["report", str(RESULTS)], ["report", str(RESULTS), "--json"], ["compare", str(RESULTS), str(RESULTS)]],
)
def test_stdout_on_a_full_disk_is_exit_2_naming_it(args):
    with open("/dev/full", "wb") as full:
        done = hybrid(*args, stdout=full)
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "cannot write the output to stdout: No space left on device" in stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


@pytest.mark.parametrize("fail_on", [[], ["--fail-on", "LOW"]])
def test_a_reader_that_stops_reading_ends_the_output_quietly_keeping_the_exit_code(fail_on):
    """`hybrid report ... | head -0`: the reader is gone before hybrid's first write (it takes a second to
    start), so that write fails with EPIPE."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybrid", "report", str(RESULTS), "--verbose", *fail_on],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode == (1 if fail_on else 0), stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr
    if fail_on:
        assert "--fail-on LOW: [" in stderr  # the decision is still explained


def test_report_piped_into_head_exits_0_quietly():
    """The command a user types, `hybrid report RUN_DIR | head -1`, in a real shell with pipefail (so the
    status is hybrid's): head takes the first line and exits while the report is still being written."""
    report = shlex.join([sys.executable, "-m", "hybrid", "report", str(H200_RUN)])
    command = f"set -o pipefail; {report} | head -1"
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, check=False, cwd=ROOT, env=_env(), timeout=120
    )
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert done.stdout.decode().startswith("hybrid ") and done.stdout.count(b"\n") == 1
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr


@pytest.mark.parametrize("columns", ["0", "-5", "abc", "3"])
def test_a_columns_value_that_is_no_width_still_prints_the_report(columns):
    done = hybrid("report", str(RESULTS), COLUMNS=columns)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert len(lines) >= 15 and lines[0].startswith("hybrid")


def test_paths_on_stderr_carry_no_raw_escape_characters(tmp_path):
    evil = tmp_path / "run\x1b]0;pwned\x07\x1b[2J"
    shutil.copytree(H200_RUN, evil)
    done = hybrid("report", str(evil))
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stderr and b"\x07" not in done.stderr
    assert b"run\\x1b]0;pwned\\x07\\x1b[2J" in done.stderr  # named, as an escape
    missing = hybrid("report", str(tmp_path / "gone\x1b[31m"))
    assert missing.returncode == 2 and b"\x1b" not in missing.stderr and b"gone\\x1b[31m" in missing.stderr


def _bomb(size_bytes: int) -> bytes:
    """size_bytes of zeros as gzip members of 64 MiB each, one compressed and repeated (a gzip file may hold
    several members, read as one stream): 2 GiB in 2 MB for 0.24 s of CPU, where compressing all of it as
    one member took 6.7 s."""
    chunk = 2**26
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return (packer.compress(b"\x00" * chunk) + packer.flush()) * (size_bytes // chunk)


def test_a_gzip_bomb_as_the_torch_trace_is_refused_with_bounded_memory(tmp_path):
    """A 2 GiB trace of zeros in about 2 MB of gzip, beside an intact export: left out with a warning that
    names it. Peak memory (the child's max RSS) stays well under what decompressing it would take."""
    run = tmp_path / "run"
    shutil.copytree(H200_RUN, run)
    (run / "torch" / "trace.json.gz").write_bytes(_bomb(2 * 2**30))
    probe = (
        "import resource, subprocess, sys; done = subprocess.run([sys.executable, '-m', 'hybrid', "
        f"'report', {str(run)!r}, '--json'], capture_output=True, text=True); print(done.returncode); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(done.stdout, end='')"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    code, max_rss_kib, document = done.stdout.split("\n", 2)
    assert code == "0", done.stderr
    warnings = json.loads(document)["warnings"]
    assert any("decompression bomb" in w and "trace.json.gz" in w for w in warnings), warnings
    assert int(max_rss_kib) < 1.5 * 2**20, f"peak RSS {int(max_rss_kib) / 2**10:.0f} MiB"


@pytest.mark.parametrize(
    ("fifos", "code", "said"),
    [
        (["run.json"], 2, "not a regular file"),
        (
            ["torch/inject.json", "calibration.json", "nsys/inject.json"],
            0,
            "",
        ),  # left out: the rest is analyzed
        (["torch/trace.json.gz", "ncu/counters.csv"], 0, ""),  # named in the warnings
    ],
)
def test_a_fifo_in_a_received_run_directory_never_hangs_report(tmp_path, fifos, code, said):
    run = tmp_path / "run"
    shutil.copytree(H200_RUN, run)
    for fifo in fifos:
        (run / fifo).unlink(missing_ok=True)
        os.mkfifo(run / fifo)
    done = hybrid("report", str(run), "--json", timeout=90)
    assert done.returncode == code, done.stderr.decode()
    assert said.encode() in done.stderr and b"Traceback" not in done.stderr
    if "torch/trace.json.gz" in fifos:
        warnings = json.loads(done.stdout)["warnings"]
        for fifo in fifos:
            assert any(fifo in w and "not a regular file" in w for w in warnings), (fifo, warnings)


def test_fifos_given_to_report_and_compare_are_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "results.json")
    for args in (
        ["report", str(tmp_path / "results.json")],
        ["compare", str(RESULTS), str(tmp_path)],
        ["compare", str(tmp_path / "results.json"), str(RESULTS)],
    ):
        done = hybrid(*args, timeout=60)
        assert done.returncode == 2 and b"not a regular file" in done.stderr, done.stderr


def _stuck_tool(folder: Path, name: str) -> Path:
    """An `nsys`/`ncu` that never answers: a shell script whose child sleeps (and holds the output pipe)."""
    tool = folder / name
    tool.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > '{folder}/{name}.child'\nwait\n")
    tool.chmod(0o755)
    return tool


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


@pytest.mark.slow
def test_a_stuck_nsys_and_ncu_cannot_hang_doctor_and_leave_nothing_running(tmp_path):
    nsys, ncu = _stuck_tool(tmp_path, "nsys"), _stuck_tool(tmp_path, "ncu")
    started = time.monotonic()
    done = hybrid(
        "doctor", timeout=90, HYBRID_NSYS=str(nsys), HYBRID_NCU=str(ncu), HYBRID_PROBE_TIMEOUT_S="2"
    )
    elapsed = time.monotonic() - started
    stdout = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "timed out after 2" in stdout and "did not answer with a version within 2 s" in stdout
    assert "does not work" in stdout  # in the mode line and the steps to take
    assert elapsed < 60
    for name in ("nsys", "ncu"):
        child = int((tmp_path / f"{name}.child").read_text())
        assert not _alive(child), f"{name}'s child outlived the probe"
