//! Share links to a box's port, and the browser sessions opened with them.
//!
//! A link's token (`bpl_` + 64 hex characters, 32 OS-random bytes) is shown once, when the
//! link is made; a session's token (`bps_` + 64 hex) goes in a cookie. Only their SHA-256
//! is stored, so a copy of the database opens nothing. A session never outlives its link:
//! its expiry is capped by the link's, and revoking the link ends every session at once
//! (each lookup checks the link's row).

use berth_protocol::{BoxId, TenantId};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::db::{DbError, Optional, Row};
use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, parse_time, random, Store};

const LINK_PREFIX: &str = "bpl_";
const SESSION_PREFIX: &str = "bps_";

/// One share link as listings show it; never its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortLink {
    /// `pl_` + 16 hex characters.
    pub id: String,
    pub tenant_id: TenantId,
    pub box_id: BoxId,
    pub port: u16,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
}

impl PortLink {
    /// Whether the link still opens its port at `at`.
    pub fn is_live(&self, at: OffsetDateTime) -> bool {
        self.revoked_at.is_none() && at < self.expires_at
    }
}

/// A new link: its token (shown once, stored nowhere) and what listings show.
#[derive(Debug, Clone)]
pub struct NewPortLink {
    pub token: String,
    pub link: PortLink,
}

/// A session opened with a link: the cookie's token and when it ends.
#[derive(Debug, Clone)]
pub struct NewLinkSession {
    pub token: String,
    pub expires_at: OffsetDateTime,
}

const COLUMNS: &str = "id, tenant_id, box_id, port, created_at, expires_at, revoked_at";

impl Store {
    /// Makes a link to `port` of `box_id` that lives for `ttl`. At most `max_live` links
    /// of the box may be live at once (so links cannot grow the table without bound);
    /// links past their expiry by more than a day are deleted here.
    pub fn create_port_link(
        &self,
        tenant: &TenantId,
        box_id: &BoxId,
        port: u16,
        ttl: time::Duration,
        max_live: usize,
    ) -> Result<NewPortLink, StoreError> {
        let at = now();
        let pruned_before = format_time(at - time::Duration::days(1))?;
        let at_text = format_time(at)?;
        let token = format!("{LINK_PREFIX}{}", hex(&random::<32>()?));
        let link = PortLink {
            id: format!("pl_{}", hex(&random::<8>()?)),
            tenant_id: tenant.clone(),
            box_id: box_id.clone(),
            port,
            created_at: at,
            expires_at: at + ttl,
            revoked_at: None,
        };
        let expires_text = format_time(link.expires_at)?;
        self.db.write(|tx| {
            tx.execute(
                "DELETE FROM port_links WHERE box_id = ?1 AND expires_at < ?2",
                crate::args![box_id.as_str(), pruned_before],
            )
            .map_err(sql("prune expired share links"))?;
            let live: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM port_links WHERE box_id = ?1 AND revoked_at IS NULL AND expires_at > ?2",
                    crate::args![box_id.as_str(), at_text],
                    |row| row.get(0),
                )
                .map_err(sql("count share links"))?;
            if live as usize >= max_live {
                return Err(StoreError::TooManyPortLinks {
                    box_id: box_id.clone(),
                    max: max_live,
                });
            }
            tx.execute(
                "INSERT INTO port_links (id, tenant_id, box_id, port, token_hash, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                crate::args![
                    link.id,
                    tenant.as_str(),
                    box_id.as_str(),
                    port,
                    token_hash(&token),
                    at_text,
                    expires_text,
                ],
            )
            .map_err(sql("create a share link"))
        })?;
        Ok(NewPortLink { token, link })
    }

    /// The box's links (of one port, or all), oldest first, revoked and expired included.
    pub fn list_port_links(
        &self,
        tenant: &TenantId,
        box_id: &BoxId,
        port: Option<u16>,
    ) -> Result<Vec<PortLink>, StoreError> {
        let rows = self.db.read(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM port_links WHERE tenant_id = ?1 AND box_id = ?2 \
                     AND (CAST(?3 AS BIGINT) IS NULL OR port = ?3) ORDER BY created_at, rowid"
                ),
                crate::args![tenant.as_str(), box_id.as_str(), port],
                raw_link,
            )
            .map_err(sql("list share links"))
        })?;
        rows.into_iter().map(RawLink::parse).collect()
    }

    /// Revokes a link and every session opened with it. Revoking twice is not an error
    /// (the first time stays recorded).
    pub fn revoke_port_link(
        &self,
        tenant: &TenantId,
        box_id: &BoxId,
        link_id: &str,
    ) -> Result<PortLink, StoreError> {
        let at_text = format_time(now())?;
        self.db.write(|tx| {
            let changed = tx
                .execute(
                    "UPDATE port_links SET revoked_at = COALESCE(revoked_at, ?1) \
                     WHERE tenant_id = ?2 AND box_id = ?3 AND id = ?4",
                    crate::args![at_text, tenant.as_str(), box_id.as_str(), link_id],
                )
                .map_err(sql("revoke a share link"))?;
            if changed == 0 {
                return Err(StoreError::PortLinkNotFound {
                    box_id: box_id.clone(),
                    link_id: link_id.to_owned(),
                });
            }
            tx.execute(
                "DELETE FROM port_link_sessions WHERE link_id = ?1",
                crate::args![link_id],
            )
            .map_err(sql("end a share link's sessions"))?;
            tx.query_row(
                &format!("SELECT {COLUMNS} FROM port_links WHERE id = ?1"),
                crate::args![link_id],
                raw_link,
            )
            .map_err(sql("read a share link"))?
            .parse()
        })
    }

    /// The link whose token this is, live or not (the caller says why it does not open).
    pub fn port_link_by_token(&self, token: &str) -> Result<Option<PortLink>, StoreError> {
        if !token.starts_with(LINK_PREFIX) {
            return Ok(None);
        }
        self.db
            .read(|c| {
                c.query_row(
                    &format!("SELECT {COLUMNS} FROM port_links WHERE token_hash = ?1"),
                    crate::args![token_hash(token)],
                    raw_link,
                )
                .optional()
                .map_err(sql("look up a share link"))
            })?
            .map(RawLink::parse)
            .transpose()
    }

    /// Opens a session with the live link `link_id` for at most `max_life` (never past the
    /// link's own expiry). Expired sessions of the link are deleted here.
    pub fn open_link_session(
        &self,
        link_id: &str,
        max_life: time::Duration,
    ) -> Result<Option<NewLinkSession>, StoreError> {
        let at = now();
        let at_text = format_time(at)?;
        let token = format!("{SESSION_PREFIX}{}", hex(&random::<32>()?));
        self.db.write(|tx| {
            let link: Option<PortLink> = tx
                .query_row(
                    &format!("SELECT {COLUMNS} FROM port_links WHERE id = ?1"),
                    crate::args![link_id],
                    raw_link,
                )
                .optional()
                .map_err(sql("look up a share link"))?
                .map(RawLink::parse)
                .transpose()?;
            let Some(link) = link.filter(|l| l.is_live(at)) else {
                return Ok(None);
            };
            tx.execute(
                "DELETE FROM port_link_sessions WHERE link_id = ?1 AND expires_at <= ?2",
                crate::args![link_id, at_text],
            )
            .map_err(sql("prune a share link's sessions"))?;
            let expires_at = link.expires_at.min(at + max_life);
            tx.execute(
                "INSERT INTO port_link_sessions (token_hash, link_id, expires_at) VALUES (?1, ?2, ?3)",
                crate::args![token_hash(&token), link_id, format_time(expires_at)?],
            )
            .map_err(sql("open a share link session"))?;
            Ok(Some(NewLinkSession {
                token: token.clone(),
                expires_at,
            }))
        })
    }

    /// The link of a live session token: `None` when the session is unknown, expired, or
    /// its link is revoked or expired.
    pub fn port_link_by_session(&self, token: &str) -> Result<Option<PortLink>, StoreError> {
        if !token.starts_with(SESSION_PREFIX) {
            return Ok(None);
        }
        let found: Option<(RawLink, String)> = self.db.read(|c| {
            c.query_row(
                "SELECT l.id, l.tenant_id, l.box_id, l.port, l.created_at, l.expires_at, \
                 l.revoked_at, s.expires_at FROM port_link_sessions s \
                 JOIN port_links l ON l.id = s.link_id WHERE s.token_hash = ?1",
                crate::args![token_hash(token)],
                |row| Ok((raw_link(row)?, row.get(7)?)),
            )
            .optional()
            .map_err(sql("look up a share link session"))
        })?;
        let Some((raw, session_expires)) = found else {
            return Ok(None);
        };
        let at = now();
        let link = raw.parse()?;
        let session_live = at < parse_time("port_link_sessions.expires_at", &session_expires)?;
        Ok((session_live && link.is_live(at)).then_some(link))
    }
}

/// A row as read, parsed outside the row closure (so parse errors are ours).
struct RawLink {
    id: String,
    tenant_id: String,
    box_id: String,
    port: u16,
    created_at: String,
    expires_at: String,
    revoked_at: Option<String>,
}

fn raw_link(row: &Row) -> Result<RawLink, DbError> {
    Ok(RawLink {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        box_id: row.get(2)?,
        port: row.get(3)?,
        created_at: row.get(4)?,
        expires_at: row.get(5)?,
        revoked_at: row.get(6)?,
    })
}

impl RawLink {
    fn parse(self) -> Result<PortLink, StoreError> {
        Ok(PortLink {
            id: self.id,
            tenant_id: self
                .tenant_id
                .parse()
                .map_err(|source| StoreError::CorruptId {
                    column: "port_links.tenant_id",
                    source,
                })?,
            box_id: self
                .box_id
                .parse()
                .map_err(|source| StoreError::CorruptId {
                    column: "port_links.box_id",
                    source,
                })?,
            port: self.port,
            created_at: parse_time("port_links.created_at", &self.created_at)?,
            expires_at: parse_time("port_links.expires_at", &self.expires_at)?,
            revoked_at: self
                .revoked_at
                .map(|t| parse_time("port_links.revoked_at", &t))
                .transpose()?,
        })
    }
}

fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}
