//! The pass-through baseline: every HTTP/1.1 request forwarded to one upstream with no MCP
//! work, on the gateway's own connection reader/writer and pooled upstream client.
//!
//! `benches/load.sh` runs it beside the gateway to measure what the gateway
//! itself adds, so it is built from the parts the full gateway forwards with:
//! the ingress's strict HTTP/1.1 reader and writer ([`H1Io`]: keep-alive,
//! pipelining, lingering close) on the client side, and the upstream
//! [`Client`] (its own keep-alive pool, one write per request) on the upstream
//! side. Hop-by-hop headers stay on their hop in both directions; the client
//! sets `Host` (the peer's authority) and `Content-Length`; the answer to a
//! HEAD keeps the upstream's `Content-Length`. An upstream that cannot be
//! reached or gives no answer is a 502, one that does not answer in time a
//! 504, each with a one-line plain-text body.
//!
//! Limits are the config's defaults (`LimitsConfig::default()`, the upstream
//! cluster's default timeouts and pool); no access log, no metrics of its own.

use crate::backend::BackendError;
use crate::config::{ClusterConfig, LimitsConfig};
use crate::exchange::{HeaderFields, HttpResponse};
use crate::ingress::h1::{BodyFraming, Framing, Head, HeadLimits, Refusal};
use crate::ingress::h1_io::{too_large, H1Io, HeadWait, NoHead, LINGER_TIME};
use crate::series::ClusterMetrics;
use crate::upstream::client::{Client, Fields, Request};
use crate::upstream::cluster::Registry;
use crate::upstream::hop::{connection_options, passed_on_answer_fields, stays_behind};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The pass-through server app: one upstream, the default limits.
pub struct PassThrough {
    client: Arc<Client>,
    /// Owns the client's background runtime (health check, pool sweep).
    _clusters: Registry,
    head_limits: HeadLimits,
    wait: HeadWait,
    body_timeout: Duration,
    max_body: usize,
    write_cap: usize,
}

impl PassThrough {
    /// A pass-through to `upstream` (`HOST:PORT`, or an `http://` URL);
    /// `write_cap` is `server.write_buffer_bytes`.
    pub fn new(upstream: &str, write_cap: usize) -> Result<PassThrough, String> {
        let peer = if upstream.contains("://") {
            upstream.to_owned()
        } else {
            format!("http://{upstream}")
        };
        let clusters = Registry::online(Arc::new(ClusterMetrics::new()));
        let client = clusters.client(&ClusterConfig::with_defaults(
            "passthrough".to_owned(),
            vec![peer],
        ))?;
        let l = LimitsConfig::default();
        Ok(PassThrough {
            client,
            _clusters: clusters,
            head_limits: HeadLimits {
                max_headers: l.max_headers,
                max_header_bytes: l.max_header_bytes,
            },
            wait: HeadWait {
                idle_timeout: Duration::from_secs(l.idle_timeout_secs),
                header_timeout: Duration::from_millis(l.header_read_timeout_ms),
            },
            body_timeout: Duration::from_millis(l.body_read_timeout_ms),
            max_body: l.max_body_bytes,
            write_cap,
        })
    }

    /// Requests in order until the connection closes.
    async fn serve(&self, io: &mut H1Io, shutdown: &ShutdownWatch, accepted: Instant) {
        let mut reused = false;
        loop {
            let (_, head) = io
                .next_head(reused, accepted, shutdown, self.wait, &self.head_limits)
                .await;
            let head = match head {
                Ok(h) => h,
                Err(NoHead::Closed | NoHead::Timeout) => return,
                Err(NoHead::Refused(r)) => return self.refuse(io, None, r).await,
            };
            reused = true;
            if let Framing::Length(n) = head.framing {
                if n > self.max_body as u64 {
                    return self.refuse(io, Some(&head), too_large(self.max_body)).await;
                }
            }
            // The body is read here whole before it is forwarded, so the
            // client is told to send it (and `Expect` is not forwarded).
            let wants_continue =
                head.expect_continue && head.framing != Framing::None && io.rbuf.is_empty();
            if wants_continue && io.send(&[b"HTTP/1.1 100 Continue\r\n\r\n"]).await.is_err() {
                return;
            }
            let body = match io
                .read_body(&head, self.max_body, self.body_timeout, &self.head_limits)
                .await
            {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(r) => return self.refuse(io, Some(&head), r).await,
            };
            let head_only = head.method == "HEAD";
            let minor = head.minor;
            let keep = head.keep_alive && !*shutdown.borrow();
            let (resp, length) = self.forward(head, body).await;
            let written = match length {
                // The upstream's answer to a HEAD: its head, with the
                // length of the body a GET would have had.
                Some(framing) if head_only => {
                    io.write_head_only(resp.status, &resp.headers, framing, minor, keep)
                        .await
                }
                _ => {
                    io.write_response(resp, minor, head_only, keep, self.write_cap)
                        .await
                }
            };
            match written {
                Ok(true) => {}
                Ok(false) => return io.linger(LINGER_TIME).await,
                Err(_) => return,
            }
        }
    }

    /// Send the request upstream and make the client's answer of the reply,
    /// with the body framing the upstream announced (`None` for an answer
    /// of the pass-through's own).
    async fn forward(&self, head: Head, body: Bytes) -> (HttpResponse, Option<BodyFraming>) {
        let target = match &head.query {
            Some(q) => format!("{}?{q}", head.path),
            None => head.path,
        };
        let headers = request_headers(&head.headers);
        let req = Request {
            method: &head.method,
            path: &target,
            headers: Vec::new(),
            extra_headers: &headers,
            body,
            // With one peer the client makes exactly one attempt whatever
            // this says; `true` keeps the connection in the keep-alive pool
            // (the client opens a fresh connection per non-retryable request
            // and keeps none of them).
            retryable: true,
            trace: None,
        };
        let started = Instant::now();
        match self.client.send(&req, None).await {
            Ok(reply) => {
                let framing = announced(&reply.headers);
                let mut resp = HttpResponse::new(reply.status);
                resp.headers = passed_on_answer_fields(&reply.headers);
                resp.body = reply.body;
                (resp, Some(framing))
            }
            Err(BackendError::Timeout(_)) if started.elapsed() >= self.client.request_timeout() => {
                (
                    plain(504, "Gateway Timeout: the upstream did not answer in time"),
                    None,
                )
            }
            Err(_) => (
                plain(
                    502,
                    "Bad Gateway: the upstream could not be reached or gave no answer",
                ),
                None,
            ),
        }
    }

    /// Answer a request the reader refused (plain text) and close the
    /// connection (lingering).
    async fn refuse(&self, io: &mut H1Io, head: Option<&Head>, r: Refusal) {
        let minor = head.map_or(1, |h| h.minor);
        let head_only = head.is_some_and(|h| h.method == "HEAD");
        let resp = plain(r.status, &r.message);
        if io
            .write_response(resp, minor, head_only, false, self.write_cap)
            .await
            .is_ok()
        {
            io.linger(LINGER_TIME).await;
        }
    }
}

#[async_trait]
impl ServerApp for PassThrough {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let accepted = Instant::now();
        let mut io = H1Io::new(stream, BytesMut::new());
        self.serve(&mut io, shutdown, accepted).await;
        None
    }
}

/// A short plain-text answer of the pass-through's own.
fn plain(status: u16, message: &str) -> HttpResponse {
    let mut resp = HttpResponse::new(status);
    resp.headers
        .push(("content-type".into(), "text/plain; charset=utf-8".into()));
    resp.body = Bytes::from(format!("{message}\n"));
    resp
}

/// The body framing an upstream answer's head announces: what the head of
/// an answer to a HEAD says the body would be.
fn announced(headers: &Fields) -> BodyFraming {
    let field = |name: &str| headers.get(name).map(str::trim);
    match (field("content-length"), field("transfer-encoding")) {
        (Some(n), _) => n
            .parse()
            .map_or(BodyFraming::UntilClose, BodyFraming::Length),
        (None, Some(_)) => BodyFraming::Chunked,
        (None, None) => BodyFraming::UntilClose,
    }
}

/// The client's end-to-end request headers (names are lowercase from the
/// reader). `Expect` is answered here. A value that is not UTF-8 cannot be
/// handed to the upstream client and is left out, as the relay does.
fn request_headers(headers: &HeaderFields) -> Vec<(String, String)> {
    let named = connection_options(headers.get_all("connection"));
    headers
        .iter()
        .filter(|(n, _)| !stays_behind(n) && *n != "expect" && !named.iter().any(|c| c == n))
        .filter_map(|(n, v)| Some((n.to_owned(), std::str::from_utf8(v).ok()?.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&str, &str)]) -> HeaderFields {
        pairs.iter().map(|(n, v)| (*n, v.as_bytes())).collect()
    }

    #[test]
    fn hop_by_hop_request_headers_stay_behind() {
        let kept = request_headers(&req(&[
            ("host", "client.example"),
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic eA=="),
            ("content-length", "2"),
            ("expect", "100-continue"),
            ("content-type", "application/json"),
            ("accept", "*/*"),
        ]));
        assert_eq!(
            kept,
            [
                ("content-type".to_owned(), "application/json".to_owned()),
                ("accept".to_owned(), "*/*".to_owned()),
            ]
        );
    }
}
