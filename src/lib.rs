//! aap-gateway: the Pingora adapter around `aap_core` — ingress, admin listener, TLS, the
//! upstream HTTP client and backends, the stores, and the composition root (`gateway`).
//!
//! Layout: `ingress` (the public listener's connections and HTTP/1.1), `proxy`
//! (admin listener and pass-through on Pingora's HTTP stack), `tls`, `upstream`
//! (backend implementations and the pooled client), `state` (local log and Redis
//! stores), `gateway` (tenants, routing, reload) and `shutdown` (drain, then close).
//! The protocol modules are re-exported from `aap_core` under their old paths.

pub use aap_core::{
    aap, access, auth, backend, config, context, error, exchange, json, mcp, metrics, peer, util,
};

pub mod gateway;
pub mod ingress;
pub mod proxy;
pub mod shutdown;
pub mod state;
pub mod tls;
pub mod upstream;
