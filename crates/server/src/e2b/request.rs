//! What an E2B request carries: the caller (`X-API-KEY`, any berth API key; nothing else
//! authenticates here, a browser's session cookie included), and bodies and queries parsed
//! by berth's own strict, size-limited parsers, whose refusals answer in E2B's shape.

use axum::extract::{FromRequest, FromRequestParts, Request};
use berth_store::Principal;
use http::request::Parts;
use serde::de::DeserializeOwned;

use crate::admission::connection;
use crate::api::caller_scope;
use crate::api::extract::{ApiJson, ApiQuery, OptionalJson};
use crate::ctx::Ctx;
use crate::e2b::error::E2bError;

/// The header E2B's SDKs send the API key in.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The authenticated caller. Charges the request's connection to the caller's tenant, as
/// berth's own API does (`api/auth.rs`).
#[derive(Debug, Clone)]
pub struct E2bCaller(pub Principal);

impl FromRequestParts<Ctx> for E2bCaller {
    type Rejection = E2bError;

    async fn from_request_parts(parts: &mut Parts, ctx: &Ctx) -> Result<Self, E2bError> {
        let key = parts
            .headers
            .get(API_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .ok_or(E2bError::Unauthorized)?;
        let principal = ctx.store.authenticate(key)?.ok_or(E2bError::Unauthorized)?;
        connection::charge(&parts.extensions, &principal.tenant_id)?;
        caller_scope::record_admin(principal.is_admin);
        Ok(E2bCaller(principal))
    }
}

/// A JSON body (berth's [`ApiJson`]: at most 1 MiB, refused early when declared larger).
#[derive(Debug)]
pub struct E2bJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for E2bJson<T> {
    type Rejection = E2bError;

    async fn from_request(req: Request, state: &S) -> Result<Self, E2bError> {
        let ApiJson(body) = ApiJson::from_request(req, state).await?;
        Ok(E2bJson(body))
    }
}

/// An optional JSON body: an empty one is `T::default()`.
#[derive(Debug)]
pub struct E2bOptionalJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for E2bOptionalJson<T> {
    type Rejection = E2bError;

    async fn from_request(req: Request, state: &S) -> Result<Self, E2bError> {
        let OptionalJson(body) = OptionalJson::from_request(req, state).await?;
        Ok(E2bOptionalJson(body))
    }
}

/// A query string.
#[derive(Debug)]
pub struct E2bQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for E2bQuery<T> {
    type Rejection = E2bError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, E2bError> {
        let ApiQuery(query) = ApiQuery::from_request_parts(parts, state).await?;
        Ok(E2bQuery(query))
    }
}
