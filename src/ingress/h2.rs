//! HTTP/2 on the public listener (RFC 9113): over TLS when ALPN picks `h2`, and as h2c with
//! prior knowledge on a plaintext listener (`server.h2c`); each stream is one `Gateway::handle`.
//!
//! The `h2` crate owns the framing, HPACK, flow control and the stream states. It already
//! treats connection-specific header fields (RFC 9113 §8.2.2) as malformed (RST_STREAM
//! PROTOCOL_ERROR) and answers a header list over the advertised
//! SETTINGS_MAX_HEADER_LIST_SIZE with a bare 431 and RST_STREAM. This module applies the
//! HTTP/1 limits on each stream — header count and bytes (431), body size (413), body time
//! (408) — with the same JSON-RPC error body, correlation id and access-log line as HTTP/1,
//! answering on that stream only; and the connection's deadlines: the preface and the first
//! request within the header timeout, no open stream for longer than the idle timeout, and a
//! GOAWAY when the gateway drains or shuts down (streams in flight finish first).

use super::conn::Full;
use super::h1::{HeadLimits, Refusal, MAX_REQUEST_LINE};
use super::h2_budget::{self, ConnBudget, Held, NoTurn, HEAD_COST};
use super::h2_frames;
use super::{new_correlation_id, too_large, Ingress, TransportAnswer, WRITE_TIMEOUT};
use crate::error::Failure;
use crate::exchange::{HeaderFields, HttpRequest, HttpResponse, HttpVersion};
use crate::mcp::jsonrpc::RpcError;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::future::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue};
use pingora::server::ShutdownWatch;
use std::borrow::Cow;
use std::future::Future;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The client connection preface (RFC 9113 §3.4) that opens an h2c connection.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Receive window of each stream: the protocol default (RFC 9113 §6.9.2), set explicitly.
const STREAM_WINDOW: u32 = 65_535;

/// Largest frame payload the gateway accepts: the protocol minimum (RFC 9113 §4.2).
const MAX_FRAME: u32 = 16_384;

/// Most of one stream's answer `h2` queues ahead of the client's window (the crate's default
/// is about 400 KiB); smaller when `limits.h2_stream_memory_bytes` is.
const MAX_SEND_BUFFER: usize = 400 << 10;

/// After a GOAWAY: how long streams still open get before the connection is dropped.
const CLOSE_GRACE: Duration = WRITE_TIMEOUT;

/// After a GOAWAY with no stream open: how long the connection stays for the GOAWAY (and
/// the last answers) to reach the client.
const FLUSH_GRACE: Duration = Duration::from_secs(1);

/// How often an open connection looks at the drain flag (SIGTERM → GOAWAY).
const DRAIN_POLL: Duration = Duration::from_secs(1);

/// Header fields that are connection-specific (RFC 9113 §8.2.2): a request carrying one is
/// malformed. `h2` refuses them before a stream is handed over; checked again here so the
/// rule does not hang on a detail of the crate.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
];

/// What the first bytes of a plaintext connection are.
pub(super) enum Sniff {
    /// The HTTP/2 preface (all of it is in the buffer).
    Http2,
    /// Anything else: an HTTP/1 request (the bytes read stay in the buffer).
    Http1,
    Closed,
    Timeout,
}

/// Read until `buf` holds the whole preface or something that is not it.
pub(super) async fn sniff<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    deadline: tokio::time::Instant,
) -> Sniff {
    loop {
        if buf.len() >= PREFACE.len() {
            return if buf.starts_with(PREFACE) {
                Sniff::Http2
            } else {
                Sniff::Http1
            };
        }
        if !PREFACE.starts_with(buf) {
            return Sniff::Http1;
        }
        if buf.capacity() - buf.len() < PREFACE.len() {
            buf.reserve(super::READ_CHUNK);
        }
        match tokio::time::timeout_at(deadline, io.read_buf(buf)).await {
            Err(_) => return Sniff::Timeout,
            Ok(Ok(0)) | Ok(Err(_)) => return Sniff::Closed,
            Ok(Ok(_)) => {}
        }
    }
}

/// A connection whose first bytes were already read (to recognise the h2c preface): reads
/// give those bytes first, then the socket's. Hand-written because Pingora's stream has no
/// way to put bytes back, and the `h2` codec must see the preface it starts with.
pub(super) struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    pub(super) fn new(prefix: Bytes, inner: S) -> Rewind<S> {
        Rewind { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// SETTINGS_MAX_HEADER_LIST_SIZE for the configured HTTP/1 limits. RFC 9113 §6.5.2 counts
/// each field as name + value + 32 octets where the HTTP/1 limit counts name + value + 4
/// (": " and CRLF); on top come the pseudo-header fields, the path as long as an HTTP/1
/// request line may be. A request within the HTTP/1 limits therefore always fits; one over
/// them but under this gets the exact check (and a JSON 431) on its stream, one over this
/// gets `h2`'s bare 431.
fn header_list_size(l: &HeadLimits) -> u32 {
    let n = l.max_header_bytes + 28 * l.max_headers + MAX_REQUEST_LINE + 4 * 32;
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// How a stream's task ended, for the connection's reset accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Answered (or refused, or reset as malformed, by the gateway).
    Done,
    /// The client reset the stream before its answer; its work was cancelled at once.
    Reset,
}

/// The `h2` settings and budgets of one connection, from `[limits]`.
struct Sizing {
    max_streams: u32,
    /// Receive window of the whole connection: what `h2` may buffer of request bodies the
    /// streams have not read yet (taken from the connection's memory budget).
    connection_window: u32,
    /// Bytes of the connection's memory budget left for the streams (heads, bodies, answers).
    stream_bytes: usize,
    /// Reserved for each stream while it is handled.
    reserve: usize,
    max_resets: usize,
    process_limit: usize,
}

impl Sizing {
    fn of(l: &aap_core::config::LimitsConfig) -> Sizing {
        let connection_window =
            (l.h2_connection_memory_bytes / 4).clamp(STREAM_WINDOW as usize, 1 << 20) as u32;
        Sizing {
            max_streams: l.max_concurrent_streams,
            connection_window,
            stream_bytes: l.h2_connection_memory_bytes - connection_window as usize,
            reserve: l.h2_stream_memory_bytes,
            max_resets: l.h2_max_resets,
            process_limit: l.h2_memory_bytes,
        }
    }

    fn builder(&self, head_limits: &HeadLimits) -> h2::server::Builder {
        let mut b = h2::server::Builder::new();
        b.max_concurrent_streams(self.max_streams)
            .max_header_list_size(header_list_size(head_limits))
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(self.connection_window)
            .max_frame_size(MAX_FRAME)
            // What `h2` queues of one stream's answer beyond what the client's window
            // lets out: slices of the answer the stream's budget already counts.
            .max_send_buffer_size(self.reserve.min(MAX_SEND_BUFFER))
            // The crate's own flood guards, with our reset budget: streams reset before
            // they were accepted, and resets the client's protocol errors cause; past
            // either, `h2` sends GOAWAY ENHANCE_YOUR_CALM itself. Streams reset after they
            // were accepted are counted in `serve` (the crate does not see them).
            .max_pending_accept_reset_streams(self.max_resets.min(20))
            .max_local_error_reset_streams(Some(self.max_resets));
        b
    }
}

/// Serve one HTTP/2 connection until it closes. `refused`: the connection is over a
/// connection limit; every stream on it gets that answer (503 or 429, as on HTTP/1) and the
/// connection is closed with a GOAWAY.
pub(super) async fn serve<T>(
    ingress: &Arc<Ingress>,
    io: T,
    peer: Option<IpAddr>,
    accepted: Instant,
    shutdown: &ShutdownWatch,
    refused: Option<Full>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let (io_limits, head_limits, sizing) = {
        let rt = ingress.gateway.current();
        let l = &rt.config.limits;
        (
            ingress.gateway.io_limits(),
            HeadLimits {
                max_headers: l.max_headers,
                max_header_bytes: l.max_header_bytes,
            },
            Sizing::of(l),
        )
    };
    ingress.h2_memory.set_limit(sizing.process_limit);
    let _charge = h2_budget::ConnectionCharge::take(
        &ingress.h2_memory,
        sizing.connection_window as usize + h2_budget::CONNECTION_COST,
    );
    let budget = ConnBudget::new(
        sizing.max_streams as usize,
        sizing.stream_bytes,
        ingress.h2_memory.clone(),
    );
    let accepted = tokio::time::Instant::from_std(accepted);
    // RFC 9113's error codes where `h2` answers others (src/ingress/h2_frames.rs).
    let io = h2_frames::FrameGuard::new(io, MAX_FRAME as usize);
    let handshake = sizing.builder(&head_limits).handshake::<_, Bytes>(io);
    let first_deadline = if refused.is_some() {
        accepted + super::REFUSED_LINGER_TIME
    } else {
        accepted + io_limits.header_timeout
    };
    let mut conn = match tokio::time::timeout_at(first_deadline, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "HTTP/2 handshake failed");
            return;
        }
        Err(_) => {
            crate::metrics::connection_closed("header_timeout");
            return;
        }
    };
    if refused.is_some() {
        // Answer what arrives before the GOAWAY's last stream id settles, then close.
        conn.graceful_shutdown();
    }
    // The streams run inside this connection's task, polled beside the connection itself:
    // no task spawned per stream and no wake-up handed to another thread when a stream
    // answers (the connection that writes the answer is this task). A panic in one
    // stream's work ends that stream only. One connection's streams share one core, as an
    // nginx worker's do; connections spread over the workers.
    let mut streams: FuturesUnordered<StreamWork> = FuturesUnordered::new();
    let mut rx = shutdown.clone();
    let mut drain_poll = tokio::time::interval(DRAIN_POLL);
    // Once a GOAWAY went out (shutdown, drain, idle, refused), the connection only finishes
    // its open streams, until this deadline.
    let mut closing = refused.map(|_| tokio::time::Instant::now() + FLUSH_GRACE);
    let mut served = false;
    let mut idle_since = tokio::time::Instant::now();
    // Rapid reset (CVE-2023-44487): streams accepted, and those the client reset before
    // their answer.
    let mut opened = 0usize;
    let mut resets = 0usize;
    loop {
        let deadline = match closing {
            Some(at) => at,
            None if !streams.is_empty() => {
                tokio::time::Instant::now() + Duration::from_secs(86_400)
            }
            None if served => idle_since + io_limits.idle_timeout,
            None => accepted + io_limits.header_timeout,
        };
        let mut goaway = false;
        let mut ended = None;
        tokio::select! {
            biased;
            next = conn.accept() => match next {
                Some(Ok((req, mut respond))) => {
                    served = true;
                    opened += 1;
                    // Streams whose work ended count no more (their slot is free). Polling
                    // without this task's waker is safe: the select below polls `streams`
                    // again, with it, before this task waits.
                    while let Some(Some(done)) = streams.next().now_or_never() {
                        resets += usize::from(done.ok() == Some(Ended::Reset));
                    }
                    // Streams count until their work ends, not until `h2` closes them:
                    // past twice the open-stream limit the client is resetting faster than
                    // the work can be cancelled.
                    let admitted = if streams.len() >= 2 * sizing.max_streams as usize {
                        Err(NoTurn::Connection)
                    } else {
                        budget.admit(HEAD_COST + head_bytes(&req))
                    };
                    match admitted {
                        Ok(held) => {
                            streams.push(Box::pin(AssertUnwindSafe(stream(ingress.clone(), req, respond, peer, refused, held, sizing.reserve)).catch_unwind()));
                        }
                        Err(no) => {
                            ingress.h2_memory.metrics().refused.with_label_values(&[no.reason()]).inc();
                            respond.send_reset(h2::Reason::REFUSED_STREAM);
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "HTTP/2 connection error");
                    break;
                }
                None => break,
            },
            Some(done) = streams.next(), if !streams.is_empty() => {
                ended = done.ok();
                if streams.is_empty() {
                    idle_since = tokio::time::Instant::now();
                    // Closing: what the last stream wrote gets a moment to reach the client.
                    closing = closing.map(|at| at.min(idle_since + FLUSH_GRACE));
                }
            }
            _ = rx.changed(), if closing.is_none() => goaway = true,
            _ = drain_poll.tick(), if closing.is_none() => {
                goaway = *rx.borrow() || crate::shutdown::draining();
            }
            _ = tokio::time::sleep_until(deadline) => {
                if closing.is_some() {
                    break;
                }
                crate::metrics::connection_closed(if served { "idle_timeout" } else { "header_timeout" });
                goaway = true;
            }
        }
        resets += usize::from(ended == Some(Ended::Reset));
        if resets > sizing.max_resets && resets * 2 > opened && closing.is_none() {
            // A client that keeps resetting the streams it opens: GOAWAY ENHANCE_YOUR_CALM
            // (RFC 9113 §5.4.1), its work cancelled, the connection closed once it is sent.
            tracing::debug!(resets, opened, "HTTP/2 reset flood; closing the connection");
            crate::metrics::connection_closed("h2_reset_flood");
            conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
            streams.clear();
            closing = Some(tokio::time::Instant::now() + FLUSH_GRACE);
        }
        if goaway {
            conn.graceful_shutdown();
            let grace = if streams.is_empty() {
                FLUSH_GRACE
            } else {
                CLOSE_GRACE
            };
            closing = Some(tokio::time::Instant::now() + grace);
        }
    }
    // Dropping `streams` cancels any stream still running: its connection is gone.
}

/// One stream's work as the connection polls it: `Err` when it panicked.
type StreamWork = Pin<Box<dyn Future<Output = std::thread::Result<Ended>> + Send>>;

/// What an accepted stream's head takes in memory: its header fields and target.
fn head_bytes(req: &http::Request<RecvStream>) -> usize {
    let fields: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 32)
        .sum();
    fields + uri_len(req.uri())
}

/// The length of `uri` written out (`Uri`'s `Display`: scheme and `://`, authority, path,
/// `?` and query), without writing it.
fn uri_len(uri: &http::Uri) -> usize {
    uri.scheme_str().map_or(0, |s| s.len() + 3)
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path().len()
        + uri.query().map_or(0, |q| q.len() + 1)
}

/// One stream: its work ([`handle_stream`]) raced against the client's RST_STREAM, so a
/// stream the client resets before its answer stops its work (backend call included) at
/// once; `held` (its share of the budgets) is given back when the task ends.
async fn stream(
    ingress: Arc<Ingress>,
    req: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    peer: Option<IpAddr>,
    refused: Option<Full>,
    mut held: Held,
    reserve: usize,
) -> Ended {
    // Locked only between awaits: the work sends on it, the watch below polls it.
    let respond = Mutex::new(respond);
    let work = handle_stream(&ingress, req, &respond, peer, refused, &mut held, reserve);
    let mut watching = true;
    let reset = std::future::poll_fn(|cx| {
        if !watching {
            return Poll::Pending;
        }
        let Ok(mut r) = respond.try_lock() else {
            return Poll::Pending;
        };
        match r.poll_reset(cx) {
            Poll::Ready(Ok(_)) => Poll::Ready(()),
            // The answer's head is sent (or the connection failed): from here the
            // writes see a reset themselves.
            Poll::Ready(Err(_)) => {
                watching = false;
                Poll::Pending
            }
            Poll::Pending => Poll::Pending,
        }
    });
    tokio::select! {
        ended = work => ended,
        () = reset => {
            ingress.h2_memory.metrics().resets.inc();
            Ended::Reset
        }
    }
}

/// Reset a stream the gateway will not serve (`h2` refuses most malformed requests itself).
fn reset(respond: &Mutex<SendResponse<Bytes>>, reason: h2::Reason) {
    respond
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send_reset(reason);
}

/// RFC 9113 §8.2.1: a field value must not start or end with whitespace (SP, HTAB); a
/// request carrying one is malformed. `h2` (through `http`) accepts them.
fn padded(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    matches!(b.first(), Some(b' ' | b'\t')) || matches!(b.last(), Some(b' ' | b'\t'))
}

/// The request under the HTTP/1 limits, `Gateway::handle`, the answer.
async fn handle_stream(
    ingress: &Arc<Ingress>,
    req: http::Request<RecvStream>,
    respond: &Mutex<SendResponse<Bytes>>,
    peer: Option<IpAddr>,
    refused: Option<Full>,
    held: &mut Held,
    reserve: usize,
) -> Ended {
    let started = Instant::now();
    let (parts, mut body) = req.into_parts();
    let method = parts.method.as_str();
    let path = parts.uri.path();
    let head_only = parts.method == http::Method::HEAD;
    let at = Answer {
        method,
        path,
        head_only,
        started,
        peer,
    };
    if let Some(full) = refused {
        let (resp, outcome, correlation) = super::connection_refusal(full);
        let status = resp.status;
        let bytes_out = resp.body.len() as u64;
        let _ = write_response(respond, resp, head_only).await;
        ingress.log_transport(TransportAnswer {
            method,
            path: Some(path),
            status,
            outcome,
            started,
            correlation: &correlation,
            version: HttpVersion::Http2,
            peer,
            bytes_out,
        });
        return Ended::Done;
    }
    let (io, limits) = {
        let rt = ingress.gateway.current();
        let l = &rt.config.limits;
        (
            ingress.gateway.io_limits(),
            HeadLimits {
                max_headers: l.max_headers,
                max_header_bytes: l.max_header_bytes,
            },
        )
    };
    // A field line costs its name, value, ": " and CRLF against the limit; `host` may be added.
    let field_bytes: usize = parts
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum();
    let mut header_bytes = field_bytes + 4 * parts.headers.len();
    let authority_len = parts.uri.authority().map_or(0, |a| a.as_str().len());
    let mut headers =
        HeaderFields::with_capacity(parts.headers.len() + 1, field_bytes + 4 + authority_len);
    let mut has_host = false;
    for (name, value) in &parts.headers {
        if padded(value) {
            reset(respond, h2::Reason::PROTOCOL_ERROR);
            return Ended::Done;
        }
        let name = name.as_str();
        if CONNECTION_SPECIFIC.contains(&name) || (name == "te" && value.as_bytes() != b"trailers")
        {
            let r = Refusal::new(
                400,
                "bad_request",
                format!("Bad Request: {name} is a connection-specific header field, not allowed in HTTP/2"),
            );
            return at.refuse(ingress, respond, r).await;
        }
        has_host |= name == "host";
        headers.push(name, value.as_bytes());
    }
    // RFC 9113 §8.3.1: `:authority` stands for Host; the gateway sees it as one. A `host`
    // naming another host than `:authority` makes the request malformed: refused.
    if let (true, Some(a)) = (has_host, parts.uri.authority()) {
        let default_port = if parts.uri.scheme_str() == Some("http") {
            80
        } else {
            443
        };
        let host = parts
            .headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !aap_core::host::same_authority(a.as_str(), host, default_port) {
            let r = Refusal::new(
                400,
                "bad_request",
                "Bad Request: :authority and host name different hosts",
            );
            return at.refuse(ingress, respond, r).await;
        }
    }
    if !has_host {
        if let Some(a) = parts.uri.authority() {
            header_bytes += "host".len() + a.as_str().len() + 4;
            headers.push("host", a.as_str().as_bytes());
        }
    }
    if headers.len() > limits.max_headers || header_bytes > limits.max_header_bytes {
        let r = Refusal::new(
            431,
            "headers_too_large",
            format!(
                "Request Header Fields Too Large: at most {} headers and {} bytes",
                limits.max_headers, limits.max_header_bytes
            ),
        );
        return at.refuse(ingress, respond, r).await;
    }
    // `h2` already checks that the DATA frames add up to a declared length.
    if let Some(n) = parts.headers.get(http::header::CONTENT_LENGTH) {
        match n.to_str().ok().and_then(|s| s.parse::<u64>().ok()) {
            Some(n) if n > io.max_body as u64 => {
                return at.refuse(ingress, respond, too_large(io.max_body)).await;
            }
            Some(_) => {}
            None => {
                let r = Refusal::new(400, "bad_request", "Bad Request: invalid Content-Length");
                return at.refuse(ingress, respond, r).await;
            }
        }
    }
    // The stream's turn: one of the connection's `max_concurrent_streams` slots and its
    // share of the memory budgets, held until this task ends. Without one (the process-wide
    // budget is spent) the stream is refused before any work, and the client may retry it.
    if let Err(no) = held.turn(reserve).await {
        ingress
            .h2_memory
            .metrics()
            .refused
            .with_label_values(&[no.reason()])
            .inc();
        reset(respond, h2::Reason::REFUSED_STREAM);
        return Ended::Done;
    }
    let mut req = HttpRequest {
        method: method.to_owned(),
        path: path.to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers,
        body: Bytes::new(),
        peer_ip: peer,
        version: HttpVersion::Http2,
    };
    let expect = parts.headers.get(http::header::EXPECT);
    if let Some(v) = expect {
        if !v.as_bytes().eq_ignore_ascii_case(b"100-continue") {
            let r = Refusal::new(
                417,
                "expectation_failed",
                "Expectation Failed: only Expect: 100-continue is supported",
            );
            return at.refuse(ingress, respond, r).await;
        }
        if !body.is_end_stream() {
            // As on HTTP/1: a refusal the head alone decides is the final answer at once
            // (the client's body is then declined with RST_STREAM NO_ERROR); otherwise 100.
            if let Some((resp, answered)) = ingress.gateway.answer_before_body(&req).await {
                let write_started = Instant::now();
                let _ = write_response(respond, resp, head_only).await;
                answered.written(write_started);
                return Ended::Done;
            }
            let mut cont = http::Response::new(());
            *cont.status_mut() = http::StatusCode::CONTINUE;
            let sent = respond
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send_informational(cont);
            if sent.is_err() {
                return Ended::Done;
            }
        }
    }
    req.body = match read_body(&mut body, io.max_body, io.body_timeout, held).await {
        Ok(Some(b)) => b,
        Ok(None) => return Ended::Reset,
        Err(r) => return at.refuse(ingress, respond, r).await,
    };
    drop(body);
    // Boxed as on HTTP/1: the handler's state lives only while the request is handled.
    let (resp, answered) = Box::pin(ingress.gateway.handle_traced(req)).await;
    // The answer is made: counted whole, so the connection's next streams wait while a
    // client that does not read holds it.
    held.hold(resp.body.len(), false);
    let write_started = Instant::now();
    let _ = write_response(respond, resp, head_only).await;
    answered.written(write_started);
    Ended::Done
}

/// What a refusal on a stream needs to know about its request.
struct Answer<'a> {
    method: &'a str,
    path: &'a str,
    head_only: bool,
    started: Instant,
    peer: Option<IpAddr>,
}

impl Answer<'_> {
    /// Answer a request the transport refused, on its stream only (the JSON-RPC error body
    /// and access-log line of HTTP/1); the connection's other streams go on.
    async fn refuse(
        &self,
        ingress: &Ingress,
        respond: &Mutex<SendResponse<Bytes>>,
        r: Refusal,
    ) -> Ended {
        let correlation = new_correlation_id();
        let err = RpcError::of(Failure::Framing(r.status), r.message);
        let resp = HttpResponse::json(r.status, &err.to_body(None))
            .with_header("x-correlation-id", correlation.clone());
        let bytes_out = resp.body.len() as u64;
        let _ = write_response(respond, resp, self.head_only).await;
        ingress.log_transport(TransportAnswer {
            method: self.method,
            path: Some(self.path),
            status: r.status,
            outcome: r.outcome,
            started: self.started,
            correlation: &correlation,
            version: HttpVersion::Http2,
            peer: self.peer,
            bytes_out,
        });
        Ended::Done
    }
}

/// The whole body, `Ok(None)` when the client reset the stream (or the connection failed).
async fn read_body(
    body: &mut RecvStream,
    limit: usize,
    timeout: Duration,
    held: &mut Held,
) -> Result<Option<Bytes>, Refusal> {
    let deadline = tokio::time::Instant::now() + timeout;
    // A body that comes in one DATA frame (most calls) is kept as it came, without a copy;
    // a second frame starts a buffer.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    loop {
        match tokio::time::timeout_at(deadline, body.data()).await {
            Err(_) => {
                return Err(Refusal::new(
                    408,
                    "body_timeout",
                    "Request Timeout: the body did not arrive in time",
                ))
            }
            Ok(None) => return Ok(Some(first.unwrap_or_else(|| buf.freeze()))),
            Ok(Some(Err(_))) => return Ok(None),
            Ok(Some(Ok(chunk))) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                let had = first.as_ref().map_or(buf.len(), Bytes::len);
                if had + chunk.len() > limit {
                    return Err(too_large(limit));
                }
                if !held.hold(had + chunk.len(), true) {
                    return Err(Refusal::new(
                        503,
                        "memory_budget",
                        "Service Unavailable: the gateway holds too many HTTP/2 request bodies; retry later",
                    ));
                }
                match first.take() {
                    None if buf.is_empty() => first = Some(chunk),
                    None => buf.extend_from_slice(&chunk),
                    Some(head) => {
                        buf.reserve(head.len() + chunk.len());
                        buf.extend_from_slice(&head);
                        buf.extend_from_slice(&chunk);
                    }
                }
            }
        }
    }
}

/// Write an answer on its stream: the head, then the body (or each streamed part as it
/// comes, as HTTP/1 writes chunks), each write bounded by [`WRITE_TIMEOUT`].
async fn write_response(
    respond: &Mutex<SendResponse<Bytes>>,
    mut resp: HttpResponse,
    head_only: bool,
) -> Result<(), ()> {
    let rest = resp.stream.take();
    let mut head = http::Response::new(());
    *head.status_mut() =
        http::StatusCode::from_u16(resp.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    // Sized once for the answer's fields and `content-length` (it grew field by field).
    *head.headers_mut() = http::HeaderMap::with_capacity(resp.headers.len() + 1);
    let h = head.headers_mut();
    for (n, v) in std::mem::take(&mut resp.headers) {
        // `from_bytes` lowercases (without an allocation for the standard names); the
        // gateway's own field is a constant.
        let name = if n == "x-correlation-id" {
            X_CORRELATION_ID
        } else {
            match HeaderName::from_bytes(n.as_bytes()) {
                Ok(name) => name,
                Err(_) => continue,
            }
        };
        if CONNECTION_SPECIFIC.contains(&name.as_str()) || name == http::header::CONTENT_LENGTH {
            continue;
        }
        // The value's bytes are moved, not copied; `from_maybe_shared` refuses control
        // bytes as `from_str` does and lets obs-text through, as the HTTP/1 writer does.
        let bytes = match v {
            Cow::Borrowed(v) => Bytes::from_static(v.as_bytes()),
            Cow::Owned(v) => Bytes::from(v.into_bytes()),
        };
        if let Ok(mut value) = HeaderValue::from_maybe_shared(bytes) {
            // A value new on every answer (the correlation id) would only churn the
            // connection's HPACK table: sent as a literal never indexed, it skips the
            // encoder's table search and insertion.
            if name.as_str() == "x-correlation-id" {
                value.set_sensitive(true);
            }
            h.append(name, value);
        }
    }
    if rest.is_none() {
        h.insert(
            http::header::CONTENT_LENGTH,
            HeaderValue::from(resp.body.len() as u64),
        );
    }
    let end_now = head_only || (rest.is_none() && resp.body.is_empty());
    let sent = respond
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send_response(head, end_now);
    let mut tx = sent.map_err(drop)?;
    if end_now {
        return Ok(());
    }
    let Some(mut rest) = rest else {
        return send_all(&mut tx, resp.body, true).await;
    };
    send_all(&mut tx, resp.body, false).await?;
    while let Some(part) = rest.recv().await {
        send_all(&mut tx, part, false).await?;
    }
    tx.send_data(Bytes::new(), true).map_err(drop)
}

/// The correlation id's field name, built once.
const X_CORRELATION_ID: HeaderName = HeaderName::from_static("x-correlation-id");

/// Send `data` as the stream's flow-control window allows.
async fn send_all(tx: &mut SendStream<Bytes>, mut data: Bytes, end: bool) -> Result<(), ()> {
    if data.is_empty() {
        if end {
            tx.send_data(data, true).map_err(drop)?;
        }
        return Ok(());
    }
    while !data.is_empty() {
        tx.reserve_capacity(data.len());
        let capacity = std::future::poll_fn(|cx| tx.poll_capacity(cx));
        let granted = match tokio::time::timeout(WRITE_TIMEOUT, capacity).await {
            Err(_) => {
                // A client that stops reading this stream loses it, not its connection.
                tx.send_reset(h2::Reason::CANCEL);
                return Err(());
            }
            Ok(None) | Ok(Some(Err(_))) => return Err(()),
            Ok(Some(Ok(n))) => n,
        };
        let chunk = data.split_to(granted.min(data.len()));
        tx.send_data(chunk, end && data.is_empty()).map_err(drop)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_len_is_the_written_length() {
        for u in [
            "/",
            "/aap/3.0.0/demo/mcp?x=1&y=%20",
            "http://example.com:8080/a/b?c",
            "https://[::1]/",
            "*",
        ] {
            let uri: http::Uri = u.parse().expect("uri");
            assert_eq!(uri_len(&uri), uri.to_string().len(), "{u}");
        }
    }

    #[tokio::test]
    async fn rewind_replays_the_prefix_first() {
        let (mut a, b) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut a, b" rest")
            .await
            .unwrap();
        drop(a);
        let mut io = Rewind::new(Bytes::from_static(b"PRI"), b);
        let mut out = Vec::new();
        io.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"PRI rest");
    }

    #[tokio::test]
    async fn sniff_tells_the_preface_from_http1() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut buf = BytesMut::new();
        let mut io = PREFACE;
        assert!(matches!(
            sniff(&mut io, &mut buf, deadline).await,
            Sniff::Http2
        ));
        assert_eq!(&buf[..], PREFACE);
        let mut buf = BytesMut::new();
        let mut io = &b"POST /mcp HTTP/1.1\r\n"[..];
        assert!(matches!(
            sniff(&mut io, &mut buf, deadline).await,
            Sniff::Http1
        ));
        assert!(buf.starts_with(b"P"), "the bytes read stay");
        let mut buf = BytesMut::new();
        let mut io = &b"PRI * HT"[..];
        assert!(matches!(
            sniff(&mut io, &mut buf, deadline).await,
            Sniff::Closed
        ));
    }

    #[test]
    fn a_request_within_the_http1_limits_fits_the_advertised_list() {
        let l = HeadLimits {
            max_headers: 100,
            max_header_bytes: 16_384,
        };
        // 100 fields of name + value = max_header_bytes - 4 each.
        let h2_size = l.max_header_bytes - 4 * l.max_headers + 32 * l.max_headers;
        assert!(header_list_size(&l) as usize >= h2_size + MAX_REQUEST_LINE);
    }
}
