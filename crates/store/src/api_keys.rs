//! API keys: several per tenant, each listable by a public handle, revocable at once, and
//! rotatable (add a new one, then revoke the old). Keys are `berth_` + 64 hex characters
//! (32 OS-random bytes); only their SHA-256 is stored, with the first characters of the
//! plaintext (so a person can tell keys apart) and when each was last used.

use berth_protocol::TenantId;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::db::{Conn, Optional};
use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, parse_time, random, Principal, Store};

const KEY_PREFIX: &str = "berth_";
/// How much of a key's plaintext is kept to tell keys apart: `berth_` and 8 hex
/// characters (32 of its 256 bits).
const SHOWN_CHARS: usize = KEY_PREFIX.len() + 8;
/// `last_used_at` is written at most this often per key: authentication stays a read.
const LAST_USED_EVERY: time::Duration = time::Duration::minutes(1);

/// One key as listings show it; never its plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyMeta {
    /// `key_` + 16 hex characters of its hash.
    pub id: String,
    pub tenant_id: TenantId,
    /// The first characters of the plaintext; `None` for keys made before berth kept them.
    pub prefix: Option<String>,
    pub is_admin: bool,
    pub created_at: OffsetDateTime,
    /// To the minute; `None`: never used.
    pub last_used_at: Option<OffsetDateTime>,
}

/// A new key: its plaintext, shown once and stored nowhere, and what listings show.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub key: String,
    pub meta: ApiKeyMeta,
}

impl Store {
    /// Creates a key for `tenant` and returns its plaintext, which is not stored anywhere.
    pub fn create_api_key(&self, tenant: &TenantId, admin: bool) -> Result<String, StoreError> {
        Ok(self.add_api_key(tenant, admin)?.key)
    }

    /// Creates a key for `tenant`: its plaintext (shown once) and its listing.
    pub fn add_api_key(&self, tenant: &TenantId, admin: bool) -> Result<NewApiKey, StoreError> {
        self.db.write(|tx| insert(tx, tenant, admin))
    }

    /// The principal of `key`, or `None` when no such key exists (never made, or revoked).
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>, StoreError> {
        if !key.starts_with(KEY_PREFIX) {
            return Ok(None);
        }
        let hash = key_hash(key);
        // A read beside any writer; a write only once a minute per key.
        let row: Option<(String, bool, Option<String>, String)> = self.db.read(|c| {
            c.query_row(
                "SELECT tenant_id, is_admin, last_used_at, id FROM api_keys WHERE key_hash = ?1",
                crate::args![hash],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()
            .map_err(sql("look up an API key"))
        })?;
        let Some((tenant, is_admin, last_used, key_id)) = row else {
            return Ok(None);
        };
        let at = now();
        let stale = match last_used {
            Some(text) => at - parse_time("api_keys.last_used_at", &text)? >= LAST_USED_EVERY,
            None => true,
        };
        if stale {
            let at_text = format_time(at)?;
            self.db.write(|tx| {
                tx.execute(
                    "UPDATE api_keys SET last_used_at = ?1 WHERE key_hash = ?2",
                    crate::args![at_text, hash],
                )
                .map_err(sql("record an API key's use"))
            })?;
        }
        let tenant_id = tenant.parse().map_err(|source| StoreError::CorruptId {
            column: "api_keys.tenant_id",
            source,
        })?;
        Ok(Some(Principal {
            tenant_id,
            is_admin,
            web_session: None,
            api_key_id: Some(key_id),
        }))
    }

    /// The tenant's keys, oldest first.
    pub fn list_api_keys(&self, tenant: &TenantId) -> Result<Vec<ApiKeyMeta>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                "SELECT id, tenant_id, prefix, is_admin, created_at, last_used_at FROM api_keys \
                 WHERE tenant_id = ?1 ORDER BY rowid",
                crate::args![tenant.as_str()],
                |row| {
                    Ok((
                        row.get::<String>(0)?,
                        row.get::<String>(1)?,
                        row.get::<Option<String>>(2)?,
                        row.get::<bool>(3)?,
                        row.get::<String>(4)?,
                        row.get::<Option<String>>(5)?,
                    ))
                },
            )
            .map_err(sql("list API keys"))
        })?;
        let mut keys = Vec::new();
        for (id, tenant_id, prefix, is_admin, created, used) in rows {
            keys.push(ApiKeyMeta {
                id,
                tenant_id: tenant_id.parse().map_err(|source| StoreError::CorruptId {
                    column: "api_keys.tenant_id",
                    source,
                })?,
                prefix,
                is_admin,
                created_at: parse_time("api_keys.created_at", &created)?,
                last_used_at: used
                    .map(|u| parse_time("api_keys.last_used_at", &u))
                    .transpose()?,
            });
        }
        Ok(keys)
    }

    /// Revokes the tenant's key `key_id`: the next request with it is refused, and so is the
    /// next with a browser session it opened, or one of the tenant's whose origin is unknown
    /// (opened before berth recorded it: it may have been with this key). Answers how many
    /// sessions ended. The last admin key stays (the daemon would have none).
    pub fn revoke_api_key(&self, tenant: &TenantId, key_id: &str) -> Result<usize, StoreError> {
        self.db.write(|tx| {
            let is_admin: Option<bool> = tx
                .query_row(
                    "SELECT is_admin FROM api_keys WHERE tenant_id = ?1 AND id = ?2",
                    crate::args![tenant.as_str(), key_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("look up an API key"))?;
            let Some(is_admin) = is_admin else {
                return Err(StoreError::KeyNotFound {
                    tenant: tenant.clone(),
                    key_id: key_id.to_owned(),
                });
            };
            if is_admin {
                let admins: i64 = tx
                    .query_row(
                        "SELECT COUNT(*) FROM api_keys WHERE is_admin = 1",
                        crate::args![],
                        |row| row.get(0),
                    )
                    .map_err(sql("count admin keys"))?;
                if admins <= 1 {
                    return Err(StoreError::LastAdminKey {
                        key_id: key_id.to_owned(),
                    });
                }
            }
            tx.execute(
                "DELETE FROM api_keys WHERE tenant_id = ?1 AND id = ?2",
                crate::args![tenant.as_str(), key_id],
            )
            .map_err(sql("revoke an API key"))?;
            crate::web_sessions::end_opened_with_key(tx, tenant, key_id)
        })
    }
}

/// Makes a key for `tenant` in the write transaction `tx` (a new random key each time it
/// runs).
pub(crate) fn insert(
    tx: &Conn<'_>,
    tenant: &TenantId,
    admin: bool,
) -> Result<NewApiKey, StoreError> {
    let key = format!("{KEY_PREFIX}{}", hex(&random::<32>()?));
    let hash = key_hash(&key);
    let meta = ApiKeyMeta {
        id: format!("key_{}", &hash[..16]),
        tenant_id: tenant.clone(),
        prefix: Some(key[..SHOWN_CHARS].to_owned()),
        is_admin: admin,
        created_at: now(),
        last_used_at: None,
    };
    tx.execute(
        "INSERT INTO api_keys (key_hash, tenant_id, is_admin, created_at, id, prefix) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        crate::args![
            hash,
            tenant.as_str(),
            admin,
            format_time(meta.created_at)?,
            meta.id,
            meta.prefix
        ],
    )
    .map_err(sql("create an API key"))?;
    Ok(NewApiKey { key, meta })
}

fn key_hash(key: &str) -> String {
    hex(&Sha256::digest(key.as_bytes()))
}
