//! The MCP protocol revisions the gateway speaks, and how a request's
//! revision is resolved from its body, its headers and its own session.

use super::headers::MirrorHeaders;
use super::jsonrpc::{Message, RpcError};
use crate::error::Failure;
use serde_json::{json, Map, Value};

pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";
/// Advertised in `server/discover` and in every -32022, newest first.
pub const SUPPORTED: [&str; 2] = [MODERN, LEGACY];

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Revision {
    /// 2026-07-28: stateless, per-request `_meta`, `resultType`.
    Modern,
    /// 2025-11-25: `initialize` handshake, optional sessions.
    Legacy,
}

impl Revision {
    pub fn as_str(self) -> &'static str {
        match self {
            Revision::Modern => MODERN,
            Revision::Legacy => LEGACY,
        }
    }
    pub fn from_version(v: &str) -> Option<Revision> {
        match v {
            MODERN => Some(Revision::Modern),
            LEGACY => Some(Revision::Legacy),
            _ => None,
        }
    }
}

pub fn unsupported_version(requested: &str) -> RpcError {
    RpcError::of(Failure::UnsupportedVersion,
        if requested.is_empty() {
            "Unsupported protocol version: none was supplied. Send MCP-Protocol-Version, or params._meta[\"io.modelcontextprotocol/protocolVersion\"] for 2026-07-28, or initialize first for 2025-11-25".to_string()
        } else {
            "Unsupported protocol version".to_string()
        },
    )
    .with_data(json!({ "supported": SUPPORTED, "requested": requested }))
}

/// The `_meta` object of a request, if any.
pub fn request_meta(params: Option<&Map<String, Value>>) -> Option<&Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

/// Inputs to revision resolution other than the body.
pub struct VersionContext<'a> {
    pub headers: &'a MirrorHeaders,
    /// The version negotiated in this client's own validated legacy session.
    pub session_version: Option<&'a str>,
}

/// Resolve the revision of a non-`initialize` message.
///
/// Sources, in order: the body's `_meta` protocol version (modern), the
/// header, this client's session. A supplied header must agree with the
/// body or the session; nothing is ever guessed.
pub fn resolve(message: &Message, ctx: &VersionContext<'_>) -> Result<(Revision, bool), RpcError> {
    let version = agreed_version(message, ctx)?.ok_or_else(|| unsupported_version(""))?;
    let filled = ctx.headers.protocol_version.is_none();
    let meta = request_meta(message.params());
    let revision = Revision::from_version(version).ok_or_else(|| unsupported_version(version))?;
    if revision == Revision::Modern {
        require_modern_meta(meta)?;
    }
    Ok((revision, filled))
}

/// The protocol version a request declares, from `params._meta` (2026-07-28),
/// else `MCP-Protocol-Version`, else the version negotiated for its session;
/// any two of them that disagree are a -32020 conflict. `None` when none is
/// given. The value is not checked against the supported revisions.
pub fn agreed_version<'a>(
    message: &'a Message,
    ctx: &VersionContext<'a>,
) -> Result<Option<&'a str>, RpcError> {
    let body_version =
        match request_meta(message.params()).and_then(|m| m.get(META_PROTOCOL_VERSION)) {
            None => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => {
                return Err(RpcError::invalid_params(format!(
                    "Invalid params: _meta[\"{META_PROTOCOL_VERSION}\"] must be a string"
                )))
            }
        };
    let header = ctx.headers.protocol_version.as_deref();
    if let (Some(h), Some(b)) = (header, body_version) {
        if h != b {
            return Err(RpcError::header_mismatch(
                "Header mismatch: MCP-Protocol-Version does not match params._meta protocolVersion",
            ));
        }
    }
    if let (Some(h), None, Some(s)) = (header, body_version, ctx.session_version) {
        if h != s {
            return Err(RpcError::header_mismatch(
                "Header mismatch: MCP-Protocol-Version does not match the version negotiated for this session",
            ));
        }
    }
    Ok(body_version.or(header).or(ctx.session_version))
}

/// 2026-07-28 requires protocol version and client capabilities in `_meta`.
fn require_modern_meta(meta: Option<&Map<String, Value>>) -> Result<(), RpcError> {
    // Each key is looked up once; the missing names are collected only for
    // the refusal (a vector on every call was ~700 instructions).
    let keys = [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES];
    let [version, capabilities] = keys.map(|k| meta.and_then(|m| m.get(k)));
    if version.is_none() || capabilities.is_none() {
        let missing: Vec<&str> = keys
            .into_iter()
            .zip([version, capabilities])
            .filter_map(|(k, v)| v.is_none().then_some(k))
            .collect();
        return Err(RpcError::invalid_params(format!(
            "Invalid params: 2026-07-28 requests must carry params._meta keys {}",
            missing
                .iter()
                .map(|k| format!("\"{k}\""))
                .collect::<Vec<_>>()
                .join(" and ")
        ))
        .with_data(json!({ "missing": missing })));
    }
    if !capabilities.is_some_and(Value::is_object) {
        return Err(RpcError::invalid_params(format!(
            "Invalid params: _meta[\"{META_CLIENT_CAPABILITIES}\"] must be an object ({{}} when none apply)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::jsonrpc::parse_message;

    fn msg(body: &str) -> Message {
        parse_message(body.as_bytes(), 32).unwrap()
    }
    /// The context of a request outside any session.
    fn sessionless(headers: &MirrorHeaders) -> VersionContext<'_> {
        VersionContext {
            headers,
            session_version: None,
        }
    }
    const MODERN_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    #[test]
    fn body_version_fills_header() {
        let h = MirrorHeaders::default();
        let ctx = sessionless(&h);
        assert_eq!(
            resolve(&msg(MODERN_LIST), &ctx).unwrap(),
            (Revision::Modern, true)
        );
    }

    #[test]
    fn modern_calls_need_both_meta_keys_and_capabilities_as_an_object() {
        let h = MirrorHeaders::default();
        let ctx = sessionless(&h);
        let v = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#;
        let body = |meta: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{{{meta}}}}}}}"#
            )
        };
        let e = resolve(&msg(&body(v)), &ctx).unwrap_err();
        assert_eq!(e.code, -32602);
        assert_eq!(
            e.data.unwrap()["missing"],
            json!(["io.modelcontextprotocol/clientCapabilities"])
        );
        for capabilities in ["[]", "1", "null", r#""x""#] {
            let meta =
                format!(r#"{v},"io.modelcontextprotocol/clientCapabilities":{capabilities}"#);
            let e = resolve(&msg(&body(&meta)), &ctx).unwrap_err();
            assert_eq!(e.code, -32602, "{capabilities}");
            assert!(e.message.contains("must be an object"), "{capabilities}");
        }
        let meta = format!(r#"{v},"io.modelcontextprotocol/clientCapabilities":{{"x":1}}"#);
        assert_eq!(
            resolve(&msg(&body(&meta)), &ctx).unwrap(),
            (Revision::Modern, true)
        );
    }

    #[test]
    fn header_conflict_and_unknown_version() {
        let h = MirrorHeaders {
            protocol_version: Some(LEGACY.into()),
            ..Default::default()
        };
        let ctx = sessionless(&h);
        assert_eq!(resolve(&msg(MODERN_LIST), &ctx).unwrap_err().code, -32020);
        let h = MirrorHeaders {
            protocol_version: Some("1900-01-01".into()),
            ..Default::default()
        };
        let ctx = sessionless(&h);
        let e = resolve(
            &msg(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            &ctx,
        )
        .unwrap_err();
        assert_eq!(e.code, -32022);
        assert_eq!(e.data.unwrap()["requested"], "1900-01-01");
    }

    #[test]
    fn nothing_to_go_on_is_unresolvable() {
        let h = MirrorHeaders::default();
        let ctx = sessionless(&h);
        let e = resolve(
            &msg(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            &ctx,
        )
        .unwrap_err();
        assert_eq!(e.code, -32022);
    }

    #[test]
    fn modern_header_without_meta_is_invalid_params() {
        let h = MirrorHeaders {
            protocol_version: Some(MODERN.into()),
            ..Default::default()
        };
        let ctx = sessionless(&h);
        let e = resolve(
            &msg(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#),
            &ctx,
        )
        .unwrap_err();
        assert_eq!(e.code, -32602);
    }

    #[test]
    fn session_supplies_legacy_version() {
        let h = MirrorHeaders::default();
        let ctx = VersionContext {
            headers: &h,
            session_version: Some(LEGACY),
        };
        let r = resolve(
            &msg(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            &ctx,
        )
        .unwrap();
        assert_eq!(r, (Revision::Legacy, true));
    }
}
