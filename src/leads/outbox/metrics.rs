//! The outbox's gauges brought up to date from the store: pending deliveries, dead letters and
//! the age of the oldest pending lead (the series themselves are `crate::series::OutboxMetrics`).

use super::StoreUse;
use crate::series::{OutboxMetrics, StoreMetrics};

/// Bring the outbox gauges up to date from the store (before each `/metrics` scrape, and every
/// few seconds). On PostgreSQL they count the whole fleet's deliveries.
pub(super) async fn refresh_counts(s: &StoreUse, m: &OutboxMetrics, store_metrics: &StoreMetrics) {
    match s.store.counts(None).await {
        Ok(c) => {
            m.pending.set(c.pending);
            m.dead.set(c.dead);
            let now = crate::clock::now_unix_ms();
            m.oldest.set(
                c.oldest_pending
                    .map_or(0, |o| (now.saturating_sub(o) / 1000) as i64),
            );
        }
        Err(e) => {
            store_metrics.errors.inc();
            tracing::error!(error = %e, "lead outbox gauges not refreshed: the store is unreachable");
        }
    }
}
