//! The one place the E2B API's errors become a status and E2B's `Error` body
//! (`{"code": <status>, "message": "…"}`), with the retry hints the SDKs honour
//! (`e2b/retry.py`): `Should-Retry: true` and `Retry-After` on a 429, `Should-Retry: false`
//! on every other 5xx the SDK would otherwise retry blindly (a box that cannot start will
//! not start on the third try either). berth's own errors keep their status
//! (`api/error.rs`) and their message.

use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_runtime::error_chain;
use http::StatusCode;

use crate::api::error::ApiError;
use crate::e2b::wire::ErrorBody;
use crate::error::OpError;

/// Seconds a client told 429 waits before retrying.
const RETRY_AFTER_S: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum E2bError {
    /// A berth operation failed, or the request did not parse (or was too large): it
    /// answers with the status and message of berth's own API.
    #[error(transparent)]
    Berth(ApiError),

    #[error("a valid API key is required in the X-API-KEY header (any berth API key)")]
    Unauthorized,

    #[error("sandbox {sandbox_id:?} not found")]
    SandboxNotFound { sandbox_id: String },

    #[error("template {template:?} not found; available: base, {}", available.join(", "))]
    TemplateNotFound {
        template: String,
        available: Vec<String>,
    },

    #[error("{field} must be between 0 and {max_s} seconds (24 hours), got {value}")]
    Timeout {
        field: &'static str,
        value: i64,
        max_s: u64,
    },

    /// A request field that asks for what berth does not do.
    #[error("`{field}` is not supported by berth: {instead}")]
    UnsupportedField {
        field: &'static str,
        instead: &'static str,
    },

    /// An E2B endpoint berth does not serve.
    #[error("{what} is not supported by berth: {instead}")]
    UnsupportedEndpoint {
        what: &'static str,
        instead: &'static str,
    },

    #[error("invalid metadata key {key:?}: {rule}")]
    InvalidMetadata { key: String, rule: &'static str },

    #[error("invalid query parameter `{param}`: {rule}")]
    InvalidQuery {
        param: &'static str,
        rule: &'static str,
    },

    #[error("sandbox {sandbox_id} is already paused")]
    AlreadyPaused { sandbox_id: String },

    #[error("sandbox {sandbox_id} is already running")]
    AlreadyRunning { sandbox_id: String },

    #[error(
        "sandbox {sandbox_id} is paused: connect to it (which resumes it) to give it a timeout"
    )]
    Paused { sandbox_id: String },

    #[error("the Idempotency-Key header takes 1 to 255 of a-z, 0-9 and -")]
    InvalidIdempotencyKey,

    /// A pause that keeps the processes, on a runtime that cannot pause.
    #[error("the {runtime} runtime cannot pause a box with its processes kept; pause with memory false (mode \"filesystem\"), which stops the box and keeps its disk")]
    CannotPause { runtime: String },

    #[error("the Idempotency-Key {key:?} was already used for a different request")]
    IdempotencyMismatch { key: String },

    #[error("no route for {method} {path} in berth's E2B API (docs/e2b.md lists what it serves)")]
    NoRoute { method: http::Method, path: String },

    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: http::Method, path: String },
}

impl From<ApiError> for E2bError {
    fn from(e: ApiError) -> Self {
        E2bError::Berth(e)
    }
}

impl From<OpError> for E2bError {
    fn from(e: OpError) -> Self {
        E2bError::Berth(ApiError::Op(e))
    }
}

impl From<berth_store::StoreError> for E2bError {
    fn from(e: berth_store::StoreError) -> Self {
        E2bError::from(OpError::from(e))
    }
}

impl E2bError {
    fn status(&self) -> StatusCode {
        match self {
            E2bError::Berth(api) => api.status_and_code().0,
            E2bError::Unauthorized => StatusCode::UNAUTHORIZED,
            E2bError::SandboxNotFound { .. }
            | E2bError::TemplateNotFound { .. }
            | E2bError::NoRoute { .. } => StatusCode::NOT_FOUND,
            E2bError::Timeout { .. }
            | E2bError::UnsupportedField { .. }
            | E2bError::InvalidMetadata { .. }
            | E2bError::InvalidQuery { .. }
            | E2bError::InvalidIdempotencyKey => StatusCode::BAD_REQUEST,
            E2bError::UnsupportedEndpoint { .. } | E2bError::CannotPause { .. } => {
                StatusCode::NOT_IMPLEMENTED
            }
            E2bError::AlreadyPaused { .. }
            | E2bError::AlreadyRunning { .. }
            | E2bError::Paused { .. } => StatusCode::CONFLICT,
            E2bError::IdempotencyMismatch { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            E2bError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// What the client reads: berth's errors as berth's API words them (host paths hidden
    /// from a tenant), the others with their cause chain.
    fn message(&self, status: StatusCode) -> String {
        match self {
            E2bError::Berth(api) => api.message(status),
            own => error_chain(own),
        }
    }

    /// E2B's machine-readable `error_code`, where it has one for the case.
    fn error_code(&self) -> Option<&'static str> {
        match self {
            E2bError::IdempotencyMismatch { .. } => Some("idempotency_request_mismatch"),
            _ => None,
        }
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), error = %error_chain(&self), "E2B request failed");
        }
        let body = ErrorBody {
            code: status.as_u16(),
            message: self.message(status),
            error_code: self.error_code(),
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        if status == StatusCode::TOO_MANY_REQUESTS {
            headers.insert("should-retry", http::HeaderValue::from_static("true"));
            headers.insert(http::header::RETRY_AFTER, RETRY_AFTER_S.into());
        } else if status.is_server_error() {
            headers.insert("should-retry", http::HeaderValue::from_static("false"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn answer(error: E2bError) -> (StatusCode, HeaderSummary, serde_json::Value) {
        let response = error.into_response();
        let status = response.status();
        let headers = response.headers();
        let summary = (
            headers
                .get("should-retry")
                .map(|v| v.to_str().unwrap().to_owned()),
            headers
                .get(http::header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_owned()),
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, summary, serde_json::from_slice(&body).unwrap())
    }

    type HeaderSummary = (Option<String>, Option<String>);

    #[tokio::test]
    async fn a_busy_daemon_says_retry_and_a_failed_box_says_do_not() {
        let busy = OpError::Busy {
            what: "connections",
            limit: 4,
            holder: "this tenant",
        };
        let (status, headers, body) = answer(busy.into()).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers, (Some("true".into()), Some("1".into())));
        assert_eq!(body["code"], 429);
        assert!(
            body["message"].as_str().unwrap().contains("retry"),
            "{body}"
        );

        let (status, headers, body) = answer(OpError::NoIdSlot { limit: 8 }.into()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers, (Some("false".into()), None));
        assert_eq!(body["code"], 503);

        let (status, headers, body) = answer(E2bError::SandboxNotFound {
            sandbox_id: "abc".into(),
        })
        .await;
        assert_eq!((status, headers), (StatusCode::NOT_FOUND, (None, None)));
        assert_eq!(
            body,
            serde_json::json!({"code": 404, "message": "sandbox \"abc\" not found"})
        );
    }
}
