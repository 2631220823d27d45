#!/usr/bin/env bash
# Load comparison on loopback, one run, same build (see docs/performance.md):
#   direct       wrk -> upstream (an aap-gateway serving the embedded dealer)
#   nginx        wrk -> nginx (reverse proxy, keep-alive pool to the upstream) -> upstream:
#                       the floor of one HTTP hop, for scale
#   passthrough  wrk -> aap-gateway passthrough (the gateway's own HTTP/1.1 reader/writer and
#                       pooled upstream client, no MCP work)                -> upstream
#   relay        wrk -> gateway, kind = "relay" tenant (admission and mirror-header
#                       normalization only, the AAP contract not applied) -> upstream
#   full         wrk -> full gateway (kind = "mcp" backend: arguments and result
#                       validated, the answer re-encoded)                 -> upstream
# for a search tools/call with every mirror header omitted, and for server/discover.
# Prints requests/s, p50, p99, CPU time per request of each process (nginx: master and
# workers summed) and the full/passthrough and <leg>/nginx ratios; every figure is the
# median of ROUNDS=3 interleaved runs.
#   bash benches/load.sh [DURATION_SECONDS=10] [CONNECTIONS=64]
# Then the search call once more at a fixed offered load below saturation (RATE=1000 req/s
# in all, spread over the same CONNECTIONS, exponential gaps between a connection's requests),
# so the latency columns show what each hop adds rather than how long the queue is.
#   RATE=0 bash benches/load.sh     # skip the paced comparison
# Then a low-rate leg: LOW_RATE=7 req/s over LOW_CONN=4 connections for LOW_DUR=30 s per
# target (one pass, not ROUNDS), added p50/p99 over direct and CPU per request including
# what the proxy burns while idle.
#   LOW_RATE=0 bash benches/load.sh # skip the low-rate leg
# First of all, before any load: each proxy's CPU while idle over IDLE=10 s (ms of CPU per second;
# timers, health checks, background loops), the burn the low-rate leg's CPU per request includes.
#   IDLE=0 bash benches/load.sh     # skip the idle measurement
# Then HTTP/2: h2load against the full gateway (h2c, prior knowledge) and nginx (h2c), each
# also over HTTP/1.1 by the same client, CONNECTIONS/4 connections x 4 streams for h2 and
# CONNECTIONS connections for HTTP/1.1; the gateway's h2/HTTP/1.1 CPU per request ratio.
#   H2=0 bash benches/load.sh       # skip the HTTP/2 leg
#   PROFILE=dist bash benches/load.sh  # all gateway processes from the Docker image's build profile
#   PROFILE=pgo bash benches/load.sh   # from the profile-guided build (scripts/build-pgo.sh: two builds
#                                   # and a training run, ~20 minutes cold)
#   BIN=/path/to/aap-gateway bash benches/load.sh  # all gateway processes from another build (a baseline
#                                   # commit, to compare two builds on one machine in one session)
#   SOAK=120 bash benches/load.sh   # then SOAK seconds of search load on the full gateway, RSS sampled
#                                   # every SOAK_EVERY=5 s (first/last/max printed)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
CONN=${2:-64}
RATE=${RATE:-1000}
LOW_RATE=${LOW_RATE:-7}; LOW_CONN=${LOW_CONN:-4}; LOW_DUR=${LOW_DUR:-30}
IDLE=${IDLE:-10}
H2=${H2:-1}
ROUNDS=${ROUNDS:-3}
SOAK=${SOAK:-0}
# shellcheck source=benches/lib.sh
. benches/lib.sh
need wrk wrk
NGINX=/usr/sbin/nginx
[ -x "$NGINX" ] || need "$NGINX" nginx-light
[ "$H2" = 0 ] || need h2load nghttp2-client
bash scripts/setup.sh
# PROFILE=dist measures the binary the Docker image ships (Cargo.toml [profile.dist]).
PROFILE=${PROFILE:-release}
if [ -z "${BIN:-}" ]; then
  # pgo: the profile-guided build (scripts/build-pgo.sh trains an instrumented build first).
  if [ "$PROFILE" = pgo ]; then bash scripts/build-pgo.sh >/dev/null; else cargo build --profile "$PROFILE" -q; fi
  BIN=target/$PROFILE/aap-gateway
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { stop_pids; rm -rf "$WORK"; }
trap cleanup EXIT
UP=$(port); UPA=$(port); PT=$(port); FULL=$(port); FULLA=$(port); RELAY=$(port); NGX=$(port); NGX2=$(port)
P=/aap/3.0.0/demo-toyota/mcp
# Generous quotas and no per-request limits: this measures the data path. full.toml and relay.toml: the same
# tenant with its backend swapped, an AAP contract over an MCP upstream (full) and a transparent relay to the
# same upstream (relay).
bench_configs "$WORK" "$UP"
"$BIN" --config "$WORK/upstream.toml" --listen "127.0.0.1:$UP" --admin-listen "127.0.0.1:$UPA" --state-dir "$WORK/up" 2>/dev/null & PIDS+=($!)
"$BIN" --config "$WORK/upstream.toml" --listen "127.0.0.1:$PT" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/pt" passthrough --upstream "127.0.0.1:$UP" 2>/dev/null & PIDS+=($!)
# The HTTP/2 leg talks h2c to the full gateway itself, so its HTTP/1.1 and HTTP/2 figures come from
# one process; with h2c on, an HTTP/1.1 connection costs one look at its first bytes, nothing per request.
if [ "$H2" != 0 ]; then
  sed -i 's/^h2c = false/h2c = true/' "$WORK/full.toml"
  if ! "$BIN" check --config "$WORK/full.toml" >/dev/null 2>&1; then
    sed -i 's/^h2c = true/h2c = false/' "$WORK/full.toml"; H2=0
    echo "note: this build takes no h2c = true; the HTTP/2 leg is skipped" >&2
  fi
fi
FULL_OK=1
if "$BIN" check --config "$WORK/full.toml" >/dev/null 2>&1; then
  "$BIN" --config "$WORK/full.toml" --listen "127.0.0.1:$FULL" --admin-listen "127.0.0.1:$FULLA" --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
else
  FULL_OK=0; H2=0; echo "note: this build has no kind = \"mcp\" backend; the full leg uses the embedded dealer directly (no HTTP/2 leg)" >&2
  "$BIN" --config "$WORK/upstream.toml" --listen "127.0.0.1:$FULL" --admin-listen "127.0.0.1:$FULLA" --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
fi
"$BIN" --config "$WORK/relay.toml" --listen "127.0.0.1:$RELAY" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/relay" 2>/dev/null & PIDS+=($!)
# nginx in front of the same upstream, run as the current user from a prefix in the work dir. Worker processes:
# as many as the gateway's worker threads (`threads` in [server], the same for every gateway process here), so
# both proxies get the same number of event loops; each nginx worker is one single-threaded loop.
NWORKERS=$(awk '/^threads *=/ {print $3; exit}' "$WORK/upstream.toml")
mkdir -p "$WORK/nginx"
NUSER=""; [ "$(id -u)" != 0 ] || NUSER="user $(id -un) $(id -gn);"  # as root, workers would become nobody
cat > "$WORK/nginx/nginx.conf" <<NGINX
daemon off;
$NUSER
worker_processes ${NWORKERS:-2};
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  # No request count cap on a connection (the default, 1000, would reconnect wrk; the gateway has no cap).
  keepalive_requests 1000000;
  client_body_temp_path $WORK/nginx/body; proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi; uwsgi_temp_path $WORK/nginx/uwsgi; scgi_temp_path $WORK/nginx/scgi;
  upstream aap { server 127.0.0.1:$UP; keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$NGX;
    listen 127.0.0.1:$NGX2 http2;   # h2c with prior knowledge (nginx 1.22: a plaintext http2 port is h2 only)
    location / {
      proxy_pass http://aap;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$http_host;   # the client's Host (the gateways send the upstream's own; one short header either way)
    }
  }
}
NGINX
"$NGINX" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" & PIDS+=($!)
UPPID=${PIDS[0]}; PTPID=${PIDS[1]}; FULLPID=${PIDS[2]}; RELAYPID=${PIDS[3]}; NGXPID=${PIDS[4]}
for p in $UP $PT $FULL $RELAY $NGX $NGX2; do wait_port "$p"; done
START_RSS=$(awk '/VmRSS/{print $2}' "/proc/$FULLPID/status")
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
SEARCH="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{$META,\"name\":\"aap_inventory_search\",\"arguments\":{\"type\":\"inventory.search.request\",\"filters\":{\"make\":[\"Toyota\"],\"status\":[\"available\"]},\"pagination\":{\"limit\":5},\"sort\":{\"field\":\"price\",\"order\":\"asc\"}}}}"
DISCOVER="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{$META}}"
printf '%s' "$SEARCH" > "$WORK/search.json"  # h2load's request body
lua() { # $1 body -> lua file; no mirror headers on purpose
  python3 - "$1" > "$WORK/$2.lua" <<'PY'
import sys, json
print('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ' + json.dumps(sys.argv[1]))
PY
}
lua "$SEARCH" search; lua "$DISCOVER" discover
paced_lua() { # name connections rate: the search call with wrk's delay() hook, milliseconds a connection
  # waits before its next request. Each connection sends about rate/connections requests a second, with
  # exponential gaps (a Poisson stream), seeded per wrk thread. wrk starts a request's clock when it writes
  # the request, not when the delay began, so latency is per request.
  { cat "$WORK/search.lua"; cat <<LUA
local mean_ms = $2 * 1000 / $3
function init(args) math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16)) end
function delay() return math.floor(-math.log(1 - math.random()) * mean_ms) end
LUA
  } > "$WORK/$1.lua"
}
[ "$RATE" -gt 0 ] && paced_lua paced "$CONN" "$RATE"
[ "$LOW_RATE" -gt 0 ] && paced_lua low "$LOW_CONN" "$LOW_RATE"
# utime+stime (1/CLK_TCK s) of a process and of its children: nginx is a master and its workers, all
# counted (the master's share is near zero); a gateway is one process, its threads are in its own stat.
# With `sys` as $2: "utime+stime stime", the kernel's part beside the whole, from the same read.
ticks() {
  [ -n "$1" ] || { [ "${2:-}" = sys ] && echo "0 0" || echo 0; return; }
  local p files=()
  for p in "$1" $(pgrep -P "$1" || true); do files+=("/proc/$p/stat"); done
  cat "${files[@]}" 2>/dev/null | awk -v sys="${2:-}" '{s += $14 + $15; k += $15}
    END {if (sys == "sys") print s + 0, k + 0; else print s + 0}'
}
HZ=$(getconf CLK_TCK)
# Reads one wrk output or h2load per-request log -> "rps p50 p99 non2xx upstream_us proxy_us proxy_sys_us".
cat > "$WORK/stats.py" <<'PY'
import sys, re
kind, path, out = sys.argv[1:4]
up_ticks, gw_ticks, hz, gw_sys = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
t = open(out).read()
rps = float(re.search(r'(?:Requests/sec:\s+|finished in [\d.]+m?s, )([\d.]+)', t).group(1))
if kind == 'wrk':
    def ms(label):
        m = re.search(r'^\s*' + label + r'\s+([\d.]+)(us|ms|s)\s*$', t, re.M)
        if not m: return float('nan')
        v, u = float(m.group(1)), m.group(2)
        return v / 1000 if u == 'us' else v * 1000 if u == 's' else v
    n = int(re.search(r'(\d+) requests in', t).group(1))
    errs = re.search(r'Non-2xx or 3xx responses: (\d+)', t)
    p50, p99, bad = ms('50%'), ms('99%'), int(errs.group(1)) if errs else 0
else:  # h2load --log-file: start (us since epoch), status, duration (us), tab-separated
    lat = sorted(int(line.split('\t')[2]) / 1000 for line in open(path) if line.strip())
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float('nan')
    p50, p99 = pct(0.50), pct(0.99)
    n = int(re.search(r'requests: \d+ total, \d+ started, (\d+) done', t).group(1))
    # Counted from the status codes, not as done minus 2xx: with -D, h2load counts answers that
    # arrive as the duration ends among the codes but not among the done, which made that
    # difference negative.
    codes = re.search(r'status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx', t)
    bad = sum(int(c) for c in codes.groups())
us = lambda ticks: ticks * 1e6 / hz / max(n, 1)
print(f"{rps:.0f} {p50:.3f} {p99:.3f} {bad} {us(up_ticks):.2f} {us(gw_ticks):.2f} {us(gw_sys):.2f}")
PY
run() { # client (wrk|h1|h2) target port, script or body, proxy pid (empty for direct), connections, seconds
  local u0 g0 s0 u1 g1 s1 url="http://127.0.0.1:$2$P"
  local hdr=(-H 'content-type: application/json' -H 'accept: application/json, text/event-stream')
  rm -f "$WORK/h2log"
  u0=$(ticks "$UPPID"); read -r g0 s0 <<< "$(ticks "$4" sys)"
  case $1 in
    wrk) wrk -t2 -c"$5" -d"${6}s" --latency -s "$WORK/$3.lua" "$url" > "$WORK/out" 2>&1;;
    h1) h2load --h1 -t2 -c"$5" -m1 -D"$6" -d "$WORK/$3.json" "${hdr[@]}" --log-file="$WORK/h2log" "$url" > "$WORK/out" 2>&1;;
    h2) h2load -t2 -c"$(( $5 / 4 > 2 ? $5 / 4 : 2 ))" -m4 -D"$6" -d "$WORK/$3.json" "${hdr[@]}" --log-file="$WORK/h2log" "$url" > "$WORK/out" 2>&1;;
  esac
  u1=$(ticks "$UPPID"); read -r g1 s1 <<< "$(ticks "$4" sys)"
  python3 "$WORK/stats.py" "$([ "$1" = wrk ] && echo wrk || echo h2load)" "$WORK/h2log" "$WORK/out" "$((u1 - u0))" "$((g1 - g0))" "$HZ" "$((s1 - s0))"
}
leg() { # workload leg -> one run's figures
  local w=$1 t=$2 p g client=wrk conns=$CONN secs=$DUR script=$1
  case $t in
    direct) p=$UP; g="";;
    nginx|nginx-h1) p=$NGX; g=$NGXPID;;
    nginx-h2) p=$NGX2; g=$NGXPID;;
    passthrough) p=$PT; g=$PTPID;;
    relay) p=$RELAY; g=$RELAYPID;;
    full|full-h1|full-h2) p=$FULL; g=$FULLPID;;
  esac
  case $w in
    low) conns=$LOW_CONN; secs=$LOW_DUR;;
    h2) client=${t#*-}; script=search;;
  esac
  run "$client" "$p" "$script" "$g" "$conns" "$secs"
}
median() { python3 -c "import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
declare -A R
measure() { # workload rounds decimals legs...: interleaved rounds, one row per leg (medians), R[leg] kept
  local w=$1 rounds=$2 dec=$3 t c cols vals rps bad upus gwus sysus
  shift 3
  # Legs run interleaved; each column is the median over the rounds, so a neighbour's burst of
  # CPU use skews one round, not the table.
  declare -A ALL=()
  for _ in $(seq "$rounds"); do
    for t in "$@"; do ALL[$t]+="$(leg "$w" "$t")"$'\n'; done
  done
  R=()
  for t in "$@"; do
    cols=()
    for c in 1 2 3 4 5 6 7; do
      mapfile -t vals < <(printf '%s' "${ALL[$t]}" | awk -v c=$c 'NF {print $c}')
      cols+=("$(median "${vals[@]}")")
    done
    # CPU figures to a tenth of a µs (a tick over a saturated leg is worth well under that), and
    # the ratios below from the unrounded medians: whole µs made a ratio near 1.5 uncertain by
    # about ±0.05.
    printf -v rps '%.0f' "${cols[0]}"; printf -v bad '%.0f' "${cols[3]}"
    printf -v upus '%.1f' "${cols[4]}"; printf -v gwus '%.1f' "${cols[5]}"; printf -v sysus '%.1f' "${cols[6]}"
    R[$t]="$rps ${cols[1]} ${cols[2]} ${cols[5]}"
    [ "$t" != direct ] || { gwus="-"; sysus="-"; }
    printf "%-10s %-12s %10s %9.${dec}f %9.${dec}f %6s %9s %9s %10s\n" "$w" "$t" "$rps" "${cols[1]}" "${cols[2]}" "$bad" "$upus" "$gwus" "$sysus"
  done
}
py() { python3 -c "$1"; }
# cpu_us columns: CPU time (user + system) per request of the upstream and of the
# proxy in front of it (none for direct), from /proc/PID/stat over the run. They
# do not depend on how the 2 cores are shared, unlike req/s and latency. gw_sys_us:
# the system (kernel) part of gw_cpu_us, so the user part is the difference.
if [ "$IDLE" -gt 0 ]; then
  # Every process started and ready, no request in flight: what each burns on its own.
  sleep 2
  declare -A I0
  for t in upstream nginx passthrough relay full; do
    case $t in upstream) g=$UPPID;; nginx) g=$NGXPID;; passthrough) g=$PTPID;; relay) g=$RELAYPID;; full) g=$FULLPID;; esac
    I0[$t]=$(ticks "$g")
  done
  sleep "$IDLE"
  line="idle       CPU while idle over ${IDLE} s, ms per second:"
  for t in upstream nginx passthrough relay full; do
    case $t in upstream) g=$UPPID;; nginx) g=$NGXPID;; passthrough) g=$PTPID;; relay) g=$RELAYPID;; full) g=$FULLPID;; esac
    line+=" $t $(py "print(f'{($(ticks "$g") - ${I0[$t]}) * 1000 / $HZ / $IDLE:.1f}')")"
  done
  echo "$line (one tick is $(py "print(f'{1000 / $HZ / $IDLE:.1f}')") ms/s)"
  unset I0
fi
printf '\n%-10s %-12s %10s %9s %9s %6s %9s %9s %10s\n' workload target req/s p50_ms p99_ms non2xx up_cpu_us gw_cpu_us gw_sys_us
WORKLOADS="search discover"; [ "$RATE" -gt 0 ] && WORKLOADS+=" paced"
for w in $WORKLOADS; do
  measure "$w" "$ROUNDS" 2 direct nginx passthrough relay full
  read -r drps dp50 dp99 _ <<< "${R[direct]}"
  read -r nrps _ _ nus <<< "${R[nginx]}"
  read -r prps pp50 pp99 pus <<< "${R[passthrough]}"
  for t in relay full; do
    read -r frps fp50 fp99 fus <<< "${R[$t]}"
    if [ "$w" = paced ]; then
      py "print(f'paced      search at an offered {$RATE} req/s, $t vs passthrough: added p50 {${fp50}-${pp50}:+.2f} ms, added p99 {${fp99}-${pp99}:+.2f} ms, proxy CPU per request {${fus}/max(${pus},1):.2f}x')"
    else
      py "print(f'{\"$w\":<10} $t/passthrough throughput {${frps}/${prps}:.2f}, added p99 {${fp99}-${pp99}:+.2f} ms, proxy CPU per request {${fus}/max(${pus},1):.2f}x ({${fus}-${pus}:+.0f} us)')"
    fi
  done
  # Against the floor of one hop: each proxy's CPU per request over nginx's.
  for t in passthrough relay full; do
    read -r frps fp50 fp99 fus <<< "${R[$t]}"
    py "print(f'{\"$w\":<10} $t/nginx proxy CPU per request {${fus}/max(${nus},1):.2f}x ({${fus}-${nus}:+.0f} us), throughput {${frps}/${nrps}:.2f}')"
  done
  if [ "$w" = paced ]; then
    for t in nginx passthrough relay full; do
      read -r frps fp50 fp99 fus <<< "${R[$t]}"
      py "print(f'paced      $t over direct: added p50 {${fp50}-${dp50}:+.2f} ms, added p99 {${fp99}-${dp99}:+.2f} ms')"
    done
  fi
done
if [ "$LOW_RATE" -gt 0 ]; then
  # One pass of LOW_DUR seconds per target: a few hundred requests, so p99 is about the third-largest
  # sample. The proxy's CPU over the whole run, idle time included, divided by the requests; at this count
  # one clock tick is worth the resolution printed below.
  echo
  measure low 1 3 direct nginx passthrough relay full
  read -r drps dp50 dp99 _ <<< "${R[direct]}"
  for t in nginx passthrough relay full; do
    read -r frps fp50 fp99 fus <<< "${R[$t]}"
    py "print(f'low        $t at {$LOW_RATE} req/s over direct: added p50 {${fp50}-${dp50}:+.3f} ms, added p99 {${fp99}-${dp99}:+.3f} ms, proxy CPU per request {${fus}:.0f} us')"
  done
  py "print(f'low        CPU per request is counted in 1/{$HZ} s ticks: about +/- {1e6/$HZ/max(${drps}*$LOW_DUR,1):.0f} us at {${drps}*$LOW_DUR:.0f} requests')"
fi
if [ "$H2" != 0 ]; then
  # h2load for both protocols, so the client is the same; the search call with the headers an MCP client sends.
  echo
  measure h2 "$ROUNDS" 2 full-h1 full-h2 nginx-h1 nginx-h2
  read -r _ _ _ g1 <<< "${R[full-h1]}"; read -r _ _ _ g2 <<< "${R[full-h2]}"
  read -r _ _ _ n1 <<< "${R[nginx-h1]}"; read -r _ _ _ n2 <<< "${R[nginx-h2]}"
  py "print(f'h2         full gateway HTTP/2 / HTTP/1.1 proxy CPU per request {$g2/max($g1,1):.2f}x ({$g2-$g1:+.0f} us); nginx {$n2/max($n1,1):.2f}x; full/nginx over HTTP/2 {$g2/max($n2,1):.2f}x')"
fi
if [ "$SOAK" -gt 0 ]; then
  FPID=$FULLPID
  EVERY=${SOAK_EVERY:-5}
  rss() { awk '/VmRSS/{print $2}' "/proc/$FPID/status"; }
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
if [ -s "$WORK/nginx/error.log" ]; then echo "nginx error log (last lines):"; tail -n 5 "$WORK/nginx/error.log"; fi
