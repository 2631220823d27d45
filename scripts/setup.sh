#!/usr/bin/env bash
# Installs the system packages the build and the tests need (idempotent).
# Debian/Ubuntu: cmake (Pingora's zlib-ng build), redis-server (shared-state
# tests), python3-venv, chromium (the headless browser test, tests/it/browser.rs),
# faketime (an instance with a skewed clock, tests/it/redis_cluster.rs), postgresql
# (the PostgreSQL lead store tests start their own server from its binaries, tests/it/outbox.rs).
# Runs apt-get only when something is missing.
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
if ((${#missing[@]})); then
  echo "== installing system packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
