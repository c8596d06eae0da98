//! The host's secret store: the real credentials the egress gateway sets on a box's
//! requests. Values are sealed here (ChaCha20-Poly1305, key in a file outside the
//! database, see [`key`]) and the store crate keeps only ciphertexts. Boxes never see a
//! value: they get placeholders.
//!
//! - [`key`]: the key file (made at first start, checked at every start).
//! - [`seal`]: sealing and opening one row.
//! - [`value`]: [`SecretValue`] and the rules for names and values.

pub mod error;
pub mod key;
pub mod seal;
pub mod value;

use std::path::Path;
use std::sync::Arc;

use berth_protocol::TenantId;
use berth_store::{PutSecret, SecretMeta, Store};
use ring::rand::SystemRandom;

pub use error::SecretError;
pub use key::SecretKey;
pub use value::{SecretValue, MAX_VALUE_BYTES};

/// Sealed secrets per tenant, behind the daemon's key.
pub struct SecretStore {
    store: Arc<Store>,
    key: SecretKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStore")
            .field("key_id", &self.key.id)
            .finish_non_exhaustive()
    }
}

impl SecretStore {
    /// Loads the key at `key_path`, or makes one when there is none AND no secret is
    /// stored. Refuses (never makes a new key) when stored rows were sealed with a key
    /// other than this one: that would leave every secret unreadable. `db_path` is only
    /// named in errors.
    pub fn open(
        store: Arc<Store>,
        key_path: &Path,
        db_path: &Path,
    ) -> Result<SecretStore, SecretError> {
        let stored = store.secret_key_ids()?;
        let key = match key::load(key_path)? {
            Some(key) => key,
            None => match stored.first() {
                Some(stored) => {
                    return Err(SecretError::KeyMissing {
                        db: db_path.to_owned(),
                        key: key_path.to_owned(),
                        stored: stored.clone(),
                    })
                }
                None => key::create(key_path)?,
            },
        };
        if let Some(other) = stored.iter().find(|id| **id != key.id) {
            return Err(SecretError::KeyMismatch {
                db: db_path.to_owned(),
                key: key_path.to_owned(),
                stored: other.clone(),
                current: key.id.clone(),
            });
        }
        tracing::info!(key_id = %key.id, key_file = %key_path.display(), "secret store opened");
        Ok(SecretStore {
            store,
            key,
            rng: SystemRandom::new(),
        })
    }

    /// The id of the key in use (hex of the first 8 bytes of its SHA-256).
    pub fn key_id(&self) -> &str {
        &self.key.id
    }

    /// Sets `name` for `tenant` (creating or replacing it). The value is checked, sealed
    /// and stored; it appears in no error and no log.
    pub fn set(
        &self,
        tenant: &TenantId,
        name: &str,
        value: &SecretValue,
    ) -> Result<PutSecret, SecretError> {
        check_name(name)?;
        if let Some(rule) = value::value_rule(value.expose()) {
            return Err(SecretError::InvalidValue { rule });
        }
        let sealed = seal::seal(&self.key, &self.rng, tenant, name, value)?;
        Ok(self.store.put_secret(
            tenant,
            name,
            &self.key.id,
            &sealed.nonce,
            &sealed.ciphertext,
        )?)
    }

    /// The tenant's secrets (names and times only), by name.
    pub fn list(&self, tenant: &TenantId) -> Result<Vec<SecretMeta>, SecretError> {
        Ok(self.store.list_secrets(tenant)?)
    }

    /// Deletes `name` of `tenant`; [`SecretError::NotFound`] when there is none.
    pub fn delete(&self, tenant: &TenantId, name: &str) -> Result<(), SecretError> {
        check_name(name)?;
        if self.store.delete_secret(tenant, name)? {
            Ok(())
        } else {
            Err(SecretError::NotFound {
                name: name.to_owned(),
            })
        }
    }

    /// The plaintext of `name` of `tenant`, or `None` when there is no such secret. A row
    /// that does not open (altered, moved, sealed by another key) is an error, never `None`.
    pub fn reveal(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<SecretValue>, SecretError> {
        let Some(row) = self.store.get_secret(tenant, name)? else {
            return Ok(None);
        };
        self.open_for(tenant, name, &row.key_id, &row.nonce, &row.ciphertext)
            .map(Some)
    }

    /// Seals `value` for a row kept elsewhere (a webhook's signing secret), bound to
    /// `tenant` and `name` as a secret is: the key's id and the sealed value.
    pub fn seal_for(
        &self,
        tenant: &TenantId,
        name: &str,
        value: &SecretValue,
    ) -> Result<(String, seal::Sealed), SecretError> {
        let sealed = seal::seal(&self.key, &self.rng, tenant, name, value)?;
        Ok((self.key.id.clone(), sealed))
    }

    /// Opens what [`SecretStore::seal_for`] (or [`SecretStore::set`]) sealed.
    pub fn open_for(
        &self,
        tenant: &TenantId,
        name: &str,
        key_id: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<SecretValue, SecretError> {
        if key_id != self.key.id {
            return Err(SecretError::ForeignKey {
                tenant: tenant.clone(),
                name: name.to_owned(),
                stored: key_id.to_owned(),
                current: self.key.id.clone(),
            });
        }
        seal::open(&self.key, tenant, name, nonce, ciphertext)
    }
}

fn check_name(name: &str) -> Result<(), SecretError> {
    match value::name_rule(name) {
        Some(rule) => Err(SecretError::InvalidName {
            name: name.to_owned(),
            rule,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
