"""Committed captures name lines of scripts that live in this repository (hybrid/models.py for `hybrid
diagnose --model`, the planted, unmarked and stranger workloads, tests/scripts): the callsites a re-analysis
shows read those files as they are now, so a line added above a recorded one would make every report of
those captures quote the wrong code (a wrapped docstring in models.py made the resnet50 example point at
`else:` instead of `loss.backward()`). Each source line a capture recorded must still be at its line.
(benchmarks/results/postmove_h200 was recorded while models.py had that extra line: it is left out.)"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDED = [
    *sorted((REPO / "tests" / "fixtures").glob("**/results.json")),
    *sorted((REPO / "benchmarks" / "results" / "strangers_h200").glob("**/results.json")),
]
SCRIPT_FOLDERS = [REPO / "benchmarks" / d for d in ("planted", "unmarked", "strangers")] + [
    REPO / "tests" / "scripts"
]


def _in_repo(file: str) -> list[Path]:
    name = Path(file).name
    found = [REPO / file] + [folder / name for folder in SCRIPT_FOLDERS]
    found += list((REPO / "tests" / "scripts").glob(f"**/{name}"))
    return [path for path in found if path.is_file()]


def _recorded_sites() -> list[tuple[str, dict]]:
    sites = []
    for path in RECORDED:
        try:
            results = json.loads(path.read_text())
        except ValueError:
            continue  # the hostile-input fixtures
        if not isinstance(results, dict):
            continue
        for finding in (results.get("diagnosis") or {}).get("bottlenecks") or []:
            for site in finding.get("callsites") or []:
                if site.get("file") and site.get("source_line") and _in_repo(site["file"]):
                    sites.append((str(path.relative_to(REPO)), site))
    return sites


def test_every_recorded_source_line_is_still_at_its_line():
    sites = _recorded_sites()
    assert len(sites) >= 50  # resnet50's, the planted scripts', the stranger workloads'
    moved = []
    for capture, site in sites:
        texts = [p.read_text().splitlines() for p in _in_repo(site["file"])]
        if not any(
            len(t) >= site["line"] and t[site["line"] - 1].strip() == site["source_line"] for t in texts
        ):
            moved.append(f"{capture}: {site['file']}:{site['line']} was {site['source_line']!r}")
    assert moved == []
