//! One builder per backend kind a tenant can have: the embedded dealer (with its lead outbox), an
//! MCP upstream, an A2A upstream and the relay, and the pooled cluster client forwarding ones share.

use super::shared::Shared;
use crate::aap::cursor::CursorCodec;
use crate::backend::{default_capabilities, Backend};
use crate::config::{
    A2aBackendConfig, BackendConfig, Config, EmbeddedBackendConfig, McpBackendConfig,
    RelayBackendConfig, TenantConfig,
};
use crate::upstream::a2a::{A2aUpstream, A2aUpstreamConfig};
use crate::upstream::client::Client;
use crate::upstream::cluster::Registry;
use crate::upstream::embedded::{EmbeddedConfig, EmbeddedDealer};
use crate::upstream::inventory::source::SourceSpec;
use crate::upstream::mcp::{McpUpstream, McpUpstreamConfig, RevisionMode};
use crate::upstream::relay::{Relay, RelayConfig};
use std::sync::Arc;
use std::time::Duration;

/// A new backend for an endpoint tenant, of the kind its config names.
pub(super) fn endpoint_backend(
    t: &TenantConfig,
    shared: &Shared<'_>,
) -> Result<Arc<dyn Backend>, String> {
    match &t.backend {
        BackendConfig::Embedded(e) => embedded(t, e, shared),
        BackendConfig::Mcp(m) => mcp(t, m, shared),
        BackendConfig::A2a(a) => a2a(t, a, shared),
        BackendConfig::Relay(_) => Err("backend: a relay tenant has no endpoint".into()),
    }
}

/// The embedded dealer. Building it stages its lead outbox's new sinks and
/// policy (`Outboxes::attach`): the caller commits them once the
/// generation is served, or discards them.
fn embedded(
    t: &TenantConfig,
    e: &EmbeddedBackendConfig,
    shared: &Shared<'_>,
) -> Result<Arc<dyn Backend>, String> {
    let config = shared.config;
    let idempotency_ttl = Duration::from_secs(config.state.idempotency_ttl_hours * 3600);
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
        .unwrap_or_else(|| config.state_dir().join(&t.id).join("leads.jsonl"));
    let store_use = crate::leads::outbox::StoreUse {
        store: shared.store.clone(),
        lease: Duration::from_millis(config.state.lead_lease_ms),
        poll: Duration::from_millis(config.state.outbox_poll_ms),
        idempotency_ttl,
        retention: Duration::from_secs(config.state.lead_retention_days * 86_400),
    };
    // Staged until the generation is served (see above).
    let outbox = shared
        .platform
        .outboxes
        .attach(&t.id, &leads_file, store_use, &e.sinks, &e.outbox)
        .map_err(|e| e.to_string())?;
    let cfg = EmbeddedConfig {
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
        store_metrics: shared.platform.metrics.store.clone(),
    };
    let dealer = EmbeddedDealer::load(cfg, &shared.platform.feeds, &shared.platform.profiles)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(dealer))
}

/// A strict MCP upstream.
fn mcp(
    t: &TenantConfig,
    m: &McpBackendConfig,
    shared: &Shared<'_>,
) -> Result<Arc<dyn Backend>, String> {
    let upstream = McpUpstream::new(McpUpstreamConfig {
        client: cluster_client(&shared.platform.clusters, shared.config, &t.backend)?,
        path: m.path.clone(),
        revision: match m.revision.as_str() {
            crate::mcp::revision::MODERN => RevisionMode::Modern,
            crate::mcp::revision::LEGACY => RevisionMode::Legacy,
            _ => RevisionMode::Auto,
        },
        bearer_token: m.bearer_token.clone(),
        capabilities: m.capabilities.clone().unwrap_or_else(default_capabilities),
        lead_key: m.lead_key,
        dedupes_leads: m.dedupes_leads,
    })
    .map_err(|e| format!("backend: {e}"))?;
    Ok(Arc::new(upstream))
}

/// An A2A upstream serving the AAP extension.
fn a2a(
    t: &TenantConfig,
    a: &A2aBackendConfig,
    shared: &Shared<'_>,
) -> Result<Arc<dyn Backend>, String> {
    let upstream = A2aUpstream::new(A2aUpstreamConfig {
        client: cluster_client(&shared.platform.clusters, shared.config, &t.backend)?,
        path: a.path.clone(),
        card_path: a.card_path.clone(),
        extension_uri: a.extension_uri.clone(),
        bearer_token: a.bearer_token.clone(),
        capabilities: a.capabilities.clone().unwrap_or_else(default_capabilities),
        lead_key: a.lead_key,
        dedupes_leads: a.dedupes_leads,
    })
    .map_err(|e| format!("backend: {e}"))?;
    Ok(Arc::new(upstream))
}

/// A new transparent relay to the tenant's upstream.
pub(super) fn relay(
    t: &TenantConfig,
    r: &RelayBackendConfig,
    shared: &Shared<'_>,
) -> Result<Arc<Relay>, String> {
    let relay = Relay::new(RelayConfig {
        client: cluster_client(&shared.platform.clusters, shared.config, &t.backend)?,
        path: r.path.clone(),
        bearer_token: r.bearer_token.clone(),
        max_json_depth: shared.config.limits.max_json_depth,
        session_idle: Duration::from_secs(t.session_idle_secs),
    })
    .map_err(|e| format!("backend: {e}"))?;
    Ok(Arc::new(relay))
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
