//! The shared-state port: idempotency claims and token buckets behind one trait.
//! Owns the claim protocol's types; the stores (lead store, counters) live in the gateway crate.

use async_trait::async_trait;
use serde_json::Value;
use std::time::Duration;

/// Default for `state.claim_lease_ms`: how long a claim without a result
/// blocks other attempts before it counts as interrupted.
pub const DEFAULT_CLAIM_LEASE_MS: u64 = 60_000;

/// The outcome of claiming an idempotency key.
///
/// A claim goes through two steps before its backend call: `idem_begin`
/// (owned, nothing sent yet) and `idem_intent` (recorded as "sending", in
/// the store, before anything leaves). A claim that ended without a result
/// (crash, timeout) is judged by that record: no intent means nothing was
/// sent and the key is simply claimed again; an intent means the outcome is
/// unknown, and the key is handed out again only to a caller whose backend
/// deduplicates by the key (`Resend`), never silently re-executed otherwise.
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// The caller owns the key and nothing was sent under it: execute (after
    /// `idem_intent`), then `complete`, `abandon` or `interrupt`.
    Claimed(Claim),
    /// Completed earlier with the same payload: return this result.
    Replay(Value),
    /// The key was used with a different payload.
    Conflict,
    /// Another attempt with this key is executing right now.
    InFlight,
    /// An earlier attempt recorded its intent and never finished: it may have
    /// reached the backend. Only returned when the caller said a resend is
    /// safe (the backend deduplicates by the key); the caller owns the key.
    Resend(Claim),
    /// An earlier attempt recorded its intent and never finished, and a
    /// resend is not safe: the outcome stays unknown until an operator
    /// resolves the key (`idem_resolve`) or the record expires.
    Unknown,
}

/// Proof of owning a claimed key (a random token stored with the claim), so
/// a slow attempt whose claim was taken over cannot act on the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim(pub String);

impl Claim {
    pub fn new() -> Claim {
        Claim(uuid::Uuid::new_v4().simple().to_string())
    }
}

impl Default for Claim {
    fn default() -> Self {
        Claim::new()
    }
}

/// What an operator decided about a key whose outcome was unknown.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The lead reached the dealer: retries replay this result.
    Delivered(Value),
    /// The lead did not reach the dealer: the next retry sends it.
    Released,
}

/// What `idem_resolve` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The key's outcome was unknown (or a claim of it had no result yet) and
    /// is now resolved as asked.
    Done,
    /// No record of this key (expired, released, or never seen).
    NotFound,
    /// The key already has a result; nothing changed.
    AlreadyCompleted,
    /// An attempt with this key is still executing (its lease is live).
    InFlight,
}

/// The outcome of taking a token from a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    Allowed,
    Limited { retry_after_ms: u64 },
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("shared state unavailable: {0}")]
pub struct StateError(pub String);

/// Token bucket parameters: `capacity` tokens, refilled continuously at
/// `capacity / per` (e.g. 20 per hour).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub capacity: u64,
    pub per: Duration,
}

#[async_trait]
pub trait SharedState: Send + Sync + std::fmt::Debug {
    /// Claim `key` for a request whose payload hashes to `fingerprints[0]`
    /// (stored with the claim); a record holding any of `fingerprints` is the
    /// same payload (older records keep an older fingerprint form).
    /// `resend_ok`: the backend deduplicates by the key, so an interrupted
    /// attempt's key may be handed out again (`Begin::Resend`).
    async fn idem_begin(
        &self,
        key: &str,
        fingerprints: &[&str],
        ttl: Duration,
        resend_ok: bool,
    ) -> Result<Begin, StateError>;
    /// Record, before the backend call, that `claim` is about to send.
    /// `Ok(false)`: the claim is no longer this caller's; send nothing.
    async fn idem_intent(&self, key: &str, claim: &Claim) -> Result<bool, StateError>;
    /// Record the final result of a claimed key (kept for `ttl`).
    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StateError>;
    /// Release a claim whose call certainly did not take effect.
    async fn idem_abandon(&self, key: &str, claim: &Claim) -> Result<(), StateError>;
    /// The claim's call ended without a known outcome (timeout): stop
    /// reporting it in flight; retries see an interrupted attempt.
    async fn idem_interrupt(&self, key: &str, claim: &Claim) -> Result<(), StateError>;
    /// An operator's resolution of a key (see `Resolution`).
    async fn idem_resolve(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Resolved, StateError>;
    /// Take one token from the bucket `key`.
    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError>;
    /// Name for logs and metrics.
    fn kind(&self) -> &'static str;
}

/// `POST /idempotency/resolve?ref=<idempotency_ref>&lead_id=<id>` (the
/// lead arrived: retries replay a `lead.submit.response` with that id) or
/// `?ref=<idempotency_ref>&release=true` (it did not: the next retry sends
/// it) on the admin listener. Returns the HTTP status and JSON body.
pub async fn admin_resolve(state: &dyn SharedState, query: Option<&str>) -> (u16, Value) {
    let bad = |why: &str| {
        (
            400,
            serde_json::json!({"error": "bad_request", "reason": why}),
        )
    };
    let mut reference = None;
    let mut lead_id = None;
    let mut release = false;
    // Values are restricted to characters that need no percent-decoding.
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("ref", v)) => reference = Some(v),
            Some(("lead_id", v)) => lead_id = Some(v),
            Some(("release", "true")) => release = true,
            _ => return bad("parameters: ref, and lead_id or release=true"),
        }
    }
    let Some(reference) = reference.filter(|r| {
        r.len() == 64
            && r.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    }) else {
        return bad("ref: the 64 lowercase hex characters of details.idempotency_ref");
    };
    let resolution = match (lead_id, release) {
        (Some(id), false)
            if !id.is_empty()
                && id.len() <= 128
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b)) =>
        {
            Resolution::Delivered(serde_json::json!({
                "type": "lead.submit.response",
                "data": {"lead_id": id, "status": "received"},
                "message": "The dealer received this lead.",
            }))
        }
        (None, true) => Resolution::Released,
        _ => return bad("give lead_id=<1-128 of A-Z a-z 0-9 . _ : -> or release=true, not both"),
    };
    match state.idem_resolve(reference, &resolution).await {
        Ok(Resolved::Done) => (
            200,
            serde_json::json!({"status": "resolved", "ref": reference}),
        ),
        Ok(Resolved::NotFound) => (
            404,
            serde_json::json!({"error": "not_found", "reason": "no record of this ref (expired, released or never seen)"}),
        ),
        Ok(Resolved::AlreadyCompleted) => (
            409,
            serde_json::json!({"error": "already_completed", "reason": "this key already has a result; nothing changed"}),
        ),
        Ok(Resolved::InFlight) => (
            409,
            serde_json::json!({"error": "in_flight", "reason": "an attempt with this key is still running; try again after it ends"}),
        ),
        Err(e) => (
            503,
            serde_json::json!({"error": "state_unavailable", "reason": e.to_string()}),
        ),
    }
}
