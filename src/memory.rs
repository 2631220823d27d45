//! Giving freed memory back to the system after a burst of transient allocations: a full reload
//! parses a config as large as its tenant list and drops it, on a thread that then sleeps.
//!
//! The allocator's own purge runs only on the thread that freed the memory, the next time that
//! thread allocates; a reload thread that goes idle kept what the reload freed (mimalloc, 2,000
//! tenants: RSS 84 MB ready, 157 MB after one reload). The binary installs its allocator's
//! "collect now" in the platform's [`Release`] (`mi_collect(true)`), and a reload calls it when
//! it is done.

use std::sync::OnceLock;

/// The allocator's "return what is free now", once installed (one per process, in its
/// `Platform`).
#[derive(Debug, Default)]
pub struct Release(OnceLock<fn()>);

impl Release {
    /// Install the process allocator's "return what is free now" (once; later calls are
    /// ignored).
    pub fn install(&self, release: fn()) {
        let _ = self.0.set(release);
    }

    /// Return freed memory to the system now, when an allocator hook is installed (tests and
    /// other embedders without one do nothing).
    pub fn release_freed(&self) {
        if let Some(release) = self.0.get() {
            release();
        }
    }
}
