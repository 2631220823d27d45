#!/usr/bin/env bash
# Consented leads (aap_lead_submit) on loopback, one run (see docs/performance.md, "Lead store"):
#   sqlite    one instance on the embedded SQLite lead store (the default)
#   postgres  two instances sharing one PostgreSQL lead store (a throwaway server started here, Debian's
#             postgresql binaries, default settings: fsync and synchronous_commit on), the load split across both
#   file      one instance of the file store of before the lead store (leads.jsonl, its outbox journal and the
#             idempotency log), built from AAP_BASELINE_REV
# Every request is a new consented lead (a fresh idempotency_key per request, made by the wrk Lua script) with a
# vehicle of interest. The tenant has one webhook sink whose CRM is down (nothing listens on its port) with a
# one-hour backoff: each accepted lead is committed with its outbox row and tried once (connection refused), so
# delivery costs little and what is measured is acceptance. Two loads per leg:
#   saturated  CONNECTIONS closed-loop connections (split across the instances) for DURATION s
#   paced      RATE leads/s offered per instance (32 connections each, exponential gaps between a connection's
#              requests: wrk's delay(); a connection waits for its answer too, so somewhat less is achieved)
# A lead counts as accepted when its answer is a lead.submit.response (the wrk script reads every answer); the
# leads the store holds afterwards are counted too, from the store itself, and the CPU time (user + system) the
# gateways and the PostgreSQL server used per stored lead (it does not depend on how the cores are shared).
#   bash benches/leads.sh [DURATION_SECONDS=10] [CONNECTIONS=16]
#   RATE=500 bash benches/leads.sh           # per instance; RATE=0 skips the paced runs
#   LEGS="sqlite postgres" bash benches/leads.sh
#   BIN=/path/to/aap-gateway                 # the build under test (default: cargo build --release)
#   AAP_BASELINE_REV=<rev>                   # the file-store revision (default: the parent of the commit that
#                                            # added src/store/mod.rs)
#   AAP_BASELINE_BIN=/path/to/aap-gateway    # reuse a built binary of it; otherwise it is built once under `nice`
#                                            # (git worktree in target/baseline-<rev>/src, its own target dir seeded
#                                            # from target/release) and kept as target/baseline-<rev>/aap-gateway
# Prints a Markdown table. Two instances' percentiles are the worse of the two wrk runs (wrk reports no merged
# histogram). Everything shares the machine's cores: wrk, the gateways and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
CONN=${2:-16}
RATE=${RATE:-500}
LEGS=${LEGS:-"sqlite postgres file"}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ -z "${BIN:-}" ]; then
  nice -n 10 cargo build --release -q
  BIN=target/release/aap-gateway
fi
BIN=$(realpath "$BIN")

# ---- the file-store baseline ---------------------------------------------------------------
if [ -n "${AAP_BASELINE_REV:-}" ]; then
  BASE_REV=$(git rev-parse --short "$AAP_BASELINE_REV")
else
  ADDED=$(git log --diff-filter=A --format=%H -- src/store/mod.rs | tail -1)
  [ -n "$ADDED" ] || { echo "no commit adds src/store/mod.rs: set AAP_BASELINE_REV" >&2; exit 1; }
  BASE_REV=$(git rev-parse --short "$ADDED^")
fi
baseline() {
  if [ -n "${AAP_BASELINE_BIN:-}" ]; then realpath "$AAP_BASELINE_BIN"; return; fi
  local dir=target/baseline-$BASE_REV
  if [ ! -x "$dir/aap-gateway" ]; then
    echo "building the file-store baseline $BASE_REV once (target/baseline-$BASE_REV; minutes)" >&2
    mkdir -p "$dir"
    [ -d "$dir/src" ] || git worktree add --detach "$dir/src" "$BASE_REV" >/dev/null
    # Most dependencies are the same build: start from this tree's.
    [ -d "$dir/target/release" ] || { mkdir -p "$dir/target"; cp -a target/release "$dir/target/release"; }
    (cd "$dir/src" && CARGO_TARGET_DIR="$PWD/../target" nice -n 10 cargo build --release -q --bin aap-gateway)
    cp "$dir/target/release/aap-gateway" "$dir/aap-gateway"
    git worktree remove --force "$dir/src"
  fi
  realpath "$dir/aap-gateway"
}
case " $LEGS " in *" file "*) BASE_BIN=$(baseline) ;; esac

WORK=$(mktemp -d)
PGDIR=""
PIDS=()
# shellcheck source=benches/lib.sh
. benches/lib.sh
stop_pg() {
  if [ -n "$PGDIR" ]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$PGDIR"; PGDIR=""
  fi
}
cleanup() { stop_pids; stop_pg; rm -rf "$WORK"; }
trap cleanup EXIT
wait_ready() { # admin port, log
  for _ in $(seq 200); do curl -sf "127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "gateway on admin port $1 never got ready:" >&2; tail -5 "$2" >&2; exit 1
}
P=/aap/3.0.0/demo-toyota/mcp
DOWN=$(port)  # the CRM: nothing listens here

# The shipped config of each build (the baseline's own: its keys differ): no lead quota, absolute data paths,
# one webhook sink that is down.
shipped() { # gateway.toml -> $2
  python3 - "$1" "$2" "$DOWN" "$PWD" <<'PY'
import sys
src, out, down, repo = sys.argv[1:]
s = open(src).read().replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0")
s = s.replace('"data/', f'"{repo}/data/')
sink = (f'[[tenants.backend.sinks]]\nkind = "webhook"\nname = "crm"\nurl = "http://127.0.0.1:{down}/leads"\n'
        'timeout_ms = 2000\n\n[tenants.backend.outbox]\ninitial_backoff_ms = 3600000\nmax_backoff_ms = 3600000\n\n')
at = s.index("[tenants.rate_limit]")
open(out, "w").write(s[:at] + sink + s[at:])
PY
}
shipped gateway.toml "$WORK/base.toml"
case " $LEGS " in *" file "*)
  git show "$BASE_REV:gateway.toml" > "$WORK/file-shipped.toml"
  shipped "$WORK/file-shipped.toml" "$WORK/file-base.toml" ;;
esac

# wrk script: a fresh idempotency_key per request ($1 tag), paced at $2 leads/s over $3 connections (0: closed loop).
lua() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys, json, datetime
tag, rate, conns = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
granted = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
args = {"type": "lead.submit.request",
        "customer": {"first_name": "Quinn", "last_name": "Benchbuyer", "email": "quinn.benchbuyer@example.com",
                     "preferred_contact": "email"},
        "consent": {"granted_at": granted, "allowed_channels": ["email"],
                    "consent_text": "I agree that Demo Toyota may contact me by email about this enquiry.",
                    "scope": ["lead_submission"]},
        "vehicle_of_interest": {"stock": "DT-1001"},
        "source_agent": {"name": "benches-leads"},
        "idempotency_key": "@KEY@"}
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientCapabilities": {}},
    "name": "aap_lead_submit", "arguments": args}})
head, tail = body.split("@KEY@")
print(f'''wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local head, tail = {json.dumps(head)}, {json.dumps(tail)}
local n, threads, all = 0, 0, {{}}
local prefix = "{tag}"
received = 0
function setup(thread) threads = threads + 1; thread:set("tid", threads); table.insert(all, thread) end
function init(args) prefix = prefix .. "-" .. tostring(tid) .. "-" .. tostring(math.random(1, 1000000000)) end
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, head .. prefix .. "-" .. n .. tail)
end
-- accepted: the answer is a lead.submit.response (status received)
function response(status, headers, body)
  if status == 200 and body:find('"lead.submit.response"', 1, true) then received = received + 1 end
end
function done(summary, latency, requests)
  local r = 0
  for _, t in ipairs(all) do r = r + (t:get("received") or 0) end
  io.write("received: " .. r .. "\\n")
end''')
if rate > 0:
    print(f'''local mean_ms = {conns * 1000 / rate}
function delay() return math.floor(-math.log(1 - math.random()) * mean_ms) end''')
PY
}

# wrk against each port in $PORTS at once ($1 conns per instance, $2 rate per instance): "requests p50 p99 received"
load() {
  local conns=$1 rate=$2 i=0 outs=() waits=()
  for p in $PORTS; do
    i=$((i + 1))
    lua "r$RANDOM$RANDOM-$i" "$rate" "$conns" > "$WORK/w$i.lua"
    wrk -t1 -c"$conns" -d"${DUR}s" --latency -s "$WORK/w$i.lua" "http://127.0.0.1:$p$P" > "$WORK/w$i.out" 2>&1 &
    waits+=($!)
    outs+=("$WORK/w$i.out")
  done
  for w in "${waits[@]}"; do wait "$w"; done
  python3 - "${outs[@]}" <<'PY'
import sys, re
def ms(t, label):
    m = re.search(r'^\s*' + label + r'\s+([\d.]+)(us|ms|s)\s*$', t, re.M)
    if not m: return float('nan')
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == 'us' else v * 1000 if u == 's' else v
n = ok = 0; p50 = p99 = 0.0
for f in sys.argv[1:]:
    t = open(f).read()
    n += int(re.search(r'(\d+) requests in', t).group(1))
    ok += int(re.search(r'received: (\d+)', t).group(1))
    p50 = max(p50, ms(t, '50%')); p99 = max(p99, ms(t, '99%'))
print(n, f"{p50:.2f}", f"{p99:.2f}", ok)
PY
}

start() { # binary, config, state dir: adds the listen port to PORTS once the admin listener is ready
  local lp ap
  lp=$(port); ap=$(port)
  mkdir -p "$3"
  # Logs (an access line per request) are written, as in production, to a file.
  "$1" --config "$2" --listen 127.0.0.1:$lp --admin-listen 127.0.0.1:$ap --state-dir "$3" >/dev/null 2>"$3.log" & PIDS+=($!)
  wait_ready "$ap" "$3.log"
  PORTS="$PORTS $lp"
}

# Leads stored so far, read from the store itself.
count_sqlite() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM leads").fetchone()[0])' "$1"; }
count_file() { cat "$1"/*/leads.jsonl 2>/dev/null | grep -c '"lead_id"' || true; }
count_pg() { "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -At -c "SELECT COUNT(*) FROM leads"; }

start_pg() {
  PGDIR=$(mktemp -d); chown postgres "$PGDIR"
  PGPORT=$(port)
  runuser -u postgres -- "$PGBIN/initdb" -D "$PGDIR/data" -A trust -U postgres >/dev/null
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDIR/data" -w -l "$PGDIR/log" \
    -o "-k $PGDIR -p $PGPORT -c listen_addresses=127.0.0.1" start >/dev/null
}

ROWS=()
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
# CPU time (user + system, clock ticks) of the gateways, and of the PostgreSQL server's processes.
ticks() { local t=0 p; for p in "$@"; do [ -r /proc/$p/stat ] && t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat))); done; echo $t; }
pg_pids() { [ -n "$PGDIR" ] && { head -1 "$PGDIR/data/postmaster.pid"; pgrep -P "$(head -1 "$PGDIR/data/postmaster.pid")"; } || true; }
HZ=$(getconf CLK_TCK)
run_load() { # label, conns per instance, rate per instance
  local n p50 p99 ok before after g0 g1 d0 d1 pgp
  pgp=$(pg_pids)
  before=$(counter); g0=$(ticks "${PIDS[@]}"); d0=$(ticks $pgp)
  read -r n p50 p99 ok < <(load "$2" "$3")
  sleep 1  # answers cut off by wrk's end still commit
  after=$(counter); g1=$(ticks "${PIDS[@]}"); d1=$(ticks $pgp)
  ROWS+=("| $NAME | $INST | $1 | $n | $(python3 -c "print(f'{$ok/$DUR:.0f} ({$ok/$DUR/$INST:.0f})')") | $p50 | $p99 | $((after - before)) | $(python3 -c "print(f'{($g1-$g0)*1e6/$HZ/max($after-$before,1):.0f}')") | $([ -n "$pgp" ] && python3 -c "print(f'{($d1-$d0)*1e6/$HZ/max($after-$before,1):.0f}')" || echo -) |")
}
leg() { # name -> one table row per load
  NAME=$1
  local cfg="$WORK/$1.toml"
  cp "$WORK/base.toml" "$cfg"
  PORTS=""
  case $NAME in
    sqlite)
      start "$BIN" "$cfg" "$WORK/sqlite"
      counter() { count_sqlite "$WORK/sqlite/leads.sqlite3"; } ;;
    postgres)
      start_pg
      sed -i "s#^lead_store = \"sqlite\"#lead_store = \"postgres\"\npostgres_url = \"postgres://postgres@127.0.0.1:$PGPORT/postgres\"#" "$cfg"
      start "$BIN" "$cfg" "$WORK/pg-a"; start "$BIN" "$cfg" "$WORK/pg-b"
      counter() { count_pg; } ;;
    file)
      cp "$WORK/file-base.toml" "$cfg"
      start "$BASE_BIN" "$cfg" "$WORK/file"
      counter() { count_file "$WORK/file"; } ;;
  esac
  INST=$(echo $PORTS | wc -w)
  # A second of leads first (the store opens, migrates and imports on first use).
  lua warm 0 1 > "$WORK/warm.lua"
  for p in $PORTS; do wrk -t1 -c1 -d1s -s "$WORK/warm.lua" "http://127.0.0.1:$p$P" >/dev/null 2>&1; done
  run_load "saturated, $CONN conns" $((CONN / INST)) 0
  if [ "$RATE" -gt 0 ]; then run_load "paced, $RATE/s per instance" 32 "$RATE"; fi
  stop_pids
  stop_pg
}

for l in $LEGS; do leg "$l"; done
echo
echo "$(nproc) cores, load average before: $LOADAVG; ${DUR} s per run; CRM down (one attempt per lead)"
echo
echo "| store | instances | load | requests | accepted leads/s (per instance) | p50 ms | p99 ms | leads stored | gateway CPU µs/lead | PostgreSQL CPU µs/lead |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
