//! The one CORS policy of the gateway: tenant endpoints (MCP, A2A, relay) echo an allowed
//! `Origin` with `Vary: Origin`; public documents (discovery documents, protected-resource metadata) allow any origin.

use crate::context::RequestCtx;
use crate::exchange::{HttpRequest, HttpResponse};

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
pub(super) const CORS_EXPOSE_HEADERS: &str =
    "Mcp-Session-Id, WWW-Authenticate, Retry-After, x-correlation-id";
/// The same for an A2A binding: its answers also carry `A2A-Extensions`.
pub(super) const A2A_EXPOSE_HEADERS: &str =
    "Mcp-Session-Id, WWW-Authenticate, Retry-After, x-correlation-id, A2A-Extensions";
/// How long a browser may cache a preflight answer (seconds).
const CORS_MAX_AGE: &str = "600";
/// Request headers a page may send when it reads a public document (conditional requests).
const PUBLIC_ALLOW_HEADERS: &str = "Accept, If-None-Match, If-Modified-Since, Cache-Control";

/// CORS for a tenant's `allowed_origins` (endpoint, A2A binding and relay alike), part of
/// the head step: a preflight from an allowed origin is answered here; any other origin is
/// refused with 403 by the head check that follows.
pub(super) struct Cors<'a> {
    pub(super) origins: &'a [String],
    /// The HTTP methods the tenant serves (`Access-Control-Allow-Methods`).
    pub(super) methods: &'static str,
    /// Request headers allowed besides the MCP ones (lowercase).
    pub(super) extra_allow_headers: &'static [&'static str],
    /// `Access-Control-Expose-Headers`.
    pub(super) expose_headers: &'static str,
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
                .is_some_and(crate::exchange::is_token);
            if param && !allowed.contains(&h) {
                allowed.push(h);
            }
        }
        out.outcome = "preflight".into();
        Some(
            HttpResponse::new(204)
                .with_header("access-control-allow-origin", origin.to_owned())
                .with_header("access-control-allow-methods", self.methods)
                .with_header("access-control-allow-headers", allowed.join(", "))
                .with_header("access-control-max-age", CORS_MAX_AGE)
                .with_header(
                    "vary",
                    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
                ),
        )
    }

    /// An actual response to an allowed origin carries the CORS headers that let the page
    /// read it. Any answer of a tenant that echoes origins says `Vary: Origin`, with an
    /// `Origin` or without: a cache must not give one origin's answer to another.
    pub(super) fn decorate(&self, req: &HttpRequest, resp: HttpResponse) -> HttpResponse {
        match self.allowed_origin(req) {
            Some(origin) => resp
                .with_header("access-control-allow-origin", origin.to_owned())
                .with_header("access-control-expose-headers", self.expose_headers)
                .with_header("vary", "Origin"),
            None if !self.origins.is_empty() => resp.with_header("vary", "Origin"),
            None => resp,
        }
    }
}

/// A preflight for a public document (any origin, `GET`/`HEAD`): the conditional-request
/// headers a page sends to revalidate are allowed.
pub(super) fn public_preflight() -> HttpResponse {
    HttpResponse::new(204)
        .with_header("access-control-allow-origin", "*")
        .with_header("access-control-allow-methods", "GET, HEAD")
        .with_header("access-control-allow-headers", PUBLIC_ALLOW_HEADERS)
        .with_header("access-control-max-age", CORS_MAX_AGE)
}

/// The CORS headers of a public document's answer: any origin may read it and its `ETag`.
pub(super) fn public(resp: HttpResponse) -> HttpResponse {
    resp.with_header("access-control-allow-origin", "*")
        .with_header("access-control-expose-headers", "ETag")
}
