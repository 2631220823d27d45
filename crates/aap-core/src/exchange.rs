//! Transport-neutral request and response types.
//!
//! The protocol core works on these; only `ingress` and `admin.rs` know
//! about Pingora.

use bytes::Bytes;
use std::borrow::Cow;
use std::net::IpAddr;

/// An HTTP request as the core sees it: header names lowercased, values raw.
#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderFields,
    pub body: Bytes,
    pub peer_ip: Option<IpAddr>,
    /// The HTTP version the request came in on.
    pub version: HttpVersion,
}

/// The HTTP version of a request: what spans (`network.protocol.version`) and access lines
/// (`protocol`) report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HttpVersion {
    Http10,
    #[default]
    Http11,
    Http2,
}

impl HttpVersion {
    /// HTTP/1.x by its minor version (1.2–1.9 are handled as 1.1).
    pub fn http1(minor: u8) -> HttpVersion {
        if minor == 0 {
            HttpVersion::Http10
        } else {
            HttpVersion::Http11
        }
    }

    /// OpenTelemetry's `network.protocol.version`: `1.0`, `1.1` or `2`.
    pub fn number(self) -> &'static str {
        match self {
            HttpVersion::Http10 => "1.0",
            HttpVersion::Http11 => "1.1",
            HttpVersion::Http2 => "2",
        }
    }

    /// The access line's `protocol`: `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`.
    pub fn protocol(self) -> &'static str {
        match self {
            HttpVersion::Http10 => "HTTP/1.0",
            HttpVersion::Http11 => "HTTP/1.1",
            HttpVersion::Http2 => "HTTP/2",
        }
    }
}

impl HttpRequest {
    /// All values of a header (name matched case-insensitively).
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.get_all(name)
    }

    /// The single value of a header as UTF-8, if present exactly once and valid.
    pub fn header_str<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        let mut it = self.header_all(name);
        let first = it.next()?;
        if it.next().is_some() {
            return None;
        }
        std::str::from_utf8(first).ok()
    }

    pub fn header_count<'a>(&'a self, name: &'a str) -> usize {
        self.header_all(name).count()
    }
}

/// A request's header fields in the order they came: names lowercased, values as sent, all in
/// one buffer.
///
/// A request head has a handful of fields, each looked at a few times. Kept as one buffer and
/// the fields' offsets, a head costs two allocations instead of two per field (a name and a
/// value each), which was a tenth of a proxied search's allocations.
///
/// ```
/// use aap_core::exchange::HeaderFields;
/// let mut f: HeaderFields = [("Content-Type", &b"application/json"[..]), ("X-A", b"1")]
///     .into_iter()
///     .collect();
/// assert_eq!(f.push("X-a", b"2"), "x-a");
/// assert_eq!(f.get_all("x-a").collect::<Vec<_>>(), [&b"1"[..], b"2"]);
/// assert_eq!(f.iter().next(), Some(("content-type", &b"application/json"[..])));
/// assert_eq!(f.len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderFields {
    bytes: Vec<u8>,
    /// Each field's name start, value start (the name's end) and value end in `bytes`.
    spans: Vec<[u32; 3]>,
}

impl HeaderFields {
    /// Room for `fields` fields of `bytes` bytes of names and values in all.
    pub fn with_capacity(fields: usize, bytes: usize) -> HeaderFields {
        HeaderFields {
            bytes: Vec::with_capacity(bytes),
            spans: Vec::with_capacity(fields),
        }
    }

    /// Add a field after the others; the name is lowercased, and returned so (for a reader
    /// that looks at the name as it adds the field). Heads are refused long before they reach
    /// 4 GiB, the most the offsets count.
    pub fn push(&mut self, name: &str, value: &[u8]) -> &str {
        let at = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let n0 = self.bytes.len();
        self.bytes
            .extend(name.bytes().map(|b| b.to_ascii_lowercase()));
        let v0 = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.spans.push([at(n0), at(v0), at(self.bytes.len())]);
        // Only ASCII letters changed case, so the name is still text.
        let name = self.bytes.get(n0..v0).unwrap_or_default();
        std::str::from_utf8(name).unwrap_or_default()
    }

    /// `(name, value)` in order, names lowercased.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.spans.iter().map(|&[n, v, end]| {
            let name = self.bytes.get(n as usize..v as usize).unwrap_or_default();
            // Names were pushed as text and only ASCII letters changed case.
            let name = std::str::from_utf8(name).unwrap_or_default();
            (
                name,
                self.bytes.get(v as usize..end as usize).unwrap_or_default(),
            )
        })
    }

    /// Every value of the fields named `name` (any case), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        // Compared as bytes: a call looks fields up a few dozen times, and `iter` checks each
        // name it yields is text.
        self.spans.iter().filter_map(move |&[n, v, end]| {
            let this = self.bytes.get(n as usize..v as usize)?;
            this.eq_ignore_ascii_case(name.as_bytes())
                .then(|| self.bytes.get(v as usize..end as usize))
                .flatten()
        })
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

impl<'a> FromIterator<(&'a str, &'a [u8])> for HeaderFields {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a [u8])>>(fields: I) -> HeaderFields {
        let mut out = HeaderFields::default();
        for (name, value) in fields {
            out.push(name, value);
        }
        out
    }
}

/// Body chunks that follow [`HttpResponse::body`] when the answer streams
/// (request-scoped SSE); the response ends when the sender is dropped.
pub type BodyStream = tokio::sync::mpsc::Receiver<Bytes>;

/// A response header field's name or value: most are constants, so they are borrowed.
pub type FieldText = Cow<'static, str>;

/// An HTTP response produced by the core.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Names lowercased.
    pub headers: Vec<(FieldText, FieldText)>,
    /// The whole body, or its first part when `stream` is set.
    pub body: Bytes,
    /// More body, written as it arrives (chunked framing).
    pub stream: Option<BodyStream>,
}

impl HttpResponse {
    pub fn new(status: u16) -> Self {
        HttpResponse {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
            stream: None,
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Self::json_bytes(status, serde_json::to_vec(value).unwrap_or_default())
    }

    /// An `application/json` response from an already serialized body.
    pub fn json_bytes(status: u16, body: Vec<u8>) -> Self {
        // Room for the fields most answers get next (`vary`, the correlation id, CORS).
        let mut headers = Vec::with_capacity(4);
        headers.push(("content-type".into(), "application/json".into()));
        HttpResponse {
            status,
            headers,
            body: Bytes::from(body),
            stream: None,
        }
    }

    /// A single-event `text/event-stream` response carrying one JSON-RPC message.
    pub fn sse(status: u16, value: &serde_json::Value) -> Self {
        Self::sse_bytes(status, &serde_json::to_vec(value).unwrap_or_default())
    }

    /// [`HttpResponse::sse`] from an already serialized (single-line) message.
    pub fn sse_bytes(status: u16, message: &[u8]) -> Self {
        let mut body = Vec::with_capacity(message.len() + 24);
        body.extend_from_slice(b"event: message\ndata: ");
        body.extend_from_slice(message);
        body.extend_from_slice(b"\n\n");
        HttpResponse {
            status,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
                ("x-accel-buffering".into(), "no".into()),
            ],
            body: Bytes::from(body),
            stream: None,
        }
    }

    /// The head of a streamed `text/event-stream` response (no body yet).
    pub fn sse_headers(status: u16) -> Self {
        HttpResponse {
            status,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
                ("x-accel-buffering".into(), "no".into()),
            ],
            body: Bytes::new(),
            stream: None,
        }
    }

    /// Add a field; `name` is a constant in lowercase (as HTTP/2 requires).
    pub fn with_header(mut self, name: &'static str, value: impl Into<FieldText>) -> Self {
        debug_assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "{name}");
        self.headers.push((Cow::Borrowed(name), value.into()));
        self
    }

    /// Add fields built at run time (names lowercased).
    pub fn add_fields(&mut self, fields: impl IntoIterator<Item = (String, String)>) {
        self.headers
            .extend(fields.into_iter().map(|(n, v)| (n.into(), v.into())));
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

/// An RFC 9110 `tchar`: ALPHA, DIGIT or one of ``!#$%&'*+-.^_`|~`` (chunk extensions, field
/// names: the upstream request's, CORS's requested ones, the OTLP exporter's configured ones).
pub fn is_tchar(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

/// An RFC 9110 `token`: one or more [`is_tchar`] bytes.
///
/// ```
/// use aap_core::exchange::is_token;
/// assert!(is_token("x-trace-id") && is_token("POST"));
/// assert!(!is_token("") && !is_token("a b") && !is_token("na:me"));
/// ```
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// Which bytes are token characters: one table load per byte, where searching the symbol
/// list for each byte made the name check most of a header line's cost.
static TOKEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    table
};
