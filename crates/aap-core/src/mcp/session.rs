//! Legacy (2025-11-25) transport sessions.
//!
//! Off by default: the gateway serves legacy clients statelessly. When a
//! tenant enables sessions, `initialize` mints a random `Mcp-Session-Id`
//! bound to that tenant and the negotiated version; unknown or expired ids
//! get 404 so the client re-initializes. A session is transport state only,
//! never identity or authorization.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
struct Entry {
    tenant: String,
    version: String,
    expires: Instant,
}

#[derive(Debug)]
pub struct SessionStore {
    idle_ttl: Duration,
    max_sessions: usize,
    inner: Mutex<HashMap<String, Entry>>,
}

impl SessionStore {
    pub fn new(idle_ttl: Duration, max_sessions: usize) -> Self {
        SessionStore {
            idle_ttl,
            max_sessions,
            inner: Mutex::new(HashMap::new()),
        }
    }

    /// Create a session and return its id (128 random bits, hex).
    pub fn create(&self, tenant: &str, version: &str) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let now = Instant::now();
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.max_sessions {
            map.retain(|_, e| e.expires > now);
            if map.len() >= self.max_sessions {
                // Evict the entry closest to expiry rather than refusing service.
                if let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
            }
        }
        map.insert(
            id.clone(),
            Entry {
                tenant: tenant.to_owned(),
                version: version.to_owned(),
                expires: now + self.idle_ttl,
            },
        );
        id
    }

    /// The negotiated version of a live session of this tenant, refreshing
    /// its idle timer. `None` for unknown, expired or foreign sessions.
    pub fn touch(&self, tenant: &str, id: &str) -> Option<String> {
        let now = Instant::now();
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(id) {
            Some(e) if e.tenant == tenant && e.expires > now => {
                e.expires = now + self.idle_ttl;
                Some(e.version.clone())
            }
            Some(e) if e.expires <= now => {
                map.remove(id);
                None
            }
            _ => None,
        }
    }

    /// End a session; true when it existed for this tenant.
    pub fn end(&self, tenant: &str, id: &str) -> bool {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(id).is_some_and(|e| e.tenant == tenant) {
            map.remove(id);
            true
        } else {
            false
        }
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
}
