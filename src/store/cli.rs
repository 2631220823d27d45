//! The operators' commands on the lead store: `leads list|show|export` (read the store
//! directly, the gateway running or not) and `state import` (the file store, once, offline).

use super::{Filter, LeadStore, Listed};
use crate::config::{Config, LeadStoreKind};
use serde_json::{json, Value};
use std::sync::Arc;

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Csv,
}

/// What `leads list|export` select.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub tenant: Option<String>,
    pub lead_id: Option<String>,
    /// `pending`, `delivered`, `dead` or `recorded` (no sinks).
    pub status: Option<String>,
    /// RFC 3339, inclusive / exclusive.
    pub since: Option<String>,
    pub until: Option<String>,
    pub limit: usize,
}

fn reader(cfg: &Config) -> Result<Arc<dyn LeadStore>, String> {
    Ok(match cfg.state.lead_store {
        LeadStoreKind::Sqlite => Arc::new(super::ops::SqlStore::offline(
            super::sqlite::Sqlite::reader(&super::sqlite_path(cfg))?,
        )),
        LeadStoreKind::Postgres => {
            let url = cfg
                .state
                .postgres_url
                .as_ref()
                .ok_or("state.postgres_url: required")?;
            Arc::new(super::ops::SqlStore::offline(
                super::postgres::Postgres::new(url.expose(), 1)?,
            ))
        }
    })
}

fn time_ms(key: &str, v: &Option<String>) -> Result<Option<u64>, String> {
    v.as_deref()
        .map(|s| {
            crate::clock::parse_rfc3339(s)
                .map(|t| u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
                .ok_or_else(|| format!("--{key}: an RFC 3339 time such as 2026-12-01T00:00:00Z"))
        })
        .transpose()
}

fn block<T>(f: impl std::future::Future<Output = T>) -> Result<T, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map(|rt| rt.block_on(f))
        .map_err(|e| e.to_string())
}

/// The leads `q` selects, oldest first.
pub fn select(cfg: &Config, q: &Query) -> Result<Vec<Listed>, String> {
    if let Some(s) = &q.status {
        if !["pending", "delivered", "dead", "recorded"].contains(&s.as_str()) {
            return Err("--status: pending, delivered, dead or recorded".into());
        }
    }
    let filter = Filter {
        tenant: q.tenant.clone(),
        lead_id: q.lead_id.clone(),
        since: time_ms("since", &q.since)?,
        until: time_ms("until", &q.until)?,
        limit: if q.status.is_some() { 0 } else { q.limit },
    };
    let store = reader(cfg)?;
    let mut out = block(async move { store.list(&filter).await })?.map_err(|e| e.to_string())?;
    if let Some(s) = &q.status {
        out.retain(|l| l.status() == s);
        if q.limit > 0 {
            out.truncate(q.limit);
        }
    }
    Ok(out)
}

/// A summary line per lead: no customer values.
pub fn summary(l: &Listed) -> Value {
    json!({
        "lead_id": l.lead_id,
        "tenant": l.tenant,
        "received_at": crate::clock::unix_ms_rfc3339(l.received_at),
        "status": l.status(),
        "deliveries": l.deliveries,
        "readable": l.record.is_some(),
    })
}

/// The whole lead: the record of acceptance plus its deliveries.
pub fn full(l: &Listed) -> Value {
    let mut v = summary(l);
    v["record"] = l.record.clone().unwrap_or(Value::Null);
    v
}

const CSV_COLUMNS: &[(&str, &str)] = &[
    ("first_name", "/request/customer/first_name"),
    ("last_name", "/request/customer/last_name"),
    ("email", "/request/customer/email"),
    ("phone", "/request/customer/phone"),
    ("vin", "/request/vehicle_of_interest/vin"),
    ("stock", "/request/vehicle_of_interest/stock"),
    ("message", "/request/message"),
    ("source_agent", "/request/source_agent/name"),
    ("idempotency_key", "/request/idempotency_key"),
];

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The leads as CSV (a header line, then one line per lead).
pub fn csv(leads: &[Listed], with_customer: bool) -> String {
    let mut head = vec!["lead_id", "tenant", "received_at", "status", "deliveries"];
    if with_customer {
        head.extend(CSV_COLUMNS.iter().map(|(n, _)| *n));
    }
    let mut out = head.join(",");
    out.push('\n');
    for l in leads {
        let deliveries: Vec<String> = l
            .deliveries
            .iter()
            .map(|d| format!("{}:{}", d.sink, d.status))
            .collect();
        let mut row = vec![
            l.lead_id.clone(),
            l.tenant.clone(),
            crate::clock::unix_ms_rfc3339(l.received_at),
            l.status().to_owned(),
            deliveries.join(" "),
        ];
        if with_customer {
            for (_, ptr) in CSV_COLUMNS {
                row.push(
                    l.record
                        .as_ref()
                        .and_then(|r| r.pointer(ptr))
                        .map(|v| match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .unwrap_or_default(),
                );
            }
        }
        let row: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// `state import`: the file store of `state.dir` (idempotency log, every
/// embedded tenant's leads file and delivery journal) into the lead store,
/// with the gateway stopped (this command takes the state lock).
pub fn import(cfg: &Config) -> Result<String, String> {
    let dir = cfg.state_dir();
    let locks = Arc::new(crate::state::lock::StateLocks::default());
    locks.hold(&dir)?;
    let store = super::open(cfg, &locks, &Arc::new(super::StoreMetrics::new()))?;
    let ttl = std::time::Duration::from_secs(cfg.state.idempotency_ttl_hours * 3600);
    let tenants: Vec<(String, std::path::PathBuf)> = cfg
        .tenants
        .iter()
        .filter_map(|t| match &t.backend {
            crate::config::BackendConfig::Embedded(e) => Some((
                t.id.clone(),
                e.leads_file
                    .as_ref()
                    .map(|p| cfg.resolve(p))
                    .unwrap_or_else(|| dir.join(&t.id).join("leads.jsonl")),
            )),
            _ => None,
        })
        .collect();
    block(async move {
        // Opening migrates and imports the idempotency log.
        store.counts(None).await.map_err(|e| e.to_string())?;
        let mut lines = Vec::new();
        for (tenant, path) in tenants {
            let n = store
                .import_leads_file(&tenant, &path, ttl)
                .await
                .map_err(|e| e.to_string())?;
            lines.push(format!(
                "{tenant}: {} leads, {} deliveries, {} idempotency records, {} unreadable lines",
                n.leads, n.deliveries, n.idempotency, n.unreadable
            ));
        }
        Ok::<_, String>(lines.join("\n"))
    })?
}
