//! The outbound HTTP(S) client for the dealer's own systems (inventory feeds, lead sinks):
//! reqwest on rustls with the ring provider, trusting the system roots and an optional CA file.

use std::path::Path;
use std::time::Duration;

/// Why a client could not be built (a config problem: reported by `check` and at start).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("CA file {path}: {problem}")]
    CaFile { path: String, problem: String },
    #[error("TLS client setup: {0}")]
    Tls(String),
}

/// A client for one feed or sink. `extra_ca` adds a PEM bundle to the system
/// roots (a private CA in front of a CRM). Redirects are not followed: a
/// feed or a CRM intake that moves is a configuration change, and a
/// redirect must never carry a lead or a credential to another host.
///
/// ```no_run
/// let client = aap_gateway::outbound::client(None, std::time::Duration::from_secs(5))?;
/// # Ok::<(), aap_gateway::outbound::ClientError>(())
/// ```
pub fn client(
    extra_ca: Option<&Path>,
    connect_timeout: Duration,
) -> Result<reqwest::Client, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    // A missing or unreadable system store leaves only the extra CA; the
    // errors are per certificate and do not stop the others from loading.
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = extra_ca {
        let shown = path.display().to_string();
        let pem = std::fs::read(path).map_err(|e| ClientError::CaFile {
            path: shown.clone(),
            problem: e.to_string(),
        })?;
        let mut added = 0;
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
            let cert: rustls::pki_types::CertificateDer<'static> =
                cert.map_err(|e| ClientError::CaFile {
                    path: shown.clone(),
                    problem: e.to_string(),
                })?;
            roots.add(cert).map_err(|e| ClientError::CaFile {
                path: shown.clone(),
                problem: e.to_string(),
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(ClientError::CaFile {
                path: shown,
                problem: "no PEM certificate in the file".into(),
            });
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ClientError::Tls(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("aap-gateway/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ClientError::Tls(e.to_string()))
}
