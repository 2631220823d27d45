//! What every tenant of a generation is built against ([`Shared`]), and the text of the settings
//! outside `[[tenants]]` a tenant's build reads ([`shared_key`]): a change to it rebuilds every tenant.

use crate::aap::catalog::CatalogInterner;
use crate::aap::schemas::SchemaSet;
use crate::config::Config;
use crate::platform::Platform;
use crate::state::SharedState;
use std::sync::{Arc, Mutex};

/// What every tenant of a generation is built against.
pub(in crate::gateway) struct Shared<'a> {
    pub config: &'a Config,
    pub schemas: &'a Arc<SchemaSet>,
    pub state: &'a Arc<dyn SharedState>,
    pub store: &'a Arc<dyn crate::store::LeadStore>,
    /// The state store is the previous generation's (backends may be kept).
    pub state_kept: bool,
    /// The shared settings a tenant's build reads, as text (see [`shared_key`]).
    pub key: &'a str,
    /// The process's registries: forwarding backends and JWKS URLs get their
    /// pooled clients from its clusters, embedded ones their feed, dealer
    /// profile and lead outbox.
    pub platform: &'a Platform,
    /// The generation's catalogs: tenants of the same shape share one.
    pub catalogs: &'a Mutex<CatalogInterner>,
}

/// The settings outside `[[tenants]]` that a tenant's build reads: a change
/// to any of them rebuilds every tenant.
pub(in crate::gateway) fn shared_key(c: &Config, schemas_digest: &str) -> String {
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
