# syntax=docker/dockerfile:1
# Build: docker build -t aap-gateway .
# Run:   docker run -p 8080:8080 -p 9090:9090 aap-gateway
FROM rust:1.95-slim-bookworm AS build
# cmake: Pingora's zlib-ng build script needs it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY schemas ./schemas
COPY benches ./benches
# The `dist` profile (Cargo.toml): whole-program optimization for the shipped binary.
RUN cargo build --profile dist --locked --bin aap-gateway \
 && strip target/dist/aap-gateway

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /srv/aap --shell /usr/sbin/nologin aap \
 && mkdir -p /srv/aap/var \
 && chown -R aap /srv/aap/var
WORKDIR /srv/aap
COPY --from=build /src/target/dist/aap-gateway /usr/local/bin/aap-gateway
COPY gateway.toml ./gateway.toml
COPY data ./data
USER aap
# Public MCP listener and admin listener (/healthz, /readyz, /metrics, POST /reload).
EXPOSE 8080 9090
# Inside a container the listeners must bind all interfaces.
ENTRYPOINT ["aap-gateway", "--config", "/srv/aap/gateway.toml", "--listen", "0.0.0.0:8080", "--admin-listen", "0.0.0.0:9090"]
