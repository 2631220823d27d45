//! The process's logging: one bounded, lossy queue to a stderr writer thread for every line
//! (access lines included), the JSON subscriber and its filter behind the log-level handle.

/// Log lines held for stderr; more are dropped (and counted in
/// `aap_log_lines_dropped_total`) rather than making a worker wait.
/// `AAP_LOG_QUEUE_LINES` overrides it (1 to 1,000,000).
const LOG_QUEUE_LINES: usize = 65_536;

/// The writer thread's buffer: it writes whole lines into it and hands it to
/// stderr when it is full or when the queue runs empty (tracing-appender's
/// worker flushes after draining the queue), so under load many lines go
/// out in one `write` instead of one `write` per line, and a line is never
/// held back while the queue is idle. At most `PIPE_BUF` (4096 bytes on
/// Linux): a write to a pipe that size is atomic, so lines from this
/// thread never interleave with another writer's (a line longer than that
/// is written on its own, as before). Measured with `benches/load.sh`: one
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
/// a writer thread (tracing-appender's lossy non-blocking writer, which counts
/// what it drops), so a slow or blocked stderr never holds a worker; the
/// thread batches what it finds queued into few writes ([`LOG_WRITE_BYTES`]).
/// The guard flushes the queue when dropped.
pub fn init_logging() -> tracing_appender::non_blocking::WorkerGuard {
    use std::io::Write as _;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(log_queue_lines())
        .thread_name("aap-log")
        .finish(std::io::BufWriter::with_capacity(
            LOG_WRITE_BYTES,
            std::io::stderr(),
        ));
    let dropped = writer.error_counter();
    crate::metrics::count_log_drops_from(move || dropped.dropped_lines() as u64);
    let access = writer.clone();
    // One call per whole line: the writer queues it as one message.
    crate::access::write_lines_to(move |line| {
        let _ = access.clone().write_all(line);
    });
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
    crate::admin::log_level::install(initial, move |spec| {
        let f = tracing_subscriber::EnvFilter::try_new(spec).map_err(|e| e.to_string())?;
        handle.reload(f).map_err(|e| e.to_string())
    });
    builder.init();
    guard
}
