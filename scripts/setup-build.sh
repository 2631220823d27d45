#!/usr/bin/env bash
# Installs only what building and running the gateway need (idempotent):
# cmake and a C compiler (Pingora's zlib-ng). Used by scripts/run.sh; the test
# toolchain (Redis, PostgreSQL, a browser, Node, ...) is scripts/setup.sh's.
# Debian/Ubuntu; runs apt-get only when something is missing.
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)
if ((${#missing[@]})); then
  echo "== installing build prerequisites: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install a Rust toolchain (1.95 or newer) first" >&2
  exit 2
fi
