#!/usr/bin/env bash
# A profile-guided build of the gateway (docs/operations.md "Profile-guided build"): an instrumented
# binary (Cargo profile `pgo-train`) serves benches/pgo_train.py's mix of calls, then the binary is
# built again from the counts it wrote (profile `pgo`), its hot code laid out together and its cold
# paths moved aside. About a tenth less CPU a search than `release` (9-12 % in interleaved runs).
#   bash scripts/build-pgo.sh                 # -> target/pgo/aap-gateway
#   TRAIN_SECONDS=20 bash scripts/build-pgo.sh   # how long the training load runs (default 20)
#   LLVM_PROFDATA=/path/llvm-profdata bash scripts/build-pgo.sh
#   bash scripts/build-pgo.sh --check-training   # no build: the training mix against target/release for
#                                 # 2 s, each call checked for the answer it trains (scripts/test.sh runs it)
# llvm-profdata must be of rustc's own LLVM major version (the counts' file format follows LLVM's):
# rustup's llvm-tools component when rustup is there, else Debian's llvm-<major> (installed when
# missing). Two release builds (about 10 minutes each on 2 cores when cold) and the training.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK=0
case "${1:-}" in
  "") ;;
  --check-training) CHECK=1 ;;
  *) echo "usage: bash scripts/build-pgo.sh [--check-training]" >&2; exit 2 ;;
esac
TRAIN_SECONDS=${TRAIN_SECONDS:-20}
# shellcheck source=benches/lib.sh
. benches/lib.sh
need python3 python3

# The training topology, as benches/load.sh's: an upstream gateway on the embedded dealer, and in front
# of it a validating tenant (kind = "mcp", h2c on), a relay tenant and the pass-through, all run from
# $1 (with LLVM_PROFILE_FILE, when set, in their environment). Sets UP FULL RELAY PT and PIDS.
WORK=$(mktemp -d); PIDS=()
cleanup() { stop_pids; rm -rf "$WORK"; }
trap cleanup EXIT
P=/aap/3.0.0/demo-toyota/mcp
start_topology() {
  local bin=$1
  UP=$(port); FULL=$(port); RELAY=$(port); PT=$(port)
  H2C=1 bench_configs "$WORK" "$UP"
  "$bin" --config "$WORK/upstream.toml" --listen "127.0.0.1:$UP" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/up" 2>/dev/null & PIDS+=($!)
  "$bin" --config "$WORK/full.toml" --listen "127.0.0.1:$FULL" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/full" 2>/dev/null & PIDS+=($!)
  "$bin" --config "$WORK/relay.toml" --listen "127.0.0.1:$RELAY" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/relay" 2>/dev/null & PIDS+=($!)
  "$bin" --config "$WORK/upstream.toml" --listen "127.0.0.1:$PT" --admin-listen "127.0.0.1:$(port)" --state-dir "$WORK/pt" passthrough --upstream "127.0.0.1:$UP" 2>/dev/null & PIDS+=($!)
  local p; for p in $UP $FULL $RELAY $PT; do wait_port "$p"; done
}

if [ "$CHECK" = 1 ]; then
  [ -x target/release/aap-gateway ] || cargo build --release --bin aap-gateway
  start_topology target/release/aap-gateway
  python3 benches/pgo_train.py --full "$FULL" --relay "$RELAY" --passthrough "$PT" --seconds 2
  exit 0
fi

bash scripts/setup-build.sh
need h2load nghttp2-client

# llvm-profdata of rustc's LLVM.
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
host=$(rustc -vV | sed -n 's/^host: //p')
matches() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "LLVM version $major\."; }
find_profdata() {
  local c
  for c in "${LLVM_PROFDATA:-}" "$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata" \
           "$(command -v "llvm-profdata-$major" || true)" "/usr/lib/llvm-$major/bin/llvm-profdata" \
           "$(command -v llvm-profdata || true)"; do
    [ -n "$c" ] && matches "$c" && { echo "$c"; return 0; }
  done
  return 1
}
if ! PROFDATA=$(find_profdata); then
  if command -v rustup >/dev/null && rustup component add llvm-tools >/dev/null 2>&1 && PROFDATA=$(find_profdata); then :
  elif need "llvm-profdata-$major" "llvm-$major" 2>/dev/null && PROFDATA=$(find_profdata); then :
  else
    echo "build-pgo: no llvm-profdata of LLVM $major (rustc's): add rustup's llvm-tools component," \
         "install Debian's llvm-$major, or set LLVM_PROFDATA" >&2
    exit 2
  fi
fi
echo "== llvm-profdata: $PROFDATA"

DATA=$PWD/target/pgo-data
rm -rf "$DATA"; mkdir -p "$DATA/raw"
echo "== building the instrumented binary (profile pgo-train)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$DATA/raw" cargo build --profile pgo-train --locked --bin aap-gateway
TRAIN=target/pgo-train/aap-gateway

# One counts file per process (%p), merged below.
LLVM_PROFILE_FILE="$DATA/raw/%p.profraw" start_topology "$TRAIN"
echo "== training for ${TRAIN_SECONDS}s"
python3 benches/pgo_train.py --full "$FULL" --relay "$RELAY" --passthrough "$PT" --seconds "$TRAIN_SECONDS"
# HTTP/2 (h2c, prior knowledge) and HTTP/1.1 from another client, the search call.
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
printf '%s' "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{$META,\"name\":\"aap_inventory_search\",\"arguments\":{\"type\":\"inventory.search.request\",\"pagination\":{\"limit\":5}}}}" > "$WORK/search.json"
hdr=(-H 'content-type: application/json' -H 'accept: application/json, text/event-stream')
h2load -t2 -c8 -m4 -D5 -d "$WORK/search.json" "${hdr[@]}" "http://127.0.0.1:$FULL$P" | grep -E '^requests:'
h2load --h1 -t2 -c16 -D3 -d "$WORK/search.json" "${hdr[@]}" "http://127.0.0.1:$FULL$P" | grep -E '^requests:'
# Each process writes its counts as it exits (SIGINT: a gateway stops at once).
stop_pids
n=$(find "$DATA/raw" -name '*.profraw' | wc -l)
[ "$n" -ge 4 ] || { echo "build-pgo: $n of 4 training processes wrote counts" >&2; exit 1; }
"$PROFDATA" merge -o "$DATA/merged.profdata" "$DATA/raw"
echo "== building with the counts (profile pgo)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$DATA/merged.profdata" cargo build --profile pgo --locked --bin aap-gateway
echo "== target/pgo/aap-gateway"
