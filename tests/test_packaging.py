"""The wheel carries hybrid/, nsight/ and the nsight/sql/ queries, and the queries load from the installed
package (importlib.resources), not from the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy of the sources alone: setuptools reuses a checkout's build/ folder, whose
    # leftovers from an earlier build would hide a package the configuration leaves out.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("hybrid", "nsight"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("hybrid_gpu_diagnosis-*.whl")
    return built


def test_wheel_ships_packages_queries_and_console_script(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sql_in_tree = sorted(p.name for p in (ROOT / "nsight" / "sql").glob("*.sql"))
    assert sql_in_tree, "no queries in nsight/sql/"
    for query in sql_in_tree:
        assert f"nsight/sql/{query}" in names
    in_tree = sorted(
        str(p.relative_to(ROOT)) for folder in ("hybrid", "nsight") for p in (ROOT / folder).rglob("*.py")
    )
    assert "hybrid/ledger/build.py" in in_tree and "hybrid/replay/simulate.py" in in_tree
    assert [m for m in in_tree if m not in names] == []
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "hybrid = hybrid.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_queries_load_from_the_installed_wheel(wheel, tmp_path):
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    # Run from an empty folder with only the unpacked wheel on the path: the source tree is invisible.
    code = (
        "import nsight.sqlite_export as e, nsight.sql as sql, pathlib, hybrid.pipeline; "
        "assert 'site' in pathlib.Path(sql.__file__).parts, sql.__file__; "
        "assert 'site' in pathlib.Path(hybrid.pipeline.__file__).parts, hybrid.pipeline.__file__; "
        "q = e.load_query('kernels'); print(len(q.sql))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 50
