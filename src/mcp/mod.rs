//! MCP Streamable HTTP: envelope, mirror headers, media, revisions,
//! legacy sessions and the endpoint itself.

pub mod headers;
pub mod jsonrpc;
pub mod media;
pub mod relay;
pub mod revision;
pub mod server;
pub mod session;
