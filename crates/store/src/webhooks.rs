//! Webhooks: a tenant's endpoints, the box events queued for them, and their deliveries.
//!
//! An event some webhook may want is queued by [`enqueue`] in the transaction that stores
//! it, so neither a crash nor a restart loses or repeats one. The daemon then fans each
//! queued event out to one delivery per endpoint that wants it ([`Store::fan_out`], one
//! transaction again), and attempts deliveries until one is answered or its time is up
//! ([`Store::record_attempt`]). A delivery's id is the `webhook-id` every attempt carries, so
//! a receiver that saw an attempt the daemon could not record as answered knows the repeat.

use berth_protocol::{BoxId, TenantId};
use time::OffsetDateTime;

use crate::db::{Conn, DbError, Optional, Row, ToArg};
use crate::error::{sql, StoreError};
use crate::{format_time, now, parse_time, Store};

/// Event-log types a webhook can be told of (the daemon names them for receivers).
pub const WEBHOOK_SOURCES: &[&str] = &["state", "result", "turn_timeout", "wakeup", "process_exit"];

/// One endpoint of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// `wh_` + 16 hex characters.
    pub id: String,
    pub tenant_id: TenantId,
    pub url: String,
    /// The event names it wants.
    pub events: Vec<String>,
    pub description: String,
    /// The signing secret as sealed by the daemon.
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
    pub created_at: OffsetDateTime,
}

/// What adding a webhook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookAdded {
    Added(Webhook),
    /// The tenant already has `max`; nothing was stored.
    LimitReached {
        max: usize,
    },
}

/// A box event queued for the tenant's webhooks.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedEvent {
    pub id: i64,
    pub tenant_id: TenantId,
    pub box_id: String,
    pub box_name: String,
    pub seq: u64,
    pub kind: String,
    pub data: serde_json::Value,
    pub created_at: OffsetDateTime,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Delivered,
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Result<DeliveryState, StoreError> {
        match s {
            "pending" => Ok(DeliveryState::Pending),
            "delivered" => Ok(DeliveryState::Delivered),
            "failed" => Ok(DeliveryState::Failed),
            _ => Err(StoreError::CorruptValue {
                column: "webhook_deliveries.state",
                value: s.to_owned(),
            }),
        }
    }
}

/// One event for one endpoint, and how its attempts went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `msg_` + 24 hex characters: the `webhook-id` header.
    pub id: String,
    pub webhook_id: String,
    pub tenant_id: TenantId,
    pub event: String,
    pub payload: String,
    pub state: DeliveryState,
    pub attempts: u32,
    /// Unix milliseconds.
    pub next_attempt_ms: i64,
    pub last_attempt_at: Option<OffsetDateTime>,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: OffsetDateTime,
}

/// A delivery to make: `state` is `Failed` when it is refused from the start.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub id: String,
    pub webhook_id: String,
    pub tenant_id: TenantId,
    pub event: String,
    pub payload: String,
    pub refused: Option<String>,
}

/// How one attempt ended.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub status: Option<u16>,
    pub error: Option<String>,
    /// `None`: answered with a 2xx. `Some(Some(ms))`: try again then. `Some(None)`: give up.
    pub retry: Option<Option<i64>>,
}

const WEBHOOK_COLUMNS: &str =
    "id, tenant_id, url, events, description, key_id, nonce, ciphertext, created_at";
const DELIVERY_COLUMNS: &str = "id, webhook_id, tenant_id, event, payload, state, attempts, \
     next_attempt_ms, last_attempt_at, last_status, last_error, created_at";

/// Queues a stored event for the webhooks of its box's tenant, if it has any and the event
/// is of a kind they may want; part of the transaction that stores the event.
pub(crate) fn enqueue(
    tx: &Conn<'_>,
    box_id: &BoxId,
    seq: u64,
    kind: &str,
    data: &str,
    at: &str,
) -> Result<(), StoreError> {
    if !WEBHOOK_SOURCES.contains(&kind) {
        return Ok(());
    }
    // Parameters only in a SELECT list: cast, so Postgres knows their types.
    tx.execute(
        "INSERT INTO webhook_queue (tenant_id, box_id, box_name, seq, type, data, created_at)
         SELECT b.tenant_id, b.id, b.name, CAST(?2 AS BIGINT), CAST(?3 AS TEXT),
                CAST(?4 AS TEXT), CAST(?5 AS TEXT) FROM boxes b
         WHERE b.id = ?1 AND EXISTS (SELECT 1 FROM webhooks w WHERE w.tenant_id = b.tenant_id)",
        crate::args![box_id.as_str(), seq, kind, data, at],
    )
    .map_err(sql("queue an event for webhooks"))?;
    Ok(())
}

impl Store {
    /// Adds `webhook` unless its tenant already has `max`.
    pub fn add_webhook(&self, webhook: &Webhook, max: usize) -> Result<WebhookAdded, StoreError> {
        let events = serde_json::Value::from(webhook.events.clone()).to_string();
        let created_at = format_time(webhook.created_at)?;
        self.db.write(|tx| {
            let count: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM webhooks WHERE tenant_id = ?1",
                    crate::args![webhook.tenant_id.as_str()],
                    |row| row.get(0),
                )
                .map_err(sql("count webhooks"))?;
            if count as usize >= max {
                return Ok(WebhookAdded::LimitReached { max });
            }
            tx.execute(
                &format!("INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
                crate::args![
                    webhook.id,
                    webhook.tenant_id.as_str(),
                    webhook.url,
                    events,
                    webhook.description,
                    webhook.key_id,
                    webhook.nonce,
                    webhook.ciphertext,
                    created_at
                ],
            )
            .map_err(sql("add a webhook"))?;
            Ok(WebhookAdded::Added(webhook.clone()))
        })
    }

    /// The tenant's webhooks, oldest first.
    pub fn list_webhooks(&self, tenant: &TenantId) -> Result<Vec<Webhook>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                &format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = ?1 ORDER BY created_at, id"
                ),
                crate::args![tenant.as_str()],
                webhook_row,
            )
            .map_err(sql("list webhooks"))
        })?;
        rows.into_iter().collect()
    }

    /// Webhook `id`, whoever's it is (`tenant` given: only that tenant's).
    pub fn get_webhook(
        &self,
        tenant: Option<&TenantId>,
        id: &str,
    ) -> Result<Option<Webhook>, StoreError> {
        let found = self
            .db
            .read(|c| {
                c.query_row(
                    &format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ?1"),
                    crate::args![id],
                    webhook_row,
                )
                .optional()
                .map_err(sql("read a webhook"))
            })?
            .transpose()?;
        Ok(found.filter(|w| tenant.is_none_or(|t| *t == w.tenant_id)))
    }

    /// Deletes the tenant's webhook `id` and its deliveries; whether there was one.
    pub fn delete_webhook(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError> {
        let deleted = self.db.write(|tx| {
            tx.execute(
                "DELETE FROM webhooks WHERE tenant_id = ?1 AND id = ?2",
                crate::args![tenant.as_str(), id],
            )
            .map_err(sql("delete a webhook"))
        })?;
        Ok(deleted > 0)
    }

    /// The oldest `limit` queued events.
    pub fn webhook_queue(&self, limit: u32) -> Result<Vec<QueuedEvent>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                "SELECT id, tenant_id, box_id, box_name, seq, type, data, created_at
                 FROM webhook_queue ORDER BY id LIMIT ?1",
                crate::args![limit],
                |row| {
                    Ok((
                        row.get::<i64>(0)?,
                        row.get::<String>(1)?,
                        row.get::<String>(2)?,
                        row.get::<String>(3)?,
                        row.get::<i64>(4)?,
                        row.get::<String>(5)?,
                        row.get::<String>(6)?,
                        row.get::<String>(7)?,
                    ))
                },
            )
            .map_err(sql("read the webhook queue"))
        })?;
        rows.into_iter()
            .map(|(id, tenant, box_id, box_name, seq, kind, data, at)| {
                Ok(QueuedEvent {
                    id,
                    tenant_id: parse_tenant("webhook_queue.tenant_id", &tenant)?,
                    box_id,
                    box_name,
                    seq: seq as u64,
                    kind,
                    data: serde_json::from_str(&data).unwrap_or(serde_json::Value::Null),
                    created_at: parse_time("webhook_queue.created_at", &at)?,
                })
            })
            .collect()
    }

    /// Stores `deliveries` and takes queued events `done` off the queue, in one
    /// transaction. A webhook deleted meanwhile gets none.
    pub fn fan_out(&self, done: &[i64], deliveries: &[NewDelivery]) -> Result<(), StoreError> {
        let at = format_time(now())?;
        let now_ms = unix_ms(now());
        self.db.write(|tx| {
            for d in deliveries {
                let state = match d.refused {
                    Some(_) => DeliveryState::Failed,
                    None => DeliveryState::Pending,
                };
                // Parameters only in a SELECT list: cast, so Postgres knows their types.
                tx.execute(
                    "INSERT INTO webhook_deliveries
                       (id, webhook_id, tenant_id, event, payload, state, next_attempt_ms, last_error, created_at)
                     SELECT CAST(?1 AS TEXT), CAST(?2 AS TEXT), CAST(?3 AS TEXT), CAST(?4 AS TEXT),
                            CAST(?5 AS TEXT), CAST(?6 AS TEXT), CAST(?7 AS BIGINT), CAST(?8 AS TEXT),
                            CAST(?9 AS TEXT)
                     WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = ?2)",
                    crate::args![
                        d.id,
                        d.webhook_id,
                        d.tenant_id.as_str(),
                        d.event,
                        d.payload,
                        state.as_str(),
                        now_ms,
                        d.refused,
                        at
                    ],
                )
                .map_err(sql("add a webhook delivery"))?;
            }
            for id in done {
                tx.execute("DELETE FROM webhook_queue WHERE id = ?1", crate::args![id])
                    .map_err(sql("take an event off the webhook queue"))?;
            }
            Ok(())
        })
    }

    /// Pending deliveries of webhook `webhook_id`.
    pub fn pending_deliveries(&self, webhook_id: &str) -> Result<u64, StoreError> {
        let count: i64 = self.db.read(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM webhook_deliveries WHERE webhook_id = ?1 AND state = 'pending'",
                crate::args![webhook_id],
                |row| row.get(0),
            )
            .map_err(sql("count pending webhook deliveries"))
        })?;
        Ok(count as u64)
    }

    /// Pending deliveries due by `now_ms`, the longest due first, `limit` at most.
    pub fn due_deliveries(&self, now_ms: i64, limit: u32) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries(
            "WHERE state = 'pending' AND next_attempt_ms <= ?1 ORDER BY next_attempt_ms, id LIMIT ?2",
            crate::args![now_ms, limit],
        )
    }

    /// When the next pending delivery is due (unix ms), if any is pending.
    pub fn next_delivery_due(&self) -> Result<Option<i64>, StoreError> {
        self.db.read(|c| {
            c.query_row(
                "SELECT MIN(next_attempt_ms) FROM webhook_deliveries WHERE state = 'pending'",
                crate::args![],
                |row| row.get(0),
            )
            .map_err(sql("find the next webhook delivery"))
        })
    }

    /// The newest `limit` deliveries of the tenant's webhook `webhook_id`.
    pub fn list_deliveries(
        &self,
        tenant: &TenantId,
        webhook_id: &str,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries(
            "WHERE tenant_id = ?1 AND webhook_id = ?2 ORDER BY created_at DESC, rowid DESC LIMIT ?3",
            crate::args![tenant.as_str(), webhook_id, limit],
        )
    }

    /// Delivery `id` of the tenant.
    pub fn get_delivery(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<Option<Delivery>, StoreError> {
        Ok(self
            .deliveries(
                "WHERE tenant_id = ?1 AND id = ?2",
                crate::args![tenant.as_str(), id],
            )?
            .pop())
    }

    /// Records an attempt of pending delivery `id` (one no longer pending is left alone).
    pub fn record_attempt(&self, id: &str, attempt: &Attempt) -> Result<(), StoreError> {
        let (state, next_ms) = match attempt.retry {
            None => (DeliveryState::Delivered, None),
            Some(Some(ms)) => (DeliveryState::Pending, Some(ms)),
            Some(None) => (DeliveryState::Failed, None),
        };
        let at = format_time(now())?;
        self.db.write(|tx| {
            tx.execute(
                "UPDATE webhook_deliveries SET state = ?2, attempts = attempts + 1,
                   next_attempt_ms = COALESCE(CAST(?3 AS BIGINT), next_attempt_ms),
                   last_attempt_at = ?4, last_status = ?5, last_error = ?6
                 WHERE id = ?1 AND state = 'pending'",
                crate::args![
                    id,
                    state.as_str(),
                    next_ms,
                    at,
                    attempt.status,
                    attempt.error
                ],
            )
            .map_err(sql("record a webhook attempt"))
        })?;
        Ok(())
    }

    /// Forgets answered and given-up deliveries created before `before`; how many.
    pub fn prune_deliveries(&self, before: OffsetDateTime) -> Result<usize, StoreError> {
        let before = format_time(before)?;
        self.db.write(|tx| {
            tx.execute(
                "DELETE FROM webhook_deliveries WHERE state != 'pending' AND created_at < ?1",
                crate::args![before],
            )
            .map_err(sql("prune webhook deliveries"))
        })
    }

    fn deliveries(&self, filter: &str, args: &[&dyn ToArg]) -> Result<Vec<Delivery>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                &format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries {filter}"),
                args,
                delivery_row,
            )
            .map_err(sql("read webhook deliveries"))
        })?;
        rows.into_iter().collect()
    }
}

/// Unix milliseconds of `t`.
pub fn unix_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

fn parse_tenant(column: &'static str, s: &str) -> Result<TenantId, StoreError> {
    s.parse()
        .map_err(|source| StoreError::CorruptId { column, source })
}

fn webhook_row(row: &Row) -> Result<Result<Webhook, StoreError>, DbError> {
    let tenant: String = row.get(1)?;
    let events: String = row.get(3)?;
    let created_at: String = row.get(8)?;
    let (id, url, description, key_id, nonce, ciphertext) = (
        row.get(0)?,
        row.get(2)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
    );
    Ok((|| {
        Ok(Webhook {
            id,
            tenant_id: parse_tenant("webhooks.tenant_id", &tenant)?,
            url,
            events: serde_json::from_str(&events).map_err(|source| StoreError::CorruptJson {
                column: "webhooks.events",
                source,
            })?,
            description,
            key_id,
            nonce,
            ciphertext,
            created_at: parse_time("webhooks.created_at", &created_at)?,
        })
    })())
}

fn delivery_row(row: &Row) -> Result<Result<Delivery, StoreError>, DbError> {
    let tenant: String = row.get(2)?;
    let state: String = row.get(5)?;
    let last_attempt_at: Option<String> = row.get(8)?;
    let created_at: String = row.get(11)?;
    let (id, webhook_id, event, payload, attempts, next_attempt_ms, last_status, last_error) = (
        row.get(0)?,
        row.get(1)?,
        row.get(3)?,
        row.get(4)?,
        row.get::<i64>(6)?,
        row.get(7)?,
        row.get::<Option<i64>>(9)?,
        row.get(10)?,
    );
    Ok((|| {
        Ok(Delivery {
            id,
            webhook_id,
            tenant_id: parse_tenant("webhook_deliveries.tenant_id", &tenant)?,
            event,
            payload,
            state: DeliveryState::parse(&state)?,
            attempts: attempts as u32,
            next_attempt_ms,
            last_attempt_at: last_attempt_at
                .map(|at| parse_time("webhook_deliveries.last_attempt_at", &at))
                .transpose()?,
            last_status: last_status.map(|s| s as u16),
            last_error,
            created_at: parse_time("webhook_deliveries.created_at", &created_at)?,
        })
    })())
}
