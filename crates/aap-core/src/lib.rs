//! aap-core: the AAP 3.0 MCP protocol core of aap-gateway, free of Pingora, sockets and DNS.
//!
//! Layout, each layer naming only the ones before it (docs/architecture.md; no module cycle,
//! `scripts/module-cycles.py`): the leaves `json` (strict fast JSON reading and writing),
//! `clock`, `digest`, `error` (the one failure → status/code table), `exchange` (the
//! transport-neutral request and response), `peer` (upstream addresses, syntax only), `host`
//! (host and URL syntax), `trace` (W3C trace context and phase times), `access` (the access-log
//! line), `metrics` (the Prometheus registry); then `config` (`gateway.toml`), `auth` (OAuth
//! resource-server checks, the verified caller and its scope check; keys fetched through a
//! port), `state` (a port), `feed` (inventory
//! feeds); `aap` (skills, schemas, catalog, cursors, the contract every call passes, and the
//! `backend` port); `context` (the per-request context and its phases); `endpoint` (the
//! binding-neutral tenant endpoint and the `Binding` seam); the bindings `mcp`
//! (JSON-RPC, mirror headers, revisions, media, sessions, the MCP binding) and `a2a` (the inbound
//! A2A 1.0 binding); and `publish` (the discovery documents, above both bindings).
//!
//! The compiler enforces the boundary: this crate's manifest has no network
//! stack, and the gateway crate depends on it, never the reverse.

pub mod a2a;
pub mod aap;
pub mod access;
pub mod auth;
pub mod clock;
pub mod config;
pub mod context;
pub mod digest;
pub mod endpoint;
pub mod error;
pub mod exchange;
pub mod feed;
pub mod host;
pub mod json;
pub mod mcp;
pub mod metrics;
pub mod peer;
pub mod publish;
pub mod state;
pub mod trace;

/// The backend port, beside the contract that calls it (`aap::backend`); re-exported at the
/// root because every implementation in the gateway crate names it.
pub use aap::backend;
