#!/usr/bin/env bash
# Installs the system packages the tests need (idempotent), after what the build
# needs (scripts/setup-build.sh, the only install of scripts/run.sh).
# Debian/Ubuntu: redis-server (shared-state tests), python3-venv, npm (the Node
# SDK peers and the conformance suite), chromium (the headless browser test,
# tests/it/browser.rs), faketime (an instance with a skewed clock,
# tests/it/redis_cluster.rs), libxml2-utils (xmllint validates ADF documents
# against the ADF 1.0 DTD, tests/it/adf.rs), postgresql (the fleet lead store),
# prometheus (promtool: the alert rule tests, scripts/alerts-test.sh).
# Runs apt-get only when something is missing.
set -euo pipefail
bash "$(dirname "$0")/setup-build.sh"
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v xmllint >/dev/null 2>&1 || missing+=(libxml2-utils)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
if ((${#missing[@]})); then
  echo "== installing system packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
