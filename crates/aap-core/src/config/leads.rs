//! Lead delivery settings of a dealer (embedded) tenant: the sinks a lead is sent to
//! (`[[tenants.backend.sinks]]`) and the durable outbox that retries them (`[tenants.backend.outbox]`).

use super::Secret;
use serde::Deserialize;
use std::path::PathBuf;

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
    /// The `Content-Type` of the POST.
    #[serde(default)]
    pub content_type: AdfContentType,
    /// A PEM bundle trusted besides the system roots (a private CA in front of the CRM).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Set when the gateway delivers as a lead network: the ADF `<provider>`.
    #[serde(default)]
    pub network: Option<AdfNetworkConfig>,
}

/// The media types CRMs accept ADF under. A closed list, so the header
/// value is known to be valid when the config loads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum AdfContentType {
    #[default]
    #[serde(rename = "application/xml")]
    ApplicationXml,
    #[serde(rename = "text/xml")]
    TextXml,
    /// The media type the ADF community suggests (not IETF-registered).
    #[serde(rename = "application/x-adf+xml")]
    ApplicationAdfXml,
}

impl AdfContentType {
    pub fn as_str(self) -> &'static str {
        match self {
            AdfContentType::ApplicationXml => "application/xml",
            AdfContentType::TextXml => "text/xml",
            AdfContentType::ApplicationAdfXml => "application/x-adf+xml",
        }
    }
}

/// The lead network the gateway delivers for: its brand is the ADF
/// `<provider>` name and the buyer agent becomes `<provider><service>`.
/// Without it the buyer agent (`source_agent`) is the provider (direct delivery).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdfNetworkConfig {
    pub name: String,
    #[serde(default)]
    pub url: Option<String>,
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
    /// The sender mailbox: `leads@dealer.example` or `Gateway <leads@dealer.example>`.
    pub from: String,
    /// The CRM's lead inbox(es); at least one.
    pub to: Vec<String>,
    #[serde(default = "default_sink_timeout")]
    pub timeout_ms: u64,
    /// A PEM bundle trusted besides the system roots for STARTTLS/TLS.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Set when the gateway delivers as a lead network (see [`AdfNetworkConfig`]).
    #[serde(default)]
    pub network: Option<AdfNetworkConfig>,
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
