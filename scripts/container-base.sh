#!/usr/bin/env bash
# Container tooling and a Debian base image for building the Dockerfile on a
# machine that reaches Debian's package mirror but no image registry (CI).
#
#   bash scripts/container-base.sh
#
# 1. Installs podman, buildah, runc, debootstrap, uidmap and fuse-overlayfs
#    from apt when one is missing (needs root or sudo).
# 2. When the local image localhost/debian-base:bookworm is absent, builds it:
#    `debootstrap --variant=minbase bookworm` into a scratch directory, gives it
#    the same apt sources as the public debian:bookworm image (bookworm,
#    bookworm-updates, bookworm-security: rustc-web/cargo-web 1.96 come from
#    bookworm-security), drops apt's caches and lists, and imports the tree
#    with `podman import`. Present already: nothing is done, so a second run
#    costs a second.
#
# The Dockerfile uses that image for both stages when built with
#   --build-arg BUILDER_IMAGE=localhost/debian-base:bookworm
#   --build-arg RUNTIME_IMAGE=localhost/debian-base:bookworm
# (see docs/container.md). The mirrors are the ones this machine's apt uses (the first
# source listing the suite bookworm, and bookworm-security); AAP_BASE_IMAGE,
# AAP_DEBIAN_MIRROR and AAP_DEBIAN_SECURITY_MIRROR override the image name and the mirrors.
set -euo pipefail
BASE_IMAGE="${AAP_BASE_IMAGE:-localhost/debian-base:bookworm}"
# The URI of the host's first apt source that lists suite $1 (deb822 .sources files, then
# one-line sources.list entries).
host_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v s="$1" '
    /^[ \t]*$/ {u = ""}
    /^URIs:/ {u = $2}
    /^Suites:/ {for (i = 2; i <= NF; i++) if ($i == s && u != "") {print u; exit}}')
  if [ -z "$uri" ]; then
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk -v s="$1" '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/ && $(i + 1) == s) {print $i; exit}}')
  fi
  printf '%s' "$uri"
}
MIRROR="${AAP_DEBIAN_MIRROR:-$(host_mirror bookworm)}"
SECURITY_MIRROR="${AAP_DEBIAN_SECURITY_MIRROR:-$(host_mirror bookworm-security)}"
if [ -z "$MIRROR" ] || [ -z "$SECURITY_MIRROR" ]; then
  echo "[container-base] no apt source for bookworm (or bookworm-security) on this machine: set AAP_DEBIAN_MIRROR and AAP_DEBIAN_SECURITY_MIRROR" >&2
  exit 2
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
command -v fuse-overlayfs >/dev/null 2>&1 || missing+=(fuse-overlayfs)
if ((${#missing[@]})); then
  echo "[container-base] installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if $SUDO podman image exists "$BASE_IMAGE"; then
  echo "[container-base] $BASE_IMAGE present"
  exit 0
fi

scratch="$($SUDO mktemp -d /var/tmp/aap-debian-base.XXXXXX)"
trap '$SUDO rm -rf "$scratch"' EXIT
root="$scratch/rootfs"
echo "[container-base] debootstrap --variant=minbase bookworm ($MIRROR)"
start=$SECONDS
if ! $SUDO debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$scratch/debootstrap.log" 2>&1; then
  tail -n 30 "$scratch/debootstrap.log" >&2
  echo "[container-base] debootstrap failed" >&2
  exit 1
fi
echo "[container-base] debootstrap took $((SECONDS - start)) s"
# The public image's sources (deb822), so `apt-get install` inside a build
# sees the same suites as on debian:bookworm-slim.
$SUDO rm -f "$root/etc/apt/sources.list"
$SUDO tee "$root/etc/apt/sources.list.d/debian.sources" >/dev/null <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
# Nothing host-specific or stale in the image: podman provides resolv.conf
# and hostname at run time; package lists are fetched by each build.
$SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
  "$root"/var/lib/apt/lists/* "$root/etc/resolv.conf" "$root/etc/hostname"
$SUDO mkdir -p "$root/var/lib/apt/lists/partial"
$SUDO tar -C "$root" -c . | $SUDO podman import --quiet \
  --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
echo "[container-base] imported $BASE_IMAGE ($((SECONDS - start)) s in all)"
