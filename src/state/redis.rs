//! Redis shared state, so several gateway instances share one set of
//! idempotency records and one rate budget.
//!
//! Each operation is a single Lua script, so claims and token takes are
//! atomic across instances. A claim is `{st, fp, owner, lease}`: `st` is
//! `claimed` (nothing sent yet), `sending` (intent recorded before the
//! backend call) or `done`. When a claim's lease passes without a result,
//! a `claimed` key is claimed afresh (nothing was sent) and a `sending` key
//! is handed out again only to a caller whose backend deduplicates by the
//! key; otherwise it is reported unknown until an operator resolves it.

use super::{
    Begin, Bucket, Claim, LeadRecorded, Resolution, Resolved, SharedState, StateError, Take,
};
use crate::clock::now_unix_ms;
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Shared helpers of the scripts: `save` keeps the record's remaining TTL.
const SAVE: &str = r#"
local function save(key, r)
  local pttl = redis.call('PTTL', key)
  if pttl > 0 then
    redis.call('SET', key, cjson.encode(r), 'PX', pttl)
  else
    redis.call('SET', key, cjson.encode(r))
  end
end
"#;

/// KEYS[1] record; ARGV fp, ttl_ms, now, lease_ms, owner, resend_ok, and
/// an older fingerprint form that also counts as the same payload.
const BEGIN: &str = r#"
local v = redis.call('GET', KEYS[1])
local now = tonumber(ARGV[3])
local function claim(st)
  redis.call('SET', KEYS[1], cjson.encode({st=st, fp=ARGV[1], owner=ARGV[5], lease=now + tonumber(ARGV[4])}), 'PX', ARGV[2])
end
if not v then
  claim('claimed')
  return {'claimed'}
end
local r = cjson.decode(v)
if r.fp ~= ARGV[1] and r.fp ~= ARGV[7] then return {'conflict'} end
if r.st == 'done' then return {'replay', r.r} end
if r.lease and tonumber(r.lease) > now then return {'inflight'} end
if r.st == 'claimed' then
  claim('claimed')
  return {'claimed'}
end
if ARGV[6] == '1' then
  claim('sending')
  return {'resend'}
end
return {'unknown'}
"#;

/// KEYS[1] record; ARGV owner, now, lease_ms. Marks the claim `sending`.
const INTENT: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local r = cjson.decode(v)
if r.owner ~= ARGV[1] or r.st == 'done' then return 0 end
r.st = 'sending'
r.lease = tonumber(ARGV[2]) + tonumber(ARGV[3])
save(KEYS[1], r)
return 1
"#;

/// KEYS[1] record; ARGV owner, mode (`abandon` or `interrupt`).
const RELEASE: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local r = cjson.decode(v)
if r.owner ~= ARGV[1] or r.st == 'done' then return 0 end
if ARGV[2] == 'abandon' then
  redis.call('DEL', KEYS[1])
else
  r.lease = 0
  save(KEYS[1], r)
end
return 1
"#;

/// KEYS[1] record; ARGV now, mode (`delivered` or `released`), result.
const RESOLVE: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return 'notfound' end
local r = cjson.decode(v)
if r.st == 'done' then return 'completed' end
if r.lease and tonumber(r.lease) > tonumber(ARGV[1]) then return 'inflight' end
if ARGV[2] == 'released' then
  redis.call('DEL', KEYS[1])
else
  save(KEYS[1], {st='done', fp=r.fp, r=ARGV[3]})
end
return 'done'
"#;

/// KEYS[1] record, KEYS[2] the tenant's lead list; ARGV owner, result,
/// lead. The lead is recorded and the claim completed in one step.
const RECORD: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return {'lost'} end
local r = cjson.decode(v)
if r.st == 'done' then return {'replay', r.r} end
if r.owner ~= ARGV[1] then return {'lost'} end
save(KEYS[1], {st='done', fp=r.fp, r=ARGV[2]})
redis.call('RPUSH', KEYS[2], ARGV[3])
return {'recorded'}
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
    lease_ms: u64,
    begin: redis::Script,
    intent: redis::Script,
    release: redis::Script,
    resolve: redis::Script,
    record: redis::Script,
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

fn with_save(body: &str) -> redis::Script {
    redis::Script::new(&format!("{SAVE}{body}"))
}

impl RedisState {
    /// `lease_ms`: `state.claim_lease_ms`.
    pub fn new(url: &str, prefix: &str, lease_ms: u64) -> Result<RedisState, String> {
        let client =
            redis::Client::open(url).map_err(|e| format!("invalid redis_url: {}", e.category()))?;
        Ok(RedisState {
            client,
            conn: OnceCell::new(),
            prefix: prefix.to_owned(),
            lease_ms: lease_ms.max(1),
            begin: redis::Script::new(BEGIN),
            intent: with_save(INTENT),
            release: with_save(RELEASE),
            resolve: with_save(RESOLVE),
            record: with_save(RECORD),
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

    /// The list holding a tenant's leads when the embedded dealer runs on
    /// Redis state.
    pub fn leads_key(prefix: &str, tenant: &str) -> String {
        format!("{prefix}leads:{tenant}")
    }

    async fn release(&self, key: &str, claim: &Claim, mode: &str) -> Result<(), StateError> {
        let mut c = self.conn().await?;
        self.release
            .key(self.key("idem", key))
            .arg(&claim.0)
            .arg(mode)
            .invoke_async::<i64>(&mut c)
            .await
            .map_err(err)?;
        Ok(())
    }
}

fn replay(reply: &[String]) -> Result<Value, StateError> {
    reply
        .get(1)
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| StateError("redis: corrupt idempotency record".into()))
}

#[async_trait]
impl SharedState for RedisState {
    async fn idem_begin(
        &self,
        key: &str,
        fingerprints: &[&str],
        ttl: Duration,
        resend_ok: bool,
    ) -> Result<Begin, StateError> {
        let fingerprint = fingerprints.first().copied().unwrap_or_default();
        let legacy = fingerprints.get(1).copied().unwrap_or(fingerprint);
        let mut c = self.conn().await?;
        let claim = Claim::new();
        let reply: Vec<String> = self
            .begin
            .key(self.key("idem", key))
            .arg(fingerprint)
            .arg(ttl.as_millis() as u64)
            .arg(now_unix_ms())
            .arg(self.lease_ms)
            .arg(&claim.0)
            .arg(if resend_ok { "1" } else { "0" })
            .arg(legacy)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(match reply.first().map(String::as_str) {
            Some("claimed") => Begin::Claimed(claim),
            Some("resend") => Begin::Resend(claim),
            Some("conflict") => Begin::Conflict,
            Some("inflight") => Begin::InFlight,
            Some("unknown") => Begin::Unknown,
            Some("replay") => Begin::Replay(replay(&reply)?),
            _ => return Err(StateError("redis: unexpected script reply".into())),
        })
    }

    async fn idem_intent(&self, key: &str, claim: &Claim) -> Result<bool, StateError> {
        let mut c = self.conn().await?;
        let ok: i64 = self
            .intent
            .key(self.key("idem", key))
            .arg(&claim.0)
            .arg(now_unix_ms())
            .arg(self.lease_ms)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(ok == 1)
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

    async fn idem_abandon(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        self.release(key, claim, "abandon").await
    }

    async fn idem_interrupt(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        self.release(key, claim, "interrupt").await
    }

    async fn idem_resolve(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Resolved, StateError> {
        let mut c = self.conn().await?;
        let (mode, result) = match resolution {
            Resolution::Delivered(v) => ("delivered", v.to_string()),
            Resolution::Released => ("released", String::new()),
        };
        let reply: String = self
            .resolve
            .key(self.key("idem", key))
            .arg(now_unix_ms())
            .arg(mode)
            .arg(result)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(match reply.as_str() {
            "done" => Resolved::Done,
            "completed" => Resolved::AlreadyCompleted,
            "inflight" => Resolved::InFlight,
            _ => Resolved::NotFound,
        })
    }

    async fn record_lead(
        &self,
        tenant: &str,
        key: &str,
        claim: &Claim,
        lead: &Value,
        result: &Value,
    ) -> Result<LeadRecorded, StateError> {
        let mut c = self.conn().await?;
        let reply: Vec<String> = self
            .record
            .key(self.key("idem", key))
            .key(Self::leads_key(&self.prefix, tenant))
            .arg(&claim.0)
            .arg(result.to_string())
            .arg(lead.to_string())
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(match reply.first().map(String::as_str) {
            Some("recorded") => LeadRecorded::Recorded,
            Some("replay") => LeadRecorded::Replay(replay(&reply)?),
            Some("lost") => LeadRecorded::Lost,
            _ => return Err(StateError("redis: unexpected script reply".into())),
        })
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
