//! The outbox's Prometheus series: deliveries by sink kind and outcome, and the gauges of pending
//! deliveries, dead letters and the oldest pending lead, refreshed from the store.

use super::StoreUse;
use prometheus::{IntCounterVec, IntGauge, Opts};
use std::sync::LazyLock;

pub(super) struct OutboxMetrics {
    pub(super) deliveries: IntCounterVec,
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
pub(super) static METRICS: LazyLock<OutboxMetrics> = LazyLock::new(|| {
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

pub(super) async fn refresh_counts(s: &StoreUse) {
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
