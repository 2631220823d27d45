//! The fleet engine: PostgreSQL through the synchronous `postgres` client, pooled by r2d2,
//! driven from blocking threads; `synchronous_commit` is forced on for every session.

use super::sql::{Arg, Cell, Engine, Row, Tx};
use super::StoreError;
use postgres::types::{IsNull, ToSql, Type};
use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;
use std::time::Duration;

pub struct Postgres {
    pool: r2d2::Pool<PostgresConnectionManager<NoTls>>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL holds a password: never printed.
        f.write_str("Postgres")
    }
}

/// A NULL of whatever type the statement wants.
#[derive(Debug)]
struct Null;

impl ToSql for Null {
    fn to_sql(
        &self,
        _: &Type,
        _: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        Ok(IsNull::Yes)
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    postgres::types::to_sql_checked!();
}

fn err(e: postgres::Error) -> StoreError {
    // The driver's text names the failure (connection refused, disk full,
    // serialization), never the URL.
    StoreError(format!("postgres: {e}"))
}

impl Postgres {
    /// A pool on `url` (`postgres://user:password@host:port/db`); nothing is
    /// connected until first use.
    pub fn new(url: &str, pool_size: u32) -> Result<Postgres, String> {
        let mut cfg: postgres::Config = url
            .parse()
            .map_err(|_| "state.postgres_url: not a valid PostgreSQL URL".to_owned())?;
        cfg.options("-c synchronous_commit=on");
        cfg.connect_timeout(Duration::from_secs(5));
        let manager = PostgresConnectionManager::new(cfg, NoTls);
        let pool = r2d2::Pool::builder()
            .max_size(pool_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(Duration::from_secs(5))
            .test_on_check_out(true)
            .build_unchecked(manager);
        Ok(Postgres { pool })
    }
}

struct PgTx<'a, 'b>(&'a mut postgres::Transaction<'b>);

fn params(args: &[Arg]) -> Vec<Box<dyn ToSql + Sync>> {
    args.iter()
        .map(|a| -> Box<dyn ToSql + Sync> {
            match a {
                Arg::I(v) => Box::new(*v),
                Arg::T(s) => Box::new(s.clone()),
                Arg::Null => Box::new(Null),
            }
        })
        .collect()
}

impl Tx for PgTx<'_, '_> {
    fn exec(&mut self, sql: &str, args: &[Arg]) -> Result<u64, StoreError> {
        let p = params(args);
        let refs: Vec<&(dyn ToSql + Sync)> = p.iter().map(|b| b.as_ref()).collect();
        self.0.execute(sql, &refs).map_err(err)
    }

    fn query(&mut self, sql: &str, args: &[Arg]) -> Result<Vec<Row>, StoreError> {
        let p = params(args);
        let refs: Vec<&(dyn ToSql + Sync)> = p.iter().map(|b| b.as_ref()).collect();
        let rows = self.0.query(sql, &refs).map_err(err)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut cells = Vec::with_capacity(r.len());
            for (i, col) in r.columns().iter().enumerate() {
                let ty = col.type_();
                let cell = if *ty == Type::INT8 {
                    r.try_get::<_, Option<i64>>(i).map_err(err)?.map(Cell::I)
                } else if *ty == Type::INT4 {
                    r.try_get::<_, Option<i32>>(i)
                        .map_err(err)?
                        .map(|v| Cell::I(i64::from(v)))
                } else {
                    r.try_get::<_, Option<String>>(i).map_err(err)?.map(Cell::T)
                };
                cells.push(cell.unwrap_or(Cell::Null));
            }
            out.push(Row(cells));
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.0.batch_execute(sql).map_err(err)
    }
}

impl Engine for Postgres {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn tx<T>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self
            .pool
            .get()
            .map_err(|e| StoreError(format!("postgres: {e}")))?;
        let mut tx = conn.transaction().map_err(err)?;
        let out = f(&mut PgTx(&mut tx))?;
        tx.commit().map_err(err)?;
        Ok(out)
    }
}
