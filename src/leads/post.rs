//! One HTTP POST of a lead document (ADF or JSON) and the rule that turns its outcome into
//! a [`SinkError`]: which answers are worth retrying and which dead-letter the lead.

use super::SinkError;
use crate::config::Secret;
use std::time::Duration;

/// Where an HTTP sink delivers: the URL, the `Authorization` value, the time allowed and the
/// outbound client. Its `Debug` shows none of them (the URL's query may hold a token).
pub struct HttpTarget {
    pub url: String,
    pub authorization: Option<Secret>,
    pub timeout: Duration,
    pub client: reqwest::Client,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget").finish_non_exhaustive()
    }
}

impl HttpTarget {
    /// [`post`] to this target.
    pub async fn post(
        &self,
        content_type: &'static str,
        lead_id: &str,
        body: Vec<u8>,
    ) -> Result<(), SinkError> {
        post(
            &self.client,
            &self.url,
            content_type,
            self.authorization.as_ref(),
            lead_id,
            body,
            self.timeout,
        )
        .await
    }
}

/// Posts `body` to `url` and classifies the outcome. The lead id travels in
/// `Idempotency-Key` so a receiver can drop a repeat after a crash.
///
/// 2xx is delivered. 408, 425, 429 and 5xx are transient, as are connection
/// errors and timeouts; any other status (3xx: redirects are not followed,
/// other 4xx) is permanent. Error texts name the status or the transport
/// failure only, never the response body or a header value.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    content_type: &'static str,
    authorization: Option<&Secret>,
    lead_id: &str,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), SinkError> {
    let mut req = client
        .post(url)
        .timeout(timeout)
        .header(http::header::CONTENT_TYPE, content_type)
        .header("Idempotency-Key", lead_id)
        .body(body);
    if let Some(a) = authorization {
        req = req.header(http::header::AUTHORIZATION, a.expose());
    }
    let resp = req.send().await.map_err(|e| {
        // reqwest's Display includes the URL, which may hold a token in its
        // query: say only what kind of failure it was.
        let what = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "connection failed"
        } else if e.is_builder() {
            "request could not be built"
        } else {
            "transport error"
        };
        SinkError::Transient(what.into())
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let code = status.as_u16();
    let text = format!("HTTP {code}");
    if matches!(code, 408 | 425 | 429) || status.is_server_error() {
        Err(SinkError::Transient(text))
    } else {
        Err(SinkError::Permanent(text))
    }
}
