//! One tenant's outbox and its worker: the policy (sinks, retry settings, store use), staged on
//! a reload until served; leasing due rows, delivering, recording each outcome with backoff.

use super::StoreUse;
use crate::config::OutboxConfig;
use crate::leads::{LeadSink, SinkError};
use crate::series::{OutboxMetrics, StoreMetrics};
use crate::store::{Attempt, Leased, Outcome};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// One configured sink as the worker uses it.
#[derive(Debug, Clone)]
pub(super) struct SinkSlot {
    pub(super) name: String,
    pub(super) kind: &'static str,
    pub(super) sink: Arc<dyn LeadSink>,
}

#[derive(Debug, Clone)]
pub(super) struct Policy {
    pub(super) sinks: Vec<SinkSlot>,
    pub(super) cfg: OutboxConfig,
    pub(super) store: StoreUse,
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
    /// What the worker shares with the rest of the process (`Outboxes`).
    handles: Handles,
}

/// What an outbox's worker gets from the process's `Outboxes`.
#[derive(Debug, Clone)]
pub(super) struct Handles {
    /// This process's name on the leases it takes.
    pub(super) owner: Arc<str>,
    pub(super) metrics: Arc<OutboxMetrics>,
    pub(super) store_metrics: Arc<StoreMetrics>,
}

type Done = (Leased, SinkSlot, Result<(), SinkError>);

impl TenantOutbox {
    pub(super) fn new(
        tenant: &str,
        leads_file: &Path,
        policy: Arc<Policy>,
        handles: Handles,
    ) -> TenantOutbox {
        TenantOutbox {
            tenant: tenant.to_owned(),
            leads_file: leads_file.to_path_buf(),
            policy: Mutex::new(policy),
            staged: Mutex::new(None),
            generation: AtomicU64::new(0),
            in_flight: Mutex::new(HashSet::new()),
            wake: Notify::new(),
            handles,
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

    /// Stage the policy of a generation being built (a reload): it applies
    /// at [`TenantOutbox::commit_staged`].
    pub(super) fn stage(&self, policy: Arc<Policy>) {
        *self.staged.lock().unwrap_or_else(|e| e.into_inner()) = Some(policy);
    }

    /// The staged policy (if any) applies now.
    pub(super) fn commit_staged(&self) {
        if let Some(p) = self.staged.lock().unwrap_or_else(|e| e.into_inner()).take() {
            *self.policy.lock().unwrap_or_else(|e| e.into_inner()) = p;
            self.generation.fetch_add(1, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// Forget the staged policy (if any).
    pub(super) fn discard_staged(&self) {
        self.staged.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Look for due work now (a redrive).
    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }

    /// The worker: import the file store's leads once, then lease and
    /// deliver what is due, forever.
    pub(super) async fn work(self: Arc<Self>) {
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
                        &self.handles.owner,
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
        let mut recorded = store
            .record(lead_id, &slot.name, &self.handles.owner, &attempt)
            .await;
        let give_up = std::time::Instant::now() + policy.store.lease / 2;
        let mut wait = Duration::from_millis(50);
        while recorded.is_err() && std::time::Instant::now() + wait < give_up {
            self.handles.store_metrics.errors.inc();
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
            recorded = store
                .record(lead_id, &slot.name, &self.handles.owner, &attempt)
                .await;
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
                self.handles.store_metrics.errors.inc();
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
        self.handles
            .metrics
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
}
