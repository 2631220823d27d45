//! The gateway crate's Prometheus series ([`GatewayMetrics`]): upstream clusters, tenant files,
//! the lead outbox and store, HTTP/2 streams; one value, held by the process's `Platform`.
//!
//! The families are made unregistered; `run`'s platform registers them once with the core's
//! registry (`aap_core::metrics`), whose `/metrics` text lists them with the core's own. A
//! platform built for a test or an offline command keeps its own, registered nowhere.

use prometheus::core::Collector;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `Debug` (the name only: the series print as the registry's text) and `Default` (every
/// series at zero, the type's `new()`) for a set of series.
macro_rules! series_set {
    ($name:ident) => {
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }

        impl Default for $name {
            fn default() -> $name {
                $name::new()
            }
        }
    };
}

/// Every Prometheus family the gateway crate records.
#[derive(Clone)]
pub struct GatewayMetrics {
    pub cluster: Arc<ClusterMetrics>,
    pub tenant_files: Arc<TenantFileMetrics>,
    pub outbox: Arc<OutboxMetrics>,
    pub store: Arc<StoreMetrics>,
    pub h2: Arc<H2Metrics>,
}

series_set!(GatewayMetrics);

impl GatewayMetrics {
    /// Every family, at zero, registered nowhere.
    pub fn new() -> GatewayMetrics {
        GatewayMetrics {
            cluster: Arc::new(ClusterMetrics::new()),
            tenant_files: Arc::new(TenantFileMetrics::new()),
            outbox: Arc::new(OutboxMetrics::new()),
            store: Arc::new(StoreMetrics::new()),
            h2: Arc::new(H2Metrics::new()),
        }
    }

    /// Register every family with `registry` (a family already there is left as it is).
    pub fn register(&self, registry: &prometheus::Registry) {
        let c = &self.cluster;
        let t = &self.tenant_files;
        let o = &self.outbox;
        let s = &self.store;
        let h = &self.h2;
        let all: Vec<Box<dyn Collector>> = vec![
            Box::new(c.peers.clone()),
            Box::new(c.healthy.clone()),
            Box::new(c.ready.clone()),
            Box::new(c.opened.clone()),
            Box::new(c.reused.clone()),
            Box::new(c.dns.clone()),
            Box::new(c.dns_failures.clone()),
            Box::new(t.files.clone()),
            Box::new(t.applies.clone()),
            Box::new(o.deliveries.clone()),
            Box::new(o.pending.clone()),
            Box::new(o.dead.clone()),
            Box::new(o.oldest.clone()),
            Box::new(s.unreadable.clone()),
            Box::new(s.errors.clone()),
            Box::new(h.refused.clone()),
            Box::new(h.resets.clone()),
            Box::new(h.memory.clone()),
            Box::new(h.working.clone()),
        ];
        for m in all {
            let _ = registry.register(m);
        }
    }
}

fn gauge_vec(name: &str, help: &str, label: &str) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), &[label])
        .unwrap_or_else(|e| panic!("metric {name}: {e}"))
}

fn counter_vec(name: &str, help: &str, label: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), label)
        .unwrap_or_else(|e| panic!("metric {name}: {e}"))
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"))
}

fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"))
}

/// The per-cluster families (`aap_upstream_cluster_*{cluster}`). The label is the cluster's
/// name: one series per cluster, never per tenant.
pub struct ClusterMetrics {
    pub peers: IntGaugeVec,
    pub healthy: IntGaugeVec,
    pub ready: IntGaugeVec,
    pub opened: IntCounterVec,
    pub reused: IntCounterVec,
    pub dns: IntCounterVec,
    pub dns_failures: IntCounterVec,
    /// How many live clients carry each cluster label: during a reload that
    /// changes a cluster's settings the old and the new client coexist, and
    /// the series goes only with the last one.
    pub label_users: Mutex<HashMap<String, usize>>,
}

series_set!(ClusterMetrics);

impl ClusterMetrics {
    pub fn new() -> ClusterMetrics {
        let counter = |name: &str, help: &str| counter_vec(name, help, &["cluster"]);
        ClusterMetrics {
            peers: gauge_vec(
                "aap_upstream_cluster_peers",
                "Peer addresses a cluster sends to (every address its names resolve to)",
                "cluster",
            ),
            healthy: gauge_vec(
                "aap_upstream_cluster_peers_healthy",
                "Peer addresses of a cluster that pass the health check",
                "cluster",
            ),
            ready: gauge_vec(
                "aap_upstream_cluster_ready",
                "1 when a cluster has at least one peer address, 0 while its names do not resolve",
                "cluster",
            ),
            opened: counter(
                "aap_upstream_cluster_connections_opened_total",
                "New upstream connections a cluster's pool opened",
            ),
            reused: counter(
                "aap_upstream_cluster_connections_reused_total",
                "Requests sent on a pooled (kept-alive) connection of a cluster",
            ),
            dns: counter(
                "aap_upstream_cluster_dns_resolutions_total",
                "Host-name lookups a cluster made",
            ),
            dns_failures: counter(
                "aap_upstream_cluster_dns_failures_total",
                "Host-name lookups of a cluster that failed or timed out",
            ),
            label_users: Mutex::default(),
        }
    }

    /// Every family's series now, by family name (what a registry's `gather` would list).
    pub fn families(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut all: Vec<prometheus::proto::MetricFamily> = [
            self.peers.collect(),
            self.healthy.collect(),
            self.ready.collect(),
            self.opened.collect(),
            self.reused.collect(),
            self.dns.collect(),
            self.dns_failures.collect(),
        ]
        .into_iter()
        .flatten()
        .collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }
}

/// `aap_tenant_files{result}` (tenant files now applied and refused) and
/// `aap_tenant_file_applies_total{result}` (one-file applies by result).
pub struct TenantFileMetrics {
    pub files: IntGaugeVec,
    pub applies: IntCounterVec,
}

series_set!(TenantFileMetrics);

impl TenantFileMetrics {
    pub fn new() -> TenantFileMetrics {
        let applies = counter_vec(
            "aap_tenant_file_applies_total",
            "Tenant file changes applied one at a time, by result (applied, refused, removed)",
            &["result"],
        );
        for r in ["applied", "refused", "removed"] {
            applies.with_label_values(&[r]).inc_by(0);
        }
        TenantFileMetrics {
            files: gauge_vec(
                "aap_tenant_files",
                "Files of tenants_dir by state: applied (serving their current version) or refused",
                "result",
            ),
            applies,
        }
    }
}

/// The lead outbox's series. No tenant label (a platform may serve 10,000 tenants): the admin
/// endpoint names the tenants; `sink` is the sink kind, `outcome` one of `delivered`, `retry`,
/// `dead_letter`.
pub struct OutboxMetrics {
    pub deliveries: IntCounterVec,
    pub pending: IntGauge,
    pub dead: IntGauge,
    pub oldest: IntGauge,
}

series_set!(OutboxMetrics);

impl OutboxMetrics {
    pub fn new() -> OutboxMetrics {
        OutboxMetrics {
            deliveries: counter_vec(
                "aap_lead_deliveries_total",
                "Lead delivery attempts by sink kind and outcome (delivered, retry, dead_letter)",
                &["sink", "outcome"],
            ),
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
    }
}

/// The lead store's series.
pub struct StoreMetrics {
    /// Stored records that could not be read (a lead, a legacy line).
    pub unreadable: IntCounter,
    /// Store operations that failed (unreachable, full, ...).
    pub errors: IntCounter,
}

series_set!(StoreMetrics);

impl StoreMetrics {
    /// Both counters at zero, registered nowhere (an offline reader's).
    pub fn new() -> StoreMetrics {
        StoreMetrics {
            unreadable: counter(
                "aap_lead_store_unreadable_total",
                "Lead records (stored, or lines of an imported file) that could not be read",
            ),
            errors: counter(
                "aap_lead_store_errors_total",
                "Lead store operations that failed (store unreachable, full, or refusing)",
            ),
        }
    }
}

/// The HTTP/2 series.
pub struct H2Metrics {
    /// `aap_h2_streams_refused_total{reason}`.
    pub refused: IntCounterVec,
    /// `aap_h2_streams_reset_total`: streams the client reset before their answer (their
    /// work was cancelled).
    pub resets: IntCounter,
    /// `aap_h2_memory_bytes`: what the process-wide budget holds now.
    pub memory: IntGauge,
    /// `aap_h2_streams_working`: streams whose request is being handled now.
    pub working: IntGauge,
}

series_set!(H2Metrics);

impl H2Metrics {
    /// Every series at zero, registered nowhere.
    pub fn new() -> H2Metrics {
        let refused = counter_vec(
            "aap_h2_streams_refused_total",
            "HTTP/2 streams refused with RST_STREAM REFUSED_STREAM before any work, by reason",
            &["reason"],
        );
        for reason in ["memory", "streams"] {
            refused.with_label_values(&[reason]);
        }
        H2Metrics {
            refused,
            resets: counter(
                "aap_h2_streams_reset_total",
                "HTTP/2 streams the client reset before their answer; their work was cancelled",
            ),
            memory: gauge(
                "aap_h2_memory_bytes",
                "Bytes the HTTP/2 streams hold now (heads, bodies, answers) against limits.h2_memory_bytes",
            ),
            working: gauge(
                "aap_h2_streams_working",
                "HTTP/2 streams whose request is being handled now",
            ),
        }
    }
}
