//! The typed `aap.error` payload and the codes the gateway uses.

use serde_json::{json, Map, Value};

pub const ERROR_TYPE: &str = "aap.error";
pub const ERROR_AT_TYPE: &str = "https://autoagentprotocol.org/extensions/aap/error";

/// AAP error codes (v1.1 vocabulary plus the 3.0 gateway additions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    UnsupportedSkill,
    SchemaValidationFailed,
    MissingRequiredField,
    InvalidCondition,
    VehicleNotFound,
    VehicleUnavailable,
    ContactConsentRequired,
    InvalidConsent,
    AppointmentTimeUnavailable,
    IdempotencyConflict,
    RateLimited,
    InternalError,
    InvalidCursor,
    CursorExpired,
    UnsupportedFilter,
    UpstreamUnavailable,
    UpstreamInvalidResponse,
    OutcomeUnknown,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            UnsupportedSkill => "UNSUPPORTED_SKILL",
            SchemaValidationFailed => "SCHEMA_VALIDATION_FAILED",
            MissingRequiredField => "MISSING_REQUIRED_FIELD",
            InvalidCondition => "INVALID_CONDITION",
            VehicleNotFound => "VEHICLE_NOT_FOUND",
            VehicleUnavailable => "VEHICLE_UNAVAILABLE",
            ContactConsentRequired => "CONTACT_CONSENT_REQUIRED",
            InvalidConsent => "INVALID_CONSENT",
            AppointmentTimeUnavailable => "APPOINTMENT_TIME_UNAVAILABLE",
            IdempotencyConflict => "IDEMPOTENCY_CONFLICT",
            RateLimited => "RATE_LIMITED",
            InternalError => "INTERNAL_ERROR",
            InvalidCursor => "INVALID_CURSOR",
            CursorExpired => "CURSOR_EXPIRED",
            UnsupportedFilter => "UNSUPPORTED_FILTER",
            UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
            UpstreamInvalidResponse => "UPSTREAM_INVALID_RESPONSE",
            OutcomeUnknown => "OUTCOME_UNKNOWN",
        }
    }

    /// Default `retryable` (the dealer's value wins when it sends one).
    /// `OUTCOME_UNKNOWN` is not retryable by default (an interrupted attempt
    /// whose lead may have arrived); the in-flight case says otherwise
    /// explicitly ([`in_flight_error`]).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::RateLimited | ErrorCode::InternalError | ErrorCode::UpstreamUnavailable
        )
    }
}

/// Build an `aap.error` payload. `details` must never hold customer values,
/// credentials or internals: callers pass paths and corrections only.
pub fn aap_error(code: ErrorCode, message: &str, details: Option<Value>) -> Value {
    aap_error_retryable(code, message, details, code.retryable())
}

/// How long a client should wait before retrying a key that is in flight.
pub const IN_FLIGHT_RETRY_MS: u64 = 5000;

/// `OUTCOME_UNKNOWN` for a key another attempt is executing right now: the
/// answer will be known shortly, so it is retryable (same key, after
/// `details.retry_after_ms`).
pub fn in_flight_error() -> Value {
    aap_error_retryable(
        ErrorCode::OutcomeUnknown,
        "An earlier attempt with this idempotency_key has not finished yet. Retry with the same key after retry_after_ms; do not use a new key.",
        Some(json!({"retry_after_ms": IN_FLIGHT_RETRY_MS})),
        true,
    )
}

/// `aap_error` with an explicit `retryable` (a code whose answer depends on
/// the situation, such as `OUTCOME_UNKNOWN`).
pub fn aap_error_retryable(
    code: ErrorCode,
    message: &str,
    details: Option<Value>,
    retryable: bool,
) -> Value {
    let mut obj = Map::new();
    obj.insert("@type".into(), json!(ERROR_AT_TYPE));
    obj.insert("type".into(), json!(ERROR_TYPE));
    obj.insert(
        "error_id".into(),
        json!(format!("err_{}", uuid::Uuid::now_v7().simple())),
    );
    obj.insert("code".into(), json!(code.as_str()));
    obj.insert("message".into(), json!(message));
    obj.insert("retryable".into(), json!(retryable));
    obj.insert("created_at".into(), json!(crate::clock::now_rfc3339()));
    if let Some(d) = details {
        obj.insert("details".into(), d);
    }
    Value::Object(obj)
}

/// One field-level problem: where, which rule, and how to fix it.
pub fn field_error(path: &str, keyword: &str, error: &str, correction: &str) -> Value {
    json!({ "path": path, "keyword": keyword, "error": error, "correction": correction })
}

pub fn is_aap_error(payload: &Value) -> bool {
    payload.get("type").and_then(Value::as_str) == Some(ERROR_TYPE)
}
