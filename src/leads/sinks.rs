//! The sink factory: one `[[tenants.backend.sinks]]` entry becomes an `Arc<dyn LeadSink>`.
//! Every sink of a process shares one outbound HTTP client (connection pool, TLS roots).

use super::adf_http::AdfHttpSink;
use super::smtp::SmtpSink;
use super::webhook::WebhookSink;
use super::LeadSink;
use crate::config::LeadSinkConfig;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Why a sink could not be built (a config problem: `check` and start report it).
#[derive(Debug, thiserror::Error)]
pub enum SinkBuildError {
    #[error("sink {name}: {problem}")]
    Client { name: String, problem: String },
}

/// The outbound client every HTTP sink of a process uses (built on first use; its pool is
/// shared). One per process, in its lead outboxes.
#[derive(Debug, Default)]
pub struct SinkClient(OnceLock<Result<reqwest::Client, String>>);

impl SinkClient {
    fn get(&self) -> Result<reqwest::Client, String> {
        self.0
            .get_or_init(|| {
                crate::outbound::client(None, Duration::from_secs(5)).map_err(|e| e.to_string())
            })
            .clone()
    }
}

/// Build the sink a config entry describes.
pub fn build(
    cfg: &LeadSinkConfig,
    client: &SinkClient,
) -> Result<Arc<dyn LeadSink>, SinkBuildError> {
    let name = cfg.name().to_owned();
    match cfg {
        LeadSinkConfig::Webhook(w) => {
            let client = client.get().map_err(|problem| SinkBuildError::Client {
                name: name.clone(),
                problem,
            })?;
            Ok(Arc::new(WebhookSink::new(w, client)))
        }
        LeadSinkConfig::AdfHttp(c) => match AdfHttpSink::new(c) {
            Ok(sink) => Ok(Arc::new(sink)),
            Err(e) => Err(SinkBuildError::Client {
                name,
                problem: e.to_string(),
            }),
        },
        LeadSinkConfig::AdfEmail(c) => match SmtpSink::new(c) {
            Ok(sink) => Ok(Arc::new(sink)),
            Err(e) => Err(SinkBuildError::Client {
                name,
                problem: e.to_string(),
            }),
        },
    }
}

/// The metrics label of a sink kind (a closed set: no operator-chosen names).
pub fn kind_of(cfg: &LeadSinkConfig) -> &'static str {
    match cfg {
        LeadSinkConfig::AdfHttp(_) => "adf_http",
        LeadSinkConfig::AdfEmail(_) => "adf_email",
        LeadSinkConfig::Webhook(_) => "webhook",
    }
}
