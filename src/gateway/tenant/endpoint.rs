//! An endpoint tenant's AAP endpoint over its backend: the capabilities checked, the tool catalog,
//! the discovery documents, quotas, the contract, legacy sessions and the rate buckets.

use super::bucket;
use super::shared::Shared;
use super::TenantEndpoint;
use crate::aap::catalog::CatalogOptions;
use crate::aap::contract::{Contract, ContractConfig};
use crate::aap::skill::Skill;
use crate::auth::Authenticator;
use crate::backend::Backend;
use crate::config::{BackendConfig, TenantConfig};
use crate::endpoint::Endpoint;
use crate::mcp::server::McpBinding;
use crate::mcp::session::SessionStore;
use crate::publish::{self, Documents};
use crate::state::Bucket;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The tenant's endpoint over `backend`, and its discovery documents (with a
/// `public_url`). `before` is the endpoint the tenant had: its legacy
/// sessions are kept.
pub(super) fn build(
    t: &TenantConfig,
    shared: &Shared<'_>,
    backend: Arc<dyn Backend>,
    auth: Option<Arc<Authenticator>>,
    before: Option<&Arc<TenantEndpoint>>,
) -> Result<(TenantEndpoint, Option<Arc<Documents>>), String> {
    let config = shared.config;
    let idempotency_ttl = Duration::from_secs(config.state.idempotency_ttl_hours * 3600);
    let schemas = shared.schemas;
    let skills: Vec<Skill> = t.skills.iter().filter_map(|s| Skill::from_id(s)).collect();
    let capabilities = backend.capabilities();
    if let Err(errors) = schemas.validate_stem("inventory-capabilities", &capabilities) {
        let key = match &t.backend {
            BackendConfig::Embedded(_) => "inventory capabilities",
            _ => "backend.capabilities",
        };
        return Err(format!(
            "{key}: does not match inventory-capabilities.schema.json: {}",
            Value::from(errors)
        ));
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
        )?;
    let docs = match &t.public_url {
        // From the skills and capabilities that built `tools`, so the
        // documents and tools/list cannot disagree.
        Some(url) => Some(Arc::new(publish::build(&publish::Tenant {
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
        })?)),
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
        state: shared.state.clone(),
    };
    let rate = &t.rate_limit;
    let mcp = McpBinding {
        sessions: t.legacy_sessions.then(|| {
            before
                .and_then(|ep| ep.mcp.sessions.clone())
                .unwrap_or_else(|| {
                    Arc::new(SessionStore::new(
                        Duration::from_secs(t.session_idle_secs),
                        100_000,
                    ))
                })
        }),
        drop_nulls: t.host_compat.drops_nulls(),
        page_size: t.tools_page_size,
        list_ttl_ms: t.list_ttl_ms,
        instructions: t.instructions.clone(),
        server_name: config.server.name.clone(),
    };
    let endpoint = Endpoint {
        tenant: t.id.clone(),
        path: t.path.clone(),
        allowed_origins: t.allowed_origins.clone(),
        tools,
        contract: Arc::new(contract),
        max_body_bytes: config.limits.max_body_bytes,
        max_json_depth: config.limits.max_json_depth,
        auth,
        tenant_bucket: bucket(rate.tenant_per_second, rate.tenant_burst),
        caller_bucket: bucket(rate.caller_per_second, rate.caller_burst),
    };
    Ok((TenantEndpoint { endpoint, mcp }, docs))
}
