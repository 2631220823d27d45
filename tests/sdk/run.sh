#!/usr/bin/env bash
# End-to-end tests of the AAP MCP endpoint with the official MCP client libraries.
#
#   bash tests/sdk/run.sh [path-to-gateway-binary]
#
# - Python: PyPI mcp==2.3.0, modern path (MCP 2026-07-28, Client(mode="auto") probing
#   server/discover; plus mode="2026-07-28" pinned and mode="legacy" 2025-11-25).
# - Node:   npm @modelcontextprotocol/sdk@1.32.2 Client + StreamableHTTPClientTransport,
#   legacy path (MCP 2025-11-25 initialize / notifications/initialized).
#
# Installs its own dependencies idempotently (venv in $REPO/target/sdk-venv, npm ci in
# tests/sdk/node), starts the gateway on free loopback ports with a temporary state dir,
# runs both suites, stops the gateway, and exits non-zero if anything failed.
#
# Environment overrides:
#   AAP_GATEWAY_CONFIG      gateway config file      (default: $REPO/gateway.toml)
#   AAP_GATEWAY_TENANT_PATH MCP path on the gateway  (default: /aap/3.0.0/demo-toyota/mcp)
#   AAP_GATEWAY_EXTRA_ARGS  extra gateway arguments  (word-split)
#   AAP_SDK_VENV            Python venv location     (default: $REPO/target/sdk-venv)
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
PYTHON="${PYTHON:-python3}"
READY_TIMEOUT="${AAP_READY_TIMEOUT:-60}"
NODE_DIR="$SCRIPT_DIR/node"
PY_DIR="$SCRIPT_DIR/python"

export CI="${CI:-}" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false npm_config_progress=false

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
[ "$NODE_MAJOR" -ge 18 ] || die "Node >= 18 required (found $(node -v))"
info "repo:    $REPO"
info "binary:  $BIN"
info "config:  $CONFIG"
info "python:  $("$PYTHON" -V 2>&1)   node: $(node -v)   npm: $(npm -v)"

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
section "Node deps (npm @modelcontextprotocol/sdk@1.32.2) -> tests/sdk/node"
LOCK_SUM="$(sha256sum "$NODE_DIR/package-lock.json" | cut -d' ' -f1)"
STAMP="$NODE_DIR/node_modules/.aap-sdk-e2e-lock.sha256"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$LOCK_SUM" ]; then
  info "node_modules matches package-lock.json; skipping npm ci"
else
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed in $NODE_DIR"
  echo "$LOCK_SUM" > "$STAMP"
fi
SDK_VER="$(node -p "require('$NODE_DIR/node_modules/@modelcontextprotocol/sdk/package.json').version")"
info "@modelcontextprotocol/sdk $SDK_VER"
[ "$SDK_VER" = "1.32.2" ] || die "expected @modelcontextprotocol/sdk 1.32.2, found $SDK_VER"

# ---------------------------------------------------------------------------------------------
section "Start gateway"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/aap-sdk-e2e.XXXXXX")"
STATE_DIR="$WORK/state"
LOG="$WORK/gateway.log"
mkdir -p "$STATE_DIR"
GW_PID=""

stop_gateway() {
  if [ -n "$GW_PID" ] && kill -0 "$GW_PID" 2>/dev/null; then
    kill -TERM "$GW_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$GW_PID" 2>/dev/null && kill -KILL "$GW_PID" 2>/dev/null
    wait "$GW_PID" 2>/dev/null
  fi
  GW_PID=""
}
cleanup() {
  stop_gateway
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() {  # prints two distinct free loopback TCP ports
  "$VPY" - <<'PY'
import socket
socks = []
for _ in range(2):
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

start_gateway() {
  read -r PORT ADMIN < <(free_ports)
  info "listen 127.0.0.1:$PORT  admin 127.0.0.1:$ADMIN  state $STATE_DIR"
  # shellcheck disable=SC2086
  "$BIN" --config "$CONFIG" --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN" \
    --state-dir "$STATE_DIR" ${AAP_GATEWAY_EXTRA_ARGS:-} >"$LOG" 2>&1 </dev/null &
  GW_PID=$!
  local deadline=$((SECONDS + READY_TIMEOUT)) admin_silent_since=$SECONDS
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "$GW_PID" 2>/dev/null; then
      wait "$GW_PID" 2>/dev/null; info "gateway exited early (rc=$?)"; GW_PID=""; return 1
    fi
    probe ready "$ADMIN"; local rc=$?
    if [ $rc -eq 0 ]; then info "ready (GET /readyz -> 200 on admin port)"; return 0; fi
    if [ $rc -ne 3 ]; then admin_silent_since=$SECONDS; fi
    # Fallback: no admin listener at all for 5 s, but the MCP port accepts connections.
    if [ $rc -eq 3 ] && [ $((SECONDS - admin_silent_since)) -ge 5 ] && probe tcp "$PORT"; then
      info "ready (admin /readyz not answering; MCP port accepts TCP connections)"; return 0
    fi
    sleep 0.2
  done
  info "gateway not ready after ${READY_TIMEOUT}s"
  return 1
}

started=0
for attempt in 1 2 3; do
  if start_gateway; then started=1; break; fi
  stop_gateway
  info "start attempt $attempt failed; gateway log:"; tail -n 40 "$LOG" | sed 's/^/    /'
done
[ $started -eq 1 ] || die "could not start the gateway"

export AAP_GATEWAY_URL="http://127.0.0.1:$PORT$TENANT_PATH"
info "AAP_GATEWAY_URL=$AAP_GATEWAY_URL"

# ---------------------------------------------------------------------------------------------
section "Python: mcp 2.3.0 (modern auto + pinned, and legacy)"
PY_OUT="$WORK/pytest.out"
(cd "$REPO" && "$VPY" -m pytest -q -p no:cacheprovider tests/sdk/python) 2>&1 | tee "$PY_OUT"
PY_RC=${PIPESTATUS[0]}
info "pytest exit code: $PY_RC"

section "Node: @modelcontextprotocol/sdk 1.32.2 (legacy 2025-11-25)"
NODE_OUT="$WORK/node.out"
(cd "$REPO" && node --test --test-reporter=tap tests/sdk/node/) 2>&1 | tee "$NODE_OUT"
NODE_RC=${PIPESTATUS[0]}
info "node --test exit code: $NODE_RC"

# ---------------------------------------------------------------------------------------------
section "Stop gateway"
GW_DIED=0
if [ -n "$GW_PID" ] && ! kill -0 "$GW_PID" 2>/dev/null; then
  GW_DIED=1; info "gateway died during the tests"
fi
stop_gateway
if [ $PY_RC -ne 0 ] || [ $NODE_RC -ne 0 ] || [ $GW_DIED -ne 0 ]; then
  info "gateway log (last 60 lines, $LOG):"
  tail -n 60 "$LOG" | sed 's/^/    /'
fi

section "Summary"
info "python (mcp 2.3.0):                 $([ $PY_RC -eq 0 ] && echo PASS || echo "FAIL (rc=$PY_RC)")"
info "node (@modelcontextprotocol/sdk):   $([ $NODE_RC -eq 0 ] && echo PASS || echo "FAIL (rc=$NODE_RC)")"
# One combined closing line in the plain "N passed, N failed" form.
py_last="$(grep -E '[0-9]+ (passed|failed|errors?)' "$PY_OUT" | tail -n 1)"
py_pass="$(grep -oE '[0-9]+ passed' <<<"$py_last" | grep -oE '[0-9]+' || true)"
py_fail="$(grep -oE '[0-9]+ (failed|errors?)' <<<"$py_last" | awk '{s+=$1} END {print s+0}')"
node_pass="$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$NODE_OUT" | tail -n 1)"
node_fail="$(awk '/^# (fail|cancelled) [0-9]+$/ {s+=$3} END {print s+0}' "$NODE_OUT")"
total_pass=$(( ${py_pass:-0} + ${node_pass:-0} ))
total_fail=$(( ${py_fail:-0} + ${node_fail:-0} ))
# A runner that failed without reporting a failed test still counts as one failure.
[ $PY_RC -ne 0 ] && [ "${py_fail:-0}" -eq 0 ] && total_fail=$((total_fail + 1))
[ $NODE_RC -ne 0 ] && [ "${node_fail:-0}" -eq 0 ] && total_fail=$((total_fail + 1))
[ $GW_DIED -eq 0 ] || info "gateway:                            FAIL (exited during the tests)"
[ $GW_DIED -eq 0 ] || total_fail=$((total_fail + 1))
echo "sdk-e2e: $total_pass passed, $total_fail failed"
[ $PY_RC -eq 0 ] && [ $NODE_RC -eq 0 ] && [ $GW_DIED -eq 0 ]
