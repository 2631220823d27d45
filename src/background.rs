//! Loops that run beside the servers, each on a named thread with a current-thread tokio
//! runtime of its own (SIGHUP reloads, the `tenants_dir` watch), started the same way.

use std::future::Future;

/// Run the future `work` makes on a new thread `name` with its own current-thread runtime.
/// When the thread or the runtime cannot start, log `unavailable` (which says what the
/// operator can do instead) with the cause, and return.
pub fn spawn_loop<F, W>(name: &str, unavailable: &'static str, work: W)
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = ()>,
{
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(work()),
                Err(e) => tracing::error!(error = %e, "{unavailable}"),
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "{unavailable}");
    }
}
