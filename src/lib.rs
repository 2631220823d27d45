//! aap-gateway: the Pingora adapter around `aap_core` — ingress, admin listener, TLS, the
//! upstream HTTP client and backends, the stores, and the composition root (`gateway`).
//!
//! Layout: `ingress` (the public listener's connections, HTTP/1.1 and HTTP/2), `admin`
//! (the admin listener), `passthrough` (the benchmark baseline), `tls`, `upstream`
//! (backend implementations and the pooled client), `state` (counters: in-process and
//! Redis buckets), `store` (the lead store), `gateway` (tenants, routing, reload), `telemetry` (request traces over OTLP) and
//! `shutdown` (drain, then close); `platform` is the process's composition root (the registries
//! every generation shares) and `series` the crate's Prometheus series.
//! The protocol modules are re-exported from `aap_core` under their old paths.

pub use aap_core::{
    a2a, aap, access, auth, backend, clock, config, context, digest, endpoint, error, exchange,
    feed, host, json, mcp, metrics, peer, publish,
};

pub mod admin;
pub mod background;
pub mod chunked;
pub mod cli;
pub mod file_stamp;
pub mod gateway;
pub mod ingress;
pub mod leads;
pub mod log_sink;
pub mod memory;
pub mod outbound;
pub mod passthrough;
pub mod platform;
pub mod series;
pub mod shutdown;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod upstream;
