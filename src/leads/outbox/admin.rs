//! The admin listener's lead-outbox endpoints: `GET /admin/leads/dead-letters` (dead letters, the
//! pending count, each sink's queue) and `POST /admin/leads/redrive` (deliver dead letters again).

use super::Outboxes;
use serde_json::{json, Value};
use std::collections::HashMap;

fn unavailable(outboxes: &Outboxes, e: crate::store::StoreError) -> (u16, Value) {
    outboxes.store_metrics().errors.inc();
    (
        503,
        json!({"error": "store_unavailable", "reason": e.to_string()}),
    )
}

fn bad(reason: &str) -> (u16, Value) {
    (400, json!({"error": "bad_request", "reason": reason}))
}

/// Query parameters of the admin endpoints: values restricted to characters
/// that need no percent-decoding (tenant ids and lead ids are such).
fn params(query: Option<&str>, allowed: &[&str]) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !allowed.contains(&k) {
            return Err(format!(
                "unknown parameter; allowed: {}",
                allowed.join(", ")
            ));
        }
        if v.is_empty()
            || v.len() > 128
            || !v
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
        {
            return Err(format!("{k}: 1-128 of A-Z a-z 0-9 . _ : -"));
        }
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

/// `GET /admin/leads/dead-letters[?tenant=<id>]`: every dead letter
/// (lead id, tenant, sink, attempts, last error class and status, times), the
/// pending count, and each sink's queue (pending, dead, oldest pending, next attempt).
pub async fn admin_dead_letters(outboxes: &Outboxes, query: Option<&str>) -> (u16, Value) {
    let p = match params(query, &["tenant"]) {
        Ok(p) => p,
        Err(e) => return bad(&e),
    };
    let tenant = p.get("tenant").map(String::as_str);
    let Some(s) = outboxes.current_store() else {
        return (200, json!({"dead_letters": [], "pending": 0, "sinks": []}));
    };
    let list = match s.store.dead_letters(tenant).await {
        Ok(l) => l,
        Err(e) => return unavailable(outboxes, e),
    };
    let pending = match s.store.counts(tenant).await {
        Ok(c) => c.pending,
        Err(e) => return unavailable(outboxes, e),
    };
    let sinks: Vec<Value> = match s.store.sink_queues(tenant).await {
        Ok(q) => q
            .into_iter()
            .map(|q| {
                json!({
                    "tenant": q.tenant,
                    "sink": q.sink,
                    "pending": q.pending,
                    "dead": q.dead,
                    "oldest_pending_at": q.oldest_pending.map(crate::clock::unix_ms_rfc3339),
                    "next_attempt_at": q.next_attempt.map(crate::clock::unix_ms_rfc3339),
                })
            })
            .collect(),
        Err(e) => return unavailable(outboxes, e),
    };
    let list: Vec<Value> = list
        .into_iter()
        .map(|d| {
            json!({
                "lead_id": d.lead_id,
                "tenant": d.tenant,
                "sink": d.sink,
                "attempts": d.attempts,
                "last_error_class": d.class,
                "last_error": d.error,
                "received_at": crate::clock::unix_ms_rfc3339(d.received_at),
                "last_attempt_at": d.last_attempt.map(crate::clock::unix_ms_rfc3339),
                "dead_at": crate::clock::unix_ms_rfc3339(d.dead_at),
            })
        })
        .collect();
    (
        200,
        json!({"dead_letters": list, "pending": pending, "sinks": sinks}),
    )
}

/// `POST /admin/leads/redrive?tenant=<id>&lead_id=<id>` (one lead) or
/// `?tenant=<id>&all=true` (every dead letter of the tenant).
pub async fn admin_redrive(outboxes: &Outboxes, query: Option<&str>) -> (u16, Value) {
    let p = match params(query, &["tenant", "lead_id", "all"]) {
        Ok(p) => p,
        Err(e) => return bad(&e),
    };
    let Some(tenant) = p.get("tenant") else {
        return bad("tenant: required");
    };
    let lead_id = match (p.get("lead_id"), p.get("all").map(String::as_str)) {
        (Some(id), None) => Some(id.as_str()),
        (None, Some("true")) => None,
        _ => return bad("give lead_id=<lead id> or all=true, not both"),
    };
    let store = outboxes
        .current_store()
        .filter(|_| outboxes.has_outbox(tenant));
    let Some(s) = store else {
        return (
            404,
            json!({"error": "not_found", "reason": "no lead outbox for this tenant (not an embedded tenant with sinks)"}),
        );
    };
    let n = match s.store.redrive(tenant, lead_id).await {
        Ok(n) => n,
        Err(e) => return unavailable(outboxes, e),
    };
    if n == 0 && lead_id.is_some() {
        return (
            404,
            json!({"error": "not_found", "reason": "no dead letter with this lead id in this tenant"}),
        );
    }
    outboxes.wake(tenant);
    (
        200,
        json!({"status": "redriven", "tenant": tenant, "deliveries": n}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admin_parameters_are_checked() {
        let o = Outboxes::default();
        assert_eq!(admin_dead_letters(&o, Some("tenant=a b")).await.0, 400);
        assert_eq!(admin_dead_letters(&o, Some("who=x")).await.0, 400);
        assert_eq!(admin_redrive(&o, Some("lead_id=x")).await.0, 400);
        assert_eq!(
            admin_redrive(&o, Some("tenant=t&lead_id=x&all=true"))
                .await
                .0,
            400
        );
        assert_eq!(
            admin_redrive(&o, Some("tenant=nobody&all=true")).await.0,
            404
        );
    }
}
