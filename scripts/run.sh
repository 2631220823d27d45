#!/usr/bin/env bash
# One command to run the gateway on the embedded demo dealer (gateway.toml):
# installs only the build prerequisites (scripts/setup-build.sh: cmake and a C
# compiler, nothing of the test toolchain), builds in release mode, starts the server.
# Extra arguments go to aap-gateway (e.g. --listen 127.0.0.1:8081).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-build.sh
cargo build --release
exec ./target/release/aap-gateway --config gateway.toml "$@"
