//! Strict HTTP/1.1 message framing for the ingress (RFC 9110/9112): the
//! request head and its checks, and the response head.
//!
//! The head is tokenized by `httparse`; every framing decision (version,
//! request target, `Host`, `Content-Length`, `Transfer-Encoding`, `Expect`,
//! `Connection`) is made here, before a byte of the body is read. Chunked
//! bodies are decoded by [`crate::chunked`] (re-exported here), which the
//! upstream client shares.

pub use crate::chunked::{ChunkError, Chunked, Step};
use aap_core::exchange::{FieldText, HeaderFields};
use std::mem::MaybeUninit;

/// The most header lines the tokenizer holds (see the config limit).
pub use aap_core::config::MAX_HEADER_LINES;
/// The longest request line accepted (method, target, version).
pub const MAX_REQUEST_LINE: usize = 8192;

/// Why a request is refused before it reaches the gateway: the status and a
/// message for the JSON-RPC error body. Every refusal closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
    /// The access-log / metrics outcome.
    pub outcome: &'static str,
}

impl Refusal {
    pub fn new(status: u16, outcome: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
            outcome,
        }
    }

    fn bad(message: impl Into<String>) -> Refusal {
        Refusal::new(400, "bad_request", message)
    }
}

impl From<ChunkError> for Refusal {
    fn from(e: ChunkError) -> Refusal {
        match e {
            ChunkError::Malformed(m) => {
                Refusal::bad(format!("Bad Request: malformed chunked body: {m}"))
            }
            ChunkError::TrailerTooLarge => Refusal::new(
                431,
                "headers_too_large",
                "Request Header Fields Too Large: the chunked trailer is too large",
            ),
        }
    }
}

/// How the request body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// A complete, checked request head.
#[derive(Debug)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Names lowercased, values as sent.
    pub headers: HeaderFields,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1 (and 1.2–1.9, handled as 1.1).
    pub minor: u8,
    pub framing: Framing,
    /// The client allows the connection to stay open after the response.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request.
    pub expect_continue: bool,
    /// Bytes of the head in the buffer (request line through the empty line).
    pub len: usize,
}

/// The limits the head is checked against.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_headers: usize,
    pub max_header_bytes: usize,
}

impl HeadLimits {
    /// The most bytes an incomplete head may take before it is refused.
    pub fn max_head_bytes(&self) -> usize {
        // Each field line costs its name, value, ": " and CRLF; the request
        // line and the final CRLF come on top.
        self.max_header_bytes + MAX_REQUEST_LINE + 2
    }
}

/// Where the end of the head (an empty line) is, if it has arrived;
/// `from` is where the previous search stopped, so a head that trickles in
/// is scanned once in total.
pub fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(3);
    let mut i = start;
    while let Some(p) = buf[i..].iter().position(|&b| b == b'\n') {
        let at = i + p;
        // "\n\r\n" or "\n\n" ends the head.
        if buf.get(at + 1) == Some(&b'\n') {
            return Some(at + 2);
        }
        if buf.get(at + 1) == Some(&b'\r') && buf.get(at + 2) == Some(&b'\n') {
            return Some(at + 3);
        }
        i = at + 1;
    }
    None
}

/// Leading empty lines before a request line are ignored (RFC 9112 §2.2);
/// returns how many bytes of them `buf` starts with.
pub fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut n = 0;
    loop {
        match &buf[n..] {
            [b'\r', b'\n', ..] => n += 2,
            [b'\n', ..] => n += 1,
            _ => return n,
        }
    }
}

/// Before the head is complete: refuse a request line that is over-long or
/// names a major version other than 1, and rewrite `HTTP/1.x` (x ≥ 2) to
/// `HTTP/1.1` in place (RFC 9110 §2.5: a higher minor version is handled as
/// the highest this server supports). `buf` starts at the request line.
pub fn check_request_line(buf: &mut [u8]) -> Result<(), Refusal> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_REQUEST_LINE {
            return Err(Refusal::new(
                414,
                "uri_too_long",
                format!("URI Too Long: the request line exceeds {MAX_REQUEST_LINE} bytes"),
            ));
        }
        return Ok(());
    };
    if end > MAX_REQUEST_LINE {
        return Err(Refusal::new(
            414,
            "uri_too_long",
            format!("URI Too Long: the request line exceeds {MAX_REQUEST_LINE} bytes"),
        ));
    }
    if end == 0 || buf[end - 1] != b'\r' {
        return Err(Refusal::bad(
            "Bad Request: the request line must end with CRLF",
        ));
    }
    let line = &mut buf[..end - 1];
    let Some(sp) = line.iter().rposition(|&b| b == b' ') else {
        return Err(Refusal::bad("Bad Request: malformed request line"));
    };
    let version = &mut line[sp + 1..];
    match version {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            if *major != b'1' {
                return Err(Refusal::new(
                    505,
                    "version_not_supported",
                    "HTTP Version Not Supported: use HTTP/1.1",
                ));
            }
            if *minor > b'1' {
                *minor = b'1';
            }
            Ok(())
        }
        _ => Err(Refusal::bad("Bad Request: malformed HTTP version")),
    }
}

/// Parse and check a complete head: `buf[..len]` ends with the empty line
/// ([`find_head_end`]) and starts at the request line.
pub fn parse_head(buf: &[u8], limits: &HeadLimits) -> Result<Head, Refusal> {
    // A bare LF ending a field line would be read differently by a parser
    // that only splits on CRLF; refuse it (RFC 9112 §2.2 allows either).
    for (i, &b) in buf.iter().enumerate() {
        if b == b'\n' && (i == 0 || buf[i - 1] != b'\r') {
            return Err(Refusal::bad("Bad Request: a header line ends in a bare LF"));
        }
    }
    let mut slots: [MaybeUninit<httparse::Header<'_>>; MAX_HEADER_LINES] =
        [const { MaybeUninit::uninit() }; MAX_HEADER_LINES];
    let mut req = httparse::Request::new(&mut []);
    let status = httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, &mut slots);
    let too_many = || {
        Refusal::new(
            431,
            "headers_too_large",
            format!(
                "Request Header Fields Too Large: at most {} headers and {} bytes",
                limits.max_headers, limits.max_header_bytes
            ),
        )
    };
    let len = match status {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Err(Refusal::bad("Bad Request: incomplete request head"))
        }
        Err(httparse::Error::TooManyHeaders) => return Err(too_many()),
        Err(httparse::Error::Version) => {
            return Err(Refusal::bad("Bad Request: malformed HTTP version"))
        }
        Err(e) => return Err(Refusal::bad(format!("Bad Request: {e}"))),
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(Refusal::bad("Bad Request: malformed request line"));
    };
    let header_bytes: usize = req
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 4)
        .sum();
    if req.headers.len() > limits.max_headers || header_bytes > limits.max_header_bytes {
        return Err(too_many());
    }
    let (path, query, target_authority) = split_target(method, target)?;
    let mut hosts = 0usize;
    let mut host_value: &[u8] = b"";
    let mut length: Option<u64> = None;
    let mut lengths = 0usize;
    let mut codings = Codings::default();
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut headers = HeaderFields::with_capacity(req.headers.len(), header_bytes);
    for h in req.headers.iter() {
        let value = trim_ows(h.value);
        match headers.push(h.name, h.value) {
            "host" => {
                hosts += 1;
                host_value = value;
                if !valid_host(value) {
                    return Err(Refusal::bad("Bad Request: invalid Host header"));
                }
            }
            "content-length" => {
                lengths += 1;
                length = Some(parse_length(value)?);
            }
            "transfer-encoding" => codings.add(value),
            "connection" => {
                for token in value.split(|&b| b == b',') {
                    let token = trim_ows(token);
                    close |= token.eq_ignore_ascii_case(b"close");
                    keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            }
            "expect" => {
                if value.eq_ignore_ascii_case(b"100-continue") {
                    expect_continue = minor == 1;
                } else {
                    return Err(Refusal::new(
                        417,
                        "expectation_failed",
                        "Expectation Failed: only Expect: 100-continue is supported",
                    ));
                }
            }
            _ => {}
        }
    }
    // RFC 9112 §3.2: exactly one Host on HTTP/1.1, at most one on 1.0.
    if hosts > 1 || (minor == 1 && hosts == 0) {
        return Err(Refusal::bad(
            "Bad Request: an HTTP/1.1 request needs exactly one Host header",
        ));
    }
    // RFC 9112 §3.2.2: an absolute-form target's authority is the request's, not Host's; a
    // Host naming another host is refused rather than served by either (a front proxy that
    // authorized one of them must not see the gateway serve the other).
    if let Some((authority, default_port)) = target_authority {
        let host = std::str::from_utf8(host_value).unwrap_or("");
        if !aap_core::host::same_authority(authority, host, default_port) {
            return Err(Refusal::bad(
                "Bad Request: the request target names another host than the Host header",
            ));
        }
    }
    if lengths > 1 {
        return Err(Refusal::bad(
            "Bad Request: more than one Content-Length header",
        ));
    }
    let framing = match (codings.seen, length) {
        (false, None) => Framing::None,
        (false, Some(n)) => Framing::Length(n),
        (true, Some(_)) => {
            // RFC 9112 §6.1/§6.3: a smuggling pattern; refuse and close.
            return Err(Refusal::bad(
                "Bad Request: both Content-Length and Transfer-Encoding",
            ));
        }
        (true, None) if minor == 0 => {
            // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
            return Err(Refusal::bad(
                "Bad Request: Transfer-Encoding in an HTTP/1.0 request",
            ));
        }
        (true, None) => codings.framing()?,
    };
    Ok(Head {
        method: method.to_owned(),
        path,
        query,
        headers,
        minor,
        framing,
        keep_alive: if minor == 0 {
            keep_alive_token && !close
        } else {
            !close
        },
        expect_continue,
        len,
    })
}

/// The transfer codings of every `Transfer-Encoding` line, in order.
#[derive(Default)]
struct Codings {
    seen: bool,
    chunked: usize,
    chunked_last: bool,
    other: bool,
}

impl Codings {
    fn add(&mut self, value: &[u8]) {
        self.seen = true;
        for coding in value.split(|&b| b == b',') {
            let coding = trim_ows(coding);
            if coding.is_empty() {
                // Empty list elements are allowed and mean nothing (RFC 9110 §5.6.1).
                continue;
            }
            if coding.eq_ignore_ascii_case(b"chunked") {
                self.chunked += 1;
                self.chunked_last = true;
            } else {
                self.other = true;
                self.chunked_last = false;
            }
        }
    }

    /// Only a single `chunked`, last, is a body we can read.
    fn framing(&self) -> Result<Framing, Refusal> {
        if self.chunked > 1 {
            return Err(Refusal::bad("Bad Request: chunked applied more than once"));
        }
        if !self.chunked_last {
            // RFC 9112 §6.3: without a final chunked the length is unknowable.
            return Err(Refusal::bad(
                "Bad Request: chunked is not the final transfer coding",
            ));
        }
        if self.other {
            return Err(Refusal::new(
                501,
                "not_implemented",
                "Not Implemented: the only transfer coding accepted is chunked",
            ));
        }
        Ok(Framing::Chunked)
    }
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

fn parse_length(v: &[u8]) -> Result<u64, Refusal> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(Refusal::bad("Bad Request: invalid Content-Length"));
    }
    Ok(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// `uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2); empty is
/// allowed (a target without authority).
fn valid_host(v: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = v.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..close];
        if literal.is_empty()
            || !literal
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return false;
        }
        match &rest[close + 1..] {
            [] => return true,
            [b':', port @ ..] => (&b""[..], port),
            _ => return false,
        }
    } else {
        match v.iter().rposition(|&b| b == b':') {
            Some(i) => (&v[..i], &v[i + 1..]),
            None => (v, &b""[..]),
        }
    };
    let reg_name = |b: &u8| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(b);
    host.iter().all(reg_name) && port.len() <= 5 && port.iter().all(u8::is_ascii_digit)
}

/// Path, query and, for an absolute-form target, its authority with the scheme's default
/// port (RFC 9112 §3.2).
type Target<'a> = (String, Option<String>, Option<(&'a str, u16)>);

/// Split an origin-form, asterisk-form or absolute-form target (RFC 9112 §3.2).
fn split_target<'a>(method: &str, target: &'a str) -> Result<Target<'a>, Refusal> {
    let bad = || Refusal::bad("Bad Request: invalid request target");
    if !target
        .bytes()
        .all(|b| (0x21..0x7f).contains(&b) && b != b'#')
    {
        return Err(bad());
    }
    let mut named = None;
    let origin = if target.starts_with('/') {
        target
    } else if target == "*" && method == "OPTIONS" {
        "*"
    } else {
        let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
        let (rest, default_port) = if lower.starts_with("http://") {
            (&target[7..], 80)
        } else if lower.starts_with("https://") {
            (&target[8..], 443)
        } else {
            return Err(bad());
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.is_empty() || authority.contains('@') || !valid_host(authority.as_bytes()) {
            return Err(bad());
        }
        named = Some((authority, default_port));
        match &rest[end..] {
            "" => "/",
            r if r.starts_with('?') => {
                return Ok(("/".to_owned(), Some(r[1..].to_owned()), named));
            }
            r => r,
        }
    };
    Ok(match origin.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned()), named),
        None => (origin.to_owned(), None, named),
    })
}

/// One request framed from a buffer.
#[derive(Debug)]
pub struct Framed {
    pub head: Head,
    pub body: Vec<u8>,
    /// Bytes of `buf` this request used (leading empty lines, head and body).
    pub consumed: usize,
}

/// One request framed from the start of `buf` by the steps the connection loop takes: leading
/// empty lines skipped, the request line checked, the head parsed and its body read by its
/// framing under `max_body`. `Ok(None)` when more bytes are needed. The fuzz targets and the
/// property tests compare it with independent parsers and across ways of splitting the input.
pub fn frame(
    buf: &mut [u8],
    limits: &HeadLimits,
    max_body: usize,
) -> Result<Option<Framed>, Refusal> {
    let skip = leading_empty_lines(buf);
    let rest = &mut buf[skip..];
    if rest.is_empty() {
        return Ok(None);
    }
    check_request_line(rest)?;
    let Some(end) = find_head_end(rest, 0) else {
        if rest.len() > limits.max_head_bytes() {
            return Err(Refusal::new(
                431,
                "headers_too_large",
                "Request Header Fields Too Large",
            ));
        }
        return Ok(None);
    };
    let head = parse_head(&rest[..end], limits)?;
    let mut at = skip + end;
    let too_large = || Refusal::new(413, "body_too_large", "Content Too Large");
    let body = match head.framing {
        Framing::None => Vec::new(),
        Framing::Length(n) => {
            if n > max_body as u64 {
                return Err(too_large());
            }
            let n = n as usize;
            let Some(body) = buf.get(at..at + n) else {
                return Ok(None);
            };
            at += n;
            body.to_vec()
        }
        Framing::Chunked => {
            let mut decoder = Chunked::new(limits.max_header_bytes);
            let mut body = Vec::new();
            loop {
                match decoder.decode(&buf[at..])? {
                    Step::Progress { consumed, data } => {
                        let data = &buf[at..][data];
                        if (body.len() + data.len()) as u64 + decoder.announced() > max_body as u64
                        {
                            return Err(too_large());
                        }
                        body.extend_from_slice(data);
                        at += consumed;
                    }
                    Step::Done { consumed } => {
                        at += consumed;
                        break body;
                    }
                    Step::More => return Ok(None),
                }
            }
        }
    };
    Ok(Some(Framed {
        head,
        body,
        consumed: at,
    }))
}

/// The reason phrase written for `status`.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// How a response body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    Length(usize),
    Chunked,
    /// HTTP/1.0 streaming: the body ends when the connection closes.
    UntilClose,
}

/// Append a response head to `out`. Framing and `Connection` come from the
/// arguments; the same headers from `headers` are dropped, and so is any
/// header that could break the head (CR, LF or NUL in it).
pub fn write_head(
    out: &mut Vec<u8>,
    minor: u8,
    status: u16,
    headers: &[(FieldText, FieldText)],
    body: BodyFraming,
    keep_alive: bool,
) {
    // Always 1.1, the highest version we conform to (RFC 9110 §6.2); `minor`
    // only decides what the client can read (chunked, keep-alive).
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (n, v) in headers {
        let framing = n.eq_ignore_ascii_case("content-length")
            || n.eq_ignore_ascii_case("transfer-encoding")
            || n.eq_ignore_ascii_case("connection");
        let unsafe_bytes = n
            .bytes()
            .chain(v.bytes())
            .any(|b| b == b'\r' || b == b'\n' || b == 0);
        if framing || unsafe_bytes || n.is_empty() {
            continue;
        }
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match body {
        // RFC 9110 §8.6: never on a 204; a 304 would announce the length of
        // the representation it stands for, so none is sent there either.
        BodyFraming::Length(0) if status == 204 || status == 304 => {}
        BodyFraming::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        BodyFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        BodyFraming::UntilClose => {}
    }
    match (keep_alive, minor) {
        (false, _) => out.extend_from_slice(b"connection: close\r\n"),
        (true, 0) => out.extend_from_slice(b"connection: keep-alive\r\n"),
        (true, _) => {}
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_headers: 100,
        max_header_bytes: 16384,
    };

    fn head(text: &str) -> Result<Head, Refusal> {
        let mut b = text.as_bytes().to_vec();
        check_request_line(&mut b)?;
        let end = find_head_end(&b, 0).expect("complete");
        parse_head(&b[..end], &LIMITS)
    }

    #[test]
    fn head_end_is_found_across_reads() {
        let text = b"POST / HTTP/1.1\r\nHost: x\r\n\r\nbody";
        for split in 0..text.len() - 4 {
            assert_eq!(find_head_end(&text[..split], 0), None, "{split}");
        }
        assert_eq!(find_head_end(text, 20), Some(text.len() - 4));
    }

    #[test]
    fn versions() {
        assert_eq!(head("GET / HTTP/1.2\r\nHost: x\r\n\r\n").unwrap().minor, 1);
        assert_eq!(head("GET / HTTP/1.0\r\n\r\n").unwrap().minor, 0);
        assert_eq!(
            head("GET / HTTP/2.0\r\nHost: x\r\n\r\n")
                .unwrap_err()
                .status,
            505
        );
        assert_eq!(
            head("GET / HTTP/1.10\r\nHost: x\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            head("GET  / HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn transfer_codings() {
        let te = |v: &str| head(&format!("POST / HTTP/1.1\r\nHost: x\r\n{v}\r\n\r\n"));
        assert_eq!(
            te("Transfer-Encoding: chunked").unwrap().framing,
            Framing::Chunked
        );
        assert_eq!(
            te("Transfer-Encoding: CHUNKED").unwrap().framing,
            Framing::Chunked
        );
        for (v, status) in [
            ("Transfer-Encoding: chunked, chunked", 400),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
                400,
            ),
            ("Transfer-Encoding: gzip, chunked", 501),
            ("Transfer-Encoding: identity, chunked", 501),
            ("Transfer-Encoding: chunked, gzip", 400),
            ("Transfer-Encoding: gzip", 400),
            ("Transfer-Encoding: chunked\r\nContent-Length: 3", 400),
            ("Content-Length: 3\r\nContent-Length: 3", 400),
            ("Content-Length: +3", 400),
        ] {
            assert_eq!(te(v).unwrap_err().status, status, "{v}");
        }
    }

    #[test]
    fn hosts_and_targets() {
        for ok in ["x", "", "127.0.0.1:8080", "[::1]:80", "a.example"] {
            assert!(
                head(&format!("GET / HTTP/1.1\r\nHost: {ok}\r\n\r\n")).is_ok(),
                "{ok}"
            );
        }
        for bad in ["a b", "x/y", "a@b", "[::1", "x:80a"] {
            assert_eq!(
                head(&format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n"))
                    .unwrap_err()
                    .status,
                400,
                "{bad}"
            );
        }
        assert_eq!(head("GET / HTTP/1.1\r\n\r\n").unwrap_err().status, 400);
        let h = head("POST http://x:1/aap/m?q=1 HTTP/1.1\r\nHost: x:1\r\n\r\n").unwrap();
        assert_eq!(
            (h.path.as_str(), h.query.as_deref()),
            ("/aap/m", Some("q=1"))
        );
        assert_eq!(
            head("GET x/y HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn config_limits_fit_the_tokenizer() {
        let at = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("gateway.toml");
        let shipped = include_str!("../../gateway.toml");
        let parse = |text: &str| crate::config::Config::parse(text, &at);
        let cfg = parse(shipped).expect("shipped config");
        assert_eq!(
            (
                cfg.limits.max_connections,
                cfg.limits.max_connections_per_ip
            ),
            (10_000, 1_000)
        );
        let e = parse(&shipped.replace("max_headers = 100", "max_headers = 257")).unwrap_err();
        assert!(e.to_string().contains("limits.max_headers"), "{e}");
        assert!(parse(&shipped.replace("max_headers = 100", "max_headers = 256")).is_ok());
    }

    fn decode_all(body: &[u8]) -> Result<Vec<u8>, Refusal> {
        let mut c = Chunked::new(1024);
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            match c.decode(&body[at..])? {
                Step::Progress { consumed, data } => {
                    out.extend_from_slice(&body[at..][data]);
                    at += consumed;
                }
                Step::Done { .. } => return Ok(out),
                Step::More => return Err(Refusal::bad("incomplete")),
            }
        }
    }

    #[test]
    fn chunked_is_strict() {
        assert_eq!(decode_all(b"3\r\nabc\r\n0\r\n\r\n").unwrap(), b"abc");
        assert_eq!(
            decode_all(b"3;a=b;c=\"d e\"\r\nabc\r\n0\r\nX-T: 1\r\n\r\n").unwrap(),
            b"abc"
        );
        for bad in [
            &b"3;a\nX\r\nabc\r\n0\r\n\r\n"[..],
            b"3\nabc\r\n0\r\n\r\n",
            b"3\r\nabcX\r\n0\r\n\r\n",
            b"x\r\n",
            b"3;\r\nabc\r\n0\r\n\r\n",
            b"3\r\nabc\r\n0\r\nbad trailer\r\n\r\n",
        ] {
            assert!(
                decode_all(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
