//! The pooled HTTP client the forwarding backends share, on Pingora's upstream machinery.
//! Owns the client, its config, request/reply types and delivery semantics (send, retry).
//!
//! - `pingora::connectors::TransportConnector` opens connections (TCP, TLS)
//!   with the connect timeout from `HttpPeer` options; idle keep-alive
//!   connections are kept per peer by the client's own [`pool`] (Pingora's
//!   pool spent a task and two wake-ups per request).
//!   The request head and body leave in one write (one TCP segment for a
//!   typical call, where Pingora's session API would flush them apart,
//!   [`wire`]); the client reads the answer itself ([`reader`]: one read for
//!   a whole answer that arrived together, the body not copied).
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
//! The peer set can change while the client serves: [`Client::set_peers`]
//! (called by the cluster's DNS refresh, `crate::upstream::cluster`)
//! installs a new load balancer and health loop; a peer keeps its index for
//! the client's lifetime, so a session pinned to a peer stays pinned. The
//! connection pool belongs to the client and outlives peer-set changes.
//!
//! Peer addresses and DNS: [`addresses`]; open-ended event streams for the
//! relay: [`stream`]; the JWKS fetcher port: [`jwks`].

mod addresses;
mod fields;
mod health;
mod jwks;
mod pool;
mod reader;
mod stream;
mod wire;

pub use addresses::{PeerAddr, PeerSpec};
pub use fields::Fields;
pub use jwks::JwksOverClient;
pub use stream::{Streamed, StreamedBody};

use crate::backend::BackendError;
use crate::telemetry::ClientSpan;
use arc_swap::ArcSwap;
use bytes::Bytes;
use pingora::connectors::TransportConnector;
use pingora::lb::selection::RoundRobin;
use pingora::lb::LoadBalancer;
use pingora::protocols::Stream;
use pingora::upstreams::peer::HttpPeer;
use reader::{ReplyReader, SizeHint};
use std::borrow::Cow;
// foldhash, not std's SipHash, for the peer maps: their keys are the addresses the
// configuration and its name lookups gave, never a client's input, and a call looks one up.
use foldhash::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use wire::request_bytes;

#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The cluster's name (the metrics label).
    pub cluster: String,
    /// The peers known when the client is built (IP literals); host names
    /// arrive later through [`Client::set_peers`].
    pub peers: Vec<PeerAddr>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub health_check_interval: Duration,
    /// Idle keep-alive connections kept (Pingora's pool size).
    pub pool_size: usize,
    /// How long an idle pooled connection is kept.
    pub idle_timeout: Duration,
    /// Where the health-check loops run (`None`: an offline client for
    /// `check`, which never connects).
    pub background: Option<tokio::runtime::Handle>,
    /// Whether peers come later from name resolution: until the first
    /// attempt is over, a request waits for it (within the connect timeout).
    pub awaits_resolution: bool,
    /// The per-cluster series (the cluster registry's).
    pub metrics: std::sync::Arc<crate::series::ClusterMetrics>,
}

/// The peers a client sends to now. `all` only grows, so an index stays
/// valid (a session's peer); `active` lists the indexes in use.
struct PeerTable {
    all: Vec<Arc<PeerAddr>>,
    active: Vec<usize>,
    by_addr: HashMap<SocketAddr, usize>,
    lb: Arc<LoadBalancer<RoundRobin>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Drop for PeerTable {
    fn drop(&mut self) {
        // A dropped sender is not a shutdown for Pingora's loop: say it.
        let _ = self.stop.send(true);
    }
}

/// A request to send (the Host header is added per peer).
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The fields of the call (values borrowed when they are constants).
    pub headers: Vec<(&'static str, Cow<'static, str>)>,
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
    pub headers: Fields,
    pub body: Bytes,
    /// The peer that answered.
    pub peer: SocketAddr,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// The media type, without parameters (`""` when there is none); compare it ignoring case.
    pub fn content_type(&self) -> &str {
        self.header("content-type")
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
    }

    /// Whether the body is a `text/event-stream`.
    pub fn is_event_stream(&self) -> bool {
        self.content_type()
            .eq_ignore_ascii_case("text/event-stream")
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
    /// Idle keep-alive connections of reads ([`pool`]).
    pool: Arc<pool::Pool>,
    /// How large this client's answers have been ([`reader`]).
    answer_size: SizeHint,
    table: ArcSwap<PeerTable>,
    failed: Mutex<HashMap<SocketAddr, Instant>>,
    /// `true` once the first name resolution is over (or none is needed).
    resolved: tokio::sync::watch::Sender<bool>,
    pub(crate) stats: health::ClusterStats,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cluster", &self.cfg.cluster)
            .finish_non_exhaustive()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let t = self.table.load();
        for &i in &t.active {
            crate::metrics::peer_removed(&t.all[i].addr.to_string());
        }
    }
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Result<Client, String> {
        let stats = health::ClusterStats::new(&cfg.cluster, cfg.metrics.clone());
        let (stop, _) = tokio::sync::watch::channel(true);
        let empty = PeerTable {
            all: Vec::new(),
            active: Vec::new(),
            by_addr: HashMap::default(),
            lb: Arc::new(
                LoadBalancer::<RoundRobin>::try_from_iter(std::iter::empty::<SocketAddr>())
                    .map_err(|e| format!("load balancer: {e}"))?,
            ),
            stop,
        };
        let (resolved, _) = tokio::sync::watch::channel(!cfg.awaits_resolution);
        let client = Client {
            // Connections are pooled by [`pool`], not by the connector.
            connector: TransportConnector::new(Some(pingora::connectors::ConnectorOptions::new(0))),
            pool: pool::Pool::new(cfg.pool_size, cfg.idle_timeout, cfg.background.as_ref()),
            answer_size: SizeHint::default(),
            table: ArcSwap::from_pointee(empty),
            failed: Mutex::new(HashMap::default()),
            resolved,
            stats,
            cfg,
        };
        if !client.cfg.peers.is_empty() {
            client.set_peers(client.cfg.peers.clone())?;
        }
        Ok(client)
    }

    /// Time allowed for an answer.
    pub fn request_timeout(&self) -> Duration {
        self.cfg.request_timeout
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cfg.cluster
    }

    /// Install a new peer set (e.g. after a DNS refresh): a new load
    /// balancer and health loop; pooled connections stay. An unchanged set
    /// is left alone.
    pub fn set_peers(&self, peers: Vec<PeerAddr>) -> Result<(), String> {
        let old = self.table.load_full();
        let mut all = old.all.clone();
        let mut by_addr = old.by_addr.clone();
        let mut active = Vec::new();
        for p in peers {
            let i = match by_addr.get(&p.addr) {
                Some(&i) => i,
                None => {
                    all.push(Arc::new(p.clone()));
                    by_addr.insert(p.addr, all.len() - 1);
                    all.len() - 1
                }
            };
            if !active.contains(&i) {
                active.push(i);
            }
        }
        if active == old.active {
            return Ok(());
        }
        let addrs: Vec<SocketAddr> = active.iter().map(|&i| all[i].addr).collect();
        let mut lb = LoadBalancer::<RoundRobin>::try_from_iter(addrs.iter().copied())
            .map_err(|e| format!("load balancer: {e}"))?;
        lb.set_health_check(Box::new(health::TcpProbe::new(
            self.stats.clone(),
            addrs.clone(),
            self.cfg.connect_timeout,
        )));
        lb.health_check_frequency = Some(self.cfg.health_check_interval);
        lb.parallel_health_check = true;
        let lb = Arc::new(lb);
        let (stop, rx) = tokio::sync::watch::channel(false);
        if let Some(bg) = &self.cfg.background {
            let lb = lb.clone();
            bg.spawn(async move { lb.run(rx, None).await });
        }
        for a in &addrs {
            if !old.active.iter().any(|&i| old.all[i].addr == *a) {
                crate::metrics::peer_added(&a.to_string());
            }
        }
        for &i in &old.active {
            if !addrs.contains(&old.all[i].addr) {
                crate::metrics::peer_removed(&old.all[i].addr.to_string());
            }
        }
        self.stats.peers(addrs.len());
        self.table.store(Arc::new(PeerTable {
            all,
            active,
            by_addr,
            lb,
            stop,
        }));
        Ok(())
    }

    /// The first name resolution is over (whatever its outcome).
    pub fn resolution_attempted(&self) {
        self.resolved.send_replace(true);
    }

    /// How many peer addresses are in use now.
    pub fn peer_count(&self) -> usize {
        self.table.load().active.len()
    }

    /// Wait (within the connect timeout) for the first name resolution of
    /// a client whose peers are host names.
    async fn await_peers(&self) {
        if *self.resolved.borrow() {
            return;
        }
        let mut rx = self.resolved.subscribe();
        let _ = tokio::time::timeout(self.cfg.connect_timeout, rx.wait_for(|done| *done)).await;
    }

    /// Peer `i`'s address (its index never changes).
    fn peer(&self, i: usize) -> Option<Arc<PeerAddr>> {
        self.table.load().all.get(i).cloned()
    }

    /// Send to the next suitable peer; reads move on to further peers when a
    /// peer fails or answers 502/503/504.
    pub async fn send(
        &self,
        req: &Request<'_>,
        complete: Option<Complete<'_>>,
    ) -> Result<Reply, BackendError> {
        self.await_peers().await;
        let mut tried = Vec::new();
        let mut last: Option<Failure> = None;
        let attempts = if req.retryable { self.peer_count() } else { 1 };
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
        self.await_peers().await;
        self.send_to(peer, req, complete).await.map_err(into_error)
    }

    /// Connect to peer `i` (or take an idle connection to it) and write the
    /// whole request; the answer, from the address returned, is for a
    /// [`ReplyReader`] to read.
    async fn connect_and_write(
        &self,
        i: usize,
        req: &Request<'_>,
        span: Option<&ClientSpan>,
    ) -> Result<(Stream, SocketAddr), Failure> {
        let spec = &self
            .peer(i)
            .ok_or_else(|| Failure::NotDelivered("no peer available".into()))?;
        // A request that cannot be sent fails before it takes a connection.
        let mut trace_headers = Vec::new();
        if let Some(s) = span {
            trace_headers.push(("traceparent", s.traceparent()));
            if let Some(state) = s.tracestate() {
                trace_headers.push(("tracestate", state.to_owned()));
            }
        }
        let wire = request_bytes(req, spec.authority(), &trace_headers)
            .map_err(|why| Failure::NotDelivered(format!("request to {}: {why}", spec.addr)))?;
        // An idle connection to the peer, of a read for a read, of a write
        // for a write (none is kept after a write's answer).
        let mut stream = match self.pool.take((i, !req.retryable)) {
            Some(s) => {
                self.stats.connected(true);
                s
            }
            // Boxed: the connector's future is about 8 KiB, and held inline it
            // made every call's future (and the copies of it up the chain) that
            // much larger, pooled connection or not.
            None => Box::pin(self.connect(spec)).await?,
        };
        let written = tokio::time::timeout(self.cfg.request_timeout, async {
            stream.write_all(&wire).await?;
            stream.flush().await
        })
        .await;
        // A connection that failed is dropped (closed), never pooled.
        match written {
            Ok(Ok(())) => Ok((stream, spec.addr)),
            Ok(Err(why)) => Err(Failure::NotDelivered(format!(
                "write to {}: {}",
                spec.addr,
                why.kind()
            ))),
            Err(_) => Err(Failure::Uncertain(format!(
                "{}: timed out while sending",
                spec.addr
            ))),
        }
    }

    /// A new connection to `spec` (no idle one was pooled), timed on the
    /// runtime's timer: a timeout in the peer's options would be timed by
    /// `pingora_timeout`, whose first use starts a process-wide thread that
    /// wakes 100 times a second. A failure marks the address failed.
    async fn connect(&self, spec: &PeerAddr) -> Result<Stream, Failure> {
        let peer = HttpPeer::new(
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
        match tokio::time::timeout(self.cfg.connect_timeout, self.connector.new_stream(&peer)).await
        {
            Ok(Ok(s)) => {
                self.stats.connected(false);
                Ok(s)
            }
            Ok(Err(e)) => {
                self.mark_failed(spec.addr);
                Err(Failure::NotDelivered(format!(
                    "connect to {}: {}",
                    spec.addr,
                    e.etype().as_str()
                )))
            }
            Err(_) => {
                self.mark_failed(spec.addr);
                Err(Failure::NotDelivered(format!(
                    "connect to {}: timed out",
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
        // Untraced (tracing off): no span, and nothing to look up for one.
        req.trace?;
        let spec = self.peer(i)?;
        let mcp_method = req
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("mcp-method"))
            .map(|(_, v)| v.as_ref())
            .or_else(|| {
                req.extra_headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("mcp-method"))
                    .map(|(_, v)| v.as_str())
            });
        ClientSpan::start(
            req.trace, req.method, req.path, &spec.host, spec.port, mcp_method,
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
        // No timeout per read: the whole answer is bounded by `deadline`
        // (from `started`, before any read), which always ends first, and
        // each per-read timeout was one more timer entry per request.
        let (stream, addr) = self.connect_and_write(i, req, span).await?;
        let deadline = started + self.cfg.request_timeout;
        let mut reader = ReplyReader::new(stream);
        let read = tokio::time::timeout_at(deadline, async {
            let mut reply = reader
                .read_head(req.method, addr, &self.answer_size)
                .await?;
            let done = reader
                .read_body(&mut reply, complete, &self.answer_size)
                .await?;
            Ok::<_, String>((reply, done))
        })
        .await;
        match read {
            Ok(Ok((reply, done))) => {
                self.mark_ok(&addr);
                if done && req.retryable {
                    self.release(reader, (i, !req.retryable));
                }
                Ok(reply)
            }
            Ok(Err(why)) => Err(Failure::Uncertain(format!("{}: {why}", addr))),
            Err(_) => Err(Failure::Uncertain(format!(
                "{}: no answer within {:?}",
                addr, self.cfg.request_timeout
            ))),
        }
    }

    /// Return a connection whose answer was read to its end to the pool
    /// (when the peer keeps it alive); otherwise it is closed.
    fn release(&self, reader: ReplyReader, peer: pool::Key) {
        if let Some(stream) = reader.into_reusable() {
            self.pool.put(peer, stream);
        }
    }
}

fn into_error(f: Failure) -> BackendError {
    match f {
        Failure::NotDelivered(why) => BackendError::Unavailable(why),
        Failure::Uncertain(why) => BackendError::Timeout(why),
    }
}
