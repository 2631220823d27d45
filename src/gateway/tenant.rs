//! One tenant, built on its own: a [`TenantUnit`] (endpoint or relay, backend, authenticator,
//! discovery documents, SNI certificate) keyed by a fingerprint of its config, and the checks across tenants.
//!
//! A generation holds units and cheap routing maps made from them. A reload or a tenant file
//! that leaves a tenant's fingerprint unchanged keeps its unit (every `Arc` in it) as it was.

use crate::aap::catalog::{CatalogInterner, CatalogOptions};
use crate::aap::contract::{Contract, ContractConfig};
use crate::aap::cursor::CursorCodec;
use crate::aap::publish::{self, Documents};
use crate::aap::schemas::SchemaSet;
use crate::aap::skill::Skill;
use crate::auth::Authenticator;
use crate::backend::{default_capabilities, Backend};
use crate::config::{BackendConfig, Config, TenantConfig};
use crate::exchange::HttpRequest;
use crate::mcp::jsonrpc::RpcError;
use crate::mcp::server::Endpoint;
use crate::mcp::session::SessionStore;
use crate::state::{Bucket, SharedState};
use crate::upstream::a2a::{A2aUpstream, A2aUpstreamConfig};
use crate::upstream::client::{Client, PeerSpec};
use crate::upstream::cluster::Registry;
use crate::upstream::embedded::{EmbeddedConfig, EmbeddedDealer};
use crate::upstream::inventory::source::SourceSpec;
use crate::upstream::mcp::{McpUpstream, McpUpstreamConfig, RevisionMode};
use crate::upstream::relay::{Relay, RelayConfig};
use pingora::tls::sign::CertifiedKey;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a tenant serves: the AAP endpoint (MCP and A2A) or a transparent relay.
#[derive(Debug, Clone)]
pub enum Serve {
    Endpoint(Arc<Endpoint>),
    Relay(Arc<RelayTenant>),
}

/// A tenant that relays every MCP request to one upstream server.
#[derive(Debug)]
pub struct RelayTenant {
    pub tenant: String,
    pub allowed_origins: Vec<String>,
    pub auth: Option<Arc<Authenticator>>,
    pub tenant_bucket: Option<Bucket>,
    pub caller_bucket: Option<Bucket>,
    pub relay: Arc<Relay>,
}

impl RelayTenant {
    /// The refusal the head alone decides for a relay tenant: Origin, then
    /// the relay's HTTP method and media checks (the same order as
    /// `Endpoint::head_refusal`).
    pub fn head_refusal(&self, req: &HttpRequest) -> Option<RpcError> {
        if !crate::mcp::server::origin_allowed(&self.allowed_origins, req) {
            return Some(crate::mcp::server::origin_refused());
        }
        self.relay.head_refusal(req)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(pub String);

/// Everything built for one tenant.
pub struct TenantUnit {
    /// The tenant's effective config.
    pub config: TenantConfig,
    /// The tenant file it came from (its name in `tenants_dir`); `None`
    /// for a `[[tenants]]` entry of the main config.
    pub file: Option<String>,
    /// SHA-256 over the tenant's config, its upstream cluster's settings and
    /// the shared settings it depends on: equal means "nothing to rebuild".
    pub fingerprint: [u8; 32],
    pub serve: Serve,
    /// The discovery documents (with a `public_url`).
    pub docs: Option<Arc<Documents>>,
    /// The certificate for the tenant's host names (`[tenants.tls]`).
    pub cert: Option<Arc<CertifiedKey>>,
    /// The upstream cluster settings the backend was built with (what a
    /// rebuild compares; see [`upstream_key`]).
    upstream: String,
}

impl std::fmt::Debug for TenantUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantUnit")
            .field("id", &self.config.id)
            .field("file", &self.file)
            .field("serve", &self.serve)
            .finish_non_exhaustive()
    }
}

impl TenantUnit {
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// Where the tenant is defined, for messages: its file, or the main config.
    pub fn origin(&self) -> String {
        match &self.file {
            Some(f) => f.clone(),
            None => "the main config".to_owned(),
        }
    }

    pub fn endpoint(&self) -> Option<&Arc<Endpoint>> {
        match &self.serve {
            Serve::Endpoint(e) => Some(e),
            Serve::Relay(_) => None,
        }
    }
}

/// What every tenant of a generation is built against.
pub(super) struct Shared<'a> {
    pub config: &'a Config,
    pub schemas: &'a Arc<SchemaSet>,
    pub state: &'a Arc<dyn SharedState>,
    pub store: &'a Arc<dyn crate::store::LeadStore>,
    /// The state store is the previous generation's (backends may be kept).
    pub state_kept: bool,
    /// The shared settings a tenant's build reads, as text (see [`shared_key`]).
    pub key: &'a str,
    /// Where forwarding backends and JWKS URLs get their pooled clients.
    pub clusters: &'a Registry,
    /// The generation's catalogs: tenants of the same shape share one.
    pub catalogs: &'a Mutex<CatalogInterner>,
}

/// The settings outside `[[tenants]]` that a tenant's build reads: a change
/// to any of them rebuilds every tenant.
pub(super) fn shared_key(c: &Config, schemas_digest: &str) -> String {
    format!(
        "{:?}|{}|{}|{}|{}|{}|{:?}|{:?}|{:?}|{}|{}|{}|{}|{}|{}",
        c.base_dir,
        c.server.name,
        c.limits.max_body_bytes,
        c.limits.max_json_depth,
        c.state.idempotency_ttl_hours,
        schemas_digest,
        c.state_dir(),
        c.state.backend,
        c.state.redis_url,
        c.state.redis_prefix,
        c.state.redis_connect_timeout_ms,
        c.state.redis_command_timeout_ms,
        c.state.redis_wait_replicas,
        crate::store::store_key(c),
        c.state.lead_lease_ms + c.state.outbox_poll_ms * 7 + c.state.lead_retention_days * 13,
    )
}

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
/// policy (`crate::leads::outbox::attach`): the caller commits them once the
/// generation is served, or discards them.
pub(super) fn build(
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
    let auth = match &t.auth {
        Some(a) => Some(Arc::new(
            Authenticator::new(
                a.clone(),
                key_source(config, a, shared.clusters).map_err(err)?,
            )
            .map_err(err)?,
        )),
        None => None,
    };
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
    let rate = &t.rate_limit;
    if let BackendConfig::Relay(r) = &t.backend {
        let kept = same_backend
            .filter(|b| b.config.session_idle_secs == t.session_idle_secs)
            .and_then(|b| match &b.serve {
                Serve::Relay(m) => Some(m.relay.clone()),
                Serve::Endpoint(_) => None,
            });
        let relay = match kept {
            Some(r) => r,
            None => Arc::new(
                Relay::new(RelayConfig {
                    client: cluster_client(shared.clusters, config, &t.backend).map_err(err)?,
                    path: r.path.clone(),
                    bearer_token: r.bearer_token.clone(),
                    max_json_depth: config.limits.max_json_depth,
                    session_idle: Duration::from_secs(t.session_idle_secs),
                })
                .map_err(|e| err(format!("backend: {e}")))?,
            ),
        };
        let serve = Serve::Relay(Arc::new(RelayTenant {
            tenant: t.id.clone(),
            allowed_origins: t.allowed_origins.clone(),
            auth,
            tenant_bucket: bucket(rate.tenant_per_second, rate.tenant_burst),
            caller_bucket: bucket(rate.caller_per_second, rate.caller_burst),
            relay,
        }));
        return Ok(Arc::new(TenantUnit {
            config: t,
            file,
            fingerprint: fp,
            serve,
            docs: None,
            cert,
            upstream: addrs,
        }));
    }
    let state = shared.state;
    let state_dir = config.state_dir();
    let idempotency_ttl = Duration::from_secs(config.state.idempotency_ttl_hours * 3600);
    let before_ep = before.and_then(|b| b.endpoint());
    let kept_backend = same_backend
        .and_then(|b| b.endpoint())
        .map(|ep| ep.contract.backend.clone());
    let backend: Arc<dyn Backend> = match (&t.backend, kept_backend) {
        (_, Some(b)) => b,
        (BackendConfig::Embedded(e), None) => {
            let key = match &e.cursor_secret {
                Some(s) => s.expose().as_bytes().to_vec(),
                None => [
                    uuid::Uuid::new_v4().into_bytes(),
                    uuid::Uuid::new_v4().into_bytes(),
                ]
                .concat(),
            };
            let leads_file = e
                .leads_file
                .as_ref()
                .map(|p| config.resolve(p))
                .unwrap_or_else(|| state_dir.join(&t.id).join("leads.jsonl"));
            let store_use = crate::leads::outbox::StoreUse {
                store: shared.store.clone(),
                lease: Duration::from_millis(config.state.lead_lease_ms),
                poll: Duration::from_millis(config.state.outbox_poll_ms),
                idempotency_ttl,
                retention: Duration::from_secs(config.state.lead_retention_days * 86_400),
            };
            // Staged until the generation is served (see above).
            let outbox =
                crate::leads::outbox::attach(&t.id, &leads_file, store_use, &e.sinks, &e.outbox)
                    .map_err(|e| err(e.to_string()))?;
            Arc::new(
                EmbeddedDealer::load(EmbeddedConfig {
                    // Shared with every tenant naming the same source.
                    feed: SourceSpec::of_backend(e, &|p| config.resolve(p)),
                    schemas: shared.schemas.clone(),
                    dealer: config.resolve(&e.dealer),
                    leads_file,
                    store: shared.store.clone(),
                    idempotency_ttl,
                    outbox,
                    default_limit: e.default_limit,
                    max_limit: e.max_limit,
                    cursor: CursorCodec::new(&key, e.cursor_ttl_secs * 1000),
                })
                .map_err(|e| err(e.to_string()))?,
            )
        }
        (BackendConfig::Mcp(m), None) => Arc::new(
            McpUpstream::new(McpUpstreamConfig {
                client: cluster_client(shared.clusters, config, &t.backend).map_err(err)?,
                path: m.path.clone(),
                revision: match m.revision.as_str() {
                    "2026-07-28" => RevisionMode::Modern,
                    "2025-11-25" => RevisionMode::Legacy,
                    _ => RevisionMode::Auto,
                },
                bearer_token: m.bearer_token.clone(),
                capabilities: m.capabilities.clone().unwrap_or_else(default_capabilities),
                lead_key: m.lead_key,
                dedupes_leads: m.dedupes_leads,
            })
            .map_err(|e| err(format!("backend: {e}")))?,
        ),
        (BackendConfig::A2a(a), None) => Arc::new(
            A2aUpstream::new(A2aUpstreamConfig {
                client: cluster_client(shared.clusters, config, &t.backend).map_err(err)?,
                path: a.path.clone(),
                card_path: a.card_path.clone(),
                extension_uri: a.extension_uri.clone(),
                bearer_token: a.bearer_token.clone(),
                capabilities: a.capabilities.clone().unwrap_or_else(default_capabilities),
                lead_key: a.lead_key,
                dedupes_leads: a.dedupes_leads,
            })
            .map_err(|e| err(format!("backend: {e}")))?,
        ),
        // Relay tenants returned above.
        (BackendConfig::Relay(_), None) => {
            return Err(err("backend: a relay tenant has no endpoint".into()))
        }
    };
    let schemas = shared.schemas;
    let skills: Vec<Skill> = t.skills.iter().filter_map(|s| Skill::from_id(s)).collect();
    let capabilities = backend.capabilities();
    if let Err(errors) = schemas.validate_stem("inventory-capabilities", &capabilities) {
        let key = match &t.backend {
            BackendConfig::Embedded(_) => "inventory capabilities",
            _ => "backend.capabilities",
        };
        return Err(err(format!(
            "{key}: does not match inventory-capabilities.schema.json: {}",
            Value::from(errors)
        )));
    }
    let opts = CatalogOptions {
        host_compat: t.host_compat,
        idempotency_ttl,
    };
    let tools = shared
        .catalogs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(
            schemas,
            &skills,
            Some(&capabilities),
            &opts,
            t.tools_page_size,
        )
        .map_err(err)?;
    let docs = match &t.public_url {
        // From the skills and capabilities that built `tools`, so the
        // documents and tools/list cannot disagree.
        Some(url) => Some(Arc::new(
            publish::build(&publish::Tenant {
                id: &t.id,
                name: t.publish.name.as_deref(),
                description: t.publish.description.as_deref(),
                mcp_url: url,
                hosts: &t.publish.hosts,
                provider: t
                    .publish
                    .provider_name
                    .as_deref()
                    .zip(t.publish.provider_url.as_deref()),
                skills: &skills,
                capabilities: &capabilities,
                auth: t.auth.as_ref(),
                list_ttl_ms: t.list_ttl_ms,
            })
            .map_err(err)?,
        )),
        None => None,
    };
    let mut quotas = Vec::new();
    if t.quotas.lead_submit_per_hour > 0 {
        quotas.push((
            Skill::LeadSubmit,
            Bucket {
                capacity: t.quotas.lead_submit_per_hour,
                per: Duration::from_secs(3600),
            },
        ));
    }
    let contract = Contract {
        cfg: ContractConfig {
            tenant: t.id.clone(),
            idempotency_ttl,
            quotas,
        },
        schemas: schemas.clone(),
        backend,
        state: state.clone(),
    };
    let endpoint = Endpoint {
        tenant: t.id.clone(),
        path: t.path.clone(),
        allowed_origins: t.allowed_origins.clone(),
        sessions: t.legacy_sessions.then(|| {
            before_ep
                .and_then(|ep| ep.sessions.clone())
                .unwrap_or_else(|| {
                    Arc::new(SessionStore::new(
                        Duration::from_secs(t.session_idle_secs),
                        100_000,
                    ))
                })
        }),
        tools,
        drop_nulls: t.host_compat.drops_nulls(),
        page_size: t.tools_page_size,
        list_ttl_ms: t.list_ttl_ms,
        instructions: t.instructions.clone(),
        contract: Arc::new(contract),
        server_name: config.server.name.clone(),
        max_body_bytes: config.limits.max_body_bytes,
        max_json_depth: config.limits.max_json_depth,
        auth,
        tenant_bucket: bucket(rate.tenant_per_second, rate.tenant_burst),
        caller_bucket: bucket(rate.caller_per_second, rate.caller_burst),
    };
    Ok(Arc::new(TenantUnit {
        config: t,
        file,
        fingerprint: fp,
        serve: Serve::Endpoint(Arc::new(endpoint)),
        docs,
        cert,
        upstream: addrs,
    }))
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
pub(super) fn key_source(
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

/// The shared client of a forwarding backend's cluster (named or inline).
pub(super) fn cluster_client(
    clusters: &Registry,
    config: &Config,
    backend: &crate::config::BackendConfig,
) -> Result<Arc<Client>, String> {
    let cluster = config
        .cluster_of(backend)
        .ok_or("backend.cluster: names no [[clusters]] entry")?;
    clusters
        .client(&cluster)
        .map_err(|e| format!("backend.{e}"))
}

pub(super) fn bucket(per_second: f64, burst: u64) -> Option<Bucket> {
    if per_second <= 0.0 {
        return None;
    }
    let capacity = if burst > 0 {
        burst
    } else {
        per_second.ceil().max(1.0) as u64
    };
    Some(Bucket {
        capacity,
        per: Duration::from_secs_f64(capacity as f64 / per_second),
    })
}

/// A `Host` header value (or SNI name) as routing compares it
/// (`aap_core::host::route_key`): the port dropped, a trailing dot dropped,
/// ASCII lowercase (RFC 9110 §4.2.3). `None` when it is not a valid host.
pub fn host_key(host: &str) -> Option<String> {
    aap_core::host::route_key(host)
}

#[cfg(test)]
mod tests {
    use super::host_key;

    #[test]
    fn host_keys_ignore_case_port_and_a_trailing_dot() {
        assert_eq!(
            host_key("MCP.Dealer.Example:8443").as_deref(),
            Some("mcp.dealer.example")
        );
        assert_eq!(
            host_key("mcp.dealer.example.").as_deref(),
            Some("mcp.dealer.example")
        );
        assert_eq!(host_key("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(host_key(""), None);
    }
}
