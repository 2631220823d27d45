//! One-time import of the file store (`leads.jsonl`, `leads.outbox.jsonl`, `idempotency.jsonl`)
//! into the lead store: one transaction per file set, then the files are renamed `*.imported`.
//!
//! Every line that cannot be read is logged (file and line number, never its
//! content) and counted in `aap_lead_store_unreadable_total`. A lead line
//! that a torn write left glued behind a fragment (`{"lead_id": "lead_…{"lead_id": …}`)
//! is recovered from its last `{"lead_id"`.

use super::sql::{Engine, Tx};
use super::{Imported, StoreError, StoreMetrics};
use crate::clock::now_unix_ms;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn imported_name(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".imported");
    PathBuf::from(s)
}

fn unreadable(m: &StoreMetrics, file: &Path, line: usize, what: &str) {
    m.unreadable.inc();
    tracing::error!(file = %file.display(), line, "legacy import: {what}");
}

fn lines(path: &Path) -> Result<Vec<String>, StoreError> {
    let text = std::fs::read(path).map_err(|e| StoreError(format!("{}: {e}", path.display())))?;
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .map(str::to_owned)
        .collect())
}

#[derive(Deserialize)]
struct IdemLine {
    k: String,
    fp: String,
    st: String,
    exp: u64,
    #[serde(default)]
    r: Option<Value>,
}

/// The file store's idempotency log (`<state.dir>/idempotency.jsonl`).
pub fn idempotency_log<E: Engine>(
    engine: &E,
    path: &Path,
    m: &StoreMetrics,
) -> Result<u64, StoreError> {
    if !path.is_file() {
        return Ok(0);
    }
    let mut last: HashMap<String, IdemLine> = HashMap::new();
    let all = lines(path)?;
    let count = all.len();
    for (i, line) in all.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<IdemLine>(&line) {
            Ok(rec) => {
                last.insert(rec.k.clone(), rec);
            }
            // A torn last line from a crash is expected; any other is not.
            Err(_) if i + 1 == count => unreadable(m, path, i + 1, "a torn last line was dropped"),
            Err(_) => unreadable(m, path, i + 1, "a line does not parse; dropped"),
        }
    }
    let now = now_unix_ms();
    let n = engine.tx(|tx| {
        let mut n = 0;
        for rec in last.values().filter(|r| r.exp > now && r.st != "abandoned") {
            let (state, result) = match rec.st.as_str() {
                "done" => ("done", rec.r.as_ref().map(Value::to_string)),
                _ => ("orphaned", None),
            };
            n += tx.exec(
                "INSERT INTO idem (key, fp, state, claim, lease_until, result, expires_at) VALUES ($1, $2, $3, NULL, NULL, $4, $5) ON CONFLICT (key) DO NOTHING",
                &[(&rec.k).into(), (&rec.fp).into(), state.into(), result.into(), rec.exp.into()],
            )?;
        }
        Ok(n)
    })?;
    std::fs::rename(path, imported_name(path))
        .map_err(|e| StoreError(format!("{}: {e}", path.display())))?;
    tracing::info!(file = %path.display(), records = n, "legacy idempotency log imported");
    Ok(n)
}

#[derive(Deserialize)]
struct Event {
    lead_id: String,
    sink: String,
    ev: String,
    #[serde(default)]
    attempts: u32,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    error: Option<String>,
    at: u64,
    #[serde(default)]
    next_at: Option<u64>,
}

/// One sink's delivery as the journal left it.
struct Progress {
    status: &'static str,
    attempts: u32,
    since: u64,
    next_at: u64,
    last_attempt: Option<u64>,
    class: Option<String>,
    error: Option<String>,
    done_at: Option<u64>,
}

impl Progress {
    fn new(since: u64) -> Progress {
        Progress {
            status: "pending",
            attempts: 0,
            since,
            next_at: since,
            last_attempt: None,
            class: None,
            error: None,
            done_at: None,
        }
    }

    fn apply(&mut self, e: &Event) {
        match e.ev.as_str() {
            "failed" => {
                self.attempts = e.attempts;
                self.next_at = e.next_at.unwrap_or(e.at);
                self.last_attempt = Some(e.at);
                self.class = e.class.clone();
                self.error = e.error.clone();
            }
            "delivered" => {
                self.status = "delivered";
                self.attempts = e.attempts;
                self.last_attempt = Some(e.at);
                self.done_at = Some(e.at);
            }
            "dead" => {
                self.status = "dead";
                self.attempts = e.attempts;
                self.last_attempt = Some(e.at);
                self.done_at = Some(e.at);
                self.class = e.class.clone();
                self.error = e.error.clone();
            }
            "redrive" => *self = Progress::new(e.at),
            _ => {}
        }
    }
}

/// A lead line, or the record a torn write left glued behind a fragment.
fn lead_of(line: &str) -> Option<(Value, bool)> {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(line) {
        return Some((v, false));
    }
    let at = line.rfind("{\"lead_id\"").filter(|i| *i > 0)?;
    match serde_json::from_str::<Value>(&line[at..]) {
        Ok(v @ Value::Object(_)) => Some((v, true)),
        _ => None,
    }
}

fn received_ms(rec: &Value) -> u64 {
    rec.get("received_at")
        .and_then(Value::as_str)
        .and_then(crate::clock::parse_rfc3339)
        .map(|t| u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
        .unwrap_or_else(now_unix_ms)
}

/// A tenant's leads file and its delivery journal (`<leads>.outbox.jsonl`).
pub fn leads_file<E: Engine>(
    engine: &E,
    tenant: &str,
    path: &Path,
    ttl: Duration,
    m: &StoreMetrics,
) -> Result<Imported, StoreError> {
    let journal = path.with_extension("outbox.jsonl");
    if !path.is_file() {
        return Ok(Imported::default());
    }
    let mut report = Imported::default();
    let mut events: HashMap<(String, String), Vec<Event>> = HashMap::new();
    if journal.is_file() {
        let all = lines(&journal)?;
        for (i, line) in all.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Event>(line) {
                Ok(e) => events
                    .entry((e.lead_id.clone(), e.sink.clone()))
                    .or_default()
                    .push(e),
                Err(_) => {
                    report.unreadable += 1;
                    unreadable(m, &journal, i + 1, "a journal line does not parse; dropped (the delivery it recorded is retried)");
                }
            }
        }
    }
    let mut leads = Vec::new();
    for (i, line) in lines(path)?.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match lead_of(line) {
            Some((rec, torn)) => {
                if torn {
                    report.unreadable += 1;
                    unreadable(
                        m,
                        path,
                        i + 1,
                        "a torn record was dropped; the lead written after it is recovered",
                    );
                }
                leads.push(rec);
            }
            None => {
                report.unreadable += 1;
                unreadable(m, path, i + 1, "a line does not parse as a lead; dropped");
            }
        }
    }
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let now = now_unix_ms();
    let counts = engine.tx(|tx: &mut dyn Tx| {
        let mut r = report;
        for rec in &leads {
            let Some(id) = rec.get("lead_id").and_then(Value::as_str) else {
                continue;
            };
            let received = received_ms(rec);
            let idem_ref = rec.get("idempotency_ref").and_then(Value::as_str);
            r.leads += tx.exec(
                "INSERT INTO leads (lead_id, tenant, received_at, idem_key, record) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (lead_id) DO NOTHING",
                &[id.into(), tenant.into(), received.into(), idem_ref.into(), rec.to_string().into()],
            )?;
            if let (Some(k), Some(resp)) = (idem_ref, rec.get("response")) {
                if received + ttl_ms > now {
                    r.idempotency += tx.exec(
                        "INSERT INTO idem (key, fp, state, claim, lease_until, result, expires_at) VALUES ($1, '', 'done', NULL, NULL, $2, $3) ON CONFLICT (key) DO NOTHING",
                        &[k.into(), resp.to_string().into(), (received + ttl_ms).into()],
                    )?;
                }
            }
            let sinks = rec.get("sinks").and_then(Value::as_array);
            for sink in sinks.into_iter().flatten().filter_map(Value::as_str) {
                let mut p = Progress::new(received);
                for e in events
                    .get(&(id.to_owned(), sink.to_owned()))
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    p.apply(e);
                }
                r.deliveries += tx.exec(
                    "INSERT INTO outbox (lead_id, sink, tenant, status, attempts, received_at, since, next_at, last_attempt, class, error, done_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (lead_id, sink) DO NOTHING",
                    &[
                        id.into(), sink.into(), tenant.into(), p.status.into(), p.attempts.into(), received.into(),
                        p.since.into(), p.next_at.into(), p.last_attempt.into(), p.class.into(), p.error.into(), p.done_at.into(),
                    ],
                )?;
            }
        }
        tx.exec(
            "INSERT INTO imports (path, at, leads) VALUES ($1, $2, $3) ON CONFLICT (path) DO NOTHING",
            &[path.display().to_string().into(), now.into(), r.leads.into()],
        )?;
        Ok(r)
    })?;
    // The fingerprint of an imported key is unknown (the file store kept it
    // in the idempotency log, imported separately): the log's record wins
    // when both exist, as it was inserted first.
    for p in [&journal, &path.to_path_buf()] {
        if p.is_file() {
            std::fs::rename(p, imported_name(p))
                .map_err(|e| StoreError(format!("{}: {e}", p.display())))?;
        }
    }
    tracing::info!(tenant, file = %path.display(), leads = counts.leads, deliveries = counts.deliveries, unreadable = counts.unreadable, "legacy leads file imported");
    Ok(counts)
}
