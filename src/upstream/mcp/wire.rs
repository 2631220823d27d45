//! Outgoing `tools/call` bodies, written straight from borrowed parts.
//! Owns the wire shape of a call only; what the answer means lives in `answer`.

use crate::mcp::revision::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, MODERN,
};
use serde_json::Value;

/// An upstream `tools/call`, written straight from borrowed parts: no
/// `Value` tree is built, and the arguments go out as the client's text
/// (already read and validated as JSON).
pub(super) struct ToolCall<'a> {
    pub(super) id: &'a Value,
    pub(super) name: &'a str,
    pub(super) arguments: &'a str,
    pub(super) meta: CallMeta<'a>,
}

impl ToolCall<'_> {
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.arguments.len() + 320);
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        // A JSON-RPC id, a tool name and `_meta` are strings, integers and
        // string-keyed maps: writing them cannot fail.
        let _ = serde_json::to_writer(&mut out, self.id);
        out.extend_from_slice(br#","method":"tools/call","params":{"name":"#);
        let _ = serde_json::to_writer(&mut out, self.name);
        out.extend_from_slice(br#","arguments":"#);
        out.extend_from_slice(self.arguments.as_bytes());
        if self.meta.modern && self.meta.progress_token.is_none() && !MODERN_META.is_empty() {
            out.extend_from_slice(br#","_meta":"#);
            out.extend_from_slice(&MODERN_META);
        } else if self.meta.modern || self.meta.progress_token.is_some() {
            out.extend_from_slice(br#","_meta":"#);
            let _ = serde_json::to_writer(&mut out, &self.meta);
        }
        out.extend_from_slice(b"}}");
        out
    }
}

/// The `_meta` of almost every call to a modern upstream (no progress token):
/// the same bytes each time, written once (serializing its three members per
/// call took about 2,000 instructions).
static MODERN_META: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    serde_json::to_vec(&CallMeta {
        modern: true,
        progress_token: None,
    })
    .unwrap_or_default()
});

/// `params._meta` of an upstream call: the per-request metadata a modern
/// upstream requires, and the client's progress token when it sent one.
pub(super) struct CallMeta<'a> {
    pub(super) modern: bool,
    pub(super) progress_token: Option<&'a Value>,
}

impl serde::Serialize for CallMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        if self.modern {
            m.serialize_entry(META_PROTOCOL_VERSION, MODERN)?;
            m.serialize_entry(META_CLIENT_CAPABILITIES, &EmptyObject)?;
            m.serialize_entry(META_CLIENT_INFO, &GatewayInfo)?;
        }
        if let Some(token) = self.progress_token {
            m.serialize_entry("progressToken", token)?;
        }
        m.end()
    }
}

/// `{}`
struct EmptyObject;

impl serde::Serialize for EmptyObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde::ser::SerializeMap::end(s.serialize_map(Some(0))?)
    }
}

/// The gateway's `clientInfo` towards upstreams.
struct GatewayInfo;

impl serde::Serialize for GatewayInfo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("name", "aap-gateway")?;
        m.serialize_entry("version", env!("CARGO_PKG_VERSION"))?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::mcp::McpUpstream;
    use serde_json::json;

    #[test]
    fn tool_calls_serialize_as_the_documented_messages() {
        let id = json!("aapgw-7");
        let text = r#"{"type": "inventory.search.request", "filters": {"make": ["Toyota"]}}"#;
        let args: Value = serde_json::from_str(text).unwrap();
        let token = json!("p-1");
        let body = |modern, progress_token| {
            let call = ToolCall {
                id: &id,
                name: "aap_inventory_search",
                arguments: text,
                meta: CallMeta {
                    modern,
                    progress_token,
                },
            };
            let bytes = call.to_bytes();
            // The client's text goes out unchanged, spacing included.
            assert!(String::from_utf8_lossy(&bytes).contains(text));
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        let modern_meta = McpUpstream::modern_meta();
        assert_eq!(
            body(true, None),
            json!({"jsonrpc": "2.0", "id": "aapgw-7", "method": "tools/call",
                "params": {"name": "aap_inventory_search", "arguments": args, "_meta": modern_meta}})
        );
        let mut with_token = modern_meta.clone();
        with_token["progressToken"] = token.clone();
        assert_eq!(body(true, Some(&token))["params"]["_meta"], with_token);
        // Legacy: no per-request metadata, except a progress token.
        assert_eq!(
            body(false, None),
            json!({"jsonrpc": "2.0", "id": "aapgw-7", "method": "tools/call",
                "params": {"name": "aap_inventory_search", "arguments": args}})
        );
        assert_eq!(
            body(false, Some(&token))["params"]["_meta"],
            json!({"progressToken": "p-1"})
        );
    }
}
