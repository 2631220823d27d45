//! In-process shared state: durable idempotency records (an fsync'd
//! append-only log, compacted at start) and in-memory token buckets.

use super::{Begin, Bucket, SharedState, StateError, Take};
use crate::util::now_unix_ms;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Phase {
    Pending,
    Done,
    Abandoned,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    k: String,
    fp: String,
    st: Phase,
    exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<Value>,
}

#[derive(Debug, Clone)]
enum Slot {
    /// Claimed by this process.
    Pending {
        fp: String,
    },
    /// Claimed by an earlier process that never finished.
    Orphaned {
        fp: String,
        exp: u64,
    },
    Done {
        fp: String,
        result: Value,
        exp: u64,
    },
}

#[derive(Debug)]
pub struct LocalState {
    path: PathBuf,
    log: Mutex<File>,
    idem: Mutex<HashMap<String, Slot>>,
    buckets: Mutex<HashMap<String, (f64, u64)>>,
}

impl LocalState {
    /// Open (or create) the idempotency log at `path`, dropping expired
    /// records and rewriting it compactly.
    pub fn open(path: &Path) -> Result<Arc<LocalState>, String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("{}: cannot create directory: {e}", dir.display()))?;
        }
        let now = now_unix_ms();
        let mut last: HashMap<String, Record> = HashMap::new();
        if path.exists() {
            let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            for line in BufReader::new(f).lines() {
                let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
                // A torn final line from a crash is ignored.
                if let Ok(rec) = serde_json::from_str::<Record>(&line) {
                    last.insert(rec.k.clone(), rec);
                }
            }
        }
        let live: Vec<Record> = last
            .into_values()
            .filter(|r| r.exp > now && r.st != Phase::Abandoned)
            .collect();
        // Compact: write the live records to a temp file, fsync, rename.
        let tmp = path.with_extension("compact");
        {
            let mut f = File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
            for r in &live {
                let mut line = serde_json::to_vec(r).map_err(|e| e.to_string())?;
                line.push(b'\n');
                f.write_all(&line)
                    .map_err(|e| format!("{}: {e}", tmp.display()))?;
            }
            f.sync_all()
                .map_err(|e| format!("{}: {e}", tmp.display()))?;
        }
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut idem = HashMap::new();
        for r in live {
            let slot = match r.st {
                Phase::Done => Slot::Done {
                    fp: r.fp,
                    result: r.r.unwrap_or(Value::Null),
                    exp: r.exp,
                },
                _ => Slot::Orphaned {
                    fp: r.fp,
                    exp: r.exp,
                },
            };
            idem.insert(r.k, slot);
        }
        let log = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Arc::new(LocalState {
            path: path.to_path_buf(),
            log: Mutex::new(log),
            idem: Mutex::new(idem),
            buckets: Mutex::new(HashMap::new()),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&self, rec: Record) -> Result<(), StateError> {
        let mut line = serde_json::to_vec(&rec).map_err(|e| StateError(e.to_string()))?;
        line.push(b'\n');
        let mut f = self.log.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(&line)
            .and_then(|_| f.sync_data())
            .map_err(|e| StateError(format!("idempotency log write failed: {e}")))
    }

    async fn append_blocking(self: &Arc<Self>, rec: Record) -> Result<(), StateError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.append(rec))
            .await
            .map_err(|e| StateError(e.to_string()))?
    }
}

/// `SharedState` is implemented on `Arc<LocalState>` so that fsync work
/// can move to the blocking pool.
#[async_trait]
impl SharedState for Arc<LocalState> {
    async fn idem_begin(
        &self,
        key: &str,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Begin, StateError> {
        let now = now_unix_ms();
        let exp = now + ttl.as_millis() as u64;
        let outcome = {
            let mut map = self.idem.lock().unwrap_or_else(|e| e.into_inner());
            match map.get(key) {
                Some(Slot::Done { fp, result, exp }) if *exp > now => {
                    if fp == fingerprint {
                        return Ok(Begin::Replay(result.clone()));
                    }
                    return Ok(Begin::Conflict);
                }
                Some(Slot::Pending { fp }) => {
                    return Ok(if fp == fingerprint {
                        Begin::InFlight
                    } else {
                        Begin::Conflict
                    });
                }
                Some(Slot::Orphaned { fp, exp }) if *exp > now => {
                    if fp != fingerprint {
                        return Ok(Begin::Conflict);
                    }
                    map.insert(
                        key.to_owned(),
                        Slot::Pending {
                            fp: fingerprint.to_owned(),
                        },
                    );
                    Begin::Interrupted
                }
                _ => {
                    map.insert(
                        key.to_owned(),
                        Slot::Pending {
                            fp: fingerprint.to_owned(),
                        },
                    );
                    Begin::Claimed
                }
            }
        };
        let rec = Record {
            k: key.to_owned(),
            fp: fingerprint.to_owned(),
            st: Phase::Pending,
            exp,
            r: None,
        };
        if let Err(e) = self.append_blocking(rec).await {
            self.idem
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
            return Err(e);
        }
        Ok(outcome)
    }

    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StateError> {
        let exp = now_unix_ms() + ttl.as_millis() as u64;
        let rec = Record {
            k: key.to_owned(),
            fp: fingerprint.to_owned(),
            st: Phase::Done,
            exp,
            r: Some(result.clone()),
        };
        self.append_blocking(rec).await?;
        self.idem.lock().unwrap_or_else(|e| e.into_inner()).insert(
            key.to_owned(),
            Slot::Done {
                fp: fingerprint.to_owned(),
                result: result.clone(),
                exp,
            },
        );
        Ok(())
    }

    async fn idem_abandon(&self, key: &str) -> Result<(), StateError> {
        let rec = Record {
            k: key.to_owned(),
            fp: String::new(),
            st: Phase::Abandoned,
            exp: now_unix_ms() + 60_000,
            r: None,
        };
        self.idem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.append_blocking(rec).await
    }

    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError> {
        Ok(take_local(&self.buckets, key, bucket, now_unix_ms()))
    }

    fn kind(&self) -> &'static str {
        "local"
    }
}

/// Continuous-refill token bucket.
pub(crate) fn take_local(
    buckets: &Mutex<HashMap<String, (f64, u64)>>,
    key: &str,
    bucket: Bucket,
    now: u64,
) -> Take {
    let capacity = bucket.capacity.max(1) as f64;
    let per_ms = (bucket.per.as_millis().max(1)) as f64;
    let rate = capacity / per_ms; // tokens per ms
    let mut map = buckets.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() > 100_000 {
        // Bound memory: drop buckets that are full again.
        map.retain(|_, (tokens, last)| {
            *tokens + (now.saturating_sub(*last) as f64) * rate < capacity
        });
    }
    let (tokens, last) = map.entry(key.to_owned()).or_insert((capacity, now));
    let refilled = (*tokens + (now.saturating_sub(*last) as f64) * rate).min(capacity);
    if refilled >= 1.0 {
        *tokens = refilled - 1.0;
        *last = now;
        Take::Allowed
    } else {
        *tokens = refilled;
        *last = now;
        let wait = ((1.0 - refilled) / rate).ceil() as u64;
        Take::Limited {
            retry_after_ms: wait.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn idempotency_survives_reopen() {
        let dir = std::env::temp_dir().join(format!("aapgw-state-{}", uuid::Uuid::new_v4()));
        let path = dir.join("idem.jsonl");
        let ttl = Duration::from_secs(3600);
        {
            let s = LocalState::open(&path).unwrap();
            assert_eq!(s.idem_begin("k1", "fp", ttl).await.unwrap(), Begin::Claimed);
            assert_eq!(
                s.idem_begin("k1", "fp", ttl).await.unwrap(),
                Begin::InFlight
            );
            assert_eq!(
                s.idem_begin("k1", "other", ttl).await.unwrap(),
                Begin::Conflict
            );
            s.idem_complete("k1", "fp", &json!({"ok": 1}), ttl)
                .await
                .unwrap();
            assert_eq!(s.idem_begin("k2", "fp", ttl).await.unwrap(), Begin::Claimed);
        }
        let s = LocalState::open(&path).unwrap();
        assert_eq!(
            s.idem_begin("k1", "fp", ttl).await.unwrap(),
            Begin::Replay(json!({"ok": 1}))
        );
        assert_eq!(s.idem_begin("k1", "x", ttl).await.unwrap(), Begin::Conflict);
        assert_eq!(
            s.idem_begin("k2", "fp", ttl).await.unwrap(),
            Begin::Interrupted
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn bucket_limits_and_refills() {
        let m = Mutex::new(HashMap::new());
        let b = Bucket {
            capacity: 2,
            per: Duration::from_secs(2),
        };
        assert_eq!(take_local(&m, "a", b, 0), Take::Allowed);
        assert_eq!(take_local(&m, "a", b, 0), Take::Allowed);
        assert!(matches!(
            take_local(&m, "a", b, 0),
            Take::Limited {
                retry_after_ms: 1000
            }
        ));
        assert_eq!(take_local(&m, "a", b, 1000), Take::Allowed);
        assert_eq!(take_local(&m, "b", b, 0), Take::Allowed);
    }
}
