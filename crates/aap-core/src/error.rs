//! The one failure policy: every refusal the gateway makes is a [`Failure`] kind, and this
//! module alone maps a kind to its HTTP status and JSON-RPC code ([`RpcError::of`]).

use serde_json::{Map, Value};

/// JSON-RPC and MCP error codes the gateway emits (the table in
/// docs/protocol.md, "JSON-RPC error codes").
///
/// MCP 2026-07-28 reserves -32020..-32099 for codes its specification
/// defines, and the gateway emits only those it defines there (-32020,
/// -32022). Its own codes sit in -32000..-32019, which the specification
/// leaves to implementations. Codes an upstream sends are passed on as they
/// are (see `upstream_protocol_error` in `mcp::server`).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// 2025-11-25 sessions only: unknown or expired `Mcp-Session-Id` (with
    /// HTTP 404, the code the MCP SDKs use). A 2026-07-28 request never gets
    /// it: modern MCP has no protocol sessions, so its `Mcp-Session-Id` is
    /// ignored.
    pub const SESSION_NOT_FOUND: i64 = -32001;
    /// Gateway throttling (carried with HTTP 429 and `Retry-After`).
    pub const RATE_LIMITED: i64 = -32013;
    /// Authorization failures (carried with HTTP 401/403 and a
    /// `WWW-Authenticate` challenge).
    pub const UNAUTHORIZED: i64 = -32010;
    /// The upstream could not be reached (HTTP 502; nothing was executed).
    pub const UPSTREAM_UNAVAILABLE: i64 = -32011;
    /// The upstream did not answer in time (HTTP 504; outcome unknown).
    pub const UPSTREAM_TIMEOUT: i64 = -32012;
    /// The upstream refused the gateway's own credential (HTTP 502; nothing
    /// was executed; an operator must fix the credential).
    pub const UPSTREAM_CREDENTIALS_REFUSED: i64 = -32014;
    /// MCP 2026-07-28 HeaderMismatch.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// MCP 2026-07-28 UnsupportedProtocolVersion.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// The range MCP 2026-07-28 reserves for codes its specification defines.
    pub const SPEC_RESERVED: std::ops::RangeInclusive<i64> = -32099..=-32020;
}

/// Every kind of refusal the gateway answers with a JSON-RPC error, and the
/// only place that says which HTTP status and JSON-RPC code each carries.
///
/// Sites name the kind and word the message; they never write a status or a
/// code. The exceptions are explicit: [`RpcError::passthrough`] for an
/// upstream's own error, which the gateway relays as it came.
///
/// ```
/// use aap_core::error::{code, Failure, RpcError};
/// let e = RpcError::of(Failure::RateLimited, "Too Many Requests");
/// assert_eq!((e.http_status, e.code), (429, code::RATE_LIMITED));
/// assert_eq!(Failure::MethodNotFound { modern: false }.status(), 200);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The body is not JSON (400, -32700).
    Parse,
    /// Not a valid JSON-RPC request, or a transport-level rule broken inside
    /// a well-framed request (400, -32600).
    InvalidRequest,
    /// A mirror header disagrees with the body (400, -32020).
    HeaderMismatch,
    /// Parameters unusable before dispatch (400, -32602).
    InvalidParams,
    /// Parameters refused by a dispatched method, such as an unknown tool or
    /// list cursor (200, -32602: the request itself was well-formed).
    ParamsRefused,
    /// An unknown method: 404 on 2026-07-28, whose specification defines
    /// it; 200 on 2025-11-25, whose clients read 404 as "session expired".
    MethodNotFound { modern: bool },
    /// A protocol revision the endpoint does not speak (400, -32022).
    UnsupportedVersion,
    /// 2025-11-25 only: an unknown or expired `Mcp-Session-Id` (404, -32001).
    SessionNotFound,
    /// No usable access token (401, -32010, with a challenge header).
    Unauthorized,
    /// A valid token without the needed scope (403, -32010).
    InsufficientScope,
    /// The `Origin` header is not allowed for the endpoint (403, -32600).
    OriginRefused,
    /// The HTTP method is not one the endpoint accepts (405, -32600, `Allow`).
    MethodNotAllowed,
    /// The client accepts no media type the endpoint answers with (406, -32600).
    NotAcceptable,
    /// The body's media type is not JSON (415, -32600).
    UnsupportedMediaType,
    /// The body exceeds `limits.max_body_bytes` (413, -32600).
    PayloadTooLarge,
    /// A throttle refused the request (429, -32013, `Retry-After`).
    RateLimited,
    /// The upstream could not be reached; nothing was executed (502, -32011).
    UpstreamUnavailable,
    /// The upstream did not answer in time; outcome unknown (504, -32012).
    UpstreamTimeout,
    /// The upstream refused the gateway's own credential with HTTP 401/403;
    /// nothing was executed (502, -32014).
    UpstreamCredentialsRefused,
    /// A bug or an unexpected state inside the gateway (500, -32603).
    Internal,
    /// A refusal the HTTP/1.1 layer decides by RFC 9110/9112 before any
    /// JSON-RPC is read (the status it names, -32600): 400, 408, 414, 417,
    /// 431, 501, 505, and 503 when the listener is full.
    Framing(u16),
}

impl Failure {
    /// The HTTP status this kind is answered with.
    pub fn status(self) -> u16 {
        match self {
            Failure::Parse
            | Failure::InvalidRequest
            | Failure::HeaderMismatch
            | Failure::InvalidParams
            | Failure::UnsupportedVersion => 400,
            Failure::ParamsRefused => 200,
            Failure::MethodNotFound { modern } => {
                if modern {
                    404
                } else {
                    200
                }
            }
            Failure::SessionNotFound => 404,
            Failure::Unauthorized => 401,
            Failure::InsufficientScope | Failure::OriginRefused => 403,
            Failure::MethodNotAllowed => 405,
            Failure::NotAcceptable => 406,
            Failure::UnsupportedMediaType => 415,
            Failure::PayloadTooLarge => 413,
            Failure::RateLimited => 429,
            Failure::UpstreamUnavailable | Failure::UpstreamCredentialsRefused => 502,
            Failure::UpstreamTimeout => 504,
            Failure::Internal => 500,
            Failure::Framing(status) => status,
        }
    }

    /// The JSON-RPC error code this kind carries.
    pub fn code(self) -> i64 {
        match self {
            Failure::Parse => code::PARSE_ERROR,
            Failure::InvalidParams | Failure::ParamsRefused => code::INVALID_PARAMS,
            Failure::HeaderMismatch => code::HEADER_MISMATCH,
            Failure::MethodNotFound { .. } => code::METHOD_NOT_FOUND,
            Failure::UnsupportedVersion => code::UNSUPPORTED_PROTOCOL_VERSION,
            Failure::SessionNotFound => code::SESSION_NOT_FOUND,
            Failure::Unauthorized | Failure::InsufficientScope => code::UNAUTHORIZED,
            Failure::RateLimited => code::RATE_LIMITED,
            Failure::UpstreamUnavailable => code::UPSTREAM_UNAVAILABLE,
            Failure::UpstreamTimeout => code::UPSTREAM_TIMEOUT,
            Failure::UpstreamCredentialsRefused => code::UPSTREAM_CREDENTIALS_REFUSED,
            Failure::Internal => code::INTERNAL_ERROR,
            Failure::InvalidRequest
            | Failure::OriginRefused
            | Failure::MethodNotAllowed
            | Failure::NotAcceptable
            | Failure::UnsupportedMediaType
            | Failure::PayloadTooLarge
            | Failure::Framing(_) => code::INVALID_REQUEST,
        }
    }
}

/// A JSON-RPC error with the HTTP status the gateway answers it with.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub http_status: u16,
    pub code: i64,
    pub message: String,
    pub data: Option<Box<Value>>,
    /// Extra response headers (e.g. `WWW-Authenticate`).
    pub headers: Vec<(String, String)>,
}

impl RpcError {
    /// A refusal of the given kind; its status and code come from [`Failure`].
    pub fn of(kind: Failure, message: impl Into<String>) -> Self {
        Self::raw(kind.status(), kind.code(), message.into())
    }

    /// An upstream's own JSON-RPC error, relayed with the status and code it
    /// came with (the one place a code is not the gateway's choice).
    pub fn passthrough(http_status: u16, code: i64, message: impl Into<String>) -> Self {
        Self::raw(http_status, code, message.into())
    }

    /// An error of the A2A binding: `crate::a2a::A2aFailure` owns that
    /// table (A2A's own codes, answered with HTTP 200 as A2A JSON-RPC does).
    pub fn a2a(code: i64, message: impl Into<String>) -> Self {
        Self::raw(200, code, message.into())
    }

    fn raw(http_status: u16, code: i64, message: String) -> Self {
        RpcError {
            http_status,
            code,
            message,
            data: None,
            headers: Vec::new(),
        }
    }
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(Box::new(data));
        self
    }
    pub fn parse(message: impl Into<String>) -> Self {
        Self::of(Failure::Parse, message)
    }
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::of(Failure::InvalidRequest, message)
    }
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::of(Failure::HeaderMismatch, message)
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::of(Failure::InvalidParams, message)
    }

    /// Render as a JSON-RPC error object (`id` is null when unknown).
    pub fn to_body(&self, id: Option<&Value>) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), Value::from(self.code));
        error.insert("message".into(), Value::from(self.message.clone()));
        if let Some(data) = &self.data {
            error.insert("data".into(), (**data).clone());
        }
        let mut body = Map::new();
        body.insert("jsonrpc".into(), Value::from("2.0"));
        body.insert("id".into(), id.cloned().unwrap_or(Value::Null));
        body.insert("error".into(), Value::Object(error));
        Value::Object(body)
    }
}
