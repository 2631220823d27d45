//! MCP request metadata headers: reading, sentinel decoding, encoding.
//!
//! `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` mirror values the body
//! already carries. The gateway accepts their omission (an AAP compatibility
//! rule) but never a supplied value that disagrees with the body.

use super::jsonrpc::RpcError;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use std::borrow::Cow;

pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
pub const METHOD: &str = "mcp-method";
pub const NAME: &str = "mcp-name";
pub const SESSION_ID: &str = "mcp-session-id";

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

/// The mirror headers a request supplied, decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MirrorHeaders {
    pub protocol_version: Option<String>,
    pub method: Option<String>,
    /// `Mcp-Name` after sentinel decoding.
    pub name: Option<String>,
}

/// Read the three mirror headers from `(lowercase name, raw value)` pairs.
///
/// Each is a singleton: a repeated header is a conflict, as is a value with
/// bytes outside visible ASCII, space and tab.
pub fn read_mirror_headers<'a, I>(headers: I) -> Result<MirrorHeaders, RpcError>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    let mut out = MirrorHeaders::default();
    for (name, raw) in headers {
        let slot = if name.eq_ignore_ascii_case(PROTOCOL_VERSION) {
            &mut out.protocol_version
        } else if name.eq_ignore_ascii_case(METHOD) {
            &mut out.method
        } else if name.eq_ignore_ascii_case(NAME) {
            &mut out.name
        } else {
            continue;
        };
        let canonical = canonical_name(name);
        if slot.is_some() {
            return Err(RpcError::header_mismatch(format!(
                "Header mismatch: {canonical} appears more than once"
            )));
        }
        let text = header_text(raw).ok_or_else(|| {
            RpcError::header_mismatch(format!(
                "Header mismatch: {canonical} contains characters outside visible ASCII"
            ))
        })?;
        let value = if name.eq_ignore_ascii_case(NAME) {
            decode_value(text).map_err(|why| {
                RpcError::header_mismatch(format!("Header mismatch: {canonical} {why}"))
            })?
        } else {
            text.to_owned()
        };
        *slot = Some(value);
    }
    Ok(out)
}

fn canonical_name(lower: &str) -> &'static str {
    if lower.eq_ignore_ascii_case(PROTOCOL_VERSION) {
        "MCP-Protocol-Version"
    } else if lower.eq_ignore_ascii_case(METHOD) {
        "Mcp-Method"
    } else {
        "Mcp-Name"
    }
}

/// Header bytes as text, trimmed of optional surrounding whitespace (RFC 9110).
fn header_text(raw: &[u8]) -> Option<&str> {
    if raw
        .iter()
        .any(|&b| !(b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b)))
    {
        return None;
    }
    std::str::from_utf8(raw)
        .ok()
        .map(|s| s.trim_matches([' ', '\t']))
}

/// Decode a header value that may use the `=?base64?…?=` sentinel form.
///
/// The markers are lowercase and case-sensitive: `=?BASE64?…?=` is a literal.
pub fn decode_value(value: &str) -> Result<String, &'static str> {
    let Some(inner) = value
        .strip_prefix(SENTINEL_PREFIX)
        .and_then(|rest| rest.strip_suffix(SENTINEL_SUFFIX))
    else {
        return Ok(value.to_owned());
    };
    let bytes = STANDARD
        .decode(inner)
        .map_err(|_| "has invalid Base64 inside the =?base64?…?= sentinel")?;
    String::from_utf8(bytes).map_err(|_| "decodes to bytes that are not UTF-8")
}

/// Encode a value for a header, using the sentinel form only when required
/// (a value that needs none is borrowed as it is).
///
/// ```
/// use aap_core::mcp::headers::encode_value;
/// assert_eq!(encode_value("aap_inventory_search"), "aap_inventory_search");
/// assert_eq!(encode_value("Grüße"), "=?base64?R3LDvMOfZQ==?=");
/// ```
pub fn encode_value(value: &str) -> Cow<'_, str> {
    let printable = value
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b));
    let padded = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let looks_encoded = value.starts_with(SENTINEL_PREFIX) && value.ends_with(SENTINEL_SUFFIX);
    let plain_safe = !value.is_empty() && printable && !padded && !looks_encoded;
    if plain_safe {
        Cow::Borrowed(value)
    } else {
        Cow::Owned(format!(
            "{SENTINEL_PREFIX}{}{SENTINEL_SUFFIX}",
            STANDARD.encode(value.as_bytes())
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &[u8])]) -> Result<MirrorHeaders, RpcError> {
        read_mirror_headers(pairs.iter().copied())
    }

    #[test]
    fn sentinel_round_trips() {
        assert_eq!(
            encode_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(
            encode_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        assert_eq!(
            decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(),
            "Hello, 世界"
        );
        assert_eq!(
            decode_value("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").unwrap(),
            "=?base64?literal?="
        );
        assert_eq!(encode_value("aap_inventory_search"), "aap_inventory_search");
        assert_eq!(encode_value(" padded"), "=?base64?IHBhZGRlZA==?=");
    }

    #[test]
    fn uppercase_marker_is_literal() {
        assert_eq!(decode_value("=?BASE64?YWJj?=").unwrap(), "=?BASE64?YWJj?=");
    }

    #[test]
    fn invalid_base64_is_rejected() {
        assert!(decode_value("=?base64?not base64!?=").is_err());
        assert!(
            decode_value("=?base64?/w==?=").is_err(),
            "0xff is not UTF-8"
        );
    }

    #[test]
    fn duplicates_and_bad_bytes_conflict() {
        let dup = read(&[("mcp-method", b"tools/list"), ("Mcp-Method", b"tools/list")]);
        assert_eq!(dup.unwrap_err().code, -32020);
        let bad = read(&[("mcp-name", b"caf\xc3\xa9")]);
        assert_eq!(bad.unwrap_err().code, -32020);
        let ok = read(&[
            ("MCP-PROTOCOL-VERSION", b"2026-07-28"),
            ("mcp-name", b"=?base64?YWFwX2RlYWxlcl9pbmZvcm1hdGlvbg==?="),
        ])
        .unwrap();
        assert_eq!(ok.protocol_version.as_deref(), Some("2026-07-28"));
        assert_eq!(ok.name.as_deref(), Some("aap_dealer_information"));
    }
}
