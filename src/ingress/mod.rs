//! The public MCP listener: owns each client connection (limits, deadlines,
//! keep-alive and pipelining, lingering close) and speaks HTTP/1.1 itself.
//!
//! Pingora accepts the connection (and terminates TLS); from then on the
//! gateway runs the connection loop ([`pingora::apps::ServerApp`]) instead of
//! Pingora's HTTP/1 session, so that framing is strict ([`h1`]), every answer
//! (transport errors included) carries a JSON-RPC body and an access-log
//! line, and a connection costs nothing but its task until its first byte.
//! A connection that negotiated `h2` by ALPN, or opens with the HTTP/2 preface
//! on a plaintext listener with `server.h2c`, is served by [`h2`] instead.

pub mod conn;
pub mod h1;
pub mod h2;
pub mod h2_budget;
mod h2_frames;

use crate::context::RequestCtx;
use crate::error::Failure;
use crate::exchange::{HttpRequest, HttpResponse, HttpVersion};
use crate::gateway::Gateway;
use crate::mcp::jsonrpc::RpcError;
use async_trait::async_trait;
use bytes::{Buf, BytesMut};
use conn::{ConnTable, Full};
use h1::{BodyFraming, Framing, Head, HeadLimits, Refusal};
use pingora::apps::ServerApp;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Read-buffer growth step; the buffer is allocated on a connection's first
/// byte and reused by every request on it.
const READ_CHUNK: usize = 4096;
/// Lingering close (after an answer that leaves request bytes unread):
/// how long and how much the gateway keeps reading and discarding.
pub const LINGER_TIME: Duration = Duration::from_secs(5);
pub const LINGER_BYTES: usize = 4 << 20;
/// Longest a single write of an answer (or of one streamed part) may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bodies up to this size are copied behind the head in the write buffer;
/// larger ones leave with the head in one vectored write without the copy
/// (a search answer is about 13 KiB: its copy was about a microsecond).
const COPY_BODY_MAX: usize = 1024;
/// A refused connection (over a connection limit) lingers this long at most.
const REFUSED_LINGER_TIME: Duration = Duration::from_secs(1);

/// The public MCP listener.
pub struct Ingress {
    pub gateway: Arc<Gateway>,
    conns: Arc<ConnTable>,
    /// What every HTTP/2 stream holds, against `limits.h2_memory_bytes`.
    h2_memory: Arc<h2_budget::ProcessBudget>,
}

impl Ingress {
    pub fn new(gateway: Arc<Gateway>) -> Ingress {
        let h2 = gateway.platform().metrics.h2.clone();
        Ingress {
            gateway,
            conns: Arc::new(ConnTable::default()),
            h2_memory: Arc::new(h2_budget::ProcessBudget::new(h2)),
        }
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.conns.open()
    }
}

#[async_trait]
impl ServerApp for Ingress {
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let accepted = Instant::now();
        let peer = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let (max, max_per_ip, h2c, header_timeout) = {
            let rt = self.gateway.current();
            let l = &rt.config.limits;
            let s = &rt.config.server;
            (
                l.max_connections,
                l.max_connections_per_ip,
                s.h2c && s.tls.is_none(),
                Duration::from_millis(l.header_read_timeout_ms),
            )
        };
        // HTTP/2 connections count against the same limits as HTTP/1 ones.
        let (_guard, refused) = match self.conns.admit(peer, max, max_per_ip) {
            Ok(g) => (Some(g), None),
            Err(full) => (None, Some(full)),
        };
        let mut rbuf = BytesMut::new();
        let mut http2 = matches!(stream.selected_alpn_proto(), Some(ALPN::H2));
        if !http2 && h2c {
            let wait = if refused.is_some() {
                REFUSED_LINGER_TIME
            } else {
                header_timeout
            };
            let deadline = tokio::time::Instant::from_std(accepted + wait);
            match h2::sniff(&mut stream, &mut rbuf, deadline).await {
                h2::Sniff::Http2 => http2 = true,
                h2::Sniff::Http1 => {}
                h2::Sniff::Closed => return None,
                h2::Sniff::Timeout => {
                    let reason = refused.map_or("header_timeout", refusal_outcome);
                    crate::metrics::connection_closed(reason);
                    return None;
                }
            }
        }
        if http2 {
            if let Some(full) = refused {
                crate::metrics::connection_closed(refusal_outcome(full));
            }
            let io = h2::Rewind::new(rbuf.freeze(), stream);
            h2::serve(self, io, peer, accepted, shutdown, refused).await;
            return None;
        }
        let mut conn = Conn {
            ingress: self,
            stream,
            peer,
            rbuf,
            wbuf: Vec::new(),
        };
        match refused {
            None => conn.serve(shutdown, accepted).await,
            Some(full) => conn.refuse_connection(full).await,
        }
        None
    }
}

/// Why reading a head stopped without one.
enum NoHead {
    /// The client closed (or the socket failed): nothing to answer.
    Closed,
    /// The head did not arrive within `limits.header_read_timeout_ms`.
    Timeout,
    Refused(Refusal),
}

/// One client connection.
struct Conn<'a> {
    ingress: &'a Ingress,
    stream: Stream,
    peer: Option<IpAddr>,
    /// Bytes read and not yet consumed (the next head, body bytes, pipelined
    /// requests). No capacity until the first byte arrives.
    rbuf: BytesMut,
    /// The response being written (allocated on the first response).
    wbuf: Vec<u8>,
}

impl Conn<'_> {
    /// Requests in order until the connection closes.
    async fn serve(&mut self, shutdown: &ShutdownWatch, accepted: Instant) {
        let mut reused = false;
        loop {
            let (io, head_limits, write_cap) = {
                let rt = self.ingress.gateway.current();
                let l = &rt.config.limits;
                (
                    self.ingress.gateway.io_limits(),
                    HeadLimits {
                        max_headers: l.max_headers,
                        max_header_bytes: l.max_header_bytes,
                    },
                    rt.config.server.write_buffer_bytes,
                )
            };
            // Wait for the first byte of the next request. On shutdown (SIGTERM,
            // or the old process of an upgrade) an idle keep-alive connection
            // is closed at once; a fresh one is not: its request may already be
            // on its way (during an upgrade both processes accept on one socket).
            let head_deadline = if self.rbuf.is_empty() && reused {
                let mut rx = shutdown.clone();
                if *rx.borrow() {
                    return;
                }
                let first = tokio::select! {
                    biased;
                    r = tokio::time::timeout(io.idle_timeout, self.fill()) => r,
                    _ = rx.changed() => return,
                };
                match first {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        crate::metrics::connection_closed("idle_timeout");
                        return;
                    }
                }
                tokio::time::Instant::now() + io.header_timeout
            } else if reused {
                // Pipelined: the next head is already (partly) here.
                tokio::time::Instant::now() + io.header_timeout
            } else {
                tokio::time::Instant::from_std(accepted) + io.header_timeout
            };
            let started = Instant::now();
            let head = match self.read_head(head_deadline, &head_limits).await {
                Ok(h) => h,
                Err(NoHead::Closed) => return,
                Err(NoHead::Timeout) => {
                    // Slowloris, or a connection that never sent a request: no
                    // answer (the client is not reading one), just the count.
                    crate::metrics::connection_closed("header_timeout");
                    if !self.rbuf.is_empty() {
                        self.ingress.log_transport(TransportAnswer {
                            method: "-",
                            path: None,
                            status: 408,
                            outcome: "header_timeout",
                            started,
                            correlation: &new_correlation_id(),
                            version: HttpVersion::Http11,
                            peer: self.peer,
                            bytes_out: 0,
                        });
                    }
                    tracing::debug!(
                        reused,
                        timeout_ms = io.header_timeout.as_millis() as u64,
                        "request header not received in time; closing the connection"
                    );
                    return;
                }
                Err(NoHead::Refused(r)) => {
                    self.refuse(None, r, started, write_cap).await;
                    return;
                }
            };
            reused = true;
            if let Framing::Length(n) = head.framing {
                if n > io.max_body as u64 {
                    let r = too_large(io.max_body);
                    self.refuse(Some(&head), r, started, write_cap).await;
                    return;
                }
            }
            // 100 Continue only once the request passed every check made
            // before its body, and only if the body has not started arriving.
            // A refusal its head alone decides (404, 403, 405, 415, 406,
            // 401) is the final answer at once instead; the connection then
            // closes (lingering), since the client may send the body anyway.
            if head.expect_continue && head.framing != Framing::None && self.rbuf.is_empty() {
                let head_req = HttpRequest {
                    method: head.method.clone(),
                    path: head.path.clone(),
                    query: head.query.clone(),
                    headers: head.headers.clone(),
                    body: bytes::Bytes::new(),
                    peer_ip: self.peer,
                    version: HttpVersion::http1(head.minor),
                };
                if let Some(resp) = self.ingress.gateway.answer_before_body(&head_req).await {
                    if let Ok(false) = self
                        .write_response(resp, head.minor, false, false, write_cap)
                        .await
                    {
                        self.linger(LINGER_TIME).await;
                    }
                    return;
                }
                if send(&mut self.stream, &[b"HTTP/1.1 100 Continue\r\n\r\n"])
                    .await
                    .is_err()
                {
                    return;
                }
            }
            let body = match self
                .read_body(&head, io.max_body, io.body_timeout, &head_limits)
                .await
            {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(r) => {
                    self.refuse(Some(&head), r, started, write_cap).await;
                    return;
                }
            };
            let head_only = head.method == "HEAD";
            let minor = head.minor;
            let client_keep_alive = head.keep_alive;
            let req = HttpRequest {
                method: head.method,
                path: head.path,
                query: head.query,
                headers: head.headers,
                body,
                peer_ip: self.peer,
                version: HttpVersion::http1(head.minor),
            };
            // Boxed: the handler's state (about 12 KiB) lives only while a
            // request is being handled, not in every idle connection's task
            // (Pingora's own HTTP app boxed it per request as well).
            let (resp, span) = Box::pin(self.ingress.gateway.handle_traced(req)).await;
            self.ingress.h2_memory.saw_answer(resp.body.len());
            let write_started = std::time::Instant::now();
            // Draining (SIGTERM, before the listeners close): no keep-alive,
            // so the client's next request opens a connection the load
            // balancer sends elsewhere.
            let keep = client_keep_alive && !*shutdown.borrow() && !crate::shutdown::draining();
            let written = self
                .write_response(resp, minor, head_only, keep, write_cap)
                .await;
            if let Some(span) = span {
                span.written(write_started);
            }
            match written {
                Ok(true) => {}
                Ok(false) => {
                    self.linger(LINGER_TIME).await;
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Read into `rbuf`; the buffer gets its memory with the first byte.
    async fn fill(&mut self) -> std::io::Result<usize> {
        if self.rbuf.capacity() == 0 {
            let mut first = [0u8; 1];
            let n = self.stream.read(&mut first).await?;
            if n > 0 {
                self.rbuf.reserve(READ_CHUNK);
                self.rbuf.extend_from_slice(&first[..n]);
            }
            return Ok(n);
        }
        if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
        self.stream.read_buf(&mut self.rbuf).await
    }

    async fn read_head(
        &mut self,
        deadline: tokio::time::Instant,
        limits: &HeadLimits,
    ) -> Result<Head, NoHead> {
        let mut scanned = 0;
        loop {
            let skip = h1::leading_empty_lines(&self.rbuf);
            if skip > 0 {
                self.rbuf.advance(skip);
                scanned = 0;
            }
            if !self.rbuf.is_empty() {
                h1::check_request_line(&mut self.rbuf).map_err(NoHead::Refused)?;
                if let Some(end) = h1::find_head_end(&self.rbuf, scanned) {
                    let head =
                        h1::parse_head(&self.rbuf[..end], limits).map_err(NoHead::Refused)?;
                    self.rbuf.advance(end);
                    return Ok(head);
                }
                scanned = self.rbuf.len();
                if self.rbuf.len() > limits.max_head_bytes() {
                    return Err(NoHead::Refused(Refusal::new(
                        431,
                        "headers_too_large",
                        format!(
                            "Request Header Fields Too Large: at most {} headers and {} bytes",
                            limits.max_headers, limits.max_header_bytes
                        ),
                    )));
                }
            }
            match tokio::time::timeout_at(deadline, self.fill()).await {
                Err(_) => return Err(NoHead::Timeout),
                Ok(Ok(0)) | Ok(Err(_)) => return Err(NoHead::Closed),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// The whole body, `Ok(None)` when the client went away mid-body.
    async fn read_body(
        &mut self,
        head: &Head,
        limit: usize,
        timeout: Duration,
        limits: &HeadLimits,
    ) -> Result<Option<bytes::Bytes>, Refusal> {
        let deadline = tokio::time::Instant::now() + timeout;
        let slow = || {
            Refusal::new(
                408,
                "body_timeout",
                "Request Timeout: the body did not arrive in time",
            )
        };
        match head.framing {
            Framing::None => Ok(Some(bytes::Bytes::new())),
            Framing::Length(n) => {
                // n <= limit, checked before. The buffer grows as the body
                // arrives: a declared length alone does not reserve memory.
                let n = n as usize;
                let have = n.min(self.rbuf.len());
                let mut body = Vec::with_capacity(n.min(have.max(4 * READ_CHUNK)));
                body.extend_from_slice(&self.rbuf[..have]);
                self.rbuf.advance(have);
                while body.len() < n {
                    if body.capacity() == body.len() {
                        body.reserve((n - body.len()).min(body.len().max(4 * READ_CHUNK)));
                    }
                    let want = (n - body.len()).min(body.capacity() - body.len());
                    let mut limited = (&mut self.stream).take(want as u64);
                    match tokio::time::timeout_at(deadline, limited.read_buf(&mut body)).await {
                        Err(_) => return Err(slow()),
                        Ok(Ok(0)) | Ok(Err(_)) => return Ok(None),
                        Ok(Ok(_)) => {}
                    }
                }
                Ok(Some(bytes::Bytes::from(body)))
            }
            Framing::Chunked => {
                let mut decoder = h1::Chunked::new(limits.max_header_bytes);
                let mut body = Vec::new();
                loop {
                    match decoder.decode(&self.rbuf)? {
                        h1::Step::Progress { consumed, data } => {
                            // The data read plus what the current chunk still announces: a
                            // chunk size over the limit is refused as soon as it is read.
                            let announced = decoder.announced();
                            if (body.len() + data.len()) as u64 + announced > limit as u64 {
                                return Err(too_large(limit));
                            }
                            body.extend_from_slice(&self.rbuf[data]);
                            self.rbuf.advance(consumed);
                        }
                        h1::Step::Done { consumed } => {
                            self.rbuf.advance(consumed);
                            return Ok(Some(bytes::Bytes::from(body)));
                        }
                        h1::Step::More => {
                            match tokio::time::timeout_at(deadline, self.fill()).await {
                                Err(_) => return Err(slow()),
                                Ok(Ok(0)) | Ok(Err(_)) => return Ok(None),
                                Ok(Ok(_)) => {}
                            }
                        }
                    }
                }
            }
        }
    }

    /// Write a response; `Ok(true)` when the connection may serve another.
    async fn write_response(
        &mut self,
        mut resp: HttpResponse,
        minor: u8,
        head_only: bool,
        keep_alive: bool,
        write_cap: usize,
    ) -> std::io::Result<bool> {
        self.wbuf.clear();
        let Some(mut rest) = resp.stream.take() else {
            h1::write_head(
                &mut self.wbuf,
                minor,
                resp.status,
                &resp.headers,
                BodyFraming::Length(resp.body.len()),
                keep_alive,
            );
            if head_only {
                send(&mut self.stream, &[&self.wbuf]).await?;
            } else if resp.body.len() <= COPY_BODY_MAX
                && self.wbuf.len() + resp.body.len() <= write_cap
            {
                // A small body is copied behind the head.
                self.wbuf.extend_from_slice(&resp.body);
                send(&mut self.stream, &[&self.wbuf]).await?;
            } else {
                // Head and body in one vectored write, the body not copied.
                send(&mut self.stream, &[&self.wbuf, &resp.body]).await?;
            }
            return Ok(keep_alive);
        };
        // A stream: chunked framing (an HTTP/1.0 client reads to the close),
        // each part written and flushed as it comes.
        let chunked = minor >= 1;
        let keep_alive = keep_alive && chunked;
        let framing = if chunked {
            BodyFraming::Chunked
        } else {
            BodyFraming::UntilClose
        };
        h1::write_head(
            &mut self.wbuf,
            minor,
            resp.status,
            &resp.headers,
            framing,
            keep_alive,
        );
        let mut part = resp.body;
        loop {
            if !part.is_empty() {
                if chunked {
                    let mut size = [0u8; 16];
                    let n = hex(part.len(), &mut size);
                    self.wbuf.extend_from_slice(&size[..n]);
                    self.wbuf.extend_from_slice(b"\r\n");
                    self.wbuf.extend_from_slice(&part);
                    self.wbuf.extend_from_slice(b"\r\n");
                } else {
                    self.wbuf.extend_from_slice(&part);
                }
            }
            if !self.wbuf.is_empty() {
                send(&mut self.stream, &[&self.wbuf]).await?;
                self.wbuf.clear();
            }
            match rest.recv().await {
                Some(next) => part = next,
                None => break,
            }
        }
        if chunked {
            send(&mut self.stream, &[b"0\r\n\r\n"]).await?;
        }
        Ok(keep_alive)
    }

    /// Answer a request the transport refused (with the JSON-RPC error body),
    /// log it like any other, and close the connection (lingering).
    async fn refuse(
        &mut self,
        head: Option<&Head>,
        r: Refusal,
        started: Instant,
        write_cap: usize,
    ) {
        let correlation = new_correlation_id();
        let err = RpcError::of(Failure::Framing(r.status), r.message);
        let resp = HttpResponse::json(r.status, &err.to_body(None))
            .with_header("x-correlation-id", correlation.clone());
        let minor = head.map_or(1, |h| h.minor);
        let head_only = head.is_some_and(|h| h.method == "HEAD");
        let bytes_out = resp.body.len() as u64;
        let written = self
            .write_response(resp, minor, head_only, false, write_cap)
            .await;
        self.ingress.log_transport(TransportAnswer {
            method: head.map_or("-", |h| h.method.as_str()),
            path: head.map(|h| h.path.as_str()),
            status: r.status,
            outcome: r.outcome,
            started,
            correlation: &correlation,
            version: HttpVersion::http1(minor),
            peer: self.peer,
            bytes_out,
        });
        if written.is_ok() {
            self.linger(LINGER_TIME).await;
        }
    }

    /// Over a connection limit: answer at once (503 for the global limit,
    /// 429 for the per-client one, `Retry-After: 1`) and close.
    async fn refuse_connection(&mut self, full: Full) {
        let started = Instant::now();
        let (resp, outcome, correlation) = connection_refusal(full);
        crate::metrics::connection_closed(outcome);
        let status = resp.status;
        let bytes_out = resp.body.len() as u64;
        let written = self.write_response(resp, 1, false, false, 1 << 14).await;
        self.ingress.log_transport(TransportAnswer {
            method: "-",
            path: None,
            status,
            outcome,
            started,
            correlation: &correlation,
            version: HttpVersion::Http11,
            peer: self.peer,
            bytes_out,
        });
        if written.is_ok() {
            self.linger(REFUSED_LINGER_TIME).await;
        }
    }

    /// Lingering close, as nginx does: send the answer's FIN, then keep
    /// reading and discarding what the client still sends (the rest of a
    /// body it is writing) for up to `time` and [`LINGER_BYTES`], so the
    /// client reads the answer instead of a reset; then close.
    async fn linger(&mut self, time: Duration) {
        let _ = self.stream.flush().await;
        let _ = AsyncWriteExt::shutdown(&mut self.stream).await;
        let deadline = tokio::time::Instant::now() + time;
        self.rbuf.clear();
        let mut drained = 0usize;
        while drained <= LINGER_BYTES {
            if self.rbuf.capacity() < 1024 {
                self.rbuf.reserve(READ_CHUNK);
            }
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.rbuf)).await {
                Ok(Ok(n)) if n > 0 => {
                    drained += n;
                    self.rbuf.clear();
                }
                _ => break,
            }
        }
    }
}

impl Ingress {
    /// The access-log line and `aap_requests_total` for an answer the
    /// transport gave (the gateway's own answers are logged in `handle`).
    fn log_transport(&self, a: TransportAnswer<'_>) {
        let rt = self.gateway.current();
        let tenant = a
            .path
            .and_then(|p| {
                rt.routes
                    .endpoints
                    .get(p)
                    .map(|e| e.tenant.as_str())
                    .or_else(|| rt.routes.relays.get(p).map(|m| m.tenant.as_str()))
            })
            .unwrap_or("-");
        let mut ctx = RequestCtx::transport(a.method, a.correlation.to_owned());
        ctx.started = a.started;
        ctx.tenant = Some(tenant.to_owned()).filter(|t| t != "-");
        ctx.outcome = a.outcome.to_owned();
        ctx.http_version = a.version;
        ctx.client_address = a.peer;
        ctx.logging(a.status, a.bytes_out);
    }
}

/// An answer the transport gave on its own (a framing refusal, a connection limit, a head
/// that timed out), as its access line reports it.
struct TransportAnswer<'a> {
    method: &'a str,
    path: Option<&'a str>,
    status: u16,
    outcome: &'a str,
    started: Instant,
    correlation: &'a str,
    version: HttpVersion,
    peer: Option<IpAddr>,
    bytes_out: u64,
}

/// The access-log and metrics outcome of a connection over a limit.
fn refusal_outcome(full: Full) -> &'static str {
    match full {
        Full::Global(_) => "connection_limit",
        Full::PerClient(_) => "client_connection_limit",
    }
}

/// The answer to a connection over a limit (503 for the global limit, 429 for
/// the per-client one, `Retry-After: 1`), its outcome and correlation id.
fn connection_refusal(full: Full) -> (HttpResponse, &'static str, String) {
    let outcome = refusal_outcome(full);
    let (status, message) = match full {
        Full::Global(n) => (
            503,
            format!("Service Unavailable: the gateway has {n} connections open; retry later"),
        ),
        Full::PerClient(n) => (
            429,
            format!(
                "Too Many Requests: this client has {n} connections open; reuse them or retry later"
            ),
        ),
    };
    let correlation = new_correlation_id();
    // 429 is throttling (the gateway's -32013, as for request budgets);
    // 503 a full gateway.
    let mut err = match status {
        429 => RpcError::of(Failure::RateLimited, message),
        _ => RpcError::of(Failure::Framing(status), message),
    };
    if status == 429 {
        err.data = Some(Box::new(serde_json::json!({"retry_after_ms": 1000})));
    }
    let resp = HttpResponse::json(status, &err.to_body(None))
        .with_header("retry-after", "1")
        .with_header("x-correlation-id", correlation.clone());
    (resp, outcome, correlation)
}

/// Write `parts` and flush, within [`WRITE_TIMEOUT`]: a client that stops
/// reading its answer does not hold the connection (and its task) forever.
/// Two parts (a head and a body) go out in vectored writes: one `writev`
/// when the socket takes them whole.
async fn send(stream: &mut Stream, parts: &[&[u8]]) -> std::io::Result<()> {
    let write = async {
        match parts {
            [head, body] => write_all_vectored(stream, head, body).await?,
            _ => {
                for part in parts {
                    stream.write_all(part).await?;
                }
            }
        }
        stream.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(r) => r,
        Err(_) => {
            crate::metrics::connection_closed("write_timeout");
            Err(std::io::ErrorKind::TimedOut.into())
        }
    }
}

/// Write `head` then `body` whole, in as few vectored writes as the socket
/// allows (a stream that does not write vectors takes them one at a time).
async fn write_all_vectored(stream: &mut Stream, head: &[u8], body: &[u8]) -> std::io::Result<()> {
    let mut slices = [std::io::IoSlice::new(head), std::io::IoSlice::new(body)];
    let mut bufs: &mut [std::io::IoSlice<'_>] = &mut slices;
    std::io::IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = stream.write_vectored(bufs).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

fn too_large(limit: usize) -> Refusal {
    Refusal::new(
        413,
        "body_too_large",
        crate::endpoint::body_too_large(limit).message,
    )
}

use aap_core::context::new_correlation_id;

/// `n` in lowercase hex into `out`; returns the digits written.
fn hex(mut n: usize, out: &mut [u8; 16]) -> usize {
    let mut tmp = [0u8; 16];
    let mut i = 0;
    loop {
        tmp[i] = b"0123456789abcdef"[n & 15];
        i += 1;
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    for (k, b) in tmp[..i].iter().rev().enumerate() {
        out[k] = *b;
    }
    i
}
