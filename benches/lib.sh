# shellcheck shell=bash
# Shell helpers the load benches share (sourced by load.sh, leads.sh, profile.sh and scripts/build-pgo.sh):
# installing a missing tool (need), free loopback ports, waiting for a listener, stopping the processes a
# bench started (the PIDS array), and the gateway configurations they run (bench_configs).

# A free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Install Debian package $2 (apt-get, with sudo when not root) when command $1 is missing.
need() {
  command -v "$1" >/dev/null && return 0
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null
}

# Wait up to 10 s for a listener on loopback port $1; exit the bench if none comes.
wait_port() {
  for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "port $1 never opened" >&2; exit 1
}

# Stop every process in PIDS: SIGINT first (a gateway stops at once; SIGTERM would drain for seconds,
# and a run started meanwhile on the same ports would share them through SO_REUSEPORT; nginx's master
# does a fast shutdown), then SIGKILL for anything still alive after 5 s. PIDS is emptied.
stop_pids() {
  local p alive
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  PIDS=()
}

# The benches' configurations, written into directory $1 from the shipped gateway.toml: upstream.toml (no lead
# quota, the demo data by absolute path) and, for a gateway in front of an upstream on loopback port $2, full.toml
# (the demo tenant's backend swapped for that MCP upstream under the AAP contract) and relay.toml (a transparent
# relay to it). H2C=1 turns h2c on in full.toml.
bench_configs() {
  sed -e 's/lead_submit_per_hour = 30/lead_submit_per_hour = 0/' -e "s#\"data/#\"$PWD/data/#" gateway.toml > "$1/upstream.toml"
  python3 - "$1" "$2" "${H2C:-0}" <<'PY'
import sys
out, up, h2c = sys.argv[1:]
s = open(f"{out}/upstream.toml").read()
start = s.index("[tenants.backend]"); end = s.index("[tenants.rate_limit]")
peer = f'peers = ["http://127.0.0.1:{up}"]\npath = "/aap/3.0.0/demo-toyota/mcp"\n'
for name, kind in (("full", 'kind = "mcp"\n' + peer + 'revision = "2026-07-28"\n'), ("relay", 'kind = "relay"\n' + peer)):
    text = s[:start] + "[tenants.backend]\n" + kind + "\n" + s[end:]
    if name == "full" and h2c == "1":
        text = text.replace("\nh2c = false", "\nh2c = true")
    open(f"{out}/{name}.toml", "w").write(text)
PY
}
