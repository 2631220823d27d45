//! The admin listener on Pingora's HTTP stack: health, readiness, metrics, reload, idempotency
//! resolution, behind the admin token. Never serves MCP; the public listener is `crate::ingress`.
//!
//! Submodules: `console` (the web page at `/`), `views` (the `/admin/…` JSON views),
//! `history` (the reload history), `log_level` (the runtime log filter).

mod console;
pub mod log_level;
mod views;

use crate::exchange::HttpResponse;
use crate::gateway::Gateway;
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
    /// The runtime log filter (`/admin/log-level`), installed by the logging setup.
    pub log_level: Arc<log_level::LogLevel>,
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
        header.insert_header(n.to_string(), v.as_ref())?;
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
        // Reading is open (/healthz, /readyz, /metrics); anything else
        // (POST /reload, POST /idempotency/resolve and whatever is added
        // later) needs the admin token.
        // `/admin/…` (per-tenant figures, lead dead letters and redrive) needs
        // it for every method: it names tenants and their activity.
        if !matches!(method.as_str(), "GET" | "HEAD") || path.starts_with("/admin/") {
            let rt = self.gateway.current();
            let presented = bearer(session.req_header());
            if let Err(refusal) = authorize(&rt.config.server, presented, &method, &path) {
                write(session, refusal).await?;
                return Ok(true);
            }
        }
        if let Some(resp) = console::asset(&method, &path) {
            write(session, resp).await?;
            return Ok(true);
        }
        if path == "/admin/log-level" {
            let (status, body) = match method.as_str() {
                "GET" => log_level::get(&self.log_level),
                "PUT" => match read_body(session, 4096).await {
                    Some(b) => log_level::put(&self.log_level, &b),
                    None => (
                        413,
                        serde_json::json!({"error": "too_large", "message": "the body is limited to 4096 bytes"}),
                    ),
                },
                _ => (
                    405,
                    serde_json::json!({"error": "method_not_allowed", "message": "GET or PUT /admin/log-level"}),
                ),
            };
            write(session, HttpResponse::json(status, &body)).await?;
            return Ok(true);
        }
        if let Some(resp) = views::answer(&method, &path, &self.gateway, &self.log_level) {
            write(session, resp).await?;
            return Ok(true);
        }
        if let ("POST", "/reload") = (method.as_str(), path.as_str()) {
            let tls = self.tls.as_ref().map(|t| t.reload("admin"));
            let mut resp = match self.gateway.reload_from_source().await {
                Ok(g) => serde_json::json!({"status": "reloaded", "config_generation": g}),
                Err(e) => {
                    serde_json::json!({"status": "rejected", "error": e, "config_generation": self.gateway.current().generation})
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
            let state = self.gateway.current().state.clone();
            let query = session.req_header().uri.query().map(str::to_owned);
            let (status, body) =
                crate::state::admin_resolve(state.as_ref(), query.as_deref()).await;
            write(session, HttpResponse::json(status, &body)).await?;
            return Ok(true);
        }
        if let Some(rest) = path.strip_prefix("/admin/tenants/") {
            let query = session.req_header().uri.query().map(str::to_owned);
            write(session, tenant_figures(rest, query.as_deref())).await?;
            return Ok(true);
        }
        let outboxes = &self.gateway.platform().outboxes;
        if let Some(resp) =
            leads_admin(outboxes, &method, &path, session.req_header().uri.query()).await
        {
            write(session, resp).await?;
            return Ok(true);
        }
        let rt = self.gateway.current();
        let resp = match path.as_str() {
            "/readyz" if crate::shutdown::draining() => HttpResponse::json(
                503,
                &serde_json::json!({
                    "status": "draining",
                    "reason": "shutting down: stop sending; the listeners close after server.shutdown_drain_secs",
                    "pid": std::process::id(),
                }),
            ),
            "/metrics" => {
                self.gateway.platform().outboxes.refresh_gauges().await;
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
            "/readyz" => {
                let (feeds, not_ready) = feed_readiness(&rt);
                let tenants = rt.routes.units.len();
                // Ready while at least one tenant can serve; a tenant whose
                // inventory feed never loaded is listed, not fatal to the others.
                let (code, status) = match not_ready.len() {
                    0 => (200, "ready"),
                    n if n < tenants => (200, "degraded"),
                    _ => (503, "not_ready"),
                };
                let mut body = serde_json::json!({
                    "status": status,
                    "pid": std::process::id(),
                    "config_generation": rt.generation,
                    "tenants": tenants,
                });
                if !feeds.is_empty() {
                    body["feeds"] = serde_json::Value::Array(feeds);
                }
                if !not_ready.is_empty() {
                    body["not_ready"] = serde_json::json!(not_ready);
                    body["reason"] = serde_json::json!("the inventory feed of the tenants in not_ready has never loaded (see feeds[].last_error)");
                }
                // A cluster whose names do not resolve yet fails only its own
                // tenants' requests: it is reported, not made the whole
                // gateway's readiness (one dealer's upstream must not take
                // every other dealer out of rotation).
                let waiting: Vec<serde_json::Value> = self
                    .gateway
                    .platform()
                    .clusters
                    .status()
                    .into_iter()
                    .filter(|c| !c.ready)
                    .map(|c| serde_json::json!({"cluster": c.name, "reason": c.reason}))
                    .collect();
                if !waiting.is_empty() {
                    body["clusters_not_ready"] = serde_json::Value::Array(waiting);
                }
                // A refused tenant file is reported, not fatal: the others serve.
                if rt.config.tenants_dir.is_some() {
                    body["tenant_files"] = tenant_files(&rt);
                }
                HttpResponse::json(code, &body)
            }
            _ => HttpResponse::json(404, &serde_json::json!({"error": "not_found"})),
        };
        write(session, resp).await?;
        Ok(true)
    }
}

/// The request body, up to `limit` bytes; `None` when it is longer (or
/// cannot be read).
async fn read_body(session: &mut Session, limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                out.extend_from_slice(&chunk);
                if out.len() > limit {
                    return None;
                }
            }
            Ok(None) => return Some(out),
            Err(_) => return None,
        }
    }
}

/// `/readyz` detail on `tenants_dir`: how many files serve, and each
/// refused file with its problem and whether a previous version serves.
/// A refused file does not make the gateway unready: the others serve.
fn tenant_files(rt: &crate::gateway::ConfigGeneration) -> serde_json::Value {
    let refused: Vec<serde_json::Value> = rt
        .files
        .iter()
        .filter_map(|(name, f)| {
            let error = f.error.as_ref()?;
            Some(serde_json::json!({
                "file": name,
                "error": error,
                "serving": if f.tenant.is_some() { "previous version" } else { "nothing" },
            }))
        })
        .collect();
    serde_json::json!({
        "applied": rt.files.len() - refused.len(),
        "refused": refused,
    })
}

/// Inventory feed health for `/readyz`: one entry per source (with the
/// number of tenants it serves), and the tenants whose feed never loaded.
fn feed_readiness(rt: &crate::gateway::ConfigGeneration) -> (Vec<serde_json::Value>, Vec<String>) {
    // Each source's health is read once, however many tenants share it (a
    // platform of 10,000 tenants on one feed: one `health()`, not 10,000).
    let mut by_feed: std::collections::HashMap<usize, (serde_json::Value, usize, bool)> =
        std::collections::HashMap::new();
    let mut not_ready = Vec::new();
    for ep in rt.routes.endpoints.values() {
        let backend = &ep.contract.backend;
        let Some(id) = backend.feed_id() else {
            continue;
        };
        let entry = match by_feed.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let Some(h) = backend.feed_health() else {
                    continue;
                };
                let never = h["state"] == "never_loaded";
                v.insert((h, 0, never))
            }
        };
        entry.1 += 1;
        if entry.2 {
            not_ready.push(ep.tenant.clone());
        }
    }
    not_ready.sort();
    let mut by_source: std::collections::BTreeMap<String, (serde_json::Value, usize)> =
        std::collections::BTreeMap::new();
    for (h, n, _) in by_feed.into_values() {
        let source = h["source"].as_str().unwrap_or_default().to_owned();
        by_source.entry(source).or_insert((h, 0)).1 += n;
    }
    let feeds = by_source
        .into_values()
        .map(|(mut h, n)| {
            h["tenants"] = serde_json::json!(n);
            h
        })
        .collect();
    (feeds, not_ready)
}

/// Per-tenant figures, which `/metrics` labels only for the tenants `[telemetry]
/// tenant_metrics` names: `GET /admin/tenants/top?by=requests&n=20` (the `n` highest by
/// `requests`, `server_errors`, `client_errors`, `throttled` or `duration`) and
/// `GET /admin/tenants/{id}/stats`. Behind the admin token like every `/admin/` path (counts, no request values).
fn tenant_figures(rest: &str, query: Option<&str>) -> HttpResponse {
    let bad = |msg: String| {
        HttpResponse::json(
            400,
            &serde_json::json!({"error": "bad_request", "message": msg}),
        )
    };
    if rest == "top" {
        let (mut by, mut n) = (crate::metrics::TopBy::Requests, 20usize);
        for (k, v) in query
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
        {
            match k {
                "by" => match crate::metrics::TopBy::parse(v) {
                    Some(b) => by = b,
                    None => return bad(format!("by: one of {}", crate::metrics::TopBy::NAMES)),
                },
                "n" => match v.parse::<usize>() {
                    Ok(x) if (1..=1000).contains(&x) => n = x,
                    _ => return bad("n: a whole number from 1 to 1000".into()),
                },
                _ => return bad("unknown parameter; use by= and n=".into()),
            }
        }
        let (top, tenants) = crate::metrics::top_tenants(by, n);
        return HttpResponse::json(200, &serde_json::json!({"tenants": tenants, "top": top}));
    }
    match rest
        .strip_suffix("/stats")
        .and_then(crate::metrics::tenant_stats)
    {
        Some(stats) => HttpResponse::json(200, &stats),
        None => HttpResponse::json(
            404,
            &serde_json::json!({"error": "not_found", "message": "no such tenant in the configuration being served"}),
        ),
    }
}

/// The lead outbox's admin endpoints (see `crate::leads::outbox`); `None`
/// for any other path. The store work runs on its blocking threads.
async fn leads_admin(
    outboxes: &crate::leads::outbox::Outboxes,
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Option<HttpResponse> {
    let query = query.map(str::to_owned);
    let (status, body) = match (method, path) {
        ("GET", "/admin/leads/dead-letters") => {
            crate::leads::outbox::admin_dead_letters(outboxes, query.as_deref()).await
        }
        ("POST", "/admin/leads/redrive") => {
            crate::leads::outbox::admin_redrive(outboxes, query.as_deref()).await
        }
        (_, "/admin/leads/dead-letters" | "/admin/leads/redrive") => (
            405,
            serde_json::json!({"error": "method_not_allowed", "reason": "GET /admin/leads/dead-letters, POST /admin/leads/redrive"}),
        ),
        _ => return None,
    };
    Some(HttpResponse::json(status, &body))
}

/// What the request presents as `Authorization: Bearer <token>`:
/// `Ok(None)` when there is no such header, `Err(())` when it is malformed
/// (another scheme, several `Authorization` headers, not text).
fn bearer(req: &pingora::http::RequestHeader) -> std::result::Result<Option<&str>, ()> {
    let mut all = req.headers.get_all("authorization").iter();
    let Some(value) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(());
    }
    let value = value.to_str().map_err(|_| ())?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(())?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(());
    }
    Ok(Some(token.trim()))
}

/// Whether a mutating admin request may go on: 403 when no admin token is
/// configured (saying how to configure one), 401 when the request's token
/// is missing or wrong. The token is compared in constant time (SHA-256 of
/// both sides, compared with `subtle`, so neither the content nor the length
/// of the expected token shows in the timing) and never logged or echoed.
fn authorize(
    server: &crate::config::ServerConfig,
    presented: std::result::Result<Option<&str>, ()>,
    method: &str,
    path: &str,
) -> std::result::Result<(), HttpResponse> {
    use sha2::{Digest, Sha256};
    use subtle::ConstantTimeEq;
    let refuse = |status: u16, reason: &str, message: String| {
        crate::metrics::METRICS
            .admin_refusals
            .with_label_values(&[reason])
            .inc();
        tracing::warn!(method, path, status, reason, "admin request refused");
        let resp = HttpResponse::json(
            status,
            &serde_json::json!({"error": reason, "message": message}),
        );
        if status == 401 {
            resp.with_header("www-authenticate", "Bearer realm=\"aap-gateway admin\"")
        } else {
            resp
        }
    };
    let Some(expected) = &server.admin_secret else {
        let how = match &server.admin_token_env {
            Some(var) => format!(
                "the environment variable {var} named by server.admin_token_env is not set (or empty) in the gateway's environment: set it to a token of at least {} characters and restart",
                crate::config::MIN_ADMIN_TOKEN_CHARS
            ),
            None => format!(
                "no admin token is configured: set server.admin_token_file (a file holding the token), server.admin_token_env (an environment variable holding it) or server.admin_token (at least {} characters), then reload (SIGHUP) or restart",
                crate::config::MIN_ADMIN_TOKEN_CHARS
            ),
        };
        return Err(refuse(
            403,
            "admin_token_not_configured",
            format!("{method} {path} is locked: {how}; then send `Authorization: Bearer <token>`"),
        ));
    };
    let token = match presented {
        Ok(Some(t)) => t,
        Ok(None) => {
            return Err(refuse(
                401,
                "missing_token",
                "this admin endpoint needs `Authorization: Bearer <admin token>`".into(),
            ))
        }
        Err(()) => {
            return Err(refuse(
                401,
                "malformed_authorization",
                "send exactly one `Authorization: Bearer <admin token>` header".into(),
            ))
        }
    };
    let want = Sha256::digest(expected.expose().as_bytes());
    let got = Sha256::digest(token.as_bytes());
    if bool::from(want.as_slice().ct_eq(got.as_slice())) {
        Ok(())
    } else {
        Err(refuse(
            401,
            "wrong_token",
            "the admin token is not valid".into(),
        ))
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
