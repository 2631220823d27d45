//! Lead delivery to the dealer's own systems: the [`LeadSink`] port every delivery target
//! implements, and the [`Lead`] an accepted `aap_lead_submit` becomes once it is durably recorded.

pub mod adf_http;
pub mod outbox;
pub mod post;
pub mod sinks;
pub mod smtp;
pub mod webhook;

use async_trait::async_trait;

/// The lead record is the store's (its owner); sinks receive it as it is stored.
pub use crate::store::Lead;

/// Why one delivery attempt failed. Neither variant carries customer data:
/// the text names the sink, the status or the transport error only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// Worth retrying: connection refused or reset, timeout, 5xx, 429, SMTP 4xx.
    #[error("transient: {0}")]
    Transient(String),
    /// Retrying the same bytes cannot succeed: 4xx other than 408/429, SMTP 5xx,
    /// a document the receiver rejects. The outbox dead-letters it at once.
    #[error("permanent: {0}")]
    Permanent(String),
}

/// One delivery target: ADF over HTTP, ADF by e-mail, a JSON webhook.
/// `deliver` is called by the outbox, never on the request path; it may be
/// called again for a lead it already delivered (after a crash), with the
/// same `lead_id`.
#[async_trait]
pub trait LeadSink: Send + Sync + std::fmt::Debug {
    /// The sink's configured name (metrics label, logs, dead letters).
    fn name(&self) -> &str;
    async fn deliver(&self, lead: &Lead) -> Result<(), SinkError>;
}
