//! Peer health and choice: the load balancer's health observer, the passive
//! cool-down after a refused connection, and picking the next peer to try.

use super::Client;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a peer that refused a connection is skipped.
const FAIL_COOL_DOWN: Duration = Duration::from_secs(3);

/// Logs health transitions reported by the load balancer's health check
/// and sets the `aap_upstream_up` gauge.
pub(super) struct HealthLog;

#[async_trait::async_trait]
impl pingora::lb::health_check::HealthObserve for HealthLog {
    async fn observe(&self, target: &pingora::lb::Backend, healthy: bool) {
        crate::metrics::peer_health(&target.addr.to_string(), healthy);
        if healthy {
            tracing::info!(peer = %target.addr, healthy, "upstream peer health changed");
        } else {
            tracing::warn!(peer = %target.addr, healthy, "upstream peer health changed");
        }
    }
}

impl Client {
    /// Start the load balancer's health-check loop once, on the runtime of
    /// the first call.
    pub(super) fn ensure_health_checks(&self) {
        if self.health_started.swap(true, Ordering::AcqRel) {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            self.health_started.store(false, Ordering::Release);
            return;
        }
        let lb = self.lb.clone();
        let rx = self.shutdown.subscribe();
        tokio::spawn(async move { lb.run(rx, None).await });
    }

    fn cooling(&self, addr: &SocketAddr) -> bool {
        // An expired entry stays until a call succeeds (`mark_ok`), which
        // also turns the peer's gauge back to up.
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(addr)
            .is_some_and(|t| t.elapsed() < FAIL_COOL_DOWN)
    }

    pub(super) fn mark_failed(&self, addr: SocketAddr) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(addr, Instant::now());
        crate::metrics::peer_health(&addr.to_string(), false);
    }

    pub(super) fn mark_ok(&self, addr: &SocketAddr) {
        let was_failing = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(addr)
            .is_some();
        if was_failing {
            crate::metrics::peer_health(&addr.to_string(), true);
        }
    }

    /// The next peer to try: healthy and not cooling first, then any peer not
    /// tried yet (health information may lag behind a restart).
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.cfg.peers.len();
        let index =
            |b: &pingora::lb::Backend| b.addr.as_inet().and_then(|a| self.by_addr.get(a).copied());
        let healthy = self.lb.select_with(b"", n * 2 + 1, |b, healthy| {
            healthy
                && index(b).is_some_and(|i| !tried.contains(&i))
                && !b.addr.as_inet().is_some_and(|a| self.cooling(a))
        });
        if let Some(i) = healthy.as_ref().and_then(index) {
            return Some(i);
        }
        let fallback = self.lb.select_with(b"", n * 2 + 1, |b, _| {
            index(b).is_some_and(|i| !tried.contains(&i))
        });
        fallback
            .as_ref()
            .and_then(index)
            .or_else(|| (0..n).find(|i| !tried.contains(i)))
    }
}
