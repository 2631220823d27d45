//! The process's one stderr writer: every log line (access lines included)
//! is appended to a bounded in-memory batch that one thread (`aap-log`)
//! writes out, many lines per `write`.
//!
//! It replaces tracing-appender's non-blocking writer, which queued each line
//! as its own heap copy on a channel whose receiving thread woke (and spun
//! with `sched_yield` before sleeping) for nearly every line and wrote each
//! line with a syscall of its own: at saturation on the full leg of
//! `benches/load.sh` that was about 0.35 futex, `sched_yield` and write calls
//! per request across the two threads. Here a line is copied once into the
//! batch under a short lock; the writer is woken only when it is waiting
//! for lines, then lets [`LINGER`] pass so that one write carries what
//! arrived meanwhile.
//!
//! What the queue promised is kept: a slow or blocked stderr never holds a
//! worker (lines beyond the bound are dropped and counted); lines are never
//! cut or interleaved (one thread writes them, whole); the guard writes
//! what is queued when it is dropped.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long the writer lets lines gather after it is woken: it bounds the
/// writer's wake-ups to this rate under load and delays a line by at most
/// this much.
const LINGER: Duration = Duration::from_millis(5);

struct Batch {
    lines: Vec<u8>,
    count: usize,
    /// The writer sleeps until lines arrive.
    waiting: bool,
    /// The guard was dropped: write what is here and stop.
    closing: bool,
}

struct Shared {
    batch: Mutex<Batch>,
    wake: Condvar,
    limit: usize,
    dropped: AtomicU64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where log lines go: cheap to clone, one whole line per write.
#[derive(Clone)]
pub struct LogSink {
    shared: Arc<Shared>,
}

/// Stops the writer when dropped, once every queued line is written.
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LogSink {
    /// A sink holding at most `limit` lines not yet written, and its writer
    /// thread writing them to `out`.
    pub fn start(limit: usize, out: impl Write + Send + 'static) -> (LogSink, LogGuard) {
        let shared = Arc::new(Shared {
            batch: Mutex::new(Batch {
                lines: Vec::new(),
                count: 0,
                waiting: false,
                closing: false,
            }),
            wake: Condvar::new(),
            limit,
            dropped: AtomicU64::new(0),
        });
        let writer = shared.clone();
        let thread = std::thread::Builder::new()
            .name("aap-log".into())
            .spawn(move || write_batches(&writer, out))
            .ok();
        (
            LogSink {
                shared: shared.clone(),
            },
            LogGuard { shared, thread },
        )
    }

    /// Queue one whole line (dropped and counted when the queue is full).
    pub fn line(&self, line: &[u8]) {
        let s = &self.shared;
        let mut b = s.lock();
        if b.count >= s.limit {
            drop(b);
            s.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        b.lines.extend_from_slice(line);
        b.count += 1;
        let wake = std::mem::take(&mut b.waiting);
        drop(b);
        if wake {
            s.wake.notify_one();
        }
    }

    /// Lines dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

fn write_batches(s: &Shared, mut out: impl Write) {
    let mut spare = Vec::new();
    loop {
        let mut b = s.lock();
        while b.lines.is_empty() && !b.closing {
            b.waiting = true;
            b = s.wake.wait(b).unwrap_or_else(|e| e.into_inner());
        }
        if !b.closing {
            // Woken by a first line: let more join it in this write.
            drop(b);
            std::thread::sleep(LINGER);
            b = s.lock();
        }
        let closing = b.closing;
        std::mem::swap(&mut b.lines, &mut spare);
        b.count = 0;
        drop(b);
        // Line by line into `out` (a buffered stderr hands them on in
        // writes of whole lines). A failed stderr must not stop the
        // gateway; its lines are lost.
        // (Line ends found with `memchr`: a byte-by-byte split cost about
        // 4,000 instructions per access line.)
        let mut start = 0;
        let written = memchr::memchr_iter(b'\n', &spare)
            .map(|end| end + 1)
            .chain(
                spare
                    .last()
                    .is_some_and(|&b| b != b'\n')
                    .then_some(spare.len()),
            )
            .try_for_each(|end| {
                let line = spare.get(start..end).unwrap_or_default();
                start = end;
                out.write_all(line)
            });
        let _ = written.and_then(|()| out.flush());
        spare.clear();
        if closing && s.lock().lines.is_empty() {
            return;
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One write of the tracing formatter is one whole event line.
impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = LogSink;

    fn make_writer(&'a self) -> LogSink {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What was written, and how many writes did not end a line.
    #[derive(Clone, Default)]
    struct Out(Arc<Mutex<Vec<u8>>>, Arc<std::sync::atomic::AtomicUsize>);

    impl Write for Out {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if buf.last() != Some(&b'\n') {
                self.1.fetch_add(1, Ordering::Relaxed);
            }
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_is_written_whole_and_the_guard_flushes() {
        let out = Out::default();
        let (sink, guard) = LogSink::start(1000, out.clone());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        sink.line(format!("{{\"t\":{t},\"i\":{i}}}\n").as_bytes());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(guard);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 400);
        for l in lines {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        assert_eq!(sink.dropped(), 0);
        // Each write handed on is whole lines (here: one line each).
        assert_eq!(out.1.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        /// A stderr that blocks until released.
        struct Stuck(Arc<(Mutex<bool>, Condvar)>);
        impl Write for Stuck {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let (m, c) = &*self.0;
                let mut open = m.lock().unwrap();
                while !*open {
                    open = c.wait(open).unwrap();
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (sink, guard) = LogSink::start(4, Stuck(gate.clone()));
        sink.line(b"first\n");
        // The writer takes the first line and blocks on it.
        std::thread::sleep(LINGER * 4);
        for _ in 0..10 {
            sink.line(b"more\n");
        }
        assert_eq!(sink.dropped(), 6);
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        drop(guard);
    }
}
