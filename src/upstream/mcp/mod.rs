//! Strict MCP upstream: every validated skill call becomes one upstream
//! `tools/call`, on the revision the upstream speaks.
//!
//! - **2026-07-28:** stateless; per-request `_meta` plus all standard
//!   headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` with the
//!   Base64 sentinel where needed), so servers that enforce strict upstream
//!   MCP accept calls from clients that omitted them.
//! - **2025-11-25:** `initialize` + `notifications/initialized` once per
//!   peer; the peer's `Mcp-Session-Id` belongs to the gateway (never to a
//!   client) and is re-established after a 404.
//! - **auto:** probe with `server/discover` and follow the MCP dual-era
//!   decision procedure (a recognised modern error means modern; anything
//!   else falls back to `initialize`). The era is cached per backend.
//!
//! The client side is independent: the gateway terminates the client's MCP
//! revision itself, so a legacy client can use a modern-only upstream and
//! the reverse. Answers may be JSON or request-scoped SSE; the matching
//! JSON-RPC response is taken from either and the client gets the
//! gateway's own framing.

use super::client::{Client, ClientConfig, Reply, Request};
use crate::aap::payload::Payload;
use crate::backend::{
    forwarded_text, normalize_numbers, Backend, BackendError, Forward, LeadKeyMode, ProtocolError,
    SkillCall,
};
use crate::json;
use crate::mcp::headers::encode_value;
use crate::mcp::revision::{
    Revision, LEGACY, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, MODERN,
};
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Which revision to speak upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevisionMode {
    Modern,
    Legacy,
    Auto,
}

#[derive(Debug, Clone)]
pub struct McpUpstreamConfig {
    pub client: ClientConfig,
    pub path: String,
    pub revision: RevisionMode,
    pub bearer_token: Option<String>,
    pub capabilities: Value,
    pub lead_key: LeadKeyMode,
    pub dedupes_leads: bool,
}

#[derive(Debug, Clone)]
struct LegacySession {
    id: Option<String>,
    version: String,
}

#[derive(Debug)]
pub struct McpUpstream {
    client: Client,
    path: String,
    bearer: Option<String>,
    capabilities: Value,
    lead_key: LeadKeyMode,
    dedupes: bool,
    era: Mutex<Option<Revision>>,
    /// `auto`: the era was probed and is re-probed after an invalid answer.
    probed: bool,
    /// Legacy sessions, per peer index (a session id is only valid at the
    /// server process that issued it).
    sessions: tokio::sync::Mutex<HashMap<usize, LegacySession>>,
    next_id: AtomicU64,
}

const ACCEPT: &str = "application/json, text/event-stream";

impl McpUpstream {
    pub fn new(cfg: McpUpstreamConfig) -> Result<McpUpstream, String> {
        Ok(McpUpstream {
            client: Client::new(cfg.client)?,
            path: cfg.path,
            probed: cfg.revision == RevisionMode::Auto,
            era: Mutex::new(match cfg.revision {
                RevisionMode::Modern => Some(Revision::Modern),
                RevisionMode::Legacy => Some(Revision::Legacy),
                RevisionMode::Auto => None,
            }),
            bearer: cfg.bearer_token,
            capabilities: cfg.capabilities,
            lead_key: cfg.lead_key,
            dedupes: cfg.dedupes_leads,
            sessions: tokio::sync::Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        })
    }

    fn id(&self) -> Value {
        json!(format!(
            "aapgw-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        ))
    }

    fn base_headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("content-type", "application/json".to_owned()),
            ("accept", ACCEPT.to_owned()),
        ];
        if let Some(t) = &self.bearer {
            h.push(("authorization", format!("Bearer {t}")));
        }
        h
    }

    fn modern_meta() -> Value {
        json!({
            META_PROTOCOL_VERSION: MODERN,
            META_CLIENT_CAPABILITIES: {},
            META_CLIENT_INFO: {"name": "aap-gateway", "version": env!("CARGO_PKG_VERSION")},
        })
    }

    fn request<'a>(
        &'a self,
        body: &impl serde::Serialize,
        headers: Vec<(&'static str, String)>,
        retryable: bool,
    ) -> Request<'a> {
        // Serializing a `Value` or these request structs cannot fail
        // (string keys only); an empty body would be refused upstream.
        let body = serde_json::to_vec(body).unwrap_or_default();
        self.request_with_body(body, headers, retryable)
    }

    fn request_with_body<'a>(
        &'a self,
        body: Vec<u8>,
        headers: Vec<(&'static str, String)>,
        retryable: bool,
    ) -> Request<'a> {
        Request {
            extra_headers: &[],
            method: "POST",
            path: &self.path,
            headers,
            body: Bytes::from(body),
            retryable,
        }
    }

    /// The upstream era: configured, cached, or probed now.
    async fn era(&self) -> Result<Revision, BackendError> {
        if let Some(e) = *self.era.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(e);
        }
        let id = self.id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "server/discover",
            "params": {"_meta": Self::modern_meta()}});
        let mut headers = self.base_headers();
        headers.push(("mcp-protocol-version", MODERN.into()));
        headers.push(("mcp-method", "server/discover".into()));
        let matcher = |r: &Reply| sse_complete(r, &id);
        let reply = self
            .client
            .send(&self.request(&body, headers, true), Some(&matcher))
            .await?;
        let era = classify_probe(&reply, &id)?;
        tracing::info!(
            upstream = "mcp",
            revision = era.as_str(),
            "upstream MCP revision detected"
        );
        *self.era.lock().unwrap_or_else(|e| e.into_inner()) = Some(era);
        Ok(era)
    }

    async fn call_modern(
        &self,
        tool: &str,
        args: &str,
        retryable: bool,
        forward: &Forward,
    ) -> Result<Payload, BackendError> {
        let id = self.id();
        let body = ToolCall {
            id: &id,
            name: tool,
            arguments: args,
            meta: CallMeta {
                modern: true,
                progress_token: forward.progress_token.as_ref(),
            },
        };
        let mut headers = self.base_headers();
        headers.push(("mcp-protocol-version", MODERN.into()));
        headers.push(("mcp-method", "tools/call".into()));
        headers.push(("mcp-name", encode_value(tool)));
        let mut req = self.request_with_body(body.to_bytes(), headers, retryable);
        req.extra_headers = &forward.param_headers;
        let watch = SseWatch::new(&id, forward);
        let matcher = |r: &Reply| watch.check(r);
        let reply = self.client.send(&req, Some(&matcher)).await?;
        tool_result(&reply, &id)
    }

    /// Initialize a legacy session at one peer.
    async fn initialize(&self, peer: usize) -> Result<LegacySession, BackendError> {
        let id = self.id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "aap-gateway", "version": env!("CARGO_PKG_VERSION")},
        }});
        let matcher = |r: &Reply| sse_complete(r, &id);
        let reply = self
            .client
            .send_one(
                peer,
                &self.request(&body, self.base_headers(), true),
                Some(&matcher),
            )
            .await?;
        check_http(&reply)?;
        let msg = rpc_message(&reply, &id)?;
        if let Some(e) = msg.get("error") {
            let refused = protocol_error(e);
            if era_refused(&Err(refused.clone())) {
                return Err(refused);
            }
            return Err(BackendError::InvalidResponse(format!(
                "upstream refused initialize: {}",
                rpc_error_text(e)
            )));
        }
        let version = msg
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !matches!(version.as_str(), LEGACY | "2025-06-18" | "2025-03-26") {
            return Err(BackendError::InvalidResponse(format!(
                "upstream negotiated an unsupported protocol version {version:?}"
            )));
        }
        let session = LegacySession {
            id: reply.header("mcp-session-id").map(|s| s.trim().to_owned()),
            version,
        };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = self
            .client
            .send_one(
                peer,
                &self.request(&note, self.legacy_headers(&session), true),
                None,
            )
            .await?;
        if !(200..300).contains(&reply.status) {
            return Err(BackendError::InvalidResponse(format!(
                "upstream answered notifications/initialized with HTTP {}",
                reply.status
            )));
        }
        Ok(session)
    }

    fn legacy_headers(&self, s: &LegacySession) -> Vec<(&'static str, String)> {
        let mut h = self.base_headers();
        h.push(("mcp-protocol-version", s.version.clone()));
        if let Some(id) = &s.id {
            h.push(("mcp-session-id", id.clone()));
        }
        h
    }

    async fn session(&self, peer: usize, fresh: bool) -> Result<LegacySession, BackendError> {
        let mut map = self.sessions.lock().await;
        if !fresh {
            if let Some(s) = map.get(&peer) {
                return Ok(s.clone());
            }
        }
        map.remove(&peer);
        let s = self.initialize(peer).await?;
        map.insert(peer, s.clone());
        Ok(s)
    }

    async fn call_legacy(
        &self,
        tool: &str,
        args: &str,
        retryable: bool,
        forward: &Forward,
    ) -> Result<Payload, BackendError> {
        let attempts = if retryable {
            self.client.peers().len()
        } else {
            1
        };
        let mut tried = Vec::new();
        let mut last = BackendError::Unavailable("no peer available".into());
        while tried.len() < attempts {
            let Some(peer) = self.client.pick(&tried) else {
                break;
            };
            tried.push(peer);
            match self
                .call_legacy_at(peer, tool, args, retryable, forward)
                .await
            {
                Ok(v) => return Ok(v),
                // Only failures that certainly did not execute move a write on.
                Err(e @ BackendError::Unavailable(_)) => last = e,
                Err(e @ BackendError::Timeout(_)) if retryable => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    async fn call_legacy_at(
        &self,
        peer: usize,
        tool: &str,
        args: &str,
        retryable: bool,
        forward: &Forward,
    ) -> Result<Payload, BackendError> {
        let mut session = self.session(peer, false).await?;
        for attempt in 0..2 {
            let id = self.id();
            let body = ToolCall {
                id: &id,
                name: tool,
                arguments: args,
                meta: CallMeta {
                    modern: false,
                    progress_token: forward.progress_token.as_ref(),
                },
            };
            let watch = SseWatch::new(&id, forward);
            let matcher = |r: &Reply| watch.check(r);
            let reply = self
                .client
                .send_one(
                    peer,
                    &self.request_with_body(
                        body.to_bytes(),
                        self.legacy_headers(&session),
                        retryable,
                    ),
                    Some(&matcher),
                )
                .await?;
            // 404 on a session request: the session ended; nothing executed.
            if reply.status == 404 && session.id.is_some() && attempt == 0 {
                tracing::info!(upstream = "mcp", peer = %reply.peer, "upstream session expired; re-initializing");
                session = self.session(peer, true).await?;
                continue;
            }
            return tool_result(&reply, &id);
        }
        Err(BackendError::InvalidResponse(
            "upstream session could not be re-established".into(),
        ))
    }
}

impl McpUpstream {
    async fn call_in_era(
        &self,
        tool: &str,
        args: &str,
        retryable: bool,
        forward: &Forward,
    ) -> Result<Payload, BackendError> {
        match self.era().await? {
            Revision::Modern => self.call_modern(tool, args, retryable, forward).await,
            Revision::Legacy => self.call_legacy(tool, args, retryable, forward).await,
        }
    }
}

/// An upstream `tools/call`, written straight from borrowed parts: no
/// `Value` tree is built, and the arguments go out as the client's text
/// (already read and validated as JSON).
struct ToolCall<'a> {
    id: &'a Value,
    name: &'a str,
    arguments: &'a str,
    meta: CallMeta<'a>,
}

impl ToolCall<'_> {
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.arguments.len() + 320);
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        // A JSON-RPC id, a tool name and `_meta` are strings, integers and
        // string-keyed maps: writing them cannot fail.
        let _ = serde_json::to_writer(&mut out, self.id);
        out.extend_from_slice(br#","method":"tools/call","params":{"name":"#);
        let _ = serde_json::to_writer(&mut out, self.name);
        out.extend_from_slice(br#","arguments":"#);
        out.extend_from_slice(self.arguments.as_bytes());
        if self.meta.modern || self.meta.progress_token.is_some() {
            out.extend_from_slice(br#","_meta":"#);
            let _ = serde_json::to_writer(&mut out, &self.meta);
        }
        out.extend_from_slice(b"}}");
        out
    }
}

/// `params._meta` of an upstream call: the per-request metadata a modern
/// upstream requires, and the client's progress token when it sent one.
struct CallMeta<'a> {
    modern: bool,
    progress_token: Option<&'a Value>,
}

impl serde::Serialize for CallMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        if self.modern {
            m.serialize_entry(META_PROTOCOL_VERSION, MODERN)?;
            m.serialize_entry(META_CLIENT_CAPABILITIES, &EmptyObject)?;
            m.serialize_entry(META_CLIENT_INFO, &GatewayInfo)?;
        }
        if let Some(token) = self.progress_token {
            m.serialize_entry("progressToken", token)?;
        }
        m.end()
    }
}

/// `{}`
struct EmptyObject;

impl serde::Serialize for EmptyObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde::ser::SerializeMap::end(s.serialize_map(Some(0))?)
    }
}

/// The gateway's `clientInfo` towards upstreams.
struct GatewayInfo;

impl serde::Serialize for GatewayInfo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("name", "aap-gateway")?;
        m.serialize_entry("version", env!("CARGO_PKG_VERSION"))?;
        m.end()
    }
}

/// An upstream refusal of the revision or mirror headers the gateway sent
/// (-32020 header mismatch, -32021 missing header, -32022 unsupported
/// version): the call did not run.
fn era_refused(answer: &Result<Payload, BackendError>) -> bool {
    matches!(answer, Err(BackendError::Protocol(e)) if (-32022..=-32020).contains(&e.code))
}

#[async_trait]
impl Backend for McpUpstream {
    fn kind(&self) -> &'static str {
        "mcp"
    }

    async fn call(&self, call: SkillCall<'_>) -> Result<Payload, BackendError> {
        let args = forwarded_text(&call, self.lead_key);
        let retryable = call.skill.is_read();
        let tool = call.skill.tool_name();
        let mut answer = self.call_in_era(tool, &args, retryable, call.forward).await;
        if self.probed && era_refused(&answer) {
            // The upstream now speaks the other era (replaced or upgraded). A
            // version or header refusal happens before any tool runs, so the
            // call is re-sent once after a fresh probe, leads included.
            tracing::info!(
                upstream = "mcp",
                "upstream refused the probed MCP revision; probing again"
            );
            *self.era.lock().unwrap_or_else(|e| e.into_inner()) = None;
            answer = self.call_in_era(tool, &args, retryable, call.forward).await;
        }
        if self.probed && matches!(answer, Err(BackendError::InvalidResponse(_))) {
            // Re-probe on the next call.
            *self.era.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        if era_refused(&answer) {
            // About the gateway-to-upstream hop, not the client's request.
            return Err(BackendError::InvalidResponse(
                "upstream refused the gateway's MCP revision or headers".into(),
            ));
        }
        match answer? {
            Payload::Tree(mut payload) => {
                normalize_numbers(&mut payload);
                Ok(Payload::Tree(payload))
            }
            // Numbers in text are normalized where it is parsed (the contract).
            text => Ok(text),
        }
    }

    fn capabilities(&self) -> Value {
        self.capabilities.clone()
    }

    fn dedupes_leads(&self) -> bool {
        self.dedupes
    }

    fn may_notify(&self) -> bool {
        true
    }
}

/// Watches an upstream answer as it streams in: hands each complete
/// `notifications/*` event to the client's stream and reports when the
/// JSON-RPC response with `id` has arrived.
struct SseWatch<'a> {
    id: &'a Value,
    forward: &'a Forward,
    /// Bytes of the body already parsed into complete events.
    parsed: std::sync::Mutex<usize>,
}

impl<'a> SseWatch<'a> {
    fn new(id: &'a Value, forward: &'a Forward) -> Self {
        SseWatch {
            id,
            forward,
            parsed: std::sync::Mutex::new(0),
        }
    }

    fn check(&self, r: &Reply) -> bool {
        if r.content_type() != "text/event-stream" {
            return false;
        }
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        let start = (*parsed).min(r.body.len());
        let end = start + complete_events_len(&r.body[start..]);
        *parsed = end;
        let mut done = false;
        for data in sse_events(&r.body[start..end]) {
            let Ok(msg) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if msg.get("id") == Some(self.id)
                && (msg.get("result").is_some() || msg.get("error").is_some())
            {
                done = true;
            } else if msg.get("id").is_none()
                && msg
                    .get("method")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.starts_with("notifications/"))
            {
                self.forward.notify(msg);
            }
        }
        done
    }
}

/// Length of the prefix of an SSE body that ends with a blank line.
fn complete_events_len(b: &[u8]) -> usize {
    let mut end = 0;
    for i in 1..b.len() {
        if b[i] == b'\n' && (b[i - 1] == b'\n' || (i >= 3 && &b[i - 3..i] == b"\r\n\r")) {
            end = i + 1;
        }
    }
    end
}

/// True once an SSE body holds the JSON-RPC response with `id`.
fn sse_complete(r: &Reply, id: &Value) -> bool {
    r.content_type() == "text/event-stream" && find_in_sse(&r.body, id).is_some()
}

/// The `data` payloads of an SSE stream, complete events only.
pub fn sse_events(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body)
        .replace("\r\n", "\n")
        .replace('\r', "\n");
    let mut out = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    let complete_upto = text.rfind("\n\n").map(|p| p + 2).unwrap_or(0);
    for line in text[..complete_upto].split('\n') {
        if line.is_empty() {
            if !data.is_empty() {
                out.push(data.join("\n"));
                data.clear();
            }
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    out
}

fn find_in_sse(body: &[u8], id: &Value) -> Option<Value> {
    sse_events(body)
        .into_iter()
        .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
        .find(|m| {
            m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
        })
}

/// The JSON-RPC response with `id`, from a JSON or SSE body.
fn rpc_message(reply: &Reply, id: &Value) -> Result<Value, BackendError> {
    if reply.content_type() == "text/event-stream" {
        return find_in_sse(&reply.body, id).ok_or_else(|| {
            BackendError::InvalidResponse(
                "upstream SSE stream ended without the JSON-RPC response".into(),
            )
        });
    }
    let v: Value = serde_json::from_slice(&reply.body).map_err(|_| {
        BackendError::InvalidResponse(format!(
            "upstream answered HTTP {} with a body that is not JSON",
            reply.status
        ))
    })?;
    if v.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(BackendError::InvalidResponse(
            "upstream answer is not a JSON-RPC 2.0 message".into(),
        ));
    }
    Ok(v)
}

/// Statuses that mean the upstream did not serve the call at all.
fn check_http(reply: &Reply) -> Result<(), BackendError> {
    match reply.status {
        401 | 403 => Err(BackendError::Unavailable(format!(
            "upstream {} refused the gateway's credential (HTTP {})",
            reply.peer, reply.status
        ))),
        502 | 503 => Err(BackendError::Unavailable(format!(
            "upstream {} answered HTTP {}",
            reply.peer, reply.status
        ))),
        504 => Err(BackendError::Timeout(format!(
            "upstream {} answered HTTP 504",
            reply.peer
        ))),
        _ => Ok(()),
    }
}

fn rpc_error_text(e: &Value) -> String {
    format!(
        "{} {}",
        e.get("code").and_then(Value::as_i64).unwrap_or(0),
        e.get("message").and_then(Value::as_str).unwrap_or("")
    )
}

/// An upstream JSON-RPC error as the client will see it: code and message
/// kept (the message bounded), `data` kept when small.
fn protocol_error(e: &Value) -> BackendError {
    let Some(code) = e.get("code").and_then(Value::as_i64) else {
        return BackendError::InvalidResponse("upstream error without a numeric code".into());
    };
    let message: String = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("upstream error")
        .chars()
        .take(500)
        .collect();
    let data = e
        .get("data")
        .filter(|d| serde_json::to_vec(d).is_ok_and(|b| b.len() <= 4096))
        .cloned();
    BackendError::Protocol(ProtocolError {
        code,
        message,
        data,
    })
}

/// The parts of a JSON tools/call answer the gateway reads, as spans of
/// the answer's text ([`crate::json::Reader`]). The text block is skipped
/// without decoding: it repeats `structuredContent` and is parsed only when
/// that is missing. Absent and `null` members read alike; a member named
/// twice is refused.
struct CallFrame<'a> {
    jsonrpc: Option<Cow<'a, str>>,
    error: Option<&'a str>,
    result: Option<CallResult<'a>>,
}

#[derive(Default)]
struct CallResult<'a> {
    result_type: Option<Cow<'a, str>>,
    /// `structuredContent` when it is an object, read into a [`json::Doc`].
    structured_content: Option<json::Doc>,
    content: Option<&'a str>,
}

/// Why a tools/call answer could not be read.
enum FrameError {
    /// The frame itself is not JSON, or not shaped like a response.
    Frame,
    /// `structuredContent` is an object that does not read as one document
    /// (for instance, it repeats a member name).
    Payload(json::Error),
}

impl<'a> CallFrame<'a> {
    fn read(body: &'a [u8]) -> Result<CallFrame<'a>, FrameError> {
        let mut r = json::Reader::from_slice(body).map_err(|_| FrameError::Frame)?;
        let mut frame = CallFrame {
            jsonrpc: None,
            error: None,
            result: None,
        };
        let mut payload_error = None;
        let read = r.known_members(["jsonrpc", "error", "result"], |r, slot| {
            match slot {
                0 => frame.jsonrpc = optional_string(r)?,
                1 => frame.error = optional_value(r)?,
                _ => frame.result = CallResult::read(r, &mut payload_error)?,
            }
            Ok(())
        });
        if let Some(e) = payload_error {
            return Err(FrameError::Payload(e));
        }
        read.and_then(|()| r.finish())
            .map_err(|_| FrameError::Frame)?;
        Ok(frame)
    }
}

impl<'a> CallResult<'a> {
    /// `payload_error` is set when `structuredContent` is the culprit
    /// rather than the frame.
    fn read(
        r: &mut json::Reader<'a>,
        payload_error: &mut Option<json::Error>,
    ) -> Result<Option<CallResult<'a>>, json::Error> {
        if r.peek() == Some(b'n') {
            return r.skip().map(|_| None);
        }
        let mut result = CallResult::default();
        r.known_members(["resultType", "structuredContent", "content"], |r, slot| {
            match slot {
                0 => result.result_type = optional_string(r)?,
                // The payload is read once, here, into a document; anything
                // but an object is skipped (the text block is read instead).
                1 if r.peek() == Some(b'{') => match r.doc() {
                    Ok(doc) => result.structured_content = Some(doc),
                    Err(e) => {
                        *payload_error = Some(e.clone());
                        return Err(e);
                    }
                },
                1 => drop(r.skip()?),
                _ => result.content = optional_value(r)?,
            }
            Ok(())
        })?;
        Ok(Some(result))
    }
}

/// A string member, or `null`.
fn optional_string<'a>(r: &mut json::Reader<'a>) -> Result<Option<Cow<'a, str>>, json::Error> {
    match r.peek() {
        Some(b'n') => r.skip().map(|_| None),
        _ => r.string().map(Some),
    }
}

/// Any member's text, or `None` for `null`.
fn optional_value<'a>(r: &mut json::Reader<'a>) -> Result<Option<&'a str>, json::Error> {
    r.skip().map(|text| (text != "null").then_some(text))
}

/// The AAP payload of a tools/call answer.
fn tool_result(reply: &Reply, id: &Value) -> Result<Payload, BackendError> {
    check_http(reply)?;
    if reply.content_type() == "text/event-stream" {
        let mut msg = rpc_message(reply, id)?;
        if let Some(e) = msg.get("error") {
            return Err(protocol_error(e));
        }
        let Some(result) = msg.get_mut("result").filter(|r| r.is_object()) else {
            return Err(no_result());
        };
        let result_type = result
            .get("resultType")
            .map(|t| t.as_str().unwrap_or("").to_owned());
        let structured = result.get_mut("structuredContent").map(Value::take);
        return tool_payload(result_type.as_deref(), structured, || {
            Ok(result.get("content").cloned())
        })
        .map(Payload::Tree);
    }
    read_json_answer(&reply.body, reply.status)
}

/// The AAP payload of a tools/call answer sent as `application/json`
/// (`status`: the HTTP status it came with, for the error text).
pub fn read_json_answer(body: &[u8], status: u16) -> Result<Payload, BackendError> {
    let answer = CallFrame::read(body).map_err(|e| match e {
        FrameError::Frame => BackendError::InvalidResponse(format!(
            "upstream answered HTTP {status} with a body that is not a JSON-RPC tools/call response"
        )),
        FrameError::Payload(e) => BackendError::InvalidResponse(format!(
            "upstream structuredContent is not a JSON document with unique member names ({e})"
        )),
    })?;
    if answer.jsonrpc.as_deref() != Some("2.0") {
        return Err(BackendError::InvalidResponse(
            "upstream answer is not a JSON-RPC 2.0 message".into(),
        ));
    }
    if let Some(e) = answer.error {
        // Well-formed (the reader checked it); small, and a cold path.
        return Err(protocol_error(
            &serde_json::from_str(e).unwrap_or(Value::Null),
        ));
    }
    let result = answer.result.ok_or_else(no_result)?;
    if let Some(doc) = result.structured_content {
        check_result_type(result.result_type.as_deref())?;
        // Read once into a document, validated as that, and passed on as
        // the upstream's own text (see `aap::payload`).
        return Ok(Payload::Doc(doc));
    }
    tool_payload(result.result_type.as_deref(), None, || {
        result
            .content
            .map(serde_json::from_str::<Value>)
            .transpose()
            .map_err(|_| {
                BackendError::InvalidResponse("tool result content is not valid JSON".into())
            })
    })
    .map(Payload::Tree)
}

/// Only complete results carry an AAP payload.
fn check_result_type(result_type: Option<&str>) -> Result<(), BackendError> {
    match result_type {
        None | Some("complete") => Ok(()),
        Some(other) => Err(BackendError::InvalidResponse(format!(
            "upstream result type {other:?} is not supported for AAP tools"
        ))),
    }
}

fn no_result() -> BackendError {
    BackendError::InvalidResponse("JSON-RPC response without result".into())
}

/// The payload from a tools/call result's parts: `structuredContent` when
/// it is an object, else the first text block parsed as a JSON object.
fn tool_payload(
    result_type: Option<&str>,
    structured: Option<Value>,
    content: impl FnOnce() -> Result<Option<Value>, BackendError>,
) -> Result<Value, BackendError> {
    check_result_type(result_type)?;
    if let Some(sc) = structured.filter(Value::is_object) {
        return Ok(sc);
    }
    let content = content()?;
    let text = content
        .as_ref()
        .and_then(Value::as_array)
        .and_then(|c| {
            c.iter()
                .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        })
        .and_then(|b| b.get("text"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            BackendError::InvalidResponse(
                "tool result has neither structuredContent nor a text block".into(),
            )
        })?;
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| {
            BackendError::InvalidResponse("tool result text is not a JSON object".into())
        })
}

/// The dual-era decision on a `server/discover` probe answer.
fn classify_probe(reply: &Reply, id: &Value) -> Result<Revision, BackendError> {
    if matches!(reply.status, 401 | 403 | 502 | 503 | 504) {
        check_http(reply)?;
    }
    let msg = rpc_message(reply, id).ok();
    if (200..300).contains(&reply.status) {
        let supported = msg
            .as_ref()
            .and_then(|m| m.pointer("/result/supportedVersions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if supported.iter().any(|v| v == MODERN) {
            return Ok(Revision::Modern);
        }
        return Ok(Revision::Legacy);
    }
    let code = msg
        .as_ref()
        .and_then(|m| m.pointer("/error/code"))
        .and_then(Value::as_i64);
    match code {
        Some(-32020 | -32021) => Ok(Revision::Modern),
        Some(-32601) if reply.status == 404 => Ok(Revision::Modern),
        Some(-32022) => {
            let supported = msg
                .as_ref()
                .and_then(|m| m.pointer("/error/data/supported"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if supported.iter().any(|v| v == LEGACY) {
                Ok(Revision::Legacy)
            } else {
                Err(BackendError::InvalidResponse(format!(
                    "upstream supports none of {MODERN}, {LEGACY}: {}",
                    Value::Array(supported)
                )))
            }
        }
        _ => Ok(Revision::Legacy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_serialize_as_the_documented_messages() {
        let id = json!("aapgw-7");
        let text = r#"{"type": "inventory.search.request", "filters": {"make": ["Toyota"]}}"#;
        let args: Value = serde_json::from_str(text).unwrap();
        let token = json!("p-1");
        let body = |modern, progress_token| {
            let call = ToolCall {
                id: &id,
                name: "aap_inventory_search",
                arguments: text,
                meta: CallMeta {
                    modern,
                    progress_token,
                },
            };
            let bytes = call.to_bytes();
            // The client's text goes out unchanged, spacing included.
            assert!(String::from_utf8_lossy(&bytes).contains(text));
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        let modern_meta = McpUpstream::modern_meta();
        assert_eq!(
            body(true, None),
            json!({"jsonrpc": "2.0", "id": "aapgw-7", "method": "tools/call",
                "params": {"name": "aap_inventory_search", "arguments": args, "_meta": modern_meta}})
        );
        let mut with_token = modern_meta.clone();
        with_token["progressToken"] = token.clone();
        assert_eq!(body(true, Some(&token))["params"]["_meta"], with_token);
        // Legacy: no per-request metadata, except a progress token.
        assert_eq!(
            body(false, None),
            json!({"jsonrpc": "2.0", "id": "aapgw-7", "method": "tools/call",
                "params": {"name": "aap_inventory_search", "arguments": args}})
        );
        assert_eq!(
            body(false, Some(&token))["params"]["_meta"],
            json!({"progressToken": "p-1"})
        );
    }

    #[test]
    fn sse_events_skip_comments_and_incomplete_tails() {
        let body = b": ping\n\n: ping\r\n\r\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\n\ndata: {\"partial";
        let ev = sse_events(body);
        assert_eq!(ev.len(), 1);
        assert!(find_in_sse(body, &json!("a")).is_some());
        assert!(find_in_sse(body, &json!("b")).is_none());
    }

    fn reply(content_type: &str, body: &str) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            body: Bytes::from(body.to_owned()),
            peer: "127.0.0.1:9".parse().unwrap(),
        }
    }

    #[test]
    fn tool_payload_from_json_and_sse_answers() {
        let payload = json!({"type": "dealer.information.response", "n": 1});
        let text = serde_json::to_string(&payload).unwrap();
        let both = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "text", "text": text}], "structuredContent": payload,
            "resultType": "complete"}});
        let text_only = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "image", "data": ""}, {"type": "text", "text": text}]}});
        for msg in [&both, &text_only] {
            let json_reply = reply("application/json", &msg.to_string());
            assert_eq!(
                tool_result(&json_reply, &json!(1)).unwrap().into_value(),
                payload
            );
            let sse = reply(
                "text/event-stream",
                &format!("event: message\ndata: {msg}\n\n"),
            );
            assert_eq!(tool_result(&sse, &json!(1)).unwrap().into_value(), payload);
        }
    }

    #[test]
    fn malformed_tool_answers_are_typed_errors() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#,
                "protocol",
            ),
            (r#"{"jsonrpc":"1.0","id":1,"result":{}}"#, "invalid"),
            (r#"{"jsonrpc":"2.0","id":1}"#, "invalid"),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#,
                "invalid",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"[1]"}]}}"#,
                "invalid",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"structuredContent":"x"}}"#,
                "invalid",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":"#, "invalid"),
            ("not json", "invalid"),
        ];
        for (body, kind) in cases {
            let got = tool_result(&reply("application/json", body), &json!(1));
            match (kind, got) {
                ("protocol", Err(BackendError::Protocol(e))) => assert_eq!(e.code, -32602),
                ("invalid", Err(BackendError::InvalidResponse(_))) => {}
                (_, other) => panic!("{body}: {other:?}"),
            }
        }
    }
}
