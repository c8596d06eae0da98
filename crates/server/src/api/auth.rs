//! `Authorization: Bearer <api key>` → the caller's [`Principal`]; anything else is 401.

use axum::extract::FromRequestParts;
use berth_store::Principal;
use http::request::Parts;

use crate::api::caller_scope;
use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::error::OpError;

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
                caller_scope::record_admin(principal.is_admin);
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
