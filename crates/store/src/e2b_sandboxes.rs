//! The E2B-only facts of boxes made through the E2B API (migration 18): the sandbox id, the
//! template name asked for, the metadata, and the lifetime. The box itself is an ordinary
//! box row; its row here goes with it (`ON DELETE CASCADE`).
//!
//! A sandbox's timeout acts at `end_at_ms` while it is armed; the daemon's lifetime task
//! claims each due one ([`Store::claim_due_e2b`]), which disarms it in the same statement,
//! so a deadline acts once even when a client moves it at that moment.

use std::collections::BTreeMap;

use berth_protocol::{BoxId, TenantId};

use crate::box_rows::parse_map;
use crate::boxes::labels_json;
use crate::db::{Conn, DbError, Optional, Row};
use crate::error::{sql, StoreError};
use crate::Store;

/// A sandbox as the store keeps it. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bSandbox {
    pub box_id: BoxId,
    pub tenant_id: TenantId,
    /// What the SDK calls the sandbox; the box's name when it was made.
    pub sandbox_id: String,
    pub template_id: String,
    pub metadata: BTreeMap<String, String>,
    pub started_at_ms: i64,
    pub end_at_ms: i64,
    /// Whether `end_at_ms` will act.
    pub timeout_armed: bool,
    /// At the timeout: pause (`true`) or delete.
    pub auto_pause: bool,
    /// With `auto_pause`: keep the processes (`true`) or only the disk.
    pub auto_pause_memory: bool,
    pub secure: bool,
    /// `None`: not given at creation.
    pub allow_internet_access: Option<bool>,
}

/// A create request's `Idempotency-Key` and the hash of what it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bIdempotency {
    pub key: String,
    pub request_hash: String,
}

/// How [`Store::insert_e2b_sandbox`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum E2bInsert {
    Inserted,
    /// Another sandbox of the tenant was made with the same idempotency key: nothing was
    /// inserted, and this is that sandbox.
    KeyTaken(Box<E2bSandbox>, E2bIdempotency),
}

const COLUMNS: &str = "box_id, tenant_id, sandbox_id, template_id, metadata, started_at_ms, \
     end_at_ms, timeout_armed, auto_pause, auto_pause_memory, secure, allow_internet_access";

/// A row of [`COLUMNS`]; the inner error when a stored id or the metadata does not parse.
fn from_row(row: &Row) -> Result<Result<E2bSandbox, StoreError>, DbError> {
    let corrupt = |column| move |source| StoreError::CorruptId { column, source };
    let box_id = row
        .get::<String>(0)?
        .parse()
        .map_err(corrupt("e2b_sandboxes.box_id"));
    let tenant_id = row
        .get::<String>(1)?
        .parse()
        .map_err(corrupt("e2b_sandboxes.tenant_id"));
    let metadata = parse_map("e2b_sandboxes.metadata", &row.get::<String>(4)?);
    let (box_id, tenant_id, metadata) = match (box_id, tenant_id, metadata) {
        (Ok(box_id), Ok(tenant_id), Ok(metadata)) => (box_id, tenant_id, metadata),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Ok(Err(e)),
    };
    Ok(Ok(E2bSandbox {
        box_id,
        tenant_id,
        sandbox_id: row.get(2)?,
        template_id: row.get(3)?,
        metadata,
        started_at_ms: row.get(5)?,
        end_at_ms: row.get(6)?,
        timeout_armed: row.get(7)?,
        auto_pause: row.get(8)?,
        auto_pause_memory: row.get(9)?,
        secure: row.get(10)?,
        allow_internet_access: row.get(11)?,
    }))
}

impl Store {
    /// Records `sandbox` (its box exists already), with the create request's idempotency
    /// key if it had one. When the tenant already made a sandbox with that key, nothing is
    /// inserted and that one comes back ([`E2bInsert::KeyTaken`]), in one transaction.
    pub fn insert_e2b_sandbox(
        &self,
        sandbox: &E2bSandbox,
        idempotency: Option<&E2bIdempotency>,
    ) -> Result<E2bInsert, StoreError> {
        let metadata = labels_json(&sandbox.metadata);
        self.db.write(|tx| {
            if let Some(idem) = idempotency {
                if let Some((taken, stored)) = by_key(tx, &sandbox.tenant_id, &idem.key)? {
                    return Ok(E2bInsert::KeyTaken(Box::new(taken), stored));
                }
            }
            tx.execute(
                &format!(
                    "INSERT INTO e2b_sandboxes ({COLUMNS}, idempotency_key, request_hash) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
                ),
                crate::args![
                    sandbox.box_id.as_str(),
                    sandbox.tenant_id.as_str(),
                    sandbox.sandbox_id,
                    sandbox.template_id,
                    metadata,
                    sandbox.started_at_ms,
                    sandbox.end_at_ms,
                    sandbox.timeout_armed,
                    sandbox.auto_pause,
                    sandbox.auto_pause_memory,
                    sandbox.secure,
                    sandbox.allow_internet_access,
                    idempotency.map(|i| i.key.as_str()),
                    idempotency.map(|i| i.request_hash.as_str()),
                ],
            )
            .map_err(sql("record an E2B sandbox"))?;
            Ok(E2bInsert::Inserted)
        })
    }

    /// The tenant's sandbox `sandbox_id`.
    pub fn e2b_sandbox(
        &self,
        tenant: &TenantId,
        sandbox_id: &str,
    ) -> Result<Option<E2bSandbox>, StoreError> {
        self.db
            .read(|c| {
                c.query_row(
                    &format!(
                        "SELECT {COLUMNS} FROM e2b_sandboxes WHERE tenant_id = ?1 AND sandbox_id = ?2"
                    ),
                    crate::args![tenant.as_str(), sandbox_id],
                    from_row,
                )
                .optional()
                .map_err(sql("read an E2B sandbox"))
            })?
            .transpose()
    }

    /// The tenant's sandbox made with idempotency key `key`, and what its request hashed
    /// to.
    pub fn e2b_sandbox_by_key(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<(E2bSandbox, E2bIdempotency)>, StoreError> {
        self.db.read(|c| by_key(c, tenant, key))
    }

    /// Records that the sandbox's box runs since `started_at_ms`, with its timeout armed to
    /// act at `end_at_ms`; `false` when the box has no sandbox row (it is gone).
    pub fn set_e2b_started(
        &self,
        box_id: &BoxId,
        started_at_ms: i64,
        end_at_ms: i64,
    ) -> Result<bool, StoreError> {
        let changed = self.db.write(|tx| {
            tx.execute(
                "UPDATE e2b_sandboxes SET started_at_ms = ?2, end_at_ms = ?3, timeout_armed = 1 \
                 WHERE box_id = ?1",
                crate::args![box_id.as_str(), started_at_ms, end_at_ms],
            )
            .map_err(sql("record an E2B sandbox's start"))
        })?;
        Ok(changed == 1)
    }

    /// Sandbox `sandbox_id` whatever its tenant: for the in-sandbox API, where the
    /// sandbox's access token (not an API key) proves the caller.
    pub fn e2b_sandbox_on_host(&self, sandbox_id: &str) -> Result<Option<E2bSandbox>, StoreError> {
        self.db
            .read(|c| {
                c.query_row(
                    &format!("SELECT {COLUMNS} FROM e2b_sandboxes WHERE sandbox_id = ?1"),
                    crate::args![sandbox_id],
                    from_row,
                )
                .optional()
                .map_err(sql("read an E2B sandbox"))
            })?
            .transpose()
    }

    /// The tenant's sandboxes, in no particular order.
    pub fn list_e2b_sandboxes(&self, tenant: &TenantId) -> Result<Vec<E2bSandbox>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                &format!("SELECT {COLUMNS} FROM e2b_sandboxes WHERE tenant_id = ?1"),
                crate::args![tenant.as_str()],
                from_row,
            )
            .map_err(sql("list E2B sandboxes"))
        })?;
        rows.into_iter().collect()
    }

    /// Sets the sandbox's timeout to act at `end_at_ms` (or, `armed` false, to show it and
    /// not act); `false` when the box has no sandbox row (it is gone).
    pub fn set_e2b_timeout(
        &self,
        box_id: &BoxId,
        end_at_ms: i64,
        armed: bool,
    ) -> Result<bool, StoreError> {
        let changed = self.db.write(|tx| {
            tx.execute(
                "UPDATE e2b_sandboxes SET end_at_ms = ?2, timeout_armed = ?3 WHERE box_id = ?1",
                crate::args![box_id.as_str(), end_at_ms, armed],
            )
            .map_err(sql("set an E2B sandbox's timeout"))
        })?;
        Ok(changed == 1)
    }

    /// Arms the sandbox's timeout to act no sooner than `at_least_ms` (a later one stays:
    /// E2B's `connect` only ever extends); `false` when the box has no sandbox row.
    pub fn extend_e2b_timeout(&self, box_id: &BoxId, at_least_ms: i64) -> Result<bool, StoreError> {
        let changed = self.db.write(|tx| {
            tx.execute(
                "UPDATE e2b_sandboxes \
                 SET end_at_ms = CASE WHEN end_at_ms > ?2 THEN end_at_ms ELSE ?2 END, \
                 timeout_armed = 1 \
                 WHERE box_id = ?1",
                crate::args![box_id.as_str(), at_least_ms],
            )
            .map_err(sql("extend an E2B sandbox's timeout"))
        })?;
        Ok(changed == 1)
    }

    /// Disarms the sandbox's timeout (it was paused); `false` when there is no row.
    pub fn disarm_e2b_timeout(&self, box_id: &BoxId) -> Result<bool, StoreError> {
        let changed = self.db.write(|tx| {
            tx.execute(
                "UPDATE e2b_sandboxes SET timeout_armed = 0 WHERE box_id = ?1",
                crate::args![box_id.as_str()],
            )
            .map_err(sql("disarm an E2B sandbox's timeout"))
        })?;
        Ok(changed == 1)
    }

    /// Takes up to `limit` sandboxes whose armed timeout is at or before `now_ms`, soonest
    /// first, and disarms each in the same transaction: the caller acts on each once.
    pub fn claim_due_e2b(&self, now_ms: i64, limit: u32) -> Result<Vec<E2bSandbox>, StoreError> {
        self.db.write(|tx| {
            let due = tx
                .query_map(
                    &format!(
                        "SELECT {COLUMNS} FROM e2b_sandboxes \
                         WHERE timeout_armed = 1 AND end_at_ms <= ?1 ORDER BY end_at_ms LIMIT ?2"
                    ),
                    crate::args![now_ms, limit],
                    from_row,
                )
                .map_err(sql("find due E2B sandboxes"))?
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?;
            for sandbox in &due {
                tx.execute(
                    "UPDATE e2b_sandboxes SET timeout_armed = 0 WHERE box_id = ?1",
                    crate::args![sandbox.box_id.as_str()],
                )
                .map_err(sql("claim a due E2B sandbox"))?;
            }
            Ok(due)
        })
    }

    /// When the soonest armed timeout acts, Unix milliseconds.
    pub fn next_e2b_deadline_ms(&self) -> Result<Option<i64>, StoreError> {
        self.db.read(|c| {
            c.query_row(
                "SELECT MIN(end_at_ms) FROM e2b_sandboxes WHERE timeout_armed = 1",
                crate::args![],
                |row| row.get(0),
            )
            .map_err(sql("read the next E2B deadline"))
        })
    }
}

/// The tenant's sandbox made with idempotency key `key`, and the hash stored with it.
fn by_key(
    conn: &Conn<'_>,
    tenant: &TenantId,
    key: &str,
) -> Result<Option<(E2bSandbox, E2bIdempotency)>, StoreError> {
    let found = conn
        .query_row(
            &format!(
                "SELECT {COLUMNS}, request_hash FROM e2b_sandboxes \
                 WHERE tenant_id = ?1 AND idempotency_key = ?2"
            ),
            crate::args![tenant.as_str(), key],
            |row| Ok((from_row(row)?, row.get::<Option<String>>(12)?)),
        )
        .optional()
        .map_err(sql("find an E2B sandbox by idempotency key"))?;
    let Some((sandbox, hash)) = found else {
        return Ok(None);
    };
    let idem = E2bIdempotency {
        key: key.to_owned(),
        request_hash: hash.unwrap_or_default(),
    };
    Ok(Some((sandbox?, idem)))
}
