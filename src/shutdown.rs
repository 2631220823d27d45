//! The shutdown sequence: the "draining" flag `/readyz` and the ingress read,
//! and the signal watch that keeps the listeners serving for the drain delay.
//!
//! On SIGTERM the process turns draining at once (`/readyz` answers 503, the
//! ingress answers with `Connection: close`) and keeps accepting for
//! `server.shutdown_drain_secs`, so a load balancer sees the 503 and stops
//! sending before anything is refused. Only then is Pingora told to shut
//! down: its listeners close, requests in flight get `server.shutdown_grace_secs`
//! (Pingora's grace period), and the runtimes stop. The old process of an
//! upgrade (SIGQUIT) turns draining at once as well; Pingora hands its
//! sockets over and keeps it accepting for its own 5 s first.

use async_trait::async_trait;
use pingora::server::{ShutdownSignal, ShutdownSignalWatch};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};

static DRAINING: AtomicBool = AtomicBool::new(false);

/// True once shutdown (or the hand-over of an upgrade) has started.
pub fn draining() -> bool {
    DRAINING.load(Ordering::Relaxed)
}

fn start_draining() {
    DRAINING.store(true, Ordering::Relaxed);
}

/// Pingora's shutdown signal watch with a drain delay before a graceful
/// terminate (Pingora's own watch starts closing the listeners at once).
pub struct DrainingSignals {
    pub drain: Duration,
}

/// A signal stream, or one that never fires when it cannot be installed
/// (logged; the other signals still work).
fn listen(kind: SignalKind, name: &str) -> Option<Signal> {
    match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(signal = name, error = %e, "cannot listen for the signal");
            None
        }
    }
}

async fn next(s: &mut Option<Signal>) {
    match s {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await
            }
        }
        None => std::future::pending::<()>().await,
    }
}

#[async_trait]
impl ShutdownSignalWatch for DrainingSignals {
    async fn recv(&self) -> ShutdownSignal {
        let mut quit = listen(SignalKind::quit(), "SIGQUIT");
        let mut term = listen(SignalKind::terminate(), "SIGTERM");
        let mut int = listen(SignalKind::interrupt(), "SIGINT");
        tokio::select! {
            _ = next(&mut quit) => {
                start_draining();
                tracing::info!("SIGQUIT: upgrade; /readyz answers 503 from now on");
                ShutdownSignal::GracefulUpgrade
            }
            _ = next(&mut int) => ShutdownSignal::FastShutdown,
            _ = next(&mut term) => {
                start_draining();
                tracing::info!(
                    drain_secs = self.drain.as_secs(),
                    "SIGTERM: draining; /readyz answers 503, the listeners keep serving until the drain delay ends"
                );
                // A second SIGTERM ends the drain early; SIGINT stops at once.
                tokio::select! {
                    _ = tokio::time::sleep(self.drain) => {}
                    _ = next(&mut term) => {
                        tracing::info!("second SIGTERM: drain delay cut short");
                    }
                    _ = next(&mut int) => return ShutdownSignal::FastShutdown,
                }
                tracing::info!("drain delay over; closing the listeners");
                ShutdownSignal::GracefulTerminate
            }
        }
    }
}
