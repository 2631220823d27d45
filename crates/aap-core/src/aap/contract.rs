//! The shared AAP contract: every tools/call, whatever the binding or
//! backend, passes through [`Contract::execute`]: argument validation,
//! consent, quota, idempotency, the backend call and result validation.

use super::arguments::Arguments;
use super::error::{aap_error, field_error, in_flight_error, is_aap_error, ErrorCode};
use super::payload::Payload;
use super::schemas::SchemaSet;
use super::skill::Skill;
use crate::aap::backend::{Backend, BackendError, Forward, SkillCall};
use crate::clock::parse_rfc3339;
use crate::digest::{canonical_json, sha256_hex};
use crate::json::Doc;
use crate::state::{Begin, Bucket, Claim, SharedState, Take};
use crate::trace::Phase;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Tolerated clock skew for `consent.granted_at` in the future.
const CONSENT_SKEW: time::Duration = time::Duration::minutes(5);
/// How long a duplicate waits for a concurrent original to finish.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone)]
pub struct ContractConfig {
    pub tenant: String,
    pub idempotency_ttl: Duration,
    /// Skill-level quotas, e.g. leads per caller per hour.
    pub quotas: Vec<(Skill, Bucket)>,
}

/// What a tools/call produced.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    pub payload: Payload,
    pub is_error: bool,
    /// For logs/metrics: `ok`, an AAP error code, `replay`.
    pub outcome: String,
}

impl ToolOutcome {
    fn from_payload(payload: Value) -> Self {
        let is_error = is_aap_error(&payload);
        let outcome = Self::outcome_of(is_error, payload.get("code").and_then(Value::as_str));
        ToolOutcome {
            payload: Payload::Tree(payload),
            is_error,
            outcome,
        }
    }

    /// `ok`, or an `aap.error`'s code (`INTERNAL_ERROR` if it has none).
    fn outcome_of(is_error: bool, code: Option<&str>) -> String {
        match (is_error, code) {
            (false, _) => "ok".to_owned(),
            (true, Some(code)) => code.to_owned(),
            (true, None) => "INTERNAL_ERROR".to_owned(),
        }
    }
    fn error(code: ErrorCode, message: &str, details: Option<Value>) -> Self {
        Self::from_payload(aap_error(code, message, details))
    }
}

/// A backend fault the MCP layer reports as a protocol error (502/504).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamFault {
    Unavailable,
    /// The upstream refused the gateway's credential (HTTP 401/403); nothing was executed.
    CredentialsRefused,
    Timeout,
    /// The upstream answered an MCP protocol error; it reaches the client
    /// as that JSON-RPC error.
    Protocol(crate::aap::backend::ProtocolError),
}

#[derive(Debug)]
pub struct Contract {
    pub cfg: ContractConfig,
    pub schemas: Arc<SchemaSet>,
    pub backend: Arc<dyn Backend>,
    pub state: Arc<dyn SharedState>,
}

impl Contract {
    pub async fn execute(
        &self,
        skill: Skill,
        args: &Arguments<'_>,
        caller: &str,
        forward: &Forward,
    ) -> Result<ToolOutcome, UpstreamFault> {
        let trace = forward.trace.as_deref();
        if let Some(t) = trace {
            t.begin(Phase::Validation);
        }
        let rejection = check_tool_arguments(&self.schemas, skill, args);
        if let Some(t) = trace {
            t.end(Phase::Validation);
        }
        if let Some(rejection) = rejection {
            return Ok(rejection);
        }
        if skill == Skill::LeadSubmit {
            return self.submit_lead(args, caller, forward).await;
        }
        if let Some(limited) = self.check_quota(skill, caller, forward).await {
            return Ok(limited);
        }
        self.call_backend(skill, args, caller, None, forward).await
    }

    async fn check_quota(
        &self,
        skill: Skill,
        caller: &str,
        forward: &Forward,
    ) -> Option<ToolOutcome> {
        let (_, bucket) = self.cfg.quotas.iter().find(|(s, _)| *s == skill)?;
        let key = format!("quota:{}:{}:{}", self.cfg.tenant, skill.id(), caller);
        match self.state.take(&key, *bucket).await {
            Ok(Take::Allowed) => None,
            Ok(Take::Limited { retry_after_ms }) => Some(ToolOutcome::error(
                ErrorCode::RateLimited,
                &format!(
                    "The {} quota for this caller is used up; retry later.",
                    skill.id()
                ),
                Some(
                    json!({"retry_after_ms": retry_after_ms, "limit": bucket.capacity, "window_seconds": bucket.per.as_secs()}),
                ),
            )),
            // Quota state unavailable: fail open for reads, closed for writes.
            Err(e) => {
                tracing::warn!(tenant = %self.cfg.tenant, correlation_id = %forward.correlation_id, error = %e, "quota state unavailable");
                (!skill.is_read()).then(|| {
                    ToolOutcome::error(
                        ErrorCode::InternalError,
                        "The quota service is unavailable; retry shortly.",
                        None,
                    )
                })
            }
        }
    }

    async fn submit_lead(
        &self,
        arguments: &Arguments<'_>,
        caller: &str,
        forward: &Forward,
    ) -> Result<ToolOutcome, UpstreamFault> {
        let args = arguments.value();
        let key = args
            .get("idempotency_key")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let record =
            sha256_hex(format!("idem\0{}\0{}\0{}", self.cfg.tenant, caller, key).as_bytes());
        let fingerprint = lead_fingerprint(args);
        // Records written before RFC 8785 fingerprints hold the older one;
        // a retry within their retention matches either.
        let legacy = sha256_hex(canonical_json(args).as_bytes());
        let fingerprints = [fingerprint.as_str(), legacy.as_str()];
        let ttl = self.cfg.idempotency_ttl;
        let resend_ok = self.backend.dedupes_leads();
        let deadline = tokio::time::Instant::now() + IN_FLIGHT_WAIT;
        let claim = loop {
            let begin = match self
                .state
                .idem_begin(&record, &fingerprints, ttl, resend_ok)
                .await
            {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(tenant = %self.cfg.tenant, correlation_id = %forward.correlation_id, error = %e, "idempotency store unavailable; lead refused");
                    return Ok(nothing_sent());
                }
            };
            match begin {
                Begin::Replay(result) => {
                    let mut out = ToolOutcome::from_payload(result);
                    if !out.is_error {
                        out.outcome = "replay".into();
                    }
                    return Ok(out);
                }
                Begin::Conflict => {
                    return Ok(ToolOutcome::error(
                        ErrorCode::IdempotencyConflict,
                        "This idempotency_key was already used with a different lead; use a new key for a new lead.",
                        Some(json!({"errors": [field_error("/idempotency_key", "idempotency", "key reused with a different payload",
                            "generate a new idempotency_key for a different lead, or resend the original payload unchanged")]})),
                    ))
                }
                Begin::InFlight => {
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(ToolOutcome::from_payload(in_flight_error()));
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Begin::Unknown => {
                    tracing::warn!(
                        tenant = %self.cfg.tenant,
                        correlation_id = %forward.correlation_id,
                        idempotency_ref = %record,
                        "lead with an interrupted attempt of unknown outcome; not resent"
                    );
                    return Ok(ToolOutcome::error(
                        ErrorCode::OutcomeUnknown,
                        "An earlier attempt with this idempotency_key was interrupted after the gateway began sending the lead; whether it reached the dealer is unknown. It will not be sent again automatically.",
                        Some(json!({
                            "idempotency_ref": record,
                            "correction": "do not resend this lead with a new idempotency_key; contact the dealership to confirm it, or ask the gateway operator to resolve this idempotency_ref",
                            "resolution": "operator: POST /idempotency/resolve on the admin listener with ref=<idempotency_ref> and lead_id=<the dealer's lead id> (it arrived) or release=true (it did not)",
                        })),
                    ));
                }
                Begin::Claimed(c) | Begin::Resend(c) => break c,
            }
        };
        if let Some(limited) = self.check_quota(Skill::LeadSubmit, caller, forward).await {
            self.abandon(&record, &claim, forward).await;
            return Ok(limited);
        }
        // Intent before anything leaves: a crash from here on is an
        // interrupted attempt of unknown outcome, never silently re-run. A
        // backend that commits the lead with the claim's completion sends
        // nothing outside that commit: no intent to record.
        let intent = if self.backend.commits_with_claim() {
            Ok(true)
        } else {
            self.state.idem_intent(&record, &claim).await
        };
        match intent {
            Ok(true) => {}
            Ok(false) => {
                // The claim was taken over (its lease passed): another attempt
                // owns the key now, and this one sent nothing.
                return Ok(ToolOutcome::from_payload(in_flight_error()));
            }
            Err(e) => {
                tracing::error!(tenant = %self.cfg.tenant, correlation_id = %forward.correlation_id, error = %e, "idempotency intent not recorded; lead refused");
                self.abandon(&record, &claim, forward).await;
                return Ok(nothing_sent());
            }
        }
        let result = self
            .call_backend(
                Skill::LeadSubmit,
                arguments,
                caller,
                Some((&record, &claim)),
                forward,
            )
            .await;
        match &result {
            Ok(out)
                if !out.is_error
                    || !out
                        .payload
                        .to_value()
                        .get("retryable")
                        .and_then(Value::as_bool)
                        .unwrap_or(false) =>
            {
                if let Err(e) = self
                    .state
                    .idem_complete(&record, &fingerprint, &out.payload.to_value(), ttl)
                    .await
                {
                    tracing::error!(tenant = %self.cfg.tenant, correlation_id = %forward.correlation_id, error = %e, "idempotency completion not recorded");
                }
            }
            // An internal error upstream may come after the lead was stored,
            // and a timeout may have let it arrive: the outcome is unknown.
            Err(UpstreamFault::Timeout) => self.interrupt(&record, &claim, forward).await,
            Err(UpstreamFault::Protocol(e)) if e.code == -32603 => {
                self.interrupt(&record, &claim, forward).await
            }
            // Retryable answers, certain non-delivery and a refused request
            // free the key.
            Ok(_)
            | Err(
                UpstreamFault::Unavailable
                | UpstreamFault::CredentialsRefused
                | UpstreamFault::Protocol(_),
            ) => self.abandon(&record, &claim, forward).await,
        }
        result
    }

    async fn abandon(&self, record: &str, claim: &Claim, forward: &Forward) {
        if let Err(e) = self.state.idem_abandon(record, claim).await {
            tracing::error!(tenant = %self.cfg.tenant, correlation_id = %forward.correlation_id, error = %e, "idempotency release not recorded");
        }
    }

    async fn interrupt(&self, record: &str, claim: &Claim, forward: &Forward) {
        if let Err(e) = self.state.idem_interrupt(record, claim).await {
            tracing::error!(tenant = %self.cfg.tenant, correlation_id = %forward.correlation_id, error = %e, "idempotency interruption not recorded");
        }
    }

    async fn call_backend(
        &self,
        skill: Skill,
        args: &Arguments<'_>,
        caller: &str,
        idem: Option<(&str, &Claim)>,
        forward: &Forward,
    ) -> Result<ToolOutcome, UpstreamFault> {
        let call = SkillCall {
            tenant: &self.cfg.tenant,
            skill,
            request: args,
            caller,
            idempotency_ref: idem.map(|(r, _)| r),
            claim: idem.map(|(_, c)| c),
            forward,
        };
        let started = std::time::Instant::now();
        let trace = forward.trace.as_deref();
        let answer = answer_priming(self.backend.call(call), || {
            self.schemas.prime_result(skill);
        })
        .await;
        if let Some(t) = trace {
            t.record(Phase::Backend, started);
        }
        let (tenant, cid) = (self.cfg.tenant.as_str(), forward.correlation_id.as_str());
        crate::metrics::METRICS
            .upstream_latency
            .with_label_values(&[
                crate::metrics::tenant_label(tenant),
                self.backend.kind(),
                skill.id(),
            ])
            .observe(started.elapsed().as_secs_f64());
        let payload = match answer {
            Ok(p) => p,
            Err(BackendError::Unavailable(why)) => {
                tracing::warn!(tenant, correlation_id = cid, backend = self.backend.kind(), skill = skill.id(), reason = %why, "backend unavailable");
                return Err(UpstreamFault::Unavailable);
            }
            Err(BackendError::CredentialsRefused(why)) => {
                tracing::error!(tenant, correlation_id = cid, backend = self.backend.kind(), skill = skill.id(), reason = %why, "backend refused the gateway's credentials; fix the upstream credential in the configuration");
                return Err(UpstreamFault::CredentialsRefused);
            }
            Err(BackendError::Timeout(why)) => {
                tracing::warn!(tenant, correlation_id = cid, backend = self.backend.kind(), skill = skill.id(), reason = %why, "backend timeout");
                return Err(UpstreamFault::Timeout);
            }
            Err(BackendError::InvalidResponse(why)) => {
                tracing::error!(tenant, correlation_id = cid, backend = self.backend.kind(), skill = skill.id(), reason = %why, "backend answered garbage");
                return Ok(upstream_invalid(skill));
            }
            Err(BackendError::Protocol(e)) => {
                tracing::warn!(
                    tenant,
                    correlation_id = cid,
                    backend = self.backend.kind(),
                    skill = skill.id(),
                    code = e.code,
                    "upstream refused the call with an MCP error"
                );
                return Err(UpstreamFault::Protocol(e));
            }
        };
        if let Some(t) = trace {
            t.begin(Phase::ResultValidation);
        }
        let outcome = self.checked_result(skill, payload, cid);
        if let Some(t) = trace {
            t.end(Phase::ResultValidation);
        }
        Ok(outcome)
    }

    /// The backend's payload checked against the skill's response schema.
    fn checked_result(&self, skill: Skill, payload: Payload, cid: &str) -> ToolOutcome {
        let payload = match payload {
            Payload::Tree(v) => v,
            Payload::Doc(doc) => match self.checked_doc(skill, doc, cid) {
                Ok(outcome) => return outcome,
                Err(Some(tree)) => tree,
                Err(None) => return upstream_invalid(skill),
            },
        };
        if let Err(errors) = self.schemas.validate_result(skill, &payload) {
            self.log_invalid_result(skill, &errors, cid);
            return upstream_invalid(skill);
        }
        ToolOutcome::from_payload(payload)
    }

    /// Validate a payload that arrived as JSON text (read into a [`Doc`],
    /// no `Value` built) and pass the text on. `Err(Some(tree))` hands it
    /// back as a tree when its numbers need normalizing (`18999.0` becomes
    /// `18999`, which changes the text) so the caller takes the tree path;
    /// `Err(None)` means it is not a valid result.
    fn checked_doc(&self, skill: Skill, doc: Doc, cid: &str) -> Result<ToolOutcome, Option<Value>> {
        if doc.has_integral_float() {
            let mut tree = doc.to_value();
            crate::aap::backend::normalize_numbers(&mut tree);
            return Err(Some(tree));
        }
        if !self.schemas.result_holds(skill, &doc) {
            // Cold path: the tree gives the same located errors as above.
            let errors = self
                .schemas
                .validate_result(skill, &doc.to_value())
                .err()
                .unwrap_or_default();
            self.log_invalid_result(skill, &errors, cid);
            return Err(None);
        }
        let is_error = doc.type_name() == Some(crate::aap::error::ERROR_TYPE);
        let code = doc.root().member("code");
        let outcome = ToolOutcome::outcome_of(is_error, code.and_then(|c| c.as_str()));
        Ok(ToolOutcome {
            payload: Payload::Doc(doc),
            is_error,
            outcome,
        })
    }

    fn log_invalid_result(&self, skill: Skill, errors: &[Value], cid: &str) {
        // Log the locations only: the payload may hold customer data.
        let paths: Vec<&str> = errors
            .iter()
            .filter_map(|e| e.get("path").and_then(Value::as_str))
            .take(10)
            .collect();
        tracing::error!(
            tenant = %self.cfg.tenant,
            correlation_id = cid,
            backend = self.backend.kind(),
            skill = skill.id(),
            ?paths,
            "backend result failed its schema"
        );
    }
}

/// Await a backend's answer, running `prime` once the call is under way: when the first poll
/// leaves it waiting (the request is out, the answer is not in), the worker's wait is spent
/// priming the result path (`crate::aap::prime`). An answer ready at once is not delayed.
async fn answer_priming<F: std::future::Future>(call: F, prime: impl FnOnce()) -> F::Output {
    let mut call = std::pin::pin!(call);
    match std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await {
        std::task::Poll::Ready(answer) => answer,
        std::task::Poll::Pending => {
            prime();
            call.await
        }
    }
}

/// [`check_arguments`] as the gateway runs it: arguments that are plainly
/// fine (a read's object of the right type that holds its schema as a
/// [`Doc`]) pass without a `Value`; anything else, and every lead, takes
/// the `Value` path, which alone words the rejection.
pub fn check_tool_arguments(
    schemas: &SchemaSet,
    skill: Skill,
    args: &Arguments<'_>,
) -> Option<ToolOutcome> {
    let root = args.doc().root();
    let plainly_fine = skill != Skill::LeadSubmit
        && root.is_object()
        && root
            .member("type")
            .is_none_or(|t| t.as_str() == Some(skill.request_type()))
        && schemas.request_holds(skill, args.doc());
    if plainly_fine {
        return None;
    }
    check_arguments(schemas, skill, args.value())
}

/// Schema and consent checks of tool arguments, without any state or
/// backend; `Some` is the typed rejection. Public so the fuzz targets can
/// drive it directly.
pub fn check_arguments(schemas: &SchemaSet, skill: Skill, args: &Value) -> Option<ToolOutcome> {
    if !args.is_object() {
        return Some(ToolOutcome::error(
            ErrorCode::SchemaValidationFailed,
            "Tool arguments must be a JSON object (the typed AAP request).",
            Some(
                json!({"errors": [field_error("", "type", "arguments are not an object",
                &format!("send an object with \"type\": \"{}\"", skill.request_type()))]}),
            ),
        ));
    }
    match args.get("type") {
        Some(t) if t != skill.request_type() => {
            return Some(ToolOutcome::error(
                ErrorCode::SchemaValidationFailed,
                &format!(
                    "{} takes requests of type {}.",
                    skill.tool_name(),
                    skill.request_type()
                ),
                Some(
                    json!({"errors": [field_error("/type", "const", "payload type does not match the tool",
                    &format!("set \"type\" to \"{}\"", skill.request_type()))]}),
                ),
            ))
        }
        _ => {}
    }
    if skill == Skill::LeadSubmit && args.get("consent").is_none() {
        return Some(ToolOutcome::error(
            ErrorCode::ContactConsentRequired,
            "A lead needs the buyer's explicit contact consent; no lead was sent.",
            Some(
                json!({"errors": [field_error("/consent", "required", "missing contact consent",
                "ask the buyer for consent and add consent {granted_at, allowed_channels, consent_text, scope: [\"lead_submission\"]}")]}),
            ),
        ));
    }
    if let Err(errors) = schemas.validate_request(skill, args) {
        let (code, message) = classify(&errors);
        return Some(ToolOutcome::error(
            code,
            message,
            Some(json!({ "errors": errors })),
        ));
    }
    if skill == Skill::LeadSubmit {
        return check_consent(args);
    }
    None
}

/// The lead's idempotency fingerprint: SHA-256 of its RFC 8785 (JCS)
/// canonical form, so `1.0` and `1`, or any member order, are one payload.
pub fn lead_fingerprint(args: &Value) -> String {
    match serde_json_canonicalizer::to_vec(args) {
        Ok(bytes) => sha256_hex(&bytes),
        // Not reachable for parsed JSON (no NaN or infinities); fall back to
        // the sorted-key form rather than refusing the lead.
        Err(_) => sha256_hex(canonical_json(args).as_bytes()),
    }
}

/// The lead was refused before anything was sent (state unavailable).
fn nothing_sent() -> ToolOutcome {
    ToolOutcome::error(
        ErrorCode::InternalError,
        "The lead could not be recorded safely; nothing was sent. Retry with the same idempotency_key.",
        None,
    )
}

fn upstream_invalid(skill: Skill) -> ToolOutcome {
    ToolOutcome::error(
        ErrorCode::UpstreamInvalidResponse,
        &format!("The dealer system returned an answer that does not match the {} contract; it was withheld.", skill.response_type()),
        None,
    )
}

/// Pick the most specific code for a set of schema violations.
fn classify(errors: &[Value]) -> (ErrorCode, &'static str) {
    let path = |e: &Value| {
        e.get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let keyword = |e: &Value| {
        e.get("keyword")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let all = |f: &dyn Fn(&Value) -> bool| !errors.is_empty() && errors.iter().all(f);
    if all(&|e| path(e).starts_with("/consent")) {
        (
            ErrorCode::InvalidConsent,
            "The consent record is malformed; no lead was sent.",
        )
    } else if all(&|e| path(e) == "/filters" && keyword(e) == "additionalProperties") {
        (
            ErrorCode::UnsupportedFilter,
            "The search uses filters this dealer does not support.",
        )
    } else if all(&|e| path(e).ends_with("/condition")) {
        (
            ErrorCode::InvalidCondition,
            "A vehicle condition uses the wrong vocabulary.",
        )
    } else if all(&|e| keyword(e) == "required") {
        (
            ErrorCode::MissingRequiredField,
            "A required field is missing.",
        )
    } else {
        (
            ErrorCode::SchemaValidationFailed,
            "The arguments do not match the tool's inputSchema.",
        )
    }
}

/// Consent rules beyond the schema: timing and channels.
fn check_consent(args: &Value) -> Option<ToolOutcome> {
    let consent = args.get("consent")?;
    let now = time::OffsetDateTime::now_utc();
    let invalid = |path: &str, error: &str, correction: &str| {
        Some(ToolOutcome::error(
            ErrorCode::InvalidConsent,
            "The consent record cannot be used; no lead was sent.",
            Some(json!({"errors": [field_error(path, "consent", error, correction)]})),
        ))
    };
    match consent
        .get("granted_at")
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
    {
        Some(t) if t > now + CONSENT_SKEW => {
            return invalid(
                "/consent/granted_at",
                "consent is dated in the future",
                "use the time the buyer actually agreed, with a timezone offset",
            );
        }
        None => {
            return invalid(
                "/consent/granted_at",
                "not an RFC 3339 date-time",
                "send e.g. 2026-04-30T11:05:00Z",
            )
        }
        _ => {}
    }
    if let Some(exp) = consent.get("expires_at").and_then(Value::as_str) {
        match parse_rfc3339(exp) {
            Some(t) if t <= now => {
                return invalid(
                    "/consent/expires_at",
                    "consent has expired",
                    "ask the buyer to consent again and send the new grant",
                );
            }
            None => {
                return invalid(
                    "/consent/expires_at",
                    "not an RFC 3339 date-time",
                    "send e.g. 2027-04-30T11:05:00Z",
                )
            }
            _ => {}
        }
    }
    let allowed: Vec<&str> = consent
        .get("allowed_channels")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let customer = args.get("customer");
    let has = |k: &str| customer.and_then(|c| c.get(k)).is_some();
    let channel_ok = |ch: &str| match ch {
        "email" => has("email") && allowed.contains(&"email"),
        "phone" => has("phone") && allowed.contains(&"phone"),
        "sms" => has("phone") && allowed.contains(&"sms"),
        _ => false,
    };
    let preferred = customer
        .and_then(|c| c.get("preferred_contact"))
        .and_then(Value::as_str);
    let usable = match preferred {
        Some("any") | None => ["email", "phone", "sms"].iter().any(|c| channel_ok(c)),
        Some(p) => channel_ok(p),
    };
    if !usable {
        return Some(ToolOutcome::error(
            ErrorCode::ContactConsentRequired,
            "The buyer has not allowed contact through the channel this lead would need; no lead was sent.",
            Some(json!({"errors": [field_error("/consent/allowed_channels", "consent",
                "no allowed channel matches the customer's contact details and preferred_contact",
                "include the preferred channel in allowed_channels (with the matching customer email or phone), or change preferred_contact to a channel the buyer allowed")]})),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// A call that waits primes once, after its first poll (the request is out); a call whose
    /// answer is ready at once is not delayed by priming.
    #[tokio::test]
    async fn a_waiting_call_primes_once_and_a_ready_one_not_at_all() {
        let primed = std::cell::Cell::new(0);
        let answer = answer_priming(std::future::ready(7), || primed.set(primed.get() + 1)).await;
        assert_eq!((answer, primed.get()), (7, 0));
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let waiting = async {
            let v = rx.await.unwrap();
            v + 1
        };
        let answer = answer_priming(waiting, || {
            primed.set(primed.get() + 1);
            // The answer arrives while priming runs: it is not lost.
            tx.send(41).unwrap();
        })
        .await;
        assert_eq!((answer, primed.get()), (42, 1));
    }

    #[test]
    fn fingerprint_is_rfc8785_canonical() {
        // Integral floats, member order, escapes and exponents that RFC 8785
        // writes one way; serde_json here keeps insertion order.
        let same = [
            (r#"{"x":1.0,"a":"é"}"#, r#"{"a":"\u00e9","x":1}"#),
            (r#"{"n":1e3,"m":[0.5,-0.0]}"#, r#"{"m":[5e-1,0],"n":1000}"#),
            (
                r#"{"b":{"z":2,"y":1},"a":null}"#,
                r#"{"a":null,"b":{"y":1,"z":2.00}}"#,
            ),
        ];
        for (a, b) in same {
            assert_eq!(
                lead_fingerprint(&parsed(a)),
                lead_fingerprint(&parsed(b)),
                "{a} vs {b}"
            );
        }
        assert_ne!(
            lead_fingerprint(&parsed(r#"{"x":1}"#)),
            lead_fingerprint(&parsed(r#"{"x":"1"}"#))
        );
        // The old sorted-key form told these apart (so a retry that wrote 1.0
        // got IDEMPOTENCY_CONFLICT).
        assert_ne!(
            canonical_json(&parsed(r#"{"x":1.0}"#)),
            canonical_json(&parsed(r#"{"x":1}"#))
        );
        // Most leads carry no floats: both forms agree, so a record written
        // before the change still matches on its first fingerprint.
        let plain = parsed(r#"{"b":"x","a":[1,2,{"d":true,"c":null}]}"#);
        assert_eq!(
            serde_json_canonicalizer::to_string(&plain).unwrap(),
            canonical_json(&plain)
        );
    }
}
