#!/usr/bin/env bash
# Headless Chromium for tests/test_browser.py (Debian's `chromium` package). Idempotent and quiet: does
# nothing when a chromium is already on PATH. CI runs as root; elsewhere it needs sudo.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
