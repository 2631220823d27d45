//! Peer health and choice: the load balancer's health observer, the passive
//! cool-down after a refused connection, picking the next peer to try, and the
//! per-cluster metrics (`aap_upstream_cluster_*{cluster}`).

use super::Client;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How long a peer that refused a connection is skipped.
const FAIL_COOL_DOWN: Duration = Duration::from_secs(3);

/// The per-cluster metric families, registered on first use. The label is
/// the cluster's name: one series per cluster, never per tenant.
struct Families {
    peers: IntGaugeVec,
    healthy: IntGaugeVec,
    ready: IntGaugeVec,
    opened: IntCounterVec,
    reused: IntCounterVec,
    dns: IntCounterVec,
    dns_failures: IntCounterVec,
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| {
    let r = &crate::metrics::METRICS.registry;
    let gauge = |name: &str, help: &str| {
        let g = IntGaugeVec::new(Opts::new(name, help), &["cluster"])
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        r.register(Box::new(g.clone()))
            .unwrap_or_else(|e| panic!("register {name}: {e}"));
        g
    };
    let counter = |name: &str, help: &str| {
        let c = IntCounterVec::new(Opts::new(name, help), &["cluster"])
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        r.register(Box::new(c.clone()))
            .unwrap_or_else(|e| panic!("register {name}: {e}"));
        c
    };
    Families {
        peers: gauge(
            "aap_upstream_cluster_peers",
            "Peer addresses a cluster sends to (every address its names resolve to)",
        ),
        healthy: gauge(
            "aap_upstream_cluster_peers_healthy",
            "Peer addresses of a cluster that pass the health check",
        ),
        ready: gauge(
            "aap_upstream_cluster_ready",
            "1 when a cluster has at least one peer address, 0 while its names do not resolve",
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
    }
});

/// How many live clients carry each cluster label: during a reload that
/// changes a cluster's settings the old and the new client coexist, and
/// the series goes only with the last one.
static LABEL_USERS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Default::default);

/// One cluster's metrics and health view, shared by its client and the
/// health observer of each peer set.
#[derive(Clone)]
pub(crate) struct ClusterStats(Arc<StatsInner>);

struct StatsInner {
    name: String,
    down: Mutex<HashSet<SocketAddr>>,
}

impl Drop for StatsInner {
    fn drop(&mut self) {
        let mut users = LABEL_USERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = users.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                users.remove(&self.name);
                let f = &*FAMILIES;
                let l = [self.name.as_str()];
                let _ = f.peers.remove_label_values(&l);
                let _ = f.healthy.remove_label_values(&l);
                let _ = f.ready.remove_label_values(&l);
                let _ = f.opened.remove_label_values(&l);
                let _ = f.reused.remove_label_values(&l);
                let _ = f.dns.remove_label_values(&l);
                let _ = f.dns_failures.remove_label_values(&l);
            }
        }
    }
}

impl ClusterStats {
    pub(crate) fn new(name: &str) -> ClusterStats {
        *LABEL_USERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_owned())
            .or_insert(0) += 1;
        let f = &*FAMILIES;
        let l = [name];
        f.peers.with_label_values(&l);
        f.healthy.with_label_values(&l);
        f.ready.with_label_values(&l);
        f.opened.with_label_values(&l);
        f.reused.with_label_values(&l);
        f.dns.with_label_values(&l);
        f.dns_failures.with_label_values(&l);
        ClusterStats(Arc::new(StatsInner {
            name: name.to_owned(),
            down: Mutex::new(HashSet::new()),
        }))
    }

    fn label(&self) -> [&str; 1] {
        [self.0.name.as_str()]
    }

    /// A new peer set of `n` addresses (presumed healthy until checked).
    pub(crate) fn peers(&self, n: usize) {
        let f = &*FAMILIES;
        self.0
            .down
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        f.peers.with_label_values(&self.label()).set(n as i64);
        f.healthy.with_label_values(&self.label()).set(n as i64);
        f.ready
            .with_label_values(&self.label())
            .set(i64::from(n > 0));
    }

    pub(crate) fn connected(&self, reused: bool) {
        let f = &*FAMILIES;
        if reused { &f.reused } else { &f.opened }
            .with_label_values(&self.label())
            .inc();
    }

    /// One host-name lookup and whether it failed.
    pub(crate) fn resolved(&self, failed: bool) {
        let f = &*FAMILIES;
        f.dns.with_label_values(&self.label()).inc();
        if failed {
            f.dns_failures.with_label_values(&self.label()).inc();
        }
    }

    fn health(&self, addr: SocketAddr, healthy: bool, active: &[SocketAddr]) {
        let mut down = self.0.down.lock().unwrap_or_else(|e| e.into_inner());
        if healthy {
            down.remove(&addr);
        } else {
            down.insert(addr);
        }
        let up = active.iter().filter(|a| !down.contains(a)).count();
        FAMILIES
            .healthy
            .with_label_values(&self.label())
            .set(up as i64);
    }
}

/// Logs health transitions reported by the load balancer's health check
/// and sets the `aap_upstream_up` gauge and the cluster's healthy count.
pub(super) struct HealthLog {
    stats: ClusterStats,
    active: Vec<SocketAddr>,
}

impl HealthLog {
    pub(super) fn new(stats: ClusterStats, active: Vec<SocketAddr>) -> HealthLog {
        HealthLog { stats, active }
    }
}

#[async_trait::async_trait]
impl pingora::lb::health_check::HealthObserve for HealthLog {
    async fn observe(&self, target: &pingora::lb::Backend, healthy: bool) {
        crate::metrics::peer_health(&target.addr.to_string(), healthy);
        if let Some(a) = target.addr.as_inet() {
            self.stats.health(*a, healthy, &self.active);
        }
        if healthy {
            tracing::info!(peer = %target.addr, healthy, "upstream peer health changed");
        } else {
            tracing::warn!(peer = %target.addr, healthy, "upstream peer health changed");
        }
    }
}

impl Client {
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
        let table = self.table.load();
        let n = table.active.len();
        let index =
            |b: &pingora::lb::Backend| b.addr.as_inet().and_then(|a| table.by_addr.get(a).copied());
        let healthy = table.lb.select_with(b"", n * 2 + 1, |b, healthy| {
            healthy
                && index(b).is_some_and(|i| !tried.contains(&i))
                && !b.addr.as_inet().is_some_and(|a| self.cooling(a))
        });
        if let Some(i) = healthy.as_ref().and_then(index) {
            return Some(i);
        }
        let fallback = table.lb.select_with(b"", n * 2 + 1, |b, _| {
            index(b).is_some_and(|i| !tried.contains(&i))
        });
        fallback
            .as_ref()
            .and_then(index)
            .or_else(|| table.active.iter().copied().find(|i| !tried.contains(i)))
    }
}
