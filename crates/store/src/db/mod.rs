//! The two databases the store runs on, behind one small interface: SQLite (the embedded
//! default, one file in the data dir) and PostgreSQL (many hosts, one shared database).
//!
//! Every query of the store is written once, in the SQL both understand (`?1` parameters,
//! `ON CONFLICT`, `RETURNING`, `COALESCE`; no `MAX(a, b)`, no `INSERT OR …`), against a
//! [`Conn`], and every write is one [`Db::write`] transaction. What differs is kept here:
//!
//! - **Writes are serialisable on both.** SQLite has one write connection behind a mutex;
//!   Postgres runs each write transaction at `SERIALIZABLE` and runs it again when the
//!   database reports a conflict with a concurrent one (which is why a write is an `FnMut`:
//!   it must be safe to run twice, and it is, since nothing it did is kept unless it
//!   commits). So a check-then-write (a quota, the next seq of a log) is as safe across
//!   several API replicas and nodes as it is in one SQLite process.
//! - **Reads** run outside a transaction on a pooled connection and see the last commit.
//! - **Parameters** are typed by [`ToArg`] and converted to what the statement needs.

mod postgres;
mod read_pool;
mod sqlite;
mod stats;
mod value;

use std::time::Duration;

pub(crate) use value::{Arg, Row, ToArg, Value};

pub use self::postgres::PostgresOptions;
pub(crate) use self::postgres::{PgSession, Postgres};
pub(crate) use self::sqlite::Sqlite;
pub use self::stats::StoreStats;

/// Which SQL a statement is written in, for the rare query the two cannot share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A database error, from either backend, or a row that does not fit the store's types.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),

    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),

    #[error("no connection to the database")]
    Pool(#[source] deadpool_postgres::PoolError),

    #[error("the query returned no row")]
    NoRows,

    #[error("the query returned no column {index}")]
    NoColumn { index: usize },

    #[error("column {index} is {found}, not {expected}")]
    ColumnType {
        index: usize,
        expected: &'static str,
        found: &'static str,
    },

    #[error("{0}")]
    Unsupported(&'static str),
}

impl DbError {
    /// Whether the statement broke the unique constraint on `table`'s `columns` (SQLite
    /// names the columns; Postgres names the constraint, `<table>_<columns>_key`).
    pub(crate) fn is_unique_violation(&self, table: &str, columns: &[&str]) -> bool {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(e, Some(message))) => {
                let named: Vec<String> = columns.iter().map(|c| format!("{table}.{c}")).collect();
                e.code == rusqlite::ErrorCode::ConstraintViolation
                    && message.contains(&named.join(", "))
            }
            DbError::Postgres(e) => e.as_db_error().is_some_and(|db| {
                *db.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                    && db.constraint() == Some(&format!("{table}_{}_key", columns.join("_")))
            }),
            _ => false,
        }
    }

    /// Whether the write failed for want of disk space; the transaction was rolled back
    /// whole and the same call works once space is freed.
    pub(crate) fn is_disk_full(&self) -> bool {
        match self {
            DbError::Sqlite(e) => {
                matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DiskFull))
            }
            DbError::Postgres(e) => e.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL),
            _ => false,
        }
    }

    /// Whether Postgres aborted the transaction for a conflict with a concurrent one: the
    /// same transaction run again sees the other's commit.
    pub(crate) fn is_conflict(&self) -> bool {
        use tokio_postgres::error::SqlState;
        match self {
            DbError::Postgres(e) => e.code().is_some_and(|code| {
                *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED
            }),
            _ => false,
        }
    }
}

/// `Result<T, DbError>` with "no row" as `None`.
pub(crate) trait Optional<T> {
    fn optional(self) -> Result<Option<T>, DbError>;
}

impl<T> Optional<T> for Result<T, DbError> {
    fn optional(self) -> Result<Option<T>, DbError> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(DbError::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One connection, in a transaction ([`Db::write`]) or not ([`Db::read`]).
pub(crate) enum Conn<'a> {
    Sqlite(&'a rusqlite::Connection),
    Postgres(postgres::PgConn<'a>),
}

impl Conn<'_> {
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Conn::Sqlite(_) => Dialect::Sqlite,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The database's clock in Unix milliseconds: what leases are measured against, so
    /// hosts whose clocks disagree still agree on who holds one.
    pub(crate) fn now_ms(&self) -> Result<i64, DbError> {
        let sql = match self.dialect() {
            Dialect::Sqlite => "SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)",
            Dialect::Postgres => {
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
            }
        };
        self.query_row(sql, crate::args![], |row| row.get(0))
    }

    /// Runs one statement; returns the rows it changed.
    pub(crate) fn execute(&self, sql: &str, args: &[&dyn ToArg]) -> Result<usize, DbError> {
        match self {
            Conn::Sqlite(conn) => sqlite::execute(conn, sql, args),
            Conn::Postgres(conn) => conn.execute(sql, args),
        }
    }

    /// Every row of a query, each through `f`.
    pub(crate) fn query_map<T>(
        &self,
        sql: &str,
        args: &[&dyn ToArg],
        f: impl FnMut(&Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        let rows = match self {
            Conn::Sqlite(conn) => sqlite::query(conn, sql, args)?,
            Conn::Postgres(conn) => conn.query(sql, args)?,
        };
        rows.iter().map(f).collect()
    }

    /// The first row of a query through `f`; no row is [`DbError::NoRows`]
    /// (`.optional()` makes it `None`).
    pub(crate) fn query_row<T>(
        &self,
        sql: &str,
        args: &[&dyn ToArg],
        f: impl FnOnce(&Row) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        let rows = match self {
            Conn::Sqlite(conn) => sqlite::query(conn, sql, args)?,
            Conn::Postgres(conn) => conn.query(sql, args)?,
        };
        rows.first().map_or(Err(DbError::NoRows), f)
    }

    /// Statements without parameters, separated by `;` (a migration).
    pub(crate) fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Conn::Sqlite(conn) => conn.execute_batch(sql).map_err(DbError::from),
            Conn::Postgres(conn) => conn.execute_batch(sql),
        }
    }
}

/// How long a caller waits for a connection (every one busy) or for SQLite's lock.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The store's database.
pub(crate) struct Db {
    backend: Backend,
    stats: stats::Stats,
}

enum Backend {
    Sqlite(Sqlite),
    // Boxed: one of them per process, and the pool makes it the larger by far.
    Postgres(Box<Postgres>),
}

impl Db {
    pub(crate) fn sqlite(db: Sqlite) -> Db {
        Db {
            backend: Backend::Sqlite(db),
            stats: stats::Stats::default(),
        }
    }

    pub(crate) fn postgres(db: Postgres) -> Db {
        Db {
            backend: Backend::Postgres(Box::new(db)),
            stats: stats::Stats::default(),
        }
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match self.backend {
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The Postgres backend, for what only it has (`LISTEN`).
    pub(crate) fn as_postgres(&self) -> Option<&Postgres> {
        match &self.backend {
            Backend::Postgres(db) => Some(db),
            Backend::Sqlite(_) => None,
        }
    }

    pub(crate) fn stats(&self) -> StoreStats {
        let (backend, conflicts) = match &self.backend {
            Backend::Sqlite(_) => ("sqlite", 0),
            Backend::Postgres(db) => ("postgres", db.conflicts()),
        };
        self.stats.snapshot(backend, conflicts)
    }

    /// Runs `f` in one write transaction and commits what it did if it returns `Ok`
    /// (nothing otherwise). `f` may run more than once (see the module doc); `E` says
    /// whether its error is a database conflict worth a retry.
    pub(crate) fn write<T, E: From<DbError> + Retry>(
        &self,
        f: impl FnMut(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let started = std::time::Instant::now();
        let result = match &self.backend {
            Backend::Sqlite(db) => db.write(f),
            Backend::Postgres(db) => db.write(f),
        };
        self.stats.writes.observe(started.elapsed());
        result
    }

    /// Runs `f` in a read-only transaction: every statement sees the same snapshot (a
    /// listing that joins counts read by several statements).
    pub(crate) fn snapshot<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let started = std::time::Instant::now();
        let result = match &self.backend {
            Backend::Sqlite(db) => db.snapshot(f),
            Backend::Postgres(db) => db.snapshot(f),
        };
        self.stats.reads.observe(started.elapsed());
        result
    }

    /// Runs `f` on a connection outside any transaction: each statement sees the last
    /// commit.
    pub(crate) fn read<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let started = std::time::Instant::now();
        let result = match &self.backend {
            Backend::Sqlite(db) => db.read(f),
            Backend::Postgres(db) => db.read(f),
        };
        self.stats.reads.observe(started.elapsed());
        result
    }
}

/// An error that may be a conflict with a concurrent transaction (then the transaction is
/// run again).
pub(crate) trait Retry {
    fn is_conflict(&self) -> bool;
}

impl Retry for DbError {
    fn is_conflict(&self) -> bool {
        DbError::is_conflict(self)
    }
}

/// `?N` parameters as Postgres writes them (`$N`); quoted text and identifiers are left
/// alone. A bare `?` is numbered after the last one seen.
pub(crate) fn dollar_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    let mut last = 0u32;
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n = digits.parse().unwrap_or(last + 1);
                last = last.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            None => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::dollar_params;

    #[test]
    fn parameters_are_renumbered_outside_quotes_only() {
        assert_eq!(
            dollar_params("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d = ?12 OR e = ?"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d = $12 OR e = $13"
        );
        assert_eq!(
            dollar_params("SELECT \"?x\", 'it''s ?1'"),
            "SELECT \"?x\", 'it''s ?1'"
        );
    }
}

/// `url` without a password, for messages and logs.
pub(crate) fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod url_tests {
    #[test]
    fn a_password_in_a_url_is_never_shown() {
        assert_eq!(
            super::redacted_url("postgres://berth:s3cret@db:5432/berth"),
            "postgres://berth@db:5432/berth"
        );
        assert_eq!(
            super::redacted_url("postgres://db/berth"),
            "postgres://db/berth"
        );
    }
}
