//! Strict MCP upstream: each validated skill call becomes one upstream `tools/call`
//! on the revision the upstream speaks. Owns the backend, its config and the call flow.
//!
//! - **2026-07-28:** stateless; per-request `_meta` plus all standard
//!   headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` with the
//!   Base64 sentinel where needed), so servers that enforce strict upstream
//!   MCP accept calls from clients that omitted them.
//! - **2025-11-25:** `initialize` + `notifications/initialized` once per
//!   peer; the peer's `Mcp-Session-Id` belongs to the gateway (never to a
//!   client) and is re-established after a 404 ([`legacy`]).
//! - **auto:** probe with `server/discover` and follow the MCP dual-era
//!   decision procedure (a recognised modern error means modern; anything
//!   else falls back to `initialize`). The era is cached per backend ([`era`]).
//!
//! The client side is independent: the gateway terminates the client's MCP
//! revision itself, so a legacy client can use a modern-only upstream and
//! the reverse. Answers may be JSON or request-scoped SSE ([`sse`]); the
//! matching JSON-RPC response is taken from either ([`answer`]) and the
//! client gets the gateway's own framing. Call bodies are written by [`wire`].

mod answer;
mod era;
mod legacy;
mod sse;
mod wire;

pub use answer::read_json_answer;
pub use sse::sse_events;

use super::client::{Client, Reply, Request};
use crate::aap::payload::Payload;
use crate::backend::{
    forwarded_text, normalize_numbers, Backend, BackendError, Forward, LeadKeyMode, SkillCall,
};
use crate::mcp::headers::encode_value;
use crate::mcp::revision::{
    Revision, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, MODERN,
};
use answer::tool_result;
use async_trait::async_trait;
use bytes::Bytes;
use era::era_refused;
use legacy::LegacySession;
use serde_json::{json, Value};
use sse::SseWatch;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use wire::{CallMeta, ToolCall};

/// Which revision to speak upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevisionMode {
    Modern,
    Legacy,
    Auto,
}

#[derive(Debug, Clone)]
pub struct McpUpstreamConfig {
    pub client: std::sync::Arc<Client>,
    pub path: String,
    pub revision: RevisionMode,
    pub bearer_token: Option<crate::config::Secret>,
    pub capabilities: Value,
    pub lead_key: LeadKeyMode,
    pub dedupes_leads: bool,
}

#[derive(Debug)]
pub struct McpUpstream {
    client: std::sync::Arc<Client>,
    path: String,
    bearer: Option<crate::config::Secret>,
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
            client: cfg.client,
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

    /// The next call's JSON-RPC id, `aapgw-<n>` (the number written with `itoa`, not
    /// `format!`: one of the few formatting calls on every proxied call).
    fn id(&self) -> Value {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(26);
        id.push_str("aapgw-");
        id.push_str(itoa::Buffer::new().format(n));
        Value::String(id)
    }

    fn base_headers(&self) -> Vec<(&'static str, std::borrow::Cow<'static, str>)> {
        // Room for the fields every caller adds (revision, method, name or session).
        let mut h = Vec::with_capacity(6);
        h.push(("content-type", "application/json".into()));
        h.push(("accept", ACCEPT.into()));
        if let Some(t) = &self.bearer {
            h.push(("authorization", format!("Bearer {}", t.expose()).into()));
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
        headers: Vec<(&'static str, std::borrow::Cow<'static, str>)>,
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
        headers: Vec<(&'static str, std::borrow::Cow<'static, str>)>,
        retryable: bool,
    ) -> Request<'a> {
        Request {
            extra_headers: &[],
            method: "POST",
            path: &self.path,
            headers,
            body: Bytes::from(body),
            retryable,
            trace: None,
        }
    }

    async fn call_modern(
        &self,
        tool: &'static str,
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
        req.trace = forward.trace.as_ref();
        let watch = SseWatch::new(&id, forward);
        let matcher = |r: &Reply| watch.check(r);
        let reply = self.client.send(&req, Some(&matcher)).await?;
        tool_result(&reply, &id)
    }

    async fn call_in_era(
        &self,
        tool: &'static str,
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
