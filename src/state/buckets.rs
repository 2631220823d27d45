//! In-process token buckets (`local` state): one bounded, concurrent cache entry
//! per key, forgotten one refill period after its last take (full by then).
//!
//! Why `moka` and not `governor`: governor's keyed limiter holds one quota per
//! limiter, while a `take` here names its own [`Bucket`] (tenant and caller
//! rates per tenant, one quota per skill), and its keyed store is only bounded
//! by an O(n) `retain_recent` sweep. A `moka::sync::Cache` (no background
//! threads) gives a sharded map with a hard entry bound and per-entry expiry;
//! the refill arithmetic stays the gateway's own, the same as the Redis script
//! (`src/state/redis/scripts.rs`), so `Take` answers do not depend on the store.

use super::{Bucket, Take};
use moka::policy::{EvictionPolicy, Expiry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Buckets tracked at most (about 0.4 KB each, see docs/performance.md, "Stores").
/// Beyond it the least recently used bucket is dropped: its next take starts
/// full, which is looser only for a key idle longer than every other tracked one.
pub const MAX_BUCKETS: u64 = 1_000_000;

/// One key's bucket. A take updates it under its own mutex: a cache `get`
/// costs about a fifth of a moka `and_compute_with` (a per-key lock map and a
/// new entry on every call; measured in benches/stores.rs), and the lock is
/// still this key's alone.
#[derive(Debug)]
struct Cell {
    /// The refill period of the bucket's last take, in ms.
    per_ms: AtomicU64,
    /// Tokens left and the Unix ms of the last take.
    state: Mutex<(f64, u64)>,
}

/// Forget a bucket one refill period (plus a ms) after its last take: by
/// then it is full whatever it held, and a fresh bucket is the same bucket,
/// so forgetting it never changes a later answer. Every take reads the entry
/// first, and the read restarts this time.
struct UntilFull;

/// The longest a bucket is kept (ten years): a refill period past it (a rate
/// of well under one a year) is forgotten then, and the cache's clock never
/// meets a deadline out of range.
const LONGEST_MS: u64 = 10 * 365 * 86_400_000;

impl UntilFull {
    fn after(v: &Cell) -> Option<Duration> {
        Some(Duration::from_millis(
            v.per_ms
                .load(Ordering::Relaxed)
                .saturating_add(1)
                .min(LONGEST_MS),
        ))
    }
}

impl Expiry<String, Arc<Cell>> for UntilFull {
    fn expire_after_create(&self, _: &String, v: &Arc<Cell>, _: Instant) -> Option<Duration> {
        Self::after(v)
    }

    fn expire_after_read(
        &self,
        _: &String,
        v: &Arc<Cell>,
        _: Instant,
        _: Option<Duration>,
        _: Instant,
    ) -> Option<Duration> {
        Self::after(v)
    }

    fn expire_after_update(
        &self,
        _: &String,
        v: &Arc<Cell>,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Self::after(v)
    }
}

/// Continuous-refill token buckets keyed by name.
pub struct Buckets {
    cache: moka::sync::Cache<String, Arc<Cell>>,
}

impl std::fmt::Debug for Buckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buckets")
            .field("tracked", &self.cache.entry_count())
            .finish()
    }
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets::with_capacity(MAX_BUCKETS)
    }
}

impl Buckets {
    /// At most `max` buckets (tests and benchmarks use other bounds).
    pub fn with_capacity(max: u64) -> Buckets {
        Buckets {
            cache: moka::sync::Cache::builder()
                .max_capacity(max)
                // TinyLFU may refuse to admit a new key, which would leave it
                // without a bucket (never limited); LRU always admits.
                .eviction_policy(EvictionPolicy::lru())
                .expire_after(UntilFull)
                .build(),
        }
    }

    /// Take one token from `key`'s bucket at `now` (Unix ms). Concurrent
    /// takes of one key share one `Cell` (moka inserts a missing key once)
    /// and update it under its mutex, so they never hand out more than the
    /// bucket holds.
    pub fn take(&self, key: &str, bucket: Bucket, now: u64) -> Take {
        let capacity = bucket.capacity.max(1) as f64;
        let per = bucket.per.as_millis().max(1);
        let per_ms = u64::try_from(per).unwrap_or(u64::MAX);
        let rate = capacity / per as f64; // tokens per ms
        let cell = match self.cache.get(key) {
            Some(cell) => cell,
            None => self
                .cache
                .entry_by_ref(key)
                .or_insert_with(|| {
                    Arc::new(Cell {
                        per_ms: AtomicU64::new(per_ms),
                        state: Mutex::new((capacity, now)),
                    })
                })
                .into_value(),
        };
        if cell.per_ms.swap(per_ms, Ordering::Relaxed) != per_ms {
            // The bucket changed (a reload): restart its expiry with the new period.
            self.cache.insert(key.to_owned(), cell.clone());
        }
        let mut st = cell.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = &mut *st;
        let refilled = (*tokens + (now.saturating_sub(*last) as f64) * rate).min(capacity);
        *last = now;
        if refilled >= 1.0 {
            *tokens = refilled - 1.0;
            Take::Allowed
        } else {
            *tokens = refilled;
            let wait = ((1.0 - refilled) / rate).ceil() as u64;
            Take::Limited {
                retry_after_ms: wait.max(1),
            }
        }
    }

    /// Buckets tracked now (approximate until pending maintenance has run).
    pub fn tracked(&self) -> u64 {
        self.cache.entry_count()
    }

    /// Apply pending evictions and expirations now (tests, benchmarks).
    pub fn run_pending_tasks(&self) {
        self.cache.run_pending_tasks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(capacity: u64, per_ms: u64) -> Bucket {
        Bucket {
            capacity,
            per: Duration::from_millis(per_ms),
        }
    }

    #[test]
    fn bucket_limits_and_refills() {
        let m = Buckets::default();
        let b = b(2, 2000);
        assert_eq!(m.take("a", b, 0), Take::Allowed);
        assert_eq!(m.take("a", b, 0), Take::Allowed);
        assert_eq!(
            m.take("a", b, 0),
            Take::Limited {
                retry_after_ms: 1000
            }
        );
        assert_eq!(m.take("a", b, 1000), Take::Allowed);
        assert_eq!(m.take("b", b, 0), Take::Allowed);
    }

    #[test]
    fn the_bound_holds() {
        let m = Buckets::with_capacity(100);
        for i in 0..1000 {
            assert_eq!(m.take(&format!("k{i}"), b(5, 3_600_000), 0), Take::Allowed);
        }
        m.run_pending_tasks();
        assert!(m.tracked() <= 100, "{} tracked", m.tracked());
        // The most recent key is still limited as before.
        for _ in 0..4 {
            assert_eq!(m.take("k999", b(5, 3_600_000), 0), Take::Allowed);
        }
        assert!(matches!(
            m.take("k999", b(5, 3_600_000), 0),
            Take::Limited { .. }
        ));
    }

    /// A bucket is forgotten once it is full again, and forgetting it does
    /// not change the next answer; a bucket still refilling is kept.
    #[test]
    fn a_full_bucket_is_forgotten_without_changing_answers() {
        let m = Buckets::default();
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        let quick = b(2, 40); // full 40 ms after the last take
        let slow = b(2, 3_600_000);
        assert_eq!(m.take("quick", quick, start), Take::Allowed);
        assert_eq!(m.take("quick", quick, start), Take::Allowed);
        assert!(matches!(
            m.take("quick", quick, start),
            Take::Limited { .. }
        ));
        assert_eq!(m.take("slow", slow, start), Take::Allowed);
        // moka's timer wheel removes expired entries at ticks of about a second.
        std::thread::sleep(Duration::from_millis(2500));
        m.run_pending_tasks();
        assert_eq!(m.tracked(), 1, "the full bucket is gone, the other kept");
        // What a bucket that was never forgotten answers: two, then a limit
        // of half the refill period.
        let now = start + 2500;
        assert_eq!(m.take("quick", quick, now), Take::Allowed);
        assert_eq!(m.take("quick", quick, now), Take::Allowed);
        assert_eq!(
            m.take("quick", quick, now),
            Take::Limited { retry_after_ms: 20 }
        );
        // The kept bucket still has one token, not two.
        assert_eq!(m.take("slow", slow, now), Take::Allowed);
        assert!(matches!(m.take("slow", slow, now), Take::Limited { .. }));
    }

    #[test]
    fn concurrent_takes_never_exceed_the_capacity() {
        let m = Arc::new(Buckets::default());
        let allowed = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (m, allowed) = (m.clone(), allowed.clone());
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        // No refill within the test: one hour per 1000 tokens.
                        if m.take("hot", b(1000, 3_600_000), 0) == Take::Allowed {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(allowed.load(Ordering::Relaxed), 1000);
    }
}
