//! The durable lead outbox: every consented lead owed to a tenant's sinks is delivered by one
//! worker per tenant, apart from requests, with retries, backoff and jitter, and dead letters.
//!
//! Durability: the lead path appends (and fsyncs) each accepted lead, with
//! the names of the sinks it is owed to, to the tenant's leads file before
//! answering `received`: that line is the enqueue. Each delivery outcome is
//! an fsync'd line of the journal beside it ([`journal`]). At start (and in
//! a process that takes the state over with `--upgrade`, once it holds the
//! state lock) the worker replays both, so pending leads resume and nothing
//! delivered is sent again, except a delivery cut by a crash between the
//! sink's answer and its journal line (sent once more, with the same lead id).
//!
//! One [`TenantOutbox`] per tenant and leads file lives for the whole
//! process in a registry: a config reload hands it the new sinks and
//! policy; the worker and its in-memory book carry on, so nothing is lost
//! or sent twice across generations. Workers run on a small runtime of
//! their own (`lead-outbox` threads), started by `run` only: `check` and
//! `catalog` build the sinks (to report config errors) but deliver nothing.

pub mod journal;

use super::{Lead, LeadSink, SinkError};
use crate::config::{LeadSinkConfig, OutboxConfig};
use journal::{Ev, Event, Journal, Owed, Progress, Status};
use prometheus::{IntCounterVec, IntGauge, Opts};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

/// One configured sink as the worker uses it.
#[derive(Debug, Clone)]
struct SinkSlot {
    name: String,
    kind: &'static str,
    sink: Arc<dyn LeadSink>,
}

#[derive(Debug, Clone)]
struct Policy {
    sinks: Vec<SinkSlot>,
    cfg: OutboxConfig,
}

/// What the worker knows: every lead still owed to a sink, by lead id.
#[derive(Debug, Default)]
struct Book {
    owed: BTreeMap<String, Owed>,
    /// (lead id, sink) deliveries running now.
    in_flight: HashSet<(String, String)>,
    loaded: bool,
}

/// A tenant's outbox (see the module docs).
#[derive(Debug)]
pub struct TenantOutbox {
    tenant: String,
    leads_file: PathBuf,
    state_dir: PathBuf,
    policy: Mutex<Arc<Policy>>,
    /// The policy of a generation being built (reload), until it is served.
    staged: Mutex<Option<Arc<Policy>>>,
    book: Mutex<Book>,
    journal: Mutex<Option<Journal>>,
    wake: Notify,
}

/// Why a tenant's outbox could not be set up (a config error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OutboxError(pub String);

// ---- the process registry and the delivery runtime ------------------------------------------

/// Every outbox of the process, by (tenant id, leads file).
type Registry = Mutex<HashMap<(String, PathBuf), Arc<TenantOutbox>>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(Default::default)
}

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// Start the delivery runtime (for `run`, before the first generation is
/// built). Without it, [`attach`] builds and checks the sinks only.
pub fn start_delivery() -> Result<(), String> {
    if RUNTIME.get().is_some() {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lead-outbox")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the lead outbox runtime: {e}"))?;
    let _ = RUNTIME.set(rt);
    LazyLock::force(&METRICS);
    Ok(())
}

/// The outbox of an embedded tenant whose leads go to `leads_file`: the
/// registered one (given the new sinks and policy: a reload), or a new one
/// whose worker starts now (with [`start_delivery`]). `None` when the tenant
/// has no sinks and never had an outbox in this process.
pub fn attach(
    tenant: &str,
    leads_file: &Path,
    state_dir: &Path,
    sinks: &[LeadSinkConfig],
    cfg: &OutboxConfig,
) -> Result<Option<Arc<TenantOutbox>>, OutboxError> {
    let mut slots = Vec::new();
    for s in sinks {
        let sink =
            super::sinks::build(s).map_err(|e| OutboxError(format!("backend.sinks: {e}")))?;
        slots.push(SinkSlot {
            name: s.name().to_owned(),
            kind: super::sinks::kind_of(s),
            sink,
        });
    }
    let policy = Arc::new(Policy {
        sinks: slots,
        cfg: cfg.clone(),
    });
    let key = (tenant.to_owned(), leads_file.to_path_buf());
    let Some(rt) = RUNTIME.get() else {
        // Offline (`check`, `catalog`): the sinks were built, nothing runs.
        if policy.sinks.is_empty() {
            return Ok(None);
        }
        return Ok(Some(Arc::new(TenantOutbox::new(key, state_dir, policy))));
    };
    let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(existing) = reg.get(&key) {
        // A reload: the new sinks apply once the generation is served
        // ([`commit_staged`]); a rejected reload changes nothing.
        *existing.staged.lock().unwrap_or_else(|e| e.into_inner()) = Some(policy);
        return Ok(Some(existing.clone()));
    }
    if policy.sinks.is_empty() {
        return Ok(None);
    }
    let ob = Arc::new(TenantOutbox::new(key.clone(), state_dir, policy));
    reg.insert(key, ob.clone());
    rt.spawn(ob.clone().work());
    Ok(Some(ob))
}

/// A reloaded generation is now served: its sinks and policy apply.
pub fn commit_staged() {
    for ob in registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
    {
        if let Some(p) = ob.staged.lock().unwrap_or_else(|e| e.into_inner()).take() {
            *ob.policy.lock().unwrap_or_else(|e| e.into_inner()) = p;
            ob.wake.notify_one();
        }
    }
}

/// A reload was rejected: forget what its build staged.
pub fn discard_staged() {
    for ob in registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
    {
        ob.staged.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// One tenant's build failed while the rest of its generation is served (a
/// tenant file refused on its own): forget what that build staged for the
/// tenant, so its serving version keeps its sinks; other tenants' staged
/// policies stay for [`commit_staged`].
pub fn discard_staged_of(tenant: &str) {
    for ob in registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .filter(|ob| ob.tenant == tenant)
    {
        ob.staged.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

impl TenantOutbox {
    fn new(key: (String, PathBuf), state_dir: &Path, policy: Arc<Policy>) -> TenantOutbox {
        TenantOutbox {
            tenant: key.0,
            leads_file: key.1,
            state_dir: state_dir.to_path_buf(),
            policy: Mutex::new(policy),
            staged: Mutex::new(None),
            book: Mutex::new(Book::default()),
            journal: Mutex::new(None),
            wake: Notify::new(),
        }
    }

    fn policy(&self) -> Arc<Policy> {
        self.policy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The names of the sinks a lead accepted now is owed to (written into
    /// its leads-file line before the answer).
    pub fn sink_names(&self) -> Vec<String> {
        self.policy().sinks.iter().map(|s| s.name.clone()).collect()
    }

    /// A lead whose line (naming `sinks`) is durably in the leads file: hand
    /// it to the worker.
    pub fn enqueued(&self, lead: Lead, sinks: &[String]) {
        if sinks.is_empty() {
            return;
        }
        let received = journal::received_ms(&lead);
        let owed = Owed {
            received,
            sinks: sinks
                .iter()
                .map(|s| (s.clone(), Progress::new(received)))
                .collect(),
            lead: Arc::new(lead),
        };
        self.book()
            .owed
            .entry(owed.lead.lead_id.clone())
            .or_insert(owed);
        self.wake.notify_one();
    }

    /// The worker: wait for the state lock, replay the files, then deliver
    /// what is due, forever.
    async fn work(self: Arc<Self>) {
        loop {
            match crate::state::lock::ready(&self.state_dir, crate::state::lock::UPGRADE_WAIT).await
            {
                Ok(()) => break,
                Err(e) => {
                    tracing::info!(tenant = %self.tenant, reason = %e, "lead outbox waits for the state directory");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
        loop {
            let path = self.leads_file.clone();
            let loaded = tokio::task::spawn_blocking(move || {
                let owed = journal::replay(&path)?;
                let j = Journal::open(&path)?;
                Ok::<_, String>((owed, j))
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
            match loaded {
                Ok((owed, j)) => {
                    *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(j);
                    let mut book = self.book();
                    let n = owed.len();
                    for (id, o) in owed {
                        // Leads enqueued meanwhile are in the file too: the
                        // replayed record (with its journal) wins.
                        book.owed.insert(id, o);
                    }
                    book.loaded = true;
                    drop(book);
                    tracing::info!(tenant = %self.tenant, leads_owed = n, "lead outbox resumed");
                    break;
                }
                Err(e) => {
                    tracing::error!(tenant = %self.tenant, error = %e, "lead outbox cannot read its files; retrying");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            }
        }
        let mut running = tokio::task::JoinSet::new();
        loop {
            let now = crate::clock::now_unix_ms();
            let (due, wake_at) = self.pick(now);
            for (lead, slot) in due {
                running.spawn(async move {
                    let r = slot.sink.deliver(&lead).await;
                    (lead, slot, r)
                });
            }
            let sleep =
                Duration::from_millis(wake_at.map_or(3_600_000, |t| t.saturating_sub(now).max(1)));
            tokio::select! {
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Ok((lead, slot, r)) = done {
                        self.record(&lead, &slot, r).await;
                    }
                }
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// The deliveries due now (marked in flight), and when the next one is.
    fn pick(&self, now: u64) -> (Vec<(Arc<Lead>, SinkSlot)>, Option<u64>) {
        let policy = self.policy();
        let mut book = self.book();
        let mut due = Vec::new();
        let mut wake: Option<u64> = None;
        let mut removed: Vec<(String, String)> = Vec::new();
        let Book {
            owed, in_flight, ..
        } = &mut *book;
        // A lead owed to a sink the configuration no longer has: dead letter.
        for (id, o) in owed.iter() {
            for (s, p) in &o.sinks {
                if p.status == Status::Pending
                    && !policy.sinks.iter().any(|slot| &slot.name == s)
                    && !in_flight.contains(&(id.clone(), s.clone()))
                {
                    removed.push((id.clone(), s.clone()));
                }
            }
        }
        for slot in &policy.sinks {
            let limit = if policy.cfg.ordered {
                1
            } else {
                policy.cfg.concurrency
            };
            let mut busy = in_flight.iter().filter(|(_, s)| s == &slot.name).count();
            for (id, o) in owed.iter() {
                let Some(p) = o.sinks.get(&slot.name) else {
                    continue;
                };
                if p.status != Status::Pending {
                    continue;
                }
                let key = (id.clone(), slot.name.clone());
                if in_flight.contains(&key) {
                    if policy.cfg.ordered {
                        break;
                    }
                    continue;
                }
                if busy >= limit {
                    break;
                }
                if p.next_at > now {
                    wake = Some(wake.map_or(p.next_at, |w| w.min(p.next_at)));
                    if policy.cfg.ordered {
                        break;
                    }
                    continue;
                }
                in_flight.insert(key);
                busy += 1;
                due.push((o.lead.clone(), slot.clone()));
                if policy.cfg.ordered {
                    break;
                }
            }
        }
        drop(book);
        for (id, s) in removed {
            self.settle(&id, &s, |p, at| Event {
                lead_id: id.clone(),
                sink: s.clone(),
                ev: Ev::Dead,
                attempts: p.attempts,
                class: Some("sink_removed".into()),
                error: Some("the sink is no longer configured for this tenant".into()),
                at,
                next_at: None,
            });
        }
        (due, wake)
    }

    /// Journal an event about (lead, sink) and apply it to the book.
    fn settle(&self, id: &str, sink: &str, make: impl FnOnce(&Progress, u64) -> Event) {
        let at = crate::clock::now_unix_ms();
        let event = {
            let book = self.book();
            let Some(p) = book.owed.get(id).and_then(|o| o.sinks.get(sink)) else {
                return;
            };
            make(p, at)
        };
        if let Some(j) = self
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            if let Err(e) = j.append(&event) {
                // The book still moves on; after a restart the lead's last
                // journalled state is what counts (at worst, one more delivery).
                tracing::error!(tenant = %self.tenant, lead_id = %id, sink, error = %e, "lead outbox journal write failed");
            }
        }
        let mut book = self.book();
        let mut done = false;
        if let Some(o) = book.owed.get_mut(id) {
            if let Some(p) = o.sinks.get_mut(sink) {
                p.apply(&event);
                if p.status == Status::Delivered {
                    o.sinks.remove(sink);
                }
            }
            done = o.sinks.is_empty();
        }
        if done {
            book.owed.remove(id);
        }
    }

    /// The outcome of one attempt: delivered, retry later, or dead letter.
    async fn record(self: &Arc<Self>, lead: &Lead, slot: &SinkSlot, r: Result<(), SinkError>) {
        let cfg = self.policy().cfg.clone();
        let id = lead.lead_id.clone();
        let name = slot.name.clone();
        // The journal fsync is blocking: keep it off the runtime's workers.
        let this = self.clone();
        let (class, error) = match &r {
            Ok(()) => (None, None),
            Err(SinkError::Transient(e)) => (Some("transient"), Some(e.clone())),
            Err(SinkError::Permanent(e)) => (Some("permanent"), Some(e.clone())),
        };
        let event_of = move |p: &Progress, at: u64| {
            let attempts = p.attempts + 1;
            match (class, error) {
                (None, _) => Event {
                    lead_id: id.clone(),
                    sink: name.clone(),
                    ev: Ev::Delivered,
                    attempts,
                    class: None,
                    error: None,
                    at,
                    next_at: None,
                },
                (Some(class), error) => {
                    let too_old = at >= p.since + cfg.max_age_hours * 3_600_000;
                    let dead = class == "permanent" || attempts >= cfg.max_attempts || too_old;
                    let class = if dead && class == "transient" {
                        if too_old {
                            "expired"
                        } else {
                            "exhausted"
                        }
                    } else {
                        class
                    };
                    Event {
                        lead_id: id.clone(),
                        sink: name.clone(),
                        ev: if dead { Ev::Dead } else { Ev::Failed },
                        attempts,
                        class: Some(class.to_owned()),
                        error,
                        at,
                        next_at: (!dead).then(|| at + backoff(&cfg, attempts)),
                    }
                }
            }
        };
        let (lead_id, sink) = (lead.lead_id.clone(), slot.name.clone());
        let ev = tokio::task::spawn_blocking(move || {
            let mut seen = None;
            this.settle(&lead_id, &sink, |p, at| {
                let e = event_of(p, at);
                seen = Some(e.ev.clone());
                e
            });
            this.book().in_flight.remove(&(lead_id, sink));
            seen
        })
        .await
        .ok()
        .flatten();
        let outcome = match ev {
            Some(Ev::Delivered) => "delivered",
            Some(Ev::Dead) => "dead_letter",
            _ => "retry",
        };
        match (&r, outcome) {
            (Ok(()), _) => {
                tracing::info!(tenant = %self.tenant, lead_id = %lead.lead_id, sink = %slot.name, "lead delivered")
            }
            (Err(e), "dead_letter") => {
                tracing::error!(tenant = %self.tenant, lead_id = %lead.lead_id, sink = %slot.name, error = %e, "lead dead-lettered")
            }
            (Err(e), _) => {
                tracing::warn!(tenant = %self.tenant, lead_id = %lead.lead_id, sink = %slot.name, error = %e, "lead delivery failed; will retry")
            }
        }
        METRICS
            .deliveries
            .with_label_values(&[slot.kind, outcome])
            .inc();
    }

    /// Dead letters of this tenant (no customer values).
    fn dead_letters(&self, out: &mut Vec<Value>) {
        let book = self.book();
        for (id, o) in &book.owed {
            for (s, p) in &o.sinks {
                if let Status::Dead { at } = p.status {
                    out.push(json!({
                        "lead_id": id,
                        "tenant": self.tenant,
                        "sink": s,
                        "attempts": p.attempts,
                        "last_error_class": p.class,
                        "last_error": p.error,
                        "received_at": o.lead.received_at,
                        "last_attempt_at": p.last_attempt.map(rfc3339),
                        "dead_at": rfc3339(at),
                    }));
                }
            }
        }
    }

    /// Pending deliveries, dead letters and the oldest pending acceptance time.
    fn counts(&self) -> (i64, i64, Option<u64>) {
        let book = self.book();
        let (mut pending, mut dead, mut oldest) = (0, 0, None::<u64>);
        for o in book.owed.values() {
            for p in o.sinks.values() {
                match p.status {
                    Status::Pending => {
                        pending += 1;
                        oldest = Some(oldest.map_or(o.received, |x| x.min(o.received)));
                    }
                    Status::Dead { .. } => dead += 1,
                    Status::Delivered => {}
                }
            }
        }
        (pending, dead, oldest)
    }

    /// Re-drive this tenant's dead letters (one lead, or all); returns how
    /// many (lead, sink) deliveries start again.
    fn redrive(&self, lead_id: Option<&str>) -> usize {
        let targets: Vec<(String, String)> = {
            let book = self.book();
            book.owed
                .iter()
                .filter(|(id, _)| lead_id.is_none_or(|want| want == id.as_str()))
                .flat_map(|(id, o)| {
                    o.sinks
                        .iter()
                        .filter(|(_, p)| matches!(p.status, Status::Dead { .. }))
                        .map(move |(s, _)| (id.clone(), s.clone()))
                })
                .collect()
        };
        for (id, s) in &targets {
            self.settle(id, s, |_, at| Event {
                lead_id: id.clone(),
                sink: s.clone(),
                ev: Ev::Redrive,
                attempts: 0,
                class: None,
                error: None,
                at,
                next_at: None,
            });
        }
        if !targets.is_empty() {
            self.wake.notify_one();
        }
        targets.len()
    }
}

/// Exponential backoff with jitter: the `attempts`-th retry waits a random
/// time between half and all of `initial * 2^(attempts-1)`, capped at `max`.
fn backoff(cfg: &OutboxConfig, attempts: u32) -> u64 {
    let exp = attempts.saturating_sub(1).min(40);
    let full = cfg
        .initial_backoff_ms
        .saturating_mul(1u64 << exp)
        .min(cfg.max_backoff_ms)
        .max(1);
    full / 2 + fastrand::u64(0..=full - full / 2)
}

fn rfc3339(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

// ---- operators: metrics and the admin endpoints ---------------------------------------------

struct OutboxMetrics {
    deliveries: IntCounterVec,
    pending: IntGauge,
    dead: IntGauge,
    oldest: IntGauge,
}

fn gauge(name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
    crate::metrics::METRICS
        .registry
        .register(Box::new(g.clone()))
        .unwrap_or_else(|e| panic!("register {name}: {e}"));
    g
}

/// No tenant label (a platform may serve 10,000 tenants): the admin
/// endpoint names the tenants; `sink` is the sink kind, `outcome` one of
/// `delivered`, `retry`, `dead_letter`.
static METRICS: LazyLock<OutboxMetrics> = LazyLock::new(|| {
    let deliveries = IntCounterVec::new(
        Opts::new(
            "aap_lead_deliveries_total",
            "Lead delivery attempts by sink kind and outcome (delivered, retry, dead_letter)",
        ),
        &["sink", "outcome"],
    )
    .unwrap_or_else(|e| panic!("metric: {e}"));
    crate::metrics::METRICS
        .registry
        .register(Box::new(deliveries.clone()))
        .unwrap_or_else(|e| panic!("register: {e}"));
    OutboxMetrics {
        deliveries,
        pending: gauge(
            "aap_lead_outbox_pending",
            "Lead deliveries (one per lead and sink) waiting in the outbox",
        ),
        dead: gauge(
            "aap_lead_dead_letters",
            "Lead deliveries (one per lead and sink) in dead letter, waiting for an operator",
        ),
        oldest: gauge(
            "aap_lead_outbox_oldest_pending_seconds",
            "Age of the oldest lead still pending delivery (0 when none)",
        ),
    }
});

/// Bring the outbox gauges up to date (called before each `/metrics` scrape).
pub fn refresh_gauges() {
    if RUNTIME.get().is_none() {
        return;
    }
    let all: Vec<Arc<TenantOutbox>> = registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    let (mut pending, mut dead, mut oldest) = (0, 0, None::<u64>);
    for ob in all {
        let (p, d, o) = ob.counts();
        pending += p;
        dead += d;
        if let Some(o) = o {
            oldest = Some(oldest.map_or(o, |x| x.min(o)));
        }
    }
    let m = &*METRICS;
    m.pending.set(pending);
    m.dead.set(dead);
    let now = crate::clock::now_unix_ms();
    m.oldest
        .set(oldest.map_or(0, |o| (now.saturating_sub(o) / 1000) as i64));
}

fn outboxes_of(tenant: Option<&str>) -> Vec<Arc<TenantOutbox>> {
    let mut v: Vec<Arc<TenantOutbox>> = registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .filter(|o| tenant.is_none_or(|t| t == o.tenant))
        .cloned()
        .collect();
    v.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    v
}

fn bad(reason: &str) -> (u16, Value) {
    (400, json!({"error": "bad_request", "reason": reason}))
}

/// Query parameters of the admin endpoints: values restricted to characters
/// that need no percent-decoding (tenant ids and lead ids are such).
fn params(query: Option<&str>, allowed: &[&str]) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !allowed.contains(&k) {
            return Err(format!(
                "unknown parameter; allowed: {}",
                allowed.join(", ")
            ));
        }
        if v.is_empty()
            || v.len() > 128
            || !v
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
        {
            return Err(format!("{k}: 1-128 of A-Z a-z 0-9 . _ : -"));
        }
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

/// `GET /admin/leads/dead-letters[?tenant=<id>]`: every dead letter
/// (lead id, tenant, sink, attempts, last error class and status, times).
pub fn admin_dead_letters(query: Option<&str>) -> (u16, Value) {
    let p = match params(query, &["tenant"]) {
        Ok(p) => p,
        Err(e) => return bad(&e),
    };
    let tenant = p.get("tenant").map(String::as_str);
    let mut list = Vec::new();
    let mut pending = 0;
    for ob in outboxes_of(tenant) {
        ob.dead_letters(&mut list);
        pending += ob.counts().0;
    }
    (200, json!({"dead_letters": list, "pending": pending}))
}

/// `POST /admin/leads/redrive?tenant=<id>&lead_id=<id>` (one lead) or
/// `?tenant=<id>&all=true` (every dead letter of the tenant).
pub fn admin_redrive(query: Option<&str>) -> (u16, Value) {
    let p = match params(query, &["tenant", "lead_id", "all"]) {
        Ok(p) => p,
        Err(e) => return bad(&e),
    };
    let Some(tenant) = p.get("tenant") else {
        return bad("tenant: required");
    };
    let lead_id = match (p.get("lead_id"), p.get("all").map(String::as_str)) {
        (Some(id), None) => Some(id.as_str()),
        (None, Some("true")) => None,
        _ => return bad("give lead_id=<lead id> or all=true, not both"),
    };
    let obs = outboxes_of(Some(tenant));
    if obs.is_empty() {
        return (
            404,
            json!({"error": "not_found", "reason": "no lead outbox for this tenant (not an embedded tenant with sinks)"}),
        );
    }
    let n: usize = obs.iter().map(|o| o.redrive(lead_id)).sum();
    if n == 0 && lead_id.is_some() {
        return (
            404,
            json!({"error": "not_found", "reason": "no dead letter with this lead id in this tenant"}),
        );
    }
    (
        200,
        json!({"status": "redriven", "tenant": tenant, "deliveries": n}),
    )
}

#[cfg(test)]
mod tests {
    use super::journal::{self, Ev, Event, Journal, Status};
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let cfg = OutboxConfig {
            initial_backoff_ms: 100,
            max_backoff_ms: 1_000,
            ..OutboxConfig::default()
        };
        for _ in 0..200 {
            let first = backoff(&cfg, 1);
            assert!((50..=100).contains(&first), "{first}");
            let third = backoff(&cfg, 3);
            assert!((200..=400).contains(&third), "{third}");
            let late = backoff(&cfg, 40);
            assert!((500..=1_000).contains(&late), "{late}");
        }
    }

    fn lead_line(id: &str, sinks: &[&str]) -> String {
        let mut v = json!({
            "lead_id": id, "tenant": "t", "received_at": "2026-12-05T17:00:00Z",
            "request": {}, "dealer": {"name": "D"}, "vehicle": null, "response": {},
        });
        if !sinks.is_empty() {
            v["sinks"] = json!(sinks);
        }
        v.to_string()
    }

    #[test]
    fn replay_keeps_what_is_owed_and_skips_torn_lines() {
        let dir =
            std::env::temp_dir().join(format!("aapgw-outbox-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let leads = dir.join("leads.jsonl");
        let text = [
            lead_line("lead_a", &["crm", "mail"]),
            lead_line("lead_b", &["crm"]),
            lead_line("lead_old", &[]),
            lead_line("lead_c", &["crm"]),
            "{\"lead_id\": \"lead_torn".to_owned(),
        ]
        .join("\n");
        std::fs::write(&leads, text).unwrap();
        let mut j = Journal::open(&leads).unwrap();
        let ev = |id: &str, sink: &str, ev: Ev, attempts: u32| Event {
            lead_id: id.into(),
            sink: sink.into(),
            ev,
            attempts,
            class: Some("transient".into()),
            error: Some("HTTP 503".into()),
            at: 1_000,
            next_at: Some(2_000),
        };
        j.append(&ev("lead_a", "crm", Ev::Delivered, 1)).unwrap();
        j.append(&ev("lead_b", "crm", Ev::Failed, 1)).unwrap();
        j.append(&ev("lead_b", "crm", Ev::Delivered, 2)).unwrap();
        j.append(&ev("lead_c", "crm", Ev::Dead, 3)).unwrap();
        let owed = journal::replay(&leads).unwrap();
        // lead_a still owes `mail`, lead_b is done, lead_old predates sinks,
        // lead_c is a dead letter.
        assert_eq!(owed.keys().collect::<Vec<_>>(), ["lead_a", "lead_c"]);
        assert_eq!(owed["lead_a"].sinks.keys().collect::<Vec<_>>(), ["mail"]);
        let c = &owed["lead_c"].sinks["crm"];
        assert_eq!(c.status, Status::Dead { at: 1_000 });
        assert_eq!(c.attempts, 3);
        // A redrive starts over.
        j.append(&Event {
            ev: Ev::Redrive,
            at: 5_000,
            ..ev("lead_c", "crm", Ev::Redrive, 0)
        })
        .unwrap();
        let owed = journal::replay(&leads).unwrap();
        let c = &owed["lead_c"].sinks["crm"];
        assert_eq!(
            (c.status.clone(), c.attempts, c.since),
            (Status::Pending, 0, 5_000)
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn admin_parameters_are_checked() {
        assert_eq!(admin_dead_letters(Some("tenant=a b")).0, 400);
        assert_eq!(admin_dead_letters(Some("who=x")).0, 400);
        assert_eq!(admin_redrive(Some("lead_id=x")).0, 400);
        assert_eq!(admin_redrive(Some("tenant=t&lead_id=x&all=true")).0, 400);
        assert_eq!(admin_redrive(Some("tenant=nobody&all=true")).0, 404);
    }
}
