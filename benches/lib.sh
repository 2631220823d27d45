# shellcheck shell=bash
# Shell helpers the load benches share (sourced by load.sh, leads.sh and profile.sh): free loopback
# ports, waiting for a listener, and stopping the processes a bench started (the PIDS array).

# A free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

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
