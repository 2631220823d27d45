//! The process's lead outboxes ([`Outboxes`]): one per embedded tenant with sinks, by tenant id,
//! the store the admin endpoints and gauges read, this process's lease-owner name, and the
//! delivery runtime with its housekeeping (retention, gauges).

use super::engine::{Policy, SinkSlot, TenantOutbox};
use super::metrics::refresh_counts;
use super::{OutboxError, StoreUse};
use crate::config::{LeadSinkConfig, OutboxConfig};
use crate::leads::sinks::SinkClient;
use crate::series::{OutboxMetrics, StoreMetrics};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Every outbox of the process and the runtime their workers run on.
#[derive(Debug)]
pub struct Outboxes {
    /// Every outbox, by tenant id.
    tenants: Mutex<HashMap<String, Arc<TenantOutbox>>>,
    /// The store the admin endpoints and metrics read (the last one attached).
    store: Arc<Mutex<Option<StoreUse>>>,
    /// This process's name on the leases it takes.
    owner: Arc<str>,
    /// The delivery runtime (`run` only; see [`Outboxes::start_delivery`]).
    runtime: OnceLock<tokio::runtime::Runtime>,
    /// The outbound client every HTTP sink uses.
    sink_client: SinkClient,
    metrics: Arc<OutboxMetrics>,
    store_metrics: Arc<StoreMetrics>,
}

impl Default for Outboxes {
    fn default() -> Outboxes {
        Outboxes::new(Arc::default(), Arc::default())
    }
}

impl Drop for Outboxes {
    fn drop(&mut self) {
        // Its workers end with it, wherever it is dropped (a test's async context too).
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Outboxes {
    /// No outbox yet, delivering nothing until [`Outboxes::start_delivery`];
    /// deliveries are counted in `metrics`, store failures in `store_metrics`.
    pub fn new(metrics: Arc<OutboxMetrics>, store_metrics: Arc<StoreMetrics>) -> Outboxes {
        Outboxes {
            tenants: Mutex::default(),
            store: Arc::default(),
            owner: format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()).into(),
            runtime: OnceLock::new(),
            sink_client: SinkClient::default(),
            metrics,
            store_metrics,
        }
    }

    /// Start the delivery runtime (for `run`, before the first generation is
    /// built). Without it, [`Outboxes::attach`] builds and checks the sinks only.
    pub fn start_delivery(&self) -> Result<(), String> {
        if self.runtime.get().is_some() {
            return Ok(());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lead-outbox")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the lead outbox runtime: {e}"))?;
        rt.spawn(housekeeping(
            self.store.clone(),
            self.metrics.clone(),
            self.store_metrics.clone(),
        ));
        let _ = self.runtime.set(rt);
        Ok(())
    }

    /// The store the admin endpoints and gauges read.
    pub(super) fn current_store(&self) -> Option<StoreUse> {
        self.store.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether delivery runs in this process (`run`).
    pub(super) fn delivering(&self) -> bool {
        self.runtime.get().is_some()
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TenantOutbox>>> {
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The outbox of an embedded tenant: the registered one (given the new
    /// sinks and policy: a reload), or a new one whose worker starts now (with
    /// [`Outboxes::start_delivery`]). `None` when the tenant has no sinks and never had
    /// an outbox in this process.
    pub fn attach(
        &self,
        tenant: &str,
        leads_file: &Path,
        store: StoreUse,
        sinks: &[LeadSinkConfig],
        cfg: &OutboxConfig,
    ) -> Result<Option<Arc<TenantOutbox>>, OutboxError> {
        let mut slots = Vec::new();
        for s in sinks {
            let sink = crate::leads::sinks::build(s, &self.sink_client)
                .map_err(|e| OutboxError(format!("backend.sinks: {e}")))?;
            slots.push(SinkSlot {
                name: s.name().to_owned(),
                kind: crate::leads::sinks::kind_of(s),
                sink,
            });
        }
        let policy = Arc::new(Policy {
            sinks: slots,
            cfg: cfg.clone(),
            store,
        });
        let handles = super::engine::Handles {
            owner: self.owner.clone(),
            metrics: self.metrics.clone(),
            store_metrics: self.store_metrics.clone(),
        };
        let Some(rt) = self.runtime.get() else {
            // Offline (`check`, `catalog`): the sinks were built, nothing runs.
            if policy.sinks.is_empty() {
                return Ok(None);
            }
            return Ok(Some(Arc::new(TenantOutbox::new(
                tenant, leads_file, policy, handles,
            ))));
        };
        *self.store.lock().unwrap_or_else(|e| e.into_inner()) = Some(policy.store.clone());
        let mut reg = self.tenants();
        if let Some(existing) = reg.get(tenant) {
            // A reload: the new sinks apply once the generation is served
            // ([`Outboxes::commit_staged`]); a rejected reload changes nothing.
            existing.stage(policy);
            return Ok(Some(existing.clone()));
        }
        if policy.sinks.is_empty() {
            return Ok(None);
        }
        let ob = Arc::new(TenantOutbox::new(tenant, leads_file, policy, handles));
        reg.insert(tenant.to_owned(), ob.clone());
        rt.spawn(ob.clone().work());
        Ok(Some(ob))
    }

    /// A reloaded generation is now served: its sinks and policy apply.
    pub fn commit_staged(&self) {
        for ob in self.tenants().values() {
            ob.commit_staged();
        }
    }

    /// A reload was rejected: forget what its build staged.
    pub fn discard_staged(&self) {
        for ob in self.tenants().values() {
            ob.discard_staged();
        }
    }

    /// One tenant's build failed while the rest of its generation is served (a
    /// tenant file refused on its own): forget what that build staged for the
    /// tenant, so its serving version keeps its sinks; other tenants' staged
    /// policies stay for [`Outboxes::commit_staged`].
    pub fn discard_staged_of(&self, tenant: &str) {
        if let Some(ob) = self.tenants().get(tenant) {
            ob.discard_staged();
        }
    }

    /// Where a failed store operation of the admin endpoints is counted.
    pub(super) fn store_metrics(&self) -> &StoreMetrics {
        &self.store_metrics
    }

    /// Whether `tenant` has an outbox in this process.
    pub(super) fn has_outbox(&self, tenant: &str) -> bool {
        self.tenants().contains_key(tenant)
    }

    /// Tell `tenant`'s worker (if any) to look for due work now.
    pub(super) fn wake(&self, tenant: &str) {
        if let Some(ob) = self.tenants().get(tenant) {
            ob.wake();
        }
    }

    /// Bring the outbox gauges up to date from the store (before each
    /// `/metrics` scrape, and every few seconds). On PostgreSQL they count the
    /// whole fleet's deliveries: every instance reports the same numbers.
    pub async fn refresh_gauges(&self) {
        if !self.delivering() {
            return;
        }
        if let Some(s) = self.current_store() {
            refresh_counts(&s, &self.metrics, &self.store_metrics).await;
        }
    }
}

/// Retention (pruning while serving) and the gauges, once a minute / every
/// few seconds, on the delivery runtime.
async fn housekeeping(
    store: Arc<Mutex<Option<StoreUse>>>,
    metrics: Arc<OutboxMetrics>,
    store_metrics: Arc<StoreMetrics>,
) {
    let mut tick: u64 = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let current = store.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(s) = current else { continue };
        refresh_counts(&s, &metrics, &store_metrics).await;
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
