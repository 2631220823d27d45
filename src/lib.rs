//! aap-gateway: an AAP 3.0 MCP compatibility gateway on Pingora.
//!
//! Layout: `mcp` (JSON-RPC, headers, revisions, the endpoint), `aap`
//! (skills, schemas, catalog, the shared contract), `upstream` (backends),
//! `state` (idempotency and limits), `json` (fast strict reading of
//! upstream answers), `config`, `gateway` (runtime and
//! routing), `access` (the per-request log line), `ingress` (the public
//! listener's connections and HTTP/1.1), `proxy` (admin listener and
//! pass-through on Pingora's HTTP stack) and `shutdown` (drain, then close).

pub mod aap;
pub mod access;
pub mod auth;
pub mod config;
pub mod gateway;
pub mod http;
pub mod ingress;
pub mod json;
pub mod mcp;
pub mod metrics;
pub mod proxy;
pub mod shutdown;
pub mod state;
pub mod tls;
pub mod upstream;
pub mod util;
