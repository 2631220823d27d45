#!/usr/bin/env bash
# The cold critical path at a dealer's sparse traffic: how long each proxy holds a search on its way in
# (from reading the client's request to writing it upstream) and on its way out (from reading the
# upstream's answer to writing it to the client), when calls come ~GAP s apart and the caches have gone
# cold in between. The legs are nginx (one worker), the pass-through and the full gateway (and a second
# full gateway, BINB, to compare two builds or settings in one run), each in front of the same upstream
# aap-gateway; each is probed in turn by one keep-alive client. The times come from `perf record` on the
# proxy's system-call tracepoints: a side is the time between the two calls that bound it, so it counts
# the proxy's own work and nothing of the client or the upstream.
#   bash benches/cold.sh                  # N=60 searches a leg, GAP=0.14 s apart on average (7 req/s)
#   BINB=/path/to/other bash benches/cold.sh            # the FULL-B leg runs another build
#   FULLENV="AAP_LOG=info,access=off" bash benches/cold.sh   # environment of the FULL leg (FULLBENV for FULL-B)
#   PIN=1 bash benches/cold.sh            # proxies on CPU 0, upstream and client on CPU 1: the upstream as if
#                                         # on another machine (a proxy then never shares a core with it)
# Prints per leg: the client's p50 and each side's median, p10 and p90 in µs.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/lib.sh
BIN=${BIN:-target/release/aap-gateway}; BINB=${BINB:-$BIN}
N=${N:-60}; GAP=${GAP:-0.14}; PIN=${PIN:-0}
[ -x "$BIN" ] || cargo build --release --locked --bin aap-gateway
need nginx nginx-light; need perf linux-perf
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
WORK=$(mktemp -d); PIDS=()
cleanup() { stop_pids; rm -rf "$WORK"; }
trap cleanup EXIT
# With PIN=1, the commands that run on CPU 0 (the proxies) and on CPU 1 (the upstream, the client).
CPU0=(); CPU1=()
[ "$PIN" = 1 ] && { CPU0=(taskset -c 0); CPU1=(taskset -c 1); }
UP=$(port); FULL=$(port); FULLB=$(port); PT=$(port); NGX=$(port)
bench_configs "$WORK" "$UP"
gw() { # cpu env binary config port state [args...]
  local cpu=CPU$1[@]
  "${!cpu}" env ${2:-X=1} "$3" --config "$WORK/$4.toml" --listen "127.0.0.1:$5" --admin-listen "127.0.0.1:$(port)" \
    --state-dir "$WORK/$6" "${@:7}" 2>/dev/null &
  PIDS+=($!)
}
gw 1 "" "$BIN" upstream "$UP" up
gw 0 "${FULLENV:-}" "$BIN" full "$FULL" full
gw 0 "${FULLBENV:-}" "$BINB" full "$FULLB" fullb
gw 0 "" "$BIN" upstream "$PT" pt passthrough --upstream "127.0.0.1:$UP"
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<NGINX
daemon off;
user root root;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off; keepalive_requests 1000000;
  client_body_temp_path $WORK/nginx/body; proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi; uwsgi_temp_path $WORK/nginx/uwsgi; scgi_temp_path $WORK/nginx/scgi;
  upstream aap { server 127.0.0.1:$UP; keepalive 16; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$NGX;
    location / { proxy_pass http://aap; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host \$http_host; } }
}
NGINX
"${CPU0[@]}" "$NGINX" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" & PIDS+=($!)
for p in $UP $FULL $FULLB $PT $NGX; do wait_port "$p"; done
sleep 0.5
NGXW=$(pgrep -P "${PIDS[4]}" | head -1)
# The client: N searches on one keep-alive connection, gaps drawn uniformly around GAP.
cat > "$WORK/client.py" <<'PY'
import random, socket, sys, time
port, n, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
meta = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
body = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{' + meta + ',"name":"aap_inventory_search",'
        '"arguments":{"type":"inventory.search.request","filters":{"make":["Toyota"],"status":["available"]},'
        '"pagination":{"limit":5},"sort":{"field":"price","order":"asc"}}}}').encode()
req = (f"POST /aap/3.0.0/demo-toyota/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
       f"Content-Length: {len(body)}\r\n\r\n").encode() + body
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def one():
    t = time.perf_counter(); s.sendall(req); buf = b""
    while b"\r\n\r\n" not in buf: buf += s.recv(65536)
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")]
    if length:
        while len(rest) < length[0]: rest += s.recv(65536)
    else:
        while not rest.endswith(b"0\r\n\r\n"): rest += s.recv(65536)
    return (time.perf_counter() - t) * 1e3
for _ in range(3): one()
lat = []
for _ in range(n):
    time.sleep(gap * random.uniform(0.5, 1.5))
    lat.append(one())
lat.sort()
print(f"client p50 {lat[len(lat) // 2]:.3f} ms", end="")
PY
# The sides, from the proxy's system calls: the connection whose reads start after a quiet spell is
# the client's; then request read -> first write elsewhere (upstream), upstream read -> client write.
# An 8-byte write() is a runtime's wake-up of its own event loop (eventfd), not the upstream.
cat > "$WORK/sides.py" <<'PY'
import re, statistics, subprocess, sys
text = subprocess.run(["perf", "script", "-i", sys.argv[1], "-F", "tid,time,event,trace"],
                      capture_output=True, text=True).stdout
READ, WRITE = {0, 45, 19}, {1, 44, 20, 46}
ev = []
for line in text.splitlines():
    m = re.search(r'(\d+\.\d+): raw_syscalls:sys_enter: NR (\d+) \((\w+), \w+, (\w+)', line)
    if m: ev.append((float(m.group(1)), int(m.group(2)), int(m.group(3), 16), int(m.group(4), 16)))
first, prev = {}, None
for t, nr, fd, _ in ev:
    if nr in READ and (prev is None or t - prev > 0.02): first[fd] = first.get(fd, 0) + 1
    prev = t
if not first: sys.exit(print("  no requests seen"))
client = max(first, key=first.get)
inward, outward, state, up = [], [], 0, None
for t, nr, fd, n in ev:
    if state == 0 and nr in READ and fd == client: t0, state = t, 1
    elif state == 1 and nr in WRITE and fd != client and not (nr == 1 and n == 8):
        inward.append((t - t0) * 1e6); up, state = fd, 2
    elif state == 2 and nr in READ and fd == up: t1, state = t, 3
    elif state == 3 and nr in WRITE and fd == client: outward.append((t - t1) * 1e6); state = 0
def show(x):
    x = sorted(x)
    return f"median {statistics.median(x):.0f} p10 {x[len(x) // 10]:.0f} p90 {x[9 * len(x) // 10]:.0f}" if x else "none"
print(f"  request side {show(inward)} | answer side {show(outward)} (µs, {len(outward)} calls)")
PY
printf 'leg          %s\n' "N=$N searches ~${GAP}s apart, PIN=$PIN"
for leg in nginx passthrough full full-b; do
  case $leg in
    nginx) pid=$NGXW; p=$NGX;; passthrough) pid=${PIDS[3]}; p=$PT;;
    full) pid=${PIDS[1]}; p=$FULL;; full-b) pid=${PIDS[2]}; p=$FULLB;;
  esac
  perf record -q -e raw_syscalls:sys_enter -p "$pid" -o "$WORK/$leg.data" 2>/dev/null & SP=$!
  sleep 0.5
  printf '%-12s ' "$leg"; "${CPU1[@]}" python3 "$WORK/client.py" "$p" "$N" "$GAP"
  sleep 0.2; kill -INT "$SP"; wait "$SP" 2>/dev/null || true
  python3 "$WORK/sides.py" "$WORK/$leg.data"
done
