//! Lead delivery settings of a dealer (embedded) tenant: the sinks a lead is sent to
//! (`[[tenants.backend.sinks]]`) and the durable outbox that retries them (`[tenants.backend.outbox]`).

use super::Secret;
use serde::Deserialize;

/// One delivery target for accepted leads. A tenant may list several; each
/// lead is delivered to every sink, and each sink's delivery is retried on its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LeadSinkConfig {
    /// ADF/XML posted to the CRM's HTTP intake.
    AdfHttp(AdfHttpSinkConfig),
    /// ADF/XML mailed to the CRM's lead inbox over SMTP.
    AdfEmail(AdfEmailSinkConfig),
    /// The lead as JSON posted to a webhook.
    Webhook(WebhookSinkConfig),
}

impl LeadSinkConfig {
    /// The sink's name in metrics, logs and the dead-letter list.
    pub fn name(&self) -> &str {
        match self {
            LeadSinkConfig::AdfHttp(c) => &c.name,
            LeadSinkConfig::AdfEmail(c) => &c.name,
            LeadSinkConfig::Webhook(c) => &c.name,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdfHttpSinkConfig {
    /// Unique within the tenant.
    pub name: String,
    /// `http[s]://…` of the CRM's ADF intake.
    pub url: String,
    /// Sent as the `Authorization` header value when set.
    #[serde(default)]
    pub authorization: Option<Secret>,
    #[serde(default = "default_sink_timeout")]
    pub timeout_ms: u64,
}

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS (required, not opportunistic).
    #[default]
    Starttls,
    /// TLS from the first byte (SMTPS, usually port 465).
    Tls,
    /// No TLS: only for a relay on loopback or a trusted network.
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdfEmailSinkConfig {
    pub name: String,
    pub host: String,
    #[serde(default = "default_smtp_port")]
    pub port: u16,
    #[serde(default)]
    pub security: SmtpSecurity,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<Secret>,
    pub from: String,
    pub to: Vec<String>,
    #[serde(default = "default_sink_timeout")]
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSinkConfig {
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub authorization: Option<Secret>,
    #[serde(default = "default_sink_timeout")]
    pub timeout_ms: u64,
}

fn default_sink_timeout() -> u64 {
    10_000
}

fn default_smtp_port() -> u16 {
    587
}
