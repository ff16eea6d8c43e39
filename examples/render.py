"""Renders examples/resnet50/ from ONE committed H200 capture with the analyzer of this checkout, or checks
that the committed files are what it renders, so that they cannot drift from the code (`make examples`,
tests/test_examples.py).

    python examples/render.py           # write examples/resnet50/, MADE_BY.txt and the README's copy
    python examples/render.py --check   # exit 1 naming each file the current analyzer renders otherwise

The capture is read where it is committed: `hybrid report` writes nothing into its input.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = "tests/fixtures/runs/h200-resnet50-default"  # session 3, --precision default, every pass
EXAMPLE = ROOT / "examples" / "resnet50"
STAMP = "MADE_BY.txt"
COLUMNS = "100"
# What `hybrid report CAPTURE --html --verbose --out DIR` saves, and the default terminal report it prints.
SAVED = ("results.json", "report.txt", "report.html")
PRINTED = "report-default.txt"
RENDERED = (*SAVED, PRINTED)


def _hybrid(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS=COLUMNS)
    done = subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"hybrid {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def render(folder: Path) -> None:
    """The example's files, rendered into `folder` (which must lie at examples/NAME, as the saved document
    names the capture's artifacts relative to itself)."""
    _hybrid("report", CAPTURE, "--html", "--verbose", "--out", str(folder))
    with tempfile.TemporaryDirectory() as scratch:  # the default report's own folder is not kept
        printed = _hybrid("report", CAPTURE, "--out", scratch).stdout
    # rich pads each line to the terminal's width: the committed text keeps none of it.
    (folder / PRINTED).write_text("".join(line.rstrip() + "\n" for line in printed.splitlines()))


def _comparable(name: str, text: str, python: str) -> str:
    """The file with what belongs to the machine that rendered it, not to the analyzer, left out: the
    Python version `python` (results.json tools.python, the page's tools row) and the last bits of floats
    that a reordered sum moves."""
    if name == "results.json":
        document = json.loads(text)
        document.get("tools", {}).pop("python", None)
        return json.dumps(_rounded(document), sort_keys=True, indent=1)
    if name == "report.html":
        return text.replace(f"python {python},", "python X,")
    return text


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


README = ROOT / "README.md"
# The README shows report-default.txt between these lines.
README_BLOCK = re.compile(
    r"(<!-- H200-EXAMPLE-OUTPUT:[^\n]*-->\n```\n)(.*?)(```\n<!-- /H200-EXAMPLE-OUTPUT -->)", re.DOTALL
)


def readme_with(printed: str, readme: str) -> str:
    """The README with `printed` as its shown report."""
    if not README_BLOCK.search(readme):
        sys.exit(f"{README} has no H200-EXAMPLE-OUTPUT block to hold {PRINTED}")
    return README_BLOCK.sub(lambda match: match[1] + printed + match[3], readme, count=1)


def differences(rendered: Path, committed: Path, readme: str | None = None) -> list[str]:
    """The files of `committed` that differ from those in `rendered`, each with its first differing line;
    with `readme`, also its shown report when that is not the rendered report-default.txt."""
    found = []
    if readme is not None and readme_with((rendered / PRINTED).read_text(), readme) != readme:
        found.append(f"README.md: its H200-EXAMPLE-OUTPUT block is not {PRINTED}")
    for name in RENDERED:
        if not (committed / name).is_file():
            found.append(f"{name}: missing")
            continue
        ours = _comparable(name, (rendered / name).read_text(), platform.python_version()).splitlines()
        theirs = _comparable(name, (committed / name).read_text(), _python_of(committed)).splitlines()
        if ours != theirs:
            line = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
            where = min(len(ours), len(theirs)) if line is None else line
            shown = ours[where] if where < len(ours) else "(end of file)"
            found.append(f"{name}: line {where + 1} renders as {shown[:160]!r}")
    return found


def _python_of(committed: Path) -> str:
    """The Python version the committed files were rendered with, from their results.json."""
    try:
        return str(json.loads((committed / "results.json").read_text())["tools"]["python"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"


def _stamp(folder: Path) -> None:
    from hybrid import __version__

    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", "hybrid", "nsight", "sql"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    code = f"git {head or 'unknown'}" + (" with uncommitted changes to the analyzer" if changed else "")
    (folder / STAMP).write_text(
        f"Rendered by hybrid {__version__} ({code}), Python {platform.python_version()}, from the committed "
        f"capture {CAPTURE}:\n\n"
        f"    hybrid report {CAPTURE} --html --verbose --out examples/resnet50   # {', '.join(SAVED)}\n"
        f"    COLUMNS={COLUMNS} hybrid report {CAPTURE} > {PRINTED}\n\n"
        "`make examples` renders them again; tests/test_examples.py fails when this checkout's\n"
        "analyzer renders anything else. report.png and timeline.png are headless-Chromium screenshots\n"
        "of report.html (examples/screenshot.py), taken only where Chromium is installed, not checked.\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a change")
    args = parser.parse_args()
    # Beside examples/resnet50, so that the saved document reaches the capture by the same relative path.
    scratch = Path(tempfile.mkdtemp(prefix=".render-", dir=EXAMPLE.parent))
    try:
        render(scratch)
        if args.check:
            found = differences(scratch, EXAMPLE, README.read_text())
            for line in found:
                print(line if line.startswith("README") else f"examples/resnet50/{line}", file=sys.stderr)
            if found:
                print("the analyzer renders the example otherwise: run `make examples`", file=sys.stderr)
            return 1 if found else 0
        for name in RENDERED:
            shutil.copyfile(scratch / name, EXAMPLE / name)
        _stamp(EXAMPLE)
        README.write_text(readme_with((EXAMPLE / PRINTED).read_text(), README.read_text()))
        if shutil.which("chromium"):
            subprocess.run(
                [
                    sys.executable,
                    "examples/screenshot.py",
                    str(EXAMPLE / "results.json"),
                    str(EXAMPLE / "report.html"),
                    str(EXAMPLE),
                ],
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
                check=True,
            )
        print(f"wrote {', '.join(RENDERED)} and {STAMP} in {EXAMPLE.relative_to(ROOT)}, and README.md's copy")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
