//! The process's logging: one bounded, lossy queue to a stderr writer thread for every line
//! (access lines included), the JSON subscriber and its filter behind the log-level handle
//! (`admin::log_level::LogLevel`, which the admin listener holds).

/// Log lines held for stderr; more are dropped (and counted in
/// `aap_log_lines_dropped_total`) rather than making a worker wait.
/// `AAP_LOG_QUEUE_LINES` overrides it (1 to 1,000,000).
const LOG_QUEUE_LINES: usize = 65_536;

/// The writer thread's buffer: it writes whole lines into it and hands it to
/// stderr when it is full or when the batch it took is written, so under
/// load many lines go out in one `write` instead of one `write` per line.
/// At most `PIPE_BUF` (4096 bytes on Linux): a write to a pipe that size is
/// atomic, so lines from this thread never interleave with another writer's
/// (a line longer than that is written on its own, as before). Measured with `benches/load.sh`: one
/// write syscall per request went to about 0.1 at saturation.
const LOG_WRITE_BYTES: usize = 4096;

fn log_queue_lines() -> usize {
    std::env::var("AAP_LOG_QUEUE_LINES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=1_000_000).contains(n))
        .unwrap_or(LOG_QUEUE_LINES)
}

/// Every log line, access lines included, goes through one bounded queue to
/// a writer thread ([`crate::log_sink`], which counts what it drops), so a
/// slow or blocked stderr never holds a worker; the thread writes what it
/// finds queued in few writes of whole lines ([`LOG_WRITE_BYTES`]). The
/// guard writes what is queued when dropped.
pub fn init_logging(log_level: &crate::admin::log_level::LogLevel) -> crate::log_sink::LogGuard {
    let (writer, guard) = crate::log_sink::LogSink::start(
        log_queue_lines(),
        std::io::BufWriter::with_capacity(LOG_WRITE_BYTES, std::io::stderr()),
    );
    let dropped = writer.clone();
    crate::metrics::count_log_drops_from(move || dropped.dropped());
    let access = writer.clone();
    // One call per whole line.
    crate::access::write_lines_to(move |line| access.line(line));
    let filter = tracing_subscriber::EnvFilter::try_from_env("AAP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let initial = filter.to_string();
    // The filter sits behind a reload handle: `PUT /admin/log-level` swaps it.
    let builder = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_writer(writer)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    log_level.install(initial, move |spec| {
        let f = tracing_subscriber::EnvFilter::try_new(spec).map_err(|e| e.to_string())?;
        handle.reload(f).map_err(|e| e.to_string())
    });
    builder.init();
    guard
}
