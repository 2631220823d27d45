//! The transport-neutral request and response the core works on, in the `http` crate's types
//! (`Method`, `StatusCode`, `HeaderMap`); the gateway crate's ingress builds and writes them.

use bytes::Bytes;
pub use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use std::net::IpAddr;

/// An HTTP request as the core sees it: header values raw, in arrival order.
///
/// ```
/// use aap_core::exchange::{HttpRequest, Method};
/// let mut req = HttpRequest::new(Method::POST, "/mcp");
/// req.append_header("Content-Type", b"application/json");
/// assert_eq!(req.header_str("content-type"), Some("application/json"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    pub method: Method,
    /// Path without the query string.
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub peer_ip: Option<IpAddr>,
}

impl HttpRequest {
    pub fn new(method: Method, path: &str) -> Self {
        HttpRequest {
            method,
            path: path.to_owned(),
            ..Default::default()
        }
    }

    /// Add a header line; `false` (nothing added) when the name is not an
    /// HTTP token or the value holds a control character.
    pub fn append_header(&mut self, name: &str, value: &[u8]) -> bool {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            (Ok(n), Ok(v)) => {
                self.headers.append(n, v);
                true
            }
            _ => false,
        }
    }

    /// All values of a header (name matched case-insensitively).
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.get_all(name).iter().map(HeaderValue::as_bytes)
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

/// Body chunks that follow [`HttpResponse::body`] when the answer streams
/// (request-scoped SSE); the response ends when the sender is dropped.
pub type BodyStream = tokio::sync::mpsc::Receiver<Bytes>;

/// An HTTP response produced by the core.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The whole body, or its first part when `stream` is set.
    pub body: Bytes,
    /// More body, written as it arrives (chunked framing).
    pub stream: Option<BodyStream>,
}

impl HttpResponse {
    pub fn new(status: u16) -> Self {
        HttpResponse {
            status: status_code(status),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            stream: None,
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Self::json_bytes(status, serde_json::to_vec(value).unwrap_or_default())
    }

    /// An `application/json` response from an already serialized body.
    pub fn json_bytes(status: u16, body: Vec<u8>) -> Self {
        HttpResponse::new(status)
            .with_header("content-type", "application/json")
            .with_body(Bytes::from(body))
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
        Self::sse_headers(status).with_body(Bytes::from(body))
    }

    /// The head of a streamed `text/event-stream` response (no body yet).
    pub fn sse_headers(status: u16) -> Self {
        HttpResponse::new(status)
            .with_header("content-type", "text/event-stream")
            .with_header("cache-control", "no-cache")
            .with_header("x-accel-buffering", "no")
    }

    fn with_body(mut self, body: Bytes) -> Self {
        self.body = body;
        self
    }

    /// Add a header line. A name that is not an HTTP token, or a value with
    /// a control character, is dropped (the core only writes its own names
    /// and values, so this never happens on input).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.append_header(name, value.into());
        self
    }

    /// [`HttpResponse::with_header`] in place.
    pub fn append_header(&mut self, name: &str, value: String) {
        let name = HeaderName::from_bytes(name.as_bytes());
        let value = HeaderValue::try_from(value);
        if let (Ok(n), Ok(v)) = (name, value) {
            self.headers.append(n, v);
        } else {
            tracing::debug!("an invalid response header was dropped");
        }
    }

    /// [`HttpResponse::append_header`] for each pair.
    pub fn extend_headers(&mut self, headers: impl IntoIterator<Item = (String, String)>) {
        for (name, value) in headers {
            self.append_header(&name, value);
        }
    }

    /// The first value of a header, if it is visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A status code from its number; an impossible one (outside 100–999) is a
/// 500, which the core never asks for.
fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
