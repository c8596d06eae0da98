//! Web sessions (a browser signed in to the web app as a tenant) and the one-time pairing
//! codes that open them.
//!
//! A pairing code (`bwp_` + 64 hex characters) and a session token (`bws_` + 64 hex), each
//! 32 OS-random bytes, are shown once; only their SHA-256 is stored, so a copy of the
//! database opens nothing. A code is taken by one `UPDATE … WHERE used = 0` in a serialisable
//! write transaction: two browsers racing with the same code get exactly one session. A session
//! unused for [`SESSION_IDLE_LIFE`] is over; its `last_used_at` is written at most once a
//! minute (signing in stays a read). A tenant keeps at most [`MAX_WEB_SESSIONS_PER_TENANT`]
//! sessions: the next sign-in ends the least recently used one.
//!
//! Each session records what opened it ([`SessionOrigin`]): revoking an API key ends, in
//! the same transaction, the sessions that key opened and the tenant's sessions of unknown
//! origin (opened before berth recorded it, so maybe with that key). A key revoked while
//! a browser signs in with it opens nothing: the key is looked up again in the
//! transaction that would insert the session.
//!
//! The cookie was renamed `__Host-berth_session` in migration 15; a session made before it
//! (`legacy_cookie = 1`) is also found by its old name ([`Store::legacy_web_session`])
//! until its browser first shows the new one.

use berth_protocol::TenantId;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::db::{Conn, DbError, Optional, Row};
use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, parse_time, random, Store};

const CODE_PREFIX: &str = "bwp_";
const TOKEN_PREFIX: &str = "bws_";
/// A session not used for this long is over.
pub const SESSION_IDLE_LIFE: time::Duration = time::Duration::days(30);
/// `last_used_at` is written at most this often per session.
const LAST_USED_EVERY: time::Duration = time::Duration::minutes(1);
/// Sessions a tenant keeps; one more sign-in ends the least recently used.
pub const MAX_WEB_SESSIONS_PER_TENANT: usize = 100;
/// Unused pairing codes a tenant keeps; one more ends the oldest (so making codes in a
/// loop cannot grow the table without bound).
const MAX_PAIRINGS_PER_TENANT: usize = 100;

/// One web session as listings show it; never its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSession {
    /// `ws_` + 16 hex characters.
    pub id: String,
    pub tenant_id: TenantId,
    pub tenant_name: String,
    pub device: String,
    pub created_at: OffsetDateTime,
    /// To the minute.
    pub last_used_at: OffsetDateTime,
    pub opened_with: SessionOrigin,
}

/// What opened a session, and so what ends it besides its own revocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOrigin {
    /// A pairing code.
    Pairing,
    /// The API key with this id (`key_…`): revoking the key ends the session.
    ApiKey(String),
    /// Opened before berth recorded it: revoking any key of the tenant ends it.
    Unknown,
}

impl SessionOrigin {
    /// As `web_sessions.opened_with` stores it (and the API shows it).
    pub fn as_str(&self) -> &'static str {
        match self {
            SessionOrigin::Pairing => "pairing",
            SessionOrigin::ApiKey(_) => "api_key",
            SessionOrigin::Unknown => "unknown",
        }
    }

    /// The key that opened the session, if a key did.
    pub fn api_key_id(&self) -> Option<&str> {
        match self {
            SessionOrigin::ApiKey(id) => Some(id),
            SessionOrigin::Pairing | SessionOrigin::Unknown => None,
        }
    }
}

/// A new session: its token (for the cookie, stored nowhere) and what listings show.
#[derive(Debug, Clone)]
pub struct NewWebSession {
    pub token: String,
    pub session: WebSession,
}

/// A new pairing code (shown once) and when it stops working.
#[derive(Debug, Clone)]
pub struct NewPairing {
    pub code: String,
    pub expires_at: OffsetDateTime,
}

const COLUMNS: &str = "s.id, s.tenant_id, t.name, s.device, s.created_at, s.last_used_at, \
     s.opened_with, s.api_key_id FROM web_sessions s JOIN tenants t ON t.id = s.tenant_id";

impl Store {
    /// Makes a one-time pairing code for `tenant` that works for `ttl`.
    pub fn create_pairing(
        &self,
        tenant: &TenantId,
        ttl: time::Duration,
    ) -> Result<NewPairing, StoreError> {
        let at = now();
        let at_text = format_time(at)?;
        let code = format!("{CODE_PREFIX}{}", hex(&random::<32>()?));
        let expires_at = at + ttl;
        let expires_text = format_time(expires_at)?;
        self.db.write(|tx| {
            tx.execute(
                "DELETE FROM web_pairings WHERE used = 1 OR expires_at <= ?1",
                crate::args![at_text],
            )
            .map_err(sql("prune pairing codes"))?;
            tx.execute(
                "DELETE FROM web_pairings WHERE code_hash IN (SELECT code_hash FROM web_pairings \
                 WHERE tenant_id = ?1 ORDER BY created_at DESC, rowid DESC \
                 LIMIT 9223372036854775807 OFFSET ?2)",
                crate::args![tenant.as_str(), MAX_PAIRINGS_PER_TENANT - 1],
            )
            .map_err(sql("bound a tenant's pairing codes"))?;
            tx.execute(
                "INSERT INTO web_pairings (code_hash, tenant_id, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?4)",
                crate::args![digest(&code), tenant.as_str(), at_text, expires_text],
            )
            .map_err(sql("create a pairing code"))
        })?;
        Ok(NewPairing { code, expires_at })
    }

    /// Takes a live, unused pairing code and opens a session for its tenant. `None`: the
    /// code is unknown, used or expired (the caller cannot tell which, on purpose).
    pub fn pair_web_session(
        &self,
        code: &str,
        device: &str,
    ) -> Result<Option<NewWebSession>, StoreError> {
        if !code.starts_with(CODE_PREFIX) {
            return Ok(None);
        }
        let at = now();
        let at_text = format_time(at)?;
        let hash = digest(code);
        self.db.write(|tx| {
            let tenant: Option<String> = tx
                .query_row(
                    "UPDATE web_pairings SET used = 1 \
                     WHERE code_hash = ?1 AND used = 0 AND expires_at > ?2 RETURNING tenant_id",
                    crate::args![hash, at_text],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("take a pairing code"))?;
            let Some(tenant) = tenant else {
                return Ok(None);
            };
            let tenant = parse_tenant("web_pairings.tenant_id", tenant)?;
            insert(tx, &tenant, &SessionOrigin::Pairing, device, at).map(Some)
        })
    }

    /// Opens a session for `tenant` signed in with its API key `key_id`. `None`: the key is
    /// gone (revoked since it was checked), so no session outlives it.
    pub fn open_web_session(
        &self,
        tenant: &TenantId,
        key_id: &str,
        device: &str,
    ) -> Result<Option<NewWebSession>, StoreError> {
        let origin = SessionOrigin::ApiKey(key_id.to_owned());
        self.db.write(|tx| {
            let key_lives: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = ?1 AND tenant_id = ?2)",
                    crate::args![key_id, tenant.as_str()],
                    |row| row.get(0),
                )
                .map_err(sql("look up an API key"))?;
            if !key_lives {
                return Ok(None);
            }
            insert(tx, tenant, &origin, device, now()).map(Some)
        })
    }

    /// The live session whose token this is, sent under the cookie's name; records its use
    /// (at most once a minute). A session from before migration 15 seen here for the first
    /// time loses `legacy_cookie`: the browser has moved to the new name, so the old one is
    /// over for it.
    pub fn web_session_by_token(&self, token: &str) -> Result<Option<WebSession>, StoreError> {
        if let Some(session) = self.live_web_session(token, "AND s.legacy_cookie = 0")? {
            return Ok(Some(session));
        }
        let Some(session) = self.live_web_session(token, "AND s.legacy_cookie = 1")? else {
            return Ok(None);
        };
        self.db.write(|tx| {
            tx.execute(
                "UPDATE web_sessions SET legacy_cookie = 0 WHERE id = ?1",
                crate::args![session.id],
            )
            .map_err(sql("end a web session's old cookie name"))
        })?;
        Ok(Some(session))
    }

    /// The live session whose token this is, sent under the cookie's old name: only a
    /// session made before migration 15 whose browser has not yet shown the new name (every
    /// request until then, so parallel ones cannot race into a refusal).
    pub fn legacy_web_session(&self, token: &str) -> Result<Option<WebSession>, StoreError> {
        self.live_web_session(token, "AND s.legacy_cookie = 1")
    }

    /// The session of `token` that also meets `and` (SQL on `s`), unless idle too long;
    /// records its use.
    fn live_web_session(
        &self,
        token: &str,
        and: &'static str,
    ) -> Result<Option<WebSession>, StoreError> {
        if !token.starts_with(TOKEN_PREFIX) {
            return Ok(None);
        }
        let hash = digest(token);
        let found = self
            .db
            .read(|c| {
                c.query_row(
                    &format!("SELECT {COLUMNS} WHERE s.token_hash = ?1 {and}"),
                    crate::args![hash],
                    raw,
                )
                .optional()
                .map_err(sql("look up a web session"))
            })?
            .map(Raw::parse)
            .transpose()?;
        let Some(mut session) = found else {
            return Ok(None);
        };
        let at = now();
        if at - session.last_used_at >= SESSION_IDLE_LIFE {
            return Ok(None);
        }
        if at - session.last_used_at >= LAST_USED_EVERY {
            // Only if still there: a revocation in between must not be undone.
            let at_text = format_time(at)?;
            self.db.write(|tx| {
                tx.execute(
                    "UPDATE web_sessions SET last_used_at = ?1 WHERE token_hash = ?2",
                    crate::args![at_text, hash],
                )
                .map_err(sql("record a web session's use"))
            })?;
            session.last_used_at = at;
        }
        Ok(Some(session))
    }

    /// The tenant's live sessions, most recently used first.
    pub fn list_web_sessions(&self, tenant: &TenantId) -> Result<Vec<WebSession>, StoreError> {
        let cutoff = format_time(now() - SESSION_IDLE_LIFE)?;
        let rows = self.db.read(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} WHERE s.tenant_id = ?1 AND s.last_used_at > ?2 \
                     ORDER BY s.last_used_at DESC, s.rowid DESC"
                ),
                crate::args![tenant.as_str(), cutoff],
                raw,
            )
            .map_err(sql("list web sessions"))
        })?;
        rows.into_iter().map(Raw::parse).collect()
    }

    /// Ends the tenant's session `id` at once. `false`: the tenant has no such session.
    pub fn revoke_web_session(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError> {
        let changed = self.db.write(|tx| {
            tx.execute(
                "DELETE FROM web_sessions WHERE tenant_id = ?1 AND id = ?2",
                crate::args![tenant.as_str(), id],
            )
            .map_err(sql("revoke a web session"))
        })?;
        Ok(changed > 0)
    }
}

/// Ends, in the revoking transaction, the sessions the tenant's key `key_id` opened and the
/// tenant's sessions of unknown origin; how many ended.
pub(crate) fn end_opened_with_key(
    tx: &Conn<'_>,
    tenant: &TenantId,
    key_id: &str,
) -> Result<usize, StoreError> {
    tx.execute(
        "DELETE FROM web_sessions WHERE tenant_id = ?1 \
         AND (api_key_id = ?2 OR opened_with = 'unknown')",
        crate::args![tenant.as_str(), key_id],
    )
    .map_err(sql("end a revoked key's web sessions"))
}

/// Inserts a session, first deleting the tenant's idle-expired sessions and, at the cap,
/// its least recently used.
fn insert(
    tx: &Conn<'_>,
    tenant: &TenantId,
    origin: &SessionOrigin,
    device: &str,
    at: OffsetDateTime,
) -> Result<NewWebSession, StoreError> {
    tx.execute(
        "DELETE FROM web_sessions WHERE tenant_id = ?1 AND last_used_at <= ?2",
        crate::args![tenant.as_str(), format_time(at - SESSION_IDLE_LIFE)?],
    )
    .map_err(sql("prune idle web sessions"))?;
    tx.execute(
        "DELETE FROM web_sessions WHERE id IN (SELECT id FROM web_sessions WHERE tenant_id = ?1 \
         ORDER BY last_used_at DESC, rowid DESC LIMIT 9223372036854775807 OFFSET ?2)",
        crate::args![tenant.as_str(), MAX_WEB_SESSIONS_PER_TENANT - 1],
    )
    .map_err(sql("end the least recently used web session"))?;
    let token = format!("{TOKEN_PREFIX}{}", hex(&random::<32>()?));
    let id = format!("ws_{}", hex(&random::<8>()?));
    tx.execute(
        "INSERT INTO web_sessions (id, tenant_id, token_hash, device, created_at, last_used_at, \
         opened_with, api_key_id) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7)",
        crate::args![
            id,
            tenant.as_str(),
            digest(&token),
            device,
            format_time(at)?,
            origin.as_str(),
            origin.api_key_id()
        ],
    )
    .map_err(sql("open a web session"))?;
    let session = tx
        .query_row(
            &format!("SELECT {COLUMNS} WHERE s.id = ?1"),
            crate::args![id],
            raw,
        )
        .map_err(sql("read a web session"))?
        .parse()?;
    Ok(NewWebSession { token, session })
}

/// A row as read, parsed outside the row closure (so parse errors are ours).
struct Raw {
    id: String,
    tenant_id: String,
    tenant_name: String,
    device: String,
    created_at: String,
    last_used_at: String,
    opened_with: String,
    api_key_id: Option<String>,
}

fn raw(row: &Row) -> Result<Raw, DbError> {
    Ok(Raw {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        tenant_name: row.get(2)?,
        device: row.get(3)?,
        created_at: row.get(4)?,
        last_used_at: row.get(5)?,
        opened_with: row.get(6)?,
        api_key_id: row.get(7)?,
    })
}

impl Raw {
    fn parse(self) -> Result<WebSession, StoreError> {
        let opened_with = match (self.opened_with.as_str(), self.api_key_id) {
            ("pairing", _) => SessionOrigin::Pairing,
            ("api_key", Some(key_id)) => SessionOrigin::ApiKey(key_id),
            ("unknown", _) => SessionOrigin::Unknown,
            (other, _) => {
                return Err(StoreError::CorruptSessionOrigin {
                    id: self.id,
                    value: other.to_owned(),
                })
            }
        };
        Ok(WebSession {
            id: self.id,
            tenant_id: parse_tenant("web_sessions.tenant_id", self.tenant_id)?,
            tenant_name: self.tenant_name,
            device: self.device,
            created_at: parse_time("web_sessions.created_at", &self.created_at)?,
            last_used_at: parse_time("web_sessions.last_used_at", &self.last_used_at)?,
            opened_with,
        })
    }
}

fn parse_tenant(column: &'static str, id: String) -> Result<TenantId, StoreError> {
    id.parse()
        .map_err(|source| StoreError::CorruptId { column, source })
}

pub(crate) fn digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}
