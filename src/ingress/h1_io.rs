//! One HTTP/1.1 server connection's bytes: the stream, its read and write buffers, reading a
//! request head and body under [`super::h1`]'s strict framing, and writing an answer.
//!
//! The ingress's connection loop (`Conn` in `ingress/mod.rs`) and the benchmark's
//! pass-through (`crate::passthrough`) both serve through an [`H1Io`]: what is
//! theirs (limits, logs, 100-continue, refusals, what an answer is) stays with them.

use super::h1::{self, BodyFraming, Framing, Head, HeadLimits, Refusal};
use crate::exchange::{FieldText, HttpResponse};
use bytes::{Buf, BytesMut};
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Read-buffer growth step; the buffer is allocated on a connection's first
/// byte and reused by every request on it.
pub const READ_CHUNK: usize = 4096;
/// Lingering close (after an answer that leaves request bytes unread):
/// how long and how much the connection keeps reading and discarding.
pub const LINGER_TIME: Duration = Duration::from_secs(5);
pub const LINGER_BYTES: usize = 4 << 20;
/// Longest a single write of an answer (or of one streamed part) may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bodies up to this size are copied behind the head in the write buffer;
/// larger ones leave with the head in one vectored write without the copy
/// (a search answer is about 13 KiB: its copy was about a microsecond).
const COPY_BODY_MAX: usize = 1024;

/// Why reading a head stopped without one.
pub enum NoHead {
    /// The client closed (or the socket failed, or the connection was idle
    /// past its timeout, or the server is shutting down): nothing to answer.
    Closed,
    /// The head did not arrive within the header timeout.
    Timeout,
    Refused(Refusal),
}

/// The timeouts that bound waiting for a request.
#[derive(Debug, Clone, Copy)]
pub struct HeadWait {
    /// How long a kept-alive connection may wait for its next request's first byte.
    pub idle_timeout: Duration,
    /// How long a head may take to arrive whole (from the accept for the
    /// first request, from its first byte for the next ones).
    pub header_timeout: Duration,
}

/// One client connection's stream and buffers.
pub struct H1Io {
    pub stream: Stream,
    /// Bytes read and not yet consumed (the next head, body bytes, pipelined
    /// requests). No capacity until the first byte arrives.
    pub rbuf: BytesMut,
    /// The response being written (allocated on the first response).
    wbuf: Vec<u8>,
}

impl H1Io {
    /// `rbuf` holds what was already read from `stream` (e.g. while sniffing for HTTP/2).
    pub fn new(stream: Stream, rbuf: BytesMut) -> H1Io {
        H1Io {
            stream,
            rbuf,
            wbuf: Vec::new(),
        }
    }

    /// The next request's head: on a kept-alive connection (`reused`) with
    /// nothing buffered, first wait for its first byte (within the idle
    /// timeout; an idle connection is closed at once on shutdown). Also
    /// returns when reading the head started, for the caller's logs.
    pub async fn next_head(
        &mut self,
        reused: bool,
        accepted: Instant,
        shutdown: &ShutdownWatch,
        wait: HeadWait,
        limits: &HeadLimits,
    ) -> (Instant, Result<Head, NoHead>) {
        // On shutdown (SIGTERM, or the old process of an upgrade) an idle
        // keep-alive connection is closed at once; a fresh one is not: its
        // request may already be on its way (during an upgrade both
        // processes accept on one socket).
        let head_deadline = if self.rbuf.is_empty() && reused {
            let mut rx = shutdown.clone();
            if *rx.borrow() {
                return (Instant::now(), Err(NoHead::Closed));
            }
            let first = tokio::select! {
                biased;
                r = tokio::time::timeout(wait.idle_timeout, self.fill()) => r,
                _ = rx.changed() => return (Instant::now(), Err(NoHead::Closed)),
            };
            match first {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => return (Instant::now(), Err(NoHead::Closed)),
                Err(_) => {
                    crate::metrics::connection_closed("idle_timeout");
                    return (Instant::now(), Err(NoHead::Closed));
                }
            }
            tokio::time::Instant::now() + wait.header_timeout
        } else if reused {
            // Pipelined: the next head is already (partly) here.
            tokio::time::Instant::now() + wait.header_timeout
        } else {
            tokio::time::Instant::from_std(accepted) + wait.header_timeout
        };
        let started = Instant::now();
        (started, self.read_head(head_deadline, limits).await)
    }

    /// Read into `rbuf`; the buffer gets its memory with the first byte.
    pub async fn fill(&mut self) -> std::io::Result<usize> {
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

    pub async fn read_head(
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

    /// The whole body, `Ok(None)` when the client went away mid-body. A
    /// `Content-Length` over `limit` must have been refused before.
    pub async fn read_body(
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

    /// Write `parts` and flush, within [`WRITE_TIMEOUT`] (see [`send`]).
    pub async fn send(&mut self, parts: &[&[u8]]) -> std::io::Result<()> {
        send(&mut self.stream, parts).await
    }

    /// Write a response; `Ok(true)` when the connection may serve another.
    pub async fn write_response(
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

    /// Write only a response head whose body framing the caller names (the
    /// answer to a HEAD relayed from elsewhere: the length of the body it
    /// stands for); `Ok(true)` when the connection may serve another.
    pub async fn write_head_only(
        &mut self,
        status: u16,
        headers: &[(FieldText, FieldText)],
        framing: BodyFraming,
        minor: u8,
        keep_alive: bool,
    ) -> std::io::Result<bool> {
        self.wbuf.clear();
        h1::write_head(&mut self.wbuf, minor, status, headers, framing, keep_alive);
        send(&mut self.stream, &[&self.wbuf]).await?;
        Ok(keep_alive)
    }

    /// Lingering close, as nginx does: send the answer's FIN, then keep
    /// reading and discarding what the client still sends (the rest of a
    /// body it is writing) for up to `time` and [`LINGER_BYTES`], so the
    /// client reads the answer instead of a reset; then close.
    pub async fn linger(&mut self, time: Duration) {
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

/// The refusal of a body over `limit` bytes (413).
pub fn too_large(limit: usize) -> Refusal {
    Refusal::new(
        413,
        "body_too_large",
        crate::endpoint::body_too_large(limit).message,
    )
}

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
