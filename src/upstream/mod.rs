//! Backend implementations: the embedded dealer, strict MCP and A2A upstreams, the relay, and the
//! pooled HTTP client they share. The port they implement lives in `aap_core::backend`.

pub mod a2a;
pub mod client;
pub mod cluster;
pub mod embedded;
pub mod hop;
pub mod inventory;
pub mod mcp;
pub mod relay;
