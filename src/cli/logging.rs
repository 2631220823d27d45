//! The process's logging: one bounded, lossy queue to a stderr writer thread for every line
//! (access lines included), the JSON subscriber and its filter behind the log-level handle
//! (`admin::log_level::LogLevel`, which the admin listener holds).

/// Log lines held for stderr; more are dropped (and counted in
/// `aap_log_lines_dropped_total`) rather than making a worker wait.
/// `AAP_LOG_QUEUE_LINES` overrides it (1 to 1,000,000).
const LOG_QUEUE_LINES: usize = 65_536;

fn log_queue_lines() -> usize {
    std::env::var("AAP_LOG_QUEUE_LINES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=1_000_000).contains(n))
        .unwrap_or(LOG_QUEUE_LINES)
}

/// Every log line, access lines included, goes through one bounded queue to
/// a writer thread (tracing-appender's lossy non-blocking writer, which counts
/// what it drops), so a slow or blocked stderr never holds a worker. The
/// guard flushes the queue when dropped.
pub fn init_logging(
    log_level: &crate::admin::log_level::LogLevel,
) -> tracing_appender::non_blocking::WorkerGuard {
    use std::io::Write as _;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(log_queue_lines())
        .thread_name("aap-log")
        .finish(std::io::stderr());
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
    log_level.install(initial, move |spec| {
        let f = tracing_subscriber::EnvFilter::try_new(spec).map_err(|e| e.to_string())?;
        handle.reload(f).map_err(|e| e.to_string())
    });
    builder.init();
    guard
}
