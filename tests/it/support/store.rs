//! The lead store as tests read it: the SQLite database a gateway keeps under its state
//! directory, opened read-only with the real SQLite library (no gateway code involved).

use serde_json::Value;
use std::path::Path;

/// The default database file of a gateway whose `state.dir` is `state`.
pub fn store_file(state: &Path) -> std::path::PathBuf {
    state.join("leads.sqlite3")
}

fn open(state: &Path) -> Option<rusqlite::Connection> {
    let path = store_file(state);
    if !path.exists() {
        return None;
    }
    let c =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    Some(c)
}

/// The lead records of `tenant`, in acceptance order.
pub fn stored_leads(state: &Path, tenant: &str) -> Vec<Value> {
    let Some(c) = open(state) else {
        return Vec::new();
    };
    let mut st = c
        .prepare("SELECT record FROM leads WHERE tenant = ?1 ORDER BY received_at, lead_id")
        .unwrap();
    st.query_map([tenant], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|t| serde_json::from_str(&t.unwrap()).unwrap())
        .collect()
}

/// Idempotency records holding a final result.
pub fn completed_keys(state: &Path) -> usize {
    let Some(c) = open(state) else { return 0 };
    c.query_row("SELECT COUNT(*) FROM idem WHERE state = 'done'", [], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap() as usize
}
