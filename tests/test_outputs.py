"""Every output of every command goes through one writer (hybrid.files.write_file): nothing hybrid did not
make in this run is replaced without a numbered copy kept beside it, a file the command reads is never an
output, and an output path that is not a regular file (a folder, a FIFO) is refused without hanging.
Real `python -m hybrid` subprocesses on copies of the committed H200 captures."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
H200_RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"
RESULTS = ROOT / "tests" / "fixtures" / "results" / "h200_simple_cnn.json"
SCRIPTS = ROOT / "tests" / "scripts"


def hybrid(*args: str, timeout: float = 120, cwd: Path = ROOT, **extra: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, NO_COLOR="1", **extra)
    return subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def baseline(tmp_path) -> Path:
    """A run directory holding the committed H200 simple_cnn results.json, as a CI baseline would."""
    folder = tmp_path / "A"
    folder.mkdir()
    shutil.copy(RESULTS, folder / "results.json")
    return folder


def test_compare_html_onto_its_own_baseline_is_refused_before_anything_is_printed(baseline):
    before = digest(baseline / "results.json")
    done = hybrid("compare", str(baseline), str(RESULTS), "--html", str(baseline / "results.json"))
    assert done.returncode == 2, done.stderr
    assert "is an input of this command" in done.stderr and "fix:" in done.stderr
    assert done.stdout == ""
    assert digest(baseline / "results.json") == before
    assert sorted(p.name for p in baseline.iterdir()) == ["results.json"]


def test_compare_html_through_a_link_to_an_input_is_refused(baseline, tmp_path):
    before = digest(baseline / "results.json")
    (tmp_path / "page.html").symlink_to(baseline / "results.json")
    done = hybrid("compare", str(baseline), str(RESULTS), "--html", str(tmp_path / "page.html"))
    assert done.returncode == 2 and "is an input of this command" in done.stderr, done.stderr
    assert digest(baseline / "results.json") == before


def test_compare_html_onto_an_existing_file_keeps_it_as_a_numbered_copy(baseline, tmp_path):
    page = tmp_path / "compare.html"
    page.write_text("the user's notes\n")
    for expected_copies in (["compare.1.html"], ["compare.1.html", "compare.2.html"]):
        done = hybrid("compare", str(baseline), str(RESULTS), "--html", str(page))
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in tmp_path.glob("compare.*.html")) == expected_copies
        assert f"compare.html as {expected_copies[-1]}" in done.stderr
    assert (tmp_path / "compare.1.html").read_text() == "the user's notes\n"
    assert "<html" in (tmp_path / "compare.2.html").read_text() and "<html" in page.read_text()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_an_output_path_that_is_not_a_regular_file_is_left_alone_without_hanging(baseline, tmp_path, kind):
    page = tmp_path / "page.html"
    if kind == "fifo":
        os.mkfifo(page)
    else:
        page.mkdir()
        (page / "inside.txt").write_text("keep\n")
    done = hybrid("compare", str(baseline), str(RESULTS), "--html", str(page), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "is not a regular file" in done.stderr and "Traceback" not in done.stderr
    assert "Step time" in done.stdout  # the comparison itself is still printed
    assert page.is_fifo() if kind == "fifo" else (page / "inside.txt").read_text() == "keep\n"


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under `folder`: its digest and modification time, to show that nothing changed."""
    return {
        str(path.relative_to(folder)): (digest(path), path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_report_writes_a_new_folder_each_time_and_never_into_its_input(tmp_path):
    """The default: hybrid-reports/NAME-N in the working directory, a new N each time; a read-only copy of
    a committed capture (a received one may be shared) is analyzed without one byte written into it."""
    run = tmp_path / "h200-simple_cnn"
    shutil.copytree(H200_RUN, run)
    cwd = tmp_path / "work"
    cwd.mkdir()
    before = _tree(run)
    subprocess.run(["chmod", "-R", "a-w", str(run)], check=True)
    try:
        for number in (1, 2):
            # HYBRID_REPORTS_DIR empty: the default place, relative to the working directory.
            done = hybrid("report", str(run), "--html", cwd=cwd, HYBRID_REPORTS_DIR="")
            assert done.returncode == 0, done.stderr
            folder = cwd / "hybrid-reports" / f"h200-simple_cnn-{number}"
            assert sorted(p.name for p in folder.iterdir()) == ["report.html", "report.txt", "results.json"]
            assert f"report folder: hybrid-reports/h200-simple_cnn-{number}  (" in done.stderr
            assert "NVIDIA H200" in done.stdout
        assert _tree(run) == before
        # The saved document still opens the run's artifacts, from where it lies.
        again = hybrid("report", str(folder / "results.json"), cwd=cwd, HYBRID_REPORTS_DIR="")
        assert again.returncode == 0, again.stderr
        assert f"load {run / 'torch' / 'trace.json'}" in again.stdout
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(run)], check=True)


def test_a_working_directory_inside_the_input_puts_the_folder_beside_it(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(H200_RUN, run)
    before = _tree(run)
    done = hybrid("report", ".", cwd=run, HYBRID_REPORTS_DIR="")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "hybrid-reports" / "run-1" / "results.json").is_file()
    assert _tree(run) == before


def test_a_report_written_into_the_run_directory_as_asked_keeps_every_earlier_file(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(H200_RUN, run)
    (run / "report.txt").write_text("notes the user wrote into report.txt\n")
    for _ in range(2):
        done = hybrid("report", str(run), "--html", "--out", str(run))
        assert done.returncode == 0, done.stderr
    assert (run / "report.1.txt").read_text() == "notes the user wrote into report.txt\n"
    assert (run / "report.2.txt").read_text() == (run / "report.txt").read_text()
    assert (run / "report.1.html").read_text() == (run / "report.html").read_text()
    assert (run / "results.1.json").is_file() and not (run / "results.2.json").exists()
    assert "earlier files kept: results.json as results.1.json" in done.stderr


def test_a_report_into_a_folder_of_earlier_reports_keeps_the_earlier_page(tmp_path):
    export = tmp_path / "profile.sqlite"
    shutil.copy(H200_RUN / "nsys" / "profile.sqlite", export)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "report.html").write_text("an earlier page\n")
    done = hybrid("report", str(export), "--html", "--out", str(reports))
    assert done.returncode == 0, done.stderr
    assert (reports / "report.1.html").read_text() == "an earlier page\n"
    assert "NVIDIA H200" in (reports / "report.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.sqlite", "reports"]


def test_report_html_of_a_results_json_never_writes_beside_the_document(baseline):
    before = _tree(baseline)
    done = hybrid("report", str(baseline / "results.json"), "--html")
    assert done.returncode == 0, done.stderr
    assert _tree(baseline) == before
    folder = Path(done.stderr.split("report folder: ")[1].split("  (")[0])
    assert (folder / "report.html").is_file() and folder.name == "A-1"


@pytest.mark.slow
def test_a_run_rewrites_its_own_files_without_keeping_copies_of_them(tmp_path):
    """run.json is rewritten after each pass and results.json once: all made by this run, so no numbered
    copies appear in its directory."""
    out = tmp_path / "run"
    done = hybrid(
        "run",
        "--steps",
        "2",
        "--warmup",
        "1",
        "-q",
        "--out",
        str(out),
        str(SCRIPTS / "train_optimizer.py"),
        "--iters",
        "20",
        "--record",
        str(tmp_path / "record.json"),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "run.json").read_text())["passes"]
    assert [p.name for p in out.rglob("*.1.*")] == [] and "earlier files kept" not in done.stderr
