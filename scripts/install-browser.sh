#!/usr/bin/env bash
# The browser the console's browser tests drive (`-m browser`): Debian's chromium and its
# chromedriver, from apt (no browser download by Selenium). Idempotent; CI runs it as root.
set -euo pipefail

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-browser: run as root (apt-get install chromium chromium-driver)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
