//! Pingora glue: turn a Pingora session into an [`HttpRequest`], call the
//! core, write the [`HttpResponse`]. Nothing protocol-specific lives here.

use crate::gateway::Gateway;
use crate::http::{HttpRequest, HttpResponse};
use crate::mcp::server::body_too_large;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use std::sync::Arc;

/// The public MCP listener.
pub struct Ingress {
    pub gateway: Arc<Gateway>,
}

/// The admin listener: health, readiness.
pub struct Admin {
    pub gateway: Arc<Gateway>,
}

fn to_request(session: &Session, body: Bytes) -> HttpRequest {
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

async fn write(session: &mut Session, resp: HttpResponse) -> Result<()> {
    let mut header = ResponseHeader::build(resp.status, Some(resp.headers.len() + 2))?;
    for (n, v) in &resp.headers {
        header.insert_header(n.clone(), v.as_str())?;
    }
    header.insert_header("content-length", resp.body.len().to_string())?;
    let empty = resp.body.is_empty();
    session
        .write_response_header(Box::new(header), empty)
        .await?;
    if !empty {
        session.write_response_body(Some(resp.body), true).await?;
    }
    Ok(())
}

/// Read the whole body, refusing (with the response to send) anything over
/// `limit` bytes or slower than `timeout`.
async fn read_body(
    session: &mut Session,
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

#[async_trait]
impl ProxyHttp for Ingress {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        // Every request is answered in request_filter.
        Err(Error::explain(
            ErrorType::InternalError,
            "ingress does not proxy",
        ))
    }

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        let (max_headers, max_header_bytes) = self.gateway.header_limits();
        let headers = &session.req_header().headers;
        let header_bytes: usize = headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        if headers.len() > max_headers || header_bytes > max_header_bytes {
            let err = crate::mcp::jsonrpc::RpcError::new(431, crate::mcp::jsonrpc::code::INVALID_REQUEST, format!(
                "Request Header Fields Too Large: at most {max_headers} headers and {max_header_bytes} bytes"));
            session.set_keepalive(None);
            write(session, HttpResponse::json(431, &err.to_body(None))).await?;
            return Ok(true);
        }
        let limit = self.gateway.max_body_bytes();
        let resp = match read_body(session, limit, self.gateway.body_read_timeout()).await {
            Ok(body) => {
                let req = to_request(session, body);
                self.gateway.handle(req).await
            }
            Err(early) => {
                // The rest of the body is unread: do not reuse the connection.
                session.set_keepalive(None);
                early
            }
        };
        write(session, resp).await?;
        Ok(true)
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
            let resp = match self.gateway.reload_from_source() {
                Ok(g) => HttpResponse::json(
                    200,
                    &serde_json::json!({"status": "reloaded", "config_generation": g}),
                ),
                Err(e) => HttpResponse::json(
                    422,
                    &serde_json::json!({"status": "rejected", "error": e, "config_generation": self.gateway.runtime().generation}),
                ),
            };
            write(session, resp).await?;
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
            "/readyz" => HttpResponse::json(
                200,
                &serde_json::json!({
                    "status": "ready",
                    "config_generation": rt.generation,
                    "tenants": rt.endpoints.len(),
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
