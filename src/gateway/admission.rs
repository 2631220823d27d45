//! Admission: the one order every tenant kind shares (CORS and the head, then the tenant budget,
//! the token and the caller budget), and the refusals it answers with. Reads no body.

use crate::auth::Authenticator;
use crate::context::RequestCtx;
use crate::exchange::{HttpRequest, HttpResponse};
use crate::mcp::jsonrpc::RpcError;
use crate::state::Take;
use crate::state::{Bucket, SharedState};
use serde_json::json;

/// 429 with `Retry-After` in whole seconds (at least 1).
pub(super) fn throttled(retry_after_ms: u64, what: &str) -> RpcError {
    let secs = retry_after_ms.div_ceil(1000).max(1);
    let mut e = RpcError::of(
        crate::error::Failure::RateLimited,
        format!("Too Many Requests: the {what} request budget is used up; retry after {secs} s"),
    )
    .with_data(json!({"retry_after_ms": retry_after_ms}));
    e.headers.push(("retry-after".into(), secs.to_string()));
    e
}

/// A refusal decided before the body is interpreted, carrying the request's
/// id when the body (already read) is a valid JSON-RPC request envelope.
pub(super) fn refused(e: &RpcError, req: &HttpRequest, max_json_depth: usize) -> HttpResponse {
    let id = crate::mcp::jsonrpc::request_id(&req.body, max_json_depth);
    let mut resp = HttpResponse::json(e.http_status, &e.to_body(id.as_ref()));
    resp.headers.extend(e.headers.iter().cloned());
    resp
}

/// Take a token; `Some(response)` when throttled. Fails open (with a log
/// line) if the shared state is unreachable, so a Redis outage does not
/// take reads down.
pub(super) async fn limit(
    state: &dyn SharedState,
    key: &str,
    bucket: Option<Bucket>,
    what: &str,
    ctx: &RequestCtx,
) -> Option<RpcError> {
    let bucket = bucket?;
    match state.take(key, bucket).await {
        Ok(Take::Allowed) => None,
        Ok(Take::Limited { retry_after_ms }) => Some(throttled(retry_after_ms, what)),
        Err(e) => {
            tracing::warn!(
                tenant = ctx.tenant.as_deref().unwrap_or("-"),
                correlation_id = %ctx.correlation_id,
                error = %e,
                "rate-limit state unavailable; request allowed"
            );
            None
        }
    }
}

/// What admission needs to know about a tenant, whatever serves it.
pub(super) struct Admission<'a> {
    pub(super) tenant: &'a str,
    pub(super) state: &'a dyn SharedState,
    /// The refusal the head alone decides (Origin, HTTP method, media
    /// types), from the endpoint or relay that serves the tenant.
    pub(super) head: Option<RpcError>,
    pub(super) auth: Option<&'a Authenticator>,
    pub(super) tenant_bucket: Option<Bucket>,
    pub(super) caller_bucket: Option<Bucket>,
}

/// A caller that passed admission.
pub(super) struct Admitted {
    pub(super) scope: String,
    pub(super) principal: Option<crate::auth::Principal>,
}

/// The admission order every tenant kind shares: the head (Origin, HTTP
/// method, media types: no state touched, no token spent), then the tenant
/// budget, authentication and the caller budget; the error to answer when
/// the request is refused.
pub(super) async fn admit(
    a: &Admission<'_>,
    req: &HttpRequest,
    out: &mut RequestCtx,
) -> Result<Admitted, RpcError> {
    if let Some(e) = &a.head {
        out.outcome = head_outcome(e);
        return Err(e.clone());
    }
    if let Some(r) = limit(
        a.state,
        &format!("rl:tenant:{}", a.tenant),
        a.tenant_bucket,
        "tenant",
        out,
    )
    .await
    {
        out.outcome = "throttled".into();
        return Err(r);
    }
    let principal = match a.auth {
        Some(auth) => match auth
            .authenticate(
                req.header_str("authorization"),
                req.header_count("authorization"),
            )
            .await
        {
            Ok(p) => p,
            Err(denial) => {
                out.outcome = "unauthorized".into();
                return Err(auth.refusal(&denial));
            }
        },
        None => None,
    };
    let scope = principal
        .as_ref()
        .map(|p| p.scope.clone())
        .unwrap_or_else(|| "anonymous".into());
    let limiter_key = match (&principal, req.peer_ip) {
        (Some(p), _) => p.scope.clone(),
        (None, Some(ip)) => format!("ip:{ip}"),
        (None, None) => "ip:unknown".into(),
    };
    if let Some(r) = limit(
        a.state,
        &format!("rl:caller:{}:{limiter_key}", a.tenant),
        a.caller_bucket,
        "caller",
        out,
    )
    .await
    {
        out.outcome = "throttled".into();
        return Err(r);
    }
    Ok(Admitted { scope, principal })
}

/// The authentication refusal a request's `Authorization` header alone
/// decides (no token where one is required, or an invalid one).
pub(super) async fn head_auth(auth: Option<&Authenticator>, req: &HttpRequest) -> Option<RpcError> {
    let auth = auth?;
    auth.authenticate(
        req.header_str("authorization"),
        req.header_count("authorization"),
    )
    .await
    .err()
    .map(|denial| auth.refusal(&denial))
}

/// The access-log outcome of a refusal the head decided: the same names the
/// full pipeline gives the same refusals.
pub(super) fn head_outcome(err: &RpcError) -> String {
    match (err.code, err.http_status) {
        (crate::error::code::UNAUTHORIZED, _) => "unauthorized".into(),
        (_, 403 | 405) => err.http_status.to_string(),
        (code, _) => code.to_string(),
    }
}

/// Request headers a browser MCP client may send (lowercase); `mcp-param-*`
/// names are checked one by one and echoed.
const CORS_ALLOW_HEADERS: &[&str] = &[
    "content-type",
    "accept",
    "authorization",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "mcp-session-id",
    "last-event-id",
];
const CORS_PARAM_PREFIX: &str = "mcp-param-";
/// Response headers a browser client may read.
const CORS_EXPOSE_HEADERS: &str = "Mcp-Session-Id, WWW-Authenticate, Retry-After, x-correlation-id";
/// How long a browser may cache a preflight answer (seconds).
const CORS_MAX_AGE: &str = "600";

/// CORS for a tenant's `allowed_origins` (endpoint and relay alike), part of
/// the head step: a preflight from an allowed origin is answered here; any
/// other origin is refused with 403 by the head check that follows.
pub(super) struct Cors<'a> {
    pub(super) origins: &'a [String],
    /// The HTTP methods the tenant serves (`Access-Control-Allow-Methods`).
    pub(super) methods: &'static str,
    /// Request headers allowed besides the MCP ones (lowercase).
    pub(super) extra_allow_headers: &'static [&'static str],
}

impl Cors<'_> {
    /// The request's `Origin` when it is exactly one allowed origin.
    fn allowed_origin<'r>(&self, req: &'r HttpRequest) -> Option<&'r str> {
        let origin = req.header_str("origin")?.trim();
        self.origins
            .iter()
            .any(|a| a.eq_ignore_ascii_case(origin))
            .then_some(origin)
    }

    /// The answer to a CORS preflight (`OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method`) from an allowed origin: 204 naming
    /// the methods and the requested headers that are allowed. A requested
    /// header outside the allowed set is left out, so the browser refuses.
    pub(super) fn preflight(
        &self,
        req: &HttpRequest,
        out: &mut RequestCtx,
    ) -> Option<HttpResponse> {
        if req.method != "OPTIONS" || req.header_count("access-control-request-method") == 0 {
            return None;
        }
        let origin = self.allowed_origin(req)?;
        let mut allowed: Vec<String> = CORS_ALLOW_HEADERS
            .iter()
            .chain(self.extra_allow_headers)
            .map(|h| (*h).to_owned())
            .collect();
        let requested = req
            .header_all("access-control-request-headers")
            .filter_map(|v| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(','))
            .map(|h| h.trim().to_ascii_lowercase());
        for h in requested {
            let param = h
                .strip_prefix(CORS_PARAM_PREFIX)
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(is_token_byte));
            if param && !allowed.contains(&h) {
                allowed.push(h);
            }
        }
        out.outcome = "preflight".into();
        Some(
            HttpResponse::new(204)
                .with_header("access-control-allow-origin", origin)
                .with_header("access-control-allow-methods", self.methods)
                .with_header("access-control-allow-headers", allowed.join(", "))
                .with_header("access-control-max-age", CORS_MAX_AGE)
                .with_header(
                    "vary",
                    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
                ),
        )
    }

    /// An actual response to an allowed origin carries the CORS headers
    /// that let the page read it.
    pub(super) fn decorate(&self, req: &HttpRequest, resp: HttpResponse) -> HttpResponse {
        match self.allowed_origin(req) {
            Some(origin) => resp
                .with_header("access-control-allow-origin", origin)
                .with_header("access-control-expose-headers", CORS_EXPOSE_HEADERS)
                .with_header("vary", "Origin"),
            None => resp,
        }
    }
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
