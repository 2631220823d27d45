//! The HTTP client the forwarding backends share, on Pingora's upstream
//! machinery:
//!
//! - `pingora::connectors::TransportConnector` pools keep-alive connections
//!   per peer; `HttpPeer` options carry the connect and read timeouts.
//!   The request head and body leave in one write (one TCP segment for a
//!   typical call, where Pingora's session API would flush them apart);
//!   Pingora's HTTP/1 session then reads the answer.
//! - `pingora::lb::LoadBalancer<RoundRobin>` spreads calls over the
//!   configured peers. Its TCP health check runs as the load balancer's own
//!   background loop (`LoadBalancer::run`), spawned on the first call (the
//!   runtime is built before Pingora's tokio runtimes exist) and stopped
//!   when the backend is dropped on a config reload.
//! - On top, a passive check: a peer that refused a connection is skipped
//!   for a short cool-down, so reads route around a dead peer before the
//!   next health-check pass notices.
//!
//! Delivery semantics: a failure before the request was completely written
//! is *not delivered* (safe to retry anywhere); a failure or timeout after
//! it is *uncertain*. Reads are retried on the next peer; writes
//! (`lead.submit`) use a fresh connection, are sent once and never retried.

use crate::backend::BackendError;
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// Largest upstream response body accepted.
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// How long a peer that refused a connection is skipped.
const FAIL_COOL_DOWN: Duration = Duration::from_secs(3);
/// `group_key` of write peers: their connections never share the read pool.
const WRITE_GROUP: u64 = 0x6c65_6164;

/// Logs health transitions reported by the load balancer's health check
/// and sets the `aap_upstream_up` gauge.
struct HealthLog;

#[async_trait::async_trait]
impl pingora::lb::health_check::HealthObserve for HealthLog {
    async fn observe(&self, target: &pingora::lb::Backend, healthy: bool) {
        crate::metrics::peer_health(&target.addr.to_string(), healthy);
        if healthy {
            tracing::info!(peer = %target.addr, healthy, "upstream peer health changed");
        } else {
            tracing::warn!(peer = %target.addr, healthy, "upstream peer health changed");
        }
    }
}

pub use aap_core::peer::PeerSpec;

/// One address of a configured peer: what the client connects to. A peer
/// whose name resolves to several addresses is several of these, sharing
/// `host` (the `Host` header and TLS SNI).
#[derive(Debug, Clone)]
pub struct PeerAddr {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
}

impl PeerAddr {
    fn authority(&self) -> String {
        if (self.tls && self.port == 443) || (!self.tls && self.port == 80) {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A peer host name that did not resolve.
#[derive(Debug, Clone)]
pub struct ResolveError {
    /// The name, without IPv6 brackets.
    pub host: String,
    pub why: String,
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot resolve {}: {}", self.host, self.why)
    }
}

/// How long one host-name lookup may take when a runtime is built.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The addresses of peer host names, looked up (asynchronously, with
/// tokio's resolver) before a runtime is built at start or reload, so the
/// build itself never waits for DNS. An offline set (for `check` and
/// `catalog`) knows only IP literals: a name gets no addresses, and a
/// client built from it has nothing to connect to.
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    online: bool,
    names: HashMap<(String, u16), Vec<SocketAddr>>,
}

impl Addresses {
    /// No lookups: for commands that validate and never connect.
    pub fn offline() -> Addresses {
        Addresses::default()
    }

    /// Look up every host name among `peers`, concurrently; all addresses
    /// of a name are kept. Fails with a name that does not resolve.
    pub async fn resolve(peers: &[PeerSpec]) -> Result<Addresses, ResolveError> {
        let mut tasks = tokio::task::JoinSet::new();
        let mut asked = std::collections::HashSet::new();
        for p in peers {
            if p.literal().is_some() || !asked.insert((p.bare_host().to_owned(), p.port)) {
                continue;
            }
            let (host, port) = (p.bare_host().to_owned(), p.port);
            tasks.spawn(async move {
                let lookup = tokio::net::lookup_host((host.clone(), port));
                let why = match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                    Err(_) => format!("no answer within {} s", RESOLVE_TIMEOUT.as_secs()),
                    Ok(Err(e)) => e.to_string(),
                    Ok(Ok(found)) => {
                        let mut v: Vec<SocketAddr> = Vec::new();
                        for a in found {
                            if !v.contains(&a) {
                                v.push(a);
                            }
                        }
                        if !v.is_empty() {
                            return Ok(((host, port), v));
                        }
                        "no address".to_owned()
                    }
                };
                Err(ResolveError { host, why })
            });
        }
        let mut names = HashMap::new();
        let mut failed = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok((key, addrs))) => {
                    names.insert(key, addrs);
                }
                Ok(Err(e)) => {
                    failed.get_or_insert(e);
                }
                Err(e) => {
                    failed.get_or_insert(ResolveError {
                        host: String::new(),
                        why: format!("the lookup task failed: {e}"),
                    });
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(Addresses {
                online: true,
                names,
            }),
        }
    }

    /// The addresses of `peers`, in order, without duplicates. Online, a
    /// name that was not looked up is an error; offline it has none.
    pub fn peers(&self, peers: &[PeerSpec]) -> Result<Vec<PeerAddr>, String> {
        let mut out: Vec<PeerAddr> = Vec::new();
        for p in peers {
            let addrs = match p.literal() {
                Some(a) => vec![a],
                None => match self.names.get(&(p.bare_host().to_owned(), p.port)) {
                    Some(v) => v.clone(),
                    None if self.online => {
                        return Err(format!("{} was not resolved", p.bare_host()))
                    }
                    None => Vec::new(),
                },
            };
            for addr in addrs {
                if out.iter().any(|o| o.addr == addr) {
                    continue;
                }
                out.push(PeerAddr {
                    tls: p.tls,
                    host: p.host.clone(),
                    port: p.port,
                    addr,
                });
            }
        }
        Ok(out)
    }
}

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
        hc.health_changed_callback = Some(Box::new(HealthLog));
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

    /// Start the load balancer's health-check loop once, on the runtime of
    /// the first call.
    fn ensure_health_checks(&self) {
        if self.health_started.swap(true, Ordering::AcqRel) {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            self.health_started.store(false, Ordering::Release);
            return;
        }
        let lb = self.lb.clone();
        let rx = self.shutdown.subscribe();
        tokio::spawn(async move { lb.run(rx, None).await });
    }

    fn cooling(&self, addr: &SocketAddr) -> bool {
        // An expired entry stays until a call succeeds (`mark_ok`), which
        // also turns the peer's gauge back to up.
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(addr)
            .is_some_and(|t| t.elapsed() < FAIL_COOL_DOWN)
    }

    fn mark_failed(&self, addr: SocketAddr) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(addr, Instant::now());
        crate::metrics::peer_health(&addr.to_string(), false);
    }

    fn mark_ok(&self, addr: &SocketAddr) {
        let was_failing = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(addr)
            .is_some();
        if was_failing {
            crate::metrics::peer_health(&addr.to_string(), true);
        }
    }

    /// The next peer to try: healthy and not cooling first, then any peer not
    /// tried yet (health information may lag behind a restart).
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.cfg.peers.len();
        let index =
            |b: &pingora::lb::Backend| b.addr.as_inet().and_then(|a| self.by_addr.get(a).copied());
        let healthy = self.lb.select_with(b"", n * 2 + 1, |b, healthy| {
            healthy
                && index(b).is_some_and(|i| !tried.contains(&i))
                && !b.addr.as_inet().is_some_and(|a| self.cooling(a))
        });
        if let Some(i) = healthy.as_ref().and_then(index) {
            return Some(i);
        }
        let fallback = self.lb.select_with(b"", n * 2 + 1, |b, _| {
            index(b).is_some_and(|i| !tried.contains(&i))
        });
        fallback
            .as_ref()
            .and_then(index)
            .or_else(|| (0..n).find(|i| !tried.contains(i)))
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
        let wire = request_bytes(req, &spec.authority())
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

    async fn send_to(
        &self,
        i: usize,
        req: &Request<'_>,
        complete: Option<Complete<'_>>,
    ) -> Result<Reply, Failure> {
        let started = tokio::time::Instant::now();
        let (mut session, peer) = self
            .connect_and_write(i, req, Some(self.cfg.request_timeout))
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
        let mut tried = Vec::new();
        let mut last = None;
        while tried.len() < self.cfg.peers.len() {
            let i = match preferred {
                Some(p) if tried.is_empty() && p < self.cfg.peers.len() => p,
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

    async fn open_on(
        &self,
        i: usize,
        req: &Request<'_>,
        stream_idle: Option<Duration>,
    ) -> Result<Streamed, Failure> {
        let started = tokio::time::Instant::now();
        let (mut session, peer) = self.connect_and_write(i, req, stream_idle).await?;
        let addr = self.cfg.peers[i].addr;
        let head = tokio::time::timeout_at(
            started + self.cfg.request_timeout,
            session.read_response_header(),
        )
        .await;
        match head {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                session.shutdown().await;
                return Err(Failure::Uncertain(format!(
                    "{addr}: reading the response: {}",
                    e.etype().as_str()
                )));
            }
            Err(_) => {
                session.shutdown().await;
                return Err(Failure::Uncertain(format!(
                    "{addr}: no answer within {:?}",
                    self.cfg.request_timeout
                )));
            }
        }
        self.mark_ok(&addr);
        let Some(head) = head_of(&session, addr) else {
            session.shutdown().await;
            return Err(Failure::Uncertain(format!("{addr}: no response header")));
        };
        let event_stream = head.content_type() == "text/event-stream";
        if !event_stream {
            let mut reply = head;
            let read = tokio::time::timeout_at(
                started + self.cfg.request_timeout,
                read_body(&mut session, &mut reply, None),
            )
            .await;
            return match read {
                Ok(Ok(_)) => {
                    self.release(session, &peer).await;
                    Ok(Streamed {
                        peer: i,
                        status: reply.status,
                        headers: reply.headers,
                        body: StreamedBody::Whole(reply.body),
                    })
                }
                Ok(Err(why)) => {
                    session.shutdown().await;
                    Err(Failure::Uncertain(format!("{addr}: {why}")))
                }
                Err(_) => {
                    session.shutdown().await;
                    Err(Failure::Uncertain(format!(
                        "{addr}: body not received within {:?}",
                        self.cfg.request_timeout
                    )))
                }
            };
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            loop {
                if session.response_done() {
                    break;
                }
                let chunk = tokio::select! {
                    c = session.read_response_body() => c,
                    // The client went away: stop reading from the peer.
                    _ = tx.closed() => break,
                };
                match chunk {
                    Ok(Some(c)) => {
                        if tx.send(c).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(peer = %addr, error = %e.etype().as_str(), "relayed event stream ended early");
                        break;
                    }
                }
            }
            session.shutdown().await;
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
    pub headers: Vec<(String, String)>,
    pub body: StreamedBody,
}

#[derive(Debug)]
pub enum StreamedBody {
    Whole(Bytes),
    /// `text/event-stream` chunks as the peer sends them.
    Events(tokio::sync::mpsc::Receiver<Bytes>),
}

/// The whole request as it goes on the wire: head and body in one buffer.
/// Every name must be an HTTP token and every value free of control
/// characters, so nothing forwarded from a client (`Mcp-Param-*`) can end
/// a header line early and smuggle in another header or request.
fn request_bytes(req: &Request<'_>, authority: &str) -> Result<Vec<u8>, String> {
    let target_ok = req.path.starts_with('/') && req.path.bytes().all(|b| b.is_ascii_graphic());
    if !is_token(req.method) || !target_ok {
        return Err("the request line cannot be sent".into());
    }
    let mut wire = Vec::with_capacity(256 + req.body.len());
    wire.extend_from_slice(req.method.as_bytes());
    wire.push(b' ');
    wire.extend_from_slice(req.path.as_bytes());
    wire.extend_from_slice(b" HTTP/1.1\r\n");
    header_line(&mut wire, "host", authority)?;
    for (n, v) in &req.headers {
        header_line(&mut wire, n, v)?;
    }
    for (n, v) in req.extra_headers {
        header_line(&mut wire, n, v)?;
    }
    let mut len = itoa::Buffer::new();
    header_line(&mut wire, "content-length", len.format(req.body.len()))?;
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(&req.body);
    Ok(wire)
}

/// `name: value` and CRLF, after checking both (RFC 9110 §5.1, §5.5).
fn header_line(wire: &mut Vec<u8>, name: &str, value: &str) -> Result<(), String> {
    if !is_token(name) {
        return Err("a header name is not an HTTP token".into());
    }
    let value_ok = value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80);
    if !value_ok {
        return Err(format!("the {name} header holds a control character"));
    }
    wire.extend_from_slice(name.as_bytes());
    wire.extend_from_slice(b": ");
    wire.extend_from_slice(value.trim_matches([' ', '\t']).as_bytes());
    wire.extend_from_slice(b"\r\n");
    Ok(())
}

/// An RFC 9110 token: one or more of ALPHA, DIGIT and ``!#$%&'*+-.^_`|~``.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn into_error(f: Failure) -> BackendError {
    match f {
        Failure::NotDelivered(why) => BackendError::Unavailable(why),
        Failure::Uncertain(why) => BackendError::Timeout(why),
    }
}

/// The response head read so far, as a [`Reply`] without body.
fn head_of(session: &HttpSession, peer: SocketAddr) -> Option<Reply> {
    let head = session.response_header()?;
    Some(Reply {
        status: head.status.as_u16(),
        headers: head
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: Bytes::new(),
        peer,
    })
}

/// Read the response head and body; `true` when the body was read to its
/// end (the connection may then be reused).
async fn read_reply(
    session: &mut HttpSession,
    peer: SocketAddr,
    complete: Option<Complete<'_>>,
) -> Result<(Reply, bool), String> {
    session
        .read_response_header()
        .await
        .map_err(|e| format!("reading the response: {}", e.etype().as_str()))?;
    let mut reply = head_of(session, peer).ok_or("no response header")?;
    let done = read_body(session, &mut reply, complete).await?;
    Ok((reply, done))
}

/// Read the body into `reply` (at most [`MAX_RESPONSE_BYTES`]); `true` when
/// it was read to its end, `false` when `complete` said enough arrived.
async fn read_body(
    session: &mut HttpSession,
    reply: &mut Reply,
    complete: Option<Complete<'_>>,
) -> Result<bool, String> {
    // Only an event stream can be complete before it ends; any other body
    // is read whole, without showing each partial read to `complete`.
    let complete = complete.filter(|_| reply.content_type() == "text/event-stream");
    let declared = reply
        .header("content-length")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut buf = Vec::with_capacity(declared.min(MAX_RESPONSE_BYTES));
    loop {
        if session.response_done() {
            reply.body = Bytes::from(buf);
            return Ok(true);
        }
        match session
            .read_response_body()
            .await
            .map_err(|e| format!("reading the response body: {}", e.etype().as_str()))?
        {
            None => {
                reply.body = Bytes::from(buf);
                return Ok(true);
            }
            Some(chunk) => {
                buf.extend_from_slice(&chunk);
                if buf.len() > MAX_RESPONSE_BYTES {
                    return Err(format!("response larger than {MAX_RESPONSE_BYTES} bytes"));
                }
                if let Some(done) = complete {
                    reply.body = Bytes::copy_from_slice(&buf);
                    if done(reply) {
                        return Ok(false);
                    }
                }
            }
        }
    }
}

/// A tenant's `auth.jwks_url`, fetched through the same pooled client the
/// backends use (the port `aap_core::auth::JwksFetcher`).
pub struct JwksOverClient {
    pub client: Client,
    pub path: String,
}

#[async_trait::async_trait]
impl aap_core::auth::JwksFetcher for JwksOverClient {
    async fn fetch(&self) -> Result<Bytes, String> {
        let req = Request {
            extra_headers: &[],
            method: "GET",
            path: &self.path,
            headers: vec![("accept", "application/json".to_string())],
            body: Bytes::new(),
            retryable: true,
        };
        match self.client.send(&req, None).await {
            Ok(r) if r.status == 200 => Ok(r.body),
            Ok(r) => Err(format!("HTTP {}", r.status)),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(extra: &'a [(String, String)], body: &'static str) -> Request<'a> {
        Request {
            method: "POST",
            path: "/mcp",
            headers: vec![("content-type", "application/json".into())],
            extra_headers: extra,
            body: Bytes::from_static(body.as_bytes()),
            retryable: true,
        }
    }

    #[test]
    fn head_and_body_go_out_as_one_message() {
        let extra = [("mcp-param-region".to_owned(), "eu".to_owned())];
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let wire = request_bytes(&request(&extra, body), "127.0.0.1:9").unwrap();
        let text = String::from_utf8(wire).unwrap();
        let (head, rest) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(rest, body);
        let mut lines = head.split("\r\n");
        assert_eq!(lines.next(), Some("POST /mcp HTTP/1.1"));
        let mut fields: Vec<&str> = lines.collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                "content-length: 46",
                "content-type: application/json",
                "host: 127.0.0.1:9",
                "mcp-param-region: eu",
            ]
        );
    }

    #[test]
    fn a_forwarded_value_cannot_split_the_request() {
        for bad in ["eu\r\nx-injected: 1", "eu\nx: 1", "eu\0", "eu\x7f"] {
            let extra = [("mcp-param-region".to_owned(), bad.to_owned())];
            assert!(
                request_bytes(&request(&extra, "{}"), "h:1").is_err(),
                "{bad:?}"
            );
        }
        for name in ["", "mcp-param-a b", "mcp-param-a:b", "x\r\ny"] {
            let extra = [(name.to_owned(), "v".to_owned())];
            assert!(
                request_bytes(&request(&extra, "{}"), "h:1").is_err(),
                "{name:?}"
            );
        }
        let mut req = request(&[], "{}");
        req.path = "/mcp HTTP/1.1\r\nx: 1";
        assert!(request_bytes(&req, "h:1").is_err());
    }

    #[test]
    fn peer_syntax_is_checked_without_any_lookup() {
        let p = PeerSpec::parse("http://upstream.invalid:8001").unwrap();
        assert_eq!(
            (p.tls, p.host.as_str(), p.port),
            (false, "upstream.invalid", 8001)
        );
        let p = PeerSpec::parse("https://[::1]").unwrap();
        assert_eq!((p.tls, p.bare_host(), p.port), (true, "::1", 443));
        let p = PeerSpec::parse("http://[::1]:8080").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("[::1]", 8080));
        let p = PeerSpec::parse("http://10.0.0.5").unwrap();
        assert_eq!(p.port, 80);
        for bad in [
            "ftp://x",
            "http://",
            "http://a/b",
            "http://a:b",
            "http://a..b",
            "http://-a",
            "http://[zz]:1",
            "http://[::1]x",
            "http://::1:80",
            "http://a b",
            "http://ex\u{e4}mple.com",
        ] {
            assert!(PeerSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn offline_addresses_know_only_literals() {
        let specs = [
            PeerSpec::parse("http://127.0.0.1:1").unwrap(),
            PeerSpec::parse("http://upstream.invalid:2").unwrap(),
            PeerSpec::parse("http://127.0.0.1:1/").unwrap(),
        ];
        let got = Addresses::offline().peers(&specs).unwrap();
        assert_eq!(
            got.len(),
            1,
            "a name has no address; a duplicate is used once"
        );
        assert_eq!(got[0].addr, "127.0.0.1:1".parse::<SocketAddr>().unwrap());
    }

    #[tokio::test]
    async fn resolution_keeps_every_address_and_names_a_failure() {
        let specs = [PeerSpec::parse("http://localhost:7").unwrap()];
        let a = Addresses::resolve(&specs).await.unwrap();
        let got = a.peers(&specs).unwrap();
        assert!(!got.is_empty());
        assert!(got
            .iter()
            .all(|p| p.addr.ip().is_loopback() && p.host == "localhost"));
        let bad = [PeerSpec::parse("http://nothing.invalid:7").unwrap()];
        let e = Addresses::resolve(&bad).await.unwrap_err();
        assert_eq!(e.host, "nothing.invalid");
        assert!(e
            .to_string()
            .starts_with("cannot resolve nothing.invalid: "));
    }
}
