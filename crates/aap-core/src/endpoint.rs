//! The binding-neutral endpoint of one tenant: the head rules every binding shares (Origin, body
//! size), the verified caller and its per-skill scope check, and the [`Binding`] seam through which
//! the MCP and A2A adapters read requests and render answers over the tenant's one contract.
//!
//! A call goes `Endpoint::handle` (Origin → the binding's method and media rules → body size) →
//! `Binding::serve` (the binding's envelope and dispatch) → `auth::Caller::authorize` (the skill's
//! scope) and `Contract::execute` (validation both ways, consent, quotas, idempotency) → the
//! backend; the answer comes back the same way and the binding renders it. Nothing here knows a JSON-RPC method
//! name, a media type or a protocol header: those are the adapters' (`mcp::server`, `a2a::server`).

use crate::aap::catalog::ToolCatalog;
use crate::aap::contract::Contract;
use crate::aap::skill::Skill;
use crate::auth::{Authenticator, Caller};
use crate::context::RequestCtx;
use crate::error::{Failure, RpcError};
use crate::exchange::{HttpRequest, HttpResponse};
use crate::state::Bucket;
use std::future::Future;
use std::sync::Arc;

/// One tenant's endpoint, built from config (immutable; a reload swaps it). Every binding of the
/// tenant serves through the same value, so the skill subset, scopes, validators, consent, quotas
/// and the idempotency store are one, whatever the binding.
#[derive(Debug)]
pub struct Endpoint {
    pub tenant: String,
    /// The tenant's MCP path (its A2A path is derived from it, `a2a::path_for`).
    pub path: String,
    pub allowed_origins: Vec<String>,
    /// The skills the tenant serves, as tools; shared by every tenant with the same catalog
    /// (`aap::catalog::CatalogInterner`).
    pub tools: Arc<ToolCatalog>,
    pub contract: Arc<Contract>,
    pub max_body_bytes: usize,
    pub max_json_depth: usize,
    pub auth: Option<Arc<Authenticator>>,
    pub tenant_bucket: Option<Bucket>,
    pub caller_bucket: Option<Bucket>,
}

/// What a binding adds to the endpoint: its own head rules, the shape of its refusals, and the
/// reading and answering of a request whose head and size have passed.
///
/// ```ignore
/// // The gateway mounts a tenant's MCP path and its A2A path on one endpoint:
/// let resp = endpoint.handle(&mcp_binding, &req, &caller, &mut ctx).await;
/// let resp = endpoint.handle(&aap_core::a2a::server::A2a, &req, &caller, &mut ctx).await;
/// ```
pub trait Binding: Sync {
    /// The binding's name in the access line and the metrics (`mcp`, `a2a`).
    const NAME: &'static str;

    /// The refusal the request's head decides after the Origin check: the HTTP methods and
    /// media types the binding serves (405, 415, 406).
    fn head_rules(&self, req: &HttpRequest) -> Option<RpcError>;

    /// A refusal decided before the binding read the body (the head, the body size, admission),
    /// in the binding's shape, carrying the request's id when `id_depth` is not 0 and the body
    /// is a valid request envelope within that nesting depth.
    fn refusal(&self, e: &RpcError, req: &HttpRequest, id_depth: usize) -> HttpResponse;

    /// Read and answer a request whose head and body size passed: the binding's envelope and
    /// dispatch, each skill call through [`Caller::authorize`] and the endpoint's contract.
    fn serve(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
        caller: &Caller<'_>,
        out: &mut RequestCtx,
    ) -> impl Future<Output = HttpResponse> + Send;
}

impl Endpoint {
    /// True when the tenant serves `skill` (its tool is in the catalog).
    pub fn implements(&self, skill: Skill) -> bool {
        self.tools.serves(skill)
    }

    /// The refusal the request's head alone decides, in the order [`Endpoint::handle`] checks
    /// it: Origin (403), then the binding's method and media rules. Admission runs it before
    /// any budget is taken, and `Expect: 100-continue` is answered with it before the body.
    pub fn head_refusal<B: Binding>(&self, binding: &B, req: &HttpRequest) -> Option<RpcError> {
        if !origin_allowed(&self.allowed_origins, req) {
            return Some(origin_refused());
        }
        binding.head_rules(req)
    }

    /// Serve one admitted request on `binding`: the head rules, the body size, then the binding.
    /// A refusal here answers at once and changes nothing; its access-line outcome is its HTTP
    /// status.
    pub async fn handle<B: Binding>(
        &self,
        binding: &B,
        req: &HttpRequest,
        caller: &Caller<'_>,
        out: &mut RequestCtx,
    ) -> HttpResponse {
        out.binding = B::NAME;
        if let Some(e) = self.head_refusal(binding, req) {
            out.outcome = e.http_status.to_string();
            let depth = if req.body.len() > self.max_body_bytes {
                0
            } else {
                self.max_json_depth
            };
            return binding.refusal(&e, req, depth);
        }
        if req.body.len() > self.max_body_bytes {
            out.outcome = "413".into();
            return binding.refusal(&body_too_large(self.max_body_bytes), req, 0);
        }
        binding.serve(self, req, caller, out).await
    }
}

/// True unless the request carries an `Origin` outside `allowed` (or more than one). Requests
/// without `Origin` (server-side agents) pass.
pub fn origin_allowed(allowed: &[String], req: &HttpRequest) -> bool {
    let Some(origin) = req.header_all("origin").next() else {
        return true;
    };
    req.header_count("origin") == 1
        && std::str::from_utf8(origin)
            .map(|o| allowed.iter().any(|a| a.eq_ignore_ascii_case(o.trim())))
            .unwrap_or(false)
}

/// The 403 of an `Origin` outside the tenant's `allowed_origins`.
pub fn origin_refused() -> RpcError {
    RpcError::of(
        Failure::OriginRefused,
        "Forbidden: Origin is not allowed for this endpoint",
    )
}

/// The 413 of a body over `limits.max_body_bytes`.
pub fn body_too_large(limit: usize) -> RpcError {
    RpcError::of(
        Failure::PayloadTooLarge,
        format!("Payload Too Large: the body exceeds {limit} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_origins(origins: &[&str]) -> HttpRequest {
        let mut req = HttpRequest {
            method: "POST".into(),
            path: "/mcp".into(),
            ..HttpRequest::default()
        };
        for o in origins {
            req.headers.push("origin", o.as_bytes());
        }
        req
    }

    #[test]
    fn origin_is_checked_case_insensitively_and_only_once() {
        let allowed = vec!["https://dealer.example".to_owned()];
        assert!(origin_allowed(&allowed, &with_origins(&[])));
        assert!(origin_allowed(
            &allowed,
            &with_origins(&["HTTPS://Dealer.Example "])
        ));
        assert!(!origin_allowed(
            &allowed,
            &with_origins(&["https://evil.example"])
        ));
        assert!(!origin_allowed(
            &allowed,
            &with_origins(&["https://dealer.example", "https://dealer.example"])
        ));
    }
}
