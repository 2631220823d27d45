//! Decoding an upstream answer: the JSON-RPC response from JSON or SSE, the AAP
//! payload of a tools/call result, and HTTP/JSON-RPC errors as `BackendError`s.

use super::sse::find_in_sse;
use crate::aap::payload::Payload;
use crate::backend::{BackendError, ProtocolError};
use crate::json;
use crate::upstream::client::Reply;
use bytes::Bytes;
use bytestring::ByteString;
use serde_json::{json, Value};
use std::borrow::Cow;

/// The JSON-RPC response with `id`, from a JSON or SSE body.
pub(super) fn rpc_message(reply: &Reply, id: &Value) -> Result<Value, BackendError> {
    if reply.is_event_stream() {
        return find_in_sse(&reply.body, id).ok_or_else(|| {
            BackendError::InvalidResponse(
                "upstream SSE stream ended without the JSON-RPC response".into(),
            )
        });
    }
    let v: Value = serde_json::from_slice(&reply.body).map_err(|_| {
        BackendError::InvalidResponse(format!(
            "upstream answered HTTP {} with a body that is not JSON",
            reply.status
        ))
    })?;
    if v.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(BackendError::InvalidResponse(
            "upstream answer is not a JSON-RPC 2.0 message".into(),
        ));
    }
    Ok(v)
}

/// Statuses that mean the upstream did not serve the call at all.
pub(super) fn check_http(reply: &Reply) -> Result<(), BackendError> {
    match reply.status {
        401 | 403 => Err(BackendError::CredentialsRefused(format!(
            "upstream {} refused the gateway's credential (HTTP {})",
            reply.peer, reply.status
        ))),
        502 | 503 => Err(BackendError::Unavailable(format!(
            "upstream {} answered HTTP {}",
            reply.peer, reply.status
        ))),
        504 => Err(BackendError::Timeout(format!(
            "upstream {} answered HTTP 504",
            reply.peer
        ))),
        _ => Ok(()),
    }
}

pub(super) fn rpc_error_text(e: &Value) -> String {
    format!(
        "{} {}",
        e.get("code").and_then(Value::as_i64).unwrap_or(0),
        e.get("message").and_then(Value::as_str).unwrap_or("")
    )
}

/// An upstream JSON-RPC error as the client will see it: code and message
/// kept (the message bounded), `data` kept when small.
pub(super) fn protocol_error(e: &Value) -> BackendError {
    let Some(code) = e.get("code").and_then(Value::as_i64) else {
        return BackendError::InvalidResponse("upstream error without a numeric code".into());
    };
    let message: String = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("upstream error")
        .chars()
        .take(500)
        .collect();
    let data = e
        .get("data")
        .filter(|d| serde_json::to_vec(d).is_ok_and(|b| b.len() <= 4096))
        .cloned();
    BackendError::Protocol(ProtocolError {
        code,
        message,
        data,
    })
}

/// The parts of a JSON tools/call answer the gateway reads, as spans of
/// the answer's text ([`crate::json::Reader`]). The text block is skipped
/// without decoding: it repeats `structuredContent` and is parsed only when
/// that is missing. Absent and `null` members read alike; a member named
/// twice is refused.
struct CallFrame<'a> {
    jsonrpc: Option<Cow<'a, str>>,
    error: Option<&'a str>,
    result: Option<CallResult<'a>>,
}

#[derive(Default)]
struct CallResult<'a> {
    result_type: Option<Cow<'a, str>>,
    /// `structuredContent` when it is an object, read into a [`json::Doc`].
    structured_content: Option<json::Doc>,
    content: Option<&'a str>,
}

/// Why a tools/call answer could not be read.
enum FrameError {
    /// The frame itself is not JSON, or not shaped like a response.
    Frame,
    /// `structuredContent` is an object that does not read as one document
    /// (for instance, it repeats a member name).
    Payload(json::Error),
}

impl<'a> CallFrame<'a> {
    fn read(body: &'a ByteString) -> Result<CallFrame<'a>, FrameError> {
        let mut r = json::Reader::shared(body);
        let mut frame = CallFrame {
            jsonrpc: None,
            error: None,
            result: None,
        };
        let mut payload_error = None;
        let read = r.known_members(["jsonrpc", "error", "result"], |r, slot| {
            match slot {
                0 => frame.jsonrpc = optional_string(r)?,
                1 => frame.error = optional_value(r)?,
                _ => frame.result = CallResult::read(r, &mut payload_error)?,
            }
            Ok(())
        });
        if let Some(e) = payload_error {
            return Err(FrameError::Payload(e));
        }
        read.and_then(|()| r.finish())
            .map_err(|_| FrameError::Frame)?;
        Ok(frame)
    }
}

impl<'a> CallResult<'a> {
    /// `payload_error` is set when `structuredContent` is the culprit
    /// rather than the frame.
    fn read(
        r: &mut json::Reader<'a>,
        payload_error: &mut Option<json::Error>,
    ) -> Result<Option<CallResult<'a>>, json::Error> {
        if r.peek() == Some(b'n') {
            return r.skip().map(|_| None);
        }
        let mut result = CallResult::default();
        r.known_members(["resultType", "structuredContent", "content"], |r, slot| {
            match slot {
                0 => result.result_type = optional_string(r)?,
                // The payload is read once, here, into a document; anything
                // but an object is skipped (the text block is read instead).
                1 if r.peek() == Some(b'{') => match r.doc() {
                    Ok(doc) => result.structured_content = Some(doc),
                    Err(e) => {
                        *payload_error = Some(e.clone());
                        return Err(e);
                    }
                },
                1 => drop(r.skip()?),
                _ => result.content = optional_value(r)?,
            }
            Ok(())
        })?;
        Ok(Some(result))
    }
}

/// A string member, or `null`.
fn optional_string<'a>(r: &mut json::Reader<'a>) -> Result<Option<Cow<'a, str>>, json::Error> {
    match r.peek() {
        Some(b'n') => r.skip().map(|_| None),
        _ => r.string().map(Some),
    }
}

/// Any member's text, or `None` for `null`.
fn optional_value<'a>(r: &mut json::Reader<'a>) -> Result<Option<&'a str>, json::Error> {
    r.skip().map(|text| (text != "null").then_some(text))
}

/// The AAP payload of a tools/call answer.
pub(super) fn tool_result(reply: &Reply, id: &Value) -> Result<Payload, BackendError> {
    check_http(reply)?;
    if reply.is_event_stream() {
        let mut msg = rpc_message(reply, id)?;
        if let Some(e) = msg.get("error") {
            return Err(protocol_error(e));
        }
        let Some(result) = msg.get_mut("result").filter(|r| r.is_object()) else {
            return Err(no_result());
        };
        let result_type = result
            .get("resultType")
            .map(|t| t.as_str().unwrap_or("").to_owned());
        let structured = result.get_mut("structuredContent").map(Value::take);
        return tool_payload(result_type.as_deref(), structured, || {
            Ok(result.get("content").cloned())
        })
        .map(Payload::Tree);
    }
    read_json_answer(&reply.body, reply.status)
}

/// The AAP payload of a tools/call answer sent as `application/json`
/// (`status`: the HTTP status it came with, for the error text). The payload
/// document shares `body`'s buffer.
pub fn read_json_answer(body: &Bytes, status: u16) -> Result<Payload, BackendError> {
    let not_a_response = || {
        BackendError::InvalidResponse(format!(
            "upstream answered HTTP {status} with a body that is not a JSON-RPC tools/call response"
        ))
    };
    let body = ByteString::try_from(body.clone()).map_err(|_| not_a_response())?;
    let answer = CallFrame::read(&body).map_err(|e| match e {
        FrameError::Frame => not_a_response(),
        FrameError::Payload(e) => BackendError::InvalidResponse(format!(
            "upstream structuredContent is not a JSON document with unique member names ({e})"
        )),
    })?;
    if answer.jsonrpc.as_deref() != Some("2.0") {
        return Err(BackendError::InvalidResponse(
            "upstream answer is not a JSON-RPC 2.0 message".into(),
        ));
    }
    if let Some(e) = answer.error {
        // Well-formed (the reader checked it); small, and a cold path.
        return Err(protocol_error(
            &serde_json::from_str(e).unwrap_or(Value::Null),
        ));
    }
    let result = answer.result.ok_or_else(no_result)?;
    if let Some(doc) = result.structured_content {
        check_result_type(result.result_type.as_deref())?;
        // Read once into a document, validated as that, and passed on as
        // the upstream's own text (see `aap::payload`).
        return Ok(Payload::Doc(doc));
    }
    tool_payload(result.result_type.as_deref(), None, || {
        result
            .content
            .map(serde_json::from_str::<Value>)
            .transpose()
            .map_err(|_| {
                BackendError::InvalidResponse("tool result content is not valid JSON".into())
            })
    })
    .map(Payload::Tree)
}

/// Only complete results carry an AAP payload.
fn check_result_type(result_type: Option<&str>) -> Result<(), BackendError> {
    match result_type {
        None | Some("complete") => Ok(()),
        Some(other) => Err(BackendError::InvalidResponse(format!(
            "upstream result type {other:?} is not supported for AAP tools"
        ))),
    }
}

fn no_result() -> BackendError {
    BackendError::InvalidResponse("JSON-RPC response without result".into())
}

/// The payload from a tools/call result's parts: `structuredContent` when
/// it is an object, else the first text block parsed as a JSON object.
fn tool_payload(
    result_type: Option<&str>,
    structured: Option<Value>,
    content: impl FnOnce() -> Result<Option<Value>, BackendError>,
) -> Result<Value, BackendError> {
    check_result_type(result_type)?;
    if let Some(sc) = structured.filter(Value::is_object) {
        return Ok(sc);
    }
    let content = content()?;
    let text = content
        .as_ref()
        .and_then(Value::as_array)
        .and_then(|c| {
            c.iter()
                .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        })
        .and_then(|b| b.get("text"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            BackendError::InvalidResponse(
                "tool result has neither structuredContent nor a text block".into(),
            )
        })?;
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| {
            BackendError::InvalidResponse("tool result text is not a JSON object".into())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn reply(content_type: &str, body: &str) -> Reply {
        Reply {
            status: 200,
            headers: crate::upstream::client::Fields::from_pairs([("content-type", content_type)]),
            body: Bytes::from(body.to_owned()),
            peer: "127.0.0.1:9".parse().unwrap(),
        }
    }

    #[test]
    fn tool_payload_from_json_and_sse_answers() {
        let payload = json!({"type": "dealer.information.response", "n": 1});
        let text = serde_json::to_string(&payload).unwrap();
        let both = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "text", "text": text}], "structuredContent": payload,
            "resultType": "complete"}});
        let text_only = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "image", "data": ""}, {"type": "text", "text": text}]}});
        for msg in [&both, &text_only] {
            let json_reply = reply("application/json", &msg.to_string());
            assert_eq!(
                tool_result(&json_reply, &json!(1)).unwrap().into_value(),
                payload
            );
            let sse = reply(
                "text/event-stream",
                &format!("event: message\ndata: {msg}\n\n"),
            );
            assert_eq!(tool_result(&sse, &json!(1)).unwrap().into_value(), payload);
        }
    }

    #[test]
    fn malformed_tool_answers_are_typed_errors() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#,
                "protocol",
            ),
            (r#"{"jsonrpc":"1.0","id":1,"result":{}}"#, "invalid"),
            (r#"{"jsonrpc":"2.0","id":1}"#, "invalid"),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#,
                "invalid",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"[1]"}]}}"#,
                "invalid",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"structuredContent":"x"}}"#,
                "invalid",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":"#, "invalid"),
            ("not json", "invalid"),
        ];
        for (body, kind) in cases {
            let got = tool_result(&reply("application/json", body), &json!(1));
            match (kind, got) {
                ("protocol", Err(BackendError::Protocol(e))) => assert_eq!(e.code, -32602),
                ("invalid", Err(BackendError::InvalidResponse(_))) => {}
                (_, other) => panic!("{body}: {other:?}"),
            }
        }
    }
}
