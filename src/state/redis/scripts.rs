//! The Lua script of the Redis counters: a token bucket take, atomic on the node that owns
//! its key. Time inside it is the server's (`TIME`), never an instance's.

/// `now_ms` reads the server's clock, so instances with skewed clocks agree
/// on buckets. Since Redis 5 scripts replicate their effects, so reading
/// `TIME` before a write is allowed and replicas get the writes, not the call.
const PRELUDE: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
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

/// The compiled script (with the prelude), hashed once.
pub(super) struct Scripts {
    pub take: redis::Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            take: redis::Script::new(&format!("{PRELUDE}{TAKE}")),
        }
    }
}
