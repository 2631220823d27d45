//! Redis shared state, so several gateway instances share one set of
//! idempotency records and one rate budget.
//!
//! Each operation is a single Lua script, so claims and token takes are
//! atomic across instances. Claims carry a lease: a claim whose instance
//! died mid-call is reported as `Interrupted` once the lease has passed.

use super::{Begin, Bucket, SharedState, StateError, Take};
use crate::util::now_unix_ms;
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::OnceCell;

/// How long a pending claim blocks duplicates before it counts as interrupted.
const CLAIM_LEASE_MS: u64 = 60_000;

const BEGIN: &str = r#"
local v = redis.call('GET', KEYS[1])
local now = tonumber(ARGV[3])
if not v then
  redis.call('SET', KEYS[1], cjson.encode({st='pending', fp=ARGV[1], lease=now + tonumber(ARGV[4])}), 'PX', ARGV[2])
  return {'claimed'}
end
local r = cjson.decode(v)
if r.fp ~= ARGV[1] then return {'conflict'} end
if r.st == 'done' then return {'replay', r.r} end
if tonumber(r.lease) > now then return {'inflight'} end
redis.call('SET', KEYS[1], cjson.encode({st='pending', fp=ARGV[1], lease=now + tonumber(ARGV[4])}), 'PX', ARGV[2])
return {'interrupted'}
"#;

const TAKE: &str = r#"
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = tonumber(s[1]) or cap
local ts = tonumber(s[2]) or now
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(cap, tokens + elapsed * rate)
local ttl = math.ceil(cap / rate) + 1000
if tokens >= 1 then
  redis.call('HSET', KEYS[1], 't', tostring(tokens - 1), 'ts', tostring(now))
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, 0}
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], ttl)
return {0, math.ceil((1 - tokens) / rate)}
"#;

pub struct RedisState {
    client: redis::Client,
    conn: OnceCell<ConnectionManager>,
    prefix: String,
    begin: redis::Script,
    take: redis::Script,
}

impl std::fmt::Debug for RedisState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the URL: it may hold a password.
        f.debug_struct("RedisState")
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn err(e: redis::RedisError) -> StateError {
    StateError(format!("redis: {}", e.category()))
}

impl RedisState {
    pub fn new(url: &str, prefix: &str) -> Result<RedisState, String> {
        let client =
            redis::Client::open(url).map_err(|e| format!("invalid redis_url: {}", e.category()))?;
        Ok(RedisState {
            client,
            conn: OnceCell::new(),
            prefix: prefix.to_owned(),
            begin: redis::Script::new(BEGIN),
            take: redis::Script::new(TAKE),
        })
    }

    async fn conn(&self) -> Result<ConnectionManager, StateError> {
        self.conn
            .get_or_try_init(|| async { self.client.get_connection_manager().await })
            .await
            .cloned()
            .map_err(err)
    }

    fn key(&self, kind: &str, k: &str) -> String {
        format!("{}{kind}:{k}", self.prefix)
    }
}

#[async_trait]
impl SharedState for RedisState {
    async fn idem_begin(
        &self,
        key: &str,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Begin, StateError> {
        let mut c = self.conn().await?;
        let reply: Vec<String> = self
            .begin
            .key(self.key("idem", key))
            .arg(fingerprint)
            .arg(ttl.as_millis() as u64)
            .arg(now_unix_ms())
            .arg(CLAIM_LEASE_MS)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(match reply.first().map(String::as_str) {
            Some("claimed") => Begin::Claimed,
            Some("conflict") => Begin::Conflict,
            Some("inflight") => Begin::InFlight,
            Some("interrupted") => Begin::Interrupted,
            Some("replay") => {
                let v: Value = reply
                    .get(1)
                    .and_then(|s| serde_json::from_str(s).ok())
                    .ok_or_else(|| StateError("redis: corrupt idempotency record".into()))?;
                Begin::Replay(v)
            }
            _ => return Err(StateError("redis: unexpected script reply".into())),
        })
    }

    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StateError> {
        let mut c = self.conn().await?;
        let record = serde_json::json!({"st": "done", "fp": fingerprint, "r": result.to_string()})
            .to_string();
        redis::cmd("SET")
            .arg(self.key("idem", key))
            .arg(record)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async::<()>(&mut c)
            .await
            .map_err(err)
    }

    async fn idem_abandon(&self, key: &str) -> Result<(), StateError> {
        let mut c = self.conn().await?;
        redis::cmd("DEL")
            .arg(self.key("idem", key))
            .query_async::<()>(&mut c)
            .await
            .map_err(err)
    }

    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError> {
        let mut c = self.conn().await?;
        let capacity = bucket.capacity.max(1);
        let rate = capacity as f64 / bucket.per.as_millis().max(1) as f64;
        let (allowed, wait): (i64, i64) = self
            .take
            .key(self.key("bucket", key))
            .arg(capacity)
            .arg(rate)
            .arg(now_unix_ms())
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
