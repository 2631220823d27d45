//! Shared state: idempotency records and token buckets.
//!
//! One trait so that several gateway instances can share state (Redis) while
//! a single instance runs on the durable in-process default.

pub mod local;
pub mod redis;

use async_trait::async_trait;
use serde_json::Value;
use std::time::Duration;

/// The outcome of claiming an idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// The caller owns the key: execute, then `complete` or `abandon`.
    Claimed,
    /// Completed earlier with the same payload: return this result.
    Replay(Value),
    /// The key was used with a different payload.
    Conflict,
    /// Another request with the same key is executing right now.
    InFlight,
    /// A claim from an earlier process never completed (crash or restart):
    /// the outcome is unknown. The caller now owns the key again.
    Interrupted,
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
    /// Claim `key` for a request whose payload hashes to `fingerprint`.
    async fn idem_begin(
        &self,
        key: &str,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Begin, StateError>;
    /// Record the final result of a claimed key (kept for `ttl`).
    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StateError>;
    /// Release a claim whose call certainly did not take effect.
    async fn idem_abandon(&self, key: &str) -> Result<(), StateError>;
    /// Take one token from the bucket `key`.
    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError>;
    /// Name for logs and metrics.
    fn kind(&self) -> &'static str;
}
