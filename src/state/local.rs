//! In-process shared state: durable idempotency records (an fsync'd
//! append-only log, loaded and compacted under the state lock on first use)
//! and in-memory token buckets ([`super::buckets`]).

use super::buckets::Buckets;
use super::{lock, Begin, Bucket, Claim, Resolution, Resolved, SharedState, StateError, Take};
use crate::clock::now_unix_ms;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Phase {
    /// Intent recorded: the call was about to be sent. Logs written before
    /// intents existed call it `pending` (written at claim time); such a
    /// record is treated the same way, as an outcome that is unknown.
    #[serde(alias = "pending")]
    Sending,
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
    /// Claimed by a live attempt of this process.
    Pending {
        fp: String,
        claim: Claim,
        exp: u64,
        /// The intent record is in the log.
        intent: bool,
    },
    /// An attempt recorded its intent and ended without a result (an earlier
    /// process, or a timeout here): the outcome is unknown.
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
struct Loaded {
    log: Mutex<File>,
    idem: Mutex<HashMap<String, Slot>>,
}

/// The single-process store: a cheap handle on the shared log, so that fsync work can move
/// to the blocking pool with a clone of it.
#[derive(Debug, Clone)]
pub struct LocalState(Arc<LocalLog>);

impl std::ops::Deref for LocalState {
    type Target = LocalLog;
    fn deref(&self) -> &LocalLog {
        &self.0
    }
}

#[derive(Debug)]
pub struct LocalLog {
    path: PathBuf,
    /// The state directory whose lock must be held before the log is read or
    /// written.
    dir: PathBuf,
    loaded: OnceCell<Loaded>,
    buckets: Buckets,
}

impl LocalState {
    /// The idempotency log at `path`, opened on first use: nothing is read,
    /// created or written here (offline commands build the runtime too).
    pub fn open(path: &Path) -> Result<LocalState, String> {
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        lock::check_usable(&dir)?;
        Ok(LocalState(Arc::new(LocalLog {
            path: path.to_path_buf(),
            dir,
            loaded: OnceCell::new(),
            buckets: Buckets::default(),
        })))
    }
}

impl LocalLog {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The records, loaded once this process holds the state lock (an
    /// upgraded process waits, bounded, for the old one to release it).
    async fn loaded(self: &Arc<Self>) -> Result<&Loaded, StateError> {
        self.loaded
            .get_or_try_init(|| async {
                lock::ready(&self.dir, lock::UPGRADE_WAIT)
                    .await
                    .map_err(StateError)?;
                let me = self.clone();
                tokio::task::spawn_blocking(move || me.load())
                    .await
                    .map_err(|e| StateError(e.to_string()))?
                    .map_err(StateError)
            })
            .await
    }

    /// Read the log, drop expired and released records and rewrite it
    /// compactly (temp file, fsync, rename). Only under the state lock.
    fn load(&self) -> Result<Loaded, String> {
        let path = &self.path;
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
        Ok(Loaded {
            log: Mutex::new(log),
            idem: Mutex::new(idem),
        })
    }

    fn append(loaded: &Loaded, rec: &Record) -> Result<(), StateError> {
        let mut line = serde_json::to_vec(rec).map_err(|e| StateError(e.to_string()))?;
        line.push(b'\n');
        let mut f = loaded.log.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(&line)
            .and_then(|_| f.sync_data())
            .map_err(|e| StateError(format!("idempotency log write failed: {e}")))
    }

    async fn append_blocking(self: &Arc<Self>, rec: Record) -> Result<(), StateError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || match me.loaded.get() {
            Some(l) => Self::append(l, &rec),
            None => Err(StateError("idempotency log not loaded".into())),
        })
        .await
        .map_err(|e| StateError(e.to_string()))?
    }
}

fn slots(l: &Loaded) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
    l.idem.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl SharedState for LocalState {
    async fn idem_begin(
        &self,
        key: &str,
        fingerprints: &[&str],
        ttl: Duration,
        resend_ok: bool,
    ) -> Result<Begin, StateError> {
        let fingerprint = fingerprints.first().copied().unwrap_or_default();
        let same = |fp: &String| fingerprints.contains(&fp.as_str());
        let l = self.0.loaded().await?;
        let now = now_unix_ms();
        let mut map = slots(l);
        let pending = |intent: bool| {
            let claim = Claim::new();
            let slot = Slot::Pending {
                fp: fingerprint.to_owned(),
                claim: claim.clone(),
                exp: now + ttl.as_millis() as u64,
                intent,
            };
            (claim, slot)
        };
        match map.get(key) {
            Some(Slot::Done { fp, result, exp }) if *exp > now => Ok(if same(fp) {
                Begin::Replay(result.clone())
            } else {
                Begin::Conflict
            }),
            Some(Slot::Pending { fp, .. }) => Ok(if same(fp) {
                Begin::InFlight
            } else {
                Begin::Conflict
            }),
            Some(Slot::Orphaned { fp, exp }) if *exp > now => {
                if !same(fp) {
                    return Ok(Begin::Conflict);
                }
                if !resend_ok {
                    return Ok(Begin::Unknown);
                }
                let (claim, slot) = pending(true);
                map.insert(key.to_owned(), slot);
                Ok(Begin::Resend(claim))
            }
            _ => {
                // Nothing is written yet: a crash before the intent leaves no
                // trace, and nothing was sent.
                let (claim, slot) = pending(false);
                map.insert(key.to_owned(), slot);
                Ok(Begin::Claimed(claim))
            }
        }
    }

    async fn idem_intent(&self, key: &str, claim: &Claim) -> Result<bool, StateError> {
        let l = self.0.loaded().await?;
        let rec = match slots(l).get_mut(key) {
            Some(Slot::Pending {
                fp,
                claim: c,
                exp,
                intent,
            }) if c == claim => {
                *intent = true;
                Record {
                    k: key.to_owned(),
                    fp: fp.clone(),
                    st: Phase::Sending,
                    exp: *exp,
                    r: None,
                }
            }
            _ => return Ok(false),
        };
        self.0.append_blocking(rec).await?;
        Ok(true)
    }

    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StateError> {
        let l = self.0.loaded().await?;
        let exp = now_unix_ms() + ttl.as_millis() as u64;
        let rec = Record {
            k: key.to_owned(),
            fp: fingerprint.to_owned(),
            st: Phase::Done,
            exp,
            r: Some(result.clone()),
        };
        self.0.append_blocking(rec).await?;
        slots(l).insert(
            key.to_owned(),
            Slot::Done {
                fp: fingerprint.to_owned(),
                result: result.clone(),
                exp,
            },
        );
        Ok(())
    }

    async fn idem_abandon(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        let l = self.0.loaded().await?;
        let persisted = {
            let mut map = slots(l);
            match map.get(key) {
                Some(Slot::Pending {
                    claim: c, intent, ..
                }) if c == claim => {
                    let persisted = *intent;
                    map.remove(key);
                    persisted
                }
                _ => return Ok(()),
            }
        };
        if !persisted {
            return Ok(());
        }
        self.0
            .append_blocking(Record {
                k: key.to_owned(),
                fp: String::new(),
                st: Phase::Abandoned,
                exp: now_unix_ms() + 60_000,
                r: None,
            })
            .await
    }

    async fn idem_interrupt(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        let l = self.0.loaded().await?;
        let mut map = slots(l);
        let orphan = match map.get(key) {
            Some(Slot::Pending {
                fp,
                claim: c,
                exp,
                intent: true,
            }) if c == claim => Slot::Orphaned {
                fp: fp.clone(),
                exp: *exp,
            },
            Some(Slot::Pending {
                claim: c,
                intent: false,
                ..
            }) if c == claim => {
                // Nothing was sent under this claim.
                map.remove(key);
                return Ok(());
            }
            _ => return Ok(()),
        };
        map.insert(key.to_owned(), orphan);
        Ok(())
    }

    async fn idem_resolve(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Resolved, StateError> {
        let l = self.0.loaded().await?;
        let now = now_unix_ms();
        let (fp, exp) = match slots(l).get(key) {
            Some(Slot::Orphaned { fp, exp }) if *exp > now => (fp.clone(), *exp),
            Some(Slot::Done { exp, .. }) if *exp > now => return Ok(Resolved::AlreadyCompleted),
            Some(Slot::Pending { .. }) => return Ok(Resolved::InFlight),
            _ => return Ok(Resolved::NotFound),
        };
        match resolution {
            Resolution::Delivered(result) => {
                self.0
                    .append_blocking(Record {
                        k: key.to_owned(),
                        fp: fp.clone(),
                        st: Phase::Done,
                        exp,
                        r: Some(result.clone()),
                    })
                    .await?;
                slots(l).insert(
                    key.to_owned(),
                    Slot::Done {
                        fp,
                        result: result.clone(),
                        exp,
                    },
                );
            }
            Resolution::Released => {
                self.0
                    .append_blocking(Record {
                        k: key.to_owned(),
                        fp: String::new(),
                        st: Phase::Abandoned,
                        exp: now + 60_000,
                        r: None,
                    })
                    .await?;
                slots(l).remove(key);
            }
        }
        Ok(Resolved::Done)
    }

    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError> {
        Ok(self.buckets.take(key, bucket, now_unix_ms()))
    }

    fn kind(&self) -> &'static str {
        "local"
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
        let claimed = |b: Begin| match b {
            Begin::Claimed(c) => c,
            other => panic!("expected a claim, got {other:?}"),
        };
        {
            let s = LocalState::open(&path).unwrap();
            assert!(!path.exists(), "opening must not write");
            let _c1 = claimed(s.idem_begin("k1", &["fp"], ttl, false).await.unwrap());
            assert_eq!(
                s.idem_begin("k1", &["fp"], ttl, false).await.unwrap(),
                Begin::InFlight
            );
            assert_eq!(
                s.idem_begin("k1", &["other"], ttl, false).await.unwrap(),
                Begin::Conflict
            );
            s.idem_complete("k1", "fp", &json!({"ok": 1}), ttl)
                .await
                .unwrap();
            // k2: intent recorded, no result; k3: claimed, nothing sent.
            let c2 = claimed(s.idem_begin("k2", &["fp"], ttl, false).await.unwrap());
            assert!(s.idem_intent("k2", &c2).await.unwrap());
            assert!(!s.idem_intent("k2", &Claim::new()).await.unwrap());
            let _c3 = claimed(s.idem_begin("k3", &["fp"], ttl, false).await.unwrap());
        }
        let s = LocalState::open(&path).unwrap();
        assert_eq!(
            s.idem_begin("k1", &["fp"], ttl, false).await.unwrap(),
            Begin::Replay(json!({"ok": 1}))
        );
        assert_eq!(
            s.idem_begin("k1", &["x"], ttl, false).await.unwrap(),
            Begin::Conflict
        );
        // Intent without a result: unknown, never handed out again unless
        // the backend deduplicates.
        assert_eq!(
            s.idem_begin("k2", &["fp"], ttl, false).await.unwrap(),
            Begin::Unknown
        );
        assert_eq!(
            s.idem_begin("k2", &["fp"], ttl, false).await.unwrap(),
            Begin::Unknown
        );
        assert!(matches!(
            s.idem_begin("k2", &["fp"], ttl, true).await.unwrap(),
            Begin::Resend(_)
        ));
        // A claim that never recorded an intent sent nothing.
        assert!(matches!(
            s.idem_begin("k3", &["fp"], ttl, false).await.unwrap(),
            Begin::Claimed(_)
        ));
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn an_operator_resolves_an_unknown_key() {
        let dir = std::env::temp_dir().join(format!("aapgw-state-{}", uuid::Uuid::new_v4()));
        let path = dir.join("idem.jsonl");
        let ttl = Duration::from_secs(3600);
        {
            let s = LocalState::open(&path).unwrap();
            for k in ["a", "b"] {
                let Begin::Claimed(c) = s.idem_begin(k, &["fp"], ttl, false).await.unwrap() else {
                    panic!("not claimed")
                };
                assert!(s.idem_intent(k, &c).await.unwrap());
                s.idem_interrupt(k, &c).await.unwrap();
                assert_eq!(
                    s.idem_begin(k, &["fp"], ttl, false).await.unwrap(),
                    Begin::Unknown
                );
            }
            let r = json!({"data": {"lead_id": "lead_x"}});
            assert_eq!(
                s.idem_resolve("a", &Resolution::Delivered(r.clone()))
                    .await
                    .unwrap(),
                Resolved::Done
            );
            assert_eq!(
                s.idem_resolve("a", &Resolution::Released).await.unwrap(),
                Resolved::AlreadyCompleted
            );
            assert_eq!(
                s.idem_resolve("b", &Resolution::Released).await.unwrap(),
                Resolved::Done
            );
            assert_eq!(
                s.idem_resolve("zz", &Resolution::Released).await.unwrap(),
                Resolved::NotFound
            );
        }
        let s = LocalState::open(&path).unwrap();
        assert_eq!(
            s.idem_begin("a", &["fp"], ttl, false).await.unwrap(),
            Begin::Replay(json!({"data": {"lead_id": "lead_x"}}))
        );
        assert!(matches!(
            s.idem_begin("b", &["fp"], ttl, false).await.unwrap(),
            Begin::Claimed(_)
        ));
        std::fs::remove_dir_all(dir).ok();
    }
}
