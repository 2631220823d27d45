# syntax=docker/dockerfile:1
# The aap-gateway image. Full guide: docs/container.md.
#
#   docker build -t aap-gateway .
#   docker run --rm -p 8080:8080 -e AAP_ADMIN_TOKEN="$(openssl rand -hex 32)" \
#     -v aap-state:/srv/aap/var aap-gateway
#
# Without an image registry (CI here): `bash scripts/container-base.sh` imports
# a debootstrapped Debian bookworm as localhost/debian-base:bookworm, then
#   buildah build --layers --isolation chroot \
#     --build-arg BUILDER_IMAGE=localhost/debian-base:bookworm \
#     --build-arg RUNTIME_IMAGE=localhost/debian-base:bookworm -t aap-gateway .
# (tests/image/run.sh does that, with --build-arg PROFILE=release, the ulimits
# and the cacerts secret below, and drives the result).

# Base images. The defaults are the public images; any Debian bookworm image
# works for either, because the build stage installs a Rust toolchain itself
# when the image has none (below).
ARG BUILDER_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# --- plan: what the dependency layer is built from -------------------------
# Copies the context and keeps (1) in /plan: Cargo.lock, the manifest of the
# root package and of every workspace member under crates/, and an empty
# stand-in for each target root (src/lib.rs, src/main.rs, benches/*.rs), all
# with a fixed mtime so an unchanged set of manifests gives byte-identical
# files and the dependency layer below is reused; (2) in /srcs: the sources
# that are really compiled. The member list is the glob in MEMBERS: a new
# member under crates/ needs no change here, one elsewhere is added to it.
# (Hand-written rather than cargo-chef: that tool is not packaged in Debian,
# and compiling it from the crates registry would be part of every cold CI build.)
FROM ${BUILDER_IMAGE} AS plan
WORKDIR /ctx
COPY . .
RUN set -eu; \
    MEMBERS=". crates/*"; \
    mkdir -p /plan /srcs; \
    cp Cargo.lock /plan/; \
    cp -a Cargo.toml Cargo.lock schemas /srcs/; \
    for d in $MEMBERS; do \
      [ -f "$d/Cargo.toml" ] || continue; \
      mkdir -p "/plan/$d" "/srcs/$d"; \
      cp "$d/Cargo.toml" "/plan/$d/Cargo.toml"; \
      cp "$d/Cargo.toml" "/srcs/$d/Cargo.toml"; \
      for f in "$d"/src/lib.rs "$d"/src/main.rs "$d"/benches/*.rs; do \
        [ -f "$f" ] || continue; \
        mkdir -p "/plan/$(dirname "$f")"; \
        case "$f" in */lib.rs) : > "/plan/$f" ;; *) echo 'fn main() {}' > "/plan/$f" ;; esac; \
      done; \
      for s in src benches; do [ -d "$d/$s" ] && cp -a "$d/$s" "/srcs/$d/"; done; \
      if [ -f "$d/build.rs" ]; then cp "$d/build.rs" "/srcs/$d/build.rs"; fi; \
    done; \
    find /plan -exec touch -h -d @0 {} +

# --- build ----------------------------------------------------------------
FROM ${BUILDER_IMAGE} AS build
# cmake: Pingora's zlib-ng build script. The public rust image has cargo; a
# plain Debian bookworm base (where no registry is reachable) gets Debian's
# rustc-web/cargo-web (Rust 1.96, from bookworm-security), so one Dockerfile
# serves both.
RUN set -eu; \
    pkgs="ca-certificates cmake build-essential pkg-config"; \
    command -v cargo >/dev/null 2>&1 || pkgs="$pkgs rustc-web cargo-web"; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/*; \
    cargo --version; rustc --version
# `dist` (Cargo.toml: fat LTO, one codegen unit) is the shipped binary; CI
# builds `release` (several minutes shorter, same code) to stay in its budget.
ARG PROFILE=dist
WORKDIR /src
# Dependencies only, from the manifests and stand-ins: reused as long as no
# Cargo.toml or Cargo.lock changes.
COPY --from=plan /plan/ ./
# Optional build secret `cacerts`: a CA bundle for reaching the crates registry through
# a TLS-inspecting egress proxy (CI here passes the host's bundle:
# --secret id=cacerts,src=/etc/ssl/certs/ca-certificates.crt). Not stored in
# any layer; without it cargo uses the image's own CA store.
RUN --mount=type=secret,id=cacerts \
    if [ -s /run/secrets/cacerts ]; then export CARGO_HTTP_CAINFO=/run/secrets/cacerts; fi; \
    cargo build --profile "$PROFILE" --locked --bin aap-gateway
# The real sources; touched so cargo never takes them for the (older-stamped)
# stand-ins it has already compiled.
COPY --from=plan /srcs/ ./
# The commit `--version` and aap_build_info report (.git is not in the build
# context): tests/image/run.sh passes `--build-arg AAP_BUILD_COMMIT=$(git rev-parse --short=12 HEAD)`.
ARG AAP_BUILD_COMMIT=unknown
RUN --mount=type=secret,id=cacerts \
    set -eu; \
    export AAP_BUILD_COMMIT; \
    if [ -s /run/secrets/cacerts ]; then export CARGO_HTTP_CAINFO=/run/secrets/cacerts; fi; \
    find . -path ./target -prune -o -name '*.rs' -exec touch {} +; \
    cargo build --profile "$PROFILE" --locked --bin aap-gateway; \
    mkdir -p /out; \
    cp "target/$PROFILE/aap-gateway" /out/aap-gateway; \
    strip /out/aap-gateway; \
    /out/aap-gateway --version

# --- runtime --------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
RUN set -eu; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --system --gid 10001 aap; \
    useradd --system --uid 10001 --gid 10001 --home-dir /srv/aap --no-create-home \
      --shell /usr/sbin/nologin aap; \
    mkdir -p /srv/aap/var; \
    chown aap:aap /srv/aap/var
WORKDIR /srv/aap
COPY --from=build /out/aap-gateway /usr/local/bin/aap-gateway
# The shipped config and the demo dealer's data; state.dir = "var" resolves
# to /srv/aap/var. Mount your own config over /srv/aap/gateway.toml (or pass
# --config); the admin token comes from AAP_ADMIN_TOKEN (admin_token_env).
COPY gateway.toml ./gateway.toml
COPY data ./data
# Idempotency records, leads, the lock and the upgrade socket (no pid file).
VOLUME ["/srv/aap/var"]
USER aap:aap
# Only the public MCP listener. The admin listener (/healthz, /readyz,
# /metrics, POST /reload, POST /idempotency/resolve) keeps the shipped
# config's 127.0.0.1:9090: reachable inside the container's network namespace
# only. Publish it deliberately with --admin-listen 0.0.0.0:9090 (as
# ops/k8s does, for the kubelet's probes).
EXPOSE 8080
# Ready when the admin listener's /readyz answers 200 (`aap-gateway health`:
# no curl in the image). Kept in Docker-format images; OCI images drop it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["aap-gateway", "--config", "/srv/aap/gateway.toml", "health"]
ENTRYPOINT ["aap-gateway"]
CMD ["--config", "/srv/aap/gateway.toml", "--listen", "0.0.0.0:8080"]
