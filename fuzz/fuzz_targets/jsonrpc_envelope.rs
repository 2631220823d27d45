//! The JSON-RPC envelope parser: strict JSON (duplicate keys, depth bound,
//! UTF-8) and the one-message envelope rules, on arbitrary bytes.
//!
//! The first byte picks the depth bound (0..=63) so shallow and deep limits
//! are both exercised; the rest is the POST body. `parse_message` reads
//! `params.arguments` apart (into a document); it must accept, refuse and
//! read exactly what the whole-value parse does.
#![no_main]

mod common;

use aap_gateway::mcp::jsonrpc::{code, message_from_value, parse_json, parse_message, Message};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&depth, body)) = data.split_first() else {
        return;
    };
    let depth = usize::from(depth % 64);

    let parsed = parse_message(body, depth);
    match &parsed {
        Ok(message) => check_message(message),
        Err(e) => {
            assert_eq!(e.http_status, 400, "envelope errors answer 400");
            assert!(
                e.code == code::PARSE_ERROR || e.code == code::INVALID_REQUEST,
                "unexpected code {}",
                e.code
            );
            // Rendering the error never fails and never drops the envelope.
            let body = e.to_body(None);
            assert_eq!(body["jsonrpc"], "2.0");
            assert_eq!(body["error"]["code"], e.code);
        }
    }

    // parse_message == parse_json + message_from_value, arguments apart.
    let value = match parse_json(body, depth) {
        Ok(v) => v,
        Err(e) => {
            assert_eq!(e.code, code::PARSE_ERROR);
            assert_eq!(parsed.unwrap_err().code, code::PARSE_ERROR);
            return;
        }
    };
    let again = message_from_value(value.clone());
    assert_eq!(
        summary(&parsed),
        summary(&again),
        "two parse paths disagree"
    );

    // Whatever was accepted serializes and parses back under the same bound
    // to the same envelope (the gateway re-serializes bodies it forwards).
    let text = serde_json::to_vec(&value).expect("a parsed value serializes");
    let reparsed = parse_json(&text, depth).expect("re-serialized JSON parses again");
    assert_eq!(
        summary(&message_from_value(reparsed)),
        summary(&parsed),
        "round trip changed the envelope"
    );
});

fn check_message(message: &Message) {
    if let Some(id) = message.id() {
        assert!(
            id.is_string() || id.is_i64() || id.is_u64(),
            "ids are strings or integers"
        );
    }
    match message {
        Message::Request { method, .. } | Message::Notification { method, .. } => {
            assert_eq!(message.method(), Some(method.as_str()));
        }
        Message::Response { .. } => {
            assert!(message.method().is_none() && message.params().is_none());
        }
    }
}

/// What the gateway acts on: kind, id, method, the number of params other
/// than `arguments`, and the arguments.
type Summary = Result<
    (
        u8,
        Option<Value>,
        Option<String>,
        Option<usize>,
        Option<Approx>,
    ),
    i64,
>;

/// Arguments compared with [`common::same`]: the document reader rounds
/// floats correctly, the whole-value parse (`serde_json`) may not.
#[derive(Debug)]
struct Approx(Value);

impl PartialEq for Approx {
    fn eq(&self, other: &Approx) -> bool {
        common::same(&self.0, &other.0)
    }
}

fn summary(m: &Result<Message, aap_gateway::mcp::jsonrpc::RpcError>) -> Summary {
    let others = |p: &Option<serde_json::Map<String, Value>>| {
        p.as_ref()
            .map(|p| p.keys().filter(|k| *k != "arguments").count())
    };
    match m {
        Ok(Message::Request {
            id,
            method,
            params,
            arguments,
        }) => Ok((
            0,
            Some(id.clone()),
            Some(method.clone()),
            others(params),
            // Read apart by `parse_message`, or still in the params map.
            arguments
                .as_ref()
                .map(|doc| doc.to_value())
                .or_else(|| params.as_ref()?.get("arguments").cloned())
                .map(Approx),
        )),
        Ok(Message::Notification { method, params }) => {
            Ok((1, None, Some(method.clone()), others(params), None))
        }
        Ok(Message::Response { id }) => Ok((2, Some(id.clone()), None, None, None)),
        Err(e) => Err(e.code),
    }
}
