//! The JSON webhook sink: each lead is POSTed as the [`Lead`] record in JSON, its id in
//! `Idempotency-Key`, through the shared outbound client and [`super::post::post`].

use super::post::HttpTarget;
use super::{Lead, LeadSink, SinkError};
use crate::config::WebhookSinkConfig;
use async_trait::async_trait;
use std::time::Duration;

/// A `[[tenants.backend.sinks]]` entry with `kind = "webhook"`.
#[derive(Debug)]
pub struct WebhookSink {
    name: String,
    target: HttpTarget,
}

impl WebhookSink {
    pub fn new(cfg: &WebhookSinkConfig, client: reqwest::Client) -> WebhookSink {
        WebhookSink {
            name: cfg.name.clone(),
            target: HttpTarget {
                url: cfg.url.clone(),
                authorization: cfg.authorization.clone(),
                timeout: Duration::from_millis(cfg.timeout_ms),
                client,
            },
        }
    }
}

#[async_trait]
impl LeadSink for WebhookSink {
    fn name(&self) -> &str {
        &self.name
    }

    async fn deliver(&self, lead: &Lead) -> Result<(), SinkError> {
        // Serializing a `Lead` (strings and JSON values) cannot fail; a
        // failure would be a bug, and retrying cannot fix it.
        let body = serde_json::to_vec(lead)
            .map_err(|_| SinkError::Permanent("lead could not be encoded as JSON".into()))?;
        self.target
            .post("application/json", &lead.lead_id, body)
            .await
    }
}
