#!/usr/bin/env bash
# What one client connection costs the gateway in RSS (KiB), HTTP/1.1 and HTTP/2, idle, busy and
# abusive (unread pipelined answers; HTTP/2 streams with a zero window): benches/connections.py.
#   bash benches/connections.sh                # 100 connections per scenario, each held 4 s
#   CONNS=200 HOLD=6 bash benches/connections.sh
#   BIN=/path/to/aap-gateway bash benches/connections.sh   # another build
# Prints a markdown table (docs/performance.md, "Connection cost").
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
  cargo build --release -q
  export BIN=target/release/aap-gateway
fi
# The Python venv of the test peers has the `h2` package.
[ -x target/upstreams-venv/bin/python ] || bash tests/upstreams/setup.sh >/dev/null
ulimit -n 65536 2>/dev/null || true
exec target/upstreams-venv/bin/python benches/connections.py
