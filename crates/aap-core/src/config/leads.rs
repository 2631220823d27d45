//! Lead delivery settings of a dealer (embedded) tenant: the sinks a lead is sent to
//! (`[[tenants.backend.sinks]]`) and the durable outbox that retries them (`[tenants.backend.outbox]`).

use super::Secret;
use serde::Deserialize;
use std::path::PathBuf;

/// One delivery target for accepted leads. A tenant may list several; each
/// lead is delivered to every sink, and each sink's delivery is retried on its own.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdfNetworkConfig {
    pub name: String,
    #[serde(default)]
    pub url: Option<String>,
}

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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

/// `[tenants.backend.outbox]`: how the durable outbox retries each sink's
/// delivery of a lead before it becomes a dead letter.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxConfig {
    /// Attempts per sink before the lead is dead-lettered for that sink (1..=1000).
    pub max_attempts: u32,
    /// Hours after acceptance (or a redrive) after which a failing delivery
    /// is dead-lettered whatever the attempt count (1..=720).
    pub max_age_hours: u64,
    /// Delay before the first retry, in milliseconds (10..=3_600_000); each
    /// later retry doubles it, up to `max_backoff_ms`, with jitter.
    pub initial_backoff_ms: u64,
    /// Longest delay between two attempts (>= initial_backoff_ms, <= 86_400_000).
    pub max_backoff_ms: u64,
    /// Deliver each sink's leads one at a time in acceptance order: a lead
    /// waits until the one before it was delivered or dead-lettered. Off:
    /// up to `concurrency` deliveries per sink at once, in any order.
    pub ordered: bool,
    /// Deliveries in flight per sink when `ordered = false` (1..=64).
    pub concurrency: usize,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            max_attempts: 12,
            max_age_hours: 72,
            initial_backoff_ms: 1_000,
            max_backoff_ms: 600_000,
            ordered: false,
            concurrency: 4,
        }
    }
}

impl OutboxConfig {
    /// `<at>.<key>: <problem>` for the first out-of-range value.
    pub fn validate(&self, at: &str) -> Result<(), String> {
        if !(1..=1000).contains(&self.max_attempts) {
            return Err(format!("{at}.max_attempts: must be between 1 and 1000"));
        }
        if !(1..=720).contains(&self.max_age_hours) {
            return Err(format!("{at}.max_age_hours: must be between 1 and 720"));
        }
        if !(10..=3_600_000).contains(&self.initial_backoff_ms) {
            return Err(format!(
                "{at}.initial_backoff_ms: must be between 10 and 3600000"
            ));
        }
        if self.max_backoff_ms < self.initial_backoff_ms || self.max_backoff_ms > 86_400_000 {
            return Err(format!(
                "{at}.max_backoff_ms: must be between initial_backoff_ms and 86400000"
            ));
        }
        if !(1..=64).contains(&self.concurrency) {
            return Err(format!("{at}.concurrency: must be between 1 and 64"));
        }
        Ok(())
    }
}

/// `<at>.<key>: <problem>` for the first problem in a tenant's sinks: a
/// name that is empty, not `[a-z0-9_-]{1,64}` or used twice, a webhook URL
/// that is not `http(s)://`, a timeout outside 100..=300000 ms.
pub fn validate_sinks(sinks: &[LeadSinkConfig], at: &str) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for (i, s) in sinks.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let name = s.name();
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "{here}.name: 1 to 64 of lowercase letters, digits, '-' and '_'"
            ));
        }
        if !seen.insert(name) {
            return Err(format!(
                "{here}.name: {name:?} is used by another sink of this tenant"
            ));
        }
        // A sink URL that can never be requested is refused here, not retried for days.
        // The URL is never quoted: its query may hold a token.
        let url = match s {
            LeadSinkConfig::Webhook(w) => Some(&w.url),
            LeadSinkConfig::AdfHttp(a) => Some(&a.url),
            LeadSinkConfig::AdfEmail(_) => None,
        };
        if let Some(Err(e)) = url.map(|u| crate::host::http_url(u)) {
            return Err(format!("{here}.url: the URL cannot be used: {e}"));
        }
        if let LeadSinkConfig::Webhook(w) = s {
            if !(100..=300_000).contains(&w.timeout_ms) {
                return Err(format!("{here}.timeout_ms: must be between 100 and 300000"));
            }
        }
    }
    Ok(())
}
