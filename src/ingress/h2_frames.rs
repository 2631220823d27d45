//! Frame checks in front of the `h2` crate: the RFC 9113 errors the crate answers with another
//! code (fixed-size frames, header-block decoding, DATA after END_STREAM, trailer pseudo-headers).
//!
//! Hand-written because `h2` 0.4 answers each of these with a connection PROTOCOL_ERROR (or
//! accepts them) and offers no hook to change it. The guard sits between the socket and `h2`:
//! it reads the client's frames whole, checks them, hands `h2` the ones it should see, and
//! writes its own RST_STREAM, WINDOW_UPDATE or GOAWAY frames between the frames `h2` writes.
//! It mirrors the connection's HPACK decoder state (the `hpack` module: table sizes and which
//! names are pseudo-headers) so that a header block that does not decode is a
//! COMPRESSION_ERROR, and so that trailers can be checked for pseudo-headers.

use bytes::{Buf, BufMut, BytesMut};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod hpack;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

const PROTOCOL_ERROR: u32 = 0x1;
const FRAME_SIZE_ERROR: u32 = 0x6;
const STREAM_CLOSED: u32 = 0x5;
const COMPRESSION_ERROR: u32 = 0x9;
const CANCEL: u32 = 0x8;

/// The client connection preface (RFC 9113 §3.4), passed through unchecked.
const PREFACE_LEN: usize = 24;
/// Streams whose END_STREAM the client sent, remembered for DATA that follows it. Older
/// streams are closed in `h2` too, which answers such DATA with STREAM_CLOSED itself.
const ENDED_MEMORY: usize = 256;
/// A header block larger than this (encoded) is left to `h2`, which refuses it.
const MAX_BLOCK: usize = 256 << 10;
/// Lingering close: how long, after `h2` shut the connection down (its GOAWAY sent, then
/// FIN), what the client still sends is read and dropped. Closing with unread bytes makes the
/// kernel answer them with a reset, which can destroy the GOAWAY before the client reads it
/// (a client still sending frames then sees a broken pipe instead of the GOAWAY's reason).
/// Below the serve loop's one-second flush grace, which bounds it anyway.
const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// The guard around one HTTP/2 connection's socket.
pub(super) struct FrameGuard<T> {
    io: T,
    /// Client bytes read, not yet checked (at most one frame and the next one's start).
    unread: BytesMut,
    /// Checked client bytes for `h2`. Frames passed on unchanged are split off `unread` and
    /// joined back here without a copy (`BytesMut::unsplit` of adjacent parts of one buffer).
    ready: BytesMut,
    /// What a read from the socket lands in, kept for the connection (not zeroed per read).
    scratch: Box<[u8]>,
    preface_left: usize,
    /// Frames for the client, written between two of `h2`'s frames.
    inject: BytesMut,
    written: OutFrames,
    hpack: hpack::Decoder,
    /// A header block split over CONTINUATION frames: its frames (held from `h2` until the
    /// block is decoded), its encoded fragments, its stream, whether it is a trailer block.
    block: Option<Block>,
    /// Streams whose END_STREAM the client sent (most recent last).
    ended: VecDeque<u32>,
    /// Streams the guard reset for DATA after END_STREAM (their later DATA is dropped too).
    reset: VecDeque<u32>,
    max_stream: u32,
    max_frame: usize,
    /// Past a frame the guard does not follow (oversized, bad padding): the rest goes to
    /// `h2` unchecked, which ends the connection.
    passthrough: bool,
    /// A connection error was found: its GOAWAY is queued; `h2` sees the end of input once
    /// it is written.
    closing: bool,
    /// The GOAWAY is written: nothing more is written for `h2`.
    sealed: bool,
    eof: bool,
    /// Set once `h2` shut the connection down: the end of the lingering close.
    linger: Option<Pin<Box<tokio::time::Sleep>>>,
}

struct Block {
    frames: BytesMut,
    fragments: Vec<u8>,
    head: Head,
}

/// What the guard needs of a HEADERS frame once its block is decoded.
struct Head {
    stream: u32,
    trailers: bool,
    end_stream: bool,
}

/// The socket is read in parts of this size.
const READ_SIZE: usize = 8192;

impl<T> FrameGuard<T> {
    /// `max_frame`: the SETTINGS_MAX_FRAME_SIZE `h2` advertises.
    pub(super) fn new(io: T, max_frame: usize) -> FrameGuard<T> {
        FrameGuard {
            io,
            unread: BytesMut::new(),
            ready: BytesMut::new(),
            scratch: vec![0; READ_SIZE].into_boxed_slice(),
            preface_left: PREFACE_LEN,
            inject: BytesMut::new(),
            written: OutFrames::default(),
            hpack: hpack::Decoder::new(),
            block: None,
            ended: VecDeque::new(),
            reset: VecDeque::new(),
            max_stream: 0,
            max_frame,
            passthrough: false,
            closing: false,
            sealed: false,
            eof: false,
            linger: None,
        }
    }

    /// Check what `unread` holds; `true` when something moved on (to `ready`, or dropped).
    fn check(&mut self) -> bool {
        if self.closing {
            return false;
        }
        if self.preface_left > 0 && !self.unread.is_empty() {
            let n = self.preface_left.min(self.unread.len());
            self.ready.unsplit(self.unread.split_to(n));
            self.preface_left -= n;
            return true;
        }
        if self.passthrough {
            if self.unread.is_empty() {
                return false;
            }
            let all = self.unread.split();
            self.ready.unsplit(all);
            return true;
        }
        if self.unread.len() < 9 {
            return false;
        }
        let h = &self.unread[..9];
        let len = payload_len(h);
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        if len > self.max_frame {
            // `h2` answers FRAME_SIZE_ERROR (RFC 9113 §4.2) itself.
            self.passthrough = true;
            return true;
        }
        if self.unread.len() < 9 + len {
            return false;
        }
        let frame = self.unread.split_to(9 + len);
        if self.block.is_some() && kind != CONTINUATION {
            // `h2` answers PROTOCOL_ERROR (RFC 9113 §6.10) itself.
            self.give_up(frame);
            return true;
        }
        match kind {
            RST_STREAM | WINDOW_UPDATE if len != 4 => self.fail(FRAME_SIZE_ERROR),
            PING if len != 8 => self.fail(FRAME_SIZE_ERROR),
            SETTINGS if !len.is_multiple_of(6) || (flags & ACK != 0 && len != 0) => {
                self.fail(FRAME_SIZE_ERROR)
            }
            // §6.3: a stream error; the frame carries nothing `h2` needs.
            PRIORITY if len != 5 && stream != 0 => {
                self.queue(RST_STREAM, stream, &FRAME_SIZE_ERROR.to_be_bytes());
            }
            DATA if stream != 0 && self.reset.contains(&stream) => self.refuse_data(stream, len),
            DATA if stream != 0 && self.ended.contains(&stream) => {
                // §5.1: half-closed (remote) or closed after END_STREAM: a STREAM_CLOSED
                // stream error. The stream's work is cancelled (`h2` sees the client reset
                // it), the connection window the client spent is given back.
                remember(&mut self.reset, stream);
                self.feed_reset(stream);
                self.refuse_data(stream, len);
            }
            DATA => {
                if flags & END_STREAM != 0 {
                    remember(&mut self.ended, stream);
                }
                self.ready.unsplit(frame);
            }
            HEADERS => self.headers(frame, flags, stream),
            CONTINUATION => self.continuation(frame, flags),
            _ => self.ready.unsplit(frame),
        }
        true
    }

    fn headers(&mut self, frame: BytesMut, flags: u8, stream: u32) {
        let mut payload = &frame[9..];
        let mut pad = 0;
        if flags & PADDED != 0 {
            let Some((&p, rest)) = payload.split_first() else {
                return self.give_up(frame);
            };
            pad = usize::from(p);
            payload = rest;
        }
        if flags & PRIORITY_FLAG != 0 {
            if payload.len() < 5 {
                return self.give_up(frame);
            }
            payload = &payload[5..];
        }
        if pad > payload.len() {
            return self.give_up(frame);
        }
        let fragment = &payload[..payload.len() - pad];
        let head = Head {
            stream,
            trailers: stream != 0 && stream <= self.max_stream,
            end_stream: flags & END_STREAM != 0,
        };
        if !head.trailers {
            self.max_stream = self.max_stream.max(stream);
        }
        if flags & END_HEADERS != 0 {
            // The whole block in one frame (the usual case): decoded where it lies.
            let decoded = self.hpack.decode(fragment);
            self.decoded(decoded, frame, head);
        } else {
            self.block = Some(Block {
                fragments: fragment.to_vec(),
                frames: frame,
                head,
            });
        }
    }

    fn continuation(&mut self, frame: BytesMut, flags: u8) {
        let Some(mut block) = self.block.take() else {
            // `h2` answers PROTOCOL_ERROR (§6.10) itself.
            return self.give_up(frame);
        };
        block.fragments.extend_from_slice(&frame[9..]);
        block.frames.extend_from_slice(&frame);
        if block.fragments.len() > MAX_BLOCK {
            let frames = std::mem::take(&mut block.frames);
            return self.give_up(frames);
        }
        if flags & END_HEADERS != 0 {
            let decoded = self.hpack.decode(&block.fragments);
            self.decoded(decoded, block.frames, block.head);
        } else {
            self.block = Some(block);
        }
    }

    /// A whole header block, decoded in step with `h2`'s decoder: its frames handed to `h2`.
    fn decoded(&mut self, decoded: Result<bool, hpack::Invalid>, frames: BytesMut, head: Head) {
        let Ok(pseudo) = decoded else {
            // RFC 9113 §4.3: a header block that cannot be decompressed is a connection
            // error of type COMPRESSION_ERROR.
            return self.fail(COMPRESSION_ERROR);
        };
        self.ready.unsplit(frames);
        if head.end_stream && head.stream != 0 {
            remember(&mut self.ended, head.stream);
        }
        if head.trailers && pseudo {
            // §8.1: pseudo-header fields in a trailer section make the request malformed, a
            // stream error of type PROTOCOL_ERROR (§8.1.1).
            self.queue(RST_STREAM, head.stream, &PROTOCOL_ERROR.to_be_bytes());
            self.feed_reset(head.stream);
        }
    }

    /// Hand `h2` what the guard does not follow, and everything after it.
    fn give_up(&mut self, frame: BytesMut) {
        self.ready.unsplit(frame);
        self.passthrough = true;
    }

    /// DATA the guard refuses: RST_STREAM STREAM_CLOSED, and the connection window back.
    fn refuse_data(&mut self, stream: u32, len: usize) {
        self.queue(RST_STREAM, stream, &STREAM_CLOSED.to_be_bytes());
        if len > 0 {
            self.queue(WINDOW_UPDATE, 0, &(len as u32).to_be_bytes());
        }
    }

    /// Tell `h2` the client reset `stream`, so that its work is cancelled.
    fn feed_reset(&mut self, stream: u32) {
        put_frame(
            &mut self.ready,
            RST_STREAM,
            0,
            stream,
            &CANCEL.to_be_bytes(),
        );
    }

    fn queue(&mut self, kind: u8, stream: u32, payload: &[u8]) {
        put_frame(&mut self.inject, kind, 0, stream, payload);
    }

    /// A connection error: GOAWAY with `code`, then the end of the connection.
    fn fail(&mut self, code: u32) {
        let mut payload = [0u8; 8];
        payload[..4].copy_from_slice(&self.max_stream.to_be_bytes());
        payload[4..].copy_from_slice(&code.to_be_bytes());
        self.queue(GOAWAY, 0, &payload);
        self.closing = true;
        self.unread.clear();
        self.block = None;
        tracing::debug!(code, "HTTP/2 connection error; sending GOAWAY");
    }
}

impl<T: AsyncWrite + Unpin> FrameGuard<T> {
    /// Before `h2` writes: the guard's own frames go out first when `h2`'s output is at a frame
    /// boundary, and nothing more is written once the connection is sealed.
    fn poll_before_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.written.at_boundary() {
            std::task::ready!(self.poll_inject(cx))?;
        }
        if self.sealed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Poll::Ready(Ok(()))
    }

    /// Write the queued frames if `h2` is between two frames; `Ready` once none is left.
    fn poll_inject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.sealed || self.inject.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if !self.written.at_boundary() {
            // `h2` finishes its frame first (its next write comes back here).
            return Poll::Pending;
        }
        while !self.inject.is_empty() {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.inject))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.inject.advance(n);
        }
        if self.closing {
            self.sealed = true;
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

/// The payload length a 9-byte frame header announces (24 bits, RFC 9113 §4.1).
fn payload_len(head: &[u8]) -> usize {
    (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2])
}

fn remember(list: &mut VecDeque<u32>, stream: u32) {
    if list.len() == ENDED_MEMORY {
        list.pop_front();
    }
    list.push_back(stream);
}

fn put_frame(out: &mut BytesMut, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.put_slice(&len.to_be_bytes()[1..]);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
    out.put_slice(payload);
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for FrameGuard<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            // Frames queued by the checks go out as soon as `h2` is between frames.
            if let Poll::Ready(Err(_)) = me.poll_inject(cx) {
                me.eof = true;
            }
            if !me.ready.is_empty() {
                let n = me.ready.len().min(buf.remaining());
                buf.put_slice(&me.ready[..n]);
                me.ready.advance(n);
                return Poll::Ready(Ok(()));
            }
            if me.closing {
                // The end of input for `h2` once the GOAWAY is out.
                return if me.sealed || me.eof {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                };
            }
            if me.eof {
                if !me.unread.is_empty() {
                    // A truncated frame: `h2` sees it as it came.
                    let rest = me.unread.split();
                    me.ready.unsplit(rest);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            if me.check() {
                continue;
            }
            let mut rb = ReadBuf::new(&mut me.scratch);
            std::task::ready!(Pin::new(&mut me.io).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                me.eof = true;
            } else {
                me.unread.extend_from_slice(rb.filled());
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for FrameGuard<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        std::task::ready!(me.poll_before_write(cx))?;
        let n = std::task::ready!(Pin::new(&mut me.io).poll_write(cx, buf))?;
        me.written.observe(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        std::task::ready!(me.poll_before_write(cx))?;
        let n = std::task::ready!(Pin::new(&mut me.io).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for b in bufs {
            if left == 0 {
                break;
            }
            let take = left.min(b.len());
            me.written.observe(&b[..take]);
            left -= take;
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.written.at_boundary() {
            std::task::ready!(me.poll_inject(cx))?;
        }
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        std::task::ready!(Pin::new(&mut me.io).poll_shutdown(cx))?;
        // Lingering close (see [`LINGER`]): drop what the client still sends until it closes
        // its side, or for at most `LINGER`.
        let deadline = me
            .linger
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER)));
        if std::future::Future::poll(deadline.as_mut(), cx).is_ready() || me.eof {
            return Poll::Ready(Ok(()));
        }
        loop {
            let mut rb = ReadBuf::new(&mut me.scratch);
            match Pin::new(&mut me.io).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if !rb.filled().is_empty() => continue,
                Poll::Ready(_) => {
                    me.eof = true;
                    return Poll::Ready(Ok(()));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Where `h2`'s output stands: inside a frame, or between two (where the guard may write).
#[derive(Default)]
struct OutFrames {
    head: [u8; 9],
    head_len: usize,
    payload_left: usize,
}

impl OutFrames {
    fn at_boundary(&self) -> bool {
        self.head_len == 0 && self.payload_left == 0
    }

    fn observe(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.head_len).min(bytes.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
            self.head_len += n;
            bytes = &bytes[n..];
            if self.head_len == 9 {
                self.payload_left = payload_len(&self.head);
                self.head_len = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_boundaries_follow_split_writes() {
        let mut o = OutFrames::default();
        let mut f = BytesMut::new();
        put_frame(&mut f, DATA, 0, 1, b"hello");
        put_frame(&mut f, PING, 0, 0, &[0; 8]);
        assert!(o.at_boundary());
        o.observe(&f[..4]);
        assert!(!o.at_boundary());
        o.observe(&f[4..12]);
        assert!(!o.at_boundary());
        o.observe(&f[12..14]);
        assert!(o.at_boundary());
        o.observe(&f[14..]);
        assert!(o.at_boundary());
    }

    fn guard_with(frames: &[u8]) -> FrameGuard<tokio::io::DuplexStream> {
        let (a, _b) = tokio::io::duplex(64);
        let mut g = FrameGuard::new(a, 16_384);
        g.preface_left = 0;
        g.unread.extend_from_slice(frames);
        while g.check() {}
        g
    }

    #[test]
    fn fixed_size_frames_of_the_wrong_length_are_frame_size_errors() {
        for (kind, len) in [
            (PING, 7),
            (RST_STREAM, 3),
            (WINDOW_UPDATE, 5),
            (SETTINGS, 5),
        ] {
            let mut f = BytesMut::new();
            put_frame(
                &mut f,
                kind,
                0,
                u32::from(kind == RST_STREAM),
                &vec![0; len],
            );
            let g = guard_with(&f);
            assert!(g.closing, "{kind}");
            assert_eq!(&g.inject[3..5], &[GOAWAY, 0]);
            assert_eq!(&g.inject[13..17], &FRAME_SIZE_ERROR.to_be_bytes());
            assert!(g.ready.is_empty());
        }
    }

    #[test]
    fn data_after_end_stream_is_a_stream_error_and_the_window_comes_back() {
        let mut f = BytesMut::new();
        // `:method: GET` (static index 2) and `:path: /` (4): a request head.
        put_frame(&mut f, HEADERS, END_HEADERS | END_STREAM, 1, &[0x82, 0x84]);
        put_frame(&mut f, DATA, 0, 1, b"late");
        let g = guard_with(&f);
        assert!(!g.closing);
        // `h2` gets the request and then a reset of it; the client a STREAM_CLOSED reset
        // and its 4 bytes of connection window.
        assert_eq!(g.ready.len(), 11 + 13);
        assert_eq!(g.ready[11 + 3], RST_STREAM);
        let mut want = BytesMut::new();
        put_frame(&mut want, RST_STREAM, 0, 1, &STREAM_CLOSED.to_be_bytes());
        put_frame(&mut want, WINDOW_UPDATE, 0, 0, &4u32.to_be_bytes());
        assert_eq!(g.inject, want);
    }

    #[test]
    fn an_undecodable_block_is_a_compression_error_and_trailer_pseudo_headers_a_reset() {
        let mut f = BytesMut::new();
        put_frame(&mut f, HEADERS, END_HEADERS, 1, &[0x80]);
        let g = guard_with(&f);
        assert!(g.closing);
        assert_eq!(&g.inject[13..17], &COMPRESSION_ERROR.to_be_bytes());
        let mut f = BytesMut::new();
        put_frame(&mut f, HEADERS, END_HEADERS, 1, &[0x82, 0x84]);
        // Trailers with `:path: /`.
        put_frame(&mut f, HEADERS, END_HEADERS | END_STREAM, 1, &[0x84]);
        let g = guard_with(&f);
        assert!(!g.closing);
        let mut want = BytesMut::new();
        put_frame(&mut want, RST_STREAM, 0, 1, &PROTOCOL_ERROR.to_be_bytes());
        assert_eq!(g.inject, want);
    }

    #[test]
    fn a_block_over_continuation_frames_is_held_until_it_ends() {
        let mut f = BytesMut::new();
        put_frame(&mut f, HEADERS, 0, 1, &[0x82]);
        let mut g = guard_with(&f);
        assert!(g.ready.is_empty() && g.block.is_some());
        let mut c = BytesMut::new();
        put_frame(&mut c, CONTINUATION, END_HEADERS, 1, &[0x84]);
        g.unread.extend_from_slice(&c);
        while g.check() {}
        assert_eq!(g.ready.len(), 10 + 10);
        assert!(g.inject.is_empty());
    }

    /// Valid frames arriving in arbitrary pieces reach `h2` byte for byte, in order, whatever
    /// the sizes of `h2`'s reads.
    #[tokio::test]
    async fn valid_frames_pass_unchanged_across_split_reads() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut input = BytesMut::from(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..]);
        put_frame(&mut input, SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]);
        for stream in (1..60u32).step_by(2) {
            // `:method: POST`, `:path: /`, a literal `x-a: b` added to the table, then it
            // again by index (62).
            let block: &[u8] = if stream == 1 {
                &[0x83, 0x84, 0x40, 0x03, b'x', b'-', b'a', 0x01, b'b']
            } else {
                &[0x83, 0x84, 0xbe]
            };
            put_frame(&mut input, HEADERS, END_HEADERS, stream, block);
            put_frame(
                &mut input,
                DATA,
                0,
                stream,
                &vec![stream as u8; stream as usize * 37],
            );
            put_frame(&mut input, DATA, END_STREAM, stream, b"}");
            put_frame(&mut input, PING, 0, 0, &[7; 8]);
        }
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut g = FrameGuard::new(a, 16_384);
        let sent = input.clone();
        let writer = tokio::spawn(async move {
            let mut rest = &sent[..];
            let mut n = 1;
            while !rest.is_empty() {
                let k = n.min(rest.len());
                b.write_all(&rest[..k]).await.expect("write");
                rest = &rest[k..];
                n = n * 7 % 997 + 1;
            }
            b
        });
        let mut out = Vec::new();
        let mut buf = [0u8; 61];
        while out.len() < input.len() {
            let n = g.read(&mut buf).await.expect("read");
            assert!(n > 0);
            out.extend_from_slice(&buf[..n]);
        }
        assert_eq!(out, &input[..]);
        assert!(g.inject.is_empty() && !g.closing && !g.passthrough);
        drop(writer.await);
    }

    /// Arbitrary frames (random kinds, flags, lengths and payloads, HPACK bytes included)
    /// never panic the guard, and every byte it is given ends up checked, dropped or handed on.
    #[test]
    fn arbitrary_frames_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2_000 {
            let mut bytes = BytesMut::new();
            for _ in 0..(next() % 6) {
                let kind = (next() % 11) as u8;
                let flags = next() as u8;
                let stream = (next() % 5) as u32;
                let len = (next() % 40) as usize;
                let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                put_frame(&mut bytes, kind, flags, stream, &payload);
            }
            let g = guard_with(&bytes);
            assert!(g.closing || g.passthrough || g.block.is_some() || g.unread.is_empty());
        }
    }
}
