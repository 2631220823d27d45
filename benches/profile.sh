#!/usr/bin/env bash
# Where the full gateway's CPU goes (see docs/performance.md): the full leg of benches/load.sh (a
# kind = "mcp" tenant in front of an upstream aap-gateway serving the embedded dealer) at saturation,
# `perf record -g` on the gateway process only, then its samples grouped into phases by symbol
# (benches/profile_phases.py: kernel, allocator and memcpy, jsonschema, HTTP/2 and HPACK, JSON,
# pingora upstream client, HTTP/1 ingress, access log and metrics, tokio, other) with the gateway's CPU per request split by them.
#   bash benches/profile.sh [SECONDS=10] [CONNECTIONS=64]
#   WORKLOAD=discover bash benches/profile.sh   # server/discover instead of the search tools/call
#   H2=1 bash benches/profile.sh         # over HTTP/2 (h2load, h2c prior knowledge) instead of HTTP/1.1 (wrk)
#   BIN=/path/to/aap-gateway bash benches/profile.sh   # another build (symbols are read from the binary:
#                                        # do not strip it)
#   LOW_RATE=7 SYSCALLS=1 bash benches/profile.sh 30   # the same at a low paced rate (LOW_CONN=4 connections),
#                                        # with the gateway's CPU per request and per thread name
#   SYSCALLS=1 bash benches/profile.sh   # instead of sampling: the gateway's system calls per request, by
#                                        # call (perf stat on the syscall tracepoints; counts, not times, so a busy
#                                        # machine does not move them much)
#   ALLOCS=1 bash benches/profile.sh     # instead of sampling: heap allocations per request (uprobes on the
#                                        # allocator's entry points, counted by perf stat; a count, exact however
#                                        # busy the machine is)
#   CALLGRIND=1 bash benches/profile.sh  # instead of sampling: instructions per request, in all and by function
#                                        # (the gateway under valgrind's callgrind, counting only while a fixed
#                                        # number of requests, CALLGRIND_REQUESTS=2000, is served; exact and
#                                        # repeatable for one binary however busy the machine is; the first
#                                        # argument is ignored). H2=1 for HTTP/2. KEEP=dir keeps callgrind.out.
#   CALLGRIND=1 CACHESIM=1 bash benches/profile.sh  # and valgrind's cache model: first-level instruction and
#                                        # data misses per request, in all and by function
#   KEEP=/some/dir bash benches/profile.sh   # keep perf.data and the full report there
#   CALLGRAPH=dwarf KEEP=/some/dir bash benches/profile.sh   # callers that can be read (`perf report -G` on the
#                                        # kept perf.data): a release build has no frame pointers, so the default
#                                        # `-g` chains stop at the first Rust frame; the phases use self time only
# Sampling costs the gateway some CPU, so its CPU per request here is above load.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
CONN=${2:-64}
WORKLOAD=${WORKLOAD:-search}
H2=${H2:-0}
command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)" >&2; exit 2; }
# shellcheck source=benches/lib.sh
. benches/lib.sh
need wrk wrk
[ "$H2" = 0 ] || need h2load nghttp2-client
if [ -z "${BIN:-}" ]; then
  cargo build --release -q
  BIN=target/release/aap-gateway
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { stop_pids; rm -rf "$WORK"; }
trap cleanup EXIT
UP=$(port); FULL=$(port)
P=/aap/3.0.0/demo-toyota/mcp
# The configuration of load.sh's upstream and full legs: no lead quota, the tenant's backend swapped for an MCP
# upstream under the AAP contract, h2c on the full gateway.
H2C=1 bench_configs "$WORK" "$UP"
"$BIN" --config "$WORK/upstream.toml" --listen "127.0.0.1:$UP" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/up" 2>/dev/null & PIDS+=($!)
WRAP=()
if [ "${CALLGRIND:-0}" = 1 ]; then
  need valgrind valgrind
  need h2load nghttp2-client
  # Instrumentation starts off: the start-up and the warm-up are not counted.
  WRAP=(valgrind -q --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/callgrind.out")
  # CACHESIM=1: valgrind's cache model too (first-level instruction and data caches, last level; sizes as
  # valgrind reads them off this CPU), misses per request in all and by function.
  [ "${CACHESIM:-0}" = 0 ] || WRAP+=(--cache-sim=yes)
fi
"${WRAP[@]}" "$BIN" --config "$WORK/full.toml" --listen "127.0.0.1:$FULL" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
FULLPID=${PIDS[1]}
wait_port "$UP"; wait_port "$FULL"
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
case $WORKLOAD in
  search) BODY="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{$META,\"name\":\"aap_inventory_search\",\"arguments\":{\"type\":\"inventory.search.request\",\"filters\":{\"make\":[\"Toyota\"],\"status\":[\"available\"]},\"pagination\":{\"limit\":5},\"sort\":{\"field\":\"price\",\"order\":\"asc\"}}}}";;
  discover) BODY="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{$META}}";;
  *) echo "WORKLOAD is search or discover" >&2; exit 2;;
esac
printf '%s' "$BODY" > "$WORK/body.json"
python3 - "$BODY" > "$WORK/body.lua" <<'PY'
import sys, json
print('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ' + json.dumps(sys.argv[1]))
PY
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime+stime, 1/CLK_TCK s
LOW_RATE=${LOW_RATE:-0}
if [ "$LOW_RATE" -gt 0 ]; then  # paced, as load.sh's low-rate leg: exponential gaps, LOW_CONN connections
  CONN=${LOW_CONN:-4}
  { cat "$WORK/body.lua"; cat <<LUA
local mean_ms = $CONN * 1000 / $LOW_RATE
function init(args) math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16)) end
function delay() return math.floor(-math.log(1 - math.random()) * mean_ms) end
LUA
  } > "$WORK/paced.lua"
  mv "$WORK/paced.lua" "$WORK/body.lua"
fi
# The gateway's CPU ticks per thread name ("name ticks" lines), to see which threads a load wakes.
# (utime and stime are read after the ")" that ends the name: a name may hold spaces.)
threads() { for t in /proc/"$FULLPID"/task/*; do echo "$(tr ' ' _ < "$t/comm") $(sed 's/.*) //' "$t/stat" | awk '{print $12 + $13}')"; done | sort; }
load() { # seconds: the load, its output in $WORK/out
  if [ "$H2" = 0 ]; then
    wrk -t2 -c"$CONN" -d"${1}s" -s "$WORK/body.lua" "http://127.0.0.1:$FULL$P" > "$WORK/out" 2>&1
  else
    h2load -t2 -c"$(( CONN / 4 > 2 ? CONN / 4 : 2 ))" -m4 -D"$1" -d "$WORK/body.json" -H 'content-type: application/json' \
      -H 'accept: application/json, text/event-stream' "http://127.0.0.1:$FULL$P" > "$WORK/out" 2>&1
  fi
}
if [ "${CALLGRIND:-0}" = 1 ]; then
  # A fixed number of requests (h2load -n; over HTTP/1.1 with --h1), 8 connections, 4 streams each over h2c.
  N=${CALLGRIND_REQUESTS:-2000}
  fixed() {
    local proto=(--h1 -c8) accept=()
    [ "$H2" = 0 ] || { proto=(-c8 -m4); accept=(-H 'accept: application/json, text/event-stream'); }
    h2load "${proto[@]}" -n "$1" -d "$WORK/body.json" -H 'content-type: application/json' "${accept[@]}" \
      "http://127.0.0.1:$FULL$P" > "$WORK/out" 2>&1
    grep -q "status codes: $1 2xx" "$WORK/out" || { echo "not every request succeeded:" >&2; cat "$WORK/out" >&2; exit 1; }
  }
  fixed 500  # warm up, not counted
  callgrind_control -i on "$FULLPID" >/dev/null 2>&1
  fixed "$N"
  callgrind_control -i off "$FULLPID" >/dev/null 2>&1
  callgrind_control -d "$FULLPID" >/dev/null 2>&1
  sleep 1
  OUT=$(ls "$WORK"/callgrind.out* | grep -v '\.out$' | head -1)
  [ -n "$OUT" ] || OUT="$WORK/callgrind.out"
  echo "full gateway, $WORKLOAD over $([ "$H2" = 0 ] && echo 'HTTP/1.1' || echo 'HTTP/2'), $N requests under callgrind"
  callgrind_annotate --show=Ir "$OUT" 2>/dev/null > "$WORK/self.txt"
  callgrind_annotate --show=Ir --inclusive=yes --threshold=100 "$OUT" 2>/dev/null > "$WORK/inclusive.txt"
  python3 - "$N" "$WORK/self.txt" "$WORK/inclusive.txt" <<'PY'
import re, sys
n = int(sys.argv[1])
def rows(path):
    for line in open(path):
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*?)(\s+\[.*)?$", line)
        if m:
            yield int(m.group(1).replace(",", "")) / n, m.group(2).replace("???:", "")
self_rows = list(rows(sys.argv[2]))
total = next(c for c, f in self_rows if "PROGRAM TOTALS" in f)
print(f"instructions per request: {total:.0f}")
print("largest by own instructions (per request):")
for c, f in [r for r in self_rows if "PROGRAM TOTALS" not in r[1]][:15]:
    print(f"  {c:8.0f}  {f[:110]}")
# The protocol core's parts, inclusive (what each costs with what it calls).
parts = [("read the upstream answer", "upstream::mcp::answer::read_json_answer"),
         ("validate the result", "aap::contract::Contract::checked_result"),
         ("write the answer", "mcp::result::tool_message"),
         ("parse the request envelope", "mcp::jsonrpc::parse_message"),
         ("check the arguments", "aap::contract::check_tool_arguments"),
         ("access log and metrics", "context::RequestCtx::logging")]
incl = {f: c for c, f in rows(sys.argv[3])}
print("inclusive (per request):")
for label, name in parts:
    c = max((v for f, v in incl.items() if f.endswith(name)), default=0)
    print(f"  {c:8.0f}  {label} ({name})")
PY
  if [ "${CACHESIM:-0}" != 0 ]; then
    for ev in I1mr D1mr; do
      callgrind_annotate --show=Ir,I1mr,D1mr,D1mw,ILmr,DLmr,DLmw --sort=$ev "$OUT" 2>/dev/null > "$WORK/$ev.txt"
    done
    python3 - "$N" "$WORK/I1mr.txt" "$WORK/D1mr.txt" <<'PY'
import re, sys
n = int(sys.argv[1])
EV = ["Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
def rows(path):
    for line in open(path):
        rest, vals = line.lstrip(), []
        while len(vals) < 7:
            m = re.match(r"([\d,]+)(?: \(\s*[\d.]+%\))?\s+|\.\s+", rest)
            if not m:
                break
            vals.append(int(m.group(1).replace(",", "")) if m.group(1) else 0)
            rest = rest[m.end():]
        if len(vals) == 7 and rest.strip():
            yield dict(zip(EV, (v / n for v in vals))), re.sub(r"\s+\[.*$", "", rest.strip()).replace("???:", "")
for path, ev, label in ((sys.argv[2], "I1mr", "instruction"), (sys.argv[3], "D1mr", "data read")):
    r = list(rows(path))
    total = next(d for d, f in r if "PROGRAM TOTALS" in f)
    if ev == "I1mr":
        print("cache model, per request: " + ", ".join(f"{k} {total[k]:.0f}" for k in EV))
    print(f"most first-level {label} misses (per request):")
    for d, f in [x for x in r if "PROGRAM TOTALS" not in x[1]][:10]:
        print(f"  {d[ev]:8.0f}  {f[:110]}")
PY
  fi
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$OUT" "$KEEP/callgrind.out" && echo "callgrind.out kept in $KEEP"; fi
  exit 0
fi
load 2  # warm up: connection pools, allocator arenas, caches
if [ "${SYSCALLS:-0}" = 1 ]; then
  CALLS=read,recvfrom,recvmsg,readv,write,writev,sendto,sendmsg,epoll_wait,epoll_pwait,epoll_ctl,futex,sched_yield,getpeername,getsockopt,setsockopt,accept4,close,ioctl,madvise,mmap,munmap,brk,timerfd_settime,nanosleep
  perf stat -x, -e "context-switches,cpu-migrations,page-faults,$(echo "$CALLS" | sed 's/\([a-z_0-9]*\)/syscalls:sys_enter_\1/g')" -p "$FULLPID" -o "$WORK/stat.csv" -- sleep "$DUR" 2>/dev/null &
  PERF=$!
  threads > "$WORK/threads0"; g0=$(ticks "$FULLPID")
  load "$DUR"
  wait $PERF || true
  threads > "$WORK/threads1"; g1=$(ticks "$FULLPID")
  python3 - "$WORK/out" "$WORK/stat.csv" "$WORK/threads0" "$WORK/threads1" "$((g1 - g0))" "$(getconf CLK_TCK)" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'(\d+) requests in', t) or re.search(r'requests: \d+ total, \d+ started, (\d+) done', t)
n = max(int(m.group(1)) if m else 0, 1)
rows, sched = [], []
for line in open(sys.argv[2]):
    f = line.strip().split(',')
    if len(f) > 2 and f[0].isdigit() and int(f[0]) > 0:
        if f[2].startswith('syscalls:'):
            rows.append((int(f[0]) / n, f[2].replace('syscalls:sys_enter_', '')))
        else:
            sched.append(f"{f[2]} {int(f[0]) / n:.2f}")
rows.sort(reverse=True)
print(f"system calls per request ({n} requests): {sum(r for r, _ in rows):.2f}")
print("  " + ", ".join(f"{c} {r:.2f}" for r, c in rows if r >= 0.005))
print("  per request: " + ", ".join(sched))
ticks, hz = int(sys.argv[5]), int(sys.argv[6])
print(f"gateway CPU per request: {ticks * 1e6 / hz / n:.0f} us (ticks of 1/{hz} s, +/- {1e6 / hz / n:.0f} us)")
def per_name(path):
    d = {}
    for line in open(path):
        name, t = line.rsplit(' ', 1)
        d[name] = d.get(name, 0) + int(t)
    return d
a, b = per_name(sys.argv[3]), per_name(sys.argv[4])
busy = sorted(((b[k] - a.get(k, 0), k) for k in b), reverse=True)
print("  by thread (us per request): " + ", ".join(f"{k} {v * 1e6 / hz / n:.0f}" for v, k in busy if v > 0))
PY
  exit 0
fi
if [ "${ALLOCS:-0}" = 1 ]; then
  # The gateway's global allocator is mimalloc (src/main.rs): Rust's alloc, alloc_zeroed and
  # realloc reach these three functions. Uprobes slow every call, so the count is the figure
  # here, not the CPU.
  GROUP=aapalloc$$
  probes=(malloc=mi_malloc_aligned zalloc=mi_zalloc_aligned realloc=mi_realloc_aligned)
  for p in "${probes[@]}"; do
    perf probe -q -x "$BIN" -a "$GROUP:$p" 2>/dev/null || {
      echo "perf probe could not attach to ${p#*=} in $BIN (a stripped build, or no uprobe support)" >&2; exit 2; }
  done
  trap 'perf probe -q -d "$GROUP:*" 2>/dev/null || true; cleanup' EXIT
  perf stat -x, -e "$GROUP:*" -p "$FULLPID" -o "$WORK/alloc.csv" -- sleep "$DUR" 2>/dev/null &
  PERF=$!
  load "$DUR"
  wait $PERF || true
  python3 - "$WORK/out" "$WORK/alloc.csv" "$GROUP" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'(\d+) requests in', t) or re.search(r'requests: \d+ total, \d+ started, (\d+) done', t)
n = max(int(m.group(1)) if m else 0, 1)
rows = {}
for line in open(sys.argv[2]):
    f = line.strip().split(',')
    if len(f) > 2 and f[0].isdigit():
        rows[f[2].split(':', 1)[-1]] = int(f[0]) / n
print(f"heap allocations per request ({n} requests): {sum(rows.values()):.1f}")
print("  " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(rows.items(), key=lambda kv: -kv[1])))
PY
  exit 0
fi
g0=$(ticks "$FULLPID")
CG=(-g); [ "${CALLGRAPH:-fp}" != dwarf ] || CG=(--call-graph dwarf)
perf record -q -e cpu-clock -F 999 "${CG[@]}" -p "$FULLPID" -o "$WORK/perf.data" -- sleep "$DUR" 2>/dev/null &
PERF=$!
load "$DUR"
wait $PERF || true
g1=$(ticks "$FULLPID")
N=$(python3 - "$WORK/out" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'(\d+) requests in', t) or re.search(r'requests: \d+ total, \d+ started, (\d+) done', t)
print(m.group(1) if m else 0)
PY
)
CPU_US=$(python3 -c "print(f'{($g1 - $g0) * 1e6 / $(getconf CLK_TCK) / max($N, 1):.1f}')")
perf report -i "$WORK/perf.data" --no-children --sort sym -g none --percent-limit 0 --stdio 2>/dev/null > "$WORK/report.txt"
echo "full gateway, $WORKLOAD over $([ "$H2" = 0 ] && echo 'HTTP/1.1 (wrk)' || echo 'HTTP/2 (h2load)'), $CONN in flight, ${DUR}s: $N requests, $CPU_US us of gateway CPU per request (under perf)"
python3 benches/profile_phases.py "$CPU_US" < "$WORK/report.txt"
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP" && cp "$WORK/perf.data" "$WORK/report.txt" "$KEEP/" && echo "perf.data and report.txt kept in $KEEP"
fi
