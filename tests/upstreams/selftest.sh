#!/usr/bin/env bash
# Self-test of the upstream test peers (strict MCP, legacy MCP, A2A 1.0) over plain HTTP.
#
#   bash tests/upstreams/selftest.sh
#
# Installs the dependencies first (setup.sh, idempotent), then runs selftest.py in the venv: it
# starts every peer variant on free loopback ports, checks the wire behaviour, validates the AAP
# payloads against schemas/, stops the peers, and prints `upstreams-selftest: N passed, N failed`.
# Exits non-zero on any failure.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
VENV="${AAP_UPSTREAMS_VENV:-$REPO/target/upstreams-venv}"

if ! bash "$SCRIPT_DIR/setup.sh" --quiet; then
  echo "upstreams-selftest: 0 passed, 1 failed"
  exit 1
fi
PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" "$SCRIPT_DIR/selftest.py"
