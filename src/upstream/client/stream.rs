//! Answers that may be open-ended event streams, for the transparent relay: the
//! head within the request timeout, then a `text/event-stream` body pumped chunk by chunk.

use super::reader::ReplyReader;
use super::{into_error, Client, Failure, Request};
use crate::backend::BackendError;
use bytes::Bytes;
use std::time::Duration;

impl Client {
    /// Send a request whose answer may be an open-ended event stream, for a
    /// transparent relay. Tries `preferred` (a session's peer) or else the
    /// next suitable peer, moving on only when a request was certainly not
    /// delivered. The response head is awaited within the request timeout;
    /// a `text/event-stream` body is then pumped chunk by chunk into
    /// [`Streamed::body`] (each read bounded by `stream_idle`, `None` for
    /// none) until the peer ends it or the receiver is dropped; any other
    /// body is read whole.
    pub async fn open(
        &self,
        preferred: Option<usize>,
        req: &Request<'_>,
        stream_idle: Option<Duration>,
    ) -> Result<Streamed, BackendError> {
        self.await_peers().await;
        let mut tried = Vec::new();
        let mut last = None;
        let n = self.peer_count();
        while tried.len() < n.max(usize::from(preferred.is_some())) {
            let i = match preferred {
                Some(p) if tried.is_empty() && self.peer(p).is_some() => p,
                Some(_) => break,
                None => match self.pick(&tried) {
                    Some(i) => i,
                    None => break,
                },
            };
            tried.push(i);
            match self.open_on(i, req, stream_idle).await {
                Ok(s) => return Ok(s),
                Err(f @ Failure::NotDelivered(_)) => last = Some(f),
                Err(f) => return Err(into_error(f)),
            }
        }
        Err(match last {
            None => BackendError::Unavailable("no peer available".into()),
            Some(f) => into_error(f),
        })
    }

    /// One attempt on peer `i`, traced as one client span that ends with
    /// the response head (a streamed body may stay open for long).
    async fn open_on(
        &self,
        i: usize,
        req: &Request<'_>,
        stream_idle: Option<Duration>,
    ) -> Result<Streamed, Failure> {
        let span = self.client_span(i, req);
        let opened = self.open_on_peer(i, req, stream_idle, span.as_ref()).await;
        if let Some(span) = span {
            span.end(opened.as_ref().map(|s| s.status).map_err(Failure::kind));
        }
        opened
    }

    async fn open_on_peer(
        &self,
        i: usize,
        req: &Request<'_>,
        stream_idle: Option<Duration>,
        span: Option<&crate::telemetry::ClientSpan>,
    ) -> Result<Streamed, Failure> {
        let started = tokio::time::Instant::now();
        let (stream, addr) = self.connect_and_write(i, req, span).await?;
        let mut reader = ReplyReader::new(stream);
        let deadline = started + self.cfg.request_timeout;
        let head = match tokio::time::timeout_at(
            deadline,
            reader.read_head(req.method, addr, &self.answer_size),
        )
        .await
        {
            Ok(Ok(head)) => head,
            Ok(Err(why)) => return Err(Failure::Uncertain(format!("{addr}: {why}"))),
            Err(_) => {
                return Err(Failure::Uncertain(format!(
                    "{addr}: no answer within {:?}",
                    self.cfg.request_timeout
                )))
            }
        };
        self.mark_ok(&addr);
        if !head.is_event_stream() {
            let mut reply = head;
            let read = tokio::time::timeout_at(
                deadline,
                reader.read_body(&mut reply, None, &self.answer_size),
            )
            .await;
            return match read {
                Ok(Ok(_)) => {
                    self.release(reader, (i, !req.retryable));
                    Ok(Streamed {
                        peer: i,
                        status: reply.status,
                        headers: reply.headers,
                        body: StreamedBody::Whole(reply.body),
                    })
                }
                Ok(Err(why)) => Err(Failure::Uncertain(format!("{addr}: {why}"))),
                Err(_) => Err(Failure::Uncertain(format!(
                    "{addr}: body not received within {:?}",
                    self.cfg.request_timeout
                ))),
            };
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            loop {
                let next = async {
                    match stream_idle {
                        Some(idle) => tokio::time::timeout(idle, reader.next_piece())
                            .await
                            .unwrap_or_else(|_| Err("no event within the idle timeout".into())),
                        None => reader.next_piece().await,
                    }
                };
                let piece = tokio::select! {
                    p = next => p,
                    // The client went away: stop reading from the peer.
                    _ = tx.closed() => break,
                };
                match piece {
                    Ok(Some(p)) => {
                        if tx.send(p).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(why) => {
                        tracing::debug!(peer = %addr, error = %why, "relayed event stream ended early");
                        break;
                    }
                }
            }
            // Dropped: an event stream's connection is not reused.
        });
        Ok(Streamed {
            peer: i,
            status: head.status,
            headers: head.headers,
            body: StreamedBody::Events(rx),
        })
    }
}

/// An answer opened by [`Client::open`].
#[derive(Debug)]
pub struct Streamed {
    /// Index of the peer that answered (for session affinity).
    pub peer: usize,
    pub status: u16,
    pub headers: super::Fields,
    pub body: StreamedBody,
}

#[derive(Debug)]
pub enum StreamedBody {
    Whole(Bytes),
    /// `text/event-stream` chunks as the peer sends them.
    Events(tokio::sync::mpsc::Receiver<Bytes>),
}
