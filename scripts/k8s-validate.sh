#!/usr/bin/env bash
# Validate the Kubernetes manifests (ops/k8s by default, or DIR):
#   1. kubernetes-validate (PyPI, strict: unknown fields fail) against the
#      oldest Kubernetes the manifests support (1.30: the preStop `sleep`
#      action) and the newest the package knows;
#   2. scripts/k8s_check.py: probes on the ConfigMap's admin_listen
#      (/readyz, /healthz), the Service on the public port only, the grace
#      period covering preStop + drain + grace, the admin token from the Secret;
#   3. `aap-gateway check` on the ConfigMap's gateway.toml (when the release
#      binary exists), with the image's paths mapped to the repository.
# For ops/k8s it also shows that each step fails on a broken copy.
#
#   bash scripts/k8s-validate.sh [DIR]
#
# The venv lives in $AAP_K8S_VENV (default target/k8s-venv); pip runs only
# when the pinned version is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
DIR="${1:-ops/k8s}"
VENV="${AAP_K8S_VENV:-$REPO/target/k8s-venv}"
BIN="${AAP_GATEWAY_BIN:-$REPO/target/release/aap-gateway}"
KV_VERSION="1.37.0"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1

if ! "$VENV/bin/python" -c 'import kubernetes_validate, yaml' >/dev/null 2>&1 \
   || [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))')" != "$KV_VERSION" ]; then
  echo "[k8s-validate] installing kubernetes-validate==$KV_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --progress-bar off "kubernetes-validate==$KV_VERSION" PyYAML
fi

validate() {
  local dir="$1"
  "$VENV/bin/kubernetes-validate" --strict --quiet -k 1.30.0 "$dir"/*.yaml \
    && "$VENV/bin/kubernetes-validate" --strict --quiet "$dir"/*.yaml \
    && "$VENV/bin/python" scripts/k8s_check.py "$dir"
}

validate "$DIR"
echo "[k8s-validate] $DIR: schemas (1.30 and $KV_VERSION, strict) and consistency ok"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -x "$BIN" ]; then
  # The image's paths, mapped onto the repository and a scratch directory.
  "$VENV/bin/python" scripts/k8s_check.py "$DIR" --emit-config "$tmp/gateway.toml" >/dev/null
  printf 'k8s-validate-token-%s\n' "$(date +%s%N)" > "$tmp/admin-token"
  # The lead store's URL Secret, mapped the same way (check never connects).
  printf 'postgres://aap:k8s-validate@127.0.0.1:5432/aap\n' > "$tmp/postgres-url"
  sed -i \
    -e "s#/var/run/secrets/aap-gateway-postgres/url#$tmp/postgres-url#" \
    -e "s#/srv/aap/data/#$REPO/data/#g" \
    -e "s#^dir = \"/srv/aap/var\"#dir = \"$tmp/var\"#" \
    -e "s#^admin_token_file = .*#admin_token_file = \"$tmp/admin-token\"#" \
    "$tmp/gateway.toml"
  "$BIN" check --config "$tmp/gateway.toml"
  echo "[k8s-validate] the ConfigMap's gateway.toml passes aap-gateway check"
else
  echo "[k8s-validate] $BIN not built: skipping aap-gateway check of the ConfigMap"
fi

if [ "$DIR" = ops/k8s ]; then
  # The checks must be able to fail: a schema error and a probe on the wrong
  # port, each in a copy, must be refused.
  mkdir "$tmp/bad-schema" "$tmp/bad-probe"
  cp ops/k8s/*.yaml "$tmp/bad-schema/"
  cp ops/k8s/*.yaml "$tmp/bad-probe/"
  sed -i 's/^  replicas: 2$/  replicas: "two"/' "$tmp/bad-schema/deployment.yaml"
  sed -i 's#path: /readyz#path: /ready#' "$tmp/bad-probe/deployment.yaml"
  for bad in bad-schema bad-probe; do
    if validate "$tmp/$bad" >"$tmp/$bad.log" 2>&1; then
      echo "[k8s-validate] ERROR: a broken copy ($bad) passed:" >&2
      cat "$tmp/$bad.log" >&2
      exit 1
    fi
  done
  echo "[k8s-validate] broken copies (schema, probe path) are refused"
fi
