//! Secret rows, scoped by tenant. The store only ever holds what the daemon sealed: a key
//! id, a nonce and a ciphertext. It never sees a plaintext, so nothing here can log one.

use berth_protocol::TenantId;
use time::OffsetDateTime;

use crate::db::{DbError, Optional, Row};
use crate::error::{sql, StoreError};
use crate::{format_time, now, parse_time, Store};

/// A sealed secret as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub name: String,
    /// The key that sealed it (see the daemon's secrets module).
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// What a listing shows of a secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMeta {
    pub name: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// The outcome of [`Store::put_secret`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutSecret {
    pub meta: SecretMeta,
    /// `true` when the name was new, `false` when an existing value was replaced.
    pub created: bool,
}

impl Store {
    /// Stores a sealed value under `(tenant, name)`, replacing any previous one (its
    /// `created_at` is kept).
    pub fn put_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        key_id: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<PutSecret, StoreError> {
        let at = now();
        let at_text = format_time(at)?;
        let (created_at, created) = self.db.write(|tx| -> Result<_, StoreError> {
            let existing: Option<String> = tx
                .query_row(
                    "SELECT created_at FROM secrets WHERE tenant_id = ?1 AND name = ?2",
                    crate::args![tenant.as_str(), name],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("look up a secret"))?;
            match existing {
                Some(text) => {
                    tx.execute(
                        "UPDATE secrets SET key_id = ?3, nonce = ?4, ciphertext = ?5, updated_at = ?6 \
                         WHERE tenant_id = ?1 AND name = ?2",
                        crate::args![tenant.as_str(), name, key_id, nonce, ciphertext, at_text],
                    )
                    .map_err(sql("replace a secret"))?;
                    Ok((parse_time("secrets.created_at", &text)?, false))
                }
                None => {
                    tx.execute(
                        "INSERT INTO secrets (tenant_id, name, key_id, nonce, ciphertext, created_at, updated_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                        crate::args![tenant.as_str(), name, key_id, nonce, ciphertext, at_text],
                    )
                    .map_err(sql("store a secret"))?;
                    Ok((at, true))
                }
            }
        })?;
        Ok(PutSecret {
            meta: SecretMeta {
                name: name.to_owned(),
                created_at,
                updated_at: at,
            },
            created,
        })
    }

    /// The sealed value of `(tenant, name)`.
    pub fn get_secret(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<SealedSecret>, StoreError> {
        let row = self.db.read(|c| {
            c.query_row(
                "SELECT name, key_id, nonce, ciphertext, created_at, updated_at FROM secrets \
                 WHERE tenant_id = ?1 AND name = ?2",
                crate::args![tenant.as_str(), name],
                RawSecret::from_row,
            )
            .optional()
            .map_err(sql("read a secret"))
        })?;
        row.map(RawSecret::into_sealed).transpose()
    }

    /// The tenant's secrets, by name.
    pub fn list_secrets(&self, tenant: &TenantId) -> Result<Vec<SecretMeta>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                "SELECT name, created_at, updated_at FROM secrets WHERE tenant_id = ?1 ORDER BY name",
                crate::args![tenant.as_str()],
                |row| {
                    Ok((
                        row.get::<String>(0)?,
                        row.get::<String>(1)?,
                        row.get::<String>(2)?,
                    ))
                },
            )
            .map_err(sql("list secrets"))
        })?;
        let mut out = Vec::new();
        for (name, created, updated) in rows {
            out.push(SecretMeta {
                name,
                created_at: parse_time("secrets.created_at", &created)?,
                updated_at: parse_time("secrets.updated_at", &updated)?,
            });
        }
        Ok(out)
    }

    /// Deletes `(tenant, name)`; `false` when there was no such secret.
    pub fn delete_secret(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        let deleted = self.db.write(|tx| {
            tx.execute(
                "DELETE FROM secrets WHERE tenant_id = ?1 AND name = ?2",
                crate::args![tenant.as_str(), name],
            )
            .map_err(sql("delete a secret"))
        })?;
        Ok(deleted > 0)
    }

    /// Every distinct key id any stored secret was sealed with (all tenants), sorted: the
    /// daemon checks them against its key at start.
    pub fn secret_key_ids(&self) -> Result<Vec<String>, StoreError> {
        self.db.read(|c| {
            c.query_map(
                "SELECT key_id FROM secrets UNION SELECT key_id FROM webhooks ORDER BY key_id",
                crate::args![],
                |row| row.get::<String>(0),
            )
            .map_err(sql("list secret key ids"))
        })
    }
}

/// A row before its timestamps are parsed (a row closure fails only with a [`DbError`]).
struct RawSecret {
    name: String,
    key_id: String,
    nonce: Vec<u8>,
    ciphertext: Vec<u8>,
    created_at: String,
    updated_at: String,
}

impl RawSecret {
    fn from_row(row: &Row) -> Result<RawSecret, DbError> {
        Ok(RawSecret {
            name: row.get(0)?,
            key_id: row.get(1)?,
            nonce: row.get(2)?,
            ciphertext: row.get(3)?,
            created_at: row.get(4)?,
            updated_at: row.get(5)?,
        })
    }

    fn into_sealed(self) -> Result<SealedSecret, StoreError> {
        Ok(SealedSecret {
            created_at: parse_time("secrets.created_at", &self.created_at)?,
            updated_at: parse_time("secrets.updated_at", &self.updated_at)?,
            name: self.name,
            key_id: self.key_id,
            nonce: self.nonce,
            ciphertext: self.ciphertext,
        })
    }
}

#[cfg(test)]
mod tests {
    conformance! {
        fn rows_round_trip_and_replacing_keeps_created_at(db) {
            let store = db.open();
            let acme = store.create_tenant("acme").unwrap();
            let first = store
                .put_secret(&acme.id, "anthropic", "k1", b"nonce-1", b"sealed-1")
                .unwrap();
            assert!(first.created);
            assert_eq!(first.meta.name, "anthropic");
            let got = store.get_secret(&acme.id, "anthropic").unwrap().unwrap();
            assert_eq!(
                (got.key_id.as_str(), &got.nonce[..], &got.ciphertext[..]),
                ("k1", &b"nonce-1"[..], &b"sealed-1"[..])
            );
            let second = store
                .put_secret(&acme.id, "anthropic", "k1", b"nonce-2", b"sealed-2")
                .unwrap();
            assert!(!second.created);
            assert_eq!(second.meta.created_at, first.meta.created_at);
            let got = store.get_secret(&acme.id, "anthropic").unwrap().unwrap();
            assert_eq!(&got.ciphertext[..], b"sealed-2");
            assert_eq!(got.created_at, first.meta.created_at);
            // Reopening keeps the row.
            drop(store);
            let store = db.open();
            let got = store.get_secret(&acme.id, "anthropic").unwrap().unwrap();
            assert_eq!(&got.nonce[..], b"nonce-2");
            assert_eq!(store.secret_key_ids().unwrap(), vec!["k1".to_owned()]);
        }

        fn secrets_are_per_tenant_and_listed_by_name(db) {
            let store = db.open();
            let a = store.create_tenant("a").unwrap();
            let b = store.create_tenant("b").unwrap();
            store.put_secret(&a.id, "zeta", "k1", b"n", b"c").unwrap();
            store.put_secret(&a.id, "alpha", "k1", b"n", b"c").unwrap();
            store.put_secret(&b.id, "other", "k2", b"n", b"c").unwrap();
            let names = |t| {
                store
                    .list_secrets(t)
                    .unwrap()
                    .into_iter()
                    .map(|m| m.name)
                    .collect::<Vec<_>>()
            };
            assert_eq!(names(&a.id), vec!["alpha", "zeta"]);
            assert_eq!(names(&b.id), vec!["other"]);
            assert_eq!(store.get_secret(&b.id, "alpha").unwrap(), None);
            // B deleting A's name touches nothing.
            assert!(!store.delete_secret(&b.id, "alpha").unwrap());
            assert!(store.get_secret(&a.id, "alpha").unwrap().is_some());
            assert_eq!(store.secret_key_ids().unwrap(), vec!["k1", "k2"]);
        }

        fn delete_removes_only_that_row(db) {
            let store = db.open();
            let a = store.create_tenant("a").unwrap();
            store.put_secret(&a.id, "one", "k1", b"n", b"c").unwrap();
            store.put_secret(&a.id, "two", "k1", b"n", b"c").unwrap();
            assert!(store.delete_secret(&a.id, "one").unwrap());
            assert!(!store.delete_secret(&a.id, "one").unwrap());
            assert_eq!(store.get_secret(&a.id, "one").unwrap(), None);
            assert_eq!(store.list_secrets(&a.id).unwrap().len(), 1);
        }

        fn a_secret_needs_an_existing_tenant(db) {
            let store = db.open();
            let ghost = berth_protocol::TenantId::from_random([7; 20]);
            assert!(store.put_secret(&ghost, "x", "k1", b"n", b"c").is_err());
        }
    }
}
