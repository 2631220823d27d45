#!/usr/bin/env bash
# Agent frameworks that need a host compatibility profile, against the real gateway binary.
#
#   bash tests/sdk/compat/run.sh [path-to-gateway-binary]
#
# Clients (pinned in tests/sdk/compat/requirements.txt, one venv of their own because they
# need mcp 1.x while the official-SDK suites pin mcp 2.3.0): openai-agents (strict schemas),
# mcp-use (LangChain adapter), autogen-ext (mcp_server_tools). The pytest session starts the
# gateway itself (tests/sdk/compat/conftest.py) with four tenants: canonical, openai-strict,
# null-as-absent, no-type-arrays; each test shows the client failing on the canonical tenant
# and completing on the tenant with its profile.
#
# The venv ($AAP_COMPAT_VENV, default target/compat-venv) is reinstalled only when
# requirements.txt changes (its checksum is stamped in the venv), like tests/upstreams/setup.sh.

set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../../.." && pwd)"
BIN="${1:-$REPO/target/release/aap-gateway}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
VENV="${AAP_COMPAT_VENV:-$REPO/target/compat-venv}"
PYTHON="${PYTHON:-python3}"
info() { printf '[sdk-compat] %s\n' "$*"; }
die() { printf '[sdk-compat] ERROR: %s\n' "$*" >&2; exit 2; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1

[ -x "$BIN" ] || die "gateway binary not found: $BIN (cargo build --release)"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  info "creating venv $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" || die "could not create venv at $VENV"
fi
VPY="$VENV/bin/python"
REQ_SUM="$(sha256sum "$SCRIPT_DIR/requirements.txt" | cut -d' ' -f1)"
STAMP="$VENV/.aap-compat-requirements.sha256"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$REQ_SUM" ] \
   && "$VPY" -c 'import agents, mcp_use, autogen_ext.tools.mcp, email_validator, pytest' >/dev/null 2>&1; then
  info "venv matches requirements.txt; skipping pip"
else
  info "pip install -r tests/sdk/compat/requirements.txt"
  "$VPY" -m pip install --quiet --progress-bar off -r "$SCRIPT_DIR/requirements.txt" \
    || die "pip install -r tests/sdk/compat/requirements.txt failed"
  printf '%s\n' "$REQ_SUM" > "$STAMP"
fi
"$VPY" -m pip list 2>/dev/null | grep -iE '^(openai-agents|mcp-use|autogen-ext|mcp) ' | sed 's/^/[sdk-compat]   /'
cd "$REPO"
AAP_GATEWAY_BIN="$BIN" "$VPY" -m pytest -q -p no:cacheprovider tests/sdk/compat
