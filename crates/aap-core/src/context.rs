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
use crate::trace::Trace;
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
            outcome: String::new(),
            filled: Vec::new(),
            nulls_dropped: Vec::new(),
            trace: None,
        }
    }

    /// The one place a finished request is counted (`aap_requests_total`
    /// and friends) and written to the access log.
    pub fn logging(&self, status: u16) {
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
        };
        crate::metrics::record(&record, elapsed.as_secs_f64());
        access::log(&record);
    }
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
