//! Redis counters (one server or a Cluster, plain or TLS), so several gateway instances share
//! one rate budget and one lead quota per key; lead-path records are in the lead store.
//!
//! Each take is a single Lua script (`scripts`), atomic across instances,
//! and every time it compares is the Redis server's own (`TIME`). Counters
//! are high-rate and loss-tolerant: a failover that forgets some takes
//! grants a few extra requests, never loses or repeats a lead. Idempotency
//! records and leads never touch Redis (`crate::store`); the idempotency
//! methods of this store answer an error.
//!
//! Key layout (`<p>` = `state.redis_prefix`): `<p>bucket:<key>` (each bucket
//! is one key, any slot on a Cluster).

mod connect;
mod scripts;

pub use connect::RedisOptions;

use super::{Begin, Bucket, Claim, Resolution, Resolved, SharedState, StateError, Take};
use async_trait::async_trait;
use connect::{Conn, Target};
use scripts::Scripts;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::OnceCell;

/// The counters store.
pub struct RedisState {
    opts: RedisOptions,
    target: Target,
    conn: OnceCell<Conn>,
    scripts: Scripts,
}

impl std::fmt::Debug for RedisState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may hold a password.
        f.debug_struct("RedisState")
            .field("prefix", &self.opts.prefix)
            .field("cluster", &self.opts.is_cluster())
            .finish()
    }
}

fn err(e: redis::RedisError) -> StateError {
    StateError(format!("redis: {}", e.category()))
}

fn not_here() -> StateError {
    StateError("idempotency records live in the lead store, not in Redis".into())
}

impl RedisState {
    pub fn new(opts: &RedisOptions) -> Result<RedisState, String> {
        let target = connect::target(opts)?;
        Ok(RedisState {
            opts: opts.clone(),
            target,
            conn: OnceCell::new(),
            scripts: Scripts::new(),
        })
    }

    async fn conn(&self) -> Result<Conn, StateError> {
        self.conn
            .get_or_try_init(|| self.target.connect(&self.opts))
            .await
            .cloned()
            .map_err(err)
    }
}

#[async_trait]
impl SharedState for RedisState {
    async fn idem_begin(
        &self,
        _: &str,
        _: &[&str],
        _: Duration,
        _: bool,
    ) -> Result<Begin, StateError> {
        Err(not_here())
    }

    async fn idem_intent(&self, _: &str, _: &Claim) -> Result<bool, StateError> {
        Err(not_here())
    }

    async fn idem_complete(
        &self,
        _: &str,
        _: &str,
        _: &Value,
        _: Duration,
    ) -> Result<(), StateError> {
        Err(not_here())
    }

    async fn idem_abandon(&self, _: &str, _: &Claim) -> Result<(), StateError> {
        Err(not_here())
    }

    async fn idem_interrupt(&self, _: &str, _: &Claim) -> Result<(), StateError> {
        Err(not_here())
    }

    async fn idem_resolve(&self, _: &str, _: &Resolution) -> Result<Resolved, StateError> {
        Err(not_here())
    }

    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError> {
        let mut c = self.conn().await?;
        let capacity = bucket.capacity.max(1);
        let rate = capacity as f64 / bucket.per.as_millis().max(1) as f64;
        let (allowed, wait): (i64, i64) = self
            .scripts
            .take
            .key(format!("{}bucket:{key}", self.opts.prefix))
            .arg(capacity)
            .arg(rate)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(if allowed == 1 {
            Take::Allowed
        } else {
            Take::Limited {
                retry_after_ms: wait.max(1) as u64,
            }
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
