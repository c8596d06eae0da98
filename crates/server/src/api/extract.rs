//! Strict request parsing: JSON bodies and queries that refuse unknown fields with a
//! 400 `invalid_request` carrying the parser's message (not axum's plain-text rejections),
//! and size-limited bodies that are refused early (413) without being buffered whole.
//! Uploads are never buffered: an [`Upload`] is the body itself, streamed into the box
//! (how many run at once: [`crate::admission::UPLOADS`]).

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use bytes::Bytes;
use http::request::Parts;
use serde::de::DeserializeOwned;

use crate::api::error::ApiError;

/// Largest JSON body.
pub const JSON_LIMIT_BYTES: u64 = 1024 * 1024;
/// Largest file upload.
pub const UPLOAD_LIMIT_BYTES: u64 = berth_protocol::guest::MAX_FILE_BYTES;

/// A JSON body of at most [`JSON_LIMIT_BYTES`].
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let bytes = read_limited(req, JSON_LIMIT_BYTES).await?;
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::Malformed {
                part: "JSON body",
                detail: e.to_string(),
            })
    }
}

/// An optional JSON body: an empty body is `T::default()`.
#[derive(Debug)]
pub struct OptionalJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let bytes = read_limited(req, JSON_LIMIT_BYTES).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        serde_json::from_slice(&bytes)
            .map(OptionalJson)
            .map_err(|e| ApiError::Malformed {
                part: "JSON body",
                detail: e.to_string(),
            })
    }
}

/// A query string.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| ApiQuery(q))
            .map_err(|rejection| ApiError::Malformed {
                part: "query",
                detail: rejection.body_text(),
            })
    }
}

/// A file upload of at most [`UPLOAD_LIMIT_BYTES`], not yet read: the body is streamed to
/// the box as the box takes it. A declared length over the limit is refused (413) before
/// anything is read, and before a client sending `Expect: 100-continue` sends its body.
#[derive(Debug)]
pub struct Upload {
    pub body: Body,
}

impl<S: Send + Sync> FromRequest<S> for Upload {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        if declared_length(&req).is_some_and(|n| n > UPLOAD_LIMIT_BYTES) {
            return Err(ApiError::PayloadTooLarge {
                limit_bytes: UPLOAD_LIMIT_BYTES,
            });
        }
        Ok(Upload {
            body: req.into_body(),
        })
    }
}

fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads the body, refusing a declared length over `limit` before reading anything, and
/// an undeclared one as soon as it passes `limit`.
async fn read_limited(req: Request, limit: u64) -> Result<Bytes, ApiError> {
    if declared_length(&req).is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit_bytes: limit });
    }
    let body: Body = req.into_body();
    axum::body::to_bytes(body, limit as usize)
        .await
        .map_err(|e| {
            if is_length_limit(&e) {
                ApiError::PayloadTooLarge { limit_bytes: limit }
            } else {
                ApiError::Body(e)
            }
        })
}

fn is_length_limit(error: &axum::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        current = e.source();
    }
    false
}
