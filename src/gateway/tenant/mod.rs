//! One tenant, built on its own: a [`TenantUnit`] (endpoint or relay, backend, authenticator,
//! discovery documents, SNI certificate) keyed by a fingerprint of its config.
//!
//! A generation holds units and cheap routing maps made from them. A reload or a tenant file
//! that leaves a tenant's fingerprint unchanged keeps its unit (every `Arc` in it) as it was.
//! `build` makes a unit (the fingerprint, then the whole unit), `shared` is what every tenant of
//! a generation is built against, `auth` the access-token check, `backend` one builder per
//! backend kind, `endpoint` the AAP endpoint over a backend.

mod auth;
mod backend;
mod build;
mod endpoint;
mod shared;

pub(super) use build::build;
pub use build::BuildError;
pub(super) use shared::{shared_key, Shared};

use crate::auth::Authenticator;
use crate::config::TenantConfig;
use crate::endpoint::Endpoint;
use crate::exchange::HttpRequest;
use crate::mcp::jsonrpc::RpcError;
use crate::mcp::server::McpBinding;
use crate::publish::Documents;
use crate::state::Bucket;
use crate::upstream::relay::Relay;
use pingora::tls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::Duration;

/// A tenant's endpoint as the gateway mounts it: the binding-neutral endpoint (its MCP path and
/// its A2A path serve through it) and the settings only its MCP binding has.
#[derive(Debug)]
pub struct TenantEndpoint {
    pub endpoint: Endpoint,
    pub mcp: McpBinding,
}

/// A tenant endpoint is read as its binding-neutral endpoint (tenant, path, origins, contract,
/// limits, auth, budgets) everywhere but the MCP mount.
impl std::ops::Deref for TenantEndpoint {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// How a tenant serves: the AAP endpoint (MCP and A2A) or a transparent relay.
#[derive(Debug, Clone)]
pub enum Serve {
    Endpoint(Arc<TenantEndpoint>),
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
        if !crate::endpoint::origin_allowed(&self.allowed_origins, req) {
            return Some(crate::endpoint::origin_refused());
        }
        self.relay.head_refusal(req)
    }
}

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
    /// rebuild compares; see `build::upstream_key`).
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

    pub fn endpoint(&self) -> Option<&Arc<TenantEndpoint>> {
        match &self.serve {
            Serve::Endpoint(e) => Some(e),
            Serve::Relay(_) => None,
        }
    }
}

/// A rate limit as a token bucket: `None` when `per_second` is 0 (no limit); the burst is
/// `burst`, or one second's worth.
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
