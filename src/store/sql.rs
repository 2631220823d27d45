//! The SQL layer both lead-store engines run under: typed arguments and rows, and one
//! transaction at a time on a blocking thread, so every statement is written once.
//!
//! Statements use PostgreSQL's `$1` placeholders; the SQLite engine rewrites
//! them to `?1` and drops row-locking clauses (`FOR UPDATE …`), which SQLite
//! does not need: its write transactions (`BEGIN IMMEDIATE`) are serialized.

use super::StoreError;

/// A statement argument.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    I(i64),
    T(String),
    Null,
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::I(v)
    }
}
impl From<u64> for Arg {
    fn from(v: u64) -> Arg {
        Arg::I(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u32> for Arg {
    fn from(v: u32) -> Arg {
        Arg::I(i64::from(v))
    }
}
impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::T(v.to_owned())
    }
}
impl From<&String> for Arg {
    fn from(v: &String) -> Arg {
        Arg::T(v.clone())
    }
}
impl From<String> for Arg {
    fn from(v: String) -> Arg {
        Arg::T(v)
    }
}
impl<T: Into<Arg>> From<Option<T>> for Arg {
    fn from(v: Option<T>) -> Arg {
        v.map_or(Arg::Null, Into::into)
    }
}

/// One value of a result row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    I(i64),
    T(String),
    Null,
}

/// A result row; the accessors read a column by position.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Cell>);

impl Row {
    pub fn oi(&self, n: usize) -> Option<i64> {
        match self.0.get(n) {
            Some(Cell::I(v)) => Some(*v),
            Some(Cell::T(s)) => s.parse().ok(),
            _ => None,
        }
    }
    pub fn i(&self, n: usize) -> i64 {
        self.oi(n).unwrap_or(0)
    }
    pub fn u(&self, n: usize) -> u64 {
        u64::try_from(self.i(n)).unwrap_or(0)
    }
    pub fn ot(&self, n: usize) -> Option<String> {
        match self.0.get(n) {
            Some(Cell::T(s)) => Some(s.clone()),
            Some(Cell::I(v)) => Some(v.to_string()),
            _ => None,
        }
    }
    pub fn t(&self, n: usize) -> String {
        self.ot(n).unwrap_or_default()
    }
}

/// One open transaction.
pub trait Tx {
    /// Run a statement; the number of rows it changed.
    fn exec(&mut self, sql: &str, args: &[Arg]) -> Result<u64, StoreError>;
    fn query(&mut self, sql: &str, args: &[Arg]) -> Result<Vec<Row>, StoreError>;
    /// Run several statements without arguments (migrations).
    fn batch(&mut self, sql: &str) -> Result<(), StoreError>;
}

/// A database: runs one closure inside one transaction, committed when the
/// closure returns `Ok` and rolled back otherwise. Called on a blocking
/// thread (never on an async worker).
pub trait Engine: Send + Sync + std::fmt::Debug + 'static {
    fn kind(&self) -> &'static str;
    fn tx<T>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError>;
}

/// `$1` → `?1`, and no `FOR UPDATE …` tail (SQLite).
pub fn to_sqlite(sql: &str) -> String {
    let body = match sql.find(" FOR UPDATE") {
        Some(i) => &sql[..i],
        None => sql,
    };
    body.replace('$', "?")
}

#[cfg(test)]
mod tests {
    #[test]
    fn statements_are_rewritten_for_sqlite() {
        assert_eq!(
            super::to_sqlite("SELECT a FROM t WHERE k = $1 AND v = $12 FOR UPDATE SKIP LOCKED"),
            "SELECT a FROM t WHERE k = ?1 AND v = ?12"
        );
    }
}
