//! Result shaping for `tools/call`, written straight to bytes.
//!
//! An AAP tool result carries its payload twice: as `structuredContent` and,
//! serialized, as the one text block (so both always agree). Building that
//! as a `serde_json::Value` and serializing the whole message would write
//! the payload three times (text, object, then the text again, escaped).
//! Here the payload is serialized once; the same text is the raw
//! `structuredContent` and, escaped once, the text block.

use super::revision::{Revision, META_SERVER_INFO};
use crate::aap::payload::Payload;
use serde_json::Value;

/// A finished tools/call outcome before it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The AAP payload (a typed response or an `aap.error`).
    pub payload: Payload,
    pub is_error: bool,
}

/// The whole JSON-RPC response for a tools/call: the same bytes as
/// `result_body(id, finish(rev, tool_result(payload, is_error), server))`
/// built through `Value`, for a fraction of the work.
///
/// ```
/// use aap_core::mcp::result::{tool_message, ToolResult};
/// use aap_core::mcp::revision::Revision;
/// use serde_json::{json, Value};
///
/// let r = ToolResult { payload: json!({"type": "dealer.information.response"}).into(), is_error: false };
/// let bytes = tool_message(&json!(7), Revision::Modern, "aap-gateway", "1.0.0", &r);
/// let v: Value = serde_json::from_slice(&bytes).unwrap();
/// assert_eq!(v["result"]["structuredContent"], *r.payload.to_value());
/// assert_eq!(v["result"]["content"][0]["text"], r#"{"type":"dealer.information.response"}"#);
/// assert_eq!(v["result"]["resultType"], "complete");
/// ```
pub fn tool_message(
    id: &Value,
    rev: Revision,
    server_name: &str,
    server_version: &str,
    result: &ToolResult,
) -> Vec<u8> {
    // A `Value` always serializes (its keys are strings); should that ever
    // change, answer with a JSON-RPC internal error instead of panicking.
    // Text from an upstream is used as it came (validated in the contract).
    let serialized;
    let text: &str = match &result.payload {
        Payload::Doc(doc) => doc.raw(),
        Payload::Tree(v) => match serde_json::to_string(v) {
            Ok(t) => {
                serialized = t;
                &serialized
            }
            Err(_) => return INTERNAL_ERROR.to_vec(),
        },
    };
    match write_message(id, rev, server_name, server_version, text, result.is_error) {
        Ok(out) => out,
        Err(_) => INTERNAL_ERROR.to_vec(),
    }
}

const INTERNAL_ERROR: &[u8] = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error: the result could not be serialized"}}"#;

/// The message around a serialized payload, member by member in the order
/// the `Value` path writes them (`content`, `structuredContent`, `isError`,
/// then for 2026-07-28 `resultType` and `_meta`).
fn write_message(
    id: &Value,
    rev: Revision,
    server_name: &str,
    server_version: &str,
    payload: &str,
    is_error: bool,
) -> serde_json::Result<Vec<u8>> {
    // Room for the frame, the payload raw and the room `write_str` takes for it escaped (twice
    // its length, plus a little), so that the answer is written without a reallocation (and
    // the copy of everything written so far that one costs: about 11 KiB for a search).
    let mut out = Vec::with_capacity(payload.len() * 3 + 512);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut out, id)?;
    out.extend_from_slice(br#","result":{"content":[{"type":"text","text":"#);
    crate::json::write_str(&mut out, payload);
    out.extend_from_slice(br#"}],"structuredContent":"#);
    out.extend_from_slice(payload.as_bytes());
    out.extend_from_slice(if is_error {
        br#","isError":true"#
    } else {
        br#","isError":false"#
    });
    if rev == Revision::Modern {
        out.extend_from_slice(br#","resultType":"complete","_meta":{"#);
        // `{META_SERVER_INFO: {"name": …, "version": …}}`, written member by
        // member (through serde's map serializer it took about 1,300
        // instructions an answer).
        crate::json::write_str(&mut out, META_SERVER_INFO);
        out.extend_from_slice(br#":{"name":"#);
        crate::json::write_str(&mut out, server_name);
        out.extend_from_slice(br#","version":"#);
        crate::json::write_str(&mut out, server_version);
        out.extend_from_slice(b"}}");
    }
    out.extend_from_slice(b"}}");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::jsonrpc::result_body;
    use crate::mcp::server::{tool_result_value as tool_result, with_revision_fields as finish};
    use serde_json::json;

    fn through_value(id: &Value, rev: Revision, r: &ToolResult) -> Vec<u8> {
        let v = result_body(
            id,
            finish(
                rev,
                tool_result(r.payload.to_value().into_owned(), r.is_error),
                "gw",
            ),
        );
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn same_bytes_as_the_value_path_for_both_revisions() {
        let payloads = [
            json!({"type": "inventory.search.response", "data": {"vehicles": [{"vin": "1HGCM82633A004352", "price": 18999, "note": "quote \" and \\ and \u{e9} and \n"}], "total": 1}}),
            json!({"type": "aap.error", "error": {"code": "NOT_FOUND", "message": "no such vehicle"}}),
            json!({}),
        ];
        for id in [json!(1), json!("req-\"x\""), json!(-9007199254740991_i64)] {
            for rev in [Revision::Modern, Revision::Legacy] {
                for (i, p) in payloads.iter().enumerate() {
                    let r = ToolResult {
                        payload: p.clone().into(),
                        is_error: i == 1,
                    };
                    let fast = tool_message(&id, rev, "gw", crate::mcp::server::SERVER_VERSION, &r);
                    assert_eq!(
                        String::from_utf8(fast).unwrap(),
                        String::from_utf8(through_value(&id, rev, &r)).unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn legacy_results_carry_no_modern_fields() {
        let r = ToolResult {
            payload: json!({"type": "x"}).into(),
            is_error: false,
        };
        let v: Value =
            serde_json::from_slice(&tool_message(&json!(1), Revision::Legacy, "gw", "1", &r))
                .unwrap();
        assert!(v["result"].get("resultType").is_none());
        assert!(v["result"].get("_meta").is_none());
        assert_eq!(v["result"]["isError"], false);
    }
}
