//! Cost of the in-process stores as the number of keys grows (criterion): a
//! token-bucket take at 1k and 1M buckets, legacy session create and touch at 1k and 100k.
//!
//! Run: `cargo bench --bench stores`. The store before issue 22 (one
//! `Mutex<HashMap>`, swept by `retain` past 100,000 keys) and a take done as one
//! moka `and_compute_with` are measured beside it, and the resident memory per
//! bucket is printed.

use aap_gateway::mcp::session::SessionStore;
use aap_gateway::state::buckets::Buckets;
use aap_gateway::state::{Bucket, Take};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A caller budget that does not refill within the run: every bucket stays
/// tracked (the worst case for the store).
const SLOW: Bucket = Bucket {
    capacity: 1_000_000,
    per: Duration::from_secs(3600),
};

fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "rl:caller:dealer-{}:ip:10.{}.{}.{}",
                i % 7,
                (i >> 16) & 255,
                (i >> 8) & 255,
                i & 255
            )
        })
        .collect()
}

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

/// The store before issue 22 (`src/state/local.rs::take_local`), kept here
/// as the baseline.
fn take_before(
    buckets: &Mutex<HashMap<String, (f64, u64)>>,
    key: &str,
    bucket: Bucket,
    now: u64,
) -> Take {
    let capacity = bucket.capacity.max(1) as f64;
    let per_ms = (bucket.per.as_millis().max(1)) as f64;
    let rate = capacity / per_ms;
    let mut map = buckets.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() > 100_000 {
        map.retain(|_, (tokens, last)| {
            *tokens + (now.saturating_sub(*last) as f64) * rate < capacity
        });
    }
    let (tokens, last) = map.entry(key.to_owned()).or_insert((capacity, now));
    let refilled = (*tokens + (now.saturating_sub(*last) as f64) * rate).min(capacity);
    if refilled >= 1.0 {
        *tokens = refilled - 1.0;
        *last = now;
        Take::Allowed
    } else {
        *tokens = refilled;
        *last = now;
        Take::Limited {
            retry_after_ms: ((1.0 - refilled) / rate).ceil() as u64,
        }
    }
}

/// The first form of `Buckets::take`, tried and not kept: the whole take as
/// one moka `and_compute_with` (a per-key lock map and a new entry per call).
fn take_compute(
    cache: &moka::sync::Cache<String, (f64, u64)>,
    key: &str,
    bucket: Bucket,
    now: u64,
) -> Take {
    let capacity = bucket.capacity.max(1) as f64;
    let rate = capacity / (bucket.per.as_millis().max(1)) as f64;
    let mut answer = Take::Allowed;
    cache.entry_by_ref(key).and_compute_with(|e| {
        let (tokens, last) = e.map(|e| e.into_value()).unwrap_or((capacity, now));
        let refilled = (tokens + (now.saturating_sub(last) as f64) * rate).min(capacity);
        if refilled >= 1.0 {
            moka::ops::compute::Op::Put((refilled - 1.0, now))
        } else {
            answer = Take::Limited {
                retry_after_ms: ((1.0 - refilled) / rate).ceil() as u64,
            };
            moka::ops::compute::Op::Put((refilled, now))
        }
    });
    answer
}

fn buckets(c: &mut Criterion) {
    for n in [1_000usize, 1_000_000] {
        let keys = keys(n);
        let before = resident_bytes();
        let store = Buckets::default();
        for k in &keys {
            store.take(k, SLOW, 0);
        }
        // Maintenance runs in batches: repeat it until every insert is counted.
        for _ in 0..1000 {
            store.run_pending_tasks();
            if store.tracked() as usize >= n {
                break;
            }
        }
        let after = resident_bytes();
        eprintln!(
            "buckets: {} tracked of {n} keys, about {} bytes resident each",
            store.tracked(),
            after.saturating_sub(before) / n as u64
        );
        let mut i = 0usize;
        c.bench_function(&format!("take, {n} buckets"), |b| {
            b.iter(|| {
                i = (i + 7919) % n;
                black_box(store.take(black_box(&keys[i]), SLOW, 0))
            })
        });
        drop(store);

        let compute = moka::sync::Cache::builder()
            .max_capacity(n as u64)
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .build();
        for k in &keys {
            take_compute(&compute, k, SLOW, 0);
        }
        for _ in 0..1000 {
            compute.run_pending_tasks();
            if compute.entry_count() as usize >= n {
                break;
            }
        }
        let mut i = 0usize;
        c.bench_function(
            &format!("take as one and_compute_with (not kept), {n} buckets"),
            |b| {
                b.iter(|| {
                    i = (i + 7919) % n;
                    black_box(take_compute(&compute, black_box(&keys[i]), SLOW, 0))
                })
            },
        );
        drop(compute);

        // Filled directly: through `take_before`, each key past 100,000 would sweep.
        let old = Mutex::new(
            keys.iter()
                .map(|k| (k.clone(), (SLOW.capacity as f64 - 1.0, 0)))
                .collect::<HashMap<_, _>>(),
        );
        let mut g = c.benchmark_group("baseline");
        g.sample_size(10).measurement_time(Duration::from_secs(3));
        let mut i = 0usize;
        g.bench_function(format!("take before issue 22, {n} buckets"), |b| {
            b.iter(|| {
                i = (i + 7919) % n;
                black_box(take_before(&old, black_box(&keys[i]), SLOW, 0))
            })
        });
        g.finish();
    }
}

fn sessions(c: &mut Criterion) {
    for n in [1_000usize, 100_000] {
        // Full: every create drops the least recently used session.
        let store = SessionStore::new(Duration::from_secs(1800), n);
        let ids: Vec<String> = (0..n)
            .map(|_| store.create("dealer", "2025-11-25"))
            .collect();
        store.run_pending_tasks();
        let mut i = 0usize;
        c.bench_function(&format!("session touch, {n} sessions"), |b| {
            b.iter(|| {
                i = (i + 7919) % n;
                black_box(store.touch("dealer", black_box(&ids[i])))
            })
        });
        c.bench_function(&format!("session create at the bound, {n} sessions"), |b| {
            b.iter_batched(
                || (),
                |_| black_box(store.create("dealer", "2025-11-25")),
                BatchSize::SmallInput,
            )
        });
        store.run_pending_tasks();
        eprintln!("sessions: {} held, bound {n}", store.len());
    }
}

criterion_group!(stores, buckets, sessions);
criterion_main!(stores);
