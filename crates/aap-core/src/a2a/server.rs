//! The inbound A2A 1.0 JSON-RPC binding of a tenant's endpoint: `SendMessage` with one DataPart
//! carrying the typed AAP request, run through the endpoint's contract, answered as an A2A Message.
//!
//! One contract, two bindings: the skill subset, per-skill scopes, validators, consent, quotas and
//! the idempotency store are the tenant's [`Endpoint`]'s (a lead's key is scoped by tenant and
//! verified caller, never by binding). Order of checks, each failure answering at once:
//! Origin (403, the endpoint's) → HTTP method (405) → Content-Type (415) → Accept (406) → body
//! size (413, the endpoint's) →
//! JSON (-32700) → envelope (-32600) → `A2A-Version` (-32009) → method (-32601; -32004/-32003
//! for A2A operations outside the AAP profile) → `A2A-Extensions` (-32008) → params (-32602) →
//! the data part's media types (-32005) → skill (AAP `UNSUPPORTED_SKILL`) → scope → contract.
//! JSON-RPC errors are answered with HTTP 200, as A2A JSON-RPC servers do.

use super::{
    aap_rpc_error, extension_required, from_gateway_refusal, version_not_supported, A2aFailure,
    EXTENSIONS_HEADER, EXTENSION_URI, PROTOCOL_VERSION, VERSION_HEADER,
};
use crate::aap::arguments::Arguments;
use crate::aap::backend::normalize_numbers;
use crate::aap::contract::{ToolOutcome, UpstreamFault};
use crate::aap::error::{aap_error, aap_error_retryable, field_error, ErrorCode};
use crate::aap::skill::Skill;
use crate::auth::Caller;
use crate::context::RequestCtx;
use crate::endpoint::{Binding, Endpoint};
use crate::error::{Failure, RpcError};
use crate::exchange::{HttpRequest, HttpResponse};
use crate::json::Doc;
use crate::mcp::jsonrpc::{parse_json, result_body};
use crate::mcp::media::{is_json_content_type, negotiate, ResponseMedia};
use serde_json::{json, Map, Value};

/// A2A 1.0 operations the AAP profile leaves out (answered -32004).
const UNSUPPORTED_OPERATIONS: [&str; 6] = [
    "SendStreamingMessage",
    "SubscribeToTask",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "GetExtendedAgentCard",
];
/// A2A 1.0 push-notification operations (answered -32003: no push here).
const PUSH_OPERATIONS: [&str; 4] = [
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
];

/// The A2A binding (it has no settings of its own: everything it serves with is the endpoint's).
#[derive(Debug, Clone, Copy, Default)]
pub struct A2a;

impl Binding for A2a {
    const NAME: &'static str = "a2a";

    /// HTTP method (405, `Allow: POST`), then `Content-Type` (415) and `Accept` (406), in the
    /// gateway's vocabulary (admission shares it); [`Binding::refusal`] reshapes it for the A2A
    /// client.
    fn head_rules(&self, req: &HttpRequest) -> Option<RpcError> {
        if req.method != "POST" {
            let mut e = RpcError::of(
                Failure::MethodNotAllowed,
                "Method Not Allowed: this A2A endpoint accepts POST (JSON-RPC SendMessage)",
            );
            e.headers.push(("allow".into(), "POST".into()));
            return Some(e);
        }
        if !is_json_content_type(req.header_str("content-type")) {
            return Some(RpcError::of(
                Failure::UnsupportedMediaType,
                "Unsupported Media Type: Content-Type must be application/json",
            ));
        }
        // An `Accept` of `text/event-stream` alone is decided by the method once the body is
        // read (see `serve`): a streaming client asking for `SendStreamingMessage` is owed the
        // A2A UnsupportedOperationError (-32004) the card's `streaming: false` promises, not a
        // 406.
        if negotiate(req.header_str("accept")).is_none() {
            return Some(not_acceptable());
        }
        None
    }

    /// The A2A error a gateway refusal maps to (`from_gateway_refusal`), with the body's id
    /// when it is a valid JSON-RPC request.
    fn refusal(&self, e: &RpcError, req: &HttpRequest, id_depth: usize) -> HttpResponse {
        refused(e, req, id_depth)
    }

    async fn serve(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
        caller: &Caller<'_>,
        out: &mut RequestCtx,
    ) -> HttpResponse {
        serve(ep, req, caller, out).await
    }
}

fn not_acceptable() -> RpcError {
    RpcError::of(
        Failure::NotAcceptable,
        "Not Acceptable: this A2A endpoint answers application/json",
    )
}

/// The A2A 1.0 operations a client asks for with `Accept: text/event-stream` (answered -32004
/// like the other operations outside the profile, framed as one server-sent event).
const STREAMING_OPERATIONS: [&str; 2] = ["SendStreamingMessage", "SubscribeToTask"];

/// A JSON-RPC answer as the one event of a `text/event-stream` body (HTTP 200: the status of
/// a stream is sent before its events), for a client that accepts only a stream.
fn as_event_stream(resp: HttpResponse) -> HttpResponse {
    let mut body = Vec::with_capacity(resp.body.len() + 8);
    body.extend_from_slice(b"data: ");
    body.extend_from_slice(&resp.body);
    body.extend_from_slice(b"\n\n");
    let mut out = HttpResponse::new(200).with_header("content-type", "text/event-stream");
    out.headers.extend(
        resp.headers
            .into_iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("content-type")),
    );
    out.body = body.into();
    out
}

/// A refusal decided before the body is interpreted (the head, admission,
/// the per-skill scope), as the A2A client gets it; the id is the body's
/// when it is a valid JSON-RPC request (never read at depth 0).
fn refused(e: &RpcError, req: &HttpRequest, max_json_depth: usize) -> HttpResponse {
    let id = (max_json_depth > 0)
        .then(|| crate::mcp::jsonrpc::request_id(&req.body, max_json_depth))
        .flatten();
    respond(&from_gateway_refusal(e), id.as_ref())
}

fn respond(e: &RpcError, id: Option<&Value>) -> HttpResponse {
    let mut resp = HttpResponse::json(e.http_status, &e.to_body(id));
    resp.add_fields(e.headers.iter().cloned());
    resp
}

/// Serve one A2A request for the tenant of `ep` whose head and body size passed.
async fn serve(
    ep: &Endpoint,
    req: &HttpRequest,
    caller: &Caller<'_>,
    out: &mut RequestCtx,
) -> HttpResponse {
    let (id, body) = match envelope(req, ep.max_json_depth) {
        Ok(v) => v,
        Err(refusal) => {
            let (e, id) = *refusal;
            out.outcome = e.code.to_string();
            return respond(&e, id.as_ref());
        }
    };
    out.method = Some(body.method.clone());
    let stream_only = negotiate(req.header_str("accept")) == Some(ResponseMedia::EventStream);
    if stream_only {
        if !STREAMING_OPERATIONS.contains(&body.method.as_str()) {
            out.outcome = "406".into();
            return refused(&not_acceptable(), req, ep.max_json_depth);
        }
        // The order of `send_message`: the version first, then the method.
        let e = check_version(req).err().unwrap_or_else(|| A2aFailure::UnsupportedOperation.error(
            format!("Unsupported operation: {} is outside the AAP profile; this agent does not stream (its Agent Card says streaming: false) and serves SendMessage only", body.method),
            &[],
        ));
        out.outcome = e.code.to_string();
        return as_event_stream(respond(&e, Some(&id)));
    }
    match send_message(ep, req, caller, &body, out).await {
        Ok(result) => {
            if out.outcome.is_empty() {
                out.outcome = "ok".into();
            }
            HttpResponse::json(200, &result_body(&id, result))
                .with_header("a2a-extensions", EXTENSION_URI)
        }
        Err(e) => {
            if out.outcome.is_empty() {
                out.outcome = match e.data.as_deref().and_then(aap_code_of) {
                    Some(code) => code,
                    None => e.code.to_string(),
                };
            }
            let resp = respond(&e, Some(&id));
            if extension_activated(req) {
                resp.with_header("a2a-extensions", EXTENSION_URI)
            } else {
                resp
            }
        }
    }
}

/// The AAP code inside an error's `data` array (for the access log).
fn aap_code_of(data: &Value) -> Option<String> {
    data.as_array()?
        .iter()
        .find(|d| d.get("type").and_then(Value::as_str) == Some("aap.error"))
        .and_then(|d| d.get("code"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A JSON-RPC request: its method and params.
struct Envelope {
    method: String,
    params: Option<Map<String, Value>>,
}

/// A refused envelope: the error, and the request id when it was read.
type EnvelopeError = (RpcError, Option<Value>);

/// Parse the body (strictly: duplicate keys and excess depth refused) and
/// check the JSON-RPC 2.0 request envelope. Errors carry the id when known.
fn envelope(req: &HttpRequest, max_depth: usize) -> Result<(Value, Envelope), Box<EnvelopeError>> {
    let value = parse_json(&req.body, max_depth)
        .map_err(|e| Box::new((A2aFailure::Parse.error(e.message, &[]), None)))?;
    let invalid = |m: &str, id: Option<Value>| {
        Err(Box::new((
            A2aFailure::InvalidRequest.error(format!("Invalid Request: {m}"), &[]),
            id,
        )))
    };
    let Value::Object(mut obj) = value else {
        return invalid(
            "the body must be one JSON-RPC 2.0 request object (batches are not supported)",
            None,
        );
    };
    let id = match obj.remove("id") {
        Some(id @ Value::String(_)) => id,
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n),
        _ => return invalid(
            "\"id\" must be a string or an integer (A2A calls are requests, never notifications)",
            None,
        ),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be the string \"2.0\"", Some(id));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        _ => return invalid("\"method\" must be a string", Some(id)),
    };
    let params = match obj.remove("params") {
        None => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => return invalid("\"params\" must be an object", Some(id)),
    };
    Ok((id, Envelope { method, params }))
}

/// The activation headers: `A2A-Version` must be 1.0 (missing or empty
/// means 0.3), and `A2A-Extensions` must list the exact AAP URI.
fn check_version(req: &HttpRequest) -> Result<(), RpcError> {
    let values: Vec<&str> = req
        .header_all(VERSION_HEADER)
        .map(|v| std::str::from_utf8(v).unwrap_or("?").trim())
        .collect();
    match values.as_slice() {
        [v] if *v == PROTOCOL_VERSION => Ok(()),
        [] => Err(version_not_supported("")),
        [v] => Err(version_not_supported(if v.len() > 16 { "?" } else { v })),
        _ => Err(A2aFailure::InvalidRequest.error(
            format!("Invalid Request: {VERSION_HEADER} appears more than once"),
            &[],
        )),
    }
}

fn extension_activated(req: &HttpRequest) -> bool {
    req.header_all(EXTENSIONS_HEADER)
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .any(|uri| uri.trim() == EXTENSION_URI)
}

fn invalid_params(message: &str) -> RpcError {
    A2aFailure::InvalidParams.error(format!("Invalid params: {message}"), &[])
}

/// The request's media-type stem for `skill` (`vehicle-detail`, or the
/// schema stem `inventory-vehicle` as an alias).
fn request_stem(skill: Skill, media_type: &str) -> Option<&'static str> {
    [skill.media_stem(), skill.schema_stem()]
        .into_iter()
        .find(|stem| media_type == format!("application/vnd.autoagent.{stem}-request+json"))
}

/// The checks of the A2A envelope, then the contract.
async fn send_message(
    ep: &Endpoint,
    req: &HttpRequest,
    caller: &Caller<'_>,
    body: &Envelope,
    out: &mut RequestCtx,
) -> Result<Value, RpcError> {
    check_version(req)?;
    match body.method.as_str() {
        "SendMessage" => {}
        m if UNSUPPORTED_OPERATIONS.contains(&m) => {
            return Err(A2aFailure::UnsupportedOperation.error(
                format!("Unsupported operation: {m} is outside the AAP profile; this agent serves SendMessage only (no streaming, tasks or extended card)"),
                &[],
            ))
        }
        m if PUSH_OPERATIONS.contains(&m) => {
            return Err(A2aFailure::PushNotificationNotSupported.error(
                "Push notifications are not supported by this agent",
                &[],
            ))
        }
        _ => {
            return Err(A2aFailure::MethodNotFound.error(
                "Method not found: this A2A endpoint serves SendMessage",
                &[],
            ))
        }
    }
    if !extension_activated(req) {
        return Err(extension_required());
    }
    let params = body
        .params
        .as_ref()
        .ok_or_else(|| invalid_params("SendMessage needs params.message"))?;
    let message = params
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid_params("params.message must be a Message object"))?;
    if message.get("role").and_then(Value::as_str) != Some("ROLE_USER") {
        return Err(invalid_params("params.message.role must be ROLE_USER"));
    }
    if message
        .get("messageId")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(invalid_params(
            "params.message.messageId must be a non-empty string",
        ));
    }
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| invalid_params("params.message.parts must be a non-empty array"))?;
    // Text parts are ignored (the AAP binding says so); the request is the
    // one data part, and no other kind of part is served.
    let mut others = parts.iter().filter(|p| p.get("text").is_none());
    let (part, extra) = (others.next(), others.next());
    let Some(part) = part.filter(|p| p.get("data").is_some() && extra.is_none()) else {
        return Err(A2aFailure::ContentTypeNotSupported.error(
            "Content type not supported: the message must carry exactly one data part with the typed AAP request (mediaType application/vnd.autoagent.<skill>-request+json); text parts are ignored",
            &[],
        ));
    };
    let mut data = part.get("data").cloned().unwrap_or_default();
    // a2a-sdk peers send every number as a double (protobuf Struct):
    // `3.0` is the integer 3 here, as for answers from A2A upstreams.
    normalize_numbers(&mut data);
    let skill = match skill_of(ep, &data) {
        Ok(s) => s,
        Err(payload) => return Err(aap_rpc_error(&payload)),
    };
    out.skill = Some(skill.id());
    let media_type = part.get("mediaType").and_then(Value::as_str).unwrap_or("");
    let stem = request_stem(skill, media_type).ok_or_else(|| {
        A2aFailure::ContentTypeNotSupported.error(
            format!(
                "Content type not supported: a {} request is sent as mediaType application/vnd.autoagent.{}-request+json",
                skill.id(),
                skill.media_stem()
            ),
            &[],
        )
    })?;
    let response_type = format!("application/vnd.autoagent.{stem}-response+json");
    let accepted = params
        .get("configuration")
        .and_then(|c| c.get("acceptedOutputModes"))
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            invalid_params(&format!(
                "params.configuration.acceptedOutputModes is required; include {response_type}"
            ))
        })?;
    if !accepted.iter().any(|m| m.as_str() == Some(&response_type)) {
        return Err(A2aFailure::ContentTypeNotSupported.error(
            format!("Content type not supported: none of acceptedOutputModes is served for {}; this agent answers {response_type}", skill.id()),
            &[],
        ));
    }
    if let Err(e) = caller.authorize(skill.id()) {
        out.outcome = e.http_status.to_string();
        return Err(from_gateway_refusal(&e));
    }
    // The same document the MCP endpoint would build from tools/call
    // arguments; the text is re-read from the parsed value (depth already
    // bounded above), so the contract sees one shape whatever the binding.
    let doc = Doc::parse(&data.to_string())
        .map_err(|_| invalid_params("the data part could not be read (nested too deeply)"))?;
    let arguments = Arguments::new(&doc);
    let forward = out.forward();
    let done = ep
        .contract
        .execute(skill, &arguments, caller.scope, &forward)
        .await;
    let outcome = outcome_payload(done, skill)?;
    out.outcome = outcome.outcome.clone();
    let payload = outcome.payload.into_value();
    if outcome.is_error {
        return Err(aap_rpc_error(&payload));
    }
    let mut reply = Map::new();
    reply.insert("messageId".into(), json!(uuid::Uuid::now_v7().to_string()));
    if let Some(ctx) = message.get("contextId").filter(|c| c.is_string()) {
        reply.insert("contextId".into(), ctx.clone());
    }
    reply.insert("role".into(), json!("ROLE_AGENT"));
    reply.insert(
        "parts".into(),
        json!([{ "data": payload, "mediaType": response_type }]),
    );
    Ok(json!({ "message": reply }))
}

/// The skill a data part names by its `type` (`<skill>.request`), among the
/// tenant's; otherwise the typed AAP error to answer.
fn skill_of(ep: &Endpoint, data: &Value) -> Result<Skill, Value> {
    let Some(kind) = data.get("type").and_then(Value::as_str) else {
        return Err(aap_error(
            ErrorCode::SchemaValidationFailed,
            "The data part is not a typed AAP request.",
            Some(
                json!({"errors": [field_error("/type", "required", "an AAP request type is required",
                "set \"type\" to the skill's request type, e.g. \"inventory.search.request\"")]}),
            ),
        ));
    };
    match kind
        .strip_suffix(".request")
        .and_then(Skill::from_id)
        .filter(|s| ep.implements(*s))
    {
        Some(s) => Ok(s),
        None => Err(aap_error(
            ErrorCode::UnsupportedSkill,
            "This dealer does not implement the skill this request names.",
            Some(
                json!({"errors": [field_error("/type", "enum", "not a request type of a skill this dealer implements",
                "use one of the skills the Agent Card lists")]}),
            ),
        )),
    }
}

/// The contract's answer; a backend fault becomes the AAP error an A2A
/// client can act on (the MCP binding answers these with HTTP 502/504).
fn outcome_payload(
    done: Result<ToolOutcome, UpstreamFault>,
    skill: Skill,
) -> Result<ToolOutcome, RpcError> {
    let fault = match done {
        Ok(o) => return Ok(o),
        Err(f) => f,
    };
    let payload = match fault {
        UpstreamFault::Unavailable => aap_error(
            ErrorCode::UpstreamUnavailable,
            "The dealer system could not be reached; nothing was executed.",
            None,
        ),
        UpstreamFault::CredentialsRefused => aap_error_retryable(
            ErrorCode::UpstreamUnavailable,
            "The dealer system refused the gateway's credentials; nothing was executed. The gateway's operator must renew them; retrying does not help until then.",
            None,
            false,
        ),
        UpstreamFault::Timeout => aap_error_retryable(
            ErrorCode::OutcomeUnknown,
            "The dealer system did not answer in time; the outcome is unknown. Retry a lead only with the same idempotency_key.",
            None,
            skill.is_read(),
        ),
        UpstreamFault::Protocol(e) if e.code == crate::error::code::INVALID_PARAMS => {
            return Err(A2aFailure::InvalidParams.error(
                format!("Invalid params: the dealer system refused the request: {}", e.message),
                &[],
            ))
        }
        UpstreamFault::Protocol(e) => {
            return Err(A2aFailure::Internal.error(
                format!("Internal error: the dealer system refused the call (MCP error {})", e.code),
                &[],
            ))
        }
    };
    Ok(ToolOutcome {
        is_error: true,
        outcome: payload
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("INTERNAL_ERROR")
            .to_owned(),
        payload: payload.into(),
    })
}
