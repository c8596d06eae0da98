//! Who is calling: `Authorization: Bearer <api key>`, or a signed-in browser's session
//! cookie (read by `api/session_cookie.rs`; docs/api.md, "Web sessions and pairing");
//! anything else is 401, and two session cookies are 400.
//!
//! A cookie is sent by the browser whoever's page made the request, so a cookie-authenticated
//! request that changes state, or opens a WebSocket, must carry berth's own `Origin`
//! (`api/web_origin.rs`): else `403 bad_origin`. A key is never sent by a browser on its own,
//! so a bearer request needs no such check. A web session is never admin.
//!
//! An authenticated request charges its connection to its tenant
//! ([`crate::admission::connection`]): past the tenant's share of connections it is `429`.

use axum::extract::FromRequestParts;
use berth_store::Principal;
use http::request::Parts;

use crate::admission::connection;
use crate::api::error::ApiError;
use crate::api::{caller_scope, session_cookie, web_origin};
use crate::ctx::Ctx;
use crate::error::OpError;

/// The authenticated caller of a request (`.0.web_session` says how).
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl FromRequestParts<Ctx> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &Ctx) -> Result<Self, ApiError> {
        let key = parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let principal = match key {
            Some(key) => by_key(ctx, key)?,
            None => by_cookie(ctx, parts)?,
        };
        let principal = principal.ok_or(ApiError::Unauthorized)?;
        connection::charge(&parts.extensions, &principal.tenant_id)?;
        caller_scope::record_admin(principal.is_admin);
        Ok(Caller(principal))
    }
}

fn by_key(ctx: &Ctx, key: &str) -> Result<Option<Principal>, ApiError> {
    ctx.store
        .authenticate(key)
        .map_err(|e| ApiError::Op(OpError::Store(Box::new(e))))
}

fn by_cookie(ctx: &Ctx, parts: &Parts) -> Result<Option<Principal>, ApiError> {
    let Some(principal) = session_cookie::principal(ctx, &parts.extensions)? else {
        return Ok(None);
    };
    if web_origin::needs_check(&parts.method, &parts.headers) {
        web_origin::require_own(ctx, &parts.headers)?;
    }
    Ok(Some(principal))
}

impl Caller {
    /// Only an admin key may go on: anyone else (a web session too) gets 403
    /// `permission_denied`.
    pub fn require_admin(&self) -> Result<&Principal, ApiError> {
        if self.0.is_admin && self.0.web_session.is_none() {
            Ok(&self.0)
        } else {
            Err(ApiError::AdminRequired)
        }
    }

    /// Only an API key may manage API keys: a browser's session cannot mint a key that would
    /// outlive its own revocation (a script injected into a page could otherwise keep access).
    pub fn require_api_key(&self) -> Result<&Principal, ApiError> {
        match self.0.web_session {
            None => Ok(&self.0),
            Some(_) => Err(ApiError::ApiKeyRequired),
        }
    }

    /// The web session that authenticated the call; `None` for an API key.
    pub fn web_session(&self) -> Option<&str> {
        self.0.web_session.as_deref()
    }
}
