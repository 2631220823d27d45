//! The backend port: where a validated skill call is executed ([`Backend`], [`SkillCall`], [`Forward`]).
//! The contract validates before and after; implementations (embedded, MCP, A2A) live in the gateway crate.

use crate::aap::arguments::Arguments;
use crate::aap::payload::Payload;
use crate::aap::skill::Skill;
use async_trait::async_trait;
use serde_json::Value;
use std::borrow::Cow;

/// One validated skill call.
#[derive(Debug, Clone, Copy)]
pub struct SkillCall<'a> {
    pub tenant: &'a str,
    pub skill: Skill,
    /// The typed AAP request (already schema-valid).
    pub request: &'a Arguments<'a>,
    /// Verified caller scope (or `anonymous`).
    pub caller: &'a str,
    /// Stable reference of the idempotency record for `lead.submit`, so a
    /// backend that can deduplicate does so across gateway restarts.
    pub idempotency_ref: Option<&'a str>,
    /// The caller's claim of that record (the embedded dealer completes it
    /// in the lead store's transaction that records the lead).
    pub claim: Option<&'a crate::state::Claim>,
    /// What the client's request carries for a forwarding backend.
    pub forward: &'a Forward,
}

/// Where upstream notifications for one call go (SSE clients only).
pub type EventSink = tokio::sync::mpsc::Sender<Value>;

/// Request context a forwarding backend passes on (owned, so a streamed
/// call can run in its own task).
#[derive(Debug, Clone, Default)]
pub struct Forward {
    /// The client's `Mcp-Param-*` headers (lowercased names), forwarded
    /// unchanged to a 2026-07-28 MCP upstream.
    pub param_headers: Vec<(String, String)>,
    /// The client's `_meta.progressToken`, so upstream progress reaches it.
    pub progress_token: Option<Value>,
    /// Upstream `notifications/*` for this call are sent here as they
    /// arrive; `None` when the client cannot receive a stream.
    pub events: Option<EventSink>,
    /// The request's correlation id, for log lines about this call.
    pub correlation_id: String,
    /// The request's trace context: upstream requests carry a child
    /// `traceparent` and the contract marks its phases.
    pub trace: Option<std::sync::Arc<crate::trace::Trace>>,
}

impl Forward {
    /// Hand an upstream notification to the client's stream. A full or
    /// closed stream drops it: notifications are advisory, the result is not.
    pub fn notify(&self, message: Value) {
        if let Some(tx) = &self.events {
            if tx.try_send(message).is_err() {
                tracing::debug!("upstream notification dropped: client stream full or closed");
            }
        }
    }
}

/// A JSON-RPC error the upstream answered, passed to the client as such.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The call certainly did not reach the service (safe to retry).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The service refused the gateway's own credential (HTTP 401 or 403): the call was not
    /// executed, and no retry helps until an operator fixes the credential.
    #[error("backend refused the gateway's credentials: {0}")]
    CredentialsRefused(String),
    /// The call may have reached the service; the outcome is unknown.
    #[error("backend timed out: {0}")]
    Timeout(String),
    /// The service answered something that is not an AAP payload.
    #[error("backend answered an invalid response: {0}")]
    InvalidResponse(String),
    /// The upstream refused the call with an MCP (JSON-RPC) error.
    #[error("upstream MCP error {}", .0.code)]
    Protocol(ProtocolError),
}

#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Short name for logs and metrics (`embedded`, `mcp`, `a2a`).
    fn kind(&self) -> &'static str;

    /// Execute a call; the answer is a typed AAP response or `aap.error`.
    async fn call(&self, call: SkillCall<'_>) -> Result<Payload, BackendError>;

    /// The inventory capabilities object advertised on the search tool.
    fn capabilities(&self) -> Value;

    /// True when the backend itself suppresses a repeated `idempotency_ref`,
    /// which lets the gateway safely re-execute a lead whose earlier attempt
    /// was interrupted by a crash.
    fn dedupes_leads(&self) -> bool {
        false
    }

    /// True when the backend records a lead in the same transaction that
    /// completes the caller's claim, fenced by it (the embedded dealer on the
    /// lead store): nothing leaves before that commit, so a crash before it
    /// left nothing and the intent record is not needed (one durable commit
    /// fewer per lead).
    fn commits_with_claim(&self) -> bool {
        false
    }

    /// True when the backend may relay upstream notifications (progress)
    /// through [`Forward::events`] while a call runs.
    fn may_notify(&self) -> bool {
        false
    }

    /// The health of the backend's inventory feed (`/readyz` detail), when
    /// it serves one; `state` is `never_loaded` until a first load.
    fn feed_health(&self) -> Option<Value> {
        None
    }

    /// Which inventory feed the backend reads, when it serves one: equal for backends that
    /// share one feed source, so `/readyz` asks each source for its health once, not each of
    /// its tenants.
    fn feed_id(&self) -> Option<usize> {
        None
    }
}

/// Turn integral floats (`18080.0`) back into integers, recursively. Peers
/// whose SDK carries JSON as `google.protobuf.Value` (a2a-sdk) send every
/// number as a double; AAP schemas declare most of them `integer`.
pub fn normalize_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(i) = crate::json::integral_float(n) {
                *v = Value::from(i);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize_numbers),
        Value::Object(o) => o.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

/// How a forwarding backend passes `idempotency_key` to its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum LeadKeyMode {
    /// Replace it with a key derived from the gateway's caller-scoped
    /// idempotency record, so two callers' keys never collide upstream.
    #[default]
    Scoped,
    /// Forward the client's key unchanged.
    Client,
}

/// The typed request as forwarded: for `lead.submit` in scoped mode the
/// key becomes `gw-<record>` (stable across retries and restarts). Every
/// other request goes out as the client sent it, without a copy.
pub fn forwarded_request<'a>(call: &SkillCall<'a>, mode: LeadKeyMode) -> Cow<'a, Value> {
    if !rewrites_lead_key(call, mode) {
        return Cow::Borrowed(call.request.value());
    }
    let mut req = call.request.value().clone();
    if let (Some(r), Some(obj)) = (call.idempotency_ref, req.as_object_mut()) {
        let short: String = r.chars().take(64).collect();
        obj.insert("idempotency_key".into(), Value::from(format!("gw-{short}")));
    }
    Cow::Owned(req)
}

/// [`forwarded_request`] as JSON text: the client's own text unless the
/// lead key is rewritten.
pub fn forwarded_text<'a>(call: &SkillCall<'a>, mode: LeadKeyMode) -> Cow<'a, str> {
    if !rewrites_lead_key(call, mode) {
        return Cow::Borrowed(call.request.raw());
    }
    Cow::Owned(forwarded_request(call, mode).to_string())
}

fn rewrites_lead_key(call: &SkillCall<'_>, mode: LeadKeyMode) -> bool {
    call.skill == Skill::LeadSubmit && mode == LeadKeyMode::Scoped
}

/// The capabilities a forwarding backend advertises when the config names
/// none: the full AAP 3.0 filter, sort and facet set with skip/limit paging
/// (no cursor), which is what a ≤1.3-style dealer serves.
pub fn default_capabilities() -> Value {
    serde_json::json!({
        "type": "inventory.capabilities",
        "filters": ["make", "model", "trim", "condition", "transmission", "fuel", "driveline", "body",
            "exterior_color", "interior_color", "rooftops", "status", "year_min", "year_max",
            "price_min", "price_max", "mileage_max", "vin", "stock", "query", "vehicle_type"],
        "sort_fields": ["price", "list_price", "msrp", "mileage", "year", "make", "model", "stock", "updated_at"],
        "facets": ["makes", "models", "trims", "years", "conditions", "transmissions", "fuels", "drivelines",
            "bodies", "exterior_colors", "interior_colors", "rooftops", "statuses", "vehicle_types",
            "price_range", "mileage_range", "year_range"],
        "vehicle_types": ["car", "motorcycle"],
        "statuses": ["available", "intransit", "pending"],
        "conditions": ["new", "used", "cpo"],
        "pagination": {"default_limit": 20, "max_limit": 100, "cursor": false}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_floats_become_integers() {
        let mut v =
            serde_json::json!({"a": 18080.0, "b": [1.5, 2.0], "c": {"d": -3.0}, "e": "4.0"});
        normalize_numbers(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a": 18080, "b": [1.5, 2], "c": {"d": -3}, "e": "4.0"})
        );
        assert!(v["a"].is_i64());
    }
}
