//! Test harness shared by every integration test: the real binary on free
//! loopback ports, a raw HTTP client, MCP builders and upstream peers.

mod http;
mod mcp;
mod peers;
mod process;

pub use http::*;
pub use mcp::*;
pub use peers::*;
pub use process::*;
