//! `kind = "relay"`: a transparent MCP relay in front of one upstream server.
//!
//! Unlike the `mcp` backend, which serves the five AAP tools and re-encodes
//! every call, a relay forwards whatever the client sends (any method, plus
//! GET event streams and DELETE) and streams the answer back untouched. The
//! gateway still applies admission (Origin, auth, rate limits, body size)
//! and makes the MCP metadata headers agree with the body (see
//! [`crate::mcp::normalize`]). It remembers, per upstream `Mcp-Session-Id`, the
//! peer that issued it (affinity) and the negotiated protocol version (to
//! fill an omitted `MCP-Protocol-Version`).

use super::client::{Client, Request, StreamedBody};
use super::hop;
use crate::backend::BackendError;
use crate::context::RequestCtx;
use crate::error::Failure;
use crate::exchange::{HttpRequest, HttpResponse};
use crate::mcp::headers::{read_mirror_headers, SESSION_ID};
use crate::mcp::jsonrpc::{self, Message, RpcError};
use crate::mcp::media;
use crate::mcp::normalize::normalize;
use aap_core::trace::Phase;
use bytes::Bytes;
use moka::policy::EvictionPolicy;
use serde_json::Value;
use std::time::Duration;

/// Sessions remembered at most (the least recently used are dropped first).
const MAX_SESSIONS: u64 = 100_000;
/// Largest `initialize` answer the relay buffers to learn the version.
const MAX_HANDSHAKE_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub client: std::sync::Arc<Client>,
    pub path: String,
    pub bearer_token: Option<crate::config::Secret>,
    pub max_json_depth: usize,
    /// Forget a session's affinity after this much idleness.
    pub session_idle: Duration,
}

#[derive(Debug, Clone)]
struct SessionInfo {
    peer: usize,
    version: Option<String>,
}

pub struct Relay {
    cfg: RelayConfig,
    client: std::sync::Arc<Client>,
    /// A bounded `moka` cache: idleness is its time-to-idle, and past
    /// `MAX_SESSIONS` the least recently used session goes, in O(1).
    sessions: moka::sync::Cache<String, SessionInfo>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("cfg", &self.cfg)
            .field("sessions", &self.sessions.entry_count())
            .finish()
    }
}

/// Request headers the relay sets itself or keeps from the upstream.
const NOT_FORWARDED: [&str; 3] = [
    "content-length",
    // The client's credential is for the gateway, never for the upstream.
    "authorization",
    // Checked here against `allowed_origins`; upstream DNS-rebinding guards
    // (localhost origins only) would refuse what the gateway admitted.
    "origin",
];

/// Hop-by-hop fields ([`hop`]) and the Host, which the client sets per peer.
fn is_hop_header(name: &str) -> bool {
    hop::is_hop_by_hop(name) || name.eq_ignore_ascii_case("host")
}

impl Relay {
    pub fn new(cfg: RelayConfig) -> Result<Relay, String> {
        Ok(Relay {
            client: cfg.client.clone(),
            sessions: moka::sync::Cache::builder()
                .max_capacity(MAX_SESSIONS)
                .time_to_idle(cfg.session_idle)
                // LRU always admits a session just issued (TinyLFU may not).
                .eviction_policy(EvictionPolicy::lru())
                .build(),
            cfg,
        })
    }

    /// A live session's affinity and version, refreshing its idle timer.
    fn session(&self, id: &str) -> Option<SessionInfo> {
        self.sessions.get(id)
    }

    fn remember(&self, id: String, peer: usize, version: Option<String>) {
        self.sessions.insert(id, SessionInfo { peer, version });
    }

    fn forget(&self, id: &str) {
        self.sessions.invalidate(id);
    }

    /// The refusal that the request's head alone decides after Origin and
    /// admission, in the order [`Relay::handle`] checks it: HTTP method
    /// (405), then for a POST `Content-Type` (415) and `Accept` (406).
    pub fn head_refusal(&self, req: &HttpRequest) -> Option<RpcError> {
        match req.method.as_str() {
            "POST" => {
                media::check_post(req.header_str("content-type"), req.header_str("accept")).err()
            }
            "GET" | "DELETE" => None,
            _ => Some(method_not_allowed()),
        }
    }

    /// Relay one request (Origin, auth and limits are already checked).
    pub async fn handle(&self, req: &HttpRequest, out: &mut RequestCtx) -> HttpResponse {
        match self.relay(req, out).await {
            Ok(resp) => resp,
            Err((err, id)) => {
                out.outcome = err.code.to_string();
                let mut resp = HttpResponse::json(err.http_status, &err.to_body(id.as_ref()));
                resp.add_fields(err.headers.iter().cloned());
                resp
            }
        }
    }

    async fn relay(
        &self,
        req: &HttpRequest,
        out: &mut RequestCtx,
    ) -> Result<HttpResponse, (RpcError, Option<Value>)> {
        if req.header_count(SESSION_ID) > 1 {
            return Err((
                RpcError::invalid_request("Bad Request: Mcp-Session-Id appears more than once"),
                None,
            ));
        }
        let session_id = req.header_str(SESSION_ID).map(str::to_owned);
        let session = session_id.as_deref().and_then(|s| self.session(s));
        let mut added: Vec<(&'static str, std::borrow::Cow<'static, str>)> = Vec::new();
        let mut id = None;
        let mut handshake = false;
        match req.method.as_str() {
            "POST" => {
                media::check_post(req.header_str("content-type"), req.header_str("accept"))
                    .map_err(|e| (e, jsonrpc::request_id(&req.body, self.cfg.max_json_depth)))?;
                let message = jsonrpc::parse_message(&req.body, self.cfg.max_json_depth)
                    .map_err(|e| (e, None))?;
                id = message.id().cloned();
                out.method = message.method().map(str::to_owned);
                let mirror =
                    read_mirror_headers(req.headers.iter()).map_err(|e| (e, id.clone()))?;
                let n = normalize(
                    &message,
                    &mirror,
                    session.as_ref().and_then(|s| s.version.as_deref()),
                )
                .map_err(|e| (e, id.clone()))?;
                out.revision = n.revision.map(|r| r.as_str());
                out.filled = n.filled;
                added = n.add.into_iter().map(|(k, v)| (k, v.into())).collect();
                // MCP requires POSTs to accept both; a client that named
                // neither accepts anything, so say so for it.
                if req.header_count("accept") == 0 {
                    added.push(("accept", "application/json, text/event-stream".into()));
                    out.filled.push("Accept");
                }
                handshake =
                    matches!(&message, Message::Request { method, .. } if method == "initialize");
            }
            "GET" | "DELETE" => {}
            _ => {
                out.outcome = "405".into();
                let err = method_not_allowed();
                let mut resp = HttpResponse::json(405, &err.to_body(None));
                resp.add_fields(err.headers);
                return Ok(resp);
            }
        }
        let mut headers: Vec<(&'static str, std::borrow::Cow<'static, str>)> = added;
        if let Some(token) = &self.cfg.bearer_token {
            headers.push(("authorization", format!("Bearer {}", token.expose()).into()));
        }
        let passed = forwarded_headers(req);
        let path = match &req.query {
            Some(q) => format!("{}?{q}", self.cfg.path),
            None => self.cfg.path.clone(),
        };
        let upstream_req = Request {
            method: &req.method,
            path: &path,
            headers,
            extra_headers: &passed,
            body: req.body.clone(),
            // Pooled connections; `open` retries only what was certainly
            // not delivered, whatever the method.
            retryable: true,
            trace: out.trace.as_ref(),
        };
        // A GET stream may sit idle for as long as the server has nothing to
        // say; a POST answer must keep moving.
        let idle = (req.method != "GET").then_some(self.cfg.client.request_timeout());
        let started = std::time::Instant::now();
        let opened = self
            .client
            .open(session.as_ref().map(|s| s.peer), &upstream_req, idle)
            .await;
        if let Some(t) = &out.trace {
            t.record(Phase::Backend, started);
        }
        let opened = opened.map_err(|e| (upstream_error(&e, out), id.clone()))?;
        let peer = opened.peer;
        let mut resp = HttpResponse::new(opened.status);
        // Names come lowercased from the upstream client.
        resp.headers = hop::passed_on_answer_fields(&opened.headers);
        let issued = resp.header(SESSION_ID).map(str::to_owned);
        match opened.body {
            StreamedBody::Whole(body) => {
                if handshake {
                    self.learn(issued.as_deref(), peer, &body, opened.status);
                }
                resp.body = body;
            }
            StreamedBody::Events(mut rx) if handshake => {
                // The handshake answer is one event and ends; read it whole.
                let mut buf = Vec::new();
                let deadline = tokio::time::Instant::now() + self.cfg.client.request_timeout();
                while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                    buf.extend_from_slice(&chunk);
                    if buf.len() > MAX_HANDSHAKE_BYTES {
                        break;
                    }
                }
                let body = Bytes::from(buf);
                self.learn(issued.as_deref(), peer, &body, opened.status);
                resp.body = body;
            }
            StreamedBody::Events(rx) => resp.stream = Some(rx),
        }
        // The session ended (DELETE) or the upstream no longer knows it.
        let ended =
            (req.method == "DELETE" && (200..300).contains(&opened.status)) || opened.status == 404;
        if let (true, Some(s)) = (ended, &session_id) {
            self.forget(s);
        }
        out.outcome = if (200..300).contains(&opened.status) {
            "relayed".into()
        } else {
            format!("upstream_{}", opened.status)
        };
        Ok(resp)
    }

    /// Record the session an `initialize` answer issued, with the version
    /// the upstream chose (read from a JSON or an SSE body).
    fn learn(&self, issued: Option<&str>, peer: usize, body: &[u8], status: u16) {
        let Some(sid) = issued else { return };
        if !(200..300).contains(&status) {
            return;
        }
        let version = handshake_version(body);
        self.remember(sid.to_owned(), peer, version);
    }
}

/// `result.protocolVersion` of an initialize answer, JSON or SSE-framed.
fn handshake_version(body: &[u8]) -> Option<String> {
    let from = |v: &Value| {
        v.get("result")?
            .get("protocolVersion")?
            .as_str()
            .map(str::to_owned)
    };
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return from(&v);
    }
    let text = std::str::from_utf8(body).ok()?;
    // SSE: an event's data is the concatenation of its `data:` lines.
    let mut data = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        if let Some(d) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        } else if line.is_empty() && !data.is_empty() {
            if let Some(v) = serde_json::from_str::<Value>(&data)
                .ok()
                .as_ref()
                .and_then(from)
            {
                return Some(v);
            }
            data.clear();
        }
    }
    None
}

/// The client's headers the upstream should see: everything but hop-by-hop
/// headers (including those the client's `Connection` names), the Host,
/// the framing and the client's own credential.
fn forwarded_headers(req: &HttpRequest) -> Vec<(String, String)> {
    let named = hop::connection_options(req.header_all("connection"));
    req.headers
        .iter()
        .filter(|(n, _)| {
            !is_hop_header(n)
                && !NOT_FORWARDED.iter().any(|h| n.eq_ignore_ascii_case(h))
                && !named.iter().any(|c| n.eq_ignore_ascii_case(c))
        })
        .filter_map(|(n, v)| Some((n.to_owned(), std::str::from_utf8(v).ok()?.to_owned())))
        .collect()
}

fn upstream_error(e: &BackendError, ctx: &RequestCtx) -> RpcError {
    let tenant = ctx.tenant.as_deref().unwrap_or("-");
    let correlation_id = ctx.correlation_id.as_str();
    match e {
        BackendError::Timeout(why) => {
            tracing::warn!(tenant, correlation_id, error = %why, "relay upstream timed out");
            RpcError::of(
                Failure::UpstreamTimeout,
                "Gateway Timeout: the upstream MCP server did not answer in time",
            )
        }
        other => {
            tracing::warn!(tenant, correlation_id, error = %other, "relay upstream unavailable");
            RpcError::of(
                Failure::UpstreamUnavailable,
                "Bad Gateway: the upstream MCP server is unavailable",
            )
        }
    }
}

fn method_not_allowed() -> RpcError {
    let mut err = RpcError::of(
        Failure::MethodNotAllowed,
        "Method Not Allowed: this MCP endpoint accepts POST, GET and DELETE",
    );
    err.headers
        .push(("allow".into(), "POST, GET, DELETE".into()));
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_version_from_json_and_sse() {
        let json = br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}"#;
        assert_eq!(handshake_version(json).as_deref(), Some("2025-11-25"));
        let sse = b"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\ndata: \"result\":{\"protocolVersion\":\"2025-11-25\"}}\n\n";
        assert_eq!(handshake_version(sse).as_deref(), Some("2025-11-25"));
        assert_eq!(handshake_version(b"event: message\ndata: {}\n\n"), None);
    }

    #[test]
    fn hop_by_hop_and_credentials_stay_behind() {
        let req = HttpRequest {
            method: "POST".into(),
            headers: [
                ("authorization", &b"Bearer client-secret"[..]),
                ("connection", b"keep-alive, x-hop"),
                ("x-hop", b"1"),
                ("host", b"gw"),
                ("mcp-session-id", b"abc"),
                ("accept", b"application/json, text/event-stream"),
            ]
            .into_iter()
            .collect(),
            ..HttpRequest::default()
        };
        let names: Vec<String> = forwarded_headers(&req)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, vec!["mcp-session-id", "accept"]);
    }
}
