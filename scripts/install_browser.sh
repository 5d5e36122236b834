#!/usr/bin/env bash
# Installs Debian's headless Chromium and its WebDriver (the packages chromium and chromium-driver),
# which tests/test_judging.py drives; Playwright's and Selenium's own browser downloads are not
# needed. As root, or through sudo where it asks for no password; elsewhere it says what to run.
set -eo pipefail
as_root=
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then as_root='sudo -n'; else
    echo 'install the browser as root: apt-get install chromium chromium-driver' >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
log="${TMPDIR:-/tmp}/selfsup-browser-install.log"
started=$(date +%s)
if ! { $as_root apt-get update -qq && \
       $as_root apt-get install -y -qq --no-install-recommends chromium chromium-driver; } \
     > "$log" 2>&1; then
  tail -n 20 "$log" >&2
  exit 1
fi
echo "browser: chromium and chromium-driver installed in $(( $(date +%s) - started )) s" >&2
