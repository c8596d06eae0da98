//! One-time join tokens: what a new `berth node` presents, once, to have the cluster CA sign
//! its certificate. A token is `<id>.<secret>`: 16 hex characters that name its row, a dot,
//! and 64 hex characters (32 OS-random bytes) of which only the SHA-256 is stored, so a
//! copy of the database (a backup, a replica) joins nothing. A token admits `uses` nodes
//! before its expiry, measured on the database's clock ([`Conn::now_ms`]) like the leases.
//!
//! Redeeming is one write transaction (check, then spend a use), so two nodes racing with a
//! one-use token cannot both join: SQLite has one writer, and Postgres runs the transaction
//! at `SERIALIZABLE` and runs the loser again, which then finds the row spent.

use std::time::Duration;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::db::{Conn, Optional};
use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, parse_time, random, Store};

/// Bytes of randomness in a token's id and in its secret.
const ID_BYTES: usize = 8;
const SECRET_BYTES: usize = 32;

/// A join token as listings show it; never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinTokenInfo {
    /// The part of the token before the dot (16 hex characters).
    pub id: String,
    pub uses_left: u32,
    /// By the database's clock.
    pub expires_at: OffsetDateTime,
    /// Whether the database's clock has passed `expires_at` (it is kept until the next
    /// token is made, then swept).
    pub expired: bool,
    pub created_at: OffsetDateTime,
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

fn secret_hash(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// Whether `a` and `b` are equal, in a time that depends only on their length: the stored
/// hash is compared without saying, by when it stopped, how much of it a guess matched.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// `<id>.<secret>` split, or `None` when it is not that shape (any other text).
fn split(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.trim().split_once('.')?;
    let hex_of = |s: &str, bytes: usize| {
        s.len() == bytes * 2 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    (hex_of(id, ID_BYTES) && hex_of(secret, SECRET_BYTES)).then_some((id, secret))
}

fn refused(reason: &'static str) -> StoreError {
    StoreError::JoinTokenRefused { reason }
}

fn ms_to_time(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

impl Store {
    /// Makes a token that admits `uses` nodes within `ttl`; returns it as `<id>.<secret>`
    /// (shown once: only the secret's hash is stored). Expired tokens are swept here.
    pub fn create_join_token(&self, uses: u32, ttl: Duration) -> Result<String, StoreError> {
        let id = hex(&random::<ID_BYTES>()?);
        let secret = hex(&random::<SECRET_BYTES>()?);
        let hash = secret_hash(&secret);
        let created_at = format_time(now())?;
        self.db.write(|tx| {
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            tx.execute(
                "DELETE FROM join_tokens WHERE expires_ms <= ?1",
                crate::args![now_ms],
            )
            .map_err(sql("sweep expired join tokens"))?;
            tx.execute(
                "INSERT INTO join_tokens (id, secret_sha256, uses_left, expires_ms, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                crate::args![
                    id,
                    hash,
                    uses,
                    now_ms.saturating_add(ttl_ms(ttl)),
                    created_at
                ],
            )
            .map_err(sql("store a join token"))?;
            Ok::<_, StoreError>(())
        })?;
        Ok(format!("{id}.{secret}"))
    }

    /// Spends one use of `token`, or refuses it ([`StoreError::JoinTokenRefused`]) when it is
    /// malformed, unknown, wrong, expired or used up; a refusal spends nothing.
    pub fn redeem_join_token(&self, token: &str) -> Result<(), StoreError> {
        let (id, secret) = split(token).ok_or_else(|| refused("malformed token"))?;
        let presented = secret_hash(secret);
        self.db.write(|tx| redeem(tx, id, &presented))
    }

    /// Every token, the soonest to expire first.
    pub fn list_join_tokens(&self) -> Result<Vec<JoinTokenInfo>, StoreError> {
        let (now_ms, rows) = self.db.read(|conn| {
            let now_ms = conn.now_ms().map_err(sql("read the database's clock"))?;
            let rows = conn
                .query_map(
                    "SELECT id, uses_left, expires_ms, created_at FROM join_tokens \
                     ORDER BY expires_ms, id",
                    crate::args![],
                    |row| {
                        Ok((
                            row.get::<String>(0)?,
                            row.get::<u32>(1)?,
                            row.get::<i64>(2)?,
                            row.get::<String>(3)?,
                        ))
                    },
                )
                .map_err(sql("list join tokens"))?;
            Ok::<_, StoreError>((now_ms, rows))
        })?;
        rows.into_iter()
            .map(|(id, uses_left, expires_ms, created_at)| {
                Ok(JoinTokenInfo {
                    id,
                    uses_left,
                    expires_at: ms_to_time(expires_ms),
                    expired: expires_ms <= now_ms,
                    created_at: parse_time("join_tokens.created_at", &created_at)?,
                })
            })
            .collect()
    }

    /// Deletes the token `id` (the part before the dot); `false` when there is none.
    pub fn revoke_join_token(&self, id: &str) -> Result<bool, StoreError> {
        let deleted = self.db.write(|tx| {
            tx.execute("DELETE FROM join_tokens WHERE id = ?1", crate::args![id])
                .map_err(sql("revoke a join token"))
        })?;
        Ok(deleted > 0)
    }
}

fn redeem(tx: &Conn<'_>, id: &str, presented: &str) -> Result<(), StoreError> {
    let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
    let row: Option<(String, i64, i64)> = tx
        .query_row(
            "SELECT secret_sha256, uses_left, expires_ms FROM join_tokens WHERE id = ?1",
            crate::args![id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .optional()
        .map_err(sql("read a join token"))?;
    // A wrong secret reads the same as an unknown id.
    let Some((stored, uses_left, expires_ms)) =
        row.filter(|(stored, ..)| same_bytes(stored.as_bytes(), presented.as_bytes()))
    else {
        return Err(refused("unknown or used-up token"));
    };
    if expires_ms <= now_ms {
        return Err(refused("expired"));
    }
    if uses_left <= 0 {
        return Err(refused("used up"));
    }
    let spent = if uses_left == 1 {
        tx.execute(
            "DELETE FROM join_tokens WHERE id = ?1 AND secret_sha256 = ?2",
            crate::args![id, stored],
        )
    } else {
        tx.execute(
            "UPDATE join_tokens SET uses_left = uses_left - 1 \
             WHERE id = ?1 AND secret_sha256 = ?2",
            crate::args![id, stored],
        )
    };
    spent.map_err(sql("spend a join token's use"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{same_bytes, split};

    #[test]
    fn only_the_token_shape_is_split() {
        let id = "0123456789abcdef";
        let secret = "ab".repeat(32);
        assert_eq!(
            split(&format!("{id}.{secret}\n")),
            Some((id, secret.as_str()))
        );
        for bad in [
            String::new(),
            ".".into(),
            format!("{id}{secret}"),
            format!("{id}.{secret}0"),
            format!("{}.{secret}", id.to_uppercase()),
            format!("{id}.{}", "zz".repeat(32)),
            format!("{id}.{secret}.{secret}"),
        ] {
            assert_eq!(split(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bytes_are_compared_whole() {
        assert!(same_bytes(b"abc", b"abc"));
        assert!(!same_bytes(b"abc", b"abd"));
        assert!(!same_bytes(b"abc", b"ab"));
    }
}
