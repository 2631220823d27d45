//! The lead store port: idempotency claims, the lead of record, its outbox rows and their
//! outcomes, in one transactional engine (SQLite embedded, PostgreSQL for a fleet).
//!
//! Accepting a lead is one transaction ([`LeadStore::accept`]): the lead, the
//! completion of its idempotency claim and one outbox row per sink commit
//! together, and `received` is answered only after that commit. Delivery
//! leases outbox rows ([`LeadStore::lease`]): any instance on the same
//! database delivers any pending lead; a lease that runs out (its holder
//! died) lets another instance take the row.

pub mod cli;
pub mod import;
pub mod ops;
pub mod postgres;
pub mod schema;
pub mod sql;
pub mod sqlite;

use crate::state::{Begin, Bucket, Claim, Resolution, Resolved, SharedState, StateError, Take};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// An accepted lead as the store keeps it and every sink receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lead {
    /// `lead_…`, the id the agent was answered with; sinks send it so the
    /// receiver can deduplicate a delivery that is repeated after a crash.
    pub lead_id: String,
    pub tenant: String,
    /// RFC 3339, when the gateway accepted the lead.
    pub received_at: String,
    /// The validated `aap_lead_submit` arguments.
    pub request: Value,
    /// The dealer profile (`aap_dealer_information` data) at acceptance.
    pub dealer: Value,
    /// The listed vehicle the lead names (by VIN, stock or vehicle id),
    /// resolved from inventory at acceptance, when there is one.
    #[serde(default)]
    pub vehicle: Option<Value>,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("lead store: {0}")]
pub struct StoreError(pub String);

impl From<StoreError> for StateError {
    fn from(e: StoreError) -> StateError {
        StateError(e.0)
    }
}

/// One lead to accept (see [`LeadStore::accept`]).
#[derive(Debug, Clone)]
pub struct Accept {
    pub tenant: String,
    pub lead_id: String,
    /// Unix milliseconds.
    pub received_ms: u64,
    /// The idempotency record and the claim this attempt holds on it.
    pub idem: Option<(String, Claim)>,
    /// The lead of record (JSON object: request, response, dealer, vehicle, sinks).
    pub record: Value,
    /// The answer, stored as the idempotency record's result.
    pub response: Value,
    pub sinks: Vec<String>,
    pub ttl: Duration,
}

/// What `accept` found.
#[derive(Debug, Clone, PartialEq)]
pub enum Accepted {
    /// Committed: the lead, its idempotency result and its outbox rows.
    Recorded,
    /// The key had completed already: its result.
    Replay(Value),
    /// The claim is no longer this attempt's: nothing was written.
    Lost,
}

/// An outbox row leased for one delivery attempt.
#[derive(Debug, Clone)]
pub struct Leased {
    pub lead: Arc<Lead>,
    pub sink: String,
    /// Attempts since acceptance or the last redrive.
    pub attempts: u32,
    /// When the age limit started counting (acceptance or redrive), Unix ms.
    pub since: u64,
}

/// The outcome of one attempt, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Delivered,
    Failed { next_at: u64 },
    Dead,
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub outcome: Outcome,
    pub attempts: u32,
    pub at: u64,
    pub class: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub lead_id: String,
    pub tenant: String,
    pub sink: String,
    pub attempts: u32,
    pub class: Option<String>,
    pub error: Option<String>,
    pub received_at: u64,
    pub last_attempt: Option<u64>,
    pub dead_at: u64,
}

/// Deliveries pending and dead, and the acceptance time of the oldest pending.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    pub pending: i64,
    pub dead: i64,
    pub oldest_pending: Option<u64>,
}

/// One sink's queue (a sink with deliveries pending or dead): counts, the acceptance time of
/// its oldest pending delivery and when its next pending delivery is due (Unix ms).
#[derive(Debug, Clone, PartialEq)]
pub struct SinkQueue {
    pub tenant: String,
    pub sink: String,
    pub pending: i64,
    pub dead: i64,
    pub oldest_pending: Option<u64>,
    /// The earliest `next_at` of its pending deliveries (a leased one: when its lease ends).
    pub next_attempt: Option<u64>,
}

/// Which leads `list` returns.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub tenant: Option<String>,
    pub lead_id: Option<String>,
    /// Unix ms, inclusive / exclusive.
    pub since: Option<u64>,
    pub until: Option<u64>,
    pub limit: usize,
}

/// One sink's delivery of a listed lead.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Delivery {
    pub sink: String,
    pub status: String,
    pub attempts: u32,
    pub class: Option<String>,
    pub error: Option<String>,
}

/// A lead as operators list it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub lead_id: String,
    pub tenant: String,
    pub received_at: u64,
    /// The lead of record; `None` when the stored text does not parse
    /// (reported, never skipped).
    pub record: Option<Value>,
    pub deliveries: Vec<Delivery>,
}

impl Listed {
    /// `dead` if any sink's delivery is dead, else `pending` if any is
    /// pending, else `delivered` (every sink took it), else `recorded` (no sinks).
    pub fn status(&self) -> &'static str {
        let has = |s: &str| self.deliveries.iter().any(|d| d.status == s);
        if has("dead") {
            "dead"
        } else if has("pending") {
            "pending"
        } else if self.deliveries.is_empty() {
            "recorded"
        } else {
            "delivered"
        }
    }
}

/// What a legacy import brought in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    pub leads: u64,
    pub deliveries: u64,
    pub idempotency: u64,
    pub unreadable: u64,
}

/// The port. Every method is one transaction on the engine.
#[async_trait]
pub trait LeadStore: Send + Sync + std::fmt::Debug {
    // Idempotency (the semantics of `SharedState`'s `idem_*`; claims are
    // owner-fenced and leased for `lease`).
    async fn idem_begin(
        &self,
        key: &str,
        fingerprints: &[&str],
        ttl: Duration,
        resend_ok: bool,
        lease: Duration,
    ) -> Result<Begin, StoreError>;
    async fn idem_intent(
        &self,
        key: &str,
        claim: &Claim,
        lease: Duration,
    ) -> Result<bool, StoreError>;
    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StoreError>;
    async fn idem_abandon(&self, key: &str, claim: &Claim) -> Result<(), StoreError>;
    async fn idem_interrupt(&self, key: &str, claim: &Claim) -> Result<(), StoreError>;
    async fn idem_resolve(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Resolved, StoreError>;
    /// One commit: the lead, its idempotency completion, its outbox rows.
    async fn accept(&self, a: Accept) -> Result<Accepted, StoreError>;
    /// Lease up to `limit` due deliveries of (tenant, sink) for `lease`
    /// (ordered: only the oldest pending one, and only when it is due and
    /// unleased). Also returns when the next one is due (a wake-up hint).
    async fn lease(
        &self,
        tenant: &str,
        sink: &str,
        ordered: bool,
        limit: usize,
        owner: &str,
        lease: Duration,
    ) -> Result<(Vec<Leased>, Option<u64>), StoreError>;
    /// Record an attempt's outcome; `false` when the row was not this
    /// owner's any more (its lease ran out and another instance took it).
    async fn record(
        &self,
        lead_id: &str,
        sink: &str,
        owner: &str,
        attempt: &Attempt,
    ) -> Result<bool, StoreError>;
    /// Dead-letter the tenant's pending deliveries to sinks not in `keep`.
    async fn sinks_removed(&self, tenant: &str, keep: &[String]) -> Result<u64, StoreError>;
    async fn dead_letters(&self, tenant: Option<&str>) -> Result<Vec<DeadLetter>, StoreError>;
    /// Re-drive dead letters of a tenant (one lead or all): how many.
    async fn redrive(&self, tenant: &str, lead_id: Option<&str>) -> Result<u64, StoreError>;
    async fn counts(&self, tenant: Option<&str>) -> Result<Counts, StoreError>;
    /// Per (tenant, sink) with deliveries pending or dead: its [`SinkQueue`].
    async fn sink_queues(&self, tenant: Option<&str>) -> Result<Vec<SinkQueue>, StoreError>;
    /// Delete expired idempotency records and leads older than `keep_leads`
    /// whose deliveries are all settled as delivered: (records, leads).
    async fn prune(&self, keep_leads: Duration) -> Result<(u64, u64), StoreError>;
    async fn list(&self, filter: &Filter) -> Result<Vec<Listed>, StoreError>;
    /// Import a tenant's leads file and delivery journal of the file store
    /// (once: the files are renamed `*.imported` after the commit).
    async fn import_leads_file(
        &self,
        tenant: &str,
        leads_file: &Path,
        ttl: Duration,
    ) -> Result<Imported, StoreError>;
    fn kind(&self) -> &'static str;
}

// ---- metrics ---------------------------------------------------------------------------------

pub use crate::series::StoreMetrics;

// ---- the lead path's state: idempotency in the store, counters elsewhere ------------------

/// `SharedState` for the lead path: idempotency records in the lead store,
/// token buckets in `counters` (the in-process buckets, or Redis).
#[derive(Debug, Clone)]
pub struct StoreState {
    pub store: Arc<dyn LeadStore>,
    pub counters: Arc<dyn SharedState>,
    pub lease: Duration,
    /// Where a failed store operation is counted.
    pub metrics: Arc<StoreMetrics>,
}

fn counted<T>(m: &StoreMetrics, r: Result<T, StoreError>) -> Result<T, StateError> {
    r.map_err(|e| {
        m.errors.inc();
        e.into()
    })
}

#[async_trait]
impl SharedState for StoreState {
    async fn idem_begin(
        &self,
        key: &str,
        fingerprints: &[&str],
        ttl: Duration,
        resend_ok: bool,
    ) -> Result<Begin, StateError> {
        counted(
            &self.metrics,
            self.store
                .idem_begin(key, fingerprints, ttl, resend_ok, self.lease)
                .await,
        )
    }
    async fn idem_intent(&self, key: &str, claim: &Claim) -> Result<bool, StateError> {
        counted(
            &self.metrics,
            self.store.idem_intent(key, claim, self.lease).await,
        )
    }
    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StateError> {
        counted(
            &self.metrics,
            self.store
                .idem_complete(key, fingerprint, result, ttl)
                .await,
        )
    }
    async fn idem_abandon(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        counted(&self.metrics, self.store.idem_abandon(key, claim).await)
    }
    async fn idem_interrupt(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        counted(&self.metrics, self.store.idem_interrupt(key, claim).await)
    }
    async fn idem_resolve(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Resolved, StateError> {
        counted(
            &self.metrics,
            self.store.idem_resolve(key, resolution).await,
        )
    }
    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError> {
        self.counters.take(key, bucket).await
    }
    fn kind(&self) -> &'static str {
        self.store.kind()
    }
}

/// Token buckets of one process (the `local` backend's counters).
#[derive(Debug, Default)]
pub struct LocalCounters(crate::state::buckets::Buckets);

#[async_trait]
impl SharedState for LocalCounters {
    async fn idem_begin(
        &self,
        _: &str,
        _: &[&str],
        _: Duration,
        _: bool,
    ) -> Result<Begin, StateError> {
        Err(StateError(
            "idempotency records live in the lead store".into(),
        ))
    }
    async fn idem_intent(&self, _: &str, _: &Claim) -> Result<bool, StateError> {
        Err(StateError(
            "idempotency records live in the lead store".into(),
        ))
    }
    async fn idem_complete(
        &self,
        _: &str,
        _: &str,
        _: &Value,
        _: Duration,
    ) -> Result<(), StateError> {
        Err(StateError(
            "idempotency records live in the lead store".into(),
        ))
    }
    async fn idem_abandon(&self, _: &str, _: &Claim) -> Result<(), StateError> {
        Err(StateError(
            "idempotency records live in the lead store".into(),
        ))
    }
    async fn idem_interrupt(&self, _: &str, _: &Claim) -> Result<(), StateError> {
        Err(StateError(
            "idempotency records live in the lead store".into(),
        ))
    }
    async fn idem_resolve(&self, _: &str, _: &Resolution) -> Result<Resolved, StateError> {
        Err(StateError(
            "idempotency records live in the lead store".into(),
        ))
    }
    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError> {
        Ok(self.0.take(key, bucket, crate::clock::now_unix_ms()))
    }
    fn kind(&self) -> &'static str {
        "local"
    }
}

// ---- opening ---------------------------------------------------------------------------------

/// Which store `[state]` names, as text: a reload keeps the store while it is the same.
pub fn store_key(c: &crate::config::Config) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}",
        c.state.lead_store,
        sqlite_path(c),
        c.state.postgres_url,
        c.state_dir()
    )
}

/// `state.sqlite_file`, default `<state.dir>/leads.sqlite3`.
pub fn sqlite_path(c: &crate::config::Config) -> std::path::PathBuf {
    c.state
        .sqlite_file
        .as_ref()
        .map(|p| c.resolve(p))
        .unwrap_or_else(|| c.state_dir().join("leads.sqlite3"))
}

/// The store `[state]` configures. Nothing is opened, created or connected
/// here (offline commands build the runtime too): the engine opens on first
/// use, after this process holds the state lock (SQLite), runs its
/// migrations and imports the file store's idempotency log once.
/// Writes wait for this process to hold `state.dir` in `locks`; failures and
/// unreadable records are counted in `metrics`.
pub fn open(
    c: &crate::config::Config,
    locks: &Arc<crate::state::lock::StateLocks>,
    metrics: &Arc<StoreMetrics>,
) -> Result<Arc<dyn LeadStore>, String> {
    use crate::config::LeadStoreKind;
    let legacy_idem = c.state_dir().join("idempotency.jsonl");
    match c.state.lead_store {
        LeadStoreKind::Sqlite => {
            let engine = sqlite::Sqlite::new(&sqlite_path(c), &c.state_dir())?;
            Ok(Arc::new(ops::SqlStore::new(
                engine,
                legacy_idem,
                c.state_dir(),
                locks.clone(),
                metrics.clone(),
            )))
        }
        LeadStoreKind::Postgres => {
            let url = c
                .state
                .postgres_url
                .as_ref()
                .ok_or("state.postgres_url: required when state.lead_store = \"postgres\"")?;
            let engine = postgres::Postgres::new(url.expose(), c.state.postgres_pool_size)?;
            Ok(Arc::new(ops::SqlStore::new(
                engine,
                legacy_idem,
                c.state_dir(),
                locks.clone(),
                metrics.clone(),
            )))
        }
    }
}
