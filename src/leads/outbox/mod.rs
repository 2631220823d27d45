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
//! registry: a config reload hands it the new sinks and policy. Workers run
//! on a small runtime of their own (`lead-outbox` threads), started by
//! `run` only: `check` and `catalog` build the sinks but deliver nothing.

use super::{LeadSink, SinkError};
use crate::config::{LeadSinkConfig, OutboxConfig};
use crate::store::{Attempt, LeadStore, Leased, Outcome};
use prometheus::{IntCounterVec, IntGauge, Opts};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

/// One configured sink as the worker uses it.
#[derive(Debug, Clone)]
struct SinkSlot {
    name: String,
    kind: &'static str,
    sink: Arc<dyn LeadSink>,
}

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

#[derive(Debug, Clone)]
struct Policy {
    sinks: Vec<SinkSlot>,
    cfg: OutboxConfig,
    store: StoreUse,
}

/// A tenant's outbox (see the module docs).
#[derive(Debug)]
pub struct TenantOutbox {
    tenant: String,
    /// The file store's leads file, imported once by the worker.
    leads_file: PathBuf,
    policy: Mutex<Arc<Policy>>,
    /// The policy of a generation being built (reload), until it is served.
    staged: Mutex<Option<Arc<Policy>>>,
    /// Bumped when the policy changes (the worker dead-letters leads owed to
    /// removed sinks then).
    generation: AtomicU64,
    /// (lead id, sink) deliveries running in this process.
    in_flight: Mutex<HashSet<(String, String)>>,
    wake: Notify,
}

/// Why a tenant's outbox could not be set up (a config error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OutboxError(pub String);

// ---- the process registry and the delivery runtime ------------------------------------------

/// Every outbox of the process, by tenant id.
type Registry = Mutex<HashMap<String, Arc<TenantOutbox>>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(Default::default)
}

/// The store the admin endpoints and metrics read (the last one attached).
static STORE: Mutex<Option<StoreUse>> = Mutex::new(None);

fn current_store() -> Option<StoreUse> {
    STORE.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// This process's name on the leases it takes.
fn owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()))
}

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// Start the delivery runtime (for `run`, before the first generation is
/// built). Without it, [`attach`] builds and checks the sinks only.
pub fn start_delivery() -> Result<(), String> {
    if RUNTIME.get().is_some() {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lead-outbox")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the lead outbox runtime: {e}"))?;
    rt.spawn(housekeeping());
    let _ = RUNTIME.set(rt);
    LazyLock::force(&METRICS);
    LazyLock::force(&crate::store::METRICS);
    Ok(())
}

/// Retention (pruning while serving) and the gauges, once a minute / every
/// few seconds, on the delivery runtime.
async fn housekeeping() {
    let mut tick: u64 = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let Some(s) = current_store() else { continue };
        refresh_counts(&s).await;
        if tick.is_multiple_of(12) {
            match s.store.prune(s.retention).await {
                Ok((0, 0)) => {}
                Ok((records, leads)) => {
                    tracing::info!(idempotency_records = records, leads, "lead store pruned")
                }
                Err(e) => tracing::error!(error = %e, "lead store pruning failed; retrying"),
            }
        }
        tick += 1;
    }
}

/// The outbox of an embedded tenant: the registered one (given the new
/// sinks and policy: a reload), or a new one whose worker starts now (with
/// [`start_delivery`]). `None` when the tenant has no sinks and never had
/// an outbox in this process.
pub fn attach(
    tenant: &str,
    leads_file: &Path,
    store: StoreUse,
    sinks: &[LeadSinkConfig],
    cfg: &OutboxConfig,
) -> Result<Option<Arc<TenantOutbox>>, OutboxError> {
    let mut slots = Vec::new();
    for s in sinks {
        let sink =
            super::sinks::build(s).map_err(|e| OutboxError(format!("backend.sinks: {e}")))?;
        slots.push(SinkSlot {
            name: s.name().to_owned(),
            kind: super::sinks::kind_of(s),
            sink,
        });
    }
    let policy = Arc::new(Policy {
        sinks: slots,
        cfg: cfg.clone(),
        store,
    });
    let Some(rt) = RUNTIME.get() else {
        // Offline (`check`, `catalog`): the sinks were built, nothing runs.
        if policy.sinks.is_empty() {
            return Ok(None);
        }
        return Ok(Some(Arc::new(TenantOutbox::new(
            tenant, leads_file, policy,
        ))));
    };
    *STORE.lock().unwrap_or_else(|e| e.into_inner()) = Some(policy.store.clone());
    let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(existing) = reg.get(tenant) {
        // A reload: the new sinks apply once the generation is served
        // ([`commit_staged`]); a rejected reload changes nothing.
        *existing.staged.lock().unwrap_or_else(|e| e.into_inner()) = Some(policy);
        return Ok(Some(existing.clone()));
    }
    if policy.sinks.is_empty() {
        return Ok(None);
    }
    let ob = Arc::new(TenantOutbox::new(tenant, leads_file, policy));
    reg.insert(tenant.to_owned(), ob.clone());
    rt.spawn(ob.clone().work());
    Ok(Some(ob))
}

/// A reloaded generation is now served: its sinks and policy apply.
pub fn commit_staged() {
    for ob in registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
    {
        if let Some(p) = ob.staged.lock().unwrap_or_else(|e| e.into_inner()).take() {
            *ob.policy.lock().unwrap_or_else(|e| e.into_inner()) = p;
            ob.generation.fetch_add(1, Ordering::Relaxed);
            ob.wake.notify_one();
        }
    }
}

/// A reload was rejected: forget what its build staged.
pub fn discard_staged() {
    for ob in registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
    {
        ob.staged.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// One tenant's build failed while the rest of its generation is served (a
/// tenant file refused on its own): forget what that build staged for the
/// tenant, so its serving version keeps its sinks; other tenants' staged
/// policies stay for [`commit_staged`].
pub fn discard_staged_of(tenant: &str) {
    if let Some(ob) = registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(tenant)
    {
        ob.staged.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

type Done = (Leased, SinkSlot, Result<(), SinkError>);

impl TenantOutbox {
    fn new(tenant: &str, leads_file: &Path, policy: Arc<Policy>) -> TenantOutbox {
        TenantOutbox {
            tenant: tenant.to_owned(),
            leads_file: leads_file.to_path_buf(),
            policy: Mutex::new(policy),
            staged: Mutex::new(None),
            generation: AtomicU64::new(0),
            in_flight: Mutex::new(HashSet::new()),
            wake: Notify::new(),
        }
    }

    fn policy(&self) -> Arc<Policy> {
        self.policy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The names of the sinks a lead accepted now is owed to (its outbox
    /// rows, committed with the lead).
    pub fn sink_names(&self) -> Vec<String> {
        self.policy().sinks.iter().map(|s| s.name.clone()).collect()
    }

    /// A lead was committed with its outbox rows: look for due work now.
    pub fn enqueued(&self) {
        self.wake.notify_one();
    }

    /// The worker: import the file store's leads once, then lease and
    /// deliver what is due, forever.
    async fn work(self: Arc<Self>) {
        loop {
            let p = self.policy();
            match p
                .store
                .store
                .import_leads_file(&self.tenant, &self.leads_file, p.store.idempotency_ttl)
                .await
            {
                Ok(n) => {
                    if n.leads > 0 {
                        tracing::info!(tenant = %self.tenant, leads = n.leads, deliveries = n.deliveries, "lead outbox imported the file store");
                    }
                    break;
                }
                Err(e) => {
                    tracing::error!(tenant = %self.tenant, error = %e, "lead outbox cannot reach its store; retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
        tracing::info!(tenant = %self.tenant, "lead outbox running");
        let mut running: tokio::task::JoinSet<Done> = tokio::task::JoinSet::new();
        let mut seen = u64::MAX;
        loop {
            let policy = self.policy();
            let generation = self.generation.load(Ordering::Relaxed);
            if generation != seen {
                let names: Vec<String> = policy.sinks.iter().map(|s| s.name.clone()).collect();
                match policy.store.store.sinks_removed(&self.tenant, &names).await {
                    Ok(n) => {
                        seen = generation;
                        if n > 0 {
                            tracing::error!(tenant = %self.tenant, deliveries = n, "leads owed to a removed sink dead-lettered (sink_removed)");
                        }
                    }
                    Err(e) => {
                        tracing::error!(tenant = %self.tenant, error = %e, "lead outbox cannot reach its store; retrying")
                    }
                }
            }
            let now = crate::clock::now_unix_ms();
            let mut wake_at = now + policy.store.poll.as_millis() as u64;
            for slot in &policy.sinks {
                let limit = if policy.cfg.ordered {
                    1
                } else {
                    policy.cfg.concurrency
                };
                let busy = self
                    .in_flight()
                    .iter()
                    .filter(|(_, s)| s == &slot.name)
                    .count();
                if busy >= limit {
                    continue;
                }
                match policy
                    .store
                    .store
                    .lease(
                        &self.tenant,
                        &slot.name,
                        policy.cfg.ordered,
                        limit - busy,
                        owner(),
                        policy.store.lease,
                    )
                    .await
                {
                    Ok((rows, next)) => {
                        if let Some(n) = next {
                            wake_at = wake_at.min(n.max(now + 1));
                        }
                        for row in rows {
                            let key = (row.lead.lead_id.clone(), slot.name.clone());
                            if !self.in_flight().insert(key) {
                                continue;
                            }
                            let slot = slot.clone();
                            running.spawn(async move {
                                let r = slot.sink.deliver(&row.lead).await;
                                (row, slot, r)
                            });
                        }
                    }
                    Err(e) => {
                        tracing::error!(tenant = %self.tenant, sink = %slot.name, error = %e, "lead outbox cannot reach its store; retrying");
                    }
                }
            }
            let sleep = Duration::from_millis(wake_at.saturating_sub(now).max(1));
            tokio::select! {
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Ok((row, slot, r)) = done {
                        self.record(&policy, &row, &slot, r).await;
                    }
                }
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// The outcome of one attempt: delivered, retry later, or dead letter.
    async fn record(
        &self,
        policy: &Policy,
        row: &Leased,
        slot: &SinkSlot,
        r: Result<(), SinkError>,
    ) {
        let cfg = &policy.cfg;
        let at = crate::clock::now_unix_ms();
        let attempts = row.attempts + 1;
        let attempt = match &r {
            Ok(()) => Attempt {
                outcome: Outcome::Delivered,
                attempts,
                at,
                class: None,
                error: None,
            },
            Err(e) => {
                let (class, error) = match e {
                    SinkError::Transient(e) => ("transient", e.clone()),
                    SinkError::Permanent(e) => ("permanent", e.clone()),
                };
                let too_old = at >= row.since + cfg.max_age_hours * 3_600_000;
                let dead = class == "permanent" || attempts >= cfg.max_attempts || too_old;
                let class = match (dead, class) {
                    (true, "transient") if too_old => "expired",
                    (true, "transient") => "exhausted",
                    (_, c) => c,
                };
                Attempt {
                    outcome: if dead {
                        Outcome::Dead
                    } else {
                        Outcome::Failed {
                            next_at: at + backoff(cfg, attempts),
                        }
                    },
                    attempts,
                    at,
                    class: Some(class.to_owned()),
                    error: Some(error),
                }
            }
        };
        let lead_id = &row.lead.lead_id;
        // A store that cannot be reached for a moment (a PostgreSQL restart or failover)
        // must not turn a delivered lead into a second delivery: the outcome is kept here
        // and recorded again, with backoff, for up to half the lease (the row stays this
        // instance's meanwhile; past that another instance may take it, and this one's late
        // record is then fenced off by the lease owner).
        let store = &policy.store.store;
        let mut recorded = store.record(lead_id, &slot.name, owner(), &attempt).await;
        let give_up = std::time::Instant::now() + policy.store.lease / 2;
        let mut wait = Duration::from_millis(50);
        while recorded.is_err() && std::time::Instant::now() + wait < give_up {
            crate::store::METRICS.errors.inc();
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
            recorded = store.record(lead_id, &slot.name, owner(), &attempt).await;
        }
        self.in_flight()
            .remove(&(lead_id.clone(), slot.name.clone()));
        match &recorded {
            Ok(true) => {}
            // Another instance took the row after this one's lease ran out.
            Ok(false) => {
                tracing::warn!(tenant = %self.tenant, lead_id = %lead_id, sink = %slot.name, "lead outbox lease ran out before the outcome was recorded")
            }
            Err(e) => {
                // The lease runs out and the delivery is attempted again
                // (same lead id): at least once, never lost.
                crate::store::METRICS.errors.inc();
                tracing::error!(tenant = %self.tenant, lead_id = %lead_id, sink = %slot.name, error = %e, "lead outbox outcome not recorded; the delivery will be attempted again")
            }
        }
        let outcome = match attempt.outcome {
            Outcome::Delivered => "delivered",
            Outcome::Dead => "dead_letter",
            Outcome::Failed { .. } => "retry",
        };
        match (&r, outcome) {
            (Ok(()), _) => {
                tracing::info!(tenant = %self.tenant, lead_id = %lead_id, sink = %slot.name, "lead delivered")
            }
            (Err(e), "dead_letter") => {
                tracing::error!(tenant = %self.tenant, lead_id = %lead_id, sink = %slot.name, error = %e, "lead dead-lettered")
            }
            (Err(e), _) => {
                tracing::warn!(tenant = %self.tenant, lead_id = %lead_id, sink = %slot.name, error = %e, "lead delivery failed; will retry")
            }
        }
        METRICS
            .deliveries
            .with_label_values(&[slot.kind, outcome])
            .inc();
    }
}

/// Exponential backoff with jitter: the `attempts`-th retry waits a random
/// time between half and all of `initial * 2^(attempts-1)`, capped at `max`.
fn backoff(cfg: &OutboxConfig, attempts: u32) -> u64 {
    let exp = attempts.saturating_sub(1).min(40);
    let full = cfg
        .initial_backoff_ms
        .saturating_mul(1u64 << exp)
        .min(cfg.max_backoff_ms)
        .max(1);
    full / 2 + fastrand::u64(0..=full - full / 2)
}

fn rfc3339(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

// ---- operators: metrics and the admin endpoints ---------------------------------------------

struct OutboxMetrics {
    deliveries: IntCounterVec,
    pending: IntGauge,
    dead: IntGauge,
    oldest: IntGauge,
}

fn gauge(name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
    crate::metrics::METRICS
        .registry
        .register(Box::new(g.clone()))
        .unwrap_or_else(|e| panic!("register {name}: {e}"));
    g
}

/// No tenant label (a platform may serve 10,000 tenants): the admin
/// endpoint names the tenants; `sink` is the sink kind, `outcome` one of
/// `delivered`, `retry`, `dead_letter`.
static METRICS: LazyLock<OutboxMetrics> = LazyLock::new(|| {
    let deliveries = IntCounterVec::new(
        Opts::new(
            "aap_lead_deliveries_total",
            "Lead delivery attempts by sink kind and outcome (delivered, retry, dead_letter)",
        ),
        &["sink", "outcome"],
    )
    .unwrap_or_else(|e| panic!("metric: {e}"));
    crate::metrics::METRICS
        .registry
        .register(Box::new(deliveries.clone()))
        .unwrap_or_else(|e| panic!("register: {e}"));
    OutboxMetrics {
        deliveries,
        pending: gauge(
            "aap_lead_outbox_pending",
            "Lead deliveries (one per lead and sink) waiting in the outbox",
        ),
        dead: gauge(
            "aap_lead_dead_letters",
            "Lead deliveries (one per lead and sink) in dead letter, waiting for an operator",
        ),
        oldest: gauge(
            "aap_lead_outbox_oldest_pending_seconds",
            "Age of the oldest lead still pending delivery (0 when none)",
        ),
    }
});

/// Bring the outbox gauges up to date from the store (before each
/// `/metrics` scrape, and every few seconds). On PostgreSQL they count the
/// whole fleet's deliveries: every instance reports the same numbers.
pub async fn refresh_gauges() {
    if RUNTIME.get().is_none() {
        return;
    }
    if let Some(s) = current_store() {
        refresh_counts(&s).await;
    }
}

async fn refresh_counts(s: &StoreUse) {
    match s.store.counts(None).await {
        Ok(c) => {
            let m = &*METRICS;
            m.pending.set(c.pending);
            m.dead.set(c.dead);
            let now = crate::clock::now_unix_ms();
            m.oldest.set(
                c.oldest_pending
                    .map_or(0, |o| (now.saturating_sub(o) / 1000) as i64),
            );
        }
        Err(e) => {
            crate::store::METRICS.errors.inc();
            tracing::error!(error = %e, "lead outbox gauges not refreshed: the store is unreachable");
        }
    }
}

fn has_outbox(tenant: &str) -> bool {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(tenant)
}

fn unavailable(e: crate::store::StoreError) -> (u16, Value) {
    crate::store::METRICS.errors.inc();
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
pub async fn admin_dead_letters(query: Option<&str>) -> (u16, Value) {
    let p = match params(query, &["tenant"]) {
        Ok(p) => p,
        Err(e) => return bad(&e),
    };
    let tenant = p.get("tenant").map(String::as_str);
    let Some(s) = current_store() else {
        return (200, json!({"dead_letters": [], "pending": 0, "sinks": []}));
    };
    let list = match s.store.dead_letters(tenant).await {
        Ok(l) => l,
        Err(e) => return unavailable(e),
    };
    let pending = match s.store.counts(tenant).await {
        Ok(c) => c.pending,
        Err(e) => return unavailable(e),
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
                    "oldest_pending_at": q.oldest_pending.map(rfc3339),
                    "next_attempt_at": q.next_attempt.map(rfc3339),
                })
            })
            .collect(),
        Err(e) => return unavailable(e),
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
                "received_at": rfc3339(d.received_at),
                "last_attempt_at": d.last_attempt.map(rfc3339),
                "dead_at": rfc3339(d.dead_at),
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
pub async fn admin_redrive(query: Option<&str>) -> (u16, Value) {
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
    let store = current_store().filter(|_| has_outbox(tenant));
    let Some(s) = store else {
        return (
            404,
            json!({"error": "not_found", "reason": "no lead outbox for this tenant (not an embedded tenant with sinks)"}),
        );
    };
    let n = match s.store.redrive(tenant, lead_id).await {
        Ok(n) => n,
        Err(e) => return unavailable(e),
    };
    if n == 0 && lead_id.is_some() {
        return (
            404,
            json!({"error": "not_found", "reason": "no dead letter with this lead id in this tenant"}),
        );
    }
    if let Some(ob) = registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(tenant.as_str())
    {
        ob.wake.notify_one();
    }
    (
        200,
        json!({"status": "redriven", "tenant": tenant, "deliveries": n}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let cfg = OutboxConfig {
            initial_backoff_ms: 100,
            max_backoff_ms: 1_000,
            ..OutboxConfig::default()
        };
        for _ in 0..200 {
            let first = backoff(&cfg, 1);
            assert!((50..=100).contains(&first), "{first}");
            let third = backoff(&cfg, 3);
            assert!((200..=400).contains(&third), "{third}");
            let late = backoff(&cfg, 40);
            assert!((500..=1_000).contains(&late), "{late}");
        }
    }

    #[tokio::test]
    async fn admin_parameters_are_checked() {
        assert_eq!(admin_dead_letters(Some("tenant=a b")).await.0, 400);
        assert_eq!(admin_dead_letters(Some("who=x")).await.0, 400);
        assert_eq!(admin_redrive(Some("lead_id=x")).await.0, 400);
        assert_eq!(
            admin_redrive(Some("tenant=t&lead_id=x&all=true")).await.0,
            400
        );
        assert_eq!(admin_redrive(Some("tenant=nobody&all=true")).await.0, 404);
    }
}
