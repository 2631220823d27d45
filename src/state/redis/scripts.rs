//! The Lua scripts of the Redis store: one script per state change, so each is atomic on the
//! node that owns its keys. Time inside them is the server's (`TIME`), never an instance's.
//!
//! A claim record is `{st, fp, owner, lease}`: `st` is `claimed` (nothing
//! sent yet), `sending` (intent recorded before the backend call) or `done`.
//! `lease` is a Redis-clock instant in milliseconds. Every script that
//! touches two keys is given keys of one hash slot (see `keys` in `mod.rs`).

/// Shared helpers: `now_ms` reads the server's clock (so instances with
/// skewed clocks agree on leases and buckets); `save` keeps a record's
/// remaining TTL. Since Redis 5 scripts replicate their effects, so reading
/// `TIME` before a write is allowed and replicas get the writes, not the call.
const PRELUDE: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function save(key, r)
  local pttl = redis.call('PTTL', key)
  if pttl > 0 then
    redis.call('SET', key, cjson.encode(r), 'PX', pttl)
  else
    redis.call('SET', key, cjson.encode(r))
  end
end
"#;

/// KEYS[1] record; ARGV fp, ttl_ms, lease_ms, owner, resend_ok, and an
/// older fingerprint form that also counts as the same payload.
const BEGIN: &str = r#"
local v = redis.call('GET', KEYS[1])
local now = now_ms()
local function claim(st)
  redis.call('SET', KEYS[1], cjson.encode({st=st, fp=ARGV[1], owner=ARGV[4], lease=now + tonumber(ARGV[3])}), 'PX', ARGV[2])
end
if not v then
  claim('claimed')
  return {'claimed'}
end
local r = cjson.decode(v)
if r.fp ~= ARGV[1] and r.fp ~= ARGV[6] then return {'conflict'} end
if r.st == 'done' then return {'replay', r.r} end
if r.lease and tonumber(r.lease) > now then return {'inflight'} end
if r.st == 'claimed' then
  claim('claimed')
  return {'claimed'}
end
if ARGV[5] == '1' then
  claim('sending')
  return {'resend'}
end
return {'unknown'}
"#;

/// KEYS[1] record; ARGV owner, lease_ms. Marks the claim `sending`.
const INTENT: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local r = cjson.decode(v)
if r.owner ~= ARGV[1] or r.st == 'done' then return 0 end
r.st = 'sending'
r.lease = now_ms() + tonumber(ARGV[2])
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

/// KEYS[1] record; ARGV mode (`delivered` or `released`), result.
const RESOLVE: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return 'notfound' end
local r = cjson.decode(v)
if r.st == 'done' then return 'completed' end
if r.lease and tonumber(r.lease) > now_ms() then return 'inflight' end
if ARGV[1] == 'released' then
  redis.call('DEL', KEYS[1])
else
  save(KEYS[1], {st='done', fp=r.fp, r=ARGV[2]})
end
return 'done'
"#;

/// KEYS[1] record, KEYS[2] the tenant's lead list (same hash slot); ARGV
/// owner, result, lead. The lead is recorded and the claim completed in one step.
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

/// KEYS[1] bucket; ARGV capacity, refill per millisecond. `{1, 0}` allowed,
/// `{0, wait_ms}` limited.
const TAKE: &str = r#"
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = now_ms()
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

/// The compiled scripts (each with the prelude), hashed once.
pub(super) struct Scripts {
    pub begin: redis::Script,
    pub intent: redis::Script,
    pub release: redis::Script,
    pub resolve: redis::Script,
    pub record: redis::Script,
    pub take: redis::Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        let s = |body: &str| redis::Script::new(&format!("{PRELUDE}{body}"));
        Scripts {
            begin: s(BEGIN),
            intent: s(INTENT),
            release: s(RELEASE),
            resolve: s(RESOLVE),
            record: s(RECORD),
            take: s(TAKE),
        }
    }
}
