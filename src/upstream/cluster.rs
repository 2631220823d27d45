//! Upstream clusters: the registry of pooled clients (one per process, in its `Platform`), one per distinct cluster
//! setting, shared by every tenant naming it and kept across reloads; background DNS per cluster.
//!
//! A tenant's backend names a `[[clusters]]` entry, or carries inline `peers`; inline settings
//! are an unnamed cluster called `inline-<hash of the settings>`, so tenants with identical inline
//! settings share one client too (a config of ten thousand tenants written with inline peers gets
//! the same one pool as one written with a cluster). The registry holds clients weakly, keyed by
//! the whole [`ClusterConfig`]: a reload whose cluster settings are unchanged gets the very same
//! client (its pool, health loop and resolved addresses); a changed or removed cluster's client goes
//! when the last backend using it is dropped, and its health and DNS loops stop with it.
//!
//! Host names are never looked up while a config is validated or built: a cluster whose peers
//! are host names starts with no address and a background task resolves them, then again every
//! `dns_refresh_secs` (sooner, backing off from 1 s, while a name fails). Every address a name
//! resolves to is a peer; a name that stops resolving keeps its last good addresses. The lookups
//! use tokio's `lookup_host` (the system resolver, so `/etc/hosts` and nsswitch apply as for every
//! other program) on a runtime of the registry's own whose blocking pool is capped at
//! [`LOOKUP_THREADS`], each lookup bounded by [`LOOKUP_TIMEOUT`]. hickory-resolver was not chosen:
//! it reads only `/etc/resolv.conf` and `/etc/hosts`, not nsswitch, and would be one more resolver
//! to configure for the same answers.

use crate::config::ClusterConfig;
use crate::series::ClusterMetrics;
use crate::upstream::client::{Client, ClientConfig, PeerAddr, PeerSpec};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// How long one host-name lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Blocking threads the lookups may occupy at once (getaddrinfo blocks).
const LOOKUP_THREADS: usize = 4;
/// First retry delay after a failed lookup (doubling up to `dns_refresh_secs`).
const RETRY_FIRST: Duration = Duration::from_secs(1);

/// One cluster in the registry.
struct Entry {
    client: Weak<Client>,
    /// Why the cluster has no address (the last lookup failure), if so.
    error: Arc<Mutex<Option<String>>>,
}

/// The clients of every live cluster, by their settings.
pub struct Registry {
    online: bool,
    entries: Mutex<HashMap<ClusterConfig, Entry>>,
    /// The per-cluster series every client of this registry records.
    metrics: Arc<ClusterMetrics>,
    /// The runtime the health checks and lookups run on (online only; see
    /// [`Registry::background`]).
    background: OnceLock<Option<tokio::runtime::Handle>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("online", &self.online)
            .finish_non_exhaustive()
    }
}

/// A cluster's state for `/readyz`.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    pub name: String,
    pub ready: bool,
    pub peers: usize,
    pub reason: Option<String>,
}

/// The name an inline (unnamed) cluster gets: stable across reloads and
/// tenant order, the same for identical settings.
pub fn inline_name(c: &ClusterConfig) -> String {
    use sha2::{Digest, Sha256};
    let key = format!(
        "{:?}|{}|{}|{}|{}|{}|{}",
        c.peers,
        c.connect_timeout_ms,
        c.request_timeout_ms,
        c.health_check_interval_ms,
        c.pool_size,
        c.pool_idle_timeout_secs,
        c.dns_refresh_secs
    );
    format!(
        "inline-{}",
        &hex::encode(Sha256::digest(key.as_bytes()))[..12]
    )
}

impl Registry {
    /// The registry the running gateway builds its backends from: its
    /// clients connect, and host names are looked up in the background.
    pub fn online(metrics: Arc<ClusterMetrics>) -> Registry {
        Registry {
            online: true,
            entries: Mutex::new(HashMap::new()),
            metrics,
            background: OnceLock::new(),
        }
    }

    /// A registry that never connects nor looks a name up (`check`,
    /// `catalog`, `publish`): its clients have the IP-literal peers only.
    pub fn offline() -> Registry {
        Registry {
            online: false,
            entries: Mutex::new(HashMap::new()),
            metrics: Arc::new(ClusterMetrics::new()),
            background: OnceLock::new(),
        }
    }

    /// Whether this registry connects and looks names up (not an
    /// [`Registry::offline`] one).
    pub fn is_online(&self) -> bool {
        self.online
    }

    /// The runtime the health checks and lookups run on: one thread of its
    /// own, started on first use (before Pingora's runtimes exist at start).
    fn background(&self) -> Option<tokio::runtime::Handle> {
        self.background
            .get_or_init(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .max_blocking_threads(LOOKUP_THREADS)
                    .thread_name("aap-clusters")
                    .build();
                let rt = match rt {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start the upstream cluster runtime");
                        return None;
                    }
                };
                let handle = rt.handle().clone();
                let started = std::thread::Builder::new()
                    .name("aap-clusters".into())
                    .spawn(move || rt.block_on(std::future::pending::<()>()));
                match started {
                    Ok(_) => Some(handle),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start the upstream cluster thread");
                        None
                    }
                }
            })
            .clone()
    }

    /// The client of cluster `c` (an unnamed one gets [`inline_name`]): the
    /// live one with these exact settings, or a new one.
    pub fn client(&self, c: &ClusterConfig) -> Result<Arc<Client>, String> {
        let mut c = c.clone();
        if c.name.is_empty() {
            c.name = inline_name(&c);
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = entries.get(&c).and_then(|e| e.client.upgrade()) {
            return Ok(client);
        }
        entries.retain(|_, e| e.client.strong_count() > 0);
        let specs = c
            .peers
            .iter()
            .map(|p| PeerSpec::parse(p).map_err(|e| format!("peers: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let literals: Vec<PeerAddr> = specs
            .iter()
            .filter_map(|p| {
                p.literal().map(|addr| PeerAddr {
                    tls: p.tls,
                    host: p.host.clone(),
                    port: p.port,
                    addr,
                })
            })
            .collect();
        let names = specs.iter().any(|p| p.literal().is_none());
        let bg = if self.online { self.background() } else { None };
        let client = Arc::new(Client::new(ClientConfig {
            cluster: c.name.clone(),
            // With names, the first lookup installs literals and names together.
            peers: if names { Vec::new() } else { literals },
            connect_timeout: Duration::from_millis(c.connect_timeout_ms),
            request_timeout: Duration::from_millis(c.request_timeout_ms),
            health_check_interval: Duration::from_millis(c.health_check_interval_ms),
            pool_size: c.pool_size,
            idle_timeout: Duration::from_secs(c.pool_idle_timeout_secs),
            background: bg.clone(),
            awaits_resolution: names && bg.is_some(),
            metrics: self.metrics.clone(),
        })?);
        let error = Arc::new(Mutex::new(None));
        if names {
            if let Some(bg) = bg {
                bg.spawn(refresh(
                    Arc::downgrade(&client),
                    specs,
                    Duration::from_secs(c.dns_refresh_secs),
                    error.clone(),
                ));
            } else if self.online {
                *error.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some("the resolver could not be started".into());
            }
        }
        entries.insert(
            c,
            Entry {
                client: Arc::downgrade(&client),
                error,
            },
        );
        Ok(client)
    }

    /// Every live cluster, by name.
    pub fn status(&self) -> Vec<ClusterStatus> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<ClusterStatus> = entries
            .iter()
            .filter_map(|(c, e)| {
                let client = e.client.upgrade()?;
                let peers = client.peer_count();
                Some(ClusterStatus {
                    name: c.name.clone(),
                    ready: peers > 0,
                    peers,
                    reason: (peers == 0).then(|| {
                        e.error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone()
                            .unwrap_or_else(|| "its peer names are being resolved".into())
                    }),
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// One lookup of `host:port`: every address, in the resolver's order,
/// without duplicates.
async fn lookup(host: String, port: u16) -> Result<Vec<SocketAddr>, String> {
    let found = tokio::time::timeout(
        LOOKUP_TIMEOUT,
        tokio::net::lookup_host((host.as_str(), port)),
    )
    .await;
    match found {
        Err(_) => Err(format!(
            "cannot resolve {host}: no answer within {} s",
            LOOKUP_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("cannot resolve {host}: {e}")),
        Ok(Ok(addrs)) => {
            let mut v: Vec<SocketAddr> = Vec::new();
            for a in addrs {
                if !v.contains(&a) {
                    v.push(a);
                }
            }
            if v.is_empty() {
                Err(format!("cannot resolve {host}: no address"))
            } else {
                Ok(v)
            }
        }
    }
}

/// The background resolution of one cluster, until its client is dropped.
async fn refresh(
    client: Weak<Client>,
    specs: Vec<PeerSpec>,
    every: Duration,
    error: Arc<Mutex<Option<String>>>,
) {
    // Last good addresses of each name.
    let mut known: HashMap<(String, u16), Vec<SocketAddr>> = HashMap::new();
    let mut retry = RETRY_FIRST;
    loop {
        if client.strong_count() == 0 {
            return;
        }
        let mut lookups = tokio::task::JoinSet::new();
        let mut asked = std::collections::HashSet::new();
        for p in &specs {
            let key = (p.bare_host().to_owned(), p.port);
            if p.literal().is_none() && asked.insert(key.clone()) {
                lookups.spawn(async move {
                    let got = lookup(key.0.clone(), key.1).await;
                    (key, got)
                });
            }
        }
        let mut failures = Vec::new();
        let mut outcomes = Vec::new();
        while let Some(joined) = lookups.join_next().await {
            match joined {
                Ok((key, Ok(addrs))) => {
                    outcomes.push(false);
                    known.insert(key, addrs);
                }
                Ok((_, Err(why))) => {
                    outcomes.push(true);
                    failures.push(why);
                }
                Err(e) => {
                    outcomes.push(true);
                    failures.push(format!("the lookup task failed: {e}"));
                }
            }
        }
        let Some(c) = client.upgrade() else { return };
        for failed in outcomes {
            c.stats.resolved(failed);
        }
        let mut peers: Vec<PeerAddr> = Vec::new();
        for p in &specs {
            let addrs = match p.literal() {
                Some(a) => vec![a],
                None => known
                    .get(&(p.bare_host().to_owned(), p.port))
                    .cloned()
                    .unwrap_or_default(),
            };
            for addr in addrs {
                if !peers.iter().any(|o| o.addr == addr) {
                    peers.push(PeerAddr {
                        tls: p.tls,
                        host: p.host.clone(),
                        port: p.port,
                        addr,
                    });
                }
            }
        }
        if let Err(e) = c.set_peers(peers) {
            failures.push(e);
        }
        c.resolution_attempted();
        let cluster = c.cluster().to_owned();
        drop(c);
        let wait = if failures.is_empty() {
            retry = RETRY_FIRST;
            *error.lock().unwrap_or_else(|e| e.into_inner()) = None;
            every
        } else {
            tracing::warn!(cluster = %cluster, error = %failures[0], "upstream cluster: a peer name did not resolve; retrying");
            *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(failures.join("; "));
            let w = retry.min(every);
            retry = (retry * 2).min(every);
            w
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A cluster of `peers` with short timeouts and no health checks in a test's time
    /// (also the client's tests, `upstream::client::health`).
    pub(crate) fn cluster(name: &str, peers: &[&str]) -> ClusterConfig {
        ClusterConfig {
            name: name.into(),
            peers: peers.iter().map(|p| p.to_string()).collect(),
            connect_timeout_ms: 1000,
            request_timeout_ms: 1000,
            health_check_interval_ms: 60_000,
            pool_size: 8,
            pool_idle_timeout_secs: 30,
            dns_refresh_secs: 30,
        }
    }

    #[test]
    fn same_settings_share_one_client_and_a_change_makes_another() {
        let r = Registry::offline();
        let a = r.client(&cluster("c", &["http://127.0.0.1:1"])).unwrap();
        let b = r.client(&cluster("c", &["http://127.0.0.1:1"])).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let other = r.client(&cluster("c", &["http://127.0.0.1:2"])).unwrap();
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(a.peer_count(), 1);
        // Offline, a name has no address and nothing is looked up.
        let named = r.client(&cluster("n", &["http://peer.invalid:1"])).unwrap();
        assert_eq!(named.peer_count(), 0);
        let inline = r.client(&cluster("", &["http://127.0.0.1:1"])).unwrap();
        assert!(inline.cluster().starts_with("inline-"));
        drop((a, b));
        assert!(r.status().iter().all(|s| s.name != "c" || s.peers == 1));
    }
}
