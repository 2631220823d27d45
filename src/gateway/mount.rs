//! The one serve pipeline for every binding a tenant path mounts (its MCP endpoint, its A2A
//! binding, a relay): CORS preflight, admission recorded as a phase, the binding, CORS headers.

use super::admission::{admit, Admission, Admitted};
use super::cors::{self, Cors};
use super::generation::ConfigGeneration;
use super::tenant::RelayTenant;
use crate::a2a::server::A2a;
use crate::auth::Caller;
use crate::auth::{AuthMode, Authenticator};
use crate::context::RequestCtx;
use crate::endpoint::Binding as _;
use crate::endpoint::Endpoint;
use crate::exchange::{HttpRequest, HttpResponse};
use crate::mcp::jsonrpc::RpcError;
use crate::mcp::server::McpBinding;
use aap_core::trace::Phase;

/// What a routed path serves.
pub(super) enum Mount<'a> {
    /// The tenant's MCP endpoint: its endpoint and its MCP binding.
    Mcp(&'a Endpoint, &'a McpBinding),
    /// The tenant's A2A binding, over the same contract as its MCP endpoint.
    A2a(&'a Endpoint),
    /// A relay tenant (MCP passed through to one upstream).
    Relay(&'a RelayTenant, &'a ConfigGeneration),
}

/// The A2A service parameters a browser client sends as headers.
const A2A_CORS_HEADERS: &[&str] = &["a2a-version", "a2a-extensions"];

impl<'a> Mount<'a> {
    pub(super) fn tenant(&self) -> &'a str {
        match self {
            Mount::Mcp(ep, _) | Mount::A2a(ep) => &ep.tenant,
            Mount::Relay(m, _) => &m.tenant,
        }
    }

    /// The tenant's token check, when it has one that is on.
    pub(super) fn auth(&self) -> Option<&'a Authenticator> {
        let auth = match self {
            Mount::Mcp(ep, _) | Mount::A2a(ep) => ep.auth.as_deref(),
            Mount::Relay(m, _) => m.auth.as_deref(),
        };
        auth.filter(|a| a.mode() != AuthMode::Off)
    }

    /// The binding's CORS: its tenant's origins, the methods it serves and the headers a
    /// browser client of that binding sends and reads.
    pub(super) fn cors(&self) -> Cors<'a> {
        match self {
            Mount::Mcp(ep, mcp) => Cors {
                origins: &ep.allowed_origins,
                methods: if mcp.sessions.is_some() {
                    "POST, DELETE"
                } else {
                    "POST"
                },
                extra_allow_headers: &[],
                expose_headers: cors::CORS_EXPOSE_HEADERS,
            },
            // `SendMessage` is a POST; a browser A2A client also sends `A2A-Version` and
            // `A2A-Extensions`.
            Mount::A2a(ep) => Cors {
                origins: &ep.allowed_origins,
                methods: "POST",
                extra_allow_headers: A2A_CORS_HEADERS,
                expose_headers: cors::A2A_EXPOSE_HEADERS,
            },
            // GET event streams and DELETE pass through.
            Mount::Relay(m, _) => Cors {
                origins: &m.allowed_origins,
                methods: "GET, POST, DELETE",
                extra_allow_headers: &[],
                expose_headers: cors::CORS_EXPOSE_HEADERS,
            },
        }
    }

    /// What admission needs: the same order and budgets for every binding; only the head
    /// rules (Origin, method, media types) are the binding's own.
    fn admission(&self, req: &HttpRequest) -> Admission<'a> {
        let (state, tenant_bucket, caller_bucket) = match self {
            Mount::Mcp(ep, _) | Mount::A2a(ep) => (
                ep.contract.state.as_ref(),
                ep.tenant_bucket,
                ep.caller_bucket,
            ),
            Mount::Relay(m, rt) => (rt.state.as_ref(), m.tenant_bucket, m.caller_bucket),
        };
        Admission {
            tenant: self.tenant(),
            state,
            head: self.head(req),
            auth: self.auth(),
            tenant_bucket,
            caller_bucket,
        }
    }

    /// The refusal the head alone decides (Origin, HTTP method, media types): the binding's
    /// own rules.
    pub(super) fn head(&self, req: &HttpRequest) -> Option<RpcError> {
        match self {
            Mount::Mcp(ep, mcp) => ep.head_refusal(*mcp, req),
            Mount::A2a(ep) => ep.head_refusal(&A2a, req),
            Mount::Relay(m, _) => m.head_refusal(req),
        }
    }

    /// A refusal decided before the body was read (no request id to carry), in the
    /// binding's own shape, with the error's own headers (`WWW-Authenticate`, `Allow`, …).
    pub(super) fn refuse_early(&self, e: &RpcError, req: &HttpRequest) -> HttpResponse {
        // Depth 0: the body is not read for an id.
        match self {
            Mount::A2a(_) => A2a.refusal(e, req, 0),
            Mount::Mcp(_, mcp) => mcp.refusal(e, req, 0),
            Mount::Relay(..) => crate::mcp::server::refusal(e, req, 0),
        }
    }

    /// A refusal in the binding's own shape.
    fn refuse(&self, e: &RpcError, req: &HttpRequest) -> HttpResponse {
        match self {
            Mount::Mcp(ep, mcp) => mcp.refusal(e, req, ep.max_json_depth),
            Mount::A2a(ep) => A2a.refusal(e, req, ep.max_json_depth),
            Mount::Relay(_, rt) => {
                crate::mcp::server::refusal(e, req, rt.config.limits.max_json_depth)
            }
        }
    }

    /// The binding, for an admitted caller.
    async fn handle(
        &self,
        req: &HttpRequest,
        admitted: Admitted,
        ctx: &mut RequestCtx,
    ) -> HttpResponse {
        let auth = self.auth();
        let caller = Caller {
            scope: &admitted.scope,
            private: auth.is_some(),
            auth,
            principal: admitted.principal.as_ref(),
        };
        match self {
            Mount::Mcp(ep, mcp) => ep.handle(*mcp, req, &caller, ctx).await,
            Mount::A2a(ep) => ep.handle(&A2a, req, &caller, ctx).await,
            // The relay's upstream authorizes the call itself; admission has run.
            Mount::Relay(m, _) => m.relay.handle(req, ctx).await,
        }
    }
}

/// Serve a routed request: CORS preflight, admission (recorded as the request's admission
/// phase), the binding, then the CORS headers of an allowed origin.
pub(super) async fn serve(
    mount: Mount<'_>,
    req: &HttpRequest,
    ctx: &mut RequestCtx,
) -> HttpResponse {
    ctx.tenant = Some(mount.tenant().to_owned());
    let cors = mount.cors();
    if let Some(r) = cors.preflight(req, ctx) {
        return r;
    }
    if let Mount::A2a(_) = mount {
        ctx.binding = "a2a";
    }
    let admission = mount.admission(req);
    let started = std::time::Instant::now();
    let admitted = admit(&admission, req, ctx).await;
    if let Some(t) = &ctx.trace {
        t.record(Phase::Admission, started);
    }
    let resp = match admitted {
        Ok(a) => mount.handle(req, a, ctx).await,
        Err(e) => mount.refuse(&e, req),
    };
    cors.decorate(req, resp)
}
