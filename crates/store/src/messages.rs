//! Durable messages: accepted (committed, fsync'd) before the API answers, numbered per box
//! from 1 with no gaps, delivered to the box in that order.

use std::fmt;

use berth_protocol::BoxId;
use time::OffsetDateTime;

use crate::db::{DbError, Optional, Row};
use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, parse_time, random, Store};

/// Longest idempotency key a client may choose.
pub const MAX_MESSAGE_ID_CHARS: usize = 128;

/// A message's id: `msg_` + 20 hex characters when berth makes it, or the client's
/// idempotency key (1–128 of `A-Za-z0-9._:-`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(String);

/// A client-chosen message id that breaks the rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid message id {value:?}: 1–128 characters of A-Za-z0-9._:-")]
pub struct InvalidMessageId {
    pub value: String,
}

impl MessageId {
    /// A fresh id from the OS random source.
    pub fn generate() -> Result<MessageId, StoreError> {
        Ok(MessageId(format!("msg_{}", hex(&random::<10>()?))))
    }

    /// A client's idempotency key, validated.
    pub fn from_key(key: &str) -> Result<MessageId, InvalidMessageId> {
        let valid = !key.is_empty()
            && key.len() <= MAX_MESSAGE_ID_CHARS
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if valid {
            Ok(MessageId(key.to_owned()))
        } else {
            Err(InvalidMessageId {
                value: key.to_owned(),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageState {
    Queued,
    Delivered,
}

impl MessageState {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Queued => "queued",
            MessageState::Delivered => "delivered",
        }
    }

    fn parse(s: &str) -> Result<MessageState, StoreError> {
        match s {
            "queued" => Ok(MessageState::Queued),
            "delivered" => Ok(MessageState::Delivered),
            other => Err(StoreError::CorruptMessageState {
                value: other.to_owned(),
            }),
        }
    }
}

/// What `post_message` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    pub id: MessageId,
    pub seq: u64,
    /// `false`: the id was already taken by this same message (an idempotent retry).
    pub created: bool,
    /// The box's newest event seq when the message was first stored: its turn's events come
    /// after it. `None` for a message stored before berth kept it.
    pub events_after: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MessageRecord {
    pub id: MessageId,
    pub seq: u64,
    pub content: String,
    pub state: MessageState,
    pub created_at: OffsetDateTime,
    pub delivered_at: Option<OffsetDateTime>,
}

const COLUMNS: &str = "id, seq, content, state, created_at, delivered_at";

impl Store {
    /// Stores a message with the box's next seq; returns once the commit is on disk. With
    /// `id` given and already used for this box: the same content answers the stored
    /// message (`created: false`), other content is [`StoreError::IdempotencyConflict`].
    pub fn post_message(
        &self,
        box_id: &BoxId,
        id: Option<&MessageId>,
        content: &str,
    ) -> Result<Posted, StoreError> {
        let id = match id {
            Some(id) => id.clone(),
            None => MessageId::generate()?,
        };
        let created_at = format_time(now())?;
        self.db.write(|tx| {
            let existing: Option<(u64, String, Option<u64>)> = tx
                .query_row(
                    "SELECT seq, content, events_after FROM messages WHERE box_id = ?1 AND id = ?2",
                    crate::args![box_id.as_str(), id.as_str()],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()
                .map_err(sql("look up a message id"))?;
            if let Some((seq, stored, events_after)) = existing {
                if stored != content {
                    return Err(StoreError::IdempotencyConflict { id: id.clone() });
                }
                return Ok(Posted {
                    id: id.clone(),
                    seq,
                    created: false,
                    events_after,
                });
            }
            let box_exists: bool = tx
                .query_row(
                    "SELECT COUNT(*) FROM boxes WHERE id = ?1",
                    crate::args![box_id.as_str()],
                    |row| row.get(0),
                )
                .map_err(sql("look up a box"))?;
            if !box_exists {
                return Err(StoreError::BoxNotFound { id: box_id.clone() });
            }
            let seq: u64 = tx
                .query_row(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE box_id = ?1",
                    crate::args![box_id.as_str()],
                    |row| row.get(0),
                )
                .map_err(sql("allocate a message seq"))?;
            let events_after = crate::events::last_seq(tx, box_id)?;
            tx.execute(
                "INSERT INTO messages (box_id, seq, id, content, state, created_at, delivered_at, events_after) \
                 VALUES (?1, ?2, ?3, ?4, 'queued', ?5, NULL, ?6)",
                crate::args![box_id.as_str(), seq, id.as_str(), content, created_at, events_after],
            )
            .map_err(sql("insert a message"))?;
            Ok(Posted {
                id: id.clone(),
                seq,
                created: true,
                events_after: Some(events_after),
            })
        })
    }

    /// The oldest message of the box not yet delivered.
    pub fn next_undelivered(&self, box_id: &BoxId) -> Result<Option<MessageRecord>, StoreError> {
        let raw = self.db.read(|c| {
            c.query_row(
                &format!(
                    "SELECT {COLUMNS} FROM messages WHERE box_id = ?1 AND state = 'queued' \
                     ORDER BY seq LIMIT 1"
                ),
                crate::args![box_id.as_str()],
                RawMessage::from_row,
            )
            .optional()
            .map_err(sql("read the next queued message"))
        })?;
        raw.map(RawMessage::into_record).transpose()
    }

    /// How many messages of the box wait for delivery.
    pub fn count_undelivered(&self, box_id: &BoxId) -> Result<u64, StoreError> {
        self.db.read(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM messages WHERE box_id = ?1 AND state = 'queued'",
                crate::args![box_id.as_str()],
                |row| row.get(0),
            )
            .map_err(sql("count queued messages"))
        })
    }

    /// The ids of the box's oldest `limit` messages waiting for delivery, oldest first.
    pub fn undelivered_ids(
        &self,
        box_id: &BoxId,
        limit: u32,
    ) -> Result<Vec<MessageId>, StoreError> {
        let ids: Vec<String> = self.db.read(|c| {
            c.query_map(
                "SELECT id FROM messages WHERE box_id = ?1 AND state = 'queued' \
                 ORDER BY seq LIMIT ?2",
                crate::args![box_id.as_str(), limit],
                |row| row.get(0),
            )
            .map_err(sql("list queued messages"))
        })?;
        Ok(ids.into_iter().map(MessageId).collect())
    }

    /// Records that the box has the message. Marking a delivered message again is `Ok(false)`.
    pub fn mark_delivered(&self, box_id: &BoxId, id: &MessageId) -> Result<bool, StoreError> {
        let at = format_time(now())?;
        let n = self.db.write(|tx| {
            tx.execute(
                "UPDATE messages SET state = 'delivered', delivered_at = ?1 \
                 WHERE box_id = ?2 AND id = ?3 AND state = 'queued'",
                crate::args![at, box_id.as_str(), id.as_str()],
            )
            .map_err(sql("mark a message delivered"))
        })?;
        Ok(n > 0)
    }

    /// Up to `limit` messages with `seq > after`, oldest first.
    pub fn list_messages(
        &self,
        box_id: &BoxId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<MessageRecord>, StoreError> {
        let raws = self.db.read(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM messages WHERE box_id = ?1 AND seq > ?2 \
                     ORDER BY seq LIMIT ?3"
                ),
                crate::args![box_id.as_str(), after, limit],
                RawMessage::from_row,
            )
            .map_err(sql("list messages"))
        })?;
        raws.into_iter().map(RawMessage::into_record).collect()
    }

    /// Ids of boxes with at least one queued message (woken at daemon start).
    ///
    /// Only the boxes of node `node` (its id), or with `None` those on no node.
    pub fn boxes_with_queued_messages(&self, node: Option<&str>) -> Result<Vec<BoxId>, StoreError> {
        let ids: Vec<String> = self.db.read(|c| {
            c.query_map(
                "SELECT DISTINCT m.box_id FROM messages m JOIN boxes b ON b.id = m.box_id \
                 WHERE m.state = 'queued' AND COALESCE(b.node_id, '') = ?1",
                crate::args![node.unwrap_or("")],
                |row| row.get(0),
            )
            .map_err(sql("list boxes with queued messages"))
        })?;
        ids.into_iter()
            .map(|id| {
                id.parse().map_err(|source| StoreError::CorruptId {
                    column: "messages.box_id",
                    source,
                })
            })
            .collect()
    }
}

struct RawMessage {
    id: String,
    seq: u64,
    content: String,
    state: String,
    created_at: String,
    delivered_at: Option<String>,
}

impl RawMessage {
    fn from_row(row: &Row) -> Result<RawMessage, DbError> {
        Ok(RawMessage {
            id: row.get(0)?,
            seq: row.get(1)?,
            content: row.get(2)?,
            state: row.get(3)?,
            created_at: row.get(4)?,
            delivered_at: row.get(5)?,
        })
    }

    fn into_record(self) -> Result<MessageRecord, StoreError> {
        Ok(MessageRecord {
            // Stored ids were validated (or generated) on the way in.
            id: MessageId(self.id),
            seq: self.seq,
            content: self.content,
            state: MessageState::parse(&self.state)?,
            created_at: parse_time("messages.created_at", &self.created_at)?,
            delivered_at: self
                .delivered_at
                .map(|t| parse_time("messages.delivered_at", &t))
                .transpose()?,
        })
    }
}
