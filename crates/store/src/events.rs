//! The per-box event log: every harness event and box state change, numbered per box from
//! 1 with no gaps. Guest events come with the guest journal's own seq; the box row keeps
//! the last one stored (`event_cursor`), updated in the same transaction as the events, so
//! re-reading the guest journal after a crash stores nothing twice.
//!
//! The log is bounded: [`Store::prune_events`] removes the oldest events of a box over its
//! byte budget or past its age, always keeping the newest (so a seq is never reused), and
//! records the newest seq it removed, so a reader asking from before it gets an
//! [`EventGap`] instead of silently missing events. Pages are bounded by bytes as well as
//! by count ([`PageLimit`]).

use std::sync::Arc;

use berth_protocol::harness::GuestEvent;
use berth_protocol::BoxId;
use time::OffsetDateTime;

use crate::db::{Conn, Optional};
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
    /// The bytes of the box's kept events, these included (for the retention budget).
    pub kept_bytes: u64,
}

/// How much one page of events may hold: at most `events` events and, beyond the first
/// event, at most `bytes` bytes of event type and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit {
    pub events: u32,
    pub bytes: u64,
}

/// Events a reader asked for that were pruned before it read them: seqs `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventGap {
    pub first: u64,
    pub last: u64,
}

/// One page of a box's events after a seq.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    pub events: Vec<EventRecord>,
    /// More events are stored after the last one of this page.
    pub more: bool,
    /// Set when events after the asked-for seq were pruned: the page starts after them.
    pub gap: Option<EventGap>,
}

/// How much of each box's event log is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRetention {
    /// The oldest events go once a box's kept events take more bytes than this.
    pub max_bytes_per_box: u64,
    /// Events older than this go.
    pub max_age: std::time::Duration,
}

/// What one [`Store::prune_events`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub boxes: usize,
    pub events: u64,
    pub bytes: u64,
}

/// Most events removed in one write transaction, so a prune never holds the write lock
/// for long.
const PRUNE_BATCH: u32 = 256;

impl Store {
    /// Adds one more that hears about appended events (the daemon's live readers, its
    /// webhooks), after every commit that appended some.
    pub fn add_event_listener(&self, listener: Arc<dyn EventListener>) {
        self.listeners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(listener);
    }

    pub(crate) fn notify_appended(&self, box_id: &BoxId, last_seq: u64) {
        let listeners = self
            .listeners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for listener in listeners {
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
        let appended = self.db.write(|tx| {
            let mut cursor: u64 = tx
                .query_row(
                    "SELECT event_cursor FROM boxes WHERE id = ?1",
                    crate::args![box_id.as_str()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("read a box's event cursor"))?
                .ok_or_else(|| StoreError::BoxNotFound { id: box_id.clone() })?;
            let mut last_seq = last_seq(tx, box_id)?;
            let mut stored = 0;
            for event in events.iter() {
                if event.seq <= cursor {
                    continue;
                }
                let at = event_time(event.at_ms);
                last_seq += 1;
                insert(tx, box_id, last_seq, &event.kind, &event.data, at)?;
                cursor = event.seq;
                stored += 1;
            }
            let kept_bytes: u64 = tx
                .query_row(
                    "UPDATE boxes SET event_cursor = ?1 WHERE id = ?2 RETURNING event_bytes",
                    crate::args![cursor, box_id.as_str()],
                    |row| row.get(0),
                )
                .map_err(sql("move a box's event cursor"))?;
            Ok::<_, StoreError>(Appended {
                stored,
                last_seq,
                cursor,
                kept_bytes,
            })
        })?;
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
        let seq = self.db.write(|tx| {
            let seq = last_seq(tx, box_id)? + 1;
            insert(tx, box_id, seq, kind, data, now())?;
            Ok::<_, StoreError>(seq)
        })?;
        self.notify_appended(box_id, seq);
        Ok(seq)
    }

    /// The guest seq stored so far: where the next read of the guest journal starts.
    pub fn event_cursor(&self, box_id: &BoxId) -> Result<u64, StoreError> {
        let cursor: Option<u64> = self.db.read(|c| {
            c.query_row(
                "SELECT event_cursor FROM boxes WHERE id = ?1",
                crate::args![box_id.as_str()],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql("read a box's event cursor"))
        })?;
        cursor.ok_or_else(|| StoreError::BoxNotFound { id: box_id.clone() })
    }

    /// When the box last did something: its newest event that is not a state change
    /// (a message, an answer, a process's exit), or `None` before any.
    pub fn last_activity_at(&self, box_id: &BoxId) -> Result<Option<OffsetDateTime>, StoreError> {
        let at: Option<String> = self.db.read(|c| {
            c.query_row(
                "SELECT created_at FROM events WHERE box_id = ?1 AND type != 'state' \
                 ORDER BY seq DESC LIMIT 1",
                crate::args![box_id.as_str()],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql("read a box's last activity"))
        })?;
        at.map(|at| parse_time("events.created_at", &at))
            .transpose()
    }

    /// The box's newest event seq (0: none yet).
    pub fn last_event_seq(&self, box_id: &BoxId) -> Result<u64, StoreError> {
        self.db.read(|c| last_seq(c, box_id))
    }

    /// The events with `seq > after`, oldest first, as many as `limit` allows (always at
    /// least one when there is one). A box that does not exist has none.
    pub fn read_events(
        &self,
        box_id: &BoxId,
        after: u64,
        limit: PageLimit,
    ) -> Result<EventPage, StoreError> {
        // One snapshot: the pruned mark and the rows agree. The sizes come first (one row
        // past the count tells whether there is more), so only the events that fit the
        // page are read out with their data: a page is bounded by bytes, not only by count.
        self.db.snapshot(|c| {
            let pruned_through: u64 = c
                .query_row(
                    "SELECT event_pruned_through FROM boxes WHERE id = ?1",
                    crate::args![box_id.as_str()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("read a box's pruned events"))?
                .unwrap_or(0);
            let gap = (after < pruned_through).then_some(EventGap {
                first: after + 1,
                last: pruned_through,
            });
            let sizes: Vec<(u64, u64)> = c
                .query_map(
                    "SELECT seq, bytes FROM events WHERE box_id = ?1 AND seq > ?2 \
                     ORDER BY seq LIMIT ?3",
                    crate::args![box_id.as_str(), after, limit.events + 1],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .map_err(sql("read events"))?;
            let (mut fits, mut bytes) = (0usize, 0u64);
            for (_, size) in &sizes {
                if fits == limit.events as usize || (fits > 0 && bytes + size > limit.bytes) {
                    break;
                }
                bytes += size;
                fits += 1;
            }
            let more = sizes.len() > fits;
            let Some(&(last, _)) = sizes[..fits].last() else {
                return Ok(EventPage {
                    events: Vec::new(),
                    more,
                    gap,
                });
            };
            let events = c
                .query_map(
                    "SELECT seq, type, data, created_at FROM events \
                     WHERE box_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq",
                    crate::args![box_id.as_str(), after, last],
                    |row| {
                        Ok(RawEvent {
                            seq: row.get(0)?,
                            kind: row.get(1)?,
                            data: row.get(2)?,
                            created_at: row.get(3)?,
                        })
                    },
                )
                .map_err(sql("read events"))?
                .into_iter()
                .map(RawEvent::into_record)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(EventPage { events, more, gap })
        })
    }

    /// Removes, from every box's log, the oldest events past `retention` (over its byte
    /// budget, or older than its age), never a box's newest event. Runs in small write
    /// transactions.
    pub fn prune_events(&self, retention: EventRetention) -> Result<Pruned, StoreError> {
        let cutoff = format_time(now() - retention.max_age)?;
        let candidates: Vec<String> = self.db.read(|c| {
            c.query_map(
                "SELECT id FROM boxes WHERE event_bytes > ?1 OR \
                 (SELECT created_at FROM events WHERE box_id = boxes.id ORDER BY seq LIMIT 1) < ?2",
                crate::args![retention.max_bytes_per_box, cutoff],
                |row| row.get(0),
            )
            .map_err(sql("find boxes with events to prune"))
        })?;
        let mut pruned = Pruned::default();
        for id in candidates {
            let mut removed_any = false;
            loop {
                let (events, bytes) = self.prune_batch(&id, retention, &cutoff)?;
                if events == 0 {
                    break;
                }
                removed_any = true;
                pruned.events += events;
                pruned.bytes += bytes;
            }
            pruned.boxes += usize::from(removed_any);
        }
        Ok(pruned)
    }

    /// Removes up to [`PRUNE_BATCH`] of the box's oldest events past `retention`; returns
    /// how many and their bytes.
    fn prune_batch(
        &self,
        box_id: &str,
        retention: EventRetention,
        cutoff: &str,
    ) -> Result<(u64, u64), StoreError> {
        self.db.write(|tx| {
            let kept: Option<u64> = tx
                .query_row(
                    "SELECT event_bytes FROM boxes WHERE id = ?1",
                    crate::args![box_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("read a box's event bytes"))?;
            let Some(mut kept) = kept else {
                return Ok((0, 0));
            };
            let oldest: Vec<(u64, u64, String)> = tx
                .query_map(
                    "SELECT seq, bytes, created_at FROM events WHERE box_id = ?1 \
                     AND seq < (SELECT MAX(seq) FROM events WHERE box_id = ?1) ORDER BY seq LIMIT ?2",
                    crate::args![box_id, PRUNE_BATCH],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .map_err(sql("read events to prune"))?;
            let (mut last, mut events, mut bytes) = (0u64, 0u64, 0u64);
            for (seq, size, created_at) in oldest {
                if kept <= retention.max_bytes_per_box && created_at.as_str() >= cutoff {
                    break;
                }
                last = seq;
                kept = kept.saturating_sub(size);
                events += 1;
                bytes += size;
            }
            if events == 0 {
                return Ok((0, 0));
            }
            tx.execute(
                "DELETE FROM events WHERE box_id = ?1 AND seq <= ?2",
                crate::args![box_id, last],
            )
            .map_err(sql("prune events"))?;
            tx.execute(
                "UPDATE boxes SET event_bytes = ?1, event_pruned_through = ?2 WHERE id = ?3",
                crate::args![kept, last, box_id],
            )
            .map_err(sql("record pruned events"))?;
            Ok((events, bytes))
        })
    }
}

pub(crate) fn last_seq(tx: &Conn<'_>, box_id: &BoxId) -> Result<u64, StoreError> {
    tx.query_row(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE box_id = ?1",
        crate::args![box_id.as_str()],
        |row| row.get(0),
    )
    .map_err(sql("read a box's last event seq"))
}

pub(crate) fn insert(
    tx: &Conn<'_>,
    box_id: &BoxId,
    seq: u64,
    kind: &str,
    data: &serde_json::Value,
    at: OffsetDateTime,
) -> Result<(), StoreError> {
    let data = data.to_string();
    let bytes = kind.len() + data.len();
    let at = format_time(at)?;
    tx.execute(
        "INSERT INTO events (box_id, seq, type, data, created_at, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        crate::args![box_id.as_str(), seq, kind, data, at, bytes],
    )
    .map_err(sql("insert an event"))?;
    crate::webhooks::enqueue(tx, box_id, seq, kind, &data, &at)?;
    tx.execute(
        "UPDATE boxes SET event_bytes = event_bytes + ?1 WHERE id = ?2",
        crate::args![bytes, box_id.as_str()],
    )
    .map_err(sql("count an event's bytes"))?;
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
    seq: u64,
    kind: String,
    data: String,
    created_at: String,
}

impl RawEvent {
    fn into_record(self) -> Result<EventRecord, StoreError> {
        Ok(EventRecord {
            seq: self.seq,
            kind: self.kind,
            data: serde_json::from_str(&self.data).map_err(|source| StoreError::CorruptJson {
                column: "events.data",
                source,
            })?,
            created_at: parse_time("events.created_at", &self.created_at)?,
        })
    }
}
