//! An upstream's answer read off the connection by the client itself: the status line and fields
//! (`httparse`), the body by its framing (RFC 9112 §6.3), and whether the connection may be reused.
//!
//! Pingora's HTTP/1 client session read the head into a buffer of its own, copied each body
//! read out of it and converted the head into an `http::HeaderMap`: a search answer (about
//! 13 KiB) took two `recvfrom` calls and two copies. Here one buffer, sized from the answers
//! this client has seen, takes the head and the body in one read when they arrived together,
//! and a body framed by `Content-Length` leaves as a slice of that buffer, not copied.
//!
//! Framing, as a client must read it (RFC 9112 §6.3):
//! - a 1xx answer other than 101 is skipped (its head only), 101 is refused (no upgrade was
//!   asked for);
//! - an answer to `HEAD`, and 204 and 304, have no body;
//! - `Transfer-Encoding` ending in `chunked`: the chunked coding ([`crate::chunked`], strict);
//!   any other `Transfer-Encoding`: read until the close (and never reused);
//! - `Content-Length` (one value, or a list of equal ones): that many bytes; an invalid or
//!   conflicting one is refused (the answer cannot be delimited);
//! - otherwise until the close.
//!
//! A connection is handed back to the pool only when its answer was read to its end, it spoke
//! HTTP/1.1 without `Connection: close`, its body was delimited by length or chunks, and nothing
//! beyond the answer arrived.

use super::{Fields, Reply};
use crate::chunked::{Chunked, Step};
use bytes::{Buf, Bytes, BytesMut};
use pingora::protocols::Stream;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::AsyncReadExt;

/// Largest upstream response body accepted.
pub(super) const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// Largest response head (status line and fields) accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields a response head may carry.
const MAX_FIELDS: usize = 128;
/// The largest trailer section of a chunked answer.
const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// The least and most the first read of an answer reserves.
const MIN_READ: usize = 4096;
const MAX_FIRST_READ: usize = 256 * 1024;

/// How the body of the answer being read is delimited.
#[derive(Debug)]
enum Framing {
    /// This many bytes are still to come.
    Length(usize),
    /// The chunked coding, decoded as it arrives.
    Chunked(Chunked),
    UntilClose,
}

/// The size of the answers a client has seen lately, so the first read of the next one
/// reserves about enough for all of it (one `recvfrom` for a whole answer).
#[derive(Debug)]
pub(super) struct SizeHint(AtomicUsize);

impl Default for SizeHint {
    fn default() -> SizeHint {
        SizeHint(AtomicUsize::new(MIN_READ))
    }
}

impl SizeHint {
    fn first_read(&self) -> usize {
        self.0
            .load(Ordering::Relaxed)
            .clamp(MIN_READ, MAX_FIRST_READ)
    }

    fn saw(&self, bytes: usize) {
        // Some headroom over the last answer: answers of one kind vary a little in size.
        self.0.store(bytes + bytes / 8 + 512, Ordering::Relaxed);
    }
}

/// Reads one answer from an upstream connection.
pub(super) struct ReplyReader {
    stream: Stream,
    buf: BytesMut,
    framing: Framing,
    keep_alive: bool,
    /// The body has been read to its end.
    done: bool,
    /// Head and body bytes read so far (for the size hint).
    seen: usize,
}

impl ReplyReader {
    pub(super) fn new(stream: Stream) -> ReplyReader {
        ReplyReader {
            stream,
            buf: BytesMut::new(),
            framing: Framing::UntilClose,
            keep_alive: false,
            done: false,
            seen: 0,
        }
    }

    /// One more read into the buffer; `Ok(0)` at the end of the stream.
    async fn fill(&mut self) -> Result<usize, String> {
        if self.buf.capacity() - self.buf.len() < MIN_READ / 4 {
            self.buf.reserve(MIN_READ.max(self.buf.len()));
        }
        let n = self
            .stream
            .read_buf(&mut self.buf)
            .await
            .map_err(|e| format!("reading the response: {}", e.kind()))?;
        self.seen += n;
        Ok(n)
    }

    /// Read the final response head (1xx answers skipped) of a request made with `method`.
    pub(super) async fn read_head(
        &mut self,
        method: &str,
        peer: SocketAddr,
        hint: &SizeHint,
    ) -> Result<Reply, String> {
        self.buf.reserve(hint.first_read());
        loop {
            if !self.buf.is_empty() {
                if let Some(reply) = self.parse_head(method, peer)? {
                    return Ok(reply);
                }
                if self.buf.len() > MAX_HEAD_BYTES {
                    return Err("response head too large".into());
                }
            }
            if self.fill().await? == 0 {
                return Err("the connection closed before the response head".into());
            }
        }
    }

    /// The final head, when it is complete in the buffer (consumed from it).
    fn parse_head(&mut self, method: &str, peer: SocketAddr) -> Result<Option<Reply>, String> {
        loop {
            let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
            let mut head = httparse::Response::new(&mut fields);
            let len = match head.parse(&self.buf) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(e) => return Err(format!("malformed response head: {e}")),
            };
            let (Some(status), Some(minor)) = (head.code, head.version) else {
                return Err("malformed response head".into());
            };
            if status == 101 {
                return Err("the upstream switched protocols unasked".into());
            }
            if (100..200).contains(&status) {
                // An interim answer (100 Continue, 103 Early Hints): the final one follows.
                self.buf.advance(len);
                continue;
            }
            let headers = Fields::from_raw(head.headers.iter().map(|h| (h.name, h.value)));
            self.buf.advance(len);
            let reply = Reply {
                status,
                headers,
                body: Bytes::new(),
                peer,
            };
            self.frame(&reply, method, minor)?;
            return Ok(Some(reply));
        }
    }

    /// Decide the body's framing and whether the connection may be reused (RFC 9112 §6.3, §9.3).
    fn frame(&mut self, reply: &Reply, method: &str, minor: u8) -> Result<(), String> {
        let mut close = minor == 0;
        let mut encodings = None::<String>;
        let mut length = None::<usize>;
        for (name, value) in reply.headers.iter() {
            match name {
                "connection" => {
                    close |= value
                        .split(',')
                        .any(|t| t.trim().eq_ignore_ascii_case("close"));
                }
                "transfer-encoding" => {
                    let all = encodings.get_or_insert_with(String::new);
                    if !all.is_empty() {
                        all.push(',');
                    }
                    all.push_str(value);
                }
                "content-length" => {
                    for v in value.split(',') {
                        let v = v.trim();
                        let n = (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                            .then(|| v.parse::<usize>().ok())
                            .flatten()
                            .ok_or("invalid Content-Length in the response")?;
                        if length.is_some_and(|l| l != n) {
                            return Err("conflicting Content-Length in the response".into());
                        }
                        length = Some(n);
                    }
                }
                _ => {}
            }
        }
        let no_body = method.eq_ignore_ascii_case("HEAD") || matches!(reply.status, 204 | 304);
        self.framing = if no_body {
            Framing::Length(0)
        } else if let Some(te) = encodings {
            // A length beside a transfer coding is ignored, and the connection not reused.
            close |= length.is_some();
            let last = te.rsplit(',').next().unwrap_or("").trim();
            if last.eq_ignore_ascii_case("chunked") {
                Framing::Chunked(Chunked::new(MAX_TRAILER_BYTES))
            } else {
                close = true;
                Framing::UntilClose
            }
        } else if let Some(n) = length {
            if n > MAX_RESPONSE_BYTES {
                return Err(format!("response larger than {MAX_RESPONSE_BYTES} bytes"));
            }
            Framing::Length(n)
        } else {
            close = true;
            Framing::UntilClose
        };
        self.keep_alive = !close;
        self.done = matches!(self.framing, Framing::Length(0));
        Ok(())
    }

    /// Read the whole body into `reply` (at most [`MAX_RESPONSE_BYTES`]); `true` when it was
    /// read to its end, `false` when `complete` said enough arrived (only an event stream is
    /// shown to `complete`, after each read).
    pub(super) async fn read_body(
        &mut self,
        reply: &mut Reply,
        complete: Option<super::Complete<'_>>,
        hint: &SizeHint,
    ) -> Result<bool, String> {
        let complete = complete.filter(|_| reply.is_event_stream());
        if let (&Framing::Length(n), None) = (&self.framing, complete) {
            // The common case: the body is a slice of the buffer the head came in.
            if self.buf.len() < n {
                self.buf.reserve(n - self.buf.len());
            }
            while self.buf.len() < n {
                if self.fill().await? == 0 {
                    return Err("the connection closed inside the response body".into());
                }
            }
            reply.body = self.buf.split_to(n).freeze();
            self.framing = Framing::Length(0);
            self.done = true;
            hint.saw(self.seen);
            return Ok(true);
        }
        let mut body = Vec::new();
        while let Some(piece) = self.next_piece().await? {
            body.extend_from_slice(&piece);
            if body.len() > MAX_RESPONSE_BYTES {
                return Err(format!("response larger than {MAX_RESPONSE_BYTES} bytes"));
            }
            if let Some(done) = complete {
                reply.body = Bytes::copy_from_slice(&body);
                if done(reply) {
                    return Ok(false);
                }
            }
        }
        reply.body = Bytes::from(body);
        hint.saw(self.seen);
        Ok(true)
    }

    /// The next piece of body data as it arrives, `None` after the last one.
    pub(super) async fn next_piece(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            if self.done {
                return Ok(None);
            }
            match &mut self.framing {
                Framing::Length(0) => {
                    self.done = true;
                    return Ok(None);
                }
                Framing::Length(left) if !self.buf.is_empty() => {
                    let n = (*left).min(self.buf.len());
                    *left -= n;
                    return Ok(Some(self.buf.split_to(n).freeze()));
                }
                Framing::UntilClose if !self.buf.is_empty() => {
                    return Ok(Some(self.buf.split().freeze()));
                }
                Framing::Chunked(decoder) if !self.buf.is_empty() => {
                    let (piece, ended) = decode_chunks(decoder, &mut self.buf)?;
                    self.done = ended;
                    if piece.is_some() || ended {
                        return Ok(piece);
                    }
                }
                _ => {}
            }
            if self.fill().await? == 0 {
                if matches!(self.framing, Framing::UntilClose) {
                    self.done = true;
                    return Ok(None);
                }
                return Err("the connection closed inside the response body".into());
            }
        }
    }

    /// The connection, when its answer was read to its end and it may carry another request.
    pub(super) fn into_reusable(self) -> Option<Stream> {
        (self.done && self.keep_alive && self.buf.is_empty()).then_some(self.stream)
    }
}

/// Decode what `buf` holds of a chunked body (consumed from it): the data found (`None` for none
/// yet), and whether the body ended.
fn decode_chunks(
    decoder: &mut Chunked,
    buf: &mut BytesMut,
) -> Result<(Option<Bytes>, bool), String> {
    let mut data = BytesMut::new();
    let ended = loop {
        match decoder.decode(buf).map_err(|e| e.to_string())? {
            Step::Progress { consumed, data: r } => {
                data.extend_from_slice(&buf[r]);
                buf.advance(consumed);
            }
            Step::Done { consumed } => {
                buf.advance(consumed);
                break true;
            }
            Step::More => break false,
        }
    };
    Ok(((!data.is_empty()).then(|| data.freeze()), ended))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    /// A reader over a connection on which `answer` arrives in pieces of `step` bytes
    /// (then the peer closes, if `close`).
    async fn reader(answer: Vec<u8>, step: usize, close: bool) -> ReplyReader {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut peer, _) = listener.accept().await.unwrap();
            for piece in answer.chunks(step.max(1)) {
                peer.write_all(piece).await.unwrap();
                peer.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
            if !close {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            }
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        ReplyReader::new(Box::new(pingora::protocols::l4::stream::Stream::from(tcp)))
    }

    async fn read(answer: &str, step: usize, close: bool) -> Result<(Reply, bool), String> {
        let mut r = reader(answer.as_bytes().to_vec(), step, close).await;
        let hint = SizeHint::default();
        let peer = "127.0.0.1:9".parse().unwrap();
        let mut reply = r.read_head("POST", peer, &hint).await?;
        r.read_body(&mut reply, None, &hint).await?;
        Ok((reply, r.into_reusable().is_some()))
    }

    #[tokio::test]
    async fn bodies_by_every_framing_in_any_pieces() {
        let cases = [
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nhel\r\n2\r\nlo\r\n0\r\nT: 1\r\n\r\n",
                "hello",
                true,
            ),
            ("HTTP/1.1 200 OK\r\n\r\nhello", "hello", false),
            ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", "ok", true),
            ("HTTP/1.1 204 No Content\r\n\r\n", "", true),
            ("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "ok", false),
            ("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", false),
            ("HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", "ok", true),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nraw",
                "raw",
                false,
            ),
        ];
        for (answer, body, reusable) in cases {
            for step in [1, 7, answer.len()] {
                let (reply, reused) = read(answer, step, !reusable).await.unwrap();
                assert_eq!(
                    reply.body,
                    body.as_bytes(),
                    "{answer:?} in pieces of {step}"
                );
                assert_eq!(reused, reusable, "{answer:?} in pieces of {step}");
                assert_eq!(reply.status, if body.is_empty() { 204 } else { 200 });
            }
        }
    }

    #[tokio::test]
    async fn answers_that_cannot_be_delimited_are_refused() {
        for answer in [
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
            "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\r\n0\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            "HTTP/1.1 2OO OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        ] {
            assert!(read(answer, 3, true).await.is_err(), "{answer:?}");
        }
    }

    #[tokio::test]
    async fn bytes_past_the_answer_keep_the_connection_out_of_the_pool() {
        let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n";
        let (reply, reused) = read(answer, answer.len(), false).await.unwrap();
        assert_eq!(reply.body, "ok".as_bytes());
        assert!(!reused);
    }

    #[tokio::test]
    async fn the_first_read_is_sized_from_earlier_answers() {
        let hint = SizeHint::default();
        assert_eq!(hint.first_read(), MIN_READ);
        hint.saw(13_000);
        assert!(hint.first_read() >= 13_000);
        hint.saw(100 << 20);
        assert_eq!(hint.first_read(), MAX_FIRST_READ);
    }
}
