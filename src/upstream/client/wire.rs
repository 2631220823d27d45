//! The HTTP/1 request bytes: head and body as one checked buffer, written in one call.
//! The answer is read by [`super::reader`]; peer choice and retries are `mod.rs`'s.

use super::Request;
use crate::exchange::is_token;

/// The whole request as it goes on the wire: head and body in one buffer.
/// Every name must be an HTTP token and every value free of control
/// characters, so nothing forwarded from a client (`Mcp-Param-*`) can end
/// a header line early and smuggle in another header or request.
///
/// `trace` holds the gateway's `traceparent` (and `tracestate`) when the
/// request is traced; the client's own are then not passed on.
///
/// `authority` is the peer's host and its port when that is not the scheme's default
/// ([`super::PeerAddr::authority`]): written straight into the `Host` line, with no string of
/// its own.
pub(super) fn request_bytes(
    req: &Request<'_>,
    authority: (&str, Option<u16>),
    trace: &[(&'static str, String)],
) -> Result<Vec<u8>, String> {
    let target_ok = req.path.starts_with('/') && req.path.bytes().all(|b| b.is_ascii_graphic());
    if !is_token(req.method) || !target_ok {
        return Err("the request line cannot be sent".into());
    }
    // Room for the request line and a call's usual fields (about 300 bytes with a trace and a
    // credential), so that the body is copied once.
    let mut wire = Vec::with_capacity(512 + req.extra_headers.len() * 64 + req.body.len());
    wire.extend_from_slice(req.method.as_bytes());
    wire.push(b' ');
    wire.extend_from_slice(req.path.as_bytes());
    wire.extend_from_slice(b" HTTP/1.1\r\n");
    host_line(&mut wire, authority)?;
    for (n, v) in &req.headers {
        header_line(&mut wire, n, v)?;
    }
    let replaced = |n: &str| trace.iter().any(|(t, _)| n.eq_ignore_ascii_case(t));
    for (n, v) in req.extra_headers {
        if !replaced(n) {
            header_line(&mut wire, n, v)?;
        }
    }
    for (n, v) in trace {
        header_line(&mut wire, n, v)?;
    }
    let mut len = itoa::Buffer::new();
    header_line(&mut wire, "content-length", len.format(req.body.len()))?;
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(&req.body);
    Ok(wire)
}

/// `name: value` and CRLF, after checking both (RFC 9110 §5.1, §5.5).
fn header_line(wire: &mut Vec<u8>, name: &str, value: &str) -> Result<(), String> {
    if !is_token(name) {
        return Err("a header name is not an HTTP token".into());
    }
    if !value_ok(value) {
        return Err(format!("the {name} header holds a control character"));
    }
    wire.extend_from_slice(name.as_bytes());
    wire.extend_from_slice(b": ");
    // The value holds no control character but tab, so trimming ASCII whitespace trims
    // exactly its spaces and tabs (optional whitespace, RFC 9110 §5.6.3).
    wire.extend_from_slice(value.trim_ascii().as_bytes());
    wire.extend_from_slice(b"\r\n");
    Ok(())
}

/// `host: host[:port]` and CRLF: the bytes [`header_line`] gives for `host` and the
/// authority's text, with the port written after the host instead of joined to it first.
fn host_line(wire: &mut Vec<u8>, (host, port): (&str, Option<u16>)) -> Result<(), String> {
    if !value_ok(host) {
        return Err("the host header holds a control character".into());
    }
    wire.extend_from_slice(b"host: ");
    // Whitespace is trimmed from the ends of the whole value: a port (digits) ends it.
    let host = host.trim_ascii_start();
    match port {
        Some(port) => {
            wire.extend_from_slice(host.as_bytes());
            wire.push(b':');
            wire.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
        }
        None => wire.extend_from_slice(host.trim_ascii_end().as_bytes()),
    }
    wire.extend_from_slice(b"\r\n");
    Ok(())
}

/// A field value: no control characters but tab (RFC 9110 §5.5; obs-text allowed). Every
/// byte is looked at, with no early exit, so the compiler checks many bytes per step.
fn value_ok(value: &str) -> bool {
    !value.bytes().fold(false, |bad, b| {
        bad | ((b < b' ' && b != b'\t') | (b == 0x7f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn request<'a>(extra: &'a [(String, String)], body: &'static str) -> Request<'a> {
        Request {
            method: "POST",
            path: "/mcp",
            headers: vec![("content-type", "application/json".into())],
            extra_headers: extra,
            body: Bytes::from_static(body.as_bytes()),
            retryable: true,
            trace: None,
        }
    }

    #[test]
    fn the_gateways_traceparent_replaces_the_clients() {
        let extra = [
            ("traceparent".to_owned(), "00-client-client-01".to_owned()),
            ("TraceState".to_owned(), "client=1".to_owned()),
            ("mcp-param-region".to_owned(), "eu".to_owned()),
        ];
        let ours = [
            ("traceparent", "00-ours-ours-01".to_owned()),
            ("tracestate", "ours=1".to_owned()),
        ];
        let wire = request_bytes(&request(&extra, "{}"), ("h", Some(1)), &ours).unwrap();
        let text = String::from_utf8(wire).unwrap();
        assert!(!text.contains("client"), "{text}");
        assert!(text.contains("traceparent: 00-ours-ours-01\r\n"));
        assert!(text.contains("tracestate: ours=1\r\n"));
        assert!(text.contains("mcp-param-region: eu\r\n"));
        // Untraced, the client's headers pass as they are.
        let wire = request_bytes(&request(&extra, "{}"), ("h", Some(1)), &[]).unwrap();
        assert!(String::from_utf8(wire)
            .unwrap()
            .contains("traceparent: 00-client-client-01"));
    }

    #[test]
    fn head_and_body_go_out_as_one_message() {
        let extra = [("mcp-param-region".to_owned(), "eu".to_owned())];
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let wire = request_bytes(&request(&extra, body), ("127.0.0.1", Some(9)), &[]).unwrap();
        let text = String::from_utf8(wire).unwrap();
        let (head, rest) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(rest, body);
        let mut lines = head.split("\r\n");
        assert_eq!(lines.next(), Some("POST /mcp HTTP/1.1"));
        let mut fields: Vec<&str> = lines.collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                "content-length: 46",
                "content-type: application/json",
                "host: 127.0.0.1:9",
                "mcp-param-region: eu",
            ]
        );
    }

    #[test]
    fn the_checks_accept_what_rfc_9110_allows() {
        let symbols = b"!#$%&'*+-.^_`|~";
        for b in 0..=255u8 {
            let token = b.is_ascii_alphanumeric() || symbols.contains(&b);
            assert_eq!(crate::exchange::is_tchar(b), token, "{b:#x}");
            let field = b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80;
            if let Ok(one) = std::str::from_utf8(&[b]) {
                assert_eq!(value_ok(one), field, "{b:#x}");
                assert_eq!(
                    value_ok(&format!("a long enough value {one} to fill a lane")),
                    field
                );
            }
        }
        assert!(value_ok("caf\u{e9} \u{1f697}\t"));
        assert!(!is_token(""));
    }

    #[test]
    fn the_host_line_is_the_header_line_of_the_authority() {
        for (host, port) in [
            ("h", Some(1)),
            ("127.0.0.1", Some(9)),
            ("[::1]", Some(8080)),
            ("upstream.example", None),
            (" padded\t", None),
            (" padded ", Some(81)),
            ("", None),
        ] {
            let text = match port {
                Some(p) => format!("{host}:{p}"),
                None => host.to_owned(),
            };
            let (mut ours, mut joined) = (Vec::new(), Vec::new());
            host_line(&mut ours, (host, port)).unwrap();
            header_line(&mut joined, "host", &text).unwrap();
            assert_eq!(ours, joined, "{host:?} {port:?}");
        }
        assert!(host_line(&mut Vec::new(), ("h\r\nx: 1", Some(1))).is_err());
    }

    #[test]
    fn a_forwarded_value_cannot_split_the_request() {
        for bad in ["eu\r\nx-injected: 1", "eu\nx: 1", "eu\0", "eu\x7f"] {
            let extra = [("mcp-param-region".to_owned(), bad.to_owned())];
            assert!(
                request_bytes(&request(&extra, "{}"), ("h", Some(1)), &[]).is_err(),
                "{bad:?}"
            );
        }
        for name in ["", "mcp-param-a b", "mcp-param-a:b", "x\r\ny"] {
            let extra = [(name.to_owned(), "v".to_owned())];
            assert!(
                request_bytes(&request(&extra, "{}"), ("h", Some(1)), &[]).is_err(),
                "{name:?}"
            );
        }
        let mut req = request(&[], "{}");
        req.path = "/mcp HTTP/1.1\r\nx: 1";
        assert!(request_bytes(&req, ("h", Some(1)), &[]).is_err());
    }
}
