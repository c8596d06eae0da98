//! The per-box event log: every harness event and box state change, numbered per box from
//! 1 with no gaps. Guest events come with the guest journal's own seq; the box row keeps
//! the last one stored (`event_cursor`), updated in the same transaction as the events, so
//! re-reading the guest journal after a crash stores nothing twice.

use std::sync::Arc;

use berth_protocol::harness::GuestEvent;
use berth_protocol::BoxId;
use rusqlite::{params, OptionalExtension, Row, Transaction};
use time::OffsetDateTime;

use crate::error::{sql, StoreError};
use crate::{format_time, now, parse_time, Store};

/// The `type` of a box state change event.
pub const STATE_EVENT: &str = "state";

/// Told after every commit that appended events to a box's log (to wake live readers).
pub trait EventListener: Send + Sync {
    fn appended(&self, box_id: &BoxId, last_seq: u64);
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub seq: u64,
    pub kind: String,
    pub data: serde_json::Value,
    pub created_at: OffsetDateTime,
}

/// What `append_guest_events` stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Events stored now (the ones at or below the cursor were skipped).
    pub stored: usize,
    /// The box's newest event seq.
    pub last_seq: u64,
    /// The guest seq stored so far.
    pub cursor: u64,
}

impl Store {
    /// Sets who hears about appended events (the daemon's live readers). Replaces any
    /// earlier listener.
    pub fn set_event_listener(&self, listener: Arc<dyn EventListener>) {
        *self.listener.write().unwrap_or_else(|p| p.into_inner()) = Some(listener);
    }

    pub(crate) fn notify_appended(&self, box_id: &BoxId, last_seq: u64) {
        let listener = self
            .listener
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(listener) = listener {
            listener.appended(box_id, last_seq);
        }
    }

    /// Stores the guest's events with the box's next seqs and moves the box's cursor to the
    /// newest guest seq, in one transaction. Events with a guest seq at or below the stored
    /// cursor are skipped (a re-read after a reconnect or a crash).
    pub fn append_guest_events(
        &self,
        box_id: &BoxId,
        events: &[GuestEvent],
    ) -> Result<Appended, StoreError> {
        let appended = {
            let mut conn = self.conn();
            let tx = conn.transaction().map_err(sql("begin a transaction"))?;
            let mut cursor: u64 = tx
                .query_row(
                    "SELECT event_cursor FROM boxes WHERE id = ?1",
                    params![box_id.as_str()],
                    |row| row.get::<_, i64>(0),
                )
                .optional()
                .map_err(sql("read a box's event cursor"))?
                .ok_or_else(|| StoreError::BoxNotFound { id: box_id.clone() })?
                as u64;
            let mut last_seq = last_seq(&tx, box_id)?;
            let mut stored = 0;
            for event in events.iter() {
                if event.seq <= cursor {
                    continue;
                }
                let at = event_time(event.at_ms);
                last_seq += 1;
                insert(&tx, box_id, last_seq, &event.kind, &event.data, at)?;
                cursor = event.seq;
                stored += 1;
            }
            tx.execute(
                "UPDATE boxes SET event_cursor = ?1 WHERE id = ?2",
                params![cursor as i64, box_id.as_str()],
            )
            .map_err(sql("move a box's event cursor"))?;
            tx.commit().map_err(sql("commit events"))?;
            Appended {
                stored,
                last_seq,
                cursor,
            }
        };
        if appended.stored > 0 {
            self.notify_appended(box_id, appended.last_seq);
        }
        Ok(appended)
    }

    /// Appends one event of the host's own (e.g. a `state` change); returns its seq.
    pub fn append_event(
        &self,
        box_id: &BoxId,
        kind: &str,
        data: &serde_json::Value,
    ) -> Result<u64, StoreError> {
        let seq = {
            let mut conn = self.conn();
            let tx = conn.transaction().map_err(sql("begin a transaction"))?;
            let seq = last_seq(&tx, box_id)? + 1;
            insert(&tx, box_id, seq, kind, data, now())?;
            tx.commit().map_err(sql("commit an event"))?;
            seq
        };
        self.notify_appended(box_id, seq);
        Ok(seq)
    }

    /// The guest seq stored so far: where the next read of the guest journal starts.
    pub fn event_cursor(&self, box_id: &BoxId) -> Result<u64, StoreError> {
        let cursor: Option<i64> = self
            .conn()
            .query_row(
                "SELECT event_cursor FROM boxes WHERE id = ?1",
                params![box_id.as_str()],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql("read a box's event cursor"))?;
        cursor
            .map(|c| c as u64)
            .ok_or_else(|| StoreError::BoxNotFound { id: box_id.clone() })
    }

    /// The box's newest event seq (0: none yet).
    pub fn last_event_seq(&self, box_id: &BoxId) -> Result<u64, StoreError> {
        let conn = self.conn();
        let tx = conn
            .unchecked_transaction()
            .map_err(sql("begin a transaction"))?;
        let seq = last_seq(&tx, box_id)?;
        drop(tx);
        Ok(seq)
    }

    /// Up to `limit` events with `seq > after`, oldest first.
    pub fn read_events(
        &self,
        box_id: &BoxId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let raws: Vec<RawEvent> = {
            let conn = self.conn();
            let mut stmt = conn
                .prepare(
                    "SELECT seq, type, data, created_at FROM events \
                     WHERE box_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(sql("read events"))?;
            let rows = stmt
                .query_map(
                    params![box_id.as_str(), after as i64, limit],
                    RawEvent::from_row,
                )
                .map_err(sql("read events"))?;
            rows.collect::<Result<_, _>>().map_err(sql("read events"))?
        };
        raws.into_iter().map(RawEvent::into_record).collect()
    }
}

fn last_seq(tx: &Transaction<'_>, box_id: &BoxId) -> Result<u64, StoreError> {
    let seq: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE box_id = ?1",
            params![box_id.as_str()],
            |row| row.get(0),
        )
        .map_err(sql("read a box's last event seq"))?;
    Ok(seq as u64)
}

pub(crate) fn insert(
    tx: &Transaction<'_>,
    box_id: &BoxId,
    seq: u64,
    kind: &str,
    data: &serde_json::Value,
    at: OffsetDateTime,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO events (box_id, seq, type, data, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            box_id.as_str(),
            seq as i64,
            kind,
            data.to_string(),
            format_time(at)?
        ],
    )
    .map_err(sql("insert an event"))?;
    Ok(())
}

/// When `berth-init` read the event (milliseconds), else now.
fn event_time(at_ms: u64) -> OffsetDateTime {
    if at_ms == 0 {
        return now();
    }
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(at_ms) * 1_000_000)
        .unwrap_or_else(|_| now())
}

struct RawEvent {
    seq: i64,
    kind: String,
    data: String,
    created_at: String,
}

impl RawEvent {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<RawEvent> {
        Ok(RawEvent {
            seq: row.get(0)?,
            kind: row.get(1)?,
            data: row.get(2)?,
            created_at: row.get(3)?,
        })
    }

    fn into_record(self) -> Result<EventRecord, StoreError> {
        Ok(EventRecord {
            seq: self.seq as u64,
            kind: self.kind,
            data: serde_json::from_str(&self.data).map_err(|source| StoreError::CorruptJson {
                column: "events.data",
                source,
            })?,
            created_at: parse_time("events.created_at", &self.created_at)?,
        })
    }
}
