//! The SQLite backend: one write connection behind a mutex and a small pool of read-only
//! connections beside it (WAL lets a read run during a write, so a read never waits for
//! another box's commit and its fsync). Every commit is fsync'd (`synchronous=FULL`).

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Connection;

use super::read_pool::ReadPool;
use super::{Arg, Conn, DbError, Retry, Row, ToArg, Value, BUSY_TIMEOUT};

/// Statements each connection keeps prepared: the store runs about a hundred distinct ones.
const STATEMENT_CACHE: usize = 128;

pub(crate) struct Sqlite {
    /// The one write connection.
    writer: Mutex<Connection>,
    /// Read-only connections for reads outside a write transaction.
    readers: ReadPool,
}

impl Sqlite {
    /// Opens the database at `path` (created if missing) in WAL mode; `migrate` brings its
    /// schema up to date before the readers open. SQLite's own failures are `open_err`'s.
    pub(crate) fn open<E>(
        path: &Path,
        open_err: impl Fn(rusqlite::Error) -> E + Copy,
        migrate: impl FnOnce(&mut Connection) -> Result<(), E>,
    ) -> Result<Sqlite, E> {
        let mut conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrate(&mut conn)?;
        let readers = ReadPool::open(path).map_err(open_err)?;
        Ok(Sqlite {
            writer: Mutex::new(conn),
            readers,
        })
    }

    /// The write connection: a panic while holding the lock cannot leave a half-applied
    /// transaction behind (rusqlite rolls back on drop), so a poisoned lock is still usable.
    pub(crate) fn writer(&self) -> MutexGuard<'_, Connection> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write<T, E: From<DbError> + Retry>(
        &self,
        mut f: impl FnMut(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.writer();
        let tx = conn.transaction().map_err(DbError::from)?;
        let value = f(&Conn::Sqlite(&tx))?;
        tx.commit().map_err(DbError::from)?;
        Ok(value)
    }

    pub(crate) fn read<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let conn = self.readers.get();
        f(&Conn::Sqlite(&conn))
    }
}

impl Sqlite {
    pub(crate) fn snapshot<T, E: From<DbError>>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let conn = self.readers.get();
        // A read transaction on a WAL reader: one snapshot, and no writer waits for it.
        let tx = conn.unchecked_transaction().map_err(DbError::from)?;
        let value = f(&Conn::Sqlite(&tx))?;
        tx.commit().map_err(DbError::from)?;
        Ok(value)
    }
}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Null => ValueRef::Null,
            Arg::Int(v) => ValueRef::Integer(v),
            Arg::Real(v) => ValueRef::Real(v),
            Arg::Text(v) => ValueRef::Text(v.as_bytes()),
            Arg::Blob(v) => ValueRef::Blob(v),
        }))
    }
}

fn bind<'a>(args: &'a [&'a dyn ToArg]) -> Vec<Arg<'a>> {
    args.iter().map(|a| a.to_arg()).collect()
}

pub(super) fn execute(conn: &Connection, sql: &str, args: &[&dyn ToArg]) -> Result<usize, DbError> {
    let mut statement = conn.prepare_cached(sql)?;
    Ok(statement.execute(rusqlite::params_from_iter(bind(args)))?)
}

pub(super) fn query(
    conn: &Connection,
    sql: &str,
    args: &[&dyn ToArg],
) -> Result<Vec<Row>, DbError> {
    let mut statement = conn.prepare_cached(sql)?;
    let columns = statement.column_count();
    let mut rows = statement.query(rusqlite::params_from_iter(bind(args)))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            values.push(match row.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(v) => Value::Int(v),
                ValueRef::Real(v) => Value::Real(v),
                ValueRef::Text(v) => Value::Text(
                    std::str::from_utf8(v)
                        .map_err(rusqlite::Error::Utf8Error)?
                        .to_owned(),
                ),
                ValueRef::Blob(v) => Value::Blob(v.to_vec()),
            });
        }
        out.push(Row(values));
    }
    Ok(out)
}
