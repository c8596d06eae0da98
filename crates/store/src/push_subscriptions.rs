//! Web Push subscriptions: where to send a tenant's notifications, and the keys to
//! encrypt them with (RFC 8291). The daemon validates what a browser sends before it gets
//! here; the store keeps at most a given number per tenant, and one row per endpoint.

use berth_protocol::TenantId;
use time::OffsetDateTime;

use crate::db::{DbError, Optional, Row};
use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, parse_time, random, Store};

/// One browser's subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSubscription {
    /// `ps_` + 16 hex characters.
    pub id: String,
    pub tenant_id: TenantId,
    pub endpoint: String,
    /// The browser's P-256 public key, base64url as given.
    pub p256dh: String,
    /// The browser's auth secret, base64url as given.
    pub auth: String,
    pub created_at: OffsetDateTime,
}

/// What a subscription request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscribed {
    /// A new row.
    Added(PushSubscription),
    /// The endpoint was already subscribed: the same row, its keys replaced by the new
    /// ones (a browser that re-subscribes may have new keys for the same endpoint).
    Existing(PushSubscription),
    /// The tenant already has `max` subscriptions; nothing was stored.
    LimitReached { max: usize },
}

/// What a new subscription holds.
#[derive(Debug, Clone, Copy)]
pub struct NewPushSubscription<'a> {
    pub endpoint: &'a str,
    pub p256dh: &'a str,
    pub auth: &'a str,
}

const COLUMNS: &str = "id, tenant_id, endpoint, p256dh, auth, created_at";

impl Store {
    /// Subscribes `new.endpoint` for `tenant`, unless the tenant already has `max`
    /// subscriptions (re-subscribing a known endpoint is always allowed).
    pub fn add_push_subscription(
        &self,
        tenant: &TenantId,
        new: NewPushSubscription<'_>,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        let new_id = format!("ps_{}", hex(&random::<8>()?));
        let created_at = format_time(now())?;
        self.db.write(|tx| {
            let existing: Option<String> = tx
                .query_row(
                    "SELECT id FROM push_subscriptions WHERE tenant_id = ?1 AND endpoint = ?2",
                    crate::args![tenant.as_str(), new.endpoint],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("look up a push subscription"))?;
            let known = existing.is_some();
            let id = match existing {
                Some(id) => {
                    tx.execute(
                        "UPDATE push_subscriptions SET p256dh = ?1, auth = ?2 WHERE id = ?3",
                        crate::args![new.p256dh, new.auth, id],
                    )
                    .map_err(sql("update a push subscription"))?;
                    id
                }
                None => {
                    let count: i64 = tx
                        .query_row(
                            "SELECT COUNT(*) FROM push_subscriptions WHERE tenant_id = ?1",
                            crate::args![tenant.as_str()],
                            |row| row.get(0),
                        )
                        .map_err(sql("count push subscriptions"))?;
                    if count as usize >= max {
                        return Ok(Subscribed::LimitReached { max });
                    }
                    tx.execute(
                        "INSERT INTO push_subscriptions (id, tenant_id, endpoint, p256dh, auth, created_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        crate::args![
                            new_id,
                            tenant.as_str(),
                            new.endpoint,
                            new.p256dh,
                            new.auth,
                            created_at
                        ],
                    )
                    .map_err(sql("add a push subscription"))?;
                    new_id.clone()
                }
            };
            let row = tx
                .query_row(
                    &format!("SELECT {COLUMNS} FROM push_subscriptions WHERE id = ?1"),
                    crate::args![id],
                    raw,
                )
                .map_err(sql("read a push subscription"))?
                .parse()?;
            Ok(if known {
                Subscribed::Existing(row)
            } else {
                Subscribed::Added(row)
            })
        })
    }

    /// The tenant's subscriptions, oldest first.
    pub fn list_push_subscriptions(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<PushSubscription>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM push_subscriptions WHERE tenant_id = ?1 \
                     ORDER BY created_at, rowid"
                ),
                crate::args![tenant.as_str()],
                raw,
            )
            .map_err(sql("list push subscriptions"))
        })?;
        rows.into_iter().map(Raw::parse).collect()
    }

    /// Deletes the tenant's subscription `id`; whether there was one.
    pub fn delete_push_subscription(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<bool, StoreError> {
        let deleted = self.db.write(|tx| {
            tx.execute(
                "DELETE FROM push_subscriptions WHERE tenant_id = ?1 AND id = ?2",
                crate::args![tenant.as_str(), id],
            )
            .map_err(sql("delete a push subscription"))
        })?;
        Ok(deleted > 0)
    }
}

/// A row as read, parsed outside the row closure (so parse errors are ours).
struct Raw {
    id: String,
    tenant_id: String,
    endpoint: String,
    p256dh: String,
    auth: String,
    created_at: String,
}

fn raw(row: &Row) -> Result<Raw, DbError> {
    Ok(Raw {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        endpoint: row.get(2)?,
        p256dh: row.get(3)?,
        auth: row.get(4)?,
        created_at: row.get(5)?,
    })
}

impl Raw {
    fn parse(self) -> Result<PushSubscription, StoreError> {
        Ok(PushSubscription {
            id: self.id,
            tenant_id: self
                .tenant_id
                .parse()
                .map_err(|source| StoreError::CorruptId {
                    column: "push_subscriptions.tenant_id",
                    source,
                })?,
            endpoint: self.endpoint,
            p256dh: self.p256dh,
            auth: self.auth,
            created_at: parse_time("push_subscriptions.created_at", &self.created_at)?,
        })
    }
}
