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
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo build --release"
cargo build --release
echo "== the protocol core has no network stack (cargo tree -p aap-core)"
bash scripts/core-boundary.sh
echo "== no module cycle in either crate"
python3 scripts/module-cycles.py
echo "== docs/architecture-rules.md: every file, function, type and test it names resolves"
python3 scripts/rules-table-check.py
echo "== the profile-guided build's training mix gets the answers it trains (scripts/build-pgo.sh --check-training)"
bash scripts/build-pgo.sh --check-training
if [ "${AAP_TEST_IMAGE:-1}" != 0 ]; then
  echo "== container image: build the Dockerfile on a debootstrapped Debian base (buildah) and drive it"
  bash tests/image/run.sh
else echo "== container image: skipped (AAP_TEST_IMAGE=0)"; fi
echo "== alert rules: promtool check rules and promtool test rules (every alert fires in a case)"
bash scripts/alerts-test.sh
echo "== Kubernetes manifests: kubernetes-validate (PyPI) and probe/port consistency with the ConfigMap"
bash scripts/k8s-validate.sh
echo "== upstream peers (PyPI mcp 2.3.0, npm sdk 1.32.2, a2a-sdk): install and self-test"
bash tests/upstreams/setup.sh
bash tests/upstreams/selftest.sh
echo "== cargo test --release --workspace"
cargo test --release --workspace -- --test-threads=4
echo "== SDK end-to-end tests"
bash tests/sdk/run.sh target/release/aap-gateway
echo "== agent frameworks with host compatibility profiles (PyPI openai-agents, mcp-use, autogen-ext)"
bash tests/sdk/compat/run.sh target/release/aap-gateway
echo "== official MCP conformance suite (Node 22 from npm)"
bash tests/conformance/run.sh target/release/aap-gateway
# Fuzzing is always bounded: a short pass per target by default, five
# minutes per target in long mode (AAP_TEST_LONG=1). AAP_FUZZ_SECONDS wins.
if [ "${AAP_TEST_LONG:-0}" = 1 ]; then fuzz_default=300; else fuzz_default=20; fi
echo "== cargo-fuzz targets, ${AAP_FUZZ_SECONDS:-$fuzz_default} s each"
AAP_FUZZ_SECONDS="${AAP_FUZZ_SECONDS:-$fuzz_default}" bash scripts/fuzz.sh
echo "== all tests passed"
