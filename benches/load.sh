#!/usr/bin/env bash
# Load comparison on loopback, one run, same build (see README "Performance"):
#   direct       wrk -> upstream (an aap-gateway serving the embedded dealer)
#   passthrough  wrk -> bare Pingora proxy (aap-gateway passthrough) -> upstream
#   full         wrk -> full gateway (kind = "mcp" backend)            -> upstream
# for a search tools/call with every mirror header omitted, and for server/discover.
# Prints requests/s, p50, p99 and the full/passthrough ratios.
#   bash benches/load.sh [DURATION_SECONDS=10] [CONNECTIONS=64]
#   SOAK=120 bash benches/load.sh   # then SOAK seconds of search load on the full gateway, RSS sampled
#                                   # every SOAK_EVERY=5 s (first/last/max printed)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
CONN=${2:-64}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
bash scripts/setup.sh
cargo build --release -q
BIN=target/release/aap-gateway
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
UP=$(port); UPA=$(port); PT=$(port); FULL=$(port); FULLA=$(port)
P=/aap/3.0.0/demo-toyota/mcp
# Generous quotas and no per-request limits: this measures the data path.
sed -e 's/lead_submit_per_hour = 30/lead_submit_per_hour = 0/' -e "s#\"data/#\"$PWD/data/#" gateway.toml > "$WORK/upstream.toml"
"$BIN" --config "$WORK/upstream.toml" --listen 127.0.0.1:$UP --admin-listen 127.0.0.1:$UPA --state-dir "$WORK/up" 2>/dev/null & PIDS+=($!)
"$BIN" --config "$WORK/upstream.toml" --listen 127.0.0.1:$PT --admin-listen 127.0.0.1:$(port) --state-dir "$WORK/pt" passthrough --upstream 127.0.0.1:$UP 2>/dev/null & PIDS+=($!)
python3 - "$WORK/upstream.toml" "$WORK/full.toml" "$UP" "$P" <<'PY'
import sys, re
src, dst, up, path = sys.argv[1:]
s = open(src).read()
start = s.index("[tenants.backend]"); end = s.index("[tenants.rate_limit]")
backend = f'[tenants.backend]\nkind = "mcp"\npeers = ["http://127.0.0.1:{up}"]\npath = "{path}"\nrevision = "2026-07-28"\n\n'
open(dst, "w").write(s[:start] + backend + s[end:])
PY
FULL_OK=1
if "$BIN" check --config "$WORK/full.toml" >/dev/null 2>&1; then
  "$BIN" --config "$WORK/full.toml" --listen 127.0.0.1:$FULL --admin-listen 127.0.0.1:$FULLA --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
else
  FULL_OK=0; echo "note: this build has no kind = \"mcp\" backend; the full leg uses the embedded dealer directly" >&2
  "$BIN" --config "$WORK/upstream.toml" --listen 127.0.0.1:$FULL --admin-listen 127.0.0.1:$FULLA --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
fi
for p in $UP $PT $FULL; do wait_port $p; done
START_RSS=$(awk '/VmRSS/{print $2}' /proc/${PIDS[2]}/status)
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
SEARCH="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{$META,\"name\":\"aap_inventory_search\",\"arguments\":{\"type\":\"inventory.search.request\",\"filters\":{\"make\":[\"Toyota\"],\"status\":[\"available\"]},\"pagination\":{\"limit\":5},\"sort\":{\"field\":\"price\",\"order\":\"asc\"}}}}"
DISCOVER="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{$META}}"
lua() { # $1 body -> lua file; no mirror headers on purpose
  python3 - "$1" > "$WORK/$2.lua" <<'PY'
import sys, json
print('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ' + json.dumps(sys.argv[1]))
PY
}
lua "$SEARCH" search; lua "$DISCOVER" discover
run() { # target port, script -> "rps p50 p99"
  wrk -t2 -c"$CONN" -d"${DUR}s" --latency -s "$WORK/$2.lua" "http://127.0.0.1:$1$P" > "$WORK/out" 2>&1
  python3 - "$WORK/out" <<'PY'
import sys, re
t = open(sys.argv[1]).read()
def ms(label):
    m = re.search(r'^\s*' + label + r'\s+([\d.]+)(us|ms|s)\s*$', t, re.M)
    if not m: return float('nan')
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == 'us' else v * 1000 if u == 's' else v
rps = float(re.search(r'Requests/sec:\s+([\d.]+)', t).group(1))
errs = re.search(r'Non-2xx or 3xx responses: (\d+)', t)
print(f"{rps:.0f} {ms('50%'):.2f} {ms('99%'):.2f} {errs.group(1) if errs else 0}")
PY
}
SOAK=${SOAK:-0}
printf '\n%-10s %-12s %10s %9s %9s %6s\n' workload target req/s p50_ms p99_ms non2xx
for w in search discover; do
  declare -A R
  for t in direct passthrough full; do
    case $t in direct) p=$UP;; passthrough) p=$PT;; full) p=$FULL;; esac
    read -r rps p50 p99 bad < <(run $p $w)
    R[$t]="$rps $p50 $p99"
    printf '%-10s %-12s %10s %9s %9s %6s\n' "$w" "$t" "$rps" "$p50" "$p99" "$bad"
  done
  read -r prps pp50 pp99 <<< "${R[passthrough]}"; read -r frps fp50 fp99 <<< "${R[full]}"
  python3 -c "print(f'{\"$w\":<10} full/passthrough throughput {${frps}/${prps}:.2f}, added p99 {${fp99}-${pp99}:+.2f} ms')"
  unset R
done
if [ "$SOAK" -gt 0 ]; then
  FPID=${PIDS[2]}
  EVERY=${SOAK_EVERY:-5}
  rss() { awk '/VmRSS/{print $2}' /proc/$FPID/status; }
  echo; echo "soak: ${SOAK}s of search load on the full gateway (pid $FPID, VmRSS ${START_RSS} KiB at start, before any load), VmRSS (KiB) every ${EVERY} s"
  wrk -t2 -c"$CONN" -d"${SOAK}s" --latency -s "$WORK/search.lua" "http://127.0.0.1:$FULL$P" > "$WORK/soak" 2>&1 &
  WRK=$!
  SAMPLES=("$(rss)")
  while kill -0 $WRK 2>/dev/null; do sleep "$EVERY"; SAMPLES+=("$(rss)"); done
  wait $WRK || true
  sleep 2; SAMPLES+=("$(rss)")
  echo "${SAMPLES[*]}"
  python3 - "$WORK/soak" "${SAMPLES[@]}" <<'PY'
import sys, re
t = open(sys.argv[1]).read(); s = [int(x) for x in sys.argv[2:] if x]
rps = re.search(r'Requests/sec:\s+([\d.]+)', t); n = re.search(r'(\d+) requests in', t)
bad = re.search(r'Non-2xx or 3xx responses: (\d+)', t); sock = re.search(r'Socket errors:.*', t)
p99 = re.search(r'^\s*99%\s+(\S+)', t, re.M)
print(f"soak: {n.group(1) if n else '?'} requests, {float(rps.group(1)) if rps else 0:.0f} req/s, p99 {p99.group(1) if p99 else '?'}, "
      f"non-2xx {bad.group(1) if bad else 0}{', ' + sock.group(0) if sock else ''}")
print(f"soak RSS KiB: first {s[0]}, last {s[-1]} (2 s after the load), max {max(s)}, samples {len(s)}")
PY
fi
[ "$FULL_OK" = 1 ] || echo "(full leg measured without an upstream hop)"
