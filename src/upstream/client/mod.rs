//! The pooled HTTP client the forwarding backends share, on Pingora's upstream machinery.
//! Owns the client, its config, request/reply types and delivery semantics (send, retry).
//!
//! - `pingora::connectors::TransportConnector` pools keep-alive connections
//!   per peer; `HttpPeer` options carry the connect and read timeouts.
//!   The request head and body leave in one write (one TCP segment for a
//!   typical call, where Pingora's session API would flush them apart);
//!   Pingora's HTTP/1 session then reads the answer ([`wire`]).
//! - `pingora::lb::LoadBalancer<RoundRobin>` spreads calls over the
//!   configured peers. Its TCP health check runs as the load balancer's own
//!   background loop (`LoadBalancer::run`), spawned on the first call (the
//!   runtime is built before Pingora's tokio runtimes exist) and stopped
//!   when the backend is dropped on a config reload ([`health`]).
//! - On top, a passive check: a peer that refused a connection is skipped
//!   for a short cool-down, so reads route around a dead peer before the
//!   next health-check pass notices.
//!
//! Delivery semantics: a failure before the request was completely written
//! is *not delivered* (safe to retry anywhere); a failure or timeout after
//! it is *uncertain*. Reads are retried on the next peer; writes
//! (`lead.submit`) use a fresh connection, are sent once and never retried.
//!
//! Peer addresses and DNS: [`addresses`]; open-ended event streams for the
//! relay: [`stream`]; the JWKS fetcher port: [`jwks`].

mod addresses;
mod health;
mod jwks;
mod stream;
mod wire;

pub use addresses::{Addresses, PeerAddr, PeerSpec, ResolveError};
pub use jwks::JwksOverClient;
pub use stream::{Streamed, StreamedBody};

use crate::backend::BackendError;
use crate::telemetry::ClientSpan;
use bytes::Bytes;
use pingora::connectors::TransportConnector;
use pingora::lb::health_check::TcpHealthCheck;
use pingora::lb::selection::RoundRobin;
use pingora::lb::LoadBalancer;
use pingora::protocols::http::client::HttpSession;
use pingora::protocols::http::v1::client::HttpSession as Http1Session;
use pingora::upstreams::peer::{HttpPeer, Peer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use wire::{read_reply, request_bytes};

/// `group_key` of write peers: their connections never share the read pool.
const WRITE_GROUP: u64 = 0x6c65_6164;

#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Every address of every configured peer (see [`Addresses::peers`]);
    /// empty only in an offline build, which never sends.
    pub peers: Vec<PeerAddr>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub health_check_interval: Duration,
}

/// A request to send (the Host header is added per peer).
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: Vec<(&'static str, String)>,
    /// Headers passed on from the client (e.g. `Mcp-Param-*`).
    pub extra_headers: &'a [(String, String)],
    pub body: Bytes,
    /// A read: may be retried on another peer.
    pub retryable: bool,
    /// The client request's trace: each attempt is a client span, and the
    /// upstream gets a `traceparent` naming it (`None`: tracing off, or a
    /// request of the gateway's own, such as a JWKS fetch).
    pub trace: Option<&'a Arc<aap_core::trace::Trace>>,
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// The peer that answered.
    pub peer: SocketAddr,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn content_type(&self) -> String {
        self.header("content-type")
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    }
}

/// Decides, while the body streams in, that enough has been read (e.g. the
/// matching JSON-RPC response arrived on an SSE stream that stays open).
pub type Complete<'a> = &'a (dyn Fn(&Reply) -> bool + Send + Sync);

enum Failure {
    /// Certainly not delivered (connect failed, or the request was not
    /// completely written).
    NotDelivered(String),
    /// Written completely; no (complete) answer.
    Uncertain(String),
}

impl Failure {
    /// The client span's `error.type`.
    fn kind(&self) -> &'static str {
        match self {
            Failure::NotDelivered(_) => "not_delivered",
            Failure::Uncertain(_) => "no_answer",
        }
    }
}

pub struct Client {
    cfg: ClientConfig,
    connector: TransportConnector,
    lb: Arc<LoadBalancer<RoundRobin>>,
    by_addr: HashMap<SocketAddr, usize>,
    failed: Mutex<HashMap<SocketAddr, Instant>>,
    health_started: AtomicBool,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("peers", &self.cfg.peers)
            .finish_non_exhaustive()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for p in &self.cfg.peers {
            crate::metrics::peer_removed(&p.addr.to_string());
        }
    }
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Result<Client, String> {
        let addrs: Vec<SocketAddr> = cfg.peers.iter().map(|p| p.addr).collect();
        let mut lb = LoadBalancer::<RoundRobin>::try_from_iter(addrs.iter().copied())
            .map_err(|e| format!("load balancer: {e}"))?;
        let mut hc = TcpHealthCheck::new();
        hc.peer_template.options.connection_timeout = Some(cfg.connect_timeout);
        hc.health_changed_callback = Some(Box::new(health::HealthLog));
        lb.set_health_check(hc);
        lb.health_check_frequency = Some(cfg.health_check_interval);
        lb.parallel_health_check = true;
        let by_addr = cfg
            .peers
            .iter()
            .enumerate()
            .map(|(i, p)| (p.addr, i))
            .collect();
        let (shutdown, _) = tokio::sync::watch::channel(false);
        for p in &cfg.peers {
            crate::metrics::peer_added(&p.addr.to_string());
        }
        Ok(Client {
            cfg,
            connector: TransportConnector::new(None),
            lb: Arc::new(lb),
            by_addr,
            failed: Mutex::new(HashMap::new()),
            health_started: AtomicBool::new(false),
            shutdown,
        })
    }

    pub fn peers(&self) -> &[PeerAddr] {
        &self.cfg.peers
    }

    /// Send to the next suitable peer; reads move on to further peers when a
    /// peer fails or answers 502/503/504.
    pub async fn send(
        &self,
        req: &Request<'_>,
        complete: Option<Complete<'_>>,
    ) -> Result<Reply, BackendError> {
        let mut tried = Vec::new();
        let mut last: Option<Failure> = None;
        let attempts = if req.retryable {
            self.cfg.peers.len()
        } else {
            1
        };
        while tried.len() < attempts {
            let Some(i) = self.pick(&tried) else { break };
            tried.push(i);
            match self.send_to(i, req, complete).await {
                Ok(reply) => {
                    let more = tried.len() < attempts;
                    if req.retryable && more && matches!(reply.status, 502..=504) {
                        last = Some(Failure::NotDelivered(format!(
                            "peer {} answered HTTP {}",
                            reply.peer, reply.status
                        )));
                        continue;
                    }
                    return Ok(reply);
                }
                Err(f) => last = Some(f),
            }
        }
        Err(match last {
            None => BackendError::Unavailable("no peer available".into()),
            Some(f) => into_error(f),
        })
    }

    /// Send a request to one specific peer (e.g. a legacy session's peer).
    pub async fn send_one(
        &self,
        peer: usize,
        req: &Request<'_>,
        complete: Option<Complete<'_>>,
    ) -> Result<Reply, BackendError> {
        self.send_to(peer, req, complete).await.map_err(into_error)
    }

    /// Connect to peer `i` and write the whole request. `read_timeout`
    /// bounds every single read of the answer (`None`: unbounded, for
    /// long-lived event streams).
    async fn connect_and_write(
        &self,
        i: usize,
        req: &Request<'_>,
        read_timeout: Option<Duration>,
        span: Option<&ClientSpan>,
    ) -> Result<(HttpSession, HttpPeer), Failure> {
        self.ensure_health_checks();
        let spec = &self.cfg.peers[i];
        let mut peer = HttpPeer::new(
            spec.addr,
            spec.tls,
            if spec.tls {
                spec.host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned()
            } else {
                String::new()
            },
        );
        peer.options.connection_timeout = Some(self.cfg.connect_timeout);
        peer.options.total_connection_timeout = Some(self.cfg.connect_timeout);
        peer.options.read_timeout = read_timeout;
        peer.options.write_timeout = Some(self.cfg.request_timeout);
        peer.options.idle_timeout = Some(Duration::from_secs(30));
        if !req.retryable {
            peer.group_key = WRITE_GROUP;
        }
        // A request that cannot be sent fails before it takes a connection.
        let mut trace_headers = Vec::new();
        if let Some(s) = span {
            trace_headers.push(("traceparent", s.traceparent()));
            if let Some(state) = s.tracestate() {
                trace_headers.push(("tracestate", state.to_owned()));
            }
        }
        let wire = request_bytes(req, &spec.authority(), &trace_headers)
            .map_err(|why| Failure::NotDelivered(format!("request to {}: {why}", spec.addr)))?;
        let connect = tokio::time::timeout(
            self.cfg.connect_timeout + Duration::from_millis(50),
            self.connector.get_stream(&peer),
        )
        .await;
        let mut stream = match connect {
            Ok(Ok((s, _reused))) => s,
            Ok(Err(e)) => {
                self.mark_failed(spec.addr);
                return Err(Failure::NotDelivered(format!(
                    "connect to {}: {}",
                    spec.addr,
                    e.etype().as_str()
                )));
            }
            Err(_) => {
                self.mark_failed(spec.addr);
                return Err(Failure::NotDelivered(format!(
                    "connect to {}: timed out",
                    spec.addr
                )));
            }
        };
        let written = tokio::time::timeout(self.cfg.request_timeout, async {
            stream.write_all(&wire).await?;
            stream.flush().await
        })
        .await;
        let mut session = HttpSession::H1(Http1Session::new_with_options(stream, &peer));
        match written {
            Ok(Ok(())) => Ok((session, peer)),
            Ok(Err(why)) => {
                session.shutdown().await;
                Err(Failure::NotDelivered(format!(
                    "write to {}: {}",
                    spec.addr,
                    why.kind()
                )))
            }
            Err(_) => {
                session.shutdown().await;
                Err(Failure::Uncertain(format!(
                    "{}: timed out while sending",
                    spec.addr
                )))
            }
        }
    }

    /// One attempt on peer `i`, traced as one client span.
    async fn send_to(
        &self,
        i: usize,
        req: &Request<'_>,
        complete: Option<Complete<'_>>,
    ) -> Result<Reply, Failure> {
        let span = self.client_span(i, req);
        let sent = self.send_to_peer(i, req, complete, span.as_ref()).await;
        if let Some(span) = span {
            span.end(sent.as_ref().map(|r| r.status).map_err(Failure::kind));
        }
        sent
    }

    /// The client span of an attempt on peer `i`, when `req` is traced.
    fn client_span(&self, i: usize, req: &Request<'_>) -> Option<ClientSpan> {
        let spec = &self.cfg.peers[i];
        let rpc_method = req
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("mcp-method"))
            .map(|(_, v)| v.as_str())
            .or_else(|| {
                req.extra_headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("mcp-method"))
                    .map(|(_, v)| v.as_str())
            });
        ClientSpan::start(
            req.trace, req.method, req.path, &spec.host, spec.port, rpc_method,
        )
    }

    async fn send_to_peer(
        &self,
        i: usize,
        req: &Request<'_>,
        complete: Option<Complete<'_>>,
        span: Option<&ClientSpan>,
    ) -> Result<Reply, Failure> {
        let started = tokio::time::Instant::now();
        let (mut session, peer) = self
            .connect_and_write(i, req, Some(self.cfg.request_timeout), span)
            .await?;
        let spec = &self.cfg.peers[i];
        let deadline = started + self.cfg.request_timeout;
        let read =
            tokio::time::timeout_at(deadline, read_reply(&mut session, spec.addr, complete)).await;
        match read {
            Ok(Ok((reply, done))) => {
                self.mark_ok(&spec.addr);
                if done && req.retryable {
                    self.release(session, &peer).await;
                } else {
                    session.shutdown().await;
                }
                Ok(reply)
            }
            Ok(Err(why)) => {
                session.shutdown().await;
                Err(Failure::Uncertain(format!("{}: {why}", spec.addr)))
            }
            Err(_) => {
                session.shutdown().await;
                Err(Failure::Uncertain(format!(
                    "{}: no answer within {:?}",
                    spec.addr, self.cfg.request_timeout
                )))
            }
        }
    }

    /// Return a connection whose answer was read to its end to the pool
    /// (when the peer keeps it alive).
    async fn release(&self, session: HttpSession, peer: &HttpPeer) {
        if let HttpSession::H1(mut h1) = session {
            h1.respect_keepalive();
            if let Some(stream) = h1.reuse().await {
                self.connector
                    .release_stream(stream, peer.reuse_hash(), peer.options.idle_timeout);
            }
        }
    }
}

fn into_error(f: Failure) -> BackendError {
    match f {
        Failure::NotDelivered(why) => BackendError::Unavailable(why),
        Failure::Uncertain(why) => BackendError::Timeout(why),
    }
}
