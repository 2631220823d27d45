#!/usr/bin/env bash
# One command to run every test: installs prerequisites (system packages,
# PyPI and npm packages), checks formatting and lints, builds the release
# binary once and runs the Rust unit and HTTP integration tests plus the
# official-SDK end-to-end tests against the real binary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy (release profile, all targets)"
cargo clippy --release --all-targets -- -D warnings
echo "== cargo build --release"
cargo build --release
echo "== upstream peers (PyPI mcp 2.3.0, npm sdk 1.32.2, a2a-sdk): install and self-test"
bash tests/upstreams/setup.sh
bash tests/upstreams/selftest.sh
echo "== cargo test --release"
cargo test --release -- --test-threads=4
echo "== SDK end-to-end tests"
bash tests/sdk/run.sh target/release/aap-gateway
if [ "${AAP_TEST_LONG:-0}" = 1 ]; then bash scripts/fuzz.sh; fi  # long mode: bounded cargo-fuzz runs
echo "== all tests passed"
