//! The inbound A2A 1.0 JSON-RPC binding of a tenant: the wire constants, the A2A path beside the
//! MCP path, and A2A's error shapes (its own codes, and the AAP error as the draft-2.0 `data` array).
//!
//! The request pipeline is in [`server`]; it runs the same contract as the MCP endpoint.

pub mod server;

use crate::aap::error::{aap_error_retryable, ErrorCode, ERROR_AT_TYPE};
use crate::error::{code, RpcError};
use serde_json::{json, Map, Value};

/// The AAP extension URI a client activates with `A2A-Extensions` (exact list member).
pub const EXTENSION_URI: &str = "https://autoagentprotocol.org/extensions/aap/v3.0";
/// The one A2A protocol version served (`A2A-Version`, `Major.Minor`).
pub const PROTOCOL_VERSION: &str = "1.0";
pub const VERSION_HEADER: &str = "A2A-Version";
pub const EXTENSIONS_HEADER: &str = "A2A-Extensions";
/// The last path segment of a tenant's A2A endpoint.
pub const PATH_SEGMENT: &str = "a2a";

const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";
const A2A_DOMAIN: &str = "a2a-protocol.org";
const AAP_DOMAIN: &str = "autoagentprotocol.org";

/// A tenant's A2A path: its MCP path with the last segment replaced by `a2a`
/// (`/aap/3.0.0/demo-toyota/mcp` → `/aap/3.0.0/demo-toyota/a2a`).
///
/// ```
/// assert_eq!(aap_core::a2a::path_for("/aap/3.0.0/demo-toyota/mcp"), "/aap/3.0.0/demo-toyota/a2a");
/// assert_eq!(aap_core::a2a::path_for("/mcp"), "/a2a");
/// ```
pub fn path_for(mcp_path: &str) -> String {
    let prefix = mcp_path.rsplit_once('/').map_or("", |(p, _)| p);
    format!("{prefix}/{PATH_SEGMENT}")
}

/// The A2A 1.0 JSON-RPC errors the binding answers with, and the only place
/// their codes and ErrorInfo reasons are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum A2aFailure {
    Parse,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    Internal,
    PushNotificationNotSupported,
    UnsupportedOperation,
    ContentTypeNotSupported,
    ExtensionSupportRequired,
    VersionNotSupported,
}

impl A2aFailure {
    pub fn code(self) -> i64 {
        match self {
            A2aFailure::Parse => code::PARSE_ERROR,
            A2aFailure::InvalidRequest => code::INVALID_REQUEST,
            A2aFailure::MethodNotFound => code::METHOD_NOT_FOUND,
            A2aFailure::InvalidParams => code::INVALID_PARAMS,
            A2aFailure::Internal => code::INTERNAL_ERROR,
            A2aFailure::PushNotificationNotSupported => -32003,
            A2aFailure::UnsupportedOperation => -32004,
            A2aFailure::ContentTypeNotSupported => -32005,
            A2aFailure::ExtensionSupportRequired => -32008,
            A2aFailure::VersionNotSupported => -32009,
        }
    }

    /// The UPPER_SNAKE ErrorInfo reason A2A gives the code.
    pub fn reason(self) -> &'static str {
        match self {
            A2aFailure::Parse => "PARSE_ERROR",
            A2aFailure::InvalidRequest => "INVALID_REQUEST",
            A2aFailure::MethodNotFound => "METHOD_NOT_FOUND",
            A2aFailure::InvalidParams => "INVALID_PARAMS",
            A2aFailure::Internal => "INTERNAL_ERROR",
            A2aFailure::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            A2aFailure::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            A2aFailure::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            A2aFailure::ExtensionSupportRequired => "EXTENSION_SUPPORT_REQUIRED",
            A2aFailure::VersionNotSupported => "VERSION_NOT_SUPPORTED",
        }
    }

    /// The error, with `data` an array whose one entry is an ErrorInfo
    /// (`domain: a2a-protocol.org`, this reason, string `metadata`).
    pub fn error(self, message: impl Into<String>, metadata: &[(&str, &str)]) -> RpcError {
        let meta: Map<String, Value> = metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let mut info =
            json!({"@type": ERROR_INFO_TYPE, "reason": self.reason(), "domain": A2A_DOMAIN});
        if !meta.is_empty() {
            info["metadata"] = Value::Object(meta);
        }
        RpcError::a2a(self.code(), message).with_data(json!([info]))
    }
}

/// -32008: the AAP extension was not activated. The message names the URI
/// and `A2A-Extensions`; the ErrorInfo carries both as metadata.
pub fn extension_required() -> RpcError {
    A2aFailure::ExtensionSupportRequired.error(
        format!("Extension support required: this agent requires the Auto Agent Protocol extension {EXTENSION_URI}; activate it by sending that exact URI in the {EXTENSIONS_HEADER} header."),
        &[("extensionUri", EXTENSION_URI), ("requiredHeader", EXTENSIONS_HEADER)],
    )
}

/// -32009: the `A2A-Version` the client named (an empty or missing one
/// means 0.3) is not served.
pub fn version_not_supported(requested: &str) -> RpcError {
    let shown = if requested.is_empty() {
        "0.3 (no A2A-Version header)"
    } else {
        requested
    };
    A2aFailure::VersionNotSupported.error(
        format!("Version not supported: A2A {shown} is not served here; send {VERSION_HEADER}: {PROTOCOL_VERSION}."),
        &[("requestedVersion", if requested.is_empty() { "0.3" } else { requested }), ("supportedVersions", PROTOCOL_VERSION)],
    )
}

/// The JSON-RPC code an AAP error travels with on the A2A wire (the AAP
/// draft-2.0 column; the 3.0 codes that are caller mistakes get -32602).
pub fn aap_error_code(aap_code: &str) -> i64 {
    match aap_code {
        "UNSUPPORTED_SKILL" => -32004,
        "SCHEMA_VALIDATION_FAILED"
        | "MISSING_REQUIRED_FIELD"
        | "INVALID_CONDITION"
        | "INVALID_CURSOR"
        | "CURSOR_EXPIRED"
        | "UNSUPPORTED_FILTER" => code::INVALID_PARAMS,
        "INTERNAL_ERROR" => code::INTERNAL_ERROR,
        _ => -32000,
    }
}

/// An `aap.error` payload as an A2A JSON-RPC error: `data` is the array of
/// a `google.rpc.ErrorInfo` (`domain: autoagentprotocol.org`, `reason` the
/// AAP code, string metadata), a `google.rpc.BadRequest` for validation
/// codes, then the typed payload marked by its `@type`.
pub fn aap_rpc_error(payload: &Value) -> RpcError {
    let text = |k: &str| payload.get(k).and_then(Value::as_str).unwrap_or_default();
    let aap_code = match text("code") {
        "" => "INTERNAL_ERROR",
        c => c,
    };
    let retryable = payload
        .get("retryable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut data = vec![json!({
        "@type": ERROR_INFO_TYPE,
        "reason": aap_code,
        "domain": AAP_DOMAIN,
        "metadata": {
            "code": aap_code,
            "error_id": text("error_id"),
            "retryable": if retryable { "true" } else { "false" },
            "created_at": text("created_at"),
        },
    })];
    let violations: Vec<Value> = payload
        .pointer("/details/errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .map(|e| {
                    let field = e
                        .get("path")
                        .or_else(|| e.get("instanceLocation"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let keyword = e.get("keyword").and_then(Value::as_str).unwrap_or_default();
                    let error = e.get("error").and_then(Value::as_str).unwrap_or_default();
                    json!({"field": field, "description": format!("{keyword}: {error}")})
                })
                .collect()
        })
        .unwrap_or_default();
    if !violations.is_empty() && aap_error_code(aap_code) == code::INVALID_PARAMS {
        data.push(json!({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations}));
    }
    let mut typed = payload.clone();
    if let Some(o) = typed.as_object_mut() {
        o.entry("@type").or_insert_with(|| json!(ERROR_AT_TYPE));
    }
    data.push(typed);
    let message = match text("message") {
        "" => "The dealer answered with an AAP error.",
        m => m,
    };
    RpcError::a2a(aap_error_code(aap_code), message).with_data(Value::Array(data))
}

/// A refusal made with the gateway's MCP vocabulary (admission: Origin,
/// method, media types, body size, token, throttles; the per-skill scope
/// check), reshaped for an A2A client: the HTTP status and headers
/// (`WWW-Authenticate`, `Retry-After`, `Allow`) stay; a throttle becomes
/// the AAP `RATE_LIMITED` error; the gateway's own codes, which sit in
/// A2A's reserved range, become -32600.
pub fn from_gateway_refusal(e: &RpcError) -> RpcError {
    let mut out = if e.code == code::RATE_LIMITED {
        let retry_after_ms = e
            .data
            .as_deref()
            .and_then(|d| d.get("retry_after_ms"))
            .cloned()
            .unwrap_or(json!(1000));
        let payload = aap_error_retryable(
            ErrorCode::RateLimited,
            &e.message,
            Some(json!({"retry_after_ms": retry_after_ms})),
            true,
        );
        aap_rpc_error(&payload)
    } else if (-32099..=-32001).contains(&e.code) {
        RpcError::a2a(code::INVALID_REQUEST, e.message.clone())
    } else {
        RpcError::a2a(e.code, e.message.clone())
    };
    out.http_status = e.http_status;
    out.headers = e.headers.clone();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aap::error::aap_error;

    #[test]
    fn extension_error_names_uri_and_header() {
        let e = extension_required();
        assert_eq!(e.code, -32008);
        assert!(e.message.contains(EXTENSION_URI) && e.message.contains("A2A-Extensions"));
        let info = &e.data.as_deref().unwrap()[0];
        assert_eq!(info["domain"], "a2a-protocol.org");
        assert_eq!(info["reason"], "EXTENSION_SUPPORT_REQUIRED");
        assert_eq!(info["metadata"]["extensionUri"], EXTENSION_URI);
        assert_eq!(info["metadata"]["requiredHeader"], "A2A-Extensions");
    }

    #[test]
    fn aap_errors_take_the_draft_array_shape() {
        let payload = aap_error(
            ErrorCode::SchemaValidationFailed,
            "bad",
            Some(
                json!({"errors": [{"path": "/filters/year_min", "keyword": "type", "error": "not an integer"}]}),
            ),
        );
        let e = aap_rpc_error(&payload);
        assert_eq!((e.http_status, e.code), (200, -32602));
        let data = e.data.as_deref().unwrap().as_array().unwrap().clone();
        assert_eq!(data[0]["domain"], "autoagentprotocol.org");
        assert_eq!(data[0]["reason"], "SCHEMA_VALIDATION_FAILED");
        assert_eq!(data[0]["metadata"]["retryable"], "false");
        assert_eq!(data[1]["fieldViolations"][0]["field"], "/filters/year_min");
        assert_eq!(data[2], payload);
        let e = aap_rpc_error(&aap_error(ErrorCode::VehicleNotFound, "none", None));
        assert_eq!(e.code, -32000);
        assert_eq!(e.data.as_deref().unwrap().as_array().unwrap().len(), 2);
        assert_eq!(aap_error_code("UNSUPPORTED_SKILL"), -32004);
    }

    #[test]
    fn gateway_refusals_leave_the_reserved_range() {
        use crate::error::Failure;
        let mut t = RpcError::of(Failure::RateLimited, "Too Many Requests")
            .with_data(json!({"retry_after_ms": 1500}));
        t.headers.push(("retry-after".into(), "2".into()));
        let a = from_gateway_refusal(&t);
        assert_eq!((a.http_status, a.code), (429, -32000));
        assert_eq!(a.headers, t.headers);
        let typed = &a.data.as_deref().unwrap()[1];
        assert_eq!(typed["code"], "RATE_LIMITED");
        assert_eq!(typed["details"]["retry_after_ms"], 1500);
        let u = from_gateway_refusal(&RpcError::of(Failure::Unauthorized, "Unauthorized"));
        assert_eq!((u.http_status, u.code), (401, -32600));
        let o = from_gateway_refusal(&RpcError::of(Failure::OriginRefused, "Forbidden"));
        assert_eq!((o.http_status, o.code), (403, -32600));
    }
}
