"""report.html opened in a real browser (headless Chromium, driven over the DevTools protocol on a pipe):
a report rendered by the real pipeline from an H200 nsys export whose module range is named
`<img src=x onerror=alert(1)>` shows that text inert, logs no console error, and draws its roofline points.
A control page that carries the same text unescaped does open the alert, so the checks can fail."""

from __future__ import annotations

import base64
import io
import json
import os
import select
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageChops

from hybrid.report.html_roofline import plotted_kernels

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (CI: .ci/install-browser.sh)"
)

ROOT = Path(__file__).resolve().parents[1]
SOURCE_RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"
PAYLOAD = "<img src=x onerror=alert(1)>"
PLANTED_LAYER = "features.0"  # a module range of the capture; the layer table lists it
WINDOW = (1400, 2000)
PAGE_LOAD_TIMEOUT_S = 30.0
# How each kind of roofline point is painted (html_report._kernel_point): a measured point is filled
# #cf222e at opacity 0.7 over the white plot, an estimated one is a hollow diamond stroked #8250df.
POINT_PAINT = {
    "measured": tuple(round(0.7 * c + 0.3 * 255) for c in (0xCF, 0x22, 0x2E)),
    "estimated": (0x82, 0x50, 0xDF),
}


def plant_range_name(export: Path, old: str, new: str) -> None:
    """Rename an NVTX range in an nsys export: names are registered strings
    (NVTX_EVENTS.textId -> StringIds)."""
    with sqlite3.connect(export) as db:
        renamed = db.execute("UPDATE StringIds SET value = ? WHERE value = ?", (new, old)).rowcount
        used = db.execute(
            "SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = ?", (new,)
        ).fetchone()[0]
    assert renamed == 1 and used > 0, f"the export has no NVTX range named {old!r}"


@dataclass
class PageVisit:
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, failed loads
    dom: dict = field(default_factory=dict)
    screenshot: bytes = b""
    screenshot_without_points: bytes = b""  # the same window with the roofline points hidden
    element_screenshot: bytes = b""  # the element asked for, wherever it sits on the page


# Runs in the page after load: what the DOM holds and where the roofline points were laid out.
DOM_PROBE = """(() => {
  const svg = document.querySelector('svg[aria-label="roofline"]');
  const box = svg ? svg.getBoundingClientRect() : null;
  const points = [...document.querySelectorAll('svg .kernel')].map(p => {
    const r = p.getBoundingClientRect();
    return {cls: p.getAttribute('class'), title: p.querySelector('title').textContent,
            x: r.x, y: r.y, w: r.width, h: r.height};
  });
  return {images: document.images.length, scripts: document.scripts.length,
          code: [...document.querySelectorAll('code')].map(c => c.textContent),
          svg: box && {x: box.x, y: box.y, w: box.width, h: box.height, scrollY: window.scrollY}, points};
})()"""


HIDE_POINTS = "document.querySelectorAll('svg .kernel').forEach(p => { p.style.visibility = 'hidden'; })"


class Chromium:
    """One headless Chromium, spoken to over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-framed JSON)."""

    def __init__(self, user_data_dir: Path) -> None:
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()

        def wire_pipes() -> None:  # in the child: the protocol pipes must sit on fds 3 and 4
            inbound, outbound = os.dup(to_browser), os.dup(from_browser)
            os.dup2(inbound, 3)
            os.dup2(outbound, 4)

        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={user_data_dir}",
                "--remote-debugging-pipe",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "about:blank",
            ],
            # The protocol fixes the fd numbers and pass_fds cannot renumber, so the child moves them;
            # the test process runs no threads that preexec_fn could deadlock with.
            preexec_fn=wire_pipes,  # noqa: PLW1509
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next_id, self.events = b"", 0, []

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited (code {self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and wait for its answer, keeping the events that arrive meanwhile."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + PAGE_LOAD_TIMEOUT_S
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + PAGE_LOAD_TIMEOUT_S
        seen = len(self.events)
        while True:
            while seen < len(self.events):
                event = self.events[seen]
                seen += 1
                if event.get("method") == "Page.javascriptDialogOpening":
                    # An open alert blocks the page; dismiss it (it has been recorded) so loading can finish.
                    self.call("Page.handleJavaScriptDialog", {"accept": False}, session)
                if event.get("method") == method and event.get("sessionId") == session:
                    return
            self.events.append(self._receive(deadline))

    def _screenshot(self, session: str) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"}, session)["data"])

    def visit(self, page: Path, element_js: str | None = None) -> PageVisit:
        """Load page and report what happened; element_js (an expression giving one element) is also
        photographed on its own."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        first_event = len(self.events)
        self.call("Page.navigate", {"url": page.resolve().as_uri()}, session)
        self.wait_for("Page.loadEventFired", session)
        visit = PageVisit()
        visit.dom = self.call("Runtime.evaluate", {"expression": DOM_PROBE, "returnByValue": True}, session)[
            "result"
        ]["value"]
        visit.screenshot = self._screenshot(session)
        self.call("Runtime.evaluate", {"expression": HIDE_POINTS}, session)
        visit.screenshot_without_points = self._screenshot(session)
        if element_js:
            box = self.call(
                "Runtime.evaluate",
                {
                    "expression": f"(() => {{ const r = ({element_js})"
                    ".getBoundingClientRect(); return {x: r.x + scrollX, y: r.y + scrollY,"
                    " width: r.width, height: r.height, scale: 1}; })()",
                    "returnByValue": True,
                },
                session,
            )["result"]["value"]
            visit.element_screenshot = base64.b64decode(
                self.call(
                    "Page.captureScreenshot",
                    {"format": "png", "clip": box, "captureBeyondViewport": True},
                    session,
                )["data"]
            )
        for event in self.events[first_event:]:
            if event.get("sessionId") != session:
                continue
            params, method = event.get("params") or {}, event.get("method")
            if method == "Page.javascriptDialogOpening":
                visit.dialogs.append(params.get("message", ""))
            elif method == "Runtime.exceptionThrown":
                visit.errors.append(json.dumps(params.get("exceptionDetails")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                visit.errors.append(json.dumps(params.get("args")))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                visit.errors.append(params["entry"].get("text", ""))
        self.call("Target.closeTarget", {"targetId": target})
        return visit

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def _render(run_dir: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "hybrid", "report", str(run_dir), "--html", "--out", str(run_dir)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory) -> Path:
    """The H200 simple_cnn run with one module range renamed to the payload, rendered by
    `hybrid report --html`."""
    run_dir = tmp_path_factory.mktemp("xss") / "run"
    shutil.copytree(SOURCE_RUN, run_dir)
    plant_range_name(run_dir / "nsys" / "profile.sqlite", PLANTED_LAYER, PAYLOAD)
    return _render(run_dir)


@pytest.fixture(scope="module")
def torch_only_run(tmp_path_factory) -> Path:
    """The same run's torch pass alone: its roofline points are estimated from operator shapes."""
    run_dir = tmp_path_factory.mktemp("torch-only") / "run"
    shutil.copytree(SOURCE_RUN / "torch", run_dir / "torch")
    shutil.copy(SOURCE_RUN / "run.json", run_dir / "run.json")
    return _render(run_dir)


def _crop(png: bytes, box: dict) -> Image.Image:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return image.crop(
        (
            max(int(box["x"]), 0),
            max(int(box["y"]), 0),
            min(int(box["x"] + box["w"]), image.width),
            min(int(box["y"] + box["h"]), image.height),
        )
    )


def _painted(visit: PageVisit, box: dict) -> bool:
    """Whether hiding the points changed any pixel inside box: something was drawn there."""
    return (
        ImageChops.difference(
            _crop(visit.screenshot, box), _crop(visit.screenshot_without_points, box)
        ).getbbox()
        is not None
    )


def _pixels_near(png: bytes, rgb: tuple[int, int, int], box: dict, tolerance: int = 40) -> int:
    """Pixels inside box within tolerance of rgb on every channel (antialiasing blurs the edges)."""
    pixels = np.asarray(_crop(png, box), dtype=int)
    return int((np.abs(pixels - np.array(rgb)) <= tolerance).all(axis=-1).sum())


LAYER_TABLE_JS = (
    "[...document.querySelectorAll('h2')].find(h => h.textContent.startsWith('Layers')).nextElementSibling"
)


def test_planted_range_name_is_inert_in_the_browser(browser, planted_run, tmp_path):
    page = planted_run / "report.html"
    visit = browser.visit(page, element_js=LAYER_TABLE_JS)
    (tmp_path / "report.png").write_bytes(visit.screenshot)
    (tmp_path / "layers.png").write_bytes(visit.element_screenshot)  # the name, shown as text
    assert PAYLOAD in (planted_run / "results.json").read_text()  # it reached the results as a layer name

    assert visit.dialogs == []
    assert visit.errors == []
    assert visit.dom["images"] == 0 and visit.dom["scripts"] == 0
    # the name is on the page as text, in the layer table, exactly as the program wrote it
    assert PAYLOAD in visit.dom["code"]
    assert PLANTED_LAYER not in visit.dom["code"]


@pytest.mark.parametrize(
    ("run", "kind", "label"),
    [("planted_run", "measured", "[measured (ncu)]"), ("torch_only_run", "estimated", "[estimated]")],
)
def test_roofline_points_are_drawn_with_their_hover_text(browser, request, tmp_path, run, kind, label):
    run_dir = request.getfixturevalue(run)
    results = json.loads((run_dir / "results.json").read_text())
    kernels = plotted_kernels(results)
    assert kernels and {k["source"].startswith("measured:") for k in kernels} == {kind == "measured"}
    visit = browser.visit(run_dir / "report.html")
    (tmp_path / "report.png").write_bytes(visit.screenshot)
    assert visit.dialogs == [] and visit.errors == []

    svg, points = visit.dom["svg"], visit.dom["points"]
    assert svg and svg["w"] > 0 and svg["y"] + svg["h"] <= WINDOW[1], (
        "the chart is laid out inside the window"
    )
    assert len(points) == len(kernels)
    assert all(p["cls"].split() == ["kernel", kind] for p in points)
    for point in points:
        assert point["w"] > 0 and point["h"] > 0
        assert svg["x"] <= point["x"] and point["x"] + point["w"] <= svg["x"] + svg["w"]
        assert svg["y"] <= point["y"] and point["y"] + point["h"] <= svg["y"] + svg["h"]
    # hover text: name, AI, FLOP/s and FLOPs, DRAM bytes and rate, and where the numbers came from
    titles = [p["title"].split("\n") for p in points]
    assert sorted(t[0] for t in titles) == sorted(k["name"] for k in kernels)
    for lines in titles:
        assert lines[1].startswith("AI ") and "FLOP/s" in lines[2] and lines[2].endswith("FLOP")
        assert lines[3].startswith("DRAM ") and " at " in lines[3] and lines[-1] == label
        assert lines[4].startswith("time ") and lines[4].endswith("of the step")  # its share of the step
    by_name = {k["name"]: k for k in kernels}
    for lines in titles:  # the precision each point ran in, next to its rate
        precision = by_name[lines[0]].get("precision")
        assert precision is None or lines[2].split(",")[0].endswith(f" {precision}")
    # the browser really painted them: each point's box changes when the points are hidden, and the
    # paint of that kind (also in the legend, which stays) is in the chart only while they show
    assert all(_painted(visit, point) for point in points)
    assert _pixels_near(visit.screenshot, POINT_PAINT[kind], svg) > _pixels_near(
        visit.screenshot_without_points, POINT_PAINT[kind], svg
    )


def test_control_page_with_the_unescaped_name_does_run_it(browser, planted_run, tmp_path):
    """The checks above can fail: the same text unescaped opens the alert. With the report's content
    security policy in place the inline handler is blocked even then, and the browser says so."""
    page = (planted_run / "report.html").read_text()
    escaped = "&lt;img src=x onerror=alert(1)&gt;"
    assert escaped in page
    raw = page.replace(escaped, PAYLOAD)
    without_policy = tmp_path / "control.html"
    without_policy.write_text(
        raw[: raw.index('<meta http-equiv="Content-Security-Policy"')]
        + raw[raw.index(">", raw.index('<meta http-equiv="Content-Security-Policy"')) + 1 :]
    )
    control = browser.visit(without_policy)
    assert control.dialogs and set(control.dialogs) == {"1"}  # one alert per place the name is shown
    assert control.dom["images"] >= 1

    with_policy = tmp_path / "control-csp.html"
    with_policy.write_text(raw)
    guarded = browser.visit(with_policy)
    assert guarded.dialogs == []
    assert any("Content Security Policy" in error for error in guarded.errors), guarded.errors
