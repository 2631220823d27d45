//! Building one tenant: its fingerprint (config, upstream cluster settings, certificate stamps,
//! shared settings), then the unit whole, or kept as it was when the fingerprint is unchanged.

use super::shared::Shared;
use super::{auth, backend, bucket, endpoint, RelayTenant, Serve, TenantUnit};
use crate::backend::Backend;
use crate::config::{BackendConfig, Config, TenantConfig};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Why a tenant (or the generation it belongs to) could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(pub String);

/// The settings of a tenant's upstream cluster (its named `[[clusters]]`
/// entry or its inline peers), as text: a cluster changed in the main config
/// rebuilds the tenants naming it. Nothing is looked up (the cluster's
/// client resolves its names in the background).
fn upstream_key(config: &Config, t: &TenantConfig) -> String {
    format!("{:?}", config.cluster_of(&t.backend))
}

/// Stamps of the tenant's certificate files: a replaced certificate
/// changes the fingerprint, so a reload rebuilds the tenant.
fn cert_stamps(config: &Config, t: &TenantConfig) -> String {
    let Some(tls) = &t.tls else {
        return String::new();
    };
    format!(
        "{:?}{:?}",
        crate::file_stamp::stamp(&config.resolve(&tls.cert_file)),
        crate::file_stamp::stamp(&config.resolve(&tls.key_file))
    )
}

fn fingerprint(shared: &Shared<'_>, t: &TenantConfig, addrs: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(shared.key.as_bytes());
    h.update([0]);
    // `Debug` of a config shows each secret as a keyed tag (never the
    // value), which differs when the value does.
    h.update(format!("{t:?}").as_bytes());
    h.update([0]);
    h.update(addrs.as_bytes());
    h.update([0]);
    h.update(cert_stamps(shared.config, t).as_bytes());
    h.finalize().into()
}

/// Build one tenant, or keep `before` whole when its fingerprint is the
/// same. A changed tenant still keeps what must outlive a change when it
/// can: the backend (lead log, cursor key, pool) while the backend config
/// and its cluster settings are unchanged, and legacy sessions.
///
/// Building an embedded backend stages its lead outbox's new sinks and
/// policy (`Outboxes::attach`): the caller commits them once the
/// generation is served, or discards them.
pub(in crate::gateway) fn build(
    t: TenantConfig,
    file: Option<String>,
    shared: &Shared<'_>,
    before: Option<&Arc<TenantUnit>>,
) -> Result<Arc<TenantUnit>, BuildError> {
    let config = shared.config;
    let addrs = upstream_key(config, &t);
    let fp = fingerprint(shared, &t, &addrs);
    if let Some(b) = before.filter(|b| b.fingerprint == fp && b.file == file) {
        return Ok(b.clone());
    }
    let err = |m: String| BuildError(format!("tenant {}: {m}", t.id));
    let same_backend = before.filter(|b| {
        shared.state_kept
            && b.upstream == addrs
            && format!("{:?}", b.config.backend) == format!("{:?}", t.backend)
    });
    let auth = auth::authenticator(config, &t, &shared.platform.clusters).map_err(err)?;
    let cert = match &t.tls {
        Some(tls) => Some(Arc::new(
            crate::tls::load_pair(
                &config.resolve(&tls.cert_file),
                &config.resolve(&tls.key_file),
            )
            .map_err(|e| err(format!("tls: {e}")))?,
        )),
        None => None,
    };
    let (serve, docs) = if let BackendConfig::Relay(r) = &t.backend {
        let kept = same_backend
            .filter(|b| b.config.session_idle_secs == t.session_idle_secs)
            .and_then(|b| match &b.serve {
                Serve::Relay(m) => Some(m.relay.clone()),
                Serve::Endpoint(_) => None,
            });
        let relay = match kept {
            Some(r) => r,
            None => backend::relay(&t, r, shared).map_err(err)?,
        };
        let rate = &t.rate_limit;
        let serve = Serve::Relay(Arc::new(RelayTenant {
            tenant: t.id.clone(),
            allowed_origins: t.allowed_origins.clone(),
            auth,
            tenant_bucket: bucket(rate.tenant_per_second, rate.tenant_burst),
            caller_bucket: bucket(rate.caller_per_second, rate.caller_burst),
            relay,
        }));
        (serve, None)
    } else {
        let kept: Option<Arc<dyn Backend>> = same_backend
            .and_then(|b| b.endpoint())
            .map(|ep| ep.contract.backend.clone());
        let backend = match kept {
            Some(b) => b,
            None => backend::endpoint_backend(&t, shared).map_err(err)?,
        };
        let before_ep = before.and_then(|b| b.endpoint());
        let (ep, docs) = endpoint::build(&t, shared, backend, auth, before_ep).map_err(err)?;
        (Serve::Endpoint(Arc::new(ep)), docs)
    };
    Ok(Arc::new(TenantUnit {
        config: t,
        file,
        fingerprint: fp,
        serve,
        docs,
        cert,
        upstream: addrs,
    }))
}
