//! The mirror-header normalizer: `MCP-Protocol-Version`, `Mcp-Method` and
//! `Mcp-Name` (with `=?base64?…?=` sentinel decoding) read from arbitrary
//! header name/value pairs, then the protocol revision resolved against an
//! arbitrary body the way the endpoint does.
#![no_main]

use aap_gateway::mcp::headers::{decode_value, encode_value, read_mirror_headers};
use aap_gateway::mcp::jsonrpc::{code, parse_message, Message};
use aap_gateway::mcp::revision::{self, Revision, VersionContext};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Input layout, HTTP-like so seeds stay readable: byte 0 holds flags
/// (bit 0: the client has a legacy session, bit 1: its version is
/// 2026-07-28 rather than 2025-11-25), then `name:value` lines separated by
/// `\n`, an empty line, and the body. Values are raw bytes (not trimmed).
struct Input<'a> {
    session_version: Option<&'static str>,
    headers: Vec<(String, &'a [u8])>,
    body: &'a [u8],
}

fn split(data: &[u8]) -> Option<Input<'_>> {
    let (&flags, rest) = data.split_first()?;
    let session_version = (flags & 1 == 1).then_some(if flags & 2 == 2 {
        revision::MODERN
    } else {
        revision::LEGACY
    });
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&rest[..i], &rest[i + 2..]),
        None => (rest, &[][..]),
    };
    let mut headers = Vec::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        // Names reach the core as text (the HTTP layer rejects others).
        let Ok(name) = std::str::from_utf8(&line[..colon]) else {
            continue;
        };
        headers.push((name.to_owned(), &line[colon + 1..]));
    }
    Some(Input {
        session_version,
        headers,
        body,
    })
}

/// Own encoding is always decodable, and the decoded header is the text.
fn check_round_trip(text: &str) {
    let encoded = encode_value(text);
    assert!(
        encoded
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) || b == b'\t'),
        "encoded header values are visible ASCII"
    );
    assert_eq!(decode_value(&encoded).as_deref(), Ok(text));
    let read = read_mirror_headers([("Mcp-Name", encoded.as_bytes())]).expect("own encoding reads");
    assert_eq!(read.name.as_deref(), Some(text));
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = split(data) else {
        return;
    };
    for (_, v) in &input.headers {
        check_round_trip(&String::from_utf8_lossy(v));
    }
    check_round_trip(&String::from_utf8_lossy(input.body));
    let pairs = &input.headers;
    let mirror = read_mirror_headers(pairs.iter().map(|(n, v)| (n.as_str(), *v)));
    // Header names are case-insensitive: lowercasing them changes nothing.
    let lowered: Vec<(String, &[u8])> = pairs
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), *v))
        .collect();
    let again = read_mirror_headers(lowered.iter().map(|(n, v)| (n.as_str(), *v)));
    assert_eq!(mirror, again, "header-name case changed the outcome");

    let mirror = match mirror {
        Ok(m) => m,
        Err(e) => {
            assert_eq!((e.http_status, e.code), (400, code::HEADER_MISMATCH));
            return;
        }
    };
    for v in [&mirror.protocol_version, &mirror.method]
        .into_iter()
        .flatten()
    {
        assert!(!v.starts_with([' ', '\t']) && !v.ends_with([' ', '\t']));
    }

    // Against the body, as the endpoint dispatches a request.
    let Ok(message) = parse_message(input.body, 32) else {
        return;
    };
    if let Message::Request { .. } = message {
        let session = input.session_version;
        let ctx = VersionContext {
            headers: &mirror,
            session_version: session,
        };
        match revision::resolve(&message, &ctx) {
            Ok((rev, filled)) => {
                let body = revision::request_meta(message.params())
                    .and_then(|m| m.get(revision::META_PROTOCOL_VERSION))
                    .and_then(Value::as_str);
                // Never guessed: the version came from the body, the header
                // or this client's session, and they agree.
                let source = body.or(mirror.protocol_version.as_deref()).or(session);
                assert_eq!(source, Some(rev.as_str()));
                if let (Some(b), Some(h)) = (body, &mirror.protocol_version) {
                    assert_eq!(b, h);
                }
                if let (None, Some(h), Some(s)) = (body, &mirror.protocol_version, session) {
                    assert_eq!(h, s, "header disagrees with this client's session");
                }
                assert_eq!(filled, mirror.protocol_version.is_none());
                assert!(Revision::from_version(rev.as_str()) == Some(rev));
            }
            Err(e) => {
                assert_eq!(e.http_status, 400);
                assert!(
                    [
                        code::HEADER_MISMATCH,
                        code::UNSUPPORTED_PROTOCOL_VERSION,
                        code::INVALID_PARAMS
                    ]
                    .contains(&e.code),
                    "unexpected code {}",
                    e.code
                );
            }
        }
    }
});
