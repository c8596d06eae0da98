//! `Authorization: Bearer <api key>` → the caller's [`Principal`]; anything else is 401.

use std::cell::Cell;
use std::future::Future;

use axum::extract::FromRequestParts;
use berth_store::Principal;
use http::request::Parts;

use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::error::OpError;

tokio::task_local! {
    /// Whether the request's caller was authenticated as an admin: an error's text keeps
    /// host paths for the admin (who owns the host) and hides them from a tenant, without
    /// every error carrying who asked.
    static CALLER_IS_ADMIN: Cell<bool>;
}

/// Runs one request's handling (every route: `api::log_request`) where [`Caller`] can
/// record who called.
pub async fn caller_scope<F: Future>(request: F) -> F::Output {
    CALLER_IS_ADMIN.scope(Cell::new(false), request).await
}

/// Whether this request's caller is an admin; false before authentication and outside a
/// request.
pub fn caller_is_admin() -> bool {
    CALLER_IS_ADMIN.try_with(Cell::get).unwrap_or(false)
}

/// The authenticated caller of a request.
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
            .map(str::trim)
            .ok_or(ApiError::Unauthorized)?;
        match ctx
            .store
            .authenticate(key)
            .map_err(|e| ApiError::Op(OpError::Store(Box::new(e))))?
        {
            Some(principal) => {
                // Outside `caller_scope` (a handler called directly) there is nothing to
                // record, and errors stay redacted.
                let _ = CALLER_IS_ADMIN.try_with(|admin| admin.set(principal.is_admin));
                Ok(Caller(principal))
            }
            None => Err(ApiError::Unauthorized),
        }
    }
}

impl Caller {
    /// Only an admin key may go on: anyone else gets 403 `permission_denied`.
    pub fn require_admin(&self) -> Result<&Principal, ApiError> {
        if self.0.is_admin {
            Ok(&self.0)
        } else {
            Err(ApiError::AdminRequired)
        }
    }
}
