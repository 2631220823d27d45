//! The composition root: a [`ConfigGeneration`] is everything built from one config — tenants,
//! endpoints and relays, backends (their upstream clients from `upstream::cluster`), the shared state.

use crate::aap::catalog::{CatalogInterner, CatalogOptions};
use crate::aap::contract::{Contract, ContractConfig};
use crate::aap::cursor::CursorCodec;
use crate::aap::publish;
use crate::aap::schemas::SchemaSet;
use crate::aap::skill::Skill;
use crate::auth::Authenticator;
use crate::backend::{default_capabilities, Backend};
use crate::config::StateBackend;
use crate::config::{BackendConfig, Config};
use crate::exchange::HttpRequest;
use crate::mcp::jsonrpc::RpcError;
use crate::mcp::server::Endpoint;
use crate::mcp::session::SessionStore;
use crate::state::local::LocalState;
use crate::state::redis::{RedisOptions, RedisState};
use crate::state::{Bucket, SharedState};
use crate::upstream::a2a::{A2aUpstream, A2aUpstreamConfig};
use crate::upstream::client::{Client, PeerSpec};
use crate::upstream::cluster::Registry;
use crate::upstream::embedded::{EmbeddedConfig, EmbeddedDealer};
use crate::upstream::inventory::source::SourceSpec;
use crate::upstream::mcp::{McpUpstream, McpUpstreamConfig, RevisionMode};
use crate::upstream::relay::{Relay, RelayConfig};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Everything derived from one config generation.
#[derive(Debug)]
pub struct ConfigGeneration {
    pub config: Config,
    pub state: Arc<dyn SharedState>,
    pub endpoints: HashMap<String, Arc<Endpoint>>,
    /// The same endpoints by their inbound A2A path (`aap_core::a2a::path_for`).
    pub a2a: HashMap<String, Arc<Endpoint>>,
    /// Relay tenants (`kind = "relay"`), by path.
    pub relays: HashMap<String, Arc<RelayTenant>>,
    /// Protected-resource-metadata path → tenant path.
    pub metadata: HashMap<String, String>,
    /// The discovery documents of every tenant with a `public_url`.
    pub published: super::publish::Published,
    pub generation: u64,
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

impl ConfigGeneration {
    /// Build without connecting or looking up any host name (for `check`
    /// and `catalog`): clients from an offline registry.
    pub fn build(config: Config, generation: u64) -> Result<ConfigGeneration, BuildError> {
        Self::build_from(config, generation, None, &Registry::offline())
    }

    /// Build for `run`, before the server starts. Host names are resolved
    /// in the background by each cluster (`upstream::cluster`), never here.
    pub fn start(config: Config, generation: u64) -> Result<ConfigGeneration, BuildError> {
        Self::build_from(
            config,
            generation,
            None,
            crate::upstream::cluster::registry(),
        )
    }

    /// Build a runtime; on reload, `previous` lends what must outlive a
    /// config generation: the shared state, unchanged backends (their lead
    /// logs and cursor keys) and legacy sessions. Upstream clients come from
    /// `clusters`, which keeps a cluster's client while its settings stay.
    pub fn build_from(
        config: Config,
        generation: u64,
        previous: Option<&ConfigGeneration>,
        clusters: &Registry,
    ) -> Result<ConfigGeneration, BuildError> {
        let same_addrs = |p: &ConfigGeneration, old: &BackendConfig, new: &BackendConfig| {
            p.config.cluster_of(old) == config.cluster_of(new)
        };
        let schemas = Arc::new(
            match &config.schemas.dir {
                Some(dir) => SchemaSet::from_dir(&config.resolve(dir)),
                None => SchemaSet::embedded(),
            }
            .map_err(|e| BuildError(format!("schemas: {e}")))?,
        );
        let state_dir = config.state_dir();
        let state_key = |c: &Config| {
            format!(
                "{:?}|{:?}|{:?}|{}|{:?}|{}|{}|{}",
                c.state_dir(),
                c.state.backend,
                c.state.redis_url,
                c.state.redis_prefix,
                c.state.redis_ca_file.as_ref().map(|p| c.resolve(p)),
                c.state.redis_connect_timeout_ms,
                c.state.redis_command_timeout_ms,
                c.state.redis_wait_replicas,
            )
        };
        let reuse_state = previous.filter(|p| state_key(&p.config) == state_key(&config));
        let state: Arc<dyn SharedState> = match (reuse_state, config.state.backend) {
            (Some(p), _) => p.state.clone(),
            (None, StateBackend::Local) => Arc::new(
                LocalState::open(&state_dir.join("idempotency.jsonl"))
                    .map_err(|e| BuildError(format!("state: {e}")))?,
            ),
            (None, StateBackend::Redis) => {
                Arc::new(RedisState::new(&RedisOptions::from_config(&config)).map_err(BuildError)?)
            }
        };
        let idempotency_ttl = Duration::from_secs(config.state.idempotency_ttl_hours * 3600);
        let mut endpoints = HashMap::new();
        let mut metadata: HashMap<String, String> = HashMap::new();
        let mut relays = HashMap::new();
        let mut published = super::publish::Published::default();
        // One catalog (and its serialized tools/list pages) per distinct shape, shared.
        let mut catalogs = CatalogInterner::default();
        for t in &config.tenants {
            let err = |m: String| BuildError(format!("tenant {}: {m}", t.id));
            let auth = match &t.auth {
                Some(a) => Some(Arc::new(
                    Authenticator::new(a.clone(), key_source(&config, a, clusters).map_err(err)?)
                        .map_err(err)?,
                )),
                None => None,
            };
            if let BackendConfig::Relay(r) = &t.backend {
                // Keep the session table across a reload that leaves the relay as it was.
                let kept = previous.and_then(|p| {
                    let old = p.config.tenants.iter().find(|o| o.id == t.id)?;
                    let same = format!("{:?}", old.backend) == format!("{:?}", t.backend)
                        && same_addrs(p, &old.backend, &t.backend)
                        && old.session_idle_secs == t.session_idle_secs
                        && config.limits.max_json_depth == p.config.limits.max_json_depth;
                    same.then(|| p.relays.get(&old.path).map(|m| m.relay.clone()))?
                });
                let relay = match kept {
                    Some(r) => r,
                    None => Arc::new(
                        Relay::new(RelayConfig {
                            client: cluster_client(clusters, &config, &t.backend).map_err(err)?,
                            path: r.path.clone(),
                            bearer_token: r.bearer_token.clone(),
                            max_json_depth: config.limits.max_json_depth,
                            session_idle: Duration::from_secs(t.session_idle_secs),
                        })
                        .map_err(|e| err(format!("backend: {e}")))?,
                    ),
                };
                if let Some(a) = &auth {
                    metadata.insert(a.metadata_path(), t.path.clone());
                }
                relays.insert(
                    t.path.clone(),
                    Arc::new(RelayTenant {
                        tenant: t.id.clone(),
                        allowed_origins: t.allowed_origins.clone(),
                        auth,
                        tenant_bucket: bucket(
                            t.rate_limit.tenant_per_second,
                            t.rate_limit.tenant_burst,
                        ),
                        caller_bucket: bucket(
                            t.rate_limit.caller_per_second,
                            t.rate_limit.caller_burst,
                        ),
                        relay,
                    }),
                );
                continue;
            }
            // The lead path's view of the store (Redis Cluster: this tenant's hash slot).
            let tenant_state = state.for_tenant(&t.id).unwrap_or_else(|| state.clone());
            let before = previous.and_then(|p| {
                let old = p.config.tenants.iter().find(|o| o.id == t.id)?;
                p.endpoints.get(&old.path).map(|ep| (old, ep))
            });
            let same_backend = before.filter(|(old, _)| {
                reuse_state.is_some()
                    && format!("{:?}", old.backend) == format!("{:?}", t.backend)
                    && previous.is_some_and(|p| same_addrs(p, &old.backend, &t.backend))
            });
            let backend: Arc<dyn Backend> = match (&t.backend, same_backend) {
                (_, Some((_, ep))) => ep.contract.backend.clone(),
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
                    let outbox = crate::leads::outbox::attach(
                        &t.id,
                        &leads_file,
                        &state_dir,
                        &e.sinks,
                        &e.outbox,
                    )
                    .map_err(|e| err(e.to_string()))?;
                    Arc::new(
                        EmbeddedDealer::load(EmbeddedConfig {
                            feed: SourceSpec::of_backend(e, &|p| config.resolve(p)),
                            schemas: schemas.clone(),
                            dealer: config.resolve(&e.dealer),
                            leads_file,
                            state_dir: state_dir.clone(),
                            shared: (config.state.backend == StateBackend::Redis)
                                .then(|| tenant_state.clone()),
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
                        client: cluster_client(clusters, &config, &t.backend).map_err(err)?,
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
                // Mounted above.
                (BackendConfig::Relay(_), None) => continue,
                (BackendConfig::A2a(a), None) => Arc::new(
                    A2aUpstream::new(A2aUpstreamConfig {
                        client: cluster_client(clusters, &config, &t.backend).map_err(err)?,
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
            };
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
            let tools = catalogs
                .get(
                    &schemas,
                    &skills,
                    Some(&capabilities),
                    &opts,
                    t.tools_page_size,
                )
                .map_err(err)?;
            if let Some(url) = &t.public_url {
                // From the skills and capabilities that built `tools`, so the
                // documents and tools/list cannot disagree.
                let docs = publish::build(&publish::Tenant {
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
                .map_err(err)?;
                published.add(&t.path, &t.publish.hosts, docs);
            }
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
                state: tenant_state.clone(),
            };
            let endpoint = Endpoint {
                tenant: t.id.clone(),
                path: t.path.clone(),
                allowed_origins: t.allowed_origins.clone(),
                sessions: t.legacy_sessions.then(|| {
                    before
                        .and_then(|(_, ep)| ep.sessions.clone())
                        .unwrap_or_else(|| {
                            Arc::new(SessionStore::new(
                                Duration::from_secs(t.session_idle_secs),
                                100_000,
                            ))
                        })
                }),
                tools,
                page_size: t.tools_page_size,
                list_ttl_ms: t.list_ttl_ms,
                instructions: t.instructions.clone(),
                contract: Arc::new(contract),
                server_name: config.server.name.clone(),
                max_body_bytes: config.limits.max_body_bytes,
                max_json_depth: config.limits.max_json_depth,
                auth,
                tenant_bucket: bucket(t.rate_limit.tenant_per_second, t.rate_limit.tenant_burst),
                caller_bucket: bucket(t.rate_limit.caller_per_second, t.rate_limit.caller_burst),
            };
            if let Some(a) = &endpoint.auth {
                metadata.insert(a.metadata_path(), t.path.clone());
            }
            endpoints.insert(t.path.clone(), Arc::new(endpoint));
        }
        // Each endpoint tenant also answers A2A beside its MCP path (relay
        // tenants have no contract of their own, so no A2A binding).
        let mut a2a = HashMap::new();
        for (path, ep) in &endpoints {
            let at = crate::a2a::path_for(path);
            if config.tenants.iter().any(|t| t.path == at) {
                return Err(BuildError(format!(
                    "tenant {}: its A2A path {at} (the MCP path with the last segment replaced by a2a) is already a tenant's MCP path",
                    ep.tenant
                )));
            }
            a2a.insert(at, ep.clone());
        }
        Ok(ConfigGeneration {
            state,
            config,
            endpoints,
            a2a,
            relays,
            metadata,
            published,
            generation,
        })
    }
}

impl ConfigGeneration {
    /// Tell the metrics which tenants this generation serves and which of them get their own
    /// `tenant` label (`[telemetry] tenant_metrics`), when it is installed.
    pub fn configure_metrics(&self) {
        let c = &self.config;
        let n = c.tenants.len();
        crate::metrics::configure_tenants(c.tenants.iter().map(|t| t.id.as_str()), |id| {
            c.telemetry.tenant_metrics.labels(id, n)
        });
    }
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

/// The shared client of a forwarding backend's cluster (named or inline).
fn cluster_client(
    clusters: &Registry,
    config: &Config,
    backend: &BackendConfig,
) -> Result<Arc<Client>, String> {
    let cluster = config
        .cluster_of(backend)
        .ok_or("backend.cluster: names no [[clusters]] entry")?;
    clusters
        .client(&cluster)
        .map_err(|e| format!("backend.{e}"))
}

fn bucket(per_second: f64, burst: u64) -> Option<Bucket> {
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
