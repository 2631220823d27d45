//! TLS certificate that can be replaced while the gateway runs.
//!
//! The rustls listener is given a [`ResolvesServerCert`] that hands out the
//! certificate currently held in an `ArcSwap`, so a new pair takes effect on
//! the next handshake; established connections keep the session they made.
//! The pair is re-read when both files have changed and stayed unchanged for
//! one more poll (so a cert written a moment before its key is never loaded
//! alone), on SIGHUP and on `POST /reload`. A pair that does not load (bad
//! PEM, no key, key not matching the certificate) is refused: the previous
//! certificate keeps serving, an error is logged and
//! `aap_tls_reloads_total{result="rejected"}` counts it.

use arc_swap::ArcSwap;
use pingora::listeners::tls::TlsSettings;
use pingora::protocols::ALPN;
use pingora::tls::sign::CertifiedKey;
use pingora::tls::{ClientHello, CryptoProvider, ResolvesServerCert};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::file_stamp::{stamp, Stamp};

/// Host name (lowercase, no trailing dot) → the certificate a tenant
/// configured for it (`[tenants.tls]`); the gateway replaces the map with
/// each generation.
pub type SniNames = Arc<ArcSwap<imbl::HashMap<String, Arc<CertifiedKey>>>>;

/// The certificate/key pair served on the TLS listener, and the tenants'
/// certificates by SNI host name.
pub struct CertStore {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: ArcSwap<CertifiedKey>,
    names: SniNames,
    /// (stamps of the pair now loaded or last refused, stamps seen at the last poll)
    seen: Mutex<((Stamp, Stamp), (Stamp, Stamp))>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

/// Read and check a PEM certificate chain and private key.
pub fn load_pair(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, String> {
    pingora::tls::install_default_crypto_provider();
    let provider = CryptoProvider::get_default().ok_or("no rustls crypto provider")?;
    let (certs, key) = pingora::tls::load_certs_and_key_files(
        &cert_file.display().to_string(),
        &key_file.display().to_string(),
    )
    .map_err(|e| {
        format!(
            "cannot read {} / {}: {e}",
            cert_file.display(),
            key_file.display()
        )
    })?
    .ok_or_else(|| {
        format!(
            "{} has no certificate or {} has no private key",
            cert_file.display(),
            key_file.display()
        )
    })?;
    CertifiedKey::from_der(certs, key, provider)
        .map_err(|e| format!("certificate and key do not form a usable pair: {e}"))
}

impl CertStore {
    /// Load the pair once; an error here stops the start.
    pub fn open(cert_file: PathBuf, key_file: PathBuf) -> Result<Arc<CertStore>, String> {
        let stamps = (stamp(&cert_file), stamp(&key_file));
        let first = load_pair(&cert_file, &key_file)?;
        let m = &crate::metrics::METRICS.tls_reloads;
        m.with_label_values(&["ok"]).inc_by(0);
        m.with_label_values(&["rejected"]).inc_by(0);
        Ok(Arc::new(CertStore {
            cert_file,
            key_file,
            current: ArcSwap::from_pointee(first),
            names: SniNames::default(),
            seen: Mutex::new((stamps, stamps)),
        }))
    }

    /// The per-name certificates this store serves by SNI (the gateway
    /// fills them from its tenants).
    pub fn names(&self) -> SniNames {
        self.names.clone()
    }

    /// Re-read the files now (`trigger`: `sighup`, `admin`). On error the
    /// current certificate stays.
    pub fn reload(&self, trigger: &'static str) -> Result<(), String> {
        let stamps = (stamp(&self.cert_file), stamp(&self.key_file));
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            *seen = (stamps, stamps);
        }
        self.swap(trigger)
    }

    fn swap(&self, trigger: &'static str) -> Result<(), String> {
        let m = &crate::metrics::METRICS.tls_reloads;
        match load_pair(&self.cert_file, &self.key_file) {
            Ok(k) => {
                self.current.store(Arc::new(k));
                m.with_label_values(&["ok"]).inc();
                tracing::info!(cert_file = %self.cert_file.display(), trigger, "TLS certificate reloaded");
                Ok(())
            }
            Err(e) => {
                m.with_label_values(&["rejected"]).inc();
                tracing::error!(error = %e, trigger, "TLS certificate reload rejected; the previous certificate keeps serving");
                Err(e)
            }
        }
    }

    /// One poll: reload when the files differ from the loaded (or last
    /// refused) version and have not changed since the previous poll.
    pub fn poll(&self) {
        let now = (stamp(&self.cert_file), stamp(&self.key_file));
        let due = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let (loaded, last) = *seen;
            seen.1 = now;
            if now != loaded && now == last {
                seen.0 = now;
                true
            } else {
                false
            }
        };
        if due {
            let _ = self.swap("file_change");
        }
    }

    /// Poll every `interval` on a thread of its own (0: never).
    pub fn watch(self: &Arc<Self>, interval: Duration) {
        if interval.is_zero() {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("tls-watch".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                me.poll();
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "TLS file watch unavailable; use SIGHUP or POST /reload");
        }
    }
}

impl ResolvesServerCert for CertStore {
    /// The certificate of the tenant whose host the client names by SNI;
    /// no SNI, or a name no tenant configured: the server certificate.
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = hello.server_name() {
            let names = self.names.load();
            if !names.is_empty() {
                let key = aap_core::host::route_key(name);
                if let Some(k) = key.and_then(|n| names.get(&n)) {
                    return Some(k.clone());
                }
            }
        }
        Some(self.current.load_full())
    }
}

/// The protocols the TLS listener offers by ALPN: `h2`, then `http/1.1`. A
/// client that picks `h2` is served by `ingress::h2`; one that offers no ALPN
/// (or only `http/1.1`) gets HTTP/1.1 as before.
pub fn offer_http2(settings: &mut TlsSettings) {
    settings.set_alpn(ALPN::H2H1);
}
