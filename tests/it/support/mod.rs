//! Test harness shared by every integration test: the real binary on free
//! loopback ports, a raw HTTP client, MCP builders and upstream peers.

mod http;
mod mcp;
mod peers;
mod postgres_server;
mod process;
mod redis_servers;
mod store;
mod tenants;

pub use http::*;
pub use mcp::*;
pub use peers::*;
pub use postgres_server::*;
pub use process::*;
pub use redis_servers::*;
pub use store::*;
pub use tenants::*;
