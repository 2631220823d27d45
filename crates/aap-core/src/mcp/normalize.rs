//! Header normalization for transparently relayed MCP requests.
//!
//! A relay tenant forwards every MCP method to one upstream server, so the
//! gateway does not interpret tools; it only makes the request's metadata
//! headers agree with its body before the upstream sees it: a supplied
//! mirror header must match the body (else -32020), an omitted one is filled
//! in from the body or from the version this client negotiated on its
//! session, and a version neither revision knows is refused (-32022).

use super::headers::{encode_value, MirrorHeaders};
use super::jsonrpc::{Message, RpcError};
use super::revision::{self, Revision, VersionContext};

/// What the relay adds to a request, and what it learned for the logs.
#[derive(Debug, Default, PartialEq)]
pub struct Normalized {
    /// Headers to add upstream, canonical names.
    pub add: Vec<(&'static str, String)>,
    /// Names of the headers that were filled in (for metrics).
    pub filled: Vec<&'static str>,
    pub revision: Option<Revision>,
}

/// The body value `Mcp-Name` mirrors for `method`, when the MCP spec defines one.
pub fn name_for<'a>(method: &str, message: &'a Message) -> Option<&'a str> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    message.params()?.get(key)?.as_str()
}

/// `YYYY-MM-DD`, the shape of every MCP revision identifier.
fn is_dated_version(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// Check and complete the mirror headers of a relayed POST body.
///
/// `session_version` is the protocol version the upstream negotiated with
/// this client's `Mcp-Session-Id`, when the relay saw that handshake.
pub fn normalize(
    message: &Message,
    mirror: &MirrorHeaders,
    session_version: Option<&str>,
) -> Result<Normalized, RpcError> {
    let mut out = Normalized::default();
    let method = message.method();
    let header = mirror.protocol_version.as_deref();
    let agreed = revision::agreed_version(
        message,
        &VersionContext {
            headers: mirror,
            session_version,
        },
    )?;
    // `initialize` negotiates the version in its body; nothing to fill.
    let version = if method == Some("initialize") {
        header
    } else {
        agreed
    };
    if let Some(v) = version {
        // Other dated revisions (2025-06-18, ...) are the upstream's to
        // accept or refuse; only a value that is no revision at all is ours.
        let rev = Revision::from_version(v);
        if rev.is_none() && !is_dated_version(v) {
            return Err(revision::unsupported_version(v));
        }
        out.revision = rev;
        if header.is_none() && method != Some("initialize") {
            out.add.push(("MCP-Protocol-Version", v.to_owned()));
            out.filled.push("MCP-Protocol-Version");
        }
    }
    // Mcp-Method and Mcp-Name are 2026-07-28 headers: checked whenever
    // supplied, filled only for a modern request.
    let modern = out.revision == Some(Revision::Modern);
    match (&mirror.method, method) {
        (Some(h), Some(m)) if h == m => {}
        (Some(_), _) => {
            return Err(RpcError::header_mismatch(
                "Header mismatch: Mcp-Method does not match the JSON-RPC method",
            ))
        }
        (None, Some(m)) if modern => {
            out.add.push(("Mcp-Method", m.to_owned()));
            out.filled.push("Mcp-Method");
        }
        (None, _) => {}
    }
    if let Some(expected) = method.and_then(|m| name_for(m, message)) {
        match &mirror.name {
            Some(h) if h != expected => {
                return Err(RpcError::header_mismatch(
                    "Header mismatch: Mcp-Name does not match the name or uri in the body",
                ))
            }
            Some(_) => {}
            None if modern => {
                out.add
                    .push(("Mcp-Name", encode_value(expected).into_owned()));
                out.filled.push("Mcp-Name");
            }
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::jsonrpc::parse_message;

    fn msg(body: &str) -> Message {
        parse_message(body.as_bytes(), 32).unwrap()
    }

    fn headers(version: Option<&str>, method: Option<&str>, name: Option<&str>) -> MirrorHeaders {
        MirrorHeaders {
            protocol_version: version.map(str::to_owned),
            method: method.map(str::to_owned),
            name: name.map(str::to_owned),
        }
    }

    const MODERN_CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wetter ☀","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    #[test]
    fn modern_call_gets_every_header_from_its_body() {
        let n = normalize(&msg(MODERN_CALL), &MirrorHeaders::default(), None).unwrap();
        assert_eq!(n.revision, Some(Revision::Modern));
        assert_eq!(
            n.add,
            vec![
                ("MCP-Protocol-Version", "2026-07-28".to_owned()),
                ("Mcp-Method", "tools/call".to_owned()),
                ("Mcp-Name", "=?base64?d2V0dGVyIOKYgA==?=".to_owned()),
            ]
        );
    }

    #[test]
    fn legacy_request_takes_the_session_version_only() {
        let m = msg(
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}"#,
        );
        let n = normalize(&m, &MirrorHeaders::default(), Some("2025-11-25")).unwrap();
        assert_eq!(n.revision, Some(Revision::Legacy));
        assert_eq!(
            n.add,
            vec![("MCP-Protocol-Version", "2025-11-25".to_owned())]
        );
        // Without a known session nothing can be derived, and nothing is invented.
        let n = normalize(&m, &MirrorHeaders::default(), None).unwrap();
        assert_eq!(n, Normalized::default());
    }

    #[test]
    fn supplied_headers_must_match() {
        let m = msg(MODERN_CALL);
        for h in [
            headers(Some("2025-11-25"), None, None),
            headers(None, Some("tools/list"), None),
            headers(None, None, Some("other")),
        ] {
            assert_eq!(normalize(&m, &h, None).unwrap_err().code, -32020, "{h:?}");
        }
        let legacy = msg(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
        let e = normalize(
            &legacy,
            &headers(Some("2025-11-25"), None, None),
            Some("2026-07-28"),
        );
        assert_eq!(e.unwrap_err().code, -32020);
        let ok = normalize(
            &m,
            &headers(Some("2026-07-28"), Some("tools/call"), Some("wetter ☀")),
            None,
        )
        .unwrap();
        assert!(ok.add.is_empty());
    }

    #[test]
    fn unknown_versions_are_refused_but_initialize_negotiates() {
        let ping = msg(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#);
        let e = normalize(&ping, &headers(Some("latest"), None, None), None).unwrap_err();
        assert_eq!(e.code, -32022);
        // An older dated revision is the upstream's to judge.
        let n = normalize(&ping, &headers(Some("2025-03-26"), None, None), None).unwrap();
        assert_eq!(n.revision, None);
        let init = msg(
            r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
        );
        let n = normalize(&init, &MirrorHeaders::default(), Some("2025-11-25")).unwrap();
        assert!(n.add.is_empty());
    }
}
