//! The runtime log level behind `GET/PUT /admin/log-level`: the filter the process started with
//! (`AAP_LOG`), replaceable while running through the reload handle the logging setup installs.

use std::sync::{Mutex, OnceLock};

/// Longest filter accepted, in bytes.
const MAX_FILTER: usize = 512;

type Apply = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

struct Level {
    apply: Apply,
    current: Mutex<String>,
}

/// The process's log filter and how to replace it, once the logging setup
/// installed them (`run`'s; without, `/admin/log-level` answers 503).
#[derive(Default)]
pub struct LogLevel(OnceLock<Level>);

impl std::fmt::Debug for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogLevel").finish_non_exhaustive()
    }
}

impl LogLevel {
    /// Called once by the logging setup after building the subscriber: the
    /// filter in force and how to replace it (it parses the directive and
    /// swaps the filter).
    pub fn install(
        &self,
        current: String,
        apply: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static,
    ) {
        let _ = self.0.set(Level {
            apply: Box::new(apply),
            current: Mutex::new(current),
        });
    }
}

/// `GET /admin/log-level`.
pub fn get(level: &LogLevel) -> (u16, serde_json::Value) {
    match level.0.get() {
        Some(l) => (
            200,
            serde_json::json!({"filter": *l.current.lock().unwrap_or_else(|e| e.into_inner())}),
        ),
        None => unavailable(),
    }
}

/// `PUT /admin/log-level` with the body `{"filter": "info,aap_gateway=debug"}`
/// (an `EnvFilter` directive, as `AAP_LOG` takes) or the bare directive as text.
/// A bad directive is refused with 400 and the filter stays.
pub fn put(level: &LogLevel, body: &[u8]) -> (u16, serde_json::Value) {
    let Some(l) = level.0.get() else {
        return unavailable();
    };
    let bad = |m: &str| {
        (
            400,
            serde_json::json!({"error": "bad_request", "message": m}),
        )
    };
    let text = match std::str::from_utf8(body) {
        Ok(t) => t.trim(),
        Err(_) => return bad("the body is not UTF-8"),
    };
    let filter = if text.starts_with('{') {
        match serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("filter").and_then(|f| f.as_str()).map(str::to_owned))
        {
            Some(f) => f,
            None => return bad("send {\"filter\": \"<directive>\"}, e.g. {\"filter\": \"debug\"}"),
        }
    } else {
        text.to_owned()
    };
    let filter = filter.trim().to_owned();
    if filter.is_empty() || filter.len() > MAX_FILTER {
        return bad("filter: 1-512 characters, e.g. \"info\" or \"info,aap_gateway=debug\"");
    }
    if !filter
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_=,:-.".contains(&b))
    {
        return bad("filter: levels and targets only (letters, digits, _ = , : - .), e.g. \"info,aap_gateway=debug\"");
    }
    if let Err(e) = (l.apply)(&filter) {
        return bad(&format!("filter: {e}"));
    }
    let mut current = l.current.lock().unwrap_or_else(|e| e.into_inner());
    let previous = std::mem::replace(&mut *current, filter.clone());
    tracing::warn!(filter = %filter, previous = %previous, "log filter changed on the admin listener");
    (
        200,
        serde_json::json!({"filter": filter, "previous": previous}),
    )
}

fn unavailable() -> (u16, serde_json::Value) {
    (
        503,
        serde_json::json!({"error": "unavailable", "message": "the log filter cannot be changed in this process"}),
    )
}
