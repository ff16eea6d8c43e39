#!/usr/bin/env bash
# Re-analyzes the committed H200 resnet50 capture into examples/resnet50 with the current code.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
cp -r tests/fixtures/runs/h200-resnet50 "$tmp/run"
NO_COLOR=1 COLUMNS=100 python -m hybrid report "$tmp/run" --html --verbose > /dev/null
NO_COLOR=1 COLUMNS=100 python -m hybrid report "$tmp/run" > "$tmp/run/report-default.txt"
mkdir -p examples/resnet50
cp "$tmp/run/results.json" "$tmp/run/report.txt" "$tmp/run/report.html" "$tmp/run/report-default.txt" examples/resnet50/
rm -rf "$tmp"
