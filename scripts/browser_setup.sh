#!/usr/bin/env bash
# Installs Debian's chromium for the rating app's browser test (tests/end_to_end/test_rating_app_browser.py).
# Playwright drives it through executable_path=/usr/bin/chromium, so no Playwright browser
# download is needed. Idempotent: does nothing when chromium is already installed.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y chromium
/usr/bin/chromium --version
