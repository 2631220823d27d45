//! The embedded engine: one SQLite database file under `state.dir` (WAL, `synchronous=FULL`,
//! busy timeout, foreign keys on), one connection used by one blocking thread at a time.

use super::sql::{to_sqlite, Arg, Cell, Engine, Row, Tx};
use super::StoreError;
use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug)]
pub struct Sqlite {
    path: PathBuf,
    read_only: bool,
    /// Opened on first use.
    conn: Mutex<Option<Connection>>,
}

fn err(e: rusqlite::Error) -> StoreError {
    StoreError(format!("sqlite: {e}"))
}

impl Sqlite {
    /// The database at `path` (nothing is opened here). `state_dir` must be
    /// usable (checked now, so a bad directory is a start-time error).
    pub fn new(path: &Path, state_dir: &Path) -> Result<Sqlite, String> {
        crate::state::lock::check_usable(state_dir)?;
        if path.is_dir() {
            return Err(format!(
                "state.sqlite_file {}: is a directory",
                path.display()
            ));
        }
        Ok(Sqlite {
            path: path.to_path_buf(),
            read_only: false,
            conn: Mutex::new(None),
        })
    }

    /// A reader of an existing database (offline commands).
    pub fn reader(path: &Path) -> Result<Sqlite, String> {
        if !path.is_file() {
            return Err(format!("{}: no lead store database here", path.display()));
        }
        Ok(Sqlite {
            path: path.to_path_buf(),
            read_only: true,
            conn: Mutex::new(None),
        })
    }

    fn open(&self) -> Result<Connection, StoreError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("{}: {e}", dir.display())))?;
        }
        let flags = if self.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let c = Connection::open_with_flags(&self.path, flags)
            .map_err(|e| StoreError(format!("{}: {e}", self.path.display())))?;
        c.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        if !self.read_only {
            c.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
            c.pragma_update(None, "synchronous", "FULL").map_err(err)?;
        }
        c.pragma_update(None, "foreign_keys", "ON").map_err(err)?;
        Ok(c)
    }
}

struct SqliteTx<'a>(&'a rusqlite::Transaction<'a>);

fn bind(args: &[Arg]) -> Vec<ToSqlOutput<'_>> {
    args.iter()
        .map(|a| match a {
            Arg::I(v) => ToSqlOutput::Owned(SqlValue::Integer(*v)),
            Arg::T(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Arg::Null => ToSqlOutput::Owned(SqlValue::Null),
        })
        .collect()
}

impl Tx for SqliteTx<'_> {
    fn exec(&mut self, sql: &str, args: &[Arg]) -> Result<u64, StoreError> {
        let mut st = self.0.prepare_cached(&to_sqlite(sql)).map_err(err)?;
        let n = st
            .execute(rusqlite::params_from_iter(bind(args)))
            .map_err(err)?;
        Ok(n as u64)
    }

    fn query(&mut self, sql: &str, args: &[Arg]) -> Result<Vec<Row>, StoreError> {
        let mut st = self.0.prepare_cached(&to_sqlite(sql)).map_err(err)?;
        let cols = st.column_count();
        let mut rows = st
            .query(rusqlite::params_from_iter(bind(args)))
            .map_err(err)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(err)? {
            let mut cells = Vec::with_capacity(cols);
            for i in 0..cols {
                cells.push(match r.get_ref(i).map_err(err)? {
                    ValueRef::Integer(v) => Cell::I(v),
                    ValueRef::Real(v) => Cell::I(v as i64),
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        Cell::T(String::from_utf8_lossy(t).into_owned())
                    }
                    ValueRef::Null => Cell::Null,
                });
            }
            out.push(Row(cells));
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.0.execute_batch(sql).map_err(err)
    }
}

impl Engine for Sqlite {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn tx<T>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(self.open()?);
        }
        let Some(conn) = guard.as_mut() else {
            return Err(StoreError("sqlite: not open".into()));
        };
        let behavior = if self.read_only {
            TransactionBehavior::Deferred
        } else {
            TransactionBehavior::Immediate
        };
        let tx = conn.transaction_with_behavior(behavior).map_err(err)?;
        let out = f(&mut SqliteTx(&tx))?;
        tx.commit().map_err(err)?;
        Ok(out)
    }
}
