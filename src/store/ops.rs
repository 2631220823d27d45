//! The lead store's statements, once for both engines: idempotency claims, the accept
//! transaction, outbox leases and outcomes, dead letters, counts, retention and listing.

use super::sql::{Arg, Engine, Row, Tx};
use super::*;
use crate::clock::now_unix_ms;
use std::path::PathBuf;

/// [`LeadStore`] on an [`Engine`].
#[derive(Debug)]
pub struct SqlStore<E: Engine> {
    engine: Arc<E>,
    /// The file store's idempotency log, imported once.
    legacy_idem: Option<PathBuf>,
    /// The state directory whose lock this process must hold before it
    /// writes (`None`: an offline reader).
    state_dir: Option<PathBuf>,
    /// Where this process holds `state_dir` (`None`: an offline reader).
    locks: Option<Arc<crate::state::lock::StateLocks>>,
    /// Unreadable records are counted here.
    metrics: Arc<StoreMetrics>,
    ready: tokio::sync::OnceCell<()>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<E: Engine> SqlStore<E> {
    pub fn new(
        engine: E,
        legacy_idem: PathBuf,
        state_dir: PathBuf,
        locks: Arc<crate::state::lock::StateLocks>,
        metrics: Arc<StoreMetrics>,
    ) -> SqlStore<E> {
        SqlStore {
            engine: Arc::new(engine),
            legacy_idem: Some(legacy_idem),
            state_dir: Some(state_dir),
            locks: Some(locks),
            metrics,
            ready: tokio::sync::OnceCell::new(),
        }
    }

    /// A reader for offline commands (`leads list|show|export`): no lock, no
    /// import, no recovery; migrations still run (they are idempotent).
    pub fn offline(engine: E) -> SqlStore<E> {
        SqlStore {
            engine: Arc::new(engine),
            legacy_idem: None,
            state_dir: None,
            locks: None,
            metrics: Arc::new(StoreMetrics::new()),
            ready: tokio::sync::OnceCell::new(),
        }
    }

    /// First use: wait for the state lock, migrate, recover what a dead
    /// process of this state directory left claimed or leased (SQLite: this
    /// process is the only writer), import the legacy idempotency log.
    async fn ready(&self) -> Result<(), StoreError> {
        self.ready
            .get_or_try_init(|| async {
                if let (Some(dir), Some(locks)) = (&self.state_dir, &self.locks) {
                    locks
                        .ready(dir, crate::state::lock::UPGRADE_WAIT)
                        .await
                        .map_err(StoreError)?;
                }
                let engine = self.engine.clone();
                let legacy = self.legacy_idem.clone();
                let metrics = self.metrics.clone();
                let exclusive = self.state_dir.is_some() && engine.kind() == "sqlite";
                tokio::task::spawn_blocking(move || {
                    engine.tx(|tx| super::schema::migrate(tx, engine.kind()))?;
                    if exclusive {
                        engine.tx(|tx| {
                            tx.exec("DELETE FROM idem WHERE state = 'claimed'", &[])?;
                            tx.exec("UPDATE idem SET state = 'orphaned', claim = NULL, lease_until = NULL WHERE state = 'sending'", &[])?;
                            tx.exec("UPDATE outbox SET lease_owner = NULL, lease_until = NULL WHERE lease_owner IS NOT NULL", &[])?;
                            Ok(())
                        })?;
                    }
                    if let Some(path) = legacy {
                        super::import::idempotency_log(engine.as_ref(), &path, &metrics)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .await
                .map_err(|e| StoreError(e.to_string()))?
            })
            .await
            .map(|_| ())
    }

    /// Run `f` in one transaction on a blocking thread.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.ready().await?;
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || engine.tx(f))
            .await
            .map_err(|e| StoreError(e.to_string()))?
    }

    /// The engine, for the legacy import (a blocking caller).
    pub fn engine(&self) -> &Arc<E> {
        &self.engine
    }
}

fn claim_row(tx: &mut dyn Tx, key: &str) -> Result<Option<Row>, StoreError> {
    Ok(tx
        .query(
            "SELECT fp, state, claim, lease_until, result, expires_at FROM idem WHERE key = $1 FOR UPDATE",
            &[key.into()],
        )?
        .into_iter()
        .next())
}

fn parse(m: &StoreMetrics, text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        m.unreadable.inc();
        tracing::error!("lead store: a stored idempotency result does not parse; answered as null");
        Value::Null
    })
}

const DELIVERY_COLS: &str = "o.lead_id, o.attempts, o.since, o.next_at, o.lease_until, l.record";

/// A leased row's lead; an unreadable record is dead-lettered (class
/// `unreadable`), logged and counted, never skipped silently.
fn leased(
    m: &StoreMetrics,
    tx: &mut dyn Tx,
    r: &Row,
    sink: &str,
    now: u64,
) -> Result<Option<Leased>, StoreError> {
    let id = r.t(0);
    match serde_json::from_str::<Lead>(&r.t(5)) {
        Ok(lead) => Ok(Some(Leased {
            lead: Arc::new(lead),
            sink: sink.to_owned(),
            attempts: u32::try_from(r.i(1)).unwrap_or(0),
            since: r.u(2),
        })),
        Err(e) => {
            m.unreadable.inc();
            tracing::error!(lead_id = %id, sink, error = %e, "lead store: a lead record cannot be read; dead-lettered as unreadable");
            tx.exec(
                "UPDATE outbox SET status = 'dead', class = 'unreadable', error = 'the stored lead record cannot be read', done_at = $3, lease_owner = NULL, lease_until = NULL WHERE lead_id = $1 AND sink = $2",
                &[id.into(), sink.into(), now.into()],
            )?;
            Ok(None)
        }
    }
}

#[async_trait]
impl<E: Engine> LeadStore for SqlStore<E> {
    async fn idem_begin(
        &self,
        key: &str,
        fingerprints: &[&str],
        ttl: Duration,
        resend_ok: bool,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        let key = key.to_owned();
        let fps: Vec<String> = fingerprints.iter().map(|s| (*s).to_owned()).collect();
        let (ttl, lease) = (ms(ttl), ms(lease));
        let m = self.metrics.clone();
        self.run(move |tx| {
            let now = now_unix_ms();
            let claim = Claim::new();
            let fp = fps.first().cloned().unwrap_or_default();
            let n = tx.exec(
                "INSERT INTO idem (key, fp, state, claim, lease_until, result, expires_at) VALUES ($1, $2, 'claimed', $3, $4, NULL, $5) ON CONFLICT (key) DO NOTHING",
                &[(&key).into(), (&fp).into(), (&claim.0).into(), (now + lease).into(), (now + ttl).into()],
            )?;
            if n == 1 {
                return Ok(Begin::Claimed(claim));
            }
            let Some(row) = claim_row(tx, &key)? else {
                // Removed between the two statements: busy, try again.
                return Ok(Begin::InFlight);
            };
            // An imported record without its fingerprint matches any payload.
            let same = row.t(0).is_empty() || fps.contains(&row.t(0));
            let state = row.t(1);
            let live = row.u(3) > now;
            let expired = row.u(5) <= now;
            let take = |tx: &mut dyn Tx, state: &str, fp: &str| {
                tx.exec(
                    "UPDATE idem SET fp = $2, state = $3, claim = $4, lease_until = $5, result = NULL, expires_at = $6 WHERE key = $1",
                    &[(&key).into(), fp.into(), state.into(), (&claim.0).into(), (now + lease).into(), (now + ttl).into()],
                )
            };
            Ok(match state.as_str() {
                _ if expired => {
                    take(tx, "claimed", &fp)?;
                    Begin::Claimed(claim)
                }
                "done" if same => Begin::Replay(parse(&m, &row.t(4))),
                "done" => Begin::Conflict,
                "claimed" | "sending" if live => {
                    if same {
                        Begin::InFlight
                    } else {
                        Begin::Conflict
                    }
                }
                // A claim whose holder ended before recording its intent:
                // nothing was sent under it.
                "claimed" => {
                    take(tx, "claimed", &fp)?;
                    Begin::Claimed(claim)
                }
                // Intent recorded, no result: the outcome is unknown.
                _ if !same => Begin::Conflict,
                _ if !resend_ok => Begin::Unknown,
                _ => {
                    let old_fp = row.t(0);
                    take(tx, "sending", &old_fp)?;
                    Begin::Resend(claim)
                }
            })
        })
        .await
    }

    async fn idem_intent(
        &self,
        key: &str,
        claim: &Claim,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let (key, claim, lease) = (key.to_owned(), claim.0.clone(), ms(lease));
        self.run(move |tx| {
            let n = tx.exec(
                "UPDATE idem SET state = 'sending', lease_until = $3 WHERE key = $1 AND claim = $2 AND state IN ('claimed', 'sending')",
                &[key.into(), claim.into(), (now_unix_ms() + lease).into()],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let (key, fp, result, ttl) = (
            key.to_owned(),
            fingerprint.to_owned(),
            result.to_string(),
            ms(ttl),
        );
        self.run(move |tx| {
            tx.exec(
                "INSERT INTO idem (key, fp, state, claim, lease_until, result, expires_at) VALUES ($1, $2, 'done', NULL, NULL, $3, $4) \
                 ON CONFLICT (key) DO UPDATE SET fp = excluded.fp, state = 'done', claim = NULL, lease_until = NULL, result = excluded.result, expires_at = excluded.expires_at WHERE idem.state <> 'done'",
                &[key.into(), fp.into(), result.into(), (now_unix_ms() + ttl).into()],
            )?;
            Ok(())
        })
        .await
    }

    async fn idem_abandon(&self, key: &str, claim: &Claim) -> Result<(), StoreError> {
        let (key, claim) = (key.to_owned(), claim.0.clone());
        self.run(move |tx| {
            tx.exec(
                "DELETE FROM idem WHERE key = $1 AND claim = $2 AND state IN ('claimed', 'sending')",
                &[key.into(), claim.into()],
            )?;
            Ok(())
        })
        .await
    }

    async fn idem_interrupt(&self, key: &str, claim: &Claim) -> Result<(), StoreError> {
        let (key, claim) = (key.to_owned(), claim.0.clone());
        self.run(move |tx| {
            tx.exec(
                "UPDATE idem SET state = 'orphaned', claim = NULL, lease_until = NULL WHERE key = $1 AND claim = $2 AND state = 'sending'",
                &[(&key).into(), (&claim).into()],
            )?;
            tx.exec(
                "DELETE FROM idem WHERE key = $1 AND claim = $2 AND state = 'claimed'",
                &[key.into(), claim.into()],
            )?;
            Ok(())
        })
        .await
    }

    async fn idem_resolve(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Resolved, StoreError> {
        let (key, resolution) = (key.to_owned(), resolution.clone());
        self.run(move |tx| {
            let now = now_unix_ms();
            let Some(row) = claim_row(tx, &key)? else {
                return Ok(Resolved::NotFound);
            };
            let state = row.t(1);
            if row.u(5) <= now {
                return Ok(Resolved::NotFound);
            }
            match state.as_str() {
                "done" => return Ok(Resolved::AlreadyCompleted),
                "claimed" | "sending" if row.u(3) > now => return Ok(Resolved::InFlight),
                "claimed" => return Ok(Resolved::NotFound),
                _ => {}
            }
            match resolution {
                Resolution::Delivered(result) => tx.exec(
                    "UPDATE idem SET state = 'done', claim = NULL, lease_until = NULL, result = $2 WHERE key = $1",
                    &[key.into(), result.to_string().into()],
                )?,
                Resolution::Released => {
                    tx.exec("DELETE FROM idem WHERE key = $1", &[key.into()])?
                }
            };
            Ok(Resolved::Done)
        })
        .await
    }

    async fn accept(&self, a: Accept) -> Result<Accepted, StoreError> {
        let m = self.metrics.clone();
        self.run(move |tx| {
            if let Some((key, claim)) = &a.idem {
                match claim_row(tx, key)? {
                    Some(row) if row.t(1) == "done" => return Ok(Accepted::Replay(parse(&m, &row.t(4)))),
                    Some(row) if row.ot(2).as_deref() == Some(claim.0.as_str()) => {}
                    _ => return Ok(Accepted::Lost),
                }
            }
            tx.exec(
                "INSERT INTO leads (lead_id, tenant, received_at, idem_key, record) VALUES ($1, $2, $3, $4, $5)",
                &[
                    (&a.lead_id).into(),
                    (&a.tenant).into(),
                    a.received_ms.into(),
                    a.idem.as_ref().map(|(k, _)| k.clone()).into(),
                    a.record.to_string().into(),
                ],
            )?;
            for sink in &a.sinks {
                tx.exec(
                    "INSERT INTO outbox (lead_id, sink, tenant, status, attempts, received_at, since, next_at) VALUES ($1, $2, $3, 'pending', 0, $4, $4, $4)",
                    &[(&a.lead_id).into(), sink.into(), (&a.tenant).into(), a.received_ms.into()],
                )?;
            }
            if let Some((key, _)) = &a.idem {
                tx.exec(
                    "UPDATE idem SET state = 'done', claim = NULL, lease_until = NULL, result = $2, expires_at = $3 WHERE key = $1",
                    &[key.into(), a.response.to_string().into(), (now_unix_ms() + ms(a.ttl)).into()],
                )?;
            }
            Ok(Accepted::Recorded)
        })
        .await
    }

    async fn lease(
        &self,
        tenant: &str,
        sink: &str,
        ordered: bool,
        limit: usize,
        owner: &str,
        lease: Duration,
    ) -> Result<(Vec<Leased>, Option<u64>), StoreError> {
        let (tenant, sink, owner, lease) = (
            tenant.to_owned(),
            sink.to_owned(),
            owner.to_owned(),
            ms(lease),
        );
        let m = self.metrics.clone();
        self.run(move |tx| {
            let now = now_unix_ms();
            let args: Vec<Arg> = vec![(&tenant).into(), (&sink).into(), now.into(), (limit as u64).into()];
            let rows = if ordered {
                let head = tx.query(
                    &format!("SELECT {DELIVERY_COLS} FROM outbox o JOIN leads l ON l.lead_id = o.lead_id WHERE o.tenant = $1 AND o.sink = $2 AND o.status = 'pending' ORDER BY o.lead_id LIMIT 1 FOR UPDATE OF o"),
                    &args[..2],
                )?;
                match head.into_iter().next() {
                    None => return Ok((Vec::new(), None)),
                    Some(r) if r.u(4) > now => return Ok((Vec::new(), Some(r.u(4)))),
                    Some(r) if r.u(3) > now => return Ok((Vec::new(), Some(r.u(3)))),
                    Some(r) => vec![r],
                }
            } else {
                tx.query(
                    &format!("SELECT {DELIVERY_COLS} FROM outbox o JOIN leads l ON l.lead_id = o.lead_id WHERE o.tenant = $1 AND o.sink = $2 AND o.status = 'pending' AND o.next_at <= $3 AND (o.lease_until IS NULL OR o.lease_until < $3) ORDER BY o.lead_id LIMIT $4 FOR UPDATE OF o SKIP LOCKED"),
                    &args,
                )?
            };
            let mut out = Vec::new();
            for r in &rows {
                if let Some(l) = leased(&m, tx, r, &sink, now)? {
                    tx.exec(
                        "UPDATE outbox SET lease_owner = $3, lease_until = $4 WHERE lead_id = $1 AND sink = $2",
                        &[r.t(0).into(), (&sink).into(), (&owner).into(), (now + lease).into()],
                    )?;
                    out.push(l);
                }
            }
            let next = tx
                .query(
                    "SELECT MIN(CASE WHEN lease_until IS NOT NULL AND lease_until > next_at THEN lease_until ELSE next_at END) FROM outbox WHERE tenant = $1 AND sink = $2 AND status = 'pending'",
                    &args[..2],
                )?
                .first()
                .and_then(|r| r.oi(0))
                .map(|v| u64::try_from(v).unwrap_or(0));
            Ok((out, next))
        })
        .await
    }

    async fn record(
        &self,
        lead_id: &str,
        sink: &str,
        owner: &str,
        at: &Attempt,
    ) -> Result<bool, StoreError> {
        let (id, sink, owner, at) = (
            lead_id.to_owned(),
            sink.to_owned(),
            owner.to_owned(),
            at.clone(),
        );
        self.run(move |tx| {
            let n = match at.outcome {
                // A delivery is recorded whoever holds the lease now.
                Outcome::Delivered => tx.exec(
                    "UPDATE outbox SET status = 'delivered', attempts = $3, last_attempt = $4, done_at = $4, class = NULL, error = NULL, lease_owner = NULL, lease_until = NULL WHERE lead_id = $1 AND sink = $2 AND status = 'pending'",
                    &[id.into(), sink.into(), at.attempts.into(), at.at.into()],
                )?,
                Outcome::Failed { next_at } => tx.exec(
                    "UPDATE outbox SET attempts = $3, last_attempt = $4, next_at = $5, class = $6, error = $7, lease_owner = NULL, lease_until = NULL WHERE lead_id = $1 AND sink = $2 AND status = 'pending' AND lease_owner = $8",
                    &[id.into(), sink.into(), at.attempts.into(), at.at.into(), next_at.into(), at.class.into(), at.error.into(), owner.into()],
                )?,
                Outcome::Dead => tx.exec(
                    "UPDATE outbox SET status = 'dead', attempts = $3, last_attempt = $4, done_at = $4, class = $5, error = $6, lease_owner = NULL, lease_until = NULL WHERE lead_id = $1 AND sink = $2 AND status = 'pending' AND lease_owner = $7",
                    &[id.into(), sink.into(), at.attempts.into(), at.at.into(), at.class.into(), at.error.into(), owner.into()],
                )?,
            };
            Ok(n == 1)
        })
        .await
    }

    async fn sinks_removed(&self, tenant: &str, keep: &[String]) -> Result<u64, StoreError> {
        let tenant = tenant.to_owned();
        let keep = keep.to_vec();
        self.run(move |tx| {
            let now = now_unix_ms();
            let mut args: Vec<Arg> = vec![tenant.into(), now.into()];
            let mut sql = "UPDATE outbox SET status = 'dead', class = 'sink_removed', error = 'the sink is no longer configured for this tenant', done_at = $2 WHERE tenant = $1 AND status = 'pending' AND (lease_until IS NULL OR lease_until < $2)".to_owned();
            if !keep.is_empty() {
                let marks: Vec<String> = (0..keep.len()).map(|i| format!("${}", i + 3)).collect();
                sql.push_str(&format!(" AND sink NOT IN ({})", marks.join(", ")));
                args.extend(keep.into_iter().map(Arg::from));
            }
            tx.exec(&sql, &args)
        })
        .await
    }

    async fn dead_letters(&self, tenant: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        let tenant = tenant.map(str::to_owned);
        self.run(move |tx| {
            let rows = tx.query(
                "SELECT lead_id, tenant, sink, attempts, class, error, received_at, last_attempt, done_at FROM outbox WHERE status = 'dead' AND (CAST($1 AS TEXT) IS NULL OR tenant = $1) ORDER BY tenant, lead_id, sink",
                &[tenant.into()],
            )?;
            Ok(rows
                .iter()
                .map(|r| DeadLetter {
                    lead_id: r.t(0),
                    tenant: r.t(1),
                    sink: r.t(2),
                    attempts: u32::try_from(r.i(3)).unwrap_or(0),
                    class: r.ot(4),
                    error: r.ot(5),
                    received_at: r.u(6),
                    last_attempt: r.oi(7).map(|v| u64::try_from(v).unwrap_or(0)),
                    dead_at: r.u(8),
                })
                .collect())
        })
        .await
    }

    async fn redrive(&self, tenant: &str, lead_id: Option<&str>) -> Result<u64, StoreError> {
        let (tenant, lead_id) = (tenant.to_owned(), lead_id.map(str::to_owned));
        self.run(move |tx| {
            tx.exec(
                "UPDATE outbox SET status = 'pending', attempts = 0, since = $3, next_at = $3, class = NULL, error = NULL, done_at = NULL, lease_owner = NULL, lease_until = NULL WHERE tenant = $1 AND status = 'dead' AND (CAST($2 AS TEXT) IS NULL OR lead_id = $2)",
                &[tenant.into(), lead_id.into(), now_unix_ms().into()],
            )
        })
        .await
    }

    async fn counts(&self, tenant: Option<&str>) -> Result<Counts, StoreError> {
        let tenant = tenant.map(str::to_owned);
        self.run(move |tx| {
            let rows = tx.query(
                "SELECT status, COUNT(*), MIN(received_at) FROM outbox WHERE status IN ('pending', 'dead') AND (CAST($1 AS TEXT) IS NULL OR tenant = $1) GROUP BY status",
                &[tenant.into()],
            )?;
            let mut c = Counts::default();
            for r in rows {
                match r.t(0).as_str() {
                    "pending" => {
                        c.pending = r.i(1);
                        c.oldest_pending = r.oi(2).map(|v| u64::try_from(v).unwrap_or(0));
                    }
                    _ => c.dead = r.i(1),
                }
            }
            Ok(c)
        })
        .await
    }

    async fn sink_queues(&self, tenant: Option<&str>) -> Result<Vec<SinkQueue>, StoreError> {
        let tenant = tenant.map(str::to_owned);
        self.run(move |tx| {
            let rows = tx.query(
                "SELECT tenant, sink, COUNT(CASE WHEN status = 'pending' THEN 1 END), COUNT(CASE WHEN status = 'dead' THEN 1 END), MIN(CASE WHEN status = 'pending' THEN received_at END), MIN(CASE WHEN status = 'pending' THEN (CASE WHEN lease_until IS NOT NULL AND lease_until > next_at THEN lease_until ELSE next_at END) END) FROM outbox WHERE status IN ('pending', 'dead') AND (CAST($1 AS TEXT) IS NULL OR tenant = $1) GROUP BY tenant, sink ORDER BY tenant, sink",
                &[tenant.into()],
            )?;
            let ms = |v: Option<i64>| v.map(|v| u64::try_from(v).unwrap_or(0));
            Ok(rows
                .iter()
                .map(|r| SinkQueue {
                    tenant: r.t(0),
                    sink: r.t(1),
                    pending: r.i(2),
                    dead: r.i(3),
                    oldest_pending: ms(r.oi(4)),
                    next_attempt: ms(r.oi(5)),
                })
                .collect())
        })
        .await
    }

    async fn prune(&self, keep_leads: Duration) -> Result<(u64, u64), StoreError> {
        let keep = ms(keep_leads);
        self.run(move |tx| {
            let now = now_unix_ms();
            let idem = tx.exec(
                "DELETE FROM idem WHERE key IN (SELECT key FROM idem WHERE expires_at <= $1 LIMIT 5000)",
                &[now.into()],
            )?;
            let leads = tx.exec(
                "DELETE FROM leads WHERE lead_id IN (SELECT lead_id FROM leads WHERE received_at < $1 AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.lead_id = leads.lead_id AND o.status <> 'delivered') LIMIT 5000)",
                &[now.saturating_sub(keep).into()],
            )?;
            Ok((idem, leads))
        })
        .await
    }

    async fn list(&self, f: &Filter) -> Result<Vec<Listed>, StoreError> {
        let f = f.clone();
        let m = self.metrics.clone();
        self.run(move |tx| {
            let limit = if f.limit == 0 { i64::MAX } else { f.limit as i64 };
            let rows = tx.query(
                "SELECT lead_id, tenant, received_at, record FROM leads WHERE (CAST($1 AS TEXT) IS NULL OR tenant = $1) AND (CAST($2 AS TEXT) IS NULL OR lead_id = $2) AND (CAST($3 AS BIGINT) IS NULL OR received_at >= $3) AND (CAST($4 AS BIGINT) IS NULL OR received_at < $4) ORDER BY received_at, lead_id LIMIT $5",
                &[f.tenant.into(), f.lead_id.into(), f.since.into(), f.until.into(), limit.into()],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let id = r.t(0);
                let record = match serde_json::from_str::<Value>(&r.t(3)) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        m.unreadable.inc();
                        tracing::error!(lead_id = %id, error = %e, "lead store: a lead record cannot be read");
                        None
                    }
                };
                let deliveries = tx
                    .query(
                        "SELECT sink, status, attempts, class, error FROM outbox WHERE lead_id = $1 ORDER BY sink",
                        &[(&id).into()],
                    )?
                    .iter()
                    .map(|d| Delivery {
                        sink: d.t(0),
                        status: d.t(1),
                        attempts: u32::try_from(d.i(2)).unwrap_or(0),
                        class: d.ot(3),
                        error: d.ot(4),
                    })
                    .collect();
                out.push(Listed {
                    lead_id: id,
                    tenant: r.t(1),
                    received_at: r.u(2),
                    record,
                    deliveries,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn import_leads_file(
        &self,
        tenant: &str,
        leads_file: &Path,
        ttl: Duration,
    ) -> Result<Imported, StoreError> {
        self.ready().await?;
        if self.state_dir.is_none() {
            return Ok(Imported::default());
        }
        let (engine, tenant, path, m) = (
            self.engine.clone(),
            tenant.to_owned(),
            leads_file.to_path_buf(),
            self.metrics.clone(),
        );
        tokio::task::spawn_blocking(move || {
            super::import::leads_file(engine.as_ref(), &tenant, &path, ttl, &m)
        })
        .await
        .map_err(|e| StoreError(e.to_string()))?
    }

    fn kind(&self) -> &'static str {
        self.engine.kind()
    }
}
