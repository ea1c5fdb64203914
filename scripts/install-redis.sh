#!/usr/bin/env bash
# The server the shared-limits tests run (`-m redis`): Debian's redis-server, from apt. Only the
# binary is used: the tests start their own server on 127.0.0.1 at a random port. Idempotent;
# CI runs it as root.
set -euo pipefail

if command -v redis-server >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-redis: run as root (apt-get install redis-server)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends redis-server >/dev/null
command -v redis-server >/dev/null
