"""Names from the profiled program cannot act on the terminal: a real H200 run directory whose busiest kernel
and one module range are renamed, in the nsys export itself, to strings carrying a window-title sequence,
clear-screen, BEL, a newline followed by a forged report line, a carriage return and a bidi override.
`hybrid report -v`, report.txt, report.html, `--json` and `hybrid compare` (real subprocesses) show them
escaped; the JSON document keeps the exact string."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"
FORGED = "hybrid · NVIDIA H200 · mode hybrid · CRITICAL forged"
KERNEL = f"evil\x1b]0;pwned\x07\x1b[2J\n{FORGED}\r\u202egnp.exe\x9b"
LAYER = "features.1\x1b[31m\u2066red\u2069"
RAW = ("\x1b", "\x07", "\r", "\u202e", "\u2066", "\x9b")


def _plant(export: Path) -> None:
    with sqlite3.connect(export) as db:
        (busiest,) = db.execute(
            "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName "
            "ORDER BY sum(end - start) DESC LIMIT 1"
        ).fetchone()
        db.execute("UPDATE StringIds SET value = ? WHERE id = ?", (KERNEL, busiest))
        renamed = db.execute("UPDATE StringIds SET value = ? WHERE value = 'features.1'", (LAYER,)).rowcount
    assert renamed == 1


def hybrid(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="200")
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
def planted(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    run = tmp_path_factory.mktemp("planted") / "run"
    shutil.copytree(SOURCE_RUN, run)
    _plant(run / "nsys" / "profile.sqlite")
    done = hybrid("report", str(run), "--verbose", "--html", "--out", str(run))
    assert done.returncode == 0, done.stderr
    return run, done


def _assert_inert(text: str, where: str) -> None:
    for char in RAW:
        assert char not in text, f"{where} carries {char!r} raw"
    assert not any(line.lstrip().startswith(FORGED) for line in text.splitlines()), f"{where}: a forged line"


def test_verbose_report_shows_the_names_escaped(planted):
    run, done = planted
    _assert_inert(done.stdout, "report -v")
    assert "evil\\x1b]0;pwned" in done.stdout  # the tables shorten the rest of it
    assert "features.1\\x1b[31m\\u2066red\\u2069" in done.stdout
    _assert_inert((run / "report.txt").read_text(), "report.txt")


def test_html_shows_the_names_escaped(planted):
    run, _ = planted
    page = (run / "report.html").read_text()
    _assert_inert(page, "report.html")
    assert "evil\\x1b]0;pwned\\x07" in page


def test_json_keeps_the_exact_name_and_escapes_it_in_its_own_syntax(planted):
    run, _ = planted
    done = hybrid("report", str(run), "--json")
    assert done.returncode == 0, done.stderr
    _assert_inert(done.stdout, "--json")
    names = [k["name"] for k in json.loads(done.stdout)["top_kernels"]]
    assert KERNEL in names


def test_compare_shows_the_names_escaped(planted, tmp_path):
    run, _ = planted
    original = tmp_path / "original"
    shutil.copytree(SOURCE_RUN, original)
    assert hybrid("report", str(original), "--json", "--out", str(original)).returncode == 0
    done = hybrid("compare", str(original), str(run), "--html", str(tmp_path / "compare.html"))
    assert done.returncode == 0, done.stderr
    _assert_inert(done.stdout, "compare")
    assert "evil\\x1b]0;pwned" in done.stdout
    _assert_inert((tmp_path / "compare.html").read_text(), "compare.html")
