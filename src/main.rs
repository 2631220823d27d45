//! The `aap-gateway` binary: the process's allocator and its give-back hook, the TLS crypto
//! provider, then the command line (`aap_gateway::cli`) parsed and dispatched.

use clap::Parser;
use std::process::ExitCode;

// Every request allocates many small JSON nodes; glibc malloc spent about a
// quarter of the full gateway's CPU under load (perf, benches/load.sh).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc returns freed memory to the system ("purges") only when the
// allocator runs again after `purge_delay` (1 s); after a burst of
// connections on an otherwise idle gateway nothing runs, and the memory
// stayed (10,000 closed connections: 1 GB kept for minutes). A thread that
// lets mimalloc collect once a second returns it. Declared here because the
// `mimalloc` crate exposes `mi_collect` only behind a feature that pulls in
// another crate; the symbol is always in the linked library.
extern "C" {
    fn mi_collect(force: bool);
}

/// The allocator's "collect now", for the platform's `memory::Release`.
fn collect_now() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any
    // thread at any time.
    unsafe { mi_collect(true) }
}

fn return_freed_memory(release: &aap_gateway::memory::Release) {
    // A full reload frees a config-sized burst on a thread that then sleeps.
    release.install(collect_now);
    let spawned = std::thread::Builder::new()
        .name("mi-collect".into())
        .spawn(|| loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            // SAFETY: as in `collect_now`.
            unsafe { mi_collect(false) };
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "freed memory is returned to the system only under load");
    }
}

fn main() -> ExitCode {
    // One TLS crypto provider (ring) for the whole process: Pingora's listeners and every
    // reqwest client (feeds, lead sinks, the OTLP exporter) use the process default.
    pingora::tls::install_default_crypto_provider();
    let cli = aap_gateway::cli::args::Cli::parse();
    aap_gateway::cli::dispatch(cli, return_freed_memory)
}
