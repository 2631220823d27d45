//! Which MCP revision the upstream speaks: the `server/discover` probe of
//! `auto` mode, its dual-era decision, and recognising a revision refusal.

use super::answer::{check_http, rpc_message};
use super::sse::sse_complete;
use super::McpUpstream;
use crate::aap::payload::Payload;
use crate::backend::BackendError;
use crate::mcp::revision::{Revision, LEGACY, MODERN};
use crate::upstream::client::Reply;
use serde_json::{json, Value};

impl McpUpstream {
    /// The upstream era: configured, cached, or probed now.
    pub(super) async fn era(&self) -> Result<Revision, BackendError> {
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
}

/// An upstream refusal of the revision or mirror headers the gateway sent
/// (-32020 header mismatch, -32021 missing header, -32022 unsupported
/// version): the call did not run.
pub(super) fn era_refused(answer: &Result<Payload, BackendError>) -> bool {
    matches!(answer, Err(BackendError::Protocol(e)) if (-32022..=-32020).contains(&e.code))
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
