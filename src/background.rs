//! Loops that run beside the servers, each on a named thread with a current-thread tokio
//! runtime of its own (SIGHUP reloads, the `tenants_dir` watch), started the same way; and
//! CPU-heavy work that must not take the cores from requests (a full reload), run at a lower
//! priority.

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

/// The nice value background work runs at (requests run at the process's own, usually 0).
pub const BACKGROUND_NICE: i32 = 10;

/// Lower the calling thread's CPU priority to [`BACKGROUND_NICE`] (Linux: the nice value is
/// per thread). Work on it then takes the cores only when request workers leave them: a full
/// reload of 10,000 tenants is half a second of CPU, and at the process's priority it queued a
/// paced client's requests on a 2-core machine (p99 16–18 ms through back-to-back reloads).
/// An unprivileged thread cannot raise its priority again, so only threads that do background
/// work and nothing else call this. A failure is ignored: the work runs at the usual priority.
pub fn lower_priority() {
    // SAFETY: `setpriority` takes no pointers; `who = 0` is the calling thread on Linux.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE);
    }
}

/// Run `work` on a new thread `name` at [`BACKGROUND_NICE`] and wait for it (here, when the
/// thread cannot start). The caller's thread keeps its priority. `None` if `work` panicked.
///
/// ```
/// let sum = aap_gateway::background::run_low_priority("sum", || (1..=10).sum::<u32>());
/// assert_eq!(sum, Some(55));
/// ```
pub fn run_low_priority<T: Send>(name: &str, work: impl FnOnce() -> T + Send) -> Option<T> {
    let mut work = Some(work);
    let ran = std::thread::scope(|s| {
        let work = &mut work;
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn_scoped(s, move || {
                lower_priority();
                work.take().map(|w| w())
            })
            .ok()
            .map(|t| t.join().ok().flatten())
    });
    match (ran, work) {
        // The thread ran (or panicked running) the work.
        (Some(out), _) => out,
        // It could not start: run the work here.
        (None, Some(w)) => Some(w()),
        (None, None) => None,
    }
}
