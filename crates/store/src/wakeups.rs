//! Scheduled wakeups: a message posted to a box at each of its slots. The store keeps the
//! next slot of each; the daemon computes slots and fires them (`post_message` with a key
//! from [`Wakeup::slot_key`], then [`Store::finish_slot`]), so each slot's message is
//! posted once even across a crash between the two.
//!
//! A box's own wakeups (`berth-wake`) are bounded per hour twice: by the wakeups it makes
//! (`wakeup_box_requests`) and by the slots they fire (`wakeup_box_slots`,
//! [`Store::box_slots_fired`]); a slot past the second is skipped
//! ([`SlotOutcome::Skipped`]), never queued.

use berth_protocol::BoxId;
use time::OffsetDateTime;

use crate::db::{Conn, DbError, Optional, Row};
use crate::error::{sql, StoreError};
use crate::events::{insert, last_seq};
use crate::messages::MessageId;
use crate::{format_time, hex, now, parse_time, random, Store};

/// How a wakeup's slots are given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeupKind {
    /// One slot at a given time.
    At,
    /// One slot a given delay after it was made.
    In,
    /// A slot at each match of a 5-field expression read in an IANA time zone.
    Cron { expr: String, tz: String },
}

impl WakeupKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            WakeupKind::At => "at",
            WakeupKind::In => "in",
            WakeupKind::Cron { .. } => "cron",
        }
    }
}

/// Who made a wakeup: a caller of the public API, or the box itself (`berth-wake`), whose
/// wakeups have limits of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeupOrigin {
    Api,
    Box,
}

impl WakeupOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            WakeupOrigin::Api => "api",
            WakeupOrigin::Box => "box",
        }
    }

    fn parse(s: &str) -> Result<WakeupOrigin, StoreError> {
        match s {
            "api" => Ok(WakeupOrigin::Api),
            "box" => Ok(WakeupOrigin::Box),
            other => Err(StoreError::CorruptValue {
                column: "wakeups.created_by",
                value: other.to_owned(),
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wakeup {
    /// `wk_` + 16 hex characters.
    pub id: String,
    pub box_id: BoxId,
    pub message: String,
    pub kind: WakeupKind,
    /// The slot not yet fired, Unix milliseconds.
    pub next_due_ms: i64,
    /// Slots fired so far.
    pub fired: u64,
    /// Slots skipped so far (a box's own, past its hourly limit).
    pub skipped: u64,
    pub created_by: WakeupOrigin,
    pub created_at: OffsetDateTime,
}

impl Wakeup {
    /// The idempotency key of the message of slot `slot_ms`: the same slot always posts
    /// under the same key, so a slot fired again after a crash is deduped.
    pub fn slot_key(&self, slot_ms: i64) -> MessageId {
        MessageId::from_key(&format!("wake:{}:{slot_ms}", self.id))
            .expect("a wakeup id and a number make a valid message key")
    }
}

/// What a new wakeup holds.
#[derive(Debug, Clone)]
pub struct NewWakeup<'a> {
    pub box_id: &'a BoxId,
    pub message: &'a str,
    pub kind: WakeupKind,
    pub first_due_ms: i64,
    pub created_by: WakeupOrigin,
}

/// The limits a new wakeup is checked against, in the same transaction that adds it.
#[derive(Debug, Clone, Copy)]
pub struct WakeupLimits {
    /// Wakeups a box may have pending.
    pub max_pending: u64,
    /// Wakeups the box itself may make per hour (`None`: not counted, for the API's).
    pub max_per_hour: Option<u64>,
    /// Crons the box itself may have (`None`: not counted, for the API's).
    pub max_box_crons: Option<u64>,
}

/// What [`Store::add_wakeup`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddedWakeup {
    Added(Wakeup),
    /// The box already has `max` pending wakeups; nothing was stored.
    TooManyPending {
        max: u64,
    },
    /// The box made `max` wakeups in the last hour; nothing was stored.
    TooManyPerHour {
        max: u64,
    },
    /// The box already has `max` crons it made itself; nothing was stored.
    TooManyCrons {
        max: u64,
    },
}

/// A slot the scheduler reached: which (Unix ms), the wakeup's next (`None`: it has no
/// more), and when, by the scheduler's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotReached {
    pub slot_ms: i64,
    pub next_ms: Option<i64>,
    pub now_ms: i64,
}

/// How a slot ends: its message posted, or skipped (a box-made wakeup's, past the box's
/// hourly limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOutcome {
    Fired,
    Skipped,
}

/// What [`Store::finish_slot`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotFinished {
    /// The wakeup no longer waits for that slot (ended already, moved on or cancelled):
    /// nothing changed.
    Gone,
    /// Recorded, and the event appended to the box's log.
    Logged,
    /// Skipped and counted, no event: the log was told of a skip within the hour.
    Counted,
}

const COLUMNS: &str =
    "id, box_id, message, kind, cron, tz, next_due_ms, fired, created_by, created_at, skipped";
const HOUR_MS: i64 = 3_600_000;

impl Store {
    /// Adds a wakeup unless the box is at a limit.
    pub fn add_wakeup(
        &self,
        new: NewWakeup<'_>,
        limits: WakeupLimits,
    ) -> Result<AddedWakeup, StoreError> {
        let id = format!("wk_{}", hex(&random::<8>()?));
        let created_at = now();
        let created_text = format_time(created_at)?;
        let now_ms = (created_at.unix_timestamp_nanos() / 1_000_000) as i64;
        let box_id = new.box_id.as_str();
        let (cron, tz) = match &new.kind {
            WakeupKind::Cron { expr, tz } => (Some(expr.as_str()), Some(tz.as_str())),
            WakeupKind::At | WakeupKind::In => (None, None),
        };
        let own_cron =
            new.created_by == WakeupOrigin::Box && matches!(new.kind, WakeupKind::Cron { .. });
        self.db.write(|tx| {
            let box_exists: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM boxes WHERE id = ?1)",
                    crate::args![box_id],
                    |row| row.get(0),
                )
                .map_err(sql("look up a box"))?;
            if !box_exists {
                return Err(StoreError::BoxNotFound {
                    id: new.box_id.clone(),
                });
            }
            let pending: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM wakeups WHERE box_id = ?1",
                    crate::args![box_id],
                    |row| row.get(0),
                )
                .map_err(sql("count a box's wakeups"))?;
            if pending as u64 >= limits.max_pending {
                return Ok(AddedWakeup::TooManyPending {
                    max: limits.max_pending,
                });
            }
            if let (Some(max), true) = (limits.max_box_crons, own_cron) {
                let crons: i64 = tx
                    .query_row(
                        "SELECT COUNT(*) FROM wakeups \
                         WHERE box_id = ?1 AND kind = 'cron' AND created_by = 'box'",
                        crate::args![box_id],
                        |row| row.get(0),
                    )
                    .map_err(sql("count a box's own crons"))?;
                if crons as u64 >= max {
                    return Ok(AddedWakeup::TooManyCrons { max });
                }
            }
            if let Some(max) = limits.max_per_hour {
                tx.execute(
                    "DELETE FROM wakeup_box_requests WHERE box_id = ?1 AND at_ms <= ?2",
                    crate::args![box_id, now_ms - HOUR_MS],
                )
                .map_err(sql("forget old wakeup requests"))?;
                let made: i64 = tx
                    .query_row(
                        "SELECT COUNT(*) FROM wakeup_box_requests WHERE box_id = ?1",
                        crate::args![box_id],
                        |row| row.get(0),
                    )
                    .map_err(sql("count a box's wakeup requests"))?;
                if made as u64 >= max {
                    // Commits the forgetting above, and nothing else.
                    return Ok(AddedWakeup::TooManyPerHour { max });
                }
                tx.execute(
                    "INSERT INTO wakeup_box_requests (box_id, at_ms) VALUES (?1, ?2)",
                    crate::args![box_id, now_ms],
                )
                .map_err(sql("count a wakeup request"))?;
            }
            tx.execute(
                "INSERT INTO wakeups (id, box_id, message, kind, cron, tz, next_due_ms, created_by, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                crate::args![
                    id,
                    box_id,
                    new.message,
                    new.kind.as_str(),
                    cron,
                    tz,
                    new.first_due_ms,
                    new.created_by.as_str(),
                    created_text
                ],
            )
            .map_err(sql("add a wakeup"))?;
            let added = read(tx, &id)?.ok_or_else(|| StoreError::CorruptValue {
                column: "wakeups.id",
                value: id.clone(),
            })?;
            Ok(AddedWakeup::Added(added))
        })
    }

    /// The box's pending wakeups, soonest first.
    pub fn list_wakeups(&self, box_id: &BoxId) -> Result<Vec<Wakeup>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM wakeups WHERE box_id = ?1 ORDER BY next_due_ms, rowid"
                ),
                crate::args![box_id.as_str()],
                raw,
            )
            .map_err(sql("list wakeups"))
        })?;
        rows.into_iter().map(Raw::parse).collect()
    }

    /// Cancels the box's wakeup `id`; the wakeup as it was, if there was one.
    pub fn delete_wakeup(&self, box_id: &BoxId, id: &str) -> Result<Option<Wakeup>, StoreError> {
        self.db.write(|tx| {
            let Some(found) = read(tx, id)?.filter(|w| &w.box_id == box_id) else {
                return Ok(None);
            };
            tx.execute("DELETE FROM wakeups WHERE id = ?1", crate::args![id])
                .map_err(sql("delete a wakeup"))?;
            Ok(Some(found))
        })
    }

    /// The soonest slot of any box, Unix milliseconds.
    pub fn next_wakeup_due_ms(&self) -> Result<Option<i64>, StoreError> {
        self.db.read(|c| {
            c.query_row(
                "SELECT MIN(next_due_ms) FROM wakeups",
                crate::args![],
                |row| row.get(0),
            )
            .map_err(sql("find the next wakeup"))
        })
    }

    /// Wakeups whose slot is at or before `now_ms`, the most overdue first.
    pub fn due_wakeups(&self, now_ms: i64, limit: u32) -> Result<Vec<Wakeup>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM wakeups WHERE next_due_ms <= ?1 \
                     ORDER BY next_due_ms, rowid LIMIT ?2"
                ),
                crate::args![now_ms, limit],
                raw,
            )
            .map_err(sql("list due wakeups"))
        })?;
        rows.into_iter().map(Raw::parse).collect()
    }

    /// Ends the slot `reached.slot_ms` of `wakeup` as `outcome`, in one transaction: moves
    /// the wakeup to `reached.next_ms` (or deletes it when `None`) and counts the slot in
    /// its `fired` or `skipped`; a box-made wakeup's fired slot counts against its box's
    /// hour (by the scheduler's clock, `reached.now_ms`). Then appends `event` to the box's
    /// log, except for a skip when the log was told of one within the hour (so skips
    /// cannot fill the box's bounded log). Only if the wakeup still waits for that very
    /// slot (else [`SlotFinished::Gone`]: already ended, or cancelled), so each slot's event
    /// is written once. With `fence`, only while that lease term is current
    /// ([`StoreError::LeaseLost`]).
    pub fn finish_slot(
        &self,
        wakeup: &Wakeup,
        reached: SlotReached,
        outcome: SlotOutcome,
        event: (&str, &serde_json::Value),
        fence: Option<&crate::Fence>,
    ) -> Result<SlotFinished, StoreError> {
        let SlotReached {
            slot_ms,
            next_ms,
            now_ms,
        } = reached;
        let (finished, seq) = self.db.write(|tx| -> Result<_, StoreError> {
            // A scheduler that lost its lease (it stalled past it) writes nothing.
            if let Some(fence) = fence {
                crate::leases::check_fence(tx, fence)?;
            }
            if !move_on(tx, wakeup, slot_ms, next_ms, outcome)? {
                return Ok((SlotFinished::Gone, None));
            }
            match outcome {
                SlotOutcome::Fired if wakeup.created_by == WakeupOrigin::Box => {
                    record_box_slot(tx, &wakeup.box_id, now_ms, "fired")?;
                }
                SlotOutcome::Fired => {}
                SlotOutcome::Skipped => {
                    let told: bool = tx
                        .query_row(
                            "SELECT EXISTS (SELECT 1 FROM wakeup_box_slots \
                             WHERE box_id = ?1 AND outcome = 'skip_told' AND at_ms > ?2)",
                            crate::args![wakeup.box_id.as_str(), now_ms - HOUR_MS],
                            |row| row.get(0),
                        )
                        .map_err(sql("look up a box's told skips"))?;
                    if told {
                        return Ok((SlotFinished::Counted, None));
                    }
                    record_box_slot(tx, &wakeup.box_id, now_ms, "skip_told")?;
                }
            }
            let seq = last_seq(tx, &wakeup.box_id)? + 1;
            insert(tx, &wakeup.box_id, seq, event.0, event.1, now())?;
            Ok((SlotFinished::Logged, Some(seq)))
        })?;
        if let Some(seq) = seq {
            self.notify_appended(&wakeup.box_id, seq);
        }
        Ok(finished)
    }

    /// Slots of the box's own wakeups fired in the hour up to `now_ms`.
    pub fn box_slots_fired(&self, box_id: &BoxId, now_ms: i64) -> Result<u64, StoreError> {
        let fired: i64 = self.db.read(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM wakeup_box_slots \
                 WHERE box_id = ?1 AND outcome = 'fired' AND at_ms > ?2",
                crate::args![box_id.as_str(), now_ms - HOUR_MS],
                |row| row.get(0),
            )
            .map_err(sql("count a box's fired slots"))
        })?;
        Ok(fired.max(0) as u64)
    }
}

/// Moves `wakeup` on from `slot_ms` to `next_ms` (or deletes it when `None`), adding one to
/// its `fired` or `skipped`; `false` if it no longer waits for that slot.
fn move_on(
    tx: &Conn<'_>,
    wakeup: &Wakeup,
    slot_ms: i64,
    next_ms: Option<i64>,
    outcome: SlotOutcome,
) -> Result<bool, StoreError> {
    let counter = match outcome {
        SlotOutcome::Fired => "fired",
        SlotOutcome::Skipped => "skipped",
    };
    let changed = match next_ms {
        Some(next) => tx.execute(
            &format!(
                "UPDATE wakeups SET next_due_ms = ?1, {counter} = {counter} + 1 \
                 WHERE id = ?2 AND next_due_ms = ?3"
            ),
            crate::args![next, wakeup.id, slot_ms],
        ),
        None => tx.execute(
            "DELETE FROM wakeups WHERE id = ?1 AND next_due_ms = ?2",
            crate::args![wakeup.id, slot_ms],
        ),
    }
    .map_err(sql("finish a wakeup slot"))?;
    Ok(changed > 0)
}

/// Records in the box's hour a slot of a box-made wakeup (`fired`, or a skip the log was
/// told of: `skip_told`), forgetting those older than the hour.
fn record_box_slot(
    tx: &Conn<'_>,
    box_id: &BoxId,
    now_ms: i64,
    outcome: &'static str,
) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM wakeup_box_slots WHERE box_id = ?1 AND at_ms <= ?2",
        crate::args![box_id.as_str(), now_ms - HOUR_MS],
    )
    .map_err(sql("forget a box's old slots"))?;
    tx.execute(
        "INSERT INTO wakeup_box_slots (box_id, at_ms, outcome) VALUES (?1, ?2, ?3)",
        crate::args![box_id.as_str(), now_ms, outcome],
    )
    .map_err(sql("count a box's slot"))?;
    Ok(())
}

fn read(tx: &Conn<'_>, id: &str) -> Result<Option<Wakeup>, StoreError> {
    tx.query_row(
        &format!("SELECT {COLUMNS} FROM wakeups WHERE id = ?1"),
        crate::args![id],
        raw,
    )
    .optional()
    .map_err(sql("read a wakeup"))?
    .map(Raw::parse)
    .transpose()
}

/// A row as read, parsed outside the row closure (so parse errors are ours).
struct Raw {
    id: String,
    box_id: String,
    message: String,
    kind: String,
    cron: Option<String>,
    tz: Option<String>,
    next_due_ms: i64,
    fired: i64,
    created_by: String,
    created_at: String,
    skipped: i64,
}

fn raw(row: &Row) -> Result<Raw, DbError> {
    Ok(Raw {
        id: row.get(0)?,
        box_id: row.get(1)?,
        message: row.get(2)?,
        kind: row.get(3)?,
        cron: row.get(4)?,
        tz: row.get(5)?,
        next_due_ms: row.get(6)?,
        fired: row.get(7)?,
        created_by: row.get(8)?,
        created_at: row.get(9)?,
        skipped: row.get(10)?,
    })
}

impl Raw {
    fn parse(self) -> Result<Wakeup, StoreError> {
        let kind = match (self.kind.as_str(), self.cron, self.tz) {
            ("at", _, _) => WakeupKind::At,
            ("in", _, _) => WakeupKind::In,
            ("cron", Some(expr), Some(tz)) => WakeupKind::Cron { expr, tz },
            (other, _, _) => {
                return Err(StoreError::CorruptValue {
                    column: "wakeups.kind",
                    value: other.to_owned(),
                })
            }
        };
        Ok(Wakeup {
            id: self.id,
            box_id: self
                .box_id
                .parse()
                .map_err(|source| StoreError::CorruptId {
                    column: "wakeups.box_id",
                    source,
                })?,
            message: self.message,
            kind,
            next_due_ms: self.next_due_ms,
            fired: self.fired.max(0) as u64,
            skipped: self.skipped.max(0) as u64,
            created_by: WakeupOrigin::parse(&self.created_by)?,
            created_at: parse_time("wakeups.created_at", &self.created_at)?,
        })
    }
}
