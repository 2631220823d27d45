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
pub mod h1_io;
pub mod h2;
pub mod h2_budget;
mod h2_frames;

use crate::context::RequestCtx;
use crate::error::Failure;
use crate::exchange::{HttpRequest, HttpResponse, HttpVersion};
use crate::gateway::Gateway;
use crate::mcp::jsonrpc::RpcError;
use async_trait::async_trait;
use bytes::BytesMut;
use conn::{ConnTable, Full};
use h1::{Framing, Head, HeadLimits, Refusal};
use h1_io::{too_large, H1Io, HeadWait, NoHead, READ_CHUNK};
pub use h1_io::{LINGER_BYTES, LINGER_TIME, WRITE_TIMEOUT};
use pingora::apps::ServerApp;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            peer,
            io: H1Io::new(stream, rbuf),
        };
        match refused {
            None => conn.serve(shutdown, accepted).await,
            Some(full) => conn.refuse_connection(full).await,
        }
        None
    }
}

/// One client connection: its stream and buffers ([`H1Io`]), and what the
/// gateway adds (limits from the live config, logs, 100-continue, refusals).
struct Conn<'a> {
    ingress: &'a Ingress,
    peer: Option<IpAddr>,
    io: H1Io,
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
            // Wait for the first byte of the next request (closing an idle
            // keep-alive connection on shutdown), then read its head.
            let wait = HeadWait {
                idle_timeout: io.idle_timeout,
                header_timeout: io.header_timeout,
            };
            let (started, head) = self
                .io
                .next_head(reused, accepted, shutdown, wait, &head_limits)
                .await;
            let head = match head {
                Ok(h) => h,
                Err(NoHead::Closed) => return,
                Err(NoHead::Timeout) => {
                    // Slowloris, or a connection that never sent a request: no
                    // answer (the client is not reading one), just the count.
                    crate::metrics::connection_closed("header_timeout");
                    if !self.io.rbuf.is_empty() {
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
            if head.expect_continue && head.framing != Framing::None && self.io.rbuf.is_empty() {
                let head_req = HttpRequest {
                    method: head.method.clone(),
                    path: head.path.clone(),
                    query: head.query.clone(),
                    headers: head.headers.clone(),
                    body: bytes::Bytes::new(),
                    peer_ip: self.peer,
                    version: HttpVersion::http1(head.minor),
                };
                if let Some((resp, answered)) =
                    self.ingress.gateway.answer_before_body(&head_req).await
                {
                    let write_started = Instant::now();
                    let written = self
                        .io
                        .write_response(resp, head.minor, false, false, write_cap)
                        .await;
                    answered.written(write_started);
                    if let Ok(false) = written {
                        self.io.linger(LINGER_TIME).await;
                    }
                    return;
                }
                if self
                    .io
                    .send(&[b"HTTP/1.1 100 Continue\r\n\r\n"])
                    .await
                    .is_err()
                {
                    return;
                }
            }
            let body = match self
                .io
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
            let (resp, answered) = Box::pin(self.ingress.gateway.handle_traced(req)).await;
            self.ingress.h2_memory.saw_answer(resp.body.len());
            let write_started = Instant::now();
            // Draining (SIGTERM, before the listeners close): no keep-alive,
            // so the client's next request opens a connection the load
            // balancer sends elsewhere.
            let keep = client_keep_alive && !*shutdown.borrow() && !crate::shutdown::draining();
            let written = self
                .io
                .write_response(resp, minor, head_only, keep, write_cap)
                .await;
            // `logging` after the write, so that it does not delay the answer.
            answered.written(write_started);
            match written {
                Ok(true) => {}
                Ok(false) => {
                    self.io.linger(LINGER_TIME).await;
                    return;
                }
                Err(_) => return,
            }
        }
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
            .io
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
            self.io.linger(LINGER_TIME).await;
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
        let written = self.io.write_response(resp, 1, false, false, 1 << 14).await;
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
            self.io.linger(REFUSED_LINGER_TIME).await;
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

use aap_core::context::new_correlation_id;
