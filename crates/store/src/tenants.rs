//! Tenants, and the quotas the admin sets on them (their API keys: `api_keys.rs`).

use berth_protocol::TenantId;

use crate::db::Optional;
use crate::error::{sql, StoreError};
use crate::quota::{self, Quota, QuotaChange, TemplateDisk, Usage};
use crate::warm_pool::WARM_POOL_TENANT;
use crate::{format_time, now, parse_time, random, Store};

/// The tenant the admin key belongs to.
pub const DEFAULT_TENANT: &str = "default";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
}

/// Who an API key (or a web session) speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: TenantId,
    pub is_admin: bool,
    /// `Some(ws_…)` when a browser's session cookie authenticated the call (never admin).
    pub web_session: Option<String>,
    /// `Some(key_…)` when an API key authenticated the call: the key a browser signed in
    /// with it is recorded under, and ends with.
    pub api_key_id: Option<String>,
}

impl Store {
    pub fn create_tenant(&self, name: &str) -> Result<Tenant, StoreError> {
        let id = TenantId::from_random(random()?);
        let created_at = format_time(now())?;
        self.db.write(|tx| {
            tx.execute(
                "INSERT INTO tenants (id, name, created_at) VALUES (?1, ?2, ?3)",
                crate::args![id.as_str(), name, created_at],
            )
            .map_err(sql("create a tenant"))
        })?;
        Ok(Tenant {
            id,
            name: name.to_owned(),
        })
    }

    /// First start: when no admin key exists, creates the [`DEFAULT_TENANT`] (if needed) and
    /// an admin key for it, and returns the key's plaintext. Otherwise `None`.
    pub fn ensure_admin_key(&self) -> Result<Option<String>, StoreError> {
        let created_at = format_time(now())?;
        self.db.write(|tx| {
            let has_admin: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM api_keys WHERE is_admin = 1)",
                    crate::args![],
                    |row| row.get(0),
                )
                .map_err(sql("look for an admin key"))?;
            if has_admin {
                return Ok(None);
            }
            let existing: Option<String> = tx
                .query_row(
                    "SELECT id FROM tenants WHERE name = ?1",
                    crate::args![DEFAULT_TENANT],
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
                        crate::args![id, DEFAULT_TENANT, created_at],
                    )
                    .map_err(sql("create the default tenant"))?;
                    id
                }
            };
            let key = crate::api_keys::insert(tx, &parse_id(&tenant)?, true)?;
            Ok(Some(key.key))
        })
    }

    /// The tenant named `name`.
    pub fn tenant_by_name(&self, name: &str) -> Result<Option<Tenant>, StoreError> {
        self.find_tenant(name)
    }

    /// The tenant whose id (`tn_…`) or name is `reference`; never the warm pool's, so no key,
    /// quota or session can be made for it.
    pub fn find_tenant(&self, reference: &str) -> Result<Option<Tenant>, StoreError> {
        let row: Option<(String, String)> = self.db.read(|c| {
            c.query_row(
                "SELECT id, name FROM tenants WHERE (id = ?1 OR name = ?1) AND id != ?2 \
                 ORDER BY id = ?1 DESC LIMIT 1",
                crate::args![reference, WARM_POOL_TENANT],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(sql("look up a tenant"))
        })?;
        row.map(|(id, name)| {
            Ok(Tenant {
                id: parse_id(&id)?,
                name,
            })
        })
        .transpose()
    }

    /// Every tenant with its quota and what it uses, oldest first (not the warm pool's).
    pub fn list_tenants(
        &self,
        template_disk: TemplateDisk<'_>,
    ) -> Result<Vec<TenantInfo>, StoreError> {
        // One snapshot: each tenant's quota and usage are of the same moment.
        self.db.snapshot(|c| {
            let rows: Vec<(String, String, String)> = c
                .query_map(
                    "SELECT id, name, created_at FROM tenants WHERE id != ?1 \
                     ORDER BY created_at, name",
                    crate::args![WARM_POOL_TENANT],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .map_err(sql("list tenants"))?;
            rows.into_iter()
                .map(|(id, name, created_at)| {
                    let id = parse_id(&id)?;
                    Ok(TenantInfo {
                        quota: quota::read(c, &id)?,
                        usage: quota::usage(c, &id, template_disk)?,
                        created_at: parse_time("tenants.created_at", &created_at)?,
                        tenant: Tenant { id, name },
                    })
                })
                .collect()
        })
    }

    /// Changes the tenant's limits; returns its quota now. A limit lowered below what the
    /// tenant uses refuses only what would take more (nothing is stopped or deleted).
    pub fn set_quota(&self, tenant: &TenantId, change: &QuotaChange) -> Result<Quota, StoreError> {
        self.db.write(|tx| {
            quota::write(tx, tenant, change)?.ok_or_else(|| StoreError::TenantNotFound {
                reference: tenant.to_string(),
            })
        })
    }

    /// The tenant's quota and what it uses now.
    pub fn quota_usage(
        &self,
        tenant: &TenantId,
        template_disk: TemplateDisk<'_>,
    ) -> Result<(Quota, Usage), StoreError> {
        self.db.snapshot(|c| {
            Ok((
                quota::read(c, tenant)?,
                quota::usage(c, tenant, template_disk)?,
            ))
        })
    }
}

/// A tenant as the admin's listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantInfo {
    pub tenant: Tenant,
    pub created_at: time::OffsetDateTime,
    pub quota: Quota,
    pub usage: Usage,
}

fn parse_id(id: &str) -> Result<TenantId, StoreError> {
    id.parse().map_err(|source| StoreError::CorruptId {
        column: "tenants.id",
        source,
    })
}
