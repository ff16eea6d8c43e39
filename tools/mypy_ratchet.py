"""The type checker as a ratchet: mypy's error count over hybrid/ and nsight/ may only shrink.

    python tools/mypy_ratchet.py            # fails (exit 1) when the count grew past tools/mypy-baseline.txt
    python tools/mypy_ratchet.py --update   # writes today's count there, once you lowered it

The count, not the list, is the baseline: moving a line must not fail the check, fixing one lowers it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tools" / "mypy-baseline.txt"


def error_count() -> tuple[int, str]:
    """mypy's error count with the project's configuration (pyproject.toml [tool.mypy]), and its output."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"mypy could not check the code (exit {done.returncode}):\n{done.stderr or done.stdout}"
        )
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    return len(errors), done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write today's count as the baseline")
    args = parser.parse_args()
    count, output = error_count()
    baseline = int(BASELINE.read_text().split()[0])
    if args.update:
        if count > baseline:
            print(f"mypy: {count} errors, more than the baseline of {baseline}: fix them, do not raise it")
            return 1
        BASELINE.write_text(f"{count}\n")
        print(f"mypy: baseline {baseline} -> {count}")
        return 0
    if count > baseline:
        print(output, end="")
        print(
            f"mypy: {count} errors, {count - baseline} more than the baseline of {baseline} "
            f"({BASELINE.relative_to(ROOT)}): type the new code"
        )
        return 1
    update = f"; lower the baseline: python {Path(__file__).relative_to(ROOT)} --update"
    note = update if count < baseline else ""
    print(f"mypy: {count} errors (baseline {baseline}){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
