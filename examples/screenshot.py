"""Screenshots for the README, taken in headless Chromium from the report's own HTML: the top of report.html
(summary, roofline, first findings) and the one-step timeline, as palette PNGs small enough to commit.
Usage: python examples/screenshot.py RUN_RESULTS_JSON REPORT_HTML OUT_DIR"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

from hybrid.report.html_report import render_timeline_html

REPORT_WINDOW = (1200, 1700)  # CSS pixels: the page's 1100-pixel column, its first screen and a half
TIMELINE_WINDOW = (1200, 480)
COLOURS = 256  # a report is text, lines and a few flat colours: a palette keeps the PNG small


def screenshot(page: Path, out: Path, window: tuple[int, int]) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium not found (.ci/install-browser.sh installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={tmp}/profile", f"--window-size={window[0]},{window[1]}",
                        f"--screenshot={raw}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        Image.open(raw).convert("RGB").quantize(COLOURS, method=Image.Quantize.FASTOCTREE).save(out, optimize=True)


def main(results_path: Path, report: Path, out_dir: Path) -> None:
    screenshot(report, out_dir / "report.png", REPORT_WINDOW)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "timeline.html"
        page.write_text(render_timeline_html(json.loads(results_path.read_text())))
        screenshot(page, out_dir / "timeline.png", TIMELINE_WINDOW)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
