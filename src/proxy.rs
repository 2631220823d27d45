//! Pingora glue for the admin listener (health, readiness, metrics, reload)
//! and the pass-through baseline; the public listener is `crate::ingress`.

use crate::gateway::Gateway;
use crate::http::HttpResponse;
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::protocols::http::ServerSession;
use std::sync::Arc;

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
