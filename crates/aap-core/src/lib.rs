//! aap-core: the AAP 3.0 MCP protocol core of aap-gateway, free of Pingora, sockets and DNS.
//!
//! Layout: `json` (strict fast JSON reading and writing), `mcp` (JSON-RPC,
//! mirror headers, revisions, media, sessions, the MCP endpoint), `a2a` (the
//! inbound A2A 1.0 binding over the same contract), `aap` (skills,
//! schemas, catalog, cursors, the contract every call passes), `backend` and
//! `state` (the ports the gateway crate implements), `auth` (OAuth resource-server
//! checks; keys fetched through a port), `exchange` (the transport-neutral request
//! and response), `config` (`gateway.toml`), `peer` (upstream addresses, syntax
//! only), `access` (the access-log line), `metrics` (the Prometheus registry),
//! `context` (the per-request context and its phases), `trace` (its W3C trace
//! context and phase times), `error` (the one
//! failure → status/code table), `clock` and `digest`.
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
pub mod error;
pub mod exchange;
pub mod feed;
pub mod host;
pub mod json;
pub mod mcp;
pub mod metrics;
pub mod peer;
pub mod state;
pub mod trace;

/// The backend port, beside the contract that calls it (`aap::backend`); re-exported at the
/// root because every implementation in the gateway crate names it.
pub use aap::backend;
