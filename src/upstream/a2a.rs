//! A2A 1.0 upstream: every validated skill call becomes one JSON-RPC
//! `SendMessage` with a single DataPart carrying the typed AAP request.
//!
//! Activation: `A2A-Version: 1.0` and `A2A-Extensions: <exact AAP URI>` on
//! every call. The URI is configured, or read once from the upstream's Agent
//! Card (`capabilities.extensions[]`, the entry whose `uri` names
//! `autoagentprotocol.org/extensions/aap`) and cached; a `-32008` answer
//! drops the cached card URI and reads the card again once. These headers
//! are never a substitute for MCP metadata: the client side stays MCP.
//!
//! Answers: `result.message.parts[0].data` is the AAP payload; AAP errors
//! are found in `error.data` (object or draft array form) by `@type` or
//! `type == "aap.error"`, never by numeric code; a `task` is an invalid
//! agent response. a2a-sdk peers send every number as a double, so
//! integral floats are turned back into integers before validation.

use super::client::{Client, Reply, Request};
use crate::aap::error::{ERROR_AT_TYPE, ERROR_TYPE};
use crate::aap::payload::Payload;
use crate::backend::{
    forwarded_request, normalize_numbers, Backend, BackendError, LeadKeyMode, SkillCall,
};
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Mutex;

/// Marks the AAP entry among an Agent Card's extensions.
pub const AAP_EXTENSION_MARK: &str = "autoagentprotocol.org/extensions/aap";

#[derive(Debug, Clone)]
pub struct A2aUpstreamConfig {
    pub client: std::sync::Arc<Client>,
    pub path: String,
    pub card_path: String,
    pub extension_uri: Option<String>,
    pub bearer_token: Option<crate::config::Secret>,
    pub capabilities: Value,
    pub lead_key: LeadKeyMode,
    pub dedupes_leads: bool,
}

#[derive(Debug)]
pub struct A2aUpstream {
    client: std::sync::Arc<Client>,
    path: String,
    card_path: String,
    configured_uri: Option<String>,
    card_uri: Mutex<Option<String>>,
    bearer: Option<crate::config::Secret>,
    capabilities: Value,
    lead_key: LeadKeyMode,
    dedupes: bool,
}

impl A2aUpstream {
    pub fn new(cfg: A2aUpstreamConfig) -> Result<A2aUpstream, String> {
        Ok(A2aUpstream {
            client: cfg.client,
            path: cfg.path,
            card_path: cfg.card_path,
            configured_uri: cfg.extension_uri,
            card_uri: Mutex::new(None),
            bearer: cfg.bearer_token,
            capabilities: cfg.capabilities,
            lead_key: cfg.lead_key,
            dedupes: cfg.dedupes_leads,
        })
    }

    fn auth_header(&self, h: &mut Vec<(&'static str, std::borrow::Cow<'static, str>)>) {
        if let Some(t) = &self.bearer {
            h.push(("authorization", format!("Bearer {}", t.expose()).into()));
        }
    }

    /// The exact extension URI to activate.
    async fn extension_uri(&self) -> Result<String, BackendError> {
        if let Some(u) = &self.configured_uri {
            return Ok(u.clone());
        }
        if let Some(u) = self
            .card_uri
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Ok(u);
        }
        let mut headers = vec![("accept", "application/json".into())];
        self.auth_header(&mut headers);
        let req = Request {
            extra_headers: &[],
            method: "GET",
            path: &self.card_path,
            headers,
            body: Bytes::new(),
            retryable: true,
            trace: None,
        };
        let reply = self.client.send(&req, None).await?;
        if reply.status != 200 {
            return Err(BackendError::Unavailable(format!(
                "Agent Card at {}{} answered HTTP {}",
                reply.peer, self.card_path, reply.status
            )));
        }
        let card: Value = serde_json::from_slice(&reply.body)
            .map_err(|_| BackendError::InvalidResponse("the Agent Card is not JSON".into()))?;
        let uri = card_extension_uri(&card).ok_or_else(|| {
            BackendError::InvalidResponse(format!(
                "the Agent Card declares no extension whose uri contains {AAP_EXTENSION_MARK}"
            ))
        })?;
        tracing::info!(upstream = "a2a", extension = %uri, "AAP extension URI read from the Agent Card");
        *self.card_uri.lock().unwrap_or_else(|e| e.into_inner()) = Some(uri.clone());
        Ok(uri)
    }

    async fn send_message(
        &self,
        call: &SkillCall<'_>,
        data: &Value,
        uri: &str,
    ) -> Result<Reply, BackendError> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": uuid::Uuid::now_v7().to_string(),
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": uuid::Uuid::now_v7().to_string(),
                    "role": "ROLE_USER",
                    "parts": [{
                        "data": data,
                        "mediaType": crate::publish::request_media_type(call.skill),
                    }],
                },
                "configuration": {
                    "acceptedOutputModes": [crate::publish::response_media_type(call.skill)],
                },
            },
        });
        let mut headers: Vec<(&'static str, std::borrow::Cow<'static, str>)> = vec![
            ("content-type", "application/json".into()),
            ("accept", "application/json".into()),
            (
                crate::a2a::VERSION_HEADER,
                crate::a2a::PROTOCOL_VERSION.into(),
            ),
            (crate::a2a::EXTENSIONS_HEADER, uri.to_owned().into()),
        ];
        self.auth_header(&mut headers);
        let req = Request {
            extra_headers: &[],
            method: "POST",
            path: &self.path,
            headers,
            body: Bytes::from(body.to_string()),
            retryable: call.skill.is_read(),
            trace: call.forward.trace.as_ref(),
        };
        self.client.send(&req, None).await
    }
}

#[async_trait]
impl Backend for A2aUpstream {
    fn kind(&self) -> &'static str {
        "a2a"
    }

    async fn call(&self, call: SkillCall<'_>) -> Result<Payload, BackendError> {
        let data = forwarded_request(&call, self.lead_key);
        let mut uri = self.extension_uri().await?;
        let mut refreshed = false;
        loop {
            let reply = self.send_message(&call, &data, &uri).await?;
            match translate(&reply) {
                // The card may have moved to another URI; -32008 is checked
                // before any skill logic, so resending is safe.
                Err(Answer::ExtensionRequired(why))
                    if !refreshed && self.configured_uri.is_none() =>
                {
                    tracing::warn!(tenant = call.tenant, correlation_id = %call.forward.correlation_id, upstream = "a2a", reason = %why, "extension not activated; re-reading the Agent Card");
                    *self.card_uri.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    uri = self.extension_uri().await?;
                    refreshed = true;
                }
                Err(Answer::ExtensionRequired(why)) => {
                    return Err(BackendError::InvalidResponse(why))
                }
                Err(Answer::Fault(e)) => return Err(e),
                Ok(mut payload) => {
                    normalize_numbers(&mut payload);
                    return Ok(Payload::Tree(payload));
                }
            }
        }
    }

    fn capabilities(&self) -> Value {
        self.capabilities.clone()
    }

    fn dedupes_leads(&self) -> bool {
        self.dedupes
    }
}

enum Answer {
    ExtensionRequired(String),
    Fault(BackendError),
}

/// The AAP extension URI an Agent Card declares.
pub fn card_extension_uri(card: &Value) -> Option<String> {
    card.pointer("/capabilities/extensions")?
        .as_array()?
        .iter()
        .filter_map(|e| e.get("uri").and_then(Value::as_str))
        .find(|u| u.contains(AAP_EXTENSION_MARK))
        .map(str::to_owned)
}

fn is_aap_error_entry(v: &Value) -> bool {
    v.get("@type").and_then(Value::as_str) == Some(ERROR_AT_TYPE)
        || v.get("type").and_then(Value::as_str) == Some(ERROR_TYPE)
}

/// The typed `aap.error` inside a JSON-RPC `error.data` (object or array).
pub fn aap_error_in(data: Option<&Value>) -> Option<Value> {
    match data? {
        Value::Array(items) => items.iter().find(|v| is_aap_error_entry(v)).cloned(),
        v if is_aap_error_entry(v) => Some(v.clone()),
        _ => None,
    }
}

fn translate(reply: &Reply) -> Result<Value, Answer> {
    let fault = |e| Err(Answer::Fault(e));
    match reply.status {
        401 | 403 => {
            return fault(BackendError::CredentialsRefused(format!(
                "A2A agent {} refused the gateway's credential (HTTP {})",
                reply.peer, reply.status
            )))
        }
        502 | 503 => {
            return fault(BackendError::Unavailable(format!(
                "A2A agent {} answered HTTP {}",
                reply.peer, reply.status
            )))
        }
        504 => {
            return fault(BackendError::Timeout(format!(
                "A2A agent {} answered HTTP 504",
                reply.peer
            )))
        }
        _ => {}
    }
    let msg: Value = match serde_json::from_slice(&reply.body) {
        Ok(v) => v,
        Err(_) => {
            return fault(BackendError::InvalidResponse(format!(
                "A2A agent answered HTTP {} with a body that is not JSON",
                reply.status
            )))
        }
    };
    if let Some(err) = msg.get("error") {
        if let Some(mut e) = aap_error_in(err.get("data")) {
            // The wire marker is not part of the payload schema's required
            // set but is allowed; keep the payload as the dealer sent it.
            if let Some(o) = e.as_object_mut() {
                if o.get("type").is_none() {
                    o.insert("type".into(), json!(ERROR_TYPE));
                }
            }
            return Ok(e);
        }
        let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
        let text = format!(
            "A2A error {code}: {}",
            err.get("message").and_then(Value::as_str).unwrap_or("")
        );
        if code == -32008 {
            return Err(Answer::ExtensionRequired(text));
        }
        return fault(BackendError::InvalidResponse(text));
    }
    let Some(result) = msg.get("result") else {
        return fault(BackendError::InvalidResponse(
            "A2A answer has neither result nor error".into(),
        ));
    };
    if result.get("task").is_some() {
        return fault(BackendError::InvalidResponse(
            "A2A agent answered with a task; AAP skills answer with a message".into(),
        ));
    }
    match result.pointer("/message/parts/0/data") {
        Some(d) if d.is_object() => Ok(d.clone()),
        _ => fault(BackendError::InvalidResponse(
            "A2A answer has no message whose first part is a data part".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_aap_errors_in_both_placements() {
        let obj = json!({"type": "aap.error", "code": "VEHICLE_NOT_FOUND"});
        assert_eq!(aap_error_in(Some(&obj)), Some(obj.clone()));
        let arr = json!([
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "VEHICLE_NOT_FOUND"},
            {"@type": ERROR_AT_TYPE, "type": "aap.error", "code": "VEHICLE_NOT_FOUND"}
        ]);
        assert_eq!(
            aap_error_in(Some(&arr)).unwrap()["code"],
            "VEHICLE_NOT_FOUND"
        );
        assert!(aap_error_in(Some(&json!([{"reason": "X"}]))).is_none());
    }

    #[test]
    fn reads_extension_uri_from_card() {
        let card = json!({"capabilities": {"extensions": [
            {"uri": "https://example.com/other"},
            {"uri": "https://autoagentprotocol.org/extensions/aap/v3.0", "required": true}
        ]}});
        assert_eq!(
            card_extension_uri(&card).as_deref(),
            Some("https://autoagentprotocol.org/extensions/aap/v3.0")
        );
    }
}
