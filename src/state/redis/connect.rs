//! Reaching Redis: one server or a Cluster, plain or TLS, from `state.redis_url` and
//! `state.redis_ca_file`, with the configured connect and command timeouts.
//!
//! `redis_url` forms: `redis://[user:password@]host:port[/db]` and
//! `rediss://…` (TLS) for one server (or a primary behind a proxy);
//! `redis+cluster://[user:password@]host:port[,host:port…]` and
//! `rediss+cluster://…` for a Redis Cluster, listing seed nodes (any
//! reachable one is enough: the client reads the slot map from it and
//! follows `MOVED`/`ASK` and failovers).

use crate::config::Config;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, TlsCertificates, Value};
use std::path::PathBuf;
use std::time::Duration;

/// Everything the Redis store is built from (`[state]`).
#[derive(Clone)]
pub struct RedisOptions {
    /// The URL as configured (a secret: may hold a password).
    pub url: String,
    /// `state.redis_ca_file`, resolved against the config directory.
    pub ca_file: Option<PathBuf>,
    pub prefix: String,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may hold a password.
        f.debug_struct("RedisOptions")
            .field("prefix", &self.prefix)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl RedisOptions {
    pub fn from_config(c: &Config) -> RedisOptions {
        let s = &c.state;
        RedisOptions {
            url: s
                .redis_url
                .as_ref()
                .map(|u| u.expose().to_owned())
                .unwrap_or_default(),
            ca_file: s.redis_ca_file.as_ref().map(|p| c.resolve(p)),
            prefix: s.redis_prefix.clone(),
            connect_timeout: Duration::from_millis(s.redis_connect_timeout_ms),
            command_timeout: Duration::from_millis(s.redis_command_timeout_ms),
        }
    }

    /// Redis Cluster (`redis+cluster://`, `rediss+cluster://`).
    pub fn is_cluster(&self) -> bool {
        self.url.starts_with("redis+cluster://") || self.url.starts_with("rediss+cluster://")
    }
}

/// A client not yet connected (connections are opened on first use, so a
/// gateway starts while Redis is down and serves once it is back).
// One per store, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Target {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// The seed URLs of a cluster URL: `redis+cluster://auth@h1:p1,h2:p2/` →
/// `redis://auth@h1:p1/`, `redis://auth@h2:p2/`. Errors never quote the URL.
pub(super) fn cluster_seeds(url: &str) -> Result<Vec<String>, String> {
    let (scheme, rest) = url.split_once("://").ok_or("not a redis+cluster:// URL")?;
    let seed_scheme = match scheme {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return Err("not a redis+cluster:// URL".into()),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    if hosts.contains(['/', '?', '#']) {
        return Err("a cluster URL names seed nodes only (no database, no query)".into());
    }
    let seeds: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("{seed_scheme}://{auth}{h}/"))
        .collect();
    if seeds.is_empty() {
        return Err("list at least one seed node as host:port".into());
    }
    Ok(seeds)
}

fn certificates(o: &RedisOptions) -> Result<Option<TlsCertificates>, String> {
    let Some(path) = &o.ca_file else {
        return Ok(None);
    };
    let pem = std::fs::read(path)
        .map_err(|e| format!("state.redis_ca_file: cannot read {}: {e}", path.display()))?;
    Ok(Some(TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}

/// The client for `o` (checks the URL and the CA file; connects nothing).
pub(super) fn target(o: &RedisOptions) -> Result<Target, String> {
    let bad = |e: redis::RedisError| format!("state.redis_url: invalid: {}", e.category());
    let certs = certificates(o)?;
    if o.is_cluster() {
        let seeds = cluster_seeds(&o.url).map_err(|e| format!("state.redis_url: {e}"))?;
        let mut b = ClusterClientBuilder::new(seeds)
            .connection_timeout(o.connect_timeout)
            .response_timeout(o.command_timeout);
        if let Some(c) = certs {
            b = b.certs(c);
        }
        return b.build().map(Target::Cluster).map_err(|e| {
            // A CA file that is not PEM is reported as such, not as the URL.
            if o.ca_file.is_some() && e.kind() == redis::ErrorKind::InvalidClientConfig {
                format!(
                    "state.redis_ca_file: not a usable PEM CA file ({})",
                    e.category()
                )
            } else {
                bad(e)
            }
        });
    }
    match certs {
        Some(c) => redis::Client::build_with_tls(o.url.as_str(), c),
        None => redis::Client::open(o.url.as_str()),
    }
    .map(Target::Single)
    .map_err(bad)
}

impl Target {
    pub async fn connect(&self, o: &RedisOptions) -> redis::RedisResult<Conn> {
        match self {
            Target::Single(c) => {
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(o.connect_timeout))
                    .set_response_timeout(Some(o.command_timeout))
                    .set_number_of_retries(2);
                c.get_connection_manager_with_config(cfg)
                    .await
                    .map(Conn::Single)
            }
            Target::Cluster(c) => c.get_async_connection().await.map(Conn::Cluster),
        }
    }
}

/// One connection handle (cheap to clone) to one server or to a cluster.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_become_seed_urls() {
        assert_eq!(
            cluster_seeds("redis+cluster://10.0.0.1:7000,10.0.0.2:7001/").unwrap(),
            ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7001/"]
        );
        assert_eq!(
            cluster_seeds("rediss+cluster://u:p%40ss@h1:6379,h2:6379").unwrap(),
            ["rediss://u:p%40ss@h1:6379/", "rediss://u:p%40ss@h2:6379/"]
        );
        for bad in [
            "redis://h:1/",
            "redis+cluster://",
            "redis+cluster://h:1/0",
            "redis+cluster://secret@h:1/?x=1",
        ] {
            let e = cluster_seeds(bad).unwrap_err();
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
