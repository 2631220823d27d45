//! Pingora glue: turn a Pingora session into an [`HttpRequest`], call the
//! core, write the [`HttpResponse`]. Nothing protocol-specific lives here.

use crate::gateway::Gateway;
use crate::http::{HttpRequest, HttpResponse};
use crate::mcp::jsonrpc::{code, RpcError};
use crate::mcp::server::body_too_large;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use std::sync::Arc;

/// The public MCP listener.
pub struct Ingress {
    pub gateway: Arc<Gateway>,
}

/// The admin listener: health, readiness, metrics, reload.
pub struct Admin {
    pub gateway: Arc<Gateway>,
    /// The TLS certificate of the ingress, re-read on `POST /reload`.
    pub tls: Option<Arc<crate::tls::CertStore>>,
    /// Whether the ingress listener accepts connections yet (`/readyz`).
    pub ingress: IngressProbe,
}

/// Answers "does the ingress listener accept connections?" for `/readyz`.
///
/// Pingora starts every service on its own runtime and binds the listeners
/// inside it, so the admin listener can be serving before the ingress socket
/// exists (or after its bind failed). A load balancer that trusted an
/// unconditional 200 would send traffic to a closed port; the probe connects
/// to the ingress address once per `/readyz` until that succeeds, then
/// remembers it.
pub struct IngressProbe {
    target: String,
    up: std::sync::atomic::AtomicBool,
}

impl IngressProbe {
    /// `listen` is the ingress `host:port`; a wildcard address is probed on
    /// the loopback of the same family.
    pub fn new(listen: &str) -> IngressProbe {
        let target = match listen.parse::<std::net::SocketAddr>() {
            Ok(mut addr) if addr.ip().is_unspecified() => {
                let loopback: std::net::IpAddr = if addr.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                };
                addr.set_ip(loopback);
                addr.to_string()
            }
            _ => listen.to_owned(),
        };
        IngressProbe {
            target,
            up: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// True once a TCP connection to the ingress has succeeded.
    pub async fn accepting(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.up.load(Ordering::Relaxed) {
            return true;
        }
        let connect = tokio::net::TcpStream::connect(self.target.as_str());
        let ok = matches!(
            tokio::time::timeout(std::time::Duration::from_millis(500), connect).await,
            Ok(Ok(_))
        );
        if ok {
            self.up.store(true, Ordering::Relaxed);
        }
        ok
    }
}

fn to_request(session: &ServerSession, body: Bytes) -> HttpRequest {
    let h = session.req_header();
    HttpRequest {
        method: h.method.as_str().to_owned(),
        path: h.uri.path().to_owned(),
        query: h.uri.query().map(str::to_owned),
        headers: h
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect(),
        body,
        peer_ip: session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip()),
    }
}

async fn write(session: &mut ServerSession, mut resp: HttpResponse) -> Result<()> {
    let mut header = ResponseHeader::build(resp.status, Some(resp.headers.len() + 2))?;
    for (n, v) in &resp.headers {
        header.insert_header(n.clone(), v.as_str())?;
    }
    let Some(mut rest) = resp.stream.take() else {
        header.insert_header("content-length", resp.body.len().to_string())?;
        session.write_response_header(Box::new(header)).await?;
        return session.write_response_body(resp.body, true).await;
    };
    // A stream: chunked framing, each part written (and flushed) as it comes.
    header.insert_header("transfer-encoding", "chunked")?;
    session.write_response_header(Box::new(header)).await?;
    session.write_response_body(resp.body, false).await?;
    while let Some(chunk) = rest.recv().await {
        session.write_response_body(chunk, false).await?;
    }
    session.write_response_body(Bytes::new(), true).await
}

/// Read the whole body, refusing (with the response to send) anything over
/// `limit` bytes or slower than `timeout`.
async fn read_body(
    session: &mut ServerSession,
    limit: usize,
    timeout: std::time::Duration,
) -> std::result::Result<Bytes, HttpResponse> {
    let declared = session
        .req_header()
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(HttpResponse::json(
            413,
            &body_too_large(limit).to_body(None),
        ));
    }
    let mut buf = BytesMut::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let next = tokio::time::timeout_at(deadline, session.read_request_body()).await;
        match next {
            Err(_) => {
                let err = crate::mcp::jsonrpc::RpcError::new(
                    408,
                    crate::mcp::jsonrpc::code::INVALID_REQUEST,
                    "Request Timeout: the body did not arrive in time",
                );
                return Err(HttpResponse::json(408, &err.to_body(None)));
            }
            Ok(Err(_)) => {
                let err = crate::mcp::jsonrpc::RpcError::invalid_request(
                    "Bad Request: the body could not be read",
                );
                return Err(HttpResponse::json(400, &err.to_body(None)));
            }
            Ok(Ok(None)) => return Ok(buf.freeze()),
            Ok(Ok(Some(chunk))) => {
                if buf.len() + chunk.len() > limit {
                    return Err(HttpResponse::json(
                        413,
                        &body_too_large(limit).to_body(None),
                    ));
                }
                buf.extend_from_slice(&chunk);
            }
        }
    }
}

/// Marks a connection that already served a request (carried across
/// keep-alive reuse in Pingora's persistent settings).
struct Served;

#[async_trait]
impl HttpServerApp for Ingress {
    /// One request on an HTTP/1 connection. Pingora's own read timeout is
    /// per `read()`, so a client trickling one header byte at a time would
    /// hold the connection forever; the whole header must arrive within
    /// `limits.header_read_timeout_ms` (after up to `limits.idle_timeout_secs`
    /// of keep-alive idleness on a reused connection).
    async fn process_new_http(
        self: &Arc<Self>,
        mut http: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        let io = self.gateway.io_limits();
        let reused = http.take_connection_user_context().is_some();
        let budget = if reused {
            io.header_timeout + io.idle_timeout
        } else {
            io.header_timeout
        };
        // On shutdown (SIGTERM, or the old process of an upgrade) an idle
        // keep-alive connection is closed at once. A fresh connection is not:
        // the client connected to send a request, which may already be on
        // its way (during an upgrade both processes accept on the same
        // socket), so it gets the usual header deadline and an answer.
        let mut shutdown_rx = shutdown.clone();
        let read = if reused {
            tokio::select! {
                biased;
                r = tokio::time::timeout(budget, http.read_request()) => r,
                _ = shutdown_rx.changed() => return None,
            }
        } else {
            tokio::time::timeout(budget, http.read_request()).await
        };
        match read {
            Ok(Ok(true)) => {}
            // Closed by the client, or an idle keep-alive connection expired.
            Ok(Ok(false)) => return None,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "request header could not be read");
                if matches!(e.etype(), ErrorType::InvalidHTTPHeader) {
                    let _ = http.respond_error(400).await;
                }
                return None;
            }
            Err(_) => {
                // Headers incomplete when the budget ran out (slowloris), or
                // a fresh connection that never sent a request.
                crate::metrics::connection_closed("header_timeout");
                tracing::debug!(
                    reused,
                    timeout_ms = budget.as_millis() as u64,
                    "request header not received in time; closing the connection"
                );
                return None;
            }
        }
        let keepalive = !*shutdown.borrow();
        http.set_keepalive(keepalive.then_some(io.idle_timeout.as_secs().max(1)));
        let resp = match self.early_response(&http) {
            Some(early) => {
                http.set_keepalive(None);
                early
            }
            None => match read_body(&mut http, io.max_body, io.body_timeout).await {
                Ok(body) => {
                    let req = to_request(&http, body);
                    self.gateway.handle(req).await
                }
                Err(early) => {
                    // The rest of the body is unread: do not reuse the connection.
                    http.set_keepalive(None);
                    early
                }
            },
        };
        if write(&mut http, resp).await.is_err() {
            return None;
        }
        let mut settings = HttpPersistentSettings::for_session(&http);
        settings.set_user_context(Box::new(Served));
        match http.finish().await {
            Ok(Some(stream)) => Some(ReusedHttpStream::from_reusable_stream(stream, settings)),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %e, "connection not reusable");
                None
            }
        }
    }
}

impl Ingress {
    /// 431 before the body is read.
    fn early_response(&self, http: &ServerSession) -> Option<HttpResponse> {
        let (max_headers, max_header_bytes) = self.gateway.header_limits();
        let headers = &http.req_header().headers;
        let header_bytes: usize = headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        if headers.len() > max_headers || header_bytes > max_header_bytes {
            let err = RpcError::new(
                431,
                code::INVALID_REQUEST,
                format!("Request Header Fields Too Large: at most {max_headers} headers and {max_header_bytes} bytes"),
            );
            return Some(HttpResponse::json(431, &err.to_body(None)));
        }
        None
    }
}

#[async_trait]
impl ProxyHttp for Admin {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Err(Error::explain(
            ErrorType::InternalError,
            "admin does not proxy",
        ))
    }

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        let path = session.req_header().uri.path().to_owned();
        let method = session.req_header().method.as_str().to_owned();
        if let ("POST", "/reload") = (method.as_str(), path.as_str()) {
            let tls = self.tls.as_ref().map(|t| t.reload("admin"));
            let mut resp = match self.gateway.reload_from_source().await {
                Ok(g) => serde_json::json!({"status": "reloaded", "config_generation": g}),
                Err(e) => {
                    serde_json::json!({"status": "rejected", "error": e, "config_generation": self.gateway.runtime().generation})
                }
            };
            match tls {
                Some(Ok(())) => resp["tls"] = serde_json::json!("reloaded"),
                Some(Err(e)) => {
                    // `status` stays the configuration's; the 422 says a part was refused.
                    resp["tls"] = serde_json::json!("rejected");
                    resp["tls_error"] = serde_json::json!(e);
                }
                None => {}
            }
            let status = if resp["status"] == "reloaded" && resp["tls"] != "rejected" {
                200
            } else {
                422
            };
            let resp = HttpResponse::json(status, &resp);
            write(session, resp).await?;
            return Ok(true);
        }
        if let ("POST", "/idempotency/resolve") = (method.as_str(), path.as_str()) {
            let state = self.gateway.runtime().state.clone();
            let query = session.req_header().uri.query().map(str::to_owned);
            let (status, body) =
                crate::state::admin_resolve(state.as_ref(), query.as_deref()).await;
            write(session, HttpResponse::json(status, &body)).await?;
            return Ok(true);
        }
        let rt = self.gateway.runtime();
        let resp = match path.as_str() {
            "/metrics" => {
                let mut r =
                    HttpResponse::new(200).with_header("content-type", "text/plain; version=0.0.4");
                r.body = Bytes::from(crate::metrics::render());
                r
            }
            "/healthz" => HttpResponse::json(200, &serde_json::json!({"status": "ok"})),
            "/readyz" if !self.ingress.accepting().await => HttpResponse::json(
                503,
                &serde_json::json!({
                    "status": "starting",
                    "reason": "the ingress listener does not accept connections yet",
                    "pid": std::process::id(),
                }),
            ),
            "/readyz" => HttpResponse::json(
                200,
                &serde_json::json!({
                    "status": "ready",
                    "pid": std::process::id(),
                    "config_generation": rt.generation,
                    "tenants": rt.endpoints.len() + rt.relays.len(),
                }),
            ),
            _ => HttpResponse::json(404, &serde_json::json!({"error": "not_found"})),
        };
        write(session, resp).await?;
        Ok(true)
    }
}

/// A minimal Pingora reverse proxy with no MCP work at all: the baseline
/// the load script compares the full gateway against.
pub struct PassThrough {
    pub upstream: String,
}

#[async_trait]
impl ProxyHttp for PassThrough {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
    }
}

#[cfg(test)]
mod ingress_probe_tests {
    use super::IngressProbe;

    #[test]
    fn a_wildcard_address_is_probed_on_loopback() {
        assert_eq!(IngressProbe::new("0.0.0.0:8080").target, "127.0.0.1:8080");
        assert_eq!(IngressProbe::new("[::]:8080").target, "[::1]:8080");
        assert_eq!(IngressProbe::new("10.0.0.5:80").target, "10.0.0.5:80");
        assert_eq!(IngressProbe::new("localhost:80").target, "localhost:80");
    }

    #[tokio::test]
    async fn not_accepting_until_the_port_listens_then_remembered() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let probe = IngressProbe::new(&addr.to_string());
        assert!(!probe.accepting().await, "nothing listens yet");
        let listener = std::net::TcpListener::bind(addr).unwrap();
        assert!(probe.accepting().await);
        drop(listener);
        assert!(probe.accepting().await, "readiness is remembered");
    }
}
