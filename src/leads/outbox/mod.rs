//! The lead outbox: every consented lead owed to a tenant's sinks is delivered by one worker
//! per tenant, apart from requests, with retries, backoff and jitter, and dead letters.
//!
//! Durability lives in the lead store (`crate::store`): the lead path
//! commits each accepted lead with one outbox row per sink before answering
//! `received`; the worker leases due rows (a lease owner and expiry per row,
//! `FOR UPDATE SKIP LOCKED` on PostgreSQL), calls the sink, and records the
//! outcome (delivered, failed with the next attempt's time, dead). Any
//! instance on the same store delivers any pending lead: a lease whose
//! holder died runs out and another instance takes the row. A delivery is
//! repeated only when its holder died (or its lease ran out) between the
//! sink's answer and the recorded outcome, and then with the same lead id.
//!
//! One [`TenantOutbox`] per tenant lives for the whole process in a
//! registry ([`Outboxes`]): a config reload hands it the new sinks and policy. Workers run
//! on a small runtime of their own (`lead-outbox` threads), started by
//! `run` only: `check` and `catalog` build the sinks but deliver nothing.
//!
//! `engine` is one tenant's worker (lease, deliver, record, backoff), `registry` the process's
//! outboxes and the delivery runtime, `metrics` the outbox's Prometheus series, `admin` the
//! admin listener's dead-letter and redrive endpoints.

mod admin;
mod engine;
mod metrics;
mod registry;

pub use admin::{admin_dead_letters, admin_redrive};
pub use engine::TenantOutbox;
pub use registry::Outboxes;

use crate::store::LeadStore;
use std::sync::Arc;
use std::time::Duration;

/// How the outbox uses the store (`[state]`).
#[derive(Debug, Clone)]
pub struct StoreUse {
    pub store: Arc<dyn LeadStore>,
    /// `state.lead_lease_ms`.
    pub lease: Duration,
    /// `state.outbox_poll_ms`.
    pub poll: Duration,
    /// `state.idempotency_ttl_hours` (imported records keep it).
    pub idempotency_ttl: Duration,
    /// `state.lead_retention_days`.
    pub retention: Duration,
}

/// Why a tenant's outbox could not be set up (a config error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OutboxError(pub String);
