//! The reload history the admin console and `aap-gateway admin status` show: the last
//! [`KEPT`] reloads in memory (time, result, generation, error text), oldest dropped first.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Reloads remembered; older ones are dropped (the log keeps them all).
pub const KEPT: usize = 50;

/// Longest error text kept for one reload, in characters.
const ERROR_CHARS: usize = 1_000;

struct Entry {
    at_ms: u64,
    ok: bool,
    generation: u64,
    error: Option<String>,
}

/// The reloads remembered by one `Gateway`, oldest first.
#[derive(Default)]
pub struct History(Mutex<VecDeque<Entry>>);

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").finish_non_exhaustive()
    }
}

impl History {
    /// Remember one reload: `Ok(generation)` or the refusal. Config errors name
    /// keys and files, never a secret's value (`aap_core::config`); the text is
    /// cut to one bounded line so a long report cannot grow the history.
    pub fn record(&self, result: &Result<u64, String>, serving: u64) {
        let (ok, generation, error) = match result {
            Ok(g) => (true, *g, None),
            Err(e) => (false, serving, Some(one_line(e))),
        };
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if h.len() == KEPT {
            h.pop_front();
        }
        h.push_back(Entry {
            at_ms: crate::clock::now_unix_ms(),
            ok,
            generation,
            error,
        });
    }

    /// The remembered reloads, newest first, as JSON.
    pub fn list(&self) -> Vec<serde_json::Value> {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.iter()
            .rev()
            .map(|e| {
                serde_json::json!({
                    "at": crate::clock::unix_ms_rfc3339(e.at_ms),
                    "result": if e.ok { "reloaded" } else { "rejected" },
                    "config_generation": e.generation,
                    "error": e.error,
                })
            })
            .collect()
    }
}

fn one_line(e: &str) -> String {
    let joined = e
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ");
    joined.chars().take(ERROR_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_newest_first_one_line() {
        let h = History::default();
        for g in 0..(KEPT as u64 + 5) {
            h.record(&Ok(g), g);
        }
        h.record(&Err("bad key\n  |\n3 | x = 1\nsecond".into()), 7);
        let l = h.list();
        assert_eq!(l.len(), KEPT);
        assert_eq!(l[0]["result"], "rejected");
        assert_eq!(l[0]["config_generation"], 7);
        assert!(!l[0]["error"].as_str().unwrap().contains('\n'));
        assert_eq!(l[1]["config_generation"], KEPT as u64 + 4);
        assert!(l[0]["at"].as_str().unwrap().ends_with('Z'));
    }
}
