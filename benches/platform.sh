#!/usr/bin/env bash
# The platform-scale table of issue 22, one run (see docs/performance.md, "Platform scale"):
# N tenants each the shipped demo dealer on its own path (kind embedded), and N kind = "mcp"
# tenants against one shared peer (the demo dealer on another listener), for every N in NS.
#   bash benches/platform.sh
#   NS="1 2000 10000" KINDS="embedded mcp" BIN=target/release/aap-gateway bash benches/platform.sh
# Then benches/platform/apply.py times a one-tenant apply (APPLY_NS, WATCH_MS).
# Knobs (environment): RELOADS=5 (reloads before "RSS after reloads" at N > 1), RELOADS_N1=100
# (at N = 1: RSS over 100 reloads), REPEAT=3 (timed SIGHUPs and POST /reloads, of those),
# THRU_SECS=5 and CONN=32 (wrk: search on one tenant, then spread over random tenants),
# MEM_GUARD_PCT=80 (a gateway whose RSS passes this share of MemAvailable while starting is stopped).
# Needs wrk and ulimit -n above the tenant count for builds that open a file per tenant.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ -z "${BIN:-}" ]; then
  cargo build --release -q
  BIN=target/release/aap-gateway
fi
BIN=$(realpath "$BIN")
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
BIN=$BIN python3 benches/platform/run.py
# One tenant file added, changed and removed on N embedded tenants while a client loop runs.
BIN=$BIN NS="${APPLY_NS:-2000 10000}" python3 benches/platform/apply.py
