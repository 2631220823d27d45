//! The outbox's files: the leads file (each accepted lead, fsync'd before the answer, is the
//! enqueue) and the delivery journal beside it (one fsync'd line per attempt outcome).
//!
//! A lead line names the sinks it is owed to (`"sinks": [..]`, fixed at
//! acceptance); a journal line records what became of one sink's delivery:
//! `{"lead_id","sink","ev":"failed"|"delivered"|"dead"|"redrive","attempts","class","error","at","next_at"}`
//! (`at`/`next_at` in Unix milliseconds; `class`/`error` name the failure's
//! kind and status, never customer data). Replaying both files in order
//! rebuilds every lead's progress; a torn last line (crash mid-write) is skipped.

use super::super::Lead;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// The delivery journal of a leads file: `leads.jsonl` → `leads.outbox.jsonl`.
pub fn journal_path(leads_file: &Path) -> PathBuf {
    leads_file.with_extension("outbox.jsonl")
}

/// What happened to one sink's delivery of one lead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ev {
    /// An attempt failed and another is due at `next_at`.
    Failed,
    Delivered,
    /// No more attempts: a dead letter until redriven.
    Dead,
    /// An operator re-drove a dead letter: attempts start again.
    Redrive,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub lead_id: String,
    pub sink: String,
    pub ev: Ev,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<u64>,
}

/// Where one sink's delivery of one lead stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Pending,
    Delivered,
    Dead { at: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub status: Status,
    /// Attempts since acceptance or the last redrive.
    pub attempts: u32,
    /// When the age limit starts counting: acceptance, or the last redrive.
    pub since: u64,
    pub next_at: u64,
    pub last_attempt: Option<u64>,
    pub class: Option<String>,
    pub error: Option<String>,
}

impl Progress {
    pub fn new(since: u64) -> Progress {
        Progress {
            status: Status::Pending,
            attempts: 0,
            since,
            next_at: since,
            last_attempt: None,
            class: None,
            error: None,
        }
    }

    /// Fold one journal event in.
    pub fn apply(&mut self, e: &Event) {
        match e.ev {
            Ev::Failed => {
                self.attempts = e.attempts;
                self.next_at = e.next_at.unwrap_or(e.at);
                self.last_attempt = Some(e.at);
                self.class = e.class.clone();
                self.error = e.error.clone();
            }
            Ev::Delivered => {
                self.status = Status::Delivered;
                self.attempts = e.attempts;
                self.last_attempt = Some(e.at);
            }
            Ev::Dead => {
                self.status = Status::Dead { at: e.at };
                self.attempts = e.attempts;
                self.last_attempt = Some(e.at);
                self.class = e.class.clone();
                self.error = e.error.clone();
            }
            Ev::Redrive => {
                self.status = Status::Pending;
                self.attempts = 0;
                self.since = e.at;
                self.next_at = e.at;
            }
        }
    }
}

/// A lead still owed to at least one sink (pending or dead-lettered).
#[derive(Debug, Clone)]
pub struct Owed {
    pub lead: std::sync::Arc<Lead>,
    pub received: u64,
    pub sinks: BTreeMap<String, Progress>,
}

/// The lead line fields the outbox reads (the rest is the [`Lead`]).
#[derive(Deserialize)]
struct LeadLine {
    #[serde(default)]
    sinks: Vec<String>,
}

pub fn received_ms(lead: &Lead) -> u64 {
    crate::clock::parse_rfc3339(&lead.received_at)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as u64)
        .unwrap_or_else(crate::clock::now_unix_ms)
}

/// Replay the leads file and its journal: every lead not yet delivered to
/// every sink it is owed to, by lead id (acceptance order: ids are UUIDv7).
pub fn replay(leads_file: &Path) -> Result<BTreeMap<String, Owed>, String> {
    let mut progress: HashMap<String, HashMap<String, Vec<Event>>> = HashMap::new();
    let journal = journal_path(leads_file);
    if journal.exists() {
        let f = File::open(&journal).map_err(|e| format!("{}: {e}", journal.display()))?;
        for line in BufReader::new(f).lines() {
            let line = line.map_err(|e| format!("{}: {e}", journal.display()))?;
            let Ok(e) = serde_json::from_str::<Event>(&line) else {
                continue;
            };
            progress
                .entry(e.lead_id.clone())
                .or_default()
                .entry(e.sink.clone())
                .or_default()
                .push(e);
        }
    }
    let mut owed = BTreeMap::new();
    if !leads_file.exists() {
        return Ok(owed);
    }
    let f = File::open(leads_file).map_err(|e| format!("{}: {e}", leads_file.display()))?;
    for line in BufReader::new(f).lines() {
        let line = line.map_err(|e| format!("{}: {e}", leads_file.display()))?;
        let Ok(head) = serde_json::from_str::<LeadLine>(&line) else {
            continue;
        };
        if head.sinks.is_empty() {
            continue;
        }
        // Lines written before the outbox (no dealer) carry no `sinks` and
        // were skipped above; a line that still does not parse is skipped.
        let Ok(lead) = serde_json::from_str::<Lead>(&line) else {
            continue;
        };
        let received = received_ms(&lead);
        let events = progress.remove(&lead.lead_id).unwrap_or_default();
        let mut sinks = BTreeMap::new();
        for s in head.sinks {
            let mut p = Progress::new(received);
            for e in events.get(&s).map(Vec::as_slice).unwrap_or_default() {
                p.apply(e);
            }
            if p.status != Status::Delivered {
                sinks.insert(s, p);
            }
        }
        if !sinks.is_empty() {
            owed.insert(
                lead.lead_id.clone(),
                Owed {
                    lead: std::sync::Arc::new(lead),
                    received,
                    sinks,
                },
            );
        }
    }
    Ok(owed)
}

/// The append-only journal, each line fsync'd before it counts.
#[derive(Debug)]
pub struct Journal {
    file: File,
}

impl Journal {
    pub fn open(leads_file: &Path) -> Result<Journal, String> {
        let path = journal_path(leads_file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("{}: cannot create directory: {e}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("{}: cannot open for append: {e}", path.display()))?;
        Ok(Journal { file })
    }

    pub fn append(&mut self, e: &Event) -> Result<(), String> {
        let mut line = serde_json::to_vec(e).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .map_err(|e| format!("outbox journal write failed: {e}"))?;
        self.file
            .sync_data()
            .map_err(|e| format!("outbox journal fsync failed: {e}"))
    }
}
