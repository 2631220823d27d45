//! Admission: the one order every tenant kind shares (CORS and the head, then the tenant budget,
//! the token and the caller budget), and the refusals it answers with. Reads no body.

use crate::auth::Authenticator;
use crate::context::RequestCtx;
use crate::exchange::HttpRequest;
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

/// Take a token; `Some(response)` when throttled. Fails open (with a log
/// line) if the shared state is unreachable, so a Redis outage does not
/// take reads down.
pub(super) async fn limit(
    state: &dyn SharedState,
    key: &str,
    bucket: Bucket,
    what: &str,
    ctx: &RequestCtx,
) -> Option<RpcError> {
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
    // A budget's key is built only when the tenant has that budget.
    if let Some(bucket) = a.tenant_bucket {
        let key = format!("rl:tenant:{}", a.tenant);
        if let Some(r) = limit(a.state, &key, bucket, "tenant", out).await {
            out.outcome = "throttled".into();
            return Err(r);
        }
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
    if let Some(bucket) = a.caller_bucket {
        // The caller: its token's scope, or its address when it sent none.
        let key = match (&principal, req.peer_ip) {
            (Some(p), _) => format!("rl:caller:{}:{}", a.tenant, p.scope),
            (None, Some(ip)) => format!("rl:caller:{}:ip:{ip}", a.tenant),
            (None, None) => format!("rl:caller:{}:ip:unknown", a.tenant),
        };
        if let Some(r) = limit(a.state, &key, bucket, "caller", out).await {
            out.outcome = "throttled".into();
            return Err(r);
        }
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

/// The access-log outcome of a refusal the head decided: `unauthorized` for a missing or
/// invalid token, else the HTTP status (`403`, `405`, `406`, `415`), as `Endpoint::handle`
/// logs the same refusals on every binding.
pub(super) fn head_outcome(err: &RpcError) -> String {
    match err.code {
        crate::error::code::UNAUTHORIZED => "unauthorized".into(),
        _ => err.http_status.to_string(),
    }
}
