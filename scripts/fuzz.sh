#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time and fails on any
# crash, panic, timeout or out-of-memory input (libFuzzer exits non-zero and
# leaves the input under fuzz/artifacts/<target>/).
#
#   bash scripts/fuzz.sh                 # every target, 60 s each
#   AAP_FUZZ_SECONDS=300 bash scripts/fuzz.sh tool_arguments
#
# The machine has only the stable toolchain; cargo-fuzz needs nightly
# compiler flags, so they are unlocked with RUSTC_BOOTSTRAP=1. cargo-fuzz is
# installed from the crates registry when missing. Called by scripts/test.sh when
# AAP_TEST_LONG=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
seconds="${AAP_FUZZ_SECONDS:-60}"

if ! command -v c++ >/dev/null 2>&1; then
  echo "== installing g++ (libFuzzer is C++)"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++ >/dev/null
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz (from the crates registry)"
  cargo install cargo-fuzz --locked
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(cargo fuzz list)
fi

dict_for() {
  case "$1" in
    mirror_headers) echo "$PWD/fuzz/dict/mcp.dict" ;;
    h1_head | h1_chunked) echo "$PWD/fuzz/dict/http.dict" ;;
    *) echo "$PWD/fuzz/dict/json.dict" ;;
  esac
}

echo "== cargo fuzz build"
cargo fuzz build
for t in "${targets[@]}"; do
  echo "== cargo fuzz run $t (${seconds}s)"
  # The corpus (fuzz/corpus/<target>: committed seed-* files plus what
  # earlier runs found, which git ignores) grows in place.
  cargo fuzz run "$t" "$PWD/fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict="$(dict_for "$t")" -print_final_stats=1
done
echo "== fuzzing: no crashes in ${targets[*]}"
