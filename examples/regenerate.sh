#!/usr/bin/env bash
# Re-analyzes the committed H200 resnet50 capture into examples/resnet50 with the current code, and takes
# the screenshot of its report.html (headless Chromium, .ci/install-browser.sh) when chromium is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r tests/fixtures/runs/h200-resnet50 "$tmp/run"
# Run from the scratch folder so the report names the run directory as `run`, not a temporary path.
(cd "$tmp" && NO_COLOR=1 COLUMNS=100 PYTHONPATH="$repo" python -m hybrid report run --html --verbose > /dev/null \
  && NO_COLOR=1 COLUMNS=100 PYTHONPATH="$repo" python -m hybrid report run | sed "s/ *$//" > run/report-default.txt)
mkdir -p examples/resnet50
cp "$tmp/run/results.json" "$tmp/run/report.txt" "$tmp/run/report.html" "$tmp/run/report-default.txt" examples/resnet50/
if command -v chromium >/dev/null 2>&1; then
  PYTHONPATH="$repo" python examples/screenshot.py examples/resnet50/results.json examples/resnet50/report.html examples/resnet50
fi
