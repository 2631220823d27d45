//! A tenant's access-token check: its `Authenticator` and where the JWKS comes from (a file, or a
//! URL fetched through a pooled client of the cluster registry).

use crate::auth::Authenticator;
use crate::config::{Config, TenantConfig};
use crate::upstream::client::PeerSpec;
use crate::upstream::cluster::Registry;
use std::sync::Arc;

/// The tenant's authenticator (`[tenants.auth]`), none without one.
pub(super) fn authenticator(
    config: &Config,
    t: &TenantConfig,
    clusters: &Registry,
) -> Result<Option<Arc<Authenticator>>, String> {
    let Some(a) = &t.auth else {
        return Ok(None);
    };
    let keys = key_source(config, a, clusters)?;
    Ok(Some(Arc::new(Authenticator::new(a.clone(), keys)?)))
}

/// The peer and path of an `auth.jwks_url`.
fn jwks_peer(url: &str) -> Result<(PeerSpec, String), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("auth.jwks_url: not an absolute URL")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    let peer = PeerSpec::parse(&format!("{scheme}://{host}"))
        .map_err(|e| format!("auth.jwks_url: {e}"))?;
    Ok((peer, path))
}

/// The JWKS source of a tenant: a file, or a URL fetched through the same
/// pooled Pingora client the upstream backends use.
fn key_source(
    config: &Config,
    a: &crate::auth::AuthConfig,
    clusters: &Registry,
) -> Result<crate::auth::KeySource, String> {
    match (&a.jwks_file, &a.jwks_url) {
        (Some(f), None) => Ok(crate::auth::KeySource::File(config.resolve(f))),
        (None, Some(url)) => {
            let (peer, path) = jwks_peer(url)?;
            let scheme = if peer.tls { "https" } else { "http" };
            // An unnamed cluster of its own: JWKS hosts share nothing with
            // the backends' pools, and identical ones share one client.
            let client = clusters
                .client(&crate::config::ClusterConfig {
                    name: String::new(),
                    peers: vec![format!("{scheme}://{}:{}", peer.host, peer.port)],
                    connect_timeout_ms: 2_000,
                    request_timeout_ms: 5_000,
                    health_check_interval_ms: 30_000,
                    pool_size: 4,
                    pool_idle_timeout_secs: 30,
                    dns_refresh_secs: 60,
                })
                .map_err(|e| format!("auth.jwks_url: {e}"))?;
            Ok(crate::auth::KeySource::Url(Box::new(
                crate::upstream::client::JwksOverClient { client, path },
            )))
        }
        _ => Err("auth: set exactly one of jwks_file and jwks_url".into()),
    }
}
