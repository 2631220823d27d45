#!/usr/bin/env bash
# End-to-end tests of the AAP MCP endpoint with the official MCP client libraries, against
# every backend kind.
#
#   bash tests/sdk/run.sh [path-to-gateway-binary]
#
# Clients (each suite runs once per backend):
# - Python: PyPI mcp==2.3.0, modern path (MCP 2026-07-28, Client(mode="auto") probing
#   server/discover; plus mode="2026-07-28" pinned) and mode="legacy" (2025-11-25).
# - Node:   npm @modelcontextprotocol/client@2.4.0 (modern v2 client, versionNegotiation
#   {mode: "auto"}: server/discover probe, must adopt 2026-07-28).
# - Node:   npm @modelcontextprotocol/sdk@1.32.2 Client + StreamableHTTPClientTransport,
#   legacy path (MCP 2025-11-25 initialize / notifications/initialized).
#
# Backends (the tenant and its path stay the same; only [tenants.backend] changes):
# - embedded    the shipped gateway.toml (demo dealer from data/)
# - mcp-strict  kind = "mcp", revision "auto" -> tests/upstreams/strict_mcp_server.py (PyPI mcp 2.3.0)
# - mcp-legacy  kind = "mcp", revision "auto" -> tests/upstreams/legacy_mcp_server.mjs (npm sdk 1.32.2, SSE)
# - a2a         kind = "a2a"                  -> tests/upstreams/a2a_agent.py (a2a-sdk 1.3.0)
# The forwarding peers require a per-run random bearer token, which the generated config
# gives the gateway as `bearer_token` (it is never printed).
#
# Installs its own dependencies idempotently (venv in $REPO/target/sdk-venv, npm ci in
# tests/sdk/node, tests/upstreams/setup.sh for the peers), starts each peer and the gateway on
# free loopback ports with a temporary state dir, runs every suite, stops everything, and exits
# non-zero if anything failed.
#
# Environment overrides:
#   AAP_SDK_BACKENDS        backends to run          (default: "embedded mcp-strict mcp-legacy a2a")
#   AAP_GATEWAY_CONFIG      base gateway config      (default: $REPO/gateway.toml); the forwarding
#                           backends reuse it with [tenants.backend] replaced
#   AAP_GATEWAY_TENANT_PATH MCP path on the gateway  (default: /aap/3.0.0/demo-toyota/mcp)
#   AAP_GATEWAY_EXTRA_ARGS  extra gateway arguments  (word-split)
#   AAP_SDK_VENV            Python venv location     (default: $REPO/target/sdk-venv)
#   AAP_UPSTREAMS_VENV      peers' venv              (default: $REPO/target/upstreams-venv)
#   PYTHON                  interpreter for the venv (default: python3)
#   AAP_READY_TIMEOUT       seconds to wait for readiness (default: 60)

set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"

section() { printf '\n==================== %s ====================\n' "$*"; }
info() { printf '[sdk-e2e] %s\n' "$*"; }
die() { printf '[sdk-e2e] ERROR: %s\n' "$*" >&2; exit 2; }

# Resolve the binary (relative paths are relative to the caller's cwd) before anything else.
BIN="${1:-$REPO/target/release/aap-gateway}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
CONFIG="${AAP_GATEWAY_CONFIG:-$REPO/gateway.toml}"
TENANT_PATH="${AAP_GATEWAY_TENANT_PATH:-/aap/3.0.0/demo-toyota/mcp}"
VENV="${AAP_SDK_VENV:-$REPO/target/sdk-venv}"
UP_VENV="${AAP_UPSTREAMS_VENV:-$REPO/target/upstreams-venv}"
PYTHON="${PYTHON:-python3}"
READY_TIMEOUT="${AAP_READY_TIMEOUT:-60}"
BACKENDS="${AAP_SDK_BACKENDS:-embedded mcp-strict mcp-legacy a2a}"
NODE_DIR="$SCRIPT_DIR/node"
PY_DIR="$SCRIPT_DIR/python"
UP_DIR="$REPO/tests/upstreams"

export CI="${CI:-}" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false npm_config_progress=false

for b in $BACKENDS; do
  case "$b" in embedded|mcp-strict|mcp-legacy|a2a) ;; *) die "unknown backend in AAP_SDK_BACKENDS: $b" ;; esac
done

# ---------------------------------------------------------------------------------------------
section "Checks"
[ -x "$BIN" ] || die "gateway binary not found or not executable: $BIN (build it with: cargo build --release)"
[ -f "$CONFIG" ] || die "gateway config not found: $CONFIG"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "Python >= 3.10 required for mcp 2.3.0 (found $("$PYTHON" -V 2>&1))"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
[ "$NODE_MAJOR" -ge 20 ] || die "Node >= 20 required (found $(node -v))"
info "repo:     $REPO"
info "binary:   $BIN"
info "config:   $CONFIG"
info "backends: $BACKENDS"
info "python:   $("$PYTHON" -V 2>&1)   node: $(node -v)   npm: $(npm -v)"

# ---------------------------------------------------------------------------------------------
section "Python deps (PyPI mcp==2.3.0) -> $VENV"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" || die "could not create venv at $VENV"
fi
VPY="$VENV/bin/python"
"$VPY" -m pip install --quiet --progress-bar off -r "$PY_DIR/requirements.txt" \
  || die "pip install -r tests/sdk/python/requirements.txt failed"
info "$("$VPY" -m pip show mcp 2>/dev/null | sed -n 's/^Version: /mcp /p') / $("$VPY" -m pytest --version 2>&1)"

# ---------------------------------------------------------------------------------------------
section "Node deps (npm @modelcontextprotocol/client@2.4.0, @modelcontextprotocol/sdk@1.32.2) -> tests/sdk/node"
LOCK_SUM="$(sha256sum "$NODE_DIR/package-lock.json" | cut -d' ' -f1)"
STAMP="$NODE_DIR/node_modules/.aap-sdk-e2e-lock.sha256"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$LOCK_SUM" ]; then
  info "node_modules matches package-lock.json; skipping npm ci"
else
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed in $NODE_DIR"
  echo "$LOCK_SUM" > "$STAMP"
fi
pkg_version() { node -p "require('$NODE_DIR/node_modules/$1/package.json').version"; }
SDK_VER="$(pkg_version @modelcontextprotocol/sdk)"
CLIENT_VER="$(pkg_version @modelcontextprotocol/client)"
info "@modelcontextprotocol/sdk $SDK_VER, @modelcontextprotocol/client $CLIENT_VER"
[ "$SDK_VER" = "1.32.2" ] || die "expected @modelcontextprotocol/sdk 1.32.2, found $SDK_VER"
case "$CLIENT_VER" in 2.4.*) ;; *) die "expected @modelcontextprotocol/client 2.4.x, found $CLIENT_VER" ;; esac

if [ "$BACKENDS" != "embedded" ]; then
  section "Upstream peers (tests/upstreams/setup.sh)"
  AAP_UPSTREAMS_VENV="$UP_VENV" bash "$UP_DIR/setup.sh" --quiet || die "tests/upstreams/setup.sh failed"
  info "peers' venv: $UP_VENV"
fi

# ---------------------------------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/aap-sdk-e2e.XXXXXX")"
GW_PID=""
PEER_PID=""

stop_pid() {  # stop_pid PID: TERM, wait up to 5 s, then KILL
  local pid="$1"
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  return 0
}
stop_gateway() { stop_pid "$GW_PID"; GW_PID=""; }
stop_peer() { stop_pid "$PEER_PID"; PEER_PID=""; }
cleanup() {
  stop_gateway
  stop_peer
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() {  # free_ports N: prints N distinct free loopback TCP ports
  "$VPY" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks: s.close()
PY
}

probe() {  # probe ready|tcp PORT -> exit 0 when ready
  "$VPY" - "$@" <<'PY'
import socket, sys, urllib.request
kind, port = sys.argv[1], int(sys.argv[2])
try:
    if kind == "ready":
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            sys.exit(0 if r.status == 200 else 1)
    else:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        sys.exit(0)
except urllib.error.HTTPError:
    sys.exit(1)          # admin answers, but not ready yet
except OSError:
    sys.exit(3)          # nothing listening
PY
}

# write_config BACKEND PEER_PORT TOKEN OUT: the base config with [tenants.backend] replaced.
write_config() {
  "$VPY" - "$CONFIG" "$@" <<'PY'
import re, sys
base, backend, port, token, out = sys.argv[1:6]
tables = {
    "mcp-strict": f'kind = "mcp"\npeers = ["http://127.0.0.1:{port}"]\npath = "/mcp"\nrevision = "auto"\n',
    "mcp-legacy": f'kind = "mcp"\npeers = ["http://127.0.0.1:{port}"]\npath = "/mcp"\nrevision = "auto"\n',
    "a2a": f'kind = "a2a"\npeers = ["http://127.0.0.1:{port}"]\npath = "/a2a"\n',
}
body = tables[backend] + (
    "connect_timeout_ms = 2000\nrequest_timeout_ms = 15000\nhealth_check_interval_ms = 1000\n"
    f'bearer_token = "{token}"\n'
)
lines = open(base, encoding="utf-8").read().splitlines(keepends=True)
out_lines, skipping, replaced = [], False, 0
for line in lines:
    header = re.match(r"\s*\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?\s*(#.*)?$", line)
    if header:
        name = header.group(1)
        if name == "tenants.backend" or name.startswith("tenants.backend."):
            if name == "tenants.backend":
                out_lines.append("[tenants.backend]\n" + body + "\n")
                replaced += 1
            skipping = True
            continue
        skipping = False
    if not skipping:
        out_lines.append(line)
if replaced != 1:
    sys.exit(f"expected exactly one [tenants.backend] table in {base}, found {replaced}")
open(out, "w", encoding="utf-8").write("".join(out_lines))
PY
}

# start_peer BACKEND PORT TOKEN LOGDIR: starts the backend's peer and waits until it accepts TCP.
start_peer() {
  local backend="$1" port="$2" token="$3" dir="$4"
  case "$backend" in
    mcp-strict)
      AAP_MCP_TOKEN="$token" "$UP_VENV/bin/python" "$UP_DIR/strict_mcp_server.py" --port "$port" \
        --leads "$dir/peer-leads.jsonl" >/dev/null 2>"$dir/peer.log" </dev/null & ;;
    mcp-legacy)
      AAP_MCP_TOKEN="$token" node "$UP_DIR/legacy_mcp_server.mjs" --port "$port" \
        --leads "$dir/peer-leads.jsonl" >/dev/null 2>"$dir/peer.log" </dev/null & ;;
    a2a)
      AAP_A2A_TOKEN="$token" "$UP_VENV/bin/python" "$UP_DIR/a2a_agent.py" --port "$port" \
        --leads "$dir/peer-leads.jsonl" >/dev/null 2>"$dir/peer.log" </dev/null & ;;
  esac
  PEER_PID=$!
  local deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "$PEER_PID" 2>/dev/null; then
      wait "$PEER_PID" 2>/dev/null; info "peer exited early (rc=$?)"; PEER_PID=""; return 1
    fi
    if probe tcp "$port"; then info "peer ready on 127.0.0.1:$port"; return 0; fi
    sleep 0.2
  done
  info "peer not listening after 30s"
  return 1
}

start_gateway() {  # start_gateway CONFIG STATE_DIR LOG -> sets PORT, GW_PID
  local config="$1" state="$2" log="$3" admin
  read -r PORT admin < <(free_ports 2)
  info "gateway listen 127.0.0.1:$PORT  admin 127.0.0.1:$admin  state $state"
  # shellcheck disable=SC2086
  "$BIN" --config "$config" --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$admin" \
    --state-dir "$state" ${AAP_GATEWAY_EXTRA_ARGS:-} >"$log" 2>&1 </dev/null &
  GW_PID=$!
  local deadline=$((SECONDS + READY_TIMEOUT)) admin_silent_since=$SECONDS
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "$GW_PID" 2>/dev/null; then
      wait "$GW_PID" 2>/dev/null; info "gateway exited early (rc=$?)"; GW_PID=""; return 1
    fi
    probe ready "$admin"; local rc=$?
    if [ $rc -eq 0 ]; then info "gateway ready (GET /readyz -> 200 on admin port)"; return 0; fi
    if [ $rc -ne 3 ]; then admin_silent_since=$SECONDS; fi
    # Fallback: no admin listener at all for 5 s, but the MCP port accepts connections.
    if [ $rc -eq 3 ] && [ $((SECONDS - admin_silent_since)) -ge 5 ] && probe tcp "$PORT"; then
      info "gateway ready (admin /readyz not answering; MCP port accepts TCP connections)"; return 0
    fi
    sleep 0.2
  done
  info "gateway not ready after ${READY_TIMEOUT}s"
  return 1
}

# Result bookkeeping: one row per (backend, suite).
ROWS=()
TOTAL_PASS=0
TOTAL_FAIL=0
record() {  # record BACKEND SUITE RC PASS FAIL
  local backend="$1" suite="$2" rc="$3" pass="${4:-0}" fail="${5:-0}"
  # A runner that failed without reporting a failed test still counts as one failure.
  [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ] && fail=1
  TOTAL_PASS=$((TOTAL_PASS + pass)); TOTAL_FAIL=$((TOTAL_FAIL + fail))
  ROWS+=("$(printf '%-11s %-44s %s (%s passed, %s failed)' "$backend" "$suite" \
    "$([ "$rc" -eq 0 ] && echo PASS || echo FAIL)" "$pass" "$fail")")
}

run_pytest() {  # run_pytest BACKEND DIR
  local out="$2/pytest.out" rc pass fail last
  (cd "$REPO" && "$VPY" -m pytest -q -p no:cacheprovider tests/sdk/python) 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  last="$(grep -E '[0-9]+ (passed|failed|errors?)' "$out" | tail -n 1)"
  pass="$(grep -oE '[0-9]+ passed' <<<"$last" | grep -oE '[0-9]+' || true)"
  fail="$(grep -oE '[0-9]+ (failed|errors?)' <<<"$last" | awk '{s+=$1} END {print s+0}')"
  info "pytest exit code: $rc"
  record "$1" "python mcp 2.3.0 (auto, 2026-07-28, legacy)" "$rc" "${pass:-0}" "${fail:-0}"
}

run_node() {  # run_node BACKEND DIR FILE LABEL
  local out="$2/$(basename "$3").out" rc pass fail
  (cd "$REPO" && node --test --test-reporter=tap "$3") 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  pass="$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$out" | tail -n 1)"
  fail="$(awk '/^# (fail|cancelled) [0-9]+$/ {s+=$3} END {print s+0}' "$out")"
  info "node --test exit code: $rc"
  record "$1" "$4" "$rc" "${pass:-0}" "${fail:-0}"
}

run_backend() {  # run_backend BACKEND
  local backend="$1" dir="$WORK/$1" config token peer_port
  mkdir -p "$dir/state"
  section "Backend: $backend"
  if [ "$backend" = "embedded" ]; then
    config="$CONFIG"
  else
    read -r peer_port < <(free_ports 1)
    token="$("$VPY" -c 'import secrets; print(secrets.token_urlsafe(24))')"
    config="$dir/gateway.toml"
    write_config "$backend" "$peer_port" "$token" "$config" || { record "$backend" "config" 1 0 1; return; }
    info "config: $config ([tenants.backend] -> $backend peer on 127.0.0.1:$peer_port)"
    if ! start_peer "$backend" "$peer_port" "$token" "$dir"; then
      tail -n 40 "$dir/peer.log" | sed 's/^/    /'
      record "$backend" "peer start" 1 0 1; stop_peer; return
    fi
  fi
  local started=0
  for attempt in 1 2 3; do
    if start_gateway "$config" "$dir/state" "$dir/gateway.log"; then started=1; break; fi
    stop_gateway
    info "gateway start attempt $attempt failed; log:"; tail -n 40 "$dir/gateway.log" | sed 's/^/    /'
  done
  if [ $started -ne 1 ]; then record "$backend" "gateway start" 1 0 1; stop_peer; return; fi

  export AAP_GATEWAY_URL="http://127.0.0.1:$PORT$TENANT_PATH" AAP_SDK_BACKEND="$backend"
  info "AAP_GATEWAY_URL=$AAP_GATEWAY_URL"
  local fail_before=$TOTAL_FAIL

  section "$backend: Python mcp 2.3.0 (modern auto + pinned, and legacy)"
  run_pytest "$backend" "$dir"
  section "$backend: Node @modelcontextprotocol/client $CLIENT_VER (modern, versionNegotiation auto)"
  run_node "$backend" "$dir" tests/sdk/node/modern-client.test.mjs "node @modelcontextprotocol/client $CLIENT_VER (auto)"
  section "$backend: Node @modelcontextprotocol/sdk $SDK_VER (legacy 2025-11-25)"
  run_node "$backend" "$dir" tests/sdk/node/legacy-client.test.mjs "node @modelcontextprotocol/sdk $SDK_VER (legacy)"

  if [ -n "$GW_PID" ] && ! kill -0 "$GW_PID" 2>/dev/null; then
    info "gateway died during the tests"; record "$backend" "gateway alive" 1 0 1
  fi
  if [ -n "$PEER_PID" ] && ! kill -0 "$PEER_PID" 2>/dev/null; then
    info "peer died during the tests"; record "$backend" "peer alive" 1 0 1
  fi
  stop_gateway
  stop_peer
  unset AAP_GATEWAY_URL
  if [ $TOTAL_FAIL -ne $fail_before ]; then
    info "gateway log (last 60 lines, $dir/gateway.log):"
    tail -n 60 "$dir/gateway.log" | sed 's/^/    /'
    if [ -f "$dir/peer.log" ]; then
      info "peer log (last 30 lines):"; tail -n 30 "$dir/peer.log" | sed 's/^/    /'
    fi
  fi
}

for b in $BACKENDS; do run_backend "$b"; done

# ---------------------------------------------------------------------------------------------
section "Summary"
for r in "${ROWS[@]}"; do info "$r"; done
# One combined closing line in the plain "N passed, N failed" form.
echo "sdk-e2e: $TOTAL_PASS passed, $TOTAL_FAIL failed"
[ $TOTAL_FAIL -eq 0 ]
