#!/usr/bin/env bash
# Install the dependencies of the upstream test peers, idempotently.
#
#   bash tests/upstreams/setup.sh [--quiet]
#
# - Python venv at $AAP_UPSTREAMS_VENV (default $REPO/target/upstreams-venv) with
#   tests/upstreams/requirements.txt (mcp==2.3.0, a2a-sdk==1.3.0, uvicorn, starlette, jsonschema,
#   opentelemetry-proto for the OTLP receiver).
#   pip runs only when requirements.txt changed since the last successful install.
# - `npm ci` in tests/upstreams/node (@modelcontextprotocol/sdk@1.32.2 from package-lock.json),
#   skipped when node_modules already matches the lock file.
# Then prints the commands that start each peer.
#
# Environment: AAP_UPSTREAMS_VENV (venv path), PYTHON (interpreter for the venv, default python3).

set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
VENV="${AAP_UPSTREAMS_VENV:-$REPO/target/upstreams-venv}"
PYTHON="${PYTHON:-python3}"
NODE_DIR="$SCRIPT_DIR/node"
QUIET=0
[ "${1:-}" = "--quiet" ] && QUIET=1

info() { [ "$QUIET" = 1 ] || printf '[upstreams-setup] %s\n' "$*"; }
die() { printf '[upstreams-setup] ERROR: %s\n' "$*" >&2; exit 2; }

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false npm_config_progress=false

command -v "$PYTHON" >/dev/null || die "$PYTHON not found"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "Python >= 3.10 required (found $("$PYTHON" -V 2>&1))"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || die "Node >= 20 required (found $(node -v))"

# ---- Python ----------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  info "creating venv $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" || die "could not create venv at $VENV"
fi
VPY="$VENV/bin/python"
REQ_SUM="$(sha256sum "$SCRIPT_DIR/requirements.txt" | cut -d' ' -f1)"
REQ_STAMP="$VENV/.aap-upstreams-requirements.sha256"
if [ -f "$REQ_STAMP" ] && [ "$(cat "$REQ_STAMP")" = "$REQ_SUM" ] \
   && "$VPY" -c 'import mcp, a2a, uvicorn, starlette, jsonschema, opentelemetry.proto, aiosmtpd' >/dev/null 2>&1; then
  info "venv matches requirements.txt; skipping pip"
else
  info "pip install -r tests/upstreams/requirements.txt"
  "$VPY" -m pip install --quiet --progress-bar off -r "$SCRIPT_DIR/requirements.txt" \
    || die "pip install -r tests/upstreams/requirements.txt failed"
  printf '%s\n' "$REQ_SUM" > "$REQ_STAMP"
fi

# ---- Node ------------------------------------------------------------------------------------
LOCK_SUM="$(sha256sum "$NODE_DIR/package-lock.json" | cut -d' ' -f1)"
NODE_STAMP="$NODE_DIR/node_modules/.aap-upstreams-lock.sha256"
if [ -f "$NODE_STAMP" ] && [ "$(cat "$NODE_STAMP")" = "$LOCK_SUM" ]; then
  info "node_modules matches package-lock.json; skipping npm ci"
else
  info "npm ci in tests/upstreams/node"
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci failed in $NODE_DIR"
  printf '%s\n' "$LOCK_SUM" > "$NODE_STAMP"
fi

if [ "$QUIET" = 0 ]; then
  MCP_V="$("$VPY" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
  A2A_V="$("$VPY" -c 'import importlib.metadata as m; print(m.version("a2a-sdk"))')"
  TS_V="$(node -p "require('$NODE_DIR/node_modules/@modelcontextprotocol/sdk/package.json').version")"
  info "installed: mcp $MCP_V, a2a-sdk $A2A_V (venv $VENV); @modelcontextprotocol/sdk $TS_V (tests/upstreams/node)"
  cat <<EOF

Start the peers (each serves the demo dealer from data/; Ctrl-C stops it):

  # strict MCP upstream, MCP 2026-07-28 + 2025-11-25, JSON responses      -> http://127.0.0.1:PORT/mcp
  $VPY $SCRIPT_DIR/strict_mcp_server.py --port 8711 --leads /tmp/strict-leads.jsonl [--sse] [--modern-only] [--legacy-sessions]

  # legacy MCP upstream, MCP 2025-11-25 only, stateful sessions, SSE      -> http://127.0.0.1:PORT/mcp
  node $SCRIPT_DIR/legacy_mcp_server.mjs --port 8712 --leads /tmp/legacy-leads.jsonl [--json-response]

  # A2A 1.0 upstream (card /.well-known/agent-card.json, JSON-RPC /a2a)   -> http://127.0.0.1:PORT/a2a
  AAP_A2A_TOKEN=secret $VPY $SCRIPT_DIR/a2a_agent.py --port 8713 --leads /tmp/a2a-leads.jsonl [--task-mode] [--int-numbers]

Self-test: bash $SCRIPT_DIR/selftest.sh
EOF
fi
