//! 2025-11-25 upstreams: one `initialize` session per peer, owned by the gateway,
//! re-established after a 404; calls stay on the session's peer.

use super::answer::{check_http, protocol_error, rpc_error_text, rpc_message, tool_result};
use super::era::era_refused;
use super::sse::{sse_complete, SseWatch};
use super::wire::{CallMeta, ToolCall};
use super::McpUpstream;
use crate::aap::payload::Payload;
use crate::backend::{BackendError, Forward};
use crate::mcp::revision::LEGACY;
use crate::upstream::client::{Reply, Request};
use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub(super) struct LegacySession {
    id: Option<String>,
    version: String,
}

impl McpUpstream {
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

    fn legacy_headers(
        &self,
        s: &LegacySession,
    ) -> Vec<(&'static str, std::borrow::Cow<'static, str>)> {
        let mut h = self.base_headers();
        h.push(("mcp-protocol-version", s.version.clone().into()));
        if let Some(id) = &s.id {
            h.push(("mcp-session-id", id.clone().into()));
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

    pub(super) async fn call_legacy(
        &self,
        tool: &'static str,
        args: &str,
        retryable: bool,
        forward: &Forward,
    ) -> Result<Payload, BackendError> {
        let attempts = if retryable {
            self.client.peer_count()
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
        tool: &'static str,
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
                    &Request {
                        trace: forward.trace.as_ref(),
                        ..self.request_with_body(
                            body.to_bytes(),
                            self.legacy_headers(&session),
                            retryable,
                        )
                    },
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
