//! The ADF/XML e-mail sink: each lead mailed to the CRM's lead inbox over SMTP (lettre on tokio
//! with rustls on ring), STARTTLS or TLS or plain, and the SMTP outcome as a [`SinkError`].

use super::adf_http::adf_document;
use super::{Lead, LeadSink, SinkError};
use crate::config::{AdfEmailSinkConfig, AdfNetworkConfig, SmtpSecurity};
use async_trait::async_trait;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::time::Duration;

/// Why an e-mail sink could not be built from its config. No variant
/// carries the password.
#[derive(Debug, thiserror::Error)]
pub enum SmtpSinkError {
    #[error("sink {name}: {key} is not a valid e-mail address")]
    Address { name: String, key: String },
    #[error("sink {name}: CA file {path}: {problem}")]
    CaFile {
        name: String,
        path: String,
        problem: String,
    },
    #[error("sink {name}: TLS setup: {problem}")]
    Tls { name: String, problem: String },
    #[error("sink {name}: password without username (or username without password)")]
    Credentials { name: String },
}

/// ADF/XML by e-mail (`kind = "adf_email"`): one message per lead, the ADF
/// document as its `text/plain; charset=utf-8` body (what CRM lead inboxes
/// parse), the subject `ADF lead <lead id>` and the Message-ID
/// `<lead id@from-domain>` (no customer data in the headers). A new SMTP
/// connection per delivery: leads are few and the outbox retries.
pub struct SmtpSink {
    name: String,
    host: String,
    port: u16,
    from: Mailbox,
    to: Vec<Mailbox>,
    timeout: Duration,
    network: Option<AdfNetworkConfig>,
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl std::fmt::Debug for SmtpSink {
    // The transport holds the credentials: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpSink")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl SmtpSink {
    /// A sink for one `[[tenants.backend.sinks]]` entry. `ca_file` is used as
    /// given (resolve a relative path with `Config::resolve` first). No
    /// connection is made here.
    pub fn new(cfg: &AdfEmailSinkConfig) -> Result<SmtpSink, SmtpSinkError> {
        let name = cfg.name.clone();
        let mailbox = |key: String, v: &str| -> Result<Mailbox, SmtpSinkError> {
            v.trim()
                .parse::<Mailbox>()
                .map_err(|_| SmtpSinkError::Address {
                    name: name.clone(),
                    key,
                })
        };
        let from = mailbox("from".into(), &cfg.from)?;
        let to = cfg
            .to
            .iter()
            .enumerate()
            .map(|(i, t)| mailbox(format!("to[{i}]"), t))
            .collect::<Result<Vec<_>, _>>()?;
        if to.is_empty() {
            return Err(SmtpSinkError::Address {
                name,
                key: "to".into(),
            });
        }
        let timeout = Duration::from_millis(cfg.timeout_ms.max(1));
        let mut builder =
            AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(cfg.host.as_str())
                .port(cfg.port)
                .timeout(Some(timeout))
                .hello_name(ClientId::Domain(from.email.domain().to_string()));
        builder = match cfg.security {
            SmtpSecurity::Starttls => builder.tls(Tls::Required(tls_parameters(cfg)?)),
            SmtpSecurity::Tls => builder.tls(Tls::Wrapper(tls_parameters(cfg)?)),
            SmtpSecurity::None => builder.tls(Tls::None),
        };
        match (&cfg.username, &cfg.password) {
            (Some(u), Some(p)) => {
                builder = builder.credentials(Credentials::new(u.clone(), p.expose().to_string()));
            }
            (None, None) => {}
            _ => return Err(SmtpSinkError::Credentials { name }),
        }
        Ok(SmtpSink {
            name,
            host: cfg.host.clone(),
            port: cfg.port,
            from,
            to,
            timeout,
            network: cfg.network.clone(),
            transport: builder.build(),
        })
    }

    fn message(&self, lead: &Lead) -> Result<Message, SinkError> {
        let body = adf_document(lead, self.network.as_ref())?;
        let body = String::from_utf8(body)
            .map_err(|_| SinkError::Permanent("ADF document is not UTF-8".into()))?;
        // The lead id is the gateway's own (`lead_…`); keep only characters
        // a Message-ID's local part may hold, whatever it becomes.
        let local: String = lead
            .lead_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .collect();
        let mut b = Message::builder()
            .from(self.from.clone())
            .subject(format!("ADF lead {}", lead.lead_id))
            .message_id(Some(format!("<{local}@{}>", self.from.email.domain())))
            .header(ContentType::TEXT_PLAIN);
        for t in &self.to {
            b = b.to(t.clone());
        }
        b.body(body)
            .map_err(|_| SinkError::Permanent("message could not be built".into()))
    }
}

fn tls_parameters(cfg: &AdfEmailSinkConfig) -> Result<TlsParameters, SmtpSinkError> {
    let mut b = TlsParameters::builder(cfg.host.clone());
    if let Some(path) = &cfg.ca_file {
        let shown = path.display().to_string();
        let pem = std::fs::read(path).map_err(|e| SmtpSinkError::CaFile {
            name: cfg.name.clone(),
            path: shown.clone(),
            problem: e.to_string(),
        })?;
        let cert = Certificate::from_pem(&pem).map_err(|e| SmtpSinkError::CaFile {
            name: cfg.name.clone(),
            path: shown,
            problem: e.to_string(),
        })?;
        b = b.add_root_certificate(cert);
    }
    b.build_rustls().map_err(|e| SmtpSinkError::Tls {
        name: cfg.name.clone(),
        problem: e.to_string(),
    })
}

/// 5xx replies are permanent (the outbox dead-letters the lead: a rejected
/// recipient, a refused login, a message the server will not take); 4xx
/// replies, connection, timeout and TLS failures are transient. A missing
/// STARTTLS or authentication mechanism (a server or config problem the
/// operator can fix) is transient too, so the lead waits for the fix. The
/// text names the reply code or the kind of failure, never the server's
/// reply text (it may quote addresses).
pub fn classify(e: &lettre::transport::smtp::Error) -> SinkError {
    if e.is_permanent() {
        let code = e.status().map(|c| c.to_string()).unwrap_or_default();
        SinkError::Permanent(format!("SMTP {code}"))
    } else if e.is_transient() {
        let code = e.status().map(|c| c.to_string()).unwrap_or_default();
        SinkError::Transient(format!("SMTP {code}"))
    } else if e.is_timeout() {
        SinkError::Transient("SMTP timed out".into())
    } else if e.is_tls() {
        SinkError::Transient("SMTP TLS failed".into())
    } else if e.is_client() {
        SinkError::Transient("SMTP server lacks a required extension (STARTTLS or AUTH)".into())
    } else if e.is_response() {
        SinkError::Transient("SMTP reply could not be read".into())
    } else {
        SinkError::Transient("SMTP connection failed".into())
    }
}

#[async_trait]
impl LeadSink for SmtpSink {
    fn name(&self) -> &str {
        &self.name
    }

    async fn deliver(&self, lead: &Lead) -> Result<(), SinkError> {
        let msg = self.message(lead)?;
        // lettre's timeout bounds each read and write; this bounds the whole
        // exchange (connect, TLS, AUTH, DATA) so a trickling server cannot
        // hold a delivery worker.
        let whole = self.timeout.saturating_mul(4);
        match tokio::time::timeout(whole, self.transport.send(msg)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(classify(&e)),
            Err(_) => Err(SinkError::Transient("SMTP timed out".into())),
        }
    }
}
