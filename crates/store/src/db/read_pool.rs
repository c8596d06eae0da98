//! Read-only connections beside the one write connection. In WAL mode a reader sees the
//! last commit and never waits for a writer, so authentication and reads do not queue
//! behind one busy box's event writes (each holding the write lock through an fsync).

use std::ops::Deref;
use std::path::Path;
use std::sync::{Condvar, Mutex};

use rusqlite::{Connection, OpenFlags};

/// Readers at once; a read is one short query, so a few serve many callers.
pub(crate) const READERS: usize = 4;

pub(crate) struct ReadPool {
    idle: Mutex<Vec<Connection>>,
    returned: Condvar,
}

impl ReadPool {
    /// Opens [`READERS`] read-only connections to the database at `path` (already in WAL
    /// mode and migrated by the write connection).
    pub(crate) fn open(path: &Path) -> Result<ReadPool, rusqlite::Error> {
        let mut idle = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(super::BUSY_TIMEOUT)?;
            idle.push(conn);
        }
        Ok(ReadPool {
            idle: Mutex::new(idle),
            returned: Condvar::new(),
        })
    }

    /// A connection of the pool, waiting for one to come back if all are in use.
    pub(crate) fn get(&self) -> ReadConn<'_> {
        // A panic while holding the lock leaves the list intact (pop and push are whole).
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(conn) = idle.pop() {
                return ReadConn {
                    pool: self,
                    conn: Some(conn),
                };
            }
            idle = self.returned.wait(idle).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A read-only connection, back in its pool when dropped.
pub(crate) struct ReadConn<'a> {
    pool: &'a ReadPool,
    conn: Option<Connection>,
}

impl Deref for ReadConn<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a ReadConn holds its connection until dropped")
    }
}

impl Drop for ReadConn<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
            self.pool.returned.notify_one();
        }
    }
}
