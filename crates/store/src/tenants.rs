//! Tenants and their API keys. Keys are `berth_` + 64 hex characters (32 OS-random bytes);
//! only their SHA-256 is stored.

use berth_protocol::TenantId;
use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, random, Store};

/// The tenant the admin key belongs to.
pub const DEFAULT_TENANT: &str = "default";

const KEY_PREFIX: &str = "berth_";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
}

/// Who an API key speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: TenantId,
    pub is_admin: bool,
}

impl Store {
    pub fn create_tenant(&self, name: &str) -> Result<Tenant, StoreError> {
        let id = TenantId::from_random(random()?);
        let created_at = format_time(now())?;
        self.conn()
            .execute(
                "INSERT INTO tenants (id, name, created_at) VALUES (?1, ?2, ?3)",
                params![id.as_str(), name, created_at],
            )
            .map_err(sql("create a tenant"))?;
        Ok(Tenant {
            id,
            name: name.to_owned(),
        })
    }

    /// Creates a key for `tenant` and returns its plaintext, which is not stored anywhere.
    pub fn create_api_key(&self, tenant: &TenantId, admin: bool) -> Result<String, StoreError> {
        let key = format!("{KEY_PREFIX}{}", hex(&random::<32>()?));
        let created_at = format_time(now())?;
        self.conn()
            .execute(
                "INSERT INTO api_keys (key_hash, tenant_id, is_admin, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![key_hash(&key), tenant.as_str(), admin, created_at],
            )
            .map_err(sql("create an API key"))?;
        Ok(key)
    }

    /// The principal of `key`, or `None` when no such key exists.
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>, StoreError> {
        if !key.starts_with(KEY_PREFIX) {
            return Ok(None);
        }
        let row: Option<(String, bool)> = self
            .conn()
            .query_row(
                "SELECT tenant_id, is_admin FROM api_keys WHERE key_hash = ?1",
                params![key_hash(key)],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(sql("look up an API key"))?;
        row.map(|(tenant, is_admin)| {
            let tenant_id = tenant.parse().map_err(|source| StoreError::CorruptId {
                column: "api_keys.tenant_id",
                source,
            })?;
            Ok(Principal {
                tenant_id,
                is_admin,
            })
        })
        .transpose()
    }

    /// First start: when no admin key exists, creates the [`DEFAULT_TENANT`] (if needed) and
    /// an admin key for it, and returns the key's plaintext. Otherwise `None`.
    pub fn ensure_admin_key(&self) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(sql("begin a transaction"))?;
        let has_admin: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM api_keys WHERE is_admin = 1)",
                [],
                |row| row.get(0),
            )
            .map_err(sql("look for an admin key"))?;
        if has_admin {
            return Ok(None);
        }
        let created_at = format_time(now())?;
        let existing: Option<String> = tx
            .query_row(
                "SELECT id FROM tenants WHERE name = ?1",
                params![DEFAULT_TENANT],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql("look up the default tenant"))?;
        let tenant = match existing {
            Some(id) => id,
            None => {
                let id = TenantId::from_random(random()?).to_string();
                tx.execute(
                    "INSERT INTO tenants (id, name, created_at) VALUES (?1, ?2, ?3)",
                    params![id, DEFAULT_TENANT, created_at],
                )
                .map_err(sql("create the default tenant"))?;
                id
            }
        };
        let key = format!("{KEY_PREFIX}{}", hex(&random::<32>()?));
        tx.execute(
            "INSERT INTO api_keys (key_hash, tenant_id, is_admin, created_at) VALUES (?1, ?2, 1, ?3)",
            params![key_hash(&key), tenant, created_at],
        )
        .map_err(sql("create the admin key"))?;
        tx.commit().map_err(sql("commit the admin key"))?;
        Ok(Some(key))
    }

    /// The tenant named `name`.
    pub fn tenant_by_name(&self, name: &str) -> Result<Option<Tenant>, StoreError> {
        let id: Option<String> = self
            .conn()
            .query_row(
                "SELECT id FROM tenants WHERE name = ?1",
                params![name],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql("look up a tenant"))?;
        id.map(|id| {
            let id = id.parse().map_err(|source| StoreError::CorruptId {
                column: "tenants.id",
                source,
            })?;
            Ok(Tenant {
                id,
                name: name.to_owned(),
            })
        })
        .transpose()
    }
}

fn key_hash(key: &str) -> String {
    hex(&Sha256::digest(key.as_bytes()))
}
