//! Leases for the jobs that must run once across every process on the database (the
//! wakeup scheduler, the reclaim policy, the warm pools): one row per job, `(name, holder,
//! term, expires_ms)`. A holder renews its lease before it expires; once it has expired,
//! anyone may take it, and the term rises by one. The term is the holder's fencing token:
//! a write the job makes checks it in the same transaction ([`check_fence`]), so a holder
//! that stalled past its lease (a long GC pause, a frozen VM) and wakes up believing it
//! still leads cannot write over its successor's work.
//!
//! Expiry is measured on the database's clock ([`Conn::now_ms`]), never the holder's.

use std::time::Duration;

use crate::db::{Conn, Optional};
use crate::error::{sql, StoreError};
use crate::Store;

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub term: u64,
    /// Unix milliseconds of the database's clock.
    pub expires_ms: i64,
}

impl Lease {
    /// What the holder's writes are checked against.
    pub fn fence(&self) -> Fence {
        Fence {
            name: self.name.clone(),
            term: self.term,
        }
    }
}

/// A holder's proof that it holds a lease at a term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub name: String,
    pub term: u64,
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

fn read(tx: &Conn<'_>, name: &str) -> Result<Option<Lease>, StoreError> {
    tx.query_row(
        "SELECT name, holder, term, expires_ms FROM leases WHERE name = ?1",
        crate::args![name],
        |row| {
            Ok(Lease {
                name: row.get(0)?,
                holder: row.get(1)?,
                term: row.get(2)?,
                expires_ms: row.get(3)?,
            })
        },
    )
    .optional()
    .map_err(sql("read a lease"))
}

/// Refuses the transaction unless `fence` is still the lease's current term.
pub(crate) fn check_fence(tx: &Conn<'_>, fence: &Fence) -> Result<(), StoreError> {
    match read(tx, &fence.name)? {
        Some(lease) if lease.term == fence.term => Ok(()),
        _ => Err(StoreError::LeaseLost {
            name: fence.name.clone(),
            term: fence.term,
        }),
    }
}

impl Store {
    /// Takes the lease `name` for `holder` for `ttl` when it is free or has expired (at the
    /// next term), or extends it when `holder` holds it already (at its term). `None`:
    /// another holder's lease is still running.
    pub fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        self.db.write(|tx| {
            let now = tx.now_ms().map_err(sql("read the database's clock"))?;
            let expires_ms = now.saturating_add(ttl_ms(ttl));
            let term = match read(tx, name)? {
                None => 1,
                Some(lease) if lease.holder == holder && lease.expires_ms > now => lease.term,
                Some(lease) if lease.expires_ms <= now => lease.term + 1,
                Some(_) => return Ok(None),
            };
            tx.execute(
                "INSERT INTO leases (name, holder, term, expires_ms) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 term = excluded.term, expires_ms = excluded.expires_ms",
                crate::args![name, holder, term, expires_ms],
            )
            .map_err(sql("take a lease"))?;
            Ok(Some(Lease {
                name: name.to_owned(),
                holder: holder.to_owned(),
                term,
                expires_ms,
            }))
        })
    }

    /// Extends the lease `fence` names by `ttl` from now if `holder` still holds it at that
    /// term and it has not expired; `false`: it is lost (stop acting as its holder).
    pub fn renew_lease(
        &self,
        fence: &Fence,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.db.write(|tx| {
            let now = tx.now_ms().map_err(sql("read the database's clock"))?;
            let renewed = tx
                .execute(
                    "UPDATE leases SET expires_ms = ?1 \
                     WHERE name = ?2 AND holder = ?3 AND term = ?4 AND expires_ms > ?5",
                    crate::args![
                        now.saturating_add(ttl_ms(ttl)),
                        fence.name,
                        holder,
                        fence.term,
                        now
                    ],
                )
                .map_err(sql("renew a lease"))?;
            Ok(renewed == 1)
        })
    }

    /// Gives the lease up at once (a clean shutdown), so the next holder need not wait out
    /// its time; the term stays, and rises when someone takes it.
    pub fn release_lease(&self, fence: &Fence, holder: &str) -> Result<(), StoreError> {
        self.db.write(|tx| {
            tx.execute(
                "UPDATE leases SET expires_ms = 0 WHERE name = ?1 AND holder = ?2 AND term = ?3",
                crate::args![fence.name, holder, fence.term],
            )
            .map_err(sql("release a lease"))?;
            Ok(())
        })
    }

    /// The lease `name` as stored, with the database's clock now.
    pub fn lease(&self, name: &str) -> Result<(Option<Lease>, i64), StoreError> {
        self.db.read(|conn| {
            let now = conn.now_ms().map_err(sql("read the database's clock"))?;
            Ok((read(conn, name)?, now))
        })
    }

    /// Checks `fence` on its own: `Ok` while its term is current. A job's writes check it
    /// inside their own transactions; this is for a holder asking before it starts work.
    pub fn check_fence(&self, fence: &Fence) -> Result<(), StoreError> {
        self.db.read(|conn| check_fence(conn, fence))
    }
}
