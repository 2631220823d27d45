//! Legacy (2025-11-25) transport sessions.
//!
//! Off by default: the gateway serves legacy clients statelessly. When a
//! tenant enables sessions, `initialize` mints a random `Mcp-Session-Id`
//! bound to that tenant and the negotiated version; unknown or expired ids
//! get 404 so the client re-initializes. A session is transport state only,
//! never identity or authorization.
//!
//! The store is a bounded `moka` cache (sharded, no background threads): a
//! session's idle timer is the cache's time-to-idle, and when `max_sessions`
//! are live the least recently used one is dropped, in O(1) either way.

use moka::policy::EvictionPolicy;
use std::time::Duration;

/// A session is found by its tenant and id together, so another tenant's
/// lookup misses without touching the session's idle timer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    tenant: String,
    id: String,
}

/// [`Key`] borrowed: hashes as `Key` does (a `String` hashes as its `str`).
#[derive(Hash)]
struct KeyRef<'a> {
    tenant: &'a str,
    id: &'a str,
}

impl equivalent::Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, k: &Key) -> bool {
        self.tenant == k.tenant && self.id == k.id
    }
}

pub struct SessionStore {
    /// Session → negotiated version.
    cache: moka::sync::Cache<Key, String>,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("sessions", &self.cache.entry_count())
            .finish()
    }
}

impl SessionStore {
    pub fn new(idle_ttl: Duration, max_sessions: usize) -> Self {
        SessionStore {
            cache: moka::sync::Cache::builder()
                .max_capacity(max_sessions as u64)
                .time_to_idle(idle_ttl)
                // LRU always admits a new session (TinyLFU could refuse one it
                // just issued) and drops the one closest to its idle expiry.
                .eviction_policy(EvictionPolicy::lru())
                .build(),
        }
    }

    /// Create a session and return its id (128 random bits, hex).
    pub fn create(&self, tenant: &str, version: &str) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        self.cache.insert(
            Key {
                tenant: tenant.to_owned(),
                id: id.clone(),
            },
            version.to_owned(),
        );
        id
    }

    /// The negotiated version of a live session of this tenant, refreshing
    /// its idle timer. `None` for unknown, expired or foreign sessions.
    pub fn touch(&self, tenant: &str, id: &str) -> Option<String> {
        self.cache.get(&KeyRef { tenant, id })
    }

    /// End a session; true when it was live for this tenant.
    pub fn end(&self, tenant: &str, id: &str) -> bool {
        self.cache.remove(&KeyRef { tenant, id }).is_some()
    }

    /// Sessions held now (approximate until pending maintenance has run).
    pub fn len(&self) -> u64 {
        self.cache.entry_count()
    }

    /// True when no session is held (approximate, as [`SessionStore::len`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Apply pending evictions and expirations now (tests, benchmarks).
    pub fn run_pending_tasks(&self) {
        self.cache.run_pending_tasks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_and_isolation() {
        let s = SessionStore::new(Duration::from_secs(60), 10);
        let id = s.create("a", "2025-11-25");
        assert_eq!(s.touch("a", &id).as_deref(), Some("2025-11-25"));
        assert_eq!(s.touch("b", &id), None, "another tenant cannot use it");
        assert!(!s.end("b", &id));
        assert!(s.end("a", &id));
        assert_eq!(s.touch("a", &id), None);
    }

    #[test]
    fn expiry() {
        let s = SessionStore::new(Duration::from_millis(0), 10);
        let id = s.create("a", "2025-11-25");
        assert_eq!(s.touch("a", &id), None);
    }

    #[test]
    fn the_bound_drops_the_least_recently_used() {
        let s = SessionStore::new(Duration::from_secs(60), 10);
        let first = s.create("a", "2025-11-25");
        let ids: Vec<String> = (0..30).map(|_| s.create("a", "2025-11-25")).collect();
        s.run_pending_tasks();
        assert!(s.len() <= 10, "{} sessions held", s.len());
        assert_eq!(s.touch("a", &first), None, "the oldest was dropped");
        assert_eq!(
            s.touch("a", &ids[29]).as_deref(),
            Some("2025-11-25"),
            "a new session is always admitted"
        );
    }

    #[test]
    fn touch_refreshes_the_idle_timer_and_a_foreign_touch_does_not() {
        let s = SessionStore::new(Duration::from_millis(300), 10);
        let kept = s.create("a", "2025-11-25");
        let left = s.create("a", "2025-11-25");
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(100));
            assert!(s.touch("a", &kept).is_some());
            assert_eq!(s.touch("b", &left), None);
        }
        assert!(
            s.touch("a", &kept).is_some(),
            "touched within its idle time"
        );
        assert_eq!(s.touch("a", &left), None, "idle for 400 ms");
        s.run_pending_tasks();
        assert_eq!(s.len(), 1);
    }
}
