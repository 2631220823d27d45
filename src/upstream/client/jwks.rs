//! A tenant's `auth.jwks_url`, fetched over the pooled upstream client: the
//! adapter for the core's `aap_core::auth::JwksFetcher` port, nothing more.

use super::{Client, Request};
use bytes::Bytes;

/// A tenant's `auth.jwks_url`, fetched through the same pooled client the
/// backends use (the port `aap_core::auth::JwksFetcher`).
pub struct JwksOverClient {
    pub client: std::sync::Arc<Client>,
    pub path: String,
}

#[async_trait::async_trait]
impl aap_core::auth::JwksFetcher for JwksOverClient {
    async fn fetch(&self) -> Result<Bytes, String> {
        let req = Request {
            extra_headers: &[],
            method: "GET",
            path: &self.path,
            headers: vec![("accept", "application/json".into())],
            body: Bytes::new(),
            retryable: true,
            trace: None,
        };
        match self.client.send(&req, None).await {
            Ok(r) if r.status == 200 => Ok(r.body),
            Ok(r) => Err(format!("HTTP {}", r.status)),
            Err(e) => Err(e.to_string()),
        }
    }
}
