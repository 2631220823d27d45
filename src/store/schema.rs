//! The lead store's schema: versioned migrations, one set for both engines, applied at start
//! in order inside one transaction each and recorded in `schema_migrations`.

use super::sql::Tx;
use super::StoreError;

/// (version, statements). Append only: a released migration never changes.
pub const MIGRATIONS: &[(i64, &str)] = &[(
    1,
    "CREATE TABLE idem (
        key TEXT PRIMARY KEY,
        fp TEXT NOT NULL,
        state TEXT NOT NULL,
        claim TEXT,
        lease_until BIGINT,
        result TEXT,
        expires_at BIGINT NOT NULL
    );
    CREATE INDEX idem_expiry ON idem (expires_at);
    CREATE TABLE leads (
        lead_id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        idem_key TEXT,
        record TEXT NOT NULL
    );
    CREATE INDEX leads_by_tenant ON leads (tenant, received_at);
    CREATE INDEX leads_by_time ON leads (received_at);
    CREATE TABLE outbox (
        lead_id TEXT NOT NULL REFERENCES leads (lead_id) ON DELETE CASCADE,
        sink TEXT NOT NULL,
        tenant TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts BIGINT NOT NULL DEFAULT 0,
        received_at BIGINT NOT NULL,
        since BIGINT NOT NULL,
        next_at BIGINT NOT NULL,
        last_attempt BIGINT,
        class TEXT,
        error TEXT,
        done_at BIGINT,
        lease_owner TEXT,
        lease_until BIGINT,
        PRIMARY KEY (lead_id, sink)
    );
    CREATE INDEX outbox_queue ON outbox (tenant, sink, status, lead_id);
    CREATE INDEX outbox_status ON outbox (status, tenant);
    CREATE TABLE imports (
        path TEXT PRIMARY KEY,
        at BIGINT NOT NULL,
        leads BIGINT NOT NULL
    );",
)];

/// Apply the migrations this database has not seen yet.
pub fn migrate(tx: &mut dyn Tx, kind: &str) -> Result<(), StoreError> {
    if kind == "postgres" {
        // Instances starting together migrate one at a time.
        tx.batch("SELECT pg_advisory_xact_lock(727214)")?;
    }
    tx.batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )?;
    let have = tx
        .query("SELECT MAX(version) FROM schema_migrations", &[])?
        .first()
        .and_then(|r| r.oi(0))
        .unwrap_or(0);
    if have > MIGRATIONS.last().map_or(0, |m| m.0) {
        return Err(StoreError(format!(
            "the database is at schema version {have}, newer than this gateway knows; run a gateway at least as new"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > have) {
        tx.batch(sql)?;
        tx.exec(
            "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
            &[(*version).into(), crate::clock::now_unix_ms().into()],
        )?;
    }
    Ok(())
}
