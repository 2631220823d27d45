//! Peer health and choice: the load balancer's health observer, the passive
//! cool-down after a refused connection, picking the next peer to try, and the
//! per-cluster metrics (`aap_upstream_cluster_*{cluster}`).

use super::Client;
use crate::series::ClusterMetrics;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a peer that refused a connection is skipped.
const FAIL_COOL_DOWN: Duration = Duration::from_secs(3);

/// One cluster's metrics and health view, shared by its client and the
/// health observer of each peer set.
#[derive(Clone)]
pub(crate) struct ClusterStats(Arc<StatsInner>);

struct StatsInner {
    name: String,
    down: Mutex<HashSet<SocketAddr>>,
    metrics: Arc<ClusterMetrics>,
}

impl Drop for StatsInner {
    fn drop(&mut self) {
        let f = &*self.metrics;
        let mut users = f.label_users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = users.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                users.remove(&self.name);
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
    pub(crate) fn new(name: &str, metrics: Arc<ClusterMetrics>) -> ClusterStats {
        let f = &*metrics;
        *f.label_users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_owned())
            .or_insert(0) += 1;
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
            metrics: metrics.clone(),
        }))
    }

    fn label(&self) -> [&str; 1] {
        [self.0.name.as_str()]
    }

    /// A new peer set of `n` addresses (presumed healthy until checked).
    pub(crate) fn peers(&self, n: usize) {
        let f = &*self.0.metrics;
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
        let f = &*self.0.metrics;
        if reused { &f.reused } else { &f.opened }
            .with_label_values(&self.label())
            .inc();
    }

    /// One host-name lookup and whether it failed.
    pub(crate) fn resolved(&self, failed: bool) {
        let f = &*self.0.metrics;
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
        self.0
            .metrics
            .healthy
            .with_label_values(&self.label())
            .set(up as i64);
    }
}

/// The load balancer's health check of each peer: a TCP connection opened
/// within the connect timeout. Its transitions are logged and set the
/// `aap_upstream_up` gauge and the cluster's healthy count.
///
/// Pingora's `TcpHealthCheck` timed its connect with `pingora_timeout`, whose
/// first use starts a process-wide timer thread that then wakes 100 times a
/// second for the life of the process (about 1 ms of CPU a second while idle,
/// and most of the context switches at a low request rate); this times it on
/// the runtime's own timer, as the client's connects are.
pub(super) struct TcpProbe {
    stats: ClusterStats,
    active: Vec<SocketAddr>,
    timeout: Duration,
}

impl TcpProbe {
    pub(super) fn new(stats: ClusterStats, active: Vec<SocketAddr>, timeout: Duration) -> TcpProbe {
        TcpProbe {
            stats,
            active,
            timeout,
        }
    }
}

#[async_trait::async_trait]
impl pingora::lb::health_check::HealthCheck for TcpProbe {
    async fn check(&self, target: &pingora::lb::Backend) -> pingora::Result<()> {
        use pingora::{Error, ErrorType};
        let Some(addr) = target.addr.as_inet().copied() else {
            return Err(Error::explain(
                ErrorType::ConnectError,
                "not an internet address",
            ));
        };
        match tokio::time::timeout(self.timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Error::because(
                ErrorType::ConnectError,
                "health check connect",
                e,
            )),
            Err(_) => Err(Error::explain(
                ErrorType::ConnectTimedout,
                "health check connect timed out",
            )),
        }
    }

    async fn health_status_change(&self, target: &pingora::lb::Backend, healthy: bool) {
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

    fn health_threshold(&self, _success: bool) -> usize {
        // One check flips the state either way (as `TcpHealthCheck`'s defaults did).
        1
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
        // One peer (the usual backend): both passes below choose it unless it was tried, healthy
        // or not, so the load balancer's selection (an iterator, a readiness lookup hashing the
        // address) is skipped.
        if let [only] = table.active[..] {
            return (!tried.contains(&only)).then_some(only);
        }
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

#[cfg(test)]
mod tests {
    use crate::upstream::cluster::tests::cluster;
    use crate::upstream::cluster::Registry;

    #[test]
    fn a_lone_peer_is_picked_until_tried_cooling_or_not() {
        let r = Registry::offline();
        let one = r.client(&cluster("one", &["http://127.0.0.1:1"])).unwrap();
        assert_eq!(one.pick(&[]), Some(0));
        assert_eq!(one.pick(&[0]), None);
        one.mark_failed("127.0.0.1:1".parse().unwrap());
        assert_eq!(one.pick(&[]), Some(0));
        assert_eq!(one.pick(&[0]), None);
        // Two peers go through the load balancer: each in turn, then none.
        let two = r
            .client(&cluster(
                "two",
                &["http://127.0.0.1:1", "http://127.0.0.1:2"],
            ))
            .unwrap();
        let first = two.pick(&[]).unwrap();
        assert_eq!(two.pick(&[first]), Some(1 - first));
        assert_eq!(two.pick(&[0, 1]), None);
    }
}
