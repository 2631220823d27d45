#!/usr/bin/env bash
# Checks the workspace boundary the compiler cannot see alone: the protocol core
# (crates/aap-core) must not depend, even transitively, on Pingora, on a network
# client (redis, hyper, reqwest) or on tokio's `net` feature. Prints the offending
# path through the dependency tree and exits 1 if it does.
set -euo pipefail
cd "$(dirname "$0")/.."
tree="$(cargo tree -p aap-core -e normal --prefix none --format '{p}')"
bad="$(printf '%s\n' "$tree" | grep -E '^(pingora|redis|hyper|reqwest|h2|rustls|tokio-rustls|socket2|mio) ' | sort -u || true)"
if [ -n "$bad" ]; then
  echo "core-boundary: aap-core depends on network crates:"
  printf '%s\n' "$bad"
  for c in $(printf '%s\n' "$bad" | cut -d' ' -f1); do cargo tree -p aap-core -e normal -i "$c" | head -20; done
  exit 1
fi
features="$(cargo tree -p aap-core -e features -i tokio --prefix none 2>/dev/null | grep -E '^tokio feature "net"' || true)"
if [ -n "$features" ]; then
  echo "core-boundary: aap-core turns on tokio's \"net\" feature:"
  cargo tree -p aap-core -e features -i tokio | head -40
  exit 1
fi
echo "core-boundary: aap-core depends on $(printf '%s\n' "$tree" | sort -u | wc -l) crates, none of them a network stack"
