//! Memory and concurrency accounting for HTTP/2 streams: the per-connection budget (streams
//! handled at once, bytes held) and the process-wide one under which new streams are refused.
//!
//! Hand-written because the `h2` crate bounds only what it buffers itself (flow-control
//! windows, its send buffer) and counts a stream only while it is open on the wire: a stream
//! the client reset is closed for `h2` at once, while the work it started may still run and
//! its request body and answer stay in the gateway's memory. Here a stream counts from the
//! moment it is accepted until its task ends (answer written, or work cancelled).

use crate::series::H2Metrics;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// What a stream's accepted head costs before its work starts: its task (the future alone
/// is about 2.4 KiB), the `h2` stream state and the parsed head map; its header bytes are
/// added. Counted low (2 KiB), 2,000 waiting streams held ~5 MB more than the budget knew.
pub(super) const HEAD_COST: usize = 5 << 10;

/// The process-wide budget: bytes every HTTP/2 stream holds, against `limits.h2_memory_bytes`
/// (read at each connection's start, so a reload applies to new connections).
#[derive(Debug, Default)]
pub struct ProcessBudget {
    used: AtomicUsize,
    limit: AtomicUsize,
    /// A decaying maximum of the answers made lately (each answer lowers it by an eighth,
    /// or raises it to its own size): a stream's turn reserves at least this much, so that
    /// answers larger than `h2_stream_memory_bytes` are counted before their work runs
    /// rather than pushing the budget over once made.
    recent_answer: AtomicUsize,
    /// The HTTP/2 series (the process's `GatewayMetrics`).
    metrics: Arc<H2Metrics>,
}

impl ProcessBudget {
    /// An empty budget whose streams are counted in `metrics`.
    pub fn new(metrics: Arc<H2Metrics>) -> ProcessBudget {
        ProcessBudget {
            metrics,
            ..ProcessBudget::default()
        }
    }

    /// The HTTP/2 series.
    pub(super) fn metrics(&self) -> &H2Metrics {
        &self.metrics
    }

    /// What a stream's turn reserves: `floor` (`h2_stream_memory_bytes`) or the size of the
    /// answers made lately, whichever is larger.
    fn reservation(&self, floor: usize) -> usize {
        floor.max(self.recent_answer.load(Ordering::Relaxed))
    }

    /// An HTTP/1 answer of `n` bytes was made: it raises the reservation only (the answers
    /// HTTP/2 streams make lower it again), so the first burst of streams after large
    /// HTTP/1 answers is sized right too. A plain load on the common path.
    pub(super) fn saw_answer(&self, n: usize) {
        if n > self.recent_answer.load(Ordering::Relaxed) {
            self.recent_answer.fetch_max(n, Ordering::Relaxed);
        }
    }

    /// An HTTP/2 answer of `n` bytes was made.
    fn note_answer(&self, n: usize) {
        let _ = self
            .recent_answer
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                Some(n.max(r - r / 8))
            });
    }

    pub(super) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    fn try_take(&self, n: usize) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        let ok = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u + n <= limit).then_some(u + n)
            })
            .is_ok();
        if ok {
            self.metrics.memory.add(n as i64);
        }
        ok
    }

    fn force_take(&self, n: usize) {
        self.used.fetch_add(n, Ordering::AcqRel);
        self.metrics.memory.add(n as i64);
    }

    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
        self.metrics.memory.sub(n as i64);
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// What an HTTP/2 connection itself costs beyond its streams (`h2`'s state, its frame
/// buffers, the task): `benches/connections.sh` measures an idle one at about 35 KiB of RSS
/// (docs/performance.md, connection-cost table).
pub(super) const CONNECTION_COST: usize = 36 << 10;

/// A connection's own share of the process-wide budget (its receive window, which a client
/// can fill, and [`CONNECTION_COST`]), given back when the connection ends.
pub(super) struct ConnectionCharge {
    process: Arc<ProcessBudget>,
    bytes: usize,
}

impl ConnectionCharge {
    /// Counted whole even over the limit: the connection is already open, and what it holds
    /// makes the process refuse new streams sooner.
    pub(super) fn take(process: &Arc<ProcessBudget>, bytes: usize) -> ConnectionCharge {
        process.force_take(bytes);
        ConnectionCharge {
            process: process.clone(),
            bytes,
        }
    }
}

impl Drop for ConnectionCharge {
    fn drop(&mut self) {
        self.process.give(self.bytes);
    }
}

/// One connection's budget: streams handled at once (`limits.max_concurrent_streams`) and
/// bytes held (`limits.h2_connection_memory_bytes` less the receive window).
pub(super) struct ConnBudget {
    state: Mutex<ConnState>,
    freed: Notify,
    max_working: usize,
    max_bytes: usize,
    process: Arc<ProcessBudget>,
}

#[derive(Default)]
struct ConnState {
    working: usize,
    bytes: usize,
}

/// Why a stream gets no turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoTurn {
    /// The process-wide budget is spent.
    Memory,
    /// The connection's own budget cannot even hold the stream's head.
    Connection,
}

impl NoTurn {
    pub(super) fn reason(self) -> &'static str {
        match self {
            NoTurn::Memory => "memory",
            NoTurn::Connection => "streams",
        }
    }
}

impl ConnBudget {
    pub(super) fn new(
        max_working: usize,
        max_bytes: usize,
        process: Arc<ProcessBudget>,
    ) -> Arc<ConnBudget> {
        Arc::new(ConnBudget {
            state: Mutex::new(ConnState::default()),
            freed: Notify::new(),
            max_working,
            max_bytes,
            process,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count an accepted stream's head (`n` bytes): refused when either budget is spent.
    pub(super) fn admit(self: &Arc<Self>, n: usize) -> Result<Held, NoTurn> {
        {
            let mut s = self.lock();
            if s.bytes + n > self.max_bytes {
                return Err(NoTurn::Connection);
            }
            if !self.process.try_take(n) {
                return Err(NoTurn::Memory);
            }
            s.bytes += n;
        }
        Ok(Held {
            budget: self.clone(),
            bytes: n,
            working: false,
        })
    }

    fn release(&self, bytes: usize, working: bool) {
        {
            let mut s = self.lock();
            s.bytes -= bytes;
            if working {
                s.working -= 1;
                self.process.metrics.working.dec();
            }
        }
        self.process.give(bytes);
        self.freed.notify_waiters();
    }
}

/// What one stream holds of its connection's and the process's budgets; given back on drop
/// (when the stream's task ends, however it ends).
pub(super) struct Held {
    budget: Arc<ConnBudget>,
    bytes: usize,
    working: bool,
}

impl Held {
    /// Wait for a turn to be handled: one of the connection's `max_concurrent_streams` slots
    /// and `reserve` bytes of its budget. `Err` when the process-wide budget cannot hold
    /// `reserve` (the stream is then refused).
    pub(super) async fn turn(&mut self, reserve: usize) -> Result<(), NoTurn> {
        let b = self.budget.clone();
        // Never more than the connection can hold, or the stream would wait for ever.
        let reserve = b
            .process
            .reservation(reserve)
            .min(b.max_bytes.saturating_sub(self.bytes));
        loop {
            let freed = b.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut s = b.lock();
                if s.working < b.max_working && s.bytes + reserve <= b.max_bytes {
                    if !b.process.try_take(reserve) {
                        return Err(NoTurn::Memory);
                    }
                    s.working += 1;
                    s.bytes += reserve;
                    b.process.metrics.working.inc();
                    self.working = true;
                    self.bytes += reserve;
                    return Ok(());
                }
            }
            freed.await;
        }
    }

    /// The stream holds `n` bytes (body or answer) in all: counted beyond what it holds
    /// already. `strict`: refused (`false`) when a budget cannot hold them; otherwise counted
    /// anyway (an answer already made), so that the connection's next streams wait.
    pub(super) fn hold(&mut self, n: usize, strict: bool) -> bool {
        if !strict {
            self.budget.process.note_answer(n);
        }
        if n <= self.bytes {
            return true;
        }
        let more = n - self.bytes;
        let b = &self.budget;
        let mut s = b.lock();
        if strict {
            if s.bytes + more > b.max_bytes || !b.process.try_take(more) {
                return false;
            }
        } else {
            b.process.force_take(more);
        }
        s.bytes += more;
        self.bytes += more;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.release(self.bytes, self.working);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn turns_wait_for_slots_and_bytes_and_the_process_refuses() {
        let process = Arc::new(ProcessBudget::default());
        process.set_limit(10_000);
        let conn = ConnBudget::new(2, 6_000, process.clone());
        let mut a = conn.admit(100).unwrap();
        let mut b = conn.admit(100).unwrap();
        let mut c = conn.admit(100).unwrap();
        a.turn(2_000).await.unwrap();
        b.turn(2_000).await.unwrap();
        // Two slots taken: the third waits until one ends.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), c.turn(2_000))
                .await
                .is_err()
        );
        drop(a);
        tokio::time::timeout(Duration::from_secs(1), c.turn(2_000))
            .await
            .expect("a slot freed")
            .unwrap();
        assert_eq!(process.used(), 4_200);
        // An answer bigger than the reservation is counted whole.
        // b's head and turn (2,100) become its 5,000-byte answer.
        assert!(b.hold(5_000, false));
        assert_eq!(process.used(), 7_100);
        // Strict holds refuse what the connection cannot take.
        assert!(!c.hold(4_000, true));
        // The process budget refuses a head on another connection.
        let other = ConnBudget::new(2, 6_000, process.clone());
        assert_eq!(other.admit(5_000).err(), Some(NoTurn::Memory));
        drop((b, c));
        assert_eq!(process.used(), 0);
        assert_eq!(conn.lock().working, 0);
    }

    #[tokio::test]
    async fn turns_reserve_what_answers_took_lately() {
        let process = Arc::new(ProcessBudget::default());
        process.set_limit(1 << 20);
        let conn = ConnBudget::new(10, 100_000, process.clone());
        let mut a = conn.admit(100).unwrap();
        a.turn(2_000).await.unwrap();
        assert_eq!(process.used(), 2_100);
        // A 30,000-byte answer: the next turns reserve that much.
        assert!(a.hold(30_000, false));
        drop(a);
        let mut b = conn.admit(100).unwrap();
        b.turn(2_000).await.unwrap();
        assert_eq!(process.used(), 30_100);
        // Small answers bring the reservation down an eighth at a time.
        assert!(b.hold(100, false));
        drop(b);
        let mut c = conn.admit(100).unwrap();
        c.turn(2_000).await.unwrap();
        assert_eq!(process.used(), 100 + 30_000 - 30_000 / 8);
        // Never more than the connection can hold.
        assert!(c.hold(1_000_000, false));
        drop(c);
        let mut d = conn.admit(100).unwrap();
        d.turn(2_000).await.unwrap();
        assert_eq!(process.used(), 100_000);
    }
}
