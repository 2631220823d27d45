#!/usr/bin/env bash
# Builds the repository's Dockerfile into an image and drives it over real HTTP.
#
#   bash tests/image/run.sh
#
# 1. scripts/container-base.sh: podman/buildah/runc from apt and the base image
#    localhost/debian-base:bookworm (debootstrap + podman import) when missing.
# 2. buildah build of the Dockerfile on that base for both stages, with the
#    `release` profile (AAP_IMAGE_PROFILE=dist builds the shipped profile) and
#    layer caching: a second run reuses the toolchain and dependency layers.
# 3. Checks the image's config: only 8080/tcp exposed, user aap (10001), the
#    state directory a volume, a default command that leaves the admin
#    listener on the shipped config's loopback address.
# 4. Runs it with its default command (shipped /srv/aap/gateway.toml) on
#    podman's bridge network, 8080 published on a free loopback port,
#    AAP_ADMIN_TOKEN set and a named volume on /srv/aap/var (runtime runc,
#    cgroupfs, explicit ulimits). Checks only 8080 is published and the
#    admin port is refused from the host; tests/image/drive.py then drives
#    server/discover, tools/list, aap_inventory_search, aap_lead_submit and
#    its retry (same lead_id) through the published port, and /readyz,
#    /metrics and POST /reload (401 without the token, 200 with it) from
#    inside the container's network namespace. Checks the lead landed on the
#    volume as uid 10001, stops the container (SIGTERM, exit 0) and starts a
#    second one on the same volume, locked down as ops/k8s runs it (read-only
#    root, no capabilities): the retry still gets the same lead_id.
# 5. Removes the containers and the volume on any exit; keeps the image
#    ($AAP_IMAGE_TAG, default localhost/aap-gateway:test) and the layer cache;
#    removes the image this build replaced.
#
# Needs root (or sudo) for podman/buildah. Exits non-zero on any failure.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
cd "$REPO"
BASE_IMAGE="${AAP_BASE_IMAGE:-localhost/debian-base:bookworm}"
IMAGE="${AAP_IMAGE_TAG:-localhost/aap-gateway:test}"
PROFILE="${AAP_IMAGE_PROFILE:-release}"
CA_BUNDLE="${AAP_IMAGE_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
# runc explicitly (podman prefers crun when both are installed, and crun is
# reported to fail on this host's hybrid v1/v2 cgroups); cgroupfs because
# PID 1 is not systemd; explicit ulimits because podman's defaults (nofile
# 1048576) exceed what the sandbox may set (setrlimit: operation not permitted).
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
PODMAN=($SUDO podman --runtime runc --cgroup-manager cgroupfs)
NAME="aap-image-test-$$"
VOLUME="aap-image-test-state-$$"
WORK="$(mktemp -d)"
mkdir -p target
BUILD_LOG="$REPO/target/image-build.log"
cleanup() {
  local rc=$?
  "${PODMAN[@]}" rm -f -t 2 "$NAME" "$NAME-2" >/dev/null 2>&1 || true
  "${PODMAN[@]}" volume rm -f "$VOLUME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "image: FAIL: $*" >&2
  exit 1
}

bash scripts/container-base.sh

echo "[image] buildah build (profile $PROFILE) -> $IMAGE"
secret=()
if [ -s "$CA_BUNDLE" ]; then secret=(--secret "id=cacerts,src=$CA_BUNDLE"); fi
old_id="$($SUDO podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
start=$SECONDS
$SUDO buildah build --layers --isolation chroot "${ULIMITS[@]}" "${secret[@]}" \
  --build-arg "BUILDER_IMAGE=$BASE_IMAGE" --build-arg "RUNTIME_IMAGE=$BASE_IMAGE" \
  --build-arg "PROFILE=$PROFILE" \
  --build-arg "AAP_BUILD_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
  -t "$IMAGE" . >"$BUILD_LOG" 2>&1 \
  || { tail -n 60 "$BUILD_LOG" >&2; fail "buildah build failed (log: $BUILD_LOG)"; }
echo "[image] built in $((SECONDS - start)) s; $(grep -c '^--> Using cache' "$BUILD_LOG" || true) steps from cache (log: $BUILD_LOG)"
if grep -q '^--> Using cache' < <(grep -A1 'STEP .*cargo build --profile "$PROFILE" --locked --bin aap-gateway$' "$BUILD_LOG"); then
  echo "[image] dependency layer reused"
fi
# A rebuild leaves the previous image untagged: remove it. Not `podman image
# prune`: that also removes the untagged intermediate images that are the
# layer cache (the dependency layer among them).
new_id="$($SUDO podman image inspect --format '{{.Id}}' "$IMAGE")"
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  $SUDO podman rmi "$old_id" >/dev/null 2>&1 || true
fi

echo "[image] image config"
cfg="$($SUDO podman image inspect --format '{{json .Config}}' "$IMAGE")"
python3 - "$cfg" <<'EOF' || fail "image config"
import json, sys
c = json.loads(sys.argv[1])
def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what)
    if not cond:
        sys.exit(1)
check(sorted(c.get("ExposedPorts") or {}) == ["8080/tcp"], "only the public listener 8080/tcp is exposed: %s" % sorted(c.get("ExposedPorts") or {}))
check(c.get("User") == "aap:aap", "runs as user aap: %r" % c.get("User"))
check(sorted(c.get("Volumes") or {}) == ["/srv/aap/var"], "state directory /srv/aap/var is a volume")
cmd = (c.get("Entrypoint") or []) + (c.get("Cmd") or [])
check(cmd == ["aap-gateway", "--config", "/srv/aap/gateway.toml", "--listen", "0.0.0.0:8080"],
      "default command: shipped config, public listener on all interfaces, no --admin-listen: %s" % cmd)
EOF
# The shipped config keeps the admin listener on loopback, so the default
# command never publishes it.
"${PODMAN[@]}" run --rm "${ULIMITS[@]}" --network none --entrypoint cat "$IMAGE" /srv/aap/gateway.toml >"$WORK/gateway.toml"
grep -qx 'admin_listen = "127.0.0.1:9090"' "$WORK/gateway.toml" \
  || fail "the image's gateway.toml does not keep admin_listen on 127.0.0.1"
echo "  ok   the image's gateway.toml keeps admin_listen on 127.0.0.1:9090"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
TOKEN="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
MCP="http://127.0.0.1:$PORT/aap/3.0.0/demo-toyota/mcp"
"${PODMAN[@]}" volume create "$VOLUME" >/dev/null

# The image's default command on podman's bridge network, publishing what
# the image exposes (8080) on a free loopback port of the host. The admin
# listener is reached only from inside the container's network namespace
# (nsenter), as a sidecar or the kubelet's probe would.
start_container() {
  local name="$1"
  shift
  "${PODMAN[@]}" run -d --name "$name" "${ULIMITS[@]}" -p "127.0.0.1:$PORT:8080" \
    -e AAP_ADMIN_TOKEN="$TOKEN" -v "$VOLUME:/srv/aap/var" "$@" "$IMAGE" >/dev/null
  set -- "$name"
  PID="$("${PODMAN[@]}" inspect --format '{{.State.Pid}}' "$1")"
  local i
  for i in $(seq 1 150); do
    if $SUDO nsenter -t "$PID" -n curl -fsS -o /dev/null http://127.0.0.1:9090/readyz 2>/dev/null; then
      echo "[image] $1 ready after ~$((i / 5)) s"
      return 0
    fi
    if [ "$("${PODMAN[@]}" inspect --format '{{.State.Running}}' "$1" 2>/dev/null)" != true ]; then
      "${PODMAN[@]}" logs "$1" 2>&1 | tail -n 30 >&2
      fail "$1 exited before it was ready"
    fi
    sleep 0.2
  done
  "${PODMAN[@]}" logs "$1" 2>&1 | tail -n 30 >&2
  fail "$1 not ready within 30 s"
}
logs_and_fail() {
  "${PODMAN[@]}" logs "$1" 2>&1 | tail -n 30 >&2
  fail "$2"
}

start_container "$NAME"
uid="$("${PODMAN[@]}" exec "$NAME" id -u)"
[ "$uid" = 10001 ] || fail "the gateway runs as uid $uid, not 10001"
echo "  ok   the gateway runs as uid 10001"

# Not exposed: only 8080 is published, and from the host the container's
# address answers on 8080 (the public listener binds all interfaces) but
# refuses 9090 (the admin listener binds the container's loopback).
ports="$("${PODMAN[@]}" port "$NAME")"
[ "$ports" = "8080/tcp -> 127.0.0.1:$PORT" ] || fail "published ports: $ports"
echo "  ok   only 8080/tcp is published"
ip="$("${PODMAN[@]}" inspect --format '{{.NetworkSettings.IPAddress}}' "$NAME")"
[ -n "$ip" ] || fail "the container has no address on podman's network"
code="$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "http://$ip:8080/" || true)"
[ "$code" != 000 ] || fail "the public listener does not answer on $ip:8080"
if curl -sS -o /dev/null --max-time 5 "http://$ip:9090/healthz" 2>/dev/null; then
  fail "the admin listener answers on the container's address $ip:9090"
fi
echo "  ok   from the host $ip:8080 answers (HTTP $code) and $ip:9090 is refused"

python3 "$SCRIPT_DIR/drive.py" first --mcp "$MCP" --lead-file "$WORK/lead.json" \
  || logs_and_fail "$NAME" "drive.py first"
$SUDO nsenter -t "$PID" -n python3 "$SCRIPT_DIR/drive.py" admin --admin http://127.0.0.1:9090 \
  --token "$TOKEN" --replays 1 || logs_and_fail "$NAME" "drive.py admin"

# The lead is on the volume, written by the unprivileged user.
mnt="$("${PODMAN[@]}" volume inspect --format '{{.Mountpoint}}' "$VOLUME")"
leads="$mnt/leads.sqlite3"
lead_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["lead_id"])' "$WORK/lead.json")"
[ -f "$leads" ] || fail "no leads.sqlite3 (the embedded lead store) on the volume"
# Read-only, so the host creates no file the container's user could not write.
count_lead() {
  python3 - "$leads" "$lead_id" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print(db.execute("SELECT COUNT(*) FROM leads WHERE lead_id = ?", (sys.argv[2],)).fetchone()[0])
PY
}
n="$(count_lead)" || fail "the lead store on the volume cannot be read"
[ "$n" = 1 ] || fail "lead $lead_id is not exactly once in the lead store ($n)"
[ "$(stat -c %u "$leads")" = 10001 ] || fail "leads.sqlite3 is not owned by uid 10001"
echo "  ok   the lead is once in the SQLite lead store on the volume, owned by uid 10001"

# Graceful stop (SIGTERM), then a new container on the same volume.
"${PODMAN[@]}" stop -t 20 "$NAME" >/dev/null
code="$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")"
[ "$code" = 0 ] || logs_and_fail "$NAME" "the gateway exited with $code on SIGTERM"
echo "  ok   SIGTERM stops the gateway with status 0"
"${PODMAN[@]}" rm "$NAME" >/dev/null
# The second one as ops/k8s runs it: read-only root filesystem, no
# capabilities, no privilege escalation.
start_container "$NAME-2" --read-only --cap-drop ALL --security-opt no-new-privileges
python3 "$SCRIPT_DIR/drive.py" restart --mcp "$MCP" --lead-file "$WORK/lead.json" \
  || logs_and_fail "$NAME-2" "drive.py restart"
[ "$(count_lead)" = 1 ] || fail "the retry after the restart wrote a second lead"
echo "  ok   still one lead after the restart"
echo "image: all checks passed"
