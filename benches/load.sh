#!/usr/bin/env bash
# Load comparison on loopback, one run, same build (see docs/performance.md):
#   direct       wrk -> upstream (an aap-gateway serving the embedded dealer)
#   passthrough  wrk -> bare Pingora proxy (aap-gateway passthrough) -> upstream
#   relay        wrk -> gateway, kind = "relay" tenant (admission and mirror-header
#                       normalization only, the AAP contract not applied) -> upstream
#   full         wrk -> full gateway (kind = "mcp" backend: arguments and result
#                       validated, the answer re-encoded)                 -> upstream
# for a search tools/call with every mirror header omitted, and for server/discover.
# Prints requests/s, p50, p99, CPU time per request of each process and the
# full/passthrough ratios; every figure is the median of ROUNDS=3 interleaved runs.
#   bash benches/load.sh [DURATION_SECONDS=10] [CONNECTIONS=64]
# Then the search call once more at a fixed offered load below saturation (RATE=1000 req/s
# in all, spread over the same CONNECTIONS, exponential gaps between a connection's requests),
# so the latency columns show what each hop adds rather than how long the queue is.
#   RATE=0 bash benches/load.sh     # skip the paced comparison
#   PROFILE=dist bash benches/load.sh  # all four processes from the Docker image's build profile
#   BIN=/path/to/aap-gateway bash benches/load.sh  # all four processes from another build (a baseline
#                                   # commit, to compare two builds on one machine in one session)
#   SOAK=120 bash benches/load.sh   # then SOAK seconds of search load on the full gateway, RSS sampled
#                                   # every SOAK_EVERY=5 s (first/last/max printed)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
CONN=${2:-64}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
bash scripts/setup.sh
# PROFILE=dist measures the binary the Docker image ships (Cargo.toml [profile.dist]).
PROFILE=${PROFILE:-release}
if [ -z "${BIN:-}" ]; then
  cargo build --profile "$PROFILE" -q
  BIN=target/$PROFILE/aap-gateway
fi
WORK=$(mktemp -d)
PIDS=()
# SIGINT stops a gateway at once (SIGTERM would drain for seconds, and a run started meanwhile on the same
# ports would share them with the draining process through SO_REUSEPORT); anything still alive after 5 s is killed.
cleanup() {
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
UP=$(port); UPA=$(port); PT=$(port); FULL=$(port); FULLA=$(port); RELAY=$(port)
P=/aap/3.0.0/demo-toyota/mcp
# Generous quotas and no per-request limits: this measures the data path.
sed -e 's/lead_submit_per_hour = 30/lead_submit_per_hour = 0/' -e "s#\"data/#\"$PWD/data/#" gateway.toml > "$WORK/upstream.toml"
"$BIN" --config "$WORK/upstream.toml" --listen 127.0.0.1:$UP --admin-listen 127.0.0.1:$UPA --state-dir "$WORK/up" 2>/dev/null & PIDS+=($!)
"$BIN" --config "$WORK/upstream.toml" --listen 127.0.0.1:$PT --admin-listen 127.0.0.1:$(port) --state-dir "$WORK/pt" passthrough --upstream 127.0.0.1:$UP 2>/dev/null & PIDS+=($!)
# The same tenant with its backend swapped: an AAP contract over an MCP upstream (full)
# and a transparent relay to the same upstream (relay).
python3 - "$WORK/upstream.toml" "$WORK" "$UP" "$P" <<'PY'
import sys
src, out, up, path = sys.argv[1:]
s = open(src).read()
start = s.index("[tenants.backend]"); end = s.index("[tenants.rate_limit]")
peer = f'peers = ["http://127.0.0.1:{up}"]\npath = "{path}"\n'
for name, kind in (("full", 'kind = "mcp"\n' + peer + 'revision = "2026-07-28"\n'), ("relay", 'kind = "relay"\n' + peer)):
    open(f"{out}/{name}.toml", "w").write(s[:start] + "[tenants.backend]\n" + kind + "\n" + s[end:])
PY
FULL_OK=1
if "$BIN" check --config "$WORK/full.toml" >/dev/null 2>&1; then
  "$BIN" --config "$WORK/full.toml" --listen 127.0.0.1:$FULL --admin-listen 127.0.0.1:$FULLA --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
else
  FULL_OK=0; echo "note: this build has no kind = \"mcp\" backend; the full leg uses the embedded dealer directly" >&2
  "$BIN" --config "$WORK/upstream.toml" --listen 127.0.0.1:$FULL --admin-listen 127.0.0.1:$FULLA --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
fi
"$BIN" --config "$WORK/relay.toml" --listen 127.0.0.1:$RELAY --admin-listen 127.0.0.1:$(port) --state-dir "$WORK/relay" 2>/dev/null & PIDS+=($!)
for p in $UP $PT $FULL $RELAY; do wait_port $p; done
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
RATE=${RATE:-1000}
if [ "$RATE" -gt 0 ]; then
  # wrk's delay() hook: milliseconds a connection waits before its next request. Each of
  # the CONN connections sends about RATE/CONN requests a second, with exponential gaps
  # (a Poisson stream), seeded per wrk thread.
  { cat "$WORK/search.lua"; cat <<LUA
local mean_ms = $CONN * 1000 / $RATE
function init(args) math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16)) end
function delay() return math.floor(-math.log(1 - math.random()) * mean_ms) end
LUA
  } > "$WORK/paced.lua"
fi
ticks() { [ -n "$1" ] && awk '{print $14 + $15}' /proc/$1/stat || echo 0; }  # utime+stime, 1/CLK_TCK s
HZ=$(getconf CLK_TCK)
run() { # target port, script, proxy pid (empty for direct) -> "rps p50 p99 non2xx upstream_us proxy_us"
  local u0 g0 u1 g1
  u0=$(ticks "${PIDS[0]}"); g0=$(ticks "$3")
  wrk -t2 -c"$CONN" -d"${DUR}s" --latency -s "$WORK/$2.lua" "http://127.0.0.1:$1$P" > "$WORK/out" 2>&1
  u1=$(ticks "${PIDS[0]}"); g1=$(ticks "$3")
  python3 - "$WORK/out" "$((u1 - u0))" "$((g1 - g0))" "$HZ" <<'PY'
import sys, re
t = open(sys.argv[1]).read()
up_ticks, gw_ticks, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def ms(label):
    m = re.search(r'^\s*' + label + r'\s+([\d.]+)(us|ms|s)\s*$', t, re.M)
    if not m: return float('nan')
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == 'us' else v * 1000 if u == 's' else v
rps = float(re.search(r'Requests/sec:\s+([\d.]+)', t).group(1))
n = int(re.search(r'(\d+) requests in', t).group(1))
errs = re.search(r'Non-2xx or 3xx responses: (\d+)', t)
us = lambda ticks: ticks * 1e6 / hz / max(n, 1)
print(f"{rps:.0f} {ms('50%'):.2f} {ms('99%'):.2f} {errs.group(1) if errs else 0} {us(up_ticks):.0f} {us(gw_ticks):.0f}")
PY
}
SOAK=${SOAK:-0}
# cpu_us columns: CPU time (user + system) per request of the upstream and of the
# proxy in front of it (none for direct), from /proc/PID/stat over the run. They
# do not depend on how the 2 cores are shared, unlike req/s and latency.
printf '\n%-10s %-12s %10s %9s %9s %6s %9s %9s\n' workload target req/s p50_ms p99_ms non2xx up_cpu_us gw_cpu_us
ROUNDS=${ROUNDS:-3}
median() { python3 -c "import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
WORKLOADS="search discover"; [ "$RATE" -gt 0 ] && WORKLOADS+=" paced"
for w in $WORKLOADS; do
  declare -A R
  # Legs run interleaved, ROUNDS times; each column is the median over the rounds,
  # so a neighbour's burst of CPU use skews one round, not the table.
  declare -A ALL
  for round in $(seq "$ROUNDS"); do
    for t in direct passthrough relay full; do
      case $t in direct) p=$UP; g="";; passthrough) p=$PT; g=${PIDS[1]};; full) p=$FULL; g=${PIDS[2]};; relay) p=$RELAY; g=${PIDS[3]};; esac
      ALL[$t]+="$(run $p $w "$g")"$'\n'
    done
  done
  for t in direct passthrough relay full; do
    cols=()
    for c in 1 2 3 4 5 6; do
      cols+=("$(median $(printf '%s' "${ALL[$t]}" | awk -v c=$c 'NF {print $c}'))")
    done
    printf -v rps '%.0f' "${cols[0]}"; printf -v bad '%.0f' "${cols[3]}"
    printf -v upus '%.0f' "${cols[4]}"; printf -v gwus '%.0f' "${cols[5]}"
    R[$t]="$rps ${cols[1]} ${cols[2]} $gwus"
    [ "$t" != direct ] || gwus="-"
    printf '%-10s %-12s %10s %9.2f %9.2f %6s %9s %9s\n' "$w" "$t" "$rps" "${cols[1]}" "${cols[2]}" "$bad" "$upus" "$gwus"
  done
  read -r prps pp50 pp99 pus <<< "${R[passthrough]}"
  for t in relay full; do
    read -r frps fp50 fp99 fus <<< "${R[$t]}"
    if [ "$w" = paced ]; then
      python3 -c "print(f'paced      search at an offered {$RATE} req/s, $t vs passthrough: added p50 {${fp50}-${pp50}:+.2f} ms, added p99 {${fp99}-${pp99}:+.2f} ms, proxy CPU per request {${fus}/max(${pus},1):.2f}x')"
    else
      python3 -c "print(f'{\"$w\":<10} $t/passthrough throughput {${frps}/${prps}:.2f}, added p99 {${fp99}-${pp99}:+.2f} ms, proxy CPU per request {${fus}/max(${pus},1):.2f}x ({${fus}-${pus}:+.0f} us)')"
    fi
  done
  unset R ALL
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
