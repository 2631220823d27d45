//! The per-request context: one [`RequestCtx`] is made when a request's head is read, every
//! phase fills it, and [`RequestCtx::logging`] alone counts and logs the answer. Never holds arguments.
//!
//! The phases, in the spirit of Pingora's `ProxyHttp` (each named where it runs):
//! 1. `new_ctx` — [`RequestCtx::new`] (or [`RequestCtx::transport`] for an answer the
//!    HTTP/1.1 layer gives before a request exists): correlation id, start time, HTTP method.
//! 2. `route` — the path selects a tenant (`tenant` is set), its metadata document, or 404.
//! 3. `admit` — the head alone: Origin, HTTP method, media types (`Endpoint::head_refusal`),
//!    then the tenant budget, the access token and the caller budget (`gateway::admit`).
//!    One order for every tenant kind; a refusal here never reads the body.
//! 4. `serve` — the MCP endpoint or the relay: envelope, mirror headers, revision, dispatch,
//!    the AAP contract and the backend (`revision`, `method`, `skill`, `filled` are set).
//! 5. `logging` — [`RequestCtx::logging`]: metrics and the access line, exactly once per answer,
//!    whatever phase produced it.

use crate::access::{self, AccessRecord};
use crate::exchange::{HttpRequest, HttpVersion};
use crate::trace::Trace;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// What one request was and what became of it.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    /// The W3C trace id of a valid `traceparent`, else a fresh id; echoed as
    /// `X-Correlation-Id`.
    pub correlation_id: String,
    pub started: Instant,
    /// The HTTP method as received (`-` when the request line was unreadable).
    pub http_method: String,
    /// The tenant the path routed to, once routed.
    pub tenant: Option<String>,
    /// The binding that served the request: `mcp`, or `a2a` for a tenant's A2A path.
    pub binding: &'static str,
    /// The MCP revision the request was served on (`None` on the A2A binding).
    pub revision: Option<&'static str>,
    /// The JSON-RPC method.
    pub method: Option<String>,
    /// The AAP skill a `tools/call` (or an A2A `SendMessage`) named.
    pub skill: Option<&'static str>,
    /// The catalog name of the tool a `tools/call` named (only a tool the tenant serves).
    pub tool: Option<&'static str>,
    /// The HTTP version the request came in on.
    pub http_version: HttpVersion,
    /// The client's address (the TCP peer).
    pub client_address: Option<IpAddr>,
    /// The `User-Agent` header, cut to [`USER_AGENT_MAX`] bytes.
    pub user_agent: Option<String>,
    /// Request body bytes read.
    pub bytes_in: u64,
    /// `ok`, `replay`, an AAP error code, a JSON-RPC error code, or a
    /// transport outcome (`no_route`, `throttled`, `unauthorized`, …).
    pub outcome: String,
    /// Mirror headers the gateway derived because the client omitted them.
    pub filled: Vec<&'static str>,
    /// Host compatibility: JSON Pointers of the explicit nulls dropped from the arguments
    /// (property paths only, never values).
    pub nulls_dropped: Vec<String>,
    /// The W3C trace context and phase times, when tracing is configured
    /// (the gateway crate sets it after `new_ctx`; see `crate::trace`).
    pub trace: Option<Arc<Trace>>,
}

/// A context with no correlation id: a scratch value for work that is not
/// itself a request (it is never logged), so no id is minted for it.
impl Default for RequestCtx {
    fn default() -> Self {
        RequestCtx::transport("-", String::new())
    }
}

impl RequestCtx {
    /// `new_ctx`: the context of a request whose head was read, with its
    /// correlation id taken from `traceparent` when one is valid.
    pub fn new(http_method: &str, traceparent: Option<&str>) -> Self {
        let correlation_id = traceparent
            .and_then(trace_id)
            .unwrap_or_else(new_correlation_id);
        RequestCtx::transport(http_method, correlation_id)
    }

    /// The context of an answer the transport gives on its own (framing
    /// errors, connection limits), with the id it already stamped.
    pub fn transport(http_method: &str, correlation_id: String) -> Self {
        RequestCtx {
            correlation_id,
            started: Instant::now(),
            http_method: http_method.to_owned(),
            tenant: None,
            binding: "mcp",
            revision: None,
            method: None,
            skill: None,
            tool: None,
            http_version: HttpVersion::default(),
            client_address: None,
            user_agent: None,
            bytes_in: 0,
            outcome: String::new(),
            filled: Vec::new(),
            nulls_dropped: Vec::new(),
            trace: None,
        }
    }

    /// `new_ctx` for a request whose head (and body) was read: [`RequestCtx::new`] plus the
    /// connection facts the access line and the span report (version, client address,
    /// user agent, body size).
    pub fn of_request(req: &HttpRequest) -> Self {
        let mut ctx = RequestCtx::new(&req.method, req.header_str("traceparent"));
        ctx.http_version = req.version;
        ctx.client_address = req.peer_ip;
        ctx.user_agent = req
            .header_all("user-agent")
            .next()
            .map(|v| user_agent_text(v, USER_AGENT_MAX));
        ctx.bytes_in = req.body.len() as u64;
        ctx
    }

    /// What the backend port receives of this request (`aap::backend::Forward`): its correlation
    /// id and trace context, owned so that a streamed call can run in a task of its own; the
    /// binding adds what its client sent for a forwarding backend (MCP: `Mcp-Param-*` headers and
    /// the progress token).
    pub fn forward(&self) -> crate::aap::backend::Forward {
        crate::aap::backend::Forward {
            correlation_id: self.correlation_id.clone(),
            trace: self.trace.clone(),
            ..Default::default()
        }
    }

    /// The one place a finished request is counted (`aap_requests_total`
    /// and friends) and written to the access log; `bytes_out` is the answer's body size (for
    /// an event stream, the part known when the answer starts).
    pub fn logging(&self, status: u16, bytes_out: u64) {
        let elapsed = self.started.elapsed();
        let record = AccessRecord {
            correlation_id: &self.correlation_id,
            tenant: self.tenant.as_deref().unwrap_or("-"),
            binding: self.binding,
            mcp_revision: self.revision.unwrap_or("-"),
            aap_version: crate::aap::schemas::AAP_RELEASE,
            http_method: &self.http_method,
            rpc_method: self.method.as_deref().unwrap_or("-"),
            skill: self.skill.unwrap_or("-"),
            outcome: &self.outcome,
            status,
            filled: &self.filled,
            nulls_dropped: &self.nulls_dropped,
            latency_us: elapsed.as_micros() as u64,
            protocol: self.http_version.protocol(),
            client_address: self.client_address,
            user_agent: self.user_agent.as_deref().unwrap_or("-"),
            bytes_in: self.bytes_in,
            // A HEAD answer sends its head only.
            bytes_out: if self.http_method == "HEAD" {
                0
            } else {
                bytes_out
            },
        };
        crate::metrics::record(&record, elapsed.as_secs_f64());
        access::log(&record);
    }
}

/// The most bytes of a `User-Agent` an access line carries.
pub const USER_AGENT_MAX: usize = 256;

/// A `User-Agent` value as text of at most `max` bytes: invalid UTF-8 replaced, cut at a
/// character boundary.
fn user_agent_text(raw: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&raw[..raw.len().min(max + 4)]);
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The trace id of a valid W3C `traceparent` (32 hex digits, not all zero).
fn trace_id(traceparent: &str) -> Option<String> {
    let mut parts = traceparent.trim().split('-');
    let (_version, id) = (parts.next()?, parts.next()?);
    let (_parent, _flags) = (parts.next()?, parts.next()?);
    if parts.next().is_some()
        || id.len() != 32
        || !id.bytes().all(|b| b.is_ascii_hexdigit())
        || id.bytes().all(|b| b == b'0')
    {
        return None;
    }
    Some(id.to_ascii_lowercase())
}

/// A fresh correlation id (a random UUID, 32 hex digits).
pub fn new_correlation_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_agent_is_cut_at_a_character_boundary() {
        assert_eq!(user_agent_text(b"curl/8.5.0", 256), "curl/8.5.0");
        let long = "\u{e9}".repeat(200);
        let cut = user_agent_text(long.as_bytes(), 255);
        assert_eq!(cut.len(), 254, "whole characters only");
        assert!(cut.chars().all(|c| c == '\u{e9}'));
        assert_eq!(user_agent_text(&[b'a'; 1000], USER_AGENT_MAX).len(), 256);
        assert_eq!(user_agent_text(b"bad \xff byte", 256), "bad \u{fffd} byte");
    }

    #[test]
    fn correlation_id_follows_a_valid_traceparent_only() {
        let tp = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
        assert_eq!(
            RequestCtx::new("POST", Some(tp)).correlation_id,
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
            "garbage",
        ] {
            let id = RequestCtx::new("POST", Some(bad)).correlation_id;
            assert_eq!(id.len(), 32, "{bad}");
            assert_ne!(id, "4bf92f3577b34da6a3ce929d0e0e4736", "{bad}");
        }
    }
}
