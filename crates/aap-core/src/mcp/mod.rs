//! MCP Streamable HTTP: envelope, mirror headers, media, revisions,
//! legacy sessions, result shaping and the endpoint itself.

pub mod headers;
pub mod jsonrpc;
pub mod media;
pub mod normalize;
pub mod result;
pub mod revision;
pub mod server;
pub mod session;
